/* The passt backend (devices/net/net_passt.c).
 *
 * Part 1, always: the option parsers, and the backend against a fake
 * passt: this test binary itself, re-executed with MOAT_FAKE_PASST=MODE
 * (see fake_passt below), which takes the socket as --fd and writes the
 * --pid file as passt does, then echoes frames, closes, sends a bad
 * length, fails, hangs, ... Frames out and back, partial writes, the peer
 * closing, a bad length, start-up failures and time-outs, the stop
 * escalation, and that the child dies with its parent (PR_SET_PDEATHSIG).
 *
 * Part 2, with the real passt (SKIPPED, with the reason, where it is not
 * installed or the host has no default route, which passt needs): start
 * and stop, a DHCP exchange (DISCOVER out, OFFER back, with the MTU asked
 * for), TCP and UDP port forwards from loopback, and no passt left when
 * the process that started it is killed. Traffic stays on this machine:
 * frames go only to passt, and the forwards are reached on 127.0.0.1. */
#include <arpa/inet.h>
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "devices/net/net_passt.h"
#include "devices/net/passt_frame.h"
#include "vmm/base/clock.h"

#define FAKE_ENV        "MOAT_FAKE_PASST"
#define FAKE_ARGS_ENV   "MOAT_FAKE_PASST_ARGS"   /* file: the fake's argv and fds */
#define FAKE_PIDOUT_ENV "MOAT_FAKE_PASST_PIDOUT" /* file: the fake's pid, first thing */

static char self_exe[4096];
static char rundir[256];
static uint8_t *fbuf;       /* NET_FRAME_MAX, for recv */

/* ------------------------------------------------------------------ */
/* The fake passt                                                      */
/* ------------------------------------------------------------------ */

static void fake_write_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            _exit(3);
        b += w;
        n -= (size_t)w;
    }
}

static void fake_frame(int fd, uint32_t len, uint8_t fill)
{
    uint8_t pre[4];
    passt_len_encode(len, pre);
    fake_write_all(fd, pre, 4);
    for (uint32_t i = 0; i < len; i++) {
        uint8_t c = (uint8_t)(fill + i);
        fake_write_all(fd, &c, 1);
    }
}

static void fake_wait_eof(int fd)
{
    char b[4096];
    while (read(fd, b, sizeof b) > 0)
        ;
}

static int fake_passt(const char *mode, int argc, char **argv)
{
    const char *pidfile = NULL;
    int fd = -1;
    for (int i = 1; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--fd"))
            fd = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--pid"))
            pidfile = argv[i + 1];
    }
    const char *pidout = getenv(FAKE_PIDOUT_ENV);
    if (pidout) {
        FILE *f = fopen(pidout, "w");
        if (f) {
            fprintf(f, "%d\n", (int)getpid());
            fclose(f);
        }
    }
    const char *argsout = getenv(FAKE_ARGS_ENV);
    if (argsout) {
        FILE *f = fopen(argsout, "w");
        if (!f)
            return 4;
        for (int i = 0; i < argc; i++)
            fprintf(f, "arg %s\n", argv[i]);
        DIR *d = opendir("/proc/self/fd");
        int dfd = d ? dirfd(d) : -1;
        struct dirent *e;
        while (d && (e = readdir(d)))
            if (e->d_name[0] != '.' && atoi(e->d_name) != dfd && atoi(e->d_name) != fileno(f))
                fprintf(f, "fd %s\n", e->d_name);
        if (d)
            closedir(d);
        char l[256];
        ssize_t n = readlink("/proc/self/fd/0", l, sizeof l - 1);
        fprintf(f, "stdin %.*s\n", n > 0 ? (int)n : 0, l);
        struct stat sb;
        fprintf(f, "fd3 %s\n", fstat(3, &sb) == 0 && S_ISSOCK(sb.st_mode) ? "socket" : "other");
        fclose(f);
    }
    if (!strcmp(mode, "fail")) {
        fprintf(stderr, "Failed to send 20 bytes to syslog\nfake passt: cannot bind\n");
        return 1;
    }
    if (!strcmp(mode, "hang")) {
        for (;;)
            pause();
    }
    if (fd < 0 || !pidfile)
        return 2;
    if (!strcmp(mode, "linger"))
        signal(SIGTERM, SIG_IGN);
    fprintf(stderr, "fake passt ready\n");
    FILE *pf = fopen(pidfile, "w");
    if (!pf)
        return 5;
    fprintf(pf, "%d\n", (int)getpid());
    fclose(pf);
    if (!strcmp(mode, "slow-echo")) {
        struct timespec ts = { 0, 300 * 1000000 };
        nanosleep(&ts, NULL);
    }
    if (!strcmp(mode, "echo") || !strcmp(mode, "slow-echo")) {
        static uint8_t b[65536];
        for (;;) {
            ssize_t n = read(fd, b, sizeof b);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                return 0;
            fake_write_all(fd, b, (size_t)n);
        }
    }
    if (!strcmp(mode, "close")) {
        fake_frame(fd, 60, 0x10);
        return 0;
    }
    if (!strcmp(mode, "truncate")) {
        fake_frame(fd, 60, 0x10);
        uint8_t pre[4];
        passt_len_encode(100, pre);
        fake_write_all(fd, pre, 4);
        fake_write_all(fd, pre, 4);
        return 0;
    }
    if (!strcmp(mode, "badlen") || !strcmp(mode, "zerolen")) {
        fake_frame(fd, 60, 0x10);
        uint8_t pre[4];
        passt_len_encode(!strcmp(mode, "badlen") ? NET_FRAME_MAX + 1 : 0, pre);
        fake_write_all(fd, pre, 4);
        fake_frame(fd, 60, 0x20);
        fake_wait_eof(fd);
        return 0;
    }
    if (!strcmp(mode, "linger")) {
        fake_wait_eof(fd);
        for (;;)
            pause();
    }
    return 6;
}

/* ------------------------------------------------------------------ */
/* Helpers                                                             */
/* ------------------------------------------------------------------ */

static void setup(void)
{
    snprintf(rundir, sizeof rundir, "/tmp/moat-test-passt-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(rundir));
    chmod(rundir, 0755);        /* passt run as root drops to nobody */
    fbuf = malloc(NET_FRAME_MAX);
    ck_assert_ptr_nonnull(fbuf);
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", rundir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", rundir);
    free(fbuf);
}

static int dir_entries(const char *path)
{
    DIR *d = opendir(path);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

static struct net_passt_opts fake_opts(const char *mode)
{
    ck_assert_int_eq(setenv(FAKE_ENV, mode, 1), 0);
    return (struct net_passt_opts){ .passt = self_exe, .run_dir = rundir };
}

static struct net_backend *fake_start(const char *mode)
{
    struct net_passt_opts o = fake_opts(mode);
    struct net_backend *b = NULL;
    char why[512] = "";
    int r = net_passt_create(&o, &b, why, sizeof why);
    ck_assert_msg(r == 0, "create: %d %s", r, why);
    ck_assert_ptr_nonnull(b);
    return b;
}

static bool gone(pid_t pid)
{
    return kill(pid, 0) < 0 && errno == ESRCH;
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        p[i] = (uint8_t)(x >> 16);
    }
}

/* Wait up to ms for fd to be readable. */
static bool readable(int fd, int ms)
{
    struct pollfd p = { .fd = fd, .events = POLLIN };
    return poll(&p, 1, ms) == 1;
}

/* recv one frame, waiting up to ms for it. */
static ssize_t recv_wait(struct net_backend *b, int ms)
{
    uint64_t end = clock_mono_ns() + (uint64_t)ms * 1000000u;
    for (;;) {
        struct net_vhdr h;
        ssize_t n = b->ops->recv(b, &h, fbuf, NET_FRAME_MAX);
        if (n != -EAGAIN)
            return n;
        uint64_t now = clock_mono_ns();
        if (now >= end)
            return -EAGAIN;
        readable(b->fd, (int)((end - now) / 1000000u) + 1);
    }
}

/* ------------------------------------------------------------------ */
/* Options                                                             */
/* ------------------------------------------------------------------ */

START_TEST(parse_forward_valid)
{
    struct net_passt_fwd f;
    char why[256];
    ck_assert_int_eq(net_passt_parse_forward("tcp:8080:80", &f, why, sizeof why), 0);
    ck_assert(f.proto == NET_PASST_TCP && f.host_addr == 0 && f.host_port == 8080 && f.guest_port == 80);
    ck_assert_int_eq(net_passt_parse_forward("udp:5353:53", &f, why, sizeof why), 0);
    ck_assert(f.proto == NET_PASST_UDP && f.host_port == 5353 && f.guest_port == 53);
    ck_assert_int_eq(net_passt_parse_forward("tcp:65535:1", &f, why, sizeof why), 0);
    ck_assert(f.host_port == 65535 && f.guest_port == 1);
    ck_assert_int_eq(net_passt_parse_forward("tcp:127.0.0.1:2222:22", &f, why, sizeof why), 0);
    ck_assert(f.host_addr == 0x7f000001u && f.host_port == 2222 && f.guest_port == 22);
    ck_assert_int_eq(net_passt_parse_forward("udp:192.0.2.7:00053:053", &f, why, sizeof why), 0);
    ck_assert(f.host_addr == 0xc0000207u && f.host_port == 53 && f.guest_port == 53);
}
END_TEST

START_TEST(parse_forward_malformed)
{
    static const char *bad[] = {
        "", "tcp", "tcp:", "tcp:80", "tcp:80:", "tcp::80", ":80:80", "icmp:80:80", "TCP:80:80",
        "tcp :80:80", "tcp:0:80", "tcp:80:0", "tcp:65536:80", "tcp:80:65536", "tcp:123456:80",
        "tcp:-1:80", "tcp:+80:80", "tcp:80:80 ", "tcp: 80:80", "tcp:8o:80", "tcp:80:80:80",
        "tcp:1.2.3:80:80", "tcp:1.2.3.4.5:80:80", "tcp:256.1.1.1:80:80", "tcp:0.0.0.0:80:80",
        "tcp:::80:80", "tcp:a:b:c:d:e", "tcp:1.2.3.4:80:80:90", "tcp:80:80,udp:81:81",
        "tcp:[::1]:80:80", "tcp:1.2.3.4567890123456789:80:80",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct net_passt_fwd f = { .proto = NET_PASST_UDP, .host_port = 7, .guest_port = 9 };
        char why[256] = "";
        ck_assert_msg(net_passt_parse_forward(bad[i], &f, why, sizeof why) == -EINVAL, "\"%s\" accepted", bad[i]);
        ck_assert_msg(why[0] != 0, "\"%s\": no reason", bad[i]);
        ck_assert(f.proto == NET_PASST_UDP && f.host_port == 7 && f.guest_port == 9);   /* untouched */
    }
    struct net_passt_fwd f;
    char why[256] = "";
    ck_assert_int_eq(net_passt_parse_forward(NULL, &f, why, sizeof why), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "tcp:HOSTPORT:GUESTPORT"));
}
END_TEST

START_TEST(check_forwards)
{
    struct net_passt_fwd f[NET_PASST_MAX_FWD + 1];
    for (int i = 0; i <= NET_PASST_MAX_FWD; i++)
        f[i] = (struct net_passt_fwd){ NET_PASST_TCP, 0, (uint16_t)(20000 + i), 80 };
    char why[256];
    ck_assert_int_eq(net_passt_check_forwards(f, NET_PASST_MAX_FWD, why, sizeof why), 0);
    ck_assert_int_eq(net_passt_check_forwards(f, NET_PASST_MAX_FWD + 1, why, sizeof why), -EINVAL);
    ck_assert_int_eq(net_passt_check_forwards(NULL, 0, why, sizeof why), 0);
    ck_assert_int_eq(net_passt_check_forwards(NULL, 1, why, sizeof why), -EINVAL);
    /* the same host port twice: for one protocol no, for two yes */
    struct net_passt_fwd d[2] = { { NET_PASST_TCP, 0, 8080, 80 }, { NET_PASST_TCP, 0x7f000001u, 8080, 81 } };
    ck_assert_int_eq(net_passt_check_forwards(d, 2, why, sizeof why), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "tcp:8080"));
    d[1].proto = NET_PASST_UDP;
    ck_assert_int_eq(net_passt_check_forwards(d, 2, why, sizeof why), 0);
    struct net_passt_fwd z = { NET_PASST_TCP, 0, 0, 80 };
    ck_assert_int_eq(net_passt_check_forwards(&z, 1, why, sizeof why), -EINVAL);
    z = (struct net_passt_fwd){ NET_PASST_TCP, 0, 80, 0 };
    ck_assert_int_eq(net_passt_check_forwards(&z, 1, why, sizeof why), -EINVAL);
    z = (struct net_passt_fwd){ (enum net_passt_proto)7, 0, 80, 80 };
    ck_assert_int_eq(net_passt_check_forwards(&z, 1, why, sizeof why), -EINVAL);
}
END_TEST

static int argv_find(const struct net_passt_argv *a, const char *opt, const char *val)
{
    for (size_t i = 0; i < a->n; i++)
        if (!strcmp(a->v[i], opt) && (!val || (i + 1 < a->n && !strcmp(a->v[i + 1], val))))
            return (int)i;
    return -1;
}

static int argv_count(const struct net_passt_argv *a, const char *opt)
{
    int n = 0;
    for (size_t i = 0; i < a->n; i++)
        n += !strcmp(a->v[i], opt);
    return n;
}

START_TEST(argv_defaults)
{
    static struct net_passt_argv a;
    struct net_passt_opts o = { 0 };
    char why[256];
    ck_assert_int_eq(net_passt_argv(&o, "/usr/bin/passt", "/run/x/passt.pid", NULL, &a, why, sizeof why), 0);
    ck_assert_str_eq(a.v[0], "/usr/bin/passt");
    ck_assert_ptr_null(a.v[a.n]);
    ck_assert_int_ge(argv_find(&a, "--foreground", NULL), 1);
    ck_assert_int_ge(argv_find(&a, "--quiet", NULL), 1);
    ck_assert_int_ge(argv_find(&a, "--fd", "3"), 1);
    ck_assert_int_ge(argv_find(&a, "--pid", "/run/x/passt.pid"), 1);
    ck_assert_int_ge(argv_find(&a, "--mtu", "1500"), 1);
    ck_assert_int_ge(argv_find(&a, "--no-map-gw", NULL), 1);
    ck_assert_int_eq(argv_find(&a, "--runas", NULL), -1);
    ck_assert_int_ge(argv_find(&a, "--tcp-ports", "none"), 1);
    ck_assert_int_ge(argv_find(&a, "--udp-ports", "none"), 1);
    ck_assert_int_eq(argv_count(&a, "--tcp-ports") + argv_count(&a, "--udp-ports"), 2);
}
END_TEST

START_TEST(argv_forwards_mtu_runas)
{
    static struct net_passt_argv a;
    struct net_passt_fwd f[3] = { { NET_PASST_TCP, 0, 8080, 80 },
                                  { NET_PASST_UDP, 0, 5353, 53 },
                                  { NET_PASST_TCP, 0x7f000001u, 2222, 22 } };
    struct net_passt_opts o = { .fwd = f, .nfwd = 3, .mtu = 9000, .host_loopback = true };
    char why[256];
    ck_assert_int_eq(net_passt_argv(&o, "passt", "/p", "65534:65534", &a, why, sizeof why), 0);
    ck_assert_int_ge(argv_find(&a, "--mtu", "9000"), 1);
    ck_assert_int_eq(argv_find(&a, "--no-map-gw", NULL), -1);
    ck_assert_int_ge(argv_find(&a, "--runas", "65534:65534"), 1);
    ck_assert_int_ge(argv_find(&a, "--tcp-ports", "8080:80"), 1);
    ck_assert_int_ge(argv_find(&a, "--tcp-ports", "127.0.0.1/2222:22"), 1);
    ck_assert_int_ge(argv_find(&a, "--udp-ports", "5353:53"), 1);
    ck_assert_int_eq(argv_find(&a, "--tcp-ports", "none"), -1);
    ck_assert_int_eq(argv_find(&a, "--udp-ports", "none"), -1);
    ck_assert_int_eq(argv_count(&a, "--tcp-ports"), 2);
    ck_assert_int_eq(argv_count(&a, "--udp-ports"), 1);
    /* the most forwards fit */
    struct net_passt_fwd m[NET_PASST_MAX_FWD];
    for (int i = 0; i < NET_PASST_MAX_FWD; i++)
        m[i] = (struct net_passt_fwd){ NET_PASST_TCP, 0xc0a80001u + (uint32_t)i, (uint16_t)(60000 + i), 65535 };
    struct net_passt_opts mo = { .fwd = m, .nfwd = NET_PASST_MAX_FWD };
    ck_assert_int_eq(net_passt_argv(&mo, "passt", "/p", "1:1", &a, why, sizeof why), 0);
    ck_assert_int_eq(argv_count(&a, "--tcp-ports"), NET_PASST_MAX_FWD);
    ck_assert_int_ge(argv_find(&a, "--tcp-ports", "192.168.0.32/60031:65535"), 1);
}
END_TEST

START_TEST(argv_bad_mtu)
{
    static struct net_passt_argv a;
    char why[256];
    struct net_passt_opts o = { .mtu = NET_PASST_MIN_MTU - 1 };
    ck_assert_int_eq(net_passt_argv(&o, "passt", "/p", NULL, &a, why, sizeof why), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "mtu"));
    o.mtu = NET_PASST_MAX_MTU + 1;
    ck_assert_int_eq(net_passt_argv(&o, "passt", "/p", NULL, &a, why, sizeof why), -EINVAL);
    o.mtu = NET_PASST_MIN_MTU;
    ck_assert_int_eq(net_passt_argv(&o, "passt", "/p", NULL, &a, why, sizeof why), 0);
    o.mtu = NET_PASST_MAX_MTU;
    ck_assert_int_eq(net_passt_argv(&o, "passt", "/p", NULL, &a, why, sizeof why), 0);
    ck_assert_int_ge(argv_find(&a, "--mtu", "65520"), 1);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Against the fake passt                                              */
/* ------------------------------------------------------------------ */

START_TEST(missing_passt_says_how_to_install)
{
    struct net_passt_opts o = { .passt = "moat-test-no-such-passt", .run_dir = rundir };
    struct net_backend *b = (struct net_backend *)1;
    char why[512] = "";
    ck_assert_int_eq(net_passt_create(&o, &b, why, sizeof why), -ENOENT);
    ck_assert_ptr_null(b);
    ck_assert_ptr_nonnull(strstr(why, "apt-get install passt"));
    ck_assert_ptr_nonnull(strstr(why, "moat-test-no-such-passt"));
    /* a path, from the environment */
    ck_assert_int_eq(setenv(NET_PASST_ENV_BIN, "/nonexistent/passt", 1), 0);
    o.passt = NULL;
    why[0] = 0;
    ck_assert_int_eq(net_passt_create(&o, &b, why, sizeof why), -ENOENT);
    ck_assert_ptr_nonnull(strstr(why, "/nonexistent/passt"));
    ck_assert_ptr_nonnull(strstr(why, "apt-get install passt"));
    ck_assert_int_eq(dir_entries(rundir), 0);
}
END_TEST

/* The binary from $MOAT_PASST when opts.passt is NULL. */
START_TEST(env_selects_binary)
{
    ck_assert_int_eq(setenv(FAKE_ENV, "echo", 1), 0);
    ck_assert_int_eq(setenv(NET_PASST_ENV_BIN, self_exe, 1), 0);
    struct net_passt_opts o = { .run_dir = rundir };
    struct net_backend *b = NULL;
    char why[512] = "";
    ck_assert_msg(net_passt_create(&o, &b, why, sizeof why) == 0, "%s", why);
    char out[256];
    net_passt_output(b, out, sizeof out);
    ck_assert_ptr_nonnull(strstr(out, "fake passt ready"));
    b->ops->destroy(b);
}
END_TEST

START_TEST(echo_frames)
{
    struct net_backend *b = fake_start("echo");
    ck_assert_str_eq(b->ops->name, "user");
    ck_assert(!b->vnet_hdr);
    ck_assert_ptr_null(b->ops->set_offloads);
    ck_assert_int_ne(fcntl(b->fd, F_GETFL) & O_NONBLOCK, 0);
    ck_assert_int_ne(fcntl(b->fd, F_GETFD) & FD_CLOEXEC, 0);
    static const size_t sizes[] = { 1, 14, 60, 1514, 9000, 65535, NET_FRAME_MAX };
    uint8_t *f = malloc(NET_FRAME_MAX);
    ck_assert_ptr_nonnull(f);
    for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        fill(f, sizes[i], i);
        struct net_vhdr h = { 0 };
        int r;
        while ((r = b->ops->send(b, &h, f, sizes[i])) == -EAGAIN) {
            struct pollfd p = { .fd = b->fd, .events = POLLOUT };
            poll(&p, 1, 1000);
        }
        ck_assert_int_eq(r, 0);
        ssize_t n = recv_wait(b, 3000);
        ck_assert_int_eq(n, (ssize_t)sizes[i]);
        ck_assert_mem_eq(fbuf, f, sizes[i]);
    }
    /* two frames sent back to back come back as two */
    fill(f, 100, 77);
    ck_assert_int_eq(b->ops->send(b, NULL, f, 100), 0);
    ck_assert_int_eq(b->ops->send(b, NULL, f, 50), 0);
    ck_assert(readable(b->fd, 3000));
    struct net_vhdr h;
    memset(&h, 0xff, sizeof h);
    ck_assert_int_eq(recv_wait(b, 3000), 100);
    ck_assert_int_eq(recv_wait(b, 3000), 50);
    ck_assert_int_eq(b->ops->recv(b, &h, fbuf, NET_FRAME_MAX), -EAGAIN);
    /* the header is zeroed: no vnet_hdr */
    static const struct net_vhdr zero;
    ck_assert_mem_eq(&h, &zero, sizeof h);
    free(f);
    b->ops->destroy(b);
}
END_TEST

START_TEST(send_recv_bad_arguments)
{
    struct net_backend *b = fake_start("echo");
    uint8_t f[64] = { 0 };
    ck_assert_int_eq(b->ops->send(b, NULL, f, 0), -EINVAL);
    ck_assert_int_eq(b->ops->send(b, NULL, NULL, 10), -EINVAL);
    uint8_t *big = calloc(1, NET_FRAME_MAX + 1);
    ck_assert_int_eq(b->ops->send(b, NULL, big, NET_FRAME_MAX + 1), -EMSGSIZE);
    free(big);
    ck_assert_int_eq(b->ops->recv(b, NULL, fbuf, NET_FRAME_MAX - 1), -EINVAL);
    /* nothing went out */
    ck_assert(!readable(b->fd, 100));
    b->ops->destroy(b);
}
END_TEST

/* The child gets exactly stdin (/dev/null), stdout, stderr and the socket
 * as fd 3, and the command line net_passt_argv makes. */
START_TEST(child_fds_and_args)
{
    char args[300];
    snprintf(args, sizeof args, "%s/../moat-test-passt-args-%d", rundir, (int)getpid());
    ck_assert_int_eq(setenv(FAKE_ARGS_ENV, args, 1), 0);
    int extra = open("/dev/null", O_RDONLY);    /* not close-on-exec: must still not reach passt */
    ck_assert_int_ge(extra, 0);
    struct net_backend *b = fake_start("echo");
    b->ops->destroy(b);
    close(extra);
    FILE *f = fopen(args, "r");
    ck_assert_ptr_nonnull(f);
    char line[512];
    int fds = 0, have[4] = { 0 };
    bool fd3_arg = false, pid_arg = false, runas = false, stdin_null = false, fd3_sock = false;
    char prev[512] = "";
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (!strncmp(line, "fd ", 3)) {
            int n = atoi(line + 3);
            ck_assert_msg(n >= 0 && n <= 3, "fd %d open in passt", n);
            have[n] = 1;
            fds++;
        }
        if (!strcmp(prev, "arg --fd") && !strcmp(line, "arg 3"))
            fd3_arg = true;
        if (!strcmp(prev, "arg --pid") && strstr(line, "/moat-passt-") && strstr(line, "/passt.pid"))
            pid_arg = true;
        if (!strcmp(line, "arg --runas"))
            runas = true;
        if (!strcmp(line, "stdin /dev/null"))
            stdin_null = true;
        if (!strcmp(line, "fd3 socket"))
            fd3_sock = true;
        snprintf(prev, sizeof prev, "%s", line);
    }
    fclose(f);
    unlink(args);
    ck_assert_int_eq(fds, 4);
    ck_assert(have[0] && have[1] && have[2] && have[3]);
    ck_assert(fd3_arg && pid_arg && stdin_null && fd3_sock);
    ck_assert(runas == (geteuid() == 0));
}
END_TEST

/* A binary that cannot be executed: the reason is execve's. */
START_TEST(exec_failure_reported)
{
    char bad[300];
    snprintf(bad, sizeof bad, "%s/not-a-program", rundir);
    FILE *f = fopen(bad, "w");
    ck_assert_ptr_nonnull(f);
    fputs("\x01\x02 not a program\n", f);
    fclose(f);
    ck_assert_int_eq(chmod(bad, 0755), 0);
    struct net_passt_opts o = { .passt = bad, .run_dir = rundir };
    struct net_backend *b = (struct net_backend *)1;
    char why[512] = "";
    ck_assert_int_eq(net_passt_create(&o, &b, why, sizeof why), -ENOEXEC);
    ck_assert_ptr_null(b);
    ck_assert_ptr_nonnull(strstr(why, "cannot execute"));
    ck_assert_int_eq(dir_entries(rundir), 1);       /* only the file above */
}
END_TEST

static void on_usr1(int sig) { (void)sig; }

/* The child resets its signal handlers and mask for passt: the caller's
 * stay as they were. */
START_TEST(caller_signals_untouched)
{
    struct sigaction sa = { .sa_handler = on_usr1 }, cur;
    ck_assert_int_eq(sigaction(SIGUSR1, &sa, NULL), 0);
    sigset_t m, before, after;
    sigemptyset(&m);
    sigaddset(&m, SIGUSR2);
    ck_assert_int_eq(pthread_sigmask(SIG_BLOCK, &m, &before), 0);
    ck_assert_int_eq(pthread_sigmask(SIG_BLOCK, NULL, &before), 0);
    struct net_backend *b = fake_start("echo");
    ck_assert_int_eq(pthread_sigmask(SIG_BLOCK, NULL, &after), 0);
    for (int sig = 1; sig < 32; sig++)
        ck_assert_int_eq(sigismember(&before, sig), sigismember(&after, sig));
    ck_assert_int_eq(sigaction(SIGUSR1, NULL, &cur), 0);
    ck_assert_ptr_eq((void *)cur.sa_handler, (void *)on_usr1);
    b->ops->destroy(b);
}
END_TEST

/* Nothing on disk once passt is up, and the child gone after destroy. */
START_TEST(runtime_dir_and_child_cleaned)
{
    struct net_backend *b = fake_start("echo");
    pid_t pid = net_passt_pid(b);
    ck_assert_int_gt(pid, 0);
    ck_assert(!gone(pid));
    ck_assert_int_eq(dir_entries(rundir), 0);
    b->ops->destroy(b);
    ck_assert(gone(pid));
    ck_assert_int_eq(dir_entries(rundir), 0);
}
END_TEST

/* Send until -EAGAIN: a partial write holds the rest; the same frame sent
 * again finishes it and it arrives once; a different frame sent instead
 * goes after the held one. */
START_TEST(partial_write_keeps_stream_whole)
{
    struct net_backend *b = fake_start("slow-echo");    /* reads nothing for 300 ms */
    int small = 4096;
    ck_assert_int_eq(setsockopt(b->fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
    uint8_t *f1 = malloc(60000), *f2 = malloc(60000), *f3 = malloc(200);
    ck_assert(f1 && f2 && f3);
    fill(f1, 60000, 1);
    fill(f2, 60000, 2);
    fill(f3, 200, 3);
    /* f1: the socket takes part of it */
    ck_assert_int_eq(b->ops->send(b, NULL, f1, 60000), -EAGAIN);
    /* f3 cannot go while f1's rest is held */
    ck_assert_int_eq(b->ops->send(b, NULL, f3, 200), -EAGAIN);
    int r, tries = 0;
    while ((r = b->ops->send(b, NULL, f1, 60000)) == -EAGAIN) {
        struct pollfd p = { .fd = b->fd, .events = POLLOUT };
        poll(&p, 1, 1000);
        ck_assert_int_lt(++tries, 10000);
    }
    ck_assert_int_eq(r, 0);
    ck_assert_int_eq(recv_wait(b, 3000), 60000);      /* f1, once */
    ck_assert_mem_eq(fbuf, f1, 60000);
    /* f2 until the socket takes only part of it (the echo is reading now,
     * so some go whole: each comes back before the next is sent, and the
     * next send starts on an empty socket, so it takes at least a part) */
    while ((r = b->ops->send(b, NULL, f2, 60000)) == 0) {
        ck_assert_int_eq(recv_wait(b, 3000), 60000);
        ck_assert_mem_eq(fbuf, f2, 60000);
    }
    ck_assert_int_eq(r, -EAGAIN);
    /* f3 instead of f2's retry: the held f2 is finished first */
    while ((r = b->ops->send(b, NULL, f3, 200)) == -EAGAIN) {
        struct pollfd p = { .fd = b->fd, .events = POLLOUT };
        poll(&p, 1, 1000);
    }
    ck_assert_int_eq(r, 0);
    ck_assert_int_eq(recv_wait(b, 3000), 60000);
    ck_assert_mem_eq(fbuf, f2, 60000);
    ck_assert_int_eq(recv_wait(b, 3000), 200);
    ck_assert_mem_eq(fbuf, f3, 200);
    ck_assert_int_eq(recv_wait(b, 200), -EAGAIN);
    free(f1);
    free(f2);
    free(f3);
    b->ops->destroy(b);
}
END_TEST

/* Many frames of every size through a small send buffer, the device's way
 * (send until -EAGAIN, then poll for POLLOUT and POLLIN, recv until
 * -EAGAIN): all come back, in order, byte for byte. */
START_TEST(stress_device_loop)
{
    struct net_backend *b = fake_start("echo");
    int small = 8192;
    ck_assert_int_eq(setsockopt(b->fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
    enum { N = 300 };
    uint8_t *f = malloc(NET_FRAME_MAX), *want = malloc(NET_FRAME_MAX);
    ck_assert(f && want);
    unsigned sent = 0, got = 0, eagain = 0;
    uint32_t x = 12345;
    size_t len[N];
    for (unsigned i = 0; i < N; i++) {
        x = x * 1103515245u + 12345u;
        len[i] = i % 10 == 0 ? NET_FRAME_MAX : 1 + (x >> 8) % (i % 3 ? 1514 : NET_FRAME_MAX);
    }
    uint64_t end = clock_mono_ns() + 20000000000ull;
    while (got < N) {
        ck_assert_msg(clock_mono_ns() < end, "stuck: sent %u got %u", sent, got);
        bool blocked = false;
        while (sent < N) {
            fill(f, len[sent], sent);
            int r = b->ops->send(b, NULL, f, len[sent]);
            if (r == -EAGAIN) {
                eagain++;
                blocked = true;
                break;
            }
            ck_assert_int_eq(r, 0);
            sent++;
        }
        struct pollfd p = { .fd = b->fd, .events = POLLIN | (blocked ? POLLOUT : 0) };
        poll(&p, 1, 1000);
        ssize_t n;
        while ((n = b->ops->recv(b, NULL, fbuf, NET_FRAME_MAX)) > 0) {
            ck_assert_uint_lt(got, sent);
            ck_assert_int_eq(n, (ssize_t)len[got]);
            fill(want, len[got], got);
            ck_assert_msg(!memcmp(fbuf, want, (size_t)n), "frame %u differs", got);
            got++;
        }
        ck_assert_int_eq(n, -EAGAIN);
    }
    ck_assert_uint_gt(eagain, 0);       /* the held-frame path ran */
    free(f);
    free(want);
    b->ops->destroy(b);
}
END_TEST

START_TEST(peer_close_is_epipe)
{
    struct net_backend *b = fake_start("close");
    ck_assert_int_eq(recv_wait(b, 3000), 60);
    ck_assert_int_eq(fbuf[0], 0x10);
    ck_assert_int_eq(recv_wait(b, 3000), -EPIPE);
    ck_assert_int_eq(b->ops->recv(b, NULL, fbuf, NET_FRAME_MAX), -EPIPE);
    uint8_t f[60] = { 0 };
    ck_assert_int_eq(b->ops->send(b, NULL, f, sizeof f), -EPIPE);
    b->ops->destroy(b);
}
END_TEST

START_TEST(peer_cuts_frame_short)
{
    struct net_backend *b = fake_start("truncate");
    ck_assert_int_eq(recv_wait(b, 3000), 60);
    ck_assert_int_eq(recv_wait(b, 3000), -EPIPE);
    b->ops->destroy(b);
}
END_TEST

START_TEST(peer_bad_length_is_eproto)
{
    static const char *modes[] = { "badlen", "zerolen" };
    for (int i = 0; i < 2; i++) {
        struct net_backend *b = fake_start(modes[i]);
        ck_assert_int_eq(recv_wait(b, 3000), 60);       /* the good frame before it */
        ck_assert_int_eq(fbuf[0], 0x10);
        ck_assert_int_eq(recv_wait(b, 3000), -EPROTO);
        ck_assert_int_eq(b->ops->recv(b, NULL, fbuf, NET_FRAME_MAX), -EPROTO);   /* sticky */
        b->ops->destroy(b);
    }
}
END_TEST

START_TEST(start_failure_quotes_passt)
{
    struct net_passt_opts o = fake_opts("fail");
    struct net_backend *b = (struct net_backend *)1;
    char why[512] = "";
    ck_assert_int_eq(net_passt_create(&o, &b, why, sizeof why), -EIO);
    ck_assert_ptr_null(b);
    ck_assert_ptr_nonnull(strstr(why, "status 1"));
    ck_assert_ptr_nonnull(strstr(why, "fake passt: cannot bind"));
    ck_assert_ptr_null(strstr(why, "syslog"));
    ck_assert_int_eq(dir_entries(rundir), 0);
}
END_TEST

START_TEST(start_timeout_kills_it)
{
    char pidout[300];
    snprintf(pidout, sizeof pidout, "%s/../moat-test-passt-pid-%d", rundir, (int)getpid());
    ck_assert_int_eq(setenv(FAKE_PIDOUT_ENV, pidout, 1), 0);
    struct net_passt_opts o = fake_opts("hang");
    o.start_timeout_ms = 300;
    struct net_backend *b = (struct net_backend *)1;
    char why[512] = "";
    uint64_t t0 = clock_mono_ns();
    ck_assert_int_eq(net_passt_create(&o, &b, why, sizeof why), -ETIMEDOUT);
    uint64_t ms = (clock_mono_ns() - t0) / 1000000u;
    ck_assert_uint_ge(ms, 300);
    ck_assert_uint_lt(ms, 300 + NET_PASST_STOP_GRACE_MS + 1000);
    ck_assert_ptr_null(b);
    ck_assert_ptr_nonnull(strstr(why, "did not start within 300 ms"));
    FILE *f = fopen(pidout, "r");
    ck_assert_ptr_nonnull(f);
    int pid = 0;
    ck_assert_int_eq(fscanf(f, "%d", &pid), 1);
    fclose(f);
    unlink(pidout);
    ck_assert_int_gt(pid, 0);
    ck_assert(gone(pid));
    ck_assert_int_eq(dir_entries(rundir), 0);
}
END_TEST

/* A child that outlives its socket: destroy sends no signal (moat's
 * seccomp lists allow none to another process), returns after the grace
 * period, and leaves the child to PR_SET_PDEATHSIG (pdeathsig_* below). */
START_TEST(destroy_leaves_a_lingering_child)
{
    struct net_backend *b = fake_start("linger");
    pid_t pid = net_passt_pid(b);
    uint64_t t0 = clock_mono_ns();
    b->ops->destroy(b);
    uint64_t ms = (clock_mono_ns() - t0) / 1000000u;
    ck_assert_uint_ge(ms, NET_PASST_STOP_GRACE_MS);
    ck_assert_uint_lt(ms, NET_PASST_STOP_GRACE_MS + 2000);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, WNOHANG), 0);       /* not signalled, still there */
    ck_assert_int_eq(kill(pid, SIGKILL), 0);
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
}
END_TEST

/* Start a backend in a child process ("moat"), SIGKILL that child, and
 * return what became of its passt: its wait status, or -1 if it was still
 * running after ms milliseconds. The test process is a subreaper, so the
 * orphaned passt is its child. */
static int kill_moat_and_wait_passt(struct net_passt_opts *o, int ms, pid_t *passt_pid)
{
    ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t moat = fork();
    ck_assert_int_ge(moat, 0);
    if (moat == 0) {
        struct net_backend *b = NULL;
        char why[512];
        int pid = net_passt_create(o, &b, why, sizeof why) == 0 ? net_passt_pid(b) : -1;
        if (pid < 0)
            fprintf(stderr, "create: %s\n", why);
        if (write(p[1], &pid, sizeof pid) != sizeof pid)
            _exit(1);
        for (;;)
            pause();
    }
    close(p[1]);
    int pid = -1;
    ck_assert_int_eq(read(p[0], &pid, sizeof pid), (ssize_t)sizeof pid);
    close(p[0]);
    ck_assert_int_gt(pid, 0);
    *passt_pid = pid;
    ck_assert(!gone(pid));
    ck_assert_int_eq(kill(moat, SIGKILL), 0);
    int st;
    ck_assert_int_eq(waitpid(moat, &st, 0), moat);
    uint64_t end = clock_mono_ns() + (uint64_t)ms * 1000000u;
    while (clock_mono_ns() < end) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid)
            return st;
        struct timespec ts = { 0, 5000000 };
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

/* The fake "linger" outlives its socket and ignores SIGTERM: only the
 * parent-death signal ends it. */
START_TEST(child_dies_with_moat_pdeathsig)
{
    struct net_passt_opts o = fake_opts("linger");
    pid_t pid;
    int st = kill_moat_and_wait_passt(&o, 3000, &pid);
    ck_assert_msg(st != -1, "the child outlived the process that started it");
    ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    ck_assert_int_eq(dir_entries(rundir), 0);
}
END_TEST

/* A host port in use: refused before passt starts. */
START_TEST(host_port_in_use)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(s, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY) };
    ck_assert_int_eq(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(listen(s, 1), 0);
    socklen_t al = sizeof a;
    ck_assert_int_eq(getsockname(s, (struct sockaddr *)&a, &al), 0);
    uint16_t port = ntohs(a.sin_port);
    char args[300];
    snprintf(args, sizeof args, "%s/../moat-test-passt-args-%d", rundir, (int)getpid());
    unlink(args);
    ck_assert_int_eq(setenv(FAKE_ARGS_ENV, args, 1), 0);
    struct net_passt_fwd f = { NET_PASST_TCP, 0, port, 80 };
    struct net_passt_opts o = fake_opts("echo");
    o.fwd = &f;
    o.nfwd = 1;
    struct net_backend *b = NULL;
    char why[512] = "";
    ck_assert_int_eq(net_passt_create(&o, &b, why, sizeof why), -EADDRINUSE);
    ck_assert_ptr_nonnull(strstr(why, "in use"));
    ck_assert(access(args, F_OK) < 0);      /* never started */
    ck_assert_int_eq(dir_entries(rundir), 0);
    /* on 127.0.0.1 only: the same */
    f.host_addr = 0x7f000001u;
    ck_assert_int_eq(net_passt_create(&o, &b, why, sizeof why), -EADDRINUSE);
    close(s);
    /* free again: starts */
    f.host_addr = 0;
    ck_assert_msg(net_passt_create(&o, &b, why, sizeof why) == 0, "%s", why);
    b->ops->destroy(b);
    unlink(args);
}
END_TEST

/* Run as root, passt runs as nobody: a port it could not bind is refused. */
START_TEST(root_low_port_refused)
{
    if (geteuid() != 0) {
        printf("SKIPPED: net_passt root_low_port_refused: not root\n");
        return;
    }
    unsigned low = 1024;
    FILE *pf = fopen("/proc/sys/net/ipv4/ip_unprivileged_port_start", "r");
    if (pf) {
        if (fscanf(pf, "%u", &low) != 1)
            low = 1024;
        fclose(pf);
    }
    if (low <= 1) {
        printf("SKIPPED: net_passt root_low_port_refused: every port is unprivileged here\n");
        return;
    }
    struct net_passt_fwd f = { NET_PASST_UDP, 0, (uint16_t)(low - 1), 53 };
    struct net_passt_opts o = fake_opts("echo");
    o.fwd = &f;
    o.nfwd = 1;
    struct net_backend *b = NULL;
    char why[512] = "";
    ck_assert_int_eq(net_passt_create(&o, &b, why, sizeof why), -EACCES);
    ck_assert_ptr_nonnull(strstr(why, "ip_unprivileged_port_start"));
}
END_TEST

/* ------------------------------------------------------------------ */
/* With the real passt                                                 */
/* ------------------------------------------------------------------ */

static struct net_backend *real_start(struct net_passt_opts *o)
{
    o->run_dir = rundir;
    struct net_backend *b = NULL;
    char why[512] = "";
    int r = net_passt_create(o, &b, why, sizeof why);
    ck_assert_msg(r == 0, "create: %d %s", r, why);
    return b;
}

static void proc_field(pid_t pid, const char *file, const char *key, char *out, size_t len)
{
    char p[64], line[256];
    snprintf(p, sizeof p, "/proc/%d/%s", (int)pid, file);
    out[0] = 0;
    FILE *f = fopen(p, "r");
    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof line, f)) {
        if (!key || !strncmp(line, key, strlen(key))) {
            line[strcspn(line, "\n")] = 0;
            snprintf(out, len, "%s", line + (key ? strlen(key) : 0));
            break;
        }
    }
    fclose(f);
}

START_TEST(real_start_stop)
{
    struct net_passt_opts o = { 0 };
    struct net_backend *b = real_start(&o);
    pid_t pid = net_passt_pid(b);
    ck_assert(!gone(pid));
    char comm[256], uid[256];
    proc_field(pid, "comm", NULL, comm, sizeof comm);
    ck_assert_msg(!strncmp(comm, "passt", 5), "comm %s", comm);
    proc_field(pid, "status", "Uid:", uid, sizeof uid);
    if (geteuid() == 0)     /* dropped to nobody */
        ck_assert_msg(atoi(uid) != 0, "passt runs as uid %s", uid);
    ck_assert_int_eq(dir_entries(rundir), 0);
    b->ops->destroy(b);
    ck_assert(gone(pid));
    ck_assert_int_eq(dir_entries(rundir), 0);
}
END_TEST

static const uint8_t guest_mac[6] = { 0x52, 0x54, 0x00, 0x12, 0x34, 0x56 };

static uint16_t ip_csum(const uint8_t *p, size_t n)
{
    uint32_t s = 0;
    for (size_t i = 0; i + 1 < n; i += 2)
        s += (uint32_t)p[i] << 8 | p[i + 1];
    if (n & 1)
        s += (uint32_t)p[n - 1] << 8;
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    return (uint16_t)~s;
}

static void be16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

/* A DHCPDISCOVER from guest_mac, broadcast: the frame's length. */
static size_t dhcp_discover(uint8_t *f, uint32_t xid)
{
    memset(f, 0, 14 + 20 + 8 + 300);
    memset(f, 0xff, 6);
    memcpy(f + 6, guest_mac, 6);
    be16(f + 12, 0x0800);
    uint8_t *ip = f + 14, *udp = ip + 20, *bp = udp + 8;
    bp[0] = 1;                  /* BOOTREQUEST */
    bp[1] = 1;                  /* Ethernet */
    bp[2] = 6;
    bp[4] = (uint8_t)(xid >> 24); bp[5] = (uint8_t)(xid >> 16); bp[6] = (uint8_t)(xid >> 8); bp[7] = (uint8_t)xid;
    be16(bp + 10, 0x8000);      /* broadcast */
    memcpy(bp + 28, guest_mac, 6);
    static const uint8_t opts[] = { 99, 130, 83, 99, 53, 1, 1, 55, 4, 1, 3, 6, 26, 255 };
    memcpy(bp + 236, opts, sizeof opts);
    size_t blen = 300;
    be16(udp, 68);
    be16(udp + 2, 67);
    be16(udp + 4, (uint16_t)(8 + blen));
    ip[0] = 0x45;
    be16(ip + 2, (uint16_t)(20 + 8 + blen));
    ip[8] = 64;
    ip[9] = 17;
    memset(ip + 16, 0xff, 4);
    be16(ip + 10, ip_csum(ip, 20));
    return 14 + 20 + 8 + blen;
}

/* An IPv4 frame's L4 header and protocol, or NULL. */
static const uint8_t *ipv4_l4(const uint8_t *f, size_t n, uint8_t *proto, size_t *l4len)
{
    if (n < 14 + 20 || rd16(f + 12) != 0x0800 || (f[14] >> 4) != 4)
        return NULL;
    size_t ihl = (size_t)(f[14] & 15) * 4;
    if (ihl < 20 || 14 + ihl > n)
        return NULL;
    *proto = f[14 + 9];
    *l4len = n - 14 - ihl;
    return f + 14 + ihl;
}

/* The DHCP message type and MTU option of a DHCP reply with xid. */
static bool dhcp_reply(const uint8_t *f, size_t n, uint32_t xid, int *type, int *mtu, uint32_t *yiaddr)
{
    uint8_t proto;
    size_t l;
    const uint8_t *u = ipv4_l4(f, n, &proto, &l);
    if (!u || proto != 17 || l < 8 + 240 || rd16(u) != 67 || rd16(u + 2) != 68)
        return false;
    const uint8_t *bp = u + 8;
    if (bp[0] != 2 || rd32(bp + 4) != xid || rd32(bp + 236) != 0x63825363u)
        return false;
    *yiaddr = rd32(bp + 16);
    *type = *mtu = -1;
    for (size_t i = 240; i < l - 8;) {
        uint8_t c = bp[i];
        if (c == 255)
            break;
        if (c == 0) {
            i++;
            continue;
        }
        if (i + 2 > l - 8 || i + 2 + bp[i + 1] > l - 8)
            break;
        if (c == 53 && bp[i + 1] == 1)
            *type = bp[i + 2];
        if (c == 26 && bp[i + 1] == 2)
            *mtu = rd16(bp + i + 2);
        i += 2u + bp[i + 1];
    }
    return true;
}

START_TEST(real_dhcp_offer)
{
    struct net_passt_opts o = { .mtu = 1400 };
    struct net_backend *b = real_start(&o);
    /* frames passt drops (a runt, one past 65535 bytes) first: the
     * stream stays in step */
    uint8_t *junk = calloc(1, NET_FRAME_MAX);
    ck_assert_ptr_nonnull(junk);
    ck_assert_int_eq(b->ops->send(b, NULL, junk, 10), 0);
    ck_assert_int_eq(b->ops->send(b, NULL, junk, NET_FRAME_MAX), 0);
    free(junk);
    uint8_t f[400];
    uint32_t xid = 0x6d6f6174;
    size_t n = dhcp_discover(f, xid);
    ck_assert_int_eq(b->ops->send(b, NULL, f, n), 0);
    int type = -1, mtu = -1;
    uint32_t yi = 0;
    bool got = false;
    uint64_t end = clock_mono_ns() + 3000000000ull;
    while (!got && clock_mono_ns() < end) {
        ssize_t r = recv_wait(b, 500);
        if (r > 0 && dhcp_reply(fbuf, (size_t)r, xid, &type, &mtu, &yi)) {
            got = true;
            ck_assert_mem_eq(fbuf, guest_mac, 6);       /* to the guest */
        }
    }
    ck_assert_msg(got, "no DHCP reply from passt");
    ck_assert_int_eq(type, 2);          /* DHCPOFFER */
    ck_assert_int_eq(mtu, 1400);
    ck_assert_uint_ne(yi, 0);
    b->ops->destroy(b);
}
END_TEST

static uint16_t free_port(int type)
{
    int s = socket(AF_INET, type, 0);
    ck_assert_int_ge(s, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    ck_assert_int_eq(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t al = sizeof a;
    ck_assert_int_eq(getsockname(s, (struct sockaddr *)&a, &al), 0);
    close(s);
    return ntohs(a.sin_port);
}

/* tcp:H:G and udp:H2:G2: a connect to 127.0.0.1:H is a SYN to the guest's
 * port G; a datagram to 127.0.0.1:H2 reaches the guest's port G2. */
START_TEST(real_port_forwards)
{
    uint16_t ht = free_port(SOCK_STREAM), hu = free_port(SOCK_DGRAM);
    struct net_passt_fwd f[2] = { { NET_PASST_TCP, 0, ht, 8022 }, { NET_PASST_UDP, 0x7f000001u, hu, 8053 } };
    struct net_passt_opts o = { .fwd = f, .nfwd = 2 };
    struct net_backend *b = real_start(&o);
    int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(ht), .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    int r = connect(c, (struct sockaddr *)&a, sizeof a);
    ck_assert(r == 0 || errno == EINPROGRESS);
    int u = socket(AF_INET, SOCK_DGRAM, 0);
    a.sin_port = htons(hu);
    ck_assert_int_eq(sendto(u, "moat-hello", 10, 0, (struct sockaddr *)&a, sizeof a), 10);
    bool syn = false, dgram = false;
    uint64_t end = clock_mono_ns() + 3000000000ull;
    while (!(syn && dgram) && clock_mono_ns() < end) {
        ssize_t n = recv_wait(b, 500);
        if (n <= 0)
            continue;
        uint8_t proto;
        size_t l;
        const uint8_t *l4 = ipv4_l4(fbuf, (size_t)n, &proto, &l);
        if (!l4)
            continue;
        if (proto == 6 && l >= 20 && rd16(l4 + 2) == 8022 && (l4[13] & 0x02))
            syn = true;
        if (proto == 17 && l >= 8 + 10 && rd16(l4 + 2) == 8053 && !memcmp(l4 + 8, "moat-hello", 10))
            dgram = true;
    }
    ck_assert_msg(syn, "no SYN to guest port 8022 for host port %u", ht);
    ck_assert_msg(dgram, "no datagram to guest port 8053 for host port %u", hu);
    close(c);
    close(u);
    b->ops->destroy(b);
}
END_TEST

/* The process that started passt is SIGKILLed: passt goes too (its socket
 * closes; as root the parent-death signal does not survive passt's drop
 * to nobody, so this is the socket's doing there). */
START_TEST(real_dies_with_moat)
{
    struct net_passt_opts o = { .run_dir = rundir };
    pid_t pid;
    int st = kill_moat_and_wait_passt(&o, 3000, &pid);
    ck_assert_msg(st != -1, "passt %d outlived the process that started it", (int)pid);
    ck_assert_int_eq(dir_entries(rundir), 0);
}
END_TEST

/* passt cannot reach its pid file (root: it runs as nobody, and the
 * directory's parent is root's alone): create fails with passt's words. */
START_TEST(real_start_failure_reported)
{
    if (geteuid() != 0) {
        printf("SKIPPED: net_passt real_start_failure_reported: needs root (passt as nobody)\n");
        return;
    }
    char priv[300];
    snprintf(priv, sizeof priv, "%s/private", rundir);
    ck_assert_int_eq(mkdir(priv, 0700), 0);
    struct net_passt_opts o = { .run_dir = priv };
    struct net_backend *b = NULL;
    char why[512] = "";
    ck_assert_int_eq(net_passt_create(&o, &b, why, sizeof why), -EIO);
    ck_assert_ptr_nonnull(strstr(why, "PID file"));
    ck_assert_ptr_nonnull(strstr(why, "runs as nobody"));
    ck_assert_int_eq(dir_entries(priv), 0);
}
END_TEST

static bool have_real_passt(char *why, size_t wlen)
{
    const char *path = getenv("PATH");
    char p[4096];
    bool found = false;
    for (const char *d = path ? path : "/usr/bin:/bin"; *d && !found;) {
        const char *c = strchr(d, ':');
        size_t l = c ? (size_t)(c - d) : strlen(d);
        snprintf(p, sizeof p, "%.*s/passt", (int)l, d);
        found = access(p, X_OK) == 0;
        d = c ? c + 1 : d + l;
    }
    if (!found) {
        snprintf(why, wlen, "passt is not installed (apt-get install passt; scripts/deps.sh)");
        return false;
    }
    FILE *f = fopen("/proc/net/route", "r");
    char line[256];
    bool route = false;
    while (f && fgets(line, sizeof line, f)) {
        char ifn[64];
        unsigned dst;
        if (sscanf(line, "%63s %x", ifn, &dst) == 2 && dst == 0)
            route = true;
    }
    if (f)
        fclose(f);
    if (!route) {
        snprintf(why, wlen, "no IPv4 default route: passt takes its addresses from that interface");
        return false;
    }
    return true;
}

int main(int argc, char **argv)
{
    const char *mode = getenv(FAKE_ENV);
    if (mode)
        return fake_passt(mode, argc, argv);
    ssize_t n = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
    if (n <= 0)
        return EXIT_FAILURE;
    self_exe[n] = 0;
    unsetenv(NET_PASST_ENV_BIN);
    unsetenv(FAKE_ARGS_ENV);
    unsetenv(FAKE_PIDOUT_ENV);

    Suite *s = suite_create("net_passt");
    TCase *tc = tcase_create("options");
    tcase_add_test(tc, parse_forward_valid);
    tcase_add_test(tc, parse_forward_malformed);
    tcase_add_test(tc, check_forwards);
    tcase_add_test(tc, argv_defaults);
    tcase_add_test(tc, argv_forwards_mtu_runas);
    tcase_add_test(tc, argv_bad_mtu);
    suite_add_tcase(s, tc);

    tc = tcase_create("fake");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, missing_passt_says_how_to_install);
    tcase_add_test(tc, env_selects_binary);
    tcase_add_test(tc, echo_frames);
    tcase_add_test(tc, send_recv_bad_arguments);
    tcase_add_test(tc, child_fds_and_args);
    tcase_add_test(tc, runtime_dir_and_child_cleaned);
    tcase_add_test(tc, exec_failure_reported);
    tcase_add_test(tc, caller_signals_untouched);
    tcase_add_test(tc, partial_write_keeps_stream_whole);
    tcase_add_test(tc, stress_device_loop);
    tcase_add_test(tc, peer_close_is_epipe);
    tcase_add_test(tc, peer_cuts_frame_short);
    tcase_add_test(tc, peer_bad_length_is_eproto);
    tcase_add_test(tc, start_failure_quotes_passt);
    tcase_add_test(tc, start_timeout_kills_it);
    tcase_add_test(tc, destroy_leaves_a_lingering_child);
    tcase_add_test(tc, child_dies_with_moat_pdeathsig);
    tcase_add_test(tc, host_port_in_use);
    tcase_add_test(tc, root_low_port_refused);
    suite_add_tcase(s, tc);

    char why[256];
    if (have_real_passt(why, sizeof why)) {
        tc = tcase_create("real");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 30);
        tcase_add_test(tc, real_start_stop);
        tcase_add_test(tc, real_dhcp_offer);
        tcase_add_test(tc, real_port_forwards);
        tcase_add_test(tc, real_dies_with_moat);
        tcase_add_test(tc, real_start_failure_reported);
        suite_add_tcase(s, tc);
    } else {
        printf("SKIPPED: net_passt with the real passt: %s\n", why);
    }
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
