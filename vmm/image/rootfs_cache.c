/* Root filesystems cached in the image store (rootfs.h, img_rootfs_get). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vmm/image/rootfs.h"
#include "vmm/image/store.h"
#include "vmm/image/store_int.h"

#define MIB (1ull << 20)

/* "HEX.ext4" or "HEX.SIZE.ext4", HEX the manifest digest's: it covers the
 * config and every layer blob. Not the config digest: two images may share
 * a config blob and differ in their layers (rootfs.diff_ids is checked
 * neither on pull nor on import), and the second would get the first
 * one's root. */
static int cache_name(const struct img_image *im, uint64_t disk_size, char *name, size_t len, struct img_err *err)
{
    if (!img_digest_valid(im->manifest_digest))
        return img_err(err, -EINVAL, "image %s: no valid manifest digest", im->ref[0] ? im->ref : im->manifest_digest);
    const char *hex = im->manifest_digest + 7;
    int n = disk_size ? snprintf(name, len, "%s.%llu.ext4", hex, (unsigned long long)((disk_size + MIB - 1) / MIB * MIB))
                      : snprintf(name, len, "%s.ext4", hex);
    return n < 0 || (size_t)n >= len ? img_err(err, -ENAMETOOLONG, "rootfs name too long") : 0;
}

/* 1 if the store holds a finished root filesystem at rel, 0 if not. */
static int cached(const struct img_store *s, const char *rel)
{
    struct stat st;
    return fstatat(s->dfd, rel, &st, 0) == 0 && S_ISREG(st.st_mode);
}

static int build(struct img_store *s, const struct img_image *im, uint64_t disk_size, const char *path,
                 struct img_err *err)
{
    const struct img_manifest *m = &im->manifest;
    if (m->nlayer > IMG_MAX_LAYERS)
        return img_err(err, -E2BIG, "%u layers (the limit is %d)", m->nlayer, IMG_MAX_LAYERS);
    struct img_layer_in layers[IMG_MAX_LAYERS];
    char (*blobs)[PATH_MAX] = calloc(m->nlayer ? m->nlayer : 1, PATH_MAX);
    if (!blobs)
        return img_err(err, -ENOMEM, "out of memory");
    int rc = 0;
    for (unsigned i = 0; i < m->nlayer && rc == 0; i++) {
        uint64_t size;
        rc = img_blob_has(s, m->layer[i].digest, &size);
        if (rc == 0)
            rc = img_err(err, -ENOENT, "layer %u (%s) is not in the store: pull the image again", i + 1,
                         m->layer[i].digest);
        else if (rc < 0 || (rc = img_blob_path(s, m->layer[i].digest, blobs[i], PATH_MAX)) < 0)
            rc = img_err(err, rc, "layer %u (%s): %s", i + 1, m->layer[i].digest, strerror(-rc));
        else
            layers[i] = (struct img_layer_in){ blobs[i], m->layer[i].comp };
    }
    struct img_rootfs_opts o = { .disk_size = disk_size, .mode = 0444 };
    if (rc == 0)
        rc = img_rootfs_build(layers, m->nlayer, path, &o, NULL, err);
    free(blobs);
    return rc;
}

int img_rootfs_get(struct img_store *s, const struct img_image *im, uint64_t disk_size, char *path, size_t len,
                   struct img_err *err)
{
    char name[128], rel[160], lock[192];
    int rc = cache_name(im, disk_size, name, sizeof name, err);
    if (rc < 0)
        return rc;
    snprintf(rel, sizeof rel, "rootfs/%s", name);
    if (snprintf(path, len, "%s/%s", s->root, rel) >= (int)len)
        return img_err(err, -ENAMETOOLONG, "%s/%s: path too long", s->root, rel);
    if (cached(s, rel))
        return 0;
    if (mkdirat(s->dfd, "rootfs", 0755) < 0 && errno != EEXIST)
        return img_err(err, -errno, "%s/rootfs: %s", s->root, strerror(errno));
    /* One builder per root filesystem: a second caller waits here, then
     * finds the file the first one renamed into place. */
    /* Named like a blob's lock (locks/HEX.lock, HEX the SHA-256 of
     * "moat rootfs NAME"), so that prune treats it as one: it removes it
     * only when it can take it. */
    char key[160], d[IMG_DIGEST_MAX];
    snprintf(key, sizeof key, "moat rootfs %s", name);
    img_sha256(key, strlen(key), d);
    if ((rc = img_store_rel(lock, sizeof lock, "locks", d, ".lock")) < 0)
        return img_err(err, rc, "rootfs lock name: %s", strerror(-rc));
    int lk = img_store_lock(s, lock, 0);
    if (lk < 0)
        return img_err(err, lk, "%s/%s: %s", s->root, lock, strerror(-lk));
    rc = cached(s, rel) ? 0 : build(s, im, disk_size, path, err);
    close(lk);
    return rc;
}
