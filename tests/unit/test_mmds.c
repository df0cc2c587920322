/* The metadata service (devices/net/mmds.c): the token flow, JSON and
 * IMDS answers, paths, methods, connection handling, put and merge-patch. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devices/net/mmds.h"

#define S 1000000000ull

static const char DOC[] =
    "{\"latest\": {\"meta-data\": {\"ami-id\": \"ami-1\", \"reservation-id\": \"r-1\","
    "                             \"tags\": {\"a\": \"b\"}},"
    "             \"user-data\": \"hello\\nworld\"},"
    " \"age\": 43, \"pi\": 12.12, \"phones\": [\"+40\", \"+44\"], \"member\": false,"
    " \"nothing\": null, \"a/b\": {\"c~d\": \"slash\"}, \"empty\": {}}";

/* Deterministic "random" bytes for the tests: a counter. */
static int fake_random(void *ctx, void *buf, size_t n)
{
    unsigned *c = ctx;
    uint8_t *b = buf;
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)(*c * 31 + i * 7);
    (*c)++;
    return 0;
}

static int failing_random(void *ctx, void *buf, size_t n)
{
    (void)ctx, (void)buf, (void)n;
    return -EIO;
}

static unsigned counter;

static struct mmds *make(enum mmds_version v, bool compat)
{
    struct mmds_config c = { .version = v, .imds_compat = compat, .random = fake_random,
                             .random_ctx = &counter };
    struct mmds *m;
    ck_assert_int_eq(mmds_create(&c, &m), 0);
    char why[200] = "";
    ck_assert_msg(mmds_put(m, DOC, strlen(DOC), why, sizeof why) == 0, "%s", why);
    return m;
}

/* A parsed response. */
struct resp {
    int status;
    char minor;
    bool close;
    char head[4096];
    char body[65536];
    size_t body_len;
};

/* Parse raw (must make a complete request or an error), answer it. */
static void ask_at(struct mmds *m, const char *raw, uint64_t now, struct resp *r)
{
    static struct http_parser p;
    http_parser_init(&p);
    size_t n = strlen(raw);
    size_t used = http_parser_feed(&p, raw, n);
    ck_assert_int_ne(http_parser_state(&p), HTTP_NEED_MORE);
    if (http_parser_state(&p) == HTTP_DONE)
        ck_assert_uint_eq(used, n);
    size_t cap = mmds_response_max(m);
    char *out = malloc(cap);
    size_t len = 0;
    memset(r, 0, sizeof *r);
    ck_assert_int_eq(mmds_respond(m, &p, now, out, cap, &len, &r->close), 0);
    ck_assert_uint_le(len, cap);
    char *end = memmem(out, len, "\r\n\r\n", 4);
    ck_assert_ptr_nonnull(end);
    size_t hl = (size_t)(end - out) + 2;
    ck_assert_uint_lt(hl, sizeof r->head);
    memcpy(r->head, out, hl);
    r->body_len = len - hl - 2;
    ck_assert_uint_lt(r->body_len, sizeof r->body);
    memcpy(r->body, end + 4, r->body_len);
    ck_assert_int_eq(sscanf(r->head, "HTTP/1.%c %d ", &r->minor, &r->status), 2);
    /* Content-Length is the body's */
    char *cl = strstr(r->head, "\r\nContent-Length: ");
    ck_assert_ptr_nonnull(cl);
    ck_assert_uint_eq(strtoul(cl + 18, NULL, 10), r->body_len);
    ck_assert_ptr_nonnull(strstr(r->head, "\r\nContent-Type: "));
    ck_assert(r->close == (strstr(r->head, "\r\nConnection: close\r\n") != NULL));
    free(out);
}

static void ask(struct mmds *m, const char *raw, struct resp *r)
{
    ask_at(m, raw, 1000 * S, r);
}

/* The value of a response header, or NULL (static buffer). */
static const char *rhead(const struct resp *r, const char *name)
{
    static char v[256];
    char pat[128];
    snprintf(pat, sizeof pat, "\r\n%s: ", name);
    const char *s = strstr(r->head, pat);
    if (!s)
        return NULL;
    s += strlen(pat);
    size_t n = strcspn(s, "\r");
    ck_assert_uint_lt(n, sizeof v);
    memcpy(v, s, n);
    v[n] = 0;
    return v;
}

static struct resp R;

/* GET path with optional extra header lines, V1 store; body as a string. */
static const char *get(struct mmds *m, const char *path, const char *hdrs, int *status)
{
    char raw[8192];
    snprintf(raw, sizeof raw, "GET %s HTTP/1.1\r\nHost: 169.254.169.254\r\n%s\r\n", path,
             hdrs ? hdrs : "");
    ask(m, raw, &R);
    *status = R.status;
    R.body[R.body_len] = 0;
    return R.body;
}

static const char *token_at(struct mmds *m, unsigned ttl, uint64_t now)
{
    static char tok[64];
    char raw[256];
    snprintf(raw, sizeof raw,
             "PUT /latest/api/token HTTP/1.1\r\nX-metadata-token-ttl-seconds: %u\r\n\r\n", ttl);
    ask_at(m, raw, now, &R);
    ck_assert_int_eq(R.status, 200);
    ck_assert_uint_eq(R.body_len, MMDS_TOKEN_LEN);
    memcpy(tok, R.body, R.body_len);
    tok[R.body_len] = 0;
    return tok;
}

START_TEST(token_flow_v2)
{
    struct mmds *m = make(MMDS_V2, false);
    ck_assert_int_eq(mmds_get_version(m), MMDS_V2);
    struct mmds_stats st;

    /* no token */
    ask(m, "GET /latest/meta-data/ami-id HTTP/1.1\r\n\r\n", &R);
    ck_assert_int_eq(R.status, 401);
    ck_assert_ptr_nonnull(strstr(R.body, "No MMDS token provided"));
    ck_assert_str_eq(rhead(&R, "Content-Type"), "text/plain");

    /* a token */
    ask(m, "PUT /latest/api/token HTTP/1.1\r\nHost: 169.254.169.254\r\n"
           "X-metadata-token-ttl-seconds: 60\r\n\r\n", &R);
    ck_assert_int_eq(R.status, 200);
    ck_assert_str_eq(rhead(&R, "Content-Type"), "text/plain");
    ck_assert_str_eq(rhead(&R, "X-metadata-token-ttl-seconds"), "60");
    ck_assert_uint_eq(R.body_len, MMDS_TOKEN_LEN);
    char tok[MMDS_TOKEN_LEN + 1];
    memcpy(tok, R.body, MMDS_TOKEN_LEN);
    tok[MMDS_TOKEN_LEN] = 0;
    ck_assert_uint_eq(strspn(tok, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"),
                      MMDS_TOKEN_LEN);
    ck_assert(!R.close);

    char h[256];
    snprintf(h, sizeof h, "X-metadata-token: %s\r\n", tok);
    int s;
    ck_assert_str_eq(get(m, "/latest/meta-data/ami-id", h, &s), "ami-1");
    ck_assert_int_eq(s, 200);
    snprintf(h, sizeof h, "x-AWS-ec2-METADATA-token:   %s  \r\n", tok);   /* the other name, any case */
    ck_assert_str_eq(get(m, "/latest/meta-data/ami-id", h, &s), "ami-1");

    /* wrong: one character changed, too short, too long, empty */
    char bad[MMDS_TOKEN_LEN + 2];
    memcpy(bad, tok, sizeof tok);
    bad[5] = bad[5] == 'A' ? 'B' : 'A';
    snprintf(h, sizeof h, "X-metadata-token: %s\r\n", bad);
    get(m, "/", h, &s);
    ck_assert_int_eq(s, 401);
    ck_assert_str_eq(R.body, "MMDS token not valid.");
    snprintf(h, sizeof h, "X-metadata-token: %.31s\r\n", tok);
    get(m, "/", h, &s);
    ck_assert_int_eq(s, 401);
    snprintf(h, sizeof h, "X-metadata-token: %sA\r\n", tok);
    get(m, "/", h, &s);
    ck_assert_int_eq(s, 401);
    get(m, "/", "X-metadata-token:\r\n", &s);
    ck_assert_int_eq(s, 401);
    /* a TTL header is not a token */
    get(m, "/", "X-metadata-token-ttl-seconds: 60\r\n", &s);
    ck_assert_int_eq(s, 401);

    /* expiry: valid until 60 s after issue, not at */
    snprintf(h, sizeof h, "X-metadata-token: %s\r\nConnection: close\r\n", tok);
    char raw[512];
    snprintf(raw, sizeof raw, "GET / HTTP/1.1\r\n%s\r\n", h);
    ask_at(m, raw, 1000 * S + 60 * S - 1, &R);
    ck_assert_int_eq(R.status, 200);
    ask_at(m, raw, 1000 * S + 60 * S, &R);
    ck_assert_int_eq(R.status, 401);
    ask_at(m, raw, 5000 * S, &R);
    ck_assert_int_eq(R.status, 401);

    mmds_get_stats(m, &st);
    ck_assert_uint_eq(st.tokens_issued, 1);
    ck_assert_uint_eq(st.rx_no_token, 2);
    ck_assert_uint_eq(st.rx_invalid_token, 6);
    ck_assert_uint_eq(st.requests, 12);

    /* tokens differ; forgetting them all */
    const char *t2 = token_at(m, 100, 2000 * S);
    ck_assert_str_ne(t2, tok);
    snprintf(raw, sizeof raw, "GET / HTTP/1.1\r\nX-metadata-token: %s\r\n\r\n", t2);
    ask_at(m, raw, 2000 * S, &R);
    ck_assert_int_eq(R.status, 200);
    mmds_clear_tokens(m);
    ask_at(m, raw, 2000 * S, &R);
    ck_assert_int_eq(R.status, 401);
    mmds_destroy(m);
}
END_TEST

START_TEST(token_put_errors)
{
    struct mmds *m = make(MMDS_V2, false);
    static const struct { const char *req; int status; const char *body; } cases[] = {
        { "PUT /latest/api/token HTTP/1.1\r\n\r\n", 400, "Token time to live value not found" },
        { "PUT /latest/api/token HTTP/1.1\r\nX-metadata-token-ttl-seconds: 0\r\n\r\n", 400,
          "between 1 and 21600" },
        { "PUT /latest/api/token HTTP/1.1\r\nX-metadata-token-ttl-seconds: 21601\r\n\r\n", 400,
          "between 1 and 21600" },
        { "PUT /latest/api/token HTTP/1.1\r\nX-metadata-token-ttl-seconds: 4294967296\r\n\r\n", 400,
          "Invalid value" },
        { "PUT /latest/api/token HTTP/1.1\r\nX-metadata-token-ttl-seconds: 99999999999\r\n\r\n", 400,
          "Invalid value" },
        { "PUT /latest/api/token HTTP/1.1\r\nX-metadata-token-ttl-seconds: abc\r\n\r\n", 400,
          "Invalid value" },
        { "PUT /latest/api/token HTTP/1.1\r\nX-metadata-token-ttl-seconds: -1\r\n\r\n", 400,
          "Invalid value" },
        { "PUT /latest/api/token HTTP/1.1\r\nX-metadata-token-ttl-seconds: +5\r\n\r\n", 400,
          "Invalid value" },
        { "PUT /latest/api/token HTTP/1.1\r\nX-metadata-token-ttl-seconds:\r\n\r\n", 400,
          "Invalid value" },
        { "PUT /latest/api/token HTTP/1.1\r\nX-metadata-token-ttl-seconds: 60\r\n"
          "X-Forwarded-For: 10.0.0.1\r\n\r\n", 400, "X-Forwarded-For" },
        { "PUT /latest/api/token HTTP/1.1\r\nx-forwarded-for:\r\n"
          "X-metadata-token-ttl-seconds: 60\r\n\r\n", 400, "X-Forwarded-For" },
        { "PUT /latest/api/token/ HTTP/1.1\r\nX-metadata-token-ttl-seconds: 60\r\n\r\n", 404,
          "Resource not found: /latest/api/token/." },
        { "PUT /latest/api HTTP/1.1\r\nX-metadata-token-ttl-seconds: 60\r\n\r\n", 404, "not found" },
        { "PUT / HTTP/1.1\r\nX-metadata-token-ttl-seconds: 60\r\n\r\n", 404, "not found" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ask(m, cases[i].req, &R);
        R.body[R.body_len] = 0;
        ck_assert_msg(R.status == cases[i].status, "case %zu: %d", i, R.status);
        ck_assert_msg(strstr(R.body, cases[i].body), "case %zu: %s", i, R.body);
        ck_assert_ptr_null(rhead(&R, "X-metadata-token-ttl-seconds"));
    }
    struct mmds_stats st;
    mmds_get_stats(m, &st);
    ck_assert_uint_eq(st.tokens_issued, 0);

    /* the edges of the TTL, the other header name, other path spellings */
    ask(m, "PUT /latest/api/token HTTP/1.1\r\nX-metadata-token-ttl-seconds: 1\r\n\r\n", &R);
    ck_assert_int_eq(R.status, 200);
    ask(m, "PUT /latest/api/token HTTP/1.1\r\nX-metadata-token-ttl-seconds: 021600\r\n\r\n", &R);
    ck_assert_int_eq(R.status, 200);
    ck_assert_str_eq(rhead(&R, "X-metadata-token-ttl-seconds"), "21600");
    ask(m, "PUT //latest//api///token HTTP/1.1\r\n"
           "x-aws-ec2-metadata-token-ttl-seconds: 5\r\n\r\n", &R);
    ck_assert_int_eq(R.status, 200);
    ck_assert_str_eq(rhead(&R, "X-aws-ec2-metadata-token-ttl-seconds"), "5");
    ask(m, "PUT http://169.254.169.254/latest/api/token HTTP/1.1\r\n"
           "X-metadata-token-ttl-seconds: 5\r\n\r\n", &R);
    ck_assert_int_eq(R.status, 200);
    /* a GET carrying X-Forwarded-For is answered (Firecracker refuses only the PUT) */
    const char *tok = token_at(m, 60, 1000 * S);
    char h[256];
    snprintf(h, sizeof h, "X-metadata-token: %s\r\nX-Forwarded-For: 1.2.3.4\r\n", tok);
    int s;
    ck_assert_str_eq(get(m, "/latest/meta-data/ami-id", h, &s), "ami-1");
    mmds_destroy(m);

    /* no randomness: 500, no token */
    struct mmds_config c = { .random = failing_random };
    ck_assert_int_eq(mmds_create(&c, &m), 0);
    ask(m, "PUT /latest/api/token HTTP/1.1\r\nX-metadata-token-ttl-seconds: 60\r\n\r\n", &R);
    ck_assert_int_eq(R.status, 500);
    mmds_get_stats(m, &st);
    ck_assert_uint_eq(st.tokens_issued, 0);
    mmds_destroy(m);
}
END_TEST

START_TEST(token_table_is_bounded)
{
    struct mmds_config c = { .max_tokens = 3, .random = fake_random, .random_ctx = &counter };
    struct mmds *m;
    ck_assert_int_eq(mmds_create(&c, &m), 0);
    char t[4][MMDS_TOKEN_LEN + 1];
    static const unsigned ttl[4] = { 100, 50, 200, 300 };
    for (int i = 0; i < 4; i++)
        strcpy(t[i], token_at(m, ttl[i], 10 * S));
    struct mmds_stats st;
    mmds_get_stats(m, &st);
    ck_assert_uint_eq(st.tokens_issued, 4);
    ck_assert_uint_eq(st.tokens_evicted, 1);
    /* the one closest to expiry (ttl 50) went */
    for (int i = 0; i < 4; i++) {
        char raw[256];
        snprintf(raw, sizeof raw, "GET / HTTP/1.1\r\nX-metadata-token: %s\r\n\r\n", t[i]);
        ask_at(m, raw, 11 * S, &R);
        ck_assert_int_eq(R.status, i == 1 ? 401 : 200);
    }
    /* expired slots are reused before a live one is dropped */
    strcpy(t[0], token_at(m, 10, 150 * S));          /* t[0] (ttl 100) had expired */
    mmds_get_stats(m, &st);
    ck_assert_uint_eq(st.tokens_evicted, 1);
    /* a default-configured store takes real randomness */
    mmds_destroy(m);
    ck_assert_int_eq(mmds_create(NULL, &m), 0);
    char a[MMDS_TOKEN_LEN + 1];
    strcpy(a, token_at(m, 60, 1));
    ck_assert_str_ne(a, token_at(m, 60, 1));
    mmds_destroy(m);
}
END_TEST

START_TEST(version_1_needs_no_token)
{
    struct mmds *m = make(MMDS_V1, false);
    ck_assert_int_eq(mmds_get_version(m), MMDS_V1);
    int s;
    ck_assert_str_eq(get(m, "/latest/meta-data/ami-id", NULL, &s), "ami-1");
    ck_assert_int_eq(s, 200);
    ck_assert_str_eq(get(m, "/latest/meta-data/ami-id", "X-metadata-token: nope\r\n", &s), "ami-1");
    ck_assert_int_eq(s, 200);
    const char *tok = token_at(m, 60, 1000 * S);     /* the session flow works too */
    char h[128];
    snprintf(h, sizeof h, "X-metadata-token: %s\r\n", tok);
    ck_assert_str_eq(get(m, "/latest/meta-data/ami-id", h, &s), "ami-1");
    struct mmds_stats st;
    mmds_get_stats(m, &st);
    ck_assert_uint_eq(st.rx_no_token, 1);
    ck_assert_uint_eq(st.rx_invalid_token, 1);
    /* switched to V2 at run time */
    mmds_set_version(m, MMDS_V2);
    get(m, "/latest/meta-data/ami-id", NULL, &s);
    ck_assert_int_eq(s, 401);
    ck_assert_str_eq(get(m, "/latest/meta-data/ami-id", h, &s), "ami-1");
    mmds_destroy(m);
}
END_TEST

#define JSON "Accept: application/json\r\n"

START_TEST(imds_and_json_answers)
{
    struct mmds *m = make(MMDS_V1, false);
    static const struct { const char *path, *hdr; int status; const char *body, *ctype; } cases[] = {
        { "/", NULL, 200, "a/b/\nage\nempty/\nlatest/\nmember\nnothing\nphones\npi", "text/plain" },
        { "/latest", NULL, 200, "meta-data/\nuser-data", "text/plain" },
        { "/latest/", NULL, 200, "meta-data/\nuser-data", "text/plain" },
        { "/latest/meta-data/", NULL, 200, "ami-id\nreservation-id\ntags/", "text/plain" },
        { "/latest/meta-data/ami-id", NULL, 200, "ami-1", "text/plain" },
        { "/latest/user-data", NULL, 200, "hello\nworld", "text/plain" },
        { "/empty", NULL, 200, "", "text/plain" },
        { "/phones/0", NULL, 200, "+40", "text/plain" },
        { "/phones/1/", NULL, 200, "+44", "text/plain" },
        { "/age", NULL, 501, "Cannot retrieve value. The value has an unsupported type.", "text/plain" },
        { "/pi", NULL, 501, NULL, "text/plain" },
        { "/phones", NULL, 501, NULL, "text/plain" },
        { "/member", NULL, 501, NULL, "text/plain" },
        { "/nothing", NULL, 501, NULL, "text/plain" },
        { "/", JSON, 200, "{\"a/b\":{\"c~d\":\"slash\"},\"age\":43,\"empty\":{},\"latest\":{\"meta-data\":"
                          "{\"ami-id\":\"ami-1\",\"reservation-id\":\"r-1\",\"tags\":{\"a\":\"b\"}},"
                          "\"user-data\":\"hello\\nworld\"},\"member\":false,\"nothing\":null,"
                          "\"phones\":[\"+40\",\"+44\"],\"pi\":12.12}", "application/json" },
        { "/latest/meta-data", JSON, 200,
          "{\"ami-id\":\"ami-1\",\"reservation-id\":\"r-1\",\"tags\":{\"a\":\"b\"}}", "application/json" },
        { "/latest/meta-data/ami-id", JSON, 200, "\"ami-1\"", "application/json" },
        { "/latest/user-data", JSON, 200, "\"hello\\nworld\"", "application/json" },
        { "/age", JSON, 200, "43", "application/json" },
        { "/pi", JSON, 200, "12.12", "application/json" },
        { "/phones", JSON, 200, "[\"+40\",\"+44\"]", "application/json" },
        { "/phones/", JSON, 200, "[\"+40\",\"+44\"]", "application/json" },
        { "/phones/1", JSON, 200, "\"+44\"", "application/json" },
        { "/member", JSON, 200, "false", "application/json" },
        { "/nothing", JSON, 200, "null", "application/json" },
        { "/empty", JSON, 200, "{}", "application/json" },
        /* paths */
        { "//latest///meta-data//ami-id", NULL, 200, "ami-1", NULL },
        { "http://169.254.169.254/latest/meta-data/ami-id", NULL, 200, "ami-1", NULL },
        { "http://169.254.169.254:80//latest/user-data", NULL, 200, "hello\nworld", NULL },
        { "/a~1b/c~0d", NULL, 200, "slash", NULL },
        { "/a~1b", NULL, 200, "c~d", NULL },
        { "/a/b", NULL, 404, "Resource not found: /a/b.", NULL },
        { "/a~2b", NULL, 404, NULL, NULL },
        { "/a~", NULL, 404, NULL, NULL },
        { "/nope", NULL, 404, "Resource not found: /nope.", "text/plain" },
        { "/nope", JSON, 404, "Resource not found: /nope.", "text/plain" },
        { "/latest/meta-data/ami-id/x", NULL, 404, NULL, NULL },
        { "/latest/meta-data/ami-id//", NULL, 200, "ami-1", NULL },
        { "/latest/meta-data/ami-id?x=1", NULL, 404, NULL, NULL },
        { "/LATEST", NULL, 404, NULL, NULL },
        { "/phones/2", NULL, 404, NULL, NULL },
        { "/phones/00", NULL, 404, NULL, NULL },
        { "/phones/-1", NULL, 404, NULL, NULL },
        { "/phones/+1", NULL, 404, NULL, NULL },
        { "/phones/99999999999999999999", NULL, 404, NULL, NULL },
        { "/phones/x", NULL, 404, NULL, NULL },
        { "/age/0", NULL, 404, NULL, NULL },
        { "http://169.254.169.254", NULL, 400, "Invalid URI.", NULL },
        { "latest", NULL, 400, "Invalid URI.", NULL },
        { "*", NULL, 400, "Invalid URI.", NULL },
        { "https://169.254.169.254/latest", NULL, 400, "Invalid URI.", NULL },
        /* Accept */
        { "/age", "Accept: */*\r\n", 501, NULL, NULL },
        { "/age", "Accept: text/plain\r\n", 501, NULL, NULL },
        { "/age", "Accept: Application/JSON; charset=utf-8\r\n", 200, "43", "application/json" },
        { "/age", "Accept: text/html, application/json;q=0.9\r\n", 200, "43", NULL },
        { "/age", "Accept: application/jsonx\r\n", 501, NULL, NULL },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int s;
        const char *b = get(m, cases[i].path, cases[i].hdr, &s);
        ck_assert_msg(s == cases[i].status, "%s: %d", cases[i].path, s);
        if (cases[i].body)
            ck_assert_msg(strcmp(b, cases[i].body) == 0, "%s: \"%s\"", cases[i].path, b);
        if (cases[i].ctype)
            ck_assert_str_eq(rhead(&R, "Content-Type"), cases[i].ctype);
    }
    mmds_destroy(m);

    /* imds_compat: IMDS text whatever Accept says */
    m = make(MMDS_V1, true);
    int s;
    ck_assert_str_eq(get(m, "/latest/meta-data/ami-id", JSON, &s), "ami-1");
    ck_assert_str_eq(rhead(&R, "Content-Type"), "text/plain");
    get(m, "/age", JSON, &s);
    ck_assert_int_eq(s, 501);
    mmds_destroy(m);
}
END_TEST

START_TEST(json_numbers_and_strings)
{
    struct mmds *m = make(MMDS_V1, false);
    const char *doc = "{\"r\": [0.1, 1e-7, 2e300, 1.0, -24, 123456789.0, -0.5, 1.5e-300, 0.30000000000000004],"
                      " \"s\": \"caf\\u00e9 \\\"q\\\" \\\\ \\t/\", \"k\\u00e9y\": {\"z\": 1, \"a\": 2}}";
    char why[200];
    ck_assert_msg(mmds_put(m, doc, strlen(doc), why, sizeof why) == 0, "%s", why);
    int s;
    ck_assert_str_eq(get(m, "/r", JSON, &s),
                     "[0.1,1e-7,2e300,1.0,-24,123456789.0,-0.5,1.5e-300,0.30000000000000004]");
    ck_assert_str_eq(get(m, "/s", JSON, &s), "\"caf\xc3\xa9 \\\"q\\\" \\\\ \\t/\"");
    ck_assert_str_eq(get(m, "/s", NULL, &s), "caf\xc3\xa9 \"q\" \\ \t/");
    ck_assert_str_eq(get(m, "/", NULL, &s), "k\xc3\xa9y/\nr\ns");
    /* the target is ASCII and not decoded (as Firecracker): such a key is
     * reached through its parent only */
    get(m, "/k\xc3\xa9y", NULL, &s);
    ck_assert_int_eq(s, 400);
    get(m, "/k%C3%A9y", NULL, &s);
    ck_assert_int_eq(s, 404);
    char *all = mmds_get(m);
    ck_assert_str_eq(all, "{\"k\xc3\xa9y\":{\"a\":2,\"z\":1},\"r\":[0.1,1e-7,2e300,1.0,-24,"
                          "123456789.0,-0.5,1.5e-300,0.30000000000000004],"
                          "\"s\":\"caf\xc3\xa9 \\\"q\\\" \\\\ \\t/\"}");
    free(all);
    mmds_destroy(m);
}
END_TEST

START_TEST(methods_and_bodies)
{
    struct mmds *m = make(MMDS_V1, false);
    static const char *const methods[] = { "POST", "DELETE", "HEAD", "PATCH", "OPTIONS", "get" };
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
        char raw[128];
        snprintf(raw, sizeof raw, "%s /latest HTTP/1.1\r\n\r\n", methods[i]);
        ask(m, raw, &R);
        ck_assert_int_eq(R.status, 405);
        ck_assert_str_eq(rhead(&R, "Allow"), "GET, PUT");
        R.body[R.body_len] = 0;
        ck_assert_str_eq(R.body, "Not allowed HTTP method.");
        ck_assert(!R.close);
    }
    ask(m, "GET /latest HTTP/1.1\r\nContent-Length: 2\r\n\r\nab", &R);
    ck_assert_int_eq(R.status, 400);
    /* a token PUT may carry a body; it is ignored */
    ask(m, "PUT /latest/api/token HTTP/1.1\r\nX-metadata-token-ttl-seconds: 9\r\n"
           "Content-Length: 3\r\n\r\nabc", &R);
    ck_assert_int_eq(R.status, 200);
    mmds_destroy(m);
}
END_TEST

START_TEST(parser_errors_close_the_connection)
{
    struct mmds *m = make(MMDS_V2, false);
    static const struct { const char *raw; int status; const char *reason; } cases[] = {
        { "GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 501, "Not Implemented" },
        { "GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n", 400, "Bad Request" },
        { "GET / HTTP/2.0\r\n", 505, "HTTP Version Not Supported" },
        { "PUT / HTTP/1.1\r\nContent-Length: 5000\r\n\r\n", 413, "Content Too Large" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ask(m, cases[i].raw, &R);
        ck_assert_int_eq(R.status, cases[i].status);
        ck_assert(R.close);
        char want[128];
        snprintf(want, sizeof want, "HTTP/1.1 %d %s\r\n", cases[i].status, cases[i].reason);
        ck_assert_msg(strncmp(R.head, want, strlen(want)) == 0, "%s", R.head);
    }
    /* 414 and 431 */
    char *big = malloc(16384);
    strcpy(big, "GET /");
    memset(big + 5, 'a', HTTP_MAX_TARGET + 10);
    strcpy(big + 5 + HTTP_MAX_TARGET + 10, " HTTP/1.1\r\n\r\n");
    ask(m, big, &R);
    ck_assert_int_eq(R.status, 414);
    ck_assert(R.close);
    int k = sprintf(big, "GET / HTTP/1.1\r\n");
    for (unsigned i = 0; i <= HTTP_MAX_HEADERS; i++)
        k += sprintf(big + k, "H%u: v\r\n", i);
    strcpy(big + k, "\r\n");
    ask(m, big, &R);
    ck_assert_int_eq(R.status, 431);
    ck_assert(R.close);
    free(big);
    struct mmds_stats st;
    mmds_get_stats(m, &st);
    ck_assert_uint_eq(st.bad_requests, 6);
    ck_assert_uint_eq(st.requests, 6);
    mmds_destroy(m);
}
END_TEST

START_TEST(connection_handling)
{
    struct mmds *m = make(MMDS_V1, false);
    ask(m, "GET /latest/meta-data/ami-id HTTP/1.1\r\n\r\n", &R);
    ck_assert_int_eq(R.status, 200);
    ck_assert_int_eq(R.minor, '1');
    ck_assert(!R.close);
    ask(m, "GET /latest/meta-data/ami-id HTTP/1.1\r\nConnection: close\r\n\r\n", &R);
    ck_assert(R.close);
    ask(m, "GET /latest/meta-data/ami-id HTTP/1.0\r\n\r\n", &R);
    ck_assert_int_eq(R.minor, '0');
    ck_assert(R.close);
    ask(m, "GET /latest/meta-data/ami-id HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", &R);
    ck_assert(R.close);                 /* HTTP/1.0: always closed */
    ask(m, "GET /nope HTTP/1.1\r\n\r\n", &R);
    ck_assert_int_eq(R.status, 404);
    ck_assert(!R.close);                /* an answered error keeps the framing */

    /* buffer too small, request incomplete */
    struct http_parser *p = malloc(sizeof *p);
    http_parser_init(p);
    const char *raw = "GET /latest/meta-data/ami-id HTTP/1.1\r\n\r\n";
    char out[512];
    size_t len = 12345;
    bool cl = true;
    ck_assert_int_eq(mmds_respond(m, p, 0, out, sizeof out, &len, &cl), -EINVAL);
    http_parser_feed(p, raw, strlen(raw));
    ck_assert_int_eq(mmds_respond(m, p, 0, out, 20, &len, &cl), -ENOSPC);
    ck_assert_uint_eq(len, 12345);
    ck_assert_int_eq(mmds_respond(m, p, 0, out, sizeof out, &len, &cl), 0);
    ck_assert(!cl);
    static const char want[] = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                               "Content-Length: 5\r\n\r\nami-1";
    ck_assert_uint_eq(len, sizeof want - 1);
    ck_assert(memcmp(out, want, len) == 0);
    ck_assert_int_eq(mmds_respond(m, p, 0, out, len, &len, NULL), 0);   /* exactly enough */
    free(p);
    mmds_destroy(m);
}
END_TEST

START_TEST(put_replaces_within_limits)
{
    struct mmds_config c = { .version = MMDS_V1, .data_limit = 40 };
    struct mmds *m;
    ck_assert_int_eq(mmds_create(&c, &m), 0);
    char *s = mmds_get(m);
    ck_assert_str_eq(s, "{}");
    free(s);
    int st;
    ck_assert_str_eq(get(m, "/", NULL, &st), "");
    ck_assert_int_eq(st, 200);
    ck_assert_str_eq(get(m, "/", JSON, &st), "{}");

    char why[200];
    static const struct { const char *in; int err; const char *why; } bad[] = {
        { "", -EINVAL, "JSON" },
        { "{\"a\":", -EINVAL, "JSON" },
        { "[1,2]", -EINVAL, "must be a JSON object" },
        { "\"s\"", -EINVAL, "JSON" },
        { "{\"a\": 1, \"a\": 2}", -EINVAL, "duplicate" },
        { "{\"a\": \"x\\u0000y\"}", -EINVAL, "JSON" },
        { "{\"a\": 99999999999999999999}", -EINVAL, "JSON" },
        { "{\"aaaaaaaaaa\": \"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\"}", -E2BIG, "above the limit of 40" },
    };
    const char *good = "{\"k\": \"v\"}";
    ck_assert_int_eq(mmds_put(m, good, strlen(good), why, sizeof why), 0);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = 0;
        ck_assert_int_eq(mmds_put(m, bad[i].in, strlen(bad[i].in), why, sizeof why), bad[i].err);
        ck_assert_msg(strstr(why, bad[i].why), "%s: %s", bad[i].in, why);
        s = mmds_get(m);
        ck_assert_str_eq(s, "{\"k\":\"v\"}");                /* unchanged */
        free(s);
        ck_assert_int_eq(mmds_patch(m, bad[i].in, strlen(bad[i].in), NULL, 0), bad[i].err);
    }
    /* exactly at the limit: 40 bytes of compact JSON */
    const char *at = "{\"aaaaaaaaaa\": \"bbbbbbbbbbbbbbbbbbbbbbb\"}";
    ck_assert_int_eq(mmds_put(m, at, strlen(at), why, sizeof why), 0);
    s = mmds_get(m);
    ck_assert_uint_eq(strlen(s), 40);
    free(s);
    /* the response buffer bound holds for the largest answer */
    ck_assert_uint_ge(mmds_response_max(m), 40 + HTTP_MAX_TARGET);
    mmds_destroy(m);
}
END_TEST

static void patch_case(const char *target, const char *patch, const char *want)
{
    struct mmds *m;
    ck_assert_int_eq(mmds_create(NULL, &m), 0);
    char why[200] = "";
    ck_assert_msg(mmds_put(m, target, strlen(target), why, sizeof why) == 0, "%s", why);
    ck_assert_msg(mmds_patch(m, patch, strlen(patch), why, sizeof why) == 0, "%s", why);
    char *s = mmds_get(m);
    ck_assert_msg(strcmp(s, want) == 0, "%s + %s = %s, want %s", target, patch, s, want);
    free(s);
    mmds_destroy(m);
}

START_TEST(merge_patch_rfc7396)
{
    /* RFC 7396, section 3's example */
    patch_case("{\"title\":\"Goodbye!\",\"author\":{\"givenName\":\"John\",\"familyName\":\"Doe\"},"
               "\"tags\":[\"example\",\"sample\"],\"content\":\"This will be unchanged\"}",
               "{\"title\":\"Hello!\",\"phoneNumber\":\"+01-123-456-7890\","
               "\"author\":{\"familyName\":null},\"tags\":[\"example\"]}",
               "{\"author\":{\"givenName\":\"John\"},\"content\":\"This will be unchanged\","
               "\"phoneNumber\":\"+01-123-456-7890\",\"tags\":[\"example\"],\"title\":\"Hello!\"}");
    /* Appendix A's cases whose patch is an object */
    patch_case("{\"a\":\"b\"}", "{\"a\":\"c\"}", "{\"a\":\"c\"}");
    patch_case("{\"a\":\"b\"}", "{\"b\":\"c\"}", "{\"a\":\"b\",\"b\":\"c\"}");
    patch_case("{\"a\":\"b\"}", "{\"a\":null}", "{}");
    patch_case("{\"a\":\"b\",\"b\":\"c\"}", "{\"a\":null}", "{\"b\":\"c\"}");
    patch_case("{\"a\":[\"b\"]}", "{\"a\":\"c\"}", "{\"a\":\"c\"}");
    patch_case("{\"a\":\"c\"}", "{\"a\":[\"b\"]}", "{\"a\":[\"b\"]}");
    patch_case("{\"a\":{\"b\":\"c\"}}", "{\"a\":{\"b\":\"d\",\"c\":null}}", "{\"a\":{\"b\":\"d\"}}");
    patch_case("{\"a\":[{\"b\":\"c\"}]}", "{\"a\":[1]}", "{\"a\":[1]}");
    patch_case("{\"e\":null}", "{\"a\":1}", "{\"a\":1,\"e\":null}");
    patch_case("{\"a\":\"foo\"}", "{\"a\":{\"bb\":{\"ccc\":null}}}", "{\"a\":{\"bb\":{}}}");
    patch_case("{}", "{\"a\":{\"bb\":{\"ccc\":null}}}", "{\"a\":{\"bb\":{}}}");
    patch_case("{\"a\":{\"x\":1}}", "{\"a\":{\"y\":[null]}}", "{\"a\":{\"x\":1,\"y\":[null]}}");
    patch_case("{\"a\":1}", "{}", "{\"a\":1}");

    /* a patch that would pass the limit changes nothing; answers see patches */
    struct mmds_config c = { .version = MMDS_V1, .data_limit = 30 };
    struct mmds *m;
    ck_assert_int_eq(mmds_create(&c, &m), 0);
    char why[200];
    ck_assert_int_eq(mmds_put(m, "{\"a\":\"1\"}", 9, why, sizeof why), 0);
    const char *p = "{\"b\":\"0123456789012345678901234\"}";
    ck_assert_int_eq(mmds_patch(m, p, strlen(p), why, sizeof why), -E2BIG);
    char *s = mmds_get(m);
    ck_assert_str_eq(s, "{\"a\":\"1\"}");
    free(s);
    p = "{\"b\":{\"c\":\"x\"},\"a\":null}";
    ck_assert_int_eq(mmds_patch(m, p, strlen(p), why, sizeof why), 0);
    int st;
    ck_assert_str_eq(get(m, "/", NULL, &st), "b/");
    ck_assert_str_eq(get(m, "/b/c", NULL, &st), "x");
    get(m, "/a", NULL, &st);
    ck_assert_int_eq(st, 404);
    p = "[]";
    ck_assert_int_eq(mmds_patch(m, p, strlen(p), why, sizeof why), -EINVAL);
    mmds_destroy(m);
}
END_TEST

START_TEST(stores_are_independent)
{
    struct mmds *a = make(MMDS_V2, false), *b;
    ck_assert_int_eq(mmds_create(NULL, &b), 0);
    const char *doc = "{\"who\": \"b\"}";
    ck_assert_int_eq(mmds_put(b, doc, strlen(doc), NULL, 0), 0);
    char ta[MMDS_TOKEN_LEN + 1];
    strcpy(ta, token_at(a, 60, 1000 * S));
    char h[128];
    snprintf(h, sizeof h, "X-metadata-token: %s\r\n", ta);
    int s;
    get(b, "/who", h, &s);
    ck_assert_int_eq(s, 401);               /* a's token means nothing to b */
    get(a, "/who", h, &s);
    ck_assert_int_eq(s, 404);               /* nor b's document to a */
    const char *tb = token_at(b, 60, 1000 * S);
    snprintf(h, sizeof h, "X-metadata-token: %s\r\n", tb);
    ck_assert_str_eq(get(b, "/who", h, &s), "b");
    mmds_destroy(a);
    mmds_destroy(b);
    mmds_destroy(NULL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("mmds");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, token_flow_v2);
    tcase_add_test(tc, token_put_errors);
    tcase_add_test(tc, token_table_is_bounded);
    tcase_add_test(tc, version_1_needs_no_token);
    tcase_add_test(tc, imds_and_json_answers);
    tcase_add_test(tc, json_numbers_and_strings);
    tcase_add_test(tc, methods_and_bodies);
    tcase_add_test(tc, parser_errors_close_the_connection);
    tcase_add_test(tc, connection_handling);
    tcase_add_test(tc, put_replaces_within_limits);
    tcase_add_test(tc, merge_patch_rfc7396);
    tcase_add_test(tc, stores_are_independent);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
