/* User-mode networking through passt (see net_passt.h). */
#include "devices/net/net_passt.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "devices/net/passt_frame.h"
#include "vmm/base/clock.h"

extern char **environ;

#define PASST_CHILD_FD  3       /* the socket, in passt */
#define PASST_SOCKBUF   (4u << 20)

struct passt_backend {
    struct net_backend nb;      /* first: the ops see a struct net_backend * */
    pid_t pid;
    int out_fd;                 /* passt's stdout/stderr (a memory file) */
    bool rx_eof;
    /* A frame the socket took only part of: hold[0, hold_len) is the whole
     * frame on the wire (length prefix included), hold_off bytes are out. */
    size_t hold_len, hold_off;
    uint8_t hold[PASST_WIRE_MAX];
    struct passt_rx rx;
};

static struct passt_backend *pb(const struct net_backend *b)
{
    return (struct passt_backend *)b;
}

/* ---- options (pure) ---- */

static int parse_port(const char *s, size_t n, uint16_t *out)
{
    if (n == 0 || n > 5)
        return -EINVAL;
    uint32_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -EINVAL;
        v = v * 10 + (uint32_t)(s[i] - '0');
    }
    if (v == 0 || v > 65535)
        return -EINVAL;
    *out = (uint16_t)v;
    return 0;
}

int net_passt_parse_forward(const char *spec, struct net_passt_fwd *out, char *why, size_t wlen)
{
    static const char usage[] = "expected tcp:HOSTPORT:GUESTPORT or udp:HOSTPORT:GUESTPORT "
                                "(optionally tcp:ADDR:HOSTPORT:GUESTPORT), ports 1..65535";
    const char *field[4];
    size_t flen[4], nf = 0;
    if (!spec) {
        snprintf(why, wlen, "forward: %s", usage);
        return -EINVAL;
    }
    const char *p = spec;
    for (;;) {
        const char *c = strchr(p, ':');
        if (nf == 4) {
            snprintf(why, wlen, "forward \"%.64s\": too many fields: %s", spec, usage);
            return -EINVAL;
        }
        field[nf] = p;
        flen[nf] = c ? (size_t)(c - p) : strlen(p);
        nf++;
        if (!c)
            break;
        p = c + 1;
    }
    if (nf < 3) {
        snprintf(why, wlen, "forward \"%.64s\": %s", spec, usage);
        return -EINVAL;
    }
    struct net_passt_fwd f = { 0 };
    if (flen[0] == 3 && !memcmp(field[0], "tcp", 3)) {
        f.proto = NET_PASST_TCP;
    } else if (flen[0] == 3 && !memcmp(field[0], "udp", 3)) {
        f.proto = NET_PASST_UDP;
    } else {
        snprintf(why, wlen, "forward \"%.64s\": protocol must be tcp or udp", spec);
        return -EINVAL;
    }
    if (nf == 4) {
        char a[INET_ADDRSTRLEN];
        struct in_addr in;
        if (flen[1] == 0 || flen[1] >= sizeof a) {
            snprintf(why, wlen, "forward \"%.64s\": bad IPv4 address", spec);
            return -EINVAL;
        }
        memcpy(a, field[1], flen[1]);
        a[flen[1]] = 0;
        if (inet_pton(AF_INET, a, &in) != 1) {
            snprintf(why, wlen, "forward \"%.64s\": bad IPv4 address \"%s\"", spec, a);
            return -EINVAL;
        }
        f.host_addr = ntohl(in.s_addr);
        if (f.host_addr == 0) {
            snprintf(why, wlen, "forward \"%.64s\": give no address for every address", spec);
            return -EINVAL;
        }
    }
    if (parse_port(field[nf - 2], flen[nf - 2], &f.host_port) < 0 ||
        parse_port(field[nf - 1], flen[nf - 1], &f.guest_port) < 0) {
        snprintf(why, wlen, "forward \"%.64s\": %s", spec, usage);
        return -EINVAL;
    }
    *out = f;
    return 0;
}

static const char *proto_name(enum net_passt_proto p)
{
    return p == NET_PASST_UDP ? "udp" : "tcp";
}

int net_passt_check_forwards(const struct net_passt_fwd *fwd, size_t n, char *why, size_t wlen)
{
    if (n > NET_PASST_MAX_FWD) {
        snprintf(why, wlen, "at most %d port forwards", NET_PASST_MAX_FWD);
        return -EINVAL;
    }
    if (n && !fwd) {
        snprintf(why, wlen, "port forwards: no list");
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        const struct net_passt_fwd *f = &fwd[i];
        if ((f->proto != NET_PASST_TCP && f->proto != NET_PASST_UDP) ||
            f->host_port == 0 || f->guest_port == 0) {
            snprintf(why, wlen, "port forward %zu: protocol tcp or udp, ports 1..65535", i + 1);
            return -EINVAL;
        }
        for (size_t j = 0; j < i; j++)
            if (fwd[j].proto == f->proto && fwd[j].host_port == f->host_port) {
                snprintf(why, wlen, "host port %s:%u is forwarded twice", proto_name(f->proto),
                         f->host_port);
                return -EINVAL;
            }
    }
    return 0;
}

/* Append a copy of s as the next argument. */
static int arg(struct net_passt_argv *a, const char *s)
{
    size_t l = strlen(s) + 1;
    if (a->n >= NET_PASST_ARGV_MAX || l > sizeof a->buf - a->used)
        return -ENAMETOOLONG;
    char *d = a->buf + a->used;
    memcpy(d, s, l);
    a->used += l;
    a->v[a->n++] = d;
    a->v[a->n] = NULL;
    return 0;
}

int net_passt_argv(const struct net_passt_opts *o, const char *bin, const char *pidfile,
                   const char *runas, struct net_passt_argv *a, char *why, size_t wlen)
{
    a->n = a->used = 0;
    a->v[0] = NULL;
    int r = net_passt_check_forwards(o->fwd, o->nfwd, why, wlen);
    if (r < 0)
        return r;
    unsigned mtu = o->mtu ? o->mtu : NET_PASST_DEFAULT_MTU;
    if (mtu < NET_PASST_MIN_MTU || mtu > NET_PASST_MAX_MTU) {
        snprintf(why, wlen, "mtu must be %u..%u", NET_PASST_MIN_MTU, NET_PASST_MAX_MTU);
        return -EINVAL;
    }
    char num[16];
    snprintf(num, sizeof num, "%u", mtu);
    char fdnum[8];
    snprintf(fdnum, sizeof fdnum, "%d", PASST_CHILD_FD);
    r = 0;
    r |= arg(a, bin);
    r |= arg(a, "--foreground");
    r |= arg(a, "--quiet");
    r |= arg(a, "--fd");
    r |= arg(a, fdnum);
    r |= arg(a, "--pid");
    r |= arg(a, pidfile);
    r |= arg(a, "--mtu");
    r |= arg(a, num);
    if (!o->host_loopback)
        r |= arg(a, "--no-map-gw");
    if (runas) {
        r |= arg(a, "--runas");
        r |= arg(a, runas);
    }
    for (int p = NET_PASST_TCP; p <= NET_PASST_UDP; p++) {
        const char *opt = p == NET_PASST_TCP ? "--tcp-ports" : "--udp-ports";
        bool any = false;
        for (size_t i = 0; i < o->nfwd; i++) {
            const struct net_passt_fwd *f = &o->fwd[i];
            if ((int)f->proto != p)
                continue;
            char spec[48];
            if (f->host_addr) {
                struct in_addr in = { .s_addr = htonl(f->host_addr) };
                char ad[INET_ADDRSTRLEN];
                inet_ntop(AF_INET, &in, ad, sizeof ad);
                snprintf(spec, sizeof spec, "%s/%u:%u", ad, f->host_port, f->guest_port);
            } else {
                snprintf(spec, sizeof spec, "%u:%u", f->host_port, f->guest_port);
            }
            r |= arg(a, opt);
            r |= arg(a, spec);
            any = true;
        }
        if (!any) {
            r |= arg(a, opt);
            r |= arg(a, "none");
        }
    }
    if (r) {
        snprintf(why, wlen, "passt's command line is too long");
        return -ENAMETOOLONG;
    }
    return 0;
}

/* ---- start-up ---- */

/* The binary to run: a name with a '/' as is, else the first executable
 * in PATH. */
static int find_binary(const char *name, char *path, size_t plen, char *why, size_t wlen)
{
    if (!*name) {
        snprintf(why, wlen, "passt: empty binary name");
        return -EINVAL;
    }
    if (strchr(name, '/')) {
        if (access(name, X_OK) < 0) {
            int e = errno;
            snprintf(why, wlen, "passt: %s: %s (install it: %s)", name, strerror(e),
                     NET_PASST_INSTALL_HINT);
            return -e;
        }
        if ((size_t)snprintf(path, plen, "%s", name) >= plen) {
            snprintf(why, wlen, "passt: path too long");
            return -ENAMETOOLONG;
        }
        return 0;
    }
    const char *dirs = getenv("PATH");
    if (!dirs || !*dirs)
        dirs = "/usr/local/bin:/usr/bin:/bin";
    for (const char *d = dirs; *d;) {
        const char *c = strchr(d, ':');
        size_t dl = c ? (size_t)(c - d) : strlen(d);
        if (dl > 0 && (size_t)snprintf(path, plen, "%.*s/%s", (int)dl, d, name) < plen &&
            access(path, X_OK) == 0)
            return 0;
        if (!c)
            break;
        d = c + 1;
    }
    snprintf(why, wlen, "%s not found in PATH: user-mode networking needs passt (install it: %s)",
             name, NET_PASST_INSTALL_HINT);
    return -ENOENT;
}

static unsigned unprivileged_port_start(void)
{
    unsigned v = 1024;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_unprivileged_port_start", "re");
    if (f) {
        if (fscanf(f, "%u", &v) != 1)
            v = 1024;
        fclose(f);
    }
    return v;
}

/* Can passt listen on this host port? A bind now (racy, but it turns the
 * common mistakes into a message: passt itself skips a port it cannot
 * bind without a word). */
static int check_host_port(const struct net_passt_fwd *f, bool drops_root, char *why, size_t wlen)
{
    const char *pn = proto_name(f->proto);
    unsigned low = drops_root ? unprivileged_port_start() : 0;
    if (f->host_port < low) {
        snprintf(why, wlen, "host port %s:%u: passt runs as nobody and cannot bind ports below "
                 "net.ipv4.ip_unprivileged_port_start (%u): use a higher port or lower that sysctl",
                 pn, f->host_port, low);
        return -EACCES;
    }
    int type = (f->proto == NET_PASST_TCP ? SOCK_STREAM : SOCK_DGRAM) | SOCK_CLOEXEC;
    int s = -1, r;
    if (!f->host_addr) {
        s = socket(AF_INET6, type, 0);
        if (s >= 0) {
            int off = 0;
            setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
            if (f->proto == NET_PASST_TCP) {
                int on = 1;
                setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
            }
            struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_port = htons(f->host_port),
                                       .sin6_addr = IN6ADDR_ANY_INIT };
            r = bind(s, (struct sockaddr *)&a6, sizeof a6) < 0 ? -errno : 0;
            goto done;
        }
    }
    s = socket(AF_INET, type, 0);
    if (s < 0) {
        r = -errno;
        snprintf(why, wlen, "host port %s:%u: socket: %s", pn, f->host_port, strerror(-r));
        return r;
    }
    if (f->proto == NET_PASST_TCP) {
        int on = 1;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    }
    struct sockaddr_in a4 = { .sin_family = AF_INET, .sin_port = htons(f->host_port),
                              .sin_addr.s_addr = htonl(f->host_addr) };
    r = bind(s, (struct sockaddr *)&a4, sizeof a4) < 0 ? -errno : 0;
done:
    close(s);
    if (r == -EADDRINUSE)
        snprintf(why, wlen, "host port %s:%u is in use", pn, f->host_port);
    else if (r == -EACCES)
        snprintf(why, wlen, "host port %s:%u: not allowed (ports below "
                 "net.ipv4.ip_unprivileged_port_start need privileges)", pn, f->host_port);
    else if (r == -EADDRNOTAVAIL)
        snprintf(why, wlen, "host port %s:%u: the address is not this host's", pn, f->host_port);
    else if (r < 0)
        snprintf(why, wlen, "host port %s:%u: %s", pn, f->host_port, strerror(-r));
    return r;
}

/* What passt printed, noise dropped ("Failed to send N bytes to syslog",
 * where there is no syslog), lines joined by "; ": the end of it. */
static void output_summary(int fd, char *buf, size_t len)
{
    if (len == 0)
        return;
    buf[0] = 0;
    char raw[4096], joined[2 * sizeof raw];
    off_t end = lseek(fd, 0, SEEK_CUR);
    if (end <= 0)
        return;
    off_t from = end > (off_t)sizeof raw - 1 ? end - (off_t)sizeof raw + 1 : 0;
    ssize_t n = pread(fd, raw, (size_t)(end - from), from);
    if (n <= 0)
        return;
    raw[n] = 0;
    size_t used = 0;
    for (char *line = raw, *nl; line && *line; line = nl) {
        nl = strchr(line, '\n');
        if (nl)
            *nl++ = 0;
        while (*line == ' ' || *line == '\t')
            line++;
        if (!*line || !strncmp(line, "Failed to send ", 15))
            continue;
        /* raw has fewer than sizeof raw bytes, so this always fits */
        used += (size_t)snprintf(joined + used, sizeof joined - used, "%s%s", used ? "; " : "", line);
    }
    size_t k = used < len ? used : len - 1;
    memcpy(buf, joined + used - k, k);
    buf[k] = 0;
}

static void set_bufs(int fd)
{
    int v = PASST_SOCKBUF;
    /* FORCE past the sysctl caps where allowed (root); else as much as
     * they allow */
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &v, sizeof v) < 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof v);
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &v, sizeof v) < 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof v);
}

/* The child, from clone to execve. It shares moat's memory (CLONE_VM,
 * like posix_spawn: no copy of moat's page tables, so no copy-on-write
 * faults in guest memory while it starts) and runs on its own stack with
 * every signal blocked until its handlers are reset: only system calls,
 * nothing that allocates or takes a lock. */
struct spawn {
    const char *path;
    char *const *argv;
    int sock, out, null_fd, max_fd;
    pid_t parent;
    sigset_t mask;              /* the caller's, to restore in passt */
    int err;                    /* why execve failed (written by the child) */
};

static int child_main(void *arg)
{
    struct spawn *s = arg;
    struct sigaction dfl = { .sa_handler = SIG_DFL };
    for (int sig = 1; sig < NSIG; sig++)
        sigaction(sig, &dfl, NULL);     /* its own table: moat's handlers stay */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != s->parent)         /* moat died before the line above */
        _exit(127);
    setpgid(0, 0);                      /* the terminal's ^C is moat's to handle */
    /* out of the way of 0..3 first, then into place */
    int sock = fcntl(s->sock, F_DUPFD, 10);
    int out = fcntl(s->out, F_DUPFD, 10);
    int nul = fcntl(s->null_fd, F_DUPFD, 10);
    if (sock < 0 || out < 0 || nul < 0 || dup2(nul, 0) < 0 || dup2(out, 1) < 0 ||
        dup2(out, 2) < 0 || dup2(sock, PASST_CHILD_FD) < 0) {
        s->err = errno;
        _exit(127);
    }
    if (syscall(SYS_close_range, PASST_CHILD_FD + 1, ~0U, 0) < 0)
        for (int fd = PASST_CHILD_FD + 1; fd < s->max_fd; fd++)
            close(fd);
    execve(s->path, s->argv, environ);
    s->err = errno;
    _exit(127);
}

/* Start the child: its pid, or -errno. */
static pid_t spawn_child(struct spawn *s)
{
    const size_t stk = 256 * 1024;      /* room for sanitizer builds too */
    void *stack = mmap(NULL, stk, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED)
        return -errno;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &s->mask);
    s->err = 0;
    pid_t pid = clone(child_main, (char *)stack + stk, CLONE_VM | CLONE_VFORK | SIGCHLD, s);
    int e = errno;
    pthread_sigmask(SIG_SETMASK, &s->mask, NULL);
    munmap(stack, stk);
    return pid < 0 ? -e : pid;
}

/* Wait for passt's exit: true if it was reaped within ms milliseconds. */
static bool reap_within(pid_t pid, unsigned ms, int *status)
{
    uint64_t end = clock_mono_ns() + (uint64_t)ms * 1000000u;
    for (;;) {
        pid_t w = waitpid(pid, status, WNOHANG);
        if (w == pid || (w < 0 && errno == ECHILD))
            return true;
        if (clock_mono_ns() >= end)
            return false;
        struct timespec ts = { 0, 2000000 };
        nanosleep(&ts, NULL);
    }
}

/* Stop a passt that failed to start (set-up time, before any seccomp
 * filter): SIGTERM, the grace, then SIGKILL. */
static void stop_child(pid_t pid)
{
    if (pid <= 0)
        return;
    int st;
    kill(pid, SIGTERM);
    if (!reap_within(pid, NET_PASST_STOP_GRACE_MS, &st)) {
        kill(pid, SIGKILL);
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
    }
}

/* Run as root, passt drops to nobody: the user and group it becomes (65534
 * if the passwd database has no nobody) and its --runas argument. */
static void runas_nobody(uid_t *ru, gid_t *rg, char *runas, size_t rlen)
{
    *ru = 65534;
    *rg = 65534;
    struct passwd pw, *res = NULL;
    char pbuf[1024];
    if (getpwnam_r("nobody", &pw, pbuf, sizeof pbuf, &res) == 0 && res) {
        *ru = pw.pw_uid;
        *rg = pw.pw_gid;
    }
    snprintf(runas, rlen, "%u:%u", (unsigned)*ru, (unsigned)*rg);
}

/* Make the directory passt writes its pid file in: dir (PATH_MAX bytes)
 * under o->run_dir, $TMPDIR or /tmp. 0 or -errno. */
static int make_run_dir(const struct net_passt_opts *o, char *dir, size_t dlen, char *why, size_t wlen)
{
    const char *parent = o->run_dir ? o->run_dir : getenv("TMPDIR");
    if (!parent || !*parent)
        parent = "/tmp";
    if ((size_t)snprintf(dir, dlen, "%s/moat-passt-XXXXXX", parent) >= dlen) {
        snprintf(why, wlen, "passt: runtime directory path too long");
        return -ENAMETOOLONG;
    }
    if (!mkdtemp(dir)) {
        int r = -errno;
        snprintf(why, wlen, "passt: cannot make a directory in %s: %s", parent, strerror(-r));
        return r;
    }
    return 0;
}

/* Say why passt, reaped (w == pid, status st) or gone (w < 0), ended while
 * starting, with what it wrote to out_fd. */
static void explain_exit(pid_t w, pid_t pid, int st, int out_fd, bool root, char *why, size_t wlen)
{
    char msg[512];
    output_summary(out_fd, msg, sizeof msg);
    if (w == pid && WIFEXITED(st))
        snprintf(why, wlen, "passt exited with status %d while starting%s%s%s",
                 WEXITSTATUS(st), *msg ? ": " : "", msg,
                 root && strstr(msg, "Permission denied")
                     ? " (passt runs as nobody: the directory must be reachable by it)" : "");
    else if (w == pid && WIFSIGNALED(st))
        snprintf(why, wlen, "passt was killed by signal %d while starting%s%s",
                 WTERMSIG(st), *msg ? ": " : "", msg);
    else
        snprintf(why, wlen, "passt went away while starting%s%s", *msg ? ": " : "", msg);
}

/* Wait until passt is ready: once its pid file has the pid in it (passt
 * writes it when it is initialised). 0; -EIO if it exits before (*pid set
 * to -1: reaped); -ETIMEDOUT after tmo milliseconds. */
static int wait_ready(pid_t *pid, const char *pidfile, int out_fd, unsigned tmo, bool root,
                      char *why, size_t wlen)
{
    uint64_t end = clock_mono_ns() + (uint64_t)tmo * 1000000u;
    for (;;) {
        struct stat sb;
        if (stat(pidfile, &sb) == 0 && sb.st_size > 0)
            return 0;
        int st = 0;
        pid_t w = waitpid(*pid, &st, WNOHANG);
        if (w == *pid || (w < 0 && errno == ECHILD)) {
            explain_exit(w, *pid, st, out_fd, root, why, wlen);
            *pid = -1;
            return -EIO;
        }
        if (clock_mono_ns() >= end) {
            char msg[512];
            output_summary(out_fd, msg, sizeof msg);
            snprintf(why, wlen, "passt did not start within %u ms%s%s", tmo, *msg ? ": " : "", msg);
            return -ETIMEDOUT;
        }
        struct timespec ts = { 0, 2000000 };
        nanosleep(&ts, NULL);
    }
}

/* The highest fd the child closes up to: the fd limit, at most 65536. */
static int max_fd(void)
{
    struct rlimit rl;
    return getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536 ? (int)rl.rlim_cur : 65536;
}

/* Bound what passt may still write to out_fd: its output so far and
 * NET_PASST_OUTPUT_MAX more (a write past that fails, passt goes on). */
static void seal_output(int out_fd)
{
    off_t cur = lseek(out_fd, 0, SEEK_CUR);
    if (cur >= 0 && ftruncate(out_fd, cur + NET_PASST_OUTPUT_MAX) == 0)
        fcntl(out_fd, F_ADD_SEALS, F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL);
}

static const struct net_backend_ops passt_ops;

int net_passt_create(const struct net_passt_opts *o, struct net_backend **out, char *why, size_t wlen)
{
    *out = NULL;
    char path[PATH_MAX], dir[PATH_MAX], pidfile[PATH_MAX + 16];
    const char *name = o->passt ? o->passt : getenv(NET_PASST_ENV_BIN);
    if (!name || !*name)
        name = "passt";
    int r = net_passt_check_forwards(o->fwd, o->nfwd, why, wlen);
    if (r < 0)
        return r;
    r = find_binary(name, path, sizeof path, why, wlen);
    if (r < 0)
        return r;

    /* Run as root, passt drops to nobody: say so (--runas) and give it the
     * directory it writes its pid file in. */
    bool root = geteuid() == 0;
    uid_t ru = 65534;
    gid_t rg = 65534;
    char runas[32];
    if (root)
        runas_nobody(&ru, &rg, runas, sizeof runas);
    for (size_t i = 0; i < o->nfwd; i++) {
        r = check_host_port(&o->fwd[i], root, why, wlen);
        if (r < 0)
            return r;
    }

    r = make_run_dir(o, dir, sizeof dir, why, wlen);
    if (r < 0)
        return r;
    snprintf(pidfile, sizeof pidfile, "%s/passt.pid", dir);
    struct passt_backend *b = NULL;
    struct net_passt_argv *av = NULL;
    int sv[2] = { -1, -1 }, out_fd = -1, null_fd = -1;
    pid_t pid = -1;
    if (root && chown(dir, ru, rg) < 0) {
        r = -errno;
        snprintf(why, wlen, "passt: chown %s: %s", dir, strerror(-r));
        goto fail;
    }
    b = calloc(1, sizeof *b);
    av = malloc(sizeof *av);
    if (!b || !av) {
        r = -ENOMEM;
        snprintf(why, wlen, "passt: out of memory");
        goto fail;
    }
    r = net_passt_argv(o, path, pidfile, root ? runas : NULL, av, why, wlen);
    if (r < 0)
        goto fail;
    out_fd = memfd_create("passt-output", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (out_fd < 0 || null_fd < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        r = -errno;
        snprintf(why, wlen, "passt: %s", strerror(-r));
        goto fail;
    }
    set_bufs(sv[0]);
    set_bufs(sv[1]);
    struct spawn sp = { .path = path, .argv = av->v, .sock = sv[1], .out = out_fd, .null_fd = null_fd,
                        .parent = getpid(), .max_fd = max_fd() };
    pid = spawn_child(&sp);
    if (pid < 0) {
        r = pid;
        pid = -1;
        snprintf(why, wlen, "passt: clone: %s", strerror(-r));
        goto fail;
    }
    if (sp.err) {               /* execve failed; the child has exited */
        r = -sp.err;
        snprintf(why, wlen, "passt: cannot execute %s: %s", path, strerror(sp.err));
        goto fail;
    }
    close(sv[1]);
    sv[1] = -1;
    close(null_fd);
    null_fd = -1;

    unsigned tmo = o->start_timeout_ms ? o->start_timeout_ms : NET_PASST_START_TIMEOUT_MS;
    r = wait_ready(&pid, pidfile, out_fd, tmo, root, why, wlen);
    if (r < 0)
        goto fail;
    unlink(pidfile);
    rmdir(dir);
    seal_output(out_fd);
    int fl = fcntl(sv[0], F_GETFL);
    if (fl < 0 || fcntl(sv[0], F_SETFL, fl | O_NONBLOCK) < 0) {
        r = -errno;
        snprintf(why, wlen, "passt: O_NONBLOCK: %s", strerror(-r));
        goto fail;
    }
    free(av);
    b->nb.ops = &passt_ops;
    b->nb.fd = sv[0];
    b->nb.vnet_hdr = false;
    b->pid = pid;
    b->out_fd = out_fd;
    passt_rx_init(&b->rx);
    *out = &b->nb;
    return 0;

fail:
    if (sv[0] >= 0)
        close(sv[0]);
    if (sv[1] >= 0)
        close(sv[1]);
    stop_child(pid);
    if (out_fd >= 0)
        close(out_fd);
    if (null_fd >= 0)
        close(null_fd);
    unlink(pidfile);
    rmdir(dir);
    free(av);
    free(b);
    return r;
}

/* ---- frames ---- */

/* Write what is held: 0 once all of it is out, -EAGAIN, or -errno. */
static int flush_hold(struct passt_backend *b)
{
    while (b->hold_off < b->hold_len) {
        ssize_t n = send(b->nb.fd, b->hold + b->hold_off, b->hold_len - b->hold_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return -EAGAIN;
            return errno == ECONNRESET ? -EPIPE : -errno;
        }
        b->hold_off += (size_t)n;
    }
    return 0;
}

static int passt_send(struct net_backend *nb, const struct net_vhdr *hdr, const uint8_t *frame, size_t len)
{
    (void)hdr;
    struct passt_backend *b = pb(nb);
    if (len == 0 || !frame)
        return -EINVAL;
    if (len > NET_FRAME_MAX)
        return -EMSGSIZE;
    if (b->hold_len) {
        int r = flush_hold(b);
        if (r < 0)
            return r;
        bool same = b->hold_len == PASST_LEN_SIZE + len &&
                    memcmp(b->hold + PASST_LEN_SIZE, frame, len) == 0;
        b->hold_len = b->hold_off = 0;
        if (same)               /* the retry of the frame that is now out */
            return 0;
    }
    uint8_t pre[PASST_LEN_SIZE];
    passt_len_encode((uint32_t)len, pre);
    struct iovec iov[2] = { { pre, sizeof pre }, { (void *)frame, len } };
    struct msghdr m = { .msg_iov = iov, .msg_iovlen = 2 };
    ssize_t n;
    do
        n = sendmsg(b->nb.fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return -EAGAIN;
        return errno == ECONNRESET ? -EPIPE : -errno;
    }
    if ((size_t)n == sizeof pre + len)
        return 0;
    /* Part of it went: keep the whole frame, and the count of what is out. */
    memcpy(b->hold, pre, sizeof pre);
    memcpy(b->hold + sizeof pre, frame, len);
    b->hold_len = sizeof pre + len;
    b->hold_off = (size_t)n;
    return -EAGAIN;
}

static ssize_t passt_recv(struct net_backend *nb, struct net_vhdr *hdr, uint8_t *buf, size_t cap)
{
    struct passt_backend *b = pb(nb);
    if (cap < NET_FRAME_MAX || !buf)
        return -EINVAL;
    if (hdr)
        memset(hdr, 0, sizeof *hdr);
    for (;;) {
        const uint8_t *f;
        size_t len;
        int r = passt_rx_next(&b->rx, &f, &len);
        if (r < 0)
            return r;
        if (r == 1) {
            memcpy(buf, f, len);
            return (ssize_t)len;
        }
        if (b->rx_eof)
            return -EPIPE;
        uint8_t *w;
        size_t room = passt_rx_space(&b->rx, &w);
        if (room == 0)          /* cannot be: no whole frame is waiting */
            return -EPROTO;
        ssize_t n = recv(nb->fd, w, room, MSG_DONTWAIT);
        if (n > 0) {
            passt_rx_commit(&b->rx, (size_t)n);
            continue;
        }
        if (n == 0) {
            b->rx_eof = true;   /* whole frames first, then -EPIPE */
            continue;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return -EAGAIN;
        return errno == ECONNRESET ? -EPIPE : -errno;
    }
}

static void passt_destroy(struct net_backend *nb)
{
    if (!nb)
        return;
    struct passt_backend *b = pb(nb);
    /* passt (--fd, one-off mode) exits when its socket closes. No signal:
     * after set-up moat's seccomp lists allow no signal to another process
     * (pidfd_send_signal would let a pidfd of any same-uid process, opened
     * from /proc, be signalled). One that has not ended within the grace
     * is left to PR_SET_PDEATHSIG (SIGKILL when moat's thread that started
     * it ends) and counted in the log line. */
    if (nb->fd >= 0)
        close(nb->fd);
    int st;
    if (b->pid > 0 && !reap_within(b->pid, NET_PASST_STOP_GRACE_MS, &st))
        fprintf(stderr, "moat: passt (pid %d) still running %u ms after its socket closed; "
                "it ends with moat\n", (int)b->pid, NET_PASST_STOP_GRACE_MS);
    if (b->out_fd >= 0)
        close(b->out_fd);
    free(b);
}

static const struct net_backend_ops passt_ops = {
    .name = "user",
    .send = passt_send,
    .recv = passt_recv,
    .set_offloads = NULL,
    .destroy = passt_destroy,
};

pid_t net_passt_pid(const struct net_backend *nb)
{
    return pb(nb)->pid;
}

size_t net_passt_output(const struct net_backend *nb, char *buf, size_t len)
{
    if (len == 0)
        return 0;
    const struct passt_backend *b = pb(nb);
    off_t end = lseek(b->out_fd, 0, SEEK_CUR);
    struct stat sb;
    if (end > 0 && fstat(b->out_fd, &sb) == 0 && end > sb.st_size)
        end = sb.st_size;
    if (end <= 0) {
        buf[0] = 0;
        return 0;
    }
    off_t from = end > (off_t)len - 1 ? end - ((off_t)len - 1) : 0;
    ssize_t n = pread(b->out_fd, buf, (size_t)(end - from), from);
    if (n < 0)
        n = 0;
    buf[n] = 0;
    return (size_t)n;
}
