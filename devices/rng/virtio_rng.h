/* virtio-rng (virtio 1.2, 5.4): one request queue; the driver posts
 * device-writable buffers and the device fills them with random bytes from
 * the host's getrandom(). Optional rate limiter (devices/virtio/ratelimit.h:
 * bandwidth in bytes, ops in requests), as Firecracker's entropy device.
 *
 * Threat model: the guest owns the ring. A chain with any device-readable
 * buffer, or with no writable byte, is refused (pushed back with length 0);
 * a request fills at most VIRTIO_RNG_REQ_MAX bytes whatever the guest
 * asks (the used length says how many), so one chain cannot make the
 * device copy without bound. rng_req_len is that check, pure. */
#ifndef MOAT_VIRTIO_RNG_H
#define MOAT_VIRTIO_RNG_H

#include <stdbool.h>
#include <stdint.h>

#include "devices/virtio/ratelimit.h"
#include "devices/virtio/virtio_dev.h"
#include "devices/virtio/virtq.h"

#define VIRTIO_RNG_QUEUE_MAX 256
#define VIRTIO_RNG_REQ_MAX   (64u * 1024)    /* bytes filled per request, at most */

struct virtio_rng;

struct virtio_rng_opts {
    const char *name;                       /* for messages */
    const struct ratelimit_cfg *limit;      /* NULL: unlimited */
};

struct virtio_rng_stats {
    uint64_t requests;      /* chains filled */
    uint64_t bytes;         /* random bytes given to the guest */
    uint64_t bad;           /* chains refused (readable buffers, empty, malformed) */
    uint64_t throttled;     /* times the limiter made a request wait */
    uint64_t errors;        /* getrandom failures (the chain is returned empty) */
};

/* The number of bytes to fill for chain c (c->write_len capped at cap), or
 * -EINVAL: c has device-readable segments, or no writable byte. Pure. */
long rng_req_len(const struct virtq_chain *c, uint32_t cap);

int virtio_rng_create(const struct virtio_rng_opts *o, struct virtio_rng **out, char *why, size_t wlen);
/* Run-time changes of the limiter (any thread). */
int virtio_rng_set_limit(struct virtio_rng *r, const struct ratelimit_cfg *cfg);
void virtio_rng_get_limit(struct virtio_rng *r, struct ratelimit_cfg *cfg);
void virtio_rng_get_stats(struct virtio_rng *r, struct virtio_rng_stats *s);

extern const struct virtio_dev_ops virtio_rng_ops;

#endif
