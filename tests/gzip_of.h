/* Test helper: bytes deflated as one gzip member (what a browser's
 * CompressionStream("gzip") or `gzip -c` sends), for the gzip decoder's
 * unit tests and the envd server's upload tests. The caller frees it. */
#ifndef MOAT_TESTS_GZIP_OF_H
#define MOAT_TESTS_GZIP_OF_H

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <zlib.h>

static inline uint8_t *gzip_of(const void *in, size_t n, int level, size_t *zn)
{
    z_stream z = { 0 };
    ck_assert_int_eq(deflateInit2(&z, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
    size_t cap = deflateBound(&z, (uLong)n) + 64;
    uint8_t *o = malloc(cap);
    ck_assert_ptr_nonnull(o);
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)n;
    z.next_out = o;
    z.avail_out = (uInt)cap;
    ck_assert_int_eq(deflate(&z, Z_FINISH), Z_STREAM_END);
    *zn = cap - z.avail_out;
    deflateEnd(&z);
    return o;
}

#endif
