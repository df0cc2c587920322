/* memsize: prints "mem 0x<RDX>\n" (the test compares it with --mem), then
 * checks the last 8 bytes of RAM below 3 GiB are RAM: exit 0, or
 *   10 RDX below 2 MiB or not a multiple of 4 KiB
 *   11 the top of RAM does not hold what was written. */
#include "rt.h"

int guest_main(uint64_t cpu, uint64_t ncpus, uint64_t mem)
{
    (void)ncpus;
    if (cpu != 0)
        park();
    char line[48];
    fmt_str(fmt_hex(fmt_str(line, "mem "), mem), "\n");
    serial_puts(line);
    if (mem < 0x200000 || (mem & 0xFFF))
        return 10;
    uint64_t top = (mem < MMIO_START ? mem : MMIO_START) - 8;
    volatile uint64_t *p = (volatile uint64_t *)top;
    *p = 0x0123456789ABCDEFull ^ top;
    if (*p != (0x0123456789ABCDEFull ^ top))
        return 11;
    return 0;
}
