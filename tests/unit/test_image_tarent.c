/* A layer's tar entries checked (vmm/image/tarent.c): path normalisation
 * (./, //, trailing /, ".." anywhere, absolute paths, NUL bytes, the
 * component and path limits, non-ASCII bytes kept), whiteouts and opaque
 * directories (and the malformed ones), hardlink targets (outside, absolute,
 * to the root, to itself, missing), symlink targets (kept as written,
 * empty, too long, NUL), entry types, and the entry and byte limits. */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "vmm/image/tarent.h"

static int norm(const char *in, char *out, size_t len)
{
    struct img_err err = { 0 };
    int rc = img_tar_path_norm(in, strlen(in), out, len, "path", &err);
    if (rc < 0) {
        ck_assert_int_eq(err.code, rc);
        ck_assert_msg(err.msg[0], "no reason for %s", in);
    }
    return rc;
}

START_TEST(paths)
{
    static const struct { const char *in, *out; } ok[] = {
        { "a", "a" }, { "./a", "a" }, { "a/", "a" }, { "./a/./b/", "a/b" }, { "a//b///c", "a/b/c" },
        { ".", "" }, { "./", "" }, { "", "" }, { "a/.../b", "a/.../b" }, { "..a/b..", "..a/b.." },
        { "h\xc3\xa9llo/\xff\xfe", "h\xc3\xa9llo/\xff\xfe" }, { ".wh.x/y", ".wh.x/y" },
    };
    char out[IMG_TAR_PATH_MAX + 1];
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        ck_assert_int_eq(norm(ok[i].in, out, sizeof out), 0);
        ck_assert_str_eq(out, ok[i].out);
    }
    static const char *bad[] = { "..", "../a", "a/..", "a/../b", "./../etc", "/", "/etc/passwd", "//a",
                                 "a/b/../../..", "a/./../x" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_int_eq(norm(bad[i], out, sizeof out), -EINVAL);
}
END_TEST

START_TEST(limits_of_names)
{
    char in[3 * IMG_TAR_PATH_MAX], out[IMG_TAR_PATH_MAX + 1];
    memset(in, 'n', IMG_TAR_NAME_MAX);
    in[IMG_TAR_NAME_MAX] = '\0';
    ck_assert_int_eq(norm(in, out, sizeof out), 0);             /* 255: fine */
    memset(in, 'n', IMG_TAR_NAME_MAX + 1);
    in[IMG_TAR_NAME_MAX + 1] = '\0';
    ck_assert_int_eq(norm(in, out, sizeof out), -ENAMETOOLONG); /* 256: not */
    /* 4096 bytes of path: fine; one more: not. */
    size_t o = 0;
    while (o + 101 <= IMG_TAR_PATH_MAX) {
        memset(in + o, 'd', 100);
        in[o + 100] = '/';
        o += 101;
    }
    memset(in + o, 'f', IMG_TAR_PATH_MAX - o);
    in[IMG_TAR_PATH_MAX] = '\0';
    ck_assert_int_eq(norm(in, out, sizeof out), 0);
    ck_assert_uint_eq(strlen(out), IMG_TAR_PATH_MAX);
    in[IMG_TAR_PATH_MAX] = 'g';
    in[IMG_TAR_PATH_MAX + 1] = '\0';
    ck_assert_int_eq(norm(in, out, sizeof out), -ENAMETOOLONG);
    /* Long input that normalises short is fine. */
    for (size_t i = 0; i < 2 * IMG_TAR_PATH_MAX; i += 2)
        memcpy(in + i, "./", 2);
    strcpy(in + 2 * IMG_TAR_PATH_MAX, "x");
    ck_assert_int_eq(norm(in, out, sizeof out), 0);
    ck_assert_str_eq(out, "x");
    /* A short output buffer. */
    ck_assert_int_eq(norm("abcdef", out, 4), -ENAMETOOLONG);
    /* A NUL inside the given length. */
    struct img_err err = { 0 };
    ck_assert_int_eq(img_tar_path_norm("a\0b", 3, out, sizeof out, "path", &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "NUL"));
}
END_TEST

static int check(const char *path, enum img_te_type t, const char *link, struct img_tarent_out *out)
{
    struct img_tarent_in in = { path, strlen(path), t, link, link ? strlen(link) : 0, 0, 0, 0, 0 };
    struct img_err err = { 0 };
    int rc = img_tarent_check(&in, out, &err);
    if (rc < 0)
        ck_assert_msg(err.msg[0] && err.code == rc, "no reason for %s", path);
    return rc;
}

/* path checks to action with out->path want. */
static void classified(const char *path, enum img_te_type t, enum img_te_action action, const char *want)
{
    struct img_tarent_out o;
    ck_assert_int_eq(check(path, t, NULL, &o), 0);
    ck_assert_int_eq(o.action, action);
    if (want)
        ck_assert_str_eq(o.path, want);
}

START_TEST(whiteouts)
{
    struct img_tarent_out o;
    classified("a/b/.wh.c", IMG_TE_REG, IMG_TA_WHITEOUT, "a/b/c");
    classified("./.wh.top", IMG_TE_REG, IMG_TA_WHITEOUT, "top");
    classified("a/.wh..wh..opq", IMG_TE_REG, IMG_TA_OPAQUE, "a");
    classified(".wh..wh..opq", IMG_TE_REG, IMG_TA_OPAQUE, "");
    classified("a/.wh..wh.plnk", IMG_TE_DIR, IMG_TA_SKIP, NULL);
    ck_assert_int_eq(check("a/.wh.", IMG_TE_REG, NULL, &o), -EINVAL);
    ck_assert_int_eq(check("a/.wh..", IMG_TE_REG, NULL, &o), -EINVAL);
    ck_assert_int_eq(check("a/.wh...", IMG_TE_REG, NULL, &o), -EINVAL);
    ck_assert_int_eq(check("a/.wh.d/", IMG_TE_DIR, NULL, &o), -EINVAL);
    ck_assert_int_eq(check("../.wh.x", IMG_TE_REG, NULL, &o), -EINVAL);
    /* ".wh." only means a whiteout as a prefix of the last component. */
    classified(".wh.d/x", IMG_TE_REG, IMG_TA_APPLY, ".wh.d/x");
    classified("a/x.wh.y", IMG_TE_REG, IMG_TA_APPLY, "a/x.wh.y");
}
END_TEST

START_TEST(links)
{
    struct img_tarent_out o;
    ck_assert_int_eq(check("b", IMG_TE_HARDLINK, "./a//x", &o), 0);
    ck_assert_int_eq(o.action, IMG_TA_APPLY);
    ck_assert_str_eq(o.link, "a/x");
    ck_assert_int_eq(check("b", IMG_TE_HARDLINK, "../etc/passwd", &o), -EINVAL);
    ck_assert_int_eq(check("b", IMG_TE_HARDLINK, "/etc/passwd", &o), -EINVAL);
    ck_assert_int_eq(check("b", IMG_TE_HARDLINK, "a/../../x", &o), -EINVAL);
    ck_assert_int_eq(check("b", IMG_TE_HARDLINK, "./", &o), -EINVAL);
    ck_assert_int_eq(check("b", IMG_TE_HARDLINK, "", &o), -EINVAL);
    ck_assert_int_eq(check("b", IMG_TE_HARDLINK, NULL, &o), -EINVAL);
    ck_assert_int_eq(check("a/b", IMG_TE_HARDLINK, "./a/b", &o), -EINVAL);
    /* Symlink targets are kept as written: they resolve only inside the image. */
    ck_assert_int_eq(check("l", IMG_TE_SYMLINK, "../../../etc//passwd", &o), 0);
    ck_assert_str_eq(o.link, "../../../etc//passwd");
    ck_assert_int_eq(check("l", IMG_TE_SYMLINK, "/abs", &o), 0);
    ck_assert_str_eq(o.link, "/abs");
    ck_assert_int_eq(check("l", IMG_TE_SYMLINK, "", &o), -EINVAL);
    ck_assert_int_eq(check("l", IMG_TE_SYMLINK, NULL, &o), -EINVAL);
    char t[IMG_TAR_LINK_MAX + 2];
    memset(t, 't', sizeof t - 1);
    t[sizeof t - 1] = '\0';
    ck_assert_int_eq(check("l", IMG_TE_SYMLINK, t, &o), -ENAMETOOLONG);
    t[IMG_TAR_LINK_MAX] = '\0';
    ck_assert_int_eq(check("l", IMG_TE_SYMLINK, t, &o), 0);
    struct img_tarent_in in = { "l", 1, IMG_TE_SYMLINK, "a\0b", 3, 0, 0, 0, 0 };
    struct img_err err = { 0 };
    ck_assert_int_eq(img_tarent_check(&in, &o, &err), -EINVAL);
}
END_TEST

START_TEST(types)
{
    struct img_tarent_out o;
    ck_assert_int_eq(check("s", IMG_TE_OTHER, NULL, &o), -EINVAL);
    ck_assert_int_eq(check("s", (enum img_te_type)0, NULL, &o), -EINVAL);
    ck_assert_int_eq(check("./", IMG_TE_DIR, NULL, &o), 0);
    ck_assert_str_eq(o.path, "");
    ck_assert_int_eq(check("./", IMG_TE_REG, NULL, &o), -EINVAL);     /* the root as a file */
    ck_assert_int_eq(check(".", IMG_TE_SYMLINK, "x", &o), -EINVAL);
    ck_assert_int_eq(check("/abs", IMG_TE_DIR, NULL, &o), -EINVAL);
    struct img_tarent_in in = { NULL, 0, IMG_TE_REG, NULL, 0, 0, 0, 0, 0 };
    struct img_err err = { 0 };
    ck_assert_int_eq(img_tarent_check(&in, &o, &err), -EINVAL);
    for (enum img_te_type t = IMG_TE_REG; t < IMG_TE_OTHER; t++) {
        if (t == IMG_TE_HARDLINK || t == IMG_TE_SYMLINK)
            continue;
        ck_assert_int_eq(check("dev/x", t, NULL, &o), 0);
        ck_assert_str_eq(o.path, "dev/x");
    }
}
END_TEST

/* An entry of type t with owner uid:gid and device maj:min checked. */
static int owned(enum img_te_type t, int64_t uid, int64_t gid, uint64_t maj, uint64_t min)
{
    struct img_tarent_in in = { "dev/x", 5, t, NULL, 0, uid, gid, maj, min };
    struct img_tarent_out o;
    struct img_err err = { 0 };
    int rc = img_tarent_check(&in, &o, &err);
    if (rc < 0)
        ck_assert_msg(err.code == rc && strstr(err.msg, "dev/x"), "no reason: %s", err.msg);
    return rc;
}

/* Owners and device numbers out of range are refused, never wrapped
 * (a minor past 20 bits used to land on another device: 1:1048577 as
 * 1:1, /dev/mem; an owner past 32 bits became root). */
START_TEST(ids_and_devices)
{
    ck_assert_int_eq(owned(IMG_TE_REG, 0, 0, 0, 0), 0);
    ck_assert_int_eq(owned(IMG_TE_REG, IMG_TAR_ID_MAX, IMG_TAR_ID_MAX, 0, 0), 0);
    ck_assert_int_eq(owned(IMG_TE_REG, -1, 0, 0, 0), -EINVAL);
    ck_assert_int_eq(owned(IMG_TE_REG, 0, -1, 0, 0), -EINVAL);
    ck_assert_int_eq(owned(IMG_TE_REG, 0xffffffffll, 0, 0, 0), -EINVAL);
    ck_assert_int_eq(owned(IMG_TE_REG, 1ll << 32, 0, 0, 0), -EINVAL);
    ck_assert_int_eq(owned(IMG_TE_DIR, 0, 1ll << 40, 0, 0), -EINVAL);
    ck_assert_int_eq(owned(IMG_TE_CHR, 0, 0, IMG_TAR_MAJOR_MAX, IMG_TAR_MINOR_MAX), 0);
    ck_assert_int_eq(owned(IMG_TE_CHR, 0, 0, 1, IMG_TAR_MINOR_MAX + 1), -EINVAL);
    ck_assert_int_eq(owned(IMG_TE_BLK, 0, 0, IMG_TAR_MAJOR_MAX + 1, 0), -EINVAL);
    ck_assert_int_eq(owned(IMG_TE_BLK, 0, 0, 1ull << 40, 1), -EINVAL);
    /* A file's (meaningless) device fields are not its business. */
    ck_assert_int_eq(owned(IMG_TE_REG, 0, 0, 1ull << 40, 1ull << 40), 0);
    ck_assert_int_eq(owned(IMG_TE_FIFO, 0, 0, 5000, 1), 0);
}
END_TEST

START_TEST(counts)
{
    struct img_tar_limits l = { .max_entries_layer = 3, .max_entries_total = 5, .max_bytes = 1000 };
    struct img_tar_count c = { 0 };
    struct img_err err = { 0 };
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(img_tar_count_entry(&l, &c, &err), 0);
    ck_assert_int_eq(img_tar_count_entry(&l, &c, &err), -E2BIG);
    ck_assert_ptr_nonnull(strstr(err.msg, "more than 3 entries"));
    c.entries_layer = 0;
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(img_tar_count_entry(&l, &c, &err), 0);
    ck_assert_int_eq(img_tar_count_entry(&l, &c, &err), 0);
    ck_assert_int_eq(img_tar_count_entry(&l, &c, &err), -E2BIG);
    ck_assert_ptr_nonnull(strstr(err.msg, "more than 5 entries"));
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(img_tar_count_bytes(&l, &c, 1000, &err), 0);
    ck_assert_int_eq(img_tar_count_bytes(&l, &c, 1001, &err), -EFBIG);
    ck_assert_ptr_nonnull(strstr(err.msg, "decompression bomb"));
    /* Defaults for 0 / no limits. */
    struct img_tar_count d = { 0 };
    ck_assert_int_eq(img_tar_count_entry(NULL, &d, NULL), 0);
    ck_assert_int_eq(img_tar_count_bytes(NULL, &d, IMG_TAR_BYTES, NULL), 0);
    ck_assert_int_eq(img_tar_count_bytes(NULL, &d, IMG_TAR_BYTES + 1, NULL), -EFBIG);
    d.entries_layer = IMG_TAR_ENTRIES_LAYER;
    ck_assert_int_eq(img_tar_count_entry(NULL, &d, NULL), -E2BIG);
}
END_TEST

START_TEST(err_lines)
{
    struct img_err err = { 0 };
    ck_assert_int_eq(img_err(&err, -EINVAL, "first %d", 1), -EINVAL);
    ck_assert_int_eq(img_err(&err, -ENOENT, "second"), -ENOENT);
    ck_assert_int_eq(err.code, -EINVAL);            /* the first error stays */
    ck_assert_str_eq(err.msg, "first 1\nsecond");
    ck_assert_int_eq(img_err(NULL, -EIO, "x"), -EIO);
    ck_assert_int_eq(img_digest_valid("sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"), 1);
    ck_assert_int_eq(img_digest_valid("sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef"), 0);
    ck_assert_int_eq(img_digest_valid("sha256:0123"), 0);
    ck_assert_int_eq(img_digest_valid(NULL), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("image_tarent");
    TCase *tc = tcase_create("tarent");
    tcase_add_test(tc, paths);
    tcase_add_test(tc, limits_of_names);
    tcase_add_test(tc, whiteouts);
    tcase_add_test(tc, links);
    tcase_add_test(tc, types);
    tcase_add_test(tc, ids_and_devices);
    tcase_add_test(tc, counts);
    tcase_add_test(tc, err_lines);
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
