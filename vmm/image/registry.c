/* The OCI distribution protocol's pull side over libcurl (registry.h).
 *
 * One curl handle per pull, one request at a time. Redirects are
 * followed here rather than by curl, so that the Authorization header
 * goes only to the registry's own origin; 401 answers are met once per
 * request with the challenge's scheme (a Bearer token, fetched once and
 * reused by the pull's later requests, or Basic); 429, 5xx and broken
 * connections are tried again after a growing pause (Retry-After when
 * the registry gives one), a blob resuming with Range from the bytes it
 * has. */
#include "vmm/image/registry.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "vmm/base/fullio.h"
#include "vmm/image/authparse.h"
#include "vmm/image/curl_dyn.h"
#include "vmm/image/ref.h"

#define ACCEPT_MANIFEST \
    "Accept: application/vnd.oci.image.index.v1+json, " \
    "application/vnd.oci.image.manifest.v1+json, " \
    "application/vnd.docker.distribution.manifest.list.v2+json, " \
    "application/vnd.docker.distribution.manifest.v2+json"
#define ERRBODY_MAX 512     /* bytes of an error answer kept for the message */
#define TOKEN_ANSWER_MAX (64u << 10)

struct reg {
    CURL *h;
    const struct img_pull_opts *o;
    struct img_ref ref;
    char base[300];                     /* "https://host:port" */
    char auth[IMG_TOKEN_MAX + 32];      /* "Authorization: ..." or "" */
    struct img_creds creds;
    bool have_creds;
    struct img_err *err;
};

/* Where an answer's body goes: memory (buf, up to max) or a file (fd,
 * from off, up to limit in all). */
struct sink {
    char *buf;
    size_t len, max;
    int fd;
    uint64_t off, limit;
    bool overflow, bad_range;
};

/* One answer. */
struct resp {
    long status;
    char ctype[128], retry_after[32], crange[96];
    char www_auth[IMG_AUTH_HDR_MAX + 1];
    char errbody[ERRBODY_MAX + 1];
    size_t errlen;
    bool body_started, hdr_too_long;
    bool foreign;                       /* the answer came from another origin (a redirect's) */
    struct sink *sk;
    struct reg *r;
    const struct img_pull_progress *prog;   /* blob downloads: reported as bytes arrive */
};

static bool cancelled(const struct reg *r)
{
    return r->o->cancel && *r->o->cancel;
}

/* ---- curl callbacks ---- */

static void hdr_copy(char *dst, size_t len, const char *v, size_t n)
{
    while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' '))
        n--;
    if (n >= len)
        n = len - 1;
    memcpy(dst, v, n);
    dst[n] = 0;
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    struct resp *rs = arg;
    size_t len = size * n;
    static const struct { const char *name; size_t off, len; } want[] = {
        { "content-type:", offsetof(struct resp, ctype), sizeof ((struct resp *)0)->ctype },
        { "retry-after:", offsetof(struct resp, retry_after), sizeof ((struct resp *)0)->retry_after },
        { "content-range:", offsetof(struct resp, crange), sizeof ((struct resp *)0)->crange },
        { "www-authenticate:", offsetof(struct resp, www_auth), sizeof ((struct resp *)0)->www_auth },
    };
    if (len >= 5 && !strncmp(p, "HTTP/", 5)) {     /* a new answer (after 1xx): forget the last */
        rs->ctype[0] = rs->retry_after[0] = rs->crange[0] = rs->www_auth[0] = 0;
        rs->hdr_too_long = false;
        return len;
    }
    for (unsigned i = 0; i < sizeof want / sizeof want[0]; i++) {
        size_t k = strlen(want[i].name);
        if (len > k && !strncasecmp(p, want[i].name, k)) {
            char *dst = (char *)rs + want[i].off;
            if (want[i].off == offsetof(struct resp, www_auth) && dst[0])
                return len;     /* the first challenge header is the one used */
            const char *v = p + k;
            size_t vn = len - k;
            while (vn && (*v == ' ' || *v == '\t'))
                v++, vn--;
            if (vn >= want[i].len)      /* cut short, it would say something else: refused */
                rs->hdr_too_long = true;
            hdr_copy(dst, want[i].len, v, vn);
        }
    }
    return len;
}

/* The first body bytes of a 2xx answer to a file sink: a 200 to a Range
 * request starts over, a 206 must start where the file ends. */
static bool sink_start(struct resp *rs)
{
    struct sink *sk = rs->sk;
    if (sk->fd < 0)
        return true;
    if (rs->status == 206) {
        uint64_t start;
        if (img_content_range(rs->crange, &start) < 0 || start != sk->off) {
            sk->bad_range = true;
            return false;
        }
        return true;
    }
    if (sk->off && (ftruncate(sk->fd, 0) < 0 || lseek(sk->fd, 0, SEEK_SET) < 0))
        return false;
    sk->off = 0;
    return true;
}

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    struct resp *rs = arg;
    struct sink *sk = rs->sk;
    size_t len = size * n;
    if (!rs->body_started) {
        rs->body_started = true;
        curl_easy_getinfo(rs->r->h, CURLINFO_RESPONSE_CODE, &rs->status);
        if (rs->status / 100 == 2 && !sink_start(rs))
            return 0;
    }
    if (rs->status / 100 != 2) {            /* an error's text, for the message */
        size_t k = len < ERRBODY_MAX - rs->errlen ? len : ERRBODY_MAX - rs->errlen;
        memcpy(rs->errbody + rs->errlen, p, k);
        rs->errlen += k;
        rs->errbody[rs->errlen] = 0;
        return len;
    }
    if (sk->fd >= 0) {
        if (len > sk->limit - sk->off) {
            sk->overflow = true;
            return 0;
        }
        if (write_full(sk->fd, p, len) != (ssize_t)len)
            return 0;
        sk->off += len;
        return len;
    }
    if (len > sk->max - sk->len) {
        sk->overflow = true;
        return 0;
    }
    memcpy(sk->buf + sk->len, p, len);
    sk->len += len;
    return len;
}

static int on_xfer(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
    struct resp *rs = arg;
    if (cancelled(rs->r))
        return 1;
    if (rs->prog && rs->r->o->progress && rs->body_started && rs->status / 100 == 2) {
        struct img_pull_progress p = *rs->prog;
        p.state = IMG_PULL_BYTES;
        p.done = rs->sk->off;
        rs->r->o->progress(rs->r->o->arg, &p);
    }
    return 0;
}

/* ---- one request ---- */

/* Set up h for a GET of url; the header list into *hl (caller frees). */
static int setup(struct reg *r, const char *url, const char *accept, const char *auth,
                 bool send_auth, struct resp *rs, struct curl_slist **hl, char *errbuf)
{
    CURL *h = r->h;
    char range[64] = "";
    curl_easy_reset(h);
    *hl = NULL;
    if (send_auth && r->auth[0])
        auth = r->auth;
    if (rs->sk->fd >= 0 && rs->sk->off)
        snprintf(range, sizeof range, "Range: bytes=%llu-", (unsigned long long)rs->sk->off);
    const char *lines[] = { accept, auth, range[0] ? range : NULL };
    for (unsigned i = 0; i < 3; i++) {
        if (!lines[i])
            continue;
        struct curl_slist *n = curl_slist_append(*hl, lines[i]);
        if (!n)
            return img_err(r->err, -ENOMEM, "out of memory");
        *hl = n;
    }
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, *hl);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    /* Checked: where it is unknown (libcurl < 7.85) any scheme would do. */
    if (curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, r->o->insecure ? "http,https" : "https") != CURLE_OK)
        return img_err(r->err, -ENOSYS, "libcurl 7.85 or later is needed (CURLOPT_PROTOCOLS_STR)");
    curl_easy_setopt(h, CURLOPT_USERAGENT, "moat");
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, rs);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, rs);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_xfer);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, rs);
    if (r->o->ca_cert)
        curl_easy_setopt(h, CURLOPT_CAINFO, r->o->ca_cert);
    return 0;
}

/* Does url belong to the registry's own origin (scheme, host, port)? */
static bool same_origin(const struct reg *r, const char *url)
{
    size_t n = strlen(r->base);
    return !strncasecmp(url, r->base, n) && (url[n] == '/' || url[n] == 0 || url[n] == '?');
}

/* A GET of url, following redirects (the Authorization header only to
 * the registry's origin). 0 with rs->status; -EAGAIN for a failure worth
 * another try (why in *why); -ECANCELED; -errno with err filled. */
static int get_once(struct reg *r, const char *url0, const char *accept, const char *hop0_auth,
                    struct resp *rs, char *why, size_t whylen)
{
    char url[2048], errbuf[CURL_ERROR_SIZE];
    snprintf(url, sizeof url, "%s", url0);
    for (unsigned hop = 0;; hop++) {
        struct curl_slist *hl;
        errbuf[0] = 0;
        rs->status = 0;
        rs->body_started = false;
        rs->errlen = 0;
        rs->errbody[0] = 0;
        if (rs->sk->fd < 0)
            rs->sk->len = 0;
        int rc = setup(r, url, accept, hop ? NULL : hop0_auth, same_origin(r, url), rs, &hl, errbuf);
        CURLcode cc = rc < 0 ? CURLE_OK : curl_easy_perform(r->h);
        curl_slist_free_all(hl);
        if (rc < 0)
            return rc;
        if (cancelled(r))
            return -ECANCELED;
        if (rs->sk->overflow)
            return img_err(r->err, -EFBIG, "%s: the answer is larger than %llu bytes", url,
                           (unsigned long long)(rs->sk->fd >= 0 ? rs->sk->limit : rs->sk->max));
        if (rs->sk->bad_range)
            return img_err(r->err, -EPROTO, "%s: a resumed download starts at the wrong offset (Content-Range: %s)",
                           url, rs->crange);
        if (cc == CURLE_UNSUPPORTED_PROTOCOL)
            return img_err(r->err, -EPROTO, "%s: not https (plain HTTP only with --insecure)", url);
        if (cc == CURLE_PEER_FAILED_VERIFICATION || cc == CURLE_SSL_CACERT_BADFILE ||
            cc == CURLE_SSL_CONNECT_ERROR)
            return img_err(r->err, -EPROTO, "%s: TLS: %s (a private CA: --ca-cert FILE; a plain-HTTP registry: --insecure)", url,
                           errbuf[0] ? errbuf : curl_easy_strerror(cc));
        if (cc == CURLE_WRITE_ERROR)
            return img_err(r->err, -EIO, "%s: cannot write what arrived", url);
        if (cc == CURLE_OK && rs->hdr_too_long)
            return img_err(r->err, -EPROTO, "%s: a Content-Type, Retry-After, Content-Range or WWW-Authenticate "
                           "header longer than moat reads: refused", url);
        if (cc != CURLE_OK) {
            snprintf(why, whylen, "%s: %s", url, errbuf[0] ? errbuf : curl_easy_strerror(cc));
            return -EAGAIN;
        }
        curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &rs->status);
        rs->foreign = !same_origin(r, url);
        if (rs->status / 100 != 3 || rs->status == 304)
            return 0;
        char *loc = NULL;
        curl_easy_getinfo(r->h, CURLINFO_REDIRECT_URL, &loc);
        if (!loc || !loc[0])
            return img_err(r->err, -EPROTO, "%s: redirect (%ld) without a Location", url, rs->status);
        if (hop >= IMG_PULL_REDIRECTS)
            return img_err(r->err, -ELOOP, "%s: more than %d redirects", url0, IMG_PULL_REDIRECTS);
        if (strlen(loc) >= sizeof url)
            return img_err(r->err, -EPROTO, "%s: redirect to a URL longer than %zu bytes", url, sizeof url - 1);
        snprintf(url, sizeof url, "%s", loc);
    }
}

/* ---- authentication ---- */

static int fetch_url(struct reg *r, const char *url, const char *accept, const char *hop0_auth,
                     bool meet_401, struct resp *rs);

/* A Bearer token for challenge c into r->auth. */
static int bearer_token(struct reg *r, const struct img_challenge *c)
{
    char url[2048], scope[600];
    snprintf(scope, sizeof scope, "repository:%s:pull", r->ref.repo);
    if (img_auth_token_url(c, scope, url, sizeof url) < 0)
        return img_err(r->err, -EPROTO, "the token service's URL is too long");
    char *buf = malloc(TOKEN_ANSWER_MAX);
    if (!buf)
        return img_err(r->err, -ENOMEM, "out of memory");
    struct sink sk = { .buf = buf, .max = TOKEN_ANSWER_MAX, .fd = -1 };
    struct resp *rs = calloc(1, sizeof *rs);
    int rc = rs ? 0 : img_err(r->err, -ENOMEM, "out of memory");
    if (rc == 0) {
        rs->sk = &sk;
        rs->r = r;
        /* The token service gets the user's credentials as Basic (to its
         * own URL only, not to where it redirects), never an older token. */
        char saved[sizeof r->auth];
        memcpy(saved, r->auth, sizeof saved);
        r->auth[0] = 0;
        char basic[sizeof r->auth] = "Authorization: ";
        if (r->have_creds && img_auth_basic(&r->creds, basic + 15, sizeof basic - 15) < 0)
            rc = img_err(r->err, -EINVAL, "credentials too long");
        if (rc == 0)
            rc = fetch_url(r, url, NULL, r->have_creds ? basic : NULL, false, rs);
        if (rc < 0)
            img_err(r->err, rc, "the token service %s did not answer", c->realm);
        memcpy(r->auth, saved, sizeof saved);
        explicit_bzero(saved, sizeof saved);
        explicit_bzero(basic, sizeof basic);
    }
    if (rc == 0 && rs->status == 401)
        rc = img_err(r->err, -EACCES, "%s: the token service refused the credentials (401): wrong user name or password?",
                     r->ref.registry);
    else if (rc == 0 && rs->status != 200)
        rc = img_err(r->err, -EPROTO, "token service %s answered %ld: %.200s", c->realm, rs->status, rs->errbody);
    char tok[IMG_TOKEN_MAX];
    if (rc == 0)
        rc = img_auth_token_parse(buf, sk.len, tok, sizeof tok, r->err);
    if (rc == 0)
        snprintf(r->auth, sizeof r->auth, "Authorization: Bearer %s", tok);
    explicit_bzero(tok, sizeof tok);
    explicit_bzero(buf, TOKEN_ANSWER_MAX);
    free(rs);
    free(buf);
    return rc;
}

/* Meet a 401 answer's challenge: r->auth for the next try. */
static int authenticate(struct reg *r, const struct resp *rs)
{
    struct img_challenge c;
    if (!rs->www_auth[0])
        return img_err(r->err, -EACCES, "%s: 401 Unauthorized without a WWW-Authenticate challenge",
                       r->ref.registry);
    int rc = img_auth_parse_challenge(rs->www_auth, strlen(rs->www_auth), &c, r->err);
    if (rc < 0)
        return rc;
    if (c.scheme == IMG_AUTH_BEARER)
        return bearer_token(r, &c);
    if (!r->have_creds)
        return img_err(r->err, -EACCES, "%s requires a user name and password (--creds USER:PASS, "
                       "$REGISTRY_AUTH_FILE or ~/.docker/config.json)", r->ref.registry);
    memcpy(r->auth, "Authorization: ", 15);
    if (img_auth_basic(&r->creds, r->auth + 15, sizeof r->auth - 15) < 0)
        return img_err(r->err, -EINVAL, "credentials too long");
    return 0;
}

/* ---- requests with retries ---- */

/* Sleep ms, waking every 100 ms to look at the cancel flag. */
static int pause_ms(struct reg *r, unsigned ms)
{
    while (ms) {
        if (cancelled(r))
            return -ECANCELED;
        unsigned step = ms < 100 ? ms : 100;
        struct timespec ts = { 0, (long)step * 1000000L };
        nanosleep(&ts, NULL);
        ms -= step;
    }
    return cancelled(r) ? -ECANCELED : 0;
}

static void report_retry(struct reg *r, const struct img_pull_progress *prog, const char *why)
{
    if (!r->o->progress)
        return;
    struct img_pull_progress p = prog ? *prog : (struct img_pull_progress){ 0 };
    p.state = IMG_PULL_RETRY;
    p.why = why;
    r->o->progress(r->o->arg, &p);
}

/* GET url into rs->sk (hop0_auth: an Authorization line for url itself,
 * not where it redirects): a 401 met once with its challenge when
 * meet_401, 429/5xx/broken connections tried again (up to o->retries
 * times, pauses doubling from o->backoff_ms, Retry-After when given).
 * 0 with rs->status (the caller judges it), or -errno. */
static int fetch_url(struct reg *r, const char *url, const char *accept, const char *hop0_auth,
                     bool meet_401, struct resp *rs)
{
    char why[2600];
    unsigned retries = r->o->retries ? r->o->retries : IMG_PULL_RETRIES;
    unsigned backoff = r->o->backoff_ms ? r->o->backoff_ms : 500;
    bool authed = false;
    for (unsigned tries = 0;;) {
        int rc = get_once(r, url, accept, hop0_auth, rs, why, sizeof why);
        if (rc == 0 && rs->status == 401 && meet_401) {
            /* Only the registry's own challenge is met: one from where a
             * redirect led would have the user's credentials sent to a
             * token realm that host names. */
            if (rs->foreign)
                return img_err(r->err, -EACCES, "%.2000s: a redirect's target answered 401 Unauthorized "
                               "(credentials go only to %s)", url, r->ref.registry);
            if (authed)
                return img_err(r->err, -EACCES, "%s refused the credentials (401 Unauthorized)%s", r->ref.registry,
                               r->have_creds ? ": wrong user name or password?" : "");
            authed = true;
            rc = authenticate(r, rs);
            if (rc < 0)
                return rc;
            continue;
        }
        if (rc == 0 && rs->status != 429 && rs->status < 500)
            return 0;
        if (rc < 0 && rc != -EAGAIN)
            return rc;
        if (rc == 0)
            snprintf(why, sizeof why, "%.2000s: %ld %.200s", url, rs->status, rs->errbody);
        if (++tries > retries)
            return img_err(r->err, -EIO, "gave up after %u tries: %s", tries, why);
        int ra = rc == 0 ? img_retry_after(rs->retry_after) : -1;
        unsigned wait = ra >= 0 ? (unsigned)ra * 1000u : backoff;
        backoff = backoff < 30000 ? backoff * 2 : backoff;
        report_retry(r, rs->prog, why);
        rc = pause_ms(r, wait);
        if (rc < 0)
            return rc;
    }
}

/* fetch_url of the registry's path, its 401s met. */
static int fetch(struct reg *r, const char *path, const char *accept, struct resp *rs)
{
    char url[2048];
    if (snprintf(url, sizeof url, "%s%s", r->base, path) >= (int)sizeof url)
        return img_err(r->err, -ENAMETOOLONG, "URL too long: %s%s", r->base, path);
    return fetch_url(r, url, accept, NULL, true, rs);
}

/* ---- manifests ---- */

struct doc {
    char *buf;
    size_t len;
    enum img_kind kind;
    char digest[IMG_DIGEST_MAX];
};

/* GET manifests/WHICH (a tag or digest) into d: checked against want
 * (a digest, or NULL for a tag), its kind from Content-Type. */
static int get_manifest(struct reg *r, const char *which, const char *want, struct doc *d)
{
    char path[700];
    snprintf(path, sizeof path, "/v2/%s/manifests/%s", r->ref.repo, which);
    struct sink sk = { .buf = malloc(IMG_JSON_MAX), .max = IMG_JSON_MAX, .fd = -1 };
    struct resp *rs = calloc(1, sizeof *rs);
    int rc = sk.buf && rs ? 0 : img_err(r->err, -ENOMEM, "out of memory");
    if (rc == 0) {
        rs->sk = &sk;
        rs->r = r;
        rc = fetch(r, path, ACCEPT_MANIFEST, rs);
    }
    if (rc == -EFBIG)
        img_err(r->err, rc, "%s:%s: manifest larger than %u bytes", r->ref.repo, which, IMG_JSON_MAX);
    if (rc == 0 && rs->status == 404)
        rc = img_err(r->err, -ENOENT, "%s/%s:%s: manifest unknown (404): no such image or tag",
                     r->ref.registry, r->ref.repo, which);
    else if (rc == 0 && rs->status != 200)
        rc = img_err(r->err, -EPROTO, "%s/%s:%s: the registry answered %ld: %.200s", r->ref.registry,
                     r->ref.repo, which, rs->status, rs->errbody);
    if (rc == 0) {
        char ct[128];
        snprintf(ct, sizeof ct, "%.*s", (int)strcspn(rs->ctype, "; "), rs->ctype);
        enum img_comp comp;
        d->kind = img_media_kind(ct, &comp);
        img_sha256(sk.buf, sk.len, d->digest);
        if (!strncmp(ct, "application/vnd.docker.distribution.manifest.v1+", 48))
            rc = img_err(r->err, -ENOTSUP, "%s/%s:%s is a Docker schema 1 manifest (%s): not supported "
                         "(push it again with a current Docker or skopeo)", r->ref.registry, r->ref.repo, which, ct);
        else if (d->kind != IMG_K_INDEX && d->kind != IMG_K_MANIFEST)
            rc = img_err(r->err, -EPROTO, "%s/%s:%s: not a manifest or index (Content-Type \"%.100s\")",
                         r->ref.registry, r->ref.repo, which, ct);
        else if (want && strcmp(want, d->digest))
            rc = img_err(r->err, -EBADMSG, "%s/%s@%s: the registry sent a manifest whose digest is %s",
                         r->ref.registry, r->ref.repo, want, d->digest);
    }
    free(rs);
    if (rc < 0) {
        free(sk.buf);
        return rc;
    }
    d->buf = sk.buf;
    d->len = sk.len;
    return 0;
}

/* ---- blobs ---- */

static void report(struct reg *r, struct img_pull_progress *p, enum img_pull_state st, uint64_t done)
{
    p->state = st;
    p->done = done;
    if (r->o->progress)
        r->o->progress(r->o->arg, p);
}

/* Download blob d into the open tmp file w (holding have bytes). */
static int download(struct reg *r, const struct img_desc *d, struct img_blob_w *w, uint64_t have,
                    struct img_pull_progress *p)
{
    char path[700];
    snprintf(path, sizeof path, "/v2/%s/blobs/%s", r->ref.repo, d->digest);
    if (have > d->size || lseek(w->fd, (off_t)have, SEEK_SET) < 0) {
        if (ftruncate(w->fd, 0) < 0 || lseek(w->fd, 0, SEEK_SET) < 0)
            return img_err(r->err, -errno, "blob %s: cannot reset its partial file", d->digest);
        have = 0;
    }
    struct sink sk = { .fd = w->fd, .off = have, .limit = d->size };
    struct resp *rs = calloc(1, sizeof *rs);
    if (!rs)
        return img_err(r->err, -ENOMEM, "out of memory");
    rs->sk = &sk;
    rs->r = r;
    rs->prog = p;
    report(r, p, IMG_PULL_START, have);
    int rc = 0;
    /* A connection that ends early (the registry's Content-Length not
     * reached) is a transient failure: fetch tries again from sk.off. */
    while (rc == 0 && sk.off < d->size) {
        rc = fetch(r, path, NULL, rs);
        if (rc == 0 && rs->status == 404)
            rc = img_err(r->err, -ENOENT, "blob %s: unknown to the registry (404)", d->digest);
        else if (rc == 0 && rs->status != 200 && rs->status != 206)
            rc = img_err(r->err, -EPROTO, "blob %s: the registry answered %ld: %.200s", d->digest, rs->status,
                         rs->errbody);
        else if (rc == 0 && sk.off < d->size)
            rc = img_err(r->err, -EPROTO, "blob %s: the answer ended after %llu of %llu bytes", d->digest,
                         (unsigned long long)sk.off, (unsigned long long)d->size);
    }
    if (rc == -EFBIG)
        img_err(r->err, rc, "blob %s is larger than its descriptor's %llu bytes: refused, nothing kept", d->digest,
                (unsigned long long)d->size);
    free(rs);
    return rc;
}

/* Blob d (index i of n, for the progress) into the store. */
static int pull_blob(struct reg *r, struct img_store *s, const struct img_desc *d, unsigned i,
                     unsigned n)
{
    struct img_pull_progress p = { .digest = d->digest, .kind = d->kind, .index = i, .count = n,
                                   .total = d->size };
    if (!img_digest_valid(d->digest))
        return img_err(r->err, -EINVAL, "a descriptor's digest \"%.80s\" is not sha256:HEX", d->digest);
    for (int attempt = 0;; attempt++) {
        struct img_blob_w w;
        uint64_t have = 0;
        int rc = img_blob_begin(s, d->digest, &w, &have, r->err);
        if (rc < 0)
            return rc;
        if (rc == 1) {
            report(r, &p, IMG_PULL_CACHED, d->size);
            return 0;
        }
        rc = download(r, d, &w, have, &p);
        if (rc < 0) {
            /* Interrupted: keep the bytes for a resume; refused: nothing. */
            img_blob_abort(s, &w, rc == -ECANCELED || rc == -EIO);
            return rc;
        }
        rc = img_blob_commit(s, &w, d->size, r->err);
        if (rc == -EBADMSG && have && attempt == 0) {
            /* the bytes kept from an earlier pull were wrong: once from 0 */
            r->err->code = 0;
            r->err->msg[0] = 0;
            continue;
        }
        if (rc < 0)
            return img_err(r->err, rc, "blob %s: refused (digest or size does not match), nothing kept", d->digest);
        report(r, &p, IMG_PULL_DONE, d->size);
        return 0;
    }
}

/* ---- the pull ---- */

/* Read a credentials file (absent: 0) and look the registry up. */
static int creds_from_file(struct reg *r, const char *path)
{
    if (!path || r->have_creds)
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : img_err(r->err, -errno, "%s: %s", path, strerror(errno));
    char *buf = malloc(IMG_AUTH_FILE_MAX + 1);
    ssize_t n = buf ? read_full(fd, buf, IMG_AUTH_FILE_MAX + 1) : -ENOMEM;
    close(fd);
    int rc;
    if (n < 0)
        rc = img_err(r->err, n == -ENOMEM ? -ENOMEM : -EIO, "%s: cannot read it", path);
    else if (n > IMG_AUTH_FILE_MAX)
        rc = img_err(r->err, -EFBIG, "%s: larger than %u bytes", path, IMG_AUTH_FILE_MAX);
    else
        rc = img_auth_file_lookup(buf, (size_t)n, r->ref.registry, &r->creds, r->err);
    if (buf)
        explicit_bzero(buf, IMG_AUTH_FILE_MAX + 1);
    free(buf);
    if (rc < 0)
        return img_err(r->err, rc, "in %s", path);
    r->have_creds = rc == 1;
    return 0;
}

static int reg_open(struct reg *r, const char *refstr, const struct img_pull_opts *o, struct img_err *err)
{
    char why[300];
    memset(r, 0, sizeof *r);
    r->o = o;
    r->err = err;
    int rc = curl_load(why, sizeof why);
    if (rc < 0)
        return img_err(err, rc, "%s", why);
    rc = img_ref_parse(refstr, &r->ref, err);
    if (rc < 0)
        return rc;
    snprintf(r->base, sizeof r->base, "%s://%s", o->insecure ? "http" : "https", img_ref_api_host(&r->ref));
    if (o->creds) {
        rc = img_creds_parse(o->creds, &r->creds, err);
        if (rc < 0)
            return rc;
        r->have_creds = true;
    }
    rc = creds_from_file(r, o->auth_file);
    if (rc == 0)
        rc = creds_from_file(r, o->docker_config);
    if (rc < 0)
        return rc;
    r->h = curl_easy_init();
    return r->h ? 0 : img_err(err, -ENOMEM, "curl_easy_init failed");
}

/* GET /v2/: the registry speaks the protocol; its challenge met. */
static int ping(struct reg *r)
{
    char small[1024];
    struct sink sk = { .buf = small, .max = sizeof small, .fd = -1 };
    struct resp *rs = calloc(1, sizeof *rs);
    if (!rs)
        return img_err(r->err, -ENOMEM, "out of memory");
    rs->sk = &sk;
    rs->r = r;
    int rc = fetch(r, "/v2/", NULL, rs);
    if (rc == -EFBIG)       /* a body we do not read anyway */
        rc = r->err->code = 0, r->err->msg[0] = 0;
    if (rc == 0 && rs->status != 200)
        rc = img_err(r->err, -EPROTO, "%s does not answer as a registry (GET /v2/: %ld)", r->base, rs->status);
    free(rs);
    return rc;
}

/* The manifest for r->ref (through an index if it names one) into m. */
static int resolve(struct reg *r, struct img_store *s, struct doc *m)
{
    const char *which = r->ref.digest[0] ? r->ref.digest : r->ref.tag;
    int rc = get_manifest(r, which, r->ref.digest[0] ? r->ref.digest : NULL, m);
    if (rc < 0 || m->kind == IMG_K_MANIFEST)
        return rc;
    struct img_desc pick;
    rc = img_index_pick(m->buf, m->len, r->o->platform, &pick, r->err);
    if (rc == 0)
        rc = img_blob_put(s, m->digest, m->buf, m->len, r->err);
    free(m->buf);
    m->buf = NULL;
    if (rc < 0)
        return rc;
    rc = get_manifest(r, pick.digest, pick.digest, m);
    if (rc == 0 && m->kind != IMG_K_MANIFEST)
        rc = img_err(r->err, -EPROTO, "%s: the index's entry %s is not an image manifest", r->ref.repo, pick.digest);
    else if (rc == 0 && m->len > pick.size)
        rc = img_err(r->err, -EBADMSG, "%s: manifest larger than the index says", pick.digest);
    return rc;
}

int img_pull(struct img_store *s, const char *refstr, const struct img_pull_opts *o,
             char *manifest_digest, size_t len, struct img_err *err)
{
    struct reg *r = calloc(1, sizeof *r);
    struct img_manifest *man = calloc(1, sizeof *man);
    struct doc m = { 0 };
    int rc = r && man ? reg_open(r, refstr, o, err) : img_err(err, -ENOMEM, "out of memory");
    if (rc == 0)
        rc = ping(r);
    if (rc == 0)
        rc = resolve(r, s, &m);
    if (rc == 0)
        rc = img_manifest_parse(m.buf, m.len, man, err);
    if (rc == 0 && man->config.size > IMG_JSON_MAX)
        rc = img_err(err, -EFBIG, "config %s: %llu bytes, more than %u", man->config.digest,
                     (unsigned long long)man->config.size, IMG_JSON_MAX);
    for (unsigned i = 0; rc == 0 && i <= man->nlayer; i++)
        rc = pull_blob(r, s, i ? &man->layer[i - 1] : &man->config, i, man->nlayer + 1);
    if (rc == 0)
        rc = img_blob_put(s, m.digest, m.buf, m.len, err);
    char canon[IMG_REF_MAX + IMG_DIGEST_MAX + 300];
    if (rc == 0 && img_ref_format(&r->ref, canon, sizeof canon) < 0)
        rc = img_err(err, -ENAMETOOLONG, "reference too long");
    if (rc == 0)
        rc = img_tag_set(s, canon, m.digest, err);
    if (rc == 0 && snprintf(manifest_digest, len, "%s", m.digest) >= (int)len)
        rc = -ENAMETOOLONG;
    if (rc == -ECANCELED)
        img_err(err, rc, "pull of %s interrupted", refstr);
    if (r && r->h)
        curl_easy_cleanup(r->h);
    if (r)
        explicit_bzero(r, sizeof *r);
    free(r);
    free(man);
    free(m.buf);
    return rc;
}
