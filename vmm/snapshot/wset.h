/* Working-set prefetch on restore (docs/snapshot-format.md, "Working-set
 * prefetch"): the first restore of a snapshot records which pages of guest
 * RAM were touched (from /proc/self/pagemap: the host page table entries
 * KVM's faults populated) into MEMORY.ws; later restores populate those
 * pages from a helper thread (MADV_WILLNEED, then MADV_POPULATE_READ)
 * while the guest starts. The file format is vmm/snapshot/wsfile.h. */
#ifndef MOAT_WSET_H
#define MOAT_WSET_H

#include <stdbool.h>
#include <stdint.h>

struct moat_vm;

/* How long after the restore the working set is recorded, at the latest
 * (it is recorded earlier at the first pause, e.g. a snapshot, or when the
 * VM is destroyed), unless moat_restore_config.ws_record_ms says. */
#define WSET_RECORD_MS 10000u

/* At the end of a successful moat_restore of mem_path (the snapshot's
 * state file checksum state_sum): prefetch the recorded working set if
 * MEM_PATH.ws is this snapshot's (unless no_prefetch), else record one
 * (within record_ms; 0: WSET_RECORD_MS).
 * Failures are logged, never fatal: 0 or -errno. */
int wset_restore_start(struct moat_vm *vm, const char *mem_path, uint64_t state_sum, bool no_prefetch,
                       uint32_t record_ms);

/* The VM is paused or has stopped: record now if recording (the caller
 * may be about to read all of guest RAM). No-op otherwise. */
void wset_capture(struct moat_vm *vm);

/* Stop and join the helper thread, free everything (before RAM goes). */
void wset_free(struct moat_vm *vm);

/* Test and diagnostics: what the helper did. */
struct wset_stats {
    int mode;                 /* 0 none, 1 recording, 2 prefetching */
    bool done;                /* recorded / prefetch finished */
    uint64_t pages;           /* pages recorded / prefetched */
    uint64_t ranges;
    uint64_t ns;              /* how long the record / prefetch took */
    bool populate_fallback;   /* MADV_POPULATE_READ refused: pages read one by one */
};
void wset_get_stats(struct moat_vm *vm, struct wset_stats *st);

#endif
