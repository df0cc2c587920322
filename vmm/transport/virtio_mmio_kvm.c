/* virtio-mmio on KVM: ioeventfd kicks, irqfd interrupts. Contracts in
 * virtio_mmio_kvm.h. */
#include "vmm/transport/virtio_mmio_kvm.h"

#include <errno.h>
#include <linux/kvm.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "devices/virtio/virtio_mmio.h"
#include "vmm/base/layout.h"
#include "vmm/base/log.h"
#include "vmm/base/scfilter.h"

struct virtio_mmio_kvm {
    struct virtio_mmio mmio;
    const struct virtio_dev_ops *ops;
    void *dev;
    int vm_fd;
    unsigned slot, gsi;
    uint64_t base;
    unsigned nqueues;
    int kick_fd[VIRTIO_DEV_MAX_QUEUES];
    bool ioeventfd[VIRTIO_DEV_MAX_QUEUES];
    int irq_fd;
    bool irqfd;
    bool started;                   /* under mmio.lock */
    bool quiesced;                  /* stopped by virtio_mmio_kvm_stop() while live */
    char name[16];
    /* Seccomp (vmm/base/scfilter.h): device start, stop and reset run on
     * the VM's runner (NULL: on the calling thread); the device's threads
     * install their own filter in this mode. */
    struct sc_runner *runner;
    int seccomp;
};

void virtio_mmio_kvm_set_seccomp(struct virtio_mmio_kvm *t, struct sc_runner *runner, int mode)
{
    t->runner = runner;
    t->seccomp = mode;
}

struct dev_call {
    struct virtio_mmio_kvm *t;
    const struct virtio_dev_env *env;
    int what;                       /* 0 start, 1 stop, 2 stop and reset */
};

static int dev_call_fn(void *p)
{
    struct dev_call *c = p;
    if (c->what == 0)
        return c->t->ops->start(c->t->dev, c->env);
    c->t->ops->stop(c->t->dev);
    if (c->what == 2 && c->t->ops->reset)
        c->t->ops->reset(c->t->dev);
    return 0;
}

static int dev_run_on(void *opaque, int (*fn)(void *), void *arg)
{
    struct virtio_mmio_kvm *t = opaque;
    return sc_runner_call(t->runner, fn, arg);
}

/* The device's start (0), stop (1) or stop and reset (2), on the runner. */
static int dev_call(struct virtio_mmio_kvm *t, int what, const struct virtio_dev_env *env)
{
    struct dev_call c = { t, env, what };
    return sc_runner_call(t->runner, dev_call_fn, &c);
}

uint64_t virtio_mmio_kvm_slot_base(unsigned slot) { return LAYOUT_VIRTIO_MMIO + LAYOUT_VIRTIO_SLOT * slot; }
unsigned virtio_mmio_kvm_slot_gsi(unsigned slot) { return LAYOUT_VIRTIO_IRQ0 + slot; }

int virtio_mmio_kvm_cmdline(unsigned slot, char *buf, size_t len)
{
    int n = snprintf(buf, len, "virtio_mmio.device=4K@0x%llx:%u",
                     (unsigned long long)virtio_mmio_kvm_slot_base(slot), virtio_mmio_kvm_slot_gsi(slot));
    return n < 0 || (size_t)n >= len ? -ENOSPC : n;
}

int virtio_mmio_kvm_uses_ioeventfd(const struct virtio_mmio_kvm *t) { return t->ioeventfd[0]; }

/* From the device's threads: these take only the register model's
 * irq_lock, never the register lock a driver reset holds while it stops
 * (joins) the device (devices/virtio/virtio_mmio.h). */
static void dev_notify_used(void *opaque, unsigned q)
{
    struct virtio_mmio_kvm *t = opaque;
    (void)q;
    virtio_mmio_interrupt(&t->mmio, VIRTIO_MMIO_INT_VRING);
}

static void dev_needs_reset(void *opaque, unsigned q)
{
    (void)q;   /* virtio-mmio has one status for the device */
    struct virtio_mmio_kvm *t = opaque;
    virtio_mmio_set_needs_reset(&t->mmio);
}

static void dev_config_changed(void *opaque)
{
    struct virtio_mmio_kvm *t = opaque;
    virtio_mmio_config_changed(&t->mmio);
}

/* ---- register model callbacks (mmio.lock held, except queue_notify) ---- */

static void tr_queue_notify(void *opaque, unsigned q)
{
    struct virtio_mmio_kvm *t = opaque;
    uint64_t one = 1;
    if (q < t->nqueues && write(t->kick_fd[q], &one, sizeof one) < 0)
        log_err("%s: kick eventfd: %s", t->name, strerror(errno));
}

/* Lock held. */
static int start_locked(struct virtio_mmio_kvm *t)
{
    struct virtio_dev_env env;
    memset(&env, 0, sizeof env);
    env.mem = t->mmio.mem;
    env.queues = t->mmio.q;
    env.nqueues = t->nqueues;
    env.features = t->mmio.driver_features;
    for (unsigned q = 0; q < t->nqueues; q++)
        env.kick_fd[q] = t->kick_fd[q];
    env.notify_used = dev_notify_used;
    env.needs_reset = dev_needs_reset;
    env.config_changed = dev_config_changed;
    env.run_on = dev_run_on;
    env.opaque = t;
    env.seccomp = t->seccomp;
    int r = dev_call(t, 0, &env);
    if (r < 0) {
        log_err("%s: device start failed: %s", t->name, strerror(-r));
        return r;
    }
    t->started = true;
    unsigned ready = 0;
    for (unsigned q = 0; q < t->nqueues; q++)
        ready += t->mmio.q[q].ready ? 1 : 0;
    log_info("%s: driver ready: features 0x%llx, %u of %u queues set up", t->name,
             (unsigned long long)env.features, ready, t->nqueues);
    return 0;
}

static int tr_activate(void *opaque)
{
    struct virtio_mmio_kvm *t = opaque;
    if (t->started)
        return 0;
    return start_locked(t);
}

static void tr_reset(void *opaque)
{
    struct virtio_mmio_kvm *t = opaque;
    t->quiesced = false;
    if (!t->started)
        return;
    dev_call(t, 2, NULL);           /* reset: the driver forgot it all: so does the device */
    t->started = false;
}

static void tr_config_read(void *opaque, uint32_t off, uint8_t *data, uint32_t len)
{
    struct virtio_mmio_kvm *t = opaque;
    if (t->ops->config_read)
        t->ops->config_read(t->dev, off, data, len);
}

static void tr_config_write(void *opaque, uint32_t off, const uint8_t *data, uint32_t len)
{
    struct virtio_mmio_kvm *t = opaque;
    if (t->ops->config_write)
        t->ops->config_write(t->dev, off, data, len);
}

static void tr_set_irq(void *opaque, bool level)
{
    struct virtio_mmio_kvm *t = opaque;
    if (!level)
        return;                     /* edge-triggered pin: only the rising edge matters */
    if (t->irqfd) {
        uint64_t one = 1;
        if (write(t->irq_fd, &one, sizeof one) < 0)
            log_err("%s: irqfd: %s", t->name, strerror(errno));
        return;
    }
    struct kvm_irq_level l = { .irq = t->gsi, .level = 1 };
    if (ioctl(t->vm_fd, KVM_IRQ_LINE, &l) == 0) {
        l.level = 0;
        ioctl(t->vm_fd, KVM_IRQ_LINE, &l);
    }
}

static const struct virtio_mmio_ops tr_ops = {
    .queue_notify = tr_queue_notify,
    .activate = tr_activate,
    .reset = tr_reset,
    .config_read = tr_config_read,
    .config_write = tr_config_write,
    .set_irq = tr_set_irq,
};

/* ---- lifecycle ---- */

static void unhook(struct virtio_mmio_kvm *t)
{
    for (unsigned q = 0; q < t->nqueues; q++) {
        if (t->ioeventfd[q]) {
            struct kvm_ioeventfd io = {
                .datamatch = q, .addr = t->base + VIRTIO_MMIO_QUEUE_NOTIFY, .len = 4,
                .fd = t->kick_fd[q],
                .flags = KVM_IOEVENTFD_FLAG_DATAMATCH | KVM_IOEVENTFD_FLAG_DEASSIGN,
            };
            ioctl(t->vm_fd, KVM_IOEVENTFD, &io);
            t->ioeventfd[q] = false;
        }
    }
    if (t->irqfd) {
        struct kvm_irqfd f = { .fd = (uint32_t)t->irq_fd, .gsi = t->gsi, .flags = KVM_IRQFD_FLAG_DEASSIGN };
        ioctl(t->vm_fd, KVM_IRQFD, &f);
        t->irqfd = false;
    }
}

static void tr_free(struct virtio_mmio_kvm *t, bool mmio_ok)
{
    unhook(t);
    for (unsigned q = 0; q < t->nqueues; q++)
        if (t->kick_fd[q] >= 0)
            close(t->kick_fd[q]);
    if (t->irq_fd >= 0)
        close(t->irq_fd);
    if (mmio_ok)
        virtio_mmio_destroy(&t->mmio);
    t->ops->destroy(t->dev);
    free(t);
}

int virtio_mmio_kvm_create(struct virtio_mmio_kvm **out, int vm_fd, struct bus *mmio,
                           const struct gmem *mem, unsigned slot,
                           const struct virtio_dev_ops *ops, void *dev)
{
    *out = NULL;
    if (!ops || !dev)
        return -EINVAL;
    if (slot >= VIRTIO_MMIO_KVM_MAX_SLOTS || ops->nqueues == 0 || ops->nqueues > VIRTIO_DEV_MAX_QUEUES ||
        ops->nqueues > VIRTIO_MMIO_MAX_QUEUES) {
        ops->destroy(dev);
        return -EINVAL;
    }
    struct virtio_mmio_kvm *t = calloc(1, sizeof *t);
    if (!t) {
        ops->destroy(dev);
        return -ENOMEM;
    }
    t->ops = ops;
    t->dev = dev;
    t->vm_fd = vm_fd;
    t->slot = slot;
    t->gsi = virtio_mmio_kvm_slot_gsi(slot);
    t->base = virtio_mmio_kvm_slot_base(slot);
    t->nqueues = ops->nqueues;
    t->irq_fd = -1;
    snprintf(t->name, sizeof t->name, "virtio-%s@%u", ops->name ? ops->name : "dev", slot);
    for (unsigned q = 0; q < VIRTIO_DEV_MAX_QUEUES; q++)
        t->kick_fd[q] = -1;
    int r;
    for (unsigned q = 0; q < t->nqueues; q++) {
        /* Blocking (KVM signals it; devices read it without blocking, whatever
         * its flags: a vhost-user frontend hands them non-blocking ones). */
        t->kick_fd[q] = eventfd(0, EFD_CLOEXEC);
        if (t->kick_fd[q] < 0) {
            r = -errno;
            tr_free(t, false);
            return r;
        }
    }
    struct virtio_mmio_params p = {
        .device_id = ops->device_id, .device_features = ops->features(dev),
        .nqueues = ops->nqueues, .queue_max = ops->queue_max,
    };
    if ((r = virtio_mmio_init(&t->mmio, &p, mem, &tr_ops, t)) < 0) {
        tr_free(t, false);
        return r;
    }
    if ((r = bus_register(mmio, t->base, LAYOUT_VIRTIO_SLOT, &virtio_mmio_bus_ops, &t->mmio)) < 0) {
        tr_free(t, true);
        return r;
    }
    for (unsigned q = 0; q < t->nqueues; q++) {
        struct kvm_ioeventfd io = {
            .datamatch = q, .addr = t->base + VIRTIO_MMIO_QUEUE_NOTIFY, .len = 4,
            .fd = t->kick_fd[q], .flags = KVM_IOEVENTFD_FLAG_DATAMATCH,
        };
        if (ioctl(vm_fd, KVM_IOEVENTFD, &io) == 0) {
            t->ioeventfd[q] = true;
        } else {
            log_info("%s: KVM_IOEVENTFD: %s; kicks take MMIO exits", t->name, strerror(errno));
            break;
        }
    }
    t->irq_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (t->irq_fd >= 0) {
        struct kvm_irqfd f = { .fd = (uint32_t)t->irq_fd, .gsi = t->gsi };
        if (ioctl(vm_fd, KVM_IRQFD, &f) == 0)
            t->irqfd = true;
        else
            log_info("%s: KVM_IRQFD: %s; interrupts through KVM_IRQ_LINE", t->name, strerror(errno));
    }
    *out = t;
    return 0;
}

void virtio_mmio_kvm_stop(struct virtio_mmio_kvm *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->mmio.lock);
    bool was = t->started;
    t->started = false;
    if (was)
        t->quiesced = true;
    pthread_mutex_unlock(&t->mmio.lock);
    /* Without the lock: the draining device may still interrupt. */
    if (was)
        dev_call(t, 1, NULL);
}

int virtio_mmio_kvm_resume(struct virtio_mmio_kvm *t)
{
    if (!t)
        return -EINVAL;
    int r = 0;
    pthread_mutex_lock(&t->mmio.lock);
    uint32_t st = t->mmio.status;
    if (t->quiesced && !t->started && (st & VIRTIO_STATUS_DRIVER_OK) && !(st & VIRTIO_STATUS_FAILED))
        r = start_locked(t);
    t->quiesced = false;
    pthread_mutex_unlock(&t->mmio.lock);
    return r;
}

void virtio_mmio_kvm_destroy(struct virtio_mmio_kvm *t)
{
    if (!t)
        return;
    virtio_mmio_kvm_stop(t);
    tr_free(t, true);
}

uint32_t virtio_mmio_kvm_device_id(const struct virtio_mmio_kvm *t) { return t->ops->device_id; }

int virtio_mmio_kvm_save(struct virtio_mmio_kvm *t, struct virtio_mmio_state *s)
{
    if (!t || !s)
        return -EINVAL;
    pthread_mutex_lock(&t->mmio.lock);
    int r = t->started ? -EBUSY : virtio_mmio_save(&t->mmio, s);
    pthread_mutex_unlock(&t->mmio.lock);
    return r;
}

int virtio_mmio_kvm_load(struct virtio_mmio_kvm *t, const struct virtio_mmio_state *s, const char **why)
{
    if (why)
        *why = NULL;
    if (!t || !s)
        return -EINVAL;
    pthread_mutex_lock(&t->mmio.lock);
    int r;
    if (t->started) {
        r = -EBUSY;
        if (why)
            *why = "device running";
    } else {
        r = virtio_mmio_load(&t->mmio, s, why);
        uint32_t st = t->mmio.status;
        if (r == 0)
            t->quiesced = (st & VIRTIO_STATUS_DRIVER_OK) && !(st & VIRTIO_STATUS_FAILED);
    }
    pthread_mutex_unlock(&t->mmio.lock);
    return r;
}
