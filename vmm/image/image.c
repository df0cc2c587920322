/* Errors and digests shared by the image layer (vmm/image/image.h). */
#include <errno.h>
#include <nettle/sha2.h>
#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>
#include <stdio.h>
#include <string.h>

#include "vmm/image/image.h"

int img_err(struct img_err *err, int code, const char *fmt, ...)
{
    if (!err)
        return code;
    if (!err->code)
        err->code = code;
    size_t n = strnlen(err->msg, sizeof err->msg);
    if (n >= sizeof err->msg - 2)
        return code;
    if (n && err->msg[n - 1] != '\n')
        err->msg[n++] = '\n';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg + n, sizeof err->msg - n, fmt, ap);
    va_end(ap);
    return code;
}

int img_digest_valid(const char *d)
{
    if (!d || strncmp(d, "sha256:", 7) != 0)
        return 0;
    const char *h = d + 7;
    for (int i = 0; i < 64; i++)
        if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f')))
            return 0;
    return h[64] == '\0';
}

static void hex_digest(struct sha256_ctx *sha, char out[IMG_DIGEST_MAX])
{
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_digest(sha, sizeof d, d);
    strcpy(out, "sha256:");
    for (int i = 0; i < SHA256_DIGEST_SIZE; i++)
        snprintf(out + 7 + 2 * i, 3, "%02x", d[i]);
}

void img_sha256(const void *buf, size_t len, char out[IMG_DIGEST_MAX])
{
    struct sha256_ctx sha;
    sha256_init(&sha);
    sha256_update(&sha, len, buf);
    hex_digest(&sha, out);
}

int img_sha256_fd(int fd, char out[IMG_DIGEST_MAX], uint64_t *size)
{
    struct sha256_ctx sha;
    sha256_init(&sha);
    uint8_t *buf = malloc(1 << 20);
    if (!buf)
        return -ENOMEM;
    uint64_t off = 0;
    for (;;) {
        ssize_t n = pread(fd, buf, 1 << 20, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = -errno;
            free(buf);
            return e;
        }
        if (n == 0)
            break;
        sha256_update(&sha, (size_t)n, buf);
        off += (uint64_t)n;
    }
    free(buf);
    hex_digest(&sha, out);
    if (size)
        *size = off;
    return 0;
}
