/* moat serve's metrics ring (serve_metrics.h). */
#include <errno.h>
#include <string.h>

#include "vmm/api/e2b/serve_metrics.h"

int serve_ring_push(struct serve_ring *r, const struct serve_sample *x)
{
    if (r->n) {
        size_t last = (r->head + SERVE_METRICS_KEEP - 1) % SERVE_METRICS_KEEP;
        if (!(x->t > r->s[last].t))
            return -EINVAL;
    }
    r->s[r->head] = *x;
    r->head = (r->head + 1) % SERVE_METRICS_KEEP;
    if (r->n < SERVE_METRICS_KEEP)
        r->n++;
    return 0;
}

size_t serve_ring_range(const struct serve_ring *r, double start, double end, struct serve_sample *out,
                        size_t max)
{
    size_t k = 0;
    size_t first = (r->head + SERVE_METRICS_KEEP - r->n) % SERVE_METRICS_KEEP;
    for (size_t i = 0; i < r->n && k < max; i++) {
        const struct serve_sample *x = &r->s[(first + i) % SERVE_METRICS_KEEP];
        if ((start < 0 || x->t >= start) && (end < 0 || x->t <= end))
            out[k++] = *x;
    }
    return k;
}

int serve_metrics_time(const char *v, double *t)
{
    size_t n = v ? strlen(v) : 0;
    if (n < 1 || n > 12 || strspn(v, "0123456789") != n)
        return -EINVAL;
    double x = 0;
    for (size_t i = 0; i < n; i++)
        x = x * 10 + (v[i] - '0');
    *t = x;
    return 0;
}
