/* FALLBACK, TEMPORARY: minimal synchronous virtio-blk (see the .c file),
 * used by `moat device blk` until devices/virtio_blk.h lands. */
#ifndef MOAT_VHOST_USER_FBBLK_H
#define MOAT_VHOST_USER_FBBLK_H

#include <stdbool.h>

#include "devices/virtio_dev.h"

extern const struct virtio_dev_ops vhu_fbblk_ops;

/* Open the image (read-only with read_only): 0 and *dev, or -errno.
 * Free with vhu_fbblk_ops.destroy(dev). */
int vhu_fbblk_open(const char *path, bool read_only, void **dev);

#endif
