/* A device's options: `moat run --device TYPE,OPTIONS`, struct moat_device,
 * and a device's snapshot record (docs/snapshot-format.md): the options
 * that make the device again. "key=value,flag,key=value" as a string; a
 * length-prefixed list in a snapshot (values may then hold ','). Pure:
 * unit-tested and fuzzed (a snapshot's record is untrusted input). */
#ifndef MOAT_DEVOPT_H
#define MOAT_DEVOPT_H

#include <stddef.h>
#include <stdint.h>

#define DEVOPT_MAX      16      /* options per device */
#define DEVOPT_LEN_MAX  4096    /* bytes of an option string; of one value */
#define DEVOPT_KEY_MAX  32      /* bytes of a key */
#define DEVOPT_BUF      (4 * DEVOPT_LEN_MAX)

struct devopt {
    const char *key;
    const char *val;            /* NULL: a flag (no '=') */
};

/* Keys and values point into buf: copy one with devopt_copy, not '='. */
struct devopts {
    char buf[DEVOPT_BUF];
    size_t used;                /* bytes of buf in use */
    struct devopt o[DEVOPT_MAX];
    size_t n;
};

/* Split s (NULL or "" -> no options) into out: 0, or -EINVAL with a
 * message in why (an empty option or key, a key given twice, a value
 * that is empty) / -E2BIG (more than DEVOPT_MAX options, longer than
 * DEVOPT_LEN_MAX), or a quoted value not closed before ',' or the end.
 * Keys are [a-z0-9_-], at most DEVOPT_KEY_MAX bytes; values anything but
 * ',', or, in double quotes (key="a,b"), anything but '"'. */
int devopt_parse(const char *s, struct devopts *out, char *why, size_t wlen);
/* The option key's value ("" for a flag), or NULL if not given. */
const char *devopt_get(const struct devopts *o, const char *key);
/* 0 if every key is in allowed (NULL-terminated), else -EINVAL with the
 * first other key in why. */
int devopt_only(const struct devopts *o, const char *const *allowed, char *why, size_t wlen);

/* Empty o. */
void devopt_init(struct devopts *o);
/* Set key to val (NULL: a flag), replacing it if given: 0, -EINVAL (a
 * bad key, an empty value or one holding NUL... see devopt_parse's
 * rules; ',' is allowed here) or -E2BIG (no room). */
int devopt_set(struct devopts *o, const char *key, const char *val);
/* Remove key if given. */
void devopt_del(struct devopts *o, const char *key);
/* dst = src (0, or -E2BIG: cannot happen for a src made by these). */
int devopt_copy(struct devopts *dst, const struct devopts *src);

/* The snapshot form: u8 count, then per option u8 key length, u8 flags
 * (bit 0: has a value), u16 value length (little endian), the key, the
 * value. encode: its length, or -ENOSPC. decode (untrusted input): 0, or
 * -EINVAL with why: a length past the data, bytes left over, a bad or
 * repeated key, a flag with a value, an empty value, a NUL in a value,
 * more than DEVOPT_MAX options, a value over DEVOPT_LEN_MAX. */
long devopt_encode(const struct devopts *o, uint8_t *buf, size_t cap);
int devopt_decode(const uint8_t *data, size_t len, struct devopts *out, const char **why);

#endif
