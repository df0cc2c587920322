/* Writing a memory file (vmm/snapshot/snapmem.c): the pagemap and bitmap
 * helpers, which pages of a mapping exist, a file's data ranges, the
 * write itself (runs, holes, O_DIRECT and not; with a staging copy, its
 * cap, the pwrite path) and the VM's candidate
 * pages with and without backing files. No KVM: real files in $TMPDIR. */
#include <check.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "vmm/core/vm.h"
#include "vmm/core/vmhooks.h"
#include "vmm/snapshot/snapvm.h"
#include "vmm/snapshot/snapdiff.h"
#include "vmm/snapshot/snapmem.h"

#define PG 4096ul

static bool bit(const uint64_t *bm, uint64_t i)
{
    return (bm[i / 64] >> (i % 64)) & 1;
}

static char *tmp_path(const char *name)
{
    const char *d = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char *p = malloc(4096);
    ck_assert_ptr_nonnull(p);
    snprintf(p, 4096, "%s/moat-snapmem-%d-%s", d, (int)getpid(), name);
    return p;
}

START_TEST(pagemap_mark)
{
    uint64_t pm[6] = {
        SNAPMEM_PM_PRESENT, 0, SNAPMEM_PM_SWAPPED, 1ull << 61 /* file page, not present */,
        SNAPMEM_PM_PRESENT | 1ull << 61 | 12345, 0x7fffffffffffffull /* pfn bits only */,
    };
    uint64_t bm[2] = { 0, 0 };
    snapmem_pagemap_mark(pm, 6, bm, 62);   /* crosses into the second word */
    ck_assert(bit(bm, 62));
    ck_assert(!bit(bm, 63));
    ck_assert(bit(bm, 64));
    ck_assert(!bit(bm, 65));
    ck_assert(bit(bm, 66));
    ck_assert(!bit(bm, 67));
    ck_assert_uint_eq(bm[0], 1ull << 62);
    ck_assert_uint_eq(bm[1], (1ull << 0) | (1ull << 2));
}
END_TEST

START_TEST(bits_set)
{
    uint64_t bm[4] = { 0 };
    snapmem_bits_set(bm, 5, 0);
    ck_assert_uint_eq(bm[0], 0);
    snapmem_bits_set(bm, 60, 140);           /* 60..199: part, whole, part */
    ck_assert_uint_eq(bm[0], 0xfull << 60);
    ck_assert_uint_eq(bm[1], ~0ull);
    ck_assert_uint_eq(bm[2], ~0ull);
    ck_assert_uint_eq(bm[3], (1ull << 8) - 1);
    uint64_t one = 0;
    snapmem_bits_set(&one, 7, 1);
    ck_assert_uint_eq(one, 1ull << 7);
}
END_TEST

START_TEST(resident_pages)
{
    const uint64_t n = 128;
    uint8_t *m = mmap(NULL, n * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(m, MAP_FAILED);
    uint64_t bm[2] = { 0, 0 };
    int r = snapmem_resident(m, n, bm);
    if (r == -ENOENT || r == -EACCES || r == -EPERM) {
        printf("SKIPPED: resident_pages: /proc/self/pagemap unreadable (%s)\n", strerror(-r));
        munmap(m, n * PG);
        return;
    }
    ck_assert_int_eq(r, 0);
    ck_assert_uint_eq(bm[0] | bm[1], 0);      /* nothing touched yet */
    m[3 * PG] = 1;
    m[70 * PG + 100] = 2;
    m[127 * PG + 4095] = 3;
    volatile uint8_t rd = m[20 * PG];          /* a read maps the zero page: it exists */
    (void)rd;
    ck_assert_int_eq(snapmem_resident(m, n, bm), 0);
    for (uint64_t i = 0; i < n; i++)
        ck_assert_msg(bit(bm, i) == (i == 3 || i == 20 || i == 70 || i == 127), "page %llu", (unsigned long long)i);
    /* gone again (what a balloon's MADV_DONTNEED does): zero, not needed */
    madvise(m + 70 * PG, PG, MADV_DONTNEED);
    memset(bm, 0, sizeof(bm));
    ck_assert_int_eq(snapmem_resident(m, n, bm), 0);
    ck_assert(!bit(bm, 70));
    ck_assert(bit(bm, 3));
    ck_assert_int_eq(snapmem_resident(m + 1, n, bm), -EINVAL);
    munmap(m, n * PG);
}
END_TEST

START_TEST(file_data_ranges)
{
    char *p = tmp_path("sparse");
    int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, 200 * PG), 0);
    uint8_t page[PG];
    memset(page, 0xab, sizeof(page));
    ck_assert_int_eq(pwrite(fd, page, PG, 2 * PG), (ssize_t)PG);
    ck_assert_int_eq(pwrite(fd, page, PG, 65 * PG), (ssize_t)PG);
    ck_assert_int_eq(pwrite(fd, page, PG, 66 * PG), (ssize_t)PG);
    ck_assert_int_eq(pwrite(fd, page, 10, 199 * PG + 5), 10);   /* a partial last page */
    uint64_t bm[4] = { 0 };
    ck_assert_int_eq(snapmem_file_data(fd, 200, bm), 0);
    uint64_t set = 0;
    for (uint64_t i = 0; i < 200; i++)
        set += bit(bm, i);
    /* Exact on ext4/xfs/tmpfs; a file system with bigger allocation units
     * may report more, never less. */
    ck_assert(bit(bm, 2) && bit(bm, 65) && bit(bm, 66) && bit(bm, 199));
    ck_assert_uint_le(set, 200);
    if (set == 4)
        ck_assert(!bit(bm, 0) && !bit(bm, 64) && !bit(bm, 67));
    /* Only [0, npages) is looked at. */
    uint64_t small[1] = { 0 };
    ck_assert_int_eq(snapmem_file_data(fd, 3, small), 0);
    ck_assert_uint_eq(small[0] & ~7ull, 0);
    ck_assert(small[0] & 4);
    close(fd);
    unlink(p);
    free(p);
}
END_TEST

/* The snapshot file p (n pages) read back whole; its descriptor in *fd. */
static uint8_t *read_back(const char *p, uint64_t n, int *fd)
{
    *fd = open(p, O_RDONLY);
    ck_assert_int_ge(*fd, 0);
    ck_assert_int_eq(lseek(*fd, 0, SEEK_END), (off_t)(n * PG));
    uint8_t *back = malloc(n * PG);
    ck_assert_ptr_nonnull(back);
    ck_assert_int_eq(pread(*fd, back, n * PG, 0), (ssize_t)(n * PG));
    return back;
}

/* The pages both write tests start from: a run longer than one request
 * (1 MiB, pages 10..299) split by a zero page (150), a page non-zero only
 * in its last byte (400), 50 selected zero pages (401..450) and a non-zero
 * page that is not selected (500). */
static void fill_common(uint8_t *ram, uint64_t *sel)
{
    for (uint64_t i = 10; i < 300; i++) {
        memset(ram + i * PG, (int)(i & 0x7f) | 1, PG);
        snapmem_bits_set(sel, i, 1);
    }
    memset(ram + 150 * PG, 0, PG);
    ram[400 * PG + PG - 1] = 9;
    snapmem_bits_set(sel, 400, 1);
    snapmem_bits_set(sel, 401, 50);
    memset(ram + 500 * PG, 0x55, PG);
}

/* ram: npages with a pattern; sel: which to look at. Checks the file
 * against it: selected non-zero pages hold their bytes, everything else
 * reads zero; selected zero pages and unselected pages are holes. */
static void write_and_check(bool direct_ok)
{
    const uint64_t n = 600;
    uint8_t *ram = mmap(NULL, n * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(ram, MAP_FAILED);
    uint64_t sel[(600 + 63) / 64] = { 0 };
    fill_common(ram, sel);
    /* the last page */
    ram[599 * PG] = 7;
    snapmem_bits_set(sel, 599, 1);

    char *p = tmp_path(direct_ok ? "direct" : "buffered");
    struct snapmem_file f;
    struct snapmem_ring *ring = NULL;
    snapmem_ring_new(&ring);
    ck_assert_int_eq(snapmem_open(&f, p, n, direct_ok, ring), 0);
    if (!direct_ok)
        ck_assert(!f.direct);
    struct snapmem_stats st;
    ck_assert_int_eq(snapmem_write(&f, ram, sel, &st), 0);
    ck_assert_int_eq(snapmem_sync(&f, -1), 0);
    snapmem_close(&f);
    ck_assert_uint_eq(st.uring, ring != NULL);
    snapmem_ring_free(ring);
    ck_assert_uint_eq(st.data_pages, 290 - 1 + 1 + 1);
    ck_assert_uint_eq(st.candidate_pages, 290 + 1 + 50 + 1);
    ck_assert_uint_ge(st.requests, 4);     /* 10..149, 151..299 (split at 1 MiB), 400, 599 */
    ck_assert_uint_eq(st.direct, f.direct);

    int fd;
    uint8_t *back = read_back(p, n, &fd);
    for (uint64_t i = 0; i < n; i++) {
        bool want = bit(sel, i);
        for (uint64_t b = 0; b < PG; b++) {
            uint8_t exp = want ? ram[i * PG + b] : 0;
            if (back[i * PG + b] != exp)
                ck_abort_msg("page %llu byte %llu: %u, want %u", (unsigned long long)i,
                             (unsigned long long)b, back[i * PG + b], exp);
        }
    }
    /* holes kept: the selected zero pages and the unselected one */
    off_t d = lseek(fd, 401 * PG, SEEK_DATA);
    if (d >= 0) {
        ck_assert_int_ge(d, (off_t)(451 * PG));
        ck_assert_int_eq(lseek(fd, 500 * PG, SEEK_DATA), (off_t)(599 * PG));
        ck_assert_int_eq(lseek(fd, 0, SEEK_DATA), (off_t)(10 * PG));
    }
    close(fd);
    free(back);
    unlink(p);
    free(p);
    munmap(ram, n * PG);
}

START_TEST(write_direct)
{
    write_and_check(true);
}
END_TEST

START_TEST(write_buffered)
{
    write_and_check(false);
}
END_TEST

/* ---- the staging copy ---- */

struct copied_arg {
    uint8_t *ram;
    uint64_t n;
    unsigned calls;
};

/* What a guest does once resumed: writes every page, selected or not. */
static void scribble(void *arg)
{
    struct copied_arg *a = arg;
    a->calls++;
    memset(a->ram, 0xee, a->n * PG);
}

/* The layout of write_and_check (runs over 1 MiB, a zero page inside a
 * run, a page non-zero in its last byte, selected zero pages, a non-zero
 * page not selected, the last page) plus a second long run, written with a
 * staging buffer of cap_pages (0: none); copied() rewrites all of RAM at
 * once. The file must hold exactly the content of RAM before that. ring:
 * false drops the io_uring (the pwrite path). */
static void staged_check(bool direct_ok, uint64_t cap_pages, bool ring)
{
    const uint64_t n = 1200;
    uint8_t *ram = mmap(NULL, n * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(ram, MAP_FAILED);
    uint64_t sel[(1200 + 63) / 64] = { 0 };
    fill_common(ram, sel);
    for (uint64_t i = 600; i < 1100; i++) {
        memset(ram + i * PG, (int)(i & 0x3f) | 0x40, PG);
        snapmem_bits_set(sel, i, 1);
    }
    ram[1199 * PG] = 7;
    snapmem_bits_set(sel, 1199, 1);
    uint8_t *want = malloc(n * PG);
    ck_assert_ptr_nonnull(want);
    for (uint64_t i = 0; i < n; i++) {
        if (bit(sel, i))
            memcpy(want + i * PG, ram + i * PG, PG);
        else
            memset(want + i * PG, 0, PG);
    }
    const uint64_t data = 289 + 1 + 500 + 1;

    char *p = tmp_path(direct_ok ? "staged-direct" : "staged-buffered");
    struct snapmem_file f;
    struct snapmem_ring *sr = NULL;
    if (ring)
        ck_assert_int_eq(snapmem_ring_new(&sr), MOAT_HAVE_URING ? 0 : -ENOSYS);
    ck_assert_int_eq(snapmem_open(&f, p, n, direct_ok, sr), 0);
    struct snapmem_stage sg;
    ck_assert_int_eq(snapmem_stage_alloc(&sg, cap_pages * PG, cap_pages * PG / 2), 0);
    if (cap_pages) {
        ck_assert_ptr_nonnull(sg.buf);
        ck_assert_uint_eq((uintptr_t)sg.buf % (2u << 20), 0);
        ck_assert_uint_eq(sg.cap, cap_pages * PG);
    } else {
        ck_assert_ptr_null(sg.buf);
    }
    struct copied_arg ca = { ram, n, 0 };
    struct snapmem_stats st;
    ck_assert_int_eq(snapmem_write_staged(&f, ram, sel, sg.buf, sg.cap, scribble, &ca, &st), 0);
    ck_assert_uint_eq(ca.calls, 1);
    ck_assert_int_eq(snapmem_sync(&f, -1), 0);
    snapmem_close(&f);
    snapmem_ring_free(sr);
    snapmem_stage_free(&sg);
    ck_assert_ptr_null(sg.buf);
    ck_assert_uint_eq(st.data_pages, data);
    ck_assert_uint_eq(st.uring, ring && MOAT_HAVE_URING);
    if (cap_pages >= data)
        ck_assert_uint_eq(st.staged_bytes, data * PG);
    else
        ck_assert_msg(st.staged_bytes <= cap_pages * PG && (cap_pages < 256 || st.staged_bytes > 0),
                      "%llu bytes staged, cap %llu pages", (unsigned long long)st.staged_bytes,
                      (unsigned long long)cap_pages);

    int fd;
    uint8_t *back = read_back(p, n, &fd);
    for (uint64_t i = 0; i < n; i++)
        if (memcmp(back + i * PG, want + i * PG, PG) != 0)
            ck_abort_msg("page %llu is not its content at the copy (cap %llu pages, %s, %s)",
                         (unsigned long long)i, (unsigned long long)cap_pages,
                         direct_ok ? "O_DIRECT" : "buffered", ring ? "io_uring" : "pwrite");
    off_t d = lseek(fd, 401 * PG, SEEK_DATA);
    if (d >= 0)
        ck_assert_int_ge(d, (off_t)(451 * PG));
    close(fd);
    free(back);
    free(want);
    unlink(p);
    free(p);
    munmap(ram, n * PG);
}

/* Every selected page fits: all of it staged. */
START_TEST(staged_all)
{
    staged_check(true, 1024, true);
    staged_check(false, 1024, true);
    staged_check(true, 1024, false);
    staged_check(false, 1024, false);
}
END_TEST

/* The cap: what does not fit is written from RAM before copied() (a run
 * that would cross the cap and everything after it). */
START_TEST(staged_cap)
{
    static const uint64_t caps[] = { 1, 256, 300, 600 };
    for (unsigned i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
        staged_check(true, caps[i], true);
        staged_check(false, caps[i], false);
    }
}
END_TEST

/* No staging (a VM paused already): copied() once every write is done. */
START_TEST(staged_none)
{
    staged_check(true, 0, true);
    staged_check(false, 0, false);
}
END_TEST

/* AddressSanitizer's shadow of a buffer written through (one byte per 8)
 * can stay resident after the buffer is unmapped, depending on the host's
 * transparent huge pages: the sanitizer build allows for it. */
#if defined(__SANITIZE_ADDRESS__)
#define SHADOW_PAGES(bytes) ((long)((bytes) / 8 / PG) + 64)
#else
#define SHADOW_PAGES(bytes) 0L
#endif

static long rss_pages(void)
{
    long size = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fscanf(f, "%ld %ld", &size, &rss), 2);
    fclose(f);
    return rss;
}

/* The cap; the prefault makes that much resident; freeing gives it all
 * back (no lasting growth); a misaligned buffer is refused. */
START_TEST(stage_memory)
{
    ck_assert_uint_eq(snapmem_stage_cap(64ull << 20), 64ull << 20);
    ck_assert_uint_eq(snapmem_stage_cap(4ull << 30), SNAPMEM_STAGE_MAX);
    ck_assert_uint_eq(snapmem_stage_cap(10 * PG + 5), 10 * PG);
    struct snapmem_stage sg;
    ck_assert_int_eq(snapmem_stage_alloc(&sg, 0, 1 << 20), 0);
    ck_assert_ptr_null(sg.buf);
    long before = rss_pages();
    ck_assert_int_eq(snapmem_stage_alloc(&sg, 64ull << 20, 32ull << 20), 0);
    long populated = rss_pages();
    /* MADV_POPULATE_WRITE since Linux 5.14; before, nothing is resident */
    ck_assert_msg(populated - before >= (long)((32ull << 20) / PG) || populated - before < 16,
                  "RSS grew by %ld pages for a 32 MiB prefault", populated - before);
    memset(sg.buf, 1, 64ull << 20);
    ck_assert_int_ge(rss_pages() - before, (long)((60ull << 20) / PG));
    snapmem_stage_free(&sg);
    ck_assert_ptr_null(sg.buf);
    ck_assert_msg(rss_pages() - before < 256 + SHADOW_PAGES(64ull << 20), "RSS %ld pages above where it was",
                  rss_pages() - before);

    char *p = tmp_path("stage-unaligned");
    struct snapmem_file f;
    ck_assert_int_eq(snapmem_open(&f, p, 4, false, NULL), 0);
    uint64_t sel = 1;
    uint8_t *ram = mmap(NULL, 4 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(ram, MAP_FAILED);
    ck_assert_int_eq(snapmem_write_staged(&f, ram, &sel, ram + 1, PG, NULL, NULL, NULL), -EINVAL);
    ck_assert_int_eq(snapmem_write_staged(&f, ram, &sel, ram, PG + 1, NULL, NULL, NULL), -EINVAL);
    snapmem_close(&f);
    munmap(ram, 4 * PG);
    unlink(p);
    free(p);
}
END_TEST

/* The VM's snapshot ring takes WRITE and FSYNC on its registered slots
 * and nothing else: an OPENAT (or any other opcode) request, a write on a
 * plain fd, a register operation other than a file update all fail with
 * EACCES. A second snapshot while the ring is taken writes with pwrite. */
START_TEST(ring_restricted)
{
#if !MOAT_HAVE_URING
    printf("SKIPPED: built without liburing\n");
    return;
#else
    struct snapmem_ring *sr = NULL;
    int e = snapmem_ring_new(&sr);
    if (e < 0) {
        printf("SKIPPED: no io_uring here (%s)\n", strerror(-e));
        return;
    }
    char *p = tmp_path("ring"), *q = tmp_path("ring-second");
    struct snapmem_file f, g;
    ck_assert_int_eq(snapmem_open(&f, p, 4, false, sr), 0);
    ck_assert(f.ring_ok);
    ck_assert_int_eq(snapmem_open(&g, q, 4, false, sr), 0);
    ck_assert(!g.ring_ok);          /* busy: pwrite */

    /* the ring itself (idle: f has nothing in flight) */
    struct io_uring *r2 = snapmem_ring_uring(sr);
    char path[] = "/etc/hostname";
    /* one at a time: the kernel stops a submission at a refused request */
    for (int i = 0; i < 3; i++) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(r2);
        ck_assert_ptr_nonnull(sqe);
        if (i == 0) {
            io_uring_prep_openat(sqe, AT_FDCWD, path, O_RDONLY, 0);
            sqe->flags |= IOSQE_FIXED_FILE;
        } else if (i == 1) {
            io_uring_prep_write(sqe, f.fd, path, 4, 0);     /* not a fixed file */
        } else {
            io_uring_prep_socket(sqe, AF_UNIX, SOCK_STREAM, 0, 0);
            sqe->flags |= IOSQE_FIXED_FILE;
        }
        ck_assert_int_eq(io_uring_submit(r2), 1);
        struct io_uring_cqe *cqe;
        ck_assert_int_eq(io_uring_wait_cqe(r2, &cqe), 0);
        ck_assert_msg(cqe->res == -EACCES, "request %d: %d, not -EACCES", i, cqe->res);
        io_uring_cqe_seen(r2, cqe);
    }
    /* register: a new file table, buffers, a probe: refused */
    int fds[1] = { f.fd };
    ck_assert_int_eq(io_uring_register_files(r2, fds, 1), -EACCES);
    ck_assert_int_eq(io_uring_unregister_files(r2), -EACCES);
    struct iovec iov = { path, sizeof path };
    ck_assert_int_eq(io_uring_register_buffers(r2, &iov, 1), -EACCES);

    /* and the ring still writes: the allowed requests work */
    uint8_t *ram = mmap(NULL, 4 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(ram, MAP_FAILED);
    ram[PG] = 9;
    uint64_t sel = 0xf;
    struct snapmem_stats st;
    ck_assert_int_eq(snapmem_write(&f, ram, &sel, &st), 0);
    ck_assert(st.uring);
    ck_assert_int_eq(snapmem_sync(&f, g.fd), 0);
    ck_assert_int_eq(snapmem_write(&g, ram, &sel, &st), 0);
    ck_assert(!st.uring);
    snapmem_close(&g);
    snapmem_close(&f);
    /* given back: the next snapshot has it */
    ck_assert_int_eq(snapmem_open(&g, q, 4, false, sr), 0);
    ck_assert(g.ring_ok);
    snapmem_close(&g);
    int fd;
    uint8_t *back = read_back(p, 4, &fd);
    ck_assert_uint_eq(back[PG], 9);
    free(back);
    close(fd);
    munmap(ram, 4 * PG);
    snapmem_ring_free(sr);
    unlink(p);
    unlink(q);
    free(p);
    free(q);
#endif
}
END_TEST

START_TEST(open_errors)
{
    struct snapmem_file f;
    ck_assert_int_eq(snapmem_open(&f, "/nonexistent-dir/memory", 4, true, NULL), -ENOENT);
    ck_assert_int_eq(f.fd, -1);
    /* an unaligned source is refused, nothing read */
    char *p = tmp_path("unaligned");
    ck_assert_int_eq(snapmem_open(&f, p, 1, false, NULL), 0);
    uint64_t sel = 1;
    uint8_t *buf = malloc(2 * PG);
    uint8_t *unaligned = (uintptr_t)buf % PG ? buf : buf + 1;
    ck_assert_int_eq(snapmem_write(&f, unaligned, &sel, NULL), -EINVAL);
    snapmem_close(&f);
    ck_assert_int_eq(f.fd, -1);
    free(buf);
    unlink(p);
    free(p);
}
END_TEST

/* A VM's candidates: the pages it has, plus what its backing files hold. */
START_TEST(vm_candidates)
{
    struct moat_vm *vm = calloc(1, sizeof(*vm));
    ck_assert_ptr_nonnull(vm);
    struct snapvm *sv = NULL;
    ck_assert_int_eq(snapvm_attach(vm, false, &sv), 0);     /* as moat_create gives every VM */
    vm->ram_size = 256 * PG;
    vm->ram = mmap(NULL, vm->ram_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(vm->ram, MAP_FAILED);
    vm->ram[5 * PG] = 1;
    vm->ram[200 * PG] = 1;
    uint64_t *c = NULL;
    ck_assert_int_eq(snapmem_candidates(vm, &c), 0);
    ck_assert_ptr_nonnull(c);
    bool pagemap = bit(c, 5) && !bit(c, 6);
    if (!pagemap) {   /* no pagemap: every page, which is still correct */
        for (uint64_t i = 0; i < 256; i++)
            ck_assert(bit(c, i));
    } else {
        for (uint64_t i = 0; i < 256; i++)
            ck_assert(bit(c, i) == (i == 5 || i == 200));
    }
    free(c);
    /* A backing file with data at page 17 (the restored VM's page that it
     * never touched): a candidate without being resident. */
    char *p = tmp_path("backing");
    int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)vm->ram_size), 0);
    ck_assert_int_eq(pwrite(fd, "x", 1, 17 * PG), 1);
    ck_assert_int_eq(snapmem_note_backing(vm, fd), 0);
    close(fd);                         /* the VM keeps its own descriptor */
    ck_assert_int_eq(snapmem_candidates(vm, &c), 0);
    ck_assert(bit(c, 17));
    ck_assert(bit(c, 5));
    if (pagemap)
        ck_assert(!bit(c, 16) && !bit(c, 18));
    free(c);
    /* computed once: the same answer from the cached ranges */
    ck_assert_ptr_nonnull(sv->backing_data);
    ck_assert_int_eq(snapmem_candidates(vm, &c), 0);
    ck_assert(bit(c, 17));
    free(c);
    for (int i = 1; i < VM_MAX_BACKING; i++)
        ck_assert_int_eq(snapmem_note_backing(vm, 0), 0);
    ck_assert_int_eq(snapmem_note_backing(vm, 0), -E2BIG);
    /* RAM a page-fault handler serves: every page (the untouched ones are
     * the handler's, and reading them brings them in) */
    sv->uffd = 0;
    ck_assert_int_eq(snapmem_candidates(vm, &c), 0);
    for (uint64_t i = 0; i < 256; i++)
        ck_assert(bit(c, i));
    free(c);
    sv->uffd = -1;
    snapmem_free(vm);
    ck_assert_uint_eq(sv->nbacking, 0);
    ck_assert_ptr_null(sv->backing_data);
    unlink(p);
    free(p);
    munmap(vm->ram, vm->ram_size);
    vm_hooks_destroy(vm);
    free(vm);
}
END_TEST

/* A diff's pages leave the VM's bitmap when collected, so writes during
 * the rest of the snapshot belong to the next; a failed snapshot puts
 * them back. */
START_TEST(dirty_bits_move_and_come_back)
{
    struct moat_vm *vm = calloc(1, sizeof(*vm));
    ck_assert_ptr_nonnull(vm);
    vm->vm_fd = -1;
    struct snapvm *sv = NULL;
    ck_assert_int_eq(snapvm_attach(vm, false, &sv), 0);     /* as moat_create gives every VM */
    vm->ram_size = 4 << 20;
    vm->ram = calloc(1, vm->ram_size);
    ck_assert_ptr_nonnull(vm->ram);
    vm->flags = MOAT_F_DIRTY_LOG;
    ck_assert_int_eq(snapdiff_setup(vm), KVM_MEM_LOG_DIRTY_PAGES);
    /* no memory slots: KVM's log is not asked for */
    uint64_t v = 1;
    vm->mem.r[0] = (struct gmem_region){ 0, vm->ram_size, vm->ram };
    vm->mem.n = 1;
    ck_assert_int_eq(gmem_write(&vm->mem, 3 * PG, &v, sizeof(v)), 0);
    vm->mem.n = 0;
    uint64_t *bm = NULL;
    ck_assert_int_eq(snapdiff_collect(vm, &bm), 0);
    ck_assert_uint_eq(le64toh(bm[0]), 1ull << 3);
    ck_assert_uint_eq(sv->dirty[0], 0);       /* moved out */
    vm->mem.n = 1;
    ck_assert_int_eq(gmem_write(&vm->mem, 9 * PG, &v, sizeof(v)), 0);  /* meanwhile */
    snapdiff_giveback(vm, bm);                /* the snapshot failed */
    ck_assert_uint_eq(sv->dirty[0], (1ull << 3) | (1ull << 9));
    snapdiff_giveback(vm, NULL);
    free(bm);
    snapdiff_free(vm);
    free(vm->ram);
    vm_hooks_destroy(vm);
    free(vm);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("snapmem");
    TCase *tc = tcase_create("snapmem");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, pagemap_mark);
    tcase_add_test(tc, bits_set);
    tcase_add_test(tc, resident_pages);
    tcase_add_test(tc, file_data_ranges);
    tcase_add_test(tc, write_direct);
    tcase_add_test(tc, write_buffered);
    tcase_add_test(tc, staged_all);
    tcase_add_test(tc, staged_cap);
    tcase_add_test(tc, staged_none);
    tcase_add_test(tc, stage_memory);
    tcase_add_test(tc, ring_restricted);
    tcase_add_test(tc, open_errors);
    tcase_add_test(tc, vm_candidates);
    tcase_add_test(tc, dirty_bits_move_and_come_back);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
