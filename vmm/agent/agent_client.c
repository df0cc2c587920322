/* Host side of the guest agent protocol (agent_client.h). */
#include "vmm/agent/agent_client.h"
#include "vmm/base/clock.h"
#include "vmm/base/fullio.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define HANDSHAKE_MS  10000
#define OUT_HIGH      (1u << 20)

static int wait_fd(int fd, short ev, int ms)
{
    struct pollfd p = { .fd = fd, .events = ev };
    for (;;) {
        int r = poll(&p, 1, ms);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        return r == 0 ? -ETIMEDOUT : 0;
    }
}

/* Send everything queued (blocking, via poll on the nonblocking socket). */
static int flush_out(struct agent_client *c)
{
    while (c->out.len) {
        ssize_t k = send(c->fd, c->out.p, c->out.len, MSG_NOSIGNAL);
        if (k < 0 && errno == EAGAIN) {
            int r = wait_fd(c->fd, POLLOUT, -1);
            if (r < 0)
                return r;
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -errno;
        agent_buf_consume(&c->out, (size_t)k);
    }
    return 0;
}

/* Read more bytes into rx; ms < 0 waits forever. */
static int fill(struct agent_client *c, int ms)
{
    uint8_t buf[65536];
    for (;;) {
        ssize_t k = recv(c->fd, buf, sizeof buf, 0);
        if (k > 0)
            return agent_rx_push(&c->rx, buf, (size_t)k);
        if (k == 0)
            return -ECONNRESET;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN)
            return -errno;
        int r = wait_fd(c->fd, POLLIN, ms);
        if (r < 0)
            return r;
    }
}

int agent_client_take(struct agent_client *c, struct agent_hdr *h, const uint8_t **pl)
{
    enum agent_err e;
    int r = agent_rx_next(&c->rx, h, pl, &e);
    return r < 0 ? -EPROTO : r;
}

int agent_client_recv(struct agent_client *c, uint8_t *buf, size_t len)
{
    ssize_t k = recv(c->fd, buf, len, MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (k <= 0)
        return k < 0 ? -errno : -ECONNRESET;
    int r = agent_rx_push(&c->rx, buf, (size_t)k);
    return r < 0 ? r : 1;
}

/* The next frame within ms (-1: no limit) in total, however the bytes
 * trickle in. */
static int next_frame(struct agent_client *c, struct agent_hdr *h, const uint8_t **pl, int ms)
{
    int64_t deadline = ms < 0 ? -1 : clock_mono_ms() + ms;
    for (;;) {
        int r = agent_client_take(c, h, pl);
        if (r)
            return r < 0 ? r : 0;
        int left = clock_ms_left(deadline);
        if (left == 0)
            return -ETIMEDOUT;
        r = fill(c, left);
        if (r < 0)
            return r;
    }
}

/* A new request id; forgets the previous request's errno. */
static uint32_t new_id(struct agent_client *c)
{
    c->last_errno = 0;
    return c->next_id++;
}

static int remote_error(struct agent_client *c, const uint8_t *pl, size_t n, char *err,
                        size_t errlen)
{
    struct agent_error er;
    if (agent_error_decode(pl, n, &er, NULL) < 0)
        return -EPROTO;
    c->last_errno = (int)er.sys_errno;
    if (err && errlen)
        snprintf(err, errlen, "%.*s", (int)er.msg_len, er.msg);
    return -EREMOTEIO;
}

int agent_client_connect(struct agent_client *c, const char *path, int hybrid, unsigned port)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    memset(c, 0, sizeof *c);
    c->fd = -1;
    c->next_id = 1;
    if (strlen(path) >= sizeof sa.sun_path)
        return -ENAMETOOLONG;
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        int r = -errno;
        close(fd);
        return r;
    }
    return agent_client_attach(c, fd, hybrid, port, HANDSHAKE_MS);
}

int agent_client_attach(struct agent_client *c, int fd, int hybrid, unsigned port, int timeout_ms)
{
    memset(c, 0, sizeof *c);
    c->next_id = 1;
    c->fd = fd;
    int r;
    if (hybrid) {
        char line[64];
        int n = snprintf(line, sizeof line, "CONNECT %u\n", port);
        ssize_t w = write_full(fd, line, (size_t)n);
        if (w < 0) {
            r = (int)w;
            goto fail;
        }
        /* Byte by byte: what follows the line is already the agent's. */
        size_t len = 0;
        for (;;) {
            char ch;
            r = wait_fd(fd, POLLIN, timeout_ms);
            if (r < 0)
                goto fail;
            ssize_t k = read(fd, &ch, 1);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                r = k < 0 ? -errno : -ECONNRESET;
                goto fail;
            }
            if (ch == '\n')
                break;
            if (len + 1 >= sizeof line) {
                r = -EPROTO;
                goto fail;
            }
            line[len++] = ch;
        }
        line[len] = 0;
        if (strncmp(line, "OK ", 3) != 0) {
            r = -ECONNREFUSED;
            goto fail;
        }
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    struct agent_hdr h;
    const uint8_t *pl;
    r = next_frame(c, &h, &pl, timeout_ms);
    if (r < 0)
        goto fail;
    uint32_t ver;
    if (h.type != AGENT_T_READY || agent_u32_decode(pl, h.len, &ver, NULL) < 0 || ver != 1) {
        r = -EPROTO;
        goto fail;
    }
    return 0;
fail:
    agent_client_close(c);
    return r;
}

void agent_client_close(struct agent_client *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    agent_rx_free(&c->rx);
    agent_buf_free(&c->out);
}

int agent_exit_status(const struct agent_exit *st)
{
    return st->kind == AGENT_EXIT_SIGNAL ? 128 + (int)st->value : (int)st->value;
}

static int exec_loop(struct agent_client *c, uint32_t id, uint8_t *buf, int in_fd, int out_fd,
                     int err_fd, struct agent_exit *st, char *err, size_t errlen);

int agent_client_exec(struct agent_client *c, struct agent_exec *req, int in_fd, int out_fd,
                      int err_fd, struct agent_exit *st, char *err, size_t errlen)
{
    uint32_t id = new_id(c);
    req->flags = in_fd >= 0 ? (req->flags | AGENT_EXEC_STDIN) : (req->flags & ~AGENT_EXEC_STDIN);
    int r = agent_put_exec(&c->out, id, req);
    if (r < 0)
        return r;
    uint8_t *buf = malloc(AGENT_CHUNK);
    if (!buf)
        return -ENOMEM;
    r = exec_loop(c, id, buf, in_fd, out_fd, err_fd, st, err, errlen);
    free(buf);
    return r;
}

static int exec_loop(struct agent_client *c, uint32_t id, uint8_t *buf, int in_fd, int out_fd,
                     int err_fd, struct agent_exit *st, char *err, size_t errlen)
{
    int r, in_open = in_fd >= 0;
    const size_t bufsz = AGENT_CHUNK;
    for (;;) {
        struct pollfd p[2] = { { .fd = c->fd, .events = POLLIN }, { .fd = in_fd, .events = POLLIN } };
        if (c->out.len)
            p[0].events |= POLLOUT;
        nfds_t np = in_open && c->out.len < OUT_HIGH ? 2 : 1;
        if (poll(p, np, -1) < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (np == 2 && p[1].revents) {
            ssize_t k = read(in_fd, buf, bufsz);
            if (k < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            if (k > 0)
                r = agent_put_frame(&c->out, AGENT_T_STDIN, id, buf, (size_t)k);
            else {
                in_open = 0;
                r = agent_put_frame(&c->out, AGENT_T_STDIN_EOF, id, NULL, 0);
            }
            if (r < 0)
                return r;
        }
        if ((p[0].revents & POLLOUT) && c->out.len) {
            ssize_t k = send(c->fd, c->out.p, c->out.len, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (k < 0 && errno != EAGAIN && errno != EINTR)
                return -errno;
            if (k > 0)
                agent_buf_consume(&c->out, (size_t)k);
        }
        if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        if ((r = agent_client_recv(c, buf, bufsz)) <= 0) {
            if (r == 0)
                continue;
            return r;
        }
        for (;;) {
            struct agent_hdr h;
            const uint8_t *pl;
            if ((r = agent_client_take(c, &h, &pl)) == 0)
                break;
            if (r < 0)
                return r;
            if (h.id != id)
                continue;       /* not ours (e.g. a late error for an old id) */
            switch (h.type) {
            case AGENT_T_STDOUT:
            case AGENT_T_STDERR: {
                ssize_t w = write_full(h.type == AGENT_T_STDOUT ? out_fd : err_fd, pl, h.len);
                if (w < 0)
                    return (int)w;  /* -EPIPE: our reader went away */
                break;
            }
            case AGENT_T_EXIT:
                if (agent_exit_decode(pl, h.len, st, NULL) < 0)
                    return -EPROTO;
                return 0;
            case AGENT_T_ERROR:
                return remote_error(c, pl, h.len, err, errlen);
            default:
                return -EPROTO;
            }
        }
    }
}

/* The deadline of a call starting now (c->timeout_ms; -1: none). */
static int64_t call_deadline(const struct agent_client *c)
{
    return c->timeout_ms > 0 ? clock_mono_ms() + c->timeout_ms : -1;
}

/* The next frame answering request id (frames for other ids are skipped)
 * before deadline (-1: none): neither those frames nor trickled bytes
 * extend it. */
static int next_reply(struct agent_client *c, uint32_t id, struct agent_hdr *h,
                      const uint8_t **pl, int64_t deadline)
{
    int r;
    do {
        int left = clock_ms_left(deadline);
        if (left == 0)
            return -ETIMEDOUT;
        if ((r = next_frame(c, h, pl, left)) < 0)
            return r;
    } while (h->id != id);
    return 0;
}

/* Wait for the OK (or ERROR) answering request id until deadline (-1:
 * none). */
static int wait_ok_until(struct agent_client *c, uint32_t id, int64_t deadline, char *err,
                         size_t errlen)
{
    struct agent_hdr h;
    const uint8_t *pl;
    int r = next_reply(c, id, &h, &pl, deadline);
    if (r < 0)
        return r;
    if (h.type == AGENT_T_OK)
        return h.len ? -EPROTO : 0;
    if (h.type == AGENT_T_ERROR)
        return remote_error(c, pl, h.len, err, errlen);
    return -EPROTO;
}

static int wait_ok(struct agent_client *c, uint32_t id, char *err, size_t errlen)
{
    return wait_ok_until(c, id, call_deadline(c), err, errlen);
}

static int put_loop(struct agent_client *c, uint32_t id, uint8_t *buf, int local_fd,
                    const char *remote, uint32_t mode, char *err, size_t errlen);

int agent_client_put(struct agent_client *c, int local_fd, const char *remote, uint32_t mode,
                     char *err, size_t errlen)
{
    uint8_t *buf = malloc(AGENT_CHUNK);
    if (!buf)
        return -ENOMEM;
    int r = put_loop(c, new_id(c), buf, local_fd, remote, mode, err, errlen);
    free(buf);
    return r;
}

static int put_loop(struct agent_client *c, uint32_t id, uint8_t *buf, int local_fd,
                    const char *remote, uint32_t mode, char *err, size_t errlen)
{
    const size_t bufsz = AGENT_CHUNK;
    uint32_t flags = 0;
    for (;;) {
        ssize_t k = read_full(local_fd, buf, bufsz);      /* full chunks: fewer round trips */
        if (k < 0)
            return (int)k;
        size_t got = (size_t)k;
        if (got == 0 && flags)
            return 0;                   /* EOF after at least one chunk */
        int r = agent_put_fwrite(&c->out, id, flags, mode & 07777, remote, buf, got);
        if (r < 0)
            return r;
        if ((r = flush_out(c)) < 0 || (r = wait_ok(c, id, err, errlen)) < 0)
            return r;
        flags = AGENT_FW_APPEND;
        if (got < bufsz)
            return 0;
    }
}

int agent_client_get(struct agent_client *c, const char *remote, int local_fd, uint32_t *mode,
                     char *err, size_t errlen)
{
    uint32_t id = new_id(c);
    uint64_t total = 0;
    int r = agent_put_frame(&c->out, AGENT_T_FILE_READ, id, remote, strlen(remote));
    if (r < 0 || (r = flush_out(c)) < 0)
        return r;
    int64_t deadline = call_deadline(c);
    for (;;) {
        struct agent_hdr h;
        const uint8_t *pl;
        if ((r = next_reply(c, id, &h, &pl, deadline)) < 0)
            return r;
        if (h.type == AGENT_T_FILE_DATA) {
            ssize_t w = write_full(local_fd, pl, h.len);
            if (w < 0)
                return (int)w;
            total += h.len;
        } else if (h.type == AGENT_T_FILE_END) {
            uint64_t size;
            if (agent_file_end_decode(pl, h.len, mode, &size, NULL) < 0 || size != total)
                return -EPROTO;
            return 0;
        } else if (h.type == AGENT_T_ERROR) {
            return remote_error(c, pl, h.len, err, errlen);
        } else {
            return -EPROTO;
        }
    }
}

int agent_client_mkdir(struct agent_client *c, const char *remote, uint32_t mode, int parents,
                       char *err, size_t errlen)
{
    uint32_t id = new_id(c);
    int r = agent_put_mkdir(&c->out, id, mode & 07777, parents ? AGENT_MKDIR_PARENTS : 0, remote);
    if (r < 0 || (r = flush_out(c)) < 0)
        return r;
    return wait_ok(c, id, err, errlen);
}

int agent_client_request(struct agent_client *c, uint32_t type, const void *payload, size_t len,
                         int timeout_ms, char *err, size_t errlen)
{
    uint32_t id = new_id(c);
    int r = agent_put_frame(&c->out, type, id, payload, len);
    if (r < 0 || (r = flush_out(c)) < 0)
        return r;
    /* One deadline for the whole request: frames with other ids (an agent
     * that streams them) must not extend it. */
    return wait_ok_until(c, id, timeout_ms < 0 ? -1 : clock_mono_ms() + timeout_ms, err, errlen);
}

int agent_client_ping(struct agent_client *c)
{
    uint32_t id = new_id(c);
    int r = agent_put_frame(&c->out, AGENT_T_PING, id, "moat", 4);
    if (r < 0 || (r = flush_out(c)) < 0)
        return r;
    for (;;) {
        struct agent_hdr h;
        const uint8_t *pl;
        if ((r = next_frame(c, &h, &pl, HANDSHAKE_MS)) < 0)
            return r;
        if (h.id != id)
            continue;
        if (h.type != AGENT_T_PONG || h.len != 4 || memcmp(pl, "moat", 4))
            return -EPROTO;
        return 0;
    }
}

int agent_client_last_errno(const struct agent_client *c)
{
    return c->last_errno;
}

int agent_client_rename(struct agent_client *c, const char *src, const char *dst,
                        char *err, size_t errlen)
{
    uint32_t id = new_id(c);
    int r = agent_put_rename(&c->out, id, src, dst);
    if (r < 0 || (r = flush_out(c)) < 0)
        return r;
    return wait_ok(c, id, err, errlen);
}

int agent_client_remove(struct agent_client *c, const char *path, int recursive,
                        char *err, size_t errlen)
{
    uint32_t id = new_id(c);
    int r = agent_put_remove(&c->out, id, recursive ? AGENT_RM_RECURSIVE : 0, path);
    if (r < 0 || (r = flush_out(c)) < 0)
        return r;
    return wait_ok(c, id, err, errlen);
}

int agent_client_stat(struct agent_client *c, const char *path, int nofollow,
                      struct agent_stat *st, char *err, size_t errlen)
{
    uint32_t id = new_id(c);
    int r = agent_put_stat(&c->out, id, nofollow ? AGENT_STAT_NOFOLLOW : 0, path);
    if (r < 0 || (r = flush_out(c)) < 0)
        return r;
    struct agent_hdr h;
    const uint8_t *pl;
    if ((r = next_reply(c, id, &h, &pl, call_deadline(c))) < 0)
        return r;
    if (h.type == AGENT_T_ERROR)
        return remote_error(c, pl, h.len, err, errlen);
    if (h.type != AGENT_T_STAT_INFO || agent_entry_decode(pl, h.len, st, NULL) < 0 ||
        strcmp(st->path, path) != 0)
        return -EPROTO;
    return 0;
}

int agent_client_list(struct agent_client *c, const char *path, unsigned depth,
                      int (*cb)(void *arg, const struct agent_stat *e), void *arg,
                      char *err, size_t errlen)
{
    uint32_t id = new_id(c);
    if (depth < 1 || depth > AGENT_LIST_MAX_DEPTH)
        return -EINVAL;
    int r = agent_put_list(&c->out, id, depth, path);
    if (r < 0 || (r = flush_out(c)) < 0)
        return r;
    struct agent_stat *e = malloc(sizeof *e);
    if (!e)
        return -ENOMEM;
    uint32_t seen = 0;
    int stop = 0;
    int64_t deadline = call_deadline(c);
    for (;;) {
        struct agent_hdr h;
        const uint8_t *pl;
        if ((r = next_reply(c, id, &h, &pl, deadline)) < 0)
            break;
        if (h.type == AGENT_T_LIST_ENTRY) {
            if (seen >= AGENT_LIST_MAX_ENTRIES || agent_entry_decode(pl, h.len, e, NULL) < 0 ||
                agent_list_path_check(path, depth, e->path) < 0) {
                r = -EPROTO;
                break;
            }
            seen++;
            if (!stop)
                stop = cb(arg, e);
            continue;
        }
        if (h.type == AGENT_T_LIST_END) {
            uint32_t count;
            r = agent_list_end_decode(pl, h.len, &count, NULL) < 0 || count != seen ? -EPROTO : 0;
        } else if (h.type == AGENT_T_ERROR) {
            r = remote_error(c, pl, h.len, err, errlen);
        } else {
            r = -EPROTO;
        }
        break;
    }
    free(e);
    /* The callback's stop wins over the end of the listing (drained), not
     * over a broken connection or protocol. */
    if (stop && (r == 0 || r == -EREMOTEIO))
        return stop;
    return r;
}
