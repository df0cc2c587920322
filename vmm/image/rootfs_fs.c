/* The ext4 side of a root filesystem's build (rootfs_fs.h). */
#include "vmm/image/rootfs_fs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define ROOT EXT2_ROOT_INO

/* An inode as the file system stores it (256 bytes here), zero past what
 * struct ext2_inode_large names: a reused inode keeps no old xattrs. */
union rfs_inode {
    struct ext2_inode_large li;
    struct ext2_inode i;
    char raw[1024];
};

/* ---- the set of paths a layer applied ---- */

static uint64_t hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int pset_grow(struct rfs_pset *s)
{
    size_t cap = s->cap ? s->cap * 2 : 1024;
    char **slot = calloc(cap, sizeof *slot);
    if (!slot)
        return -ENOMEM;
    for (size_t i = 0; i < s->cap; i++) {
        if (!s->slot[i])
            continue;
        size_t j = hash(s->slot[i]) & (cap - 1);
        while (slot[j])
            j = (j + 1) & (cap - 1);
        slot[j] = s->slot[i];
    }
    free(s->slot);
    s->slot = slot;
    s->cap = cap;
    return 0;
}

int rfs_pset_has(const struct rfs_pset *s, const char *path)
{
    if (!s->cap)
        return 0;
    for (size_t j = hash(path) & (s->cap - 1); s->slot[j]; j = (j + 1) & (s->cap - 1))
        if (!strcmp(s->slot[j], path))
            return 1;
    return 0;
}

int rfs_pset_add(struct rfs_pset *s, const char *path)
{
    if (rfs_pset_has(s, path))
        return 0;
    size_t need = strlen(path) + 1 + 2 * sizeof *s->slot;    /* the string, its slot at half load */
    if (s->bytes + need > (s->max_bytes ? s->max_bytes : RFS_PSET_BYTES))
        return -E2BIG;
    if ((s->n + 1) * 2 > s->cap && pset_grow(s) < 0)
        return -ENOMEM;
    size_t j = hash(path) & (s->cap - 1);
    while (s->slot[j])
        j = (j + 1) & (s->cap - 1);
    if (!(s->slot[j] = strdup(path)))
        return -ENOMEM;
    s->n++;
    s->bytes += need;
    return 0;
}

void rfs_pset_clear(struct rfs_pset *s)
{
    for (size_t i = 0; i < s->cap; i++)
        free(s->slot[i]);
    free(s->slot);
    s->slot = NULL;
    s->cap = s->n = s->bytes = 0;
}

/* ---- errors ---- */

int rfs_fail(struct rfs *r, errcode_t rc, const char *what, const char *path)
{
    int code = rc > 0 && rc < 4096 ? -(int)rc : -EIO;
    if (rc == EXT2_ET_BLOCK_ALLOC_FAIL || rc == EXT2_ET_INODE_ALLOC_FAIL || rc == ENOSPC)
        return img_err(r->err, -ENOSPC, "\"%s\": %s: the root filesystem is full (a larger --disk-size)",
                       path, what);
    if (rc == EXT2_ET_SYMLINK_LOOP)
        code = -ELOOP;
    else if (rc == EXT2_ET_FILE_NOT_FOUND)
        code = -ENOENT;
    else if (rc == EXT2_ET_TOO_MANY_REFS)
        code = -EMLINK;
    return img_err(r->err, code, "\"%s\": %s: %s", path, what, error_message(rc));
}

static int rd(struct rfs *r, ext2_ino_t ino, union rfs_inode *in, const char *path)
{
    memset(in, 0, sizeof *in);
    errcode_t rc = ext2fs_read_inode_full(r->fs, ino, &in->i, EXT2_INODE_SIZE(r->fs->super));
    return rc ? rfs_fail(r, rc, "reading an inode", path) : 0;
}

static int wr(struct rfs *r, ext2_ino_t ino, union rfs_inode *in, const char *path)
{
    errcode_t rc = ext2fs_write_inode_full(r->fs, ino, &in->i, EXT2_INODE_SIZE(r->fs->super));
    return rc ? rfs_fail(r, rc, "writing an inode", path) : 0;
}

/* ---- the file system ---- */

static void fill_super(struct ext2_super_block *sb, uint64_t size)
{
    uint64_t blocks = size / RFS_BLOCK;
    memset(sb, 0, sizeof *sb);
    sb->s_blocks_count = (uint32_t)blocks;
    sb->s_blocks_count_hi = (uint32_t)(blocks >> 32);
    sb->s_log_block_size = 2;                   /* 4 KiB */
    sb->s_log_cluster_size = 2;
    sb->s_rev_level = EXT2_DYNAMIC_REV;
    sb->s_inode_size = 256;
    uint64_t inodes = size / 16384;             /* mke2fs's default ratio */
    sb->s_inodes_count = inodes > 0xfff00000u ? 0xfff00000u : (uint32_t)inodes;
    sb->s_min_extra_isize = sb->s_want_extra_isize = sizeof(struct ext2_inode_large) - EXT2_GOOD_OLD_INODE_SIZE;
    sb->s_log_groups_per_flex = 4;
    sb->s_feature_compat = EXT2_FEATURE_COMPAT_EXT_ATTR | EXT2_FEATURE_COMPAT_DIR_INDEX;
    sb->s_feature_incompat = EXT2_FEATURE_INCOMPAT_FILETYPE | EXT3_FEATURE_INCOMPAT_EXTENTS |
                             EXT4_FEATURE_INCOMPAT_FLEX_BG | EXT4_FEATURE_INCOMPAT_64BIT;
    sb->s_feature_ro_compat = EXT2_FEATURE_RO_COMPAT_SPARSE_SUPER | EXT2_FEATURE_RO_COMPAT_LARGE_FILE |
                              EXT4_FEATURE_RO_COMPAT_HUGE_FILE | EXT4_FEATURE_RO_COMPAT_DIR_NLINK |
                              EXT4_FEATURE_RO_COMPAT_EXTRA_ISIZE | EXT4_FEATURE_RO_COMPAT_METADATA_CSUM;
    sb->s_desc_size = EXT2_MIN_DESC_SIZE_64BIT;
    sb->s_errors = EXT2_ERRORS_DEFAULT;
    sb->s_max_mnt_count = (__u16)-1;
}

/* Root, lost+found (16 KiB, as mke2fs makes it), the reserved inodes. */
static int populate(struct rfs *r)
{
    ext2_filsys fs = r->fs;
    errcode_t rc = ext2fs_mkdir(fs, ROOT, ROOT, 0);
    if (rc)
        return rfs_fail(r, rc, "making the root directory", "/");
    ext2_ino_t lf;
    rc = ext2fs_mkdir(fs, ROOT, 0, "lost+found");
    if (!rc)
        rc = ext2fs_lookup(fs, ROOT, "lost+found", 10, NULL, &lf);
    for (int i = 0; !rc && i < 3; i++)
        rc = ext2fs_expand_dir(fs, lf);
    if (rc)
        return rfs_fail(r, rc, "making lost+found", "/lost+found");
    ext2fs_inode_alloc_stats2(fs, EXT2_BAD_INO, +1, 0);
    for (ext2_ino_t i = ROOT + 1; i < EXT2_FIRST_INODE(fs->super); i++)
        ext2fs_inode_alloc_stats2(fs, i, +1, 0);
    return 0;
}

int rfs_create(struct rfs *r, const char *path, uint64_t size)
{
    struct ext2_super_block sb;
    fill_super(&sb, size);
    errcode_t rc = ext2fs_initialize(path, EXT2_FLAG_64BITS | EXT2_FLAG_RW, &sb, unix_io_manager, &r->fs);
    if (rc) {
        r->fs = NULL;
        return rfs_fail(r, rc, "making the file system", path);
    }
    ext2_filsys fs = r->fs;
    if (getrandom(fs->super->s_uuid, sizeof fs->super->s_uuid, 0) < 0 ||
        getrandom(fs->super->s_hash_seed, sizeof fs->super->s_hash_seed, 0) < 0)
        return img_err(r->err, -errno, "getrandom: %s", strerror(errno));
    fs->super->s_def_hash_version = EXT2_HASH_HALF_MD4;
    fs->super->s_checksum_type = EXT2_CRC32C_CHKSUM;
    fs->super->s_mkfs_time = fs->super->s_wtime = (__u32)time(NULL);
    ext2fs_init_csum_seed(fs);
    /* Every block read back was written by this build (and checksummed
     * then): verifying it again on each directory lookup costs a CRC32C
     * of every block of the directory per entry. */
    fs->flags |= EXT2_FLAG_IGNORE_CSUM_ERRORS;
    rc = ext2fs_allocate_tables(fs);
    if (rc)
        return rfs_fail(r, rc, "allocating the inode tables", path);
    /* The file is new and sparse: its inode tables read as zeros, and
     * the guest's kernel need not zero them again. */
    for (dgrp_t g = 0; g < fs->group_desc_count; g++)
        ext2fs_bg_flags_set(fs, g, EXT2_BG_INODE_ZEROED);
    return populate(r);
}

int rfs_finish(struct rfs *r)
{
    errcode_t rc = ext2fs_set_gdt_csum(r->fs);
    if (!rc)
        rc = ext2fs_close_free(&r->fs);
    if (rc) {
        rfs_abandon(r);
        return rfs_fail(r, rc, "writing the file system", "/");
    }
    return 0;
}

void rfs_abandon(struct rfs *r)
{
    if (r->fs)
        ext2fs_free(r->fs);
    r->fs = NULL;
}

/* ---- paths ---- */

int rfs_lookup(struct rfs *r, ext2_ino_t dir, const char *name, ext2_ino_t *ino, const char *path)
{
    errcode_t rc = ext2fs_lookup(r->fs, dir, name, (int)strlen(name), NULL, ino);
    if (rc == EXT2_ET_FILE_NOT_FOUND) {
        *ino = 0;
        return 0;
    }
    return rc ? rfs_fail(r, rc, "looking up a name", path) : 0;
}

int rfs_is_dir(struct rfs *r, ext2_ino_t ino, const char *path)
{
    union rfs_inode in;
    int rc = rd(r, ino, &in, path);
    return rc < 0 ? rc : LINUX_S_ISDIR(in.i.i_mode);
}

/* One component of a parent path: into *cur. */
static int step(struct rfs *r, ext2_ino_t *cur, const char *comp, int create, const char *path)
{
    ext2_ino_t ino;
    int rc = rfs_lookup(r, *cur, comp, &ino, path);
    if (rc < 0)
        return rc;
    if (!ino) {
        if (!create)
            return -ENOENT;
        struct rfs_meta m = { .mode = LINUX_S_IFDIR | 0755 };
        return rfs_mkdir(r, *cur, comp, &m, cur, path);
    }
    union rfs_inode in;
    if ((rc = rd(r, ino, &in, path)) < 0)
        return rc;
    if (LINUX_S_ISLNK(in.i.i_mode)) {
        /* Resolved as the guest's kernel would with this image as its
         * root: "/" and ".." stop at the image's root. */
        errcode_t e = ext2fs_follow_link(r->fs, ROOT, *cur, ino, &ino);
        if (e)
            return img_err(r->err, rfs_fail(r, e, "following a symlink in the path", path),
                           "\"%s\": its parent \"%s\" is a symlink that resolves to nothing in the image", path,
                           comp);
        if ((rc = rd(r, ino, &in, path)) < 0)
            return rc;
    }
    if (!LINUX_S_ISDIR(in.i.i_mode))
        return img_err(r->err, -ENOTDIR, "\"%s\": its parent \"%s\" is not a directory", path, comp);
    *cur = ino;
    return 0;
}

int rfs_parent(struct rfs *r, char *path, int create, ext2_ino_t *dir, const char **name)
{
    ext2_ino_t cur = ROOT;
    char *p = path, *slash;
    while ((slash = strchr(p, '/'))) {
        *slash = '\0';
        int rc = step(r, &cur, p, create, path);
        *slash = '/';
        if (rc < 0)
            return rc;
        p = slash + 1;
    }
    *dir = cur;
    *name = p;
    return 0;
}

/* ---- removal ---- */

struct child {
    char name[EXT2_NAME_LEN + 1];
    ext2_ino_t ino;
    int isdir;
};

struct list_ctx {
    struct child *v;
    size_t n, cap;
    int rc;
};

static int list_child(ext2_ino_t dir, int entry, struct ext2_dir_entry *de, int offset, int blocksize, char *buf,
                      void *priv)
{
    struct list_ctx *c = priv;
    (void)dir, (void)offset, (void)blocksize, (void)buf;
    if (entry == DIRENT_DOT_FILE || entry == DIRENT_DOT_DOT_FILE || !de->inode)
        return 0;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        struct child *v = realloc(c->v, cap * sizeof *v);
        if (!v) {
            c->rc = -ENOMEM;
            return DIRENT_ABORT;
        }
        c->v = v;
        c->cap = cap;
    }
    struct child *ch = &c->v[c->n++];
    int len = de->name_len & 0xff;
    memcpy(ch->name, de->name, (size_t)len);
    ch->name[len] = '\0';
    ch->ino = de->inode;
    ch->isdir = (de->name_len >> 8) == EXT2_FT_DIR;
    return 0;
}

/* The entries of dir but "." and "..", into l (l->v malloc'ed). */
static int list_children(struct rfs *r, ext2_ino_t dir, const char *path, struct list_ctx *l)
{
    errcode_t e = ext2fs_dir_iterate2(r->fs, dir, 0, NULL, list_child, l);
    if (l->rc < 0)
        return l->rc;
    return e ? rfs_fail(r, e, "reading a directory", path) : 0;
}

/* Free the inode's blocks, xattrs and itself. */
static int free_inode(struct rfs *r, ext2_ino_t ino, union rfs_inode *in, const char *path)
{
    errcode_t rc = 0;
    if (ext2fs_inode_has_valid_blocks2(r->fs, &in->i))
        rc = ext2fs_punch(r->fs, ino, &in->i, NULL, 0, ~0ULL);
    if (!rc)
        rc = ext2fs_free_ext_attr(r->fs, ino, &in->li);
    if (rc)
        return rfs_fail(r, rc, "freeing an inode", path);
    in->i.i_links_count = 0;
    in->i.i_dtime = (__u32)time(NULL);
    int err = wr(r, ino, in, path);
    if (err < 0)
        return err;
    ext2fs_inode_alloc_stats2(r->fs, ino, -1, LINUX_S_ISDIR(in->i.i_mode));
    return 0;
}

/* One link fewer to ino (its name is already gone): a directory goes with
 * all under it, anything else when its last link goes. Iterative, with a
 * stack of its own: a hostile layer can nest directories far deeper than
 * a path can name (through symlinks), and one C frame per level would
 * overflow moat's stack. A directory's children are listed before its
 * blocks go; they need not be unnamed. */
static int drop(struct rfs *r, ext2_ino_t ino, const char *path)
{
    ext2_ino_t *st = malloc(64 * sizeof *st);
    size_t n = 0, cap = 64;
    int rc = st ? 0 : img_err(r->err, -ENOMEM, "out of memory");
    if (st)
        st[n++] = ino;
    while (rc == 0 && n) {
        ext2_ino_t x = st[--n];
        union rfs_inode in;
        if ((rc = rd(r, x, &in, path)) < 0)
            break;
        if (LINUX_S_ISDIR(in.i.i_mode)) {
            struct list_ctx l = { 0 };
            rc = list_children(r, x, path, &l);
            if (rc == 0 && l.n > cap - n) {
                size_t c = cap;
                while (l.n > c - n)
                    c *= 2;
                ext2_ino_t *g = realloc(st, c * sizeof *st);
                if (!g)
                    rc = img_err(r->err, -ENOMEM, "out of memory");
                else
                    st = g, cap = c;
            }
            for (size_t i = 0; rc == 0 && i < l.n; i++)
                st[n++] = l.v[i].ino;
            free(l.v);
            if (rc == 0)
                rc = free_inode(r, x, &in, path);
        } else if (in.i.i_links_count > 1) {
            in.i.i_links_count--;
            rc = wr(r, x, &in, path);
        } else {
            rc = free_inode(r, x, &in, path);
        }
    }
    free(st);
    return rc;
}

int rfs_remove(struct rfs *r, ext2_ino_t dir, const char *name, ext2_ino_t ino, const char *path)
{
    int isdir = rfs_is_dir(r, ino, path);
    if (isdir < 0)
        return isdir;
    errcode_t e = ext2fs_unlink(r->fs, dir, name, ino, 0);
    if (e)
        return rfs_fail(r, e, "removing a name", path);
    int rc = drop(r, ino, path);
    if (rc < 0 || !isdir)
        return rc;
    union rfs_inode in;
    if ((rc = rd(r, dir, &in, path)) < 0)
        return rc;
    if (in.i.i_links_count > 2)
        in.i.i_links_count--;
    return wr(r, dir, &in, path);
}

static int clear_children(struct rfs *r, ext2_ino_t dir, const char *path, struct list_ctx *l)
{
    size_t plen = strlen(path);
    char *sub = malloc(plen + EXT2_NAME_LEN + 2);
    if (!sub)
        return -ENOMEM;
    int rc = 0;
    for (size_t i = 0; i < l->n && rc == 0; i++) {
        struct child *ch = &l->v[i];
        if (plen)
            snprintf(sub, plen + EXT2_NAME_LEN + 2, "%s/%s", path, ch->name);
        else
            snprintf(sub, EXT2_NAME_LEN + 1, "%s", ch->name);
        if (!plen && !strcmp(ch->name, "lost+found"))
            continue;
        if (!rfs_pset_has(&r->seen, sub))
            rc = rfs_remove(r, dir, ch->name, ch->ino, sub);
        else if (ch->isdir)
            rc = rfs_clear_dir(r, ch->ino, sub);
    }
    free(sub);
    return rc;
}

int rfs_clear_dir(struct rfs *r, ext2_ino_t dir, const char *path)
{
    struct list_ctx l = { 0 };
    int rc = list_children(r, dir, path, &l);
    if (!rc)
        rc = clear_children(r, dir, path, &l);
    free(l.v);
    return rc;
}

/* ---- new inodes ---- */

static int ftype(uint32_t mode)
{
    switch (mode & LINUX_S_IFMT) {
    case LINUX_S_IFREG: return EXT2_FT_REG_FILE;
    case LINUX_S_IFDIR: return EXT2_FT_DIR;
    case LINUX_S_IFLNK: return EXT2_FT_SYMLINK;
    case LINUX_S_IFCHR: return EXT2_FT_CHRDEV;
    case LINUX_S_IFBLK: return EXT2_FT_BLKDEV;
    case LINUX_S_IFIFO: return EXT2_FT_FIFO;
    default: return EXT2_FT_UNKNOWN;
    }
}

/* ext4's times: 32 bits of seconds, then 2 of epoch and 30 of ns. */
static void set_time(__u32 *t, __u32 *extra, int64_t sec, long ns)
{
    *t = (__u32)sec;
    *extra = ((__u32)ns << 2) | ((__u32)((sec - (int32_t)sec) >> 32) & 3);
}

static void fill_meta(union rfs_inode *in, const struct rfs_meta *m)
{
    in->i.i_mode = (__u16)m->mode;
    in->i.i_uid = (__u16)m->uid;
    ext2fs_set_i_uid_high(in->i, m->uid >> 16);
    in->i.i_gid = (__u16)m->gid;
    ext2fs_set_i_gid_high(in->i, m->gid >> 16);
    set_time(&in->li.i_mtime, &in->li.i_mtime_extra, m->mtime, m->mtime_ns);
    set_time(&in->li.i_atime, &in->li.i_atime_extra, m->atime, m->atime_ns);
    set_time(&in->li.i_ctime, &in->li.i_ctime_extra, m->ctime, m->ctime_ns);
    set_time(&in->li.i_crtime, &in->li.i_crtime_extra, m->mtime, m->mtime_ns);
}

int rfs_set_meta(struct rfs *r, ext2_ino_t ino, const struct rfs_meta *m, const char *path)
{
    union rfs_inode in;
    int rc = rd(r, ino, &in, path);
    if (rc < 0)
        return rc;
    struct rfs_meta k = *m;
    k.mode = (in.i.i_mode & LINUX_S_IFMT) | (m->mode & 07777);
    if (in.li.i_extra_isize < sizeof(struct ext2_inode_large) - EXT2_GOOD_OLD_INODE_SIZE)
        in.li.i_extra_isize = sizeof(struct ext2_inode_large) - EXT2_GOOD_OLD_INODE_SIZE;
    fill_meta(&in, &k);
    return wr(r, ino, &in, path);
}

static int link_name(struct rfs *r, ext2_ino_t dir, const char *name, ext2_ino_t ino, uint32_t mode,
                     const char *path)
{
    errcode_t e = ext2fs_link(r->fs, dir, name, ino, ftype(mode));
    if (e == EXT2_ET_DIR_NO_SPACE) {
        e = ext2fs_expand_dir(r->fs, dir);
        if (!e)
            e = ext2fs_link(r->fs, dir, name, ino, ftype(mode));
    }
    return e ? rfs_fail(r, e, "adding a name to a directory", path) : 0;
}

/* A new inode with m's metadata, one link, not yet written. */
static int new_inode(struct rfs *r, ext2_ino_t dir, const struct rfs_meta *m, ext2_ino_t *ino,
                     union rfs_inode *in, const char *path)
{
    errcode_t e = ext2fs_new_inode(r->fs, dir, (int)m->mode, NULL, ino);
    if (e)
        return rfs_fail(r, e, "allocating an inode", path);
    memset(in, 0, sizeof *in);
    in->li.i_extra_isize = sizeof(struct ext2_inode_large) - EXT2_GOOD_OLD_INODE_SIZE;
    fill_meta(in, m);
    in->i.i_links_count = 1;
    return 0;
}

/* Write the new inode, count it allocated, name it in dir. */
static int commit_inode(struct rfs *r, ext2_ino_t dir, const char *name, ext2_ino_t ino, union rfs_inode *in,
                        const char *path)
{
    int rc = wr(r, ino, in, path);
    if (rc < 0)
        return rc;
    ext2fs_inode_alloc_stats2(r->fs, ino, +1, 0);
    return link_name(r, dir, name, ino, in->i.i_mode, path);
}

int rfs_mkdir(struct rfs *r, ext2_ino_t dir, const char *name, const struct rfs_meta *m, ext2_ino_t *ino,
              const char *path)
{
    ext2_ino_t n;
    errcode_t e = ext2fs_new_inode(r->fs, dir, LINUX_S_IFDIR | 0755, NULL, &n);
    if (!e)
        e = ext2fs_mkdir(r->fs, dir, n, name);
    if (e == EXT2_ET_DIR_NO_SPACE) {
        e = ext2fs_expand_dir(r->fs, dir);
        if (!e)
            e = ext2fs_mkdir(r->fs, dir, n, name);
    }
    if (e)
        return rfs_fail(r, e, "making a directory", path);
    *ino = n;
    return rfs_set_meta(r, n, m, path);
}

int rfs_mknod(struct rfs *r, ext2_ino_t dir, const char *name, const struct rfs_meta *m, ext2_ino_t *ino,
              const char *path)
{
    union rfs_inode in;
    int rc = new_inode(r, dir, m, ino, &in, path);
    if (rc < 0)
        return rc;
    uint32_t maj = m->rdev_major, min = m->rdev_minor;
    if (LINUX_S_ISCHR(m->mode) || LINUX_S_ISBLK(m->mode)) {
        /* The kernel's encoding: old (8:8 bits) when both fit, else new. */
        if (maj < 256 && min < 256)
            in.i.i_block[0] = maj * 256 + min;
        else
            in.i.i_block[1] = (min & 0xff) | (maj << 8) | ((min & ~0xffu) << 12);
    }
    return commit_inode(r, dir, name, *ino, &in, path);
}

static int init_extents(struct rfs *r, ext2_ino_t ino, union rfs_inode *in, const char *path)
{
    ext2_extent_handle_t h;
    in->i.i_flags &= ~EXT4_EXTENTS_FL;
    errcode_t e = ext2fs_extent_open2(r->fs, ino, &in->i, &h);
    if (e)
        return rfs_fail(r, e, "starting an extent tree", path);
    ext2fs_extent_free(h);
    return 0;
}

int rfs_symlink(struct rfs *r, ext2_ino_t dir, const char *name, const char *target, const struct rfs_meta *m,
                ext2_ino_t *ino, const char *path)
{
    union rfs_inode in;
    struct rfs_meta k = *m;
    k.mode = LINUX_S_IFLNK | 0777;
    int rc = new_inode(r, dir, &k, ino, &in, path);
    if (rc < 0)
        return rc;
    size_t len = strlen(target);
    if (len < sizeof in.i.i_block) {         /* fast: in the inode */
        memcpy(in.i.i_block, target, len);
        in.i.i_size = (__u32)len;
        return commit_inode(r, dir, name, *ino, &in, path);
    }
    if ((rc = init_extents(r, *ino, &in, path)) < 0 || (rc = commit_inode(r, dir, name, *ino, &in, path)) < 0)
        return rc;
    ext2_file_t f;
    errcode_t e = ext2fs_file_open(r->fs, *ino, EXT2_FILE_WRITE, &f);
    if (e)
        return rfs_fail(r, e, "opening a symlink", path);
    unsigned int wrote = 0;
    e = ext2fs_file_write(f, target, (unsigned int)len, &wrote);
    if (e || wrote != len) {
        ext2fs_file_close(f);
        return rfs_fail(r, e ? e : EXT2_ET_SHORT_WRITE, "writing a symlink", path);
    }
    return rfs_close(r, f, len, path);
}

int rfs_create_file(struct rfs *r, ext2_ino_t dir, const char *name, const struct rfs_meta *m, ext2_ino_t *ino,
                    ext2_file_t *f, const char *path)
{
    union rfs_inode in;
    int rc = new_inode(r, dir, m, ino, &in, path);
    if (rc < 0 || (rc = init_extents(r, *ino, &in, path)) < 0 ||
        (rc = commit_inode(r, dir, name, *ino, &in, path)) < 0)
        return rc;
    errcode_t e = ext2fs_file_open(r->fs, *ino, EXT2_FILE_WRITE, f);
    return e ? rfs_fail(r, e, "opening a file", path) : 0;
}

static int all_zero(const unsigned char *p, size_t n)
{
    uint64_t acc = 0, w;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, p + i, 8);
        acc |= w;
    }
    for (; i < n; i++)
        acc |= p[i];
    return acc == 0;
}

int rfs_write(struct rfs *r, ext2_file_t f, const void *buf, size_t len, uint64_t off, const char *path)
{
    const unsigned char *p = buf;
    while (len) {
        size_t first = RFS_BLOCK - (size_t)(off % RFS_BLOCK);
        if (first > len)
            first = len;
        if (all_zero(p, first)) {       /* a hole: nothing written */
            p += first, off += first, len -= first;
            continue;
        }
        size_t run = first;
        while (run < len) {
            size_t c = len - run < RFS_BLOCK ? len - run : RFS_BLOCK;
            if (all_zero(p + run, c))
                break;
            run += c;
        }
        unsigned int wrote = 0;
        errcode_t e = ext2fs_file_llseek(f, off, EXT2_SEEK_SET, NULL);
        if (!e)
            e = ext2fs_file_write(f, p, (unsigned int)run, &wrote);
        if (!e && wrote != run)
            e = EXT2_ET_SHORT_WRITE;
        if (e)
            return rfs_fail(r, e, "writing a file's data", path);
        r->data_bytes += run;
        p += run, off += run, len -= run;
    }
    return 0;
}

int rfs_close(struct rfs *r, ext2_file_t f, uint64_t size, const char *path)
{
    errcode_t e = ext2fs_file_set_size2(f, size);
    errcode_t c = ext2fs_file_close(f);
    if (!e)
        e = c;
    return e ? rfs_fail(r, e, "finishing a file", path) : 0;
}

int rfs_hardlink(struct rfs *r, ext2_ino_t dir, const char *name, ext2_ino_t target, const char *path)
{
    union rfs_inode in;
    int rc = rd(r, target, &in, path);
    if (rc < 0)
        return rc;
    if (LINUX_S_ISDIR(in.i.i_mode))
        return img_err(r->err, -EPERM, "hardlink \"%s\": its target is a directory", path);
    if (in.i.i_links_count >= EXT2_LINK_MAX)
        return img_err(r->err, -EMLINK, "hardlink \"%s\": its target has %u links (the limit)", path,
                       (unsigned)in.i.i_links_count);
    if ((rc = link_name(r, dir, name, target, in.i.i_mode, path)) < 0)
        return rc;
    in.i.i_links_count++;
    return wr(r, target, &in, path);
}
