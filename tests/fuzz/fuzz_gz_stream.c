/* Fuzz the streaming gzip decoder of `moat serve`'s envd uploads
 * (vmm/api/e2b/gz_stream.c). Input: [0] the decode limit, (b + 1) * 256 bytes
 * (256 B .. 64 KiB, so deflate's 1000:1 reaches it from a small input);
 * [1] how the body is cut: 0 whole, else pieces of 1..[1] bytes whose
 * sizes follow a sequence seeded by [1]; [2] a sink that fails once it
 * would pass ([2] * 256) bytes (0: never fails); then the body. It is fed
 * cut that way and finished, and again whole with a sink that never fails.
 * Invariants: every result is 0, -EBADMSG with a reason, -EFBIG, -ENOMEM
 * or the sink's code; every sink call is 1..GZ_STREAM_STEP bytes; no more
 * than the limit reaches the sink, and gz_stream_total says how much did;
 * cut or whole, one output is a prefix of the other (both are prefixes of
 * the decoded stream), and when both run to the end they agree on success
 * and, on success, on every byte; an error sticks. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/api/e2b/gz_stream.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_OUT (256u * 256u)

struct out {
    uint8_t buf[MAX_OUT];
    size_t len;
    size_t fail_at;                   /* 0: never */
    int failed;
};

static struct out cut, whole;

static int sink(void *ctx, const uint8_t *d, size_t n)
{
    struct out *o = ctx;
    FUZZ_ASSERT(n >= 1 && n <= GZ_STREAM_STEP);
    FUZZ_ASSERT(!o->failed);
    if (o->fail_at && o->len + n > o->fail_at) {
        o->failed = 1;
        return -EPIPE;
    }
    FUZZ_ASSERT(o->len + n <= MAX_OUT);
    memcpy(o->buf + o->len, d, n);
    o->len += n;
    return 0;
}

static void check_rc(const struct gz_stream *g, int r, const struct out *o)
{
    FUZZ_ASSERT(r == 0 || r == -EBADMSG || r == -EFBIG || r == -ENOMEM || (r == -EPIPE && o->failed));
    const char *why = gz_stream_reason(g);
    FUZZ_ASSERT(strnlen(why, 200) < 200);
    if (r == 0)
        FUZZ_ASSERT(!why[0]);
    else
        FUZZ_ASSERT(why[0]);
}

/* Feeds body cut as [1] says (or whole), then finishes. */
static int run(const uint8_t *body, size_t n, uint64_t max, uint8_t cutcode, struct out *o)
{
    struct gz_stream *g;
    int r = gz_stream_init(&g, max);
    if (r < 0) {
        FUZZ_ASSERT(r == -ENOMEM && !g);
        return r;
    }
    uint32_t x = 0x9e3779b9u ^ cutcode;
    size_t at = 0;
    while (at < n && !r) {
        size_t k = n - at;
        if (cutcode) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            size_t piece = 1 + x % cutcode;
            if (piece < k)
                k = piece;
        }
        r = gz_stream_feed(g, body + at, k, sink, o);
        check_rc(g, r, o);
        at += k;
    }
    /* Sometimes an empty feed in the middle of it all. */
    if (!r && (cutcode & 1))
        r = gz_stream_feed(g, body, 0, sink, o);
    if (!r) {
        r = gz_stream_finish(g);
        check_rc(g, r, o);
    }
    FUZZ_ASSERT(gz_stream_total(g) <= max);
    if (!o->failed)
        FUZZ_ASSERT(gz_stream_total(g) == o->len);
    if (r) {
        /* The error sticks, and nothing more reaches the sink. */
        size_t len = o->len;
        FUZZ_ASSERT(gz_stream_feed(g, body, n, sink, o) == r);
        FUZZ_ASSERT(gz_stream_finish(g) == r);
        FUZZ_ASSERT(o->len == len);
    } else {
        FUZZ_ASSERT(gz_stream_members(g) >= 1);
    }
    gz_stream_free(g);
    return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    uint64_t max = ((uint64_t)data[0] + 1) * 256;
    uint8_t cutcode = data[1];
    const uint8_t *body = data + 3;
    size_t n = size - 3;

    cut.len = 0;
    cut.fail_at = (size_t)data[2] * 256;
    cut.failed = 0;
    whole.len = 0;
    whole.fail_at = 0;
    whole.failed = 0;

    int rc = run(body, n, max, cutcode, &cut);
    int rw = run(body, n, max, 0, &whole);
    FUZZ_ASSERT(cut.len <= max && whole.len <= max);

    size_t common = cut.len < whole.len ? cut.len : whole.len;
    FUZZ_ASSERT(memcmp(cut.buf, whole.buf, common) == 0);
    if (!cut.failed && rc != -ENOMEM && rw != -ENOMEM) {
        /* Both ran to their end: a valid stream within the limit is valid
         * however it is cut, and decodes to the same bytes. */
        FUZZ_ASSERT((rc == 0) == (rw == 0));
        if (rc == 0)
            FUZZ_ASSERT(cut.len == whole.len);
    }
    return 0;
}
