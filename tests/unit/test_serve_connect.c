/* The Connect JSON codec and envd request decoders of `moat serve`
 * (vmm/api/e2b/serve_connect.c): envelopes, error codes, base64, paths, every
 * request body's accepted shapes, and every malformed case refused with a
 * message naming what is wrong; the encoders' exact output. */
#include <check.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/api/e2b/serve_connect.h"

static char why[700];

#define BAD(call, needle)                                                                   \
    do {                                                                                    \
        why[0] = 0;                                                                         \
        ck_assert_int_eq((call), -EINVAL);                                                  \
        ck_assert_msg(strstr(why, needle) != NULL, "'%s' does not say '%s'", why, needle); \
    } while (0)
#define S(x) x, strlen(x)

START_TEST(codes)
{
    ck_assert_str_eq(cx_code_name(CX_INVALID_ARGUMENT), "invalid_argument");
    ck_assert_str_eq(cx_code_name(CX_UNAUTHENTICATED), "unauthenticated");
    ck_assert_str_eq(cx_code_name(CX_UNIMPLEMENTED), "unimplemented");
    ck_assert_ptr_null(cx_code_name(CX_OK));
    ck_assert_ptr_null(cx_code_name((enum cx_code)17));
    ck_assert_ptr_null(cx_code_name((enum cx_code)-1));
    static const struct { enum cx_code c; unsigned st; } t[] = {
        { CX_CANCELED, 499 }, { CX_UNKNOWN, 500 }, { CX_INVALID_ARGUMENT, 400 }, { CX_DEADLINE_EXCEEDED, 504 },
        { CX_NOT_FOUND, 404 }, { CX_ALREADY_EXISTS, 409 }, { CX_PERMISSION_DENIED, 403 },
        { CX_RESOURCE_EXHAUSTED, 429 }, { CX_FAILED_PRECONDITION, 400 }, { CX_ABORTED, 409 },
        { CX_OUT_OF_RANGE, 400 }, { CX_UNIMPLEMENTED, 501 }, { CX_INTERNAL, 500 }, { CX_UNAVAILABLE, 503 },
        { CX_DATA_LOSS, 500 }, { CX_UNAUTHENTICATED, 401 }, { (enum cx_code)99, 500 },
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        ck_assert_uint_eq(cx_code_http(t[i].c), t[i].st);
    ck_assert_int_eq(cx_code_from_errno(ENOENT), CX_NOT_FOUND);
    ck_assert_int_eq(cx_code_from_errno(-ENOENT), CX_NOT_FOUND);
    ck_assert_int_eq(cx_code_from_errno(EEXIST), CX_ALREADY_EXISTS);
    ck_assert_int_eq(cx_code_from_errno(EACCES), CX_PERMISSION_DENIED);
    ck_assert_int_eq(cx_code_from_errno(EISDIR), CX_INVALID_ARGUMENT);
    ck_assert_int_eq(cx_code_from_errno(ENOTEMPTY), CX_FAILED_PRECONDITION);
    ck_assert_int_eq(cx_code_from_errno(ENOSPC), CX_RESOURCE_EXHAUSTED);
    ck_assert_int_eq(cx_code_from_errno(EIO), CX_INTERNAL);
    ck_assert_int_eq(cx_code_from_errno(0), CX_INTERNAL);

    char *s = cx_error_json(CX_NOT_FOUND, "no \"such\" file");
    ck_assert_str_eq(s, "{\"code\":\"not_found\",\"message\":\"no \\\"such\\\" file\"}");
    free(s);
    s = cx_error_json(CX_INTERNAL, "");
    ck_assert_str_eq(s, "{\"code\":\"internal\"}");
    free(s);
    s = cx_error_json(CX_INTERNAL, "bad \xff utf8");
    ck_assert_str_eq(s, "{\"code\":\"internal\",\"message\":\"(message not UTF-8)\"}");
    free(s);
    s = cx_end_json(CX_OK, "ignored");
    ck_assert_str_eq(s, "{}");
    free(s);
    s = cx_end_json(CX_UNAVAILABLE, "gone");
    ck_assert_str_eq(s, "{\"error\":{\"code\":\"unavailable\",\"message\":\"gone\"}}");
    free(s);
}
END_TEST

START_TEST(envelopes)
{
    uint8_t *b = NULL;
    size_t len = 0, cap = 0;
    ck_assert_int_eq(cx_envelope_append(&b, &len, &cap, 0, "{}", 2), 0);
    ck_assert_int_eq(cx_envelope_append(&b, &len, &cap, CX_FLAG_END, "", 0), 0);
    ck_assert_uint_eq(len, 12);
    static const uint8_t want[] = { 0, 0, 0, 0, 2, '{', '}', 2, 0, 0, 0, 0 };
    ck_assert(memcmp(b, want, sizeof want) == 0);
    const uint8_t *m;
    size_t ml;
    ck_assert_int_eq(cx_envelope_one(b, 7, &m, &ml, why, sizeof why), 0);
    ck_assert_uint_eq(ml, 2);
    ck_assert(m == b + 5);
    /* Large lengths are big-endian. */
    char *big = malloc(70000);
    memset(big, 'x', 70000);
    len = 0;
    ck_assert_int_eq(cx_envelope_append(&b, &len, &cap, 0, big, 70000), 0);
    ck_assert(b[1] == 0 && b[2] == 1 && b[3] == 0x11 && b[4] == 0x70);
    ck_assert_int_eq(cx_envelope_one(b, len, &m, &ml, why, sizeof why), 0);
    ck_assert_uint_eq(ml, 70000);
    free(big);
    free(b);

    static const uint8_t c1[] = { 0, 0, 0 };
    BAD(cx_envelope_one(c1, sizeof c1, &m, &ml, why, sizeof why), "not a Connect envelope");
    BAD(cx_envelope_one(c1, 0, &m, &ml, why, sizeof why), "not a Connect envelope");
    static const uint8_t c2[] = { 1, 0, 0, 0, 0 };
    BAD(cx_envelope_one(c2, sizeof c2, &m, &ml, why, sizeof why), "compressed");
    static const uint8_t c3[] = { 2, 0, 0, 0, 0 };
    BAD(cx_envelope_one(c3, sizeof c3, &m, &ml, why, sizeof why), "flags");
    static const uint8_t c4[] = { 0x80, 0, 0, 0, 0 };
    BAD(cx_envelope_one(c4, sizeof c4, &m, &ml, why, sizeof why), "flags");
    static const uint8_t c5[] = { 0, 0, 0, 0, 3, '{', '}' };
    BAD(cx_envelope_one(c5, sizeof c5, &m, &ml, why, sizeof why), "does not match");
    static const uint8_t c6[] = { 0, 0, 0, 0, 1, '{', '}' };
    BAD(cx_envelope_one(c6, sizeof c6, &m, &ml, why, sizeof why), "does not match");
    static const uint8_t c7[] = { 0, 0xff, 0xff, 0xff, 0xff, '{' };
    BAD(cx_envelope_one(c7, sizeof c7, &m, &ml, why, sizeof why), "does not match");
    /* Two envelopes in one body: not one message. */
    static const uint8_t c8[] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 };
    BAD(cx_envelope_one(c8, sizeof c8, &m, &ml, why, sizeof why), "does not match");

    uint64_t ms;
    ck_assert_int_eq(cx_timeout_parse("60000", &ms), 0);
    ck_assert_uint_eq(ms, 60000);
    ck_assert_int_eq(cx_timeout_parse("9999999999", &ms), 0);
    ck_assert_int_eq(cx_timeout_parse("", &ms), -EINVAL);
    ck_assert_int_eq(cx_timeout_parse(NULL, &ms), -EINVAL);
    ck_assert_int_eq(cx_timeout_parse("12345678901", &ms), -EINVAL);
    ck_assert_int_eq(cx_timeout_parse("-1", &ms), -EINVAL);
    ck_assert_int_eq(cx_timeout_parse("1s", &ms), -EINVAL);
    ck_assert_int_eq(cx_timeout_parse(" 1", &ms), -EINVAL);
}
END_TEST

START_TEST(base64)
{
    static const struct { const char *plain, *enc; } t[] = {
        { "", "" }, { "f", "Zg==" }, { "fo", "Zm8=" }, { "foo", "Zm9v" }, { "foob", "Zm9vYg==" },
        { "fooba", "Zm9vYmE=" }, { "foobar", "Zm9vYmFy" }, { "\xff\xfe\xfd", "//79" },
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char *e = cx_b64_encode(t[i].plain, strlen(t[i].plain));
        ck_assert_str_eq(e, t[i].enc);
        free(e);
        uint8_t *d;
        size_t n;
        ck_assert_int_eq(cx_b64_decode(S(t[i].enc), &d, &n), 0);
        ck_assert_uint_eq(n, strlen(t[i].plain));
        ck_assert(memcmp(d, t[i].plain, n) == 0);
        free(d);
    }
    uint8_t *d;
    size_t n;
    /* Unpadded and URL-safe forms decode too. */
    ck_assert_int_eq(cx_b64_decode(S("Zm8"), &d, &n), 0);
    ck_assert(n == 2 && !memcmp(d, "fo", 2));
    free(d);
    ck_assert_int_eq(cx_b64_decode(S("__79"), &d, &n), 0);
    ck_assert(n == 3 && d[0] == 0xff && d[1] == 0xfe);
    free(d);
    ck_assert_int_eq(cx_b64_decode(S("-_-_"), &d, &n), 0);
    free(d);
    static const char *bad[] = { "Z", "Zm9vY", "Zg=", "Zg===", "Z===", "Zm 9", "Zm9v\n", "Zh==", "Zm9=",
                                 "=Zg=", "Zg==Zg==", "Z*==", "\xc3\xa9\xc3\xa9" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(cx_b64_decode(S(bad[i]), &d, &n) == -EINVAL, "'%s' decoded", bad[i]);
    /* Embedded NUL. */
    ck_assert_int_eq(cx_b64_decode("Zg\0=", 4, &d, &n), -EINVAL);
}
END_TEST

START_TEST(paths)
{
    char out[CX_MAX_PATH + 1];
    static const struct { const char *in, *out; } t[] = {
        { "/etc/passwd", "/etc/passwd" }, { "", "/root" }, { "~", "/root" }, { "~/a/b", "/root/a/b" },
        { "a", "/root/a" }, { "./x", "/root/./x" }, { "/", "/" },
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        ck_assert_int_eq(cx_path_resolve(t[i].in, "/root", out, why, sizeof why), 0);
        ck_assert_str_eq(out, t[i].out);
    }
    BAD(cx_path_resolve("~bob/x", "/root", out, why, sizeof why), "home directory");
    char *longp = malloc(CX_MAX_PATH + 2);
    memset(longp, 'a', CX_MAX_PATH + 1);
    longp[0] = '/';
    longp[CX_MAX_PATH + 1] = 0;
    BAD(cx_path_resolve(longp, "/root", out, why, sizeof why), "longer than");
    longp[CX_MAX_PATH] = 0;
    ck_assert_int_eq(cx_path_resolve(longp, "/root", out, why, sizeof why), 0);
    /* Relative: home + '/' + it must fit too. */
    longp[CX_MAX_PATH - 3] = 0;
    BAD(cx_path_resolve(longp + 1, "/root", out, why, sizeof why), "longer than");
    free(longp);
}
END_TEST

START_TEST(start_requests)
{
    struct cx_start s;
    const char *ok = "{\"process\":{\"cmd\":\"/bin/bash\",\"args\":[\"-l\",\"-c\",\"echo hi\"],"
                     "\"envs\":{\"A\":\"1\",\"B\":\"\"},\"cwd\":\"/tmp\"},\"stdin\":true,\"tag\":\"t1\"}";
    ck_assert_int_eq(cx_start_decode(S(ok), &s, why, sizeof why), 0);
    ck_assert_str_eq(s.cmd, "/bin/bash");
    ck_assert_uint_eq(s.nargs, 3);
    ck_assert_str_eq(s.args[2], "echo hi");
    ck_assert_uint_eq(s.nenvs, 2);
    ck_assert_str_eq(s.envs[0], "A=1");
    ck_assert_str_eq(s.envs[1], "B=");
    ck_assert_str_eq(s.cwd, "/tmp");
    ck_assert_str_eq(s.tag, "t1");
    ck_assert_int_eq(s.stdin_on, 1);
    ck_assert_int_eq(s.has_pty, 0);
    cx_start_free(&s);
    /* What the SDK sends by default: no stdin (false is omitted), nulls. */
    ck_assert_int_eq(cx_start_decode(S("{\"process\":{\"cmd\":\"ls\",\"cwd\":null,\"envs\":null}}"), &s, why,
                                     sizeof why), 0);
    ck_assert_uint_eq(s.nargs, 0);
    ck_assert_ptr_null(s.cwd);
    ck_assert_int_eq(s.stdin_on, 0);
    cx_start_free(&s);
    ck_assert_int_eq(cx_start_decode(S("{\"process\":{\"cmd\":\"sh\"},\"pty\":{\"size\":{\"cols\":80,\"rows\":\"24\"}},"
                                       "\"unknownField\":1}"), &s, why, sizeof why), 0);
    ck_assert_int_eq(s.has_pty, 1);
    ck_assert_uint_eq(s.cols, 80);
    ck_assert_uint_eq(s.rows, 24);
    cx_start_free(&s);

    BAD(cx_start_decode(S("{"), &s, why, sizeof why), "not JSON");
    BAD(cx_start_decode(S("[]"), &s, why, sizeof why), "not a JSON object");
    BAD(cx_start_decode(S("{}"), &s, why, sizeof why), "process is missing");
    BAD(cx_start_decode(S("{\"process\":1}"), &s, why, sizeof why), "process must be an object");
    BAD(cx_start_decode(S("{\"process\":{}}"), &s, why, sizeof why), "process.cmd is missing");
    BAD(cx_start_decode(S("{\"process\":{\"cmd\":\"\"}}"), &s, why, sizeof why), "process.cmd is empty");
    BAD(cx_start_decode(S("{\"process\":{\"cmd\":7}}"), &s, why, sizeof why), "process.cmd must be a string");
    BAD(cx_start_decode(S("{\"process\":{\"cmd\":\"a\\u0000b\"}}"), &s, why, sizeof why), "NUL");
    BAD(cx_start_decode(S("{\"process\":{\"cmd\":\"a\",\"args\":\"x\"}}"), &s, why, sizeof why), "args must be an array");
    BAD(cx_start_decode(S("{\"process\":{\"cmd\":\"a\",\"args\":[1]}}"), &s, why, sizeof why), "args[] must be a string");
    BAD(cx_start_decode(S("{\"process\":{\"cmd\":\"a\",\"args\":[\"x\\u0000\"]}}"), &s, why, sizeof why), "NUL");
    BAD(cx_start_decode(S("{\"process\":{\"cmd\":\"a\",\"envs\":[]}}"), &s, why, sizeof why), "envs must be an object");
    BAD(cx_start_decode(S("{\"process\":{\"cmd\":\"a\",\"envs\":{\"\":\"x\"}}}"), &s, why, sizeof why), "bad variable name");
    BAD(cx_start_decode(S("{\"process\":{\"cmd\":\"a\",\"envs\":{\"A=B\":\"x\"}}}"), &s, why, sizeof why), "bad variable name");
    BAD(cx_start_decode(S("{\"process\":{\"cmd\":\"a\",\"envs\":{\"A\":1}}}"), &s, why, sizeof why), "envs value must be a string");
    BAD(cx_start_decode(S("{\"process\":{\"cmd\":\"a\",\"cwd\":false}}"), &s, why, sizeof why), "cwd must be a string");
    BAD(cx_start_decode(S("{\"process\":{\"cmd\":\"a\"},\"stdin\":1}"), &s, why, sizeof why), "stdin must be true or false");
    BAD(cx_start_decode(S("{\"process\":{\"cmd\":\"a\"},\"tag\":[]}"), &s, why, sizeof why), "tag must be a string");
    BAD(cx_start_decode(S("{\"process\":{\"cmd\":\"a\"},\"pty\":1}"), &s, why, sizeof why), "pty must be an object");
    BAD(cx_start_decode(S("{\"process\":{\"cmd\":\"a\"},\"pty\":{\"size\":[]}}"), &s, why, sizeof why), "pty.size must be an object");
    BAD(cx_start_decode(S("{\"process\":{\"cmd\":\"a\"},\"pty\":{\"size\":{\"cols\":-1}}}"), &s, why, sizeof why), "out of range");
    BAD(cx_start_decode(S("{\"process\":{\"cmd\":\"a\"},\"pty\":{\"size\":{\"rows\":1.5}}}"), &s, why, sizeof why), "must be a number");
    BAD(cx_start_decode(S("{\"process\":{\"cmd\":\"a\"},\"pty\":{\"size\":{\"rows\":\"4294967296\"}}}"), &s, why, sizeof why), "out of range");
    BAD(cx_start_decode(S("{\"process\":{\"cmd\":\"a\",\"cmd\":\"b\"}}"), &s, why, sizeof why), "not JSON");
    /* Too many args. */
    size_t big = 32 + 4 * 5000;
    char *j = malloc(big);
    size_t k = (size_t)snprintf(j, big, "{\"process\":{\"cmd\":\"a\",\"args\":[");
    for (int i = 0; i < 4096; i++)
        k += (size_t)snprintf(j + k, big - k, "%s\"\"", i ? "," : "");
    snprintf(j + k, big - k, "]}}");
    BAD(cx_start_decode(j, strlen(j), &s, why, sizeof why), "more than 4095");
    free(j);
    char longtag[400];
    snprintf(longtag, sizeof longtag, "{\"process\":{\"cmd\":\"a\"},\"tag\":\"%0300d\"}", 0);
    BAD(cx_start_decode(S(longtag), &s, why, sizeof why), "longer than");
}
END_TEST

START_TEST(process_requests)
{
    struct cx_selector sel;
    int sig, pty, has;
    uint8_t *d;
    size_t n;
    uint32_t cols, rows;
    ck_assert_int_eq(cx_selector_decode(S("{\"process\":{\"pid\":42}}"), &sel, why, sizeof why), 0);
    ck_assert(!sel.by_tag && sel.pid == 42);
    ck_assert_int_eq(cx_selector_decode(S("{\"process\":{\"tag\":\"x\"}}"), &sel, why, sizeof why), 0);
    ck_assert(sel.by_tag);
    ck_assert_str_eq(sel.tag, "x");
    BAD(cx_selector_decode(S("{}"), &sel, why, sizeof why), "process (a selector");
    BAD(cx_selector_decode(S("{\"process\":[]}"), &sel, why, sizeof why), "process must be an object");
    BAD(cx_selector_decode(S("{\"process\":{}}"), &sel, why, sizeof why), "pid or tag is required");
    BAD(cx_selector_decode(S("{\"process\":{\"pid\":1,\"tag\":\"a\"}}"), &sel, why, sizeof why), "not both");
    BAD(cx_selector_decode(S("{\"process\":{\"pid\":\"x\"}}"), &sel, why, sizeof why), "not a uint32");
    BAD(cx_selector_decode(S("{\"process\":{\"pid\":4294967296}}"), &sel, why, sizeof why), "out of range");
    BAD(cx_selector_decode(S("{\"process\":{\"tag\":\"\"}}"), &sel, why, sizeof why), "empty");
    BAD(cx_selector_decode(S("5"), &sel, why, sizeof why), "not a JSON object");

    ck_assert_int_eq(cx_signal_decode(S("{\"process\":{\"pid\":1},\"signal\":\"SIGNAL_SIGKILL\"}"), &sel, &sig, why,
                                      sizeof why), 0);
    ck_assert_int_eq(sig, 9);
    ck_assert_int_eq(cx_signal_decode(S("{\"process\":{\"pid\":1},\"signal\":15}"), &sel, &sig, why, sizeof why), 0);
    ck_assert_int_eq(sig, 15);
    BAD(cx_signal_decode(S("{\"process\":{\"pid\":1}}"), &sel, &sig, why, sizeof why), "SIGNAL_SIGKILL or");
    BAD(cx_signal_decode(S("{\"process\":{\"pid\":1},\"signal\":\"SIGNAL_UNSPECIFIED\"}"), &sel, &sig, why, sizeof why), "SIGNAL_SIGKILL or");
    BAD(cx_signal_decode(S("{\"process\":{\"pid\":1},\"signal\":2}"), &sel, &sig, why, sizeof why), "SIGNAL_SIGKILL or");
    BAD(cx_signal_decode(S("{\"signal\":9}"), &sel, &sig, why, sizeof why), "selector");

    ck_assert_int_eq(cx_input_decode(S("{\"process\":{\"pid\":3},\"input\":{\"stdin\":\"aGk=\"}}"), &sel, &d, &n, &pty,
                                     why, sizeof why), 0);
    ck_assert(n == 2 && !memcmp(d, "hi", 2) && !pty);
    free(d);
    ck_assert_int_eq(cx_input_decode(S("{\"process\":{\"pid\":3},\"input\":{\"pty\":\"\"}}"), &sel, &d, &n, &pty, why,
                                     sizeof why), 0);
    ck_assert(n == 0 && pty);
    free(d);
    BAD(cx_input_decode(S("{\"process\":{\"pid\":3}}"), &sel, &d, &n, &pty, why, sizeof why), "input is missing");
    BAD(cx_input_decode(S("{\"process\":{\"pid\":3},\"input\":\"aGk=\"}"), &sel, &d, &n, &pty, why, sizeof why), "input must be an object");
    BAD(cx_input_decode(S("{\"process\":{\"pid\":3},\"input\":{}}"), &sel, &d, &n, &pty, why, sizeof why), "stdin or pty is required");
    BAD(cx_input_decode(S("{\"process\":{\"pid\":3},\"input\":{\"stdin\":\"\",\"pty\":\"\"}}"), &sel, &d, &n, &pty, why, sizeof why), "not both");
    BAD(cx_input_decode(S("{\"process\":{\"pid\":3},\"input\":{\"stdin\":5}}"), &sel, &d, &n, &pty, why, sizeof why), "base64 string");
    BAD(cx_input_decode(S("{\"process\":{\"pid\":3},\"input\":{\"stdin\":\"a!\"}}"), &sel, &d, &n, &pty, why, sizeof why), "not valid base64");

    ck_assert_int_eq(cx_update_decode(S("{\"process\":{\"pid\":3},\"pty\":{\"size\":{\"cols\":100,\"rows\":30}}}"), &sel,
                                      &has, &cols, &rows, why, sizeof why), 0);
    ck_assert(has && cols == 100 && rows == 30);
    ck_assert_int_eq(cx_update_decode(S("{\"process\":{\"pid\":3}}"), &sel, &has, &cols, &rows, why, sizeof why), 0);
    ck_assert(!has);
    BAD(cx_update_decode(S("{\"process\":{\"pid\":3},\"pty\":[]}"), &sel, &has, &cols, &rows, why, sizeof why), "pty must be an object");

    ck_assert_int_eq(cx_empty_decode(S("{}"), why, sizeof why), 0);
    BAD(cx_empty_decode(S(""), why, sizeof why), "not JSON");
    BAD(cx_empty_decode(S("null"), why, sizeof why), "not a JSON object");
}
END_TEST

START_TEST(fs_requests)
{
    struct cx_fs f;
    ck_assert_int_eq(cx_fs_decode(CX_FS_PATH, S("{\"path\":\"/a\"}"), &f, why, sizeof why), 0);
    ck_assert_str_eq(f.path, "/a");
    ck_assert_int_eq(cx_fs_decode(CX_FS_PATH, S("{}"), &f, why, sizeof why), 0);
    ck_assert_str_eq(f.path, "");
    ck_assert_int_eq(cx_fs_decode(CX_FS_LIST, S("{\"path\":\"/a\",\"depth\":3}"), &f, why, sizeof why), 0);
    ck_assert_uint_eq(f.depth, 3);
    ck_assert_int_eq(cx_fs_decode(CX_FS_LIST, S("{\"path\":\"/a\"}"), &f, why, sizeof why), 0);
    ck_assert_uint_eq(f.depth, 1);
    ck_assert_int_eq(cx_fs_decode(CX_FS_LIST, S("{\"path\":\"/a\",\"depth\":0}"), &f, why, sizeof why), 0);
    ck_assert_uint_eq(f.depth, 1);
    ck_assert_int_eq(cx_fs_decode(CX_FS_LIST, S("{\"depth\":\"16\"}"), &f, why, sizeof why), 0);
    ck_assert_uint_eq(f.depth, 16);
    ck_assert_int_eq(cx_fs_decode(CX_FS_MOVE, S("{\"source\":\"a\",\"destination\":\"/b\"}"), &f, why, sizeof why), 0);
    ck_assert_str_eq(f.path, "a");
    ck_assert_str_eq(f.dest, "/b");
    BAD(cx_fs_decode(CX_FS_PATH, S("{\"path\":1}"), &f, why, sizeof why), "path must be a string");
    BAD(cx_fs_decode(CX_FS_PATH, S("{\"path\":\"a\\u0000\"}"), &f, why, sizeof why), "NUL");
    BAD(cx_fs_decode(CX_FS_LIST, S("{\"depth\":17}"), &f, why, sizeof why), "at most 16");
    BAD(cx_fs_decode(CX_FS_LIST, S("{\"depth\":-1}"), &f, why, sizeof why), "out of range");
    BAD(cx_fs_decode(CX_FS_LIST, S("{\"depth\":true}"), &f, why, sizeof why), "must be a number");
    BAD(cx_fs_decode(CX_FS_MOVE, S("{\"source\":\"a\"}"), &f, why, sizeof why), "required");
    BAD(cx_fs_decode(CX_FS_MOVE, S("{\"destination\":\"a\"}"), &f, why, sizeof why), "required");
    BAD(cx_fs_decode(CX_FS_MOVE, S("{\"source\":[],\"destination\":\"a\"}"), &f, why, sizeof why), "source must be a string");
    BAD(cx_fs_decode(CX_FS_PATH, S("{\"path\":\"a\"} x"), &f, why, sizeof why), "not JSON");
    BAD(cx_fs_decode(CX_FS_PATH, S("\"a\""), &f, why, sizeof why), "not a JSON object");
    char *longp = malloc(CX_MAX_PATH + 32);
    int k = snprintf(longp, CX_MAX_PATH + 32, "{\"path\":\"");
    memset(longp + k, 'a', CX_MAX_PATH + 1);
    snprintf(longp + k + CX_MAX_PATH + 1, 8, "\"}");
    BAD(cx_fs_decode(CX_FS_PATH, longp, strlen(longp), &f, why, sizeof why), "longer than");
    free(longp);
}
END_TEST

START_TEST(entries_and_events)
{
    char perm[16], ts[40];
    ck_assert_uint_eq(cx_go_mode(AGENT_FT_DIR, 0755), 0x800001edu);
    ck_assert_uint_eq(cx_go_mode(AGENT_FT_FILE, 0644), 0644);
    ck_assert_uint_eq(cx_go_mode(AGENT_FT_SYMLINK, 0777), (1u << 27) | 0777);
    ck_assert_uint_eq(cx_go_mode(AGENT_FT_FILE, 04755), (1u << 23) | 0755);
    ck_assert_uint_eq(cx_go_mode(AGENT_FT_DIR, 01777), (1u << 31) | (1u << 20) | 0777);
    ck_assert_uint_eq(cx_go_mode(AGENT_FT_OTHER, 0600), (1u << 19) | 0600);
    cx_go_perm_string(AGENT_FT_DIR, 0755, perm);
    ck_assert_str_eq(perm, "drwxr-xr-x");
    cx_go_perm_string(AGENT_FT_FILE, 0644, perm);
    ck_assert_str_eq(perm, "-rw-r--r--");
    cx_go_perm_string(AGENT_FT_SYMLINK, 0777, perm);
    ck_assert_str_eq(perm, "Lrwxrwxrwx");
    cx_go_perm_string(AGENT_FT_DIR, 07777, perm);
    ck_assert_str_eq(perm, "dugtrwxrwxrwx");
    cx_go_perm_string(AGENT_FT_OTHER, 0, perm);
    ck_assert_str_eq(perm, "?---------");

    ck_assert_int_eq(cx_timestamp(0, 0, ts), 0);
    ck_assert_str_eq(ts, "1970-01-01T00:00:00Z");
    ck_assert_int_eq(cx_timestamp(1700000000, 500000000, ts), 0);
    ck_assert_str_eq(ts, "2023-11-14T22:13:20.500Z");
    ck_assert_int_eq(cx_timestamp(1700000000, 1000, ts), 0);
    ck_assert_str_eq(ts, "2023-11-14T22:13:20.000001Z");
    ck_assert_int_eq(cx_timestamp(1700000000, 7, ts), 0);
    ck_assert_str_eq(ts, "2023-11-14T22:13:20.000000007Z");
    ck_assert_int_eq(cx_timestamp(253402300799LL, 0, ts), 0);
    ck_assert_str_eq(ts, "9999-12-31T23:59:59Z");
    ck_assert_int_eq(cx_timestamp(-62135596800LL, 0, ts), 0);
    ck_assert_str_eq(ts, "0001-01-01T00:00:00Z");
    ck_assert_int_eq(cx_timestamp(253402300800LL, 0, ts), -EINVAL);
    ck_assert_int_eq(cx_timestamp(-62135596801LL, 0, ts), -EINVAL);
    ck_assert_int_eq(cx_timestamp(0, 1000000000u, ts), -EINVAL);

    struct agent_stat st;
    memset(&st, 0, sizeof st);
    st.type = AGENT_FT_SYMLINK;
    st.mode = 0777;
    st.uid = 1000;
    st.gid = 0;
    st.size = 5000000000ULL;
    st.mtime_sec = 1700000000;
    strcpy(st.path, "/home/user/link");
    strcpy(st.group, "root");
    strcpy(st.link, "/target");
    char *j = cx_entry_json(&st);
    ck_assert_ptr_nonnull(j);
    json_t *o = json_loads(j, 0, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(o, "name")), "link");
    ck_assert_str_eq(json_string_value(json_object_get(o, "type")), "FILE_TYPE_SYMLINK");
    ck_assert_str_eq(json_string_value(json_object_get(o, "path")), "/home/user/link");
    ck_assert_str_eq(json_string_value(json_object_get(o, "size")), "5000000000");
    ck_assert_int_eq(json_integer_value(json_object_get(o, "mode")), (1 << 27) | 0777);
    ck_assert_str_eq(json_string_value(json_object_get(o, "permissions")), "Lrwxrwxrwx");
    ck_assert_str_eq(json_string_value(json_object_get(o, "owner")), "1000");
    ck_assert_str_eq(json_string_value(json_object_get(o, "group")), "root");
    ck_assert_str_eq(json_string_value(json_object_get(o, "modifiedTime")), "2023-11-14T22:13:20Z");
    ck_assert_str_eq(json_string_value(json_object_get(o, "symlinkTarget")), "/target");
    json_decref(o);
    free(j);
    /* Root's name is "/"; a file's has no symlinkTarget; guest bytes that
     * are not UTF-8 make no entry. */
    st.type = AGENT_FT_DIR;
    strcpy(st.path, "/");
    j = cx_entry_json(&st);
    o = json_loads(j, 0, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(o, "name")), "/");
    ck_assert_ptr_null(json_object_get(o, "symlinkTarget"));
    json_decref(o);
    free(j);
    strcpy(st.path, "/tmp/dir/");
    j = cx_entry_json(&st);
    o = json_loads(j, 0, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(o, "name")), "dir");
    json_decref(o);
    free(j);
    strcpy(st.path, "/tmp/\xff");
    ck_assert_ptr_null(cx_entry_json(&st));
    strcpy(st.path, "/tmp/x");
    st.mtime_sec = INT64_MAX;       /* out of Timestamp's range: left out */
    j = cx_entry_json(&st);
    o = json_loads(j, 0, NULL);
    ck_assert_ptr_null(json_object_get(o, "modifiedTime"));
    json_decref(o);
    free(j);

    /* cx_entry_json_size bounds the JSON from above, however the bytes
     * escape: control bytes, quotes, backslashes, 2/3/4-byte UTF-8, a
     * path of the full length. */
    static const char *awkward[] = { "/\x01\x1f\"\\x", "/\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", "/a" };
    for (size_t i = 0; i < 4; i++) {
        memset(&st, 0, sizeof st);
        st.type = AGENT_FT_SYMLINK;
        st.size = UINT64_MAX;
        st.uid = st.gid = UINT32_MAX;
        st.mtime_sec = 253402300799;        /* 9999-12-31T23:59:59Z */
        st.mtime_nsec = 999999999;
        if (i < 3) {
            snprintf(st.path, sizeof st.path, "%s", awkward[i]);
            snprintf(st.owner, sizeof st.owner, "%s", awkward[i] + 1);
            snprintf(st.link, sizeof st.link, "%s", awkward[i]);
        } else {
            memset(st.path, '\x01', sizeof st.path - 1);  /* 4095 control bytes */
            st.path[0] = '/';
            memset(st.link, '"', sizeof st.link - 1);
        }
        j = cx_entry_json(&st);
        ck_assert_ptr_nonnull(j);
        ck_assert_msg(strlen(j) <= cx_entry_json_size(&st), "case %zu: %zu > %zu", i, strlen(j),
                      cx_entry_json_size(&st));
        o = cx_entry_obj(&st);
        ck_assert(json_is_object(o));
        json_decref(o);
        free(j);
    }
    strcpy(st.path, "/tmp/\xff");
    ck_assert_ptr_null(cx_entry_obj(&st));

    char *e = cx_event_start(7);
    ck_assert_str_eq(e, "{\"event\":{\"start\":{\"pid\":7}}}");
    free(e);
    e = cx_event_data(CX_DATA_STDOUT, "hi\n", 3);
    ck_assert_str_eq(e, "{\"event\":{\"data\":{\"stdout\":\"aGkK\"}}}");
    free(e);
    e = cx_event_data(CX_DATA_PTY, "\r\n\x1b", 3);
    ck_assert_str_eq(e, "{\"event\":{\"data\":{\"pty\":\"DQob\"}}}");
    free(e);
    ck_assert_ptr_null(cx_event_data((enum cx_data)3, "x", 1));
    e = cx_event_data(CX_DATA_STDERR, "", 0);
    ck_assert_str_eq(e, "{\"event\":{\"data\":{\"stderr\":\"\"}}}");
    free(e);
    e = cx_event_end(AGENT_EXIT_CODE, 0);
    ck_assert_str_eq(e, "{\"event\":{\"end\":{\"exitCode\":0,\"exited\":true,\"status\":\"exit status 0\"}}}");
    free(e);
    e = cx_event_end(AGENT_EXIT_CODE, 3);
    ck_assert_str_eq(e, "{\"event\":{\"end\":{\"exitCode\":3,\"exited\":true,\"status\":\"exit status 3\","
                        "\"error\":\"exit status 3\"}}}");
    free(e);
    e = cx_event_end(AGENT_EXIT_SIGNAL, 9);
    ck_assert_str_eq(e, "{\"event\":{\"end\":{\"exitCode\":-1,\"exited\":false,\"status\":\"signal: killed\","
                        "\"error\":\"signal: killed\"}}}");
    free(e);
    e = cx_event_end(AGENT_EXIT_SIGNAL, 40);
    ck_assert_ptr_nonnull(strstr(e, "signal: signal 40"));
    free(e);
    e = cx_event_keepalive();
    ck_assert_str_eq(e, "{\"event\":{\"keepalive\":{}}}");
    free(e);
}
END_TEST

START_TEST(watch_requests_and_events)
{
    struct cx_fs f;
    ck_assert_int_eq(cx_fs_decode(CX_FS_WATCH, S("{\"path\":\"/a\",\"recursive\":true}"), &f, why, sizeof why), 0);
    ck_assert_str_eq(f.path, "/a");
    ck_assert_int_eq(f.recursive, 1);
    ck_assert_int_eq(cx_fs_decode(CX_FS_WATCH, S("{\"path\":\"/a\",\"includeEntry\":false,"
                                                 "\"allowNetworkMounts\":false}"), &f, why, sizeof why), 0);
    ck_assert_int_eq(f.recursive, 0);
    BAD(cx_fs_decode(CX_FS_WATCH, S("{\"path\":\"/a\",\"recursive\":1}"), &f, why, sizeof why), "true or false");
    BAD(cx_fs_decode(CX_FS_WATCH, S("{\"path\":\"/a\",\"includeEntry\":true}"), &f, why, sizeof why),
        "includeEntry is not served");
    BAD(cx_fs_decode(CX_FS_WATCH, S("{\"path\":\"/a\",\"allow_network_mounts\":true}"), &f, why, sizeof why),
        "allowNetworkMounts is not served");
    BAD(cx_fs_decode(CX_FS_WATCH, S("{\"path\":\"/a\",\"includeEntry\":\"no\"}"), &f, why, sizeof why),
        "true or false");
    char *e = cx_watch_start();
    ck_assert_str_eq(e, "{\"start\":{}}");
    free(e);
    e = cx_watch_keepalive();
    ck_assert_str_eq(e, "{\"keepalive\":{}}");
    free(e);
    static const char *const types[] = { "CREATE", "WRITE", "REMOVE", "RENAME", "CHMOD" };
    for (uint32_t op = 1; op <= 5; op++) {
        char want[128];
        snprintf(want, sizeof want, "{\"filesystem\":{\"name\":\"d/\\u00E9\",\"type\":\"EVENT_TYPE_%s\"}}",
                 types[op - 1]);
        e = cx_watch_event(op, "d/\xc3\xa9");
        ck_assert_str_eq(e, want);
        free(e);
    }
    ck_assert_ptr_null(cx_watch_event(0, "a"));
    ck_assert_ptr_null(cx_watch_event(6, "a"));
    ck_assert_ptr_null(cx_watch_event(1, "bad\xff"));      /* not UTF-8: left out */
    ck_assert_ptr_null(cx_watch_event(1, NULL));
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("serve_connect");
    TCase *tc = tcase_create("codec");
    tcase_add_test(tc, codes);
    tcase_add_test(tc, envelopes);
    tcase_add_test(tc, base64);
    tcase_add_test(tc, paths);
    tcase_add_test(tc, start_requests);
    tcase_add_test(tc, process_requests);
    tcase_add_test(tc, fs_requests);
    tcase_add_test(tc, entries_and_events);
    tcase_add_test(tc, watch_requests_and_events);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
