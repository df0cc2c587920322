/* vhostile: a hostile virtio driver. It attacks the first virtio-blk drive,
 * the virtio-vsock device and (if there is one) virtio-net through their
 * rings, registers and config space, and after every attack checks that the other devices still serve
 * a companion request and that the attacked one works again after a reset.
 * It reports what it observed, one line per attack; the host side
 * (tests/integration/test_hostile.c) holds the expected outcomes. Protocol
 * in hostile_proto.h. Exit codes: HV_STATUS when every attack ran;
 * 3 a device is missing; 4 the first setup of a device failed. */
#include "rt.h"
#include "virtio_mmio.h"
#include <stdbool.h>

#include "hostile_proto.h"

#define QN      8
#define F_NEXT  1
#define F_WRITE 2
#define F_IND   4
#define FEAT_INDIRECT (1u << 28)
#define ST_NR   64u
#define R_VENDOR_ID   0x00c
#define R_INT_STATUS  0x060
#define R_INT_ACK     0x064
#define R_CONFIG_GEN  0x0fc

#define A(p) ((uint64_t)(uintptr_t)(p))

struct vq {
    VRING_FIELDS(QN);
    uint32_t last_len, last_id;
};
struct dev {
    uint64_t base;
    unsigned nq;
    struct vq q[3];
};

static struct dev blk0, blk1, vs;

static uint32_t rd(struct dev *d, uint64_t off) { return mmio_read32(d->base + off); }
static void wr(struct dev *d, uint64_t off, uint32_t v) { mmio_write32(d->base + off, v); }

/* The n-th slot (0-based) with device id `id`; 0 if none. */
static uint64_t find(uint32_t id, unsigned n)
{
    for (unsigned s = 0; s < 16; s++) {
        uint64_t b = VIRTIO_MMIO_SLOT(s);
        if (mmio_read32(b + R_MAGIC) != 0x74726976u)
            continue;
        if (mmio_read32(b + R_DEVICE_ID) == id && n-- == 0)
            return b;
    }
    return 0;
}

static void set_ring(struct dev *d, struct vq *v)
{
    wr(d, R_DESC_LO, (uint32_t)A(v->desc)); wr(d, R_DESC_HI, (uint32_t)(A(v->desc) >> 32));
    wr(d, R_AVAIL_LO, (uint32_t)A(&v->avail)); wr(d, R_AVAIL_HI, (uint32_t)(A(&v->avail) >> 32));
    wr(d, R_USED_LO, (uint32_t)A(&v->used)); wr(d, R_USED_HI, (uint32_t)(A(&v->used) >> 32));
}

/* Reset and set up with driver features lo/hi: 0, 1 FEATURES_OK did not
 * stick, 2 a queue was refused. */
static int setup(struct dev *d, uint32_t lo, uint32_t hi)
{
    wr(d, R_STATUS, 0);
    memset(d->q, 0, sizeof d->q);
    wr(d, R_STATUS, 1);
    wr(d, R_STATUS, 1 | 2);
    wr(d, R_DRV_FEAT_SEL, 0);
    wr(d, R_DRV_FEAT, lo);
    wr(d, R_DRV_FEAT_SEL, 1);
    wr(d, R_DRV_FEAT, hi);
    wr(d, R_STATUS, 1 | 2 | 8);
    if (!(rd(d, R_STATUS) & 8))
        return 1;
    for (unsigned q = 0; q < d->nq; q++) {
        wr(d, R_QUEUE_SEL, q);
        wr(d, R_QUEUE_NUM, QN);
        set_ring(d, &d->q[q]);
        wr(d, R_QUEUE_READY, 1);
        if (rd(d, R_QUEUE_READY) != 1)
            return 2;
    }
    wr(d, R_STATUS, 1 | 2 | 8 | 4);
    return 0;
}

static void post(struct dev *d, unsigned q, uint16_t head)
{
    struct vq *v = &d->q[q];
    v->avail.ring[v->avail.idx % QN] = head;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    __atomic_store_n(&v->avail.idx, (uint16_t)(v->avail.idx + 1), __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    wr(d, R_QUEUE_NOTIFY, q);
}

/* Wait up to `cycles` TSC cycles for a used element on q: 1 (in
 * last_id/last_len), 0 timeout, -1 the device set NEEDS_RESET. */
static int wait_used(struct dev *d, unsigned q, uint64_t cycles)
{
    struct vq *v = &d->q[q];
    uint64_t t0 = rdtsc();
    for (uint64_t i = 0;; i++) {
        if (__atomic_load_n(&v->used.idx, __ATOMIC_ACQUIRE) != v->last_used) {
            v->last_id = v->used.ring[v->last_used % QN].id;
            v->last_len = v->used.ring[v->last_used % QN].len;
            v->last_used++;
            return 1;
        }
        if ((i & 255) == 255) {
            if (rd(d, R_STATUS) & ST_NR)
                return -1;
            if (rdtsc() - t0 > cycles || i > 400000000ull)
                return 0;
        }
        cpu_relax();
    }
}

#define WAIT_LONG  4000000000ull
#define WAIT_SHORT 400000000ull

/* ---------------- virtio-blk ---------------- */

static struct { uint32_t type, ioprio; uint64_t sector; } hdr;
static volatile uint8_t st;
static uint8_t dbuf[4096] __attribute__((aligned(4096)));
static struct desc itab[2 * QN] __attribute__((aligned(16)));
static struct desc itab2[4] __attribute__((aligned(16)));

static void D(struct dev *d, unsigned i, uint64_t addr, uint32_t len, uint16_t flags, uint16_t next)
{
    d->q[0].desc[i] = (struct desc){ addr, len, flags, next };
}

/* The usual 3-descriptor read of `len` bytes at `sector` into dbuf. */
static void read_chain(struct dev *d, uint64_t sector, uint32_t len)
{
    hdr.type = 0;
    hdr.ioprio = 0;
    hdr.sector = sector;
    D(d, 0, A(&hdr), 16, F_NEXT, 1);
    D(d, 1, A(dbuf), len, F_NEXT | F_WRITE, 2);
    D(d, 2, A(&st), 1, F_WRITE, 0);
}

/* Post head 0 on queue 0 and say what came of it. */
static const char *blk_outcome(struct dev *d)
{
    st = 0xee;
    post(d, 0, 0);
    int r = wait_used(d, 0, WAIT_LONG);
    if (r < 0)
        return "needs_reset";
    if (r == 0)
        return "timeout";
    if (d->q[0].last_len == 0 && st == 0xee)
        return "dropped";
    switch (st) {
    case 0: return "ok";
    case 1: return "ioerr";
    case 2: return "unsupp";
    default: return "odd";
    }
}

/* A checked read of one sector: true if it came back right. */
static bool blk_read_ok(struct dev *d, uint64_t sector, bool second)
{
    read_chain(d, sector, 512);
    memset(dbuf, 0, 512);
    const char *o = blk_outcome(d);
    if (o[0] != 'o' || o[1] != 'k' || d->q[0].last_len != 513)
        return false;
    for (unsigned i = 0; i < 512; i++) {
        uint64_t b = sector * 512 + i;
        if (dbuf[i] != (second ? HV_PAT2(b) : HV_PAT(b)))
            return false;
    }
    return true;
}

static const char *a_loop(struct dev *d)
{
    read_chain(d, 0, 512);
    D(d, 2, A(&st), 1, F_WRITE | F_NEXT, 0);   /* back to the head */
    return blk_outcome(d);
}

static const char *a_self_loop(struct dev *d)
{
    read_chain(d, 0, 512);
    D(d, 1, A(dbuf), 512, F_NEXT | F_WRITE, 1);
    return blk_outcome(d);
}

static const char *a_next_range(struct dev *d)
{
    read_chain(d, 0, 512);
    D(d, 1, A(dbuf), 512, F_NEXT | F_WRITE, 200);
    return blk_outcome(d);
}

static uint64_t ram;
static volatile uint64_t sink;

static const char *a_addr_beyond_ram(struct dev *d)
{
    read_chain(d, 0, 512);
    D(d, 1, 0x100000000000ull, 512, F_NEXT | F_WRITE, 2);
    return blk_outcome(d);
}

static const char *a_addr_in_hole(struct dev *d)
{
    read_chain(d, 0, 512);
    D(d, 1, ram + 0x1000, 512, F_NEXT | F_WRITE, 2);   /* between RAM and the MMIO hole */
    return blk_outcome(d);
}

static const char *a_addr_wraps(struct dev *d)
{
    read_chain(d, 0, 512);
    D(d, 1, 0xFFFFFFFFFFFFFE00ull + 0x100, 512, F_NEXT | F_WRITE, 2);
    return blk_outcome(d);
}

static const char *a_len_huge(struct dev *d)
{
    read_chain(d, 0, 512);
    D(d, 1, A(dbuf), 0xFFFFFE00u, F_NEXT | F_WRITE, 2);
    return blk_outcome(d);
}

static const char *a_straddle_ram_end(struct dev *d)
{
    read_chain(d, 0, 1024);
    D(d, 1, ram - 512, 1024, F_NEXT | F_WRITE, 2);
    return blk_outcome(d);
}

static const char *a_hdr_short(struct dev *d)
{
    read_chain(d, 0, 512);
    D(d, 0, A(&hdr), 8, F_NEXT, 1);
    return blk_outcome(d);
}

static const char *a_no_status(struct dev *d)
{
    read_chain(d, 0, 512);
    D(d, 0, A(&hdr), 16, 0, 0);
    return blk_outcome(d);
}

static const char *a_status_readonly(struct dev *d)
{
    hdr.type = 1;                               /* OUT: all readable */
    hdr.sector = 0;
    D(d, 0, A(&hdr), 16, F_NEXT, 1);
    D(d, 1, A(dbuf), 512, F_NEXT, 2);
    D(d, 2, A(&st), 1, 0, 0);
    return blk_outcome(d);
}

static const char *a_unknown_type(struct dev *d)
{
    read_chain(d, 0, 512);
    hdr.type = 0x7777;
    return blk_outcome(d);
}

static const char *a_read_into_readonly(struct dev *d)
{
    read_chain(d, 0, 512);
    D(d, 1, A(dbuf), 512, F_NEXT, 2);           /* IN data not device-writable */
    return blk_outcome(d);
}

static const char *a_write_from_writable(struct dev *d)
{
    read_chain(d, 0, 512);
    hdr.type = 1;                               /* OUT data device-writable */
    return blk_outcome(d);
}

static const char *a_data_len_odd(struct dev *d)
{
    read_chain(d, 0, 100);
    return blk_outcome(d);
}

static const char *a_sector_past_end(struct dev *d)
{
    read_chain(d, HV_SECTORS, 512);
    return blk_outcome(d);
}

static const char *a_sector_straddles_end(struct dev *d)
{
    read_chain(d, HV_SECTORS - 1, 1024);
    return blk_outcome(d);
}

static const char *a_sector_overflow(struct dev *d)
{
    read_chain(d, 0xFFFFFFFFFFFFFFFFull, 512);
    return blk_outcome(d);
}

static const char *a_id_short(struct dev *d)
{
    read_chain(d, 0, 8);
    hdr.type = 8;                               /* GET_ID into 8 bytes */
    return blk_outcome(d);
}

static const char *a_discard_garbage(struct dev *d)
{
    hdr.type = 11;                              /* DISCARD, 7-byte payload */
    hdr.sector = 0;
    memset(dbuf, 0xff, 16);
    D(d, 0, A(&hdr), 16, F_NEXT, 1);
    D(d, 1, A(dbuf), 7, F_NEXT, 2);
    D(d, 2, A(&st), 1, F_WRITE, 0);
    return blk_outcome(d);
}

static const char *a_indirect_oversize(struct dev *d)
{
    /* An indirect table of 2 * QN entries, more than the queue holds: a
     * well-formed read in 512-byte pieces, refused for its size. */
    hdr.type = 0;
    hdr.sector = 0;
    itab[0] = (struct desc){ A(&hdr), 16, F_NEXT, 1 };
    for (unsigned i = 1; i < 2 * QN - 1; i++)
        itab[i] = (struct desc){ A(dbuf) + (i % 8) * 512, 512, F_NEXT | F_WRITE, (uint16_t)(i + 1) };
    itab[2 * QN - 1] = (struct desc){ A(&st), 1, F_WRITE, 0 };
    D(d, 0, A(itab), sizeof itab, F_IND, 0);
    return blk_outcome(d);
}

static const char *a_indirect_nofeat(struct dev *d)
{
    itab[0] = (struct desc){ A(&hdr), 16, F_NEXT, 1 };
    itab[1] = (struct desc){ A(dbuf), 512, F_NEXT | F_WRITE, 2 };
    itab[2] = (struct desc){ A(&st), 1, F_WRITE, 0 };
    hdr.type = 0;
    hdr.sector = 0;
    D(d, 0, A(itab), 48, F_IND, 0);
    return blk_outcome(d);                      /* set up without INDIRECT_DESC */
}

static const char *a_indirect_ok(struct dev *d)
{
    return a_indirect_nofeat(d);                /* the same chain, with the feature */
}

static const char *a_indirect_nested(struct dev *d)
{
    itab2[0] = (struct desc){ A(&hdr), 16, F_NEXT, 1 };
    itab2[1] = (struct desc){ A(dbuf), 512, F_NEXT | F_WRITE, 2 };
    itab2[2] = (struct desc){ A(&st), 1, F_WRITE, 0 };
    itab[0] = (struct desc){ A(itab2), 48, F_IND, 0 };
    D(d, 0, A(itab), 16, F_IND, 0);
    return blk_outcome(d);
}

static const char *a_indirect_len_odd(struct dev *d)
{
    a_indirect_nofeat(d);
    D(d, 0, A(itab), 40, F_IND, 0);
    return blk_outcome(d);
}

static const char *a_indirect_len_zero(struct dev *d)
{
    a_indirect_nofeat(d);
    D(d, 0, A(itab), 0, F_IND, 0);
    return blk_outcome(d);
}

static const char *a_indirect_huge(struct dev *d)
{
    D(d, 0, A(itab), 0xFFFFFFF0u, F_IND, 0);
    return blk_outcome(d);
}

static const char *a_indirect_beyond_ram(struct dev *d)
{
    D(d, 0, 0x7FFFFFF000ull, 48, F_IND, 0);
    return blk_outcome(d);
}

static const char *a_indirect_and_next(struct dev *d)
{
    a_indirect_nofeat(d);
    D(d, 0, A(itab), 48, F_IND | F_NEXT, 1);
    D(d, 1, A(&st), 1, F_WRITE, 0);
    return blk_outcome(d);
}

static const char *a_indirect_loop(struct dev *d)
{
    a_indirect_nofeat(d);
    itab[2] = (struct desc){ A(&st), 1, F_WRITE | F_NEXT, 0 };
    return blk_outcome(d);
}

static const char *a_avail_jump(struct dev *d)
{
    read_chain(d, 0, 512);
    d->q[0].avail.idx = (uint16_t)(d->q[0].avail.idx + 100);
    return blk_outcome(d);
}

static const char *a_head_range(struct dev *d)
{
    read_chain(d, 0, 512);
    struct vq *v = &d->q[0];
    st = 0xee;
    v->avail.ring[v->avail.idx % QN] = 300;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    v->avail.idx++;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    wr(d, R_QUEUE_NOTIFY, 0);
    int r = wait_used(d, 0, WAIT_LONG);
    return r < 0 ? "needs_reset" : r == 0 ? "timeout" : "served";
}

/* Register attacks: "ignored" if every register read back as before and a
 * read still works, "changed" otherwise. */
static const char *served_or(struct dev *d, bool same)
{
    if (!same)
        return "changed";
    return blk_read_ok(d, 3, false) ? "ignored" : "broke";
}

static const char *a_qsize_after_ok(struct dev *d)
{
    wr(d, R_QUEUE_SEL, 0);
    wr(d, R_QUEUE_NUM, 4);
    bool same = rd(d, R_QUEUE_NUM) == QN;
    wr(d, R_QUEUE_NUM, 0);
    wr(d, R_QUEUE_NUM, 0xFFFF);
    same = same && rd(d, R_QUEUE_NUM) == QN;
    return served_or(d, same);
}

static const char *a_ring_move_after_ok(struct dev *d)
{
    static struct vq other;
    wr(d, R_QUEUE_SEL, 0);
    set_ring(d, &other);
    wr(d, R_DESC_LO, 0xFFFFF000u);
    bool same = rd(d, R_DESC_LO) == (uint32_t)A(d->q[0].desc) &&
                rd(d, R_AVAIL_LO) == (uint32_t)A(&d->q[0].avail) &&
                rd(d, R_USED_LO) == (uint32_t)A(&d->q[0].used) && rd(d, R_DESC_HI) == 0;
    return served_or(d, same);
}

static const char *a_queue_unready_after_ok(struct dev *d)
{
    wr(d, R_QUEUE_SEL, 0);
    wr(d, R_QUEUE_READY, 0);
    return served_or(d, rd(d, R_QUEUE_READY) == 1);
}

static const char *a_readonly_regs(struct dev *d)
{
    static const uint16_t regs[] = { R_MAGIC, R_VERSION, R_DEVICE_ID, R_VENDOR_ID, R_DEV_FEAT,
                                     R_QUEUE_MAX, R_INT_STATUS, R_STATUS, R_CONFIG_GEN };
    uint32_t before[sizeof regs / sizeof regs[0]];
    wr(d, R_QUEUE_SEL, 0);
    for (unsigned i = 0; i < sizeof regs / sizeof regs[0]; i++)
        before[i] = rd(d, regs[i]);
    for (unsigned i = 0; i < sizeof regs / sizeof regs[0]; i++)
        if (regs[i] != R_STATUS)
            wr(d, regs[i], 0xA5A5A5A5u);
    wr(d, R_STATUS, 0x3F);                      /* unknown and skipped bits: illegal */
    wr(d, R_STATUS, 1);                         /* clearing bits without a reset */
    bool same = true;
    for (unsigned i = 0; i < sizeof regs / sizeof regs[0]; i++)
        same = same && rd(d, regs[i]) == before[i];
    return served_or(d, same);
}

static const char *a_unknown_regs(struct dev *d)
{
    uint32_t status = rd(d, R_STATUS), num = rd(d, R_QUEUE_NUM);
    for (uint64_t off = 0; off < 0x100; off += 4) {
        if (off == R_STATUS || off == R_QUEUE_NOTIFY || off == R_INT_ACK || off == R_QUEUE_SEL ||
            off == R_DEV_FEAT_SEL || off == R_DRV_FEAT_SEL || off == R_DRV_FEAT || off == R_QUEUE_READY ||
            off == R_QUEUE_NUM || (off >= R_DESC_LO && off <= R_USED_HI))
            continue;                           /* the known writable ones */
        wr(d, off, 0xFFFFFFFFu);
    }
    /* Narrow and unaligned writes to the known registers are ignored. */
    mmio_write8(d->base + R_STATUS, 0);
    mmio_write16(d->base + R_STATUS, 0);
    mmio_write64(d->base + R_STATUS, 0);
    mmio_write32(d->base + R_STATUS + 1, 0);
    mmio_write8(d->base + R_QUEUE_NUM, 1);
    wr(d, R_DEV_FEAT_SEL, 0);
    return served_or(d, rd(d, R_STATUS) == status && rd(d, R_QUEUE_NUM) == num);
}

static const char *a_status_skip(struct dev *d)
{
    /* DRIVER_OK straight after ACKNOWLEDGE, and FEATURES_OK before DRIVER. */
    wr(d, R_STATUS, 0);
    wr(d, R_STATUS, 1);
    wr(d, R_STATUS, 1 | 4);
    bool same = rd(d, R_STATUS) == 1;
    wr(d, R_STATUS, 1 | 8);
    same = same && rd(d, R_STATUS) == 1;
    /* Queue registers before FEATURES_OK are not taken either. */
    wr(d, R_QUEUE_SEL, 0);
    wr(d, R_QUEUE_READY, 1);
    same = same && rd(d, R_QUEUE_READY) == 0;
    if (setup(d, 0, 1) != 0)
        return "broke";
    return served_or(d, same);
}

static const char *a_features_not_offered(struct dev *d)
{
    /* Everything, or VERSION_1 missing: FEATURES_OK must not stick. */
    int r1 = setup(d, 0xFFFFFFFFu, 0xFFFFFFFFu);
    int r2 = setup(d, 0, 0);
    int r3 = setup(d, 1u << 27, 1);             /* bit 27: not offered by blk */
    /* A feature write after FEATURES_OK does not count. */
    if (setup(d, 0, 1) != 0)
        return "broke";
    wr(d, R_DRV_FEAT_SEL, 0);
    wr(d, R_DRV_FEAT, FEAT_INDIRECT);
    itab[0] = (struct desc){ A(&hdr), 16, F_NEXT, 1 };
    itab[1] = (struct desc){ A(dbuf), 512, F_NEXT | F_WRITE, 2 };
    itab[2] = (struct desc){ A(&st), 1, F_WRITE, 0 };
    hdr.type = 0;
    D(d, 0, A(itab), 48, F_IND, 0);
    const char *o = blk_outcome(d);             /* indirect not negotiated: dropped */
    if (r1 == 1 && r2 == 1 && r3 == 1 && o[0] == 'd')
        return "refused";
    return "accepted";
}

static const char *a_config_overrun(struct dev *d)
{
    uint64_t cap = (uint64_t)rd(d, R_CONFIG) | (uint64_t)rd(d, R_CONFIG + 4) << 32;
    uint64_t junk = 0;
    for (uint64_t off = 0x200; off < 0x1000; off += 0x7c)   /* past the 60-byte config */
        junk |= mmio_read32(d->base + off);
    junk |= mmio_read64(d->base + 0xFF8);
    junk |= mmio_read32(d->base + 0xFFC);
    junk |= mmio_read8(d->base + 0xFFF);
    for (uint64_t off = 0x100; off < 0x1000; off += 0x3c)
        mmio_write32(d->base + off, 0xFFFFFFFFu);
    mmio_write64(d->base + 0xFF8, ~0ull);
    uint64_t cap2 = (uint64_t)rd(d, R_CONFIG) | (uint64_t)rd(d, R_CONFIG + 4) << 32;
    return served_or(d, cap == HV_SECTORS && cap2 == cap && junk == 0);
}

static const char *a_ring_outside_ram(struct dev *d)
{
    /* Before DRIVER_OK: rings outside RAM, across its end, misaligned. */
    static const uint64_t bad[] = { 0x7FF0000000ull, 0, 0xFFFFFFFFFFFFF000ull, 8 };
    wr(d, R_STATUS, 0);
    wr(d, R_STATUS, 1);
    wr(d, R_STATUS, 1 | 2);
    wr(d, R_DRV_FEAT_SEL, 1);
    wr(d, R_DRV_FEAT, 1);
    wr(d, R_STATUS, 1 | 2 | 8);
    wr(d, R_QUEUE_SEL, 0);
    wr(d, R_QUEUE_NUM, QN);
    bool refused = true;
    for (unsigned i = 0; i < 4; i++) {
        set_ring(d, &d->q[0]);
        uint64_t a = bad[i] == 0 ? ram - 16 : bad[i] == 8 ? A(d->q[0].desc) + 8 : bad[i];
        wr(d, R_DESC_LO, (uint32_t)a);
        wr(d, R_DESC_HI, (uint32_t)(a >> 32));
        wr(d, R_QUEUE_READY, 1);
        refused = refused && rd(d, R_QUEUE_READY) == 0;
    }
    wr(d, R_STATUS, 1 | 2 | 8 | 4);             /* DRIVER_OK with no queue ready */
    wr(d, R_QUEUE_NOTIFY, 0);
    return refused ? "refused" : "accepted";
}

static const char *a_notify_flood(struct dev *d)
{
    for (unsigned i = 0; i < 5000; i++)
        wr(d, R_QUEUE_NOTIFY, i % 3 == 2 ? 0xFFFFFFFFu : i % 3);
    for (unsigned i = 0; i < 1000; i++)
        wr(d, R_INT_ACK, 0xFFFFFFFFu);
    return served_or(d, true);
}

static const char *a_unmapped_flood(struct dev *d)
{
    /* MMIO and port I/O where nothing is mapped: an unused virtio slot,
     * the MMIO hole, an unused port. Reads give all ones or 0. */
    uint64_t junk = 0;
    for (unsigned i = 0; i < 2000; i++) {
        mmio_write32(VIRTIO_MMIO_SLOT(15) + (i & 0xFF) * 4, i);
        mmio_write64(0xE0000000ull + (uint64_t)(i & 0xFFF) * 8, ~0ull);
        outl(0x5000, i);
        junk |= mmio_read32(0xE0000000ull) ^ 0xFFFFFFFFu;
        junk &= (uint64_t)inb(0x5001) ^ 0xFF;
    }
    sink = junk;
    return served_or(d, true);
}

static const char *a_interrupt_ack_junk(struct dev *d)
{
    wr(d, R_INT_ACK, 0xFFFFFFFFu);
    return served_or(d, (rd(d, R_INT_STATUS) & ~3u) == 0);
}

/* ---------------- virtio-vsock ---------------- */

enum { OP_REQUEST = 1, OP_RESPONSE, OP_RST, OP_SHUTDOWN, OP_RW, OP_CREDIT_UPDATE, OP_CREDIT_REQUEST };
struct vhdr {
    uint64_t src_cid, dst_cid;
    uint32_t src_port, dst_port, len;
    uint16_t type, op;
    uint32_t flags, buf_alloc, fwd_cnt;
} __attribute__((packed));

#define VBUF 4096
static uint8_t rxbuf[QN][VBUF] __attribute__((aligned(4096)));
static uint8_t txbuf[VBUF] __attribute__((aligned(4096)));
static uint32_t next_port = 3000;

static int vs_setup(void)
{
    int r = setup(&vs, 0, 1);
    if (r)
        return r;
    for (uint16_t i = 0; i < QN; i++) {
        vs.q[0].desc[i] = (struct desc){ A(rxbuf[i]), VBUF, F_WRITE, 0 };
        post(&vs, 0, i);
    }
    return 0;
}

/* Send one packet of `total` bytes from txbuf (header first); true when
 * the device took it back. */
static bool vs_send_raw(uint32_t total)
{
    struct vq *v = &vs.q[1];
    v->desc[0] = (struct desc){ A(txbuf), total, 0, 0 };
    post(&vs, 1, 0);
    return wait_used(&vs, 1, WAIT_LONG) == 1;
}

static bool vs_send(uint32_t sport, uint32_t dport, uint16_t op, uint16_t type, uint32_t len,
                    uint32_t buf_alloc, uint32_t fwd_cnt)
{
    struct vhdr h = { 3, 2, sport, dport, len, type, op, 0, buf_alloc, fwd_cnt };
    memcpy(txbuf, &h, sizeof h);
    return vs_send_raw((uint32_t)sizeof h + (op == OP_RW ? len : 0));
}

/* The next packet for guest port `port`: 1 (in *h), 0 none within the
 * wait, -1 NEEDS_RESET. Packets for other ports are dropped. */
static int vs_recv(uint32_t port, struct vhdr *h, uint64_t cycles)
{
    for (;;) {
        int r = wait_used(&vs, 0, cycles);
        if (r <= 0)
            return r;
        uint32_t id = vs.q[0].last_id;
        if (id >= QN)
            return 0;
        bool mine = vs.q[0].last_len >= sizeof *h;
        if (mine) {
            memcpy(h, rxbuf[id], sizeof *h);
            mine = h->dst_port == port;
        }
        post(&vs, 0, (uint16_t)id);
        if (mine)
            return 1;
    }
}

/* Connect to a port nobody listens on: true if the device answered RST. */
static bool vs_probe(void)
{
    uint32_t p = next_port++;
    struct vhdr h;
    if (!vs_send(p, HV_DEAD_PORT, OP_REQUEST, 1, 0, 65536, 0))
        return false;
    return vs_recv(p, &h, WAIT_LONG) == 1 && h.op == OP_RST;
}

/* What came back for port p after an attack: a probe (a REQUEST to
 * HV_DEAD_PORT from another port) follows it, and the device answers in
 * order, so whatever port p gets comes before the probe's RST; nothing
 * before it is "silent". No timing involved. */
static const char *vs_answer(uint32_t p)
{
    uint32_t q = next_port++;
    const char *seen = "silent";
    vs_send(q, HV_DEAD_PORT, OP_REQUEST, 1, 0, 65536, 0);
    for (;;) {
        int r = wait_used(&vs, 0, WAIT_LONG);
        if (r < 0 || (rd(&vs, R_STATUS) & ST_NR))
            return "needs_reset";
        if (r == 0)
            return "no_probe_answer";
        uint32_t id = vs.q[0].last_id;
        if (id >= QN)
            return "bad_id";
        struct vhdr h = { 0 };
        if (vs.q[0].last_len >= sizeof h)
            memcpy(&h, rxbuf[id], sizeof h);
        post(&vs, 0, (uint16_t)id);
        if (h.dst_port == p && seen[0] == 's')
            seen = h.op == OP_RST ? "rst" : h.op == OP_RESPONSE ? "response" : "other";
        if (h.dst_port == q && h.op == OP_RST)
            return seen;
    }
}

static const char *v_dead_port(void)
{
    uint32_t p = next_port++;
    vs_send(p, HV_DEAD_PORT, OP_REQUEST, 1, 0, 65536, 0);
    return vs_answer(p);
}

static const char *v_rw_no_conn(void)
{
    uint32_t p = next_port++;
    memset(txbuf + sizeof(struct vhdr), 'x', 16);
    vs_send(p, HV_HOLD_PORT, OP_RW, 1, 16, 65536, 0);
    return vs_answer(p);
}

static const char *v_bad_type(void)
{
    uint32_t p = next_port++;
    vs_send(p, HV_HOLD_PORT, OP_REQUEST, 2, 0, 65536, 0);   /* SEQPACKET */
    return vs_answer(p);
}

static const char *v_bad_op(void)
{
    uint32_t p = next_port++;
    vs_send(p, HV_HOLD_PORT, 99, 1, 0, 65536, 0);
    return vs_answer(p);
}

static const char *v_bad_cid(void)
{
    uint32_t p = next_port++;
    struct vhdr h = { 77, 1000, p, HV_DEAD_PORT, 0, 1, OP_REQUEST, 0, 65536, 0 };
    memcpy(txbuf, &h, sizeof h);
    vs_send_raw(sizeof h);
    return vs_answer(p);
}

static const char *v_hdr_short(void)
{
    uint32_t p = next_port++;
    struct vhdr h = { 3, 2, p, HV_DEAD_PORT, 0, 1, OP_REQUEST, 0, 65536, 0 };
    memcpy(txbuf, &h, sizeof h);
    vs_send_raw(20);                            /* shorter than the 44-byte header */
    return vs_answer(p);
}

static const char *v_len_lies(void)
{
    uint32_t p = next_port++;
    struct vhdr h = { 3, 2, p, HV_HOLD_PORT, 0xFFFFFFF0u, 1, OP_RW, 0, 65536, 0 };
    memcpy(txbuf, &h, sizeof h);
    vs_send_raw(sizeof h + 8);                  /* says 4 GiB, carries 8 bytes */
    return vs_answer(p);
}

/* Connect to the host's holding listener (it never reads) with absurd
 * credit fields, then send far past the credit moat gave: the device must
 * reset the connection (it would otherwise buffer without bound). */
static const char *v_credit_overrun(void)
{
    uint32_t p = next_port++;
    struct vhdr h;
    vs_send(p, HV_HOLD_PORT, OP_REQUEST, 1, 0, 0xFFFFFFFFu, 0xFFFFFFFFu);
    int r;
    do
        r = vs_recv(p, &h, WAIT_LONG);
    while (r == 1 && h.op == OP_CREDIT_UPDATE);
    if (r != 1 || h.op != OP_RESPONSE)
        return r < 0 ? "needs_reset" : "no_connection";
    /* fwd_cnt far ahead of anything sent: a credit that cannot be. */
    vs_send(p, HV_HOLD_PORT, OP_CREDIT_UPDATE, 1, 0, 0xFFFFFFFFu, 0x80000000u);
    memset(txbuf + sizeof h, 'z', VBUF - sizeof h);
    uint32_t chunk = VBUF - (uint32_t)sizeof h;
    for (unsigned i = 0; i < 400; i++) {
        vs_send(p, HV_HOLD_PORT, OP_RW, 1, chunk, 0xFFFFFFFFu, 0xFFFFFFFFu);
        /* Look for the verdict without waiting long. */
        for (;;) {
            int k = vs_recv(p, &h, i < 399 ? 2000000ull : WAIT_LONG);
            if (k < 0)
                return "needs_reset";
            if (k == 0)
                break;
            if (h.op == OP_RST)
                return "rst";
        }
    }
    vs_send(p, HV_HOLD_PORT, OP_RST, 1, 0, 0, 0);
    return "silent";
}

static const char *v_tx_avail_jump(void)
{
    vs.q[1].avail.idx = (uint16_t)(vs.q[1].avail.idx + 1000);
    uint32_t p = next_port++;
    vs_send(p, HV_DEAD_PORT, OP_REQUEST, 1, 0, 65536, 0);
    return vs_answer(p);
}

static const char *v_rx_head_range(void)
{
    struct vq *v = &vs.q[0];
    v->avail.ring[v->avail.idx % QN] = 999;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    v->avail.idx++;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    /* Nine entries for a ring of eight (the first overwritten with a
     * head out of range): the device finds out when it next takes a
     * buffer, for the RST to this REQUEST. */
    uint32_t p = next_port++;
    vs_send(p, HV_DEAD_PORT, OP_REQUEST, 1, 0, 65536, 0);
    struct vhdr h;
    int r = vs_recv(0xFFFFFFFFu, &h, WAIT_LONG);       /* no port: only NEEDS_RESET ends it early */
    return r < 0 || (rd(&vs, R_STATUS) & ST_NR) ? "needs_reset" : "served";
}

static const char *v_notify_flood(void)
{
    for (unsigned i = 0; i < 5000; i++)
        wr(&vs, R_QUEUE_NOTIFY, i % 5);
    return vs_probe() ? "ignored" : "broke";
}

static const char *v_config_overrun(void)
{
    uint32_t cid = rd(&vs, R_CONFIG);
    for (uint64_t off = 0x100; off < 0x1000; off += 0x44)
        mmio_write32(vs.base + off, 0xFFFFFFFFu);
    uint64_t junk = mmio_read64(vs.base + 0xFF8) | mmio_read32(vs.base + 0x108);
    return (cid == 3 && rd(&vs, R_CONFIG) == 3 && rd(&vs, R_CONFIG + 4) == 0 && junk == 0 && vs_probe())
               ? "ignored" : "changed";
}

/* ---------------- virtio-net ---------------- */

#define NBUF   2048
#define VHDR   12
static struct dev nd;
static uint8_t nrx[QN][NBUF] __attribute__((aligned(4096)));
static uint8_t ntx[NBUF] __attribute__((aligned(4096)));
static const uint8_t our_mac[6] = { 0x52, 0x54, 0x00, 0x12, 0x34, 0x56 };
static const uint8_t md_ip[4] = { 169, 254, 169, 254 };

static int net_setup_rx(uint32_t len, uint16_t flags)
{
    int r = setup(&nd, 0, 1);
    if (r)
        return r;
    for (uint16_t i = 0; i < QN; i++) {
        nd.q[0].desc[i] = (struct desc){ A(nrx[i]), len, flags, 0 };
        post(&nd, 0, i);
    }
    return 0;
}

static int net_setup(void) { return net_setup_rx(NBUF, F_WRITE); }

/* The virtio-net header (zero) and a 60-byte ARP request for the metadata
 * address at ntx, asked by 169.254.0.`from`; its length. Attacks ask from
 * .3, probes from .2. */
static uint32_t arp_request_from(uint8_t from)
{
    uint8_t *f = ntx + VHDR;
    memset(ntx, 0, VHDR + 60);
    memset(f, 0xff, 6);
    memcpy(f + 6, our_mac, 6);
    f[12] = 0x08; f[13] = 0x06;
    f[14] = 0; f[15] = 1; f[16] = 0x08; f[17] = 0; f[18] = 6; f[19] = 4; f[20] = 0; f[21] = 1;
    memcpy(f + 22, our_mac, 6);
    f[28] = 169; f[29] = 254; f[30] = 0; f[31] = from;
    memcpy(f + 38, md_ip, 4);
    return VHDR + 60;
}

static uint32_t arp_request(void) { return arp_request_from(3); }

static void net_send_chain(void)
{
    post(&nd, 1, 0);
    wait_used(&nd, 1, WAIT_LONG);
}

/* Wait for an ARP reply from the metadata address: 1 (*who: the last
 * byte of the address that asked), 0 (nothing within the wait), -1
 * NEEDS_RESET. *zero_len counts receive chains handed back empty on the
 * way. */
static int arp_reply(uint64_t cycles, unsigned *zero_len, uint8_t *who)
{
    for (;;) {
        int r = wait_used(&nd, 0, cycles);
        if (r <= 0)
            return r;
        uint32_t id = nd.q[0].last_id, len = nd.q[0].last_len;
        if (id >= QN)
            return 0;
        const uint8_t *f = nrx[id] + VHDR;
        bool is_reply = len >= VHDR + 42 && f[12] == 0x08 && f[13] == 0x06 && f[21] == 2 &&
                        memcmp(f + 28, md_ip, 4) == 0;
        if (len == 0 && zero_len)
            (*zero_len)++;
        if (is_reply && who)
            *who = f[41];
        nd.q[0].desc[id] = (struct desc){ A(nrx[id]), NBUF, F_WRITE, 0 };
        post(&nd, 0, (uint16_t)id);
        if (is_reply)
            return 1;
    }
}

static bool net_probe(void)
{
    nd.q[1].desc[0] = (struct desc){ A(ntx), arp_request_from(2), 0, 0 };
    net_send_chain();
    uint8_t who = 0;
    while (arp_reply(WAIT_LONG, NULL, &who) == 1)
        if (who == 2)
            return true;
    return false;
}

/* A transmit attack (asking from .3, if it asks at all): what came back
 * for it before the answer to a probe sent after it (asking from .2). The
 * device handles frames in order, so no timing is involved. */
static const char *net_tx_outcome(void)
{
    net_send_chain();
    const char *seen = "silent";
    nd.q[1].desc[0] = (struct desc){ A(ntx), arp_request_from(2), 0, 0 };
    net_send_chain();
    for (;;) {
        uint8_t who = 0;
        int r = arp_reply(WAIT_LONG, NULL, &who);
        if (r < 0 || (rd(&nd, R_STATUS) & ST_NR))
            return "needs_reset";
        if (r == 0)
            return "no_probe_answer";
        if (who == 3)
            seen = "reply";
        if (who == 2)
            return seen;
    }
}

static const char *n_tx_shorter_than_header(void)
{
    arp_request();
    nd.q[1].desc[0] = (struct desc){ A(ntx), 8, 0, 0 };
    return net_tx_outcome();
}

static const char *n_tx_header_only(void)
{
    arp_request();
    nd.q[1].desc[0] = (struct desc){ A(ntx), VHDR, 0, 0 };
    return net_tx_outcome();
}

static const char *n_tx_runt(void)
{
    arp_request();
    nd.q[1].desc[0] = (struct desc){ A(ntx), VHDR + 10, 0, 0 };
    return net_tx_outcome();
}

static const char *n_tx_arp_truncated(void)
{
    arp_request();
    nd.q[1].desc[0] = (struct desc){ A(ntx), VHDR + 30, 0, 0 };   /* Ethernet + half an ARP */
    return net_tx_outcome();
}

static const char *n_tx_oversize(void)
{
    arp_request();
    nd.q[1].desc[0] = (struct desc){ A(ntx), VHDR + 60, F_NEXT, 1 };
    nd.q[1].desc[1] = (struct desc){ 0x800000, 70000, 0, 0 };   /* past a 64 KiB frame */
    return net_tx_outcome();
}

static const char *n_tx_writable(void)
{
    arp_request();
    nd.q[1].desc[0] = (struct desc){ A(ntx), VHDR + 20, F_NEXT, 1 };
    nd.q[1].desc[1] = (struct desc){ A(ntx) + VHDR + 20, 40, F_WRITE, 0 };
    return net_tx_outcome();
}

static const char *n_tx_garbage(void)
{
    memset(ntx, 0, VHDR);
    memset(ntx + VHDR, 0xff, 1500);
    nd.q[1].desc[0] = (struct desc){ A(ntx), VHDR + 1500, 0, 0 };
    return net_tx_outcome();
}

static const char *n_tx_bad_vnet_header(void)
{
    arp_request();
    memset(ntx, 0xff, VHDR);                    /* GSO type, offsets, flags: junk */
    nd.q[1].desc[0] = (struct desc){ A(ntx), VHDR + 60, 0, 0 };
    return net_tx_outcome();
}

static const char *n_tx_split(void)
{
    /* The control: a good ARP request cut into 4 pieces, one through the
     * middle of the header. */
    uint32_t len = arp_request();
    nd.q[1].desc[0] = (struct desc){ A(ntx), 5, F_NEXT, 1 };
    nd.q[1].desc[1] = (struct desc){ A(ntx) + 5, 17, F_NEXT, 2 };
    nd.q[1].desc[2] = (struct desc){ A(ntx) + 22, 1, F_NEXT, 3 };
    nd.q[1].desc[3] = (struct desc){ A(ntx) + 23, len - 23, 0, 0 };
    return net_tx_outcome();
}

static const char *n_tx_loop(void)
{
    arp_request();
    nd.q[1].desc[0] = (struct desc){ A(ntx), VHDR, F_NEXT, 1 };
    nd.q[1].desc[1] = (struct desc){ A(ntx) + VHDR, 60, F_NEXT, 0 };
    return net_tx_outcome();
}

static const char *n_tx_avail_jump(void)
{
    nd.q[1].desc[0] = (struct desc){ A(ntx), arp_request(), 0, 0 };
    nd.q[1].avail.idx = (uint16_t)(nd.q[1].avail.idx + 500);
    post(&nd, 1, 0);
    int r = arp_reply(WAIT_LONG, NULL, NULL);   /* only NEEDS_RESET ends it early */
    if (r < 0 || (rd(&nd, R_STATUS) & ST_NR))
        return "needs_reset";
    return r ? "reply" : "silent";
}

/* Receive attacks: the first buffer is bad (short, device-readable): it
 * must come back empty and the reply land in the next one. */
static const char *net_rx_outcome(void)
{
    nd.q[1].desc[0] = (struct desc){ A(ntx), arp_request(), 0, 0 };
    net_send_chain();
    unsigned zero = 0;
    int r = arp_reply(WAIT_LONG, &zero, NULL);
    if (r < 0 || (rd(&nd, R_STATUS) & ST_NR))
        return "needs_reset";
    /* The good buffers are handed back first, the bad one after them, in
     * the same batch (already published when the reply was seen). */
    while (r == 1 && wait_used(&nd, 0, WAIT_SHORT) == 1) {
        uint32_t id = nd.q[0].last_id;
        if (nd.q[0].last_len == 0)
            zero++;
        if (id < QN) {
            nd.q[0].desc[id] = (struct desc){ A(nrx[id]), NBUF, F_WRITE, 0 };
            post(&nd, 0, (uint16_t)id);
        }
    }
    if (zero && r == 1)
        return "dropped";
    return r ? "reply" : "silent";
}

static const char *n_rx_too_small(void)
{
    if (net_setup_rx(NBUF, F_WRITE))
        return "setup_failed";
    nd.q[0].desc[0].len = 4;                    /* below the 12-byte header */
    return net_rx_outcome();
}

static const char *n_rx_readonly(void)
{
    if (net_setup_rx(NBUF, F_WRITE))
        return "setup_failed";
    nd.q[0].desc[0].flags = 0;                  /* not device-writable */
    return net_rx_outcome();
}

static const char *n_rx_no_room(void)
{
    /* Every buffer 40 bytes: the 54-byte reply fits none (no mergeable
     * buffers): dropped, each chain handed back empty. */
    if (net_setup_rx(40, F_WRITE))
        return "setup_failed";
    nd.q[1].desc[0] = (struct desc){ A(ntx), arp_request(), 0, 0 };
    net_send_chain();
    int r = wait_used(&nd, 0, WAIT_LONG);       /* the first buffer back */
    if (r < 0 || (rd(&nd, R_STATUS) & ST_NR))
        return "needs_reset";
    if (r == 0)
        return "silent";
    return nd.q[0].last_len == 0 ? "dropped" : "reply";
}

static const char *n_rx_avail_jump(void)
{
    nd.q[0].avail.idx = (uint16_t)(nd.q[0].avail.idx + 300);
    wr(&nd, R_QUEUE_NOTIFY, 0);
    return net_rx_outcome();
}

static const char *n_notify_flood(void)
{
    for (unsigned i = 0; i < 5000; i++)
        wr(&nd, R_QUEUE_NOTIFY, i % 4);
    return net_probe() ? "ignored" : "broke";
}

static const char *n_config_overrun(void)
{
    uint64_t junk = 0;
    for (uint64_t off = 0x200; off < 0x1000; off += 0x44)
        junk |= mmio_read32(nd.base + off);
    for (uint64_t off = 0x100; off < 0x1000; off += 0x44)
        mmio_write32(nd.base + off, 0xFFFFFFFFu);
    return junk == 0 && net_probe() ? "ignored" : "changed";
}

/* ---------------- driver ---------------- */

static unsigned round_no;

static bool companion(bool vsock_too)
{
    if (!blk_read_ok(&blk1, round_no % HV_SECTORS2, true))
        return false;
    return !vsock_too || vs_probe();
}

static bool have_net;

static void line(const char *name, const char *outcome, bool comp, bool after)
{
    char b[160], *p = b;
    p = fmt_str(p, "hv: ");
    p = fmt_str(p, name);
    p = fmt_str(p, " ");
    p = fmt_str(p, outcome);
    p = fmt_str(p, comp ? " companion=ok" : " companion=FAIL");
    p = fmt_str(p, after ? " after=ok\n" : " after=FAIL\n");
    serial_puts(b);
}

struct blk_attack { const char *name; const char *(*fn)(struct dev *); uint32_t feat_lo; };
static const struct blk_attack blk_attacks[] = {
    { "blk_desc_loop", a_loop, 0 },
    { "blk_desc_self_loop", a_self_loop, 0 },
    { "blk_next_out_of_range", a_next_range, 0 },
    { "blk_addr_beyond_ram", a_addr_beyond_ram, 0 },
    { "blk_addr_in_hole", a_addr_in_hole, 0 },
    { "blk_addr_wraps", a_addr_wraps, 0 },
    { "blk_len_huge", a_len_huge, 0 },
    { "blk_straddles_ram_end", a_straddle_ram_end, 0 },
    { "blk_hdr_short", a_hdr_short, 0 },
    { "blk_no_status", a_no_status, 0 },
    { "blk_status_readonly", a_status_readonly, 0 },
    { "blk_unknown_type", a_unknown_type, 0 },
    { "blk_read_into_readonly", a_read_into_readonly, 0 },
    { "blk_write_from_writable", a_write_from_writable, 0 },
    { "blk_data_len_odd", a_data_len_odd, 0 },
    { "blk_sector_past_end", a_sector_past_end, 0 },
    { "blk_sector_straddles_end", a_sector_straddles_end, 0 },
    { "blk_sector_overflow", a_sector_overflow, 0 },
    { "blk_get_id_short", a_id_short, 0 },
    { "blk_discard_garbage", a_discard_garbage, 0 },
    { "blk_indirect_oversize", a_indirect_oversize, FEAT_INDIRECT },
    { "blk_indirect_not_offered", a_indirect_nofeat, 0 },
    { "blk_indirect_plain", a_indirect_ok, FEAT_INDIRECT },
    { "blk_indirect_nested", a_indirect_nested, FEAT_INDIRECT },
    { "blk_indirect_len_odd", a_indirect_len_odd, FEAT_INDIRECT },
    { "blk_indirect_len_zero", a_indirect_len_zero, FEAT_INDIRECT },
    { "blk_indirect_huge", a_indirect_huge, FEAT_INDIRECT },
    { "blk_indirect_beyond_ram", a_indirect_beyond_ram, FEAT_INDIRECT },
    { "blk_indirect_and_next", a_indirect_and_next, FEAT_INDIRECT },
    { "blk_indirect_loop", a_indirect_loop, FEAT_INDIRECT },
    { "blk_avail_idx_jump", a_avail_jump, 0 },
    { "blk_head_out_of_range", a_head_range, 0 },
    { "blk_ring_outside_ram", a_ring_outside_ram, 0 },
    { "blk_qsize_after_driver_ok", a_qsize_after_ok, 0 },
    { "blk_ring_move_after_driver_ok", a_ring_move_after_ok, 0 },
    { "blk_queue_unready_after_driver_ok", a_queue_unready_after_ok, 0 },
    { "blk_readonly_regs", a_readonly_regs, 0 },
    { "blk_unknown_regs", a_unknown_regs, 0 },
    { "blk_status_skips_steps", a_status_skip, 0 },
    { "blk_features_not_offered", a_features_not_offered, 0 },
    { "blk_config_overrun", a_config_overrun, 0 },
    { "blk_notify_flood", a_notify_flood, 0 },
    { "blk_interrupt_ack_junk", a_interrupt_ack_junk, 0 },
    { "unmapped_mmio_pio_flood", a_unmapped_flood, 0 },
};

struct vs_attack { const char *name; const char *(*fn)(void); };
static const struct vs_attack net_attacks[] = {
    { "net_tx_shorter_than_header", n_tx_shorter_than_header },
    { "net_tx_header_only", n_tx_header_only },
    { "net_tx_runt", n_tx_runt },
    { "net_tx_arp_truncated", n_tx_arp_truncated },
    { "net_tx_oversize", n_tx_oversize },
    { "net_tx_writable_desc", n_tx_writable },
    { "net_tx_garbage_frame", n_tx_garbage },
    { "net_tx_bad_vnet_header", n_tx_bad_vnet_header },
    { "net_tx_split", n_tx_split },
    { "net_tx_desc_loop", n_tx_loop },
    { "net_tx_avail_idx_jump", n_tx_avail_jump },
    { "net_rx_too_small", n_rx_too_small },
    { "net_rx_readonly", n_rx_readonly },
    { "net_rx_no_room", n_rx_no_room },
    { "net_rx_avail_idx_jump", n_rx_avail_jump },
    { "net_notify_flood", n_notify_flood },
    { "net_config_overrun", n_config_overrun },
};
static const struct vs_attack vs_attacks[] = {
    { "vsock_unknown_port", v_dead_port },
    { "vsock_rw_without_connection", v_rw_no_conn },
    { "vsock_bad_type", v_bad_type },
    { "vsock_bad_op", v_bad_op },
    { "vsock_bad_cid", v_bad_cid },
    { "vsock_hdr_short", v_hdr_short },
    { "vsock_len_lies", v_len_lies },
    { "vsock_credit_overrun", v_credit_overrun },
    { "vsock_tx_avail_idx_jump", v_tx_avail_jump },
    { "vsock_rx_head_out_of_range", v_rx_head_range },
    { "vsock_notify_flood", v_notify_flood },
    { "vsock_config_overrun", v_config_overrun },
};

static void halt_forever(void)
{
    for (;;)
        __asm__ volatile("cli; hlt" ::: "memory");
}

int guest_main(uint64_t cpu, uint64_t ncpus, uint64_t mem)
{
    (void)ncpus;
    if (cpu != 0)
        halt_forever();                         /* stopped, interrupts off, all along */
    ram = mem;
    if (rt_cmdline_has("spin")) {
        serial_puts(HV_SPIN);
        __asm__ volatile("cli");
        for (volatile uint64_t i = 0;; i++)
            ;
    }
    blk0.base = find(2, 0);
    blk1.base = find(2, 1);
    vs.base = find(19, 0);
    if (!blk0.base || !blk1.base || !vs.base)
        return 3;
    blk0.nq = blk1.nq = 1;
    vs.nq = 3;
    nd.base = find(1, 0);
    nd.nq = 2;
    have_net = nd.base != 0;
    if (setup(&blk0, 0, 1) || setup(&blk1, 0, 1) || vs_setup() || !blk_read_ok(&blk0, 0, false) ||
        !companion(true) || (have_net && (net_setup() || !net_probe())))
        return 4;
    if (!have_net)
        serial_puts(HV_NO_NET);
    unsigned rounds = HV_ROUNDS;
    for (unsigned k = 1; k <= 9; k++) {
        char w[] = "hv.rounds=0";
        w[sizeof w - 2] = (char)('0' + k);
        if (rt_cmdline_has(w))
            rounds = k;
    }
    for (round_no = 1; round_no <= rounds; round_no++) {
        serial_puts("hv: round ");
        serial_putdec(round_no);
        serial_puts("\n");
        for (unsigned i = 0; i < sizeof blk_attacks / sizeof blk_attacks[0]; i++) {
            const struct blk_attack *a = &blk_attacks[i];
            const char *o = setup(&blk0, a->feat_lo, 1) ? "setup_failed" : a->fn(&blk0);
            bool comp = companion(true);
            bool after = setup(&blk0, 0, 1) == 0 && blk_read_ok(&blk0, round_no + i % 8, false);
            line(a->name, o, comp, after);
        }
        for (unsigned i = 0; i < sizeof vs_attacks / sizeof vs_attacks[0]; i++) {
            const struct vs_attack *a = &vs_attacks[i];
            const char *o = vs_setup() ? "setup_failed" : a->fn();
            bool comp = companion(false);
            bool after = vs_setup() == 0 && vs_probe();
            line(a->name, o, comp, after);
        }
        for (unsigned i = 0; have_net && i < sizeof net_attacks / sizeof net_attacks[0]; i++) {
            const struct vs_attack *a = &net_attacks[i];
            const char *o = net_setup() ? "setup_failed" : a->fn();
            bool comp = companion(true);
            bool after = net_setup() == 0 && net_probe();
            line(a->name, o, comp, after);
        }
    }
    serial_puts(HV_DONE);
    /* A second for the host to read moat's RSS before it exits. */
    for (uint64_t t0 = rdtsc(), i = 0; rdtsc() - t0 < 3000000000ull && i < 2000000000ull; i++)
        cpu_relax();
    return HV_STATUS;
}
