/* faultafter: writes FAULTAFTER_STATUS to the status port, then triple
 * faults (IDT limit 0, ud2). A reported status wins over the crash, so moat
 * must exit FAULTAFTER_STATUS, not 126. */
#include "rt.h"

int guest_main(uint64_t cpu, uint64_t ncpus, uint64_t mem)
{
    (void)ncpus;
    (void)mem;
    if (cpu != 0)
        park();
    outb(MOAT_STATUS, FAULTAFTER_STATUS);
    struct __attribute__((packed)) { uint16_t limit; uint64_t base; } idtr = { 0, 0 };
    __asm__ volatile("lidt %0; ud2" :: "m"(idtr));
    return 99;
}
