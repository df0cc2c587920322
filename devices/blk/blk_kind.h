/* virtio-blk as a kind of device (devices/virtio/virtio_kind.h): options
 * path=FILE, ro, id=SERIAL, overlay=FILE, direct. */
#ifndef MOAT_BLK_KIND_H
#define MOAT_BLK_KIND_H

#include <stdbool.h>

#include "devices/virtio/virtio_kind.h"

#define BLK_ID_MAX 20u      /* a drive's serial (VIRTIO_BLK_T_GET_ID) */

/* The kind's record of a drive (virtio_made.priv), for the code that works
 * on drives (fork, disk pins). */
struct blk_drive {
    char *path, *id, *overlay;  /* id, overlay: NULL if none */
    bool read_only;
    struct virtio_blk *blk;     /* owned by its transport */
};

extern const struct virtio_kind blk_kind;

/* The id a drive without id= gets in snapshots: its ordinal k among the
 * VM's drives (typed drives first, then blk devices) as vda, vdb, ... Into
 * id (VIRTIO_KIND_ID_MAX + 1). */
void blk_default_id(unsigned k, char *id);

#endif
