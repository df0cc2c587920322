/* Monotonic time for the VM's waits and timings: one helper each instead
 * of a copy per file. Part of the base (devices/ may use it). */
#ifndef MOAT_CLOCK_H
#define MOAT_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC, nanoseconds. */
uint64_t clock_mono_ns(void);
/* The same clock in microseconds and milliseconds (rounded down), signed:
 * deadlines are compared by subtracting. */
int64_t clock_mono_us(void);
int64_t clock_mono_ms(void);
/* The milliseconds left until deadline (a clock_mono_ms time), at most
 * INT_MAX, for poll(2): 0 once it has passed, -1 for deadline < 0 (none). */
int clock_ms_left(int64_t deadline);
/* CLOCK_MONOTONIC now plus ms, normalized (tv_nsec < 1e9): a deadline for
 * a condition variable made by cond_init_mono or pthread_clockjoin_np. */
struct timespec clock_mono_after_ms(uint64_t ms);
/* A condition variable whose timed waits count CLOCK_MONOTONIC (a wall
 * clock change neither shortens nor stretches them): 0 or -errno. */
int cond_init_mono(pthread_cond_t *c);

#endif
