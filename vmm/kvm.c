#include "vmm/kvm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

/* Capabilities moat cannot run without. */
static const struct { int cap; const char *name; } required_caps[] = {
    { KVM_CAP_USER_MEMORY, "KVM_CAP_USER_MEMORY" },
    { KVM_CAP_IRQCHIP, "KVM_CAP_IRQCHIP" },
    { KVM_CAP_PIT2, "KVM_CAP_PIT2" },
    { KVM_CAP_EXT_CPUID, "KVM_CAP_EXT_CPUID" },
    { KVM_CAP_IMMEDIATE_EXIT, "KVM_CAP_IMMEDIATE_EXIT" },
    { KVM_CAP_MP_STATE, "KVM_CAP_MP_STATE" },
};

static int get_supported_cpuid(struct kvm_host *h)
{
    for (unsigned n = 64; n <= 4096; n *= 2) {
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
    if (v != KVM_API_VERSION) {
        snprintf(why, whylen, "%s: KVM API version %d, moat needs %d", path, v, KVM_API_VERSION);
        kvm_host_close(h);
        return -ENOTSUP;
    }
    for (size_t i = 0; i < sizeof(required_caps) / sizeof(required_caps[0]); i++) {
        if (ioctl(h->fd, KVM_CHECK_EXTENSION, required_caps[i].cap) <= 0) {
            snprintf(why, whylen, "%s lacks %s", path, required_caps[i].name);
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

bool kvm_host_has_msr(const struct kvm_host *h, uint32_t msr)
{
    for (unsigned i = 0; i < h->nmsrs; i++)
        if (h->msrs[i] == msr)
            return true;
    return false;
}

bool kvm_host_detect_pvm(void)
{
    const char *force = getenv("MOAT_FORCE_PVM");
    if (force && (*force == '0' || *force == '1'))
        return *force == '1';
    if (access("/sys/module/kvm_pvm", F_OK) == 0)
        return true;
    /* A KVM without vmx/svm in the host's CPU flags is not hardware KVM. */
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return false;
    char line[4096];
    bool hw = false, seen_flags = false;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "flags", 5) != 0)
            continue;
        seen_flags = true;
        if (strstr(line, " vmx") || strstr(line, " svm"))
            hw = true;
        break;
    }
    fclose(f);
    return seen_flags && !hw;
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
