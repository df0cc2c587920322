/* Device options (devices/virtio/devopt.h). */
#include "devices/virtio/devopt.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static bool key_ok(const char *k, size_t len)
{
    if (len == 0 || len > DEVOPT_KEY_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!((k[i] >= 'a' && k[i] <= 'z') || (k[i] >= '0' && k[i] <= '9') || k[i] == '_' || k[i] == '-'))
            return false;
    return true;
}

static struct devopt *find(const struct devopts *o, const char *key)
{
    for (size_t i = 0; i < o->n; i++)
        if (!strcmp(o->o[i].key, key))
            return (struct devopt *)&o->o[i];
    return NULL;
}

void devopt_init(struct devopts *o)
{
    o->n = 0;
    o->used = 0;
    o->buf[0] = 0;
}

int devopt_parse(const char *s, struct devopts *out, char *why, size_t wlen)
{
    devopt_init(out);
    if (!s || !*s)
        return 0;
    size_t len = strlen(s);
    if (len > DEVOPT_LEN_MAX) {
        snprintf(why, wlen, "options longer than %u bytes", DEVOPT_LEN_MAX);
        return -E2BIG;
    }
    memcpy(out->buf, s, len + 1);
    out->used = len + 1;
    char *p = out->buf;
    for (;;) {
        /* key[=value]: the value runs to the next ',', or, quoted, to
         * its closing '"' (then it may hold ','), which ends the option */
        char *eq = p + strcspn(p, "=,"), *val = NULL, *end;
        if (*eq == '=' && eq[1] == '"') {
            char *close = strchr(eq + 2, '"');
            if (!close || (close[1] && close[1] != ',')) {
                snprintf(why, wlen, "option '%.40s': a quoted value must end with '\"' before ',' or the end", p);
                return -EINVAL;
            }
            *eq = 0;
            *close = 0;
            val = eq + 2;
            end = close[1] ? close + 1 : NULL;
            if (end)
                *end = 0;
        } else {
            end = strchr(p, ',');
            if (end)
                *end = 0;
            if (*eq == '=') {
                *eq = 0;
                val = eq + 1;
            }
        }
        if (!*p && !val) {
            snprintf(why, wlen, "an empty option");
            return -EINVAL;
        }
        if (out->n == DEVOPT_MAX) {
            snprintf(why, wlen, "more than %u options", DEVOPT_MAX);
            return -E2BIG;
        }
        if (!key_ok(p, strlen(p))) {
            snprintf(why, wlen, "option '%.40s': a key is 1 to %u of a-z, 0-9, '_' or '-'", p, DEVOPT_KEY_MAX);
            return -EINVAL;
        }
        if (val && !*val) {
            snprintf(why, wlen, "option '%.40s=' without a value", p);
            return -EINVAL;
        }
        if (find(out, p)) {
            snprintf(why, wlen, "option '%.40s' given twice", p);
            return -EINVAL;
        }
        out->o[out->n++] = (struct devopt){ p, val };
        if (!end)
            return 0;
        p = end + 1;
    }
}

const char *devopt_get(const struct devopts *o, const char *key)
{
    const struct devopt *d = find(o, key);
    return d ? d->val ? d->val : "" : NULL;
}

int devopt_only(const struct devopts *o, const char *const *allowed, char *why, size_t wlen)
{
    for (size_t i = 0; i < o->n; i++) {
        size_t k = 0;
        while (allowed[k] && strcmp(allowed[k], o->o[i].key))
            k++;
        if (!allowed[k]) {
            snprintf(why, wlen, "unknown option '%.40s'", o->o[i].key);
            return -EINVAL;
        }
    }
    return 0;
}

/* Copy len bytes of s and a NUL into o's buffer: where, or NULL. */
static const char *store(struct devopts *o, const char *s, size_t len)
{
    if (len + 1 > sizeof(o->buf) - o->used)
        return NULL;
    char *p = o->buf + o->used;
    memcpy(p, s, len);
    p[len] = 0;
    o->used += len + 1;
    return p;
}

/* Add or replace key (klen bytes) with val (vlen bytes; NULL: a flag). */
static int set_n(struct devopts *o, const char *key, size_t klen, const char *val, size_t vlen)
{
    if (!key_ok(key, klen) || (val && (vlen == 0 || vlen > DEVOPT_LEN_MAX || memchr(val, 0, vlen))))
        return -EINVAL;
    char k[DEVOPT_KEY_MAX + 1];
    memcpy(k, key, klen);
    k[klen] = 0;
    struct devopt *d = find(o, k);
    if (!d && o->n == DEVOPT_MAX)
        return -E2BIG;
    const char *ks = d ? d->key : store(o, key, klen), *vs = NULL;
    if (!ks || (val && !(vs = store(o, val, vlen))))
        return -E2BIG;
    if (!d)
        d = &o->o[o->n++];
    *d = (struct devopt){ ks, vs };
    return 0;
}

int devopt_set(struct devopts *o, const char *key, const char *val)
{
    if (!key)
        return -EINVAL;
    return set_n(o, key, strlen(key), val, val ? strlen(val) : 0);
}

void devopt_del(struct devopts *o, const char *key)
{
    struct devopt *d = find(o, key);
    if (!d)
        return;
    size_t i = (size_t)(d - o->o);
    memmove(&o->o[i], &o->o[i + 1], (o->n - i - 1) * sizeof(o->o[0]));
    o->n--;
}

int devopt_copy(struct devopts *dst, const struct devopts *src)
{
    devopt_init(dst);
    for (size_t i = 0; i < src->n; i++) {
        int r = devopt_set(dst, src->o[i].key, src->o[i].val);
        if (r < 0)
            return r;
    }
    return 0;
}

long devopt_encode(const struct devopts *o, uint8_t *buf, size_t cap)
{
    size_t n = 1;
    if (cap < 1)
        return -ENOSPC;
    buf[0] = (uint8_t)o->n;
    for (size_t i = 0; i < o->n; i++) {
        size_t kl = strlen(o->o[i].key), vl = o->o[i].val ? strlen(o->o[i].val) : 0;
        if (kl > DEVOPT_KEY_MAX || vl > DEVOPT_LEN_MAX)
            return -EINVAL;
        if (cap - n < 4 + kl + vl)
            return -ENOSPC;
        buf[n] = (uint8_t)kl;
        buf[n + 1] = o->o[i].val ? 1 : 0;
        buf[n + 2] = (uint8_t)(vl & 0xff);
        buf[n + 3] = (uint8_t)(vl >> 8);
        memcpy(buf + n + 4, o->o[i].key, kl);
        memcpy(buf + n + 4 + kl, o->o[i].val ? o->o[i].val : "", vl);
        n += 4 + kl + vl;
    }
    return (long)n;
}

static int fail(const char **why, const char *msg)
{
    if (why)
        *why = msg;
    return -EINVAL;
}

int devopt_decode(const uint8_t *data, size_t len, struct devopts *out, const char **why)
{
    devopt_init(out);
    if (len < 1)
        return fail(why, "device options: empty record");
    size_t count = data[0], p = 1;
    if (count > DEVOPT_MAX)
        return fail(why, "device options: more options than a device takes");
    for (size_t i = 0; i < count; i++) {
        if (len - p < 4)
            return fail(why, "device options: an option past the end of the record");
        size_t kl = data[p], vl = (size_t)data[p + 2] | (size_t)data[p + 3] << 8;
        unsigned flags = data[p + 1];
        if (flags > 1)
            return fail(why, "device options: unknown option flags");
        if (len - p - 4 < kl + vl)
            return fail(why, "device options: an option past the end of the record");
        if (!flags && vl)
            return fail(why, "device options: a flag with a value");
        const char *k = (const char *)data + p + 4, *v = k + kl;
        if (!key_ok(k, kl))
            return fail(why, "device options: a malformed key");
        char kc[DEVOPT_KEY_MAX + 1];
        memcpy(kc, k, kl);
        kc[kl] = 0;
        if (find(out, kc))
            return fail(why, "device options: a key given twice");
        if (flags && (vl == 0 || vl > DEVOPT_LEN_MAX || memchr(v, 0, vl)))
            return fail(why, "device options: an empty, over-long or NUL-holding value");
        if (set_n(out, k, kl, flags ? v : NULL, vl) < 0)
            return fail(why, "device options: too large");
        p += 4 + kl + vl;
    }
    if (p != len)
        return fail(why, "device options: bytes after the last option");
    return 0;
}
