/* Frame I/O on one file descriptor through io_uring (liburing): the
 * engine under the TAP backend (devices/net/net_tap.c). Each read or
 * write moves exactly one frame (a TAP device, or a SOCK_SEQPACKET socket
 * in tests).
 *
 *  - Receive: reads are posted ahead into a bounce ring of slots (rx_slots
 *    of slot_size bytes, owned by the engine, never guest memory); a
 *    completed read is a frame, handed out in completion order
 *    (net_uring_recv) and its slot posted again at the next flush.
 *  - Transmit: a frame is copied into a free slot and its write queued
 *    (net_uring_send); the writes queued during a pass are submitted
 *    together (net_uring_flush), one io_uring_enter for the batch, linked
 *    (IOSQE_IO_LINK) so that they run in order. A TAP takes a write at
 *    once; a file that makes one wait holds back the next batch until it
 *    is done (send says -EAGAIN), so frames never overtake each other. The
 *    fate of a frame (refused, or the file failed) is learned from its
 *    completion, at a later flush.
 *  - The ring is created disabled (IORING_SETUP_R_DISABLED); the file is
 *    registered as fixed file 0, an eventfd for completions, and then
 *    restrictions: only READ, WRITE and ASYNC_CANCEL, IOSQE_FIXED_FILE
 *    required on every submission and IOSQE_IO_LINK the only other flag
 *    allowed, and of the register operations only
 *    UNREGISTER_FILES (to let go of the file on destroy). Then it is
 *    enabled: nothing else can be registered, no other file reached.
 *  - The caller polls net_uring_eventfd() for readability: it is signalled
 *    for every completion. A flush drains it after its submit, then takes
 *    every completion in.
 *  - Requests belong to the thread that submitted them: all calls but
 *    create/destroy come from one thread at a time, and that thread calls
 *    net_uring_quiesce before it ends (posted reads are cancelled; frames
 *    already read stay for the next thread).
 *
 * The file is made blocking (O_NONBLOCK cleared): io_uring then waits
 * for it by itself instead of completing reads with -EAGAIN. No globals.
 * Built only with liburing (MOAT_HAVE_URING). */
#ifndef MOAT_NET_URING_H
#define MOAT_NET_URING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#define NET_URING_MAX_SLOTS 256u

struct net_uring;

struct net_uring_cfg {
    int fd;                     /* not closed by the engine */
    unsigned rx_slots;          /* reads posted ahead: 1 .. NET_URING_MAX_SLOTS */
    unsigned tx_slots;          /* writes in flight at most: 1 .. NET_URING_MAX_SLOTS */
    size_t slot_size;           /* the largest frame, both ways: 1 .. 1 MiB */
    const char *name;           /* for logs */
};

/* 0 or -errno with why (io_uring refused by the host: the reason). */
int net_uring_create(const struct net_uring_cfg *cfg, struct net_uring **out, char *why, size_t wlen);
/* Cancel what is posted, wait for it, let go of the file, free. NULL: no-op. */
void net_uring_destroy(struct net_uring *u);

/* Readable when a completion came (see above). */
int net_uring_eventfd(const struct net_uring *u);

/* Queue one frame, the concatenation of iov[0..n-1] (copied: the caller's
 * memory is free again on return). 0; -EAGAIN: tx_slots writes in flight
 * (flush, and wait for the eventfd); -EMSGSIZE: larger than slot_size
 * (nothing queued); other -errno: the file failed. */
int net_uring_send(struct net_uring *u, const struct iovec *iov, unsigned n);

/* The oldest frame read: its length (> 0) and *data, valid until
 * net_uring_recv_done. -EAGAIN: none yet; -EPIPE: the file reached its end
 * (a read of 0 bytes); other -errno: the file failed. Frames read before a
 * failure are handed out first. */
ssize_t net_uring_recv(struct net_uring *u, const uint8_t **data);
/* The frame of the last successful net_uring_recv is consumed: its slot is
 * posted again at the next flush. */
void net_uring_recv_done(struct net_uring *u);

/* Post a read into every free receive slot, submit what is queued (one
 * system call), drain the eventfd, and take the completions in. *refused (may
 * be NULL): frames queued by earlier sends that the file refused since the
 * last call (-EMSGSIZE / -EINVAL, or a short write). >0: frames were read,
 * or room came for send after it said -EAGAIN (look again); 0: neither;
 * -errno: the file failed. */
int net_uring_flush(struct net_uring *u, unsigned *refused);

/* Cancel the posted reads and wait until nothing is in flight. Frames
 * already read are kept. The next flush posts reads again. */
void net_uring_quiesce(struct net_uring *u);

/* Tests: submit one request of this opcode with these SQE flags (fd: fixed
 * file 0 with IOSQE_FIXED_FILE, else -1; no buffer) and wait for it: its
 * result (-EACCES: the restrictions refused it). Only while nothing else is
 * in flight. */
int net_uring_try_op(struct net_uring *u, uint8_t opcode, uint8_t sqe_flags);
/* Tests: try to register one more file (io_uring_register_files_update):
 * 0 or -errno (-EACCES: refused). */
int net_uring_try_register(struct net_uring *u, int fd);

#endif
