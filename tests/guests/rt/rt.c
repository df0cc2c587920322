/* Runtime helpers for the test guests (rt.h). */
#include "rt.h"

volatile uint64_t rt_entry_rsp[MAX_CPUS];
volatile uint64_t rt_entry_rflags[MAX_CPUS];

static volatile uint32_t serial_lock_word;

static void serial_lock(void)
{
    while (__atomic_exchange_n(&serial_lock_word, 1, __ATOMIC_ACQUIRE))
        while (__atomic_load_n(&serial_lock_word, __ATOMIC_RELAXED))
            cpu_relax();
}

static void serial_unlock(void)
{
    __atomic_store_n(&serial_lock_word, 0, __ATOMIC_RELEASE);
}

static void serial_raw_putc(char c)
{
    /* Bounded wait for THRE: a broken LSR must not hang the guest. */
    for (unsigned i = 0; i < 100000 && !(inb(COM1_LSR) & LSR_THRE); i++)
        cpu_relax();
    outb(COM1_THR, (uint8_t)c);
}

void serial_putc(char c)
{
    serial_lock();
    serial_raw_putc(c);
    serial_unlock();
}

void serial_puts(const char *s)
{
    serial_lock();
    while (*s)
        serial_raw_putc(*s++);
    serial_unlock();
}

char *fmt_str(char *p, const char *s)
{
    while (*s)
        *p++ = *s++;
    *p = 0;
    return p;
}

char *fmt_dec(char *p, uint64_t v)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    *p = 0;
    return p;
}

char *fmt_hex(char *p, uint64_t v)
{
    char tmp[16];
    int n = 0;
    *p++ = '0';
    *p++ = 'x';
    do {
        tmp[n++] = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    *p = 0;
    return p;
}

void serial_puthex(uint64_t v)
{
    char buf[24];
    fmt_hex(buf, v);
    serial_puts(buf);
}

void serial_putdec(uint64_t v)
{
    char buf[24];
    fmt_dec(buf, v);
    serial_puts(buf);
}

uint64_t cmdline_uint(const char *key, uint64_t dflt)
{
    const volatile char *c = (const volatile char *)0x20000ull;
    for (int i = 0; i < 256 && c[i]; i++) {
        if (i > 0 && c[i - 1] != ' ')
            continue;           /* a whole word only */
        int k = 0;
        while (key[k] && c[i + k] == key[k])
            k++;
        if (key[k] || c[i + k] != '=')
            continue;
        uint64_t v = 0;
        for (int j = i + k + 1; c[j] >= '0' && c[j] <= '9' && j < i + k + 20; j++)
            v = v * 10 + (uint64_t)(c[j] - '0');
        return v;
    }
    return dflt;
}

uint64_t mmio_read(uint64_t addr, unsigned len)
{
    switch (len) {
    case 1: return mmio_read8(addr);
    case 2: return mmio_read16(addr);
    case 4: return mmio_read32(addr);
    default: return mmio_read64(addr);
    }
}

void mmio_write(uint64_t addr, uint64_t val, unsigned len)
{
    switch (len) {
    case 1: mmio_write8(addr, (uint8_t)val); break;
    case 2: mmio_write16(addr, (uint16_t)val); break;
    case 4: mmio_write32(addr, (uint32_t)val); break;
    default: mmio_write64(addr, val); break;
    }
}

static __attribute__((noreturn)) void halt_forever(void)
{
    for (;;)
        __asm__ volatile("cli; hlt" ::: "memory");
}

void report(uint8_t status)
{
    outb(MOAT_STATUS, status);
    outb(I8042_CMD, I8042_RESET);
    halt_forever();
}

void reset_machine(void)
{
    outb(I8042_CMD, I8042_RESET);
    halt_forever();
}

void park(void)
{
    for (;;)
        cpu_relax();
}

int rt_cmdline_has(const char *w)
{
    const volatile char *c = (const volatile char *)RT_CMDLINE;
    size_t n = strlen(w);
    for (int i = 0; i < 512 && c[i]; i++) {
        size_t k = 0;
        while (k < n && c[i + k] == w[k])
            k++;
        if (k == n)
            return 1;
    }
    return 0;
}

uint64_t wait_at_least(volatile uint64_t *p, uint64_t want, uint64_t cycles)
{
    uint64_t t0 = rdtsc(), v = 0;
    /* The iteration cap keeps this bounded if the TSC is frozen; pause is
     * tens of cycles natively, and emulation is slower per iteration. */
    for (uint64_t i = 0; i < cycles / 16; i++) {
        v = __atomic_load_n(p, __ATOMIC_ACQUIRE);
        if (v >= want || rdtsc() - t0 > cycles)
            break;
        cpu_relax();
    }
    return v;
}

void *memset(void *d, int c, size_t n)
{
    unsigned char *p = d;
    while (n--)
        *p++ = (unsigned char)c;
    return d;
}

void *memcpy(void *restrict d, const void *restrict s, size_t n)
{
    unsigned char *dp = d;
    const unsigned char *sp = s;
    while (n--)
        *dp++ = *sp++;
    return d;
}

void *memmove(void *d, const void *s, size_t n)
{
    unsigned char *dp = d;
    const unsigned char *sp = s;
    if (dp == sp || n == 0)
        return d;
    if (dp < sp) {
        while (n--)
            *dp++ = *sp++;
    } else {
        dp += n;
        sp += n;
        while (n--)
            *--dp = *--sp;
    }
    return d;
}

int memcmp(const void *a, const void *b, size_t n)
{
    const unsigned char *x = a, *y = b;
    for (; n; n--, x++, y++)
        if (*x != *y)
            return *x < *y ? -1 : 1;
    return 0;
}

size_t strlen(const char *s)
{
    size_t n = 0;
    while (s[n])
        n++;
    return n;
}
