/* The working-set file (docs/snapshot-format.md, "Working-set prefetch"):
 * the guest-physical pages a restored VM touched first, stored next to the
 * snapshot's memory file as MEMORY.ws, so later restores of that snapshot
 * can populate them before the guest asks. Pure (no KVM, no I/O): the file
 * is untrusted input (anyone can write it, and the guest chooses which
 * pages are in it), so ws_parse checks every field before a range is used;
 * unit-tested (tests/unit/test_wsfile.c) and fuzzed (tests/fuzz/fuzz_wsfile.c).
 *
 * Layout, little-endian: a 48-byte header
 *   0  8  magic "MOATWSET"
 *   8  4  version (1)
 *  12  4  header size (48)
 *  16  8  the snapshot state file's checksum (its header's XXH3-64 field)
 *  24  8  guest memory size in bytes
 *  32  4  number of ranges
 *  36  4  flags (0)
 *  40  8  XXH3-64 of the whole file with this field zero
 * then the ranges, each {u32 first page, u32 page count}, ascending, not
 * overlapping, not touching (a run is one range), inside guest memory. */
#ifndef MOAT_WSFILE_H
#define MOAT_WSFILE_H

#include <stddef.h>
#include <stdint.h>

#define WS_MAGIC       "MOATWSET"
#define WS_VERSION     1u
#define WS_HEADER_SIZE 48u
#define WS_MAX_RANGES  (1u << 18)   /* 2 MiB of ranges at most */
#define WS_PAGE        4096ull

struct ws_range {
    uint32_t first;     /* page number (guest-physical offset / 4096 in the memory file) */
    uint32_t count;     /* pages, >= 1 */
};

/* The exact size of a file with n ranges. */
static inline size_t ws_file_size(size_t n) { return WS_HEADER_SIZE + n * sizeof(struct ws_range); }

/* Write the file for ranges[0..n) into buf (ws_file_size(n) bytes).
 * -EINVAL if the ranges break the rules above or n > WS_MAX_RANGES,
 * -ENOSPC if len is too small; else the length written. */
long ws_encode(uint8_t *buf, size_t len, uint64_t state_sum, uint64_t mem_size,
               const struct ws_range *ranges, size_t n);

/* Check buf (the whole file) and point *ranges at its range array (inside
 * buf; unaligned: read it with ws_range_at). 0, or:
 *  -EINVAL  malformed (why says how): short, bad magic, header size,
 *           length, checksum, flags, a range empty, past the end,
 *           overlapping, touching or out of order, too many ranges;
 *  -EPROTONOSUPPORT  another version (why says which);
 *  -ESTALE  well-formed but for another snapshot (state checksum or memory
 *           size differ): not an error, just not this snapshot's. */
int ws_parse(const uint8_t *buf, size_t len, uint64_t state_sum, uint64_t mem_size,
             const uint8_t **ranges, size_t *n, const char **why);

/* Range i of a parsed array. */
struct ws_range ws_range_at(const uint8_t *ranges, size_t i);

/* Append the runs of set entries of present[0..npages) (one byte per page,
 * nonzero = touched) to out (capacity cap), merging with a run that ends
 * where out's last range ends. base: the page number of present[0].
 * Returns the new count, or -E2BIG when cap would be exceeded. */
long ws_runs_append(const uint8_t *present, size_t npages, uint64_t base, struct ws_range *out,
                    size_t n, size_t cap);

#endif
