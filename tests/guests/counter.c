/* counter: counts in a register and in memory, printing "tick N" every
 * `spin` iterations (spin=N on the command line at 0x20000; default
 * 100000) until a 'q' arrives on the UART; then prints "final N" and exits
 * 0 if the register and memory counts agree (1 otherwise). Used to check
 * that pause/resume (and snapshot/restore) continue exactly where they
 * stopped: the host sees consecutive ticks and a matching final count. */
#include "rt.h"

#define CMDLINE 0x20000ull
#define COM1_RBR COM1
#define LSR_DR 0x01

static volatile uint64_t mem_count;

static void put_dec(uint64_t v)
{
    char b[24];
    int n = 0;
    do { b[n++] = (char)('0' + v % 10); v /= 10; } while (v);
    while (n)
        serial_putc(b[--n]);
}

static uint64_t spin_from_cmdline(void)
{
    const volatile char *c = (const volatile char *)CMDLINE;
    for (int i = 0; i < 256 && c[i]; i++) {
        if (c[i] == 's' && c[i + 1] == 'p' && c[i + 2] == 'i' && c[i + 3] == 'n' && c[i + 4] == '=') {
            uint64_t v = 0;
            for (int j = i + 5; c[j] >= '0' && c[j] <= '9' && j < i + 25; j++)
                v = v * 10 + (uint64_t)(c[j] - '0');
            return v ? v : 1;
        }
    }
    return 100000;
}

int guest_main(uint64_t cpu, uint64_t ncpus, uint64_t mem)
{
    (void)ncpus;
    (void)mem;
    if (cpu != 0)
        park();
    outb(MOAT_EVENT, MOAT_EV_INIT);
    uint64_t spin = spin_from_cmdline(), reg = 0, t = 0;
    for (;; t++) {
        for (uint64_t i = 0; i < spin; i++) {
            reg++;
            mem_count = mem_count + 1;
        }
        serial_puts("tick ");
        put_dec(t);
        serial_putc('\n');
        if ((inb(COM1_LSR) & LSR_DR) && inb(COM1_RBR) == 'q')
            break;
    }
    serial_puts("final ");
    put_dec(t + 1);
    serial_putc('\n');
    return reg == mem_count && reg == (t + 1) * spin ? 0 : 1;
}
