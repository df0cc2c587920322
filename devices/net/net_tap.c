/* TAP backend (devices/net/net_tap.h). */
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

#include "devices/net/virtio_net.h"

struct net_tap {
    struct net_backend b;       /* first: the device sees this */
    char name[NET_TAP_NAME_MAX + 1];
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
        if ((size_t)n < NET_VHDR_LEN + 14)     /* runt: skip it */
            continue;
        hdr_from_wire(h, hdr);
        return n - (ssize_t)NET_VHDR_LEN;
    }
}

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
    return ioctl(b->fd, TUNSETOFFLOAD, (unsigned long)off) < 0 ? -errno : 0;
}

static void tap_destroy(struct net_backend *b)
{
    if (!b)
        return;
    close(b->fd);
    free(b);
}

static const struct net_backend_ops tap_ops = {
    .name = "tap",
    .send = tap_send,
    .recv = tap_recv,
    .set_offloads = tap_set_offloads,
    .destroy = tap_destroy,
};

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
    struct net_tap *t = calloc(1, sizeof(*t));
    if (!t) {
        close(fd);
        snprintf(why, wlen, "out of memory");
        return -ENOMEM;
    }
    t->b = (struct net_backend){ .ops = &tap_ops, .fd = fd, .vnet_hdr = true };
    snprintf(t->name, sizeof(t->name), "%s", ifr.ifr_name);
    *out = &t->b;
    return 0;
}
