/* Guest RAM to a memory file: which pages to look at, and the write.
 * Contracts in snapmem.h; the why in docs/snapshot-format.md ("Writing").
 *
 * Which pages: a page of an anonymous mapping that the guest (or moat)
 * never touched does not exist: /proc/self/pagemap says so (neither
 * present nor swapped) without faulting it in, ~0.3 ms for 256 MiB. A
 * restored VM's RAM is a MAP_PRIVATE mapping of snapshot files: a page it
 * never touched reads from the file, so those files' data ranges
 * (SEEK_DATA) are added. Only those pages are read (zero detection). */
#include "vmm/snapshot/snapmem.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "vmm/base/log.h"
#include "vmm/core/vm.h"
#include "vmm/snapshot/snapchain.h"
#include "vmm/snapshot/snapdiff.h"

#define PAGE 4096ull
#define RUN_MAX_PAGES 256u   /* one write request: at most 1 MiB */
#define QUEUE_DEPTH 32u      /* write requests in flight */

void snapmem_bits_set(uint64_t *bm, uint64_t first, uint64_t n)
{
    uint64_t i = first, end = first + n;
    while (i < end && (i % 64))
        bm[i / 64] |= 1ull << (i % 64), i++;
    while (i + 64 <= end)
        bm[i / 64] = ~0ull, i += 64;
    while (i < end)
        bm[i / 64] |= 1ull << (i % 64), i++;
}

void snapmem_pagemap_mark(const uint64_t *pm, uint64_t n, uint64_t *bm, uint64_t first)
{
    for (uint64_t i = 0; i < n; i++)
        if (pm[i] & (SNAPMEM_PM_PRESENT | SNAPMEM_PM_SWAPPED))
            bm[(first + i) / 64] |= 1ull << ((first + i) % 64);
}

int snapmem_resident(const uint8_t *base, uint64_t npages, uint64_t *bm)
{
    if ((uintptr_t)base % PAGE)
        return -EINVAL;
    int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    enum { CHUNK = 8192 };   /* entries per read: 64 KiB */
    uint64_t *pm = malloc(CHUNK * sizeof(uint64_t));
    if (!pm) {
        close(fd);
        return -ENOMEM;
    }
    int r = 0;
    uint64_t first = (uint64_t)(uintptr_t)base / PAGE;
    for (uint64_t at = 0; at < npages;) {
        uint64_t n = npages - at < CHUNK ? npages - at : CHUNK;
        ssize_t got = pread(fd, pm, n * sizeof(uint64_t), (off_t)((first + at) * sizeof(uint64_t)));
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0 || got % (ssize_t)sizeof(uint64_t)) {
            r = got < 0 ? -errno : -EIO;
            break;
        }
        uint64_t k = (uint64_t)got / sizeof(uint64_t);
        snapmem_pagemap_mark(pm, k, bm, at);
        at += k;
    }
    free(pm);
    close(fd);
    return r;
}

int snapmem_file_data(int fd, uint64_t npages, uint64_t *bm)
{
    off_t end = (off_t)(npages * PAGE), at = 0;
    while (at < end) {
        off_t d = lseek(fd, at, SEEK_DATA);
        if (d < 0) {
            if (errno == ENXIO)
                return 0;           /* no data past at */
            if (errno == EINVAL) {  /* no SEEK_DATA here: assume data */
                snapmem_bits_set(bm, (uint64_t)at / PAGE, npages - (uint64_t)at / PAGE);
                return 0;
            }
            return -errno;
        }
        if (d >= end)
            return 0;
        off_t h = lseek(fd, d, SEEK_HOLE);
        if (h < 0)
            return -errno;
        if (h > end)
            h = end;
        uint64_t p0 = (uint64_t)d / PAGE, p1 = ((uint64_t)h + PAGE - 1) / PAGE;
        snapmem_bits_set(bm, p0, p1 - p0);
        at = h;
    }
    return 0;
}

int snapmem_open(struct snapmem_file *f, const char *path, uint64_t npages, bool direct_ok)
{
    memset(f, 0, sizeof(*f));
    f->npages = npages;
    f->fd = -1;
    if (direct_ok) {
        f->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0600);
        if (f->fd < 0 && errno != EINVAL && errno != EOPNOTSUPP)
            return -errno;
        /* else a file system without O_DIRECT (tmpfs before 6.6, ...) */
        f->direct = f->fd >= 0;
    }
    if (f->fd < 0 && (f->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0)
        return -errno;
    if (ftruncate(f->fd, (off_t)(npages * PAGE)) < 0) {
        int e = errno;
        close(f->fd);
        f->fd = -1;
        return -e;
    }
#if MOAT_HAVE_URING
    /* No io_uring (seccomp, an old kernel): pwrite and fsync instead. */
    f->ring_ok = io_uring_queue_init(QUEUE_DEPTH, &f->ring, 0) == 0;
#endif
    return 0;
}

void snapmem_close(struct snapmem_file *f)
{
#if MOAT_HAVE_URING
    if (f->ring_ok)
        io_uring_queue_exit(&f->ring);
    f->ring_ok = false;
#endif
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
}

/* ---- the write: a stream of requests (runs of non-zero pages) ---- */

struct run_iter {
    const uint8_t *ram;
    uint64_t npages;
    const uint64_t *sel;
    uint64_t at;           /* next page to look at */
    struct snapmem_stats *st;
};

static bool sel_bit(const uint64_t *sel, uint64_t i)
{
    return (sel[i / 64] >> (i % 64)) & 1;
}

/* The next run of selected non-zero pages (at most RUN_MAX_PAGES): false
 * when there is none. */
static bool next_run(struct run_iter *it, uint64_t *first, uint64_t *n)
{
    while (it->at < it->npages) {
        uint64_t i = it->at;
        uint64_t w = it->sel[i / 64] >> (i % 64);
        if (!w) {                       /* skip the rest of the word */
            it->at = (i / 64 + 1) * 64;
            continue;
        }
        i += (uint64_t)__builtin_ctzll(w);
        if (i >= it->npages)
            break;
        it->at = i + 1;
        it->st->candidate_pages++;
        if (snap_page_is_zero(it->ram + i * PAGE))
            continue;
        uint64_t j = i + 1;
        bool hole = false;
        while (j < it->npages && j - i < RUN_MAX_PAGES && sel_bit(it->sel, j)) {
            it->st->candidate_pages++;
            if (snap_page_is_zero(it->ram + j * PAGE)) {
                hole = true;            /* j was looked at: a hole */
                break;
            }
            j++;
        }
        it->at = hole ? j + 1 : j;
        *first = i;
        *n = j - i;
        it->st->data_pages += *n;
        it->st->requests++;
        return true;
    }
    it->at = it->npages;
    return false;
}

static int write_pwrite(int fd, struct run_iter *it)
{
    uint64_t first, n;
    while (next_run(it, &first, &n)) {
        int r = snap_pwrite_all(fd, it->ram + first * PAGE, (size_t)(n * PAGE), (off_t)(first * PAGE));
        if (r < 0)
            return r;
    }
    return 0;
}

#if MOAT_HAVE_URING
struct req {
    uint64_t first, n;
};

/* One completion (waiting for it if none is there): its slot goes back
 * to *free_slot. A short write (rare; O_DIRECT near a full file system) is
 * finished with pwrite: nothing lost, only slower. */
static int reap(struct io_uring *ring, const struct req *reqs, int fd, const uint8_t *ram,
                unsigned *free_slot, unsigned *nfree)
{
    struct io_uring_cqe *cqe;
    int r;
    while ((r = io_uring_wait_cqe(ring, &cqe)) == -EINTR)
        ;
    if (r < 0)
        return r;
    unsigned slot = (unsigned)io_uring_cqe_get_data64(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(ring, cqe);
    free_slot[(*nfree)++] = slot;
    if (res < 0)
        return res;
    const struct req *q = &reqs[slot];
    uint64_t len = q->n * PAGE;
    if ((uint64_t)res < len) {
        uint64_t done = (uint64_t)res;
        return snap_pwrite_all(fd, ram + q->first * PAGE + done, (size_t)(len - done),
                               (off_t)(q->first * PAGE + done));
    }
    return 0;
}

static int write_uring(struct io_uring *ring, int fd, struct run_iter *it)
{
    it->st->uring = true;
    struct req reqs[QUEUE_DEPTH];
    unsigned free_slot[QUEUE_DEPTH], nfree = QUEUE_DEPTH;
    for (unsigned i = 0; i < QUEUE_DEPTH; i++)
        free_slot[i] = i;
    int r = 0;
    unsigned inflight = 0;
    bool more = true;
    while (more || inflight) {
        /* Fill the free slots, submit them together, take a completion. */
        unsigned queued = 0;
        uint64_t first, n;
        while (r == 0 && more && nfree && (more = next_run(it, &first, &n))) {
            struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
            if (!sqe) {         /* cannot happen: one ring entry per slot */
                r = -EBUSY;
                break;
            }
            unsigned s = free_slot[--nfree];
            reqs[s] = (struct req){ first, n };
            io_uring_prep_write(sqe, fd, it->ram + first * PAGE, (unsigned)(n * PAGE), first * PAGE);
            io_uring_sqe_set_data64(sqe, s);
            queued++;
        }
        if (queued) {
            int s = io_uring_submit(ring);
            inflight += s > 0 ? (unsigned)s : 0;
            if (s < (int)queued && r == 0)
                r = s < 0 ? s : -EIO;   /* some were not submitted: failed */
        }
        if (r < 0)
            more = false;       /* stop queueing; drain what is in flight */
        if (inflight) {
            inflight--;
            int rr = reap(ring, reqs, fd, it->ram, free_slot, &nfree);
            if (rr < 0 && r == 0)
                r = rr;
            if (rr < 0)
                more = false;
        }
    }
    return r;
}
#endif

int snapmem_write(struct snapmem_file *f, const uint8_t *ram, const uint64_t *sel, struct snapmem_stats *st)
{
    struct snapmem_stats local;
    if (!st)
        st = &local;
    memset(st, 0, sizeof(*st));
    st->direct = f->direct;
    if ((uintptr_t)ram % PAGE)
        return -EINVAL;
    struct run_iter it = { ram, f->npages, sel, 0, st };
#if MOAT_HAVE_URING
    if (f->ring_ok)
        return write_uring(&f->ring, f->fd, &it);
#endif
    return write_pwrite(f->fd, &it);
}

int snapmem_sync(struct snapmem_file *f, int other_fd)
{
    int fds[2] = { f->fd, other_fd };
    unsigned n = other_fd >= 0 ? 2 : 1;
#if MOAT_HAVE_URING
    if (f->ring_ok) {
        int r = 0;
        for (unsigned i = 0; i < n; i++) {
            struct io_uring_sqe *sqe = io_uring_get_sqe(&f->ring);
            if (!sqe)
                return -EBUSY;  /* cannot happen: the ring is idle */
            io_uring_prep_fsync(sqe, fds[i], 0);
        }
        int s = io_uring_submit(&f->ring);
        if (s < (int)n)
            return s < 0 ? s : -EIO;
        for (unsigned got = 0; got < n; got++) {
            struct io_uring_cqe *cqe;
            int w;
            while ((w = io_uring_wait_cqe(&f->ring, &cqe)) == -EINTR)
                ;
            if (w < 0)
                return w;
            if (cqe->res < 0 && !r)
                r = cqe->res;
            io_uring_cqe_seen(&f->ring, cqe);
        }
        return r;
    }
#endif
    for (unsigned i = 0; i < n; i++)
        if (fsync(fds[i]) < 0)
            return -errno;
    return 0;
}

/* ---- the VM side ---- */

int snapmem_note_backing(struct moat_vm *vm, int fd)
{
    if (vm->nbacking >= VM_MAX_BACKING)
        return -E2BIG;
    int d = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (d < 0)
        return -errno;
    vm->backing_fd[vm->nbacking++] = d;
    return 0;
}

void snapmem_free(struct moat_vm *vm)
{
    for (unsigned i = 0; i < vm->nbacking; i++)
        close(vm->backing_fd[i]);
    vm->nbacking = 0;
    free(vm->backing_data);
    vm->backing_data = NULL;
}

int snapmem_candidates(struct moat_vm *vm, uint64_t **out)
{
    *out = NULL;
    uint64_t npages = vm->ram_size / PAGE, words = snap_bitmap_words(vm->ram_size);
    uint64_t *bm = calloc(words ? words : 1, sizeof(uint64_t));
    if (!bm)
        return -ENOMEM;
    /* RAM served by a page-fault handler (uffd.h): the pages the guest has
     * not touched are in the handler's file, not here, and reading them is
     * what brings them in. Every page, then. */
    if (vm->uffd >= 0) {
        snapmem_bits_set(bm, 0, npages);
        *out = bm;
        return 0;
    }
    /* The files under a restored VM's RAM: their data ranges, once (the
     * files do not change under a mapping). */
    if (vm->nbacking && !vm->backing_data) {
        uint64_t *fd_bm = calloc(words ? words : 1, sizeof(uint64_t));
        if (!fd_bm) {
            free(bm);
            return -ENOMEM;
        }
        for (unsigned i = 0; i < vm->nbacking; i++) {
            int r = snapmem_file_data(vm->backing_fd[i], npages, fd_bm);
            if (r < 0) {
                log_debug("snapshot: data ranges of a memory file: %s: reading every page", strerror(-r));
                snapmem_bits_set(fd_bm, 0, npages);
                break;
            }
        }
        vm->backing_data = fd_bm;
    }
    if (vm->backing_data)
        memcpy(bm, vm->backing_data, words * sizeof(uint64_t));
    int r = snapmem_resident(vm->ram, npages, bm);
    if (r < 0) {
        log_debug("snapshot: /proc/self/pagemap: %s: reading every page", strerror(-r));
        snapmem_bits_set(bm, 0, npages);
    }
    *out = bm;
    return 0;
}
