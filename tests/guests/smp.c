/* smp: every vCPU prints "cpu N of M" and increments a shared counter;
 * vCPU 0 waits (bounded) for all of them: exit 0 if the counter reached M,
 * 1 if not, 2 if a vCPU saw an index >= M or a different M than vCPU 0. */
#include "rt.h"

static volatile uint64_t arrived;
static volatile uint64_t bad;

int guest_main(uint64_t cpu, uint64_t ncpus, uint64_t mem)
{
    char line[64], *p = line;
    (void)mem;
    p = fmt_str(p, "cpu ");
    p = fmt_dec(p, cpu);
    p = fmt_str(p, " of ");
    p = fmt_dec(p, ncpus);
    fmt_str(p, "\n");
    serial_puts(line);
    if (cpu >= ncpus || ncpus > MAX_CPUS)
        __atomic_fetch_add(&bad, 1, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&arrived, 1, __ATOMIC_SEQ_CST);
    if (cpu != 0)
        park();
    /* ~10 s at 1-3 GHz TSC; hardware KVM needs microseconds. */
    uint64_t n = wait_at_least(&arrived, ncpus, 20000000000ull);
    if (__atomic_load_n(&bad, __ATOMIC_SEQ_CST))
        return 2;
    serial_puts(n == ncpus ? "smp: all arrived\n" : "smp: FAILED, missing vCPUs\n");
    return n == ncpus ? 0 : 1;
}
