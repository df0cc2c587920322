/* virtio-net, transport-independent (devices/virtio/virtio_dev.h): one
 * receive and one transmit queue, the MAC, link status and MTU in its
 * config space, mergeable receive buffers, and checksum / TSO offloads
 * when its backend carries a virtio-net header (a TAP device).
 *
 * Every frame's virtio-net header must agree with the frame
 * (net_vhdr_check, devices/net/net_frame.h; else dropped, tx_bad_offload)
 * before anything else looks at it; the header a backend gets is rebuilt
 * from the checked fields. Every frame the guest sends goes through the
 * device's filter before any backend sees it (the egress policy,
 * docs/net.md): it passes, is dropped
 * (counted), or is for the device itself (a local endpoint such as the
 * metadata service), which may answer with frames of its own that the
 * guest receives as it receives the backend's (virtio_net_inject). Frames
 * the guest receives are shown to the filter too (to learn DNS answers).
 *
 * One I/O thread per device, polling the backend, the kick eventfds and a
 * stop eventfd. A frame the backend cannot take now stays with the device
 * (the transmit queue waits); a received frame waits for receive buffers
 * (the backend is not read meanwhile). stop() drops a frame still waiting
 * to be sent, so nothing is in flight while the device is stopped. */
#ifndef MOAT_VIRTIO_NET_H
#define MOAT_VIRTIO_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "devices/net/net_backend.h"
#include "devices/virtio/virtio_dev.h"

#define VIRTIO_NET_F_CSUM        0
#define VIRTIO_NET_F_GUEST_CSUM  1
#define VIRTIO_NET_F_MTU         3
#define VIRTIO_NET_F_MAC         5
#define VIRTIO_NET_F_GUEST_TSO4  7
#define VIRTIO_NET_F_GUEST_TSO6  8
#define VIRTIO_NET_F_HOST_TSO4   11
#define VIRTIO_NET_F_HOST_TSO6   12
#define VIRTIO_NET_F_MRG_RXBUF   15
#define VIRTIO_NET_F_STATUS      16

#define VIRTIO_NET_S_LINK_UP     1

#define VIRTIO_NET_QUEUE_MAX     256
#define VIRTIO_NET_CONFIG_SIZE   12     /* mac[6], status, max_virtqueue_pairs, mtu */
#define VIRTIO_NET_MTU_MIN       68
#define VIRTIO_NET_MTU_MAX       65535
#define VIRTIO_NET_INJECT_MAX    64     /* frames of local endpoints waiting for the guest */

/* What the filter says of a frame the guest sends. */
enum net_verdict {
    NET_PASS = 0,               /* to the backend */
    NET_DROP,                   /* dropped (the filter counts why) */
    NET_LOCAL,                  /* for the device itself: handed to filter.local */
};

struct virtio_net;
struct net_frame;
struct ratelimit_cfg;

/* The device's filter (all may be NULL: everything passes). Called on the
 * device's I/O thread only. */
struct net_filter {
    /* A frame the guest sends; parsed: its net_frame_parse result when the
     * device already parsed it (an offload header was checked), else NULL */
    enum net_verdict (*tx)(void *opaque, const uint8_t *frame, size_t len, const struct net_frame *parsed);
    /* A frame the guest receives (after it was delivered). */
    void (*rx)(void *opaque, const uint8_t *frame, size_t len);
    /* A NET_LOCAL frame; answers go back with virtio_net_inject. */
    void (*local)(void *opaque, struct virtio_net *n, const uint8_t *frame, size_t len);
    void *opaque;
};

struct virtio_net_opts {
    uint8_t mac[6];
    uint16_t mtu;               /* 0: not offered (the driver's default, 1500) */
    struct net_backend *backend;   /* taken over (destroyed with the device, also on failure) */
    struct net_filter filter;
    /* Rate limiters (devices/virtio/ratelimit.h) for what the guest sends
     * and receives; NULL: unlimited. */
    const struct ratelimit_cfg *tx_limit, *rx_limit;
    const char *name;           /* for logs */
};


/* 0 or -errno with why. */
int virtio_net_create(const struct virtio_net_opts *o, struct virtio_net **out, char *why, size_t wlen);

/* The device contract; dev = struct virtio_net *. */
extern const struct virtio_dev_ops virtio_net_ops;

/* Queue a frame for the guest from a local endpoint (on the device's I/O
 * thread, from filter.local): 0, or -ENOBUFS (VIRTIO_NET_INJECT_MAX
 * waiting: dropped) / -EMSGSIZE / -ENOMEM. */
int virtio_net_inject(struct virtio_net *n, const uint8_t *frame, size_t len);

/* Link status seen by the driver (a config-change interrupt is not sent:
 * the driver reads it on its next look). */
void virtio_net_set_link(struct virtio_net *n, bool up);

/* Change a limiter at run time (any thread): tx, or rx. cfg NULL:
 * unlimited. 0 or -EINVAL. */
int virtio_net_set_limit(struct virtio_net *n, bool tx, const struct ratelimit_cfg *cfg);
/* The limiter in force (all zero: unlimited). */
void virtio_net_get_limit(struct virtio_net *n, bool tx, struct ratelimit_cfg *cfg);

struct virtio_net_stats {
    uint64_t tx_frames, tx_bytes;   /* sent to the backend */
    uint64_t tx_dropped;            /* the filter said drop */
    uint64_t tx_local;              /* for a local endpoint */
    uint64_t tx_bad;                /* malformed chains, frames too short or too long */
    uint64_t tx_backend_errors;     /* refused by the backend */
    uint64_t tx_bad_offload;        /* virtio-net header disagrees with the frame (net_vhdr_check): dropped */
    uint64_t rx_frames, rx_bytes;   /* delivered to the guest */
    uint64_t rx_dropped;            /* too large for the guest's buffers, or inject queue full */
    uint64_t rx_bad;                /* malformed receive chains */
    uint64_t backend_failed;        /* 1 once the backend failed (the device goes on without it) */
    uint64_t tx_throttled, rx_throttled;   /* times a frame waited for its limiter */
};
void virtio_net_get_stats(const struct virtio_net *n, struct virtio_net_stats *s);

#endif
