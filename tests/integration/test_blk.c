/* virtio-blk through the moat binary on /dev/kvm:
 *  - the tiny polling driver guest (tests/guests/blk.c): read, write, flush,
 *    GET_ID, a malformed chain, read-only drive, two drives, no drive,
 *    an image locked by another VM;
 *  - the default Linux guest: mount an ext4 image from /dev/vda, read a
 *    file, write one (checked on the host with debugfs); a read-only drive;
 *    boot with root=/dev/vda (ext4 root made from the guest's initramfs);
 *  - durability: the guest writes flushed, numbered records and acknowledges
 *    each on the console; moat is SIGKILLed at random moments; every
 *    acknowledged record must be in the image — also through a
 *    copy-on-write overlay, which `moat disk export` must open after
 *    every kill.
 *
 * Environment: MOAT_BIN (build/moat), MOAT_GUESTS (build/guests),
 * MOAT_LINUX_DIR (build/guest: bzImage, initramfs.cpio), MOAT_TEST_SLOW
 * (time limits x N), MOAT_REQUIRE_KVM (fail instead of skip without KVM),
 * MOAT_BLK_KILL_RUNS (durability runs in the suite, default 3).
 * test_blk --durability N [overlay]  runs only the durability test (on a
 * plain image, or through an overlay), N runs, no time limit
 * (tests/integration/blk-durability.sh).
 * Needs mke2fs, debugfs and cpio in PATH for the Linux part (skipped loudly
 * otherwise). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../guests/blk_proto.h"
#include "../guests/expect.h"
#include "host_probe.h"
#include "harness.h"

#define OUT_CAP (1u << 20)

static const char *moat_bin(void) { return env_or("MOAT_BIN", "build/moat"); }
static const char *guests(void) { return env_or("MOAT_GUESTS", "build/guests"); }
static const char *linux_dir(void) { return env_or("MOAT_LINUX_DIR", "build/guest"); }

static char tmpdir[256];

static const char *tpath(const char *name)
{
    static char bufs[8][512];
    static unsigned k;
    char *b = bufs[k++ % 8];
    snprintf(b, 512, "%s/%s", tmpdir, name);
    return b;
}

struct run {
    char *out;          /* stdout + stderr */
    size_t len;
    int status;         /* exit status, 128 + signal */
};

/* Run argv; kill_after_acks >= 0: SIGKILL moat once that many "ack " lines
 * were seen plus a random pause up to 3 ms (durability). */
static void run_argv(struct run *r, double cap_s, const char *const *argv, long kill_after_acks)
{
    memset(r, 0, sizeof *r);
    r->out = calloc(1, OUT_CAP + 1);
    ck_assert_ptr_nonnull(r->out);
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    pid_t pid = spawn_child("test_blk", argv, p[1], p[1], true, false);
    close(p[1]);
    double deadline = now() + cap_s * slow();
    long acks = 0;
    bool killed = false;
    for (;;) {
        double left = deadline - now();
        if (left <= 0 && !killed) {
            kill(pid, SIGKILL);
            killed = true;
        }
        struct pollfd pf = { p[0], POLLIN, 0 };
        int n = poll(&pf, 1, killed ? 1000 : (int)(left * 1000) + 1);
        if (n < 0 && errno != EINTR)
            break;
        if (n <= 0)
            continue;
        char buf[4096];
        ssize_t got = read(p[0], buf, sizeof buf);
        if (got <= 0)
            break;
        for (ssize_t i = 0; i < got; i++)
            if (!buf[i])
                buf[i] = '?';   /* keep the text searchable */
        if (r->len + (size_t)got <= OUT_CAP) {
            memcpy(r->out + r->len, buf, (size_t)got);
            r->len += (size_t)got;
        }
        if (kill_after_acks >= 0 && !killed) {
            for (ssize_t i = 0; i < got; i++)
                if (buf[i] == '\n')
                    acks++;
            if (acks >= kill_after_acks) {
                usleep((useconds_t)(rand() % 3000));
                kill(pid, SIGKILL);
                killed = true;
            }
        }
    }
    close(p[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    r->status = WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
}

#define RUN(r, cap, ...) run_argv((r), (cap), (const char *const[]){ __VA_ARGS__, NULL }, -1)

static void show(const struct run *r, const char *what)
{
    fprintf(stderr, "---- %s: status %d, output:\n%.*s\n----\n", what, r->status,
            (int)(r->len > 4000 ? 4000 : r->len), r->out);
}

/* The host kind, from the moat binary under test (main sets it). */
static enum test_host_kind host_kind;
static char host_why[256];

static const char *blk_elf(void)
{
    static char p[512];
    snprintf(p, sizeof p, "%s/blk.elf", guests());
    return p;
}

static void write_file(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, data, len), (ssize_t)len);
    close(fd);
}

static uint8_t *read_all(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    uint8_t *b = malloc((size_t)st.st_size + 1);
    ck_assert_int_eq(pread(fd, b, (size_t)st.st_size, 0), st.st_size);
    close(fd);
    *len = (size_t)st.st_size;
    return b;
}

static void pattern_image(const char *path, unsigned sectors)
{
    size_t n = sectors * 512u;
    uint8_t *b = malloc(n);
    for (size_t i = 0; i < n; i++)
        b[i] = BLK_PAT(i);
    write_file(path, b, n);
    free(b);
}

/* ---- the polling driver guest ---- */

START_TEST(elf_rw_two_drives)
{
    const char *d1 = tpath("rw.img"), *d2 = tpath("second.img");
    pattern_image(d1, BLK_SECTORS);
    uint8_t zero[BLK_SECTORS2 * 512] = { 0 };
    write_file(d2, zero, sizeof zero);
    char a1[600], a2[600];
    snprintf(a1, sizeof a1, "%s,id=%s", d1, BLK_ID);
    snprintf(a2, sizeof a2, "%s", d2);
    struct run r;
    RUN(&r, 60, moat_bin(), "run", "--kernel", blk_elf(), "--drive", a1, "--drive", a2);
    show(&r, "blk rw");
    ck_assert_int_eq(r.status, 0);
    ck_assert(strstr(r.out, BLK_OK_RW));
    ck_assert(strstr(r.out, BLK_TWO));
    size_t len;
    uint8_t *img = read_all(d1, &len);
    ck_assert_uint_eq(len, BLK_SECTORS * 512u);
    size_t w0 = BLK_W_FIRST * 512u, w1 = w0 + BLK_W_COUNT * 512u;
    for (size_t i = 0; i < len; i++)
        ck_assert_uint_eq(img[i], (i >= w0 && i < w1) ? BLK_PAT2(i) : BLK_PAT(i));
    free(img);
    free(r.out);
}
END_TEST

START_TEST(elf_read_only)
{
    const char *d1 = tpath("ro.img");
    pattern_image(d1, BLK_SECTORS);
    char a1[600];
    snprintf(a1, sizeof a1, "%s,ro,id=%s", d1, BLK_ID);
    struct run r;
    RUN(&r, 60, moat_bin(), "run", "--kernel", blk_elf(), "--drive", a1);
    show(&r, "blk ro");
    ck_assert_int_eq(r.status, 0);
    ck_assert(strstr(r.out, BLK_OK_RO));
    size_t len;
    uint8_t *img = read_all(d1, &len);
    ck_assert_uint_eq(len, BLK_SECTORS * 512u);
    for (size_t i = 0; i < len; i++)
        ck_assert_uint_eq(img[i], BLK_PAT(i));
    free(img);
    free(r.out);
}
END_TEST

/* Seccomp (docs/security.md): the whole suite runs with it on (the CLI's
 * default); here each thread kind, made to call getppid(2) right after its
 * filter is in (the test hook MOAT_SECCOMP_TEST_VIOLATE=KIND), ends moat
 * with 159 and the one line naming the kind and the call; with
 * --seccomp-audit the same call is let through and the run ends normally.
 * The net kind is checked in test_net (it needs a TAP). */
static void expect_violation(const struct run *r, const char *kind)
{
    char want[96];
    snprintf(want, sizeof want, "moat: seccomp: the %s thread made a forbidden system call: getppid", kind);
    ck_assert_msg(r->status == 159 && strstr(r->out, want) && strstr(r->out, "exiting with status 159"),
                  "%s: status %d, output:\n%s", kind, r->status, r->out);
}

/* The image's lock free again: a killed moat's io_uring ring holds the
 * file until the kernel tears the ring down, which it finishes after the
 * process has exited (asynchronously), so the next run could find the
 * image still locked for a moment. */
static void wait_unlocked(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    double t_end = now() + 10 * slow();
    while (flock(fd, LOCK_EX | LOCK_NB) < 0 && now() < t_end)
        usleep(10000);
    close(fd);
}

START_TEST(seccomp_each_thread_kind)
{
    const char *d1 = tpath("sc.img");
    pattern_image(d1, BLK_SECTORS);
    char a1[600];
    snprintf(a1, sizeof a1, "%s,id=%s", d1, BLK_ID);
    static const char *const kinds[] = { "vcpu", "vmm", "blk", "console", "main" };
    struct run r;
    /* The sanitizer build leaves the thread that ends the process
     * unfiltered (its leak check at exit; docs/security.md): no main
     * filter to trip there. */
    RUN(&r, 60, moat_bin(), "seccomp");
    bool san = strstr(r.out, "sanitizer build") != NULL;
    ck_assert_int_eq(r.status, 0);
    free(r.out);
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if (san && !strcmp(kinds[i], "main")) {
            printf("SKIPPED: test_blk: seccomp main thread: not filtered in the sanitizer build\n");
            continue;
        }
        wait_unlocked(d1);
        setenv("MOAT_SECCOMP_TEST_VIOLATE", kinds[i], 1);
        RUN(&r, 60, moat_bin(), "run", "--kernel", blk_elf(), "--drive", a1);
        expect_violation(&r, kinds[i]);
        free(r.out);
    }
    /* vsock: the device's thread starts when the guest's driver is ready */
    char vs[600], vsg[512];
    snprintf(vs, sizeof vs, "%s/sc.vsock", tmpdir);
    snprintf(vsg, sizeof vsg, "%s/vsock.elf", guests());
    setenv("MOAT_SECCOMP_TEST_VIOLATE", "vsock", 1);
    RUN(&r, 60, moat_bin(), "run", "--kernel", vsg, "--vsock", vs);
    expect_violation(&r, "vsock");
    free(r.out);
    unlink(vs);
    /* moat device: the vhost-user server thread, before any frontend */
    char sock[600];
    snprintf(sock, sizeof sock, "%s/sc.vhost", tmpdir);
    setenv("MOAT_SECCOMP_TEST_VIOLATE", "vhost", 1);
    RUN(&r, 60, moat_bin(), "device", "blk", "--socket", sock, "--disk", d1);
    expect_violation(&r, "vhost");
    free(r.out);
    unlink(sock);
    /* audit: logged by the kernel, not killed (the read-only run of
     * elf_read_only, which ends with status 0) */
    pattern_image(d1, BLK_SECTORS);
    char ro[620];
    snprintf(ro, sizeof ro, "%s,ro,id=%s", d1, BLK_ID);
    setenv("MOAT_SECCOMP_TEST_VIOLATE", "blk", 1);
    RUN(&r, 60, moat_bin(), "run", "--seccomp-audit", "--kernel", blk_elf(), "--drive", ro);
    ck_assert_msg(r.status == 0 && strstr(r.out, BLK_OK_RO) && strstr(r.out, "test hook") &&
                  !strstr(r.out, "forbidden"), "audit: %d\n%s", r.status, r.out);
    free(r.out);
    /* off: no filter, so the hook never runs */
    RUN(&r, 60, moat_bin(), "run", "--no-seccomp", "--kernel", blk_elf(), "--drive", ro);
    ck_assert_msg(r.status == 0 && strstr(r.out, BLK_OK_RO) && !strstr(r.out, "test hook"), "off: %d\n%s",
                  r.status, r.out);
    free(r.out);
    unsetenv("MOAT_SECCOMP_TEST_VIOLATE");
}
END_TEST

/* One request on moat's control socket; the reply line in buf. No reply
 * line (moat ended, say by its seccomp filter) fails with the end of
 * moat's output (file out), which says why, on the failure's one line. */
static void ctl_request(const char *sock, const char *out, const char *req, char *buf, size_t len)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    snprintf(a.sun_path, sizeof a.sun_path, "%s", sock);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    char line[700];
    int n = snprintf(line, sizeof line, "%s\n", req);
    ck_assert_int_eq(send(fd, line, (size_t)n, MSG_NOSIGNAL), n);
    size_t got = 0;
    ssize_t k;
    while (got + 1 < len && (k = recv(fd, buf + got, len - 1 - got, 0)) > 0) {
        got += (size_t)k;
        if (memchr(buf, '\n', got))
            break;
    }
    buf[got] = 0;
    close(fd);
    if (!memchr(buf, '\n', got)) {
        size_t olen = 0;
        char *t = (char *)read_all(out, &olen);
        size_t from = olen > 400 ? olen - 400 : 0;
        for (size_t i = from; i < olen; i++)
            t[i] = t[i] == '\n' ? '|' : t[i];        /* one line: a log's grep for :F: shows it */
        ck_abort_msg("%.*s: no reply line ('%s'); moat's output ends: %.*s", (int)strcspn(req, " "), req, buf,
                     (int)(olen - from), t + from);
    }
}

/* moat run of the blk guest (its command line mode, one drive) with a
 * control socket, output to out: its pid once the socket exists. */
static pid_t start_blk_guest(const char *mode, const char *drive, const char *sock, const char *out)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        int nul = open("/dev/null", O_RDONLY);
        if (o < 0 || nul < 0)
            _exit(127);
        dup2(nul, 0);
        dup2(o, 1);
        dup2(o, 2);
        execl(moat_bin(), "moat", "run", "--kernel", blk_elf(), "--cmdline", mode, "--drive", drive, "--control",
              sock, "--timeout", "120", (char *)NULL);
        _exit(127);
    }
    double deadline = now() + 30 * slow();
    while (access(sock, F_OK) != 0 && now() < deadline)
        usleep(20000);
    return pid;
}

/* The CLI's main thread under its seccomp list serves every control
 * request that touches files and devices — status, pause, resume,
 * snapshot, snapshot-disks and clone-disks (overlay copies), stop —
 * while a drive writes flushed records through an overlay. */
START_TEST(seccomp_control_requests)
{
    const char *base = tpath("ctl-base.img"), *ovl = tpath("ctl.ovl"), *sock = tpath("ctl.sock");
    const char *out = tpath("ctl.out");
    uint8_t zero[2048 * 512] = { 0 };
    write_file(base, zero, sizeof zero);
    char drive[1300];
    snprintf(drive, sizeof drive, "%s,overlay=%s", base, ovl);
    pid_t pid = start_blk_guest("blkdur", drive, sock, out);
    char reply[512], dir[600];
    ctl_request(sock, out, "status", reply, sizeof reply);
    ck_assert_msg(!strncmp(reply, "ok running", 10), "status: %s", reply);
    ctl_request(sock, out, "pause", reply, sizeof reply);
    ck_assert_msg(!strncmp(reply, "ok paused", 9), "pause: %s", reply);
    ctl_request(sock, out, "resume", reply, sizeof reply);
    ck_assert_msg(!strncmp(reply, "ok running", 10), "resume: %s", reply);
    snprintf(dir, sizeof dir, "snapshot %s", tpath("ctl-snap"));
    ctl_request(sock, out, dir, reply, sizeof reply);
    ck_assert_msg(!strncmp(reply, "ok snapshot", 11), "snapshot: %s", reply);
    snprintf(dir, sizeof dir, "snapshot-disks %s", tpath("ctl-snapdisks"));
    ctl_request(sock, out, dir, reply, sizeof reply);
    ck_assert_msg(!strncmp(reply, "ok snapshot-disks disks=1", 25), "snapshot-disks: %s", reply);
    snprintf(dir, sizeof dir, "clone-disks %s", tpath("ctl-clone"));
    ctl_request(sock, out, dir, reply, sizeof reply);
    ck_assert_msg(!strncmp(reply, "ok clone-disks disks=1", 22), "clone-disks: %s", reply);
    ctl_request(sock, out, "stop", reply, sizeof reply);
    ck_assert_msg(!strncmp(reply, "ok stopped", 10), "stop: %s", reply);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    size_t len;
    uint8_t *text = read_all(out, &len);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "moat: status 0x%x:\n%.*s", st, (int)len, (char *)text);
    ck_assert_msg(!memmem(text, len, "seccomp", 7), "%.*s", (int)len, (char *)text);
    free(text);
    struct stat sb;
    ck_assert_int_eq(stat(tpath("ctl-snap/state"), &sb), 0);
    ck_assert_int_eq(stat(tpath("ctl-clone/disk0.overlay"), &sb), 0);
}
END_TEST

/* Wait (60 s, scaled) until the file out holds needle. */
static bool wait_output(const char *out, const char *needle)
{
    for (double t_end = now() + 60 * slow(); now() < t_end; usleep(20000)) {
        size_t n;
        uint8_t *t = read_all(out, &n);
        bool seen = t && memmem(t, n, needle, strlen(needle)) != NULL;
        free(t);
        if (seen)
            return true;
    }
    return false;
}

/* A backing-file swap through the control socket (`set blk:ID path F`)
 * under the main thread's seccomp list: the stop and restart run on the
 * VM's runner, and the guest sees each new capacity and file. */
START_TEST(seccomp_control_swap)
{
    const char *a = tpath("sw-a.img"), *b = tpath("sw-b.img"), *sock = tpath("sw.sock"), *out = tpath("sw.out");
    static uint8_t img[3 * 1024 * 1024];
    memset(img, 'A', 1024 * 1024);
    write_file(a, img, 1024 * 1024);
    memset(img, 'B', sizeof img);
    write_file(b, img, 2 * 1024 * 1024);
    char drive[1300];
    snprintf(drive, sizeof drive, "%s,id=d0", a);
    pid_t pid = start_blk_guest("blkswap", drive, sock, out);
    char reply[512], req[1400];
    /* Each swap after the guest's report of the one before (its first: the
     * drive as it booted): two config changes in a row, or one before its
     * driver is up, can reach it as one. */
    ck_assert_msg(wait_output(out, "swap: cap 2048"), "the guest never reported its drive");
    snprintf(req, sizeof req, "set blk:d0 path %s", b);
    ctl_request(sock, out, req, reply, sizeof reply);
    ck_assert_msg(!strncmp(reply, "ok", 2), "set path: %s", reply);
    ck_assert_msg(wait_output(out, "swap: cap 4096"), "the guest never reported the first swap");
    write_file(b, img, sizeof img);          /* grown: the same file again */
    ctl_request(sock, out, req, reply, sizeof reply);
    ck_assert_msg(!strncmp(reply, "ok", 2), "set path again: %s", reply);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    size_t len;
    uint8_t *text = read_all(out, &len);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "moat: status 0x%x:\n%.*s", st, (int)len, (char *)text);
    ck_assert_msg(!memmem(text, len, "seccomp", 7), "%.*s", (int)len, (char *)text);
    ck_assert_msg(memmem(text, len, "swap: cap 2048 byte 65", 22) && memmem(text, len, "swap: cap 4096 byte 66", 22) &&
                      memmem(text, len, "swap: cap 6144 byte 66", 22), "%.*s", (int)len, (char *)text);
    free(text);
}
END_TEST

START_TEST(elf_no_drive_and_locked)
{
    struct run r;
    RUN(&r, 60, moat_bin(), "run", "--kernel", blk_elf());
    ck_assert_int_eq(r.status, BLK_NODEV);
    free(r.out);
    /* The same image twice: the second open finds it locked (usage error). */
    const char *d1 = tpath("twice.img");
    pattern_image(d1, BLK_SECTORS);
    RUN(&r, 60, moat_bin(), "run", "--kernel", blk_elf(), "--drive", d1, "--drive", d1);
    show(&r, "blk twice");
    ck_assert_int_eq(r.status, CLI_EXIT_USAGE);
    ck_assert(strstr(r.out, "in use"));
    free(r.out);
}
END_TEST

/* ---- durability ---- */

#define DUR_SECTORS 4096u

/* n runs; returns the number of lost acknowledged records. overlay: the
 * drive is a zero base image with a copy-on-write overlay (created by the
 * first open); after each kill `moat disk export` must open the overlay
 * cleanly and the records are checked in the guest's view it writes. */
static unsigned durability(unsigned runs, bool overlay, unsigned *acked_total, unsigned *kills)
{
    const char *base = tpath("dur.img"), *ovl = tpath("dur.ovl"), *flat = tpath("dur-flat.img");
    const char *img = overlay ? flat : base;
    unsigned lost = 0;
    *acked_total = *kills = 0;
    for (unsigned k = 0; k < runs; k++) {
        uint8_t *zero = calloc(DUR_SECTORS, 512);
        write_file(base, zero, DUR_SECTORS * 512u);
        free(zero);
        unlink(ovl);
        unlink(flat);
        char d[1200];
        if (overlay)
            snprintf(d, sizeof d, "%s,overlay=%s", base, ovl);
        else
            snprintf(d, sizeof d, "%s", base);
        long kill_at = rand() % 400;
        struct run r;
        run_argv(&r, 120, (const char *const[]){ moat_bin(), "run", "--kernel", blk_elf(), "--drive", d,
                                                 "--", "blkdur", NULL }, kill_at);
        if (r.status == 128 + SIGKILL)
            (*kills)++;
        else if (!strstr(r.out, BLK_ACK "4095"))
            /* Neither killed nor done: it failed (e.g. a drive still locked
             * by the run killed before it); that run tested nothing. */
            fprintf(stderr, "durability run %u: not killed, status %d: %.*s\n", k, r.status,
                    (int)(r.len > 400 ? 400 : r.len), r.out);
        if (overlay) {
            struct run e;
            run_argv(&e, 60, (const char *const[]){ moat_bin(), "disk", "export", ovl, flat, NULL }, -1);
            if (e.status != 0)
                fprintf(stderr, "durability run %u: moat disk export: status %d: %.*s\n", k, e.status,
                        (int)(e.len > 400 ? 400 : e.len), e.out);
            ck_assert_int_eq(e.status, 0);
            free(e.out);
        }
        /* The highest acknowledged record. */
        unsigned long maxn = 0;
        for (char *p = r.out; (p = strstr(p, BLK_ACK)); p += 4) {
            unsigned long n = strtoul(p + 4, NULL, 10);
            if (n > maxn && strchr(p, '\n'))
                maxn = n;
        }
        size_t len;
        uint8_t *b = read_all(img, &len);
        unsigned bad = 0;
        for (unsigned long n = 1; n <= maxn && n < DUR_SECTORS; n++) {
            const uint8_t *s = b + n * 512;
            uint64_t got;
            memcpy(&got, s + 8, 8);
            bool ok = !memcmp(s, BLK_REC_MAGIC, 8) && got == n;
            for (unsigned j = 16; ok && j < 512; j++)
                ok = s[j] == BLK_REC(n, j);
            if (!ok)
                bad++;
        }
        if (bad)
            fprintf(stderr, "durability run %u: %u of %lu acknowledged records missing\n", k, bad, maxn);
        lost += bad;
        *acked_total += (unsigned)maxn;
        free(b);
        free(r.out);
    }
    return lost;
}

static void durability_check(bool overlay)
{
    unsigned runs = (unsigned)atoi(env_or("MOAT_BLK_KILL_RUNS", "3")), acked, kills;
    unsigned lost = durability(runs, overlay, &acked, &kills);
    printf("durability%s: %u runs, %u killed mid-run, %u acknowledged records, %u lost\n",
           overlay ? " (overlay)" : "", runs, kills, acked, lost);
    ck_assert_uint_eq(lost, 0);
    ck_assert_uint_gt(acked, 0);
    /* Every run is a kill during flushed writes: none may fail to start. */
    ck_assert_uint_eq(kills, runs);
}

START_TEST(durability_sigkill)
{
    durability_check(false);
}
END_TEST

START_TEST(durability_sigkill_overlay)
{
    durability_check(true);
}
END_TEST

/* ---- Linux ---- */

/* Absolute paths of the e2fsprogs tools (a busybox shell would otherwise
 * prefer its own, incompatible mke2fs applet). */
static char mke2fs[512], debugfs[512];

static bool find_tool(const char *t, char *out, size_t len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s:/sbin:/usr/sbin", env_or("PATH", "/bin:/usr/bin"));
    for (char *save = NULL, *d = strtok_r(path, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(out, len, "%s/%s", d, t);
        struct stat st;
        if (stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0) {
            /* Not busybox itself (its applet links resolve to it). */
            if (st.st_size > 0 && !strstr(out, "busybox")) {
                char real[512];
                if (realpath(out, real) && strstr(real, "busybox"))
                    continue;
                return true;
            }
        }
    }
    return false;
}

static bool have_tool(const char *t)   /* any kind, busybox applets included */
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", t);
    return system(cmd) == 0;
}

/* Linux reaches user space only on hardware KVM; on PVM these run in the
 * nested suite instead (make test-nested). MOAT_REQUIRE_KVM (set there)
 * makes a host without hardware KVM a failure, so they cannot skip there. */
static bool linux_ready(void)
{
    if (host_kind != TEST_HOST_KVM) {
        ck_assert_msg(!require_kvm(), "MOAT_REQUIRE_KVM is set but the host probe says: %s", host_why);
        printf("SKIPPED: test_blk Linux tests: %s (the nested suite runs them: make test-nested)\n", host_why);
        return false;
    }
    char k[512], i[512];
    snprintf(k, sizeof k, "%s/bzImage", linux_dir());
    snprintf(i, sizeof i, "%s/initramfs.cpio", linux_dir());
    if (access(k, R_OK) || access(i, R_OK)) {
        printf("SKIPPED: test_blk Linux tests: %s not built (make guest)\n", k);
        return false;
    }
    if (!find_tool("mke2fs", mke2fs, sizeof mke2fs) || !find_tool("debugfs", debugfs, sizeof debugfs) ||
        !have_tool("cpio")) {
        printf("SKIPPED: test_blk Linux tests: mke2fs, debugfs or cpio missing\n");
        return false;
    }
    return true;
}

static char *sh_out(const char *cmd)
{
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    char *b = calloc(1, 65536);
    size_t n = fread(b, 1, 65535, f);
    b[n] = 0;
    pclose(f);
    return b;
}

__attribute__((format(printf, 1, 2)))
static int sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return system(cmd);
}

START_TEST(linux_mount_read_write)
{
    if (!linux_ready())
        return;
    const char *dir = tpath("fsdir"), *img = tpath("ext4.img");
    ck_assert_int_eq(sh("mkdir -p %s && echo moat-disk-hello > %s/hello.txt", dir, dir), 0);
    ck_assert_int_eq(sh("%s -q -F -t ext4 -d %s %s 16M", mke2fs, dir, img), 0);
    char k[512], i[512];
    snprintf(k, sizeof k, "%s/bzImage", linux_dir());
    snprintf(i, sizeof i, "%s/initramfs.cpio", linux_dir());
    struct run r;
    RUN(&r, 120, moat_bin(), "run", "--timeout", "100", "--kernel", k, "--initrd", i, "--drive", img,
        "--", "/bin/sh", "-c",
        "mkdir -p /mnt && mount -t ext4 /dev/vda /mnt && cat /mnt/hello.txt && "
        "echo written-by-guest > /mnt/new.txt && sync && umount /mnt && echo guest-done");
    show(&r, "linux mount");
    ck_assert_int_eq(r.status, 0);
    ck_assert(strstr(r.out, "moat-disk-hello"));
    ck_assert(strstr(r.out, "guest-done"));
    free(r.out);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s -R 'cat /new.txt' %s 2>/dev/null", debugfs, img);
    char *o = sh_out(cmd);
    ck_assert_msg(strstr(o, "written-by-guest"), "debugfs: %s", o);
    free(o);
}
END_TEST

START_TEST(linux_read_only_drive)
{
    if (!linux_ready())
        return;
    const char *dir = tpath("rodir"), *img = tpath("ro-ext4.img");
    ck_assert_int_eq(sh("mkdir -p %s && echo ro-content > %s/f.txt", dir, dir), 0);
    ck_assert_int_eq(sh("%s -q -F -t ext4 -d %s %s 8M", mke2fs, dir, img), 0);
    size_t len0, len1;
    uint8_t *before = read_all(img, &len0);
    char k[512], i[512], d[600];
    snprintf(k, sizeof k, "%s/bzImage", linux_dir());
    snprintf(i, sizeof i, "%s/initramfs.cpio", linux_dir());
    snprintf(d, sizeof d, "%s,ro", img);
    struct run r;
    RUN(&r, 120, moat_bin(), "run", "--timeout", "100", "--kernel", k, "--initrd", i, "--drive", d,
        "--", "/bin/sh", "-c",
        "cat /sys/block/vda/ro; mkdir -p /mnt && mount -o ro /dev/vda /mnt && cat /mnt/f.txt; "
        "umount /mnt; if dd if=/dev/zero of=/dev/vda bs=512 count=1 2>/dev/null; then echo dd-ok; "
        "else echo dd-refused; fi");
    show(&r, "linux ro");
    ck_assert_int_eq(r.status, 0);
    ck_assert(strstr(r.out, "ro-content"));
    ck_assert(strstr(r.out, "dd-refused"));
    uint8_t *after = read_all(img, &len1);
    ck_assert_uint_eq(len0, len1);
    ck_assert(memcmp(before, after, len0) == 0);
    free(before);
    free(after);
    free(r.out);
}
END_TEST

START_TEST(linux_root_on_vda)
{
    if (!linux_ready())
        return;
    const char *dir = tpath("rootdir"), *img = tpath("root.img");
    char cpio[600];
    snprintf(cpio, sizeof cpio, "%s/initramfs.cpio", linux_dir());
    char abs[700];
    ck_assert_ptr_nonnull(realpath(cpio, abs));
    ck_assert_int_eq(sh("mkdir -p %s%s", dir, ""), 0);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd %s && cpio -idm < %s 2>/dev/null && %s -q -F -t ext4 -d %s %s 32M",
             dir, abs, mke2fs, dir, img);
    ck_assert_int_eq(system(cmd), 0);
    char k[512];
    snprintf(k, sizeof k, "%s/bzImage", linux_dir());
    struct run r;
    RUN(&r, 120, moat_bin(), "run", "--timeout", "100", "--kernel", k, "--cmdline",
        "console=ttyS0 reboot=k panic=-1 8250.nr_uarts=1 root=/dev/vda rw init=/init", "--drive", img,
        "--", "/bin/sh", "-c", "grep ' / ' /proc/mounts; echo root-on-vda > /rootfile; sync");
    show(&r, "linux root=/dev/vda");
    ck_assert_int_eq(r.status, 0);
    ck_assert(strstr(r.out, "Mounted root (ext4 filesystem)"));
    ck_assert(strstr(r.out, "/dev/root / ext4 rw"));
    free(r.out);
    snprintf(cmd, sizeof cmd, "%s -R 'cat /rootfile' %s 2>/dev/null", debugfs, img);
    char *o = sh_out(cmd);
    ck_assert_msg(strstr(o, "root-on-vda"), "debugfs: %s", o);
    free(o);
}
END_TEST

static pid_t main_pid;

static void cleanup(void)
{
    if (getpid() != main_pid)
        return;                 /* a CK_FORK child */
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "test_blk: could not remove %s\n", tmpdir);
}

int main(int argc, char **argv)
{
    snprintf(tmpdir, sizeof tmpdir, "%s/moat-blk-XXXXXX", env_or("TMPDIR", "/tmp"));
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    main_pid = getpid();
    atexit(cleanup);
    unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
    srand(seed);
    host_kind = probe_host_kind(moat_bin(), host_why, sizeof host_why);
    if (host_kind == TEST_HOST_NONE) {
        const char *why = host_why;
        if (require_kvm()) {
            printf("FAILED: test_blk: %s and MOAT_REQUIRE_KVM is set\n", why);
            return 1;
        }
        printf("SKIPPED: test_blk: %s — virtio-blk KVM tests not run\n", why);
        return 0;
    }
    bool only_durability = (argc == 3 || argc == 4) && !strcmp(argv[1], "--durability");
    bool only_overlay = only_durability && argc == 4 && !strcmp(argv[3], "overlay");
    if (only_durability)
        setenv("MOAT_BLK_KILL_RUNS", argv[2], 1);
    printf("test_blk: random seed %u\n", seed);
    Suite *s = suite_create("blk");
    TCase *tc = tcase_create("kvm");
    tcase_set_timeout(tc, only_durability ? 0 : 600 * slow());
    if (!only_overlay)
        tcase_add_test(tc, durability_sigkill);
    if (!only_durability || only_overlay)
        tcase_add_test(tc, durability_sigkill_overlay);
    if (only_durability)
        goto run;
    tcase_add_test(tc, elf_rw_two_drives);
    tcase_add_test(tc, elf_read_only);
    tcase_add_test(tc, elf_no_drive_and_locked);
    tcase_add_test(tc, seccomp_each_thread_kind);
    tcase_add_test(tc, seccomp_control_requests);
    tcase_add_test(tc, seccomp_control_swap);
    tcase_add_test(tc, linux_mount_read_write);
    tcase_add_test(tc, linux_read_only_drive);
    tcase_add_test(tc, linux_root_on_vda);
run:
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
