/* Copy-on-write overlays, pure part. Contracts in overlay.h; byte layout of
 * the header in docs/disk-overlay.md. */
#include "devices/blk/overlay.h"

#include <endian.h>
#include <errno.h>
#include <string.h>

/* Header byte offsets. */
#define H_MAGIC      0
#define H_VERSION    8
#define H_BLOCK      12
#define H_VSIZE      16
#define H_NBLOCKS    24
#define H_BMOFF      32
#define H_BMLEN      40
#define H_DATAOFF    48
#define H_BSIZE      56
#define H_BHASH      64
#define H_BMTIME     72
#define H_PATHLEN    80
#define H_RESERVED   84
#define H_CSUM       88
#define H_PATH       96
#define H_BSHA       (H_PATH + OVL_PATH_MAX)   /* version 2: the base's SHA-256 (32 bytes) */

_Static_assert(H_BSHA + OVL_SHA256_BYTES <= OVL_HDR_SIZE, "header fits its area");

uint64_t ovl_hash(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static void put32(uint8_t *p, uint32_t v) { v = htole32(v); memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { v = htole64(v); memcpy(p, &v, 8); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return le32toh(v); }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return le64toh(v); }

int ovl_layout(uint64_t vsize, struct ovl_header *h)
{
    if (vsize == 0 || vsize > OVL_MAX_SIZE)
        return -EINVAL;
    h->version = OVL_VERSION;
    h->block_size = OVL_BLOCK;
    h->vsize = vsize;
    h->nblocks = (vsize + OVL_BLOCK - 1) >> OVL_BLOCK_SHIFT;
    uint64_t bytes = ovl_bitmap_words(h->nblocks) * 8;
    h->bitmap_off = OVL_HDR_SIZE;
    h->bitmap_len = (bytes + OVL_BLOCK - 1) & ~(uint64_t)(OVL_BLOCK - 1);
    h->data_off = h->bitmap_off + h->bitmap_len;
    return 0;
}

int ovl_header_init(struct ovl_header *h, const struct ovl_base_id *base, const char *base_path)
{
    memset(h, 0, sizeof *h);
    if (!base || ovl_layout(base->size, h) < 0)
        return -EINVAL;
    size_t n = base_path ? strlen(base_path) : 0;
    if (n > OVL_PATH_MAX)
        return -EINVAL;
    h->base = *base;
    if (n)
        memcpy(h->base_path, base_path, n);
    h->base_path[n] = 0;
    return 0;
}

static uint64_t header_csum(const uint8_t *buf)
{
    uint64_t c = ovl_hash(OVL_HASH_INIT, buf, H_CSUM);
    return ovl_hash(c, buf + H_CSUM + 8, OVL_HDR_SIZE - H_CSUM - 8);
}

void ovl_header_encode(const struct ovl_header *h, uint8_t *buf)
{
    memset(buf, 0, OVL_HDR_SIZE);
    memcpy(buf + H_MAGIC, OVL_MAGIC, 8);
    put32(buf + H_VERSION, h->version);
    put32(buf + H_BLOCK, h->block_size);
    put64(buf + H_VSIZE, h->vsize);
    put64(buf + H_NBLOCKS, h->nblocks);
    put64(buf + H_BMOFF, h->bitmap_off);
    put64(buf + H_BMLEN, h->bitmap_len);
    put64(buf + H_DATAOFF, h->data_off);
    put64(buf + H_BSIZE, h->base.size);
    put64(buf + H_BHASH, h->base.hash);
    put64(buf + H_BMTIME, (uint64_t)h->base.mtime_sec);
    size_t n = strnlen(h->base_path, OVL_PATH_MAX);
    put32(buf + H_PATHLEN, (uint32_t)n);
    memcpy(buf + H_PATH, h->base_path, n);
    if (h->version >= OVL_VERSION)
        memcpy(buf + H_BSHA, h->base.sha256, OVL_SHA256_BYTES);
    put64(buf + H_CSUM, header_csum(buf));
}

static int bad(const char **why, const char *w)
{
    if (why)
        *why = w;
    return -EINVAL;
}

int ovl_header_decode(const uint8_t *buf, size_t len, struct ovl_header *h, const char **why)
{
    memset(h, 0, sizeof *h);
    if (why)
        *why = NULL;
    if (!buf || len < 8 || memcmp(buf + H_MAGIC, OVL_MAGIC, 8) != 0) {
        if (why)
            *why = "not a moat overlay (no MOATCOW1 magic)";
        return -ENOTSUP;
    }
    if (len < OVL_HDR_SIZE)
        return bad(why, "header truncated");
    if (get64(buf + H_CSUM) != header_csum(buf))
        return bad(why, "header checksum mismatch");
    uint32_t ver = get32(buf + H_VERSION);
    if (ver != OVL_VERSION && ver != OVL_VERSION_V1)
        return bad(why, "unsupported overlay version");
    if (get32(buf + H_BLOCK) != OVL_BLOCK)
        return bad(why, "block size is not 4096");
    uint64_t vsize = get64(buf + H_VSIZE);
    if (ovl_layout(vsize, h) < 0)
        return bad(why, "virtual size is 0 or over 4 TiB");
    if (get64(buf + H_NBLOCKS) != h->nblocks)
        return bad(why, "block count does not match the virtual size");
    if (get64(buf + H_BMOFF) != h->bitmap_off || get64(buf + H_BMLEN) != h->bitmap_len)
        return bad(why, "bitmap offset or length does not match the virtual size");
    if (get64(buf + H_DATAOFF) != h->data_off)
        return bad(why, "data offset does not match the virtual size");
    h->base.size = get64(buf + H_BSIZE);
    if (h->base.size != vsize)
        return bad(why, "base size differs from the virtual size");
    h->base.hash = get64(buf + H_BHASH);
    h->base.mtime_sec = (int64_t)get64(buf + H_BMTIME);
    if (get32(buf + H_RESERVED) != 0)
        return bad(why, "reserved field is not zero");
    uint32_t n = get32(buf + H_PATHLEN);
    if (n > OVL_PATH_MAX)
        return bad(why, "base path too long");
    if (memchr(buf + H_PATH, 0, n))
        return bad(why, "base path contains a NUL byte");
    for (size_t i = H_PATH + n; i < OVL_HDR_SIZE; i++)
        if (buf[i] && (ver == OVL_VERSION_V1 || i < H_BSHA || i >= H_BSHA + OVL_SHA256_BYTES))
            return bad(why, "bytes after the base path are not zero");
    memcpy(h->base_path, buf + H_PATH, n);
    h->base_path[n] = 0;
    if (ver != OVL_VERSION_V1)
        memcpy(h->base.sha256, buf + H_BSHA, OVL_SHA256_BYTES);
    h->version = ver;
    return 0;
}

bool ovl_base_matches(const struct ovl_header *h, const struct ovl_base_id *id)
{
    if (h->base.size != id->size)
        return false;
    if (h->version == OVL_VERSION_V1)
        return h->base.hash == id->hash;
    return memcmp(h->base.sha256, id->sha256, OVL_SHA256_BYTES) == 0;
}

/* ---- bitmap ---- */

bool ovl_bit_get(const uint64_t *bm, uint64_t nblocks, uint64_t blk)
{
    if (blk >= nblocks)
        return false;
    return (bm[blk / 64] >> (blk % 64)) & 1;
}

int ovl_bit_set(uint64_t *bm, uint64_t nblocks, uint64_t blk)
{
    if (blk >= nblocks)
        return -ERANGE;
    bm[blk / 64] |= 1ull << (blk % 64);
    return 0;
}

uint64_t ovl_bit_count(const uint64_t *bm, uint64_t nblocks)
{
    uint64_t n = 0, words = nblocks / 64;
    for (uint64_t i = 0; i < words; i++)
        n += (uint64_t)__builtin_popcountll(bm[i]);
    if (nblocks % 64)
        n += (uint64_t)__builtin_popcountll(bm[words] & ((1ull << (nblocks % 64)) - 1));
    return n;
}

bool ovl_bitmap_tail_clean(const uint64_t *bm, uint64_t nblocks)
{
    if (nblocks % 64 == 0)
        return true;
    return (bm[nblocks / 64] >> (nblocks % 64)) == 0;
}

/* ---- extents ---- */

int ovl_next_extent(const uint64_t *bm, uint64_t nblocks, uint64_t vsize, uint64_t off,
                    uint64_t len, struct ovl_extent *e)
{
    if (len == 0 || off + len < off || off + len > vsize ||
        ((vsize + OVL_BLOCK - 1) >> OVL_BLOCK_SHIFT) != nblocks)
        return -ERANGE;
    uint64_t blk = off >> OVL_BLOCK_SHIFT;
    uint64_t last = (off + len - 1) >> OVL_BLOCK_SHIFT;
    bool src = ovl_bit_get(bm, nblocks, blk);
    uint64_t b = blk + 1;
    while (b <= last && ovl_bit_get(bm, nblocks, b) == src)
        b++;
    uint64_t end = b << OVL_BLOCK_SHIFT;        /* first byte not in the run */
    if (end > off + len)
        end = off + len;
    *e = (struct ovl_extent){ .off = off, .len = end - off, .in_overlay = src };
    return 0;
}
