/* The VM's device table: every virtio device of a VM is one struct vm_dev
 * (vmm/core/vm.h) whose kind says how it is created from a moat_config, saved
 * into a snapshot (its own SNAP_DEV section: vmm/snapshot/snapfmt.h) and recreated
 * from one. Pause, resume, snapshot, restore, fork and teardown iterate
 * the table; nothing outside this file and the kinds knows which devices
 * exist. Adding a device: docs/architecture.md, "Adding a device". */
#ifndef MOAT_DEVTAB_H
#define MOAT_DEVTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "include/moat.h"
#include "vmm/snapshot/snapfmt.h"
#include "vmm/transport/virtio_mmio_kvm.h"

struct moat_vm;
struct snap_writer;
struct vm_dev;
struct virtio_blk;
struct vsock_dev;
struct virtio_dev_ops;

/* What a restore has decided for the devices of one kind before any is
 * created (the configuration's overrides matched to the recorded devices). */
struct devtab_restore {
    const struct moat_restore_config *rc;
    size_t drive_map[VIRTIO_MMIO_KVM_MAX_SLOTS];   /* recorded drive -> override */
    /* moat_restore_config.devices matched to the recorded devices: the
     * override's options for the device in slot i, or NULL. */
    const struct devopts *ovr[VIRTIO_MMIO_KVM_MAX_SLOTS];
};

struct devopts;

struct vm_dev_kind {
    const char *name;           /* "drive", "vsock": in messages */
    const char *type;           /* moat_device.type / --device TYPE: "blk", "vsock" */
    uint32_t device_id;         /* VIRTIO_ID_*: matches SNAP_DEV sections */
    /* A kernel parameter a Linux guest needs with this device, or NULL. */
    const char *cmdline_extra;
    /* From a moat_device's options: check them before any KVM work (keys,
     * values, files: 0 or -errno with why), then add the device in the
     * next slot. */
    int (*check_opts)(const struct devopts *o, char *why, size_t wlen);
    int (*add_opts)(struct moat_vm *vm, const struct devopts *o, struct moat_error *err);
    /* The kind's record for a snapshot (SNAP_DEV data): its length, or
     * -errno. The device is stopped. */
    long (*save)(const struct vm_dev *d, uint8_t *buf, size_t cap);
    /* Recreate the device in the next slot from its record v (untrusted:
     * decoded by a pure parser) and the restore configuration; k: its
     * ordinal among the recorded devices of this kind. */
    int (*restore)(struct moat_vm *vm, const struct devtab_restore *ctx, const struct snap_dev_view *v,
                   unsigned k, struct moat_error *err);
    void (*free)(void *priv);
    /* The options a restore override (moat_restore_config.devices) may
     * give: NULL-terminated; id= names the device and is matched. */
    const char *const *override_keys;
};

/* Add a device of kind to the next slot: the transport takes ops/dev (on
 * failure dev is destroyed), the table takes id (copied) and priv (freed
 * with kind->free, also on failure). */
int devtab_add(struct moat_vm *vm, const struct vm_dev_kind *kind, const char *id, void *priv,
               const struct virtio_dev_ops *ops, void *dev, struct moat_error *err);
/* Destroy every device (transports first: their threads drain), then the
 * kinds' records. */
void devtab_free(struct moat_vm *vm);

/* Snapshots: one SNAP_DEV section per device, in slot order. */
int devtab_save(struct moat_vm *vm, struct snap_writer *w);
/* Recreate the recorded devices (SNAP_DEV sections) and load their
 * transport state; not started (moat_start / resume does that). Errors
 * name the device. */
int devtab_restore(struct moat_vm *vm, const struct moat_restore_config *rc,
                   const struct snap_section *secs, size_t nsecs, struct moat_error *err);

/* moat_config.devices: check each (known type, its options) and the
 * totals (slots, one vsock) before any KVM work; add them in the next
 * slots. Errors name the device. */
int devtab_check_devices(const struct moat_config *cfg, struct moat_error *err);
int devtab_add_devices(struct moat_vm *vm, const struct moat_device *d, size_t n, struct moat_error *err);
/* The kernel parameter devices of this type need (NULL: none or unknown). */
const char *devtab_cmdline_extra(const char *type);

/* virtio-blk drives from a config (the next slots, in order). overlays:
 * NULL, or n entries (NULL or a copy-on-write overlay path); direct: NULL,
 * or n entries (nonzero: O_DIRECT). */
int vm_setup_drives(struct moat_vm *vm, const struct moat_drive *drives, const char *const *overlays,
                    const int *direct, size_t n, struct moat_error *err);
/* A drive's id in the table (and in snapshots): its serial when it has
 * one, else its name by ordinal k ("vda", "vdb", ...; name: 16 bytes). */
const char *vm_drive_table_id(const struct moat_drive *d, unsigned k, char name[16]);
/* The vsock device in the next slot (uds, cid: moat_config's meaning). */
int vm_setup_vsock(struct moat_vm *vm, const char *uds, uint64_t cid, struct moat_error *err);

/* The drives (slot order) and the vsock device, for the code that works
 * on them (fork, exec, the post-restore fix-up). */
struct vm_drive {
    char *path, *id, *overlay;  /* id, overlay: NULL if none */
    bool read_only;
    struct virtio_blk *blk;     /* owned by its transport */
};
struct vm_vsock {
    char *uds;
    struct vsock_dev *dev;      /* owned by its transport */
};
unsigned vm_ndrives(const struct moat_vm *vm);
const struct vm_drive *vm_drive(const struct moat_vm *vm, unsigned i);  /* NULL if i >= vm_ndrives */
const struct vm_vsock *vm_vsock(const struct moat_vm *vm);              /* NULL: none */
const char *vm_vsock_uds(const struct moat_vm *vm);                     /* NULL: no vsock */
struct vsock_dev *vm_vsock_dev(const struct moat_vm *vm);               /* NULL: no vsock */

#endif
