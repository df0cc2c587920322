/* The VM: creation from a moat_config, devices, threads, stop and wait.
 * This file implements the public API in include/moat.h (moat_create
 * itself is vmm/snapshot/snapvm.c's: vm_create with the snapshot record). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "devices/blk/virtio_blk.h"
#include "devices/vsock/vsock.h"
#include "vmm/base/clock.h"
#include "vmm/core/devtab.h"
#include "vmm/base/layout.h"
#include "vmm/base/log.h"
#include "vmm/base/scfilter.h"
#include "vmm/core/vm.h"
#include "vmm/core/vmhooks.h"

#define KERNEL_MAX_BYTES (512ull << 20)
#define INITRD_MAX_BYTES (2048ull << 20)
#define MEM_MIN_MIB 2
#define MEM_MAX_MIB (1u << 20)  /* 1 TiB */
#define DEFAULT_KICK_SIGNAL (SIGRTMIN + 7)
#define TSS_ADDR 0xfffbd000ul
#define IDENTITY_MAP_ADDR 0xfffbc000ull

/* The default Linux command line; reboot=k makes every VMM exit on reboot. */
static const char default_linux_cmdline[] = "console=ttyS0 reboot=k panic=-1 8250.nr_uarts=1 quiet";

/* The process-start reference for timings (process-wide by definition). */
static _Atomic uint64_t timing_origin_ns;


uint64_t moat_timings_set_origin(uint64_t ns)
{
    if (ns) {
        atomic_store(&timing_origin_ns, ns);
        return ns;
    }
    uint64_t zero = 0;
    uint64_t now = clock_mono_ns();
    if (atomic_compare_exchange_strong(&timing_origin_ns, &zero, now))
        return now;
    return atomic_load(&timing_origin_ns);
}

const char *moat_version(void) { return MOAT_VERSION; }

void moat_config_init(struct moat_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->size = sizeof(*cfg);
    cfg->mem_mib = 256;
    cfg->cpus = 1;
    cfg->console_in = -1;
    cfg->console_out = -1;
}

int seterr(struct moat_error *err, int is_config, int code, const char *fmt, ...)
{
    if (err) {
        err->is_config = is_config;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
    }
    return code;
}

struct file_buf {
    uint8_t *data;
    size_t len;
};

static int read_file(const char *path, uint64_t max, struct file_buf *out)
{
    out->data = NULL;
    out->len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return -EISDIR;
    }
    if (!S_ISREG(st.st_mode) || st.st_size <= 0) {
        close(fd);
        return st.st_size == 0 ? -ENODATA : -EINVAL;
    }
    if ((uint64_t)st.st_size > max) {
        close(fd);
        return -EFBIG;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED)
        return -e;
    out->data = p;
    out->len = (size_t)st.st_size;
    return 0;
}

static void free_file(struct file_buf *f)
{
    if (f->data)
        munmap(f->data, f->len);
    f->data = NULL;
}

static const char *file_errstr(int e)
{
    switch (e) {
    case -ENODATA: return "file is empty";
    case -EFBIG: return "file is too large";
    case -EINVAL: return "not a regular file";
    default: return strerror(-e);
    }
}

/* ---- device callbacks ---- */

static void uart_tx(void *opaque, uint8_t byte)
{
    struct moat_vm *vm = opaque;
    console_put(&vm->con, byte);   /* never waits for the console's reader */
}

static void uart_irq(void *opaque, int level)
{
    struct moat_vm *vm = opaque;
    struct kvm_irq_level l = { .irq = PORT_COM1_IRQ, .level = (uint32_t)level };
    if (ioctl(vm->vm_fd, KVM_IRQ_LINE, &l) < 0)
        log_guest(&vm->guest_rl, "KVM_IRQ_LINE(%d): %s", PORT_COM1_IRQ, strerror(errno));
}

static const struct serial_ops uart_ops = { .tx = uart_tx, .set_irq = uart_irq, .rx_ready = NULL };

static void ctl_exit_status(void *opaque, uint8_t status)
{
    struct moat_vm *vm = opaque;
    pthread_mutex_lock(&vm->lock);
    vm->guest_status = status;
    pthread_mutex_unlock(&vm->lock);
    atomic_store(&vm->t_cmd_done, clock_mono_ns());
}

static void ctl_event(void *opaque, uint8_t ev)
{
    struct moat_vm *vm = opaque;
    uint64_t zero = 0;
    if (ev == MOATDEV_EV_INIT)
        atomic_compare_exchange_strong(&vm->t_init, &zero, clock_mono_ns());
}

static const struct moatdev_ops ctl_ops = { .exit_status = ctl_exit_status, .event = ctl_event };

static void kbd_reset(void *opaque)
{
    vm_request_exit(opaque, MOAT_EXIT_RESET, "guest reset");
}

/* IRQ 1 is an ISA edge: one pulse per keyboard byte the i8042 presents.
 * Runs on a vCPU thread (the guest read the previous byte) or on the
 * thread that called moat_send_ctrl_alt_del. */
static void kbd_irq(void *opaque)
{
    struct moat_vm *vm = opaque;
    struct kvm_irq_level l = { .irq = PORT_I8042_IRQ, .level = 1 };
    if (ioctl(vm->vm_fd, KVM_IRQ_LINE, &l) < 0) {
        log_guest(&vm->guest_rl, "KVM_IRQ_LINE(%d): %s", PORT_I8042_IRQ, strerror(errno));
        return;
    }
    l.level = 0;
    ioctl(vm->vm_fd, KVM_IRQ_LINE, &l);
}

static const struct i8042_ops kbd_ops = { .reset = kbd_reset, .irq = kbd_irq };

int moat_send_ctrl_alt_del(struct moat_vm *vm)
{
    if (!vm)
        return -EINVAL;
    pthread_mutex_lock(&vm->lock);
    bool started = vm->started, exited = vm->exited;
    pthread_mutex_unlock(&vm->lock);
    if (!started || exited)
        return exited ? -ESRCH : -EINVAL;
    return i8042_ctrl_alt_del(&vm->kbd);
}

/* ---- stop ---- */

static void kick_vcpu(struct moat_vm *vm, struct vcpu *v)
{
    v->run->immediate_exit = 1;
    pthread_kill(v->thread, vm->kick_signal);
}

static void kick_vcpus(struct moat_vm *vm)
{
    for (unsigned i = 0; i < vm->ncpus; i++)
        if (vm->vcpus[i].thread_started)
            kick_vcpu(vm, &vm->vcpus[i]);
}

/* A kick can be lost: on PVM a vCPU thread that got its signal while the
 * guest spun (the test guests' `pause; jmp` park loop) was seen to stay in
 * KVM_RUN for good, 4 times in 200 runs of a 3-vCPU guest. Whoever waits for
 * vCPUs to leave KVM_RUN therefore kicks again, every REKICK_MS, the ones
 * still inside. */
#define REKICK_MS 20
/* moat_pause is on the snapshot path (the guest waits): it kicks again
 * sooner. */
#define PAUSE_REKICK_MS 2


static void rekick_if_running(struct moat_vm *vm, struct vcpu *v)
{
    if (v->thread_started && atomic_load(&v->in_run)) {
        log_debug("vcpu%u: still in KVM_RUN after its kick: kicking again", v->index);
        kick_vcpu(vm, v);
    }
}

static void rekick_running(struct moat_vm *vm)
{
    for (unsigned i = 0; i < vm->ncpus; i++)
        rekick_if_running(vm, &vm->vcpus[i]);
}

/* Join a vCPU thread that has been told to stop, kicking it again while it
 * stays in KVM_RUN. */
static void join_vcpu(struct moat_vm *vm, struct vcpu *v)
{
    for (;;) {
        struct timespec t = clock_mono_after_ms(REKICK_MS);
        int r = pthread_clockjoin_np(v->thread, NULL, CLOCK_MONOTONIC, &t);
        if (r != ETIMEDOUT)
            return;
        rekick_if_running(vm, v);
    }
}

void vm_request_exit(struct moat_vm *vm, enum moat_exit_reason reason, const char *fmt, ...)
{
    pthread_mutex_lock(&vm->lock);
    if (vm->exited) {
        pthread_mutex_unlock(&vm->lock);
        return;
    }
    vm->exited = true;
    vm->exit.reason = reason;
    vm->exit.status = vm->guest_status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(vm->exit.detail, sizeof(vm->exit.detail), fmt, ap);
    va_end(ap);
    atomic_store(&vm->t_exit, clock_mono_ns());
    atomic_store(&vm->stopping, true);
    pthread_cond_broadcast(&vm->cond);
    pthread_mutex_unlock(&vm->lock);
    kick_vcpus(vm);
    uint64_t one = 1;
    if (write(vm->stop_efd, &one, sizeof(one)) < 0)
        log_debug("stop eventfd: %s", strerror(errno));
    if (write(vm->exit_efd, &one, sizeof(one)) < 0)
        log_debug("exit eventfd: %s", strerror(errno));
}

int moat_stop(struct moat_vm *vm)
{
    if (!vm)
        return -EINVAL;
    vm_request_exit(vm, MOAT_EXIT_STOPPED, "stopped by request");
    return 0;
}

/* ---- pause / resume ---- */

int moat_pause(struct moat_vm *vm)
{
    if (!vm)
        return -EINVAL;
    pthread_mutex_lock(&vm->lock);
    if (!vm->started || vm->exited) {
        pthread_mutex_unlock(&vm->lock);
        return vm->exited ? -ESRCH : -EINVAL;
    }
    if (vm->paused || atomic_load(&vm->pause_req)) {
        pthread_mutex_unlock(&vm->lock);
        return -EALREADY;
    }
    atomic_store(&vm->pause_req, true);
    pthread_mutex_unlock(&vm->lock);
    kick_vcpus(vm);
    pthread_mutex_lock(&vm->lock);
    while (vm->parked_vcpus < vm->ncpus && !vm->exited) {
        struct timespec t = clock_mono_after_ms(PAUSE_REKICK_MS);   /* vm->cond's clock */
        if (pthread_cond_timedwait(&vm->cond, &vm->lock, &t) == ETIMEDOUT) {
            pthread_mutex_unlock(&vm->lock);
            rekick_running(vm);
            pthread_mutex_lock(&vm->lock);
        }
    }
    int r = 0;
    if (vm->exited) {
        atomic_store(&vm->pause_req, false);
        r = -ESRCH;
    } else {
        vm->paused = true;
    }
    pthread_mutex_unlock(&vm->lock);
    /* The hooks see the parked VM first (a restore recording its working
     * set records it now: what follows a pause, a snapshot, may read all
     * of guest RAM). */
    if (r == 0)
        vm_hooks_paused(vm);
    /* Devices quiesce after the vCPUs: in-flight I/O drains and completes
     * into the used rings, and no device touches guest memory until resume. */
    if (r == 0)
        for (unsigned i = 0; i < vm->ndev; i++)
            virtio_mmio_kvm_stop(vm->dev[i].t);
    /* And the console's output from before the pause reaches its fd (a
     * reader that is not reading costs the pause at most this long). */
    if (r == 0)
        console_flush(&vm->con, CONSOLE_PAUSE_FLUSH_MS);
    return r;
}

int moat_resume(struct moat_vm *vm)
{
    if (!vm)
        return -EINVAL;
    pthread_mutex_lock(&vm->lock);
    if (!vm->paused) {
        pthread_mutex_unlock(&vm->lock);
        return vm->exited ? -ESRCH : -EALREADY;
    }
    vm->paused = false;
    pthread_mutex_unlock(&vm->lock);
    int r = 0;
    for (unsigned i = 0; i < vm->ndev; i++) {
        int e = virtio_mmio_kvm_resume(vm->dev[i].t);
        if (e < 0 && r == 0)
            r = e;
    }
    pthread_mutex_lock(&vm->lock);
    atomic_store(&vm->pause_req, false);
    pthread_cond_broadcast(&vm->cond);
    pthread_mutex_unlock(&vm->lock);
    return r;
}

/* ---- console input ---- */

static void *console_thread(void *arg)
{
    struct moat_vm *vm = arg;
    bool escape = false, in_open = true;
    if (sc_install(SC_CONSOLE, (enum sc_mode)vm->seccomp) < 0) {
        vm_request_exit(vm, MOAT_EXIT_ERROR, "console: seccomp filter failed");
        return NULL;
    }
    while (!atomic_load(&vm->stopping)) {
        size_t space = serial_rx_space(&vm->uart);
        struct pollfd p[2] = {
            { .fd = vm->stop_efd, .events = POLLIN },
            { .fd = vm->console_in, .events = POLLIN },
        };
        /* With a full FIFO, wait for the guest to drain it. */
        int nfds = (in_open && space > 0) ? 2 : 1;
        int r = poll(p, (nfds_t)nfds, space > 0 ? -1 : 10);
        if (r < 0 && errno != EINTR)
            break;
        if (r <= 0 || p[0].revents)
            continue;
        if (!(p[1].revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        uint8_t buf[SERIAL_FIFO];
        ssize_t n = read(vm->console_in, buf, space < sizeof(buf) ? space : sizeof(buf));
        if (n <= 0) {
            if (n < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            in_open = false;  /* EOF: keep running, stop reading */
            continue;
        }
        size_t o = 0;
        for (ssize_t i = 0; i < n; i++) {
            uint8_t c = buf[i];
            if (vm->flags & MOAT_F_CONSOLE_ESCAPE) {
                if (escape) {
                    escape = false;
                    if (c == 'x' || c == 'X') {
                        vm_request_exit(vm, MOAT_EXIT_STOPPED, "console escape (Ctrl-A x)");
                        return NULL;
                    }
                    if (c != 0x01)
                        buf[o++] = 0x01;
                } else if (c == 0x01) {
                    escape = true;
                    continue;
                }
            }
            buf[o++] = c;
        }
        size_t done = 0;
        while (done < o && !atomic_load(&vm->stopping)) {
            done += serial_rx(&vm->uart, buf + done, o - done);
            if (done < o)
                poll(NULL, 0, 5);
        }
    }
    return NULL;
}

/* ---- create ---- */

/* Guest RAM: anonymous, or (restore) a memory file mapped MAP_PRIVATE, so
 * pages load lazily and stay shared with other restores until written. */
static int setup_memory(struct moat_vm *vm, int mem_fd)
{
    uint64_t size = vm->ram_size;
    uint64_t low = size < LAYOUT_MMIO_START ? size : LAYOUT_MMIO_START;
    uint64_t high = size - low;
    /* One mapping; the part above 3 GiB is placed at 4 GiB in the guest. */
    vm->ram_map_size = (size_t)size;
    void *p = mem_fd >= 0
        ? mmap(NULL, vm->ram_map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, mem_fd, 0)
        : mmap(NULL, vm->ram_map_size, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return -errno;
    vm->ram = p;
    madvise(p, vm->ram_map_size, MADV_DONTDUMP);
    vm->mem.n = 0;
    vm->mem.r[vm->mem.n++] = (struct gmem_region){ 0, low, vm->ram };
    if (high)
        vm->mem.r[vm->mem.n++] = (struct gmem_region){ LAYOUT_4G, high, vm->ram + low };
    /* The hooks' part (snapshot: a restored chain's pages over the base,
     * and dirty-page tracking for diff snapshots). */
    uint32_t slot_flags = 0;
    int r = vm_hooks_mem_setup(vm, &slot_flags);
    if (r < 0)
        return r;
    for (unsigned i = 0; i < vm->mem.n; i++) {
        struct kvm_userspace_memory_region reg = {
            .slot = i,
            .flags = slot_flags,
            .guest_phys_addr = vm->mem.r[i].gpa,
            .memory_size = vm->mem.r[i].size,
            .userspace_addr = (uint64_t)(uintptr_t)vm->mem.r[i].host,
        };
        if (ioctl(vm->vm_fd, KVM_SET_USER_MEMORY_REGION, &reg) < 0) {
            /* KVM refused the flags the hooks asked for: again without
             * them if every hook can do without (a restore tracks writes
             * for diff snapshots where KVM can, and runs without where it
             * refuses dirty logging). */
            if (slot_flags && errno == EINVAL) {
                if ((r = vm_hooks_mem_refused(vm)) < 0)
                    return r;
                slot_flags = 0;
                i = (unsigned)-1;   /* all slots again, without the flag */
                continue;
            }
            return -errno;
        }
    }
    return 0;
}

static int setup_devices(struct moat_vm *vm)
{
    bus_init(&vm->pio);
    bus_init(&vm->mmio);
    serial_init(&vm->uart, &uart_ops, vm);
    moatdev_init(&vm->ctl, &ctl_ops, vm);
    i8042_init(&vm->kbd, &kbd_ops, vm);
    int r;
    if ((r = bus_register(&vm->pio, PORT_COM1, 8, &serial_bus_ops, &vm->uart)) < 0 ||
        (r = bus_register(&vm->pio, PORT_MOATDEV, 16, &moatdev_pio_ops, &vm->ctl)) < 0 ||
        (r = bus_register(&vm->pio, PORT_I8042_DATA, 1, &i8042_data_ops, &vm->kbd)) < 0 ||
        (r = bus_register(&vm->pio, PORT_I8042_CMD, 1, &i8042_cmd_ops, &vm->kbd)) < 0 ||
        (r = bus_register(&vm->mmio, LAYOUT_MOATDEV_MMIO, 0x1000, &moatdev_mmio_ops, &vm->ctl)) < 0)
        return r;
    return 0;
}

/* ---- virtio-blk drives (slots 0 .. ndrives-1, in order) ---- */

/* The kernel parameters announcing the drives' virtio-mmio slots. */
static int drives_cmdline(const struct moat_config *cfg, char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = 0;
    /* drives, the vsock device, then moat_config.devices */
    size_t nslots = devtab_config_count(cfg);
    for (size_t i = 0; i < nslots && i < VIRTIO_MMIO_KVM_MAX_SLOTS; i++) {
        if (n && n + 1 < size)
            buf[n++] = ' ';
        int r = virtio_mmio_kvm_cmdline((unsigned)i, buf + n, size - n);
        if (r < 0)
            return r;
        n += (size_t)r;
    }
    return (int)n;
}

static int build_cmdline(struct moat_vm *vm, const struct moat_config *cfg, enum boot_kind kind,
                         char *buf, size_t size)
{
    const char *base = cfg->cmdline;
    const char *extras[10];
    size_t nx = 0;
    bool linux_kind = kind != BOOT_ELF;
    if (!base)
        base = linux_kind ? default_linux_cmdline : "";
    /* Linux hands init at most MAX_INIT_ARGS (32) argv entries, argv[0]
     * included, and panics past that. */
    if (linux_kind && cfg->argv && cfg->argc > 31)
        return -E2BIG;
    if (linux_kind && vm->pvm_compat)
        for (const char *const *e = pvm_cmdline_extras; *e && nx < 7; e++)
            extras[nx++] = *e;
    char drives[VIRTIO_MMIO_KVM_MAX_SLOTS * 48];
    if (linux_kind && drives_cmdline(cfg, drives, sizeof(drives)) > 0)
        extras[nx++] = drives;
    /* A device may need a parameter (its kind says): with a vsock device,
     * /init starts the guest agent (docs/agent-protocol.md) and, with no
     * command, keeps the guest up. */
    if (linux_kind)
        nx += devtab_cmdline_extras(cfg, extras + nx, sizeof(extras) / sizeof(extras[0]) - nx);
    return boot_cmdline_build(buf, size, base, extras, nx, cfg->argv, cfg->argv ? cfg->argc : 0);
}

void vm_free(struct moat_vm *vm)
{
    vm_hooks_release(vm);   /* their threads may read guest RAM */
    devtab_free(vm);        /* before guest RAM goes: device threads drain */
    sc_runner_stop(vm->runner);
    if (vm->vcpus) {
        for (unsigned i = 0; i < vm->ncpus; i++)
            if (vm->vcpus[i].fd > 0 || vm->vcpus[i].run)
                vcpu_destroy(&vm->vcpus[i]);
        free(vm->vcpus);
    }
    if (vm->ram)
        munmap(vm->ram, vm->ram_map_size);
    vm_hooks_destroy(vm);
    if (vm->vm_fd >= 0)
        close(vm->vm_fd);
    if (vm->stop_efd >= 0)
        close(vm->stop_efd);
    if (vm->exit_efd >= 0)
        close(vm->exit_efd);
    kvm_host_close(&vm->host);
    free(vm->cmdline);
    pthread_mutex_destroy(&vm->lock);
    pthread_cond_destroy(&vm->cond);
    console_destroy(&vm->con);
    free(vm);
}

/* A VM with no KVM objects yet, in *out; 0, or -errno with err saying why
 * (a thread the seccomp runner could not start, say under a pids limit, is
 * not "out of memory"). */
int vm_alloc(struct moat_vm **out, unsigned ncpus, uint64_t ram_size, int console_in,
             int console_out, uint32_t flags, int kick_signal, struct moat_error *err)
{
    *out = NULL;
    struct moat_vm *vm = calloc(1, sizeof(*vm));
    if (!vm)
        return seterr(err, 0, -ENOMEM, "out of memory");
    vm->vm_fd = vm->stop_efd = vm->exit_efd = -1;
    vm->host.fd = -1;
    vm->guest_status = -1;
    vm->ncpus = ncpus;
    vm->ram_size = ram_size;
    vm->console_in = console_in;
    vm->guest_rl = LOG_LIMIT(10);
    int cr = console_init(&vm->con, console_out, 0, 0);
    if (cr < 0) {
        free(vm);
        return seterr(err, 0, cr, "console: %s", strerror(-cr));
    }
    vm->flags = flags;
    vm->kick_signal = kick_signal ? kick_signal : DEFAULT_KICK_SIGNAL;
    vm->seccomp = (flags & MOAT_F_SECCOMP_AUDIT) ? SC_AUDIT : (flags & MOAT_F_SECCOMP) ? SC_KILL : SC_OFF;
    vm->con.seccomp = vm->seccomp;
    pthread_mutex_init(&vm->lock, NULL);
    cond_init_mono(&vm->cond);
    int r = sc_runner_start(&vm->runner, (enum sc_mode)vm->seccomp);
    if (r < 0) {
        pthread_mutex_destroy(&vm->lock);
        pthread_cond_destroy(&vm->cond);
        console_destroy(&vm->con);
        free(vm);
        return seterr(err, 0, r, "seccomp: starting the runner thread: %s", strerror(-r));
    }
    *out = vm;
    return 0;
}

/* /dev/kvm, the VM, guest RAM (anonymous, or the memory file mapped
 * MAP_PRIVATE when mem_fd >= 0), TSS, irqchip and PIT. */
int vm_setup_kvm(struct moat_vm *vm, int mem_fd, struct moat_error *err)
{
    char why[200];
    int r = kvm_host_open(&vm->host, why, sizeof(why));
    if (r < 0)
        return seterr(err, 0, r, "%s", why);
    if ((int)vm->ncpus > vm->host.max_vcpus)
        return seterr(err, 1, -EINVAL, "%u vCPUs requested, KVM allows %d", vm->ncpus, vm->host.max_vcpus);
    vm->vm_fd = kvm_create_vm(vm->host.fd);
    if (vm->vm_fd < 0) {
        int e = vm->vm_fd;
        vm->vm_fd = -1;
        return seterr(err, 0, e, "KVM_CREATE_VM: %s", strerror(-e));
    }
    /* Memory slots before the irqchip: the other order is slow on PVM. */
    if ((r = setup_memory(vm, mem_fd)) < 0)
        return seterr(err, r == -ENOMEM, r, "guest memory (%llu MiB): %s",
                      (unsigned long long)(vm->ram_size >> 20), strerror(-r));
    if (ioctl(vm->vm_fd, KVM_SET_TSS_ADDR, TSS_ADDR) < 0)
        log_debug("KVM_SET_TSS_ADDR: %s", strerror(errno));
    uint64_t idmap = IDENTITY_MAP_ADDR;
    if (ioctl(vm->vm_fd, KVM_SET_IDENTITY_MAP_ADDR, &idmap) < 0)
        log_debug("KVM_SET_IDENTITY_MAP_ADDR: %s", strerror(errno));
    if (ioctl(vm->vm_fd, KVM_CREATE_IRQCHIP, 0) < 0)
        return seterr(err, 0, -errno, "KVM_CREATE_IRQCHIP: %s", strerror(errno));
    struct kvm_pit_config pit = { .flags = KVM_PIT_SPEAKER_DUMMY };
    if (ioctl(vm->vm_fd, KVM_CREATE_PIT2, &pit) < 0)
        return seterr(err, 0, -errno, "KVM_CREATE_PIT2: %s", strerror(errno));
    return 0;
}

/* Devices, eventfds and vCPUs; with boot set, the vCPUs get their boot
 * state (restore sets theirs from the snapshot instead). */
int vm_setup_rest(struct moat_vm *vm, bool boot, struct moat_error *err)
{
    int r;
    if ((r = setup_devices(vm)) < 0)
        return seterr(err, 0, r, "device setup: %s", strerror(-r));
    vm->stop_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    vm->exit_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (vm->stop_efd < 0 || vm->exit_efd < 0)
        return seterr(err, 0, -errno, "eventfd: %s", strerror(errno));
    vm->vcpus = calloc(vm->ncpus, sizeof(*vm->vcpus));
    if (!vm->vcpus)
        return seterr(err, 0, -ENOMEM, "out of memory");
    for (unsigned i = 0; i < vm->ncpus; i++)
        vm->vcpus[i].fd = -1;
    for (unsigned i = 0; i < vm->ncpus; i++) {
        if ((r = vcpu_create(vm, &vm->vcpus[i], i)) < 0)
            return seterr(err, 0, r, "KVM_CREATE_VCPU %u: %s", i, strerror(-r));
        if (boot && (r = vcpu_setup(vm, &vm->vcpus[i])) < 0)
            return seterr(err, 0, r, "vCPU %u setup: %s", i, strerror(-r));
    }
    return 0;
}

int vm_create(const struct moat_config *cfg_in, struct moat_vm **out, struct moat_error *err,
              int (*attach)(struct moat_vm *vm, void *arg), void *arg)
{
    if (err)
        memset(err, 0, sizeof(*err));
    if (!cfg_in || !out || cfg_in->size < offsetof(struct moat_config, kick_signal))
        return seterr(err, 1, -EINVAL, "invalid configuration structure");
    moat_timings_set_origin(0);
    struct moat_config cfg;
    moat_config_init(&cfg);
    memcpy(&cfg, cfg_in, cfg_in->size < sizeof(cfg) ? cfg_in->size : sizeof(cfg));

    if (!cfg.kernel || !*cfg.kernel)
        return seterr(err, 1, -EINVAL, "no kernel given");
    if (cfg.mem_mib < MEM_MIN_MIB || cfg.mem_mib > MEM_MAX_MIB)
        return seterr(err, 1, -EINVAL, "memory size %u MiB out of range (%u..%u)",
                      cfg.mem_mib, MEM_MIN_MIB, MEM_MAX_MIB);
    if (cfg.cpus < 1 || cfg.cpus > LAYOUT_MAX_CPUS)
        return seterr(err, 1, -EINVAL, "vCPU count %u out of range (1..%d)", cfg.cpus, LAYOUT_MAX_CPUS);
    int dr = devtab_check_config(&cfg, err);
    if (dr < 0)
        return dr;

    struct moat_vm *vm;
    int ar = vm_alloc(&vm, cfg.cpus, (uint64_t)cfg.mem_mib << 20, cfg.console_in,
                      cfg.console_out, cfg.flags, cfg.kick_signal, err);
    if (ar < 0)
        return ar;
    vm->con.limit = cfg.console_limit;

    struct file_buf kernel = { 0 }, initrd = { 0 };
    char *cmdline = NULL;
    int r = attach ? attach(vm, arg) : 0;
    if (r < 0) {
        seterr(err, 0, r, "%s", r == -ENOMEM ? "out of memory" : strerror(-r));
        goto fail;
    }
    r = read_file(cfg.kernel, KERNEL_MAX_BYTES, &kernel);
    if (r < 0) {
        seterr(err, 1, r, "kernel %s: %s", cfg.kernel, file_errstr(r));
        goto fail;
    }
    if (cfg.initrd && (r = read_file(cfg.initrd, INITRD_MAX_BYTES, &initrd)) < 0) {
        seterr(err, 1, r, "initrd %s: %s", cfg.initrd, file_errstr(r));
        goto fail;
    }
    enum boot_kind kind;
    const char *why_probe = NULL;
    r = boot_probe_why(kernel.data, kernel.len, cfg.flags & MOAT_F_PVH, &kind, &why_probe);
    if (r < 0) {
        seterr(err, 1, r, "kernel %s: %s", cfg.kernel,
               r == -ENOEXEC ? "neither an ELF64 x86-64 executable nor a bzImage"
                             : why_probe ? why_probe : "malformed kernel image");
        goto fail;
    }
    bool pvm = kvm_host_detect_pvm();
    vm->pvm_compat = pvm && !(cfg.flags & MOAT_F_NO_PVM_COMPAT);
    cmdline = malloc(LAYOUT_CMDLINE_MAX);
    if (!cmdline) {
        r = seterr(err, 0, -ENOMEM, "out of memory");
        goto fail;
    }
    r = build_cmdline(vm, &cfg, kind, cmdline, LAYOUT_CMDLINE_MAX);
    if (r < 0) {
        seterr(err, 1, r, "%s", r == -E2BIG ? "kernel command line too long (or more than 31 guest command arguments)"
                                            : "guest command arguments cannot be passed on the kernel command line "
                                              "(empty, or containing a double quote or control character)");
        goto fail;
    }
    if ((r = vm_setup_kvm(vm, -1, err)) < 0)
        goto fail;

    /* The guest image. */
    struct boot_config bc = {
        .kernel = kernel.data, .kernel_len = kernel.len,
        .initrd = initrd.data, .initrd_len = initrd.len,
        .initrd_extra = cfg.initrd_extra, .initrd_extra_len = cfg.initrd_extra_len,
        .cmdline = cmdline, .ncpus = cfg.cpus, .prefer_pvh = cfg.flags & MOAT_F_PVH,
        .ram_is_zero = true,   /* vm_setup_kvm(vm, -1, ...): fresh anonymous memory */
    };
    const char *why_load = NULL;
    r = boot_load_why(&vm->mem, &bc, &vm->boot, &why_load);
    if (r < 0) {
        seterr(err, 1, r, "loading %s: %s%s", cfg.kernel, why_load ? why_load : strerror(-r),
               r == -ENOMEM ? " (try a larger --mem)" : "");
        goto fail;
    }
    if ((r = vm_setup_rest(vm, true, err)) < 0)
        goto fail;
    if ((r = devtab_add_config(vm, &cfg, err)) < 0)
        goto fail;
    atomic_store(&vm->t_kvm_ready, clock_mono_ns());
    vm->cmdline = cmdline;
    free_file(&kernel);
    free_file(&initrd);
    *out = vm;
    return 0;

fail:
    free(cmdline);
    free_file(&kernel);
    free_file(&initrd);
    vm_free(vm);
    return r < 0 ? r : -EINVAL;
}

int moat_get_info(const struct moat_vm *vm, struct moat_vm_info *info)
{
    if (!vm || !info || info->size < sizeof(*info))
        return -EINVAL;
    info->is_linux = vm->boot.kind != BOOT_ELF;
    info->pvm_compat = vm->pvm_compat;
    snprintf(info->cmdline, sizeof(info->cmdline), "%s", vm->cmdline ? vm->cmdline : "");
    return 0;
}

static void noop_handler(int sig) { (void)sig; }

int moat_start(struct moat_vm *vm)
{
    if (!vm)
        return -EINVAL;
    pthread_mutex_lock(&vm->lock);
    if (vm->started) {
        pthread_mutex_unlock(&vm->lock);
        return -EALREADY;
    }
    vm->started = true;
    pthread_mutex_unlock(&vm->lock);

    struct sigaction old;
    if (sigaction(vm->kick_signal, NULL, &old) == 0 && old.sa_handler == SIG_DFL &&
        !(old.sa_flags & SA_SIGINFO)) {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = noop_handler;
        sigemptyset(&sa.sa_mask);
        sigaction(vm->kick_signal, &sa, NULL);
    }
    /* The runner installed its filter while the VM was set up. */
    int r = sc_runner_ready(vm->runner);
    if (r < 0) {
        vm_request_exit(vm, MOAT_EXIT_ERROR, "seccomp: the runner thread's filter: %s", strerror(-r));
        return r;
    }
    r = console_start(&vm->con, vm->kick_signal);
    for (unsigned i = 0; r == 0 && i < vm->ncpus; i++) {
        r = -pthread_create(&vm->vcpus[i].thread, NULL, vcpu_thread, &vm->vcpus[i]);
        if (r < 0)
            break;
        vm->vcpus[i].thread_started = true;     /* the thread names itself (vcpu.c) */
    }
    if (r == 0 && vm->console_in >= 0) {
        r = -pthread_create(&vm->console_thread, NULL, console_thread, vm);
        if (r == 0)
            vm->console_started = true;
    }
    if (r == 0)
        r = vm_hooks_start(vm);
    if (r < 0)
        vm_request_exit(vm, MOAT_EXIT_ERROR, "starting threads: %s", strerror(-r));
    return r;
}

int moat_wait(struct moat_vm *vm, int timeout_ms, struct moat_exit *ex)
{
    if (!vm)
        return -EINVAL;
    struct timespec deadline = { 0 };
    if (timeout_ms >= 0)
        deadline = clock_mono_after_ms((uint64_t)timeout_ms);
    pthread_mutex_lock(&vm->lock);
    while (!vm->exited) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&vm->cond, &vm->lock);
        } else if (pthread_cond_timedwait(&vm->cond, &vm->lock, &deadline) == ETIMEDOUT) {
            break;
        }
    }
    bool done = vm->exited;
    if (done && ex)
        *ex = vm->exit;
    pthread_mutex_unlock(&vm->lock);
    /* The guest's last output reaches the console before the caller hears
     * of the exit (unless the reader has stopped reading), within the
     * caller's timeout. */
    if (done && timeout_ms < 0) {
        console_drain(&vm->con, CONSOLE_IDLE_MS);
    } else if (done) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long left = (long)(deadline.tv_sec - now.tv_sec) * 1000 + (deadline.tv_nsec - now.tv_nsec) / 1000000;
        if (left > 0)
            console_flush(&vm->con, left < CONSOLE_IDLE_MS ? (int)left : CONSOLE_IDLE_MS);
    }
    return done ? 0 : -ETIMEDOUT;
}

int moat_exit_fd(const struct moat_vm *vm) { return vm ? vm->exit_efd : -EINVAL; }

int moat_get_console(struct moat_vm *vm, struct moat_console_info *info)
{
    if (!vm || !info || info->size < sizeof(*info))
        return -EINVAL;
    struct console_stats cs;
    console_get_stats(&vm->con, &cs);
    size_t size = info->size;
    memset(info, 0, size);
    info->size = size;
    info->written = cs.written;
    info->dropped = cs.dropped;
    info->queued = cs.queued;
    info->buffer_size = cs.cap;
    info->capped = cs.capped;
    info->failed = cs.dead;
    return 0;
}

static int64_t rel_us(uint64_t t)
{
    if (!t)
        return -1;
    uint64_t o = atomic_load(&timing_origin_ns);
    return t >= o ? (int64_t)((t - o) / 1000) : 0;
}

int moat_wait_running(struct moat_vm *vm, int timeout_ms)
{
    if (!vm)
        return -EINVAL;
    struct timespec t = clock_mono_after_ms(timeout_ms > 0 ? (uint64_t)timeout_ms : 0);
    int r = 0;
    pthread_mutex_lock(&vm->lock);
    if (!vm->started)
        r = -EINVAL;
    while (r == 0 && !atomic_load(&vm->t_first_run)) {
        if (vm->exited)
            r = -ESRCH;
        else if (timeout_ms == 0)
            r = -ETIMEDOUT;
        else if (timeout_ms < 0)
            pthread_cond_wait(&vm->cond, &vm->lock);
        else if (pthread_cond_timedwait(&vm->cond, &vm->lock, &t) == ETIMEDOUT && !atomic_load(&vm->t_first_run))
            r = -ETIMEDOUT;
    }
    pthread_mutex_unlock(&vm->lock);
    return r;
}

int moat_get_timings(const struct moat_vm *vm, struct moat_timings *t)
{
    if (!vm || !t)
        return -EINVAL;
    t->kvm_ready = rel_us(atomic_load(&vm->t_kvm_ready));
    t->first_run = rel_us(atomic_load(&vm->t_first_run));
    t->init_reached = rel_us(atomic_load(&vm->t_init));
    t->cmd_finished = rel_us(atomic_load(&vm->t_cmd_done));
    t->exit = rel_us(atomic_load(&vm->t_exit));
    return 0;
}

void moat_destroy(struct moat_vm *vm)
{
    if (!vm)
        return;
    if (vm->started)
        vm_request_exit(vm, MOAT_EXIT_STOPPED, "destroyed");
    for (unsigned i = 0; i < vm->ncpus; i++) {
        if (vm->vcpus[i].thread_started) {
            join_vcpu(vm, &vm->vcpus[i]);
            vm->vcpus[i].thread_started = false;
        }
    }
    if (vm->console_started)
        pthread_join(vm->console_thread, NULL);
    vm_hooks_stopped(vm);   /* the guest has stopped: e.g. its working set, if recording */
    console_stop(&vm->con, CONSOLE_IDLE_MS);
    struct console_stats cs;
    console_get_stats(&vm->con, &cs);
    if (cs.dropped)
        log_warn("console: %llu of %llu bytes of guest output dropped: the console's reader did not keep up "
                 "(%zu KiB buffer)", (unsigned long long)cs.dropped, (unsigned long long)cs.accepted, cs.cap >> 10);
    serial_destroy(&vm->uart);
    i8042_destroy(&vm->kbd);
    moatdev_destroy(&vm->ctl);
    vm_free(vm);
}

