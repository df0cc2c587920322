/* WWW-Authenticate challenges, credentials files, token answers (pure;
 * authparse.h). Everything here is text from a registry or a user's
 * file: bounded, checked, never trusted. */
#include "vmm/image/authparse.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the challenge ---- */

struct lex {
    const char *p, *end;
};

static bool is_tchar(char ch)
{
    return isalnum((unsigned char)ch) || (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

static void skip_ws(struct lex *l)
{
    while (l->p < l->end && (*l->p == ' ' || *l->p == '\t'))
        l->p++;
}

static void skip_ws_commas(struct lex *l)
{
    while (l->p < l->end && (*l->p == ' ' || *l->p == '\t' || *l->p == ','))
        l->p++;
}

/* A token into buf (NUL-ended); its length, 0 if none, -ENAMETOOLONG. */
static int lex_token(struct lex *l, char *buf, size_t len)
{
    size_t n = 0;
    while (l->p < l->end && is_tchar(*l->p)) {
        if (n + 1 >= len)
            return -ENAMETOOLONG;
        buf[n++] = *l->p++;
    }
    buf[n] = 0;
    return (int)n;
}

/* A quoted string (after its opening quote) into buf. */
static int lex_quoted(struct lex *l, char *buf, size_t len, struct img_err *err)
{
    size_t n = 0;
    for (;;) {
        if (l->p >= l->end)
            return img_err(err, -EINVAL, "WWW-Authenticate: unterminated quoted string");
        char ch = *l->p++;
        if (ch == '"')
            break;
        if (ch == '\\') {
            if (l->p >= l->end)
                return img_err(err, -EINVAL, "WWW-Authenticate: unterminated quoted string");
            ch = *l->p++;
        }
        if ((unsigned char)ch < 0x20 || ch == 0x7f)
            return img_err(err, -EINVAL, "WWW-Authenticate: control character in a parameter");
        if (n + 1 >= len)
            return img_err(err, -EINVAL, "WWW-Authenticate: parameter longer than %zu bytes", len - 1);
        buf[n++] = ch;
    }
    buf[n] = 0;
    return 0;
}

/* One parameter's value (token or quoted string) into buf. */
static int lex_value(struct lex *l, char *buf, size_t len, struct img_err *err)
{
    skip_ws(l);
    if (l->p < l->end && *l->p == '"') {
        l->p++;
        return lex_quoted(l, buf, len, err);
    }
    int n = lex_token(l, buf, len);
    if (n == -ENAMETOOLONG)
        return img_err(err, -EINVAL, "WWW-Authenticate: parameter longer than %zu bytes", len - 1);
    /* token68 values may end in '=' padding */
    while (n >= 0 && l->p < l->end && *l->p == '=' && (size_t)n + 1 < len)
        buf[n++] = *l->p++, buf[n] = 0;
    return n > 0 ? 0 : img_err(err, -EINVAL, "WWW-Authenticate: a parameter without a value");
}

/* Where parameter name goes in c (NULL: ignored), and whether seen. */
static char *param_slot(struct img_challenge *c, const char *name, size_t *len, unsigned *bit)
{
    static const struct { const char *name; size_t off, len; } slots[] = {
        { "realm", offsetof(struct img_challenge, realm), sizeof c->realm },
        { "service", offsetof(struct img_challenge, service), sizeof c->service },
        { "scope", offsetof(struct img_challenge, scope), sizeof c->scope },
    };
    for (unsigned i = 0; i < sizeof slots / sizeof slots[0]; i++)
        if (!strcasecmp(name, slots[i].name)) {
            *len = slots[i].len;
            *bit = 1u << i;
            return (char *)c + slots[i].off;
        }
    return NULL;
}

/* The parameters of one challenge into c (c NULL: parsed and dropped);
 * stops before the next challenge's scheme. */
static int lex_params(struct lex *l, struct img_challenge *c, struct img_err *err)
{
    unsigned seen = 0;
    char name[64], junk[IMG_AUTH_HDR_MAX];
    for (;;) {
        skip_ws_commas(l);
        const char *start = l->p;
        int n = lex_token(l, name, sizeof name);
        if (n == -ENAMETOOLONG)
            return img_err(err, -EINVAL, "WWW-Authenticate: parameter name too long");
        if (n == 0) {
            if (l->p < l->end)
                return img_err(err, -EINVAL, "WWW-Authenticate: unexpected character 0x%02x",
                               (unsigned char)*l->p);
            return 0;
        }
        skip_ws(l);
        if (l->p >= l->end || *l->p != '=') {
            l->p = start;           /* the next challenge's scheme */
            return 0;
        }
        l->p++;
        size_t len = sizeof junk;
        unsigned bit = 0;
        char *slot = c ? param_slot(c, name, &len, &bit) : NULL;
        if (slot && (seen & bit))
            return img_err(err, -EINVAL, "WWW-Authenticate: parameter %s given twice", name);
        seen |= bit;
        int r = lex_value(l, slot ? slot : junk, len, err);
        if (r < 0)
            return r;
    }
}

static bool url_is_http(const char *u)
{
    return !strncasecmp(u, "https://", 8) || !strncasecmp(u, "http://", 7);
}

int img_auth_parse_challenge(const char *hdr, size_t len, struct img_challenge *c,
                             struct img_err *err)
{
    memset(c, 0, sizeof *c);
    if (len > IMG_AUTH_HDR_MAX)
        return img_err(err, -EINVAL, "WWW-Authenticate longer than %u bytes", IMG_AUTH_HDR_MAX);
    struct lex l = { hdr, hdr + len };
    struct img_challenge cur;
    for (;;) {
        skip_ws_commas(&l);
        if (l.p >= l.end)
            break;
        char scheme[32];
        int n = lex_token(&l, scheme, sizeof scheme);
        if (n <= 0)
            return img_err(err, -EINVAL, "WWW-Authenticate: expected an auth scheme");
        enum img_auth_scheme s = !strcasecmp(scheme, "bearer") ? IMG_AUTH_BEARER
                                 : !strcasecmp(scheme, "basic") ? IMG_AUTH_BASIC : IMG_AUTH_NONE;
        memset(&cur, 0, sizeof cur);
        int r = lex_params(&l, s != IMG_AUTH_NONE ? &cur : NULL, err);
        if (r < 0)
            return r;
        if (s == IMG_AUTH_BEARER && !url_is_http(cur.realm))
            return img_err(err, -EINVAL, "WWW-Authenticate: Bearer realm \"%.200s\" is not an http(s) URL",
                           cur.realm);
        if (s > c->scheme) {
            *c = cur;
            c->scheme = s;
        }
    }
    if (c->scheme == IMG_AUTH_NONE)
        return img_err(err, -EINVAL, "WWW-Authenticate: no Bearer or Basic challenge");
    return 0;
}

/* ---- base64 ---- */

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int img_b64_encode(const void *in, size_t n, char *out, size_t outlen)
{
    const unsigned char *s = in;
    if (n > (SIZE_MAX - 1) / 4 * 3 - 3 || (n + 2) / 3 * 4 + 1 > outlen)
        return -ENAMETOOLONG;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)s[i + 1] << 8;
        if (i + 2 < n)
            v |= s[i + 2];
        out[o++] = B64[v >> 18 & 63];
        out[o++] = B64[v >> 12 & 63];
        out[o++] = i + 1 < n ? B64[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? B64[v & 63] : '=';
    }
    out[o] = 0;
    return 0;
}

int img_b64_decode(const char *in, size_t n, void *out, size_t outlen)
{
    unsigned char *d = out;
    if (n % 4)
        return -EINVAL;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        uint32_t v = 0;
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            const char *q = in[i + k] ? strchr(B64, in[i + k]) : NULL;
            if (in[i + k] == '=' && k >= 2 && i + 4 == n) {
                pad++;
                v <<= 6;
                continue;
            }
            if (!q || pad)
                return -EINVAL;
            v = v << 6 | (uint32_t)(q - B64);
        }
        if (o + 3 - (size_t)pad > outlen)
            return -ENAMETOOLONG;
        d[o++] = v >> 16 & 0xff;
        if (pad < 2)
            d[o++] = v >> 8 & 0xff;
        if (pad < 1)
            d[o++] = v & 0xff;
    }
    return (int)o;
}

/* ---- credentials ---- */

static bool printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return false;
    return true;
}

/* user and pass (pass may hold ':') into c. */
static int creds_set(struct img_creds *c, const char *user, size_t ulen, const char *pass,
                     struct img_err *err)
{
    if (ulen == 0)
        return img_err(err, -EINVAL, "credentials: empty user name");
    if (ulen >= sizeof c->user || strlen(pass) >= sizeof c->pass)
        return img_err(err, -EINVAL, "credentials: user name or password too long");
    memcpy(c->user, user, ulen);
    c->user[ulen] = 0;
    strcpy(c->pass, pass);
    if (!printable(c->user) || !printable(c->pass) || memchr(c->user, ':', ulen))
        return img_err(err, -EINVAL, "credentials: a control character in the user name or password");
    return 0;
}

int img_creds_parse(const char *s, struct img_creds *c, struct img_err *err)
{
    memset(c, 0, sizeof *c);
    const char *colon = strchr(s, ':');
    if (!colon)
        return img_err(err, -EINVAL, "credentials: expected USER:PASS");
    return creds_set(c, s, (size_t)(colon - s), colon + 1, err);
}

/* "https://Host:Port/v1/" -> "host:port"; docker.io's aliases -> "docker.io". */
static void norm_registry(const char *key, char *out, size_t len)
{
    const char *p = strstr(key, "://");
    p = p ? p + 3 : key;
    size_t n = strcspn(p, "/");
    if (n >= len)
        n = len - 1;
    for (size_t i = 0; i < n; i++)
        out[i] = (char)tolower((unsigned char)p[i]);
    out[n] = 0;
    if (!strcmp(out, "index.docker.io") || !strcmp(out, "registry-1.docker.io"))
        snprintf(out, len, "docker.io");
}

/* One auths entry into c. */
static int entry_creds(json_t *e, const char *key, struct img_creds *c, struct img_err *err)
{
    if (!json_is_object(e))
        return img_err(err, -EINVAL, "auth file: auths[\"%.100s\"] is not an object", key);
    json_t *a = json_object_get(e, "auth");
    if (json_is_string(a) && json_string_length(a) > 0) {
        char raw[sizeof c->user + sizeof c->pass + 2];
        int n = img_b64_decode(json_string_value(a), json_string_length(a), raw, sizeof raw - 1);
        if (n < 0)
            return img_err(err, -EINVAL, "auth file: auths[\"%.100s\"].auth is not base64 of USER:PASS", key);
        raw[n] = 0;
        if (strlen(raw) != (size_t)n)
            return img_err(err, -EINVAL, "auth file: auths[\"%.100s\"].auth holds a NUL byte", key);
        return img_creds_parse(raw, c, err);
    }
    json_t *u = json_object_get(e, "username"), *p = json_object_get(e, "password");
    if (json_is_string(u) && json_is_string(p)) {
        if (strlen(json_string_value(u)) != json_string_length(u) ||
            strlen(json_string_value(p)) != json_string_length(p))
            return img_err(err, -EINVAL, "auth file: auths[\"%.100s\"] holds a NUL byte", key);
        return creds_set(c, json_string_value(u), json_string_length(u), json_string_value(p), err);
    }
    return img_err(err, -EINVAL, "auth file: auths[\"%.100s\"] has neither auth nor username and password "
                   "(credential helpers are not supported)", key);
}

int img_auth_file_lookup(const char *json, size_t len, const char *registry,
                         struct img_creds *c, struct img_err *err)
{
    memset(c, 0, sizeof *c);
    if (len > IMG_AUTH_FILE_MAX)
        return img_err(err, -EINVAL, "auth file larger than %u bytes", IMG_AUTH_FILE_MAX);
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return img_err(err, -EINVAL, "auth file: not JSON: %s (line %d)", je.text, je.line);
    int r = 0;
    json_t *auths = json_object_get(root, "auths");
    if (!json_is_object(root)) {
        r = img_err(err, -EINVAL, "auth file: not a JSON object");
    } else if (auths && !json_is_object(auths)) {
        r = img_err(err, -EINVAL, "auth file: \"auths\" is not an object");
    } else if (auths) {
        char want[256], have[256];
        norm_registry(registry, want, sizeof want);
        const char *key;
        json_t *e;
        json_object_foreach(auths, key, e) {
            norm_registry(key, have, sizeof have);
            if (strcmp(want, have))
                continue;
            r = entry_creds(e, key, c, err);
            r = r < 0 ? r : 1;
            break;
        }
    }
    json_decref(root);
    return r;
}

int img_auth_token_parse(const char *json, size_t len, char *tok, size_t toklen,
                         struct img_err *err)
{
    if (len > IMG_JSON_MAX)
        return img_err(err, -EINVAL, "token answer larger than %u bytes", IMG_JSON_MAX);
    json_error_t je;
    json_t *root = json_loadb(json, len, 0, &je);
    if (!root)
        return img_err(err, -EINVAL, "token answer: not JSON: %s", je.text);
    json_t *t = json_is_object(root) ? json_object_get(root, "token") : NULL;
    if (!json_is_string(t) || !json_string_length(t))
        t = json_is_object(root) ? json_object_get(root, "access_token") : NULL;
    int r = 0;
    if (!json_is_string(t) || !json_string_length(t)) {
        r = img_err(err, -EINVAL, "token answer: no \"token\" or \"access_token\" string");
    } else if (json_string_length(t) >= toklen || json_string_length(t) >= IMG_TOKEN_MAX) {
        r = img_err(err, -EINVAL, "token answer: token longer than %zu bytes",
                    (toklen < IMG_TOKEN_MAX ? toklen : IMG_TOKEN_MAX) - 1);
    } else {
        const char *s = json_string_value(t);
        for (size_t i = 0; i < json_string_length(t) && r == 0; i++)
            if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f)
                r = img_err(err, -EINVAL, "token answer: the token holds a byte that is not printable ASCII");
        if (r == 0)
            memcpy(tok, s, json_string_length(t) + 1);
    }
    json_decref(root);
    return r;
}

/* Append s to buf at *o, percent-escaping all but unreserved characters. */
static int url_escape(char *buf, size_t len, size_t *o, const char *s)
{
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        bool plain = isalnum(ch) || strchr("-._~", ch);
        if (*o + (plain ? 1 : 3) >= len)
            return -ENAMETOOLONG;
        if (plain)
            buf[(*o)++] = (char)ch;
        else
            *o += (size_t)snprintf(buf + *o, len - *o, "%%%02X", ch);
    }
    buf[*o] = 0;
    return 0;
}

int img_auth_token_url(const struct img_challenge *c, const char *dflt_scope, char *url,
                       size_t len)
{
    const char *scope = c->scope[0] ? c->scope : dflt_scope ? dflt_scope : "";
    int n = snprintf(url, len, "%s", c->realm);
    if (n < 0 || (size_t)n >= len)
        return -ENAMETOOLONG;
    size_t o = (size_t)n;
    char sep = strchr(c->realm, '?') ? '&' : '?';
    const char *names[] = { "service=", "scope=" }, *vals[] = { c->service, scope };
    for (int i = 0; i < 2; i++) {
        if (!vals[i][0])
            continue;
        if (o + 1 + strlen(names[i]) >= len)
            return -ENAMETOOLONG;
        o += (size_t)snprintf(url + o, len - o, "%c%s", sep, names[i]);
        sep = '&';
        if (url_escape(url, len, &o, vals[i]) < 0)
            return -ENAMETOOLONG;
    }
    return 0;
}

int img_auth_basic(const struct img_creds *c, char *out, size_t len)
{
    char raw[sizeof c->user + sizeof c->pass + 2];
    int n = snprintf(raw, sizeof raw, "%s:%s", c->user, c->pass);
    if (len < 7)
        return -ENAMETOOLONG;
    memcpy(out, "Basic ", 7);
    return img_b64_encode(raw, (size_t)n, out + 6, len - 6);
}

/* ---- small headers ---- */

int img_retry_after(const char *v)
{
    if (!v)
        return -1;
    while (*v == ' ' || *v == '\t')
        v++;
    if (!isdigit((unsigned char)*v))
        return -1;
    long s = 0;
    for (; isdigit((unsigned char)*v); v++)
        s = s < 3600 ? s * 10 + (*v - '0') : s;
    while (*v == ' ' || *v == '\t' || *v == '\r' || *v == '\n')
        v++;
    if (*v)
        return -1;
    return s > 3600 ? 3600 : (int)s;
}

int img_content_range(const char *v, uint64_t *start)
{
    if (!v || strncasecmp(v, "bytes ", 6))
        return -EINVAL;
    v += 6;
    if (!isdigit((unsigned char)*v))
        return -EINVAL;
    uint64_t s = 0;
    for (; isdigit((unsigned char)*v); v++) {
        if (s > (UINT64_MAX - 9) / 10)
            return -EINVAL;
        s = s * 10 + (uint64_t)(*v - '0');
    }
    if (*v != '-')
        return -EINVAL;
    *start = s;
    return 0;
}
