/* Whole transfers on blocking descriptors: one set instead of a loop per
 * file. Each call retries a call interrupted by a signal (EINTR) and goes
 * on after a short count until len bytes have moved. Part of the base
 * (devices/ may use it).
 *
 * Reads return the bytes read: len, or fewer only where the file (pipe,
 * socket) ended first (0: it was at its end). Writes return len; a write
 * that moves nothing is -EIO. Any other failure is -errno, even after some
 * bytes moved (how many is then unknown to the caller).
 *
 * Not for non-blocking descriptors: EAGAIN is returned as -EAGAIN, with the
 * bytes already moved lost to the caller. */
#ifndef MOAT_FULLIO_H
#define MOAT_FULLIO_H

#include <stddef.h>
#include <sys/types.h>

ssize_t read_full(int fd, void *buf, size_t len);
ssize_t write_full(int fd, const void *buf, size_t len);
ssize_t pread_full(int fd, void *buf, size_t len, off_t off);
ssize_t pwrite_full(int fd, const void *buf, size_t len, off_t off);

#endif
