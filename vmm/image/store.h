/* The image store (vmm/image/store.c), $MOAT_HOME/images/:
 *   blobs/sha256/HEX          every blob by digest, shared between images,
 *                             complete and verified (written to tmp/ then
 *                             renamed: a killed pull leaves only tmp/)
 *   tmp/                      blobs being written (a partial one resumes)
 *   refs/                     canonical reference -> manifest digest
 *   rootfs/                   converted roots (vmm/image/rootfs.h)
 * Writers of one blob are serialised by a lock per digest: a concurrent
 * pull of the same image downloads each blob once (the second waits, then
 * finds it present). The caller resolves $MOAT_HOME (sandbox_home). */
#ifndef MOAT_IMAGE_STORE_H
#define MOAT_IMAGE_STORE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "vmm/image/image.h"
#include "vmm/image/manifest.h"
#include "vmm/image/ref.h"

struct img_store {
    char root[PATH_MAX];    /* $MOAT_HOME/images */
    int dfd;                /* its directory */
};

/* Open (creating it) the store under home ($MOAT_HOME). */
int img_store_open(struct img_store *s, const char *home, struct img_err *err);
void img_store_close(struct img_store *s);

/* The path of a blob (present or not). */
int img_blob_path(const struct img_store *s, const char *digest, char *buf, size_t len);
/* 1 and *size if the blob is present, 0 if not, -errno. */
int img_blob_has(const struct img_store *s, const char *digest, uint64_t *size);

/* Writing a blob of known digest and size. begin returns 1 if it is
 * already present (nothing to write; w is not open), else 0 with w->fd a
 * file in tmp/ holding *have bytes from an earlier, interrupted write (the
 * caller appends from there, or truncates and starts again); the blob's
 * lock is held from begin to commit/abort. commit checks size and digest
 * of the whole file (-EBADMSG with why if either is wrong: the file is
 * removed), fsyncs and renames it into blobs/; abort keeps the partial
 * file for a later resume if keep, else removes it. */
struct img_blob_w {
    int fd, lockfd;
    char digest[IMG_DIGEST_MAX];
    char tmp[PATH_MAX];
};
int img_blob_begin(struct img_store *s, const char *digest, struct img_blob_w *w,
                   uint64_t *have, struct img_err *err);
int img_blob_commit(struct img_store *s, struct img_blob_w *w, uint64_t size,
                    struct img_err *err);
void img_blob_abort(struct img_store *s, struct img_blob_w *w, int keep);
/* A small blob (manifest, config) from memory, verified against digest. */
int img_blob_put(struct img_store *s, const char *digest, const void *buf, size_t len,
                 struct img_err *err);
/* Read a blob of at most max bytes into a malloc'ed buffer. */
int img_blob_read(const struct img_store *s, const char *digest, char **buf, size_t *len,
                  size_t max, struct img_err *err);

/* References: canonical reference (img_ref_format) -> manifest digest. */
int img_tag_set(struct img_store *s, const char *ref, const char *manifest_digest,
                struct img_err *err);

/* An image as the store holds it: what NAME (a reference, its canonical
 * form, or a manifest digest / unique prefix of one) names. */
struct img_image {
    char ref[512];                      /* canonical reference; "" if by digest */
    char manifest_digest[IMG_DIGEST_MAX];
    struct img_manifest manifest;
    struct img_config config;
    char config_digest[IMG_DIGEST_MAX];
};
int img_image_load(const struct img_store *s, const char *name, struct img_image *im,
                   struct img_err *err);
void img_image_free(struct img_image *im);

/* What name names (as img_image_load): ref the matching canonical
 * reference ("" if named by digest), digest the manifest digest; -ENOENT
 * if nothing, -EINVAL if a digest prefix is ambiguous. */
int img_resolve(const struct img_store *s, const char *name, char ref[512],
                char digest[IMG_DIGEST_MAX], struct img_err *err);

/* The listing: one entry per reference, in the order they were tagged. */
struct img_ls_entry {
    char ref[512];                      /* canonical */
    struct img_ref parsed;              /* its parts */
    char manifest_digest[IMG_DIGEST_MAX], config_digest[IMG_DIGEST_MAX];
    uint64_t size;                      /* manifest + config + layers (as stored) */
    unsigned nlayer;
    char created[40];                   /* the config's, RFC 3339; "" */
    char platform[66];                  /* "linux/amd64" */
    char error[512];                    /* "" or why the image cannot be read */
};
/* cb returns 0 to go on, else the listing stops and returns that.
 * Returns the number of references or -errno. */
typedef int (*img_ls_cb)(const struct img_ls_entry *e, void *arg);
int img_store_list(const struct img_store *s, img_ls_cb cb, void *arg, struct img_err *err);

/* Remove what name names: a reference, or (named by digest or prefix)
 * every reference to that manifest. The blobs stay until a prune.
 * Returns the number of references removed or -errno. */
int img_image_rm(struct img_store *s, const char *name, struct img_err *err);

/* Remove blobs no reference reaches (index -> manifest -> config and
 * layers), rootfs/ entries named after a digest no reference
 * reaches ("rootfs/HEX" or "rootfs/HEX.*"; a killed build's
 * "rootfs/NAME.tmp.*" whose builder's lock is free), and tmp/ leftovers nobody
 * holds the lock of; anything modified in the last grace_s seconds stays
 * (a pull or import writes its blobs before it tags them). */
struct img_prune_result {
    unsigned blobs, rootfs, tmp;        /* entries removed */
    uint64_t bytes;                     /* their size */
};
int img_store_prune(struct img_store *s, unsigned grace_s, struct img_prune_result *r,
                    struct img_err *err);
/* The same, also keeping every blob or root filesystem that is the same
 * file (device and inode) as one of keep[0..nkeep) (paths; ones that do
 * not exist are ignored): what sandboxes use, whose images' references
 * may be gone (moat image prune passes their drives and the paths among their run arguments). */
int img_store_prune_keep(struct img_store *s, unsigned grace_s, const char *const *keep, size_t nkeep,
                         struct img_prune_result *r, struct img_err *err);

#endif
