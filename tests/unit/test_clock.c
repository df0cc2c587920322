/* Monotonic time helpers: deadlines normalized, a monotonic condition
 * variable's timed wait ends at its deadline. */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>

#include "vmm/base/clock.h"

static uint64_t ts_ns(struct timespec t) { return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec; }

START_TEST(deadlines)
{
    for (uint64_t ms = 0; ms < 3000; ms += 37) {
        uint64_t before = clock_mono_ns();
        struct timespec t = clock_mono_after_ms(ms);
        uint64_t after = clock_mono_ns();
        ck_assert(t.tv_nsec >= 0 && t.tv_nsec < 1000000000L);
        ck_assert_uint_ge(ts_ns(t), before + ms * 1000000ull);
        ck_assert_uint_le(ts_ns(t), after + ms * 1000000ull);
    }
    uint64_t a = clock_mono_ns(), b = clock_mono_ns();
    ck_assert_uint_ge(b, a);
}
END_TEST

/* The microsecond and millisecond readings are the nanosecond clock
 * rounded down: bracketed by nanosecond readings either side. */
START_TEST(coarser_units)
{
    for (int i = 0; i < 200; i++) {
        uint64_t before = clock_mono_ns();
        int64_t us = clock_mono_us(), ms = clock_mono_ms();
        uint64_t after = clock_mono_ns();
        ck_assert_int_ge(us, (int64_t)(before / 1000u));
        ck_assert_int_le(us, (int64_t)(after / 1000u));
        ck_assert_int_ge(ms, (int64_t)(before / 1000000u));
        ck_assert_int_le(ms, (int64_t)(after / 1000000u));
        ck_assert_int_ge(ms, us / 1000);     /* ms is read after us */
    }
    int64_t t0 = clock_mono_ms();
    struct timespec d = { 0, 30 * 1000000L };
    while (nanosleep(&d, &d) < 0)
        ;
    int64_t took = clock_mono_ms() - t0;
    ck_assert_int_ge(took, 29);
    ck_assert_int_lt(took, 5000);
}
END_TEST

/* What is left of a deadline, for poll: -1 for none, 0 once passed,
 * else the milliseconds left, at most INT_MAX. */
START_TEST(ms_left)
{
    ck_assert_int_eq(clock_ms_left(-1), -1);
    ck_assert_int_eq(clock_ms_left(-12345), -1);
    ck_assert_int_eq(clock_ms_left(0), 0);
    int64_t now = clock_mono_ms();
    ck_assert_int_eq(clock_ms_left(now - 1), 0);
    ck_assert_int_eq(clock_ms_left(now), 0);
    int left = clock_ms_left(now + 2000);
    ck_assert_int_gt(left, 1000);
    ck_assert_int_le(left, 2000);
    ck_assert_int_eq(clock_ms_left(now + (int64_t)INT_MAX * 4), INT_MAX);
}
END_TEST

START_TEST(monotonic_condvar_times_out_at_its_deadline)
{
    pthread_cond_t c;
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    ck_assert_int_eq(cond_init_mono(&c), 0);
    pthread_mutex_lock(&m);
    uint64_t t0 = clock_mono_ns();
    struct timespec d = clock_mono_after_ms(50);
    int r;
    do
        r = pthread_cond_timedwait(&c, &m, &d);
    while (r == 0);     /* spurious wake-ups */
    uint64_t took = clock_mono_ns() - t0;
    pthread_mutex_unlock(&m);
    ck_assert_int_eq(r, ETIMEDOUT);
    /* a CLOCK_REALTIME condition variable would take this monotonic
     * deadline as long past and return at once */
    ck_assert_uint_ge(took, 50000000ull);
    ck_assert_uint_lt(took, 5000000000ull);
    pthread_cond_destroy(&c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("clock");
    TCase *tc = tcase_create("clock");
    tcase_add_test(tc, deadlines);
    tcase_add_test(tc, coarser_units);
    tcase_add_test(tc, ms_left);
    tcase_add_test(tc, monotonic_condvar_times_out_at_its_deadline);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
