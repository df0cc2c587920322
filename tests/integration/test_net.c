/* virtio-net through the moat binary on /dev/kvm and a TAP device, all
 * inside a network namespace this program makes (and always removes):
 *  - the tiny polling driver guest (tests/guests/net.c) in the namespace
 *    (`ip netns exec`), a UDP echo responder on 10.88.0.1 there (a child
 *    that enters it with setns(2)): a ping, ARP both ways (the host has no
 *    neighbour entry for the guest: the guest must answer the host's ARP
 *    request), a few hundred datagrams that all come back in order, a large
 *    one, a short transmit chain the device must refuse and hand back —
 *    without mergeable receive buffers, and with them (small buffers, so
 *    the large frame spans several) plus an MTU in the config space, all
 *    sent at once;
 *  - checksum offload: the namespace routes 10.99.0.0/24 out of a second
 *    TAP the test reads; a right NEEDS_CSUM header goes through, two whose
 *    csum_start aims at the destination address / port must not leave;
 *  - taps moat cannot open (a TUN device of that name, a TAP held by
 *    another process): moat exits 2 naming the device; no net device at
 *    all: the guest says so.
 * No traffic leaves the namespace.
 *
 * Environment: MOAT_BIN (build/moat), MOAT_GUESTS (build/guests),
 * MOAT_TEST_SLOW (time limits x N), MOAT_REQUIRE_KVM (fail instead of skip
 * without KVM). Needs root, /dev/net/tun and iproute2's `ip` (with
 * `ip netns`): without them it prints SKIPPED and passes. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../guests/expect.h"
#include "../guests/net_proto.h"
#include "host_probe.h"
#include "harness.h"

#define OUT_CAP   (1u << 20)
#define HOST_IP   "10.88.0.1"
#define GUEST_IP  "10.88.0.2"
#define HOST_MAC  "02:00:0a:58:00:01"
#define GUEST_MAC "52:54:00:0a:58:02"
#define ECHO_PORT 7777
#define TAP       "moattap0"        /* names inside the namespace: no clash outside */
#define TUN       "moattun0"
#define BUSY_TAP  "moatbusy0"
#define FAR_TAP   "moatfar0"        /* the far side of the namespace's router (checksum test) */
#define FAR_NET   "10.99.0.0/24"
#define FAR_IP    "10.99.0.5"
#define FAR_MAC   "02:00:0a:63:00:05"

static const char *moat_bin(void) { return env_or("MOAT_BIN", "build/moat"); }
static const char *guests(void) { return env_or("MOAT_GUESTS", "build/guests"); }

static char ip_bin[512];           /* iproute2's ip */
static char netns[64];             /* the namespace, "" until made */
static char netns_path[128];       /* /var/run/netns/NAME */
static pid_t main_pid;

/* ---- running commands ---- */

struct run {
    char *out;          /* stdout: the guest's console */
    char *err;          /* stderr: moat's messages */
    size_t len, elen;
    int status;         /* exit status, 128 + signal */
};

/* Run argv with its stdout and stderr collected apart (moat's log lines
 * must not split the guest's); SIGKILL after cap_s (x slow). */
static void run_argv(struct run *r, double cap_s, const char *const *argv)
{
    memset(r, 0, sizeof *r);
    r->out = calloc(1, OUT_CAP + 1);
    r->err = calloc(1, OUT_CAP + 1);
    ck_assert(r->out && r->err);
    int po[2], pe[2];
    ck_assert_int_eq(pipe2(po, O_CLOEXEC), 0);
    ck_assert_int_eq(pipe2(pe, O_CLOEXEC), 0);
    pid_t pid = spawn_child("test_net", argv, po[1], pe[1], true, false);
    close(po[1]);
    close(pe[1]);
    double deadline = now() + cap_s * slow();
    bool killed = false;
    struct pollfd pf[2] = { { po[0], POLLIN, 0 }, { pe[0], POLLIN, 0 } };
    char *dst[2] = { r->out, r->err };
    size_t *len[2] = { &r->len, &r->elen };
    while (pf[0].fd >= 0 || pf[1].fd >= 0) {
        double left = deadline - now();
        if (left <= 0 && !killed) {
            kill(pid, SIGKILL);
            killed = true;
        }
        int n = poll(pf, 2, killed ? 1000 : (int)(left * 1000) + 1);
        if (n < 0 && errno != EINTR)
            break;
        if (n <= 0)
            continue;
        for (int k = 0; k < 2; k++) {
            if (pf[k].fd < 0 || !pf[k].revents)
                continue;
            char buf[4096];
            ssize_t got = read(pf[k].fd, buf, sizeof buf);
            if (got <= 0) {
                close(pf[k].fd);
                pf[k].fd = -1;
                continue;
            }
            for (ssize_t i = 0; i < got; i++)
                if (!buf[i])
                    buf[i] = '?';
            if (*len[k] + (size_t)got <= OUT_CAP) {
                memcpy(dst[k] + *len[k], buf, (size_t)got);
                *len[k] += (size_t)got;
            }
        }
    }
    for (int k = 0; k < 2; k++)
        if (pf[k].fd >= 0)
            close(pf[k].fd);
    int st = 0;
    waitpid(pid, &st, 0);
    r->status = WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
}

static void run_free(struct run *r)
{
    free(r->out);
    free(r->err);
}

#define RUN(r, cap, ...) run_argv((r), (cap), (const char *const[]){ __VA_ARGS__, NULL })

static void show(const struct run *r, const char *what)
{
    fprintf(stderr, "---- %s: status %d, console:\n%.*s---- stderr:\n%.*s----\n", what, r->status,
            (int)(r->len > 6000 ? 6000 : r->len), r->out, (int)(r->elen > 3000 ? 3000 : r->elen), r->err);
}

/* `ip ARGS...` (outside any namespace, or in ours: "netns", "exec", ...);
 * its status, its output in out (if given). */
static int ip_cmd(char *out, size_t cap, const char *const *args)
{
    const char *argv[32] = { ip_bin };
    size_t n = 1;
    for (; args[n - 1] && n < 31; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0)
            dup2(nul, 0);
        dup2(p[1], 1);
        dup2(p[1], 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(p[1]);
    size_t len = 0;
    char tmp[1024];
    ssize_t got;
    while ((got = read(p[0], tmp, sizeof tmp)) > 0 || (got < 0 && errno == EINTR)) {
        for (ssize_t i = 0; out && i < got && len + 1 < cap; i++)
            out[len++] = tmp[i];
    }
    if (out && cap)
        out[len] = 0;
    close(p[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
#define IP(out, cap, ...) ip_cmd((out), (cap), (const char *const[]){ __VA_ARGS__, NULL })
#define IPNS(out, cap, ...) IP((out), (cap), "netns", "exec", netns, ip_bin, __VA_ARGS__)

/* ---- the namespace ---- */

/* Remove the namespace (the taps in it go with it). Safe to call twice,
 * and from a signal handler of the main process (fork + exec only). */
static void netns_remove(void)
{
    if (!netns[0] || getpid() != main_pid)
        return;
    pid_t pid = fork();
    if (pid == 0) {
        execl(ip_bin, ip_bin, "netns", "delete", netns, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    if (pid > 0)
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
    if (pid < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        static const char m[] = "test_net: could not delete the network namespace\n";
        if (write(2, m, sizeof m - 1) < 0) {
            /* nothing more to do */
        }
    }
    netns[0] = 0;
}

static void on_signal(int sig)
{
    netns_remove();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Make the namespace with TAP (HOST_IP/24, HOST_MAC, up) and TUN (a TUN
 * device: not something moat can open as a TAP). 0, or -1 with why. */
static int netns_make(char *why, size_t wlen)
{
    char out[1024];
    snprintf(netns, sizeof netns, "moat-test-net-%d-%u", (int)getpid(), (unsigned)rand() % 100000u);
    snprintf(netns_path, sizeof netns_path, "/var/run/netns/%s", netns);
    if (IP(out, sizeof out, "netns", "add", netns) != 0) {
        snprintf(why, wlen, "ip netns add %s: %.300s", netns, out);
        netns[0] = 0;
        return -1;
    }
#define STEP(what, ...)                                                         \
    do {                                                                        \
        if (IPNS(out, sizeof out, __VA_ARGS__) != 0) {                          \
            snprintf(why, wlen, "%s in the namespace: %.300s", what, out);          \
            netns_remove();                                                     \
            return -1;                                                          \
        }                                                                       \
    } while (0)
    STEP("ip tuntap add " TAP, "tuntap", "add", "dev", TAP, "mode", "tap");
    STEP("ip link set " TAP " address", "link", "set", "dev", TAP, "address", HOST_MAC);
    STEP("ip addr add", "addr", "add", HOST_IP "/24", "dev", TAP);
    STEP("ip link set " TAP " up", "link", "set", "dev", TAP, "up");
    STEP("ip link set lo up", "link", "set", "dev", "lo", "up");
    STEP("ip tuntap add " TUN, "tuntap", "add", "dev", TUN, "mode", "tun");
    /* a router: what comes in on TAP for FAR_NET goes out on FAR_TAP (read
     * by the test, with no offloads: the kernel completes checksums) */
    STEP("ip tuntap add " FAR_TAP, "tuntap", "add", "dev", FAR_TAP, "mode", "tap");
    STEP("ip link set " FAR_TAP " up", "link", "set", "dev", FAR_TAP, "up");
    STEP("ip route add " FAR_NET, "route", "add", FAR_NET, "dev", FAR_TAP);
    STEP("ip neigh add " FAR_IP, "neigh", "add", FAR_IP, "lladdr", FAR_MAC, "dev", FAR_TAP, "nud", "permanent");
#undef STEP
    if (IP(out, sizeof out, "netns", "exec", netns, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward") != 0) {
        snprintf(why, wlen, "ip_forward in the namespace: %.300s", out);
        netns_remove();
        return -1;
    }
    return 0;
}

/* Enter the namespace (in a child of the test). */
static int enter_netns(void)
{
    int fd = open(netns_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int r = setns(fd, CLONE_NEWNET);
    close(fd);
    return r;
}

/* ---- the echo responder ---- */

struct echo {
    pid_t pid;
    int stop_w;         /* closed: the responder reports and exits */
    int result_r;
};
struct echo_result {
    unsigned long datagrams;    /* starting with "moat-net-" */
    unsigned long other;        /* anything else */
    unsigned long bytes;
    int err;                    /* errno of a failed sendto, or of setup */
};

/* A child in the namespace that binds HOST_IP:ECHO_PORT and sends every
 * datagram back to where it came from, counting them. Returns once it is
 * bound. */
static void echo_start(struct echo *e)
{
    int stop[2], res[2], ready[2];
    ck_assert_int_eq(pipe2(stop, O_CLOEXEC), 0);
    ck_assert_int_eq(pipe2(res, O_CLOEXEC), 0);
    ck_assert_int_eq(pipe2(ready, O_CLOEXEC), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(stop[1]);
        close(res[0]);
        close(ready[0]);
        struct echo_result er = { 0 };
        int s = -1;
        if (enter_netns() < 0 || (s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0) {
            er.err = errno;
        } else {
            int big = 8 << 20;
            setsockopt(s, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
            setsockopt(s, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big);
            struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(ECHO_PORT) };
            inet_pton(AF_INET, HOST_IP, &a.sin_addr);
            if (bind(s, (struct sockaddr *)&a, sizeof a) < 0)
                er.err = errno;
        }
        char c = er.err ? 'e' : 'r';
        if (write(ready[1], &c, 1) != 1)
            _exit(1);
        close(ready[1]);
        while (!er.err) {
            struct pollfd pf[2] = { { s, POLLIN, 0 }, { stop[0], POLLIN, 0 } };
            if (poll(pf, 2, -1) < 0) {
                if (errno == EINTR)
                    continue;
                er.err = errno;
                break;
            }
            if (pf[0].revents & POLLIN) {
                static char buf[65536];
                struct sockaddr_in from;
                socklen_t fl = sizeof from;
                ssize_t n = recvfrom(s, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl);
                if (n < 0)
                    continue;
                if ((size_t)n >= 9 && !memcmp(buf, "moat-net-", 9))
                    er.datagrams++;
                else
                    er.other++;
                er.bytes += (unsigned long)n;
                if (sendto(s, buf, (size_t)n, 0, (struct sockaddr *)&from, fl) != n)
                    er.err = errno ? errno : EIO;
                continue;
            }
            if (pf[1].revents)
                break;
        }
        if (write(res[1], &er, sizeof er) != (ssize_t)sizeof er)
            _exit(1);
        _exit(0);
    }
    close(stop[0]);
    close(res[1]);
    close(ready[1]);
    char c = 0;
    ck_assert_int_eq(read(ready[0], &c, 1), 1);
    close(ready[0]);
    e->pid = pid;
    e->stop_w = stop[1];
    e->result_r = res[0];
    ck_assert_msg(c == 'r', "the echo responder could not bind " HOST_IP ":%d in the namespace", ECHO_PORT);
}

static void echo_stop(struct echo *e, struct echo_result *er)
{
    close(e->stop_w);
    memset(er, 0, sizeof *er);
    ssize_t n = read(e->result_r, er, sizeof *er);
    close(e->result_r);
    int st;
    waitpid(e->pid, &st, 0);
    ck_assert_int_eq(n, (ssize_t)sizeof *er);
}

/* ---- the guest ---- */

static const char *net_elf(void)
{
    static char p[512];
    snprintf(p, sizeof p, "%s/net.elf", guests());
    return p;
}

/* The number after key in the guest's output, or -1. */
static long out_num(const struct run *r, const char *key)
{
    const char *p = strstr(r->out, key);
    return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

/* One run of the guest through TAP; extra: device options after tap=,
 * cmdline_extra: guest settings after the common ones. */
static void guest_run(const char *dev_extra, const char *cmdline_extra, unsigned count, bool mrg)
{
    /* the host must ask the guest for its MAC (ARP), not remember it */
    char out[512];
    IPNS(out, sizeof out, "neigh", "flush", "dev", TAP);
    struct echo e;
    echo_start(&e);
    char dev[256], cmdline[512];
    snprintf(dev, sizeof dev, "net,tap=" TAP ",mac=" GUEST_MAC "%s", dev_extra);
    snprintf(cmdline, sizeof cmdline,
             "net.ip=" GUEST_IP " net.peer=" HOST_IP " net.peermac=" HOST_MAC " net.port=%d net.mac=" GUEST_MAC
             " net.count=%u %s", ECHO_PORT, count, cmdline_extra);
    struct run r;
    RUN(&r, 120, ip_bin, "netns", "exec", netns, moat_bin(), "run", "--timeout", "100", "--kernel", net_elf(),
        "--device", dev, "--cmdline", cmdline);
    show(&r, cmdline);
    struct echo_result er;
    echo_stop(&e, &er);
    printf("test_net: echo side: %lu datagrams, %lu other, %lu bytes, error %d\n", er.datagrams, er.other, er.bytes,
           er.err);
    ck_assert_int_eq(r.status, 0);
    ck_assert(strstr(r.out, NET_OK_PING));
    ck_assert(strstr(r.out, NET_OK_ARP));
    ck_assert(strstr(r.out, NET_OK_BULK));
    ck_assert(strstr(r.out, NET_OK_BIG));
    ck_assert(strstr(r.out, NET_OK_BAD));
    ck_assert(strstr(r.out, NET_OK_ALL));
    /* moat says why it refused the short chain */
    ck_assert(strstr(r.err, "transmit chain of 20 bytes refused"));
    ck_assert_int_eq(er.err, 0);
    ck_assert_uint_eq(er.datagrams, NET_DATAGRAMS(count));
    ck_assert_uint_eq(er.other, 0);
    ck_assert_int_eq(out_num(&r, "replies "), (long)NET_DATAGRAMS(count));
    ck_assert_int_ge(out_num(&r, NET_ARP_ANSWERED), 1);
    long mb = out_num(&r, NET_MAX_BUFFERS);
    if (mrg)
        ck_assert_int_ge(mb, 2);
    else
        ck_assert_int_eq(mb, 1);
    run_free(&r);
}

START_TEST(udp_plain)
{
    guest_run("", "net.mrg=0 net.window=16", 300, false);
}
END_TEST

START_TEST(udp_mergeable_burst)
{
    guest_run(",mtu=1400", "net.mrg=1 net.mtu=1400 net.window=500", 500, true);
}
END_TEST

/* The egress policy in the device: the preset denies the peer (10/8 is
 * private) when nothing allows it, so nothing reaches the echo side and the
 * guest fails for want of an answer to its first ping (20; net.wait=5: it
 * waits ~2 s for it, not the default ~20 s); an allow rule for the peer's
 * port, or the preset turned off, lets everything through. */
START_TEST(egress_policy)
{
    char out[512];
    IPNS(out, sizeof out, "neigh", "flush", "dev", TAP);
    struct echo e;
    echo_start(&e);
    char cmdline[512];
    snprintf(cmdline, sizeof cmdline,
             "net.ip=" GUEST_IP " net.peer=" HOST_IP " net.peermac=" HOST_MAC " net.port=%d net.mac=" GUEST_MAC
             " net.count=20 net.mrg=0 net.wait=5", ECHO_PORT);
    struct run r;
    RUN(&r, 120, ip_bin, "netns", "exec", netns, moat_bin(), "run", "--timeout", "100", "--kernel", net_elf(),
        "--device", "net,tap=" TAP ",mac=" GUEST_MAC ",policy=\"default allow\"", "--cmdline", cmdline);
    show(&r, "policy: default allow, the preset on");
    struct echo_result er;
    echo_stop(&e, &er);
    ck_assert_int_eq(r.status, 20);         /* the ping: no reply */
    ck_assert_uint_eq(er.datagrams, 0);
    ck_assert(!strstr(r.out, NET_OK_PING));
    run_free(&r);
    guest_run(",policy=\"default deny; allow " HOST_IP "/32,port=7777,proto=udp\"", "net.mrg=0 net.window=16", 50,
              false);
    guest_run(",policy=\"default allow; no-preset\"", "net.mrg=0 net.window=16", 50, false);
}
END_TEST

/* ---- the far side of the router (checksum offload) ---- */

struct far {
    pid_t pid;
    int stop_w;
    int result_r;
};
struct far_result {
    unsigned long good;         /* NET_CSUM_GOOD to FAR_IP:ECHO_PORT with a valid UDP checksum */
    unsigned long good_badsum;  /* ... with a bad one */
    unsigned long unchanged;    /* another NET_CSUM frame to FAR_IP:ECHO_PORT */
    unsigned long rewritten;    /* a NET_CSUM frame to another address or port */
    unsigned long other;        /* anything else (the kernel's IPv6 chatter) */
    char seen[160];             /* the first rewritten one */
    int err;
};

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

/* The ones' complement sum of a UDP datagram and its IPv4 pseudo header:
 * 0xffff when its checksum is right. */
static uint16_t udp4_sum(const uint8_t *ip, const uint8_t *udp, size_t ulen)
{
    uint32_t s = 17u + (uint32_t)ulen;
    for (size_t i = 12; i < 20; i += 2)
        s += rd16(ip + i);
    for (size_t i = 0; i + 1 < ulen; i += 2)
        s += rd16(udp + i);
    if (ulen & 1)
        s += (uint32_t)udp[ulen - 1] << 8;
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    return (uint16_t)s;
}

static void far_frame(struct far_result *fr, const uint8_t *f, size_t n)
{
    const uint8_t *ip = f + 14;
    size_t ihl = n >= 34 ? (size_t)(ip[0] & 15) * 4 : 0;
    if (n < 14 + 20 + 8 || rd16(f + 12) != 0x0800 || ihl < 20 || ip[9] != 17 || 14 + ihl + 8 > n) {
        fr->other++;
        return;
    }
    const uint8_t *udp = ip + ihl, *pl = udp + 8;
    size_t ulen = rd16(udp + 4), plen = n - 14 - ihl - 8;
    if (plen < strlen(NET_CSUM) || memcmp(pl, NET_CSUM, strlen(NET_CSUM)) || ulen < 8 || 14 + ihl + ulen > n) {
        fr->other++;
        return;
    }
    struct in_addr far;
    inet_pton(AF_INET, FAR_IP, &far);
    uint8_t dst[4];
    memcpy(dst, ip + 16, 4);
    if (!memcmp(dst, &far, 4) && rd16(udp + 2) == ECHO_PORT) {
        if (plen < strlen(NET_CSUM_GOOD) || memcmp(pl, NET_CSUM_GOOD, strlen(NET_CSUM_GOOD)))
            fr->unchanged++;
        else if (rd16(udp + 6) != 0 && udp4_sum(ip, udp, ulen) == 0xffff)
            fr->good++;
        else
            fr->good_badsum++;
        return;
    }
    if (!fr->rewritten++)
        snprintf(fr->seen, sizeof fr->seen, "%.14s to %u.%u.%u.%u port %u", (const char *)pl, dst[0], dst[1], dst[2],
                 dst[3], rd16(udp + 2));
}

/* A child in the namespace that holds FAR_TAP and sorts what the router
 * sends out of it; returns once it holds it. */
static void far_start(struct far *fa)
{
    int stop[2], res[2], ready[2];
    ck_assert_int_eq(pipe2(stop, O_CLOEXEC), 0);
    ck_assert_int_eq(pipe2(res, O_CLOEXEC), 0);
    ck_assert_int_eq(pipe2(ready, O_CLOEXEC), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(stop[1]);
        close(res[0]);
        close(ready[0]);
        struct far_result fr = { 0 };
        int fd = -1;
        struct ifreq ifr;
        memset(&ifr, 0, sizeof ifr);
        ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
        snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", FAR_TAP);
        if (enter_netns() < 0 || (fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC)) < 0 ||
            ioctl(fd, TUNSETIFF, &ifr) < 0)
            fr.err = errno;
        char c = fr.err ? 'e' : 'r';
        if (write(ready[1], &c, 1) != 1)
            _exit(1);
        close(ready[1]);
        bool stopping = false;
        while (!fr.err) {
            /* after the stop: what is still on its way, for half a second */
            struct pollfd pf[2] = { { fd, POLLIN, 0 }, { stopping ? -1 : stop[0], POLLIN, 0 } };
            int k = poll(pf, 2, stopping ? 500 : -1);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0)
                break;
            if (pf[0].revents & POLLIN) {
                static uint8_t buf[65536];
                ssize_t got = read(fd, buf, sizeof buf);
                if (got > 0)
                    far_frame(&fr, buf, (size_t)got);
            }
            if (pf[1].revents)
                stopping = true;
        }
        if (write(res[1], &fr, sizeof fr) != (ssize_t)sizeof fr)
            _exit(1);
        _exit(0);
    }
    close(stop[0]);
    close(res[1]);
    close(ready[1]);
    char c = 0;
    ck_assert_int_eq(read(ready[0], &c, 1), 1);
    close(ready[0]);
    fa->pid = pid;
    fa->stop_w = stop[1];
    fa->result_r = res[0];
    ck_assert_msg(c == 'r', "could not hold " FAR_TAP " in the namespace");
}

static void far_stop(struct far *fa, struct far_result *fr)
{
    close(fa->stop_w);
    memset(fr, 0, sizeof *fr);
    ssize_t n = read(fa->result_r, fr, sizeof *fr);
    close(fa->result_r);
    int st;
    waitpid(fa->pid, &st, 0);
    ck_assert_int_eq(n, (ssize_t)sizeof *fr);
}

/* Checksum offload must not rewrite a frame after the policy passed it
 * (docs/net.md, "The virtio-net header"): the guest (net.csum=1) sends
 * through the namespace's router, to FAR_IP:ECHO_PORT, one datagram with a
 * right NEEDS_CSUM header, which must come out of FAR_TAP with a valid
 * checksum, and two whose csum_start points at the destination address or
 * port, which the host would overwrite with a value the guest chose (to
 * an address and a port the policy denies): they must not come out at all,
 * and moat says why it dropped them. With the policy allowing only
 * FAR_IP:ECHO_PORT, and with no policy (the header is checked always). */
static void csum_run(const char *policy)
{
    struct far fa;
    far_start(&fa);
    char dev[256], cmdline[512];
    snprintf(dev, sizeof dev, "net,tap=" TAP ",mac=" GUEST_MAC "%s", policy);
    snprintf(cmdline, sizeof cmdline,
             "net.ip=" GUEST_IP " net.peer=" FAR_IP " net.peermac=" HOST_MAC " net.port=%d net.mac=" GUEST_MAC
             " net.csum=1 net.wait=10", ECHO_PORT);
    struct run r;
    RUN(&r, 120, ip_bin, "netns", "exec", netns, moat_bin(), "run", "--timeout", "100", "--kernel", net_elf(),
        "--device", dev, "--cmdline", cmdline);
    show(&r, dev);
    struct far_result fr;
    far_stop(&fa, &fr);
    printf("test_net: far side (%s): good %lu, good with a bad checksum %lu, unchanged %lu, rewritten %lu (%s), "
           "other %lu, error %d\n", policy, fr.good, fr.good_badsum, fr.unchanged, fr.rewritten, fr.seen, fr.other,
           fr.err);
    fflush(stdout);
    ck_assert_int_eq(r.status, 0);
    ck_assert(strstr(r.out, NET_OK_CSUM));
    ck_assert_int_eq(fr.err, 0);
    ck_assert_msg(fr.rewritten == 0, "a frame left with the destination its checksum wrote: %s", fr.seen);
    ck_assert_uint_eq(fr.unchanged, 0);
    ck_assert_uint_eq(fr.good_badsum, 0);
    ck_assert_uint_eq(fr.good, 1);
    /* both refusals, with the reason */
    const char *m = strstr(r.err, "csum_start is not where the TCP/UDP header starts");
    ck_assert_msg(m && strstr(m + 1, "csum_start is not where the TCP/UDP header starts"), "%s", r.err);
    run_free(&r);
}

START_TEST(csum_offload_rewrite)
{
    csum_run(",policy=\"default deny; allow " FAR_IP "/32,port=7777,proto=udp\"");
    csum_run("");
}
END_TEST

/* A sandbox's network device while it runs: moat net / set / get through
 * its control socket change the policy (an item at a time, a bad one
 * refused with the policy kept), the metadata document, a rate limit and
 * the link, and tell the counters. The guest is a small one that only
 * spins; the sandbox's moat runs in the namespace, with the TAP. */
START_TEST(sandbox_net_commands)
{
    char home[] = "/tmp/moat-netsbx-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(home));
    setenv("MOAT_HOME", home, 1);
    char counter[512], md[600], pol[256];
    snprintf(counter, sizeof counter, "%s/counter.elf", guests());
    snprintf(md, sizeof md, "%s/md.json", home);
    FILE *f = fopen(md, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\n  \"latest\": {\"meta-data\": {\"instance-id\": \"i-1\"}}\n}\n", f);
    fclose(f);
    struct run r;
    RUN(&r, 60, ip_bin, "netns", "exec", netns, moat_bin(), "create", "nb", "--wait", "0", "--kernel", counter,
        "--cmdline", "spin=1000000000", "--net", "tap=" TAP ",mmds", "--net-default", "deny", "--net-allow",
        HOST_IP "/32,port=7777,proto=udp");
    show(&r, "create");
    ck_assert_int_eq(r.status, 0);
    run_free(&r);
    snprintf(pol, sizeof pol, "default deny; allow " HOST_IP "/32,port=7777,proto=udp");
    RUN(&r, 20, moat_bin(), "net", "nb", "policy");
    ck_assert_int_eq(r.status, 0);
    ck_assert_msg(r.len == strlen(pol) + 1 && !memcmp(r.out, pol, strlen(pol)), "%.*s", (int)r.len, r.out);
    run_free(&r);
    RUN(&r, 20, moat_bin(), "net", "nb", "deny", "10.88.0.0/24");
    ck_assert_int_eq(r.status, 0);
    run_free(&r);
    RUN(&r, 20, moat_bin(), "net", "nb", "allow", "1.2.3.0/33");
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(strstr(r.err, "prefix /33"), "%.*s", (int)r.elen, r.err);
    run_free(&r);
    RUN(&r, 20, moat_bin(), "net", "nb", "policy");
    ck_assert_msg(strstr(r.out, "; deny 10.88.0.0/24") && !strstr(r.out, "1.2.3.0"), "%.*s", (int)r.len, r.out);
    run_free(&r);
    RUN(&r, 20, moat_bin(), "net", "nb", "show");
    ck_assert_int_eq(r.status, 0);
    ck_assert_msg(strstr(r.out, "10.88.0.0/24") && strstr(r.out, "metadata requests 0") &&
                  strstr(r.out, "mac ") && strstr(r.out, "tx frames"), "%.*s", (int)r.len, r.out);
    run_free(&r);
    RUN(&r, 20, moat_bin(), "net", "nb", "metadata", md);
    ck_assert_msg(r.status == 0, "%.*s", (int)r.elen, r.err);
    run_free(&r);
    RUN(&r, 20, moat_bin(), "set", "nb", "net", "metadata", "[1, 2]");
    ck_assert_int_eq(r.status, 1);                  /* not an object */
    run_free(&r);
    RUN(&r, 20, moat_bin(), "net", "nb", "limit", "tx_bw", "100000/100");
    ck_assert_int_eq(r.status, 0);
    run_free(&r);
    RUN(&r, 20, moat_bin(), "net", "nb", "limit", "tx_bw", "fast");
    ck_assert_int_eq(r.status, 1);
    run_free(&r);
    RUN(&r, 20, moat_bin(), "set", "nb", "net:net0", "link", "down");
    ck_assert_int_eq(r.status, 0);
    run_free(&r);
    RUN(&r, 20, moat_bin(), "set", "nb", "net", "mac", "52:54:00:00:00:01");
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(strstr(r.err, "cannot be changed while it runs"), "%.*s", (int)r.elen, r.err);
    run_free(&r);
    RUN(&r, 20, moat_bin(), "get", "nb", "blk", "stats");
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(strstr(r.err, "no blk device"), "%.*s", (int)r.elen, r.err);
    run_free(&r);
    RUN(&r, 20, moat_bin(), "get", "nb", "net", "stats");
    ck_assert_int_eq(r.status, 0);
    run_free(&r);
    RUN(&r, 30, moat_bin(), "rm", "-f", "nb");
    ck_assert_int_eq(r.status, 0);
    run_free(&r);
    unlink(md);
    ck_assert_int_eq(rmdir(home), 0);
}
END_TEST

/* A TAP held by another process (this test's child, in the namespace). */
static pid_t hold_tap(const char *name, int *stop_w)
{
    int stop[2], ready[2];
    ck_assert_int_eq(pipe2(stop, O_CLOEXEC), 0);
    ck_assert_int_eq(pipe2(ready, O_CLOEXEC), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(stop[1]);
        close(ready[0]);
        char c = 'e';
        int fd = -1;
        if (enter_netns() == 0 && (fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC)) >= 0) {
            struct ifreq ifr;
            memset(&ifr, 0, sizeof ifr);
            ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
            snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", name);
            if (ioctl(fd, TUNSETIFF, &ifr) == 0)
                c = 'r';
        }
        if (write(ready[1], &c, 1) != 1)
            _exit(1);
        char b;
        while (read(stop[0], &b, 1) < 0 && errno == EINTR)
            ;
        _exit(0);
    }
    close(stop[0]);
    close(ready[1]);
    char c = 0;
    ck_assert_int_eq(read(ready[0], &c, 1), 1);
    close(ready[0]);
    ck_assert_msg(c == 'r', "could not make and hold TAP %s in the namespace", name);
    *stop_w = stop[1];
    return pid;
}

/* Seccomp: the net device's I/O thread, made to call getppid(2) right
 * after its filter is in (MOAT_SECCOMP_TEST_VIOLATE=net), ends moat with
 * 159 and the line naming it (the other kinds: test_blk). */
START_TEST(seccomp_net_thread)
{
    char dev[256], cmdline[512];
    snprintf(dev, sizeof dev, "net,tap=" TAP ",mac=" GUEST_MAC);
    snprintf(cmdline, sizeof cmdline,
             "net.ip=" GUEST_IP " net.peer=" HOST_IP " net.peermac=" HOST_MAC " net.port=%d net.mac=" GUEST_MAC
             " net.count=1", ECHO_PORT);
    setenv("MOAT_SECCOMP_TEST_VIOLATE", "net", 1);
    struct run r;
    RUN(&r, 120, ip_bin, "netns", "exec", netns, moat_bin(), "run", "--timeout", "100", "--kernel", net_elf(),
        "--device", dev, "--cmdline", cmdline);
    unsetenv("MOAT_SECCOMP_TEST_VIOLATE");
    ck_assert_msg(r.status == 159 &&
                  strstr(r.err, "moat: seccomp: the net thread made a forbidden system call: getppid"),
                  "status %d, stderr:\n%s", r.status, r.err);
    run_free(&r);
}
END_TEST

START_TEST(tap_errors)
{
    struct run r;
    /* a TUN device of that name: TUNSETIFF with IFF_TAP refuses it */
    RUN(&r, 60, ip_bin, "netns", "exec", netns, moat_bin(), "run", "--kernel", net_elf(), "--device",
        "net,tap=" TUN);
    show(&r, "tap is a tun");
    ck_assert_int_eq(r.status, CLI_EXIT_USAGE);
    ck_assert_msg(strstr(r.err, "tap " TUN ":") && strstr(r.err, "not a TAP device"),
                  "the message names the device and says what is wrong");
    ck_assert_uint_eq(r.len, 0);                /* the guest never ran */
    run_free(&r);

    /* a TAP another process has open (not multi-queue: one user) */
    int stop_w;
    pid_t holder = hold_tap(BUSY_TAP, &stop_w);
    RUN(&r, 60, ip_bin, "netns", "exec", netns, moat_bin(), "run", "--kernel", net_elf(), "--device",
        "net,tap=" BUSY_TAP);
    close(stop_w);
    waitpid(holder, NULL, 0);
    show(&r, "tap in use");
    ck_assert_int_eq(r.status, CLI_EXIT_USAGE);
    ck_assert_msg(strstr(r.err, "tap " BUSY_TAP ":") && strstr(r.err, "in use"),
                  "the message names the device and says it is in use");
    run_free(&r);

    /* no net device: the guest finds none */
    RUN(&r, 60, moat_bin(), "run", "--timeout", "50", "--kernel", net_elf(), "--cmdline",
        "net.ip=" GUEST_IP " net.peer=" HOST_IP " net.peermac=" HOST_MAC " net.port=7777");
    show(&r, "no device");
    ck_assert_int_eq(r.status, NET_NODEV);
    run_free(&r);

    /* an incomplete command line: the guest says so before touching the device */
    RUN(&r, 60, ip_bin, "netns", "exec", netns, moat_bin(), "run", "--timeout", "50", "--kernel", net_elf(),
        "--device", "net,tap=" TAP, "--cmdline", "net.ip=" GUEST_IP);
    show(&r, "incomplete command line");
    ck_assert_int_eq(r.status, 4);
    run_free(&r);

    /* a wait bound of 0, or past NET_WAIT_MAX: refused the same way */
    static const char *const bad_wait[] = { "net.wait=0", "net.wait=601", "net.wait=x" };
    for (size_t i = 0; i < sizeof bad_wait / sizeof bad_wait[0]; i++) {
        char cl[256];
        snprintf(cl, sizeof cl, "net.ip=" GUEST_IP " net.peer=" HOST_IP " net.peermac=" HOST_MAC " net.port=7777 %s",
                 bad_wait[i]);
        RUN(&r, 60, moat_bin(), "run", "--timeout", "50", "--kernel", net_elf(), "--cmdline", cl);
        show(&r, cl);
        ck_assert_int_eq(r.status, 4);
        run_free(&r);
    }
}
END_TEST

/* ---- main ---- */

static bool find_ip(void)
{
    char path[4096];
    snprintf(path, sizeof path, "%s:/sbin:/usr/sbin:/bin:/usr/bin", env_or("PATH", "/bin:/usr/bin"));
    for (char *save = NULL, *d = strtok_r(path, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(ip_bin, sizeof ip_bin, "%s/ip", d);
        if (access(ip_bin, X_OK) == 0)
            return true;
    }
    ip_bin[0] = 0;
    return false;
}

static void cleanup(void)
{
    netns_remove();
}

int main(void)
{
    main_pid = getpid();
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    char why[512];
    enum test_host_kind kind = probe_host_kind(moat_bin(), why, sizeof why);
    if (kind == TEST_HOST_NONE) {
        if (require_kvm()) {
            printf("FAILED: test_net: %s and MOAT_REQUIRE_KVM is set\n", why);
            return 1;
        }
        printf("SKIPPED: test_net: %s — virtio-net KVM tests not run\n", why);
        return 0;
    }
    /* What the namespace and the TAP need: not KVM, so a skip even where
     * MOAT_REQUIRE_KVM is set (the nested L1 has neither tun nor iproute2). */
    char missing[1024] = "";
    size_t ml = 0;
    if (geteuid() != 0)
        ml += (size_t)snprintf(missing + ml, sizeof missing - ml, "; not root (a network namespace and TAP "
                               "devices need it)");
    if (access("/dev/net/tun", R_OK | W_OK) != 0)
        ml += (size_t)snprintf(missing + ml, sizeof missing - ml, "; /dev/net/tun: %s (no TUN/TAP support)",
                               strerror(errno));
    char out[512] = "";
    if (!find_ip())
        ml += (size_t)snprintf(missing + ml, sizeof missing - ml, "; no `ip` (iproute2) in PATH");
    else if (IP(out, sizeof out, "netns", "list") != 0)
        ml += (size_t)snprintf(missing + ml, sizeof missing - ml, "; %s has no `ip netns` (busybox's ip?)", ip_bin);
    if (missing[0]) {
        printf("SKIPPED: test_net: %s\n", missing + 2);
        return 0;
    }
    if (netns_make(why, sizeof why) < 0) {
        printf("SKIPPED: test_net: cannot make a network namespace with a TAP: %s\n", why);
        return 0;
    }
    atexit(cleanup);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    printf("test_net: namespace %s\n", netns);
    fflush(stdout);

    Suite *s = suite_create("net");
    TCase *tc = tcase_create("kvm");
    tcase_set_timeout(tc, 300 * slow());
    tcase_add_test(tc, udp_plain);
    tcase_add_test(tc, egress_policy);
    tcase_add_test(tc, csum_offload_rewrite);
    tcase_add_test(tc, sandbox_net_commands);
    tcase_add_test(tc, udp_mergeable_burst);
    tcase_add_test(tc, tap_errors);
    tcase_add_test(tc, seccomp_net_thread);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    netns_remove();
    /* the namespace must be gone */
    struct stat st;
    if (stat(netns_path, &st) == 0) {
        printf("test_net: %s still exists after removal\n", netns_path);
        failed++;
    }
    return failed ? 1 : 0;
}
