/* A virtio device, independent of its transport. The same device instance
 * runs behind moat's virtio-mmio (vmm/) or behind a vhost-user socket
 * (`moat device ...`): the transport negotiates features and configures the
 * queues, then hands the device a struct virtio_dev_env and starts it.
 * No KVM headers here: the transport turns kicks into eventfds (KVM
 * ioeventfd, or the vhost-user kick fd) and turns "used buffers" into
 * interrupts (virtio-mmio InterruptStatus + irqfd, or the vhost-user call fd).
 */
#ifndef MOAT_VIRTIO_DEV_H
#define MOAT_VIRTIO_DEV_H

#include <stdbool.h>
#include <stdint.h>

#include "devices/virtio/virtq.h"
#include "vmm/base/gmem.h"

#define VIRTIO_DEV_MAX_QUEUES 8

#define VIRTIO_ID_NET   1
#define VIRTIO_ID_BLOCK 2
#define VIRTIO_ID_RNG   4
#define VIRTIO_ID_VSOCK 19

struct virtio_dev_env {
    const struct gmem *mem;         /* guest memory (valid until stop) */
    struct virtq *queues;           /* configured, enabled queues [0, nqueues) */
    unsigned nqueues;
    uint64_t features;              /* negotiated */
    /* eventfd: readable when the driver kicked queue i (-1: not the
     * device's). Blocking (KVM ioeventfd) or O_NONBLOCK (a vhost-user
     * frontend's, as it gave it): wait for it to be readable (epoll,
     * io_uring POLL_ADD) and reset it with evloop_eventfd_take
     * (devices/virtio/evloop.h), never with a blocking read. */
    int kick_fd[VIRTIO_DEV_MAX_QUEUES];
    /* Tell the driver that queue q has new used buffers (the transport
     * decides, with virtq_should_notify(), whether an interrupt is due or
     * the device does — see the device's docs). Thread-safe. */
    void (*notify_used)(void *opaque, unsigned q);
    /* The device found queue q broken (a bad ring): the transport sets
     * NEEDS_RESET and tells the driver (virtio-mmio: a config-change
     * interrupt; vhost-user: the queue's error eventfd, and GET_STATUS).
     * Thread-safe. May be NULL. */
    void (*needs_reset)(void *opaque, unsigned q);
    /* The device's config space changed (virtio-blk's capacity after a
     * backing-file swap): the transport bumps the config generation and
     * raises a config-change interrupt if the driver is live. Any thread
     * but one inside the device's stop(). May be NULL. */
    void (*config_changed)(void *opaque);
    /* Run fn(arg) on the thread that starts and stops this device (the
     * VM's runner, whose seccomp list allows what a start needs: threads,
     * eventfds, rings) and return its result; a device restarting itself
     * outside start/stop (virtio-blk's backing-file swap) goes through it.
     * May be NULL: call fn directly. */
    int (*run_on)(void *opaque, int (*fn)(void *), void *arg);
    void *opaque;
    /* enum sc_mode (vmm/base/scfilter.h): each thread the device starts
     * installs its kind's seccomp filter in this mode before it touches
     * guest memory (0: none). */
    int seccomp;
};

struct virtio_dev_ops {
    const char *name;               /* "blk", "vsock", ... */
    uint32_t device_id;             /* VIRTIO_ID_* */
    unsigned nqueues;
    uint16_t queue_max;             /* power of two */
    uint64_t (*features)(void *dev);   /* offered (VIRTIO_F_VERSION_1 added by the transport) */
    /* Device config space, off from its start, len 1/2/4/8. */
    void (*config_read)(void *dev, uint32_t off, uint8_t *data, uint32_t len);
    void (*config_write)(void *dev, uint32_t off, const uint8_t *data, uint32_t len);
    uint32_t (*config_size)(void *dev);
    /* Start processing (DRIVER_OK / vring enable). 0 or -errno. The device
     * owns its I/O thread(s) from here until stop(), and looks at every
     * queue once when it starts: buffers made available before (or while
     * it was stopped) get no kick of their own. */
    int (*start)(void *dev, const struct virtio_dev_env *env);
    /* Quiesce: stop the thread(s), drain or complete every in-flight request
     * (publishing used entries), return once no guest memory is touched any
     * more. Idempotent. Used on reset, pause/snapshot and teardown. */
    void (*stop)(void *dev);
    /* Forget everything the guest set up, after stop(): the driver reset
     * the device (virtio-mmio status 0) or its vhost-user frontend went
     * away, so that guest is gone. The device is as after create, its
     * configuration kept (vsock: every connection closed, host clients in
     * the listen backlog too; the socket stays bound). May be NULL:
     * nothing to forget beyond stop() (blk). */
    void (*reset)(void *dev);
    void (*destroy)(void *dev);
};

#endif
