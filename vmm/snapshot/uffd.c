/* Restore with guest memory from a page-fault handler (vmm/snapshot/uffd.h). */
#include "vmm/snapshot/uffd.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "vmm/base/log.h"
#include "vmm/core/vm.h"
#include "vmm/snapshot/snapvm.h"

long uffd_mappings_json(const struct uffd_region *r, size_t n, char *buf, size_t cap)
{
    if (!n || n > UFFD_MAX_REGIONS)
        return -EINVAL;
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t ps = r[i].page_size;
        if (!r[i].size || !ps || (ps & (ps - 1)))
            return -EINVAL;
        int k = snprintf(buf + (len < cap ? len : cap), len < cap ? cap - len : 0,
                         "%s{\"base_host_virt_addr\":%llu,\"size\":%llu,\"offset\":%llu,\"page_size\":%llu,"
                         "\"page_size_kib\":%llu}%s",
                         i ? "," : "[", (unsigned long long)r[i].host, (unsigned long long)r[i].size,
                         (unsigned long long)r[i].offset, (unsigned long long)ps, (unsigned long long)ps,
                         i + 1 == n ? "]" : "");
        if (k < 0)
            return -EINVAL;
        len += (size_t)k;
    }
    if (len >= cap)
        return -ENOSPC;
    return (long)len;
}

/* A userfaultfd that also sees faults from the kernel (KVM reaches guest
 * memory through get_user_pages): the system call, or /dev/userfaultfd
 * where vm.unprivileged_userfaultfd is 0 and the caller lacks
 * CAP_SYS_PTRACE but may open the device. -errno on failure. */
static int uffd_open(void)
{
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (fd >= 0)
        return fd;
    int e = errno;
    int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
    if (dev < 0)
        return -e;
    fd = ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
    e = errno;
    close(dev);
    return fd >= 0 ? fd : -e;
}

/* e, with "what: strerror(e)[ (hint)]" in s->why. */
static int fail(struct uffd_setup *s, int e, const char *what, const char *hint)
{
    int n = snprintf(s->why, sizeof(s->why), "%.160s: %s", what, strerror(-e));
    if (hint && n > 0 && (size_t)n < sizeof(s->why))
        snprintf(s->why + n, sizeof(s->why) - (size_t)n, " (%s)", hint);
    return e;
}

int uffd_map_hook(struct moat_vm *vm, void *arg)
{
    struct snapvm *sv = snapvm_of(vm);
    struct uffd_setup *s = arg;
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (!s->socket_path || !*s->socket_path || strlen(s->socket_path) >= sizeof(sa.sun_path))
        return fail(s, -EINVAL, "uffd socket", "a path of 1 to 107 bytes");
    int fd = uffd_open();
    if (fd < 0)
        return fail(s, fd, "userfaultfd", "needs root, CAP_SYS_PTRACE, access to /dev/userfaultfd "
                    "or vm.unprivileged_userfaultfd=1");
    sv->uffd = fd;
    struct uffdio_api api = { .api = UFFD_API };
    if (ioctl(fd, UFFDIO_API, &api) < 0)
        return fail(s, -errno, "userfaultfd: UFFDIO_API", NULL);
    struct uffdio_register reg = {
        .range = { .start = (uint64_t)(uintptr_t)vm->ram, .len = vm->ram_map_size },
        .mode = UFFDIO_REGISTER_MODE_MISSING,
    };
    if (ioctl(fd, UFFDIO_REGISTER, &reg) < 0)
        return fail(s, -errno, "userfaultfd: registering guest memory", NULL);
    if (!(reg.ioctls & (1ull << _UFFDIO_COPY)) || !(reg.ioctls & (1ull << _UFFDIO_ZEROPAGE)))
        return fail(s, -ENOTSUP, "userfaultfd: guest memory cannot be filled by copy and zero page", NULL);
    struct uffd_region rg[UFFD_MAX_REGIONS];
    size_t n = 0;
    for (unsigned i = 0; i < vm->mem.n && n < UFFD_MAX_REGIONS; i++, n++)
        rg[n] = (struct uffd_region){ .host = (uint64_t)(uintptr_t)vm->mem.r[i].host, .size = vm->mem.r[i].size,
                                      .offset = (uint64_t)(vm->mem.r[i].host - vm->ram), .page_size = 4096 };
    char msg[UFFD_HANDSHAKE_MAX];
    long len = uffd_mappings_json(rg, n, msg, sizeof(msg));
    if (len < 0)
        return fail(s, (int)len, "uffd handshake", NULL);
    strcpy(sa.sun_path, s->socket_path);
    int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sock < 0)
        return fail(s, -errno, "uffd socket", NULL);
    sv->uffd_sock = sock;
    char what[160];
    snprintf(what, sizeof(what), "uffd socket %.120s", s->socket_path);
    if (connect(sock, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        return fail(s, -errno, what, "is the page-fault handler listening?");
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof(ctl));
    struct iovec iov = { .iov_base = msg, .iov_len = (size_t)len };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    ssize_t k;
    do
        k = sendmsg(sock, &mh, MSG_NOSIGNAL);
    while (k < 0 && errno == EINTR);
    if (k < 0)
        return fail(s, -errno, what, "sending the handshake");
    if (k != len)
        return fail(s, -EPIPE, what, "the handshake was cut short");
    log_debug("restore: guest memory from the page-fault handler on %s (%ld bytes of mappings)", s->socket_path,
              len);
    return 0;
}
