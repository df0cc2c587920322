/* Copy-on-write overlays: the pure header/bitmap/extent module
 * (devices/blk/overlay.h) and the I/O layer (devices/blk/overlay_disk.h) on
 * temporary files. */
#include <check.h>
#include <endian.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "devices/blk/overlay.h"
#include "devices/blk/overlay_disk.h"
#include "vmm/snapshot/snapfmt.h"

/* ---------------- header ---------------- */

static void sample(struct ovl_header *h, uint64_t size)
{
    struct ovl_base_id id = { .size = size, .hash = 0x1234, .mtime_sec = 77 };
    for (unsigned i = 0; i < OVL_SHA256_BYTES; i++)
        id.sha256[i] = (uint8_t)(0xa0 + i);
    ck_assert_int_eq(ovl_header_init(h, &id, "/images/base.img"), 0);
}

/* Recompute the checksum at 88 after editing a field. */
static void reseal(uint8_t *b)
{
    uint64_t c = ovl_hash(OVL_HASH_INIT, b, 88);
    c = ovl_hash(c, b + 96, OVL_HDR_SIZE - 96);
    c = htole64(c);
    memcpy(b + 88, &c, 8);
}

static void put64(uint8_t *p, uint64_t v) { v = htole64(v); memcpy(p, &v, 8); }
static void put32(uint8_t *p, uint32_t v) { v = htole32(v); memcpy(p, &v, 4); }

START_TEST(layout_sizes)
{
    struct ovl_header h;
    ck_assert_int_eq(ovl_layout(1, &h), 0);
    ck_assert_uint_eq(h.nblocks, 1);
    ck_assert_uint_eq(h.bitmap_off, 4096);
    ck_assert_uint_eq(h.bitmap_len, 4096);
    ck_assert_uint_eq(h.data_off, 8192);
    ck_assert_int_eq(ovl_layout(4097, &h), 0);
    ck_assert_uint_eq(h.nblocks, 2);
    /* 1 GiB: 262144 blocks, 32 KiB of bitmap. */
    ck_assert_int_eq(ovl_layout(1ull << 30, &h), 0);
    ck_assert_uint_eq(h.nblocks, 262144);
    ck_assert_uint_eq(h.bitmap_len, 32768);
    ck_assert_uint_eq(h.data_off, 4096 + 32768);
    ck_assert_int_eq(ovl_layout(OVL_MAX_SIZE, &h), 0);
    ck_assert_int_eq(ovl_layout(0, &h), -EINVAL);
    ck_assert_int_eq(ovl_layout(OVL_MAX_SIZE + 1, &h), -EINVAL);
}
END_TEST

START_TEST(header_roundtrip)
{
    struct ovl_header h, g;
    sample(&h, (1ull << 30) + 512);
    uint8_t b[OVL_HDR_SIZE];
    ovl_header_encode(&h, b);
    const char *why = "x";
    ck_assert_int_eq(ovl_header_decode(b, sizeof b, &g, &why), 0);
    ck_assert_ptr_null(why);
    ck_assert_uint_eq(g.vsize, h.vsize);
    ck_assert_uint_eq(g.nblocks, h.nblocks);
    ck_assert_uint_eq(g.data_off, h.data_off);
    ck_assert_uint_eq(g.base.size, h.base.size);
    ck_assert_uint_eq(g.base.hash, 0x1234);
    ck_assert_int_eq(g.base.mtime_sec, 77);
    ck_assert_str_eq(g.base_path, "/images/base.img");
    ck_assert_uint_eq(g.version, OVL_VERSION);
    ck_assert_mem_eq(g.base.sha256, h.base.sha256, OVL_SHA256_BYTES);
    struct ovl_base_id same = h.base, other = h.base;
    same.mtime_sec = 5;
    ck_assert(ovl_base_matches(&g, &same));         /* mtime does not matter */
    same.hash = 0x9999;
    ck_assert(ovl_base_matches(&g, &same));         /* nor, in version 2, the old FNV-1a hash */
    other.sha256[31] ^= 1;
    ck_assert(!ovl_base_matches(&g, &other));
    other = h.base;
    other.size += 512;
    ck_assert(!ovl_base_matches(&g, &other));
}
END_TEST

/* Version 1 headers (no SHA-256; FNV-1a of the first MiB) still parse,
 * so that ovl_open can refuse them by name and upgrade them; their SHA-256
 * area must be zero, and they match by the old identity only. */
START_TEST(header_v1)
{
    struct ovl_header h, g;
    sample(&h, 1ull << 20);
    h.version = OVL_VERSION_V1;
    uint8_t b[OVL_HDR_SIZE];
    ovl_header_encode(&h, b);
    for (unsigned i = 96 + OVL_PATH_MAX; i < 96 + OVL_PATH_MAX + OVL_SHA256_BYTES; i++)
        ck_assert_uint_eq(b[i], 0);
    const char *why = NULL;
    ck_assert_int_eq(ovl_header_decode(b, sizeof b, &g, &why), 0);
    ck_assert_uint_eq(g.version, OVL_VERSION_V1);
    struct ovl_base_id id = { .size = 1ull << 20, .hash = 0x1234 };
    ck_assert(ovl_base_matches(&g, &id));
    id.hash = 0x1235;
    ck_assert(!ovl_base_matches(&g, &id));
    b[96 + OVL_PATH_MAX + 5] = 1;                   /* a SHA-256 byte in a version 1 header */
    reseal(b);
    ck_assert_int_eq(ovl_header_decode(b, sizeof b, &g, &why), -EINVAL);
    /* Version 2 keeps its SHA-256 there. */
    sample(&h, 1ull << 20);
    ovl_header_encode(&h, b);
    ck_assert_mem_eq(b + 96 + OVL_PATH_MAX, h.base.sha256, OVL_SHA256_BYTES);
}
END_TEST

START_TEST(header_init_refuses)
{
    struct ovl_header h;
    struct ovl_base_id id = { .size = 0 };
    ck_assert_int_eq(ovl_header_init(&h, &id, "x"), -EINVAL);
    id.size = 4096;
    char long_path[OVL_PATH_MAX + 2];
    memset(long_path, 'a', sizeof long_path - 1);
    long_path[sizeof long_path - 1] = 0;
    ck_assert_int_eq(ovl_header_init(&h, &id, long_path), -EINVAL);
    long_path[OVL_PATH_MAX] = 0;
    ck_assert_int_eq(ovl_header_init(&h, &id, long_path), 0);
    ck_assert_int_eq(ovl_header_init(&h, NULL, "x"), -EINVAL);
}
END_TEST

START_TEST(header_not_overlay)
{
    struct ovl_header g;
    uint8_t b[OVL_HDR_SIZE];
    memset(b, 0, sizeof b);
    const char *why = NULL;
    ck_assert_int_eq(ovl_header_decode(b, sizeof b, &g, &why), -ENOTSUP);
    ck_assert_ptr_nonnull(why);
    ck_assert_int_eq(ovl_header_decode(b, 4, &g, &why), -ENOTSUP);
    ck_assert_int_eq(ovl_header_decode(NULL, 0, &g, NULL), -ENOTSUP);
    memcpy(b, "MOATCOW2", 8);
    ck_assert_int_eq(ovl_header_decode(b, sizeof b, &g, &why), -ENOTSUP);
}
END_TEST

/* Each malformed field, with a valid checksum so the field check is what
 * refuses it. */
struct mutation { const char *name; unsigned off; int width; uint64_t value; };
static const struct mutation muts[] = {
    { "version", 8, 4, 3 },
    { "version 0", 8, 4, 0 },
    { "block size", 12, 4, 512 },
    { "vsize 0", 16, 8, 0 },
    { "vsize over cap", 16, 8, OVL_MAX_SIZE + 4096 },
    { "vsize huge", 16, 8, UINT64_MAX },
    { "nblocks", 24, 8, 3 },
    { "bitmap off", 32, 8, 8192 },
    { "bitmap len", 40, 8, 0 },
    { "data off", 48, 8, 4096 },
    { "base size", 56, 8, 1 },
    { "reserved", 84, 4, 1 },
    { "path len", 80, 4, OVL_PATH_MAX + 1 },
    { "path len huge", 80, 4, UINT32_MAX },
    { "trailing byte", 2000, 1, 0xff },
    { "last byte", OVL_HDR_SIZE - 1, 1, 1 },
};

START_TEST(header_malformed_field)
{
    const struct mutation *m = &muts[_i];
    struct ovl_header h, g;
    sample(&h, 1ull << 20);
    uint8_t b[OVL_HDR_SIZE];
    ovl_header_encode(&h, b);
    if (m->width == 8)
        put64(b + m->off, m->value);
    else if (m->width == 4)
        put32(b + m->off, (uint32_t)m->value);
    else
        b[m->off] = (uint8_t)m->value;
    reseal(b);
    const char *why = NULL;
    ck_assert_msg(ovl_header_decode(b, sizeof b, &g, &why) == -EINVAL, "%s accepted", m->name);
    ck_assert_ptr_nonnull(why);
}
END_TEST

START_TEST(header_path_nul_and_checksum)
{
    struct ovl_header h, g;
    sample(&h, 1ull << 20);
    uint8_t b[OVL_HDR_SIZE];
    ovl_header_encode(&h, b);
    const char *why = NULL;
    b[96 + 3] = 0;                      /* NUL inside the recorded length */
    ck_assert_int_eq(ovl_header_decode(b, sizeof b, &g, &why), -EINVAL);   /* checksum */
    ck_assert_str_eq(why, "header checksum mismatch");
    reseal(b);
    ck_assert_int_eq(ovl_header_decode(b, sizeof b, &g, &why), -EINVAL);
    ck_assert_str_eq(why, "base path contains a NUL byte");
    ovl_header_encode(&h, b);
    ck_assert_int_eq(ovl_header_decode(b, OVL_HDR_SIZE - 1, &g, &why), -EINVAL);
    ck_assert_str_eq(why, "header truncated");
    b[16] ^= 1;                         /* any flipped bit */
    ck_assert_int_eq(ovl_header_decode(b, sizeof b, &g, &why), -EINVAL);
}
END_TEST

START_TEST(header_empty_path_ok)
{
    struct ovl_header h, g;
    struct ovl_base_id id = { .size = 8192 };
    ck_assert_int_eq(ovl_header_init(&h, &id, NULL), 0);
    uint8_t b[OVL_HDR_SIZE];
    ovl_header_encode(&h, b);
    ck_assert_int_eq(ovl_header_decode(b, sizeof b, &g, NULL), 0);
    ck_assert_str_eq(g.base_path, "");
}
END_TEST

/* ---------------- bitmap ---------------- */

START_TEST(bitmap_ops)
{
    uint64_t bm[3] = { 0 };
    const uint64_t n = 130;
    ck_assert_uint_eq(ovl_bitmap_words(n), 3);
    ck_assert_uint_eq(ovl_bitmap_words(128), 2);
    ck_assert_int_eq(ovl_bit_set(bm, n, 0), 0);
    ck_assert_int_eq(ovl_bit_set(bm, n, 63), 0);
    ck_assert_int_eq(ovl_bit_set(bm, n, 64), 0);
    ck_assert_int_eq(ovl_bit_set(bm, n, 129), 0);
    ck_assert_int_eq(ovl_bit_set(bm, n, 130), -ERANGE);
    ck_assert_int_eq(ovl_bit_set(bm, n, UINT64_MAX), -ERANGE);
    ck_assert(ovl_bit_get(bm, n, 63));
    ck_assert(!ovl_bit_get(bm, n, 62));
    ck_assert(!ovl_bit_get(bm, n, 130));
    ck_assert(!ovl_bit_get(bm, n, UINT64_MAX));
    ck_assert_uint_eq(ovl_bit_count(bm, n), 4);
    ck_assert(ovl_bitmap_tail_clean(bm, n));
    bm[2] |= 1ull << 5;                 /* block 133: past the end */
    ck_assert(!ovl_bitmap_tail_clean(bm, n));
    ck_assert_uint_eq(ovl_bit_count(bm, n), 4);     /* not counted */
    uint64_t full[2] = { ~0ull, ~0ull };
    ck_assert(ovl_bitmap_tail_clean(full, 128));
    ck_assert_uint_eq(ovl_bit_count(full, 128), 128);
}
END_TEST

/* ---------------- extents ---------------- */

START_TEST(extent_split)
{
    /* 8 blocks, blocks 2, 3 and 6 in the overlay; the disk ends mid-block 7. */
    uint64_t bm[1] = { 1u << 2 | 1u << 3 | 1u << 6 };
    const uint64_t vs = 7 * 4096 + 1000, nb = 8;
    struct ovl_extent e;
    ck_assert_int_eq(ovl_next_extent(bm, nb, vs, 0, vs, &e), 0);
    ck_assert_uint_eq(e.off, 0); ck_assert_uint_eq(e.len, 8192); ck_assert(!e.in_overlay);
    ck_assert_int_eq(ovl_next_extent(bm, nb, vs, 8192, vs - 8192, &e), 0);
    ck_assert_uint_eq(e.len, 8192); ck_assert(e.in_overlay);
    ck_assert_int_eq(ovl_next_extent(bm, nb, vs, 16384, vs - 16384, &e), 0);
    ck_assert_uint_eq(e.len, 8192); ck_assert(!e.in_overlay);
    ck_assert_int_eq(ovl_next_extent(bm, nb, vs, 6 * 4096, vs - 6 * 4096, &e), 0);
    ck_assert_uint_eq(e.len, 4096); ck_assert(e.in_overlay);
    ck_assert_int_eq(ovl_next_extent(bm, nb, vs, 7 * 4096, 1000, &e), 0);
    ck_assert_uint_eq(e.len, 1000); ck_assert(!e.in_overlay);
    /* Unaligned, inside one block, clipped to the request. */
    ck_assert_int_eq(ovl_next_extent(bm, nb, vs, 8192 + 100, 50, &e), 0);
    ck_assert_uint_eq(e.off, 8292); ck_assert_uint_eq(e.len, 50); ck_assert(e.in_overlay);
    /* Unaligned start, run to the block boundary. */
    ck_assert_int_eq(ovl_next_extent(bm, nb, vs, 512, 10000, &e), 0);
    ck_assert_uint_eq(e.len, 8192 - 512); ck_assert(!e.in_overlay);
    /* Walking a whole request covers it exactly. */
    uint64_t off = 1, len = vs - 1, sum = 0;
    int n = 0;
    while (len) {
        ck_assert_int_eq(ovl_next_extent(bm, nb, vs, off, len, &e), 0);
        ck_assert_uint_eq(e.off, off);
        sum += e.len; off += e.len; len -= e.len; n++;
    }
    ck_assert_uint_eq(sum, vs - 1);
    ck_assert_int_eq(n, 5);
}
END_TEST

START_TEST(extent_bad_ranges)
{
    uint64_t bm[1] = { 0 };
    struct ovl_extent e;
    ck_assert_int_eq(ovl_next_extent(bm, 2, 8192, 0, 0, &e), -ERANGE);
    ck_assert_int_eq(ovl_next_extent(bm, 2, 8192, 8192, 1, &e), -ERANGE);
    ck_assert_int_eq(ovl_next_extent(bm, 2, 8192, 4096, 4097, &e), -ERANGE);
    ck_assert_int_eq(ovl_next_extent(bm, 2, 8192, UINT64_MAX, 2, &e), -ERANGE);
    ck_assert_int_eq(ovl_next_extent(bm, 2, 8192, 1, UINT64_MAX, &e), -ERANGE);
    ck_assert_int_eq(ovl_next_extent(bm, 3, 8192, 0, 512, &e), -ERANGE);   /* nblocks mismatch */
    ck_assert_int_eq(ovl_next_extent(bm, 2, 8192, 0, 8192, &e), 0);
    ck_assert_uint_eq(e.len, 8192);
}
END_TEST

/* ---------------- I/O layer on temporary files ---------------- */

static char dir[64], base_p[128], ovl_p[128], clone_p[128];

static void mkfiles(uint64_t size)
{
    snprintf(dir, sizeof dir, "/tmp/moat-ovl-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(base_p, sizeof base_p, "%s/base.img", dir);
    snprintf(ovl_p, sizeof ovl_p, "%s/o.ovl", dir);
    snprintf(clone_p, sizeof clone_p, "%s/c.ovl", dir);
    int fd = open(base_p, O_RDWR | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    uint8_t *b = malloc(size);
    for (uint64_t i = 0; i < size; i++)
        b[i] = (uint8_t)(i * 7 + i / 4096);
    ck_assert_int_eq(pwrite(fd, b, size, 0), (ssize_t)size);
    free(b);
    close(fd);
}

static void rmfiles(void)
{
    unlink(base_p); unlink(ovl_p); unlink(clone_p);
    rmdir(dir);
}

static uint8_t base_byte(uint64_t i) { return (uint8_t)(i * 7 + i / 4096); }

static int rd(struct ovl_disk *d, void *buf, size_t len, uint64_t off)
{
    struct iovec v = { buf, len };
    return ovl_preadv(d, &v, 1, off);
}

static int wr(struct ovl_disk *d, const void *buf, size_t len, uint64_t off)
{
    struct iovec v = { (void *)buf, len };
    return ovl_pwritev(d, &v, 1, off);
}

static uint64_t file_hash(const char *p)
{
    int fd = open(p, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    uint8_t buf[65536];
    uint64_t h = OVL_HASH_INIT;
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0)
        h = ovl_hash(h, buf, (size_t)n);
    close(fd);
    return h;
}

static struct ovl_disk *open_new(uint64_t size)
{
    char why[256];
    mkfiles(size);
    enum ovl_kind k;
    ck_assert_int_eq(ovl_create(base_p, ovl_p, OVL_CREATE_NO_REFLINK, &k, why, sizeof why), 0);
    ck_assert_int_eq(k, OVL_KIND_MOAT);
    struct ovl_disk *d;
    ck_assert_msg(ovl_open(base_p, ovl_p, 0, &d, why, sizeof why) == 0, "%s", why);
    return d;
}

START_TEST(io_copy_on_write)
{
    const uint64_t size = 64 * 4096 + 1536;   /* the last block is partial */
    struct ovl_disk *d = open_new(size);
    uint64_t bh = file_hash(base_p);
    ck_assert_uint_eq(ovl_size(d), size);
    ck_assert_uint_eq(ovl_allocated(d), 0);
    /* A partial write inside block 3 copies the block up. */
    uint8_t w[10000];
    memset(w, 0xab, sizeof w);
    ck_assert_int_eq(wr(d, w, 100, 3 * 4096 + 200), 0);
    /* An unaligned write across blocks 10..12 (partial head and tail). */
    ck_assert_int_eq(wr(d, w, 9000, 10 * 4096 + 100), 0);
    /* The partial last block of the disk. */
    ck_assert_int_eq(wr(d, w, 512, size - 512), 0);
    ck_assert_uint_eq(ovl_allocated(d), 1 + 3 + 1);
    ck_assert(ovl_block_allocated(d, 3) && ovl_block_allocated(d, 11) && !ovl_block_allocated(d, 4));
    /* Read everything back in one scattered request. */
    uint8_t *all = malloc(size);
    struct iovec v[3] = { { all, 1000 }, { all + 1000, 50000 }, { all + 51000, size - 51000 } };
    ck_assert_int_eq(ovl_preadv(d, v, 3, 0), 0);
    for (uint64_t i = 0; i < size; i++) {
        bool mine = (i >= 3 * 4096 + 200 && i < 3 * 4096 + 300) ||
                    (i >= 10 * 4096 + 100 && i < 10 * 4096 + 9100) || i >= size - 512;
        ck_assert_msg(all[i] == (mine ? 0xab : base_byte(i)), "byte %lu", (unsigned long)i);
    }
    /* Past the end. */
    ck_assert_int_eq(rd(d, w, 1024, size - 512), -EINVAL);
    ck_assert_int_eq(wr(d, w, 1, size), -EINVAL);
    ck_assert_int_eq(ovl_close(d), 0);
    ck_assert_uint_eq(file_hash(base_p), bh);        /* the base is never written */
    /* Reopened (the path recorded in the header): the same view. */
    char why[256];
    ck_assert_msg(ovl_open(NULL, ovl_p, OVL_OPEN_READ_ONLY, &d, why, sizeof why) == 0, "%s", why);
    uint8_t *again = malloc(size);
    ck_assert_int_eq(rd(d, again, size, 0), 0);
    ck_assert(memcmp(all, again, size) == 0);
    ck_assert_uint_eq(ovl_allocated(d), 5);
    ck_assert_int_eq(wr(d, w, 1, 0), -EROFS);
    ovl_close(d);
    free(all);
    free(again);
    rmfiles();
}
END_TEST

START_TEST(io_zero_and_sparse)
{
    const uint64_t size = 256 * 4096;
    struct ovl_disk *d = open_new(size);
    ck_assert_int_eq(ovl_zero(d, 4096 + 10, 3 * 4096), 0);     /* blocks 1..4, partial ends */
    uint8_t b[5 * 4096];
    ck_assert_int_eq(rd(d, b, sizeof b, 0), 0);
    for (uint64_t i = 0; i < sizeof b; i++) {
        bool z = i >= 4096 + 10 && i < 4 * 4096 + 10;
        ck_assert_msg(b[i] == (z ? 0 : base_byte(i)), "byte %lu", (unsigned long)i);
    }
    ck_assert_uint_eq(ovl_allocated(d), 4);
    /* Zeroing an allocated block again, and writing over a zeroed one. */
    ck_assert_int_eq(ovl_zero(d, 0, 8192), 0);
    ck_assert_int_eq(wr(d, "hello", 5, 4096), 0);
    ck_assert_int_eq(rd(d, b, 8192, 0), 0);
    ck_assert_int_eq(b[0], 0);
    ck_assert(memcmp(b + 4096, "hello", 5) == 0);
    ck_assert_int_eq(b[4096 + 5], 0);
    ck_assert_int_eq(ovl_close(d), 0);
    /* The overlay file is sparse: far less than the 1 MiB it spans. */
    struct stat st;
    ck_assert_int_eq(stat(ovl_p, &st), 0);
    ck_assert_int_lt(st.st_blocks * 512, 128 * 1024);
    rmfiles();
}
END_TEST

START_TEST(io_changed_base_refused)
{
    struct ovl_disk *d = open_new(16 * 4096);
    ovl_close(d);
    int fd = open(base_p, O_WRONLY);
    ck_assert_int_eq(pwrite(fd, "x", 1, 100), 1);
    close(fd);
    char why[256] = "";
    ck_assert_int_eq(ovl_open(base_p, ovl_p, 0, &d, why, sizeof why), -ESTALE);
    ck_assert_ptr_nonnull(strstr(why, "changed"));
    /* A base of another size too. */
    ck_assert_int_eq(truncate(base_p, 17 * 4096), 0);
    ck_assert_int_eq(ovl_open(base_p, ovl_p, 0, &d, why, sizeof why), -ESTALE);
    rmfiles();
}
END_TEST

/* Rewrite an overlay file's header in place: its base path (if path), its
 * version (if version), as someone forging one would (the checksum redone). */
static void edit_header(const char *ovl, const char *path, uint32_t version)
{
    int fd = open(ovl, O_RDWR);
    ck_assert_int_ge(fd, 0);
    uint8_t b[OVL_HDR_SIZE];
    ck_assert_int_eq(pread(fd, b, sizeof b, 0), (ssize_t)sizeof b);
    struct ovl_header h;
    ck_assert_int_eq(ovl_header_decode(b, sizeof b, &h, NULL), 0);
    if (path)
        snprintf(h.base_path, sizeof h.base_path, "%s", path);
    if (version)
        h.version = version;
    ovl_header_encode(&h, b);
    ck_assert_int_eq(pwrite(fd, b, sizeof b, 0), (ssize_t)sizeof b);
    close(fd);
}

/* A forged base: another file of the same size and the same first MiB
 * (one byte differs in its last MiB), named by a rewritten header or given
 * as the drive's base, is refused, by `moat disk info/export/diff`'s open
 * (the recorded path, read-only, unlocked) and by the drive open (a base
 * given, as moat run --drive BASE,overlay=FILE). */
START_TEST(io_forged_base_refused)
{
    const uint64_t size = 3ull << 20;
    struct ovl_disk *d = open_new(size);
    ovl_close(d);
    char forged[300], why[512] = "";
    snprintf(forged, sizeof forged, "%s/forged.img", dir);
    int in = open(base_p, O_RDONLY), out = open(forged, O_RDWR | O_CREAT | O_TRUNC, 0644);
    ck_assert(in >= 0 && out >= 0);
    uint8_t *b = malloc(size);
    ck_assert_int_eq(pread(in, b, size, 0), (ssize_t)size);
    b[size - 100] ^= 0x55;
    ck_assert_int_eq(pwrite(out, b, size, 0), (ssize_t)size);
    free(b);
    close(in);
    close(out);
    edit_header(ovl_p, forged, 0);
    ck_assert_int_eq(ovl_open(NULL, ovl_p, OVL_OPEN_READ_ONLY | OVL_OPEN_NO_LOCK, &d, why, sizeof why), -ESTALE);
    ck_assert_msg(strstr(why, forged) && strstr(why, "refusing"), "%s", why);
    ck_assert_int_eq(ovl_open(forged, ovl_p, 0, &d, why, sizeof why), -ESTALE);
    /* The real base still opens it. */
    ck_assert_msg(ovl_open(base_p, ovl_p, 0, &d, why, sizeof why) == 0, "%s", why);
    ovl_close(d);
    /* A change in the middle (neither first nor last MiB) is not seen: the
     * identity is a sample (docs/disk-overlay.md). */
    int fd = open(base_p, O_WRONLY);
    ck_assert_int_eq(pwrite(fd, "m", 1, 3ull << 19), 1);
    close(fd);
    ck_assert_msg(ovl_open(base_p, ovl_p, 0, &d, why, sizeof why) == 0, "%s", why);
    ovl_close(d);
    unlink(forged);
    rmfiles();
}
END_TEST

/* A version 1 overlay is refused with the fix named; OVL_OPEN_UPGRADE
 * checks its base by the old identity (a wrong base refused) and records
 * the SHA-256, after which it opens normally, and is refused a second
 * upgrade. */
START_TEST(io_v1_refused_then_upgraded)
{
    struct ovl_disk *d = open_new(16 * 4096 + 512);
    uint8_t blk[4096];
    memset(blk, 0xab, sizeof blk);
    ck_assert_int_eq(wr(d, blk, sizeof blk, 4096), 0);
    ovl_close(d);
    edit_header(ovl_p, NULL, OVL_VERSION_V1);
    char why[512] = "";
    ck_assert_int_eq(ovl_open(base_p, ovl_p, 0, &d, why, sizeof why), -EPROTO);
    ck_assert_msg(strstr(why, "moat disk upgrade"), "%s", why);
    ck_assert_int_eq(ovl_open(NULL, ovl_p, OVL_OPEN_READ_ONLY | OVL_OPEN_NO_LOCK, &d, why, sizeof why), -EPROTO);
    ck_assert_int_eq(ovl_open(NULL, ovl_p, OVL_OPEN_UPGRADE | OVL_OPEN_READ_ONLY, &d, why, sizeof why), -EPROTO);
    /* another base for the upgrade: the old identity differs */
    ck_assert_int_eq(ovl_open(clone_p, ovl_p, OVL_OPEN_UPGRADE, &d, why, sizeof why), -ENOENT);
    int fd = open(base_p, O_WRONLY);
    ck_assert_int_eq(pwrite(fd, "x", 1, 10), 1);
    close(fd);
    ck_assert_int_eq(ovl_open(NULL, ovl_p, OVL_OPEN_UPGRADE, &d, why, sizeof why), -ESTALE);
    fd = open(base_p, O_WRONLY);
    uint8_t orig = base_byte(10);
    ck_assert_int_eq(pwrite(fd, &orig, 1, 10), 1);
    close(fd);
    ck_assert_msg(ovl_open(NULL, ovl_p, OVL_OPEN_UPGRADE, &d, why, sizeof why) == 0, "%s", why);
    ck_assert_uint_eq(ovl_hdr(d)->version, OVL_VERSION);
    ovl_close(d);
    ck_assert_msg(ovl_open(NULL, ovl_p, 0, &d, why, sizeof why) == 0, "%s", why);
    ck_assert_uint_eq(ovl_hdr(d)->version, OVL_VERSION);
    uint8_t got[4096];
    ck_assert_int_eq(rd(d, got, sizeof got, 4096), 0);
    ck_assert_mem_eq(got, blk, sizeof blk);          /* the data kept */
    ovl_close(d);
    ck_assert_int_eq(ovl_open(NULL, ovl_p, OVL_OPEN_UPGRADE, &d, why, sizeof why), -EALREADY);
    rmfiles();
}
END_TEST

START_TEST(io_locks_and_bad_files)
{
    struct ovl_disk *d = open_new(16 * 4096), *e;
    char why[256] = "";
    ck_assert_int_eq(ovl_open(base_p, ovl_p, 0, &e, why, sizeof why), -EWOULDBLOCK);
    ck_assert_ptr_nonnull(strstr(why, "in use"));
    ck_assert_int_eq(ovl_open(base_p, ovl_p, OVL_OPEN_NO_LOCK | OVL_OPEN_READ_ONLY, &e, why, sizeof why), 0);
    ovl_close(e);
    ovl_close(d);
    /* ovl_create refuses an existing file. */
    ck_assert_int_eq(ovl_create(base_p, ovl_p, 0, NULL, why, sizeof why), -EEXIST);
    /* A corrupted header is refused with a reason. */
    int fd = open(ovl_p, O_WRONLY);
    ck_assert_int_eq(pwrite(fd, "\x03", 1, 8), 1);
    close(fd);
    ck_assert_int_eq(ovl_open(base_p, ovl_p, 0, &d, why, sizeof why), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "malformed"));
    /* A bitmap bit past the end of the disk. */
    unlink(ovl_p);
    ck_assert_int_eq(ovl_create(base_p, ovl_p, OVL_CREATE_NO_REFLINK, NULL, why, sizeof why), 0);
    fd = open(ovl_p, O_WRONLY);
    uint8_t bad = 0x80;                 /* bit 23 of 16 blocks */
    ck_assert_int_eq(pwrite(fd, &bad, 1, 4096 + 2), 1);
    close(fd);
    ck_assert_int_eq(ovl_open(base_p, ovl_p, 0, &d, why, sizeof why), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "past the end"));
    /* Missing base. */
    unlink(ovl_p);
    ck_assert_int_eq(ovl_create("/nonexistent/base", ovl_p, 0, NULL, why, sizeof why), -ENOENT);
    rmfiles();
}
END_TEST

START_TEST(io_disk_lock_waits_then_refuses)
{
    /* A holder that goes away within the wait: the lock is taken. */
    char path[] = "/tmp/moat-disklock-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    int holder = open(path, O_RDWR);
    ck_assert_int_ge(holder, 0);
    ck_assert_int_eq(disk_lock(holder, true), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        usleep(200 * 1000);
        _exit(close(holder) == 0 ? 0 : 1);
    }
    close(holder);          /* the child's copy keeps the lock for 200 ms */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_assert_int_eq(disk_lock(fd, true), 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double waited = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    ck_assert(waited >= 0.1 && waited < DISK_LOCK_WAIT_MS / 1000.0);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* A holder that stays: refused after the wait; a shared lock too. */
    int other = open(path, O_RDONLY);
    ck_assert_int_ge(other, 0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_assert_int_eq(disk_lock(other, false), -EWOULDBLOCK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    waited = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    ck_assert(waited >= DISK_LOCK_WAIT_MS / 1000.0);
    /* Shared with shared is no conflict. */
    close(fd);
    fd = open(path, O_RDONLY);
    ck_assert_int_eq(disk_lock(fd, false), 0);
    ck_assert_int_eq(disk_lock(other, false), 0);
    /* Not a lockable descriptor: the error at once. */
    ck_assert_int_eq(disk_lock(-1, true), -EBADF);
    close(fd);
    close(other);
    unlink(path);
}
END_TEST

START_TEST(io_open_creates)
{
    mkfiles(8 * 4096);
    char why[256];
    struct ovl_disk *d;
    ck_assert_int_eq(ovl_open(base_p, ovl_p, OVL_OPEN_CREATE | OVL_OPEN_NO_REFLINK, &d, why, sizeof why), 0);
    ck_assert_int_eq(ovl_kind_of(d), OVL_KIND_MOAT);
    ck_assert_ptr_nonnull(ovl_hdr(d));
    ovl_close(d);
    /* Auto (reflink allowed): either kind, same view. */
    unlink(ovl_p);
    ck_assert_int_eq(ovl_open(base_p, ovl_p, OVL_OPEN_CREATE, &d, why, sizeof why), 0);
    ck_assert_int_eq(wr(d, "zz", 2, 5), 0);
    uint8_t b[16];
    ck_assert_int_eq(rd(d, b, 16, 0), 0);
    ck_assert_int_eq(b[4], base_byte(4));
    ck_assert_int_eq(b[5], 'z');
    ck_assert_int_eq(b[7], base_byte(7));
    ovl_close(d);
    rmfiles();
}
END_TEST

/* Crash safety: after a SIGKILL-like exit (no close), every flushed write
 * is there and an unflushed copy-up is not marked in the bitmap on disk. */
START_TEST(io_crash_keeps_flushed)
{
    struct ovl_disk *d = open_new(64 * 4096);
    ovl_close(d);
    pid_t p = fork();
    if (p == 0) {
        char why[256];
        if (ovl_open(base_p, ovl_p, 0, &d, why, sizeof why) < 0)
            _exit(2);
        for (int i = 0; i < 10; i++) {
            uint8_t rec[512];
            memset(rec, 0x40 + i, sizeof rec);
            if (wr(d, rec, sizeof rec, (uint64_t)i * 4096 + 512) < 0 || ovl_flush(d) < 0)
                _exit(3);
        }
        uint8_t late[4096];
        memset(late, 0xee, sizeof late);
        if (wr(d, late, sizeof late, 40 * 4096) < 0)
            _exit(4);
        _exit(0);                       /* no flush, no close */
    }
    int st;
    ck_assert_int_eq(waitpid(p, &st, 0), p);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char why[256];
    ck_assert_msg(ovl_open(base_p, ovl_p, 0, &d, why, sizeof why) == 0, "%s", why);
    for (int i = 0; i < 10; i++) {
        uint8_t b[4096];
        ck_assert_int_eq(rd(d, b, sizeof b, (uint64_t)i * 4096), 0);
        for (unsigned j = 0; j < 4096; j++) {
            uint64_t at = (uint64_t)i * 4096 + j;
            uint8_t want = j >= 512 && j < 1024 ? (uint8_t)(0x40 + i) : base_byte(at);
            ck_assert_msg(b[j] == want, "record %d byte %u", i, j);
        }
    }
    ck_assert(!ovl_block_allocated(d, 40));      /* never flushed: not on disk */
    uint8_t b[16];
    ck_assert_int_eq(rd(d, b, 16, 40 * 4096), 0);
    ck_assert_int_eq(b[0], base_byte(40 * 4096));
    ck_assert_uint_eq(ovl_allocated(d), 10);
    ovl_close(d);
    rmfiles();
}
END_TEST

START_TEST(io_clone)
{
    struct ovl_disk *d = open_new(1024 * 4096);
    ck_assert_int_eq(wr(d, "abc", 3, 500 * 4096 + 7), 0);
    ck_assert_int_eq(ovl_close(d), 0);
    char why[256];
    ck_assert_msg(ovl_clone(ovl_p, clone_p, why, sizeof why) == 0, "%s", why);
    ck_assert_int_eq(ovl_clone(ovl_p, clone_p, why, sizeof why), -EEXIST);
    ck_assert_uint_eq(file_hash(ovl_p), file_hash(clone_p));
    struct stat a, c;
    ck_assert_int_eq(stat(ovl_p, &a), 0);
    ck_assert_int_eq(stat(clone_p, &c), 0);
    ck_assert_int_eq(a.st_size, c.st_size);
    ck_assert_int_lt(c.st_blocks * 512, 256 * 1024);    /* still sparse */
    ck_assert_msg(ovl_open(NULL, clone_p, 0, &d, why, sizeof why) == 0, "%s", why);
    uint8_t b[3];
    ck_assert_int_eq(rd(d, b, 3, 500 * 4096 + 7), 0);
    ck_assert(memcmp(b, "abc", 3) == 0);
    ovl_close(d);
    rmfiles();
}
END_TEST

static unsigned dir_entries(void)
{
    DIR *dd = opendir(dir);
    ck_assert_ptr_nonnull(dd);
    unsigned n = 0;
    struct dirent *e;
    while ((e = readdir(dd)))
        n += e->d_name[0] != '.';
    closedir(dd);
    return n;
}

/* New overlays and clones are private (0600: guest data) and appear only
 * complete: no temporary file is left, and a failed copy leaves nothing. */
START_TEST(io_new_files_private_and_whole)
{
    struct ovl_disk *d = open_new(64 * 4096);
    ck_assert_int_eq(ovl_close(d), 0);
    char why[256];
    ck_assert_msg(ovl_clone(ovl_p, clone_p, why, sizeof why) == 0, "%s", why);
    struct stat a, c;
    ck_assert_int_eq(stat(ovl_p, &a), 0);
    ck_assert_int_eq(stat(clone_p, &c), 0);
    ck_assert_uint_eq(a.st_mode & 0777, 0600);
    ck_assert_uint_eq(c.st_mode & 0777, 0600);
    ck_assert_uint_eq(dir_entries(), 3);          /* base, overlay, clone */
    /* A source that is not an overlay's file: nothing appears. */
    char bad[160];
    snprintf(bad, sizeof bad, "%s/missing", dir);
    char dst[160];
    snprintf(dst, sizeof dst, "%s/clone2", dir);
    ck_assert_int_eq(ovl_clone(bad, dst, why, sizeof why), -ENOENT);
    ck_assert_int_eq(ovl_create(bad, dst, OVL_CREATE_NO_REFLINK, NULL, why, sizeof why), -ENOENT);
    ck_assert_uint_eq(dir_entries(), 3);
    ck_assert_int_eq(access(dst, F_OK), -1);
    rmfiles();
}
END_TEST

/* ---------------- the snapshot's drive section with an overlay ---------------- */


static Suite *suite(void)
{
    Suite *s = suite_create("overlay");
    TCase *t = tcase_create("pure");
    tcase_add_test(t, layout_sizes);
    tcase_add_test(t, header_roundtrip);
    tcase_add_test(t, header_init_refuses);
    tcase_add_test(t, header_v1);
    tcase_add_test(t, header_not_overlay);
    tcase_add_loop_test(t, header_malformed_field, 0, (int)(sizeof muts / sizeof muts[0]));
    tcase_add_test(t, header_path_nul_and_checksum);
    tcase_add_test(t, header_empty_path_ok);
    tcase_add_test(t, bitmap_ops);
    tcase_add_test(t, extent_split);
    tcase_add_test(t, extent_bad_ranges);
    suite_add_tcase(s, t);
    TCase *io = tcase_create("io");
    tcase_set_timeout(io, 60);
    tcase_add_test(io, io_copy_on_write);
    tcase_add_test(io, io_zero_and_sparse);
    tcase_add_test(io, io_changed_base_refused);
    tcase_add_test(io, io_forged_base_refused);
    tcase_add_test(io, io_v1_refused_then_upgraded);
    tcase_add_test(io, io_locks_and_bad_files);
    tcase_add_test(io, io_disk_lock_waits_then_refuses);
    tcase_add_test(io, io_open_creates);
    tcase_add_test(io, io_crash_keeps_flushed);
    tcase_add_test(io, io_clone);
    tcase_add_test(io, io_new_files_private_and_whole);
    suite_add_tcase(s, io);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
