/* Incremental HTTP/1.1 request parser, pure (see http_req.h). */
#include "devices/net/http_req.h"

#include <string.h>
#include <strings.h>

enum {
    S_START,        /* request-line's first byte, or an empty line's CR */
    S_START_LF,     /* LF of an empty line before the request-line */
    S_METHOD,
    S_TARGET,
    S_VERSION,
    S_RL_LF,        /* LF ending the request-line */
    S_LINE,         /* a header line's first byte, or the final CR */
    S_NAME,
    S_OWS,          /* after ':' */
    S_VALUE,
    S_LINE_LF,      /* LF ending a header line */
    S_END_LF,       /* LF of the empty line ending the head */
    S_BODY,
    S_DONE,
    S_ERROR,
};

static bool is_tchar(uint8_t c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return true;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* field-vchar: VCHAR or obs-text */
static bool is_fvchar(uint8_t c)
{
    return (c >= 0x21 && c <= 0x7e) || c >= 0x80;
}

void http_parser_init(struct http_parser *p)
{
    memset(&p->req, 0, sizeof p->req);
    p->st = S_START;
    p->status = 0;
    p->len = p->tok = p->val = p->line_len = p->head_bytes = 0;
    p->body_left = 0;
    p->nver = 0;
    p->have_cl = p->have_host = p->conn_close = p->conn_keep = false;
}

void http_parser_next(struct http_parser *p)
{
    http_parser_init(p);
}

enum http_state http_parser_state(const struct http_parser *p)
{
    return p->st == S_DONE ? HTTP_DONE : p->st == S_ERROR ? HTTP_ERROR : HTTP_NEED_MORE;
}

int http_parser_status(const struct http_parser *p)
{
    return p->st == S_ERROR ? p->status : 0;
}

static void fail(struct http_parser *p, int status)
{
    p->st = S_ERROR;
    p->status = status;
}

#define FAIL(p, status) do { fail(p, status); return; } while (0)

/* Append a byte to the buffer; false (and 431) if it is full, which the
 * limits should make impossible. */
static bool put(struct http_parser *p, char c)
{
    if (p->len >= sizeof p->buf) {
        fail(p, 431);
        return false;
    }
    p->buf[p->len++] = c;
    return true;
}

bool http_list_has(const char *v, const char *token)
{
    size_t tl = strlen(token);
    while (v && *v) {
        while (*v == ' ' || *v == '\t' || *v == ',')
            v++;
        const char *s = v;
        while (*v && *v != ',' && *v != ';' && *v != ' ' && *v != '\t')
            v++;
        if ((size_t)(v - s) == tl && tl && strncasecmp(s, token, tl) == 0) {
            while (*v == ' ' || *v == '\t')
                v++;
            if (!*v || *v == ',' || *v == ';')
                return true;
        }
        while (*v && *v != ',')
            v++;
    }
    return false;
}

/* A header line is complete: check what the framing depends on. */
static void header_done(struct http_parser *p, const char *name, const char *value)
{
    struct http_req *r = &p->req;
    r->headers[r->nheaders].name = name;
    r->headers[r->nheaders].value = value;
    r->nheaders++;
    if (strcasecmp(name, "content-length") == 0) {
        size_t n = strlen(value);
        if (p->have_cl || n == 0 || n > 19 || strspn(value, "0123456789") != n) {
            fail(p, 400);
            return;
        }
        p->have_cl = true;
        uint64_t v = 0;
        for (size_t i = 0; i < n; i++)
            v = v * 10 + (uint64_t)(value[i] - '0');     /* 19 digits fit */
        if (v > HTTP_MAX_BODY) {
            fail(p, 413);
            return;
        }
        r->content_length = v;
    } else if (strcasecmp(name, "transfer-encoding") == 0) {
        fail(p, 501);
    } else if (strcasecmp(name, "host") == 0) {
        if (p->have_host)
            fail(p, 400);
        p->have_host = true;
    } else if (strcasecmp(name, "connection") == 0) {
        if (http_list_has(value, "close"))
            p->conn_close = true;
        if (http_list_has(value, "keep-alive"))
            p->conn_keep = true;
    }
}

static void head_done(struct http_parser *p)
{
    struct http_req *r = &p->req;
    r->keep_alive = !p->conn_close && (r->minor >= 1 || p->conn_keep);
    r->body = (const uint8_t *)p->buf + p->len;
    p->body_left = r->content_length;
    p->st = p->body_left ? S_BODY : S_DONE;
}

static void version_done(struct http_parser *p)
{
    const char *v = p->ver;
    if (p->nver != 8 || memcmp(v, "HTTP/", 5) != 0 || v[5] < '0' || v[5] > '9' ||
        v[6] != '.' || v[7] < '0' || v[7] > '9') {
        fail(p, 400);
        return;
    }
    if (v[5] != '1') {
        fail(p, 505);
        return;
    }
    p->req.minor = v[7] == '0' ? 0 : 1;
    p->st = S_RL_LF;
}

/* A byte of a header line after its first: name, ':', whitespace, value,
 * or the CR that ends it. */
static void line_byte(struct http_parser *p, uint8_t c)
{
    if (c == '\r') {
        if (p->st == S_NAME)        /* a name without ':' */
            FAIL(p, 400);
        if (p->st == S_OWS)         /* an empty value */
            p->val = p->len;
        while (p->len > p->val && (p->buf[p->len - 1] == ' ' || p->buf[p->len - 1] == '\t'))
            p->len--;
        if (!put(p, 0))
            return;
        p->head_bytes++;
        p->st = S_LINE_LF;
        return;
    }
    p->line_len++;
    p->head_bytes++;
    if (p->line_len > HTTP_MAX_FIELD_LINE || p->head_bytes > HTTP_MAX_HEADER_BYTES)
        FAIL(p, 431);
    switch (p->st) {
    case S_NAME:
        if (c == ':') {
            p->st = S_OWS;
            put(p, 0);
            return;
        }
        if (!is_tchar(c))           /* includes whitespace before ':' */
            FAIL(p, 400);
        put(p, (char)c);
        return;
    case S_OWS:
        if (c == ' ' || c == '\t')
            return;
        if (!is_fvchar(c))
            FAIL(p, 400);
        p->val = p->len;
        p->st = S_VALUE;
        put(p, (char)c);
        return;
    default:                        /* S_VALUE */
        if (!is_fvchar(c) && c != ' ' && c != '\t')
            FAIL(p, 400);
        put(p, (char)c);
        return;
    }
}

/* One byte; the state machine. */
static void step(struct http_parser *p, uint8_t c)
{
    struct http_req *r = &p->req;
    switch (p->st) {
    case S_START:
        if (c == '\r') {
            p->st = S_START_LF;
            return;
        }
        if (!is_tchar(c))
            FAIL(p, 400);
        p->tok = p->len;
        p->st = S_METHOD;
        put(p, (char)c);
        return;
    case S_START_LF:
        if (c != '\n')
            FAIL(p, 400);
        p->st = S_START;
        return;
    case S_METHOD:
        if (c == ' ') {
            if (!put(p, 0))
                return;
            r->method = p->buf + p->tok;
            p->tok = p->len;
            p->st = S_TARGET;
            return;
        }
        if (!is_tchar(c))
            FAIL(p, 400);
        if (p->len - p->tok >= HTTP_MAX_METHOD)
            FAIL(p, 501);
        put(p, (char)c);
        return;
    case S_TARGET:
        if (c == ' ') {
            if (p->len == p->tok)
                FAIL(p, 400);
            if (!put(p, 0))
                return;
            r->target = p->buf + p->tok;
            p->nver = 0;
            p->st = S_VERSION;
            return;
        }
        if (c < 0x21 || c > 0x7e)
            FAIL(p, 400);
        if (p->len - p->tok >= HTTP_MAX_TARGET)
            FAIL(p, 414);
        put(p, (char)c);
        return;
    case S_VERSION:
        if (c != '\r' && (c < 0x21 || c > 0x7e))
            FAIL(p, 400);
        if (c == '\r')
            {
            version_done(p);
            return;
        }
        if (p->nver >= sizeof p->ver)
            FAIL(p, 400);
        p->ver[p->nver++] = (char)c;
        return;
    case S_RL_LF:
        if (c != '\n')
            FAIL(p, 400);
        p->st = S_LINE;
        return;
    case S_LINE:
        if (c == '\r') {
            p->head_bytes += 2;     /* the empty line's CRLF */
            if (p->head_bytes > HTTP_MAX_HEADER_BYTES)
                FAIL(p, 431);
            p->st = S_END_LF;
            return;
        }
        if (!is_tchar(c))           /* obs-fold, whitespace before a name, bare LF, ... */
            FAIL(p, 400);
        if (r->nheaders >= HTTP_MAX_HEADERS)
            FAIL(p, 431);
        p->tok = p->len;
        p->line_len = 0;
        p->st = S_NAME;
        line_byte(p, c);
        return;
    case S_NAME:
    case S_OWS:
    case S_VALUE:
        line_byte(p, c);
        return;
    case S_LINE_LF:
        if (c != '\n')
            FAIL(p, 400);
        if (++p->head_bytes > HTTP_MAX_HEADER_BYTES)
            FAIL(p, 431);
        header_done(p, p->buf + p->tok, p->buf + p->val);
        if (p->st != S_ERROR)
            p->st = S_LINE;
        return;
    case S_END_LF:
        if (c != '\n')
            FAIL(p, 400);
        head_done(p);
        return;
    case S_BODY:
        put(p, (char)c);
        if (--p->body_left == 0)
            p->st = S_DONE;
        return;
    default:
        return;
    }
}

size_t http_parser_feed(struct http_parser *p, const void *data, size_t n)
{
    const uint8_t *b = data;
    size_t i = 0;
    if (p->st == S_DONE || p->st == S_ERROR)
        return 0;
    while (i < n) {
        step(p, b[i++]);
        if (p->st == S_DONE || p->st == S_ERROR)
            break;
    }
    return i;
}

const char *http_req_header(const struct http_req *r, const char *name, unsigned *count)
{
    const char *first = NULL;
    unsigned k = 0;
    for (unsigned i = 0; i < r->nheaders; i++) {
        if (strcasecmp(r->headers[i].name, name) == 0) {
            if (!first)
                first = r->headers[i].value;
            k++;
        }
    }
    if (count)
        *count = k;
    return first;
}

const char *http_reason(int status)
{
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
    }
}
