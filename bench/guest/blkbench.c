/* blkbench: a tiny block benchmark for the benchmark guest (no fio there).
 * Built static (`gcc -static -O2`) and put into the guest as an extra cpio
 * appended to the initramfs (bench/vhost-blk.sh).
 *
 *   blkbench [-t SECONDS] [-s SEQ_MIB] [-o WRITE_OFF_MIB] [-w WRITE_MIB] DEV
 *
 * All I/O is O_DIRECT on DEV. Four phases, each timed with CLOCK_MONOTONIC:
 *   R4K-QD1   4 KiB reads at random 4 KiB-aligned offsets over the whole
 *             device, one at a time (pread), for SECONDS         -> IOPS
 *   R4K-QD32  the same with 32 requests always in flight through Linux AIO
 *             (raw io_setup/io_submit/io_getevents syscalls), for SECONDS
 *                                                                -> IOPS
 *   SEQ-READ  1 MiB preads from offset 0, SEQ_MIB in all         -> MiB/s
 *   SEQ-WRITE 1 MiB pwrites of a pattern to [WRITE_OFF, +WRITE_MIB),
 *             then fdatasync (inside the timed window)           -> MiB/s
 * Output, one line per phase: "NAME VALUE" (plain numbers, for scripts).
 * Exit status 0, or 1 with a message on stderr. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <linux/fs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define BS4K    4096u
#define BS1M    (1u << 20)
#define QD      32

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)   /* xorshift64* */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

static int die(const char *what)
{
    fprintf(stderr, "blkbench: %s: %s\n", what, strerror(errno));
    return 1;
}

int main(int argc, char **argv)
{
    double secs = 3;
    long seq_mib = 128, woff_mib = 128, w_mib = 64;
    int c;
    while ((c = getopt(argc, argv, "t:s:o:w:")) != -1) {
        switch (c) {
        case 't': secs = atof(optarg); break;
        case 's': seq_mib = atol(optarg); break;
        case 'o': woff_mib = atol(optarg); break;
        case 'w': w_mib = atol(optarg); break;
        default:
            fprintf(stderr, "usage: blkbench [-t SECONDS] [-s SEQ_MIB] [-o WRITE_OFF_MIB] [-w WRITE_MIB] DEV\n");
            return 2;
        }
    }
    if (optind != argc - 1 || secs <= 0 || seq_mib <= 0 || woff_mib < 0 || w_mib <= 0) {
        fprintf(stderr, "blkbench: bad arguments\n");
        return 2;
    }
    const char *dev = argv[optind];
    int fd = open(dev, O_RDWR | O_DIRECT);
    if (fd < 0)
        return die(dev);
    uint64_t size = 0;
    if (ioctl(fd, BLKGETSIZE64, &size) < 0) {     /* a regular file (host test) */
        off_t end = lseek(fd, 0, SEEK_END);
        if (end < 0)
            return die("size");
        size = (uint64_t)end;
    }
    uint64_t nblk = size / BS4K;
    if (nblk == 0 || (uint64_t)seq_mib * BS1M > size || (uint64_t)(woff_mib + w_mib) * BS1M > size) {
        fprintf(stderr, "blkbench: %s is too small (%llu bytes)\n", dev, (unsigned long long)size);
        return 1;
    }
    unsigned char *buf;
    if (posix_memalign((void **)&buf, BS4K, (size_t)QD * BS4K > BS1M ? (size_t)QD * BS4K : BS1M))
        return die("posix_memalign");
    memset(buf, 0xa5, BS1M);

    /* R4K-QD1 */
    uint64_t n = 0;
    double t0 = now(), t;
    do {
        if (pread(fd, buf, BS4K, (off_t)((rnd() % nblk) * BS4K)) != (ssize_t)BS4K)
            return die("pread 4k");
        n++;
    } while ((t = now()) - t0 < secs);
    printf("R4K-QD1 %.0f\n", (double)n / (t - t0));
    fflush(stdout);

    /* R4K-QD32: Linux AIO, refill as completions arrive. */
    aio_context_t ctx = 0;
    if (syscall(SYS_io_setup, QD, &ctx) < 0)
        return die("io_setup");
    struct iocb cbs[QD], *ptrs[QD];
    struct io_event ev[QD];
    for (int i = 0; i < QD; i++) {
        memset(&cbs[i], 0, sizeof cbs[i]);
        cbs[i].aio_lio_opcode = IOCB_CMD_PREAD;
        cbs[i].aio_fildes = (uint32_t)fd;
        cbs[i].aio_buf = (uint64_t)(uintptr_t)(buf + (size_t)i * BS4K);
        cbs[i].aio_nbytes = BS4K;
        cbs[i].aio_offset = (int64_t)((rnd() % nblk) * BS4K);
        cbs[i].aio_data = (uint64_t)i;
        ptrs[i] = &cbs[i];
    }
    n = 0;
    t0 = now();
    if (syscall(SYS_io_submit, ctx, QD, ptrs) != QD)
        return die("io_submit");
    int inflight = QD;
    for (;;) {
        long got = syscall(SYS_io_getevents, ctx, 1, QD, ev, NULL);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return die("io_getevents");
        }
        t = now();
        int nsub = 0;
        for (long i = 0; i < got; i++) {
            inflight--;
            if (ev[i].res != (int64_t)BS4K) {
                errno = ev[i].res < 0 ? (int)-ev[i].res : EIO;
                return die("aio read 4k");
            }
            n++;
            if (t - t0 < secs) {
                struct iocb *cb = &cbs[ev[i].data];
                cb->aio_offset = (int64_t)((rnd() % nblk) * BS4K);
                ptrs[nsub++] = cb;
            }
        }
        if (nsub) {
            if (syscall(SYS_io_submit, ctx, nsub, ptrs) != nsub)
                return die("io_submit");
            inflight += nsub;
        }
        if (inflight == 0)
            break;
    }
    printf("R4K-QD32 %.0f\n", (double)n / (now() - t0));
    fflush(stdout);
    syscall(SYS_io_destroy, ctx);

    /* SEQ-READ */
    t0 = now();
    for (long i = 0; i < seq_mib; i++)
        if (pread(fd, buf, BS1M, (off_t)i * BS1M) != (ssize_t)BS1M)
            return die("pread 1M");
    printf("SEQ-READ %.1f\n", (double)seq_mib / (now() - t0));
    fflush(stdout);

    /* SEQ-WRITE, durable at the end */
    memset(buf, 0x5a, BS1M);
    t0 = now();
    for (long i = 0; i < w_mib; i++)
        if (pwrite(fd, buf, BS1M, (off_t)(woff_mib + i) * BS1M) != (ssize_t)BS1M)
            return die("pwrite 1M");
    if (fdatasync(fd) < 0)
        return die("fdatasync");
    printf("SEQ-WRITE %.1f\n", (double)w_mib / (now() - t0));
    close(fd);
    return 0;
}
