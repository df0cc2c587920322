/* The envd server of `moat serve` (vmm/api/e2b/serve_envd.c), in-process, over
 * real HTTP/1.1 (raw sockets), against the real guest agent run on the
 * host (build/guest/agent --unix PATH, as tests/integration/test_agent.c
 * does): two "sandboxes" are two agents, the resolver maps their ids and
 * tokens to the agents' sockets (hybrid 0). The requests are shaped as the
 * e2b JavaScript SDK 2.51.0 sends them (docs/serve.md, "The envd endpoint").
 *
 * Env: MOAT_AGENT (default build/guest/agent).
 * Run: make build/tests/test_serve_envd && build/tests/test_serve_envd */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "tests/gzip_of.h"
#include "vmm/agent/agent_proto.h"
#include "vmm/api/e2b/serve_connect.h"
#include "vmm/api/e2b/serve_envd.h"

#define NSB 2

static const char *agent_bin;
static char tmpdir[256];
static struct sb {
    const char *id, *token;
    char sock[300];
    pid_t agent;
    char *envs[2];
} sbs[NSB] = {
    { .id = "sbx-one", .token = "token-one", .envs = { "SANDBOX_NAME=one", NULL } },
    { .id = "sbx-two", .token = "token-two", .envs = { "SANDBOX_NAME=two", NULL } },
};
static struct envd_server *srv;
static char evil_sock[100];             /* "sbx-evil": the hostile fake agent below */
static unsigned port;
static uint64_t max_inflate;            /* envd_opts.max_inflate of the next server_start */
static int resolves, releases;
static pthread_mutex_t count_lock = PTHREAD_MUTEX_INITIALIZER;

static int resolve(void *arg, const char *id, const char *token, struct envd_sandbox *out)
{
    (void)arg;
    for (int i = 0; i < NSB; i++) {
        if (strcmp(id, sbs[i].id) != 0)
            continue;
        if (strcmp(token, sbs[i].token) != 0)
            return -EACCES;
        snprintf(out->vsock_path, sizeof out->vsock_path, "%s", sbs[i].sock);
        out->hybrid = 0;
        out->envs = sbs[i].envs;
        out->nenvs = 1;
        pthread_mutex_lock(&count_lock);
        resolves++;
        pthread_mutex_unlock(&count_lock);
        return 0;
    }
    if (strcmp(id, "sbx-evil") == 0 && evil_sock[0]) {
        snprintf(out->vsock_path, sizeof out->vsock_path, "%s", evil_sock);
        out->hybrid = 0;
        out->envs = NULL;
        out->nenvs = 0;
        return 0;
    }
    return strcmp(id, "sbx-paused") == 0 ? -EAGAIN : -ENOENT;
}

static void release(void *arg, struct envd_sandbox *out)
{
    (void)arg;
    (void)out;
    pthread_mutex_lock(&count_lock);
    releases++;
    pthread_mutex_unlock(&count_lock);
}

static void agent_start(struct sb *s, int i)
{
    snprintf(s->sock, sizeof s->sock, "%s/agent%d.sock", tmpdir, i);
    s->agent = fork();
    ck_assert_int_ge(s->agent, 0);
    if (s->agent == 0) {
        execl(agent_bin, agent_bin, "--unix", s->sock, (char *)NULL);
        _exit(127);
    }
    for (int k = 0; k < 300; k++) {
        struct stat st;
        if (stat(s->sock, &st) == 0)
            return;
        usleep(10000);
    }
    ck_abort_msg("agent %s did not listen on %s", agent_bin, s->sock);
}

/* srv on a free port: bind 0, read it, let go, take it. */
static void server_start(size_t max_body, int op_timeout_ms)
{
    for (int tries = 0; tries < 20; tries++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t sl = sizeof sa;
        ck_assert(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
        ck_assert(getsockname(fd, (struct sockaddr *)&sa, &sl) == 0);
        close(fd);
        port = ntohs(sa.sin_port);
        struct envd_opts o = { .bind_addr = "127.0.0.1", .port = port, .resolve = resolve,
                               .release = release, .max_body = max_body, .op_timeout_ms = op_timeout_ms,
                               .max_inflate = max_inflate };
        int r = envd_start(&o, &srv);
        if (r == 0)
            return;
        ck_assert_int_eq(r, -EADDRINUSE);
    }
    ck_abort_msg("no free port");
}

static void tmpdir_remove(void)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", tmpdir);
}

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/moat-envd-test.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    for (int i = 0; i < NSB; i++)
        agent_start(&sbs[i], i);
    resolves = releases = 0;
    max_inflate = 0;
    server_start(64 * 1024, 0);
}

static void teardown(void)
{
    envd_stop(srv);
    srv = NULL;
    for (int i = 0; i < NSB; i++) {
        kill(sbs[i].agent, SIGKILL);
        waitpid(sbs[i].agent, NULL, 0);
    }
    tmpdir_remove();
}

/* ---- a small HTTP/1.1 client ---- */

struct resp {
    int status;
    char head[8192];
    uint8_t *body;
    size_t len;
};

static void resp_free(struct resp *r)
{
    free(r->body);
    memset(r, 0, sizeof *r);
}

static int tcp_connect(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    ck_assert_int_ge(fd, 0);
    ck_assert_msg(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0, "connect: %s", strerror(errno));
    return fd;
}

static void send_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        ck_assert_msg(k > 0, "send: %s", strerror(errno));
        b += k;
        n -= (size_t)k;
    }
}

/* Sends a request; hdrs are extra header lines ("K: V\r\n"...). A
 * chunked body goes out in pieces of 1000 bytes. */
static int request_send(const char *method, const char *path, const char *hdrs, const void *body, size_t blen,
                        int chunked)
{
    int fd = tcp_connect();
    char head[4096];
    int n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nConnection: close\r\n%s", method,
                     path, port, hdrs ? hdrs : "");
    if (body && chunked)
        n += snprintf(head + n, sizeof head - (size_t)n, "Transfer-Encoding: chunked\r\n\r\n");
    else if (body)
        n += snprintf(head + n, sizeof head - (size_t)n, "Content-Length: %zu\r\n\r\n", blen);
    else
        n += snprintf(head + n, sizeof head - (size_t)n, "\r\n");
    send_all(fd, head, (size_t)n);
    if (body && chunked) {
        for (size_t off = 0; off < blen; off += 1000) {
            size_t k = blen - off < 1000 ? blen - off : 1000;
            char ch[32];
            int m = snprintf(ch, sizeof ch, "%zx\r\n", k);
            send_all(fd, ch, (size_t)m);
            send_all(fd, (const uint8_t *)body + off, k);
            send_all(fd, "\r\n", 2);
        }
        send_all(fd, "0\r\n\r\n", 5);
    } else if (body) {
        send_all(fd, body, blen);
    }
    return fd;
}

static void read_response(int fd, struct resp *r)
{
    size_t cap = 1 << 16, len = 0;
    uint8_t *raw = malloc(cap);
    for (;;) {
        if (len == cap)
            raw = realloc(raw, cap *= 2);
        ssize_t k = recv(fd, raw + len, cap - len, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        len += (size_t)k;
    }
    close(fd);
    memset(r, 0, sizeof *r);
    uint8_t *end = memmem(raw, len, "\r\n\r\n", 4);
    ck_assert_msg(end != NULL, "no HTTP head in %zu bytes", len);
    size_t hl = (size_t)(end - raw);
    ck_assert(hl < sizeof r->head);
    memcpy(r->head, raw, hl);
    r->head[hl] = 0;
    ck_assert(sscanf(r->head, "HTTP/1.1 %d", &r->status) == 1);
    uint8_t *b = end + 4;
    size_t bl = len - hl - 4;
    r->body = malloc(bl + 1);
    if (strcasestr(r->head, "Transfer-Encoding: chunked")) {
        size_t o = 0;
        for (;;) {
            char *nl = memmem(b, bl, "\r\n", 2);
            ck_assert(nl != NULL);
            size_t k = strtoul((char *)b, NULL, 16);
            size_t skip = (size_t)((uint8_t *)nl - b) + 2;
            if (k == 0)
                break;
            ck_assert(skip + k + 2 <= bl);
            memcpy(r->body + o, b + skip, k);
            o += k;
            b += skip + k + 2;
            bl -= skip + k + 2;
        }
        r->len = o;
    } else {
        memcpy(r->body, b, bl);
        r->len = bl;
    }
    r->body[r->len] = 0;
    free(raw);
}

static void http(const char *method, const char *path, const char *hdrs, const void *body, size_t blen,
                 int chunked, struct resp *r)
{
    read_response(request_send(method, path, hdrs, body, blen, chunked), r);
}

static char hdr_buf[NSB + 1][512];

/* The headers the SDK sends to sandbox i's envd (token: NULL = its own). */
static const char *sdk_headers(int i, const char *token, const char *ctype)
{
    static int k;
    char *h = hdr_buf[k++ % (NSB + 1)];
    snprintf(h, 512, "E2b-Sandbox-Id: %s\r\nE2b-Sandbox-Port: 49983\r\nX-Access-Token: %s\r\n%s%s%s", sbs[i].id,
             token ? token : sbs[i].token, ctype ? "Content-Type: " : "", ctype ? ctype : "", ctype ? "\r\n" : "");
    return h;
}

static void unary(int i, const char *method, const char *json, struct resp *r)
{
    char path[128], hdrs[600];
    snprintf(path, sizeof path, "/%s", method);
    snprintf(hdrs, sizeof hdrs, "%sConnect-Protocol-Version: 1\r\n", sdk_headers(i, NULL, "application/json"));
    http("POST", path, hdrs, json, strlen(json), 0, r);
}

static uint8_t *envelope(const char *json, size_t *n)
{
    uint8_t *b = NULL;
    size_t cap = 0;
    *n = 0;
    ck_assert_int_eq(cx_envelope_append(&b, n, &cap, 0, json, strlen(json)), 0);
    return b;
}

static int stream_send_h(int i, const char *method, const char *json, const char *token, const char *extra)
{
    char path[128], hdrs[800];
    snprintf(path, sizeof path, "/%s", method);
    snprintf(hdrs, sizeof hdrs, "%sConnect-Protocol-Version: 1\r\nKeepalive-Ping-Interval: 50\r\n%s",
             sdk_headers(i, token, "application/connect+json"), extra ? extra : "");
    size_t n;
    uint8_t *b = envelope(json, &n);
    int fd = request_send("POST", path, hdrs, b, n, 0);
    free(b);
    return fd;
}

static int stream_send(int i, const char *method, const char *json, const char *token)
{
    return stream_send_h(i, method, json, token, NULL);
}

/* A finished stream's messages. */
struct events {
    json_t *msgs[256];
    int n;
    json_t *end;             /* the end-of-stream message */
    char out[1 << 20], err[4096];
    size_t outlen;           /* out: stdout, or a pty's output */
    int pty_events, stdout_events;
    uint32_t pid;
    int have_end_event;
    json_int_t exit_code;
    const char *status;
};

static void events_parse(const struct resp *r, struct events *e)
{
    memset(e, 0, sizeof *e);
    ck_assert_msg(r->status == 200, "stream status %d", r->status);
    ck_assert_msg(strcasestr(r->head, "Content-Type: application/connect+json"), "%s", r->head);
    size_t off = 0;
    while (off < r->len) {
        ck_assert(off + 5 <= r->len);
        uint8_t fl = r->body[off];
        uint32_t n = (uint32_t)r->body[off + 1] << 24 | (uint32_t)r->body[off + 2] << 16 |
                     (uint32_t)r->body[off + 3] << 8 | r->body[off + 4];
        ck_assert(off + 5 + n <= r->len);
        json_t *j = json_loadb((const char *)r->body + off + 5, n, 0, NULL);
        ck_assert_msg(j != NULL, "a frame is not JSON");
        off += 5 + n;
        if (fl == CX_FLAG_END) {
            ck_assert_msg(off == r->len, "bytes after the end-of-stream frame");
            e->end = j;
            break;
        }
        ck_assert_int_eq(fl, 0);
        ck_assert(e->n < 256);
        e->msgs[e->n++] = j;
        json_t *ev = json_object_get(j, "event");
        ck_assert(json_is_object(ev));
        json_t *x;
        if ((x = json_object_get(ev, "start")))
            e->pid = (uint32_t)json_integer_value(json_object_get(x, "pid"));
        if ((x = json_object_get(ev, "data"))) {
            json_t *s = json_object_get(x, "stdout");
            int is_err = !s && !json_object_get(x, "pty");
            e->stdout_events += s != NULL;
            if (!s && (s = json_object_get(x, "pty")))
                e->pty_events++;
            if (!s)
                s = json_object_get(x, "stderr");
            ck_assert_msg(json_is_string(s), "a data event without stdout, stderr or pty");
            uint8_t *d;
            size_t dl;
            ck_assert_int_eq(cx_b64_decode(json_string_value(s), json_string_length(s), &d, &dl), 0);
            if (is_err) {
                size_t have = strlen(e->err);
                ck_assert(have + dl < sizeof e->err);
                memcpy(e->err + have, d, dl);
                e->err[have + dl] = 0;
            } else {
                ck_assert(e->outlen + dl < sizeof e->out);
                memcpy(e->out + e->outlen, d, dl);
                e->outlen += dl;
                e->out[e->outlen] = 0;
            }
            free(d);
        }
        if ((x = json_object_get(ev, "end"))) {
            e->have_end_event = 1;
            e->exit_code = json_integer_value(json_object_get(x, "exitCode"));
            e->status = json_string_value(json_object_get(x, "status"));
        }
    }
    ck_assert_msg(e->end != NULL, "no end-of-stream frame");
}

static void events_free(struct events *e)
{
    for (int i = 0; i < e->n; i++)
        json_decref(e->msgs[i]);
    json_decref(e->end);
}

static const char *end_code(const struct events *e)
{
    return json_string_value(json_object_get(json_object_get(e->end, "error"), "code"));
}

static void run_cmd(int i, const char *cmd, struct events *e)
{
    json_t *req = json_pack("{s:{s:s,s:[s,s,s]}}", "process", "cmd", "/bin/sh", "args", "-l", "-c", cmd);
    char *s = json_dumps(req, JSON_COMPACT);
    struct resp r;
    read_response(stream_send(i, "process.Process/Start", s, NULL), &r);
    events_parse(&r, e);
    resp_free(&r);
    free(s);
    json_decref(req);
}

static json_t *body_json(const struct resp *r)
{
    json_t *j = json_loadb((const char *)r->body, r->len, 0, NULL);
    ck_assert_msg(j != NULL, "body is not JSON: %.200s", r->body);
    return j;
}

static void assert_cx_error(const struct resp *r, int status, const char *code)
{
    ck_assert_msg(r->status == status, "status %d, want %d: %.300s", r->status, status, r->body);
    json_t *j = body_json(r);
    ck_assert_str_eq(json_string_value(json_object_get(j, "code")), code);
    json_decref(j);
}

/* A unary call that must fail with this status and Connect code. */
static void expect_cx(int i, const char *method, const char *json, int status, const char *code)
{
    struct resp r;
    unary(i, method, json, &r);
    assert_cx_error(&r, status, code);
    resp_free(&r);
}

/* A unary call that must succeed (200). */
static void expect_ok(int i, const char *method, const char *json)
{
    struct resp r;
    unary(i, method, json, &r);
    ck_assert_msg(r.status == 200, "%s: status %d: %.300s", method, r.status, r.body);
    resp_free(&r);
}

/* ---- tests ---- */

START_TEST(health_and_auth)
{
    struct resp r;
    http("GET", "/health", sdk_headers(0, NULL, NULL), NULL, 0, 0, &r);
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);
    http("GET", "/health", sdk_headers(0, "wrong", NULL), NULL, 0, 0, &r);
    ck_assert_int_eq(r.status, 401);
    resp_free(&r);
    /* Sandbox two's token does not open sandbox one. */
    http("GET", "/health", sdk_headers(0, sbs[1].token, NULL), NULL, 0, 0, &r);
    ck_assert_int_eq(r.status, 401);
    resp_free(&r);
    http("GET", "/health", "E2b-Sandbox-Id: nope\r\nX-Access-Token: x\r\n", NULL, 0, 0, &r);
    ck_assert_int_eq(r.status, 502);
    resp_free(&r);
    http("GET", "/health", "E2b-Sandbox-Id: sbx-paused\r\nX-Access-Token: x\r\n", NULL, 0, 0, &r);
    ck_assert_int_eq(r.status, 502);
    resp_free(&r);
    http("GET", "/health", "X-Access-Token: x\r\n", NULL, 0, 0, &r);
    ck_assert_int_eq(r.status, 400);
    resp_free(&r);
    /* A wrong token on a Connect call: unauthenticated, unary and stream. */
    char hdrs[600];
    snprintf(hdrs, sizeof hdrs, "%s", sdk_headers(0, "wrong", "application/json"));
    http("POST", "/process.Process/List", hdrs, "{}", 2, 0, &r);
    assert_cx_error(&r, 401, "unauthenticated");
    resp_free(&r);
    read_response(stream_send(0, "process.Process/Start", "{\"process\":{\"cmd\":\"true\"}}", "wrong"), &r);
    ck_assert_int_eq(r.status, 401);
    resp_free(&r);
    snprintf(hdrs, sizeof hdrs, "E2b-Sandbox-Id: gone\r\nX-Access-Token: x\r\nContent-Type: application/json\r\n");
    http("POST", "/filesystem.Filesystem/Stat", hdrs, "{\"path\":\"/\"}", 12, 0, &r);
    assert_cx_error(&r, 502, "unavailable");
    resp_free(&r);
    ck_assert_int_eq(resolves, releases);
}
END_TEST

START_TEST(start_output_and_exit)
{
    struct events e;
    run_cmd(0, "echo hi; echo oops >&2; echo $SANDBOX_NAME", &e);
    ck_assert_uint_gt(e.pid, 0);
    ck_assert_msg(json_object_get(json_object_get(e.msgs[0], "event"), "start"), "first event is not start");
    ck_assert_str_eq(e.out, "hi\none\n");
    ck_assert_str_eq(e.err, "oops\n");
    ck_assert(e.have_end_event);
    ck_assert_int_eq(e.exit_code, 0);
    ck_assert_str_eq(e.status, "exit status 0");
    char *endj = json_dumps(e.end, JSON_COMPACT);
    ck_assert_str_eq(endj, "{}");
    free(endj);
    events_free(&e);

    run_cmd(1, "echo $SANDBOX_NAME; exit 3", &e);
    ck_assert_str_eq(e.out, "two\n");
    ck_assert_int_eq(e.exit_code, 3);
    ck_assert_str_eq(e.status, "exit status 3");
    json_t *end = json_object_get(json_object_get(e.msgs[e.n - 1], "event"), "end");
    ck_assert_str_eq(json_string_value(json_object_get(end, "error")), "exit status 3");
    ck_assert(json_is_true(json_object_get(end, "exited")));
    events_free(&e);

    /* A command that does not exist: the agent's shell-like 127. */
    run_cmd(0, "exec /nonexistent-binary", &e);
    ck_assert_int_eq(e.exit_code, 127);
    events_free(&e);

    /* envs and cwd of the request. */
    struct resp r;
    const char *req = "{\"process\":{\"cmd\":\"/bin/sh\",\"args\":[\"-c\",\"echo $A-$B; pwd\"],"
                      "\"envs\":{\"A\":\"x\",\"B\":\"y z\"},\"cwd\":\"/tmp\"},\"stdin\":false}";
    read_response(stream_send(0, "process.Process/Start", req, NULL), &r);
    events_parse(&r, &e);
    ck_assert_str_eq(e.out, "x-y z\n/tmp\n");
    events_free(&e);
    resp_free(&r);
}
END_TEST

struct bg {
    int sb;
    const char *req;
    struct resp r;
};

static void *bg_stream(void *arg)
{
    struct bg *b = arg;
    read_response(stream_send(b->sb, "process.Process/Start", b->req, NULL), &b->r);
    return NULL;
}

/* The pid of sandbox i's one running process with tag (or any), 0 if none. */
static uint32_t list_pid(int i, const char *tag)
{
    struct resp r;
    unary(i, "process.Process/List", "{}", &r);
    ck_assert_int_eq(r.status, 200);
    json_t *j = body_json(&r), *ps = json_object_get(j, "processes"), *p;
    size_t k;
    uint32_t pid = 0;
    ck_assert(json_is_array(ps));
    json_array_foreach(ps, k, p) {
        const char *t = json_string_value(json_object_get(p, "tag"));
        if (!tag || (t && strcmp(t, tag) == 0)) {
            pid = (uint32_t)json_integer_value(json_object_get(p, "pid"));
            ck_assert_str_eq(json_string_value(json_object_get(json_object_get(p, "config"), "cmd")), "/bin/sh");
        }
    }
    json_decref(j);
    resp_free(&r);
    return pid;
}

static uint32_t wait_pid(int i, const char *tag)
{
    for (int k = 0; k < 500; k++) {
        uint32_t pid = list_pid(i, tag);
        if (pid)
            return pid;
        usleep(10000);
    }
    ck_abort_msg("the process did not show in List");
    return 0;
}

START_TEST(kill_background_and_isolation)
{
    struct bg b = { .sb = 0, .req = "{\"process\":{\"cmd\":\"/bin/sh\",\"args\":[\"-c\",\"echo started; sleep 60\"]},"
                                    "\"tag\":\"bg\"}" };
    pthread_t t;
    pthread_create(&t, NULL, bg_stream, &b);
    uint32_t pid = wait_pid(0, "bg");
    /* Sandbox two sees nothing and cannot signal sandbox one's process. */
    ck_assert_uint_eq(list_pid(1, NULL), 0);
    char req[200];
    struct resp r;
    snprintf(req, sizeof req, "{\"process\":{\"pid\":%u},\"signal\":\"SIGNAL_SIGKILL\"}", pid);
    expect_cx(1, "process.Process/SendSignal", req, 404, "not_found");
    unary(0, "process.Process/SendSignal", req, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq((char *)r.body, "{}");
    resp_free(&r);
    pthread_join(t, NULL);
    struct events e;
    events_parse(&b.r, &e);
    ck_assert_uint_eq(e.pid, pid);
    ck_assert_str_eq(e.out, "started\n");
    ck_assert_int_eq(e.exit_code, -1);
    ck_assert_str_eq(e.status, "signal: killed");
    events_free(&e);
    resp_free(&b.r);
    /* Gone: a second kill is not_found (the SDK's kill() returns false). */
    expect_cx(0, "process.Process/SendSignal", req, 404, "not_found");
    ck_assert_uint_eq(list_pid(0, NULL), 0);

    /* Each sandbox runs on its own agent: the command's parent is that agent. */
    for (int i = 0; i < NSB; i++) {
        run_cmd(i, "echo $PPID", &e);
        ck_assert_int_eq(atoi(e.out), sbs[i].agent);
        events_free(&e);
    }
}
END_TEST

START_TEST(stdin_and_reattach)
{
    struct bg b = { .sb = 0, .req = "{\"process\":{\"cmd\":\"/bin/sh\",\"args\":[\"-c\",\"cat; echo done\"]},"
                                    "\"stdin\":true,\"tag\":\"cat\"}" };
    pthread_t t;
    pthread_create(&t, NULL, bg_stream, &b);
    uint32_t pid = wait_pid(0, "cat");
    char req[300];
    struct resp r;
    snprintf(req, sizeof req, "{\"process\":{\"pid\":%u},\"input\":{\"stdin\":\"aGVsbG8K\"}}", pid); /* hello\n */
    unary(0, "process.Process/SendInput", req, &r);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    snprintf(req, sizeof req, "{\"process\":{\"tag\":\"cat\"}}");
    unary(0, "process.Process/CloseStdin", req, &r);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    pthread_join(t, NULL);
    struct events e;
    events_parse(&b.r, &e);
    ck_assert_str_eq(e.out, "hello\ndone\n");
    ck_assert_int_eq(e.exit_code, 0);
    events_free(&e);
    resp_free(&b.r);

    /* Without stdin: SendInput is refused. Without a pty: Update with a
     * size is refused, without one it has nothing to do. */
    b.req = "{\"process\":{\"cmd\":\"/bin/sh\",\"args\":[\"-c\",\"sleep 3; echo late\"]},\"tag\":\"late\"}";
    int fd = stream_send(0, "process.Process/Start", b.req, NULL);
    pid = wait_pid(0, "late");
    snprintf(req, sizeof req, "{\"process\":{\"pid\":%u},\"input\":{\"stdin\":\"aGVsbG8K\"}}", pid);
    expect_cx(0, "process.Process/SendInput", req, 400, "failed_precondition");
    snprintf(req, sizeof req, "{\"process\":{\"pid\":%u},\"pty\":{\"size\":{\"cols\":80,\"rows\":24}}}", pid);
    expect_cx(0, "process.Process/Update", req, 400, "failed_precondition");
    snprintf(req, sizeof req, "{\"process\":{\"pid\":%u}}", pid);
    unary(0, "process.Process/Update", req, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq((char *)r.body, "{}");
    resp_free(&r);
    snprintf(req, sizeof req, "{\"process\":{\"pid\":%u},\"input\":{\"pty\":\"aGVsbG8K\"}}", pid);
    expect_cx(0, "process.Process/SendInput", req, 400, "failed_precondition");
    /* The first client goes away; once the janitor holds the process,
     * Connect still reattaches and gets the rest. */
    close(fd);
    usleep(1500 * 1000);
    snprintf(req, sizeof req, "{\"process\":{\"pid\":%u}}", pid);
    read_response(stream_send(0, "process.Process/Connect", req, NULL), &r);
    events_parse(&r, &e);
    ck_assert_uint_eq(e.pid, pid);
    ck_assert_str_eq(e.out, "late\n");
    ck_assert_int_eq(e.exit_code, 0);
    events_free(&e);
    resp_free(&r);
    snprintf(req, sizeof req, "{\"process\":{\"pid\":%u}}", pid);
    read_response(stream_send(0, "process.Process/Connect", req, NULL), &r);
    events_parse(&r, &e);
    ck_assert_str_eq(end_code(&e), "not_found");
    events_free(&e);
    resp_free(&r);
}
END_TEST

/* The SDK's pty.create / sendInput / resize / kill, as it sends them. */
START_TEST(pty_session)
{
    char script[1200], req[1200], path[300];
    snprintf(path, sizeof path, "%s/size1", tmpdir);
    snprintf(script, sizeof script,
             "test -t 0 && test -t 1 && echo TTY; echo T=$TERM; stty size; stty size > %s.tmp && mv %s.tmp %s; "
             "read l; echo GOT:$l; stty size; echo oops >&2", path, path, path);
    json_t *j = json_pack("{s:{s:s,s:[s,s],s:{s:s}},s:{s:{s:i,s:i}},s:s}", "process", "cmd", "/bin/sh",
                          "args", "-c", script, "envs", "TERM", "xterm-256color",
                          "pty", "size", "cols", 100, "rows", 30, "tag", "pty");
    char *js = json_dumps(j, JSON_COMPACT);
    struct bg b = { .sb = 0, .req = js };
    pthread_t t;
    pthread_create(&t, NULL, bg_stream, &b);
    uint32_t pid = wait_pid(0, "pty");
    /* Wait until it has read its first size, then resize and type. */
    struct stat sst;
    for (int k = 0; k < 500 && stat(path, &sst) < 0; k++)
        usleep(10000);
    ck_assert_int_eq(stat(path, &sst), 0);
    snprintf(req, sizeof req, "{\"process\":{\"pid\":%u},\"pty\":{\"size\":{\"cols\":0,\"rows\":40}}}", pid);
    expect_cx(0, "process.Process/Update", req, 400, "invalid_argument");
    snprintf(req, sizeof req, "{\"process\":{\"pid\":%u},\"pty\":{\"size\":{\"cols\":120,\"rows\":40}}}", pid);
    expect_ok(0, "process.Process/Update", req);
    /* stdin input and CloseStdin are for pipes: refused on a pty. */
    snprintf(req, sizeof req, "{\"process\":{\"pid\":%u},\"input\":{\"stdin\":\"aGVsbG8K\"}}", pid);
    expect_cx(0, "process.Process/SendInput", req, 400, "failed_precondition");
    snprintf(req, sizeof req, "{\"process\":{\"pid\":%u}}", pid);
    expect_cx(0, "process.Process/CloseStdin", req, 400, "failed_precondition");
    snprintf(req, sizeof req, "{\"process\":{\"pid\":%u},\"input\":{\"pty\":\"aGVsbG8K\"}}", pid); /* hello\n */
    expect_ok(0, "process.Process/SendInput", req);
    pthread_join(t, NULL);
    struct events e;
    events_parse(&b.r, &e);
    ck_assert_uint_eq(e.pid, pid);
    ck_assert_int_gt(e.pty_events, 0);
    ck_assert_int_eq(e.stdout_events, 0);
    ck_assert_str_eq(e.err, "");                    /* stderr is the terminal too */
    ck_assert_str_eq(e.out, "TTY\r\nT=xterm-256color\r\n30 100\r\nhello\r\nGOT:hello\r\n40 120\r\noops\r\n");
    ck_assert_int_eq(e.exit_code, 0);
    events_free(&e);
    resp_free(&b.r);
    free(js);
    json_decref(j);

    /* pty.kill: SIGKILL. The default size is 24 x 80 when none is given. */
    snprintf(req, sizeof req, "{\"process\":{\"cmd\":\"/bin/sh\",\"args\":[\"-c\",\"stty size; touch %s2; exec sleep 60\"]},"
             "\"pty\":{},\"tag\":\"pty2\"}", path);
    b.req = req;
    pthread_create(&t, NULL, bg_stream, &b);
    pid = wait_pid(0, "pty2");
    strcat(path, "2");
    for (int k = 0; k < 500 && stat(path, &sst) < 0; k++)
        usleep(10000);
    char kreq[200];
    snprintf(kreq, sizeof kreq, "{\"process\":{\"pid\":%u},\"signal\":\"SIGNAL_SIGKILL\"}", pid);
    expect_ok(0, "process.Process/SendSignal", kreq);
    pthread_join(t, NULL);
    events_parse(&b.r, &e);
    ck_assert_str_eq(e.out, "24 80\r\n");
    ck_assert_str_eq(e.status, "signal: killed");
    events_free(&e);
    resp_free(&b.r);
}
END_TEST

static void wait_gone(int i)
{
    for (int k = 0; k < 500 && list_pid(i, NULL); k++)
        usleep(10000);
    ck_assert_msg(list_pid(i, NULL) == 0, "a process that ended is still listed");
}

/* Connect-Timeout-Ms ends the stream and kills the process (as envd);
 * a process whose client went away runs on, and leaves the list when it
 * ends although no stream reads it. */
START_TEST(timeouts_and_detached)
{
    struct resp r;
    struct events e;
    read_response(stream_send_h(0, "process.Process/Start",
                                "{\"process\":{\"cmd\":\"/bin/sh\",\"args\":[\"-c\",\"sleep 30\"]}}", NULL,
                                "Connect-Timeout-Ms: 500\r\n"), &r);
    events_parse(&r, &e);
    ck_assert_msg(e.have_end_event ? strcmp(e.status, "signal: killed") == 0
                                   : strcmp(end_code(&e), "deadline_exceeded") == 0, "neither killed nor past its deadline");
    events_free(&e);
    resp_free(&r);
    wait_gone(0);

    int fd = stream_send(0, "process.Process/Start",
                         "{\"process\":{\"cmd\":\"/bin/sh\",\"args\":[\"-c\",\"yes | head -c 3000000; sleep 1\"]},\"tag\":\"d\"}",
                         NULL);
    wait_pid(0, "d");
    close(fd);
    wait_gone(0);
}
END_TEST

static uint8_t *pattern(size_t n)
{
    uint8_t *p = malloc(n);
    uint32_t x = 12345;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        p[i] = (uint8_t)(x >> 16);
    }
    return p;
}

static void check_download(int i, const char *path, const uint8_t *want, size_t n)
{
    char url[600];
    struct resp r;
    snprintf(url, sizeof url, "/files?path=%s", path);
    http("GET", url, sdk_headers(i, NULL, NULL), NULL, 0, 0, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.len, n);
    ck_assert(memcmp(r.body, want, n) == 0);
    resp_free(&r);
}

START_TEST(files_up_and_down)
{
    const size_t n = 1 << 20;
    uint8_t *data = pattern(n);
    char path[400], url[600], hdrs[800];
    struct resp r;
    /* multipart/form-data, chunked, as the SDK sends it; parents created. */
    snprintf(path, sizeof path, "%s/up/deep/multi.bin", tmpdir);
    const char *bnd = "----formdata-undici-0123456789";
    char pre[600];
    int pl = snprintf(pre, sizeof pre,
                      "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\n"
                      "Content-Type: application/octet-stream\r\n\r\n", bnd, path);
    char post[100];
    int ql = snprintf(post, sizeof post, "\r\n--%s--\r\n", bnd);
    size_t blen = (size_t)pl + n + (size_t)ql;
    uint8_t *body = malloc(blen);
    memcpy(body, pre, (size_t)pl);
    memcpy(body + pl, data, n);
    memcpy(body + pl + n, post, (size_t)ql);
    char ct[200];
    snprintf(ct, sizeof ct, "multipart/form-data; boundary=%s", bnd);
    snprintf(hdrs, sizeof hdrs, "%s", sdk_headers(0, NULL, ct));
    http("POST", "/files", hdrs, body, blen, 1, &r);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.body);
    json_t *j = body_json(&r);
    ck_assert_int_eq(json_array_size(j), 1);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(j, 0), "path")), path);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(j, 0), "name")), "multi.bin");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(j, 0), "type")), "file");
    json_decref(j);
    resp_free(&r);
    free(body);
    check_download(0, path, data, n);

    /* application/octet-stream with ?path= (envd 0.5.7), fixed length and chunked. */
    for (int chunked = 0; chunked < 2; chunked++) {
        snprintf(path, sizeof path, "%s/up/octet%d.bin", tmpdir, chunked);
        snprintf(url, sizeof url, "/files?path=%s", path);
        snprintf(hdrs, sizeof hdrs, "%s", sdk_headers(0, NULL, "application/octet-stream"));
        data[0] = (uint8_t)chunked;
        http("POST", url, hdrs, data, n, chunked, &r);
        ck_assert_msg(r.status == 200, "%d %s", r.status, r.body);
        j = body_json(&r);
        ck_assert_str_eq(json_string_value(json_object_get(json_array_get(j, 0), "path")), path);
        json_decref(j);
        resp_free(&r);
        check_download(0, path, data, n);
    }
    /* An empty file downloads as Content-Length: 0. */
    snprintf(path, sizeof path, "%s/up/empty", tmpdir);
    snprintf(url, sizeof url, "/files?path=%s", path);
    http("POST", url, hdrs, "", 0, 0, &r);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    http("GET", url, sdk_headers(0, NULL, NULL), NULL, 0, 0, &r);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.len, 0);
    ck_assert_ptr_nonnull(strcasestr(r.head, "Content-Length: 0"));
    resp_free(&r);
    /* Missing file: 404 with envd's JSON error; a directory: 400. */
    snprintf(url, sizeof url, "/files?path=%s/nothing-here", tmpdir);
    http("GET", url, sdk_headers(0, NULL, NULL), NULL, 0, 0, &r);
    ck_assert_int_eq(r.status, 404);
    j = body_json(&r);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "code")), 404);
    ck_assert(json_string_length(json_object_get(j, "message")) > 0);
    json_decref(j);
    resp_free(&r);
    snprintf(url, sizeof url, "/files?path=%s", tmpdir);
    http("GET", url, sdk_headers(0, NULL, NULL), NULL, 0, 0, &r);
    ck_assert_int_eq(r.status, 400);
    resp_free(&r);
    /* Bad uploads: no path for octet-stream, another type, a form without 'file'. */
    http("POST", "/files", hdrs, "x", 1, 0, &r);
    ck_assert_int_eq(r.status, 400);
    resp_free(&r);
    snprintf(hdrs, sizeof hdrs, "%s", sdk_headers(0, NULL, "text/plain"));
    http("POST", url, hdrs, "x", 1, 0, &r);
    ck_assert_int_eq(r.status, 415);
    resp_free(&r);
    snprintf(hdrs, sizeof hdrs, "%s", sdk_headers(0, NULL, ct));
    snprintf(pre, sizeof pre, "--%s\r\nContent-Disposition: form-data; name=\"other\"\r\n\r\nx\r\n--%s--\r\n", bnd, bnd);
    http("POST", "/files", hdrs, pre, strlen(pre), 0, &r);
    ck_assert_int_eq(r.status, 400);
    resp_free(&r);
    /* Two files in one form (the SDK's writeFiles), each part named by its path. */
    {
        char two[1200];
        snprintf(two, sizeof two,
                 "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s/up/one.txt\"\r\n\r\none\r\n"
                 "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s/up/two.txt\"\r\n\r\ntwo\r\n"
                 "--%s--\r\n", bnd, tmpdir, bnd, tmpdir, bnd);
        http("POST", "/files", hdrs, two, strlen(two), 1, &r);
        ck_assert_msg(r.status == 200, "%d %s", r.status, r.body);
        j = body_json(&r);
        ck_assert_int_eq(json_array_size(j), 2);
        ck_assert_str_eq(json_string_value(json_object_get(json_array_get(j, 1), "name")), "two.txt");
        json_decref(j);
        resp_free(&r);
        snprintf(path, sizeof path, "%s/up/one.txt", tmpdir);
        check_download(0, path, (const uint8_t *)"one", 3);
        snprintf(path, sizeof path, "%s/up/two.txt", tmpdir);
        check_download(0, path, (const uint8_t *)"two", 3);
    }
    /* A body cut before the closing boundary. */
    snprintf(pre, sizeof pre, "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s/up/cut\"\r\n\r\nabc",
             bnd, tmpdir);
    http("POST", "/files", hdrs, pre, strlen(pre), 1, &r);
    ck_assert_msg(r.status == 400, "%d %s", r.status, r.body);
    resp_free(&r);
    free(data);
}
END_TEST


/* POST body as application/octet-stream to path with Content-Encoding ce. */
static void gz_post(const char *path, const char *ce, const void *body, size_t blen, int chunked, struct resp *r)
{
    char url[600], hdrs[800];
    snprintf(url, sizeof url, "/files?path=%s", path);
    snprintf(hdrs, sizeof hdrs, "%sContent-Encoding: %s\r\n", sdk_headers(0, NULL, "application/octet-stream"), ce);
    http("POST", url, hdrs, body, blen, chunked, r);
}

static off_t size_of(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? st.st_size : -1;
}

START_TEST(files_gzip)
{
    const size_t n = 1 << 20;
    uint8_t *data = pattern(n);
    /* Half of it compressible, so the stream is not just stored blocks. */
    memset(data + n / 2, 'a', n / 4);
    size_t zn;
    uint8_t *z = gzip_of(data, n, 6, &zn);
    char path[400];
    struct resp r;
    /* Octet-stream (the SDK's files.write(..., {gzip: true})), fixed length and chunked. */
    for (int chunked = 0; chunked < 2; chunked++) {
        snprintf(path, sizeof path, "%s/gz/octet%d.bin", tmpdir, chunked);
        gz_post(path, chunked ? "GZIP" : "gzip", z, zn, chunked, &r);
        ck_assert_msg(r.status == 200, "%d %s", r.status, r.body);
        resp_free(&r);
        check_download(0, path, data, n);
    }
    /* Two members back to back decode to both (RFC 1952; Go's reader too). */
    {
        size_t an, bn;
        uint8_t *a = gzip_of("hello ", 6, 6, &an), *b = gzip_of("world", 5, 6, &bn);
        uint8_t *ab = malloc(an + bn);
        memcpy(ab, a, an);
        memcpy(ab + an, b, bn);
        snprintf(path, sizeof path, "%s/gz/two", tmpdir);
        gz_post(path, "gzip", ab, an + bn, 1, &r);
        ck_assert_msg(r.status == 200, "%d %s", r.status, r.body);
        resp_free(&r);
        check_download(0, path, (const uint8_t *)"hello world", 11);
        free(a);
        free(b);
        free(ab);
    }
    /* multipart/form-data sent gzip'd as a whole (E2B's envd decodes any body). */
    {
        const char *bnd = "----gz-boundary-42";
        char pre[600], post[100], ct[200], hdrs[800];
        snprintf(path, sizeof path, "%s/gz/multi.bin", tmpdir);
        int pl = snprintf(pre, sizeof pre, "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\n"
                          "Content-Type: application/octet-stream\r\n\r\n", bnd, path);
        int ql = snprintf(post, sizeof post, "\r\n--%s--\r\n", bnd);
        size_t blen = (size_t)pl + n + (size_t)ql, mn;
        uint8_t *body = malloc(blen);
        memcpy(body, pre, (size_t)pl);
        memcpy(body + pl, data, n);
        memcpy(body + pl + n, post, (size_t)ql);
        uint8_t *mz = gzip_of(body, blen, 6, &mn);
        snprintf(ct, sizeof ct, "multipart/form-data; boundary=%s", bnd);
        snprintf(hdrs, sizeof hdrs, "%sContent-Encoding: gzip\r\n", sdk_headers(0, NULL, ct));
        http("POST", "/files", hdrs, mz, mn, 1, &r);
        ck_assert_msg(r.status == 200, "%d %s", r.status, r.body);
        resp_free(&r);
        check_download(0, path, data, n);
        free(body);
        free(mz);
    }
    /* Malformed streams: 400 naming gzip; the file keeps at most what was decoded. */
    uint8_t *bad = malloc(zn + 16);
    struct { const char *what; size_t len; } cases[] = {
        { "bad header", zn }, { "truncated", zn - 100 }, { "trailing garbage", zn + 3 },
        { "crc mismatch", zn }, { "size mismatch", zn }, { "empty", 0 }, { "header only", 10 },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        memcpy(bad, z, zn);
        if (k == 0)
            bad[1] ^= 0xff;                  /* magic 1f 8b broken */
        else if (k == 2)
            memcpy(bad + zn, "xyz", 3);
        else if (k == 3)
            bad[zn - 8] ^= 1;                /* CRC-32 of the trailer */
        else if (k == 4)
            bad[zn - 4] ^= 1;                /* ISIZE of the trailer */
        for (int chunked = 0; chunked < 2; chunked++) {
            snprintf(path, sizeof path, "%s/gz/bad%zu-%d", tmpdir, k, chunked);
            gz_post(path, "gzip", cases[k].len ? (const void *)bad : (const void *)"", cases[k].len, chunked, &r);
            ck_assert_msg(r.status == 400, "%s: %d %s", cases[k].what, r.status, r.body);
            ck_assert_msg(strstr((char *)r.body, "gzip") != NULL, "%s: %s", cases[k].what, r.body);
            resp_free(&r);
            ck_assert(size_of(path) <= (off_t)n);
        }
    }
    free(bad);
    /* Other encodings: 415; identity is the plain upload. */
    snprintf(path, sizeof path, "%s/gz/br", tmpdir);
    gz_post(path, "br", "x", 1, 0, &r);
    ck_assert_msg(r.status == 415, "%d %s", r.status, r.body);
    ck_assert_ptr_nonnull(strstr((char *)r.body, "Content-Encoding"));
    resp_free(&r);
    ck_assert_int_eq(size_of(path), -1);
    gz_post(path, "identity", "x", 1, 0, &r);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    check_download(0, path, (const uint8_t *)"x", 1);
    free(z);

    /* The decoded size limit: 4 MiB here (1 GiB by default). Exactly the
     * limit passes; 16 MiB of zeros (a 16 KiB body) is refused with 413
     * and the file keeps at most the limit. */
    envd_stop(srv);
    max_inflate = 4 << 20;
    server_start(64 * 1024, 0);
    uint8_t *zeros = calloc(1, 16 << 20);
    z = gzip_of(zeros, 4 << 20, 6, &zn);
    snprintf(path, sizeof path, "%s/gz/at-limit", tmpdir);
    gz_post(path, "gzip", z, zn, 0, &r);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.body);
    resp_free(&r);
    ck_assert_int_eq(size_of(path), 4 << 20);
    free(z);
    z = gzip_of(zeros, 16 << 20, 6, &zn);
    ck_assert(zn < 64 * 1024);
    for (int chunked = 0; chunked < 2; chunked++) {
        snprintf(path, sizeof path, "%s/gz/bomb%d", tmpdir, chunked);
        gz_post(path, "gzip", z, zn, chunked, &r);
        ck_assert_msg(r.status == 413, "%d %s", r.status, r.body);
        ck_assert_ptr_nonnull(strstr((char *)r.body, "4194304"));
        resp_free(&r);
        ck_assert(size_of(path) <= 4 << 20);
    }
    free(z);
    free(zeros);
    free(data);
}
END_TEST

static json_t *entry_of(const struct resp *r)
{
    ck_assert_msg(r->status == 200, "%d %s", r->status, r->body);
    json_t *j = body_json(r), *e = json_incref(json_object_get(j, "entry"));
    json_decref(j);
    ck_assert(json_is_object(e));
    return e;
}

/* A WatchDir stream's messages (WatchDirResponse: no "event" wrapper, so
 * not events_parse) into msgs (at most max, owned by the caller); it must
 * end with the error code. Returns the count. */
static int watch_msgs(const struct resp *r, json_t **msgs, int max, const char *code)
{
    ck_assert_int_eq(r->status, 200);
    size_t off = 0;
    int got = 0;
    json_t *end = NULL;
    while (!end && off + 5 <= r->len) {
        uint32_t k = (uint32_t)r->body[off + 1] << 24 | (uint32_t)r->body[off + 2] << 16 |
                     (uint32_t)r->body[off + 3] << 8 | r->body[off + 4];
        ck_assert(off + 5 + k <= r->len);
        json_t *j = json_loadb((const char *)r->body + off + 5, k, 0, NULL);
        ck_assert(j != NULL);
        if (r->body[off] == CX_FLAG_END) {
            end = j;
        } else {
            ck_assert(got < max);
            msgs[got++] = j;
        }
        off += 5 + k;
    }
    ck_assert_msg(end != NULL, "no end-of-stream frame: %s", r->body);
    const char *c = json_string_value(json_object_get(json_object_get(end, "error"), "code"));
    ck_assert_msg(c && strcmp(c, code) == 0, "%s: %s", c ? c : "(none)", r->body);
    json_decref(end);
    return got;
}

START_TEST(filesystem_rpcs)
{
    char req[1200], a[400], b[400];
    struct resp r;
    snprintf(a, sizeof a, "%s/fs/a/b", tmpdir);
    snprintf(req, sizeof req, "{\"path\":\"%s\"}", a);
    unary(0, "filesystem.Filesystem/MakeDir", req, &r);
    json_t *e = entry_of(&r);
    ck_assert_str_eq(json_string_value(json_object_get(e, "type")), "FILE_TYPE_DIRECTORY");
    ck_assert_str_eq(json_string_value(json_object_get(e, "name")), "b");
    ck_assert_str_eq(json_string_value(json_object_get(e, "path")), a);
    ck_assert_uint_eq(json_integer_value(json_object_get(e, "mode")), (1u << 31) | 0755);
    ck_assert_str_eq(json_string_value(json_object_get(e, "permissions")), "drwxr-xr-x");
    ck_assert(json_is_string(json_object_get(e, "size")));
    ck_assert(json_is_string(json_object_get(e, "modifiedTime")));
    ck_assert(json_is_string(json_object_get(e, "owner")));
    json_decref(e);
    resp_free(&r);
    expect_cx(0, "filesystem.Filesystem/MakeDir", req, 409, "already_exists");
    /* A file in it (through the agent), then stat, list (depth 1 and 2). */
    snprintf(b, sizeof b, "%s/fs/a/b/f.txt", tmpdir);
    char url[600];
    snprintf(url, sizeof url, "/files?path=%s", b);
    http("POST", url, sdk_headers(0, NULL, "application/octet-stream"), "12345", 5, 0, &r);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    snprintf(req, sizeof req, "{\"path\":\"%s\"}", b);
    unary(0, "filesystem.Filesystem/Stat", req, &r);
    e = entry_of(&r);
    ck_assert_str_eq(json_string_value(json_object_get(e, "type")), "FILE_TYPE_FILE");
    ck_assert_str_eq(json_string_value(json_object_get(e, "size")), "5");
    ck_assert_str_eq(json_string_value(json_object_get(e, "permissions")), "-rw-r--r--");
    json_decref(e);
    resp_free(&r);
    for (int depth = 1; depth <= 2; depth++) {
        snprintf(req, sizeof req, "{\"path\":\"%s/fs/a\",\"depth\":%d}", tmpdir, depth);
        unary(0, "filesystem.Filesystem/ListDir", req, &r);
        ck_assert_int_eq(r.status, 200);
        json_t *j = body_json(&r), *ents = json_object_get(j, "entries");
        ck_assert_int_eq(json_array_size(ents), (size_t)depth);
        json_decref(j);
        resp_free(&r);
    }
    snprintf(req, sizeof req, "{\"path\":\"%s\",\"depth\":17}", tmpdir);
    expect_cx(0, "filesystem.Filesystem/ListDir", req, 400, "invalid_argument");
    snprintf(req, sizeof req, "{\"path\":\"%s/none\"}", tmpdir);
    expect_cx(0, "filesystem.Filesystem/ListDir", req, 404, "not_found");
    /* Move (into a new directory), then the old path is gone. */
    snprintf(req, sizeof req, "{\"source\":\"%s\",\"destination\":\"%s/fs/moved/g.txt\"}", b, tmpdir);
    unary(0, "filesystem.Filesystem/Move", req, &r);
    e = entry_of(&r);
    ck_assert_str_eq(json_string_value(json_object_get(e, "name")), "g.txt");
    json_decref(e);
    resp_free(&r);
    snprintf(req, sizeof req, "{\"path\":\"%s\"}", b);
    expect_cx(0, "filesystem.Filesystem/Stat", req, 404, "not_found");
    /* Remove a tree; removing it again is fine (os.RemoveAll). */
    snprintf(req, sizeof req, "{\"path\":\"%s/fs\"}", tmpdir);
    for (int k = 0; k < 2; k++) {
        unary(0, "filesystem.Filesystem/Remove", req, &r);
        ck_assert_msg(r.status == 200, "%d %s", r.status, r.body);
        resp_free(&r);
    }
    struct stat st;
    snprintf(a, sizeof a, "%s/fs", tmpdir);
    ck_assert_int_lt(stat(a, &st), 0);
    /* Polled watchers: unimplemented. WatchDir: the start, then a file
     * created once the answer's head came, until Connect-Timeout-Ms. */
    expect_cx(0, "filesystem.Filesystem/CreateWatcher", "{\"path\":\"/tmp\"}", 501, "unimplemented");
    char wd[300], body[400];
    snprintf(wd, sizeof wd, "%s/w", tmpdir);
    ck_assert_int_eq(mkdir(wd, 0755), 0);
    snprintf(body, sizeof body, "{\"path\":\"%s\",\"recursive\":true}", wd);
    int fd = stream_send_h(0, "filesystem.Filesystem/WatchDir", body, NULL, "Connect-Timeout-Ms: 1500\r\n");
    struct pollfd pf = { .fd = fd, .events = POLLIN };
    ck_assert_int_eq(poll(&pf, 1, 10000), 1);
    snprintf(a, sizeof a, "%s/new.txt", wd);
    FILE *f = fopen(a, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    read_response(fd, &r);
    json_t *m[16];
    int k = watch_msgs(&r, m, 16, "deadline_exceeded");
    ck_assert_int_ge(k, 2);
    ck_assert(json_object_get(m[0], "start") != NULL);
    json_t *fe = json_object_get(m[1], "filesystem");
    ck_assert_str_eq(json_string_value(json_object_get(fe, "name")), "new.txt");
    ck_assert_str_eq(json_string_value(json_object_get(fe, "type")), "EVENT_TYPE_CREATE");
    for (int i = 0; i < k; i++)
        json_decref(m[i]);
    resp_free(&r);
}
END_TEST

START_TEST(bad_requests)
{
    struct resp r;
    static const struct { const char *method, *body; int status; const char *code; } bad[] = {
        { "process.Process/List", "{not json", 400, "invalid_argument" },
        { "filesystem.Filesystem/Stat", "{\"path\":5}", 400, "invalid_argument" },
        { "process.Process/SendSignal", "{\"process\":{\"pid\":1},\"signal\":\"SIGNAL_SIGHUP\"}", 400,
          "invalid_argument" },
        { "process.Process/StreamInput", "{}", 501, "unimplemented" },
        { "process.Process/Nope", "{}", 404, "unimplemented" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unary(0, bad[i].method, bad[i].body, &r);
        assert_cx_error(&r, bad[i].status, bad[i].code);
        resp_free(&r);
    }
    http("GET", "/nope", sdk_headers(0, NULL, NULL), NULL, 0, 0, &r);
    ck_assert_int_eq(r.status, 404);
    resp_free(&r);
    http("GET", "/process.Process/List", sdk_headers(0, NULL, NULL), NULL, 0, 0, &r);
    ck_assert_int_eq(r.status, 405);
    resp_free(&r);
    http("POST", "/process.Process/List", sdk_headers(0, NULL, "text/plain"), "{}", 2, 0, &r);
    ck_assert_int_eq(r.status, 415);
    resp_free(&r);
    /* A stream whose body is not one envelope / not valid: 200 + error end. */
    struct events e;
    read_response(stream_send(0, "process.Process/Start", "{\"process\":{}}", NULL), &r);
    events_parse(&r, &e);
    ck_assert_str_eq(end_code(&e), "invalid_argument");
    ck_assert_int_eq(e.n, 0);
    events_free(&e);
    resp_free(&r);
    char hdrs[600];
    snprintf(hdrs, sizeof hdrs, "%s", sdk_headers(0, NULL, "application/connect+json"));
    http("POST", "/process.Process/Start", hdrs, "{}", 2, 0, &r);
    events_parse(&r, &e);
    ck_assert_str_eq(end_code(&e), "invalid_argument");
    events_free(&e);
    resp_free(&r);
    read_response(stream_send(0, "process.Process/Start",
                              "{\"process\":{\"cmd\":\"sh\"},\"pty\":{\"size\":{\"cols\":80,\"rows\":65536}}}", NULL), &r);
    events_parse(&r, &e);
    ck_assert_str_eq(end_code(&e), "invalid_argument");
    events_free(&e);
    resp_free(&r);
    /* Oversized bodies (the test server allows 64 KiB): by length, and chunked. */
    size_t big = 100 * 1024;
    char *body = malloc(big);
    memset(body, ' ', big);
    body[0] = '{';
    body[big - 1] = '}';
    snprintf(hdrs, sizeof hdrs, "%s", sdk_headers(0, NULL, "application/json"));
    for (int chunked = 0; chunked < 2; chunked++) {
        http("POST", "/process.Process/List", hdrs, body, big, chunked, &r);
        assert_cx_error(&r, 413, "invalid_argument");
        resp_free(&r);
    }
    free(body);
    /* The server still answers. */
    ck_assert_uint_eq(list_pid(0, NULL), 0);
}
END_TEST

/* A client that sends half a request and stalls, and a process stream that
 * runs on, do not hold up anyone else; forgetting a sandbox ends its
 * streams and kills its processes. */
START_TEST(slow_client_and_forget)
{
    int slow = tcp_connect();
    send_all(slow, "POST /process.Process/List HTTP/1.1\r\nHost: x\r\nContent-Le", 56);
    struct bg b = { .sb = 1, .req = "{\"process\":{\"cmd\":\"/bin/sh\",\"args\":[\"-c\",\"echo up; sleep 60\"]},"
                                    "\"tag\":\"long\"}" };
    pthread_t t;
    pthread_create(&t, NULL, bg_stream, &b);
    wait_pid(1, "long");
    struct events e;
    run_cmd(0, "echo fine", &e);
    ck_assert_str_eq(e.out, "fine\n");
    events_free(&e);
    envd_forget_sandbox(srv, sbs[1].id);
    pthread_join(t, NULL);
    events_parse(&b.r, &e);
    ck_assert_str_eq(e.out, "up\n");
    ck_assert(!e.have_end_event);
    ck_assert_str_eq(end_code(&e), "unavailable");
    events_free(&e);
    resp_free(&b.r);
    ck_assert_uint_eq(list_pid(1, NULL), 0);
    /* The sandbox itself still answers new calls (B decides whether it is gone). */
    run_cmd(1, "echo again", &e);
    ck_assert_str_eq(e.out, "again\n");
    events_free(&e);
    close(slow);
}
END_TEST

/* ---- a hostile guest agent ----
 * A fake agent on a Unix socket (hybrid 0) that speaks the frame format
 * (vmm/agent/agent_proto.h) badly on purpose; a server of its own with a
 * short op_timeout_ms. */

/* EVIL_OLD: an agent from before WATCH (ERROR TYPE "?" for it, as such an
 * agent answers a type it does not know); EVIL_WATCH_BAD: WATCH answered
 * OK, then an event whose name climbs out of the directory. */
enum evil_mode { EVIL_FLOOD, EVIL_SILENT, EVIL_LIST_BIG, EVIL_LIST_BAD, EVIL_OLD, EVIL_WATCH_BAD };
#define EVIL_BIG_N 6000u         /* x ~8 KiB of JSON each: over the 32 MiB budget */
static int evil_lfd = -1;
static enum evil_mode evil_mode;
static pthread_t evil_thread;

static int put_all(int fd, struct agent_buf *b)
{
    size_t off = 0;
    while (off < b->len) {
        ssize_t k = send(fd, b->p + off, b->len - off, MSG_NOSIGNAL);
        if (k <= 0)
            return -1;
        off += (size_t)k;
    }
    b->len = 0;
    return 0;
}

static void evil_entry(struct agent_buf *b, uint32_t id, const char *dir, const char *name, size_t pad)
{
    static struct agent_stat e;
    memset(&e, 0, sizeof e);
    e.type = AGENT_FT_FILE;
    e.mode = 0644;
    int n = snprintf(e.path, sizeof e.path, "%s/%s", dir, name);
    for (size_t i = 0; i < pad && (size_t)n + 1 < sizeof e.path; i++)
        e.path[n++] = 'x';
    e.path[n] = 0;
    strcpy(e.owner, "root");
    strcpy(e.group, "root");
    ck_assert_int_eq(agent_put_entry(b, AGENT_T_LIST_ENTRY, id, &e), 0);
}

static void *evil_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    struct agent_buf b = { 0 };
    struct agent_rx rx = { 0 };
    agent_put_u32(&b, AGENT_T_READY, 0, 1);
    if (put_all(fd, &b) < 0)
        goto out;
    for (;;) {
        uint8_t buf[65536];
        ssize_t k = recv(fd, buf, sizeof buf, 0);
        if (k <= 0 || agent_rx_push(&rx, buf, (size_t)k) < 0)
            goto out;
        struct agent_hdr h;
        const uint8_t *pl;
        while (agent_rx_next(&rx, &h, &pl, NULL) == 1) {
            if (evil_mode == EVIL_FLOOD && h.type == AGENT_T_EXEC) {
                static uint8_t chunk[60000];
                memset(chunk, 'o', sizeof chunk);
                for (;;) {               /* output, and never the PONG */
                    agent_put_frame(&b, AGENT_T_STDOUT, h.id, chunk, sizeof chunk);
                    if (put_all(fd, &b) < 0)
                        goto out;
                }
            }
            if (h.type == AGENT_T_WATCH && (evil_mode == EVIL_OLD || evil_mode == EVIL_WATCH_BAD)) {
                if (evil_mode == EVIL_OLD) {
                    agent_put_error(&b, h.id, AGENT_E_TYPE, 0, "?");
                } else {
                    agent_put_frame(&b, AGENT_T_OK, h.id, NULL, 0);
                    agent_put_frame(&b, AGENT_T_WATCH_EVENT, h.id, "\1\0\0\0../x", 8);
                }
                if (put_all(fd, &b) < 0)
                    goto out;
                continue;
            }
            if (h.type != AGENT_T_LIST || (evil_mode != EVIL_LIST_BIG && evil_mode != EVIL_LIST_BAD))
                continue;                /* EVIL_SILENT: never a word */
            char dir[256];
            snprintf(dir, sizeof dir, "%.*s", (int)(h.len - 4), (const char *)pl + 4);
            uint32_t n = 0;
            if (evil_mode == EVIL_LIST_BIG) {
                for (; n < EVIL_BIG_N; n++) {
                    char name[32];
                    snprintf(name, sizeof name, "%u-", n);
                    evil_entry(&b, h.id, dir, name, 3900);
                    if (put_all(fd, &b) < 0)
                        goto out;
                }
            } else {
                evil_entry(&b, h.id, dir, "ok", 0);
                evil_entry(&b, h.id, dir, "bad\xff\xfe", 0);
                n = 2;
            }
            agent_put_u32(&b, AGENT_T_LIST_END, h.id, n);
            if (put_all(fd, &b) < 0)
                goto out;
        }
    }
out:
    agent_buf_free(&b);
    agent_rx_free(&rx);
    close(fd);
    return NULL;
}

static void *evil_main(void *arg)
{
    (void)arg;
    for (;;) {
        int fd = accept(evil_lfd, NULL, NULL);
        if (fd < 0)
            return NULL;          /* closed by the teardown */
        pthread_t t;
        if (pthread_create(&t, NULL, evil_conn, (void *)(intptr_t)fd) != 0)
            close(fd);
        else
            pthread_detach(t);
    }
}

#define EVIL_OP_MS 800

static void evil_setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/moat-envd-test.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    snprintf(evil_sock, sizeof evil_sock, "%.80s/evil.sock", tmpdir);
    struct sockaddr_un su = { .sun_family = AF_UNIX };
    snprintf(su.sun_path, sizeof su.sun_path, "%s", evil_sock);
    evil_lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert(evil_lfd >= 0);
    ck_assert(bind(evil_lfd, (struct sockaddr *)&su, sizeof su) == 0);
    ck_assert(listen(evil_lfd, 16) == 0);
    ck_assert_int_eq(pthread_create(&evil_thread, NULL, evil_main, NULL), 0);
    server_start(0, EVIL_OP_MS);
}

static void evil_teardown(void)
{
    envd_stop(srv);
    srv = NULL;
    shutdown(evil_lfd, SHUT_RDWR);
    pthread_join(evil_thread, NULL);
    close(evil_lfd);
    tmpdir_remove();
    evil_sock[0] = 0;
}

static const char *evil_headers(const char *ctype)
{
    static char h[300];
    snprintf(h, sizeof h, "E2b-Sandbox-Id: sbx-evil\r\nX-Access-Token: t\r\nConnect-Protocol-Version: 1\r\n"
             "Content-Type: %s\r\n", ctype);
    return h;
}

static void evil_unary(const char *method, const char *json, struct resp *r)
{
    char path[128];
    snprintf(path, sizeof path, "/%s", method);
    http("POST", path, evil_headers("application/json"), json, strlen(json), 0, r);
}

static void evil_start(struct events *e)
{
    const char *json = "{\"process\":{\"cmd\":\"/bin/true\"}}";
    size_t n;
    uint8_t *b = envelope(json, &n);
    struct resp r;
    read_response(request_send("POST", "/process.Process/Start", evil_headers("application/connect+json"), b, n, 0),
                  &r);
    free(b);
    events_parse(&r, e);
    resp_free(&r);
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The limits, not the deadline, must stop the cases below, even on a busy
 * host: a server with a longer op_timeout_ms. */
static void evil_long_deadline(void)
{
    envd_stop(srv);
    server_start(0, 20000);
}

/* Output and never the PONG: serve holds at most 4 MiB of it, then ends
 * the stream (no start event: the process was never confirmed). */
START_TEST(evil_start_floods_output)
{
    evil_mode = EVIL_FLOOD;
    evil_long_deadline();
    struct events e;
    evil_start(&e);
    ck_assert_str_eq(end_code(&e), "resource_exhausted");
    ck_assert_uint_eq(e.pid, 0);
    ck_assert_uint_eq(e.outlen, 0);
    events_free(&e);
}
END_TEST

/* Silence: every call ends at op_timeout_ms, not never. */
START_TEST(evil_silent_agent)
{
    evil_mode = EVIL_SILENT;
    struct events e;
    int64_t t0 = mono_ms();
    evil_start(&e);
    ck_assert_str_eq(end_code(&e), "deadline_exceeded");
    events_free(&e);
    const char *calls[][2] = {
        { "filesystem.Filesystem/Stat", "{\"path\":\"/a\"}" },
        { "filesystem.Filesystem/ListDir", "{\"path\":\"/a\",\"depth\":1}" },
        { "filesystem.Filesystem/Remove", "{\"path\":\"/a\"}" },
        { "filesystem.Filesystem/Move", "{\"source\":\"/a\",\"destination\":\"/b\"}" },
    };
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        struct resp r;
        evil_unary(calls[i][0], calls[i][1], &r);
        assert_cx_error(&r, 504, "deadline_exceeded");
        resp_free(&r);
    }
    int64_t dt = mono_ms() - t0;
    ck_assert_msg(dt < 5 * EVIL_OP_MS + 4000, "5 calls took %lld ms", (long long)dt);
}
END_TEST

/* ListDir of /d against the fake in mode m: it fails with status/code. */
static void evil_list(enum evil_mode m, int status, const char *code, struct resp *r)
{
    evil_mode = m;
    evil_long_deadline();
    evil_unary("filesystem.Filesystem/ListDir", "{\"path\":\"/d\",\"depth\":1}", r);
    assert_cx_error(r, status, code);
}

/* A listing past the JSON budget is refused, not built. */
START_TEST(evil_list_too_big)
{
    struct resp r;
    evil_list(EVIL_LIST_BIG, 429, "resource_exhausted", &r);
    resp_free(&r);
}
END_TEST

/* An entry JSON cannot carry fails the listing (not left out silently). */
START_TEST(evil_list_not_utf8)
{
    struct resp r;
    evil_list(EVIL_LIST_BAD, 500, "internal", &r);
    ck_assert_msg(strstr((const char *)r.body, "bad\\\\xff\\\\xfe"), "%s", r.body);
    resp_free(&r);
}
END_TEST

/* WatchDir against the fake in mode m: the stream ends with code, after
 * msgs messages, the first the start. */
static void evil_watch(enum evil_mode m, const char *code, int msgs)
{
    evil_mode = m;
    size_t n;
    uint8_t *b = envelope("{\"path\":\"/d\",\"recursive\":true}", &n);
    struct resp r;
    read_response(request_send("POST", "/filesystem.Filesystem/WatchDir", evil_headers("application/connect+json"),
                               b, n, 0), &r);
    free(b);
    json_t *got[8];
    int k = watch_msgs(&r, got, 8, code);
    ck_assert_int_eq(k, msgs);
    if (k)
        ck_assert(json_object_get(got[0], "start") != NULL);
    for (int i = 0; i < k; i++)
        json_decref(got[i]);
    resp_free(&r);
}

/* A template's agent from before WATCH: unimplemented, at once. */
START_TEST(evil_watch_old_agent)
{
    int64_t t0 = mono_ms();
    evil_watch(EVIL_OLD, "unimplemented", 0);
    ck_assert_int_lt(mono_ms() - t0, EVIL_OP_MS);
}
END_TEST

/* A malformed event ends the stream; silence ends it at the deadline. */
START_TEST(evil_watch_bad_and_silent)
{
    evil_watch(EVIL_WATCH_BAD, "internal", 1);
    evil_watch(EVIL_SILENT, "deadline_exceeded", 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("serve_envd");
    TCase *tc = tcase_create("envd");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, health_and_auth);
    tcase_add_test(tc, start_output_and_exit);
    tcase_add_test(tc, kill_background_and_isolation);
    tcase_add_test(tc, stdin_and_reattach);
    tcase_add_test(tc, pty_session);
    tcase_add_test(tc, timeouts_and_detached);
    tcase_add_test(tc, files_up_and_down);
    tcase_add_test(tc, files_gzip);
    tcase_add_test(tc, filesystem_rpcs);
    tcase_add_test(tc, bad_requests);
    tcase_add_test(tc, slow_client_and_forget);
    suite_add_tcase(s, tc);
    TCase *ev = tcase_create("hostile agent");
    tcase_add_checked_fixture(ev, evil_setup, evil_teardown);
    tcase_set_timeout(ev, 60);
    tcase_add_test(ev, evil_start_floods_output);
    tcase_add_test(ev, evil_silent_agent);
    tcase_add_test(ev, evil_list_too_big);
    tcase_add_test(ev, evil_list_not_utf8);
    tcase_add_test(ev, evil_watch_old_agent);
    tcase_add_test(ev, evil_watch_bad_and_silent);
    suite_add_tcase(s, ev);
    return s;
}

int main(void)
{
    agent_bin = getenv("MOAT_AGENT") ? getenv("MOAT_AGENT") : "build/guest/agent";
    if (access(agent_bin, X_OK) != 0) {
        printf("SKIPPED: serve_envd: no guest agent at %s (make build/guest/agent)\n", agent_bin);
        return 0;
    }
    signal(SIGPIPE, SIG_IGN);
    SRunner *sr = srunner_create(suite());
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
