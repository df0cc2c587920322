/* virtio-blk, transport-independent (devices/virtio/virtio_dev.h): one request
 * queue backed by an image file, executed by the block I/O engine
 * (devices/blk/blk_uring.h: io_uring, or a thread pool).
 *
 * Requests: IN, OUT, FLUSH (fdatasync: durable on the host before the guest
 * sees OK), GET_ID, DISCARD (hole punch) and WRITE_ZEROES (zero range, or a
 * hole punch with UNMAP) on writable drives. A read-only drive offers
 * VIRTIO_BLK_F_RO, opens the file O_RDONLY and fails every write-type
 * request with VIRTIO_BLK_S_IOERR (the parser refuses it before any I/O).
 * Capacity is the file's size (or the block device's) in 512-byte sectors,
 * rounded down.
 *
 * Requests live in a slot array indexed by queue and head descriptor; a slot
 * carries a generation that goes into the engine's user_data. In flight is
 * capped by the engine; the rest waits in the avail ring. Each completion
 * batch publishes used->idx once and interrupts at most once per queue (the
 * device applies virtq_should_notify() itself: env->notify_used() means an
 * interrupt is due).
 *
 * A bad chain (virtq_pop -EINVAL, or a request the parser refuses) fails that
 * request only: the status byte is written when there is one, the head goes
 * back with its used length, and a rate-limited warning is logged. A broken
 * queue (-EIO: the head is unknown, or the driver reused a head still in
 * flight) stops the queue and calls env->needs_reset(). Neither stops other
 * devices or moat.
 *
 * The image file is locked with flock (exclusive, or shared when read-only)
 * so that two VMs cannot write one image. */
#ifndef MOAT_VIRTIO_BLK_H
#define MOAT_VIRTIO_BLK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "devices/blk/blk_uring.h"
#include "devices/virtio/virtio_dev.h"

#define VIRTIO_BLK_F_SEG_MAX       2
#define VIRTIO_BLK_F_RO            5
#define VIRTIO_BLK_F_BLK_SIZE      6
#define VIRTIO_BLK_F_FLUSH         9
#define VIRTIO_BLK_F_DISCARD       13
#define VIRTIO_BLK_F_WRITE_ZEROES  14

#define VIRTIO_BLK_QUEUE_MAX       1024 /* QueueNumMax (QEMU's virtio-mmio always uses 1024) */
#define VIRTIO_BLK_INFLIGHT_MAX    128  /* requests in the engine at once */
#define VIRTIO_BLK_SEG_MAX         64   /* config seg_max: data segments per request */
#define VIRTIO_BLK_CONFIG_SIZE     60   /* up to write_zeroes_may_unmap + padding */
#define VIRTIO_BLK_DISCARD_MAX     0x3fffffu   /* sectors per discard/write-zeroes range */

struct virtio_blk;
struct ratelimit_cfg;

struct virtio_blk_opts {
    const char *path;               /* image file or block device */
    bool read_only;
    const char *id;                 /* GET_ID serial, at most 20 bytes; NULL: none */
    enum blk_engine_kind engine;    /* BLK_ENGINE_AUTO normally */
    const char *name;               /* for logs, e.g. "vda" */
    /* Copy-on-write: path is the base (opened O_RDONLY, shared lock, never
     * written) and this the overlay (created if missing: a reflink, else
     * moat's sparse format; exclusive lock). Requests on a moat-format
     * overlay run on the thread-pool engine through devices/blk/overlay_disk.h;
     * a reflinked (raw) one is an ordinary image. NULL: none. Not with
     * direct. */
    const char *overlay;
    bool overlay_no_reflink;        /* create moat's format even where reflinks work */
    bool direct;                    /* O_DIRECT (bypass the host page cache), see below */
    /* A rate limiter (devices/virtio/ratelimit.h): each request is
     * charged its chain's bytes and one op when it is taken from the ring;
     * one that must wait holds the queue. NULL: unlimited. */
    const struct ratelimit_cfg *limit;
};

/* Change the limiter at run time (any thread; NULL: unlimited): 0 or
 * -EINVAL. The one in force into cfg (all zero: unlimited). */
int virtio_blk_set_limit(struct virtio_blk *b, const struct ratelimit_cfg *cfg);
void virtio_blk_get_limit(struct virtio_blk *b, struct ratelimit_cfg *cfg);

/* direct: reads and writes go to the file opened O_DIRECT (as QEMU's
 * cache=none); the image stays open buffered too. The direct-I/O alignment
 * (512, else 4096 bytes) is probed at create; a read or write whose file
 * offset, or any guest buffer's address or length, is not aligned to it is
 * done synchronously on the I/O thread through the buffered descriptor
 * (correct but slow; Linux's block layer never sends such requests).
 * Linux keeps the page cache coherent with direct I/O on the same file
 * (write back and invalidate around each direct request). Create fails when
 * the file system refuses O_DIRECT. Flush is fdatasync either way. */

struct virtio_blk;

/* Open and lock the image, size it. 0 or -errno with a one-line reason in
 * why (a configuration problem: missing file, in use, too large id...). */
int virtio_blk_create(const struct virtio_blk_opts *o, struct virtio_blk **out,
                      char *why, size_t wlen);

/* The device contract; dev = struct virtio_blk *. destroy() closes the file. */
extern const struct virtio_dev_ops virtio_blk_ops;

uint64_t virtio_blk_capacity(const struct virtio_blk *b);  /* sectors */

/* Put the drive on another backing file while it runs (any thread but the
 * device's own): path is opened and locked as create would (read-only if
 * the drive is; errors leave the drive on its old file, untouched); then
 * the queue is quiesced (every request in flight completes on the old
 * file), the file swapped, capacity set to the new file's size and the
 * engine restarted; a driver that has started the device gets a
 * config-change interrupt (env->config_changed) and rereads capacity. path
 * naming the file the drive has (same inode) keeps its descriptor and only
 * sizes it anew. Not for a copy-on-write or direct drive (-ENOTSUP). 0 or
 * -errno with why. */
int virtio_blk_swap(struct virtio_blk *b, const char *path, char *why, size_t wlen);

/* The copy-on-write overlay of a drive created with opts.overlay, else NULL
 * (owned by b; ovl_clone_disk pins it while the device is stopped). */
struct ovl_disk;
struct ovl_disk *virtio_blk_overlay(struct virtio_blk *b);

/* Counters, for tests and debugging (read from any thread). */
struct virtio_blk_stats {
    uint64_t completed;     /* requests that got VIRTIO_BLK_S_OK */
    uint64_t failed;        /* requests that got IOERR/UNSUPP, or no status */
    uint64_t bad_chains;    /* of those: malformed chains / refused requests */
    uint64_t notifies;      /* notify_used() calls */
    uint64_t batches;       /* completion batches that published */
    uint64_t max_inflight;  /* highest number of engine requests in flight */
    enum blk_engine_kind engine;    /* in use since the last start */
    /* Requests that completed OK, by type, and their data bytes. */
    uint64_t reads, writes, flushes, read_bytes, write_bytes;
};
void virtio_blk_get_stats(struct virtio_blk *b, struct virtio_blk_stats *s);

#endif
