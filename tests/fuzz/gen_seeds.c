/* Writes the hand-made seed inputs of the fuzz targets (deterministic):
 *   build/fuzz/gen_seeds tests/fuzz/corpus      (make fuzz-seeds)
 * Formats are described at the top of each tests/fuzz/fuzz_X.c. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *root;

static void put(const char *target, const char *name, const uint8_t *b, size_t n)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", root, target);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/%s/seed-%s", root, target, name);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(b, 1, n, f) != n || fclose(f)) {
        perror(p);
        exit(1);
    }
}

static void le(uint8_t *p, uint64_t v, int n) { for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> 8 * i); }

/* ---- virtq: 5-byte header then RAM image; desc 0x0, avail 0x100, used 0x200 ---- */
static uint8_t vq[5 + 0x1000];
static size_t vq_len;

static void vq_begin(uint8_t feat, uint8_t log2sz, uint8_t maxseg, uint16_t start)
{
    memset(vq, 0, sizeof vq);
    vq[0] = feat; vq[1] = log2sz; vq[2] = maxseg; le(vq + 3, start, 2);
    vq_len = 5 + 0x300;
}
static void vq_desc(uint64_t table, unsigned i, uint64_t addr, uint32_t len, uint16_t fl, uint16_t next)
{
    uint8_t *d = vq + 5 + table + 16 * i;
    le(d, addr, 8); le(d + 8, len, 4); le(d + 12, fl, 2); le(d + 14, next, 2);
    if (5 + table + 16 * (i + 1) > vq_len)
        vq_len = 5 + table + 16 * (i + 1);
}
static void vq_avail(unsigned size, uint16_t idx, uint16_t head)
{
    uint16_t cur; memcpy(&cur, vq + 5 + 0x102, 2);
    (void)idx;
    le(vq + 5 + 0x104 + 2 * (cur % size), head, 2);
    le(vq + 5 + 0x102, (uint16_t)(cur + 1), 2);
}

static void seeds_virtq(void)
{
    /* simple: header + data + status */
    vq_begin(0, 4, 31, 0);
    vq_desc(0, 0, 0x400, 16, 1, 1);
    vq_desc(0, 1, 0x500, 512, 1 | 2, 2);
    vq_desc(0, 2, 0x700, 1, 2, 0);
    vq_avail(16, 0, 0);
    put("virtq", "simple", vq, vq_len);

    /* indirect table at 0x300 */
    vq_begin(1, 4, 31, 0);
    vq_desc(0x300, 0, 0x400, 16, 1, 1);
    vq_desc(0x300, 1, 0x500, 1024, 1, 2);
    vq_desc(0x300, 2, 0x700, 1, 2, 0);
    vq_desc(0, 3, 0x300, 48, 4, 0);
    vq_avail(16, 0, 3);
    put("virtq", "indirect", vq, vq_len);

    /* several chains, wrap-around of the avail index, EVENT_IDX */
    vq_begin(2, 3, 4, 0xfffe);
    le(vq + 5 + 0x102, 0xfffe, 2);
    for (unsigned i = 0; i < 4; i++) {
        vq_desc(0, i, 0x400 + 64 * i, 64, i & 1 ? 2 : 0, 0);
        vq_avail(8, 0, (uint16_t)i);
    }
    le(vq + 5 + 0x104 + 2 * 8, 1, 2);       /* used_event */
    put("virtq", "wrap-event-idx", vq, vq_len);

    /* long chain through all 16 descriptors, small caller array */
    vq_begin(0, 4, 7, 0);
    for (unsigned i = 0; i < 16; i++)
        vq_desc(0, i, 0x400 + 16 * i, 16, (uint16_t)((i < 15 ? 1 : 0) | (i >= 8 ? 2 : 0)), (uint16_t)(i + 1));
    vq_avail(16, 0, 0);
    put("virtq", "long-chain", vq, vq_len);

    /* loop */
    vq_begin(1, 2, 31, 0);
    vq_desc(0, 0, 0x400, 8, 1, 1);
    vq_desc(0, 1, 0x400, 8, 1, 0);
    vq_avail(4, 0, 0);
    put("virtq", "loop", vq, vq_len);

    /* avail index jump */
    vq_begin(0, 4, 31, 0);
    le(vq + 5 + 0x102, 100, 2);
    put("virtq", "idx-jump", vq, vq_len);

    /* buffer straddling the two RAM regions */
    vq_begin(0, 4, 31, 0);
    vq_desc(0, 0, 0x3ff0, 32, 0, 0);
    vq_avail(16, 0, 0);
    put("virtq", "straddle", vq, vq_len);
}

/* ---- blk_req: 4-byte header, n x 5-byte segments, RAM image ---- */
static uint8_t bq[4 + 16 * 5 + 0x1100];
static size_t bq_nseg, bq_ram_len;
static uint8_t bq_ram[0x1100];
static uint8_t bq_segs[16 * 5];

static void bq_begin(uint8_t flags, uint16_t cap)
{
    memset(bq_ram, 0, sizeof bq_ram);
    bq_nseg = 0; bq_ram_len = 0x200;
    bq[0] = flags; le(bq + 1, cap, 2);
}
static void bq_seg(uint16_t off, uint16_t len, int w)
{
    uint8_t *s = bq_segs + 5 * bq_nseg++;
    le(s, off, 2); le(s + 2, len, 2); s[4] = (uint8_t)w;
    if ((size_t)off + len > bq_ram_len && (size_t)off + len <= sizeof bq_ram)
        bq_ram_len = (size_t)off + len;
}
static void bq_hdr(uint16_t at, uint32_t type, uint64_t sector)
{
    le(bq_ram + at, type, 4); le(bq_ram + at + 8, sector, 8);
}
static void bq_put(const char *name)
{
    bq[3] = (uint8_t)bq_nseg;
    memcpy(bq + 4, bq_segs, 5 * bq_nseg);
    memcpy(bq + 4 + 5 * bq_nseg, bq_ram, bq_ram_len);
    put("blk_req", name, bq, 4 + 5 * bq_nseg + bq_ram_len);
}

static void seeds_blk(void)
{
    bq_begin(0, 64); bq_hdr(0x100, 0, 2);
    bq_seg(0x100, 16, 0); bq_seg(0x200, 1024, 1); bq_seg(0x1000, 1, 1);
    bq_put("in");

    bq_begin(0, 64); bq_hdr(0x100, 1, 60);
    bq_seg(0x100, 16, 0); bq_seg(0x200, 512, 0); bq_seg(0x600, 1536, 0); bq_seg(0x1000, 1, 1);
    bq_put("out");

    bq_begin(1, 64); bq_hdr(0x100, 1, 0);
    bq_seg(0x100, 16, 0); bq_seg(0x200, 512, 0); bq_seg(0x1000, 1, 1);
    bq_put("out-read-only");

    bq_begin(0, 64); bq_hdr(0x100, 4, 0);
    bq_seg(0x100, 16, 0); bq_seg(0x1000, 1, 1);
    bq_put("flush");

    bq_begin(0, 64); bq_hdr(0x100, 8, 0);
    bq_seg(0x100, 16, 0); bq_seg(0x200, 20, 1); bq_seg(0x1000, 1, 1);
    bq_put("get-id");

    bq_begin(2, 64); bq_hdr(0x100, 11, 0);
    le(bq_ram + 0x110, 3, 8); le(bq_ram + 0x118, 8, 4);
    le(bq_ram + 0x120, 40, 8); le(bq_ram + 0x128, 24, 4);
    bq_seg(0x100, 48, 0); bq_seg(0x1000, 1, 1);
    bq_put("discard");

    bq_begin(4, 64); bq_hdr(0x100, 13, 0);
    le(bq_ram + 0x110, 0, 8); le(bq_ram + 0x118, 64, 4); le(bq_ram + 0x11c, 1, 4);
    bq_seg(0x100, 32, 0); bq_seg(0x1000, 1, 1);
    bq_put("write-zeroes");

    /* header split over two segments, data and status in one */
    bq_begin(0, 64); bq_hdr(0x100, 0, 1);
    bq_seg(0x100, 7, 0); bq_seg(0x107, 9, 0); bq_seg(0x400, 513, 1);
    bq_put("any-layout");

    bq_begin(0, 64); bq_hdr(0x100, 0x77, 0);
    bq_seg(0x100, 16, 0); bq_seg(0x1000, 1, 1);
    bq_put("unsupported");
}


/* ---- virtio_mmio: 7-byte records {op, le16 off, le32 val} ---- */
static uint8_t mm[7 * 64];
static size_t mm_len;

static void mm_op(uint8_t op, uint16_t off, uint32_t v)
{
    uint8_t *r = mm + mm_len;
    r[0] = op; le(r + 1, off, 2); le(r + 3, v, 4);
    mm_len += 7;
}
static void mm_w(uint16_t off, uint32_t v) { mm_op(1 | 4, off, v); }   /* 32-bit write */
static void mm_r(uint16_t off) { mm_op(4, off, 0); }                   /* 32-bit read */

static void seeds_mmio(void)
{
    mm_len = 0;
    mm_r(0x000); mm_r(0x004); mm_r(0x008);
    mm_w(0x070, 1); mm_w(0x070, 3);
    mm_w(0x014, 0); mm_r(0x010); mm_w(0x014, 1); mm_r(0x010);
    mm_w(0x024, 0); mm_w(0x020, 0x30000000u | 0x3f);
    mm_w(0x024, 1); mm_w(0x020, 1);
    mm_w(0x070, 11); mm_r(0x070);
    mm_w(0x030, 0); mm_r(0x034); mm_w(0x038, 16);
    mm_w(0x080, 0x1000); mm_w(0x084, 0);
    mm_w(0x090, 0x2000); mm_w(0x094, 0);
    mm_w(0x0a0, 0x3000); mm_w(0x0a4, 0);
    mm_w(0x044, 1); mm_r(0x044);
    mm_w(0x070, 15);
    mm_w(0x050, 0);
    mm_op(8, 0, 1);                 /* device raises a used-buffer interrupt */
    mm_r(0x060); mm_w(0x064, 1);
    mm_op(8, 1, 0);                 /* config change */
    mm_r(0x0fc); mm_op(2, 0x100, 0);  /* 16-bit config read */
    mm_op(8, 2, 0);                 /* needs reset */
    mm_w(0x070, 0);
    put("virtio_mmio", "bring-up", mm, mm_len);

    mm_len = 0;
    mm_w(0x070, 2); mm_w(0x070, 1); mm_w(0x070, 15);    /* skips */
    mm_w(0x070, 3); mm_w(0x020, 0xffffffffu); mm_w(0x070, 11);   /* unoffered */
    mm_w(0x038, 0x10010); mm_w(0x044, 1);                         /* before FEATURES_OK */
    mm_op(1, 0x070, 0); mm_op(3, 0x071, 0);                      /* narrow writes */
    mm_w(0x070, 0x83);
    put("virtio_mmio", "illegal", mm, mm_len);
}

/* ---- passt_frame: [0] piece size, then 4-byte big-endian length + frame ---- */
static uint8_t pf[1 + 4 * 8 + 65554 + 2048];
static size_t pf_len;

static void pf_begin(uint8_t piece) { pf[0] = piece; pf_len = 1; }
static void pf_len32(uint32_t n)
{
    pf[pf_len++] = (uint8_t)(n >> 24); pf[pf_len++] = (uint8_t)(n >> 16);
    pf[pf_len++] = (uint8_t)(n >> 8); pf[pf_len++] = (uint8_t)n;
}
static void pf_frame(uint32_t n, uint8_t fill)
{
    pf_len32(n);
    for (uint32_t i = 0; i < n; i++)
        pf[pf_len++] = (uint8_t)(fill + i);
}

static void seeds_passt_frame(void)
{
    /* an ARP request, broadcast, whole */
    static const uint8_t arp[42] = {
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x52, 0x54, 0, 0x12, 0x34, 0x56, 0x08, 0x06,
        0, 1, 0x08, 0, 6, 4, 0, 1, 0x52, 0x54, 0, 0x12, 0x34, 0x56, 192, 0, 2, 2,
        0, 0, 0, 0, 0, 0, 192, 0, 2, 1 };
    pf_begin(0);
    pf_len32(sizeof arp);
    memcpy(pf + pf_len, arp, sizeof arp);
    pf_len += sizeof arp;
    put("passt_frame", "arp", pf, pf_len);

    /* two frames, 7-byte pieces: lengths and frames cut across pushes */
    pf_begin(7);
    pf_frame(60, 0x10);
    pf_frame(1514, 0x20);
    put("passt_frame", "two-split", pf, pf_len);

    /* many small frames, pushed a byte at a time */
    pf_begin(1);
    for (unsigned i = 1; i <= 8; i++)
        pf_frame(i, (uint8_t)i);
    put("passt_frame", "tiny-bytewise", pf, pf_len);

    /* the largest frame, then one more: the buffer compacts */
    pf_begin(255);
    pf_frame(65554, 0x33);
    pf_frame(100, 0x44);
    put("passt_frame", "max-then-small", pf, pf_len);

    /* a frame, then a zero length: an error after a good frame */
    pf_begin(3);
    pf_frame(20, 0x55);
    pf_len32(0);
    pf_frame(20, 0x66);
    put("passt_frame", "zero-len", pf, pf_len);

    /* one past the largest length */
    pf_begin(0);
    pf_len32(65555);
    pf_frame(10, 0x77);
    put("passt_frame", "too-long", pf, pf_len);

    /* a frame cut short at the end of the stream */
    pf_begin(16);
    pf_frame(64, 0x01);
    pf_len32(1000);
    for (unsigned i = 0; i < 300; i++)
        pf[pf_len++] = (uint8_t)i;
    put("passt_frame", "truncated", pf, pf_len);
}

int main(int argc, char **argv)
{
    root = argc > 1 ? argv[1] : "tests/fuzz/corpus";
    mkdir(root, 0755);
    seeds_virtq();
    seeds_blk();
    seeds_mmio();
    seeds_passt_frame();
    return 0;
}
