/* The host side of KVM: /dev/kvm, API version, capabilities, supported
 * CPUID and MSRs, and whether the host is PVM. One struct kvm_host per VM
 * (each VM opens /dev/kvm itself; no process-global state). */
#ifndef MOAT_KVM_H
#define MOAT_KVM_H

#include <linux/kvm.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kvm_host {
    int fd;                       /* /dev/kvm */
    int api_version;              /* KVM_GET_API_VERSION (kept after a failed open) */
    int run_size;                 /* KVM_GET_VCPU_MMAP_SIZE */
    int max_vcpus;
    bool is_pvm;
    bool is_svm;                  /* KVM's vendor module is kvm_amd */
    struct kvm_cpuid2 *cpuid;     /* KVM_GET_SUPPORTED_CPUID, malloc'ed */
    uint32_t *msrs;               /* KVM_GET_MSR_INDEX_LIST */
    unsigned nmsrs;
};

/* Open /dev/kvm (path from $MOAT_KVM_DEV if set) and check the API version
 * and every capability moat needs. On failure returns -errno and writes a
 * one-line reason into why. */
int kvm_host_open(struct kvm_host *h, char *why, size_t whylen);
void kvm_host_close(struct kvm_host *h);
bool kvm_host_has_msr(const struct kvm_host *h, uint32_t msr);
/* KVM_CREATE_VM on /dev/kvm's fd, again while it is interrupted (EINTR):
 * the VM fd or -errno. */
int kvm_create_vm(int kvm_fd);

/* Is this host's KVM PVM (kvm_pvm, no vmx/svm)? Looks at /sys/module and
 * /proc/cpuinfo; MOAT_FORCE_PVM=0/1 overrides (for tests). The _why form
 * writes the one-line reason either way. */
bool kvm_host_detect_pvm(void);
bool kvm_host_detect_pvm_why(char *why, size_t len);
/* The same without MOAT_FORCE_PVM: what /sys and /proc say (a jail's probe,
 * as after its clearenv). */
bool kvm_host_probe_pvm_why(char *why, size_t len);

/* Does the first "flags" line of /proc/cpuinfo text name flag (a whole
 * word)? Pure. */
bool cpuinfo_has_flag(const char *cpuinfo, const char *flag);

/* The capabilities moat asks KVM for: the required ones (kvm_host_open
 * fails without them) and the ones it uses when present. */
struct kvm_cap_desc {
    int cap;
    const char *name;
    bool required;
    const char *use;      /* what moat uses it for */
};
extern const struct kvm_cap_desc kvm_caps_used[];
extern const unsigned kvm_ncaps_used;

/* Filter KVM's supported CPUID for one vCPU (pure, unit-tested): APIC ids,
 * hypervisor bit, no nested virtualization or PMU, and with pvm set the
 * features that fail at ring 0 under PVM. */
void cpuid_filter(struct kvm_cpuid_entry2 *e, unsigned n, unsigned cpu, unsigned ncpus, bool pvm);

/* The command-line words PVM compatibility adds (NULL-terminated list). */
extern const char *const pvm_cmdline_extras[];

#endif
