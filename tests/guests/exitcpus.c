/* exitcpus: vCPU 0 exits with EXITCPUS_BASE + the vCPU count from RSI
 * (checks --cpus reaches the guest); other vCPUs spin. */
#include "rt.h"

int guest_main(uint64_t cpu, uint64_t ncpus, uint64_t mem)
{
    (void)mem;
    if (cpu != 0)
        park();
    return (int)(EXITCPUS_BASE + (ncpus & 0x7F));
}
