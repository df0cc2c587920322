/* `moat serve`'s envd server (serve_envd.h; docs/serve.md, "The envd endpoint").
 *
 * libmicrohttpd runs a thread per connection, so a slow client or a long
 * process stream blocks only its own thread. Each request is routed,
 * then resolved (E2b-Sandbox-Id + X-Access-Token through the resolver)
 * before its body is read; everything it then does goes to that sandbox's
 * agent socket only. Unary calls open an agent connection of their own and
 * close it. A started process keeps its agent connection (struct proc, in
 * the server's table under the sandbox's id and a serve-side pid); the
 * Start or Connect stream attached to it reads its frames and turns them
 * into ProcessEvent envelopes. Every agent connection in use is listed
 * (struct live) so that envd_forget_sandbox and envd_stop can cut them. */
#include "vmm/api/e2b/serve_envd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include "vmm/api/mhd_dyn.h"
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "vmm/agent/agent_proto.h"
#include "vmm/api/e2b/gz_stream.h"
#include "vmm/api/e2b/serve_connect.h"
#include "vmm/base/clock.h"

#define ENVD_HOME        "/root"        /* the agent runs as root */
#define SB_MAX           128            /* sandbox id bytes + NUL */
#define TOKEN_MAX        512
#define OP_TIMEOUT_MS    30000          /* default envd_opts.op_timeout_ms */
#define START_BUF_MAX    (4u << 20)     /* output buffered before a process's start event */
#define KEEPALIVE_MAX_S  30             /* keepalives at least this often */
#define CONN_TIMEOUT_S   60             /* MHD: idle connections closed */
#define MAX_CONNS        512
#define DEFAULT_BODY     (1u << 20)
#define DEFAULT_INFLATE  (1ull << 30)   /* envd_opts.max_inflate: a gzip upload's decoded bytes */
#define EXEC_ID          1u
#define PING_ID          2u

/* An agent connection in use, cut by forget/stop. */
struct live {
    struct live *next;
    char sb[SB_MAX];
    int fd;
    atomic_int cancelled;
};

struct proc {
    struct proc *next;
    int refs;                   /* server lock */
    int in_table;               /* server lock */
    int attached;               /* server lock: a stream (1) or the janitor (2) reads it */
    int connecting;             /* server lock: Connect calls waiting for it (the janitor lets go) */
    char sb[SB_MAX];
    uint32_t pid;
    char *tag;
    json_t *config;             /* ProcessConfig for List */
    int stdin_on;
    int pty;                    /* started with a pty: output is data.pty, input input.pty */
    struct agent_client ac;     /* frames read only by the attached stream */
    pthread_mutex_t wlock;      /* writes to ac.fd */
    struct live live;
};

struct envd_server {
    struct MHD_Daemon *d;
    struct envd_opts o;
    pthread_mutex_t lock;
    struct proc *procs;
    struct live *lives;
    uint32_t next_pid;
    atomic_int stopping;
    pthread_t janitor;
};

/* ---- agent connections ---- */

/* Once envd_stop began (stopping is set before its cut()), a new
 * connection is born cut: its calls fail at once, so MHD_stop_daemon never
 * waits on a request that registered too late to be cut. */
static void live_add(struct envd_server *s, struct live *l, const char *sb, int fd)
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

static void live_del(struct envd_server *s, struct live *l)
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
static int ag_send(struct agent_client *c, pthread_mutex_t *lk, const struct agent_buf *b)
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
        int64_t left = deadline - clock_mono_ms();
        struct pollfd p = { .fd = c->fd, .events = POLLOUT };
        if (left <= 0 || poll(&p, 1, (int)left) == 0) {
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
static int ag_next(struct agent_client *c, struct agent_hdr *h, const uint8_t **pl, int timeout_ms,
                   struct live *lv, int client_fd)
{
    int64_t deadline = clock_mono_ms() + timeout_ms;
    uint8_t buf[65536];
    for (;;) {
        enum agent_err e;
        int r = agent_rx_next(&c->rx, h, pl, &e);
        if (r == 1)
            return 0;
        if (r < 0)
            return -EPROTO;
        if (lv && atomic_load(&lv->cancelled))
            return -ECANCELED;
        int64_t left = deadline - clock_mono_ms();
        if (left <= 0)
            return -ETIMEDOUT;
        struct pollfd p[2] = { { .fd = c->fd, .events = POLLIN }, { .fd = client_fd, .events = POLLRDHUP } };
        int n = poll(p, client_fd >= 0 ? 2 : 1, left > 1000 ? 1000 : (int)left);
        if (n < 0 && errno != EINTR)
            return -errno;
        if (n <= 0)
            continue;
        if (client_fd >= 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR)))
            return -EPIPE;
        if (!p[0].revents)
            continue;
        ssize_t k = recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
        if (k < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (k <= 0)
            return k < 0 ? -errno : -ECONNRESET;
        if ((r = agent_rx_push(&c->rx, buf, (size_t)k)) < 0)
            return r;
    }
}

/* Send one request frame and wait for its OK / ERROR. *eno: the guest's
 * errno of an ERROR(SYS), else 0. */
static int ag_call(struct agent_client *c, struct live *lv, const struct agent_buf *frame, uint32_t id,
                   int *eno, char *msg, size_t ml)
{
    *eno = 0;
    int64_t deadline = clock_mono_ms() + c->timeout_ms;     /* for the whole call */
    int r = ag_send(c, NULL, frame);
    if (r < 0)
        return r;
    for (;;) {
        struct agent_hdr h;
        const uint8_t *pl;
        int64_t left = deadline - clock_mono_ms();
        if (left <= 0)
            return -ETIMEDOUT;
        if ((r = ag_next(c, &h, &pl, (int)left, lv, -1)) < 0)
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

/* ---- requests ---- */

enum route {
    R_NONE, R_HEALTH, R_FILES_GET, R_FILES_POST,
    /* Connect unary */
    R_LIST, R_SEND_SIGNAL, R_SEND_INPUT, R_CLOSE_STDIN, R_UPDATE, R_STREAM_INPUT,
    R_STAT, R_MAKE_DIR, R_MOVE, R_LIST_DIR, R_REMOVE, R_WATCH_UNARY,
    /* Connect server streams */
    R_START, R_CONNECT, R_WATCH_DIR,
};

static const struct { const char *path; enum route r; } routes[] = {
    { "/process.Process/Start", R_START },
    { "/process.Process/Connect", R_CONNECT },
    { "/process.Process/List", R_LIST },
    { "/process.Process/SendSignal", R_SEND_SIGNAL },
    { "/process.Process/SendInput", R_SEND_INPUT },
    { "/process.Process/StreamInput", R_STREAM_INPUT },
    { "/process.Process/CloseStdin", R_CLOSE_STDIN },
    { "/process.Process/Update", R_UPDATE },
    { "/filesystem.Filesystem/Stat", R_STAT },
    { "/filesystem.Filesystem/MakeDir", R_MAKE_DIR },
    { "/filesystem.Filesystem/Move", R_MOVE },
    { "/filesystem.Filesystem/ListDir", R_LIST_DIR },
    { "/filesystem.Filesystem/Remove", R_REMOVE },
    { "/filesystem.Filesystem/WatchDir", R_WATCH_DIR },
    { "/filesystem.Filesystem/CreateWatcher", R_WATCH_UNARY },
    { "/filesystem.Filesystem/GetWatcherEvents", R_WATCH_UNARY },
    { "/filesystem.Filesystem/RemoveWatcher", R_WATCH_UNARY },
};

static int is_stream(enum route r)
{
    return r >= R_START;
}

static int is_connect(enum route r)
{
    return r >= R_LIST;
}

struct upload;

struct req {
    enum route route;
    int answered;               /* a response is queued */
    char sb[SB_MAX];
    char vsock[108];
    int hybrid;
    char **envs;
    size_t nenvs;
    uint8_t *body;
    size_t blen, bcap;
    int too_big;
    struct upload *up;
};

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *ctype, const void *body,
                             size_t len)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)(body ? body : ""),
                                                             MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    if (ctype)
        MHD_add_response_header(r, "Content-Type", ctype);
    enum MHD_Result res = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return res;
}

/* envd's REST error: {"code": status, "message": ...}. */
static enum MHD_Result reply_rest_error(struct MHD_Connection *c, unsigned status, const char *msg)
{
    json_t *m = json_string(msg);          /* may carry guest bytes: valid UTF-8 only */
    json_t *j = json_pack("{s:I,s:o}", "code", (json_int_t)status, "message",
                          m ? m : json_string("(message not UTF-8)"));
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(j);
    enum MHD_Result res = reply(c, status, "application/json", s, s ? strlen(s) : 0);
    free(s);
    return res;
}

static enum MHD_Result reply_cx_status(struct MHD_Connection *c, unsigned status, enum cx_code code,
                                       const char *msg)
{
    char *s = cx_error_json(code, msg);
    enum MHD_Result res = reply(c, status, "application/json", s, s ? strlen(s) : 0);
    free(s);
    return res;
}

static enum MHD_Result reply_cx(struct MHD_Connection *c, enum cx_code code, const char *msg)
{
    return reply_cx_status(c, cx_code_http(code), code, msg);
}

/* A stream's error: HTTP 200 and one end-of-stream envelope. */
static enum MHD_Result reply_stream_error(struct MHD_Connection *c, enum cx_code code, const char *msg)
{
    uint8_t *b = NULL;
    size_t len = 0, cap = 0;
    char *j = cx_end_json(code, msg);
    if (!j || cx_envelope_append(&b, &len, &cap, CX_FLAG_END, j, strlen(j)) < 0) {
        free(j);
        free(b);
        return MHD_NO;
    }
    free(j);
    enum MHD_Result res = reply(c, 200, "application/connect+json", b, len);
    free(b);
    return res;
}

static enum MHD_Result reply_ok_json(struct MHD_Connection *c, json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(j);
    if (!s)
        return reply_cx(c, CX_INTERNAL, "out of memory");
    enum MHD_Result res = reply(c, 200, "application/json", s, strlen(s));
    free(s);
    return res;
}

static enum route route_of(const char *method, const char *url, int *bad_method)
{
    *bad_method = 0;
    if (strcmp(url, "/health") == 0) {
        *bad_method = strcmp(method, "GET") != 0;
        return R_HEALTH;
    }
    if (strcmp(url, "/files") == 0) {
        if (strcmp(method, "GET") == 0)
            return R_FILES_GET;
        if (strcmp(method, "POST") == 0)
            return R_FILES_POST;
        *bad_method = 1;
        return R_FILES_GET;
    }
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (strcmp(url, routes[i].path) == 0) {
            *bad_method = strcmp(method, "POST") != 0;
            return routes[i].r;
        }
    return R_NONE;
}

static void free_envs(struct req *q)
{
    for (size_t i = 0; i < q->nenvs; i++)
        free(q->envs[i]);
    free(q->envs);
    q->envs = NULL;
    q->nenvs = 0;
}

/* Resolve the sandbox; copies what the module needs. 0 or an HTTP error
 * already queued (1) or MHD_NO (-1). */
static int resolve(struct envd_server *s, struct MHD_Connection *c, struct req *q)
{
    const char *sb = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "E2b-Sandbox-Id");
    const char *tok = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Access-Token");
    const char *msg = NULL;
    unsigned st = 0;
    enum cx_code code = CX_OK;
    if (!sb || !*sb || strlen(sb) >= SB_MAX) {
        st = 400, code = CX_INVALID_ARGUMENT, msg = "missing or overlong E2b-Sandbox-Id header";
    } else if (tok && strlen(tok) > TOKEN_MAX) {
        st = 401, code = CX_UNAUTHENTICATED, msg = "invalid access token";
    } else {
        struct envd_sandbox out;
        memset(&out, 0, sizeof out);
        int r = s->o.resolve(s->o.arg, sb, tok ? tok : "", &out);
        if (r == 0) {
            snprintf(q->sb, sizeof q->sb, "%s", sb);
            memcpy(q->vsock, out.vsock_path, sizeof q->vsock);
            q->vsock[sizeof q->vsock - 1] = 0;
            q->hybrid = out.hybrid;
            size_t n = 0;
            while (out.envs && n < out.nenvs && out.envs[n])
                n++;
            if (n && !(q->envs = calloc(n, sizeof *q->envs)))
                r = -ENOMEM;
            for (size_t i = 0; r == 0 && i < n; i++) {
                if (!(q->envs[i] = strdup(out.envs[i])))
                    r = -ENOMEM;
                else
                    q->nenvs++;
            }
            if (s->o.release)
                s->o.release(s->o.arg, &out);
            if (r == 0)
                return 0;
            free_envs(q);
            st = 500, code = CX_INTERNAL, msg = "out of memory";
        } else if (r == -EACCES) {
            st = 401, code = CX_UNAUTHENTICATED, msg = "invalid access token";
        } else if (r == -ENOENT) {
            st = 502, code = CX_UNAVAILABLE, msg = "sandbox not found";
        } else if (r == -EAGAIN) {
            st = 502, code = CX_UNAVAILABLE, msg = "sandbox is not running";
        } else {
            st = 500, code = CX_INTERNAL, msg = "sandbox lookup failed";
        }
    }
    enum MHD_Result res;
    if (is_connect(q->route))
        res = reply_cx_status(c, st, code, msg);
    else
        res = reply_rest_error(c, st, msg);
    return res == MHD_YES ? 1 : -1;
}

static int agent_open(struct envd_server *s, struct req *q, struct agent_client *ac)
{
    int r = agent_client_connect(ac, q->vsock, q->hybrid, AGENT_DEFAULT_PORT);
    if (r == 0)
        ac->timeout_ms = s->o.op_timeout_ms;     /* every call, also agent_client_*'s */
    return r;
}

/* ---- processes ---- */

static void proc_unref(struct envd_server *s, struct proc *p)
{
    pthread_mutex_lock(&s->lock);
    int last = --p->refs == 0;
    pthread_mutex_unlock(&s->lock);
    if (!last)
        return;
    live_del(s, &p->live);
    agent_client_close(&p->ac);    /* the agent kills what still runs */
    pthread_mutex_destroy(&p->wlock);
    json_decref(p->config);
    free(p->tag);
    free(p);
}

/* Take p out of the table (ended, lost or forgotten). Lock held. */
static void proc_unlist_locked(struct envd_server *s, struct proc *p)
{
    if (!p->in_table)
        return;
    for (struct proc **pp = &s->procs; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    p->in_table = 0;
    p->refs--;                  /* the table's reference; the caller holds another */
}

static void proc_unlist(struct envd_server *s, struct proc *p)
{
    pthread_mutex_lock(&s->lock);
    proc_unlist_locked(s, p);
    pthread_mutex_unlock(&s->lock);
}

/* Find a running process of sandbox sb; a reference for the caller. */
static struct proc *proc_find(struct envd_server *s, const char *sb, const struct cx_selector *sel)
{
    pthread_mutex_lock(&s->lock);
    struct proc *p = s->procs;
    for (; p; p = p->next) {
        if (strcmp(p->sb, sb) != 0)
            continue;
        if (sel->by_tag ? (p->tag && strcmp(p->tag, sel->tag) == 0) : p->pid == sel->pid)
            break;
    }
    if (p)
        p->refs++;
    pthread_mutex_unlock(&s->lock);
    return p;
}

struct stream {
    struct envd_server *s;
    struct proc *p;
    uint8_t *buf;
    size_t len, cap, off;
    int done;                   /* the end-of-stream envelope is queued */
    int64_t deadline;           /* 0: none */
    int64_t ka_every, next_ka;
    int client_fd;
};

static int st_event(struct stream *st, char *json)
{
    if (!json)
        return -ENOMEM;
    int r = cx_envelope_append(&st->buf, &st->len, &st->cap, 0, json, strlen(json));
    free(json);
    return r;
}

static void st_end(struct stream *st, enum cx_code code, const char *msg)
{
    char *j = cx_end_json(code, msg);
    if (j)
        cx_envelope_append(&st->buf, &st->len, &st->cap, CX_FLAG_END, j, strlen(j));
    free(j);
    st->done = 1;
}

/* One agent frame of the process into events. */
static void st_frame(struct stream *st, const struct agent_hdr *h, const uint8_t *pl)
{
    if (h->id != EXEC_ID)
        return;
    if (h->type == AGENT_T_STDOUT || h->type == AGENT_T_STDERR) {
        enum cx_data which = st->p->pty ? CX_DATA_PTY
                             : h->type == AGENT_T_STDERR ? CX_DATA_STDERR : CX_DATA_STDOUT;
        if (st_event(st, cx_event_data(which, pl, h->len)) < 0)
            st_end(st, CX_INTERNAL, "out of memory");
        return;
    }
    if (h->type == AGENT_T_EXIT) {
        struct agent_exit x;
        if (agent_exit_decode(pl, h->len, &x, NULL) < 0) {
            st_end(st, CX_INTERNAL, "the guest agent sent a malformed EXIT");
        } else if (st_event(st, cx_event_end(x.kind, x.value)) < 0) {
            st_end(st, CX_INTERNAL, "out of memory");
        } else {
            st_end(st, CX_OK, NULL);
        }
        proc_unlist(st->s, st->p);
        return;
    }
    if (h->type == AGENT_T_ERROR) {
        struct agent_error er;
        char msg[300] = "the guest agent refused the process";
        enum cx_code code = CX_INTERNAL;
        if (agent_error_decode(pl, h->len, &er, NULL) == 0) {
            snprintf(msg, sizeof msg, "guest agent: %.*s", (int)er.msg_len, er.msg);
            if (er.code == AGENT_E_LIMIT)
                code = CX_RESOURCE_EXHAUSTED;
            else if (er.code == AGENT_E_SYS)
                code = cx_code_from_errno((int)er.sys_errno);
        }
        st_end(st, code, msg);
        proc_unlist(st->s, st->p);
    }
}

static ssize_t st_read(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    struct stream *st = cls;
    while (st->off == st->len) {
        if (st->done)
            return MHD_CONTENT_READER_END_OF_STREAM;
        st->off = st->len = 0;
        if (atomic_load(&st->s->stopping)) {
            st_end(st, CX_UNAVAILABLE, "moat serve is stopping");
            break;
        }
        int64_t now = clock_mono_ms();
        if (st->deadline && now >= st->deadline) {
            st_end(st, CX_DEADLINE_EXCEEDED, "the stream's Connect-Timeout-Ms passed (the process goes on)");
            break;
        }
        if (now >= st->next_ka) {
            st->next_ka = now + st->ka_every;
            if (st_event(st, cx_event_keepalive()) < 0)
                return MHD_CONTENT_READER_END_WITH_ERROR;
            break;
        }
        int64_t wait = st->next_ka - now;
        if (st->deadline && st->deadline - now < wait)
            wait = st->deadline - now;
        struct agent_hdr h;
        const uint8_t *pl;
        int r = ag_next(&st->p->ac, &h, &pl, (int)wait, &st->p->live, st->client_fd);
        if (r == -ETIMEDOUT)
            continue;
        if (r == -EPIPE)
            return MHD_CONTENT_READER_END_WITH_ERROR;   /* the client left: detach */
        if (r == -ECANCELED || atomic_load(&st->p->live.cancelled)) {
            st_end(st, CX_UNAVAILABLE, "the sandbox was stopped");
            proc_unlist(st->s, st->p);
            break;
        }
        if (r < 0) {
            st_end(st, CX_UNAVAILABLE, "lost the connection to the sandbox's guest agent");
            proc_unlist(st->s, st->p);
            break;
        }
        st_frame(st, &h, pl);
    }
    size_t n = st->len - st->off;
    if (n > max)
        n = max;
    memcpy(out, st->buf + st->off, n);
    st->off += n;
    return (ssize_t)n;
}

static void st_free(void *cls)
{
    struct stream *st = cls;
    if (st->p) {
        pthread_mutex_lock(&st->s->lock);
        st->p->attached = 0;
        pthread_mutex_unlock(&st->s->lock);
        proc_unref(st->s, st->p);
    }
    free(st->buf);
    free(st);
}

static struct stream *st_new(struct envd_server *s, struct MHD_Connection *c, struct proc *p)
{
    struct stream *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->s = s;
    st->p = p;
    const char *ka = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Keepalive-Ping-Interval");
    uint64_t v;
    st->ka_every = KEEPALIVE_MAX_S * 1000;
    if (ka && cx_timeout_parse(ka, &v) == 0 && v >= 1 && v < KEEPALIVE_MAX_S)
        st->ka_every = (int64_t)v * 1000;
    st->next_ka = clock_mono_ms() + st->ka_every;
    const char *to = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Connect-Timeout-Ms");
    if (to && cx_timeout_parse(to, &v) == 0 && v > 0)
        st->deadline = clock_mono_ms() + (int64_t)v;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    st->client_fd = ci ? ci->connect_fd : -1;
    return st;
}

static enum MHD_Result st_respond(struct MHD_Connection *c, struct stream *st)
{
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, st_read, st,
                                                               st_free);
    if (!r) {
        st_free(st);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/connect+json");
    enum MHD_Result res = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return res;
}

static json_t *config_json(const struct cx_start *sr, const char *cwd)
{
    json_t *args = json_array(), *envs = json_object();
    for (size_t i = 0; i < sr->nargs; i++)
        json_array_append_new(args, json_string(sr->args[i]));
    for (size_t i = 0; i < sr->nenvs; i++) {
        char *eq = strchr(sr->envs[i], '=');
        *eq = 0;
        json_object_set_new(envs, sr->envs[i], json_string(eq + 1));
        *eq = '=';
    }
    json_t *cfg = json_pack("{s:s,s:o,s:o}", "cmd", sr->cmd, "args", args, "envs", envs);
    if (cfg && cwd)
        json_object_set_new(cfg, "cwd", json_string(cwd));
    return cfg;
}

/* A pty size from a request: 0 (not given) is 24 rows, 80 columns, as
 * a terminal's default; more than a u16 holds is refused. */
static int pty_size_check(uint32_t *rows, uint32_t *cols, char *err, size_t errlen)
{
    if (*rows > UINT16_MAX || *cols > UINT16_MAX) {
        snprintf(err, errlen, "pty.size: rows and cols must be at most %u", UINT16_MAX);
        return -EINVAL;
    }
    if (!*rows)
        *rows = 24;
    if (!*cols)
        *cols = 80;
    return 0;
}

/* Process.Start, after the EXEC and its PING went out (r: how that
 * went): wait for the agent's word. On success p joins the process table;
 * otherwise the stream ends with why. */
static void start_confirm(struct envd_server *s, struct stream *st, struct proc *p, int r)
{
    char err[512];
    /* The agent answers the PING after taking the EXEC: ERROR first means
     * it refused it; output (and even EXIT) may come before the PONG. One
     * deadline for the whole wait and a cap on the output held meanwhile:
     * a guest that streams output and never answers gets neither time nor
     * memory without bound. */
    int64_t until = clock_mono_ms() + p->ac.timeout_ms;
    while (r == 0 && !st->done) {
        struct agent_hdr h;
        const uint8_t *pl;
        int64_t left = until - clock_mono_ms();
        if (left <= 0) {
            r = -ETIMEDOUT;
            break;
        }
        if (st->len > START_BUF_MAX) {
            r = -ENOBUFS;
            break;
        }
        if ((r = ag_next(&p->ac, &h, &pl, (int)left, &p->live, -1)) < 0)
            break;
        if (h.id == PING_ID && h.type == AGENT_T_PONG)
            break;
        if (h.id == EXEC_ID && h.type == AGENT_T_ERROR)
            st->len = 0;                    /* no start event: only the error */
        st_frame(st, &h, pl);
    }
    if (r == -ETIMEDOUT || r == -ENOBUFS) {
        st->len = 0;
        snprintf(err, sizeof err, "the sandbox's guest agent did not confirm the process %s",
                 r == -ETIMEDOUT ? "in time" : "before sending 4 MiB of output");
        st_end(st, r == -ETIMEDOUT ? CX_DEADLINE_EXCEEDED : CX_RESOURCE_EXHAUSTED, err);
    } else if (r < 0) {
        st->len = 0;
        snprintf(err, sizeof err, "the sandbox's guest agent did not take the process: %s", strerror(-r));
        st_end(st, CX_UNAVAILABLE, err);
    } else if (!st->done) {
        pthread_mutex_lock(&s->lock);
        p->next = s->procs;
        s->procs = p;
        p->in_table = 1;
        p->refs++;                          /* the table's */
        pthread_mutex_unlock(&s->lock);
    }
}

static enum MHD_Result do_start(struct envd_server *s, struct MHD_Connection *c, struct req *q,
                                const char *msg, size_t mlen)
{
    char err[512], cwd[CX_MAX_PATH + 1] = "";
    struct cx_start sr;
    int r = cx_start_decode(msg, mlen, &sr, err, sizeof err);
    if (r < 0)
        return reply_stream_error(c, r == -ENOMEM ? CX_INTERNAL : CX_INVALID_ARGUMENT,
                                  r == -ENOMEM ? "out of memory" : err);
    if (sr.has_pty && pty_size_check(&sr.rows, &sr.cols, err, sizeof err) < 0) {
        cx_start_free(&sr);
        return reply_stream_error(c, CX_INVALID_ARGUMENT, err);
    }
    if (sr.cwd && cx_path_resolve(sr.cwd, ENVD_HOME, cwd, err, sizeof err) < 0) {
        cx_start_free(&sr);
        return reply_stream_error(c, CX_INVALID_ARGUMENT, err);
    }
    if (q->nenvs + sr.nenvs > AGENT_MAX_ENV) {
        cx_start_free(&sr);
        return reply_stream_error(c, CX_INVALID_ARGUMENT, "too many environment variables");
    }
    struct proc *p = calloc(1, sizeof *p);
    char **argv = calloc(sr.nargs + 2, sizeof *argv);
    char **env = calloc(q->nenvs + sr.nenvs + 1, sizeof *env);
    struct stream *st = NULL;
    struct agent_buf b = { 0 };
    if (!p || !argv || !env)
        goto oom;
    p->ac.fd = -1;
    pthread_mutex_init(&p->wlock, NULL);
    p->refs = 1;
    snprintf(p->sb, sizeof p->sb, "%s", q->sb);
    p->stdin_on = sr.stdin_on;
    p->pty = sr.has_pty;
    if (sr.tag && !(p->tag = strdup(sr.tag)))
        goto oom;
    if (!(p->config = config_json(&sr, sr.cwd ? cwd : NULL)))
        goto oom;
    argv[0] = sr.cmd;
    for (size_t i = 0; i < sr.nargs; i++)
        argv[i + 1] = sr.args[i];
    size_t ne = 0;
    for (size_t i = 0; i < q->nenvs; i++)
        env[ne++] = q->envs[i];
    for (size_t i = 0; i < sr.nenvs; i++)
        env[ne++] = sr.envs[i];
    /* envd kills the process when the call's Connect-Timeout-Ms runs out
     * (not when the client goes away): so does the agent's timeout. */
    const char *to = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Connect-Timeout-Ms");
    uint64_t tmo = 0;
    if (to && cx_timeout_parse(to, &tmo) < 0)
        tmo = 0;
    struct agent_exec ex = {
        .flags = (sr.stdin_on ? AGENT_EXEC_STDIN : 0) | (sr.has_pty ? AGENT_EXEC_PTY : 0),
        .rows = (uint16_t)sr.rows, .cols = (uint16_t)sr.cols, .argc = (uint32_t)sr.nargs + 1,
        .timeout_ms = tmo > UINT32_MAX ? UINT32_MAX : (uint32_t)tmo,
        .envc = (uint32_t)ne, .cwd = cwd, .argv = argv, .env = env,
    };
    r = agent_put_exec(&b, EXEC_ID, &ex);
    if (r == 0)
        r = agent_put_frame(&b, AGENT_T_PING, PING_ID, "envd", 4);
    if (r < 0) {
        agent_buf_free(&b);
        free(argv);
        free(env);
        cx_start_free(&sr);
        proc_unref(s, p);
        return reply_stream_error(c, CX_INVALID_ARGUMENT, "the command does not fit one agent frame (1 MiB)");
    }
    free(argv);
    free(env);
    argv = env = NULL;
    cx_start_free(&sr);
    if ((r = agent_open(s, q, &p->ac)) < 0) {
        agent_buf_free(&b);
        proc_unref(s, p);
        snprintf(err, sizeof err, "cannot reach the sandbox's guest agent: %s", strerror(-r));
        return reply_stream_error(c, CX_UNAVAILABLE, err);
    }
    live_add(s, &p->live, q->sb, p->ac.fd);
    r = ag_send(&p->ac, &p->wlock, &b);
    agent_buf_free(&b);
    if (!(st = st_new(s, c, p)))
        goto oom;
    p->refs++;                              /* the stream's */
    p->attached = 1;
    pthread_mutex_lock(&s->lock);
    p->pid = ++s->next_pid ? s->next_pid : ++s->next_pid;
    pthread_mutex_unlock(&s->lock);
    if (r == 0)
        r = st_event(st, cx_event_start(p->pid));
    start_confirm(s, st, p, r);
    proc_unref(s, p);                       /* ours; the stream keeps one */
    return st_respond(c, st);
oom:
    free(argv);
    free(env);
    cx_start_free(&sr);
    if (p && p->refs == 0)
        free(p);                /* argv or env failed: p was never set up */
    else if (p)
        proc_unref(s, p);
    return reply_stream_error(c, CX_INTERNAL, "out of memory");
}

static enum MHD_Result do_connect(struct envd_server *s, struct MHD_Connection *c, struct req *q,
                                  const char *msg, size_t mlen)
{
    char err[512];
    struct cx_selector sel;
    if (cx_selector_decode(msg, mlen, &sel, err, sizeof err) < 0)
        return reply_stream_error(c, CX_INVALID_ARGUMENT, err);
    struct proc *p = proc_find(s, q->sb, &sel);
    if (!p)
        return reply_stream_error(c, CX_NOT_FOUND, "process not found");
    /* One reader at a time; a stream whose client just left detaches
     * within a second, the janitor within a quarter (and takes it no more
     * while we wait). */
    int ok = 0, gone = 0;
    pthread_mutex_lock(&s->lock);
    p->connecting++;
    pthread_mutex_unlock(&s->lock);
    for (int i = 0; i < 30 && !ok && !gone; i++) {
        if (i)
            usleep(100 * 1000);
        pthread_mutex_lock(&s->lock);
        if (!p->attached && p->in_table)
            ok = p->attached = 1;
        gone = !p->in_table;
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_lock(&s->lock);
    p->connecting--;
    pthread_mutex_unlock(&s->lock);
    if (!ok) {
        proc_unref(s, p);
        if (gone)
            return reply_stream_error(c, CX_NOT_FOUND, "process not found (it ended)");
        return reply_stream_error(c, CX_FAILED_PRECONDITION, "another stream is attached to this process");
    }
    struct stream *st = st_new(s, c, p);
    if (!st || st_event(st, cx_event_start(p->pid)) < 0) {
        if (st)
            st_free(st);
        else {
            pthread_mutex_lock(&s->lock);
            p->attached = 0;
            pthread_mutex_unlock(&s->lock);
            proc_unref(s, p);
        }
        return reply_stream_error(c, CX_INTERNAL, "out of memory");
    }
    return st_respond(c, st);
}

static enum MHD_Result do_list(struct envd_server *s, struct MHD_Connection *c, struct req *q)
{
    json_t *arr = json_array();
    pthread_mutex_lock(&s->lock);
    for (struct proc *p = s->procs; p && arr; p = p->next) {
        if (strcmp(p->sb, q->sb) != 0)
            continue;
        json_t *e = json_pack("{s:O,s:I}", "config", p->config, "pid", (json_int_t)p->pid);
        if (e && p->tag)
            json_object_set_new(e, "tag", json_string(p->tag));
        json_array_append_new(arr, e);
    }
    pthread_mutex_unlock(&s->lock);
    return reply_ok_json(c, json_pack("{s:o}", "processes", arr));
}

/* SendSignal, SendInput, CloseStdin: one frame to the process. */
static enum MHD_Result do_proc_frame(struct envd_server *s, struct MHD_Connection *c, struct req *q,
                                     const char *msg, size_t mlen)
{
    char err[512];
    struct cx_selector sel;
    struct agent_buf b = { 0 };
    uint8_t *data = NULL;
    size_t dlen = 0;
    int sig = 0, is_pty = 0, r;
    if (q->route == R_SEND_SIGNAL)
        r = cx_signal_decode(msg, mlen, &sel, &sig, err, sizeof err);
    else if (q->route == R_SEND_INPUT)
        r = cx_input_decode(msg, mlen, &sel, &data, &dlen, &is_pty, err, sizeof err);
    else
        r = cx_selector_decode(msg, mlen, &sel, err, sizeof err);
    if (r < 0)
        return reply_cx(c, r == -ENOMEM ? CX_INTERNAL : CX_INVALID_ARGUMENT, r == -ENOMEM ? "out of memory" : err);
    struct proc *p = proc_find(s, q->sb, &sel);
    enum MHD_Result res;
    if (!p) {
        free(data);
        return reply_cx(c, CX_NOT_FOUND, "process not found");
    }
    /* A pty process takes input.pty only (its stdin is the terminal);
     * any other takes input.stdin when started with stdin: true. */
    if (q->route != R_SEND_SIGNAL && p->pty && !is_pty) {
        res = reply_cx(c, CX_FAILED_PRECONDITION, q->route == R_CLOSE_STDIN
                       ? "the process runs on a pty: send ^D (byte 4) as pty input instead"
                       : "the process runs on a pty: send input.pty");
        goto out;
    }
    if (is_pty && !p->pty) {
        res = reply_cx(c, CX_FAILED_PRECONDITION, "the process has no pty");
        goto out;
    }
    if (q->route != R_SEND_SIGNAL && !p->pty && !p->stdin_on) {
        res = reply_cx(c, CX_FAILED_PRECONDITION, "the process was started without stdin (stdin: true)");
        goto out;
    }
    if (q->route == R_SEND_SIGNAL)
        r = agent_put_u32(&b, AGENT_T_KILL, EXEC_ID, (uint32_t)sig);
    else if (q->route == R_CLOSE_STDIN)
        r = agent_put_frame(&b, AGENT_T_STDIN_EOF, EXEC_ID, NULL, 0);
    else
        for (size_t off = 0; r == 0 && off < dlen; off += AGENT_CHUNK)
            r = agent_put_frame(&b, AGENT_T_STDIN, EXEC_ID, data + off,
                                dlen - off < AGENT_CHUNK ? dlen - off : AGENT_CHUNK);
    if (r == 0)
        r = ag_send(&p->ac, &p->wlock, &b);
    if (r < 0)
        res = reply_cx(c, CX_UNAVAILABLE, "cannot reach the process through the guest agent");
    else
        res = reply_ok_json(c, json_object());
out:
    agent_buf_free(&b);
    free(data);
    proc_unref(s, p);
    return res;
}

/* Update: a new pty size. The agent's answer comes on the process's
 * stream, which this call does not read: everything it could refuse
 * (no pty, a bad size) is checked here first, and the size is sent
 * without waiting (an ERROR can then only be an ended process's, after
 * its EXIT). */
static enum MHD_Result do_update(struct envd_server *s, struct MHD_Connection *c, struct req *q,
                                 const char *msg, size_t mlen)
{
    char err[256];
    struct cx_selector sel;
    int has_pty;
    uint32_t cols, rows;
    if (cx_update_decode(msg, mlen, &sel, &has_pty, &cols, &rows, err, sizeof err) < 0)
        return reply_cx(c, CX_INVALID_ARGUMENT, err);
    if (has_pty && (!cols || !rows))
        return reply_cx(c, CX_INVALID_ARGUMENT, "pty.size: cols and rows are required (at least 1)");
    if (has_pty && pty_size_check(&rows, &cols, err, sizeof err) < 0)
        return reply_cx(c, CX_INVALID_ARGUMENT, err);
    struct proc *p = proc_find(s, q->sb, &sel);
    if (!p)
        return reply_cx(c, CX_NOT_FOUND, "process not found");
    enum MHD_Result res;
    struct agent_buf b = { 0 };
    if (!has_pty) {
        res = reply_ok_json(c, json_object());              /* nothing to update */
    } else if (!p->pty) {
        res = reply_cx(c, CX_FAILED_PRECONDITION, "the process has no pty to resize");
    } else if (agent_put_resize(&b, EXEC_ID, (uint16_t)rows, (uint16_t)cols) < 0 ||
               ag_send(&p->ac, &p->wlock, &b) < 0) {
        res = reply_cx(c, CX_UNAVAILABLE, "cannot reach the process through the guest agent");
    } else {
        res = reply_ok_json(c, json_object());
    }
    agent_buf_free(&b);
    proc_unref(s, p);
    return res;
}

/* ---- filesystem ---- */

struct fs_ctx {
    struct agent_client ac;
    struct live live;
};

static enum cx_code fs_code(int r, int eno)
{
    if (r == -EREMOTEIO)
        return eno ? cx_code_from_errno(eno) : CX_INTERNAL;
    if (r == -ENOSYS)
        return CX_UNIMPLEMENTED;
    if (r == -ETIMEDOUT)
        return CX_DEADLINE_EXCEEDED;
    return CX_UNAVAILABLE;
}

static enum MHD_Result fs_fail(struct MHD_Connection *c, struct fs_ctx *f, int r, const char *what,
                               const char *path, const char *amsg)
{
    char m[700];
    int eno = r == -EREMOTEIO ? agent_client_last_errno(&f->ac) : 0;
    if (r == -EREMOTEIO)
        snprintf(m, sizeof m, "%s %s: %s", what, path, amsg);
    else
        snprintf(m, sizeof m, "%s %s: %s", what, path, strerror(-r));
    return reply_cx(c, fs_code(r, eno), m);
}

static enum MHD_Result reply_entry(struct MHD_Connection *c, const struct agent_stat *st)
{
    char *e = cx_entry_json(st);
    if (!e)
        return reply_cx(c, CX_INTERNAL, "the entry's name is not UTF-8");
    size_t n = strlen(e) + 16;
    char *body = malloc(n);
    if (!body) {
        free(e);
        return reply_cx(c, CX_INTERNAL, "out of memory");
    }
    snprintf(body, n, "{\"entry\":%s}", e);
    enum MHD_Result res = reply(c, 200, "application/json", body, strlen(body));
    free(body);
    free(e);
    return res;
}

/* A listing is built as JSON objects directly, within a budget of the
 * JSON it dumps to (LIST_BUDGET): a guest's 100000 entries with 4 KiB
 * paths would otherwise cost gigabytes per request. */
#define LIST_BUDGET (32u << 20)
enum { LIST_OVER = 1, LIST_NOT_UTF8, LIST_NOMEM };

struct list_acc {
    json_t *arr;
    size_t bytes;
    int stop;                   /* LIST_*: why the callback stopped */
    char bad[128];              /* LIST_NOT_UTF8: the entry's path, escaped */
};

static int list_cb(void *arg, const struct agent_stat *e)
{
    struct list_acc *a = arg;
    a->bytes += cx_entry_json_size(e) + 1;
    if (a->bytes > LIST_BUDGET)
        return a->stop = LIST_OVER;
    json_t *v = cx_entry_obj(e);
    if (!v) {
        /* Not UTF-8 (or no memory): the whole listing fails rather than
         * leaving the entry out silently. */
        size_t o = 0, n = strnlen(e->path, sizeof e->path);
        for (size_t i = 0; i < n && o + 5 < sizeof a->bad; i++) {
            unsigned char ch = (unsigned char)e->path[i];
            if (ch >= 0x20 && ch < 0x7f && ch != '\\')
                a->bad[o++] = (char)ch;
            else
                o += (size_t)snprintf(a->bad + o, sizeof a->bad - o, "\\x%02x", ch);
        }
        a->bad[o] = 0;
        return a->stop = LIST_NOT_UTF8;
    }
    if (json_array_append_new(a->arr, v) < 0)
        return a->stop = LIST_NOMEM;
    return 0;
}

/* The parent of path (absolute) into out; 0, or -EINVAL at "/". */
static int parent_of(const char *path, char *out, size_t n)
{
    const char *slash = strrchr(path, '/');
    if (!slash || slash == path)
        return -EINVAL;
    snprintf(out, n, "%.*s", (int)(slash - path), path);
    return 0;
}

static int fs_mkdir(struct fs_ctx *f, const char *path, int parents, int *eno, char *msg, size_t ml)
{
    struct agent_buf b = { 0 };
    uint32_t id = f->ac.next_id++;
    int r = agent_put_mkdir(&b, id, 0755, parents ? AGENT_MKDIR_PARENTS : 0, path);
    if (r == 0)
        r = ag_call(&f->ac, &f->live, &b, id, eno, msg, ml);
    agent_buf_free(&b);
    return r;
}

/* Filesystem.ListDir: the entries under p1, depth deep, in one answer
 * (at most LIST_BUDGET of JSON). */
static enum MHD_Result fs_list(struct MHD_Connection *c, struct fs_ctx *f, const char *p1, uint32_t depth,
                               char *amsg, size_t alen)
{
    enum MHD_Result res;
    int r;
    struct list_acc *a = calloc(1, sizeof *a);
    if (a && !(a->arr = json_array())) {
        free(a);
        a = NULL;
    }
    r = a ? agent_client_list(&f->ac, p1, depth, list_cb, a, amsg, alen) : -ENOMEM;
    if (a && a->stop)
        r = a->stop;        /* whatever draining the rest gave */
    if (r != 0)
        json_decref(a ? a->arr : NULL);
    if (r == LIST_OVER) {
        snprintf(amsg, alen, "list %s: the listing exceeds %u MiB of JSON (list less deep)", p1,
                 LIST_BUDGET >> 20);
        res = reply_cx(c, CX_RESOURCE_EXHAUSTED, amsg);
    } else if (r == LIST_NOT_UTF8) {
        snprintf(amsg, alen, "list %s: the entry %s has a name, owner, group or link target that "
                 "is not UTF-8", p1, a->bad);
        res = reply_cx(c, CX_INTERNAL, amsg);
    } else if (r == LIST_NOMEM) {
        res = reply_cx(c, CX_INTERNAL, "out of memory");
    } else if (r < 0) {
        res = fs_fail(c, f, r, "list", p1, amsg);
    } else {
        res = reply_ok_json(c, json_pack("{s:o}", "entries", a->arr));
    }
    free(a);
    return res;
}

static enum MHD_Result do_fs(struct envd_server *s, struct MHD_Connection *c, struct req *q, const char *msg,
                             size_t mlen)
{
    char err[512], amsg[1100] = "";
    struct cx_fs fr;
    enum cx_fs_kind kind = q->route == R_MOVE ? CX_FS_MOVE : q->route == R_LIST_DIR ? CX_FS_LIST : CX_FS_PATH;
    int r = cx_fs_decode(kind, msg, mlen, &fr, err, sizeof err);
    if (r < 0)
        return reply_cx(c, CX_INVALID_ARGUMENT, err);
    char *p1 = malloc(CX_MAX_PATH + 1), *p2 = malloc(CX_MAX_PATH + 1), *dir = NULL;
    struct agent_stat *st = malloc(sizeof *st);
    struct fs_ctx *f = calloc(1, sizeof *f);
    enum MHD_Result res;
    if (!p1 || !p2 || !st || !f) {
        res = reply_cx(c, CX_INTERNAL, "out of memory");
        goto out;
    }
    if (cx_path_resolve(fr.path, ENVD_HOME, p1, err, sizeof err) < 0 ||
        (kind == CX_FS_MOVE && cx_path_resolve(fr.dest, ENVD_HOME, p2, err, sizeof err) < 0)) {
        res = reply_cx(c, CX_INVALID_ARGUMENT, err);
        goto out;
    }
    if ((r = agent_open(s, q, &f->ac)) < 0) {
        snprintf(err, sizeof err, "cannot reach the sandbox's guest agent: %s", strerror(-r));
        res = reply_cx(c, CX_UNAVAILABLE, err);
        f->ac.fd = -1;
        goto out;
    }
    live_add(s, &f->live, q->sb, f->ac.fd);
    int eno = 0;
    switch (q->route) {
    case R_STAT:
        r = agent_client_stat(&f->ac, p1, 1, st, amsg, sizeof amsg);
        res = r < 0 ? fs_fail(c, f, r, "stat", p1, amsg) : reply_entry(c, st);
        break;
    case R_MAKE_DIR:
        r = agent_client_stat(&f->ac, p1, 1, st, amsg, sizeof amsg);
        if (r == 0) {
            snprintf(err, sizeof err, "%s already exists%s", p1, st->type == AGENT_FT_DIR ? "" : " (not a directory)");
            res = reply_cx(c, st->type == AGENT_FT_DIR ? CX_ALREADY_EXISTS : CX_INVALID_ARGUMENT, err);
            break;
        }
        if (r != -EREMOTEIO || agent_client_last_errno(&f->ac) != ENOENT) {
            res = fs_fail(c, f, r, "stat", p1, amsg);
            break;
        }
        r = fs_mkdir(f, p1, 1, &eno, amsg, sizeof amsg);
        if (r < 0) {
            snprintf(err, sizeof err, "mkdir %s: %s", p1, r == -EREMOTEIO ? amsg : strerror(-r));
            res = reply_cx(c, fs_code(r, eno), err);
            break;
        }
        r = agent_client_stat(&f->ac, p1, 1, st, amsg, sizeof amsg);
        res = r < 0 ? fs_fail(c, f, r, "stat", p1, amsg) : reply_entry(c, st);
        break;
    case R_MOVE:
        /* the destination's parent: as long as any path (CX_MAX_PATH) */
        if (!(dir = malloc(CX_MAX_PATH + 1))) {
            res = reply_cx(c, CX_INTERNAL, "out of memory");
            break;
        }
        if (parent_of(p2, dir, CX_MAX_PATH + 1) == 0 && (r = fs_mkdir(f, dir, 1, &eno, amsg, sizeof amsg)) < 0) {
            char m[1200];
            snprintf(m, sizeof m, "mkdir %s: %s", dir, r == -EREMOTEIO ? amsg : strerror(-r));
            res = reply_cx(c, fs_code(r, eno), m);
            break;
        }
        r = agent_client_rename(&f->ac, p1, p2, amsg, sizeof amsg);
        if (r < 0) {
            res = fs_fail(c, f, r, "rename", p1, amsg);
            break;
        }
        r = agent_client_stat(&f->ac, p2, 1, st, amsg, sizeof amsg);
        res = r < 0 ? fs_fail(c, f, r, "stat", p2, amsg) : reply_entry(c, st);
        break;
    case R_LIST_DIR:
        res = fs_list(c, f, p1, fr.depth, amsg, sizeof amsg);
        break;
    default: /* R_REMOVE: like os.RemoveAll, a missing path is fine */
        r = agent_client_remove(&f->ac, p1, 1, amsg, sizeof amsg);
        if (r < 0 && !(r == -EREMOTEIO && agent_client_last_errno(&f->ac) == ENOENT))
            res = fs_fail(c, f, r, "remove", p1, amsg);
        else
            res = reply_ok_json(c, json_object());
        break;
    }
    live_del(s, &f->live);
    agent_client_close(&f->ac);
out:
    free(p1);
    free(p2);
    free(dir);
    free(st);
    free(f);
    return res;
}

/* ---- /files ---- */

struct download {
    struct envd_server *s;
    struct agent_client ac;
    struct live live;
    uint8_t *pend;
    size_t plen, poff;
    int ended;
    uint32_t id;
};

static void dl_free(void *cls)
{
    struct download *d = cls;
    live_del(d->s, &d->live);
    agent_client_close(&d->ac);
    free(d->pend);
    free(d);
}

/* The next FILE_DATA into d->pend; 1 at FILE_END; <0 on errors (*eno,
 * msg for an ERROR). */
static int dl_next(struct download *d, int *eno, char *msg, size_t ml)
{
    for (;;) {
        struct agent_hdr h;
        const uint8_t *pl;
        int r = ag_next(&d->ac, &h, &pl, d->ac.timeout_ms, &d->live, -1);
        if (r < 0)
            return r;
        if (h.id != d->id)
            continue;
        if (h.type == AGENT_T_FILE_DATA) {
            uint8_t *n = realloc(d->pend, h.len ? h.len : 1);
            if (!n)
                return -ENOMEM;
            d->pend = n;
            memcpy(n, pl, h.len);
            d->plen = h.len;
            d->poff = 0;
            return 0;
        }
        if (h.type == AGENT_T_FILE_END)
            return 1;
        struct agent_error er;
        if (h.type != AGENT_T_ERROR || agent_error_decode(pl, h.len, &er, NULL) < 0)
            return -EPROTO;
        *eno = (int)er.sys_errno;
        snprintf(msg, ml, "%.*s", (int)er.msg_len, er.msg);
        return -EREMOTEIO;
    }
}

static ssize_t dl_read(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    struct download *d = cls;
    while (d->poff == d->plen) {
        if (d->ended)
            return MHD_CONTENT_READER_END_OF_STREAM;
        int eno;
        char msg[64];
        int r = dl_next(d, &eno, msg, sizeof msg);
        if (r < 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (r == 1)
            d->ended = 1;
    }
    size_t n = d->plen - d->poff;
    if (n > max)
        n = max;
    memcpy(out, d->pend + d->poff, n);
    d->poff += n;
    return (ssize_t)n;
}

static enum MHD_Result do_download(struct envd_server *s, struct MHD_Connection *c, struct req *q)
{
    char err[1300], path[CX_MAX_PATH + 1], msg[1100];
    const char *qp = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "path");
    if (!qp)
        return reply_rest_error(c, 400, "the path query parameter is required");
    if (strlen(qp) > CX_MAX_PATH || cx_path_resolve(qp, ENVD_HOME, path, err, sizeof err) < 0)
        return reply_rest_error(c, 400, "path is too long");
    struct download *d = calloc(1, sizeof *d);
    if (!d)
        return reply_rest_error(c, 500, "out of memory");
    d->s = s;
    int r = agent_open(s, q, &d->ac);
    if (r < 0) {
        free(d);
        snprintf(err, sizeof err, "cannot reach the sandbox's guest agent: %s", strerror(-r));
        return reply_rest_error(c, 502, err);
    }
    live_add(s, &d->live, q->sb, d->ac.fd);
    struct agent_buf b = { 0 };
    d->id = d->ac.next_id++;
    r = agent_put_frame(&b, AGENT_T_FILE_READ, d->id, path, strlen(path));
    if (r == 0)
        r = ag_send(&d->ac, NULL, &b);
    agent_buf_free(&b);
    int eno = 0;
    if (r == 0)
        r = dl_next(d, &eno, msg, sizeof msg);
    if (r < 0) {
        unsigned st = 502;
        if (r == -EREMOTEIO) {
            enum cx_code code = cx_code_from_errno(eno);
            st = code == CX_INTERNAL ? 500 : cx_code_http(code);
            snprintf(err, sizeof err, "%s: %s", path, eno ? strerror(eno) : msg);
        } else {
            snprintf(err, sizeof err, "%s: %s", path, strerror(-r));
        }
        dl_free(d);
        return reply_rest_error(c, st, err);
    }
    if (r == 1) {                       /* an empty file */
        dl_free(d);
        return reply(c, 200, "application/octet-stream", NULL, 0);
    }
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, dl_read, d,
                                                                  dl_free);
    if (!resp) {
        dl_free(d);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
    enum MHD_Result res = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return res;
}

struct upload {
    struct envd_server *s;
    struct agent_client ac;
    int open;
    struct live live;
    struct MHD_PostProcessor *pp;
    int octet;
    char qpath[CX_MAX_PATH + 1];      /* resolved ?path=, "" if none */
    char path[CX_MAX_PATH + 1];       /* the file being written */
    int in_file, wrote;
    uint64_t got;                     /* bytes of the current part so far */
    char name[CX_MAX_PATH + 1];       /* its file name as sent */
    uint8_t *buf;
    size_t len;
    json_t *results;
    unsigned err_status;              /* 0: fine so far */
    char err[5400];
    /* Content-Encoding: gzip: the body is inflated (gz_stream.c) before
     * the multipart parser or the file sees it; NULL for a plain body. */
    struct gz_stream *gz;
};

/* The first error of an upload: "what path: msg" (path, msg may be ""). */
static void up_error(struct upload *u, unsigned status, const char *what, const char *path, const char *msg)
{
    if (u->err_status)
        return;
    u->err_status = status;
    snprintf(u->err, sizeof u->err, "%.64s%s%.4096s%s%.1100s", what, *path ? " " : "", path,
             *msg ? ": " : "", msg);
}

static void up_flush(struct upload *u)
{
    if (u->err_status)
        return;
    struct agent_buf b = { 0 };
    uint32_t id = u->ac.next_id++;
    int eno = 0;
    char msg[1100];
    int r = agent_put_fwrite(&b, id, u->wrote ? AGENT_FW_APPEND : 0, 0644, u->path, u->buf, u->len);
    if (r == 0)
        r = ag_call(&u->ac, &u->live, &b, id, &eno, msg, sizeof msg);
    agent_buf_free(&b);
    u->len = 0;
    u->wrote = 1;
    if (r == -EREMOTEIO) {
        enum cx_code code = cx_code_from_errno(eno);
        up_error(u, code == CX_RESOURCE_EXHAUSTED ? 507 : code == CX_INTERNAL ? 500 : cx_code_http(code),
                 "write", u->path, msg);
    } else if (r < 0) {
        up_error(u, 502, "write", u->path, strerror(-r));
    }
}

static void up_begin(struct upload *u, const char *name)
{
    char err[512];
    const char *want = u->qpath[0] ? u->qpath : name;
    u->in_file = 1;
    u->wrote = 0;
    u->len = 0;
    if (u->err_status)
        return;
    if (!want || !*want) {
        up_error(u, 400, "a file part needs a file name or the path query parameter", "", "");
        return;
    }
    if (want != u->qpath && cx_path_resolve(want, ENVD_HOME, u->path, err, sizeof err) < 0) {
        up_error(u, 400, "path", "", err);
        return;
    }
    if (want == u->qpath)
        strcpy(u->path, u->qpath);
    char dir[CX_MAX_PATH + 1], msg[1100];
    int eno = 0;
    if (parent_of(u->path, dir, sizeof dir) == 0) {
        struct agent_buf b = { 0 };
        uint32_t id = u->ac.next_id++;
        int r = agent_put_mkdir(&b, id, 0755, AGENT_MKDIR_PARENTS, dir);
        if (r == 0)
            r = ag_call(&u->ac, &u->live, &b, id, &eno, msg, sizeof msg);
        agent_buf_free(&b);
        if (r < 0) {
            enum cx_code code = r == -EREMOTEIO ? cx_code_from_errno(eno) : CX_UNAVAILABLE;
            up_error(u, code == CX_RESOURCE_EXHAUSTED ? 507 : code == CX_UNAVAILABLE ? 502 : cx_code_http(code),
                     "mkdir", dir, r == -EREMOTEIO ? msg : strerror(-r));
        }
    }
}

static void up_data(struct upload *u, const char *data, size_t n)
{
    while (n && !u->err_status) {
        size_t k = AGENT_CHUNK - u->len;
        if (k > n)
            k = n;
        memcpy(u->buf + u->len, data, k);
        u->len += k;
        data += k;
        n -= k;
        if (u->len == AGENT_CHUNK)
            up_flush(u);
    }
}

static void up_end(struct upload *u)
{
    if (!u->in_file)
        return;
    u->in_file = 0;
    if (u->len || !u->wrote)
        up_flush(u);
    if (u->err_status)
        return;
    const char *name = strrchr(u->path, '/');
    json_t *e = json_pack("{s:s,s:s,s:s}", "name", name ? name + 1 : u->path, "type", "file", "path", u->path);
    if (!e || json_array_append_new(u->results, e) < 0)
        up_error(u, 500, "out of memory", "", "");
}

static enum MHD_Result up_iter(void *cls, enum MHD_ValueKind kind, const char *key, const char *filename,
                               const char *ctype, const char *enc, const char *data, uint64_t off, size_t size)
{
    (void)kind;
    (void)ctype;
    (void)enc;
    struct upload *u = cls;
    if (!key || strcmp(key, "file") != 0)
        return MHD_YES;             /* other form fields are ignored */
    /* A part may start with an empty call at offset 0: the same part goes
     * on while nothing came and the file name is the same. */
    if (off == 0 && (!u->in_file || u->got || strcmp(u->name, filename ? filename : "") != 0)) {
        up_end(u);
        snprintf(u->name, sizeof u->name, "%s", filename ? filename : "");
        u->got = 0;
        up_begin(u, filename);
    }
    u->got += size;
    up_data(u, data, size);
    return MHD_YES;
}

/* The decoded body: to the multipart parser or straight to the file. */
static void up_body(struct upload *u, const char *data, size_t n)
{
    if (u->pp) {
        if (!u->err_status && MHD_post_process(u->pp, data, n) != MHD_YES)
            up_error(u, 400, "malformed multipart/form-data body", "", "");
    } else {
        up_data(u, data, n);
    }
}

/* Decoded body bytes from gz_stream: on to the parser or the file; an
 * error there (already recorded) stops the decoding. */
static int up_gz_sink(void *ctx, const uint8_t *data, size_t n)
{
    struct upload *u = ctx;
    up_body(u, (const char *)data, n);
    return u->err_status ? -ECANCELED : 0;
}

/* A gz_stream result as the upload's error: 413 past max_inflate, 500
 * out of memory, else 400 with the decoder's reason. */
static void up_gz_result(struct upload *u, int r)
{
    if (r == 0 || u->err_status)
        return;                     /* fine, or the sink's error is the upload's */
    if (r == -EFBIG)
        up_error(u, 413, "gzip body too large", "", gz_stream_reason(u->gz));
    else if (r == -ENOMEM)
        up_error(u, 500, "out of memory", "", "");
    else
        up_error(u, 400, "malformed gzip body", "", gz_stream_reason(u->gz));
}

/* Body bytes as they arrive: inflated first when the body is gzip
 * (gz_stream.c: 64 KiB at a time, never the whole body in memory;
 * concatenated members are one stream, anything else after a member's end
 * is an error; decoded bytes past max_inflate end the upload with 413).
 * After an error the rest is dropped without being inflated. */
static void up_input(struct upload *u, const char *data, size_t n)
{
    if (!u->gz) {
        up_body(u, data, n);
        return;
    }
    if (!u->err_status)
        up_gz_result(u, gz_stream_feed(u->gz, data, n, up_gz_sink, u));
}

/* The body's end: a gzip stream must hold whole members, at least one. */
static void up_input_end(struct upload *u)
{
    if (u->gz && !u->err_status)
        up_gz_result(u, gz_stream_finish(u->gz));
}

static void up_free(struct upload *u)
{
    if (!u)
        return;
    if (u->pp)
        MHD_destroy_post_processor(u->pp);
    if (u->open) {
        live_del(u->s, &u->live);
        agent_client_close(&u->ac);
    }
    json_decref(u->results);
    gz_stream_free(u->gz);
    free(u->buf);
    free(u);
}

/* First call of POST /files: check the request, connect to the agent. */
static int up_start(struct envd_server *s, struct MHD_Connection *c, struct req *q)
{
    char err[1300];
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    const char *ce = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Encoding");
    const char *qp = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "path");
    int gz = 0;
    if (ce && *ce && strcasecmp(ce, "identity") != 0) {
        if (strcasecmp(ce, "gzip") != 0 && strcasecmp(ce, "x-gzip") != 0)
            return reply_rest_error(c, 415, "unsupported Content-Encoding (POST /files takes gzip or identity)")
                           == MHD_YES ? 1 : -1;
        gz = 1;
    }
    struct upload *u = calloc(1, sizeof *u);
    if (!u || !(u->buf = malloc(AGENT_CHUNK)) || !(u->results = json_array())) {
        up_free(u);
        return reply_rest_error(c, 500, "out of memory") == MHD_YES ? 1 : -1;
    }
    if (gz && gz_stream_init(&u->gz, s->o.max_inflate) < 0) {
        up_free(u);
        return reply_rest_error(c, 500, "out of memory") == MHD_YES ? 1 : -1;
    }
    u->s = s;
    if (qp && *qp && (strlen(qp) > CX_MAX_PATH || cx_path_resolve(qp, ENVD_HOME, u->qpath, err, sizeof err) < 0)) {
        up_free(u);
        return reply_rest_error(c, 400, "path is too long") == MHD_YES ? 1 : -1;
    }
    if (ct && strncasecmp(ct, "multipart/form-data", 19) == 0) {
        u->pp = MHD_create_post_processor(c, 64 * 1024, up_iter, u);
        if (!u->pp) {
            up_free(u);
            return reply_rest_error(c, 400, "malformed multipart/form-data Content-Type") == MHD_YES ? 1 : -1;
        }
    } else if (ct && strncasecmp(ct, "application/octet-stream", 24) == 0) {
        if (!u->qpath[0]) {
            up_free(u);
            return reply_rest_error(c, 400, "an application/octet-stream upload needs the path query parameter")
                           == MHD_YES ? 1 : -1;
        }
        u->octet = 1;
    } else {
        up_free(u);
        return reply_rest_error(c, 415, "POST /files takes multipart/form-data or application/octet-stream")
                       == MHD_YES ? 1 : -1;
    }
    int r = agent_open(s, q, &u->ac);
    if (r < 0) {
        up_free(u);
        snprintf(err, sizeof err, "cannot reach the sandbox's guest agent: %s", strerror(-r));
        return reply_rest_error(c, 502, err) == MHD_YES ? 1 : -1;
    }
    u->open = 1;
    live_add(s, &u->live, q->sb, u->ac.fd);
    if (u->octet)
        up_begin(u, NULL);
    q->up = u;
    return 0;
}

static enum MHD_Result up_finish(struct MHD_Connection *c, struct req *q)
{
    struct upload *u = q->up;
    up_input_end(u);
    if (u->pp) {
        /* Destroying the processor hands over what it held back and says
         * whether the body ended where multipart says it must. */
        enum MHD_Result ok = MHD_destroy_post_processor(u->pp);
        u->pp = NULL;
        if (ok != MHD_YES)
            up_error(u, 400, "malformed multipart/form-data body", "", "");
    }
    up_end(u);
    if (!u->err_status && json_array_size(u->results) == 0)
        up_error(u, 400, "no part named 'file' in the upload", "", "");
    if (u->err_status)
        return reply_rest_error(c, u->err_status, u->err);
    return reply_ok_json(c, json_incref(u->results));
}

/* ---- MHD glue ---- */

static enum MHD_Result dispatch(struct envd_server *s, struct MHD_Connection *c, struct req *q)
{
    if (q->route == R_FILES_POST)
        return up_finish(c, q);
    if (q->route == R_FILES_GET)
        return do_download(s, c, q);
    if (q->route == R_HEALTH)
        return reply(c, 204, NULL, NULL, 0);
    if (q->too_big) {
        char m[128];
        snprintf(m, sizeof m, "request body over %zu bytes", s->o.max_body);
        if (is_stream(q->route))
            return reply_stream_error(c, CX_INVALID_ARGUMENT, m);
        return reply_cx_status(c, 413, CX_INVALID_ARGUMENT, m);
    }
    const char *msg = (const char *)q->body;
    size_t mlen = q->blen;
    char err[256];
    if (is_stream(q->route)) {
        const uint8_t *m;
        if (cx_envelope_one(q->body, q->blen, &m, &mlen, err, sizeof err) < 0)
            return reply_stream_error(c, CX_INVALID_ARGUMENT, err);
        msg = (const char *)m;
    }
    switch (q->route) {
    case R_START: return do_start(s, c, q, msg, mlen);
    case R_CONNECT: return do_connect(s, c, q, msg, mlen);
    case R_WATCH_DIR:
        return reply_stream_error(c, CX_UNIMPLEMENTED, "moat serve does not watch directories yet");
    case R_WATCH_UNARY:
        return reply_cx(c, CX_UNIMPLEMENTED, "moat serve does not watch directories yet");
    case R_STREAM_INPUT:
        return reply_cx(c, CX_UNIMPLEMENTED, "StreamInput is a client stream, which HTTP/1.1 cannot carry: use SendInput");
    case R_UPDATE:
        return do_update(s, c, q, msg, mlen);
    case R_LIST:
        if (cx_empty_decode(msg, mlen, err, sizeof err) < 0)
            return reply_cx(c, CX_INVALID_ARGUMENT, err);
        return do_list(s, c, q);
    case R_SEND_SIGNAL:
    case R_SEND_INPUT:
    case R_CLOSE_STDIN:
        return do_proc_frame(s, c, q, msg, mlen);
    default:
        return do_fs(s, c, q, msg, mlen);
    }
}

/* Content-Type without parameters, case-insensitively equal to want. */
static int ctype_is(const char *ct, const char *want)
{
    size_t n = strlen(want);
    return ct && strncasecmp(ct, want, n) == 0 && (ct[n] == 0 || ct[n] == ';' || ct[n] == ' ');
}

static enum MHD_Result first_call(struct envd_server *s, struct MHD_Connection *c, const char *url,
                                  const char *method, struct req *q)
{
    int bad_method;
    q->route = route_of(method, url, &bad_method);
    if (q->route == R_NONE) {
        if (strncmp(url, "/process.Process/", 17) == 0 || strncmp(url, "/filesystem.Filesystem/", 23) == 0)
            return reply_cx_status(c, 404, CX_UNIMPLEMENTED, "no such method");
        return reply_rest_error(c, 404, "no such route");
    }
    if (bad_method) {
        if (is_connect(q->route))
            return reply_cx_status(c, 405, CX_UNIMPLEMENTED, "Connect methods take POST");
        return reply_rest_error(c, 405, "method not allowed");
    }
    if (is_connect(q->route)) {
        const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
        if (!ctype_is(ct, is_stream(q->route) ? "application/connect+json" : "application/json"))
            return reply_cx_status(c, 415, CX_INVALID_ARGUMENT,
                                   is_stream(q->route) ? "this stream takes application/connect+json"
                                                       : "this method takes application/json");
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->o.max_body) {
            char m[128];
            snprintf(m, sizeof m, "request body over %zu bytes", s->o.max_body);
            return reply_cx_status(c, 413, CX_INVALID_ARGUMENT, m);
        }
    }
    int r = resolve(s, c, q);
    if (r)
        return r > 0 ? MHD_YES : MHD_NO;
    if (q->route == R_FILES_POST) {
        r = up_start(s, c, q);
        if (r)
            return r > 0 ? MHD_YES : MHD_NO;
    }
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size,
                                  void **con_cls)
{
    (void)version;
    struct envd_server *s = cls;
    struct req *q = *con_cls;
    if (!q) {
        if (!(q = calloc(1, sizeof *q)))
            return MHD_NO;
        *con_cls = q;
        enum MHD_Result res = first_call(s, c, url, method, q);
        /* A response queued now (an error) ends the request. */
        if (res == MHD_YES && (q->route == R_NONE || (!q->sb[0]) || (q->route == R_FILES_POST && !q->up)))
            q->answered = 1;
        return res;
    }
    if (q->answered) {
        *upload_size = 0;                   /* discard the rest of the body */
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (q->up) {
            up_input(q->up, upload_data, n);
            return MHD_YES;
        }
        if (q->too_big || q->blen + n > s->o.max_body) {
            q->too_big = 1;
            return MHD_YES;
        }
        if (q->blen + n > q->bcap) {
            size_t nc = q->bcap ? q->bcap : 4096;
            while (nc < q->blen + n)
                nc *= 2;
            uint8_t *b = realloc(q->body, nc);
            if (!b)
                return MHD_NO;
            q->body = b;
            q->bcap = nc;
        }
        memcpy(q->body + q->blen, upload_data, n);
        q->blen += n;
        return MHD_YES;
    }
    q->answered = 1;
    return dispatch(s, c, q);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode t)
{
    (void)cls;
    (void)c;
    (void)t;
    struct req *q = *con_cls;
    if (!q)
        return;
    up_free(q->up);
    free_envs(q);
    free(q->body);
    free(q);
    *con_cls = NULL;
}

static void *janitor_main(void *arg);

int envd_start(const struct envd_opts *o, struct envd_server **out)
{
    if (!o || !o->resolve || !o->port || o->port > 65535)
        return -EINVAL;
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)o->port) };
    if (inet_pton(AF_INET, o->bind_addr ? o->bind_addr : "127.0.0.1", &sa.sin_addr) != 1)
        return -EINVAL;
    char why[256];
    int lr = mhd_load(why, sizeof why);
    if (lr < 0) {
        fprintf(stderr, "moat: the envd server: %s\n", why);
        return lr;
    }
    struct envd_server *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->o = *o;
    if (!s->o.max_body)
        s->o.max_body = DEFAULT_BODY;
    if (!s->o.max_inflate)
        s->o.max_inflate = DEFAULT_INFLATE;
    if (s->o.op_timeout_ms <= 0)
        s->o.op_timeout_ms = OP_TIMEOUT_MS;
    pthread_mutex_init(&s->lock, NULL);
    /* Bind ourselves first: MHD reports no errno. */
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 128) < 0) {
        int r = -errno;
        if (fd >= 0)
            close(fd);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return r;
    }
    s->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, 0,
                            NULL, NULL, on_request, s, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_NOTIFY_COMPLETED,
                            on_completed, s, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONN_TIMEOUT_S,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)MAX_CONNS,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(128 * 1024), MHD_OPTION_END);
    if (!s->d) {
        close(fd);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return -EIO;
    }
    int r = pthread_create(&s->janitor, NULL, janitor_main, s);
    if (r) {
        MHD_stop_daemon(s->d);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return -r;
    }
    *out = s;
    return 0;
}

/* The janitor reads the processes no stream is attached to: their output
 * is dropped (as envd drops what no subscriber takes), so they never block
 * on a full pipe, and their EXIT takes them out of the table (List, kill). */
#define DRAIN_MAX (1u << 20)        /* per process per round: one flooding guest shares the janitor */

static void drain(struct envd_server *s, struct proc *p)
{
    uint8_t buf[65536];
    for (size_t got = 0; got < DRAIN_MAX;) {
        ssize_t k = recv(p->ac.fd, buf, sizeof buf, MSG_DONTWAIT);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && errno == EAGAIN)
            return;
        if (k <= 0 || agent_rx_push(&p->ac.rx, buf, (size_t)k) < 0) {
            proc_unlist(s, p);          /* the agent is gone: so is the process */
            return;
        }
        got += (size_t)k;
        struct agent_hdr h;
        const uint8_t *pl;
        int r;
        while ((r = agent_rx_next(&p->ac.rx, &h, &pl, NULL)) == 1)
            if (h.id == EXEC_ID && (h.type == AGENT_T_EXIT || h.type == AGENT_T_ERROR)) {
                proc_unlist(s, p);
                return;
            }
        if (r < 0) {
            proc_unlist(s, p);
            return;
        }
    }
}

/* Every round polls all the unattached processes (a growable array, not
 * the first N of the list: older ones would never be read). */
static void *janitor_main(void *arg)
{
    struct envd_server *s = arg;
    struct proc **ps = NULL;
    struct pollfd *pf = NULL;
    size_t cap = 0;
    while (!atomic_load(&s->stopping)) {
        nfds_t n = 0;
        pthread_mutex_lock(&s->lock);
        size_t want = 0;
        for (struct proc *p = s->procs; p; p = p->next)
            want++;
        if (want > cap) {
            struct proc **nps = realloc(ps, want * sizeof *ps);
            if (nps)
                ps = nps;
            struct pollfd *npf = nps ? realloc(pf, want * sizeof *pf) : NULL;
            if (npf)
                pf = npf;
            if (nps && npf)
                cap = want;
        }
        for (struct proc *p = s->procs; p && n < cap; p = p->next)
            if (!p->attached && !p->connecting) {
                p->attached = 2;
                p->refs++;
                ps[n] = p;
                pf[n] = (struct pollfd){ .fd = p->ac.fd, .events = POLLIN };
                n++;
            }
        pthread_mutex_unlock(&s->lock);
        if (!n) {
            usleep(250 * 1000);
            continue;
        }
        if (poll(pf, n, 250) < 0 && errno != EINTR)
            usleep(250 * 1000);
        for (nfds_t i = 0; i < n; i++) {
            if (pf[i].revents)
                drain(s, ps[i]);
            pthread_mutex_lock(&s->lock);
            ps[i]->attached = 0;
            pthread_mutex_unlock(&s->lock);
            proc_unref(s, ps[i]);
        }
    }
    free(ps);
    free(pf);
    return NULL;
}

/* Cut every agent connection of sandbox sb (NULL: all) and take its
 * processes out of the table. */
static void cut(struct envd_server *s, const char *sb)
{
    struct proc *drop = NULL;
    pthread_mutex_lock(&s->lock);
    for (struct live *l = s->lives; l; l = l->next)
        if (!sb || strcmp(l->sb, sb) == 0) {
            atomic_store(&l->cancelled, 1);
            shutdown(l->fd, SHUT_RDWR);
        }
    for (struct proc **pp = &s->procs; *pp;) {
        struct proc *p = *pp;
        if (sb && strcmp(p->sb, sb) != 0) {
            pp = &p->next;
            continue;
        }
        *pp = p->next;
        p->in_table = 0;            /* the table's reference moves to drop */
        p->next = drop;
        drop = p;
    }
    pthread_mutex_unlock(&s->lock);
    while (drop) {
        struct proc *p = drop;
        drop = p->next;
        proc_unref(s, p);
    }
}

void envd_forget_sandbox(struct envd_server *s, const char *sandbox_id)
{
    if (s && sandbox_id)
        cut(s, sandbox_id);
}

void envd_stop(struct envd_server *s)
{
    if (!s)
        return;
    atomic_store(&s->stopping, 1);
    pthread_join(s->janitor, NULL);
    cut(s, NULL);
    MHD_stop_daemon(s->d);
    cut(s, NULL);
    pthread_mutex_destroy(&s->lock);
    free(s);
}
