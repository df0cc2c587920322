/* Per-thread seccomp allow-lists (scfilter.h; docs/security.md, "Seccomp"). */
#include "vmm/base/scfilter.h"

#include <errno.h>
#include <linux/fs.h>
#include <linux/if_tun.h>
#include <linux/kvm.h>
#include <pthread.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "vmm/base/log.h"

/* An allow rule: the system call, and at most one argument condition. */
enum cond {
    C_ANY,          /* any arguments */
    C_EQ,           /* argument `arg` == val */
    C_NOEXEC,       /* argument `arg` without PROT_EXEC */
    C_CLONE_THREAD, /* clone(2) flags with CLONE_THREAD (a thread, never a process) */
    C_KVMIO,        /* an ioctl request of KVM's type (0xAE) */
    C_SELF,         /* argument `arg` == the process's pid, read when the
                     * filter is installed (kill/tgkill: this process only) */
};

struct rule {
    int nr;
    enum cond cond;
    unsigned arg;
    unsigned long val;
};

#define ANY(n) { SCMP_SYS(n), C_ANY, 0, 0 }
#define EQ(n, a, v) { SCMP_SYS(n), C_EQ, (a), (unsigned long)(v) }
#define IOCTL(req) EQ(ioctl, 1, req)
#define SELF(n) { SCMP_SYS(n), C_SELF, 0, 0 }
#define END { -1, C_ANY, 0, 0 }

/* Every thread kind: the C library's own needs (allocation, locks, sleeps,
 * thread exit) and write(2) for log lines. mmap/mprotect never with
 * PROT_EXEC: no new code can be mapped. */
#define COMMON \
    ANY(read), ANY(write), ANY(close), ANY(futex), ANY(exit), ANY(exit_group), \
    ANY(rt_sigprocmask), ANY(rt_sigreturn), ANY(madvise), ANY(munmap), ANY(brk), \
    { SCMP_SYS(mmap), C_NOEXEC, 2, 0 }, { SCMP_SYS(mprotect), C_NOEXEC, 2, 0 }, \
    ANY(clock_gettime), ANY(clock_nanosleep), ANY(restart_syscall)

/* Creating threads (the runner): clone with CLONE_THREAD only; what a new
 * thread does before its own filter is in (its first calls, then
 * sc_install: the SIGSYS handler check, its name, no_new_privs, seccomp). */
#define THREADS \
    { SCMP_SYS(clone), C_CLONE_THREAD, 0, 0 }, ANY(set_robust_list), ANY(rseq), \
    EQ(rt_sigaction, 0, SIGSYS), EQ(prctl, 0, PR_SET_NAME), EQ(prctl, 0, PR_SET_NO_NEW_PRIVS), \
    ANY(seccomp)

/* The vCPU: KVM_RUN and the few vCPU ioctls its exits use (crash report,
 * the boot fix-up of PVM-compatible guests), KVM_IRQ_LINE (UART and
 * virtio-mmio interrupts without irqfd), the kick signal. */
static const struct rule l_vcpu[] = {
    COMMON,
    IOCTL(KVM_RUN), IOCTL(KVM_IRQ_LINE), IOCTL(KVM_TRANSLATE), IOCTL(KVM_GET_REGS),
    IOCTL(KVM_SET_REGS), IOCTL(KVM_GET_SREGS), IOCTL(KVM_SET_SREGS), IOCTL(KVM_GET_VCPU_EVENTS),
    IOCTL(KVM_SET_VCPU_EVENTS), IOCTL(KVM_GET_LAPIC), IOCTL(KVM_SET_MP_STATE),
    ANY(rt_sigtimedwait), SELF(tgkill), ANY(getpid), ANY(gettid),
    END
};

/* The I/O threads' calls beyond COMMON, one list per device type. */
#define BLK_IO \
    ANY(io_uring_enter), ANY(poll), ANY(preadv), ANY(pwritev), ANY(pread64), \
    ANY(pwrite64), ANY(fdatasync), ANY(fallocate), ANY(timerfd_settime), ANY(preadv2)
#define EVLOOP_IO \
    ANY(epoll_wait), ANY(epoll_ctl), ANY(preadv2)
/* No socket, no connect: a guest's connection to host port P is made by
 * the device's connector thread (l_connect), which connects only to
 * PATH_P in PATH's directory. */
#define VSOCK_IO \
    ANY(accept4), ANY(recvfrom), ANY(sendto), ANY(shutdown), \
    ANY(getsockopt), ANY(fcntl)
#define NET_IO \
    ANY(readv), ANY(writev), ANY(recvfrom), ANY(sendto), ANY(sendmsg), ANY(getrandom), \
    ANY(io_uring_enter), ANY(io_uring_register)
#define RNG_IO \
    ANY(getrandom), ANY(timerfd_settime)

static const struct rule l_blk[] = { COMMON, BLK_IO, END };
static const struct rule l_vsock[] = { COMMON, EVLOOP_IO, VSOCK_IO, END };
static const struct rule l_net[] = { COMMON, EVLOOP_IO, NET_IO, END };
static const struct rule l_rng[] = { COMMON, EVLOOP_IO, RNG_IO, END };

/* The vsock connector: reads a port, makes an AF_UNIX socket, connects it
 * to the relative name PATH_<port> (its working directory is PATH's,
 * pinned before the filter: vsock.c), writes the fd back. */
static const struct rule l_connect[] = { COMMON, EQ(socket, 0, AF_UNIX), ANY(connect), END };

/* The runner starts, stops and resets devices: it creates their threads
 * (which inherit this list before adding their own, so it holds theirs)
 * and eventfds; io_uring_register only: a drive's engine puts its files
 * in the slots of the ring made with the device, before any filter
 * (blk_ring_create). No io_uring_setup: a ring made now would have no
 * restrictions. */
static const struct rule l_vmm[] = {
    COMMON, THREADS, BLK_IO, EVLOOP_IO, VSOCK_IO, NET_IO, RNG_IO,
    ANY(eventfd2), ANY(io_uring_register), IOCTL(TUNSETOFFLOAD),
    END
};

static const struct rule l_console[] = {
    COMMON, ANY(poll), ANY(sendto), ANY(fcntl), ANY(rt_sigtimedwait),
    IOCTL(KVM_IRQ_LINE), SELF(tgkill), ANY(getpid),
    END
};

/* The CLI's main thread once the VM runs. */
static const struct rule l_main[] = {
    COMMON,
    { SCMP_SYS(ioctl), C_KVMIO, 1, 0 }, IOCTL(TCSETS), IOCTL(TCGETS), IOCTL(FICLONE),
    ANY(mkdir), ANY(renameat2), ANY(getrandom), ANY(setsockopt),
    /* snapshots write the memory file through the VM's io_uring, created
     * and restricted at set-up (snapmem.c: files registered per snapshot);
     * a TAP's ring gives its file back at teardown (net_uring.c). No
     * io_uring_setup: a new ring would have no restrictions. */
    ANY(io_uring_enter), ANY(io_uring_register),
    /* getifaddrs(3): the net policy's preset, rebuilt on a policy change */
    EQ(socket, 0, AF_NETLINK), ANY(bind), ANY(getsockname), ANY(recvmsg),
    ANY(poll), ANY(accept4), ANY(recvfrom), ANY(sendto), ANY(getsockopt),
    ANY(openat), ANY(newfstatat), ANY(readlink), ANY(getcwd), ANY(lseek), ANY(ftruncate), ANY(pwrite64),
    ANY(pread64), ANY(fsync), ANY(fdatasync), ANY(unlink), ANY(flock),
    /* signals: to this process only (kill, tgkill). No pidfd_send_signal:
     * openat could make a pidfd of any same-uid process from /proc/PID.
     * passt, its child, ends when its socket closes and is reaped (wait4
     * reaps only children; net_passt.c) */
    ANY(fcntl), SELF(kill), ANY(wait4), SELF(tgkill), ANY(getpid),
    END
};

/* `moat device`: the vhost-user server thread (messages with fds, guest
 * memory regions mapped, device start/stop). */
static const struct rule l_vhost[] = {
    COMMON,
    ANY(poll), ANY(accept4), ANY(recvmsg), ANY(sendmsg), ANY(sendto), ANY(newfstatat), ANY(fcntl),
    ANY(getpid), SELF(tgkill), ANY(rt_sigtimedwait), ANY(preadv2),
    END
};

/* `moat vmm`: the HTTP API thread. libmicrohttpd without its own thread:
 * the epoll set, the connections (accept4, recv, send, sendmsg for header
 * and body at once, shutdown), poll on the epoll fd and the stop eventfd,
 * an eventfd write to hand a request to the main thread. No file, no
 * socket of its own, no ioctl, no thread: every request's work is the main
 * thread's (vmm/api/firecracker/vmm.c). */
static const struct rule l_api[] = {
    COMMON,
    ANY(poll), ANY(epoll_wait), ANY(epoll_ctl), ANY(accept4), ANY(recvfrom), ANY(sendto), ANY(sendmsg),
    ANY(shutdown),
    END
};

/* `moat vmm`: the main thread once the VM has run. It does the requests
 * on a running VM: pause and resume (kicks), snapshots (KVM state, the
 * files: created as NAME.tmp, io_uring or pwrite, fsync, renamed over;
 * realpath for diff snapshots), a drive's new backing file (open, fstat,
 * flock), device options and counters; and at the end the VM's teardown
 * (sockets shut down, a TAP ring's file given back, the API socket
 * unlinked). Not: mkdir, link, sockets, processes, terminals. */
static const struct rule l_fcmain[] = {
    COMMON,
    { SCMP_SYS(ioctl), C_KVMIO, 1, 0 }, ANY(poll),
    ANY(openat), ANY(newfstatat), ANY(readlink), ANY(getcwd), ANY(lseek), ANY(ftruncate), ANY(pread64),
    ANY(pwrite64), ANY(fsync), ANY(fdatasync), ANY(unlink), EQ(renameat2, 4, 0), ANY(flock),
    ANY(io_uring_enter), ANY(io_uring_register),
    ANY(shutdown), SELF(tgkill), ANY(getpid),
    END
};

/* The sanitizer build: ASan's and UBSan's runtime (shadow memory, the
 * fake stacks and their reports) makes calls moat's code does not. */
#if defined(__SANITIZE_ADDRESS__)
static const struct rule l_san[] = {
    ANY(sigaltstack), ANY(getpid), ANY(gettid), ANY(tgkill), ANY(prctl), ANY(mremap), ANY(sched_yield),
    ANY(openat), ANY(readlink), ANY(fstat), ANY(newfstatat), ANY(sched_getaffinity),
    ANY(getrlimit), ANY(prlimit64), ANY(lseek), ANY(pread64),
    ANY(set_robust_list), ANY(rseq),
    END
};
#endif

static const struct {
    const char *name;
    const struct rule *rules;
} kinds[SC_KIND_N] = {
    [SC_VCPU] = { "vcpu", l_vcpu },
    [SC_VMM] = { "vmm", l_vmm },
    [SC_BLK] = { "blk", l_blk },
    [SC_VSOCK] = { "vsock", l_vsock },
    [SC_NET] = { "net", l_net },
    [SC_RNG] = { "rng", l_rng },
    [SC_CONSOLE] = { "console", l_console },
    [SC_MAIN] = { "main", l_main },
    [SC_VHOST] = { "vhost", l_vhost },
    [SC_API] = { "api", l_api },
    [SC_FCMAIN] = { "fcmain", l_fcmain },
    [SC_CONNECT] = { "connect", l_connect },
};

const char *sc_kind_name(enum sc_kind k)
{
    return (unsigned)k < SC_KIND_N ? kinds[k].name : "?";
}

int sc_kind_from_name(const char *name)
{
    for (int k = 0; name && k < SC_KIND_N; k++)
        if (strcmp(name, kinds[k].name) == 0)
            return k;
    return -1;
}

/* ---- names and counts ---- */

#define MAX_NR 512
#define NAME_LEN 28
/* System call names by number, for the SIGSYS line (the handler cannot
 * allocate); filled once, read-only after. */
static char nr_names[MAX_NR][NAME_LEN];
static pthread_once_t names_once = PTHREAD_ONCE_INIT;

static void names_init(void)
{
    for (int nr = 0; nr < MAX_NR; nr++) {
        char *n = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
        if (n) {
            snprintf(nr_names[nr], NAME_LEN, "%s", n);
            free(n);
        }
    }
}

/* Distinct system calls of a rule list, appended to out (n in, n out). */
static void collect(const struct rule *rl, int *out, size_t *n, size_t max)
{
    for (; rl->nr != -1; rl++) {
        if (rl->nr < 0)
            continue;   /* not on this architecture */
        bool seen = false;
        for (size_t i = 0; i < *n && !seen; i++)
            seen = out[i] == rl->nr;
        if (!seen && *n < max)
            out[(*n)++] = rl->nr;
    }
}

#define MAX_LIST 96
static const char *list_names[SC_KIND_N][MAX_LIST];
static size_t list_n[SC_KIND_N];
static pthread_once_t lists_once = PTHREAD_ONCE_INIT;

static void lists_init(void)
{
    for (int k = 0; k < SC_KIND_N; k++) {
        int nrs[MAX_LIST];
        size_t n = 0;
        collect(kinds[k].rules, nrs, &n, MAX_LIST);
#if defined(__SANITIZE_ADDRESS__)
        collect(l_san, nrs, &n, MAX_LIST);
#endif
        for (size_t i = 0; i < n; i++) {
            char *s = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nrs[i]);
            list_names[k][i] = s ? s : "?";     /* kept for the process's life */
        }
        list_n[k] = n;
    }
}

int sc_count(enum sc_kind k)
{
    if ((unsigned)k >= SC_KIND_N)
        return -EINVAL;
    pthread_once(&lists_once, lists_init);
    return (int)list_n[k];
}

const char *const *sc_names(enum sc_kind k, size_t *n)
{
    *n = 0;
    if ((unsigned)k >= SC_KIND_N)
        return NULL;
    pthread_once(&lists_once, lists_init);
    *n = list_n[k];
    return list_names[k];
}

int sc_san_extra(void)
{
#if defined(__SANITIZE_ADDRESS__)
    int nrs[MAX_LIST];
    size_t n = 0;
    collect(l_san, nrs, &n, MAX_LIST);
    return (int)n;
#else
    return 0;
#endif
}

bool sc_exit_unfiltered(void)
{
    return sc_san_extra() > 0;
}

/* ---- the violation handler ---- */

static _Thread_local int cur_kind = -1;
static _Thread_local char cur_name[16];

static size_t put(char *buf, size_t at, size_t cap, const char *s)
{
    while (*s && at + 1 < cap)
        buf[at++] = *s++;
    return at;
}

static size_t put_num(char *buf, size_t at, size_t cap, long v)
{
    char tmp[24];
    int i = 0;
    unsigned long u = v < 0 ? (unsigned long)-v : (unsigned long)v;
    do {
        tmp[i++] = (char)('0' + u % 10);
        u /= 10;
    } while (u && i < 23);
    if (v < 0)
        tmp[i++] = '-';
    while (i > 0 && at + 1 < cap)
        buf[at++] = tmp[--i];
    return at;
}

/* Async-signal-safe: builds the line by hand, write(2), _exit(2). */
static void on_sigsys(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)uc;
    char line[200];
    size_t at = 0;
    int nr = si->si_syscall;
    int k = cur_kind;
    at = put(line, at, sizeof line, "moat: seccomp: the ");
    at = put(line, at, sizeof line, k >= 0 && k < SC_KIND_N ? kinds[k].name : "unknown");
    at = put(line, at, sizeof line, " thread made a forbidden system call: ");
    at = put(line, at, sizeof line, nr >= 0 && nr < MAX_NR && nr_names[nr][0] ? nr_names[nr] : "?");
    at = put(line, at, sizeof line, " (");
    at = put_num(line, at, sizeof line, nr);
    at = put(line, at, sizeof line, "); exiting with status ");
    at = put_num(line, at, sizeof line, SC_EXIT_CODE);
    at = put(line, at, sizeof line, "\n");
    ssize_t w = write(STDERR_FILENO, line, at);
    (void)w;
    _exit(SC_EXIT_CODE);
}

static int sigsys_handler(void)
{
    struct sigaction old;
    if (sigaction(SIGSYS, NULL, &old) < 0)
        return -errno;
    if ((old.sa_flags & SA_SIGINFO) && old.sa_sigaction == on_sigsys)
        return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigsys;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    return sigaction(SIGSYS, &sa, NULL) < 0 ? -errno : 0;
}

/* ---- install ---- */

static int add_rule(scmp_filter_ctx ctx, const struct rule *rl)
{
    int r;
    switch (rl->cond) {
    case C_EQ:
        r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, rl->nr, 1,
                             (struct scmp_arg_cmp){ rl->arg, SCMP_CMP_EQ, rl->val, 0 });
        break;
    case C_NOEXEC:
        r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, rl->nr, 1,
                             (struct scmp_arg_cmp){ rl->arg, SCMP_CMP_MASKED_EQ, PROT_EXEC, 0 });
        break;
    case C_CLONE_THREAD:
        r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, rl->nr, 1,
                             (struct scmp_arg_cmp){ 0, SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD });
        break;
    case C_KVMIO:
        r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, rl->nr, 1,
                             (struct scmp_arg_cmp){ rl->arg, SCMP_CMP_MASKED_EQ, 0xff00, KVMIO << 8 });
        break;
    case C_SELF:
        r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, rl->nr, 1,
                             (struct scmp_arg_cmp){ rl->arg, SCMP_CMP_EQ, (scmp_datum_t)getpid(), 0 });
        break;
    default:
        r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, rl->nr, 0);
        break;
    }
    return r == -EEXIST ? 0 : r;
}

static int add_rules(scmp_filter_ctx ctx, const struct rule *rl)
{
    for (; rl->nr != -1; rl++) {
        if (rl->nr < 0)
            continue;
        int r = add_rule(ctx, rl);
        if (r < 0)
            return r;
    }
    return 0;
}

const char *sc_thread_name(void)
{
    return cur_name[0] ? cur_name : NULL;
}

int sc_install(enum sc_kind k, enum sc_mode mode)
{
    return sc_install_named(k, mode, NULL);
}

int sc_install_named(enum sc_kind k, enum sc_mode mode, const char *name)
{
    if (mode == SC_OFF) {
        if (name)
            prctl(PR_SET_NAME, name, 0, 0, 0);
        return 0;
    }
    if ((unsigned)k >= SC_KIND_N || (mode != SC_KILL && mode != SC_AUDIT))
        return -EINVAL;
    pthread_once(&names_once, names_init);
    int r = 0;
    if (mode == SC_KILL && (r = sigsys_handler()) < 0)
        return r;
    /* A trap while SIGSYS is blocked would kill without the line. */
    sigset_t sys;
    sigemptyset(&sys);
    sigaddset(&sys, SIGSYS);
    pthread_sigmask(SIG_UNBLOCK, &sys, NULL);
    const char *t = getenv("MOAT_SECCOMP_TEST_VIOLATE");
    bool violate = t && strcmp(t, kinds[k].name) == 0;
    scmp_filter_ctx ctx = seccomp_init(mode == SC_AUDIT ? SCMP_ACT_LOG : SCMP_ACT_TRAP);
    if (!ctx)
        return -ENOMEM;
    /* clone3's flags are behind a pointer, out of a filter's reach: ENOSYS
     * makes the C library fall back to clone(2), whose flags are checked. */
    r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
    if (r == 0)
        r = add_rules(ctx, kinds[k].rules);
#if defined(__SANITIZE_ADDRESS__)
    if (r == 0)
        r = add_rules(ctx, l_san);
#endif
    if (name)
        snprintf(cur_name, sizeof cur_name, "%s", name);
    else
        snprintf(cur_name, sizeof cur_name, "moat-%s", kinds[k].name);
    prctl(PR_SET_NAME, cur_name, 0, 0, 0);
    cur_kind = (int)k;
    if (r == 0)
        r = seccomp_load(ctx);
    seccomp_release(ctx);
    if (r < 0) {
        log_err("seccomp: installing the %s filter: %s", kinds[k].name, strerror(-r));
        return r;
    }
    if (violate) {
        log_warn("seccomp: test hook: the %s thread calls getppid(2)", kinds[k].name);
        syscall(SYS_getppid);
    }
    return 0;
}

/* ---- the runner ---- */

struct sc_runner {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_mutex_t call_lock;      /* one call at a time */
    enum sc_mode mode;
    int (*fn)(void *);
    void *arg;
    int result;
    bool pending, done, quit, ready;
    int start_r;
};

static void *runner_main(void *p)
{
    struct sc_runner *r = p;
    int ir = sc_install(SC_VMM, r->mode);
    pthread_mutex_lock(&r->lock);
    r->start_r = ir;
    r->ready = true;
    pthread_cond_broadcast(&r->cond);
    while (ir == 0) {
        while (!r->pending && !r->quit)
            pthread_cond_wait(&r->cond, &r->lock);
        if (r->pending) {
            int (*fn)(void *) = r->fn;
            void *arg = r->arg;
            r->pending = false;
            pthread_mutex_unlock(&r->lock);
            int res = fn(arg);
            pthread_mutex_lock(&r->lock);
            r->result = res;
            r->done = true;
            pthread_cond_broadcast(&r->cond);
            continue;
        }
        if (r->quit)
            break;
    }
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

int sc_runner_start(struct sc_runner **out, enum sc_mode mode)
{
    *out = NULL;
    if (mode == SC_OFF)
        return 0;
    struct sc_runner *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    pthread_mutex_init(&r->lock, NULL);
    pthread_mutex_init(&r->call_lock, NULL);
    pthread_cond_init(&r->cond, NULL);
    r->mode = mode;
    /* The runner, and the device threads it creates, take no
     * asynchronous signal (the caller's, such as the CLI's snapshot
     * signals, go to the threads that wait for them). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int e = pthread_create(&r->thread, NULL, runner_main, r);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e) {
        free(r);
        return -e;
    }
    /* Not waited for here: its filter compiles and loads while the
     * caller sets up the VM (a restore reaches KVM_RUN sooner). */
    *out = r;
    return 0;
}

int sc_runner_ready(struct sc_runner *r)
{
    if (!r)
        return 0;
    pthread_mutex_lock(&r->lock);
    while (!r->ready)
        pthread_cond_wait(&r->cond, &r->lock);
    int ir = r->start_r;
    pthread_mutex_unlock(&r->lock);
    return ir;
}

int sc_runner_call(struct sc_runner *r, int (*fn)(void *), void *arg)
{
    if (!r || pthread_equal(pthread_self(), r->thread))
        return fn(arg);
    int ir = sc_runner_ready(r);
    if (ir < 0)
        return ir;
    pthread_mutex_lock(&r->call_lock);
    pthread_mutex_lock(&r->lock);
    r->fn = fn;
    r->arg = arg;
    r->done = false;
    r->pending = true;
    pthread_cond_broadcast(&r->cond);
    while (!r->done)
        pthread_cond_wait(&r->cond, &r->lock);
    int res = r->result;
    pthread_mutex_unlock(&r->lock);
    pthread_mutex_unlock(&r->call_lock);
    return res;
}

void sc_runner_stop(struct sc_runner *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->lock);
    r->quit = true;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
    pthread_join(r->thread, NULL);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->lock);
    pthread_mutex_destroy(&r->call_lock);
    free(r);
}
