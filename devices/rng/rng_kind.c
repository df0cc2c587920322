/* virtio-rng as a kind of device (devices/rng/rng_kind.h). */
#include "devices/rng/rng_kind.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devices/rng/virtio_rng.h"
#include "devices/virtio/ratelimit.h"

static const char *const rng_keys[] = { "bw", "ops", NULL };
/* a restore may give the limits anew; those it does not give stay */
static const char *const rng_override_keys[] = { "bw", "ops", NULL };

/* bw=/ops= into cfg; *have if either is given. */
static int limits(const struct devopts *o, struct ratelimit_cfg *cfg, int *have, char *why, size_t wlen)
{
    return ratelimit_from_named_opts("bw", devopt_get(o, "bw"), "ops", devopt_get(o, "ops"), cfg, have, why, wlen);
}

static int rng_check(const struct devopts *o, char *why, size_t wlen)
{
    struct ratelimit_cfg c;
    int have;
    return limits(o, &c, &have, why, wlen);
}

static void rng_id(const struct devopts *o, unsigned k, char *id)
{
    (void)o;
    (void)k;
    snprintf(id, VIRTIO_KIND_ID_MAX + 1, "rng");
}

static int rng_create(struct devopts *o, const char *id, bool restoring, int seccomp, struct virtio_made *out,
                      char *why, size_t wlen)
{
    (void)restoring;
    struct ratelimit_cfg c;
    int have;
    if (limits(o, &c, &have, why, wlen) < 0)
        return -EINVAL;
    struct virtio_rng_opts ro = { .name = id, .limit = have ? &c : NULL };
    struct virtio_rng *r;
    int e = virtio_rng_create(&ro, &r, why, wlen);
    if (e < 0)
        return e;
    *out = (struct virtio_made){ .ops = &virtio_rng_ops, .dev = r, .priv = r };
    return 0;
}

static const char *const rng_set_keys[] = { "bw", "ops", NULL };

/* A limiter's bucket anew (or off), the other as it is. */
static int rng_set(void *priv, const char *key, const char *value, char *why, size_t wlen)
{
    struct ratelimit_cfg c;
    virtio_rng_get_limit(priv, &c);
    if (ratelimit_set_bucket(&c, !strcmp(key, "ops"), value) < 0) {
        snprintf(why, wlen, "SIZE/REFILL_MS[/BURST] or off");
        return -EINVAL;
    }
    return virtio_rng_set_limit(priv, &c);
}

static const char *const rng_get_keys[] = { "stats", NULL };

static long rng_get(void *priv, const char *key, char *buf, size_t len)
{
    (void)key;
    struct virtio_rng_stats s;
    virtio_rng_get_stats(priv, &s);
    return snprintf(buf, len, "requests %llu bytes %llu bad %llu throttled %llu errors %llu\n",
                    (unsigned long long)s.requests, (unsigned long long)s.bytes, (unsigned long long)s.bad,
                    (unsigned long long)s.throttled, (unsigned long long)s.errors);
}

/* The device is the transport's (destroyed with it): nothing of ours. */
static void rng_free(void *priv) { (void)priv; }

const struct virtio_kind rng_kind = {
    .type = "rng",
    .name = "entropy device",
    .device_id = VIRTIO_ID_RNG,
    .max_per_vm = 1,
    .keys = rng_keys,
    .override_keys = rng_override_keys,
    .check = rng_check,
    .id = rng_id,
    .create = rng_create,
    .set = rng_set,
    .set_keys = rng_set_keys,
    .get = rng_get,
    .get_keys = rng_get_keys,
    .free = rng_free,
};
