/* The VM's device table: every virtio device of a VM is one struct vm_dev
 * (vmm/core/vm.h): its kind (devices/virtio/virtio_kind.h: how it is made
 * from options), its transport, its id and the options that made it, which
 * are its record in a snapshot (one SNAP_DEV section each: vmm/snapshot/
 * snapfmt.h). Pause, resume, snapshot, restore, fork and teardown iterate
 * the table; the kinds it knows are one list in devtab.c. Adding a device:
 * docs/architecture.md, "Adding a device". */
#ifndef MOAT_DEVTAB_H
#define MOAT_DEVTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "devices/blk/blk_kind.h"
#include "devices/vsock/vsock_kind.h"
#include "include/moat.h"
#include "vmm/snapshot/snapfmt.h"

struct moat_vm;
struct snap_writer;

/* The kind of this type ("blk", "vsock", ...), or NULL. */
const struct virtio_kind *devtab_kind(const char *type);
/* The types moat has, for messages ("blk, vsock, net"), into buf. */
#define DEVTAB_TYPES_LEN 128
const char *devtab_types(char buf[DEVTAB_TYPES_LEN]);

/* moat_config's devices, in slot order: its drives, its vsock device, then
 * moat_config.devices. check: each known, its options valid, totals (slots,
 * a kind's limit per VM) and ids (unique per kind), before any KVM work;
 * add: make them in the next slots. Errors name the device. */
int devtab_check_config(const struct moat_config *cfg, struct moat_error *err);
int devtab_add_config(struct moat_vm *vm, const struct moat_config *cfg, struct moat_error *err);
/* The kernel parameters the devices of cfg need, each once: up to max
 * into out; how many. */
size_t devtab_cmdline_extras(const struct moat_config *cfg, const char **out, size_t max);
/* How many devices (slots) cfg has. */
size_t devtab_config_count(const struct moat_config *cfg);

/* Destroy every device (transports first: their threads drain), then the
 * kinds' records. */
void devtab_free(struct moat_vm *vm);

/* Snapshots: one SNAP_DEV section per device, in slot order. */
int devtab_save(struct moat_vm *vm, struct snap_writer *w);
/* Recreate the recorded devices (SNAP_DEV sections) with the restore
 * configuration's overrides and load their transport state; not started
 * (moat_start / resume does that). Errors name the device. */
int devtab_restore(struct moat_vm *vm, const struct moat_restore_config *rc,
                   const struct snap_section *secs, size_t nsecs, struct moat_error *err);

/* The devices of kind (slot order): how many; the kind's record
 * (virtio_made.priv) of the k-th, or NULL if k >= devtab_count. The caller
 * names the kind: the table names none. */
unsigned devtab_count(const struct moat_vm *vm, const struct virtio_kind *kind);
void *devtab_nth(const struct moat_vm *vm, const struct virtio_kind *kind, unsigned k);

/* The drives (slot order) and the vsock device, for the code that works
 * on them (fork, exec, the post-restore fix-up). */
static inline unsigned vm_ndrives(const struct moat_vm *vm)
{
    return devtab_count(vm, &blk_kind);
}
/* NULL if i >= vm_ndrives */
static inline const struct blk_drive *vm_drive(const struct moat_vm *vm, unsigned i)
{
    return devtab_nth(vm, &blk_kind, i);
}
/* NULL: none */
static inline const struct vsock_rec *vm_vsock(const struct moat_vm *vm)
{
    return devtab_nth(vm, &vsock_kind, 0);
}
/* NULL: no vsock */
static inline const char *vm_vsock_uds(const struct moat_vm *vm)
{
    const struct vsock_rec *v = vm_vsock(vm);
    return v ? v->uds : NULL;
}
/* NULL: no vsock */
static inline struct vsock_dev *vm_vsock_dev(const struct moat_vm *vm)
{
    const struct vsock_rec *v = vm_vsock(vm);
    return v ? v->dev : NULL;
}

#endif
