/* Guest RAM in a file from the start, or anonymous (issue 14, item 3):
 * what each costs the running guest and what a stop then has to write.
 * A host program, no VM: it does to a MIB-sized mapping what a guest's
 * writes do to its RAM (the first write to a page faults it in; a write to
 * a page the kernel has written back faults again to make it writable),
 * so it shows the memory-management cost of each choice, not the guest's
 * own work. Per backing, median of RUNS:
 *   anon   MAP_PRIVATE|MAP_ANONYMOUS (moat today); stop = moat's snapshot
 *          writer (pagemap, io_uring, O_DIRECT where possible, fsync)
 *   file   MAP_SHARED of a file in DIR; stop = fdatasync (write back the
 *          dirty pages); then every page rewritten once more after the
 *          write-back (they were made read-only again: a fault each)
 *   memfd  MAP_SHARED of a memfd: no stop write, but the memory is gone
 *          with the process (or must stay held, in RAM, while "stopped")
 * Usage: ram-backing [MIB (64)] [DIR ($TMPDIR or /tmp)] [RUNS (5)] */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "vmm/snapshot/snapchain.h"
#include "vmm/snapshot/snapmem.h"

#define PG 4096ul

static double ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

static void touch(uint8_t *m, size_t len, uint8_t v)
{
    for (size_t i = 0; i < len; i += PG)
        ((volatile uint8_t *)m)[i] = v;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

enum { ANON, FILE_, MEMFD, NKIND };
static const char *const names[NKIND] = { "anon", "file", "memfd" };

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 64;
    const char *dir = argc > 2 ? argv[2] : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    int runs = argc > 3 ? atoi(argv[3]) : 5;
    if (!mib || runs < 1 || runs > 100) {
        fprintf(stderr, "usage: ram-backing [MIB] [DIR] [RUNS (1..100)]\n");
        return 2;
    }
    size_t len = mib << 20;
    double first[NKIND][100], again[NKIND][100], stop[NKIND][100], after[NKIND][100];
    char path[4096], mpath[4096];
    snprintf(path, sizeof(path), "%s/ram-backing.%d", dir, (int)getpid());
    snprintf(mpath, sizeof(mpath), "%s/ram-backing-mem.%d", dir, (int)getpid());
    for (int r = 0; r < runs; r++) {
        for (int k = 0; k < NKIND; k++) {
            int fd = -1;
            if (k == FILE_) {
                fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
                if (fd < 0 || ftruncate(fd, (off_t)len) < 0) {
                    perror(path);
                    return 1;
                }
            } else if (k == MEMFD) {
                fd = memfd_create("ram", MFD_CLOEXEC);
                if (fd < 0 || ftruncate(fd, (off_t)len) < 0) {
                    perror("memfd");
                    return 1;
                }
            }
            uint8_t *m = fd < 0 ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                                : mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (m == MAP_FAILED) {
                perror("mmap");
                return 1;
            }
            struct timespec t0;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            touch(m, len, 1);
            first[k][r] = ms_since(&t0);
            clock_gettime(CLOCK_MONOTONIC, &t0);
            touch(m, len, 2);
            again[k][r] = ms_since(&t0);
            clock_gettime(CLOCK_MONOTONIC, &t0);
            if (k == ANON) {
                uint64_t words = snap_bitmap_words(len);
                uint64_t *sel = calloc(words, 8);
                struct snapmem_file f;
                struct snapmem_ring *ring = NULL;
                snapmem_ring_new(&ring);        /* none: pwrite, as moat would */
                if (!sel || snapmem_resident(m, len / PG, sel) < 0 || snapmem_open(&f, mpath, len / PG, true, ring) < 0 ||
                    snapmem_write(&f, m, sel, NULL) < 0 || snapmem_sync(&f, -1) < 0) {
                    fprintf(stderr, "anon: writing %s failed\n", mpath);
                    return 1;
                }
                snapmem_close(&f);
                snapmem_ring_free(ring);
                free(sel);
            } else if (k == FILE_) {
                if (fdatasync(fd) < 0) {
                    perror("fdatasync");
                    return 1;
                }
            }
            stop[k][r] = ms_since(&t0);
            clock_gettime(CLOCK_MONOTONIC, &t0);
            touch(m, len, 3);
            after[k][r] = ms_since(&t0);
            munmap(m, len);
            if (fd >= 0)
                close(fd);
            unlink(path);
            unlink(mpath);
        }
    }
    printf("RAM backing, %zu MiB written page by page, files in %s, median of %d runs (ms):\n", mib, dir, runs);
    printf("%-6s %12s %12s %12s %16s\n", "", "first write", "rewrite", "stop write", "rewrite after");
    for (int k = 0; k < NKIND; k++)
        printf("%-6s %12.2f %12.2f %12.2f %16.2f\n", names[k], median(first[k], runs), median(again[k], runs),
               median(stop[k], runs), median(after[k], runs));
    return 0;
}
