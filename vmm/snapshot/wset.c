/* Working-set record and prefetch (vmm/snapshot/wset.h). */
#include <errno.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vmm/base/clock.h"
#include "vmm/base/fullio.h"
#include "vmm/base/log.h"
#include "vmm/core/vm.h"
#include "vmm/snapshot/snapvm.h"
#include "vmm/snapshot/wset.h"
#include "vmm/snapshot/wsfile.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22   /* Linux 5.14 */
#endif

#define WS_FILE_MAX (WS_HEADER_SIZE + WS_MAX_RANGES * sizeof(struct ws_range))
#define PM_CHUNK 4096u          /* pagemap entries read at a time */
#define POPULATE_CHUNK (2u << 20)   /* bytes per madvise: a quit is seen this often */

enum { WS_NONE, WS_RECORD, WS_PREFETCH };

struct wset {
    struct moat_vm *vm;
    int mode;
    char *path;                 /* MEMORY.ws */
    uint64_t state_sum;
    struct ws_range *ranges;    /* prefetch: the parsed list */
    size_t nranges;
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool quit, done;
    uint32_t record_ms;
    struct wset_stats st;
};

/* ---- record ---- */

/* The pages of guest RAM with a host page table entry (present or swapped)
 * into ranges: what the guest (and moat's devices) touched since the
 * restore, plus the kernel's fault-around neighbours. */
static long touched_ranges(struct moat_vm *vm, struct ws_range **out)
{
    int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t npages = vm->ram_size / WS_PAGE, cap = 1024, n = 0;
    uint64_t *pm = malloc(PM_CHUNK * sizeof(*pm));
    uint8_t *present = malloc(PM_CHUNK);
    struct ws_range *r = malloc(cap * sizeof(*r));
    long ret = 0;
    if (!pm || !present || !r) {
        ret = -ENOMEM;
        goto out;
    }
    uint64_t vpn0 = (uintptr_t)vm->ram / WS_PAGE;
    for (size_t i = 0; i < npages; i += PM_CHUNK) {
        size_t k = npages - i < PM_CHUNK ? npages - i : PM_CHUNK;
        ssize_t got = pread(fd, pm, k * sizeof(*pm), (off_t)((vpn0 + i) * sizeof(*pm)));
        if (got != (ssize_t)(k * sizeof(*pm))) {
            ret = got < 0 ? -errno : -EIO;
            goto out;
        }
        for (size_t j = 0; j < k; j++)
            present[j] = (pm[j] >> 62) != 0;     /* bit 63 present, 62 swapped */
        long m;
        while ((m = ws_runs_append(present, k, i, r, n, cap)) == -E2BIG) {
            if (cap >= WS_MAX_RANGES)
                break;
            struct ws_range *nr = realloc(r, 2 * cap * sizeof(*r));
            if (!nr) {
                ret = -ENOMEM;
                goto out;
            }
            r = nr;
            cap *= 2;
        }
        if (m < 0) {            /* more runs than a file holds: keep the first ones */
            log_debug("working set: more than %u runs, the rest not recorded", WS_MAX_RANGES);
            break;
        }
        n = (size_t)m;
    }
    *out = r;
    r = NULL;
    ret = (long)n;
out:
    close(fd);
    free(pm);
    free(present);
    free(r);
    return ret;
}

/* Write the file through a temporary name of this VM's (forks of one
 * snapshot may record at once; the last rename wins, each file whole). */
static int write_file(const char *path, const uint8_t *buf, size_t len, const void *who)
{
    char tmp[4200];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.%d.%lx.tmp", path, (int)getpid(), (unsigned long)(uintptr_t)who) >=
        sizeof tmp)
        return -ENAMETOOLONG;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    ssize_t w = write_full(fd, buf, len);
    int r = w < 0 ? (int)w : 0;
    /* No fsync: a file torn by a crash fails its checksum and is recorded anew. */
    if (close(fd) < 0 && r == 0)
        r = -errno;
    if (r == 0 && syscall(SYS_renameat2, AT_FDCWD, tmp, AT_FDCWD, path, 0) < 0)
        r = -errno;
    if (r < 0)
        unlink(tmp);
    return r;
}

/* Under w->lock. */
static void record_locked(struct wset *w)
{
    if (w->done)
        return;
    w->done = true;
    if (!atomic_load(&w->vm->t_first_run))
        return;                 /* never ran: nothing to learn, keep what is there */
    uint64_t t0 = clock_mono_ns();
    struct ws_range *r = NULL;
    long n = touched_ranges(w->vm, &r);
    uint8_t *buf = NULL;
    int e = (int)n;
    if (n >= 0) {
        buf = malloc(ws_file_size((size_t)n));
        long len = buf ? ws_encode(buf, ws_file_size((size_t)n), w->state_sum, w->vm->ram_size, r, (size_t)n)
                       : -ENOMEM;
        e = len < 0 ? (int)len : write_file(w->path, buf, (size_t)len, w);
    }
    if (e < 0) {
        log_debug("working set: not recorded to %s: %s", w->path, strerror(-e));
    } else {
        for (long i = 0; i < n; i++)
            w->st.pages += r[i].count;
        w->st.ranges = (uint64_t)n;
        w->st.ns = clock_mono_ns() - t0;
        w->st.done = true;
        log_info("working set: %llu pages in %ld ranges recorded to %s in %.3f ms",
                 (unsigned long long)w->st.pages, n, w->path, (double)w->st.ns / 1e6);
    }
    free(buf);
    free(r);
}

/* ---- prefetch ---- */

static bool quitting(struct wset *w)
{
    pthread_mutex_lock(&w->lock);
    bool q = w->quit;
    pthread_mutex_unlock(&w->lock);
    return q;
}

static void prefetch(struct wset *w)
{
    uint64_t t0 = clock_mono_ns();
    uint8_t *ram = w->vm->ram;
    /* First ask for all of it (asynchronous readahead of the memory file:
     * many reads in flight on a cold page cache), then map it in order. */
    for (size_t i = 0; i < w->nranges; i++)
        madvise(ram + w->ranges[i].first * WS_PAGE, w->ranges[i].count * WS_PAGE, MADV_WILLNEED);
    bool fallback = false;
    uint64_t pages = 0;
    for (size_t i = 0; i < w->nranges && !quitting(w); i++) {
        uint8_t *p = ram + w->ranges[i].first * WS_PAGE, *end = p + w->ranges[i].count * WS_PAGE;
        while (p < end && !quitting(w)) {
            size_t len = (size_t)(end - p) < POPULATE_CHUNK ? (size_t)(end - p) : POPULATE_CHUNK;
            if (!fallback && madvise(p, len, MADV_POPULATE_READ) < 0) {
                if (errno != EINVAL) {
                    log_debug("working set: MADV_POPULATE_READ: %s; prefetch stopped", strerror(errno));
                    goto done;
                }
                fallback = true;    /* before Linux 5.14: read a byte of each page */
            }
            if (fallback)
                for (size_t o = 0; o < len; o += WS_PAGE)
                    (void)*(volatile const uint8_t *)(p + o);
            pages += len / WS_PAGE;
            p += len;
        }
    }
done:
    pthread_mutex_lock(&w->lock);
    w->st.pages = pages;
    w->st.ranges = w->nranges;
    w->st.ns = clock_mono_ns() - t0;
    w->st.populate_fallback = fallback;
    w->st.done = true;
    w->done = true;
    pthread_mutex_unlock(&w->lock);
    log_info("working set: %llu pages prefetched in %.3f ms%s", (unsigned long long)pages,
             (double)(clock_mono_ns() - t0) / 1e6, fallback ? " (page by page: no MADV_POPULATE_READ)" : "");
}

static void *wset_thread(void *arg)
{
    struct wset *w = arg;
    if (w->mode == WS_PREFETCH) {
        prefetch(w);
        return NULL;
    }
    struct timespec deadline = clock_mono_after_ms(w->record_ms);
    pthread_mutex_lock(&w->lock);
    while (!w->quit && !w->done)
        if (pthread_cond_timedwait(&w->cond, &w->lock, &deadline) == ETIMEDOUT) {
            record_locked(w);
            break;
        }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

/* MEMORY.ws, read whole (bounded) and checked. 0 with the ranges, -ENOENT
 * when absent, another -errno (logged) when unusable. */
static int load(struct wset *w)
{
    int fd = open(w->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > WS_FILE_MAX) {
        close(fd);
        log_warn("working set %s: not a regular file or larger than %zu bytes; recorded anew", w->path,
                 (size_t)WS_FILE_MAX);
        return -EINVAL;
    }
    size_t len = (size_t)st.st_size;
    uint8_t *buf = malloc(len ? len : 1);
    ssize_t got = buf ? read_full(fd, buf, len) : 0;
    close(fd);
    if (!buf)
        return -ENOMEM;
    const uint8_t *raw = NULL;
    size_t n = 0;
    const char *why = NULL;
    int r = got == (ssize_t)len ? ws_parse(buf, len, w->state_sum, w->vm->ram_size, &raw, &n, &why) : -EIO;
    if (r == 0) {
        w->ranges = malloc((n ? n : 1) * sizeof(*w->ranges));
        if (!w->ranges)
            r = -ENOMEM;
        for (size_t i = 0; r == 0 && i < n; i++)
            w->ranges[i] = ws_range_at(raw, i);
        w->nranges = n;
    } else if (r == -ESTALE) {
        log_debug("working set %s: %s; recorded anew", w->path, why);
    } else {
        log_warn("working set %s: %s; recorded anew", w->path, why ? why : strerror(-r));
    }
    free(buf);
    return r;
}

int wset_restore_start(struct moat_vm *vm, const char *mem_path, uint64_t state_sum, bool no_prefetch,
                       uint32_t record_ms)
{
    struct snapvm *sv = snapvm_of(vm);
    struct wset *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->vm = vm;
    w->record_ms = record_ms ? record_ms : WSET_RECORD_MS;
    w->state_sum = state_sum;
    size_t pl = strlen(mem_path) + 4;
    w->path = malloc(pl);
    if (!w->path || pthread_mutex_init(&w->lock, NULL) != 0) {
        free(w->path);
        free(w);
        return -ENOMEM;
    }
    if (cond_init_mono(&w->cond) < 0) {
        pthread_mutex_destroy(&w->lock);
        free(w->path);
        free(w);
        return -ENOMEM;
    }
    snprintf(w->path, pl, "%s.ws", mem_path);
    int r = load(w);
    if (r == 0)
        w->mode = no_prefetch ? WS_NONE : WS_PREFETCH;
    else
        w->mode = WS_RECORD;   /* none, stale or unusable: this restore's is the one */
    w->st.mode = w->mode;
    sv->wset = w;
    if (w->mode == WS_NONE)
        return 0;
    r = -pthread_create(&w->thread, NULL, wset_thread, w);
    if (r < 0) {
        log_debug("working set: no helper thread: %s", strerror(-r));
        w->mode = WS_NONE;
        w->st.mode = WS_NONE;
        return r;
    }
    w->thread_started = true;
    return 0;
}

void wset_capture(struct moat_vm *vm)
{
    struct snapvm *sv = snapvm_of(vm);
    struct wset *w = sv->wset;
    if (!w || w->mode != WS_RECORD)
        return;
    pthread_mutex_lock(&w->lock);
    record_locked(w);
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

void wset_free(struct moat_vm *vm)
{
    struct snapvm *sv = snapvm_of(vm);
    struct wset *w = sv->wset;
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->quit = true;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    if (w->thread_started)
        pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->cond);
    free(w->ranges);
    free(w->path);
    free(w);
    sv->wset = NULL;
}

void wset_get_stats(struct moat_vm *vm, struct wset_stats *st)
{
    struct snapvm *sv = snapvm_of(vm);
    struct wset *w = sv->wset;
    memset(st, 0, sizeof(*st));
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    *st = w->st;
    pthread_mutex_unlock(&w->lock);
}
