/* libmoat — embed the moat microVM monitor.
 *
 * One opaque handle per VM; any number of VMs per process. Every fallible
 * call returns 0 or a negative errno. The library never calls exit(), never
 * installs signal handlers except the one documented below, and keeps no
 * process-global VM state.
 *
 * ABI rule: this header grows by new functions, or by new fields at the end
 * of structs that carry their own size; signatures never change.
 *
 * Signals: to take vCPU threads out of KVM_RUN, moat sends them
 * MOAT_KICK_SIGNAL (SIGRTMIN + 7 unless moat_config.kick_signal says
 * otherwise). moat_start() installs a no-op handler for that signal if the
 * process has none (SIG_DFL). The signal is only ever sent to moat's own
 * vCPU threads. */
#ifndef MOAT_H
#define MOAT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOAT_API_VERSION 1

struct moat_vm;

/* Boot flags. */
#define MOAT_F_PVH            (1u << 0)  /* enter a vmlinux through its PVH note */
#define MOAT_F_NO_PVM_COMPAT  (1u << 1)  /* never apply the PVM workarounds */
#define MOAT_F_CONSOLE_ESCAPE (1u << 2)  /* Ctrl-A x on console input stops the VM */
#define MOAT_F_DIRTY_LOG      (1u << 3)  /* track written pages: moat_snapshot_diff */
#define MOAT_F_FORK_CHILD     (1u << 4)  /* moat_restore: a fork's child: its devices take an identity of
                                            their own (net: a new MAC unless an override gives one);
                                            moat_fork sets it */
#define MOAT_F_FC_THREAD_NAMES (1u << 5) /* vCPU threads are named "fc_vcpu N" (as Firecracker's, which
                                            orchestrators look for) instead of "moat_vcpu N" */
#define MOAT_F_NO_PREFETCH    (1u << 6)  /* moat_restore: do not prefetch the working set an earlier restore
                                            recorded (MEMORY.ws; docs/snapshot-format.md) */
/* Seccomp (docs/security.md, "Seccomp"): each thread the VM starts (vCPUs,
 * device I/O threads, console threads, a runner for device start/stop)
 * installs the allow-list of its kind on itself before it touches guest
 * memory; the caller's threads are never filtered. A call off the list
 * kills the process: a SIGSYS handler (installed if SIGSYS has none)
 * writes one line naming the thread kind and the system call to stderr and
 * calls _exit(MOAT_SECCOMP_EXIT). With MOAT_F_SECCOMP_AUDIT instead the call
 * goes through and the kernel logs it (audit type 1326). moat_restore and
 * moat_fork take the same flags. */
#define MOAT_F_SECCOMP        (1u << 7)
#define MOAT_F_SECCOMP_AUDIT  (1u << 8)  /* log, never kill (implies MOAT_F_SECCOMP) */
#define MOAT_SECCOMP_EXIT     159

struct moat_config {
    size_t size;              /* sizeof(struct moat_config); set by moat_config_init */
    const char *kernel;       /* path: bzImage, vmlinux, or any static ELF64 */
    const char *initrd;       /* path or NULL */
    const char *cmdline;      /* kernel command line; NULL: moat's default */
    const char *const *argv;  /* command for the guest's /init (after " -- "); may be NULL */
    size_t argc;
    uint32_t mem_mib;         /* guest RAM, MiB (default 256) */
    uint32_t cpus;            /* vCPUs (default 1) */
    int console_in;           /* fd read for UART input, or -1 */
    int console_out;          /* fd the UART writes to, or -1 to discard */
    uint32_t flags;           /* MOAT_F_* */
    int kick_signal;          /* 0: SIGRTMIN + 7 */
    /* virtio-blk drives, in order: the first is /dev/vda in a Linux guest
     * (virtio-mmio slot 0). Copied during moat_create. */
    const struct moat_drive *drives;
    size_t ndrives;           /* at most MOAT_MAX_DRIVES */
    /* virtio-vsock (slot after the drives), Firecracker hybrid-vsock host
     * side on this Unix socket path (docs/vsock.md); NULL: none. */
    const char *vsock_uds;
    uint32_t vsock_cid;       /* guest CID; 0: 3 */
    /* Copy-on-write drives: NULL, or ndrives entries, each NULL or the
     * overlay path for that drive. With an overlay, the drive's path is a
     * base image opened read-only (shared lock, never written) and the
     * guest's writes go to the overlay, created if missing (a reflink of
     * the base where the filesystem can, else moat's sparse format;
     * docs/disk-overlay.md). A base changed since its overlay was made is
     * refused. */
    const char *const *drive_overlays;
    /* NULL, or ndrives entries: nonzero opens that drive's image with
     * O_DIRECT, bypassing the host page cache (unaligned requests fall back
     * to a buffered descriptor; not with an overlay). */
    const int *drive_direct;
    /* At most this many bytes of UART output reach console_out (then one
     * note, and the rest is dropped); 0: no limit. */
    uint64_t console_limit;
    /* More devices by type and options (struct moat_device), in the slots
     * after the drives and the vsock device, in order. */
    const struct moat_device *devices;
    size_t ndevices;
    /* NULL, or bytes loaded right after the initrd (4-byte aligned), as
     * one initramfs: a newc cpio archive the kernel unpacks after the
     * initrd's (moat run --rootfs: the image's run config, docs/images.md). */
    const void *initrd_extra;
    size_t initrd_extra_len;
};

#define MOAT_MAX_DRIVES 16

/* A device given by its type and an option string, as `moat run --device
 * TYPE,OPTIONS` takes it: "key=value,flag,..." (docs/devices.md lists the
 * types and their options). "blk": path=FILE (required), ro, id=SERIAL,
 * overlay=FILE, direct — as a struct moat_drive. "vsock": uds=PATH
 * (required), cid=N — as moat_config.vsock_uds/vsock_cid (one per VM). */
struct moat_device {
    const char *type;
    const char *options;      /* NULL: none */
};

/* A disk image (or block device) the guest sees as a virtio-blk drive. The
 * file is locked while the VM lives (exclusive; shared when read_only). */
struct moat_drive {
    const char *path;
    const char *id;           /* serial (VIRTIO_BLK_T_GET_ID), <= 20 bytes, or NULL; also the
                               * drive's id in snapshots (each drive its own) */
    int read_only;            /* writes fail with an I/O error; the file is opened O_RDONLY */
};

/* Fill *cfg with defaults (256 MiB, 1 vCPU, console on -1/-1). */
void moat_config_init(struct moat_config *cfg);

/* Why a VM stopped. */
enum moat_exit_reason {
    MOAT_EXIT_NONE = 0,      /* still running */
    MOAT_EXIT_RESET,         /* the guest reset or powered off */
    MOAT_EXIT_CRASH,         /* triple fault, KVM internal/emulation error */
    MOAT_EXIT_STOPPED,       /* moat_stop() or the console escape */
    MOAT_EXIT_ERROR,         /* a VMM error while running */
};

struct moat_exit {
    enum moat_exit_reason reason;
    int status;              /* exit status reported by the guest (0..255), or -1 */
    char detail[160];        /* human-readable, one line */
};

/* Phase timestamps in microseconds since the process started (see
 * moat_timings_set_origin); -1 when the phase has not happened. */
struct moat_timings {
    int64_t kvm_ready;       /* VM created, memory, irqchip and vCPUs set up */
    int64_t first_run;       /* first KVM_RUN entered */
    int64_t init_reached;    /* the guest signalled "init reached" */
    int64_t cmd_finished;    /* the guest reported its exit status */
    int64_t exit;            /* the VM stopped */
};

/* Errors from moat_create: a one-line message, and whether the fault is in
 * the configuration (bad file, bad size, not a kernel) rather than the host. */
struct moat_error {
    int is_config;
    char msg[256];
};

/* Create a VM: validate the configuration, load the kernel, set up KVM.
 * Does not run it. err may be NULL. */
int moat_create(const struct moat_config *cfg, struct moat_vm **out, struct moat_error *err);

/* Start the vCPU threads. Non-blocking. */
int moat_start(struct moat_vm *vm);

/* Wait up to timeout_ms (-1: forever) for the VM to stop. 0 and *ex filled
 * when it stopped, -ETIMEDOUT if it still runs. */
int moat_wait(struct moat_vm *vm, int timeout_ms, struct moat_exit *ex);

/* Ask the VM to stop (asynchronous; moat_wait sees MOAT_EXIT_STOPPED). */
int moat_stop(struct moat_vm *vm);

/* Pause every vCPU (each leaves KVM_RUN with its pending exit completed)
 * and return once all are parked; resume continues exactly there.
 * -EALREADY if already paused (pause) or not paused (resume), -ESRCH if the
 * VM has stopped, -EINVAL if it was never started. */
int moat_pause(struct moat_vm *vm);
int moat_resume(struct moat_vm *vm);

/* An eventfd that becomes readable once the VM has stopped. Owned by vm. */
int moat_exit_fd(const struct moat_vm *vm);

/* The console: UART output goes into a buffer (1 MiB) that a thread of the
 * VM writes to console_out, so a reader that stops reading never stalls a
 * vCPU (nor moat_stop/pause/snapshot/destroy). When the buffer is full the
 * guest's bytes are dropped, counted here, marked in the stream with a
 * "[moat: N bytes of console output dropped]" line and logged at
 * moat_destroy. moat_wait, once the VM has stopped, and moat_destroy wait
 * for the buffer to empty while the reader keeps reading (giving up after
 * 200 ms in which it took nothing); moat_pause waits up to 20 ms for the
 * output from before the pause. A console_out fd keeps its own flags:
 * pipes and terminals are written through a non-blocking description of
 * moat's own, sockets with MSG_DONTWAIT. */
struct moat_console_info {
    size_t size;             /* sizeof(struct moat_console_info) */
    uint64_t written;        /* bytes that reached console_out */
    uint64_t dropped;        /* bytes lost: buffer full, or the fd failed */
    uint64_t queued;         /* bytes in the buffer now */
    uint64_t buffer_size;    /* 0 without a console_out */
    int capped;              /* console_limit was reached */
    int failed;              /* writing console_out failed (e.g. EPIPE): output stopped */
};
int moat_get_console(struct moat_vm *vm, struct moat_console_info *info);

/* What moat made of the configuration. */
struct moat_vm_info {
    size_t size;             /* sizeof(struct moat_vm_info) */
    int is_linux;            /* the kernel is Linux (bzImage or vmlinux) */
    int pvm_compat;          /* the PVM workarounds are applied */
    char cmdline[4096];      /* the kernel command line (truncated if longer) */
};
int moat_get_info(const struct moat_vm *vm, struct moat_vm_info *info);

/* Timestamps of the boot phases. */
int moat_get_timings(const struct moat_vm *vm, struct moat_timings *t);

/* Wait up to timeout_ms (-1: forever, 0: just check) until a vCPU of the
 * started vm has entered KVM_RUN (moat_timings.first_run is set): the guest
 * runs. 0; -ETIMEDOUT; -ESRCH if the VM stopped first; -EINVAL if it was
 * never started. For fork fan-out: start every child, then wait for each. */
int moat_wait_running(struct moat_vm *vm, int timeout_ms);

/* Press and release Ctrl+Alt+Del on the VM's PS/2 keyboard (the i8042 at
 * ports 0x60/0x64, IRQ 1), as Firecracker's SendCtrlAltDel does: a Linux
 * guest with its i8042 and atkbd drivers restarts (or tells init), which
 * ends the VM with MOAT_EXIT_RESET under reboot=k. 0 once the scancodes are
 * queued (whether the guest reads them is up to the guest); -ENOBUFS if the
 * keyboard still holds earlier ones the guest has not read; -ESRCH if the
 * VM has stopped; -EINVAL if it was never started. */
int moat_send_ctrl_alt_del(struct moat_vm *vm);

/* Stop (if running), join every thread, free everything. NULL is a no-op. */
void moat_destroy(struct moat_vm *vm);

/* The process-start reference for moat_timings, as CLOCK_MONOTONIC
 * nanoseconds. Defaults to the first moat call; the CLI sets it to its own
 * start. Returns the origin in use. */
uint64_t moat_timings_set_origin(uint64_t monotonic_ns);

/* ---- snapshots (docs/snapshot-format.md) ----
 *
 * moat_snapshot writes guest RAM to mem_path (sparse: zero pages are holes)
 * and every vCPU's, the VM's and the devices' state to state_path (a
 * versioned, checksummed file). A running VM is paused while its state is
 * taken and its RAM is written out to the memory file, and resumed before
 * the files are flushed; a paused one stays paused. Only pages that exist
 * (or, for a restored VM, that its memory files hold) are read. Drives are included (their
 * virtio transport and queue state, and their image paths; the images
 * themselves are not copied: the guest's disk is the image file as it is at
 * restore; with an overlay, pin it with moat_clone_overlay). The vsock
 * device is included too (its CID and socket path; its connections are
 * not: the restored guest gets a transport reset, docs/vsock.md); -ENOTSUP
 * for a device that cannot be saved (a vhost-user one). Files are written under a temporary name, fsync'ed
 * (together) and renamed, memory first, and the directory is fsync'ed (the old state file at state_path is removed just
 * before the new memory file replaces the old one, so a crash never leaves a
 * mismatched pair). -EBUSY while another snapshot of the same VM runs.
 *
 * moat_restore creates a VM from those files: the memory file is mapped
 * MAP_PRIVATE (lazy, copy-on-write: many restores of one file share its
 * pages until they write), its size is checked against the state file
 * first, and the state file's size cap, checksum and version are checked
 * before anything is used. moat_start then runs it from where it stopped. */
int moat_snapshot(struct moat_vm *vm, const char *state_path, const char *mem_path);

/* moat_snapshot_diff writes a diff snapshot: the same state file, naming its
 * parent (the VM's last snapshot: the last moat_snapshot or
 * moat_snapshot_diff that succeeded, or the snapshot it was restored from)
 * by absolute path and checksum, plus a page bitmap; the memory file holds
 * only the pages written since the parent (sparse, everything else a
 * hole). The VM must track written pages: MOAT_F_DIRTY_LOG at create;
 * every restored VM does (where KVM allows dirty logging). Pages
 * written by vCPUs (KVM's dirty log) and by moat's devices are included.
 * The written set is cleared only once both files are durable, so a failed
 * diff loses nothing. moat_restore of a diff follows the parents down to
 * the full snapshot (each checked: present, same checksum, same memory
 * size) and maps the base memory file and then each diff's pages over it,
 * all MAP_PRIVATE (lazy, copy-on-write). The parents must stay in place,
 * unchanged. Errors: -ENOTSUP (no tracking), -ENODATA (no snapshot yet to
 * diff against), -EMLINK (the chain would be deeper than 16 diffs: take a
 * full snapshot), -EEXIST (the paths name the parent's own files), -EFBIG
 * (RAM over 256 GiB), and those of moat_snapshot. */
int moat_snapshot_diff(struct moat_vm *vm, const char *state_path, const char *mem_path);

/* Figures of the VM's last successful moat_snapshot / moat_snapshot_diff
 * (all zero before one). paused_us is how long the guest could not run
 * because of it: a running VM is resumed as soon as guest RAM has been
 * copied out to the memory file, before the files are flushed; for a VM
 * that was already paused it is the whole call. See docs/snapshot-format.md,
 * "Writing". -EINVAL for a NULL argument or a size below the first fields. */
struct moat_snapshot_stats {
    size_t size;             /* sizeof(struct moat_snapshot_stats) */
    int diff;                /* 1: a diff snapshot */
    int direct;              /* the memory file was written with O_DIRECT */
    int uring;               /* ... through io_uring */
    int64_t total_us;        /* the whole call, until both files are durable */
    int64_t paused_us;       /* the guest kept from running by it */
    int64_t pausing_us;      /* moat_pause: every vCPU parked, drives drained */
    int64_t state_us;        /* vCPU, VM and device state, dirty log, page list (paused) */
    int64_t memory_us;       /* memory: pages copied to staging or written (paused) */
    int64_t sync_us;         /* staged writes, flush, renames (the guest runs again) */
    uint64_t candidate_pages; /* pages read to find the non-zero ones */
    uint64_t data_pages;     /* non-zero pages written */
    /* Since staging (docs/snapshot-format.md, "Writing"); a caller's older,
     * shorter struct (size) is filled up to its size. */
    uint64_t staged_bytes;   /* copied while paused, written after the resume */
    int64_t drain_us;        /* after the resume: the staged writes completing */
    int64_t prepare_us;      /* before the pause: files, staging buffer reserved and faulted in */
};
int moat_get_snapshot_stats(const struct moat_vm *vm, struct moat_snapshot_stats *st);

struct moat_restore_config {
    size_t size;              /* sizeof(struct moat_restore_config) */
    const char *state_path;
    const char *mem_path;
    int console_in, console_out;  /* as in moat_config */
    uint32_t flags;           /* MOAT_F_* */
    int kick_signal;
    /* Drive overrides: NULL/0 reopens the images recorded in the snapshot
     * (same slots, same order); otherwise exactly as many drives as the
     * snapshot has: an override with an id takes the recorded drive with
     * that id (the snapshot must have it), the others take the remaining
     * drives in slot order; path and read_only are taken from here. The
     * guest's view must match (same size and read-only-ness), or its disk
     * state is not what it cached. */
    const struct moat_drive *drives;
    size_t ndrives;
    /* The vsock device's host Unix socket: NULL reuses the path recorded
     * in the snapshot (which must then be free again). */
    const char *vsock_uds;
    /* With drive overrides: NULL, or ndrives entries, each NULL or the
     * copy-on-write overlay for that drive (as moat_config.drive_overlays).
     * Without overrides the overlays recorded in the snapshot are reopened;
     * a drive recorded with an overlay must be given one when overridden. */
    const char *const *drive_overlays;
    /* With drive overrides: NULL, or ndrives entries (as
     * moat_config.drive_direct). Not recorded in snapshots. */
    const int *drive_direct;
    uint64_t console_limit;   /* as moat_config.console_limit */
    /* Overrides by type and options (struct moat_device, as in
     * moat_config.devices): each names a recorded device by its type and
     * an id= option (or is the only device of its type) and gives its
     * options anew — blk: path= (and ro, overlay=, direct as at create);
     * vsock: uds=. A device the snapshot does not have is refused. */
    const struct moat_device *devices;
    size_t ndevices;
    /* Guest memory from a page-fault handler in another process instead
     * of the memory file (Firecracker's mem_backend {"backend_type":
     * "Uffd", "backend_path"}; docs/uffd.md): NULL, or the path of the Unix
     * (SOCK_STREAM) socket the handler listens on. moat maps guest RAM
     * anonymous, registers it with a userfaultfd (missing pages), connects
     * and sends one message: the JSON array of the regions
     * [{"base_host_virt_addr","size","offset","page_size","page_size_kib"}]
     * with the userfaultfd passed by SCM_RIGHTS; the handler fills each
     * page on first touch (UFFDIO_COPY from the snapshot's memory file at
     * offset, or UFFDIO_ZEROPAGE). mem_path is then not opened (it may be
     * NULL). Not with a diff snapshot (-ENOTSUP); a diff snapshot of the
     * restored VM needs a full one first (-ENODATA). The handler must
     * serve the VM for its whole life: a vCPU or device touching a page it
     * never fills waits. */
    const char *mem_uffd_socket;
    /* Working-set prefetch (docs/snapshot-format.md): a restore that finds
     * no working set recorded for its snapshot records one at the first
     * pause, when the VM ends, or this many ms after the restore, whichever
     * comes first (0: 10000). */
    uint32_t ws_record_ms;
    /* A diff snapshot's chain (docs/snapshot-format.md, "Diff snapshots"):
     * every parent state and memory file its state files name must lie
     * beneath this directory, reached without a symlink (the names come
     * from the files, which may be forged); anything else is refused
     * (-EACCES). NULL: the directory of state_path. */
    const char *snapshot_root;
};
void moat_restore_config_init(struct moat_restore_config *rc);
int moat_restore(const struct moat_restore_config *rc, struct moat_vm **out, struct moat_error *err);

/* Pin a copy-on-write drive's disk: copy drive's (0-based, in moat_config
 * order) overlay, as the guest's disk is at this moment, to dst, which must
 * not exist (a reflink where the filesystem can, else a sparse copy). A
 * running VM is paused for the copy and resumed after (a paused one stays
 * paused): called while paused right after moat_snapshot, the copy is the
 * disk state that snapshot refers to. The copy goes through the descriptor
 * the device holds, so the overlay's lock is no obstacle. -ERANGE: no such
 * drive; -ENOENT: the drive has no overlay; -ESRCH: the VM has stopped. */
int moat_clone_overlay(struct moat_vm *vm, unsigned drive, const char *dst);

/* Change a device while the VM runs (or is paused): the device of type
 * (moat_device.type: "net", ...) with id (its id in snapshots, e.g.
 * "net0"; NULL: the only one of its type), option key, to value. What a
 * type lets change (docs/devices.md): net's "metadata" (the metadata
 * service's JSON document, replaced), "metadata_patch" (merged, RFC
 * 7396), "tx_bw"/"tx_ops"/"rx_bw"/"rx_ops" (a rate limiter,
 * SIZE/REFILL_MS[/BURST] or "off"), "link" ("up"/"down"); blk's and
 * rng's (virtio-rng) "bw"/"ops" (the same form). The change is
 * not recorded in the device's options: a snapshot records those it was
 * made with, except a changed backend option (one a restore override may
 * give anew): blk's "path" (the drive's backing file, swapped while the
 * VM runs: docs/devices.md), which a snapshot taken afterwards records.
 * 0, or -ENODEV (no such device, or several and no id), -EINVAL (a key
 * the type cannot change, a bad value: err says which). */
int moat_device_set(struct moat_vm *vm, const char *type, const char *id, const char *key, const char *value,
                    struct moat_error *err);

/* Read a device's state as text into buf (len bytes, NUL-terminated,
 * cut if longer): the device found as moat_device_set finds it; what a
 * type tells (docs/devices.md): net's "policy" (the egress policy in force,
 * as moat_device_set takes it), "stats" (its counters: frames both ways,
 * the policy's rules with what each allowed and dropped, the metadata
 * service's requests); rng's "stats" ("requests N bytes N bad N throttled
 * N errors N"). The length the text has (may be >= len: cut), or
 * -ENODEV / -EINVAL as moat_device_set. */
long moat_device_get(struct moat_vm *vm, const char *type, const char *id, const char *key, char *buf, size_t len,
                     struct moat_error *err);

/* The VM's devices (virtio), index 0, 1, ... in bus order: its type
 * (moat_device.type) and id (as moat_device_set names it; a restored VM's
 * are its snapshot's). 0, or -ENOENT past the last, -EINVAL. */
struct moat_device_info {
    char type[16];
    char id[33];
};
int moat_device_info(const struct moat_vm *vm, unsigned index, struct moat_device_info *info);

/* One of the options a device was made with (moat_device.options; for a
 * restored VM the snapshot's record with its overrides; a drive's "path"
 * as last changed) into buf (NUL-terminated, cut if longer): the value's
 * length ("" and 0 for a flag such as "ro"), -ENOENT when the device was
 * made without it, or -ENODEV / -EINVAL as moat_device_set. Not while
 * another thread changes the same device with moat_device_set. */
long moat_device_option(const struct moat_vm *vm, const char *type, const char *id, const char *key, char *buf,
                        size_t len, struct moat_error *err);

/* The VM's vCPU count and guest memory size in bytes (a restored VM's are
 * its snapshot's): 0 or -EINVAL. */
int moat_get_shape(const struct moat_vm *vm, unsigned *vcpus, uint64_t *mem_bytes);

/* Fork: one snapshot of parent, n children restored from it.
 * moat_fork pauses parent (if running), writes its snapshot once to
 * state_path/mem_path, clones each copy-on-write drive's overlay for every
 * child, resumes parent (if it was running), and restores n children into
 * children[0..n-1]. The children share the memory file's pages until they
 * write (MAP_PRIVATE); they are created, not started (moat_start each).
 * The restores run on up to 8 threads at once (the caller's among them).
 * Child i (0-based) gets:
 *  - vsock: vsock_uds[i] if vsock_uds is not NULL, else vsock_uds_fmt with
 *    its one %u replaced by i; the parent's vsock device needs one of them;
 *  - for each drive d of the parent with an overlay: a clone of the
 *    parent's overlay at the snapshot point, at drive_overlays[i * ndrives
 *    + d] (ndrives: the parent's drive count; entries of other drives are
 *    ignored) if drive_overlays is not NULL, else at overlay_fmt with its
 *    %u replaced by i and then d; the base stays shared, read-only. Drives
 *    without overlay are reopened as they are: a writable one is refused
 *    (-EINVAL: every child would write the same image); read-only ones are
 *    shared;
 *  - console_in[i] / console_out[i] (NULL arrays: -1, nothing);
 *  - for each net device k of the parent on a TAP (k counts those only, in
 *    slot order): a TAP of its own (one process at a time holds a TAP),
 *    net_taps[i * ntaps + k] if net_taps is not NULL, else net_tap_fmt
 *    with its %u replaced by i (and a second %u by k: required when the
 *    parent has more than one); each name 1 to 15 bytes without '/'. Two
 *    children given one TAP, or a child given its parent's, is refused
 *    (-EINVAL, naming them). The parent's net devices on passt (user)
 *    need nothing: each child starts its own passt.
 * Templates take exactly the %u conversions named (and %%), nothing else.
 * Only the first clone is made while parent is paused; the other children's
 * are copied from it afterwards. On failure nothing is left: children made
 * so far are destroyed and clones removed (the snapshot files stay), and
 * parent runs again if it ran. err may be NULL. */
struct moat_fork_config {
    size_t size;                  /* sizeof(struct moat_fork_config) */
    const char *state_path;       /* the parent's snapshot, written once */
    const char *mem_path;
    const char *const *vsock_uds; /* n entries, or NULL */
    const char *vsock_uds_fmt;    /* e.g. "/run/w%u.sock" */
    const char *const *drive_overlays;  /* n * ndrives entries, or NULL */
    const char *overlay_fmt;      /* e.g. "/var/w%u-disk%u.ovl" */
    const int *console_in;        /* n entries, or NULL */
    const int *console_out;       /* n entries, or NULL */
    uint32_t flags;               /* MOAT_F_* for the children */
    int kick_signal;
    const char *const *net_taps;  /* n * ntaps entries, or NULL */
    const char *net_tap_fmt;      /* e.g. "vmtap%u" */
};
void moat_fork_config_init(struct moat_fork_config *fc);
int moat_fork(struct moat_vm *parent, const struct moat_fork_config *fc, struct moat_vm **children,
              size_t n, struct moat_error *err);

/* ---- running commands in the guest (docs/agent-protocol.md) ----
 *
 * moat_exec runs a command in the guest through its agent, over the VM's
 * vsock device (moat_config.vsock_uds; the default guest's /init starts
 * the agent when a vsock device is configured). Blocking: it returns when
 * the command has ended. Output arrives through the callbacks, called from
 * the calling thread (NULL discards). */
struct moat_exec {
    size_t size;                  /* sizeof(struct moat_exec) */
    const char *const *argv;      /* argv[0] is looked up in the guest's PATH */
    size_t argc;
    const char *const *env;       /* "KEY=VALUE", added to the agent's environment */
    size_t envc;
    const char *cwd;              /* NULL: the agent's */
    uint32_t timeout_ms;          /* 0: none; else the guest kills it (SIGKILL) */
    int stdin_fd;                 /* host fd copied to the command's stdin, or -1 */
    void (*on_stdout)(void *opaque, const void *buf, size_t len);
    void (*on_stderr)(void *opaque, const void *buf, size_t len);
    void *opaque;
    unsigned port;                /* the agent's vsock port; 0: 1024 */
    int connect_wait_ms;          /* keep retrying the connection this long (guest booting) */
};

/* 0 and *status = the command's exit code, or 128 + N if a signal N ended
 * it. -ENOTCONN: the VM has no vsock device; -ETIMEDOUT: no agent answered
 * within connect_wait_ms; -EPROTO: the agent broke the protocol; -EINVAL:
 * bad arguments. */
int moat_exec(struct moat_vm *vm, const struct moat_exec *ex, int *status);

/* File transfer through the same agent (default port), blocking like
 * moat_exec; connect_wait_ms as in moat_exec. moat_put_file copies fd
 * (read from its current offset to EOF) to guest_path, created or
 * truncated, with permission bits mode & 07777 (the parent directory must
 * exist). moat_get_file writes the guest file to fd and, if mode is not
 * NULL, stores its permission bits. 0 or -errno: -ENOTCONN (no vsock
 * device), -ETIMEDOUT (no agent), -EREMOTEIO (the agent refused: its
 * message, NUL-terminated, in errbuf when errbuf/errlen are given),
 * -EPROTO, -EINVAL, or an error reading/writing fd. A failed put may leave
 * a partial guest file; a failed get may have written part of it to fd. */
int moat_put_file(struct moat_vm *vm, int fd, const char *guest_path, uint32_t mode,
                  int connect_wait_ms, char *errbuf, size_t errlen);
int moat_get_file(struct moat_vm *vm, const char *guest_path, int fd, uint32_t *mode,
                  int connect_wait_ms, char *errbuf, size_t errlen);

/* Host facts: the one probe of what this machine's KVM is and what moat
 * can run on it (`moat host` prints it; docs/host.md).
 *  MOAT_HOST_KVM   hardware KVM (kvm_intel/kvm_amd): everything runs;
 *  MOAT_HOST_PVM   PVM (kvm_pvm, software virtualization): small guests,
 *                  snapshots and devices run; Linux boots but never reaches
 *                  user space (ring-3 syscall is broken there);
 *  MOAT_HOST_NONE  no usable KVM: no guest runs (vhost-user devices do). */
enum moat_host_kind {
    MOAT_HOST_UNKNOWN = 0,   /* not filled in (a library older than the field) */
    MOAT_HOST_NONE = 1,
    MOAT_HOST_PVM = 2,
    MOAT_HOST_KVM = 3,
};

#define MOAT_HOST_MAX_CAPS 24    /* part of the ABI: fixed */
struct moat_host_cap {
    char name[32];           /* "KVM_CAP_IRQFD" */
    int value;               /* KVM_CHECK_EXTENSION's answer (0: absent) */
    int required;            /* moat cannot run a guest without it */
};

struct moat_host_info {
    size_t size;             /* sizeof(struct moat_host_info) */
    int kvm_available;       /* /dev/kvm opened, API version 12, every required capability */
    int kvm_errno;           /* why not, when not */
    int is_pvm;              /* KVM is PVM (software virtualization) */
    int max_vcpus;
    /* Added after 0.1.0; filled only when size covers them (size must be
     * the sizeof of a released version of this struct). */
    int kind;                /* enum moat_host_kind */
    int api_version;         /* KVM_GET_API_VERSION; 0 when /dev/kvm did not open */
    char device[64];         /* the KVM device probed ($MOAT_KVM_DEV or /dev/kvm) */
    char module[16];         /* the KVM vendor module: kvm_intel, kvm_amd, kvm_pvm, or "" */
    char reason[256];        /* one line: why this kind */
    int io_uring;            /* 1: io_uring is allowed here (disk I/O uses it); 0: threads */
    char io_uring_reason[160]; /* why not, when not */
    unsigned ncaps;          /* caps[0..ncaps): the capabilities moat asks for */
    struct moat_host_cap caps[MOAT_HOST_MAX_CAPS];
};
/* 0, or -EINVAL when info is NULL or its size is smaller than the
 * original five fields. Never fails because KVM is missing: that is what
 * kind and reason say. Bytes past what this library knows (a caller built
 * against a newer header) are zeroed. */
int moat_host_info(struct moat_host_info *info);

/* Just the kind; why (may be NULL) gets the one-line reason. */
int moat_host_kind(char *why, size_t whylen);
/* "kvm", "pvm" or "none"; NULL for an unknown kind. */
const char *moat_host_kind_name(int kind);

const char *moat_version(void);

/* Logging. The library reports what it cannot return (a guest's bad
 * request, an I/O error on a device thread, output it dropped) as one-line
 * messages; by default errors and warnings go to stderr as "moat: ...".
 * moat_set_log routes them: messages up to `level` (MOAT_LOG_*) go to fn
 * (NULL: stderr), from whatever thread logs, one at a time; fn must not
 * call back into libmoat. This is the library's one process-wide setting
 * (messages are not all tied to one VM); set it before creating VMs.
 * Messages are written as they happen, on the thread that logs (a vCPU
 * thread for some guest-triggered ones): a stderr nobody reads can stall
 * that thread, so an embedder whose stderr may stall routes them here. */
enum { MOAT_LOG_ERROR = 0, MOAT_LOG_WARN = 1, MOAT_LOG_INFO = 2, MOAT_LOG_DEBUG = 3 };
typedef void (*moat_log_fn)(void *opaque, int level, const char *msg);
void moat_set_log(int level, moat_log_fn fn, void *opaque);

#ifdef __cplusplus
}
#endif
#endif
