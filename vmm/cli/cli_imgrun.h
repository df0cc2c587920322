/* moat run's image mode (vmm/cli/cli_imgrun.c; docs/images.md, "Running
 * an image"). */
#ifndef MOAT_CLI_IMGRUN_H
#define MOAT_CLI_IMGRUN_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "include/moat.h"
#include "vmm/image/manifest.h"
#include "vmm/image/runcfg.h"

#define OPT_ROOTFS      400     /* --rootfs FILE */
#define OPT_IMAGE_ROOT  401     /* --image-root: the first --drive is the root */
#define OPT_ENTRYPOINT  402     /* --entrypoint X */
#define OPT_IMAGE_CFG   403     /* --image-config FILE.json */
#define OPT_IMAGE       404     /* --image NAME */
#define OPT_DISK_SIZE   405     /* --disk-size SIZE */

#define IMAGE_LONG_OPTS \
    { "rootfs", required_argument, NULL, OPT_ROOTFS }, \
    { "image-root", no_argument, NULL, OPT_IMAGE_ROOT }, \
    { "entrypoint", required_argument, NULL, OPT_ENTRYPOINT }, \
    { "image-config", required_argument, NULL, OPT_IMAGE_CFG }, \
    { "image", required_argument, NULL, OPT_IMAGE }, \
    { "disk-size", required_argument, NULL, OPT_DISK_SIZE }, \
    { "env", required_argument, NULL, 'e' }, \
    { "workdir", required_argument, NULL, 'w' }, \
    { "user", required_argument, NULL, 'u' }

struct image_opts {
    int on;                     /* --rootfs or --image-root */
    const char *rootfs, *entrypoint, *workdir, *user;
    const char *config;         /* --image-config: an OCI image config (JSON) */
    const char *image;          /* --image NAME: from the image store */
    uint64_t disk_size;         /* --disk-size */
    char base[PATH_MAX], blob[PATH_MAX];    /* --image's root filesystem and config */
    const char *env[IMG_RUN_MAX_ENV];
    size_t nenv;
    char tmpdir[PATH_MAX - 64], tmpovl[PATH_MAX];  /* --rootfs's temporary overlay */
    uint8_t *cpio;
    size_t cpio_len;
};

/* Option c (getopt_long's) with arg, when it is one of the image mode's:
 * 1, else 0. A bad one exits with a usage error. */
int image_opt(struct image_opts *io, int c, const char *arg);

/* --disk-size SIZE (image_parse_bytes: bytes, or with K, M, G or T); a
 * usage error if malformed. */
uint64_t image_parse_size(const char *v);

/* The image NAME names in the store ($MOAT_HOME/images): its root
 * filesystem, built if missing (img_rootfs_get, DISK_SIZE 0: the default),
 * into BASE, its config blob's path into CFG. Exits with a message if
 * there is no such image or it cannot be built. */
void image_from_store(const char *name, uint64_t disk_size, char *base, size_t blen, char *cfg, size_t clen);

/* --rootfs FILE as drive 0 (the others after it), copy-on-write on a
 * temporary overlay (made by image_prepare); --image-root checks there is a drive 0. */
void image_drive(struct image_opts *io, struct moat_drive *drives, const char **overlays, size_t *ndrives,
                 bool *has_overlay);

/* The run config from the overrides and cfg's command, as cfg's extra
 * initramfs archive; the command then leaves the kernel command line. */
void image_config(struct image_opts *io, struct moat_config *cfg);

/* Right before moat_create: the temporary overlay's directory made (its
 * path is the one image_drive gave drive 0). */
void image_prepare(struct image_opts *io);

/* The temporary overlay removed (the VM keeps it open). */
void image_cleanup(struct image_opts *io);

#endif
