/* An image's cached root filesystem (see rootfs_get.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vmm/image/rootfs.h"
#include "vmm/image/rootfs_get.h"
#include "vmm/image/store_int.h"

/* The layers of im as blob paths (into paths, PATH_MAX each), their total
 * stored size in *bytes: 0, or -ENOENT with which one is missing. */
static int layer_paths(struct img_store *s, const struct img_image *im, struct img_layer_in *in,
                       char (*paths)[4096], uint64_t *bytes, struct img_err *err)
{
    *bytes = 0;
    for (unsigned i = 0; i < im->manifest.nlayer; i++) {
        const struct img_desc *d = &im->manifest.layer[i];
        uint64_t sz = 0;
        int r = img_blob_has(s, d->digest, &sz);
        if (r <= 0)
            return img_err(err, r < 0 ? r : -ENOENT, "layer %u (%s) of the image is not in the store "
                           "(pull or import the image again)", i + 1, d->digest);
        if ((r = img_blob_path(s, d->digest, paths[i], 4096)) < 0)
            return img_err(err, r, "layer %u: %s", i + 1, strerror(-r));
        in[i] = (struct img_layer_in){ .path = paths[i], .comp = d->comp };
        *bytes += sz;
    }
    return 0;
}

int img_rootfs_get(struct img_store *s, const struct img_image *im, uint64_t disk_size, char *path,
                   size_t len, struct img_err *err)
{
    static const uint64_t mib = 1u << 20;
    if (!img_digest_valid(im->config_digest))
        return img_err(err, -EINVAL, "the image has no valid config digest");
    struct img_layer_in in[IMG_MAX_LAYERS];
    char (*paths)[4096] = malloc(IMG_MAX_LAYERS * sizeof *paths);
    uint64_t bytes = 0;
    int r = paths ? layer_paths(s, im, in, paths, &bytes, err) : img_err(err, -ENOMEM, "out of memory");
    if (r < 0) {
        free(paths);
        return r;
    }
    uint64_t size = disk_size ? (disk_size + mib - 1) / mib * mib : img_rootfs_default_size(bytes);
    const char *hex = im->config_digest + 7;
    char lock[128];
    snprintf(lock, sizeof lock, "locks/rootfs-%.64s.lock", hex);
    int lk = -1;
    if ((size_t)snprintf(path, len, "%s/rootfs/%.64s.%" PRIu64, s->root, hex, size) >= len)
        r = img_err(err, -ENAMETOOLONG, "%s/rootfs: path too long", s->root);
    else if (access(path, F_OK) != 0 && (lk = img_store_lock(s, lock, 0)) < 0)
        r = img_err(err, lk, "cannot lock %s/%s: %s", s->root, lock, strerror(-lk));
    if (r == 0 && lk >= 0 && access(path, F_OK) != 0) {    /* not built while we waited */
        struct img_rootfs_opts o = { .disk_size = size };
        struct img_rootfs_stats st;
        r = img_rootfs_build(in, im->manifest.nlayer, path, &o, &st, err);
    }
    if (lk >= 0)
        close(lk);
    free(paths);
    return r;
}
