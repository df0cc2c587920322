/* virtio-vsock as a kind of device (devices/virtio/virtio_kind.h): options
 * uds=PATH, cid=N; one per VM. */
#ifndef MOAT_VSOCK_KIND_H
#define MOAT_VSOCK_KIND_H

#include <stdint.h>

#include "devices/virtio/virtio_kind.h"

/* The kind's record of the device (virtio_made.priv). */
struct vsock_rec {
    char *uds;
    struct vsock_dev *dev;      /* owned by its transport */
};

extern const struct virtio_kind vsock_kind;

/* cid=N: NULL (not given) -> 0; else 3 .. 2^32 - 2, decimal; -EINVAL. */
int vsock_parse_cid(const char *s, uint64_t *cid);

#endif
