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
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "devices/virtio/uring_restrict.h"
#include "vmm/base/log.h"
#include "vmm/core/vm.h"
#include "vmm/snapshot/snapchain.h"
#include "vmm/snapshot/snapdiff.h"
#include "vmm/snapshot/snapvm.h"

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

/* ---- the VM's ring ---- */

#define SLOT_MEM 0      /* fixed file slots: the memory file */
#define SLOT_OTHER 1    /* the state file (snapmem_sync) */

struct snapmem_ring {
    atomic_bool busy;
#if MOAT_HAVE_URING
    struct io_uring ring;
#endif
};

int snapmem_ring_new(struct snapmem_ring **out)
{
    *out = NULL;
#if MOAT_HAVE_URING
    struct snapmem_ring *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    p.flags = IORING_SETUP_R_DISABLED;
    int e = io_uring_queue_init_params(QUEUE_DEPTH, &r->ring, &p);
    if (e < 0) {
        free(r);
        return e;
    }
    char why[120];
    int none[2] = { -1, -1 };   /* sparse: a snapshot fills them */
    static const uint8_t ops[] = { IORING_OP_WRITE, IORING_OP_FSYNC };
    static const uint8_t reg[] = { IORING_REGISTER_FILES_UPDATE };
    struct uring_rules rules = { .ops = ops, .nops = sizeof ops, .flags_allowed = IOSQE_FIXED_FILE,
                                 .flags_required = IOSQE_FIXED_FILE, .reg_ops = reg, .nreg_ops = sizeof reg };
    if ((e = io_uring_register_files(&r->ring, none, 2)) < 0 ||
        (e = uring_restrict_enable(&r->ring, &rules, why, sizeof why)) < 0) {
        log_debug("snapshot: io_uring: %s", e == -EINVAL || e == -EBADF ? "sparse files" : why);
        io_uring_queue_exit(&r->ring);
        free(r);
        return e;
    }
    *out = r;
    return 0;
#else
    return -ENOSYS;
#endif
}

void snapmem_ring_free(struct snapmem_ring *r)
{
    if (!r)
        return;
#if MOAT_HAVE_URING
    io_uring_queue_exit(&r->ring);
#endif
    free(r);
}

#if MOAT_HAVE_URING
struct io_uring *snapmem_ring_uring(struct snapmem_ring *r)
{
    return &r->ring;
}
#endif

#if MOAT_HAVE_URING
static int ring_slot(struct snapmem_ring *r, unsigned slot, int fd)
{
    int r2 = io_uring_register_files_update(&r->ring, slot, &fd, 1);
    return r2 < 0 ? r2 : r2 == 1 ? 0 : -EIO;
}
#endif

/* Take the ring for f (false: it is another snapshot's, or cannot hold f). */
static bool ring_take(struct snapmem_file *f, struct snapmem_ring *r)
{
#if MOAT_HAVE_URING
    bool no = false;
    if (!r || !atomic_compare_exchange_strong(&r->busy, &no, true))
        return false;
    if (ring_slot(r, SLOT_MEM, f->fd) < 0) {
        atomic_store(&r->busy, false);
        return false;
    }
    f->ring = r;
    return true;
#else
    (void)f;
    (void)r;
    return false;
#endif
}

int snapmem_open(struct snapmem_file *f, const char *path, uint64_t npages, bool direct_ok,
                 struct snapmem_ring *ring)
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
    /* No ring (none given, another snapshot's, an old kernel): pwrite and
     * fsync instead. */
    f->ring_ok = ring_take(f, ring);
    return 0;
}

void snapmem_close(struct snapmem_file *f)
{
#if MOAT_HAVE_URING
    if (f->ring_ok) {
        ring_slot(f->ring, SLOT_MEM, -1);
        ring_slot(f->ring, SLOT_OTHER, -1);
        atomic_store(&f->ring->busy, false);
    }
#endif
    f->ring_ok = false;
    f->ring = NULL;
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

/* ---- the write, with a staging copy ----
 *
 * Each run is either copied into the staging buffer (while there is room)
 * and written from the copy, or written straight from RAM. The copy goes
 * on while earlier runs are being written; once every run is copied and
 * every straight-from-RAM write has completed, RAM is no longer needed
 * (copied() is called: the guest may run on); then the rest is waited for.
 * Runs are staged in order, so the staged ones are a prefix of runs[]. */

struct srun {
    uint64_t first, n;
    const uint8_t *src;     /* the staging copy, or guest RAM */
};

struct wctx {
    struct snapmem_file *f;
    struct srun *runs;
    size_t nruns, cap_runs;
    size_t nstaged;         /* runs[0, nstaged) are staged */
    size_t next_s, next_d;  /* the next to submit: staged, from RAM */
    size_t direct_left;     /* from-RAM runs not yet written */
    unsigned inflight;
};

static int add_run(struct wctx *c, uint64_t first, uint64_t n, const uint8_t *src, bool staged)
{
    if (c->nruns == c->cap_runs) {
        size_t cap = c->cap_runs ? c->cap_runs * 2 : 256;
        struct srun *r = realloc(c->runs, cap * sizeof(*r));
        if (!r)
            return -ENOMEM;
        c->runs = r;
        c->cap_runs = cap;
    }
    c->runs[c->nruns++] = (struct srun){ first, n, src };
    if (staged) {
        c->nstaged++;
        c->next_d = c->nruns;   /* the from-RAM runs come after */
    } else {
        c->direct_left++;
    }
    return 0;
}

/* The rest of a run a short write left (rare; O_DIRECT near a full file
 * system): with pwrite, nothing lost, only slower. */
static int finish_run(int fd, const struct srun *q, uint64_t done)
{
    uint64_t len = q->n * PAGE;
    if (done >= len)
        return 0;
    return snap_pwrite_all(fd, q->src + done, (size_t)(len - done), (off_t)(q->first * PAGE + done));
}

/* Without io_uring: a from-RAM run is written at once (the guest must not
 * run before), staged ones when the copy is done (drain). */
static int pump_pwrite(struct wctx *c, bool drain)
{
    int r = 0;
    while (r == 0 && c->next_d < c->nruns) {
        r = finish_run(c->f->fd, &c->runs[c->next_d++], 0);
        c->direct_left--;
    }
    while (r == 0 && drain && c->next_s < c->nstaged)
        r = finish_run(c->f->fd, &c->runs[c->next_s++], 0);
    return r;
}

#if MOAT_HAVE_URING
static int take_cqe(struct wctx *c, struct io_uring_cqe *cqe)
{
    size_t i = (size_t)io_uring_cqe_get_data64(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(&c->f->ring->ring, cqe);
    c->inflight--;
    if (i >= c->nstaged)
        c->direct_left--;
    if (res < 0)
        return res;
    return finish_run(c->f->fd, &c->runs[i], (uint64_t)res);
}

/* Submit what the free ring slots take (from-RAM runs first: the guest
 * waits for those), then take the completions that are there, waiting for
 * one if wait (and any is in flight). */
static int pump_uring(struct wctx *c, bool wait)
{
    struct io_uring *ring = &c->f->ring->ring;
    unsigned queued = 0;
    while (c->inflight + queued < QUEUE_DEPTH && (c->next_d < c->nruns || c->next_s < c->nstaged)) {
        size_t i = c->next_d < c->nruns ? c->next_d++ : c->next_s++;
        struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
        if (!sqe)               /* cannot happen: one ring entry per slot */
            return -EBUSY;
        const struct srun *q = &c->runs[i];
        io_uring_prep_write(sqe, SLOT_MEM, q->src, (unsigned)(q->n * PAGE), q->first * PAGE);
        sqe->flags |= IOSQE_FIXED_FILE;
        io_uring_sqe_set_data64(sqe, i);
        queued++;
    }
    if (queued) {
        int s = io_uring_submit(ring);
        c->inflight += s > 0 ? (unsigned)s : 0;
        if (s < (int)queued)
            return s < 0 ? s : -EIO;    /* some were not submitted: failed */
    }
    struct io_uring_cqe *cqe;
    int r;
    if (wait && c->inflight) {
        while ((r = io_uring_wait_cqe(ring, &cqe)) == -EINTR)
            ;
        if (r < 0)
            return r;
        if ((r = take_cqe(c, cqe)) < 0)
            return r;
    }
    while (c->inflight && io_uring_peek_cqe(ring, &cqe) == 0)
        if ((r = take_cqe(c, cqe)) < 0)
            return r;
    return 0;
}

/* After a failure: what is in flight still reads its buffer. */
static void drain_uring(struct wctx *c)
{
    while (c->inflight) {
        struct io_uring_cqe *cqe;
        int r;
        while ((r = io_uring_wait_cqe(&c->f->ring->ring, &cqe)) == -EINTR)
            ;
        if (r < 0)
            return;     /* the ring is broken; nothing will complete */
        io_uring_cqe_seen(&c->f->ring->ring, cqe);
        c->inflight--;
    }
}
#endif

static int pump(struct wctx *c, bool wait)
{
#if MOAT_HAVE_URING
    if (c->f->ring_ok)
        return pump_uring(c, wait);
#endif
    return pump_pwrite(c, wait);
}

int snapmem_write_staged(struct snapmem_file *f, const uint8_t *ram, const uint64_t *sel,
                         uint8_t *stage, uint64_t stage_cap, void (*copied)(void *), void *arg,
                         struct snapmem_stats *st)
{
    struct snapmem_stats local;
    if (!st)
        st = &local;
    memset(st, 0, sizeof(*st));
    st->direct = f->direct;
    if ((uintptr_t)ram % PAGE || (stage && ((uintptr_t)stage % PAGE || stage_cap % PAGE)))
        return -EINVAL;
    if (!stage)
        stage_cap = 0;
#if MOAT_HAVE_URING
    st->uring = f->ring_ok;
#endif
    struct run_iter it = { ram, f->npages, sel, 0, st };
    struct wctx c = { .f = f };
    uint64_t used = 0, first, n;
    bool full = stage_cap == 0;
    int r = 0;
    /* Copy (or, past the cap, write from RAM) run by run; the writes of
     * what is copied already go on meanwhile. */
    while (r == 0 && next_run(&it, &first, &n)) {
        uint64_t len = n * PAGE;
        if (!full && used + len > stage_cap)
            full = true;        /* the rest from RAM, while paused */
        if (!full) {
            memcpy(stage + used, ram + first * PAGE, (size_t)len);
            r = add_run(&c, first, n, stage + used, true);
            used += len;
        } else {
            r = add_run(&c, first, n, ram + first * PAGE, false);
        }
        if (r == 0)
            r = pump(&c, false);
    }
    st->staged_bytes = used;
    /* RAM is needed until every from-RAM run is written. */
    while (r == 0 && c.direct_left)
        r = pump(&c, true);
    if (r == 0 && copied)
        copied(arg);
    while (r == 0 && (c.inflight || c.next_s < c.nstaged || c.next_d < c.nruns))
        r = pump(&c, true);
#if MOAT_HAVE_URING
    if (r < 0 && f->ring_ok)
        drain_uring(&c);
#endif
    free(c.runs);
    return r;
}

int snapmem_write(struct snapmem_file *f, const uint8_t *ram, const uint64_t *sel, struct snapmem_stats *st)
{
    return snapmem_write_staged(f, ram, sel, NULL, 0, NULL, NULL, st);
}

uint64_t snapmem_stage_cap(uint64_t ram_size)
{
    uint64_t cap = ram_size < SNAPMEM_STAGE_MAX ? ram_size : SNAPMEM_STAGE_MAX;
    return cap / PAGE * PAGE;
}

#define HUGE (2ull << 20)

int snapmem_stage_alloc(struct snapmem_stage *s, uint64_t cap, uint64_t prefault)
{
    memset(s, 0, sizeof(*s));
    if (!cap)
        return 0;
    /* Aligned to a huge page, so that it can have them. */
    size_t len = (size_t)(cap + HUGE);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return -errno;
    uint8_t *b = (uint8_t *)(((uintptr_t)p + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
    madvise(b, (size_t)cap, MADV_HUGEPAGE);
    /* Fault in what the copy is expected to take now, while the guest
     * still runs: a fault per page (or a huge page's zeroing, or waiting
     * for the kernel to compact one) would otherwise be paid during the
     * pause. A kernel without MADV_POPULATE_WRITE (before 5.14): the copy
     * faults it in. */
    prefault = prefault < cap ? (prefault + HUGE - 1) / HUGE * HUGE : cap;
    if (prefault > cap)
        prefault = cap;
    if (prefault && madvise(b, (size_t)prefault, MADV_POPULATE_WRITE) < 0)
        log_debug("snapshot: staging buffer: MADV_POPULATE_WRITE: %s", strerror(errno));
    s->map = p;
    s->map_len = len;
    s->buf = b;
    s->cap = cap;
    return 0;
}

void snapmem_stage_free(struct snapmem_stage *s)
{
    if (s->map)
        munmap(s->map, s->map_len);
    memset(s, 0, sizeof(*s));
}

int snapmem_sync(struct snapmem_file *f, int other_fd)
{
    int fds[2] = { f->fd, other_fd };
    unsigned n = other_fd >= 0 ? 2 : 1;
#if MOAT_HAVE_URING
    if (f->ring_ok && other_fd >= 0 && ring_slot(f->ring, SLOT_OTHER, other_fd) < 0) {
        if (fsync(other_fd) < 0)
            return -errno;
        n = 1;          /* the state file synced above */
    }
    if (f->ring_ok) {
        struct io_uring *ring = &f->ring->ring;
        int r = 0;
        for (unsigned i = 0; i < n; i++) {
            struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
            if (!sqe)
                return -EBUSY;  /* cannot happen: the ring is idle */
            io_uring_prep_fsync(sqe, i == 0 ? SLOT_MEM : SLOT_OTHER, 0);
            sqe->flags |= IOSQE_FIXED_FILE;
        }
        int s = io_uring_submit(ring);
        if (s < (int)n)
            return s < 0 ? s : -EIO;
        for (unsigned got = 0; got < n; got++) {
            struct io_uring_cqe *cqe;
            int w;
            while ((w = io_uring_wait_cqe(ring, &cqe)) == -EINTR)
                ;
            if (w < 0)
                return w;
            if (cqe->res < 0 && !r)
                r = cqe->res;
            io_uring_cqe_seen(ring, cqe);
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
    struct snapvm *sv = snapvm_of(vm);
    if (sv->nbacking >= VM_MAX_BACKING)
        return -E2BIG;
    int d = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (d < 0)
        return -errno;
    sv->backing_fd[sv->nbacking++] = d;
    return 0;
}

void snapmem_free(struct moat_vm *vm)
{
    struct snapvm *sv = snapvm_of(vm);
    for (unsigned i = 0; i < sv->nbacking; i++)
        close(sv->backing_fd[i]);
    sv->nbacking = 0;
    free(sv->backing_data);
    sv->backing_data = NULL;
}

int snapmem_candidates(struct moat_vm *vm, uint64_t **out)
{
    struct snapvm *sv = snapvm_of(vm);
    *out = NULL;
    uint64_t npages = vm->ram_size / PAGE, words = snap_bitmap_words(vm->ram_size);
    uint64_t *bm = calloc(words ? words : 1, sizeof(uint64_t));
    if (!bm)
        return -ENOMEM;
    /* RAM served by a page-fault handler (uffd.h): the pages the guest has
     * not touched are in the handler's file, not here, and reading them is
     * what brings them in. Every page, then. */
    if (sv->uffd >= 0) {
        snapmem_bits_set(bm, 0, npages);
        *out = bm;
        return 0;
    }
    /* The files under a restored VM's RAM: their data ranges, once (the
     * files do not change under a mapping). */
    if (sv->nbacking && !sv->backing_data) {
        uint64_t *fd_bm = calloc(words ? words : 1, sizeof(uint64_t));
        if (!fd_bm) {
            free(bm);
            return -ENOMEM;
        }
        for (unsigned i = 0; i < sv->nbacking; i++) {
            int r = snapmem_file_data(sv->backing_fd[i], npages, fd_bm);
            if (r < 0) {
                log_debug("snapshot: data ranges of a memory file: %s: reading every page", strerror(-r));
                snapmem_bits_set(fd_bm, 0, npages);
                break;
            }
        }
        sv->backing_data = fd_bm;
    }
    if (sv->backing_data)
        memcpy(bm, sv->backing_data, words * sizeof(uint64_t));
    int r = snapmem_resident(vm->ram, npages, bm);
    if (r < 0) {
        log_debug("snapshot: /proc/self/pagemap: %s: reading every page", strerror(-r));
        snapmem_bits_set(bm, 0, npages);
    }
    *out = bm;
    return 0;
}
