/* Snapshot and restore: a state file (vmm/snapshot/snapfmt.h, docs/snapshot-format.md)
 * and a memory file (guest RAM, sparse: zero pages are holes). Restore maps
 * the memory file MAP_PRIVATE, so pages load lazily and are shared with
 * every other restore of the same file until written (fork). */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "devices/legacy/i8042.h"
#include "devices/legacy/moatdev.h"
#include "devices/legacy/serial.h"
#include "devices/virtio/virtio_dev.h"
#include "devices/virtio/virtio_mmio.h"
#include "vmm/agent/fixup.h"
#include "vmm/base/clock.h"
#include "vmm/base/fullio.h"
#include "vmm/base/layout.h"
#include "vmm/base/log.h"
#include "vmm/snapshot/snapdev.h"
#include "vmm/snapshot/snapdiff.h"
#include "vmm/snapshot/snapfmt.h"
#include "vmm/snapshot/uffd.h"
#include "vmm/snapshot/wset.h"
#include "vmm/snapshot/snapmem.h"
#include "vmm/snapshot/snapvm.h"
#include "vmm/core/vm.h"

#define MSR_IA32_XSS 0xda0
#define PAGE 4096ul

/* ---- save ---- */

static int save_msrs(struct moat_vm *vm, struct vcpu *v, struct snap_writer *w)
{
    unsigned n = vm->host.nmsrs;
    if (!n)
        return 0;
    size_t sz = sizeof(struct kvm_msrs) + n * sizeof(struct kvm_msr_entry);
    struct kvm_msrs *m = calloc(1, sz);
    struct snap_msr *out = calloc(n, sizeof(*out));
    if (!m || !out) {
        free(m);
        free(out);
        return -ENOMEM;
    }
    /* KVM_GET_MSRS stops at the first MSR it cannot read: skip it, go on. */
    unsigned got = 0, next = 0;
    while (next < n) {
        unsigned batch = n - next;
        m->nmsrs = batch;
        for (unsigned i = 0; i < batch; i++)
            m->entries[i] = (struct kvm_msr_entry){ .index = vm->host.msrs[next + i] };
        int r = ioctl(v->fd, KVM_GET_MSRS, m);
        if (r < 0) {
            int e = errno;
            free(m);
            free(out);
            return -e;
        }
        for (int i = 0; i < r; i++)
            out[got++] = (struct snap_msr){ .index = m->entries[i].index, .data = m->entries[i].data };
        next += (unsigned)r + 1;  /* skip the unreadable one */
    }
    snapw_section(w, SNAP_VCPU_MSRS, v->index, out, got * sizeof(*out));
    free(m);
    free(out);
    return 0;
}

#define SAVE(ioc, type, idx, T) do {                                  \
        T s_;                                                         \
        memset(&s_, 0, sizeof(s_));                                   \
        if (ioctl(fd, ioc, &s_) < 0)                                  \
            return -errno;                                            \
        snapw_section(w, type, idx, &s_, sizeof(s_));                 \
    } while (0)

static int save_vcpu(struct moat_vm *vm, struct vcpu *v, struct snap_writer *w)
{
    int fd = v->fd;
    SAVE(KVM_GET_REGS, SNAP_VCPU_REGS, v->index, struct kvm_regs);
    SAVE(KVM_GET_SREGS, SNAP_VCPU_SREGS, v->index, struct kvm_sregs);
    SAVE(KVM_GET_FPU, SNAP_VCPU_FPU, v->index, struct kvm_fpu);
    if (ioctl(vm->host.fd, KVM_CHECK_EXTENSION, KVM_CAP_XSAVE) > 0)
        SAVE(KVM_GET_XSAVE, SNAP_VCPU_XSAVE, v->index, struct kvm_xsave);
    if (ioctl(vm->host.fd, KVM_CHECK_EXTENSION, KVM_CAP_XCRS) > 0)
        SAVE(KVM_GET_XCRS, SNAP_VCPU_XCRS, v->index, struct kvm_xcrs);
    SAVE(KVM_GET_LAPIC, SNAP_VCPU_LAPIC, v->index, struct kvm_lapic_state);
    SAVE(KVM_GET_MP_STATE, SNAP_VCPU_MP_STATE, v->index, struct kvm_mp_state);
    SAVE(KVM_GET_VCPU_EVENTS, SNAP_VCPU_EVENTS, v->index, struct kvm_vcpu_events);
    SAVE(KVM_GET_DEBUGREGS, SNAP_VCPU_DEBUGREGS, v->index, struct kvm_debugregs);
    return save_msrs(vm, v, w);
}

static int save_vm(struct moat_vm *vm, struct snap_writer *w)
{
    int fd = vm->vm_fd;
    static const uint32_t chips[3] = { KVM_IRQCHIP_PIC_MASTER, KVM_IRQCHIP_PIC_SLAVE, KVM_IRQCHIP_IOAPIC };
    for (int i = 0; i < 3; i++) {
        struct kvm_irqchip c;
        memset(&c, 0, sizeof(c));
        c.chip_id = chips[i];
        if (ioctl(fd, KVM_GET_IRQCHIP, &c) < 0)
            return -errno;
        snapw_section(w, SNAP_VM_PIC_MASTER + (uint32_t)i, 0, &c, sizeof(c));
    }
    SAVE(KVM_GET_PIT2, SNAP_VM_PIT, 0, struct kvm_pit_state2);
    SAVE(KVM_GET_CLOCK, SNAP_VM_CLOCK, 0, struct kvm_clock_data);
    return 0;
}

/* The legacy devices: each saves its own record (its header), one section
 * each. */
static void save_devices(struct moat_vm *vm, struct snap_writer *w)
{
    struct serial_state ss;
    serial_save(&vm->uart, &ss);
    snapw_section(w, SNAP_DEV_SERIAL, 0, &ss, sizeof(ss));

    struct i8042_state ks;
    i8042_save(&vm->kbd, &ks);
    snapw_section(w, SNAP_DEV_I8042, 0, &ks, sizeof(ks));

    struct moatdev_state md;
    moatdev_save(&vm->ctl, &md);
    snapw_section(w, SNAP_DEV_MOATDEV, 0, &md, sizeof(md));
}

int snap_pwrite_all(int fd, const void *buf, size_t len, off_t off)
{
    ssize_t n = pwrite_full(fd, buf, len, off);
    return n < 0 ? (int)n : 0;
}

bool snap_page_is_zero(const uint8_t *p)
{
    const uint64_t *q = (const uint64_t *)p;
    for (size_t i = 0; i < PAGE / 8; i += 8)
        if (q[i] | q[i + 1] | q[i + 2] | q[i + 3] | q[i + 4] | q[i + 5] | q[i + 6] | q[i + 7])
            return false;
    return true;
}

static int tmp_name(char *buf, size_t cap, const char *path)
{
    return (size_t)snprintf(buf, cap, "%s.tmp", path) >= cap ? -ENAMETOOLONG : 0;
}

/* The directory holding path, into dir. */
static int dir_of(char *dir, size_t cap, const char *path)
{
    if ((size_t)snprintf(dir, cap, "%s", path) >= cap)
        return -ENAMETOOLONG;
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, cap, ".");
    else if (slash == dir)
        dir[1] = 0;
    else
        *slash = 0;
    return 0;
}

/* Make the renames durable: fsync the directory. */
static int sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int r = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return r == -EINVAL ? 0 : r;   /* a file system that cannot sync directories */
}

/* What a snapshot has to write, and what it did. */
struct snap_job {
    struct moat_vm *vm;
    const char *state_path, *mem_path;
    char mtmp[4096], stmp[4096];
    struct snapmem_file mf;
    int sfd;
    bool resume;            /* the guest runs again once its RAM is out */
    const uint8_t *state;   /* the finished state file */
    size_t state_len;
    const uint64_t *sel;    /* pages to look at (host order) */
    struct snapmem_stage stage;  /* where RAM is copied while paused */
    uint64_t t_mem, t_paused_end;
    struct snapmem_stats ms;
    int64_t memory_us, sync_us, drain_us;
};

/* Before the pause: both files created under NAME.tmp (the memory file
 * sized, its io_uring set up). */
static int open_files(struct snap_job *j)
{
    struct snapvm *sv = snapvm_of(j->vm);
    j->sfd = -1;
    j->mf.fd = -1;
    int r = tmp_name(j->mtmp, sizeof(j->mtmp), j->mem_path);
    if (r == 0)
        r = tmp_name(j->stmp, sizeof(j->stmp), j->state_path);
    if (r == 0)
        r = snapmem_open(&j->mf, j->mtmp, j->vm->ram_size / PAGE, true, sv->snap_ring);
    if (r < 0)
        return r;
    j->sfd = open(j->stmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (j->sfd < 0) {
        r = -errno;
        snapmem_close(&j->mf);
        unlink(j->mtmp);
    }
    return r;
}

/* Every selected page is copied (or written): guest RAM may change. */
static void mem_copied(void *arg)
{
    struct snap_job *j = arg;
    j->memory_us = (int64_t)(clock_mono_ns() - j->t_mem) / 1000;
    if (j->resume) {
        moat_resume(j->vm);
        j->resume = false;
    }
    j->t_paused_end = clock_mono_ns();
}

/* Guest RAM is copied to the staging buffer (past its cap: written) while
 * paused, the writes of the copy going on meanwhile; then the guest may
 * run again, and the staged writes complete; one batch of fsyncs makes
 * both files durable; then the old state file goes, memory and state are
 * renamed into place, in that order, and the directory is synced (the
 * renames durable). A reader never sees a
 * state file without its memory file: a crash before the state rename
 * leaves no state file (restore refuses), or the old pair when nothing was
 * renamed yet. Closes the files. */
static int write_files(struct snap_job *j)
{
    j->t_mem = clock_mono_ns();
    j->t_paused_end = 0;
    int r = snapmem_write_staged(&j->mf, j->vm->ram, j->sel, j->stage.buf, j->stage.cap, mem_copied, j, &j->ms);
    if (!j->t_paused_end)        /* failed: copied() was not called */
        mem_copied(j);
    snapmem_stage_free(&j->stage);
    j->drain_us = (int64_t)(clock_mono_ns() - j->t_paused_end) / 1000;
    if (r == 0)
        r = snap_pwrite_all(j->sfd, j->state, j->state_len, 0);
    if (r == 0)
        r = snapmem_sync(&j->mf, j->sfd);
    snapmem_close(&j->mf);
    close(j->sfd);
    j->sfd = -1;
    /* The old state file must not outlive the memory file it belonged to. */
    if (r == 0 && unlink(j->state_path) < 0 && errno != ENOENT)
        r = -errno;
    /* renameat2 by number: glibc turns renameat2(..., 0) into renameat(2),
     * which the main thread's seccomp list does not hold (docs/security.md) */
    if (r == 0 && syscall(SYS_renameat2, AT_FDCWD, j->mtmp, AT_FDCWD, j->mem_path, 0) < 0)
        r = -errno;
    if (r == 0 && syscall(SYS_renameat2, AT_FDCWD, j->stmp, AT_FDCWD, j->state_path, 0) < 0)
        r = -errno;
    char mdir[4096], sdir[4096];
    if (r == 0 && (r = dir_of(mdir, sizeof(mdir), j->mem_path)) == 0 &&
        (r = dir_of(sdir, sizeof(sdir), j->state_path)) == 0) {
        r = sync_dir(mdir);
        if (r == 0 && strcmp(mdir, sdir) != 0)
            r = sync_dir(sdir);
    }
    if (r < 0) {
        unlink(j->mtmp);
        unlink(j->stmp);
    }
    j->sync_us = (int64_t)(clock_mono_ns() - j->t_paused_end) / 1000;
    return r;
}

/* Before the pause: how much the copy will take, to fault that much of
 * the staging buffer in while the guest still runs. A full snapshot: the
 * pages that exist now (pagemap, as in step 4); a diff: the pages written
 * since the last snapshot, as of now (KVM's log taken in early). A
 * wrong guess costs time, never content: the copy faults in what is
 * missing, and what is left over is unmapped with the rest. */
static uint64_t stage_guess(struct moat_vm *vm, bool diff)
{
    if (diff) {
        /* The pages written so far (KVM's log taken in now; the pause
         * takes in the rest): what the diff will copy, give or take what
         * is written meanwhile and the zero pages it skips. */
        if (snapdiff_harvest(vm) < 0)
            return 0;
        return snapdiff_count(vm) * PAGE;
    }
    uint64_t *bm = NULL, n = 0;
    if (snapmem_candidates(vm, &bm) < 0)
        return 0;
    for (uint64_t i = 0, words = snap_bitmap_words(vm->ram_size); i < words; i++)
        n += (uint64_t)__builtin_popcountll(bm[i]);
    free(bm);
    return n * PAGE;
}

/* A full snapshot, or (diff) one of the pages written since the last. */
static int snapshot_locked(struct moat_vm *vm, const char *state_path, const char *mem_path, bool diff)
{
    struct snapvm *sv = snapvm_of(vm);
    if (diff) {
        int dr = snapdiff_precheck(vm, state_path, mem_path);
        if (dr < 0)
            return dr;
    }
    struct snap_job j = { .vm = vm, .state_path = state_path, .mem_path = mem_path };
    uint64_t t0 = clock_mono_ns();
    pthread_mutex_lock(&vm->lock);
    bool was_paused = vm->paused, exited = vm->exited, started = vm->started;
    pthread_mutex_unlock(&vm->lock);
    if (exited)
        return -ESRCH;
    int r = open_files(&j);
    if (r < 0)
        return r;
    /* The guest will run again: its pages are copied while it is paused
     * and written from the copy after the resume. (A VM paused already,
     * or never started, is not resumed: the copy would gain nothing.) */
    int sr = started && !was_paused ? snapmem_stage_alloc(&j.stage, snapmem_stage_cap(vm->ram_size),
                                                           stage_guess(vm, diff)) : 0;
    if (sr < 0)
        log_debug("snapshot: staging buffer: %s: writing from guest RAM while paused", strerror(-sr));
    uint64_t t_pause = clock_mono_ns();
    if (started && !was_paused) {
        r = moat_pause(vm);
        if (r < 0) {
            snapmem_stage_free(&j.stage);
            snapmem_close(&j.mf);
            close(j.sfd);
            unlink(j.mtmp);
            unlink(j.stmp);
            return r;
        }
        j.resume = true;
    }
    uint64_t t_state = clock_mono_ns();
    struct snap_writer w;
    snapw_init(&w);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    pthread_mutex_lock(&vm->lock);
    struct snap_meta meta = {
        .mem_size = vm->ram_size, .ncpus = vm->ncpus, .boot_kind = (uint32_t)vm->boot.kind,
        .flags = (vm->pvm_compat ? SNAP_META_PVM : 0) | (sv->dirty_log ? SNAP_META_DIRTY_LOG : 0),
        .guest_status = vm->guest_status,
        .created_unix_ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec,
    };
    pthread_mutex_unlock(&vm->lock);
    snapw_section(&w, SNAP_META, 0, &meta, sizeof(meta));
    uint64_t *dirty_bm = NULL;   /* pages written since the last snapshot (LE) */
    uint64_t *sel = NULL;        /* pages to look at */
    r = snapdiff_sections(vm, &w, diff, &dirty_bm);
    if (r == 0)
        r = save_vm(vm, &w);
    for (unsigned i = 0; r == 0 && i < vm->ncpus; i++)
        r = save_vcpu(vm, &vm->vcpus[i], &w);
    if (r == 0) {
        save_devices(vm, &w);
        r = snapdev_save(vm, &w);
    }
    if (r == 0)
        r = snapw_finish(&w, &j.state, &j.state_len);
    /* A diff looks at its written pages; a full snapshot at the pages that
     * exist (snapmem_candidates: no page is read to find them). */
    if (r == 0 && diff) {
        uint64_t words = snap_bitmap_words(vm->ram_size);
        sel = malloc(words ? words * 8 : 8);
        if (!sel)
            r = -ENOMEM;
        for (uint64_t i = 0; sel && i < words; i++)
            sel[i] = le64toh(dirty_bm[i]);
    } else if (r == 0) {
        r = snapmem_candidates(vm, &sel);
    }
    int64_t state_us = (int64_t)(clock_mono_ns() - t_state) / 1000;
    j.sel = sel;
    if (r == 0) {
        r = write_files(&j);
    } else {
        snapmem_stage_free(&j.stage);
        snapmem_close(&j.mf);
        close(j.sfd);
        unlink(j.mtmp);
        unlink(j.stmp);
    }
    if (j.resume)                /* failed before the memory file was out */
        moat_resume(vm);
    if (r == 0) {
        snapdiff_done(vm, state_path, mem_path, j.state, j.state_len, diff, dirty_bm);
        uint64_t t1 = clock_mono_ns();
        struct moat_snapshot_stats st = {
            .size = sizeof(st), .diff = diff, .direct = j.ms.direct, .uring = j.ms.uring,
            .total_us = (int64_t)(t1 - t0) / 1000,
            .paused_us = was_paused || !started ? (int64_t)(t1 - t0) / 1000
                                                : (int64_t)(j.t_paused_end - t_pause) / 1000,
            .pausing_us = (int64_t)(t_state - t_pause) / 1000, .state_us = state_us, .memory_us = j.memory_us, .sync_us = j.sync_us,
            .candidate_pages = j.ms.candidate_pages, .data_pages = j.ms.data_pages,
            .staged_bytes = j.ms.staged_bytes, .drain_us = j.drain_us,
            .prepare_us = (int64_t)(t_pause - t0) / 1000,
        };
        pthread_mutex_lock(&vm->lock);
        sv->snap_stats = st;
        pthread_mutex_unlock(&vm->lock);
    } else {
        snapdiff_giveback(vm, dirty_bm);   /* the next snapshot has them */
    }
    free(sel);
    free(dirty_bm);
    snapw_free(&w);
    return r;
}

int moat_get_snapshot_stats(const struct moat_vm *vm, struct moat_snapshot_stats *st)
{
    if (!vm || !st || st->size < offsetof(struct moat_snapshot_stats, total_us))
        return -EINVAL;
    struct snapvm *sv = snapvm_of(vm);
    size_t want = st->size < sizeof(*st) ? st->size : sizeof(*st);
    struct moat_snapshot_stats cur;
    pthread_mutex_lock((pthread_mutex_t *)&vm->lock);
    cur = sv->snap_stats;
    pthread_mutex_unlock((pthread_mutex_t *)&vm->lock);
    cur.size = want;
    memcpy(st, &cur, want);
    return 0;
}

/* One snapshot at a time per VM: each one clears the dirty pages it wrote
 * and becomes the parent of the next diff, so two at once would lose pages
 * from later diffs. A second caller gets -EBUSY. */
static int snapshot_impl(struct moat_vm *vm, const char *state_path, const char *mem_path, bool diff)
{
    if (!vm || !state_path || !mem_path)
        return -EINVAL;
    pthread_mutex_lock(&vm->lock);
    bool busy = vm->snapshotting;
    vm->snapshotting = true;
    pthread_mutex_unlock(&vm->lock);
    if (busy)
        return -EBUSY;
    int r = snapshot_locked(vm, state_path, mem_path, diff);
    pthread_mutex_lock(&vm->lock);
    vm->snapshotting = false;
    pthread_mutex_unlock(&vm->lock);
    return r;
}

int moat_snapshot(struct moat_vm *vm, const char *state_path, const char *mem_path)
{
    return snapshot_impl(vm, state_path, mem_path, false);
}

int moat_snapshot_diff(struct moat_vm *vm, const char *state_path, const char *mem_path)
{
    return snapshot_impl(vm, state_path, mem_path, true);
}

/* ---- restore ---- */

#define SECTION(type, idx, T, dst) do {                                         \
        const struct snap_section *s_ = snap_find(secs, nsecs, type, idx);      \
        if (!s_ || s_->len != sizeof(T))                                        \
            return seterr(err, 1, -EINVAL, "state file: section %u/%u missing or of the wrong size", \
                          (unsigned)(type), (unsigned)(idx));                   \
        memcpy(dst, s_->data, sizeof(T));                                       \
    } while (0)

#define APPLY(fd, ioc, arg, what) do {                                          \
        if (ioctl(fd, ioc, arg) < 0)                                            \
            return seterr(err, 0, -errno, "restore: %s: %s", what, strerror(errno)); \
    } while (0)

static int restore_vcpu(struct moat_vm *vm, struct vcpu *v, const struct snap_section *secs,
                        size_t nsecs, struct moat_error *err)
{
    unsigned i = v->index;
    int fd = v->fd;
    /* The vCPU model: the same filter as at boot. */
    const struct kvm_cpuid2 *sup = vm->host.cpuid;
    size_t csz = sizeof(*sup) + sup->nent * sizeof(sup->entries[0]);
    struct kvm_cpuid2 *c = malloc(csz);
    if (!c)
        return seterr(err, 0, -ENOMEM, "out of memory");
    memcpy(c, sup, csz);
    cpuid_filter(c->entries, c->nent, i, vm->ncpus, vm->pvm_compat);
    int r = ioctl(fd, KVM_SET_CPUID2, c) < 0 ? -errno : 0;
    free(c);
    if (r < 0)
        return seterr(err, 0, r, "restore: KVM_SET_CPUID2: %s", strerror(-r));

    struct kvm_sregs sregs;
    struct kvm_regs regs;
    struct kvm_fpu fpu;
    struct kvm_lapic_state lapic;
    struct kvm_mp_state mp;
    struct kvm_vcpu_events ev;
    struct kvm_debugregs dr;
    SECTION(SNAP_VCPU_SREGS, i, struct kvm_sregs, &sregs);
    SECTION(SNAP_VCPU_REGS, i, struct kvm_regs, &regs);
    SECTION(SNAP_VCPU_FPU, i, struct kvm_fpu, &fpu);
    SECTION(SNAP_VCPU_LAPIC, i, struct kvm_lapic_state, &lapic);
    SECTION(SNAP_VCPU_MP_STATE, i, struct kvm_mp_state, &mp);
    SECTION(SNAP_VCPU_EVENTS, i, struct kvm_vcpu_events, &ev);
    SECTION(SNAP_VCPU_DEBUGREGS, i, struct kvm_debugregs, &dr);
    /* KVM on SVM reports TR as busy (type 11) whatever the VMCB holds,
     * while the hidden TR of a CPU that ran ltr says "available" (9). AMD
     * hardware ignores the difference, but an emulated SVM (QEMU TCG, our
     * nested test bed) then refuses ring-3 port I/O through the TSS
     * bitmap. Give back what ltr would have left. (VMX requires 11: only
     * on SVM.) */
    if (vm->host.is_svm && sregs.tr.type == 11)
        sregs.tr.type = 9;
    APPLY(fd, KVM_SET_SREGS, &sregs, "KVM_SET_SREGS");
    APPLY(fd, KVM_SET_REGS, &regs, "KVM_SET_REGS");
    const struct snap_section *xs = snap_find(secs, nsecs, SNAP_VCPU_XSAVE, i);
    if (xs && xs->len == sizeof(struct kvm_xsave) &&
        ioctl(vm->host.fd, KVM_CHECK_EXTENSION, KVM_CAP_XSAVE) > 0) {
        struct kvm_xsave *x = malloc(sizeof(*x));
        if (!x)
            return seterr(err, 0, -ENOMEM, "out of memory");
        memcpy(x, xs->data, sizeof(*x));
        r = ioctl(fd, KVM_SET_XSAVE, x) < 0 ? -errno : 0;
        free(x);
        if (r < 0)
            return seterr(err, 0, r, "restore: KVM_SET_XSAVE: %s", strerror(-r));
    } else {
        APPLY(fd, KVM_SET_FPU, &fpu, "KVM_SET_FPU");
    }
    const struct snap_section *xc = snap_find(secs, nsecs, SNAP_VCPU_XCRS, i);
    if (xc && xc->len == sizeof(struct kvm_xcrs) && ioctl(vm->host.fd, KVM_CHECK_EXTENSION, KVM_CAP_XCRS) > 0) {
        struct kvm_xcrs x;
        memcpy(&x, xc->data, sizeof(x));
        APPLY(fd, KVM_SET_XCRS, &x, "KVM_SET_XCRS");
    }
    APPLY(fd, KVM_SET_DEBUGREGS, &dr, "KVM_SET_DEBUGREGS");
    APPLY(fd, KVM_SET_LAPIC, &lapic, "KVM_SET_LAPIC");

    const struct snap_section *ms = snap_find(secs, nsecs, SNAP_VCPU_MSRS, i);
    if (!ms || ms->len % sizeof(struct snap_msr) != 0)
        return seterr(err, 1, -EINVAL, "state file: MSR section of vCPU %u missing or malformed", i);
    size_t n = ms->len / sizeof(struct snap_msr);
    struct kvm_msrs *m = calloc(1, sizeof(*m) + n * sizeof(struct kvm_msr_entry));
    if (!m)
        return seterr(err, 0, -ENOMEM, "out of memory");
    unsigned k = 0;
    for (size_t j = 0; j < n; j++) {
        struct snap_msr sm;
        memcpy(&sm, ms->data + j * sizeof(sm), sizeof(sm));
        if (vm->pvm_compat && sm.index == MSR_IA32_XSS)
            continue;  /* PVM refuses it */
        m->entries[k++] = (struct kvm_msr_entry){ .index = sm.index, .data = sm.data };
    }
    m->nmsrs = k;
    r = ioctl(fd, KVM_SET_MSRS, m);
    int e = errno;
    if (r >= 0 && (unsigned)r < k)
        log_warn("restore: vCPU %u: MSR 0x%x not accepted; %d of %u restored", i,
                 m->entries[r].index, r, k);
    free(m);
    if (r < 0)
        return seterr(err, 0, -e, "restore: KVM_SET_MSRS: %s", strerror(e));
    APPLY(fd, KVM_SET_MP_STATE, &mp, "KVM_SET_MP_STATE");
    ev.flags &= KVM_VCPUEVENT_VALID_NMI_PENDING | KVM_VCPUEVENT_VALID_SIPI_VECTOR | KVM_VCPUEVENT_VALID_SHADOW;
    APPLY(fd, KVM_SET_VCPU_EVENTS, &ev, "KVM_SET_VCPU_EVENTS");
    return 0;
}

static int restore_vm_state(struct moat_vm *vm, const struct snap_section *secs, size_t nsecs,
                            struct moat_error *err)
{
    for (uint32_t i = 0; i < 3; i++) {
        struct kvm_irqchip c;
        SECTION(SNAP_VM_PIC_MASTER + i, 0, struct kvm_irqchip, &c);
        APPLY(vm->vm_fd, KVM_SET_IRQCHIP, &c, "KVM_SET_IRQCHIP");
    }
    struct kvm_pit_state2 pit;
    SECTION(SNAP_VM_PIT, 0, struct kvm_pit_state2, &pit);
    APPLY(vm->vm_fd, KVM_SET_PIT2, &pit, "KVM_SET_PIT2");
    struct kvm_clock_data clk;
    SECTION(SNAP_VM_CLOCK, 0, struct kvm_clock_data, &clk);
    clk.flags = 0;  /* only the clock value; no host-TSC pinning */
    memset(clk.pad, 0, sizeof(clk.pad));
    APPLY(vm->vm_fd, KVM_SET_CLOCK, &clk, "KVM_SET_CLOCK");

    /* The legacy devices: each checks its own record (untrusted) before
     * it is loaded. */
    struct serial_state ss;
    SECTION(SNAP_DEV_SERIAL, 0, struct serial_state, &ss);
    const char *why = NULL;
    if (serial_state_check(&ss, &why) < 0)
        return seterr(err, 1, -EINVAL, "state file: %s", why);
    serial_load(&vm->uart, &ss);

    /* The keyboard controller: a file written before moat kept it has
     * none, and the controller stays as a new VM's. */
    const struct snap_section *kb = snap_find(secs, nsecs, SNAP_DEV_I8042, 0);
    if (kb) {
        struct i8042_state ks;
        if (kb->len != sizeof(ks))
            return seterr(err, 1, -EINVAL, "state file: i8042 section of %llu bytes, %zu expected",
                          (unsigned long long)kb->len, sizeof(ks));
        memcpy(&ks, kb->data, sizeof(ks));
        if (i8042_state_check(&ks, &why) < 0)
            return seterr(err, 1, -EINVAL, "state file: %s", why);
        i8042_load(&vm->kbd, &ks);
    }

    struct moatdev_state md;
    SECTION(SNAP_DEV_MOATDEV, 0, struct moatdev_state, &md);
    if (moatdev_state_check(&md, &why) < 0)
        return seterr(err, 1, -EINVAL, "state file: %s", why);
    moatdev_load(&vm->ctl, &md);
    return 0;
}

/* Start the live devices (their state is loaded: snapdev_restore), before
 * any vCPU runs. */
static int restore_virtio(struct moat_vm *vm, struct moat_error *err)
{
    for (unsigned i = 0; i < vm->ndev; i++) {
        int r = virtio_mmio_kvm_resume(vm->dev[i].t);
        if (r < 0)
            return seterr(err, 0, r, "restore: starting %s: %s", vm->dev[i].id, strerror(-r));
    }
    return 0;
}

static int read_state(const char *path, uint8_t **buf, size_t *len, struct moat_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return seterr(err, 1, -errno, "state file %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return seterr(err, 1, -EINVAL, "state file %s: not a regular file", path);
    }
    /* The cap is checked before any allocation. */
    if ((uint64_t)st.st_size > SNAP_HEADER_SIZE + (uint64_t)SNAP_MAX_PAYLOAD) {
        close(fd);
        return seterr(err, 1, -EFBIG, "state file %s: larger than the %u MiB cap", path, SNAP_MAX_PAYLOAD >> 20);
    }
    *len = (size_t)st.st_size;
    *buf = malloc(*len ? *len : 1);
    if (!*buf) {
        close(fd);
        return seterr(err, 0, -ENOMEM, "out of memory");
    }
    ssize_t got = read_full(fd, *buf, *len);
    close(fd);
    if (got != (ssize_t)*len) {      /* an error or a file shorter than its size */
        free(*buf);
        return seterr(err, 1, -EIO, "state file %s: short read", path);
    }
    return 0;
}

void moat_restore_config_init(struct moat_restore_config *rc)
{
    memset(rc, 0, sizeof(*rc));
    rc->size = sizeof(*rc);
    rc->console_in = -1;
    rc->console_out = -1;
}

/* The state file's sections (into buf) framed and its metadata checked:
 * secs (*nsecs of them) point into buf. */
static int parse_state(const char *path, const uint8_t *buf, size_t len, struct snap_section *secs, size_t *nsecs,
                       struct snap_meta *meta, struct moat_error *err)
{
    const char *why = NULL;
    int r = snap_parse(buf, len, secs, SNAP_MAX_SECTIONS, nsecs, &why);
    if (r < 0)
        return seterr(err, 1, r, "state file %s: %s", path, why);
    const struct snap_section *ms = snap_find(secs, *nsecs, SNAP_META, 0);
    if (!ms || ms->len != sizeof(*meta))
        return seterr(err, 1, -EINVAL, "state file %s: no metadata section", path);
    memcpy(meta, ms->data, sizeof(*meta));
    if ((r = snap_meta_check(meta, LAYOUT_MAX_CPUS, &why)) < 0)
        return seterr(err, 1, r, "state file %s: %s", path, why);
    return 0;
}

/* Where guest RAM comes from: a diff's chain of parents (opened beneath
 * the snapshot root, into chain), the memory file, or (uffd) a page-fault
 * handler. *mem_fd: the base memory file, checked against the snapshot's
 * size; -1 with a uffd backend. */
static int open_memory(const struct moat_restore_config *rc, const struct snap_meta *meta,
                       const struct snap_section *secs, size_t nsecs, struct snapdiff_chain *chain, int *mem_fd,
                       struct moat_error *err)
{
    bool uffd = rc->mem_uffd_socket != NULL;
    int r = snapdiff_chain_open(chain, rc->state_path, rc->mem_path, rc->snapshot_root, secs, nsecs, meta->mem_size,
                                err);
    if (r < 0)
        return r;
    const char *base_mem = chain->n ? chain->base_mem : rc->mem_path;
    if (uffd && chain->n)
        return seterr(err, 1, -ENOTSUP, "state file %s: a diff snapshot cannot be restored with a uffd memory "
                      "backend (its pages come from several files)", rc->state_path);
    if (chain->n) {         /* opened beneath the snapshot root */
        *mem_fd = chain->base_fd;
        chain->base_fd = -1;
    } else if (!uffd && (*mem_fd = open(base_mem, O_RDONLY | O_CLOEXEC)) < 0) {
        return seterr(err, 1, -errno, "memory file %s: %s", base_mem, strerror(errno));
    }
    struct stat st;
    if (!uffd && (fstat(*mem_fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != meta->mem_size))
        return seterr(err, 1, -EINVAL, "memory file %s: size %lld, the snapshot needs %llu bytes",
                      base_mem, (long long)st.st_size, (unsigned long long)meta->mem_size);
    return 0;
}

/* The VM of the snapshot's shape (*vmp: the caller frees it, also on
 * error), the snapshot layer's record and the agent's post-restore fix-up
 * (run at moat_start if a restored device asks for it) attached, its
 * memory set up from mem_fd, the chain or the uffd handler (us), and the
 * memory files kept for the snapshots of this VM (snapmem.h). */
static int make_vm(const struct moat_restore_config *rc, const struct snap_meta *meta,
                   struct snapdiff_chain *chain, struct uffd_setup *us, int mem_fd, struct moat_vm **vmp,
                   struct snapvm **svp, struct moat_error *err)
{
    int r = vm_alloc(vmp, meta->ncpus, meta->mem_size, rc->console_in, rc->console_out, rc->flags,
                     rc->kick_signal, err);
    if (r < 0)
        return r;
    struct moat_vm *vm = *vmp;
    struct snapvm *sv = NULL;
    if ((r = snapvm_attach(vm, true, &sv)) < 0 || (r = fixup_attach(vm)) < 0)
        return seterr(err, 0, r, "%s", r == -ENOMEM ? "out of memory" : strerror(-r));
    *svp = sv;
    vm->con.limit = rc->console_limit;
    vm->boot.kind = (enum boot_kind)meta->boot_kind;
    vm->pvm_compat = (meta->flags & SNAP_META_PVM) && !(rc->flags & MOAT_F_NO_PVM_COMPAT);
    vm->guest_status = meta->guest_status;
    if (chain->n) {
        sv->map_hook = snapdiff_map;
        sv->map_hook_arg = chain;
    } else if (us->socket_path) {
        sv->map_hook = uffd_map_hook;
        sv->map_hook_arg = us;
    }
    if ((r = vm_setup_kvm(vm, mem_fd, err)) < 0) {
        if (us->why[0])
            seterr(err, 1, r, "%s", us->why);
        return r;
    }
    if ((r = vm_setup_rest(vm, false, err)) < 0)
        return r;
    r = mem_fd >= 0 ? snapmem_note_backing(vm, mem_fd) : 0;     /* none with uffd */
    for (unsigned i = 0; r == 0 && i < chain->n; i++)
        r = snapmem_note_backing(vm, chain->l[i].mem_fd);
    if (r < 0)
        return seterr(err, 0, r, "restore: keeping the memory files open: %s", strerror(-r));
    return 0;
}

/* The machine as the snapshot left it: the virtio devices made again and
 * loaded, the VM's and the legacy devices' state, each vCPU's, then the
 * devices started. */
static int load_machine(struct moat_vm *vm, const struct moat_restore_config *rc, const struct snap_section *secs,
                        size_t nsecs, struct moat_error *err)
{
    int r;
    if ((r = snapdev_restore(vm, rc, secs, nsecs, err)) < 0)
        return r;
    if ((r = restore_vm_state(vm, secs, nsecs, err)) < 0)
        return r;
    for (unsigned i = 0; i < vm->ncpus; i++)
        if ((r = restore_vcpu(vm, &vm->vcpus[i], secs, nsecs, err)) < 0)
            return r;
    return restore_virtio(vm, err);
}

int moat_restore(const struct moat_restore_config *rc_in, struct moat_vm **out, struct moat_error *err)
{
    if (err)
        memset(err, 0, sizeof(*err));
    if (!rc_in || !out || rc_in->size < offsetof(struct moat_restore_config, kick_signal))
        return seterr(err, 1, -EINVAL, "invalid restore configuration");
    moat_timings_set_origin(0);
    struct moat_restore_config rc;
    moat_restore_config_init(&rc);
    memcpy(&rc, rc_in, rc_in->size < sizeof(rc) ? rc_in->size : sizeof(rc));
    bool uffd = rc.mem_uffd_socket != NULL;
    if (!rc.state_path || (!rc.mem_path && !uffd))
        return seterr(err, 1, -EINVAL, "restore needs a state file and a memory file (or a uffd memory backend)");

    uint8_t *buf = NULL;
    size_t len = 0;
    int r = read_state(rc.state_path, &buf, &len, err);
    if (r < 0)
        return r;
    struct snap_section *secs = calloc(SNAP_MAX_SECTIONS, sizeof(*secs));
    if (!secs) {
        free(buf);
        return seterr(err, 0, -ENOMEM, "out of memory");
    }
    size_t nsecs = 0;
    struct moat_vm *vm = NULL;
    struct snapvm *sv = NULL;
    int mem_fd = -1;
    /* a diff's parents, down to the full snapshot */
    struct snapdiff_chain chain = { .base_fd = -1, .root_fd = -1 };
    struct uffd_setup us = { .socket_path = rc.mem_uffd_socket };
    struct snap_meta meta;
    if ((r = parse_state(rc.state_path, buf, len, secs, &nsecs, &meta, err)) < 0 ||
        (r = open_memory(&rc, &meta, secs, nsecs, &chain, &mem_fd, err)) < 0)
        goto out;
    /* A restored VM always tracks written pages (diff snapshots against
     * this one): it costs nothing measurable (docs/snapshot-format.md). */
    rc.flags |= MOAT_F_DIRTY_LOG;
    if ((r = make_vm(&rc, &meta, &chain, &us, mem_fd, &vm, &sv, err)) < 0 ||
        (r = load_machine(vm, &rc, secs, nsecs, err)) < 0)
        goto out;
    sv->map_hook = NULL;
    /* The next diff is against this snapshot (not one whose memory a
     * handler served: moat cannot tell which file that was). */
    if (sv->dirty_log && !uffd && snapdiff_set_last(vm, rc.state_path, rc.mem_path, snap_file_checksum(buf, len),
                                           chain.depth) < 0)
        log_warn("restore: cannot resolve %s: the first snapshot must be a full one", rc.state_path);
    atomic_store(&vm->t_kvm_ready, clock_mono_ns());
    /* Prefetch the working set an earlier restore recorded, or record one
     * (not with a uffd backend: there is no memory file, and what is read
     * ahead is the page-fault handler's choice). */
    if (!uffd)
        wset_restore_start(vm, rc.mem_path, snap_file_checksum(buf, len), (rc.flags & MOAT_F_NO_PREFETCH) != 0,
                           rc.ws_record_ms);
    *out = vm;
    vm = NULL;
    r = 0;
out:
    if (mem_fd >= 0)
        close(mem_fd);  /* the mapping keeps the file */
    snapdiff_chain_close(&chain);
    if (vm)
        vm_free(vm);
    free(secs);
    free(buf);
    return r;
}
