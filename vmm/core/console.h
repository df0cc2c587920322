/* Console output: what the guest writes to its UART goes into a bounded
 * buffer, and a writer thread moves it to the console fd. The vCPU thread
 * that emulates the THR write never waits on the fd: a reader that stops
 * reading (a full pipe, a suspended terminal) cannot stall the vCPU, and so
 * cannot stall moat_stop/pause/snapshot/destroy, which wait for vCPUs.
 *
 * When the buffer is full, bytes are dropped and counted (not throttled:
 * throttling the guest would let a stalled reader stall it). When room comes
 * back, a "[moat: N bytes of console output dropped]" line goes into the
 * stream where the gap is; the count is in moat_get_console() and logged as
 * a warning when the VM is destroyed.
 *
 * The writer never blocks on the fd either: sockets are written with
 * MSG_DONTWAIT, pipes and terminals through a non-blocking file description
 * of their own (reopened through /proc/self/fd, so the caller's fd keeps its
 * flags); regular files and block devices with plain write(). A write
 * error ends console output: the rest is counted as dropped. A pipe or
 * socket whose reader has gone raises SIGPIPE in the writer thread, as the
 * write(2) on the vCPU thread did before: with the default disposition the
 * process ends (`moat run ... | head` stops), with SIGPIPE ignored the
 * writer sees EPIPE. No other signal is taken by the writer thread.
 *
 * Locking: console_put may be called under the UART lock (it only takes the
 * console's own lock, briefly); the writer thread takes no other lock. */
#ifndef MOAT_CONSOLE_H
#define MOAT_CONSOLE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CONSOLE_BUF_DEFAULT (1u << 20)
/* How long moat_wait/moat_destroy wait for a reader that takes nothing. */
#define CONSOLE_IDLE_MS 200
/* How long moat_pause waits for output from before the pause. */
#define CONSOLE_PAUSE_FLUSH_MS 20

struct console_out {
    int seccomp;                  /* enum sc_mode: the writer thread's filter (vmm/base/scfilter.h) */
    pthread_mutex_t lock;
    pthread_cond_t cond;          /* data queued, stop, progress (CLOCK_MONOTONIC) */
    int fd;                       /* the caller's fd (not owned), or -1: discard */
    uint8_t *buf;                 /* ring of cap bytes */
    size_t cap, head, len;
    uint64_t limit;               /* bytes the guest may still write in all; 0: none */
    uint64_t accepted;            /* bytes the guest wrote (counted against limit) */
    uint64_t written;             /* bytes that reached fd */
    uint64_t dropped;             /* bytes lost (full buffer, dead fd) */
    uint64_t gap;                 /* dropped bytes not yet marked in the stream */
    bool capped;                  /* the limit was reached: the rest is ignored */
    bool dead;                    /* fd failed: nothing more is written */
    _Atomic bool dead_logged;     /* the failure was reported (once, outside the lock) */
    bool stop;                    /* the writer should finish */
    bool stalled;                 /* the last drain gave up on a reader that took nothing */
    uint64_t enq, deq;            /* bytes ever queued / ever taken out (written or lost) */
    uint64_t progress;            /* counts writes that moved bytes */
    _Atomic uint64_t progress_pub;/* the same, readable without the lock */
    int stop_idle_ms;             /* the writer's patience with a stalled reader at stop */
    int kick_signal;              /* interrupts a write that blocks (W_POLL), 0: none */
    _Atomic bool abort_io;        /* console_stop gave up on the reader: stop retrying EINTR */
    bool test_blocking;           /* tests: write with blocking write(2), as W_POLL may */
    int wake_efd;                 /* wakes the writer out of poll() */
    pthread_t thread;
    bool started;
};

/* cap 0: CONSOLE_BUF_DEFAULT. fd < 0: output is discarded (no thread is
 * ever started). Returns 0 or -errno. */
int console_init(struct console_out *c, int fd, size_t cap, uint64_t limit);
/* Start the writer thread (no-op without an fd). kick_signal (0: none)
 * must have a handler installed without SA_RESTART (moat_start installs
 * moat's no-op one): console_stop sends it to interrupt a write that blocks
 * (only possible on a blocking pipe or terminal moat could not reopen
 * non-blocking) once the reader has taken nothing for idle_ms. */
int console_start(struct console_out *c, int kick_signal);
/* Queue one byte of guest output; never blocks on the fd. */
void console_put(struct console_out *c, uint8_t byte);
/* Wait until everything queued so far is written, or the reader took
 * nothing for idle_ms (then give up; a later drain waits again only if the
 * reader has made progress since). Returns 0, or -ETIMEDOUT when bytes are
 * left. */
int console_drain(struct console_out *c, int idle_ms);
/* Wait at most ms in all for what is queued now to be written, without
 * judging the reader (a later drain waits as usual): what moat_pause does,
 * so that output from before a pause has reached the fd when it returns.
 * 0 or -ETIMEDOUT. */
int console_flush(struct console_out *c, int ms);
/* Drain (idle_ms as above), stop and join the writer; whatever is left is
 * counted as dropped. Safe to call twice. */
void console_stop(struct console_out *c, int idle_ms);
void console_destroy(struct console_out *c);

/* written and dropped count moat's own notes too (the limit and gap lines);
 * accepted counts only what the guest wrote. */
struct console_stats {
    uint64_t accepted, written, dropped;
    size_t queued, cap;
    bool capped, dead;
};
void console_get_stats(struct console_out *c, struct console_stats *s);

#endif
