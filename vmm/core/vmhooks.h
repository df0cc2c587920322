/* Lifecycle hooks (vmm/core/vmhooks.c): how the layers above the core
 * (snapshot, agent) take part in a VM's life without the core calling up
 * into them. A layer registers a table of hooks and its own record (ctx)
 * with one VM; the core calls them at fixed points of that VM's life. The
 * hooks live in the VM (no process-global state): two VMs in one process
 * have their own.
 *
 * Order: set-up steps (mem_setup, restored, start, paused) run in
 * registration order; tear-down steps (mem_refused, stopped, release,
 * destroy) in reverse, as a stack unwinds. A fallible hook returns 0 or
 * -errno; the first error stops the step (later hooks are not called) and
 * the step fails with that code and its usual message. */
#ifndef MOAT_VMHOOKS_H
#define MOAT_VMHOOKS_H

#include <stdint.h>

struct moat_vm;

#define VM_MAX_HOOKS 4

struct vm_hook_ops {
    const char *name;           /* in log lines */
    /* vm_setup_kvm: guest RAM is mapped and vm->mem's regions are set,
     * its memory slots not yet registered. May map over RAM and may ask
     * for slot flags (KVM_MEM_*) by or-ing them into *slot_flags. */
    int (*mem_setup)(struct moat_vm *vm, void *ctx, uint32_t *slot_flags);
    /* KVM refused the slot flags asked for (EINVAL): 0 if this hook can do
     * without them (the slots are registered again without any), or
     * -errno to fail the step. */
    int (*mem_refused)(struct moat_vm *vm, void *ctx);
    /* A restored device's kind asked for a fix-up once the VM runs (its
     * restored() said so; vmm/core/devtab.c). */
    void (*restored)(struct moat_vm *vm, void *ctx, unsigned slot);
    /* moat_start: every VM thread has started. */
    int (*start)(struct moat_vm *vm, void *ctx);
    /* moat_pause: every vCPU is parked; the devices are not stopped yet. */
    void (*paused)(struct moat_vm *vm, void *ctx);
    /* moat_destroy: the vCPU and console threads have been joined; the
     * devices still exist. Stop the hook's own threads here. */
    void (*stopped)(struct moat_vm *vm, void *ctx);
    /* vm_free, first: before the devices and guest RAM go (stop anything
     * that still reads guest RAM). Also for a VM that never started. */
    void (*release)(struct moat_vm *vm, void *ctx);
    /* vm_free, last: guest RAM is unmapped; free ctx. */
    void (*destroy)(struct moat_vm *vm, void *ctx);
};

struct vm_hook {
    const struct vm_hook_ops *ops;
    void *ctx;
};

/* Register ops with ctx on vm (ops: static storage; ctx owned by the hooks
 * from here on: their destroy frees it). 0, -EEXIST (ops already
 * registered on vm) or -ENOSPC (VM_MAX_HOOKS). */
int vm_hooks_add(struct moat_vm *vm, const struct vm_hook_ops *ops, void *ctx);
/* The ctx registered with ops on vm, or NULL. */
void *vm_hook_ctx(const struct moat_vm *vm, const struct vm_hook_ops *ops);

/* The core's calls (vmm/core/vm.c, devtab.c). */
int vm_hooks_mem_setup(struct moat_vm *vm, uint32_t *slot_flags);
int vm_hooks_mem_refused(struct moat_vm *vm);
void vm_hooks_restored(struct moat_vm *vm, unsigned slot);
int vm_hooks_start(struct moat_vm *vm);
void vm_hooks_paused(struct moat_vm *vm);
void vm_hooks_stopped(struct moat_vm *vm);
void vm_hooks_release(struct moat_vm *vm);
void vm_hooks_destroy(struct moat_vm *vm);

#endif
