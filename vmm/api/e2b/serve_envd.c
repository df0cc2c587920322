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
 * (struct live) so that envd_forget_sandbox and envd_stop can cut them.
 *
 * This file: the requests (routes, the resolver, the answers), the
 * libmicrohttpd glue, start, forget and stop. The calls themselves:
 * envd_process.c (process.Process), envd_fs.c (filesystem.Filesystem),
 * envd_files.c (/files: downloads, uploads); agent connections in
 * envd_agent.c; what they share in envd_int.h. */
#include "vmm/api/e2b/serve_envd.h"
#include "vmm/api/e2b/envd_int.h"
#include "vmm/api/e2b/envd_sign.h"

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

/* ---- requests ---- */


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


enum MHD_Result envd_reply(struct MHD_Connection *c, unsigned status, const char *ctype, const void *body,
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
enum MHD_Result envd_reply_rest_error(struct MHD_Connection *c, unsigned status, const char *msg)
{
    json_t *m = json_string(msg);          /* may carry guest bytes: valid UTF-8 only */
    json_t *j = json_pack("{s:I,s:o}", "code", (json_int_t)status, "message",
                          m ? m : json_string("(message not UTF-8)"));
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(j);
    enum MHD_Result res = envd_reply(c, status, "application/json", s, s ? strlen(s) : 0);
    free(s);
    return res;
}

static enum MHD_Result reply_cx_status(struct MHD_Connection *c, unsigned status, enum cx_code code,
                                       const char *msg)
{
    char *s = cx_error_json(code, msg);
    enum MHD_Result res = envd_reply(c, status, "application/json", s, s ? strlen(s) : 0);
    free(s);
    return res;
}

enum MHD_Result envd_reply_cx(struct MHD_Connection *c, enum cx_code code, const char *msg)
{
    return reply_cx_status(c, cx_code_http(code), code, msg);
}

/* A stream's error: HTTP 200 and one end-of-stream envelope. */
enum MHD_Result envd_reply_stream_error(struct MHD_Connection *c, enum cx_code code, const char *msg)
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
    enum MHD_Result res = envd_reply(c, 200, "application/connect+json", b, len);
    free(b);
    return res;
}

enum MHD_Result envd_reply_ok_json(struct MHD_Connection *c, json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(j);
    if (!s)
        return envd_reply_cx(c, CX_INTERNAL, "out of memory");
    enum MHD_Result res = envd_reply(c, 200, "application/json", s, strlen(s));
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
struct sig_match {
    const char *sig, *exp, *path, *op, *user, *want_id;
    int64_t now;
    int result;
};

static int sig_match(void *m, const char *id, const char *token)
{
    struct sig_match *x = m;
    if ((x->want_id && strcmp(id, x->want_id)) || !*token)
        return 0;
    int r = envd_sign_check(x->sig, x->exp, x->path, x->op, x->user, token, x->now);
    if (r == 0 || r == -ETIMEDOUT) {
        x->result = r;
        return 1;
    }
    return 0;
}

/* A /files request with ?signature= and no X-Access-Token (uploadUrl,
 * downloadUrl): the sandbox whose token signs it; E2b-Sandbox-Id, if
 * sent, must name it. 0 (id, tok filled) or the 401 message. */
static const char *signed_lookup(struct envd_server *s, struct MHD_Connection *c, struct req *q, const char *sb,
                                 char *id, char *tok)
{
    struct sig_match x = {
        .sig = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "signature"),
        .exp = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "signature_expiration"),
        .path = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "path"),
        .user = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "username"),
        .op = q->route == R_FILES_POST ? "write" : "read",
        .want_id = sb && *sb ? sb : NULL,
        .now = (int64_t)time(NULL),
    };
    if (!x.path)
        x.path = "";
    if (!x.user)
        x.user = "";
    if (!s->o.find_signed)
        return "signed URLs are not served here: send X-Access-Token";
    if (x.exp && envd_sign_check(x.sig, x.exp, "", "", "", "", 0) == -EINVAL)
        return "invalid signature_expiration";
    if (s->o.find_signed(s->o.arg, sig_match, &x, id, SB_MAX, tok, TOKEN_MAX + 1) < 0)
        return "invalid signature";
    return x.result == -ETIMEDOUT ? "signature is already expired" : NULL;
}

static int resolve(struct envd_server *s, struct MHD_Connection *c, struct req *q)
{
    const char *sb = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "E2b-Sandbox-Id");
    const char *tok = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Access-Token");
    const char *msg = NULL;
    unsigned st = 0;
    enum cx_code code = CX_OK;
    char sid[SB_MAX], stok[TOKEN_MAX + 1];
    if (!tok && (q->route == R_FILES_GET || q->route == R_FILES_POST) &&
        MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "signature")) {
        if ((msg = signed_lookup(s, c, q, sb, sid, stok))) {
            st = 401, code = CX_UNAUTHENTICATED;
        } else {
            sb = sid;
            tok = stok;
        }
    }
    if (msg) {
        /* answered below */
    } else if (!sb || !*sb || strlen(sb) >= SB_MAX) {
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
        res = envd_reply_rest_error(c, st, msg);
    return res == MHD_YES ? 1 : -1;
}

int envd_agent_open(struct envd_server *s, struct req *q, struct agent_client *ac)
{
    int r = agent_client_connect(ac, q->vsock, q->hybrid, AGENT_DEFAULT_PORT);
    if (r == 0)
        ac->timeout_ms = s->o.op_timeout_ms;     /* every call, also agent_client_*'s */
    return r;
}

/* ---- MHD glue ---- */

static enum MHD_Result dispatch(struct envd_server *s, struct MHD_Connection *c, struct req *q)
{
    if (q->route == R_FILES_POST)
        return envd_up_finish(c, q);
    if (q->route == R_FILES_GET)
        return envd_do_download(s, c, q);
    if (q->route == R_HEALTH)
        return envd_reply(c, 204, NULL, NULL, 0);
    if (q->too_big) {
        char m[128];
        snprintf(m, sizeof m, "request body over %zu bytes", s->o.max_body);
        if (is_stream(q->route))
            return envd_reply_stream_error(c, CX_INVALID_ARGUMENT, m);
        return reply_cx_status(c, 413, CX_INVALID_ARGUMENT, m);
    }
    const char *msg = (const char *)q->body;
    size_t mlen = q->blen;
    char err[256];
    if (is_stream(q->route)) {
        const uint8_t *m;
        if (cx_envelope_one(q->body, q->blen, &m, &mlen, err, sizeof err) < 0)
            return envd_reply_stream_error(c, CX_INVALID_ARGUMENT, err);
        msg = (const char *)m;
    }
    switch (q->route) {
    case R_START: return envd_do_start(s, c, q, msg, mlen);
    case R_CONNECT: return envd_do_connect(s, c, q, msg, mlen);
    case R_WATCH_DIR:
        return envd_do_watch(s, c, q, msg, mlen);
    case R_WATCH_UNARY:
        return envd_reply_cx(c, CX_UNIMPLEMENTED,
                             "moat serve watches directories through WatchDir (a stream) only, not polled watchers");
    case R_STREAM_INPUT:
        return envd_reply_cx(c, CX_UNIMPLEMENTED,
                             "StreamInput is a client stream, which HTTP/1.1 cannot carry: use SendInput");
    case R_UPDATE:
        return envd_do_update(s, c, q, msg, mlen);
    case R_LIST:
        if (cx_empty_decode(msg, mlen, err, sizeof err) < 0)
            return envd_reply_cx(c, CX_INVALID_ARGUMENT, err);
        return envd_do_list(s, c, q);
    case R_SEND_SIGNAL:
    case R_SEND_INPUT:
    case R_CLOSE_STDIN:
        return envd_do_proc_frame(s, c, q, msg, mlen);
    default:
        return envd_do_fs(s, c, q, msg, mlen);
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
        return envd_reply_rest_error(c, 404, "no such route");
    }
    if (bad_method) {
        if (is_connect(q->route))
            return reply_cx_status(c, 405, CX_UNIMPLEMENTED, "Connect methods take POST");
        return envd_reply_rest_error(c, 405, "method not allowed");
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
        r = envd_up_start(s, c, q);
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
            envd_up_input(q->up, upload_data, n);
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
    envd_up_free(q->up);
    free_envs(q);
    free(q->body);
    free(q);
    *con_cls = NULL;
}


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
    int r = pthread_create(&s->janitor, NULL, envd_janitor_main, s);
    if (r) {
        MHD_stop_daemon(s->d);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return -r;
    }
    *out = s;
    return 0;
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
        envd_proc_unref(s, p);
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

