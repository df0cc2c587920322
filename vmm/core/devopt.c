/* Device option strings (vmm/core/devopt.h). */
#include "vmm/core/devopt.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static bool key_ok(const char *k)
{
    if (!*k)
        return false;
    for (; *k; k++)
        if (!((*k >= 'a' && *k <= 'z') || (*k >= '0' && *k <= '9') || *k == '_' || *k == '-'))
            return false;
    return true;
}

int devopt_parse(const char *s, struct devopts *out, char *why, size_t wlen)
{
    out->n = 0;
    out->buf[0] = 0;
    if (!s || !*s)
        return 0;
    size_t len = strlen(s);
    if (len > DEVOPT_LEN_MAX) {
        snprintf(why, wlen, "options longer than %u bytes", DEVOPT_LEN_MAX);
        return -E2BIG;
    }
    memcpy(out->buf, s, len + 1);
    char *p = out->buf;
    for (;;) {
        char *end = strchr(p, ',');
        if (end)
            *end = 0;
        if (!*p) {
            snprintf(why, wlen, "an empty option");
            return -EINVAL;
        }
        if (out->n == DEVOPT_MAX) {
            snprintf(why, wlen, "more than %u options", DEVOPT_MAX);
            return -E2BIG;
        }
        char *eq = strchr(p, '=');
        if (eq)
            *eq = 0;
        if (!key_ok(p)) {
            snprintf(why, wlen, "option '%.40s': a key is a-z, 0-9, '_' or '-'", p);
            return -EINVAL;
        }
        if (eq && !eq[1]) {
            snprintf(why, wlen, "option '%.40s=' without a value", p);
            return -EINVAL;
        }
        for (size_t i = 0; i < out->n; i++)
            if (!strcmp(out->o[i].key, p)) {
                snprintf(why, wlen, "option '%.40s' given twice", p);
                return -EINVAL;
            }
        out->o[out->n++] = (struct devopt){ p, eq ? eq + 1 : NULL };
        if (!end)
            return 0;
        p = end + 1;
    }
}

const char *devopt_get(const struct devopts *o, const char *key)
{
    for (size_t i = 0; i < o->n; i++)
        if (!strcmp(o->o[i].key, key))
            return o->o[i].val ? o->o[i].val : "";
    return NULL;
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
