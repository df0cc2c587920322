/* Diff snapshots (docs/snapshot-format.md, "Diff snapshots"): the two
 * state-file sections a diff adds, and the page bitmap logic. Pure: no KVM
 * headers; every decoder checks lengths before use (tests/unit/test_snapchain.c).
 *
 *  SNAP_DIFF_PARENT: struct snap_parent, then the parent's state-file path
 *    and memory-file path (no NULs, not terminated).
 *  SNAP_DIFF_PAGES: the page bitmap, little-endian u64 words, bit i of word
 *    w = page 64 * w + i of the memory file was written since the parent
 *    (its content is in this diff's memory file, a hole there = zeros);
 *    exactly snap_bitmap_words(mem_size) words, no bit past the last page. */
#ifndef MOAT_SNAPCHAIN_H
#define MOAT_SNAPCHAIN_H

#include <stddef.h>
#include <stdint.h>

#define SNAP_PAGE            4096u
#define SNAP_DIFF_MAX_DEPTH  16u      /* diffs on top of one full snapshot */
#define SNAP_PARENT_PATH_MAX 4095u
/* The bitmap must fit the state file's cap: RAM up to 256 GiB (8 MiB). */
#define SNAP_DIFF_MAX_MEM    (256ull << 30)

struct snap_parent {
    uint64_t checksum;     /* the parent state file's header checksum (XXH3-64) */
    uint32_t depth;        /* this diff's depth: 1 = the parent is a full snapshot */
    uint32_t state_len;    /* 1 .. SNAP_PARENT_PATH_MAX */
    uint32_t mem_len;      /* 1 .. SNAP_PARENT_PATH_MAX */
    uint32_t pad;          /* 0 */
};

/* Encode a parent section into buf (cap bytes): its length, or -EINVAL
 * (empty path, NUL inside, depth 0 or > max), -ENAMETOOLONG, -ENOSPC. */
long snap_parent_encode(uint8_t *buf, size_t cap, uint64_t checksum, uint32_t depth,
                        const char *state_path, const char *mem_path);
/* Decode one: the paths NUL-terminated into state/mem (caps >=
 * SNAP_PARENT_PATH_MAX + 1). 0 or -EINVAL with *why. */
int snap_parent_decode(const uint8_t *data, uint64_t len, uint64_t *checksum, uint32_t *depth,
                       char *state, size_t state_cap, char *mem, size_t mem_cap, const char **why);

/* A parent path recorded in a diff (untrusted) must lie beneath the
 * restore's snapshot root: root is an absolute directory path (no
 * trailing '/', except "/" itself), path must be root + '/' + a relative
 * rest of non-empty components, none "." or "..". Returns the rest (a
 * pointer into path), or NULL with *why. Pure: the open beneath the root
 * (no symlinks) is snapdiff.c's. */
const char *snap_parent_beneath(const char *root, const char *path, const char **why);

/* The header checksum of a state file (no check: snap_parse does that). */
uint64_t snap_file_checksum(const uint8_t *buf, size_t len);

/* Words of a bitmap for mem_size bytes of RAM. */
static inline uint64_t snap_bitmap_words(uint64_t mem_size)
{
    return (mem_size / SNAP_PAGE + 63) / 64;
}

/* Check a SNAP_DIFF_PAGES section against mem_size (a multiple of the page
 * size, <= SNAP_DIFF_MAX_MEM): exact length, 8-byte aligned data, no bit
 * past the last page. 0 or -EINVAL with *why. */
int snap_bitmap_check(const uint8_t *data, uint64_t len, uint64_t mem_size, const char **why);

/* The next run of set bits at or after page from: its first page (npages if
 * none) and *run its length. bm may be unaligned bytes (read as LE words). */
uint64_t snap_bitmap_next_run(const uint8_t *bm, uint64_t npages, uint64_t from, uint64_t *run);

/* Set bits and runs in a bitmap (for sizes, logs, and the mapping budget). */
uint64_t snap_bitmap_count(const uint8_t *bm, uint64_t npages, uint64_t *runs);

#endif
