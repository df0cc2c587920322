/* The VM's device table (vmm/core/devtab.h). Generic: what a device is
 * and how it is made is its kind's (devices/virtio/virtio_kind.h); this
 * file makes the kinds' devices from a configuration, saves each as the
 * options that made it, and makes them again from a snapshot. */
#include "vmm/core/devtab.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devices/net/net_kind.h"
#include "devices/rng/rng_kind.h"
#include "devices/virtio/devopt.h"
#include "devices/virtio/virtio_dev.h"
#include "devices/virtio/virtio_mmio.h"
#include "vmm/base/log.h"
#include "vmm/base/scfilter.h"
#include "vmm/core/vm.h"
#include "vmm/core/vmhooks.h"
#include "vmm/transport/virtio_mmio_kvm.h"

/* ---- the kinds: a new device is one more entry ---- */

static const struct virtio_kind *const kinds[] = {
    &blk_kind,
    &vsock_kind,
    &net_kind,
    &rng_kind,
};
#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))

const struct virtio_kind *devtab_kind(const char *type)
{
    for (size_t i = 0; type && i < NKINDS; i++)
        if (!strcmp(kinds[i]->type, type))
            return kinds[i];
    return NULL;
}

const char *devtab_types(char buf[DEVTAB_TYPES_LEN])
{
    buf[0] = 0;
    for (size_t i = 0; i < NKINDS; i++)
        snprintf(buf + strlen(buf), DEVTAB_TYPES_LEN - strlen(buf), "%s%s", i ? ", " : "", kinds[i]->type);
    return buf;
}

static const struct virtio_kind *kind_by_id(uint32_t device_id)
{
    for (size_t i = 0; i < NKINDS; i++)
        if (kinds[i]->device_id == device_id)
            return kinds[i];
    return NULL;
}

/* The kind made from the typed configuration fields t, or NULL. */
static const struct virtio_kind *typed_kind(enum virtio_kind_typed t)
{
    for (size_t i = 0; t != VIRTIO_KIND_TYPED_NONE && i < NKINDS; i++)
        if (kinds[i]->typed == t)
            return kinds[i];
    return NULL;
}

/* How many devices cfg's typed fields t make. */
static size_t typed_count(const struct moat_config *cfg, enum virtio_kind_typed t)
{
    switch (t) {
    case VIRTIO_KIND_TYPED_DRIVES:
        return cfg->ndrives;
    case VIRTIO_KIND_TYPED_VSOCK:
        return cfg->vsock_uds ? 1 : 0;
    default:
        return 0;
    }
}

static size_t kind_index(const struct virtio_kind *k)
{
    size_t i = 0;
    while (i < NKINDS && kinds[i] != k)
        i++;
    return i;
}

/* ---- the table ---- */

/* Make a device of kind from checked options o into the next slot; k: its
 * ordinal among the VM's devices of its kind. want_id: the id it must get
 * (a snapshot's), or NULL. */
static int add_device(struct moat_vm *vm, const struct virtio_kind *kind, const struct devopts *o, unsigned k,
                      bool restoring, const char *want_id, struct moat_error *err)
{
    char id[VIRTIO_KIND_ID_MAX + 1], why[512] = "";
    unsigned slot = vm->ndev;
    kind->id(o, k, id);
    if (want_id && strcmp(id, want_id) != 0)
        return seterr(err, 1, -EINVAL, "state file: %s %s: its record names it %s", kind->name, want_id, id);
    if (slot >= VIRTIO_MMIO_KVM_MAX_SLOTS)
        return seterr(err, 1, -ENOSPC, "%s %s: no free virtio-mmio slot (at most %d devices)", kind->name, id,
                      VIRTIO_MMIO_KVM_MAX_SLOTS);
    for (unsigned i = 0; i < vm->ndev; i++)
        if (vm->dev[i].kind == kind && strcmp(vm->dev[i].id, id) == 0)
            return seterr(err, 1, -EEXIST, "%s %s: the id is taken by another %s device (ids name devices "
                          "in snapshots: give each its own)", kind->name, id, kind->name);
    struct vm_dev *d = &vm->dev[slot];
    d->id = strdup(id);
    d->opts = malloc(sizeof(*d->opts));
    if (!d->id || !d->opts || devopt_copy(d->opts, o) < 0) {
        free(d->id);
        free(d->opts);
        memset(d, 0, sizeof(*d));
        return seterr(err, 0, -ENOMEM, "out of memory");
    }
    struct virtio_made m = { 0 };
    int r = kind->create(d->opts, id, restoring, (int)vm->seccomp, &m, why, sizeof(why));
    if (r < 0) {
        seterr(err, 1, r, "%s", why);
        goto fail;
    }
    r = virtio_mmio_kvm_create(&d->t, vm->vm_fd, &vm->mmio, &vm->mem, slot, m.ops, m.dev);
    if (r < 0) {       /* the transport destroyed the device */
        kind->free(m.priv);
        seterr(err, 0, r, "%s %s: virtio-mmio slot %u: %s", kind->name, id, slot, strerror(-r));
        goto fail;
    }
    virtio_mmio_kvm_set_seccomp(d->t, vm->runner, vm->seccomp);
    d->kind = kind;
    d->priv = m.priv;
    vm->ndev++;
    return 0;
fail:
    free(d->id);
    free(d->opts);
    memset(d, 0, sizeof(*d));
    return r;
}

void devtab_free(struct moat_vm *vm)
{
    for (unsigned i = 0; i < vm->ndev; i++)
        virtio_mmio_kvm_destroy(vm->dev[i].t);      /* its threads drain: before guest RAM goes */
    for (unsigned i = 0; i < vm->ndev; i++) {
        vm->dev[i].kind->free(vm->dev[i].priv);
        free(vm->dev[i].id);
        free(vm->dev[i].opts);
    }
    memset(vm->dev, 0, sizeof(vm->dev));
    vm->ndev = 0;
}

int devtab_save(struct moat_vm *vm, unsigned slot, struct virtio_mmio_state *st, uint8_t *buf, size_t cap,
                struct devtab_rec *out)
{
    struct vm_dev *d = &vm->dev[slot];
    int r = virtio_mmio_kvm_save(d->t, st);
    if (r < 0)
        return r;
    long n = devopt_encode(d->opts, buf, cap);
    if (n < 0)
        return (int)n;
    *out = (struct devtab_rec){ .device_id = d->kind->device_id, .id = d->id, .state = st,
                                .state_len = sizeof(*st), .data = buf, .data_len = (size_t)n };
    return 0;
}

/* ---- a configuration's devices ---- */

struct cfg_dev {
    const struct virtio_kind *kind;
    struct devopts o;
    char label[48];             /* "drive 1", "device 0 (blk)": in messages */
};

size_t devtab_config_count(const struct moat_config *cfg)
{
    return cfg->ndrives + (cfg->vsock_uds ? 1 : 0) + cfg->ndevices;
}

/* A typed drive (moat_config.drives and its parallel arrays) as options. */
static int drive_opts(const struct moat_drive *d, const char *overlay, bool direct, struct devopts *o)
{
    devopt_init(o);
    int r = devopt_set(o, "path", d->path);
    if (r == 0 && d->read_only)
        r = devopt_set(o, "ro", NULL);
    if (r == 0 && d->id && *d->id)
        r = devopt_set(o, "id", d->id);
    if (r == 0 && overlay)
        r = devopt_set(o, "overlay", overlay);
    if (r == 0 && direct)
        r = devopt_set(o, "direct", NULL);
    return r;
}

/* cfg's devices in slot order, parsed and checked (each known, its options
 * valid), into list (devtab_config_count entries, the caller's). */
static int config_list(const struct moat_config *cfg, struct cfg_dev *list, struct moat_error *err)
{
    size_t n = 0;
    char why[512];
    if (cfg->ndrives && !cfg->drives)
        return seterr(err, 1, -EINVAL, "drive list missing");
    if (cfg->ndevices && !cfg->devices)
        return seterr(err, 1, -EINVAL, "device list missing");
    const struct virtio_kind *drive_kind = typed_kind(VIRTIO_KIND_TYPED_DRIVES),
                             *vs_kind = typed_kind(VIRTIO_KIND_TYPED_VSOCK);
    if ((cfg->ndrives && !drive_kind) || (cfg->vsock_uds && !vs_kind))
        return seterr(err, 1, -EINVAL, "%s: this moat has no kind of device made from them",
                      cfg->ndrives && !drive_kind ? "drives" : "vsock");
    for (size_t i = 0; i < cfg->ndrives; i++, n++) {
        struct cfg_dev *c = &list[n];
        const struct moat_drive *d = &cfg->drives[i];
        c->kind = drive_kind;
        snprintf(c->label, sizeof(c->label), "drive %zu", i);
        if (!d->path || !*d->path)
            return seterr(err, 1, -EINVAL, "drive %zu: no path", i);
        if (drive_opts(d, cfg->drive_overlays ? cfg->drive_overlays[i] : NULL,
                       cfg->drive_direct && cfg->drive_direct[i], &c->o) < 0)
            return seterr(err, 1, -EINVAL, "drive %zu: path, id or overlay too long or malformed", i);
    }
    if (cfg->vsock_uds) {
        struct cfg_dev *c = &list[n++];
        c->kind = vs_kind;
        snprintf(c->label, sizeof(c->label), "vsock");
        devopt_init(&c->o);
        char cid[24];
        snprintf(cid, sizeof(cid), "%llu", (unsigned long long)cfg->vsock_cid);
        if (devopt_set(&c->o, "uds", cfg->vsock_uds) < 0 ||
            (cfg->vsock_cid && devopt_set(&c->o, "cid", cid) < 0))
            return seterr(err, 1, -EINVAL, "vsock: socket path too long or malformed");
    }
    for (size_t i = 0; i < cfg->ndevices; i++, n++) {
        struct cfg_dev *c = &list[n];
        const struct moat_device *d = &cfg->devices[i];
        char tb[DEVTAB_TYPES_LEN];
        if (!(c->kind = devtab_kind(d->type)))
            return seterr(err, 1, -EINVAL, "device %zu: unknown type '%.40s' (%s)", i, d->type ? d->type : "(none)",
                          devtab_types(tb));
        snprintf(c->label, sizeof(c->label), "device %zu (%s)", i, c->kind->type);
        int r = devopt_parse(d->options, &c->o, why, sizeof(why));
        if (r < 0)
            return seterr(err, 1, r, "%s: %s", c->label, why);
    }
    for (size_t i = 0; i < n; i++) {
        struct cfg_dev *c = &list[i];
        int r = devopt_only(&c->o, c->kind->keys, why, sizeof(why));
        if (r == 0)
            r = c->kind->check(&c->o, why, sizeof(why));
        if (r < 0)
            return seterr(err, 1, r, "%s: %s", c->label, why);
    }
    return 0;
}

static int config_devices(const struct moat_config *cfg, struct cfg_dev **out, size_t *n, struct moat_error *err)
{
    *out = NULL;
    *n = devtab_config_count(cfg);
    if (cfg->ndrives > MOAT_MAX_DRIVES)
        return seterr(err, 1, -EINVAL, "too many drives (%zu, at most %d)", cfg->ndrives, MOAT_MAX_DRIVES);
    if (*n > VIRTIO_MMIO_KVM_MAX_SLOTS)
        return seterr(err, 1, -EINVAL, "too many devices (%zu with the drives and vsock, at most %d)", *n,
                      VIRTIO_MMIO_KVM_MAX_SLOTS);
    struct cfg_dev *list = calloc(*n ? *n : 1, sizeof(*list));
    if (!list)
        return seterr(err, 0, -ENOMEM, "out of memory");
    int r = config_list(cfg, list, err);
    if (r < 0) {
        free(list);
        return r;
    }
    *out = list;
    return 0;
}

/* fn on each device cfg asks for, in order, with its index among those of
 * its kind, until one fails. */
typedef int (*cfg_dev_fn)(void *ctx, const struct cfg_dev *list, size_t i, unsigned ki,
                          struct moat_error *err);

static int each_config_device(const struct moat_config *cfg, cfg_dev_fn fn, void *ctx,
                              struct moat_error *err)
{
    size_t n;
    struct cfg_dev *list;
    int r = config_devices(cfg, &list, &n, err);
    if (r < 0)
        return r;
    unsigned count[NKINDS] = { 0 };
    for (size_t i = 0; i < n && r == 0; i++)
        r = fn(ctx, list, i, count[kind_index(list[i].kind)]++, err);
    free(list);
    return r;
}

/* Device i (the ki-th of its kind): within its kind's count, and an id
 * no earlier device of its kind has. */
static int check_one(void *ctx, const struct cfg_dev *list, size_t i, unsigned ki,
                     struct moat_error *err)
{
    const struct virtio_kind *k = list[i].kind;
    if (k->max_per_vm && ki == k->max_per_vm) {
        if (k->max_per_vm == 1)
            return seterr(err, 1, -EINVAL, "more than one %s device (a VM has at most one)", k->type);
        return seterr(err, 1, -EINVAL, "more than %u %s devices (a VM has at most %u)", k->max_per_vm,
                      k->type, k->max_per_vm);
    }
    /* ids name devices in snapshots: each its own */
    char id_i[VIRTIO_KIND_ID_MAX + 1], id_j[VIRTIO_KIND_ID_MAX + 1];
    k->id(&list[i].o, ki, id_i);
    unsigned kj = 0;
    for (size_t j = 0; j < i; j++) {
        if (list[j].kind != k)
            continue;
        k->id(&list[j].o, kj, id_j);
        if (!strcmp(id_i, id_j))
            return seterr(err, 1, -EINVAL, "%s %u: id %s is %s %u's too (each needs its own)", k->name, ki,
                          id_i, k->name, kj);
        kj++;
    }
    return 0;
}

int devtab_check_config(const struct moat_config *cfg, struct moat_error *err)
{
    return each_config_device(cfg, check_one, NULL, err);
}

static int add_one(void *ctx, const struct cfg_dev *list, size_t i, unsigned ki, struct moat_error *err)
{
    return add_device(ctx, list[i].kind, &list[i].o, ki, false, NULL, err);
}

int devtab_add_config(struct moat_vm *vm, const struct moat_config *cfg, struct moat_error *err)
{
    return each_config_device(cfg, add_one, vm, err);
}

size_t devtab_cmdline_extras(const struct moat_config *cfg, const char **out, size_t max)
{
    size_t nx = 0;
    for (size_t i = 0; i < NKINDS; i++) {
        const struct virtio_kind *k = kinds[i];
        bool have = typed_count(cfg, k->typed) > 0;
        for (size_t j = 0; !have && cfg->devices && j < cfg->ndevices; j++)
            have = cfg->devices[j].type && !strcmp(cfg->devices[j].type, k->type);
        if (have && k->cmdline_extra && nx < max)
            out[nx++] = k->cmdline_extra;
    }
    return nx;
}

/* ---- restore ---- */

/* A restore's overrides, matched to the recorded devices (slot i): the
 * options given anew, or none. */
struct restore_ovr {
    bool have[VIRTIO_MMIO_KVM_MAX_SLOTS];
    bool typed[VIRTIO_MMIO_KVM_MAX_SLOTS];      /* from rc->drives / rc->vsock_uds */
    struct devopts o[VIRTIO_MMIO_KVM_MAX_SLOTS];
};

/* The typed overrides: rc->drives (matched to the recorded drives by id,
 * the others in order) and rc->vsock_uds. */
static int match_typed(const struct moat_restore_config *rc, const struct devtab_rec *v,
                       const struct virtio_kind *const *kind, unsigned n, struct restore_ovr *ov,
                       struct moat_error *err)
{
    const char *snap_ids[VIRTIO_MMIO_KVM_MAX_SLOTS], *ovr_ids[VIRTIO_MMIO_KVM_MAX_SLOTS];
    unsigned slot_of[VIRTIO_MMIO_KVM_MAX_SLOTS], ndrv = 0;
    int vs = -1;
    for (unsigned i = 0; i < n; i++) {
        if (kind[i]->typed == VIRTIO_KIND_TYPED_DRIVES) {
            slot_of[ndrv] = i;
            snap_ids[ndrv++] = v[i].id;
        } else if (kind[i]->typed == VIRTIO_KIND_TYPED_VSOCK) {
            vs = (int)i;
        }
    }
    if (rc->ndrives && !rc->drives)
        return seterr(err, 1, -EINVAL, "drive list missing");
    if (rc->ndrives) {
        char why[160];
        size_t map[VIRTIO_MMIO_KVM_MAX_SLOTS];
        if (rc->ndrives > VIRTIO_MMIO_KVM_MAX_SLOTS)
            return seterr(err, 1, -EINVAL, "drives: too many given");
        for (size_t k = 0; k < rc->ndrives; k++)
            ovr_ids[k] = rc->drives[k].id && *rc->drives[k].id ? rc->drives[k].id : NULL;
        if (devtab_match_overrides(snap_ids, ndrv, ovr_ids, rc->ndrives, map, why, sizeof(why)) < 0)
            return seterr(err, 1, -EINVAL, "drives: %s", why);
        for (unsigned k = 0; k < ndrv; k++) {
            size_t oi = map[k];
            unsigned s = slot_of[k];
            const struct moat_drive *d = &rc->drives[oi];
            if (!d->path || !*d->path)
                return seterr(err, 1, -EINVAL, "drive %s: no path", v[s].id);
            if (drive_opts(d, rc->drive_overlays ? rc->drive_overlays[oi] : NULL,
                           rc->drive_direct && rc->drive_direct[oi], &ov->o[s]) < 0)
                return seterr(err, 1, -EINVAL, "drive %s: path or overlay too long or malformed", v[s].id);
            ov->have[s] = ov->typed[s] = true;
        }
    }
    if (rc->vsock_uds) {
        if (vs < 0)
            return seterr(err, 1, -EINVAL, "the snapshot has no vsock device");
        devopt_init(&ov->o[vs]);
        if (devopt_set(&ov->o[vs], "uds", rc->vsock_uds) < 0)
            return seterr(err, 1, -EINVAL, "vsock: socket path too long or malformed");
        ov->have[vs] = ov->typed[vs] = true;
    }
    return 0;
}

/* moat_restore_config.devices: each names a recorded device by type and
 * id= (or the only one of its type); its options must be among the kind's
 * override keys, and no device is overridden twice. */
static int match_devices(const struct moat_restore_config *rc, const struct devtab_rec *v,
                         const struct virtio_kind *const *kind, unsigned n, struct restore_ovr *ov,
                         struct moat_error *err)
{
    if (!rc->devices || rc->ndevices > VIRTIO_MMIO_KVM_MAX_SLOTS)
        return seterr(err, 1, -EINVAL, "device overrides: %s", rc->devices ? "too many" : "list missing");
    struct devopts *o = malloc(sizeof(*o));
    if (!o)
        return seterr(err, 0, -ENOMEM, "out of memory");
    int r = 0;
    for (size_t j = 0; j < rc->ndevices && r == 0; j++) {
        const struct virtio_kind *k = devtab_kind(rc->devices[j].type);
        char why[512] = "";
        if (!k) {
            char tb[DEVTAB_TYPES_LEN];
            r = seterr(err, 1, -EINVAL, "device override %zu: unknown type '%.40s' (%s)", j,
                       rc->devices[j].type ? rc->devices[j].type : "(none)", devtab_types(tb));
            break;
        }
        r = devopt_parse(rc->devices[j].options, o, why, sizeof(why));
        if (r == 0 && devopt_get(o, "id") == NULL)
            r = devopt_only(o, k->override_keys, why, sizeof(why));
        else if (r == 0) {
            /* id= names the device; the rest are its options anew */
            struct devopts *rest = malloc(sizeof(*rest));
            r = rest ? devopt_copy(rest, o) : -ENOMEM;
            if (r == 0) {
                devopt_del(rest, "id");
                r = devopt_only(rest, k->override_keys, why, sizeof(why));
            }
            free(rest);
        }
        if (r < 0) {
            r = seterr(err, 1, r, "device override %zu (%s): %s", j, k->type, why[0] ? why : strerror(-r));
            break;
        }
        const char *id = devopt_get(o, "id");
        unsigned hit = n, count = 0;
        for (unsigned i = 0; i < n; i++)
            if (kind[i] == k && (!id || !strcmp(v[i].id, id))) {
                hit = i;
                count++;
            }
        if (count == 0)
            r = seterr(err, 1, -EINVAL, "device override %zu (%s%s%s): the snapshot has no such device", j,
                       k->type, id ? " " : "", id ? id : "");
        else if (count > 1)
            r = seterr(err, 1, -EINVAL, "device override %zu (%s): the snapshot has %u of them: name one "
                       "with id=", j, k->type, count);
        else if (ov->have[hit])
            r = seterr(err, 1, -EINVAL, "device override %zu: %s %s is overridden twice", j, k->type, v[hit].id);
        else if ((r = devopt_copy(&ov->o[hit], o)) < 0)
            r = seterr(err, 1, r, "device override %zu: too large", j);
        else
            ov->have[hit] = true;
    }
    free(o);
    return r;
}

/* rec with the override's keys given anew (the kind's override keys, but
 * id: a device keeps its id; those not given dropped if the kind says an
 * override is whole) into out. */
static int merge_override(const struct virtio_kind *k, const struct devopts *rec, const struct devopts *ovr,
                          struct devopts *out)
{
    int r = devopt_copy(out, rec);
    for (size_t g = 0; r == 0 && k->override_groups && k->override_groups[g]; g++) {
        bool given = false;
        for (size_t i = 0; k->override_groups[g][i]; i++)
            given |= devopt_get(ovr, k->override_groups[g][i]) != NULL;
        for (size_t h = 0; given && k->override_groups[h]; h++)
            for (size_t i = 0; h != g && k->override_groups[h][i]; i++)
                devopt_del(out, k->override_groups[h][i]);
    }
    for (size_t i = 0; r == 0 && k->override_keys[i]; i++) {
        const char *key = k->override_keys[i];
        if (!strcmp(key, "id"))
            continue;
        const char *val = devopt_get(ovr, key);
        if (!val && k->override_whole)
            devopt_del(out, key);
        else if (val)
            r = devopt_set(out, key, *val ? val : NULL);
    }
    return r;
}

int devtab_rec_check(const struct devtab_rec *recs, unsigned i, struct moat_error *err)
{
    const struct devtab_rec *v = &recs[i];
    const struct virtio_kind *k = kind_by_id(v->device_id);
    if (!k)
        return seterr(err, 1, -EINVAL, "state file: device %s in slot %u has virtio type %u, which this "
                      "moat does not have", v->id, i, (unsigned)v->device_id);
    if (v->state_len != sizeof(struct virtio_mmio_state))
        return seterr(err, 1, -EINVAL, "state file: %s %s: transport state of %u bytes, not %zu", k->name, v->id,
                      (unsigned)v->state_len, sizeof(struct virtio_mmio_state));
    for (unsigned j = 0; j < i; j++)
        if (kind_by_id(recs[j].device_id) == k && strcmp(recs[j].id, v->id) == 0)
            return seterr(err, 1, -EINVAL, "state file: two %s devices named %s", k->name, v->id);
    return 0;
}

int devtab_restore(struct moat_vm *vm, const struct moat_restore_config *rc, const struct devtab_rec *v,
                   unsigned n, struct moat_error *err)
{
    if (n > VIRTIO_MMIO_KVM_MAX_SLOTS)
        return seterr(err, 1, -EINVAL, "state file: device section for slot %u out of order",
                      (unsigned)VIRTIO_MMIO_KVM_MAX_SLOTS);
    struct restore_ovr *ov = calloc(1, sizeof(*ov));
    struct devopts *rec = malloc(sizeof(*rec)), *merged = malloc(sizeof(*merged));
    const struct virtio_kind *kind[VIRTIO_MMIO_KVM_MAX_SLOTS];
    int r = ov && rec && merged ? 0 : seterr(err, 0, -ENOMEM, "out of memory");
    /* The recorded devices: slots 0 .. n-1, each of a known kind, ids
     * unique per kind (the caller checked them as it read them: again,
     * the core trusts no caller with a snapshot's records). */
    for (unsigned i = 0; i < n && r == 0; i++)
        if ((r = devtab_rec_check(v, i, err)) == 0)
            kind[i] = kind_by_id(v[i].device_id);
    /* The configuration's overrides, matched to the recorded devices by
     * kind and id before anything is made. */
    if (r == 0)
        r = match_typed(rc, v, kind, n, ov, err);
    if (r == 0 && rc->size > offsetof(struct moat_restore_config, ndevices) && rc->ndevices)
        r = match_devices(rc, v, kind, n, ov, err);
    /* Make each again in its slot from its record (the options that made
     * it) and its override, and load its transport's state (untrusted:
     * virtio_mmio_load checks it). */
    unsigned seen[NKINDS] = { 0 };
    for (unsigned i = 0; i < n && r == 0; i++) {
        const struct virtio_kind *k = kind[i];
        const char *why = NULL;
        char cwhy[512] = "";
        if (devopt_decode(v[i].data, v[i].data_len, rec, &why) < 0 ||
            devopt_only(rec, k->keys, cwhy, sizeof(cwhy)) < 0) {
            r = seterr(err, 1, -EINVAL, "state file: %s %s: %s", k->name, v[i].id, why ? why : cwhy);
            break;
        }
        const struct devopts *use = rec;
        if ((rc->flags & MOAT_F_FORK_CHILD) && k->fork_identity) {
            /* a fork's child: its own identity first, an override on top */
            cwhy[0] = 0;
            if ((r = k->fork_identity(rec, ov->have[i] ? &ov->o[i] : NULL, cwhy, sizeof(cwhy))) < 0) {
                r = seterr(err, r == -EINVAL, r, "%s %s: a fork's own identity: %s", k->name, v[i].id,
                           cwhy[0] ? cwhy : strerror(-r));
                break;
            }
        }
        if (ov->have[i]) {
            if (merge_override(k, rec, &ov->o[i], merged) < 0) {
                r = seterr(err, 1, -EINVAL, "%s %s: the override's options are too large", k->name, v[i].id);
                break;
            }
            if (k->override_check && (r = k->override_check(rec, merged, cwhy, sizeof(cwhy))) < 0) {
                r = seterr(err, 1, r, "%s %s: %s", k->name, v[i].id, cwhy);
                break;
            }
            use = merged;
        }
        if ((r = k->check(use, cwhy, sizeof(cwhy))) < 0) {
            r = seterr(err, 1, r, "%s %s: %s", k->name, v[i].id, cwhy);
            break;
        }
        if ((r = add_device(vm, k, use, seen[kind_index(k)]++, true, v[i].id, err)) < 0)
            break;
        if (k->restored && k->restored(vm->dev[i].priv))
            vm_hooks_restored(vm, i);   /* the agent's fix-up, at moat_start */
        struct virtio_mmio_state st;
        memcpy(&st, v[i].state, sizeof(st));
        r = virtio_mmio_kvm_load(vm->dev[i].t, &st, &why);
        if (r < 0)
            r = seterr(err, 1, r, "state file: %s %s (slot %u): %s", k->name, v[i].id, i, why ? why : strerror(-r));
    }
    free(merged);
    free(rec);
    free(ov);
    return r;
}

int devtab_match_overrides(const char *const *snap_ids, size_t n, const char *const *ovr_ids, size_t m,
                           size_t *map, char *why, size_t wlen)
{
    if (m != n) {
        snprintf(why, wlen, "the snapshot has %zu, %zu given", n, m);
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++)
        map[i] = SIZE_MAX;
    /* overrides with an id take the device with that id */
    for (size_t k = 0; k < m; k++) {
        if (!ovr_ids[k])
            continue;
        size_t i = 0;
        while (i < n && strcmp(snap_ids[i], ovr_ids[k]) != 0)
            i++;
        if (i == n) {
            snprintf(why, wlen, "'%s': the snapshot has no such device", ovr_ids[k]);
            return -EINVAL;
        }
        if (map[i] != SIZE_MAX) {
            snprintf(why, wlen, "'%s' given twice", ovr_ids[k]);
            return -EINVAL;
        }
        map[i] = k;
    }
    /* the others take the rest, in slot order */
    size_t i = 0;
    for (size_t k = 0; k < m; k++) {
        if (ovr_ids[k])
            continue;
        while (i < n && map[i] != SIZE_MAX)
            i++;
        map[i] = k;     /* m == n: there is one */
    }
    return 0;
}

/* ---- run-time changes ---- */

/* The device of type and id (NULL: the only one of its type), for a
 * run-time set or get: its slot, or -ENODEV with err set. */
static int find_device(const struct moat_vm *vm, const char *type, const char *id, struct moat_error *err)
{
    const struct virtio_kind *k = devtab_kind(type);
    char tb[DEVTAB_TYPES_LEN];
    if (!k)
        return seterr(err, 1, -ENODEV, "unknown device type '%.40s' (%s)", type, devtab_types(tb));
    int hit = -1, count = 0;
    for (unsigned i = 0; i < vm->ndev; i++)
        if (vm->dev[i].kind == k && (!id || !strcmp(vm->dev[i].id, id))) {
            hit = (int)i;
            count++;
        }
    if (count == 0)
        return seterr(err, 1, -ENODEV, "no %s device%s%.40s", k->type, id ? " named " : "", id ? id : "");
    if (count > 1)
        return seterr(err, 1, -ENODEV, "%d %s devices: name one by its id", count, k->type);
    return hit;
}

/* The start of a run-time set, get or option: err cleared, the arguments
 * (args_ok) or -EINVAL with bad_args, then find_device. */
static int device_slot(const struct moat_vm *vm, const char *type, const char *id, bool args_ok,
                       const char *bad_args, struct moat_error *err)
{
    if (err)
        memset(err, 0, sizeof(*err));
    if (!args_ok)
        return seterr(err, 1, -EINVAL, "%s", bad_args);
    return find_device(vm, type, id, err);
}

static bool key_in(const char *const *keys, const char *key)
{
    for (size_t i = 0; keys && keys[i]; i++)
        if (!strcmp(keys[i], key))
            return true;
    return false;
}

int moat_device_set(struct moat_vm *vm, const char *type, const char *id, const char *key, const char *value,
                    struct moat_error *err)
{
    int slot = device_slot(vm, type, id, vm && type && key && value,
                           "device set: type, key and value are required", err);
    if (slot < 0)
        return slot;
    struct vm_dev *d = &vm->dev[slot];
    if (!d->kind->set || !key_in(d->kind->set_keys, key))
        return seterr(err, 1, -EINVAL, "%s %s: '%.40s' cannot be changed while it runs", d->kind->name, d->id, key);
    char why[256] = "";
    int r = d->kind->set(d->priv, key, value, why, sizeof(why));
    if (r < 0)
        return seterr(err, 1, r, "%s %s: %s: %s", d->kind->name, d->id, key, why[0] ? why : strerror(-r));
    /* A changed backend option (one a restore's override may give anew: a
     * drive's path) is what a snapshot taken from now on records; run-time
     * limits stay as the device was made (as an override leaves them). */
    if (key_in(d->kind->override_keys, key) && devopt_set(d->opts, key, value) < 0)
        log_warn("%s %s: '%s' changed, but the snapshot record keeps the old value (too long)", d->kind->name,
                 d->id, key);
    return 0;
}

long moat_device_get(struct moat_vm *vm, const char *type, const char *id, const char *key, char *buf, size_t len,
                     struct moat_error *err)
{
    int slot = device_slot(vm, type, id, vm && type && key && (buf || !len),
                           "device get: type and key are required", err);
    if (slot < 0)
        return slot;
    struct vm_dev *d = &vm->dev[slot];
    if (!d->kind->get || !key_in(d->kind->get_keys, key))
        return seterr(err, 1, -EINVAL, "%s %s: nothing called '%.40s' to tell", d->kind->name, d->id, key);
    return d->kind->get(d->priv, key, buf, len);
}

int moat_device_info(const struct moat_vm *vm, unsigned index, struct moat_device_info *info)
{
    if (!vm || !info)
        return -EINVAL;
    if (index >= vm->ndev)
        return -ENOENT;
    const struct vm_dev *d = &vm->dev[index];
    memset(info, 0, sizeof(*info));
    snprintf(info->type, sizeof(info->type), "%s", d->kind->type);
    snprintf(info->id, sizeof(info->id), "%s", d->id);
    return 0;
}

long moat_device_option(const struct moat_vm *vm, const char *type, const char *id, const char *key, char *buf,
                        size_t len, struct moat_error *err)
{
    int slot = device_slot(vm, type, id, vm && type && key && (buf || !len),
                           "device option: type and key are required", err);
    if (slot < 0)
        return slot;
    const struct devopts *o = vm->dev[slot].opts;
    for (size_t i = 0; i < o->n; i++) {
        if (strcmp(o->o[i].key, key))
            continue;
        const char *v = o->o[i].val ? o->o[i].val : "";
        if (len)
            snprintf(buf, len, "%s", v);
        return (long)strlen(v);
    }
    return -ENOENT;
}

int moat_get_shape(const struct moat_vm *vm, unsigned *vcpus, uint64_t *mem_bytes)
{
    if (!vm || !vcpus || !mem_bytes)
        return -EINVAL;
    *vcpus = vm->ncpus;
    *mem_bytes = vm->ram_size;
    return 0;
}

/* ---- accessors ---- */

unsigned devtab_count(const struct moat_vm *vm, const struct virtio_kind *kind)
{
    unsigned n = 0;
    for (unsigned i = 0; i < vm->ndev; i++)
        n += vm->dev[i].kind == kind;
    return n;
}

void *devtab_nth(const struct moat_vm *vm, const struct virtio_kind *kind, unsigned k)
{
    for (unsigned i = 0; i < vm->ndev; i++)
        if (vm->dev[i].kind == kind && k-- == 0)
            return vm->dev[i].priv;
    return NULL;
}
