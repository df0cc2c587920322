/* Lifecycle hooks: the table each VM keeps and the core's calls into it
 * (vmm/core/vmhooks.h). */
#include "vmm/core/vmhooks.h"

#include <errno.h>
#include <string.h>

#include "vmm/base/log.h"
#include "vmm/core/vm.h"

int vm_hooks_add(struct moat_vm *vm, const struct vm_hook_ops *ops, void *ctx)
{
    if (!vm || !ops)
        return -EINVAL;
    for (unsigned i = 0; i < vm->nhooks; i++)
        if (vm->hooks[i].ops == ops)
            return -EEXIST;
    if (vm->nhooks >= VM_MAX_HOOKS)
        return -ENOSPC;
    vm->hooks[vm->nhooks++] = (struct vm_hook){ ops, ctx };
    return 0;
}

void *vm_hook_ctx(const struct moat_vm *vm, const struct vm_hook_ops *ops)
{
    for (unsigned i = 0; i < vm->nhooks; i++)
        if (vm->hooks[i].ops == ops)
            return vm->hooks[i].ctx;
    return NULL;
}

/* One failed hook: say which (the caller's message says what failed). */
static int failed(const struct vm_hook *h, const char *step, int r)
{
    log_debug("%s: the %s hook failed: %s", step, h->ops->name ? h->ops->name : "?", strerror(-r));
    return r;
}

int vm_hooks_mem_setup(struct moat_vm *vm, uint32_t *slot_flags)
{
    for (unsigned i = 0; i < vm->nhooks; i++) {
        const struct vm_hook *h = &vm->hooks[i];
        int r = h->ops->mem_setup ? h->ops->mem_setup(vm, h->ctx, slot_flags) : 0;
        if (r < 0)
            return failed(h, "guest memory", r);
    }
    return 0;
}

int vm_hooks_mem_refused(struct moat_vm *vm)
{
    for (unsigned i = vm->nhooks; i-- > 0;) {
        const struct vm_hook *h = &vm->hooks[i];
        int r = h->ops->mem_refused ? h->ops->mem_refused(vm, h->ctx) : 0;
        if (r < 0)
            return failed(h, "guest memory", r);
    }
    return 0;
}

void vm_hooks_restored(struct moat_vm *vm, unsigned slot)
{
    for (unsigned i = 0; i < vm->nhooks; i++)
        if (vm->hooks[i].ops->restored)
            vm->hooks[i].ops->restored(vm, vm->hooks[i].ctx, slot);
}

int vm_hooks_start(struct moat_vm *vm)
{
    for (unsigned i = 0; i < vm->nhooks; i++) {
        const struct vm_hook *h = &vm->hooks[i];
        int r = h->ops->start ? h->ops->start(vm, h->ctx) : 0;
        if (r < 0)
            return failed(h, "start", r);
    }
    return 0;
}

void vm_hooks_paused(struct moat_vm *vm)
{
    for (unsigned i = 0; i < vm->nhooks; i++)
        if (vm->hooks[i].ops->paused)
            vm->hooks[i].ops->paused(vm, vm->hooks[i].ctx);
}

void vm_hooks_stopped(struct moat_vm *vm)
{
    for (unsigned i = vm->nhooks; i-- > 0;)
        if (vm->hooks[i].ops->stopped)
            vm->hooks[i].ops->stopped(vm, vm->hooks[i].ctx);
}

void vm_hooks_release(struct moat_vm *vm)
{
    for (unsigned i = vm->nhooks; i-- > 0;)
        if (vm->hooks[i].ops->release)
            vm->hooks[i].ops->release(vm, vm->hooks[i].ctx);
}

void vm_hooks_destroy(struct moat_vm *vm)
{
    for (unsigned i = vm->nhooks; i-- > 0;)
        if (vm->hooks[i].ops->destroy)
            vm->hooks[i].ops->destroy(vm, vm->hooks[i].ctx);
    vm->nhooks = 0;
}
