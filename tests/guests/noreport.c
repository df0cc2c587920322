/* noreport: resets through the i8042 without writing a status: moat must
 * call that a crash (126). */
#include "rt.h"

int guest_main(uint64_t cpu, uint64_t ncpus, uint64_t mem)
{
    (void)ncpus;
    (void)mem;
    if (cpu != 0)
        park();
    serial_puts(NOREPORT_TEXT);
    reset_machine();
}
