/* The device's own IPv4 host (devices/net/net_local.h): ARP, the TCP
 * handshake, request/response through a service callback, segmentation by
 * MSS and window, resends after a duplicate ACK, FIN both ways, RSTs, the
 * connection table's bound, and malformed frames. A guest is played by
 * this file; every frame the host emits is checked (IPv4 and TCP
 * checksums). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devices/net/net_local.h"

#define MAXF 512
static uint8_t out[MAXF][1600];
static size_t out_len[MAXF];
static unsigned nout;

static void emit(void *o, const uint8_t *f, size_t len)
{
    (void)o;
    ck_assert_uint_lt(nout, MAXF);
    ck_assert_uint_le(len, sizeof out[0]);
    memcpy(out[nout], f, len);
    out_len[nout++] = len;
}

/* The service: a request is a line ending in '\n'; the answer "OK " + the
 * line repeated k times, where k is the line's first digit (0: 1); "close"
 * asks to close; "bad" fails. */
static long serve(void *o, const uint8_t *in, size_t n, uint8_t *ob, size_t cap, size_t *olen, bool *close,
                  uint64_t now)
{
    (void)o; (void)now;
    const uint8_t *nl = memchr(in, '\n', n);
    if (!nl)
        return 0;
    size_t line = (size_t)(nl - in) + 1;
    if (line >= 3 && !memcmp(in, "bad", 3))
        return -1;
    unsigned k = in[0] >= '1' && in[0] <= '9' ? (unsigned)(in[0] - '0') * 1000 : 1;
    size_t w = 0;
    for (unsigned i = 0; i < k && w + 3 + line <= cap; i++) {
        memcpy(ob + w, "OK ", 3);
        memcpy(ob + w + 3, in, line);
        w += 3 + line;
    }
    *olen = w;
    *close = line >= 5 && !memcmp(in, "close", 5);
    return (long)line;
}

static struct net_local L;
static const uint8_t GMAC[6] = { 0x52, 0x54, 0, 1, 2, 3 }, GWMAC[6] = { 0x02, 0, 0, 0, 0, 1 };
static const uint8_t LMAC[6] = { 0x06, 0xaa, 0xbb, 0xcc, 0xdd, 0xee };
#define GIP 0x0a00020fu        /* 10.0.2.15 */
#define MIP 0xa9fea9feu        /* 169.254.169.254 */

static uint32_t n32(uint32_t v) { return __builtin_bswap32(v); }
static uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }
static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static void put32(uint8_t *p, uint32_t v) { p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v; }

static void setup(void)
{
    nout = 0;
    ck_assert_int_eq(net_local_init(&L, n32(MIP), 80, LMAC, serve, emit, NULL, 12345), 0);
}

static void teardown(void) { net_local_free(&L); }

/* A TCP segment from the guest (to the gateway's MAC, as a routed packet). */
static size_t seg(uint8_t *f, uint16_t sport, uint16_t dport, uint8_t flags, uint32_t seq, uint32_t ack, uint16_t wnd,
                  const char *data, size_t n, uint16_t mss)
{
    memcpy(f, GWMAC, 6);
    memcpy(f + 6, GMAC, 6);
    put16(f + 12, 0x0800);
    uint8_t *ip = f + 14, *t = ip + 20;
    size_t thl = mss ? 24 : 20;
    memset(ip, 0, 20 + thl);
    ip[0] = 0x45;
    put16(ip + 2, (uint16_t)(20 + thl + n));
    ip[8] = 64;
    ip[9] = 6;
    put32(ip + 12, GIP);
    put32(ip + 16, MIP);
    put16(t, sport);
    put16(t + 2, dport);
    put32(t + 4, seq);
    put32(t + 8, ack);
    t[12] = (uint8_t)((thl / 4) << 4);
    t[13] = flags;
    put16(t + 14, wnd);
    if (mss) {
        t[20] = 2; t[21] = 4;
        put16(t + 22, mss);
    }
    if (n)
        memcpy(t + thl, data, n);
    return 14 + 20 + thl + n;
}

/* Check emitted frame i: checksums, addresses; its TCP header. */
static const uint8_t *tcp_of(unsigned i, size_t *paylen)
{
    const uint8_t *f = out[i], *ip = f + 14;
    ck_assert_uint_eq(be16(f + 12), 0x0800);
    ck_assert(!memcmp(f, GMAC, 6));
    ck_assert(!memcmp(f + 6, GWMAC, 6));        /* answered as the address the guest sent to */
    size_t iplen = be16(ip + 2);
    ck_assert_uint_eq(iplen + 14, out_len[i]);
    ck_assert_uint_eq(net_csum(ip, 20, 0), 0);
    ck_assert_uint_eq(be32(ip + 12), MIP);
    ck_assert_uint_eq(be32(ip + 16), GIP);
    const uint8_t *t = ip + 20;
    size_t tl = iplen - 20;
    uint32_t sum = (uint32_t)be16(ip + 12) + be16(ip + 14) + be16(ip + 16) + be16(ip + 18) + 6 + (uint32_t)tl;
    ck_assert_uint_eq(net_csum(t, tl, sum), 0);
    *paylen = tl - (size_t)(t[12] >> 4) * 4;
    return t;
}

static uint8_t fb[70000];

/* Handshake from port p: returns our ISS + 1 (the first data seq). */
static uint32_t handshake(uint16_t p, uint32_t gseq, uint16_t wnd, uint16_t mss)
{
    unsigned n0 = nout;
    size_t paylen;
    net_local_input(&L, fb, seg(fb, p, 80, 0x02, gseq, 0, wnd, NULL, 0, mss), 1000);
    ck_assert_uint_eq(nout, n0 + 1);
    const uint8_t *t = tcp_of(n0, &paylen);
    ck_assert_uint_eq(t[13], 0x12);             /* SYN|ACK */
    ck_assert_uint_eq(be32(t + 8), gseq + 1);
    ck_assert_uint_eq(t[12] >> 4, 6);           /* with an MSS option */
    uint32_t iss = be32(t + 4);
    net_local_input(&L, fb, seg(fb, p, 80, 0x10, gseq + 1, iss + 1, wnd, NULL, 0, 0), 1000);
    ck_assert_uint_eq(nout, n0 + 1);
    return iss + 1;
}

START_TEST(arp_and_wants)
{
    setup();
    uint8_t a[42] = { 0 };
    memset(a, 0xff, 6);
    memcpy(a + 6, GMAC, 6);
    put16(a + 12, 0x0806);
    put16(a + 14, 1); put16(a + 16, 0x0800); a[18] = 6; a[19] = 4; put16(a + 20, 1);
    memcpy(a + 22, GMAC, 6);
    put32(a + 28, GIP);
    put32(a + 38, MIP);
    ck_assert(net_local_wants(&L, a, sizeof a));
    net_local_input(&L, a, sizeof a, 0);
    ck_assert_uint_eq(nout, 1);
    ck_assert(!memcmp(out[0], GMAC, 6));
    ck_assert_uint_eq(be16(out[0] + 20), 2);
    ck_assert(!memcmp(out[0] + 22, LMAC, 6));
    ck_assert_uint_eq(be32(out[0] + 28), MIP);
    ck_assert(!memcmp(out[0] + 32, GMAC, 6));
    ck_assert_uint_eq(be32(out[0] + 38), GIP);
    put32(a + 38, GIP + 1);                         /* another address */
    ck_assert(!net_local_wants(&L, a, sizeof a));
    put32(a + 38, MIP);
    put16(a + 20, 2);                               /* a reply, not a request */
    ck_assert(!net_local_wants(&L, a, sizeof a));
    size_t n = seg(fb, 40000, 80, 0x02, 1, 0, 1000, NULL, 0, 0);
    ck_assert(net_local_wants(&L, fb, n));
    put32(fb + 14 + 16, MIP + 1);
    ck_assert(!net_local_wants(&L, fb, n));
    ck_assert(!net_local_wants(&L, fb, 20));
    teardown();
}
END_TEST

START_TEST(request_response_and_close)
{
    setup();
    uint32_t g = 1000, s = handshake(40000, g - 1, 65535, 1460);
    size_t pl;
    /* a request in two segments: answered once whole */
    net_local_input(&L, fb, seg(fb, 40000, 80, 0x18, g, s, 65535, "he", 2, 0), 2000);
    ck_assert_uint_eq(nout, 2);                     /* an ACK only */
    const uint8_t *t = tcp_of(1, &pl);
    ck_assert_uint_eq(pl, 0);
    ck_assert_uint_eq(be32(t + 8), g + 2);
    net_local_input(&L, fb, seg(fb, 40000, 80, 0x18, g + 2, s, 65535, "llo\n", 4, 0), 2000);
    ck_assert_uint_eq(nout, 3);
    t = tcp_of(2, &pl);
    ck_assert_uint_eq(pl, 9);
    ck_assert(!memcmp(t + 20, "OK hello\n", 9));
    ck_assert_uint_eq(be32(t + 4), s);
    ck_assert_uint_eq(be32(t + 8), g + 6);
    /* "close": answered, then our FIN; the guest ACKs and FINs; freed */
    net_local_input(&L, fb, seg(fb, 40000, 80, 0x18, g + 6, s + 9, 65535, "close\n", 6, 0), 3000);
    ck_assert_uint_eq(nout, 5);
    t = tcp_of(3, &pl);
    ck_assert(!memcmp(t + 20, "OK close\n", 9));
    t = tcp_of(4, &pl);
    ck_assert_uint_eq(t[13] & 0x01, 1);
    uint32_t fin_seq = be32(t + 4);
    ck_assert_uint_eq(fin_seq, s + 18);
    net_local_input(&L, fb, seg(fb, 40000, 80, 0x11, g + 12, fin_seq + 1, 65535, NULL, 0, 0), 3000);
    ck_assert_uint_eq(nout, 6);                     /* our ACK of its FIN */
    t = tcp_of(5, &pl);
    ck_assert_uint_eq(be32(t + 8), g + 13);
    for (unsigned i = 0; i < NET_LOCAL_CONNS; i++)
        ck_assert(!L.conn[i].used);
    teardown();
}
END_TEST

/* A request and the guest's FIN in one segment (a client that writes its
 * request and shuts down its sending side at once, e.g. `printf ... | nc`
 * when the FIN joins the data): answered, then our FIN. Before, the FIN
 * closed the connection before the buffered request was served: no answer,
 * only a FIN. The same with the FIN in a segment of its own right after a
 * request that is still incomplete: no answer, FIN only. */
START_TEST(request_with_fin)
{
    setup();
    uint32_t g = 300, s = handshake(40020, g - 1, 65535, 1460);
    size_t pl;
    nout = 0;
    net_local_input(&L, fb, seg(fb, 40020, 80, 0x19, g, s, 65535, "hello\n", 6, 0), 2000);
    ck_assert_uint_eq(nout, 2);
    const uint8_t *t = tcp_of(0, &pl);
    ck_assert_uint_eq(pl, 9);
    ck_assert(!memcmp(t + 20, "OK hello\n", 9));
    ck_assert_uint_eq(be32(t + 8), g + 7);          /* acknowledges data and FIN */
    t = tcp_of(1, &pl);
    ck_assert_uint_eq(t[13] & 0x01, 1);
    ck_assert_uint_eq(be32(t + 4), s + 9);
    net_local_input(&L, fb, seg(fb, 40020, 80, 0x10, g + 7, s + 10, 65535, NULL, 0, 0), 2000);
    for (unsigned i = 0; i < NET_LOCAL_CONNS; i++)
        ck_assert(!L.conn[i].used);
    /* two requests and the FIN in one segment: both answered, in order */
    s = handshake(40021, g - 1, 65535, 1460);
    nout = 0;
    net_local_input(&L, fb, seg(fb, 40021, 80, 0x19, g, s, 65535, "ab\ncd\n", 6, 0), 2000);
    ck_assert_uint_eq(nout, 2);
    t = tcp_of(0, &pl);
    ck_assert_uint_eq(pl, 12);
    ck_assert(!memcmp(t + 20, "OK ab\nOK cd\n", 12));
    t = tcp_of(1, &pl);
    ck_assert_uint_eq(t[13] & 0x01, 1);
    net_local_reset(&L);
    /* an incomplete request, then the FIN: nothing to answer, our FIN */
    s = handshake(40022, g - 1, 65535, 1460);
    net_local_input(&L, fb, seg(fb, 40022, 80, 0x18, g, s, 65535, "half", 4, 0), 2000);
    nout = 0;
    net_local_input(&L, fb, seg(fb, 40022, 80, 0x11, g + 4, s, 65535, NULL, 0, 0), 2000);
    ck_assert_uint_eq(nout, 1);
    t = tcp_of(0, &pl);
    ck_assert_uint_eq(pl, 0);
    ck_assert_uint_eq(t[13] & 0x01, 1);
    ck_assert_uint_eq(be32(t + 8), g + 5);
    teardown();
}
END_TEST

/* A SYN from the port of a connection the host still holds (the guest
 * rebooted, or its RST was lost; Linux reuses a port freely after a close
 * the server began): answered with an ACK for the old connection (RFC
 * 5961's challenge ACK), which the guest's stack answers with a RST that
 * frees it; its next SYN opens a new connection. Before, such a SYN was
 * ignored: the port could not reach the service until the table filled
 * and the connection was reclaimed as idle. */
START_TEST(syn_on_a_held_connection)
{
    setup();
    uint32_t s = handshake(40030, 499, 65535, 1460);
    size_t pl;
    nout = 0;
    net_local_input(&L, fb, seg(fb, 40030, 80, 0x02, 90000, 0, 65535, NULL, 0, 1460), 2000);
    ck_assert_uint_eq(nout, 1);
    const uint8_t *t = tcp_of(0, &pl);
    ck_assert_uint_eq(t[13], 0x10);                 /* ACK, no SYN */
    ck_assert_uint_eq(be32(t + 4), s);
    ck_assert_uint_eq(be32(t + 8), 500);            /* the old connection's next byte */
    /* the guest's RST (seq = that ACK number) frees it */
    net_local_input(&L, fb, seg(fb, 40030, 80, 0x04, 500, 0, 0, NULL, 0, 0), 2000);
    for (unsigned i = 0; i < NET_LOCAL_CONNS; i++)
        ck_assert(!L.conn[i].used);
    handshake(40030, 90000, 65535, 1460);
    /* the same during a handshake: a SYN with another sequence number */
    net_local_reset(&L);
    nout = 0;
    net_local_input(&L, fb, seg(fb, 40031, 80, 0x02, 7, 0, 65535, NULL, 0, 1460), 2000);
    net_local_input(&L, fb, seg(fb, 40031, 80, 0x02, 7000, 0, 65535, NULL, 0, 1460), 2000);
    ck_assert_uint_eq(nout, 2);
    t = tcp_of(1, &pl);
    ck_assert_uint_eq(t[13], 0x10);
    ck_assert_uint_eq(be32(t + 8), 8);
    /* while the same SYN again still gets the SYN-ACK again */
    net_local_input(&L, fb, seg(fb, 40031, 80, 0x02, 7, 0, 65535, NULL, 0, 1460), 2000);
    t = tcp_of(2, &pl);
    ck_assert_uint_eq(t[13], 0x12);
    teardown();
}
END_TEST

/* A 3000-line answer: cut to the MSS (536) and the guest's window; the
 * rest goes as ACKs come; a duplicate ACK sends the unacknowledged part
 * again. */
START_TEST(segments_window_and_resend)
{
    setup();
    uint32_t g = 5000, s = handshake(40001, g - 1, 2000, 536);
    net_local_input(&L, fb, seg(fb, 40001, 80, 0x18, g, s, 2000, "3abc\n", 5, 0), 1);
    size_t total = 3000 * 8, got = 0, pl;
    unsigned first = 1;
    /* 2000 bytes of window: 536 + 536 + 536 + 392 */
    ck_assert_uint_eq(nout, 1 + 4);
    for (unsigned i = first; i < nout; i++) {
        tcp_of(i, &pl);
        ck_assert_uint_le(pl, 536);
        got += pl;
    }
    ck_assert_uint_eq(got, 2000);
    /* a duplicate ACK (nothing new acknowledged): all 2000 again */
    unsigned before = nout;
    net_local_input(&L, fb, seg(fb, 40001, 80, 0x10, g + 5, s, 2000, NULL, 0, 0), 2);
    size_t again = 0;
    for (unsigned i = before; i < nout; i++) {
        const uint8_t *t = tcp_of(i, &pl);
        if (i == before)
            ck_assert_uint_eq(be32(t + 4), s);
        again += pl;
    }
    ck_assert_uint_eq(again, 2000);
    /* acknowledge as it comes: everything arrives, in order */
    static uint8_t stream[3000 * 8];
    for (unsigned i = first; i < before; i++) {
        const uint8_t *t = tcp_of(i, &pl);
        memcpy(stream + (be32(t + 4) - s), t + 20, pl);
    }
    uint32_t acked = s + 2000;
    while (acked - s < total) {
        nout = 0;
        net_local_input(&L, fb, seg(fb, 40001, 80, 0x10, g + 5, acked, 2000, NULL, 0, 0), 3);
        ck_assert_uint_gt(nout, 0);
        for (unsigned i = 0; i < nout; i++) {
            const uint8_t *t = tcp_of(i, &pl);
            ck_assert_uint_eq(be32(t + 4), acked);
            ck_assert_uint_le(acked - s + pl, total);
            memcpy(stream + (acked - s), t + 20, pl);
            acked += (uint32_t)pl;
        }
    }
    ck_assert_uint_eq(acked - s, total);
    for (size_t k = 0; k < 3000; k++)
        ck_assert(!memcmp(stream + 8 * k, "OK 3abc\n", 8));
    teardown();
}
END_TEST

START_TEST(resets_and_bounds)
{
    setup();
    size_t pl;
    /* another port: RST|ACK from that port */
    net_local_input(&L, fb, seg(fb, 40002, 81, 0x02, 77, 0, 1000, NULL, 0, 0), 1);
    ck_assert_uint_eq(nout, 1);
    const uint8_t *t = tcp_of(0, &pl);
    ck_assert_uint_eq(t[13], 0x14);
    ck_assert_uint_eq(be16(t), 81);
    ck_assert_uint_eq(be32(t + 8), 78);
    /* data on no connection: RST with its ACK number as seq */
    net_local_input(&L, fb, seg(fb, 40003, 80, 0x18, 5, 999, 1000, "x\n", 2, 0), 1);
    t = tcp_of(1, &pl);
    ck_assert_uint_eq(t[13], 0x04);
    ck_assert_uint_eq(be32(t + 4), 999);
    /* a RST never gets a RST */
    net_local_input(&L, fb, seg(fb, 40003, 80, 0x04, 5, 0, 1000, NULL, 0, 0), 1);
    ck_assert_uint_eq(nout, 2);
    /* the table: 16 connections, the 17th is refused, an idle one reclaimed */
    for (uint16_t p = 0; p < NET_LOCAL_CONNS; p++)
        handshake((uint16_t)(41000 + p), 100, 1000, 0);
    nout = 0;
    net_local_input(&L, fb, seg(fb, 42000, 80, 0x02, 1, 0, 1000, NULL, 0, 0), 1001);
    t = tcp_of(0, &pl);
    ck_assert_uint_eq(t[13] & 0x04, 0x04);
    net_local_input(&L, fb, seg(fb, 42000, 80, 0x02, 1, 0, 1000, NULL, 0, 0), 1001 + NET_LOCAL_IDLE_NS + 1);
    t = tcp_of(1, &pl);
    ck_assert_uint_eq(t[13], 0x12);
    /* a service error: the connection is closed after what was answered */
    net_local_reset(&L);
    nout = 0;
    uint32_t s = handshake(43000, 9, 65535, 0);
    net_local_input(&L, fb, seg(fb, 43000, 80, 0x18, 10, s, 65535, "bad\n", 4, 0), 5);
    t = tcp_of(nout - 1, &pl);
    ck_assert_uint_eq(t[13] & 0x01, 1);
    /* a request larger than the host holds: closed */
    net_local_reset(&L);
    nout = 0;
    s = handshake(43001, 9, 65535, 0);
    static char big[1400];
    memset(big, 'a', sizeof big);
    uint32_t q = 10;
    for (unsigned k = 0; k * sizeof big < NET_LOCAL_REQ_MAX + sizeof big; k++) {
        net_local_input(&L, fb, seg(fb, 43001, 80, 0x18, q, s, 65535, big, sizeof big, 0), 5);
        q += sizeof big;
    }
    bool closed = !L.conn[0].used || L.conn[0].fin_queued;
    for (unsigned i = 1; i < NET_LOCAL_CONNS; i++)
        ck_assert(!L.conn[i].used);
    ck_assert(closed);
    teardown();
}
END_TEST

START_TEST(malformed_frames)
{
    setup();
    size_t n = seg(fb, 40010, 80, 0x02, 1, 0, 1000, NULL, 0, 0);
    uint64_t bad0 = L.frames_bad;
    static const struct { size_t off; uint8_t val; } forge[] = {
        { 14, 0x44 },               /* IHL 4 */
        { 16, 0xff },               /* total length past the frame */
        { 20, 0x20 },               /* MF: a fragment */
        { 46, 0x40 },               /* TCP data offset 4 */
        { 46, 0xf0 },               /* data offset past the packet */
        { 23, 17 },                 /* UDP */
    };
    for (size_t k = 0; k < sizeof forge / sizeof forge[0]; k++) {
        static uint8_t f[200];
        memcpy(f, fb, n);
        f[forge[k].off] = forge[k].val;
        net_local_input(&L, f, n, 1);
    }
    ck_assert_uint_eq(L.frames_bad - bad0, 6);
    ck_assert_uint_eq(nout, 0);
    net_local_input(&L, fb, 10, 1);                 /* a runt */
    ck_assert_uint_eq(L.frames_bad - bad0, 7);
    teardown();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("net_local");
    TCase *tc = tcase_create("net_local");
    tcase_add_test(tc, arp_and_wants);
    tcase_add_test(tc, request_response_and_close);
    tcase_add_test(tc, request_with_fin);
    tcase_add_test(tc, syn_on_a_held_connection);
    tcase_add_test(tc, segments_window_and_resend);
    tcase_add_test(tc, resets_and_bounds);
    tcase_add_test(tc, malformed_frames);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
