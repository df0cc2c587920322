/* Fuzz the default guest's HTTP client parsers (guest/tools/fetch_parse.h,
 * compiled in here: guest code, not part of libmoat). Whatever a server or
 * a DNS answer says must never crash moat-fetch or make it read or write
 * out of bounds.
 *
 * Input: [0] piece size - 1 (1..256) for the chunked decoder
 *        [1..] the same bytes as: a response head; a chunked body fed in
 *              pieces; a DNS answer to the query (id from its first two
 *              bytes) for "www.example.org"; resolv.conf and hosts text;
 *              a URL (up to the first NUL) and a redirect from it. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "guest/tools/fetch_parse.c"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_url(const struct fetch_url *u)
{
    size_t hl = strlen(u->host), pl = strlen(u->path);
    FUZZ_ASSERT(hl >= 1 && hl <= FETCH_HOST_MAX && u->port >= 1);
    FUZZ_ASSERT(pl >= 1 && pl <= FETCH_PATH_MAX && u->path[0] == '/');
    for (size_t i = 0; i < pl; i++)
        FUZZ_ASSERT((unsigned char)u->path[i] > 0x20 && u->path[i] != 0x7f && u->path[i] != '#');
    /* What parsed is printed back and parses the same. */
    char buf[FETCH_HOST_MAX + FETCH_PATH_MAX + 32];
    struct fetch_url v;
    snprintf(buf, sizeof(buf), "http://%s:%u%s", u->host, u->port, u->path);
    FUZZ_ASSERT(fetch_url_parse(buf, &v) == 0);
    FUZZ_ASSERT(!strcmp(v.host, u->host) && v.port == u->port && !strcmp(v.path, u->path));
}

static void fuzz_head(const uint8_t *d, size_t n)
{
    struct fetch_resp r;
    int h = fetch_resp_parse((const char *)d, n, &r);
    if (h > 0) {
        FUZZ_ASSERT((size_t)h <= n && h <= FETCH_HEAD_MAX);
        FUZZ_ASSERT(r.status >= 100 && r.status <= 599 && r.length >= -1);
        FUZZ_ASSERT(memchr(r.location, 0, sizeof(r.location)) != NULL);
        FUZZ_ASSERT(d[h - 1] == '\n');
    } else {
        FUZZ_ASSERT(h == 0 || h == -EINVAL || h == -EPROTO || h == -E2BIG);
        FUZZ_ASSERT(h != 0 || n < FETCH_HEAD_MAX);
    }
}

static void fuzz_chunked(const uint8_t *d, size_t n, size_t piece)
{
    struct fetch_chunked c = { 0 };
    uint8_t *buf = malloc(piece);
    for (size_t off = 0; off < n;) {
        size_t k = n - off < piece ? n - off : piece, used = 0, out = 0;
        memcpy(buf, d + off, k);
        int r = fetch_chunked_decode(&c, buf, k, &used, &out);
        if (r < 0) {
            FUZZ_ASSERT(r == -EINVAL);
            break;
        }
        FUZZ_ASSERT(out <= used && used <= k);
        FUZZ_ASSERT(r == 1 || used == k);
        off += used;
        if (r == 1)
            break;
    }
    free(buf);
}

static void fuzz_dns(const uint8_t *d, size_t n)
{
    uint8_t q[512];
    uint32_t a;
    uint16_t id = n >= 2 ? (uint16_t)(d[0] << 8 | d[1]) : 0;
    int qn = fetch_dns_query(q, sizeof(q), id, "www.example.org");
    FUZZ_ASSERT(qn == 12 + 17 + 4);
    int r = fetch_dns_answer(d, n, id, "www.example.org", &a);
    FUZZ_ASSERT(r == 0 || r == -EINVAL || r == -ENOENT || r == -EAGAIN || r == -EIO);
    /* The same bytes after our own question, as the records. */
    uint8_t *m = malloc((size_t)qn + n);
    memcpy(m, q, (size_t)qn);
    m[2] = 0x81;
    m[3] = n ? d[0] : 0x80;
    m[6] = 0;
    m[7] = n > 1 ? d[1] : 1;
    memcpy(m + qn, d, n);
    r = fetch_dns_answer(m, (size_t)qn + n, id, "www.example.org", &a);
    FUZZ_ASSERT(r == 0 || r == -EINVAL || r == -ENOENT || r == -EAGAIN || r == -EIO);
    free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t piece = (size_t)data[0] + 1;
    data++;
    size--;
    /* Copies of exactly SIZE bytes, so ASan sees any read past the end. */
    uint8_t *d = malloc(size ? size : 1);
    memcpy(d, data, size);

    fuzz_head(d, size);
    fuzz_chunked(d, size, piece);
    fuzz_dns(d, size);

    uint32_t a;
    fetch_resolv_ns((const char *)d, size, &a);
    fetch_hosts_lookup((const char *)d, size, "localhost", &a);

    char *s = malloc(size + 1);
    memcpy(s, data, size);
    s[size] = 0;
    struct fetch_url u, v;
    if (fetch_url_parse(s, &u) == 0) {
        check_url(&u);
        if (fetch_url_redirect(&u, s + strlen(s) / 2, &v) == 0)
            check_url(&v);
    }
    static const struct fetch_url base = { .host = "h", .port = 8080, .path = "/d/f?q" };
    if (fetch_url_redirect(&base, s, &v) == 0)
        check_url(&v);
    uint8_t q[300];
    int qn = fetch_dns_query(q, sizeof(q), 1, s);
    FUZZ_ASSERT(qn == -EINVAL || (qn >= 12 + 2 + 4 && (size_t)qn <= 12 + 255 + 4));
    free(s);
    free(d);
    return 0;
}
