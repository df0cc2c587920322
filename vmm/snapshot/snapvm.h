/* The snapshot layer's part of a VM (vmm/snapshot/snapvm.c): its record,
 * registered with the VM as lifecycle hooks (vmm/core/vmhooks.h), and the
 * public moat_create, which gives every VM one. */
#ifndef MOAT_SNAPVM_H
#define MOAT_SNAPVM_H

#include <stdbool.h>
#include <stdint.h>

#include "include/moat.h"

struct moat_vm;
struct snapdiff_last;
struct snapmem_ring;
struct wset;

#define VM_MAX_BACKING 17          /* a memory file and 16 diff layers */

struct snapvm {
    bool restoring;               /* moat_restore's: KVM may refuse dirty logging */
    /* Diff snapshots (vmm/snapshot/snapdiff.c): pages written since the last
     * snapshot, one bit per page of ram (vm->mem.dirty points here): the
     * host's own writes, plus KVM's dirty log once harvested. */
    bool dirty_log;               /* slots have KVM_MEM_LOG_DIRTY_PAGES */
    uint64_t *dirty;
    struct snapdiff_last *last_snap;  /* the snapshot a diff would be against, or NULL */
    /* Working-set record or prefetch of a restored VM (vmm/snapshot/wset.h), or NULL. */
    struct wset *wset;
    /* Restore of a diff chain or from a uffd backend: maps the pages over
     * ram before the memory slots are registered (NULL: nothing to do). */
    int (*map_hook)(struct moat_vm *vm, void *arg);
    void *map_hook_arg;
    /* Restore with a uffd memory backend (vmm/snapshot/uffd.h): the
     * userfaultfd and the connection to the page-fault handler, kept for
     * the VM's life (the handler may watch the connection); -1. */
    int uffd, uffd_sock;
    /* Snapshot writing (vmm/snapshot/snapmem.c): the files a restored VM's
     * RAM is mapped from (dup'ed; the memory file and any diff layers) and,
     * once computed, the pages they hold data for; the last snapshot's
     * figures (under vm->lock). */
    int backing_fd[VM_MAX_BACKING];
    unsigned nbacking;
    uint64_t *backing_data;
    struct snapmem_ring *snap_ring; /* the memory file's writes (NULL: pwrite) */
    struct moat_snapshot_stats snap_stats;
};

/* Give vm its snapshot record (restoring: made by moat_restore) and
 * register its hooks; *out (if not NULL) is the record. 0 or -errno. */
int snapvm_attach(struct moat_vm *vm, bool restoring, struct snapvm **out);
/* vm's record (every VM moat_create or moat_restore made has one). */
struct snapvm *snapvm_of(const struct moat_vm *vm);

#endif
