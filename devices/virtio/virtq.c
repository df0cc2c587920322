/* Split virtqueue, device side. Contracts in virtq.h. */
#include "devices/virtio/virtq.h"

#include <endian.h>
#include <errno.h>
#include <string.h>

/* Guest layout (virtio 1.2, 2.7): all little-endian.
 *   desc:  { le64 addr; le32 len; le16 flags; le16 next; } [size]
 *   avail: le16 flags; le16 idx; le16 ring[size]; le16 used_event;
 *   used:  le16 flags; le16 idx; { le32 id; le32 len; } ring[size]; le16 avail_event;
 */
struct vdesc {
    uint64_t addr;
    uint32_t len;
    uint16_t flags;
    uint16_t next;
};

static const char *const err_names[VIRTQ_E__COUNT] = {
    [VIRTQ_OK] = "ok",
    [VIRTQ_E_AVAIL_IDX] = "avail idx moved by more than the queue size",
    [VIRTQ_E_HEAD_RANGE] = "chain head out of range",
    [VIRTQ_E_RING_FAULT] = "ring not in guest RAM",
    [VIRTQ_E_NEXT_RANGE] = "descriptor next out of range",
    [VIRTQ_E_LOOP] = "descriptor chain loops or is longer than its table",
    [VIRTQ_E_INDIRECT_NOFEAT] = "indirect descriptor without VIRTIO_F_INDIRECT_DESC",
    [VIRTQ_E_INDIRECT_NESTED] = "nested indirect table",
    [VIRTQ_E_INDIRECT_NEXT] = "indirect descriptor with NEXT set",
    [VIRTQ_E_INDIRECT_LEN] = "bad indirect table length",
    [VIRTQ_E_INDIRECT_FAULT] = "indirect table not in guest RAM",
    [VIRTQ_E_SEG_FAULT] = "buffer not in guest RAM",
    [VIRTQ_E_READ_AFTER_WRITE] = "device-readable descriptor after a writable one",
    [VIRTQ_E_TOO_MANY_SEGS] = "too many segments",
    [VIRTQ_E_LEN_OVERFLOW] = "chain length overflows",
};

const char *virtq_strerror(enum virtq_err e)
{
    if ((unsigned)e >= VIRTQ_E__COUNT)
        return "unknown virtq error";
    return err_names[e];
}

static bool is_pow2(uint32_t n) { return n && !(n & (n - 1)); }

int virtq_init(struct virtq *q, uint16_t max_size)
{
    memset(q, 0, sizeof *q);
    if (!is_pow2(max_size) || max_size > VIRTQ_MAX_SIZE)
        return -EINVAL;
    q->max_size = max_size;
    virtq_reset(q);
    return 0;
}

void virtq_reset(struct virtq *q)
{
    uint16_t max = q->max_size;
    memset(q, 0, sizeof *q);
    q->max_size = max;
    q->size = max;
}

void virtq_set_features(struct virtq *q, uint64_t features)
{
    q->event_idx = features & (1ull << VIRTIO_F_EVENT_IDX);
    q->indirect = features & (1ull << VIRTIO_F_INDIRECT_DESC);
}

int virtq_enable(struct virtq *q, const struct gmem *m)
{
    q->ready = false;
    if (!is_pow2(q->size) || q->size > q->max_size)
        return -EINVAL;
    if ((q->desc % VIRTQ_DESC_ALIGN) || (q->avail % VIRTQ_AVAIL_ALIGN) ||
        (q->used % VIRTQ_USED_ALIGN))
        return -EINVAL;
    if (!gmem_ptr(m, q->desc, virtq_desc_bytes(q->size)) ||
        !gmem_ptr(m, q->avail, virtq_avail_bytes(q->size)) ||
        !gmem_ptr(m, q->used, virtq_used_bytes(q->size)))
        return -EFAULT;
    q->broken = false;
    q->err = VIRTQ_OK;
    q->last_avail_idx = q->used_idx = q->published_idx = 0;
    q->signalled_used = 0;
    q->signalled_valid = false;
    q->inflight = 0;
    q->ready = true;
    return 0;
}

/* Single loads/stores of aligned little-endian ring fields. The ring base
 * alignment is checked in virtq_enable(), so all u16/u32 fields are
 * naturally aligned. */
static inline bool ld16(const struct gmem *m, uint64_t gpa, uint16_t *v)
{
    const uint16_t *p = gmem_ptr(m, gpa, 2);
    if (!p)
        return false;
    *v = le16toh(__atomic_load_n(p, __ATOMIC_RELAXED));
    return true;
}

static inline bool st16(const struct gmem *m, uint64_t gpa, uint16_t v)
{
    uint16_t *p = gmem_ptr(m, gpa, 2);
    if (!p)
        return false;
    __atomic_store_n(p, htole16(v), __ATOMIC_RELAXED);
    gmem_mark_dirty_host(m, p, sizeof(*p));  /* diff snapshots */
    return true;
}

static inline bool st32(const struct gmem *m, uint64_t gpa, uint32_t v)
{
    uint32_t *p = gmem_ptr(m, gpa, 4);
    if (!p)
        return false;
    __atomic_store_n(p, htole32(v), __ATOMIC_RELAXED);
    gmem_mark_dirty_host(m, p, sizeof(*p));  /* diff snapshots */
    return true;
}

static int queue_broken(struct virtq *q, struct virtq_chain *c, enum virtq_err e)
{
    q->broken = true;
    q->err = e;
    if (c) {
        c->err = e;
        c->head_valid = false;
    }
    return -EIO;
}

static int read_pending(struct virtq *q, const struct gmem *m, uint16_t *pending,
                        struct virtq_chain *c)
{
    uint16_t aidx;
    if (!ld16(m, q->avail + 2, &aidx))
        return queue_broken(q, c, VIRTQ_E_RING_FAULT);
    /* Ring entries are read after idx (pairs with the driver's write barrier). */
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    uint16_t n = (uint16_t)(aidx - q->last_avail_idx);
    if (n > q->size)
        return queue_broken(q, c, VIRTQ_E_AVAIL_IDX);
    *pending = n;
    return 0;
}

int virtq_pending(struct virtq *q, const struct gmem *m)
{
    if (!q->ready)
        return 0;
    if (q->broken)
        return -EIO;
    uint16_t n;
    int r = read_pending(q, m, &n, NULL);
    return r < 0 ? r : n;
}

/* Copy descriptor idx of the table at gpa into *d (one fetch). */
static bool fetch_desc(const struct gmem *m, uint64_t table, uint32_t idx, struct vdesc *d)
{
    const uint8_t *p = gmem_ptr(m, table + 16ull * idx, 16);
    if (!p)
        return false;
    uint8_t raw[16];
    memcpy(raw, p, sizeof raw);
    uint64_t a; uint32_t l; uint16_t f, n;
    memcpy(&a, raw, 8); memcpy(&l, raw + 8, 4); memcpy(&f, raw + 12, 2); memcpy(&n, raw + 14, 2);
    d->addr = le64toh(a);
    d->len = le32toh(l);
    d->flags = le16toh(f);
    d->next = le16toh(n);
    return true;
}

static int chain_error(struct virtq_chain *c, enum virtq_err e)
{
    c->err = e;
    return -EINVAL;
}

int virtq_pop(struct virtq *q, const struct gmem *m, struct virtq_chain *c)
{
    c->nseg = c->nread = 0;
    c->read_len = c->write_len = 0;
    c->head = 0;
    c->head_valid = false;
    c->indirect = false;
    c->err = VIRTQ_OK;
    if (!q->ready)
        return 0;
    if (q->broken) {
        c->err = q->err;
        return -EIO;
    }

    uint16_t pending;
    int r = read_pending(q, m, &pending, c);
    if (r < 0)
        return r;
    if (!pending)
        return 0;

    uint16_t head;
    if (!ld16(m, q->avail + 4 + 2ull * (q->last_avail_idx & (q->size - 1)), &head))
        return queue_broken(q, c, VIRTQ_E_RING_FAULT);
    if (head >= q->size)
        return queue_broken(q, c, VIRTQ_E_HEAD_RANGE);
    /* The slot is consumed from here on, whatever the chain holds. */
    q->last_avail_idx++;
    q->inflight++;
    c->head = head;
    c->head_valid = true;

    uint64_t table = q->desc;
    uint32_t table_n = q->size;
    uint32_t idx = head;
    uint32_t count = 0;         /* descriptors visited in the current table */
    bool in_indirect = false;
    uint64_t total = 0;

    for (;;) {
        if (idx >= table_n)
            return chain_error(c, VIRTQ_E_NEXT_RANGE);
        if (++count > table_n)
            return chain_error(c, VIRTQ_E_LOOP);
        struct vdesc d;
        if (!fetch_desc(m, table, idx, &d)) {
            if (in_indirect)
                return chain_error(c, VIRTQ_E_INDIRECT_FAULT);
            return queue_broken(q, c, VIRTQ_E_RING_FAULT);
        }

        if (d.flags & VIRTQ_DESC_F_INDIRECT) {
            if (!q->indirect)
                return chain_error(c, VIRTQ_E_INDIRECT_NOFEAT);
            if (in_indirect)
                return chain_error(c, VIRTQ_E_INDIRECT_NESTED);
            if (d.flags & VIRTQ_DESC_F_NEXT)
                return chain_error(c, VIRTQ_E_INDIRECT_NEXT);
            /* A chain may not be longer than the queue size (2.7.5.3.1),
             * so neither may an indirect table. */
            if (d.len == 0 || d.len % VIRTQ_DESC_SIZE || d.len / VIRTQ_DESC_SIZE > q->size)
                return chain_error(c, VIRTQ_E_INDIRECT_LEN);
            if (!gmem_ptr(m, d.addr, d.len))
                return chain_error(c, VIRTQ_E_INDIRECT_FAULT);
            table = d.addr;
            table_n = d.len / VIRTQ_DESC_SIZE;
            idx = 0;
            count = 0;
            in_indirect = true;
            c->indirect = true;
            continue;
        }

        if (!gmem_ptr(m, d.addr, d.len))
            return chain_error(c, VIRTQ_E_SEG_FAULT);
        bool w = d.flags & VIRTQ_DESC_F_WRITE;
        if (!w && c->nseg > c->nread)
            return chain_error(c, VIRTQ_E_READ_AFTER_WRITE);
        if (c->nseg >= c->max_seg)
            return chain_error(c, VIRTQ_E_TOO_MANY_SEGS);
        total += d.len;
        if (total > UINT32_MAX)
            return chain_error(c, VIRTQ_E_LEN_OVERFLOW);
        c->seg[c->nseg++] = (struct virtq_seg){ .gpa = d.addr, .len = d.len, .writable = w };
        if (w) {
            /* The device may write here until it pushes the chain: mark it
             * now, so a diff snapshot (taken with every popped chain
             * completed) includes it whatever write path the device uses. */
            gmem_mark_dirty(m, d.addr, d.len);
            c->write_len += d.len;
        } else {
            c->nread++;
            c->read_len += d.len;
        }
        if (!(d.flags & VIRTQ_DESC_F_NEXT))
            break;
        idx = d.next;
    }
    return 1;
}

int virtq_unpop(struct virtq *q, uint16_t n)
{
    if (n > q->inflight)
        return -EINVAL;
    q->last_avail_idx = (uint16_t)(q->last_avail_idx - n);
    q->inflight -= n;
    return 0;
}

void virtq_drop(struct virtq *q)
{
    if (q->inflight)
        q->inflight--;
}

int virtq_push(struct virtq *q, const struct gmem *m, uint16_t head, uint32_t written_len)
{
    if (!q->ready || head >= q->size || q->inflight == 0)
        return -EINVAL;
    if (q->broken)
        return -EIO;
    uint64_t e = q->used + 4 + 8ull * (q->used_idx & (q->size - 1));
    if (!st32(m, e, head) || !st32(m, e + 4, written_len)) {
        queue_broken(q, NULL, VIRTQ_E_RING_FAULT);
        return -EIO;
    }
    q->used_idx++;
    q->inflight--;
    return 0;
}

int virtq_publish(struct virtq *q, const struct gmem *m)
{
    if (!q->ready)
        return 0;
    /* Used elements must be visible before the index that exposes them. */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    if (!st16(m, q->used + 2, q->used_idx)) {
        queue_broken(q, NULL, VIRTQ_E_RING_FAULT);
        return -EIO;
    }
    q->published_idx = q->used_idx;
    return 0;
}

bool virtq_should_notify(struct virtq *q, const struct gmem *m)
{
    if (!q->ready)
        return false;
    /* The used->idx store must be ordered before the loads of the driver's
     * suppression fields (store->load: full barrier), or we can miss the
     * driver re-enabling interrupts. */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (!q->event_idx) {
        uint16_t flags;
        if (!ld16(m, q->avail, &flags))
            return true;
        return !(flags & VRING_AVAIL_F_NO_INTERRUPT);
    }
    uint16_t old = q->signalled_used, new_idx = q->published_idx;
    bool valid = q->signalled_valid;
    q->signalled_used = new_idx;
    q->signalled_valid = true;
    if (valid && old == new_idx)
        return false;
    uint16_t ev;
    if (!ld16(m, q->avail + 4 + 2ull * q->size, &ev))
        return true;
    if (!valid)
        return true;
    return virtq_need_event(ev, new_idx, old);
}

int virtq_disable_notify(struct virtq *q, const struct gmem *m)
{
    if (!q->ready || q->event_idx)
        return 0;
    if (!st16(m, q->used, VRING_USED_F_NO_NOTIFY))
        return queue_broken(q, NULL, VIRTQ_E_RING_FAULT);
    return 0;
}

int virtq_enable_notify(struct virtq *q, const struct gmem *m)
{
    if (!q->ready)
        return 0;
    if (q->broken)
        return -EIO;
    bool ok = q->event_idx ? st16(m, q->used + 4 + 8ull * q->size, q->last_avail_idx)
                           : st16(m, q->used, 0);
    if (!ok)
        return queue_broken(q, NULL, VIRTQ_E_RING_FAULT);
    /* Our store must be visible before we re-read avail->idx (store->load). */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    return virtq_pending(q, m);
}

int virtq_set_avail_event(struct virtq *q, const struct gmem *m, uint16_t idx)
{
    if (!q->ready || !q->event_idx)
        return -EINVAL;
    if (!st16(m, q->used + 4 + 8ull * q->size, idx))
        return queue_broken(q, NULL, VIRTQ_E_RING_FAULT);
    return 0;
}

int virtq_read_used_event(const struct virtq *q, const struct gmem *m, uint16_t *out)
{
    return ld16(m, q->avail + 4 + 2ull * q->size, out) ? 0 : -EFAULT;
}

/* ---- a chain as two byte streams ---- */

long virtq_chain_read(const struct gmem *m, const struct virtq_chain *c, uint64_t off, void *dst,
                      uint64_t max)
{
    uint8_t *d = dst;
    uint64_t got = 0;
    for (unsigned i = 0; i < c->nread && got < max; i++) {
        const struct virtq_seg *s = &c->seg[i];
        if (off >= s->len) {
            off -= s->len;
            continue;
        }
        uint64_t take = s->len - off;
        if (take > max - got)
            take = max - got;
        if (gmem_read(m, s->gpa + off, d + got, take) < 0)
            return -EFAULT;
        got += take;
        off = 0;
    }
    return (long)got;
}

int virtq_chain_write(const struct gmem *m, const struct virtq_chain *c, uint64_t off, const void *src,
                      uint64_t len)
{
    const uint8_t *p = src;
    for (unsigned i = c->nread; i < c->nseg && len; i++) {
        const struct virtq_seg *s = &c->seg[i];
        if (off >= s->len) {
            off -= s->len;
            continue;
        }
        uint64_t take = s->len - off;
        if (take > len)
            take = len;
        if (gmem_write(m, s->gpa + off, p, take) < 0)
            return -EFAULT;
        p += take;
        len -= take;
        off = 0;
    }
    return len ? -ENOSPC : 0;
}
