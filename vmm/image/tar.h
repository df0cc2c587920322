/* A small tar (ustar, pax, GNU long names) reader and writer for image
 * archives (vmm/image/tar.c): `docker save` archives and OCI layouts as
 * tar files. Not for layers (vmm/image/rootfs.h unpacks those). The header
 * parsers are pure; an archive is hostile: names are checked (relative, no
 * "..") and counts and sizes have limits. */
#ifndef MOAT_IMAGE_TAR_H
#define MOAT_IMAGE_TAR_H

#include <stddef.h>
#include <stdint.h>

#include "vmm/image/image.h"

#define TAR_BLOCK        512
#define TAR_NAME_MAX     1024       /* bytes in a member's path */
#define TAR_PAX_MAX      (1u << 20) /* bytes in one pax header */
#define TAR_MAX_ENTRIES  100000     /* members in one archive */

enum tar_type { TAR_FILE, TAR_DIR, TAR_LINK, TAR_SYMLINK, TAR_PAX, TAR_GLOBAL_PAX, TAR_LONGNAME,
                TAR_LONGLINK, TAR_OTHER };

struct tar_ent {
    enum tar_type type;
    char name[TAR_NAME_MAX];
    char link[TAR_NAME_MAX];        /* hard and symbolic links' target */
    uint64_t size;                  /* bytes of data that follow (padded to 512) */
};

/* One 512-byte header: 0 with *e, 1 if it is an all-zero block (the end),
 * -EINVAL with why (bad checksum, bad size field). */
int tar_hdr_parse(const uint8_t h[TAR_BLOCK], struct tar_ent *e, struct img_err *err);
/* A pax extended header's records ("LEN key=value\n"...): path, linkpath
 * and size override e's. 0 or -EINVAL. */
int tar_pax_parse(const char *buf, size_t len, struct tar_ent *e, struct img_err *err);
/* A member's name cleaned: "./" and trailing '/' dropped; 1 if it names
 * the archive's root ("", "."), -EINVAL if absolute or with a ".."
 * component. In place. */
int tar_name_clean(char *name, struct img_err *err);

/* Unpack the archive read from fd into the directory dfd (empty, the
 * caller's): regular files and folders only; a link (hard or symbolic)
 * to a member already unpacked becomes a hard link to it; anything else
 * is skipped. */
int tar_extract(int fd, int dfd, struct img_err *err);

/* Writing: a folder entry, a file of size bytes read from infd, the end. */
int tar_put_dir(int out, const char *name, struct img_err *err);
int tar_put_file(int out, const char *name, int infd, uint64_t size, struct img_err *err);
int tar_put_mem(int out, const char *name, const void *buf, size_t len, struct img_err *err);
int tar_put_end(int out, struct img_err *err);

#endif
