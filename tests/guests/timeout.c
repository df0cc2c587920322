/* timeout: prints TIMEOUT_TEXT then spins forever (interrupts off); only
 * moat's --timeout ends it. */
#include "rt.h"

int guest_main(uint64_t cpu, uint64_t ncpus, uint64_t mem)
{
    (void)ncpus;
    (void)mem;
    if (cpu == 0)
        serial_puts(TIMEOUT_TEXT);
    park();
}
