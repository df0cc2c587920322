/* Shared queue plumbing for devices (devices/virtio/vqueues.h). */
#include "devices/virtio/vqueues.h"

#include <errno.h>
#include <string.h>

#include "vmm/base/log.h"

void vqueues_init(struct vqueues *s, const struct virtio_dev_env *env, const char *name)
{
    memset(s, 0, sizeof(*s));
    s->env = env;
    s->name = name;
}

void vqueues_broken(struct vqueues *s, unsigned q, const char *why)
{
    if (q >= VIRTIO_DEV_MAX_QUEUES || s->broken[q])
        return;
    s->broken[q] = true;
    log_warn("%s: queue %u unusable (%s): device needs reset", s->name, q, why);
    if (s->env->needs_reset)
        s->env->needs_reset(s->env->opaque, q);
}

void vqueues_push(struct vqueues *s, unsigned q, uint16_t head, uint32_t len)
{
    if (virtq_push(&s->env->queues[q], s->env->mem, head, len) == -EIO)
        vqueues_broken(s, q, "used ring not in RAM");
    s->dirty[q] = true;
}

unsigned vqueues_publish(struct vqueues *s, unsigned *notified)
{
    unsigned published = 0, signalled = 0;
    for (unsigned q = 0; q < s->env->nqueues && q < VIRTIO_DEV_MAX_QUEUES; q++) {
        if (!s->dirty[q])
            continue;
        s->dirty[q] = false;
        struct virtq *vq = &s->env->queues[q];
        if (virtq_publish(vq, s->env->mem) < 0) {
            vqueues_broken(s, q, "used ring not in RAM");
            continue;
        }
        published++;
        if (virtq_should_notify(vq, s->env->mem)) {
            signalled++;
            s->env->notify_used(s->env->opaque, q);
        }
    }
    if (notified)
        *notified = signalled;
    return published;
}
