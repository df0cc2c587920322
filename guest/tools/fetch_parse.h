/* The pure parts of moat-fetch, the default guest's HTTP client
 * (guest/tools/fetch.c, docs/guest.md "Network"): URLs, the response
 * head, the chunked transfer coding, DNS queries and answers,
 * /etc/resolv.conf and /etc/hosts. No I/O; everything they read comes from
 * the network or from files in the guest, so every malformed case is an
 * error, never a crash (tests/unit/test_guest_fetch.c,
 * tests/fuzz/fuzz_guest_fetch.c). Addresses are IPv4 in host byte order.
 * All return 0 (or a length) on success and -errno on failure. */
#ifndef MOAT_GUEST_FETCH_PARSE_H
#define MOAT_GUEST_FETCH_PARSE_H

#include <stddef.h>
#include <stdint.h>

#define FETCH_HOST_MAX  253     /* a DNS name's longest text form */
#define FETCH_PATH_MAX  2048
#define FETCH_HEAD_MAX  16384   /* response status line + headers */
#define FETCH_TRAILER_MAX 16384 /* chunked trailer section */

struct fetch_url {
    char host[FETCH_HOST_MAX + 1];  /* lower case: a name or a dotted quad */
    uint16_t port;                  /* 80 unless given */
    char path[FETCH_PATH_MAX + 1];  /* starts with '/', query kept, no fragment */
};

/* URL "http://HOST[:PORT][/PATH][?QUERY][#FRAGMENT]" (scheme and host case
 * insensitive). HOST: a DNS name (labels of 1..63 letters, digits and '-',
 * not starting or ending with '-'; a trailing dot is dropped) or a dotted
 * quad; PORT: 1..65535. -EPROTONOSUPPORT for another scheme (https:
 * included), -EINVAL for anything else malformed: user info ("u@h"), an
 * IPv6 literal, a space or control character, a host or path too long. */
int fetch_url_parse(const char *url, struct fetch_url *u);

/* Where a Location header LOC sends a request for BASE: an absolute http
 * URL, a network-path reference ("//host/p"), an absolute path ("/p", same
 * host) or a relative path ("p", against BASE's directory; no "." or ".."
 * folding). *OUT, or the errors of fetch_url_parse. */
int fetch_url_redirect(const struct fetch_url *base, const char *loc, struct fetch_url *out);

struct fetch_resp {
    int status;                     /* 100..599 */
    int64_t length;                 /* Content-Length, -1 if absent */
    int chunked;                    /* Transfer-Encoding: chunked */
    char location[FETCH_HOST_MAX + FETCH_PATH_MAX + 16]; /* "" if absent */
};

/* The response head at BUF[0..LEN): "HTTP/1.x NNN[ reason]", header lines,
 * a blank line; lines end in CRLF or LF. Returns the head's length (> 0:
 * the body starts there) with *R, 0 if the head is not complete yet and
 * LEN < FETCH_HEAD_MAX, or:
 *   -E2BIG    no end of head within FETCH_HEAD_MAX bytes;
 *   -EPROTO   a transfer coding other than chunked (as the last coding);
 *   -EINVAL   anything else malformed: status line, a header without ':'
 *             or with a bad name, a folded line, a NUL, Content-Length not
 *             a decimal number (or over 2^62), two different ones, a
 *             Location longer than r->location holds. */
int fetch_resp_parse(const char *buf, size_t len, struct fetch_resp *r);

/* Incremental decoder of a chunked body; zero it to start. */
struct fetch_chunked {
    int state;
    unsigned digits;
    uint64_t left;                  /* data bytes left in this chunk */
    size_t trailer;                 /* trailer bytes seen */
};

/* Feeds BUF[0..LEN) (any split of the stream) and decodes in place: the
 * chunk data found in it are moved to BUF[0..*OUT). *USED: input bytes
 * consumed. Returns 1 when the body has ended (last chunk and trailer
 * read; the input after *USED is not the body's), 0 if more input is
 * needed (*USED == LEN), -EINVAL if malformed (a size that is not hex,
 * longer than 15 digits, missing CRLF after the data, a trailer over
 * FETCH_TRAILER_MAX). */
int fetch_chunked_decode(struct fetch_chunked *c, uint8_t *buf, size_t len,
                         size_t *used, size_t *out);

/* A standard query (RD set) for NAME's A record, id ID, into BUF[0..CAP).
 * Its length, -EINVAL if NAME is not a DNS name (as in fetch_url_parse; a
 * trailing dot is allowed) or -ENOSPC if CAP is too small. */
int fetch_dns_query(uint8_t *buf, size_t cap, uint16_t id, const char *name);

/* The answer MSG[0..LEN) to the query ID for NAME: 0 and the first A
 * record's address of the answer section in *ADDR. -ENOENT: the name does
 * not exist or has no A record; -EAGAIN: truncated (TC set, no A record
 * in what came); -EIO: the server reports another error; -EINVAL:
 * malformed, or not the answer to this query (id, QR, opcode, question
 * count, question name, type or class differ). Name compression pointers
 * are followed at most 16 times per name and only backwards. */
int fetch_dns_answer(const uint8_t *msg, size_t len, uint16_t id, const char *name,
                     uint32_t *addr);

/* The first "nameserver A.B.C.D" of resolv.conf text TEXT[0..LEN). 0 and
 * *NS, or -ENOENT (IPv6 and malformed entries are skipped). */
int fetch_resolv_ns(const char *text, size_t len, uint32_t *ns);

/* NAME's IPv4 address in hosts-file text TEXT[0..LEN) ("ADDR NAME
 * ALIAS...", '#' comments; names case-insensitive). 0 and *ADDR, or
 * -ENOENT. */
int fetch_hosts_lookup(const char *text, size_t len, const char *name, uint32_t *addr);

/* 1 if S is a dotted quad (fetch_url_parse's rules), with *ADDR; else 0. */
int fetch_ipv4(const char *s, uint32_t *addr);

#endif
