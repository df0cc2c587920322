/* One tar entry of a layer, checked before anything is applied
 * (vmm/image/tarent.c, pure: no libraries, no I/O). docs/images.md, "Root
 * filesystems", gives the rules; in short:
 *   - a path is bytes (any but NUL; non-ASCII kept); "./" and empty
 *     components are dropped, "a//b" is "a/b"; an absolute path and any
 *     ".." component are refused (Docker takes "/x" as "x" and "a/../b" as
 *     "b" when it stays inside the root: moat refuses both, no image
 *     builder writes them); at most IMG_TAR_PATH_MAX bytes, each component
 *     at most IMG_TAR_NAME_MAX;
 *   - ".wh.NAME" deletes NAME of the lower layers (NAME not "", "." or
 *     ".."); ".wh..wh..opq" makes its directory opaque; other ".wh..wh."
 *     names (aufs' bookkeeping) are skipped;
 *   - a hardlink's target is checked as a path; a symlink's target is kept
 *     as it is (1..IMG_TAR_LINK_MAX bytes): it only ever resolves inside
 *     the image;
 *   - counts and bytes against limits (img_tar_limits). */
#ifndef MOAT_IMAGE_TARENT_H
#define MOAT_IMAGE_TARENT_H

#include <stddef.h>
#include <stdint.h>

#include "vmm/image/image.h"

#define IMG_TAR_PATH_MAX 4096       /* bytes in a normalised path */
#define IMG_TAR_NAME_MAX 255        /* bytes in one component (ext4's limit) */
#define IMG_TAR_LINK_MAX 4095       /* bytes in a symlink's target (ext4's, 4 KiB blocks) */
#define IMG_WH_PREFIX ".wh."
#define IMG_WH_OPAQUE ".wh..wh..opq"

/* Normalise in (inlen bytes) into out (NUL-terminated, "" for the root).
 * 0, or -EINVAL / -ENAMETOOLONG with why in err (what names the field:
 * "path", "hardlink target"). */
int img_tar_path_norm(const char *in, size_t inlen, char *out, size_t outlen, const char *what,
                      struct img_err *err);

enum img_te_type {
    IMG_TE_REG = 1, IMG_TE_DIR, IMG_TE_SYMLINK, IMG_TE_HARDLINK, IMG_TE_CHR, IMG_TE_BLK, IMG_TE_FIFO,
    IMG_TE_OTHER,           /* sockets, anything else: refused */
};

/* An entry as the tar header gives it (lengths in bytes, no NUL needed). */
struct img_tarent_in {
    const char *path;
    size_t path_len;
    enum img_te_type type;
    const char *link;       /* hardlink or symlink target; NULL if none */
    size_t link_len;
    /* Owner as the header gives it: 0 .. 2^32 - 2 (-1 is no id in Linux);
     * anything else is refused, never mapped to another id (root). */
    int64_t uid, gid;
    /* Character and block devices: what ext4 (and Linux's dev_t) holds,
     * a 12-bit major and a 20-bit minor; larger is refused, not wrapped
     * into another device's number. */
    uint64_t rdev_major, rdev_minor;
};
#define IMG_TAR_ID_MAX    0xfffffffeu
#define IMG_TAR_MAJOR_MAX 0xfffu
#define IMG_TAR_MINOR_MAX 0xfffffu

enum img_te_action {
    IMG_TA_APPLY = 1,       /* create / update out->path */
    IMG_TA_WHITEOUT,        /* delete out->path (lower layers' entry) */
    IMG_TA_OPAQUE,          /* out->path ("" = root) becomes opaque */
    IMG_TA_SKIP,            /* aufs bookkeeping: ignore */
};

struct img_tarent_out {
    enum img_te_action action;
    char path[IMG_TAR_PATH_MAX + 1];
    char link[IMG_TAR_PATH_MAX + 1];    /* hardlink: normalised target; symlink: as given */
};

/* Check one entry; 0 with *out, or -errno with why (naming the entry). */
int img_tarent_check(const struct img_tarent_in *in, struct img_tarent_out *out, struct img_err *err);

/* Limits over a layer set; 0 in a field: its default. */
struct img_tar_limits {
    uint64_t max_entries_layer;     /* default IMG_TAR_ENTRIES_LAYER */
    uint64_t max_entries_total;     /* default IMG_TAR_ENTRIES_TOTAL */
    uint64_t max_bytes;             /* decompressed tar bytes, all layers; default IMG_TAR_BYTES */
};
#define IMG_TAR_ENTRIES_LAYER (1ull << 20)
#define IMG_TAR_ENTRIES_TOTAL (4ull << 20)
#define IMG_TAR_BYTES         (64ull << 30)

struct img_tar_count {
    uint64_t entries_layer, entries_total, bytes;
};

/* One more entry (in the current layer); -E2BIG with why past a limit. */
int img_tar_count_entry(const struct img_tar_limits *l, struct img_tar_count *c, struct img_err *err);
/* The decompressed stream has reached total bytes; -EFBIG with why past the limit. */
int img_tar_count_bytes(const struct img_tar_limits *l, struct img_tar_count *c, uint64_t total,
                        struct img_err *err);

#endif
