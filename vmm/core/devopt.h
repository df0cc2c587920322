/* A device's option string, as in `moat run --device TYPE,OPTIONS` and
 * struct moat_device: "key=value,flag,key=value". Pure: unit-tested. */
#ifndef MOAT_DEVOPT_H
#define MOAT_DEVOPT_H

#include <stddef.h>

#define DEVOPT_MAX      16      /* options per device */
#define DEVOPT_LEN_MAX  4096    /* bytes of the whole string */

struct devopt {
    const char *key;
    const char *val;            /* NULL: a flag (no '=') */
};

struct devopts {
    char buf[DEVOPT_LEN_MAX + 1];
    struct devopt o[DEVOPT_MAX];
    size_t n;
};

/* Split s (NULL or "" -> no options) into out: 0, or -EINVAL with a
 * message in why (an empty option or key, a key given twice, a value
 * that is empty) / -E2BIG (more than DEVOPT_MAX options, longer than
 * DEVOPT_LEN_MAX). Keys are [a-z0-9_-]; values anything but ','. */
int devopt_parse(const char *s, struct devopts *out, char *why, size_t wlen);
/* The option key's value ("" for a flag), or NULL if not given. */
const char *devopt_get(const struct devopts *o, const char *key);
/* 0 if every key is in allowed (NULL-terminated), else -EINVAL with the
 * first other key in why. */
int devopt_only(const struct devopts *o, const char *const *allowed, char *why, size_t wlen);

#endif
