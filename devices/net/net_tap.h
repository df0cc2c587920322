/* A TAP device as a virtio-net backend (devices/net/net_backend.h):
 * opened with IFF_TAP | IFF_NO_PI | IFF_VNET_HDR, so frames carry the
 * virtio-net header and checksum / TSO offloads pass through. Needs
 * CAP_NET_ADMIN, or a TAP device made beforehand for this user (`ip tuntap
 * add dev NAME mode tap user USER`). */
#ifndef MOAT_NET_TAP_H
#define MOAT_NET_TAP_H

#include <stddef.h>

#include "devices/net/net_backend.h"

#define NET_TAP_NAME_MAX 15     /* IFNAMSIZ less its NUL */

/* Open (or create) the TAP device name: 0 or -errno with why (what to do
 * about a missing capability or device). */
int net_tap_open(const char *name, struct net_backend **out, char *why, size_t wlen);

/* The backend on fd, set up already (frames with the 12-byte virtio-net
 * header, one per read or write): net_tap_open's second half; tests give
 * it one end of a SOCK_SEQPACKET pair. Takes fd (closed on failure). With
 * liburing the backend is asynchronous (io_uring, net_uring.h) and a host
 * that refuses io_uring is an error saying so. 0 or -errno with why. */
int net_tap_from_fd(int fd, const char *name, struct net_backend **out, char *why, size_t wlen);

#endif
