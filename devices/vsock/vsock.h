/* virtio-vsock (stream sockets), transport-independent
 * (devices/virtio/virtio_dev.h), with Firecracker's "hybrid vsock" host side:
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
 * Queues: 0 rx (device -> driver), 1 tx, 2 event (buffers are held; used
 * only for the TRANSPORT_RESET after a restore).
 * One I/O thread per device on its own epoll loop (devices/virtio/evloop.h):
 * the listening socket, each connection's socket, the kick eventfds
 * (blocking or O_NONBLOCK: the transport's own, or a vhost-user frontend's)
 * and a stop eventfd; each fd is registered once and its interest follows
 * the connection's state. A guest that gives no RX buffers stops the
 * reading of host sockets. stop() joins the thread; connections survive
 * stop/start (pause, snapshot). Everything the guest sends is parsed by devices/vsock/vsock_pkt.h.
 *
 * Restore (docs/vsock.md): connections are not part of a snapshot. A device
 * recreated for a restored VM is marked with vsock_restored() before its
 * first start: it then puts one VIRTIO_VSOCK_EVENT_TRANSPORT_RESET on the
 * event queue (Linux drops its connected sockets; listeners survive) and
 * is "gated": host clients wait in the listen backlog, not accepted, until
 * vsock_ungate(). vsock_open_internal() gives the VMM its own client while
 * gated (the post-restore fix-up through the agent); it is served once the
 * driver has handled the reset (it gives the event buffer back; at most
 * VSOCK_RESET_ACK_MS after delivery), since Linux would silently reset a
 * connection made before. */
#ifndef MOAT_VSOCK_H
#define MOAT_VSOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "devices/virtio/virtio_dev.h"

#define VSOCK_QUEUE_MAX     256
#define VSOCK_MAX_CONNS     1023
/* The longest uds_path: sun_path (108) less its NUL and room for the
 * "_<u32>" of guest-initiated connections' paths. */
#define VSOCK_UDS_PATH_MAX  96
#define VSOCK_BUF_ALLOC     (256u * 1024)   /* our receive buffer per connection */
#define VSOCK_CONNECT_TIMEOUT_MS 2000
#define VSOCK_DEFAULT_CID   3u
#define VSOCK_RESET_ACK_MS  1000    /* wait for the driver to handle TRANSPORT_RESET */

struct vsock_opts {
    const char *uds_path;   /* listening socket; guest-initiated: <uds_path>_<port> */
    uint64_t guest_cid;     /* 3 .. 2^32-2 */
    const char *name;       /* for logs */
    int seccomp;            /* enum sc_mode: the connector thread's filter */
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
    uint64_t host_refused;      /* clients of another uid, closed at once */
    uint64_t host_connected;    /* of those: OK sent */
    uint64_t guest_connected;   /* guest connections to <uds>_<port> made */
    uint64_t bad_pkts;          /* malformed packets from the guest */
    uint64_t resets;            /* RSTs sent to the guest */
    uint64_t rx_bytes, tx_bytes;/* payload host->guest, guest->host */
    unsigned conns;             /* live connections */
};
void vsock_get_stats(struct vsock_dev *v, struct vsock_stats *s);

/* Mark a freshly created device as restored (see above); call before its
 * first start. */
void vsock_restored(struct vsock_dev *v);
/* Accept host clients on uds_path again (idempotent, any thread). */
void vsock_ungate(struct vsock_dev *v);
bool vsock_is_gated(struct vsock_dev *v);
uint64_t vsock_guest_cid(const struct vsock_dev *v);
/* A host client that bypasses the listening socket and the gate: *fd is
 * one end of a socketpair (blocking) that the I/O thread treats like an
 * accepted client (write "CONNECT <port>\n", read "OK ..."). Served once
 * the device runs. 0, -EAGAIN (too many pending) or -errno. */
int vsock_open_internal(struct vsock_dev *v, int *fd);

#endif
