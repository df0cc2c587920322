/* Whole transfers on blocking descriptors (vmm/base/fullio.h). */
#include "vmm/base/fullio.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

/* One loop for the four calls: off < 0 means read/write, else
 * pread/pwrite at off. */
static ssize_t xfer(int fd, uint8_t *p, size_t len, off_t off, bool wr)
{
    if (len > SSIZE_MAX)
        return -EINVAL;
    size_t done = 0;
    while (done < len) {
        ssize_t n;
        if (off < 0)
            n = wr ? write(fd, p + done, len - done) : read(fd, p + done, len - done);
        else
            n = wr ? pwrite(fd, p + done, len - done, off + (off_t)done)
                   : pread(fd, p + done, len - done, off + (off_t)done);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0) {
            if (wr)
                return -EIO;
            break;                  /* end of file */
        }
        done += (size_t)n;
    }
    return (ssize_t)done;
}

ssize_t read_full(int fd, void *buf, size_t len)
{
    return xfer(fd, buf, len, -1, false);
}

ssize_t write_full(int fd, const void *buf, size_t len)
{
    return xfer(fd, (uint8_t *)buf, len, -1, true);
}

ssize_t pread_full(int fd, void *buf, size_t len, off_t off)
{
    return off < 0 ? -EINVAL : xfer(fd, buf, len, off, false);
}

ssize_t pwrite_full(int fd, const void *buf, size_t len, off_t off)
{
    return off < 0 ? -EINVAL : xfer(fd, (uint8_t *)buf, len, off, true);
}
