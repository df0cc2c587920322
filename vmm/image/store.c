/* The image store (vmm/image/store.h): blobs by digest, written through
 * tmp/ under a lock per digest and renamed in once verified; references in
 * one index file, refs/index ("DIGEST REF" lines), replaced atomically
 * under refs/lock. Lock files live in locks/ (locks/HEX.lock). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vmm/base/fullio.h"
#include "vmm/image/ref.h"
#include "vmm/image/store.h"
#include "vmm/image/store_int.h"

static const char *const subdirs[] = { "blobs", "blobs/sha256", "tmp", "refs", "rootfs", "locks" };

int img_store_open(struct img_store *s, const char *home, struct img_err *err)
{
    s->dfd = -1;
    if ((size_t)snprintf(s->root, sizeof s->root, "%s/images", home) >= sizeof s->root - 256)
        return img_err(err, -ENAMETOOLONG, "the image store's path under %s is too long", home);
    if (mkdir(home, 0700) && errno != EEXIST)
        return img_err(err, -errno, "cannot create %s: %s", home, strerror(errno));
    if (mkdir(s->root, 0700) && errno != EEXIST)
        return img_err(err, -errno, "cannot create %s: %s", s->root, strerror(errno));
    s->dfd = open(s->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (s->dfd < 0)
        return img_err(err, -errno, "cannot open %s: %s", s->root, strerror(errno));
    for (size_t i = 0; i < sizeof subdirs / sizeof subdirs[0]; i++)
        if (mkdirat(s->dfd, subdirs[i], 0700) && errno != EEXIST) {
            int e = -errno;
            img_err(err, e, "cannot create %s/%s: %s", s->root, subdirs[i], strerror(-e));
            img_store_close(s);
            return e;
        }
    return 0;
}

void img_store_close(struct img_store *s)
{
    if (s->dfd >= 0)
        close(s->dfd);
    s->dfd = -1;
}

/* "blobs/sha256/HEX" and the like, relative to the store. */
int img_store_rel(char *buf, size_t len, const char *dir, const char *digest, const char *suffix)
{
    if (!img_digest_valid(digest))
        return -EINVAL;
    if ((size_t)snprintf(buf, len, "%s/%s%s", dir, digest + 7, suffix) >= len)
        return -ENAMETOOLONG;
    return 0;
}

int img_blob_path(const struct img_store *s, const char *digest, char *buf, size_t len)
{
    if (!img_digest_valid(digest))
        return -EINVAL;
    if ((size_t)snprintf(buf, len, "%s/blobs/sha256/%s", s->root, digest + 7) >= len)
        return -ENAMETOOLONG;
    return 0;
}

int img_blob_has(const struct img_store *s, const char *digest, uint64_t *size)
{
    char rel[128];
    int rc = img_store_rel(rel, sizeof rel, "blobs/sha256", digest, "");
    if (rc)
        return rc;
    struct stat st;
    if (fstatat(s->dfd, rel, &st, AT_SYMLINK_NOFOLLOW))
        return errno == ENOENT ? 0 : -errno;
    if (!S_ISREG(st.st_mode))
        return -EINVAL;
    if (size)
        *size = (uint64_t)st.st_size;
    return 1;
}

/* Take the lock file rel (created if missing) exclusively; -EWOULDBLOCK
 * if nb and another holds it. A lock file prune removed while we waited
 * is not the one at rel any more: take the new one. */
int img_store_lock(const struct img_store *s, const char *rel, int nb)
{
    for (;;) {
        int fd = openat(s->dfd, rel, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
            return -errno;
        if (flock(fd, LOCK_EX | (nb ? LOCK_NB : 0))) {
            int e = -errno;
            close(fd);
            return e;
        }
        struct stat a, b;
        if (!fstat(fd, &a) && !fstatat(s->dfd, rel, &b, AT_SYMLINK_NOFOLLOW) &&
            a.st_ino == b.st_ino && a.st_dev == b.st_dev)
            return fd;
        close(fd);
    }
}

int img_blob_begin(struct img_store *s, const char *digest, struct img_blob_w *w,
                   uint64_t *have, struct img_err *err)
{
    w->fd = w->lockfd = -1;
    char lock[128], tmp[128];
    if (img_store_rel(lock, sizeof lock, "locks", digest, ".lock") ||
        img_store_rel(tmp, sizeof tmp, "tmp", digest, ""))
        return img_err(err, -EINVAL, "\"%.80s\" is not a sha256 digest", digest);
    int fd = img_store_lock(s, lock, 0);
    if (fd < 0)
        return img_err(err, fd, "cannot lock %s/%s: %s", s->root, lock, strerror(-fd));
    w->lockfd = fd;
    snprintf(w->digest, sizeof w->digest, "%s", digest);
    int has = img_blob_has(s, digest, NULL);
    if (has != 0) {
        close(w->lockfd);
        w->lockfd = -1;
        return has < 0 ? img_err(err, has, "cannot look for blob %s: %s", digest, strerror(-has)) : 1;
    }
    if ((size_t)snprintf(w->tmp, sizeof w->tmp, "%s/%s", s->root, tmp) >= sizeof w->tmp) {
        img_blob_abort(s, w, 1);
        return img_err(err, -ENAMETOOLONG, "%s: path too long", s->root);
    }
    w->fd = openat(s->dfd, tmp, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    struct stat st;
    if (w->fd < 0 || fstat(w->fd, &st) || lseek(w->fd, 0, SEEK_END) < 0) {
        int e = -errno;
        img_blob_abort(s, w, 1);
        return img_err(err, e, "cannot open %s: %s", w->tmp, strerror(-e));
    }
    if (have)
        *have = (uint64_t)st.st_size;
    return 0;
}

void img_blob_abort(struct img_store *s, struct img_blob_w *w, int keep)
{
    if (w->fd >= 0) {
        close(w->fd);
        if (!keep)
            unlink(w->tmp);
    }
    if (w->lockfd >= 0)
        close(w->lockfd);
    w->fd = w->lockfd = -1;
}

int img_blob_commit(struct img_store *s, struct img_blob_w *w, uint64_t size, struct img_err *err)
{
    char got[IMG_DIGEST_MAX], rel[128];
    uint64_t have = 0;
    int rc = img_sha256_fd(w->fd, got, &have);
    if (rc) {
        img_err(err, rc, "cannot read %s: %s", w->tmp, strerror(-rc));
    } else if (have != size) {
        rc = img_err(err, -EBADMSG, "blob %s: %llu bytes, not the %llu expected", w->digest,
                     (unsigned long long)have, (unsigned long long)size);
    } else if (strcmp(got, w->digest)) {
        rc = img_err(err, -EBADMSG, "blob %s: its content has digest %s", w->digest, got);
    } else if (fsync(w->fd)) {
        rc = img_err(err, -errno, "cannot sync %s: %s", w->tmp, strerror(errno));
    } else {
        img_store_rel(rel, sizeof rel, "blobs/sha256", w->digest, "");
        if (renameat(s->dfd, w->tmp + strlen(s->root) + 1, s->dfd, rel))
            rc = img_err(err, -errno, "cannot rename %s into blobs/: %s", w->tmp, strerror(errno));
    }
    if (!rc) {
        int d = openat(s->dfd, "blobs/sha256", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (d >= 0) {
            fsync(d);
            close(d);
        }
    }
    img_blob_abort(s, w, 0);    /* after a rename the tmp name is gone */
    return rc;
}

int img_blob_put(struct img_store *s, const char *digest, const void *buf, size_t len,
                 struct img_err *err)
{
    struct img_blob_w w;
    uint64_t have;
    int rc = img_blob_begin(s, digest, &w, &have, err);
    if (rc)
        return rc < 0 ? rc : 0;
    if (ftruncate(w.fd, 0) || pwrite_full(w.fd, buf, len, 0) != (ssize_t)len) {
        rc = img_err(err, -errno, "cannot write %s: %s", w.tmp, strerror(errno));
        img_blob_abort(s, &w, 0);
        return rc;
    }
    return img_blob_commit(s, &w, len, err);
}

int img_blob_read(const struct img_store *s, const char *digest, char **buf, size_t *len,
                  size_t max, struct img_err *err)
{
    char rel[128], got[IMG_DIGEST_MAX];
    *buf = NULL;
    if (img_store_rel(rel, sizeof rel, "blobs/sha256", digest, ""))
        return img_err(err, -EINVAL, "\"%.80s\" is not a sha256 digest", digest);
    int fd = openat(s->dfd, rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return img_err(err, -errno, "blob %s: %s", digest, errno == ENOENT ? "not in the store" : strerror(errno));
    struct stat st;
    int rc = 0;
    char *b = NULL;
    if (fstat(fd, &st))
        rc = img_err(err, -errno, "blob %s: %s", digest, strerror(errno));
    else if ((uint64_t)st.st_size > max)
        rc = img_err(err, -EFBIG, "blob %s is %lld bytes, more than the limit of %zu", digest,
                     (long long)st.st_size, max);
    else if (!(b = malloc((size_t)st.st_size + 1)))
        rc = img_err(err, -ENOMEM, "out of memory");
    else if (pread_full(fd, b, (size_t)st.st_size, 0) != st.st_size)
        rc = img_err(err, -EIO, "cannot read blob %s", digest);
    close(fd);
    if (!rc) {
        img_sha256(b, (size_t)st.st_size, got);
        if (strcmp(got, digest))
            rc = img_err(err, -EBADMSG, "blob %s is corrupt: its content has digest %s", digest, got);
    }
    if (rc) {
        free(b);
        return rc;
    }
    b[st.st_size] = '\0';
    *buf = b;
    *len = (size_t)st.st_size;
    return 0;
}
