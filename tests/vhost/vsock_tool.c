/* Guest-side AF_VSOCK helper for tests/vhost/vsock.sh (the guest's busybox
 * has no vsock tool). Built static by the script and appended to the
 * initramfs as /bin/vsock-tool.
 *
 *   vsock-tool cid               print the guest's CID (/dev/vsock ioctl)
 *   vsock-tool echo PORT         listen on PORT; for each connection (one at
 *                                a time) send back everything received
 *                                until EOF, then close
 *   vsock-tool connect CID PORT MSG
 *                                connect, send MSG, shut down writing, copy
 *                                the reply to stdout until EOF
 * Exit 0, or 1 with a message on stderr. */
#include <errno.h>
#include <fcntl.h>
#include <linux/vm_sockets.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

static int die(const char *what)
{
    fprintf(stderr, "vsock-tool: %s: %s\n", what, strerror(errno));
    return 1;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static struct sockaddr_vm addr(unsigned cid, unsigned port)
{
    struct sockaddr_vm a;
    memset(&a, 0, sizeof a);
    a.svm_family = AF_VSOCK;
    a.svm_cid = cid;
    a.svm_port = port;
    return a;
}

static int do_echo(unsigned port)
{
    int l = socket(AF_VSOCK, SOCK_STREAM, 0);
    if (l < 0)
        return die("socket");
    struct sockaddr_vm a = addr(VMADDR_CID_ANY, port);
    if (bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 16) < 0)
        return die("bind/listen");
    for (;;) {
        int c = accept(l, NULL, NULL);
        if (c < 0) {
            if (errno == EINTR)
                continue;
            return die("accept");
        }
        char buf[16384];
        ssize_t n;
        while ((n = read(c, buf, sizeof buf)) > 0)
            if (write_all(c, buf, (size_t)n) < 0)
                break;
        close(c);
    }
}

static int do_connect(unsigned cid, unsigned port, const char *msg)
{
    int s = socket(AF_VSOCK, SOCK_STREAM, 0);
    if (s < 0)
        return die("socket");
    struct sockaddr_vm a = addr(cid, port);
    if (connect(s, (struct sockaddr *)&a, sizeof a) < 0)
        return die("connect");
    if (write_all(s, msg, strlen(msg)) < 0)
        return die("write");
    shutdown(s, SHUT_WR);
    char buf[16384];
    ssize_t n;
    while ((n = read(s, buf, sizeof buf)) > 0)
        if (write_all(1, buf, (size_t)n) < 0)
            return die("stdout");
    if (n < 0)
        return die("read");
    close(s);
    return 0;
}

static int do_cid(void)
{
    unsigned cid = 0;
    int fd = open("/dev/vsock", O_RDONLY);
    if (fd < 0)
        return die("/dev/vsock");
    if (ioctl(fd, IOCTL_VM_SOCKETS_GET_LOCAL_CID, &cid) < 0)
        return die("IOCTL_VM_SOCKETS_GET_LOCAL_CID");
    printf("%u\n", cid);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "cid"))
        return do_cid();
    if (argc == 3 && !strcmp(argv[1], "echo"))
        return do_echo((unsigned)strtoul(argv[2], NULL, 10));
    if (argc == 5 && !strcmp(argv[1], "connect"))
        return do_connect((unsigned)strtoul(argv[2], NULL, 10),
                          (unsigned)strtoul(argv[3], NULL, 10), argv[4]);
    fprintf(stderr, "usage: vsock-tool cid | echo PORT | connect CID PORT MSG\n");
    return 1;
}
