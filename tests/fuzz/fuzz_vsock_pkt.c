/* Fuzz the vsock packet header parser, the credit helper and the
 * hybrid-vsock CONNECT-line parser.
 *
 * Input: [0] selector: bit0 = 0 -> the rest is a TX packet (header +
 *            payload) parsed for guest CID 3; bit0 = 1 -> the rest is what a
 *            host client sent (CONNECT line + payload).
 * Seeds: tests/fuzz/corpus/vsock_pkt/. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "devices/vsock/vsock_pkt.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void pkt(const uint8_t *b, size_t n)
{
    struct vsock_hdr h;
    enum vsock_pkt_err e;
    int r = vsock_pkt_parse(b, n, 3, &h, &e);
    FUZZ_ASSERT((r == 0) == (e == VSOCK_E_OK) && (r == 0 || r == -EINVAL));
    FUZZ_ASSERT(e < VSOCK_E__COUNT);
    if (r == 0) {
        FUZZ_ASSERT(h.len <= VSOCK_MAX_PKT_LEN && h.len <= n - VSOCK_HDR_SIZE);
        FUZZ_ASSERT(h.type == VSOCK_TYPE_STREAM && h.src_cid == 3 && h.dst_cid == VSOCK_HOST_CID);
        FUZZ_ASSERT(h.op >= VSOCK_OP_REQUEST && h.op <= VSOCK_OP_CREDIT_REQUEST);
        FUZZ_ASSERT(h.op == VSOCK_OP_RW || h.len == 0);
    }
    if (n >= VSOCK_HDR_SIZE) {      /* round trip */
        uint8_t b2[VSOCK_HDR_SIZE];
        struct vsock_hdr d;
        vsock_hdr_decode(b, &d);
        vsock_hdr_encode(&d, b2);
        FUZZ_ASSERT(memcmp(b, b2, VSOCK_HDR_SIZE) == 0);
        uint32_t f;
        int c = vsock_credit_free(d.buf_alloc, d.fwd_cnt + d.len, d.fwd_cnt, &f);
        if (c == 0)
            FUZZ_ASSERT(f <= d.buf_alloc && (uint64_t)f + d.len == d.buf_alloc);
        else
            FUZZ_ASSERT(c == -ERANGE && f == 0 && d.len > d.buf_alloc);
    }
}

static void line(const uint8_t *b, size_t n)
{
    uint32_t port = 0xdeadbeef;
    int r = vsock_connect_parse(b, n, &port);
    FUZZ_ASSERT(r >= -EINVAL);
    if (r > 0) {
        FUZZ_ASSERT((size_t)r <= n && (size_t)r <= VSOCK_CONNECT_MAX_LINE);
        FUZZ_ASSERT(b[r - 1] == '\n' && memchr(b, '\n', (size_t)r - 1) == NULL);
        /* the same answer with the payload cut off */
        uint32_t p2;
        FUZZ_ASSERT(vsock_connect_parse(b, (size_t)r, &p2) == r && p2 == port);
        char ok[32];
        FUZZ_ASSERT(vsock_ok_line(port, ok, sizeof ok) > 3);
    } else if (r == 0) {
        FUZZ_ASSERT(port == 0xdeadbeef && memchr(b, '\n', n) == NULL);
        FUZZ_ASSERT(n < VSOCK_CONNECT_MAX_LINE);
    } else {
        FUZZ_ASSERT(r == -EINVAL && port == 0xdeadbeef);
    }
    /* prefixes never contradict: a valid line's prefixes need more data */
    if (r > 0)
        for (size_t k = 0; k < (size_t)r; k++)
            FUZZ_ASSERT(vsock_connect_parse(b, k, &port) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] & 1)
        line(data + 1, size - 1);
    else
        pkt(data + 1, size - 1);
    return 0;
}
