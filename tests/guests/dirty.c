/* dirty: writes every page of a region (dirty=N MiB on the command line,
 * default 64; at 16 MiB) with the round number, prints "round R", then
 * waits on the UART: 'w' starts the next round, 'q' checks that every page
 * still holds the last round's value and exits 0 (1 if one does not; 10 if
 * the region does not fit in RAM). For diff snapshots (bench/snapshot.sh):
 * a known amount of memory written between two snapshots, and a check
 * after restore that all of it came back.
 * spin=1: rewrites the region round after round without waiting (prints
 * "spinning" once the first round is done), each page checked before it
 * is written: it must hold the previous round's value (a restored guest
 * finds the memory of the moment it was snapshotted; a page from later
 * than its registers is "bad page", exit 1); 'q' (looked for after each
 * round): "ok", exit 0. A guest that writes its memory while a snapshot's
 * writes are still going on (tests/integration: cli_snapshot_staged). */
#include "rt.h"

#define BASE    (16ull << 20)
#define PAGE    4096ull

static void put_dec(uint64_t v)
{
    char b[24];
    int n = 0;
    do { b[n++] = (char)('0' + v % 10); v /= 10; } while (v);
    while (n)
        serial_putc(b[--n]);
}

static int spin(uint64_t size)
{
    for (uint64_t round = 1;; round++) {
        if (round == 2)
            serial_puts("spinning\n");     /* every page written once */
        for (uint64_t a = BASE; a < BASE + size; a += PAGE) {
            volatile uint64_t *p = (volatile uint64_t *)a;
            if (*p != (round == 1 ? 0 : (round - 1) ^ a)) {
                serial_puts("bad page\n");
                return 1;
            }
            *p = round ^ a;
        }
        if ((inb(COM1_LSR) & 1) && inb(COM1) == 'q') {
            serial_puts("ok\n");
            return 0;
        }
    }
}

int guest_main(uint64_t cpu, uint64_t ncpus, uint64_t mem)
{
    (void)ncpus;
    if (cpu != 0)
        park();
    outb(MOAT_EVENT, MOAT_EV_INIT);
    uint64_t size = cmdline_uint("dirty", 64) << 20;
    uint64_t top = mem < MMIO_START ? mem : MMIO_START;
    if (BASE + size > top)
        return 10;
    if (cmdline_uint("spin", 0))
        return spin(size);
    for (uint64_t round = 1;; round++) {
        for (uint64_t a = BASE; a < BASE + size; a += PAGE)
            *(volatile uint64_t *)a = round ^ a;
        serial_puts("round ");
        put_dec(round);
        serial_putc('\n');
        for (;;) {
            if (!(inb(COM1_LSR) & 1))
                continue;
            uint8_t ch = inb(COM1);
            if (ch == 'w')
                break;
            if (ch == 'q') {
                for (uint64_t a = BASE; a < BASE + size; a += PAGE)
                    if (*(volatile uint64_t *)a != (round ^ a))
                        return 1;
                serial_puts("ok\n");
                return 0;
            }
        }
    }
}
