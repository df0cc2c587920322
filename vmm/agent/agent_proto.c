/* Guest agent wire protocol: framing and payload codecs (agent_proto.h). */
#include "vmm/agent/agent_proto.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void wr32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static int fail(enum agent_err *err, enum agent_err e)
{
    if (err)
        *err = e;
    return -EINVAL;
}

static void ok(enum agent_err *err)
{
    if (err)
        *err = AGENT_E_OK;
}

const char *agent_strerror(enum agent_err e)
{
    switch (e) {
    case AGENT_E_OK: return "ok";
    case AGENT_E_SHORT: return "truncated frame or field";
    case AGENT_E_MAGIC: return "bad magic or protocol version";
    case AGENT_E_TOOBIG: return "frame too large";
    case AGENT_E_TYPE: return "unknown or unexpected frame type";
    case AGENT_E_PAYLOAD: return "malformed payload";
    case AGENT_E_ID: return "unknown or duplicate id";
    case AGENT_E_LIMIT: return "limit reached";
    case AGENT_E_SYS: return "operation failed";
    default: return "unknown error";
    }
}

const char *agent_type_name(uint32_t t)
{
    switch (t) {
    case AGENT_T_PING: return "PING";
    case AGENT_T_PONG: return "PONG";
    case AGENT_T_READY: return "READY";
    case AGENT_T_EXEC: return "EXEC";
    case AGENT_T_STDIN: return "STDIN";
    case AGENT_T_STDIN_EOF: return "STDIN_EOF";
    case AGENT_T_STDOUT: return "STDOUT";
    case AGENT_T_STDERR: return "STDERR";
    case AGENT_T_EXIT: return "EXIT";
    case AGENT_T_KILL: return "KILL";
    case AGENT_T_FILE_WRITE: return "FILE_WRITE";
    case AGENT_T_FILE_READ: return "FILE_READ";
    case AGENT_T_FILE_DATA: return "FILE_DATA";
    case AGENT_T_FILE_END: return "FILE_END";
    case AGENT_T_MKDIR: return "MKDIR";
    case AGENT_T_SET_TIME: return "SET_TIME";
    case AGENT_T_ADD_ENTROPY: return "ADD_ENTROPY";
    case AGENT_T_OK: return "OK";
    case AGENT_T_ERROR: return "ERROR";
    default: return "?";
    }
}

void agent_hdr_encode(uint8_t out[AGENT_HDR_SIZE], uint32_t type, uint32_t id, uint32_t len)
{
    wr32(out, AGENT_MAGIC);
    wr32(out + 4, type);
    wr32(out + 8, id);
    wr32(out + 12, len);
}

int agent_hdr_decode(const uint8_t *p, size_t n, struct agent_hdr *h, enum agent_err *err)
{
    if (!p || n < AGENT_HDR_SIZE)
        return fail(err, AGENT_E_SHORT);
    if (rd32(p) != AGENT_MAGIC)
        return fail(err, AGENT_E_MAGIC);
    h->type = rd32(p + 4);
    h->id = rd32(p + 8);
    h->len = rd32(p + 12);
    if (h->len > AGENT_MAX_PAYLOAD)
        return fail(err, AGENT_E_TOOBIG);
    ok(err);
    return 0;
}

/* ---- buffers ---------------------------------------------------------- */

void agent_buf_free(struct agent_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

int agent_buf_reserve(struct agent_buf *b, size_t more)
{
    if (more > SIZE_MAX / 2 - b->len)
        return -ENOMEM;
    size_t need = b->len + more;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    uint8_t *np = realloc(b->p, cap);
    if (!np)
        return -ENOMEM;
    b->p = np;
    b->cap = cap;
    return 0;
}

void agent_buf_consume(struct agent_buf *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
        return;
    }
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
}

/* Start a frame of payload length len; returns the payload pointer. */
static int frame_begin(struct agent_buf *b, uint32_t type, uint32_t id, size_t len, uint8_t **pl)
{
    if (len > AGENT_MAX_PAYLOAD)
        return -E2BIG;
    int r = agent_buf_reserve(b, AGENT_HDR_SIZE + len);
    if (r < 0)
        return r;
    agent_hdr_encode(b->p + b->len, type, id, (uint32_t)len);
    *pl = b->p + b->len + AGENT_HDR_SIZE;
    return 0;
}

static void frame_end(struct agent_buf *b, size_t len)
{
    b->len += AGENT_HDR_SIZE + len;
}

int agent_put_frame(struct agent_buf *b, uint32_t type, uint32_t id,
                    const void *payload, size_t len)
{
    uint8_t *pl;
    int r = frame_begin(b, type, id, len, &pl);
    if (r < 0)
        return r;
    if (len)
        memcpy(pl, payload, len);
    frame_end(b, len);
    return 0;
}

int agent_put_u32(struct agent_buf *b, uint32_t type, uint32_t id, uint32_t v)
{
    uint8_t p[4];
    wr32(p, v);
    return agent_put_frame(b, type, id, p, 4);
}

static uint8_t *put_str(uint8_t *p, const char *s, size_t n)
{
    wr32(p, (uint32_t)n);
    memcpy(p + 4, s, n);
    return p + 4 + n;
}

int agent_put_exec(struct agent_buf *b, uint32_t id, const struct agent_exec *e)
{
    const char *cwd = e->cwd ? e->cwd : "";
    size_t len = 16 + 4 + strlen(cwd);
    if (e->argc > AGENT_MAX_ARGS || e->envc > AGENT_MAX_ENV)
        return -E2BIG;
    for (uint32_t i = 0; i < e->argc; i++) {
        len += 4 + strlen(e->argv[i]);
        if (len > AGENT_MAX_PAYLOAD)
            return -E2BIG;
    }
    for (uint32_t i = 0; i < e->envc; i++) {
        len += 4 + strlen(e->env[i]);
        if (len > AGENT_MAX_PAYLOAD)
            return -E2BIG;
    }
    uint8_t *pl, *q;
    int r = frame_begin(b, AGENT_T_EXEC, id, len, &pl);
    if (r < 0)
        return r;
    wr32(pl, e->flags);
    wr32(pl + 4, e->timeout_ms);
    wr32(pl + 8, e->argc);
    wr32(pl + 12, e->envc);
    q = put_str(pl + 16, cwd, strlen(cwd));
    for (uint32_t i = 0; i < e->argc; i++)
        q = put_str(q, e->argv[i], strlen(e->argv[i]));
    for (uint32_t i = 0; i < e->envc; i++)
        q = put_str(q, e->env[i], strlen(e->env[i]));
    frame_end(b, len);
    return 0;
}

int agent_put_exit(struct agent_buf *b, uint32_t id, const struct agent_exit *x)
{
    uint8_t p[12];
    wr32(p, x->kind);
    wr32(p + 4, x->value);
    wr32(p + 8, x->flags);
    return agent_put_frame(b, AGENT_T_EXIT, id, p, sizeof p);
}

int agent_put_fwrite(struct agent_buf *b, uint32_t id, uint32_t flags, uint32_t mode,
                     const char *path, const void *data, size_t n)
{
    size_t pl_len = strlen(path);
    if (pl_len > AGENT_MAX_PATH || n > AGENT_MAX_PAYLOAD)
        return -E2BIG;
    size_t len = 12 + pl_len + n;
    uint8_t *pl;
    int r = frame_begin(b, AGENT_T_FILE_WRITE, id, len, &pl);
    if (r < 0)
        return r;
    wr32(pl, flags);
    wr32(pl + 4, mode);
    uint8_t *q = put_str(pl + 8, path, pl_len);
    if (n)
        memcpy(q, data, n);
    frame_end(b, len);
    return 0;
}

int agent_put_mkdir(struct agent_buf *b, uint32_t id, uint32_t mode, uint32_t flags,
                    const char *path)
{
    size_t pl_len = strlen(path);
    if (pl_len > AGENT_MAX_PATH)
        return -E2BIG;
    uint8_t *pl;
    int r = frame_begin(b, AGENT_T_MKDIR, id, 8 + pl_len, &pl);
    if (r < 0)
        return r;
    wr32(pl, mode);
    wr32(pl + 4, flags);
    memcpy(pl + 8, path, pl_len);
    frame_end(b, 8 + pl_len);
    return 0;
}

int agent_put_file_end(struct agent_buf *b, uint32_t id, uint32_t mode, uint64_t size)
{
    uint8_t p[12];
    wr32(p, mode);
    wr32(p + 4, (uint32_t)size);
    wr32(p + 8, (uint32_t)(size >> 32));
    return agent_put_frame(b, AGENT_T_FILE_END, id, p, sizeof p);
}

int agent_put_error(struct agent_buf *b, uint32_t id, enum agent_err code,
                    uint32_t sys_errno, const char *msg)
{
    size_t ml = msg ? strlen(msg) : 0;
    if (ml > AGENT_MAX_MSG)
        ml = AGENT_MAX_MSG;
    uint8_t *pl;
    int r = frame_begin(b, AGENT_T_ERROR, id, 8 + ml, &pl);
    if (r < 0)
        return r;
    wr32(pl, (uint32_t)code);
    wr32(pl + 4, sys_errno);
    if (ml)
        memcpy(pl + 8, msg, ml);
    frame_end(b, 8 + ml);
    return 0;
}

/* ---- decoders --------------------------------------------------------- */

/* Read a length-prefixed string at *off; checks bounds and NUL bytes. */
static int get_str(const uint8_t *p, size_t n, size_t *off, const uint8_t **s, uint32_t *sl,
                   enum agent_err *err)
{
    if (n - *off < 4)
        return fail(err, AGENT_E_SHORT);
    uint32_t l = rd32(p + *off);
    *off += 4;
    if (l > n - *off)
        return fail(err, AGENT_E_SHORT);
    if (l && memchr(p + *off, 0, l))
        return fail(err, AGENT_E_PAYLOAD);
    *s = p + *off;
    *sl = l;
    *off += l;
    return 0;
}

int agent_exec_decode(const uint8_t *p, size_t n, struct agent_exec *out, enum agent_err *err)
{
    memset(out, 0, sizeof *out);
    if (n < 16)
        return fail(err, AGENT_E_SHORT);
    uint32_t flags = rd32(p), tmo = rd32(p + 4), argc = rd32(p + 8), envc = rd32(p + 12);
    if (flags & ~AGENT_EXEC_FLAGS)
        return fail(err, AGENT_E_PAYLOAD);
    if (argc == 0 || argc > AGENT_MAX_ARGS || envc > AGENT_MAX_ENV)
        return fail(err, AGENT_E_PAYLOAD);
    /* Each string needs at least its 4-byte length: a cheap bound first. */
    if ((size_t)(1 + argc + envc) * 4 > n - 16)
        return fail(err, AGENT_E_SHORT);

    /* Pass 1: validate, sum the string bytes. */
    size_t off = 16, total = 0;
    uint32_t nstr = 1 + argc + envc;
    for (uint32_t i = 0; i < nstr; i++) {
        const uint8_t *s;
        uint32_t sl;
        if (get_str(p, n, &off, &s, &sl, err) < 0)
            return -EINVAL;
        if (i == 0 && sl > AGENT_MAX_PATH)
            return fail(err, AGENT_E_PAYLOAD);
        if (i == 1 && sl == 0)
            return fail(err, AGENT_E_PAYLOAD);          /* empty argv[0] */
        if (i > argc) {                                 /* env: KEY=VALUE */
            const uint8_t *eq = sl ? memchr(s, '=', sl) : NULL;
            if (!eq || eq == s)
                return fail(err, AGENT_E_PAYLOAD);
        }
        total += (size_t)sl + 1;
    }
    if (off != n)
        return fail(err, AGENT_E_PAYLOAD);              /* trailing bytes */

    /* Pass 2: one allocation holding the pointer arrays and the strings. */
    size_t ptrs = ((size_t)argc + 1 + envc + 1) * sizeof(char *);
    char *mem = malloc(ptrs + total);
    if (!mem) {
        if (err)
            *err = AGENT_E_SYS;
        return -ENOMEM;
    }
    char **pv = (char **)(void *)mem;
    char *sp = mem + ptrs;
    out->argv = pv;
    out->env = pv + argc + 1;
    off = 16;
    for (uint32_t i = 0; i < nstr; i++) {
        const uint8_t *s;
        uint32_t sl;
        get_str(p, n, &off, &s, &sl, NULL);             /* validated above */
        memcpy(sp, s, sl);
        sp[sl] = 0;
        if (i == 0)
            out->cwd = sp;
        else if (i <= argc)
            out->argv[i - 1] = sp;
        else
            out->env[i - 1 - argc] = sp;
        sp += sl + 1;
    }
    out->argv[argc] = NULL;
    out->env[envc] = NULL;
    out->flags = flags;
    out->timeout_ms = tmo;
    out->argc = argc;
    out->envc = envc;
    ok(err);
    return 0;
}

void agent_exec_free(struct agent_exec *e)
{
    free(e->argv);   /* the block starts with argv */
    memset(e, 0, sizeof *e);
}

int agent_exit_decode(const uint8_t *p, size_t n, struct agent_exit *out, enum agent_err *err)
{
    if (n != 12)
        return fail(err, n < 12 ? AGENT_E_SHORT : AGENT_E_PAYLOAD);
    out->kind = rd32(p);
    out->value = rd32(p + 4);
    out->flags = rd32(p + 8);
    if (out->kind == AGENT_EXIT_CODE) {
        if (out->value > 255)
            return fail(err, AGENT_E_PAYLOAD);
    } else if (out->kind == AGENT_EXIT_SIGNAL) {
        if (out->value < 1 || out->value > 64)
            return fail(err, AGENT_E_PAYLOAD);
    } else {
        return fail(err, AGENT_E_PAYLOAD);
    }
    if (out->flags & ~AGENT_EXIT_TIMEDOUT)
        return fail(err, AGENT_E_PAYLOAD);
    ok(err);
    return 0;
}

int agent_u32_decode(const uint8_t *p, size_t n, uint32_t *out, enum agent_err *err)
{
    if (n != 4)
        return fail(err, n < 4 ? AGENT_E_SHORT : AGENT_E_PAYLOAD);
    *out = rd32(p);
    ok(err);
    return 0;
}

int agent_kill_decode(const uint8_t *p, size_t n, int *sig, enum agent_err *err)
{
    uint32_t v;
    if (agent_u32_decode(p, n, &v, err) < 0)
        return -EINVAL;
    if (v < 1 || v > 64)
        return fail(err, AGENT_E_PAYLOAD);
    *sig = (int)v;
    return 0;
}

int agent_path_check(const char *p, size_t n, char *out, enum agent_err *err)
{
    if (n == 0 || n > AGENT_MAX_PATH)
        return fail(err, AGENT_E_PAYLOAD);
    if (memchr(p, 0, n))
        return fail(err, AGENT_E_PAYLOAD);
    if (out) {
        memcpy(out, p, n);
        out[n] = 0;
    }
    ok(err);
    return 0;
}

int agent_fwrite_decode(const uint8_t *p, size_t n, struct agent_fwrite *out, enum agent_err *err)
{
    if (n < 12)
        return fail(err, AGENT_E_SHORT);
    out->flags = rd32(p);
    out->mode = rd32(p + 4);
    if (out->flags & ~AGENT_FW_FLAGS || out->mode & ~07777u)
        return fail(err, AGENT_E_PAYLOAD);
    uint32_t pl = rd32(p + 8);
    if (pl > n - 12)
        return fail(err, AGENT_E_SHORT);
    if (agent_path_check((const char *)p + 12, pl, NULL, err) < 0)
        return -EINVAL;
    out->path = (const char *)p + 12;
    out->path_len = pl;
    out->data = p + 12 + pl;
    out->data_len = (uint32_t)(n - 12 - pl);
    return 0;
}

int agent_mkdir_decode(const uint8_t *p, size_t n, struct agent_mkdir *out, enum agent_err *err)
{
    if (n < 8)
        return fail(err, AGENT_E_SHORT);
    out->mode = rd32(p);
    out->flags = rd32(p + 4);
    if (out->flags & ~AGENT_MKDIR_FLAGS || out->mode & ~07777u)
        return fail(err, AGENT_E_PAYLOAD);
    if (agent_path_check((const char *)p + 8, n - 8, NULL, err) < 0)
        return -EINVAL;
    out->path = (const char *)p + 8;
    out->path_len = (uint32_t)(n - 8);
    return 0;
}

int agent_file_end_decode(const uint8_t *p, size_t n, uint32_t *mode, uint64_t *size,
                          enum agent_err *err)
{
    if (n != 12)
        return fail(err, n < 12 ? AGENT_E_SHORT : AGENT_E_PAYLOAD);
    *mode = rd32(p);
    if (*mode & ~07777u)
        return fail(err, AGENT_E_PAYLOAD);
    *size = (uint64_t)rd32(p + 4) | (uint64_t)rd32(p + 8) << 32;
    ok(err);
    return 0;
}

static bool time_ok(int64_t sec, uint32_t nsec)
{
    return sec >= 0 && nsec < 1000000000u;
}

int agent_put_set_time(struct agent_buf *b, uint32_t id, const struct agent_time *t)
{
    if (!t || !time_ok(t->sec, t->nsec))
        return -EINVAL;
    uint8_t p[16];
    uint64_t s = (uint64_t)t->sec;
    wr32(p, (uint32_t)s);
    wr32(p + 4, (uint32_t)(s >> 32));
    wr32(p + 8, t->nsec);
    wr32(p + 12, 0);
    return agent_put_frame(b, AGENT_T_SET_TIME, id, p, sizeof p);
}

int agent_time_decode(const uint8_t *p, size_t n, struct agent_time *out, enum agent_err *err)
{
    if (n != 16)
        return fail(err, n < 16 ? AGENT_E_SHORT : AGENT_E_PAYLOAD);
    uint64_t s = (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
    uint32_t ns = rd32(p + 8), flags = rd32(p + 12);
    if (s > (uint64_t)INT64_MAX || ns >= 1000000000u || flags != 0)
        return fail(err, AGENT_E_PAYLOAD);
    out->sec = (int64_t)s;
    out->nsec = ns;
    ok(err);
    return 0;
}

int agent_put_entropy(struct agent_buf *b, uint32_t id, const void *data, size_t len)
{
    if (!data || len == 0 || len > AGENT_MAX_ENTROPY)
        return -EINVAL;
    return agent_put_frame(b, AGENT_T_ADD_ENTROPY, id, data, len);
}

int agent_entropy_check(const uint8_t *p, size_t n, enum agent_err *err)
{
    (void)p;
    if (n == 0)
        return fail(err, AGENT_E_SHORT);
    if (n > AGENT_MAX_ENTROPY)
        return fail(err, AGENT_E_PAYLOAD);
    ok(err);
    return 0;
}

int agent_error_decode(const uint8_t *p, size_t n, struct agent_error *out, enum agent_err *err)
{
    if (n < 8)
        return fail(err, AGENT_E_SHORT);
    if (n - 8 > AGENT_MAX_MSG)
        return fail(err, AGENT_E_PAYLOAD);
    out->code = rd32(p);
    out->sys_errno = rd32(p + 4);
    if (out->code == AGENT_E_OK || out->code >= AGENT_E__COUNT || out->sys_errno > 4095)
        return fail(err, AGENT_E_PAYLOAD);
    out->msg = (const char *)p + 8;
    out->msg_len = (uint32_t)(n - 8);
    ok(err);
    return 0;
}

/* ---- receive buffer --------------------------------------------------- */

int agent_rx_push(struct agent_rx *rx, const void *data, size_t n)
{
    if (rx->off) {                       /* drop consumed bytes first */
        memmove(rx->buf, rx->buf + rx->off, rx->len - rx->off);
        rx->len -= rx->off;
        rx->off = 0;
    }
    if (n > SIZE_MAX / 2 - rx->len)
        return -ENOMEM;
    if (rx->len + n > rx->cap) {
        size_t cap = rx->cap ? rx->cap : 4096;
        while (cap < rx->len + n)
            cap *= 2;
        uint8_t *nb = realloc(rx->buf, cap);
        if (!nb)
            return -ENOMEM;
        rx->buf = nb;
        rx->cap = cap;
    }
    if (n)
        memcpy(rx->buf + rx->len, data, n);
    rx->len += n;
    return 0;
}

int agent_rx_next(struct agent_rx *rx, struct agent_hdr *h, const uint8_t **payload,
                  enum agent_err *err)
{
    size_t avail = rx->len - rx->off;
    if (avail < AGENT_HDR_SIZE) {
        ok(err);
        return 0;
    }
    enum agent_err e;
    if (agent_hdr_decode(rx->buf + rx->off, avail, h, &e) < 0) {
        if (err)
            *err = e;
        return e == AGENT_E_TOOBIG ? -EMSGSIZE : -EINVAL;
    }
    if (avail - AGENT_HDR_SIZE < h->len) {
        ok(err);
        return 0;
    }
    *payload = rx->buf + rx->off + AGENT_HDR_SIZE;
    rx->off += AGENT_HDR_SIZE + h->len;
    ok(err);
    return 1;
}

void agent_rx_free(struct agent_rx *rx)
{
    free(rx->buf);
    memset(rx, 0, sizeof *rx);
}
