#include "vmm/base/log.h"
#include "vmm/base/clock.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "include/moat.h"

_Static_assert((int)LOG_ERR == (int)MOAT_LOG_ERROR && (int)LOG_WARN == (int)MOAT_LOG_WARN &&
               (int)LOG_INFO == (int)MOAT_LOG_INFO && (int)LOG_DEBUG == (int)MOAT_LOG_DEBUG, "log levels");

/* The one process-wide setting: where messages go and how verbose. It holds
 * no VM or device state. The level is read without the lock (a message
 * below it costs one load); the sink under it, so fn and opaque never tear
 * and fn sees one message at a time. */
static _Atomic int log_level = LOG_WARN;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static moat_log_fn log_fn;
static void *log_opaque;

void log_set_level(int level) { atomic_store(&log_level, level); }

void moat_set_log(int level, moat_log_fn fn, void *opaque)
{
    pthread_mutex_lock(&log_lock);
    log_fn = fn;
    log_opaque = opaque;
    atomic_store(&log_level, level);
    pthread_mutex_unlock(&log_lock);
}

void log_msg(int level, const char *fmt, ...)
{
    if (level > atomic_load(&log_level))
        return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&log_lock);
    if (log_fn)
        log_fn(log_opaque, level, buf);
    else
        fprintf(stderr, "moat: %s\n", buf);
    pthread_mutex_unlock(&log_lock);
}

int log_limit_ok(struct log_limit *rl)
{
    if (atomic_exchange(&rl->busy, 1)) {
        atomic_fetch_add(&rl->contended, 1);
        return 0;
    }
    int ok = 0;
    rl->suppressed += atomic_exchange(&rl->contended, 0);
    uint64_t now = clock_mono_ns();
    if (rl->burst_left > 0) {
        rl->burst_left--;
        rl->last_ns = now;
        ok = 1;
    } else if (now - rl->last_ns >= 5000000000ull) {
        if (rl->suppressed)
            log_msg(LOG_WARN, "(%u similar messages suppressed)", rl->suppressed);
        rl->suppressed = 0;
        rl->last_ns = now;
        ok = 1;
    } else {
        rl->suppressed++;
    }
    atomic_store(&rl->busy, 0);
    return ok;
}
