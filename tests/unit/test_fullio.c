/* Whole transfers (vmm/base/fullio.c): short counts, calls interrupted by
 * a signal whose handler was installed without SA_RESTART, end of file,
 * errors. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "vmm/base/fullio.h"

static atomic_int signals;

static void on_signal(int sig)
{
    (void)sig;
    atomic_fetch_add(&signals, 1);
}

/* SIGUSR1 interrupts blocking calls: no SA_RESTART. */
static void install_handler(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    ck_assert_int_eq(sigaction(SIGUSR1, &sa, NULL), 0);
    atomic_store(&signals, 0);
}

static void sleep_ms(long ms)
{
    struct timespec d = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&d, &d) < 0)
        ;
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 131u + seed + (i >> 8));
}

/* ---- a helper thread that trickles bytes or signals ---- */

struct helper {
    int fd;
    pthread_t target;
    const uint8_t *data;
    size_t len, piece;
    int kills;              /* signals to the target before the data */
};

static void *trickle(void *arg)
{
    struct helper *h = arg;
    for (int i = 0; i < h->kills; i++) {
        sleep_ms(30);
        pthread_kill(h->target, SIGUSR1);
    }
    for (size_t off = 0; off < h->len; off += h->piece) {
        size_t n = h->len - off < h->piece ? h->len - off : h->piece;
        if (write(h->fd, h->data + off, n) != (ssize_t)n)
            break;
        if ((off / h->piece) % 64 == 0)
            sleep_ms(1);
    }
    return NULL;
}

START_TEST(read_gathers_short_counts)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    static uint8_t src[5000], dst[5000];
    fill(src, sizeof src, 7);
    struct helper h = { .fd = sv[1], .target = pthread_self(), .data = src, .len = sizeof src, .piece = 7 };
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, trickle, &h), 0);
    ck_assert_int_eq(read_full(sv[0], dst, sizeof dst), (ssize_t)sizeof dst);
    ck_assert(memcmp(src, dst, sizeof dst) == 0);
    pthread_join(t, NULL);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

START_TEST(read_retries_after_a_signal)
{
    install_handler();
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    uint8_t src[64], dst[64];
    fill(src, sizeof src, 3);
    struct helper h = { .fd = p[1], .target = pthread_self(), .data = src, .len = sizeof src, .piece = 5,
                        .kills = 3 };
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, trickle, &h), 0);
    /* blocks on the empty pipe: each signal interrupts the read */
    ck_assert_int_eq(read_full(p[0], dst, sizeof dst), (ssize_t)sizeof dst);
    ck_assert(memcmp(src, dst, sizeof dst) == 0);
    ck_assert_int_eq(atomic_load(&signals), 3);
    pthread_join(t, NULL);
    close(p[0]);
    close(p[1]);
}
END_TEST

struct drain {
    int fd;
    pthread_t target;
    uint8_t *out;
    size_t len, got;
};

/* Reads slowly in small pieces, signalling the writer while it waits. */
static void *drain(void *arg)
{
    struct drain *d = arg;
    while (d->got < d->len) {
        sleep_ms(2);
        pthread_kill(d->target, SIGUSR1);
        size_t want = d->len - d->got < 3000 ? d->len - d->got : 3000;
        ssize_t n = read(d->fd, d->out + d->got, want);
        if (n <= 0)
            break;
        d->got += (size_t)n;
    }
    return NULL;
}

START_TEST(write_goes_on_after_interrupted_short_writes)
{
    install_handler();
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    size_t len = 1 << 20;       /* far past the pipe's 64 KiB */
    uint8_t *src = malloc(len), *dst = malloc(len);
    ck_assert(src && dst);
    fill(src, len, 11);
    struct drain d = { .fd = p[0], .target = pthread_self(), .out = dst, .len = len };
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, drain, &d), 0);
    /* a signal landing after some bytes went makes write() return short;
     * one landing before any went makes it fail with EINTR */
    ck_assert_int_eq(write_full(p[1], src, len), (ssize_t)len);
    pthread_join(t, NULL);
    ck_assert_uint_eq(d.got, len);
    ck_assert(memcmp(src, dst, len) == 0);
    ck_assert_int_gt(atomic_load(&signals), 0);
    free(src);
    free(dst);
    close(p[0]);
    close(p[1]);
}
END_TEST

START_TEST(read_stops_at_end_of_file)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    ck_assert_int_eq(write(p[1], "0123456789", 10), 10);
    close(p[1]);
    char buf[100];
    ck_assert_int_eq(read_full(p[0], buf, sizeof buf), 10);
    ck_assert(memcmp(buf, "0123456789", 10) == 0);
    ck_assert_int_eq(read_full(p[0], buf, sizeof buf), 0);
    ck_assert_int_eq(read_full(p[0], buf, 0), 0);
    close(p[0]);
}
END_TEST

START_TEST(positioned_on_a_file)
{
    char path[] = "/tmp/moat-fullio-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    uint8_t src[300], dst[300];
    fill(src, sizeof src, 5);
    ck_assert_int_eq(pwrite_full(fd, src, 100, 0), 100);
    ck_assert_int_eq(pwrite_full(fd, src + 100, 200, 100), 200);
    ck_assert_int_eq(lseek(fd, 0, SEEK_CUR), 0);            /* the offset untouched */
    memset(dst, 0, sizeof dst);
    ck_assert_int_eq(pread_full(fd, dst, sizeof dst, 0), 300);
    ck_assert(memcmp(src, dst, sizeof dst) == 0);
    /* past the end: what there is, then nothing */
    ck_assert_int_eq(pread_full(fd, dst, sizeof dst, 250), 50);
    ck_assert(memcmp(dst, src + 250, 50) == 0);
    ck_assert_int_eq(pread_full(fd, dst, sizeof dst, 300), 0);
    ck_assert_int_eq(pread_full(fd, dst, 1, -1), -EINVAL);
    ck_assert_int_eq(pwrite_full(fd, dst, 1, -1), -EINVAL);
    /* plain read/write use and move the offset */
    ck_assert_int_eq(write_full(fd, "abc", 3), 3);
    ck_assert_int_eq(lseek(fd, 0, SEEK_SET), 0);
    ck_assert_int_eq(read_full(fd, dst, 3), 3);
    ck_assert(memcmp(dst, "abc", 3) == 0);
    close(fd);
}
END_TEST

START_TEST(errors_are_negative_errno)
{
    char buf[8] = { 0 };
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    int bad = p[0];
    close(p[0]);
    close(p[1]);
    ck_assert_int_eq(read_full(bad, buf, sizeof buf), -EBADF);
    ck_assert_int_eq(write_full(bad, buf, sizeof buf), -EBADF);
    ck_assert_int_eq(pread_full(bad, buf, sizeof buf, 0), -EBADF);
    ck_assert_int_eq(pwrite_full(bad, buf, sizeof buf, 0), -EBADF);
    /* a pipe has no position */
    ck_assert_int_eq(pipe(p), 0);
    ck_assert_int_eq(pread_full(p[0], buf, sizeof buf, 0), -ESPIPE);
    ck_assert_int_eq(pwrite_full(p[1], buf, sizeof buf, 0), -ESPIPE);
    /* no reader left */
    signal(SIGPIPE, SIG_IGN);
    close(p[0]);
    ck_assert_int_eq(write_full(p[1], buf, sizeof buf), -EPIPE);
    close(p[1]);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fullio");
    TCase *tc = tcase_create("fullio");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, read_gathers_short_counts);
    tcase_add_test(tc, read_retries_after_a_signal);
    tcase_add_test(tc, write_goes_on_after_interrupted_short_writes);
    tcase_add_test(tc, read_stops_at_end_of_file);
    tcase_add_test(tc, positioned_on_a_file);
    tcase_add_test(tc, errors_are_negative_errno);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
