/* ctlprobe SOCKET: abuse a live moat control socket (docs/control-socket.md)
 * and check that every bad request gets its error line, a silent client is
 * dropped after ~2 s, a flood of idle connections does not wedge it, failed
 * snapshots leave the VM running, and status still answers. Exit 0 if all
 * held. Built on the host by sandbox.host, run in L1 by sandbox.sh. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static const char *path;
static int fails;

static int conn(void)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        perror("connect");
        exit(1);
    }
    struct timeval tv = { .tv_sec = 30 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

static void reply(int fd, char *buf, size_t len)
{
    size_t n = 0;
    ssize_t r;
    while (n + 1 < len && (r = recv(fd, buf + n, len - 1 - n, 0)) > 0)
        n += (size_t)r;
    buf[n] = 0;
    close(fd);
}

static void expect(const char *req, size_t len, const char *want)
{
    char buf[512];
    int fd = conn();
    if (send(fd, req, len, MSG_NOSIGNAL) < 0) { /* the server may close early */ }
    reply(fd, buf, sizeof buf);
    int ok = strncmp(buf, want, strlen(want)) == 0;
    printf("%s %.40s -> %s", ok ? "ok  " : "FAIL", req, buf[0] ? buf : "(nothing)\n");
    fails += !ok;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    path = argv[1];
    expect("status\n", 7, "ok running");
    expect("bogus\n", 6, "error bad request: unknown verb");
    expect("stop\0\n", 6, "error bad request: bad bytes");
    expect("stop\nstop\n", 10, "error bad request: bad bytes");
    expect("pause now\n", 10, "error bad request: bad argument");
    expect("snapshot \n", 10, "error bad request: bad argument");
    expect("\n", 1, "error bad request: empty");
    static char big[10000];
    memset(big, 'a', sizeof big);
    expect(big, sizeof big, "error bad request: too long");
    expect("snapshot /nonexistent/dir/s\n", 28, "error snapshot:");
    expect("stop-snapshot /nonexistent/dir/s\n", 33, "error snapshot:");
    expect("resume\n", 7, "ok running");
    /* A silent client is dropped after about 2 s, without a reply. */
    double t0 = now();
    char buf[64];
    reply(conn(), buf, sizeof buf);
    double dt = now() - t0;
    printf("%s silent client dropped after %.1f s\n", dt > 1 && dt < 20 && !buf[0] ? "ok  " : "FAIL", dt);
    fails += !(dt > 1 && dt < 20 && !buf[0]);
    /* Idle connections queue up and go away; the socket still answers. */
    int fds[12];
    for (int i = 0; i < 12; i++)
        fds[i] = conn();
    for (int i = 0; i < 12; i++)
        close(fds[i]);
    expect("status\n", 7, "ok running");
    printf("%d failed\n", fails);
    return fails ? 1 : 0;
}
