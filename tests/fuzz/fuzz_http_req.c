/* Fuzz the metadata service's HTTP request parser (devices/net/http_req.c)
 * and its responder (devices/net/mmds.c) over a fixed small document.
 *
 * Input: [0] options: bit0 = 1 -> MMDS V1 (else V2), bit1 -> imds_compat,
 *            bits 2..7 -> the segment size the stream is cut into (1..64);
 *        the rest: the bytes a guest sends on one connection (requests,
 *        pipelined). Tokens come from an all-zero "random" source, so the
 *        token is always 32 'A's and a seed can use it after its PUT.
 *
 * The stream is served twice, cut into segments and whole; the responses
 * must be byte for byte the same. Invariants: the parser never takes more
 * than it is given and takes everything while it needs more; a complete
 * request stays within the documented limits; an error is one of the
 * documented statuses; every response fits mmds_response_max, is a
 * well-formed status line + headers + a body of Content-Length bytes,
 * and closes the connection exactly when it says so (always after a
 * parser error). Seeds: tests/fuzz/corpus/http_req/ (tests/fuzz/gen_seeds.c). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devices/net/mmds.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char DOC[] =
    "{\"latest\":{\"meta-data\":{\"ami-id\":\"ami-1\",\"tags\":{\"a\":\"b\"}},"
    "\"user-data\":\"hi\"},\"n\":[1,2.5,\"x\",null,true,{\"k\":{}}],\"a/b~\":{\"c\":\"d\"}}";

static int zero_random(void *ctx, void *buf, size_t n)
{
    (void)ctx;
    memset(buf, 0, n);
    return 0;
}

static bool is_tchar(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static void check_request(const struct http_req *r)
{
    size_t ml = strlen(r->method), tl = strlen(r->target);
    FUZZ_ASSERT(ml >= 1 && ml <= HTTP_MAX_METHOD && tl >= 1 && tl <= HTTP_MAX_TARGET);
    for (size_t i = 0; i < ml; i++)
        FUZZ_ASSERT(is_tchar(r->method[i]));
    for (size_t i = 0; i < tl; i++)
        FUZZ_ASSERT(r->target[i] > 0x20 && r->target[i] < 0x7f);
    FUZZ_ASSERT(r->minor == 0 || r->minor == 1);
    FUZZ_ASSERT(r->nheaders <= HTTP_MAX_HEADERS);
    FUZZ_ASSERT(r->content_length <= HTTP_MAX_BODY);
    for (unsigned i = 0; i < r->nheaders; i++) {
        const char *n = r->headers[i].name, *v = r->headers[i].value;
        FUZZ_ASSERT(*n && strlen(n) <= HTTP_MAX_FIELD_LINE);
        for (; *n; n++)
            FUZZ_ASSERT(is_tchar(*n));
        size_t vl = strlen(v);
        FUZZ_ASSERT(vl <= HTTP_MAX_FIELD_LINE);
        FUZZ_ASSERT(!strpbrk(v, "\r\n"));
        FUZZ_ASSERT(vl == 0 || (v[0] != ' ' && v[0] != '\t' && v[vl - 1] != ' ' && v[vl - 1] != '\t'));
    }
}

static void check_response(const char *out, size_t len, size_t max, bool close, bool parse_error)
{
    FUZZ_ASSERT(len <= max && len > 17);
    FUZZ_ASSERT(memcmp(out, "HTTP/1.", 7) == 0 && (out[7] == '0' || out[7] == '1') && out[8] == ' ');
    int status = atoi(out + 9);
    static const int ok[] = { 200, 400, 401, 404, 405, 413, 414, 431, 500, 501, 505 };
    bool known = false;
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        known |= status == ok[i];
    FUZZ_ASSERT(known);
    const char *end = memmem(out, len, "\r\n\r\n", 4);
    FUZZ_ASSERT(end);
    size_t hl = (size_t)(end - out) + 4;
    const char *cl = memmem(out, hl, "\r\nContent-Length: ", 18);
    FUZZ_ASSERT(cl);
    FUZZ_ASSERT(strtoul(cl + 18, NULL, 10) == len - hl);
    FUZZ_ASSERT(memmem(out, hl, "\r\nContent-Type: ", 16));
    FUZZ_ASSERT(close == (memmem(out, hl, "\r\nConnection: close\r\n", 21) != NULL));
    if (parse_error)
        FUZZ_ASSERT(close && status >= 400);
}

/* Serve the stream in `seg`-byte segments; append every response to *all. */
static void serve(const uint8_t *s, size_t n, size_t seg, uint8_t opt, char **all, size_t *all_len)
{
    struct mmds_config cfg = { .version = opt & 1 ? MMDS_V1 : MMDS_V2, .imds_compat = opt & 2,
                               .random = zero_random, .max_tokens = 4 };
    struct mmds *m;
    FUZZ_ASSERT(mmds_create(&cfg, &m) == 0);
    FUZZ_ASSERT(mmds_put(m, DOC, strlen(DOC), NULL, 0) == 0);
    static struct http_parser p;
    http_parser_init(&p);
    size_t max = mmds_response_max(m);
    char *out = malloc(max);
    FUZZ_ASSERT(out);
    size_t off = 0, avail = 0;
    uint64_t now = 1000000000ull;
    while (off < n) {
        avail = avail + seg > n - off ? n - off : avail + seg;
        size_t c = http_parser_feed(&p, s + off, avail);
        FUZZ_ASSERT(c <= avail);
        off += c;
        avail -= c;
        enum http_state st = http_parser_state(&p);
        if (st == HTTP_NEED_MORE) {
            FUZZ_ASSERT(avail == 0 && http_parser_status(&p) == 0);
            continue;
        }
        if (st == HTTP_DONE)
            check_request(&p.req);
        else {
            int e = http_parser_status(&p);
            FUZZ_ASSERT(e == 400 || e == 413 || e == 414 || e == 431 || e == 501 || e == 505);
        }
        size_t len = 0;
        bool close = false;
        FUZZ_ASSERT(mmds_respond(m, &p, now, out, max, &len, &close) == 0);
        check_response(out, len, max, close, st == HTTP_ERROR);
        /* one byte short: refused whole (a second answer: it may issue
         * another token, the same on both runs) */
        size_t l2 = 7;
        FUZZ_ASSERT(mmds_respond(m, &p, now, out, len - 1, &l2, NULL) == -ENOSPC && l2 == 7);
        char *a = realloc(*all, *all_len + len);
        FUZZ_ASSERT(a);
        memcpy(a + *all_len, out, len);
        *all = a;
        *all_len += len;
        now += 1000000000ull;
        if (close)
            break;
        http_parser_next(&p);
    }
    free(out);
    mmds_destroy(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 65536)
        return 0;
    uint8_t opt = data[0];
    size_t seg = 1 + (opt >> 2);
    char *a = NULL, *b = NULL;
    size_t al = 0, bl = 0;
    serve(data + 1, size - 1, seg, opt, &a, &al);
    serve(data + 1, size - 1, size, opt, &b, &bl);
    FUZZ_ASSERT(al == bl && (al == 0 || memcmp(a, b, al) == 0));
    free(a);
    free(b);
    return 0;
}
