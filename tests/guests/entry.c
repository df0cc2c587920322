/* entry: every vCPU checks the plain-ELF entry state moat promises, then
 * vCPU 0 waits (bounded) for all of them. Exit 0, or the first failure:
 *   10 RDI >= RSI, or RSI is 0 or above 64
 *   11 RSP at entry != 0x40000 + (index + 1) * 0x1000
 *   12 RFLAGS.IF set at entry
 *   13 CS != 0x10, or DS/ES/SS/FS/GS != 0x18
 *   14 CR0.PE/PG or CR4.PAE clear
 *   15 the page tables at CR3 do not identity-map the first 4 GiB
 *   17 the local APIC ID (xAPIC at 0xFEE00000) differs from RDI
 *   20 not all vCPUs arrived */
#include "rt.h"

static volatile uint64_t arrived;
static volatile uint64_t failure;

/* Walk the 4-level tables for a virtual address; returns the physical
 * address or ~0 if not present. Handles 1 GiB and 2 MiB pages. */
static uint64_t walk(uint64_t cr3, uint64_t va)
{
    const uint64_t addr_mask = 0x000FFFFFFFFFF000ull;
    uint64_t t = cr3 & addr_mask;
    for (int level = 3; level >= 0; level--) {
        unsigned idx = (unsigned)(va >> (12 + 9 * level)) & 511;
        uint64_t e = ((volatile uint64_t *)t)[idx];
        if (!(e & 1))
            return ~0ull;
        if (level == 0 || (level <= 2 && (e & 0x80))) {
            uint64_t page = 1ull << (12 + 9 * level);
            return (e & addr_mask & ~(page - 1)) | (va & (page - 1));
        }
        t = e & addr_mask;
    }
    return ~0ull;
}

static int check(uint64_t cpu, uint64_t ncpus)
{
    if (ncpus == 0 || ncpus > MAX_CPUS || cpu >= ncpus)
        return 10;
    if (rt_entry_rsp[cpu] != ELF_STACKS + (cpu + 1) * ELF_STACK_SZ)
        return 11;
    if (rt_entry_rflags[cpu] & 0x200)
        return 12;
    uint16_t cs, ds, es, ss, fs, gs;
    __asm__ volatile("mov %%cs, %0; mov %%ds, %1; mov %%es, %2; mov %%ss, %3"
                     : "=r"(cs), "=r"(ds), "=r"(es), "=r"(ss));
    __asm__ volatile("mov %%fs, %0; mov %%gs, %1" : "=r"(fs), "=r"(gs));
    if (cs != SEL_CODE64 || ds != SEL_DATA || es != SEL_DATA || ss != SEL_DATA ||
        fs != SEL_DATA || gs != SEL_DATA)
        return 13;
    uint64_t cr0, cr3, cr4;
    __asm__ volatile("mov %%cr0, %0; mov %%cr3, %1; mov %%cr4, %2"
                     : "=r"(cr0), "=r"(cr3), "=r"(cr4));
    if (!(cr0 & 1) || !(cr0 & (1ull << 31)) || !(cr4 & (1ull << 5)))
        return 14;
    if (cpu == 0) {
        for (uint64_t va = 0; va < 0x100000000ull; va += 0x10000000ull + 0x201000ull)
            if (walk(cr3, va) != va)
                return 15;
        if (walk(cr3, 0xFFFFF000ull) != 0xFFFFF000ull)
            return 15;
    }
    if ((mmio_read32(LAPIC_BASE + 0x20) >> 24) != cpu)
        return 17;
    return 0;
}

int guest_main(uint64_t cpu, uint64_t ncpus, uint64_t mem)
{
    (void)mem;
    int rc = check(cpu, ncpus);
    if (rc) {
        uint64_t zero = 0;
        __atomic_compare_exchange_n(&failure, &zero, (uint64_t)rc, 0,
                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
        char line[64];
        fmt_str(fmt_dec(fmt_str(fmt_dec(fmt_str(line, "entry: cpu "), cpu), " FAILED check "),
                        (uint64_t)rc), "\n");
        serial_puts(line);
    }
    __atomic_fetch_add(&arrived, 1, __ATOMIC_SEQ_CST);
    if (cpu != 0)
        park();
    uint64_t n = wait_at_least(&arrived, ncpus, 20000000000ull);
    if (__atomic_load_n(&failure, __ATOMIC_SEQ_CST))
        return (int)failure;
    if (n != ncpus)
        return 20;
    serial_puts("entry: ok\n");
    return 0;
}
