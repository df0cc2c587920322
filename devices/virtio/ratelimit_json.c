/* Firecracker's rate-limiter JSON shape (see ratelimit_json.h). */
#include "devices/virtio/ratelimit_json.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

__attribute__((format(printf, 3, 4)))
static int fail(char *why, size_t whylen, const char *fmt, ...)
{
    if (why && whylen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whylen, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

static int get_u64(const json_t *o, const char *bname, const char *key, int required,
                   uint64_t *out, char *why, size_t whylen)
{
    const json_t *v = json_object_get(o, key);
    *out = 0;
    if (!v || json_is_null(v)) {
        if (required)
            return fail(why, whylen, "%s: \"%s\" is required", bname, key);
        return 0;
    }
    if (!json_is_integer(v))
        return fail(why, whylen, "%s: \"%s\" is not an integer", bname, key);
    json_int_t n = json_integer_value(v);
    if (n < 0)
        return fail(why, whylen, "%s: \"%s\" is negative", bname, key);
    *out = (uint64_t)n;
    return 0;
}

static int bucket(const json_t *top, const char *name, struct ratelimit_bucket_cfg *c,
                  char *why, size_t whylen)
{
    memset(c, 0, sizeof *c);
    const json_t *o = json_object_get(top, name);
    if (!o || json_is_null(o))
        return 0;
    if (!json_is_object(o))
        return fail(why, whylen, "\"%s\" is not an object", name);
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)o, key, v) {
        if (strcmp(key, "size") && strcmp(key, "one_time_burst") && strcmp(key, "refill_time"))
            return fail(why, whylen, "%s: unknown member \"%s\"", name, key);
    }
    int r = get_u64(o, name, "size", 1, &c->size, why, whylen);
    if (!r)
        r = get_u64(o, name, "refill_time", 1, &c->refill_time_ms, why, whylen);
    if (!r)
        r = get_u64(o, name, "one_time_burst", 0, &c->one_time_burst, why, whylen);
    return r;
}

int ratelimit_cfg_from_value(const struct json_t *v, struct ratelimit_cfg *out,
                             char *why, size_t whylen)
{
    memset(out, 0, sizeof *out);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_object(v))
        return fail(why, whylen, "a rate limiter is a JSON object");
    const char *key;
    json_t *m;
    json_object_foreach((json_t *)v, key, m) {
        if (strcmp(key, "bandwidth") && strcmp(key, "ops"))
            return fail(why, whylen, "unknown member \"%s\"", key);
    }
    struct ratelimit_cfg c;
    int r = bucket(v, "bandwidth", &c.bandwidth, why, whylen);
    if (!r)
        r = bucket(v, "ops", &c.ops, why, whylen);
    if (!r)
        r = ratelimit_cfg_check(&c, why, whylen);
    if (!r)
        *out = c;
    return r;
}

int ratelimit_cfg_from_json(const char *text, size_t len, struct ratelimit_cfg *out,
                            char *why, size_t whylen)
{
    memset(out, 0, sizeof *out);
    json_error_t err;
    json_t *v = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    if (!v) {
        if (why && whylen)
            snprintf(why, whylen, "JSON: %s (line %d, column %d)", err.text, err.line,
                     err.column);
        return -EINVAL;
    }
    int r = ratelimit_cfg_from_value(v, out, why, whylen);
    json_decref(v);
    return r;
}

static int add_bucket(json_t *top, const char *name, const struct ratelimit_bucket_cfg *c)
{
    if (!c->size || !c->refill_time_ms)
        return 0;
    if (c->size > INT64_MAX || c->one_time_burst > INT64_MAX || c->refill_time_ms > INT64_MAX)
        return -ERANGE;
    json_t *o = json_object();
    if (!o || json_object_set_new(o, "size", json_integer((json_int_t)c->size)) ||
        (c->one_time_burst &&
         json_object_set_new(o, "one_time_burst", json_integer((json_int_t)c->one_time_burst))) ||
        json_object_set_new(o, "refill_time", json_integer((json_int_t)c->refill_time_ms))) {
        json_decref(o);
        return -ENOMEM;
    }
    return json_object_set_new(top, name, o) ? -ENOMEM : 0;
}

char *ratelimit_cfg_to_json(const struct ratelimit_cfg *cfg)
{
    json_t *top = json_object();
    char *s = NULL;
    if (top && !add_bucket(top, "bandwidth", &cfg->bandwidth) &&
        !add_bucket(top, "ops", &cfg->ops))
        s = json_dumps(top, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(top);
    return s;
}
