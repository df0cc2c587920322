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
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    if (rl->burst_left > 0) {
        rl->burst_left--;
        rl->last_ns = now;
        return 1;
    }
    if (now - rl->last_ns >= 5000000000ull) {
        if (rl->suppressed)
            fprintf(stderr, "moat: (%u similar messages suppressed)\n", rl->suppressed);
        rl->suppressed = 0;
        rl->last_ns = now;
        return 1;
    }
    rl->suppressed++;
    return 0;
}
