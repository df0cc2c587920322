/* An image's layers as one ext4 root filesystem image file
 * (vmm/image/rootfs.c; docs/images.md, "Root filesystems"). The tar
 * streams are read with libarchive and written into the ext4 with
 * libext2fs (both dlopen'ed on first use): nothing is unpacked onto the
 * host's filesystem and no privilege is needed. */
#ifndef MOAT_IMAGE_ROOTFS_H
#define MOAT_IMAGE_ROOTFS_H

#include <stddef.h>
#include <stdint.h>

#include "vmm/image/image.h"
#include "vmm/image/manifest.h"
#include "vmm/image/tarent.h"

struct img_layer_in {
    const char *path;           /* the layer's file (a blob) */
    enum img_comp comp;         /* as the manifest says; libarchive also sniffs it */
};

struct img_rootfs_opts {
    uint64_t disk_size;         /* bytes of the ext4 (rounded up to 1 MiB); 0: img_rootfs_default_size */
    struct img_tar_limits limits;   /* 0 fields: defaults; max_bytes 0: min(64 GiB, disk size) */
    unsigned mode;              /* the image file's permissions; 0: 0644 */
};

struct img_rootfs_stats {
    uint64_t entries;           /* tar entries read, all layers */
    uint64_t tar_bytes;         /* decompressed tar bytes read */
    uint64_t data_bytes;        /* file data written (holes not counted) */
    uint64_t files, dirs, symlinks, hardlinks, devices, whiteouts, opaques;
    uint64_t disk_size;         /* the image file's size */
};

#define IMG_ROOTFS_MIN_SIZE  (4ull << 30)

/* The size given no --disk-size: 2 GiB + 8 times the layers' bytes as
 * stored, at least IMG_ROOTFS_MIN_SIZE (a sparse file: only what is
 * written takes space). */
uint64_t img_rootfs_default_size(uint64_t layer_bytes);

/* Apply layers[0..n) in order into a new ext4 at out_path (written to a
 * temporary file beside it, renamed at the end; on any error nothing is
 * left). 0 with *st (may be NULL), or -errno with why in err. */
int img_rootfs_build(const struct img_layer_in *layers, unsigned n, const char *out_path,
                     const struct img_rootfs_opts *o, struct img_rootfs_stats *st, struct img_err *err);

/* The root filesystem of image im from the store's cache,
 * rootfs/HEX.ext4 (HEX: the manifest digest's; disk_size 0: the default
 * size) or rootfs/HEX.SIZE.ext4 (SIZE: disk_size rounded up to 1 MiB, in
 * bytes), built once from the image's layer blobs if missing: under a
 * lock of the store's (locks/HEX2.lock, HEX2 the SHA-256 of "moat rootfs
 * NAME"), so a second caller waits for the first and uses its file;
 * read-only (0444) once there. Its path into path. 0, or
 * -errno with why (-ENOENT: a layer blob is not in the store). */
struct img_store;
struct img_image;
int img_rootfs_get(struct img_store *s, const struct img_image *im, uint64_t disk_size, char *path, size_t len,
                   struct img_err *err);

#endif
