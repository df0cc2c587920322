/* ports: port I/O to the moat control device and the UART.
 *   10 magic port (0x0F48) wrong
 *   20-23 scratch port (0x0F44, 32-bit) round trips failed
 *   30 UART scratch register (0x3FF) round trip failed
 *   31 UART LSR does not report THRE
 * The final status is written as a 32-bit value with junk in the upper bytes
 * after a stale 16-bit status: exit 0 therefore also proves "low 8 bits,
 * last write wins" on the status port. */
#include "rt.h"

static int check(void)
{
    if (inl(MOAT_MAGIC_PORT) != MOAT_MAGIC)
        return 10;

    static const uint32_t pats[] = { 0, 0xFFFFFFFFu, 0xA5A5A5A5u, 0x5A5A5A5Au,
                                     0x12345678u, 0x80000001u };
    for (unsigned i = 0; i < sizeof(pats) / sizeof(pats[0]); i++) {
        outl(MOAT_SCRATCH, pats[i]);
        if (inl(MOAT_SCRATCH) != pats[i])
            return 20;
        /* A read must not change it. */
        if (inl(MOAT_SCRATCH) != pats[i])
            return 21;
    }
    for (int b = 0; b < 32; b++) {
        outl(MOAT_SCRATCH, 1u << b);
        if (inl(MOAT_SCRATCH) != 1u << b)
            return 22;
        outl(MOAT_SCRATCH, ~(1u << b));
        if (inl(MOAT_SCRATCH) != ~(1u << b))
            return 23;
    }

    for (unsigned v = 0; v < 256; v++) {
        outb(COM1_SCR, (uint8_t)v);
        if (inb(COM1_SCR) != v)
            return 30;
    }
    if (!(inb(COM1_LSR) & LSR_THRE))
        return 31;
    return 0;
}

int guest_main(uint64_t cpu, uint64_t ncpus, uint64_t mem)
{
    (void)ncpus;
    (void)mem;
    if (cpu != 0)
        park();
    int rc = check();
    serial_puts(rc ? "ports: FAILED\n" : "ports: ok\n");
    outw(MOAT_STATUS, 0xEE00 | PORTS_STALE_STATUS);
    outl(MOAT_STATUS, 0xDEADBE00u | (uint32_t)rc);
    reset_machine();
}
