/* virtio-vsock packet header and hybrid-vsock CONNECT line, pure. */
#include "devices/vsock/vsock_pkt.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const char *const errs[VSOCK_E__COUNT] = {
    [VSOCK_E_OK] = "ok",
    [VSOCK_E_SHORT] = "header shorter than 44 bytes",
    [VSOCK_E_LEN] = "len above 64 KiB",
    [VSOCK_E_TRUNC] = "len above the payload present",
    [VSOCK_E_TYPE] = "type is not STREAM",
    [VSOCK_E_OP] = "unknown op",
    [VSOCK_E_SRC_CID] = "src_cid is not the guest's CID",
    [VSOCK_E_DST_CID] = "dst_cid is not the host",
    [VSOCK_E_CTRL_LEN] = "payload on a control op",
    [VSOCK_E_FLAGS] = "bad flags",
};

const char *vsock_pkt_strerror(enum vsock_pkt_err e)
{
    return (unsigned)e < VSOCK_E__COUNT ? errs[e] : "unknown error";
}

static uint64_t ld(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void st(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> 8 * i);
}

void vsock_hdr_decode(const uint8_t b[VSOCK_HDR_SIZE], struct vsock_hdr *h)
{
    h->src_cid = ld(b + 0, 8);
    h->dst_cid = ld(b + 8, 8);
    h->src_port = (uint32_t)ld(b + 16, 4);
    h->dst_port = (uint32_t)ld(b + 20, 4);
    h->len = (uint32_t)ld(b + 24, 4);
    h->type = (uint16_t)ld(b + 28, 2);
    h->op = (uint16_t)ld(b + 30, 2);
    h->flags = (uint32_t)ld(b + 32, 4);
    h->buf_alloc = (uint32_t)ld(b + 36, 4);
    h->fwd_cnt = (uint32_t)ld(b + 40, 4);
}

void vsock_hdr_encode(const struct vsock_hdr *h, uint8_t b[VSOCK_HDR_SIZE])
{
    st(b + 0, h->src_cid, 8);
    st(b + 8, h->dst_cid, 8);
    st(b + 16, h->src_port, 4);
    st(b + 20, h->dst_port, 4);
    st(b + 24, h->len, 4);
    st(b + 28, h->type, 2);
    st(b + 30, h->op, 2);
    st(b + 32, h->flags, 4);
    st(b + 36, h->buf_alloc, 4);
    st(b + 40, h->fwd_cnt, 4);
}

int vsock_cid_valid(uint64_t cid)
{
    return cid >= VSOCK_MIN_GUEST_CID && cid < 0xFFFFFFFFull;
}

enum vsock_pkt_err vsock_hdr_check(const struct vsock_hdr *h, uint64_t guest_cid,
                                   uint64_t payload_avail)
{
    if (h->src_cid != guest_cid)
        return VSOCK_E_SRC_CID;
    if (h->dst_cid != VSOCK_HOST_CID)
        return VSOCK_E_DST_CID;
    if (h->op == VSOCK_OP_INVALID || h->op > VSOCK_OP_CREDIT_REQUEST)
        return VSOCK_E_OP;
    if (h->type != VSOCK_TYPE_STREAM)
        return VSOCK_E_TYPE;
    if (h->len > VSOCK_MAX_PKT_LEN)
        return VSOCK_E_LEN;
    if (h->op != VSOCK_OP_RW && h->len != 0)
        return VSOCK_E_CTRL_LEN;
    if (h->len > payload_avail)
        return VSOCK_E_TRUNC;
    if (h->op == VSOCK_OP_SHUTDOWN) {
        if (h->flags & ~(uint32_t)(VSOCK_SHUTDOWN_RCV | VSOCK_SHUTDOWN_SEND))
            return VSOCK_E_FLAGS;
    } else if (h->flags != 0) {
        return VSOCK_E_FLAGS;
    }
    return VSOCK_E_OK;
}

int vsock_pkt_parse(const uint8_t *b, size_t avail, uint64_t guest_cid,
                    struct vsock_hdr *h, enum vsock_pkt_err *err)
{
    enum vsock_pkt_err e;
    memset(h, 0, sizeof *h);
    if (!b || avail < VSOCK_HDR_SIZE) {
        e = VSOCK_E_SHORT;
    } else {
        vsock_hdr_decode(b, h);
        e = vsock_hdr_check(h, guest_cid, avail - VSOCK_HDR_SIZE);
    }
    if (err)
        *err = e;
    return e == VSOCK_E_OK ? 0 : -EINVAL;
}

int vsock_credit_free(uint32_t buf_alloc, uint32_t tx_cnt, uint32_t fwd_cnt, uint32_t *out)
{
    uint32_t inflight = (uint32_t)(tx_cnt - fwd_cnt);   /* modulo 2^32 */
    if (inflight > buf_alloc) {
        *out = 0;
        return -ERANGE;
    }
    *out = buf_alloc - inflight;
    return 0;
}

static int lower(int c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }
static int blank(int c) { return c == ' ' || c == '\t'; }

int vsock_connect_parse(const uint8_t *buf, size_t len, uint32_t *port)
{
    static const char kw[] = "connect";
    enum { KW, SEP, DIGITS, TRAIL, CR } s = KW;
    size_t i;
    unsigned ndig = 0;
    uint64_t v = 0;

    if (!buf)
        return len ? -EINVAL : 0;
    for (i = 0; i < len; i++) {
        int c = buf[i];
        if (i >= VSOCK_CONNECT_MAX_LINE)
            return -EINVAL;
        switch (s) {
        case KW:
            if (lower(c) != kw[i])
                return -EINVAL;
            if (i + 1 == sizeof kw - 1)
                s = SEP;
            break;
        case SEP:
            if (blank(c))
                break;
            if (c < '0' || c > '9' || !blank(buf[i - 1]))
                return -EINVAL;
            s = DIGITS;
            /* fall through */
        case DIGITS:
            if (c >= '0' && c <= '9') {
                if (++ndig > 10)
                    return -EINVAL;
                v = v * 10 + (uint64_t)(c - '0');
                if (v > UINT32_MAX)
                    return -EINVAL;
                break;
            }
            /* fall through */
        case TRAIL:
            if (blank(c)) {
                s = TRAIL;
                break;
            }
            /* fall through */
        case CR:
            if (c == '\r' && s != CR) {
                s = CR;
                break;
            }
            if (c != '\n')
                return -EINVAL;
            *port = (uint32_t)v;
            return (int)(i + 1);
        }
    }
    /* no '\n' within the first VSOCK_CONNECT_MAX_LINE bytes: too long */
    return len >= VSOCK_CONNECT_MAX_LINE ? -EINVAL : 0;
}

int vsock_ok_line(uint32_t port, char *buf, size_t n)
{
    int r = snprintf(buf, n, "OK %u\n", port);
    if (r < 0 || (size_t)r >= n)
        return -ENOSPC;
    return r;
}
