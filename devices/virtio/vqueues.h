/* The queue plumbing every virtio device repeats, shared: a device's
 * queues with push, publish-a-batch-with-one-interrupt-decision and
 * broken -> NEEDS_RESET (a chain's bytes as two checked streams are
 * virtq_chain_read/_write, devices/virtio/virtq.h). No I/O of its own: unit tests
 * drive it with a plain buffer as guest memory. */
#ifndef MOAT_VQUEUES_H
#define MOAT_VQUEUES_H

#include <stdbool.h>
#include <stdint.h>

#include "devices/virtio/virtio_dev.h"
#include "devices/virtio/virtq.h"
#include "vmm/base/gmem.h"

/* A started device's queues (env: the one its start() was given, kept by
 * reference). Used by the device's own thread(s) only. */
struct vqueues {
    const struct virtio_dev_env *env;
    const char *name;            /* the device's, for messages */
    bool broken[VIRTIO_DEV_MAX_QUEUES];
    bool dirty[VIRTIO_DEV_MAX_QUEUES];   /* pushed, not yet published */
};

void vqueues_init(struct vqueues *s, const struct virtio_dev_env *env, const char *name);
/* Queue q cannot be used any more (a bad ring): logged and reported to
 * the transport (NEEDS_RESET) once; vqueues_init clears it. */
void vqueues_broken(struct vqueues *s, unsigned q, const char *why);
/* Put a finished chain on q's used ring (published by vqueues_publish). */
void vqueues_push(struct vqueues *s, unsigned q, uint16_t head, uint32_t len);
/* Publish every queue with pushed entries and tell the driver where an
 * interrupt is due (one decision per queue per batch). The number of
 * queues published; *notified (may be NULL) gets how many were signalled. */
unsigned vqueues_publish(struct vqueues *s, unsigned *notified);

#endif
