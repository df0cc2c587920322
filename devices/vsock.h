/* virtio-vsock (stream sockets), transport-independent
 * (devices/virtio_dev.h), with Firecracker's "hybrid vsock" host side:
 *
 *  - moat listens on the AF_UNIX stream socket uds_path. A host client
 *    connects and writes "CONNECT <port>\n" (keyword case-insensitive;
 *    moat reads one byte at a time and never past the '\n': the bytes after
 *    it are payload for the guest). moat allocates a host port (from 2^30
 *    upward), sends the guest a REQUEST to <port>, and when the guest
 *    answers RESPONSE writes "OK <hostport>\n" in a single write, before
 *    any payload. No listener (the guest answers RST), a malformed line, or
 *    no answer within 2 s: the client's socket is closed.
 *  - a guest connection to host CID 2, port P connects to the Unix socket
 *    "<uds_path>_<P>"; if that fails the guest gets RST.
 *  - data both ways in packets of at most 64 KiB, with virtio-vsock credit
 *    flow control (u32 counters, checked: a guest that sends beyond the
 *    credit we gave it is reset). At most 1023 connections.
 *
 * Queues: 0 rx (device -> driver), 1 tx, 2 event (unused: buffers are held).
 * One I/O thread per device, polling the sockets, the kick eventfds and a
 * stop eventfd. stop() joins it; connections survive stop/start (pause,
 * snapshot). Everything the guest sends is parsed by devices/vsock_pkt.h. */
#ifndef MOAT_VSOCK_H
#define MOAT_VSOCK_H

#include <stddef.h>
#include <stdint.h>

#include "devices/virtio_dev.h"

#define VSOCK_QUEUE_MAX     256
#define VSOCK_MAX_CONNS     1023
#define VSOCK_BUF_ALLOC     (256u * 1024)   /* our receive buffer per connection */
#define VSOCK_CONNECT_TIMEOUT_MS 2000
#define VSOCK_DEFAULT_CID   3u

struct vsock_opts {
    const char *uds_path;   /* listening socket; guest-initiated: <uds_path>_<port> */
    uint64_t guest_cid;     /* 3 .. 2^32-2 */
    const char *name;       /* for logs */
};

struct vsock_dev;

/* Bind and listen on uds_path (a stale socket file there is replaced; any
 * other file is an error). 0 or -errno with a one-line reason in why. */
int vsock_create(const struct vsock_opts *o, struct vsock_dev **out, char *why, size_t wlen);

/* The device contract; dev = struct vsock_dev *. destroy() closes every
 * socket and removes uds_path. */
extern const struct virtio_dev_ops vsock_ops;

struct vsock_stats {
    uint64_t host_accepted;     /* host clients accepted on uds_path */
    uint64_t host_connected;    /* of those: OK sent */
    uint64_t guest_connected;   /* guest connections to <uds>_<port> made */
    uint64_t bad_pkts;          /* malformed packets from the guest */
    uint64_t resets;            /* RSTs sent to the guest */
    uint64_t rx_bytes, tx_bytes;/* payload host->guest, guest->host */
    unsigned conns;             /* live connections */
};
void vsock_get_stats(struct vsock_dev *v, struct vsock_stats *s);

#endif
