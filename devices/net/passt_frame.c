/* passt's stream framing (see passt_frame.h). */
#include "devices/net/passt_frame.h"
#include "vmm/base/bytes.h"

#include <errno.h>
#include <string.h>

void passt_rx_init(struct passt_rx *r)
{
    r->start = r->end = 0;
    r->err = 0;
    r->bad_len = 0;
}

void passt_len_encode(uint32_t len, uint8_t out[PASST_LEN_SIZE])
{
    be32_store(out, len);
}

uint32_t passt_len_decode(const uint8_t in[PASST_LEN_SIZE])
{
    return be32_load(in);
}

size_t passt_rx_space(struct passt_rx *r, uint8_t **where)
{
    if (r->err) {
        *where = r->buf + r->end;
        return 0;
    }
    if (r->start == r->end) {
        r->start = r->end = 0;
    } else if (r->start > 0 && PASST_RX_CAP - r->end < PASST_WIRE_MAX) {
        /* What is left is less than a whole frame (the caller took the
         * whole ones), so this moves under PASST_WIRE_MAX bytes and leaves
         * room for the rest of it and more. */
        memmove(r->buf, r->buf + r->start, r->end - r->start);
        r->end -= r->start;
        r->start = 0;
    }
    *where = r->buf + r->end;
    return PASST_RX_CAP - r->end;
}

void passt_rx_commit(struct passt_rx *r, size_t n)
{
    if (n > PASST_RX_CAP - r->end)      /* a caller bug; never past the buffer */
        n = PASST_RX_CAP - r->end;
    r->end += n;
}

size_t passt_rx_feed(struct passt_rx *r, const uint8_t *data, size_t n)
{
    uint8_t *p;
    size_t room = passt_rx_space(r, &p);
    size_t k = n < room ? n : room;
    if (k)
        memcpy(p, data, k);
    passt_rx_commit(r, k);
    return k;
}

int passt_rx_next(struct passt_rx *r, const uint8_t **frame, size_t *len)
{
    if (r->err)
        return r->err;
    size_t avail = r->end - r->start;
    if (avail < PASST_LEN_SIZE)
        return 0;
    uint32_t n = passt_len_decode(r->buf + r->start);
    if (n == 0 || n > NET_FRAME_MAX) {
        r->err = -EPROTO;
        r->bad_len = n;
        return r->err;
    }
    if (avail - PASST_LEN_SIZE < n)
        return 0;
    *frame = r->buf + r->start + PASST_LEN_SIZE;
    *len = n;
    r->start += PASST_LEN_SIZE + n;
    return 1;
}

size_t passt_rx_pending(const struct passt_rx *r)
{
    return r->end - r->start;
}
