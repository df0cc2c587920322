/* TAP backend (devices/net/net_tap.h). With liburing (MOAT_HAVE_URING)
 * frames move through io_uring (devices/net/net_uring.h): reads posted
 * ahead into a bounce ring, writes submitted in batches, the ring
 * restricted to READ/WRITE/ASYNC_CANCEL on the TAP as its one fixed file.
 * Built without liburing: readv/writev on the non-blocking fd. */
#include "devices/net/net_tap.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include "devices/net/net_uring.h"
#include "devices/net/virtio_net.h"

struct net_tap {
    struct net_backend b;       /* first: the device sees this */
    char name[NET_TAP_NAME_MAX + 1];
    int tapfd;                  /* the TAP; b.fd is it, or the ring's eventfd */
#ifdef MOAT_HAVE_URING
    struct net_uring *u;
#endif
};

static void hdr_to_wire(const struct net_vhdr *h, uint8_t *p)
{
    /* the TAP device takes the virtio-net header in little endian
     * (TUNSETVNETLE on big-endian hosts; x86 is little endian) */
    p[0] = h->flags;
    p[1] = h->gso_type;
    memcpy(p + 2, &h->hdr_len, 2);
    memcpy(p + 4, &h->gso_size, 2);
    memcpy(p + 6, &h->csum_start, 2);
    memcpy(p + 8, &h->csum_offset, 2);
    memcpy(p + 10, &h->num_buffers, 2);
}

static void hdr_from_wire(const uint8_t *p, struct net_vhdr *h)
{
    h->flags = p[0];
    h->gso_type = p[1];
    memcpy(&h->hdr_len, p + 2, 2);
    memcpy(&h->gso_size, p + 4, 2);
    memcpy(&h->csum_start, p + 6, 2);
    memcpy(&h->csum_offset, p + 8, 2);
    memcpy(&h->num_buffers, p + 10, 2);
}

#define RUNT (NET_VHDR_LEN + 14)        /* shorter reads are skipped */

#ifdef MOAT_HAVE_URING
/* Reads posted ahead and writes in flight at most (docs/net.md, "TAP on
 * io_uring"). One read: io_uring runs TAP reads in its worker threads,
 * and several in flight there complete in any order (frames reordered).
 * Slots are NET_VHDR_LEN + NET_FRAME_MAX bytes, touched only as far as
 * frames go. */
#define TAP_RX_AHEAD 1u
#define TAP_TX_SLOTS 32u

static int tap_send(struct net_backend *b, const struct net_vhdr *hdr, const uint8_t *frame, size_t len)
{
    struct net_tap *t = (struct net_tap *)b;
    uint8_t h[NET_VHDR_LEN];
    struct net_vhdr zero = { 0 };
    hdr_to_wire(hdr ? hdr : &zero, h);
    struct iovec iov[2] = { { h, NET_VHDR_LEN }, { (void *)frame, len } };
    return net_uring_send(t->u, iov, 2);
}

static ssize_t tap_recv(struct net_backend *b, struct net_vhdr *hdr, uint8_t *buf, size_t cap)
{
    struct net_tap *t = (struct net_tap *)b;
    for (;;) {
        const uint8_t *p;
        ssize_t n = net_uring_recv(t->u, &p);
        if (n < 0)
            return n;
        if ((size_t)n < RUNT || (size_t)n - NET_VHDR_LEN > cap) {
            net_uring_recv_done(t->u);
            continue;
        }
        hdr_from_wire(p, hdr);
        memcpy(buf, p + NET_VHDR_LEN, (size_t)n - NET_VHDR_LEN);
        net_uring_recv_done(t->u);
        return n - (ssize_t)NET_VHDR_LEN;
    }
}

static int tap_flush(struct net_backend *b, unsigned *refused)
{
    return net_uring_flush(((struct net_tap *)b)->u, refused);
}

static void tap_quiesce(struct net_backend *b)
{
    net_uring_quiesce(((struct net_tap *)b)->u);
}
#else
static int tap_send(struct net_backend *b, const struct net_vhdr *hdr, const uint8_t *frame, size_t len)
{
    uint8_t h[NET_VHDR_LEN];
    struct net_vhdr zero = { 0 };
    hdr_to_wire(hdr ? hdr : &zero, h);
    struct iovec iov[2] = { { h, NET_VHDR_LEN }, { (void *)frame, len } };
    ssize_t n = writev(b->fd, iov, 2);
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK ? -EAGAIN : -errno;
    /* a TAP write takes the whole frame or fails */
    return 0;
}

static ssize_t tap_recv(struct net_backend *b, struct net_vhdr *hdr, uint8_t *buf, size_t cap)
{
    uint8_t h[NET_VHDR_LEN];
    struct iovec iov[2] = { { h, NET_VHDR_LEN }, { buf, cap } };
    for (;;) {
        ssize_t n = readv(b->fd, iov, 2);
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK ? -EAGAIN : -errno;
        if (n == 0)
            return -EPIPE;
        if ((size_t)n < RUNT)
            continue;
        hdr_from_wire(h, hdr);
        return n - (ssize_t)NET_VHDR_LEN;
    }
}
#endif

static int tap_set_offloads(struct net_backend *b, uint64_t f)
{
    unsigned off = 0;
    if (f & (1ull << VIRTIO_NET_F_GUEST_CSUM)) {
        off |= TUN_F_CSUM;
        if (f & (1ull << VIRTIO_NET_F_GUEST_TSO4))
            off |= TUN_F_TSO4;
        if (f & (1ull << VIRTIO_NET_F_GUEST_TSO6))
            off |= TUN_F_TSO6;
    }
    return ioctl(((struct net_tap *)b)->tapfd, TUNSETOFFLOAD, (unsigned long)off) < 0 ? -errno : 0;
}

static void tap_destroy(struct net_backend *b)
{
    if (!b)
        return;
    struct net_tap *t = (struct net_tap *)b;
#ifdef MOAT_HAVE_URING
    net_uring_destroy(t->u);    /* lets go of the TAP first */
#endif
    close(t->tapfd);
    free(t);
}

static const struct net_backend_ops tap_ops = {
    .name = "tap",
    .send = tap_send,
    .recv = tap_recv,
    .set_offloads = tap_set_offloads,
    .destroy = tap_destroy,
#ifdef MOAT_HAVE_URING
    .flush = tap_flush,
    .quiesce = tap_quiesce,
#endif
};

int net_tap_from_fd(int fd, const char *name, struct net_backend **out, char *why, size_t wlen)
{
    struct net_tap *t = calloc(1, sizeof(*t));
    if (!t) {
        close(fd);
        snprintf(why, wlen, "out of memory");
        return -ENOMEM;
    }
    t->tapfd = fd;
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->b = (struct net_backend){ .ops = &tap_ops, .fd = fd, .vnet_hdr = true };
#ifdef MOAT_HAVE_URING
    char w[200] = "";
    struct net_uring_cfg c = { .fd = fd, .rx_slots = TAP_RX_AHEAD, .tx_slots = TAP_TX_SLOTS,
                               .slot_size = NET_VHDR_LEN + NET_FRAME_MAX, .name = t->name };
    int r = net_uring_create(&c, &t->u, w, sizeof(w));
    if (r < 0) {
        snprintf(why, wlen, "tap %s: %s (moat's TAP backend moves frames with io_uring; this moat was "
                 "built with liburing)", name, w);
        close(fd);
        free(t);
        return r;
    }
    t->b.fd = net_uring_eventfd(t->u);
    t->b.async = true;
#else
    (void)why;
    (void)wlen;
#endif
    *out = &t->b;
    return 0;
}

int net_tap_open(const char *name, struct net_backend **out, char *why, size_t wlen)
{
    if (!name || !*name || strlen(name) > NET_TAP_NAME_MAX || strchr(name, '/')) {
        snprintf(why, wlen, "tap: the device name must be 1 to %u bytes without '/'", NET_TAP_NAME_MAX);
        return -EINVAL;
    }
    int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        snprintf(why, wlen, "tap %s: /dev/net/tun: %s%s", name, strerror(e),
                 e == ENOENT ? " (no TUN/TAP support: modprobe tun)" : "");
        return -e;
    }
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
    if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
        int e = errno;
        snprintf(why, wlen, "tap %s: %s%s", name, strerror(e),
                 e == EPERM ? " (needs CAP_NET_ADMIN, or a TAP device made beforehand for this user: "
                              "ip tuntap add dev NAME mode tap user USER)"
                 : e == EBUSY ? " (in use by another process)"
                 : e == EINVAL ? " (a device of that name exists and is not a TAP device, or is a multi-queue one)"
                 : "");
        close(fd);
        return -e;
    }
    int hl = NET_VHDR_LEN;
    if (ioctl(fd, TUNSETVNETHDRSZ, &hl) < 0 || ioctl(fd, TUNSETOFFLOAD, 0ul) < 0) {
        int e = errno;
        snprintf(why, wlen, "tap %s: setting the virtio-net header: %s", name, strerror(e));
        close(fd);
        return -e;
    }
    return net_tap_from_fd(fd, ifr.ifr_name, out, why, wlen);
}
