/* Running an image (docs/images.md, "Running an image"): the run config
 * moat's /init reads in image mode, made from the image's config and the
 * command line's overrides by Docker's rules, and the initramfs archive
 * that carries it into the guest. Pure (vmm/image/runcfg.c): no I/O.
 *
 * The format (parsed in the guest by guest/init/imgcfg.c, which documents
 * it): "moat-image 1" then KEY=VALUE lines (arg, env, workdir, user,
 * explicit), "\\" and "\n" escaped in values. */
#ifndef MOAT_IMAGE_RUNCFG_H
#define MOAT_IMAGE_RUNCFG_H

#include <stddef.h>
#include <stdint.h>

#include "vmm/image/image.h"
#include "vmm/image/manifest.h"

#define IMG_RUN_MAX_ARGS   4096
#define IMG_RUN_MAX_ENV    4096
#define IMG_RUN_MAX_BYTES  (1u << 20)   /* the whole config */
#define IMG_RUN_CFG_PATH   "moat/image.cfg"    /* in the guest's initramfs */

/* What the command line overrides; NULL / 0 fields: the image's. */
struct img_run_over {
    const char *const *entrypoint;  /* --entrypoint: one word (Docker's) or NULL */
    size_t nentrypoint;             /* 0: not given; 1 with "" clears the image's */
    const char *const *cmd;         /* after --: NULL when not given */
    size_t ncmd;
    const char *const *env;         /* -e K=V, in order (later wins) */
    size_t nenv;
    const char *workdir;            /* -w DIR */
    const char *user;               /* -u USER */
};

/* The command by Docker's rules: (the override's entrypoint, else the
 * image's) + (the override's cmd, else the image's Cmd unless an
 * entrypoint was given on the line). Pointers into img and o, in *argv
 * (room for IMG_RUN_MAX_ARGS + 1, NULL-ended): the count, or -E2BIG. */
int img_run_argv(const struct img_config *img, const struct img_run_over *o, const char **argv);

/* The environment: the image's Env, then each override (NAME=VALUE
 * replaces NAME's value in place; NAME alone is not valid here: the CLI
 * resolves it). Into *env (room for IMG_RUN_MAX_ENV + 1): the count, or
 * -EINVAL / -E2BIG with why in err. */
int img_run_env(const struct img_config *img, const struct img_run_over *o, const char **env,
                struct img_err *err);

/* The whole config text into a malloc'ed *out (*len bytes, NUL after):
 * 0, or -errno with why in err (a relative workdir, an env entry that is
 * not NAME=VALUE, too many words, too long). img may be NULL (nothing from
 * an image: only the overrides). */
int img_runcfg_make(const struct img_config *img, const struct img_run_over *o, char **out, size_t *len,
                    struct img_err *err);

/* A newc cpio archive holding the directory "moat" and the file
 * IMG_RUN_CFG_PATH with CFG[0..LEN), to be appended (4-byte aligned) to
 * an initramfs: malloc'ed into *out, *olen bytes. 0 or -ENOMEM / -E2BIG. */
int img_runcfg_cpio(const char *cfg, size_t len, uint8_t **out, size_t *olen);

#endif
