/* Console output through a bounded buffer and a writer thread
 * (vmm/core/console.h). */
#include "vmm/core/console.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "vmm/base/clock.h"

#include "vmm/base/log.h"
#include "vmm/base/scfilter.h"

static const char limit_note[] = "\n[moat: console output limit reached; the rest is dropped]\n";

int console_init(struct console_out *c, int fd, size_t cap, uint64_t limit)
{
    memset(c, 0, sizeof(*c));
    c->fd = fd;
    c->limit = limit;
    c->wake_efd = -1;
    c->cap = cap ? cap : CONSOLE_BUF_DEFAULT;
    if (c->cap < 256)
        return -EINVAL;   /* room for the notes, at least */
    pthread_mutex_init(&c->lock, NULL);
    cond_init_mono(&c->cond);
    if (fd < 0)
        return 0;
    c->buf = malloc(c->cap);   /* untouched pages cost nothing until used */
    c->wake_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (!c->buf || c->wake_efd < 0) {
        int e = !c->buf ? -ENOMEM : -errno;
        console_destroy(c);
        return e;
    }
    return 0;
}

/* ---- the producer side (vCPU thread, UART lock held) ---- */

static void enqueue_locked(struct console_out *c, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        c->buf[(c->head + c->len + i) % c->cap] = p[i];
    if (c->len == 0)
        pthread_cond_broadcast(&c->cond);
    c->len += n;
    c->enq += n;
}

static void drop_locked(struct console_out *c, uint64_t n)
{
    c->dropped += n;
    c->gap += n;
}

void console_put(struct console_out *c, uint8_t byte)
{
    if (c->fd < 0)
        return;
    pthread_mutex_lock(&c->lock);
    c->accepted++;   /* every byte the guest wrote */
    if (c->capped) {
        pthread_mutex_unlock(&c->lock);
        return;
    }
    if (c->limit && c->accepted > c->limit) {
        /* A guest cannot fill the host's disk through its console. */
        c->capped = true;
        if (!c->dead && c->cap - c->len >= sizeof limit_note - 1)
            enqueue_locked(c, (const uint8_t *)limit_note, sizeof limit_note - 1);
        pthread_mutex_unlock(&c->lock);
        return;
    }
    if (c->dead) {
        c->dropped++;
    } else if (c->gap) {
        /* Mark the gap in the stream once there is room for the mark. */
        char note[80];
        int k = snprintf(note, sizeof note, "\n[moat: %llu bytes of console output dropped]\n",
                         (unsigned long long)c->gap);
        if (c->cap - c->len >= (size_t)k + 1) {
            c->gap = 0;
            enqueue_locked(c, (const uint8_t *)note, (size_t)k);
            enqueue_locked(c, &byte, 1);
        } else {
            drop_locked(c, 1);
        }
    } else if (c->len < c->cap) {
        enqueue_locked(c, &byte, 1);
    } else {
        drop_locked(c, 1);
    }
    pthread_mutex_unlock(&c->lock);
}

/* ---- the writer thread ---- */

/* How the writer writes: W_PLAIN regular files and block devices (the
 * disk, not a reader), W_SOCKET send(MSG_DONTWAIT), W_NONBLOCK a
 * non-blocking description (the caller's, or one of our own: owned), W_POLL
 * a blocking pipe or terminal that could not be reopened (poll() for room
 * first, then at most POLL_CHUNK bytes, which a pipe or tty with room takes
 * without blocking). */
enum wmode { W_PLAIN, W_SOCKET, W_NONBLOCK, W_POLL };
#define POLL_CHUNK 256

static enum wmode writer_fd(int fd, int *wfd, bool *owned)
{
    *wfd = fd;
    *owned = false;
    struct stat st;
    if (fstat(fd, &st) < 0)
        return W_POLL;
    if (S_ISSOCK(st.st_mode))
        return W_SOCKET;
    if (!S_ISFIFO(st.st_mode) && !S_ISCHR(st.st_mode))
        return W_PLAIN;
    /* Reopening a pty master through /proc would open a new pty. */
    unsigned int ptn;
    if (S_ISCHR(st.st_mode) && ioctl(fd, TIOCGPTN, &ptn) == 0)
        return W_POLL;
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && (fl & O_NONBLOCK))
        return W_NONBLOCK;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    int o = open(path, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (o < 0) {
        log_debug("console: reopening fd %d non-blocking: %s; polling before each write", fd, strerror(errno));
        return W_POLL;
    }
    *wfd = o;
    *owned = true;
    return W_NONBLOCK;
}

static ssize_t write_some(struct console_out *c, int fd, enum wmode m, const uint8_t *p, size_t n)
{
    ssize_t w;
    for (;;) {
        w = m == W_SOCKET ? send(fd, p, n, MSG_DONTWAIT) : write(fd, p, n);
        if (w >= 0 || errno != EINTR || atomic_load(&c->abort_io))
            break;
    }
    return w < 0 ? -errno : w;
}

/* Everything still queued is lost (a dead fd, or a stalled reader at stop). */
static void discard_locked(struct console_out *c)
{
    c->dropped += c->len;
    c->deq += c->len;
    c->head = (c->head + c->len) % c->cap;
    c->len = 0;
    pthread_cond_broadcast(&c->cond);
}

static void *writer_thread(void *arg)
{
    struct console_out *c = arg;
    /* No signal is handled here but SIGPIPE: a write to a pipe whose reader
     * has gone raises it as any write(2) does, and the process's disposition
     * decides (by default the process ends; ignored, we see EPIPE). */
    sigset_t all;
    sigfillset(&all);
    sigdelset(&all, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    int wfd;
    bool owned;
    enum wmode mode = c->test_blocking ? W_PLAIN : writer_fd(c->fd, &wfd, &owned);
    if (c->test_blocking) {
        wfd = c->fd;
        owned = false;
    }
    /* After the reopen above; a failure leaves the writer unfiltered but
     * logged (the guest cannot reach this thread's calls). */
    sc_install(SC_CONSOLE, (enum sc_mode)c->seccomp);
    /* Where a write may block, the kick signal may interrupt it (only
     * inside the write: see console_stop). */
    bool may_block = mode == W_POLL || c->test_blocking;
    sigset_t kick;
    sigemptyset(&kick);
    if (c->kick_signal > 0)
        sigaddset(&kick, c->kick_signal);
    uint8_t chunk[4096];   /* <= PIPE_BUF */
    bool want_room = mode == W_POLL;

    pthread_mutex_lock(&c->lock);
    for (;;) {
        while (c->len == 0 && !c->stop)
            pthread_cond_wait(&c->cond, &c->lock);
        if (c->len == 0)
            break;   /* stopping, and nothing is left */
        size_t n = c->len;
        if (n > c->cap - c->head)
            n = c->cap - c->head;
        if (n > (mode == W_POLL ? POLL_CHUNK : sizeof chunk))
            n = mode == W_POLL ? POLL_CHUNK : sizeof chunk;
        memcpy(chunk, c->buf + c->head, n);
        bool stopping = c->stop;
        int idle = c->stop_idle_ms;
        pthread_mutex_unlock(&c->lock);

        ssize_t w;
        if (want_room) {
            w = -EAGAIN;
        } else {
            if (may_block)
                pthread_sigmask(SIG_UNBLOCK, &kick, NULL);
            w = write_some(c, wfd, mode, chunk, n);
            if (may_block)
                pthread_sigmask(SIG_BLOCK, &kick, NULL);
        }
        if (w == -EINTR) {   /* console_stop gave up on a write that blocked */
            pthread_mutex_lock(&c->lock);
            c->stalled = true;
            discard_locked(c);
            break;
        }
        if (w == -EAGAIN || w == -EWOULDBLOCK) {
            struct pollfd p[2] = { { .fd = wfd, .events = POLLOUT }, { .fd = c->wake_efd, .events = POLLIN } };
            int r = poll(p, 2, stopping ? idle : -1);
            if (p[1].revents & POLLIN) {
                uint64_t v;
                if (read(c->wake_efd, &v, sizeof v) < 0) { /* nonblocking; nothing to do */ }
            }
            want_room = mode == W_POLL && !(p[0].revents & (POLLOUT | POLLERR | POLLHUP));
            pthread_mutex_lock(&c->lock);
            if (r == 0 && stopping) {
                c->stalled = true;
                discard_locked(c);   /* the reader took nothing for idle ms */
                break;
            }
            continue;
        }
        if (w <= 0) {
            /* Logged without the lock: stderr may be the very reader that
             * stalled, and console_put (the vCPU) must never wait on it. */
            bool first = !atomic_exchange(&c->dead_logged, true);
            if (first)
                log_warn("console: writing guest output: %s; the rest of it is dropped",
                         w == 0 ? "no progress" : strerror((int)-w));
            pthread_mutex_lock(&c->lock);
            c->dead = true;
            discard_locked(c);
            continue;
        }
        pthread_mutex_lock(&c->lock);
        c->head = (c->head + (size_t)w) % c->cap;
        c->len -= (size_t)w;
        c->deq += (uint64_t)w;
        c->written += (uint64_t)w;
        c->progress++;
        atomic_store(&c->progress_pub, c->progress);
        c->stalled = false;
        want_room = mode == W_POLL;
        pthread_cond_broadcast(&c->cond);
    }
    pthread_mutex_unlock(&c->lock);
    if (owned)
        close(wfd);
    return NULL;
}

int console_start(struct console_out *c, int kick_signal)
{
    if (c->fd < 0 || c->started)
        return 0;
    c->kick_signal = kick_signal;
    int r = -pthread_create(&c->thread, NULL, writer_thread, c);
    if (r == 0)
        c->started = true;
    return r;
}

int console_drain(struct console_out *c, int idle_ms)
{
    if (c->fd < 0)
        return 0;
    pthread_mutex_lock(&c->lock);
    if (!c->started) {
        pthread_mutex_unlock(&c->lock);
        return 0;
    }
    uint64_t target = c->enq;
    int r = 0;
    while (c->deq < target) {
        if (c->stalled) {   /* gave up before, and the reader has taken nothing since */
            r = -ETIMEDOUT;
            break;
        }
        uint64_t p = c->progress;
        struct timespec t = clock_mono_after_ms((uint64_t)(idle_ms));
        while (c->deq < target && c->progress == p)
            if (pthread_cond_timedwait(&c->cond, &c->lock, &t) == ETIMEDOUT)
                break;
        if (c->deq < target && c->progress == p) {
            c->stalled = true;
            r = -ETIMEDOUT;
            break;
        }
    }
    pthread_mutex_unlock(&c->lock);
    return r;
}

int console_flush(struct console_out *c, int ms)
{
    if (c->fd < 0)
        return 0;
    pthread_mutex_lock(&c->lock);
    uint64_t target = c->enq;
    struct timespec t = clock_mono_after_ms((uint64_t)(ms));
    int r = 0;
    while (c->started && c->deq < target && !c->stalled)
        if (pthread_cond_timedwait(&c->cond, &c->lock, &t) == ETIMEDOUT)
            break;
    if (c->deq < target)
        r = -ETIMEDOUT;
    pthread_mutex_unlock(&c->lock);
    return r;
}

void console_stop(struct console_out *c, int idle_ms)
{
    if (c->fd < 0)
        return;
    pthread_mutex_lock(&c->lock);
    if (!c->started) {
        pthread_mutex_unlock(&c->lock);
        return;
    }
    c->stop = true;
    c->stop_idle_ms = c->stalled ? 0 : idle_ms;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    uint64_t one = 1;
    if (write(c->wake_efd, &one, sizeof one) < 0) { /* the counter cannot overflow here */ }
    /* The writer finishes by itself unless a write blocks (W_POLL): then,
     * once it has made no progress for idle_ms, interrupt it, every 20 ms
     * until it is gone (a signal can land just before the write). */
    uint64_t last = atomic_load(&c->progress_pub);
    struct timespec since;
    clock_gettime(CLOCK_MONOTONIC, &since);
    for (;;) {
        struct timespec t = clock_mono_after_ms((uint64_t)(20));
        if (pthread_clockjoin_np(c->thread, NULL, CLOCK_MONOTONIC, &t) != ETIMEDOUT)
            break;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        uint64_t p = atomic_load(&c->progress_pub);
        if (p != last) {
            last = p;
            since = now;
            continue;
        }
        long ms = (long)(now.tv_sec - since.tv_sec) * 1000 + (now.tv_nsec - since.tv_nsec) / 1000000;
        if (ms >= idle_ms && c->kick_signal > 0) {
            atomic_store(&c->abort_io, true);
            pthread_kill(c->thread, c->kick_signal);
        }
    }
    pthread_mutex_lock(&c->lock);
    c->started = false;
    discard_locked(c);
    pthread_mutex_unlock(&c->lock);
}

void console_destroy(struct console_out *c)
{
    console_stop(c, 0);
    free(c->buf);
    c->buf = NULL;
    if (c->wake_efd >= 0)
        close(c->wake_efd);
    c->wake_efd = -1;
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->cond);
}

void console_get_stats(struct console_out *c, struct console_stats *s)
{
    pthread_mutex_lock(&c->lock);
    s->accepted = c->accepted;
    s->written = c->written;
    s->dropped = c->dropped;
    s->queued = c->len;
    s->cap = c->fd < 0 ? 0 : c->cap;
    s->capped = c->capped;
    s->dead = c->dead;
    pthread_mutex_unlock(&c->lock);
}
