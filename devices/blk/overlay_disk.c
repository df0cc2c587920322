/* Copy-on-write disks: the I/O layer. Contracts in overlay_disk.h. */
#include "devices/blk/overlay_disk.h"
#include "vmm/base/fullio.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <nettle/sha2.h>

#define IOV_MAX_SLICE 1024

struct ovl_disk {
    enum ovl_kind kind;
    int fd;                 /* the overlay (or raw image) */
    int base_fd;            /* moat kind: the base, O_RDONLY */
    bool read_only;
    uint64_t vsize;
    struct ovl_header h;
    uint64_t *bm;           /* current: blocks whose data is in the overlay */
    uint64_t *bm_disk;      /* what the bitmap on disk says (durable) */
    size_t nwords;
    bool data_dirty;        /* written since the last flush */
    pthread_mutex_t lock;
};

__attribute__((format(printf, 4, 5)))
static int fail(char *why, size_t wlen, int r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, wlen, fmt, ap);
    va_end(ap);
    return r;
}

/* Read [off, off + len) of fd through buf (OVL_ID_BYTES) into the hashes
 * (the FNV-1a one only when fnv is set). 0 or -errno (-EIO at a short file). */
static int hash_range(int fd, uint8_t *buf, uint64_t off, uint64_t len, struct sha256_ctx *sha,
                      uint64_t *fnv)
{
    while (len) {
        ssize_t n = pread_full(fd, buf, len < OVL_ID_BYTES ? (size_t)len : OVL_ID_BYTES, (off_t)off);
        if (n <= 0)
            return n < 0 ? (int)n : -EIO;
        sha256_update(sha, (size_t)n, buf);
        if (fnv)
            *fnv = ovl_hash(*fnv, buf, (size_t)n);
        off += (uint64_t)n;
        len -= (uint64_t)n;
    }
    return 0;
}

int ovl_base_identify(int fd, struct ovl_base_id *id)
{
    struct stat st;
    memset(id, 0, sizeof *id);
    if (fstat(fd, &st) < 0)
        return -errno;
    if (S_ISREG(st.st_mode)) {
        id->size = (uint64_t)st.st_size;
    } else if (S_ISBLK(st.st_mode)) {
        if (ioctl(fd, BLKGETSIZE64, &id->size) < 0)
            return -errno;
    } else {
        return -EINVAL;
    }
    id->mtime_sec = (int64_t)st.st_mtime;
    uint8_t *buf = malloc(OVL_ID_BYTES);
    if (!buf)
        return -ENOMEM;
    /* docs/disk-overlay.md, "Base identity": the first and last MiB, each
     * byte once, after the size. */
    uint64_t first = id->size < OVL_ID_BYTES ? id->size : OVL_ID_BYTES;
    uint64_t last = id->size > 2ull * OVL_ID_BYTES ? id->size - OVL_ID_BYTES : first;
    uint64_t h = ovl_hash(OVL_HASH_INIT, &id->size, sizeof id->size);
    uint8_t le[8];
    uint64_t sz = htole64(id->size);
    memcpy(le, &sz, 8);
    struct sha256_ctx sha;
    sha256_init(&sha);
    sha256_update(&sha, sizeof le, le);
    int r = hash_range(fd, buf, 0, first, &sha, &h);
    if (r == 0)
        r = hash_range(fd, buf, last, id->size - last, &sha, NULL);
    free(buf);
    if (r < 0)
        return r;
    id->hash = h;
    sha256_digest(&sha, OVL_SHA256_BYTES, id->sha256);
    return 0;
}

/* ---- whole transfers ---- */

/* Past the end of the file: zeroes where zero_eof is set, else -EIO. */
static int full_pread(int fd, void *buf, size_t len, uint64_t off, bool zero_eof)
{
    ssize_t n = pread_full(fd, buf, len, (off_t)off);
    if (n < 0)
        return (int)n;
    if ((size_t)n < len) {
        if (!zero_eof)
            return -EIO;
        memset((uint8_t *)buf + n, 0, len - (size_t)n);
    }
    return 0;
}

static int full_pwrite(int fd, const void *buf, size_t len, uint64_t off)
{
    ssize_t n = pwrite_full(fd, buf, len, (off_t)off);
    return n < 0 ? (int)n : 0;
}

/* The part [skip, skip + len) of an iovec list, into out (at most max
 * entries). Returns the entry count, or -EINVAL. */
static int iov_slice(const struct iovec *iov, unsigned niov, uint64_t skip, uint64_t len,
                     struct iovec *out, unsigned max)
{
    unsigned n = 0;
    for (unsigned i = 0; i < niov && len; i++) {
        if (skip >= iov[i].iov_len) {
            skip -= iov[i].iov_len;
            continue;
        }
        if (n == max)
            return -EINVAL;
        uint64_t take = iov[i].iov_len - skip;
        if (take > len)
            take = len;
        out[n++] = (struct iovec){ (uint8_t *)iov[i].iov_base + skip, (size_t)take };
        len -= take;
        skip = 0;
    }
    return len ? -EINVAL : (int)n;
}

static void iov_copy_out(const struct iovec *iov, unsigned niov, uint64_t skip, uint8_t *dst,
                         uint64_t len)
{
    for (unsigned i = 0; i < niov && len; i++) {
        if (skip >= iov[i].iov_len) {
            skip -= iov[i].iov_len;
            continue;
        }
        uint64_t take = iov[i].iov_len - skip;
        if (take > len)
            take = len;
        memcpy(dst, (uint8_t *)iov[i].iov_base + skip, take);
        dst += take; len -= take; skip = 0;
    }
}

/* preadv/pwritev of the slice [skip, skip + len) of iov at off, whole. */
static int xfer(int fd, bool write, const struct iovec *iov, unsigned niov, uint64_t skip,
                uint64_t len, uint64_t off)
{
    struct iovec v[IOV_MAX_SLICE];
    while (len) {
        int n = iov_slice(iov, niov, skip, len, v, IOV_MAX_SLICE);
        if (n < 0)
            return n;
        ssize_t r = write ? pwritev(fd, v, n, (off_t)off) : preadv(fd, v, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r < 0 ? -errno : -EIO;
        skip += (uint64_t)r; len -= (uint64_t)r; off += (uint64_t)r;
    }
    return 0;
}

static uint64_t iov_total(const struct iovec *iov, unsigned niov)
{
    uint64_t t = 0;
    for (unsigned i = 0; i < niov; i++)
        t += iov[i].iov_len;
    return t;
}

/* ---- create / open ---- */

static int try_reflink(int src, int dst)
{
    return ioctl(dst, FICLONE, src) < 0 ? -errno : 0;
}

static int write_new_overlay(int fd, int base_fd, const char *base, char *why, size_t wlen)
{
    struct ovl_base_id id;
    int r = ovl_base_identify(base_fd, &id);
    if (r < 0)
        return fail(why, wlen, r, "base %s: %s", base, strerror(-r));
    char abs[PATH_MAX];
    const char *p = realpath(base, abs) ? abs : base;
    struct ovl_header h;
    if (id.size == 0 || id.size > OVL_MAX_SIZE)
        return fail(why, wlen, -EINVAL, "base %s: size 0 or over 4 TiB", base);
    if (ovl_header_init(&h, &id, p) < 0)
        return fail(why, wlen, -ENAMETOOLONG, "base %s: path too long", base);
    uint8_t buf[OVL_HDR_SIZE];
    ovl_header_encode(&h, buf);
    if ((r = full_pwrite(fd, buf, sizeof buf, 0)) < 0 ||
        (ftruncate(fd, (off_t)(h.data_off + h.nblocks * OVL_BLOCK)) < 0 && (r = -errno)) ||
        (fdatasync(fd) < 0 && (r = -errno)))
        return fail(why, wlen, r, "overlay: writing the header: %s", strerror(-r));
    return 0;
}

static void fsync_dir_of(const char *path)
{
    char d[PATH_MAX];
    snprintf(d, sizeof d, "%s", path);
    char *s = strrchr(d, '/');
    if (s == d)
        s[1] = 0;
    else if (s)
        *s = 0;
    else
        snprintf(d, sizeof d, ".");
    int fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

/* New overlay files are written under a unique temporary name (mode 0600:
 * they hold guest data) and appear under their final name only once
 * complete and durable, without replacing anything: a crash never leaves a
 * half-written file that a later open would take for a (raw, all-zero)
 * disk. tmp_create: -EEXIST if final exists, else a new fd with its name in
 * tmp. tmp_publish: move it into place, no clobbering. */
static int tmp_create(const char *final, char *tmp, size_t tlen)
{
    struct stat st;             /* stat, not access(2): not on the seccomp list of the thread copying */
    if (lstat(final, &st) == 0)
        return -EEXIST;
    if ((size_t)snprintf(tmp, tlen, "%s.tmp.XXXXXX", final) >= tlen)
        return -ENAMETOOLONG;
    int fd = mkostemp(tmp, O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

static int tmp_publish(const char *tmp, const char *final)
{
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_NOREPLACE) == 0)
        return 0;
    if (errno != EINVAL && errno != ENOSYS)
        return -errno;
    if (link(tmp, final) < 0)           /* no RENAME_NOREPLACE here */
        return -errno;
    unlink(tmp);
    return 0;
}

/* The end of every tmp_create: r == 0 publishes tmp as final (a failure
 * told in why as "PREFIXfinal: error"), r < 0 removes it. */
static int tmp_finish(int r, const char *tmp, const char *final, const char *prefix, char *why,
                      size_t wlen)
{
    if (r == 0 && (r = tmp_publish(tmp, final)) < 0)
        fail(why, wlen, r, "%s%s: %s", prefix, final, strerror(-r));
    if (r < 0)
        unlink(tmp);
    else
        fsync_dir_of(final);
    return r;
}

int ovl_create(const char *base, const char *overlay, unsigned flags, enum ovl_kind *kind,
               char *why, size_t wlen)
{
    if (!base || !overlay || !*base || !*overlay)
        return fail(why, wlen, -EINVAL, "no base or overlay path");
    int bfd = open(base, O_RDONLY | O_CLOEXEC);
    if (bfd < 0)
        return fail(why, wlen, -errno, "base %s: %s", base, strerror(errno));
    char tmp[PATH_MAX];
    int fd = tmp_create(overlay, tmp, sizeof tmp);
    if (fd < 0) {
        int r = fail(why, wlen, fd, "overlay %s: %s", overlay, strerror(-fd));
        close(bfd);
        return r;
    }
    int r = -EOPNOTSUPP;
    if (!(flags & OVL_CREATE_NO_REFLINK))
        r = try_reflink(bfd, fd);
    if (r == 0) {
        if (kind)
            *kind = OVL_KIND_RAW;
        r = fdatasync(fd) < 0 ? -errno : 0;
    } else {
        if (kind)
            *kind = OVL_KIND_MOAT;
        r = write_new_overlay(fd, bfd, base, why, wlen);
    }
    close(fd);
    close(bfd);
    return tmp_finish(r, tmp, overlay, "overlay ", why, wlen);
}

int disk_lock(int fd, bool excl)
{
    const struct timespec step = { 0, 5 * 1000 * 1000 };
    for (int waited = 0;; waited += 5) {
        if (flock(fd, (excl ? LOCK_EX : LOCK_SH) | LOCK_NB) == 0)
            return 0;
        if (errno != EWOULDBLOCK || waited >= DISK_LOCK_WAIT_MS)
            return -errno;
        nanosleep(&step, NULL);
    }
}

static int lock_fd(int fd, bool excl, const char *what, const char *path, char *why, size_t wlen)
{
    int e = -disk_lock(fd, excl);
    if (e == 0)
        return 0;
    snprintf(why, wlen, "%s %s: %s", what, path,
             e == EWOULDBLOCK ? "in use by another process (locked)" : strerror(e));
    return -e;
}

static void free_disk(struct ovl_disk *d)
{
    /* unlocked before the close: another reference to the file (an I/O
     * ring's, torn down asynchronously) must not keep the lock */
    if (d->fd >= 0) {
        flock(d->fd, LOCK_UN);
        close(d->fd);
    }
    if (d->base_fd >= 0) {
        flock(d->base_fd, LOCK_UN);
        close(d->base_fd);
    }
    free(d->bm);
    free(d->bm_disk);
    pthread_mutex_destroy(&d->lock);
    free(d);
}

/* Open the overlay's base (base, else the path its header records), lock
 * it (lock) and check it is the file the overlay was made over; upgrade a
 * version 1 header (upgrade) to the base's SHA-256. 0 or -errno. */
static int open_base(struct ovl_disk *d, const char *base, const char *overlay, bool lock, bool upgrade,
                     char *why, size_t wlen)
{
    int r;
    const char *bp = base ? base : d->h.base_path;
    if (!*bp)
        return fail(why, wlen, -EINVAL, "overlay %s: %s", overlay, "no base path recorded; give one");
    d->base_fd = open(bp, O_RDONLY | O_CLOEXEC);
    if (d->base_fd < 0)
        return fail(why, wlen, -errno, "base %s: %s", bp, strerror(errno));
    if (lock && (r = lock_fd(d->base_fd, false, "base", bp, why, wlen)) < 0)
        return r;
    struct ovl_base_id id;
    if ((r = ovl_base_identify(d->base_fd, &id)) < 0)
        return fail(why, wlen, r, "base %s: %s", bp, strerror(-r));
    if (!ovl_base_matches(&d->h, &id)) {
        snprintf(why, wlen, "base %s has changed since overlay %s was made over it, or is another "
                 "file (size or SHA-256 of its first and last MiB differ): refusing it", bp, overlay);
        return -ESTALE;
    }
    if (upgrade) {      /* the old identity matched: record the new one */
        d->h.version = OVL_VERSION;
        memcpy(d->h.base.sha256, id.sha256, OVL_SHA256_BYTES);
        uint8_t nb[OVL_HDR_SIZE];
        ovl_header_encode(&d->h, nb);
        if ((r = full_pwrite(d->fd, nb, sizeof nb, 0)) < 0 || (fdatasync(d->fd) < 0 && (r = -errno)))
            return fail(why, wlen, r, "overlay %s: writing the upgraded header: %s", overlay, strerror(-r));
    }
    return 0;
}

/* Read the overlay's block bitmap into d->bm (d->bm_disk allocated for
 * its on-disk copy); refuse one marking blocks past the disk's end.
 * 0 or -errno. */
static int load_bitmap(struct ovl_disk *d, const char *overlay, char *why, size_t wlen)
{
    int r;
    d->nwords = ovl_bitmap_words(d->h.nblocks);
    d->bm = calloc(d->nwords, 8);
    d->bm_disk = calloc(d->nwords, 8);
    if (!d->bm || !d->bm_disk)
        return fail(why, wlen, -ENOMEM, "overlay %s: %s", overlay, "out of memory for the bitmap");
    if ((r = full_pread(d->fd, d->bm, d->nwords * 8, d->h.bitmap_off, true)) < 0)
        return fail(why, wlen, r, "overlay %s: reading the bitmap: %s", overlay, strerror(-r));
    for (size_t i = 0; i < d->nwords; i++)
        d->bm[i] = le64toh(d->bm[i]);
    if (!ovl_bitmap_tail_clean(d->bm, d->h.nblocks))
        return fail(why, wlen, -EINVAL, "overlay %s: malformed: %s", overlay,
                    "bitmap marks blocks past the end of the disk");
    return 0;
}

int ovl_open(const char *base, const char *overlay, unsigned flags, struct ovl_disk **out,
             char *why, size_t wlen)
{
    *out = NULL;
    if (!overlay || !*overlay)
        return fail(why, wlen, -EINVAL, "no overlay path");
    bool ro = flags & OVL_OPEN_READ_ONLY, lock = !(flags & OVL_OPEN_NO_LOCK);
    int r;
    if ((flags & OVL_OPEN_CREATE) && !ro && base && access(overlay, F_OK) < 0 && errno == ENOENT) {
        r = ovl_create(base, overlay, (flags & OVL_OPEN_NO_REFLINK) ? OVL_CREATE_NO_REFLINK : 0,
                       NULL, why, wlen);
        if (r < 0 && r != -EEXIST)
            return r;
    }
    struct ovl_disk *d = calloc(1, sizeof *d);
    if (!d)
        return fail(why, wlen, -ENOMEM, "out of memory");
    d->fd = d->base_fd = -1;
    d->read_only = ro;
    if (pthread_mutex_init(&d->lock, NULL)) {
        free(d);
        return fail(why, wlen, -ENOMEM, "out of memory");
    }
    d->fd = open(overlay, (ro ? O_RDONLY : O_RDWR) | O_CLOEXEC);
    if (d->fd < 0) {
        r = fail(why, wlen, -errno, "overlay %s: %s", overlay, strerror(errno));
        goto out_free;
    }
    struct stat st;
    if (fstat(d->fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        r = fail(why, wlen, -EINVAL, "overlay %s: %s", overlay, "not a regular file");
        goto out_free;
    }
    if (lock && (r = lock_fd(d->fd, !ro, "overlay", overlay, why, wlen)) < 0)
        goto out_free;
    uint8_t hb[OVL_HDR_SIZE];
    memset(hb, 0, sizeof hb);
    ssize_t n = pread(d->fd, hb, sizeof hb, 0);
    if (n < 0) {
        r = fail(why, wlen, -errno, "overlay %s: %s", overlay, strerror(errno));
        goto out_free;
    }
    const char *w = NULL;
    r = ovl_header_decode(hb, (size_t)n, &d->h, &w);
    if (r == -ENOTSUP) {                /* a plain raw image (reflink clone) */
        d->kind = OVL_KIND_RAW;
        d->vsize = (uint64_t)st.st_size;
        if (d->vsize < 512) {
            r = fail(why, wlen, -EINVAL, "overlay %s: %s", overlay, "raw image smaller than one sector");
            goto out_free;
        }
        *out = d;
        return 0;
    }
    if (r < 0) {
        r = fail(why, wlen, r, "overlay %s: malformed: %s", overlay, w);
        goto out_free;
    }
    d->kind = OVL_KIND_MOAT;
    d->vsize = d->h.vsize;
    bool upgrade = d->h.version == OVL_VERSION_V1;
    if (upgrade && (!(flags & OVL_OPEN_UPGRADE) || ro)) {
        r = fail(why, wlen, -EPROTO, "overlay %s: format version 1, which identifies its base only by "
                 "size and a 64-bit FNV-1a hash of its first MiB (a forged base passes): run "
                 "`moat disk upgrade %s` (with --base BASE if the base moved) to check the base and "
                 "record its SHA-256", overlay, overlay);
        goto out_free;
    }
    if (!upgrade && (flags & OVL_OPEN_UPGRADE)) {
        r = fail(why, wlen, -EALREADY, "overlay %s: already format version %u", overlay, d->h.version);
        goto out_free;
    }
    if ((r = open_base(d, base, overlay, lock, upgrade, why, wlen)) < 0 ||
        (r = load_bitmap(d, overlay, why, wlen)) < 0)
        goto out_free;
    memcpy(d->bm_disk, d->bm, d->nwords * 8);
    *out = d;
    return 0;
out_free:
    free_disk(d);
    return r;
}

enum ovl_kind ovl_kind_of(const struct ovl_disk *d) { return d->kind; }
uint64_t ovl_size(const struct ovl_disk *d) { return d->vsize; }
int ovl_raw_fd(const struct ovl_disk *d) { return d->kind == OVL_KIND_RAW ? d->fd : -1; }
const struct ovl_header *ovl_hdr(const struct ovl_disk *d)
{
    return d->kind == OVL_KIND_MOAT ? &d->h : NULL;
}

uint64_t ovl_allocated(struct ovl_disk *d)
{
    if (d->kind != OVL_KIND_MOAT)
        return 0;
    pthread_mutex_lock(&d->lock);
    uint64_t n = ovl_bit_count(d->bm, d->h.nblocks);
    pthread_mutex_unlock(&d->lock);
    return n;
}

bool ovl_block_allocated(struct ovl_disk *d, uint64_t blk)
{
    if (d->kind != OVL_KIND_MOAT)
        return false;
    pthread_mutex_lock(&d->lock);
    bool b = ovl_bit_get(d->bm, d->h.nblocks, blk);
    pthread_mutex_unlock(&d->lock);
    return b;
}

/* ---- I/O ---- */

static bool range_ok(const struct ovl_disk *d, uint64_t off, uint64_t len)
{
    return off + len >= off && off + len <= d->vsize;
}

static int read_extent(struct ovl_disk *d, const struct ovl_extent *e, const struct iovec *iov,
                       unsigned niov, uint64_t skip)
{
    return e->in_overlay ? xfer(d->fd, false, iov, niov, skip, e->len, d->h.data_off + e->off)
                         : xfer(d->base_fd, false, iov, niov, skip, e->len, e->off);
}

/* Write block blk of the overlay with [boff, boff + n) taken from src (iov
 * slice at skip, or zeroes when iov is NULL) and the rest from the block's
 * current contents (the base's, since its bit is clear). */
static int copy_up(struct ovl_disk *d, uint64_t blk, uint64_t boff, uint64_t n,
                   const struct iovec *iov, unsigned niov, uint64_t skip)
{
    uint8_t buf[OVL_BLOCK];
    uint64_t at = blk << OVL_BLOCK_SHIFT;
    uint64_t have = d->vsize - at < OVL_BLOCK ? d->vsize - at : OVL_BLOCK;
    int r = full_pread(d->base_fd, buf, (size_t)have, at, true);
    if (r < 0)
        return r;
    memset(buf + have, 0, OVL_BLOCK - have);
    if (iov)
        iov_copy_out(iov, niov, skip, buf + boff, n);
    else
        memset(buf + boff, 0, n);
    return full_pwrite(d->fd, buf, OVL_BLOCK, d->h.data_off + at);
}

static int punch(struct ovl_disk *d, uint64_t off, uint64_t len)
{
    if (fallocate(d->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len) == 0)
        return 0;
    if (errno != EOPNOTSUPP && errno != EINVAL)
        return -errno;
    static const uint8_t z[OVL_BLOCK];
    while (len) {
        uint64_t n = len < OVL_BLOCK ? len : OVL_BLOCK;
        int r = full_pwrite(d->fd, z, (size_t)n, off);
        if (r < 0)
            return r;
        off += n; len -= n;
    }
    return 0;
}

/* iov NULL: write zeroes. */
static int write_extent(struct ovl_disk *d, const struct ovl_extent *e, const struct iovec *iov,
                        unsigned niov, uint64_t skip)
{
    int r;
    if (e->in_overlay)
        return iov ? xfer(d->fd, true, iov, niov, skip, e->len, d->h.data_off + e->off)
                   : punch(d, d->h.data_off + e->off, e->len);
    uint64_t fb = e->off >> OVL_BLOCK_SHIFT, lb = (e->off + e->len - 1) >> OVL_BLOCK_SHIFT;
    uint64_t end = e->off + e->len;
    uint64_t mid_start = fb, mid_end = lb + 1;      /* whole blocks [mid_start, mid_end) */
    if (e->off & (OVL_BLOCK - 1) || end < ((fb + 1) << OVL_BLOCK_SHIFT)) {
        uint64_t boff = e->off & (OVL_BLOCK - 1);
        uint64_t n = end < ((fb + 1) << OVL_BLOCK_SHIFT) ? e->len : OVL_BLOCK - boff;
        if ((r = copy_up(d, fb, boff, n, iov, niov, skip)) < 0)
            return r;
        mid_start = fb + 1;
    }
    if (lb >= mid_start && (end & (OVL_BLOCK - 1))) {
        uint64_t n = end & (OVL_BLOCK - 1);
        if ((r = copy_up(d, lb, 0, n, iov, niov, skip + (end - n - e->off))) < 0)
            return r;
        mid_end = lb;
    }
    if (mid_end > mid_start) {
        uint64_t at = mid_start << OVL_BLOCK_SHIFT, bytes = (mid_end - mid_start) << OVL_BLOCK_SHIFT;
        r = iov ? xfer(d->fd, true, iov, niov, skip + (at - e->off), bytes, d->h.data_off + at)
                : punch(d, d->h.data_off + at, bytes);
        if (r < 0)
            return r;
    }
    for (uint64_t b = fb; b <= lb; b++)
        ovl_bit_set(d->bm, d->h.nblocks, b);
    return 0;
}

/* Extent by extent: in the overlay or in the base. */
static int moat_rw(struct ovl_disk *d, bool write, const struct iovec *iov, unsigned niov,
                   uint64_t off, uint64_t len)
{
    uint64_t skip = 0;
    while (len) {
        struct ovl_extent e;
        int r = ovl_next_extent(d->bm, d->h.nblocks, d->vsize, off, len, &e);
        if (r < 0)
            return -EINVAL;
        r = write ? write_extent(d, &e, iov, niov, skip) : read_extent(d, &e, iov, niov, skip);
        if (r < 0)
            return r;
        if (write)
            d->data_dirty = true;
        off += e.len; len -= e.len; skip += e.len;
    }
    return 0;
}

/* The checks and the locking the three entry points share; iov NULL on a
 * write zeroes the range. */
static int ovl_io(struct ovl_disk *d, bool write, const struct iovec *iov, unsigned niov,
                  uint64_t off, uint64_t len)
{
    if (write && d->read_only)
        return -EROFS;
    if (!range_ok(d, off, len))
        return -EINVAL;
    if (!len)
        return 0;
    if (d->kind == OVL_KIND_RAW) {
        if (iov)
            return xfer(d->fd, write, iov, niov, 0, len, off);
        if (fallocate(d->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len) < 0)
            return -errno;
        return 0;
    }
    pthread_mutex_lock(&d->lock);
    int r = moat_rw(d, write, iov, niov, off, len);
    pthread_mutex_unlock(&d->lock);
    return r;
}

int ovl_preadv(struct ovl_disk *d, const struct iovec *iov, unsigned niov, uint64_t off)
{
    return ovl_io(d, false, iov, niov, off, iov_total(iov, niov));
}

int ovl_pwritev(struct ovl_disk *d, const struct iovec *iov, unsigned niov, uint64_t off)
{
    return ovl_io(d, true, iov, niov, off, iov_total(iov, niov));
}

int ovl_zero(struct ovl_disk *d, uint64_t off, uint64_t len)
{
    return ovl_io(d, true, NULL, 0, off, len);
}

/* Data first, then the bitmap pages that changed, then durable again. */
static int moat_flush(struct ovl_disk *d)
{
    if (fdatasync(d->fd) < 0)
        return -errno;
    d->data_dirty = false;
    const size_t wpp = OVL_BLOCK / 8;         /* words per bitmap page */
    bool wrote = false;
    for (size_t p = 0; p * wpp < d->nwords; p++) {
        size_t w0 = p * wpp, nw = d->nwords - w0 < wpp ? d->nwords - w0 : wpp;
        if (!memcmp(d->bm + w0, d->bm_disk + w0, nw * 8))
            continue;
        uint64_t page[OVL_BLOCK / 8];
        for (size_t i = 0; i < nw; i++)
            page[i] = htole64(d->bm[w0 + i]);
        int r = full_pwrite(d->fd, page, nw * 8, d->h.bitmap_off + w0 * 8);
        if (r < 0)
            return r;
        wrote = true;
    }
    if (wrote) {
        if (fdatasync(d->fd) < 0)
            return -errno;
        memcpy(d->bm_disk, d->bm, d->nwords * 8);
    }
    return 0;
}

int ovl_flush(struct ovl_disk *d)
{
    if (d->read_only)
        return 0;
    if (d->kind == OVL_KIND_RAW)
        return fdatasync(d->fd) < 0 ? -errno : 0;
    pthread_mutex_lock(&d->lock);
    int r = moat_flush(d);
    pthread_mutex_unlock(&d->lock);
    return r;
}

int ovl_close(struct ovl_disk *d)
{
    if (!d)
        return 0;
    int r = ovl_flush(d);
    free_disk(d);
    return r;
}

/* ---- clone ---- */

static int sparse_copy(int src, int dst, uint64_t size)
{
    enum { CHUNK = 1 << 20 };
    uint8_t *buf = malloc(CHUNK);
    if (!buf)
        return -ENOMEM;
    int r = 0;
    off_t pos = 0;
    while ((uint64_t)pos < size) {
        off_t data = lseek(src, pos, SEEK_DATA);
        if (data < 0) {
            if (errno != ENXIO)
                r = -errno;
            break;                          /* ENXIO: only a hole is left */
        }
        off_t hole = lseek(src, data, SEEK_HOLE);
        if (hole < 0) {
            r = -errno;
            break;
        }
        for (off_t o = data; o < hole && r == 0;) {
            size_t n = (size_t)(hole - o < CHUNK ? hole - o : CHUNK);
            if ((r = full_pread(src, buf, n, (uint64_t)o, false)) < 0)
                break;
            /* Keep all-zero chunks holes. */
            bool zero = true;
            for (size_t i = 0; i < n && zero; i++)
                zero = buf[i] == 0;
            if (!zero)
                r = full_pwrite(dst, buf, n, (uint64_t)o);
            o += (off_t)n;
        }
        if (r < 0)
            break;
        pos = hole;
    }
    free(buf);
    if (r == 0 && ftruncate(dst, (off_t)size) < 0)
        r = -errno;
    return r;
}

int ovl_clone(const char *src, const char *dst, char *why, size_t wlen)
{
    int sfd = open(src, O_RDONLY | O_CLOEXEC);
    if (sfd < 0)
        return fail(why, wlen, -errno, "%s: %s", src, strerror(errno));
    int r = lock_fd(sfd, false, "overlay", src, why, wlen);
    struct stat st;
    if (r == 0 && fstat(sfd, &st) < 0)
        r = fail(why, wlen, -errno, "%s: %s", src, strerror(errno));
    if (r == 0 && !S_ISREG(st.st_mode))
        r = fail(why, wlen, -EINVAL, "%s: %s", src, "not a regular file");
    if (r < 0) {
        close(sfd);
        return r;
    }
    char tmp[PATH_MAX];
    int dfd = tmp_create(dst, tmp, sizeof tmp);
    if (dfd < 0) {
        r = fail(why, wlen, dfd, "%s: %s", dst, strerror(-dfd));
        close(sfd);
        return r;
    }
    if (try_reflink(sfd, dfd) < 0) {
        r = sparse_copy(sfd, dfd, (uint64_t)st.st_size);
        if (r < 0)
            snprintf(why, wlen, "copying %s to %s: %s", src, dst, strerror(-r));
    }
    if (r == 0 && fsync(dfd) < 0)
        r = fail(why, wlen, -errno, "%s: %s", dst, strerror(errno));
    close(dfd);
    close(sfd);
    return tmp_finish(r, tmp, dst, "", why, wlen);
}

/* Clone through the descriptor d already holds (and has locked): no new
 * open, no flock. The disk's mutex keeps this process's requests out while
 * the file is flushed and copied; d's exclusive flock keeps every other
 * process out. The caller keeps the device stopped, so that nothing is in
 * flight outside the mutex (the raw kind's fast path). */
int ovl_clone_disk(struct ovl_disk *d, const char *dst, char *why, size_t wlen)
{
    if (!d || !dst || !*dst)
        return fail(why, wlen, -EINVAL, "no overlay or destination");
    pthread_mutex_lock(&d->lock);
    int r = 0;
    if (!d->read_only)
        r = d->kind == OVL_KIND_MOAT ? moat_flush(d) : (fdatasync(d->fd) < 0 ? -errno : 0);
    struct stat st;
    if (r == 0 && fstat(d->fd, &st) < 0)
        r = -errno;
    if (r < 0) {
        pthread_mutex_unlock(&d->lock);
        return fail(why, wlen, r, "flushing the overlay: %s", strerror(-r));
    }
    char tmp[PATH_MAX];
    int dfd = tmp_create(dst, tmp, sizeof tmp);
    if (dfd < 0) {
        r = fail(why, wlen, dfd, "%s: %s", dst, strerror(-dfd));
        pthread_mutex_unlock(&d->lock);
        return r;
    }
    if (try_reflink(d->fd, dfd) < 0) {
        r = sparse_copy(d->fd, dfd, (uint64_t)st.st_size);
        if (r < 0)
            snprintf(why, wlen, "copying the overlay to %s: %s", dst, strerror(-r));
    }
    pthread_mutex_unlock(&d->lock);
    if (r == 0 && fsync(dfd) < 0)
        r = fail(why, wlen, -errno, "%s: %s", dst, strerror(errno));
    close(dfd);
    return tmp_finish(r, tmp, dst, "", why, wlen);
}
