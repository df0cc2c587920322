/* moat serve's metrics ring (vmm/api/e2b/serve_metrics.c): order, the
 * bound, ranges, query times. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>

#include "vmm/api/e2b/serve_metrics.h"

START_TEST(ring_order_and_range)
{
    struct serve_ring *r = calloc(1, sizeof *r);
    static struct serve_sample out[SERVE_METRICS_KEEP + 8];
    ck_assert_uint_eq(serve_ring_range(r, -1, -1, out, 10), 0);
    for (int i = 1; i <= 5; i++)
        ck_assert_int_eq(serve_ring_push(r, &(struct serve_sample){ .t = 100.0 * i, .cpu_pct = i, .mem_used = 10u * i }),
                         0);
    ck_assert_int_eq(serve_ring_push(r, &(struct serve_sample){ .t = 500 }), -EINVAL);   /* not after */
    ck_assert_int_eq(serve_ring_push(r, &(struct serve_sample){ .t = 50 }), -EINVAL);
    ck_assert_uint_eq(serve_ring_range(r, -1, -1, out, 10), 5);
    ck_assert(out[0].t == 100 && out[4].t == 500 && out[4].mem_used == 50);
    ck_assert_uint_eq(serve_ring_range(r, 200, 400, out, 10), 3);            /* inclusive */
    ck_assert(out[0].t == 200 && out[2].t == 400 && out[1].cpu_pct == 3);
    ck_assert_uint_eq(serve_ring_range(r, 250, -1, out, 10), 3);
    ck_assert_uint_eq(serve_ring_range(r, -1, 250, out, 10), 2);
    ck_assert_uint_eq(serve_ring_range(r, 401, 499, out, 10), 0);
    ck_assert_uint_eq(serve_ring_range(r, -1, -1, out, 2), 2);               /* max */
    ck_assert(out[1].t == 200);
    free(r);
}
END_TEST

START_TEST(ring_bound)
{
    struct serve_ring *r = calloc(1, sizeof *r);
    static struct serve_sample out[SERVE_METRICS_KEEP + 8];
    for (int i = 1; i <= SERVE_METRICS_KEEP + 5; i++)
        ck_assert_int_eq(serve_ring_push(r, &(struct serve_sample){ .t = i }), 0);
    ck_assert_uint_eq(r->n, SERVE_METRICS_KEEP);
    size_t k = serve_ring_range(r, -1, -1, out, SERVE_METRICS_KEEP + 8);
    ck_assert_uint_eq(k, SERVE_METRICS_KEEP);
    ck_assert(out[0].t == 6 && out[k - 1].t == SERVE_METRICS_KEEP + 5);     /* the oldest dropped */
    for (size_t i = 1; i < k; i++)
        ck_assert(out[i].t > out[i - 1].t);
    free(r);
}
END_TEST

START_TEST(query_times)
{
    double t;
    ck_assert_int_eq(serve_metrics_time("1767323045", &t), 0);
    ck_assert(t == 1767323045.0);
    ck_assert_int_eq(serve_metrics_time("0", &t), 0);
    ck_assert(t == 0);
    static const char *const bad[] = { "", "-1", "1.5", "1e9", " 1", "abc", "1234567890123" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(serve_metrics_time(bad[i], &t) == -EINVAL, "%s", bad[i]);
    ck_assert_int_eq(serve_metrics_time(NULL, &t), -EINVAL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("serve_metrics");
    TCase *tc = tcase_create("ring");
    tcase_add_test(tc, ring_order_and_range);
    tcase_add_test(tc, ring_bound);
    tcase_add_test(tc, query_times);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
