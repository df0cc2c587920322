/* PUT /snapshot/create, PUT /snapshot/load and PATCH /vm (pause,
 * resume): through libmoat; after a load, GET /vm/config reports the
 * restored VM. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "include/moat.h"
#include "vmm/base/clock.h"
#include "devices/virtio/ratelimit.h"

#include "vmm/api/firecracker/fc_vmm.h"

/* One of a restored device's options into buf ("" if not given): true
 * if it was given (a flag, or a value that fits). */
static bool dev_opt(struct moat_vm *vm, const char *type, const char *id, const char *key, char *buf, size_t len)
{
    long n = moat_device_option(vm, type, id, key, buf, len, NULL);
    if (n < 0 || (size_t)n >= len) {
        buf[0] = 0;
        return false;
    }
    return true;
}

static void opt_limiter(struct moat_vm *vm, const char *type, const char *id, const char *prefix,
                        struct fc_limiter *l)
{
    char kb[16], ko[16], bw[96], ops[96];
    snprintf(kb, sizeof kb, "%sbw", prefix);
    snprintf(ko, sizeof ko, "%sops", prefix);
    bool hb = dev_opt(vm, type, id, kb, bw, sizeof bw), ho = dev_opt(vm, type, id, ko, ops, sizeof ops);
    int have = 0, bad = 0;
    memset(l, 0, sizeof *l);
    if ((hb || ho) && ratelimit_from_opts(hb ? bw : NULL, ho ? ops : NULL, &l->cfg, &have, &bad) == 0 && have)
        l->set = true;
    else
        memset(&l->cfg, 0, sizeof l->cfg);
}

/* What GET /vm/config reports after /snapshot/load: the restored VM's
 * shape and devices (the snapshot's, with the load's overrides). A
 * snapshot does not record which drive was the root one, nor the cache
 * type or I/O engine asked for: those read as false/"Unsafe"/"Sync". */
static void adopt_restored(struct fcvm *s, const struct fc_snap_load *l)
{
    unsigned cpus;
    uint64_t mem;
    if (moat_get_shape(s->vm, &cpus, &mem) == 0) {
        s->mc.vcpu_count = cpus;
        s->mc.mem_size_mib = (uint32_t)(mem >> 20);
    }
    s->mc.track_dirty_pages = l->enable_diff_snapshots;
    s->ndrives = s->nnets = 0;
    s->has_vsock = false;
    struct moat_device_info di;
    for (unsigned i = 0; moat_device_info(s->vm, i, &di) == 0; i++) {
        if (!strcmp(di.type, "blk") && s->ndrives < MOAT_MAX_DRIVES && strlen(di.id) <= FC_ID_MAX) {
            struct fc_drive *d = &s->drives[s->ndrives++];
            memset(d, 0, sizeof *d);
            snprintf(d->drive_id, sizeof d->drive_id, "%s", di.id);
            dev_opt(s->vm, "blk", di.id, "path", d->path_on_host, sizeof d->path_on_host);
            char f[8];
            d->is_read_only = dev_opt(s->vm, "blk", di.id, "ro", f, sizeof f);
            opt_limiter(s->vm, "blk", di.id, "", &d->rate_limiter);
        } else if (!strcmp(di.type, "net") && s->nnets < FC_MAX_IFACES && strlen(di.id) <= FC_ID_MAX) {
            struct fc_net *n = &s->nets[s->nnets++];
            memset(n, 0, sizeof *n);
            snprintf(n->iface_id, sizeof n->iface_id, "%s", di.id);
            dev_opt(s->vm, "net", di.id, "tap", n->host_dev_name, sizeof n->host_dev_name);
            dev_opt(s->vm, "net", di.id, "mac", n->guest_mac, sizeof n->guest_mac);
            char mtu[12];
            if (dev_opt(s->vm, "net", di.id, "mtu", mtu, sizeof mtu))
                n->mtu = (uint32_t)strtoul(mtu, NULL, 10);
            opt_limiter(s->vm, "net", di.id, "rx_", &n->rx);
            opt_limiter(s->vm, "net", di.id, "tx_", &n->tx);
        } else if (!strcmp(di.type, "vsock")) {
            char cid[24];
            if (dev_opt(s->vm, "vsock", di.id, "cid", cid, sizeof cid) &&
                dev_opt(s->vm, "vsock", di.id, "uds", s->vsock.uds_path, sizeof s->vsock.uds_path)) {
                s->vsock.guest_cid = (uint32_t)strtoul(cid, NULL, 10);
                s->has_vsock = true;
            }
        }
    }
    memset(s->blk_prev, 0, sizeof s->blk_prev);
    memset(s->net_prev, 0, sizeof s->net_prev);
}

static unsigned snapshot_load(struct fcvm *s, const struct fc_snap_load *l, struct reply *rep)
{
    if (s->configured)
        return fc_fault(rep, "Loading a microVM snapshot not allowed after configuring boot-specific resources.");
    struct moat_restore_config rc;
    moat_restore_config_init(&rc);
    rc.state_path = l->snapshot_path;
    /* Uffd: l->mem_path is the page-fault handler's Unix socket; moat sends
     * it Firecracker's handshake (docs/uffd.md). */
    rc.mem_path = l->uffd ? NULL : l->mem_path;
    rc.mem_uffd_socket = l->uffd ? l->mem_path : NULL;
    rc.console_in = -1;
    rc.console_out = STDOUT_FILENO;
    rc.flags = MOAT_F_FC_THREAD_NAMES | (l->enable_diff_snapshots ? MOAT_F_DIRTY_LOG : 0) | s->sc_flags;
    static struct moat_device devs[FC_MAX_IFACES];
    static char opts[FC_MAX_IFACES][512];
    for (size_t i = 0; i < l->noverrides; i++) {
        if (!fc_opt_safe(l->overrides[i].host_dev_name))
            return fc_fault(rep, "field `network_overrides[].host_dev_name`: bad characters");
        opts[i][0] = 0;
        fc_opt_add(opts[i], sizeof opts[i], "id", l->overrides[i].iface_id, false);
        fc_opt_add(opts[i], sizeof opts[i], "tap", l->overrides[i].host_dev_name, true);
        devs[i] = (struct moat_device){ "net", opts[i] };
    }
    rc.devices = l->noverrides ? devs : NULL;
    rc.ndevices = l->noverrides;
    /* vsock_override: the restored vsock device's host socket. */
    rc.vsock_uds = l->vsock_uds[0] ? l->vsock_uds : NULL;
    int64_t t0 = clock_mono_us();
    struct moat_error err = { 0 };
    struct moat_vm *vm = NULL;
    int r = moat_restore(&rc, &vm, &err);
    if (r < 0)
        return fc_faultf(rep, "Load snapshot error: %s", err.msg[0] ? err.msg : strerror(-r));
    if (l->resume_vm && (r = moat_start(vm)) < 0) {
        moat_destroy(vm);
        return fc_faultf(rep, "Load snapshot error: cannot resume: %s", strerror(-r));
    }
    s->lat_us[LAT_LOAD] = clock_mono_us() - t0;
    s->vm = vm;
    adopt_restored(s, l);
    s->started = l->resume_vm;
    s->paused = !l->resume_vm;
    s->configured = true;
    uint64_t one = 1;
    if (write(s->wake_fd, &one, sizeof one) < 0) { /* the main loop polls again anyway */ }
    return rep->status = 204;
}

static unsigned set_vm_state(struct fcvm *s, bool pause, struct reply *rep)
{
    if (!s->vm)
        return fc_fault(rep, fc_not_before_boot);
    int64_t t0 = clock_mono_us();
    int r;
    if (pause) {
        r = s->started ? moat_pause(s->vm) : -EALREADY;
        if (r == -EALREADY)
            r = 0;
        if (r == 0) {
            s->paused = true;
            s->lat_us[LAT_PAUSE] = clock_mono_us() - t0;
        }
    } else {
        r = !s->started ? moat_start(s->vm) : moat_resume(s->vm);
        if (r == -EALREADY)
            r = 0;
        if (r == 0) {
            s->started = true;
            s->paused = false;
            s->lat_us[LAT_RESUME] = clock_mono_us() - t0;
        }
    }
    if (r < 0)
        return fc_faultf(rep, "%s microVM error: %s", pause ? "Pause" : "Resume", strerror(-r));
    return rep->status = 204;
}

static unsigned snapshot_create(struct fcvm *s, const struct fc_snap_create *c, struct reply *rep)
{
    if (!s->vm)
        return fc_fault(rep, fc_not_before_boot);
    if (!s->paused)
        return fc_fault(rep, "Create snapshot error: the microVM must be paused (PATCH /vm {\"state\": \"Paused\"})");
    int64_t t0 = clock_mono_us();
    int r = c->diff ? moat_snapshot_diff(s->vm, c->snapshot_path, c->mem_file_path)
                    : moat_snapshot(s->vm, c->snapshot_path, c->mem_file_path);
    if (r == -ENOTSUP && c->diff)
        return fc_fault(rep, "Create snapshot error: diff snapshots need dirty page tracking "
                          "(machine-config track_dirty_pages, or enable_diff_snapshots at load)");
    if (r < 0)
        return fc_faultf(rep, "Create snapshot error: %s", strerror(-r));
    s->lat_us[c->diff ? LAT_DIFF_SNAP : LAT_FULL_SNAP] = clock_mono_us() - t0;
    return rep->status = 204;
}

/* PATCH /vm: pause or resume. */
unsigned fc_ep_vm(struct fcvm *s, const struct fc_call *c, struct reply *rep)
{
    bool pause;
    if (fc_decode_vm_state(c->body, c->len, &pause, c->why, FC_WHY_LEN) < 0)
        return fc_fault(rep, c->why);
    return set_vm_state(s, pause, rep);
}

unsigned fc_ep_snap_create(struct fcvm *s, const struct fc_call *c, struct reply *rep)
{
    if (fc_decode_snap_create(c->body, c->len, &c->u->sc, c->why, FC_WHY_LEN) < 0)
        return fc_fault(rep, c->why);
    return snapshot_create(s, &c->u->sc, rep);
}

unsigned fc_ep_snap_load(struct fcvm *s, const struct fc_call *c, struct reply *rep)
{
    if (fc_decode_snap_load(c->body, c->len, &c->u->sl, c->why, FC_WHY_LEN) < 0)
        return fc_fault(rep, c->why);
    return s->vm ? fc_fault(rep, fc_not_after_boot) : snapshot_load(s, &c->u->sl, rep);
}
