/* The image layer's shared helpers (image.h). */
#include "vmm/image/image.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int img_err(struct img_err *err, int code, const char *fmt, ...)
{
    if (!err)
        return code;
    if (!err->code)
        err->code = code;
    size_t used = strnlen(err->msg, sizeof err->msg);
    if (used + 2 >= sizeof err->msg)
        return code;
    if (used && err->msg[used - 1] != '\n')
        err->msg[used++] = '\n';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg + used, sizeof err->msg - used, fmt, ap);
    va_end(ap);
    return code;
}

int img_digest_valid(const char *d)
{
    if (!d || strncmp(d, "sha256:", 7))
        return 0;
    for (int i = 0; i < 64; i++) {
        char c = d[7 + i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return 0;
    }
    return d[71] == '\0';
}
