/* DNS messages, pure: the question of a query the guest sends, and the
 * A/AAAA answers of a response it receives, for the egress policy's domain
 * rules (devices/net/net_policy.h). No sockets, no clock.
 *
 * Names (RFC 1035 3.1, 4.1.4): labels of 1..63 bytes, a name of at most 255
 * wire bytes (253 characters of text); compression pointers must point into
 * the message after its 12-byte header and strictly before the lowest
 * offset this name has read so far — so every jump goes backward and no
 * pointer loop can last. Label types 01 and 10 are malformed. A label
 * byte outside '!'..'~' or a '.' inside a label is malformed (hostnames
 * only: no way to spell "a.b" as one label and match another name).
 * Names come out lowercased (ASCII), without the final dot; the root is "".
 *
 * A response is a QUERY-opcode response with exactly one question; every
 * answer record is checked (name, 10 fixed bytes, RDLENGTH within the
 * message; A's RDLENGTH 4, AAAA's 16, a CNAME's RDATA exactly one name) —
 * an answer count larger than the records present is malformed. The
 * authority and additional sections are not read. Then the CNAME chain is
 * followed from the question name, at most DNS_CHAIN_MAX hops, stopping at
 * a loop; the A/AAAA records (class IN) whose owner is on the chain are the
 * answers, each with the smallest TTL along the chain to it (a TTL with the
 * top bit set counts as 0, RFC 2181 8). Records off the chain (a resolver
 * may add anything) are ignored and counted. */
#ifndef MOAT_DNS_MSG_H
#define MOAT_DNS_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DNS_HDR_LEN        12u
#define DNS_LABEL_MAX      63u
#define DNS_NAME_WIRE_MAX  255u
#define DNS_NAME_TEXT_MAX  253u     /* characters, without the final dot */
#define DNS_CHAIN_MAX      8u       /* CNAME hops followed */
#define DNS_ADDR_MAX       32u      /* A/AAAA answers kept */
#define DNS_REC_MAX        64u      /* answer records considered for the chain */

#define DNS_TYPE_A         1u
#define DNS_TYPE_CNAME     5u
#define DNS_TYPE_AAAA      28u
#define DNS_CLASS_IN       1u
#define DNS_RCODE_NOERROR  0u

enum dns_err {
    DNS_E_OK = 0,
    DNS_E_SHORT,            /* fewer than 12 bytes */
    DNS_E_NOT_RESPONSE,     /* QR = 0 where a response was expected */
    DNS_E_NOT_QUERY,        /* QR = 1 where a query was expected */
    DNS_E_OPCODE,           /* opcode is not QUERY */
    DNS_E_QDCOUNT,          /* question count != 1 */
    DNS_E_TRUNC,            /* a name, question or record runs past the message (counts lie) */
    DNS_E_LABEL_TYPE,       /* label type 01 or 10 */
    DNS_E_PTR_BOUNDS,       /* compression pointer into the header or past the message */
    DNS_E_PTR_LOOP,         /* compression pointer not strictly backward: a loop */
    DNS_E_NAME_LONG,        /* name over 255 wire bytes */
    DNS_E_NAME_CHARS,       /* a label byte that is not printable ASCII, or a '.' */
    DNS_E_RDLEN,            /* A not 4 bytes, AAAA not 16, CNAME not exactly one name */
    DNS_E__COUNT
};

struct dns_query {
    enum dns_err err;
    uint16_t id, flags;
    uint16_t qtype, qclass;
    char qname[DNS_NAME_TEXT_MAX + 1];
};

struct dns_addr {
    uint8_t family;             /* 4 or 6 */
    uint8_t b[16];              /* family 4: IPv4-mapped (::ffff:a.b.c.d), as struct nf_addr */
    uint32_t ttl;               /* seconds: min over the record and the CNAMEs to it */
    uint8_t name;               /* its owner: an index into chain[] */
};

struct dns_answer {
    enum dns_err err;
    uint16_t id, flags;
    uint8_t rcode;
    uint16_t qtype, qclass;
    uint16_t ancount;
    /* chain[0] is the question name; chain[i] the target of the i-th CNAME */
    char chain[DNS_CHAIN_MAX + 1][DNS_NAME_TEXT_MAX + 1];
    unsigned n_chain;           /* >= 1 once the question is parsed */
    bool chain_cut;             /* the chain went on past DNS_CHAIN_MAX hops or looped */
    struct dns_addr addr[DNS_ADDR_MAX];
    unsigned n_addr;
    unsigned n_ignored;         /* answer records not used: off the chain, not IN,
                                   other types, beyond DNS_REC_MAX or DNS_ADDR_MAX */
};

/* Parse a response of n bytes at m (a UDP payload, or a TCP one without
 * its 2-byte length prefix). Returns 0, or -EBADMSG with a->err set and
 * *why (if not NULL) a static sentence. A non-zero RCODE is not an error
 * (a->rcode says it). */
int dns_parse_response(const uint8_t *m, size_t n, struct dns_answer *a, const char **why);

/* Parse a query: QR = 0, opcode QUERY, one question. Other sections are
 * not read. Returns 0, or -EBADMSG with q->err set. */
int dns_parse_query(const uint8_t *m, size_t n, struct dns_query *q, const char **why);

const char *dns_strerror(enum dns_err e);

/* 64-bit FNV-1a of a name's text (callers hash the lowercased form). */
uint64_t dns_name_hash(const char *name);

#endif
