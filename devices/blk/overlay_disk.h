/* Copy-on-write disks: a base image opened read-only (shared lock, never
 * written) plus a per-sandbox overlay file. Format in docs/disk-overlay.md,
 * pure parsing in devices/blk/overlay.h.
 *
 * An overlay is either
 *  - moat's sparse format (OVL_KIND_MOAT): header + bitmap + data blocks;
 *    reads take each 4 KiB block from the overlay if its bit is set, else
 *    from the base; a partial first write of a block copies it up first;
 *  - a plain raw image (OVL_KIND_RAW): made by a reflink (FICLONE) of the
 *    base where the filesystem supports it; the base is not used after that.
 * A file without the MOATCOW1 magic is taken as raw.
 *
 * Crash safety (moat format): the bitmap on disk only ever marks blocks
 * whose data is durable. ovl_flush (and ovl_close) fdatasync the data, then
 * write the changed bitmap pages, then fdatasync again.
 *
 * Every call is thread-safe (one mutex per disk); any number of disks. */
#ifndef MOAT_OVERLAY_DISK_H
#define MOAT_OVERLAY_DISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "devices/blk/overlay.h"

enum ovl_kind { OVL_KIND_MOAT = 1, OVL_KIND_RAW = 2 };

#define OVL_CREATE_NO_REFLINK  (1u << 0)   /* always moat's format */

#define OVL_OPEN_READ_ONLY     (1u << 0)   /* overlay O_RDONLY (writes fail -EROFS) */
#define OVL_OPEN_NO_LOCK       (1u << 1)   /* inspection: take no flock */
#define OVL_OPEN_CREATE        (1u << 2)   /* create the overlay if missing (needs base) */
#define OVL_OPEN_NO_REFLINK    (1u << 3)   /* with CREATE: never reflink */
#define OVL_OPEN_UPGRADE       (1u << 4)   /* a version 1 overlay: check its base by the old
                                              identity, rewrite the header as version 2 */

/* flock(fd, LOCK_EX or LOCK_SH) without blocking for long: a lock held
 * only by a process that has already died (its io_uring still finishing,
 * which keeps the file open for some milliseconds after a SIGKILL) is
 * waited for, up to DISK_LOCK_WAIT_MS; a live holder still gets
 * -EWOULDBLOCK after that. 0 or -errno. */
#define DISK_LOCK_WAIT_MS 2000
int disk_lock(int fd, bool excl);

/* Size and identity of an open base image (regular file or block device). */
int ovl_base_identify(int fd, struct ovl_base_id *id);

/* Create overlay (which must not exist) over base: a reflink when allowed
 * and supported (*kind = OVL_KIND_RAW), else moat's format. 0 or -errno with
 * a one-line reason in why. */
int ovl_create(const char *base, const char *overlay, unsigned flags, enum ovl_kind *kind,
               char *why, size_t wlen);

struct ovl_disk;

/* Open an overlay. base: the base image, or NULL to use the path recorded
 * in the overlay (untrusted: any file may be named). A base whose size or
 * SHA-256 (of the size, its first and last MiB) differs from the recorded
 * identity is refused (-ESTALE). A version 1 overlay (FNV-1a of the first
 * MiB only) is refused (-EPROTO, why names `moat disk upgrade`) unless
 * flags has OVL_OPEN_UPGRADE (not read-only): then its base is checked by
 * the old identity and the header rewritten as version 2 (-EALREADY for a
 * version 2 one). Locks: overlay exclusive (shared when read-only), base
 * shared. */
int ovl_open(const char *base, const char *overlay, unsigned flags, struct ovl_disk **out,
             char *why, size_t wlen);

enum ovl_kind ovl_kind_of(const struct ovl_disk *d);
uint64_t ovl_size(const struct ovl_disk *d);            /* virtual size, bytes */
int ovl_raw_fd(const struct ovl_disk *d);               /* OVL_KIND_RAW: the image fd */
const struct ovl_header *ovl_hdr(const struct ovl_disk *d);   /* moat kind; NULL for raw */
uint64_t ovl_allocated(struct ovl_disk *d);             /* blocks in the overlay (moat) */
bool ovl_block_allocated(struct ovl_disk *d, uint64_t blk);

/* Transfers of the whole iovec at byte offset off; 0 or -errno. Ranges past
 * the virtual size fail -EINVAL. */
int ovl_preadv(struct ovl_disk *d, const struct iovec *iov, unsigned niov, uint64_t off);
int ovl_pwritev(struct ovl_disk *d, const struct iovec *iov, unsigned niov, uint64_t off);
/* Zero [off, off + len) (holes in the overlay; the base is untouched). */
int ovl_zero(struct ovl_disk *d, uint64_t off, uint64_t len);
/* Make every completed write durable (see crash safety above). */
int ovl_flush(struct ovl_disk *d);
/* Flush and close; NULL is a no-op. Returns the flush result. */
int ovl_close(struct ovl_disk *d);

/* Copy an overlay file (any kind) to dst, which must not exist: reflink, or
 * a sparse copy (holes stay holes). The source is locked shared meanwhile. */
int ovl_clone(const char *src, const char *dst, char *why, size_t wlen);

/* Copy an open disk's overlay file (flushed first) to dst, which must not
 * exist, through the descriptor d holds: no second open, no lock taken
 * (ovl_clone's shared lock would conflict with d's own exclusive one). For
 * the owner of d only, with no I/O in flight outside d's mutex (a device
 * stopped, e.g. the VM paused): the copy is then the disk as of that
 * moment. A read-only d is copied as it is. */
int ovl_clone_disk(struct ovl_disk *d, const char *dst, char *why, size_t wlen);

#endif
