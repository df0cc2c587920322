/* triplefault: loads an IDT with limit 0 and executes ud2. #UD cannot be
 * delivered, nor can the #DF or the #GP: triple fault, shutdown. No status
 * is written, so moat must exit 126. */
#include "rt.h"

int guest_main(uint64_t cpu, uint64_t ncpus, uint64_t mem)
{
    (void)ncpus;
    (void)mem;
    if (cpu != 0)
        park();
    serial_puts(TRIPLEFAULT_TEXT);
    struct __attribute__((packed)) { uint16_t limit; uint64_t base; } idtr = { 0, 0 };
    __asm__ volatile("lidt %0" :: "m"(idtr));
    __asm__ volatile("ud2");
    serial_puts(TRIPLEFAULT_AFTER "\n");
    return 99;
}
