#include "vmm/core/kvm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

/* Capabilities moat asks for: required ones first. */
const struct kvm_cap_desc kvm_caps_used[] = {
    { KVM_CAP_USER_MEMORY, "KVM_CAP_USER_MEMORY", true, "guest RAM" },
    { KVM_CAP_IRQCHIP, "KVM_CAP_IRQCHIP", true, "in-kernel LAPIC/IOAPIC/PIC" },
    { KVM_CAP_PIT2, "KVM_CAP_PIT2", true, "in-kernel PIT" },
    { KVM_CAP_EXT_CPUID, "KVM_CAP_EXT_CPUID", true, "CPUID" },
    { KVM_CAP_IMMEDIATE_EXIT, "KVM_CAP_IMMEDIATE_EXIT", true, "stopping and pausing vCPUs" },
    { KVM_CAP_MP_STATE, "KVM_CAP_MP_STATE", true, "snapshots" },
    { KVM_CAP_IRQFD, "KVM_CAP_IRQFD", false, "virtio interrupts" },
    { KVM_CAP_IOEVENTFD, "KVM_CAP_IOEVENTFD", false, "virtio kicks" },
    { KVM_CAP_SET_TSS_ADDR, "KVM_CAP_SET_TSS_ADDR", false, "TSS" },
    { KVM_CAP_SET_IDENTITY_MAP_ADDR, "KVM_CAP_SET_IDENTITY_MAP_ADDR", false, "identity map" },
    { KVM_CAP_VCPU_EVENTS, "KVM_CAP_VCPU_EVENTS", false, "snapshots" },
    { KVM_CAP_XSAVE, "KVM_CAP_XSAVE", false, "FPU state in snapshots" },
    { KVM_CAP_XCRS, "KVM_CAP_XCRS", false, "XCR0 in snapshots" },
    { KVM_CAP_MAX_VCPUS, "KVM_CAP_MAX_VCPUS", false, "--cpus limit" },
    { KVM_CAP_NR_MEMSLOTS, "KVM_CAP_NR_MEMSLOTS", false, "memory slots" },
    { KVM_CAP_SYNC_MMU, "KVM_CAP_SYNC_MMU", false, "copy-on-write restores" },
};
const unsigned kvm_ncaps_used = sizeof(kvm_caps_used) / sizeof(kvm_caps_used[0]);

/* KVM enumerates every leaf before it finds a buffer too small (each host
 * CPUID a trap under PVM: ~0.45 ms a call there), so the first buffer
 * holds what hosts report (60-110 entries) with room to spare. */
static int get_supported_cpuid(struct kvm_host *h)
{
    for (unsigned n = 256; n <= 4096; n *= 2) {
        struct kvm_cpuid2 *c = calloc(1, sizeof(*c) + n * sizeof(c->entries[0]));
        if (!c)
            return -ENOMEM;
        c->nent = n;
        if (ioctl(h->fd, KVM_GET_SUPPORTED_CPUID, c) == 0) {
            h->cpuid = c;
            return 0;
        }
        int e = errno;
        free(c);
        if (e != E2BIG)
            return -e;
    }
    return -E2BIG;
}

static int get_msr_list(struct kvm_host *h)
{
    struct kvm_msr_list probe = { .nmsrs = 0 };
    if (ioctl(h->fd, KVM_GET_MSR_INDEX_LIST, &probe) == 0 || errno != E2BIG) {
        h->nmsrs = 0;
        return 0;
    }
    struct kvm_msr_list *l = calloc(1, sizeof(*l) + probe.nmsrs * sizeof(uint32_t));
    if (!l)
        return -ENOMEM;
    l->nmsrs = probe.nmsrs;
    if (ioctl(h->fd, KVM_GET_MSR_INDEX_LIST, l) < 0) {
        int e = errno;
        free(l);
        return -e;
    }
    h->msrs = malloc(l->nmsrs * sizeof(uint32_t));
    if (!h->msrs) {
        free(l);
        return -ENOMEM;
    }
    memcpy(h->msrs, l->indices, l->nmsrs * sizeof(uint32_t));
    h->nmsrs = l->nmsrs;
    free(l);
    return 0;
}

int kvm_host_open(struct kvm_host *h, char *why, size_t whylen)
{
    memset(h, 0, sizeof(*h));
    h->fd = -1;
    const char *path = getenv("MOAT_KVM_DEV");
    if (!path || !*path)
        path = "/dev/kvm";
    h->fd = open(path, O_RDWR | O_CLOEXEC);
    if (h->fd < 0) {
        int e = errno;
        snprintf(why, whylen, "cannot open %s: %s%s", path, strerror(e),
                 e == ENOENT ? " (is the kvm module loaded? no hardware virtualization?)" :
                 e == EACCES ? " (add yourself to the kvm group)" : "");
        return -e;
    }
    int v = ioctl(h->fd, KVM_GET_API_VERSION, 0);
    if (v < 0) {
        int e = errno;
        snprintf(why, whylen, "%s: KVM_GET_API_VERSION failed: %s (not a KVM device?)", path, strerror(e));
        kvm_host_close(h);
        return -ENOTSUP;
    }
    h->api_version = v;
    if (v != KVM_API_VERSION) {
        snprintf(why, whylen, "%s: KVM API version %d, moat needs %d", path, v, KVM_API_VERSION);
        kvm_host_close(h);
        return -ENOTSUP;
    }
    for (size_t i = 0; i < kvm_ncaps_used; i++) {
        if (kvm_caps_used[i].required && ioctl(h->fd, KVM_CHECK_EXTENSION, kvm_caps_used[i].cap) <= 0) {
            snprintf(why, whylen, "%s lacks %s", path, kvm_caps_used[i].name);
            kvm_host_close(h);
            return -ENOTSUP;
        }
    }
    h->run_size = ioctl(h->fd, KVM_GET_VCPU_MMAP_SIZE, 0);
    if (h->run_size < (int)sizeof(struct kvm_run)) {
        snprintf(why, whylen, "KVM_GET_VCPU_MMAP_SIZE returned %d", h->run_size);
        kvm_host_close(h);
        return -ENOTSUP;
    }
    h->max_vcpus = ioctl(h->fd, KVM_CHECK_EXTENSION, KVM_CAP_MAX_VCPUS);
    if (h->max_vcpus <= 0)
        h->max_vcpus = ioctl(h->fd, KVM_CHECK_EXTENSION, KVM_CAP_NR_VCPUS);
    if (h->max_vcpus <= 0)
        h->max_vcpus = 4;  /* the API's documented minimum */
    int r = get_supported_cpuid(h);
    if (r == 0)
        r = get_msr_list(h);
    if (r < 0) {
        snprintf(why, whylen, "reading KVM's supported CPUID/MSRs: %s", strerror(-r));
        kvm_host_close(h);
        return r;
    }
    h->is_pvm = kvm_host_detect_pvm();
    h->is_svm = access("/sys/module/kvm_amd", F_OK) == 0;
    return 0;
}

void kvm_host_close(struct kvm_host *h)
{
    if (h->fd >= 0)
        close(h->fd);
    h->fd = -1;
    free(h->cpuid);
    h->cpuid = NULL;
    free(h->msrs);
    h->msrs = NULL;
    h->nmsrs = 0;
}

int kvm_create_vm(int kvm_fd)
{
    /* KVM_CREATE_VM fails with EINTR when a signal comes in while it sets
     * up (seen in the nested L1: 3 times in 30 probes under load); that is
     * no answer about the host, so try again. */
    for (int tries = 0;; tries++) {
        int fd = ioctl(kvm_fd, KVM_CREATE_VM, 0);
        if (fd >= 0)
            return fd;
        if (errno != EINTR || tries >= 100)
            return -errno;
    }
}

bool kvm_host_has_msr(const struct kvm_host *h, uint32_t msr)
{
    for (unsigned i = 0; i < h->nmsrs; i++)
        if (h->msrs[i] == msr)
            return true;
    return false;
}

bool cpuinfo_has_flag(const char *text, const char *flag)
{
    size_t fl = strlen(flag);
    for (const char *line = text; line && *line;) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        /* "flags\t\t: fpu vme ..." (not "vmx flags" or "bugs"). */
        if (len > 5 && !strncmp(line, "flags", 5) && (line[5] == ' ' || line[5] == '\t' || line[5] == ':')) {
            const char *p = memchr(line, ':', len);
            if (!p)
                return false;
            const char *end = line + len;
            for (p++; p < end;) {
                while (p < end && (*p == ' ' || *p == '\t'))
                    p++;
                const char *w = p;
                while (p < end && *p != ' ' && *p != '\t')
                    p++;
                if ((size_t)(p - w) == fl && !memcmp(w, flag, fl))
                    return true;
            }
            return false;   /* only the first CPU's line counts */
        }
        line = eol ? eol + 1 : NULL;
    }
    return false;
}

/* /proc/cpuinfo, whole (it has no size; read until EOF), NUL-terminated. */
static char *read_cpuinfo(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    while (b) {
        size_t n = fread(b + len, 1, cap - len - 1, f);
        len += n;
        if (n == 0 || len > (4u << 20))
            break;
        if (cap - len - 1 == 0) {
            char *nb = realloc(b, cap * 2);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (b)
        b[len] = 0;
    return b;
}

bool kvm_host_detect_pvm_why(char *why, size_t len)
{
    char dummy[1];
    if (!why || !len) {
        why = dummy;
        len = sizeof dummy;
    }
    const char *force = getenv("MOAT_FORCE_PVM");
    if (force && (*force == '0' || *force == '1') && !force[1]) {
        snprintf(why, len, "MOAT_FORCE_PVM=%c", *force);
        return *force == '1';
    }
    return kvm_host_probe_pvm_why(why, len);
}

bool kvm_host_probe_pvm_why(char *why, size_t len)
{
    char dummy[1];
    if (!why || !len) {
        why = dummy;
        len = sizeof dummy;
    }
    if (access("/sys/module/kvm_pvm", F_OK) == 0) {
        snprintf(why, len, "the kvm_pvm module is loaded");
        return true;
    }
    /* A KVM without vmx/svm in the host's CPU flags is not hardware KVM. */
    char *info = read_cpuinfo();
    if (!info) {
        snprintf(why, len, "/proc/cpuinfo unreadable; assuming hardware KVM");
        return false;
    }
    bool seen = strstr(info, "\nflags") || !strncmp(info, "flags", 5);
    bool vmx = cpuinfo_has_flag(info, "vmx"), svm = cpuinfo_has_flag(info, "svm");
    free(info);
    if (seen && !vmx && !svm) {
        snprintf(why, len, "no vmx or svm in /proc/cpuinfo's flags");
        return true;
    }
    snprintf(why, len, "%s in /proc/cpuinfo's flags", vmx ? "vmx" : svm ? "svm" : "no flags line");
    return false;
}

bool kvm_host_detect_pvm(void)
{
    return kvm_host_detect_pvm_why(NULL, 0);
}

/* Feature bits (leaf, register, bit). */
#define L1_ECX_VMX      (1u << 5)
#define L1_ECX_PDCM     (1u << 15)
#define L1_ECX_CX16     (1u << 13)
#define L1_ECX_PCID     (1u << 17)
#define L1_ECX_POPCNT   (1u << 23)
#define L1_ECX_XSAVE    (1u << 26)
#define L1_ECX_OSXSAVE  (1u << 27)
#define L1_ECX_HYPERVISOR (1u << 31)
#define L7_EBX_FSGSBASE (1u << 0)
#define L7_EBX_SMEP     (1u << 7)
#define L7_EBX_INVPCID  (1u << 10)
#define L7_EBX_SMAP     (1u << 20)
#define L7_ECX_RDPID    (1u << 22)
#define LX1_ECX_SVM     (1u << 2)
#define LX1_EDX_RDTSCP  (1u << 27)

void cpuid_filter(struct kvm_cpuid_entry2 *e, unsigned n, unsigned cpu, unsigned ncpus, bool pvm)
{
    for (unsigned i = 0; i < n; i++) {
        struct kvm_cpuid_entry2 *x = &e[i];
        switch (x->function) {
        case 1:
            x->ebx = (x->ebx & 0x0000ffffu) | (cpu << 24) | ((ncpus & 0xff) << 16);
            x->ecx |= L1_ECX_HYPERVISOR;
            x->ecx &= ~(L1_ECX_VMX | L1_ECX_PDCM);  /* no nested virt, no perf caps */
            if (ncpus > 1)
                x->edx |= 1u << 28;                   /* HTT: the count in EBX is valid */
            if (pvm)
                x->ecx &= ~(L1_ECX_CX16 | L1_ECX_PCID | L1_ECX_POPCNT | L1_ECX_XSAVE | L1_ECX_OSXSAVE);
            break;
        case 7:
            if (x->index == 0 && pvm) {
                x->ebx &= ~(L7_EBX_FSGSBASE | L7_EBX_SMEP | L7_EBX_INVPCID | L7_EBX_SMAP);
                x->ecx &= ~L7_ECX_RDPID;
            }
            break;
        case 0xa:  /* no virtual PMU */
            x->eax = x->ebx = x->ecx = x->edx = 0;
            break;
        case 0xb:
        case 0x1f:
            x->edx = cpu;  /* x2APIC id */
            break;
        case 0xd:
            if (pvm)
                x->eax = x->ebx = x->ecx = x->edx = 0;
            break;
        case 0x80000001:
            x->ecx &= ~LX1_ECX_SVM;
            if (pvm)
                x->edx &= ~LX1_EDX_RDTSCP;
            break;
        default:
            break;
        }
    }
}

/* Measured on PVM (docs/boot.md): XRSTOR fails at ring 0, and these features
 * fail at ring 0 whatever the guest's CPUID says, so Linux is told to ignore
 * them. 6.1's clearcpuid= takes X86_FEATURE_* numbers. */
const char *const pvm_cmdline_extras[] = {
    "noxsave",
    /* popcnt, rdpid, rdtscp, smap, smep, fsgsbase, pcid, invpcid, cx16 */
    "clearcpuid=151,534,59,308,295,288,145,298,141",
    NULL,
};
