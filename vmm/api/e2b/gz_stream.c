/* Streaming gzip decoder (gz_stream.h). */
#include "vmm/api/e2b/gz_stream.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

struct gz_stream {
    z_stream z;
    uint8_t *out;                     /* GZ_STREAM_STEP bytes */
    uint64_t max;                     /* decoded bytes allowed */
    uint64_t total;                   /* decoded bytes so far */
    unsigned members;                 /* members decoded whole */
    int mid;                          /* 1: inside a member (its end not seen yet) */
    int err;                          /* the first error (sticks), 0 if none */
    char why[128];
};

static int fail(struct gz_stream *g, int err, const char *why)
{
    g->err = err;
    snprintf(g->why, sizeof g->why, "%s", why);
    return err;
}

int gz_stream_init(struct gz_stream **gp, uint64_t max)
{
    *gp = NULL;
    struct gz_stream *g = calloc(1, sizeof *g);
    if (!g)
        return -ENOMEM;
    g->max = max;
    /* 16 + MAX_WBITS: a gzip wrapper (header, CRC-32 and size checked), not zlib or raw. */
    if (!(g->out = malloc(GZ_STREAM_STEP)) || inflateInit2(&g->z, 16 + MAX_WBITS) != Z_OK) {
        free(g->out);
        free(g);
        return -ENOMEM;
    }
    *gp = g;
    return 0;
}

/* One piece of at most UINT_MAX bytes (zlib's avail_in is a uInt). */
static int feed(struct gz_stream *g, const uint8_t *data, uInt n, gz_sink_fn sink, void *ctx)
{
    g->z.next_in = (Bytef *)(uintptr_t)data;
    g->z.avail_in = n;
    /* Go on while input is left or the last step filled the output (zlib
     * may hold more then). */
    int full = 0;
    while (g->z.avail_in || full) {
        g->z.next_out = g->out;
        g->z.avail_out = GZ_STREAM_STEP;
        if (g->z.avail_in)
            g->mid = 1;
        int r = inflate(&g->z, Z_NO_FLUSH);
        size_t got = GZ_STREAM_STEP - g->z.avail_out;
        full = g->z.avail_out == 0;
        if (r == Z_BUF_ERROR && !got)
            break;                  /* all taken, nothing pending */
        if (r == Z_MEM_ERROR)
            return fail(g, -ENOMEM, "out of memory");
        if (r != Z_OK && r != Z_STREAM_END)
            return fail(g, -EBADMSG, g->z.msg ? g->z.msg : "cannot inflate");
        if (got > g->max - g->total) {
            char m[96];
            snprintf(m, sizeof m, "it decodes to more than %" PRIu64 " bytes", g->max);
            return fail(g, -EFBIG, m);
        }
        g->total += got;
        if (got) {
            int s = sink(ctx, g->out, got);
            if (s < 0)
                return fail(g, s, "the sink failed");
        }
        if (r == Z_STREAM_END) {
            g->mid = 0;
            g->members++;
            full = 0;
            inflateReset(&g->z);
        }
    }
    g->z.next_in = NULL;
    g->z.avail_in = 0;
    return 0;
}

int gz_stream_feed(struct gz_stream *g, const void *data, size_t n, gz_sink_fn sink, void *ctx)
{
    if (g->err)
        return g->err;
    const uint8_t *p = data;
    while (n) {
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        int r = feed(g, p, k, sink, ctx);
        if (r < 0)
            return r;
        p += k;
        n -= k;
    }
    return 0;
}

int gz_stream_finish(struct gz_stream *g)
{
    if (g->err)
        return g->err;
    if (g->mid)
        return fail(g, -EBADMSG, "the stream is truncated");
    if (!g->members)
        return fail(g, -EBADMSG, "the body is empty");
    return 0;
}

const char *gz_stream_reason(const struct gz_stream *g)
{
    return g->why;
}

uint64_t gz_stream_total(const struct gz_stream *g)
{
    return g->total;
}

unsigned gz_stream_members(const struct gz_stream *g)
{
    return g->members;
}

void gz_stream_free(struct gz_stream *g)
{
    if (!g)
        return;
    inflateEnd(&g->z);
    free(g->out);
    free(g);
}
