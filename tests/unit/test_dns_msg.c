/* DNS message parser (devices/net/dns_msg.h): queries, responses, CNAME
 * chains, and every malformed case (compression loops, long names, lying
 * counts, record lengths). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devices/net/dns_msg.h"

static uint8_t m[8192];
static size_t ml;

static void b8(unsigned v) { m[ml++] = (uint8_t)v; }
static void b16(unsigned v) { b8(v >> 8); b8(v & 0xff); }
static void b32(uint32_t v) { b16(v >> 16); b16(v & 0xffff); }
static void set16(size_t off, unsigned v) { m[off] = (uint8_t)(v >> 8); m[off + 1] = (uint8_t)v; }

static void hdr(unsigned id, unsigned flags, unsigned qd, unsigned an)
{
    ml = 0;
    memset(m, 0xee, sizeof m);
    b16(id);
    b16(flags);
    b16(qd);
    b16(an);
    b16(0);
    b16(0);
}

/* "a.b.c" as labels, ending with the root label (or, with ptr >= 0, a
 * compression pointer to ptr instead). Returns the name's offset. */
static size_t name_to(const char *s, int ptr)
{
    size_t at = ml;
    while (*s) {
        const char *dot = strchr(s, '.');
        size_t n = dot ? (size_t)(dot - s) : strlen(s);
        b8((unsigned)n);
        memcpy(m + ml, s, n);
        ml += n;
        s += n + (dot ? 1 : 0);
    }
    if (ptr >= 0)
        b16(0xc000u | (unsigned)ptr);
    else
        b8(0);
    return at;
}
static size_t name(const char *s) { return name_to(s, -1); }
static void ptr(unsigned off) { b16(0xc000u | off); }

static void question(const char *q, unsigned type) { name(q); b16(type); b16(1); }
/* the record after its owner name */
static void rr(unsigned type, unsigned cls, uint32_t ttl, unsigned rdlen) { b16(type); b16(cls); b32(ttl); b16(rdlen); }
static void rr_a(uint32_t ttl, uint32_t a) { rr(DNS_TYPE_A, 1, ttl, 4); b32(a); }
static void rr_aaaa(uint32_t ttl, uint8_t last)
{
    rr(DNS_TYPE_AAAA, 1, ttl, 16);
    b16(0x2001); b16(0xdb8);
    for (int i = 0; i < 11; i++) b8(0);
    b8(last);
}

static struct dns_answer a;
static const char *why;

static int parse(void)
{
    why = NULL;
    return dns_parse_response(m, ml, &a, &why);
}
static void expect_err(enum dns_err e)
{
    ck_assert_int_eq(parse(), -EBADMSG);
    ck_assert_msg(a.err == e, "err %d (%s), want %d", a.err, dns_strerror(a.err), e);
    ck_assert_ptr_nonnull(why);
    ck_assert_str_eq(why, dns_strerror(e));
}
static uint32_t v4(unsigned i)
{
    ck_assert_uint_lt(i, a.n_addr);
    ck_assert_int_eq(a.addr[i].family, 4);
    ck_assert_int_eq(a.addr[i].b[10], 0xff);
    ck_assert_int_eq(a.addr[i].b[11], 0xff);
    const uint8_t *b = a.addr[i].b + 12;
    return (uint32_t)b[0] << 24 | b[1] << 16 | b[2] << 8 | b[3];
}

START_TEST(simple_a_and_aaaa)
{
    hdr(0x1234, 0x8180, 1, 2);
    question("Example.ORG", DNS_TYPE_A);
    ptr(12);
    rr_a(300, 0x5db8d822);
    ptr(12);
    rr_aaaa(7200, 0x46);
    ck_assert_int_eq(parse(), 0);
    ck_assert_int_eq(a.err, DNS_E_OK);
    ck_assert_int_eq(a.id, 0x1234);
    ck_assert_int_eq(a.rcode, 0);
    ck_assert_int_eq(a.qtype, DNS_TYPE_A);
    ck_assert_int_eq(a.qclass, 1);
    ck_assert_int_eq(a.ancount, 2);
    ck_assert_str_eq(a.chain[0], "example.org");
    ck_assert_uint_eq(a.n_chain, 1);
    ck_assert_uint_eq(a.n_addr, 2);
    ck_assert_uint_eq(v4(0), 0x5db8d822);
    ck_assert_uint_eq(a.addr[0].ttl, 300);
    ck_assert_int_eq(a.addr[1].family, 6);
    ck_assert_int_eq(a.addr[1].b[0], 0x20);
    ck_assert_int_eq(a.addr[1].b[15], 0x46);
    ck_assert_uint_eq(a.addr[1].ttl, 7200);
    ck_assert_uint_eq(a.n_ignored, 0);
    ck_assert(!a.chain_cut);

    /* every prefix is malformed: the answer count promises more */
    size_t full = ml;
    for (size_t n = 0; n < full; n++) {
        ck_assert_int_eq(dns_parse_response(m, n, &a, NULL), -EBADMSG);
        ck_assert_int_eq(a.err, n < DNS_HDR_LEN ? DNS_E_SHORT : DNS_E_TRUNC);
    }
    /* the count lies upward */
    set16(6, 3);
    expect_err(DNS_E_TRUNC);
    set16(6, 0xffff);
    expect_err(DNS_E_TRUNC);
    /* downward: the rest is not read */
    set16(6, 1);
    ck_assert_int_eq(parse(), 0);
    ck_assert_uint_eq(a.n_addr, 1);
    /* NXDOMAIN parses; the caller looks at rcode */
    set16(2, 0x8183);
    set16(6, 0);
    ck_assert_int_eq(parse(), 0);
    ck_assert_int_eq(a.rcode, 3);
    ck_assert_uint_eq(a.n_addr, 0);
}
END_TEST

START_TEST(header_errors)
{
    hdr(1, 0x0100, 1, 0);          /* QR = 0 */
    question("a.org", 1);
    expect_err(DNS_E_NOT_RESPONSE);
    set16(2, 0x8000 | (2 << 11));  /* opcode STATUS */
    expect_err(DNS_E_OPCODE);
    set16(2, 0x8000 | (5 << 11));  /* UPDATE */
    expect_err(DNS_E_OPCODE);
    set16(2, 0x8000);
    set16(4, 0);
    expect_err(DNS_E_QDCOUNT);
    set16(4, 2);
    expect_err(DNS_E_QDCOUNT);
    set16(4, 1);
    ck_assert_int_eq(parse(), 0);
    ml -= 1;                        /* qclass cut */
    expect_err(DNS_E_TRUNC);
}
END_TEST

START_TEST(cname_chain)
{
    hdr(7, 0x8180, 1, 5);
    size_t q = name("files.pythonhosted.org");
    b16(1); b16(1);
    ptr((unsigned)q);
    rr(DNS_TYPE_CNAME, 1, 60, 0);
    size_t rdl = ml - 2;
    size_t t = name_to("dualstack.python.map.fastly", (int)q + 19);   /* "org" from the question */
    set16(rdl, (unsigned)(ml - t));
    ptr((unsigned)t);
    rr_a(30, 0x97650001);
    ptr((unsigned)t);
    rr_a(900, 0x97650041);
    name("evil.example");                           /* off the chain */
    rr_a(900, 0x0a000001);
    ptr((unsigned)q);
    rr(16, 1, 60, 3); b8(2); b8('h'); b8('i');      /* TXT: another type */
    ck_assert_int_eq(parse(), 0);
    ck_assert_uint_eq(a.n_chain, 2);
    ck_assert_str_eq(a.chain[0], "files.pythonhosted.org");
    ck_assert_str_eq(a.chain[1], "dualstack.python.map.fastly.org");
    ck_assert_uint_eq(a.n_addr, 2);
    ck_assert_uint_eq(v4(0), 0x97650001);
    ck_assert_uint_eq(a.addr[0].ttl, 30);           /* min(60, 30) */
    ck_assert_uint_eq(a.addr[1].ttl, 60);           /* min(60, 900) */
    ck_assert_int_eq(a.addr[0].name, 1);
    ck_assert_uint_eq(a.n_ignored, 2);              /* evil.example and the TXT */
    ck_assert(!a.chain_cut);
}
END_TEST

/* a chain q -> n1 -> ... -> n<hops>, then an A record at the end */
static void chain(unsigned hops, bool loop_back)
{
    char cur[32], next[32];
    hdr(9, 0x8180, 1, hops + 1);
    question("n0.test", 1);
    for (unsigned i = 0; i < hops; i++) {
        snprintf(cur, sizeof cur, "n%u.test", i);
        snprintf(next, sizeof next, "n%u.test", loop_back && i + 1 == hops ? 0 : i + 1);
        name(cur);
        rr(DNS_TYPE_CNAME, 1, 100 + i, (unsigned)strlen(next) + 2);
        name(next);
    }
    snprintf(cur, sizeof cur, "n%u.test", hops);
    name(cur);
    rr_a(1000, 0x01020304);
}

START_TEST(cname_bounds)
{
    chain(DNS_CHAIN_MAX, false);
    ck_assert_int_eq(parse(), 0);
    ck_assert(!a.chain_cut);
    ck_assert_uint_eq(a.n_chain, DNS_CHAIN_MAX + 1);
    ck_assert_uint_eq(a.n_addr, 1);
    ck_assert_uint_eq(a.addr[0].ttl, 100);
    ck_assert_int_eq(a.addr[0].name, DNS_CHAIN_MAX);

    chain(DNS_CHAIN_MAX + 1, false);
    ck_assert_int_eq(parse(), 0);
    ck_assert(a.chain_cut);
    ck_assert_uint_eq(a.n_chain, DNS_CHAIN_MAX + 1);
    ck_assert_uint_eq(a.n_addr, 0);
    ck_assert_uint_eq(a.n_ignored, 1);

    /* n0 -> n1 -> n2 -> n0: a loop, cut; the A record of n3 is unreachable */
    chain(3, true);
    ck_assert_int_eq(parse(), 0);
    ck_assert(a.chain_cut);
    ck_assert_uint_eq(a.n_chain, 3);
    ck_assert_uint_eq(a.n_addr, 0);

    /* a CNAME to itself */
    hdr(9, 0x8180, 1, 2);
    question("self.test", 1);
    ptr(12);
    rr(DNS_TYPE_CNAME, 1, 5, 2);
    ptr(12);
    ptr(12);
    rr_a(5, 0x01010101);
    ck_assert_int_eq(parse(), 0);
    ck_assert(a.chain_cut);
    ck_assert_uint_eq(a.n_chain, 1);
    ck_assert_uint_eq(a.n_addr, 1);             /* its own address is on the chain */
}
END_TEST

START_TEST(ttl_and_caps)
{
    hdr(1, 0x8180, 1, 1);
    question("t.test", 1);
    ptr(12);
    rr_a(0x80000001u, 0x01020304);              /* top bit set: 0 (RFC 2181) */
    ck_assert_int_eq(parse(), 0);
    ck_assert_uint_eq(a.addr[0].ttl, 0);

    unsigned n = DNS_ADDR_MAX + 8;
    hdr(1, 0x8180, 1, n);
    question("many.test", 1);
    for (unsigned i = 0; i < n; i++) {
        ptr(12);
        rr_a(60, 0x0a000000 + i);
    }
    ck_assert_int_eq(parse(), 0);
    ck_assert_uint_eq(a.n_addr, DNS_ADDR_MAX);
    ck_assert_uint_eq(a.n_ignored, 8);
    ck_assert_uint_eq(v4(DNS_ADDR_MAX - 1), 0x0a000000 + DNS_ADDR_MAX - 1);

    /* past DNS_REC_MAX records, the rest are checked but not used */
    n = DNS_REC_MAX + 10;
    hdr(1, 0x8180, 1, n);
    question("many.test", 1);
    for (unsigned i = 0; i < n; i++) {
        ptr(12);
        if (i < DNS_REC_MAX)
            rr(16, 1, 1, 0);                    /* TXT, empty: not kept */
        else
            rr_a(60, 0x0b000000 + i);
    }
    ck_assert_int_eq(parse(), 0);
    ck_assert_uint_eq(a.n_addr, 10);            /* TXT records are not kept */
    hdr(1, 0x8180, 1, n);
    question("many.test", 1);
    for (unsigned i = 0; i < n; i++) {
        ptr(12);
        rr_a(60, 0x0b000000 + i);
    }
    ck_assert_int_eq(parse(), 0);
    ck_assert_uint_eq(a.n_addr, DNS_ADDR_MAX);
    ck_assert_uint_eq(a.n_ignored, n - DNS_ADDR_MAX);
    ml -= 2;                                    /* and a cut last record is still caught */
    expect_err(DNS_E_TRUNC);

    /* another class: checked, not used */
    hdr(1, 0x8180, 1, 1);
    question("ch.test", 1);
    ptr(12);
    rr(DNS_TYPE_A, 3, 60, 4); b32(1);
    ck_assert_int_eq(parse(), 0);
    ck_assert_uint_eq(a.n_addr, 0);
    ck_assert_uint_eq(a.n_ignored, 1);
}
END_TEST

START_TEST(compression_pointers)
{
    /* a pointer to itself */
    hdr(1, 0x8180, 1, 0);
    ptr(12);
    b16(1); b16(1);
    expect_err(DNS_E_PTR_LOOP);
    /* a label, then a pointer back to the label: a loop */
    hdr(1, 0x8180, 1, 0);
    b8(1); b8('a'); ptr(12);
    b16(1); b16(1);
    expect_err(DNS_E_PTR_LOOP);
    /* a forward pointer */
    hdr(1, 0x8180, 1, 0);
    ptr(16);
    b16(1); b16(1);
    b8(1); b8('a'); b8(0);
    expect_err(DNS_E_PTR_LOOP);
    /* into the header; past the end */
    hdr(1, 0x8180, 1, 0);
    ptr(2);
    b16(1); b16(1);
    expect_err(DNS_E_PTR_BOUNDS);
    hdr(1, 0x8180, 1, 0);
    ptr(0x3fff);
    b16(1); b16(1);
    expect_err(DNS_E_PTR_BOUNDS);
    /* a pointer cut in half */
    hdr(1, 0x8180, 1, 0);
    b8(0xc0);
    expect_err(DNS_E_TRUNC);
    /* two pointers in a row, both backward: fine */
    hdr(1, 0x8180, 1, 2);
    question("x.test", 1);          /* 12 */
    size_t p1 = ml;
    ptr(12);                        /* owner of record 1: -> 12 */
    rr(DNS_TYPE_CNAME, 1, 9, 2);
    ptr(12);
    b8(1); b8('y');                 /* owner of record 2: "y" + -> p1 -> 12 */
    ptr((unsigned)p1);
    rr_a(9, 0x01020304);
    ck_assert_int_eq(parse(), 0);
    /* backward, then forward again: record 2's owner at 35 is "d" -> 31,
     * and at 31 (record 1's TXT data) "c" -> 35. Each pointer alone looks
     * fine; together they loop, and the second is caught. */
    hdr(1, 0x8180, 1, 2);
    question("x", 1);               /* 12..18 */
    ptr(12);                        /* 19 */
    rr(16, 1, 9, 4);                /* 21..30 */
    b8(1); b8('c'); ptr(35);        /* 31..34 */
    ck_assert_uint_eq(ml, 35);
    b8(1); b8('d'); ptr(31);        /* 35..38 */
    rr_a(9, 1);
    expect_err(DNS_E_PTR_LOOP);
    /* backward into a region that loops on itself: "d" -> 31, at 31 "c" -> 31 */
    m[34] = 31;
    expect_err(DNS_E_PTR_LOOP);
    /* backward into two pointers pointing at each other, no label between */
    hdr(1, 0x8180, 1, 2);
    question("x", 1);               /* 12..18 */
    ptr(12);                        /* 19 */
    rr(16, 1, 9, 4);                /* 21..30 */
    ptr(33); ptr(31);               /* 31, 33 */
    ptr(33);                        /* 35: -> 33 -> 31 -> 33 */
    rr_a(9, 1);
    expect_err(DNS_E_PTR_LOOP);
}
END_TEST

START_TEST(names)
{
    /* 255 wire bytes: 3 x 63 + 61 -> 253 characters */
    char big[300], lab[64];
    memset(lab, 'a', 63);
    lab[63] = 0;
    snprintf(big, sizeof big, "%s.%s.%s.%.61s", lab, lab, lab, lab);
    hdr(1, 0x8180, 1, 0);
    question(big, 1);
    ck_assert_int_eq(parse(), 0);
    ck_assert_uint_eq(strlen(a.chain[0]), DNS_NAME_TEXT_MAX);
    snprintf(big, sizeof big, "%s.%s.%s.%.62s", lab, lab, lab, lab);
    hdr(1, 0x8180, 1, 0);
    question(big, 1);
    expect_err(DNS_E_NAME_LONG);
    /* too long only through compression */
    hdr(1, 0x8180, 1, 1);
    snprintf(big, sizeof big, "%s.%s.%s", lab, lab, lab);
    question(big, 1);               /* 193 bytes */
    b8(63); memset(m + ml, 'b', 63); ml += 63;
    ptr(12);                        /* 64 + 193 = 257 */
    rr_a(1, 1);
    expect_err(DNS_E_NAME_LONG);
    /* label types 01 and 10 */
    hdr(1, 0x8180, 1, 0);
    b8(0x41); b8('a'); b8(0); b16(1); b16(1);
    expect_err(DNS_E_LABEL_TYPE);
    m[12] = 0x81;
    expect_err(DNS_E_LABEL_TYPE);
    /* bytes in labels: a dot, a space, control and 8-bit bytes */
    const uint8_t bad[] = { '.', ' ', 0, 0x1f, 0x7f, 0x80, 0xff };
    for (unsigned i = 0; i < sizeof bad; i++) {
        hdr(1, 0x8180, 1, 0);
        question("abc.test", 1);
        m[13 + 1] = bad[i];
        expect_err(DNS_E_NAME_CHARS);
    }
    /* case folded; '_' and '-' kept; the root is "" */
    hdr(1, 0x8180, 1, 0);
    question("_Srv-X.EXAMPLE", 1);
    ck_assert_int_eq(parse(), 0);
    ck_assert_str_eq(a.chain[0], "_srv-x.example");
    hdr(1, 0x8180, 1, 0);
    b8(0); b16(1); b16(1);
    ck_assert_int_eq(parse(), 0);
    ck_assert_str_eq(a.chain[0], "");
    /* a label running past the message */
    hdr(1, 0x8180, 1, 0);
    b8(10); b8('a');
    expect_err(DNS_E_TRUNC);
}
END_TEST

START_TEST(record_lengths)
{
    hdr(1, 0x8180, 1, 1);
    question("r.test", 1);
    ptr(12);
    rr(DNS_TYPE_A, 1, 1, 5); b32(1); b8(0);
    expect_err(DNS_E_RDLEN);
    hdr(1, 0x8180, 1, 1);
    question("r.test", 1);
    ptr(12);
    rr(DNS_TYPE_AAAA, 1, 1, 4); b32(1);
    expect_err(DNS_E_RDLEN);
    /* A of another class: the length still has to be right */
    hdr(1, 0x8180, 1, 1);
    question("r.test", 1);
    ptr(12);
    rr(DNS_TYPE_A, 3, 1, 3); b8(1); b8(2); b8(3);
    expect_err(DNS_E_RDLEN);
    /* CNAME: RDATA longer than its name, shorter than its name */
    hdr(1, 0x8180, 1, 1);
    question("r.test", 1);
    ptr(12);
    rr(DNS_TYPE_CNAME, 1, 1, 3);
    ptr(12);
    b8(0);
    expect_err(DNS_E_RDLEN);
    hdr(1, 0x8180, 1, 1);
    question("r.test", 1);
    ptr(12);
    rr(DNS_TYPE_CNAME, 1, 1, 3);
    name("abc.test");
    expect_err(DNS_E_RDLEN);
    /* RDLENGTH past the message */
    hdr(1, 0x8180, 1, 1);
    question("r.test", 1);
    ptr(12);
    rr(DNS_TYPE_A, 1, 1, 4); b16(1);
    expect_err(DNS_E_TRUNC);
    hdr(1, 0x8180, 1, 1);
    question("r.test", 1);
    ptr(12);
    rr(16, 1, 1, 300); b16(1);
    expect_err(DNS_E_TRUNC);
    /* fixed fields cut */
    hdr(1, 0x8180, 1, 1);
    question("r.test", 1);
    ptr(12);
    b16(1); b16(1); b16(0);
    expect_err(DNS_E_TRUNC);
}
END_TEST

START_TEST(queries)
{
    struct dns_query q;
    const char *w = NULL;
    hdr(0xbeef, 0x0100, 1, 0);
    question("PyPI.org", 28);
    ck_assert_int_eq(dns_parse_query(m, ml, &q, &w), 0);
    ck_assert_int_eq(q.id, 0xbeef);
    ck_assert_str_eq(q.qname, "pypi.org");
    ck_assert_int_eq(q.qtype, 28);
    ck_assert_int_eq(q.qclass, 1);
    size_t full = ml;
    for (size_t n = 0; n < full; n++) {
        ck_assert_int_eq(dns_parse_query(m, n, &q, &w), -EBADMSG);
        ck_assert_int_eq(q.err, n < 12 ? DNS_E_SHORT : DNS_E_TRUNC);
        ck_assert_str_eq(w, dns_strerror(q.err));
    }
    set16(2, 0x8100);
    ck_assert_int_eq(dns_parse_query(m, ml, &q, NULL), -EBADMSG);
    ck_assert_int_eq(q.err, DNS_E_NOT_QUERY);
    set16(2, 0x0100 | (4 << 11));
    ck_assert_int_eq(dns_parse_query(m, ml, &q, NULL), -EBADMSG);
    ck_assert_int_eq(q.err, DNS_E_OPCODE);
    set16(2, 0x0100);
    set16(4, 2);
    ck_assert_int_eq(dns_parse_query(m, ml, &q, NULL), -EBADMSG);
    ck_assert_int_eq(q.err, DNS_E_QDCOUNT);
    /* a response is not a query, a query not a response */
    set16(4, 1);
    ck_assert_int_eq(dns_parse_response(m, ml, &a, NULL), -EBADMSG);
    ck_assert_int_eq(a.err, DNS_E_NOT_RESPONSE);
}
END_TEST

START_TEST(misc)
{
    for (int i = 0; i < DNS_E__COUNT; i++) {
        ck_assert_str_ne(dns_strerror((enum dns_err)i), "unknown DNS error");
        for (int j = 0; j < i; j++)
            ck_assert_str_ne(dns_strerror((enum dns_err)i), dns_strerror((enum dns_err)j));
    }
    ck_assert_str_eq(dns_strerror(DNS_E__COUNT), "unknown DNS error");
    ck_assert_uint_eq(dns_name_hash(""), 0xcbf29ce484222325ull);
    ck_assert_uint_eq(dns_name_hash("pypi.org"), dns_name_hash("pypi.org"));
    ck_assert_uint_ne(dns_name_hash("pypi.org"), dns_name_hash("pypi.orh"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("dns_msg");
    TCase *t = tcase_create("dns");
    tcase_add_test(t, simple_a_and_aaaa);
    tcase_add_test(t, header_errors);
    tcase_add_test(t, cname_chain);
    tcase_add_test(t, cname_bounds);
    tcase_add_test(t, ttl_and_caps);
    tcase_add_test(t, compression_pointers);
    tcase_add_test(t, names);
    tcase_add_test(t, record_lengths);
    tcase_add_test(t, queries);
    tcase_add_test(t, misc);
    suite_add_tcase(s, t);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
