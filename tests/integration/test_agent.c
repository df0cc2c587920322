/* The guest agent (guest/agent/agent.c) and `moat exec` / `moat cp`, on the
 * host: no KVM or vsock needed. Each test starts build/guest/agent (static,
 * but it runs fine on the host) with --unix in a temporary directory and
 * drives it with `moat exec --unix` / `moat cp --unix`, with raw frames
 * (vmm/agent/agent_proto.c is compiled in) for what the CLI cannot send,
 * and with vmm/agent/agent_client.c (also compiled in) for stat, list,
 * rename and remove.
 *
 * Env: MOAT_BIN (default build/moat), MOAT_AGENT (default build/guest/agent).
 * Run: make build/tests/test_agent && build/tests/test_agent */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "vmm/agent/agent_client.h"
#include "vmm/agent/agent_proto.h"

static const char *moat_bin, *agent_bin;
static char tmpdir[256], sock_path[300];
static pid_t agent_pid;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int connect_raw(void)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (strlen(sock_path) >= sizeof sa.sun_path)
        return -1;
    memcpy(sa.sun_path, sock_path, strlen(sock_path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void agent_start(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/moat-agent-test.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    snprintf(sock_path, sizeof sock_path, "%s/agent.sock", tmpdir);
    agent_pid = fork();
    ck_assert_int_ge(agent_pid, 0);
    if (agent_pid == 0) {
        execl(agent_bin, agent_bin, "--unix", sock_path, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 200; i++) {
        int fd = connect_raw();
        if (fd >= 0) {
            close(fd);
            return;
        }
        usleep(10000);
    }
    ck_abort_msg("agent %s did not start listening on %s", agent_bin, sock_path);
}

/* The agent must still be running (it never exits on bad input). */
static void agent_alive(void)
{
    int st;
    ck_assert_msg(waitpid(agent_pid, &st, WNOHANG) == 0, "the agent exited");
}

static void agent_stop(void)
{
    if (agent_pid > 0) {
        kill(agent_pid, SIGKILL);
        waitpid(agent_pid, NULL, 0);
    }
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", tmpdir);
}

/* Runs `moat exec --unix SOCK ARGS` through sh; captures stdout (up to
 * cap bytes) and returns the exit status. */
static int moat_exec(const char *args, char *out, size_t cap)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s exec --unix '%s' %s", moat_bin, sock_path, args);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    size_t n = 0;
    if (out) {
        n = fread(out, 1, cap - 1, f);
        out[n] = 0;
    } else {
        char tmp[4096];
        while (fread(tmp, 1, sizeof tmp, f) > 0)
            ;
    }
    int st = pclose(f);
    ck_assert(WIFEXITED(st));
    return WEXITSTATUS(st);
}

__attribute__((format(printf, 1, 2)))
static int sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- raw frames ----------------------------------------------------- */

struct raw {
    int fd;
    struct agent_rx rx;
};

static void raw_open(struct raw *r)
{
    memset(r, 0, sizeof *r);
    r->fd = connect_raw();
    ck_assert_int_ge(r->fd, 0);
}

static void raw_send(struct raw *r, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t k = send(r->fd, b, n, MSG_NOSIGNAL);
        ck_assert_int_gt(k, 0);
        b += k;
        n -= (size_t)k;
    }
}

static void raw_frame(struct raw *r, uint32_t type, uint32_t id, const void *p, size_t n)
{
    struct agent_buf b = { 0 };
    ck_assert_int_eq(agent_put_frame(&b, type, id, p, n), 0);
    raw_send(r, b.p, b.len);
    agent_buf_free(&b);
}

/* Next frame; returns 0, or -1 on EOF. Payload copied to pl (cap bytes). */
static int raw_recv(struct raw *r, struct agent_hdr *h, uint8_t *pl, size_t cap)
{
    for (;;) {
        const uint8_t *p;
        enum agent_err e;
        int k = agent_rx_next(&r->rx, h, &p, &e);
        ck_assert_int_ge(k, 0);
        if (k == 1) {
            ck_assert_uint_le(h->len, cap);
            memcpy(pl, p, h->len);
            return 0;
        }
        uint8_t buf[65536];
        ssize_t n = recv(r->fd, buf, sizeof buf, 0);
        if (n <= 0)
            return -1;
        ck_assert_int_eq(agent_rx_push(&r->rx, buf, (size_t)n), 0);
    }
}

static uint8_t rbuf[AGENT_MAX_PAYLOAD];

static void raw_expect(struct raw *r, uint32_t type, uint32_t id)
{
    struct agent_hdr h;
    ck_assert_int_eq(raw_recv(r, &h, rbuf, sizeof rbuf), 0);
    ck_assert_msg(h.type == type && h.id == id, "got %s id %u, wanted %s id %u",
                  agent_type_name(h.type), h.id, agent_type_name(type), id);
}

/* An ERROR with code for id; returns its errno. */
static uint32_t raw_expect_error(struct raw *r, uint32_t id, enum agent_err code)
{
    struct agent_hdr h;
    struct agent_error er;
    ck_assert_int_eq(raw_recv(r, &h, rbuf, sizeof rbuf), 0);
    ck_assert_msg(h.type == AGENT_T_ERROR, "got %s, wanted ERROR", agent_type_name(h.type));
    ck_assert_uint_eq(h.id, id);
    ck_assert_int_eq(agent_error_decode(rbuf, h.len, &er, NULL), 0);
    ck_assert_uint_eq(er.code, code);
    return er.sys_errno;
}

/* An ERROR SYS with the given errno for id. */
static void raw_expect_sys(struct raw *r, uint32_t id, int eno)
{
    ck_assert_int_eq(raw_expect_error(r, id, AGENT_E_SYS), eno);
}

static void raw_close(struct raw *r)
{
    close(r->fd);
    agent_rx_free(&r->rx);
}

static void raw_ping(struct raw *r, uint32_t id)
{
    raw_frame(r, AGENT_T_PING, id, "ping", 4);
    raw_expect(r, AGENT_T_PONG, id);
    ck_assert_int_eq(memcmp(rbuf, "ping", 4), 0);
}

/* ---- tests ---------------------------------------------------------- */

START_TEST(output_and_exit_codes)
{
    char out[4096];
    ck_assert_int_eq(moat_exec("-- sh -c 'for i in 1 2 3; do echo line$i; done; echo e >&2' 2>/dev/null",
                               out, sizeof out), 0);
    ck_assert_str_eq(out, "line1\nline2\nline3\n");
    ck_assert_int_eq(moat_exec("-- sh -c 'echo only-err >&2' 2>&1 >/dev/null", out, sizeof out), 0);
    ck_assert_str_eq(out, "only-err\n");
    ck_assert_int_eq(moat_exec("-- sh -c 'exit 3'", NULL, 0), 3);
    ck_assert_int_eq(moat_exec("-- sh -c 'exit 255'", NULL, 0), 255);
    ck_assert_int_eq(moat_exec("-- false", NULL, 0), 1);
    ck_assert_int_eq(moat_exec("-- /no/such/cmd 2>/dev/null", NULL, 0), 127);
    ck_assert_int_eq(moat_exec("-e A=1 -e B=two -w / -- sh -c 'echo $A $B $(pwd)'", out, sizeof out), 0);
    ck_assert_str_eq(out, "1 two /\n");
    /* Large output arrives whole. */
    ck_assert_int_eq(moat_exec("-- sh -c 'head -c 5000000 /dev/zero' | wc -c", out, sizeof out), 0);
    ck_assert_int_eq(atoi(out), 5000000);
    agent_alive();
}
END_TEST

START_TEST(streaming)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s exec --unix '%s' -- sh -c 'echo first; sleep 2; echo second'",
             moat_bin, sock_path);
    double t0 = now_s();
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    char line[128];
    ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
    double t1 = now_s();
    ck_assert_str_eq(line, "first\n");
    ck_assert_msg(t1 - t0 < 1.5, "first line took %.2f s: not streamed", t1 - t0);
    ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
    ck_assert_str_eq(line, "second\n");
    ck_assert_int_eq(pclose(f), 0);
    ck_assert(now_s() - t0 >= 1.9);
}
END_TEST

START_TEST(signals)
{
    ck_assert_int_eq(moat_exec("-- sh -c 'kill -TERM $$'", NULL, 0), 128 + SIGTERM);
    ck_assert_int_eq(moat_exec("-- sh -c 'kill -KILL $$'", NULL, 0), 128 + SIGKILL);
    ck_assert_int_eq(moat_exec("-- sh -c 'kill -INT $$; sleep 5'", NULL, 0), 128 + SIGINT);
    agent_alive();
}
END_TEST

START_TEST(timeout_kill)
{
    double t0 = now_s();
    ck_assert_int_eq(moat_exec("--timeout 0.5 -- sh -c 'sleep 30; echo no' 2>/dev/null", NULL, 0),
                     128 + SIGKILL);
    double dt = now_s() - t0;
    ck_assert_msg(dt >= 0.45 && dt < 5, "timeout took %.2f s", dt);
    /* A command that finishes first is not affected. */
    ck_assert_int_eq(moat_exec("--timeout 5 -- true", NULL, 0), 0);
}
END_TEST

START_TEST(concurrent_execs)
{
    enum { N = 20 };
    FILE *f[N];
    char cmd[1024];
    double t0 = now_s();
    for (int i = 0; i < N; i++) {
        snprintf(cmd, sizeof cmd, "%s exec --unix '%s' -- sh -c 'sleep 1; echo job%d; exit %d'",
                 moat_bin, sock_path, i, i);
        f[i] = popen(cmd, "r");
        ck_assert_ptr_nonnull(f[i]);
    }
    for (int i = 0; i < N; i++) {
        char line[64] = "", want[64];
        ck_assert_ptr_nonnull(fgets(line, sizeof line, f[i]));
        snprintf(want, sizeof want, "job%d\n", i);
        ck_assert_str_eq(line, want);
        int st = pclose(f[i]);
        ck_assert(WIFEXITED(st));
        ck_assert_int_eq(WEXITSTATUS(st), i);
    }
    double dt = now_s() - t0;
    ck_assert_msg(dt < 8, "%d one-second execs took %.1f s: not concurrent", N, dt);
    agent_alive();
}
END_TEST

START_TEST(concurrent_execs_one_connection)
{
    struct raw r;
    struct agent_buf b = { 0 };
    char *argv[] = { "sh", "-c", "sleep 0.5; echo x", NULL };
    struct agent_exec e = { .argc = 3, .argv = argv, .cwd = "" };
    raw_open(&r);
    raw_expect(&r, AGENT_T_READY, 0);
    for (uint32_t id = 1; id <= 10; id++)
        ck_assert_int_eq(agent_put_exec(&b, id, &e), 0);
    ck_assert_int_eq(agent_put_exec(&b, 3, &e), 0);     /* duplicate id */
    raw_send(&r, b.p, b.len);
    agent_buf_free(&b);
    int exits = 0, outs = 0, dup_errors = 0;
    while (exits < 10) {
        struct agent_hdr h;
        ck_assert_int_eq(raw_recv(&r, &h, rbuf, sizeof rbuf), 0);
        ck_assert(h.id >= 1 && h.id <= 10);
        if (h.type == AGENT_T_EXIT)
            exits++;
        else if (h.type == AGENT_T_STDOUT)
            outs++;
        else if (h.type == AGENT_T_ERROR && h.id == 3)
            dup_errors++;
        else
            ck_abort_msg("unexpected %s", agent_type_name(h.type));
    }
    ck_assert_int_eq(outs, 10);
    ck_assert_int_eq(dup_errors, 1);
    raw_close(&r);
}
END_TEST

static uint64_t file_hash(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    uint64_t h = 1469598103934665603ull;
    int c;
    *len = 0;
    while ((c = fgetc(f)) != EOF) {
        h = (h ^ (uint64_t)c) * 1099511628211ull;
        (*len)++;
    }
    fclose(f);
    return h;
}

START_TEST(file_round_trip)
{
    char src[400], remote[400], back[400], cmd[2048];
    snprintf(src, sizeof src, "%s/src.bin", tmpdir);
    snprintf(remote, sizeof remote, "%s/remote.bin", tmpdir);
    snprintf(back, sizeof back, "%s/back.bin", tmpdir);
    ck_assert_int_eq(sh("head -c 3000001 /dev/urandom > '%s' && chmod 640 '%s'", src, src), 0);

    snprintf(cmd, sizeof cmd, "%s cp --unix '%s' '%s' ':%s'", moat_bin, sock_path, src, remote);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s cp --unix '%s' ':%s' '%s'", moat_bin, sock_path, remote, back);
    ck_assert_int_eq(system(cmd), 0);
    size_t l1, l2, l3;
    uint64_t h1 = file_hash(src, &l1), h2 = file_hash(remote, &l2), h3 = file_hash(back, &l3);
    ck_assert_uint_eq(l1, 3000001);
    ck_assert_uint_eq(l2, l1);
    ck_assert_uint_eq(l3, l1);
    ck_assert_uint_eq(h2, h1);
    ck_assert_uint_eq(h3, h1);
    struct stat st;
    ck_assert_int_eq(stat(remote, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0640);
    ck_assert_int_eq(stat(back, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0640);

    /* Overwrite with a smaller file: truncated, not merged. */
    ck_assert_int_eq(sh("printf small > '%s'%s", src, ""), 0);
    snprintf(cmd, sizeof cmd, "%s cp --unix '%s' '%s' ':%s'", moat_bin, sock_path, src, remote);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_eq(stat(remote, &st), 0);
    ck_assert_int_eq(st.st_size, 5);
    /* Empty file. */
    ck_assert_int_eq(sh(": > '%s'%s", src, ""), 0);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_eq(stat(remote, &st), 0);
    ck_assert_int_eq(st.st_size, 0);

    /* Errors: missing remote file, remote directory, bad usage. */
    snprintf(cmd, sizeof cmd, "%s cp --unix '%s' ':%s/nope' '%s' 2>/dev/null", moat_bin, sock_path,
             tmpdir, back);
    ck_assert_int_eq(WEXITSTATUS(system(cmd)), 1);
    snprintf(cmd, sizeof cmd, "%s cp --unix '%s' ':%s' '%s' 2>/dev/null", moat_bin, sock_path,
             tmpdir, back);
    ck_assert_int_eq(WEXITSTATUS(system(cmd)), 1);
    snprintf(cmd, sizeof cmd, "%s cp --unix '%s' '%s' '%s' 2>/dev/null", moat_bin, sock_path, src,
             back);
    ck_assert_int_eq(WEXITSTATUS(system(cmd)), 2);
    agent_alive();
}
END_TEST

START_TEST(mkdir_raw)
{
    struct raw r;
    struct agent_buf b = { 0 };
    char path[400];
    struct stat st;
    raw_open(&r);
    raw_expect(&r, AGENT_T_READY, 0);
    snprintf(path, sizeof path, "%s/a/b/c", tmpdir);
    ck_assert_int_eq(agent_put_mkdir(&b, 5, 0750, AGENT_MKDIR_PARENTS, path), 0);
    raw_send(&r, b.p, b.len);
    b.len = 0;
    raw_expect(&r, AGENT_T_OK, 5);
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert(S_ISDIR(st.st_mode));
    /* -p on an existing directory: fine; without -p: EEXIST. */
    ck_assert_int_eq(agent_put_mkdir(&b, 6, 0750, AGENT_MKDIR_PARENTS, path), 0);
    ck_assert_int_eq(agent_put_mkdir(&b, 7, 0750, 0, path), 0);
    raw_send(&r, b.p, b.len);
    agent_buf_free(&b);
    raw_expect(&r, AGENT_T_OK, 6);
    raw_expect_sys(&r, 7, EEXIST);
    raw_close(&r);
}
END_TEST

START_TEST(bad_frames_connection_continues)
{
    struct raw r;
    raw_open(&r);
    raw_expect(&r, AGENT_T_READY, 0);
    raw_ping(&r, 1);
    raw_frame(&r, 999, 2, "x", 1);                          /* unknown type */
    raw_expect_error(&r, 2, AGENT_E_TYPE);
    raw_frame(&r, AGENT_T_STDOUT, 3, "x", 1);               /* wrong direction */
    raw_expect_error(&r, 3, AGENT_E_TYPE);
    raw_frame(&r, AGENT_T_EXEC, 4, "\1\2\3", 3);            /* short exec */
    raw_expect_error(&r, 4, AGENT_E_SHORT);
    uint8_t ex[24] = { 0 };
    ex[8] = 1;                                              /* argc 1, empty argv[0] */
    raw_frame(&r, AGENT_T_EXEC, 5, ex, sizeof ex);
    raw_expect_error(&r, 5, AGENT_E_PAYLOAD);
    raw_frame(&r, AGENT_T_KILL, 6, "\x09\0\0\0", 4);        /* kill unknown id */
    raw_expect_error(&r, 6, AGENT_E_ID);
    raw_frame(&r, AGENT_T_STDIN, 7, "abc", 3);              /* stdin unknown id */
    raw_expect_error(&r, 7, AGENT_E_ID);
    raw_frame(&r, AGENT_T_FILE_WRITE, 8, "\0\0\0", 3);      /* short fwrite */
    raw_expect_error(&r, 8, AGENT_E_SHORT);
    raw_frame(&r, AGENT_T_FILE_READ, 9, "", 0);             /* empty path */
    raw_expect_error(&r, 9, AGENT_E_PAYLOAD);
    raw_frame(&r, AGENT_T_MKDIR, 10, "\0\0", 2);            /* short mkdir */
    raw_expect_error(&r, 10, AGENT_E_SHORT);
    static uint8_t big[100];
    raw_frame(&r, AGENT_T_PING, 11, big, sizeof big);       /* ping too long */
    raw_expect_error(&r, 11, AGENT_E_PAYLOAD);
    raw_ping(&r, 12);                                       /* still talking */
    raw_close(&r);
    agent_alive();
}
END_TEST

START_TEST(oversized_and_bad_magic_close)
{
    struct raw r;
    uint8_t h[AGENT_HDR_SIZE];
    struct agent_hdr hd;

    raw_open(&r);
    raw_expect(&r, AGENT_T_READY, 0);
    agent_hdr_encode(h, AGENT_T_STDIN, 1, AGENT_MAX_PAYLOAD + 1);
    raw_send(&r, h, sizeof h);
    raw_expect_error(&r, 0, AGENT_E_TOOBIG);
    ck_assert_int_eq(raw_recv(&r, &hd, rbuf, sizeof rbuf), -1);     /* closed */
    raw_close(&r);

    raw_open(&r);
    raw_expect(&r, AGENT_T_READY, 0);
    raw_send(&r, "GET / HTTP/1.0\r\n\r\n", 18);
    raw_expect_error(&r, 0, AGENT_E_MAGIC);
    ck_assert_int_eq(raw_recv(&r, &hd, rbuf, sizeof rbuf), -1);
    raw_close(&r);

    /* Junk of every kind, then a hang-up mid-frame. */
    for (int k = 0; k < 20; k++) {
        raw_open(&r);
        uint8_t junk[300];
        for (size_t i = 0; i < sizeof junk; i++)
            junk[i] = (uint8_t)(rand() >> 7);
        if (k & 1)
            agent_hdr_encode(junk, (uint32_t)k, 1, 200 + (uint32_t)k * 1000);
        raw_send(&r, junk, sizeof junk);
        raw_close(&r);
    }
    agent_alive();
    char out[64];
    ck_assert_int_eq(moat_exec("-- echo alive", out, sizeof out), 0);
    ck_assert_str_eq(out, "alive\n");
}
END_TEST

START_TEST(stdin_forwarding)
{
    char cmd[1024], out[256];
    snprintf(cmd, sizeof cmd, "echo hello | %s exec --unix '%s' -i -- tr a-z A-Z", moat_bin,
             sock_path);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    ck_assert_int_eq(pclose(f), 0);
    ck_assert_str_eq(out, "HELLO\n");
    /* 4 MB through cat and back, more than any buffer on the way. */
    snprintf(cmd, sizeof cmd, "head -c 4000000 /dev/zero | %s exec --unix '%s' -i -- cat | wc -c",
             moat_bin, sock_path);
    f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    ck_assert_int_eq(pclose(f), 0);
    ck_assert_int_eq(atoi(out), 4000000);
    /* A process that does not read its stdin for a while: the agent holds
     * back (it stops reading the connection) instead of failing. */
    snprintf(cmd, sizeof cmd,
             "head -c 12000000 /dev/zero | %s exec --unix '%s' -i -- sh -c 'sleep 1; wc -c'",
             moat_bin, sock_path);
    f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    ck_assert_int_eq(pclose(f), 0);
    ck_assert_int_eq(atoi(out), 12000000);
    /* Without -i the command reads /dev/null. */
    ck_assert_int_eq(moat_exec("-- sh -c 'cat; echo done' < /dev/zero", out, sizeof out), 0);
    ck_assert_str_eq(out, "done\n");
}
END_TEST

START_TEST(kill_request_and_disconnect)
{
    struct raw r;
    char *argv[] = { "sleep", "30", NULL };
    struct agent_exec e = { .argc = 2, .argv = argv, .cwd = "" };
    struct agent_buf b = { 0 };
    raw_open(&r);
    raw_expect(&r, AGENT_T_READY, 0);
    ck_assert_int_eq(agent_put_exec(&b, 1, &e), 0);
    ck_assert_int_eq(agent_put_u32(&b, AGENT_T_KILL, 1, SIGTERM), 0);
    raw_send(&r, b.p, b.len);
    agent_buf_free(&b);
    raw_expect(&r, AGENT_T_EXIT, 1);
    struct agent_exit x;
    ck_assert_int_eq(agent_exit_decode(rbuf, 12, &x, NULL), 0);
    ck_assert_uint_eq(x.kind, AGENT_EXIT_SIGNAL);
    ck_assert_uint_eq(x.value, SIGTERM);
    ck_assert_uint_eq(x.flags, 0);
    /* KILL for a finished exec: its id is unknown again. */
    raw_frame(&r, AGENT_T_KILL, 1, "\0\0\0\0", 4);
    raw_expect_error(&r, 1, AGENT_E_ID);                   /* id 1 is gone */

    /* A connection that goes away takes its processes with it. */
    char *argv2[] = { "sh", "-c", "echo $$; exec sleep 30", NULL };
    struct agent_exec e2 = { .argc = 3, .argv = argv2, .cwd = "" };
    ck_assert_int_eq(agent_put_exec(&b, 2, &e2), 0);
    raw_send(&r, b.p, b.len);
    agent_buf_free(&b);
    raw_expect(&r, AGENT_T_STDOUT, 2);
    rbuf[12] = 0;
    pid_t pid = (pid_t)atoi((char *)rbuf);
    ck_assert_int_gt(pid, 1);
    ck_assert_int_eq(kill(pid, 0), 0);
    raw_close(&r);
    int gone = 0;
    for (int i = 0; i < 200 && !gone; i++) {
        usleep(10000);
        gone = kill(pid, 0) < 0 && errno == ESRCH;
    }
    ck_assert_msg(gone, "process %d outlived its connection", (int)pid);
    agent_alive();
}
END_TEST

/* Frames of exec id until acc (STDOUT bytes, NUL-terminated) contains
 * want (NULL: until EXIT). Counts OK frames for id in *oks; ERROR fails;
 * EXIT: 1 with *x set, else 0. */
static int pty_collect(struct raw *r, uint32_t id, char *acc, size_t cap, const char *want, int *oks,
                       struct agent_exit *x)
{
    size_t len = strlen(acc);
    for (;;) {
        if (want && strstr(acc, want))
            return 0;
        struct agent_hdr h;
        ck_assert_msg(raw_recv(r, &h, rbuf, sizeof rbuf) == 0, "EOF waiting for '%s' (have '%s')",
                      want ? want : "EXIT", acc);
        ck_assert_uint_eq(h.id, id);
        ck_assert_msg(h.type != AGENT_T_ERROR, "ERROR frame (have '%s')", acc);
        ck_assert_msg(h.type != AGENT_T_STDERR, "a pty exec sent STDERR");
        if (h.type == AGENT_T_OK) {
            (*oks)++;
        } else if (h.type == AGENT_T_STDOUT) {
            ck_assert_uint_lt(len + h.len, cap);
            memcpy(acc + len, rbuf, h.len);
            acc[len += h.len] = 0;
        } else {
            ck_assert_uint_eq(h.type, AGENT_T_EXIT);
            ck_assert_int_eq(agent_exit_decode(rbuf, h.len, x, NULL), 0);
            ck_assert_msg(!want, "EXIT waiting for '%s' (have '%s')", want, acc);
            return 1;
        }
    }
}

START_TEST(pty_exec)
{
    struct raw r;
    char *argv[] = { "sh", "-c",
        "test -t 0 && test -t 1 && test -t 2 && echo ISATTY; : </dev/tty && echo CTTY; "
        "echo SIZE $(stty size) TERM=$TERM; echo READY; read l; echo GOT:$l; echo SIZE2 $(stty size)",
        NULL };
    struct agent_exec e = { .flags = AGENT_EXEC_PTY, .argc = 3, .argv = argv, .cwd = "",
                            .rows = 24, .cols = 80 };
    struct agent_buf b = { 0 };
    char acc[8192] = "";
    int oks = 0;
    struct agent_exit x;
    raw_open(&r);
    raw_expect(&r, AGENT_T_READY, 0);
    ck_assert_int_eq(agent_put_exec(&b, 1, &e), 0);
    raw_send(&r, b.p, b.len);
    agent_buf_free(&b);
    ck_assert_int_eq(pty_collect(&r, 1, acc, sizeof acc, "READY\r\n", &oks, &x), 0);
    ck_assert_msg(strstr(acc, "ISATTY\r\n"), "not a tty: '%s'", acc);   /* \r: the tty's onlcr */
    ck_assert_msg(strstr(acc, "CTTY\r\n"), "no controlling terminal: '%s'", acc);
    ck_assert_msg(strstr(acc, "SIZE 24 80 TERM=xterm\r\n"), "size/TERM: '%s'", acc);
    /* Resize, then input: the terminal echoes it, the process reads it. */
    ck_assert_int_eq(agent_put_resize(&b, 1, 50, 132), 0);
    ck_assert_int_eq(agent_put_frame(&b, AGENT_T_STDIN, 1, "hello\n", 6), 0);
    raw_send(&r, b.p, b.len);
    agent_buf_free(&b);
    ck_assert_int_eq(pty_collect(&r, 1, acc, sizeof acc, NULL, &oks, &x), 1);
    ck_assert_int_eq(oks, 1);                                       /* the RESIZE's */
    ck_assert_uint_eq(x.kind, AGENT_EXIT_CODE);
    ck_assert_uint_eq(x.value, 0);
    ck_assert_msg(strstr(acc, "READY\r\nhello\r\nGOT:hello\r\nSIZE2 50 132\r\n"), "after input: '%s'", acc);
    /* The id is free again: RESIZE for it is ERROR ID. */
    ck_assert_int_eq(agent_put_resize(&b, 1, 10, 10), 0);
    raw_send(&r, b.p, b.len);
    agent_buf_free(&b);
    raw_expect_error(&r, 1, AGENT_E_ID);

    /* TERM from the request's env wins; KILL reaches the pty's session;
     * a malformed RESIZE is refused and the exec goes on. */
    char *argv2[] = { "sh", "-c", "echo T=$TERM; exec sleep 30", NULL };
    char *env2[] = { "TERM=vt100", NULL };
    struct agent_exec e2 = { .flags = AGENT_EXEC_PTY | AGENT_EXEC_STDIN, .argc = 3, .argv = argv2,
                             .envc = 1, .env = env2, .cwd = "", .rows = 1, .cols = 1 };
    ck_assert_int_eq(agent_put_exec(&b, 2, &e2), 0);
    raw_send(&r, b.p, b.len);
    agent_buf_free(&b);
    acc[0] = 0;
    ck_assert_int_eq(pty_collect(&r, 2, acc, sizeof acc, "T=vt100\r\n", &oks, &x), 0);
    raw_frame(&r, AGENT_T_RESIZE, 2, "\x18\0\x50", 3);
    raw_expect_error(&r, 2, AGENT_E_SHORT);
    raw_frame(&r, AGENT_T_RESIZE, 2, "\0\0\x50\0", 4);
    raw_expect_error(&r, 2, AGENT_E_PAYLOAD);
    raw_frame(&r, AGENT_T_KILL, 2, "\x09\0\0\0", 4);
    oks = 0;
    ck_assert_int_eq(pty_collect(&r, 2, acc, sizeof acc, NULL, &oks, &x), 1);
    ck_assert_uint_eq(x.kind, AGENT_EXIT_SIGNAL);
    ck_assert_uint_eq(x.value, SIGKILL);

    /* RESIZE for an exec without a pty: ERROR SYS ENOTTY. */
    char *argv3[] = { "sleep", "30", NULL };
    struct agent_exec e3 = { .argc = 2, .argv = argv3, .cwd = "" };
    ck_assert_int_eq(agent_put_exec(&b, 3, &e3), 0);
    ck_assert_int_eq(agent_put_resize(&b, 3, 24, 80), 0);
    raw_send(&r, b.p, b.len);
    agent_buf_free(&b);
    raw_expect_sys(&r, 3, ENOTTY);
    raw_ping(&r, 9);
    raw_close(&r);
    agent_alive();
}
END_TEST

/* A stand-in for moat's hybrid vsock socket: accepts one connection on
 * PATH, checks "CONNECT 1024\n", answers reply, then relays bytes to the
 * agent's Unix socket. Runs in a child process. */
static pid_t fake_hybrid(const char *path, const char *reply)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    ck_assert_uint_lt(strlen(path), sizeof sa.sun_path);
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(l, 0);
    ck_assert_int_eq(bind(l, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(l, 1), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid) {
        close(l);
        return pid;
    }
    int c = accept(l, NULL, NULL);
    char line[64];
    size_t n = 0;
    while (n < sizeof line - 1 && read(c, line + n, 1) == 1 && line[n] != '\n')
        n++;
    line[n] = 0;
    if (strcmp(line, "CONNECT 1024") != 0)
        _exit(3);
    if (write(c, reply, strlen(reply)) < 0)
        _exit(4);
    if (strncmp(reply, "OK ", 3) != 0)
        _exit(0);
    int a = connect_raw();
    if (a < 0)
        _exit(5);
    struct pollfd p[2] = { { .fd = c, .events = POLLIN }, { .fd = a, .events = POLLIN } };
    char buf[65536];
    for (;;) {
        if (poll(p, 2, -1) < 0)
            _exit(6);
        for (int i = 0; i < 2; i++) {
            if (!p[i].revents)
                continue;
            ssize_t k = read(p[i].fd, buf, sizeof buf);
            if (k <= 0)
                _exit(0);
            for (ssize_t off = 0; off < k;) {
                ssize_t w = write(p[1 - i].fd, buf + off, (size_t)(k - off));
                if (w <= 0)
                    _exit(0);
                off += w;
            }
        }
    }
}

START_TEST(hybrid_vsock_handshake)
{
    char vpath[400], cmd[1024], out[256];
    snprintf(vpath, sizeof vpath, "%s/v.sock", tmpdir);
    pid_t px = fake_hybrid(vpath, "OK 1073741824\n");
    snprintf(cmd, sizeof cmd, "%s exec --vsock '%s' -- sh -c 'echo via-vsock; exit 4'", moat_bin,
             vpath);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    int st = pclose(f);
    ck_assert_str_eq(out, "via-vsock\n");
    ck_assert_int_eq(WEXITSTATUS(st), 4);
    waitpid(px, &st, 0);
    ck_assert_int_eq(WEXITSTATUS(st), 0);

    /* The VMM refuses (nothing listening on the port): exit 125. */
    unlink(vpath);
    px = fake_hybrid(vpath, "ERR no listener\n");
    snprintf(cmd, sizeof cmd, "%s exec --vsock '%s' -- true 2>/dev/null", moat_bin, vpath);
    ck_assert_int_eq(WEXITSTATUS(system(cmd)), 125);
    waitpid(px, &st, 0);
    ck_assert_int_eq(WEXITSTATUS(st), 0);
    /* Nothing at the path at all: 125 too. */
    unlink(vpath);
    ck_assert_int_eq(WEXITSTATUS(system(cmd)), 125);
}
END_TEST

START_TEST(wait_for_agent)
{
    char late[400], cmd[1024], out[64];
    snprintf(late, sizeof late, "%s/late.sock", tmpdir);
    pid_t a = fork();
    ck_assert_int_ge(a, 0);
    if (a == 0) {
        usleep(700 * 1000);
        execl(agent_bin, agent_bin, "--unix", late, (char *)NULL);
        _exit(127);
    }
    double t0 = now_s();
    snprintf(cmd, sizeof cmd, "%s exec --unix '%s' --wait 10 -- echo late", moat_bin, late);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    int st = pclose(f);
    kill(a, SIGKILL);
    waitpid(a, NULL, 0);
    ck_assert_int_eq(WEXITSTATUS(st), 0);
    ck_assert_str_eq(out, "late\n");
    ck_assert(now_s() - t0 >= 0.6);
    /* Without --wait (or past it) a missing agent is 125 at once. */
    unlink(late);
    snprintf(cmd, sizeof cmd, "%s exec --unix '%s' --wait 0.3 -- true 2>/dev/null", moat_bin, late);
    t0 = now_s();
    ck_assert_int_eq(WEXITSTATUS(system(cmd)), 125);
    ck_assert(now_s() - t0 < 3);
}
END_TEST

/* ---- stat, list, rename, remove (through agent_client) ---------------- */

static void client_open(struct agent_client *c)
{
    ck_assert_int_eq(agent_client_connect(c, sock_path, 0, 0), 0);
}

/* tmpdir/d: f (5 bytes, 0640), sub/ (g, deep/x), ln -> f, out -> ../outside
 * (a directory outside the tree, holding keep). */
static void make_tree(void)
{
    ck_assert_int_eq(sh("cd '%s' && mkdir -p d/sub/deep outside && printf hello > d/f && "
                        "chmod 0640 d/f && echo g > d/sub/g && echo x > d/sub/deep/x && "
                        "ln -s f d/ln && ln -s ../outside d/out && echo keep > outside/keep",
                        tmpdir), 0);
}

static char *tpath(char *buf, size_t n, const char *rel)
{
    snprintf(buf, n, "%s/%s", tmpdir, rel);
    return buf;
}

START_TEST(fs_stat)
{
    struct agent_client c;
    static struct agent_stat st;
    char p[512], err[256];
    struct stat hs;
    make_tree();
    client_open(&c);

    tpath(p, sizeof p, "d/f");
    ck_assert_int_eq(agent_client_stat(&c, p, 0, &st, err, sizeof err), 0);
    ck_assert_int_eq(stat(p, &hs), 0);
    ck_assert_uint_eq(st.type, AGENT_FT_FILE);
    ck_assert_uint_eq(st.mode, 0640);
    ck_assert_uint_eq(st.size, 5);
    ck_assert_uint_eq(st.uid, hs.st_uid);
    ck_assert_uint_eq(st.gid, hs.st_gid);
    ck_assert(st.mtime_sec == hs.st_mtim.tv_sec);
    ck_assert_uint_eq(st.mtime_nsec, (uint32_t)hs.st_mtim.tv_nsec);
    ck_assert_str_eq(st.path, p);
    ck_assert_str_eq(st.link, "");
    /* Names from the host's /etc/passwd and /etc/group (the agent parses them itself). */
    struct passwd *pw = getpwuid(hs.st_uid);
    struct group *gr = getgrgid(hs.st_gid);
    ck_assert_str_eq(st.owner, pw ? pw->pw_name : "");
    ck_assert_str_eq(st.group, gr ? gr->gr_name : "");
    ck_assert_int_eq(agent_client_last_errno(&c), 0);

    tpath(p, sizeof p, "d/sub");
    ck_assert_int_eq(agent_client_stat(&c, p, 1, &st, err, sizeof err), 0);
    ck_assert_uint_eq(st.type, AGENT_FT_DIR);

    tpath(p, sizeof p, "d/ln");                 /* the link itself, then its target */
    ck_assert_int_eq(agent_client_stat(&c, p, 1, &st, err, sizeof err), 0);
    ck_assert_uint_eq(st.type, AGENT_FT_SYMLINK);
    ck_assert_str_eq(st.link, "f");
    ck_assert_str_eq(st.path, p);
    ck_assert_int_eq(agent_client_stat(&c, p, 0, &st, err, sizeof err), 0);
    ck_assert_uint_eq(st.type, AGENT_FT_FILE);
    ck_assert_uint_eq(st.size, 5);
    ck_assert_str_eq(st.link, "");

    ck_assert_int_eq(agent_client_stat(&c, "/dev/null", 0, &st, err, sizeof err), 0);
    ck_assert_uint_eq(st.type, AGENT_FT_OTHER);

    /* An id with no name in the guest's files: "" (if the host has none either). */
    tpath(p, sizeof p, "d/f");
    if (getuid() == 0 && !getpwuid(54321) && !getgrgid(54322)) {
        ck_assert_int_eq(chown(p, 54321, 54322), 0);
        ck_assert_int_eq(agent_client_stat(&c, p, 0, &st, err, sizeof err), 0);
        ck_assert_uint_eq(st.uid, 54321);
        ck_assert_uint_eq(st.gid, 54322);
        ck_assert_str_eq(st.owner, "");
        ck_assert_str_eq(st.group, "");
    } else {
        printf("SKIPPED: fs_stat unnamed owner: not root or uid 54321 exists\n");
    }

    tpath(p, sizeof p, "d/missing");
    err[0] = 0;
    ck_assert_int_eq(agent_client_stat(&c, p, 0, &st, err, sizeof err), -EREMOTEIO);
    ck_assert_int_eq(agent_client_last_errno(&c), ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "missing"));
    tpath(p, sizeof p, "d/f/x");                /* through a file */
    ck_assert_int_eq(agent_client_stat(&c, p, 0, &st, err, sizeof err), -EREMOTEIO);
    ck_assert_int_eq(agent_client_last_errno(&c), ENOTDIR);
    /* The next request forgets the errno. */
    ck_assert_int_eq(agent_client_stat(&c, tmpdir, 0, &st, err, sizeof err), 0);
    ck_assert_int_eq(agent_client_last_errno(&c), 0);
    /* Relative paths are refused before anything is sent. */
    ck_assert_int_eq(agent_client_stat(&c, "d/f", 0, &st, err, sizeof err), -EINVAL);
    ck_assert_int_eq(agent_client_ping(&c), 0);
    agent_client_close(&c);
    agent_alive();
}
END_TEST

struct names {
    int n, stop_after;
    char name[32][128];
    uint32_t type[32];
    char link[32][64];
};

static int collect(void *arg, const struct agent_stat *e)
{
    struct names *nm = arg;
    size_t tl = strlen(tmpdir) + strlen("/d/");
    ck_assert_int_eq(strncmp(e->path, tmpdir, strlen(tmpdir)), 0);
    ck_assert_int_lt(nm->n, 32);
    ck_assert_uint_lt(strlen(e->path + tl), sizeof nm->name[0]);
    ck_assert_uint_lt(strlen(e->link), sizeof nm->link[0]);
    strcpy(nm->name[nm->n], e->path + tl);
    nm->type[nm->n] = e->type;
    strcpy(nm->link[nm->n], e->link);
    nm->n++;
    return nm->stop_after && nm->n >= nm->stop_after ? 7 : 0;
}

static int collect_any(void *arg, const struct agent_stat *e)
{
    (void)e;
    ((struct names *)arg)->n++;
    return 0;
}

/* The names listed, sorted, joined by spaces. */
static const char *listed(struct names *nm, char *buf, size_t cap)
{
    for (int i = 0; i < nm->n; i++)
        for (int k = i + 1; k < nm->n; k++)
            if (strcmp(nm->name[k], nm->name[i]) < 0) {
                char t[128];
                memcpy(t, nm->name[i], sizeof t);
                memcpy(nm->name[i], nm->name[k], sizeof t);
                memcpy(nm->name[k], t, sizeof t);
            }
    buf[0] = 0;
    for (int i = 0; i < nm->n; i++)
        snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", i ? " " : "", nm->name[i]);
    return buf;
}

START_TEST(fs_list_depth)
{
    struct agent_client c;
    static struct names nm;
    char p[512], err[256], buf[2048];
    make_tree();
    client_open(&c);
    tpath(p, sizeof p, "d");

    memset(&nm, 0, sizeof nm);
    ck_assert_int_eq(agent_client_list(&c, p, 1, collect, &nm, err, sizeof err), 0);
    for (int i = 0; i < nm.n; i++)             /* before sorting: types and targets */
        if (!strcmp(nm.name[i], "out")) {
            ck_assert_uint_eq(nm.type[i], AGENT_FT_SYMLINK);
            ck_assert_str_eq(nm.link[i], "../outside");
        } else if (!strcmp(nm.name[i], "sub")) {
            ck_assert_uint_eq(nm.type[i], AGENT_FT_DIR);
        }
    ck_assert_str_eq(listed(&nm, buf, sizeof buf), "f ln out sub");

    memset(&nm, 0, sizeof nm);
    ck_assert_int_eq(agent_client_list(&c, p, 2, collect, &nm, err, sizeof err), 0);
    /* out/ is a symlink to a directory: not descended. */
    ck_assert_str_eq(listed(&nm, buf, sizeof buf), "f ln out sub sub/deep sub/g");

    memset(&nm, 0, sizeof nm);
    ck_assert_int_eq(agent_client_list(&c, p, 16, collect, &nm, err, sizeof err), 0);
    ck_assert_str_eq(listed(&nm, buf, sizeof buf), "f ln out sub sub/deep sub/deep/x sub/g");

    /* A trailing slash: entries are joined without doubling it. */
    tpath(p, sizeof p, "d/");
    memset(&nm, 0, sizeof nm);
    ck_assert_int_eq(agent_client_list(&c, p, 1, collect, &nm, err, sizeof err), 0);
    ck_assert_str_eq(listed(&nm, buf, sizeof buf), "f ln out sub");

    /* The listed directory itself may be a symlink (d/out -> outside). */
    tpath(p, sizeof p, "d/out");
    memset(&nm, 0, sizeof nm);
    ck_assert_int_eq(agent_client_list(&c, p, 1, collect, &nm, err, sizeof err), 0);
    ck_assert_int_eq(nm.n, 1);

    /* The callback stops it: its value comes back, the rest is drained. */
    tpath(p, sizeof p, "d");
    memset(&nm, 0, sizeof nm);
    nm.stop_after = 1;
    ck_assert_int_eq(agent_client_list(&c, p, 2, collect, &nm, err, sizeof err), 7);
    ck_assert_int_eq(nm.n, 1);
    ck_assert_int_eq(agent_client_ping(&c), 0);

    memset(&nm, 0, sizeof nm);
    tpath(p, sizeof p, "d/f");
    ck_assert_int_eq(agent_client_list(&c, p, 1, collect, &nm, err, sizeof err), -EREMOTEIO);
    ck_assert_int_eq(agent_client_last_errno(&c), ENOTDIR);
    tpath(p, sizeof p, "nope");
    ck_assert_int_eq(agent_client_list(&c, p, 1, collect, &nm, err, sizeof err), -EREMOTEIO);
    ck_assert_int_eq(agent_client_last_errno(&c), ENOENT);
    ck_assert_int_eq(agent_client_list(&c, tmpdir, 0, collect, &nm, err, sizeof err), -EINVAL);
    ck_assert_int_eq(agent_client_list(&c, tmpdir, 17, collect, &nm, err, sizeof err), -EINVAL);
    ck_assert_int_eq(nm.n, 0);
    /* An empty directory. */
    ck_assert_int_eq(sh("mkdir '%s/empty'", tmpdir), 0);
    tpath(p, sizeof p, "empty");
    ck_assert_int_eq(agent_client_list(&c, p, 3, collect, &nm, err, sizeof err), 0);
    ck_assert_int_eq(nm.n, 0);
    agent_client_close(&c);
    agent_alive();
}
END_TEST

static int count_entries(void *arg, const struct agent_stat *e)
{
    (void)e;
    (*(unsigned *)arg)++;
    return 0;
}

/* 100001 entries: 100000 stream out (more than the agent buffers for a
 * connection), then ERROR LIMIT. In /dev/shm where there is one (tmpfs:
 * creating them on a disk is slow). */
START_TEST(fs_list_limit)
{
    char p[512], err[256];
    if (access("/dev/shm", W_OK) == 0)
        snprintf(p, sizeof p, "/dev/shm/moat-agent-many.%d", (int)getpid());
    else
        tpath(p, sizeof p, "many");
    ck_assert_int_eq(mkdir(p, 0755), 0);
    int dfd = open(p, O_RDONLY | O_DIRECTORY);
    ck_assert_int_ge(dfd, 0);
    int fd = openat(dfd, "0", O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    ck_assert_int_ge(fd, 0);
    close(fd);
    for (unsigned i = 1; i <= AGENT_LIST_MAX_ENTRIES; i++) {   /* hard links: cheaper */
        char name[16];
        snprintf(name, sizeof name, "%u", i);
        ck_assert_int_eq(linkat(dfd, "0", dfd, name, 0), 0);
    }
    close(dfd);
    struct agent_client c;
    client_open(&c);
    unsigned n = 0;
    err[0] = 0;
    ck_assert_int_eq(agent_client_list(&c, p, 1, count_entries, &n, err, sizeof err), -EREMOTEIO);
    ck_assert_uint_eq(n, AGENT_LIST_MAX_ENTRIES);
    ck_assert_int_eq(agent_client_last_errno(&c), 0);
    ck_assert_ptr_nonnull(strstr(err, "limit"));
    /* One file fewer: all of it, then LIST_END. */
    char one[600];
    snprintf(one, sizeof one, "%s/1", p);
    ck_assert_int_eq(unlink(one), 0);
    n = 0;
    ck_assert_int_eq(agent_client_list(&c, p, 1, count_entries, &n, err, sizeof err), 0);
    ck_assert_uint_eq(n, AGENT_LIST_MAX_ENTRIES);
    agent_client_close(&c);

    /* A client that asks and goes away mid-stream. */
    struct raw r;
    raw_open(&r);
    raw_expect(&r, AGENT_T_READY, 0);
    struct agent_buf b = { 0 };
    ck_assert_int_eq(agent_put_list(&b, 1, 1, p), 0);
    raw_send(&r, b.p, b.len);
    agent_buf_free(&b);
    raw_expect(&r, AGENT_T_LIST_ENTRY, 1);
    raw_close(&r);
    client_open(&c);
    ck_assert_int_eq(agent_client_ping(&c), 0);
    /* And a recursive remove of all of it. */
    ck_assert_int_eq(agent_client_remove(&c, p, 1, err, sizeof err), 0);
    ck_assert_int_eq(access(p, F_OK), -1);
    agent_client_close(&c);
    agent_alive();
}
END_TEST

START_TEST(fs_rename)
{
    struct agent_client c;
    static struct agent_stat st;
    char a[512], b[512], err[256];
    make_tree();
    client_open(&c);
    tpath(a, sizeof a, "d/f");
    tpath(b, sizeof b, "d/sub/f2");
    ck_assert_int_eq(agent_client_rename(&c, a, b, err, sizeof err), 0);
    ck_assert_int_eq(access(a, F_OK), -1);
    ck_assert_int_eq(agent_client_stat(&c, b, 0, &st, err, sizeof err), 0);
    ck_assert_uint_eq(st.size, 5);
    /* A directory, onto a new name. */
    tpath(a, sizeof a, "d/sub");
    tpath(b, sizeof b, "moved");
    ck_assert_int_eq(agent_client_rename(&c, a, b, err, sizeof err), 0);
    ck_assert_int_eq(sh("test -f '%s/moved/deep/x'", tmpdir), 0);
    /* Missing source. */
    tpath(a, sizeof a, "d/nope");
    ck_assert_int_eq(agent_client_rename(&c, a, b, err, sizeof err), -EREMOTEIO);
    ck_assert_int_eq(agent_client_last_errno(&c), ENOENT);
    /* A directory onto a non-empty one. */
    tpath(a, sizeof a, "d");
    tpath(b, sizeof b, "moved");
    ck_assert_int_eq(agent_client_rename(&c, a, b, err, sizeof err), -EREMOTEIO);
    ck_assert(agent_client_last_errno(&c) == ENOTEMPTY || agent_client_last_errno(&c) == EEXIST);
    ck_assert_int_eq(agent_client_rename(&c, "rel", b, err, sizeof err), -EINVAL);
    /* Across file systems: EXDEV, reported (not copied). */
    struct stat s1, s2;
    if (stat(tmpdir, &s1) == 0 && stat("/dev/shm", &s2) == 0 && s1.st_dev != s2.st_dev) {
        char x[512];
        snprintf(x, sizeof x, "/dev/shm/moat-agent-test-%d", (int)getpid());
        tpath(a, sizeof a, "outside/keep");
        ck_assert_int_eq(agent_client_rename(&c, a, x, err, sizeof err), -EREMOTEIO);
        ck_assert_int_eq(agent_client_last_errno(&c), EXDEV);
        ck_assert_int_eq(access(a, F_OK), 0);
        ck_assert_int_eq(access(x, F_OK), -1);
    } else {
        printf("SKIPPED: fs_rename EXDEV: /dev/shm is not another file system here\n");
    }
    agent_client_close(&c);
    agent_alive();
}
END_TEST

START_TEST(fs_remove)
{
    struct agent_client c;
    char p[512], err[256];
    make_tree();
    client_open(&c);
    /* Not recursive: a file, an empty directory; a full one is ENOTEMPTY. */
    tpath(p, sizeof p, "d/sub/g");
    ck_assert_int_eq(agent_client_remove(&c, p, 0, err, sizeof err), 0);
    ck_assert_int_eq(access(p, F_OK), -1);
    tpath(p, sizeof p, "d/sub");
    ck_assert_int_eq(agent_client_remove(&c, p, 0, err, sizeof err), -EREMOTEIO);
    ck_assert_int_eq(agent_client_last_errno(&c), ENOTEMPTY);
    ck_assert_int_eq(sh("mkdir '%s/d/e'", tmpdir), 0);
    tpath(p, sizeof p, "d/e");
    ck_assert_int_eq(agent_client_remove(&c, p, 0, err, sizeof err), 0);
    ck_assert_int_eq(access(p, F_OK), -1);
    /* A symlink to a directory, recursive: the link goes, not the target. */
    tpath(p, sizeof p, "d/out");
    ck_assert_int_eq(agent_client_remove(&c, p, 1, err, sizeof err), 0);
    ck_assert_int_eq(sh("test -f '%s/outside/keep'", tmpdir), 0);
    /* The whole tree, with a symlink to outside inside it (and a deeper one). */
    ck_assert_int_eq(sh("cd '%s' && ln -s ../outside d/out && ln -s ../../../outside d/sub/deep/o "
                        "&& mkdir -p d/a/b/c/d/e && touch d/a/b/c/d/e/z && chmod 0 d/a/b/c/d/e/z",
                        tmpdir), 0);
    tpath(p, sizeof p, "d");
    ck_assert_int_eq(agent_client_remove(&c, p, 1, err, sizeof err), 0);
    ck_assert_int_eq(access(p, F_OK), -1);
    ck_assert_int_eq(sh("test -f '%s/outside/keep'", tmpdir), 0);
    /* Missing. */
    ck_assert_int_eq(agent_client_remove(&c, p, 1, err, sizeof err), -EREMOTEIO);
    ck_assert_int_eq(agent_client_last_errno(&c), ENOENT);
    ck_assert_int_eq(agent_client_remove(&c, "d", 1, err, sizeof err), -EINVAL);
    agent_client_close(&c);
    agent_alive();
}
END_TEST

/* Paths past 4096 bytes: LIST stops with ENAMETOOLONG where an entry's
 * path would be longer; REMOVE (openat-based) still removes the tree. */
START_TEST(fs_long_paths)
{
    struct agent_client c;
    static struct names nm;
    char p[512], err[256];
    /* 17 levels of 255-byte names, made relative to each other. */
    char name[256];
    memset(name, 'n', 255);
    name[255] = 0;
    tpath(p, sizeof p, "long");
    ck_assert_int_eq(mkdir(p, 0755), 0);
    int dfd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    for (int i = 0; i < 17; i++) {
        ck_assert_int_ge(dfd, 0);
        ck_assert_int_eq(mkdirat(dfd, name, 0755), 0);
        int next = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        close(dfd);
        dfd = next;
    }
    close(dfd);
    client_open(&c);
    memset(&nm, 0, sizeof nm);
    ck_assert_int_eq(agent_client_list(&c, p, 16, collect_any, &nm, err, sizeof err), -EREMOTEIO);
    ck_assert_int_eq(agent_client_last_errno(&c), ENAMETOOLONG);
    ck_assert_int_eq(nm.n, (int)((AGENT_MAX_PATH - strlen(p)) / 256));   /* the levels that fit */
    ck_assert_int_eq(agent_client_remove(&c, p, 1, err, sizeof err), 0);
    ck_assert_int_eq(access(p, F_OK), -1);
    agent_client_close(&c);
    agent_alive();
}
END_TEST

/* Malformed file system requests: ERROR, and the connection goes on. */
START_TEST(fs_bad_requests)
{
    struct raw r;
    raw_open(&r);
    raw_expect(&r, AGENT_T_READY, 0);
    raw_frame(&r, AGENT_T_STAT, 1, "\0\0\0", 3);                  /* short */
    raw_expect_error(&r, 1, AGENT_E_SHORT);
    raw_frame(&r, AGENT_T_STAT, 2, "\2\0\0\0/x", 6);              /* bad flag */
    raw_expect_error(&r, 2, AGENT_E_PAYLOAD);
    raw_frame(&r, AGENT_T_STAT, 3, "\0\0\0\0x", 5);               /* relative */
    raw_expect_error(&r, 3, AGENT_E_PAYLOAD);
    raw_frame(&r, AGENT_T_LIST, 4, "\0\0\0\0/", 5);               /* depth 0 */
    raw_expect_error(&r, 4, AGENT_E_PAYLOAD);
    raw_frame(&r, AGENT_T_LIST, 5, "\x11\0\0\0/", 5);             /* depth 17 */
    raw_expect_error(&r, 5, AGENT_E_PAYLOAD);
    raw_frame(&r, AGENT_T_REMOVE, 6, "\1\0\0\0/a\0", 7);          /* NUL */
    raw_expect_error(&r, 6, AGENT_E_PAYLOAD);
    raw_frame(&r, AGENT_T_RENAME, 7, "\2\0\0\0/a\3\0\0\0/b", 12); /* truncated dst */
    raw_expect_error(&r, 7, AGENT_E_SHORT);
    raw_frame(&r, AGENT_T_RENAME, 8, "\2\0\0\0/a\2\0\0\0/bX", 13);/* trailing */
    raw_expect_error(&r, 8, AGENT_E_PAYLOAD);
    raw_frame(&r, AGENT_T_STAT_INFO, 9, "", 0);                   /* agent's own type */
    raw_expect_error(&r, 9, AGENT_E_TYPE);
    raw_frame(&r, AGENT_T_WATCH, 12, "\2\0\0\0/", 5);              /* bad WATCH flag */
    raw_expect_error(&r, 12, AGENT_E_PAYLOAD);
    raw_frame(&r, AGENT_T_WATCH, 13, "\1\0\0\0tmp", 7);            /* relative */
    raw_expect_error(&r, 13, AGENT_E_PAYLOAD);
    raw_frame(&r, AGENT_T_WATCH, 14, "\1\0\0\0/proc/self/status", 21);  /* not a directory */
    raw_expect_error(&r, 14, AGENT_E_SYS);
    raw_frame(&r, AGENT_T_WATCH_EVENT, 15, "\1\0\0\0a", 5);        /* agent's own type */
    raw_expect_error(&r, 15, AGENT_E_TYPE);
    /* A tree deeper than a WATCH follows (128 levels): ERROR LIMIT. */
    char deep[600];
    snprintf(deep, sizeof deep, "/tmp/moat-watch-deep.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(deep));
    size_t top = strlen(deep);
    for (int i = 0; i < 130; i++) {
        strcat(deep, "/d");
        ck_assert_int_eq(mkdir(deep, 0755), 0);
    }
    deep[top] = 0;
    struct agent_buf wb = { 0 };
    ck_assert_int_eq(agent_put_watch(&wb, 16, AGENT_WATCH_RECURSIVE, deep), 0);
    raw_frame(&r, AGENT_T_WATCH, 16, wb.p + AGENT_HDR_SIZE, wb.len - AGENT_HDR_SIZE);
    agent_buf_free(&wb);
    raw_expect_error(&r, 16, AGENT_E_LIMIT);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", deep);
    ck_assert_int_eq(system(cmd), 0);
    /* Well formed: a stat of / answers STAT_INFO. */
    raw_frame(&r, AGENT_T_STAT, 10, "\0\0\0\0/", 5);
    static struct agent_stat st;
    struct agent_hdr h;
    ck_assert_int_eq(raw_recv(&r, &h, rbuf, sizeof rbuf), 0);
    ck_assert_uint_eq(h.type, AGENT_T_STAT_INFO);
    ck_assert_uint_eq(h.id, 10);
    ck_assert_int_eq(agent_entry_decode(rbuf, h.len, &st, NULL), 0);
    ck_assert_uint_eq(st.type, AGENT_FT_DIR);
    ck_assert_str_eq(st.path, "/");
    raw_ping(&r, 11);
    raw_close(&r);
    agent_alive();
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("agent");
    TCase *tc = tcase_create("agent");
    tcase_add_checked_fixture(tc, agent_start, agent_stop);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, output_and_exit_codes);
    tcase_add_test(tc, streaming);
    tcase_add_test(tc, signals);
    tcase_add_test(tc, timeout_kill);
    tcase_add_test(tc, concurrent_execs);
    tcase_add_test(tc, concurrent_execs_one_connection);
    tcase_add_test(tc, file_round_trip);
    tcase_add_test(tc, mkdir_raw);
    tcase_add_test(tc, bad_frames_connection_continues);
    tcase_add_test(tc, oversized_and_bad_magic_close);
    tcase_add_test(tc, stdin_forwarding);
    tcase_add_test(tc, kill_request_and_disconnect);
    tcase_add_test(tc, pty_exec);
    tcase_add_test(tc, hybrid_vsock_handshake);
    tcase_add_test(tc, wait_for_agent);
    tcase_add_test(tc, fs_stat);
    tcase_add_test(tc, fs_list_depth);
    tcase_add_test(tc, fs_list_limit);
    tcase_add_test(tc, fs_rename);
    tcase_add_test(tc, fs_remove);
    tcase_add_test(tc, fs_long_paths);
    tcase_add_test(tc, fs_bad_requests);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    moat_bin = getenv("MOAT_BIN") ? getenv("MOAT_BIN") : "build/moat";
    agent_bin = getenv("MOAT_AGENT") ? getenv("MOAT_AGENT") : "build/guest/agent";
    if (access(agent_bin, X_OK) != 0 || access(moat_bin, X_OK) != 0) {
        fprintf(stderr, "test_agent: %s or %s missing (make build/moat build/guest/agent)\n",
                moat_bin, agent_bin);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    SRunner *sr = srunner_create(suite());
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
