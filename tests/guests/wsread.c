/* wsread: a working set to read back after a restore (bench/restore.sh,
 * the working-set prefetch tests). Fills ws=N MiB (command line, default
 * 32; at 16 MiB) with a pattern, prints "filled", then waits on the UART:
 * 'r' reads the whole region back, checks the pattern and exits 0 (1 if a
 * word is wrong, 10 if the region does not fit in RAM). Snapshotted while
 * waiting, each restore given 'r' measures restore -> working set read. */
#include "rt.h"

#define BASE    (16ull << 20)

static uint64_t pattern(uint64_t a)
{
    return a * 0x9E3779B97F4A7C15ull ^ 0x5bd1e995ull;
}

int guest_main(uint64_t cpu, uint64_t ncpus, uint64_t mem)
{
    (void)ncpus;
    if (cpu != 0)
        park();
    outb(MOAT_EVENT, MOAT_EV_INIT);
    uint64_t size = cmdline_uint("ws", 32) << 20;
    uint64_t top = mem < MMIO_START ? mem : MMIO_START;
    if (BASE + size > top)
        return 10;
    for (uint64_t a = BASE; a < BASE + size; a += 8)
        *(volatile uint64_t *)a = pattern(a);
    serial_puts("filled\n");
    for (;;) {
        if (!(inb(COM1_LSR) & 1))
            continue;
        if (inb(COM1) != 'r')
            continue;
        uint64_t bad = 0;
        for (uint64_t a = BASE; a < BASE + size; a += 8)
            bad |= *(volatile uint64_t *)a ^ pattern(a);
        serial_puts(bad ? "bad\n" : "ok\n");
        return bad ? 1 : 0;
    }
}
