/* Guest agent wire protocol: framing and payload codecs (agent_proto.h). */
#include "vmm/agent/agent_proto.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
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
    case AGENT_T_RESIZE: return "RESIZE";
    case AGENT_T_FILE_WRITE: return "FILE_WRITE";
    case AGENT_T_FILE_READ: return "FILE_READ";
    case AGENT_T_FILE_DATA: return "FILE_DATA";
    case AGENT_T_FILE_END: return "FILE_END";
    case AGENT_T_MKDIR: return "MKDIR";
    case AGENT_T_SET_TIME: return "SET_TIME";
    case AGENT_T_ADD_ENTROPY: return "ADD_ENTROPY";
    case AGENT_T_STAT: return "STAT";
    case AGENT_T_LIST: return "LIST";
    case AGENT_T_RENAME: return "RENAME";
    case AGENT_T_REMOVE: return "REMOVE";
    case AGENT_T_WATCH: return "WATCH";
    case AGENT_T_WATCH_EVENT: return "WATCH_EVENT";
    case AGENT_T_STAT_INFO: return "STAT_INFO";
    case AGENT_T_LIST_ENTRY: return "LIST_ENTRY";
    case AGENT_T_LIST_END: return "LIST_END";
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

/* Two u16 (rows, cols): the pty size in EXEC and RESIZE. */
static void wr16x2(uint8_t *p, uint16_t a, uint16_t b)
{
    p[0] = (uint8_t)a;
    p[1] = (uint8_t)(a >> 8);
    p[2] = (uint8_t)b;
    p[3] = (uint8_t)(b >> 8);
}

static int rd_size(const uint8_t *p, uint16_t *rows, uint16_t *cols, enum agent_err *err)
{
    uint16_t r = (uint16_t)(p[0] | p[1] << 8), c = (uint16_t)(p[2] | p[3] << 8);
    if (r == 0 || c == 0)
        return fail(err, AGENT_E_PAYLOAD);
    *rows = r;
    *cols = c;
    return 0;
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
    int pty = (e->flags & AGENT_EXEC_PTY) != 0;
    size_t len = 16 + 4 + strlen(cwd) + (pty ? 4 : 0);
    if (e->argc > AGENT_MAX_ARGS || e->envc > AGENT_MAX_ENV)
        return -E2BIG;
    if (pty && (e->rows == 0 || e->cols == 0))
        return -EINVAL;
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
    if (pty)
        wr16x2(q, e->rows, e->cols);
    frame_end(b, len);
    return 0;
}

int agent_put_resize(struct agent_buf *b, uint32_t id, uint16_t rows, uint16_t cols)
{
    uint8_t p[4];
    if (rows == 0 || cols == 0)
        return -EINVAL;
    wr16x2(p, rows, cols);
    return agent_put_frame(b, AGENT_T_RESIZE, id, p, sizeof p);
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
    uint16_t rows = 0, cols = 0;
    if (flags & AGENT_EXEC_PTY) {                       /* the size ends it */
        if (n - off < 4)
            return fail(err, AGENT_E_SHORT);
        if (rd_size(p + off, &rows, &cols, err) < 0)
            return -EINVAL;
        off += 4;
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
    out->rows = rows;
    out->cols = cols;
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

int agent_resize_decode(const uint8_t *p, size_t n, uint16_t *rows, uint16_t *cols,
                        enum agent_err *err)
{
    if (n != 4)
        return fail(err, n < 4 ? AGENT_E_SHORT : AGENT_E_PAYLOAD);
    if (rd_size(p, rows, cols, err) < 0)
        return -EINVAL;
    ok(err);
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

/* ---- file system requests and entries --------------------------------- */

/* An absolute path of 1..AGENT_MAX_PATH bytes without NUL. */
static bool abs_path_ok(const char *p, size_t n)
{
    return n >= 1 && n <= AGENT_MAX_PATH && p[0] == '/' && !memchr(p, 0, n);
}

static int put_path_req(struct agent_buf *b, uint32_t type, uint32_t id, uint32_t arg,
                        const char *path)
{
    size_t pl_len = path ? strlen(path) : 0;
    if (!abs_path_ok(path, pl_len))
        return -EINVAL;
    uint8_t *pl;
    int r = frame_begin(b, type, id, 4 + pl_len, &pl);
    if (r < 0)
        return r;
    wr32(pl, arg);
    memcpy(pl + 4, path, pl_len);
    frame_end(b, 4 + pl_len);
    return 0;
}

int agent_put_stat(struct agent_buf *b, uint32_t id, uint32_t flags, const char *path)
{
    if (flags & ~AGENT_STAT_FLAGS)
        return -EINVAL;
    return put_path_req(b, AGENT_T_STAT, id, flags, path);
}

int agent_put_list(struct agent_buf *b, uint32_t id, uint32_t depth, const char *path)
{
    if (depth < 1 || depth > AGENT_LIST_MAX_DEPTH)
        return -EINVAL;
    return put_path_req(b, AGENT_T_LIST, id, depth, path);
}

int agent_put_remove(struct agent_buf *b, uint32_t id, uint32_t flags, const char *path)
{
    if (flags & ~AGENT_RM_FLAGS)
        return -EINVAL;
    return put_path_req(b, AGENT_T_REMOVE, id, flags, path);
}

int agent_put_rename(struct agent_buf *b, uint32_t id, const char *src, const char *dst)
{
    size_t sl = src ? strlen(src) : 0, dl = dst ? strlen(dst) : 0;
    if (!abs_path_ok(src, sl) || !abs_path_ok(dst, dl))
        return -EINVAL;
    size_t len = 8 + sl + dl;
    uint8_t *pl;
    int r = frame_begin(b, AGENT_T_RENAME, id, len, &pl);
    if (r < 0)
        return r;
    put_str(put_str(pl, src, sl), dst, dl);
    frame_end(b, len);
    return 0;
}

static int path_req_decode(const uint8_t *p, size_t n, struct agent_path_req *out,
                           enum agent_err *err)
{
    if (n < 5)
        return fail(err, AGENT_E_SHORT);
    out->arg = rd32(p);
    out->path = (const char *)p + 4;
    out->path_len = (uint32_t)(n - 4);
    if (!abs_path_ok(out->path, n - 4))
        return fail(err, AGENT_E_PAYLOAD);
    ok(err);
    return 0;
}

int agent_stat_req_decode(const uint8_t *p, size_t n, struct agent_path_req *out,
                          enum agent_err *err)
{
    if (path_req_decode(p, n, out, err) < 0)
        return -EINVAL;
    if (out->arg & ~AGENT_STAT_FLAGS)
        return fail(err, AGENT_E_PAYLOAD);
    return 0;
}

int agent_list_req_decode(const uint8_t *p, size_t n, struct agent_path_req *out,
                          enum agent_err *err)
{
    if (path_req_decode(p, n, out, err) < 0)
        return -EINVAL;
    if (out->arg < 1 || out->arg > AGENT_LIST_MAX_DEPTH)
        return fail(err, AGENT_E_PAYLOAD);
    return 0;
}

int agent_remove_req_decode(const uint8_t *p, size_t n, struct agent_path_req *out,
                            enum agent_err *err)
{
    if (path_req_decode(p, n, out, err) < 0)
        return -EINVAL;
    if (out->arg & ~AGENT_RM_FLAGS)
        return fail(err, AGENT_E_PAYLOAD);
    return 0;
}

int agent_put_watch(struct agent_buf *b, uint32_t id, uint32_t flags, const char *path)
{
    if (flags & ~AGENT_WATCH_FLAGS)
        return -EINVAL;
    return put_path_req(b, AGENT_T_WATCH, id, flags, path);
}

int agent_watch_req_decode(const uint8_t *p, size_t n, struct agent_path_req *out,
                           enum agent_err *err)
{
    if (path_req_decode(p, n, out, err) < 0)
        return -EINVAL;
    if (out->arg & ~AGENT_WATCH_FLAGS)
        return fail(err, AGENT_E_PAYLOAD);
    return 0;
}

/* A relative name: 1..AGENT_MAX_PATH bytes, no NUL, components neither
 * empty nor "." nor "..". */
static bool rel_name_ok(const char *s, size_t n)
{
    if (n < 1 || n > AGENT_MAX_PATH || memchr(s, 0, n))
        return false;
    size_t i = 0;
    while (i <= n) {
        size_t j = i;
        while (j < n && s[j] != '/')
            j++;
        size_t cl = j - i;
        if (cl == 0 || (cl == 1 && s[i] == '.') || (cl == 2 && s[i] == '.' && s[i + 1] == '.'))
            return false;
        i = j + 1;
    }
    return true;
}

static bool watch_op_ok(uint32_t op)
{
    return op >= AGENT_WATCH_CREATE && op <= AGENT_WATCH_CHMOD;
}

int agent_put_watch_event(struct agent_buf *b, uint32_t id, uint32_t op, const char *name, size_t nl)
{
    if (!watch_op_ok(op) || !name || !rel_name_ok(name, nl))
        return -EINVAL;
    uint8_t *pl;
    int r = frame_begin(b, AGENT_T_WATCH_EVENT, id, 4 + nl, &pl);
    if (r < 0)
        return r;
    wr32(pl, op);
    memcpy(pl + 4, name, nl);
    frame_end(b, 4 + nl);
    return 0;
}

int agent_watch_event_decode(const uint8_t *p, size_t n, uint32_t *op, char *name,
                             enum agent_err *err)
{
    name[0] = 0;
    if (n < 5)
        return fail(err, AGENT_E_SHORT);
    *op = rd32(p);
    if (!watch_op_ok(*op) || !rel_name_ok((const char *)p + 4, n - 4))
        return fail(err, AGENT_E_PAYLOAD);
    memcpy(name, p + 4, n - 4);
    name[n - 4] = 0;
    ok(err);
    return 0;
}

int agent_rename_decode(const uint8_t *p, size_t n, struct agent_rename *out,
                        enum agent_err *err)
{
    size_t off = 0;
    const uint8_t *s, *d;
    uint32_t sl, dl;
    if (get_str(p, n, &off, &s, &sl, err) < 0 || get_str(p, n, &off, &d, &dl, err) < 0)
        return -EINVAL;
    if (off != n)
        return fail(err, AGENT_E_PAYLOAD);              /* trailing bytes */
    if (!abs_path_ok((const char *)s, sl) || !abs_path_ok((const char *)d, dl))
        return fail(err, AGENT_E_PAYLOAD);
    out->src = (const char *)s;
    out->src_len = sl;
    out->dst = (const char *)d;
    out->dst_len = dl;
    ok(err);
    return 0;
}

#define ENTRY_FIXED 36u   /* 4 x u32, u64 size, s64 mtime_sec, u32 mtime_nsec */

/* Everything a decoded entry must satisfy (the encoder checks it too). */
static bool entry_ok(const struct agent_stat *st, size_t pl, size_t ol, size_t gl, size_t ll)
{
    if (st->type < AGENT_FT_FILE || st->type > AGENT_FT_OTHER)
        return false;
    if (st->mode & ~07777u || st->size > (uint64_t)INT64_MAX || st->mtime_nsec >= 1000000000u)
        return false;
    if (!abs_path_ok(st->path, pl) || ol > AGENT_MAX_NAME || gl > AGENT_MAX_NAME ||
        ll > AGENT_MAX_PATH)
        return false;
    if ((st->type == AGENT_FT_SYMLINK) != (ll > 0))
        return false;
    return true;
}

int agent_put_entry(struct agent_buf *b, uint32_t type, uint32_t id, const struct agent_stat *st)
{
    if (type != AGENT_T_STAT_INFO && type != AGENT_T_LIST_ENTRY)
        return -EINVAL;
    size_t pl = strnlen(st->path, sizeof st->path), ol = strnlen(st->owner, sizeof st->owner),
           gl = strnlen(st->group, sizeof st->group), ll = strnlen(st->link, sizeof st->link);
    if (pl == sizeof st->path || ol == sizeof st->owner || gl == sizeof st->group ||
        ll == sizeof st->link || !entry_ok(st, pl, ol, gl, ll))
        return -EINVAL;
    size_t len = ENTRY_FIXED + 16 + pl + ol + gl + ll;
    uint8_t *p;
    int r = frame_begin(b, type, id, len, &p);
    if (r < 0)
        return r;
    uint64_t mt = (uint64_t)st->mtime_sec;
    wr32(p, st->type);
    wr32(p + 4, st->mode);
    wr32(p + 8, st->uid);
    wr32(p + 12, st->gid);
    wr32(p + 16, (uint32_t)st->size);
    wr32(p + 20, (uint32_t)(st->size >> 32));
    wr32(p + 24, (uint32_t)mt);
    wr32(p + 28, (uint32_t)(mt >> 32));
    wr32(p + 32, st->mtime_nsec);
    uint8_t *q = put_str(p + ENTRY_FIXED, st->path, pl);
    q = put_str(q, st->owner, ol);
    q = put_str(q, st->group, gl);
    put_str(q, st->link, ll);
    frame_end(b, len);
    return 0;
}

int agent_entry_decode(const uint8_t *p, size_t n, struct agent_stat *out, enum agent_err *err)
{
    memset(out, 0, offsetof(struct agent_stat, path));
    out->path[0] = out->owner[0] = out->group[0] = out->link[0] = 0;
    if (n < ENTRY_FIXED)
        return fail(err, AGENT_E_SHORT);
    out->type = rd32(p);
    out->mode = rd32(p + 4);
    out->uid = rd32(p + 8);
    out->gid = rd32(p + 12);
    out->size = (uint64_t)rd32(p + 16) | (uint64_t)rd32(p + 20) << 32;
    out->mtime_sec = (int64_t)((uint64_t)rd32(p + 24) | (uint64_t)rd32(p + 28) << 32);
    out->mtime_nsec = rd32(p + 32);
    size_t off = ENTRY_FIXED;
    const uint8_t *s[4];
    uint32_t l[4];
    static const size_t cap[4] = { AGENT_MAX_PATH, AGENT_MAX_NAME, AGENT_MAX_NAME,
                                   AGENT_MAX_PATH };
    for (int i = 0; i < 4; i++) {
        if (get_str(p, n, &off, &s[i], &l[i], err) < 0)
            return -EINVAL;
        if (l[i] > cap[i])
            return fail(err, AGENT_E_PAYLOAD);
    }
    if (off != n)
        return fail(err, AGENT_E_PAYLOAD);              /* trailing bytes */
    char *dst[4] = { out->path, out->owner, out->group, out->link };
    for (int i = 0; i < 4; i++) {
        memcpy(dst[i], s[i], l[i]);
        dst[i][l[i]] = 0;
    }
    if (!entry_ok(out, l[0], l[1], l[2], l[3]))
        return fail(err, AGENT_E_PAYLOAD);
    ok(err);
    return 0;
}

int agent_list_end_decode(const uint8_t *p, size_t n, uint32_t *count, enum agent_err *err)
{
    if (agent_u32_decode(p, n, count, err) < 0)
        return -EINVAL;
    if (*count > AGENT_LIST_MAX_ENTRIES)
        return fail(err, AGENT_E_PAYLOAD);
    return 0;
}

int agent_list_path_check(const char *dir, uint32_t depth, const char *path)
{
    size_t dl = strlen(dir);
    if (dl == 0 || strncmp(path, dir, dl) != 0)
        return -EINVAL;
    const char *s = path + dl;
    if (dir[dl - 1] != '/') {
        if (*s != '/')
            return -EINVAL;
        s++;
    }
    uint32_t comps = 0;
    for (;;) {
        const char *e = strchr(s, '/');
        size_t cl = e ? (size_t)(e - s) : strlen(s);
        if (cl == 0 || (cl == 1 && s[0] == '.') || (cl == 2 && s[0] == '.' && s[1] == '.'))
            return -EINVAL;
        if (++comps > depth)
            return -EINVAL;
        if (!e)
            return 0;
        s = e + 1;
    }
}

int agent_idname_lookup(const char *text, size_t n, uint32_t id, char *name)
{
    name[0] = 0;
    for (size_t off = 0; off < n;) {
        const char *line = text + off;
        const char *nl = memchr(line, '\n', n - off);
        size_t ll = nl ? (size_t)(nl - line) : n - off;
        off += ll + 1;
        if (ll == 0 || line[0] == '+' || line[0] == '-' || line[0] == '#')
            continue;
        const char *c1 = memchr(line, ':', ll);
        if (!c1)
            continue;
        const char *c2 = memchr(c1 + 1, ':', ll - (size_t)(c1 + 1 - line));
        if (!c2)
            continue;
        const char *f = c2 + 1, *end = line + ll;
        const char *c3 = memchr(f, ':', (size_t)(end - f));
        if (c3)
            end = c3;
        /* The id: 1..10 decimal digits, no sign, within u32. */
        if (end == f || end - f > 10)
            continue;
        uint64_t v = 0;
        bool digits = true;
        for (const char *d = f; d < end; d++) {
            if (*d < '0' || *d > '9') {
                digits = false;
                break;
            }
            v = v * 10 + (uint64_t)(*d - '0');
        }
        if (!digits || v != id)
            continue;
        size_t nl_ = (size_t)(c1 - line);
        if (nl_ == 0 || nl_ > AGENT_MAX_NAME || memchr(line, 0, nl_))
            continue;
        memcpy(name, line, nl_);
        name[nl_] = 0;
        return 0;
    }
    return -ENOENT;
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
