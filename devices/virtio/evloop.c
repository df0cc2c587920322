/* An epoll event loop for device threads. Contracts in evloop.h. */
#include "devices/virtio/evloop.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include "vmm/base/clock.h"

_Static_assert(EVLOOP_IN == EPOLLIN && EVLOOP_OUT == EPOLLOUT && EVLOOP_ERR == EPOLLERR &&
               EVLOOP_HUP == EPOLLHUP, "EVLOOP_* are epoll's bits");

#define WANT_MASK   (EVLOOP_IN | EVLOOP_OUT)
#define REPORT_MASK (EVLOOP_IN | EVLOOP_OUT | EVLOOP_ERR | EVLOOP_HUP)
#define MAX_EVENTS  64
/* epoll data of the stop eventfd: no registration has fd 0xffffffff */
#define STOP_KEY    UINT64_MAX

/* One registered fd, indexed by the fd. An event carries the fd and the
 * registration's generation: an event for a registration removed (or
 * replaced) since the wait is recognized and dropped. */
struct slot {
    evloop_fd_fn fn;
    void *opaque;
    uint32_t events;
    uint32_t gen;
    bool live;
};

struct evloop {
    int epfd, stopfd;
    struct slot *slots;
    size_t cap;
    uint32_t gen;
    uint64_t pass;
    struct evloop_timer *timers;     /* armed ones, unsorted */
};

int evloop_create(struct evloop **out)
{
    *out = NULL;
    struct evloop *l = calloc(1, sizeof *l);
    if (!l)
        return -ENOMEM;
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    l->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int r = 0;
    if (l->epfd < 0 || l->stopfd < 0) {
        r = -errno;
    } else {
        struct epoll_event ev = { .events = EPOLLIN, .data.u64 = STOP_KEY };
        if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->stopfd, &ev) < 0)
            r = -errno;
    }
    if (r < 0) {
        if (l->epfd >= 0)
            close(l->epfd);
        if (l->stopfd >= 0)
            close(l->stopfd);
        free(l);
        return r;
    }
    *out = l;
    return 0;
}

void evloop_destroy(struct evloop *l)
{
    if (!l)
        return;
    close(l->epfd);
    close(l->stopfd);
    free(l->slots);
    free(l);
}

static struct slot *slot_of(const struct evloop *l, int fd)
{
    if (fd < 0 || (size_t)fd >= l->cap || !l->slots[fd].live)
        return NULL;
    return &l->slots[fd];
}

static int ctl(struct evloop *l, int op, int fd, const struct slot *s)
{
    struct epoll_event ev = { .events = s->events, .data.u64 = (uint64_t)s->gen << 32 | (uint32_t)fd };
    return epoll_ctl(l->epfd, op, fd, &ev) < 0 ? -errno : 0;
}

int evloop_add(struct evloop *l, int fd, uint32_t events, evloop_fd_fn fn, void *opaque)
{
    if (fd < 0)
        return -EBADF;
    if ((events & ~WANT_MASK) || !fn)
        return -EINVAL;
    if (slot_of(l, fd))
        return -EEXIST;
    if ((size_t)fd >= l->cap) {
        size_t cap = l->cap ? l->cap : 64;
        while (cap <= (size_t)fd)
            cap *= 2;
        struct slot *n = realloc(l->slots, cap * sizeof *n);
        if (!n)
            return -ENOMEM;
        memset(n + l->cap, 0, (cap - l->cap) * sizeof *n);
        l->slots = n;
        l->cap = cap;
    }
    struct slot s = { .fn = fn, .opaque = opaque, .events = events, .gen = ++l->gen, .live = true };
    /* Added even when silent: a bad fd (closed, a regular file) is
     * refused here rather than at the first evloop_mod. */
    int r = ctl(l, EPOLL_CTL_ADD, fd, &s);
    if (r < 0)
        return r;
    if (!events && (r = ctl(l, EPOLL_CTL_DEL, fd, &s)) < 0)
        return r;
    l->slots[fd] = s;
    return 0;
}

int evloop_mod(struct evloop *l, int fd, uint32_t events)
{
    struct slot *s = slot_of(l, fd);
    if (!s)
        return -ENOENT;
    if (events & ~WANT_MASK)
        return -EINVAL;
    if (events == s->events)
        return 0;
    struct slot n = *s;
    n.events = events;
    int op = !s->events ? EPOLL_CTL_ADD : !events ? EPOLL_CTL_DEL : EPOLL_CTL_MOD;
    int r = ctl(l, op, fd, &n);
    if (r < 0)
        return r;
    s->events = events;
    return 0;
}

int evloop_del(struct evloop *l, int fd)
{
    struct slot *s = slot_of(l, fd);
    if (!s)
        return -ENOENT;
    if (s->events)
        (void)ctl(l, EPOLL_CTL_DEL, fd, s);   /* fails only if fd was closed: gone anyway */
    s->live = false;
    s->fn = NULL;
    s->opaque = NULL;
    return 0;
}

int evloop_events(const struct evloop *l, int fd)
{
    const struct slot *s = slot_of(l, fd);
    return s ? (int)s->events : -ENOENT;
}

/* ---- timers ---- */

void evloop_timer_init(struct evloop_timer *t, evloop_timer_fn fn, void *opaque)
{
    memset(t, 0, sizeof *t);
    t->fn = fn;
    t->opaque = opaque;
}

void evloop_timer_cancel(struct evloop *l, struct evloop_timer *t)
{
    if (!t->armed)
        return;
    if (t->prev)
        t->prev->next = t->next;
    else
        l->timers = t->next;
    if (t->next)
        t->next->prev = t->prev;
    t->prev = t->next = NULL;
    t->armed = false;
}

void evloop_timer_arm(struct evloop *l, struct evloop_timer *t, uint64_t deadline_ns)
{
    if (!t->armed) {
        t->prev = NULL;
        t->next = l->timers;
        if (l->timers)
            l->timers->prev = t;
        l->timers = t;
        t->armed = true;
    }
    t->deadline_ns = deadline_ns;
}

/* The earliest armed timer not yet fired in this pass, or NULL. */
static struct evloop_timer *next_timer(const struct evloop *l)
{
    struct evloop_timer *best = NULL;
    for (struct evloop_timer *t = l->timers; t; t = t->next)
        if (t->pass != l->pass && (!best || t->deadline_ns < best->deadline_ns))
            best = t;
    return best;
}

static void fire_timers(struct evloop *l)
{
    uint64_t now = clock_mono_ns();
    struct evloop_timer *t;
    /* one at a time: a callback may cancel or re-arm any timer */
    while ((t = next_timer(l)) && t->deadline_ns <= now) {
        evloop_timer_cancel(l, t);
        t->pass = l->pass;
        t->fn(t->opaque);
    }
}

/* ---- running ---- */

int evloop_run_once(struct evloop *l, int timeout_ms)
{
    l->pass++;
    struct evloop_timer *t = next_timer(l);
    if (t) {
        uint64_t now = clock_mono_ns(), ms = 0;
        if (t->deadline_ns > now)
            ms = (t->deadline_ns - now + 999999) / 1000000;   /* never early */
        if (ms > INT_MAX)
            ms = INT_MAX;
        if (timeout_ms < 0 || ms < (uint64_t)timeout_ms)
            timeout_ms = (int)ms;
    }
    struct epoll_event ev[MAX_EVENTS];
    int n = epoll_wait(l->epfd, ev, MAX_EVENTS, timeout_ms);
    if (n < 0)
        return errno == EINTR ? 0 : -errno;
    for (int i = 0; i < n; i++) {
        if (ev[i].data.u64 == STOP_KEY) {
            evloop_clear_stop(l);
            return 1;
        }
    }
    for (int i = 0; i < n; i++) {
        int fd = (int)(uint32_t)ev[i].data.u64;
        uint32_t gen = (uint32_t)(ev[i].data.u64 >> 32);
        struct slot *s = slot_of(l, fd);
        if (!s || s->gen != gen || !s->events)
            continue;       /* removed, replaced or silenced by an earlier callback */
        s->fn(s->opaque, fd, ev[i].events & REPORT_MASK);
    }
    fire_timers(l);
    return 0;
}

int evloop_run(struct evloop *l)
{
    int r;
    while ((r = evloop_run_once(l, -1)) == 0)
        ;
    return r > 0 ? 0 : r;
}

void evloop_stop(struct evloop *l)
{
    uint64_t one = 1;
    ssize_t n = write(l->stopfd, &one, sizeof one);
    (void)n;        /* only EAGAIN (counter saturated): a stop is pending */
}

void evloop_clear_stop(struct evloop *l)
{
    uint64_t v;
    ssize_t n = read(l->stopfd, &v, sizeof v);
    (void)n;        /* EAGAIN: none pending */
}

/* ---- eventfds ---- */

int evloop_eventfd_take(int fd, uint64_t *val)
{
    struct iovec iov = { val, sizeof *val };
    ssize_t n;
    do
        n = preadv2(fd, &iov, 1, -1, RWF_NOWAIT);
    while (n < 0 && errno == EINTR);
    if (n == (ssize_t)sizeof *val)
        return 1;
    if (n >= 0)
        return -EIO;
    if (errno == EAGAIN)
        return 0;
    if (errno != EOPNOTSUPP && errno != EINVAL && errno != ENOSYS)
        return -errno;
    /* Kernels before 5.12 have no RWF_NOWAIT for eventfds: look first. The
     * device thread is the only reader of its kick fds while it runs, so
     * a counter seen non-zero is still there for the read. */
    struct pollfd p = { .fd = fd, .events = POLLIN };
    int r = poll(&p, 1, 0);
    if (r < 0)
        return -errno;
    if (r == 0 || !(p.revents & POLLIN))
        return 0;
    do
        n = read(fd, val, sizeof *val);
    while (n < 0 && errno == EINTR);
    if (n == (ssize_t)sizeof *val)
        return 1;
    if (n < 0)
        return errno == EAGAIN ? 0 : -errno;
    return -EIO;
}
