/* The block I/O engine: one I/O thread per device, built on io_uring
 * (liburing) with a thread-pool fallback. The device (devices/blk/virtio_blk.c)
 * never blocks: it hands the engine requests (struct blk_io) from inside the
 * engine's callbacks, and the engine calls back on completion.
 *
 * io_uring engine (one ring per device, struct blk_ring):
 *  - the device makes its ring when it is created, before any seccomp
 *    filter (the runner's list has no io_uring_setup): created disabled
 *    (IORING_SETUP_R_DISABLED) with a table of empty fixed-file slots;
 *    restrictions allow only the opcodes used (READV, WRITEV, FSYNC,
 *    FALLOCATE, READ, POLL_ADD, POLL_REMOVE), require IOSQE_FIXED_FILE
 *    and leave one register op, IORING_REGISTER_FILES_UPDATE; then it is
 *    enabled. The ring outlives engines: each start puts the image file
 *    (a swapped one too), the kick eventfds and its stop eventfd in the
 *    slots, each stop drains the ring (requests completed, kick polls
 *    removed) and empties the slots.
 *  - each kick eventfd has a one-shot POLL_ADD armed on the ring (on its
 *    completion the thread resets the counter with a non-blocking read,
 *    re-arms, then calls kick()), the stop eventfd an 8-byte READ, so the
 *    I/O thread has a single wait point (io_uring_submit_and_wait);
 *    stopping never cancels a thread. Kick fds may be blocking (KVM
 *    ioeventfds) or O_NONBLOCK (a vhost-user frontend's, handed over as
 *    they are).
 *  - user_data = generation << 32 | slot << 8 | tag: the engine maps a
 *    completion back to its request through the device's lookup callback,
 *    which refuses a stale generation.
 *  - short reads/writes are continued, -EAGAIN/-EINTR resubmitted.
 *
 * Thread-pool engine (io_uring unavailable, e.g. disabled by
 * /proc/sys/kernel/io_uring_disabled): the I/O thread polls the same fds plus
 * a completion eventfd; a few worker threads run preadv/pwritev/fdatasync/
 * fallocate. The callbacks see no difference.
 *
 * Callbacks all run on the I/O thread. No globals: any number of engines. */
#ifndef MOAT_BLK_URING_H
#define MOAT_BLK_URING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

enum blk_engine_kind { BLK_ENGINE_AUTO = 0, BLK_ENGINE_URING, BLK_ENGINE_POOL };

enum blk_io_op {
    BLK_IO_READ,            /* preadv iov at off */
    BLK_IO_WRITE,           /* pwritev iov at off */
    BLK_IO_FLUSH,           /* fdatasync */
    BLK_IO_PUNCH,           /* fallocate(PUNCH_HOLE | KEEP_SIZE) [off, off + len) */
    BLK_IO_ZERO,            /* fallocate(ZERO_RANGE | KEEP_SIZE), PUNCH_HOLE if unsupported */
};

/* One operation. The device owns the memory (its slot array); the engine
 * may advance iov/niov/off/len while continuing a short transfer. */
struct blk_io {
    enum blk_io_op op;
    uint32_t slot;          /* < 2^24, set by the device */
    uint32_t gen;           /* set by the device */
    struct iovec *iov;
    unsigned niov;
    uint64_t off, len;
    int res;                /* set by the engine before done(): 0 or -errno */
    struct blk_io *next;    /* engine private */
};

struct blk_engine_cb {
    /* Queue q was kicked (its eventfd fired): pop and submit. Also called
     * once per queue when the thread starts (*out of blk_engine_start is
     * set by then). Not called once the engine is stopping. */
    void (*kick)(void *opaque, unsigned q);
    /* The request in this slot, if gen still matches; NULL: stale. */
    struct blk_io *(*lookup)(void *opaque, uint32_t slot, uint32_t gen);
    /* io finished with io->res. */
    void (*done)(void *opaque, struct blk_io *io);
    /* End of a wake-up: every completion of this batch was delivered.
     * Publish used entries and interrupt once; retry work postponed for
     * lack of space unless stopping. */
    void (*batch)(void *opaque, bool stopping);
};

#define BLK_ENGINE_MAX_KICK 8

struct blk_engine_cfg {
    enum blk_engine_kind kind;
    int file_fd;                        /* the image; the engine does not close it */
    const int *kick_fd;                 /* eventfds, blocking or O_NONBLOCK */
    unsigned nkick;                     /* 1 .. BLK_ENGINE_MAX_KICK */
    unsigned max_inflight;              /* 1 .. 1024 */
    const struct blk_engine_cb *cb;
    void *opaque;
    const char *name;                   /* for logs */
    int seccomp;                        /* enum sc_mode (vmm/base/scfilter.h): the threads' SC_BLK filter */
    /* Optional: run each request through exec (on a pool worker; 0 or
     * -errno for the whole transfer) instead of on file_fd. Forces the
     * thread-pool engine; file_fd may then be -1. Used by copy-on-write
     * overlay drives (devices/blk/overlay_disk.h). */
    int (*exec)(void *exec_opaque, struct blk_io *io);
    void *exec_opaque;
    /* The device's ring (blk_ring_create), for the io_uring engine. NULL:
     * the engine makes its own, which needs io_uring_setup: only where no
     * seccomp filter is in (tests, tools). */
    struct blk_ring *ring;
};

struct blk_ring;

/* Make a restricted ring for engines of up to max_inflight requests (see
 * above). Call before any seccomp filter. 0, or -errno with why (io_uring
 * unavailable or disabled, no liburing: -ENOSYS). */
int blk_ring_create(unsigned max_inflight, struct blk_ring **out, char *why, size_t wlen);
/* No engine may be using it. NULL is a no-op. */
void blk_ring_destroy(struct blk_ring *r);
/* Tests: submit one request of this opcode and flags (fd: fixed slot 0
 * with IOSQE_FIXED_FILE, else -1) on an idle ring and return its
 * result (-EACCES: refused by the restrictions); io_uring_register(2)
 * with op, arg, n: 0 or more, or -errno. */
int blk_ring_try_op(struct blk_ring *r, uint8_t opcode, uint8_t sqe_flags);
int blk_ring_try_register(struct blk_ring *r, unsigned op, void *arg, unsigned n);

struct blk_engine;

/* Build the engine and start its I/O thread. AUTO: io_uring if the host
 * allows it, else the thread pool (logged once per engine at info level,
 * with the reason). 0 or -errno. */
int blk_engine_start(const struct blk_engine_cfg *cfg, struct blk_engine **out);

/* Stop: no more kicks are taken; every in-flight request completes (done()
 * and a final batch(stopping = true) are called); the thread is joined and
 * everything freed. NULL is a no-op. Must not be called from a callback. */
void blk_engine_stop(struct blk_engine *e);

/* From a callback only: queue io. 0, or -EBUSY when max_inflight requests
 * are in flight (check blk_engine_space() first). Submission to the kernel
 * happens when the callback returns. */
int blk_engine_submit(struct blk_engine *e, struct blk_io *io);
unsigned blk_engine_space(const struct blk_engine *e);

enum blk_engine_kind blk_engine_kind_of(const struct blk_engine *e);
const char *blk_engine_kind_name(enum blk_engine_kind k);

/* Is io_uring usable for moat on this host? false with the reason in why
 * (io_uring_disabled sysctl, no liburing at build time, setup refused). */
bool blk_uring_available(char *why, size_t len);

#endif
