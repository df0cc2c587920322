/* An incremental HTTP/1.1 request parser for what a guest sends to the
 * metadata address (169.254.169.254), pure: no sockets, no allocation.
 * The TCP endpoint feeds the bytes of one connection in whatever pieces
 * they arrive; the parser copies what it keeps into its own buffer, so the
 * caller may drop a segment once it was fed. Byte by byte or all at once
 * gives the same result: every decision is taken at a byte, in order.
 *
 * Accepted (RFC 9112, strictly; anything else is an error):
 *   request-line  method SP request-target SP HTTP-version CRLF
 *                 method: 1..HTTP_MAX_METHOD token characters (longer: 501)
 *                 request-target: 1..HTTP_MAX_TARGET visible ASCII bytes
 *                 (0x21..0x7e; longer: 414), kept as sent (not decoded)
 *                 HTTP-version: "HTTP/1.0" or "HTTP/1.1" (another
 *                 "HTTP/1.x" is taken as 1.1; another major: 505)
 *   header lines  field-name ":" OWS field-value OWS CRLF
 *                 field-name: token characters, nothing between it and ":"
 *                 field-value: visible ASCII, obs-text (0x80..0xff), SP, HT
 *                 at most HTTP_MAX_HEADERS lines, each at most
 *                 HTTP_MAX_FIELD_LINE bytes (CRLF excluded), all together
 *                 at most HTTP_MAX_HEADER_BYTES (CRLFs included): else 431
 *   CRLF          ends the head
 *   body          Content-Length bytes (0..HTTP_MAX_BODY: else 413)
 * Empty lines (CRLF) before a request-line are skipped (RFC 9112, 2.2).
 * Refused with 400: a bare CR or a bare LF anywhere, NUL or another
 * control byte, obs-fold (a header line starting with SP or HT, or
 * whitespace before the first header), whitespace before ":", a
 * Content-Length that is not 1..19 decimal digits, two Content-Length
 * lines (even equal), two Host lines. Refused with 501: any
 * Transfer-Encoding (chunked bodies are not implemented; refusing every
 * coding also rules out Content-Length/Transfer-Encoding smuggling).
 * Host is not required (small clients such as `printf | nc` omit it).
 *
 * After a complete request (HTTP_DONE) the bytes after it are not
 * consumed: they belong to the next, pipelined request; the caller answers,
 * calls http_parser_next() and feeds the rest. After an error
 * (HTTP_ERROR) the parser takes nothing more: the caller answers with
 * http_parser_status() and closes the connection (where the next request
 * starts is no longer known). */
#ifndef MOAT_HTTP_REQ_H
#define MOAT_HTTP_REQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HTTP_MAX_METHOD        16u
#define HTTP_MAX_TARGET        2048u
#define HTTP_MAX_FIELD_LINE    2048u
#define HTTP_MAX_HEADERS       32u
#define HTTP_MAX_HEADER_BYTES  8192u
#define HTTP_MAX_BODY          4096u

enum http_state {
    HTTP_NEED_MORE = 0,     /* valid so far: feed more */
    HTTP_DONE,              /* a complete request in p->req */
    HTTP_ERROR,             /* invalid: http_parser_status() says how */
};

struct http_header {
    const char *name;       /* as sent; compare case-insensitively */
    const char *value;      /* leading and trailing SP/HT removed */
};

/* A complete request. The strings are NUL-terminated (none can hold a
 * NUL) and point into the parser: valid until http_parser_next() or
 * http_parser_init(), and only where the parser is (do not copy it). */
struct http_req {
    const char *method;     /* case-sensitive, as RFC 9110 says */
    const char *target;
    int minor;              /* HTTP/1.<minor>: 0 or 1 */
    unsigned nheaders;
    struct http_header headers[HTTP_MAX_HEADERS];
    uint64_t content_length;
    const uint8_t *body;    /* content_length bytes (may hold NULs) */
    /* The connection may carry another request after this one:
     * HTTP/1.1 without "Connection: close", or HTTP/1.0 with
     * "Connection: keep-alive" (and without "close"). */
    bool keep_alive;
};

#define HTTP_BUF_SIZE (HTTP_MAX_METHOD + 1 + HTTP_MAX_TARGET + 1 + HTTP_MAX_HEADER_BYTES + \
                       HTTP_MAX_BODY + 16)

struct http_parser {
    struct http_req req;
    /* internal */
    int st;                 /* state machine position */
    int status;             /* 0, or the error's HTTP status */
    uint32_t len;           /* bytes used in buf */
    uint32_t tok;           /* start of the token (method, target, name) being read */
    uint32_t val;           /* start of the header value being read */
    uint32_t line_len;      /* bytes of the current header line */
    uint32_t head_bytes;    /* bytes of all header lines so far */
    uint64_t body_left;
    uint8_t nver;
    char ver[8];
    bool have_cl, have_host, conn_close, conn_keep;
    char buf[HTTP_BUF_SIZE];
};

/* Ready for a connection's first request. */
void http_parser_init(struct http_parser *p);

/* Feed n bytes of the stream. Returns how many were consumed: all of them
 * while the state stays HTTP_NEED_MORE; up to the end of the request on
 * HTTP_DONE; up to and including the offending byte on HTTP_ERROR; 0 when
 * called in HTTP_DONE or HTTP_ERROR. */
size_t http_parser_feed(struct http_parser *p, const void *data, size_t n);

enum http_state http_parser_state(const struct http_parser *p);

/* The HTTP status an HTTP_ERROR maps to (400, 413, 414, 431, 501, 505);
 * 0 in the other states. */
int http_parser_status(const struct http_parser *p);

/* After HTTP_DONE: forget that request, ready for the next one on the same
 * connection. (In another state, as http_parser_init.) */
void http_parser_next(struct http_parser *p);

/* The value of the first header named `name` (case-insensitive), or NULL;
 * *count (may be NULL) gets how many lines have that name. */
const char *http_req_header(const struct http_req *r, const char *name, unsigned *count);

/* Does a comma-separated header value hold `token` as one of its elements
 * (case-insensitive, parameters after ';' ignored)? */
bool http_list_has(const char *value, const char *token);

/* The reason phrase for a status code ("Not Found"); "Unknown" if none. */
const char *http_reason(int status);

#endif
