/* The host probe (include/moat.h, docs/host.md): what this machine's KVM
 * is — hardware, PVM or none — and what moat can run on it. The library's
 * moat_host_info(), the CLI's `moat host`, and through `moat host --kind`
 * every test script, benchmark and the Makefile use this one probe. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "devices/blk/blk_uring.h"
#include "include/moat.h"
#include "vmm/core/host.h"
#include "vmm/core/kvm.h"

const char *moat_host_kind_name(int kind)
{
    switch (kind) {
    case MOAT_HOST_KVM: return "kvm";
    case MOAT_HOST_PVM: return "pvm";
    case MOAT_HOST_NONE: return "none";
    default: return NULL;
    }
}

int host_classify(const struct host_facts *f, char *why, size_t len)
{
    if (f->open_rc < 0) {
        snprintf(why, len, "no usable KVM: %s", f->open_why && *f->open_why ? f->open_why : strerror(-f->open_rc));
        return MOAT_HOST_NONE;
    }
    if (f->pvm) {
        snprintf(why, len, "PVM, software virtualization (%s): small guests run, Linux guests "
                 "never reach user space", f->pvm_why && *f->pvm_why ? f->pvm_why : "detected");
        return MOAT_HOST_PVM;
    }
    const char *m = f->module && *f->module ? f->module : "KVM";
    snprintf(why, len, "hardware KVM (%s%s%s)", m, f->pvm_why && *f->pvm_why ? ", " : "",
             f->pvm_why ? f->pvm_why : "");
    return MOAT_HOST_KVM;
}

static void vendor_module(char *out, size_t len)
{
    static const char *const mods[] = { "kvm_pvm", "kvm_intel", "kvm_amd" };
    out[0] = 0;
    for (unsigned i = 0; i < sizeof mods / sizeof mods[0]; i++) {
        char p[64];
        snprintf(p, sizeof p, "/sys/module/%s", mods[i]);
        if (access(p, F_OK) == 0) {
            snprintf(out, len, "%s", mods[i]);
            return;
        }
    }
}

/* Fill what fits in info->size; the five original fields always fit. */
int moat_host_info(struct moat_host_info *user)
{
    if (!user || user->size < offsetof(struct moat_host_info, kind))
        return -EINVAL;
    struct moat_host_info info;
    memset(&info, 0, sizeof info);
    size_t size = user->size < sizeof info ? user->size : sizeof info;

    const char *dev = getenv("MOAT_KVM_DEV");
    snprintf(info.device, sizeof info.device, "%s", dev && *dev ? dev : "/dev/kvm");
    vendor_module(info.module, sizeof info.module);

    struct kvm_host h;
    char open_why[200] = "", pvm_why[120] = "";
    int r = kvm_host_open(&h, open_why, sizeof open_why);
    bool pvm = kvm_host_detect_pvm_why(pvm_why, sizeof pvm_why);
    info.is_pvm = pvm;
    info.api_version = h.api_version;
    if (r == 0) {
        /* Opening is not enough: some hosts refuse the VM itself. */
        int vmfd = kvm_create_vm(h.fd);
        if (vmfd < 0) {
            r = vmfd;
            snprintf(open_why, sizeof open_why, "%s: KVM_CREATE_VM failed: %s", info.device, strerror(-r));
            kvm_host_close(&h);
        } else {
            close(vmfd);
        }
    }
    if (r == 0) {
        info.kvm_available = 1;
        info.max_vcpus = h.max_vcpus;
        for (unsigned i = 0; i < kvm_ncaps_used && info.ncaps < MOAT_HOST_MAX_CAPS; i++) {
            struct moat_host_cap *c = &info.caps[info.ncaps++];
            snprintf(c->name, sizeof c->name, "%s", kvm_caps_used[i].name);
            int v = ioctl(h.fd, KVM_CHECK_EXTENSION, kvm_caps_used[i].cap);
            c->value = v > 0 ? v : 0;
            c->required = kvm_caps_used[i].required;
        }
        kvm_host_close(&h);
    } else {
        info.kvm_errno = -r;
    }
    struct host_facts f = {
        .open_rc = r, .open_why = open_why, .pvm = pvm, .pvm_why = pvm_why, .module = info.module,
    };
    info.kind = host_classify(&f, info.reason, sizeof info.reason);

    info.io_uring = blk_uring_available(info.io_uring_reason, sizeof info.io_uring_reason);

    size_t want = user->size;
    info.size = want;
    memcpy(user, &info, size);
    if (want > size)
        memset((char *)user + size, 0, want - size);
    return 0;
}

int moat_host_kind(char *why, size_t whylen)
{
    struct moat_host_info info = { .size = sizeof info };
    if (moat_host_info(&info) < 0)
        return MOAT_HOST_UNKNOWN;
    if (why && whylen)
        snprintf(why, whylen, "%s", info.reason);
    return info.kind;
}
