/* vhost-user backend: serve one moat virtio device (struct virtio_dev_ops +
 * instance) on a Unix socket so that QEMU, Cloud Hypervisor or any other
 * vhost-user frontend drives it with its own guest. See docs/vhost-user.md.
 *
 * The server listens on a path, accepts one frontend at a time and speaks
 * the protocol (messages parsed by devices/vhost_user_msg.h): features and
 * protocol features (PROTOCOL_FEATURES, REPLY_ACK, CONFIG, RESET_DEVICE; MQ
 * when the device has more than one queue), the memory table (regions
 * mmap'ed from the fds the frontend passes; the device gets a struct gmem of
 * guest-physical ranges), vring size/base/addresses (frontend user-virtual
 * addresses, translated to guest-physical through the memory table), kick
 * and call eventfds, GET_CONFIG/SET_CONFIG. The device is started once
 * queue 0 (and any further queues in order) has memory, addresses, a kick fd
 * and is enabled; it is stopped on GET_VRING_BASE, a change to a live
 * queue's configuration, reset, and disconnect. On disconnect the state is
 * dropped and the next frontend may connect.
 *
 * No process-global state: two servers in one process work. */
#ifndef MOAT_VHOST_USER_H
#define MOAT_VHOST_USER_H

#include "devices/virtio_dev.h"

struct vhu_server;

/* Create the listening socket at path (an existing socket file there is
 * replaced). The device (ops, dev) stays owned by the caller and must
 * outlive the server. 0 or -errno. */
int vhu_server_create(const char *path, const struct virtio_dev_ops *ops, void *dev,
                      struct vhu_server **out);

/* Serve frontends until vhu_server_stop(): 0, or -errno on a listening
 * socket failure. A frontend's protocol error ends that connection only. */
int vhu_server_run(struct vhu_server *s);

/* Make vhu_server_run() return soon. Async-signal-safe. */
void vhu_server_stop(struct vhu_server *s);

/* Stop the device if running, close everything, unlink the socket. */
void vhu_server_destroy(struct vhu_server *s);

#endif
