/* serial: reports "init reached" on the event port, prints SERIAL_TEXT
 * (expect.h) and exits 0. Secondary vCPUs stay silent. */
#include "rt.h"

int guest_main(uint64_t cpu, uint64_t ncpus, uint64_t mem)
{
    (void)ncpus;
    (void)mem;
    if (cpu != 0)
        park();
    outb(MOAT_EVENT, MOAT_EV_INIT);
    serial_puts(SERIAL_TEXT);
    return 0;
}
