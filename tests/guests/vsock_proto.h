/* What the virtio-vsock test guest (vsock.c) and its host side
 * (tests/integration/test_vsock.c) agree on. Plain C constants only.
 *
 * The guest (CID 3) finds virtio-vsock in virtio-mmio slot 0, prints
 * VS_READY, then
 *  1. waits for a host-initiated connection to VS_LISTEN_PORT, accepts it
 *     (RESPONSE), echoes every byte it receives, until it has echoed
 *     VS_ECHO_LEN bytes and the host shut down its side (SHUTDOWN) — it
 *     then answers RST; prints VS_ECHO_OK;
 *  2. connects to host port VS_HOST_PORT from VS_GUEST_PORT, sends VS_HELLO,
 *     expects VS_REPLY back, shuts down and waits for the RST; prints
 *     VS_OUT_OK and exits 0. */
#ifndef MOAT_GUEST_VSOCK_PROTO_H
#define MOAT_GUEST_VSOCK_PROTO_H

#define VS_LISTEN_PORT 52
#define VS_ECHO_LEN    14          /* strlen(VS_PING) */
#define VS_PING        "ping-from-host"
#define VS_HOST_PORT   1234
#define VS_GUEST_PORT  1025
#define VS_HELLO       "hello-from-guest"
#define VS_REPLY       "reply-from-host"
#define VS_READY       "vsock: ready\n"
#define VS_ECHO_OK     "vsock: echo ok\n"
#define VS_OUT_OK      "vsock: out ok\n"
#define VS_NODEV       3

#endif
