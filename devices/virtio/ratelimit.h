/* Token-bucket rate limiter (Firecracker's shape), pure: no clock, no
 * timers, no locks. Time is passed in as now_ns (CLOCK_MONOTONIC
 * nanoseconds, clock_mono_ns()); the caller arms its own timer. Used by a
 * device's queues (virtio-net RX/TX, virtio-blk) to decide whether to take
 * the next request from the ring now or later.
 *
 * A limiter has two buckets: bandwidth (tokens are bytes) and ops (tokens
 * are requests). Each is configured by
 *   size            capacity in tokens; the bucket starts full;
 *   refill_time_ms  the time an empty bucket takes to become full again:
 *                   tokens come back continuously at size / refill_time;
 *   one_time_burst  an extra initial budget that does not refill: it is
 *                   spent before the bucket's own tokens, and once spent it
 *                   is gone for the life of the limiter (ratelimit_update
 *                   never grants a new one, see there).
 * A bucket with size 0 or refill_time_ms 0 is unlimited (as Firecracker).
 *
 * A request (bytes, ops) is taken whole or not at all, from both buckets
 * at once. A request needing more tokens than a bucket's size can never be
 * covered by it; it is allowed when the bucket is full (or the burst and
 * the tokens together hold at least `size`), and the bucket goes into debt
 * by the excess: the following requests wait until the refill has paid it
 * off. So the long-run rate stays size / refill_time whatever the request
 * sizes, and a large request is never stuck forever.
 *
 * Arithmetic is exact (integer tokens plus the fraction of a token in
 * 1/refill_ns units, 128-bit intermediates): no drift, no overflow for any
 * size up to 2^64-1, any idle time, refill times up to
 * RATELIMIT_MAX_REFILL_MS.
 *
 * Not thread-safe: one owner (the device's I/O thread); a run-time update
 * from another thread needs the owner's lock. */
#ifndef MOAT_RATELIMIT_H
#define MOAT_RATELIMIT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* Longest refill_time accepted (ms): about 34.8 years. Keeps every
 * intermediate product below 2^127. */
#define RATELIMIT_MAX_REFILL_MS (1ull << 40)

struct ratelimit_bucket_cfg {
    uint64_t size;              /* tokens; 0 = unlimited */
    uint64_t one_time_burst;    /* extra tokens spent first, never refilled */
    uint64_t refill_time_ms;    /* empty -> full; 0 = unlimited */
};

struct ratelimit_cfg {
    struct ratelimit_bucket_cfg bandwidth;   /* bytes */
    struct ratelimit_bucket_cfg ops;         /* requests */
};

/* One bucket's state (read it through the functions below). */
struct ratelimit_bucket {
    uint64_t size;              /* 0: unlimited */
    uint64_t refill_ns;
    uint64_t burst;             /* one-time burst left */
    uint64_t burst_cfg;         /* one_time_burst as configured */
    uint64_t refill_ms;         /* as configured */
    uint64_t rem;               /* fraction of a token, < refill_ns */
    uint64_t last_ns;           /* time of the last refill */
    __int128 tokens;            /* <= size; negative while in debt */
};

struct ratelimit_stats {
    uint64_t throttled;         /* ratelimit_consume calls answered -EAGAIN */
    uint64_t oversize;          /* requests larger than a bucket, let through into debt */
};

struct ratelimit {
    struct ratelimit_bucket bw, ops;
    struct ratelimit_stats stats;
};

/* Is this configuration acceptable? 0, or -EINVAL with a reason in why
 * (why may be NULL): a refill_time above RATELIMIT_MAX_REFILL_MS. */
int ratelimit_cfg_check(const struct ratelimit_cfg *cfg, char *why, size_t whylen);

/* Set up rl from cfg at now_ns: each limited bucket full, with its whole
 * one_time_burst. cfg NULL: both buckets unlimited. 0 or -EINVAL (rl then
 * unlimited). */
int ratelimit_init(struct ratelimit *rl, const struct ratelimit_cfg *cfg, uint64_t now_ns);

/* Change the configuration at run time (counters are kept). Per bucket:
 *   - new config unlimited: the bucket becomes unlimited;
 *   - was unlimited, now limited: as ratelimit_init (full, whole burst);
 *   - limited before and after: the old bucket is first refilled up to
 *     now_ns at the old rate; then it keeps its tokens, capped at the new
 *     size (a debt is kept too: changing the limit does not forgive it),
 *     and its remaining burst, capped at the new one_time_burst (an update
 *     never grants a new burst); refill continues at the new rate.
 * 0, or -EINVAL (rl unchanged). */
int ratelimit_update(struct ratelimit *rl, const struct ratelimit_cfg *cfg, uint64_t now_ns);

/* Take a request of `bytes` bytes and `ops` operations at now_ns. A count
 * of 0 does not consult that bucket. Returns
 *   0        allowed: both buckets were charged;
 *   -EAGAIN  not now: nothing was charged, stats.throttled counts it, and
 *            *wait_ns (may be NULL) is the time from now_ns after which the
 *            same request would be allowed (if nothing else is taken
 *            meanwhile); the device stops taking from its ring and arms a
 *            timer for it. Never 0 on -EAGAIN; UINT64_MAX when longer. */
int ratelimit_consume(struct ratelimit *rl, uint64_t bytes, uint64_t ops, uint64_t now_ns,
                      uint64_t *wait_ns);

/* Put back what ratelimit_consume took for a request that was not carried
 * out after all (e.g. a frame the backend would not take). Reverses the
 * charge: the bucket's tokens first (up to its size), then the burst (up
 * to its configured one_time_burst). Unlimited buckets ignore it. */
void ratelimit_refund(struct ratelimit *rl, uint64_t bytes, uint64_t ops);

/* 1 when both buckets are unlimited (the device can skip the limiter). */
int ratelimit_unlimited(const struct ratelimit *rl);

/* A bucket's tokens at now_ns after refill (negative while in debt),
 * clamped to INT64_MIN..INT64_MAX; for tests and statistics. which: 0 =
 * bandwidth, 1 = ops. Unlimited: INT64_MAX. */
int64_t ratelimit_tokens(struct ratelimit *rl, int which, uint64_t now_ns);

/* A bucket as a device option's value: "SIZE/REFILL_MS" or
 * "SIZE/REFILL_MS/BURST" (decimal; e.g. tx_bw=1048576/100 is 10 MiB/s).
 * 0, or -EINVAL (malformed, a zero size or refill, a refill above
 * RATELIMIT_MAX_REFILL_MS). Pure. */
int ratelimit_bucket_parse(const char *s, struct ratelimit_bucket_cfg *out);
/* A limiter from a device's two options, its bandwidth and ops buckets
 * (each NULL if not given, else ratelimit_bucket_parse's form) into cfg;
 * *limited if either was given. 0, or -EINVAL with *bad (may be NULL) set
 * to 0 (bandwidth) or 1 (ops): the value that is malformed. */
int ratelimit_from_opts(const char *bw, const char *ops, struct ratelimit_cfg *cfg, int *limited, int *bad);
/* The same, for a device's options named bw_key and ops_key (their values
 * bw and ops, each NULL if not given): -EINVAL with a message naming the
 * bad option and its value in why. */
int ratelimit_from_named_opts(const char *bw_key, const char *bw, const char *ops_key, const char *ops,
                              struct ratelimit_cfg *cfg, int *limited, char *why, size_t wlen);
/* The inverse: cfg as a device's options, "BW_KEY=SIZE/REFILL_MS[/BURST]"
 * and ",OPS_KEY=..." for each limited bucket ("" when both are unlimited),
 * into buf (NUL-terminated). Its length, or -ENOSPC (cap too small) or
 * -EINVAL (a refill time above RATELIMIT_MAX_REFILL_MS). Pure. For a
 * layer that gets a limiter as Firecracker's JSON
 * (devices/virtio/ratelimit_json.h) and makes a device from options:
 * e.g. PUT /entropy's rate_limiter to moat_device {"rng", "bw=...,ops=..."}. */
long ratelimit_cfg_to_opts(const struct ratelimit_cfg *cfg, const char *bw_key, const char *ops_key, char *buf,
                           size_t cap);
/* One bucket of cfg anew (the ops bucket if ops, else bandwidth), the other
 * as it is: value in ratelimit_bucket_parse's form, or "off" (unlimited).
 * 0, or -EINVAL (cfg unchanged). For run-time changes. */
int ratelimit_set_bucket(struct ratelimit_cfg *cfg, int ops, const char *value);
/* The configuration in force (what ratelimit_init/update was given,
 * normalized: an unlimited bucket reads all zero). */
void ratelimit_get_cfg(const struct ratelimit *rl, struct ratelimit_cfg *cfg);
/* ratelimit_update and ratelimit_get_cfg under lk, the owner's lock that
 * guards rl: a device's run-time set and get. */
int ratelimit_update_locked(struct ratelimit *rl, pthread_mutex_t *lk, const struct ratelimit_cfg *cfg,
                            uint64_t now_ns);
void ratelimit_get_cfg_locked(const struct ratelimit *rl, pthread_mutex_t *lk, struct ratelimit_cfg *cfg);

#endif
