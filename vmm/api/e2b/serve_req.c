/* `moat serve`'s request decoders (vmm/api/e2b/serve_req.h): pure functions. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vmm/api/e2b/serve_req.h"

#include "devices/net/net_policy.h"

__attribute__((format(printf, 3, 4))) static int bad(char *why, size_t wlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (wlen)
        vsnprintf(why, wlen, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

bool serve_valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > SERVE_ID_MAX || !strcmp(s, ".") || !strcmp(s, ".."))
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  (i > 0 && (c == '-' || c == '_' || c == '.'));
        if (!ok)
            return false;
    }
    return true;
}

bool serve_valid_template(const char *s)
{
    return serve_valid_name(s) && strlen(s) <= SERVE_TEMPLATE_MAX;
}

int serve_e2b_name_in(const char *in, char *out)
{
    size_t n = strlen(in), k = 0;
    if (serve_valid_template(in)) {
        memcpy(out, in, n + 1);
        return 0;
    }
    if (!strpbrk(in, "/:") || !((in[0] >= 'a' && in[0] <= 'z') || (in[0] >= 'A' && in[0] <= 'Z') ||
                                (in[0] >= '0' && in[0] <= '9')))
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        char c = in[i];
        const char *esc = c == '/' ? "_2f" : c == ':' ? "_3a" : c == '_' ? "_5f" : NULL;
        bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                     c == '.';
        if (!esc && !plain)
            return -EINVAL;
        size_t add = esc ? 3 : 1;
        if (k + add > SERVE_TEMPLATE_MAX)
            return -EINVAL;
        memcpy(out + k, esc ? esc : &in[i], add);
        k += add;
    }
    out[k] = 0;
    return serve_valid_template(out) ? 0 : -EINVAL;
}

void serve_e2b_name_out(const char *moat, char *out, size_t n)
{
    bool ns = strstr(moat, "_2f") || strstr(moat, "_3a");
    for (const char *u = strchr(moat, '_'); ns && u; u = strchr(u + 1, '_'))
        ns = !strncmp(u, "_2f", 3) || !strncmp(u, "_3a", 3) || !strncmp(u, "_5f", 3);
    size_t k = 0;
    for (size_t i = 0; moat[i] && k + 1 < n; i++) {
        if (ns && moat[i] == '_') {
            out[k++] = moat[i + 1] == '2' ? '/' : moat[i + 1] == '3' ? ':' : '_';
            i += 2;
        } else {
            out[k++] = moat[i];
        }
    }
    if (n)
        out[k < n ? k : n - 1] = 0;
}

/* ---- routes ---- */

struct route {
    const char *method;
    const char *prefix;     /* the path up to the id ("" when the path has none) */
    const char *suffix;     /* after the id */
    enum serve_ep ep;
};

static const struct route routes[] = {
    { "POST", "/v2/sandboxes", NULL, SV_CREATE },
    { "POST", "/sandboxes", NULL, SV_CREATE },
    { "GET", "/v2/sandboxes", NULL, SV_LIST },
    { "GET", "/sandboxes", NULL, SV_LIST },
    { "GET", "/snapshots", NULL, SV_SNAPSHOTS },
    { "GET", "/health", NULL, SV_HEALTH },
    { "POST", "/v2/sandboxes/", "/connect", SV_CONNECT },
    { "POST", "/sandboxes/", "/resume", SV_CONNECT },
    { "DELETE", "/sandboxes/", "", SV_KILL },
    { "GET", "/sandboxes/", "", SV_INFO },
    { "POST", "/sandboxes/", "/timeout", SV_TIMEOUT },
    { "POST", "/sandboxes/", "/pause", SV_PAUSE },
    { "POST", "/sandboxes/", "/snapshots", SV_SNAPSHOT },
    { "POST", "/sandboxes/", "/fork", SV_FORK },
    { "GET", "/sandboxes/", "/metrics", SV_METRICS },
    { "DELETE", "/templates/", "", SV_TEMPLATE_DELETE },
};

int serve_route(const char *method, const char *path, enum serve_ep *ep, char *id, size_t idlen, char *why,
                size_t wlen)
{
    bool path_known = false;
    if (idlen)
        id[0] = 0;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        const struct route *r = &routes[i];
        size_t pl = strlen(r->prefix);
        if (!r->suffix) {
            if (strcmp(path, r->prefix))
                continue;
            path_known = true;
            if (strcmp(method, r->method))
                continue;
            *ep = r->ep;
            return 0;
        }
        if (strncmp(path, r->prefix, pl))
            continue;
        const char *rest = path + pl;
        const char *slash = strchr(rest, '/');
        size_t il = slash ? (size_t)(slash - rest) : strlen(rest);
        const char *after = rest + il;
        if (strcmp(after, r->suffix) || il == 0)
            continue;
        path_known = true;
        if (strcmp(method, r->method))
            continue;
        char tmp[SERVE_ID_MAX + 2];
        if (il > SERVE_ID_MAX)
            return bad(why, wlen, "id '%.64s...' is too long (at most %d bytes)", rest, SERVE_ID_MAX);
        memcpy(tmp, rest, il);
        tmp[il] = 0;
        bool ok = r->ep == SV_TEMPLATE_DELETE ? serve_valid_template(tmp) : serve_valid_name(tmp);
        if (!ok)
            return bad(why, wlen, "malformed id '%s': 1-%d of A-Z a-z 0-9 - _ . starting with a letter or digit",
                       tmp, r->ep == SV_TEMPLATE_DELETE ? SERVE_TEMPLATE_MAX : SERVE_ID_MAX);
        if (il >= idlen)
            return bad(why, wlen, "id too long");
        memcpy(id, tmp, il + 1);
        *ep = r->ep;
        return 0;
    }
    if (path_known)
        return bad(why, wlen, "method %.16s is not allowed on %.200s", method, path);
    if (wlen)
        snprintf(why, wlen, "no such route: %.16s %.200s", method, path);
    return -ENOENT;
}

/* ---- bodies ---- */

/* Parse a body that must be a JSON object; an empty body is {} when
 * empty_ok. */
static json_t *parse_object(const char *body, size_t len, bool empty_ok, char *why, size_t wlen)
{
    size_t i = 0;
    while (i < len && (body[i] == ' ' || body[i] == '\t' || body[i] == '\r' || body[i] == '\n'))
        i++;
    if (i == len) {
        if (empty_ok)
            return json_object();
        bad(why, wlen, "a JSON object body is required");
        return NULL;
    }
    json_error_t e;
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &e);
    if (!j) {
        bad(why, wlen, "malformed JSON at line %d column %d: %.150s", e.line, e.column, e.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        bad(why, wlen, "the body must be a JSON object");
        return NULL;
    }
    return j;
}

/* An optional timeout (integer seconds 0..SERVE_TIMEOUT_MAX): 1 given, 0
 * absent or null, -EINVAL. */
static int get_timeout(json_t *o, const char *key, uint32_t *out, char *why, size_t wlen)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v))
        return bad(why, wlen, "'%s' must be an integer number of seconds", key);
    json_int_t t = json_integer_value(v);
    if (t < 0 || t > SERVE_TIMEOUT_MAX)
        return bad(why, wlen, "'%s' %lld is out of range (0..%d seconds)", key, (long long)t, SERVE_TIMEOUT_MAX);
    *out = (uint32_t)t;
    return 1;
}

/* An optional boolean: 1 given (*out set), 0 absent or null, -EINVAL. */
static int get_bool(json_t *o, const char *key, bool *out, char *why, size_t wlen)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return bad(why, wlen, "'%s' must be true or false", key);
    *out = json_is_true(v);
    return 1;
}

static bool env_name_ok(const char *k)
{
    if (!((*k >= 'A' && *k <= 'Z') || (*k >= 'a' && *k <= 'z') || *k == '_'))
        return false;
    for (const char *p = k + 1; *p; p++)
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_'))
            return false;
    return true;
}

/* An optional object of strings (metadata, envVars) -> a copy in *out
 * (an empty object when absent). */
static int get_strmap(json_t *o, const char *key, bool env, json_t **out, char *why, size_t wlen)
{
    json_t *v = json_object_get(o, key);
    if (v && !json_is_null(v) && !json_is_object(v))
        return bad(why, wlen, "'%s' must be an object of strings", key);
    if (v && json_object_size(v) > SERVE_META_MAX)
        return bad(why, wlen, "'%s' has more than %d entries", key, SERVE_META_MAX);
    json_t *m = json_object();
    if (!m)
        return -ENOMEM;
    const char *k;
    json_t *val;
    if (v && json_is_object(v))
        json_object_foreach(v, k, val) {
            size_t kl = strlen(k);
            if (kl == 0 || kl > SERVE_KEY_MAX) {
                json_decref(m);
                return bad(why, wlen, "'%s': a key must be 1-%d bytes", key, SERVE_KEY_MAX);
            }
            if (env && !env_name_ok(k)) {
                json_decref(m);
                return bad(why, wlen, "'%s': '%.64s' is not a valid environment variable name", key, k);
            }
            if (!json_is_string(val)) {
                json_decref(m);
                return bad(why, wlen, "'%s.%.64s' must be a string", key, k);
            }
            size_t vl = json_string_length(val);
            if (vl > SERVE_VAL_MAX || memchr(json_string_value(val), 0, vl)) {
                json_decref(m);
                return bad(why, wlen, "'%s.%.64s': a value must be at most %d bytes, without NUL", key, k,
                           SERVE_VAL_MAX);
            }
            if (json_object_set(m, k, val) < 0) {
                json_decref(m);
                return -ENOMEM;
            }
        }
    *out = m;
    return 0;
}

/* Fields whose presence asks for something moat does not do. */
static int refuse_nonempty(json_t *o, const char *key, const char *what, char *why, size_t wlen)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v) || (json_is_array(v) && json_array_size(v) == 0) ||
        (json_is_object(v) && json_object_size(v) == 0))
        return 0;
    return bad(why, wlen, "'%s' is not supported by moat serve (%s)", key, what);
}

/* One allowOut / denyOut entry: an IPv4 or IPv6 CIDR or bare address
 * (nothing else: no ',' options, no ';', no domain names). */
static int net_entry(const char *key, json_t *v, struct np_rule_spec *r, char *why, size_t wlen)
{
    if (!json_is_string(v))
        return bad(why, wlen, "'network.%s': entries must be strings (CIDR blocks or IP addresses)", key);
    const char *t = json_string_value(v);
    size_t n = json_string_length(v);
    if (n == 0 || n > 64 || strlen(t) != n || strspn(t, "0123456789abcdefABCDEF.:/") != n)
        return bad(why, wlen, "'network.%s': '%.64s' is not a CIDR block or an IP address (moat serve takes no "
                   "domain names here)", key, t);
    char w[200];
    if (np_parse_rule(t, r, w, sizeof w) < 0)
        return bad(why, wlen, "'network.%s': %s", key, w);
    return 0;
}

/* Do two CIDRs share an address? */
static bool cidr_overlap(const struct np_rule_spec *a, const struct np_rule_spec *b)
{
    if (a->net.family != b->net.family)
        return false;
    unsigned p = a->prefix < b->prefix ? a->prefix : b->prefix;
    const uint8_t *x = a->net.family == 4 ? a->net.b + 12 : a->net.b, *y = b->net.family == 4 ? b->net.b + 12 : b->net.b;
    for (unsigned i = 0; i < p; i++)
        if (((x[i / 8] ^ y[i / 8]) >> (7 - i % 8)) & 1)
            return false;
    return true;
}

/* "network": {allowOut?: [...], denyOut?: [...]} -> *out with both arrays,
 * each entry in its canonical form. E2B lets an allowOut entry win over a
 * denyOut one; moat's policy lets a deny win: a pair that overlaps (other
 * than a /0 deny, which becomes the default) is refused. */
static int get_network(json_t *o, json_t **out, char *why, size_t wlen)
{
    *out = NULL;
    json_t *net = json_object_get(o, "network");
    if (net && !json_is_null(net) && !json_is_object(net))
        return bad(why, wlen, "'network' must be an object");
    static const char *const keys[2] = { "allowOut", "denyOut" };
    struct np_rule_spec rs[2][SERVE_NET_MAX];
    size_t n[2] = { 0, 0 };
    json_t *res = json_pack("{s:[], s:[]}", keys[0], keys[1]);
    if (!res)
        return -ENOMEM;
    for (int k = 0; k < 2 && net && json_is_object(net); k++) {
        json_t *a = json_object_get(net, keys[k]), *v;
        size_t i;
        if (!a || json_is_null(a))
            continue;
        if (!json_is_array(a) || json_array_size(a) > SERVE_NET_MAX) {
            json_decref(res);
            return bad(why, wlen, "'network.%s' must be an array of at most %d CIDR blocks or IP addresses", keys[k],
                       SERVE_NET_MAX);
        }
        json_array_foreach(a, i, v) {
            if (net_entry(keys[k], v, &rs[k][n[k]], why, wlen) < 0) {
                json_decref(res);
                return -EINVAL;
            }
            json_array_append_new(json_object_get(res, keys[k]), json_string(rs[k][n[k]].text));
            n[k]++;
        }
    }
    for (size_t i = 0; i < n[0]; i++)
        for (size_t j = 0; j < n[1]; j++)
            if (rs[1][j].prefix > 0 && cidr_overlap(&rs[0][i], &rs[1][j])) {
                json_decref(res);
                return bad(why, wlen, "'network': allowOut %s and denyOut %s overlap: in moat's egress policy a "
                           "deny wins over an allow (in E2B's the allow wins); give ranges that do not overlap, or "
                           "deny everything (0.0.0.0/0) and allow some", rs[0][i].text, rs[1][j].text);
            }
    *out = res;
    return 0;
}

int serve_net_policy(int internet, const json_t *network, char *buf, size_t len, char *why, size_t wlen)
{
    const json_t *allow = network ? json_object_get(network, "allowOut") : NULL;
    const json_t *deny = network ? json_object_get(network, "denyOut") : NULL;
    bool all_denied = false;
    size_t i;
    json_t *v;
    json_array_foreach(deny, i, v) {
        const char *t = json_is_string(v) ? json_string_value(v) : "";
        const char *sl = strrchr(t, '/');
        if (sl && !strcmp(sl, "/0"))
            all_denied = true;
    }
    int k = snprintf(buf, len, "default %s", internet == 1 && !all_denied ? "allow" : "deny");
    for (int pass = 0; pass < 2 && k >= 0 && (size_t)k < len; pass++) {
        const json_t *a = pass ? deny : allow;
        json_array_foreach(a, i, v) {
            const char *t = json_is_string(v) ? json_string_value(v) : NULL;
            const char *sl = t ? strrchr(t, '/') : NULL;
            if (!t || !*t || strspn(t, "0123456789abcdefABCDEF.:/") != strlen(t))
                return bad(why, wlen, "network: entry %zu of %s is not a CIDR", i, pass ? "denyOut" : "allowOut");
            if (pass && sl && !strcmp(sl, "/0"))
                continue;
            int m = snprintf(buf + k, len - (size_t)k, "; %s %s", pass ? "deny" : "allow", t);
            if (m < 0 || (size_t)m >= len - (size_t)k) {
                k = -1;
                break;
            }
            k += m;
        }
    }
    if (k < 0 || (size_t)k >= len) {
        bad(why, wlen, "network: the policy is longer than %zu bytes", len - 1);
        return -E2BIG;
    }
    return 0;
}

void serve_create_free(struct serve_create *c)
{
    json_decref(c->metadata);
    json_decref(c->env);
    json_decref(c->network);
    c->metadata = c->env = c->network = NULL;
}

int serve_decode_create(const char *body, size_t len, struct serve_create *c, char *why, size_t wlen)
{
    memset(c, 0, sizeof *c);
    c->internet = -1;
    c->timeout = SERVE_DEFAULT_TIMEOUT;
    json_t *o = parse_object(body, len, false, why, wlen);
    if (!o)
        return -EINVAL;
    int r = 0;
    json_t *t = json_object_get(o, "templateID");
    bool b = false;
    if (!t || !json_is_string(t)) {
        r = bad(why, wlen, "'templateID' (a string) is required");
        goto out;
    }
    if (strlen(json_string_value(t)) != json_string_length(t) ||
        serve_e2b_name_in(json_string_value(t), c->template_id) < 0) {
        r = bad(why, wlen, "'templateID' '%.64s' is not a template name (1-%d of A-Z a-z 0-9 - _ ., starting "
                "with a letter or digit, or team/name:tag within that)", json_string_value(t), SERVE_TEMPLATE_MAX);
        goto out;
    }
    if ((r = get_timeout(o, "timeout", &c->timeout, why, wlen)) < 0)
        goto out;
    if ((r = get_bool(o, "autoPause", &c->auto_pause, why, wlen)) < 0)
        goto out;
    if ((r = get_bool(o, "allow_internet_access", &b, why, wlen)) < 0)
        goto out;
    if (r == 1)
        c->internet = b;
    if ((r = get_bool(o, "secure", &b, why, wlen)) < 0)
        goto out;
    if ((r = get_bool(o, "autoPauseMemory", &b, why, wlen)) < 0)
        goto out;
    if (r == 1 && !b) {
        r = bad(why, wlen, "'autoPauseMemory': false is not supported: moat pauses keep memory");
        goto out;
    }
    json_t *ar = json_object_get(o, "autoResume");
    if (ar && !json_is_null(ar)) {
        json_t *en = json_is_object(ar) ? json_object_get(ar, "enabled") : NULL;
        if (!en || !json_is_boolean(en)) {
            r = bad(why, wlen, "'autoResume' must be {\"enabled\": true|false}");
            goto out;
        }
        c->auto_resume = json_is_true(en);
    }
    if ((r = get_network(o, &c->network, why, wlen)) < 0)
        goto out;
    if ((r = refuse_nonempty(o, "volumeMounts", "no volumes", why, wlen)) < 0 ||
        (r = refuse_nonempty(o, "mcp", "no MCP gateway in moat's guests", why, wlen)) < 0 ||
        (r = refuse_nonempty(o, "iam", "no IAM tokens", why, wlen)) < 0)
        goto out;
    if ((r = get_strmap(o, "metadata", false, &c->metadata, why, wlen)) < 0)
        goto out;
    if ((r = get_strmap(o, "envVars", true, &c->env, why, wlen)) < 0)
        goto out;
    r = 0;
out:
    json_decref(o);
    if (r < 0)
        serve_create_free(c);
    return r;
}

static int memory_flag(json_t *o, char *why, size_t wlen)
{
    bool m = true;
    int r = get_bool(o, "memory", &m, why, wlen);
    if (r < 0)
        return r;
    if (!m)
        return bad(why, wlen, "'memory': false (without memory) is not supported: moat's pause keeps memory");
    return 0;
}

int serve_decode_connect(const char *body, size_t len, uint32_t *timeout, char *why, size_t wlen)
{
    *timeout = 0;
    json_t *o = parse_object(body, len, true, why, wlen);
    if (!o)
        return -EINVAL;
    int r = get_timeout(o, "timeout", timeout, why, wlen);
    if (r >= 0)
        r = memory_flag(o, why, wlen);
    json_decref(o);
    return r < 0 ? r : 0;
}

int serve_decode_timeout(const char *body, size_t len, uint32_t *timeout, char *why, size_t wlen)
{
    *timeout = 0;
    json_t *o = parse_object(body, len, false, why, wlen);
    if (!o)
        return -EINVAL;
    int r = get_timeout(o, "timeout", timeout, why, wlen);
    json_decref(o);
    if (r == 0)
        return bad(why, wlen, "'timeout' (integer seconds) is required");
    return r < 0 ? r : 0;
}

int serve_decode_pause(const char *body, size_t len, char *why, size_t wlen)
{
    json_t *o = parse_object(body, len, true, why, wlen);
    if (!o)
        return -EINVAL;
    int r = memory_flag(o, why, wlen);
    json_decref(o);
    return r;
}

int serve_decode_fork(const char *body, size_t len, uint32_t *timeout, unsigned *count, char *why, size_t wlen)
{
    *timeout = SERVE_DEFAULT_TIMEOUT;
    *count = 1;
    json_t *o = parse_object(body, len, true, why, wlen);
    if (!o)
        return -EINVAL;
    int r = get_timeout(o, "timeout", timeout, why, wlen);
    json_t *c = json_object_get(o, "count");
    if (r >= 0 && c && !json_is_null(c)) {
        if (!json_is_integer(c) || json_integer_value(c) < 1 || json_integer_value(c) > SERVE_FORK_MAX)
            r = bad(why, wlen, "'count' must be an integer 1..%d", SERVE_FORK_MAX);
        else
            *count = (unsigned)json_integer_value(c);
    }
    json_decref(o);
    return r < 0 ? r : 0;
}

int serve_decode_snapshot(const char *body, size_t len, char *name, size_t nlen, char *why, size_t wlen)
{
    if (nlen)
        name[0] = 0;
    json_t *o = parse_object(body, len, true, why, wlen);
    if (!o)
        return -EINVAL;
    int r = 0;
    json_t *n = json_object_get(o, "name");
    if (n && !json_is_null(n)) {
        char m[SERVE_TEMPLATE_MAX + 1];
        if (!json_is_string(n) || strlen(json_string_value(n)) != json_string_length(n) ||
            serve_e2b_name_in(json_string_value(n), m) < 0 || strlen(m) >= nlen)
            r = bad(why, wlen, "'name' must be a template name (1-%d of A-Z a-z 0-9 - _ ., starting with a "
                    "letter or digit, or team/name:tag within that)", SERVE_TEMPLATE_MAX);
        else
            memcpy(name, m, strlen(m) + 1);
    }
    json_decref(o);
    return r;
}

/* ---- list queries ---- */

int64_t serve_usec(double t)
{
    return t <= 0 ? 0 : t >= 9e12 ? (int64_t)9e18 : (int64_t)(t * 1e6 + 0.5);
}

void serve_next_make(const char *id, int64_t usec, char *out, size_t n)
{
    snprintf(out, n, "%s~%lld", id, (long long)usec);
}

int serve_list_order_cmp(int order, int64_t ta, const char *ia, int64_t tb, const char *ib)
{
    if (order && ta != tb)
        return (ta < tb ? -1 : 1) * (order < 0 ? -1 : 1);
    int c = strcmp(ia, ib);
    return c < 0 ? -1 : c > 0;
}

/* nextToken: an id (a listing by id) or "ID~USEC" (an ordered one). */
static int next_arg(struct serve_list_q *q, const char *v, char *why, size_t wlen)
{
    char id[SERVE_ID_MAX + 2];
    const char *t = strrchr(v, '~');
    size_t il = t ? (size_t)(t - v) : strlen(v);
    int64_t us = -1;
    bool ok = il <= SERVE_ID_MAX;
    if (ok && t) {
        size_t dl = strlen(t + 1);
        ok = dl >= 1 && dl <= 18 && strspn(t + 1, "0123456789") == dl;
        us = 0;
        for (size_t i = 0; ok && i < dl; i++)
            us = us * 10 + (t[1 + i] - '0');
    }
    if (ok) {
        memcpy(id, v, il);
        id[il] = 0;
        ok = !*v || serve_valid_name(id);
    } else {
        il = 0;
    }
    if (!ok)
        return bad(why, wlen, "nextToken: '%.64s' is not a token this server gave", v);
    memcpy(q->next, id, il + 1);     /* il <= SERVE_ID_MAX */
    q->next_usec = us;
    return 0;
}

void serve_list_init(struct serve_list_q *q)
{
    memset(q, 0, sizeof *q);
    q->next_usec = -1;
    q->running = q->paused = true;
    q->limit = SERVE_LIST_MAX;
}

void serve_list_free(struct serve_list_q *q)
{
    json_decref(q->metadata);
    q->metadata = NULL;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Percent-decode s[0..n) into out (form: '+' is a space); -EINVAL on a
 * bad escape, a NUL or no room. */
static int pct_decode(const char *s, size_t n, bool form, char *out, size_t olen)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%') {
            if (i + 2 >= n)
                return -EINVAL;
            int h = hexval(s[i + 1]), l = hexval(s[i + 2]);
            if (h < 0 || l < 0)
                return -EINVAL;
            c = (char)(h * 16 + l);
            i += 2;
        } else if (c == '+' && form) {
            c = ' ';
        }
        if (c == 0 || o + 1 >= olen)
            return -EINVAL;
        out[o++] = c;
    }
    out[o] = 0;
    return 0;
}

static int parse_metadata_query(struct serve_list_q *q, const char *v, char *why, size_t wlen)
{
    if (!q->metadata && !(q->metadata = json_object()))
        return -ENOMEM;
    const char *p = v;
    while (*p) {
        const char *amp = strchr(p, '&');
        size_t n = amp ? (size_t)(amp - p) : strlen(p);
        const char *eq = memchr(p, '=', n);
        if (n) {
            if (!eq || eq == p)
                return bad(why, wlen, "metadata: '%.*s' is not KEY=VALUE", (int)(n > 64 ? 64 : n), p);
            /* The SDK encodes each key and value, then the pairs as a
             * form: two decodings. */
            char k1[SERVE_KEY_MAX * 3 + 1], k2[SERVE_KEY_MAX + 1], v1[SERVE_VAL_MAX * 3 + 1], v2[SERVE_VAL_MAX + 1];
            if (pct_decode(p, (size_t)(eq - p), true, k1, sizeof k1) < 0 ||
                pct_decode(k1, strlen(k1), false, k2, sizeof k2) < 0 || !k2[0] ||
                pct_decode(eq + 1, n - (size_t)(eq + 1 - p), true, v1, sizeof v1) < 0 ||
                pct_decode(v1, strlen(v1), false, v2, sizeof v2) < 0)
                return bad(why, wlen, "metadata: a malformed or too long key or value");
            if (json_object_size(q->metadata) >= SERVE_META_MAX)
                return bad(why, wlen, "metadata: more than %d pairs", SERVE_META_MAX);
            json_t *s = json_stringn(v2, strlen(v2));
            if (!s || json_object_set_new(q->metadata, k2, s) < 0)
                return bad(why, wlen, "metadata: a key or value that is not UTF-8");
        }
        if (!amp)
            break;
        p = amp + 1;
    }
    return 0;
}

static int parse_rfc3339(const char *v, double *out)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *e = strptime(v, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!e)
        return -EINVAL;
    double frac = 0;
    if (*e == '.') {
        char *end;
        frac = strtod(e, &end);
        if (end == e + 1)
            return -EINVAL;
        e = end;
    }
    if (strcmp(e, "Z") && strcmp(e, "+00:00"))
        return -EINVAL;
    time_t t = timegm(&tm);
    if (t == (time_t)-1)
        return -EINVAL;
    *out = (double)t + frac;
    return 0;
}

int serve_list_arg(struct serve_list_q *q, const char *key, const char *value, char *why, size_t wlen)
{
    const char *v = value ? value : "";
    if (!strcmp(key, "state")) {
        if (!q->state_given)
            q->running = q->paused = false;
        q->state_given = true;
        const char *p = v;
        for (;;) {
            const char *c = strchr(p, ',');
            size_t n = c ? (size_t)(c - p) : strlen(p);
            if (n == 7 && !strncmp(p, "running", 7))
                q->running = true;
            else if (n == 6 && !strncmp(p, "paused", 6))
                q->paused = true;
            else
                return bad(why, wlen, "state: '%.*s' is not running or paused", (int)(n > 32 ? 32 : n), p);
            if (!c)
                break;
            p = c + 1;
        }
        return 0;
    }
    if (!strcmp(key, "metadata"))
        return parse_metadata_query(q, v, why, wlen);
    if (!strcmp(key, "limit")) {
        char *end;
        errno = 0;
        long l = strtol(v, &end, 10);
        if (!*v || *end || errno || l < 1 || l > SERVE_LIST_MAX)
            return bad(why, wlen, "limit: '%.32s' is not an integer 1..%d", v, SERVE_LIST_MAX);
        q->limit = (unsigned)l;
        return 0;
    }
    if (!strcmp(key, "nextToken"))
        return next_arg(q, v, why, wlen);
    if (!strcmp(key, "template") || !strcmp(key, "name")) {
        char m[SERVE_TEMPLATE_MAX + 1] = "";
        if (*v && serve_e2b_name_in(v, m) < 0)
            return bad(why, wlen, "%s: '%.64s' is not a template name", key, v);
        snprintf(key[0] == 't' ? q->template_id : q->name, sizeof q->name, "%s", m);
        return 0;
    }
    if (!strcmp(key, "sandboxID")) {
        if (*v && !serve_valid_name(v))
            return bad(why, wlen, "sandboxID: '%.64s' is not a sandbox id", v);
        snprintf(q->sandbox_id, sizeof q->sandbox_id, "%s", v);
        return 0;
    }
    if (!strcmp(key, "startedAfter")) {
        if (*v && parse_rfc3339(v, &q->started_after) < 0)
            return bad(why, wlen, "startedAfter: '%.64s' is not an RFC 3339 UTC time", v);
        return 0;
    }
    if (!strcmp(key, "order")) {
        if (strcmp(v, "asc") && strcmp(v, "desc") && *v)
            return bad(why, wlen, "order: '%.16s' is not asc or desc", v);
        q->order = !*v ? 0 : !strcmp(v, "asc") ? 1 : -1;
        return 0;
    }
    return bad(why, wlen, "unknown query parameter '%.64s'", key);
}

bool serve_list_meta_match(const struct serve_list_q *q, const json_t *metadata)
{
    if (!q->metadata)
        return true;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)q->metadata, k, v) {
        json_t *m = metadata ? json_object_get(metadata, k) : NULL;
        if (!m || !json_is_string(m) || !json_equal(m, v))
            return false;
    }
    return true;
}

/* ---- ADDR:PORT ---- */

int serve_parse_hostport(const char *s, char *addr, size_t alen, unsigned *port, char *why, size_t wlen)
{
    const char *colon;
    size_t al;
    const char *a = s;
    if (*s == '[') {
        const char *rb = strchr(s, ']');
        if (!rb || rb[1] != ':')
            return bad(why, wlen, "'%.80s': expected [IPV6]:PORT", s);
        a = s + 1;
        al = (size_t)(rb - a);
        colon = rb + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon || strchr(s, ':') != colon)
            return bad(why, wlen, "'%.80s': expected ADDR:PORT (an IPv6 address in brackets)", s);
        al = (size_t)(colon - s);
    }
    if (al == 0 || al >= alen)
        return bad(why, wlen, "'%.80s': no address, or too long", s);
    for (size_t i = 0; i < al; i++)
        if (!((a[i] >= '0' && a[i] <= '9') || (a[i] >= 'a' && a[i] <= 'f') || (a[i] >= 'A' && a[i] <= 'F') ||
              a[i] == '.' || a[i] == ':'))
            return bad(why, wlen, "'%.80s': the address must be numeric (IPv4 or [IPv6])", s);
    char *end;
    errno = 0;
    unsigned long p = strtoul(colon + 1, &end, 10);
    if (!colon[1] || *end || errno || p < 1 || p > 65535 || colon[1] == '-' || colon[1] == '+')
        return bad(why, wlen, "'%.80s': the port must be 1..65535", s);
    memcpy(addr, a, al);
    addr[al] = 0;
    *port = (unsigned)p;
    return 0;
}

/* ---- serve.json ---- */

void serve_state_free(struct serve_state *st)
{
    json_decref(st->metadata);
    json_decref(st->env);
    json_decref(st->network);
    st->metadata = st->env = st->network = NULL;
}

static bool hex_token(const char *s)
{
    if (strlen(s) != SERVE_TOKEN_LEN)
        return false;
    for (const char *p = s; *p; p++)
        if (hexval(*p) < 0 || (*p >= 'A' && *p <= 'F'))
            return false;
    return true;
}

int serve_state_decode(const char *text, size_t len, struct serve_state *st, char *why, size_t wlen)
{
    memset(st, 0, sizeof *st);
    json_t *o = parse_object(text, len, false, why, wlen);
    if (!o)
        return -EINVAL;
    int r = -EINVAL;
    json_t *tpl = json_object_get(o, "templateID"), *tok = json_object_get(o, "envdAccessToken"),
           *cid = json_object_get(o, "clientID"), *sa = json_object_get(o, "startedAt"),
           *dl = json_object_get(o, "deadline"), *to = json_object_get(o, "timeout"),
           *ap = json_object_get(o, "autoPause"), *ar = json_object_get(o, "autoResume"),
           *in = json_object_get(o, "allowInternetAccess"), *nd = json_object_get(o, "netDevice"),
           *net = json_object_get(o, "network");
    if (!json_is_string(tpl) || !serve_valid_template(json_string_value(tpl))) {
        bad(why, wlen, "serve.json: templateID");
        goto out;
    }
    if (!json_is_string(tok) || !hex_token(json_string_value(tok)) || !json_is_string(cid) ||
        !hex_token(json_string_value(cid))) {
        bad(why, wlen, "serve.json: envdAccessToken or clientID");
        goto out;
    }
    if (!json_is_number(sa) || !json_is_number(dl) || json_number_value(sa) < 0 || json_number_value(dl) < 0 ||
        json_number_value(sa) > 1e11 || json_number_value(dl) > 1e11) {
        bad(why, wlen, "serve.json: startedAt or deadline");
        goto out;
    }
    if (!json_is_integer(to) || json_integer_value(to) < 0 || json_integer_value(to) > SERVE_TIMEOUT_MAX ||
        !json_is_boolean(ap) || !json_is_boolean(ar) || !(json_is_boolean(in) || json_is_null(in))) {
        bad(why, wlen, "serve.json: timeout, autoPause, autoResume or allowInternetAccess");
        goto out;
    }
    snprintf(st->template_id, sizeof st->template_id, "%s", json_string_value(tpl));
    snprintf(st->token, sizeof st->token, "%s", json_string_value(tok));
    snprintf(st->client_id, sizeof st->client_id, "%s", json_string_value(cid));
    st->started_at = json_number_value(sa);
    st->deadline = json_number_value(dl);
    st->timeout = (uint32_t)json_integer_value(to);
    st->auto_pause = json_is_true(ap);
    st->auto_resume = json_is_true(ar);
    st->internet = json_is_null(in) ? -1 : json_is_true(in);
    /* netDevice and network came later: absent, none (no policy set) */
    if ((nd && !json_is_boolean(nd)) || (net && !json_is_object(net))) {
        bad(why, wlen, "serve.json: netDevice or network");
        goto out;
    }
    st->net_device = json_is_true(nd);
    if ((r = get_strmap(o, "metadata", false, &st->metadata, why, wlen)) < 0 ||
        (r = get_strmap(o, "envVars", true, &st->env, why, wlen)) < 0 ||
        (net && (r = get_network(o, &st->network, why, wlen)) < 0)) {
        serve_state_free(st);
        goto out;
    }
    r = 0;
out:
    json_decref(o);
    return r;
}

char *serve_state_encode(const struct serve_state *st)
{
    json_t *o = json_pack("{s:s, s:s, s:s, s:f, s:f, s:I, s:b, s:b, s:o}", "templateID", st->template_id,
                          "envdAccessToken", st->token, "clientID", st->client_id, "startedAt", st->started_at,
                          "deadline", st->deadline, "timeout", (json_int_t)st->timeout, "autoPause",
                          st->auto_pause, "autoResume", st->auto_resume, "allowInternetAccess",
                          st->internet < 0 ? json_null() : json_boolean(st->internet));
    if (!o)
        return NULL;
    char *s = NULL;
    if (json_object_set_new(o, "metadata", st->metadata ? json_deep_copy(st->metadata) : json_object()) == 0 &&
        json_object_set_new(o, "envVars", st->env ? json_deep_copy(st->env) : json_object()) == 0 &&
        json_object_set_new(o, "netDevice", json_boolean(st->net_device)) == 0 &&
        (!st->network || json_object_set_new(o, "network", json_deep_copy(st->network)) == 0))
        s = json_dumps(o, JSON_SORT_KEYS | JSON_INDENT(1));
    json_decref(o);
    return s;
}

void serve_time_text(double t, char *buf, size_t len)
{
    time_t s = (time_t)t;
    struct tm tm;
    gmtime_r(&s, &tm);
    char b[40];
    strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%S", &tm);
    int ms = (int)((t - (double)s) * 1000);
    snprintf(buf, len, "%s.%03dZ", b, ms < 0 ? 0 : ms > 999 ? 999 : ms);
}

bool serve_secret_eq(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char d = la != lb;
    for (size_t i = 0; i < la; i++)
        d |= (unsigned char)(a[i] ^ b[i < lb ? i : 0]);
    return d == 0 && lb > 0;
}
