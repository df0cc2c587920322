/* An image's layers into one ext4 image file (rootfs.h). Each entry of
 * each layer is read with libarchive, checked by tarent.c, and applied
 * through rootfs_fs.c: nothing touches the host's filesystem but the
 * image file itself. */
#include "vmm/image/rootfs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vmm/image/archive_dyn.h"
#include "vmm/image/rootfs_fs.h"

#define MIB (1ull << 20)
#define MAX_DISK (16ull << 40)          /* ext4 with 4 KiB blocks, 64bit: far more; moat's disks less */

struct build {
    struct rfs fs;
    struct img_tar_limits lim;
    struct img_tar_count cnt;
    struct img_rootfs_stats st;
    struct img_err *err;
    uint64_t base;                      /* decompressed bytes of the layers before this one */
    unsigned mode;                      /* the image file's */
};

uint64_t img_rootfs_default_size(uint64_t layer_bytes)
{
    uint64_t s = (2ull << 30) + 8 * layer_bytes;
    if (layer_bytes > MAX_DISK / 8 || s > MAX_DISK)
        s = MAX_DISK;
    return s < IMG_ROOTFS_MIN_SIZE ? IMG_ROOTFS_MIN_SIZE : s;
}

static enum img_te_type entry_type(struct archive_entry *e)
{
    if (archive_entry_hardlink(e))
        return IMG_TE_HARDLINK;
    switch (archive_entry_filetype(e)) {
    case AE_IFREG: return IMG_TE_REG;
    case AE_IFDIR: return IMG_TE_DIR;
    case AE_IFLNK: return IMG_TE_SYMLINK;
    case AE_IFCHR: return IMG_TE_CHR;
    case AE_IFBLK: return IMG_TE_BLK;
    case AE_IFIFO: return IMG_TE_FIFO;
    default: return IMG_TE_OTHER;
    }
}

static void entry_meta(struct archive_entry *e, struct rfs_meta *m)
{
    static const uint32_t type[] = {
        [IMG_TE_REG] = LINUX_S_IFREG, [IMG_TE_DIR] = LINUX_S_IFDIR, [IMG_TE_SYMLINK] = LINUX_S_IFLNK,
        [IMG_TE_CHR] = LINUX_S_IFCHR, [IMG_TE_BLK] = LINUX_S_IFBLK, [IMG_TE_FIFO] = LINUX_S_IFIFO,
    };
    enum img_te_type t = entry_type(e);
    memset(m, 0, sizeof *m);
    m->mode = (t < IMG_TE_OTHER ? type[t] : 0) | (archive_entry_perm(e) & 07777);
    int64_t uid = archive_entry_uid(e), gid = archive_entry_gid(e);
    m->uid = (uint32_t)uid;     /* in range: img_tarent_check refused others */
    m->gid = (uint32_t)gid;
    if (archive_entry_mtime_is_set(e)) {
        m->mtime = archive_entry_mtime(e);
        m->mtime_ns = archive_entry_mtime_nsec(e);
    }
    /* atime and ctime as mtime where the tar has none (ustar never has). */
    m->atime = archive_entry_atime_is_set(e) ? archive_entry_atime(e) : m->mtime;
    m->atime_ns = archive_entry_atime_is_set(e) ? archive_entry_atime_nsec(e) : m->mtime_ns;
    m->ctime = archive_entry_ctime_is_set(e) ? archive_entry_ctime(e) : m->mtime;
    m->ctime_ns = archive_entry_ctime_is_set(e) ? archive_entry_ctime_nsec(e) : m->mtime_ns;
    if (m->mtime_ns < 0 || m->mtime_ns > 999999999)
        m->mtime_ns = 0;
    if (m->atime_ns < 0 || m->atime_ns > 999999999)
        m->atime_ns = 0;
    if (m->ctime_ns < 0 || m->ctime_ns > 999999999)
        m->ctime_ns = 0;
    m->rdev_major = (uint32_t)archive_entry_rdevmajor(e);
    m->rdev_minor = (uint32_t)archive_entry_rdevminor(e);
}

/* libarchive's last error, never NULL. */
static const char *why(struct archive *a)
{
    const char *w = archive_error_string(a);
    return w ? w : "not a readable tar stream";
}

static int check_bytes(struct build *b, struct archive *a)
{
    int64_t n = archive_filter_bytes(a, 0);
    return img_tar_count_bytes(&b->lim, &b->cnt, b->base + (uint64_t)(n < 0 ? 0 : n), b->err);
}

/* The entry's data: into f when f (a regular file), else read and
 * dropped, counted against the decompressed-bytes limit either way. */
static int data(struct build *b, struct archive *a, ext2_file_t f, const char *path)
{
    for (;;) {
        const void *buf;
        size_t len;
        la_int64_t off;
        int r = archive_read_data_block(a, &buf, &len, &off);
        if (r == ARCHIVE_EOF)
            return 0;
        if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
            return img_err(b->err, -EBADMSG, "\"%s\": %s", path, why(a));
        int rc = check_bytes(b, a);
        if (rc < 0)
            return rc;
        if (f && len && (rc = rfs_write(&b->fs, f, buf, len, (uint64_t)off, path)) < 0)
            return rc;
    }
}

static int xattrs(struct build *b, struct archive_entry *e, ext2_ino_t ino, const char *path)
{
    if (archive_entry_xattr_reset(e) <= 0)
        return 0;
    struct ext2_xattr_handle *h;
    errcode_t x = ext2fs_xattrs_open(b->fs.fs, ino, &h);
    if (x)
        return rfs_fail(&b->fs, x, "opening xattrs", path);
    x = ext2fs_xattrs_read(h);
    const char *name;
    const void *val;
    size_t len;
    while (!x && archive_entry_xattr_next(e, &name, &val, &len) == ARCHIVE_OK) {
        /* Linux's limits (XATTR_NAME_MAX, XATTR_SIZE_MAX): ext4 keeps a
         * name's length in one byte, so a longer one would be cut. */
        size_t nl = name ? strlen(name) : 0;
        if (!nl || nl > 255 || len > 65536) {
            ext2fs_xattrs_close(&h);
            return img_err(b->err, -EINVAL, "\"%s\": xattr \"%.200s\": a name of %zu bytes (1 to 255) or a value "
                           "of %zu (at most 65536)", path, name ? name : "", nl, len);
        }
        x = ext2fs_xattr_set(h, name, val, len);
        if (x) {
            ext2fs_xattrs_close(&h);
            return img_err(b->err, rfs_fail(&b->fs, x, "setting an xattr", path), "\"%s\": xattr \"%.200s\"",
                           path, name);
        }
    }
    errcode_t c = ext2fs_xattrs_close(&h);
    if (!x)
        x = c;
    return x ? rfs_fail(&b->fs, x, "writing xattrs", path) : 0;
}

/* The inode a hardlink's target names (its last component not followed). */
static int link_target(struct build *b, const char *target, const char *path, ext2_ino_t *ino)
{
    char t[IMG_TAR_PATH_MAX + 1];
    snprintf(t, sizeof t, "%s", target);
    ext2_ino_t dir;
    const char *name;
    int rc = rfs_parent(&b->fs, t, 0, &dir, &name);
    if (rc == 0)
        rc = rfs_lookup(&b->fs, dir, name, ino, path);
    if (rc == -ENOENT || (rc == 0 && !*ino))
        return img_err(b->err, -ENOENT, "hardlink \"%s\": its target \"%s\" is in no layer so far", path, target);
    return rc;
}

/* A new inode of the entry's type as name in dir. */
static int create(struct build *b, struct archive *a, struct archive_entry *e, const struct img_tarent_out *t,
                  ext2_ino_t dir, const char *name)
{
    struct rfs_meta m;
    entry_meta(e, &m);
    enum img_te_type type = entry_type(e);
    struct rfs *r = &b->fs;
    ext2_ino_t ino = 0;
    int rc;
    switch (type) {
    case IMG_TE_DIR:
        b->st.dirs++;
        rc = rfs_mkdir(r, dir, name, &m, &ino, t->path);
        break;
    case IMG_TE_SYMLINK:
        b->st.symlinks++;
        rc = rfs_symlink(r, dir, name, t->link, &m, &ino, t->path);
        break;
    case IMG_TE_REG: {
        b->st.files++;
        ext2_file_t f;
        if ((rc = rfs_create_file(r, dir, name, &m, &ino, &f, t->path)) < 0)
            return rc;
        rc = data(b, a, f, t->path);
        int c = rfs_close(r, f, (uint64_t)archive_entry_size(e), t->path);
        if (rc == 0)
            rc = c;
        break;
    }
    default:
        b->st.devices++;
        rc = rfs_mknod(r, dir, name, &m, &ino, t->path);
        break;
    }
    return rc < 0 ? rc : xattrs(b, e, ino, t->path);
}

/* An entry to apply at t->path: update a directory in place, else
 * replace whatever is there (a directory with all under it). */
static int apply(struct build *b, struct archive *a, struct archive_entry *e, const struct img_tarent_out *t)
{
    char path[IMG_TAR_PATH_MAX + 1];
    snprintf(path, sizeof path, "%s", t->path);
    enum img_te_type type = entry_type(e);
    ext2_ino_t dir, old = 0, target = 0;
    const char *name;
    int rc;
    struct rfs_meta m;
    entry_meta(e, &m);
    if (!path[0])                       /* the root: its metadata */
        return rfs_set_meta(&b->fs, EXT2_ROOT_INO, &m, "/") ?: xattrs(b, e, EXT2_ROOT_INO, "/");
    if ((rc = rfs_parent(&b->fs, path, 1, &dir, &name)) < 0 || (rc = rfs_lookup(&b->fs, dir, name, &old, path)) < 0)
        return rc;
    if (type == IMG_TE_DIR && old && (rc = rfs_is_dir(&b->fs, old, path)) != 0)
        return rc < 0 ? rc : rfs_set_meta(&b->fs, old, &m, path) ?: xattrs(b, e, old, path);
    if (type == IMG_TE_HARDLINK) {
        if ((rc = link_target(b, t->link, path, &target)) < 0)
            return rc;
        if (target == old)
            return 0;
    }
    if (old && (rc = rfs_remove(&b->fs, dir, name, old, path)) < 0)
        return rc;
    if (type == IMG_TE_HARDLINK) {
        /* Looked up again: removing old may have removed the target too
         * (a hardlink replacing a directory, to a file under it), and a
         * link to a freed inode would corrupt the file system. */
        if (old && (rc = link_target(b, t->link, path, &target)) < 0)
            return rc;
        b->st.hardlinks++;
        return rfs_hardlink(&b->fs, dir, name, target, path);
    }
    return create(b, a, e, t, dir, name);
}

/* A whiteout deletes what lower layers put at t->path (if anything). */
static int whiteout(struct build *b, const struct img_tarent_out *t)
{
    char path[IMG_TAR_PATH_MAX + 1];
    snprintf(path, sizeof path, "%s", t->path);
    ext2_ino_t dir, ino;
    const char *name;
    b->st.whiteouts++;
    int rc = rfs_parent(&b->fs, path, 0, &dir, &name);
    if (rc == -ENOENT)
        return 0;
    if (rc < 0 || (rc = rfs_lookup(&b->fs, dir, name, &ino, path)) < 0 || !ino)
        return rc;
    return rfs_remove(&b->fs, dir, name, ino, path);
}

/* An opaque directory keeps only what this layer put in it. */
static int opaque(struct build *b, const struct img_tarent_out *t)
{
    char path[IMG_TAR_PATH_MAX + 1];
    snprintf(path, sizeof path, "%s", t->path);
    ext2_ino_t dir = EXT2_ROOT_INO, ino = EXT2_ROOT_INO;
    const char *name;
    b->st.opaques++;
    if (path[0]) {
        int rc = rfs_parent(&b->fs, path, 0, &dir, &name);
        if (rc == -ENOENT)
            return 0;
        if (rc < 0 || (rc = rfs_lookup(&b->fs, dir, name, &ino, path)) < 0 || !ino)
            return rc;
        if ((rc = rfs_is_dir(&b->fs, ino, path)) <= 0)
            return rc;
    }
    return rfs_clear_dir(&b->fs, ino, t->path);
}

static int entry(struct build *b, struct archive *a, struct archive_entry *e, struct img_tarent_out *t)
{
    const char *p = archive_entry_pathname(e);
    enum img_te_type type = entry_type(e);
    const char *link = type == IMG_TE_HARDLINK ? archive_entry_hardlink(e)
                       : type == IMG_TE_SYMLINK ? archive_entry_symlink(e) : NULL;
    struct img_tarent_in in = { p, p ? strlen(p) : 0, type, link, link ? strlen(link) : 0,
                                archive_entry_uid(e), archive_entry_gid(e),
                                archive_entry_rdevmajor(e), archive_entry_rdevminor(e) };
    int rc = img_tarent_check(&in, t, b->err);
    if (rc < 0)
        return rc;
    switch (t->action) {
    case IMG_TA_WHITEOUT: rc = whiteout(b, t); break;
    case IMG_TA_OPAQUE: rc = opaque(b, t); break;
    case IMG_TA_SKIP: break;
    default:
        if ((rc = apply(b, a, e, t)) == 0 && (rc = rfs_pset_add(&b->fs.seen, t->path)) < 0)
            rc = rc == -E2BIG ? img_err(b->err, rc, "\"%s\": the layer's paths take more than %u MiB (the limit)",
                                        t->path, RFS_PSET_BYTES >> 20)
                              : img_err(b->err, rc, "out of memory");
        break;
    }
    /* What the entry still holds (a regular file's data was read). */
    return rc < 0 ? rc : data(b, a, NULL, t->path);
}

static struct archive *open_layer(struct build *b, const struct img_layer_in *l, unsigned i)
{
    struct archive *a = archive_read_new();
    if (!a) {
        img_err(b->err, -ENOMEM, "layer %u: out of memory", i + 1);
        return NULL;
    }
    /* Every filter moat takes, whatever the manifest says: libarchive
     * goes by the stream's magic, not by l->comp. */
    archive_read_support_filter_gzip(a);
    archive_read_support_filter_zstd(a);
    archive_read_support_filter_none(a);
    archive_read_support_format_tar(a);
    if (archive_read_open_filename(a, l->path, 1 << 17) != ARCHIVE_OK) {
        img_err(b->err, -EBADMSG, "layer %u (%s): %s", i + 1, l->path, why(a));
        archive_read_free(a);
        return NULL;
    }
    return a;
}

static int layer(struct build *b, const struct img_layer_in *l, unsigned i)
{
    struct archive *a = open_layer(b, l, i);
    if (!a)
        return b->err && b->err->code ? b->err->code : -EBADMSG;
    struct img_tarent_out *t = malloc(sizeof *t);
    int rc = t ? 0 : img_err(b->err, -ENOMEM, "out of memory");
    b->cnt.entries_layer = 0;
    rfs_pset_clear(&b->fs.seen);
    while (rc == 0) {
        struct archive_entry *e;
        int r = archive_read_next_header(a, &e);
        if (r == ARCHIVE_EOF)
            break;
        /* ARCHIVE_WARN: a name not in this locale's charset (kept as bytes). */
        if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
            rc = img_err(b->err, -EBADMSG, "%s", why(a));
        else if ((rc = check_bytes(b, a)) == 0 && (rc = img_tar_count_entry(&b->lim, &b->cnt, b->err)) == 0)
            rc = entry(b, a, e, t);
    }
    if (rc < 0)
        img_err(b->err, rc, "layer %u (%s) refused", i + 1, l->path);
    int64_t n = archive_filter_bytes(a, 0);
    b->base += (uint64_t)(n < 0 ? 0 : n);
    archive_read_free(a);
    free(t);
    rfs_pset_clear(&b->fs.seen);
    return rc;
}

/* Sizes: the disk's, and the decompressed-bytes limit under it. */
static int plan(struct build *b, const struct img_layer_in *layers, unsigned n, const struct img_rootfs_opts *o)
{
    uint64_t stored = 0;
    for (unsigned i = 0; i < n; i++) {
        struct stat st;
        if (stat(layers[i].path, &st) < 0)
            return img_err(b->err, -errno, "layer %u (%s): %s", i + 1, layers[i].path, strerror(errno));
        stored += (uint64_t)st.st_size;
    }
    uint64_t size = o && o->disk_size ? o->disk_size : img_rootfs_default_size(stored);
    if (size < 16 * MIB || size > MAX_DISK)
        return img_err(b->err, -EINVAL, "a root filesystem of %llu bytes: it must be 16 MiB to 16 TiB",
                       (unsigned long long)size);
    b->st.disk_size = (size + MIB - 1) / MIB * MIB;
    b->mode = o && o->mode ? o->mode & 07777 : 0644;
    if (o)
        b->lim = o->limits;
    if (!b->lim.max_bytes)
        b->lim.max_bytes = b->st.disk_size < IMG_TAR_BYTES ? b->st.disk_size : IMG_TAR_BYTES;
    return 0;
}

static int build_into(struct build *b, const struct img_layer_in *layers, unsigned n, const char *tmp, int fd)
{
    if (ftruncate(fd, (off_t)b->st.disk_size) < 0)
        return img_err(b->err, -errno, "%s: %s", tmp, strerror(errno));
    int rc = rfs_create(&b->fs, tmp, b->st.disk_size);
    for (unsigned i = 0; rc == 0 && i < n; i++)
        rc = layer(b, &layers[i], i);
    if (rc < 0) {
        rfs_abandon(&b->fs);
        return rc;
    }
    if ((rc = rfs_finish(&b->fs)) < 0)
        return rc;
    if (fsync(fd) < 0 || fchmod(fd, b->mode) < 0)
        return img_err(b->err, -errno, "%s: %s", tmp, strerror(errno));
    return 0;
}

static int load_libs(struct img_err *err)
{
    char why[256];
    int rc = archive_load(why, sizeof why);
    if (rc == 0)
        rc = ext2fs_load(why, sizeof why);
    return rc < 0 ? img_err(err, rc, "%s", why) : 0;
}

int img_rootfs_build(const struct img_layer_in *layers, unsigned n, const char *out_path,
                     const struct img_rootfs_opts *o, struct img_rootfs_stats *st, struct img_err *err)
{
    struct build *b = calloc(1, sizeof *b);
    if (!b)
        return img_err(err, -ENOMEM, "out of memory");
    b->err = b->fs.err = err;
    char tmp[4096];
    int rc = load_libs(err);
    if (rc == 0 && n > IMG_MAX_LAYERS)
        rc = img_err(err, -E2BIG, "%u layers (the limit is %d)", n, IMG_MAX_LAYERS);
    if (rc == 0)
        rc = plan(b, layers, n, o);
    if (rc == 0 && snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", out_path) >= (int)sizeof tmp)
        rc = img_err(err, -ENAMETOOLONG, "%s: path too long", out_path);
    int fd = rc == 0 ? mkstemp(tmp) : -1;
    if (rc == 0 && fd < 0)
        rc = img_err(err, -errno, "%s: %s", tmp, strerror(errno));
    if (rc == 0)
        rc = build_into(b, layers, n, tmp, fd);
    if (rc == 0 && rename(tmp, out_path) < 0)
        rc = img_err(err, -errno, "%s: %s", out_path, strerror(errno));
    if (fd >= 0) {
        close(fd);
        if (rc < 0)
            unlink(tmp);
    }
    b->st.entries = b->cnt.entries_total;
    b->st.tar_bytes = b->base;
    b->st.data_bytes = b->fs.data_bytes;
    if (st)
        *st = b->st;
    free(b);
    return rc;
}
