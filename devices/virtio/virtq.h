/* Split virtqueue (virtio 1.x, little-endian) as the device sees it: pure C,
 * guest memory only through struct gmem. No KVM or io_uring headers.
 *
 * Threat model: the guest owns the descriptor table and the avail ring and
 * may change them at any time, from another vCPU, while we read them. So:
 *  - every descriptor is copied once into a local before it is checked or
 *    used (no double fetch), avail->idx and ring entries are single loads;
 *  - every guest range (rings, indirect tables, buffers) is checked with
 *    gmem_ptr() for overflow and RAM membership on every access;
 *  - a malformed chain never crashes or loops: virtq_pop() returns an error
 *    with a reason code.
 *
 * Errors come in two classes:
 *  - -EINVAL "bad chain": the head is known (chain->head_valid), the avail
 *    slot has been consumed. The device fails just this request: push the
 *    head back (virtq_push(q, m, chain->head, 0)) and go on.
 *  - -EIO "broken queue": the ring itself is unusable (avail->idx jumped by
 *    more than the queue size, head >= size, ring memory not in RAM). The
 *    head is unknown or unusable, so nothing can be pushed back; the queue
 *    stays broken (every later pop returns -EIO) until virtq_reset(), and the
 *    device must set DEVICE_NEEDS_RESET and notify the driver (config
 *    change interrupt).
 * q->err / chain->err hold the precise reason (enum virtq_err).
 *
 * Concurrency: one struct virtq is used by one thread at a time (the
 * device's queue worker); the caller locks if needed. Two VMs = two sets
 * of queues, no globals. */
#ifndef MOAT_VIRTQ_H
#define MOAT_VIRTQ_H

#include <stdbool.h>
#include <stdint.h>

#include "vmm/base/gmem.h"

#define VIRTQ_MAX_SIZE          32768u

/* Descriptor flags. */
#define VIRTQ_DESC_F_NEXT       1u
#define VIRTQ_DESC_F_WRITE      2u
#define VIRTQ_DESC_F_INDIRECT   4u
/* avail->flags / used->flags. */
#define VRING_AVAIL_F_NO_INTERRUPT 1u
#define VRING_USED_F_NO_NOTIFY     1u

/* Feature bits relevant to the ring. */
#define VIRTIO_F_INDIRECT_DESC  28
#define VIRTIO_F_EVENT_IDX      29
#define VIRTIO_F_VERSION_1      32

/* Guest layout sizes and the alignment the spec requires (2.7). */
#define VIRTQ_DESC_SIZE         16u
#define VIRTQ_DESC_ALIGN        16u
#define VIRTQ_AVAIL_ALIGN       2u
#define VIRTQ_USED_ALIGN        4u
static inline uint64_t virtq_desc_bytes(uint32_t n)  { return 16ull * n; }
static inline uint64_t virtq_avail_bytes(uint32_t n) { return 6ull + 2ull * n; } /* with used_event */
static inline uint64_t virtq_used_bytes(uint32_t n)  { return 6ull + 8ull * n; } /* with avail_event */

/* vring_need_event(): should the device notify, given the driver asked to be
 * notified when the used index passes event_idx, and the index moved from
 * old_idx to new_idx since the last notification? (virtio 1.2, 2.7.10) */
static inline bool virtq_need_event(uint16_t event_idx, uint16_t new_idx, uint16_t old_idx)
{
    return (uint16_t)(new_idx - event_idx - 1) < (uint16_t)(new_idx - old_idx);
}

enum virtq_err {
    VIRTQ_OK = 0,
    /* queue-level (-EIO, queue broken: NEEDS_RESET) */
    VIRTQ_E_AVAIL_IDX,          /* avail->idx - last_avail_idx > size */
    VIRTQ_E_HEAD_RANGE,         /* avail ring entry >= size */
    VIRTQ_E_RING_FAULT,         /* desc/avail/used ring not (or no longer) in RAM */
    /* chain-level (-EINVAL, head valid: fail the request) */
    VIRTQ_E_NEXT_RANGE,         /* next >= table size */
    VIRTQ_E_LOOP,               /* more descriptors than the table holds */
    VIRTQ_E_INDIRECT_NOFEAT,    /* INDIRECT flag, feature not negotiated */
    VIRTQ_E_INDIRECT_NESTED,    /* INDIRECT inside an indirect table */
    VIRTQ_E_INDIRECT_NEXT,      /* INDIRECT and NEXT both set */
    VIRTQ_E_INDIRECT_LEN,       /* 0, not a multiple of 16, or > size entries */
    VIRTQ_E_INDIRECT_FAULT,     /* indirect table overflows / not in RAM */
    VIRTQ_E_SEG_FAULT,          /* buffer addr+len overflows / not in RAM */
    VIRTQ_E_READ_AFTER_WRITE,   /* device-readable descriptor after a writable one */
    VIRTQ_E_TOO_MANY_SEGS,      /* more segments than the caller's array */
    VIRTQ_E_LEN_OVERFLOW,       /* total chain length > UINT32_MAX */
    VIRTQ_E__COUNT
};

/* Static string for an error code (for logs). */
const char *virtq_strerror(enum virtq_err e);

/* One guest buffer of a chain; [gpa, gpa + len) was checked to lie in RAM
 * when popped (it may only leave RAM by hot-unplug, which moat lacks; still,
 * use gmem_ptr() when touching it). */
struct virtq_seg {
    uint64_t gpa;
    uint32_t len;
    bool writable;      /* device-writable (VIRTQ_DESC_F_WRITE) */
};

/* A popped descriptor chain. The caller sets seg and max_seg (its array)
 * before virtq_pop(); pop fills the rest. Readable segments always come
 * first: seg[0 .. nread) are device-readable, seg[nread .. nseg) writable. */
struct virtq_chain {
    struct virtq_seg *seg;
    unsigned max_seg;
    unsigned nseg;
    unsigned nread;
    uint32_t read_len;   /* bytes in readable segments */
    uint32_t write_len;  /* bytes in writable segments; read_len + write_len <= UINT32_MAX */
    uint16_t head;       /* valid when head_valid */
    bool head_valid;     /* true on success and on -EINVAL */
    bool indirect;       /* the chain used an indirect table */
    enum virtq_err err;  /* VIRTQ_OK on success */
};

struct virtq {
    /* Configuration, written by the transport while the queue is not ready. */
    uint16_t max_size;   /* QueueNumMax, power of two <= VIRTQ_MAX_SIZE */
    uint16_t size;       /* QueueNum: power of two <= max_size */
    uint64_t desc, avail, used;   /* guest physical addresses */
    bool event_idx;      /* VIRTIO_F_EVENT_IDX negotiated */
    bool indirect;       /* VIRTIO_F_INDIRECT_DESC negotiated */

    /* Run-time state. */
    bool ready;          /* virtq_enable() succeeded */
    bool broken;         /* a queue-level error happened; see err */
    enum virtq_err err;
    uint16_t last_avail_idx;   /* next avail slot to consume */
    uint16_t used_idx;         /* next used slot to fill (shadow of used->idx) */
    uint16_t published_idx;    /* last value written to used->idx */
    uint16_t signalled_used;   /* used idx at the last notification (EVENT_IDX) */
    bool signalled_valid;
    uint32_t inflight;         /* popped heads not yet pushed */
};

/* Set up a queue in the reset state. max_size must be a power of two in
 * [1, VIRTQ_MAX_SIZE]: 0 or -EINVAL. size starts at max_size. */
int virtq_init(struct virtq *q, uint16_t max_size);

/* Back to the state after virtq_init() (device reset): not ready, addresses
 * 0, size = max_size, indices 0, not broken, features cleared. */
void virtq_reset(struct virtq *q);

/* Take the negotiated feature bits (EVENT_IDX, INDIRECT_DESC). */
void virtq_set_features(struct virtq *q, uint64_t features);

/* Check the configuration and make the queue live (QueueReady = 1):
 * size a power of two in [1, max_size], rings aligned as the spec requires
 * and entirely inside guest RAM. 0, or -EINVAL (size/alignment) or -EFAULT
 * (a ring outside RAM); on error the queue stays not ready. Indices start
 * at 0 (a fresh queue). */
int virtq_enable(struct virtq *q, const struct gmem *m);

/* Pop the next available chain into *c (c->seg/c->max_seg set by caller).
 * Returns 1 (chain in *c), 0 (nothing available, or the queue is not
 * ready), -EINVAL (bad chain: c->head valid, c->err the reason; push the
 * head back) or -EIO (queue broken: c->head_valid false, q->err = c->err;
 * set NEEDS_RESET). Reads avail->idx once per call with acquire ordering. */
int virtq_pop(struct virtq *q, const struct gmem *m, struct virtq_chain *c);

/* Number of chains the driver has made available that we have not popped
 * (0 if not ready), or -EIO if avail->idx is invalid (queue marked broken). */
int virtq_pending(struct virtq *q, const struct gmem *m);

/* Write a used element {head, written_len} to the used ring (not yet
 * visible to the driver: see virtq_publish()). 0, -EINVAL (head >= size,
 * or more pushes than pops, or not ready), -EIO (used ring not in RAM:
 * queue marked broken). written_len is the number of bytes the device
 * wrote into the chain's writable segments. */
int virtq_push(struct virtq *q, const struct gmem *m, uint16_t head, uint32_t written_len);
/* A chain that was popped but will never be pushed: the device refuses it
 * and gives up on the queue (a head the driver made available again while
 * the device still owns it: pushing it would hand the driver the same head
 * twice). Only the in-flight count is given back, so that a later
 * snapshot is not refused for a request that cannot complete. */
void virtq_drop(struct virtq *q);

/* Give back the last n chains popped (successfully, none pushed since):
 * they stay available and the next pops return them again, read afresh
 * from the ring. For a device that found, after popping, that it cannot
 * use them yet (a receive frame that needs more buffers than there are).
 * 0, or -EINVAL (n more than are in flight). */
int virtq_unpop(struct virtq *q, uint16_t n);
/* Make all pushed elements visible: release barrier, then a single store of
 * used->idx. 0 or -EIO (used ring not in RAM). */
int virtq_publish(struct virtq *q, const struct gmem *m);

/* After virtq_publish(): must the driver be interrupted? Implements
 * VRING_AVAIL_F_NO_INTERRUPT (no EVENT_IDX) or used_event / vring_need_event
 * (EVENT_IDX), with a full barrier between the used->idx store and reading
 * the driver's suppression fields. Updates the EVENT_IDX bookkeeping, so
 * call it once per publish. Returns false if nothing was published since
 * the last notification. On a ring fault returns true (be safe). */
bool virtq_should_notify(struct virtq *q, const struct gmem *m);

/* Driver->device notification suppression.
 * virtq_disable_notify(): ask the driver not to kick (sets
 * VRING_USED_F_NO_NOTIFY; with EVENT_IDX nothing needs writing).
 * virtq_enable_notify(): ask for kicks again (clears the flag, or with
 * EVENT_IDX writes avail_event = last_avail_idx), then a full barrier;
 * returns the number of chains already pending (>0: the caller must keep
 * popping, the driver may not kick for them) or -EIO.
 * virtq_set_avail_event(): write used->avail_event directly (EVENT_IDX only;
 * -EINVAL otherwise). */
int virtq_disable_notify(struct virtq *q, const struct gmem *m);
int virtq_enable_notify(struct virtq *q, const struct gmem *m);
int virtq_set_avail_event(struct virtq *q, const struct gmem *m, uint16_t idx);

/* Read avail->ring[size] (used_event) / used->ring[size] (avail_event):
 * 0 or -EFAULT. Mostly for tests and debugging. */
int virtq_read_used_event(const struct virtq *q, const struct gmem *m, uint16_t *out);

/* A chain's bytes as two streams: its readable part seg[0 .. nread) and
 * its writable part seg[nread .. nseg). */
/* Copy up to max bytes of c's readable stream, from offset off, to dst.
 * The number copied (fewer than max only where the stream ends), or
 * -EFAULT if a segment is not guest RAM. */
long virtq_chain_read(const struct gmem *m, const struct virtq_chain *c, uint64_t off, void *dst,
                      uint64_t max);
/* Copy len bytes from src into c's writable stream at offset off: 0,
 * -ENOSPC if the stream is shorter than off + len (nothing past its end is
 * written; what fits before it is), -EFAULT if a segment is not RAM. */
int virtq_chain_write(const struct gmem *m, const struct virtq_chain *c, uint64_t off, const void *src,
                      uint64_t len);

#endif
