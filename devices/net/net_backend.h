/* Where a virtio-net device's frames go and come from: a TAP device
 * (devices/net/net_tap.c) or passt, user-mode networking over a Unix
 * socket (devices/net/net_passt.c). The device's I/O thread is the only
 * caller; a backend never blocks it (its fd is non-blocking).
 *
 * A backend is synchronous (send and recv move the frame before they
 * return; fd is the file itself) or asynchronous (async: the TAP backend on
 * io_uring, devices/net/net_uring.h): send queues the frame, recv hands
 * out frames read ahead, and flush submits what was queued and takes the
 * completions in; fd is an eventfd, readable when something completed
 * (frames in, room for send after -EAGAIN): the device watches it for
 * input only, never for output. */
#ifndef MOAT_NET_BACKEND_H
#define MOAT_NET_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* struct virtio_net_hdr_v1 (virtio 1.x, 12 bytes; num_buffers included). */
struct net_vhdr {
    uint8_t flags;              /* VIRTIO_NET_HDR_F_NEEDS_CSUM, _DATA_VALID */
    uint8_t gso_type;           /* VIRTIO_NET_HDR_GSO_* */
    uint16_t hdr_len;
    uint16_t gso_size;
    uint16_t csum_start;
    uint16_t csum_offset;
    uint16_t num_buffers;
};
#define NET_VHDR_LEN 12u

/* The largest frame a backend hands over or takes: a GSO frame of 64 KiB
 * plus its Ethernet and VLAN headers. */
#define NET_FRAME_MAX (65536u + 18u)

struct net_backend;

struct net_backend_ops {
    const char *name;           /* "tap", "user" */
    /* Send one frame (len bytes; hdr: its virtio-net header, used only by
     * a backend with vnet_hdr). 0; -EAGAIN: the backend cannot take it now
     * (wait until fd is writable and send it again); -EMSGSIZE / -EINVAL:
     * this frame is refused (drop it); other -errno: the backend failed. */
    int (*send)(struct net_backend *b, const struct net_vhdr *hdr, const uint8_t *frame, size_t len);
    /* Receive one frame into buf (cap >= NET_FRAME_MAX): its length (0 <
     * n <= cap), hdr filled (zeroed by a backend without vnet_hdr);
     * -EAGAIN: none now; other -errno: the backend failed (-EPIPE: its
     * peer went away). */
    ssize_t (*recv)(struct net_backend *b, struct net_vhdr *hdr, uint8_t *buf, size_t cap);
    /* Offloads the driver accepted (VIRTIO_NET_F_GUEST_* bits), for a
     * backend with vnet_hdr (TUNSETOFFLOAD). May be NULL. 0 or -errno. */
    int (*set_offloads)(struct net_backend *b, uint64_t guest_features);
    /* Close it (and stop what it started: passt). */
    void (*destroy)(struct net_backend *b);
    /* Asynchronous backends only (NULL for the others), on the I/O thread:
     * flush at the end of each pass: submit the frames send queued (one
     * batch) and post reads; take the completions in. *refused: frames an
     * earlier send returned 0 for that the backend then refused (as send's
     * -EMSGSIZE / -EINVAL). >0: frames came in, or room for send after it
     * said -EAGAIN (look again); 0: neither; -errno: the backend failed. */
    int (*flush)(struct net_backend *b, unsigned *refused);
    /* quiesce before the I/O thread ends (a stop): nothing posted stays in
     * flight on that thread's behalf; frames already read are kept. */
    void (*quiesce)(struct net_backend *b);
};

struct net_backend {
    const struct net_backend_ops *ops;
    int fd;                     /* poll for POLLIN (frames), POLLOUT after -EAGAIN;
                                 * async: POLLIN for both */
    bool vnet_hdr;              /* frames carry a virtio-net header: offloads possible */
    bool async;                 /* flush and quiesce are set (above) */
};

#endif
