/* moat run's image mode (docs/images.md, "Running an image"): --rootfs,
 * --image-root and the run-config overrides (--entrypoint, -e, -w, -u).
 * The config is made by vmm/image/runcfg.c and reaches /init as an extra
 * initramfs archive (moat_config.initrd_extra). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "include/moat.h"
#include "vmm/cli/cli.h"
#include "vmm/cli/cli_image_rootfs.h"
#include "vmm/cli/cli_imgrun.h"
#include "vmm/image/rootfs.h"
#include "vmm/image/runcfg.h"
#include "vmm/image/store.h"

int image_opt(struct image_opts *io, int c, const char *arg)
{
    switch (c) {
    case OPT_ROOTFS: io->rootfs = arg; io->on = 1; return 1;
    case OPT_IMAGE_ROOT: io->on = 1; return 1;
    case OPT_ENTRYPOINT: io->entrypoint = arg; return 1;
    case OPT_IMAGE_CFG: io->config = arg; return 1;
    case OPT_IMAGE: io->image = arg; io->on = 1; return 1;
    case OPT_DISK_SIZE: io->disk_size = image_parse_size(arg); return 1;
    case 'w': io->workdir = arg; return 1;
    case 'u': io->user = arg; return 1;
    case 'e':
        if (io->nenv >= IMG_RUN_MAX_ENV)
            die_usage("too many -e options (at most %d)", IMG_RUN_MAX_ENV);
        if (!strchr(arg, '=')) {    /* -e NAME: this environment's value, if set (Docker's) */
            const char *v = getenv(arg);
            char *kv = NULL;
            if (!v)
                return 1;
            if (asprintf(&kv, "%s=%s", arg, v) < 0)
                die_usage("%s", "out of memory");
            arg = kv;
        }
        io->env[io->nenv++] = arg;
        return 1;
    }
    return 0;
}

uint64_t image_parse_size(const char *v)
{
    uint64_t n;
    if (image_parse_bytes(v, &n) < 0 || n == 0)
        die_usage("invalid --disk-size '%s' (bytes, or a number with K, M, G or T)", v);
    return n;
}

void image_from_store(const char *name, uint64_t disk_size, char *base, size_t blen, char *cfg, size_t clen)
{
    char home[PATH_MAX];
    if (cli_moat_home(home, sizeof home) < 0)
        exit(EXIT_USAGE);
    struct img_store st;
    static struct img_image im;     /* large: not on the stack */
    struct img_err e = { 0 };
    int r = img_store_open(&st, home, &e);
    if (r < 0) {
        fprintf(stderr, "moat: %s\n", e.msg);
        exit(EXIT_VMM_ERROR);
    }
    r = img_image_load(&st, name, &im, &e);
    if (r == -ENOENT)
        die_usage("no image %s in %s (moat image ls; import or pull it first)", name, st.root);
    if (r == 0) {
        if ((r = img_rootfs_get(&st, &im, disk_size, base, blen, &e)) == 0 &&
            (r = img_blob_path(&st, im.config_digest, cfg, clen)) < 0)
            img_err(&e, r, "the config blob's path: %s", strerror(-r));
        img_image_free(&im);
    }
    img_store_close(&st);
    if (r < 0) {
        fprintf(stderr, "moat: image %s: %s\n", name, e.msg[0] ? e.msg : strerror(-r));
        exit(EXIT_VMM_ERROR);
    }
}

/* A temporary overlay for --rootfs FILE: a new directory (*dir) and the
 * overlay's path in it (*ovl); moat_create makes the file. */
static void temp_overlay(char *dir, size_t len, char *ovl, size_t olen)
{
    const char *t = getenv("TMPDIR");
    snprintf(dir, len, "%s/moat-rootfs-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir))
        die_usage("cannot make a temporary directory for --rootfs's overlay in %s: %s", t && *t ? t : "/tmp",
                  strerror(errno));
    if ((size_t)snprintf(ovl, olen, "%s/overlay", dir) >= olen)
        die_usage("%s", "$TMPDIR is too long");
}

void image_drive(struct image_opts *io, struct moat_drive *drives, const char **overlays, size_t *ndrives,
                 bool *has_overlay)
{
    if (io->disk_size && !io->image)
        die_usage("%s", "--disk-size is for --image (the size of the image's root filesystem)");
    if (io->image && (io->rootfs || !io->on))
        die_usage("%s", "--image and --rootfs are two roots: give one");
    if (io->image) {
        image_from_store(io->image, io->disk_size, io->base, sizeof io->base, io->blob, sizeof io->blob);
        io->rootfs = io->base;
        io->config = io->config ? io->config : io->blob;
    }
    if (!io->on && (io->entrypoint || io->workdir || io->user || io->nenv || io->config))
        die_usage("%s", "--image-config, --entrypoint, -e, -w and -u are image mode's: they need --rootfs or "
                        "--image-root");
    if (!io->on)
        return;
    if (!io->rootfs) {
        if (*ndrives == 0)
            die_usage("%s", "--image-root needs a --drive (the first is the image's root)");
        return;
    }
    if (*ndrives >= MOAT_MAX_DRIVES)
        die_usage("too many drives with --rootfs (at most %d)", MOAT_MAX_DRIVES);
    memmove(drives + 1, drives, *ndrives * sizeof *drives);
    memmove(overlays + 1, overlays, *ndrives * sizeof *overlays);
    drives[0] = (struct moat_drive){ .path = io->rootfs };
    overlays[0] = io->tmpovl;
    (*ndrives)++;
    *has_overlay = true;
}

/* --image-config FILE: the image's config (an OCI image config, as in an
 * image's config blob) into *c, or a usage error. */
static void load_config(const char *path, struct img_config *c)
{
    FILE *f = fopen(path, "re");
    char *buf = malloc(IMG_JSON_MAX + 1);
    size_t n = f && buf ? fread(buf, 1, IMG_JSON_MAX + 1, f) : 0;
    int e = errno;
    if (f)
        fclose(f);
    if (!f || !buf || n > IMG_JSON_MAX) {
        free(buf);
        die_usage("--image-config %s: %s", path, !f ? strerror(e) : !buf ? "out of memory" : "larger than 4 MiB");
    }
    struct img_err err = { 0 };
    int r = img_config_parse(buf, n, c, &err);
    free(buf);
    if (r < 0)
        die_usage("--image-config %s: %s", path, err.msg);
}

void image_config(struct image_opts *io, struct moat_config *cfg)
{
    if (!io->on)
        return;
    static struct img_config ic;
    if (io->config)
        load_config(io->config, &ic);
    const char *ep[1] = { io->entrypoint };
    struct img_run_over over = {
        .entrypoint = ep, .nentrypoint = io->entrypoint ? 1 : 0,
        .cmd = cfg->argc ? cfg->argv : NULL, .ncmd = cfg->argc,
        .env = io->env, .nenv = io->nenv, .workdir = io->workdir, .user = io->user,
    };
    struct img_err e = { 0 };
    char *text;
    size_t len;
    if (img_runcfg_make(io->config ? &ic : NULL, &over, &text, &len, &e) < 0)
        die_usage("%s", e.msg);
    int r = img_runcfg_cpio(text, len, &io->cpio, &io->cpio_len);
    free(text);
    if (r < 0)
        die_usage("the image's run config: %s", strerror(-r));
    cfg->initrd_extra = io->cpio;
    cfg->initrd_extra_len = io->cpio_len;
    cfg->argv = NULL;       /* the command is in the config, not on the kernel command line */
    cfg->argc = 0;
}

void image_prepare(struct image_opts *io)
{
    if (io->on && io->rootfs)
        temp_overlay(io->tmpdir, sizeof io->tmpdir, io->tmpovl, sizeof io->tmpovl);
}

void image_cleanup(struct image_opts *io)
{
    if (io->tmpdir[0]) {
        unlink(io->tmpovl);
        rmdir(io->tmpdir);
        io->tmpdir[0] = 0;
    }
}
