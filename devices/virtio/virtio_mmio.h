/* virtio-mmio transport, version 2 (modern), as a pure register/state model:
 * register reads and writes in, callbacks out. The KVM wiring (MMIO exits or
 * ioeventfd for QueueNotify, irqfd for the interrupt line) stays outside.
 *
 * Rules enforced here (virtio 1.2, 2.1, 3.1, 4.2):
 *  - device status moves only along ACKNOWLEDGE -> DRIVER -> FEATURES_OK ->
 *    DRIVER_OK (one legal transition table, see virtio_mmio.c); the driver
 *    may set FAILED at any time; writing 0 resets; NEEDS_RESET is set only
 *    by the device (virtio_mmio_set_needs_reset) and survives driver writes;
 *    the driver can never clear a bit except by reset. Illegal writes are
 *    ignored and counted (illegal_writes).
 *  - FEATURES_OK sticks only if the driver's features are a subset of the
 *    device's and include VIRTIO_F_VERSION_1; otherwise it reads back clear.
 *    Driver feature bits that were not offered are masked off (and make
 *    FEATURES_OK fail). Feature writes count only between DRIVER and
 *    FEATURES_OK.
 *  - queue registers are writable only after FEATURES_OK and before
 *    DRIVER_OK, and only while the selected queue is not ready; QueueReady=1
 *    validates the queue (virtq_enable: size, alignment, rings in RAM) and
 *    stays 0 on failure.
 *  - registers below 0x100 take 32-bit aligned accesses only (others read
 *    0 / are ignored); config space at 0x100 goes to the device callbacks.
 *
 * Locking: each struct virtio_mmio has its own recursive mutex; register
 * accesses and the device-side functions below take it, so vCPU threads
 * and device worker threads may call them concurrently. Callbacks other
 * than queue_notify run with the lock held (they may call back into the
 * virtio_mmio_* functions from the same thread); queue_notify runs without
 * it. */
#ifndef MOAT_VIRTIO_MMIO_H
#define MOAT_VIRTIO_MMIO_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "devices/virtio/virtq.h"
#include "vmm/base/bus.h"
#include "vmm/base/gmem.h"

#define VIRTIO_MMIO_MAGIC_VALUE     0x74726976u   /* "virt" */
#define VIRTIO_MMIO_VERSION_MODERN  2u
#define VIRTIO_MMIO_VENDOR_MOAT     0x54414f4du   /* "MOAT" */

/* Register offsets. */
#define VIRTIO_MMIO_MAGIC               0x000
#define VIRTIO_MMIO_VERSION             0x004
#define VIRTIO_MMIO_DEVICE_ID           0x008
#define VIRTIO_MMIO_VENDOR_ID           0x00c
#define VIRTIO_MMIO_DEVICE_FEATURES     0x010
#define VIRTIO_MMIO_DEVICE_FEATURES_SEL 0x014
#define VIRTIO_MMIO_DRIVER_FEATURES     0x020
#define VIRTIO_MMIO_DRIVER_FEATURES_SEL 0x024
#define VIRTIO_MMIO_QUEUE_SEL           0x030
#define VIRTIO_MMIO_QUEUE_NUM_MAX       0x034
#define VIRTIO_MMIO_QUEUE_NUM           0x038
#define VIRTIO_MMIO_QUEUE_READY         0x044
#define VIRTIO_MMIO_QUEUE_NOTIFY        0x050
#define VIRTIO_MMIO_INTERRUPT_STATUS    0x060
#define VIRTIO_MMIO_INTERRUPT_ACK       0x064
#define VIRTIO_MMIO_STATUS              0x070
#define VIRTIO_MMIO_QUEUE_DESC_LOW      0x080
#define VIRTIO_MMIO_QUEUE_DESC_HIGH     0x084
#define VIRTIO_MMIO_QUEUE_DRIVER_LOW    0x090
#define VIRTIO_MMIO_QUEUE_DRIVER_HIGH   0x094
#define VIRTIO_MMIO_QUEUE_DEVICE_LOW    0x0a0
#define VIRTIO_MMIO_QUEUE_DEVICE_HIGH   0x0a4
#define VIRTIO_MMIO_CONFIG_GENERATION   0x0fc
#define VIRTIO_MMIO_CONFIG              0x100
#define VIRTIO_MMIO_SIZE                0x1000

/* Device status bits. */
#define VIRTIO_STATUS_ACKNOWLEDGE   1u
#define VIRTIO_STATUS_DRIVER        2u
#define VIRTIO_STATUS_DRIVER_OK     4u
#define VIRTIO_STATUS_FEATURES_OK   8u
#define VIRTIO_STATUS_NEEDS_RESET   64u
#define VIRTIO_STATUS_FAILED        128u

/* InterruptStatus bits. */
#define VIRTIO_MMIO_INT_VRING       1u
#define VIRTIO_MMIO_INT_CONFIG      2u

#define VIRTIO_MMIO_MAX_QUEUES      8

struct virtio_mmio_ops {
    /* The driver kicked queue q (ready, DRIVER_OK). Called without the lock. */
    void (*queue_notify)(void *opaque, unsigned q);
    /* DRIVER_OK was set: start the device. Non-zero -> NEEDS_RESET. */
    int (*activate)(void *opaque);
    /* The driver reset the device (status 0): stop using the queues. */
    void (*reset)(void *opaque);
    /* Config space, off relative to 0x100, len 1/2/4/8; may be NULL (reads 0). */
    void (*config_read)(void *opaque, uint32_t off, uint8_t *data, uint32_t len);
    void (*config_write)(void *opaque, uint32_t off, const uint8_t *data, uint32_t len);
    /* Interrupt line level changed (level = InterruptStatus != 0). */
    void (*set_irq)(void *opaque, bool level);
};

struct virtio_mmio_params {
    uint32_t device_id;         /* e.g. 2 = block */
    uint32_t vendor_id;         /* 0: VIRTIO_MMIO_VENDOR_MOAT */
    uint64_t device_features;   /* VIRTIO_F_VERSION_1 is added */
    unsigned nqueues;           /* 1 .. VIRTIO_MMIO_MAX_QUEUES */
    uint16_t queue_max;         /* QueueNumMax, power of two <= 32768 */
};

/* Locks: `lock` guards the registers (the vCPU's accesses, reset, save,
 * load); `irq_lock` guards only InterruptStatus and the device's
 * NEEDS_RESET request, and is taken inside `lock` or alone. The device side
 * (virtio_mmio_interrupt, virtio_mmio_set_needs_reset) takes irq_lock
 * only, so a device thread never waits for a register access — a driver
 * reset can hold `lock` while it stops (joins) the device thread. */
struct virtio_mmio {
    pthread_mutex_t lock;
    pthread_mutex_t irq_lock;
    const struct virtio_mmio_ops *ops;
    void *opaque;
    const struct gmem *mem;
    uint32_t device_id, vendor_id;
    uint64_t device_features;
    uint64_t driver_features;       /* masked by device_features */
    uint64_t driver_requested;      /* as written, unmasked */
    uint32_t device_features_sel, driver_features_sel;
    uint32_t queue_sel;
    uint32_t status;
    uint32_t interrupt_status;      /* under irq_lock */
    bool nr_request;                /* under irq_lock: the device asked for NEEDS_RESET */
    bool live;                      /* under irq_lock: DRIVER_OK is set */
    uint32_t config_generation;
    unsigned nqueues;
    struct virtq q[VIRTIO_MMIO_MAX_QUEUES];
    unsigned illegal_writes;        /* ignored writes, for tests and logs */
};

/* 0 or -EINVAL (bad params). mem is the VM's guest memory (kept by
 * reference). virtio_mmio_destroy() frees the lock. */
int virtio_mmio_init(struct virtio_mmio *vm, const struct virtio_mmio_params *p,
                     const struct gmem *mem, const struct virtio_mmio_ops *ops, void *opaque);
void virtio_mmio_destroy(struct virtio_mmio *vm);

/* Register access; off relative to the slot base. Shaped like bus_ops. */
void virtio_mmio_read(struct virtio_mmio *vm, uint64_t off, uint8_t *data, uint32_t len);
void virtio_mmio_write(struct virtio_mmio *vm, uint64_t off, const uint8_t *data, uint32_t len);
extern const struct bus_ops virtio_mmio_bus_ops;   /* opaque = struct virtio_mmio * */

/* Device side: from any thread, never waiting for the register lock. */
void virtio_mmio_interrupt(struct virtio_mmio *vm, uint32_t bits);  /* raise INT_* bits */
void virtio_mmio_set_needs_reset(struct virtio_mmio *vm); /* NEEDS_RESET, INT_CONFIG if live */
/* Bump the config generation and raise INT_CONFIG (takes the register lock). */
void virtio_mmio_config_changed(struct virtio_mmio *vm);
uint32_t virtio_mmio_status(struct virtio_mmio *vm);
uint64_t virtio_mmio_features(struct virtio_mmio *vm);   /* negotiated (after FEATURES_OK) */

/* Saved transport state (snapshots: docs/snapshot-format.md, section
 * SNAP_DEV, the transport state). Fixed layout, no implicit padding, little-endian
 * host order. Only taken from a quiesced device (nothing in flight). */
struct virtio_mmio_qstate {
    uint64_t desc, driver, device;  /* ring addresses */
    uint16_t num;                   /* QueueNum */
    uint16_t last_avail_idx;        /* next avail slot to consume */
    uint16_t used_idx;              /* shadow of used->idx (all published) */
    uint16_t signalled_used;        /* EVENT_IDX bookkeeping */
    uint8_t ready, signalled_valid, broken, err;  /* err: enum virtq_err */
    uint32_t pad;                   /* 0 */
};

struct virtio_mmio_state {
    uint32_t device_id, nqueues;
    uint64_t device_features;       /* as offered (with VERSION_1) */
    uint64_t driver_features;       /* masked */
    uint64_t driver_requested;      /* as written */
    uint32_t device_features_sel, driver_features_sel;
    uint32_t queue_sel, status, interrupt_status, config_generation;
    struct virtio_mmio_qstate q[VIRTIO_MMIO_MAX_QUEUES];  /* [nqueues..) zero */
};

/* Copy the state out. 0, or -EBUSY if a queue has popped requests not yet
 * pushed and published (the device is not quiesced). */
int virtio_mmio_save(struct virtio_mmio *vm, struct virtio_mmio_state *s);
/* Load state saved by virtio_mmio_save() into a device created with the
 * same parameters; no callback is called (the caller starts the device).
 * The state is untrusted: every field is checked first (same device id,
 * queue count and offered features; a status reachable by legal driver
 * steps; driver features within the offered ones, and acceptable if
 * FEATURES_OK; ready queues only after FEATURES_OK, with a power-of-two
 * size <= QueueNumMax and rings aligned and inside guest RAM, as
 * virtq_enable() checks; indices at most a ring apart; flags 0/1; unused
 * queues and padding zero). 0, or -EINVAL with a static reason in *why
 * (if not NULL) and the device unchanged. */
int virtio_mmio_load(struct virtio_mmio *vm, const struct virtio_mmio_state *s, const char **why);

/* Is status -> new_status (driver write) legal? Exposed for tests. */
bool virtio_mmio_status_legal(uint32_t status, uint32_t new_status);

#endif
