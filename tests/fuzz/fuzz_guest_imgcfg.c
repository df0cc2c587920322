/* Fuzz image mode's config parser and user lookup (guest/init/imgcfg.h,
 * compiled in here: guest code, not part of libmoat). The config carries
 * an image's strings and passwd/group are the image's own files: /init
 * must refuse or accept any of it without misbehaving.
 *
 * Input: a config, then optionally "\0" passwd text "\0" group text "\0"
 * a user spec (each up to the next NUL). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "guest/init/imgcfg.c"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The next NUL-terminated part of data at *off (a malloc'ed copy). */
static char *part(const uint8_t *data, size_t size, size_t *off)
{
    size_t s = *off < size ? *off : size;
    const uint8_t *nul = memchr(data + s, 0, size - s);
    size_t n = nul ? (size_t)(nul - (data + s)) : size - s;
    char *p = malloc(n + 1);
    memcpy(p, data + s, n);
    p[n] = 0;
    *off = s + n + 1;
    return p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct imgcfg c;
    char why[256], space[256];
    char *buf = malloc(size + 1);

    memcpy(buf, data, size);
    int r = imgcfg_parse(buf, size, &c, why, sizeof why);
    FUZZ_ASSERT(r == 0 || r == -EINVAL);
    if (r == 0) {
        FUZZ_ASSERT(c.argc <= IMGCFG_MAX_ARGS && c.argv[c.argc] == NULL);
        FUZZ_ASSERT(c.nenv <= IMGCFG_MAX_ENV && c.env[c.nenv] == NULL);
        for (int i = 0; i < c.nenv; i++)
            FUZZ_ASSERT(strchr(c.env[i], '=') && c.env[i][0] != '=');
        FUZZ_ASSERT(!c.workdir || c.workdir[0] == '/');
        imgcfg_env_finish(&c, "moat", "/", space, sizeof space);
        FUZZ_ASSERT(c.env[c.nenv] == NULL && c.nenv <= IMGCFG_MAX_ENV + 3);
    }
    size_t off = 0;
    char *cfgpart = part(data, size, &off), *pw = part(data, size, &off);
    char *gr = part(data, size, &off), *spec = part(data, size, &off);
    struct imguser u;
    r = imgcfg_user(spec, pw, gr, &u, why, sizeof why);
    FUZZ_ASSERT(r == 0 || r == -ENOENT);
    if (r == 0)
        FUZZ_ASSERT(u.ngroups >= 1 && u.ngroups <= IMGCFG_MAX_GROUPS && u.home[0]);
    free(cfgpart);
    free(pw);
    free(gr);
    free(spec);
    free(buf);
    return 0;
}
