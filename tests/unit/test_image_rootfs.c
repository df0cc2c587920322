/* Layers -> ext4 (vmm/image/rootfs.c). Layers are written here with
 * libarchive's writer (owners, devices and xattrs need no privilege that
 * way), converted, and the ext4 is read back with libext2fs and checked
 * by `e2fsck -fn`: owners, modes, setuid, times, xattrs (security.capability
 * included), hardlinks within and across layers, fast and slow symlinks and
 * chains, device nodes, FIFOs, a 1 GiB sparse file and zero-filled blocks
 * kept as holes, PAX long names, non-ASCII names, whiteouts, opaque
 * directories, a file replaced by a directory and back, gzip / zstd / plain
 * layers; hostile layers (../, absolute paths, a file through a symlink
 * pointing out, a hardlink outside or to nothing, a symlink loop, a file
 * under a file, a decompression bomb, too many entries) refused with a
 * message and nothing left behind; the store's cache (two callers at once
 * get one file, read-only; another size, another file; a missing layer). */
#include <archive.h>
#include <archive_entry.h>
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <ext2fs/ext2fs.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vmm/image/rootfs.h"
#include "vmm/image/rootfs_fs.h"
#include "vmm/image/store.h"

/* Entries below name only the fields they need. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

static char dir[256];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/moat-rootfs-test.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* ---- writing layers ---- */

enum filt { PLAIN, GZIP, ZSTD };

static struct archive *layer_open(const char *name, enum filt f, char *path, size_t len)
{
    snprintf(path, len, "%s/%s", dir, name);
    struct archive *a = archive_write_new();
    ck_assert_int_eq(archive_write_set_format_pax(a), ARCHIVE_OK);
    if (f == GZIP)
        ck_assert_int_eq(archive_write_add_filter_gzip(a), ARCHIVE_OK);
    else if (f == ZSTD)
        ck_assert_int_eq(archive_write_add_filter_zstd(a), ARCHIVE_OK);
    ck_assert_int_eq(archive_write_open_filename(a, path), ARCHIVE_OK);
    return a;
}

static void layer_close(struct archive *a)
{
    ck_assert_int_eq(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
}

struct ent {
    const char *path;
    unsigned type;              /* AE_IF*; 0 with hardlink set: a hardlink */
    unsigned perm, uid, gid;
    const char *data;           /* regular file: content; symlink: target */
    const char *hardlink;
    unsigned major, minor;
    long mtime, mtime_ns;
};

static struct archive_entry *mk(const struct ent *x)
{
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, x->path);
    archive_entry_set_filetype(e, x->type ? x->type : AE_IFREG);
    archive_entry_set_perm(e, x->perm ? x->perm : (x->type == AE_IFDIR ? 0755 : 0644));
    archive_entry_set_uid(e, x->uid);
    archive_entry_set_gid(e, x->gid);
    archive_entry_set_mtime(e, x->mtime ? x->mtime : 1700000000, x->mtime_ns);
    if (x->hardlink)
        archive_entry_set_hardlink(e, x->hardlink);
    if (x->type == AE_IFLNK)
        archive_entry_set_symlink(e, x->data);
    if (x->type == AE_IFCHR || x->type == AE_IFBLK) {
        archive_entry_set_rdevmajor(e, x->major);
        archive_entry_set_rdevminor(e, x->minor);
    }
    if ((!x->type || x->type == AE_IFREG) && x->data && !x->hardlink)
        archive_entry_set_size(e, (la_int64_t)strlen(x->data));
    else
        archive_entry_set_size(e, 0);
    return e;
}

static void put_entry(struct archive *a, struct archive_entry *e, const char *data)
{
    /* ARCHIVE_WARN: a non-ASCII name in the C locale, written as bytes. */
    ck_assert_int_ge(archive_write_header(a, e), ARCHIVE_WARN);
    if (data && archive_entry_size(e) > 0)
        ck_assert_int_eq(archive_write_data(a, data, strlen(data)), (la_ssize_t)strlen(data));
    archive_entry_free(e);
}

static void put(struct archive *a, const struct ent *x)
{
    put_entry(a, mk(x), x->data);
}

/* A regular file's entry of size bytes (its data written by the caller). */
static struct archive_entry *big_entry(const char *path, long long size)
{
    struct archive_entry *e = mk(&(struct ent){ path, AE_IFREG });
    archive_entry_set_size(e, size);
    return e;
}

/* A layer of the given entries (terminated by a NULL path). */
static void layer(const char *name, enum filt f, char *path, size_t len, const struct ent *xs)
{
    struct archive *a = layer_open(name, f, path, len);
    for (; xs->path; xs++)
        put(a, xs);
    layer_close(a);
}

/* ---- converting ---- */

static int convert(const char *out, const struct img_rootfs_opts *o, struct img_err *err, unsigned n, ...)
{
    struct img_layer_in l[8];
    va_list ap;
    va_start(ap, n);
    for (unsigned i = 0; i < n; i++)
        l[i] = (struct img_layer_in){ va_arg(ap, const char *), IMG_COMP_NONE };
    va_end(ap);
    memset(err, 0, sizeof *err);
    struct img_rootfs_stats st;
    struct img_rootfs_opts def = { .disk_size = 64ull << 20 };
    return img_rootfs_build(l, n, out, o ? o : &def, &st, err);
}

static void fsck_clean(const char *img)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "e2fsck -fn '%s' >'%s/fsck.log' 2>&1", img, dir);
    int rc = system(cmd);
    if (rc != 0) {
        snprintf(cmd, sizeof cmd, "cat '%s/fsck.log' >&2", dir);
        ck_assert_int_eq(system(cmd), 0);
    }
    ck_assert_msg(rc == 0, "e2fsck -fn %s: not clean", img);
}

/* Nothing but the layers in dir: no image, no temporary file. */
static void nothing_left(void)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    struct dirent *de;
    while ((de = readdir(d)))
        ck_assert_msg(de->d_name[0] == '.' || strstr(de->d_name, ".tar") || !strcmp(de->d_name, "fsck.log"),
                      "left behind: %s", de->d_name);
    closedir(d);
}

/* ---- reading the ext4 ---- */

static ext2_filsys fs_open(const char *img)
{
    ext2_filsys fs;
    ck_assert_int_eq(ext2fs_open(img, 0, 0, 0, unix_io_manager, &fs), 0);
    return fs;
}

/* The inode at path (last component not followed); 0 if none. */
static ext2_ino_t ino_of(ext2_filsys fs, const char *path, struct ext2_inode_large *in)
{
    ext2_ino_t ino;
    if (ext2fs_namei(fs, EXT2_ROOT_INO, EXT2_ROOT_INO, path, &ino))
        return 0;
    memset(in, 0, sizeof *in);
    ck_assert_int_eq(ext2fs_read_inode_full(fs, ino, (struct ext2_inode *)in, sizeof *in), 0);
    return ino;
}

static char *content(ext2_filsys fs, const char *path, size_t *len)
{
    struct ext2_inode_large in;
    ext2_ino_t ino = ino_of(fs, path, &in);
    ck_assert_msg(ino, "%s missing", path);
    ext2_file_t f;
    ck_assert_int_eq(ext2fs_file_open(fs, ino, 0, &f), 0);
    size_t size = in.i_size;
    char *buf = calloc(1, size + 1);
    unsigned got = 0;
    ck_assert_int_eq(ext2fs_file_read(f, buf, (unsigned)size, &got), 0);
    ck_assert_uint_eq(got, size);
    ext2fs_file_close(f);
    *len = size;
    return buf;
}

static void has_content(ext2_filsys fs, const char *path, const char *want)
{
    size_t len;
    char *got = content(fs, path, &len);
    ck_assert_uint_eq(len, strlen(want));
    ck_assert_str_eq(got, want);
    free(got);
}

static void absent(ext2_filsys fs, const char *path)
{
    struct ext2_inode_large in;
    ck_assert_msg(!ino_of(fs, path, &in), "%s should be gone", path);
}

static char *symlink_target(ext2_filsys fs, const char *path)
{
    struct ext2_inode_large in;
    ext2_ino_t ino = ino_of(fs, path, &in);
    ck_assert_msg(ino && LINUX_S_ISLNK(in.i_mode), "%s is no symlink", path);
    if (in.i_size < sizeof in.i_block)
        return strndup((char *)in.i_block, in.i_size);
    size_t len;
    return content(fs, path, &len);
}

static void xattr_is(ext2_filsys fs, const char *path, const char *key, const void *val, size_t len)
{
    struct ext2_inode_large in;
    ext2_ino_t ino = ino_of(fs, path, &in);
    ck_assert(ino);
    struct ext2_xattr_handle *h;
    ck_assert_int_eq(ext2fs_xattrs_open(fs, ino, &h), 0);
    ck_assert_int_eq(ext2fs_xattrs_read(h), 0);
    void *got = NULL;
    size_t glen = 0;
    ck_assert_msg(ext2fs_xattr_get(h, key, &got, &glen) == 0, "%s: no xattr %s", path, key);
    ck_assert_uint_eq(glen, len);
    ck_assert_int_eq(memcmp(got, val, len), 0);
    free(got);
    ext2fs_xattrs_close(&h);
}

/* ---- the tests ---- */

static const char CAP[] = "\x01\x00\x00\x02\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00";

static void entries_of_one_layer(struct archive *a, const char *long1, const char *long2)
{
    static const char slow[] = "/a/very/long/target/that/does/not/fit/in/the/inode/sixty/bytes/of/i_block/xyz";
    put(a, &(struct ent){ "./", AE_IFDIR, 0755, 0, 0, .mtime = 1600000000 });
    put(a, &(struct ent){ "./etc/", AE_IFDIR, 0711, 1000, 2000, .mtime = 1234567890, .mtime_ns = 500000000 });
    put(a, &(struct ent){ "./etc/hosts", AE_IFREG, 0640, 1000, 2000, "127.0.0.1 localhost\n" });
    put(a, &(struct ent){ "bin/", AE_IFDIR });
    struct archive_entry *e = mk(&(struct ent){ "bin/ping", AE_IFREG, 04755, 0, 0, "ELF" });
    archive_entry_xattr_add_entry(e, "security.capability", CAP, sizeof CAP - 1);
    archive_entry_xattr_add_entry(e, "user.note", "hi", 2);
    archive_entry_xattr_add_entry(e, "trusted.t", "\0\1\2", 3);
    put_entry(a, e, "ELF");
    put(a, &(struct ent){ "bin/ping2", .hardlink = "bin/ping" });
    put(a, &(struct ent){ "tmp/", AE_IFDIR, 01777, 0, 0 });
    put(a, &(struct ent){ "sgid", AE_IFDIR, 02775, 0, 50 });
    put(a, &(struct ent){ "fast", AE_IFLNK, 0777, 0, 0, "etc/hosts" });
    put(a, &(struct ent){ "slow", AE_IFLNK, 0777, 0, 0, slow });
    put(a, &(struct ent){ "dev/null", AE_IFCHR, 0666, 0, 0, .major = 1, .minor = 3 });
    put(a, &(struct ent){ "dev/sda", AE_IFBLK, 0660, 0, 6, .major = 8, .minor = 0 });
    put(a, &(struct ent){ "dev/big", AE_IFCHR, 0600, 0, 0, .major = 300, .minor = 70000 });
    put(a, &(struct ent){ "run/fifo", AE_IFIFO, 0620, 7, 8 });
    put(a, &(struct ent){ long1, AE_IFREG, 0644, 0, 0, "long1" });
    put(a, &(struct ent){ long2, AE_IFREG, 0644, 0, 0, "long2" });
    put(a, &(struct ent){ "h\xc3\xa9llo w\xc3\xb6rld \xe2\x98\x83", AE_IFREG, 0644, 0, 0, "utf8" });
    put(a, &(struct ent){ "big-ids", AE_IFREG, 0644, 100000, 3000000000u, "ids" });
}

static void check_one_layer(ext2_filsys fs, const char *long1, const char *long2)
{
    struct ext2_inode_large in;
    ck_assert(ino_of(fs, "etc", &in));
    ck_assert_uint_eq(in.i_mode, LINUX_S_IFDIR | 0711);
    ck_assert_uint_eq(in.i_uid, 1000);
    ck_assert_uint_eq(in.i_gid, 2000);
    ck_assert_uint_eq(in.i_mtime, 1234567890);
    ck_assert_uint_eq(in.i_mtime_extra >> 2, 500000000);
    ck_assert_uint_eq(in.i_atime, 1234567890);          /* as mtime: the tar has none */
    ck_assert(ino_of(fs, "", &in));
    ck_assert_uint_eq(in.i_mtime, 1600000000);          /* "./" sets the root's */
    has_content(fs, "etc/hosts", "127.0.0.1 localhost\n");
    ck_assert(ino_of(fs, "etc/hosts", &in));
    ck_assert_uint_eq(in.i_mode, LINUX_S_IFREG | 0640);
    ext2_ino_t ping = ino_of(fs, "bin/ping", &in);
    ck_assert_uint_eq(in.i_mode, LINUX_S_IFREG | 04755);
    ck_assert_uint_eq(in.i_links_count, 2);
    ck_assert_uint_eq(ino_of(fs, "bin/ping2", &in), ping);
    xattr_is(fs, "bin/ping", "security.capability", CAP, sizeof CAP - 1);
    xattr_is(fs, "bin/ping", "user.note", "hi", 2);
    xattr_is(fs, "bin/ping", "trusted.t", "\0\1\2", 3);
    ck_assert(ino_of(fs, "tmp", &in));
    ck_assert_uint_eq(in.i_mode, LINUX_S_IFDIR | 01777);
    ck_assert(ino_of(fs, "sgid", &in));
    ck_assert_uint_eq(in.i_mode, LINUX_S_IFDIR | 02775);
    char *t = symlink_target(fs, "fast");
    ck_assert_str_eq(t, "etc/hosts");
    free(t);
    t = symlink_target(fs, "slow");
    ck_assert_str_eq(t, "/a/very/long/target/that/does/not/fit/in/the/inode/sixty/bytes/of/i_block/xyz");
    free(t);
    ck_assert(ino_of(fs, "dev/null", &in));
    ck_assert_uint_eq(in.i_mode, LINUX_S_IFCHR | 0666);
    ck_assert_uint_eq(in.i_block[0], 1 * 256 + 3);
    ck_assert(ino_of(fs, "dev/sda", &in));
    ck_assert_uint_eq(in.i_mode, LINUX_S_IFBLK | 0660);
    ck_assert_uint_eq(in.i_block[0], 8 * 256);
    ck_assert(ino_of(fs, "dev/big", &in));
    ck_assert_uint_eq(in.i_block[1], (70000u & 0xff) | (300u << 8) | ((70000u & ~0xffu) << 12));
    ck_assert(ino_of(fs, "run/fifo", &in));
    ck_assert_uint_eq(in.i_mode, LINUX_S_IFIFO | 0620);
    ck_assert_uint_eq(in.i_uid, 7);
    has_content(fs, long1, "long1");
    has_content(fs, long2, "long2");
    has_content(fs, "h\xc3\xa9llo w\xc3\xb6rld \xe2\x98\x83", "utf8");
    ck_assert(ino_of(fs, "big-ids", &in));
    ck_assert_uint_eq(in.i_uid | (uint32_t)in.osd2.linux2.l_i_uid_high << 16, 100000);
    ck_assert_uint_eq(in.i_gid | (uint32_t)in.osd2.linux2.l_i_gid_high << 16, 3000000000u);
}

START_TEST(one_layer_everything)
{
    char long1[300], long2[600], lp[512], img[512];
    /* > 100 bytes (ustar's name field) and > 255 (a PAX path record). */
    snprintf(long1, sizeof long1, "deep/%0120d/file", 0);
    snprintf(long2, sizeof long2, "deep/%0200d/%0200d/f", 1, 2);
    for (enum filt f = PLAIN; f <= ZSTD; f++) {
        snprintf(img, sizeof img, "%s/root%d.ext4", dir, f);
        struct archive *a = layer_open("one.tar", f, lp, sizeof lp);
        entries_of_one_layer(a, long1, long2);
        layer_close(a);
        struct img_err err;
        int rc = convert(img, NULL, &err, 1, lp);
        ck_assert_msg(rc == 0, "%s", err.msg);
        fsck_clean(img);
        ext2_filsys fs = fs_open(img);
        check_one_layer(fs, long1, long2);
        ext2fs_close_free(&fs);
    }
}
END_TEST

START_TEST(layers_in_order)
{
    char l1[512], l2[512], l3[512], img[512];
    layer("l1.tar", GZIP, l1, sizeof l1, (const struct ent[]){
        { "a/f1", AE_IFREG, 0644, 0, 0, "f1" }, { "a/f2", AE_IFREG, 0644, 0, 0, "f2" },
        { "d/sub/x", AE_IFREG, 0644, 0, 0, "x" }, { "d/keep", AE_IFREG, 0644, 0, 0, "old" },
        { "e", AE_IFREG, 0644, 0, 0, "a file" }, { "r/child/deeper", AE_IFREG, 0644, 0, 0, "c" },
        { "t", AE_IFREG, 0600, 5, 5, "target" }, { "s1", AE_IFLNK, 0777, 0, 0, "s2" },
        { "s2", AE_IFLNK, 0777, 0, 0, "/a" }, { "etc/", AE_IFDIR }, { "up", AE_IFLNK, 0777, 0, 0, "../../../.." },
        { "gone/deep/tree/file", AE_IFREG, 0644, 0, 0, "g" }, { NULL } });
    layer("l2.tar", ZSTD, l2, sizeof l2, (const struct ent[]){
        { "a/.wh.f1", AE_IFREG }, { "d/", AE_IFDIR, 0700 }, { "d/.wh..wh..opq", AE_IFREG },
        { "d/keep", AE_IFREG, 0644, 0, 0, "new" }, { "e/", AE_IFDIR }, { "e/inside", AE_IFREG, 0644, 0, 0, "in" },
        { "r", AE_IFREG, 0644, 0, 0, "was a dir" }, { "h", .hardlink = "t" },
        { "s1/through", AE_IFREG, 0644, 0, 0, "via chain" }, { "up/escaped", AE_IFREG, 0644, 0, 0, "inside" },
        { ".wh.gone", AE_IFREG }, { "a/.wh.never-was", AE_IFREG }, { "nodir/.wh.x", AE_IFREG }, { NULL } });
    layer("l3.tar", PLAIN, l3, sizeof l3, (const struct ent[]){
        { "e", AE_IFREG, 0644, 0, 0, "a file again" }, { "d/sub/", AE_IFDIR }, { "h2", .hardlink = "h" },
        { NULL } });
    snprintf(img, sizeof img, "%s/root.ext4", dir);
    struct img_err err;
    int rc = convert(img, NULL, &err, 3, l1, l2, l3);
    ck_assert_msg(rc == 0, "%s", err.msg);
    fsck_clean(img);
    ext2_filsys fs = fs_open(img);
    struct ext2_inode_large in;
    absent(fs, "a/f1");
    has_content(fs, "a/f2", "f2");
    absent(fs, "d/sub/x");                              /* opaque d: l1's content gone */
    has_content(fs, "d/keep", "new");
    ck_assert(ino_of(fs, "d", &in));
    ck_assert_uint_eq(in.i_mode, LINUX_S_IFDIR | 0700);
    ck_assert(ino_of(fs, "d/sub", &in));                /* l3 made it again, empty */
    has_content(fs, "e", "a file again");               /* file -> dir -> file */
    absent(fs, "e/inside");
    has_content(fs, "r", "was a dir");                  /* dir -> file: its tree freed */
    ext2_ino_t t = ino_of(fs, "t", &in);
    ck_assert_uint_eq(in.i_links_count, 3);             /* t, h (across layers), h2 */
    ck_assert_uint_eq(ino_of(fs, "h", &in), t);
    ck_assert_uint_eq(ino_of(fs, "h2", &in), t);
    has_content(fs, "a/through", "via chain");          /* s1 -> s2 -> /a inside the image */
    has_content(fs, "escaped", "inside");               /* ../../.. stops at the image's root */
    absent(fs, "gone");
    ext2fs_close_free(&fs);
    ck_assert_int_eq(access("/escaped", F_OK), -1);     /* nothing reached the host */
}
END_TEST

START_TEST(sparse_and_zeros)
{
    char lp[512], img[512];
    struct archive *a = layer_open("sparse.tar", GZIP, lp, sizeof lp);
    /* 1 GiB with 4 KiB of data at 512 MiB (a PAX sparse entry). */
    struct archive_entry *e = big_entry("sparse", 1ll << 30);
    archive_entry_sparse_add_entry(e, 512ll << 20, 4096);
    ck_assert_int_eq(archive_write_header(a, e), ARCHIVE_OK);
    /* The writer takes the whole logical content and drops the holes. */
    char *mib = calloc(1, 1 << 20);
    for (int i = 0; i < 1024; i++) {
        memset(mib, i == 512 ? 'S' : 0, 4096);
        ck_assert_int_eq(archive_write_data(a, mib, 1 << 20), 1 << 20);
    }
    free(mib);
    archive_entry_free(e);
    /* 32 MiB of zeros then "end": written as a hole and one block. */
    e = big_entry("zeros", (32 << 20) + 3);
    ck_assert_int_eq(archive_write_header(a, e), ARCHIVE_OK);
    char *z = calloc(1, 1 << 20);
    for (int i = 0; i < 32; i++)
        ck_assert_int_eq(archive_write_data(a, z, 1 << 20), 1 << 20);
    ck_assert_int_eq(archive_write_data(a, "end", 3), 3);
    free(z);
    archive_entry_free(e);
    layer_close(a);
    snprintf(img, sizeof img, "%s/root.ext4", dir);
    struct img_err err;
    struct img_rootfs_opts o = { .disk_size = 2ull << 30 };
    int rc = convert(img, &o, &err, 1, lp);
    ck_assert_msg(rc == 0, "%s", err.msg);
    fsck_clean(img);
    struct stat st;
    ck_assert_int_eq(stat(img, &st), 0);
    ck_assert_uint_eq((uint64_t)st.st_size, 2ull << 30);
    ck_assert_uint_lt((uint64_t)st.st_blocks * 512, 16ull << 20);  /* the image file stays small */
    ext2_filsys fs = fs_open(img);
    struct ext2_inode_large in;
    ext2_ino_t ino = ino_of(fs, "sparse", &in);
    ck_assert(ino);
    ck_assert_uint_eq(EXT2_I_SIZE(&in), 1ull << 30);
    ck_assert_uint_le(in.i_blocks, 64);                 /* 512-byte units: a block or two */
    ext2_file_t f;
    ck_assert_int_eq(ext2fs_file_open(fs, ino, 0, &f), 0);
    char got[8192];
    unsigned n = 0;
    ck_assert_int_eq(ext2fs_file_llseek(f, (512ull << 20) - 4096, EXT2_SEEK_SET, NULL), 0);
    ck_assert_int_eq(ext2fs_file_read(f, got, sizeof got, &n), 0);
    ck_assert_uint_eq(n, sizeof got);
    for (int i = 0; i < 4096; i++)
        ck_assert(got[i] == 0 && got[4096 + i] == 'S');
    ext2fs_file_close(f);
    ck_assert(ino_of(fs, "zeros", &in));
    ck_assert_uint_eq(EXT2_I_SIZE(&in), (32u << 20) + 3);
    ck_assert_uint_le(in.i_blocks, 64);
    ext2fs_close_free(&fs);
}
END_TEST

/* A layer of the entries refused: the conversion fails, err says why
 * (containing want), nothing is left in dir. */
static void refused(const struct ent *xs, const char *want)
{
    char lp[512], img[512];
    layer("bad.tar", GZIP, lp, sizeof lp, xs);
    snprintf(img, sizeof img, "%s/root.ext4", dir);
    struct img_err err;
    int rc = convert(img, NULL, &err, 1, lp);
    ck_assert_int_lt(rc, 0);
    ck_assert_int_eq(err.code, rc);
    ck_assert_msg(strstr(err.msg, want), "want \"%s\" in: %s", want, err.msg);
    ck_assert_msg(strstr(err.msg, "layer 1"), "no layer named in: %s", err.msg);
    nothing_left();
    unlink(lp);
}

/* An xattr name Linux cannot hold (over 255 bytes) is refused, not cut
 * to what ext4's one-byte length keeps. */
START_TEST(xattr_limits)
{
    char lp[512], img[512], name[300];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    memcpy(name, "user.", 5);
    struct archive *a = layer_open("xattr.tar", GZIP, lp, sizeof lp);
    struct archive_entry *e = mk(&(struct ent){ "f", AE_IFREG, 0644, 0, 0, "x" });
    archive_entry_xattr_add_entry(e, name, "v", 1);
    put_entry(a, e, "x");
    layer_close(a);
    snprintf(img, sizeof img, "%s/root.ext4", dir);
    struct img_err err;
    int rc = convert(img, NULL, &err, 1, lp);
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_msg(strstr(err.msg, "a name of 299 bytes"), "%s", err.msg);
    nothing_left();
    unlink(lp);
}
END_TEST

/* The set of a layer's applied paths stops at its memory limit. */
START_TEST(path_set_limit)
{
    struct rfs_pset p = { .max_bytes = 64 << 10 };
    char path[1100];
    int rc = 0, i;
    memset(path, 'a', 1000);
    for (i = 0; i < 1000 && rc == 0; i++) {
        snprintf(path + 1000, 100, "/%d", i);
        rc = rfs_pset_add(&p, path);
    }
    ck_assert_int_eq(rc, -E2BIG);
    ck_assert_int_gt(i, 40);                    /* ~1 KiB each: about 60 fit */
    ck_assert_int_lt(i, 70);
    ck_assert_uint_le(p.bytes, 64 << 10);
    snprintf(path + 1000, 100, "/%d", 0);
    ck_assert(rfs_pset_has(&p, path));
    ck_assert_int_eq(rfs_pset_add(&p, path), 0);    /* one there: no more memory */
    rfs_pset_clear(&p);
    ck_assert_uint_eq(p.bytes, 0);
    ck_assert_int_eq(rfs_pset_add(&p, path), 0);
    rfs_pset_clear(&p);
}
END_TEST

START_TEST(hostile)
{
    refused((const struct ent[]){ { "ok", AE_IFREG, 0, 0, 0, "x" }, { "../evil", AE_IFREG, 0, 0, 0, "x" }, { NULL } },
            "\"..\" component");
    refused((const struct ent[]){ { "a/../../evil", AE_IFREG, 0, 0, 0, "x" }, { NULL } }, "\"..\" component");
    refused((const struct ent[]){ { "/etc/evil", AE_IFREG, 0, 0, 0, "x" }, { NULL } }, "absolute");
    refused((const struct ent[]){ { "h", .hardlink = "../../etc/passwd" }, { NULL } }, "\"..\" component");
    refused((const struct ent[]){ { "h", .hardlink = "/etc/passwd" }, { NULL } }, "absolute");
    refused((const struct ent[]){ { "h", .hardlink = "nothing/here" }, { NULL } }, "is in no layer so far");
    refused((const struct ent[]){ { "d/", AE_IFDIR }, { "h", .hardlink = "d" }, { NULL } }, "is a directory");
    refused((const struct ent[]){ { "f", AE_IFREG, 0, 0, 0, "x" }, { "f/x", AE_IFREG, 0, 0, 0, "x" }, { NULL } },
            "is not a directory");
    refused((const struct ent[]){ { "dl", AE_IFLNK, 0777, 0, 0, "/nowhere" }, { "dl/x", AE_IFREG, 0, 0, 0, "x" },
                                  { NULL } },
            "resolves to nothing in the image");
    refused((const struct ent[]){ { "l1", AE_IFLNK, 0777, 0, 0, "l2" }, { "l2", AE_IFLNK, 0777, 0, 0, "l1" },
                                  { "l1/x", AE_IFREG, 0, 0, 0, "x" }, { NULL } },
            "resolves to nothing in the image");
    refused((const struct ent[]){ { "a/.wh.", AE_IFREG }, { NULL } }, "names no entry");
}
END_TEST

START_TEST(symlink_then_file_through_it)
{
    /* The symlink points out of the image; the file lands inside it. */
    char lp[512], img[512];
    layer("l.tar", GZIP, lp, sizeof lp, (const struct ent[]){
        { "etc/", AE_IFDIR }, { "evil", AE_IFLNK, 0777, 0, 0, "/etc" },
        { "evil/moat-rootfs-test-passwd", AE_IFREG, 0, 0, 0, "owned?" },
        { "out", AE_IFLNK, 0777, 0, 0, "../../../../../../tmp" }, { NULL } });
    snprintf(img, sizeof img, "%s/root.ext4", dir);
    struct img_err err;
    int rc = convert(img, NULL, &err, 1, lp);
    ck_assert_msg(rc == 0, "%s", err.msg);
    ck_assert_int_eq(access("/etc/moat-rootfs-test-passwd", F_OK), -1);
    ext2_filsys fs = fs_open(img);
    has_content(fs, "etc/moat-rootfs-test-passwd", "owned?");
    ext2fs_close_free(&fs);
    fsck_clean(img);
}
END_TEST

START_TEST(too_many_entries)
{
    char lp[512], img[512];
    struct archive *a = layer_open("many.tar", PLAIN, lp, sizeof lp);
    for (int i = 0; i < 50; i++) {
        char p[32];
        snprintf(p, sizeof p, "f%d", i);
        put(a, &(struct ent){ p, AE_IFREG, 0644, 0, 0, "x" });
    }
    layer_close(a);
    snprintf(img, sizeof img, "%s/root.ext4", dir);
    struct img_err err;
    struct img_rootfs_opts o = { .disk_size = 64 << 20, .limits = { .max_entries_layer = 20 } };
    ck_assert_int_eq(convert(img, &o, &err, 1, lp), -E2BIG);
    ck_assert_ptr_nonnull(strstr(err.msg, "more than 20 entries"));
    nothing_left();
    o.limits = (struct img_tar_limits){ .max_entries_total = 70 };
    ck_assert_int_eq(convert(img, &o, &err, 2, lp, lp), -E2BIG);    /* 50 + 50 */
    ck_assert_ptr_nonnull(strstr(err.msg, "the layers have more than 70 entries"));
    nothing_left();
    o.limits = (struct img_tar_limits){ 0 };
    ck_assert_int_eq(convert(img, &o, &err, 2, lp, lp), 0);
    fsck_clean(img);
}
END_TEST

START_TEST(bomb)
{
    /* 10 GiB of zeros, zstd: a few hundred KiB on disk. The limit is the
     * disk's size (1 GiB here) when none is given. */
    char lp[512], img[512];
    struct archive *a = layer_open("bomb.tar", ZSTD, lp, sizeof lp);
    struct archive_entry *e = big_entry("zeros", 10ll << 30);
    ck_assert_int_eq(archive_write_header(a, e), ARCHIVE_OK);
    size_t chunk = 4 << 20;
    char *z = calloc(1, chunk);
    for (long long done = 0; done < (10ll << 30); done += (long long)chunk)
        ck_assert_int_eq(archive_write_data(a, z, chunk), (la_ssize_t)chunk);
    free(z);
    archive_entry_free(e);
    layer_close(a);
    struct stat st;
    ck_assert_int_eq(stat(lp, &st), 0);
    ck_assert_int_lt(st.st_size, 2 << 20);
    snprintf(img, sizeof img, "%s/root.ext4", dir);
    struct img_err err;
    struct img_rootfs_opts o = { .disk_size = 1ull << 30 };
    ck_assert_int_eq(convert(img, &o, &err, 1, lp), -EFBIG);
    ck_assert_msg(strstr(err.msg, "decompression bomb"), "%s", err.msg);
    ck_assert_msg(strstr(err.msg, "1073741824"), "%s", err.msg);
    nothing_left();
}
END_TEST

START_TEST(bad_inputs)
{
    char img[512], lp[512];
    snprintf(img, sizeof img, "%s/root.ext4", dir);
    snprintf(lp, sizeof lp, "%s/missing.tar", dir);
    struct img_err err;
    ck_assert_int_eq(convert(img, NULL, &err, 1, lp), -ENOENT);
    /* Not a tar at all. */
    snprintf(lp, sizeof lp, "%s/garbage.tar", dir);
    FILE *f = fopen(lp, "w");
    for (int i = 0; i < 4096; i++)
        fputc((i * 7919) & 0xff, f);
    fclose(f);
    ck_assert_int_lt(convert(img, NULL, &err, 1, lp), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "layer 1"));
    nothing_left();
    /* A truncated gzip layer. */
    char good[512];
    layer("t.tar", GZIP, good, sizeof good, (const struct ent[]){ { "a", AE_IFREG, 0, 0, 0, "aaaa" }, { NULL } });
    ck_assert_int_eq(truncate(good, 30), 0);
    ck_assert_int_lt(convert(img, NULL, &err, 1, good), 0);
    nothing_left();
    /* A disk too small for its content. */
    struct archive *a = layer_open("big.tar", PLAIN, good, sizeof good);
    char *data = malloc((24 << 20) + 1);
    memset(data, 'x', 24 << 20);
    data[24 << 20] = '\0';
    put(a, &(struct ent){ "big", AE_IFREG, 0644, 0, 0, data });
    free(data);
    layer_close(a);
    struct img_rootfs_opts o = { .disk_size = 16 << 20, .limits = { .max_bytes = 1ull << 30 } };
    ck_assert_int_eq(convert(img, &o, &err, 1, good), -ENOSPC);
    ck_assert_ptr_nonnull(strstr(err.msg, "--disk-size"));
    nothing_left();
}
END_TEST

START_TEST(default_size)
{
    ck_assert_uint_eq(img_rootfs_default_size(0), IMG_ROOTFS_MIN_SIZE);
    ck_assert_uint_eq(img_rootfs_default_size(1ull << 30), (2ull << 30) + (8ull << 30));
    ck_assert_uint_eq(img_rootfs_default_size(~0ull), 16ull << 40);
}
END_TEST

/* The store's cache: an image of one layer put in a store of the test's. */
struct getter {
    struct img_store *s;
    const struct img_image *im;
    char path[4096];
    struct img_err err;
    int rc;
};

static void *get_root(void *arg)
{
    struct getter *g = arg;
    g->rc = img_rootfs_get(g->s, g->im, 0, g->path, sizeof g->path, &g->err);
    return NULL;
}

static void image_of_layer(struct img_store *s, struct img_image *im, const char *layer_path)
{
    FILE *f = fopen(layer_path, "rb");
    ck_assert_ptr_nonnull(f);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    memset(im, 0, sizeof *im);
    struct img_err err = { 0 };
    img_sha256(buf, n, im->manifest.layer[0].digest);
    ck_assert_int_eq(img_blob_put(s, im->manifest.layer[0].digest, buf, n, &err), 0);
    im->manifest.layer[0].comp = IMG_COMP_GZIP;
    im->manifest.nlayer = 1;
    img_sha256("{}", 2, im->config_digest);
    /* The manifest digest names the cached root: one per layer here. */
    img_sha256(im->manifest.layer[0].digest, strlen(im->manifest.layer[0].digest), im->manifest_digest);
}

START_TEST(cache)
{
    char lp[512], home[512];
    layer("c.tar", GZIP, lp, sizeof lp, (const struct ent[]){ { "etc/os", AE_IFREG, 0644, 0, 0, "cached" },
                                                              { NULL } });
    snprintf(home, sizeof home, "%s/home", dir);
    struct img_store s;
    struct img_err err = { 0 };
    ck_assert_int_eq(img_store_open(&s, home, &err), 0);
    struct img_image im;
    image_of_layer(&s, &im, lp);
    /* Two at once: one builds, the other waits and gets the same file. */
    struct getter g[2] = { { &s, &im }, { &s, &im } };
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, get_root, &g[i]), 0);
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        ck_assert_msg(g[i].rc == 0, "%s", g[i].err.msg);
    }
    ck_assert_str_eq(g[0].path, g[1].path);
    char want[1024];
    snprintf(want, sizeof want, "%s/images/rootfs/%.64s.ext4", home, im.manifest_digest + 7);
    ck_assert_str_eq(g[0].path, want);
    struct stat st;
    ck_assert_int_eq(stat(want, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0444);
    ext2_filsys fs = fs_open(want);
    has_content(fs, "etc/os", "cached");
    ext2fs_close_free(&fs);
    char rdir[1024];
    snprintf(rdir, sizeof rdir, "%s/images/rootfs", home);
    DIR *d = opendir(rdir);
    int files = 0;
    for (struct dirent *de; (de = readdir(d));)
        files += de->d_name[0] != '.';
    closedir(d);
    ck_assert_int_eq(files, 1);                         /* no temporary file left */
    /* Again: the cached file, untouched. */
    char again[4096];
    ck_assert_int_eq(img_rootfs_get(&s, &im, 0, again, sizeof again, &err), 0);
    struct stat st2;
    ck_assert_int_eq(stat(again, &st2), 0);
    ck_assert_uint_eq(st2.st_ino, st.st_ino);
    /* A size of its own: another file, HEX.SIZE.ext4. */
    ck_assert_int_eq(img_rootfs_get(&s, &im, 100 << 20, again, sizeof again, &err), 0);
    ck_assert_ptr_nonnull(strstr(again, ".104857600.ext4"));
    /* A layer not in the store: -ENOENT, nothing made. */
    memset(&err, 0, sizeof err);
    img_sha256("other", 5, im.manifest.layer[0].digest);
    img_sha256("{\"x\":1}", 7, im.config_digest);
    img_sha256("other manifest", 14, im.manifest_digest);
    ck_assert_int_eq(img_rootfs_get(&s, &im, 0, again, sizeof again, &err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err.msg, "not in the store"));
    ck_assert_int_ne(access(again, F_OK), 0);
    img_store_close(&s);
}
END_TEST



START_TEST(cache_key_covers_layers)
{
    /* Two images with one config blob but other layers (the config's
     * diff_ids are checked nowhere on pull or OCI import): the second must
     * not get the first one's root from the cache. */
    char l1[512], l2[512], home[512];
    layer("one.tar", GZIP, l1, sizeof l1,
          (const struct ent[]){ { "etc/os", AE_IFREG, 0644, 0, 0, "trusted" }, { NULL } });
    layer("two.tar", GZIP, l2, sizeof l2,
          (const struct ent[]){ { "etc/os", AE_IFREG, 0644, 0, 0, "evil" }, { NULL } });
    snprintf(home, sizeof home, "%s/home", dir);
    struct img_store s;
    struct img_err err = { 0 };
    ck_assert_int_eq(img_store_open(&s, home, &err), 0);
    static struct img_image evil, trusted;
    image_of_layer(&s, &evil, l2);
    image_of_layer(&s, &trusted, l1);
    char p1[4096], p2[4096];
    ck_assert_int_eq(img_rootfs_get(&s, &evil, 0, p1, sizeof p1, &err), 0);
    ck_assert_int_eq(img_rootfs_get(&s, &trusted, 0, p2, sizeof p2, &err), 0);
    ext2_filsys fs = fs_open(p2);
    has_content(fs, "etc/os", "trusted");
    ext2fs_close_free(&fs);
    img_store_close(&s);
}
END_TEST

START_TEST(hardlink_into_replaced_dir)
{
    /* "d" replaced by a hardlink to "d/f": removing d frees f's inode
     * before the link is made to it. Refused, or a clean file system. */
    char lp[512], img[512];
    layer("h.tar", PLAIN, lp, sizeof lp, (const struct ent[]){
        { "d/", AE_IFDIR }, { "d/f", AE_IFREG, 0644, 0, 0, "x" }, { "d", .hardlink = "d/f" },
        { "g", AE_IFREG, 0644, 0, 0, "new file reusing the inode?" }, { NULL } });
    snprintf(img, sizeof img, "%s/root.ext4", dir);
    struct img_err err;
    ck_assert_int_eq(convert(img, NULL, &err, 1, lp), -ENOENT);
    ck_assert_msg(strstr(err.msg, "is in no layer so far"), "%s", err.msg);
    nothing_left();
}
END_TEST

START_TEST(deep_tree_removed)
{
    /* A tree far deeper than a path can name, made through symlinks
     * ("x" in each level's deepest directory leads 1000 further), then
     * whited out: its removal must not recurse once per level. */
    char lp[512], img[512];
    struct archive *a = layer_open("deep.tar", PLAIN, lp, sizeof lp);
    static char path[4096], target[2100];
    target[0] = 0;
    for (int i = 0; i < 1000; i++)
        strcat(target, i ? "/a" : "a");
    for (int k = 0; k < 20; k++) {
        path[0] = 0;
        for (int i = 0; i < k; i++)
            strcat(path, "x/");
        strcat(path, target);
        put(a, &(struct ent){ path, AE_IFDIR });
        path[0] = 0;
        for (int i = 0; i < k; i++)
            strcat(path, "x/");
        strcat(path, "x");
        put(a, &(struct ent){ path, AE_IFLNK, 0777, 0, 0, target });
    }
    put(a, &(struct ent){ ".wh.a", AE_IFREG });
    layer_close(a);
    snprintf(img, sizeof img, "%s/root.ext4", dir);
    struct img_err err;
    struct img_rootfs_opts o = { .disk_size = 1ull << 30 };
    ck_assert_msg(convert(img, &o, &err, 1, lp) == 0, "%s", err.msg);
    ext2_filsys fs = fs_open(img);
    absent(fs, "a");
    ext2_ino_t ino;
    ck_assert_int_eq(ext2fs_namei(fs, EXT2_ROOT_INO, EXT2_ROOT_INO, "lost+found", &ino), 0);
    ext2fs_close_free(&fs);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("image_rootfs");
    TCase *tc = tcase_create("rootfs");
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, one_layer_everything);
    tcase_add_test(tc, layers_in_order);
    tcase_add_test(tc, sparse_and_zeros);
    tcase_add_test(tc, xattr_limits);
    tcase_add_test(tc, path_set_limit);
    tcase_add_test(tc, hostile);
    tcase_add_test(tc, symlink_then_file_through_it);
    tcase_add_test(tc, too_many_entries);
    tcase_add_test(tc, bomb);
    tcase_add_test(tc, bad_inputs);
    tcase_add_test(tc, default_size);
    tcase_add_test(tc, cache);
    tcase_add_test(tc, cache_key_covers_layers);
    tcase_add_test(tc, hardlink_into_replaced_dir);
    tcase_add_test(tc, deep_tree_removed);
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
