/* moat disk's library (vmm/sandbox/disk.h) on temporary files: create and
 * info, clone, diff (ranges, listed blocks, the files owning them through
 * debugfs where it is installed), export, upgrade, and the errors each
 * tells (with the step: opening the overlay or the work after). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "devices/blk/overlay.h"
#include "vmm/sandbox/disk.h"

#define SIZE (3u << 20)     /* the base: 768 blocks */

static char dir[64], base[128], ovl[128];

static void pattern(uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)(i * 31 + i / 4096);
}

static void write_file(const char *path, const void *buf, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, buf, n), (ssize_t)n);
    close(fd);
}

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/moat-disk-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(base, sizeof base, "%s/base.img", dir);
    snprintf(ovl, sizeof ovl, "%s/a.ovl", dir);
    uint8_t *b = malloc(SIZE);
    ck_assert_ptr_nonnull(b);
    pattern(b, SIZE);
    write_file(base, b, SIZE);
    free(b);
    struct sbx_err e = { 0 };
    enum ovl_kind k;
    ck_assert_int_eq(sandbox_disk_create(base, ovl, true, &k, &e), 0);
    ck_assert_int_eq(k, OVL_KIND_MOAT);
    ck_assert_str_eq(e.msg, "");
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static char *path(const char *name)
{
    static char p[4][160];      /* test code: a few paths at once */
    static unsigned n;
    char *r = p[n++ % 4];
    snprintf(r, sizeof p[0], "%s/%s", dir, name);
    return r;
}

/* len bytes of c at off into overlay o (over its recorded base). */
static void put(const char *o, uint64_t off, int c, size_t len)
{
    char why[512] = "";
    struct ovl_disk *d;
    ck_assert_msg(ovl_open(NULL, o, 0, &d, why, sizeof why) == 0, "%s", why);
    uint8_t *buf = malloc(len);
    memset(buf, c, len);
    struct iovec v = { buf, len };
    ck_assert_int_eq(ovl_pwritev(d, &v, 1, off), 0);
    ck_assert_int_eq(ovl_close(d), 0);
    free(buf);
}

START_TEST(create_info)
{
    struct sbx_err e = { 0 };
    struct sbx_disk_info in;
    ck_assert_int_eq(sandbox_disk_info(NULL, ovl, &in, &e), 0);
    ck_assert_int_eq(in.kind, OVL_KIND_MOAT);
    ck_assert_uint_eq(in.version, OVL_VERSION);
    ck_assert_str_eq(in.base, base);
    ck_assert_uint_eq(in.base_size, SIZE);
    ck_assert_uint_eq(in.vsize, SIZE);
    ck_assert_uint_eq(in.allocated, 0);
    ck_assert_uint_eq(in.nblocks, SIZE / 4096);
    put(ovl, 4096 * 5, 1, 4096 * 2);
    ck_assert_int_eq(sandbox_disk_info(path("base.img"), ovl, &in, &e), 0);
    ck_assert_uint_eq(in.allocated, 2);
    ck_assert_uint_gt(in.used, 0);
    /* a raw image: its size only */
    ck_assert_int_eq(sandbox_disk_info(NULL, base, &in, &e), 0);
    ck_assert_int_eq(in.kind, OVL_KIND_RAW);
    ck_assert_uint_eq(in.vsize, SIZE);
    ck_assert_str_eq(in.base, "");
    ck_assert_str_eq(e.msg, "");
    /* errors */
    enum ovl_kind k;
    ck_assert_int_eq(sandbox_disk_create(base, ovl, true, &k, &e), -EEXIST);
    ck_assert_int_eq(e.code, -EEXIST);
    ck_assert_str_ne(e.msg, "");
    struct sbx_err e2 = { 0 };
    ck_assert_int_lt(sandbox_disk_info(NULL, path("missing.ovl"), &in, &e2), 0);
    ck_assert_ptr_nonnull(strstr(e2.msg, "missing.ovl"));
    struct sbx_err e3 = { 0 };
    ck_assert_int_lt(sandbox_disk_create(path("missing.img"), path("b.ovl"), false, &k, &e3), 0);
    ck_assert_str_ne(e3.msg, "");
}
END_TEST

struct ranges {
    uint64_t r[16][2];
    unsigned n;
};

static int collect(void *arg, uint64_t first, uint64_t last)
{
    struct ranges *g = arg;
    ck_assert_uint_lt(g->n, 16);
    g->r[g->n][0] = first;
    g->r[g->n++][1] = last;
    return 0;
}

START_TEST(diff_base_and_pair)
{
    put(ovl, 0, 7, 4096);
    put(ovl, 4096 * 5, 9, 4096 * 3);
    put(ovl, 4096 * 100, 3, 10);
    struct sbx_err e = { 0 };
    struct ranges g = { 0 };
    struct sbx_disk_diff d;
    enum sbx_disk_step step;
    ck_assert_int_eq(sandbox_disk_diff(NULL, ovl, NULL, collect, &g, &d, &step, &e), 0);
    ck_assert_uint_eq(d.ndiff, 5);
    ck_assert_uint_eq(d.nranges, 3);
    ck_assert_uint_eq(g.n, 3);
    ck_assert_uint_eq(g.r[0][0], 0);
    ck_assert_uint_eq(g.r[0][1], 0);
    ck_assert_uint_eq(g.r[1][0], 5);
    ck_assert_uint_eq(g.r[1][1], 7);
    ck_assert_uint_eq(g.r[2][0], 100);
    ck_assert_uint_eq(g.r[2][1], 100);
    ck_assert_uint_eq(d.nblocks, 5);
    ck_assert_uint_eq(d.blocks[4], 100);
    ck_assert_ptr_nonnull(d.disk);
    sandbox_disk_diff_release(&d);
    ck_assert_ptr_null(d.disk);
    /* two overlays: a clone, then one more block in it */
    ck_assert_int_eq(sandbox_disk_clone(ovl, path("b.ovl"), &e), 0);
    put(path("b.ovl"), 4096 * 6, 1, 4096);
    put(path("b.ovl"), 4096 * 200, 1, 4096);
    memset(&g, 0, sizeof g);
    ck_assert_int_eq(sandbox_disk_diff(NULL, ovl, path("b.ovl"), collect, &g, &d, &step, &e), 0);
    ck_assert_uint_eq(d.ndiff, 2);
    ck_assert_uint_eq(g.n, 2);
    ck_assert_uint_eq(g.r[0][0], 6);
    ck_assert_uint_eq(g.r[1][0], 200);
    sandbox_disk_diff_release(&d);
    ck_assert_str_eq(e.msg, "");
    /* the same raw image with itself: nothing */
    memset(&g, 0, sizeof g);
    ck_assert_int_eq(sandbox_disk_diff(base, base, NULL, collect, &g, &d, &step, &e), 0);
    ck_assert_uint_eq(d.ndiff, 0);
    ck_assert_uint_eq(g.n, 0);
    sandbox_disk_diff_release(&d);
}
END_TEST

START_TEST(diff_errors)
{
    struct sbx_err e = { 0 };
    struct ranges g = { 0 };
    struct sbx_disk_diff d;
    enum sbx_disk_step step;
    ck_assert_int_lt(sandbox_disk_diff(NULL, ovl, path("missing.ovl"), collect, &g, &d, &step, &e), 0);
    ck_assert_int_eq(step, SBX_DISK_OPEN);
    ck_assert_ptr_nonnull(strstr(e.msg, "missing.ovl"));
    sandbox_disk_diff_release(&d);

    struct sbx_err e2 = { 0 };
    ck_assert_int_eq(sandbox_disk_diff(NULL, base, NULL, collect, &g, &d, &step, &e2), -EINVAL);
    ck_assert_int_eq(step, SBX_DISK_WORK);
    ck_assert_ptr_nonnull(strstr(e2.msg, "is a raw image: give --base or a second overlay"));
    sandbox_disk_diff_release(&d);

    uint8_t small[8192] = { 0 };
    write_file(path("small.img"), small, sizeof small);
    struct sbx_err e3 = { 0 };
    ck_assert_int_eq(sandbox_disk_diff(NULL, ovl, path("small.img"), collect, &g, &d, &step, &e3), -EINVAL);
    ck_assert_ptr_nonnull(strstr(e3.msg, "differ in size"));
    sandbox_disk_diff_release(&d);

    struct sbx_err e4 = { 0 };
    ck_assert_int_eq(sandbox_disk_diff(path("small.img"), base, NULL, collect, &g, &d, &step, &e4), -EINVAL);
    ck_assert_ptr_nonnull(strstr(e4.msg, "size differs from"));
    sandbox_disk_diff_release(&d);

    struct sbx_err e5 = { 0 };
    ck_assert_int_eq(sandbox_disk_diff(path("none.img"), base, NULL, collect, &g, &d, &step, &e5), -ENOENT);
    ck_assert_ptr_nonnull(strstr(e5.msg, "none.img: No such file or directory"));
    sandbox_disk_diff_release(&d);
    ck_assert_uint_eq(g.n, 0);
}
END_TEST

static int stop_at_first(void *arg, uint64_t first, uint64_t last)
{
    (*(unsigned *)arg)++;
    return 42;
}

START_TEST(diff_stopped_by_callback)
{
    put(ovl, 0, 7, 4096);
    put(ovl, 4096 * 9, 7, 4096);
    struct sbx_err e = { 0 };
    struct sbx_disk_diff d;
    enum sbx_disk_step step;
    unsigned calls = 0;
    ck_assert_int_eq(sandbox_disk_diff(NULL, ovl, NULL, stop_at_first, &calls, &d, &step, &e), 42);
    ck_assert_uint_eq(calls, 1);
    sandbox_disk_diff_release(&d);
}
END_TEST

static void no_file(void *arg, const char *p, unsigned long ino)
{
    ck_abort_msg("no file expected: %s (inode %lu)", p, ino);
}

START_TEST(files_not_ext)
{
    if (system("command -v debugfs >/dev/null 2>&1") != 0)
        return;
    put(ovl, 0, 7, 4096);
    struct sbx_err e = { 0 };
    struct ranges g = { 0 };
    struct sbx_disk_diff d;
    enum sbx_disk_step step;
    ck_assert_int_eq(sandbox_disk_diff(NULL, ovl, NULL, collect, &g, &d, &step, &e), 0);
    ck_assert_int_eq(sandbox_disk_files(&d, no_file, NULL, &e), 0);
    ck_assert_int_eq(e.code, 0);
    ck_assert_str_eq(e.msg, "not an ext2/3/4 image");
    sandbox_disk_diff_release(&d);
}
END_TEST

struct files {
    char s[1024];
};

static void add_file(void *arg, const char *p, unsigned long ino)
{
    struct files *f = arg;
    size_t n = strlen(f->s);
    snprintf(f->s + n, sizeof f->s - n, "%s %lu\n", p, ino);
}

START_TEST(files_ext4)
{
    if (system("command -v debugfs >/dev/null 2>&1 && command -v mkfs.ext4 >/dev/null 2>&1") != 0)
        return;
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "cd %s && mkdir t && echo hi > t/a && mkfs.ext4 -q -F -b 4096 -d t e.img 8M >/dev/null 2>&1"
             " && cp e.img f.img && echo new > n"
             " && debugfs -w -R 'write n newfile' f.img >/dev/null 2>&1",
             dir);
    ck_assert_int_eq(system(cmd), 0);
    struct sbx_err e = { 0 };
    struct ranges g = { 0 };
    struct sbx_disk_diff d;
    enum sbx_disk_step step;
    ck_assert_int_eq(sandbox_disk_diff(path("e.img"), path("f.img"), NULL, collect, &g, &d, &step, &e), 0);
    ck_assert_uint_gt(d.ndiff, 0);
    struct files f = { "" };
    ck_assert_int_eq(sandbox_disk_files(&d, add_file, &f, &e), 0);
    ck_assert_str_eq(e.msg, "");
    ck_assert_msg(strstr(f.s, "/ 2\n") && strstr(f.s, "/newfile "), "%s", f.s);
    sandbox_disk_diff_release(&d);
}
END_TEST

START_TEST(export_clone_upgrade)
{
    put(ovl, 4096 * 3, 0x55, 4096);
    struct sbx_err e = { 0 };
    enum sbx_disk_step step;
    ck_assert_int_eq(sandbox_disk_export(NULL, ovl, path("out.raw"), &step, &e), 0);
    uint8_t *want = malloc(SIZE), *got = malloc(SIZE);
    pattern(want, SIZE);
    memset(want + 4096 * 3, 0x55, 4096);
    int fd = open(path("out.raw"), O_RDONLY | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(read(fd, got, SIZE), (ssize_t)SIZE);
    close(fd);
    ck_assert_int_eq(memcmp(want, got, SIZE), 0);
    free(want);
    free(got);
    /* RAW exists; the overlay is missing */
    ck_assert_int_eq(sandbox_disk_export(NULL, ovl, path("out.raw"), &step, &e), -EEXIST);
    ck_assert_int_eq(step, SBX_DISK_WORK);
    ck_assert_ptr_nonnull(strstr(e.msg, "out.raw: File exists"));
    struct sbx_err e2 = { 0 };
    ck_assert_int_lt(sandbox_disk_export(NULL, path("missing.ovl"), path("x.raw"), &step, &e2), 0);
    ck_assert_int_eq(step, SBX_DISK_OPEN);
    ck_assert_int_eq(access(path("x.raw"), F_OK), -1);
    /* clone: a new file only */
    struct sbx_err e3 = { 0 };
    ck_assert_int_eq(sandbox_disk_clone(ovl, path("c.ovl"), &e3), 0);
    ck_assert_int_lt(sandbox_disk_clone(ovl, path("c.ovl"), &e3), 0);
    ck_assert_ptr_nonnull(strstr(e3.msg, "c.ovl"));
    /* upgrade: a current overlay is refused (and stays usable), as is a
     * missing one; a format-1 one: see upgrade_v1 */
    struct sbx_err e4 = { 0 };
    ck_assert_int_eq(sandbox_disk_upgrade(NULL, ovl, &e4), -EALREADY);
    ck_assert_ptr_nonnull(strstr(e4.msg, "already format version"));
    struct sbx_disk_info in;
    ck_assert_int_eq(sandbox_disk_info(NULL, ovl, &in, NULL), 0);
    ck_assert_uint_eq(in.version, OVL_VERSION);
    struct sbx_err e5 = { 0 };
    ck_assert_int_lt(sandbox_disk_upgrade(NULL, path("missing.ovl"), &e5), 0);
    ck_assert_ptr_nonnull(strstr(e5.msg, "missing.ovl"));
}
END_TEST

/* A format-1 overlay (the header re-encoded as version 1: no SHA-256) is
 * refused by info and
 * export naming the upgrade, which records the SHA-256. */
START_TEST(upgrade_v1)
{
    put(ovl, 0, 7, 4096);
    uint8_t b[OVL_HDR_SIZE];
    int fd = open(ovl, O_RDWR | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pread(fd, b, sizeof b, 0), (ssize_t)sizeof b);
    struct ovl_header h;
    const char *why = NULL;
    ck_assert_int_eq(ovl_header_decode(b, sizeof b, &h, &why), 0);
    h.version = OVL_VERSION_V1;
    ovl_header_encode(&h, b);
    ck_assert_int_eq(pwrite(fd, b, sizeof b, 0), (ssize_t)sizeof b);
    close(fd);
    struct sbx_err e = { 0 };
    struct sbx_disk_info in;
    ck_assert_int_lt(sandbox_disk_info(NULL, ovl, &in, &e), 0);
    ck_assert_ptr_nonnull(strstr(e.msg, "moat disk upgrade"));
    enum sbx_disk_step step;
    struct sbx_err e2 = { 0 };
    ck_assert_int_lt(sandbox_disk_export(NULL, ovl, path("x.raw"), &step, &e2), 0);
    ck_assert_int_eq(step, SBX_DISK_OPEN);
    struct sbx_err e3 = { 0 };
    ck_assert_int_eq(sandbox_disk_upgrade(NULL, ovl, &e3), 0);
    ck_assert_str_eq(e3.msg, "");
    ck_assert_int_eq(sandbox_disk_info(NULL, ovl, &in, &e3), 0);
    ck_assert_uint_eq(in.version, OVL_VERSION);
    ck_assert_uint_eq(in.allocated, 1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("disk");
    TCase *tc = tcase_create("disk");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, create_info);
    tcase_add_test(tc, diff_base_and_pair);
    tcase_add_test(tc, diff_errors);
    tcase_add_test(tc, diff_stopped_by_callback);
    tcase_add_test(tc, files_not_ext);
    tcase_add_test(tc, files_ext4);
    tcase_add_test(tc, export_clone_upgrade);
    tcase_add_test(tc, upgrade_v1);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
