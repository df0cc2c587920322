/* Fuzz the DNS message parser (responses and queries) and the policy's
 * spec parsers.
 *
 * Input: [0] selector, low two bits:
 *          0: the rest is a DNS response (dns_parse_response)
 *          1: the rest is a DNS query (dns_parse_query)
 *          2: the rest is a CIDR rule spec (np_parse_rule), NUL-terminated here
 *          3: the rest is a domain rule spec (np_parse_domain)
 *        Accepted specs must re-parse from their canonical text to the same
 *        canonical text and fields.
 * Seeds: tests/fuzz/corpus/dns_msg/ (tests/fuzz/gen_seeds.c). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "devices/net/dns_msg.h"
#include "devices/net/net_policy.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* a name as the parser gives it: lowercased printable ASCII, dots only
 * between non-empty labels of at most 63, at most 253 characters */
static void check_name(const char *s)
{
    size_t n = strlen(s), label = 0;
    FUZZ_ASSERT(n <= DNS_NAME_TEXT_MAX);
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        FUZZ_ASSERT(c >= 0x21 && c <= 0x7e && !(c >= 'A' && c <= 'Z'));
        if (c == '.') {
            FUZZ_ASSERT(label > 0 && i + 1 < n);
            label = 0;
        } else {
            FUZZ_ASSERT(++label <= DNS_LABEL_MAX);
        }
    }
    /* the domain matcher agrees with itself on it */
    FUZZ_ASSERT(np_domain_match(s, false, s));
    FUZZ_ASSERT(!np_domain_match(s, true, s));
}

static void response(const uint8_t *m, size_t n)
{
    struct dns_answer *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    FUZZ_ASSERT(a && b);
    const char *why = NULL;
    int r = dns_parse_response(m, n, a, &why);
    FUZZ_ASSERT((r == 0) == (a->err == DNS_E_OK) && (r == 0 || r == -EBADMSG));
    FUZZ_ASSERT((unsigned)a->err < DNS_E__COUNT);
    FUZZ_ASSERT(r == 0 || (why && strcmp(why, dns_strerror(a->err)) == 0));
    FUZZ_ASSERT(dns_parse_response(m, n, b, NULL) == r && memcmp(a, b, sizeof *a) == 0);
    if (r == 0) {
        FUZZ_ASSERT(n >= DNS_HDR_LEN && (m[2] & 0x80));
        FUZZ_ASSERT(a->n_chain >= 1 && a->n_chain <= DNS_CHAIN_MAX + 1);
        FUZZ_ASSERT(a->n_addr <= DNS_ADDR_MAX);
        for (unsigned i = 0; i < a->n_chain; i++) {
            check_name(a->chain[i]);
            for (unsigned j = 0; j < i; j++)
                FUZZ_ASSERT(strcmp(a->chain[i], a->chain[j]) != 0);
        }
        for (unsigned i = 0; i < a->n_addr; i++) {
            const struct dns_addr *d = &a->addr[i];
            FUZZ_ASSERT(d->family == 4 || d->family == 6);
            FUZZ_ASSERT(d->name < a->n_chain && d->ttl <= 0x7fffffffu);
            if (d->family == 4) {
                static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
                FUZZ_ASSERT(memcmp(d->b, mapped, 12) == 0);
            }
        }
        FUZZ_ASSERT(a->n_addr + a->n_ignored <= a->ancount);
        /* the same bytes are not a query */
        struct dns_query q;
        FUZZ_ASSERT(dns_parse_query(m, n, &q, NULL) == -EBADMSG && q.err == DNS_E_NOT_QUERY);
    }
    free(a);
    free(b);
}

static void query(const uint8_t *m, size_t n)
{
    struct dns_query q, q2;
    int r = dns_parse_query(m, n, &q, NULL);
    FUZZ_ASSERT((r == 0) == (q.err == DNS_E_OK) && (unsigned)q.err < DNS_E__COUNT);
    FUZZ_ASSERT(dns_parse_query(m, n, &q2, NULL) == r && memcmp(&q, &q2, sizeof q) == 0);
    if (r == 0) {
        check_name(q.qname);
        FUZZ_ASSERT(!(m[2] & 0x80));
    }
}

static void spec(const uint8_t *d, size_t n, bool domain)
{
    char *s = malloc(n + 1);
    FUZZ_ASSERT(s);
    memcpy(s, d, n);
    s[n] = 0;
    struct np_rule_spec a, b;
    char why[256];
    int r = domain ? np_parse_domain(s, &a, why, sizeof why) : np_parse_rule(s, &a, why, sizeof why);
    FUZZ_ASSERT(r == 0 || r == -EINVAL);
    if (r == 0) {
        FUZZ_ASSERT(strlen(a.text) < NP_SPEC_MAX);
        int r2 = domain ? np_parse_domain(a.text, &b, why, sizeof why)
                        : np_parse_rule(a.text, &b, why, sizeof why);
        FUZZ_ASSERT(r2 == 0 && strcmp(a.text, b.text) == 0);
        FUZZ_ASSERT(a.port_lo == b.port_lo && a.port_hi == b.port_hi && a.proto == b.proto &&
                    a.icmp == b.icmp && a.port_lo <= a.port_hi && (a.port_lo == 0) == (a.port_hi == 0));
        FUZZ_ASSERT(!(a.icmp && a.port_lo) && !(a.icmp && a.proto));
        if (domain) {
            FUZZ_ASSERT(a.wildcard == b.wildcard && strcmp(a.domain, b.domain) == 0);
            check_name(a.domain);
        } else {
            FUZZ_ASSERT(a.net.family == b.net.family && a.prefix == b.prefix &&
                        memcmp(a.net.b, b.net.b, 16) == 0);
            FUZZ_ASSERT(a.prefix <= (a.net.family == 4 ? 32 : 128));
        }
    } else {
        FUZZ_ASSERT(why[0] != 0);
    }
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    /* an exact-size copy, so ASan sees any read past the message */
    size_t n = size - 1;
    uint8_t *m = malloc(n ? n : 1);
    FUZZ_ASSERT(m);
    memcpy(m, data + 1, n);
    switch (data[0] & 3) {
    case 0: response(m, n); break;
    case 1: query(m, n); break;
    case 2: spec(m, n, false); break;
    default: spec(m, n, true); break;
    }
    free(m);
    return 0;
}
