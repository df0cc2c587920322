/* envd's agent connections (serve_envd.c): each in use listed (struct
 * live) so that forget and stop can cut it; frames sent under a lock, read
 * with one deadline, one call and its answer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include "vmm/base/clock.h"

#include "vmm/api/e2b/envd_int.h"

/* Once envd_stop began (stopping is set before its cut()), a new
 * connection is born cut: its calls fail at once, so MHD_stop_daemon never
 * waits on a request that registered too late to be cut. */
void envd_live_add(struct envd_server *s, struct live *l, const char *sb, int fd)
{
    snprintf(l->sb, sizeof l->sb, "%s", sb);
    l->fd = fd;
    atomic_store(&l->cancelled, 0);
    pthread_mutex_lock(&s->lock);
    l->next = s->lives;
    s->lives = l;
    if (atomic_load(&s->stopping)) {
        atomic_store(&l->cancelled, 1);
        shutdown(fd, SHUT_RDWR);
    }
    pthread_mutex_unlock(&s->lock);
}

void envd_live_del(struct envd_server *s, struct live *l)
{
    pthread_mutex_lock(&s->lock);
    for (struct live **pp = &s->lives; *pp; pp = &(*pp)->next)
        if (*pp == l) {
            *pp = l->next;
            break;
        }
    pthread_mutex_unlock(&s->lock);
}

/* Send a whole frame buffer (blocking, bounded). lk may be NULL. */
int envd_ag_send(struct agent_client *c, pthread_mutex_t *lk, const struct agent_buf *b)
{
    int r = 0;
    size_t off = 0;
    int64_t deadline = clock_mono_ms() + c->timeout_ms;
    if (lk)
        pthread_mutex_lock(lk);
    while (off < b->len) {
        ssize_t k = send(c->fd, b->p + off, b->len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) {
            off += (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && errno != EAGAIN) {
            r = -errno;
            break;
        }
        int left = clock_ms_left(deadline);
        struct pollfd p = { .fd = c->fd, .events = POLLOUT };
        if (left == 0 || poll(&p, 1, left) == 0) {
            r = -ETIMEDOUT;
            break;
        }
    }
    if (lk)
        pthread_mutex_unlock(lk);
    return r;
}

/* The next frame within timeout_ms. Also gives up when lv is cancelled
 * (-ECANCELED) or client_fd (>= 0) hangs up (-EPIPE). */
int envd_ag_next(struct agent_client *c, struct agent_hdr *h, const uint8_t **pl, int timeout_ms,
                 struct live *lv, int client_fd)
{
    int64_t deadline = clock_mono_ms() + timeout_ms;
    uint8_t buf[65536];
    for (;;) {
        int r = agent_client_take(c, h, pl);
        if (r)
            return r < 0 ? r : 0;
        if (lv && atomic_load(&lv->cancelled))
            return -ECANCELED;
        int left = clock_ms_left(deadline);
        if (left == 0)
            return -ETIMEDOUT;
        struct pollfd p[2] = { { .fd = c->fd, .events = POLLIN }, { .fd = client_fd, .events = POLLRDHUP } };
        int n = poll(p, client_fd >= 0 ? 2 : 1, left > 1000 ? 1000 : left);
        if (n < 0 && errno != EINTR)
            return -errno;
        if (n <= 0)
            continue;
        if (client_fd >= 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR)))
            return -EPIPE;
        if (!p[0].revents)
            continue;
        if ((r = agent_client_recv(c, buf, sizeof buf)) < 0)
            return r;
    }
}

/* Send one request frame and wait for its OK / ERROR. *eno: the guest's
 * errno of an ERROR(SYS), else 0. */
int envd_ag_call(struct agent_client *c, struct live *lv, const struct agent_buf *frame, uint32_t id,
                 int *eno, char *msg, size_t ml)
{
    *eno = 0;
    int64_t deadline = clock_mono_ms() + c->timeout_ms;     /* for the whole call */
    int r = envd_ag_send(c, NULL, frame);
    if (r < 0)
        return r;
    for (;;) {
        struct agent_hdr h;
        const uint8_t *pl;
        int left = clock_ms_left(deadline);
        if (left == 0)
            return -ETIMEDOUT;
        if ((r = envd_ag_next(c, &h, &pl, left, lv, -1)) < 0)
            return r;
        if (h.id != id)
            continue;
        if (h.type == AGENT_T_OK)
            return 0;
        struct agent_error er;
        if (h.type != AGENT_T_ERROR || agent_error_decode(pl, h.len, &er, NULL) < 0)
            return -EPROTO;
        *eno = (int)er.sys_errno;
        snprintf(msg, ml, "%.*s", (int)er.msg_len, er.msg);
        return -EREMOTEIO;
    }
}
