/* DNS query / response parser for the domain rules, pure. */
#include "devices/net/dns_msg.h"
#include "vmm/base/bytes.h"

#include <errno.h>
#include <string.h>

static const char *const errs[DNS_E__COUNT] = {
    [DNS_E_OK] = "ok",
    [DNS_E_SHORT] = "DNS message shorter than its 12-byte header",
    [DNS_E_NOT_RESPONSE] = "DNS message is not a response",
    [DNS_E_NOT_QUERY] = "DNS message is not a query",
    [DNS_E_OPCODE] = "DNS opcode is not QUERY",
    [DNS_E_QDCOUNT] = "DNS question count is not 1",
    [DNS_E_TRUNC] = "DNS name, question or record runs past the message",
    [DNS_E_LABEL_TYPE] = "DNS label type 01 or 10",
    [DNS_E_PTR_BOUNDS] = "DNS compression pointer into the header or past the message",
    [DNS_E_PTR_LOOP] = "DNS compression pointer not strictly backward (loop)",
    [DNS_E_NAME_LONG] = "DNS name longer than 255 bytes",
    [DNS_E_NAME_CHARS] = "DNS label with a byte that is not printable ASCII, or a dot",
    [DNS_E_RDLEN] = "DNS record data of the wrong length for its type",
};

const char *dns_strerror(enum dns_err e)
{
    return (unsigned)e < DNS_E__COUNT ? errs[e] : "unknown DNS error";
}

uint64_t dns_name_hash(const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *name; name++) {
        h ^= (uint8_t)*name;
        h *= 0x100000001b3ull;
    }
    return h;
}


/* Read the name at *pos into out (lowercased text, >= DNS_NAME_TEXT_MAX+1
 * bytes, may be NULL to only check it); *pos moves past the name's bytes
 * where it is written (past the first pointer, or the root label). */
static enum dns_err read_name(const uint8_t *m, size_t n, size_t *pos, char *out)
{
    size_t p = *pos, lowest = p, after = 0, wire = 1, o = 0;
    bool jumped = false;
    for (;;) {
        if (p >= n)
            return DNS_E_TRUNC;
        uint8_t c = m[p];
        if ((c & 0xc0) == 0xc0) {
            if (p + 1 >= n)
                return DNS_E_TRUNC;
            size_t t = (size_t)(c & 0x3f) << 8 | m[p + 1];
            if (t < DNS_HDR_LEN || t >= n)
                return DNS_E_PTR_BOUNDS;
            if (t >= lowest)
                return DNS_E_PTR_LOOP;
            if (!jumped) {
                after = p + 2;
                jumped = true;
            }
            p = lowest = t;
            continue;
        }
        if (c & 0xc0)
            return DNS_E_LABEL_TYPE;
        if (c == 0) {
            p++;
            break;
        }
        wire += (size_t)c + 1;
        if (wire > DNS_NAME_WIRE_MAX)
            return DNS_E_NAME_LONG;
        if (c > n - p - 1)
            return DNS_E_TRUNC;
        if (out && o)
            out[o++] = '.';
        for (size_t i = 1; i <= c; i++) {
            uint8_t ch = m[p + i];
            if (ch < 0x21 || ch > 0x7e || ch == '.')
                return DNS_E_NAME_CHARS;
            if (out)
                out[o++] = (char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
        }
        p += 1 + (size_t)c;
    }
    if (out)
        out[o] = 0;
    *pos = jumped ? after : p;
    return DNS_E_OK;
}

/* Header and the one question, shared by queries and responses. */
static enum dns_err read_question(const uint8_t *m, size_t n, bool response, uint16_t *id,
                                  uint16_t *flags, char *qname, uint16_t *qtype,
                                  uint16_t *qclass, size_t *pos)
{
    if (n < DNS_HDR_LEN)
        return DNS_E_SHORT;
    *id = be16_load(m);
    *flags = be16_load(m + 2);
    if (response && !(*flags & 0x8000))
        return DNS_E_NOT_RESPONSE;
    if (!response && (*flags & 0x8000))
        return DNS_E_NOT_QUERY;
    if ((*flags >> 11 & 15) != 0)
        return DNS_E_OPCODE;
    if (be16_load(m + 4) != 1)
        return DNS_E_QDCOUNT;
    size_t p = DNS_HDR_LEN;
    enum dns_err e = read_name(m, n, &p, qname);
    if (e)
        return e;
    if (n - p < 4)
        return DNS_E_TRUNC;
    *qtype = be16_load(m + p);
    *qclass = be16_load(m + p + 2);
    *pos = p + 4;
    return DNS_E_OK;
}

int dns_parse_query(const uint8_t *m, size_t n, struct dns_query *q, const char **why)
{
    memset(q, 0, sizeof *q);
    size_t p;
    q->err = read_question(m, n, false, &q->id, &q->flags, q->qname, &q->qtype, &q->qclass, &p);
    if (q->err) {
        if (why)
            *why = errs[q->err];
        return -EBADMSG;
    }
    return 0;
}

struct rec {
    size_t owner, rd;           /* offsets of the owner name and RDATA */
    uint16_t type;
    uint32_t ttl;
    bool used;
};

static bool name_at_is(const uint8_t *m, size_t n, size_t off, const char *want)
{
    char buf[DNS_NAME_TEXT_MAX + 1];
    return read_name(m, n, &off, buf) == DNS_E_OK && strcmp(buf, want) == 0;
}

static bool on_chain(const struct dns_answer *a, const char *name)
{
    for (unsigned i = 0; i < a->n_chain; i++)
        if (strcmp(a->chain[i], name) == 0)
            return true;
    return false;
}

int dns_parse_response(const uint8_t *m, size_t n, struct dns_answer *a, const char **why)
{
    memset(a, 0, sizeof *a);
    struct rec recs[DNS_REC_MAX];
    unsigned nrec = 0;
    size_t p;
    enum dns_err e = read_question(m, n, true, &a->id, &a->flags, a->chain[0], &a->qtype,
                                   &a->qclass, &p);
    if (e)
        goto bad;
    a->n_chain = 1;
    a->rcode = a->flags & 15;
    a->ancount = be16_load(m + 6);
    for (unsigned i = 0; i < a->ancount; i++) {
        size_t owner = p;
        if ((e = read_name(m, n, &p, NULL)))
            goto bad;
        if (n - p < 10) {
            e = DNS_E_TRUNC;
            goto bad;
        }
        uint16_t type = be16_load(m + p), cls = be16_load(m + p + 2);
        uint32_t ttl = be32_load(m + p + 4);
        size_t rdlen = be16_load(m + p + 8);
        p += 10;
        if (rdlen > n - p) {
            e = DNS_E_TRUNC;
            goto bad;
        }
        bool keep = cls == DNS_CLASS_IN;
        if (type == DNS_TYPE_A && rdlen != 4)
            e = DNS_E_RDLEN;
        else if (type == DNS_TYPE_AAAA && rdlen != 16)
            e = DNS_E_RDLEN;
        else if (type == DNS_TYPE_CNAME) {
            size_t q = p;
            if ((e = read_name(m, p + rdlen, &q, NULL)) == DNS_E_OK && q != p + rdlen)
                e = DNS_E_RDLEN;
            else if (e == DNS_E_TRUNC)
                e = DNS_E_RDLEN;    /* the name runs past RDLENGTH */
        } else if (type != DNS_TYPE_A && type != DNS_TYPE_AAAA)
            keep = false;
        if (e)
            goto bad;
        if (keep && nrec < DNS_REC_MAX)
            recs[nrec++] = (struct rec){ .owner = owner, .rd = p, .type = type,
                                        .ttl = ttl & 0x80000000u ? 0 : ttl };
        else
            a->n_ignored++;
        p += rdlen;
    }

    /* Follow the chain from the question name. */
    uint32_t chain_ttl = UINT32_MAX;
    for (unsigned h = 0;; h++) {
        const char *cur = a->chain[h];
        int cname = -1;
        for (unsigned i = 0; i < nrec; i++) {
            struct rec *r = &recs[i];
            if (r->used || !name_at_is(m, n, r->owner, cur))
                continue;
            if (r->type == DNS_TYPE_CNAME) {
                if (cname < 0) {
                    cname = (int)i;
                    r->used = true;
                }
                continue;
            }
            r->used = true;
            if (a->n_addr == DNS_ADDR_MAX) {
                a->n_ignored++;
                continue;
            }
            struct dns_addr *d = &a->addr[a->n_addr++];
            if (r->type == DNS_TYPE_A) {
                d->family = 4;
                d->b[10] = d->b[11] = 0xff;
                memcpy(d->b + 12, m + r->rd, 4);
            } else {
                d->family = 6;
                memcpy(d->b, m + r->rd, 16);
            }
            d->ttl = r->ttl < chain_ttl ? r->ttl : chain_ttl;
            d->name = (uint8_t)h;
        }
        if (cname < 0)
            break;
        char next[DNS_NAME_TEXT_MAX + 1];
        size_t q = recs[cname].rd;
        read_name(m, n, &q, next);      /* checked above */
        if (h + 1 > DNS_CHAIN_MAX || on_chain(a, next)) {
            a->chain_cut = true;
            break;
        }
        memcpy(a->chain[h + 1], next, strlen(next) + 1);   /* not the stack bytes after it */
        a->n_chain = h + 2;
        if (recs[cname].ttl < chain_ttl)
            chain_ttl = recs[cname].ttl;
    }
    for (unsigned i = 0; i < nrec; i++)
        if (!recs[i].used)
            a->n_ignored++;
    return 0;
bad:
    a->err = e;
    if (why)
        *why = errs[e];
    return -EBADMSG;
}
