/* Token-bucket rate limiter, pure (see ratelimit.h). */
#include "devices/virtio/ratelimit.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

typedef unsigned __int128 u128;
typedef __int128 s128;

#define NS_PER_MS 1000000ull

static int limited(const struct ratelimit_bucket_cfg *c)
{
    return c->size != 0 && c->refill_time_ms != 0;
}

static int bucket_cfg_check(const struct ratelimit_bucket_cfg *c, const char *name,
                            char *why, size_t whylen)
{
    if (limited(c) && c->refill_time_ms > RATELIMIT_MAX_REFILL_MS) {
        if (why)
            snprintf(why, whylen, "%s: refill_time %llu ms is above the limit of %llu ms", name,
                     (unsigned long long)c->refill_time_ms,
                     (unsigned long long)RATELIMIT_MAX_REFILL_MS);
        return -EINVAL;
    }
    return 0;
}

int ratelimit_cfg_check(const struct ratelimit_cfg *cfg, char *why, size_t whylen)
{
    if (!cfg)
        return 0;
    int r = bucket_cfg_check(&cfg->bandwidth, "bandwidth", why, whylen);
    return r ? r : bucket_cfg_check(&cfg->ops, "ops", why, whylen);
}

static void bucket_init(struct ratelimit_bucket *b, const struct ratelimit_bucket_cfg *c,
                        uint64_t now_ns)
{
    memset(b, 0, sizeof *b);
    b->last_ns = now_ns;
    if (!c || !limited(c))
        return;
    b->size = c->size;
    b->refill_ms = c->refill_time_ms;
    b->refill_ns = c->refill_time_ms * NS_PER_MS;     /* < 2^60: checked */
    b->burst = b->burst_cfg = c->one_time_burst;
    b->tokens = (s128)c->size;
}

/* ceil(a / b), saturated to UINT64_MAX. */
static uint64_t div_ceil_sat(u128 a, u128 b)
{
    u128 q = a / b + (a % b != 0);
    return q > UINT64_MAX ? UINT64_MAX : (uint64_t)q;
}

/* Time (ns from the last refill) until tokens reach `target` (> tokens). */
static uint64_t time_to(const struct ratelimit_bucket *b, s128 target)
{
    u128 d = (u128)(target - b->tokens);             /* < 2^65 */
    u128 num = d * b->refill_ns - b->rem;            /* < 2^125; rem < refill_ns <= d * refill_ns */
    return div_ceil_sat(num, b->size);
}

static void refill(struct ratelimit_bucket *b, uint64_t now_ns)
{
    if (!b->size)
        return;
    if (now_ns <= b->last_ns)           /* no time passed (or a clock that went back) */
        return;
    uint64_t dt = now_ns - b->last_ns;
    b->last_ns = now_ns;
    if (b->tokens >= (s128)b->size) {
        b->rem = 0;
        return;
    }
    if (dt >= time_to(b, (s128)b->size)) {
        b->tokens = (s128)b->size;
        b->rem = 0;
        return;
    }
    /* dt < time to full, so size * dt < (size - tokens) * refill_ns + size < 2^126 */
    u128 acc = (u128)b->size * dt + b->rem;
    b->tokens += (s128)(acc / b->refill_ns);
    b->rem = (uint64_t)(acc % b->refill_ns);
}

/* Tokens the bucket must hold (burst included) to take `need`. */
static s128 target(const struct ratelimit_bucket *b, uint64_t need)
{
    return (s128)(need < b->size ? need : b->size);
}

/* 0 if b can take `need` now, else the wait in ns (>= 1). Refilled first. */
static uint64_t bucket_wait(struct ratelimit_bucket *b, uint64_t need, uint64_t now_ns)
{
    if (!b->size || !need)
        return 0;
    refill(b, now_ns);
    s128 have = b->tokens + (s128)b->burst;
    s128 t = target(b, need);
    if (have >= t)
        return 0;
    /* the burst never grows: the tokens alone must reach t - burst */
    uint64_t w = time_to(b, t - (s128)b->burst);
    return w ? w : 1;
}

static void bucket_take(struct ratelimit_bucket *b, uint64_t need, struct ratelimit_stats *st)
{
    if (!b->size || !need)
        return;
    if (need > b->size)
        st->oversize++;
    uint64_t from_burst = need < b->burst ? need : b->burst;
    b->burst -= from_burst;
    b->tokens -= (s128)(need - from_burst);      /* >= target - need > -2^64 */
}

int ratelimit_init(struct ratelimit *rl, const struct ratelimit_cfg *cfg, uint64_t now_ns)
{
    memset(rl, 0, sizeof *rl);
    bucket_init(&rl->bw, NULL, now_ns);
    bucket_init(&rl->ops, NULL, now_ns);
    if (!cfg)
        return 0;
    int r = ratelimit_cfg_check(cfg, NULL, 0);
    if (r)
        return r;
    bucket_init(&rl->bw, &cfg->bandwidth, now_ns);
    bucket_init(&rl->ops, &cfg->ops, now_ns);
    return 0;
}

static void bucket_update(struct ratelimit_bucket *b, const struct ratelimit_bucket_cfg *c,
                          uint64_t now_ns)
{
    if (!limited(c) || !b->size) {      /* to unlimited, or from unlimited: fresh */
        bucket_init(b, c, now_ns);
        return;
    }
    refill(b, now_ns);                  /* at the old rate, up to now */
    s128 tokens = b->tokens < (s128)c->size ? b->tokens : (s128)c->size;
    uint64_t burst = b->burst < c->one_time_burst ? b->burst : c->one_time_burst;
    uint64_t last = b->last_ns;         /* >= now_ns unless the clock went back */
    bucket_init(b, c, last);
    b->tokens = tokens;
    b->burst = burst;
}

int ratelimit_update(struct ratelimit *rl, const struct ratelimit_cfg *cfg, uint64_t now_ns)
{
    static const struct ratelimit_cfg none;
    if (!cfg)
        cfg = &none;
    int r = ratelimit_cfg_check(cfg, NULL, 0);
    if (r)
        return r;
    bucket_update(&rl->bw, &cfg->bandwidth, now_ns);
    bucket_update(&rl->ops, &cfg->ops, now_ns);
    return 0;
}

int ratelimit_consume(struct ratelimit *rl, uint64_t bytes, uint64_t ops, uint64_t now_ns,
                      uint64_t *wait_ns)
{
    uint64_t wb = bucket_wait(&rl->bw, bytes, now_ns);
    uint64_t wo = bucket_wait(&rl->ops, ops, now_ns);
    if (wb || wo) {
        rl->stats.throttled++;
        if (wait_ns)
            *wait_ns = wb > wo ? wb : wo;
        return -EAGAIN;
    }
    bucket_take(&rl->bw, bytes, &rl->stats);
    bucket_take(&rl->ops, ops, &rl->stats);
    if (wait_ns)
        *wait_ns = 0;
    return 0;
}

static void bucket_refund(struct ratelimit_bucket *b, uint64_t n)
{
    if (!b->size || !n)
        return;
    s128 room = (s128)b->size - b->tokens;
    if (room > 0) {
        uint64_t t = (s128)n < room ? n : (uint64_t)room;
        b->tokens += (s128)t;
        n -= t;
        if (b->tokens == (s128)b->size)
            b->rem = 0;
    }
    uint64_t broom = b->burst_cfg - b->burst;
    b->burst += n < broom ? n : broom;
}

void ratelimit_refund(struct ratelimit *rl, uint64_t bytes, uint64_t ops)
{
    bucket_refund(&rl->bw, bytes);
    bucket_refund(&rl->ops, ops);
}

int ratelimit_unlimited(const struct ratelimit *rl)
{
    return !rl->bw.size && !rl->ops.size;
}

int64_t ratelimit_tokens(struct ratelimit *rl, int which, uint64_t now_ns)
{
    struct ratelimit_bucket *b = which ? &rl->ops : &rl->bw;
    if (!b->size)
        return INT64_MAX;
    refill(b, now_ns);
    if (b->tokens > INT64_MAX)
        return INT64_MAX;
    if (b->tokens < INT64_MIN)
        return INT64_MIN;
    return (int64_t)b->tokens;
}

static void bucket_get_cfg(const struct ratelimit_bucket *b, struct ratelimit_bucket_cfg *c)
{
    c->size = b->size;
    c->refill_time_ms = b->size ? b->refill_ms : 0;
    c->one_time_burst = b->size ? b->burst_cfg : 0;
}

void ratelimit_get_cfg(const struct ratelimit *rl, struct ratelimit_cfg *cfg)
{
    bucket_get_cfg(&rl->bw, &cfg->bandwidth);
    bucket_get_cfg(&rl->ops, &cfg->ops);
}

/* One decimal u64 ending at a '/' or the end: the next char, or NULL. */
static const char *parse_u64(const char *s, uint64_t *v)
{
    if (*s < '0' || *s > '9')
        return NULL;
    uint64_t x = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (x > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
            return NULL;
        x = x * 10 + (uint64_t)(*s - '0');
    }
    *v = x;
    return *s == '/' || *s == 0 ? s : NULL;
}

int ratelimit_bucket_parse(const char *s, struct ratelimit_bucket_cfg *out)
{
    struct ratelimit_bucket_cfg c = { 0 };
    if (!s || !(s = parse_u64(s, &c.size)) || *s != '/' || !(s = parse_u64(s + 1, &c.refill_time_ms)))
        return -EINVAL;
    if (*s == '/' && !(s = parse_u64(s + 1, &c.one_time_burst)))
        return -EINVAL;
    if (*s || c.size == 0 || c.refill_time_ms == 0 || c.refill_time_ms > RATELIMIT_MAX_REFILL_MS)
        return -EINVAL;
    *out = c;
    return 0;
}

int ratelimit_from_opts(const char *bw, const char *ops, struct ratelimit_cfg *cfg, int *limited, int *bad)
{
    const char *v[2] = { bw, ops };
    struct ratelimit_bucket_cfg *b[2] = { &cfg->bandwidth, &cfg->ops };
    memset(cfg, 0, sizeof(*cfg));
    *limited = 0;
    for (int i = 0; i < 2; i++) {
        if (!v[i])
            continue;
        if (ratelimit_bucket_parse(v[i], b[i]) < 0) {
            if (bad)
                *bad = i;
            return -EINVAL;
        }
        *limited = 1;
    }
    return 0;
}

int ratelimit_from_named_opts(const char *bw_key, const char *bw, const char *ops_key, const char *ops,
                              struct ratelimit_cfg *cfg, int *limited, char *why, size_t wlen)
{
    int bad = 0;
    if (ratelimit_from_opts(bw, ops, cfg, limited, &bad) < 0) {
        snprintf(why, wlen, "%s=%.40s: SIZE/REFILL_MS[/BURST], each a positive number", bad ? ops_key : bw_key,
                 bad ? ops : bw);
        return -EINVAL;
    }
    return 0;
}

long ratelimit_cfg_to_opts(const struct ratelimit_cfg *cfg, const char *bw_key, const char *ops_key, char *buf,
                           size_t cap)
{
    const struct ratelimit_bucket_cfg *b[2] = { &cfg->bandwidth, &cfg->ops };
    const char *k[2] = { bw_key, ops_key };
    size_t n = 0;
    if (cap)
        buf[0] = 0;
    for (int i = 0; i < 2; i++) {
        if (!b[i]->size || !b[i]->refill_time_ms)
            continue;           /* unlimited: no option */
        if (b[i]->refill_time_ms > RATELIMIT_MAX_REFILL_MS)
            return -EINVAL;
        int w = snprintf(buf + (n < cap ? n : cap), n < cap ? cap - n : 0, "%s%s=%llu/%llu", n ? "," : "", k[i],
                         (unsigned long long)b[i]->size, (unsigned long long)b[i]->refill_time_ms);
        if (w < 0)
            return -EINVAL;
        n += (size_t)w;
        if (b[i]->one_time_burst) {
            w = snprintf(buf + (n < cap ? n : cap), n < cap ? cap - n : 0, "/%llu",
                         (unsigned long long)b[i]->one_time_burst);
            if (w < 0)
                return -EINVAL;
            n += (size_t)w;
        }
    }
    return n < cap ? (long)n : -ENOSPC;
}

int ratelimit_set_bucket(struct ratelimit_cfg *cfg, int ops, const char *value)
{
    struct ratelimit_bucket_cfg b = { 0 };
    if (!value || (strcmp(value, "off") && ratelimit_bucket_parse(value, &b) < 0))
        return -EINVAL;
    *(ops ? &cfg->ops : &cfg->bandwidth) = b;
    return 0;
}

int ratelimit_update_locked(struct ratelimit *rl, pthread_mutex_t *lk, const struct ratelimit_cfg *cfg,
                            uint64_t now_ns)
{
    pthread_mutex_lock(lk);
    int r = ratelimit_update(rl, cfg, now_ns);
    pthread_mutex_unlock(lk);
    return r;
}

void ratelimit_get_cfg_locked(const struct ratelimit *rl, pthread_mutex_t *lk, struct ratelimit_cfg *cfg)
{
    pthread_mutex_lock(lk);
    ratelimit_get_cfg(rl, cfg);
    pthread_mutex_unlock(lk);
}
