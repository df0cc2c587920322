/* virtio-mmio v2 register model. Contracts in virtio_mmio.h. */
#include "devices/virtio_mmio.h"

#include <errno.h>
#include <string.h>

#define S_A    VIRTIO_STATUS_ACKNOWLEDGE
#define S_D    VIRTIO_STATUS_DRIVER
#define S_FO   VIRTIO_STATUS_FEATURES_OK
#define S_DOK  VIRTIO_STATUS_DRIVER_OK
#define S_NR   VIRTIO_STATUS_NEEDS_RESET
#define S_FAIL VIRTIO_STATUS_FAILED
#define DRIVER_BITS (S_A | S_D | S_FO | S_DOK | S_FAIL)

/* The legal driver-initiated steps (FAILED aside): one bit at a time, in
 * the order of 3.1.1. Writing the current value again is a no-op. */
static const struct { uint32_t from, to; } transitions[] = {
    { 0,                  S_A },
    { S_A,                S_A | S_D },
    { S_A | S_D,          S_A | S_D | S_FO },
    { S_A | S_D | S_FO,   S_A | S_D | S_FO | S_DOK },
};

bool virtio_mmio_status_legal(uint32_t status, uint32_t new_status)
{
    uint32_t cur = status & ~S_NR, v = new_status & ~S_NR;
    if (v == 0)
        return true;                    /* reset */
    if (v & ~DRIVER_BITS)
        return false;                   /* unknown bits */
    if (cur & ~v)
        return false;                   /* clearing a bit needs a reset */
    if (v == cur)
        return true;
    if (cur & S_FAIL)
        return false;                   /* failed: only reset */
    if ((v & ~cur) == S_FAIL)
        return true;                    /* give up at any point */
    uint32_t from = cur & ~S_FAIL, to = v & ~S_FAIL;
    for (size_t i = 0; i < sizeof transitions / sizeof transitions[0]; i++)
        if (transitions[i].from == from && transitions[i].to == to)
            return true;
    return false;
}

int virtio_mmio_init(struct virtio_mmio *vm, const struct virtio_mmio_params *p,
                     const struct gmem *mem, const struct virtio_mmio_ops *ops, void *opaque)
{
    memset(vm, 0, sizeof *vm);
    if (!p || !mem || !ops || p->nqueues == 0 || p->nqueues > VIRTIO_MMIO_MAX_QUEUES)
        return -EINVAL;
    for (unsigned i = 0; i < p->nqueues; i++)
        if (virtq_init(&vm->q[i], p->queue_max) < 0)
            return -EINVAL;
    pthread_mutexattr_t a;
    if (pthread_mutexattr_init(&a))
        return -ENOMEM;
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    int e = pthread_mutex_init(&vm->lock, &a);
    pthread_mutexattr_destroy(&a);
    if (e)
        return -e;
    vm->ops = ops;
    vm->opaque = opaque;
    vm->mem = mem;
    vm->device_id = p->device_id;
    vm->vendor_id = p->vendor_id ? p->vendor_id : VIRTIO_MMIO_VENDOR_MOAT;
    vm->device_features = p->device_features | (1ull << VIRTIO_F_VERSION_1);
    vm->nqueues = p->nqueues;
    return 0;
}

void virtio_mmio_destroy(struct virtio_mmio *vm)
{
    pthread_mutex_destroy(&vm->lock);
}

/* Lock held. */
static void update_irq(struct virtio_mmio *vm, uint32_t old)
{
    bool was = old != 0, now = vm->interrupt_status != 0;
    if (was != now && vm->ops->set_irq)
        vm->ops->set_irq(vm->opaque, now);
}

static void raise_locked(struct virtio_mmio *vm, uint32_t bits)
{
    uint32_t old = vm->interrupt_status;
    vm->interrupt_status |= bits & (VIRTIO_MMIO_INT_VRING | VIRTIO_MMIO_INT_CONFIG);
    update_irq(vm, old);
}

static void needs_reset_locked(struct virtio_mmio *vm)
{
    vm->status |= S_NR;
    if (vm->status & S_DOK)
        raise_locked(vm, VIRTIO_MMIO_INT_CONFIG);
}

static void reset_locked(struct virtio_mmio *vm)
{
    if (vm->ops->reset)
        vm->ops->reset(vm->opaque);
    for (unsigned i = 0; i < vm->nqueues; i++)
        virtq_reset(&vm->q[i]);
    vm->driver_features = vm->driver_requested = 0;
    vm->device_features_sel = vm->driver_features_sel = vm->queue_sel = 0;
    vm->status = 0;
    uint32_t old = vm->interrupt_status;
    vm->interrupt_status = 0;
    update_irq(vm, old);
}

static bool features_acceptable(const struct virtio_mmio *vm)
{
    return !(vm->driver_requested & ~vm->device_features) &&
           (vm->driver_requested & (1ull << VIRTIO_F_VERSION_1));
}

static void write_status(struct virtio_mmio *vm, uint32_t val)
{
    uint32_t v = val & ~S_NR;
    if (v == 0) {
        reset_locked(vm);
        return;
    }
    if (!virtio_mmio_status_legal(vm->status, v)) {
        vm->illegal_writes++;
        return;
    }
    uint32_t added = v & ~(vm->status & ~S_NR);
    if (added & S_FO) {
        if (!features_acceptable(vm)) {
            v &= ~S_FO;                 /* the driver reads it back clear */
            vm->illegal_writes++;
        } else {
            for (unsigned i = 0; i < vm->nqueues; i++)
                virtq_set_features(&vm->q[i], vm->driver_features);
        }
    }
    vm->status = v | (vm->status & S_NR);
    if ((added & S_DOK) && vm->ops->activate && vm->ops->activate(vm->opaque) != 0)
        needs_reset_locked(vm);
}

static struct virtq *sel_queue(struct virtio_mmio *vm)
{
    return vm->queue_sel < vm->nqueues ? &vm->q[vm->queue_sel] : NULL;
}

/* Queue configuration is open between FEATURES_OK and DRIVER_OK, for a
 * selected, existing queue that is not ready. */
static struct virtq *writable_queue(struct virtio_mmio *vm)
{
    struct virtq *q = sel_queue(vm);
    if (!q || q->ready || !(vm->status & S_FO) || (vm->status & (S_DOK | S_FAIL)))
        return NULL;
    return q;
}

static void set_lo(uint64_t *r, uint32_t v) { *r = (*r & 0xffffffff00000000ull) | v; }
static void set_hi(uint64_t *r, uint32_t v) { *r = (*r & 0xffffffffull) | (uint64_t)v << 32; }

void virtio_mmio_read(struct virtio_mmio *vm, uint64_t off, uint8_t *data, uint32_t len)
{
    memset(data, 0, len);
    pthread_mutex_lock(&vm->lock);
    if (off >= VIRTIO_MMIO_CONFIG) {
        if (off < VIRTIO_MMIO_SIZE && len <= VIRTIO_MMIO_SIZE - off && vm->ops->config_read)
            vm->ops->config_read(vm->opaque, (uint32_t)(off - VIRTIO_MMIO_CONFIG), data, len);
        goto out;
    }
    if (len != 4 || (off & 3))
        goto out;
    struct virtq *q = sel_queue(vm);
    uint32_t v = 0;
    switch (off) {
    case VIRTIO_MMIO_MAGIC:      v = VIRTIO_MMIO_MAGIC_VALUE; break;
    case VIRTIO_MMIO_VERSION:    v = VIRTIO_MMIO_VERSION_MODERN; break;
    case VIRTIO_MMIO_DEVICE_ID:  v = vm->device_id; break;
    case VIRTIO_MMIO_VENDOR_ID:  v = vm->vendor_id; break;
    case VIRTIO_MMIO_DEVICE_FEATURES:
        if (vm->device_features_sel < 2)
            v = (uint32_t)(vm->device_features >> (32 * vm->device_features_sel));
        break;
    case VIRTIO_MMIO_QUEUE_NUM_MAX: v = q ? q->max_size : 0; break;
    case VIRTIO_MMIO_QUEUE_NUM:     v = q ? q->size : 0; break;
    case VIRTIO_MMIO_QUEUE_READY:   v = q ? q->ready : 0; break;
    case VIRTIO_MMIO_QUEUE_DESC_LOW:    v = q ? (uint32_t)q->desc : 0; break;
    case VIRTIO_MMIO_QUEUE_DESC_HIGH:   v = q ? (uint32_t)(q->desc >> 32) : 0; break;
    case VIRTIO_MMIO_QUEUE_DRIVER_LOW:  v = q ? (uint32_t)q->avail : 0; break;
    case VIRTIO_MMIO_QUEUE_DRIVER_HIGH: v = q ? (uint32_t)(q->avail >> 32) : 0; break;
    case VIRTIO_MMIO_QUEUE_DEVICE_LOW:  v = q ? (uint32_t)q->used : 0; break;
    case VIRTIO_MMIO_QUEUE_DEVICE_HIGH: v = q ? (uint32_t)(q->used >> 32) : 0; break;
    case VIRTIO_MMIO_INTERRUPT_STATUS:  v = vm->interrupt_status; break;
    case VIRTIO_MMIO_STATUS:            v = vm->status; break;
    case VIRTIO_MMIO_CONFIG_GENERATION: v = vm->config_generation; break;
    default: break;                     /* write-only or reserved: 0 */
    }
    for (int i = 0; i < 4; i++)
        data[i] = (uint8_t)(v >> 8 * i);
out:
    pthread_mutex_unlock(&vm->lock);
}

void virtio_mmio_write(struct virtio_mmio *vm, uint64_t off, const uint8_t *data, uint32_t len)
{
    int notify = -1;
    pthread_mutex_lock(&vm->lock);
    if (off >= VIRTIO_MMIO_CONFIG) {
        if (off < VIRTIO_MMIO_SIZE && len <= VIRTIO_MMIO_SIZE - off && vm->ops->config_write)
            vm->ops->config_write(vm->opaque, (uint32_t)(off - VIRTIO_MMIO_CONFIG), data, len);
        goto out;
    }
    if (len != 4 || (off & 3)) {
        vm->illegal_writes++;
        goto out;
    }
    uint32_t v = (uint32_t)data[0] | (uint32_t)data[1] << 8 |
                 (uint32_t)data[2] << 16 | (uint32_t)data[3] << 24;
    struct virtq *q;
    switch (off) {
    case VIRTIO_MMIO_DEVICE_FEATURES_SEL: vm->device_features_sel = v; break;
    case VIRTIO_MMIO_DRIVER_FEATURES_SEL: vm->driver_features_sel = v; break;
    case VIRTIO_MMIO_DRIVER_FEATURES:
        if (vm->driver_features_sel >= 2 || !(vm->status & S_D) ||
            (vm->status & (S_FO | S_FAIL))) {
            vm->illegal_writes++;
            break;
        }
        if (vm->driver_features_sel)
            set_hi(&vm->driver_requested, v);
        else
            set_lo(&vm->driver_requested, v);
        vm->driver_features = vm->driver_requested & vm->device_features;
        break;
    case VIRTIO_MMIO_QUEUE_SEL: vm->queue_sel = v; break;
    case VIRTIO_MMIO_QUEUE_NUM:
        q = writable_queue(vm);
        if (!q || v == 0 || v > q->max_size)
            vm->illegal_writes++;
        else
            q->size = (uint16_t)v;
        break;
    case VIRTIO_MMIO_QUEUE_DESC_LOW:
    case VIRTIO_MMIO_QUEUE_DESC_HIGH:
    case VIRTIO_MMIO_QUEUE_DRIVER_LOW:
    case VIRTIO_MMIO_QUEUE_DRIVER_HIGH:
    case VIRTIO_MMIO_QUEUE_DEVICE_LOW:
    case VIRTIO_MMIO_QUEUE_DEVICE_HIGH: {
        q = writable_queue(vm);
        if (!q) {
            vm->illegal_writes++;
            break;
        }
        uint64_t *r = off < VIRTIO_MMIO_QUEUE_DRIVER_LOW ? &q->desc :
                      off < VIRTIO_MMIO_QUEUE_DEVICE_LOW ? &q->avail : &q->used;
        if (off & 4)
            set_hi(r, v);
        else
            set_lo(r, v);
        break;
    }
    case VIRTIO_MMIO_QUEUE_READY:
        q = sel_queue(vm);
        if (v == 1 && writable_queue(vm)) {
            if (virtq_enable(q, vm->mem) < 0)
                vm->illegal_writes++;   /* stays 0: the driver can see it */
        } else if (v == 0 && q && q->ready && !(vm->status & S_DOK)) {
            q->ready = false;
        } else {
            vm->illegal_writes++;
        }
        break;
    case VIRTIO_MMIO_QUEUE_NOTIFY:
        if (v < vm->nqueues && vm->q[v].ready && (vm->status & S_DOK) &&
            !(vm->status & S_FAIL))
            notify = (int)v;
        break;
    case VIRTIO_MMIO_INTERRUPT_ACK: {
        uint32_t old = vm->interrupt_status;
        vm->interrupt_status &= ~v;
        update_irq(vm, old);
        break;
    }
    case VIRTIO_MMIO_STATUS:
        write_status(vm, v);
        break;
    default:
        vm->illegal_writes++;           /* read-only or reserved */
        break;
    }
out:
    pthread_mutex_unlock(&vm->lock);
    if (notify >= 0 && vm->ops->queue_notify)
        vm->ops->queue_notify(vm->opaque, (unsigned)notify);
}

static void bus_read(void *o, uint64_t off, uint8_t *d, uint32_t len) { virtio_mmio_read(o, off, d, len); }
static void bus_write(void *o, uint64_t off, const uint8_t *d, uint32_t len) { virtio_mmio_write(o, off, d, len); }
const struct bus_ops virtio_mmio_bus_ops = { bus_read, bus_write };

void virtio_mmio_interrupt(struct virtio_mmio *vm, uint32_t bits)
{
    pthread_mutex_lock(&vm->lock);
    raise_locked(vm, bits);
    pthread_mutex_unlock(&vm->lock);
}

void virtio_mmio_config_changed(struct virtio_mmio *vm)
{
    pthread_mutex_lock(&vm->lock);
    vm->config_generation++;
    if (vm->status & S_DOK)
        raise_locked(vm, VIRTIO_MMIO_INT_CONFIG);
    pthread_mutex_unlock(&vm->lock);
}

void virtio_mmio_set_needs_reset(struct virtio_mmio *vm)
{
    pthread_mutex_lock(&vm->lock);
    needs_reset_locked(vm);
    pthread_mutex_unlock(&vm->lock);
}

uint32_t virtio_mmio_status(struct virtio_mmio *vm)
{
    pthread_mutex_lock(&vm->lock);
    uint32_t s = vm->status;
    pthread_mutex_unlock(&vm->lock);
    return s;
}

uint64_t virtio_mmio_features(struct virtio_mmio *vm)
{
    pthread_mutex_lock(&vm->lock);
    uint64_t f = (vm->status & S_FO) ? vm->driver_features : 0;
    pthread_mutex_unlock(&vm->lock);
    return f;
}
