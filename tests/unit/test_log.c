/* The guest-message limiter (vmm/base/log.c): per owner, not per call site, and
 * safe from several threads. */
#include <check.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "include/moat.h"
#include "vmm/base/log.h"

/* One call site, as a device or the vCPU loop has: which VM's limiter it
 * uses is the argument. */
static void guest_did_something(struct log_limit *vm_rl, int vm)
{
    log_guest(vm_rl, "vm%d: something odd", vm);
}

/* stderr into a pipe while f runs; what was written, NUL-terminated. */
static char captured[65536];
static void capture_stderr(void (*f)(void))
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    ck_assert_int_eq(fcntl(p[0], F_SETPIPE_SZ, 1 << 16) >= 0, 1);
    int saved = dup(2);
    fflush(stderr);
    dup2(p[1], 2);
    f();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(p[1]);
    ssize_t n = read(p[0], captured, sizeof captured - 1);
    captured[n > 0 ? n : 0] = 0;
    close(p[0]);
}

static unsigned count(const char *hay, const char *needle)
{
    unsigned n = 0;
    for (const char *q = hay; (q = strstr(q, needle)); q += strlen(needle))
        n++;
    return n;
}

/* A guest that floods one site does not mute another VM's message from the
 * same site. (Before, log_guest kept one static limiter per call site, for
 * the whole process.) */
static void flood_then_other(void)
{
    struct log_limit a = LOG_LIMIT(10), b = LOG_LIMIT(10);
    for (int i = 0; i < 1000; i++)
        guest_did_something(&a, 1);
    guest_did_something(&b, 2);
}

START_TEST(one_noisy_guest_does_not_mute_another)
{
    capture_stderr(flood_then_other);
    ck_assert_uint_eq(count(captured, "vm1: something odd"), 10);   /* the burst, then quiet */
    ck_assert_uint_eq(count(captured, "vm2: something odd"), 1);
}
END_TEST

/* Four threads on one limiter: exactly the burst gets through (the 5 s
 * interval does not pass), whatever the interleaving. */
static struct log_limit shared;
static atomic_uint passed;

static void *hammer(void *arg)
{
    (void)arg;
    for (int i = 0; i < 20000; i++)
        if (log_limit_ok(&shared))
            atomic_fetch_add(&passed, 1);
    return NULL;
}

START_TEST(threads_share_a_limiter)
{
    shared = LOG_LIMIT(10);
    atomic_store(&passed, 0);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, hammer, NULL), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    ck_assert_uint_eq(atomic_load(&passed), 10);
    ck_assert_uint_eq(shared.suppressed + atomic_load(&shared.contended), 4 * 20000 - 10);
}
END_TEST

/* moat_set_log: the embedder's callback gets messages up to its level,
 * with the level; NULL goes back to stderr. */
struct got { int n, levels[8]; char msgs[8][64]; };
static void sink(void *opaque, int level, const char *msg)
{
    struct got *g = opaque;
    if (g->n < 8) {
        g->levels[g->n] = level;
        snprintf(g->msgs[g->n], sizeof g->msgs[0], "%s", msg);
    }
    g->n++;
}

static void log_to_stderr(void)
{
    moat_set_log(MOAT_LOG_WARN, NULL, NULL);
    log_warn("back on stderr %d", 7);
    log_info("not shown");
}

START_TEST(set_log_routes_messages)
{
    struct got g = { 0 };
    moat_set_log(MOAT_LOG_INFO, sink, &g);
    log_err("e%d", 1);
    log_warn("w%d", 2);
    log_info("i%d", 3);
    log_debug("d%d", 4);   /* above the level: dropped */
    ck_assert_int_eq(g.n, 3);
    ck_assert_int_eq(g.levels[0], MOAT_LOG_ERROR);
    ck_assert_str_eq(g.msgs[0], "e1");
    ck_assert_int_eq(g.levels[1], MOAT_LOG_WARN);
    ck_assert_str_eq(g.msgs[1], "w2");
    ck_assert_int_eq(g.levels[2], MOAT_LOG_INFO);
    ck_assert_str_eq(g.msgs[2], "i3");
    capture_stderr(log_to_stderr);
    ck_assert_str_eq(captured, "moat: back on stderr 7\n");
    ck_assert_int_eq(g.n, 3);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("ratelimit");
    tcase_add_test(tc, one_noisy_guest_does_not_mute_another);
    tcase_add_test(tc, threads_share_a_limiter);
    tcase_add_test(tc, set_log_routes_messages);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
