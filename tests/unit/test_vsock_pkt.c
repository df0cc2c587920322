/* virtio-vsock packet header and hybrid-vsock CONNECT line: every
 * malformed case. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "devices/vsock/vsock_pkt.h"

#define GCID 3u

static struct vsock_hdr good(uint16_t op, uint32_t len)
{
    return (struct vsock_hdr){ .src_cid = GCID, .dst_cid = VSOCK_HOST_CID, .src_port = 1234,
                               .dst_port = 52, .len = len, .type = VSOCK_TYPE_STREAM,
                               .op = op, .buf_alloc = 65536, .fwd_cnt = 7 };
}

/* Encode h, followed by `payload` bytes of space, and parse it. */
static enum vsock_pkt_err parse_hdr(const struct vsock_hdr *h, size_t payload, struct vsock_hdr *out)
{
    size_t n = VSOCK_HDR_SIZE + payload;
    uint8_t *b = calloc(1, n);
    ck_assert_ptr_nonnull(b);
    vsock_hdr_encode(h, b);
    enum vsock_pkt_err e = VSOCK_E__COUNT;
    int r = vsock_pkt_parse(b, n, GCID, out, &e);
    ck_assert_int_eq(r, e == VSOCK_E_OK ? 0 : -EINVAL);
    free(b);
    return e;
}

START_TEST(wire_layout_is_little_endian_44_bytes)
{
    struct vsock_hdr h = { 0x0102030405060708ull, 0x1112131415161718ull, 0x21222324, 0x31323334,
                           0x41424344, 0x5152, 0x6162, 0x71727374, 0x81828384, 0x91929394 };
    uint8_t b[VSOCK_HDR_SIZE];
    memset(b, 0xee, sizeof b);
    vsock_hdr_encode(&h, b);
    static const uint8_t want[VSOCK_HDR_SIZE] = {
        8, 7, 6, 5, 4, 3, 2, 1, 0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,
        0x24, 0x23, 0x22, 0x21, 0x34, 0x33, 0x32, 0x31, 0x44, 0x43, 0x42, 0x41,
        0x52, 0x51, 0x62, 0x61, 0x74, 0x73, 0x72, 0x71, 0x84, 0x83, 0x82, 0x81,
        0x94, 0x93, 0x92, 0x91 };
    ck_assert_mem_eq(b, want, sizeof want);
    struct vsock_hdr d;
    memset(&d, 0, sizeof d);
    vsock_hdr_decode(b, &d);
    ck_assert(d.src_cid == h.src_cid && d.dst_cid == h.dst_cid);
    ck_assert(d.src_port == h.src_port && d.dst_port == h.dst_port && d.len == h.len);
    ck_assert(d.type == h.type && d.op == h.op && d.flags == h.flags);
    ck_assert(d.buf_alloc == h.buf_alloc && d.fwd_cnt == h.fwd_cnt);
}
END_TEST

START_TEST(valid_packets_of_every_op)
{
    for (uint16_t op = VSOCK_OP_REQUEST; op <= VSOCK_OP_CREDIT_REQUEST; op++) {
        struct vsock_hdr h = good(op, op == VSOCK_OP_RW ? 100 : 0), o;
        if (op == VSOCK_OP_SHUTDOWN)
            h.flags = VSOCK_SHUTDOWN_RCV | VSOCK_SHUTDOWN_SEND;
        ck_assert_int_eq(parse_hdr(&h, 100, &o), VSOCK_E_OK);
        ck_assert_int_eq(o.op, op);
        ck_assert_uint_eq(o.src_port, 1234);
    }
    struct vsock_hdr h = good(VSOCK_OP_RW, VSOCK_MAX_PKT_LEN), o;
    ck_assert_int_eq(parse_hdr(&h, VSOCK_MAX_PKT_LEN, &o), VSOCK_E_OK);
    h = good(VSOCK_OP_RW, 0);           /* empty RW is harmless */
    ck_assert_int_eq(parse_hdr(&h, 0, &o), VSOCK_E_OK);
}
END_TEST

START_TEST(short_header)
{
    uint8_t b[VSOCK_HDR_SIZE] = {0};
    struct vsock_hdr h = good(VSOCK_OP_RW, 0);
    vsock_hdr_encode(&h, b);
    enum vsock_pkt_err e;
    for (size_t n = 0; n < VSOCK_HDR_SIZE; n++) {
        ck_assert_int_eq(vsock_pkt_parse(b, n, GCID, &h, &e), -EINVAL);
        ck_assert_int_eq(e, VSOCK_E_SHORT);
        ck_assert_uint_eq(h.op, 0);
    }
    ck_assert_int_eq(vsock_pkt_parse(NULL, 100, GCID, &h, &e), -EINVAL);
    ck_assert_int_eq(vsock_pkt_parse(b, sizeof b, GCID, &h, NULL), 0);
}
END_TEST

START_TEST(malformed_headers)
{
    struct vsock_hdr h, o;
    h = good(VSOCK_OP_RW, VSOCK_MAX_PKT_LEN + 1);
    ck_assert_int_eq(parse_hdr(&h, VSOCK_MAX_PKT_LEN + 1, &o), VSOCK_E_LEN);
    h = good(VSOCK_OP_RW, UINT32_MAX);
    ck_assert_int_eq(parse_hdr(&h, 16, &o), VSOCK_E_LEN);
    h = good(VSOCK_OP_RW, 101);
    ck_assert_int_eq(parse_hdr(&h, 100, &o), VSOCK_E_TRUNC);
    ck_assert_uint_eq(o.len, 101);        /* decoded for an RST */
    h = good(VSOCK_OP_RW, 1);
    ck_assert_int_eq(parse_hdr(&h, 0, &o), VSOCK_E_TRUNC);
    for (uint16_t t = 0; t < 5; t++) {
        if (t == VSOCK_TYPE_STREAM)
            continue;
        h = good(VSOCK_OP_REQUEST, 0);
        h.type = t;
        ck_assert_int_eq(parse_hdr(&h, 0, &o), VSOCK_E_TYPE);
    }
    h = good(VSOCK_OP_REQUEST, 0); h.type = 0xffff;
    ck_assert_int_eq(parse_hdr(&h, 0, &o), VSOCK_E_TYPE);
    uint16_t badops[] = { 0, 8, 9, 0x100, 0xffff };
    for (unsigned i = 0; i < sizeof badops / sizeof *badops; i++) {
        h = good(badops[i], 0);
        ck_assert_int_eq(parse_hdr(&h, 0, &o), VSOCK_E_OP);
    }
    h = good(VSOCK_OP_RW, 0); h.src_cid = 4;
    ck_assert_int_eq(parse_hdr(&h, 0, &o), VSOCK_E_SRC_CID);
    h = good(VSOCK_OP_RW, 0); h.src_cid = GCID | (1ull << 32);
    ck_assert_int_eq(parse_hdr(&h, 0, &o), VSOCK_E_SRC_CID);
    h = good(VSOCK_OP_RW, 0); h.src_cid = VSOCK_HOST_CID;
    ck_assert_int_eq(parse_hdr(&h, 0, &o), VSOCK_E_SRC_CID);
    uint64_t baddst[] = { 0, 1, GCID, 0xffffffffull, 2ull | (1ull << 32) };
    for (unsigned i = 0; i < sizeof baddst / sizeof *baddst; i++) {
        h = good(VSOCK_OP_RW, 0); h.dst_cid = baddst[i];
        ck_assert_int_eq(parse_hdr(&h, 0, &o), VSOCK_E_DST_CID);
    }
    for (uint16_t op = VSOCK_OP_REQUEST; op <= VSOCK_OP_CREDIT_REQUEST; op++) {
        if (op == VSOCK_OP_RW)
            continue;
        h = good(op, 1);
        ck_assert_int_eq(parse_hdr(&h, 1, &o), VSOCK_E_CTRL_LEN);
        h = good(op, 0); h.flags = op == VSOCK_OP_SHUTDOWN ? 4 : 1;
        ck_assert_int_eq(parse_hdr(&h, 0, &o), VSOCK_E_FLAGS);
    }
    h = good(VSOCK_OP_RW, 0); h.flags = 0x80000000u;
    ck_assert_int_eq(parse_hdr(&h, 0, &o), VSOCK_E_FLAGS);
    for (int e = 0; e <= VSOCK_E__COUNT; e++)
        ck_assert_ptr_nonnull(vsock_pkt_strerror((enum vsock_pkt_err)e));
}
END_TEST

START_TEST(cids)
{
    ck_assert(!vsock_cid_valid(0));
    ck_assert(!vsock_cid_valid(1));
    ck_assert(!vsock_cid_valid(2));
    ck_assert(vsock_cid_valid(3));
    ck_assert(vsock_cid_valid(0xfffffffeull));
    ck_assert(!vsock_cid_valid(0xffffffffull));
    ck_assert(!vsock_cid_valid(1ull << 32));
}
END_TEST

START_TEST(credit_arithmetic_wraps_and_is_checked)
{
    uint32_t f = 12345;
    ck_assert_int_eq(vsock_credit_free(65536, 0, 0, &f), 0);
    ck_assert_uint_eq(f, 65536);
    ck_assert_int_eq(vsock_credit_free(65536, 1000, 0, &f), 0);
    ck_assert_uint_eq(f, 64536);
    ck_assert_int_eq(vsock_credit_free(65536, 65536, 0, &f), 0);
    ck_assert_uint_eq(f, 0);
    /* counters wrapped around 2^32 */
    ck_assert_int_eq(vsock_credit_free(4096, 100, UINT32_MAX - 99, &f), 0);
    ck_assert_uint_eq(f, 4096 - 200);
    ck_assert_int_eq(vsock_credit_free(4096, 5, 5, &f), 0);
    ck_assert_uint_eq(f, 4096);
    /* more in flight than the peer's buffer (shrunk or lying) */
    f = 7;
    ck_assert_int_eq(vsock_credit_free(100, 101, 0, &f), -ERANGE);
    ck_assert_uint_eq(f, 0);
    /* peer claims to have forwarded more than we sent */
    f = 7;
    ck_assert_int_eq(vsock_credit_free(65536, 10, 11, &f), -ERANGE);
    ck_assert_uint_eq(f, 0);
    ck_assert_int_eq(vsock_credit_free(0, 0, 0, &f), 0);
    ck_assert_uint_eq(f, 0);
    ck_assert_int_eq(vsock_credit_free(UINT32_MAX, UINT32_MAX, 0, &f), 0);
    ck_assert_uint_eq(f, 0);
    ck_assert_uint_eq(vsock_cnt_add(UINT32_MAX, 2), 1);
}
END_TEST

static int cp(const char *s, uint32_t *port) { return vsock_connect_parse((const uint8_t *)s, strlen(s), port); }

START_TEST(connect_line_valid)
{
    uint32_t p = 0;
    ck_assert_int_eq(cp("CONNECT 52\n", &p), 11); ck_assert_uint_eq(p, 52);
    ck_assert_int_eq(cp("connect 1\n", &p), 10); ck_assert_uint_eq(p, 1);
    ck_assert_int_eq(cp("CoNnEcT 0\n", &p), 10); ck_assert_uint_eq(p, 0);
    ck_assert_int_eq(cp("CONNECT 4294967295\n", &p), 19); ck_assert_uint_eq(p, UINT32_MAX);
    ck_assert_int_eq(cp("CONNECT 0000000007\n", &p), 19); ck_assert_uint_eq(p, 7);
    ck_assert_int_eq(cp("CONNECT \t 80 \r\n", &p), 15); ck_assert_uint_eq(p, 80);
    ck_assert_int_eq(cp("CONNECT 80\r\n", &p), 12); ck_assert_uint_eq(p, 80);
    /* bytes after the newline are payload, never looked at */
    ck_assert_int_eq(cp("CONNECT 52\nhello\nCONNECT x", &p), 11); ck_assert_uint_eq(p, 52);
    const char *full = "CONNECT 52\n";
    p = 99;
    for (size_t n = 0; n < strlen(full); n++) {   /* every prefix: need more */
        ck_assert_int_eq(vsock_connect_parse((const uint8_t *)full, n, &p), 0);
        ck_assert_uint_eq(p, 99);
    }
    ck_assert_int_eq(vsock_connect_parse(NULL, 0, &p), 0);
    /* a long run of blanks is fine up to the maximum line length */
    char buf[VSOCK_CONNECT_MAX_LINE + 8];
    memset(buf, ' ', sizeof buf);
    memcpy(buf, "CONNECT", 7);
    memcpy(buf + VSOCK_CONNECT_MAX_LINE - 3, "5\n", 2);
    ck_assert_int_eq(vsock_connect_parse((uint8_t *)buf, VSOCK_CONNECT_MAX_LINE - 1, &p),
                     (int)VSOCK_CONNECT_MAX_LINE - 1);
    ck_assert_uint_eq(p, 5);
}
END_TEST

START_TEST(connect_line_malformed)
{
    uint32_t p = 77;
    const char *bad[] = {
        "X", "CONNECTX", "CONNEC 5\n", "CONNECT5\n", "CONNECT\n", "CONNECT \n", "CONNECT -5\n",
        "CONNECT +5\n", "CONNECT 4294967296\n", "CONNECT 99999999999\n", "CONNECT 00000000001\n",
        "CONNECT 5x\n", "CONNECT 5 6\n", "CONNECT 5\r\r\n", "CONNECT 5\rx", "CONNECT 0x10\n",
        " CONNECT 5\n", "\nCONNECT 5\n", "CONNECT\t\r\n", "OK 5\n",
        "CONNECT\xff", "\xc3\x89", "CONNECT 1\r \n",
    };
    for (unsigned i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_msg(cp(bad[i], &p) == -EINVAL, "accepted: %s", bad[i]);
        ck_assert_uint_eq(p, 77);
    }
    uint8_t nul[] = { 'C', 0 };
    ck_assert_int_eq(vsock_connect_parse(nul, 2, &p), -EINVAL);
    const uint8_t nul2[] = "CONNECT 5\0\n";
    ck_assert_int_eq(vsock_connect_parse(nul2, sizeof nul2 - 1, &p), -EINVAL);
    /* too long without a newline, and too long with one */
    char buf[200];
    memset(buf, ' ', sizeof buf);
    memcpy(buf, "CONNECT 5", 9);
    ck_assert_int_eq(vsock_connect_parse((uint8_t *)buf, VSOCK_CONNECT_MAX_LINE - 1, &p), 0);
    ck_assert_int_eq(vsock_connect_parse((uint8_t *)buf, VSOCK_CONNECT_MAX_LINE, &p), -EINVAL);
    ck_assert_int_eq(vsock_connect_parse((uint8_t *)buf, VSOCK_CONNECT_MAX_LINE + 1, &p), -EINVAL);
    buf[VSOCK_CONNECT_MAX_LINE] = '\n';
    ck_assert_int_eq(vsock_connect_parse((uint8_t *)buf, VSOCK_CONNECT_MAX_LINE + 1, &p), -EINVAL);
    ck_assert_int_eq(vsock_connect_parse(NULL, 3, &p), -EINVAL);
    ck_assert_uint_eq(p, 77);
}
END_TEST

START_TEST(ok_line)
{
    char b[32];
    ck_assert_int_eq(vsock_ok_line(VSOCK_HOST_PORT_BASE, b, sizeof b), 14);
    ck_assert_str_eq(b, "OK 1073741824\n");
    ck_assert_int_eq(vsock_ok_line(UINT32_MAX, b, sizeof b), 14);
    ck_assert_str_eq(b, "OK 4294967295\n");
    ck_assert_int_eq(vsock_ok_line(UINT32_MAX, b, 14), -ENOSPC);
    ck_assert_int_eq(vsock_ok_line(1, b, 5), -ENOSPC);  /* room for the NUL too */
    ck_assert_int_eq(vsock_ok_line(1, b, 6), 5);
    ck_assert_str_eq(b, "OK 1\n");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("vsock_pkt");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, wire_layout_is_little_endian_44_bytes);
    tcase_add_test(tc, valid_packets_of_every_op);
    tcase_add_test(tc, short_header);
    tcase_add_test(tc, malformed_headers);
    tcase_add_test(tc, cids);
    tcase_add_test(tc, credit_arithmetic_wraps_and_is_checked);
    tcase_add_test(tc, connect_line_valid);
    tcase_add_test(tc, connect_line_malformed);
    tcase_add_test(tc, ok_line);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
