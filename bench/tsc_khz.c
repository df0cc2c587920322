/* tsc_khz: print the host's TSC rate in kHz, measured against
 * CLOCK_MONOTONIC_RAW over about 200 ms (the best of 3 tries: the one with
 * the shortest bracketing of the clock reads).
 *
 * bench/net.sh passes it to its QEMU TCG guests as tsc_early_khz=: under
 * TCG the guest's TSC is the host's, and the guest's own calibration
 * against the emulated PIT fails when the host is busy ("tsc: Unable to
 * calibrate against PIT"), which leaves the guest on the jiffies clock
 * (4 ms steps) and makes every ping time 0 or 4 ms. x86-64 only. */
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#if defined(__x86_64__)
#include <x86intrin.h>

static uint64_t ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC_RAW, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* One measurement: TSC ticks and nanoseconds over ~200 ms, each end read
 * between two clock reads; *slop is how long those brackets took. */
static void measure(double *khz, uint64_t *slop)
{
    struct timespec d = { 0, 200 * 1000 * 1000 };
    uint64_t a0 = ns(), t0 = __rdtsc(), a1 = ns();
    nanosleep(&d, NULL);
    uint64_t b0 = ns(), t1 = __rdtsc(), b1 = ns();
    double el = ((double)(b0 + b1) - (double)(a0 + a1)) / 2.0;
    *khz = (double)(t1 - t0) / el * 1e6;
    *slop = (a1 - a0) + (b1 - b0);
}

int main(void)
{
    double best = 0;
    uint64_t best_slop = UINT64_MAX;
    for (int i = 0; i < 3; i++) {
        double k;
        uint64_t s;
        measure(&k, &s);
        if (s < best_slop) {
            best_slop = s;
            best = k;
        }
    }
    if (best < 1000) {
        fprintf(stderr, "tsc_khz: implausible TSC rate %.0f kHz\n", best);
        return 1;
    }
    printf("%.0f\n", best);
    return 0;
}
#else
int main(void)
{
    fprintf(stderr, "tsc_khz: x86-64 only\n");
    return 1;
}
#endif
