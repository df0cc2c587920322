/* Fuzz passt's stream framing (devices/net/passt_frame.h): the input is the
 * byte stream as passt would send it, pushed into a passt_rx in pieces
 * (alternately through passt_rx_feed and passt_rx_space + commit), with
 * every whole frame taken after each piece. What comes out must be exactly
 * what a one-pass reference framer finds in the whole stream: the same
 * frames in the same order, the error at the same place, the same bytes
 * left over.
 *
 * Input: [0] piece size (0: as much as fits at once)
 *        [1..] the stream: 4-byte big-endian length + frame, repeated */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "devices/net/passt_frame.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct passt_rx *rx;

struct ref {
    const uint8_t *s;   /* the stream */
    size_t n, pos;      /* pos: the next frame's length prefix */
    int err;
};

/* The next frame of the whole stream, one pass: 1, 0 (incomplete), -EPROTO. */
static int ref_next(struct ref *f, const uint8_t **frame, size_t *len)
{
    if (f->err)
        return f->err;
    if (f->n - f->pos < 4)
        return 0;
    uint32_t l = (uint32_t)f->s[f->pos] << 24 | (uint32_t)f->s[f->pos + 1] << 16 |
                 (uint32_t)f->s[f->pos + 2] << 8 | f->s[f->pos + 3];
    if (l == 0 || l > NET_FRAME_MAX)
        return f->err = -EPROTO;
    if (f->n - f->pos - 4 < l)
        return 0;
    *frame = f->s + f->pos + 4;
    *len = l;
    f->pos += 4 + l;
    return 1;
}

/* Take every whole frame rx has; each must be the reference's next one.
 * Returns nonzero once rx reports the error (the reference must too). */
static int drain(struct ref *f, size_t fed)
{
    for (;;) {
        const uint8_t *fr;
        size_t len = 0;
        int r = passt_rx_next(rx, &fr, &len);
        if (r == 0)
            return 0;
        if (r < 0) {
            FUZZ_ASSERT(r == -EPROTO);
            /* the bad prefix is fully in: the reference, reading only what
             * was fed so far, reaches it too */
            struct ref g = { f->s, fed, f->pos, 0 };
            const uint8_t *x;
            size_t xl;
            FUZZ_ASSERT(ref_next(&g, &x, &xl) == -EPROTO);
            FUZZ_ASSERT(passt_rx_next(rx, &fr, &len) == -EPROTO);   /* sticky */
            uint8_t *w;
            FUZZ_ASSERT(passt_rx_space(rx, &w) == 0);
            return 1;
        }
        FUZZ_ASSERT(r == 1 && len >= 1 && len <= NET_FRAME_MAX);
        const uint8_t *rf;
        size_t rl;
        FUZZ_ASSERT(ref_next(f, &rf, &rl) == 1);
        FUZZ_ASSERT(rf + rl <= f->s + fed);     /* never a frame not yet fed */
        FUZZ_ASSERT(rl == len && memcmp(rf, fr, len) == 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (!rx && !(rx = malloc(sizeof *rx)))
        abort();
    passt_rx_init(rx);
    size_t piece = data[0] ? data[0] : PASST_RX_CAP;
    struct ref f = { data + 1, size - 1, 0, 0 };
    size_t fed = 0, turn = 0;
    int failed = 0;
    while (fed < f.n && !failed) {
        size_t want = f.n - fed < piece ? f.n - fed : piece, took;
        if (turn++ & 1) {
            took = passt_rx_feed(rx, f.s + fed, want);
        } else {
            uint8_t *w;
            size_t room = passt_rx_space(rx, &w);
            took = want < room ? want : room;
            memcpy(w, f.s + fed, took);
            passt_rx_commit(rx, took);
        }
        fed += took;
        failed = drain(&f, fed);
        /* after taking every whole frame there is always room again */
        FUZZ_ASSERT(failed || took > 0 || want == 0);
    }
    if (!failed) {
        /* all fed: what is left is the reference's incomplete tail */
        const uint8_t *x;
        size_t xl;
        FUZZ_ASSERT(ref_next(&f, &x, &xl) == 0);
        FUZZ_ASSERT(passt_rx_pending(rx) == f.n - f.pos);
        FUZZ_ASSERT(passt_rx_pending(rx) < PASST_WIRE_MAX);
    }
    return 0;
}
