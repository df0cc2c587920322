/* The VM's device table: every virtio device of a VM is one struct vm_dev
 * (vmm/core/vm.h): its kind (devices/virtio/virtio_kind.h: how it is made
 * from options), its transport, its id and the options that made it, which
 * are its record in a snapshot (struct devtab_rec below; the snapshot layer
 * writes and parses the file's sections: vmm/snapshot/snapdev.c). Pause,
 * resume, snapshot, restore, fork and teardown iterate the table; the kinds
 * it knows are one list in devtab.c. Adding a device: docs/architecture.md,
 * "Adding a device". */
#ifndef MOAT_DEVTAB_H
#define MOAT_DEVTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "devices/blk/blk_kind.h"
#include "devices/vsock/vsock_kind.h"
#include "include/moat.h"

struct moat_vm;
struct virtio_mmio_state;

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

/* Snapshots. A device as a snapshot records it, in no file format: its
 * kind's virtio device id, its id (unique per kind), its transport's state
 * (struct virtio_mmio_state) and its record (the options that made it,
 * devopt_encode). On restore every field is untrusted. */
struct devtab_rec {
    uint32_t device_id;
    const char *id;
    const void *state;
    size_t state_len;
    const void *data;
    size_t data_len;
};

/* The record of the device in slot (< vm->ndev; the VM paused): its
 * transport's state into *st, its options encoded into buf (cap bytes);
 * out points at them. 0 or -errno. */
int devtab_save(struct moat_vm *vm, unsigned slot, struct virtio_mmio_state *st, uint8_t *buf, size_t cap,
                struct devtab_rec *out);
/* Check recs[i], a recorded device in slot i, against itself and recs[0 ..
 * i-1]: its kind known, its transport state's size, its id not another's
 * of its kind. 0, or -EINVAL with err set ("state file: ..."). */
int devtab_rec_check(const struct devtab_rec *recs, unsigned i, struct moat_error *err);
/* Recreate the recorded devices recs[0 .. n-1] (slots 0 .. n-1; each is
 * checked again) with the restore configuration's overrides and load their
 * transport state; not started (moat_start / resume does that). Errors
 * name the device. */
int devtab_restore(struct moat_vm *vm, const struct moat_restore_config *rc, const struct devtab_rec *recs,
                   unsigned n, struct moat_error *err);
/* Restore overrides for n devices of one type recorded with ids snap_ids
 * (slot order), given m overrides whose ids are ovr_ids (NULL entries: no
 * id). Overrides with an id take the recorded device with that id; the
 * others take the remaining devices in slot order. map[i] gets the
 * override for recorded device i. 0, or -EINVAL with a message in why
 * naming the device (m != n, an id not recorded, an id given twice). Pure. */
int devtab_match_overrides(const char *const *snap_ids, size_t n, const char *const *ovr_ids, size_t m,
                           size_t *map, char *why, size_t wlen);

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
