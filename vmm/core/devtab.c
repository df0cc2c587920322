/* The VM's device table and its kinds (vmm/core/devtab.h). */
#include "vmm/core/devtab.h"

#include <errno.h>
#include <stddef.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "devices/blk/virtio_blk.h"
#include "devices/virtio/virtio_dev.h"
#include "devices/virtio/virtio_mmio.h"
#include "devices/vsock/vsock.h"
#include "vmm/core/devopt.h"
#include "vmm/base/log.h"
#include "vmm/core/vm.h"

/* ---- the table ---- */

int devtab_add(struct moat_vm *vm, const struct vm_dev_kind *kind, const char *id, void *priv,
               const struct virtio_dev_ops *ops, void *dev, struct moat_error *err)
{
    unsigned slot = vm->ndev;
    int r;
    if (slot >= VIRTIO_MMIO_KVM_MAX_SLOTS) {
        r = seterr(err, 1, -ENOSPC, "%s %s: no free virtio-mmio slot (at most %d devices)", kind->name, id,
                   VIRTIO_MMIO_KVM_MAX_SLOTS);
        goto fail;
    }
    for (unsigned i = 0; i < vm->ndev; i++)
        if (vm->dev[i].kind == kind && strcmp(vm->dev[i].id, id) == 0) {
            r = seterr(err, 1, -EEXIST, "%s %s: the id is taken by another %s device (ids name devices "
                       "in snapshots: give each its own)", kind->name, id, kind->name);
            goto fail;
        }
    char *idc = strdup(id);
    if (!idc) {
        r = seterr(err, 0, -ENOMEM, "out of memory");
        goto fail;
    }
    r = virtio_mmio_kvm_create(&vm->dev[slot].t, vm->vm_fd, &vm->mmio, &vm->mem, slot, ops, dev);
    if (r < 0) {
        free(idc);
        kind->free(priv);
        return seterr(err, 0, r, "%s %s: virtio-mmio slot %u: %s", kind->name, id, slot, strerror(-r));
    }
    vm->dev[slot].kind = kind;
    vm->dev[slot].id = idc;
    vm->dev[slot].priv = priv;
    vm->ndev++;
    return 0;
fail:
    ops->destroy(dev);
    kind->free(priv);
    return r;
}

void devtab_free(struct moat_vm *vm)
{
    for (unsigned i = 0; i < vm->ndev; i++)
        virtio_mmio_kvm_destroy(vm->dev[i].t);      /* its threads drain: before guest RAM goes */
    for (unsigned i = 0; i < vm->ndev; i++) {
        vm->dev[i].kind->free(vm->dev[i].priv);
        free(vm->dev[i].id);
    }
    memset(vm->dev, 0, sizeof(vm->dev));
    vm->ndev = 0;
}

int devtab_save(struct moat_vm *vm, struct snap_writer *w)
{
    size_t cap = sizeof(struct snap_dev) + SNAP_DEV_ID_MAX + sizeof(struct virtio_mmio_state) + SNAP_DEV_DATA_MAX;
    uint8_t *rec = malloc(SNAP_DEV_DATA_MAX), *sec = malloc(cap);
    int r = rec && sec ? 0 : -ENOMEM;
    for (unsigned i = 0; r == 0 && i < vm->ndev; i++) {
        struct vm_dev *d = &vm->dev[i];
        struct virtio_mmio_state st;
        if ((r = virtio_mmio_kvm_save(d->t, &st)) < 0)
            break;
        long n = d->kind->save(d, rec, SNAP_DEV_DATA_MAX);
        if (n < 0) {
            r = (int)n;
            break;
        }
        long sn = snap_dev_encode(sec, cap, d->kind->device_id, d->id, &st, sizeof(st), rec, (size_t)n);
        if (sn < 0) {
            r = (int)sn;
            break;
        }
        snapw_section(w, SNAP_DEV, i, sec, (uint64_t)sn);
    }
    free(rec);
    free(sec);
    return r;
}

/* ---- virtio-blk ---- */

static void drive_free(void *priv)
{
    struct vm_drive *d = priv;
    if (!d)
        return;
    free(d->path);
    free(d->id);
    free(d->overlay);
    free(d);
}

static const struct vm_dev_kind blk_kind;

const char *vm_drive_table_id(const struct moat_drive *d, unsigned k, char name[16])
{
    snprintf(name, 16, "vd%c", k < 26 ? (char)('a' + k) : '?');
    return d->id && *d->id ? d->id : name;
}

/* One drive in the next slot; k: its ordinal among the drives. */
static int add_drive(struct moat_vm *vm, const struct moat_drive *md, const char *overlay, bool direct,
                     unsigned k, struct moat_error *err)
{
    char name[16], why[256];
    const char *tid = vm_drive_table_id(md, k, name);
    struct vm_drive *d = calloc(1, sizeof(*d));
    if (!d)
        return seterr(err, 0, -ENOMEM, "out of memory");
    d->read_only = md->read_only != 0;
    d->path = strdup(md->path);
    d->id = md->id ? strdup(md->id) : NULL;
    d->overlay = overlay ? strdup(overlay) : NULL;
    if (!d->path || (md->id && !d->id) || (overlay && !d->overlay)) {
        drive_free(d);
        return seterr(err, 0, -ENOMEM, "out of memory");
    }
    struct virtio_blk_opts o = { .path = md->path, .read_only = d->read_only, .id = md->id,
                                 .engine = BLK_ENGINE_AUTO, .name = name, .direct = direct,
                                 .overlay = overlay };
    int r = virtio_blk_create(&o, &d->blk, why, sizeof(why));
    if (r < 0) {
        drive_free(d);
        return seterr(err, 1, r, "%s", why);
    }
    return devtab_add(vm, &blk_kind, tid, d, &virtio_blk_ops, d->blk, err);
}

int vm_setup_drives(struct moat_vm *vm, const struct moat_drive *drives, const char *const *overlays,
                    const int *direct, size_t n, struct moat_error *err)
{
    if (n > VIRTIO_MMIO_KVM_MAX_SLOTS - vm->ndev)
        return seterr(err, 1, -EINVAL, "too many drives");
    unsigned k0 = vm_ndrives(vm);
    for (size_t i = 0; i < n; i++) {
        int r = add_drive(vm, &drives[i], overlays ? overlays[i] : NULL, direct && direct[i],
                          k0 + (unsigned)i, err);
        if (r < 0)
            return r;
    }
    return 0;
}

static long blk_save(const struct vm_dev *d, uint8_t *buf, size_t cap)
{
    const struct vm_drive *dr = d->priv;
    return snap_drive_encode_ov(buf, cap, dr->path, dr->id, dr->read_only, dr->overlay);
}

/* A recorded drive, with the restore configuration's override (matched in
 * devtab_restore) if it has any. Config errors for anything missing. */
static int blk_restore(struct moat_vm *vm, const struct devtab_restore *ctx, const struct snap_dev_view *v,
                       unsigned k, struct moat_error *err)
{
    const struct moat_restore_config *rc = ctx->rc;
    char *path = malloc(SNAP_DRIVE_PATH_MAX + 1), *ovls = malloc(SNAP_DRIVE_PATH_MAX + 1);
    char id[SNAP_DRIVE_ID_MAX + 1];
    int r = 0, ro = 0;
    if (!path || !ovls) {
        r = seterr(err, 0, -ENOMEM, "out of memory");
        goto out;
    }
    const char *why = NULL;
    if (snap_drive_decode_ov(v->data, v->data_len, path, SNAP_DRIVE_PATH_MAX + 1, id, sizeof(id), &ro, ovls,
                             SNAP_DRIVE_PATH_MAX + 1, &why) < 0) {
        r = seterr(err, 1, -EINVAL, "state file: drive %s: %s", v->id, why);
        goto out;
    }
    struct moat_drive d = { .path = path, .id = id[0] ? id : NULL, .read_only = ro };
    const char *ovl = ovls[0] ? ovls : NULL;
    bool direct = false;
    /* An override: moat_restore_config.devices (matched by slot) or
     * .drives (matched by drive): path and read-only-ness from it. */
    const struct devopts *oo = ctx->ovr[vm->ndev];
    bool have_o = oo || rc->ndrives;
    struct moat_drive o = { 0 };
    const char *o_ovl = NULL;
    bool o_direct = false;
    if (oo) {
        o = (struct moat_drive){ .path = devopt_get(oo, "path"), .read_only = devopt_get(oo, "ro") != NULL };
        o_ovl = devopt_get(oo, "overlay");
        o_direct = devopt_get(oo, "direct") != NULL;
    } else if (rc->ndrives) {
        size_t o_i = ctx->drive_map[k];
        o = rc->drives[o_i];
        o_ovl = rc->drive_overlays ? rc->drive_overlays[o_i] : NULL;
        o_direct = rc->drive_direct && rc->drive_direct[o_i];
    }
    if (have_o) {
        /* A copy-on-write drive keeps its overlay only if one is given:
         * reopening its base writable would write the shared base. */
        if (ovl && !o_ovl) {
            r = seterr(err, 1, -EINVAL, "drive %s was a copy-on-write drive (overlay %s): "
                       "give an overlay for it too", v->id, ovl);
            goto out;
        }
        if (!o.path || !*o.path) {
            r = seterr(err, 1, -EINVAL, "drive %s: no path", v->id);
            goto out;
        }
        d.path = o.path;
        d.read_only = o.read_only;
        ovl = o_ovl;
        direct = o_direct;
    }
    if (access(d.path, d.read_only || ovl ? R_OK : R_OK | W_OK) < 0)
        r = seterr(err, 1, -errno, "drive %s: %s", d.path, strerror(errno));
    else if (ovl && access(ovl, R_OK) < 0)     /* never a fresh, empty one */
        r = seterr(err, 1, -errno, "drive %s: overlay %s: %s", d.path, ovl, strerror(errno));
    else
        r = add_drive(vm, &d, ovl, direct, k, err);
    if (r == 0 && strcmp(vm->dev[vm->ndev - 1].id, v->id) != 0)
        r = seterr(err, 1, -EINVAL, "state file: drive %s: its record names it %s", v->id,
                   vm->dev[vm->ndev - 1].id);
out:
    free(path);
    free(ovls);
    return r;
}

static const char *const blk_keys[] = { "path", "ro", "id", "overlay", "direct", NULL };

static int blk_check_opts(const struct devopts *o, char *why, size_t wlen)
{
    int r = devopt_only(o, blk_keys, why, wlen);
    if (r < 0)
        return r;
    const char *path = devopt_get(o, "path"), *id = devopt_get(o, "id"), *ovl = devopt_get(o, "overlay");
    if (!path || !*path) {
        snprintf(why, wlen, "path=FILE is required");
        return -EINVAL;
    }
    if ((devopt_get(o, "ro") && *devopt_get(o, "ro")) || (devopt_get(o, "direct") && *devopt_get(o, "direct"))) {
        snprintf(why, wlen, "ro and direct take no value");
        return -EINVAL;
    }
    if (id && (!*id || strlen(id) > SNAP_DRIVE_ID_MAX)) {
        snprintf(why, wlen, "id must be 1 to %u bytes", SNAP_DRIVE_ID_MAX);
        return -EINVAL;
    }
    if (ovl && !*ovl) {
        snprintf(why, wlen, "overlay=FILE needs a file");
        return -EINVAL;
    }
    bool ro = devopt_get(o, "ro") != NULL;
    if (access(path, ro || ovl ? R_OK : R_OK | W_OK) < 0) {
        snprintf(why, wlen, "%s: %s", path, strerror(errno));
        return -errno;
    }
    return 0;
}

static int blk_add_opts(struct moat_vm *vm, const struct devopts *o, struct moat_error *err)
{
    struct moat_drive d = { .path = devopt_get(o, "path"), .id = devopt_get(o, "id"),
                            .read_only = devopt_get(o, "ro") != NULL };
    return add_drive(vm, &d, devopt_get(o, "overlay"), devopt_get(o, "direct") != NULL, vm_ndrives(vm), err);
}

static const struct vm_dev_kind blk_kind = {
    .name = "drive",
    .type = "blk",
    .override_keys = blk_keys,        /* an override may give every option */
    .check_opts = blk_check_opts,
    .add_opts = blk_add_opts,
    .device_id = VIRTIO_ID_BLOCK,
    .save = blk_save,
    .restore = blk_restore,
    .free = drive_free,
};

/* ---- virtio-vsock ---- */

static void vsock_free(void *priv)
{
    struct vm_vsock *v = priv;
    if (v)
        free(v->uds);
    free(v);
}

static const struct vm_dev_kind vsock_kind;

int vm_setup_vsock(struct moat_vm *vm, const char *uds, uint64_t cid, struct moat_error *err)
{
    if (vm_vsock(vm))
        return seterr(err, 1, -EEXIST, "vsock: the VM has one already");
    char why[256];
    struct vm_vsock *v = calloc(1, sizeof(*v));
    if (!v || !(v->uds = strdup(uds))) {
        vsock_free(v);
        return seterr(err, 0, -ENOMEM, "out of memory");
    }
    struct vsock_opts o = { .uds_path = uds, .guest_cid = cid ? cid : VSOCK_DEFAULT_CID, .name = "vsock" };
    int r = vsock_create(&o, &v->dev, why, sizeof(why));
    if (r < 0) {
        vsock_free(v);
        return seterr(err, 1, r, "%s", why);
    }
    return devtab_add(vm, &vsock_kind, "vsock", v, &vsock_ops, v->dev, err);
}

static long vsock_save(const struct vm_dev *d, uint8_t *buf, size_t cap)
{
    /* its CID and socket path; no connections (docs/vsock.md) */
    const struct vm_vsock *v = d->priv;
    return snap_vsock_encode(buf, cap, vsock_guest_cid(v->dev), v->uds);
}

/* Created fresh (no connections), on the recorded socket path or
 * rc->vsock_uds, and marked restored: its first start tells the driver
 * TRANSPORT_RESET, and host clients wait until moat_start's fix-up
 * (vmm/agent/fixup.c) is done. */
static int vsock_restore(struct moat_vm *vm, const struct devtab_restore *ctx, const struct snap_dev_view *v,
                         unsigned k, struct moat_error *err)
{
    (void)k;
    char path[SNAP_VSOCK_PATH_MAX + 1];
    uint64_t cid;
    const char *why = NULL;
    if (snap_vsock_decode(v->data, v->data_len, &cid, path, sizeof(path), &why) < 0)
        return seterr(err, 1, -EINVAL, "state file: vsock: %s", why);
    const struct devopts *oo = ctx->ovr[vm->ndev];
    const char *uds = oo ? devopt_get(oo, "uds") : ctx->rc->vsock_uds ? ctx->rc->vsock_uds : path;
    /* vsock_create replaces a stale socket file: refuse a live one (the
     * snapshotted VM may still be running on it). */
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (strlen(uds) < sizeof(sa.sun_path)) {
        strcpy(sa.sun_path, uds);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0) {
            int live = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
            close(fd);
            if (live)
                return seterr(err, 1, -EADDRINUSE, "vsock: %s is in use (give another path)", uds);
        }
    }
    int r = vm_setup_vsock(vm, uds, cid, err);
    if (r < 0)
        return r;
    vsock_restored(vm_vsock(vm)->dev);
    vm->fixup_pending = true;
    return 0;
}

static const char *const vsock_keys[] = { "uds", "cid", NULL };

/* cid: "" (not given) -> 0; else 3 .. 2^32 - 2, decimal. */
static int parse_cid(const char *s, uint64_t *cid)
{
    *cid = 0;
    if (!s)
        return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end || errno || *s == '-' || v < 3 || v > 0xfffffffeull)
        return -EINVAL;
    *cid = v;
    return 0;
}

static int vsock_check_opts(const struct devopts *o, char *why, size_t wlen)
{
    int r = devopt_only(o, vsock_keys, why, wlen);
    if (r < 0)
        return r;
    const char *uds = devopt_get(o, "uds");
    uint64_t cid;
    if (!uds || !*uds) {
        snprintf(why, wlen, "uds=PATH is required");
        return -EINVAL;
    }
    if (strlen(uds) > VSOCK_UDS_PATH_MAX) {
        snprintf(why, wlen, "uds path longer than %u bytes", VSOCK_UDS_PATH_MAX);
        return -ENAMETOOLONG;
    }
    if (parse_cid(devopt_get(o, "cid"), &cid) < 0) {
        snprintf(why, wlen, "cid must be 3 .. 4294967294");
        return -EINVAL;
    }
    return 0;
}

static int vsock_add_opts(struct moat_vm *vm, const struct devopts *o, struct moat_error *err)
{
    uint64_t cid;
    if (parse_cid(devopt_get(o, "cid"), &cid) < 0)
        return seterr(err, 1, -EINVAL, "vsock: cid must be 3 .. 4294967294");
    return vm_setup_vsock(vm, devopt_get(o, "uds"), cid, err);
}

/* the CID is the snapshot's: the guest has it */
static const char *const vsock_override_keys[] = { "uds", NULL };

static const struct vm_dev_kind vsock_kind = {
    .name = "vsock",
    .type = "vsock",
    .override_keys = vsock_override_keys,
    .cmdline_extra = "moat.agent=1024",   /* /init starts the guest agent (docs/agent-protocol.md) */
    .check_opts = vsock_check_opts,
    .add_opts = vsock_add_opts,
    .device_id = VIRTIO_ID_VSOCK,
    .save = vsock_save,
    .restore = vsock_restore,
    .free = vsock_free,
};

/* ---- restore ---- */

/* The kinds a snapshot's devices are matched to. */
static const struct vm_dev_kind *const kinds[] = { &blk_kind, &vsock_kind };

static const struct vm_dev_kind *kind_by_type(const char *type)
{
    for (size_t i = 0; type && i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (!strcmp(kinds[i]->type, type))
            return kinds[i];
    return NULL;
}

const char *devtab_cmdline_extra(const char *type)
{
    const struct vm_dev_kind *k = kind_by_type(type);
    return k ? k->cmdline_extra : NULL;
}

int devtab_check_devices(const struct moat_config *cfg, struct moat_error *err)
{
    const struct moat_device *d = cfg->devices;
    size_t n = cfg->ndevices;
    if (n && !d)
        return seterr(err, 1, -EINVAL, "device list missing");
    /* every device has a slot; one vsock device per VM */
    size_t slots = cfg->ndrives + (cfg->vsock_uds ? 1 : 0) + n, nvsock = cfg->vsock_uds ? 1 : 0;
    if (slots > VIRTIO_MMIO_KVM_MAX_SLOTS)
        return seterr(err, 1, -EINVAL, "too many devices (%zu with the drives and vsock, at most %d)", slots,
                      VIRTIO_MMIO_KVM_MAX_SLOTS);
    for (size_t i = 0; i < n; i++)
        nvsock += d[i].type && !strcmp(d[i].type, "vsock");
    if (nvsock > 1)
        return seterr(err, 1, -EINVAL, "more than one vsock device (a VM has at most one)");
    struct devopts *o = malloc(sizeof(*o));
    if (!o)
        return seterr(err, 0, -ENOMEM, "out of memory");
    int r = 0;
    for (size_t i = 0; i < n && r == 0; i++) {
        const struct vm_dev_kind *k = kind_by_type(d[i].type);
        char why[200] = "";
        if (!k)
            r = seterr(err, 1, -EINVAL, "device %zu: unknown type '%.40s' (blk, vsock)", i,
                       d[i].type ? d[i].type : "(none)");
        else if ((r = devopt_parse(d[i].options, o, why, sizeof(why))) < 0 ||
                 (r = k->check_opts(o, why, sizeof(why))) < 0)
            r = seterr(err, 1, r, "device %zu (%s): %s", i, k->type, why);
    }
    free(o);
    return r;
}

int devtab_add_devices(struct moat_vm *vm, const struct moat_device *d, size_t n, struct moat_error *err)
{
    struct devopts *o = malloc(sizeof(*o));
    if (!o)
        return seterr(err, 0, -ENOMEM, "out of memory");
    int r = 0;
    for (size_t i = 0; i < n && r == 0; i++) {
        const struct vm_dev_kind *k = kind_by_type(d[i].type);
        char why[200] = "";
        if (!k || devopt_parse(d[i].options, o, why, sizeof(why)) < 0)   /* checked before */
            r = seterr(err, 1, -EINVAL, "device %zu: %s", i, k ? why : "unknown type");
        else
            r = k->add_opts(vm, o, err);
    }
    free(o);
    return r;
}

static const struct vm_dev_kind *kind_by_id(uint32_t device_id)
{
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (kinds[i]->device_id == device_id)
            return kinds[i];
    return NULL;
}

/* Restore overrides given as devices (type, options): parsed into *ovo
 * (rc->ndevices entries, freed by the caller) and matched to the recorded
 * devices v[0, n) into ctx->ovr. Each override's type must be known, its
 * options among the kind's override_keys and valid (the check at create),
 * and it must name exactly one recorded device, not claimed twice nor also
 * overridden by the typed fields (drives, vsock_uds). */
static int match_device_overrides(const struct moat_restore_config *rc, const struct snap_dev_view *v,
                                  const struct vm_dev_kind *const *kind, unsigned n,
                                  struct devtab_restore *ctx, struct devopts **ovo, struct moat_error *err)
{
    if (!rc->devices || rc->ndevices > VIRTIO_MMIO_KVM_MAX_SLOTS)
        return seterr(err, 1, -EINVAL, "device overrides: %s", rc->devices ? "too many" : "list missing");
    *ovo = calloc(rc->ndevices, sizeof(**ovo));
    if (!*ovo)
        return seterr(err, 0, -ENOMEM, "out of memory");
    for (size_t j = 0; j < rc->ndevices; j++) {
        struct devopts *o = &(*ovo)[j];
        const struct vm_dev_kind *k = kind_by_type(rc->devices[j].type);
        char why[200] = "";
        if (!k)
            return seterr(err, 1, -EINVAL, "device override %zu: unknown type '%.40s' (blk, vsock)", j,
                          rc->devices[j].type ? rc->devices[j].type : "(none)");
        int r = devopt_parse(rc->devices[j].options, o, why, sizeof(why));
        if (r == 0)
            r = devopt_only(o, k->override_keys, why, sizeof(why));
        if (r == 0)
            r = k->check_opts(o, why, sizeof(why));
        if (r < 0)
            return seterr(err, 1, r, "device override %zu (%s): %s", j, k->type, why);
        const char *id = devopt_get(o, "id");
        unsigned hit = n, count = 0;
        for (unsigned i = 0; i < n; i++)
            if (kind[i] == k && (!id || !strcmp(v[i].id, id))) {
                hit = i;
                count++;
            }
        if (count == 0)
            return seterr(err, 1, -EINVAL, "device override %zu (%s%s%s): the snapshot has no such device", j,
                          k->type, id ? " " : "", id ? id : "");
        if (count > 1)
            return seterr(err, 1, -EINVAL, "device override %zu (%s): the snapshot has %u of them: name one "
                          "with id=", j, k->type, count);
        if (ctx->ovr[hit] || (k == &blk_kind && rc->ndrives) || (k == &vsock_kind && rc->vsock_uds))
            return seterr(err, 1, -EINVAL, "device override %zu: %s %s is overridden twice", j, k->type,
                          v[hit].id);
        ctx->ovr[hit] = o;
    }
    return 0;
}

int devtab_restore(struct moat_vm *vm, const struct moat_restore_config *rc,
                   const struct snap_section *secs, size_t nsecs, struct moat_error *err)
{
    struct snap_dev_view *v = calloc(VIRTIO_MMIO_KVM_MAX_SLOTS, sizeof(*v));
    if (!v)
        return seterr(err, 0, -ENOMEM, "out of memory");
    const struct vm_dev_kind *kind[VIRTIO_MMIO_KVM_MAX_SLOTS];
    unsigned n = 0;
    int r = 0;
    /* The recorded devices: slots 0 .. n-1, each decoded and of a known
     * kind, ids unique per kind. */
    for (size_t i = 0; i < nsecs && r == 0; i++) {
        if (secs[i].type != SNAP_DEV)
            continue;
        if (secs[i].index != n || n >= VIRTIO_MMIO_KVM_MAX_SLOTS) {
            r = seterr(err, 1, -EINVAL, "state file: device section for slot %u out of order",
                       (unsigned)secs[i].index);
            break;
        }
        const char *why = NULL;
        if (snap_dev_decode(secs[i].data, secs[i].len, &v[n], &why) < 0) {
            r = seterr(err, 1, -EINVAL, "state file: device in slot %u: %s", n, why);
            break;
        }
        if (!(kind[n] = kind_by_id(v[n].device_id))) {
            r = seterr(err, 1, -EINVAL, "state file: device %s in slot %u has virtio type %u, which this "
                       "moat does not have", v[n].id, n, (unsigned)v[n].device_id);
            break;
        }
        if (v[n].state_len != sizeof(struct virtio_mmio_state)) {
            r = seterr(err, 1, -EINVAL, "state file: %s %s: transport state of %u bytes, not %zu",
                       kind[n]->name, v[n].id, (unsigned)v[n].state_len, sizeof(struct virtio_mmio_state));
            break;
        }
        for (unsigned j = 0; j < n && r == 0; j++)
            if (kind[j] == kind[n] && strcmp(v[j].id, v[n].id) == 0)
                r = seterr(err, 1, -EINVAL, "state file: two %s devices named %s", kind[n]->name, v[n].id);
        n++;
    }
    /* The configuration's overrides, matched to the recorded devices by
     * kind and id before anything is created. */
    struct devtab_restore ctx = { .rc = rc };
    const char *snap_ids[VIRTIO_MMIO_KVM_MAX_SLOTS], *ovr_ids[VIRTIO_MMIO_KVM_MAX_SLOTS];
    unsigned ndrv = 0, nvsock = 0;
    for (unsigned i = 0; i < n; i++) {
        if (kind[i] == &blk_kind)
            snap_ids[ndrv++] = v[i].id;
        else if (kind[i] == &vsock_kind)
            nvsock++;
    }
    if (r == 0 && rc->ndrives && !rc->drives)
        r = seterr(err, 1, -EINVAL, "drive list missing");
    if (r == 0 && rc->ndrives) {
        char why[160];
        for (size_t k = 0; k < rc->ndrives && k < VIRTIO_MMIO_KVM_MAX_SLOTS; k++)
            ovr_ids[k] = rc->drives[k].id && *rc->drives[k].id ? rc->drives[k].id : NULL;
        if (rc->ndrives > VIRTIO_MMIO_KVM_MAX_SLOTS ||
            snap_match_overrides(snap_ids, ndrv, ovr_ids, rc->ndrives, ctx.drive_map, why, sizeof(why)) < 0)
            r = seterr(err, 1, -EINVAL, "drives: %s",
                       rc->ndrives > VIRTIO_MMIO_KVM_MAX_SLOTS ? "too many given" : why);
    }
    if (r == 0 && rc->vsock_uds && !nvsock)
        r = seterr(err, 1, -EINVAL, "the snapshot has no vsock device");
    /* moat_restore_config.devices: each names a recorded device by type
     * and id= (or the only one of its type) and replaces its options */
    struct devopts *ovo = NULL;
    if (r == 0 && rc->size > offsetof(struct moat_restore_config, ndevices) && rc->ndevices)
        r = match_device_overrides(rc, v, kind, n, &ctx, &ovo, err);
    /* Recreate them in their slots, and load each transport's state
     * (untrusted: virtio_mmio_load checks it). */
    unsigned seen[sizeof(kinds) / sizeof(kinds[0])] = { 0 };
    for (unsigned i = 0; i < n && r == 0; i++) {
        size_t ki = 0;
        while (kinds[ki] != kind[i])
            ki++;
        r = kind[i]->restore(vm, &ctx, &v[i], seen[ki]++, err);
        if (r == 0 && vm->ndev != i + 1)
            r = seterr(err, 0, -EINVAL, "restore: %s %s did not land in slot %u", kind[i]->name, v[i].id, i);
        if (r < 0)
            break;
        struct virtio_mmio_state st;
        memcpy(&st, v[i].state, sizeof(st));
        const char *why = NULL;
        r = virtio_mmio_kvm_load(vm->dev[i].t, &st, &why);
        if (r < 0)
            r = seterr(err, 1, r, "state file: %s %s (slot %u): %s", kind[i]->name, v[i].id, i,
                       why ? why : strerror(-r));
    }
    free(ovo);
    free(v);
    return r;
}

/* ---- accessors ---- */

unsigned vm_ndrives(const struct moat_vm *vm)
{
    unsigned n = 0;
    for (unsigned i = 0; i < vm->ndev; i++)
        n += vm->dev[i].kind == &blk_kind;
    return n;
}

const struct vm_drive *vm_drive(const struct moat_vm *vm, unsigned k)
{
    for (unsigned i = 0; i < vm->ndev; i++)
        if (vm->dev[i].kind == &blk_kind && k-- == 0)
            return vm->dev[i].priv;
    return NULL;
}

const struct vm_vsock *vm_vsock(const struct moat_vm *vm)
{
    for (unsigned i = 0; i < vm->ndev; i++)
        if (vm->dev[i].kind == &vsock_kind)
            return vm->dev[i].priv;
    return NULL;
}

const char *vm_vsock_uds(const struct moat_vm *vm)
{
    const struct vm_vsock *v = vm_vsock(vm);
    return v ? v->uds : NULL;
}

struct vsock_dev *vm_vsock_dev(const struct moat_vm *vm)
{
    const struct vm_vsock *v = vm_vsock(vm);
    return v ? v->dev : NULL;
}
