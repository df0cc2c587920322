/* hostile: abuses every device interface moat exposes, then prints
 * HOSTILE_TEXT and exits HOSTILE_STATUS (expect.h). It checks nothing
 * itself: the test is that moat neither crashes nor ends the run early.
 *
 * Avoided on purpose, because they would legitimately end or corrupt the run:
 * the i8042 command port 0x64, legacy ports below 0x100 other than the i8042
 * data port (PIC, PIT, RTC, port 0x92 reset), 0xCF8-0xCFF (PCI, reset at
 * 0xCF9), 0x400-0x6FF and 0xB000-0xB0FF (debug-exit/ACPI ports elsewhere),
 * the IOAPIC and LAPIC pages, and guest RAM. Virtio-mmio slots only get
 * values >= 0x80000000, so a device that starts DMA at the junk addresses
 * finds no RAM there (when RAM < 2 GiB) instead of overwriting this guest. */
#include "rt.h"

#define VIRTIO_FIRST 0xD0001000ull
#define VIRTIO_END   0xD0100000ull

static uint64_t rng = 0x243F6A8885A308D3ull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static volatile uint64_t sink;

static void port_rw(uint16_t port, unsigned len, uint32_t val)
{
    switch (len) {
    case 1: outb(port, (uint8_t)val); sink += inb(port); break;
    case 2: outw(port, (uint16_t)val); sink += inw(port); break;
    default: outl(port, val); sink += inl(port); break;
    }
}

static int port_denied(unsigned p)
{
    return p < 0x100 || (p >= 0x3F8 && p < 0x400) || (p >= 0x400 && p < 0x700) ||
           (p >= 0xCF8 && p < 0xD00) || (p >= 0xF40 && p < 0xF50) ||
           (p >= 0xB000 && p < 0xB100);
}

static void abuse_moat_ports(void)
{
    static const uint32_t junk[] = { 0, 0xFF, 0xA5, 0x5A, 0x01, 0x02, 0x80, 0xFFFFFFFFu, 0xDEADBEEFu };
    for (unsigned p = MOAT_PORT; p < MOAT_PORT + 16; p++)
        for (unsigned j = 0; j < sizeof(junk) / sizeof(junk[0]); j++)
            for (unsigned len = 1; len <= 4; len *= 2)
                port_rw((uint16_t)p, len, junk[j] ^ p);   /* odd ports, straddling the end */
}

static void abuse_uart(void)
{
    /* Divisor latch and loopback first, so wide and junk writes at offset 0
     * do not reach moat's stdout. */
    outb(COM1_LCR, 0x80);
    outb(COM1_MCR, 0x10);
    for (unsigned off = 0; off < 8; off++)
        for (unsigned v = 0; v < 256; v += 17)
            if (off != 3 && off != 4)
                port_rw((uint16_t)(COM1 + off), 1, v);
    for (unsigned off = 0; off < 8; off++) {
        port_rw((uint16_t)(COM1 + off), 2, 0xFFFFu);
        port_rw((uint16_t)(COM1 + off), 4, 0xFFFFFFFFu);   /* straddles 0x3FF */
    }
    outb(COM1_LCR, 0x80);
    outb(COM1_MCR, 0x10);
    /* Loopback data path: fill the receive FIFO past its size, drain it. */
    outb(COM1_LCR, 0x03);
    for (unsigned i = 0; i < 200; i++)
        outb(COM1_THR, (uint8_t)i);
    for (unsigned i = 0; i < 200; i++)
        sink += inb(COM1_THR) + inb(COM1_LSR) + inb(COM1_IIR);
    /* Odd line settings, then back to a sane state: 8N1, no loopback, FIFO reset. */
    for (unsigned v = 0; v < 256; v += 3) {
        outb(COM1_LCR, (uint8_t)(v & 0x7F));
        outb(COM1_IER, (uint8_t)v);
        outb(COM1_FCR, (uint8_t)v);
        outb(COM1_MCR, (uint8_t)(v | 0x10));
    }
    outb(COM1_LCR, 0x80);
    outb(COM1 + 0, 1);
    outb(COM1 + 1, 0);
    outb(COM1_LCR, 0x03);
    outb(COM1_IER, 0);
    outb(COM1_FCR, 0x07);
    outb(COM1_MCR, 0x03);
    for (unsigned off = 0; off < 8; off++)
        sink += inb((uint16_t)(COM1 + off));
}

static void abuse_i8042_data(void)
{
    for (unsigned v = 0; v < 256; v += 5) {
        outb(I8042_DATA, (uint8_t)v);
        sink += inb(I8042_DATA);
    }
    outw(I8042_DATA, 0xFFFF);
    sink += inw(I8042_DATA);
}

static void abuse_unmapped_ports(void)
{
    for (unsigned p = 0x100; p + 4 <= 0x10000; p += 97) {
        for (unsigned len = 1; len <= 4; len *= 2) {
            if (port_denied(p) || port_denied(p + len - 1))
                continue;
            port_rw((uint16_t)p, len, (uint32_t)rnd());
        }
    }
    port_rw(0x2F8, 1, 0x41);   /* COM2..COM4: absent */
    port_rw(0x3E8, 1, 0x41);
    port_rw(0x2E8, 1, 0x41);
}

static void mmio_rw(uint64_t a, unsigned len, uint64_t val)
{
    mmio_write(a, val, len);
    sink += mmio_read(a, len);
}

static int mmio_denied(uint64_t a, unsigned len)
{
    uint64_t e = a + len;
    return (a < IOAPIC_BASE + 0x1000 && e > IOAPIC_BASE) ||
           (a < LAPIC_BASE + 0x1000 && e > LAPIC_BASE) ||
           (a < VIRTIO_END && e > VIRTIO_FIRST) || e > 0x100000000ull;
}

static void abuse_moat_mmio(void)
{
    for (uint64_t off = 0; off < 0x40; off++)
        for (unsigned len = 1; len <= 8; len *= 2)
            mmio_rw(MOAT_MMIO + off, len, rnd());
    for (uint64_t off = 0x40; off < 0x1000; off += 0x38 + 3)
        for (unsigned len = 1; len <= 8; len *= 2)
            mmio_rw(MOAT_MMIO + off, len, rnd());
    mmio_rw(MOAT_MMIO + 0xFFF, 1, rnd());
}

static void abuse_virtio_slots(void)
{
    static const uint32_t junk[] = { 0xFFFFFFFFu, 0xDEADBEEFu, 0x80000001u, 0xC0000000u };
    for (uint64_t slot = VIRTIO_FIRST; slot < VIRTIO_FIRST + 8 * 0x1000; slot += 0x1000) {
        for (uint64_t off = 0; off < 0x100; off += 4) {
            mmio_write32(slot + off, junk[(off >> 2) & 3]);
            sink += mmio_read32(slot + off);
        }
        for (uint64_t off = 0x100; off < 0x140; off++)
            for (unsigned len = 1; len <= 8; len *= 2) {
                mmio_write(slot + off, 0xFFFFFFFFFFFFFFFFull, len);
                sink += mmio_read(slot + off, len);
            }
        mmio_write32(slot + 0x70, 0);   /* Status = 0: reset the device */
    }
}

static void abuse_mmio_space(uint64_t mem)
{
    for (int i = 0; i < 1024; i++) {
        unsigned len = 1u << (rnd() & 3);
        uint64_t a = MMIO_START + (rnd() % (0x100000000ull - MMIO_START));
        if (i & 1)
            a &= ~(uint64_t)(len - 1);   /* half aligned, half anywhere */
        if (!mmio_denied(a, len))
            mmio_rw(a, len, rnd());
    }
    /* Page-crossing 8-byte accesses. */
    mmio_rw(MOAT_MMIO - 4, 8, rnd());
    mmio_rw(0xE0000FFDull, 8, rnd());
    /* Between the end of RAM and the MMIO hole. */
    if (mem < MMIO_START) {
        uint64_t gap[] = { mem, mem + 0x1003, (mem + MMIO_START) / 2, MMIO_START - 8 };
        for (unsigned i = 0; i < 4; i++)
            if (gap[i] + 8 <= MMIO_START)
                mmio_rw(gap[i], 8, rnd());
    }
}

int guest_main(uint64_t cpu, uint64_t ncpus, uint64_t mem)
{
    (void)ncpus;
    if (cpu != 0)
        park();
    abuse_moat_ports();
    abuse_uart();
    abuse_i8042_data();
    abuse_unmapped_ports();
    abuse_moat_mmio();
    abuse_virtio_slots();
    abuse_mmio_space(mem);
    serial_puts(HOSTILE_TEXT);
    return HOSTILE_STATUS;
}
