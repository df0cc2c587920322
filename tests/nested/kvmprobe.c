/*
 * kvmprobe: a self-contained check that /dev/kvm really runs guest code.
 *
 * Built static and baked into the nested (QEMU TCG) L1 initramfs by
 * scripts/nested-setup.sh; it also runs on any host with /dev/kvm.
 *
 *   kvmprobe [-n EXITS] [-c VCPUS]
 *
 * 1. real mode: `mov al,42; out 0x10,al; hlt` must give KVM_EXIT_IO(0x10)=42
 *    then KVM_EXIT_HLT.
 * 2. long mode (identity-mapped 2 MiB page, 64-bit CS): `mov al,42; out;
 *    mov rax,imm64; shr rax,32; out; hlt` must give 42, then 0x44 (only a
 *    64-bit decoder produces that), then HLT; then a tight `out` loop is
 *    timed for EXITS exits on each of VCPUS vCPUs (one thread each).
 * Prints "kvmprobe: PASS ..." and exits 0, or "kvmprobe: FAIL ..." and 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MEM_SIZE  (2u << 20)
#define CODE_ADDR 0x8000u
#define PML4_ADDR 0x1000u
#define PDPT_ADDR 0x2000u
#define PD_ADDR   0x3000u
#define MAX_VCPUS 8

static int kvm_fd = -1;
static long run_size;

struct vm {
    int fd;
    uint8_t *mem;
};

struct vcpu {
    int fd;
    struct kvm_run *run;
    unsigned long exits_wanted;
    double ns_per_exit;
    int err;
    char msg[160];
};

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int vm_create(struct vm *vm)
{
    vm->fd = ioctl(kvm_fd, KVM_CREATE_VM, 0);
    if (vm->fd < 0)
        return -errno;
    vm->mem = mmap(NULL, MEM_SIZE, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (vm->mem == MAP_FAILED)
        return -errno;
    struct kvm_userspace_memory_region r = {
        .slot = 0, .guest_phys_addr = 0, .memory_size = MEM_SIZE,
        .userspace_addr = (uintptr_t)vm->mem,
    };
    if (ioctl(vm->fd, KVM_SET_USER_MEMORY_REGION, &r) < 0)
        return -errno;
    return 0;
}

static int vcpu_create(struct vm *vm, int id, struct vcpu *c)
{
    memset(c, 0, sizeof(*c));
    c->fd = ioctl(vm->fd, KVM_CREATE_VCPU, id);
    if (c->fd < 0)
        return -errno;
    c->run = mmap(NULL, (size_t)run_size, PROT_READ | PROT_WRITE, MAP_SHARED,
                  c->fd, 0);
    if (c->run == MAP_FAILED)
        return -errno;
    return 0;
}

/* Runs until an exit that is not EINTR; returns the exit reason or -errno. */
static int vcpu_run(struct vcpu *c)
{
    for (;;) {
        if (ioctl(c->fd, KVM_RUN, 0) == 0)
            return (int)c->run->exit_reason;
        if (errno != EINTR)
            return -errno;
    }
}

static int expect_io(struct vcpu *c, uint16_t port, uint8_t val)
{
    int r = vcpu_run(c);
    if (r != KVM_EXIT_IO) {
        snprintf(c->msg, sizeof(c->msg), "want KVM_EXIT_IO, got %d", r);
        return -1;
    }
    struct kvm_run *k = c->run;
    uint8_t got = *((uint8_t *)k + k->io.data_offset);
    if (k->io.direction != KVM_EXIT_IO_OUT || k->io.port != port ||
        k->io.size != 1 || got != val) {
        snprintf(c->msg, sizeof(c->msg),
                 "want out 0x%x=%u, got dir %u port 0x%x size %u val %u",
                 port, val, k->io.direction, k->io.port, k->io.size, got);
        return -1;
    }
    return 0;
}

static int expect_hlt(struct vcpu *c)
{
    int r = vcpu_run(c);
    if (r != KVM_EXIT_HLT) {
        snprintf(c->msg, sizeof(c->msg), "want KVM_EXIT_HLT, got %d", r);
        return -1;
    }
    return 0;
}

static int test_real_mode(void)
{
    static const uint8_t code[] = {
        0xb0, 42,       /* mov al, 42 */
        0xe6, 0x10,     /* out 0x10, al */
        0xf4,           /* hlt */
    };
    struct vm vm;
    struct vcpu c;
    int r = vm_create(&vm);
    if (r == 0)
        r = vcpu_create(&vm, 0, &c);
    if (r) {
        printf("kvmprobe: FAIL real mode setup: %s\n", strerror(-r));
        return -1;
    }
    memcpy(vm.mem + CODE_ADDR, code, sizeof(code));
    struct kvm_sregs s;
    struct kvm_regs regs = { .rip = 0, .rflags = 2 };
    if (ioctl(c.fd, KVM_GET_SREGS, &s) < 0)
        return -1;
    s.cs.base = CODE_ADDR;
    s.cs.selector = CODE_ADDR >> 4;
    if (ioctl(c.fd, KVM_SET_SREGS, &s) < 0 || ioctl(c.fd, KVM_SET_REGS, &regs) < 0) {
        printf("kvmprobe: FAIL real mode set regs: %s\n", strerror(errno));
        return -1;
    }
    if (expect_io(&c, 0x10, 42) || expect_hlt(&c)) {
        printf("kvmprobe: FAIL real mode: %s\n", c.msg);
        return -1;
    }
    printf("kvmprobe: real mode ok (out 0x10=42, hlt)\n");
    close(c.fd);
    close(vm.fd);
    munmap(vm.mem, MEM_SIZE);
    return 0;
}

static void setup_long_mode(struct vm *vm)
{
    uint64_t *pml4 = (uint64_t *)(vm->mem + PML4_ADDR);
    uint64_t *pdpt = (uint64_t *)(vm->mem + PDPT_ADDR);
    uint64_t *pd = (uint64_t *)(vm->mem + PD_ADDR);
    pml4[0] = PDPT_ADDR | 0x3;  /* present, writable */
    pdpt[0] = PD_ADDR | 0x3;
    pd[0] = 0x0 | 0x83;         /* 2 MiB page at 0 */
    static const uint8_t code[] = {
        0xb0, 42,                               /* mov al, 42 */
        0xe6, 0x10,                             /* out 0x10, al */
        0x48, 0xb8, 0x88, 0x77, 0x66, 0x55,
        0x44, 0x33, 0x22, 0x11,                 /* mov rax, 0x1122334455667788 */
        0x48, 0xc1, 0xe8, 0x20,                 /* shr rax, 32 */
        0xe6, 0x10,                             /* out 0x10, al  (0x44) */
        0xf4,                                   /* hlt */
        0xe6, 0x11,                             /* 1: out 0x11, al */
        0xeb, 0xfc,                             /* jmp 1b */
    };
    memcpy(vm->mem + CODE_ADDR, code, sizeof(code));
}

static int vcpu_long_mode(struct vcpu *c)
{
    struct kvm_sregs s;
    if (ioctl(c->fd, KVM_GET_SREGS, &s) < 0)
        return -errno;
    struct kvm_segment cs = {
        .base = 0, .limit = 0xffffffff, .selector = 0x8, .type = 11,
        .present = 1, .dpl = 0, .db = 0, .s = 1, .l = 1, .g = 1,
    };
    struct kvm_segment ds = cs;
    ds.type = 3;
    ds.selector = 0x10;
    ds.l = 0;
    ds.db = 1;
    s.cs = cs;
    s.ds = s.es = s.fs = s.gs = s.ss = ds;
    s.cr3 = PML4_ADDR;
    s.cr4 = 1u << 5;                            /* PAE */
    s.cr0 = 0x80000001u | (1u << 4) | (1u << 5); /* PG, PE, ET, NE */
    s.efer = (1u << 8) | (1u << 10);            /* LME, LMA */
    if (ioctl(c->fd, KVM_SET_SREGS, &s) < 0)
        return -errno;
    struct kvm_regs regs = { .rip = CODE_ADDR, .rflags = 2, .rsp = 0x7000 };
    if (ioctl(c->fd, KVM_SET_REGS, &regs) < 0)
        return -errno;
    return 0;
}

static void *vcpu_thread(void *arg)
{
    struct vcpu *c = arg;
    if (expect_io(c, 0x10, 42) || expect_io(c, 0x10, 0x44) || expect_hlt(c)) {
        c->err = 1;
        return NULL;
    }
    double t0 = now_ns();
    for (unsigned long i = 0; i < c->exits_wanted; i++) {
        if (expect_io(c, 0x11, 0x44)) {
            c->err = 1;
            return NULL;
        }
    }
    c->ns_per_exit = (now_ns() - t0) / (double)(c->exits_wanted ? c->exits_wanted : 1);
    return NULL;
}

static int test_long_mode(int nvcpus, unsigned long exits)
{
    struct vm vm;
    struct vcpu c[MAX_VCPUS];
    pthread_t th[MAX_VCPUS];
    int r = vm_create(&vm);
    if (r) {
        printf("kvmprobe: FAIL long mode vm: %s\n", strerror(-r));
        return -1;
    }
    setup_long_mode(&vm);
    for (int i = 0; i < nvcpus; i++) {
        r = vcpu_create(&vm, i, &c[i]);
        if (r == 0)
            r = vcpu_long_mode(&c[i]);
        if (r) {
            printf("kvmprobe: FAIL long mode vcpu %d: %s\n", i, strerror(-r));
            return -1;
        }
        c[i].exits_wanted = exits;
    }
    double t0 = now_ns();
    for (int i = 0; i < nvcpus; i++)
        pthread_create(&th[i], NULL, vcpu_thread, &c[i]);
    int bad = 0;
    for (int i = 0; i < nvcpus; i++) {
        pthread_join(th[i], NULL);
        if (c[i].err) {
            printf("kvmprobe: FAIL long mode vcpu %d: %s\n", i, c[i].msg);
            bad = 1;
        } else {
            printf("kvmprobe: long mode vcpu %d ok: %lu io exits, %.1f us/exit\n",
                   i, exits, c[i].ns_per_exit / 1000.0);
        }
    }
    printf("kvmprobe: long mode %d vcpu(s) wall %.1f ms\n", nvcpus,
           (now_ns() - t0) / 1e6);
    for (int i = 0; i < nvcpus; i++)
        close(c[i].fd);
    close(vm.fd);
    return bad ? -1 : 0;
}

int main(int argc, char **argv)
{
    unsigned long exits = 2000;
    int nvcpus = 1;
    int opt;
    while ((opt = getopt(argc, argv, "n:c:")) != -1) {
        if (opt == 'n')
            exits = strtoul(optarg, NULL, 0);
        else if (opt == 'c')
            nvcpus = atoi(optarg);
        else {
            fprintf(stderr, "usage: kvmprobe [-n EXITS] [-c VCPUS]\n");
            return 2;
        }
    }
    if (nvcpus < 1 || nvcpus > MAX_VCPUS) {
        fprintf(stderr, "kvmprobe: -c must be 1..%d\n", MAX_VCPUS);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    kvm_fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
    if (kvm_fd < 0) {
        printf("kvmprobe: FAIL open /dev/kvm: %s\n", strerror(errno));
        return 1;
    }
    int api = ioctl(kvm_fd, KVM_GET_API_VERSION, 0);
    run_size = ioctl(kvm_fd, KVM_GET_VCPU_MMAP_SIZE, 0);
    printf("kvmprobe: api %d, vcpu mmap %ld, max vcpus %d\n", api, run_size,
           ioctl(kvm_fd, KVM_CHECK_EXTENSION, KVM_CAP_MAX_VCPUS));
    if (api != KVM_API_VERSION || run_size <= 0) {
        printf("kvmprobe: FAIL bad api/mmap size\n");
        return 1;
    }
    double t0 = now_ns();
    if (test_real_mode())
        return 1;
    if (test_long_mode(nvcpus, exits))
        return 1;
    printf("kvmprobe: PASS (%.1f ms)\n", (now_ns() - t0) / 1e6);
    return 0;
}
