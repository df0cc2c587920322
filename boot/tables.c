/* Boot structures every kind of kernel gets: identity page tables, the boot
 * GDT and the MP table. Layouts and rationale: docs/boot.md. */
#include "boot/boot.h"

#include <errno.h>
#include <string.h>

#include "boot/bootfmt.h"
#include "vmm/base/layout.h"

#define PTE_P  0x1ULL
#define PTE_RW 0x2ULL
#define PTE_PS 0x80ULL
#define PAGE   0x1000ULL

int boot_setup_page_tables(const struct gmem *m)
{
    uint64_t *pml4 = gmem_ptr(m, LAYOUT_PML4, PAGE);
    uint64_t *pdpt = gmem_ptr(m, LAYOUT_PDPT, PAGE);
    uint64_t *pd = gmem_ptr(m, LAYOUT_PD, LAYOUT_PD_END - LAYOUT_PD);
    if (!pml4 || !pdpt || !pd)
        return -EFAULT;
    _Static_assert(LAYOUT_PD_END - LAYOUT_PD == 4 * PAGE, "4 PDs");
    memset(pml4, 0, PAGE);
    memset(pdpt, 0, PAGE);
    pml4[0] = LAYOUT_PDPT | PTE_P | PTE_RW;
    for (uint64_t i = 0; i < 4; i++)
        pdpt[i] = (LAYOUT_PD + i * PAGE) | PTE_P | PTE_RW;
    for (uint64_t i = 0; i < 4 * 512; i++)
        pd[i] = (i << 21) | PTE_P | PTE_RW | PTE_PS;
    return 0;
}

/* Descriptor fields: base 0 everywhere.
 *   0x00CF9B000000FFFF  32-bit code: limit 0xFFFFF, G, D, P, DPL0, exec/read, accessed
 *   0x00AF9B000000FFFF  64-bit code: as above with L=1, D=0
 *   0x00CF93000000FFFF  data: limit 0xFFFFF, G, B, P, DPL0, read/write, accessed
 *   0x00008B0000000067  TSS (low half): limit 0x67, P, type 0xB (busy TSS),
 *   0x0000000000000000  TSS (high half): base bits 63..32 */
static const uint64_t boot_gdt[BOOT_GDT_ENTRIES] = {
    0,
    0x00CF9B000000FFFFULL,
    0x00AF9B000000FFFFULL,
    0x00CF93000000FFFFULL,
    0x00008B0000000067ULL,
    0,
};
_Static_assert(BOOT_SEL_CODE32 == 1 * 8 && BOOT_SEL_CODE64 == 2 * 8 &&
               BOOT_SEL_DATA == 3 * 8 && BOOT_SEL_TSS == 4 * 8, "selectors");

uint64_t boot_gdt_entry(unsigned index)
{
    return index < BOOT_GDT_ENTRIES ? boot_gdt[index] : 0;
}

int boot_setup_gdt(const struct gmem *m)
{
    return gmem_write(m, LAYOUT_GDT, boot_gdt, sizeof(boot_gdt));
}

static uint8_t sum8(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint8_t s = 0;
    for (size_t i = 0; i < n; i++)
        s = (uint8_t)(s + b[i]);
    return s;
}

#define MP_MAX_SIZE (sizeof(struct mpc_table) + \
                     LAYOUT_MAX_CPUS * sizeof(struct mpc_cpu) + \
                     sizeof(struct mpc_bus) + sizeof(struct mpc_ioapic) + \
                     (BOOT_IOAPIC_PINS + 2) * sizeof(struct mpc_intsrc))
_Static_assert(MP_MAX_SIZE <= LAYOUT_HIMEM - BOOT_MP_CONFIG, "MP table fits the BIOS area");
_Static_assert(LAYOUT_MAX_CPUS < 255, "APIC ids and the IOAPIC id fit in 8 bits");

int boot_setup_mptable(const struct gmem *m, unsigned ncpus)
{
    if (ncpus == 0 || ncpus > LAYOUT_MAX_CPUS)
        return -EINVAL;
    size_t size = sizeof(struct mpc_table) + ncpus * sizeof(struct mpc_cpu) +
                  sizeof(struct mpc_bus) + sizeof(struct mpc_ioapic) +
                  (BOOT_IOAPIC_PINS + 2) * sizeof(struct mpc_intsrc);
    uint8_t *base = gmem_ptr(m, BOOT_MP_CONFIG, size);
    uint8_t *fp = gmem_ptr(m, LAYOUT_EBDA, sizeof(struct mpf_intel));
    if (!base || !fp)
        return -EFAULT;
    memset(base, 0, size);
    uint8_t *p = base + sizeof(struct mpc_table);
    uint16_t count = 0;
    const uint8_t ioapic_id = (uint8_t)ncpus;

    for (unsigned i = 0; i < ncpus; i++) {
        struct mpc_cpu c = {
            .type = MP_PROCESSOR,
            .apicid = (uint8_t)i,
            .apicver = 0x14,
            .cpuflag = (uint8_t)(1 | (i == 0 ? 2 : 0)),
            .cpufeature = 0x600,        /* family 6 */
            .featureflag = 0x201,       /* FPU, APIC */
        };
        memcpy(p, &c, sizeof(c));
        p += sizeof(c);
        count++;
    }
    struct mpc_bus bus = { .type = MP_BUS, .busid = 0 };
    memcpy(bus.bustype, "ISA   ", 6);
    memcpy(p, &bus, sizeof(bus));
    p += sizeof(bus);
    count++;
    struct mpc_ioapic io = {
        .type = MP_IOAPIC, .apicid = ioapic_id, .apicver = 0x11, .flags = 1,
        .apicaddr = (uint32_t)BOOT_IOAPIC_ADDR,
    };
    memcpy(p, &io, sizeof(io));
    p += sizeof(io);
    count++;
    /* Identity routing, as KVM's default GSI routing: bus IRQ n -> pin n. */
    for (unsigned pin = 0; pin < BOOT_IOAPIC_PINS; pin++) {
        struct mpc_intsrc e = {
            .type = MP_INTSRC, .irqtype = MP_IRQ_INT, .irqflag = 0,
            .srcbus = 0, .srcbusirq = (uint8_t)pin,
            .dstapic = ioapic_id, .dstirq = (uint8_t)pin,
        };
        memcpy(p, &e, sizeof(e));
        p += sizeof(e);
        count++;
    }
    struct mpc_intsrc lint[2] = {
        { .type = MP_LINTSRC, .irqtype = MP_IRQ_EXTINT, .srcbus = 0,
          .srcbusirq = 0, .dstapic = 0xFF, .dstirq = 0 },
        { .type = MP_LINTSRC, .irqtype = MP_IRQ_NMI, .srcbus = 0,
          .srcbusirq = 0, .dstapic = 0xFF, .dstirq = 1 },
    };
    memcpy(p, lint, sizeof(lint));
    p += sizeof(lint);
    count += 2;

    struct mpc_table h = {
        .length = (uint16_t)(p - base), .spec = 4,
        .oemcount = count, .lapic = (uint32_t)BOOT_LAPIC_ADDR,
    };
    memcpy(h.signature, "PCMP", 4);
    memcpy(h.oem, "MOAT    ", 8);
    memcpy(h.productid, "MOAT VM     ", 12);
    memcpy(base, &h, sizeof(h));
    base[offsetof(struct mpc_table, checksum)] = (uint8_t)-sum8(base, size);

    struct mpf_intel f = {
        .physptr = (uint32_t)BOOT_MP_CONFIG, .length = 1, .specification = 4,
    };
    memcpy(f.signature, "_MP_", 4);
    f.checksum = (uint8_t)-sum8(&f, sizeof(f));
    memcpy(fp, &f, sizeof(f));
    return 0;
}
