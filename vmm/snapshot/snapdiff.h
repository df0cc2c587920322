/* Diff snapshots, the VM side (vmm/snapshot/snapdiff.c): dirty-page tracking (KVM's
 * dirty log for vCPU writes, struct gmem's bitmap for moat's own), writing
 * a diff's memory file, and stacking a chain of diffs at restore. The
 * format is in vmm/snapshot/snapchain.h and docs/snapshot-format.md. */
#ifndef MOAT_SNAPDIFF_H
#define MOAT_SNAPDIFF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "vmm/snapshot/snapchain.h"
#include "vmm/snapshot/snapfmt.h"
#include "vmm/core/vm.h"

/* The snapshot a diff would be against: the VM's last one (written or
 * restored from). Paths absolute. */
struct snapdiff_last {
    char *state_path, *mem_path;
    uint64_t checksum;    /* its state file's header checksum */
    uint32_t depth;       /* 0: a full snapshot */
};

/* Guest RAM is mapped and vm->mem's regions are set (snapvm.c's mem_setup
 * hook): with MOAT_F_DIRTY_LOG in vm->flags, allocate the bitmap
 * (snapvm.dirty) and attach it to vm->mem. Returns the
 * memory-slot flags to use (KVM_MEM_LOG_DIRTY_PAGES or 0), or -errno. */
int snapdiff_setup(struct moat_vm *vm);
void snapdiff_free(struct moat_vm *vm);

/* VM paused, devices drained: fold KVM's dirty log into snapvm.dirty and
 * move it into *bm (snap_bitmap_words(ram_size) words, LE): snapvm.dirty is
 * clear afterwards, so pages written while the snapshot is finished
 * (the guest runs again before the files are durable) go to the next one. */
int snapdiff_collect(struct moat_vm *vm, uint64_t **bm);
/* KVM's log of written pages so far into the VM's written set (what
 * snapdiff_collect does first; safe while vCPUs run), and the number of
 * pages in that set: a diff's size as of now. */
int snapdiff_harvest(struct moat_vm *vm);
uint64_t snapdiff_count(struct moat_vm *vm);
/* The snapshot holding bm failed: put its pages back into snapvm.dirty. */
void snapdiff_giveback(struct moat_vm *vm, const uint64_t *bm);

/* Record the VM's last snapshot (paths resolved to absolute ones). */
int snapdiff_set_last(struct moat_vm *vm, const char *state_path, const char *mem_path,
                      uint64_t checksum, uint32_t depth);

/* -EEXIST if path names the same file as other (a diff must not overwrite
 * its own parent), else 0. */
int snapdiff_same_file(const char *path, const char *other);

/* Restore: the diffs under a state file, top first. */
struct snapdiff_layer {
    int mem_fd;
    uint8_t *state_buf;        /* owned; bm points into it (or into the top's) */
    const uint8_t *bm;
};
struct snapdiff_chain {
    unsigned n;                /* diff layers; 0: a full snapshot */
    uint32_t depth;            /* the top's depth */
    struct snapdiff_layer l[SNAP_DIFF_MAX_DEPTH];
    char *base_mem;            /* the full snapshot's memory file (n > 0) */
    int base_fd;               /* ... opened (n > 0; -1 when taken or none) */
    char *root;                /* the resolved snapshot root (n > 0) */
    int root_fd;               /* ... opened (O_PATH), or -1 */
    uint64_t mem_size;
};
/* The top state file is parsed (secs) and its metadata checked (mem_size):
 * follow its parents down to the full snapshot, checking each one (parsed,
 * checksum equal to the recorded one, same memory size, depths in order)
 * and each diff memory file (exact size). Every file a state file names
 * (parents' state and memory files, the base memory file) must lie beneath
 * root (NULL: the top state file's directory) and is opened there with no
 * symlink followed (-EACCES otherwise: a forged state file must not map
 * another sandbox's memory or a host file as guest RAM). Errors are
 * configuration errors with the file named. Initialize a chain that may be
 * closed without being opened with base_fd = root_fd = -1. */
int snapdiff_chain_open(struct snapdiff_chain *c, const char *state_path, const char *mem_path,
                        const char *root, const struct snap_section *secs, size_t nsecs,
                        uint64_t mem_size, struct moat_error *err);
/* snapvm.map_hook: map every diff's pages over the base mapping (MAP_FIXED,
 * MAP_PRIVATE; bottom diff first), or read them in when there are too many
 * runs for mappings. */
int snapdiff_map(struct moat_vm *vm, void *arg);
void snapdiff_chain_close(struct snapdiff_chain *c);

/* moat_snapshot / moat_snapshot_diff (vmm/snapshot/snapshot.c). precheck: before
 * pausing, the diff's preconditions (the errors in include/moat.h).
 * sections: VM paused; with tracking, collect the written pages into *bm
 * (free it; they are no longer in snapvm.dirty: snapdiff_giveback if the
 * snapshot fails), and for a diff add the parent and bitmap sections.
 * done: both files durable; make this the VM's last snapshot (depth 0
 * after a full one). */
int snapdiff_precheck(struct moat_vm *vm, const char *state_path, const char *mem_path);
int snapdiff_sections(struct moat_vm *vm, struct snap_writer *w, bool diff, uint64_t **bm);
void snapdiff_done(struct moat_vm *vm, const char *state_path, const char *mem_path,
                   const uint8_t *state, size_t len, bool diff, const uint64_t *bm);

/* Shared by snapshot.c and snapdiff.c: pwrite all of buf at off (retrying
 * short writes and EINTR), 0 or -errno; whether a guest page is all zero. */
int snap_pwrite_all(int fd, const void *buf, size_t len, off_t off);
bool snap_page_is_zero(const uint8_t *p);

#endif
