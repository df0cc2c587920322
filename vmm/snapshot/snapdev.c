/* The virtio devices' sections of a state file (vmm/snapshot/snapdev.h). */
#include "vmm/snapshot/snapdev.h"

#include <errno.h>
#include <stdlib.h>

#include "devices/virtio/virtio_mmio.h"
#include "vmm/core/devtab.h"
#include "vmm/core/vm.h"
#include "vmm/transport/virtio_mmio_kvm.h"

int snapdev_save(struct moat_vm *vm, struct snap_writer *w)
{
    size_t cap = sizeof(struct snap_dev) + SNAP_DEV_ID_MAX + sizeof(struct virtio_mmio_state) + SNAP_DEV_DATA_MAX;
    uint8_t *rec = malloc(SNAP_DEV_DATA_MAX), *sec = malloc(cap);
    int r = rec && sec ? 0 : -ENOMEM;
    for (unsigned i = 0; r == 0 && i < vm->ndev; i++) {
        struct virtio_mmio_state st;
        struct devtab_rec d;
        if ((r = devtab_save(vm, i, &st, rec, SNAP_DEV_DATA_MAX, &d)) < 0)
            break;
        long sn = snap_dev_encode(sec, cap, d.device_id, d.id, d.state, d.state_len, d.data, d.data_len);
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

int snapdev_restore(struct moat_vm *vm, const struct moat_restore_config *rc, const struct snap_section *secs,
                    size_t nsecs, struct moat_error *err)
{
    struct snap_dev_view *v = calloc(VIRTIO_MMIO_KVM_MAX_SLOTS, sizeof(*v));
    struct devtab_rec *recs = calloc(VIRTIO_MMIO_KVM_MAX_SLOTS, sizeof(*recs));
    unsigned n = 0;
    int r = v && recs ? 0 : seterr(err, 0, -ENOMEM, "out of memory");
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
        recs[n] = (struct devtab_rec){ .device_id = v[n].device_id, .id = v[n].id, .state = v[n].state,
                                       .state_len = v[n].state_len, .data = v[n].data, .data_len = v[n].data_len };
        r = devtab_rec_check(recs, n, err);
        n++;
    }
    if (r == 0)
        r = devtab_restore(vm, rc, recs, n, err);
    free(recs);
    free(v);
    return r;
}
