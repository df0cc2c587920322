/* moat disk: copy-on-write overlays (devices/blk/overlay_disk.h,
 * docs/disk-overlay.md): create, info, clone, diff. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices/blk/overlay_disk.h"
#include "vmm/cli/cli.h"

static const char usage_disk[] =
    "usage: moat disk create [--no-reflink] --base BASE OVERLAY\n"
    "       moat disk info [--base BASE] OVERLAY\n"
    "       moat disk clone OVERLAY NEW\n"
    "       moat disk diff [--base BASE] [--files] OVERLAY [OVERLAY_B]\n"
    "       moat disk export [--base BASE] OVERLAY RAW\n"
    "       moat disk upgrade [--base BASE] OVERLAY\n"
    "\n"
    "Copy-on-write disks: BASE is shared read-only, each sandbox writes to its\n"
    "own OVERLAY (moat run --drive BASE,overlay=OVERLAY creates it if missing).\n"
    "  create   a reflink of BASE where the filesystem can (a plain raw image),\n"
    "           else moat's sparse overlay format; --no-reflink: always the latter\n"
    "  info     kind, base, virtual size, blocks in the overlay, space used\n"
    "  clone    copy an overlay (reflink, or a sparse copy): forks and pins\n"
    "  diff     the 4 KiB blocks whose contents differ between OVERLAY and\n"
    "           OVERLAY_B (or OVERLAY's base), one range per line: FIRST-LAST\n"
    "           (block numbers; bytes = block * 4096); a summary on stderr.\n"
    "           --files (ext4 images, needs debugfs): the files owning them\n"
    "  export   write the disk as the guest sees it to a new sparse raw image\n"
    "  upgrade  a format-1 overlay: check its base by the old identity (size,\n"
    "           FNV-1a of the first MiB) and record the base's SHA-256 (format 2)\n"
    "--base BASE overrides the base path recorded in a moat-format overlay.\n";

static int disk_usage(void)
{
    fputs(usage_disk, stderr);
    return EXIT_USAGE;
}

static int open_ro(const char *base, const char *path, struct ovl_disk **d)
{
    char why[512] = "";
    int r = ovl_open(base, path, OVL_OPEN_READ_ONLY | OVL_OPEN_NO_LOCK, d, why, sizeof why);
    if (r < 0)
        fprintf(stderr, "moat: disk: %s\n", why[0] ? why : strerror(-r));
    return r;
}

static int disk_create(int argc, char **argv)
{
    const char *base = NULL;
    unsigned flags = 0;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--base") && i + 1 < argc)
            base = argv[++i];
        else if (!strcmp(argv[i], "--no-reflink"))
            flags |= OVL_CREATE_NO_REFLINK;
        else
            return disk_usage();
    }
    if (!base || i != argc - 1)
        return disk_usage();
    char why[512] = "";
    enum ovl_kind k;
    int r = ovl_create(base, argv[i], flags, &k, why, sizeof why);
    if (r < 0) {
        fprintf(stderr, "moat: disk create: %s\n", why[0] ? why : strerror(-r));
        return EXIT_VMM_ERROR;
    }
    printf("%s: %s over %s\n", argv[i], k == OVL_KIND_RAW ? "reflink (raw image)" : "moat overlay",
           base);
    return 0;
}

/* The options of info and export: [--base BASE]. The index of the first
 * operand, or -1 for anything else. */
static int base_opt(int argc, char **argv, const char **base)
{
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--base") && i + 1 < argc)
            *base = argv[++i];
        else
            return -1;
    }
    return i;
}

static int disk_info(int argc, char **argv)
{
    const char *base = NULL;
    int i = base_opt(argc, argv, &base);
    if (i < 0)
        return disk_usage();
    if (i != argc - 1)
        return disk_usage();
    struct ovl_disk *d;
    if (open_ro(base, argv[i], &d) < 0)
        return EXIT_VMM_ERROR;
    struct stat st;
    uint64_t used = stat(argv[i], &st) == 0 ? (uint64_t)st.st_blocks * 512 : 0;
    const struct ovl_header *h = ovl_hdr(d);
    printf("overlay: %s\n", argv[i]);
    if (h)
        printf("format: moat overlay v%u\n", h->version);
    else
        printf("format: raw image (reflink)\n");
    if (h) {
        printf("base: %s\n", base ? base : h->base_path);
        printf("base identity: size %" PRIu64 ", SHA-256 (size, first and last MiB) ", h->base.size);
        for (unsigned k = 0; k < OVL_SHA256_BYTES; k++)
            printf("%02x", h->base.sha256[k]);
        printf("\n");
    }
    printf("virtual size: %" PRIu64 "\n", ovl_size(d));
    if (h)
        printf("blocks allocated: %" PRIu64 " of %" PRIu64 " (4 KiB)\n", ovl_allocated(d), h->nblocks);
    printf("space used: %" PRIu64 "\n", used);
    ovl_close(d);
    return 0;
}

static int disk_clone(int argc, char **argv)
{
    if (argc != 3)
        return disk_usage();
    char why[512] = "";
    int r = ovl_clone(argv[1], argv[2], why, sizeof why);
    if (r < 0) {
        fprintf(stderr, "moat: disk clone: %s\n", why[0] ? why : strerror(-r));
        return EXIT_VMM_ERROR;
    }
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

static bool have_debugfs(void)
{
    return system("command -v debugfs >/dev/null 2>&1") == 0;
}

/* The files owning the changed 4 KiB blocks (at most 4096 of them), via
 * debugfs icheck + ncheck on the materialized image. */
static int list_files(struct ovl_disk *d, const uint64_t *blocks, size_t n)
{
    if (!have_debugfs()) {
        fprintf(stderr, "moat: disk diff --files: debugfs not found; block ranges only\n");
        return 0;
    }
    char img[] = "/tmp/moat-diff-XXXXXX";
    int r = materialize(d, img, false);
    if (r < 0) {
        fprintf(stderr, "moat: disk diff --files: %s\n", strerror(-r));
        return r;
    }
    char cmd[256];
    /* -n: a live filesystem's image (a running sandbox's) may have bitmaps
     * whose checksums do not match yet; debugfs would refuse to open it. */
    snprintf(cmd, sizeof cmd, "debugfs -n -R stats %s 2>/dev/null", img);
    FILE *p = popen(cmd, "r");
    unsigned bs = 0;
    char line[512];
    while (p && fgets(line, sizeof line, p))
        if (sscanf(line, "Block size: %u", &bs) == 1)
            break;
    if (p)
        pclose(p);
    if (bs != 1024 && bs != 2048 && bs != 4096) {
        fprintf(stderr, "moat: disk diff --files: not an ext2/3/4 image\n");
        unlink(img);
        return 0;
    }
    /* icheck: fs blocks -> inodes. */
    char req[] = "/tmp/moat-diffreq-XXXXXX";
    int rfd = mkstemp(req);
    FILE *rf = rfd >= 0 ? fdopen(rfd, "w") : NULL;
    if (!rf) {
        unlink(img);
        return -EIO;
    }
    fprintf(rf, "icheck");
    unsigned per = OVL_BLOCK / bs;
    for (size_t i = 0; i < n; i++)
        for (unsigned j = 0; j < per; j++)
            fprintf(rf, " %" PRIu64, blocks[i] * per + j);
    fprintf(rf, "\n");
    fclose(rf);
    snprintf(cmd, sizeof cmd, "debugfs -n -f %s %s 2>/dev/null", req, img);
    p = popen(cmd, "r");
    unsigned long inodes[4096];
    size_t ni = 0;
    while (p && fgets(line, sizeof line, p)) {
        unsigned long blk, ino;
        if (sscanf(line, "%lu %lu", &blk, &ino) != 2)
            continue;
        bool seen = false;
        for (size_t k = 0; k < ni && !seen; k++)
            seen = inodes[k] == ino;
        if (!seen && ni < 4096)
            inodes[ni++] = ino;
    }
    if (p)
        pclose(p);
    /* ncheck names no path for the root directory: its entries changed
     * (a file created, renamed or deleted there). */
    for (size_t k = 0; k < ni; k++)
        if (inodes[k] == 2)
            printf("file: / (inode 2)\n");
    if (ni) {
        rf = fopen(req, "w");
        if (rf) {
            fprintf(rf, "ncheck");
            for (size_t k = 0; k < ni; k++)
                fprintf(rf, " %lu", inodes[k]);
            fprintf(rf, "\n");
            fclose(rf);
            p = popen(cmd, "r");
            while (p && fgets(line, sizeof line, p)) {
                unsigned long ino;
                char name[400];
                if (sscanf(line, "%lu %399[^\n]", &ino, name) == 2)
                    printf("file: %s (inode %lu)\n", name + (name[0] == '/' && name[1] == '/'), ino);
            }
            if (p)
                pclose(p);
        }
    }
    unlink(req);
    unlink(img);
    return 0;
}

static int disk_diff(int argc, char **argv)
{
    const char *base = NULL;
    bool files = false;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--base") && i + 1 < argc)
            base = argv[++i];
        else if (!strcmp(argv[i], "--files"))
            files = true;
        else
            return disk_usage();
    }
    if (i != argc - 1 && i != argc - 2)
        return disk_usage();
    const char *pa = argv[i], *pb = i == argc - 2 ? argv[i + 1] : NULL;
    struct ovl_disk *a = NULL, *b = NULL;
    int base_fd = -1, rc = EXIT_VMM_ERROR;
    if (open_ro(base, pa, &a) < 0)
        return EXIT_VMM_ERROR;
    if (pb && open_ro(base, pb, &b) < 0)
        goto out;
    if (!pb) {
        const struct ovl_header *h = ovl_hdr(a);
        const char *bp = base ? base : h ? h->base_path : NULL;
        if (!bp) {
            fprintf(stderr, "moat: disk diff: %s is a raw image: give --base or a second overlay\n", pa);
            goto out;
        }
        base_fd = open(bp, O_RDONLY | O_CLOEXEC);
        if (base_fd < 0) {
            fprintf(stderr, "moat: disk diff: base %s: %s\n", bp, strerror(errno));
            goto out;
        }
        struct stat st;
        if (fstat(base_fd, &st) < 0 || (uint64_t)st.st_size != ovl_size(a)) {
            fprintf(stderr, "moat: disk diff: base %s: size differs from %s\n", bp, pa);
            goto out;
        }
    } else if (ovl_size(a) != ovl_size(b)) {
        fprintf(stderr, "moat: disk diff: %s and %s differ in size\n", pa, pb);
        goto out;
    }
    uint64_t vsize = ovl_size(a), nblocks = (vsize + OVL_BLOCK - 1) / OVL_BLOCK;
    /* Blocks to compare: those in either overlay (moat format); every block
     * when one is a raw image. */
    bool all = ovl_kind_of(a) == OVL_KIND_RAW || (b && ovl_kind_of(b) == OVL_KIND_RAW);
    uint64_t ndiff = 0, nranges = 0, run_start = 0;
    bool in_run = false;
    static uint64_t listed[4096];
    size_t nlisted = 0;
    uint8_t x[OVL_BLOCK], y[OVL_BLOCK];
    for (uint64_t blk = 0; blk <= nblocks; blk++) {
        bool differs = false;
        if (blk < nblocks && (all || ovl_block_allocated(a, blk) || (b && ovl_block_allocated(b, blk)))) {
            if (read_block(a, -1, blk, vsize, x) < 0 || read_block(b, base_fd, blk, vsize, y) < 0) {
                fprintf(stderr, "moat: disk diff: reading block %" PRIu64 " failed\n", blk);
                goto out;
            }
            differs = memcmp(x, y, OVL_BLOCK) != 0;
        }
        if (differs) {
            ndiff++;
            if (nlisted < 4096)
                listed[nlisted++] = blk;
            if (!in_run) {
                in_run = true;
                run_start = blk;
            }
        } else if (in_run) {
            in_run = false;
            nranges++;
            if (blk - 1 == run_start)
                printf("%" PRIu64 "\n", run_start);
            else
                printf("%" PRIu64 "-%" PRIu64 "\n", run_start, blk - 1);
        }
    }
    fflush(stdout);
    fprintf(stderr, "%" PRIu64 " block(s) of 4 KiB differ, in %" PRIu64 " range(s)\n", ndiff, nranges);
    if (files && ndiff)
        list_files(b ? b : a, listed, nlisted);
    rc = 0;
out:
    ovl_close(a);
    ovl_close(b);
    if (base_fd >= 0)
        close(base_fd);
    return rc;
}

static int disk_export(int argc, char **argv)
{
    const char *base = NULL;
    int i = base_opt(argc, argv, &base);
    if (i < 0)
        return disk_usage();
    if (i != argc - 2)
        return disk_usage();
    struct ovl_disk *d;
    if (open_ro(base, argv[i], &d) < 0)
        return EXIT_VMM_ERROR;
    int r = materialize(d, argv[i + 1], true);
    ovl_close(d);
    if (r < 0) {
        fprintf(stderr, "moat: disk export: %s: %s\n", argv[i + 1], strerror(-r));
        return EXIT_VMM_ERROR;
    }
    return 0;
}

static int disk_upgrade(int argc, char **argv)
{
    const char *base = NULL;
    int i = base_opt(argc, argv, &base);
    if (i < 0 || i != argc - 1)
        return disk_usage();
    char why[512] = "";
    struct ovl_disk *d;
    int r = ovl_open(base, argv[i], OVL_OPEN_UPGRADE, &d, why, sizeof why);
    if (r < 0) {
        fprintf(stderr, "moat: disk upgrade: %s\n", why[0] ? why : strerror(-r));
        return EXIT_VMM_ERROR;
    }
    if ((r = ovl_close(d)) < 0) {
        fprintf(stderr, "moat: disk upgrade: %s: %s\n", argv[i], strerror(-r));
        return EXIT_VMM_ERROR;
    }
    fprintf(stderr, "moat: disk upgrade: %s: format %u, its base's SHA-256 recorded\n", argv[i], OVL_VERSION);
    return 0;
}

int cmd_disk(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(usage_disk, argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USAGE : 0;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "create"))
        return disk_create(argc - 1, argv + 1);
    if (!strcmp(sub, "info"))
        return disk_info(argc - 1, argv + 1);
    if (!strcmp(sub, "clone"))
        return disk_clone(argc - 1, argv + 1);
    if (!strcmp(sub, "diff"))
        return disk_diff(argc - 1, argv + 1);
    if (!strcmp(sub, "export"))
        return disk_export(argc - 1, argv + 1);
    if (!strcmp(sub, "upgrade"))
        return disk_upgrade(argc - 1, argv + 1);
    fprintf(stderr, "moat: disk: unknown subcommand '%s'\n", sub);
    return disk_usage();
}
