/* rng: a tiny polling virtio-mmio (version 2) virtio-rng driver. Protocol
 * in rng_proto.h. Exit codes:
 *   3  no virtio-rng device in slot 0 (RNG_NODEV)
 *   10 bad magic/version   11 FEATURES_OK refused   12 queue setup refused
 *   14 request timed out
 *   20 short read  21 all zero  22 two reads equal
 *   30 big request: used length not RNG_CAP
 *   40 readable chain not returned with length 0   41 device dead after it */
#include "rt.h"
#include "virtio_mmio.h"
#include <stdbool.h>

#include "rng_proto.h"

#define CMDLINE   0x20000ull
#define VBASE     VIRTIO_MMIO_SLOT(0)
#define COM1_RBR  COM1
#define LSR_DR    0x01
#define QN 8
#define F_NEXT 1
#define F_WRITE 2

static struct {
    VRING_FIELDS(QN);
} q;
static uint8_t a[RNG_SMALL], b[RNG_SMALL], first[16];
static uint8_t big[RNG_BIG] __attribute__((aligned(4096)));

static uint32_t rd(uint64_t off) { return mmio_read32(VBASE + off); }
static void wr(uint64_t off, uint32_t v) { mmio_write32(VBASE + off, v); }

static int dev_init(void)
{
    int e = virtio_mmio_handshake(VBASE, 4, RNG_NODEV);
    if (e)
        return e;
    wr(R_QUEUE_SEL, 0);
    if (rd(R_QUEUE_MAX) < QN)
        return 12;
    wr(R_QUEUE_NUM, QN);
    uint64_t x = (uint64_t)(uintptr_t)q.desc, y = (uint64_t)(uintptr_t)&q.avail, z = (uint64_t)(uintptr_t)&q.used;
    wr(R_DESC_LO, (uint32_t)x); wr(R_DESC_HI, (uint32_t)(x >> 32));
    wr(R_AVAIL_LO, (uint32_t)y); wr(R_AVAIL_HI, (uint32_t)(y >> 32));
    wr(R_USED_LO, (uint32_t)z); wr(R_USED_HI, (uint32_t)(z >> 32));
    wr(R_QUEUE_READY, 1);
    if (rd(R_QUEUE_READY) != 1)
        return 12;
    wr(R_STATUS, 1 | 2 | 8 | 4);
    return 0;
}

/* One chain of one descriptor; the used length, or -1 on timeout. */
static long request(void *buf, uint32_t len, uint16_t flags)
{
    q.desc[0] = (struct desc){ (uint64_t)(uintptr_t)buf, len, flags, 0 };
    q.avail.ring[q.avail.idx % QN] = 0;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    __atomic_store_n(&q.avail.idx, (uint16_t)(q.avail.idx + 1), __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    wr(R_QUEUE_NOTIFY, 0);
    for (uint64_t i = 0; i < 4000000000ull; i++) {
        if (__atomic_load_n(&q.used.idx, __ATOMIC_ACQUIRE) != q.last_used) {
            uint32_t n = q.used.ring[q.last_used % QN].len;
            q.last_used++;
            return n;
        }
        cpu_relax();
    }
    return -1;
}

static bool has_word(const char *w)
{
    const volatile char *c = (const volatile char *)CMDLINE;
    size_t n = strlen(w);
    for (int i = 0; i < 256 && c[i]; i++) {
        size_t j = 0;
        while (j < n && c[i + j] == w[j])
            j++;
        if (j == n)
            return true;
    }
    return false;
}

static int functional(void)
{
    int e = dev_init();
    if (e)
        return e;
    long n = request(a, sizeof a, F_WRITE);
    if (n < 0)
        return 14;
    if (n != sizeof a)
        return 20;
    n = request(b, sizeof b, F_WRITE);
    if (n != sizeof b)
        return n < 0 ? 14 : 20;
    bool nonzero = false;
    for (unsigned i = 0; i < sizeof a; i++)
        nonzero |= a[i] != 0;
    if (!nonzero)
        return 21;
    if (!memcmp(a, b, sizeof a))
        return 22;
    memcpy(first, a, sizeof first);
    n = request(big, sizeof big, F_WRITE);
    if (n != RNG_CAP)
        return n < 0 ? 14 : 30;
    n = request(a, sizeof a, 0);            /* device-readable: refused */
    if (n != 0)
        return n < 0 ? 14 : 40;
    n = request(a, sizeof a, F_WRITE);
    if (n != sizeof a)
        return 41;
    return 0;
}

int guest_main(uint64_t cpu, uint64_t ncpus, uint64_t mem)
{
    (void)ncpus;
    (void)mem;
    if (cpu != 0)
        park();
    int e = functional();
    if (e)
        return e;
    serial_puts(RNG_OK);
    char line[64], *p = fmt_str(line, "rng bytes ");
    for (unsigned i = 0; i < sizeof first; i++) {
        *p++ = "0123456789abcdef"[first[i] >> 4];
        *p++ = "0123456789abcdef"[first[i] & 15];
    }
    p = fmt_str(p, "\n");
    serial_puts(line);
    if (!has_word("loop"))
        return 0;
    outb(MOAT_EVENT, MOAT_EV_INIT);
    uint64_t t = 0;
    for (;; t++) {
        if (request(a, sizeof a, F_WRITE) != sizeof a)
            return 41;
        serial_puts("rng tick ");
        serial_putdec(t);
        serial_putc('\n');
        for (volatile uint64_t i = 0; i < 20000; i++)
            ;
        if ((inb(COM1_LSR) & LSR_DR) && inb(COM1_RBR) == 'q')
            break;
    }
    serial_puts("rng final ");
    serial_putdec(t + 1);
    serial_putc('\n');
    return 0;
}
