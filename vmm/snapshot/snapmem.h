/* Writing guest RAM to a memory file (vmm/snapshot/snapmem.c): which pages
 * can hold data without reading the others, and the write itself at disk
 * speed (io_uring, O_DIRECT where the file system allows, several requests
 * in flight, holes kept). docs/snapshot-format.md, "Writing". */
#ifndef MOAT_SNAPMEM_H
#define MOAT_SNAPMEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#if MOAT_HAVE_URING
#include <liburing.h>
#endif

struct moat_vm;

/* /proc/PID/pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst). */
#define SNAPMEM_PM_PRESENT (1ull << 63)
#define SNAPMEM_PM_SWAPPED (1ull << 62)

/* Pure: for each of the n pagemap entries, set bit (first + i) of bm
 * (host-order u64 words) when page i is present or swapped out, i.e. it
 * exists (an anonymous page that was never touched is neither). */
void snapmem_pagemap_mark(const uint64_t *pm, uint64_t n, uint64_t *bm, uint64_t first);

/* Pure: set the bits of [first, first + n) in bm. */
void snapmem_bits_set(uint64_t *bm, uint64_t first, uint64_t n);

/* Set in bm (host-order words, npages bits) every page of the mapping
 * [base, base + npages * 4096) that exists in this process (pagemap:
 * present or swapped). -errno if pagemap cannot be read (the caller then
 * has to read every page). */
int snapmem_resident(const uint8_t *base, uint64_t npages, uint64_t *bm);

/* Set in bm every page of [0, npages) for which fd (a memory file) holds
 * data (SEEK_DATA/SEEK_HOLE; a file system without them: every page). */
int snapmem_file_data(int fd, uint64_t npages, uint64_t *bm);

/* What a memory-file write did. */
struct snapmem_stats {
    uint64_t candidate_pages;  /* pages looked at (read for zero detection) */
    uint64_t data_pages;       /* non-zero pages written */
    uint64_t requests;         /* write requests */
    uint64_t staged_bytes;     /* copied to the staging buffer, written from there */
    bool direct;               /* O_DIRECT */
    bool uring;                /* io_uring (else pwrite) */
};

/* A memory file being written. Opened before the guest is paused (the
 * file created and sized, the io_uring set up), so that the pause holds
 * only the write itself. */
struct snapmem_file {
    int fd;
    bool direct;               /* opened with O_DIRECT */
    uint64_t npages;
    bool ring_ok;              /* ring is ours for this file's writes */
    struct snapmem_ring *ring;
};

/* A VM's snapshot ring: created when the VM is (vm_alloc), before any
 * seccomp filter, so that no filtered thread needs io_uring_setup (a ring
 * made later would have no restrictions: its OPENAT, CONNECT or SOCKET
 * requests would bypass the thread's filter). Created disabled and
 * restricted before it is enabled: only WRITE and FSYNC requests, each on
 * a registered (fixed) file, and of the register operations only
 * IORING_REGISTER_FILES_UPDATE (a snapshot puts its two files in the two
 * slots and takes them out again). One snapshot uses it at a time; a
 * second one at the same time writes with pwrite. */
struct snapmem_ring;
/* 0 with *out set, or -errno (no io_uring here: *out NULL, writes use
 * pwrite). */
int snapmem_ring_new(struct snapmem_ring **out);
void snapmem_ring_free(struct snapmem_ring *r);
#if MOAT_HAVE_URING
/* The ring itself (tests: what a request the restrictions forbid gets). */
struct io_uring *snapmem_ring_uring(struct snapmem_ring *r);
#endif

/* Create path (O_TRUNC, 0600), O_DIRECT where the file system takes it
 * (direct_ok), of npages * 4096 bytes (all a hole), its writes going
 * through ring where one is given and free (NULL: pwrite). 0 or -errno
 * (nothing left open). */
int snapmem_open(struct snapmem_file *f, const char *path, uint64_t npages, bool direct_ok,
                 struct snapmem_ring *ring);

/* Of the pages whose bit is set in sel (host-order words), write the
 * non-zero ones at their offsets, in runs of up to 1 MiB, several in
 * flight (io_uring; pwrite where there is none); every other page stays a
 * hole. ram (npages pages) must be page aligned: O_DIRECT writes straight
 * from it. When this returns, the data has left ram (the caller may let
 * the guest run on). st may be NULL. 0 or -errno. */
int snapmem_write(struct snapmem_file *f, const uint8_t *ram, const uint64_t *sel, struct snapmem_stats *st);

/* snapmem_write with a staging copy: while the caller keeps RAM still
 * (the guest paused), each run is copied into stage (stage_cap bytes, page
 * aligned: O_DIRECT writes from it; NULL or 0: no staging) and its write
 * submitted from the copy at once, so copying and writing overlap; runs
 * past the cap are written straight from RAM. As soon as every run is
 * copied and every straight-from-RAM write has completed, copied(arg) is
 * called (RAM may change from then on: the caller resumes the guest);
 * then the staged writes are waited for. On failure copied is not called
 * (nothing in flight is left when this returns). st->staged_bytes: what
 * went through stage. 0 or -errno. */
int snapmem_write_staged(struct snapmem_file *f, const uint8_t *ram, const uint64_t *sel,
                         uint8_t *stage, uint64_t stage_cap, void (*copied)(void *), void *arg,
                         struct snapmem_stats *st);

/* The staging buffer: at most SNAPMEM_STAGE_MAX, and no more than the
 * guest's RAM (snapmem_stage_cap). Reserved before the pause, 2 MiB
 * aligned and MADV_HUGEPAGE, its first prefault bytes (rounded up to
 * 2 MiB) faulted in then (MADV_POPULATE_WRITE), so that the copy during
 * the pause does not pay for faults; the rest is address space only (the
 * copy faults in what it needs beyond). Unmapped after the write: nothing
 * stays resident. */
#define SNAPMEM_STAGE_MAX (256ull << 20)
struct snapmem_stage {
    uint8_t *buf;
    uint64_t cap;
    void *map;                 /* the mapping buf lies in */
    size_t map_len;
};
uint64_t snapmem_stage_cap(uint64_t ram_size);
int snapmem_stage_alloc(struct snapmem_stage *s, uint64_t cap, uint64_t prefault);
void snapmem_stage_free(struct snapmem_stage *s);

/* Make f and other_fd (-1: none) durable in one batch: both fsync requests
 * in flight together on f's ring, else one fsync after the other. 0 or the
 * first -errno. */
int snapmem_sync(struct snapmem_file *f, int other_fd);

/* Close f (the file stays). */
void snapmem_close(struct snapmem_file *f);

/* The VM side: the files a restored VM's RAM is mapped from (memory file
 * and diff layers; dup'ed, closed by snapmem_free), so that a snapshot of
 * it reads the pages those files hold data for, and only those besides the
 * ones the VM has itself (pagemap). */
int snapmem_note_backing(struct moat_vm *vm, int fd);
void snapmem_free(struct moat_vm *vm);
/* VM paused: the pages of vm's RAM that may hold data (bitmap of
 * snap_bitmap_words(ram_size) host-order words; free it). Reads no page. */
int snapmem_candidates(struct moat_vm *vm, uint64_t **out);

#endif
