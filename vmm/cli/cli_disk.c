/* moat disk: copy-on-write overlays (docs/disk-overlay.md): create, info,
 * clone, diff, export, upgrade. The options and the output; the work is
 * vmm/sandbox/disk.c's. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/cli/cli.h"
#include "vmm/sandbox/disk.h"

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

/* e's message as "moat: WHAT: LINE" lines; EXIT_VMM_ERROR. */
static int disk_fail(const char *what, const struct sbx_err *e)
{
    for (const char *m = e->msg, *nl; *m; m = *nl ? nl + 1 : nl) {
        nl = strchrnul(m, '\n');
        fprintf(stderr, "moat: %s: %.*s\n", what, (int)(nl - m), m);
    }
    return EXIT_VMM_ERROR;
}

static int disk_create(int argc, char **argv)
{
    const char *base = NULL;
    bool no_reflink = false;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--base") && i + 1 < argc)
            base = argv[++i];
        else if (!strcmp(argv[i], "--no-reflink"))
            no_reflink = true;
        else
            return disk_usage();
    }
    if (!base || i != argc - 1)
        return disk_usage();
    struct sbx_err e = { 0 };
    enum ovl_kind k;
    if (sandbox_disk_create(base, argv[i], no_reflink, &k, &e) < 0)
        return disk_fail("disk create", &e);
    printf("%s: %s over %s\n", argv[i], k == OVL_KIND_RAW ? "reflink (raw image)" : "moat overlay",
           base);
    return 0;
}

/* The options of info, export and upgrade: [--base BASE]. The index of
 * the first operand, or -1 for anything else. */
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
    struct sbx_err e = { 0 };
    struct sbx_disk_info in;
    if (sandbox_disk_info(base, argv[i], &in, &e) < 0)
        return disk_fail("disk", &e);
    bool moat = in.kind != OVL_KIND_RAW;
    printf("overlay: %s\n", argv[i]);
    if (moat)
        printf("format: moat overlay v%u\n", in.version);
    else
        printf("format: raw image (reflink)\n");
    if (moat) {
        printf("base: %s\n", in.base);
        printf("base identity: size %" PRIu64 ", SHA-256 (size, first and last MiB) ", in.base_size);
        for (unsigned k = 0; k < OVL_SHA256_BYTES; k++)
            printf("%02x", in.base_sha256[k]);
        printf("\n");
    }
    printf("virtual size: %" PRIu64 "\n", in.vsize);
    if (moat)
        printf("blocks allocated: %" PRIu64 " of %" PRIu64 " (4 KiB)\n", in.allocated, in.nblocks);
    printf("space used: %" PRIu64 "\n", in.used);
    return 0;
}

static int disk_clone(int argc, char **argv)
{
    if (argc != 3)
        return disk_usage();
    struct sbx_err e = { 0 };
    if (sandbox_disk_clone(argv[1], argv[2], &e) < 0)
        return disk_fail("disk clone", &e);
    return 0;
}

static int print_range(void *arg, uint64_t first, uint64_t last)
{
    (void)arg;
    if (first == last)
        printf("%" PRIu64 "\n", first);
    else
        printf("%" PRIu64 "-%" PRIu64 "\n", first, last);
    return 0;
}

static void print_file(void *arg, const char *path, unsigned long ino)
{
    (void)arg;
    printf("file: %s (inode %lu)\n", path, ino);
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
    const char *pb = i == argc - 2 ? argv[i + 1] : NULL;
    struct sbx_err e = { 0 };
    struct sbx_disk_diff d;
    enum sbx_disk_step step;
    if (sandbox_disk_diff(base, argv[i], pb, print_range, NULL, &d, &step, &e) < 0) {
        sandbox_disk_diff_release(&d);
        return disk_fail(step == SBX_DISK_OPEN ? "disk" : "disk diff", &e);
    }
    fflush(stdout);
    fprintf(stderr, "%" PRIu64 " block(s) of 4 KiB differ, in %" PRIu64 " range(s)\n", d.ndiff, d.nranges);
    if (files && d.ndiff) {
        sandbox_disk_files(&d, print_file, NULL, &e);
        disk_fail("disk diff --files", &e);
    }
    sandbox_disk_diff_release(&d);
    return 0;
}

static int disk_export(int argc, char **argv)
{
    const char *base = NULL;
    int i = base_opt(argc, argv, &base);
    if (i < 0)
        return disk_usage();
    if (i != argc - 2)
        return disk_usage();
    struct sbx_err e = { 0 };
    enum sbx_disk_step step;
    if (sandbox_disk_export(base, argv[i], argv[i + 1], &step, &e) < 0)
        return disk_fail(step == SBX_DISK_OPEN ? "disk" : "disk export", &e);
    return 0;
}

static int disk_upgrade(int argc, char **argv)
{
    const char *base = NULL;
    int i = base_opt(argc, argv, &base);
    if (i < 0 || i != argc - 1)
        return disk_usage();
    struct sbx_err e = { 0 };
    if (sandbox_disk_upgrade(base, argv[i], &e) < 0)
        return disk_fail("disk upgrade", &e);
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
