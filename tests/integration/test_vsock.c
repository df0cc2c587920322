/* virtio-vsock through the moat binary on /dev/kvm, with the tiny polling
 * driver guest (tests/guests/vsock.c) and a host client that speaks
 * Firecracker's hybrid vsock byte for byte:
 *  - connect to the uds with a 100 ms dial (retried until the socket
 *    exists), write "CONNECT 52\n" and the payload in the same write,
 *    expect "OK <port>\n" (port >= 2^30) within 1 s, then the echo;
 *  - the guest connects to host port 1234: moat connects to <uds>_1234,
 *    where this test listens, sends "hello-from-guest" and gets the reply.
 * Environment: MOAT_BIN (build/moat), MOAT_GUESTS (build/guests),
 * MOAT_TEST_SLOW (time limits x N), MOAT_REQUIRE_KVM (fail instead of skip
 * without KVM). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../guests/vsock_proto.h"
#include "harness.h"
#include "host_probe.h"

static char dir[128], uds[200], out_path[256];

static void set_timeouts(int fd, double s)
{
    struct timeval tv = { (time_t)s, (suseconds_t)((s - (double)(time_t)s) * 1e6) };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

/* Dial the uds with a 100 ms timeout per attempt (Unix connect does not
 * block long; the socket may not exist yet), until deadline. */
static int dial(const char *path, double deadline)
{
    for (;;) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        set_timeouts(fd, 0.1);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        if (strlen(path) >= sizeof sa.sun_path) {
            close(fd);
            return -1;
        }
        memcpy(sa.sun_path, path, strlen(path) + 1);
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
            return fd;
        close(fd);
        if (now() > deadline)
            return -1;
        usleep(100000);
    }
}

static size_t read_until(int fd, char *b, size_t cap, size_t want, double deadline)
{
    size_t got = 0;
    while (got < want && got < cap && now() < deadline) {
        ssize_t r = read(fd, b + got, want - got);
        if (r > 0)
            got += (size_t)r;
        else if (r == 0 || (errno != EAGAIN && errno != EINTR))
            break;
    }
    return got;
}

/* Read the OK line one byte at a time (it ends at '\n'). */
static int read_line(int fd, char *b, size_t cap, double deadline)
{
    size_t n = 0;
    while (n + 1 < cap && now() < deadline) {
        ssize_t r = read(fd, b + n, 1);
        if (r == 1) {
            if (b[n++] == '\n')
                break;
        } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
            break;
        }
    }
    b[n] = 0;
    return (int)n;
}

static const char *moat_out(void)
{
    static char b[16384];
    memset(b, 0, sizeof b);
    FILE *f = fopen(out_path, "r");
    if (f) {
        size_t got = fread(b, 1, sizeof b - 1, f);
        (void)got;
        fclose(f);
    }
    return b;
}

/* Any KVM runs the tiny vsock guest (PVM too): the host probe's kind. */
static bool kvm_ok(char *why, size_t len)
{
    return probe_host_kind(env_or("MOAT_BIN", "build/moat"), why, len) != TEST_HOST_NONE;
}

/* The vsock guest both ways; the device from --vsock PATH,cid=3, or
 * (as_device) from --device vsock,uds=PATH,cid=3. */
static void both_directions(bool as_device)
{
    char why[256];
    if (!kvm_ok(why, sizeof why)) {
        if (require_kvm())
            ck_abort_msg("%s and MOAT_REQUIRE_KVM is set", why);
        printf("SKIPPED: test_vsock: %s\n", why);
        return;
    }
    snprintf(dir, sizeof dir, "/tmp/moat-vsock-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(uds, sizeof uds, "%s/v.sock", dir);
    snprintf(out_path, sizeof out_path, "%s/out", dir);
    /* the host listener for the guest's connection to port VS_HOST_PORT */
    char lp[256];
    snprintf(lp, sizeof lp, "%s_%u", uds, VS_HOST_PORT);
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    ck_assert_uint_lt(strlen(lp), sizeof sa.sun_path);
    memcpy(sa.sun_path, lp, strlen(lp) + 1);
    ck_assert_int_eq(bind(l, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(l, 4), 0);

    char guest[512], vs[256];
    snprintf(guest, sizeof guest, "%s/vsock.elf", env_or("MOAT_GUESTS", "build/guests"));
    if (as_device)
        snprintf(vs, sizeof vs, "vsock,uds=%s,cid=3", uds);
    else
        snprintf(vs, sizeof vs, "%s,cid=3", uds);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        int nul = open("/dev/null", O_RDONLY);
        if (o < 0 || nul < 0)
            _exit(127);
        dup2(nul, 0); dup2(o, 1); dup2(o, 2);
        execl(env_or("MOAT_BIN", "build/moat"), "moat", "run", "--kernel", guest, as_device ? "--device" : "--vsock", vs,
              "--timeout", "60", getenv("MOAT_TEST_VERBOSE") ? "-vv" : "-v", (char *)NULL);
        _exit(127);
    }
    double t0 = now();
    /* wait for the guest's driver (its RX buffers) before the 2 s clock starts */
    for (;;) {
        char b[4096] = {0};
        FILE *f = fopen(out_path, "r");
        size_t n = f ? fread(b, 1, sizeof b - 1, f) : 0;
        if (f)
            fclose(f);
        (void)n;
        if (strstr(b, VS_READY))
            break;
        int st;
        ck_assert_msg(waitpid(pid, &st, WNOHANG) == 0, "moat exited early: %s", b);
        ck_assert_msg(now() - t0 < 30 * slow(), "guest not ready: %s", b);
        usleep(20000);
    }
    /* 1. host-initiated, exactly like a Firecracker client */
    int fd = dial(uds, now() + 5 * slow());
    ck_assert_int_ge(fd, 0);
    const char msg[] = "CONNECT " "52" "\n" VS_PING;
    t0 = now();
    ck_assert_int_eq(write(fd, msg, sizeof msg - 1), (ssize_t)(sizeof msg - 1));
    char line[64];
    set_timeouts(fd, 1.0 * slow());
    int n = read_line(fd, line, sizeof line, now() + 1.0 * slow());
    ck_assert_msg(n > 3 && !strncmp(line, "OK ", 3) && line[n - 1] == '\n', "got '%s' after %.2f s; moat:\n%s",
                  line, now() - t0, moat_out());
    unsigned long hp = strtoul(line + 3, NULL, 10);
    ck_assert_uint_ge(hp, 1ul << 30);
    char echo[64] = {0};
    ck_assert_uint_eq(read_until(fd, echo, sizeof echo, VS_ECHO_LEN, now() + 5 * slow()), VS_ECHO_LEN);
    ck_assert_str_eq(echo, VS_PING);
    close(fd);
    /* 2. guest-initiated to <uds>_1234 */
    struct pollfd pf = { l, POLLIN, 0 };
    ck_assert_int_eq(poll(&pf, 1, (int)(10000 * slow())), 1);
    int c = accept(l, NULL, NULL);
    ck_assert_int_ge(c, 0);
    set_timeouts(c, 5 * slow());
    char hello[64] = {0};
    size_t hl = sizeof VS_HELLO - 1;
    ck_assert_uint_eq(read_until(c, hello, sizeof hello, hl, now() + 5 * slow()), hl);
    ck_assert_str_eq(hello, VS_HELLO);
    ck_assert_int_eq(write(c, VS_REPLY, sizeof VS_REPLY - 1), (ssize_t)(sizeof VS_REPLY - 1));
    int st = 0;
    double end = now() + 20 * slow();
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (now() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            break;
        }
        usleep(20000);
    }
    char b[8192] = {0};
    FILE *f = fopen(out_path, "r");
    if (f) {
        size_t got = fread(b, 1, sizeof b - 1, f);
        (void)got;
        fclose(f);
    }
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "moat status %d, output:\n%s", st, b);
    ck_assert_msg(strstr(b, VS_ECHO_OK) && strstr(b, VS_OUT_OK), "output:\n%s", b);
    close(c);
    close(l);
    unlink(lp);
    unlink(out_path);
    rmdir(dir);
}

START_TEST(hybrid_vsock_both_directions)
{
    both_directions(false);
}
END_TEST

/* The same device given by type and options (moat run --device). */
START_TEST(hybrid_vsock_as_a_device)
{
    both_directions(true);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("vsock-integration");
    TCase *tc = tcase_create("moat");
    tcase_set_timeout(tc, 120 * slow());
    tcase_add_test(tc, hybrid_vsock_both_directions);
    tcase_add_test(tc, hybrid_vsock_as_a_device);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
