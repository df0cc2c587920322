/* vCPUs: creation, architectural setup for each boot kind, the run loop.
 * The run loop is one switch on exit_reason; device work goes through the
 * VM's buses. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "vmm/base/layout.h"
#include "vmm/base/log.h"
#include "vmm/base/scfilter.h"
#include "vmm/core/vm.h"

#define MSR_IA32_SYSENTER_CS   0x174
#define MSR_IA32_SYSENTER_ESP  0x175
#define MSR_IA32_SYSENTER_EIP  0x176
#define MSR_IA32_TSC           0x10
#define MSR_IA32_MISC_ENABLE   0x1a0
#define MSR_MTRR_DEF_TYPE      0x2ff
#define MSR_STAR               0xc0000081
#define MSR_LSTAR              0xc0000082
#define MSR_CSTAR              0xc0000083
#define MSR_SYSCALL_MASK       0xc0000084
#define MSR_KERNEL_GS_BASE     0xc0000102


int vcpu_create(struct moat_vm *vm, struct vcpu *v, unsigned index)
{
    memset(v, 0, sizeof(*v));
    v->vm = vm;
    v->index = index;
    v->fd = ioctl(vm->vm_fd, KVM_CREATE_VCPU, (unsigned long)index);
    if (v->fd < 0)
        return -errno;
    v->run_size = (size_t)vm->host.run_size;
    v->run = mmap(NULL, v->run_size, PROT_READ | PROT_WRITE, MAP_SHARED, v->fd, 0);
    if (v->run == MAP_FAILED) {
        int e = errno;
        close(v->fd);
        v->fd = -1;
        v->run = NULL;
        return -e;
    }
    return 0;
}

void vcpu_destroy(struct vcpu *v)
{
    if (v->run)
        munmap(v->run, v->run_size);
    if (v->fd >= 0)
        close(v->fd);
    v->run = NULL;
    v->fd = -1;
}

static int set_cpuid(struct moat_vm *vm, struct vcpu *v)
{
    const struct kvm_cpuid2 *sup = vm->host.cpuid;
    size_t sz = sizeof(*sup) + sup->nent * sizeof(sup->entries[0]);
    struct kvm_cpuid2 *c = malloc(sz);
    if (!c)
        return -ENOMEM;
    memcpy(c, sup, sz);
    cpuid_filter(c->entries, c->nent, v->index, vm->ncpus, vm->pvm_compat);
    int r = ioctl(v->fd, KVM_SET_CPUID2, c) < 0 ? -errno : 0;
    free(c);
    return r;
}

static int set_msrs(struct moat_vm *vm, struct vcpu *v)
{
    static const struct { uint32_t idx; uint64_t val; } want[] = {
        { MSR_IA32_SYSENTER_CS, 0 }, { MSR_IA32_SYSENTER_ESP, 0 }, { MSR_IA32_SYSENTER_EIP, 0 },
        { MSR_STAR, 0 }, { MSR_CSTAR, 0 }, { MSR_KERNEL_GS_BASE, 0 }, { MSR_SYSCALL_MASK, 0 },
        { MSR_LSTAR, 0 }, { MSR_IA32_TSC, 0 },
        { MSR_IA32_MISC_ENABLE, 1 },                 /* fast strings */
        { MSR_MTRR_DEF_TYPE, (1u << 11) | 6 },       /* MTRRs on, default write-back */
    };
    enum { NWANT = sizeof(want) / sizeof(want[0]) };
    _Alignas(8) uint8_t raw[sizeof(struct kvm_msrs) + NWANT * sizeof(struct kvm_msr_entry)];
    memset(raw, 0, sizeof(raw));
    struct kvm_msrs *m = (struct kvm_msrs *)raw;
    unsigned n = 0;
    for (size_t i = 0; i < NWANT; i++) {
        if (!kvm_host_has_msr(&vm->host, want[i].idx))
            continue;
        m->entries[n].index = want[i].idx;
        m->entries[n].data = want[i].val;
        n++;
    }
    m->nmsrs = n;
    int r = ioctl(v->fd, KVM_SET_MSRS, m);
    if (r < 0)
        return -errno;
    if ((unsigned)r != n)
        log_warn("vcpu%u: KVM_SET_MSRS set %d of %u MSRs", v->index, r, n);
    return 0;
}

static int set_fpu(struct vcpu *v)
{
    struct kvm_fpu fpu;
    memset(&fpu, 0, sizeof(fpu));
    fpu.fcw = 0x37f;
    fpu.mxcsr = 0x1f80;
    return ioctl(v->fd, KVM_SET_FPU, &fpu) < 0 ? -errno : 0;
}

/* LINT0 as ExtINT and LINT1 as NMI, as a PC BIOS leaves them. */
static int set_lapic(struct vcpu *v)
{
    struct kvm_lapic_state lapic;
    if (ioctl(v->fd, KVM_GET_LAPIC, &lapic) < 0)
        return -errno;
    uint32_t *lvt0 = (uint32_t *)&lapic.regs[0x350];
    uint32_t *lvt1 = (uint32_t *)&lapic.regs[0x360];
    *lvt0 = (*lvt0 & ~0x700u & ~0x10000u) | (7u << 8);   /* ExtINT, unmasked */
    *lvt1 = (*lvt1 & ~0x700u & ~0x10000u) | (4u << 8);   /* NMI, unmasked */
    return ioctl(v->fd, KVM_SET_LAPIC, &lapic) < 0 ? -errno : 0;
}

static struct kvm_segment seg(uint16_t sel, uint8_t type, bool code64, bool db)
{
    struct kvm_segment s = {
        .base = 0, .limit = 0xffffffff, .selector = sel, .type = type,
        .present = 1, .dpl = 0, .db = db, .s = 1, .l = code64, .g = 1,
    };
    return s;
}

/* The architectural state a boot kind enters with (docs/boot.md). */
struct entry_state {
    bool long_mode;          /* 64-bit code segment, paging on; else 32-bit, paging off */
    uint64_t cr0, cr3, cr4, efer;
    uint64_t rip, rsp, rdi, rsi, rdx, rbx;
};

static int set_entry_state(struct vcpu *v, const struct entry_state *e)
{
    struct kvm_sregs sr;
    if (ioctl(v->fd, KVM_GET_SREGS, &sr) < 0)
        return -errno;
    sr.cs = e->long_mode ? seg(BOOT_SEL_CODE64, 0xb, true, false) : seg(BOOT_SEL_CODE32, 0xb, false, true);
    sr.ds = sr.es = sr.fs = sr.gs = sr.ss = seg(BOOT_SEL_DATA, 0x3, false, true);
    sr.tr = (struct kvm_segment){ .base = 0, .limit = 0x67, .selector = BOOT_SEL_TSS,
                                  .type = 0xb, .present = 1 };
    sr.ldt = (struct kvm_segment){ .type = 0x2, .present = 1, .unusable = 1 };
    sr.gdt.base = LAYOUT_GDT;
    sr.gdt.limit = BOOT_GDT_LIMIT;  /* null, code32, code64, data, TSS (16 bytes) */
    sr.idt.base = LAYOUT_IDT;
    sr.idt.limit = 0;
    sr.cr0 = e->cr0;
    sr.cr3 = e->cr3;
    sr.cr4 = e->cr4;
    sr.efer = e->efer;
    if (ioctl(v->fd, KVM_SET_SREGS, &sr) < 0)
        return -errno;
    struct kvm_regs r;
    memset(&r, 0, sizeof(r));
    r.rflags = 0x2;
    r.rip = e->rip;
    r.rsp = r.rbp = e->rsp;
    r.rdi = e->rdi;
    r.rsi = e->rsi;
    r.rdx = e->rdx;
    r.rbx = e->rbx;
    return ioctl(v->fd, KVM_SET_REGS, &r) < 0 ? -errno : 0;
}

int vcpu_setup(struct moat_vm *vm, struct vcpu *v)
{
    int r = set_cpuid(vm, v);
    if (r < 0) {
        log_err("vcpu%u: KVM_SET_CPUID2: %s", v->index, strerror(-r));
        return r;
    }
    if ((r = set_msrs(vm, v)) < 0 || (r = set_fpu(v)) < 0 || (r = set_lapic(v)) < 0) {
        log_err("vcpu%u: setup: %s", v->index, strerror(-r));
        return r;
    }
    const struct boot_info *b = &vm->boot;
    switch (b->kind) {
    case BOOT_LINUX_BZIMAGE:
    case BOOT_LINUX_ELF:
        /* Application processors wait for INIT/SIPI from the BSP. */
        if (v->index == 0)
            r = set_entry_state(v, &(struct entry_state){
                .long_mode = true, .cr0 = BOOT_CR0_LONG, .cr3 = LAYOUT_PML4, .cr4 = BOOT_CR4_LINUX,
                .efer = BOOT_EFER_LONG, .rip = b->entry, .rsp = BOOT_STACK, .rsi = b->zero_page });
        break;
    case BOOT_LINUX_PVH:
        /* PVH: 32-bit protected mode, paging off, EBX = start_info. */
        if (v->index == 0)
            r = set_entry_state(v, &(struct entry_state){
                .cr0 = BOOT_CR0_PVH, .rip = b->entry, .rbx = b->zero_page });
        break;
    case BOOT_ELF:
        /* Every vCPU enters at the entry point (docs/boot.md). */
        r = set_entry_state(v, &(struct entry_state){
            .long_mode = true, .cr0 = BOOT_CR0_LONG, .cr3 = LAYOUT_PML4, .cr4 = BOOT_CR4_ELF,
            .efer = BOOT_EFER_LONG, .rip = b->entry,
            .rsp = LAYOUT_ELF_STACKS + (v->index + 1) * LAYOUT_ELF_STACK_SZ,
            .rdi = v->index, .rsi = vm->ncpus, .rdx = vm->ram_size });
        if (r == 0 && v->index > 0) {
            struct kvm_mp_state mp = { .mp_state = KVM_MP_STATE_RUNNABLE };
            if (ioctl(v->fd, KVM_SET_MP_STATE, &mp) < 0)
                r = -errno;
        }
        break;
    }
    if (r < 0)
        log_err("vcpu%u: register setup: %s", v->index, strerror(-r));
    return r;
}

/* ---- the run loop ---- */

static void handle_io(struct moat_vm *vm, struct kvm_run *run)
{
    uint8_t *data = (uint8_t *)run + run->io.data_offset;
    uint32_t size = run->io.size;
    /* KVM guarantees data_offset + count * size lies inside the run page. */
    for (uint32_t i = 0; i < run->io.count; i++, data += size) {
        if (bus_access(&vm->pio, run->io.port, data, size,
                       run->io.direction == KVM_EXIT_IO_OUT) < 0 &&
            run->io.direction == KVM_EXIT_IO_OUT)
            log_debug("unhandled port write 0x%x (size %u)", run->io.port, size);
    }
}

static void handle_mmio(struct moat_vm *vm, struct kvm_run *run)
{
    uint32_t len = run->mmio.len;
    if (len == 0 || len > sizeof(run->mmio.data))
        return;
    if (bus_access(&vm->mmio, run->mmio.phys_addr, run->mmio.data, len, run->mmio.is_write) < 0)
        log_debug("unhandled MMIO %s 0x%llx (len %u)", run->mmio.is_write ? "write" : "read",
                  (unsigned long long)run->mmio.phys_addr, len);
}

/* PVM compatibility: a ring-0 int3 / int n ends in an emulation failure.
 * Complete it in software: decode the byte(s) at RIP, advance RIP past the
 * instruction and inject the event. Returns 0 if handled. */
static int pvm_complete_soft_int(struct moat_vm *vm, struct vcpu *v)
{
    struct kvm_regs regs;
    struct kvm_sregs sregs;
    if (ioctl(v->fd, KVM_GET_REGS, &regs) < 0 || ioctl(v->fd, KVM_GET_SREGS, &sregs) < 0)
        return -errno;
    struct kvm_translation tr = { .linear_address = sregs.cs.base + regs.rip };
    if (ioctl(v->fd, KVM_TRANSLATE, &tr) < 0 || !tr.valid)
        return -EFAULT;
    /* The two bytes may straddle a page; translate the second separately. */
    uint8_t insn[2];
    if (gmem_read(&vm->mem, tr.physical_address, &insn[0], 1) < 0)
        return -EFAULT;
    struct kvm_vcpu_events ev;
    if (ioctl(v->fd, KVM_GET_VCPU_EVENTS, &ev) < 0)
        return -errno;
    if (insn[0] == 0xcc) {
        regs.rip += 1;
        ev.exception.injected = 1;
        ev.exception.nr = 3;
        ev.exception.has_error_code = 0;
    } else if (insn[0] == 0xcd) {
        struct kvm_translation tr2 = { .linear_address = sregs.cs.base + regs.rip + 1 };
        if (ioctl(v->fd, KVM_TRANSLATE, &tr2) < 0 || !tr2.valid ||
            gmem_read(&vm->mem, tr2.physical_address, &insn[1], 1) < 0)
            return -EFAULT;
        regs.rip += 2;
        ev.interrupt.injected = 1;
        ev.interrupt.nr = insn[1];
        ev.interrupt.soft = 1;
    } else {
        return -ENOTSUP;
    }
    ev.flags = 0;
    if (ioctl(v->fd, KVM_SET_REGS, &regs) < 0 || ioctl(v->fd, KVM_SET_VCPU_EVENTS, &ev) < 0)
        return -errno;
    return 0;
}

static void describe_internal_error(struct kvm_run *run, char *buf, size_t len)
{
    int n = snprintf(buf, len, "KVM internal error, suberror %u", run->internal.suberror);
    for (uint32_t i = 0; i < run->internal.ndata && i < 4 && n > 0 && (size_t)n < len; i++)
        n += snprintf(buf + n, len - (size_t)n, " 0x%llx", (unsigned long long)run->internal.data[i]);
}

/* A kick signal that hit the thread outside KVM_RUN stays pending (it is
 * blocked in user space) and would make every later KVM_RUN return EINTR at
 * once. Consume it; the reason for the kick (stopping, pause_req) is always
 * set before the signal is sent, so the loop still sees it. */
static void eat_kicks(int sig)
{
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, sig);
    const struct timespec zero = { 0, 0 };
    while (sigtimedwait(&s, NULL, &zero) > 0) {
    }
}

/* Pause: complete any half-done exit (a port read's data is consumed by the
 * next KVM_RUN), so that the state userspace can read is exact, then wait
 * until resumed or stopped. */
static void vcpu_park(struct moat_vm *vm, struct vcpu *v)
{
    v->run->immediate_exit = 1;
    if (ioctl(v->fd, KVM_RUN, 0) < 0 && errno != EINTR && errno != EAGAIN)
        log_warn("vcpu%u: completing pending I/O before pause: %s", v->index, strerror(errno));
    v->run->immediate_exit = 0;
    eat_kicks(vm->kick_signal);
    pthread_mutex_lock(&vm->lock);
    vm->parked_vcpus++;
    pthread_cond_broadcast(&vm->cond);
    while (atomic_load(&vm->pause_req) && !atomic_load(&vm->stopping))
        pthread_cond_wait(&vm->cond, &vm->lock);
    vm->parked_vcpus--;
    pthread_cond_broadcast(&vm->cond);
    pthread_mutex_unlock(&vm->lock);
}

void *vcpu_thread(void *arg)
{
    struct vcpu *v = arg;
    struct moat_vm *vm = v->vm;
    struct kvm_run *run = v->run;

    /* The kick signal is blocked everywhere except inside KVM_RUN. */
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, vm->kick_signal);
    pthread_sigmask(SIG_BLOCK, &block, NULL);
    sigset_t runmask;
    pthread_sigmask(SIG_BLOCK, NULL, &runmask);
    sigdelset(&runmask, vm->kick_signal);
    /* struct kvm_signal_mask is a u32 length followed by the kernel's
     * 8-byte sigset; build it byte-wise to avoid padding. */
    _Alignas(8) uint8_t raw[sizeof(struct kvm_signal_mask) + 8];
    struct kvm_signal_mask *km = (struct kvm_signal_mask *)raw;
    km->len = 8;
    memcpy(raw + sizeof(struct kvm_signal_mask), &runmask, 8);
    if (ioctl(v->fd, KVM_SET_SIGNAL_MASK, km) < 0) {
        vm_request_exit(vm, MOAT_EXIT_ERROR, "vcpu%u: KVM_SET_SIGNAL_MASK: %s", v->index, strerror(errno));
        return NULL;
    }
    /* Before the first KVM_RUN: the guest runs only under the filter. The
     * thread names itself here (not its creator, afterwards: that rename
     * raced the filter's), so tools that look for "fc_vcpu N" find it. */
    char name[16];
    snprintf(name, sizeof name, "%s%u", vm->flags & MOAT_F_FC_THREAD_NAMES ? "fc_vcpu " : "moat_vcpu ",
             v->index % 1000);
    int sr = sc_install_named(SC_VCPU, (enum sc_mode)vm->seccomp, name);
    if (sr < 0) {
        vm_request_exit(vm, MOAT_EXIT_ERROR, "vcpu%u: seccomp: %s", v->index, strerror(-sr));
        return NULL;
    }

    while (!atomic_load(&vm->stopping)) {
        if (atomic_load(&vm->pause_req)) {
            vcpu_park(vm, v);
            continue;
        }
        atomic_store(&v->in_run, true);
        if (atomic_load(&vm->stopping))
            run->immediate_exit = 1;
        uint64_t zero = 0;
        if (atomic_compare_exchange_strong(&vm->t_first_run, &zero, clock_mono_ns())) {
            pthread_mutex_lock(&vm->lock);      /* moat_wait_running */
            pthread_cond_broadcast(&vm->cond);
            pthread_mutex_unlock(&vm->lock);
        }
        int r = ioctl(v->fd, KVM_RUN, 0);
        int err = errno;
        atomic_store(&v->in_run, false);
        if (r < 0) {
            if (err == EINTR || err == EAGAIN) {
                run->immediate_exit = 0;
                eat_kicks(vm->kick_signal);
                continue;
            }
            vm_request_exit(vm, MOAT_EXIT_ERROR, "vcpu%u: KVM_RUN: %s", v->index, strerror(err));
            break;
        }
        switch (run->exit_reason) {
        case KVM_EXIT_IO:
            handle_io(vm, run);
            break;
        case KVM_EXIT_MMIO:
            handle_mmio(vm, run);
            break;
        case KVM_EXIT_HLT:
            /* With the in-kernel LAPIC, HLT is handled by KVM; seeing it here
             * means a halted vCPU with nothing to wake it. */
            vm_request_exit(vm, MOAT_EXIT_RESET, "vcpu%u halted", v->index);
            break;
        case KVM_EXIT_SHUTDOWN:
            vm_request_exit(vm, MOAT_EXIT_CRASH, "vcpu%u: triple fault (shutdown)", v->index);
            break;
        case KVM_EXIT_SYSTEM_EVENT:
            vm_request_exit(vm, MOAT_EXIT_RESET, "vcpu%u: system event %u", v->index,
                            run->system_event.type);
            break;
        case KVM_EXIT_INTERNAL_ERROR:
            if (vm->pvm_compat && run->internal.suberror == KVM_INTERNAL_ERROR_EMULATION &&
                pvm_complete_soft_int(vm, v) == 0)
                break;
            {
                char d[128];
                describe_internal_error(run, d, sizeof(d));
                vm_request_exit(vm, MOAT_EXIT_CRASH, "vcpu%u: %s", v->index, d);
            }
            break;
        case KVM_EXIT_FAIL_ENTRY:
            vm_request_exit(vm, MOAT_EXIT_CRASH, "vcpu%u: VM entry failed, reason 0x%llx",
                            v->index, (unsigned long long)run->fail_entry.hardware_entry_failure_reason);
            break;
        case KVM_EXIT_INTR:
            break;
        default:
            log_guest(&vm->guest_rl, "vcpu%u: unhandled exit reason %u", v->index, run->exit_reason);
            break;
        }
    }
    return NULL;
}
