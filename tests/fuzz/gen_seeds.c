/* Writes the hand-made seed inputs of the fuzz targets (deterministic):
 *   build/fuzz/gen_seeds tests/fuzz/corpus      (make fuzz-seeds)
 * Formats are described at the top of each tests/fuzz/fuzz_X.c. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

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

/* ---- net_local: u16 length + frame records (tests/fuzz/fuzz_net_local.c) ---- */
static uint8_t nl[4096];
static size_t nl_len;

static void be(uint8_t *p, uint64_t v, int n) { for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> 8 * (n - 1 - i)); }

/* A guest's TCP segment to 169.254.169.254:80 from 10.0.2.15:40000. */
static void nl_seg(uint8_t flags, uint32_t seq, uint32_t ack, const char *d, int mss)
{
    size_t dl = d ? strlen(d) : 0, thl = mss ? 24 : 20, n = 14 + 20 + thl + dl;
    uint8_t *r = nl + nl_len;
    le(r, n, 2);
    uint8_t *f = r + 2;
    memset(f, 0, n);
    memcpy(f, "\x02\0\0\0\0\x01\x52\x54\0\x01\x02\x03", 12);
    be(f + 12, 0x0800, 2);
    f[14] = 0x45;
    be(f + 16, 20 + thl + dl, 2);
    f[22] = 64;
    f[23] = 6;
    be(f + 26, 0x0a00020f, 4);
    be(f + 30, 0xa9fea9fe, 4);
    uint8_t *t = f + 34;
    be(t, 40000, 2);
    be(t + 2, 80, 2);
    be(t + 4, seq, 4);
    be(t + 8, ack, 4);
    t[12] = (uint8_t)((thl / 4) << 4);
    t[13] = flags;
    be(t + 14, 65535, 2);
    if (mss) {
        t[20] = 2; t[21] = 4;
        be(t + 22, (uint64_t)mss, 2);
    }
    if (dl)
        memcpy(t + thl, d, dl);
    nl_len += 2 + n;
}

static void seeds_net_local(void)
{
    /* a whole exchange; the host's ISS is not known here, so the ACKs
     * are what the fuzzer mutates towards */
    nl_len = 0;
    nl_seg(0x02, 100, 0, NULL, 1460);
    nl_seg(0x10, 101, 1, NULL, 0);
    nl_seg(0x18, 101, 1, "hello\n", 0);
    nl_seg(0x18, 107, 1, "close\n", 0);
    nl_seg(0x11, 113, 1, NULL, 0);
    put("net_local", "exchange", nl, nl_len);
    nl_len = 0;
    nl_seg(0x02, 7, 0, NULL, 0);
    nl_seg(0x04, 8, 0, NULL, 0);
    nl_seg(0x18, 9, 5, "x\n", 0);
    put("net_local", "reset", nl, nl_len);
    /* an ARP request for the address */
    uint8_t a[2 + 42] = { 42, 0 };
    memset(a + 2, 0xff, 6);
    memcpy(a + 8, "\x52\x54\0\x01\x02\x03", 6);
    be(a + 14, 0x0806, 2);
    be(a + 16, 1, 2); be(a + 18, 0x0800, 2); a[20] = 6; a[21] = 4; be(a + 22, 1, 2);
    memcpy(a + 24, "\x52\x54\0\x01\x02\x03", 6);
    be(a + 30, 0x0a00020f, 4);
    be(a + 40, 0xa9fea9fe, 4);
    put("net_local", "arp", a, sizeof a);
}

/* ---- http_req: [0] options (bit0 V1, bit1 imds_compat, bits 2..7 segment
 * size - 1), then the guest's bytes on one connection ---- */
static uint8_t hq[8192];
static size_t hq_len;

static void hq_begin(int v1, int compat, unsigned seg)
{
    hq[0] = (uint8_t)((v1 ? 1 : 0) | (compat ? 2 : 0) | ((seg - 1) & 63) << 2);
    hq_len = 1;
}
static void hq_add(const char *s)
{
    size_t n = strlen(s);
    if (hq_len + n > sizeof hq) {
        fprintf(stderr, "http_req seed too long\n");
        exit(1);
    }
    memcpy(hq + hq_len, s, n);
    hq_len += n;
}

#define HQ_TOKEN "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"   /* the fuzz target's all-zero token */

static void seeds_http(void)
{
    hq_begin(0, 0, 7);
    hq_add("PUT /latest/api/token HTTP/1.1\r\nHost: 169.254.169.254\r\n"
           "X-metadata-token-ttl-seconds: 21600\r\n\r\n");
    hq_add("GET /latest/meta-data/ami-id HTTP/1.1\r\nX-metadata-token: " HQ_TOKEN "\r\n\r\n");
    hq_add("GET /latest/ HTTP/1.1\r\nX-aws-ec2-metadata-token: " HQ_TOKEN "\r\n\r\n");
    hq_add("GET / HTTP/1.1\r\nAccept: application/json\r\nX-metadata-token: " HQ_TOKEN
           "\r\nConnection: close\r\n\r\n");
    put("http_req", "v2-token-flow", hq, hq_len);

    hq_begin(0, 0, 64);
    hq_add("GET / HTTP/1.1\r\n\r\n");
    hq_add("GET / HTTP/1.1\r\nX-metadata-token: " HQ_TOKEN "\r\n\r\n");
    hq_add("GET / HTTP/1.1\r\nX-metadata-token: nope\r\n\r\n");
    put("http_req", "v2-no-token", hq, hq_len);

    hq_begin(1, 0, 1);
    hq_add("GET / HTTP/1.1\r\nHost: 169.254.169.254\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\n\r\n");
    hq_add("GET /latest/meta-data/ HTTP/1.1\r\n\r\n");
    hq_add("GET //latest//user-data HTTP/1.1\r\n\r\n");
    hq_add("GET /n/1 HTTP/1.1\r\nAccept: application/json\r\n\r\n");
    hq_add("GET /n/5/k HTTP/1.1\r\nAccept: text/plain, application/json;q=0.5\r\n\r\n");
    hq_add("GET /a~1b~0/c HTTP/1.1\r\n\r\n");
    hq_add("GET http://169.254.169.254/latest/meta-data/tags/a HTTP/1.1\r\n\r\n");
    hq_add("GET /n/2 HTTP/1.1\r\n\r\n");
    hq_add("GET /nope HTTP/1.1\r\n\r\n");
    hq_add("GET latest HTTP/1.1\r\n\r\n");
    put("http_req", "v1-paths", hq, hq_len);

    hq_begin(0, 0, 3);
    hq_add("PUT /latest/api/token HTTP/1.1\r\nX-metadata-token-ttl-seconds: 60\r\n"
           "X-Forwarded-For: 10.0.0.1\r\n\r\n");
    hq_add("PUT /latest/api/token HTTP/1.1\r\n\r\n");
    hq_add("PUT /latest/api/token HTTP/1.1\r\nX-metadata-token-ttl-seconds: 0\r\n\r\n");
    hq_add("PUT /latest/api/token HTTP/1.1\r\nX-aws-ec2-metadata-token-ttl-seconds: abc\r\n\r\n");
    hq_add("PUT /latest/api HTTP/1.1\r\nX-metadata-token-ttl-seconds: 5\r\n\r\n");
    hq_add("PUT /latest/api/token HTTP/1.1\r\nX-metadata-token-ttl-seconds: 5\r\n"
           "Content-Length: 4\r\n\r\nbody");
    put("http_req", "put-errors", hq, hq_len);

    hq_begin(1, 0, 5);
    hq_add("POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\nab");
    hq_add("DELETE /latest HTTP/1.1\r\n\r\n");
    hq_add("GET /latest HTTP/1.1\r\nContent-Length: 1\r\n\r\nx");
    hq_add("GET /latest HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    put("http_req", "methods", hq, hq_len);

    hq_begin(1, 1, 9);
    hq_add("\r\n\r\nGET /latest/meta-data HTTP/1.1\r\nAccept: application/json\r\n\r\n");
    hq_add("GET /n HTTP/1.1\r\n\r\n");
    put("http_req", "imds-compat", hq, hq_len);

    static const char *const bad[] = {
        "GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n",
        "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n",
        "GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "GET / HTTP/2.0\r\n\r\n",
        "GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
        "GET / HTTP/1.1\r\nHost : x\r\n\r\n",
        "PUT / HTTP/1.1\r\nContent-Length: 99999\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char name[32];
        hq_begin(0, 0, 1 + (unsigned)i * 4);
        hq_add(bad[i]);
        snprintf(name, sizeof name, "bad-%zu", i);
        put("http_req", name, hq, hq_len);
    }

    hq_begin(1, 0, 64);
    hq_add("GET /");
    for (int i = 0; i < 2100; i++)
        hq_add("a");
    hq_add(" HTTP/1.1\r\n\r\n");
    put("http_req", "long-target", hq, hq_len);

    hq_begin(1, 0, 64);
    hq_add("GET / HTTP/1.1\r\n");
    for (int i = 0; i < 33; i++)
        hq_add("X-Header: value\r\n");
    hq_add("\r\n");
    put("http_req", "many-headers", hq, hq_len);
}

/* ---- dns_msg: selector byte, then a DNS message or a rule spec ---- */
static uint8_t dm[2048];
static size_t dm_len;

static void dm_b8(unsigned v) { dm[dm_len++] = (uint8_t)v; }
static void dm_b16(unsigned v) { dm_b8(v >> 8); dm_b8(v & 0xff); }
static void dm_b32(uint32_t v) { dm_b16(v >> 16); dm_b16(v & 0xffff); }
static void dm_name(const char *s)
{
    while (*s) {
        const char *dot = strchr(s, '.');
        size_t n = dot ? (size_t)(dot - s) : strlen(s);
        dm_b8((unsigned)n);
        memcpy(dm + dm_len, s, n);
        dm_len += n;
        s += n + (dot ? 1 : 0);
    }
    dm_b8(0);
}
/* header (after the selector byte at dm[0]) and one question */
static void dm_begin(uint8_t sel, unsigned id, unsigned flags, unsigned an, const char *q, unsigned qtype)
{
    dm_len = 0;
    dm_b8(sel);
    dm_b16(id); dm_b16(flags); dm_b16(1); dm_b16(an); dm_b16(0); dm_b16(0);
    if (q) {
        dm_name(q);
        dm_b16(qtype); dm_b16(1);
    }
}
static void dm_rr(unsigned owner_ptr, unsigned type, uint32_t ttl, unsigned rdlen)
{
    dm_b16(0xc000 | owner_ptr); dm_b16(type); dm_b16(1); dm_b32(ttl); dm_b16(rdlen);
}
static void dm_spec(uint8_t sel, const char *name, const char *spec)
{
    dm_len = 0;
    dm_b8(sel);
    memcpy(dm + 1, spec, strlen(spec));
    dm_len += strlen(spec);
    put("dns_msg", name, dm, dm_len);
}

static void seeds_dns(void)
{
    /* A + AAAA for the question (owner: a pointer to it; message offset 12) */
    dm_begin(0, 0x1234, 0x8180, 2, "Files.PyPI.org", 1);
    dm_rr(12, 1, 300, 4); dm_b32(0x97650001);
    dm_rr(12, 28, 300, 16); dm_b32(0x2a044e42); dm_b32(0); dm_b32(0); dm_b32(0x223);
    put("dns_msg", "a-aaaa", dm, dm_len);

    /* a CNAME chain; the target compressed against the question's "org" */
    dm_begin(0, 7, 0x8180, 4, "files.pythonhosted.org", 1);
    dm_rr(12, 5, 60, 0);
    size_t rdl = dm_len - 2;
    unsigned cn = (unsigned)(dm_len - 1);   /* the target's offset in the message */
    dm_b8(9); memcpy(dm + dm_len, "dualstack", 9); dm_len += 9;
    dm_b8(6); memcpy(dm + dm_len, "fastly", 6); dm_len += 6;
    dm_b16(0xc000 | (12 + 19));
    dm[rdl] = 0;
    dm[rdl + 1] = (uint8_t)(dm_len - 1 - cn);
    dm_rr(cn, 1, 30, 4); dm_b32(0x97650041);
    dm_rr(cn, 1, 900, 4); dm_b32(0x97654041);
    dm_b8(4); memcpy(dm + dm_len, "evil", 4); dm_len += 4; dm_b8(0);   /* off the chain */
    dm_b16(1); dm_b16(1); dm_b32(60); dm_b16(4); dm_b32(0x0a000001);
    put("dns_msg", "cname-chain", dm, dm_len);

    /* a CNAME loop: q -> q */
    dm_begin(0, 8, 0x8180, 1, "self.test", 1);
    dm_rr(12, 5, 5, 2); dm_b16(0xc000 | 12);
    put("dns_msg", "cname-self", dm, dm_len);

    /* NXDOMAIN, a truncated (TC) answer */
    dm_begin(0, 9, 0x8183, 0, "nope.example", 28);
    put("dns_msg", "nxdomain", dm, dm_len);
    dm_begin(0, 9, 0x8380, 1, "big.example", 1);
    dm_rr(12, 1, 60, 4); dm_b32(0x01020304);
    put("dns_msg", "tc", dm, dm_len);

    /* malformed: a pointer to itself, a lying count, a long name */
    dm_begin(0, 10, 0x8180, 0, NULL, 0);
    dm_b16(0xc000 | 12); dm_b16(1); dm_b16(1);
    put("dns_msg", "ptr-loop", dm, dm_len);
    dm_begin(0, 11, 0x8180, 5, "count.test", 1);
    dm_rr(12, 1, 60, 4); dm_b32(1);
    put("dns_msg", "count-lies", dm, dm_len);
    dm_begin(0, 12, 0x8180, 0, NULL, 0);
    for (int i = 0; i < 5; i++) {
        dm_b8(60);
        memset(dm + dm_len, 'a' + i, 60);
        dm_len += 60;
    }
    dm_b8(0); dm_b16(1); dm_b16(1);
    put("dns_msg", "name-long", dm, dm_len);

    /* a query */
    dm_begin(1, 0xbeef, 0x0100, 0, "example.org", 28);
    put("dns_msg", "query", dm, dm_len);

    /* rule and domain specs */
    dm_spec(2, "rule-v4", "93.184.216.0/24,port=443,proto=tcp");
    dm_spec(2, "rule-v6", "2001:db8::/32,proto=icmp");
    dm_spec(2, "rule-range", "10.0.0.0/8,proto=udp,port=1000-2000");
    dm_spec(2, "rule-bad", "10.1.0.0/8,port=2000-1000");
    dm_spec(3, "domain-wild", "*.PyPI.org.,port=443");
    dm_spec(3, "domain-bad", "a..b,proto=icmp,port=1");
}

/* ---- net_frame: config byte, then records {u8 dir, u8 dt, le16 len, frame} ---- */
static uint8_t nr[8192];
static size_t nr_len;
static uint8_t fr[2048];
static size_t fr_len;

static void f8(unsigned v) { fr[fr_len++] = (uint8_t)v; }
static void f16(unsigned v) { f8(v >> 8); f8(v & 0xff); }
static void f32(uint32_t v) { f16(v >> 16); f16(v & 0xffff); }
static void fmem(const void *b, size_t n) { memcpy(fr + fr_len, b, n); fr_len += n; }
static void fset16(size_t at, unsigned v) { fr[at] = (uint8_t)(v >> 8); fr[at + 1] = (uint8_t)v; }

static void nr_begin(uint8_t cfg) { nr_len = 0; nr[nr_len++] = cfg; }
static void nr_rec(int rx, unsigned dt)
{
    nr[nr_len++] = (uint8_t)rx;
    nr[nr_len++] = (uint8_t)dt;
    le(nr + nr_len, fr_len, 2);
    nr_len += 2;
    memcpy(nr + nr_len, fr, fr_len);
    nr_len += fr_len;
}

static void eth(unsigned type, int vlan)
{
    static const uint8_t macs[12] = { 2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2 };
    fr_len = 0;
    fmem(macs, 12);
    if (vlan) {
        f16(0x8100);
        f16(5);
    }
    f16(type);
}
/* IPv4 header with optional 4 option bytes; returns its offset */
static size_t ip4(unsigned frag, unsigned proto, uint32_t src, uint32_t dst, const uint8_t *opt)
{
    size_t at = fr_len;
    f8(opt ? 0x46 : 0x45); f8(0); f16(0); f16(0x4242); f16(frag); f8(64); f8(proto); f16(0);
    f32(src); f32(dst);
    if (opt)
        fmem(opt, 4);
    return at;
}
static void ip4_done(size_t at) { fset16(at + 2, (unsigned)(fr_len - at)); }
static const uint8_t v6_guest[16] = { 0x20, 0x01, 0x0d, 0xb8, [15] = 0x15 };
static const uint8_t v6_dns[16] = { 0x20, 0x01, 0x0d, 0xb8, [15] = 0x03 };
static const uint8_t v6_cf[16] = { 0x26, 0x06, 0x47, 0x00, [15] = 0x01 };
static size_t ip6(unsigned nh, const uint8_t *src, const uint8_t *dst)
{
    size_t at = fr_len;
    f32(0x60000000); f16(0); f8(nh); f8(64);
    fmem(src, 16);
    fmem(dst, 16);
    return at;
}
static void ip6_done(size_t at) { fset16(at + 4, (unsigned)(fr_len - at - 40)); }
static void tcp(unsigned sport, unsigned dport)
{
    f16(sport); f16(dport); f32(1); f32(0); f8(5 << 4); f8(0x02); f16(0xffff); f16(0); f16(0);
}
static void udp(unsigned sport, unsigned dport, size_t payload)
{
    f16(sport); f16(dport); f16((unsigned)(8 + payload)); f16(0);
}

/* the frame in fr as a sent record behind a virtio-net header (dir bit1;
 * dir bits 2..4 the offloads, bit5 MTU 1500: fuzz_net_frame.c) */
static void nr_rec_vhdr(unsigned dir, unsigned flags, unsigned gso, unsigned hdr_len, unsigned gso_size,
                        unsigned start, unsigned off)
{
    memmove(fr + 10, fr, fr_len);
    fr[0] = (uint8_t)flags;
    fr[1] = (uint8_t)gso;
    le(fr + 2, hdr_len, 2);
    le(fr + 4, gso_size, 2);
    le(fr + 6, start, 2);
    le(fr + 8, off, 2);
    fr_len += 10;
    nr_rec((int)(dir | 2), 0);
    fr_len -= 10;
    memmove(fr, fr + 10, fr_len);
}

#define GUEST 0x0a00020f        /* 10.0.2.15 */
#define RESOLV 0x0a000203       /* 10.0.2.3 */

/* a DNS message into fr as a UDP datagram, from the dm builder */
static void udp_dns(uint32_t src, uint32_t dst, unsigned sport, unsigned dport)
{
    eth(0x0800, 0);
    size_t at = ip4(0x4000, 17, src, dst, NULL);
    udp(sport, dport, dm_len - 1);
    fmem(dm + 1, dm_len - 1);
    ip4_done(at);
}

static void seeds_net(void)
{
    /* a query, its answer (CNAME + A + AAAA), traffic to the answer, expiry */
    nr_begin(0);
    dm_begin(0, 0x1234, 0x0100, 0, "files.pypi.org", 1);
    udp_dns(GUEST, RESOLV, 40000, 53);
    nr_rec(0, 0);
    dm_begin(0, 0x1234, 0x8180, 3, "files.pypi.org", 1);
    dm_rr(12, 5, 60, 12);
    size_t t = dm_len - 1;
    dm_b8(6); memcpy(dm + dm_len, "fastly", 6); dm_len += 6;
    dm_b8(3); memcpy(dm + dm_len, "net", 3); dm_len += 3; dm_b8(0);
    dm_rr((unsigned)t, 1, 300, 4); dm_b32(0x97650001);
    dm_rr((unsigned)t, 28, 300, 16); dm_b32(0x26064700); dm_b32(0); dm_b32(0); dm_b32(1);
    udp_dns(RESOLV, GUEST, 53, 40000);
    nr_rec(1, 1);
    eth(0x0800, 0);
    size_t at = ip4(0x4000, 6, GUEST, 0x97650001, NULL);
    tcp(40001, 443);
    ip4_done(at);
    nr_rec(0, 1);
    nr_rec(0, 200);
    put("net_frame", "dns-learn", nr, nr_len);

    /* DNS over TCP, IPv6 resolver */
    nr_begin(0);
    dm_begin(0, 0x55, 0x0100, 0, "example.org", 28);
    eth(0x86dd, 0);
    at = ip6(6, v6_guest, v6_dns);
    tcp(40002, 53);
    f16((unsigned)(dm_len - 1));
    fmem(dm + 1, dm_len - 1);
    ip6_done(at);
    nr_rec(0, 0);
    dm_begin(0, 0x55, 0x8180, 1, "example.org", 28);
    dm_rr(12, 28, 50, 16); dm_b32(0x26064700); dm_b32(0); dm_b32(0); dm_b32(2);
    eth(0x86dd, 0);
    at = ip6(6, v6_dns, v6_guest);
    tcp(53, 40002);
    f16((unsigned)(dm_len - 1));
    fmem(dm + 1, dm_len - 1);
    ip6_done(at);
    nr_rec(1, 0);
    put("net_frame", "dns-tcp-v6", nr, nr_len);

    /* the fixed steps: ARP, LLDP, VLAN, metadata, DHCP, ND, source route */
    nr_begin(1);
    eth(0x0806, 0);
    f16(1); f16(0x0800); f8(6); f8(4); f16(1);
    fmem("\x02\0\0\0\0\x02", 6); f32(GUEST); fmem("\0\0\0\0\0\0", 6); f32(0x0a000202);
    nr_rec(0, 0);
    eth(0x88cc, 0);
    f32(0); f32(0);
    nr_rec(0, 0);
    eth(0x0800, 1);
    at = ip4(0, 6, GUEST, 0x5db8d822, NULL);
    tcp(1, 443);
    ip4_done(at);
    nr_rec(0, 0);
    eth(0x0800, 0);
    at = ip4(0, 6, GUEST, 0xa9fea9fe, NULL);
    tcp(2, 80);
    ip4_done(at);
    nr_rec(0, 0);
    eth(0x0800, 0);
    at = ip4(0, 17, 0, 0xffffffff, NULL);
    udp(68, 67, 4);
    f32(0x63825363);
    ip4_done(at);
    nr_rec(0, 0);
    static const uint8_t ll[16] = { 0xfe, 0x80, [15] = 0x15 };
    static const uint8_t sol[16] = { 0xff, 0x02, [11] = 1, 0xff, 0, 0, 1 };
    eth(0x86dd, 0);
    at = ip6(58, ll, sol);
    f8(135); f8(0); f16(0); f32(0);
    fmem(v6_guest, 16);
    ip6_done(at);
    nr_rec(0, 0);
    static const uint8_t lsrr[4] = { 131, 3, 4, 0 };
    eth(0x0800, 0);
    at = ip4(0, 6, GUEST, 0x5db8d822, lsrr);
    tcp(3, 443);
    ip4_done(at);
    nr_rec(0, 0);
    put("net_frame", "steps", nr, nr_len);

    /* the guest's identity (MAC pinned, config 4; addresses given too, 12):
     * DHCP pins its IPv4 address, a spoofed source, ARP for the gateway, an
     * NS with its source link-layer option, a frame from another MAC, an
     * NS behind a routing header, a NAT64 destination embedding the
     * metadata address */
    for (unsigned cfg = 4; cfg <= 12; cfg += 8) {
        nr_begin((uint8_t)(cfg | 1));
        for (int ack = 0; ack < 2; ack++) {
            eth(0x0800, 0);
            at = ip4(0, 17, ack ? 0x0a000202 : 0, ack ? GUEST : 0xffffffff, NULL);
            udp(ack ? 67 : 68, ack ? 68 : 67, 244);
            f8(ack ? 2 : 1); f8(1); f8(6); f8(0); f32(0x5eed);
            for (int i = 0; i < 2; i++)
                f32(0);
            f32(ack ? GUEST : 0);
            f32(0); f32(0);
            fmem("\x02\0\0\0\0\x02", 6);
            for (int i = 6; i < 16 + 64 + 128; i++)
                f8(0);
            f32(0x63825363);
            f8(53); f8(1); f8(ack ? 5 : 3); f8(255);
            ip4_done(at);
            nr_rec(ack, 0);
        }
        eth(0x0800, 0);
        at = ip4(0, 6, 0x0a000263, 0x5db8d822, NULL);
        tcp(7, 443);
        ip4_done(at);
        nr_rec(0, 0);
        eth(0x0806, 0);
        f16(1); f16(0x0800); f8(6); f8(4); f16(2);
        fmem("\x02\0\0\0\0\x02", 6); f32(0x0a000202); fmem("\0\0\0\0\0\0", 6); f32(0x0a000202);
        nr_rec(0, 0);
        eth(0x86dd, 0);
        at = ip6(58, ll, sol);
        f8(135); f8(0); f16(0); f32(0);
        fmem(v6_guest, 16);
        f8(1); f8(1); fmem("\x02\0\0\0\0\x02", 6);
        ip6_done(at);
        nr_rec(0, 0);
        fr[11] = 0x99;                                   /* another MAC */
        nr_rec(0, 0);
        eth(0x86dd, 0);
        at = ip6(43, ll, sol);
        f8(58); f8(0); f8(0); f8(1); f32(0);             /* type 0, segments left 1 */
        f8(135); f8(0); f16(0); f32(0);
        fmem(v6_guest, 16);
        ip6_done(at);
        nr_rec(0, 0);
        static const uint8_t nat64[16] = { 0, 0x64, 0xff, 0x9b, [12] = 169, 254, 169, 254 };
        eth(0x86dd, 0);
        at = ip6(6, v6_guest, nat64);
        tcp(8, 443);
        ip6_done(at);
        nr_rec(0, 0);
        put("net_frame", cfg == 4 ? "identity" : "identity-addrs", nr, nr_len);
    }

    /* IPv4 fragments: first, middle, last; one without its first */
    nr_begin(0);
    eth(0x0800, 0);
    at = ip4(0x2000, 6, GUEST, 0x5db8d801, NULL);
    tcp(4, 443);
    f32(0);
    ip4_done(at);
    nr_rec(0, 0);
    eth(0x0800, 0);
    at = ip4(0x2003, 6, GUEST, 0x5db8d801, NULL);
    f32(0); f32(0);
    ip4_done(at);
    nr_rec(0, 0);
    eth(0x0800, 0);
    at = ip4(0x0004, 6, GUEST, 0x5db8d801, NULL);
    f8(1);
    ip4_done(at);
    nr_rec(0, 61);
    put("net_frame", "frag4", nr, nr_len);

    /* IPv6: extension headers, a routing header, fragments, ICMPv6 */
    nr_begin(1);
    eth(0x86dd, 0);
    at = ip6(0, v6_guest, v6_cf);
    f8(60); f8(0); f8(1); f8(4); f32(0);             /* HBH: PadN */
    f8(43); f8(0); f16(0); f32(0);                   /* DSTOPTS */
    f8(44); f8(0); f8(4); f8(0); f32(0);             /* ROUTING, segments left 0 */
    f8(58); f8(0); f16(1); f32(0x77);                /* FRAGMENT: first, M */
    f8(128); f8(0); f16(0); f32(0x00010001);         /* ICMPv6 echo */
    ip6_done(at);
    nr_rec(0, 0);
    eth(0x86dd, 0);
    at = ip6(44, v6_guest, v6_cf);
    f8(58); f8(0); f16(8); f32(0x77);                /* FRAGMENT: offset 8, last */
    f32(0xdead);
    ip6_done(at);
    nr_rec(0, 0);
    eth(0x86dd, 0);
    at = ip6(43, v6_guest, v6_cf);
    f8(6); f8(0); f8(4); f8(1); f32(0);              /* segments left 1 */
    tcp(5, 443);
    ip6_done(at);
    nr_rec(0, 0);
    put("net_frame", "ipv6-ext", nr, nr_len);

    /* malformed frames */
    nr_begin(0);
    eth(0x0800, 0);
    at = ip4(0, 6, GUEST, 0x5db8d822, NULL);
    tcp(6, 443);
    ip4_done(at);
    fr[at] = 0x44;                                   /* IHL 4 */
    nr_rec(0, 0);
    fr[at] = 0x45;
    fr[at + 20 + 12] = 0x30;                          /* data offset 3 */
    nr_rec(0, 0);
    fset16(at + 2, 200);                              /* total length past the frame */
    nr_rec(0, 0);
    fr_len = 10;
    nr_rec(0, 0);
    put("net_frame", "malformed", nr, nr_len);

    /* virtio-net headers: right ones (NEEDS_CSUM on TCP and UDP, TSO4 and
     * TSO6), and csum_start at the destination address or port, DATA_VALID,
     * TSO with ECN, UDP GSO, gso_size past the MTU */
    nr_begin(1);
    eth(0x0800, 0);
    at = ip4(0x4000, 6, GUEST, 0x5db8d801, NULL);
    tcp(7, 443);
    for (int k = 0; k < 200; k++)
        f8(k);
    ip4_done(at);
    nr_rec_vhdr(0x3c, 1, 0, 0, 0, 34, 16);
    nr_rec_vhdr(0x3c, 1, 1, 54, 100, 34, 16);
    nr_rec_vhdr(0x3c, 1, 0, 0, 0, 32, 0);           /* the destination address */
    nr_rec_vhdr(0x3c, 1, 0, 0, 0, 36, 0);           /* the destination port */
    nr_rec_vhdr(0x3c, 2, 0, 0, 0, 0, 0);            /* DATA_VALID */
    nr_rec_vhdr(0x3c, 1, 0x81, 0, 100, 34, 16);     /* ECN */
    nr_rec_vhdr(0x3c, 1, 1, 0, 1461, 34, 16);       /* past the MTU */
    nr_rec_vhdr(0x04, 1, 1, 0, 100, 34, 16);        /* TSO4 not negotiated */
    eth(0x0800, 0);
    at = ip4(0x4000, 17, GUEST, RESOLV, NULL);
    udp(40000, 53, 8);
    f32(0); f32(0);
    ip4_done(at);
    nr_rec_vhdr(0x04, 1, 0, 0, 0, 34, 6);
    nr_rec_vhdr(0x3c, 1, 5, 0, 100, 34, 6);         /* UDP_L4 */
    eth(0x86dd, 0);
    at = ip6(60, v6_guest, v6_cf);
    f8(6); f8(0); f8(1); f8(4); f32(0);              /* DSTOPTS: PadN */
    tcp(8, 443);
    for (int k = 0; k < 100; k++)
        f8(k);
    ip6_done(at);
    nr_rec_vhdr(0x3c, 1, 4, 0, 1000, 62, 16);
    nr_rec_vhdr(0x3c, 1, 4, 0, 1000, 54, 16);       /* at the extension header */
    nr_rec_vhdr(0x3c, 1, 0, 0, 0, 38, 0);           /* the destination address */
    put("net_frame", "vhdr", nr, nr_len);
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

/* ---- wsfile: mode byte (1 reseal | 2 own sum/mem), then the file (checksum left 0: resealed) ---- */
static void ws_seed(const char *name, uint8_t mode, uint32_t version, uint32_t count, const uint32_t *r, size_t nw)
{
    uint8_t b[1 + 48 + 8 * 8];
    memset(b, 0, sizeof b);
    b[0] = mode;
    memcpy(b + 1, "MOATWSET", 8);
    le(b + 9, version, 4);
    le(b + 13, 48, 4);
    le(b + 17, 0x1122334455667788ull, 8);
    le(b + 25, 64ull << 20, 8);
    le(b + 33, count, 4);
    for (size_t i = 0; i < nw && i < 16; i++)
        le(b + 49 + 4 * i, r[i], 4);
    put("wsfile", name, b, 1 + 48 + 4 * nw);
}

static void seeds_wsfile(void)
{
    static const uint32_t three[] = { 0, 1, 10, 5, 4096, 256 };
    static const uint32_t touching[] = { 10, 5, 15, 1 };
    static const uint32_t past[] = { 16383, 2 };
    ws_seed("valid", 3, 1, 3, three, 6);
    ws_seed("empty", 3, 1, 0, NULL, 0);
    ws_seed("stale", 1, 1, 3, three, 6);
    ws_seed("unsealed", 2, 1, 3, three, 6);
    ws_seed("touching", 3, 1, 2, touching, 4);
    ws_seed("past-end", 3, 1, 1, past, 2);
    ws_seed("version2", 3, 2, 3, three, 6);
    ws_seed("count-mismatch", 3, 1, 7, three, 6);
}


/* ---- i8042 (tests/fuzz/fuzz_i8042.c) ---- */

static uint8_t kb[512];
static size_t kb_len;
static void kb_w(unsigned port, uint8_t v) { kb[kb_len++] = 1; kb[kb_len++] = port == 0x64; kb[kb_len++] = v; }
static void kb_r(unsigned port) { kb[kb_len++] = 0; kb[kb_len++] = port == 0x64; }

static void seeds_i8042(void)
{
    /* Linux's probe: self-test, CTR read twice, CTR write (keyboard off),
     * AUX loop and test, keyboard on, atkbd's commands, then Ctrl+Alt+Del */
    kb_len = 0;
    kb_w(0x64, 0xaa); kb_r(0x64); kb_r(0x60);
    kb_w(0x64, 0x20); kb_r(0x60); kb_w(0x64, 0x20); kb_r(0x60);
    kb_w(0x64, 0x60); kb_w(0x60, 0x14);
    kb_w(0x64, 0xd3); kb_w(0x60, 0x5a); kb_r(0x60);
    kb_w(0x64, 0xa9); kb_r(0x60);
    kb_w(0x64, 0x60); kb_w(0x60, 0x05);
    kb_w(0x60, 0xf5); kb[kb_len++] = 5;
    kb_w(0x60, 0xf2); kb[kb_len++] = 5;
    kb_w(0x60, 0xf3); kb[kb_len++] = 5; kb_w(0x60, 0x00); kb[kb_len++] = 5;
    kb_w(0x60, 0xf4); kb[kb_len++] = 5;
    kb[kb_len++] = 7;
    kb_w(0x64, 0xfe);
    put("i8042", "linux-probe", kb, kb_len);
    /* translated (set 1), interrupt off then on, keys behind an answer */
    kb_len = 0;
    kb_w(0x64, 0x60); kb_w(0x60, 0x45); kb[kb_len++] = 7;
    kb_w(0x64, 0x60); kb_w(0x60, 0x44); kb[kb_len++] = 2;
    kb_w(0x64, 0x60); kb_w(0x60, 0x45); kb[kb_len++] = 5;
    kb_w(0x64, 0x20); kb[kb_len++] = 6; kb[kb_len++] = 5;
    put("i8042", "xlate-intr", kb, kb_len);
    /* flooding: presses until full, wide bus accesses, unknown commands */
    kb_len = 0;
    for (int n = 0; n < 4; n++)
        kb[kb_len++] = 2;
    kb[kb_len++] = 3 | 1 << 3; kb[kb_len++] = 0;
    kb[kb_len++] = 4 | 2 << 3; kb[kb_len++] = 1; kb[kb_len++] = 0xfe; kb[kb_len++] = 0xfe; kb[kb_len++] = 0xfe; kb[kb_len++] = 0xfe;
    for (unsigned c = 0x80; c < 0xa0; c++)
        kb_w(0x64, (uint8_t)c);
    kb_w(0x60, 0x12); kb_r(0x60); kb_r(0x60);
    kb[kb_len++] = 5;
    put("i8042", "flood", kb, kb_len);
}

/* gz_stream: [limit code][cut code][sink fail code] + gzip body. */
static uint8_t gz[3 + 8192];
static size_t gz_len;

static void gz_begin(uint8_t lim, uint8_t cut, uint8_t fail)
{
    gz[0] = lim;
    gz[1] = cut;
    gz[2] = fail;
    gz_len = 3;
}

/* n bytes of in[0..len) (repeated) as one gzip member appended (zlib, level 9). */
static void gz_member(const char *in, size_t len, size_t n)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        exit(1);
    z.next_out = gz + gz_len;
    z.avail_out = (uInt)(sizeof gz - gz_len);
    for (size_t done = 0; done < n;) {
        size_t k = n - done < len ? n - done : len;
        z.next_in = (Bytef *)(uintptr_t)in;
        z.avail_in = (uInt)k;
        if (deflate(&z, Z_NO_FLUSH) != Z_OK || z.avail_in)
            exit(1);
        done += k;
    }
    if (deflate(&z, Z_FINISH) != Z_STREAM_END)
        exit(1);
    gz_len = sizeof gz - z.avail_out;
    deflateEnd(&z);
}

static void seeds_gz_stream(void)
{
    static const char text[] = "the quick brown fox jumps over the lazy dog\n";
    gz_begin(0xff, 0, 0);
    gz_member(text, sizeof text - 1, sizeof text - 1);
    put("gz_stream", "one", gz, gz_len);
    gz_begin(0xff, 0x07, 0);
    gz_member(text, sizeof text - 1, sizeof text - 1);
    gz_member("abc", 3, 3);
    gz_member("", 0, 0);
    put("gz_stream", "three-members-cut", gz, gz_len);
    gz_begin(0x10, 0x01, 0);                 /* byte by byte */
    gz_member(text, sizeof text - 1, 2000);
    put("gz_stream", "bytewise", gz, gz_len);
    gz_begin(0x03, 0x40, 0);                 /* 1 MiB of zeros against 1 KiB */
    gz_member("\0\0\0\0\0\0\0\0", 8, 1 << 20);
    put("gz_stream", "bomb", gz, gz_len);
    gz_begin(0xff, 0x80, 0x01);              /* the sink fails past 256 bytes */
    gz_member(text, sizeof text - 1, 4096);
    put("gz_stream", "sink-fails", gz, gz_len);
    gz_begin(0xff, 0x05, 0);
    gz_member(text, sizeof text - 1, 300);
    gz_len -= 3;                             /* cut in the trailer */
    put("gz_stream", "truncated", gz, gz_len);
    gz_begin(0xff, 0x00, 0);
    gz_member(text, sizeof text - 1, 300);
    memcpy(gz + gz_len, "garbage", 7);
    gz_len += 7;
    put("gz_stream", "trailing", gz, gz_len);
}

/* image_tarent: [type][path length, 2 bytes LE][path][link target]. */
static void tarent_seed(const char *name, uint8_t type, const char *path, const char *link)
{
    uint8_t b[600];
    size_t pl = strlen(path), ll = strlen(link);
    b[0] = type;
    le(b + 1, pl, 2);
    memcpy(b + 3, path, pl);
    memcpy(b + 3 + pl, link, ll);
    put("image_tarent", name, b, 3 + pl + ll);
}

static void seeds_image_tarent(void)
{
    tarent_seed("file", 1, "./usr/bin/ls", "");
    tarent_seed("dir", 2, "usr//share/./doc/", "");
    tarent_seed("symlink", 3, "bin", "usr/bin");
    tarent_seed("hardlink", 4, "usr/bin/ls2", "./usr/bin/ls");
    tarent_seed("hardlink-out", 4, "h", "../../etc/passwd");
    tarent_seed("dotdot", 1, "a/../../etc/passwd", "");
    tarent_seed("absolute", 1, "/etc/passwd", "");
    tarent_seed("whiteout", 1, "etc/.wh.motd", "");
    tarent_seed("opaque", 1, "var/cache/.wh..wh..opq", "");
    tarent_seed("aufs", 1, ".wh..wh.plnk/1234", "");
    tarent_seed("whiteout-dotdot", 1, "a/.wh...", "");
    tarent_seed("utf8", 1, "h\xc3\xa9llo/w\xc3\xb6rld", "");
    tarent_seed("root", 2, "./", "");
    tarent_seed("device", 5, "dev/null", "");
}

int main(int argc, char **argv)
{
    root = argc > 1 ? argv[1] : "tests/fuzz/corpus";
    mkdir(root, 0755);
    seeds_virtq();
    seeds_blk();
    seeds_mmio();
    seeds_net_local();
    seeds_http();
    seeds_dns();
    seeds_net();
    seeds_passt_frame();
    seeds_wsfile();
    seeds_i8042();
    seeds_gz_stream();
    seeds_image_tarent();
    return 0;
}
