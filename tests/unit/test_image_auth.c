/* The registry client's pure parsers (vmm/image/authparse.h):
 * WWW-Authenticate challenges, USER:PASS, Docker config.json /
 * auth.json lookups, token answers, base64, the token URL, Retry-After
 * and Content-Range; every malformed case. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/image/authparse.h"

static int chal(const char *s, struct img_challenge *c)
{
    struct img_err e = { 0 };
    int r = img_auth_parse_challenge(s, strlen(s), c, &e);
    ck_assert_int_eq(e.code, r < 0 ? r : 0);
    if (r < 0)
        ck_assert(e.msg[0] != 0);
    return r;
}

START_TEST(challenge_bearer)
{
    struct img_challenge c;
    ck_assert_int_eq(chal("Bearer realm=\"https://auth.example/token\",service=\"registry.example\","
                          "scope=\"repository:library/python:pull\"", &c), 0);
    ck_assert_int_eq(c.scheme, IMG_AUTH_BEARER);
    ck_assert_str_eq(c.realm, "https://auth.example/token");
    ck_assert_str_eq(c.service, "registry.example");
    ck_assert_str_eq(c.scope, "repository:library/python:pull");
    /* case-insensitive scheme and names, spaces, tokens unquoted, unknown params */
    ck_assert_int_eq(chal("  bearer   REALM = \"http://127.0.0.1:1/t\" , Service=svc, error=\"insufficient_scope\"",
                          &c), 0);
    ck_assert_str_eq(c.realm, "http://127.0.0.1:1/t");
    ck_assert_str_eq(c.service, "svc");
    ck_assert_str_eq(c.scope, "");
    /* escapes in a quoted string */
    ck_assert_int_eq(chal("Bearer realm=\"https://a/t\",service=\"a\\\"b\\\\c\"", &c), 0);
    ck_assert_str_eq(c.service, "a\"b\\c");
}
END_TEST

START_TEST(challenge_basic_and_several)
{
    struct img_challenge c;
    ck_assert_int_eq(chal("Basic realm=\"Registry Realm\"", &c), 0);
    ck_assert_int_eq(c.scheme, IMG_AUTH_BASIC);
    ck_assert_int_eq(chal("Basic", &c), 0);
    ck_assert_int_eq(c.scheme, IMG_AUTH_BASIC);
    /* Bearer preferred, whatever the order; other schemes skipped */
    ck_assert_int_eq(chal("Basic realm=\"x\", Bearer realm=\"https://t/\",service=\"s\"", &c), 0);
    ck_assert_int_eq(c.scheme, IMG_AUTH_BEARER);
    ck_assert_str_eq(c.service, "s");
    ck_assert_int_eq(chal("Negotiate abc==, Basic realm=\"r\"", &c), 0);
    ck_assert_int_eq(c.scheme, IMG_AUTH_BASIC);
    ck_assert_int_eq(chal("Digest realm=\"x\", nonce=\"1\", Basic", &c), 0);
    ck_assert_int_eq(c.scheme, IMG_AUTH_BASIC);
}
END_TEST

START_TEST(challenge_malformed)
{
    struct img_challenge c;
    const char *bad[] = {
        "",                                         /* nothing */
        "   , ,",                                   /* nothing but separators */
        "Negotiate",                                /* no scheme moat speaks */
        "Digest realm=\"x\"",
        "Bearer realm=\"https://a/t",               /* unterminated quote */
        "Bearer realm=\"https://a/t\\",             /* escape at the end */
        "Bearer realm=\"https://a/\x01t\"",         /* control character */
        "Bearer realm=\"https://a/t\",realm=\"https://b\"",     /* repeated */
        "Bearer service=\"s\"",                     /* no realm */
        "Bearer realm=\"file:///etc/passwd\"",      /* realm not http(s) */
        "Bearer realm=\"ftp://a/t\"",
        "Bearer realm=",                            /* no value */
        "Bearer realm=,service=x",
        "Bearer realm=\"https://a\" @",             /* junk */
        "\"quoted\"",
        "Bearer realm=\"https://a/t\" ; x=y",
    };
    for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(chal(bad[i], &c) == -EINVAL, "accepted: %s", bad[i]);
    /* oversized: a parameter, a name, the whole header, the scheme */
    char big[IMG_AUTH_HDR_MAX + 64];
    snprintf(big, sizeof big, "Bearer realm=\"https://a/%0*d\"", 1100, 0);
    ck_assert_int_eq(chal(big, &c), -EINVAL);
    snprintf(big, sizeof big, "Bearer realm=\"https://a/\",%0*d=1", 100, 0);
    ck_assert_int_eq(chal(big, &c), -EINVAL);
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = 0;
    ck_assert_int_eq(chal(big, &c), -EINVAL);
    snprintf(big, sizeof big, "%0*d realm=x", 40, 0);
    ck_assert_int_eq(chal(big, &c), -EINVAL);
    /* embedded NUL: the length counts, not the string */
    struct img_err e = { 0 };
    ck_assert_int_eq(img_auth_parse_challenge("Basic\0junk\"", 11, &c, &e), -EINVAL);
}
END_TEST

START_TEST(creds)
{
    struct img_creds c;
    struct img_err e = { 0 };
    ck_assert_int_eq(img_creds_parse("alice:s3cr:et", &c, &e), 0);
    ck_assert_str_eq(c.user, "alice");
    ck_assert_str_eq(c.pass, "s3cr:et");
    ck_assert_int_eq(img_creds_parse("bob:", &c, &e), 0);
    ck_assert_str_eq(c.pass, "");
    const char *bad[] = { "alice", ":pass", "", "al\x01ice:x", "alice:p\nw" };
    for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct img_err e2 = { 0 };
        ck_assert_msg(img_creds_parse(bad[i], &c, &e2) == -EINVAL, "accepted %s", bad[i]);
        ck_assert(e2.msg[0]);
    }
    char longuser[400];
    memset(longuser, 'u', 300);
    strcpy(longuser + 300, ":p");
    ck_assert_int_eq(img_creds_parse(longuser, &c, &e), -EINVAL);
}
END_TEST

static int lookup(const char *json, const char *reg, struct img_creds *c)
{
    struct img_err e = { 0 };
    int r = img_auth_file_lookup(json, strlen(json), reg, c, &e);
    if (r < 0)
        ck_assert(e.msg[0]);
    return r;
}

START_TEST(auth_file)
{
    struct img_creds c;
    /* YWxpY2U6cHc6MQ== is base64("alice:pw:1") */
    const char *j = "{\"auths\":{\"https://index.docker.io/v1/\":{\"auth\":\"YWxpY2U6cHc6MQ==\"},"
                    "\"127.0.0.1:5000\":{\"username\":\"bob\",\"password\":\"hunter2\"},"
                    "\"https://reg.example\":{\"auth\":\"Ym9iOng=\"}},\"credsStore\":\"x\"}";
    ck_assert_int_eq(lookup(j, "docker.io", &c), 1);
    ck_assert_str_eq(c.user, "alice");
    ck_assert_str_eq(c.pass, "pw:1");
    ck_assert_int_eq(lookup(j, "127.0.0.1:5000", &c), 1);
    ck_assert_str_eq(c.user, "bob");
    ck_assert_str_eq(c.pass, "hunter2");
    ck_assert_int_eq(lookup(j, "reg.example", &c), 1);
    ck_assert_str_eq(c.pass, "x");
    ck_assert_int_eq(lookup(j, "REG.example", &c), 1);
    ck_assert_int_eq(lookup(j, "127.0.0.1:5001", &c), 0);
    ck_assert_int_eq(lookup(j, "127.0.0.1", &c), 0);
    ck_assert_int_eq(lookup(j, "other.example", &c), 0);
    ck_assert_int_eq(lookup("{}", "docker.io", &c), 0);
    ck_assert_int_eq(lookup("{\"auths\":{}}", "docker.io", &c), 0);
    ck_assert_int_eq(lookup("{\"auths\":{\"registry-1.docker.io\":{\"auth\":\"YTpi\"}}}", "docker.io", &c), 1);
    ck_assert_str_eq(c.user, "a");
    ck_assert_int_eq(lookup("{\"auths\":{\"index.docker.io\":{\"auth\":\"YTpi\"}}}", "docker.io", &c), 1);
}
END_TEST

START_TEST(auth_file_malformed)
{
    struct img_creds c;
    const char *bad[] = {
        "",  "{", "[]", "\"x\"", "{\"auths\":[]}", "{\"auths\":\"x\"}",
        "{\"auths\":{\"h\":1}}",                           /* entry not an object */
        "{\"auths\":{\"h\":{}}}",                          /* neither form */
        "{\"auths\":{\"h\":{\"auth\":\"!!!!\"}}}",         /* not base64 */
        "{\"auths\":{\"h\":{\"auth\":\"YWJj\"}}}",         /* "abc": no colon */
        "{\"auths\":{\"h\":{\"auth\":\"OnB3\"}}}",         /* ":pw": empty user */
        "{\"auths\":{\"h\":{\"auth\":\"YQBiOmM=\"}}}",     /* "a\0b:c": NUL */
        "{\"auths\":{\"h\":{\"auth\":\"YTpi\"}},\"auths\":{}}",   /* duplicate key */
        "{\"auths\":{\"h\":{\"username\":\"u\"}}}",        /* no password */
        "{\"auths\":{\"h\":{\"username\":1,\"password\":\"p\"}}}",
        "{\"auths\":{\"h\":{\"username\":\"u\\u0000x\",\"password\":\"p\"}}}",
        "{\"auths\":{\"h\":{\"username\":\"\",\"password\":\"p\"}}}",
    };
    for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(lookup(bad[i], "h", &c) == -EINVAL, "accepted: %s", bad[i]);
    /* too large */
    size_t n = IMG_AUTH_FILE_MAX + 2;
    char *big = malloc(n);
    memset(big, ' ', n);
    big[0] = '{';
    big[n - 1] = '}';
    struct img_err e = { 0 };
    ck_assert_int_eq(img_auth_file_lookup(big, n, "h", &c, &e), -EINVAL);
    free(big);
}
END_TEST

START_TEST(token_answer)
{
    char tok[IMG_TOKEN_MAX];
    struct img_err e = { 0 };
#define TOK(s) img_auth_token_parse(s, strlen(s), tok, sizeof tok, &e)
    ck_assert_int_eq(TOK("{\"token\":\"abc.def\",\"expires_in\":300}"), 0);
    ck_assert_str_eq(tok, "abc.def");
    ck_assert_int_eq(TOK("{\"access_token\":\"xyz\"}"), 0);
    ck_assert_str_eq(tok, "xyz");
    ck_assert_int_eq(TOK("{\"token\":\"\",\"access_token\":\"xyz\"}"), 0);
    ck_assert_str_eq(tok, "xyz");
    const char *bad[] = { "", "null", "[]", "{}", "{\"token\":1}", "{\"token\":\"\"}",
                          "{\"token\":\"a b\"}", "{\"token\":\"a\\r\\nX-Evil: 1\"}",
                          "{\"token\":\"\\u00e9\"}", "{\"token\":\"a\\u0000b\"}", "{\"token\":\"x\"" };
    for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(TOK(bad[i]) == -EINVAL, "accepted: %s", bad[i]);
    char *big = malloc(IMG_TOKEN_MAX + 32);
    int n = snprintf(big, 20, "{\"token\":\"");
    memset(big + n, 'a', IMG_TOKEN_MAX);
    strcpy(big + n + IMG_TOKEN_MAX, "\"}");
    ck_assert_int_eq(TOK(big), -EINVAL);
    free(big);
    char small[4];
    ck_assert_int_eq(img_auth_token_parse("{\"token\":\"abcd\"}", 16, small, sizeof small, &e), -EINVAL);
#undef TOK
}
END_TEST

START_TEST(base64)
{
    char out[64];
    unsigned char raw[64];
    const char *plain[] = { "", "f", "fo", "foo", "foob", "fooba", "foobar" };
    const char *enc[] = { "", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy" };
    for (unsigned i = 0; i < 7; i++) {
        ck_assert_int_eq(img_b64_encode(plain[i], strlen(plain[i]), out, sizeof out), 0);
        ck_assert_str_eq(out, enc[i]);
        int n = img_b64_decode(enc[i], strlen(enc[i]), raw, sizeof raw);
        ck_assert_int_eq(n, (int)strlen(plain[i]));
        ck_assert(!memcmp(raw, plain[i], (size_t)n));
    }
    const char *bad[] = { "Zg=", "Zg", "Z===", "=Zm9", "Zm=v", "Zg==Zm9v", "Zm9v!A==", "Zm9\x80" };
    for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(img_b64_decode(bad[i], strlen(bad[i]), raw, sizeof raw) == -EINVAL, "accepted %s", bad[i]);
    ck_assert_int_eq(img_b64_decode("Zm9vYmFy", 8, raw, 5), -ENAMETOOLONG);
    ck_assert_int_eq(img_b64_encode("foobar", 6, out, 8), -ENAMETOOLONG);
    ck_assert_int_eq(img_b64_encode("foobar", 6, out, 9), 0);
}
END_TEST

START_TEST(token_url_and_basic)
{
    struct img_challenge c = { .scheme = IMG_AUTH_BEARER };
    char url[256];
    strcpy(c.realm, "https://auth.example/token");
    strcpy(c.service, "registry example");
    ck_assert_int_eq(img_auth_token_url(&c, "repository:ns/app:pull", url, sizeof url), 0);
    ck_assert_str_eq(url, "https://auth.example/token?service=registry%20example&scope=repository%3Ans%2Fapp%3Apull");
    strcpy(c.realm, "https://a/t?x=1");
    c.service[0] = 0;
    strcpy(c.scope, "repository:a:pull&x");
    ck_assert_int_eq(img_auth_token_url(&c, "ignored", url, sizeof url), 0);
    ck_assert_str_eq(url, "https://a/t?x=1&scope=repository%3Aa%3Apull%26x");
    ck_assert_int_eq(img_auth_token_url(&c, NULL, url, 20), -ENAMETOOLONG);
    ck_assert_int_eq(img_auth_token_url(&c, NULL, url, 10), -ENAMETOOLONG);
    struct img_creds cr = { "Aladdin", "open sesame" };
    char b[64];
    ck_assert_int_eq(img_auth_basic(&cr, b, sizeof b), 0);
    ck_assert_str_eq(b, "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
    ck_assert_int_eq(img_auth_basic(&cr, b, 10), -ENAMETOOLONG);
}
END_TEST

START_TEST(small_headers)
{
    ck_assert_int_eq(img_retry_after("3"), 3);
    ck_assert_int_eq(img_retry_after(" 0 "), 0);
    ck_assert_int_eq(img_retry_after("99999999999999999999"), 3600);
    ck_assert_int_eq(img_retry_after(NULL), -1);
    ck_assert_int_eq(img_retry_after(""), -1);
    ck_assert_int_eq(img_retry_after("-1"), -1);
    ck_assert_int_eq(img_retry_after("1x"), -1);
    ck_assert_int_eq(img_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), -1);
    uint64_t s = 7;
    ck_assert_int_eq(img_content_range("bytes 100-199/200", &s), 0);
    ck_assert_uint_eq(s, 100);
    ck_assert_int_eq(img_content_range("BYTES 0-0/*", &s), 0);
    ck_assert_uint_eq(s, 0);
    const char *bad[] = { "", "bytes", "bytes -1/2", "bytes 1", "items 1-2/3", "bytes x-1/2",
                          "bytes 99999999999999999999999-1/2" };
    for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(img_content_range(bad[i], &s) == -EINVAL, "accepted %s", bad[i]);
    ck_assert_int_eq(img_content_range(NULL, &s), -EINVAL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("image_auth");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, challenge_bearer);
    tcase_add_test(tc, challenge_basic_and_several);
    tcase_add_test(tc, challenge_malformed);
    tcase_add_test(tc, creds);
    tcase_add_test(tc, auth_file);
    tcase_add_test(tc, auth_file_malformed);
    tcase_add_test(tc, token_answer);
    tcase_add_test(tc, base64);
    tcase_add_test(tc, token_url_and_basic);
    tcase_add_test(tc, small_headers);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
