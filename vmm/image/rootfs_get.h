/* An image's root filesystem from the store, built once (docs/images.md,
 * "Running an image"): the read-only base every sandbox of the image
 * overlays. vmm/image/rootfs_get.c. */
#ifndef MOAT_IMAGE_ROOTFS_GET_H
#define MOAT_IMAGE_ROOTFS_GET_H

#include <stddef.h>
#include <stdint.h>

#include "vmm/image/image.h"
#include "vmm/image/store.h"

/* The base of image im (img_image_load) at disk_size bytes (0: the
 * default for its layers, img_rootfs_default_size; else rounded up to
 * 1 MiB): $MOAT_HOME/images/rootfs/HEX.SIZE (HEX: the config digest's),
 * into path. Built by img_rootfs_build from the layer blobs when missing,
 * under the store's lock locks/rootfs-HEX.lock, so concurrent callers build
 * it once and a file there is always complete. 0, or -errno with why. */
int img_rootfs_get(struct img_store *s, const struct img_image *im, uint64_t disk_size, char *path,
                   size_t len, struct img_err *err);

#endif
