/* The image-mode run config (see runcfg.h). Pure. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/image/runcfg.h"

static size_t count(char *const *v)
{
    size_t n = 0;
    while (v && v[n])
        n++;
    return n;
}

int img_run_argv(const struct img_config *img, const struct img_run_over *o, const char **argv)
{
    size_t n = 0;
    const char *const *ep = o->nentrypoint ? o->entrypoint : img ? (const char *const *)img->entrypoint : NULL;
    size_t nep = o->nentrypoint ? o->nentrypoint : img ? count(img->entrypoint) : 0;
    if (o->nentrypoint == 1 && !o->entrypoint[0][0])
        nep = 0;    /* --entrypoint "": none */
    const char *const *cmd = o->cmd ? o->cmd : o->nentrypoint || !img ? NULL : (const char *const *)img->cmd;
    size_t ncmd = o->cmd ? o->ncmd : cmd ? count(img->cmd) : 0;
    if (nep + ncmd > IMG_RUN_MAX_ARGS)
        return -E2BIG;
    for (size_t i = 0; i < nep; i++)
        argv[n++] = ep[i];
    for (size_t i = 0; i < ncmd; i++)
        argv[n++] = cmd[i];
    argv[n] = NULL;
    return (int)n;
}

/* NAME=VALUE with a NAME of at least one byte. */
static int env_ok(const char *e)
{
    const char *eq = strchr(e, '=');
    return eq && eq != e;
}

/* Set E (NAME=VALUE) in env[0..*n): in place if NAME is there. */
static int env_set(const char **env, int *n, const char *e, struct img_err *err)
{
    size_t kl = (size_t)(strchr(e, '=') - e) + 1;
    for (int i = 0; i < *n; i++)
        if (!strncmp(env[i], e, kl)) {
            env[i] = e;
            return 0;
        }
    if (*n >= IMG_RUN_MAX_ENV)
        return img_err(err, -E2BIG, "more than %d environment variables", IMG_RUN_MAX_ENV);
    env[(*n)++] = e;
    return 0;
}

int img_run_env(const struct img_config *img, const struct img_run_over *o, const char **env,
                struct img_err *err)
{
    int n = 0, r = 0;
    for (size_t i = 0; img && img->env && img->env[i] && r == 0; i++) {
        if (!env_ok(img->env[i]))
            return img_err(err, -EINVAL, "the image's Env entry \"%.64s\" is not NAME=VALUE", img->env[i]);
        r = env_set(env, &n, img->env[i], err);
    }
    for (size_t i = 0; i < o->nenv && r == 0; i++) {
        if (!env_ok(o->env[i]))
            return img_err(err, -EINVAL, "-e %.64s: not NAME=VALUE", o->env[i]);
        r = env_set(env, &n, o->env[i], err);
    }
    if (r < 0)
        return r;
    env[n] = NULL;
    return n;
}

/* "KEY=VALUE\n" with VALUE escaped, at b->p: -E2BIG when it would pass
 * IMG_RUN_MAX_BYTES. */
struct out {
    char *p;
    size_t len;
};

static int put(struct out *b, const char *key, const char *v)
{
    size_t need = strlen(key) + 2;
    for (const char *s = v; *s; s++)
        need += *s == '\\' || *s == '\n' ? 2 : 1;
    if (b->len + need > IMG_RUN_MAX_BYTES)
        return -E2BIG;
    char *o = b->p + b->len;
    o += sprintf(o, "%s=", key);
    for (const char *s = v; *s; s++) {
        if (*s == '\\' || *s == '\n')
            *o++ = '\\', *o++ = *s == '\n' ? 'n' : '\\';
        else
            *o++ = *s;
    }
    *o++ = '\n';
    *o = 0;
    b->len = (size_t)(o - b->p);
    return 0;
}

/* The config's lines from the resolved parts into b. */
static int runcfg_lines(struct out *b, const char **argv, const char **env, const char *workdir,
                        const char *user, int explicit_cmd)
{
    b->len = (size_t)sprintf(b->p, "moat-image 1\nexplicit=%d\n", explicit_cmd);
    int r = 0;
    if (workdir && *workdir)
        r = put(b, "workdir", workdir);
    if (r == 0 && user && *user)
        r = put(b, "user", user);
    for (size_t i = 0; r == 0 && argv[i]; i++)
        r = put(b, "arg", argv[i]);
    for (size_t i = 0; r == 0 && env[i]; i++)
        r = put(b, "env", env[i]);
    return r;
}

int img_runcfg_make(const struct img_config *img, const struct img_run_over *o, char **out, size_t *len,
                    struct img_err *err)
{
    *out = NULL;
    *len = 0;
    const char *wd = o->workdir ? o->workdir : img ? img->workdir : NULL;
    const char *user = o->user ? o->user : img ? img->user : NULL;
    if (wd && *wd && wd[0] != '/')
        return img_err(err, -EINVAL, "the working directory %.256s is not an absolute path", wd);
    const char **argv = malloc((IMG_RUN_MAX_ARGS + 1) * sizeof *argv);
    const char **env = malloc((IMG_RUN_MAX_ENV + 1) * sizeof *env);
    struct out b = { .p = malloc(IMG_RUN_MAX_BYTES + 1) };
    int r = !argv || !env || !b.p ? img_err(err, -ENOMEM, "out of memory") : 0;
    if (r == 0 && img_run_argv(img, o, argv) < 0)
        r = img_err(err, -E2BIG, "more than %d command words", IMG_RUN_MAX_ARGS);
    if (r == 0 && (r = img_run_env(img, o, env, err)) > 0)
        r = 0;
    if (r == 0 && runcfg_lines(&b, argv, env, wd, user, o->cmd || o->nentrypoint) < 0)
        r = img_err(err, -E2BIG, "the image's run config is over %u bytes", IMG_RUN_MAX_BYTES);
    free(argv);
    free(env);
    if (r < 0) {
        free(b.p);
        return r;
    }
    *out = b.p;
    *len = b.len;
    return 0;
}

/* One newc entry (header, name, data, each padded to 4) at o: its bytes. */
static size_t newc(uint8_t *o, unsigned ino, unsigned mode, const char *name, const char *data, size_t dlen)
{
    size_t nl = strlen(name) + 1;
    int h = sprintf((char *)o, "070701%08X%08X%08X%08X%08X%08X%08zX%08X%08X%08X%08X%08zX%08X", ino, mode, 0u,
                    0u, 1u, 0u, dlen, 0u, 0u, 0u, 0u, nl, 0u);
    size_t k = (size_t)h;
    memcpy(o + k, name, nl);
    k += nl;
    while (k & 3)
        o[k++] = 0;
    if (dlen)
        memcpy(o + k, data, dlen);
    k += dlen;
    while (k & 3)
        o[k++] = 0;
    return k;
}

int img_runcfg_cpio(const char *cfg, size_t len, uint8_t **out, size_t *olen)
{
    *out = NULL;
    *olen = 0;
    if (len > IMG_RUN_MAX_BYTES)
        return -E2BIG;
    uint8_t *b = malloc(3 * (110 + 32) + len + 8);
    if (!b)
        return -ENOMEM;
    size_t k = newc(b, 1, 040755, "moat", NULL, 0);
    k += newc(b + k, 2, 0100644, IMG_RUN_CFG_PATH, cfg, len);
    k += newc(b + k, 0, 0, "TRAILER!!!", NULL, 0);
    *out = b;
    *olen = k;
    return 0;
}
