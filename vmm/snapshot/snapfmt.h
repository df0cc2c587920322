/* The snapshot state-file format (docs/snapshot-format.md): a 64-byte
 * header (magic, version, payload length, XXH3-64 checksum over the whole
 * file with the checksum field zeroed) and a payload of typed sections.
 * Pure: no KVM headers; parsing checks every length before using it and
 * the size cap before any allocation, so it is unit-tested and fuzzed. */
#ifndef MOAT_SNAPFMT_H
#define MOAT_SNAPFMT_H

#include <stddef.h>
#include <stdint.h>

#define SNAP_MAGIC        "MOATSNAP"
#define SNAP_VERSION      3u   /* 2: one self-describing section per device (SNAP_DEV); 3: its record is
                                   the options that made it */
#define SNAP_HEADER_SIZE  64u
#define SNAP_MAX_PAYLOAD  (16u << 20)   /* 16 MiB */
#define SNAP_MAX_SECTIONS 1024u

/* Section types. index: vCPU number, or 0. */
enum snap_type {
    SNAP_META = 1,       /* struct snap_meta */
    SNAP_DIFF_PARENT = 2,/* diff snapshots: struct snap_parent + paths (vmm/snapshot/snapchain.h) */
    SNAP_DIFF_PAGES = 3, /* diff snapshots: the page bitmap (vmm/snapshot/snapchain.h) */
    SNAP_VCPU_REGS = 16, /* struct kvm_regs */
    SNAP_VCPU_SREGS,     /* struct kvm_sregs */
    SNAP_VCPU_FPU,       /* struct kvm_fpu */
    SNAP_VCPU_XSAVE,     /* struct kvm_xsave (4096 bytes) */
    SNAP_VCPU_XCRS,      /* struct kvm_xcrs */
    SNAP_VCPU_MSRS,      /* array of struct snap_msr */
    SNAP_VCPU_LAPIC,     /* struct kvm_lapic_state */
    SNAP_VCPU_MP_STATE,  /* struct kvm_mp_state */
    SNAP_VCPU_EVENTS,    /* struct kvm_vcpu_events */
    SNAP_VCPU_DEBUGREGS, /* struct kvm_debugregs */
    SNAP_VM_PIC_MASTER = 48, /* struct kvm_irqchip */
    SNAP_VM_PIC_SLAVE,
    SNAP_VM_IOAPIC,
    SNAP_VM_PIT,         /* struct kvm_pit_state2 */
    SNAP_VM_CLOCK,       /* struct kvm_clock_data */
    SNAP_DEV_SERIAL = 80,/* struct serial_state (devices/legacy/serial.h) */
    SNAP_DEV_MOATDEV,    /* struct moatdev_state (devices/legacy/moatdev.h) */
    /* 82 .. 84: version 1's per-slot virtio, drive and vsock sections */
    SNAP_DEV = 85,       /* index = virtio-mmio slot: struct snap_dev (one per device) */
    SNAP_DEV_I8042 = 86, /* struct i8042_state (devices/legacy/i8042.h); absent in older files */
};

struct snap_meta {
    uint64_t mem_size;       /* bytes; the memory file must be exactly this */
    uint32_t ncpus;
    uint32_t boot_kind;
    uint32_t flags;          /* SNAP_META_* */
    int32_t guest_status;    /* -1: none reported yet */
    uint64_t created_unix_ns;
};
#define SNAP_META_PVM 1u
#define SNAP_META_DIRTY_LOG 2u  /* the VM tracked written pages (a restore does too) */

struct snap_msr {
    uint32_t index;
    uint32_t reserved;
    uint64_t data;
};

/* A virtio device (version 3): one SNAP_DEV section per device, index =
 * its virtio-mmio slot, slots 0 .. n-1 without gaps. The fixed part, then
 * id_len bytes of the device's id (unique among the VM's devices of its
 * type; no NUL), state_len bytes of its transport state (struct
 * virtio_mmio_state, devices/virtio/virtio_mmio.h), then data_len bytes of
 * its record: the options that made it (devopt_encode,
 * devices/virtio/devopt.h). A restore finds the kind by device_id, matches
 * the device to the configuration's overrides by type and id and makes it
 * again from those options (vmm/snapshot/snapdev.c reads and writes the
 * sections; vmm/core/devtab.c makes the devices). */
struct snap_dev {
    uint32_t device_id;      /* VIRTIO_ID_* (devices/virtio/virtio_dev.h) */
    uint32_t id_len;         /* 1 .. SNAP_DEV_ID_MAX */
    uint32_t state_len;      /* 1 .. SNAP_DEV_STATE_MAX */
    uint32_t data_len;       /* 0 .. SNAP_DEV_DATA_MAX */
};
#define SNAP_DEV_ID_MAX    32u
#define SNAP_DEV_STATE_MAX 65536u
#define SNAP_DEV_DATA_MAX  65536u

/* A decoded SNAP_DEV section; state and data point into the section. */
struct snap_dev_view {
    uint32_t device_id;
    char id[SNAP_DEV_ID_MAX + 1];
    const uint8_t *state;
    uint32_t state_len;
    const uint8_t *data;
    uint32_t data_len;
};

/* Encode: the length, or -EINVAL (empty id, NUL inside, device_id 0, no
 * state) / -ENAMETOOLONG / -E2BIG (state or data over its cap) / -ENOSPC.
 * Decode: 0, or -EINVAL with *why; nothing outside data[0, len) is read. */
long snap_dev_encode(uint8_t *buf, size_t cap, uint32_t device_id, const char *id,
                     const void *state, size_t state_len, const void *data, size_t data_len);
int snap_dev_decode(const uint8_t *data, uint64_t len, struct snap_dev_view *v, const char **why);

/* The metadata section, checked field by field before any is used
 * (restore validates everything it reads; each legacy device checks its
 * own record: serial_state_check, i8042_state_check, moatdev_state_check):
 * 0, or -EINVAL with *why naming the field. max_cpus: the most vCPUs this
 * build allows. */
int snap_meta_check(const struct snap_meta *m, unsigned max_cpus, const char **why);

/* Building a state file. Errors are sticky: snapw_finish reports them. */
struct snap_writer {
    uint8_t *buf;
    size_t len, cap;
    int err;
};
void snapw_init(struct snap_writer *w);
void snapw_section(struct snap_writer *w, uint32_t type, uint32_t index, const void *data, uint64_t len);
/* Fill in the header; out and outlen get the whole file (owned by w). */
int snapw_finish(struct snap_writer *w, const uint8_t **out, size_t *outlen);
void snapw_free(struct snap_writer *w);

struct snap_section {
    uint32_t type, index;
    uint64_t len;
    const uint8_t *data;
};

/* Check a whole state file: header, version, length, checksum, section
 * framing. 0 and the sections (pointing into buf) on success; -EINVAL
 * (malformed or corrupted), -EPROTONOSUPPORT (other version), -EFBIG (over
 * the cap), -E2BIG (more than max sections); *why says which. */
int snap_parse(const uint8_t *buf, size_t len, struct snap_section *secs, size_t max,
               size_t *n, const char **why);
/* The section (type, index), or NULL. */
const struct snap_section *snap_find(const struct snap_section *secs, size_t n,
                                     uint32_t type, uint32_t index);

#endif
