/* Fuzz the registry client's pure parsers (vmm/image/authparse.c).
 *
 * Input: [0] which: 0 a WWW-Authenticate value, 1 a config.json /
 *        auth.json looked up for "127.0.0.1:5000" and "docker.io",
 *        2 a token answer, 3 base64, 4 USER:PASS, 5 Retry-After and
 *        Content-Range; the rest: the text.
 *
 * Invariants: results are NUL-terminated within their fields; an error
 * is -EINVAL with a message; a Bearer challenge's realm is an http(s)
 * URL; credentials have a non-empty user without ':' or control
 * characters; a token is printable ASCII; base64 that decodes encodes
 * to text that decodes to the same bytes. Seeds:
 * tests/fuzz/corpus/image_auth/. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "tests/fuzz/fuzz_common.h"
#include "vmm/image/authparse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_err(int r, const struct img_err *e)
{
    FUZZ_ASSERT(r == 0 || r == 1 || (r == -EINVAL && e->code == -EINVAL && e->msg[0]));
}

static void check_creds(const struct img_creds *c)
{
    FUZZ_ASSERT(memchr(c->user, 0, sizeof c->user) && memchr(c->pass, 0, sizeof c->pass));
    FUZZ_ASSERT(c->user[0] && !strchr(c->user, ':'));
    for (const char *p = c->user; *p; p++)
        FUZZ_ASSERT((unsigned char)*p >= 0x20 && *p != 0x7f);
}

static void fuzz_challenge(const char *s, size_t n)
{
    struct img_challenge c;
    struct img_err e = { 0 };
    int r = img_auth_parse_challenge(s, n, &c, &e);
    check_err(r, &e);
    if (r < 0)
        return;
    FUZZ_ASSERT(c.scheme == IMG_AUTH_BASIC || c.scheme == IMG_AUTH_BEARER);
    FUZZ_ASSERT(memchr(c.realm, 0, sizeof c.realm) && memchr(c.service, 0, sizeof c.service) &&
                memchr(c.scope, 0, sizeof c.scope));
    if (c.scheme == IMG_AUTH_BEARER)
        FUZZ_ASSERT(!strncasecmp(c.realm, "http://", 7) || !strncasecmp(c.realm, "https://", 8));
    char url[4096];
    int u = img_auth_token_url(&c, "repository:a/b:pull", url, sizeof url);
    FUZZ_ASSERT(u == 0 || u == -ENAMETOOLONG);
    if (u == 0)
        for (const char *p = url + strlen(c.realm); *p; p++)    /* everything after the realm escaped */
            FUZZ_ASSERT((unsigned char)*p > 0x20 && (unsigned char)*p < 0x7f);
}

static void fuzz_file(const char *s, size_t n)
{
    const char *regs[] = { "127.0.0.1:5000", "docker.io" };
    for (int i = 0; i < 2; i++) {
        struct img_creds c;
        struct img_err e = { 0 };
        int r = img_auth_file_lookup(s, n, regs[i], &c, &e);
        check_err(r, &e);
        if (r == 1) {
            check_creds(&c);
            char b[2048];
            FUZZ_ASSERT(img_auth_basic(&c, b, sizeof b) == 0);
        }
    }
}

static void fuzz_token(const char *s, size_t n)
{
    char tok[IMG_TOKEN_MAX];
    struct img_err e = { 0 };
    int r = img_auth_token_parse(s, n, tok, sizeof tok, &e);
    check_err(r, &e);
    if (r == 0) {
        FUZZ_ASSERT(tok[0] && strlen(tok) < sizeof tok);
        for (const char *p = tok; *p; p++)
            FUZZ_ASSERT((unsigned char)*p > 0x20 && (unsigned char)*p < 0x7f);
    }
}

static void fuzz_b64(const char *s, size_t n)
{
    unsigned char raw[4096], raw2[4096];
    char enc[8192];
    int r = img_b64_decode(s, n, raw, sizeof raw);
    FUZZ_ASSERT(r >= 0 || r == -EINVAL || r == -ENAMETOOLONG);
    if (r < 0)
        return;
    FUZZ_ASSERT((size_t)r <= n / 4 * 3);
    FUZZ_ASSERT(img_b64_encode(raw, (size_t)r, enc, sizeof enc) == 0);
    FUZZ_ASSERT(strlen(enc) == n);
    int r2 = img_b64_decode(enc, strlen(enc), raw2, sizeof raw2);
    FUZZ_ASSERT(r2 == r && !memcmp(raw, raw2, (size_t)r));
}

static void fuzz_small(const char *s)
{
    struct img_creds c;
    struct img_err e = { 0 };
    int r = img_creds_parse(s, &c, &e);
    check_err(r, &e);
    if (r == 0)
        check_creds(&c);
    int ra = img_retry_after(s);
    FUZZ_ASSERT(ra >= -1 && ra <= 3600);
    uint64_t start;
    r = img_content_range(s, &start);
    FUZZ_ASSERT(r == 0 || r == -EINVAL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > (64u << 10))
        return 0;
    size_t n = size - 1;
    char *s = malloc(n + 1);       /* a copy: the parsers get exactly n bytes */
    memcpy(s, data + 1, n);
    s[n] = 0;
    switch (data[0] % 6) {
    case 0: fuzz_challenge(s, n); break;
    case 1: fuzz_file(s, n); break;
    case 2: fuzz_token(s, n); break;
    case 3: fuzz_b64(s, n); break;
    default: fuzz_small(s); break;
    }
    free(s);
    return 0;
}
