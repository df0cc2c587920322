#include "vmm/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

/* The one process-wide setting: verbosity of stderr logging. It holds no VM
 * or device state. */
static int log_level = LOG_WARN;

void moat_log_set_level(int level) { log_level = level; }

void moat_log(int level, const char *fmt, ...)
{
    if (level > log_level)
        return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fprintf(stderr, "moat: %s\n", buf);
}

int ratelimit_ok(struct ratelimit *rl)
{
    if (atomic_exchange(&rl->busy, 1)) {
        atomic_fetch_add(&rl->contended, 1);
        return 0;
    }
    int ok = 0;
    rl->suppressed += atomic_exchange(&rl->contended, 0);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    if (rl->burst_left > 0) {
        rl->burst_left--;
        rl->last_ns = now;
        ok = 1;
    } else if (now - rl->last_ns >= 5000000000ull) {
        if (rl->suppressed)
            moat_log(LOG_WARN, "(%u similar messages suppressed)", rl->suppressed);
        rl->suppressed = 0;
        rl->last_ns = now;
        ok = 1;
    } else {
        rl->suppressed++;
    }
    atomic_store(&rl->busy, 0);
    return ok;
}
