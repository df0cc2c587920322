/* moat jail's pure parts: see jail_spec.h. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "vmm/sandbox/jail_spec.h"

int jail_check_id(const char *id)
{
    size_t n = id ? strlen(id) : 0;
    if (n == 0 || n > JAIL_ID_MAX)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return -EINVAL;
    }
    return 0;
}

static const char cg_keys[][16] = { "memory.max", "memory.high", "memory.swap.max",
                                     "cpu.max", "cpu.weight", "pids.max" };

int jail_parse_cgroup(const char *spec, struct jail_cg *out, char *why, size_t wlen)
{
    const char *eq = spec ? strchr(spec, '=') : NULL;
    if (!eq) {
        snprintf(why, wlen, "--cgroup '%s': expected KEY=VALUE", spec ? spec : "");
        return -EINVAL;
    }
    size_t klen = (size_t)(eq - spec);
    out->key = NULL;
    for (size_t i = 0; i < sizeof cg_keys / sizeof cg_keys[0]; i++)
        if (strlen(cg_keys[i]) == klen && !memcmp(cg_keys[i], spec, klen))
            out->key = cg_keys[i];
    if (!out->key) {
        snprintf(why, wlen, "--cgroup: unknown key '%.*s' (memory.max, memory.high, "
                 "memory.swap.max, cpu.max, cpu.weight, pids.max)", (int)(klen > 64 ? 64 : klen), spec);
        return -EINVAL;
    }
    const char *v = eq + 1;
    size_t vlen = strlen(v);
    if (vlen == 0 || vlen >= JAIL_CG_VAL_MAX) {
        snprintf(why, wlen, "--cgroup %s: the value must be 1..%d characters", out->key,
                 JAIL_CG_VAL_MAX - 1);
        return -EINVAL;
    }
    for (size_t i = 0; i < vlen; i++) {
        char c = v[i];
        int ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                 (c == ' ' && i > 0 && i + 1 < vlen && v[i - 1] != ' ');
        if (!ok) {
            snprintf(why, wlen, "--cgroup %s: bad character in value '%s'", out->key, v);
            return -EINVAL;
        }
    }
    memcpy(out->val, v, vlen + 1);
    return 0;
}

int jail_parse_rlimit(const char *spec, int *resource, uint64_t *val, char *why, size_t wlen)
{
    static const struct { char name[8]; int res; } keys[] = {
        { "no-file", RLIMIT_NOFILE }, { "nproc", RLIMIT_NPROC },
        { "fsize", RLIMIT_FSIZE }, { "as", RLIMIT_AS },
    };
    const char *eq = spec ? strchr(spec, '=') : NULL;
    if (!eq) {
        snprintf(why, wlen, "--resource-limit '%s': expected KEY=N", spec ? spec : "");
        return -EINVAL;
    }
    size_t klen = (size_t)(eq - spec);
    int found = 0;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strlen(keys[i].name) == klen && !memcmp(keys[i].name, spec, klen)) {
            *resource = keys[i].res;
            found = 1;
        }
    if (!found) {
        snprintf(why, wlen, "--resource-limit: unknown key '%.*s' (no-file, nproc, fsize, as)",
                 (int)(klen > 64 ? 64 : klen), spec);
        return -EINVAL;
    }
    const char *p = eq + 1;
    uint64_t n = 0;
    if (!*p)
        goto bad;
    for (; *p; p++) {
        if (*p < '0' || *p > '9' || n > (UINT64_C(1) << 63) / 10)
            goto bad;
        n = n * 10 + (uint64_t)(*p - '0');
        if (n >= (UINT64_C(1) << 63))
            goto bad;
    }
    *val = n;
    return 0;
bad:
    snprintf(why, wlen, "--resource-limit %.*s: '%s' is not a number below 2^63",
             (int)klen, spec, eq + 1);
    return -EINVAL;
}

int jail_check_path(const char *path)
{
    if (!path || path[0] != '/' || !path[1] || strlen(path) >= PATH_MAX)
        return -EINVAL;
    const char *s = path + 1;
    for (;;) {
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n == 0 && e)
            return -EINVAL;                     /* "//" */
        if ((n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
            return -EINVAL;
        if (!e)
            return 0;                           /* a trailing "/" is allowed */
        s = e + 1;
    }
}

int jail_paths_add(struct jail_paths *l, const char *path, int rw)
{
    if (jail_check_path(path) < 0)
        return -EINVAL;
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->p[i].path, path)) {
            l->p[i].rw |= !!rw;
            return 0;
        }
    if (l->n >= JAIL_PATHS_MAX)
        return -E2BIG;
    snprintf(l->p[l->n].path, sizeof l->p[l->n].path, "%s", path);
    l->p[l->n].rw = !!rw;
    l->n++;
    return 0;
}

void jail_paths_sort(struct jail_paths *l)
{
    /* Insertion sort by length: at most JAIL_PATHS_MAX entries, stable. */
    for (int i = 1; i < l->n; i++) {
        struct jail_path t = l->p[i];
        size_t tl = strlen(t.path);
        int k = i;
        while (k > 0 && strlen(l->p[k - 1].path) > tl) {
            l->p[k] = l->p[k - 1];
            k--;
        }
        l->p[k] = t;
    }
}

static int add_named(struct jail_paths *l, const char *opt, const char *path, int rw,
                     char *why, size_t wlen)
{
    int r = jail_paths_add(l, path, rw);
    if (r == -EINVAL)
        snprintf(why, wlen, "%s '%s': the jail needs an absolute path without '.', '..' or '//'",
                 opt, path);
    else if (r == -E2BIG)
        snprintf(why, wlen, "more than %d paths to expose", JAIL_PATHS_MAX);
    return r;
}

/* A disk spec's paths: --drive PATH[,ro][,overlay=F]... (the first token
 * is the path) or --device blk,path=F[,ro][,overlay=F]... */
static int blk_spec_paths(const char *opt, const char *spec, struct jail_paths *l, char *why, size_t wlen)
{
    int drive = !strcmp(opt, "--drive");
    if (!drive && strncmp(spec, "blk,", 4))
        return 0;
    char path[PATH_MAX] = "", overlay[PATH_MAX] = "";
    int ro = 0;
    const char *s = drive ? spec : spec + 4;
    for (int first = 1; *s; first = 0) {
        const char *e = strchr(s, ',');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        char *dst = drive && first ? path : !strncmp(s, "path=", 5) ? path
                  : !strncmp(s, "overlay=", 8) ? overlay : NULL;
        if (n == 2 && !strncmp(s, "ro", 2) && !(drive && first))
            ro = 1;
        if (dst) {
            size_t off = drive && first ? 0 : dst == path ? 5 : 8;
            if (n - off >= PATH_MAX) {
                snprintf(why, wlen, "%s: a path is too long", opt);
                return -EINVAL;
            }
            memcpy(dst, s + off, n - off);
            dst[n - off] = 0;
        }
        if (!e)
            break;
        s = e + 1;
    }
    int r = 0;
    if (path[0])
        r = add_named(l, opt, path, !ro, why, wlen);
    if (r == 0 && overlay[0]) {
        r = add_named(l, opt, overlay, 1, why, wlen);
        for (int i = 0; r == 0 && i < l->n; i++)
            if (!strcmp(l->p[i].path, overlay))
                l->p[i].may_create = 1;
    }
    return r;
}

int jail_inner_paths(int argc, char *const *argv, struct jail_paths *l, char *why, size_t wlen)
{
    static const char opts[][16] = { "--kernel", "--initrd", "--image-config", "--drive", "--device" };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--"))
            break;
        for (size_t k = 0; k < sizeof opts / sizeof opts[0]; k++) {
            size_t on = strlen(opts[k]);
            const char *val = NULL;
            if (!strcmp(a, opts[k])) {
                if (i + 1 >= argc) {
                    snprintf(why, wlen, "%s needs a value", opts[k]);
                    return -EINVAL;
                }
                val = argv[++i];
            } else if (!strncmp(a, opts[k], on) && a[on] == '=') {
                val = a + on + 1;
            }
            if (!val)
                continue;
            int r = k < 3 ? add_named(l, opts[k], val, 0, why, wlen)
                          : blk_spec_paths(opts[k], val, l, why, wlen);
            if (r < 0)
                return r;
            break;
        }
    }
    return 0;
}

int jail_inner_ready_fd(int argc, char *const *argv, char *why, size_t wlen)
{
    int fd = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = NULL;
        if (!strcmp(a, "--"))
            break;
        if (!strcmp(a, "--ready-fd")) {
            if (i + 1 >= argc) {
                snprintf(why, wlen, "--ready-fd needs a value");
                return -EINVAL;
            }
            val = argv[++i];
        } else if (!strncmp(a, "--ready-fd=", 11)) {
            val = a + 11;
        } else {
            continue;
        }
        long n = 0;
        size_t k = 0;
        for (; val[k] >= '0' && val[k] <= '9' && k < 8; k++)
            n = n * 10 + (val[k] - '0');
        if (k == 0 || val[k] || n < 3 || n > (1L << 20)) {
            snprintf(why, wlen, "--ready-fd '%.32s': a descriptor number from 3 to %ld", val, 1L << 20);
            return -EINVAL;
        }
        fd = (int)n;
    }
    return fd;
}
