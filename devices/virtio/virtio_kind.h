/* A kind of virtio device, as a VM (vmm/core/devtab.c) or the vhost-user
 * server (`moat device`) makes it: from its options, checked first; again
 * from a snapshot, whose record for the device is the options that made it
 * (devices/virtio/devopt.h), with a restore's override merged in. Each
 * device family defines its kind next to its device (devices/blk/
 * blk_kind.c, devices/vsock/vsock_kind.c); the VM's table lists them. No
 * KVM, no VM: a kind only makes devices (docs/architecture.md, "Adding a
 * device"). */
#ifndef MOAT_VIRTIO_KIND_H
#define MOAT_VIRTIO_KIND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "devices/virtio/devopt.h"
#include "devices/virtio/virtio_dev.h"

#define VIRTIO_KIND_ID_MAX 32u   /* bytes of a device's id (the snapshot's SNAP_DEV_ID_MAX) */

/* What a kind made: the device (its transport takes ops/dev) and the
 * kind's own record of it (freed with the kind's free). */
struct virtio_made {
    const struct virtio_dev_ops *ops;
    void *dev;
    void *priv;
};

/* The typed fields of moat_config and moat_restore_config (include/moat.h)
 * a kind's devices are also made from, besides moat_config.devices: the
 * sugar of --drive and --vsock. The VM's table (vmm/core/devtab.c) turns
 * them into the kind's options by this, never by naming the kind. At most
 * one kind per value but NONE. */
enum virtio_kind_typed {
    VIRTIO_KIND_TYPED_NONE = 0,
    VIRTIO_KIND_TYPED_DRIVES,   /* drives, drive_overlays, drive_direct: one device each */
    VIRTIO_KIND_TYPED_VSOCK,    /* vsock_uds, vsock_cid: one device if vsock_uds */
};

struct virtio_kind {
    const char *type;           /* moat_device.type, --device TYPE: "blk", "vsock" */
    const char *name;           /* in messages: "drive", "vsock" */
    uint32_t device_id;         /* VIRTIO_ID_*: matches snapshot sections */
    unsigned max_per_vm;        /* 0: as many as there are slots */
    enum virtio_kind_typed typed;   /* typed configuration fields it is made from, or NONE */
    /* A kernel parameter a Linux guest needs with this device, or NULL. */
    const char *cmdline_extra;
    /* Served over vhost-user (`moat device`): the queues the frontend
     * hands over, all needed before the device starts (0: the device's
     * own, started on a prefix), and their largest size (0: the device's
     * own). */
    unsigned vhost_user_nqueues;
    uint16_t vhost_user_queue_max;
    /* The options it takes, and those a restore override may give anew
     * (the others are the snapshot's); NULL-terminated. */
    const char *const *keys;
    const char *const *override_keys;
    /* An override gives all its override keys anew (one it does not give
     * is dropped: blk's flags), or only those it gives (the rest stay the
     * snapshot's: net's MAC). */
    bool override_whole;
    /* Keys that exclude each other by group (NULL, or NULL-terminated
     * groups of NULL-terminated keys: net's {tap} and {user, forward,
     * host_loopback}): an override that gives a key of one group drops
     * the recorded keys of the others (a device moved to another
     * backend). */
    const char *const *const *override_groups;
    /* Check options before any KVM work (values, files): 0 or -errno
     * with why. Only keys in keys reach it. */
    int (*check)(const struct devopts *o, char *why, size_t wlen);
    /* The id that names the device in snapshots (unique per kind in a
     * VM): from its options or, k being its ordinal among the VM's
     * devices of this kind, a default. Into id (VIRTIO_KIND_ID_MAX + 1). */
    void (*id)(const struct devopts *o, unsigned k, char *id);
    /* Make the device from checked options; id: its id (for messages). It
     * may add to o the values it chose itself (a generated MAC address):
     * o is what the snapshot records. restoring: it comes back from
     * a snapshot (a kind may refuse what a fresh one would take over, e.g.
     * a socket still served). seccomp: the VM's filter mode (enum
     * sc_mode), for a thread a kind starts here (vsock's connector). 0 or
     * -errno with why. */
    int (*create)(struct devopts *o, const char *id, bool restoring, int seccomp, struct virtio_made *out,
                  char *why, size_t wlen);
    /* A restore's override (may be NULL): rec the recorded options, merged
     * rec with the override's keys given anew; refuse a merge that would
     * lose or break something (0 or -errno with why). */
    int (*override_check)(const struct devopts *rec, const struct devopts *merged, char *why, size_t wlen);
    /* A fork's child (MOAT_F_FORK_CHILD; may be NULL): set in o (the
     * record) what must differ from the parent's (net: a new MAC); an
     * override (ovr, NULL: none) still wins. -errno with why when the
     * child cannot have what the record says and ovr gives nothing else
     * (net: its parent's TAP). */
    int (*fork_identity)(struct devopts *o, const struct devopts *ovr, char *why, size_t wlen);
    /* After a restore made it (may be NULL): true if the guest needs the
     * post-restore fix-up through the agent (vmm/agent/fixup.c). */
    bool (*restored)(void *priv);
    /* Change the device while it runs (any thread; may be NULL: nothing
     * can change): key one of set_keys. 0 or -errno with why. */
    int (*set)(void *priv, const char *key, const char *value, char *why, size_t wlen);
    const char *const *set_keys;
    /* The device's state as text (any thread; may be NULL): key one of
     * get_keys; snprintf-like (the length of the whole text). */
    long (*get)(void *priv, const char *key, char *buf, size_t len);
    const char *const *get_keys;
    void (*free)(void *priv);
};

#endif
