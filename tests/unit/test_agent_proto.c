/* Guest agent protocol (vmm/agent/agent_proto.h): round trips of every
 * message and every malformed case the decoders must refuse. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/agent/agent_proto.h"

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }   /* x86: LE */

/* Payload of the first frame in b; checks its header. */
static const uint8_t *only_frame(struct agent_buf *b, uint32_t type, uint32_t id, size_t *len)
{
    struct agent_hdr h;
    enum agent_err e;
    ck_assert_int_eq(agent_hdr_decode(b->p, b->len, &h, &e), 0);
    ck_assert_int_eq(e, AGENT_E_OK);
    ck_assert_uint_eq(h.type, type);
    ck_assert_uint_eq(h.id, id);
    ck_assert_uint_eq(h.len + AGENT_HDR_SIZE, b->len);
    *len = h.len;
    return b->p + AGENT_HDR_SIZE;
}

START_TEST(hdr_round_trip_and_errors)
{
    uint8_t p[AGENT_HDR_SIZE];
    struct agent_hdr h;
    enum agent_err e;
    agent_hdr_encode(p, AGENT_T_PING, 7, 3);
    ck_assert_int_eq(agent_hdr_decode(p, sizeof p, &h, &e), 0);
    ck_assert_uint_eq(h.type, AGENT_T_PING);
    ck_assert_uint_eq(h.id, 7);
    ck_assert_uint_eq(h.len, 3);
    ck_assert_int_eq(agent_hdr_decode(p, sizeof p - 1, &h, &e), -EINVAL);
    ck_assert_int_eq(e, AGENT_E_SHORT);
    ck_assert_int_eq(agent_hdr_decode(NULL, 0, &h, &e), -EINVAL);
    p[0] ^= 1;
    ck_assert_int_eq(agent_hdr_decode(p, sizeof p, &h, &e), -EINVAL);
    ck_assert_int_eq(e, AGENT_E_MAGIC);
    agent_hdr_encode(p, AGENT_T_PING, 7, AGENT_MAX_PAYLOAD);
    ck_assert_int_eq(agent_hdr_decode(p, sizeof p, &h, &e), 0);
    agent_hdr_encode(p, AGENT_T_PING, 7, AGENT_MAX_PAYLOAD + 1);
    ck_assert_int_eq(agent_hdr_decode(p, sizeof p, &h, &e), -EINVAL);
    ck_assert_int_eq(e, AGENT_E_TOOBIG);
    agent_hdr_encode(p, AGENT_T_PING, 7, 0xffffffffu);
    ck_assert_int_eq(agent_hdr_decode(p, sizeof p, &h, &e), -EINVAL);
    ck_assert_int_eq(e, AGENT_E_TOOBIG);
}
END_TEST

START_TEST(exec_round_trip)
{
    char *argv[] = { "sh", "-c", "echo hi", NULL };
    char *env[] = { "A=1", "B=", NULL };
    struct agent_exec in = { .flags = AGENT_EXEC_STDIN, .timeout_ms = 1500, .argc = 3,
                             .envc = 2, .cwd = "/tmp", .argv = argv, .env = env };
    struct agent_buf b = { 0 };
    ck_assert_int_eq(agent_put_exec(&b, 42, &in), 0);
    size_t n;
    const uint8_t *pl = only_frame(&b, AGENT_T_EXEC, 42, &n);
    struct agent_exec out;
    enum agent_err e;
    ck_assert_int_eq(agent_exec_decode(pl, n, &out, &e), 0);
    ck_assert_uint_eq(out.flags, AGENT_EXEC_STDIN);
    ck_assert_uint_eq(out.timeout_ms, 1500);
    ck_assert_uint_eq(out.argc, 3);
    ck_assert_uint_eq(out.envc, 2);
    ck_assert_str_eq(out.cwd, "/tmp");
    for (int i = 0; i < 3; i++)
        ck_assert_str_eq(out.argv[i], argv[i]);
    ck_assert_ptr_null(out.argv[3]);
    ck_assert_str_eq(out.env[0], "A=1");
    ck_assert_str_eq(out.env[1], "B=");
    ck_assert_ptr_null(out.env[2]);
    agent_exec_free(&out);
    /* Every truncation of the payload is refused. */
    for (size_t k = 0; k < n; k++) {
        ck_assert_int_eq(agent_exec_decode(pl, k, &out, &e), -EINVAL);
        ck_assert_int_ne(e, AGENT_E_OK);
    }
    agent_buf_free(&b);
}
END_TEST

/* A raw exec payload builder for malformed cases. */
struct raw { uint8_t b[512]; size_t n; };
static void raw_u32(struct raw *r, uint32_t v) { put32(r->b + r->n, v); r->n += 4; }
static void raw_str(struct raw *r, const char *s, size_t l)
{
    raw_u32(r, (uint32_t)l);
    memcpy(r->b + r->n, s, l);
    r->n += l;
}
static struct raw exec_raw(uint32_t flags, uint32_t argc, uint32_t envc)
{
    struct raw r = { .n = 0 };
    raw_u32(&r, flags);
    raw_u32(&r, 0);
    raw_u32(&r, argc);
    raw_u32(&r, envc);
    return r;
}
static enum agent_err exec_err(struct raw *r)
{
    struct agent_exec out;
    enum agent_err e = AGENT_E_OK;
    ck_assert_int_eq(agent_exec_decode(r->b, r->n, &out, &e), -EINVAL);
    return e;
}

START_TEST(exec_malformed)
{
    struct raw r;
    r = exec_raw(4, 1, 0); raw_str(&r, "", 0); raw_str(&r, "ls", 2);
    ck_assert_int_eq(exec_err(&r), AGENT_E_PAYLOAD);            /* unknown flag */
    r = exec_raw(0x80000000u, 1, 0); raw_str(&r, "", 0); raw_str(&r, "ls", 2);
    ck_assert_int_eq(exec_err(&r), AGENT_E_PAYLOAD);            /* unknown high flag */
    r = exec_raw(0, 0, 0); raw_str(&r, "", 0);
    ck_assert_int_eq(exec_err(&r), AGENT_E_PAYLOAD);            /* argc 0 */
    r = exec_raw(0, AGENT_MAX_ARGS + 1, 0); raw_str(&r, "", 0);
    ck_assert_int_eq(exec_err(&r), AGENT_E_PAYLOAD);            /* argc too big */
    r = exec_raw(0, 1, AGENT_MAX_ENV + 1); raw_str(&r, "", 0);
    ck_assert_int_eq(exec_err(&r), AGENT_E_PAYLOAD);            /* envc too big */
    r = exec_raw(0, 3, 0); raw_str(&r, "", 0); raw_str(&r, "ls", 2);
    ck_assert_int_eq(exec_err(&r), AGENT_E_SHORT);              /* counts > strings */
    r = exec_raw(0, 1, 0); raw_str(&r, "", 0); raw_str(&r, "", 0);
    ck_assert_int_eq(exec_err(&r), AGENT_E_PAYLOAD);            /* empty argv[0] */
    r = exec_raw(0, 1, 0); raw_str(&r, "", 0); raw_str(&r, "l\0s", 3);
    ck_assert_int_eq(exec_err(&r), AGENT_E_PAYLOAD);            /* NUL in arg */
    r = exec_raw(0, 1, 0); raw_str(&r, "/t\0", 3); raw_str(&r, "ls", 2);
    ck_assert_int_eq(exec_err(&r), AGENT_E_PAYLOAD);            /* NUL in cwd */
    r = exec_raw(0, 1, 1); raw_str(&r, "", 0); raw_str(&r, "ls", 2); raw_str(&r, "NOEQ", 4);
    ck_assert_int_eq(exec_err(&r), AGENT_E_PAYLOAD);            /* env without = */
    r = exec_raw(0, 1, 1); raw_str(&r, "", 0); raw_str(&r, "ls", 2); raw_str(&r, "=v", 2);
    ck_assert_int_eq(exec_err(&r), AGENT_E_PAYLOAD);            /* env empty key */
    r = exec_raw(0, 1, 1); raw_str(&r, "", 0); raw_str(&r, "ls", 2); raw_str(&r, "", 0);
    ck_assert_int_eq(exec_err(&r), AGENT_E_PAYLOAD);            /* env empty */
    r = exec_raw(0, 1, 0); raw_str(&r, "", 0); raw_str(&r, "ls", 2); raw_u32(&r, 0);
    ck_assert_int_eq(exec_err(&r), AGENT_E_PAYLOAD);            /* trailing bytes */
    r = exec_raw(0, 1, 0); raw_str(&r, "", 0); raw_u32(&r, 0xfffffff0u);
    ck_assert_int_eq(exec_err(&r), AGENT_E_SHORT);              /* huge string length */
    r = exec_raw(0, 1, 0); raw_u32(&r, AGENT_MAX_PATH + 1);
    ck_assert_int_eq(exec_err(&r), AGENT_E_SHORT);              /* cwd past end */
}
END_TEST

static void raw_u16x2(struct raw *r, uint16_t a, uint16_t b)
{
    r->b[r->n++] = (uint8_t)a;
    r->b[r->n++] = (uint8_t)(a >> 8);
    r->b[r->n++] = (uint8_t)b;
    r->b[r->n++] = (uint8_t)(b >> 8);
}

START_TEST(exec_pty_round_trip)
{
    char *argv[] = { "bash", "-i", NULL };
    char *env[] = { "TERM=vt100", NULL };
    struct agent_exec in = { .flags = AGENT_EXEC_PTY, .argc = 2, .envc = 1, .cwd = "",
                             .argv = argv, .env = env, .rows = 300, .cols = 2 };
    struct agent_buf b = { 0 };
    ck_assert_int_eq(agent_put_exec(&b, 7, &in), 0);
    size_t n;
    const uint8_t *pl = only_frame(&b, AGENT_T_EXEC, 7, &n);
    /* The size is the last 4 bytes, little-endian u16 rows then cols. */
    ck_assert_uint_eq(pl[n - 4], 300 & 0xff);
    ck_assert_uint_eq(pl[n - 3], 300 >> 8);
    ck_assert_uint_eq(pl[n - 2], 2);
    ck_assert_uint_eq(pl[n - 1], 0);
    struct agent_exec out;
    enum agent_err e;
    ck_assert_int_eq(agent_exec_decode(pl, n, &out, &e), 0);
    ck_assert_uint_eq(out.flags, AGENT_EXEC_PTY);
    ck_assert_uint_eq(out.rows, 300);
    ck_assert_uint_eq(out.cols, 2);
    ck_assert_str_eq(out.argv[1], "-i");
    ck_assert_str_eq(out.env[0], "TERM=vt100");
    agent_exec_free(&out);
    for (size_t k = 0; k < n; k++) {
        ck_assert_int_eq(agent_exec_decode(pl, k, &out, &e), -EINVAL);
        ck_assert_int_ne(e, AGENT_E_OK);
    }
    agent_buf_free(&b);
    /* STDIN and PTY together; the maximum size. */
    in.flags = AGENT_EXEC_PTY | AGENT_EXEC_STDIN;
    in.rows = in.cols = 65535;
    ck_assert_int_eq(agent_put_exec(&b, 7, &in), 0);
    pl = only_frame(&b, AGENT_T_EXEC, 7, &n);
    ck_assert_int_eq(agent_exec_decode(pl, n, &out, &e), 0);
    ck_assert_uint_eq(out.rows, 65535);
    ck_assert_uint_eq(out.cols, 65535);
    agent_exec_free(&out);
    agent_buf_free(&b);
    /* Without PTY the size is not sent (the payload is what it always was). */
    in.flags = 0;
    ck_assert_int_eq(agent_put_exec(&b, 7, &in), 0);
    size_t n0;
    pl = only_frame(&b, AGENT_T_EXEC, 7, &n0);
    ck_assert_uint_eq(n0, n - 4);
    ck_assert_int_eq(agent_exec_decode(pl, n0, &out, &e), 0);
    ck_assert_uint_eq(out.rows, 0);
    agent_exec_free(&out);
    agent_buf_free(&b);
    /* The encoder refuses a zero size. */
    in.flags = AGENT_EXEC_PTY;
    in.rows = 0;
    ck_assert_int_eq(agent_put_exec(&b, 7, &in), -EINVAL);
    in.rows = 24;
    in.cols = 0;
    ck_assert_int_eq(agent_put_exec(&b, 7, &in), -EINVAL);
    ck_assert_uint_eq(b.len, 0);
    agent_buf_free(&b);
}
END_TEST

START_TEST(exec_pty_malformed)
{
    struct raw r;
    r = exec_raw(AGENT_EXEC_PTY, 1, 0); raw_str(&r, "", 0); raw_str(&r, "sh", 2);
    ck_assert_int_eq(exec_err(&r), AGENT_E_SHORT);              /* no size */
    r = exec_raw(AGENT_EXEC_PTY, 1, 0); raw_str(&r, "", 0); raw_str(&r, "sh", 2);
    r.b[r.n++] = 24; r.b[r.n++] = 0; r.b[r.n++] = 80;
    ck_assert_int_eq(exec_err(&r), AGENT_E_SHORT);              /* 3 of 4 size bytes */
    r = exec_raw(AGENT_EXEC_PTY, 1, 0); raw_str(&r, "", 0); raw_str(&r, "sh", 2);
    raw_u16x2(&r, 0, 80);
    ck_assert_int_eq(exec_err(&r), AGENT_E_PAYLOAD);            /* zero rows */
    r = exec_raw(AGENT_EXEC_PTY, 1, 0); raw_str(&r, "", 0); raw_str(&r, "sh", 2);
    raw_u16x2(&r, 24, 0);
    ck_assert_int_eq(exec_err(&r), AGENT_E_PAYLOAD);            /* zero cols */
    r = exec_raw(AGENT_EXEC_PTY, 1, 0); raw_str(&r, "", 0); raw_str(&r, "sh", 2);
    raw_u16x2(&r, 24, 80); r.b[r.n++] = 0;
    ck_assert_int_eq(exec_err(&r), AGENT_E_PAYLOAD);            /* trailing byte */
    r = exec_raw(0, 1, 0); raw_str(&r, "", 0); raw_str(&r, "sh", 2);
    raw_u16x2(&r, 24, 80);
    ck_assert_int_eq(exec_err(&r), AGENT_E_PAYLOAD);            /* a size without PTY */
    r = exec_raw(AGENT_EXEC_PTY, 1, 1); raw_str(&r, "", 0); raw_str(&r, "sh", 2);
    raw_u16x2(&r, 24, 80);
    ck_assert_int_eq(exec_err(&r), AGENT_E_SHORT);              /* envc 1, no env: the size is no string */
    struct agent_exec out;
    enum agent_err e;
    r = exec_raw(AGENT_EXEC_PTY, 1, 0); raw_str(&r, "", 0); raw_str(&r, "sh", 2);
    raw_u16x2(&r, 1, 1);
    ck_assert_int_eq(agent_exec_decode(r.b, r.n, &out, &e), 0); /* the smallest size */
    ck_assert_uint_eq(out.rows, 1);
    ck_assert_uint_eq(out.cols, 1);
    agent_exec_free(&out);
}
END_TEST

START_TEST(resize_round_trip_and_errors)
{
    struct agent_buf b = { 0 };
    uint16_t rows, cols;
    enum agent_err e;
    size_t n;
    ck_assert_int_eq(agent_put_resize(&b, 9, 50, 132), 0);
    const uint8_t *pl = only_frame(&b, AGENT_T_RESIZE, 9, &n);
    ck_assert_uint_eq(n, 4);
    ck_assert_int_eq(agent_resize_decode(pl, n, &rows, &cols, &e), 0);
    ck_assert_int_eq(e, AGENT_E_OK);
    ck_assert_uint_eq(rows, 50);
    ck_assert_uint_eq(cols, 132);
    agent_buf_free(&b);
    ck_assert_int_eq(agent_put_resize(&b, 9, 0, 80), -EINVAL);
    ck_assert_int_eq(agent_put_resize(&b, 9, 24, 0), -EINVAL);
    ck_assert_uint_eq(b.len, 0);
    uint8_t p[5] = { 24, 0, 80, 0, 0 };
    for (size_t k = 0; k < 4; k++) {
        ck_assert_int_eq(agent_resize_decode(p, k, &rows, &cols, &e), -EINVAL);
        ck_assert_int_eq(e, AGENT_E_SHORT);
    }
    ck_assert_int_eq(agent_resize_decode(p, 5, &rows, &cols, &e), -EINVAL);
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);                       /* trailing byte */
    uint8_t z1[4] = { 0, 0, 80, 0 }, z2[4] = { 24, 0, 0, 0 }, mx[4] = { 0xff, 0xff, 0xff, 0xff };
    ck_assert_int_eq(agent_resize_decode(z1, 4, &rows, &cols, &e), -EINVAL);
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);
    ck_assert_int_eq(agent_resize_decode(z2, 4, &rows, &cols, &e), -EINVAL);
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);
    ck_assert_int_eq(agent_resize_decode(mx, 4, &rows, &cols, &e), 0);
    ck_assert_uint_eq(rows, 65535);
    ck_assert_uint_eq(cols, 65535);
    ck_assert_str_eq(agent_type_name(AGENT_T_RESIZE), "RESIZE");
}
END_TEST

START_TEST(exec_cwd_too_long)
{
    size_t n = 16 + 4 + AGENT_MAX_PATH + 1 + 4 + 2;
    uint8_t *p = calloc(1, n);
    put32(p + 8, 1);
    put32(p + 16, AGENT_MAX_PATH + 1);
    memset(p + 20, 'a', AGENT_MAX_PATH + 1);
    put32(p + 20 + AGENT_MAX_PATH + 1, 2);
    memcpy(p + 24 + AGENT_MAX_PATH + 1, "ls", 2);
    struct agent_exec out;
    enum agent_err e;
    ck_assert_int_eq(agent_exec_decode(p, n, &out, &e), -EINVAL);
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);
    /* One byte shorter cwd is fine. */
    put32(p + 16, AGENT_MAX_PATH);
    memmove(p + 20 + AGENT_MAX_PATH, p + 21 + AGENT_MAX_PATH, 6);
    ck_assert_int_eq(agent_exec_decode(p, n - 1, &out, &e), 0);
    ck_assert_uint_eq(strlen(out.cwd), AGENT_MAX_PATH);
    agent_exec_free(&out);
    free(p);
}
END_TEST

START_TEST(exec_encode_limits)
{
    struct agent_buf b = { 0 };
    char *big = malloc(AGENT_MAX_PAYLOAD);
    memset(big, 'x', AGENT_MAX_PAYLOAD - 1);
    big[AGENT_MAX_PAYLOAD - 1] = 0;
    char *argv[] = { big, NULL };
    struct agent_exec in = { .argc = 1, .argv = argv };
    ck_assert_int_eq(agent_put_exec(&b, 1, &in), -E2BIG);
    ck_assert_uint_eq(b.len, 0);
    in.argc = AGENT_MAX_ARGS + 1;
    ck_assert_int_eq(agent_put_exec(&b, 1, &in), -E2BIG);
    ck_assert_int_eq(agent_put_frame(&b, AGENT_T_STDIN, 1, big, AGENT_MAX_PAYLOAD + 1ul), -E2BIG);
    ck_assert_int_eq(agent_put_frame(&b, AGENT_T_STDIN, 1, big, AGENT_MAX_PAYLOAD), 0);
    ck_assert_uint_eq(b.len, AGENT_HDR_SIZE + AGENT_MAX_PAYLOAD);
    free(big);
    agent_buf_free(&b);
}
END_TEST

START_TEST(exit_round_trip_and_errors)
{
    struct agent_buf b = { 0 };
    struct agent_exit x = { AGENT_EXIT_SIGNAL, 9, AGENT_EXIT_TIMEDOUT }, y;
    enum agent_err e;
    size_t n;
    ck_assert_int_eq(agent_put_exit(&b, 5, &x), 0);
    const uint8_t *pl = only_frame(&b, AGENT_T_EXIT, 5, &n);
    ck_assert_int_eq(agent_exit_decode(pl, n, &y, &e), 0);
    ck_assert_uint_eq(y.kind, x.kind);
    ck_assert_uint_eq(y.value, x.value);
    ck_assert_uint_eq(y.flags, x.flags);
    ck_assert_int_eq(agent_exit_decode(pl, n - 1, &y, &e), -EINVAL);
    ck_assert_int_eq(e, AGENT_E_SHORT);
    uint8_t p[13] = { 0 };
    ck_assert_int_eq(agent_exit_decode(p, 13, &y, &e), -EINVAL);     /* too long */
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);
    ck_assert_int_eq(agent_exit_decode(p, 12, &y, &e), 0);           /* exit 0 */
    put32(p + 4, 256);
    ck_assert_int_eq(agent_exit_decode(p, 12, &y, &e), -EINVAL);     /* code > 255 */
    put32(p, AGENT_EXIT_SIGNAL); put32(p + 4, 0);
    ck_assert_int_eq(agent_exit_decode(p, 12, &y, &e), -EINVAL);     /* signal 0 */
    put32(p + 4, 65);
    ck_assert_int_eq(agent_exit_decode(p, 12, &y, &e), -EINVAL);     /* signal 65 */
    put32(p, 2); put32(p + 4, 1);
    ck_assert_int_eq(agent_exit_decode(p, 12, &y, &e), -EINVAL);     /* bad kind */
    put32(p, 0); put32(p + 8, 2);
    ck_assert_int_eq(agent_exit_decode(p, 12, &y, &e), -EINVAL);     /* bad flags */
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);
    agent_buf_free(&b);
}
END_TEST

START_TEST(kill_and_u32)
{
    uint8_t p[5];
    int sig;
    uint32_t v;
    enum agent_err e;
    put32(p, 15);
    ck_assert_int_eq(agent_kill_decode(p, 4, &sig, &e), 0);
    ck_assert_int_eq(sig, 15);
    ck_assert_int_eq(agent_kill_decode(p, 3, &sig, &e), -EINVAL);
    ck_assert_int_eq(e, AGENT_E_SHORT);
    ck_assert_int_eq(agent_kill_decode(p, 5, &sig, &e), -EINVAL);
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);
    put32(p, 0);
    ck_assert_int_eq(agent_kill_decode(p, 4, &sig, &e), -EINVAL);
    put32(p, 65);
    ck_assert_int_eq(agent_kill_decode(p, 4, &sig, &e), -EINVAL);
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);
    put32(p, 0xdeadbeef);
    ck_assert_int_eq(agent_u32_decode(p, 4, &v, &e), 0);
    ck_assert_uint_eq(v, 0xdeadbeef);
    ck_assert_int_eq(agent_u32_decode(p, 0, &v, &e), -EINVAL);
}
END_TEST

START_TEST(fwrite_round_trip_and_errors)
{
    struct agent_buf b = { 0 };
    struct agent_fwrite w;
    enum agent_err e;
    size_t n;
    ck_assert_int_eq(agent_put_fwrite(&b, 3, AGENT_FW_APPEND, 0640, "/tmp/f", "abc", 3), 0);
    const uint8_t *pl = only_frame(&b, AGENT_T_FILE_WRITE, 3, &n);
    ck_assert_int_eq(agent_fwrite_decode(pl, n, &w, &e), 0);
    ck_assert_uint_eq(w.flags, AGENT_FW_APPEND);
    ck_assert_uint_eq(w.mode, 0640);
    ck_assert_uint_eq(w.path_len, 6);
    ck_assert_int_eq(memcmp(w.path, "/tmp/f", 6), 0);
    ck_assert_uint_eq(w.data_len, 3);
    ck_assert_int_eq(memcmp(w.data, "abc", 3), 0);
    /* Truncated into the path: refused; into the data: a shorter chunk. */
    for (size_t k = 0; k < 12 + 6; k++)
        ck_assert_int_eq(agent_fwrite_decode(pl, k, &w, &e), -EINVAL);
    ck_assert_int_eq(agent_fwrite_decode(pl, 12 + 6, &w, &e), 0);
    ck_assert_uint_eq(w.data_len, 0);

    uint8_t p[32] = { 0 };
    put32(p, 2);                                        /* bad flag */
    put32(p + 8, 1); p[12] = 'x';
    ck_assert_int_eq(agent_fwrite_decode(p, 13, &w, &e), -EINVAL);
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);
    put32(p, 0); put32(p + 4, 010000);                  /* bad mode */
    ck_assert_int_eq(agent_fwrite_decode(p, 13, &w, &e), -EINVAL);
    put32(p + 4, 0644); put32(p + 8, 0);                /* empty path */
    ck_assert_int_eq(agent_fwrite_decode(p, 13, &w, &e), -EINVAL);
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);
    put32(p + 8, 2); p[12] = 'a'; p[13] = 0;            /* NUL in path */
    ck_assert_int_eq(agent_fwrite_decode(p, 14, &w, &e), -EINVAL);
    put32(p + 8, 100);                                  /* path past end */
    ck_assert_int_eq(agent_fwrite_decode(p, 20, &w, &e), -EINVAL);
    ck_assert_int_eq(e, AGENT_E_SHORT);
    agent_buf_free(&b);

    char *longp = malloc(AGENT_MAX_PATH + 2);
    memset(longp, 'a', AGENT_MAX_PATH + 1);
    longp[AGENT_MAX_PATH + 1] = 0;
    ck_assert_int_eq(agent_put_fwrite(&b, 3, 0, 0644, longp, "", 0), -E2BIG);
    free(longp);
}
END_TEST

START_TEST(mkdir_and_path)
{
    struct agent_buf b = { 0 };
    struct agent_mkdir m;
    enum agent_err e;
    size_t n;
    ck_assert_int_eq(agent_put_mkdir(&b, 9, 0755, AGENT_MKDIR_PARENTS, "/a/b"), 0);
    const uint8_t *pl = only_frame(&b, AGENT_T_MKDIR, 9, &n);
    ck_assert_int_eq(agent_mkdir_decode(pl, n, &m, &e), 0);
    ck_assert_uint_eq(m.mode, 0755);
    ck_assert_uint_eq(m.flags, AGENT_MKDIR_PARENTS);
    ck_assert_uint_eq(m.path_len, 4);
    ck_assert_int_eq(agent_mkdir_decode(pl, 8, &m, &e), -EINVAL);     /* no path */
    ck_assert_int_eq(agent_mkdir_decode(pl, 7, &m, &e), -EINVAL);
    ck_assert_int_eq(e, AGENT_E_SHORT);
    uint8_t p[12] = { 0 };
    put32(p + 4, 2); p[8] = 'x';
    ck_assert_int_eq(agent_mkdir_decode(p, 9, &m, &e), -EINVAL);      /* bad flag */
    put32(p + 4, 0); put32(p, 0170000);
    ck_assert_int_eq(agent_mkdir_decode(p, 9, &m, &e), -EINVAL);      /* bad mode */
    agent_buf_free(&b);

    char out[AGENT_MAX_PATH + 1];
    ck_assert_int_eq(agent_path_check("/x", 2, out, &e), 0);
    ck_assert_str_eq(out, "/x");
    ck_assert_int_eq(agent_path_check("/x", 0, out, &e), -EINVAL);
    ck_assert_int_eq(agent_path_check("/\0x", 3, out, &e), -EINVAL);
    char *longp = malloc(AGENT_MAX_PATH + 1);
    memset(longp, 'a', AGENT_MAX_PATH + 1);
    ck_assert_int_eq(agent_path_check(longp, AGENT_MAX_PATH + 1, out, &e), -EINVAL);
    ck_assert_int_eq(agent_path_check(longp, AGENT_MAX_PATH, out, &e), 0);
    ck_assert_uint_eq(strlen(out), AGENT_MAX_PATH);
    free(longp);
}
END_TEST

START_TEST(file_end_and_error)
{
    struct agent_buf b = { 0 };
    enum agent_err e;
    size_t n;
    uint32_t mode;
    uint64_t size;
    ck_assert_int_eq(agent_put_file_end(&b, 4, 0600, 0x123456789ull), 0);
    const uint8_t *pl = only_frame(&b, AGENT_T_FILE_END, 4, &n);
    ck_assert_int_eq(agent_file_end_decode(pl, n, &mode, &size, &e), 0);
    ck_assert_uint_eq(mode, 0600);
    ck_assert_uint_eq(size, 0x123456789ull);
    ck_assert_int_eq(agent_file_end_decode(pl, n - 1, &mode, &size, &e), -EINVAL);
    uint8_t p[12] = { 0 };
    put32(p, 0100644);
    ck_assert_int_eq(agent_file_end_decode(p, 12, &mode, &size, &e), -EINVAL);
    agent_buf_free(&b);

    struct agent_error er;
    ck_assert_int_eq(agent_put_error(&b, 8, AGENT_E_SYS, ENOENT, "no such"), 0);
    pl = only_frame(&b, AGENT_T_ERROR, 8, &n);
    ck_assert_int_eq(agent_error_decode(pl, n, &er, &e), 0);
    ck_assert_uint_eq(er.code, AGENT_E_SYS);
    ck_assert_uint_eq(er.sys_errno, ENOENT);
    ck_assert_uint_eq(er.msg_len, 7);
    ck_assert_int_eq(memcmp(er.msg, "no such", 7), 0);
    ck_assert_int_eq(agent_error_decode(pl, 7, &er, &e), -EINVAL);
    agent_buf_free(&b);
    put32(p, 0);
    ck_assert_int_eq(agent_error_decode(p, 8, &er, &e), -EINVAL);      /* code OK */
    put32(p, AGENT_E__COUNT);
    ck_assert_int_eq(agent_error_decode(p, 8, &er, &e), -EINVAL);      /* unknown code */
    put32(p, AGENT_E_SYS); put32(p + 4, 5000);
    ck_assert_int_eq(agent_error_decode(p, 8, &er, &e), -EINVAL);      /* errno range */
    uint8_t *big = calloc(1, 8 + AGENT_MAX_MSG + 1);
    put32(big, AGENT_E_SYS);
    ck_assert_int_eq(agent_error_decode(big, 8 + AGENT_MAX_MSG, &er, &e), 0);
    ck_assert_int_eq(agent_error_decode(big, 8 + AGENT_MAX_MSG + 1, &er, &e), -EINVAL);
    free(big);
    /* A long message is clipped, never refused. */
    char *msg = malloc(AGENT_MAX_MSG + 100);
    memset(msg, 'm', AGENT_MAX_MSG + 99);
    msg[AGENT_MAX_MSG + 99] = 0;
    ck_assert_int_eq(agent_put_error(&b, 1, AGENT_E_PAYLOAD, 0, msg), 0);
    ck_assert_uint_eq(b.len, AGENT_HDR_SIZE + 8 + AGENT_MAX_MSG);
    free(msg);
    agent_buf_free(&b);
    for (int i = 0; i <= AGENT_E__COUNT; i++)
        ck_assert_ptr_nonnull(agent_strerror((enum agent_err)i));
    ck_assert_str_eq(agent_type_name(AGENT_T_EXEC), "EXEC");
    ck_assert_str_eq(agent_type_name(999), "?");
}
END_TEST

START_TEST(set_time_and_entropy)
{
    struct agent_buf b = { 0 };
    enum agent_err e;
    size_t n;
    struct agent_time t = { .sec = 1764450000, .nsec = 999999999 }, got;
    ck_assert_int_eq(agent_put_set_time(&b, 9, &t), 0);
    const uint8_t *pl = only_frame(&b, AGENT_T_SET_TIME, 9, &n);
    ck_assert_uint_eq(n, 16);
    ck_assert_int_eq(agent_time_decode(pl, n, &got, &e), 0);
    ck_assert_int_eq(e, AGENT_E_OK);
    ck_assert_int_eq(got.sec, t.sec);
    ck_assert_uint_eq(got.nsec, t.nsec);
    /* short, long */
    ck_assert_int_eq(agent_time_decode(pl, 15, &got, &e), -EINVAL);
    ck_assert_int_eq(e, AGENT_E_SHORT);
    uint8_t p[17] = { 0 };
    ck_assert_int_eq(agent_time_decode(p, 17, &got, &e), -EINVAL);
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);
    ck_assert_int_eq(agent_time_decode(p, 0, &got, &e), -EINVAL);
    /* nsec out of range, negative seconds, flags set */
    memcpy(p, pl, 16);
    put32(p + 8, 1000000000u);
    ck_assert_int_eq(agent_time_decode(p, 16, &got, &e), -EINVAL);
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);
    memcpy(p, pl, 16);
    put32(p + 4, 0x80000000u);
    ck_assert_int_eq(agent_time_decode(p, 16, &got, &e), -EINVAL);
    memcpy(p, pl, 16);
    put32(p + 12, 1);
    ck_assert_int_eq(agent_time_decode(p, 16, &got, &e), -EINVAL);
    /* the encoder refuses what the decoder would */
    agent_buf_free(&b);
    struct agent_time bad = { .sec = -1, .nsec = 0 };
    ck_assert_int_eq(agent_put_set_time(&b, 1, &bad), -EINVAL);
    bad = (struct agent_time){ .sec = 1, .nsec = 1000000000u };
    ck_assert_int_eq(agent_put_set_time(&b, 1, &bad), -EINVAL);
    ck_assert_uint_eq(b.len, 0);

    uint8_t rnd[AGENT_MAX_ENTROPY + 1];
    for (unsigned i = 0; i < sizeof rnd; i++)
        rnd[i] = (uint8_t)(i * 7 + 1);
    ck_assert_int_eq(agent_put_entropy(&b, 3, rnd, 32), 0);
    pl = only_frame(&b, AGENT_T_ADD_ENTROPY, 3, &n);
    ck_assert_uint_eq(n, 32);
    ck_assert_mem_eq(pl, rnd, 32);
    ck_assert_int_eq(agent_entropy_check(pl, n, &e), 0);
    ck_assert_int_eq(agent_entropy_check(rnd, AGENT_MAX_ENTROPY, &e), 0);
    ck_assert_int_eq(agent_entropy_check(rnd, 0, &e), -EINVAL);
    ck_assert_int_eq(e, AGENT_E_SHORT);
    ck_assert_int_eq(agent_entropy_check(rnd, AGENT_MAX_ENTROPY + 1, &e), -EINVAL);
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);
    agent_buf_free(&b);
    ck_assert_int_eq(agent_put_entropy(&b, 3, rnd, 0), -EINVAL);
    ck_assert_int_eq(agent_put_entropy(&b, 3, rnd, AGENT_MAX_ENTROPY + 1), -EINVAL);
    ck_assert_int_eq(agent_put_entropy(&b, 3, NULL, 4), -EINVAL);
    ck_assert_uint_eq(b.len, 0);
    ck_assert_str_eq(agent_type_name(AGENT_T_SET_TIME), "SET_TIME");
    ck_assert_str_eq(agent_type_name(AGENT_T_ADD_ENTROPY), "ADD_ENTROPY");
    agent_buf_free(&b);
}
END_TEST

START_TEST(rx_byte_by_byte)
{
    struct agent_buf b = { 0 };
    ck_assert_int_eq(agent_put_frame(&b, AGENT_T_PING, 1, "abc", 3), 0);
    ck_assert_int_eq(agent_put_frame(&b, AGENT_T_STDIN_EOF, 2, NULL, 0), 0);
    ck_assert_int_eq(agent_put_u32(&b, AGENT_T_KILL, 3, 9), 0);
    struct agent_rx rx = { 0 };
    struct agent_hdr h;
    const uint8_t *pl;
    enum agent_err e;
    uint32_t seen[3];
    int got = 0;
    for (size_t i = 0; i < b.len; i++) {
        ck_assert_int_eq(agent_rx_push(&rx, b.p + i, 1), 0);
        int r;
        while ((r = agent_rx_next(&rx, &h, &pl, &e)) == 1) {
            ck_assert_int_lt(got, 3);
            seen[got++] = h.type;
            if (h.type == AGENT_T_PING)
                ck_assert_int_eq(memcmp(pl, "abc", 3), 0);
        }
        ck_assert_int_eq(r, 0);
    }
    ck_assert_int_eq(got, 3);
    ck_assert_uint_eq(seen[0], AGENT_T_PING);
    ck_assert_uint_eq(seen[1], AGENT_T_STDIN_EOF);
    ck_assert_uint_eq(seen[2], AGENT_T_KILL);
    agent_rx_free(&rx);
    agent_buf_free(&b);
}
END_TEST

START_TEST(rx_bad_magic_and_oversized)
{
    struct agent_rx rx = { 0 };
    struct agent_hdr h;
    const uint8_t *pl;
    enum agent_err e;
    uint8_t p[AGENT_HDR_SIZE];
    agent_hdr_encode(p, AGENT_T_PING, 0, 0);
    p[3] = 0;
    ck_assert_int_eq(agent_rx_push(&rx, p, sizeof p), 0);
    ck_assert_int_eq(agent_rx_next(&rx, &h, &pl, &e), -EINVAL);
    ck_assert_int_eq(e, AGENT_E_MAGIC);
    agent_rx_free(&rx);
    agent_hdr_encode(p, AGENT_T_STDIN, 1, AGENT_MAX_PAYLOAD + 1);
    ck_assert_int_eq(agent_rx_push(&rx, p, sizeof p), 0);
    ck_assert_int_eq(agent_rx_next(&rx, &h, &pl, &e), -EMSGSIZE);
    ck_assert_int_eq(e, AGENT_E_TOOBIG);
    agent_rx_free(&rx);
    /* Header complete, payload not yet: wait. */
    agent_hdr_encode(p, AGENT_T_STDIN, 1, 10);
    ck_assert_int_eq(agent_rx_push(&rx, p, sizeof p), 0);
    ck_assert_int_eq(agent_rx_push(&rx, "12345", 5), 0);
    ck_assert_int_eq(agent_rx_next(&rx, &h, &pl, &e), 0);
    ck_assert_int_eq(agent_rx_push(&rx, "67890", 5), 0);
    ck_assert_int_eq(agent_rx_next(&rx, &h, &pl, &e), 1);
    ck_assert_uint_eq(h.len, 10);
    ck_assert_int_eq(memcmp(pl, "1234567890", 10), 0);
    ck_assert_int_eq(agent_rx_next(&rx, &h, &pl, &e), 0);
    agent_rx_free(&rx);
}
END_TEST

/* ---- STAT, LIST, RENAME, REMOVE ----------------------------------------- */

/* Byte builder for hand-made payloads. */
struct pb {
    uint8_t p[3 * AGENT_MAX_PATH + 256];
    size_t n;
};

static void pb_u32(struct pb *b, uint32_t v) { put32(b->p + b->n, v); b->n += 4; }
static void pb_u64(struct pb *b, uint64_t v) { pb_u32(b, (uint32_t)v); pb_u32(b, (uint32_t)(v >> 32)); }
static void pb_bytes(struct pb *b, const void *s, size_t l) { memcpy(b->p + b->n, s, l); b->n += l; }
static void pb_str(struct pb *b, const void *s, size_t l) { pb_u32(b, (uint32_t)l); pb_bytes(b, s, l); }

/* An entry payload; strings given with their lengths (they may hold NULs). */
static void pb_entry(struct pb *b, uint32_t type, uint32_t mode, uint64_t size, uint32_t nsec,
                     const char *path, size_t pl, const char *owner, size_t ol,
                     const char *link, size_t ll)
{
    b->n = 0;
    pb_u32(b, type);
    pb_u32(b, mode);
    pb_u32(b, 1000);
    pb_u32(b, 100);
    pb_u64(b, size);
    pb_u64(b, (uint64_t)-5);            /* mtime before the epoch is fine */
    pb_u32(b, nsec);
    pb_str(b, path, pl);
    pb_str(b, owner, ol);
    pb_str(b, "users", 5);
    pb_str(b, link, ll);
}

static int entry_dec(const struct pb *b, enum agent_err *e)
{
    static struct agent_stat st;
    return agent_entry_decode(b->p, b->n, &st, e);
}

START_TEST(path_requests_round_trip_and_errors)
{
    struct agent_buf b = { 0 };
    struct agent_path_req q;
    enum agent_err e;
    size_t n;
    const uint8_t *pl;

    ck_assert_int_eq(agent_put_stat(&b, 3, AGENT_STAT_NOFOLLOW, "/etc/passwd"), 0);
    pl = only_frame(&b, AGENT_T_STAT, 3, &n);
    ck_assert_int_eq(agent_stat_req_decode(pl, n, &q, &e), 0);
    ck_assert_int_eq(e, AGENT_E_OK);
    ck_assert_uint_eq(q.arg, AGENT_STAT_NOFOLLOW);
    ck_assert_uint_eq(q.path_len, 11);
    ck_assert_int_eq(memcmp(q.path, "/etc/passwd", 11), 0);
    for (size_t k = 0; k < 5; k++) {
        ck_assert_int_eq(agent_stat_req_decode(pl, k, &q, &e), -EINVAL);
        ck_assert_int_eq(e, AGENT_E_SHORT);
    }
    agent_buf_free(&b);

    ck_assert_int_eq(agent_put_list(&b, 4, AGENT_LIST_MAX_DEPTH, "/"), 0);
    pl = only_frame(&b, AGENT_T_LIST, 4, &n);
    ck_assert_int_eq(agent_list_req_decode(pl, n, &q, &e), 0);
    ck_assert_uint_eq(q.arg, AGENT_LIST_MAX_DEPTH);
    ck_assert_uint_eq(q.path_len, 1);
    agent_buf_free(&b);

    ck_assert_int_eq(agent_put_remove(&b, 5, AGENT_RM_RECURSIVE, "/tmp/x"), 0);
    pl = only_frame(&b, AGENT_T_REMOVE, 5, &n);
    ck_assert_int_eq(agent_remove_req_decode(pl, n, &q, &e), 0);
    ck_assert_uint_eq(q.arg, AGENT_RM_RECURSIVE);
    agent_buf_free(&b);

    /* Encoders refuse what the decoders would. */
    ck_assert_int_eq(agent_put_stat(&b, 1, 2, "/x"), -EINVAL);
    ck_assert_int_eq(agent_put_stat(&b, 1, 0, "x"), -EINVAL);
    ck_assert_int_eq(agent_put_stat(&b, 1, 0, ""), -EINVAL);
    ck_assert_int_eq(agent_put_stat(&b, 1, 0, NULL), -EINVAL);
    ck_assert_int_eq(agent_put_list(&b, 1, 0, "/x"), -EINVAL);
    ck_assert_int_eq(agent_put_list(&b, 1, AGENT_LIST_MAX_DEPTH + 1, "/x"), -EINVAL);
    ck_assert_int_eq(agent_put_remove(&b, 1, 2, "/x"), -EINVAL);
    char *longp = malloc(AGENT_MAX_PATH + 2);
    memset(longp, 'a', AGENT_MAX_PATH + 1);
    longp[0] = '/';
    longp[AGENT_MAX_PATH + 1] = 0;
    ck_assert_int_eq(agent_put_stat(&b, 1, 0, longp), -EINVAL);
    longp[AGENT_MAX_PATH] = 0;
    ck_assert_int_eq(agent_put_stat(&b, 1, 0, longp), 0);   /* 4096 bytes: fine */
    pl = only_frame(&b, AGENT_T_STAT, 1, &n);
    ck_assert_int_eq(agent_stat_req_decode(pl, n, &q, &e), 0);
    ck_assert_uint_eq(q.path_len, AGENT_MAX_PATH);
    agent_buf_free(&b);
    ck_assert_uint_eq(b.len, 0);

    /* Hand-made bad payloads. */
    struct pb *p = malloc(sizeof *p);
    p->n = 0; pb_u32(p, 0); pb_bytes(p, "rel", 3);
    ck_assert_int_eq(agent_stat_req_decode(p->p, p->n, &q, &e), -EINVAL);   /* relative */
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);
    p->n = 0; pb_u32(p, 0); pb_bytes(p, "/a\0b", 4);
    ck_assert_int_eq(agent_stat_req_decode(p->p, p->n, &q, &e), -EINVAL);   /* NUL */
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);
    ck_assert_int_eq(agent_remove_req_decode(p->p, p->n, &q, &e), -EINVAL);
    p->n = 0; pb_u32(p, 2); pb_bytes(p, "/a", 2);
    ck_assert_int_eq(agent_stat_req_decode(p->p, p->n, &q, &e), -EINVAL);   /* flags */
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);
    ck_assert_int_eq(agent_remove_req_decode(p->p, p->n, &q, &e), -EINVAL);
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);
    ck_assert_int_eq(agent_list_req_decode(p->p, p->n, &q, &e), 0);         /* depth 2 */
    p->n = 0; pb_u32(p, 0); pb_bytes(p, "/a", 2);
    ck_assert_int_eq(agent_list_req_decode(p->p, p->n, &q, &e), -EINVAL);   /* depth 0 */
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);
    p->n = 0; pb_u32(p, AGENT_LIST_MAX_DEPTH + 1); pb_bytes(p, "/a", 2);
    ck_assert_int_eq(agent_list_req_decode(p->p, p->n, &q, &e), -EINVAL);   /* depth 17 */
    p->n = 0; pb_u32(p, 0); pb_bytes(p, longp, AGENT_MAX_PATH); pb_bytes(p, "a", 1);
    ck_assert_int_eq(agent_stat_req_decode(p->p, p->n, &q, &e), -EINVAL);   /* 4097 bytes */
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);
    free(p);
    free(longp);
}
END_TEST

START_TEST(rename_round_trip_and_errors)
{
    struct agent_buf b = { 0 };
    struct agent_rename r;
    enum agent_err e;
    size_t n;
    ck_assert_int_eq(agent_put_rename(&b, 6, "/a/b", "/c"), 0);
    const uint8_t *pl = only_frame(&b, AGENT_T_RENAME, 6, &n);
    ck_assert_uint_eq(n, 4 + 4 + 4 + 2);
    ck_assert_int_eq(agent_rename_decode(pl, n, &r, &e), 0);
    ck_assert_uint_eq(r.src_len, 4);
    ck_assert_uint_eq(r.dst_len, 2);
    ck_assert_int_eq(memcmp(r.src, "/a/b", 4), 0);
    ck_assert_int_eq(memcmp(r.dst, "/c", 2), 0);
    for (size_t k = 0; k < n; k++)                       /* every truncation */
        ck_assert_int_eq(agent_rename_decode(pl, k, &r, &e), -EINVAL);
    uint8_t *t = malloc(n + 1);
    memcpy(t, pl, n);
    t[n] = 'x';
    ck_assert_int_eq(agent_rename_decode(t, n + 1, &r, &e), -EINVAL);   /* trailing */
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);
    free(t);
    agent_buf_free(&b);

    ck_assert_int_eq(agent_put_rename(&b, 1, "a", "/c"), -EINVAL);
    ck_assert_int_eq(agent_put_rename(&b, 1, "/a", ""), -EINVAL);
    ck_assert_int_eq(agent_put_rename(&b, 1, NULL, "/c"), -EINVAL);
    ck_assert_uint_eq(b.len, 0);

    struct pb *p = malloc(sizeof *p);
    p->n = 0; pb_str(p, "/a", 2); pb_str(p, "c", 1);
    ck_assert_int_eq(agent_rename_decode(p->p, p->n, &r, &e), -EINVAL);   /* relative dst */
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);
    p->n = 0; pb_str(p, "", 0); pb_str(p, "/c", 2);
    ck_assert_int_eq(agent_rename_decode(p->p, p->n, &r, &e), -EINVAL);   /* empty src */
    p->n = 0; pb_str(p, "/a\0", 3); pb_str(p, "/c", 2);
    ck_assert_int_eq(agent_rename_decode(p->p, p->n, &r, &e), -EINVAL);   /* NUL */
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);
    p->n = 0; pb_u32(p, 0xffffffffu); pb_str(p, "/c", 2);
    ck_assert_int_eq(agent_rename_decode(p->p, p->n, &r, &e), -EINVAL);   /* huge length */
    ck_assert_int_eq(e, AGENT_E_SHORT);
    char *longp = malloc(AGENT_MAX_PATH + 1);
    memset(longp, 'a', AGENT_MAX_PATH + 1);
    longp[0] = '/';
    p->n = 0; pb_str(p, longp, AGENT_MAX_PATH + 1); pb_str(p, "/c", 2);
    ck_assert_int_eq(agent_rename_decode(p->p, p->n, &r, &e), -EINVAL);   /* 4097 bytes */
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);
    p->n = 0; pb_str(p, longp, AGENT_MAX_PATH); pb_str(p, longp, AGENT_MAX_PATH);
    ck_assert_int_eq(agent_rename_decode(p->p, p->n, &r, &e), 0);
    free(longp);
    free(p);
}
END_TEST

START_TEST(watch_round_trip_and_errors)
{
    struct agent_buf b = { 0 };
    struct agent_path_req q;
    enum agent_err e;
    size_t n;
    ck_assert_int_eq(agent_put_watch(&b, 9, AGENT_WATCH_RECURSIVE, "/home/u"), 0);
    const uint8_t *pl = only_frame(&b, AGENT_T_WATCH, 9, &n);
    ck_assert_int_eq(agent_watch_req_decode(pl, n, &q, &e), 0);
    ck_assert_uint_eq(q.arg, AGENT_WATCH_RECURSIVE);
    ck_assert_uint_eq(q.path_len, 7);
    agent_buf_free(&b);
    ck_assert_int_eq(agent_put_watch(&b, 9, 2, "/a"), -EINVAL);         /* unknown flag */
    ck_assert_int_eq(agent_put_watch(&b, 9, 0, "a"), -EINVAL);          /* relative */
    ck_assert_uint_eq(b.len, 0);
    struct pb *p = malloc(sizeof *p);
    p->n = 0; pb_u32(p, 2); pb_bytes(p, "/a", 2);
    ck_assert_int_eq(agent_watch_req_decode(p->p, p->n, &q, &e), -EINVAL);
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);

    char name[AGENT_MAX_PATH + 1];
    uint32_t op;
    ck_assert_int_eq(agent_put_watch_event(&b, 9, AGENT_WATCH_RENAME, "sub/f.txt", 9), 0);
    pl = only_frame(&b, AGENT_T_WATCH_EVENT, 9, &n);
    ck_assert_int_eq(agent_watch_event_decode(pl, n, &op, name, &e), 0);
    ck_assert_uint_eq(op, AGENT_WATCH_RENAME);
    ck_assert_str_eq(name, "sub/f.txt");
    for (size_t k = 0; k < 5; k++)                       /* no name, or no op */
        ck_assert_int_eq(agent_watch_event_decode(pl, k, &op, name, &e), -EINVAL);
    agent_buf_free(&b);
    static const char *const bad[] = { "/abs", "a//b", "a/", "./a", "a/..", "../x", ".", "..", "a\0b" };
    static const size_t bl[] = { 4, 4, 2, 3, 4, 4, 1, 2, 3 };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p->n = 0; pb_u32(p, AGENT_WATCH_CREATE); pb_bytes(p, bad[i], bl[i]);
        ck_assert_msg(agent_watch_event_decode(p->p, p->n, &op, name, &e) == -EINVAL, "%s", bad[i]);
        ck_assert_int_eq(e, AGENT_E_PAYLOAD);
        ck_assert_str_eq(name, "");
        ck_assert_int_eq(agent_put_watch_event(&b, 1, AGENT_WATCH_CREATE, bad[i], bl[i]), -EINVAL);
    }
    for (uint32_t o = 0; o < 8; o += 6) {                /* ops 0 and 6 */
        p->n = 0; pb_u32(p, o); pb_bytes(p, "a", 1);
        ck_assert_int_eq(agent_watch_event_decode(p->p, p->n, &op, name, &e), -EINVAL);
        ck_assert_int_eq(agent_put_watch_event(&b, 1, o, "a", 1), -EINVAL);
    }
    char *longn = malloc(AGENT_MAX_PATH + 1);
    memset(longn, 'a', AGENT_MAX_PATH + 1);
    p->n = 0; pb_u32(p, AGENT_WATCH_WRITE); pb_bytes(p, longn, AGENT_MAX_PATH);
    ck_assert_int_eq(agent_watch_event_decode(p->p, p->n, &op, name, &e), 0);
    ck_assert_uint_eq(strlen(name), AGENT_MAX_PATH);
    p->n = 0; pb_u32(p, AGENT_WATCH_WRITE); pb_bytes(p, longn, AGENT_MAX_PATH + 1);
    ck_assert_int_eq(agent_watch_event_decode(p->p, p->n, &op, name, &e), -EINVAL);   /* 4097 bytes */
    ck_assert_uint_eq(b.len, 0);
    free(longn);
    free(p);
}
END_TEST

START_TEST(entry_round_trip)
{
    static struct agent_stat in, out;
    struct agent_buf b = { 0 };
    enum agent_err e;
    size_t n;
    memset(&in, 0, sizeof in);
    in.type = AGENT_FT_SYMLINK;
    in.mode = 0777;
    in.uid = 0xfffffffeu;
    in.gid = 7;
    in.size = (uint64_t)INT64_MAX;
    in.mtime_sec = INT64_MIN;
    in.mtime_nsec = 999999999;
    strcpy(in.path, "/home/user/l");
    strcpy(in.owner, "user");
    strcpy(in.group, "");
    strcpy(in.link, "../target");
    ck_assert_int_eq(agent_put_entry(&b, AGENT_T_LIST_ENTRY, 12, &in), 0);
    const uint8_t *pl = only_frame(&b, AGENT_T_LIST_ENTRY, 12, &n);
    ck_assert_uint_eq(n, 36 + 16 + 12 + 4 + 0 + 9);
    ck_assert_int_eq(agent_entry_decode(pl, n, &out, &e), 0);
    ck_assert_int_eq(e, AGENT_E_OK);
    ck_assert_uint_eq(out.type, AGENT_FT_SYMLINK);
    ck_assert_uint_eq(out.mode, 0777);
    ck_assert_uint_eq(out.uid, 0xfffffffeu);
    ck_assert_uint_eq(out.gid, 7);
    ck_assert(out.size == (uint64_t)INT64_MAX);
    ck_assert(out.mtime_sec == INT64_MIN);
    ck_assert_uint_eq(out.mtime_nsec, 999999999);
    ck_assert_str_eq(out.path, "/home/user/l");
    ck_assert_str_eq(out.owner, "user");
    ck_assert_str_eq(out.group, "");
    ck_assert_str_eq(out.link, "../target");
    for (size_t k = 0; k < n; k++) {                     /* every truncation */
        ck_assert_int_eq(agent_entry_decode(pl, k, &out, &e), -EINVAL);
        ck_assert(e == AGENT_E_SHORT || e == AGENT_E_PAYLOAD);
    }
    agent_buf_free(&b);

    /* Longest strings both ways. */
    in.type = AGENT_FT_SYMLINK;
    memset(in.path, 'p', AGENT_MAX_PATH);
    in.path[0] = '/';
    in.path[AGENT_MAX_PATH] = 0;
    memset(in.owner, 'o', AGENT_MAX_NAME);
    in.owner[AGENT_MAX_NAME] = 0;
    memset(in.group, 'g', AGENT_MAX_NAME);
    in.group[AGENT_MAX_NAME] = 0;
    memset(in.link, 'l', AGENT_MAX_PATH);
    in.link[AGENT_MAX_PATH] = 0;
    ck_assert_int_eq(agent_put_entry(&b, AGENT_T_STAT_INFO, 1, &in), 0);
    pl = only_frame(&b, AGENT_T_STAT_INFO, 1, &n);
    ck_assert_int_eq(agent_entry_decode(pl, n, &out, &e), 0);
    ck_assert_int_eq(memcmp(&in, &out, sizeof in), 0);
    agent_buf_free(&b);

    /* A directory: no link. */
    in.type = AGENT_FT_DIR;
    in.link[0] = 0;
    strcpy(in.path, "/");
    ck_assert_int_eq(agent_put_entry(&b, AGENT_T_STAT_INFO, 2, &in), 0);
    pl = only_frame(&b, AGENT_T_STAT_INFO, 2, &n);
    ck_assert_int_eq(agent_entry_decode(pl, n, &out, &e), 0);
    ck_assert_uint_eq(out.type, AGENT_FT_DIR);
    ck_assert_str_eq(out.link, "");
    agent_buf_free(&b);
}
END_TEST

START_TEST(entry_encoder_refuses)
{
    static struct agent_stat in;
    struct agent_buf b = { 0 };
    memset(&in, 0, sizeof in);
    in.type = AGENT_FT_FILE;
    strcpy(in.path, "/f");
    ck_assert_int_eq(agent_put_entry(&b, AGENT_T_STAT_INFO, 1, &in), 0);
    agent_buf_free(&b);
    ck_assert_int_eq(agent_put_entry(&b, AGENT_T_OK, 1, &in), -EINVAL);       /* frame type */
    in.type = 0;
    ck_assert_int_eq(agent_put_entry(&b, AGENT_T_STAT_INFO, 1, &in), -EINVAL);
    in.type = AGENT_FT_OTHER + 1;
    ck_assert_int_eq(agent_put_entry(&b, AGENT_T_STAT_INFO, 1, &in), -EINVAL);
    in.type = AGENT_FT_FILE;
    in.mode = 010000;
    ck_assert_int_eq(agent_put_entry(&b, AGENT_T_STAT_INFO, 1, &in), -EINVAL);
    in.mode = 0;
    in.mtime_nsec = 1000000000u;
    ck_assert_int_eq(agent_put_entry(&b, AGENT_T_STAT_INFO, 1, &in), -EINVAL);
    in.mtime_nsec = 0;
    in.size = (uint64_t)INT64_MAX + 1;
    ck_assert_int_eq(agent_put_entry(&b, AGENT_T_STAT_INFO, 1, &in), -EINVAL);
    in.size = 0;
    strcpy(in.link, "/t");                       /* a link on a file */
    ck_assert_int_eq(agent_put_entry(&b, AGENT_T_STAT_INFO, 1, &in), -EINVAL);
    in.link[0] = 0;
    in.type = AGENT_FT_SYMLINK;                  /* a symlink without one */
    ck_assert_int_eq(agent_put_entry(&b, AGENT_T_STAT_INFO, 1, &in), -EINVAL);
    in.type = AGENT_FT_FILE;
    strcpy(in.path, "rel");
    ck_assert_int_eq(agent_put_entry(&b, AGENT_T_STAT_INFO, 1, &in), -EINVAL);
    in.path[0] = 0;
    ck_assert_int_eq(agent_put_entry(&b, AGENT_T_STAT_INFO, 1, &in), -EINVAL);
    strcpy(in.path, "/f");
    memset(in.owner, 'o', sizeof in.owner);      /* not terminated */
    ck_assert_int_eq(agent_put_entry(&b, AGENT_T_STAT_INFO, 1, &in), -EINVAL);
    ck_assert_uint_eq(b.len, 0);
}
END_TEST

START_TEST(entry_malformed)
{
    struct pb *b = malloc(sizeof *b);
    enum agent_err e;
    char *longs = malloc(AGENT_MAX_PATH + 2);
    memset(longs, 'x', AGENT_MAX_PATH + 2);
    longs[0] = '/';

    pb_entry(b, AGENT_FT_FILE, 0644, 5, 0, "/f", 2, "root", 4, "", 0);
    ck_assert_int_eq(entry_dec(b, &e), 0);                       /* the base case is fine */
    b->p[b->n++] = 0;
    ck_assert_int_eq(entry_dec(b, &e), -EINVAL);                 /* trailing byte */
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);
    ck_assert_int_eq(agent_entry_decode(b->p, 35, &(struct agent_stat){ 0 }, &e), -EINVAL);
    ck_assert_int_eq(e, AGENT_E_SHORT);
    ck_assert_int_eq(agent_entry_decode(NULL, 0, &(struct agent_stat){ 0 }, &e), -EINVAL);

    for (uint32_t t = 0; t < 8; t++) {                           /* type values */
        pb_entry(b, t, 0, 0, 0, "/f", 2, "", 0, t == AGENT_FT_SYMLINK ? "x" : "", t == 3);
        ck_assert_int_eq(entry_dec(b, &e), t >= 1 && t <= 4 ? 0 : -EINVAL);
    }
    pb_entry(b, AGENT_FT_FILE, 0100644, 0, 0, "/f", 2, "", 0, "", 0);
    ck_assert_int_eq(entry_dec(b, &e), -EINVAL);                 /* mode: file type bits */
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);
    pb_entry(b, AGENT_FT_FILE, 0, 0, 1000000000u, "/f", 2, "", 0, "", 0);
    ck_assert_int_eq(entry_dec(b, &e), -EINVAL);                 /* nsec */
    pb_entry(b, AGENT_FT_FILE, 0, (uint64_t)INT64_MAX + 1, 0, "/f", 2, "", 0, "", 0);
    ck_assert_int_eq(entry_dec(b, &e), -EINVAL);                 /* size */
    pb_entry(b, AGENT_FT_FILE, 0, 0, 0, "f", 1, "", 0, "", 0);
    ck_assert_int_eq(entry_dec(b, &e), -EINVAL);                 /* relative path */
    pb_entry(b, AGENT_FT_FILE, 0, 0, 0, "", 0, "", 0, "", 0);
    ck_assert_int_eq(entry_dec(b, &e), -EINVAL);                 /* empty path */
    pb_entry(b, AGENT_FT_FILE, 0, 0, 0, "/f\0g", 4, "", 0, "", 0);
    ck_assert_int_eq(entry_dec(b, &e), -EINVAL);                 /* NUL in path */
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);
    pb_entry(b, AGENT_FT_FILE, 0, 0, 0, "/f", 2, "ro\0t", 4, "", 0);
    ck_assert_int_eq(entry_dec(b, &e), -EINVAL);                 /* NUL in owner */
    pb_entry(b, AGENT_FT_SYMLINK, 0, 0, 0, "/f", 2, "", 0, "/t\0", 3);
    ck_assert_int_eq(entry_dec(b, &e), -EINVAL);                 /* NUL in link */
    pb_entry(b, AGENT_FT_FILE, 0, 0, 0, longs, AGENT_MAX_PATH + 1, "", 0, "", 0);
    ck_assert_int_eq(entry_dec(b, &e), -EINVAL);                 /* path 4097 */
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);
    pb_entry(b, AGENT_FT_FILE, 0, 0, 0, longs, AGENT_MAX_PATH, "", 0, "", 0);
    ck_assert_int_eq(entry_dec(b, &e), 0);                       /* path 4096 */
    pb_entry(b, AGENT_FT_FILE, 0, 0, 0, "/f", 2, longs + 1, AGENT_MAX_NAME + 1, "", 0);
    ck_assert_int_eq(entry_dec(b, &e), -EINVAL);                 /* owner 64 */
    pb_entry(b, AGENT_FT_FILE, 0, 0, 0, "/f", 2, longs + 1, AGENT_MAX_NAME, "", 0);
    ck_assert_int_eq(entry_dec(b, &e), 0);                       /* owner 63 */
    pb_entry(b, AGENT_FT_SYMLINK, 0, 0, 0, "/f", 2, "", 0, longs, AGENT_MAX_PATH + 1);
    ck_assert_int_eq(entry_dec(b, &e), -EINVAL);                 /* link 4097 */
    pb_entry(b, AGENT_FT_SYMLINK, 0, 0, 0, "/f", 2, "", 0, longs, AGENT_MAX_PATH);
    ck_assert_int_eq(entry_dec(b, &e), 0);                       /* link 4096 */
    pb_entry(b, AGENT_FT_SYMLINK, 0, 0, 0, "/f", 2, "", 0, "", 0);
    ck_assert_int_eq(entry_dec(b, &e), -EINVAL);                 /* symlink, no target */
    pb_entry(b, AGENT_FT_DIR, 0, 0, 0, "/f", 2, "", 0, "/t", 2);
    ck_assert_int_eq(entry_dec(b, &e), -EINVAL);                 /* target on a dir */
    pb_entry(b, AGENT_FT_OTHER, 0, 0, 0, "/f", 2, "", 0, "/t", 2);
    ck_assert_int_eq(entry_dec(b, &e), -EINVAL);
    /* A string length pointing past the end (group's). */
    pb_entry(b, AGENT_FT_FILE, 0, 0, 0, "/f", 2, "", 0, "", 0);
    put32(b->p + 36 + 6 + 4, 0xfffffff0u);
    ck_assert_int_eq(entry_dec(b, &e), -EINVAL);
    ck_assert_int_eq(e, AGENT_E_SHORT);
    free(longs);
    free(b);
}
END_TEST

START_TEST(list_end_and_path_check)
{
    uint8_t p[5] = { 0 };
    uint32_t count;
    enum agent_err e;
    put32(p, AGENT_LIST_MAX_ENTRIES);
    ck_assert_int_eq(agent_list_end_decode(p, 4, &count, &e), 0);
    ck_assert_uint_eq(count, AGENT_LIST_MAX_ENTRIES);
    put32(p, AGENT_LIST_MAX_ENTRIES + 1);
    ck_assert_int_eq(agent_list_end_decode(p, 4, &count, &e), -EINVAL);
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);
    ck_assert_int_eq(agent_list_end_decode(p, 3, &count, &e), -EINVAL);
    ck_assert_int_eq(e, AGENT_E_SHORT);
    put32(p, 0);
    ck_assert_int_eq(agent_list_end_decode(p, 5, &count, &e), -EINVAL);
    ck_assert_int_eq(e, AGENT_E_PAYLOAD);
    struct agent_buf b = { 0 };
    size_t n;
    ck_assert_int_eq(agent_put_u32(&b, AGENT_T_LIST_END, 3, 42), 0);
    const uint8_t *pl = only_frame(&b, AGENT_T_LIST_END, 3, &n);
    ck_assert_int_eq(agent_list_end_decode(pl, n, &count, &e), 0);
    ck_assert_uint_eq(count, 42);
    agent_buf_free(&b);

    ck_assert_int_eq(agent_list_path_check("/d", 1, "/d/a"), 0);
    ck_assert_int_eq(agent_list_path_check("/d/", 1, "/d/a"), 0);
    ck_assert_int_eq(agent_list_path_check("/", 1, "/bin"), 0);
    ck_assert_int_eq(agent_list_path_check("/", 1, "/bin/sh"), -EINVAL);   /* too deep */
    ck_assert_int_eq(agent_list_path_check("/", 2, "/bin/sh"), 0);
    ck_assert_int_eq(agent_list_path_check("/d", 2, "/d/a/b"), 0);
    ck_assert_int_eq(agent_list_path_check("/d", 2, "/d/a/b/c"), -EINVAL);
    ck_assert_int_eq(agent_list_path_check("/d", 1, "/d"), -EINVAL);       /* itself */
    ck_assert_int_eq(agent_list_path_check("/d", 1, "/d/"), -EINVAL);      /* empty name */
    ck_assert_int_eq(agent_list_path_check("/d", 1, "/dx"), -EINVAL);     /* sibling */
    ck_assert_int_eq(agent_list_path_check("/d", 1, "/e/a"), -EINVAL);    /* elsewhere */
    ck_assert_int_eq(agent_list_path_check("/d", 2, "/d//a"), -EINVAL);
    ck_assert_int_eq(agent_list_path_check("/d", 2, "/d/../etc"), -EINVAL);
    ck_assert_int_eq(agent_list_path_check("/d", 2, "/d/./a"), -EINVAL);
    ck_assert_int_eq(agent_list_path_check("/d", 1, "/d/..."), 0);        /* a real name */
    ck_assert_int_eq(agent_list_path_check("/d", 1, "/d/.a"), 0);
    ck_assert_int_eq(agent_list_path_check("", 1, "/d/a"), -EINVAL);
}
END_TEST

START_TEST(idname_lookup)
{
    static const char pw[] =
        "root:x:0:0:root:/root:/bin/sh\n"
        "+nis::5:5::/:\n"
        "-minus:x:6:6::/:\n"
        "\n"
        "broken line\n"
        "short:x\n"
        "signed:x:+7:7::/:\n"
        "big:x:4294967296:0::/:\n"
        "hex:x:0x8:0::/:\n"
        ":x:9:9::/:\n"
        "toolong_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa:x:10:10::/:\n"
        "ten:x:10:10::/:\n"
        "user:x:1000:1000::/home/user:/bin/sh\n"
        "dup:x:1000:1000::/:\n"
        "max:x:4294967295:0::/:\n"
        "grp:x:100:alice,bob\n"
        "last:x:11";
    char name[AGENT_MAX_NAME + 1];
    size_t n = sizeof pw - 1;
    ck_assert_int_eq(agent_idname_lookup(pw, n, 0, name), 0);
    ck_assert_str_eq(name, "root");
    ck_assert_int_eq(agent_idname_lookup(pw, n, 1000, name), 0);
    ck_assert_str_eq(name, "user");                             /* the first one */
    ck_assert_int_eq(agent_idname_lookup(pw, n, 4294967295u, name), 0);
    ck_assert_str_eq(name, "max");
    ck_assert_int_eq(agent_idname_lookup(pw, n, 100, name), 0);   /* group file shape */
    ck_assert_str_eq(name, "grp");
    ck_assert_int_eq(agent_idname_lookup(pw, n, 11, name), 0);    /* no final newline */
    ck_assert_str_eq(name, "last");
    ck_assert_int_eq(agent_idname_lookup(pw, n, 10, name), 0);    /* too long name skipped */
    ck_assert_str_eq(name, "ten");
    ck_assert_int_eq(agent_idname_lookup(pw, n, 5, name), -ENOENT);   /* +nis */
    ck_assert_str_eq(name, "");
    ck_assert_int_eq(agent_idname_lookup(pw, n, 6, name), -ENOENT);   /* -minus */
    ck_assert_int_eq(agent_idname_lookup(pw, n, 7, name), -ENOENT);   /* +7 */
    ck_assert_int_eq(agent_idname_lookup(pw, n, 8, name), -ENOENT);   /* 0x8 */
    ck_assert_int_eq(agent_idname_lookup(pw, n, 9, name), -ENOENT);   /* empty name */
    ck_assert_int_eq(agent_idname_lookup(pw, n, 12345, name), -ENOENT);
    ck_assert_int_eq(agent_idname_lookup(pw, 0, 0, name), -ENOENT);
    /* A NUL in a name: not that line. */
    static const char nul[] = "ro\0t:x:0:0::/:\nroot:x:0:0::/:\n";
    ck_assert_int_eq(agent_idname_lookup(nul, sizeof nul - 1, 0, name), 0);
    ck_assert_str_eq(name, "root");
    /* The text ends inside a line: nothing past n is read. */
    ck_assert_int_eq(agent_idname_lookup("a:x:12", 5, 12, name), -ENOENT);
    ck_assert_int_eq(agent_idname_lookup("a:x:12", 5, 1, name), 0);
    ck_assert_str_eq(name, "a");
    ck_assert_str_eq(agent_type_name(AGENT_T_LIST_ENTRY), "LIST_ENTRY");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("agent_proto");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, hdr_round_trip_and_errors);
    tcase_add_test(tc, exec_round_trip);
    tcase_add_test(tc, exec_malformed);
    tcase_add_test(tc, exec_pty_round_trip);
    tcase_add_test(tc, exec_pty_malformed);
    tcase_add_test(tc, resize_round_trip_and_errors);
    tcase_add_test(tc, exec_cwd_too_long);
    tcase_add_test(tc, exec_encode_limits);
    tcase_add_test(tc, exit_round_trip_and_errors);
    tcase_add_test(tc, kill_and_u32);
    tcase_add_test(tc, fwrite_round_trip_and_errors);
    tcase_add_test(tc, mkdir_and_path);
    tcase_add_test(tc, file_end_and_error);
    tcase_add_test(tc, set_time_and_entropy);
    tcase_add_test(tc, rx_byte_by_byte);
    tcase_add_test(tc, rx_bad_magic_and_oversized);
    tcase_add_test(tc, path_requests_round_trip_and_errors);
    tcase_add_test(tc, rename_round_trip_and_errors);
    tcase_add_test(tc, entry_round_trip);
    tcase_add_test(tc, entry_encoder_refuses);
    tcase_add_test(tc, entry_malformed);
    tcase_add_test(tc, list_end_and_path_check);
    tcase_add_test(tc, idname_lookup);
    tcase_add_test(tc, watch_round_trip_and_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
