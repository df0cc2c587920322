/* moat guest /init: PID 1 of the default guest (see docs/guest.md).
 *
 * Protocol with the VMM (the moat control device, devices/legacy/moatdev.h):
 *   1. chmod / 0755; mount /proc, /sys, /dev (devtmpfs), /dev/pts,
 *      /dev/shm, /tmp; set PATH, HOME; bring up lo; hostname "moat".
 *   1b. Network (guest/init/netcfg.h): moat.net=dhcp|off|static:... on the
 *      kernel command line; without it, DHCP if eth0 exists. DHCP runs
 *      busybox udhcpc on eth0 with /etc/udhcpc/default.script and waits
 *      for a lease at most DHCP_TRIES s (udhcpc then stays in the
 *      background to renew it); without one /init says so and goes on.
 *   2. ioperm(0x0F40, 2) and write event byte 1 ("init reached") to port
 *      0x0F41. If ioperm fails (not root, no X86_IOPL_IOPERM) nothing is
 *      written; under QEMU the ports are unassigned and writes are ignored.
 *   2b. If /proc/cmdline has moat.agent=PORT, start the guest agent
 *      (/sbin/moat-agent --port PORT, docs/agent-protocol.md) in its own
 *      session; with the agent and no command, /init does not start a
 *      shell: it keeps the guest running for the agent, reaping orphans
 *      and restarting the agent (after 1 s) if it exits.
 *   3. Run the command: argv[1..] as Linux hands it to init (everything after
 *      " -- " on the kernel command line, plus any unknown option without
 *      '='). With no arguments, run an interactive /bin/sh. /init leads a
 *      session whose controlling tty is the console (the tty named in
 *      /sys/class/tty/console/active, else /dev/console); the command runs
 *      in its own process group in the foreground of that tty, which is its
 *      stdin, stdout and stderr.
 *      Event byte 2 ("command started") goes to port 0x0F41 after the fork.
 *      The child drops the port permission before exec.
 *   4. Reap every child (orphans are reparented to PID 1) until the command
 *      itself exits. Status: its exit code, or 128 + signal number if it was
 *      killed; 127 if the command was not found, 126 if it could not be
 *      executed, 125 if /init could not start it (fork failed).
 *   Image mode (docs/guest.md, "Image mode"): when the initramfs holds
 *   /moat/image.cfg (an extra archive moat run --rootfs appends, parsed by
 *   guest/init/imgcfg.c), after 1b /init mounts /dev/vda (ext4) at
 *   /newroot, moves it onto / and chroots into it (the switch_root
 *   technique; pivot_root cannot leave an initramfs), mounts /proc, /sys,
 *   /dev, /dev/pts, /dev/shm there anew, a tmpfs at /run/moat holding
 *   (with moat.agent=) a copy of the agent (started from there), /etc/hosts, /etc/hostname and
 *   (with an address) /etc/resolv.conf bound from files in it; the
 *   config's user is resolved in the image's /etc/passwd and /etc/group,
 *   its working directory made if missing, and its command runs (step 3)
 *   with its environment, as that user, there. The agent runs as root
 *   with the image's environment. With the agent and no
 *   command given on moat's command line, only the agent runs. Any failure
 *   of this is said on the console and the status is 125.
 *   5. Wait (at most 5 s) until the console tty has sent everything the
 *      command wrote (tty output is asynchronous; rebooting at once would
 *      lose the tail), sync(), write the status byte to port 0x0F40,
 *      reboot(RB_AUTOBOOT).
 *      The default command line has reboot=k, so the kernel resets through
 *      the i8042 (port 0x64 <- 0xFE) and the VMM exits.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/io.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <grp.h>
#include <termios.h>
#include <unistd.h>

#include "imgcfg.h"
#include "netcfg.h"

#define PORT_STATUS   0x0F40
#define PORT_EVENT    0x0F41
#define EV_INIT       1
#define EV_CMD        2
#define ST_NOSTART    125
#define ST_NOEXEC     126
#define ST_NOTFOUND   127
#define NET_IF        "eth0"
#define DHCP_SCRIPT   "/etc/udhcpc/default.script"
#define DHCP_TRIES    4         /* discover packets, 1 s apart */
#define DHCP_LIMIT    10        /* s: udhcpc is killed if still waiting */

static int have_ports;

static void port_write(unsigned char off, unsigned char v)
{
    if (have_ports)
        outb(v, PORT_STATUS + off);
}

static void warn(const char *what, const char *arg)
{
    fprintf(stderr, "moat-init: %s%s%s: %s\n", what, arg ? " " : "",
            arg ? arg : "", strerror(errno));
}

static void mnt(const char *src, const char *dst, const char *type,
                unsigned long flags, const char *data)
{
    mkdir(dst, 0755);
    if (mount(src, dst, type, flags, data) != 0 && errno != EBUSY)
        warn("mount", dst);
}

static void on_alarm(int sig)
{
    (void)sig;
}

static int if_up(const char *name)
{
    struct ifreq ifr;
    int r = -1, s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

    if (s < 0)
        return -1;
    memset(&ifr, 0, sizeof(ifr));
    strcpy(ifr.ifr_name, name);
    if (ioctl(s, SIOCGIFFLAGS, &ifr) == 0) {
        ifr.ifr_flags |= IFF_UP;
        r = ioctl(s, SIOCSIFFLAGS, &ifr);
    }
    close(s);
    return r;
}

static int set_ipv4(int s, unsigned long req, const char *ifname, uint32_t a)
{
    struct ifreq ifr;
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(a) };

    memset(&ifr, 0, sizeof(ifr));
    strcpy(ifr.ifr_name, ifname);
    memcpy(&ifr.ifr_addr, &sin, sizeof(sin));
    return ioctl(s, req, &ifr);
}

static void write_resolv(uint32_t dns)
{
    char ip[16];
    FILE *f = fopen("/etc/resolv.conf", "we");

    if (!f) {
        warn("open", "/etc/resolv.conf");
        return;
    }
    netcfg_fmt_ipv4(dns, ip);
    fprintf(f, "nameserver %s\n", ip);
    if (fclose(f) != 0)
        warn("write", "/etc/resolv.conf");
}

/* moat.net=static:ADDR/PREFIX[,GW[,DNS]] on eth0. */
static void net_static(const struct netcfg *c)
{
    struct rtentry rt;
    struct sockaddr_in *sin;
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

    if (s < 0) {
        warn("socket", NULL);
        return;
    }
    if (set_ipv4(s, SIOCSIFADDR, NET_IF, c->addr) != 0 ||
        set_ipv4(s, SIOCSIFNETMASK, NET_IF, 0xffffffffu << (32 - c->prefix)) != 0) {
        warn("moat.net=static: address on", NET_IF);
        close(s);
        return;
    }
    if (if_up(NET_IF) != 0)
        warn("moat.net=static: bringing up", NET_IF);
    if (c->gw) {
        memset(&rt, 0, sizeof(rt));
        sin = (struct sockaddr_in *)&rt.rt_dst;
        sin->sin_family = AF_INET;
        sin = (struct sockaddr_in *)&rt.rt_genmask;
        sin->sin_family = AF_INET;
        sin = (struct sockaddr_in *)&rt.rt_gateway;
        sin->sin_family = AF_INET;
        sin->sin_addr.s_addr = htonl(c->gw);
        rt.rt_flags = RTF_UP | RTF_GATEWAY;
        rt.rt_dev = (char *)NET_IF;
        if (ioctl(s, SIOCADDRT, &rt) != 0)
            warn("moat.net=static: default route on", NET_IF);
    }
    close(s);
    if (c->dns)
        write_resolv(c->dns);
}

/* DHCP on eth0: busybox udhcpc, which runs DHCP_SCRIPT to configure the
 * lease, exits with 0 once it has one (leaving a child in the background
 * that renews it) or with 1 after DHCP_TRIES discovers unanswered (-n).
 * It is killed if it is still waiting after DHCP_LIMIT s. Quiet on
 * success; a missing lease is said on the console and boot goes on. */
static void net_dhcp(void)
{
    static char tries[] = { '0' + DHCP_TRIES, 0 };
    struct sigaction sa;
    pid_t pid;
    int st, r;

    if (if_up(NET_IF) != 0)
        warn("bringing up", NET_IF);
    pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_RDWR);

        setsid();
        for (int i = 0; i < 3 && fd >= 0; i++)
            dup2(fd, i);
        execl("/sbin/udhcpc", "udhcpc", "-i", NET_IF, "-n", "-t", tries,
              "-T", "1", "-s", DHCP_SCRIPT, (char *)NULL);
        _exit(127);
    }
    if (pid < 0) {
        warn("fork", "udhcpc");
        return;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_alarm;   /* no SA_RESTART: waitpid gets EINTR */
    sigaction(SIGALRM, &sa, NULL);
    alarm(DHCP_LIMIT);
    r = waitpid(pid, &st, 0);
    alarm(0);
    if (r < 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        fprintf(stderr, "moat-init: %s: udhcpc still waiting after %d s, killed; "
                "going on without an address\n", NET_IF, DHCP_LIMIT);
    } else if (WIFEXITED(st) && WEXITSTATUS(st) == 127) {
        fprintf(stderr, "moat-init: %s: /sbin/udhcpc could not be run; "
                "going on without an address\n", NET_IF);
    } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "moat-init: %s: no DHCP lease after %d tries; "
                "going on without an address\n", NET_IF, DHCP_TRIES);
    }
}

/* The network, as moat.net= in CMDLINE says (guest/init/netcfg.h). */
static void net_setup(const char *cmdline)
{
    struct netcfg c;
    int have_if = if_nametoindex(NET_IF) != 0;

    if (netcfg_from_cmdline(cmdline, &c) != 0) {
        fprintf(stderr, "moat-init: moat.net: malformed value (want dhcp, off or "
                "static:ADDR/PREFIX[,GW[,DNS]]); %s left down\n", NET_IF);
        return;
    }
    if (c.mode == NETCFG_OFF || (c.mode == NETCFG_DEFAULT && !have_if))
        return;
    if (!have_if) {
        fprintf(stderr, "moat-init: moat.net: no %s in this VM\n", NET_IF);
        return;
    }
    if (c.mode == NETCFG_STATIC)
        net_static(&c);
    else
        net_dhcp();
}

/* The tty behind /dev/console, e.g. "/dev/ttyS0", which (unlike
 * /dev/console) can be a controlling terminal. Empty if unknown. */
static void console_tty(char *path, size_t len)
{
    char buf[128], *name;
    ssize_t n;
    int fd = open("/sys/class/tty/console/active", O_RDONLY | O_CLOEXEC);

    path[0] = 0;
    if (fd < 0)
        return;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = 0;
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        buf[--n] = 0;
    name = strrchr(buf, ' ');   /* the last one is /dev/console */
    name = name ? name + 1 : buf;
    for (char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
              (*p >= '0' && *p <= '9')))
            return;
    if (*name)
        snprintf(path, len, "/dev/%s", name);
}

/* In /init: become a session leader and make the console tty our
 * controlling terminal. /init, not the command, leads the session: when a
 * session leader exits, the kernel hangs its controlling tty up, which
 * throws away output still queued for the UART. -1 if there is no tty. */
static int open_ctty(void)
{
    char path[160];
    int fd = -1;

    console_tty(path, sizeof(path));
    if (path[0])
        fd = open(path, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        fd = open("/dev/console", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    if (setsid() < 0 || ioctl(fd, TIOCSCTTY, 0) < 0) {
        close(fd);
        return -1;
    }
    /* /init stays in a background process group: ignoring SIGTTOU lets it
     * still use tcsetpgrp() and tcdrain() on the tty. */
    signal(SIGTTOU, SIG_IGN);
    return fd;
}

/* In the child: own process group, in the foreground of the tty, which
 * becomes stdin, stdout and stderr. */
static void setup_child_tty(int tty)
{
    setpgid(0, 0);
    if (tty < 0)
        return;             /* keep the fds the kernel gave us */
    tcsetpgrp(tty, getpid());
    signal(SIGTTOU, SIG_DFL);   /* SIG_IGN would survive exec */
    for (int i = 0; i < 3; i++)
        dup2(tty, i);
}

/* Wait until the console has transmitted everything queued on it, giving
 * up after 5 s (a UART that never drains must not keep the VM alive). */
static void drain_console(int tty)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_alarm;   /* no SA_RESTART: tcdrain gets EINTR */
    sigaction(SIGALRM, &sa, NULL);
    alarm(5);
    tcdrain(tty >= 0 ? tty : STDOUT_FILENO);
    alarm(0);
}

static void finish(int tty, int status)
{
    drain_console(tty);
    sync();
    port_write(0, (unsigned char)status);
    reboot(RB_AUTOBOOT);
    reboot(RB_POWER_OFF);
    for (;;)
        pause();
}

/* /proc/cmdline into BUF (LEN > 0), NUL-terminated; empty if unreadable. */
static void read_cmdline(char *buf, size_t len)
{
    int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, len - 1) : -1;

    if (fd >= 0)
        close(fd);
    buf[n > 0 ? n : 0] = 0;
}

/* moat.agent=PORT on the kernel command line: PORT (1..4294967294), else 0. */
static unsigned long agent_port(const char *buf)
{
    for (const char *s = buf; (s = strstr(s, "moat.agent=")) != NULL; s++) {
        char *end;
        unsigned long v;

        if (s != buf && s[-1] != ' ')
            continue;
        v = strtoul(s + 11, &end, 10);
        if (end != s + 11 && v > 0 && v < 0xffffffffUL)
            return v;
    }
    return 0;
}

static const char *agent_path = "/sbin/moat-agent";     /* image mode: the tmpfs's copy */
static char **agent_env;        /* image mode: the image's environment; NULL: /init's */

static pid_t start_agent(unsigned long port)
{
    pid_t pid = fork();

    if (pid == 0) {
        char p[16];

        setsid();
        snprintf(p, sizeof(p), "%lu", port);
        if (agent_env)
            execve(agent_path, (char *[]){ "moat-agent", "--port", p, NULL }, agent_env);
        else
            execl(agent_path, "moat-agent", "--port", p, (char *)NULL);
        warn("exec", agent_path);
        _exit(127);
    }
    if (pid < 0)
        warn("fork", "agent");
    return pid;
}

/* ---- image mode ---- */

#define IMG_CFG       "/moat/image.cfg"
#define IMG_ROOT      "/newroot"
#define IMG_RUN       "/run/moat"
#define IMG_HOSTNAME  "moat"
#define IMG_FILE_MAX  (1 << 20)     /* /etc/passwd, /etc/group read at most */

struct image {
    struct imgcfg cfg;
    struct imguser user;
    int agent_fd;                   /* the initramfs's agent, copied in */
    char resolv[512];               /* the initramfs's /etc/resolv.conf, "" if none */
    char envspace[512];
};

/* FD's bytes (at most MAX) into a malloc'ed NUL-terminated buffer. */
static char *read_fd(int fd, size_t max, size_t *len)
{
    char *b = malloc(max + 1);
    size_t n = 0;
    ssize_t r;

    while (b && n < max && (r = read(fd, b + n, max - n)) > 0)
        n += (size_t)r;
    if (b)
        b[n] = 0;
    if (len)
        *len = n;
    return b;
}

/* PATH's bytes when it is a regular file (else NULL, as if absent): in
 * image mode /etc/passwd and /etc/group are the image's, and a FIFO there
 * would block open() for ever, a terminal read() (PID 1 hung before the
 * command and the agent). */
static char *read_path(const char *path, size_t max, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    struct stat st;
    char *b;

    if (fd < 0)
        return NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return NULL;
    }
    b = read_fd(fd, max, len);
    close(fd);
    return b;
}

static int write_path(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
    size_t n = strlen(text);
    int ok = fd >= 0 && write(fd, text, n) == (ssize_t)n;

    if (fd >= 0)
        close(fd);
    return ok ? 0 : -1;
}

/* /moat/image.cfg into im->cfg: 1, 0 when there is none (the default
 * guest), -1 after saying why it is malformed. */
static int image_load(struct image *im)
{
    static char *buf;
    size_t len;
    char why[256];
    int fd = open(IMG_CFG, O_RDONLY | O_CLOEXEC);
    struct stat st;

    if (fd < 0)
        return 0;
    if (fstat(fd, &st) != 0 || st.st_size > IMGCFG_MAX_BYTES) {
        close(fd);
        fprintf(stderr, "moat-init: %s: unreadable or too large\n", IMG_CFG);
        return -1;
    }
    buf = read_fd(fd, IMGCFG_MAX_BYTES, &len);
    close(fd);
    if (!buf || imgcfg_parse(buf, len, &im->cfg, why, sizeof(why)) != 0) {
        fprintf(stderr, "moat-init: %s: %s\n", IMG_CFG, buf ? why : "out of memory");
        return -1;
    }
    return 1;
}

/* mkdir -p PATH (each part 0755); errors are left to what uses it. */
static void mkdir_p(const char *path)
{
    char p[4096];

    snprintf(p, sizeof(p), "%s", path);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            mkdir(p, 0755);
            *s = '/';
        }
    mkdir(p, 0755);
}

/* The root from /dev/vda mounted and made / (MS_MOVE + chroot). */
static int image_switch(void)
{
    mkdir(IMG_ROOT, 0755);
    if (mount("/dev/vda", IMG_ROOT, "ext4", 0, NULL) != 0 &&
        ((errno != EROFS && errno != EACCES) ||   /* a read-only drive: a read-only root */
         mount("/dev/vda", IMG_ROOT, "ext4", MS_RDONLY, NULL) != 0)) {
        warn("image mode: mounting /dev/vda (ext4) at", IMG_ROOT);
        return -1;
    }
    if (chdir(IMG_ROOT) != 0 || mount(IMG_ROOT, "/", NULL, MS_MOVE, NULL) != 0 ||
        chroot(".") != 0 || chdir("/") != 0) {
        warn("image mode: switching the root to", IMG_ROOT);
        return -1;
    }
    return 0;
}

/* /etc/NAME bound from /run/moat/NAME holding TEXT (the image's own file
 * made, empty, when it has none). */
static void image_etc(const char *name, const char *text)
{
    char src[64], dst[64];
    struct stat st;

    snprintf(src, sizeof(src), IMG_RUN "/%s", name);
    snprintf(dst, sizeof(dst), "/etc/%s", name);
    if (write_path(src, text, 0644) != 0) {
        warn("image mode: writing", src);
        return;
    }
    /* The image's /etc as it is, never through a link: a link there (or at
     * /etc/NAME, e.g. to systemd's resolver, or to /run/moat/moat-agent,
     * which the bind would cover) is replaced by a file of its own. */
    if (lstat("/etc", &st) != 0 || !S_ISDIR(st.st_mode))
        return;
    if (lstat(dst, &st) == 0 && !S_ISREG(st.st_mode) && unlink(dst) != 0) {
        warn("image mode: not a file, left as it is", dst);
        return;
    }
    if (lstat(dst, &st) != 0)
        close(open(dst, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644));
    if (lstat(dst, &st) != 0 || !S_ISREG(st.st_mode))
        return;
    if (mount(src, dst, NULL, MS_BIND, NULL) != 0)
        warn("image mode: binding", dst);
}

/* In the new root: the kernel's file systems, /run/moat with the agent,
 * the host name files. */
static int image_mounts(struct image *im)
{
    char *agent;
    size_t alen;

    mnt("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
    mnt("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
    mnt("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
    mnt("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "gid=5,mode=0620,ptmxmode=0666");
    mnt("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
    mkdir_p(IMG_RUN);
    if (mount("tmpfs", IMG_RUN, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64m") != 0) {
        warn("image mode: mounting a tmpfs at", IMG_RUN);
        return -1;
    }
    agent = im->agent_fd >= 0 ? read_fd(im->agent_fd, 64 << 20, &alen) : NULL;
    if (agent) {
        int fd = open(IMG_RUN "/moat-agent", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);

        if (fd < 0 || write(fd, agent, alen) != (ssize_t)alen)
            warn("image mode: copying the agent to", IMG_RUN);
        if (fd >= 0)
            close(fd);
        free(agent);
        agent_path = IMG_RUN "/moat-agent";
    }
    image_etc("hostname", IMG_HOSTNAME "\n");
    image_etc("hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
                       "127.0.1.1\t" IMG_HOSTNAME "\n");
    if (im->resolv[0])
        image_etc("resolv.conf", im->resolv);
    return 0;
}

/* The user (the image's passwd and group), the environment, the working
 * directory made. 0, or -1 after saying why. */
static int image_user(struct image *im)
{
    char why[300];
    char *pw = read_path("/etc/passwd", IMG_FILE_MAX, NULL);
    char *gr = read_path("/etc/group", IMG_FILE_MAX, NULL);
    int r = imgcfg_user(im->cfg.user, pw, gr, &im->user, why, sizeof(why));

    free(pw);
    free(gr);
    if (r != 0) {
        fprintf(stderr, "moat-init: %s\n", why);
        return -1;
    }
    imgcfg_env_finish(&im->cfg, IMG_HOSTNAME, im->user.home, im->envspace, sizeof(im->envspace));
    if (im->cfg.workdir)
        mkdir_p(im->cfg.workdir);
    return 0;
}

/* Image mode up to the command (see the header); AGENT: the agent will
 * run (it is copied into the new root only then). 0, or -1 after saying
 * why. Before: the network (the initramfs's udhcpc wrote resolv.conf). */
static int image_enter(struct image *im, int agent)
{
    char *rc = read_path("/etc/resolv.conf", sizeof(im->resolv) - 1, NULL);

    snprintf(im->resolv, sizeof(im->resolv), "%s", rc ? rc : "");
    free(rc);
    im->agent_fd = agent ? open("/sbin/moat-agent", O_RDONLY | O_CLOEXEC) : -1;
    if (image_switch() != 0 || image_mounts(im) != 0)
        return -1;
    if (im->agent_fd >= 0)
        close(im->agent_fd);
    sethostname(IMG_HOSTNAME, strlen(IMG_HOSTNAME));
    return image_user(im);
}

/* In the command's child, image mode: groups, gid, uid, directory,
 * environment. Exits 125 when one cannot be set. */
static void image_child(struct image *im)
{
    extern char **environ;
    const char *wd = im->cfg.workdir ? im->cfg.workdir : "/";

    if (setgroups((size_t)im->user.ngroups, im->user.groups) != 0 || setgid(im->user.gid) != 0 ||
        setuid(im->user.uid) != 0) {
        warn("image mode: becoming the user", im->cfg.user ? im->cfg.user : "root");
        _exit(ST_NOSTART);
    }
    if (chdir(wd) != 0) {
        warn("image mode: the working directory", wd);
        _exit(ST_NOSTART);
    }
    environ = im->cfg.env;
}

/* The agent only, for ever: reap orphans, restart the agent (after 1 s)
 * when it exits. */
static void agent_only(unsigned long aport, pid_t agent)
{
    for (;;) {
        pid_t w = waitpid(-1, NULL, 0);

        if (w < 0 && errno != EINTR && errno != ECHILD)
            warn("waitpid", NULL);
        if (w < 0 && errno == ECHILD)
            agent = -1;
        if ((w == agent && w > 0) || agent < 0) {
            sleep(1);
            agent = start_agent(aport);
        }
    }
}

/* Run CMD (step 3, 4): its status. IM: image mode's (or NULL). */
static int run_command(char **cmd, int tty, struct image *im)
{
    int status = ST_NOSTART;
    pid_t pid = fork();

    if (pid == 0) {
        if (have_ports)
            ioperm(PORT_STATUS, 2, 0);
        setup_child_tty(tty);
        if (im)
            image_child(im);
        execvp(cmd[0], cmd);
        status = errno == ENOENT ? ST_NOTFOUND : ST_NOEXEC;
        fprintf(stderr, "moat-init: %s: %s\n", cmd[0],
                errno == ENOENT ? "command not found" : strerror(errno));
        _exit(status);
    }
    if (pid < 0) {
        warn("fork", NULL);
        return ST_NOSTART;
    }
    port_write(1, EV_CMD);

    for (;;) {
        int st;
        pid_t w = waitpid(-1, &st, 0);

        if (w < 0) {
            if (errno == EINTR)
                continue;
            warn("waitpid", NULL);  /* ECHILD: cannot happen, child is ours */
            break;
        }
        if (w != pid)
            continue;               /* a reaped orphan */
        if (WIFEXITED(st))
            status = WEXITSTATUS(st);
        else if (WIFSIGNALED(st))
            status = 128 + WTERMSIG(st);
        break;
    }
    return status;
}

/* Step 1: the initramfs's own mounts and environment. */
static void early_setup(void)
{
    chmod("/", 0755);           /* the initramfs root starts as 1777 */
    mnt("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
    mnt("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
    mnt("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
    mnt("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
        "gid=5,mode=0620,ptmxmode=0666");
    mnt("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
    mnt("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
    setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", 1);
    setenv("HOME", "/root", 1);
    if (!getenv("TERM"))
        setenv("TERM", "linux", 1);
    sethostname("moat", 4);
    if_up("lo");
    chdir("/root");
}

int main(int argc, char **argv)
{
    static char *shell[] = { "/bin/sh", NULL };
    static char cmdline[4096];
    static struct image im;
    char **cmd = argc > 1 ? argv + 1 : shell;
    int tty, image, explicit_cmd = argc > 1;

    if (getpid() != 1) {
        fprintf(stderr, "moat-init: must run as PID 1\n");
        return 1;
    }
    early_setup();
    read_cmdline(cmdline, sizeof(cmdline));
    image = image_load(&im);

    /* Before ioperm: udhcpc and the agent must not inherit the port
     * permission. */
    net_setup(cmdline);
    unsigned long aport = agent_port(cmdline);
    if (image > 0 && image_enter(&im, aport != 0) != 0)
        image = -1;
    if (image > 0) {
        cmd = im.cfg.argv;
        explicit_cmd = im.cfg.explicit_cmd;
        agent_env = im.cfg.env;     /* moat exec's commands get the image's environment */
    }
    if (image < 0)
        aport = 0;
    pid_t agent = aport ? start_agent(aport) : -1;

    tty = open_ctty();
    have_ports = ioperm(PORT_STATUS, 2, 1) == 0;
    port_write(1, EV_INIT);
    if (image < 0)
        finish(tty, ST_NOSTART);
    if (aport && !explicit_cmd)     /* agent only: no shell, run for it */
        agent_only(aport, agent);
    if (!cmd[0]) {
        fprintf(stderr, "moat-init: image mode: no command (the image has neither Entrypoint "
                "nor Cmd, and none was given)\n");
        finish(tty, ST_NOSTART);
    }
    finish(tty, run_command(cmd, tty, image > 0 ? &im : NULL));
    return 0;
}
