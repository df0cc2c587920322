/* The per-thread seccomp allow-lists (vmm/base/scfilter.c): their sizes
 * against Firecracker's and the table in docs/security.md; each filter
 * installed for real in a forked child: allowed calls pass, a call off the
 * list (or an argument off it) ends the child with SC_EXIT_CODE and one
 * line naming it, audit mode lets it through; the runner. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "vmm/base/scfilter.h"

/* Firecracker's per-thread list sizes (its seccomp filters for x86_64):
 * vCPU 27, API 31, VMM 50. moat's vCPU list is held to the vCPU's, the
 * single-purpose threads (device I/O, console, the vhost-user server,
 * moat vmm's HTTP API thread) to the API's, and the three that do the
 * VMM's work (the runner that starts and stops devices; the CLI's main
 * thread: snapshots, control socket, teardown; moat vmm's main thread:
 * the API's requests) to the VMM's. */
static int limit_of(enum sc_kind k)
{
    switch (k) {
    case SC_VCPU: return 27;
    case SC_VMM: case SC_MAIN: case SC_FCMAIN: return 50;
    default: return 31;
    }
}

START_TEST(counts_within_firecracker)
{
    for (int k = 0; k < SC_KIND_N; k++) {
        int n = sc_count((enum sc_kind)k);
        ck_assert_int_gt(n, 10);
        /* The sanitizer build adds its runtime's calls to every list. */
        ck_assert_msg(n <= limit_of((enum sc_kind)k) + sc_san_extra(), "%s: %d system calls (limit %d)",
                      sc_kind_name((enum sc_kind)k), n, limit_of((enum sc_kind)k));
        size_t nn;
        const char *const *names = sc_names((enum sc_kind)k, &nn);
        ck_assert_uint_eq(nn, (size_t)n);
        for (size_t i = 0; i < nn; i++) {
            ck_assert_str_ne(names[i], "?");
            for (size_t j = 0; j < i; j++)
                ck_assert_str_ne(names[i], names[j]);     /* distinct */
        }
        ck_assert_int_eq(sc_kind_from_name(sc_kind_name((enum sc_kind)k)), k);
    }
    ck_assert_int_eq(sc_kind_from_name("nosuch"), -1);
    ck_assert_int_eq(sc_kind_from_name(NULL), -1);
    ck_assert_int_eq(sc_count(SC_KIND_N), -EINVAL);
}
END_TEST

/* docs/security.md's table ("| `KIND` | N | ...") says what the code has. */
START_TEST(doc_table_matches)
{
    if (sc_san_extra()) {
        printf("SKIPPED: test_scfilter doc table: the sanitizer build's lists are larger by design\n");
        return;
    }
    FILE *f = fopen("docs/security.md", "r");
    ck_assert_msg(f != NULL, "docs/security.md (run from the repository root)");
    char line[512];
    int seen = 0;
    while (fgets(line, sizeof line, f)) {
        char kind[32];
        int n;
        if (sscanf(line, "| `%31[a-z]` | %d |", kind, &n) != 2)
            continue;
        int k = sc_kind_from_name(kind);
        ck_assert_msg(k >= 0, "docs/security.md names an unknown thread kind %s", kind);
        ck_assert_msg(n == sc_count((enum sc_kind)k), "docs/security.md: %s has %d, the code %d", kind, n,
                      sc_count((enum sc_kind)k));
        seen |= 1 << k;
    }
    fclose(f);
    ck_assert_msg(seen == (1 << SC_KIND_N) - 1, "docs/security.md lacks a row (seen mask 0x%x)", seen);
}
END_TEST

static void (*before_filter)(void);     /* run in the child before its filter */

/* Fork; the child installs kind k's filter in mode m and runs fn; the
 * exit status comes back, and what the child wrote to stderr in err. */
static int in_child(enum sc_kind k, enum sc_mode m, void (*fn)(void), char *err, size_t elen)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(p[1], STDERR_FILENO);
        close(p[0]);
        if (before_filter)
            before_filter();
        if (sc_install(k, m) < 0)
            _exit(99);
        fn();
        _exit(0);
    }
    close(p[1]);
    size_t got = 0;
    ssize_t n;
    while (got + 1 < elen && (n = read(p[0], err + got, elen - 1 - got)) > 0)
        got += (size_t)n;
    err[got] = 0;
    close(p[0]);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void forbidden_getppid(void) { syscall(SYS_getppid); }

static void allowed_common(void)
{
    /* What every thread does: memory, locks, sleep, log lines. */
    void *m = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || mprotect(m, 4096, PROT_READ) < 0 || munmap(m, 1 << 20) < 0)
        _exit(10);
    void *b = malloc(100000);
    free(b);
    struct timespec ts = { 0, 1000 };
    nanosleep(&ts, NULL);
    if (write(STDERR_FILENO, "", 0) < 0)
        _exit(11);
}

static void exec_mapping(void)
{
    mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    _exit(12);
}

static void exec_protect(void)
{
    void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        _exit(13);
    mprotect(m, 4096, PROT_READ | PROT_EXEC);
    _exit(14);
}

static void tty_ioctl(void)
{
    struct winsize ws;
    ioctl(STDERR_FILENO, TIOCGWINSZ, &ws);
    _exit(15);
}

static void kvm_run_ioctl(void)
{
    /* KVM_RUN on a descriptor that is no vCPU: the filter lets it through
     * (EBADF/ENOTTY from the kernel), which is what is checked. */
    if (ioctl(-1, KVM_RUN, 0) == 0 || (errno != EBADF && errno != ENOTTY))
        _exit(16);
}

static void unix_socket(void)
{
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        _exit(17);
    close(s);
}

static void inet_socket(void)
{
    socket(AF_INET, SOCK_STREAM, 0);
    _exit(18);
}

static void make_process(void)
{
    /* fork(2) is clone(2) without CLONE_THREAD: a process, refused. */
    pid_t p = fork();
    if (p == 0)
        _exit(0);
    _exit(19);
}

static void open_file(void)
{
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        _exit(21);
    close(fd);
}

/* renameat2 of two names that do not exist: the filter's answer is what
 * is checked (the kernel's is ENOENT). */
static void rename_plain(void)
{
    if (syscall(SYS_renameat2, AT_FDCWD, "/nonexistent/a", AT_FDCWD, "/nonexistent/b", 0) == 0 || errno != ENOENT)
        _exit(22);
}

static void rename_exchange(void)
{
    syscall(SYS_renameat2, AT_FDCWD, "/nonexistent/a", AT_FDCWD, "/nonexistent/b", 2 /* RENAME_EXCHANGE */);
    _exit(23);
}

static void *noop_thread(void *a) { return a; }

/* io_uring_setup(2): a new ring has no restrictions (its OPENAT, CONNECT,
 * SOCKET requests would run past the thread's filter). */
static void ring_setup(void)
{
    struct { uint32_t w[30]; } params;      /* struct io_uring_params, zeroed */
    memset(&params, 0, sizeof params);
    int fd = (int)syscall(__NR_io_uring_setup, 4, &params);
    if (fd >= 0)
        close(fd);
    _exit(24);
}

/* kill(2) and tgkill(2) only to this process. */
static void kill_self(void)
{
    if (kill(getpid(), 0) < 0 || syscall(SYS_tgkill, getpid(), getpid(), 0) < 0)
        _exit(25);
}

static void kill_init(void)
{
    kill(1, 0);
    _exit(26);
}

static void tgkill_init(void)
{
    syscall(SYS_tgkill, 1, 1, 0);
    _exit(27);
}

/* A sibling: the test's own child, not the filtered one's. */
static pid_t sibling;

static void kill_sibling(void)
{
    kill(sibling, SIGKILL);
    _exit(28);
}

/* Its own child, made before the filter as passt is (net_passt.c): it
 * ends when the socket it reads closes, and is reaped; no signal needed. */
static int child_sock = -1;
static pid_t child_pid = -1;

static void reap_own_child(void)
{
    close(child_sock);
    int st;
    if (waitpid(child_pid, &st, 0) != child_pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        _exit(30);
}

/* A pidfd of another process (the sibling's, as openat of /proc/PID would
 * give): pidfd_send_signal is on no thread's list. */
static int sibling_pidfd = -1;

static void signal_by_pidfd(void)
{
    syscall(SYS_pidfd_send_signal, sibling_pidfd, SIGKILL, NULL, 0);
    _exit(29);
}

/* connect(2) to a socket outside the VM's directory (any path: the vsock
 * thread has no connect at all; its connector connects to PATH_<port>). */
static char outside_path[108];

static void connect_outside(void)
{
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", outside_path);
    connect(s, (struct sockaddr *)&sa, sizeof sa);
    _exit(31);
}

static void make_thread(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, noop_thread, NULL) != 0 || pthread_join(t, NULL) != 0)
        _exit(20);
}

#define KILLED(k, fn, name)                                                                    \
    do {                                                                                       \
        char e_[512];                                                                          \
        int st_ = in_child((k), SC_KILL, (fn), e_, sizeof e_);                                 \
        ck_assert_msg(st_ == SC_EXIT_CODE, "%s: exit %d, stderr: %s", #fn, st_, e_);           \
        ck_assert_msg(strstr(e_, "moat: seccomp: the ") && strstr(e_, sc_kind_name(k)) &&      \
                      strstr(e_, (name)) && strstr(e_, "exiting with status 159"),             \
                      "%s: %s", #fn, e_);                                                      \
    } while (0)

#define PASSES(k, fn)                                                                          \
    do {                                                                                       \
        char e_[512];                                                                          \
        int st_ = in_child((k), SC_KILL, (fn), e_, sizeof e_);                                 \
        ck_assert_msg(st_ == 0, "%s under %s: exit %d, stderr: %s", #fn, sc_kind_name(k), st_, e_); \
    } while (0)

START_TEST(each_kind_allows_and_kills)
{
    for (int k = 0; k < SC_KIND_N; k++) {
        PASSES((enum sc_kind)k, allowed_common);
        KILLED((enum sc_kind)k, forbidden_getppid, "getppid");
        KILLED((enum sc_kind)k, exec_mapping, "mmap");
        KILLED((enum sc_kind)k, exec_protect, "mprotect");
        KILLED((enum sc_kind)k, inet_socket, "socket");
        KILLED((enum sc_kind)k, make_process, "clone");
    }
}
END_TEST

START_TEST(argument_filters)
{
    /* The C library's one-time setup of its first pthread_create (signal
     * handlers) happens long before any filter in moat: here too. */
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, noop_thread, NULL), 0);
    pthread_join(t, NULL);
    PASSES(SC_VCPU, kvm_run_ioctl);
    KILLED(SC_VCPU, tty_ioctl, "ioctl");         /* only the vCPU's KVM requests */
    KILLED(SC_BLK, kvm_run_ioctl, "ioctl");      /* no ioctl at all */
    KILLED(SC_VSOCK, unix_socket, "socket");     /* its connector makes the sockets */
    PASSES(SC_VMM, make_thread);                 /* the runner creates threads */
    /* moat vmm: the API thread opens no file and makes no socket; its
     * main thread opens files (snapshots, drives), renames only plainly,
     * makes no socket. */
    if (!sc_san_extra())                         /* the sanitizer runtime's list has openat */
        KILLED(SC_API, open_file, "openat");
    KILLED(SC_API, unix_socket, "socket");
    KILLED(SC_API, kvm_run_ioctl, "ioctl");
    PASSES(SC_FCMAIN, open_file);
    PASSES(SC_FCMAIN, kvm_run_ioctl);            /* KVM's requests (snapshots read vCPU state) */
    KILLED(SC_FCMAIN, tty_ioctl, "ioctl");
    PASSES(SC_FCMAIN, rename_plain);
    KILLED(SC_FCMAIN, rename_exchange, "renameat2");
    KILLED(SC_FCMAIN, unix_socket, "socket");
    /* A vCPU never creates a thread. The C library blocks every signal
     * around clone(2), so the trap cannot run the handler: the kernel then
     * kills the process with SIGSYS itself, no line, status 128 + 31 --
     * the same 159 (docs/security.md). */
    char e[512];
    ck_assert_int_eq(in_child(SC_VCPU, SC_KILL, make_thread, e, sizeof e), SC_EXIT_CODE);
}
END_TEST

/* A child of the filtered process holding one end of a socket pair,
 * made before the filter (set-up time): it exits 0 at end of file. */
static void make_own_child(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        _exit(98);
    child_pid = fork();
    if (child_pid == 0) {
        /* none of the test's pipe: its reader sees the end */
        int nul = open("/dev/null", O_WRONLY | O_CLOEXEC);
        dup2(nul, STDERR_FILENO);
        dup2(sv[1], 3);
        syscall(SYS_close_range, 4u, ~0u, 0u);
        char c;
        while (read(3, &c, 1) > 0)
            ;
        _exit(0);
    }
    close(sv[1]);
    child_sock = sv[0];
    if (child_pid < 0)
        _exit(98);
}

/* Post-compromise limits: no thread that runs after set-up creates an
 * io_uring (every ring is made and restricted before the filters); the
 * main thread signals only its own process (no thread may signal a
 * pidfd; its child passt ends when its socket closes); the vsock thread
 * connects nowhere (its connector does, to PATH_<port> only); the
 * connector makes AF_UNIX sockets only. */
START_TEST(ring_kill_connect_limits)
{
    KILLED(SC_MAIN, ring_setup, "io_uring_setup");
    KILLED(SC_FCMAIN, ring_setup, "io_uring_setup");
    KILLED(SC_VSOCK, ring_setup, "io_uring_setup");
    KILLED(SC_NET, ring_setup, "io_uring_setup");
    KILLED(SC_BLK, ring_setup, "io_uring_setup");
    /* the runner: every device ring is made when the device is (blk_ring_create) */
    KILLED(SC_VMM, ring_setup, "io_uring_setup");
    KILLED(SC_VHOST, ring_setup, "io_uring_setup");

    PASSES(SC_MAIN, kill_self);
    KILLED(SC_MAIN, kill_init, "kill");
    sibling = fork();
    ck_assert_int_ge(sibling, 0);
    if (sibling == 0) {
        pause();
        _exit(0);
    }
    KILLED(SC_MAIN, kill_sibling, "kill");
    int st;
    ck_assert_int_eq(waitpid(sibling, &st, WNOHANG), 0);     /* untouched */
    kill(sibling, SIGKILL);
    ck_assert_int_eq(waitpid(sibling, &st, 0), sibling);
    before_filter = make_own_child;
    PASSES(SC_MAIN, reap_own_child);
    before_filter = NULL;
    sibling = fork();
    ck_assert_int_ge(sibling, 0);
    if (sibling == 0) {
        pause();
        _exit(0);
    }
    sibling_pidfd = (int)syscall(SYS_pidfd_open, sibling, 0);
    ck_assert_int_ge(sibling_pidfd, 0);
    for (int k = 0; k < SC_KIND_N; k++)
        KILLED((enum sc_kind)k, signal_by_pidfd, "pidfd_send_signal");
    ck_assert_int_eq(waitpid(sibling, &st, WNOHANG), 0);     /* untouched */
    kill(sibling, SIGKILL);
    ck_assert_int_eq(waitpid(sibling, &st, 0), sibling);
    close(sibling_pidfd);
    if (!sc_san_extra()) {      /* the sanitizer runtime's list has tgkill */
        for (int k = 0; k < SC_KIND_N; k++) {
            size_t n;
            const char *const *names = sc_names((enum sc_kind)k, &n);
            bool has = false;
            for (size_t i = 0; i < n; i++)
                has |= !strcmp(names[i], "tgkill");
            if (has)
                KILLED((enum sc_kind)k, tgkill_init, "tgkill");
        }
    }

    /* a listening socket outside any VM's directory */
    snprintf(outside_path, sizeof outside_path, "/tmp/test-scfilter-%d.sock", (int)getpid());
    unlink(outside_path);
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", outside_path);
    ck_assert_int_eq(bind(l, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(l, 4), 0);
    KILLED(SC_VSOCK, connect_outside, "socket");
    KILLED(SC_VMM, connect_outside, "socket");
    PASSES(SC_CONNECT, unix_socket);
    KILLED(SC_CONNECT, inet_socket, "socket");
    if (!sc_san_extra())                         /* the sanitizer runtime's list has openat */
        KILLED(SC_CONNECT, open_file, "openat");
    close(l);
    unlink(outside_path);
}
END_TEST

START_TEST(audit_logs_and_goes_on)
{
    char e[512];
    ck_assert_int_eq(in_child(SC_VCPU, SC_AUDIT, forbidden_getppid, e, sizeof e), 0);
    ck_assert_int_eq(in_child(SC_BLK, SC_AUDIT, tty_ioctl, e, sizeof e), 15);
    /* off: nothing installed at all */
    ck_assert_int_eq(in_child(SC_VCPU, SC_OFF, tty_ioctl, e, sizeof e), 15);
    ck_assert_int_eq(sc_install(SC_VCPU, (enum sc_mode)7), -EINVAL);
    ck_assert_int_eq(sc_install(SC_KIND_N, SC_KILL), -EINVAL);
}
END_TEST

/* The test hook: MOAT_SECCOMP_TEST_VIOLATE names the kind that calls
 * getppid right after its filter is in. */
static void nothing(void) {}

static void nothing_named_fcmain(void)
{
    const char *n = sc_thread_name();
    if (!n || strcmp(n, "moat-fcmain") != 0)
        _exit(27);
}

START_TEST(test_hook)
{
    char e[512];
    setenv("MOAT_SECCOMP_TEST_VIOLATE", "net", 1);
    ck_assert_int_eq(in_child(SC_BLK, SC_KILL, nothing, e, sizeof e), 0);
    ck_assert_int_eq(in_child(SC_NET, SC_KILL, nothing, e, sizeof e), SC_EXIT_CODE);
    ck_assert_msg(strstr(e, "the net thread") && strstr(e, "getppid"), "%s", e);
    unsetenv("MOAT_SECCOMP_TEST_VIOLATE");
}
END_TEST

/* sc_install_named: the thread gets the name given (not "moat-KIND") and
 * knows it without a system call; with SC_OFF it is only named. */
static void named_api(void)
{
    const char *n = sc_thread_name();
    if (!n || strcmp(n, "fc_api") != 0)
        _exit(24);
}

static void unnamed(void)
{
    if (sc_thread_name() != NULL)
        _exit(25);
    char name[16] = "";
    prctl(PR_GET_NAME, name);
    if (strcmp(name, "fc_vcpu 3") != 0)
        _exit(26);
}

static int in_child_named(enum sc_kind k, enum sc_mode m, const char *name, void (*fn)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (sc_install_named(k, m, name) < 0)
            _exit(99);
        fn();
        _exit(0);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

START_TEST(named_threads)
{
    ck_assert_int_eq(in_child_named(SC_API, SC_KILL, "fc_api", named_api), 0);
    ck_assert_int_eq(in_child_named(SC_VCPU, SC_OFF, "fc_vcpu 3", unnamed), 0);
    /* sc_install: "moat-KIND" */
    char e[512];
    ck_assert_int_eq(in_child(SC_FCMAIN, SC_KILL, nothing_named_fcmain, e, sizeof e), 0);
}
END_TEST

static int on_which(void *arg)
{
    *(pthread_t *)arg = pthread_self();      /* no system call: the runner's list is not in question here */
    return 42;
}

START_TEST(runner_runs_calls_elsewhere)
{
    pthread_t tid = 0;
    ck_assert_int_eq(sc_runner_call(NULL, on_which, &tid), 42);
    ck_assert(pthread_equal(tid, pthread_self()));
    struct sc_runner *r = (struct sc_runner *)1;
    ck_assert_int_eq(sc_runner_start(&r, SC_OFF), 0);
    ck_assert_ptr_null(r);
    ck_assert_int_eq(sc_runner_start(&r, SC_KILL), 0);
    ck_assert_ptr_nonnull(r);
    for (int i = 0; i < 3; i++) {
        tid = pthread_self();
        ck_assert_int_eq(sc_runner_call(r, on_which, &tid), 42);
        ck_assert(!pthread_equal(tid, pthread_self()));
    }
    sc_runner_stop(r);
    sc_runner_stop(NULL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("scfilter");
    TCase *tc = tcase_create("lists");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, counts_within_firecracker);
    tcase_add_test(tc, doc_table_matches);
    tcase_add_test(tc, each_kind_allows_and_kills);
    tcase_add_test(tc, argument_filters);
    tcase_add_test(tc, ring_kill_connect_limits);
    tcase_add_test(tc, audit_logs_and_goes_on);
    tcase_add_test(tc, test_hook);
    tcase_add_test(tc, named_threads);
    tcase_add_test(tc, runner_runs_calls_elsewhere);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
