/* Copy-on-write disks (vmm/sandbox/disk.c, docs/disk-overlay.md): moat
 * disk's create, info, clone, diff, export and upgrade as library calls on
 * the overlay format (devices/blk/overlay_disk.h). The rules of sandbox.h
 * hold: 0 or -errno, why in a struct sbx_err (one line, without the
 * command's name: the caller prefixes it), no printing, no static state. */
#ifndef MOAT_SANDBOX_DISK_H
#define MOAT_SANDBOX_DISK_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "devices/blk/overlay_disk.h"
#include "vmm/sandbox/sandbox.h"

/* The most changed blocks a diff keeps for sandbox_disk_files, and the
 * most inodes those files are looked up by. */
#define SBX_DISK_LISTED 4096

/* OVERLAY over BASE: a reflink of BASE where the filesystem can (a raw
 * image), else moat's sparse overlay format (always with no_reflink).
 * 0 with *kind, or -errno with why. */
int sandbox_disk_create(const char *base, const char *overlay, bool no_reflink, enum ovl_kind *kind,
                        struct sbx_err *err);

/* What moat disk info shows of an overlay. */
struct sbx_disk_info {
    enum ovl_kind kind;
    unsigned version;                       /* moat format: its version */
    char base[PATH_MAX];                    /* moat format: the base given, or the recorded one */
    uint64_t base_size;                     /* moat format: the base's identity */
    uint8_t base_sha256[OVL_SHA256_BYTES];
    uint64_t vsize;                         /* the disk's size as the guest sees it */
    uint64_t allocated, nblocks;            /* moat format: 4 KiB blocks in the overlay, of */
    uint64_t used;                          /* bytes the file takes on its filesystem (0 unknown) */
};
/* Open OVERLAY read-only (base: NULL, or overriding the recorded path) and
 * fill info. 0, or -errno with why. */
int sandbox_disk_info(const char *base, const char *overlay, struct sbx_disk_info *info,
                      struct sbx_err *err);

/* Copy overlay src to the new dst (reflink, or a sparse copy). 0, or
 * -errno with why. */
int sandbox_disk_clone(const char *src, const char *dst, struct sbx_err *err);

/* Write OVERLAY's disk as the guest sees it to RAW, a new sparse raw image
 * (it must not exist). 0, or -errno with why; *step: SBX_DISK_OPEN when
 * opening OVERLAY failed (why: the reason), SBX_DISK_WORK when writing
 * RAW did (why: "RAW: error"). */
enum sbx_disk_step { SBX_DISK_OPEN, SBX_DISK_WORK };
int sandbox_disk_export(const char *base, const char *overlay, const char *raw,
                        enum sbx_disk_step *step, struct sbx_err *err);

/* Upgrade a format-1 overlay: check its base by the old identity and
 * record the base's SHA-256 (format OVL_VERSION). 0, or -errno with why. */
int sandbox_disk_upgrade(const char *base, const char *overlay, struct sbx_err *err);

/* A diff's outcome: the number of differing 4 KiB blocks and of ranges,
 * the first SBX_DISK_LISTED differing block numbers, and the disk whose
 * files sandbox_disk_files names (b, else a; kept open). Release it with
 * sandbox_disk_diff_release (also after a failed diff). */
struct sbx_disk_diff {
    uint64_t ndiff, nranges;
    uint64_t *blocks;       /* heap */
    size_t nblocks;
    struct ovl_disk *disk;
};
/* A run of differing blocks, first..last (equal for one block); nonzero
 * stops the diff with that code. */
typedef int (*sbx_disk_range_fn)(void *arg, uint64_t first, uint64_t last);
/* Compare the 4 KiB blocks of overlay a with those of overlay b, or of a's
 * base (b NULL: base, else the recorded path) and report each run of
 * differing blocks, in order, to range. 0 with *res, or -errno with why;
 * *step SBX_DISK_OPEN when opening a or b failed. */
int sandbox_disk_diff(const char *base, const char *a, const char *b, sbx_disk_range_fn range,
                      void *arg, struct sbx_disk_diff *res, enum sbx_disk_step *step,
                      struct sbx_err *err);
void sandbox_disk_diff_release(struct sbx_disk_diff *res);

/* A file owning changed blocks: its path ("/" for the root directory)
 * and inode. */
typedef void (*sbx_disk_file_fn)(void *arg, const char *path, unsigned long ino);
/* The files of the ext2/3/4 filesystem on a diff's disk that own its
 * listed blocks, through debugfs (icheck, ncheck), each to file (the root
 * directory first, then in ncheck's order). 0, also with a warning in err
 * (code 0: debugfs not found, not an ext2/3/4 image) that lists nothing;
 * or -errno, with why where there is one. */
int sandbox_disk_files(const struct sbx_disk_diff *d, sbx_disk_file_fn file, void *arg,
                       struct sbx_err *err);

#endif
