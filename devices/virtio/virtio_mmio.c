/* virtio-mmio v2 register model. Contracts in virtio_mmio.h. */
#include "devices/virtio/virtio_mmio.h"

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
    if ((e = pthread_mutex_init(&vm->irq_lock, NULL))) {
        pthread_mutex_destroy(&vm->lock);
        return -e;
    }
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
    pthread_mutex_destroy(&vm->irq_lock);
    pthread_mutex_destroy(&vm->lock);
}

/* irq_lock held: InterruptStatus becomes old -> now; tell the line. */
static void update_irq(struct virtio_mmio *vm, uint32_t old)
{
    bool was = old != 0, now = vm->interrupt_status != 0;
    if (was != now && vm->ops->set_irq)
        vm->ops->set_irq(vm->opaque, now);
}

/* irq_lock held. */
static void raise_irq_locked(struct virtio_mmio *vm, uint32_t bits)
{
    uint32_t old = vm->interrupt_status;
    vm->interrupt_status |= bits & (VIRTIO_MMIO_INT_VRING | VIRTIO_MMIO_INT_CONFIG);
    update_irq(vm, old);
}

/* Change InterruptStatus: set `set`, clear `clear` (irq_lock taken here). */
static void irq_update(struct virtio_mmio *vm, uint32_t set, uint32_t clear)
{
    pthread_mutex_lock(&vm->irq_lock);
    uint32_t old = vm->interrupt_status;
    vm->interrupt_status &= ~clear;
    vm->interrupt_status |= set & (VIRTIO_MMIO_INT_VRING | VIRTIO_MMIO_INT_CONFIG);
    update_irq(vm, old);
    pthread_mutex_unlock(&vm->irq_lock);
}

/* lock held: a NEEDS_RESET the device asked for becomes part of status. */
static void fold_nr(struct virtio_mmio *vm)
{
    pthread_mutex_lock(&vm->irq_lock);
    if (vm->nr_request)
        vm->status |= S_NR;
    vm->nr_request = false;
    pthread_mutex_unlock(&vm->irq_lock);
}

/* lock held: status changed; keep `live` (read by the device side) true. */
static void set_live(struct virtio_mmio *vm)
{
    pthread_mutex_lock(&vm->irq_lock);
    vm->live = (vm->status & S_DOK) != 0;
    pthread_mutex_unlock(&vm->irq_lock);
}

static void needs_reset_locked(struct virtio_mmio *vm)
{
    vm->status |= S_NR;
    if (vm->status & S_DOK)
        irq_update(vm, VIRTIO_MMIO_INT_CONFIG, 0);
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
    pthread_mutex_lock(&vm->irq_lock);
    vm->nr_request = false;
    vm->live = false;
    uint32_t old = vm->interrupt_status;
    vm->interrupt_status = 0;
    update_irq(vm, old);
    pthread_mutex_unlock(&vm->irq_lock);
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
    set_live(vm);
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
    fold_nr(vm);
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
    case VIRTIO_MMIO_INTERRUPT_STATUS:
        pthread_mutex_lock(&vm->irq_lock);
        v = vm->interrupt_status;
        pthread_mutex_unlock(&vm->irq_lock);
        break;
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
    fold_nr(vm);
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
    case VIRTIO_MMIO_INTERRUPT_ACK:
        irq_update(vm, 0, v);
        break;
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
    irq_update(vm, bits, 0);
}

void virtio_mmio_config_changed(struct virtio_mmio *vm)
{
    pthread_mutex_lock(&vm->lock);
    vm->config_generation++;
    if (vm->status & S_DOK)
        irq_update(vm, VIRTIO_MMIO_INT_CONFIG, 0);
    pthread_mutex_unlock(&vm->lock);
}

/* The device side: recorded under irq_lock and folded into status at the
 * next register access (or save). */
void virtio_mmio_set_needs_reset(struct virtio_mmio *vm)
{
    pthread_mutex_lock(&vm->irq_lock);
    vm->nr_request = true;
    if (vm->live)
        raise_irq_locked(vm, VIRTIO_MMIO_INT_CONFIG);
    pthread_mutex_unlock(&vm->irq_lock);
}

uint32_t virtio_mmio_status(struct virtio_mmio *vm)
{
    pthread_mutex_lock(&vm->lock);
    fold_nr(vm);
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

/* ---- snapshot state ---- */

int virtio_mmio_save(struct virtio_mmio *vm, struct virtio_mmio_state *s)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_lock(&vm->lock);
    fold_nr(vm);
    int r = 0;
    s->device_id = vm->device_id;
    s->nqueues = vm->nqueues;
    s->device_features = vm->device_features;
    s->driver_features = vm->driver_features;
    s->driver_requested = vm->driver_requested;
    s->device_features_sel = vm->device_features_sel;
    s->driver_features_sel = vm->driver_features_sel;
    s->queue_sel = vm->queue_sel;
    s->status = vm->status;
    pthread_mutex_lock(&vm->irq_lock);
    s->interrupt_status = vm->interrupt_status;
    pthread_mutex_unlock(&vm->irq_lock);
    s->config_generation = vm->config_generation;
    for (unsigned i = 0; i < vm->nqueues; i++) {
        const struct virtq *q = &vm->q[i];
        if (q->inflight || q->used_idx != q->published_idx)
            r = -EBUSY;
        s->q[i] = (struct virtio_mmio_qstate){
            .desc = q->desc, .driver = q->avail, .device = q->used, .num = q->size,
            .last_avail_idx = q->last_avail_idx, .used_idx = q->used_idx,
            .signalled_used = q->signalled_used, .ready = q->ready,
            .signalled_valid = q->signalled_valid, .broken = q->broken, .err = (uint8_t)q->err,
        };
    }
    pthread_mutex_unlock(&vm->lock);
    return r;
}

static bool is_pow2_16(uint16_t v) { return v && !(v & (v - 1)); }

#define REJECT(msg) do { if (why) *why = (msg); return -EINVAL; } while (0)

/* Lock held. Check s against vm and build the queues in out. */
static int check_state(const struct virtio_mmio *vm, const struct virtio_mmio_state *s,
                       struct virtq *out, const char **why)
{
    static const uint32_t reachable[] = { 0, S_A, S_A | S_D, S_A | S_D | S_FO, S_A | S_D | S_FO | S_DOK };
    if (s->device_id != vm->device_id)
        REJECT("device id differs");
    if (s->nqueues != vm->nqueues)
        REJECT("queue count differs");
    if (s->device_features != vm->device_features)
        REJECT("offered features differ");
    if (s->status & ~(DRIVER_BITS | S_NR))
        REJECT("unknown status bits");
    uint32_t base = s->status & ~(S_NR | S_FAIL);
    bool ok = false;
    for (size_t i = 0; i < sizeof reachable / sizeof reachable[0]; i++)
        ok |= base == reachable[i];
    if (!ok)
        REJECT("status not reachable by legal driver steps");
    bool fo = s->status & S_FO;
    if (s->driver_features != (s->driver_requested & s->device_features))
        REJECT("driver features inconsistent with the requested ones");
    if (fo && ((s->driver_requested & ~s->device_features) ||
               !(s->driver_requested & (1ull << VIRTIO_F_VERSION_1))))
        REJECT("FEATURES_OK with features not offered or without VERSION_1");
    if (s->interrupt_status & ~(VIRTIO_MMIO_INT_VRING | VIRTIO_MMIO_INT_CONFIG))
        REJECT("unknown interrupt status bits");
    static const struct virtio_mmio_qstate zero;
    for (unsigned i = vm->nqueues; i < VIRTIO_MMIO_MAX_QUEUES; i++)
        if (memcmp(&s->q[i], &zero, sizeof zero))
            REJECT("state for a queue the device does not have");
    for (unsigned i = 0; i < vm->nqueues; i++) {
        const struct virtio_mmio_qstate *qs = &s->q[i];
        struct virtq q = vm->q[i];
        virtq_reset(&q);
        if (qs->ready > 1 || qs->signalled_valid > 1 || qs->broken > 1 || qs->pad)
            REJECT("queue flag not 0/1, or padding not zero");
        if (qs->err >= VIRTQ_E__COUNT || (qs->broken && qs->err == VIRTQ_OK))
            REJECT("queue error code out of range");
        if (qs->num == 0 || qs->num > q.max_size)
            REJECT("queue size 0 or above QueueNumMax");
        q.size = qs->num;
        q.desc = qs->desc;
        q.avail = qs->driver;
        q.used = qs->device;
        if (!qs->ready) {
            if (qs->broken)
                REJECT("broken queue not ready");
        } else {
            if (!fo)
                REJECT("ready queue before FEATURES_OK");
            if (!is_pow2_16(qs->num))
                REJECT("queue size not a power of two");
            if (virtq_enable(&q, vm->mem) < 0)
                REJECT("queue rings misaligned or outside guest RAM");
            if ((uint16_t)(qs->last_avail_idx - qs->used_idx) > qs->num)
                REJECT("queue indices more than a ring apart");
        }
        if (fo)
            virtq_set_features(&q, s->driver_features);
        q.last_avail_idx = qs->last_avail_idx;
        q.used_idx = q.published_idx = qs->used_idx;
        q.signalled_used = qs->signalled_used;
        q.signalled_valid = qs->signalled_valid;
        q.broken = qs->broken;
        q.err = (enum virtq_err)qs->err;
        q.inflight = 0;
        out[i] = q;
    }
    return 0;
}

int virtio_mmio_load(struct virtio_mmio *vm, const struct virtio_mmio_state *s, const char **why)
{
    if (why)
        *why = NULL;
    struct virtq q[VIRTIO_MMIO_MAX_QUEUES];
    pthread_mutex_lock(&vm->lock);
    int r = check_state(vm, s, q, why);
    if (r == 0) {
        memcpy(vm->q, q, vm->nqueues * sizeof q[0]);
        vm->driver_features = s->driver_features;
        vm->driver_requested = s->driver_requested;
        vm->device_features_sel = s->device_features_sel;
        vm->driver_features_sel = s->driver_features_sel;
        vm->queue_sel = s->queue_sel;
        vm->status = s->status;
        pthread_mutex_lock(&vm->irq_lock);
        vm->interrupt_status = s->interrupt_status;
        vm->nr_request = false;
        vm->live = (vm->status & S_DOK) != 0;
        pthread_mutex_unlock(&vm->irq_lock);
        vm->config_generation = s->config_generation;
    }
    pthread_mutex_unlock(&vm->lock);
    return r;
}
