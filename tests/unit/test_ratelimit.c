/* Token-bucket rate limiter (devices/virtio/ratelimit.c) and its JSON shape
 * (devices/virtio/ratelimit_json.c): refill arithmetic, burst, wait times,
 * debt, refunds, run-time updates, a simulated 5 s stream. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "devices/virtio/ratelimit.h"
#include "devices/virtio/ratelimit_json.h"

#define MS 1000000ull
#define S  1000000000ull

static struct ratelimit_cfg bw_only(uint64_t size, uint64_t burst, uint64_t refill_ms)
{
    return (struct ratelimit_cfg){ .bandwidth = { size, burst, refill_ms } };
}

static struct ratelimit_cfg ops_only(uint64_t size, uint64_t burst, uint64_t refill_ms)
{
    return (struct ratelimit_cfg){ .ops = { size, burst, refill_ms } };
}

/* The wait reported for (bytes, ops) at t is exact: refused 1 ns before,
 * allowed at t + wait. Leaves the request taken. */
static uint64_t check_wait_exact(struct ratelimit *rl, uint64_t bytes, uint64_t ops, uint64_t t)
{
    uint64_t w = 0;
    ck_assert_int_eq(ratelimit_consume(rl, bytes, ops, t, &w), -EAGAIN);
    ck_assert_uint_gt(w, 0);
    if (w > 1) {
        uint64_t w2 = 0;
        ck_assert_int_eq(ratelimit_consume(rl, bytes, ops, t + w - 1, &w2), -EAGAIN);
        ck_assert_uint_eq(w2, 1);
    }
    uint64_t w3 = 7;
    ck_assert_int_eq(ratelimit_consume(rl, bytes, ops, t + w, &w3), 0);
    ck_assert_uint_eq(w3, 0);
    return w;
}

START_TEST(unlimited_buckets)
{
    struct ratelimit rl;
    ck_assert_int_eq(ratelimit_init(&rl, NULL, 0), 0);
    ck_assert(ratelimit_unlimited(&rl));
    struct ratelimit_cfg c = { .bandwidth = { 0, 100, 1000 }, .ops = { 100, 0, 0 } };
    ck_assert_int_eq(ratelimit_init(&rl, &c, 0), 0);     /* size 0 / refill 0: unlimited */
    ck_assert(ratelimit_unlimited(&rl));
    for (int i = 0; i < 1000; i++)
        ck_assert_int_eq(ratelimit_consume(&rl, UINT64_MAX, UINT64_MAX, 0, NULL), 0);
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 0), INT64_MAX);
    ck_assert_uint_eq(rl.stats.throttled, 0);
    struct ratelimit_cfg g;
    memset(&g, 0xff, sizeof g);
    ratelimit_get_cfg(&rl, &g);
    ck_assert(g.bandwidth.size == 0 && g.bandwidth.one_time_burst == 0 && g.ops.refill_time_ms == 0);
}
END_TEST

/* The locked forms: the same update and read-back as the plain ones, the
 * lock free again afterwards. */
START_TEST(locked_update_and_get)
{
    pthread_mutex_t lk = PTHREAD_MUTEX_INITIALIZER;
    struct ratelimit rl;
    ck_assert_int_eq(ratelimit_init(&rl, NULL, 0), 0);
    struct ratelimit_cfg c = bw_only(1000, 10, 100);
    ck_assert_int_eq(ratelimit_update_locked(&rl, &lk, &c, 0), 0);
    ck_assert_int_eq(pthread_mutex_trylock(&lk), 0);
    pthread_mutex_unlock(&lk);
    struct ratelimit_cfg g;
    memset(&g, 0xff, sizeof g);
    ratelimit_get_cfg_locked(&rl, &lk, &g);
    ck_assert_uint_eq(g.bandwidth.size, 1000);
    ck_assert_uint_eq(g.bandwidth.one_time_burst, 10);
    ck_assert_uint_eq(g.bandwidth.refill_time_ms, 100);
    ck_assert_uint_eq(g.ops.size, 0);
    struct ratelimit_cfg bad = bw_only(1, 0, RATELIMIT_MAX_REFILL_MS + 1);
    ck_assert_int_eq(ratelimit_update_locked(&rl, &lk, &bad, 0), -EINVAL);
    ck_assert_int_eq(pthread_mutex_trylock(&lk), 0);
    pthread_mutex_unlock(&lk);
    ratelimit_get_cfg_locked(&rl, &lk, &g);
    ck_assert_uint_eq(g.bandwidth.size, 1000);      /* unchanged */
}
END_TEST

START_TEST(starts_full_then_refills_at_rate)
{
    struct ratelimit rl;
    struct ratelimit_cfg c = bw_only(1000, 0, 1000);      /* 1 byte per ms */
    ck_assert_int_eq(ratelimit_init(&rl, &c, 5 * S), 0);
    ck_assert(!ratelimit_unlimited(&rl));
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 5 * S), 1000);
    ck_assert_int_eq(ratelimit_consume(&rl, 1000, 0, 5 * S, NULL), 0);
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 5 * S), 0);
    ck_assert_uint_eq(check_wait_exact(&rl, 1, 0, 5 * S), MS);
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 5 * S + MS), 0);
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 5 * S + 500 * MS), 499);
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 5 * S + 2 * S), 1000);    /* capped at size */
    ck_assert_uint_eq(rl.stats.throttled, 2);
    /* ops = 0 and bytes = 0 ask nothing of their buckets */
    ck_assert_int_eq(ratelimit_consume(&rl, 0, 5, 7 * S, NULL), 0);
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 7 * S), 1000);
}
END_TEST

START_TEST(fractional_refill_is_exact)
{
    /* 3 tokens per second: a token every 333,333,333.3 ns */
    struct ratelimit rl;
    struct ratelimit_cfg c = ops_only(3, 0, 1000);
    ck_assert_int_eq(ratelimit_init(&rl, &c, 0), 0);
    ck_assert_int_eq(ratelimit_consume(&rl, 0, 3, 0, NULL), 0);
    ck_assert_int_eq(ratelimit_tokens(&rl, 1, 333333333), 0);
    ck_assert_int_eq(ratelimit_tokens(&rl, 1, 333333334), 1);
    ck_assert_int_eq(ratelimit_tokens(&rl, 1, 666666666), 1);
    ck_assert_int_eq(ratelimit_tokens(&rl, 1, 666666667), 2);
    ck_assert_int_eq(ratelimit_tokens(&rl, 1, 999999999), 2);
    ck_assert_int_eq(ratelimit_tokens(&rl, 1, 1000000000), 3);

    /* many small steps give what one step gives: no rounding drift */
    struct ratelimit a, b;
    struct ratelimit_cfg c2 = bw_only(1000003, 0, 7777);
    ratelimit_init(&a, &c2, 0);
    ratelimit_init(&b, &c2, 0);
    ck_assert_int_eq(ratelimit_consume(&a, 1000003, 0, 0, NULL), 0);
    ck_assert_int_eq(ratelimit_consume(&b, 1000003, 0, 0, NULL), 0);
    uint64_t t = 0;
    srand(42);
    for (int i = 0; i < 100000; i++) {
        t += 1 + (uint64_t)(rand() % 50000);
        (void)ratelimit_tokens(&a, 0, t);
    }
    ck_assert_uint_lt(t, 7777 * MS);                 /* still below full */
    ck_assert_int_eq(ratelimit_tokens(&a, 0, t), ratelimit_tokens(&b, 0, t));
    ck_assert_int_eq(ratelimit_tokens(&b, 0, t), (int64_t)((unsigned __int128)1000003 * t / (7777 * MS)));
}
END_TEST

START_TEST(no_overflow_large_sizes_long_idle)
{
    struct ratelimit rl;
    uint64_t big = 1ull << 40;
    struct ratelimit_cfg c = bw_only(big, 0, 1);        /* 2^40 bytes per ms */
    ck_assert_int_eq(ratelimit_init(&rl, &c, 0), 0);
    ck_assert_int_eq(ratelimit_consume(&rl, big, 0, 0, NULL), 0);
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 3ull * 3600 * S), (int64_t)big);   /* 3 h idle */
    ck_assert_int_eq(ratelimit_consume(&rl, big, 0, 3ull * 3600 * S, NULL), 0);
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 3ull * 3600 * S + MS / 2), (int64_t)(big / 2));

    /* the extremes: size 2^64-1, the longest refill, an idle time of 2^64-1 ns */
    struct ratelimit_cfg x = bw_only(UINT64_MAX, 0, RATELIMIT_MAX_REFILL_MS);
    ck_assert_int_eq(ratelimit_init(&rl, &x, 0), 0);
    ck_assert_int_eq(ratelimit_consume(&rl, UINT64_MAX, 0, 0, NULL), 0);
    uint64_t w;
    ck_assert_int_eq(ratelimit_consume(&rl, UINT64_MAX, 0, 0, &w), -EAGAIN);
    ck_assert_uint_eq(w, RATELIMIT_MAX_REFILL_MS * MS);     /* exactly one refill time */
    ck_assert_int_eq(ratelimit_consume(&rl, 1, 0, 0, &w), -EAGAIN);
    ck_assert_uint_eq(w, 1);                                 /* 2^64-1 tokens per 1.1e18 ns */
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, UINT64_MAX), INT64_MAX);   /* full, clamped */
    ck_assert_int_eq(ratelimit_consume(&rl, UINT64_MAX, 0, UINT64_MAX, NULL), 0);

    /* a debt too long to wait for saturates the wait */
    struct ratelimit_cfg y = bw_only(1, 0, RATELIMIT_MAX_REFILL_MS);
    ck_assert_int_eq(ratelimit_init(&rl, &y, 0), 0);
    ck_assert_int_eq(ratelimit_consume(&rl, UINT64_MAX, 0, 0, NULL), 0);
    ck_assert_int_eq(ratelimit_consume(&rl, 1, 0, 0, &w), -EAGAIN);
    ck_assert_uint_eq(w, UINT64_MAX);
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 0), INT64_MIN);   /* clamped */

    /* refill time limit */
    char why[128] = "";
    struct ratelimit_cfg z = ops_only(10, 0, RATELIMIT_MAX_REFILL_MS + 1);
    ck_assert_int_eq(ratelimit_cfg_check(&z, why, sizeof why), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "ops: refill_time"));
    ck_assert_int_eq(ratelimit_init(&rl, &z, 0), -EINVAL);
    ck_assert(ratelimit_unlimited(&rl));
}
END_TEST

START_TEST(clock_going_back_gives_nothing)
{
    struct ratelimit rl;
    struct ratelimit_cfg c = bw_only(100, 0, 100);
    ratelimit_init(&rl, &c, 10 * S);
    ck_assert_int_eq(ratelimit_consume(&rl, 100, 0, 10 * S, NULL), 0);
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 1 * S), 0);
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 10 * S + 50 * MS), 50);
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 10 * S + 20 * MS), 50);   /* back: kept, not re-credited */
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 10 * S + 60 * MS), 60);
}
END_TEST

START_TEST(one_time_burst_is_spent_first_and_never_refills)
{
    struct ratelimit rl;
    struct ratelimit_cfg c = bw_only(100, 500, 1000);
    ratelimit_init(&rl, &c, 0);
    ck_assert_int_eq(ratelimit_consume(&rl, 50, 0, 0, NULL), 0);
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 0), 100);             /* from the burst */
    ck_assert_uint_eq(rl.bw.burst, 450);
    ck_assert_int_eq(ratelimit_consume(&rl, 500, 0, 0, NULL), 0);   /* 450 burst + 50 tokens */
    ck_assert_uint_eq(rl.bw.burst, 0);
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 0), 50);
    ck_assert_int_eq(ratelimit_consume(&rl, 50, 0, 0, NULL), 0);
    ck_assert_int_eq(ratelimit_consume(&rl, 1, 0, 0, NULL), -EAGAIN);
    /* a long idle refills the bucket, not the burst */
    ck_assert_int_eq(ratelimit_consume(&rl, 100, 0, 3600 * S, NULL), 0);
    ck_assert_int_eq(ratelimit_consume(&rl, 1, 0, 3600 * S, NULL), -EAGAIN);
    ck_assert_uint_eq(rl.bw.burst, 0);
    /* total taken at t=0: exactly size + burst */
    ratelimit_init(&rl, &c, 0);
    uint64_t n = 0;
    while (ratelimit_consume(&rl, 1, 0, 0, NULL) == 0)
        n++;
    ck_assert_uint_eq(n, 600);
}
END_TEST

START_TEST(wait_time_is_exact)
{
    struct ratelimit rl;
    struct ratelimit_cfg c = bw_only(1500, 0, 10);       /* 150 bytes per ms */
    ratelimit_init(&rl, &c, 0);
    ck_assert_int_eq(ratelimit_consume(&rl, 1000, 0, 0, NULL), 0);
    /* 500 left; 1500 needs 1000 more: 1000 / 150 ms = 6,666,666.67 ns */
    ck_assert_uint_eq(check_wait_exact(&rl, 1500, 0, 0), 6666667);
    /* with a remainder carried: the next wait accounts for the fraction */
    uint64_t t = 6666667;
    for (int i = 0; i < 50; i++) {
        uint64_t w = check_wait_exact(&rl, 777, 0, t);
        t += w;
    }
    /* 1000 + 1500 + 50 * 777 bytes taken, 1500 of them from the full
     * start: the rest came at exactly 150 B/ms, the last at the first ns
     * the refill covered it */
    ck_assert_uint_eq(t, (uint64_t)(39850 * 10 * MS + 1499) / 1500);

    /* two buckets: the longer wait wins, nothing charged on refusal */
    struct ratelimit_cfg d = { .bandwidth = { 1000, 0, 1000 }, .ops = { 10, 0, 1000 } };
    ratelimit_init(&rl, &d, 0);
    ck_assert_int_eq(ratelimit_consume(&rl, 100, 10, 0, NULL), 0);
    uint64_t w;
    ck_assert_int_eq(ratelimit_consume(&rl, 100, 1, 0, &w), -EAGAIN);
    ck_assert_uint_eq(w, 100 * MS);                  /* ops: 1 per 100 ms */
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 0), 900);   /* bytes not charged */
    ck_assert_int_eq(ratelimit_consume(&rl, 950, 0, 0, &w), -EAGAIN);
    ck_assert_uint_eq(w, 50 * MS);                   /* bytes: 1 per ms */
    ck_assert_int_eq(ratelimit_consume(&rl, 950, 1, 0, &w), -EAGAIN);
    ck_assert_uint_eq(w, 100 * MS);
    ck_assert_uint_eq(check_wait_exact(&rl, 950, 1, 0), 100 * MS);
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 100 * MS), 1000 - 100 - 950 + 100);
    ck_assert_int_eq(ratelimit_tokens(&rl, 1, 100 * MS), 0);
}
END_TEST

START_TEST(oversize_request_goes_into_debt)
{
    struct ratelimit rl;
    struct ratelimit_cfg c = bw_only(100, 0, 1000);      /* 1 token per 10 ms */
    ratelimit_init(&rl, &c, 0);
    ck_assert_int_eq(ratelimit_consume(&rl, 1, 0, 0, NULL), 0);
    uint64_t w;
    /* not full: an oversize request waits for a full bucket */
    ck_assert_int_eq(ratelimit_consume(&rl, 250, 0, 0, &w), -EAGAIN);
    ck_assert_uint_eq(w, 10 * MS);
    ck_assert_int_eq(ratelimit_consume(&rl, 250, 0, w, NULL), 0);
    ck_assert_uint_eq(rl.stats.oversize, 1);
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, w), -150);
    /* the debt is paid before anything passes: 160 tokens for 10 bytes */
    ck_assert_uint_eq(check_wait_exact(&rl, 10, 0, w), 1600 * MS);
    /* long run: 20 oversize requests of 250 take 250*20/100 refill times */
    ratelimit_init(&rl, &c, 0);
    uint64_t t = 0;
    for (int i = 0; i < 20; i++) {
        if (ratelimit_consume(&rl, 250, 0, t, &w) == -EAGAIN) {
            t += w;
            ck_assert_int_eq(ratelimit_consume(&rl, 250, 0, t, NULL), 0);
        }
    }
    /* the first went at 0 from a full bucket; each later one waited for
     * 150 debt + 100 to refill: 19 * 2.5 s */
    ck_assert_uint_eq(t, 19 * 2500 * MS);
}
END_TEST

START_TEST(refund_reverses_a_charge)
{
    struct ratelimit rl;
    struct ratelimit_cfg c = { .bandwidth = { 1000, 300, 1000 }, .ops = { 10, 0, 1000 } };
    ratelimit_init(&rl, &c, 0);
    ck_assert_int_eq(ratelimit_consume(&rl, 500, 1, 0, NULL), 0);   /* 300 burst + 200 */
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 0), 800);
    ck_assert_uint_eq(rl.bw.burst, 0);
    ratelimit_refund(&rl, 500, 1);
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 0), 1000);
    ck_assert_uint_eq(rl.bw.burst, 300);
    ck_assert_int_eq(ratelimit_tokens(&rl, 1, 0), 10);
    /* never above size + configured burst */
    ratelimit_refund(&rl, 1u << 30, 1u << 30);
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 0), 1000);
    ck_assert_uint_eq(rl.bw.burst, 300);
    ck_assert_int_eq(ratelimit_tokens(&rl, 1, 0), 10);
    /* a refund pays back a debt first */
    struct ratelimit_cfg d = bw_only(100, 0, 1000);
    ratelimit_init(&rl, &d, 0);
    ck_assert_int_eq(ratelimit_consume(&rl, 300, 0, 0, NULL), 0);
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 0), -200);
    ratelimit_refund(&rl, 300, 0);
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 0), 100);
    ck_assert_int_eq(ratelimit_consume(&rl, 100, 0, 0, NULL), 0);
    /* unlimited buckets ignore refunds */
    ratelimit_init(&rl, NULL, 0);
    ratelimit_refund(&rl, 5, 5);
    ck_assert(ratelimit_unlimited(&rl));
}
END_TEST

START_TEST(update_at_run_time)
{
    struct ratelimit rl;
    struct ratelimit_cfg a = bw_only(1000, 400, 1000);
    ratelimit_init(&rl, &a, 0);
    ck_assert_int_eq(ratelimit_consume(&rl, 700, 0, 0, NULL), 0);   /* 400 burst + 300 */
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 0), 700);
    rl.stats.throttled = 5;

    /* smaller: tokens refilled at the old rate to now, then capped */
    struct ratelimit_cfg b = bw_only(200, 100, 100);
    ck_assert_int_eq(ratelimit_update(&rl, &b, 100 * MS), 0);
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 100 * MS), 200);
    ck_assert_uint_eq(rl.bw.burst, 0);          /* spent burst not re-granted */
    ck_assert_uint_eq(rl.stats.throttled, 5);   /* counters kept */
    ck_assert_int_eq(ratelimit_consume(&rl, 200, 0, 100 * MS, NULL), 0);
    ck_assert_uint_eq(check_wait_exact(&rl, 2, 0, 100 * MS), 1 * MS);    /* new rate: 2/ms */

    /* larger: tokens kept (not raised to the new size), new rate */
    struct ratelimit_cfg c2 = bw_only(10000, 0, 1000);
    ck_assert_int_eq(ratelimit_update(&rl, &c2, 101 * MS), 0);
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 101 * MS), 0);
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 102 * MS), 10);

    /* a debt survives an update */
    ck_assert_int_eq(ratelimit_update(&rl, &c2, 1200 * MS), 0);
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 1200 * MS), 10000);
    ck_assert_int_eq(ratelimit_consume(&rl, 25000, 0, 1200 * MS, NULL), 0);
    ck_assert_int_eq(ratelimit_update(&rl, &a, 1200 * MS), 0);
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 1200 * MS), -15000);
    ck_assert_uint_eq(rl.bw.burst, 0);

    /* remaining burst capped at the new one_time_burst */
    ratelimit_init(&rl, &a, 0);
    ck_assert_int_eq(ratelimit_update(&rl, &b, 0), 0);
    ck_assert_uint_eq(rl.bw.burst, 100);
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 0), 200);

    /* limited -> unlimited -> limited: the last is fresh (full + burst) */
    ck_assert_int_eq(ratelimit_update(&rl, NULL, 0), 0);
    ck_assert(ratelimit_unlimited(&rl));
    ck_assert_int_eq(ratelimit_consume(&rl, 1u << 30, 0, 0, NULL), 0);
    ck_assert_int_eq(ratelimit_update(&rl, &a, 5 * S), 0);
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 5 * S), 1000);
    ck_assert_uint_eq(rl.bw.burst, 400);

    /* adding an ops bucket leaves the bandwidth bucket as it was */
    ck_assert_int_eq(ratelimit_consume(&rl, 1400, 0, 5 * S, NULL), 0);
    struct ratelimit_cfg e = { .bandwidth = a.bandwidth, .ops = { 5, 0, 1000 } };
    ck_assert_int_eq(ratelimit_update(&rl, &e, 5 * S), 0);
    ck_assert_int_eq(ratelimit_tokens(&rl, 0, 5 * S), 0);
    ck_assert_int_eq(ratelimit_tokens(&rl, 1, 5 * S), 5);
    struct ratelimit_cfg g;
    ratelimit_get_cfg(&rl, &g);
    ck_assert(memcmp(&g, &e, sizeof g) == 0);

    /* a bad update changes nothing */
    struct ratelimit before;
    memcpy(&before, &rl, sizeof rl);
    struct ratelimit_cfg bad = ops_only(1, 0, RATELIMIT_MAX_REFILL_MS + 1);
    ck_assert_int_eq(ratelimit_update(&rl, &bad, 6 * S), -EINVAL);
    ck_assert(memcmp(&before, &rl, sizeof rl) == 0);
}
END_TEST

/* A greedy sender for 5 simulated seconds: it takes as long as the limiter
 * allows, then sleeps for the wait it was told plus a timer's lateness.
 * Returns units (bytes or ops) that went through. */
static uint64_t stream(struct ratelimit *rl, int bytes_mode, uint64_t (*size_of)(unsigned),
                       uint64_t jitter_ns, uint64_t *sent_ops)
{
    uint64_t t = 0, through = 0, ops = 0;
    unsigned i = 0;
    while (1) {
        uint64_t n = size_of(i);
        uint64_t w;
        if (ratelimit_consume(rl, n, 1, t, &w) == 0) {
            if (t > 5 * S)
                break;
            through += bytes_mode ? n : 1;
            ops++;
            i++;
            t += 200;                   /* the device's own time per frame */
        } else {
            t += w + jitter_ns;
        }
    }
    *sent_ops = ops;
    return through;
}

static uint64_t mtu(unsigned i) { (void)i; return 1514; }
static uint64_t small(unsigned i) { (void)i; return 64; }
static uint64_t mixed(unsigned i) { return 60 + (i * 2654435761u) % 65000; }   /* up to 64 KiB: many above size */

START_TEST(five_second_stream_within_ten_percent)
{
    struct ratelimit rl;
    uint64_t ops;
    /* 1 MB/s in 100 kB buckets (refill 100 ms), MTU frames */
    struct ratelimit_cfg c = bw_only(100000, 0, 100);
    ratelimit_init(&rl, &c, 0);
    uint64_t b = stream(&rl, 1, mtu, 50000, &ops);
    ck_assert_uint_ge(b, 5000000 * 9 / 10);
    ck_assert_uint_le(b, 5000000 * 11 / 10);
    ck_assert_uint_gt(rl.stats.throttled, 0);

    /* the same with a 2 MB one-time burst: observed = rate*5 s + burst */
    struct ratelimit_cfg cb = bw_only(100000, 2000000, 100);
    ratelimit_init(&rl, &cb, 0);
    b = stream(&rl, 1, mtu, 50000, &ops);
    ck_assert_uint_ge(b, 7000000 * 9 / 10);
    ck_assert_uint_le(b, 7000000 * 11 / 10);

    /* 16.4 MB/s (32 KiB per 2 ms) with frames up to 64 KiB, most above
     * the bucket's size (they go into debt) */
    struct ratelimit_cfg m = bw_only(32768, 0, 2);   /* 16.4 MB/s */
    ratelimit_init(&rl, &m, 0);
    b = stream(&rl, 1, mixed, 10000, &ops);
    uint64_t want = 32768ull * 500 * 5;
    ck_assert_uint_ge(b, want * 9 / 10);
    ck_assert_uint_le(b, want * 11 / 10);
    ck_assert_uint_gt(rl.stats.oversize, 0);

    /* ops-bound: 10,000 ops/s (size 100, refill 10 ms), 64-byte frames,
     * with a bandwidth bucket that is never the limit */
    struct ratelimit_cfg o = { .bandwidth = { 10000000, 0, 1000 }, .ops = { 100, 0, 10 } };
    ratelimit_init(&rl, &o, 0);
    b = stream(&rl, 0, small, 20000, &ops);
    ck_assert_uint_ge(ops, 50000 * 9 / 10);
    ck_assert_uint_le(ops, 50000 * 11 / 10);
}
END_TEST

/* ---- JSON shape ---- */

static int parse(const char *s, struct ratelimit_cfg *c, char *why)
{
    return ratelimit_cfg_from_json(s, strlen(s), c, why, 200);
}

START_TEST(json_full_and_partial)
{
    struct ratelimit_cfg c;
    char why[200] = "";
    ck_assert_int_eq(parse("{\"bandwidth\": {\"size\": 1048576, \"one_time_burst\": 5000000, "
                           "\"refill_time\": 1000}, \"ops\": {\"size\": 100, \"refill_time\": 10}}",
                           &c, why), 0);
    ck_assert_uint_eq(c.bandwidth.size, 1048576);
    ck_assert_uint_eq(c.bandwidth.one_time_burst, 5000000);
    ck_assert_uint_eq(c.bandwidth.refill_time_ms, 1000);
    ck_assert_uint_eq(c.ops.size, 100);
    ck_assert_uint_eq(c.ops.one_time_burst, 0);
    ck_assert_uint_eq(c.ops.refill_time_ms, 10);

    ck_assert_int_eq(parse("{}", &c, why), 0);
    ck_assert(c.bandwidth.size == 0 && c.ops.size == 0);
    ck_assert_int_eq(parse("{\"bandwidth\": null, \"ops\": {\"size\": 1, \"refill_time\": 1, "
                           "\"one_time_burst\": null}}", &c, why), 0);
    ck_assert(c.bandwidth.size == 0 && c.ops.size == 1 && c.ops.one_time_burst == 0);
    ck_assert_int_eq(parse("{\"ops\": {\"size\": 9223372036854775807, \"refill_time\": 0}}", &c, why), 0);
    ck_assert_uint_eq(c.ops.size, 9223372036854775807ull);

    /* the writer round-trips */
    struct ratelimit_cfg in = { .bandwidth = { 1000, 7, 50 }, .ops = { 10, 0, 1000 } }, out;
    char *s = ratelimit_cfg_to_json(&in);
    ck_assert_ptr_nonnull(s);
    ck_assert_str_eq(s, "{\"bandwidth\":{\"size\":1000,\"one_time_burst\":7,\"refill_time\":50},"
                        "\"ops\":{\"size\":10,\"refill_time\":1000}}");
    ck_assert_int_eq(parse(s, &out, why), 0);
    ck_assert(memcmp(&in, &out, sizeof in) == 0);
    free(s);
    struct ratelimit_cfg none = { 0 };
    s = ratelimit_cfg_to_json(&none);
    ck_assert_str_eq(s, "{}");
    free(s);
    struct ratelimit_cfg huge = bw_only(UINT64_MAX, 0, 1);
    ck_assert_ptr_null(ratelimit_cfg_to_json(&huge));
}
END_TEST

START_TEST(json_malformed)
{
    static const struct { const char *in, *why; } bad[] = {
        { "", "JSON" },
        { "{", "JSON" },
        { "[]", "is a JSON object" },
        { "{\"bandwidth\": 5}", "\"bandwidth\" is not an object" },
        { "{\"bandwith\": {}}", "unknown member \"bandwith\"" },
        { "{\"bandwidth\": {\"size\": 1}}", "bandwidth: \"refill_time\" is required" },
        { "{\"ops\": {\"refill_time\": 1}}", "ops: \"size\" is required" },
        { "{\"ops\": {\"size\": -1, \"refill_time\": 1}}", "ops: \"size\" is negative" },
        { "{\"ops\": {\"size\": 1.5, \"refill_time\": 1}}", "ops: \"size\" is not an integer" },
        { "{\"ops\": {\"size\": \"1\", \"refill_time\": 1}}", "ops: \"size\" is not an integer" },
        { "{\"ops\": {\"size\": 1, \"refill_time\": true}}", "ops: \"refill_time\" is not an integer" },
        { "{\"ops\": {\"size\": 1, \"refill_time\": 1, \"one_time_burst\": -5}}", "negative" },
        { "{\"ops\": {\"size\": 1, \"refill_time\": 1, \"one_time_bust\": 5}}", "unknown member \"one_time_bust\"" },
        { "{\"ops\": {\"size\": 18446744073709551615, \"refill_time\": 1}}", "JSON" },
        { "{\"ops\": {\"size\": 1, \"refill_time\": 1099511627777}}", "above the limit" },
        { "{\"ops\": {\"size\": 1, \"refill_time\": 1}, \"ops\": {\"size\": 2, \"refill_time\": 1}}", "duplicate" },
        { "{\"ops\": {}} x", "JSON" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct ratelimit_cfg c;
        memset(&c, 0x5a, sizeof c);
        char why[200] = "";
        ck_assert_msg(parse(bad[i].in, &c, why) == -EINVAL, "accepted: %s", bad[i].in);
        ck_assert_msg(strstr(why, bad[i].why), "%s: why \"%s\"", bad[i].in, why);
        ck_assert(c.bandwidth.size == 0 && c.ops.size == 0 && c.ops.refill_time_ms == 0);
    }
    /* NULL why is fine */
    struct ratelimit_cfg c;
    ck_assert_int_eq(ratelimit_cfg_from_json("[", 1, &c, NULL, 0), -EINVAL);
    ck_assert_int_eq(ratelimit_cfg_from_value(NULL, &c, NULL, 0), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ratelimit");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, unlimited_buckets);
    tcase_add_test(tc, starts_full_then_refills_at_rate);
    tcase_add_test(tc, fractional_refill_is_exact);
    tcase_add_test(tc, no_overflow_large_sizes_long_idle);
    tcase_add_test(tc, clock_going_back_gives_nothing);
    tcase_add_test(tc, one_time_burst_is_spent_first_and_never_refills);
    tcase_add_test(tc, wait_time_is_exact);
    tcase_add_test(tc, oversize_request_goes_into_debt);
    tcase_add_test(tc, refund_reverses_a_charge);
    tcase_add_test(tc, update_at_run_time);
    tcase_add_test(tc, five_second_stream_within_ten_percent);
    tcase_add_test(tc, json_full_and_partial);
    tcase_add_test(tc, json_malformed);
    tcase_add_test(tc, locked_update_and_get);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
