/* mmio: the moat control device's MMIO page and unmapped MMIO.
 *   10 magic (32-bit read at 0xD0000000) wrong
 *   20 64-bit scratch round trip failed
 *   21 a narrow scratch write read back wrong at its own width
 *   22 a narrow scratch write did not merge little-endian into the 64-bit value
 *   30 unmapped MMIO read (width 1/2/4/8) not all ones
 *   31 unmapped MMIO read after a write there not all ones
 * Reaching the exit at all proves unmapped accesses do not stop the guest. */
#include "rt.h"

#define UNMAPPED 0xE0000000ull   /* between the virtio slots and the IOAPIC */

static int check(void)
{
    if (mmio_read32(MOAT_MMIO) != MOAT_MAGIC)
        return 10;

    static const uint64_t pats[] = { 0, ~0ull, 0x0123456789ABCDEFull,
                                     0xA5A5A5A55A5A5A5Aull, 1ull << 63 };
    for (unsigned i = 0; i < sizeof(pats) / sizeof(pats[0]); i++) {
        mmio_write64(MOAT_MMIO_SCRATCH, pats[i]);
        if (mmio_read64(MOAT_MMIO_SCRATCH) != pats[i])
            return 20;
    }

    /* Narrow writes at every aligned offset of the 8-byte register; track the
     * expected 64-bit value locally. */
    uint64_t expect = 0x1122334455667788ull, seed = 0xC3;
    mmio_write64(MOAT_MMIO_SCRATCH, expect);
    for (unsigned len = 1; len <= 8; len *= 2) {
        for (unsigned off = 0; off < 8; off += len) {
            uint64_t mask = len == 8 ? ~0ull : ((1ull << (len * 8)) - 1);
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            uint64_t v = (seed >> 13) & mask;
            mmio_write(MOAT_MMIO_SCRATCH + off, v, len);
            expect = (expect & ~(mask << (off * 8))) | (v << (off * 8));
            if (mmio_read(MOAT_MMIO_SCRATCH + off, len) != v)
                return 21;
            if (mmio_read64(MOAT_MMIO_SCRATCH) != expect)
                return 22;
        }
    }

    for (unsigned len = 1; len <= 8; len *= 2) {
        uint64_t ones = len == 8 ? ~0ull : ((1ull << (len * 8)) - 1);
        if (mmio_read(UNMAPPED + 8 * len, len) != ones)
            return 30;
        mmio_write(UNMAPPED + 8 * len, 0, len);
        if (mmio_read(UNMAPPED + 8 * len, len) != ones)
            return 31;
    }
    return 0;
}

int guest_main(uint64_t cpu, uint64_t ncpus, uint64_t mem)
{
    (void)ncpus;
    (void)mem;
    if (cpu != 0)
        park();
    int rc = check();
    serial_puts(rc ? "mmio: FAILED\n" : "mmio: ok\n");
    return rc;
}
