/* moat serve's metrics time series (docs/serve.md, "Metrics"): per
 * sandbox, a ring of the samples the reaper takes while it runs, bounded,
 * read back over a time range as getMetrics({start, end}) asks. Pure. */
#ifndef MOAT_SERVE_METRICS_H
#define MOAT_SERVE_METRICS_H

#include <stddef.h>
#include <stdint.h>

#define SERVE_METRICS_EVERY 5.0     /* seconds between samples */
#define SERVE_METRICS_KEEP  720     /* samples kept per sandbox: an hour */

struct serve_sample {
    double t;                   /* Unix seconds */
    double cpu_pct;             /* over the interval before t */
    uint64_t mem_used;          /* bytes */
};

struct serve_ring {
    struct serve_sample s[SERVE_METRICS_KEEP];
    size_t head, n;             /* the next slot; how many are kept */
};

/* Keep x, dropping the oldest when full. Samples must come in time order:
 * one not after the newest is ignored (-EINVAL), else 0. */
int serve_ring_push(struct serve_ring *r, const struct serve_sample *x);
/* The kept samples with start <= t <= end (start < 0 / end < 0: open), in
 * time order, at most max into out; returns how many. */
size_t serve_ring_range(const struct serve_ring *r, double start, double end, struct serve_sample *out,
                        size_t max);
/* A metrics query value (start=, end=): Unix seconds, 1..12 decimal digits.
 * 0 and *t, or -EINVAL. */
int serve_metrics_time(const char *v, double *t);

#endif
