/* uffd_handler: a page-fault handler for `moat restore --mem-backend
 * uffd:SOCKET` (docs/uffd.md), as an orchestrator would run one; used by
 * the integration tests and the restore benchmark.
 *
 *   uffd_handler SOCKET MEMFILE
 *
 * Binds SOCKET, accepts one connection, reads Firecracker's handshake (one
 * message: a JSON array of {"base_host_virt_addr", "size", "offset",
 * "page_size"} with the userfaultfd as SCM_RIGHTS), checks the regions
 * against MEMFILE (they must cover it exactly, as Firecracker's example
 * handlers check), then serves every missing-page fault: UFFDIO_COPY of
 * the page from MEMFILE at the region's offset, or UFFDIO_ZEROPAGE where
 * the file's page is all zero (a hole). It ends when moat closes the
 * connection (moat exited) and prints "uffd_handler: copied N zero M
 * remove R" on stderr. Exit 0, or 1 with a message. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define MAXR 8

struct region { uint64_t host, size, offset, page; };

static int die(const char *what)
{
    fprintf(stderr, "uffd_handler: %s: %s\n", what, errno ? strerror(errno) : "bad input");
    return 1;
}

static bool get_u64(json_t *o, const char *k, uint64_t *v)
{
    json_t *x = json_object_get(o, k);
    if (!json_is_integer(x) || json_integer_value(x) < 0)
        return false;
    *v = (uint64_t)json_integer_value(x);
    return true;
}

static bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        if (v)
            return false;
    }
    return true;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: uffd_handler SOCKET MEMFILE\n");
        return 2;
    }
    int mf = open(argv[2], O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (mf < 0 || fstat(mf, &st) < 0 || st.st_size <= 0)
        return die(argv[2]);
    const uint8_t *mem = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, mf, 0);
    if (mem == MAP_FAILED)
        return die("mmap");
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (strlen(argv[1]) >= sizeof(sa.sun_path)) {
        errno = ENAMETOOLONG;
        return die(argv[1]);
    }
    strcpy(sa.sun_path, argv[1]);
    int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    unlink(argv[1]);
    if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(ls, 1) < 0)
        return die(argv[1]);
    int c = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0)
        return die("accept");
    close(ls);
    unlink(argv[1]);
    char body[4097];
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = { body, sizeof(body) - 1 };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
    ssize_t n = recvmsg(c, &mh, MSG_CMSG_CLOEXEC);
    if (n <= 0)
        return die("handshake");
    body[n] = 0;
    int uffd = -1;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS && cm->cmsg_len == CMSG_LEN(sizeof(int)))
        memcpy(&uffd, CMSG_DATA(cm), sizeof(int));
    if (uffd < 0) {
        errno = 0;
        return die("handshake without a userfaultfd");
    }
    json_error_t je;
    json_t *arr = json_loads(body, 0, &je);
    struct region rg[MAXR];
    size_t nr = 0;
    uint64_t total = 0;
    errno = 0;
    if (!json_is_array(arr) || json_array_size(arr) == 0 || json_array_size(arr) > MAXR)
        return die("handshake: not an array of 1 to 8 regions");
    for (size_t i = 0; i < json_array_size(arr); i++, nr++) {
        json_t *o = json_array_get(arr, i);
        if (!json_is_object(o) || !get_u64(o, "base_host_virt_addr", &rg[i].host) ||
            !get_u64(o, "size", &rg[i].size) || !get_u64(o, "offset", &rg[i].offset) ||
            !get_u64(o, "page_size", &rg[i].page) || rg[i].page != 4096 || rg[i].size % 4096 ||
            rg[i].offset > (uint64_t)st.st_size || rg[i].size > (uint64_t)st.st_size - rg[i].offset)
            return die("handshake: a bad region");
        total += rg[i].size;
    }
    json_decref(arr);
    if (total != (uint64_t)st.st_size)
        return die("handshake: the regions do not cover the memory file");
    unsigned long long copied = 0, zero = 0, removed = 0;
    for (;;) {
        struct pollfd p[2] = { { uffd, POLLIN, 0 }, { c, POLLIN, 0 } };
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            return die("poll");
        }
        if (p[1].revents) {
            char x;
            if (recv(c, &x, 1, MSG_DONTWAIT) <= 0)
                break;          /* moat closed the connection: it has exited */
        }
        if (!(p[0].revents & POLLIN))
            continue;
        struct uffd_msg m;
        ssize_t k = read(uffd, &m, sizeof(m));
        if (k < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (k != sizeof(m))
            return die("reading the userfaultfd");
        if (m.event == UFFD_EVENT_REMOVE) {
            removed++;
            continue;
        }
        if (m.event != UFFD_EVENT_PAGEFAULT)
            continue;
        uint64_t addr = m.arg.pagefault.address & ~4095ull;
        size_t i;
        for (i = 0; i < nr && !(addr >= rg[i].host && addr - rg[i].host < rg[i].size); i++)
            ;
        if (i == nr) {
            errno = 0;
            return die("a fault outside every region");
        }
        const uint8_t *src = mem + rg[i].offset + (addr - rg[i].host);
        bool z = all_zero(src, 4096);
        int r;
        do {                    /* EAGAIN: the mapping changed meanwhile, again */
            if (z) {
                struct uffdio_zeropage zp = { .range = { addr, 4096 } };
                r = ioctl(uffd, UFFDIO_ZEROPAGE, &zp);
            } else {
                struct uffdio_copy cp = { .dst = addr, .src = (uint64_t)(uintptr_t)src, .len = 4096 };
                r = ioctl(uffd, UFFDIO_COPY, &cp);
            }
        } while (r < 0 && errno == EAGAIN);
        if (r < 0 && (errno == ESRCH || errno == ENOENT))
            break;              /* moat's memory is gone: it is exiting */
        if (r < 0 && errno != EEXIST)   /* EEXIST: another fault filled it */
            return die("filling a page");
        if (r == 0)
            *(z ? &zero : &copied) += 1;
    }
    fprintf(stderr, "uffd_handler: copied %llu zero %llu remove %llu\n", copied, zero, removed);
    return 0;
}
