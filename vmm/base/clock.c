/* Monotonic time helpers (vmm/base/clock.h). */
#include <limits.h>

#include "vmm/base/clock.h"

uint64_t clock_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int64_t clock_mono_us(void)
{
    return (int64_t)(clock_mono_ns() / 1000u);
}

int64_t clock_mono_ms(void)
{
    return (int64_t)(clock_mono_ns() / 1000000u);
}

int clock_ms_left(int64_t deadline)
{
    if (deadline < 0)
        return -1;
    int64_t l = deadline - clock_mono_ms();
    return l <= 0 ? 0 : l > INT_MAX ? INT_MAX : (int)l;
}

struct timespec clock_mono_after_ms(uint64_t ms)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += (time_t)(ms / 1000);
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

int cond_init_mono(pthread_cond_t *c)
{
    pthread_condattr_t ca;
    int e = pthread_condattr_init(&ca);
    if (e)
        return -e;
    e = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (!e)
        e = pthread_cond_init(c, &ca);
    pthread_condattr_destroy(&ca);
    return -e;
}
