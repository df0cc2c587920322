/* Copy-on-write overlays on a filesystem with reflinks (devices/blk/overlay_disk.h):
 * the FICLONE paths of ovl_create, ovl_clone and ovl_clone_disk, which ext4
 * (this machine's filesystem) never takes. A 300 MiB XFS image with
 * reflink=1 is made and loop-mounted for the run; without root, mkfs.xfs
 * (xfsprogs, scripts/deps.sh) or loop devices the suite says SKIPPED and
 * passes.
 *
 * Checked: ovl_create makes a raw reflink (the base's extents shared, per
 * FIEMAP), which ovl_open serves as a raw image; writes through it leave the
 * base untouched and only unshare what they wrote; ovl_clone and
 * ovl_clone_disk (through an open disk's descriptor, while it holds its
 * exclusive lock) reflink too, with the same contents; a moat-format
 * overlay (OVL_CREATE_NO_REFLINK) on the same filesystem is cloned by
 * reflink and reads the same. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices/blk/overlay_disk.h"

#define BASE_SIZE (8u << 20)

static char mnt[64], img[80];

static void path(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", mnt, name);
}

/* Does any extent of the file carry FIEMAP_EXTENT_SHARED? */
static bool has_shared_extent(const char *p)
{
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    size_t sz = sizeof(struct fiemap) + 64 * sizeof(struct fiemap_extent);
    struct fiemap *fm = calloc(1, sz);
    ck_assert_ptr_nonnull(fm);
    fm->fm_length = ~0ull;
    fm->fm_flags = FIEMAP_FLAG_SYNC;
    fm->fm_extent_count = 64;
    ck_assert_int_eq(ioctl(fd, FS_IOC_FIEMAP, fm), 0);
    bool shared = false;
    for (unsigned i = 0; i < fm->fm_mapped_extents; i++)
        shared |= (fm->fm_extents[i].fe_flags & FIEMAP_EXTENT_SHARED) != 0;
    free(fm);
    close(fd);
    return shared;
}

static void make_base(const char *p, uint8_t *copy)
{
    int fd = open(p, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    ck_assert_int_ge(fd, 0);
    for (size_t i = 0; i < BASE_SIZE; i++)
        copy[i] = (uint8_t)(i * 131u + (i >> 12) * 7u + 1u);
    ck_assert_int_eq(pwrite(fd, copy, BASE_SIZE, 0), (ssize_t)BASE_SIZE);
    ck_assert_int_eq(fsync(fd), 0);
    close(fd);
}

static void file_equals(const char *p, const uint8_t *want, size_t len)
{
    uint8_t *got = malloc(len);
    ck_assert_ptr_nonnull(got);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pread(fd, got, len, 0), (ssize_t)len);
    close(fd);
    ck_assert_msg(!memcmp(got, want, len), "%s differs", p);
    free(got);
}

static void disk_equals(struct ovl_disk *d, const uint8_t *want)
{
    uint8_t *got = malloc(BASE_SIZE);
    ck_assert_ptr_nonnull(got);
    struct iovec v = { got, BASE_SIZE };
    ck_assert_int_eq(ovl_preadv(d, &v, 1, 0), 0);
    ck_assert(!memcmp(got, want, BASE_SIZE));
    free(got);
}

START_TEST(create_reflink_and_write)
{
    static uint8_t base_copy[BASE_SIZE], view[BASE_SIZE];
    char base[128], ovl[128], why[512] = "";
    path(base, sizeof base, "b1");
    path(ovl, sizeof ovl, "o1");
    make_base(base, base_copy);
    enum ovl_kind kind = 0;
    ck_assert_msg(ovl_create(base, ovl, 0, &kind, why, sizeof why) == 0, "%s", why);
    ck_assert_int_eq(kind, OVL_KIND_RAW);
    ck_assert(has_shared_extent(ovl));
    ck_assert(has_shared_extent(base));
    struct ovl_disk *d;
    ck_assert_msg(ovl_open(base, ovl, 0, &d, why, sizeof why) == 0, "%s", why);
    ck_assert_int_eq(ovl_kind_of(d), OVL_KIND_RAW);
    ck_assert_int_ge(ovl_raw_fd(d), 0);
    ck_assert_uint_eq(ovl_size(d), BASE_SIZE);
    disk_equals(d, base_copy);
    /* Write 3 blocks at 1 MiB + 100: the guest's view changes there only. */
    memcpy(view, base_copy, BASE_SIZE);
    uint8_t w[3 * 4096];
    memset(w, 0xa5, sizeof w);
    struct iovec v = { w, sizeof w };
    ck_assert_int_eq(ovl_pwritev(d, &v, 1, (1u << 20) + 100), 0);
    memcpy(view + (1u << 20) + 100, w, sizeof w);
    ck_assert_int_eq(ovl_flush(d), 0);
    disk_equals(d, view);
    /* A clone through the open disk (it holds its exclusive lock). */
    char pin[128];
    path(pin, sizeof pin, "pin1");
    ck_assert_msg(ovl_clone_disk(d, pin, why, sizeof why) == 0, "%s", why);
    ck_assert_int_eq(ovl_clone_disk(d, pin, why, sizeof why), -EEXIST);
    /* ovl_clone of a file an open disk holds is refused (the lock). */
    char other[128];
    path(other, sizeof other, "other1");
    ck_assert_int_lt(ovl_clone(ovl, other, why, sizeof why), 0);
    ck_assert_int_eq(access(other, F_OK), -1);
    ck_assert_int_eq(ovl_close(d), 0);
    file_equals(pin, view, BASE_SIZE);
    ck_assert(has_shared_extent(pin));
    /* The base was never written. */
    file_equals(base, base_copy, BASE_SIZE);
    /* Once closed, ovl_clone reflinks the overlay too. */
    ck_assert_msg(ovl_clone(ovl, other, why, sizeof why) == 0, "%s", why);
    file_equals(other, view, BASE_SIZE);
    ck_assert(has_shared_extent(other));
    /* A clone is independent: writing it leaves the original alone. */
    ck_assert_msg(ovl_open(base, other, 0, &d, why, sizeof why) == 0, "%s", why);
    memset(w, 0x3c, sizeof w);
    ck_assert_int_eq(ovl_pwritev(d, &v, 1, 0), 0);
    ck_assert_int_eq(ovl_close(d), 0);
    file_equals(ovl, view, BASE_SIZE);
    file_equals(pin, view, BASE_SIZE);
}
END_TEST

START_TEST(moat_format_cloned_by_reflink)
{
    static uint8_t base_copy[BASE_SIZE], view[BASE_SIZE];
    char base[128], ovl[128], pin[128], clone[128], why[512] = "";
    path(base, sizeof base, "b2");
    path(ovl, sizeof ovl, "o2");
    path(pin, sizeof pin, "pin2");
    path(clone, sizeof clone, "c2");
    make_base(base, base_copy);
    enum ovl_kind kind = 0;
    ck_assert_msg(ovl_create(base, ovl, OVL_CREATE_NO_REFLINK, &kind, why, sizeof why) == 0, "%s", why);
    ck_assert_int_eq(kind, OVL_KIND_MOAT);
    struct ovl_disk *d;
    ck_assert_msg(ovl_open(base, ovl, 0, &d, why, sizeof why) == 0, "%s", why);
    ck_assert_int_eq(ovl_kind_of(d), OVL_KIND_MOAT);
    memcpy(view, base_copy, BASE_SIZE);
    static uint8_t w[64 * 4096];
    memset(w, 0x77, sizeof w);
    struct iovec v = { w, sizeof w };
    ck_assert_int_eq(ovl_pwritev(d, &v, 1, 4096 * 10 + 7), 0);
    memcpy(view + 4096 * 10 + 7, w, sizeof w);
    /* Not flushed: ovl_clone_disk flushes first, so the pin has it all. */
    ck_assert_msg(ovl_clone_disk(d, pin, why, sizeof why) == 0, "%s", why);
    ck_assert(has_shared_extent(pin));
    ck_assert_int_eq(ovl_close(d), 0);
    ck_assert_msg(ovl_clone(ovl, clone, why, sizeof why) == 0, "%s", why);
    ck_assert(has_shared_extent(clone));
    const char *const files[] = { ovl, pin, clone };
    for (int i = 0; i < 3; i++) {
        ck_assert_msg(ovl_open(base, files[i], OVL_OPEN_READ_ONLY, &d, why, sizeof why) == 0, "%s", why);
        ck_assert_uint_eq(ovl_allocated(d), 65);    /* blocks 10 .. 74 */
        disk_equals(d, view);
        ovl_close(d);
    }
    file_equals(base, base_copy, BASE_SIZE);
}
END_TEST

__attribute__((format(printf, 1, 2)))
static int sh(const char *fmt, ...)
{
    char cmd[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return system(cmd);
}

int main(void)
{
    if (geteuid() != 0) {
        printf("SKIPPED: overlay_reflink: needs root to loop-mount an XFS image\n");
        return 0;
    }
    if (system("PATH=$PATH:/sbin:/usr/sbin command -v mkfs.xfs >/dev/null 2>&1") != 0) {
        printf("SKIPPED: overlay_reflink: mkfs.xfs not installed (xfsprogs; scripts/deps.sh)\n");
        return 0;
    }
    snprintf(mnt, sizeof mnt, "/tmp/moat-reflink-XXXXXX");
    if (!mkdtemp(mnt)) {
        printf("SKIPPED: overlay_reflink: mkdtemp: %s\n", strerror(errno));
        return 0;
    }
    snprintf(img, sizeof img, "%s.img", mnt);
    if (sh("truncate -s 300M %s && PATH=$PATH:/sbin:/usr/sbin mkfs.xfs -q -f -m reflink=1 %s >/dev/null 2>&1",
           img, img) != 0 ||
        sh("mount -o loop %s %s >/dev/null 2>&1", img, mnt) != 0) {
        printf("SKIPPED: overlay_reflink: cannot make or loop-mount an XFS image here\n");
        unlink(img);
        rmdir(mnt);
        return 0;
    }
    Suite *s = suite_create("overlay_reflink");
    TCase *tc = tcase_create("xfs");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, create_reflink_and_write);
    tcase_add_test(tc, moat_format_cloned_by_reflink);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    sh("umount %s", mnt);
    unlink(img);
    rmdir(mnt);
    return failed ? 1 : 0;
}
