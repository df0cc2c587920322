/* Connect JSON codec and envd request decoders (serve_connect.h). */
#include "vmm/api/e2b/serve_connect.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const code_names[] = {
    [CX_CANCELED] = "canceled",
    [CX_UNKNOWN] = "unknown",
    [CX_INVALID_ARGUMENT] = "invalid_argument",
    [CX_DEADLINE_EXCEEDED] = "deadline_exceeded",
    [CX_NOT_FOUND] = "not_found",
    [CX_ALREADY_EXISTS] = "already_exists",
    [CX_PERMISSION_DENIED] = "permission_denied",
    [CX_RESOURCE_EXHAUSTED] = "resource_exhausted",
    [CX_FAILED_PRECONDITION] = "failed_precondition",
    [CX_ABORTED] = "aborted",
    [CX_OUT_OF_RANGE] = "out_of_range",
    [CX_UNIMPLEMENTED] = "unimplemented",
    [CX_INTERNAL] = "internal",
    [CX_UNAVAILABLE] = "unavailable",
    [CX_DATA_LOSS] = "data_loss",
    [CX_UNAUTHENTICATED] = "unauthenticated",
};

const char *cx_code_name(enum cx_code c)
{
    if ((unsigned)c == 0 || (unsigned)c >= sizeof code_names / sizeof code_names[0])
        return NULL;
    return code_names[c];
}

unsigned cx_code_http(enum cx_code c)
{
    switch (c) {
    case CX_CANCELED: return 499;
    case CX_INVALID_ARGUMENT: return 400;
    case CX_DEADLINE_EXCEEDED: return 504;
    case CX_NOT_FOUND: return 404;
    case CX_ALREADY_EXISTS: return 409;
    case CX_PERMISSION_DENIED: return 403;
    case CX_RESOURCE_EXHAUSTED: return 429;
    case CX_FAILED_PRECONDITION: return 400;
    case CX_ABORTED: return 409;
    case CX_OUT_OF_RANGE: return 400;
    case CX_UNIMPLEMENTED: return 501;
    case CX_UNAVAILABLE: return 503;
    case CX_UNAUTHENTICATED: return 401;
    default: return 500;
    }
}

enum cx_code cx_code_from_errno(int err)
{
    switch (err < 0 ? -err : err) {
    case ENOENT: return CX_NOT_FOUND;
    case EEXIST: return CX_ALREADY_EXISTS;
    case EACCES:
    case EPERM: return CX_PERMISSION_DENIED;
    case ENOTDIR:
    case EISDIR:
    case EINVAL:
    case ENAMETOOLONG:
    case ELOOP: return CX_INVALID_ARGUMENT;
    case ENOTEMPTY: return CX_FAILED_PRECONDITION;
    case ENOSPC:
    case EDQUOT: return CX_RESOURCE_EXHAUSTED;
    default: return CX_INTERNAL;
    }
}

static char *dump(json_t *j)
{
    if (!j)
        return NULL;
    char *s = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(j);
    return s;
}

static json_t *error_obj(enum cx_code c, const char *msg)
{
    const char *name = cx_code_name(c);
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_object_set_new(o, "code", json_string(name ? name : "unknown"));
    if (msg && *msg) {
        /* Messages may carry guest bytes: keep only valid UTF-8. */
        json_t *m = json_string(msg);
        json_object_set_new(o, "message", m ? m : json_string("(message not UTF-8)"));
    }
    return o;
}

char *cx_error_json(enum cx_code c, const char *msg)
{
    return dump(error_obj(c, msg));
}

char *cx_end_json(enum cx_code c, const char *msg)
{
    if (c == CX_OK)
        return strdup("{}");
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_object_set_new(o, "error", error_obj(c, msg));
    return dump(o);
}

int cx_envelope_append(uint8_t **buf, size_t *len, size_t *cap, uint8_t flags,
                       const void *data, size_t n)
{
    if (n > UINT32_MAX)
        return -E2BIG;
    size_t need = *len + CX_ENV_HDR + n;
    if (need > *cap) {
        size_t nc = *cap ? *cap : 1024;
        while (nc < need)
            nc *= 2;
        uint8_t *p = realloc(*buf, nc);
        if (!p)
            return -ENOMEM;
        *buf = p;
        *cap = nc;
    }
    uint8_t *h = *buf + *len;
    h[0] = flags;
    h[1] = (uint8_t)(n >> 24);
    h[2] = (uint8_t)(n >> 16);
    h[3] = (uint8_t)(n >> 8);
    h[4] = (uint8_t)n;
    if (n)
        memcpy(h + CX_ENV_HDR, data, n);
    *len = need;
    return 0;
}

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

int cx_envelope_one(const uint8_t *p, size_t n, const uint8_t **msg, size_t *msglen,
                    char *err, size_t errlen)
{
    if (n < CX_ENV_HDR)
        return fail(err, errlen, "request body is not a Connect envelope (%zu bytes)", n);
    if (p[0] & CX_FLAG_COMPRESSED)
        return fail(err, errlen, "compressed request messages are not supported");
    if (p[0] != 0)
        return fail(err, errlen, "unexpected envelope flags 0x%02x", p[0]);
    uint32_t len = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
    if (len != n - CX_ENV_HDR)
        return fail(err, errlen, "envelope length %" PRIu32 " does not match the body (%zu bytes)",
                    len, n - CX_ENV_HDR);
    *msg = p + CX_ENV_HDR;
    *msglen = len;
    return 0;
}

int cx_timeout_parse(const char *s, uint64_t *ms)
{
    if (!s || !*s || strlen(s) > 10)
        return -EINVAL;
    uint64_t v = 0;
    for (const char *c = s; *c; c++) {
        if (*c < '0' || *c > '9')
            return -EINVAL;
        v = v * 10 + (uint64_t)(*c - '0');
    }
    *ms = v;
    return 0;
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *cx_b64_encode(const void *data, size_t n)
{
    const uint8_t *p = data;
    if (n > (SIZE_MAX - 1) / 4 * 3 - 3)
        return NULL;
    char *o = malloc((n + 2) / 3 * 4 + 1), *q = o;
    if (!o)
        return NULL;
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        *q++ = b64[v >> 18];
        *q++ = b64[(v >> 12) & 63];
        *q++ = b64[(v >> 6) & 63];
        *q++ = b64[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)p[i] << 16;
        *q++ = b64[v >> 18];
        *q++ = b64[(v >> 12) & 63];
        *q++ = '=';
        *q++ = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
        *q++ = b64[v >> 18];
        *q++ = b64[(v >> 12) & 63];
        *q++ = b64[(v >> 6) & 63];
        *q++ = '=';
    }
    *q = 0;
    return o;
}

static int b64_val(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+' || c == '-')
        return 62;
    if (c == '/' || c == '_')
        return 63;
    return -1;
}

int cx_b64_decode(const char *s, size_t n, uint8_t **out, size_t *outlen)
{
    /* Padding: at most two '=' at the very end, and then a multiple of 4. */
    size_t pad = 0;
    while (pad < n && pad < 2 && s[n - 1 - pad] == '=')
        pad++;
    if (pad && n % 4)
        return -EINVAL;
    size_t m = n - pad;             /* data characters */
    if (m % 4 == 1)
        return -EINVAL;
    uint8_t *o = malloc(m / 4 * 3 + 3);
    if (!o)
        return -ENOMEM;
    size_t k = 0;
    uint32_t acc = 0;
    unsigned bits = 0;
    for (size_t i = 0; i < m; i++) {
        int v = b64_val(s[i]);
        if (v < 0) {
            free(o);
            return -EINVAL;
        }
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            o[k++] = (uint8_t)(acc >> bits);
        }
    }
    /* Leftover bits must be zero (a canonical encoding). */
    if (bits && (acc & ((1u << bits) - 1))) {
        free(o);
        return -EINVAL;
    }
    *out = o;
    *outlen = k;
    return 0;
}

int cx_path_resolve(const char *in, const char *home, char *out, char *err, size_t errlen)
{
    const char *rest;
    if (in[0] == '/') {
        if (strlen(in) > CX_MAX_PATH)
            return fail(err, errlen, "path is longer than %u bytes", CX_MAX_PATH);
        strcpy(out, in);
        return 0;
    }
    if (in[0] == 0 || strcmp(in, "~") == 0)
        rest = "";
    else if (in[0] == '~' && in[1] == '/')
        rest = in + 2;
    else if (in[0] == '~')
        return fail(err, errlen, "path '%.64s': only the home directory '~' is known", in);
    else
        rest = in;
    int k = snprintf(out, CX_MAX_PATH + 1, "%s%s%s", home, *rest ? "/" : "", rest);
    if (k < 0 || (size_t)k > CX_MAX_PATH)
        return fail(err, errlen, "path is longer than %u bytes", CX_MAX_PATH);
    return 0;
}

/* ---- JSON request decoding ---- */

static json_t *parse_obj(const char *json, size_t n, char *err, size_t errlen)
{
    json_error_t je;
    json_t *j = json_loadb(json, n, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!j) {
        fail(err, errlen, "request body is not JSON: %s", je.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        fail(err, errlen, "request body is not a JSON object");
        return NULL;
    }
    return j;
}

/* A field under its JSON name or its proto name; JSON null is absent. */
static json_t *field(json_t *o, const char *camel, const char *snake)
{
    json_t *v = json_object_get(o, camel);
    if (!v && snake)
        v = json_object_get(o, snake);
    return json_is_null(v) ? NULL : v;
}

/* A string field: copies at most max bytes (no NUL) into a malloc'd or
 * fixed buffer. */
static int get_str(json_t *v, const char *name, size_t max, int allow_empty, const char **s,
                   char *err, size_t errlen)
{
    if (!json_is_string(v))
        return fail(err, errlen, "%s must be a string", name);
    size_t len = json_string_length(v);
    const char *p = json_string_value(v);
    if (memchr(p, 0, len))
        return fail(err, errlen, "%s contains a NUL byte", name);
    if (len > max)
        return fail(err, errlen, "%s is longer than %zu bytes", name, max);
    if (!len && !allow_empty)
        return fail(err, errlen, "%s is empty", name);
    *s = p;
    return 0;
}

static int get_u32(json_t *v, const char *name, uint32_t *out, char *err, size_t errlen)
{
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if (i < 0 || i > (json_int_t)UINT32_MAX)
            return fail(err, errlen, "%s is out of range", name);
        *out = (uint32_t)i;
        return 0;
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        size_t len = json_string_length(v);
        uint64_t x = 0;
        if (!len || len > 10)
            return fail(err, errlen, "%s is not a uint32", name);
        for (size_t i = 0; i < len; i++) {
            if (s[i] < '0' || s[i] > '9')
                return fail(err, errlen, "%s is not a uint32", name);
            x = x * 10 + (uint64_t)(s[i] - '0');
        }
        if (x > UINT32_MAX)
            return fail(err, errlen, "%s is out of range", name);
        *out = (uint32_t)x;
        return 0;
    }
    return fail(err, errlen, "%s must be a number", name);
}

static int get_bool(json_t *v, const char *name, int *out, char *err, size_t errlen)
{
    if (!json_is_boolean(v))
        return fail(err, errlen, "%s must be true or false", name);
    *out = json_is_true(v);
    return 0;
}

static int decode_selector(json_t *root, struct cx_selector *sel, char *err, size_t errlen)
{
    memset(sel, 0, sizeof *sel);
    json_t *p = field(root, "process", NULL);
    if (!p)
        return fail(err, errlen, "process (a selector: pid or tag) is missing");
    if (!json_is_object(p))
        return fail(err, errlen, "process must be an object");
    json_t *pid = field(p, "pid", NULL), *tag = field(p, "tag", NULL);
    if (pid && tag)
        return fail(err, errlen, "process: give pid or tag, not both");
    if (pid)
        return get_u32(pid, "process.pid", &sel->pid, err, errlen);
    if (tag) {
        const char *s;
        int r = get_str(tag, "process.tag", CX_MAX_TAG, 0, &s, err, errlen);
        if (r < 0)
            return r;
        sel->by_tag = 1;
        strcpy(sel->tag, s);
        return 0;
    }
    return fail(err, errlen, "process: pid or tag is required");
}

static int decode_pty(json_t *pty, uint32_t *cols, uint32_t *rows, char *err, size_t errlen)
{
    if (!json_is_object(pty))
        return fail(err, errlen, "pty must be an object");
    json_t *size = field(pty, "size", NULL);
    *cols = *rows = 0;
    if (!size)
        return 0;
    if (!json_is_object(size))
        return fail(err, errlen, "pty.size must be an object");
    json_t *c = field(size, "cols", NULL), *r = field(size, "rows", NULL);
    int e = 0;
    if (c)
        e = get_u32(c, "pty.size.cols", cols, err, errlen);
    if (!e && r)
        e = get_u32(r, "pty.size.rows", rows, err, errlen);
    return e;
}

void cx_start_free(struct cx_start *s)
{
    free(s->cmd);
    for (size_t i = 0; s->args && i < s->nargs; i++)
        free(s->args[i]);
    free(s->args);
    for (size_t i = 0; s->envs && i < s->nenvs; i++)
        free(s->envs[i]);
    free(s->envs);
    free(s->cwd);
    free(s->tag);
    memset(s, 0, sizeof *s);
}

static int dup_to(const char *s, char **out)
{
    *out = strdup(s);
    return *out ? 0 : -ENOMEM;
}

static int start_fields(json_t *root, struct cx_start *out, char *err, size_t errlen)
{
    json_t *proc = field(root, "process", NULL);
    const char *s;
    int r;
    if (!proc)
        return fail(err, errlen, "process is missing");
    if (!json_is_object(proc))
        return fail(err, errlen, "process must be an object");
    json_t *cmd = field(proc, "cmd", NULL);
    if (!cmd)
        return fail(err, errlen, "process.cmd is missing");
    if ((r = get_str(cmd, "process.cmd", CX_MAX_PATH, 0, &s, err, errlen)) < 0 ||
        (r = dup_to(s, &out->cmd)) < 0)
        return r;
    json_t *args = field(proc, "args", NULL);
    if (args) {
        if (!json_is_array(args))
            return fail(err, errlen, "process.args must be an array of strings");
        size_t n = json_array_size(args);
        if (n > CX_MAX_ARGS)
            return fail(err, errlen, "process.args has more than %u entries", CX_MAX_ARGS);
        if (n && !(out->args = calloc(n, sizeof *out->args)))
            return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
            if ((r = get_str(json_array_get(args, i), "process.args[]", AGENT_MAX_PAYLOAD, 1, &s,
                             err, errlen)) < 0 ||
                (r = dup_to(s, &out->args[i])) < 0)
                return r;
            out->nargs++;
        }
    }
    json_t *envs = field(proc, "envs", NULL);
    if (envs) {
        if (!json_is_object(envs))
            return fail(err, errlen, "process.envs must be an object of strings");
        size_t n = json_object_size(envs);
        if (n > CX_MAX_ENVS)
            return fail(err, errlen, "process.envs has more than %u entries", CX_MAX_ENVS);
        if (n && !(out->envs = calloc(n, sizeof *out->envs)))
            return -ENOMEM;
        const char *key;
        json_t *val;
        json_object_foreach(envs, key, val) {
            if (!*key || strchr(key, '='))
                return fail(err, errlen, "process.envs: bad variable name '%.64s'", key);
            if ((r = get_str(val, "process.envs value", AGENT_MAX_PAYLOAD, 1, &s, err, errlen)) < 0)
                return r;
            if (asprintf(&out->envs[out->nenvs], "%s=%s", key, s) < 0) {
                out->envs[out->nenvs] = NULL;
                return -ENOMEM;
            }
            out->nenvs++;
        }
    }
    json_t *cwd = field(proc, "cwd", NULL);
    if (cwd && ((r = get_str(cwd, "process.cwd", CX_MAX_PATH, 1, &s, err, errlen)) < 0 ||
                (r = dup_to(s, &out->cwd)) < 0))
        return r;
    json_t *tag = field(root, "tag", NULL);
    if (tag && ((r = get_str(tag, "tag", CX_MAX_TAG, 1, &s, err, errlen)) < 0 ||
                (r = dup_to(s, &out->tag)) < 0))
        return r;
    json_t *in = field(root, "stdin", NULL);
    if (in && (r = get_bool(in, "stdin", &out->stdin_on, err, errlen)) < 0)
        return r;
    json_t *pty = field(root, "pty", NULL);
    if (pty) {
        out->has_pty = 1;
        if ((r = decode_pty(pty, &out->cols, &out->rows, err, errlen)) < 0)
            return r;
    }
    return 0;
}

int cx_start_decode(const char *json, size_t n, struct cx_start *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    json_t *root = parse_obj(json, n, err, errlen);
    if (!root)
        return -EINVAL;
    int r = start_fields(root, out, err, errlen);
    json_decref(root);
    if (r < 0)
        cx_start_free(out);
    return r;
}

int cx_selector_decode(const char *json, size_t n, struct cx_selector *sel, char *err, size_t errlen)
{
    json_t *root = parse_obj(json, n, err, errlen);
    if (!root)
        return -EINVAL;
    int r = decode_selector(root, sel, err, errlen);
    json_decref(root);
    return r;
}

int cx_signal_decode(const char *json, size_t n, struct cx_selector *sel, int *sig,
                     char *err, size_t errlen)
{
    json_t *root = parse_obj(json, n, err, errlen);
    if (!root)
        return -EINVAL;
    int r = decode_selector(root, sel, err, errlen);
    json_t *s = r ? NULL : field(root, "signal", NULL);
    if (!r) {
        *sig = 0;
        if (json_is_string(s)) {
            if (strcmp(json_string_value(s), "SIGNAL_SIGKILL") == 0)
                *sig = 9;
            else if (strcmp(json_string_value(s), "SIGNAL_SIGTERM") == 0)
                *sig = 15;
        } else if (json_is_integer(s) && (json_integer_value(s) == 9 || json_integer_value(s) == 15)) {
            *sig = (int)json_integer_value(s);
        }
        if (!*sig)
            r = fail(err, errlen, "signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM");
    }
    json_decref(root);
    return r;
}

int cx_input_decode(const char *json, size_t n, struct cx_selector *sel, uint8_t **data,
                    size_t *len, int *is_pty, char *err, size_t errlen)
{
    *data = NULL;
    *len = 0;
    json_t *root = parse_obj(json, n, err, errlen);
    if (!root)
        return -EINVAL;
    int r = decode_selector(root, sel, err, errlen);
    json_t *in = r ? NULL : field(root, "input", NULL);
    if (!r && !in)
        r = fail(err, errlen, "input is missing");
    else if (!r && !json_is_object(in))
        r = fail(err, errlen, "input must be an object");
    if (!r) {
        json_t *so = field(in, "stdin", NULL), *po = field(in, "pty", NULL);
        json_t *v = so ? so : po;
        if (so && po)
            r = fail(err, errlen, "input: give stdin or pty, not both");
        else if (!v)
            r = fail(err, errlen, "input: stdin or pty is required");
        else if (!json_is_string(v))
            r = fail(err, errlen, "input data must be a base64 string");
        else if ((r = cx_b64_decode(json_string_value(v), json_string_length(v), data, len)) == -EINVAL)
            fail(err, errlen, "input data is not valid base64");
        *is_pty = po != NULL;
    }
    json_decref(root);
    return r;
}

int cx_update_decode(const char *json, size_t n, struct cx_selector *sel, int *has_pty,
                     uint32_t *cols, uint32_t *rows, char *err, size_t errlen)
{
    json_t *root = parse_obj(json, n, err, errlen);
    if (!root)
        return -EINVAL;
    int r = decode_selector(root, sel, err, errlen);
    json_t *pty = r ? NULL : field(root, "pty", NULL);
    *has_pty = pty != NULL;
    *cols = *rows = 0;
    if (pty)
        r = decode_pty(pty, cols, rows, err, errlen);
    json_decref(root);
    return r;
}

int cx_empty_decode(const char *json, size_t n, char *err, size_t errlen)
{
    json_t *root = parse_obj(json, n, err, errlen);
    if (!root)
        return -EINVAL;
    json_decref(root);
    return 0;
}

static int copy_path(json_t *root, const char *name, char out[CX_MAX_PATH + 1], char *err, size_t errlen)
{
    json_t *v = field(root, name, NULL);
    const char *s = "";
    if (v) {
        int r = get_str(v, name, CX_MAX_PATH, 1, &s, err, errlen);
        if (r < 0)
            return r;
    }
    strcpy(out, s);
    return 0;
}

static int watch_fields(json_t *root, struct cx_fs *out, char *err, size_t errlen)
{
    json_t *v = field(root, "recursive", NULL);
    int r = v ? get_bool(v, "recursive", &out->recursive, err, errlen) : 0;
    static const char *const unserved[][2] = { { "includeEntry", "include_entry" },
                                                { "allowNetworkMounts", "allow_network_mounts" } };
    for (size_t i = 0; !r && i < 2; i++) {
        int on = 0;
        if ((v = field(root, unserved[i][0], unserved[i][1])) && !(r = get_bool(v, unserved[i][0], &on, err, errlen)) &&
            on)
            r = fail(err, errlen, "%s is not served by moat serve", unserved[i][0]);
    }
    return r;
}

int cx_fs_decode(enum cx_fs_kind kind, const char *json, size_t n, struct cx_fs *out,
                 char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    out->depth = 1;
    json_t *root = parse_obj(json, n, err, errlen);
    if (!root)
        return -EINVAL;
    int r;
    if (kind == CX_FS_MOVE) {
        r = copy_path(root, "source", out->path, err, errlen);
        if (!r)
            r = copy_path(root, "destination", out->dest, err, errlen);
        if (!r && (!out->path[0] || !out->dest[0]))
            r = fail(err, errlen, "source and destination are required");
    } else {
        r = copy_path(root, "path", out->path, err, errlen);
        if (!r && kind == CX_FS_WATCH)
            r = watch_fields(root, out, err, errlen);
        json_t *d = kind == CX_FS_LIST ? field(root, "depth", NULL) : NULL;
        if (!r && d) {
            r = get_u32(d, "depth", &out->depth, err, errlen);
            if (!r && out->depth == 0)
                out->depth = 1;
            if (!r && out->depth > CX_MAX_DEPTH)
                r = fail(err, errlen, "depth is at most %u here", CX_MAX_DEPTH);
        }
    }
    json_decref(root);
    return r;
}

/* ---- encoders ---- */

uint32_t cx_go_mode(uint32_t type, uint32_t mode)
{
    uint32_t m = mode & 0777;
    if (type == AGENT_FT_DIR)
        m |= 1u << 31;
    else if (type == AGENT_FT_SYMLINK)
        m |= 1u << 27;
    else if (type != AGENT_FT_FILE)
        m |= 1u << 19;
    if (mode & 04000)
        m |= 1u << 23;
    if (mode & 02000)
        m |= 1u << 22;
    if (mode & 01000)
        m |= 1u << 20;
    return m;
}

void cx_go_perm_string(uint32_t type, uint32_t mode, char perm[16])
{
    /* Go: one letter per set type bit in the order "dalTLDpSugct?", "-"
     * if none, then rwxrwxrwx. */
    size_t k = 0;
    if (type == AGENT_FT_DIR)
        perm[k++] = 'd';
    if (type == AGENT_FT_SYMLINK)
        perm[k++] = 'L';
    if (mode & 04000)
        perm[k++] = 'u';
    if (mode & 02000)
        perm[k++] = 'g';
    if (mode & 01000)
        perm[k++] = 't';
    if (type != AGENT_FT_FILE && type != AGENT_FT_DIR && type != AGENT_FT_SYMLINK)
        perm[k++] = '?';
    if (!k)
        perm[k++] = '-';
    static const char rwx[] = "rwxrwxrwx";
    for (int i = 0; i < 9; i++)
        perm[k++] = (mode & (1u << (8 - i))) ? rwx[i] : '-';
    perm[k] = 0;
}

int cx_timestamp(int64_t sec, uint32_t nsec, char out[40])
{
    if (sec < -62135596800LL || sec > 253402300799LL || nsec >= 1000000000u)
        return -EINVAL;
    time_t t = (time_t)sec;
    struct tm tm;
    if (!gmtime_r(&t, &tm))
        return -EINVAL;
    int k = (int)strftime(out, 40, "%Y-%m-%dT%H:%M:%S", &tm);
    if (k != 19)    /* years below 1000 print short with some libcs */
        k = snprintf(out, 40, "%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    if (nsec == 0)
        snprintf(out + k, 40 - (size_t)k, "Z");
    else if (nsec % 1000000 == 0)
        snprintf(out + k, 40 - (size_t)k, ".%03uZ", nsec / 1000000);
    else if (nsec % 1000 == 0)
        snprintf(out + k, 40 - (size_t)k, ".%06uZ", nsec / 1000);
    else
        snprintf(out + k, 40 - (size_t)k, ".%09uZ", nsec);
    return 0;
}

static const char *type_name(uint32_t t)
{
    switch (t) {
    case AGENT_FT_FILE: return "FILE_TYPE_FILE";
    case AGENT_FT_DIR: return "FILE_TYPE_DIRECTORY";
    case AGENT_FT_SYMLINK: return "FILE_TYPE_SYMLINK";
    default: return "FILE_TYPE_UNSPECIFIED";
    }
}

/* A guest string (path, name) into JSON: guest bytes need not be UTF-8;
 * json_stringn refuses those and the entry then fails as a whole. */
static int set_str(json_t *o, const char *key, const char *s, size_t n)
{
    json_t *v = json_stringn(s, n);
    return v ? json_object_set_new(o, key, v) : -1;
}

/* Bytes json_dumps(JSON_ENSURE_ASCII) writes for the string s[0..n) at
 * most: \uXXXX per control byte or per UTF-8 sequence (two for one
 * outside the BMP), two for \" and \\, the quotes. */
static size_t ascii_json_len(const char *s, size_t n)
{
    size_t len = 2;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        if (b < 0x20)
            len += 6;
        else if (b == '"' || b == '\\')
            len += 2;
        else if (b < 0x80)
            len += 1;
        else if (b >= 0xf0)
            len += 12;
        else if (b >= 0xc0)
            len += 6;
        /* continuation bytes: counted with their lead */
    }
    return len;
}

size_t cx_entry_json_size(const struct agent_stat *st)
{
    size_t plen = strnlen(st->path, sizeof st->path);
    /* the keys, punctuation, type, size, mode, permissions, numeric
     * owner/group, timestamp: under 320 bytes together */
    size_t n = 320 + 2 * ascii_json_len(st->path, plen) +
               ascii_json_len(st->owner, strnlen(st->owner, sizeof st->owner)) +
               ascii_json_len(st->group, strnlen(st->group, sizeof st->group));
    if (st->type == AGENT_FT_SYMLINK)
        n += ascii_json_len(st->link, strnlen(st->link, sizeof st->link));
    return n;
}

char *cx_entry_json(const struct agent_stat *st)
{
    return dump(cx_entry_obj(st));
}

json_t *cx_entry_obj(const struct agent_stat *st)
{
    char buf[64], perm[16], ts[40];
    size_t plen = strnlen(st->path, sizeof st->path);
    const char *name = st->path;
    for (size_t i = 0; i < plen; i++)
        if (st->path[i] == '/' && i + 1 < plen)
            name = st->path + i + 1;
    size_t nlen = (size_t)(st->path + plen - name);
    if (nlen > 1 && name[nlen - 1] == '/')
        nlen--;
    json_t *o = json_object();
    if (!o)
        return NULL;
    int bad = set_str(o, "name", name, nlen) | set_str(o, "path", st->path, plen);
    json_object_set_new(o, "type", json_string(type_name(st->type)));
    snprintf(buf, sizeof buf, "%" PRIu64, st->size);
    json_object_set_new(o, "size", json_string(buf));
    json_object_set_new(o, "mode", json_integer(cx_go_mode(st->type, st->mode)));
    cx_go_perm_string(st->type, st->mode, perm);
    json_object_set_new(o, "permissions", json_string(perm));
    size_t ol = strnlen(st->owner, sizeof st->owner), gl = strnlen(st->group, sizeof st->group);
    if (ol)
        bad |= set_str(o, "owner", st->owner, ol);
    else {
        snprintf(buf, sizeof buf, "%" PRIu32, st->uid);
        json_object_set_new(o, "owner", json_string(buf));
    }
    if (gl)
        bad |= set_str(o, "group", st->group, gl);
    else {
        snprintf(buf, sizeof buf, "%" PRIu32, st->gid);
        json_object_set_new(o, "group", json_string(buf));
    }
    if (cx_timestamp(st->mtime_sec, st->mtime_nsec, ts) == 0)
        json_object_set_new(o, "modifiedTime", json_string(ts));
    if (st->type == AGENT_FT_SYMLINK)
        bad |= set_str(o, "symlinkTarget", st->link, strnlen(st->link, sizeof st->link));
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static char *event(const char *kind, json_t *body)
{
    if (!body)
        return NULL;
    json_t *ev = json_object(), *root = json_object();
    if (!ev || !root) {
        json_decref(ev);
        json_decref(root);
        json_decref(body);
        return NULL;
    }
    json_object_set_new(ev, kind, body);
    json_object_set_new(root, "event", ev);
    return dump(root);
}

char *cx_event_start(uint32_t pid)
{
    return event("start", json_pack("{s:I}", "pid", (json_int_t)pid));
}

char *cx_event_data(enum cx_data which, const void *p, size_t n)
{
    static const char *const names[] = { "stdout", "stderr", "pty" };
    if ((unsigned)which >= sizeof names / sizeof names[0])
        return NULL;
    char *b = cx_b64_encode(p, n);
    if (!b)
        return NULL;
    json_t *d = json_pack("{s:s}", names[which], b);
    free(b);
    return event("data", d);
}

/* Go's names for the signals an exit can carry (syscall.Signal.String). */
static const char *const sig_names[] = {
    [1] = "hangup", [2] = "interrupt", [3] = "quit", [4] = "illegal instruction",
    [5] = "trace/breakpoint trap", [6] = "aborted", [7] = "bus error",
    [8] = "floating point exception", [9] = "killed", [10] = "user defined signal 1",
    [11] = "segmentation fault", [12] = "user defined signal 2", [13] = "broken pipe",
    [14] = "alarm clock", [15] = "terminated",
};

char *cx_event_end(uint32_t kind, uint32_t value)
{
    char status[64];
    json_t *e;
    if (kind == AGENT_EXIT_SIGNAL) {
        if (value < sizeof sig_names / sizeof sig_names[0] && sig_names[value])
            snprintf(status, sizeof status, "signal: %s", sig_names[value]);
        else
            snprintf(status, sizeof status, "signal: signal %" PRIu32, value);
        e = json_pack("{s:i,s:b,s:s,s:s}", "exitCode", -1, "exited", 0, "status", status, "error", status);
    } else {
        snprintf(status, sizeof status, "exit status %" PRIu32, value);
        e = value ? json_pack("{s:I,s:b,s:s,s:s}", "exitCode", (json_int_t)value, "exited", 1, "status",
                              status, "error", status)
                  : json_pack("{s:i,s:b,s:s}", "exitCode", 0, "exited", 1, "status", status);
    }
    return event("end", e);
}

char *cx_event_keepalive(void)
{
    return event("keepalive", json_object());
}

char *cx_watch_start(void)
{
    return dump(json_pack("{s:{}}", "start"));
}

char *cx_watch_keepalive(void)
{
    return dump(json_pack("{s:{}}", "keepalive"));
}

json_t *cx_watch_event_obj(uint32_t op, const char *name)
{
    static const char *const types[] = { NULL, "EVENT_TYPE_CREATE", "EVENT_TYPE_WRITE", "EVENT_TYPE_REMOVE",
                                         "EVENT_TYPE_RENAME", "EVENT_TYPE_CHMOD" };
    if (op < 1 || op > 5 || !name)
        return NULL;
    json_t *o = json_object();
    if (!o || set_str(o, "name", name, strlen(name)) < 0 ||
        json_object_set_new(o, "type", json_string(types[op])) < 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

char *cx_watch_event(uint32_t op, const char *name)
{
    json_t *o = cx_watch_event_obj(op, name);
    return o ? dump(json_pack("{s:o}", "filesystem", o)) : NULL;
}
