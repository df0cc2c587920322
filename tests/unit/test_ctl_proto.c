/* The control-socket request parser (vmm/sandbox/ctl_proto.c): every verb, and
 * every malformed line gets its documented error and leaves no half-parsed
 * request behind it being used. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "vmm/sandbox/ctl_proto.h"

static int parse(const char *s, struct ctl_req *r)
{
    return ctl_parse(s, strlen(s), r);
}

START_TEST(verbs_without_argument)
{
    static const struct { const char *line; enum ctl_op op; } c[] = {
        { "pause", CTL_PAUSE }, { "resume\n", CTL_RESUME }, { "status\r\n", CTL_STATUS },
        { "stop", CTL_STOP },
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        struct ctl_req r;
        memset(&r, 0x55, sizeof r);
        ck_assert_int_eq(parse(c[i].line, &r), 0);
        ck_assert_int_eq(r.op, c[i].op);
        ck_assert_str_eq(r.arg, "");
        ck_assert_ptr_nonnull(ctl_op_name(r.op));
        ck_assert_int_eq(strncmp(c[i].line, ctl_op_name(r.op), strlen(ctl_op_name(r.op))), 0);
    }
}
END_TEST

START_TEST(verbs_with_argument)
{
    struct ctl_req r;
    ck_assert_int_eq(parse("snapshot /tmp/s\n", &r), 0);
    ck_assert_int_eq(r.op, CTL_SNAPSHOT);
    ck_assert_str_eq(r.arg, "/tmp/s");
    ck_assert_int_eq(parse("stop-snapshot /a dir/with spaces", &r), 0);
    ck_assert_int_eq(r.op, CTL_STOP_SNAPSHOT);
    ck_assert_str_eq(r.arg, "/a dir/with spaces");
    ck_assert_int_eq(parse("snapshot rel\r\n", &r), 0);
    ck_assert_str_eq(r.arg, "rel");
    ck_assert_str_eq(ctl_op_name(CTL_STOP_SNAPSHOT), "stop-snapshot");
    ck_assert_int_eq(parse("snapshot-disks /t/x\n", &r), 0);
    ck_assert_int_eq(r.op, CTL_SNAPSHOT_DISKS);
    ck_assert_str_eq(r.arg, "/t/x");
    ck_assert_int_eq(parse("clone-disks /t/y", &r), 0);
    ck_assert_int_eq(r.op, CTL_CLONE_DISKS);
    ck_assert_str_eq(r.arg, "/t/y");
    ck_assert_int_eq(parse("clone-disks", &r), -EINVAL);
    ck_assert_int_eq(parse("snapshot-disks\n", &r), -EINVAL);
    ck_assert_str_eq(ctl_op_name(CTL_CLONE_DISKS), "clone-disks");
    ck_assert_ptr_null(ctl_op_name((enum ctl_op)99));
}
END_TEST

START_TEST(empty_lines)
{
    struct ctl_req r;
    ck_assert_int_eq(ctl_parse("", 0, &r), -ENODATA);
    ck_assert_int_eq(parse("\n", &r), -ENODATA);
    ck_assert_int_eq(parse("\r\n", &r), -ENODATA);
    ck_assert_int_eq(ctl_parse(NULL, 0, &r), -EINVAL);
    ck_assert_int_eq(ctl_parse("stop", 4, NULL), -EINVAL);
}
END_TEST

START_TEST(unknown_verbs)
{
    static const char *bad[] = {
        "paus", "pausee", "PAUSE", "snap", "stop-snap /x", "status2", "x", "-", "stopsnapshot /d",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct ctl_req r;
        ck_assert_int_eq(parse(bad[i], &r), -ENOENT);
    }
}
END_TEST

START_TEST(bad_separators_and_arguments)
{
    static const char *bad[] = {
        "pause now", "stop ", " stop", "status x\n", "snapshot", "snapshot ", "snapshot  /d",
        "snapshot /d ", "stop-snapshot\n", " ", "  ",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct ctl_req r;
        ck_assert_msg(parse(bad[i], &r) == -EINVAL, "'%s'", bad[i]);
    }
}
END_TEST

START_TEST(bad_bytes)
{
    struct ctl_req r;
    ck_assert_int_eq(ctl_parse("stop\0", 5, &r), -EBADMSG);
    ck_assert_int_eq(ctl_parse("st\0op", 5, &r), -EBADMSG);
    ck_assert_int_eq(parse("snapshot /a\tb", &r), -EBADMSG);
    ck_assert_int_eq(parse("stop\nstop", &r), -EBADMSG);     /* two lines */
    ck_assert_int_eq(parse("stop\n\n", &r), -EBADMSG);
    ck_assert_int_eq(parse("stop\r", &r), -EBADMSG);         /* CR without LF */
    ck_assert_int_eq(parse("snapshot /\x7f", &r), -EBADMSG);
    /* Bytes >= 0x80 are path bytes ($MOAT_HOME may be UTF-8), not control. */
    ck_assert_int_eq(parse("snapshot /\xc3\xa9", &r), 0);
    ck_assert_str_eq(r.arg, "/\xc3\xa9");
    ck_assert_int_eq(parse("st\xc3\xa9p", &r), -ENOENT);
    ck_assert_int_eq(parse("\x1b[A", &r), -EBADMSG);
}
END_TEST

START_TEST(lengths)
{
    struct ctl_req r;
    size_t n = CTL_LINE_MAX + 1;
    char *b = malloc(n + 1);
    ck_assert_ptr_nonnull(b);
    /* the longest argument fits */
    memcpy(b, "snapshot ", 9);
    memset(b + 9, 'a', CTL_ARG_MAX);
    ck_assert_int_eq(ctl_parse(b, 9 + CTL_ARG_MAX, &r), 0);
    ck_assert_uint_eq(strlen(r.arg), CTL_ARG_MAX);
    /* one more byte of argument is too long */
    b[9 + CTL_ARG_MAX] = 'a';
    ck_assert_int_eq(ctl_parse(b, 9 + CTL_ARG_MAX + 1, &r), -E2BIG);
    /* a line past CTL_LINE_MAX is refused before anything else */
    memset(b, 'a', n);
    ck_assert_int_eq(ctl_parse(b, n, &r), -E2BIG);
    memset(b, ' ', n);
    ck_assert_int_eq(ctl_parse(b, n, &r), -E2BIG);
    /* a line of exactly CTL_LINE_MAX is parsed (here: a bad verb) */
    ck_assert_int_eq(ctl_parse(b, CTL_LINE_MAX, &r), -EINVAL);
    free(b);
}
END_TEST

START_TEST(set_split)
{
    struct ctl_req r;
    const char *line = "set net:net0 metadata {\"a\": \"b c\"}\n";
    ck_assert_int_eq(ctl_parse(line, strlen(line), &r), 0);
    ck_assert_int_eq(r.op, CTL_SET);
    char *type, *id, *key, *value;
    ck_assert_int_eq(ctl_set_split(r.arg, &type, &id, &key, &value), 0);
    ck_assert_str_eq(type, "net");
    ck_assert_str_eq(id, "net0");
    ck_assert_str_eq(key, "metadata");
    ck_assert_str_eq(value, "{\"a\": \"b c\"}");
    char a2[] = "net tx_bw 1000/10";
    ck_assert_int_eq(ctl_set_split(a2, &type, &id, &key, &value), 0);
    ck_assert_ptr_null(id);
    ck_assert_str_eq(value, "1000/10");
    static const char *bad[] = { "net", "net tx_bw", "net tx_bw ", "Net tx_bw 1", "net: tx_bw 1", "net:a/b k v",
                                 "net K v", ":x k v", "net  k v", NULL };
    for (int i = 0; bad[i]; i++) {
        char b[64];
        snprintf(b, sizeof b, "%s", bad[i]);
        ck_assert_msg(ctl_set_split(b, &type, &id, &key, &value) == -EINVAL, "'%s'", bad[i]);
    }
    ck_assert_int_eq(ctl_parse("set", 3, &r), -EINVAL);
    char g1[] = "net:net0 stats", g2[] = "net stats extra", g3[] = "net", g4[] = "net Stats";
    ck_assert_int_eq(ctl_get_split(g1, &type, &id, &key), 0);
    ck_assert_str_eq(type, "net");
    ck_assert_str_eq(id, "net0");
    ck_assert_str_eq(key, "stats");
    ck_assert_int_eq(ctl_get_split(g2, &type, &id, &key), -EINVAL);
    ck_assert_int_eq(ctl_get_split(g3, &type, &id, &key), -EINVAL);
    ck_assert_int_eq(ctl_get_split(g4, &type, &id, &key), -EINVAL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ctl_proto");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, verbs_without_argument);
    tcase_add_test(tc, set_split);
    tcase_add_test(tc, verbs_with_argument);
    tcase_add_test(tc, empty_lines);
    tcase_add_test(tc, unknown_verbs);
    tcase_add_test(tc, bad_separators_and_arguments);
    tcase_add_test(tc, bad_bytes);
    tcase_add_test(tc, lengths);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
