/* Copy-on-write disk overlays: the pure part (no I/O). The file format is
 * documented in docs/disk-overlay.md; the I/O layer is devices/blk/overlay_disk.h.
 *
 * An overlay file holds, at fixed offsets:
 *   [0, 4096)                 the header (struct ovl_header, little endian)
 *   [4096, data_off)          the allocation bitmap: bit i (word i / 64, bit
 *                             i % 64 of little-endian u64 words) set = block i
 *                             of the virtual disk lives in the overlay
 *   [data_off + i * 4096)     block i's data, when its bit is set (the file is
 *                             sparse: unwritten blocks take no space)
 * A block whose bit is clear reads from the base image.
 *
 * Everything read from an overlay file is untrusted: ovl_header_decode checks
 * every field (sizes capped, offsets recomputed and compared, checksum). */
#ifndef MOAT_OVERLAY_H
#define MOAT_OVERLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OVL_MAGIC          "MOATCOW1"           /* 8 bytes, no NUL */
#define OVL_VERSION        2u                   /* written; 1 is read only to upgrade it */
#define OVL_VERSION_V1     1u                   /* base identified by FNV-1a of the first MiB */
#define OVL_BLOCK          4096u                /* block size, bytes */
#define OVL_BLOCK_SHIFT    12
#define OVL_HDR_SIZE       4096u                /* header area at offset 0 */
#define OVL_PATH_MAX       1024u                /* base path bytes, no NUL */
#define OVL_MAX_SIZE       (1ull << 42)         /* 4 TiB virtual size cap */
#define OVL_ID_BYTES       (1u << 20)           /* base identity: its first and last MiB */
#define OVL_SHA256_BYTES   32u

/* Base identity (version 2): the size and SHA-256 over the size (le64),
 * then bytes [0, a) and [b, size) of the base, a = min(size, 1 MiB),
 * b = max(a, size - 1 MiB): its first and last MiB, each byte once (all
 * of it when it is under 2 MiB). hash is version 1's identity: 64-bit
 * FNV-1a over the size and the first MiB, kept only to check a version 1
 * overlay's base before upgrading it. mtime is recorded for information
 * only (copies do not preserve it). */
struct ovl_base_id {
    uint64_t size;
    uint64_t hash;
    int64_t mtime_sec;
    uint8_t sha256[OVL_SHA256_BYTES];
};

struct ovl_header {
    uint32_t version;           /* OVL_VERSION, or OVL_VERSION_V1 (no sha256) */
    uint32_t block_size;
    uint64_t vsize;             /* virtual disk size, bytes (= base size) */
    uint64_t nblocks;           /* ceil(vsize / 4096) */
    uint64_t bitmap_off;        /* 4096 */
    uint64_t bitmap_len;        /* bytes, a multiple of 4096 */
    uint64_t data_off;          /* bitmap_off + bitmap_len */
    struct ovl_base_id base;
    char base_path[OVL_PATH_MAX + 1];   /* NUL-terminated; "" if unknown */
};

/* Fill the derived fields (nblocks, offsets) for a virtual size. 0, or
 * -EINVAL for 0 or a size over OVL_MAX_SIZE. */
int ovl_layout(uint64_t vsize, struct ovl_header *h);

/* Build a header (OVL_VERSION) for a base of this identity and path. 0 or
 * -EINVAL (size, path too long). */
int ovl_header_init(struct ovl_header *h, const struct ovl_base_id *base, const char *base_path);

/* Serialize into buf[OVL_HDR_SIZE] (the rest of the header area zeroed). */
void ovl_header_encode(const struct ovl_header *h, uint8_t *buf);

/* Parse and validate len bytes read from offset 0 of an overlay file.
 * 0, -EINVAL (malformed: *why says which field), or -ENOTSUP (not an
 * overlay at all: wrong magic; *why says so). Version 1 headers are
 * accepted here (h->version says so; their sha256 area must be zero): the
 * caller refuses to use one (ovl_open) except to upgrade it. */
int ovl_header_decode(const uint8_t *buf, size_t len, struct ovl_header *h, const char **why);

/* Is a base with this identity the one the overlay was made over? Version
 * 2: same size and SHA-256. Version 1: same size and FNV-1a (weak: for
 * ovl_open's upgrade only). */
bool ovl_base_matches(const struct ovl_header *h, const struct ovl_base_id *id);

/* 64-bit FNV-1a, continued from h (start with OVL_HASH_INIT). */
#define OVL_HASH_INIT 0xcbf29ce484222325ull
uint64_t ovl_hash(uint64_t h, const void *p, size_t n);

/* ---- bitmap (nblocks bits in ceil(nblocks / 64) u64 words) ---- */

static inline size_t ovl_bitmap_words(uint64_t nblocks) { return (size_t)((nblocks + 63) / 64); }
bool ovl_bit_get(const uint64_t *bm, uint64_t nblocks, uint64_t blk);   /* false if out of range */
int ovl_bit_set(uint64_t *bm, uint64_t nblocks, uint64_t blk);          /* 0 or -ERANGE */
uint64_t ovl_bit_count(const uint64_t *bm, uint64_t nblocks);          /* bits set below nblocks */
/* Bits beyond nblocks in the last word must be clear (a file that sets them
 * is malformed). true when clean. */
bool ovl_bitmap_tail_clean(const uint64_t *bm, uint64_t nblocks);

/* ---- splitting a request ---- */

struct ovl_extent {
    uint64_t off, len;          /* bytes of the virtual disk */
    bool in_overlay;            /* from the overlay (else the base) */
};

/* The first extent of the byte range [off, off + len) of a disk of vsize
 * bytes: the longest run of blocks with the same source, clipped to the
 * range. Call again with off += e->len, len -= e->len until len is 0.
 * 0, or -ERANGE when the range is empty, overflows or passes vsize. */
int ovl_next_extent(const uint64_t *bm, uint64_t nblocks, uint64_t vsize, uint64_t off,
                    uint64_t len, struct ovl_extent *e);

#endif
