/* virtio-rng as a kind of device (devices/virtio/virtio_kind.h): options
 * bw=SIZE/REFILL_MS[/BURST] (bytes), ops=SIZE/REFILL_MS[/BURST]
 * (requests); one per VM (Firecracker's PUT /entropy). */
#ifndef MOAT_RNG_KIND_H
#define MOAT_RNG_KIND_H

#include "devices/virtio/virtio_kind.h"

extern const struct virtio_kind rng_kind;

#endif
