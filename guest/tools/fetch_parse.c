/* moat-fetch's parsers (guest/tools/fetch_parse.h). */
#include "fetch_parse.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

static char lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int is_alnum(char c)
{
    c = lower(c);
    return is_digit(c) || (c >= 'a' && c <= 'z');
}

static int prefix_ci(const char *s, size_t len, const char *p)
{
    size_t n = strlen(p);

    if (len < n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (lower(s[i]) != p[i])
            return 0;
    return 1;
}

static int eq_ci(const char *a, size_t alen, const char *b)
{
    return alen == strlen(b) && prefix_ci(a, alen, b);
}

int fetch_ipv4(const char *s, uint32_t *addr)
{
    struct in_addr in;

    /* glibc's inet_pton takes exactly four decimal parts 0..255 and no
     * leading zeros: no octal, no short forms. */
    if (inet_pton(AF_INET, s, &in) != 1)
        return 0;
    *addr = ntohl(in.s_addr);
    return 1;
}

/* S[0..LEN) is a DNS host name: labels of 1..63 letters, digits, '-', not
 * starting or ending with '-', at most FETCH_HOST_MAX bytes, no trailing
 * dot. */
static int name_ok(const char *s, size_t len)
{
    size_t lab = 0;

    if (len == 0 || len > FETCH_HOST_MAX)
        return 0;
    for (size_t i = 0; i <= len; i++) {
        if (i == len || s[i] == '.') {
            if (lab == 0 || lab > 63 || s[i - 1] == '-')
                return 0;
            lab = 0;
            continue;
        }
        if (!is_alnum(s[i]) && !(s[i] == '-' && lab > 0))
            return 0;
        lab++;
    }
    return 1;
}

int fetch_url_parse(const char *url, struct fetch_url *u)
{
    const char *p, *auth, *aend, *colon, *pend;
    size_t hlen;
    char host[FETCH_HOST_MAX + 2];
    uint32_t a;

    memset(u, 0, sizeof(*u));
    for (p = url; *p; p++)
        if ((unsigned char)*p <= 0x20 || *p == 0x7f)
            return -EINVAL;
    if (!prefix_ci(url, strlen(url), "http://")) {
        /* scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) ":" */
        for (p = url; is_alnum(*p) || *p == '+' || *p == '-' || *p == '.'; p++)
            ;
        if (p != url && *p == ':' && !is_digit(url[0]) && !prefix_ci(url, strlen(url), "http:"))
            return -EPROTONOSUPPORT;
        return -EINVAL;
    }
    auth = url + 7;
    aend = auth + strcspn(auth, "/?#");
    if (memchr(auth, '@', (size_t)(aend - auth)) || *auth == '[')
        return -EINVAL;
    colon = memchr(auth, ':', (size_t)(aend - auth));
    u->port = 80;
    if (colon) {
        unsigned long port = 0;
        size_t n = (size_t)(aend - colon - 1);

        if (n < 1 || n > 5 || colon[1] == '0')
            return -EINVAL;
        for (size_t i = 1; i <= n; i++) {
            if (!is_digit(colon[i]))
                return -EINVAL;
            port = port * 10 + (unsigned long)(colon[i] - '0');
        }
        if (port > 65535)
            return -EINVAL;
        u->port = (uint16_t)port;
    }
    hlen = (size_t)((colon ? colon : aend) - auth);
    if (hlen > 1 && auth[hlen - 1] == '.')
        hlen--;                     /* "example.org." */
    if (hlen > FETCH_HOST_MAX)
        return -EINVAL;
    for (size_t i = 0; i < hlen; i++)
        host[i] = lower(auth[i]);
    host[hlen] = 0;
    if (!fetch_ipv4(host, &a) && !name_ok(host, hlen))
        return -EINVAL;
    memcpy(u->host, host, hlen + 1);
    pend = aend + strcspn(aend, "#");
    if (*aend == '/') {
        if ((size_t)(pend - aend) > FETCH_PATH_MAX)
            return -EINVAL;
        memcpy(u->path, aend, (size_t)(pend - aend));
    } else {                        /* "", "?q" or "#f" */
        if ((size_t)(pend - aend) + 1 > FETCH_PATH_MAX)
            return -EINVAL;
        u->path[0] = '/';
        memcpy(u->path + 1, aend, (size_t)(pend - aend));
    }
    return 0;
}

int fetch_url_redirect(const struct fetch_url *base, const char *loc, struct fetch_url *out)
{
    char buf[sizeof(base->host) + sizeof(base->path) + 32];
    const char *p;
    size_t dir;
    int n;

    for (p = loc; is_alnum(*p) || *p == '+' || *p == '-' || *p == '.'; p++)
        ;
    if (p != loc && *p == ':' && !is_digit(loc[0]))
        return fetch_url_parse(loc, out);          /* a scheme */
    if (loc[0] == '/' && loc[1] == '/') {
        n = snprintf(buf, sizeof(buf), "http:%s", loc);
    } else if (loc[0] == '/') {
        n = snprintf(buf, sizeof(buf), "http://%s:%u%s", base->host, base->port, loc);
    } else {
        /* Relative: BASE's path up to its last '/' before any query. */
        dir = strcspn(base->path, "?");
        while (dir > 0 && base->path[dir - 1] != '/')
            dir--;
        n = snprintf(buf, sizeof(buf), "http://%s:%u%.*s%s", base->host, base->port,
                     (int)dir, base->path, loc);
    }
    if (n < 0 || (size_t)n >= sizeof(buf))
        return -EINVAL;
    return fetch_url_parse(buf, out);
}

static int is_tchar(char c)
{
    return is_alnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static const char *trim(const char *s, const char *e, const char **end)
{
    while (s < e && (*s == ' ' || *s == '\t'))
        s++;
    while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
        e--;
    *end = e;
    return s;
}

static int parse_length(const char *v, const char *e, int64_t *out)
{
    int64_t n = 0;

    if (v == e || e - v > 19)
        return -EINVAL;
    for (; v < e; v++) {
        if (!is_digit(*v))
            return -EINVAL;
        n = n * 10 + (*v - '0');
    }
    if (n > (int64_t)1 << 62)
        return -EINVAL;
    *out = n;
    return 0;
}

/* The last coding of a Transfer-Encoding value V..E: 1 if "chunked". */
static int last_coding_chunked(const char *v, const char *e)
{
    const char *c = e, *ce;

    while (c > v && c[-1] != ',')
        c--;
    c = trim(c, e, &ce);
    return eq_ci(c, (size_t)(ce - c), "chunked");
}

static int parse_header(const char *l, const char *e, struct fetch_resp *r)
{
    const char *colon = memchr(l, ':', (size_t)(e - l)), *v, *ve;
    size_t nlen;

    if (!colon || colon == l)
        return -EINVAL;
    for (const char *p = l; p < colon; p++)
        if (!is_tchar(*p))
            return -EINVAL;
    nlen = (size_t)(colon - l);
    v = trim(colon + 1, e, &ve);
    if (eq_ci(l, nlen, "content-length")) {
        int64_t n;

        if (parse_length(v, ve, &n) < 0 || (r->length >= 0 && r->length != n))
            return -EINVAL;
        r->length = n;
    } else if (eq_ci(l, nlen, "transfer-encoding")) {
        if (v == ve)
            return -EINVAL;
        if (!last_coding_chunked(v, ve))
            return -EPROTO;
        r->chunked = 1;
    } else if (eq_ci(l, nlen, "location")) {
        if ((size_t)(ve - v) >= sizeof(r->location))
            return -EINVAL;
        memcpy(r->location, v, (size_t)(ve - v));
        r->location[ve - v] = 0;
    }
    return 0;
}

static int parse_status(const char *l, const char *e, struct fetch_resp *r)
{
    if (e - l < 12 || memcmp(l, "HTTP/1.", 7) != 0 || !is_digit(l[7]) || l[8] != ' ')
        return -EINVAL;
    if (!is_digit(l[9]) || !is_digit(l[10]) || !is_digit(l[11]))
        return -EINVAL;
    if (e - l > 12 && l[12] != ' ')
        return -EINVAL;
    r->status = (l[9] - '0') * 100 + (l[10] - '0') * 10 + (l[11] - '0');
    if (r->status < 100 || r->status > 599)
        return -EINVAL;
    return 0;
}

int fetch_resp_parse(const char *buf, size_t len, struct fetch_resp *r)
{
    size_t max = len < FETCH_HEAD_MAX ? len : FETCH_HEAD_MAX;
    size_t off = 0;
    int line = 0, rc;

    memset(r, 0, sizeof(*r));
    r->length = -1;
    for (;;) {
        const char *l = buf + off, *nl = memchr(l, '\n', max - off), *e;

        if (!nl)
            return len >= FETCH_HEAD_MAX ? -E2BIG : 0;
        e = nl > l && nl[-1] == '\r' ? nl - 1 : nl;
        if (memchr(l, 0, (size_t)(e - l)) || memchr(l, '\r', (size_t)(e - l)))
            return -EINVAL;
        off = (size_t)(nl - buf) + 1;
        if (line == 0) {
            rc = parse_status(l, e, r);
        } else if (e == l) {
            return (int)off;        /* the blank line */
        } else if (*l == ' ' || *l == '\t') {
            rc = -EINVAL;           /* obsolete line folding */
        } else {
            rc = parse_header(l, e, r);
        }
        if (rc < 0)
            return rc;
        line++;
    }
}

enum {
    CH_SIZE, CH_EXT, CH_SIZE_LF, CH_DATA, CH_DATA_CR, CH_DATA_LF,
    CH_TRAILER_BOL, CH_TRAILER, CH_END_LF, CH_DONE,
};

static int hexval(uint8_t c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (uint8_t)lower((char)c);
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

int fetch_chunked_decode(struct fetch_chunked *c, uint8_t *buf, size_t len,
                         size_t *used, size_t *out)
{
    size_t i = 0, o = 0;

    while (i < len && c->state != CH_DONE) {
        uint8_t b = buf[i];
        int h;

        switch (c->state) {
        case CH_SIZE:
            h = hexval(b);
            if (h >= 0) {
                if (c->digits == 15)
                    return -EINVAL;
                c->left = c->left << 4 | (uint64_t)h;
                c->digits++;
                i++;
                continue;
            }
            if (c->digits == 0)
                return -EINVAL;
            if (b == ';' || b == ' ' || b == '\t')
                c->state = CH_EXT;
            else if (b == '\r')
                c->state = CH_SIZE_LF;
            else if (b == '\n')
                c->state = c->left ? CH_DATA : CH_TRAILER_BOL;
            else
                return -EINVAL;
            i++;
            break;
        case CH_EXT:                /* chunk extensions are ignored */
            if (b == '\r')
                c->state = CH_SIZE_LF;
            else if (b == '\n')
                c->state = c->left ? CH_DATA : CH_TRAILER_BOL;
            else if (b == 0)
                return -EINVAL;
            i++;
            break;
        case CH_SIZE_LF:
            if (b != '\n')
                return -EINVAL;
            c->state = c->left ? CH_DATA : CH_TRAILER_BOL;
            i++;
            break;
        case CH_DATA: {
            size_t n = len - i;

            if (n > c->left)
                n = (size_t)c->left;
            memmove(buf + o, buf + i, n);
            o += n;
            i += n;
            c->left -= n;
            if (c->left == 0)
                c->state = CH_DATA_CR;
            break;
        }
        case CH_DATA_CR:
            if (b == '\r')
                c->state = CH_DATA_LF;
            else if (b == '\n')
                c->state = CH_SIZE;
            else
                return -EINVAL;
            c->digits = 0;
            i++;
            break;
        case CH_DATA_LF:
            if (b != '\n')
                return -EINVAL;
            c->state = CH_SIZE;
            i++;
            break;
        case CH_TRAILER_BOL:
        case CH_TRAILER:
            if (++c->trailer > FETCH_TRAILER_MAX)
                return -EINVAL;
            if (c->state == CH_TRAILER_BOL && b == '\r')
                c->state = CH_END_LF;
            else if (c->state == CH_TRAILER_BOL && b == '\n')
                c->state = CH_DONE;
            else
                c->state = b == '\n' ? CH_TRAILER_BOL : CH_TRAILER;
            i++;
            break;
        case CH_END_LF:
            if (b != '\n')
                return -EINVAL;
            c->state = CH_DONE;
            i++;
            break;
        default:
            return -EINVAL;
        }
    }
    *used = i;
    *out = o;
    return c->state == CH_DONE;
}

/* NAME (a trailing dot allowed) in DNS wire form into W[0..256): its
 * length, or -EINVAL. */
static int name_wire(const char *name, uint8_t *w)
{
    size_t len = strlen(name), o = 0;
    const char *lab = name;

    if (len > 1 && name[len - 1] == '.')
        len--;
    if (!name_ok(name, len))
        return -EINVAL;
    for (size_t i = 0; i <= len; i++) {
        if (i == len || name[i] == '.') {
            size_t n = (size_t)(name + i - lab);

            w[o++] = (uint8_t)n;
            memcpy(w + o, lab, n);
            o += n;
            lab = name + i + 1;
        }
    }
    w[o++] = 0;
    return (int)o;
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

int fetch_dns_query(uint8_t *buf, size_t cap, uint16_t id, const char *name)
{
    uint8_t w[256];
    int n = name_wire(name, w);

    if (n < 0)
        return n;
    if (cap < 12 + (size_t)n + 4)
        return -ENOSPC;
    memset(buf, 0, 12);
    put16(buf, id);
    put16(buf + 2, 0x0100);         /* standard query, recursion desired */
    put16(buf + 4, 1);              /* one question */
    memcpy(buf + 12, w, (size_t)n);
    put16(buf + 12 + n, 1);         /* A */
    put16(buf + 14 + n, 1);         /* IN */
    return 12 + n + 4;
}

/* Compares the (possibly compressed) name at MSG+OFF with wire name W
 * (letters case-insensitive). 1 equal, 0 not; -EINVAL malformed. *END:
 * the offset after the name where it sits (not where pointers lead). */
static int name_cmp(const uint8_t *msg, size_t len, size_t off, const uint8_t *w, size_t *end)
{
    size_t wi = 0, pos = off;
    int hops = 0, eq = 1;

    *end = 0;
    for (;;) {
        uint8_t n;

        if (pos >= len)
            return -EINVAL;
        n = msg[pos];
        if ((n & 0xc0) == 0xc0) {
            size_t to;

            if (pos + 1 >= len || ++hops > 16)
                return -EINVAL;
            to = (size_t)(n & 0x3f) << 8 | msg[pos + 1];
            if (!*end)
                *end = pos + 2;
            if (to >= pos)
                return -EINVAL;     /* only backwards: no loops */
            pos = to;
            continue;
        }
        if (n & 0xc0)
            return -EINVAL;         /* reserved label types */
        if (pos + 1 + n > len)
            return -EINVAL;
        if (eq && w[wi] == n) {
            for (size_t i = 0; i < n; i++)
                if (lower((char)msg[pos + 1 + i]) != lower((char)w[wi + 1 + i]))
                    eq = 0;
            if (eq && n)
                wi += 1 + n;
        } else {
            eq = 0;
        }
        pos += 1 + n;
        if (n == 0)
            break;
    }
    if (!*end)
        *end = pos;
    return eq;
}

/* Skips the name at MSG+OFF (a pointer ends it): the offset after it. */
static int skip_name(const uint8_t *msg, size_t len, size_t off, size_t *end)
{
    for (size_t labels = 0; labels < 128; labels++) {
        if (off >= len)
            return -EINVAL;
        if ((msg[off] & 0xc0) == 0xc0) {
            if (off + 2 > len)
                return -EINVAL;
            *end = off + 2;
            return 0;
        }
        if (msg[off] & 0xc0)
            return -EINVAL;
        if (msg[off] == 0) {
            *end = off + 1;
            return 0;
        }
        off += 1 + (size_t)msg[off];
    }
    return -EINVAL;
}

int fetch_dns_answer(const uint8_t *msg, size_t len, uint16_t id, const char *name,
                     uint32_t *addr)
{
    uint8_t w[256];
    uint16_t flags, an;
    size_t off;
    int r;

    if (name_wire(name, w) < 0 || len < 12 || get16(msg) != id)
        return -EINVAL;
    flags = get16(msg + 2);
    if (!(flags & 0x8000) || (flags >> 11 & 0xf) != 0 || get16(msg + 4) != 1)
        return -EINVAL;
    r = name_cmp(msg, len, 12, w, &off);
    if (r <= 0)
        return -EINVAL;
    if (off + 4 > len || get16(msg + off) != 1 || get16(msg + off + 2) != 1)
        return -EINVAL;
    off += 4;
    if ((flags & 0xf) == 3)
        return -ENOENT;             /* NXDOMAIN */
    if (flags & 0xf)
        return -EIO;
    an = get16(msg + 6);
    for (unsigned i = 0; i < an; i++) {
        uint16_t type, class, rdlen;

        if (skip_name(msg, len, off, &off) < 0 || off + 10 > len)
            return (flags & 0x0200) ? -EAGAIN : -EINVAL;
        type = get16(msg + off);
        class = get16(msg + off + 2);
        rdlen = get16(msg + off + 8);
        off += 10;
        if (off + rdlen > len)
            return (flags & 0x0200) ? -EAGAIN : -EINVAL;
        if (type == 1 && class == 1) {
            if (rdlen != 4)
                return -EINVAL;
            *addr = (uint32_t)msg[off] << 24 | (uint32_t)msg[off + 1] << 16 |
                    (uint32_t)msg[off + 2] << 8 | msg[off + 3];
            return 0;
        }
        off += rdlen;
    }
    return (flags & 0x0200) ? -EAGAIN : -ENOENT;
}

/* Splits TEXT[0..LEN) into lines and each line (up to a '#', or ';' if
 * SEMI) into at most MAXW words of at most WLEN - 1 bytes (longer words are
 * marked by an empty string). Calls FN(words, count, arg) per line with
 * words; stops when it returns nonzero and returns that. */
#define MAXW 8
#define WLEN 256
typedef int line_fn(char w[MAXW][WLEN], int n, const void *arg, uint32_t *addr);

static int each_line(const char *text, size_t len, int semi, line_fn *fn,
                     const void *arg, uint32_t *addr)
{
    char w[MAXW][WLEN];
    size_t i = 0;

    while (i < len) {
        size_t e = i;
        int n = 0, r;

        while (e < len && text[e] != '\n')
            e++;
        for (size_t j = i; j < e;) {
            size_t k = j, wl;

            if (text[j] == '#' || (semi && text[j] == ';'))
                break;
            if (text[j] == ' ' || text[j] == '\t' || text[j] == '\r') {
                j++;
                continue;
            }
            while (k < e && text[k] != ' ' && text[k] != '\t' && text[k] != '\r' &&
                   text[k] != '#' && !(semi && text[k] == ';'))
                k++;
            if (n < MAXW) {
                wl = k - j < WLEN ? k - j : 0;
                memcpy(w[n], text + j, wl);
                w[n][wl] = 0;
                if (memchr(w[n], 0, wl))
                    w[n][0] = 0;    /* a NUL inside: no word */
                n++;
            }
            j = k;
        }
        if (n > 0 && (r = fn(w, n, arg, addr)) != 0)
            return r;
        i = e + 1;
    }
    return 0;
}

static int resolv_line(char w[MAXW][WLEN], int n, const void *arg, uint32_t *addr)
{
    (void)arg;
    return n >= 2 && strcmp(w[0], "nameserver") == 0 && fetch_ipv4(w[1], addr);
}

int fetch_resolv_ns(const char *text, size_t len, uint32_t *ns)
{
    return each_line(text, len, 1, resolv_line, NULL, ns) == 1 ? 0 : -ENOENT;
}

static int hosts_line(char w[MAXW][WLEN], int n, const void *arg, uint32_t *addr)
{
    const char *name = arg;
    uint32_t a;

    if (!fetch_ipv4(w[0], &a))
        return 0;
    for (int i = 1; i < n; i++) {
        if (w[i][0] && eq_ci(w[i], strlen(w[i]), name)) {
            *addr = a;
            return 1;
        }
    }
    return 0;
}

int fetch_hosts_lookup(const char *text, size_t len, const char *name, uint32_t *addr)
{
    char lname[FETCH_HOST_MAX + 1];
    size_t n = strlen(name);

    if (n == 0 || n > FETCH_HOST_MAX)
        return -ENOENT;
    for (size_t i = 0; i <= n; i++)
        lname[i] = lower(name[i]);
    return each_line(text, len, 0, hosts_line, lname, addr) == 1 ? 0 : -ENOENT;
}
