/* Copy-on-write disks as library calls (vmm/sandbox/disk.h,
 * docs/disk-overlay.md): create, info, clone, diff (blocks, and the files
 * owning them through debugfs), export, upgrade. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "vmm/sandbox/disk.h"

/* r (< 0) with why, or r's text when why is empty. */
static int disk_err(struct sbx_err *err, int r, const char *why)
{
    return sandbox_err(err, r, "%s", why[0] ? why : SBX_STRERROR(-r));
}

static int open_ro(const char *base, const char *path, struct ovl_disk **d, struct sbx_err *err)
{
    char why[512] = "";
    int r = ovl_open(base, path, OVL_OPEN_READ_ONLY | OVL_OPEN_NO_LOCK, d, why, sizeof why);
    return r < 0 ? disk_err(err, r, why) : 0;
}

int sandbox_disk_create(const char *base, const char *overlay, bool no_reflink, enum ovl_kind *kind,
                        struct sbx_err *err)
{
    char why[512] = "";
    int r = ovl_create(base, overlay, no_reflink ? OVL_CREATE_NO_REFLINK : 0, kind, why, sizeof why);
    return r < 0 ? disk_err(err, r, why) : 0;
}

int sandbox_disk_info(const char *base, const char *overlay, struct sbx_disk_info *info,
                      struct sbx_err *err)
{
    memset(info, 0, sizeof *info);
    struct ovl_disk *d;
    int r = open_ro(base, overlay, &d, err);
    if (r < 0)
        return r;
    struct stat st;
    info->used = stat(overlay, &st) == 0 ? (uint64_t)st.st_blocks * 512 : 0;
    info->kind = ovl_kind_of(d);
    const struct ovl_header *h = ovl_hdr(d);
    if (h) {
        info->version = h->version;
        snprintf(info->base, sizeof info->base, "%s", base ? base : h->base_path);
        info->base_size = h->base.size;
        memcpy(info->base_sha256, h->base.sha256, OVL_SHA256_BYTES);
        info->allocated = ovl_allocated(d);
        info->nblocks = h->nblocks;
    }
    info->vsize = ovl_size(d);
    ovl_close(d);
    return 0;
}

int sandbox_disk_clone(const char *src, const char *dst, struct sbx_err *err)
{
    char why[512] = "";
    int r = ovl_clone(src, dst, why, sizeof why);
    return r < 0 ? disk_err(err, r, why) : 0;
}

/* Write the disk's whole view to a new sparse file: a temporary one (its
 * path in the template path) or path, which must not exist. 0 or -errno. */
static int materialize(struct ovl_disk *d, char *path, bool named)
{
    int fd = named ? open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644) : mkstemp(path);
    if (fd < 0)
        return -errno;
    enum { CHUNK = 1 << 20 };
    uint8_t *buf = malloc(CHUNK);
    int r = buf ? 0 : -ENOMEM;
    uint64_t size = ovl_size(d);
    for (uint64_t off = 0; r == 0 && off < size; off += CHUNK) {
        size_t n = (size_t)(size - off < CHUNK ? size - off : CHUNK);
        struct iovec v = { buf, n };
        if ((r = ovl_preadv(d, &v, 1, off)) < 0)
            break;
        bool zero = true;
        for (size_t i = 0; i < n && zero; i++)
            zero = buf[i] == 0;
        if (!zero && pwrite(fd, buf, n, (off_t)off) != (ssize_t)n)
            r = -EIO;
    }
    if (r == 0 && ftruncate(fd, (off_t)size) < 0)
        r = -errno;
    free(buf);
    close(fd);
    if (r < 0)
        unlink(path);
    return r;
}

int sandbox_disk_export(const char *base, const char *overlay, const char *raw,
                        enum sbx_disk_step *step, struct sbx_err *err)
{
    *step = SBX_DISK_OPEN;
    struct ovl_disk *d;
    int r = open_ro(base, overlay, &d, err);
    if (r < 0)
        return r;
    *step = SBX_DISK_WORK;
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s", raw) >= (int)sizeof path)
        r = -ENAMETOOLONG;
    else
        r = materialize(d, path, true);
    ovl_close(d);
    return r < 0 ? sandbox_err(err, r, "%s: %s", raw, SBX_STRERROR(-r)) : 0;
}

int sandbox_disk_upgrade(const char *base, const char *overlay, struct sbx_err *err)
{
    char why[512] = "";
    struct ovl_disk *d;
    int r = ovl_open(base, overlay, OVL_OPEN_UPGRADE, &d, why, sizeof why);
    if (r < 0)
        return disk_err(err, r, why);
    if ((r = ovl_close(d)) < 0)
        return sandbox_err(err, r, "%s: %s", overlay, SBX_STRERROR(-r));
    return 0;
}

/* ---- diff ---- */

static int read_block(struct ovl_disk *d, int base_fd, uint64_t blk, uint64_t vsize, uint8_t *buf)
{
    uint64_t off = blk * OVL_BLOCK, n = vsize - off < OVL_BLOCK ? vsize - off : OVL_BLOCK;
    memset(buf, 0, OVL_BLOCK);
    if (d) {
        struct iovec v = { buf, (size_t)n };
        return ovl_preadv(d, &v, 1, off);
    }
    ssize_t r = pread(base_fd, buf, (size_t)n, (off_t)off);
    return r == (ssize_t)n ? 0 : -EIO;
}

/* a's base (base, else the recorded path) opened, of a's size: its
 * descriptor, or -errno with why. */
static int open_base(const char *base, struct ovl_disk *a, const char *pa, struct sbx_err *err)
{
    const struct ovl_header *h = ovl_hdr(a);
    const char *bp = base ? base : h ? h->base_path : NULL;
    if (!bp)
        return sandbox_err(err, -EINVAL, "%s is a raw image: give --base or a second overlay", pa);
    int fd = open(bp, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sandbox_err(err, -errno, "base %s: %s", bp, SBX_STRERROR(errno));
    struct stat st;
    if (fstat(fd, &st) < 0 || (uint64_t)st.st_size != ovl_size(a)) {
        close(fd);
        return sandbox_err(err, -EINVAL, "base %s: size differs from %s", bp, pa);
    }
    return fd;
}

/* Compare a with b (or the base on base_fd) block by block, reporting runs
 * of differing blocks to range and filling res. */
static int diff_blocks(struct ovl_disk *a, struct ovl_disk *b, int base_fd, sbx_disk_range_fn range,
                       void *arg, struct sbx_disk_diff *res, struct sbx_err *err)
{
    uint64_t vsize = ovl_size(a), nblocks = (vsize + OVL_BLOCK - 1) / OVL_BLOCK;
    /* Blocks to compare: those in either overlay (moat format); every block
     * when one is a raw image. */
    bool all = ovl_kind_of(a) == OVL_KIND_RAW || (b && ovl_kind_of(b) == OVL_KIND_RAW);
    uint64_t run_start = 0;
    bool in_run = false;
    uint8_t *x = malloc(2 * OVL_BLOCK), *y = x + OVL_BLOCK;
    res->blocks = malloc(SBX_DISK_LISTED * sizeof *res->blocks);
    if (!x || !res->blocks) {
        free(x);
        return sandbox_err(err, -ENOMEM, "%s", SBX_STRERROR(ENOMEM));
    }
    int r = 0;
    for (uint64_t blk = 0; r == 0 && blk <= nblocks; blk++) {
        bool differs = false;
        if (blk < nblocks && (all || ovl_block_allocated(a, blk) || (b && ovl_block_allocated(b, blk)))) {
            if (read_block(a, -1, blk, vsize, x) < 0 || read_block(b, base_fd, blk, vsize, y) < 0) {
                r = sandbox_err(err, -EIO, "reading block %" PRIu64 " failed", blk);
                break;
            }
            differs = memcmp(x, y, OVL_BLOCK) != 0;
        }
        if (differs) {
            res->ndiff++;
            if (res->nblocks < SBX_DISK_LISTED)
                res->blocks[res->nblocks++] = blk;
            if (!in_run) {
                in_run = true;
                run_start = blk;
            }
        } else if (in_run) {
            in_run = false;
            res->nranges++;
            r = range(arg, run_start, blk - 1);
        }
    }
    free(x);
    return r;
}

int sandbox_disk_diff(const char *base, const char *pa, const char *pb, sbx_disk_range_fn range,
                      void *arg, struct sbx_disk_diff *res, enum sbx_disk_step *step,
                      struct sbx_err *err)
{
    memset(res, 0, sizeof *res);
    *step = SBX_DISK_OPEN;
    struct ovl_disk *a = NULL, *b = NULL;
    int base_fd = -1, r = open_ro(base, pa, &a, err);
    if (r < 0)
        return r;
    if (pb && (r = open_ro(base, pb, &b, err)) < 0)
        goto out;
    *step = SBX_DISK_WORK;
    if (!pb) {
        if ((r = base_fd = open_base(base, a, pa, err)) < 0)
            goto out;
    } else if (ovl_size(a) != ovl_size(b)) {
        r = sandbox_err(err, -EINVAL, "%s and %s differ in size", pa, pb);
        goto out;
    }
    r = diff_blocks(a, b, base_fd, range, arg, res, err);
out:
    res->disk = b ? b : a;
    ovl_close(b ? a : NULL);
    if (base_fd >= 0)
        close(base_fd);
    return r;
}

void sandbox_disk_diff_release(struct sbx_disk_diff *res)
{
    free(res->blocks);
    res->blocks = NULL;
    ovl_close(res->disk);
    res->disk = NULL;
}

/* ---- the files owning changed blocks ---- */

static bool have_debugfs(void)
{
    return system("command -v debugfs >/dev/null 2>&1") == 0;
}

/* The filesystem's block size from debugfs stats on img; 0 unknown. */
static unsigned fs_block_size(const char *img)
{
    char cmd[256], line[512];
    /* -n: a live filesystem's image (a running sandbox's) may have bitmaps
     * whose checksums do not match yet; debugfs would refuse to open it. */
    snprintf(cmd, sizeof cmd, "debugfs -n -R stats %s 2>/dev/null", img);
    FILE *p = popen(cmd, "r");
    unsigned bs = 0;
    while (p && fgets(line, sizeof line, p))
        if (sscanf(line, "Block size: %u", &bs) == 1)
            break;
    if (p)
        pclose(p);
    return bs;
}

/* icheck: the inodes owning the 4 KiB blocks (in fs blocks of bs bytes),
 * at most SBX_DISK_LISTED of them, into inodes. Their number, or -EIO. */
static long icheck(const char *img, const char *req, unsigned bs, const uint64_t *blocks, size_t n,
                   unsigned long *inodes)
{
    FILE *rf = fopen(req, "w");
    if (!rf)
        return -EIO;
    fprintf(rf, "icheck");
    unsigned per = OVL_BLOCK / bs;
    for (size_t i = 0; i < n; i++)
        for (unsigned j = 0; j < per; j++)
            fprintf(rf, " %" PRIu64, blocks[i] * per + j);
    fprintf(rf, "\n");
    fclose(rf);
    char cmd[256], line[512];
    snprintf(cmd, sizeof cmd, "debugfs -n -f %s %s 2>/dev/null", req, img);
    FILE *p = popen(cmd, "r");
    size_t ni = 0;
    while (p && fgets(line, sizeof line, p)) {
        unsigned long blk, ino;
        if (sscanf(line, "%lu %lu", &blk, &ino) != 2)
            continue;
        bool seen = false;
        for (size_t k = 0; k < ni && !seen; k++)
            seen = inodes[k] == ino;
        if (!seen && ni < SBX_DISK_LISTED)
            inodes[ni++] = ino;
    }
    if (p)
        pclose(p);
    return (long)ni;
}

/* ncheck: the paths of the inodes, each to file. */
static void ncheck(const char *img, const char *req, const unsigned long *inodes, size_t ni,
                   sbx_disk_file_fn file, void *arg)
{
    FILE *rf = fopen(req, "w");
    if (!rf)
        return;
    fprintf(rf, "ncheck");
    for (size_t k = 0; k < ni; k++)
        fprintf(rf, " %lu", inodes[k]);
    fprintf(rf, "\n");
    fclose(rf);
    char cmd[256], line[512];
    snprintf(cmd, sizeof cmd, "debugfs -n -f %s %s 2>/dev/null", req, img);
    FILE *p = popen(cmd, "r");
    while (p && fgets(line, sizeof line, p)) {
        unsigned long ino;
        char name[400];
        if (sscanf(line, "%lu %399[^\n]", &ino, name) == 2)
            file(arg, name + (name[0] == '/' && name[1] == '/'), ino);
    }
    if (p)
        pclose(p);
}

/* The files owning the blocks of the materialized image img (block size
 * bs), debugfs's requests written to a temporary file. */
static int list_files(const char *img, unsigned bs, const uint64_t *blocks, size_t n,
                      sbx_disk_file_fn file, void *arg)
{
    char req[] = "/tmp/moat-diffreq-XXXXXX";
    int rfd = mkstemp(req);
    if (rfd < 0)
        return -EIO;
    close(rfd);
    unsigned long *inodes = malloc(SBX_DISK_LISTED * sizeof *inodes);
    long ni = inodes ? icheck(img, req, bs, blocks, n, inodes) : -ENOMEM;
    /* ncheck names no path for the root directory: its entries changed
     * (a file created, renamed or deleted there). */
    for (long k = 0; k < ni; k++)
        if (inodes[k] == 2)
            file(arg, "/", 2);
    if (ni > 0)
        ncheck(img, req, inodes, (size_t)ni, file, arg);
    free(inodes);
    unlink(req);
    return ni < 0 ? (int)ni : 0;
}

int sandbox_disk_files(const struct sbx_disk_diff *d, sbx_disk_file_fn file, void *arg,
                       struct sbx_err *err)
{
    if (!have_debugfs())
        return sandbox_err(err, 0, "debugfs not found; block ranges only");
    char img[] = "/tmp/moat-diff-XXXXXX";
    int r = materialize(d->disk, img, false);
    if (r < 0)
        return sandbox_err(err, r, "%s", SBX_STRERROR(-r));
    unsigned bs = fs_block_size(img);
    if (bs != 1024 && bs != 2048 && bs != 4096)
        sandbox_err(err, 0, "not an ext2/3/4 image");
    else
        r = list_files(img, bs, d->blocks, d->nblocks, file, arg);
    unlink(img);
    return r;
}
