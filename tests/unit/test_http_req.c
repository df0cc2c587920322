/* The metadata service's HTTP/1.1 request parser (devices/net/http_req.c):
 * every malformed case, split arrival, pipelining. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devices/net/http_req.h"

static struct http_parser *P;

static void setup(void)
{
    P = malloc(sizeof *P);
    ck_assert_ptr_nonnull(P);
    http_parser_init(P);
}

static void teardown(void)
{
    free(P);
}

/* Feed all of s (n bytes) at once; returns bytes consumed. */
static size_t feed(struct http_parser *p, const char *s, size_t n)
{
    return http_parser_feed(p, s, n);
}

static size_t feeds(struct http_parser *p, const char *s)
{
    return feed(p, s, strlen(s));
}

/* What a parse ended with, in a comparable form. */
struct outcome {
    enum http_state st;
    int status;
    size_t used;
    char text[16384];
};

static void describe(struct http_parser *p, size_t used, struct outcome *o)
{
    memset(o, 0, sizeof *o);
    o->st = http_parser_state(p);
    o->status = http_parser_status(p);
    o->used = used;
    if (o->st != HTTP_DONE)
        return;
    struct http_req *r = &p->req;
    int k = snprintf(o->text, sizeof o->text, "%s|%s|%d|%d|%llu|", r->method, r->target, r->minor,
                     r->keep_alive, (unsigned long long)r->content_length);
    for (unsigned i = 0; i < r->nheaders && k < (int)sizeof o->text; i++)
        k += snprintf(o->text + k, sizeof o->text - (size_t)k, "[%s=%s]", r->headers[i].name,
                      r->headers[i].value);
    ck_assert_uint_lt((size_t)k + r->content_length, sizeof o->text);
    memcpy(o->text + k, r->body, r->content_length);
}

/* The first request of s, fed in pieces of `step` bytes (0: at once). */
static void parse_in_steps(const char *s, size_t n, size_t step, struct outcome *o)
{
    struct http_parser *p = malloc(sizeof *p);
    ck_assert_ptr_nonnull(p);
    http_parser_init(p);
    size_t used = 0;
    if (!step)
        step = n ? n : 1;
    while (used < n && http_parser_state(p) == HTTP_NEED_MORE) {
        size_t k = n - used < step ? n - used : step;
        size_t c = http_parser_feed(p, s + used, k);
        ck_assert_uint_le(c, k);
        if (http_parser_state(p) == HTTP_NEED_MORE)
            ck_assert_uint_eq(c, k);        /* all taken while more is needed */
        used += c;
    }
    describe(p, used, o);
    free(p);
}

/* Parse s whole, byte by byte, and in 7-byte pieces: the same outcome each
 * time. Returns the state; *status the error status. */
static enum http_state parse_same(const char *s, size_t n, int *status)
{
    static struct outcome a, b, c;
    parse_in_steps(s, n, 0, &a);
    parse_in_steps(s, n, 1, &b);
    parse_in_steps(s, n, 7, &c);
    ck_assert_int_eq(a.st, b.st);
    ck_assert_int_eq(a.status, b.status);
    ck_assert_uint_eq(a.used, b.used);
    ck_assert_str_eq(a.text, b.text);
    ck_assert_int_eq(a.st, c.st);
    ck_assert_int_eq(a.status, c.status);
    ck_assert_uint_eq(a.used, c.used);
    ck_assert(memcmp(a.text, c.text, sizeof a.text) == 0);
    if (status)
        *status = a.status;
    return a.st;
}

static int status_of(const char *s)
{
    int st = -1;
    enum http_state e = parse_same(s, strlen(s), &st);
    if (e == HTTP_DONE)
        return 0;
    if (e == HTTP_NEED_MORE)
        return -1;
    return st;
}

START_TEST(simple_get)
{
    const char *s = "GET /latest/meta-data HTTP/1.1\r\nHost: 169.254.169.254\r\n"
                    "User-Agent: curl/7.88.1\r\nAccept: */*\r\n"
                    "X-metadata-token:   tok  \t \r\nEmpty:\r\nSpaced:    \r\n\r\n";
    ck_assert_uint_eq(feeds(P, s), strlen(s));
    ck_assert_int_eq(http_parser_state(P), HTTP_DONE);
    ck_assert_int_eq(http_parser_status(P), 0);
    struct http_req *r = &P->req;
    ck_assert_str_eq(r->method, "GET");
    ck_assert_str_eq(r->target, "/latest/meta-data");
    ck_assert_int_eq(r->minor, 1);
    ck_assert(r->keep_alive);
    ck_assert_uint_eq(r->nheaders, 6);
    ck_assert_str_eq(r->headers[0].name, "Host");
    ck_assert_str_eq(r->headers[0].value, "169.254.169.254");
    ck_assert_str_eq(r->headers[3].value, "tok");
    ck_assert_str_eq(r->headers[4].value, "");
    ck_assert_str_eq(r->headers[5].value, "");
    unsigned n = 9;
    ck_assert_str_eq(http_req_header(r, "x-METADATA-token", &n), "tok");
    ck_assert_uint_eq(n, 1);
    ck_assert_ptr_null(http_req_header(r, "x-metadata", &n));
    ck_assert_uint_eq(n, 0);
    ck_assert_uint_eq(r->content_length, 0);
    /* nothing more is taken until next() */
    ck_assert_uint_eq(feeds(P, "GET / HTTP/1.1\r\n\r\n"), 0);
    http_parser_next(P);
    ck_assert_int_eq(http_parser_state(P), HTTP_NEED_MORE);
    ck_assert_uint_eq(feeds(P, "PUT /x HTTP/1.0\r\n\r\n"), 19);
    ck_assert_int_eq(http_parser_state(P), HTTP_DONE);
    ck_assert_str_eq(P->req.method, "PUT");
    ck_assert_int_eq(P->req.minor, 0);
    ck_assert(!P->req.keep_alive);
    ck_assert_uint_eq(P->req.nheaders, 0);
}
END_TEST

START_TEST(need_more_until_complete)
{
    const char *s = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    size_t n = strlen(s);
    for (size_t k = 0; k < n; k++) {
        http_parser_init(P);
        ck_assert_uint_eq(feed(P, s, k), k);
        ck_assert_int_eq(http_parser_state(P), HTTP_NEED_MORE);
        ck_assert_int_eq(http_parser_status(P), 0);
        ck_assert_uint_eq(feed(P, s + k, n - k), n - k);
        ck_assert_int_eq(http_parser_state(P), HTTP_DONE);
    }
}
END_TEST

START_TEST(body_by_content_length)
{
    static const char s[] = "PUT /latest/api/token HTTP/1.1\r\nContent-Length:  5 \r\n\r\nh\0l\r\nGET";
    size_t n = sizeof s - 1;
    ck_assert_int_eq(parse_same(s, n, NULL), HTTP_DONE);
    ck_assert_uint_eq(feed(P, s, n), n - 3);              /* "GET" is the next request's */
    ck_assert_int_eq(http_parser_state(P), HTTP_DONE);
    ck_assert_uint_eq(P->req.content_length, 5);
    ck_assert(memcmp(P->req.body, "h\0l\r\n", 5) == 0);
    /* the largest body, and one byte more */
    char *big = malloc(200 + HTTP_MAX_BODY + 1);
    int k = sprintf(big, "PUT / HTTP/1.1\r\nContent-Length: %u\r\n\r\n", HTTP_MAX_BODY);
    memset(big + k, 'b', HTTP_MAX_BODY);
    ck_assert_int_eq(parse_same(big, (size_t)k + HTTP_MAX_BODY, NULL), HTTP_DONE);
    ck_assert_int_eq(parse_same(big, (size_t)k + HTTP_MAX_BODY - 1, NULL), HTTP_NEED_MORE);
    k = sprintf(big, "PUT / HTTP/1.1\r\nContent-Length: %u\r\n\r\n", HTTP_MAX_BODY + 1);
    int st;
    ck_assert_int_eq(parse_same(big, (size_t)k, &st), HTTP_ERROR);
    ck_assert_int_eq(st, 413);
    free(big);
    ck_assert_int_eq(status_of("GET / HTTP/1.1\r\nContent-Length: 0000000000000000012\r\n\r\n"
                               "0123456789ab"), 0);
    ck_assert_int_eq(status_of("GET / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n"), 400);
    ck_assert_int_eq(status_of("GET / HTTP/1.1\r\nContent-Length: 9999999999999999999\r\n\r\n"), 413);
}
END_TEST

START_TEST(pipelined_requests)
{
    const char *s = "GET /a HTTP/1.1\r\nHost: m\r\n\r\n"
                    "PUT /latest/api/token HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
                    "\r\n"                      /* a stray empty line between requests */
                    "GET /c HTTP/1.1\r\nConnection: close\r\n\r\n"
                    "GET /d";
    static const char *const targets[] = { "/a", "/latest/api/token", "/c" };
    for (size_t step = 1; step <= strlen(s); step++) {
        http_parser_init(P);
        size_t off = 0, n = strlen(s), got = 0;
        /* the stream arrives in `step`-byte segments; what is not consumed
         * stays in the caller's buffer */
        size_t avail = 0;
        while (off < n) {
            avail = avail + step > n - off ? n - off : avail + step;
            size_t c = http_parser_feed(P, s + off, avail);
            off += c;
            avail -= c;
            if (http_parser_state(P) == HTTP_DONE) {
                ck_assert_uint_lt(got, 3);
                ck_assert_str_eq(P->req.target, targets[got]);
                if (got == 1)
                    ck_assert(memcmp(P->req.body, "abc", 3) == 0);
                ck_assert(P->req.keep_alive == (got != 2));
                got++;
                http_parser_next(P);
            }
            ck_assert_int_ne(http_parser_state(P), HTTP_ERROR);
        }
        ck_assert_uint_eq(got, 3);
        ck_assert_int_eq(http_parser_state(P), HTTP_NEED_MORE);   /* "GET /d" waits */
    }
}
END_TEST

START_TEST(leading_empty_lines)
{
    ck_assert_int_eq(status_of("\r\n\r\nGET / HTTP/1.1\r\n\r\n"), 0);
    ck_assert_int_eq(status_of("\r\r\nGET / HTTP/1.1\r\n\r\n"), 400);
    ck_assert_int_eq(status_of("\nGET / HTTP/1.1\r\n\r\n"), 400);
    ck_assert_int_eq(status_of(" GET / HTTP/1.1\r\n\r\n"), 400);
}
END_TEST

START_TEST(request_line_errors)
{
    static const struct { const char *s; int status; } cases[] = {
        { "GET / HTTP/1.1\rX\r\n\r\n", 400 },           /* bare CR */
        { "GET / HTTP/1.1\n\r\n", 400 },                /* bare LF */
        { "GET /\r\n\r\n", 400 },                       /* no version */
        { "GET / \r\n\r\n", 400 },                      /* empty version */
        { "GET\r\n\r\n", 400 },
        { " / HTTP/1.1\r\n\r\n", 400 },                 /* empty method */
        { "GET  / HTTP/1.1\r\n\r\n", 400 },             /* empty target */
        { "GET / HTTP/1.1 \r\n\r\n", 400 },             /* space after version */
        { "GET /  HTTP/1.1\r\n\r\n", 400 },
        { "GE(T / HTTP/1.1\r\n\r\n", 400 },             /* not a token */
        { "GET\t/ HTTP/1.1\r\n\r\n", 400 },
        { "GET /a\x01 HTTP/1.1\r\n\r\n", 400 },         /* control byte in the target */
        { "GET /a\x7f HTTP/1.1\r\n\r\n", 400 },
        { "GET /\xc3\xa9 HTTP/1.1\r\n\r\n", 400 },      /* non-ASCII target */
        { "GET /a\tb HTTP/1.1\r\n\r\n", 400 },
        { "GET / http/1.1\r\n\r\n", 400 },
        { "GET / HTTP/1.1x\r\n\r\n", 400 },
        { "GET / HTTP/11\r\n\r\n", 400 },
        { "GET / HTTP/1.\r\n\r\n", 400 },
        { "GET / HTTP/2.0\r\n\r\n", 505 },
        { "GET / HTTP/0.9\r\n\r\n", 505 },
        { "GET / HTTP/9.1\r\n\r\n", 505 },
        { "ABCDEFGHIJKLMNOPQ / HTTP/1.1\r\n\r\n", 501 },  /* 17-byte method */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(status_of(cases[i].s) == cases[i].status, "case %zu: %d, want %d", i,
                      status_of(cases[i].s), cases[i].status);
    /* NUL in each part of the request line */
    static const char nul_method[] = "G\0T / HTTP/1.1\r\n\r\n";
    static const char nul_target[] = "GET /\0 HTTP/1.1\r\n\r\n";
    static const char nul_version[] = "GET / HTTP/1.\0\r\n\r\n";
    int st;
    ck_assert_int_eq(parse_same(nul_method, sizeof nul_method - 1, &st), HTTP_ERROR);
    ck_assert_int_eq(st, 400);
    ck_assert_int_eq(parse_same(nul_target, sizeof nul_target - 1, &st), HTTP_ERROR);
    ck_assert_int_eq(st, 400);
    ck_assert_int_eq(parse_same(nul_version, sizeof nul_version - 1, &st), HTTP_ERROR);
    ck_assert_int_eq(st, 400);
    /* a 16-byte method and HTTP/1.x are fine */
    ck_assert_int_eq(status_of("ABCDEFGHIJKLMNOP / HTTP/1.1\r\n\r\n"), 0);
    ck_assert_int_eq(status_of("M-SEARCH * HTTP/1.7\r\n\r\n"), 0);
    feeds(P, "GET http://169.254.169.254/x?y=%20 HTTP/1.9\r\n\r\n");
    ck_assert_int_eq(http_parser_state(P), HTTP_DONE);
    ck_assert_str_eq(P->req.target, "http://169.254.169.254/x?y=%20");
    ck_assert_int_eq(P->req.minor, 1);
    /* the error stops consumption at the offending byte */
    http_parser_init(P);
    ck_assert_uint_eq(feeds(P, "GET /a\x01zzzz"), 7);
    ck_assert_int_eq(http_parser_state(P), HTTP_ERROR);
    ck_assert_uint_eq(feeds(P, "more"), 0);
    ck_assert_int_eq(http_parser_status(P), 400);
}
END_TEST

START_TEST(target_length)
{
    size_t n = 64 + HTTP_MAX_TARGET;
    char *s = malloc(n + 1);
    strcpy(s, "GET /");
    memset(s + 5, 'a', HTTP_MAX_TARGET - 1);
    strcpy(s + 4 + HTTP_MAX_TARGET, " HTTP/1.1\r\n\r\n");
    ck_assert_int_eq(status_of(s), 0);
    strcpy(s, "GET /");
    memset(s + 5, 'a', HTTP_MAX_TARGET);
    strcpy(s + 5 + HTTP_MAX_TARGET, " HTTP/1.1\r\n\r\n");
    ck_assert_int_eq(status_of(s), 414);
    /* decided at the 2049th byte, whatever follows */
    s[5 + HTTP_MAX_TARGET] = 0;
    ck_assert_int_eq(status_of(s), 414);
    free(s);
}
END_TEST

START_TEST(header_errors)
{
    static const struct { const char *s; int status; } cases[] = {
        { "GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", 400 },            /* bare CR in a value */
        { "GET / HTTP/1.1\r\nHost: a\nX: b\r\n\r\n", 400 },         /* bare LF in a value */
        { "GET / HTTP/1.1\r\nHost: a\r\n\n", 400 },                 /* bare LF ending the head */
        { "GET / HTTP/1.1\r\nHost: a\r\n\rX", 400 },
        { "GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n", 400 },            /* obs-fold */
        { "GET / HTTP/1.1\r\nX: a\r\n\tb\r\n\r\n", 400 },
        { "GET / HTTP/1.1\r\n Host: a\r\n\r\n", 400 },              /* whitespace before the first */
        { "GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400 },              /* whitespace before ':' */
        { "GET / HTTP/1.1\r\nHost\t: a\r\n\r\n", 400 },
        { "GET / HTTP/1.1\r\nHosta\r\n\r\n", 400 },                 /* no ':' */
        { "GET / HTTP/1.1\r\n: a\r\n\r\n", 400 },                   /* empty name */
        { "GET / HTTP/1.1\r\nHo(st: a\r\n\r\n", 400 },              /* not a token */
        { "GET / HTTP/1.1\r\nX: a\x01\r\n\r\n", 400 },              /* control byte */
        { "GET / HTTP/1.1\r\nX: a\x7f\r\n\r\n", 400 },
        { "GET / HTTP/1.1\r\nX:\x1b\r\n\r\n", 400 },
        { "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400 },    /* two Hosts */
        { "GET / HTTP/1.1\r\nContent-Length: 1\r\ncontent-length: 1\r\n\r\nx", 400 },
        { "GET / HTTP/1.1\r\nContent-Length: abc\r\n\r\n", 400 },
        { "GET / HTTP/1.1\r\nContent-Length:\r\n\r\n", 400 },
        { "GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400 },
        { "GET / HTTP/1.1\r\nContent-Length: +1\r\n\r\nx", 400 },
        { "GET / HTTP/1.1\r\nContent-Length: 1 2\r\n\r\n", 400 },
        { "GET / HTTP/1.1\r\nContent-Length: 1,1\r\n\r\nx", 400 },
        { "GET / HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n", 400 },
        { "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501 },
        { "POST / HTTP/1.1\r\ntransfer-encoding: identity\r\n\r\n", 501 },
        { "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 501 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(status_of(cases[i].s) == cases[i].status, "case %zu: %d, want %d", i,
                      status_of(cases[i].s), cases[i].status);
    static const char nul_name[] = "GET / HTTP/1.1\r\nX\0: a\r\n\r\n";
    static const char nul_value[] = "GET / HTTP/1.1\r\nX: a\0b\r\n\r\n";
    static const char nul_ows[] = "GET / HTTP/1.1\r\nX: \0\r\n\r\n";
    int st;
    ck_assert_int_eq(parse_same(nul_name, sizeof nul_name - 1, &st), HTTP_ERROR);
    ck_assert_int_eq(st, 400);
    ck_assert_int_eq(parse_same(nul_value, sizeof nul_value - 1, &st), HTTP_ERROR);
    ck_assert_int_eq(st, 400);
    ck_assert_int_eq(parse_same(nul_ows, sizeof nul_ows - 1, &st), HTTP_ERROR);
    ck_assert_int_eq(st, 400);
    /* obs-text in a value is kept */
    feeds(P, "GET / HTTP/1.1\r\nX: caf\xc3\xa9 au lait\r\n\r\n");
    ck_assert_int_eq(http_parser_state(P), HTTP_DONE);
    ck_assert_str_eq(P->req.headers[0].value, "caf\xc3\xa9 au lait");
}
END_TEST

START_TEST(header_limits)
{
    char *s = malloc(64 * 1024);
    /* HTTP_MAX_HEADERS lines pass, one more is 431 */
    for (unsigned extra = 0; extra <= 1; extra++) {
        int k = sprintf(s, "GET / HTTP/1.1\r\n");
        for (unsigned i = 0; i < HTTP_MAX_HEADERS + extra; i++)
            k += sprintf(s + k, "X-%u: %u\r\n", i, i);
        strcpy(s + k, "\r\n");
        ck_assert_int_eq(status_of(s), extra ? 431 : 0);
    }
    /* a line of HTTP_MAX_FIELD_LINE bytes passes, one more is 431 */
    for (unsigned extra = 0; extra <= 1; extra++) {
        int k = sprintf(s, "GET / HTTP/1.1\r\nX: ");
        memset(s + k, 'v', HTTP_MAX_FIELD_LINE - 3 + extra);
        k += (int)(HTTP_MAX_FIELD_LINE - 3 + extra);
        strcpy(s + k, "\r\n\r\n");
        ck_assert_int_eq(status_of(s), extra ? 431 : 0);
    }
    /* whitespace counts too */
    int k = sprintf(s, "GET / HTTP/1.1\r\nX:");
    memset(s + k, ' ', HTTP_MAX_FIELD_LINE);
    strcpy(s + k + HTTP_MAX_FIELD_LINE, "v\r\n\r\n");
    ck_assert_int_eq(status_of(s), 431);
    /* a long name */
    k = sprintf(s, "GET / HTTP/1.1\r\n");
    memset(s + k, 'N', HTTP_MAX_FIELD_LINE + 1);
    strcpy(s + k + HTTP_MAX_FIELD_LINE + 1, ": v\r\n\r\n");
    ck_assert_int_eq(status_of(s), 431);
    /* all lines together: exactly HTTP_MAX_HEADER_BYTES passes (4 lines of
     * 2046 + CRLF = 8192 minus the final CRLF), a byte more is 431 */
    for (unsigned extra = 0; extra <= 1; extra++) {
        k = sprintf(s, "GET / HTTP/1.1\r\n");
        unsigned total = 0;
        for (int i = 0; i < 4; i++) {
            unsigned len = HTTP_MAX_FIELD_LINE - 2 - (i == 3 ? 2 : 0) + (i == 3 ? extra : 0);
            k += sprintf(s + k, "%c:", 'A' + i);
            memset(s + k, 'v', len - 2);
            k += (int)len - 2;
            k += sprintf(s + k, "\r\n");
            total += len + 2;
        }
        strcpy(s + k, "\r\n");
        ck_assert_uint_eq(total + 2, HTTP_MAX_HEADER_BYTES + extra);
        ck_assert_int_eq(status_of(s), extra ? 431 : 0);
    }
    free(s);
}
END_TEST

START_TEST(connection_semantics)
{
    static const struct { const char *s; int keep; } cases[] = {
        { "GET / HTTP/1.1\r\n\r\n", 1 },
        { "GET / HTTP/1.1\r\nConnection: close\r\n\r\n", 0 },
        { "GET / HTTP/1.1\r\nConnection: Upgrade, CLOSE\r\n\r\n", 0 },
        { "GET / HTTP/1.1\r\nConnection: closed\r\n\r\n", 1 },
        { "GET / HTTP/1.1\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n", 0 },
        { "GET / HTTP/1.0\r\n\r\n", 0 },
        { "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", 1 },
        { "GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n", 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        http_parser_init(P);
        feeds(P, cases[i].s);
        ck_assert_int_eq(http_parser_state(P), HTTP_DONE);
        ck_assert_msg(P->req.keep_alive == cases[i].keep, "case %zu", i);
    }
}
END_TEST

START_TEST(list_and_reason)
{
    ck_assert(http_list_has("close", "close"));
    ck_assert(http_list_has(" a , Close ;q=1, b", "close"));
    ck_assert(http_list_has("a,,close", "close"));
    ck_assert(!http_list_has("closed", "close"));
    ck_assert(!http_list_has("clos", "close"));
    ck_assert(!http_list_has("x-close", "close"));
    ck_assert(!http_list_has("close x", "close"));
    ck_assert(!http_list_has("", "close"));
    ck_assert(!http_list_has("a", ""));
    ck_assert(http_list_has("application/json", "application/json"));
    ck_assert(http_list_has("text/plain, application/json; q=0.9", "application/json"));
    ck_assert_str_eq(http_reason(404), "Not Found");
    ck_assert_str_eq(http_reason(431), "Request Header Fields Too Large");
    ck_assert_str_eq(http_reason(299), "Unknown");
}
END_TEST

/* Bytes of every class at every position of a valid request: the outcome
 * never depends on how the stream was cut. */
START_TEST(split_arrival_is_equivalent)
{
    const char *base = "PUT /latest/api/token HTTP/1.1\r\nHost: 169.254.169.254\r\n"
                       "X-metadata-token-ttl-seconds: 21600\r\nContent-Length: 2\r\n\r\nok";
    size_t n = strlen(base);
    static const char repl[] = { 0, '\r', '\n', ' ', '\t', ':', 'x', '\x80', '\x7f', '/' };
    char *s = malloc(n + 1);
    int done = 0, errors = 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < sizeof repl; j++) {
            memcpy(s, base, n + 1);
            s[i] = repl[j];
            enum http_state st = parse_same(s, n, NULL);
            done += st == HTTP_DONE;
            errors += st == HTTP_ERROR;
        }
    }
    ck_assert_int_gt(done, 0);
    ck_assert_int_gt(errors, 0);
    free(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("http_req");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, simple_get);
    tcase_add_test(tc, need_more_until_complete);
    tcase_add_test(tc, body_by_content_length);
    tcase_add_test(tc, pipelined_requests);
    tcase_add_test(tc, leading_empty_lines);
    tcase_add_test(tc, request_line_errors);
    tcase_add_test(tc, target_length);
    tcase_add_test(tc, header_errors);
    tcase_add_test(tc, header_limits);
    tcase_add_test(tc, connection_semantics);
    tcase_add_test(tc, list_and_reason);
    tcase_add_test(tc, split_arrival_is_equivalent);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
