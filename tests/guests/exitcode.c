/* exitcode: exits with EXITCODE_STATUS (expect.h). */
#include "rt.h"

int guest_main(uint64_t cpu, uint64_t ncpus, uint64_t mem)
{
    (void)ncpus;
    (void)mem;
    if (cpu != 0)
        park();
    return EXITCODE_STATUS;
}
