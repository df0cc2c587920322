/* moat image rootfs NAME [--disk-size SIZE] [--out FILE]: the image's
 * root filesystem (docs/images.md, "Root filesystems"): from the store's
 * cache (built there once if missing; its path printed), or with --out a
 * new file of the caller's. The work is vmm/image/rootfs.c's. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/cli/cli.h"
#include "vmm/cli/cli_image_rootfs.h"
#include "vmm/image/rootfs.h"

static const char usage[] =
    "usage: moat image rootfs NAME [--disk-size SIZE] [--out FILE]\n"
    "  The image's layers as one ext4 root filesystem, built without root and\n"
    "  cached in $MOAT_HOME/images/rootfs/ (read-only); prints its path.\n"
    "  --disk-size  the file system's size (e.g. 8G, 512M; default: 2 GiB + 8x\n"
    "               the layers, at least 4 GiB; the file is sparse)\n"
    "  --out        write a new image file there instead of the cache\n";

/* "4096", "512M", "8G", "1T" (also "8GiB", "8GB": binary units). */
int image_parse_bytes(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || s[0] == '-')
        return -EINVAL;
    unsigned shift = 0;
    switch (*end) {
    case 'K': case 'k': shift = 10; end++; break;
    case 'M': case 'm': shift = 20; end++; break;
    case 'G': case 'g': shift = 30; end++; break;
    case 'T': case 't': shift = 40; end++; break;
    default: break;
    }
    if (shift && (!strcmp(end, "iB") || !strcmp(end, "B")))
        end += strlen(end);
    if (*end || (shift && v > (UINT64_MAX >> shift)))
        return -EINVAL;
    *out = (uint64_t)v << shift;
    return 0;
}

static int fail(const struct img_err *e)
{
    for (const char *m = e->msg, *nl; *m; m = *nl ? nl + 1 : nl) {
        nl = strchrnul(m, '\n');
        fprintf(stderr, "moat: image rootfs: %.*s\n", (int)(nl - m), m);
    }
    if (!e->msg[0])
        fprintf(stderr, "moat: image rootfs: failed (%s)\n", strerror(-e->code));
    return 1;
}

/* --out FILE: a new image file, not cached. */
static int to_file(const struct img_store *s, const struct img_image *im, uint64_t size, const char *out,
                   struct img_err *err)
{
    const struct img_manifest *m = &im->manifest;
    struct img_layer_in layers[IMG_MAX_LAYERS];
    char (*paths)[4096] = calloc(m->nlayer ? m->nlayer : 1, 4096);
    if (!paths)
        return img_err(err, -ENOMEM, "out of memory");
    int rc = 0;
    for (unsigned i = 0; i < m->nlayer && rc == 0; i++) {
        rc = img_blob_path(s, m->layer[i].digest, paths[i], 4096);
        layers[i] = (struct img_layer_in){ paths[i], m->layer[i].comp };
    }
    struct img_rootfs_opts o = { .disk_size = size };
    struct img_rootfs_stats st;
    if (rc < 0)
        img_err(err, rc, "a layer's path: %s", strerror(-rc));
    else if ((rc = img_rootfs_build(layers, m->nlayer, out, &o, &st, err)) == 0)
        fprintf(stderr, "moat: image rootfs: %llu entries, %llu bytes of data, %llu MiB file system\n",
                (unsigned long long)st.entries, (unsigned long long)st.data_bytes,
                (unsigned long long)(st.disk_size >> 20));
    free(paths);
    return rc;
}

int image_rootfs(struct img_store *s, int argc, char **argv)
{
    const char *name = NULL, *out = NULL;
    uint64_t size = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--disk-size") && i + 1 < argc) {
            if (image_parse_bytes(argv[++i], &size) < 0 || !size) {
                fprintf(stderr, "moat: image rootfs: --disk-size %s: not a size (e.g. 8G)\n", argv[i]);
                return EXIT_USAGE;
            }
        } else if (!strcmp(argv[i], "--out") && i + 1 < argc) {
            out = argv[++i];
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return 0;
        } else if (argv[i][0] != '-' && !name) {
            name = argv[i];
        } else {
            fputs(usage, stderr);
            return EXIT_USAGE;
        }
    }
    if (!name) {
        fputs(usage, stderr);
        return EXIT_USAGE;
    }
    struct img_err err = { 0 };
    struct img_image im;
    if (img_image_load(s, name, &im, &err))
        return fail(&err);
    char path[4096];
    int rc = out ? to_file(s, &im, size, out, &err) : img_rootfs_get(s, &im, size, path, sizeof path, &err);
    img_image_free(&im);
    if (rc < 0)
        return fail(&err);
    printf("%s\n", out ? out : path);
    return 0;
}
