/* The ext4 side of a root filesystem's build (vmm/image/rootfs_fs.c):
 * a new file system, paths resolved inside it, inodes made, replaced and
 * removed. Internal to rootfs.c; everything goes through libext2fs (loaded
 * by ext2fs_dyn.c). */
#ifndef MOAT_IMAGE_ROOTFS_FS_H
#define MOAT_IMAGE_ROOTFS_FS_H

#include <stdint.h>

#include "vmm/image/ext2fs_dyn.h"
#include "vmm/image/image.h"

#define RFS_BLOCK 4096u

/* The paths a layer has applied so far (an opaque directory keeps them). */
struct rfs_pset {
    char **slot;
    size_t cap, n;
    size_t bytes;           /* the paths' memory so far */
    size_t max_bytes;       /* its limit; 0: RFS_PSET_BYTES */
};
/* A layer's distinct paths are bounded by its entry count, not by its
 * inodes: symlinks to "." make any number of long paths of one directory.
 * Their memory is capped (-E2BIG past it). */
#define RFS_PSET_BYTES (256u << 20)

struct rfs {
    ext2_filsys fs;
    struct img_err *err;
    struct rfs_pset seen;
    uint64_t data_bytes;
};

/* An inode's metadata as an entry gives it. */
struct rfs_meta {
    uint32_t mode;              /* type | permissions (07777) */
    uint32_t uid, gid;
    int64_t mtime, atime, ctime;
    long mtime_ns, atime_ns, ctime_ns;
    uint32_t rdev_major, rdev_minor;
};

int rfs_pset_add(struct rfs_pset *s, const char *path);
int rfs_pset_has(const struct rfs_pset *s, const char *path);
void rfs_pset_clear(struct rfs_pset *s);

/* An ext2fs error code as -errno with a sentence. */
int rfs_fail(struct rfs *r, errcode_t rc, const char *what, const char *path);

/* A new ext4 of size bytes in the (existing, empty) file path. */
int rfs_create(struct rfs *r, const char *path, uint64_t size);
/* Write everything and close; rfs_abandon closes without writing. */
int rfs_finish(struct rfs *r);
void rfs_abandon(struct rfs *r);

/* The directory that holds path's last component (path is modified while
 * walking and restored); *name points at that component. Missing parents
 * are made (0755) when create; a parent that is a symlink is followed
 * inside the image. -ENOENT when !create and a parent is missing. */
int rfs_parent(struct rfs *r, char *path, int create, ext2_ino_t *dir, const char **name);
/* name in dir: its inode, or 0. */
int rfs_lookup(struct rfs *r, ext2_ino_t dir, const char *name, ext2_ino_t *ino, const char *path);
/* Remove name (inode ino) from dir, and the inode with all under it when
 * no other link keeps it. */
int rfs_remove(struct rfs *r, ext2_ino_t dir, const char *name, ext2_ino_t ino, const char *path);
/* Remove everything under dir (path: its path) that r->seen lacks. */
int rfs_clear_dir(struct rfs *r, ext2_ino_t dir, const char *path);
/* 1 if ino is a directory, 0 if not, -errno. */
int rfs_is_dir(struct rfs *r, ext2_ino_t ino, const char *path);

/* New inodes named name in dir; *ino the new inode. */
int rfs_mkdir(struct rfs *r, ext2_ino_t dir, const char *name, const struct rfs_meta *m, ext2_ino_t *ino,
              const char *path);
int rfs_mknod(struct rfs *r, ext2_ino_t dir, const char *name, const struct rfs_meta *m, ext2_ino_t *ino,
              const char *path);
int rfs_symlink(struct rfs *r, ext2_ino_t dir, const char *name, const char *target, const struct rfs_meta *m,
                ext2_ino_t *ino, const char *path);
/* A regular file; its data follows through rfs_write, then rfs_close. */
int rfs_create_file(struct rfs *r, ext2_ino_t dir, const char *name, const struct rfs_meta *m, ext2_ino_t *ino,
                    ext2_file_t *f, const char *path);
/* Write len bytes at off, leaving 4 KiB blocks of zeros as holes. */
int rfs_write(struct rfs *r, ext2_file_t f, const void *buf, size_t len, uint64_t off, const char *path);
int rfs_close(struct rfs *r, ext2_file_t f, uint64_t size, const char *path);
/* One more name for the inode target (not a directory). */
int rfs_hardlink(struct rfs *r, ext2_ino_t dir, const char *name, ext2_ino_t target, const char *path);
/* An existing inode's metadata (type kept). */
int rfs_set_meta(struct rfs *r, ext2_ino_t ino, const struct rfs_meta *m, const char *path);

#endif
