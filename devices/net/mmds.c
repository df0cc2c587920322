/* The metadata service: store and responder (see mmds.h). */
#include "devices/net/mmds.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#define NS_PER_S 1000000000ull
#define TOKEN_RAW 24u                   /* random bytes per token */

struct token {
    char text[MMDS_TOKEN_LEN + 1];
    uint64_t expiry_ns;                 /* 0: free slot */
};

struct mmds {
    pthread_mutex_t lock;
    json_t *doc;                        /* always an object */
    struct mmds_config cfg;
    struct token *tokens;               /* cfg.max_tokens slots */
    struct mmds_stats stats;
};

/* ---- a growing byte buffer ---- */

struct sb {
    char *p;
    size_t len, cap;
    size_t limit;                       /* fail past this many bytes */
    bool err;
};

static void sb_add(struct sb *b, const char *s, size_t n)
{
    if (b->err)
        return;
    if (n > b->limit - b->len) {
        b->err = true;
        return;
    }
    if (b->len + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->len + n + 1)
            c *= 2;
        char *q = realloc(b->p, c);
        if (!q) {
            b->err = true;
            return;
        }
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_str(struct sb *b, const char *s)
{
    sb_add(b, s, strlen(s));
}

__attribute__((format(printf, 2, 3)))
static void sb_fmt(struct sb *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp)
        b->err = true;
    else
        sb_add(b, tmp, (size_t)n);
}

/* ---- JSON out: compact, keys sorted, reals in the fewest digits that
 * read back the same ---- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The keys of object o, sorted bytewise; malloc'd (NULL if empty or on
 * failure: *n tells). */
static const char **sorted_keys(json_t *o, size_t *n, bool *oom)
{
    *n = json_object_size(o);
    *oom = false;
    if (!*n)
        return NULL;
    const char **k = malloc(*n * sizeof *k);
    if (!k) {
        *oom = true;
        return NULL;
    }
    size_t i = 0;
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        (void)v;
        k[i++] = key;
    }
    qsort(k, *n, sizeof *k, cmp_str);
    return k;
}

static void dump_string(struct sb *b, const char *s, size_t len)
{
    json_t *j = json_stringn_nocheck(s, len);
    char *t = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    if (t)
        sb_str(b, t);
    else
        b->err = true;
    free(t);
    json_decref(j);
}

static void dump_real(struct sb *b, double d)
{
    char t[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(t, sizeof t, "%.*g", prec, d);
        if (strtod(t, NULL) == d)
            break;
    }
    /* "1e+300" -> "1e300", "1e-07" -> "1e-7"; "1" -> "1.0" (a real stays a real) */
    char out[48];
    size_t o = 0;
    for (const char *s = t; *s; s++) {
        out[o++] = *s;
        if (*s == 'e') {
            if (s[1] == '+')
                s++;
            else if (s[1] == '-')
                out[o++] = *++s;
            while (s[1] == '0' && s[2])
                s++;
        }
    }
    out[o] = 0;
    if (!strpbrk(out, ".e"))
        strcat(out, ".0");
    sb_str(b, out);
}

static void dump(struct sb *b, json_t *j)
{
    if (b->err)
        return;
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        size_t n;
        bool oom;
        const char **k = sorted_keys(j, &n, &oom);
        if (oom) {
            b->err = true;
            return;
        }
        sb_add(b, "{", 1);
        for (size_t i = 0; i < n && !b->err; i++) {
            if (i)
                sb_add(b, ",", 1);
            dump_string(b, k[i], strlen(k[i]));
            sb_add(b, ":", 1);
            dump(b, json_object_get(j, k[i]));
        }
        sb_add(b, "}", 1);
        free(k);
        return;
    }
    case JSON_ARRAY:
        sb_add(b, "[", 1);
        for (size_t i = 0; i < json_array_size(j) && !b->err; i++) {
            if (i)
                sb_add(b, ",", 1);
            dump(b, json_array_get(j, i));
        }
        sb_add(b, "]", 1);
        return;
    case JSON_STRING:
        dump_string(b, json_string_value(j), json_string_length(j));
        return;
    case JSON_INTEGER:
        sb_fmt(b, "%" JSON_INTEGER_FORMAT, json_integer_value(j));
        return;
    case JSON_REAL:
        dump_real(b, json_real_value(j));
        return;
    case JSON_TRUE:
        sb_str(b, "true");
        return;
    case JSON_FALSE:
        sb_str(b, "false");
        return;
    case JSON_NULL:
        sb_str(b, "null");
        return;
    }
}

/* ---- the store ---- */

static int get_random(void *ctx, void *buf, size_t n)
{
    (void)ctx;
    uint8_t *p = buf;
    while (n) {
        ssize_t r = getrandom(p, n, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

int mmds_create(const struct mmds_config *cfg, struct mmds **out)
{
    *out = NULL;
    struct mmds *m = calloc(1, sizeof *m);
    if (!m)
        return -ENOMEM;
    if (cfg)
        m->cfg = *cfg;
    if (!m->cfg.data_limit)
        m->cfg.data_limit = MMDS_DEFAULT_DATA_LIMIT;
    if (!m->cfg.max_tokens)
        m->cfg.max_tokens = MMDS_DEFAULT_MAX_TOKENS;
    if (!m->cfg.random)
        m->cfg.random = get_random;
    if (m->cfg.version != MMDS_V1)
        m->cfg.version = MMDS_V2;
    m->tokens = calloc(m->cfg.max_tokens, sizeof *m->tokens);
    m->doc = json_object();
    if (!m->tokens || !m->doc || pthread_mutex_init(&m->lock, NULL)) {
        json_decref(m->doc);
        free(m->tokens);
        free(m);
        return -ENOMEM;
    }
    *out = m;
    return 0;
}

void mmds_destroy(struct mmds *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->lock);
    json_decref(m->doc);
    free(m->tokens);
    free(m);
}

__attribute__((format(printf, 4, 5)))
static int why_fail(int err, char *why, size_t whylen, const char *fmt, ...)
{
    if (why && whylen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whylen, fmt, ap);
        va_end(ap);
    }
    return err;
}

static int load_object(const char *json, size_t len, json_t **out, char *why, size_t whylen)
{
    json_error_t e;
    *out = json_loadb(json, len, JSON_REJECT_DUPLICATES, &e);
    if (!*out)
        return why_fail(-EINVAL, why, whylen, "JSON: %s (line %d, column %d)", e.text, e.line,
                        e.column);
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return why_fail(-EINVAL, why, whylen, "the metadata must be a JSON object");
    }
    return 0;
}

/* Is doc within the limit? 0, -E2BIG or -ENOMEM. */
static int check_size(const struct mmds *m, json_t *doc, char *why, size_t whylen)
{
    struct sb b = { .limit = m->cfg.data_limit };
    dump(&b, doc);
    int r = 0;
    if (b.err) {
        /* the builder stops at the limit; tell it apart from a failed malloc */
        struct sb c = { .limit = SIZE_MAX };
        dump(&c, doc);
        if (c.err)
            r = why_fail(-ENOMEM, why, whylen, "out of memory");
        else
            r = why_fail(-E2BIG, why, whylen, "%zu bytes of JSON, above the limit of %zu",
                         c.len, m->cfg.data_limit);
        free(c.p);
    }
    free(b.p);
    return r;
}

/* RFC 7396 MergePatch(target, patch): takes target's reference, returns
 * the result's (NULL on allocation failure). */
static json_t *merge(json_t *target, json_t *patch)
{
    if (!json_is_object(patch)) {
        json_decref(target);
        return json_deep_copy(patch);
    }
    if (!json_is_object(target)) {
        json_decref(target);
        target = json_object();
        if (!target)
            return NULL;
    }
    const char *key;
    json_t *v;
    json_object_foreach(patch, key, v) {
        if (json_is_null(v)) {
            json_object_del(target, key);
            continue;
        }
        json_t *cur = json_object_get(target, key);
        json_incref(cur);
        json_t *n = merge(cur, v);
        if (!n || json_object_set_new(target, key, n)) {
            json_decref(target);
            return NULL;
        }
    }
    return target;
}

/* json (an object) as the new document (patch: merged into a copy of the
 * current one), if within the limit; else the document stays as it was. */
static int update(struct mmds *m, const char *json, size_t len, bool patch, char *why, size_t whylen)
{
    json_t *in;
    int r = load_object(json, len, &in, why, whylen);
    if (r)
        return r;
    pthread_mutex_lock(&m->lock);
    json_t *doc;
    if (patch) {
        json_t *copy = json_deep_copy(m->doc);
        doc = copy ? merge(copy, in) : NULL;
    } else {
        doc = json_incref(in);
    }
    if (!doc)
        r = why_fail(-ENOMEM, why, whylen, "out of memory");
    else
        r = check_size(m, doc, why, whylen);
    if (!r) {
        json_decref(m->doc);
        m->doc = doc;
        doc = NULL;
    }
    pthread_mutex_unlock(&m->lock);
    json_decref(doc);
    json_decref(in);
    return r;
}

int mmds_put(struct mmds *m, const char *json, size_t len, char *why, size_t whylen)
{
    return update(m, json, len, false, why, whylen);
}

int mmds_patch(struct mmds *m, const char *json, size_t len, char *why, size_t whylen)
{
    return update(m, json, len, true, why, whylen);
}

char *mmds_get(struct mmds *m)
{
    struct sb b = { .limit = SIZE_MAX };
    pthread_mutex_lock(&m->lock);
    dump(&b, m->doc);
    pthread_mutex_unlock(&m->lock);
    if (b.err || !b.p) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

void mmds_set_version(struct mmds *m, enum mmds_version v)
{
    pthread_mutex_lock(&m->lock);
    m->cfg.version = v == MMDS_V1 ? MMDS_V1 : MMDS_V2;
    pthread_mutex_unlock(&m->lock);
}

enum mmds_version mmds_get_version(struct mmds *m)
{
    pthread_mutex_lock(&m->lock);
    enum mmds_version v = m->cfg.version;
    pthread_mutex_unlock(&m->lock);
    return v;
}

void mmds_clear_tokens(struct mmds *m)
{
    pthread_mutex_lock(&m->lock);
    memset(m->tokens, 0, m->cfg.max_tokens * sizeof *m->tokens);
    pthread_mutex_unlock(&m->lock);
}

void mmds_get_stats(struct mmds *m, struct mmds_stats *st)
{
    pthread_mutex_lock(&m->lock);
    *st = m->stats;
    pthread_mutex_unlock(&m->lock);
}

size_t mmds_response_max(const struct mmds *m)
{
    return m->cfg.data_limit + HTTP_MAX_TARGET + 1024;
}

/* ---- tokens ---- */

static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* A new token valid for ttl seconds from now: 0 or -errno. */
static int token_issue(struct mmds *m, uint32_t ttl, uint64_t now_ns, char *text)
{
    uint8_t raw[TOKEN_RAW];
    int r = m->cfg.random(m->cfg.random_ctx, raw, sizeof raw);
    if (r)
        return r < 0 ? r : -EIO;
    for (unsigned i = 0, o = 0; i < TOKEN_RAW; i += 3) {
        uint32_t v = (uint32_t)raw[i] << 16 | (uint32_t)raw[i + 1] << 8 | raw[i + 2];
        for (int k = 3; k >= 0; k--)
            text[o++] = b64url[(v >> (6 * k)) & 63];
    }
    text[MMDS_TOKEN_LEN] = 0;
    uint64_t life = (uint64_t)ttl * NS_PER_S;
    uint64_t expiry = now_ns > UINT64_MAX - life ? UINT64_MAX : now_ns + life;
    /* a free or expired slot, else the one closest to expiry */
    struct token *slot = NULL;
    for (unsigned i = 0; i < m->cfg.max_tokens; i++) {
        struct token *t = &m->tokens[i];
        if (t->expiry_ns <= now_ns) {
            slot = t;
            break;
        }
        if (!slot || t->expiry_ns < slot->expiry_ns)
            slot = t;
    }
    if (slot->expiry_ns > now_ns)
        m->stats.tokens_evicted++;
    memcpy(slot->text, text, MMDS_TOKEN_LEN + 1);
    slot->expiry_ns = expiry;
    m->stats.tokens_issued++;
    return 0;
}

/* Does s name a live token? Compares every live slot in full, without
 * an early exit on the first differing byte. */
static bool token_valid(struct mmds *m, const char *s, uint64_t now_ns)
{
    if (strlen(s) != MMDS_TOKEN_LEN)
        return false;
    bool ok = false;
    for (unsigned i = 0; i < m->cfg.max_tokens; i++) {
        struct token *t = &m->tokens[i];
        if (t->expiry_ns <= now_ns)
            continue;
        unsigned char d = 0;
        for (unsigned k = 0; k < MMDS_TOKEN_LEN; k++)
            d |= (unsigned char)(t->text[k] ^ s[k]);
        ok |= d == 0;
    }
    return ok;
}

/* ---- the responder ---- */

struct resp {
    int status;
    const char *ctype;                  /* Content-Type */
    struct sb body;
    char extra[96];                     /* more header lines, CRLF-terminated */
};

__attribute__((format(printf, 3, 4)))
static void set_error(struct resp *r, int status, const char *fmt, ...)
{
    r->status = status;
    r->ctype = "text/plain";
    r->body.len = 0;
    r->body.err = false;
    if (r->body.p)
        r->body.p[0] = 0;
    char tmp[HTTP_MAX_TARGET + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    sb_str(&r->body, tmp);
}

/* The request target's absolute path ("" if it has none), with runs of
 * '/' made one, into out (at least strlen(target) + 1 bytes). */
static void abs_path(const char *target, char *out)
{
    const char *p = "";
    if (strncmp(target, "http://", 7) == 0) {
        const char *slash = strchr(target + 7, '/');
        if (slash)
            p = slash;
    } else if (target[0] == '/') {
        p = target;
    }
    size_t o = 0;
    for (; *p; p++)
        if (!(*p == '/' && o && out[o - 1] == '/'))
            out[o++] = *p;
    out[o] = 0;
}

/* The node at JSON pointer `ptr` ("" or "/a/b"), or NULL. Modifies ptr. */
static json_t *lookup(json_t *doc, char *ptr)
{
    json_t *cur = doc;
    if (!*ptr)
        return cur;
    if (*ptr != '/')
        return NULL;
    char *seg = ptr + 1;
    while (cur) {
        char *end = strchr(seg, '/');
        if (end)
            *end = 0;
        /* unescape ~1 -> '/', ~0 -> '~'; any other '~' makes it invalid */
        char *w = seg;
        for (char *s = seg; *s; s++) {
            if (*s == '~') {
                if (s[1] == '1')
                    *w++ = '/';
                else if (s[1] == '0')
                    *w++ = '~';
                else
                    return NULL;
                s++;
            } else {
                *w++ = *s;
            }
        }
        *w = 0;
        if (json_is_object(cur)) {
            cur = json_object_get(cur, seg);
        } else if (json_is_array(cur)) {
            size_t n = strlen(seg);
            if (!n || n > 19 || strspn(seg, "0123456789") != n || (n > 1 && seg[0] == '0'))
                return NULL;
            cur = json_array_get(cur, (size_t)strtoull(seg, NULL, 10));
        } else {
            return NULL;
        }
        if (!end)
            return cur;
        seg = end + 1;
    }
    return NULL;
}

static void answer_get(struct mmds *m, const struct http_req *req, char *path, struct resp *r)
{
    size_t n = strlen(path);
    if (n && path[n - 1] == '/')
        path[n - 1] = 0;
    json_t *node = lookup(m->doc, path);
    if (!node) {
        set_error(r, 404, "Resource not found: %s.", req->target);
        return;
    }
    const char *accept = http_req_header(req, "accept", NULL);
    bool json = !m->cfg.imds_compat && accept && http_list_has(accept, "application/json");
    r->status = 200;
    if (json) {
        r->ctype = "application/json";
        dump(&r->body, node);
        return;
    }
    r->ctype = "text/plain";
    if (json_is_string(node)) {
        sb_add(&r->body, json_string_value(node), json_string_length(node));
    } else if (json_is_object(node)) {
        size_t nk;
        bool oom;
        const char **k = sorted_keys(node, &nk, &oom);
        if (oom)
            r->body.err = true;
        for (size_t i = 0; i < nk; i++) {
            if (i)
                sb_add(&r->body, "\n", 1);
            sb_str(&r->body, k[i]);
            if (json_is_object(json_object_get(node, k[i])))
                sb_add(&r->body, "/", 1);
        }
        free(k);
    } else {
        set_error(r, 501, "Cannot retrieve value. The value has an unsupported type.");
    }
}

/* The first header of either name. */
static const char *header2(const struct http_req *req, const char *a, const char *b,
                           const char **which)
{
    for (unsigned i = 0; i < req->nheaders; i++) {
        const char *nm = req->headers[i].name;
        if (!strcasecmp(nm, a) || !strcasecmp(nm, b)) {
            *which = nm;
            return req->headers[i].value;
        }
    }
    return NULL;
}

static void answer_put(struct mmds *m, const struct http_req *req, const char *path,
                       uint64_t now_ns, struct resp *r)
{
    if (http_req_header(req, "x-forwarded-for", NULL)) {
        set_error(r, 400, "Invalid header. Reason: Unsupported header name. Key: X-Forwarded-For");
        return;
    }
    if (strcmp(path, MMDS_TOKEN_PATH) != 0) {
        set_error(r, 404, "Resource not found: %s.", req->target);
        return;
    }
    const char *name = NULL;
    const char *v = header2(req, "x-metadata-token-ttl-seconds",
                            "x-aws-ec2-metadata-token-ttl-seconds", &name);
    if (!v) {
        set_error(r, 400, "Token time to live value not found. Use `X-metadata-token-ttl-seconds` "
                          "or `X-aws-ec2-metadata-token-ttl-seconds` header to specify the "
                          "token's lifetime.");
        return;
    }
    size_t n = strlen(v);
    if (!n || n > 10 || strspn(v, "0123456789") != n || strtoull(v, NULL, 10) > UINT32_MAX) {
        set_error(r, 400, "Invalid header. Reason: Invalid value. Key:%s; Value:%s", name, v);
        return;
    }
    uint64_t ttl = strtoull(v, NULL, 10);
    if (ttl < MMDS_TOKEN_TTL_MIN || ttl > MMDS_TOKEN_TTL_MAX) {
        set_error(r, 400, "Invalid time to live value provided for token: %" PRIu64 ". Please "
                          "provide a value between %u and %u.", ttl, MMDS_TOKEN_TTL_MIN,
                  MMDS_TOKEN_TTL_MAX);
        return;
    }
    char tok[MMDS_TOKEN_LEN + 1];
    if (token_issue(m, (uint32_t)ttl, now_ns, tok)) {
        set_error(r, 500, "Token generation failed.");
        return;
    }
    r->status = 200;
    r->ctype = "text/plain";
    sb_str(&r->body, tok);
    /* name is a header name the guest sent: token characters only */
    snprintf(r->extra, sizeof r->extra, "%s: %" PRIu64 "\r\n",
             strcasecmp(name, "x-metadata-token-ttl-seconds") == 0
                 ? "X-metadata-token-ttl-seconds" : "X-aws-ec2-metadata-token-ttl-seconds",
             ttl);
}

static void answer(struct mmds *m, const struct http_req *req, uint64_t now_ns, struct resp *r)
{
    char *path = malloc(strlen(req->target) + 1);
    if (!path) {
        set_error(r, 500, "Out of memory.");
        return;
    }
    abs_path(req->target, path);
    if (!*path) {
        set_error(r, 400, "Invalid URI.");
    } else if (strcmp(req->method, "GET") == 0) {
        const char *which;
        const char *tok = header2(req, "x-metadata-token", "x-aws-ec2-metadata-token", &which);
        bool valid = tok && token_valid(m, tok, now_ns);
        if (!tok)
            m->stats.rx_no_token++;
        else if (!valid)
            m->stats.rx_invalid_token++;
        if (req->content_length)
            set_error(r, 400, "A GET request cannot have a body.");
        else if (m->cfg.version == MMDS_V2 && !tok)
            set_error(r, 401, "No MMDS token provided. Use `X-metadata-token` or "
                              "`X-aws-ec2-metadata-token` header to specify the session token.");
        else if (m->cfg.version == MMDS_V2 && !valid)
            set_error(r, 401, "MMDS token not valid.");
        else
            answer_get(m, req, path, r);
    } else if (strcmp(req->method, "PUT") == 0) {
        answer_put(m, req, path, now_ns, r);
    } else {
        set_error(r, 405, "Not allowed HTTP method.");
        snprintf(r->extra, sizeof r->extra, "Allow: GET, PUT\r\n");
    }
    free(path);
}

int mmds_respond(struct mmds *m, const struct http_parser *p, uint64_t now_ns, char *out,
                 size_t cap, size_t *len, bool *close)
{
    enum http_state st = http_parser_state(p);
    if (st == HTTP_NEED_MORE)
        return -EINVAL;
    struct resp r = { .body = { .limit = SIZE_MAX } };
    int minor = 1;
    bool cl;
    pthread_mutex_lock(&m->lock);
    m->stats.requests++;
    if (st == HTTP_ERROR) {
        m->stats.bad_requests++;
        int s = http_parser_status(p);
        set_error(&r, s, "%s.", http_reason(s));
        cl = true;
    } else {
        minor = p->req.minor;
        answer(m, &p->req, now_ns, &r);
        cl = !p->req.keep_alive || minor == 0;
    }
    pthread_mutex_unlock(&m->lock);
    if (r.body.err) {
        set_error(&r, 500, "Internal Server Error.");
        r.extra[0] = 0;
    }

    struct sb h = { .limit = SIZE_MAX };
    sb_fmt(&h, "HTTP/1.%d %d %s\r\n", minor, r.status, http_reason(r.status));
    sb_fmt(&h, "Content-Type: %s\r\nContent-Length: %zu\r\n", r.ctype, r.body.len);
    sb_str(&h, r.extra);
    if (cl)
        sb_str(&h, "Connection: close\r\n");
    sb_str(&h, "\r\n");
    int ret = 0;
    if (h.err || r.body.err) {
        ret = -ENOMEM;
    } else if (h.len + r.body.len > cap) {
        ret = -ENOSPC;
    } else {
        memcpy(out, h.p, h.len);
        if (r.body.len)
            memcpy(out + h.len, r.body.p, r.body.len);
        *len = h.len + r.body.len;
        if (close)
            *close = cl;
    }
    free(h.p);
    free(r.body.p);
    return ret;
}
