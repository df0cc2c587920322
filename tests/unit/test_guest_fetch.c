/* moat-fetch's parsers (guest/tools/fetch_parse.h, compiled in here: it is
 * guest code, not part of libmoat): URLs and redirects, the response head,
 * the chunked coding at every split, DNS queries and answers, resolv.conf
 * and hosts files, and every malformed case. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "guest/tools/fetch_parse.c"

#define IP(a, b, c, d) ((uint32_t)(a) << 24 | (uint32_t)(b) << 16 | (uint32_t)(c) << 8 | (uint32_t)(d))

/* ---- URLs ---- */

START_TEST(url_good)
{
    struct fetch_url u;
    ck_assert_int_eq(fetch_url_parse("http://10.0.2.2:8000/a/b.txt", &u), 0);
    ck_assert_str_eq(u.host, "10.0.2.2");
    ck_assert_uint_eq(u.port, 8000);
    ck_assert_str_eq(u.path, "/a/b.txt");
    ck_assert_int_eq(fetch_url_parse("HTTP://Example.ORG", &u), 0);
    ck_assert_str_eq(u.host, "example.org");
    ck_assert_uint_eq(u.port, 80);
    ck_assert_str_eq(u.path, "/");
    ck_assert_int_eq(fetch_url_parse("http://example.org.?q=1#frag", &u), 0);
    ck_assert_str_eq(u.host, "example.org");
    ck_assert_str_eq(u.path, "/?q=1");
    ck_assert_int_eq(fetch_url_parse("http://a-b.c1:65535/x?y#z", &u), 0);
    ck_assert_str_eq(u.host, "a-b.c1");
    ck_assert_uint_eq(u.port, 65535);
    ck_assert_str_eq(u.path, "/x?y");
    ck_assert_int_eq(fetch_url_parse("http://h#f", &u), 0);
    ck_assert_str_eq(u.path, "/");
    ck_assert_int_eq(fetch_url_parse("http://localhost:1", &u), 0);
    ck_assert_uint_eq(u.port, 1);
    /* The longest path and host that fit. */
    char url[8192], host[300];
    memset(host, 'a', 63);
    host[63] = 0;
    snprintf(url, sizeof(url), "http://%s.%s.%s.%.61s/", host, host, host, host);
    ck_assert_int_eq(strlen(url) - 8, FETCH_HOST_MAX);
    ck_assert_int_eq(fetch_url_parse(url, &u), 0);
    ck_assert_int_eq(strlen(u.host), FETCH_HOST_MAX);
    strcpy(url, "http://h");
    memset(url + 8, 'p', FETCH_PATH_MAX);
    url[8] = '/';
    url[8 + FETCH_PATH_MAX] = 0;
    ck_assert_int_eq(fetch_url_parse(url, &u), 0);
    ck_assert_int_eq(strlen(u.path), FETCH_PATH_MAX);
    url[8 + FETCH_PATH_MAX] = 'p';
    url[9 + FETCH_PATH_MAX] = 0;
    ck_assert_int_eq(fetch_url_parse(url, &u), -EINVAL);
}
END_TEST

START_TEST(url_bad)
{
    static const char *bad[] = {
        "", "http", "http:", "http:/", "http://", "http:///x", "http://:80/",
        "10.0.2.2/x", "//h/x", "http//h/", "http://h:/", "http://h:0/",
        "http://h:00080/", "http://h:65536/", "http://h:99999/", "http://h:123456/",
        "http://h:8a/", "http://h:-1/", "http://u@h/", "http://u:p@h/",
        "http://[::1]/", "http://[::1]:80/", "http://h /", "http://h/a b",
        "http://h/\x01", "http://h/\x7f", "http://h\t/", "http://-h/", "http://h-/",
        "http://a..b/", "http://.h/", "http://h_1/", "http://h!/", "http://./",
        "http://h..", "http://h:80:80/", "http://1.2.3.4:x/",
    };
    struct fetch_url u;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(fetch_url_parse(bad[i], &u) == -EINVAL, "accepted '%s'", bad[i]);
    ck_assert_int_eq(fetch_url_parse("https://example.org/", &u), -EPROTONOSUPPORT);
    ck_assert_int_eq(fetch_url_parse("ftp://h/", &u), -EPROTONOSUPPORT);
    ck_assert_int_eq(fetch_url_parse("file:///etc/passwd", &u), -EPROTONOSUPPORT);
    /* A label of 64, a host of 254. */
    char url[600], lab[70];
    memset(lab, 'a', 64);
    lab[64] = 0;
    snprintf(url, sizeof(url), "http://%s/", lab);
    ck_assert_int_eq(fetch_url_parse(url, &u), -EINVAL);
    lab[63] = 0;
    snprintf(url, sizeof(url), "http://%s.%s.%s.%.62s/", lab, lab, lab, lab);
    ck_assert_int_eq(fetch_url_parse(url, &u), -EINVAL);
}
END_TEST

START_TEST(redirects)
{
    struct fetch_url b, o;
    ck_assert_int_eq(fetch_url_parse("http://h:81/dir/file?q=/x", &b), 0);
    ck_assert_int_eq(fetch_url_redirect(&b, "http://other/y", &o), 0);
    ck_assert_str_eq(o.host, "other");
    ck_assert_uint_eq(o.port, 80);
    ck_assert_str_eq(o.path, "/y");
    ck_assert_int_eq(fetch_url_redirect(&b, "//n:82/z", &o), 0);
    ck_assert_str_eq(o.host, "n");
    ck_assert_uint_eq(o.port, 82);
    ck_assert_str_eq(o.path, "/z");
    ck_assert_int_eq(fetch_url_redirect(&b, "/abs?x", &o), 0);
    ck_assert_str_eq(o.host, "h");
    ck_assert_uint_eq(o.port, 81);
    ck_assert_str_eq(o.path, "/abs?x");
    ck_assert_int_eq(fetch_url_redirect(&b, "rel.txt", &o), 0);
    ck_assert_str_eq(o.path, "/dir/rel.txt");
    ck_assert_int_eq(fetch_url_redirect(&b, "?only", &o), 0);
    ck_assert_str_eq(o.path, "/dir/?only");
    ck_assert_int_eq(fetch_url_redirect(&b, "https://h/", &o), -EPROTONOSUPPORT);
    ck_assert_int_eq(fetch_url_redirect(&b, "mailto:x", &o), -EPROTONOSUPPORT);
    ck_assert_int_eq(fetch_url_redirect(&b, "/a b", &o), -EINVAL);
    ck_assert_int_eq(fetch_url_redirect(&b, "//u@h/", &o), -EINVAL);
    /* Too long once joined. */
    char loc[FETCH_PATH_MAX + 2];
    memset(loc, 'x', sizeof(loc) - 1);
    loc[0] = '/';
    loc[sizeof(loc) - 1] = 0;
    ck_assert_int_eq(fetch_url_redirect(&b, loc, &o), -EINVAL);
}
END_TEST

/* ---- response head ---- */

static int resp(const char *s, struct fetch_resp *r)
{
    return fetch_resp_parse(s, strlen(s), r);
}

START_TEST(head_good)
{
    struct fetch_resp r;
    const char *h = "HTTP/1.1 200 OK\r\nContent-Length: 12\r\nServer: x\r\n\r\nbody";
    ck_assert_int_eq(resp(h, &r), (int)strlen(h) - 4);
    ck_assert_int_eq(r.status, 200);
    ck_assert_int_eq(r.length, 12);
    ck_assert_int_eq(r.chunked, 0);
    ck_assert_str_eq(r.location, "");
    /* Every prefix is incomplete. */
    for (size_t n = 0; n < strlen(h) - 4; n++)
        ck_assert_int_eq(fetch_resp_parse(h, n, &r), 0);
    /* Bare LF, HTTP/1.0, no reason, case-insensitive names, OWS. */
    h = "HTTP/1.0 404\ncontent-LENGTH:\t 0 \n\n";
    ck_assert_int_eq(resp(h, &r), (int)strlen(h));
    ck_assert_int_eq(r.status, 404);
    ck_assert_int_eq(r.length, 0);
    h = "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, Chunked\r\nContent-Length: 5\r\n\r\n";
    ck_assert_int_eq(resp(h, &r), (int)strlen(h));
    ck_assert_int_eq(r.chunked, 1);
    h = "HTTP/1.1 302 Found\r\nLocation:  /next \r\n\r\n";
    ck_assert_int_eq(resp(h, &r), (int)strlen(h));
    ck_assert_int_eq(r.status, 302);
    ck_assert_str_eq(r.location, "/next");
    ck_assert_int_eq(r.length, -1);
    h = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n";
    ck_assert_int_eq(resp(h, &r), 25);
    ck_assert_int_eq(r.status, 100);
    /* The same Content-Length twice is fine. */
    h = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n";
    ck_assert_int_eq(resp(h, &r), (int)strlen(h));
    ck_assert_int_eq(r.length, 3);
    h = "HTTP/1.1 200 OK\r\nContent-Length: 4611686018427387904\r\n\r\n";
    ck_assert_int_eq(resp(h, &r), (int)strlen(h));
    ck_assert_int_eq(r.length, (int64_t)1 << 62);
}
END_TEST

START_TEST(head_bad)
{
    static const char *bad[] = {
        "\r\n\r\n", "HTTP/1.1\r\n\r\n", "HTTP/1.1 20\r\n\r\n", "HTTP/1.1 2000\r\n\r\n",
        "HTTP/1.1 099 x\r\n\r\n", "HTTP/1.1 600 x\r\n\r\n", "HTTP/2 200 OK\r\n\r\n",
        "HTTP/1.x 200 OK\r\n\r\n", "http/1.1 200 OK\r\n\r\n", "HTTP/1.1  200 OK\r\n\r\n",
        "HTTP/1.1 2x0 OK\r\n\r\n", "ICY 200 OK\r\n\r\n", "HTTP/1.1 200OK\r\n\r\n",
        "HTTP/1.1 200 OK\r\nNoColon\r\n\r\n",
        "HTTP/1.1 200 OK\r\n: empty name\r\n\r\n",
        "HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
        "HTTP/1.1 200 OK\r\nA: b\r\n folded\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1 2\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1,1\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 0x10\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 4611686018427387905\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding:\r\n\r\n",
        "HTTP/1.1 200 OK\r\nA: b\rc\r\n\r\n",
        "HTTP/1.1 200 OK\rX\r\n\r\n",
    };
    struct fetch_resp r;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(resp(bad[i], &r) == -EINVAL, "accepted '%s'", bad[i]);
    const char nul[] = "HTTP/1.1 200 OK\r\nA: b\0c\r\n\r\n";
    ck_assert_int_eq(fetch_resp_parse(nul, sizeof(nul) - 1, &r), -EINVAL);
    ck_assert_int_eq(resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", &r), -EPROTO);
    ck_assert_int_eq(resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", &r), -EPROTO);
    ck_assert_int_eq(resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                          "Transfer-Encoding: identity\r\n\r\n", &r), -EPROTO);
    /* A Location that does not fit. */
    char *big = malloc(sizeof(r.location) + 64);
    strcpy(big, "HTTP/1.1 301 x\r\nLocation: ");
    size_t n = strlen(big);
    memset(big + n, 'a', sizeof(r.location));
    strcpy(big + n + sizeof(r.location), "\r\n\r\n");
    ck_assert_int_eq(resp(big, &r), -EINVAL);
    big[n + sizeof(r.location) - 1] = '\r';
    big[n + sizeof(r.location)] = '\n';
    ck_assert_int_eq(resp(big, &r), (int)strlen(big) - 2);
    ck_assert_int_eq(strlen(r.location), sizeof(r.location) - 1);
    free(big);
}
END_TEST

START_TEST(head_too_big)
{
    char *h = malloc(FETCH_HEAD_MAX + 100);
    struct fetch_resp r;
    strcpy(h, "HTTP/1.1 200 OK\r\nX: ");
    size_t n = strlen(h);
    memset(h + n, 'a', FETCH_HEAD_MAX + 100 - n);
    ck_assert_int_eq(fetch_resp_parse(h, FETCH_HEAD_MAX - 1, &r), 0);
    ck_assert_int_eq(fetch_resp_parse(h, FETCH_HEAD_MAX, &r), -E2BIG);
    ck_assert_int_eq(fetch_resp_parse(h, FETCH_HEAD_MAX + 100, &r), -E2BIG);
    /* A head ending exactly at the limit is fine; one byte later is not. */
    memcpy(h + FETCH_HEAD_MAX - 4, "\r\n\r\n", 4);
    ck_assert_int_eq(fetch_resp_parse(h, FETCH_HEAD_MAX + 100, &r), FETCH_HEAD_MAX);
    memset(h + FETCH_HEAD_MAX - 4, 'a', 4);
    memcpy(h + FETCH_HEAD_MAX - 3, "\r\n\r\n", 4);
    ck_assert_int_eq(fetch_resp_parse(h, FETCH_HEAD_MAX + 100, &r), -E2BIG);
    free(h);
}
END_TEST

/* ---- chunked ---- */

/* Decodes S fed in pieces of PIECE bytes; the body into OUT. Returns the
 * decoder's last result; *END: the input offset where the body ended. */
static int dechunk(const char *s, size_t len, size_t piece, char *out, size_t *olen, size_t *end)
{
    struct fetch_chunked c = { 0 };
    uint8_t buf[64];
    size_t off = 0;
    int r = 0;
    *olen = 0;
    *end = 0;
    while (off < len) {
        size_t k = len - off < piece ? len - off : piece, used, o;
        memcpy(buf, s + off, k);
        r = fetch_chunked_decode(&c, buf, k, &used, &o);
        if (r < 0)
            return r;
        ck_assert_uint_le(used, k);
        ck_assert_uint_le(o, used);
        memcpy(out + *olen, buf, o);
        *olen += o;
        off += used;
        if (r == 1) {
            *end = off;
            return 1;
        }
        ck_assert_uint_eq(used, k);
    }
    return r;
}

START_TEST(chunked_good)
{
    static const char body[] =
        "5\r\nhello\r\n"
        "1A;ext=1\r\nabcdefghijklmnopqrstuvwxyz\r\n"
        "0001\n!\n"
        "0\r\nTrailer: x\r\n\r\nNEXT";
    char out[128];
    size_t olen, end;
    for (size_t piece = 1; piece <= 64; piece++) {
        ck_assert_int_eq(dechunk(body, sizeof(body) - 1, piece, out, &olen, &end), 1);
        ck_assert_uint_eq(olen, 32);
        ck_assert_int_eq(memcmp(out, "helloabcdefghijklmnopqrstuvwxyz!", 32), 0);
        ck_assert_uint_eq(end, sizeof(body) - 1 - 4);
    }
    /* Empty body, bare LFs; an incomplete one wants more. */
    ck_assert_int_eq(dechunk("0\n\n", 3, 1, out, &olen, &end), 1);
    ck_assert_uint_eq(olen, 0);
    ck_assert_int_eq(dechunk("0\r\n\r", 4, 2, out, &olen, &end), 0);
    ck_assert_int_eq(dechunk("3\r\nab", 5, 5, out, &olen, &end), 0);
    ck_assert_uint_eq(olen, 2);
    /* 15 hex digits is the most. */
    ck_assert_int_eq(dechunk("00000000000000a\r\n0123456789\r\n0\r\n\r\n", 34, 7, out, &olen, &end), 1);
    ck_assert_uint_eq(olen, 10);
}
END_TEST

START_TEST(chunked_bad)
{
    static const char *bad[] = {
        "\r\n", "x\r\n", ";\r\n", " 5\r\nhello\r\n0\r\n\r\n", "5\rhello",
        "5\r\nhelloX\r\n", "5\r\nhello\rX", "0000000000000001\r\nx\r\n0\r\n\r\n",
        "-1\r\n", "5 \r\nhello\r\n0\r\n\r\nX", "0\r\n\rX",
    };
    char out[128];
    size_t olen, end;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int r = dechunk(bad[i], strlen(bad[i]), 3, out, &olen, &end);
        /* "5 \r\n..." is a size with an extension: fine, and it ends. */
        if (i == 9)
            ck_assert_int_eq(r, 1);
        else
            ck_assert_msg(r == -EINVAL, "accepted '%s' (%d)", bad[i], r);
    }
    /* A NUL in a chunk extension. */
    ck_assert_int_eq(dechunk("1;a\0\r\nx\r\n0\r\n\r\n", 14, 4, out, &olen, &end), -EINVAL);
    /* A trailer that never ends stops at FETCH_TRAILER_MAX. */
    struct fetch_chunked c = { 0 };
    uint8_t buf[4096];
    size_t used, o;
    memcpy(buf, "0\r\n", 3);
    ck_assert_int_eq(fetch_chunked_decode(&c, buf, 3, &used, &o), 0);
    int r = 0;
    for (int i = 0; i < 8 && r == 0; i++) {
        memset(buf, 'a', sizeof(buf));
        r = fetch_chunked_decode(&c, buf, sizeof(buf), &used, &o);
    }
    ck_assert_int_eq(r, -EINVAL);
}
END_TEST

/* ---- DNS ---- */

/* An answer to query Q (QLEN bytes) with the given flags and records
 * appended after the question. */
static size_t answer(uint8_t *m, const uint8_t *q, size_t qlen, uint16_t flags,
                     uint16_t an, const uint8_t *rr, size_t rrlen)
{
    memcpy(m, q, qlen);
    put16(m + 2, flags);
    put16(m + 6, an);
    memcpy(m + qlen, rr, rrlen);
    return qlen + rrlen;
}

START_TEST(dns_query)
{
    uint8_t q[512];
    int n = fetch_dns_query(q, sizeof(q), 0x1234, "Ex-1.org.");
    static const uint8_t want[] = {
        0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0,
        4, 'E', 'x', '-', '1', 3, 'o', 'r', 'g', 0, 0, 1, 0, 1,
    };
    ck_assert_int_eq(n, sizeof(want));
    ck_assert_int_eq(memcmp(q, want, sizeof(want)), 0);
    ck_assert_int_eq(fetch_dns_query(q, sizeof(want) - 1, 1, "Ex-1.org"), -ENOSPC);
    ck_assert_int_eq(fetch_dns_query(q, sizeof(q), 1, ""), -EINVAL);
    ck_assert_int_eq(fetch_dns_query(q, sizeof(q), 1, "."), -EINVAL);
    ck_assert_int_eq(fetch_dns_query(q, sizeof(q), 1, "a..b"), -EINVAL);
    ck_assert_int_eq(fetch_dns_query(q, sizeof(q), 1, "a b"), -EINVAL);
}
END_TEST

START_TEST(dns_answers)
{
    uint8_t q[512], m[1024];
    uint32_t a = 0;
    int qn = fetch_dns_query(q, sizeof(q), 0xbeef, "www.example.org");
    ck_assert_int_gt(qn, 0);
    /* CNAME (compressed owner) then A with a pointer to the CNAME's target. */
    static const uint8_t rr[] = {
        0xc0, 12, 0, 5, 0, 1, 0, 0, 0, 60, 0, 6, 3, 'c', 'd', 'n', 0xc0, 16,
        0xc0, 45, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 93, 184, 216, 34,
    };
    size_t n = answer(m, q, (size_t)qn, 0x8180, 2, rr, sizeof(rr));
    ck_assert_int_eq(fetch_dns_answer(m, n, 0xbeef, "www.example.org", &a), 0);
    ck_assert_uint_eq(a, IP(93, 184, 216, 34));
    /* The question's name compared case-insensitively. */
    ck_assert_int_eq(fetch_dns_answer(m, n, 0xbeef, "WWW.Example.org.", &a), 0);
    /* Every truncation is refused (never reads past the end). */
    for (size_t k = 0; k < n; k++)
        ck_assert_int_lt(fetch_dns_answer(m, k, 0xbeef, "www.example.org", &a), 0);
    /* Not our answer. */
    ck_assert_int_eq(fetch_dns_answer(m, n, 0xbeee, "www.example.org", &a), -EINVAL);
    ck_assert_int_eq(fetch_dns_answer(m, n, 0xbeef, "www.example.com", &a), -EINVAL);
    ck_assert_int_eq(fetch_dns_answer(m, n, 0xbeef, "example.org", &a), -EINVAL);
    ck_assert_int_eq(fetch_dns_answer(m, n, 0xbeef, "ww.example.org", &a), -EINVAL);
    ck_assert_int_eq(fetch_dns_answer(m, n, 0xbeef, "x.www.example.org", &a), -EINVAL);
    put16(m + 2, 0x0180);           /* QR clear: a query */
    ck_assert_int_eq(fetch_dns_answer(m, n, 0xbeef, "www.example.org", &a), -EINVAL);
    put16(m + 2, 0x8980);           /* opcode 1 */
    ck_assert_int_eq(fetch_dns_answer(m, n, 0xbeef, "www.example.org", &a), -EINVAL);
    put16(m + 2, 0x8183);           /* NXDOMAIN */
    ck_assert_int_eq(fetch_dns_answer(m, n, 0xbeef, "www.example.org", &a), -ENOENT);
    put16(m + 2, 0x8182);           /* SERVFAIL */
    ck_assert_int_eq(fetch_dns_answer(m, n, 0xbeef, "www.example.org", &a), -EIO);
    put16(m + 2, 0x8180);
    put16(m + 4, 2);                /* two questions */
    ck_assert_int_eq(fetch_dns_answer(m, n, 0xbeef, "www.example.org", &a), -EINVAL);
    put16(m + 4, 1);
    put16(m + qn - 4, 28);          /* AAAA question */
    ck_assert_int_eq(fetch_dns_answer(m, n, 0xbeef, "www.example.org", &a), -EINVAL);
    put16(m + qn - 4, 1);
    put16(m + qn - 2, 3);           /* class CH */
    ck_assert_int_eq(fetch_dns_answer(m, n, 0xbeef, "www.example.org", &a), -EINVAL);
    put16(m + qn - 2, 1);
    /* No A: only the CNAME; truncated with none. */
    n = answer(m, q, (size_t)qn, 0x8180, 1, rr, 18);
    ck_assert_int_eq(fetch_dns_answer(m, n, 0xbeef, "www.example.org", &a), -ENOENT);
    n = answer(m, q, (size_t)qn, 0x8380, 1, rr, 18);
    ck_assert_int_eq(fetch_dns_answer(m, n, 0xbeef, "www.example.org", &a), -EAGAIN);
    /* TC and the count promising more than came. */
    n = answer(m, q, (size_t)qn, 0x8380, 3, rr, 18);
    ck_assert_int_eq(fetch_dns_answer(m, n, 0xbeef, "www.example.org", &a), -EAGAIN);
    n = answer(m, q, (size_t)qn, 0x8180, 3, rr, 18);
    ck_assert_int_eq(fetch_dns_answer(m, n, 0xbeef, "www.example.org", &a), -EINVAL);
    /* An A record with 5 bytes of data. */
    static const uint8_t bad_a[] = { 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 5, 1, 2, 3, 4, 5 };
    n = answer(m, q, (size_t)qn, 0x8180, 1, bad_a, sizeof(bad_a));
    ck_assert_int_eq(fetch_dns_answer(m, n, 0xbeef, "www.example.org", &a), -EINVAL);
    /* An rdlength past the end. */
    static const uint8_t long_rd[] = { 0xc0, 12, 0, 16, 0, 1, 0, 0, 0, 60, 0, 50, 1 };
    n = answer(m, q, (size_t)qn, 0x8180, 1, long_rd, sizeof(long_rd));
    ck_assert_int_eq(fetch_dns_answer(m, n, 0xbeef, "www.example.org", &a), -EINVAL);
    /* Reserved label type 0x40 in an owner name. */
    static const uint8_t rsv[] = { 0x41, 0, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 1, 2, 3, 4 };
    n = answer(m, q, (size_t)qn, 0x8180, 1, rsv, sizeof(rsv));
    ck_assert_int_eq(fetch_dns_answer(m, n, 0xbeef, "www.example.org", &a), -EINVAL);
    ck_assert_int_eq(fetch_dns_answer(m, 11, 0xbeef, "www.example.org", &a), -EINVAL);
    ck_assert_int_eq(fetch_dns_answer(m, n, 0xbeef, "bad name", &a), -EINVAL);
}
END_TEST

START_TEST(dns_pointers)
{
    uint8_t m[512];
    uint32_t a;
    /* The question's name is a pointer to itself: refused, not a loop. */
    memset(m, 0, sizeof(m));
    put16(m, 7);
    put16(m + 2, 0x8180);
    put16(m + 4, 1);
    m[12] = 0xc0;
    m[13] = 12;
    put16(m + 14, 1);
    put16(m + 16, 1);
    ck_assert_int_eq(fetch_dns_answer(m, 18, 7, "a", &a), -EINVAL);
    /* A forward pointer, to a name that would match. */
    m[13] = 18;
    m[18] = 1; m[19] = 'a'; m[20] = 0;
    ck_assert_int_eq(fetch_dns_answer(m, 21, 7, "a", &a), -EINVAL);
    m[12] = 1; m[13] = 'a'; m[14] = 0;      /* the same, inline: no A */
    put16(m + 15, 1);
    put16(m + 17, 1);
    ck_assert_int_eq(fetch_dns_answer(m, 19, 7, "a", &a), -ENOENT);
    /* Label "a" then a pointer back to it: a loop through a backward
     * pointer, stopped by the hop limit. */
    m[12] = 1; m[13] = 'a'; m[14] = 0xc0; m[15] = 12;
    put16(m + 16, 1);
    put16(m + 18, 1);
    ck_assert_int_eq(fetch_dns_answer(m, 20, 7, "a", &a), -EINVAL);
    /* Owner names: a pointer into a chain of pointers is only skipped (its
     * target is not read), so any pointer ends an owner name. */
    uint8_t q[64];
    int qn = fetch_dns_query(q, sizeof(q), 7, "a");
    static const uint8_t rr[] = { 0xc0, 0xff, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4, 10, 0, 0, 1 };
    memcpy(m, q, (size_t)qn);
    put16(m + 2, 0x8180);
    put16(m + 6, 1);
    memcpy(m + qn, rr, sizeof(rr));
    ck_assert_int_eq(fetch_dns_answer(m, (size_t)qn + sizeof(rr), 7, "a", &a), 0);
    ck_assert_uint_eq(a, IP(10, 0, 0, 1));
}
END_TEST

/* ---- resolv.conf, hosts ---- */

static int ns_of(const char *t, uint32_t *a)
{
    return fetch_resolv_ns(t, strlen(t), a);
}

START_TEST(resolv)
{
    uint32_t a = 0;
    ck_assert_int_eq(ns_of("nameserver 10.0.2.3\n", &a), 0);
    ck_assert_uint_eq(a, IP(10, 0, 2, 3));
    ck_assert_int_eq(ns_of("# c\nsearch x\n; c\nnameserver fe80::1\n"
                           "nameserver  1.1.1.1 # comment\r\nnameserver 8.8.8.8\n", &a), 0);
    ck_assert_uint_eq(a, IP(1, 1, 1, 1));
    ck_assert_int_eq(ns_of("\tnameserver\t9.9.9.9", &a), 0);
    ck_assert_uint_eq(a, IP(9, 9, 9, 9));
    ck_assert_int_eq(ns_of("", &a), -ENOENT);
    ck_assert_int_eq(ns_of("nameserver\n", &a), -ENOENT);
    ck_assert_int_eq(ns_of("nameserver 1.2.3\n", &a), -ENOENT);
    ck_assert_int_eq(ns_of("nameserver 01.2.3.4\n", &a), -ENOENT);
    ck_assert_int_eq(ns_of("#nameserver 1.2.3.4\n", &a), -ENOENT);
    ck_assert_int_eq(ns_of("Nameserver 1.2.3.4\n", &a), -ENOENT);
    ck_assert_int_eq(ns_of("nameservers 1.2.3.4\n", &a), -ENOENT);
    ck_assert_int_eq(ns_of("nameserver 1.2.3.4x\n", &a), -ENOENT);
    /* Only LEN bytes count; a NUL inside is not part of an address. */
    ck_assert_int_eq(fetch_resolv_ns("nameserver 1.2.3.4", 17, &a), -ENOENT);
    ck_assert_int_eq(fetch_resolv_ns("nameserver 1.2.3.4\0", 19, &a), -ENOENT);
    /* A word longer than the buffer. */
    char big[600];
    memset(big, '1', sizeof(big));
    memcpy(big, "nameserver ", 11);
    ck_assert_int_eq(fetch_resolv_ns(big, sizeof(big), &a), -ENOENT);
}
END_TEST

static int host_of(const char *t, const char *name, uint32_t *a)
{
    return fetch_hosts_lookup(t, strlen(t), name, a);
}

START_TEST(hosts)
{
    static const char h[] =
        "127.0.0.1\tlocalhost\n"
        "::1 localhost ip6-localhost\n"
        "# 10.9.9.9 commented\n"
        "10.0.2.2 gateway Host.Example #c\n"
        "bad.addr notme\n"
        "10.0.2.3 a b c d e f g h\n";
    uint32_t a = 0;
    ck_assert_int_eq(host_of(h, "localhost", &a), 0);
    ck_assert_uint_eq(a, IP(127, 0, 0, 1));
    ck_assert_int_eq(host_of(h, "host.example", &a), 0);
    ck_assert_uint_eq(a, IP(10, 0, 2, 2));
    ck_assert_int_eq(host_of(h, "GATEWAY", &a), 0);
    ck_assert_int_eq(host_of(h, "commented", &a), -ENOENT);
    ck_assert_int_eq(host_of(h, "ip6-localhost", &a), -ENOENT);
    ck_assert_int_eq(host_of(h, "notme", &a), -ENOENT);
    ck_assert_int_eq(host_of(h, "#c", &a), -ENOENT);
    ck_assert_int_eq(host_of(h, "c", &a), 0);
    ck_assert_uint_eq(a, IP(10, 0, 2, 3));
    /* Words past the eighth are not read. */
    ck_assert_int_eq(host_of(h, "h", &a), -ENOENT);
    ck_assert_int_eq(host_of(h, "", &a), -ENOENT);
    ck_assert_int_eq(host_of("", "localhost", &a), -ENOENT);
}
END_TEST

START_TEST(ipv4)
{
    uint32_t a;
    ck_assert_int_eq(fetch_ipv4("10.0.2.2", &a), 1);
    ck_assert_uint_eq(a, IP(10, 0, 2, 2));
    ck_assert_int_eq(fetch_ipv4("10.0.2", &a), 0);
    ck_assert_int_eq(fetch_ipv4("10.0.2.02", &a), 0);
    ck_assert_int_eq(fetch_ipv4("0x1.0.2.2", &a), 0);
    ck_assert_int_eq(fetch_ipv4("1.2.3.256", &a), 0);
    ck_assert_int_eq(fetch_ipv4("", &a), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("guest_fetch");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, url_good);
    tcase_add_test(tc, url_bad);
    tcase_add_test(tc, redirects);
    tcase_add_test(tc, head_good);
    tcase_add_test(tc, head_bad);
    tcase_add_test(tc, head_too_big);
    tcase_add_test(tc, chunked_good);
    tcase_add_test(tc, chunked_bad);
    tcase_add_test(tc, dns_query);
    tcase_add_test(tc, dns_answers);
    tcase_add_test(tc, dns_pointers);
    tcase_add_test(tc, resolv);
    tcase_add_test(tc, hosts);
    tcase_add_test(tc, ipv4);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
