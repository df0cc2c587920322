/* The streaming gzip decoder of `moat serve`'s envd uploads
 * (vmm/api/e2b/gz_stream.c): whole members fed at once and byte by byte,
 * concatenated members, every malformed case (empty, truncated anywhere,
 * bad magic, CRC-32 and ISIZE mismatches, trailing garbage, a zlib stream),
 * the decode limit (exactly reached, passed by one byte, a 100 MiB bomb),
 * a failing sink, and the bound on each sink call. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "tests/gzip_of.h"
#include "vmm/api/e2b/gz_stream.h"

/* What the sink got. */
struct out {
    uint8_t *buf;
    size_t len, cap;                  /* cap 0: count only, keep nothing */
    size_t calls, biggest;
    size_t fail_after;                /* fail the call that goes past this many bytes (0: never) */
};

static int sink(void *ctx, const uint8_t *d, size_t n)
{
    struct out *o = ctx;
    ck_assert_uint_gt(n, 0);
    ck_assert_uint_le(n, GZ_STREAM_STEP);
    if (o->fail_after && o->len + n > o->fail_after)
        return -EPIPE;
    if (o->cap) {
        ck_assert_uint_le(o->len + n, o->cap);
        memcpy(o->buf + o->len, d, n);
    }
    o->len += n;
    o->calls++;
    if (n > o->biggest)
        o->biggest = n;
    return 0;
}

static struct out *out_new(size_t cap)
{
    struct out *o = calloc(1, sizeof *o);
    ck_assert_ptr_nonnull(o);
    o->cap = cap;
    if (cap)
        ck_assert_ptr_nonnull(o->buf = malloc(cap));
    return o;
}

static void out_free(struct out *o)
{
    free(o->buf);
    free(o);
}


/* Deterministic, somewhat compressible bytes. */
static uint8_t *pattern(size_t n, unsigned seed)
{
    uint8_t *p = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(p);
    uint32_t x = 2463534242u ^ seed;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (uint8_t)("abcdefgh\n "[x % 10]);
    }
    return p;
}

/* in fed in pieces of `piece` bytes (0: whole), then finished. Returns the
 * first error or finish's result; *o gets the output. */
static int decode(const uint8_t *in, size_t n, size_t piece, uint64_t max, struct out *o, char *why, size_t wl)
{
    struct gz_stream *g;
    ck_assert_int_eq(gz_stream_init(&g, max), 0);
    int r = 0;
    size_t at = 0;
    if (!piece)
        piece = n ? n : 1;
    while (at < n && !r) {
        size_t k = n - at < piece ? n - at : piece;
        r = gz_stream_feed(g, in + at, k, sink, o);
        at += k;
    }
    if (!r)
        r = gz_stream_finish(g);
    if (why)
        snprintf(why, wl, "%s", gz_stream_reason(g));
    if (r) {
        /* The error sticks. */
        ck_assert_int_eq(gz_stream_feed(g, in, n, sink, o), r);
        ck_assert_int_eq(gz_stream_finish(g), r);
    } else {
        ck_assert_str_eq(gz_stream_reason(g), "");
        ck_assert_uint_eq(gz_stream_total(g), o->len);
    }
    gz_stream_free(g);
    return r;
}

#define BAD(in, n, piece, needle)                                                                 \
    do {                                                                                          \
        char why_[160];                                                                           \
        struct out *o_ = out_new(1 << 22);                                                        \
        ck_assert_int_eq(decode((in), (n), (piece), 1 << 22, o_, why_, sizeof why_), -EBADMSG);  \
        ck_assert_msg(strstr(why_, (needle)) != NULL, "'%s' does not say '%s'", why_, (needle)); \
        out_free(o_);                                                                             \
    } while (0)

START_TEST(one_member)
{
    size_t n = 300000, zn;
    uint8_t *p = pattern(n, 1), *z = gzip_of(p, n, 9, &zn);
    static const size_t pieces[] = { 0, 1, 7, 4096, 65536 };
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++) {
        struct out *o = out_new(n);
        ck_assert_int_eq(decode(z, zn, pieces[i], n, o, NULL, 0), 0);
        ck_assert_uint_eq(o->len, n);
        ck_assert_mem_eq(o->buf, p, n);
        ck_assert_uint_le(o->biggest, GZ_STREAM_STEP);
        out_free(o);
    }
    /* One byte of data. */
    size_t z1n;
    uint8_t *z1 = gzip_of("x", 1, 9, &z1n);
    struct out *o = out_new(8);
    ck_assert_int_eq(decode(z1, z1n, 1, 1, o, NULL, 0), 0);
    ck_assert_uint_eq(o->len, 1);
    ck_assert_int_eq(o->buf[0], 'x');
    out_free(o);
    /* A member of nothing decodes to nothing, and is fine. */
    uint8_t *z0 = gzip_of("", 0, 9, &z1n);
    o = out_new(8);
    ck_assert_int_eq(decode(z0, z1n, 0, 0, o, NULL, 0), 0);
    ck_assert_uint_eq(o->len, 0);
    ck_assert_uint_eq(o->calls, 0);
    out_free(o);
    free(z0);
    free(z1);
    free(z);
    free(p);
}
END_TEST

START_TEST(concatenated)
{
    size_t n[3] = { 1000, 70000, 5 }, zn[3], total = 0, ztotal = 0;
    uint8_t *p[3], *z[3];
    for (int i = 0; i < 3; i++) {
        p[i] = pattern(n[i], 10 + (unsigned)i);
        z[i] = gzip_of(p[i], n[i], 9, &zn[i]);
    }
    for (int members = 2; members <= 3; members++) {
        total = ztotal = 0;
        uint8_t *all = malloc(zn[0] + zn[1] + zn[2]), *want = malloc(n[0] + n[1] + n[2]);
        for (int i = 0; i < members; i++) {
            memcpy(all + ztotal, z[i], zn[i]);
            memcpy(want + total, p[i], n[i]);
            ztotal += zn[i];
            total += n[i];
        }
        static const size_t pieces[] = { 0, 1, 3, 1000 };
        for (size_t k = 0; k < sizeof pieces / sizeof pieces[0]; k++) {
            struct out *o = out_new(total);
            struct gz_stream *g;
            ck_assert_int_eq(gz_stream_init(&g, total), 0);
            size_t piece = pieces[k] ? pieces[k] : ztotal;
            for (size_t at = 0; at < ztotal; at += piece)
                ck_assert_int_eq(gz_stream_feed(g, all + at, ztotal - at < piece ? ztotal - at : piece, sink, o), 0);
            ck_assert_int_eq(gz_stream_finish(g), 0);
            ck_assert_uint_eq(gz_stream_members(g), (unsigned)members);
            ck_assert_uint_eq(o->len, total);
            ck_assert_mem_eq(o->buf, want, total);
            gz_stream_free(g);
            out_free(o);
        }
        /* A member then the next one cut short: truncated. */
        BAD(all, ztotal - 3, 0, "the stream is truncated");
        BAD(all, zn[0] + 4, 1, "the stream is truncated");
        free(all);
        free(want);
    }
    for (int i = 0; i < 3; i++) {
        free(p[i]);
        free(z[i]);
    }
}
END_TEST

START_TEST(empty_and_truncated)
{
    /* Nothing at all: finish without a feed, or after empty feeds. */
    struct gz_stream *g;
    struct out *o = out_new(16);
    ck_assert_int_eq(gz_stream_init(&g, 100), 0);
    ck_assert_int_eq(gz_stream_finish(g), -EBADMSG);
    ck_assert_str_eq(gz_stream_reason(g), "the body is empty");
    gz_stream_free(g);
    ck_assert_int_eq(gz_stream_init(&g, 100), 0);
    ck_assert_int_eq(gz_stream_feed(g, "", 0, sink, o), 0);
    ck_assert_int_eq(gz_stream_feed(g, NULL, 0, sink, o), 0);
    ck_assert_int_eq(gz_stream_finish(g), -EBADMSG);
    ck_assert_str_eq(gz_stream_reason(g), "the body is empty");
    gz_stream_free(g);
    gz_stream_free(NULL);
    out_free(o);

    size_t n = 100000, zn;
    uint8_t *p = pattern(n, 2), *z = gzip_of(p, n, 9, &zn);
    ck_assert_uint_gt(zn, 18 + 100);
    BAD(z, 1, 0, "the stream is truncated");          /* the magic's first byte */
    BAD(z, 10, 0, "the stream is truncated");         /* the 10-byte header only */
    BAD(z, 10, 1, "the stream is truncated");
    BAD(z, zn / 2, 0, "the stream is truncated");     /* cut in the deflate data */
    BAD(z, zn / 2, 1, "the stream is truncated");
    BAD(z, zn - 8, 0, "the stream is truncated");     /* no trailer */
    BAD(z, zn - 5, 0, "the stream is truncated");     /* cut in the CRC-32 */
    BAD(z, zn - 1, 0, "the stream is truncated");     /* cut in ISIZE */
    BAD(z, zn - 1, 1, "the stream is truncated");
    /* What was decoded before the cut went to the sink, no more than there is. */
    o = out_new(n);
    ck_assert_int_eq(decode(z, zn / 2, 0, n, o, NULL, 0), -EBADMSG);
    ck_assert_uint_le(o->len, n);
    ck_assert_mem_eq(o->buf, p, o->len);
    out_free(o);
    free(z);
    free(p);
}
END_TEST

START_TEST(malformed)
{
    size_t n = 5000, zn;
    uint8_t *p = pattern(n, 3), *z = gzip_of(p, n, 9, &zn);
    uint8_t *b = malloc(zn + 64);
    static const size_t pieces[] = { 0, 1 };
    for (size_t k = 0; k < 2; k++) {
        size_t piece = pieces[k];
        /* One byte of a valid member changed: where (from the end when
         * negative), to what (or xor'ed with), what zlib says. */
        static const struct { long at; uint8_t set, xor; const char *msg; } one[] = {
            { 0, 0x1e, 0, "incorrect header check" },       /* bad magic */
            { 1, 0x8a, 0, "incorrect header check" },
            { 2, 7, 0, "unknown compression method" },      /* not deflate (CM 7) */
            { 3, 0xe0, 0, "unknown header flags set" },     /* reserved flag bits */
            { -8, 0, 1, "incorrect data check" },           /* CRC-32 */
            { -1, 0, 0x40, "incorrect length check" },      /* ISIZE */
            { 10, 0x07, 0, "invalid block type" },          /* BFINAL 1, BTYPE 11 (reserved) */
        };
        for (size_t c = 0; c < sizeof one / sizeof one[0]; c++) {
            memcpy(b, z, zn);
            size_t at = one[c].at < 0 ? zn - (size_t)-one[c].at : (size_t)one[c].at;
            b[at] = one[c].xor ? (uint8_t)(b[at] ^ one[c].xor) : one[c].set;
            BAD(b, zn, piece, one[c].msg);
        }
        /* Trailing garbage after a valid member, one byte or more. */
        memcpy(b, z, zn);
        memcpy(b + zn, "garbage!", 8);
        BAD(b, zn + 8, piece, "incorrect header check");
        /* One byte after the member: zlib waits for a second magic byte,
         * so the body ends inside what would be a header. */
        BAD(b, zn + 1, piece, "the stream is truncated");
        /* Zeros after the member (padding) are not a member either. */
        memcpy(b, z, zn);
        memset(b + zn, 0, 16);
        BAD(b, zn + 16, piece, "incorrect header check");
        /* A valid member, garbage, another valid member: the garbage stops it. */
        memcpy(b, z, zn);
        memcpy(b + zn, "xy", 2);
        BAD(b, zn + 2, piece, "incorrect header check");
    }
    free(b);
    free(z);
    free(p);
}
END_TEST


/* A zlib (RFC 1950) stream and a raw deflate stream are not gzip. */
START_TEST(not_gzip)
{
    const char *msg = "hello, hello, hello, hello";
    uint8_t zl[128];
    uLongf zln = sizeof zl;
    ck_assert_int_eq(compress2(zl, &zln, (const Bytef *)msg, strlen(msg), 9), Z_OK);
    BAD(zl, zln, 0, "incorrect header check");
    BAD(zl, zln, 1, "incorrect header check");

    z_stream z = { 0 };
    uint8_t raw[128];
    ck_assert_int_eq(deflateInit2(&z, 9, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
    z.next_in = (Bytef *)(uintptr_t)msg;
    z.avail_in = (uInt)strlen(msg);
    z.next_out = raw;
    z.avail_out = sizeof raw;
    ck_assert_int_eq(deflate(&z, Z_FINISH), Z_STREAM_END);
    size_t rawn = sizeof raw - z.avail_out;
    deflateEnd(&z);
    BAD(raw, rawn, 0, "incorrect header check");
    /* Plain text. */
    BAD((const uint8_t *)msg, strlen(msg), 0, "incorrect header check");
}
END_TEST

/* The limit: exactly reached is fine; one byte more is -EFBIG, and the
 * sink never sees a byte past the limit. */
START_TEST(limit)
{
    static const size_t sizes[] = { 1, 1000, GZ_STREAM_STEP, GZ_STREAM_STEP + 1, 3 * GZ_STREAM_STEP + 17 };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i], zn;
        uint8_t *p = pattern(n, 4 + (unsigned)i), *z = gzip_of(p, n, 9, &zn);
        static const size_t pieces[] = { 0, 1, 333 };
        for (size_t k = 0; k < sizeof pieces / sizeof pieces[0]; k++) {
            char why[160];
            struct out *o = out_new(n);
            ck_assert_int_eq(decode(z, zn, pieces[k], n, o, why, sizeof why), 0);
            ck_assert_uint_eq(o->len, n);
            ck_assert_mem_eq(o->buf, p, n);
            out_free(o);

            o = out_new(n);
            ck_assert_int_eq(decode(z, zn, pieces[k], n - 1, o, why, sizeof why), -EFBIG);
            char want[96];
            snprintf(want, sizeof want, "it decodes to more than %zu bytes", n - 1);
            ck_assert_str_eq(why, want);
            ck_assert_uint_le(o->len, n - 1);
            ck_assert_mem_eq(o->buf, p, o->len);
            out_free(o);
        }
        /* Two members whose sum passes the limit by one. */
        uint8_t *zz = malloc(2 * zn);
        memcpy(zz, z, zn);
        memcpy(zz + zn, z, zn);
        struct out *o = out_new(2 * n);
        ck_assert_int_eq(decode(zz, 2 * zn, 0, 2 * n - 1, o, NULL, 0), -EFBIG);
        ck_assert_uint_le(o->len, 2 * n - 1);
        out_free(o);
        o = out_new(2 * n);
        ck_assert_int_eq(decode(zz, 2 * zn, 0, 2 * n, o, NULL, 0), 0);
        ck_assert_uint_eq(o->len, 2 * n);
        out_free(o);
        free(zz);
        free(z);
        free(p);
    }
    /* Limit 0: only empty members pass. */
    size_t zn;
    uint8_t *z = gzip_of("a", 1, 9, &zn);
    struct out *o = out_new(8);
    ck_assert_int_eq(decode(z, zn, 0, 0, o, NULL, 0), -EFBIG);
    ck_assert_uint_eq(o->len, 0);
    out_free(o);
    free(z);
}
END_TEST

/* 100 MiB of zeros (about 100 KiB of gzip) against a 1 MiB limit: stopped
 * at the limit, after at most limit / step + 1 sink calls, the input not
 * even read to its end. */
START_TEST(bomb)
{
    const size_t total = 100u << 20, lim = 1u << 20;
    z_stream z = { 0 };
    ck_assert_int_eq(deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
    size_t cap = 256 * 1024, zn;
    uint8_t *zb = malloc(cap), *zeros = calloc(1, 1 << 20);
    z.next_out = zb;
    z.avail_out = (uInt)cap;
    for (size_t done = 0; done < total; done += 1 << 20) {
        z.next_in = zeros;
        z.avail_in = 1 << 20;
        ck_assert_int_eq(deflate(&z, done + (1 << 20) == total ? Z_FINISH : Z_NO_FLUSH),
                         done + (1 << 20) == total ? Z_STREAM_END : Z_OK);
        ck_assert_uint_eq(z.avail_in, 0);
    }
    zn = cap - z.avail_out;
    deflateEnd(&z);
    ck_assert_uint_lt(zn, 200 * 1024);

    struct out *o = out_new(0);
    struct gz_stream *g;
    ck_assert_int_eq(gz_stream_init(&g, lim), 0);
    ck_assert_int_eq(gz_stream_feed(g, zb, zn, sink, o), -EFBIG);
    ck_assert_uint_le(o->len, lim);
    ck_assert_uint_ge(o->len, lim - GZ_STREAM_STEP);
    ck_assert_uint_le(o->calls, lim / GZ_STREAM_STEP + 1);
    ck_assert_uint_le(gz_stream_total(g), lim);
    ck_assert_int_eq(gz_stream_finish(g), -EFBIG);
    gz_stream_free(g);
    out_free(o);

    /* The same fed 4 KiB at a time. */
    o = out_new(0);
    ck_assert_int_eq(gz_stream_init(&g, lim), 0);
    int r = 0;
    size_t at;
    for (at = 0; at < zn && !r; at += 4096)
        r = gz_stream_feed(g, zb + at, zn - at < 4096 ? zn - at : 4096, sink, o);
    ck_assert_int_eq(r, -EFBIG);
    ck_assert_uint_lt(at, zn);
    ck_assert_uint_le(o->len, lim);
    gz_stream_free(g);
    out_free(o);

    /* With room for it all, it is 100 MiB of zeros, in full steps. */
    o = out_new(0);
    ck_assert_int_eq(gz_stream_init(&g, total), 0);
    ck_assert_int_eq(gz_stream_feed(g, zb, zn, sink, o), 0);
    ck_assert_int_eq(gz_stream_finish(g), 0);
    ck_assert_uint_eq(o->len, total);
    ck_assert_uint_eq(o->biggest, GZ_STREAM_STEP);
    ck_assert_uint_eq(o->calls, total / GZ_STREAM_STEP);
    gz_stream_free(g);
    out_free(o);
    free(zeros);
    free(zb);
}
END_TEST

/* A sink that fails stops decoding: its code comes back, nothing more is
 * decoded or delivered, and the error sticks. */
START_TEST(sink_fails)
{
    size_t n = 5 * GZ_STREAM_STEP, zn;
    uint8_t *p = pattern(n, 5), *z = gzip_of(p, n, 9, &zn);
    struct out *o = out_new(n);
    o->fail_after = 2 * GZ_STREAM_STEP;
    struct gz_stream *g;
    ck_assert_int_eq(gz_stream_init(&g, n), 0);
    ck_assert_int_eq(gz_stream_feed(g, z, zn, sink, o), -EPIPE);
    ck_assert_uint_eq(o->len, 2 * GZ_STREAM_STEP);
    ck_assert_mem_eq(o->buf, p, o->len);
    uint64_t t = gz_stream_total(g);
    ck_assert_uint_le(t, 3 * GZ_STREAM_STEP);
    ck_assert_int_eq(gz_stream_feed(g, z, zn, sink, o), -EPIPE);
    ck_assert_int_eq(gz_stream_finish(g), -EPIPE);
    ck_assert_uint_eq(gz_stream_total(g), t);
    ck_assert_uint_eq(o->len, 2 * GZ_STREAM_STEP);
    ck_assert_str_eq(gz_stream_reason(g), "the sink failed");
    gz_stream_free(g);
    out_free(o);

    /* Fed byte by byte, the first failure ends it too. */
    o = out_new(n);
    o->fail_after = 1000;
    ck_assert_int_eq(decode(z, zn, 1, n, o, NULL, 0), -EPIPE);
    ck_assert_uint_le(o->len, 1000);
    ck_assert_mem_eq(o->buf, p, o->len);
    out_free(o);
    free(z);
    free(p);
}
END_TEST

/* Incompressible data of 1 MiB: every sink call is at most one step, and
 * whole input in one feed gives full steps. */
START_TEST(step_bound)
{
    size_t n = 1 << 20, zn;
    uint8_t *p = malloc(n);
    uint32_t x = 12345;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        p[i] = (uint8_t)(x >> 23);
    }
    uint8_t *z = gzip_of(p, n, 9, &zn);
    ck_assert_uint_gt(zn, n);
    static const size_t pieces[] = { 0, 100000, 3 * GZ_STREAM_STEP };
    for (size_t k = 0; k < sizeof pieces / sizeof pieces[0]; k++) {
        struct out *o = out_new(n);
        ck_assert_int_eq(decode(z, zn, pieces[k], n, o, NULL, 0), 0);
        ck_assert_uint_eq(o->len, n);
        ck_assert_mem_eq(o->buf, p, n);
        ck_assert_uint_le(o->biggest, GZ_STREAM_STEP);
        if (!pieces[k]) {
            ck_assert_uint_eq(o->biggest, GZ_STREAM_STEP);
            ck_assert_uint_eq(o->calls, n / GZ_STREAM_STEP);
        }
        out_free(o);
    }
    free(z);
    free(p);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("gz_stream");
    TCase *tc = tcase_create("decode");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, one_member);
    tcase_add_test(tc, concatenated);
    tcase_add_test(tc, empty_and_truncated);
    tcase_add_test(tc, malformed);
    tcase_add_test(tc, not_gzip);
    tcase_add_test(tc, limit);
    tcase_add_test(tc, bomb);
    tcase_add_test(tc, sink_fails);
    tcase_add_test(tc, step_bound);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
