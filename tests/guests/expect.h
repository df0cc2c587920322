/* What each test guest promises; shared by the guests and by
 * tests/integration/test_integration.c so the two cannot drift apart.
 * Plain C constants only: included from freestanding and hosted code. */
#ifndef MOAT_GUEST_EXPECT_H
#define MOAT_GUEST_EXPECT_H

/* serial: prints exactly this and exits 0. */
#define SERIAL_TEXT \
    "moat serial test\n" \
    "line 2: the quick brown fox jumps over the lazy dog\n" \
    "line 3: 0123456789 !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~\n" \
    "end of serial test\n"

/* exitcode: exits with this status. */
#define EXITCODE_STATUS   42
/* exitcpus: vCPU 0 exits with EXITCPUS_BASE + number of vCPUs. */
#define EXITCPUS_BASE     100
/* hostile: prints HOSTILE_TEXT after its abuse and exits with this. */
#define HOSTILE_STATUS    7
#define HOSTILE_TEXT      "survived\n"
/* ports: the status it writes (16-bit) before overwriting it; if moat
 * exits with this, "last write wins" is broken. */
#define PORTS_STALE_STATUS 200
/* triplefault / noreport: text printed before the crash / bare reset. */
#define TRIPLEFAULT_TEXT  "triplefault: faulting now\n"
#define TRIPLEFAULT_AFTER "triplefault: NOT REACHED"
/* faultafter: reports this status, then triple faults. */
#define FAULTAFTER_STATUS 43
#define NOREPORT_TEXT     "noreport: resetting without a status\n"
/* memsize: prints "mem 0x<RAM bytes in lowercase hex>\n". */
#define MEMSIZE_PREFIX    "mem 0x"
/* smp: each vCPU prints "cpu N of M\n". */
#define SMP_FMT           "cpu %u of %u\n"
/* timeout: prints this, then spins forever. */
#define TIMEOUT_TEXT      "timeout: spinning\n"

/* Exit status moat uses for a crashed guest, an expired --timeout and a
 * usage error (docs/testing.md). */
#define CLI_EXIT_USAGE   2
#define CLI_EXIT_TIMEOUT 124
#define CLI_EXIT_VMM     125
#define CLI_EXIT_CRASH   126

#endif
