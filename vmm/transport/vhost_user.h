/* vhost-user backend: serve one moat virtio device (struct virtio_dev_ops +
 * instance) on a Unix socket so that QEMU, Cloud Hypervisor or any other
 * vhost-user frontend drives it with its own guest. See docs/vhost-user.md.
 *
 * The server listens on a path, accepts one frontend at a time and speaks
 * the protocol (messages parsed by devices/virtio/vhost_user_msg.h): features and
 * protocol features (PROTOCOL_FEATURES, REPLY_ACK, CONFIG, RESET_DEVICE; MQ
 * when the backend has more than one queue), the memory table (regions
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

#include "devices/virtio/virtio_dev.h"

struct vhu_server;

/* Create the listening socket at path (an existing socket file there is
 * replaced). The device (ops, dev) stays owned by the caller and must
 * outlive the server. 0 or -errno. Same as vhu_server_create_opts() with
 * o = NULL. */
int vhu_server_create(const char *path, const struct virtio_dev_ops *ops, void *dev,
                      struct vhu_server **out);

/* Per-device-type adjustments (0 fields: the defaults). */
struct vhu_server_opts {
    /* Vrings the frontend hands the backend: queues 0 .. nqueues-1 of the
     * device (at most ops->nqueues). Given, the device is started only once
     * all nqueues rings are ready (virtio-net: rx and tx); 0: all of the
     * device's, started on the longest prefix of ready rings (virtio-blk
     * with fewer queues than it has). Fewer than ops->nqueues when the
     * frontend handles the device's last queues itself, as QEMU's
     * vhost-user-vsock does with the event queue (it gives the backend rx
     * and tx only): the device gets env.nqueues = ops->nqueues with the
     * frontend's queues not ready (virtq_pop() finds nothing, kick_fd -1). */
    unsigned nqueues;
    /* Largest vring size accepted (default ops->queue_max; a power of two
     * <= 32768). QEMU's virtio-mmio reports QueueNumMax 1024 whatever the
     * device's queue size, and Linux uses the maximum. */
    uint16_t queue_max;
    /* Called from vhu_server_run() after a frontend went away and its
     * state was dropped (the device is stopped and, with ops->reset,
     * reset: its guest is gone). May be NULL. */
    void (*disconnected)(void *opaque);
    void *opaque;
    /* Seccomp (vmm/base/scfilter.h): the device's start, stop and reset
     * run on runner (NULL: on the server's thread), and its threads
     * install their filters in mode seccomp (enum sc_mode; 0: none). */
    struct sc_runner *runner;
    int seccomp;
};

/* vhu_server_create() with options (o may be NULL). -EINVAL if o asks for
 * more queues than the device has or a bad queue_max. */
int vhu_server_create_opts(const char *path, const struct virtio_dev_ops *ops, void *dev,
                           const struct vhu_server_opts *o, struct vhu_server **out);

/* Serve frontends until vhu_server_stop(): 0, or -errno on a listening
 * socket failure. A frontend's protocol error ends that connection only. */
int vhu_server_run(struct vhu_server *s);

/* Make vhu_server_run() return soon. Async-signal-safe. */
void vhu_server_stop(struct vhu_server *s);

/* Stop the device if running, close everything, unlink the socket. */
void vhu_server_destroy(struct vhu_server *s);

#endif
