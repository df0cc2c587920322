/* An event loop for a device's I/O thread, on epoll: file descriptors with
 * a callback each, one-shot timers on CLOCK_MONOTONIC, and a stop eventfd
 * built in. One loop per thread that runs it; no global state.
 *
 *  - Interest is level-triggered (EVLOOP_IN / EVLOOP_OUT). Interest 0
 *    keeps the registration but takes the fd out of the epoll set, so
 *    nothing is reported for it, not even a hangup or an error (epoll
 *    always reports those for a watched fd): a device that stops reading a
 *    socket (backpressure) sets 0 and is not woken by it any more.
 *  - A callback may add, modify or remove any fd, including another fd
 *    whose event is in the same batch: a removed (or removed and re-added)
 *    fd's pending event is dropped, never delivered to the old callback.
 *  - Timers are caller-owned (struct evloop_timer, embedded in the
 *    caller's state); each fires once per arming, after the fd events of
 *    the wait in which it fell due. A timer cancelled by an earlier
 *    callback of the same pass does not fire.
 *  - evloop_stop() may be called from any thread; everything else from the
 *    thread running the loop, or while no run is in progress.
 *
 * Errors are -errno. */
#ifndef MOAT_EVLOOP_H
#define MOAT_EVLOOP_H

#include <stdbool.h>
#include <stdint.h>

#define EVLOOP_IN   0x001u      /* EPOLLIN */
#define EVLOOP_OUT  0x004u      /* EPOLLOUT */
/* Reported to callbacks only (never asked for): */
#define EVLOOP_ERR  0x008u      /* EPOLLERR */
#define EVLOOP_HUP  0x010u      /* EPOLLHUP */

struct evloop;

/* fd is ready: events is what epoll reported (EVLOOP_* bits). */
typedef void (*evloop_fd_fn)(void *opaque, int fd, uint32_t events);
typedef void (*evloop_timer_fn)(void *opaque);

struct evloop_timer {
    /* private: set by evloop_timer_init / _arm */
    evloop_timer_fn fn;
    void *opaque;
    uint64_t deadline_ns;
    uint64_t pass;              /* the pass that last fired it */
    bool armed;
    struct evloop_timer *prev, *next;
};

int evloop_create(struct evloop **out);
/* Closes the loop's own fds (epoll, stop eventfd), not the registered
 * ones. Timers still armed are simply forgotten. NULL is a no-op. */
void evloop_destroy(struct evloop *l);

/* Register fd with interest events (EVLOOP_IN | EVLOOP_OUT, or 0: silent,
 * see above). -EBADF (fd < 0), -EINVAL (other bits, no fn), -EEXIST
 * (already registered), -ENOMEM, or epoll_ctl's error (-EPERM: a regular
 * file). */
int evloop_add(struct evloop *l, int fd, uint32_t events, evloop_fd_fn fn, void *opaque);
/* Change fd's interest; no system call when it does not change.
 * -ENOENT if fd is not registered, -EINVAL for other bits. */
int evloop_mod(struct evloop *l, int fd, uint32_t events);
/* Forget fd (call it before closing fd). -ENOENT if not registered. */
int evloop_del(struct evloop *l, int fd);
/* fd's current interest, or -ENOENT. */
int evloop_events(const struct evloop *l, int fd);

void evloop_timer_init(struct evloop_timer *t, evloop_timer_fn fn, void *opaque);
/* (Re-)arm t to fire at deadline_ns (clock_mono_ns() time; a past one
 * fires at the next pass). */
void evloop_timer_arm(struct evloop *l, struct evloop_timer *t, uint64_t deadline_ns);
void evloop_timer_cancel(struct evloop *l, struct evloop_timer *t);
static inline bool evloop_timer_armed(const struct evloop_timer *t) { return t->armed; }
/* The deadline it was last armed for. */
static inline uint64_t evloop_timer_deadline(const struct evloop_timer *t) { return t->deadline_ns; }

/* One pass: wait at most timeout_ms (-1: no limit; an armed timer shortens
 * the wait) for an fd, a timer or a stop, then run the callbacks of what
 * was ready and of the timers due. 1: stopped (the request is consumed;
 * no callback ran), 0: a pass was done (callbacks may have run, or the
 * wait timed out or was interrupted by a signal), -errno: epoll_wait
 * failed. */
int evloop_run_once(struct evloop *l, int timeout_ms);
/* Passes until stopped: 0, or -errno as evloop_run_once. */
int evloop_run(struct evloop *l);

/* Make the current run return, or the next one at once if none is in
 * progress (a stop is never lost). Any thread; async-signal-safe. */
void evloop_stop(struct evloop *l);
/* Drop a stop request no run has consumed (a thread that left the loop
 * for an error before seeing it), so that the next run waits. */
void evloop_clear_stop(struct evloop *l);

/* Read an eventfd's counter without blocking, whether or not it is
 * O_NONBLOCK (a KVM ioeventfd is blocking, a vhost-user frontend's kick
 * fd usually is not). 1 with *val set, 0 if the counter was 0, -errno. */
int evloop_eventfd_take(int fd, uint64_t *val);

#endif
