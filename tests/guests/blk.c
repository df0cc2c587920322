/* blk: a tiny polling virtio-mmio (version 2) virtio-blk driver that reads,
 * writes and flushes through moat's device. Protocol in blk_proto.h.
 * Exit codes:
 *   3  no virtio-blk device in slot 0 (BLK_NODEV)
 *   10 bad magic/version   11 FEATURES_OK refused   12 queue setup refused
 *   13 capacity wrong      14 request timed out
 *   20 read data wrong     21 read failed
 *   30 GET_ID wrong
 *   40 write on a read-only drive did not fail   41 ro data changed
 *   50 write failed  51 flush failed  52 read-back wrong
 *   60 malformed chain not returned with length 0   61 device dead after it
 *   62 out-of-range read did not fail
 *   70 second drive wrong
 *   80 durability: write/flush failed
 *   90 swap watcher: a read failed */
#include "rt.h"
#include "virtio_mmio.h"
#include <stdbool.h>

#include "blk_proto.h"

#define VBASE(slot)   VIRTIO_MMIO_SLOT(slot)

#define QN 8
#define F_NEXT 1
#define F_WRITE 2

struct dev {
    uint64_t base;
    bool ro;
    uint64_t capacity;
    VRING_FIELDS(QN);
    struct { uint32_t type, ioprio; uint64_t sector; } hdr;
    volatile uint8_t status;
    uint32_t last_len;
};

static struct dev devs[2];
static uint8_t buf[BLK_SECTORS * 512] __attribute__((aligned(4096)));
static uint8_t buf2[BLK_SECTORS * 512] __attribute__((aligned(4096)));

static uint32_t rd(struct dev *d, uint64_t off) { return mmio_read32(d->base + off); }
static void wr(struct dev *d, uint64_t off, uint32_t v) { mmio_write32(d->base + off, v); }

/* 0 = ok, else the exit code. */
static int dev_init(struct dev *d, unsigned slot)
{
    memset(d, 0, sizeof *d);
    d->base = VBASE(slot);
    uint32_t magic = rd(d, R_MAGIC);
    if (magic == 0xffffffffu)
        return BLK_NODEV;               /* nothing mapped: all ones */
    if (magic != 0x74726976u || rd(d, R_VERSION) != 2)
        return 10;
    if (rd(d, R_DEVICE_ID) != 2)
        return BLK_NODEV;
    wr(d, R_STATUS, 0);
    wr(d, R_STATUS, 1);
    wr(d, R_STATUS, 1 | 2);
    wr(d, R_DEV_FEAT_SEL, 0);
    uint32_t lo = rd(d, R_DEV_FEAT);
    wr(d, R_DEV_FEAT_SEL, 1);
    uint32_t hi = rd(d, R_DEV_FEAT);
    if (!(hi & 1))
        return 11;
    d->ro = lo & (1u << 5);
    wr(d, R_DRV_FEAT_SEL, 0);
    wr(d, R_DRV_FEAT, lo & (1u << 5));     /* RO only; no event idx, no indirect */
    wr(d, R_DRV_FEAT_SEL, 1);
    wr(d, R_DRV_FEAT, 1);                  /* VERSION_1 */
    wr(d, R_STATUS, 1 | 2 | 8);
    if (!(rd(d, R_STATUS) & 8))
        return 11;
    wr(d, R_QUEUE_SEL, 0);
    if (rd(d, R_QUEUE_MAX) < QN)
        return 12;
    wr(d, R_QUEUE_NUM, QN);
    uint64_t a = (uint64_t)(uintptr_t)d->desc, b = (uint64_t)(uintptr_t)&d->avail,
             c = (uint64_t)(uintptr_t)&d->used;
    wr(d, R_DESC_LO, (uint32_t)a); wr(d, R_DESC_HI, (uint32_t)(a >> 32));
    wr(d, R_AVAIL_LO, (uint32_t)b); wr(d, R_AVAIL_HI, (uint32_t)(b >> 32));
    wr(d, R_USED_LO, (uint32_t)c); wr(d, R_USED_HI, (uint32_t)(c >> 32));
    wr(d, R_QUEUE_READY, 1);
    if (rd(d, R_QUEUE_READY) != 1)
        return 12;
    wr(d, R_STATUS, 1 | 2 | 8 | 4);
    d->capacity = (uint64_t)rd(d, R_CONFIG) | (uint64_t)rd(d, R_CONFIG + 4) << 32;
    return 0;
}

/* Post the chain starting at descriptor 0 and wait for it. Returns the
 * status byte, 0xff on timeout. */
static int submit(struct dev *d)
{
    d->status = 0xee;
    d->avail.ring[d->avail.idx % QN] = 0;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    __atomic_store_n(&d->avail.idx, (uint16_t)(d->avail.idx + 1), __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    wr(d, R_QUEUE_NOTIFY, 0);
    for (uint64_t i = 0; i < 4000000000ull; i++) {
        if (__atomic_load_n(&d->used.idx, __ATOMIC_ACQUIRE) != d->last_used) {
            d->last_len = d->used.ring[d->last_used % QN].len;
            d->last_used++;
            return d->status;
        }
        cpu_relax();
    }
    return 0xff;
}

/* type, sector, data (len bytes, device-writable for IN/GET_ID). */
static int req(struct dev *d, uint32_t type, uint64_t sector, void *data, uint32_t len)
{
    d->hdr.type = type;
    d->hdr.ioprio = 0;
    d->hdr.sector = sector;
    unsigned n = 0;
    d->desc[n] = (struct desc){ (uint64_t)(uintptr_t)&d->hdr, 16, F_NEXT, 1 };
    n++;
    if (len) {
        bool w = type == 0 || type == 8;
        d->desc[n] = (struct desc){ (uint64_t)(uintptr_t)data, len, (uint16_t)(F_NEXT | (w ? F_WRITE : 0)),
                                    (uint16_t)(n + 1) };
        n++;
    }
    d->desc[n] = (struct desc){ (uint64_t)(uintptr_t)&d->status, 1, F_WRITE, 0 };
    return submit(d);
}

static int functional(void)
{
    struct dev *d = &devs[0];
    int e = dev_init(d, 0);
    if (e)
        return e;
    if (d->capacity != BLK_SECTORS)
        return 13;
    int s = req(d, 0, 0, buf, sizeof buf);
    if (s == 0xff)
        return 14;
    if (s != 0 || d->last_len != sizeof buf + 1)
        return 21;
    for (uint32_t i = 0; i < sizeof buf; i++)
        if (buf[i] != BLK_PAT(i))
            return 20;
    char id[20];
    memset(id, 0x55, sizeof id);
    if (req(d, 8, 0, id, 20) != 0)
        return 30;
    const char *want = BLK_ID;
    for (unsigned i = 0; i < 20; i++)
        if (id[i] != (i < sizeof BLK_ID - 1 ? want[i] : 0))
            return 30;
    /* A malformed chain (no status byte) comes back with length 0 ... */
    d->desc[0] = (struct desc){ (uint64_t)(uintptr_t)&d->hdr, 16, 0, 0 };
    d->hdr.type = 0;
    if (submit(d) != 0xee || d->last_len != 0)
        return 60;
    /* ... and the device still works; a read past the end fails. */
    if (req(d, 0, 1, buf2, 512) != 0 || buf2[0] != BLK_PAT(512))
        return 61;
    if (req(d, 0, BLK_SECTORS, buf2, 512) != 1)
        return 62;

    uint64_t off = BLK_W_FIRST * 512ull;
    if (d->ro) {
        memset(buf2, 0xab, 512);
        if (req(d, 1, BLK_W_FIRST, buf2, 512) != 1)
            return 40;
        if (req(d, 0, BLK_W_FIRST, buf2, 512) != 0 || buf2[0] != BLK_PAT(off) || buf2[511] != BLK_PAT(off + 511))
            return 41;
        serial_puts(BLK_OK_RO);
    } else {
        for (uint32_t i = 0; i < BLK_W_COUNT * 512; i++)
            buf2[i] = BLK_PAT2(off + i);
        if (req(d, 1, BLK_W_FIRST, buf2, BLK_W_COUNT * 512) != 0)
            return 50;
        if (req(d, 4, 0, NULL, 0) != 0)
            return 51;
        memset(buf2, 0, BLK_W_COUNT * 512);
        if (req(d, 0, BLK_W_FIRST, buf2, BLK_W_COUNT * 512) != 0)
            return 52;
        for (uint32_t i = 0; i < BLK_W_COUNT * 512; i++)
            if (buf2[i] != BLK_PAT2(off + i))
                return 52;
        serial_puts(BLK_OK_RW);
    }

    struct dev *d2 = &devs[1];
    e = dev_init(d2, 1);
    if (e == 0) {
        if (d2->capacity != BLK_SECTORS2)
            return 70;
        if (req(d2, 0, BLK_SECTORS2 - 1, buf2, 512) != 0)
            return 70;
        serial_puts(BLK_TWO);
    }
    return 0;
}

static void put_dec(uint64_t v)
{
    char b[24];
    int n = 0;
    do { b[n++] = (char)('0' + v % 10); v /= 10; } while (v);
    char o[32];
    int k = 0;
    while (n)
        o[k++] = b[--n];
    o[k++] = '\n';
    o[k] = 0;
    serial_puts(o);
}

static int durability(void)
{
    struct dev *d = &devs[0];
    int e = dev_init(d, 0);
    if (e)
        return e;
    for (uint64_t n = 1; n < d->capacity; n++) {
        memcpy(buf, BLK_REC_MAGIC, 8);
        memcpy(buf + 8, &n, 8);
        for (unsigned j = 16; j < 512; j++)
            buf[j] = BLK_REC(n, j);
        if (req(d, 1, n, buf, 512) != 0 || req(d, 4, 0, NULL, 0) != 0)
            return 80;
        serial_puts(BLK_ACK);
        put_dec(n);
    }
    return 0;
}

static void put_dec_word(const char *label, uint64_t v)
{
    char b[24], o[48];
    int n = 0, k = 0;
    do { b[n++] = (char)('0' + v % 10); v /= 10; } while (v);
    while (*label)
        o[k++] = *label++;
    while (n)
        o[k++] = b[--n];
    o[k] = 0;
    serial_puts(o);
}

static int swap_report(struct dev *d)
{
    uint32_t gen;
    do {        /* a consistent 64-bit read of capacity */
        gen = rd(d, 0x0fc);
        d->capacity = (uint64_t)rd(d, R_CONFIG) | (uint64_t)rd(d, R_CONFIG + 4) << 32;
    } while (gen != rd(d, 0x0fc));
    if (req(d, 0, 0, buf2, 512) != 0)
        return 90;
    serial_puts(BLK_SWAP);
    put_dec_word("cap ", d->capacity);
    put_dec_word(" byte ", buf2[0]);
    serial_puts("\n");
    return 0;
}

static int swapwatch(void)
{
    struct dev *d = &devs[0];
    int e = dev_init(d, 0);
    if (e || (e = swap_report(d)))
        return e;
    for (int n = 1; n < BLK_SWAP_MAX;) {
        if (!(rd(d, R_INT_STATUS) & 2)) {
            for (int i = 0; i < 100000; i++)    /* not one MMIO exit after another */
                cpu_relax();
            continue;
        }
        wr(d, R_INT_ACK, 2);
        if ((e = swap_report(d)))
            return e;
        n++;
    }
    return 0;
}

int guest_main(uint64_t cpu, uint64_t ncpus, uint64_t mem)
{
    (void)ncpus;
    (void)mem;
    if (cpu != 0)
        park();
    int rc = rt_cmdline_has("blkdur") ? durability() : rt_cmdline_has("blkswap") ? swapwatch() : functional();
    if (rc) {
        serial_puts("blk: failed, code ");
        put_dec((uint64_t)rc);
    }
    return rc;
}
