/* libmoat through its public header only: two VMs in one process at once,
 * console capture, moat_stop on a spinning guest, the exit eventfd, timings,
 * configuration errors. KVM tests skip loudly without /dev/kvm.
 *
 * Environment: MOAT_GUESTS (default build/guests), MOAT_TEST_SLOW. */
#include <check.h>
#include <sched.h>
#include <errno.h>
#include <net/if.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <malloc.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <seccomp.h>
#include <xxhash.h>

#include "include/moat.h"
#include "tests/guests/expect.h"
#include "tests/integration/host_probe.h"
#include "tests/integration/rm_tree.h"

static char guest_path[4096];

static const char *guest(const char *name)
{
    const char *dir = getenv("MOAT_GUESTS");
    snprintf(guest_path, sizeof(guest_path), "%s/%s.elf", dir && *dir ? dir : "build/guests", name);
    return guest_path;
}

static int slow(void)
{
    const char *s = getenv("MOAT_TEST_SLOW");
    int v = s ? atoi(s) : 1;
    return v > 0 ? v : 1;
}

struct capture {
    int rfd;
    char buf[65536];
    size_t len;
    pthread_mutex_t lock;
    pthread_t thr;
};

static size_t cap_len(struct capture *c)
{
    pthread_mutex_lock(&c->lock);
    size_t n = c->len;
    pthread_mutex_unlock(&c->lock);
    return n;
}

/* Wait until the output contains needle; false after timeout_ms. */
static int cap_wait_for(struct capture *c, const char *needle, int timeout_ms)
{
    for (int waited = 0; waited < timeout_ms; waited += 10) {
        pthread_mutex_lock(&c->lock);
        int found = strstr(c->buf, needle) != NULL;
        pthread_mutex_unlock(&c->lock);
        if (found)
            return 1;
        usleep(10000);
    }
    return 0;
}

static void *reader(void *arg)
{
    struct capture *c = arg;
    char tmp[4096];
    for (;;) {
        ssize_t n = read(c->rfd, tmp, sizeof(tmp));
        if (n <= 0)
            break;
        pthread_mutex_lock(&c->lock);
        size_t room = sizeof(c->buf) - 1 - c->len;
        size_t k = (size_t)n < room ? (size_t)n : room;
        memcpy(c->buf + c->len, tmp, k);
        c->len += k;
        c->buf[c->len] = 0;
        pthread_mutex_unlock(&c->lock);
    }
    return NULL;
}

/* A VM running `name` with its console captured through a pipe. */
/* A VM running guest `name` with its console captured through a pipe;
 * console_in (or -1) feeds the UART; drive (or NULL) is its one drive. */
static uint32_t make_vm_flags;   /* MOAT_F_* for the next make_vm_in (diff snapshot tests) */
static const char *const *make_vm_overlays;   /* drive_overlays for the next make_vm_in (fork) */
static uint64_t make_vm_console_limit;        /* console_limit for the next make_vm_in */
static const struct moat_device *make_vm_devices;   /* devices (1) for the next make_vm_in */

static struct moat_vm *make_vm_in(const char *name, struct capture *cap, int *wfd, uint32_t cpus,
                                  const char *cmdline, int console_in, const struct moat_drive *drive)
{
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    cap->rfd = p[0];
    cap->len = 0;
    cap->buf[0] = 0;
    pthread_mutex_init(&cap->lock, NULL);
    *wfd = p[1];
    struct moat_config cfg;
    moat_config_init(&cfg);
    cfg.cmdline = cmdline;
    cfg.console_in = console_in;
    cfg.kernel = guest(name);
    cfg.mem_mib = 64;
    cfg.cpus = cpus;
    cfg.console_out = p[1];
    cfg.drives = drive;
    cfg.ndrives = drive ? 1 : 0;
    cfg.flags = make_vm_flags;
    cfg.drive_overlays = make_vm_overlays;
    cfg.console_limit = make_vm_console_limit;
    cfg.devices = make_vm_devices;
    cfg.ndevices = make_vm_devices ? 1 : 0;
    struct moat_vm *vm = NULL;
    struct moat_error err;
    int r = moat_create(&cfg, &vm, &err);
    ck_assert_msg(r == 0, "moat_create(%s): %d %s", name, r, err.msg);
    ck_assert_int_eq(pthread_create(&cap->thr, NULL, reader, cap), 0);
    return vm;
}

static struct moat_vm *make_vm(const char *name, struct capture *cap, int *wfd, uint32_t cpus)
{
    return make_vm_in(name, cap, wfd, cpus, NULL, -1, NULL);
}

static void finish_capture(struct capture *cap, int wfd)
{
    close(wfd);
    pthread_join(cap->thr, NULL);
    close(cap->rfd);
}

/* Stop a VM made by make_vm_in, wait for it, free it and its capture. */
static void stop_vm(struct moat_vm *vm, struct capture *c, int w)
{
    moat_stop(vm);
    struct moat_exit ex;
    ck_assert_int_eq(moat_wait(vm, 10000 * slow(), &ex), 0);
    moat_destroy(vm);
    finish_capture(c, w);
}

/* A restore of state/mem without a console. */
static void restore_config(struct moat_restore_config *rc, const char *state, const char *mem)
{
    moat_restore_config_init(rc);
    rc->state_path = state;
    rc->mem_path = mem;
    rc->console_out = -1;
}

START_TEST(two_vms_in_one_process)
{
    struct capture c1, c2;
    int w1, w2;
    struct moat_vm *a = make_vm("serial", &c1, &w1, 1);
    struct moat_vm *b = make_vm("exitcode", &c2, &w2, 1);
    ck_assert_int_eq(moat_start(a), 0);
    ck_assert_int_eq(moat_start(b), 0);
    ck_assert_int_eq(moat_start(a), -EALREADY);
    struct moat_exit ea, eb;
    ck_assert_int_eq(moat_wait(a, 20000 * slow(), &ea), 0);
    ck_assert_int_eq(moat_wait(b, 20000 * slow(), &eb), 0);
    ck_assert_int_eq(ea.reason, MOAT_EXIT_RESET);
    ck_assert_int_eq(ea.status, 0);
    ck_assert_int_eq(eb.reason, MOAT_EXIT_RESET);
    ck_assert_int_eq(eb.status, EXITCODE_STATUS);
    moat_destroy(a);
    moat_destroy(b);
    finish_capture(&c1, w1);
    finish_capture(&c2, w2);
    ck_assert_str_eq(c1.buf, SERIAL_TEXT);
    ck_assert_uint_eq(c2.len, 0);  /* each VM's UART goes to its own fd */
}
END_TEST

/* A guest cannot write more than console_limit bytes to the console. */
START_TEST(console_limit_caps_output)
{
    struct capture c;
    int w;
    make_vm_console_limit = 5;
    struct moat_vm *vm = make_vm("serial", &c, &w, 1);
    make_vm_console_limit = 0;
    ck_assert_int_eq(moat_start(vm), 0);
    struct moat_exit ex;
    ck_assert_int_eq(moat_wait(vm, 20000 * slow(), &ex), 0);
    ck_assert_int_eq(ex.status, 0);
    moat_destroy(vm);
    finish_capture(&c, w);
    ck_assert_uint_gt(strlen(SERIAL_TEXT), 5);
    ck_assert_msg(strncmp(c.buf, SERIAL_TEXT, 5) == 0, "got '%s'", c.buf);
    ck_assert_msg(strstr(c.buf, "console output limit reached") != NULL, "got '%s'", c.buf);
    ck_assert_msg(strstr(c.buf, SERIAL_TEXT + 5) == NULL, "more than the limit got through: '%s'", c.buf);
}
END_TEST

START_TEST(stop_a_spinning_guest_and_exit_fd)
{
    struct capture c;
    int w;
    struct moat_vm *vm = make_vm("timeout", &c, &w, 2);
    int efd = moat_exit_fd(vm);
    ck_assert_int_ge(efd, 0);
    ck_assert_int_eq(moat_start(vm), 0);
    struct moat_exit ex;
    ck_assert_int_eq(moat_wait(vm, 200, &ex), -ETIMEDOUT);
    struct pollfd p = { .fd = efd, .events = POLLIN };
    ck_assert_int_eq(poll(&p, 1, 0), 0);           /* not readable while running */
    ck_assert_int_eq(moat_stop(vm), 0);
    ck_assert_int_eq(poll(&p, 1, 5000 * slow()), 1);
    ck_assert_int_eq(moat_wait(vm, 5000 * slow(), &ex), 0);
    ck_assert_int_eq(ex.reason, MOAT_EXIT_STOPPED);
    ck_assert_int_eq(ex.status, -1);
    struct moat_timings t;
    ck_assert_int_eq(moat_get_timings(vm, &t), 0);
    ck_assert_int_ge(t.kvm_ready, 0);
    ck_assert_int_ge(t.first_run, t.kvm_ready);
    ck_assert_int_ge(t.exit, t.first_run);
    moat_destroy(vm);                                /* joins both vCPU threads */
    finish_capture(&c, w);
}
END_TEST

/* moat_send_ctrl_alt_del: the kbd guest sets the i8042 up as Linux does,
 * then takes Ctrl+Alt+Del byte by byte on IRQ 1 (tests/guests/kbd.c). */
START_TEST(send_ctrl_alt_del)
{
    struct capture c;
    int w;
    struct moat_vm *vm = make_vm("kbd", &c, &w, 1);
    ck_assert_int_eq(moat_send_ctrl_alt_del(vm), -EINVAL);     /* not started */
    ck_assert_int_eq(moat_send_ctrl_alt_del(NULL), -EINVAL);
    ck_assert_int_eq(moat_start(vm), 0);
    ck_assert_msg(cap_wait_for(&c, "kbd: ready", 10000 * slow()), "no 'kbd: ready': %s", c.buf);
    ck_assert_int_eq(moat_send_ctrl_alt_del(vm), 0);
    struct moat_exit ex;
    ck_assert_int_eq(moat_wait(vm, 10000 * slow(), &ex), 0);
    ck_assert_int_eq(ex.reason, MOAT_EXIT_RESET);
    ck_assert_msg(ex.status == 0, "kbd guest status %d: %s", ex.status, c.buf);
    ck_assert_int_eq(moat_send_ctrl_alt_del(vm), -ESRCH);      /* stopped */
    moat_destroy(vm);
    finish_capture(&c, w);
    ck_assert_msg(strstr(c.buf, "kbd: got 14 11 e0 71 e0 f0 71 f0 11 f0 14\n") && strstr(c.buf, "kbd: ok"),
                  "%s", c.buf);
}
END_TEST

START_TEST(file_transfer_without_vsock)
{
    /* moat_put_file / moat_get_file: argument checks, and -ENOTCONN for a
     * VM without a vsock device (the agent path runs in the nested
     * vsock-snapshot check, tests/nested/vsock_snap_api.c). */
    struct capture c;
    int w;
    struct moat_vm *vm = make_vm("serial", &c, &w, 1);
    int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    char why[64] = "stale";
    uint32_t mode = 7;
    ck_assert_int_eq(moat_put_file(vm, fd, "/tmp/x", 0644, 0, why, sizeof(why)), -ENOTCONN);
    ck_assert_str_eq(why, "");
    ck_assert_int_eq(moat_get_file(vm, "/tmp/x", fd, &mode, 0, why, sizeof(why)), -ENOTCONN);
    ck_assert_uint_eq(mode, 7);
    ck_assert_int_eq(moat_put_file(NULL, fd, "/tmp/x", 0644, 0, NULL, 0), -EINVAL);
    ck_assert_int_eq(moat_put_file(vm, -1, "/tmp/x", 0644, 0, NULL, 0), -EINVAL);
    ck_assert_int_eq(moat_put_file(vm, fd, "", 0644, 0, NULL, 0), -EINVAL);
    ck_assert_int_eq(moat_put_file(vm, fd, NULL, 0644, 0, NULL, 0), -EINVAL);
    ck_assert_int_eq(moat_put_file(vm, fd, "/tmp/x", 0100644, 0, NULL, 0), -EINVAL);
    ck_assert_int_eq(moat_get_file(vm, "/tmp/x", -1, NULL, 0, NULL, 0), -EINVAL);
    ck_assert_int_eq(moat_get_file(vm, "", fd, NULL, 0, NULL, 0), -EINVAL);
    close(fd);
    moat_destroy(vm);
    finish_capture(&c, w);
}
END_TEST

/* A bzImage that is only a boot-protocol header (2.15, 64-bit, 2047-byte
 * command line) and 12 KiB of protected-mode bytes: enough for moat_create
 * to load it as Linux and build its command line; it is never run. */
static void write_header_only_bzimage(const char *path)
{
    static uint8_t k[5 * 512 + 0x3000];
    memset(k, 0, sizeof k);
    uint32_t u32;
    uint16_t u16;
    k[0x1f1] = 4;                                            /* setup_sects */
    u32 = 0x3000 / 16; memcpy(k + 0x1f4, &u32, 4);           /* syssize */
    u16 = 0xAA55; memcpy(k + 0x1fe, &u16, 2);                /* boot_flag */
    k[0x200] = 0xEB; k[0x201] = 0x6A;                        /* jmp to 0x26c: the header's end */
    memcpy(k + 0x202, "HdrS", 4);
    u16 = 0x020F; memcpy(k + 0x206, &u16, 2);                /* version */
    k[0x211] = 1;                                            /* loadflags: LOADED_HIGH */
    u32 = 0x100000; memcpy(k + 0x214, &u32, 4);              /* code32_start */
    u32 = 0x7FFFFFFF; memcpy(k + 0x22c, &u32, 4);            /* initrd_addr_max */
    u32 = 0x200000; memcpy(k + 0x230, &u32, 4);              /* kernel_alignment */
    k[0x234] = 1;                                            /* relocatable */
    u16 = 1; memcpy(k + 0x236, &u16, 2);                     /* xloadflags: KERNEL_64 */
    u32 = 2047; memcpy(k + 0x238, &u32, 4);                  /* cmdline_size */
    u32 = 0x8000; memcpy(k + 0x260, &u32, 4);                /* init_size */
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, k, sizeof k), (ssize_t)sizeof k);
    close(fd);
}

/* A " -- " in the caller's command line starts init's arguments: the
 * drives' virtio_mmio.device= parameters (which the kernel needs to see
 * them) go before it, the command's arguments after init's. */
START_TEST(linux_cmdline_init_args)
{
    char dir[] = "/tmp/moat-api-cmdline-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char kpath[64], dpath[64];
    snprintf(kpath, sizeof kpath, "%s/bzImage", dir);
    snprintf(dpath, sizeof dpath, "%s/disk", dir);
    write_header_only_bzimage(kpath);
    int fd = open(dpath, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, 1 << 20), 0);
    close(fd);
    struct moat_drive d = { .path = dpath };
    const char *av[] = { "/bin/echo", "two words" };
    struct moat_config cfg;
    moat_config_init(&cfg);
    cfg.kernel = kpath;
    cfg.mem_mib = 64;
    cfg.cpus = 1;
    cfg.console_out = -1;
    cfg.drives = &d;
    cfg.ndrives = 1;
    cfg.cmdline = "console=ttyS0 x=\"a -- b\" -- init1 init2";
    cfg.argv = av;
    cfg.argc = 2;
    struct moat_vm *vm = NULL;
    struct moat_error err;
    int r = moat_create(&cfg, &vm, &err);
    ck_assert_msg(r == 0, "moat_create: %d %s", r, err.msg);
    struct moat_vm_info info = { .size = sizeof(info) };
    ck_assert_int_eq(moat_get_info(vm, &info), 0);
    ck_assert_int_eq(info.is_linux, 1);
    /* the first 25 bytes are base's up to its quoted value (whose " -- "
     * is no separator); the separator is the next " -- " */
    const char *c = info.cmdline, *dev = strstr(c, " virtio_mmio.device=");
    ck_assert_msg(!strncmp(c, "console=ttyS0 x=\"a -- b\" ", 25), "cmdline: %s", c);
    const char *dd = strstr(c + 24, " -- ");
    ck_assert_msg(dev && dd && dev < dd, "cmdline: %s", c);
    ck_assert_msg(!strcmp(dd, " -- init1 init2 /bin/echo \"two words\""), "cmdline: %s", c);
    ck_assert_msg(!strstr(dd + 4, " -- "), "cmdline: %s", c);
    moat_destroy(vm);
    unlink(kpath);
    unlink(dpath);
    rmdir(dir);
}
END_TEST

START_TEST(destroy_without_start)
{
    struct capture c;
    int w;
    struct moat_vm *vm = make_vm("serial", &c, &w, 1);
    struct moat_vm_info info = { .size = sizeof(info) };
    ck_assert_int_eq(moat_get_info(vm, &info), 0);
    ck_assert_int_eq(info.is_linux, 0);
    moat_destroy(vm);
    finish_capture(&c, w);
    ck_assert_uint_eq(c.len, 0);
}
END_TEST


/* Wait until the reader has consumed everything written so far (the VM is
 * paused or stopped, so nothing new arrives). */
static void cap_drain(struct capture *c)
{
    int pending = 1;
    for (int i = 0; i < 500 && pending; i++) {
        ck_assert_int_eq(ioctl(c->rfd, FIONREAD, &pending), 0);
        usleep(2000);
    }
    usleep(20000);
}

static char *cap_copy(struct capture *c)
{
    pthread_mutex_lock(&c->lock);
    char *t = strdup(c->buf);
    pthread_mutex_unlock(&c->lock);
    ck_assert_ptr_nonnull(t);
    return t;
}

static unsigned count_lines(struct capture *c)
{
    pthread_mutex_lock(&c->lock);
    unsigned n = 0;
    for (const char *p = c->buf; *p; p++)
        n += *p == '\n';
    pthread_mutex_unlock(&c->lock);
    return n;
}

static int cap_wait_lines(struct capture *c, unsigned lines, int timeout_ms)
{
    for (int waited = 0; waited < timeout_ms; waited += 10) {
        if (count_lines(c) >= lines)
            return 1;
        usleep(10000);
    }
    return 0;
}

/* The counter guest's whole output: "tick 0" .. "tick n-1", "final n". */
static unsigned check_sequence(const char *text)
{
    const char *p = text;
    unsigned n = 0, fin = 0;
    while (!strncmp(p, "tick ", 5)) {
        unsigned t = (unsigned)strtoul(p + 5, NULL, 10);
        ck_assert_msg(t == n, "tick %u where %u was due in: %s", t, n, text);
        n++;
        p = strchr(p, '\n');
        ck_assert_ptr_nonnull(p);
        p++;
    }
    ck_assert_msg(sscanf(p, "final %u", &fin) == 1, "no final line at: %.40s", p);
    ck_assert_uint_eq(fin, n);
    return n;
}

static char *cat(char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *r = realloc(a, la + lb + 1);
    ck_assert_ptr_nonnull(r);
    memcpy(r + la, b, lb + 1);
    return r;
}

struct snapfiles { char state[256], mem[256]; };

static void snap_names(struct snapfiles *f, const char *dir, int k)
{
    snprintf(f->state, sizeof(f->state), "%s/state%d", dir, k);
    snprintf(f->mem, sizeof(f->mem), "%s/memory%d", dir, k);
}

static struct moat_vm *restore_vm(const struct snapfiles *f, struct capture *cap, int *wfd, int console_in)
{
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    cap->rfd = p[0];
    cap->len = 0;
    cap->buf[0] = 0;
    pthread_mutex_init(&cap->lock, NULL);
    *wfd = p[1];
    struct moat_restore_config rc;
    moat_restore_config_init(&rc);
    rc.state_path = f->state;
    rc.mem_path = f->mem;
    rc.console_out = p[1];
    rc.console_in = console_in;
    struct moat_vm *vm = NULL;
    struct moat_error err;
    int r = moat_restore(&rc, &vm, &err);
    ck_assert_msg(r == 0, "moat_restore: %d %s", r, err.msg);
    ck_assert_int_eq(pthread_create(&cap->thr, NULL, reader, cap), 0);
    return vm;
}

/* Run the counter to a few ticks, pause, and snapshot it into k=1 files;
 * returns the exact output so far. */
static char *counter_snapshot(const char *dir)
{
    struct capture c;
    int w, in[2];
    ck_assert_int_eq(pipe2(in, O_CLOEXEC), 0);
    struct moat_vm *vm = make_vm_in("counter", &c, &w, 1, "spin=20000", in[0], NULL);
    ck_assert_int_eq(moat_start(vm), 0);
    ck_assert(cap_wait_for(&c, "tick 2\n", 20000 * slow()));
    ck_assert_int_eq(moat_pause(vm), 0);
    cap_drain(&c);
    char *prefix = cap_copy(&c);
    struct snapfiles f;
    snap_names(&f, dir, 1);
    ck_assert_int_eq(moat_snapshot(vm, f.state, f.mem), 0);
    ck_assert_int_eq(moat_resume(vm), 0);            /* still paused after a snapshot */
    moat_destroy(vm);
    finish_capture(&c, w);
    close(in[0]);
    close(in[1]);
    return prefix;
}

/* The i8042's state is in the snapshot: the kbd guest turns translation
 * on (xlate=1: a CTR a new VM's controller does not have), is snapshotted
 * once set up, and the restored VM's Ctrl+Alt+Del arrives in scan code
 * set 1, which only the restored CTR asks for (a controller as new would
 * send set 2 and the guest would fail with 21). */
START_TEST(i8042_state_across_snapshot)
{
    char dir[] = "/tmp/moat-kbd-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    struct snapfiles f;
    snap_names(&f, dir, 1);
    struct capture c;
    int w;
    struct moat_vm *vm = make_vm_in("kbd", &c, &w, 1, "xlate=1 kbdwait=3000", -1, NULL);
    ck_assert_int_eq(moat_start(vm), 0);
    ck_assert_msg(cap_wait_for(&c, "kbd: ready", 10000 * slow()), "no 'kbd: ready': %s", c.buf);
    ck_assert_int_eq(moat_pause(vm), 0);
    ck_assert_int_eq(moat_snapshot(vm, f.state, f.mem), 0);
    moat_destroy(vm);
    finish_capture(&c, w);

    vm = restore_vm(&f, &c, &w, -1);
    ck_assert_int_eq(moat_start(vm), 0);
    ck_assert_int_eq(moat_send_ctrl_alt_del(vm), 0);
    struct moat_exit ex;
    ck_assert_int_eq(moat_wait(vm, 10000 * slow(), &ex), 0);
    moat_destroy(vm);
    finish_capture(&c, w);
    ck_assert_msg(ex.reason == MOAT_EXIT_RESET && ex.status == 0, "kbd guest: reason %d status %d: %s",
                  ex.reason, ex.status, c.buf);
    ck_assert_msg(strstr(c.buf, "kbd: got 1d 38 e0 53 e0 d3 b8 9d\n") && strstr(c.buf, "kbd: ok"), "%s", c.buf);
    rm_tree(dir);
}
END_TEST

/* One libmoat call on a helper thread, so that a call that never returns
 * fails the test instead of hanging it. */
enum timed_op { OP_PAUSE, OP_SNAPSHOT, OP_RESUME, OP_STOP, OP_DESTROY };
struct timed_call {
    struct moat_vm *vm;
    enum timed_op op;
    const char *state, *mem;
    int r;
    _Atomic bool done;
};

static void *timed_call_thread(void *arg)
{
    struct timed_call *c = arg;
    switch (c->op) {
    case OP_PAUSE: c->r = moat_pause(c->vm); break;
    case OP_SNAPSHOT: c->r = moat_snapshot(c->vm, c->state, c->mem); break;
    case OP_RESUME: c->r = moat_resume(c->vm); break;
    case OP_STOP: c->r = moat_stop(c->vm); break;
    case OP_DESTROY: moat_destroy(c->vm); c->r = 0; break;
    }
    atomic_store(&c->done, true);
    return NULL;
}

static const char *const timed_op_name[] = { "moat_pause", "moat_snapshot", "moat_resume", "moat_stop",
                                             "moat_destroy" };

/* Run op; fail if it has not returned after give_up_ms; returns its time in
 * ms and its result in *r. */
static unsigned timed(struct moat_vm *vm, enum timed_op op, const struct snapfiles *f, int give_up_ms, int *r)
{
    static struct timed_call c;   /* outlives a call that never returns */
    c = (struct timed_call){ .vm = vm, .op = op, .state = f ? f->state : NULL, .mem = f ? f->mem : NULL };
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, timed_call_thread, &c), 0);
    for (int waited = 0; !atomic_load(&c.done); waited++) {
        if (waited >= give_up_ms)
            ck_abort_msg("%s did not return in %d ms: a vCPU is stuck writing the console", timed_op_name[op],
                         give_up_ms);
        usleep(1000);
    }
    pthread_join(th, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *r = c.r;
    return (unsigned)((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000);
}

/* A console reader that never reads. The guest fills the pipe, then keeps
 * printing into moat's buffer; pause, snapshot, resume and stop still
 * return within 100 ms, and destroy soon after. (Before console output went
 * through a buffer and a writer thread, the vCPU blocked in write(2) under
 * the UART lock with its kick signal blocked, and moat_pause never
 * returned.) */
START_TEST(stalled_console_reader_blocks_nothing)
{
    char dir[] = "/tmp/moat-con-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    struct snapfiles f;
    snap_names(&f, dir, 1);
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    ck_assert_int_ge(fcntl(p[1], F_SETPIPE_SZ, 4096), 4096);
    struct moat_config cfg;
    moat_config_init(&cfg);
    cfg.kernel = guest("counter");
    cfg.cmdline = "spin=50";
    cfg.mem_mib = 64;
    cfg.console_out = p[1];
    struct moat_vm *vm = NULL;
    struct moat_error err;
    ck_assert_msg(moat_create(&cfg, &vm, &err) == 0, "moat_create: %s", err.msg);
    ck_assert_int_eq(moat_start(vm), 0);
    /* Until the pipe is full: what it holds has stopped growing for 500 ms
     * (the guest goes on printing into moat's buffer). */
    int last = -1, same_ms = 0;
    for (int waited = 0; same_ms < 500; waited += 10) {
        int n = 0;
        ck_assert_int_eq(ioctl(p[0], FIONREAD, &n), 0);
        same_ms = n > 0 && n == last ? same_ms + 10 : 0;
        last = n;
        ck_assert_msg(waited < 30000 * slow(), "the guest did not fill the console pipe (%d bytes in it)", n);
        usleep(10000);
    }
    struct moat_console_info ci = { .size = sizeof ci };
    ck_assert_int_eq(moat_get_console(vm, &ci), 0);
    ck_assert_msg(ci.queued > 0, "nothing queued behind the full pipe (written %llu)", (unsigned long long)ci.written);
    usleep(100000);
    int r;
    const unsigned limit = 100u * (unsigned)slow();
    unsigned ms = timed(vm, OP_PAUSE, NULL, 5000 * slow(), &r);
    ck_assert_int_eq(r, 0);
    ck_assert_msg(ms < limit, "moat_pause took %u ms", ms);
    ms = timed(vm, OP_SNAPSHOT, &f, 5000 * slow(), &r);
    ck_assert_int_eq(r, 0);
    /* The snapshot also writes and fsyncs its files: what it costs on a
     * busy disk is not the console's doing, so its bound is looser. */
    printf("stalled console: moat_snapshot %u ms\n", ms);
    ck_assert_msg(ms < 1000u * (unsigned)slow(), "moat_snapshot took %u ms", ms);
    ms = timed(vm, OP_RESUME, NULL, 5000 * slow(), &r);
    ck_assert_int_eq(r, 0);
    ck_assert_msg(ms < limit, "moat_resume took %u ms", ms);
    ms = timed(vm, OP_STOP, NULL, 5000 * slow(), &r);
    ck_assert_int_eq(r, 0);
    ck_assert_msg(ms < limit, "moat_stop took %u ms", ms);
    struct moat_exit ex;
    ck_assert_int_eq(moat_wait(vm, 5000 * slow(), &ex), 0);
    ck_assert_int_eq(ex.reason, MOAT_EXIT_STOPPED);
    ck_assert_int_eq(moat_get_console(vm, &ci), 0);
    ck_assert_uint_gt(ci.written, 0);      /* the pipe's worth, no more */
    ck_assert_uint_le(ci.written, 4096);
    ck_assert_msg(ci.queued + ci.dropped > 0, "written %llu queued %llu dropped %llu", (unsigned long long)ci.written, (unsigned long long)ci.queued, (unsigned long long)ci.dropped);
    ck_assert_uint_eq(ci.buffer_size, 1u << 20);
    ck_assert(!ci.failed);
    ms = timed(vm, OP_DESTROY, NULL, 5000 * slow(), &r);
    ck_assert_msg(ms < 1000u * (unsigned)slow(), "moat_destroy took %u ms", ms);
    /* What did get through is the start of the count. */
    char head[8] = { 0 };
    ck_assert_int_eq(read(p[0], head, 7), 7);
    ck_assert_str_eq(head, "tick 0\n");
    close(p[0]);
    close(p[1]);
    rm_tree(dir);
}
END_TEST

/* Snapshot, restore, run, snapshot again — three deep; the concatenated
 * console output is one unbroken count and the final count matches. */
START_TEST(snapshot_restore_chain_three_deep)
{
    char dir[] = "/tmp/moat-snap-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char *text = counter_snapshot(dir);
    for (int depth = 1; depth <= 3; depth++) {
        struct snapfiles f, next;
        snap_names(&f, dir, depth);
        snap_names(&next, dir, depth + 1);
        int in[2];
        ck_assert_int_eq(pipe2(in, O_CLOEXEC), 0);
        struct capture c;
        int w;
        struct moat_vm *vm = restore_vm(&f, &c, &w, in[0]);
        ck_assert_int_eq(moat_start(vm), 0);
        ck_assert(cap_wait_lines(&c, 3, 20000 * slow()));
        if (depth < 3) {
            ck_assert_int_eq(moat_pause(vm), 0);
            cap_drain(&c);
            ck_assert_int_eq(moat_snapshot(vm, next.state, next.mem), 0);
            moat_destroy(vm);
            finish_capture(&c, w);
        } else {
            ck_assert_int_eq(write(in[1], "q", 1), 1);
            struct moat_exit ex;
            ck_assert_int_eq(moat_wait(vm, 20000 * slow(), &ex), 0);
            ck_assert_int_eq(ex.reason, MOAT_EXIT_RESET);
            ck_assert_int_eq(ex.status, 0);            /* register and memory counts agree */
            moat_destroy(vm);
            finish_capture(&c, w);
        }
        text = cat(text, c.buf);
        close(in[0]);
        close(in[1]);
    }
    ck_assert_uint_ge(check_sequence(text), 9);
    free(text);
    rm_tree(dir);
}
END_TEST

/* 20 restores of one snapshot at once: each continues the same count, they
 * diverge (each stops at its own time), and they share the memory file's
 * pages: each mapping's private dirty memory stays small. */
START_TEST(twenty_forks)
{
    enum { N = 20 };
    char dir[] = "/tmp/moat-fork-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char *prefix = counter_snapshot(dir);
    struct snapfiles f;
    snap_names(&f, dir, 1);
    struct moat_vm *vm[N];
    struct capture *c = calloc(N, sizeof(*c));
    int w[N], in[N][2];
    ck_assert_ptr_nonnull(c);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(pipe2(in[i], O_CLOEXEC), 0);
        vm[i] = restore_vm(&f, &c[i], &w[i], in[i][0]);
    }
    /* Not started yet: moat_wait_running refuses. */
    ck_assert_int_eq(moat_wait_running(vm[0], 0), -EINVAL);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(moat_start(vm[i]), 0);
    /* All started together; each has run once moat_wait_running says so. */
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(moat_wait_running(vm[i], (int)(60000 * slow())), 0);
        struct moat_timings t;
        ck_assert_int_eq(moat_get_timings(vm[i], &t), 0);
        ck_assert_int_ge(t.first_run, 0);
    }
    /* Fork i stops after i % 4 + 1 more ticks. */
    for (int i = 0; i < N; i++) {
        ck_assert(cap_wait_lines(&c[i], (unsigned)(i % 4 + 1), 60000 * slow()));
        ck_assert_int_eq(write(in[i][1], "q", 1), 1);
    }
    struct moat_exit ex;
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(moat_wait(vm[i], 60000 * slow(), &ex), 0);
        ck_assert_int_eq(ex.status, 0);
    }
    /* Memory sharing, while the mappings still exist. */
    FILE *sm = fopen("/proc/self/smaps", "r");
    ck_assert_ptr_nonnull(sm);
    char line[512];
    int in_map = 0, maps = 0;
    long total_dirty_kb = 0;
    while (fgets(line, sizeof(line), sm)) {
        if (strchr(line, '-') && strchr(line, '/') && strstr(line, " "))
            in_map = strstr(line, f.mem) != NULL;
        if (in_map && !strncmp(line, "Private_Dirty:", 14)) {
            long kb = strtol(line + 14, NULL, 10);
            maps++;
            total_dirty_kb += kb;
        }
    }
    fclose(sm);
    ck_assert_int_ge(maps, N);          /* each fork maps the file (KVM may split the VMA) */
    ck_assert_msg(total_dirty_kb / N < 2048, "forks dirtied %ld KiB each of a 64 MiB snapshot",
                  total_dirty_kb / N);
    printf("twenty_forks: %d mappings, %ld KiB private dirty per fork\n", maps, total_dirty_kb / N);
    unsigned lens[N];
    for (int i = 0; i < N; i++) {
        moat_destroy(vm[i]);
        finish_capture(&c[i], w[i]);
        char *t = cat(strdup(prefix), c[i].buf);
        lens[i] = check_sequence(t);
        free(t);
        close(in[i][0]);
        close(in[i][1]);
    }
    int differ = 0;
    for (int i = 1; i < N; i++)
        differ |= lens[i] != lens[0];
    ck_assert_msg(differ, "all forks ended at the same count: they did not diverge");
    free(c);
    free(prefix);
    rm_tree(dir);       /* the snapshot, and the working set the forks recorded */
}
END_TEST

/* Bad snapshot files: flipped bits (a sample through the file), truncation,
 * a memory file of the wrong size — each a clean error before any guest runs. */
/* In a state file image: the data of section (type, index), or NULL.
 * (Header 64 bytes; each section: u32 type, u32 index, u64 length, data
 * padded to 8; docs/snapshot-format.md.) */
static uint8_t *state_section(uint8_t *buf, size_t len, uint32_t type, uint32_t index, uint64_t *slen)
{
    for (size_t off = 64; off + 16 <= len;) {
        uint32_t t, i;
        uint64_t l;
        memcpy(&t, buf + off, 4);
        memcpy(&i, buf + off + 4, 4);
        memcpy(&l, buf + off + 8, 8);
        if (t == type && i == index) {
            *slen = l;
            return buf + off + 16;
        }
        off += 16 + ((l + 7) & ~7ull);
    }
    return NULL;
}

/* Recompute the state file's checksum (XXH3-64 with its field zeroed), as
 * someone forging a snapshot would. */
static void state_reseal(uint8_t *buf, size_t len)
{
    memset(buf + 24, 0, 8);
    uint64_t sum = XXH3_64bits(buf, len);
    memcpy(buf + 24, &sum, 8);
}

START_TEST(bad_snapshot_files)
{
    char dir[] = "/tmp/moat-bad-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    free(counter_snapshot(dir));
    struct snapfiles f, bad;
    snap_names(&f, dir, 1);
    snprintf(bad.state, sizeof(bad.state), "%s/bad-state", dir);
    snprintf(bad.mem, sizeof(bad.mem), "%s", f.mem);
    FILE *fp = fopen(f.state, "rb");
    ck_assert_ptr_nonnull(fp);
    static uint8_t buf[1 << 20];
    size_t len = fread(buf, 1, sizeof(buf), fp);
    fclose(fp);
    ck_assert_uint_gt(len, 64);
    struct moat_restore_config rc;
    moat_restore_config_init(&rc);
    rc.state_path = bad.state;
    rc.mem_path = bad.mem;
    struct moat_vm *vm = NULL;
    struct moat_error err;
    for (size_t bit = 0; bit < len * 8; bit += 61) {
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        fp = fopen(bad.state, "wb");
        ck_assert_uint_eq(fwrite(buf, 1, len, fp), len);
        fclose(fp);
        ck_assert_msg(moat_restore(&rc, &vm, &err) < 0, "bit %zu flipped: restored", bit);
        ck_assert(err.is_config);
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    for (size_t l = 0; l < len; l += len / 7 + 1) {
        fp = fopen(bad.state, "wb");
        ck_assert_uint_eq(fwrite(buf, 1, l, fp), l);
        fclose(fp);
        ck_assert_int_lt(moat_restore(&rc, &vm, &err), 0);
    }
    /* Forged files (checksum recomputed): every field restore reads is
     * checked. Before, a boot kind of 99 or a UART IER of 0xff restored. */
    struct { uint32_t type; size_t off; uint8_t val; const char *why; } forged[] = {
        { 1, 12, 99, "boot kind" },           /* snap_meta.boot_kind */
        { 1, 16, 0x80, "flags" },             /* snap_meta.flags */
        { 1, 8, 0, "vCPU count" },            /* snap_meta.ncpus */
        { 80, 0, 0xff, "IER" },               /* serial_state.ier */
        { 80, 1, 0x0e, "IIR" },               /* serial_state.iir */
        { 80, 11, 2, "flag byte" },           /* serial_state.irq_level */
        { 80, 12, 65, "FIFO" },               /* serial_state.rx_len */
        { 81, 4, 1, "padding" },              /* moatdev_state.pad */
    };
    for (size_t k = 0; k < sizeof forged / sizeof forged[0]; k++) {
        static uint8_t copy[1 << 20];
        memcpy(copy, buf, len);
        uint64_t slen = 0;
        uint8_t *sec = state_section(copy, len, forged[k].type, 0, &slen);
        ck_assert_ptr_nonnull(sec);
        ck_assert_uint_gt(slen, forged[k].off);
        sec[forged[k].off] = forged[k].val;
        state_reseal(copy, len);
        fp = fopen(bad.state, "wb");
        ck_assert_uint_eq(fwrite(copy, 1, len, fp), len);
        fclose(fp);
        vm = NULL;
        ck_assert_msg(moat_restore(&rc, &vm, &err) == -EINVAL, "forged %s: restored", forged[k].why);
        ck_assert(err.is_config);
        ck_assert_msg(strstr(err.msg, forged[k].why) != NULL, "forged %s: '%s'", forged[k].why, err.msg);
    }
    /* The reseal itself is right: the unchanged copy, resealed, restores. */
    {
        static uint8_t copy[1 << 20];
        memcpy(copy, buf, len);
        state_reseal(copy, len);
        ck_assert(memcmp(copy, buf, len) == 0);
    }
    /* memory file one page short */
    char shortmem[300];
    snprintf(shortmem, sizeof(shortmem), "%s/short-memory", dir);
    struct stat st;
    ck_assert_int_eq(stat(f.mem, &st), 0);
    int fd = open(shortmem, O_CREAT | O_WRONLY | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, st.st_size - 4096), 0);
    close(fd);
    rc.state_path = f.state;
    rc.mem_path = shortmem;
    ck_assert_int_eq(moat_restore(&rc, &vm, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "memory file"));
    rc.mem_path = f.mem;                     /* and the good pair still works */
    ck_assert_int_eq(moat_restore(&rc, &vm, &err), 0);
    moat_destroy(vm);
    ck_assert_int_eq(rm_tree(dir), 0);
}
END_TEST

/* Pause three times mid-count: nothing runs while paused, and after the
 * last resume the guest's ticks are consecutive and its register and
 * memory counts agree. Console input (the 'q') goes through the UART. */
START_TEST(pause_resume_continues_exactly)
{
    int in[2];
    ck_assert_int_eq(pipe2(in, O_CLOEXEC), 0);
    struct capture c;
    int w;
    struct moat_vm *vm = make_vm_in("counter", &c, &w, 1, "spin=20000", in[0], NULL);
    ck_assert_int_eq(moat_pause(vm), -EINVAL);             /* not started */
    ck_assert_int_eq(moat_start(vm), 0);
    ck_assert_msg(cap_wait_for(&c, "tick 3\n", 20000 * slow()), "no tick 3: %s", c.buf);
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(moat_pause(vm), 0);
        ck_assert_int_eq(moat_pause(vm), -EALREADY);
        /* Let the reader drain what was written before the pause. */
        int pending = 1;
        for (int i = 0; i < 500 && pending; i++) {
            ck_assert_int_eq(ioctl(c.rfd, FIONREAD, &pending), 0);
            usleep(2000);
        }
        usleep(20000);
        size_t before = cap_len(&c);
        usleep(200000);
        ck_assert_uint_eq(cap_len(&c), before);             /* frozen */
        ck_assert_int_eq(moat_resume(vm), 0);
        ck_assert_int_eq(moat_resume(vm), -EALREADY);
        char want[32];
        snprintf(want, sizeof(want), "tick %d\n", 6 + 3 * k);
        ck_assert_msg(cap_wait_for(&c, want, 20000 * slow()), "no %s after resume", want);
    }
    ck_assert_int_eq(write(in[1], "q", 1), 1);
    struct moat_exit ex;
    ck_assert_int_eq(moat_wait(vm, 20000 * slow(), &ex), 0);
    ck_assert_int_eq(ex.reason, MOAT_EXIT_RESET);
    ck_assert_int_eq(ex.status, 0);
    ck_assert_int_eq(moat_pause(vm), -ESRCH);
    moat_destroy(vm);
    finish_capture(&c, w);
    close(in[0]);
    close(in[1]);
    /* ticks 0..n-1 in order, then "final n" */
    const char *p = c.buf;
    unsigned n = 0, fin = 0;
    while (!strncmp(p, "tick ", 5)) {
        unsigned t = (unsigned)strtoul(p + 5, NULL, 10);
        ck_assert_uint_eq(t, n);
        n++;
        p = strchr(p, '\n');
        ck_assert_ptr_nonnull(p);
        p++;
    }
    ck_assert_int_eq(sscanf(p, "final %u", &fin), 1);
    ck_assert_uint_eq(fin, n);
    ck_assert_uint_ge(n, 13);
}
END_TEST


/* Pause with disk I/O in flight: the blk test guest's durability writer
 * writes numbered records with a flush each and prints "ack n" after each
 * flush. While paused, the vCPUs are parked and the drive's I/O thread has
 * drained, so nothing more is acknowledged; after resume it goes on; every
 * acknowledged record is on disk. */
/* How many of this process's threads run under a seccomp filter
 * (/proc/self/task/TID/status: "Seccomp: 2"). */
static unsigned filtered_threads(void)
{
    unsigned n = 0;
    DIR *d = opendir("/proc/self/task");
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[300], line[256];
        snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;       /* the thread has gone */
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "Seccomp:", 8) && atoi(line + 8) == 2)
                n++;
        fclose(f);
    }
    closedir(d);
    return n;
}

static void pause_resume_disk(bool seccomp);

START_TEST(pause_resume_with_disk_io)
{
    pause_resume_disk(false);
}
END_TEST

/* Seccomp is the embedder's choice per VM (MOAT_F_SECCOMP): the VM's own
 * threads are filtered — its drive keeps working through pause and resume
 * (device stop and start on the runner) — and the caller's are not. */
START_TEST(seccomp_per_vm)
{
    mallopt(M_ARENA_MAX, 8);    /* as docs/api.md asks of an embedder that opts in */
    pause_resume_disk(true);
    ck_assert_int_eq(prctl(PR_GET_SECCOMP, 0, 0, 0, 0), 0);    /* this thread: no filter */
    ck_assert_int_gt((int)syscall(SYS_getppid), 0);            /* in no allow-list */
    ck_assert_uint_eq(filtered_threads(), 0);                   /* the VM's threads are gone */
}
END_TEST

static void pause_resume_disk(bool seccomp)
{
    char img[] = "/tmp/moat-pause-blk-XXXXXX";
    int fd = mkstemp(img);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, 1 << 20), 0);   /* 2048 sectors */
    struct capture c;
    int w;
    struct moat_drive d = { .path = img };
    make_vm_flags = seccomp ? MOAT_F_SECCOMP : 0;
    struct moat_vm *vm = make_vm_in("blk", &c, &w, 1, "blkdur", -1, &d);
    make_vm_flags = 0;
    ck_assert_int_eq(moat_start(vm), 0);
    ck_assert_msg(cap_wait_for(&c, "ack 10\n", 30000 * slow()), "no ack 10: %s", c.buf);
    /* vCPU, runner, drive I/O and console writer threads (or none) */
    unsigned nf = filtered_threads();
    if (seccomp)
        ck_assert_uint_ge(nf, 4);
    else
        ck_assert_uint_eq(nf, 0);
    for (int k = 0; k < 4; k++) {
        ck_assert_int_eq(moat_pause(vm), 0);
        cap_drain(&c);
        unsigned before = count_lines(&c);
        usleep(150000);
        ck_assert_uint_eq(count_lines(&c), before);
        ck_assert_int_eq(moat_resume(vm), 0);
        ck_assert_msg(cap_wait_lines(&c, before + 3, 30000 * slow()), "no progress after resume %d", k);
    }
    moat_stop(vm);
    struct moat_exit ex;
    ck_assert_int_eq(moat_wait(vm, 10000 * slow(), &ex), 0);
    moat_destroy(vm);
    finish_capture(&c, w);
    /* Every acknowledged record is in the image. */
    unsigned acked = 0;
    /* Only complete lines count: the stop may cut the last one short. */
    for (const char *q = c.buf; (q = strstr(q, "ack ")); q += 4) {
        char *end;
        unsigned n = (unsigned)strtoul(q + 4, &end, 10);
        if (end == q + 4 || *end != '\n')
            continue;
        uint8_t sec[16];
        ck_assert_int_eq(pread(fd, sec, sizeof(sec), (off_t)n * 512), (ssize_t)sizeof(sec));
        uint64_t got;
        memcpy(&got, sec + 8, 8);
        ck_assert_msg(!memcmp(sec, "MOATREC", 8) && got == n, "record %u missing after ack", n);
        acked++;
    }
    ck_assert_uint_ge(acked, 22);
    close(fd);
    unlink(img);
}

/* Highest complete "ack n" line in text (0: none). */
static unsigned max_ack(const char *text)
{
    unsigned m = 0;
    for (const char *q = text; (q = strstr(q, "ack ")); q += 4) {
        char *end;
        unsigned n = (unsigned)strtoul(q + 4, &end, 10);
        if (end != q + 4 && *end == '\n' && n > m)
            m = n;
    }
    return m;
}

/* Every complete "ack n" line of text has its record in the image; the
 * number of them. With consecutive set, they must also be first, first+1,
 * ... without a gap (first returned in *first). */
static unsigned check_acks(int fd, const char *text, bool consecutive, unsigned *first)
{
    unsigned count = 0, prev = 0;
    for (const char *q = text; (q = strstr(q, "ack ")); q += 4) {
        char *end;
        unsigned n = (unsigned)strtoul(q + 4, &end, 10);
        if (end == q + 4 || *end != '\n')
            continue;
        if (consecutive) {
            if (count == 0)
                *first = n;
            else
                ck_assert_msg(n == prev + 1, "ack %u after ack %u", n, prev);
        }
        prev = n;
        uint8_t sec[16];
        ck_assert_int_eq(pread(fd, sec, sizeof(sec), (off_t)n * 512), (ssize_t)sizeof(sec));
        uint64_t got;
        memcpy(&got, sec + 8, 8);
        ck_assert_msg(!memcmp(sec, "MOATREC", 8) && got == n, "record %u missing after ack", n);
        count++;
    }
    return count;
}

/* Snapshot a running VM with a drive while it writes flushed records,
 * destroy it, restore it onto the same image: it goes on writing where the
 * snapshot stopped it (its queue indices and the guest driver's agree),
 * and every acknowledged record of both runs is in the image. */
START_TEST(snapshot_restore_with_drive)
{
    char dir[] = "/tmp/moat-snapblk-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char img[4200], state[4200], mem[4200];
    snprintf(img, sizeof(img), "%s/disk", dir);
    snprintf(state, sizeof(state), "%s/state", dir);
    snprintf(mem, sizeof(mem), "%s/mem", dir);
    int fd = open(img, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, 1 << 20), 0);   /* 2048 sectors */
    struct capture c;
    int w;
    struct moat_drive d = { .path = img };
    struct moat_vm *vm = make_vm_in("blk", &c, &w, 1, "blkdur", -1, &d);
    ck_assert_int_eq(moat_start(vm), 0);
    ck_assert_msg(cap_wait_for(&c, "ack 10\n", 30000 * slow()), "no ack 10: %s", c.buf);
    char *t0 = cap_copy(&c);
    unsigned before = max_ack(t0);
    free(t0);
    ck_assert_int_eq(moat_snapshot(vm, state, mem), 0);     /* while running */
    /* Pause right after and read everything printed so far: an upper
     * bound for the snapshot point that does not race with the reader. */
    ck_assert_int_eq(moat_pause(vm), 0);
    cap_drain(&c);
    char *t1 = cap_copy(&c);
    unsigned after = max_ack(t1);
    free(t1);
    moat_stop(vm);
    struct moat_exit ex;
    ck_assert_int_eq(moat_wait(vm, 10000 * slow(), &ex), 0);
    moat_destroy(vm);
    finish_capture(&c, w);
    unsigned first_run = check_acks(fd, c.buf, false, NULL);
    ck_assert_uint_ge(first_run, 10);

    /* Bad drive overrides are configuration errors. */
    struct moat_error err;
    struct moat_restore_config rc;
    moat_restore_config_init(&rc);
    rc.state_path = state;
    rc.mem_path = mem;
    struct moat_drive two[2] = { { .path = img }, { .path = img } };
    rc.drives = two;
    rc.ndrives = 2;
    ck_assert_int_eq(moat_restore(&rc, &vm, &err), -EINVAL);
    ck_assert(err.is_config);
    struct moat_drive missing = { .path = "/nonexistent/disk.img" };
    rc.drives = &missing;
    rc.ndrives = 1;
    ck_assert_int_eq(moat_restore(&rc, &vm, &err), -ENOENT);
    ck_assert(err.is_config);
    /* Overrides are matched to the recorded drives by id: one that names
     * no drive of the snapshot is refused, naming it. */
    struct moat_drive other = { .path = img, .id = "nope" };
    rc.drives = &other;
    ck_assert_int_eq(moat_restore(&rc, &vm, &err), -EINVAL);
    ck_assert(err.is_config);
    ck_assert_msg(strstr(err.msg, "'nope'") != NULL, "%s", err.msg);
    /* Forged device sections (checksum recomputed): a virtio type this
     * moat has no device for, and a device whose id is not the one its
     * record gives it, are refused, naming the device. */
    {
        static uint8_t sbuf[1 << 20], copy[1 << 20];
        FILE *fp = fopen(state, "rb");
        ck_assert_ptr_nonnull(fp);
        size_t slen = fread(sbuf, 1, sizeof(sbuf), fp);
        fclose(fp);
        char forged[4300];
        snprintf(forged, sizeof(forged), "%s/forged-state", dir);
        struct { size_t off; uint8_t val; const char *why; } fd_[] = {
            { 0, 99, "virtio type 99" },        /* snap_dev.device_id */
            { 16 + 2, 'b', "its record names it vda" },   /* the id "vda" -> "vdb" */
            { 4, 0, "device id length" },      /* snap_dev.id_len */
        };
        for (size_t k = 0; k < sizeof fd_ / sizeof fd_[0]; k++) {
            memcpy(copy, sbuf, slen);
            uint64_t seclen = 0;
            uint8_t *sec = state_section(copy, slen, 85 /* SNAP_DEV */, 0, &seclen);
            ck_assert_ptr_nonnull(sec);
            ck_assert_uint_gt(seclen, fd_[k].off);
            sec[fd_[k].off] = fd_[k].val;
            state_reseal(copy, slen);
            fp = fopen(forged, "wb");
            ck_assert_uint_eq(fwrite(copy, 1, slen, fp), slen);
            fclose(fp);
            struct moat_restore_config frc;
            moat_restore_config_init(&frc);
            frc.state_path = forged;
            frc.mem_path = mem;
            vm = NULL;
            ck_assert_msg(moat_restore(&frc, &vm, &err) == -EINVAL, "forged %s: restored", fd_[k].why);
            ck_assert(err.is_config);
            ck_assert_msg(strstr(err.msg, fd_[k].why) != NULL, "forged %s: '%s'", fd_[k].why, err.msg);
        }
        unlink(forged);
    }

    /* The restore, with the same image path given as an override. */
    struct capture c2 = { 0 };
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    c2.rfd = p[0];
    pthread_mutex_init(&c2.lock, NULL);
    rc.drives = &d;
    rc.console_out = p[1];
    vm = NULL;
    ck_assert_msg(moat_restore(&rc, &vm, &err) == 0, "moat_restore: %s", err.msg);
    ck_assert_int_eq(pthread_create(&c2.thr, NULL, reader, &c2), 0);
    ck_assert_int_eq(moat_start(vm), 0);
    ck_assert_msg(cap_wait_lines(&c2, 12, 30000 * slow()), "no progress after restore: %s", c2.buf);
    moat_stop(vm);
    ck_assert_int_eq(moat_wait(vm, 10000 * slow(), &ex), 0);
    moat_destroy(vm);
    close(p[1]);
    pthread_join(c2.thr, NULL);
    close(p[0]);
    unsigned first = 0;
    unsigned second_run = check_acks(fd, c2.buf, true, &first);
    ck_assert_uint_ge(second_run, 10);
    /* The restored guest goes on from the snapshot point: its first
     * complete ack follows one acknowledged before the snapshot returned
     * (the line in progress at the snapshot may be cut). */
    ck_assert_msg(first >= before + 1 && first <= after + 2,
                  "restored numbering starts at %u, snapshot taken between ack %u and ack %u",
                  first, before, after);
    close(fd);
    unlink(img);
    unlink(state);
    unlink(mem);
    rm_tree(dir);       /* what is left: a recorded working set (MEMORY.ws) too */
}
END_TEST

/* A drive given as a device by type and options (moat_config.devices, as
 * `moat run --device blk,...`): the guest writes its flushed records
 * through it; a snapshot records it and a restore recreates it from the
 * record alone (no overrides), and the restored guest goes on. */
/* A net device across snapshot and restore: the MAC is recorded (a
 * plain restore keeps it), a fork's child (MOAT_F_FORK_CHILD, as
 * moat_fork sets) gets one of its own, an override's mac= wins; the
 * device reads its state back through moat_device_get and changes it with
 * moat_device_set. In a private network namespace, with TAP devices the
 * kind makes (root and /dev/net/tun, else SKIPPED). */
static void mac_of(struct moat_vm *vm, char out[18])
{
    char buf[4096];
    struct moat_error e;
    ck_assert_msg(moat_device_get(vm, "net", NULL, "stats", buf, sizeof buf, &e) > 0, "%s", e.msg);
    const char *m = strstr(buf, "mac ");
    ck_assert_ptr_nonnull(m);
    snprintf(out, 18, "%s", m + 4);
}

/* the guest_mac line of the device's stats ("" without one) */
static void guest_mac_of(struct moat_vm *vm, char out[18])
{
    char buf[4096];
    struct moat_error e;
    ck_assert_msg(moat_device_get(vm, "net", NULL, "stats", buf, sizeof buf, &e) > 0, "%s", e.msg);
    const char *m = strstr(buf, "guest_mac ");
    snprintf(out, 18, "%s", m ? m + 10 : "");
}

START_TEST(net_device_identity)
{
    if (geteuid() != 0 || access("/dev/net/tun", R_OK | W_OK) != 0 || unshare(CLONE_NEWNET) != 0) {
        printf("SKIPPED: api: net_device_identity needs root, /dev/net/tun and a network namespace\n");
        return;
    }
    char dir[] = "/tmp/moat-netid-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char state[4200], mem[4200];
    snprintf(state, sizeof(state), "%s/state", dir);
    snprintf(mem, sizeof(mem), "%s/mem", dir);
    struct moat_device dev = { .type = "net", .options = "tap=mt0,mac=52:54:00:aa:bb:cc,mmds" };
    make_vm_devices = &dev;
    struct capture c;
    int w;
    struct moat_vm *vm = make_vm_in("counter", &c, &w, 1, "spin=2000000000", -1, NULL);
    make_vm_devices = NULL;
    char m0[18], m1[18], m2[18], m3[18];
    mac_of(vm, m0);
    ck_assert_str_eq(m0, "52:54:00:aa:bb:cc");
    /* run-time changes and reads */
    struct moat_error e;
    ck_assert_int_eq(moat_device_set(vm, "net", NULL, "metadata", "{\"a\": {\"b\": 1}}", &e), 0);
    ck_assert_int_eq(moat_device_set(vm, "net", "net0", "policy", "default deny; allow 10.0.0.1/32", &e), 0);
    char buf[8192];
    ck_assert_int_gt(moat_device_get(vm, "net", NULL, "policy", buf, sizeof buf, &e), 0);
    ck_assert_str_eq(buf, "default deny; allow 10.0.0.1/32");
    ck_assert_int_eq(moat_device_set(vm, "net", NULL, "policy", "allow 10.0.0.0/33", &e), -EINVAL);
    ck_assert_msg(strstr(e.msg, "prefix /33"), "%s", e.msg);
    ck_assert_int_eq(moat_device_set(vm, "net", "nope", "link", "up", &e), -ENODEV);
    ck_assert_int_eq(moat_device_set(vm, "blk", NULL, "link", "up", &e), -ENODEV);
    ck_assert_int_eq(moat_device_set(vm, "net", NULL, "mtu", "9000", &e), -EINVAL);
    ck_assert_int_eq(moat_device_get(vm, "net", NULL, "nothing", buf, sizeof buf, &e), -EINVAL);
    ck_assert_int_eq(moat_device_set(vm, "net", NULL, "tx_bw", "1000/10", &e), 0);
    ck_assert_int_eq(moat_device_set(vm, "net", NULL, "tx_bw", "off", &e), 0);
    ck_assert_int_eq(moat_start(vm), 0);
    ck_assert_int_eq(moat_pause(vm), 0);
    ck_assert_int_eq(moat_snapshot(vm, state, mem), 0);
    /* moat_fork: each child needs a TAP of its own; a clash is refused
     * before anything is written, naming it */
    char fstate[4200], fmem[4200];
    snprintf(fstate, sizeof(fstate), "%s/fstate", dir);
    snprintf(fmem, sizeof(fmem), "%s/fmem", dir);
    struct moat_fork_config fc;
    moat_fork_config_init(&fc);
    fc.state_path = fstate;
    fc.mem_path = fmem;
    struct moat_vm *kids[2] = { NULL, NULL };
    ck_assert_int_eq(moat_fork(vm, &fc, kids, 2, &e), -EINVAL);
    ck_assert(e.is_config);
    ck_assert_msg(strstr(e.msg, "net0 is on TAP mt0"), "%s", e.msg);
    const char *same[2] = { "mtk", "mtk" }, *parents[2] = { "mtq", "mt0" }, *bad[2] = { "mtq", "a/b" };
    fc.net_taps = same;
    ck_assert_int_eq(moat_fork(vm, &fc, kids, 2, &e), -EINVAL);
    ck_assert_msg(strstr(e.msg, "children 0 and 1 would share TAP mtk"), "%s", e.msg);
    fc.net_taps = parents;
    ck_assert_int_eq(moat_fork(vm, &fc, kids, 2, &e), -EINVAL);
    ck_assert_msg(strstr(e.msg, "child 1 net net0 would share its parent's TAP mt0"), "%s", e.msg);
    fc.net_taps = bad;
    ck_assert_int_eq(moat_fork(vm, &fc, kids, 2, &e), -EINVAL);
    ck_assert_msg(strstr(e.msg, "'a/b'"), "%s", e.msg);
    fc.net_taps = NULL;
    fc.net_tap_fmt = "mtk%s";
    ck_assert_int_eq(moat_fork(vm, &fc, kids, 2, &e), -EINVAL);
    fc.net_tap_fmt = "mtk";                             /* no %u: every child the same */
    ck_assert_int_eq(moat_fork(vm, &fc, kids, 2, &e), -EINVAL);
    ck_assert_int_eq(access(fstate, F_OK), -1);
    fc.net_tap_fmt = "mtk%u";
    ck_assert_msg(moat_fork(vm, &fc, kids, 2, &e) == 0, "moat_fork: %s", e.msg);
    ck_assert_uint_gt(if_nametoindex("mtk0"), 0);       /* each child made and holds its own */
    ck_assert_uint_gt(if_nametoindex("mtk1"), 0);
    mac_of(kids[0], m1);
    mac_of(kids[1], m2);
    ck_assert_str_ne(m1, m0);
    ck_assert_str_ne(m1, m2);
    moat_destroy(kids[0]);
    moat_destroy(kids[1]);
    unlink(fstate);
    unlink(fmem);
    stop_vm(vm, &c, w);
    struct moat_restore_config rc;
    restore_config(&rc, state, mem);
    struct moat_device ov = { "net", "tap=mt1" };
    rc.devices = &ov;
    rc.ndevices = 1;
    /* a plain restore on another TAP: the same MAC, no other */
    ck_assert_msg(moat_restore(&rc, &vm, &e) == 0, "%s", e.msg);
    mac_of(vm, m1);
    ck_assert_str_eq(m1, m0);
    char g0[18];
    guest_mac_of(vm, g0);
    ck_assert_str_eq(g0, "");
    moat_destroy(vm);
    /* a fork's child on its parent's TAP (no override, or the same name)
     * is refused, saying what to give */
    rc.flags = MOAT_F_FORK_CHILD;
    rc.devices = NULL;
    rc.ndevices = 0;
    ck_assert_int_eq(moat_restore(&rc, &vm, &e), -EINVAL);
    ck_assert(e.is_config);
    ck_assert_msg(strstr(e.msg, "cannot share its parent's TAP mt0"), "%s", e.msg);
    ov.options = "tap=mt0";
    rc.devices = &ov;
    rc.ndevices = 1;
    ck_assert_int_eq(moat_restore(&rc, &vm, &e), -EINVAL);
    ck_assert_msg(strstr(e.msg, "cannot share its parent's TAP mt0"), "%s", e.msg);
    ov.options = "tap=mt1";
    /* two fork children: each a MAC of its own, unicast and local; each
     * records its parent's, which its restored guest still sends from
     * (the egress policy lets it) */
    ck_assert_msg(moat_restore(&rc, &vm, &e) == 0, "%s", e.msg);
    mac_of(vm, m1);
    char g[18];
    guest_mac_of(vm, g);
    ck_assert_str_eq(g, "52:54:00:aa:bb:cc");
    moat_destroy(vm);
    ov.options = "tap=mt2";
    ck_assert_msg(moat_restore(&rc, &vm, &e) == 0, "%s", e.msg);
    mac_of(vm, m2);
    moat_destroy(vm);
    ck_assert_str_ne(m1, m0);
    ck_assert_str_ne(m2, m0);
    ck_assert_str_ne(m1, m2);
    ck_assert_msg((strtoul(m1, NULL, 16) & 3) == 2, "%s", m1);
    /* an override's mac= wins over the child's own */
    ov.options = "tap=mt3,mac=52:54:00:00:00:07";
    ck_assert_msg(moat_restore(&rc, &vm, &e) == 0, "%s", e.msg);
    mac_of(vm, m3);
    ck_assert_str_eq(m3, "52:54:00:00:00:07");
    guest_mac_of(vm, g);
    ck_assert_str_eq(g, "52:54:00:aa:bb:cc");
    moat_destroy(vm);
    /* an override naming the user backend drops the recorded TAP: both
     * given is refused, naming the device */
    ov.options = "tap=mt3,user";
    ck_assert_int_eq(moat_restore(&rc, &vm, &e), -EINVAL);
    ck_assert_msg(strstr(e.msg, "one backend"), "%s", e.msg);
    unlink(state);
    unlink(mem);
    rm_tree(dir);       /* what is left: a recorded working set (MEMORY.ws) too */
}
END_TEST

START_TEST(device_by_type_and_options)
{
    char dir[] = "/tmp/moat-devopt-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char img[4200], state[4200], mem[4200], opts[4300];
    snprintf(img, sizeof(img), "%s/disk", dir);
    snprintf(state, sizeof(state), "%s/state", dir);
    snprintf(mem, sizeof(mem), "%s/mem", dir);
    int fd = open(img, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, 1 << 20), 0);
    snprintf(opts, sizeof(opts), "path=%s,id=gen0", img);
    struct moat_device dev = { .type = "blk", .options = opts };
    make_vm_devices = &dev;
    struct capture c;
    int w;
    struct moat_vm *vm = make_vm_in("blk", &c, &w, 1, "blkdur", -1, NULL);
    make_vm_devices = NULL;
    ck_assert_int_eq(moat_start(vm), 0);
    ck_assert_msg(cap_wait_for(&c, "ack 10\n", 30000 * slow()), "no ack 10: %s", c.buf);
    ck_assert_int_eq(moat_snapshot(vm, state, mem), 0);
    moat_stop(vm);
    struct moat_exit ex;
    ck_assert_int_eq(moat_wait(vm, 10000 * slow(), &ex), 0);
    moat_destroy(vm);
    finish_capture(&c, w);
    ck_assert_uint_ge(check_acks(fd, c.buf, false, NULL), 10);
    /* restored from the snapshot's record of the device */
    struct moat_restore_config rc;
    moat_restore_config_init(&rc);
    rc.state_path = state;
    rc.mem_path = mem;
    struct capture c2 = { 0 };
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    c2.rfd = p[0];
    pthread_mutex_init(&c2.lock, NULL);
    rc.console_out = p[1];
    struct moat_error err;
    vm = NULL;
    ck_assert_msg(moat_restore(&rc, &vm, &err) == 0, "moat_restore: %s", err.msg);
    ck_assert_int_eq(pthread_create(&c2.thr, NULL, reader, &c2), 0);
    ck_assert_int_eq(moat_start(vm), 0);
    ck_assert_msg(cap_wait_lines(&c2, 5, 30000 * slow()), "no progress after restore: %s", c2.buf);
    moat_stop(vm);
    ck_assert_int_eq(moat_wait(vm, 10000 * slow(), &ex), 0);
    moat_destroy(vm);
    close(p[1]);
    pthread_join(c2.thr, NULL);
    close(p[0]);
    ck_assert_uint_ge(check_acks(fd, c2.buf, false, NULL), 1);
    /* an override by the device's id takes it */
    struct moat_drive by_id = { .path = img, .id = "gen0" };
    rc.drives = &by_id;
    rc.ndrives = 1;
    rc.console_out = -1;
    ck_assert_msg(moat_restore(&rc, &vm, &err) == 0, "moat_restore by id: %s", err.msg);
    moat_destroy(vm);
    /* overrides given as devices: by id, or the only one of its type */
    rc.drives = NULL;
    rc.ndrives = 0;
    char o1[4300], o2[4300];
    snprintf(o1, sizeof(o1), "path=%s,id=gen0", img);
    snprintf(o2, sizeof(o2), "path=%s", img);
    struct moat_device ov = { "blk", o1 };
    rc.devices = &ov;
    rc.ndevices = 1;
    ck_assert_msg(moat_restore(&rc, &vm, &err) == 0, "device override by id: %s", err.msg);
    moat_destroy(vm);
    ov.options = o2;
    ck_assert_msg(moat_restore(&rc, &vm, &err) == 0, "device override, the only blk: %s", err.msg);
    moat_destroy(vm);
    /* refused, naming the device */
    char o3[4300];
    snprintf(o3, sizeof(o3), "path=%s,id=nope", img);
    struct { const char *type, *opts, *why; } bad[] = {
        { "blk", o3, "(blk nope): the snapshot has no such device" },
        { "vsock", "uds=/tmp/moat-devopt-x.sock", "(vsock): the snapshot has no such device" },
        { "gpu", "vram=1", "unknown type 'gpu'" },
        { "blk", "path=/nonexistent/disk", "/nonexistent/disk" },
        { "blk", "id=gen0", "path=FILE is required" },
        { "blk", "path=/etc/hostname,colour=red", "unknown option 'colour'" },
        { "vsock", "uds=/tmp/moat-devopt-x.sock,cid=9", "unknown option 'cid'" },   /* the CID is the snapshot's */
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        struct moat_device b = { bad[k].type, bad[k].opts };
        rc.devices = &b;
        vm = NULL;
        ck_assert_msg(moat_restore(&rc, &vm, &err) < 0, "override '%s' restored", bad[k].why);
        ck_assert(err.is_config);
        ck_assert_msg(strstr(err.msg, bad[k].why) != NULL, "'%s': %s", bad[k].why, err.msg);
    }
    /* the same drive overridden twice: as a drive and as a device */
    rc.devices = &ov;
    rc.drives = &by_id;
    rc.ndrives = 1;
    ck_assert_int_eq(moat_restore(&rc, &vm, &err), -EINVAL);
    ck_assert_msg(strstr(err.msg, "overridden twice") != NULL, "%s", err.msg);
    close(fd);
    unlink(img);
    unlink(state);
    unlink(mem);
    rm_tree(dir);       /* what is left: a recorded working set (MEMORY.ws) too */
}
END_TEST

/* A file of size bytes whose first byte is first. */
static void make_disk(const char *path, off_t size, char first)
{
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, size), 0);
    ck_assert_int_eq(pwrite(fd, &first, 1, 0), 1);
    close(fd);
}

/* moat_device_info / moat_device_option / moat_get_shape, and a drive's
 * backing file swapped while the guest runs (moat_device_set blk path):
 * the blk guest ("blkswap") sees the new capacity and content after the
 * config-change interrupt, and a snapshot taken afterwards restores the
 * drive on the new file. */
START_TEST(device_info_and_backing_swap)
{
    char dir[] = "/tmp/moat-swap-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char d1[4200], d2[4200], state[4200], mem[4200], opts[4300], buf[4300];
    snprintf(d1, sizeof(d1), "%s/d1", dir);
    snprintf(d2, sizeof(d2), "%s/d2", dir);
    snprintf(state, sizeof(state), "%s/state", dir);
    snprintf(mem, sizeof(mem), "%s/mem", dir);
    make_disk(d1, 1 << 20, 'A');
    make_disk(d2, 2 << 20, 'B');
    snprintf(opts, sizeof(opts), "path=%s,id=d0,ro", d1);
    struct moat_device dev = { .type = "blk", .options = opts };
    make_vm_devices = &dev;
    struct capture c;
    int w;
    struct moat_vm *vm = make_vm_in("blk", &c, &w, 1, "blkswap", -1, NULL);
    make_vm_devices = NULL;
    struct moat_device_info di;
    ck_assert_int_eq(moat_device_info(vm, 0, &di), 0);
    ck_assert_str_eq(di.type, "blk");
    ck_assert_str_eq(di.id, "d0");
    ck_assert_int_eq(moat_device_info(vm, 1, &di), -ENOENT);
    struct moat_error e;
    ck_assert_int_eq(moat_device_option(vm, "blk", "d0", "path", buf, sizeof buf, &e), (long)strlen(d1));
    ck_assert_str_eq(buf, d1);
    ck_assert_int_eq(moat_device_option(vm, "blk", "d0", "ro", buf, sizeof buf, &e), 0);
    ck_assert_int_eq(moat_device_option(vm, "blk", "d0", "overlay", buf, sizeof buf, &e), -ENOENT);
    ck_assert_int_eq(moat_device_option(vm, "blk", "x", "path", buf, sizeof buf, &e), -ENODEV);
    ck_assert_int_eq(moat_device_option(vm, "blk", "d0", "path", buf, 4, &e), (long)strlen(d1));   /* cut */
    ck_assert_uint_eq(strlen(buf), 3);
    unsigned cpus;
    uint64_t bytes;
    ck_assert_int_eq(moat_get_shape(vm, &cpus, &bytes), 0);
    ck_assert_uint_eq(cpus, 1);
    ck_assert_uint_eq(bytes, 64ull << 20);

    ck_assert_int_eq(moat_start(vm), 0);
    ck_assert_msg(cap_wait_for(&c, "swap: cap 2048 byte 65\n", 30000 * slow()), "first file: %s", c.buf);
    ck_assert_int_eq(moat_device_set(vm, "blk", "d0", "path", "/nonexistent/disk", &e), -ENOENT);
    ck_assert_msg(strstr(e.msg, "/nonexistent/disk") != NULL, "%s", e.msg);
    ck_assert_int_eq(moat_device_option(vm, "blk", "d0", "path", buf, sizeof buf, &e), (long)strlen(d1));
    ck_assert_msg(moat_device_set(vm, "blk", "d0", "path", d2, &e) == 0, "%s", e.msg);
    ck_assert_msg(cap_wait_for(&c, "swap: cap 4096 byte 66\n", 30000 * slow()), "after the swap: %s", c.buf);
    ck_assert_int_eq(moat_device_option(vm, "blk", "d0", "path", buf, sizeof buf, &e), (long)strlen(d2));
    ck_assert_str_eq(buf, d2);
    ck_assert_int_eq(moat_snapshot(vm, state, mem), 0);
    stop_vm(vm, &c, w);
    struct moat_restore_config rc;
    restore_config(&rc, state, mem);
    vm = NULL;
    ck_assert_msg(moat_restore(&rc, &vm, &e) == 0, "moat_restore: %s", e.msg);
    ck_assert_int_eq(moat_device_option(vm, "blk", "d0", "path", buf, sizeof buf, &e), (long)strlen(d2));
    ck_assert_str_eq(buf, d2);
    ck_assert_int_eq(moat_device_option(vm, "blk", "d0", "ro", buf, sizeof buf, &e), 0);
    ck_assert_int_eq(moat_get_shape(vm, &cpus, &bytes), 0);
    ck_assert_uint_eq(bytes, 64ull << 20);
    moat_destroy(vm);
    unlink(d1);
    unlink(d2);
    unlink(state);
    unlink(mem);
    rmdir(dir);
}
END_TEST

/* Allocated disk space of a file, bytes. */
static long long disk_bytes(const char *path)
{
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    return (long long)st.st_blocks * 512;
}

static void copy_file(const char *from, const char *to)
{
    static uint8_t b[1 << 20];
    FILE *i = fopen(from, "rb"), *o = fopen(to, "wb");
    ck_assert(i && o);
    size_t n;
    while ((n = fread(b, 1, sizeof(b), i)) > 0)
        ck_assert_uint_eq(fwrite(b, 1, n, o), n);
    fclose(i);
    fclose(o);
}

/* moat_restore(rc) in a child where openat2 fails with ENOSYS (a kernel
 * before 5.6): the chain's files are then opened one O_NOFOLLOW component
 * at a time. Returns the child's exit: 0 when the restore returned want
 * (and its message holds has, if given), 1-4 otherwise. */
static int restore_without_openat2(const struct moat_restore_config *rc, int want, const char *has)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
        if (!ctx || seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(openat2), 0) < 0 ||
            seccomp_load(ctx) < 0)
            _exit(1);
        if (syscall(SYS_openat2, AT_FDCWD, "/", NULL, 0) != -1 || errno != ENOSYS)
            _exit(2);
        struct moat_vm *vm = NULL;
        struct moat_error err;
        int r = moat_restore(rc, &vm, &err);
        if (r != want) {
            fprintf(stderr, "without openat2: %d (want %d): %s\n", r, want, r ? err.msg : "");
            _exit(3);
        }
        if (has && !strstr(err.msg, has)) {
            fprintf(stderr, "without openat2: '%s' lacks '%s'\n", err.msg, has);
            _exit(4);
        }
        if (vm)
            moat_destroy(vm);
        _exit(0);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st));
    return WEXITSTATUS(st);
}

/* Diff snapshots of the counter: a full snapshot, two diffs of a few more
 * ticks each; the chain restored from the top diff continues the count
 * exactly (register and memory counts agree at the end). The diffs are
 * small on disk. Then the chain's corruptions: a parent replaced (checksum
 * mismatch), a parent missing, a diff memory file one page short — each a
 * clean configuration error. */
START_TEST(diff_snapshot_chain)
{
    char dir[] = "/tmp/moat-diff-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    struct snapfiles f[3];
    for (int k = 0; k < 3; k++)
        snap_names(&f[k], dir, k);
    int in[2];
    ck_assert_int_eq(pipe2(in, O_CLOEXEC), 0);
    struct capture c;
    int w;
    /* Without tracking: no diffs. */
    struct moat_vm *vm = make_vm_in("counter", &c, &w, 1, "spin=20000", in[0], NULL);
    ck_assert_int_eq(moat_snapshot_diff(vm, f[1].state, f[1].mem), -ENOTSUP);
    moat_destroy(vm);
    finish_capture(&c, w);

    make_vm_flags = MOAT_F_DIRTY_LOG;
    vm = make_vm_in("counter", &c, &w, 1, "spin=20000", in[0], NULL);
    make_vm_flags = 0;
    ck_assert_int_eq(moat_snapshot_diff(vm, f[1].state, f[1].mem), -ENODATA);   /* nothing to diff against */
    ck_assert_int_eq(moat_start(vm), 0);
    unsigned lines = 3;
    for (int k = 0; k < 3; k++) {
        ck_assert(cap_wait_lines(&c, lines, 20000 * slow()));
        ck_assert_int_eq(moat_pause(vm), 0);
        cap_drain(&c);
        if (k == 0)
            ck_assert_int_eq(moat_snapshot(vm, f[0].state, f[0].mem), 0);
        else
            ck_assert_int_eq(moat_snapshot_diff(vm, f[k].state, f[k].mem), 0);
        if (k == 1)   /* a diff may not overwrite its own parent */
            ck_assert_int_eq(moat_snapshot_diff(vm, f[1].state, f[2].mem), -EEXIST);
        if (k < 2)
            ck_assert_int_eq(moat_resume(vm), 0);
        lines = count_lines(&c) + 2;
    }
    char *text = cap_copy(&c);
    moat_destroy(vm);
    finish_capture(&c, w);
    long long full = disk_bytes(f[0].mem), d1 = disk_bytes(f[1].mem), d2 = disk_bytes(f[2].mem);
    printf("diff_snapshot_chain: memory on disk: full %lld KiB, diff1 %lld KiB, diff2 %lld KiB\n",
           full >> 10, d1 >> 10, d2 >> 10);
    ck_assert_msg(d1 < 256 * 1024 && d2 < 256 * 1024 && d2 < full,
                  "diffs of a few ticks take %lld / %lld bytes (full %lld)", d1, d2, full);

    /* Restore the top: the chain is followed down to the full snapshot. */
    vm = restore_vm(&f[2], &c, &w, in[0]);
    ck_assert_int_eq(moat_start(vm), 0);
    ck_assert(cap_wait_lines(&c, 2, 20000 * slow()));
    ck_assert_int_eq(write(in[1], "q", 1), 1);
    struct moat_exit ex;
    ck_assert_int_eq(moat_wait(vm, 20000 * slow(), &ex), 0);
    ck_assert_int_eq(ex.reason, MOAT_EXIT_RESET);
    ck_assert_int_eq(ex.status, 0);            /* register and memory counts agree */
    moat_destroy(vm);
    finish_capture(&c, w);
    text = cat(text, c.buf);
    ck_assert_uint_ge(check_sequence(text), 9);
    free(text);

    struct moat_restore_config rc;
    moat_restore_config_init(&rc);
    rc.state_path = f[2].state;
    rc.mem_path = f[2].mem;
    struct moat_error err;
    vm = NULL;
    /* the parent replaced by another valid snapshot */
    char saved[300], shortmem[300];
    snprintf(saved, sizeof(saved), "%s/saved-state1", dir);
    ck_assert_int_eq(rename(f[1].state, saved), 0);
    copy_file(f[0].state, f[1].state);
    ck_assert_int_eq(moat_restore(&rc, &vm, &err), -EINVAL);
    ck_assert(err.is_config);
    ck_assert_msg(strstr(err.msg, "checksum"), "%s", err.msg);
    /* the parent missing */
    ck_assert_int_eq(unlink(f[1].state), 0);
    ck_assert_int_eq(moat_restore(&rc, &vm, &err), -ENOENT);
    ck_assert(err.is_config);
    ck_assert_msg(strstr(err.msg, "parent"), "%s", err.msg);
    ck_assert_int_eq(rename(saved, f[1].state), 0);
    /* a diff memory file one page short (the top's, then the middle's) */
    snprintf(shortmem, sizeof(shortmem), "%s/short-memory", dir);
    copy_file(f[2].mem, shortmem);
    ck_assert_int_eq(truncate(shortmem, 64ll * 1024 * 1024 - 4096), 0);
    rc.mem_path = shortmem;
    ck_assert_int_eq(moat_restore(&rc, &vm, &err), -EINVAL);
    ck_assert(err.is_config);
    ck_assert_msg(strstr(err.msg, "diff memory file"), "%s", err.msg);
    rc.mem_path = f[2].mem;
    ck_assert_int_eq(rename(f[1].mem, saved), 0);
    ck_assert_int_eq(link(shortmem, f[1].mem), 0);
    ck_assert_int_eq(moat_restore(&rc, &vm, &err), -EINVAL);
    ck_assert_msg(strstr(err.msg, "diff memory file"), "%s", err.msg);
    ck_assert_int_eq(unlink(f[1].mem), 0);
    ck_assert_int_eq(rename(saved, f[1].mem), 0);
    ck_assert_int_eq(moat_restore(&rc, &vm, &err), 0);       /* repaired: restores again */
    moat_destroy(vm);

    /* State files name their parents, and may be forged: every file of the
     * chain must lie beneath the snapshot root (default: the directory of
     * the state file restored), reached without a symlink. */
    char other[] = "/tmp/moat-diffo-XXXXXX", forged[300], victim[300], real1[300];
    ck_assert_ptr_nonnull(mkdtemp(other));
    struct snapfiles o;
    snap_names(&o, other, 2);
    /* (1) the top diff moved to another directory: its parents are outside it */
    ck_assert_int_eq(link(f[2].state, o.state), 0);
    ck_assert_int_eq(link(f[2].mem, o.mem), 0);
    rc.state_path = o.state;
    rc.mem_path = o.mem;
    vm = NULL;
    ck_assert_int_eq(moat_restore(&rc, &vm, &err), -EACCES);
    ck_assert_ptr_null(vm);
    ck_assert(err.is_config);
    ck_assert_msg(strstr(err.msg, "parent state file") && strstr(err.msg, "outside the snapshot root"), "%s",
                  err.msg);
    rc.snapshot_root = "/tmp";                                /* a root holding the whole chain */
    ck_assert_int_eq(moat_restore(&rc, &vm, &err), 0);
    moat_destroy(vm);
    vm = NULL;
    rc.snapshot_root = NULL;
    /* (2) a forged state file (resealed) naming another file of the same
     * size as its base memory: "another sandbox's memory" */
    ck_assert_int_eq((int)(strlen(other) + 1 + 6), (int)strlen(f[0].mem));
    snprintf(victim, sizeof(victim), "%s/victim", other);
    ck_assert_int_eq(link(f[0].mem, victim), 0);
    {
        int fd = open(f[1].state, O_RDONLY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        struct stat fst;
        ck_assert_int_eq(fstat(fd, &fst), 0);
        uint8_t *sb = malloc((size_t)fst.st_size);
        ck_assert_int_eq(read(fd, sb, (size_t)fst.st_size), fst.st_size);
        close(fd);
        uint8_t *at = memmem(sb, (size_t)fst.st_size, f[0].mem, strlen(f[0].mem));
        ck_assert_ptr_nonnull(at);
        memcpy(at, victim, strlen(victim));
        state_reseal(sb, (size_t)fst.st_size);
        snprintf(forged, sizeof(forged), "%s/forged-state", dir);
        fd = open(forged, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, sb, (size_t)fst.st_size), fst.st_size);
        close(fd);
        free(sb);
    }
    rc.state_path = forged;
    rc.mem_path = f[1].mem;
    ck_assert_int_eq(moat_restore(&rc, &vm, &err), -EACCES);
    ck_assert_ptr_null(vm);
    ck_assert_msg(strstr(err.msg, "memory file") && strstr(err.msg, "victim") &&
                  strstr(err.msg, "outside the snapshot root"), "%s", err.msg);
    /* (3) a parent reached through a symlink inside the root */
    snprintf(real1, sizeof(real1), "%s/real-state1", dir);
    ck_assert_int_eq(rename(f[1].state, real1), 0);
    ck_assert_int_eq(symlink("real-state1", f[1].state), 0);
    rc.state_path = f[2].state;
    rc.mem_path = f[2].mem;
    ck_assert_int_eq(moat_restore(&rc, &vm, &err), -EACCES);
    ck_assert_ptr_null(vm);
    ck_assert_msg(strstr(err.msg, "symlink"), "%s", err.msg);
    ck_assert_int_eq(restore_without_openat2(&rc, -EACCES, "symlink"), 0);
    ck_assert_int_eq(unlink(f[1].state), 0);
    ck_assert_int_eq(rename(real1, f[1].state), 0);
    ck_assert_int_eq(moat_restore(&rc, &vm, &err), 0);       /* the real chain restores */
    moat_destroy(vm);
    vm = NULL;
    ck_assert_int_eq(restore_without_openat2(&rc, 0, NULL), 0);   /* ... also walking components */
    /* a FIFO in a parent's place: refused, not waited on */
    ck_assert_int_eq(rename(f[1].mem, saved), 0);
    ck_assert_int_eq(mkfifo(f[1].mem, 0600), 0);
    ck_assert_int_eq(moat_restore(&rc, &vm, &err), -EINVAL);
    ck_assert_ptr_null(vm);
    ck_assert_msg(strstr(err.msg, "not a regular file"), "%s", err.msg);
    ck_assert_int_eq(restore_without_openat2(&rc, -EINVAL, "not a regular file"), 0);
    ck_assert_int_eq(unlink(f[1].mem), 0);
    ck_assert_int_eq(rename(saved, f[1].mem), 0);
    rc.state_path = o.state;                                  /* and the parents outside are still refused */
    rc.mem_path = o.mem;
    ck_assert_int_eq(restore_without_openat2(&rc, -EACCES, "outside the snapshot root"), 0);
    rm_tree(other);

    /* Any restored VM tracks writes: a snapshot of an untracked VM,
     * restored, runs on and takes a diff; that diff restores and the
     * guest's register and memory counts still agree. */
    char dir2[] = "/tmp/moat-diff2-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir2));
    free(counter_snapshot(dir2));                            /* untracked VM: state1 */
    struct snapfiles u, ud;
    snap_names(&u, dir2, 1);
    snap_names(&ud, dir2, 2);
    vm = restore_vm(&u, &c, &w, in[0]);
    ck_assert_int_eq(moat_start(vm), 0);
    ck_assert(cap_wait_lines(&c, 2, 20000 * slow()));
    ck_assert_int_eq(moat_snapshot_diff(vm, ud.state, ud.mem), 0);   /* pauses and resumes */
    moat_stop(vm);
    ck_assert_int_eq(moat_wait(vm, 20000 * slow(), &ex), 0);
    moat_destroy(vm);
    finish_capture(&c, w);
    vm = restore_vm(&ud, &c, &w, in[0]);
    ck_assert_int_eq(moat_start(vm), 0);
    ck_assert(cap_wait_lines(&c, 1, 20000 * slow()));
    ck_assert_int_eq(write(in[1], "q", 1), 1);
    ck_assert_int_eq(moat_wait(vm, 20000 * slow(), &ex), 0);
    ck_assert_int_eq(ex.status, 0);
    moat_destroy(vm);
    finish_capture(&c, w);
    close(in[0]);
    close(in[1]);
    rm_tree(dir);
    rm_tree(dir2);
}
END_TEST

/* A drive's device writes into guest memory (status bytes, the used ring)
 * after the full snapshot: the diff must include those pages (KVM's dirty
 * log does not see them). Restored from the diff onto the same image, the
 * guest's driver and the device agree and the record numbering continues
 * without a gap. */
START_TEST(diff_snapshot_with_drive)
{
    char dir[] = "/tmp/moat-diffblk-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char img[300];
    snprintf(img, sizeof(img), "%s/disk", dir);
    struct snapfiles base, diff;
    snap_names(&base, dir, 0);
    snap_names(&diff, dir, 1);
    int fd = open(img, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, 1 << 20), 0);
    struct capture c;
    int w;
    struct moat_drive d = { .path = img };
    make_vm_flags = MOAT_F_DIRTY_LOG;
    struct moat_vm *vm = make_vm_in("blk", &c, &w, 1, "blkdur", -1, &d);
    make_vm_flags = 0;
    ck_assert_int_eq(moat_start(vm), 0);
    ck_assert_msg(cap_wait_for(&c, "ack 5\n", 30000 * slow()), "no ack 5: %s", c.buf);
    ck_assert_int_eq(moat_snapshot(vm, base.state, base.mem), 0);
    ck_assert_msg(cap_wait_for(&c, "ack 15\n", 30000 * slow()), "no ack 15: %s", c.buf);
    ck_assert_int_eq(moat_pause(vm), 0);
    cap_drain(&c);
    unsigned at = max_ack(c.buf);
    ck_assert_int_eq(moat_snapshot_diff(vm, diff.state, diff.mem), 0);
    moat_stop(vm);
    struct moat_exit ex;
    ck_assert_int_eq(moat_wait(vm, 10000 * slow(), &ex), 0);
    moat_destroy(vm);
    finish_capture(&c, w);

    vm = restore_vm(&diff, &c, &w, -1);
    ck_assert_int_eq(moat_start(vm), 0);
    ck_assert_msg(cap_wait_lines(&c, 12, 30000 * slow()), "no progress after restoring the diff: %s", c.buf);
    moat_stop(vm);
    ck_assert_int_eq(moat_wait(vm, 10000 * slow(), &ex), 0);
    moat_destroy(vm);
    finish_capture(&c, w);
    unsigned first = 0;
    ck_assert_uint_ge(check_acks(fd, c.buf, true, &first), 10);
    ck_assert_msg(first >= at && first <= at + 2, "restored numbering starts at %u, diff taken at ack %u",
                  first, at);
    close(fd);
    ck_assert_int_eq(rm_tree(dir), 0);
}
END_TEST

/* No KVM needed: configuration errors come before /dev/kvm is opened. */
/* Is record n (the blkdur guest's sector n) in the moat-format overlay file
 * itself? (docs/disk-overlay.md: data_off at header offset 48, block i at
 * data_off + i * 4096; a block never written is a hole, read as zeroes.) */
static bool ovl_has_record(const char *ovl, unsigned n)
{
    int fd = open(ovl, O_RDONLY | O_CLOEXEC);
    ck_assert_msg(fd >= 0, "%s", ovl);
    uint8_t h[64], sec[16];
    ck_assert_int_eq(pread(fd, h, sizeof(h), 0), (ssize_t)sizeof(h));
    ck_assert_msg(!memcmp(h, "MOATCOW1", 8), "%s is not a moat overlay", ovl);
    uint64_t data_off, got;
    memcpy(&data_off, h + 48, 8);
    ck_assert_int_eq(pread(fd, sec, sizeof(sec), (off_t)(data_off + (uint64_t)n * 512)), (ssize_t)sizeof(sec));
    close(fd);
    memcpy(&got, sec + 8, 8);
    return !memcmp(sec, "MOATREC", 8) && got == n;
}

/* Every complete "ack n" of text has its record in overlay ovl; how many. */
static unsigned acks_in_overlay(const char *ovl, const char *text)
{
    unsigned count = 0;
    for (const char *q = text; (q = strstr(q, "ack ")); q += 4) {
        char *end;
        unsigned n = (unsigned)strtoul(q + 4, &end, 10);
        if (end == q + 4 || *end != '\n')
            continue;
        ck_assert_msg(ovl_has_record(ovl, n), "record %u acknowledged but not in %s", n, ovl);
        count++;
    }
    return count;
}

/* Lowest complete "ack n" of text (0: none). */
static unsigned min_ack(const char *text)
{
    unsigned m = 0;
    for (const char *q = text; (q = strstr(q, "ack ")); q += 4) {
        char *end;
        unsigned n = (unsigned)strtoul(q + 4, &end, 10);
        if (end != q + 4 && *end == '\n' && (m == 0 || n < m))
            m = n;
    }
    return m;
}

/* moat_fork of a VM on base + overlay: the blk guest's durability writer
 * (record n written to sector n, flushed, then "ack n") is forked into two
 * children while it writes. Each child gets its own clone of the parent's
 * overlay at the snapshot point and goes on from there; the parent goes on
 * too. Child 1 is stopped early, child 0 runs on: records only child 0
 * (or the parent) wrote later are not in child 1's overlay; every VM's
 * acknowledged records are in its own overlay; the base stays all zeroes.
 * Also moat_clone_overlay of a running VM, and the refusals. */
START_TEST(fork_with_overlays)
{
    char dir[] = "/tmp/moat-fork-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char base[256], povl[256], state[256], mem[256], fmt[256], kovl[2][256], pin[256];
    snprintf(base, sizeof(base), "%s/base", dir);
    snprintf(povl, sizeof(povl), "%s/parent.ovl", dir);
    snprintf(state, sizeof(state), "%s/state", dir);
    snprintf(mem, sizeof(mem), "%s/memory", dir);
    snprintf(fmt, sizeof(fmt), "%s/child%%u-disk%%u.ovl", dir);
    snprintf(pin, sizeof(pin), "%s/pin.ovl", dir);
    for (int k = 0; k < 2; k++)
        snprintf(kovl[k], sizeof(kovl[k]), "%s/child%d-disk0.ovl", dir, k);
    int bfd = open(base, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    ck_assert_int_ge(bfd, 0);
    ck_assert_int_eq(ftruncate(bfd, 1 << 20), 0);   /* 2048 sectors of zeroes */
    struct moat_error err;
    struct moat_fork_config fc;
    moat_fork_config_init(&fc);
    fc.state_path = state;
    fc.mem_path = mem;
    fc.overlay_fmt = fmt;
    struct moat_vm *kids[2] = { NULL, NULL };

    /* A writable drive without an overlay cannot be forked. */
    struct capture c0;
    int w0;
    struct moat_drive d = { .path = base };
    struct moat_vm *plain = make_vm_in("blk", &c0, &w0, 1, "blkdur", -1, &d);
    ck_assert_int_eq(moat_fork(plain, &fc, kids, 2, &err), -EINVAL);
    ck_assert(err.is_config);
    ck_assert_int_eq(moat_clone_overlay(plain, 0, pin), -ENOENT);
    ck_assert_int_eq(access(state, F_OK), -1);
    moat_destroy(plain);
    finish_capture(&c0, w0);

    const char *ovls[1] = { povl };
    make_vm_overlays = ovls;
    struct capture c;
    int w;
    struct moat_vm *vm = make_vm_in("blk", &c, &w, 1, "blkdur", -1, &d);
    make_vm_overlays = NULL;
    ck_assert_int_eq(moat_start(vm), 0);
    ck_assert_msg(cap_wait_for(&c, "ack 10\n", 30000 * slow()), "no ack 10: %s", c.buf);

    /* A pin of the running VM's disk; bad drive numbers. */
    ck_assert_int_eq(moat_clone_overlay(vm, 0, pin), 0);
    ck_assert_int_eq(moat_clone_overlay(vm, 0, pin), -EEXIST);
    ck_assert_int_eq(moat_clone_overlay(vm, 1, pin), -ERANGE);
    ck_assert(ovl_has_record(pin, 10));

    /* Bad templates are configuration errors, and nothing is written. */
    fc.overlay_fmt = "/tmp/x%s%u";
    ck_assert_int_eq(moat_fork(vm, &fc, kids, 2, &err), -EINVAL);
    ck_assert(err.is_config);
    fc.overlay_fmt = "/tmp/x%u";
    ck_assert_int_eq(moat_fork(vm, &fc, kids, 2, &err), -EINVAL);
    ck_assert_int_eq(access(state, F_OK), -1);
    fc.overlay_fmt = fmt;

    int kp[2][2], outs[2];
    struct capture kc[2];
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(pipe2(kp[k], O_CLOEXEC), 0);
        memset(&kc[k], 0, sizeof(kc[k]));
        kc[k].rfd = kp[k][0];
        pthread_mutex_init(&kc[k].lock, NULL);
        ck_assert_int_eq(pthread_create(&kc[k].thr, NULL, reader, &kc[k]), 0);
        outs[k] = kp[k][1];
    }
    fc.console_out = outs;
    char *t0 = cap_copy(&c);
    unsigned before = max_ack(t0);
    free(t0);
    ck_assert_msg(moat_fork(vm, &fc, kids, 2, &err) == 0, "moat_fork: %s", err.msg);
    ck_assert_ptr_nonnull(kids[0]);
    ck_assert_ptr_nonnull(kids[1]);
    /* After the fork returned: an upper bound of the snapshot point. */
    char *t1 = cap_copy(&c);
    unsigned after = max_ack(t1);
    free(t1);
    /* The parent goes on. */
    ck_assert_msg(cap_wait_lines(&c, count_lines(&c) + 5, 30000 * slow()),
                  "the parent stopped after the fork");

    ck_assert_int_eq(moat_start(kids[1]), 0);
    ck_assert_int_eq(moat_start(kids[0]), 0);
    ck_assert_msg(cap_wait_lines(&kc[1], 2, 30000 * slow()), "child 1: %s", kc[1].buf);
    struct moat_exit ex;
    moat_stop(kids[1]);
    ck_assert_int_eq(moat_wait(kids[1], 10000 * slow(), &ex), 0);
    moat_destroy(kids[1]);
    ck_assert_msg(cap_wait_lines(&kc[0], 14, 30000 * slow()), "child 0: %s", kc[0].buf);
    moat_stop(kids[0]);
    ck_assert_int_eq(moat_wait(kids[0], 10000 * slow(), &ex), 0);
    moat_destroy(kids[0]);
    moat_stop(vm);
    ck_assert_int_eq(moat_wait(vm, 10000 * slow(), &ex), 0);
    moat_destroy(vm);
    finish_capture(&c, w);
    for (int k = 0; k < 2; k++)
        finish_capture(&kc[k], kp[k][1]);

    /* Each VM's acknowledged records are in its own overlay. */
    /* (A child's first line may end the one cut by the snapshot.) */
    ck_assert_uint_ge(acks_in_overlay(povl, c.buf), 15);
    ck_assert_uint_ge(acks_in_overlay(kovl[0], kc[0].buf), 12);
    ck_assert_uint_ge(acks_in_overlay(kovl[1], kc[1].buf), 1);
    /* The children start from the snapshot point (the line in progress at
     * the snapshot may be cut). */
    for (int k = 0; k < 2; k++) {
        unsigned first = min_ack(kc[k].buf);
        ck_assert_msg(first >= before + 1 && first <= after + 2,
                      "child %d starts at ack %u, the fork was between ack %u and %u", k, first, before, after);
    }
    /* They diverged: what child 0 and the parent wrote later is not in
     * child 1's disk, which stopped earlier. */
    unsigned k1 = max_ack(kc[1].buf), k0 = max_ack(kc[0].buf), pm = max_ack(c.buf);
    ck_assert_msg(k0 > k1 + 2, "child 0 at %u, child 1 at %u", k0, k1);
    ck_assert(ovl_has_record(kovl[0], k0));
    ck_assert(!ovl_has_record(kovl[1], k0));
    if (pm > k1 + 2)
        ck_assert(!ovl_has_record(kovl[1], pm));
    /* The pin taken before the fork has none of the later records. */
    ck_assert(!ovl_has_record(pin, k0));
    /* The base was never written. */
    static uint8_t z[1 << 20];
    ck_assert_int_eq(pread(bfd, z, sizeof(z), 0), (ssize_t)sizeof(z));
    for (size_t i = 0; i < sizeof(z); i++)
        ck_assert_msg(z[i] == 0, "base byte %zu written", i);
    close(bfd);
    unlink(base);
    unlink(povl);
    unlink(pin);
    unlink(kovl[0]);
    unlink(kovl[1]);
    unlink(state);
    /* The children that ran recorded their working set next to the memory
     * file (docs/snapshot-format.md, working-set prefetch). */
    char ws[300];
    snprintf(ws, sizeof(ws), "%s.ws", mem);
    ck_assert_msg(unlink(ws) == 0, "%s: %s", ws, strerror(errno));
    unlink(mem);
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

START_TEST(config_errors)
{
    struct moat_config cfg;
    struct moat_vm *vm = (struct moat_vm *)0x1;
    struct moat_error err;
    moat_config_init(&cfg);
    ck_assert_int_eq(cfg.size, sizeof(cfg));
    ck_assert_int_eq(moat_create(&cfg, &vm, &err), -EINVAL);      /* no kernel */
    ck_assert(err.is_config);
    cfg.kernel = "/nonexistent/kernel";
    ck_assert_int_eq(moat_create(&cfg, &vm, &err), -ENOENT);
    ck_assert(err.is_config);
    ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent/kernel"));
    cfg.kernel = "/etc/hostname";
    cfg.mem_mib = 0;
    ck_assert_int_eq(moat_create(&cfg, &vm, &err), -EINVAL);
    cfg.mem_mib = 64;
    cfg.cpus = 65;
    ck_assert_int_eq(moat_create(&cfg, &vm, &err), -EINVAL);
    cfg.cpus = 1;
    cfg.kernel = "/etc";
    ck_assert_int_eq(moat_create(&cfg, &vm, &err), -EISDIR);
    ck_assert_ptr_eq(vm, (struct moat_vm *)0x1);                  /* untouched on error */
    /* two drives with one id (ids name drives in snapshots), also a
     * serial that is another drive's default name */
    cfg.kernel = "/etc/hostname";
    char dfile[] = "/tmp/moat-api-drive-XXXXXX";   /* made here: the nested L1 has no /etc/hostname */
    int dfd = mkstemp(dfile);
    ck_assert_int_ge(dfd, 0);
    close(dfd);
    char dopt[64];
    snprintf(dopt, sizeof dopt, "path=%s,ro", dfile);
    struct moat_drive dup[2] = { { .path = dfile, .id = "data", .read_only = 1 },
                                 { .path = dfile, .id = "data", .read_only = 1 } };
    cfg.drives = dup;
    cfg.ndrives = 2;
    ck_assert_int_eq(moat_create(&cfg, &vm, &err), -EINVAL);
    ck_assert(err.is_config);
    ck_assert_msg(strstr(err.msg, "id data is drive 0's too") != NULL, "%s", err.msg);
    dup[0].id = NULL;
    dup[1].id = "vda";
    ck_assert_int_eq(moat_create(&cfg, &vm, &err), -EINVAL);
    ck_assert_msg(strstr(err.msg, "id vda is drive 0's too") != NULL, "%s", err.msg);
    cfg.drives = NULL;
    cfg.ndrives = 0;
    ck_assert_ptr_eq(vm, (struct moat_vm *)0x1);
    /* devices by type and options: an unknown type, bad options */
    struct { const char *type, *opts, *why; int r; } devs[] = {
        { "gpu", "vram=1", "unknown type 'gpu'", -EINVAL },
        { "blk", "path=/nonexistent/disk,bw=5", "bw=5: SIZE/REFILL_MS", -EINVAL },
        { "blk", "path=/nonexistent/disk,ops=1/0", "ops=1/0: SIZE/REFILL_MS", -EINVAL },
        { "net", NULL, "a backend is required: tap=NAME or user", -EINVAL },
        { "net", "tap=t0,mac=01:00:5e:00:00:01", "not a unicast MAC address", -EINVAL },
        { "net", "tap=t0,mtu=10", "mtu must be 68 .. 65535", -EINVAL },
        { "net", "tap=a/b", "tap=NAME: 1 to 15 bytes", -EINVAL },
        { "net", "tap=t0,bridge=br0", "unknown option 'bridge'", -EINVAL },
        { NULL, NULL, "unknown type '(none)'", -EINVAL },
        { "blk", NULL, "path=FILE is required", -EINVAL },
        { "blk", "path=/etc/hostname,ro,colour=red", "unknown option 'colour'", -EINVAL },
        { "blk", "path=/etc/hostname,ro=1", "ro and direct take no value", -EINVAL },
        { "blk", "path=/nonexistent/disk,ro", "/nonexistent/disk", -ENOENT },
        { "blk", "path=/etc/hostname,ro,id=012345678901234567890", "id must be 1 to 20 bytes", -EINVAL },
        { "blk", "path=/etc/hostname,,ro", "an empty option", -EINVAL },
        { "vsock", "cid=7", "uds=PATH is required", -EINVAL },
        { "vsock", "uds=/tmp/x.sock,cid=2", "cid must be 3", -EINVAL },
        { "vsock", "uds=/tmp/x.sock,cid=3x", "cid must be 3", -EINVAL },
        /* 100 bytes: fits a snapshot record (107) but not vsock's own limit */
        { "vsock", "uds=/tmp/012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789.sock", "uds path longer than 96 bytes", -ENAMETOOLONG },
    };
    for (size_t k = 0; k < sizeof devs / sizeof devs[0]; k++) {
        struct moat_device md = { devs[k].type, devs[k].opts };
        cfg.devices = &md;
        cfg.ndevices = 1;
        ck_assert_int_eq(moat_create(&cfg, &vm, &err), devs[k].r);
        ck_assert(err.is_config);
        ck_assert_msg(strstr(err.msg, devs[k].why) != NULL, "'%s': %s", devs[k].why, err.msg);
    }
    /* a second vsock device; more devices than slots */
    cfg.vsock_uds = "/tmp/moat-api-two.sock";
    struct moat_device vs2 = { "vsock", "uds=/tmp/moat-api-two-b.sock" };
    cfg.devices = &vs2;
    cfg.ndevices = 1;
    ck_assert_int_eq(moat_create(&cfg, &vm, &err), -EINVAL);
    ck_assert_msg(strstr(err.msg, "more than one vsock device") != NULL, "%s", err.msg);
    cfg.vsock_uds = NULL;
    struct moat_device many[20];
    for (size_t k = 0; k < 20; k++)
        many[k] = (struct moat_device){ "blk", dopt };
    cfg.devices = many;
    cfg.ndevices = 20;
    ck_assert_int_eq(moat_create(&cfg, &vm, &err), -EINVAL);
    ck_assert_msg(strstr(err.msg, "too many devices") != NULL, "%s", err.msg);
    unlink(dfile);
    cfg.devices = NULL;
    cfg.ndevices = 0;
    ck_assert_ptr_eq(vm, (struct moat_vm *)0x1);
    ck_assert_int_eq(moat_create(NULL, &vm, NULL), -EINVAL);
    moat_destroy(NULL);
    ck_assert_int_eq(moat_stop(NULL), -EINVAL);
    ck_assert_str_eq(moat_version(), MOAT_VERSION);
    struct moat_host_info hi = { .size = sizeof(hi) };
    ck_assert_int_eq(moat_host_info(&hi), 0);
    ck_assert(hi.kvm_available || hi.kvm_errno != 0);
    ck_assert_int_eq(hi.kind == MOAT_HOST_NONE, !hi.kvm_available);
    ck_assert(hi.reason[0] != 0);
    char why[256] = "";
    int kind = moat_host_kind(why, sizeof why);
    ck_assert_msg(kind == hi.kind, "moat_host_kind %d (%s) after moat_host_info %d (%s)", kind, why, hi.kind,
                  hi.reason);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("api");
    TCase *cfg = tcase_create("config");
    tcase_add_test(cfg, config_errors);
    suite_add_tcase(s, cfg);
    /* The host probe: any KVM runs these small guests, PVM included. */
    struct moat_host_info hi = { .size = sizeof(hi) };
    moat_host_info(&hi);
    if (hi.kind != MOAT_HOST_NONE) {
        TCase *kvm = tcase_create("kvm");
        tcase_set_timeout(kvm, 120 * slow());
        tcase_add_test(kvm, two_vms_in_one_process);
        tcase_add_test(kvm, console_limit_caps_output);
        tcase_add_test(kvm, stalled_console_reader_blocks_nothing);
        tcase_add_test(kvm, stop_a_spinning_guest_and_exit_fd);
        tcase_add_test(kvm, destroy_without_start);
        tcase_add_test(kvm, linux_cmdline_init_args);
        tcase_add_test(kvm, file_transfer_without_vsock);
        tcase_add_test(kvm, send_ctrl_alt_del);
        tcase_add_test(kvm, i8042_state_across_snapshot);
        tcase_add_test(kvm, pause_resume_continues_exactly);
        tcase_add_test(kvm, snapshot_restore_chain_three_deep);
        tcase_add_test(kvm, twenty_forks);
        tcase_add_test(kvm, bad_snapshot_files);
        tcase_add_test(kvm, pause_resume_with_disk_io);
        tcase_add_test(kvm, seccomp_per_vm);
        tcase_add_test(kvm, snapshot_restore_with_drive);
        tcase_add_test(kvm, device_by_type_and_options);
        tcase_add_test(kvm, device_info_and_backing_swap);
        tcase_add_test(kvm, net_device_identity);
        tcase_add_test(kvm, diff_snapshot_chain);
        tcase_add_test(kvm, diff_snapshot_with_drive);
        tcase_add_test(kvm, fork_with_overlays);
        suite_add_tcase(s, kvm);
    } else {
        printf("SKIPPED: api: %s — 16 KVM tests not run\n", hi.reason);
        if (require_kvm()) {
            printf("FAILED: api: MOAT_REQUIRE_KVM is set\n");
            return EXIT_FAILURE;
        }
    }
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
