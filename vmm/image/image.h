/* Container images (docs/images.md): references, manifests and configs,
 * the image store under $MOAT_HOME/images, the registry client, and the
 * conversion of an image's layers into an ext4 root filesystem.
 *
 * A layer of its own: above vmm/base (it includes nothing else of moat's),
 * below vmm/sandbox, vmm/api and vmm/cli, which call it. Nothing in it
 * needs KVM. The rules of vmm/sandbox/sandbox.h hold: functions return 0
 * (or a count) or -errno; those that can fail for a reason worth telling
 * fill a struct img_err; nothing is printed, nothing exits, no static
 * state (the dlopen'ed libraries' function tables excepted, filled once).
 *
 * Everything an image holds (its JSON, its tar streams, their sizes) is
 * untrusted input: the parsers are pure functions with unit tests for
 * every malformed case and libFuzzer targets, and every count and size
 * has a limit below. */
#ifndef MOAT_IMAGE_H
#define MOAT_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#define IMG_DIGEST_MAX   72         /* "sha256:" + 64 hex + NUL, rounded */
#define IMG_MAX_LAYERS   128        /* layers in one manifest */
#define IMG_JSON_MAX     (4u << 20) /* bytes in a manifest, index or config */

struct img_err {
    int code;           /* the -errno returned */
    char msg[4096];     /* why, one message a line; "" with code 0 */
};

/* Add a line (printf format) to err->msg (err may be NULL); err->code
 * becomes code unless it holds an earlier error. Returns code. */
int img_err(struct img_err *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* 1 if d is "sha256:" followed by exactly 64 lowercase hex digits, else
 * 0. The only digest algorithm moat accepts. */
int img_digest_valid(const char *d);

/* The digest ("sha256:" + hex) of buf, or of everything fd holds (read
 * with pread from offset 0; *size its length if size). */
void img_sha256(const void *buf, size_t len, char out[IMG_DIGEST_MAX]);
int img_sha256_fd(int fd, char out[IMG_DIGEST_MAX], uint64_t *size);

#endif
