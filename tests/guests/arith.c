/* arith: integer arithmetic and memory. Exit 0 on success; each failed
 * check has its own status (listed in docs/testing.md):
 *   10-19 integer arithmetic, 20-29 word patterns over 2 MiB,
 *   30-39 byte patterns, 40-49 memmove, 50 RAM too small for the test. */
#include "rt.h"

#define REGION      0x300000ull     /* crosses the 2 MiB page at 4 MiB */
#define REGION_SZ   0x200000ull
#define BYTES_SZ    0x40000ull
#define MOVE_SZ     0x4000ull

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* Values the compiler cannot fold. */
static volatile uint64_t v_seed = 0x9E3779B97F4A7C15ull;
static volatile int64_t v_neg7 = -7, v_two = 2;

static int check_integers(void)
{
    uint64_t s = v_seed;

    /* Division identity on pseudo-random operands. */
    for (int i = 0; i < 2000; i++) {
        uint64_t a = xorshift(&s), b = xorshift(&s) >> (i % 63);
        if (b == 0)
            b = 1;
        volatile uint64_t vb = b;
        uint64_t q = a / vb, r = a % vb;
        if (r >= b || q * b + r != a)
            return 10;
        uint32_t a32 = (uint32_t)a, b32 = (uint32_t)b | 1;
        volatile uint32_t vb32 = b32;
        if ((a32 / vb32) * b32 + a32 % vb32 != a32)
            return 11;
    }
    /* Signed division truncates toward zero. */
    if (v_neg7 / v_two != -3 || v_neg7 % v_two != -1)
        return 12;
    /* Gauss: sum 1..n computed by a loop and by formula. */
    volatile uint64_t n = 100000;
    uint64_t sum = 0;
    for (uint64_t i = 1; i <= n; i++)
        sum += i;
    if (sum != n * (n + 1) / 2)
        return 13;
    /* Shifts and rotates against multiplication and byte swaps. */
    for (int i = 0; i < 64; i++) {
        uint64_t a = xorshift(&s);
        volatile unsigned sh = (unsigned)i;
        if ((a << sh) != a * (1ull << i))
            return 14;
        uint64_t rot = (a << sh) | (sh ? a >> (64 - sh) : 0);
        uint64_t back = (rot >> sh) | (sh ? rot << (64 - sh) : 0);
        if (back != a)
            return 15;
    }
    uint64_t x = 0x0102030405060708ull;
    volatile uint64_t vx = x;
    if (__builtin_bswap64(vx) != 0x0807060504030201ull)
        return 16;
    /* Bit count two ways (no popcnt instruction: PVM). */
    for (int i = 0; i < 256; i++) {
        uint64_t a = xorshift(&s), c1 = 0, c2 = 0, t = a;
        for (int b = 0; b < 64; b++)
            c1 += (a >> b) & 1;
        while (t) {
            t &= t - 1;
            c2++;
        }
        if (c1 != c2)
            return 17;
    }
    /* Wide multiplication: (2^32 + 1)^2 = 2^64 + 2^33 + 1. */
    volatile uint64_t m = (1ull << 32) + 1;
    unsigned __int128 sq = (unsigned __int128)m * m;
    if ((uint64_t)(sq >> 64) != 1 || (uint64_t)sq != (1ull << 33) + 1)
        return 18;
    volatile uint64_t big = ~0ull;
    unsigned __int128 bb = (unsigned __int128)big * big;
    if ((uint64_t)(bb >> 64) != ~0ull - 1 || (uint64_t)bb != 1)
        return 19;
    return 0;
}

static int check_words(void)
{
    volatile uint64_t *w = (volatile uint64_t *)REGION;
    const uint64_t nw = REGION_SZ / 8;
    uint64_t s, sum_write = 0, sum_read = 0;

    s = v_seed ^ 0x1234;
    for (uint64_t i = 0; i < nw; i++) {
        uint64_t v = xorshift(&s) ^ i;
        w[i] = v;
        sum_write += v * (i | 1);
    }
    s = v_seed ^ 0x1234;
    for (uint64_t i = 0; i < nw; i++) {
        uint64_t v = w[i];
        if (v != (xorshift(&s) ^ i))
            return 20;
        sum_read += v * (i | 1);
    }
    if (sum_read != sum_write)
        return 21;
    /* Address-in-address over the same region: catches aliased pages. */
    for (uint64_t i = 0; i < nw; i += 512)
        w[i] = (uint64_t)&w[i];
    for (uint64_t i = 0; i < nw; i += 512)
        if (w[i] != (uint64_t)&w[i])
            return 22;
    /* Walking ones over one page. */
    for (int b = 0; b < 64; b++) {
        for (int i = 0; i < 512; i++)
            w[i] = 1ull << ((b + i) & 63);
        for (int i = 0; i < 512; i++)
            if (w[i] != 1ull << ((b + i) & 63))
                return 23;
    }
    return 0;
}

static int check_bytes(void)
{
    volatile uint8_t *p = (volatile uint8_t *)REGION;
    for (uint64_t i = 0; i < BYTES_SZ; i++)
        p[i] = (uint8_t)(i * 7 + 3);
    for (uint64_t i = 0; i < BYTES_SZ; i++)
        if (p[i] != (uint8_t)(i * 7 + 3))
            return 30;
    /* Mixed widths view the same bytes little-endian. */
    volatile uint32_t *d = (volatile uint32_t *)REGION;
    for (uint64_t i = 0; i < 64; i++) {
        uint32_t want = 0;
        for (int k = 3; k >= 0; k--)
            want = (want << 8) | (uint8_t)((i * 4 + (uint64_t)k) * 7 + 3);
        if (d[i] != want)
            return 31;
    }
    memset((void *)REGION, 0xA5, 4096);
    for (int i = 0; i < 4096; i++)
        if (p[i] != 0xA5)
            return 32;
    return 0;
}

static uint8_t pat(uint64_t i) { return (uint8_t)(i ^ (i >> 8) ^ 0x5C); }

static void fill_pat(uint8_t *b, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        b[i] = pat(i);
}

static int check_memmove(void)
{
    uint8_t *b = (uint8_t *)REGION;
    const uint64_t n = MOVE_SZ, d = 37;

    /* Forward overlap: dst < src. */
    fill_pat(b, n + d);
    memmove(b, b + d, n);
    for (uint64_t i = 0; i < n; i++)
        if (b[i] != pat(i + d))
            return 40;
    /* Backward overlap: dst > src. */
    fill_pat(b, n + d);
    memmove(b + d, b, n);
    for (uint64_t i = 0; i < d; i++)
        if (b[i] != pat(i))
            return 41;
    for (uint64_t i = 0; i < n; i++)
        if (b[i + d] != pat(i))
            return 42;
    /* Non-overlapping copy and compare. */
    fill_pat(b, n);
    memcpy(b + 2 * n, b, n);
    if (memcmp(b, b + 2 * n, n) != 0)
        return 43;
    b[2 * n + n / 2] ^= 1;
    if (memcmp(b, b + 2 * n, n) == 0)
        return 44;
    return 0;
}

int guest_main(uint64_t cpu, uint64_t ncpus, uint64_t mem)
{
    int rc;
    (void)ncpus;
    if (cpu != 0)
        park();
    if (mem < REGION + REGION_SZ + 3 * MOVE_SZ)
        rc = 50;
    else if ((rc = check_integers()) == 0 && (rc = check_words()) == 0 &&
             (rc = check_bytes()) == 0)
        rc = check_memmove();
    if (rc == 0) {
        serial_puts("arith: ok\n");
    } else {
        serial_puts("arith: FAILED check ");
        serial_putdec((uint64_t)rc);
        serial_puts("\n");
    }
    return rc;
}
