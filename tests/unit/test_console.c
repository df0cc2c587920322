/* Unit tests for console output (vmm/core/console.c): the bounded buffer, its
 * writer thread, and a reader that stops reading. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "vmm/core/console.h"

static uint64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* Read fd until EOF or n bytes. */
static size_t read_all(int fd, char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    return got;
}

static void put_str(struct console_out *c, const char *s)
{
    while (*s)
        console_put(c, (uint8_t)*s++);
}

START_TEST(bytes_arrive_in_order)
{
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    struct console_out c;
    ck_assert_int_eq(console_init(&c, p[1], 4096, 0), 0);
    ck_assert_int_eq(console_start(&c, 0), 0);
    /* More than the ring holds, with a reader that keeps up: nothing lost. */
    static char want[20000], got[20001];
    for (size_t i = 0; i < sizeof want; i++)
        want[i] = (char)('a' + i % 26);
    for (size_t i = 0; i < sizeof want; i++) {
        console_put(&c, (uint8_t)want[i]);
        if (i % 1000 == 999) {   /* the reader drains as it goes */
            ck_assert_int_eq(console_drain(&c, 2000), 0);
            char tmp[1000];
            ck_assert_uint_eq(read_all(p[0], tmp, 1000), 1000);
            memcpy(got + i - 999, tmp, 1000);
        }
    }
    struct console_stats s;
    console_get_stats(&c, &s);
    ck_assert_uint_eq(s.written, sizeof want);
    ck_assert_uint_eq(s.dropped, 0);
    ck_assert_uint_eq(s.accepted, sizeof want);
    ck_assert(memcmp(got, want, sizeof want) == 0);
    console_destroy(&c);
    /* The caller's fd keeps its flags (moat writes through its own). */
    ck_assert_int_eq(fcntl(p[1], F_GETFL) & O_NONBLOCK, 0);
    close(p[0]);
    close(p[1]);
}
END_TEST

/* The bug this replaces: a reader that never reads made the UART's write(2)
 * block the vCPU. Here console_put never waits, the overflow is counted, and
 * drain and stop give up after their idle time. */
START_TEST(reader_that_never_reads)
{
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    ck_assert_int_ge(fcntl(p[1], F_SETPIPE_SZ, 4096), 4096);
    struct console_out c;
    ck_assert_int_eq(console_init(&c, p[1], 8192, 0), 0);
    ck_assert_int_eq(console_start(&c, 0), 0);
    uint64_t t0 = now_ms();
    for (int i = 0; i < 200000; i++)
        console_put(&c, 'x');
    uint64_t t_put = now_ms() - t0;
    ck_assert_msg(t_put < 1000, "200000 console_put took %llu ms", (unsigned long long)t_put);
    struct console_stats s;
    console_get_stats(&c, &s);
    ck_assert_uint_eq(s.accepted, 200000);
    ck_assert_uint_gt(s.dropped, 200000 - 8192 - 65536);   /* at most ring + pipe got through */
    ck_assert_uint_le(s.queued, 8192);
    t0 = now_ms();
    ck_assert_int_eq(console_drain(&c, 100), -ETIMEDOUT);
    uint64_t t_drain = now_ms() - t0;
    ck_assert_msg(t_drain >= 90 && t_drain < 1000, "drain gave up after %llu ms", (unsigned long long)t_drain);
    t0 = now_ms();
    ck_assert_int_eq(console_drain(&c, 100), -ETIMEDOUT);   /* still stalled: no second wait */
    ck_assert_uint_lt(now_ms() - t0, 50);
    t0 = now_ms();
    console_stop(&c, 100);
    ck_assert_uint_lt(now_ms() - t0, 1000);
    console_get_stats(&c, &s);
    ck_assert_uint_eq(s.queued, 0);
    /* Counts include the gap notes moat puts in the stream (one here). */
    ck_assert_uint_ge(s.written + s.dropped, 200000);
    ck_assert_uint_le(s.written + s.dropped, 200000 + 80);
    console_destroy(&c);
    close(p[0]);
    close(p[1]);
}
END_TEST

/* Where bytes were dropped, once there is room again the stream says how
 * many: every 'x' the guest wrote is either in the stream or counted in a
 * gap note, and the counts add up to the dropped total. */
START_TEST(gap_is_marked)
{
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    ck_assert_int_ge(fcntl(p[1], F_SETPIPE_SZ, 4096), 4096);
    struct console_out c;
    ck_assert_int_eq(console_init(&c, p[1], 1024, 0), 0);
    ck_assert_int_eq(console_start(&c, 0), 0);
    for (int i = 0; i < 10000; i++)
        console_put(&c, 'x');
    struct console_stats s;
    console_get_stats(&c, &s);
    ck_assert_uint_gt(s.dropped, 0);
    /* The reader catches up; then more output. */
    static char buf[1 << 16];
    size_t got = 0;
    uint64_t t0 = now_ms();
    while (now_ms() - t0 < 300) {
        struct pollfd pf = { .fd = p[0], .events = POLLIN };
        if (poll(&pf, 1, 50) == 1)
            got += (size_t)read(p[0], buf + got, sizeof buf - got - 1);
    }
    put_str(&c, "after");
    console_stop(&c, 1000);
    close(p[1]);
    got += read_all(p[0], buf + got, sizeof buf - got - 1);
    buf[got] = 0;
    console_get_stats(&c, &s);
    unsigned long long as = 0, noted = 0, notes = 0;
    const char *q = buf;
    while (*q) {
        unsigned long long n;
        int k = 0;
        if (*q == 'x') {
            as++;
            q++;
        } else if (sscanf(q, "\n[moat: %llu bytes of console output dropped]\n%n", &n, &k) == 1 && k > 0) {
            noted += n;
            notes++;
            q += k;
        } else {
            break;
        }
    }
    ck_assert_str_eq(q, "after");
    ck_assert_uint_ge(notes, 1);
    ck_assert_uint_eq(as + noted, 10000);
    ck_assert_uint_eq(noted, s.dropped);
    console_destroy(&c);
    close(p[0]);
}
END_TEST

START_TEST(limit_caps_with_a_note)
{
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    struct console_out c;
    ck_assert_int_eq(console_init(&c, p[1], 4096, 5), 0);
    ck_assert_int_eq(console_start(&c, 0), 0);
    put_str(&c, "hello world");
    console_stop(&c, 1000);
    close(p[1]);
    char buf[256] = { 0 };
    read_all(p[0], buf, sizeof buf - 1);
    ck_assert_str_eq(buf, "hello\n[moat: console output limit reached; the rest is dropped]\n");
    struct console_stats s;
    console_get_stats(&c, &s);
    ck_assert(s.capped);
    console_destroy(&c);
    close(p[0]);
}
END_TEST

/* A reader that has gone: with SIGPIPE ignored the writer sees EPIPE, stops
 * writing and counts the rest as dropped; nothing blocks. */
START_TEST(reader_gone)
{
    signal(SIGPIPE, SIG_IGN);
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    close(p[0]);
    struct console_out c;
    ck_assert_int_eq(console_init(&c, p[1], 4096, 0), 0);
    ck_assert_int_eq(console_start(&c, 0), 0);
    put_str(&c, "lost");
    console_drain(&c, 1000);
    for (int i = 0; i < 10000; i++)
        console_put(&c, 'y');
    console_stop(&c, 1000);
    struct console_stats s;
    console_get_stats(&c, &s);
    ck_assert(s.dead);
    ck_assert_uint_eq(s.written, 0);
    ck_assert_uint_eq(s.dropped, 10004);
    console_destroy(&c);
    close(p[1]);
}
END_TEST

/* Sockets are written with MSG_DONTWAIT: a full socket does not block. */
START_TEST(socket_full_does_not_block)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    struct console_out c;
    ck_assert_int_eq(console_init(&c, sv[0], 4096, 0), 0);
    ck_assert_int_eq(console_start(&c, 0), 0);
    put_str(&c, "sock");
    ck_assert_int_eq(console_drain(&c, 2000), 0);
    char b[5] = { 0 };
    ck_assert_uint_eq(read_all(sv[1], b, 4), 4);
    ck_assert_str_eq(b, "sock");
    for (int i = 0; i < 2000000; i++)
        console_put(&c, 'z');
    uint64_t t0 = now_ms();
    console_stop(&c, 100);
    ck_assert_uint_lt(now_ms() - t0, 1000);
    struct console_stats s;
    console_get_stats(&c, &s);
    ck_assert_uint_gt(s.dropped, 0);
    ck_assert_uint_ge(s.written + s.dropped, 2000004);
    ck_assert_uint_le(s.written + s.dropped, 2000004 + 1000);
    console_destroy(&c);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

START_TEST(no_fd_discards)
{
    struct console_out c;
    ck_assert_int_eq(console_init(&c, -1, 0, 0), 0);
    ck_assert_int_eq(console_start(&c, 0), 0);
    ck_assert(!c.started);
    put_str(&c, "nowhere");
    ck_assert_int_eq(console_drain(&c, 10), 0);
    struct console_stats s;
    console_get_stats(&c, &s);
    ck_assert_uint_eq(s.written, 0);
    ck_assert_uint_eq(s.cap, 0);
    console_stop(&c, 10);
    console_destroy(&c);
}
END_TEST

START_TEST(bad_size)
{
    struct console_out c;
    ck_assert_int_eq(console_init(&c, 1, 16, 0), -EINVAL);
}
END_TEST

/* console_flush (moat_pause's): bounded in all, and it does not mark the
 * reader as stalled, so a later drain still waits for it. */
START_TEST(flush_is_bounded_and_judges_nobody)
{
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    ck_assert_int_ge(fcntl(p[1], F_SETPIPE_SZ, 4096), 4096);
    struct console_out c;
    ck_assert_int_eq(console_init(&c, p[1], 65536, 0), 0);
    ck_assert_int_eq(console_start(&c, 0), 0);
    put_str(&c, "ok");
    ck_assert_int_eq(console_flush(&c, 2000), 0);
    char b[3] = { 0 };
    ck_assert_uint_eq(read_all(p[0], b, 2), 2);
    ck_assert_str_eq(b, "ok");
    for (int i = 0; i < 20000; i++)
        console_put(&c, 'f');
    uint64_t t0 = now_ms();
    ck_assert_int_eq(console_flush(&c, 20), -ETIMEDOUT);
    uint64_t ms = now_ms() - t0;
    ck_assert_msg(ms >= 15 && ms < 500, "flush took %llu ms", (unsigned long long)ms);
    ck_assert(!c.stalled);
    t0 = now_ms();
    ck_assert_int_eq(console_drain(&c, 100), -ETIMEDOUT);   /* waits its full idle time */
    ck_assert_uint_ge(now_ms() - t0, 90);
    console_destroy(&c);
    close(p[0]);
    close(p[1]);
}
END_TEST

/* A write that blocks (a blocking pipe moat could not reopen): once the
 * reader has taken nothing for the idle time, console_stop interrupts it
 * with the kick signal and returns, the rest counted as dropped. */
static void noop(int sig) { (void)sig; }

START_TEST(stop_interrupts_a_blocked_write)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = noop;   /* no SA_RESTART, as moat_start installs it */
    sigemptyset(&sa.sa_mask);
    ck_assert_int_eq(sigaction(SIGRTMIN + 7, &sa, NULL), 0);
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    ck_assert_int_ge(fcntl(p[1], F_SETPIPE_SZ, 4096), 4096);
    struct console_out c;
    ck_assert_int_eq(console_init(&c, p[1], 65536, 0), 0);
    c.test_blocking = true;
    ck_assert_int_eq(console_start(&c, SIGRTMIN + 7), 0);
    for (int i = 0; i < 30000; i++)
        console_put(&c, 'b');
    usleep(100000);   /* the writer is now blocked in write(2) on the full pipe */
    uint64_t t0 = now_ms();
    console_stop(&c, 100);
    uint64_t ms = now_ms() - t0;
    ck_assert_msg(ms >= 90 && ms < 2000, "console_stop took %llu ms", (unsigned long long)ms);
    struct console_stats s;
    console_get_stats(&c, &s);
    ck_assert_uint_gt(s.dropped, 0);
    ck_assert_uint_eq(s.queued, 0);
    console_destroy(&c);
    close(p[0]);
    close(p[1]);
}
END_TEST

/* A pty master as the console (a terminal emulator's side): output reaches
 * the slave. (Reopening the master through /proc would open a new pty.) */
START_TEST(pty_master_console)
{
    int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    ck_assert_int_ge(m, 0);
    ck_assert_int_eq(grantpt(m), 0);
    ck_assert_int_eq(unlockpt(m), 0);
    int sl = open(ptsname(m), O_RDWR | O_NOCTTY | O_CLOEXEC);
    ck_assert_int_ge(sl, 0);
    struct console_out c;
    ck_assert_int_eq(console_init(&c, m, 4096, 0), 0);
    ck_assert_int_eq(console_start(&c, 0), 0);
    put_str(&c, "pty\n");
    ck_assert_int_eq(console_drain(&c, 2000), 0);
    char b[8] = { 0 };
    struct pollfd pf = { .fd = sl, .events = POLLIN };
    ck_assert_int_eq(poll(&pf, 1, 2000), 1);
    ck_assert_int_ge(read(sl, b, sizeof b - 1), 3);
    ck_assert_msg(strncmp(b, "pty", 3) == 0, "slave read '%s'", b);
    console_destroy(&c);
    close(sl);
    close(m);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("console");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, bytes_arrive_in_order);
    tcase_add_test(tc, reader_that_never_reads);
    tcase_add_test(tc, gap_is_marked);
    tcase_add_test(tc, limit_caps_with_a_note);
    tcase_add_test(tc, reader_gone);
    tcase_add_test(tc, socket_full_does_not_block);
    tcase_add_test(tc, no_fd_discards);
    tcase_add_test(tc, bad_size);
    tcase_add_test(tc, flush_is_bounded_and_judges_nobody);
    tcase_add_test(tc, stop_interrupts_a_blocked_write);
    tcase_add_test(tc, pty_master_console);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
