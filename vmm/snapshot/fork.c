/* Disk pins and fork (include/moat.h): moat_clone_overlay copies a
 * copy-on-write drive's overlay through the descriptor its device holds;
 * moat_fork snapshots a VM once, clones its overlays once while it is
 * paused, and restores n children from that snapshot, each with its own
 * overlays, vsock socket and console. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devices/blk/overlay_disk.h"
#include "devices/blk/virtio_blk.h"
#include "devices/net/net_tap.h"
#include "devices/virtio/devopt.h"
#include "vmm/core/devtab.h"
#include "vmm/base/log.h"
#include "vmm/core/vm.h"

#define FORK_MAX 65536u     /* children per call */

static struct ovl_disk *drive_overlay(struct moat_vm *vm, unsigned drive)
{
    const struct blk_drive *d = vm_drive(vm, drive);
    return d && d->overlay && d->blk ? virtio_blk_overlay(d->blk) : NULL;
}

/* Pause vm if it runs. *paused_here says whether to resume it after. */
static int pause_if_running(struct moat_vm *vm, bool *paused_here)
{
    *paused_here = false;
    pthread_mutex_lock(&vm->lock);
    bool exited = vm->exited, running = vm->started && !vm->paused;
    pthread_mutex_unlock(&vm->lock);
    if (exited)
        return -ESRCH;
    if (!running)
        return 0;
    int r = moat_pause(vm);
    if (r == -EALREADY)
        return 0;
    if (r < 0)
        return r;
    *paused_here = true;
    return 0;
}

int moat_clone_overlay(struct moat_vm *vm, unsigned drive, const char *dst)
{
    if (!vm || !dst || !*dst)
        return -EINVAL;
    if (drive >= vm_ndrives(vm))
        return -ERANGE;
    struct ovl_disk *d = drive_overlay(vm, drive);
    if (!d)
        return -ENOENT;
    bool paused_here;
    int r = pause_if_running(vm, &paused_here);
    if (r < 0)
        return r;
    /* The VM is paused (devices stopped and flushed) or has not run yet:
     * no request is in flight, the clone is the disk as of now. */
    char why[512] = "";
    r = ovl_clone_disk(d, dst, why, sizeof why);
    if (r < 0)
        log_warn("drive %u: pinning the overlay: %s", drive, why);
    if (paused_here)
        moat_resume(vm);
    return r;
}

/* ---- path templates: only %u (exactly nconv of them) and %% ---- */

static int check_template(const char *fmt, unsigned nconv)
{
    unsigned k = 0;
    for (const char *p = fmt; *p; p++) {
        if (*p != '%')
            continue;
        if (p[1] == '%') {
            p++;
        } else if (p[1] == 'u') {
            k++;
            p++;
        } else {
            return -EINVAL;
        }
    }
    return k == nconv ? 0 : -EINVAL;
}

/* fmt (checked) with its %u replaced by a, then b. */
static char *expand(const char *fmt, unsigned a, unsigned b)
{
    size_t cap = strlen(fmt) + 2 * 12 + 1, n = 0;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    unsigned k = 0;
    for (const char *p = fmt; *p; p++) {
        if (*p == '%' && p[1] == '%') {
            out[n++] = '%';
            p++;
        } else if (*p == '%' && p[1] == 'u') {
            n += (size_t)snprintf(out + n, cap - n, "%u", k++ == 0 ? a : b);
            p++;
        } else {
            out[n++] = *p;
        }
    }
    out[n] = 0;
    return out;
}

void moat_fork_config_init(struct moat_fork_config *fc)
{
    if (!fc)
        return;
    memset(fc, 0, sizeof(*fc));
    fc->size = sizeof(*fc);
}

#define FORK_MAX_TAPS 8u   /* TAP-backed net devices of one parent */

struct fork_plan {
    size_t n;
    unsigned ndrives;
    unsigned ntaps;
    const char *tap_id[FORK_MAX_TAPS];  /* the parent's TAP-backed net devices: ids */
    char **tap;             /* n * ntaps: each child's TAP names */
    char **vsock;           /* n, or NULL */
    char **ovl;             /* n * ndrives (NULL: drive without overlay) */
    bool *made;             /* n * ndrives: the clone exists (ours to remove) */
};

static void plan_free(struct fork_plan *p, bool unlink_clones)
{
    for (size_t i = 0; p->ovl && i < p->n * p->ndrives; i++) {
        if (unlink_clones && p->made && p->made[i])
            unlink(p->ovl[i]);
        free(p->ovl[i]);
    }
    for (size_t i = 0; p->tap && i < p->n * p->ntaps; i++)
        free(p->tap[i]);
    free(p->tap);
    for (size_t i = 0; p->vsock && i < p->n; i++)
        free(p->vsock[i]);
    free(p->ovl);
    free(p->vsock);
    free(p->made);
}

/* Each child's own TAP for each of the parent's TAP-backed net devices
 * (a TAP is held by one process at a time): named, checked, none shared. */
static int plan_taps(struct moat_vm *vm, const struct moat_fork_config *fc, size_t n, struct fork_plan *p,
                     struct moat_error *err)
{
    const char *parent_tap[FORK_MAX_TAPS];
    for (unsigned i = 0; i < vm->ndev; i++) {
        const char *t = strcmp(vm->dev[i].kind->type, "net") ? NULL : devopt_get(vm->dev[i].opts, "tap");
        if (!t)
            continue;
        if (p->ntaps == FORK_MAX_TAPS)
            return seterr(err, 1, -EINVAL, "the parent has more than %u net devices on TAPs", FORK_MAX_TAPS);
        parent_tap[p->ntaps] = t;
        p->tap_id[p->ntaps++] = vm->dev[i].id;
    }
    if (!p->ntaps)
        return 0;
    if (!fc->net_taps && !fc->net_tap_fmt)
        return seterr(err, 1, -EINVAL, "the parent's net device %s is on TAP %s, which one process at a time "
                      "can hold: give the children TAPs of their own (net_taps or net_tap_fmt)",
                      p->tap_id[0], parent_tap[0]);
    if (!fc->net_taps && check_template(fc->net_tap_fmt, 2) < 0 &&
        (p->ntaps > 1 || check_template(fc->net_tap_fmt, 1) < 0))
        return seterr(err, 1, -EINVAL, "net_tap_fmt must hold one %%u (the child) and, when the parent has "
                      "more than one TAP, a second (its net device among them), and no other conversion");
    p->tap = calloc(n * p->ntaps, sizeof(*p->tap));
    if (!p->tap)
        return seterr(err, 0, -ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        for (unsigned k = 0; k < p->ntaps; k++) {
            size_t x = i * p->ntaps + k;
            if (fc->net_taps && !fc->net_taps[x])
                return seterr(err, 1, -EINVAL, "child %zu net %s: no TAP name", i, p->tap_id[k]);
            p->tap[x] = fc->net_taps ? strdup(fc->net_taps[x]) : expand(fc->net_tap_fmt, (unsigned)i, k);
            if (!p->tap[x])
                return seterr(err, 0, -ENOMEM, "out of memory");
            const char *t = p->tap[x];
            if (!*t || strlen(t) > NET_TAP_NAME_MAX || strchr(t, '/') || strchr(t, ','))
                return seterr(err, 1, -EINVAL, "child %zu net %s: TAP name '%.40s': 1 to %u bytes without '/' "
                              "or ','", i, p->tap_id[k], t, NET_TAP_NAME_MAX);
            for (unsigned j = 0; j < p->ntaps; j++)
                if (!strcmp(t, parent_tap[j]))
                    return seterr(err, 1, -EINVAL, "child %zu net %s would share its parent's TAP %s", i,
                                  p->tap_id[k], t);
            for (size_t y = 0; y < x; y++)
                if (!strcmp(t, p->tap[y]))
                    return seterr(err, 1, -EINVAL, "children %zu and %zu would share TAP %s", y / p->ntaps,
                                  i, t);
        }
    return 0;
}

static int plan(struct moat_vm *vm, const struct moat_fork_config *fc, size_t n, struct fork_plan *p,
                struct moat_error *err)
{
    memset(p, 0, sizeof(*p));
    p->n = n;
    p->ndrives = vm_ndrives(vm);
    int r = plan_taps(vm, fc, n, p, err);
    if (r < 0)
        return r;
    if (vm_vsock(vm)) {
        if (!fc->vsock_uds && !fc->vsock_uds_fmt)
            return seterr(err, 1, -EINVAL, "the parent has a vsock device: give the children "
                                           "their socket paths (vsock_uds or vsock_uds_fmt)");
        if (!fc->vsock_uds && check_template(fc->vsock_uds_fmt, 1) < 0)
            return seterr(err, 1, -EINVAL, "vsock_uds_fmt must hold exactly one %%u (and no other conversion)");
        p->vsock = calloc(n, sizeof(*p->vsock));
        if (!p->vsock)
            return seterr(err, 0, -ENOMEM, "out of memory");
        for (size_t i = 0; i < n; i++) {
            if (fc->vsock_uds && !fc->vsock_uds[i])
                return seterr(err, 1, -EINVAL, "child %zu: no vsock socket path", i);
            p->vsock[i] = fc->vsock_uds ? strdup(fc->vsock_uds[i]) : expand(fc->vsock_uds_fmt, (unsigned)i, 0);
            if (!p->vsock[i])
                return seterr(err, 0, -ENOMEM, "out of memory");
        }
    }
    bool any_ovl = false;
    for (unsigned d = 0; d < p->ndrives; d++) {
        if (vm_drive(vm, d)->overlay) {
            if (!drive_overlay(vm, d))
                return seterr(err, 0, -EINVAL, "drive %u: its overlay is not open", d);
            any_ovl = true;
        } else if (!vm_drive(vm, d)->read_only) {
            return seterr(err, 1, -EINVAL, "drive %u (%s) is writable and has no overlay: the children "
                                           "would share and corrupt it", d, vm_drive(vm, d)->path);
        }
    }
    if (!any_ovl)
        return 0;
    if (!fc->drive_overlays && !fc->overlay_fmt)
        return seterr(err, 1, -EINVAL, "the parent has copy-on-write drives: give the children "
                                       "their overlay paths (drive_overlays or overlay_fmt)");
    if (!fc->drive_overlays && check_template(fc->overlay_fmt, 2) < 0)
        return seterr(err, 1, -EINVAL, "overlay_fmt must hold exactly two %%u (child, drive)");
    p->ovl = calloc(n * p->ndrives, sizeof(*p->ovl));
    p->made = calloc(n * p->ndrives, sizeof(*p->made));
    if (!p->ovl || !p->made)
        return seterr(err, 0, -ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        for (unsigned d = 0; d < p->ndrives; d++) {
            if (!vm_drive(vm, d)->overlay)
                continue;
            size_t k = i * p->ndrives + d;
            if (fc->drive_overlays && !fc->drive_overlays[k])
                return seterr(err, 1, -EINVAL, "child %zu drive %u: no overlay path", i, d);
            p->ovl[k] = fc->drive_overlays ? strdup(fc->drive_overlays[k])
                                           : expand(fc->overlay_fmt, (unsigned)i, d);
            if (!p->ovl[k])
                return seterr(err, 0, -ENOMEM, "out of memory");
            for (size_t j = 0; j < k; j++)
                if (p->ovl[j] && !strcmp(p->ovl[j], p->ovl[k]))
                    return seterr(err, 1, -EINVAL, "overlay path %s given twice", p->ovl[k]);
        }
    return 0;
}

/* The children's restores, on up to FORK_WORKERS threads at once (the
 * caller's among them): each is a VM of its own (no state is shared
 * between VMs), and a restore is mostly the kernel's work (KVM objects,
 * mappings), which runs on as many CPUs as there are. The first failure
 * stops the others from starting more; its error is the one reported. */
#define FORK_WORKERS 8u

struct fork_job {
    const struct moat_fork_config *fc;
    const struct fork_plan *p;
    const struct moat_drive *drives;
    struct moat_vm **children;
    size_t n;
    _Atomic size_t next;
    _Atomic bool failed;
    pthread_mutex_t lock;           /* r and err */
    int r;
    struct moat_error *err;
};

static int restore_child(struct fork_job *j, size_t i)
{
    const struct moat_fork_config *fc = j->fc;
    const struct fork_plan *p = j->p;
    struct moat_restore_config rc;
    moat_restore_config_init(&rc);
    rc.state_path = fc->state_path;
    rc.mem_path = fc->mem_path;
    rc.console_in = fc->console_in ? fc->console_in[i] : -1;
    rc.console_out = fc->console_out ? fc->console_out[i] : -1;
    rc.flags = fc->flags | MOAT_F_FORK_CHILD;
    rc.kick_signal = fc->kick_signal;
    rc.drives = p->ndrives ? j->drives : NULL;
    rc.ndrives = p->ndrives;
    rc.drive_overlays = p->ovl ? (const char *const *)&p->ovl[i * p->ndrives] : NULL;
    rc.vsock_uds = p->vsock ? p->vsock[i] : NULL;
    struct moat_device nets[FORK_MAX_TAPS];
    char nopt[FORK_MAX_TAPS][VIRTIO_KIND_ID_MAX + NET_TAP_NAME_MAX + 16];
    for (unsigned k = 0; k < p->ntaps; k++) {
        snprintf(nopt[k], sizeof nopt[k], "id=%s,tap=%s", p->tap_id[k], p->tap[i * p->ntaps + k]);
        nets[k] = (struct moat_device){ .type = "net", .options = nopt[k] };
    }
    rc.devices = p->ntaps ? nets : NULL;
    rc.ndevices = p->ntaps;
    struct moat_error e;
    int r = moat_restore(&rc, &j->children[i], &e);
    if (r < 0) {
        j->children[i] = NULL;
        pthread_mutex_lock(&j->lock);
        if (j->r == 0) {
            j->r = r;
            seterr(j->err, e.is_config, r, "child %zu: %s", i, e.msg);
        }
        pthread_mutex_unlock(&j->lock);
        atomic_store(&j->failed, true);
    }
    return r;
}

static void *fork_worker(void *arg)
{
    struct fork_job *j = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&j->next, 1);
        if (i >= j->n || atomic_load(&j->failed))
            break;
        restore_child(j, i);
    }
    return NULL;
}

static int restore_children(struct fork_job *j)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    size_t want = cpus > 1 ? (size_t)cpus : 1;
    if (want > FORK_WORKERS)
        want = FORK_WORKERS;
    if (want > j->n)
        want = j->n;
    /* The helpers take no asynchronous signal (the caller's stay with the
     * caller's threads), nor do the threads the restores start. */
    pthread_t t[FORK_WORKERS];
    size_t started = 0;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    while (started + 1 < want && pthread_create(&t[started], NULL, fork_worker, j) == 0)
        started++;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    fork_worker(j);         /* this thread is one of them */
    for (size_t k = 0; k < started; k++)
        pthread_join(t[k], NULL);
    return j->r;
}

int moat_fork(struct moat_vm *parent, const struct moat_fork_config *fc_in, struct moat_vm **children,
              size_t n, struct moat_error *err)
{
    if (err)
        memset(err, 0, sizeof(*err));
    if (!parent || !fc_in || !children || n == 0 || n > FORK_MAX ||
        fc_in->size < offsetof(struct moat_fork_config, flags))
        return seterr(err, 1, -EINVAL, "invalid fork configuration");
    struct moat_fork_config fc;
    moat_fork_config_init(&fc);
    memcpy(&fc, fc_in, fc_in->size < sizeof(fc) ? fc_in->size : sizeof(fc));
    fc.size = sizeof(fc);
    if (!fc.state_path || !fc.mem_path)
        return seterr(err, 1, -EINVAL, "fork needs a state file and a memory file path");
    for (size_t i = 0; i < n; i++)
        children[i] = NULL;
    struct fork_plan p;
    int r = plan(parent, &fc, n, &p, err);
    if (r < 0) {
        plan_free(&p, false);
        return r;
    }
    /* One pause: the snapshot, then the first set of clones (the disk state
     * that snapshot refers to). */
    bool paused_here;
    r = pause_if_running(parent, &paused_here);
    if (r < 0) {
        plan_free(&p, false);
        return seterr(err, 0, r, "pausing the parent: %s", strerror(-r));
    }
    r = moat_snapshot(parent, fc.state_path, fc.mem_path);
    if (r < 0)
        seterr(err, 0, r, "snapshot of the parent: %s", strerror(-r));
    for (unsigned d = 0; r == 0 && p.ovl && d < p.ndrives; d++) {
        if (!p.ovl[d])
            continue;
        char why[512] = "";
        r = ovl_clone_disk(drive_overlay(parent, d), p.ovl[d], why, sizeof why);
        if (r < 0)
            seterr(err, r == -EEXIST, r, "drive %u: %s", d, why);
        else
            p.made[d] = true;
    }
    if (paused_here)
        moat_resume(parent);
    /* The other children's clones come from the first one's: the parent
     * runs meanwhile. */
    for (size_t i = 1; r == 0 && p.ovl && i < n; i++)
        for (unsigned d = 0; r == 0 && d < p.ndrives; d++) {
            size_t k = i * p.ndrives + d;
            if (!p.ovl[k])
                continue;
            char why[512] = "";
            r = ovl_clone(p.ovl[d], p.ovl[k], why, sizeof why);
            if (r < 0)
                seterr(err, r == -EEXIST, r, "child %zu drive %u: %s", i, d, why);
            else
                p.made[k] = true;
        }
    struct moat_drive drives[VIRTIO_MMIO_KVM_MAX_SLOTS];
    for (unsigned d = 0; d < p.ndrives; d++)
        drives[d] = (struct moat_drive){ .path = vm_drive(parent, d)->path, .id = vm_drive(parent, d)->id,
                                         .read_only = vm_drive(parent, d)->read_only };
    if (r == 0) {
        struct fork_job j = { .fc = &fc, .p = &p, .drives = drives, .children = children, .n = n, .err = err };
        pthread_mutex_init(&j.lock, NULL);
        r = restore_children(&j);
        pthread_mutex_destroy(&j.lock);
    }
    if (r < 0)
        for (size_t i = 0; i < n; i++) {
            moat_destroy(children[i]);
            children[i] = NULL;
        }
    plan_free(&p, r < 0);
    return r;
}
