/* The snapshot layer's record of a VM and its lifecycle hooks
 * (vmm/snapshot/snapvm.h, vmm/core/vmhooks.h). */
#include "vmm/snapshot/snapvm.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vmm/base/log.h"
#include "vmm/core/vm.h"
#include "vmm/core/vmhooks.h"
#include "vmm/snapshot/snapdiff.h"
#include "vmm/snapshot/snapmem.h"
#include "vmm/snapshot/wset.h"

/* A restored chain's pages over the base (or the uffd backend's
 * registration), then dirty-page tracking. */
static int hook_mem_setup(struct moat_vm *vm, void *ctx, uint32_t *slot_flags)
{
    struct snapvm *sv = ctx;
    int r = sv->map_hook ? sv->map_hook(vm, sv->map_hook_arg) : 0;
    if (r < 0)
        return r;
    int flags = snapdiff_setup(vm);
    if (flags < 0)
        return flags;
    *slot_flags |= (uint32_t)flags;
    return 0;
}

/* A restore tracks writes (for diff snapshots) where KVM can; where it
 * refuses dirty logging, restore without it. A VM created with
 * MOAT_F_DIRTY_LOG fails instead. */
static int hook_mem_refused(struct moat_vm *vm, void *ctx)
{
    struct snapvm *sv = ctx;
    if (!sv->dirty_log)
        return 0;
    if (!sv->restoring)
        return -EINVAL;
    log_debug("restore: no dirty logging (%s): diff snapshots off", strerror(EINVAL));
    snapdiff_free(vm);
    return 0;
}

/* Paused (a snapshot may read all of guest RAM next) or stopped: a restore
 * recording its working set records it now. */
static void hook_capture(struct moat_vm *vm, void *ctx)
{
    (void)ctx;
    wset_capture(vm);
}

static void hook_release(struct moat_vm *vm, void *ctx)
{
    (void)ctx;
    wset_free(vm);          /* its helper thread reads guest RAM */
}

static void hook_destroy(struct moat_vm *vm, void *ctx)
{
    struct snapvm *sv = ctx;
    snapdiff_free(vm);
    snapmem_free(vm);
    snapmem_ring_free(sv->snap_ring);
    if (sv->uffd >= 0)
        close(sv->uffd);
    if (sv->uffd_sock >= 0)
        close(sv->uffd_sock);
    free(sv);
}

static const struct vm_hook_ops snapvm_ops = {
    .name = "snapshot",
    .mem_setup = hook_mem_setup,
    .mem_refused = hook_mem_refused,
    .paused = hook_capture,
    .stopped = hook_capture,
    .release = hook_release,
    .destroy = hook_destroy,
};

struct snapvm *snapvm_of(const struct moat_vm *vm)
{
    return vm_hook_ctx(vm, &snapvm_ops);
}

int snapvm_attach(struct moat_vm *vm, bool restoring, struct snapvm **out)
{
    struct snapvm *sv = calloc(1, sizeof(*sv));
    if (!sv)
        return -ENOMEM;
    sv->restoring = restoring;
    sv->uffd = sv->uffd_sock = -1;
    /* Here, on the thread creating the VM, before any filter of its own:
     * no filtered thread may create a ring. */
    int rr = snapmem_ring_new(&sv->snap_ring);
    if (rr < 0)
        log_debug("snapshot: no io_uring (%s): memory files are written with pwrite", strerror(-rr));
    int r = vm_hooks_add(vm, &snapvm_ops, sv);
    if (r < 0) {
        snapmem_ring_free(sv->snap_ring);
        free(sv);
        return r;
    }
    if (out)
        *out = sv;
    return 0;
}

static int attach_create(struct moat_vm *vm, void *arg)
{
    (void)arg;
    return snapvm_attach(vm, false, NULL);
}

/* A booted VM: the core's, with the snapshot record every VM carries (a
 * snapshot of it may be taken; diff snapshots track its writes). */
int moat_create(const struct moat_config *cfg, struct moat_vm **out, struct moat_error *err)
{
    return vm_create(cfg, out, err, attach_create, NULL);
}
