/* The device table's snapshot records (vmm/core/devtab.h) and where they
 * meet the state file (vmm/snapshot/snapdev.c): every malformed record
 * refused with its message, in the file's order, before any device is
 * made; restore overrides matched to the recorded devices by id. Needs no
 * KVM: each case fails before a VM is touched. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "devices/virtio/virtio_dev.h"
#include "devices/virtio/virtio_mmio.h"
#include "include/moat.h"
#include "vmm/core/devtab.h"
#include "vmm/snapshot/snapdev.h"
#include "vmm/snapshot/snapfmt.h"
#include "vmm/transport/virtio_mmio_kvm.h"

static struct virtio_mmio_state st;

static struct devtab_rec rec(uint32_t device_id, const char *id, size_t state_len)
{
    return (struct devtab_rec){ .device_id = device_id, .id = id, .state = &st, .state_len = state_len };
}

START_TEST(rec_check)
{
    struct moat_error err;
    struct devtab_rec r[3] = {
        rec(VIRTIO_ID_BLOCK, "vda", sizeof(st)),
        rec(VIRTIO_ID_VSOCK, "vda", sizeof(st)),    /* another kind may share an id */
        rec(VIRTIO_ID_BLOCK, "vdb", sizeof(st)),
    };
    for (unsigned i = 0; i < 3; i++)
        ck_assert_int_eq(devtab_rec_check(r, i, &err), 0);
    /* a virtio type this moat has no kind for */
    r[2].device_id = 99;
    memset(&err, 0, sizeof(err));
    ck_assert_int_eq(devtab_rec_check(r, 2, &err), -EINVAL);
    ck_assert(err.is_config);
    ck_assert_str_eq(err.msg, "state file: device vdb in slot 2 has virtio type 99, which this moat does not have");
    /* a transport state of another size */
    r[2] = rec(VIRTIO_ID_BLOCK, "vdb", sizeof(st) - 1);
    ck_assert_int_eq(devtab_rec_check(r, 2, &err), -EINVAL);
    char want[160];
    snprintf(want, sizeof(want), "state file: drive vdb: transport state of %zu bytes, not %zu", sizeof(st) - 1,
             sizeof(st));
    ck_assert_str_eq(err.msg, want);
    /* two devices of one kind with one id */
    r[2] = rec(VIRTIO_ID_BLOCK, "vda", sizeof(st));
    ck_assert_int_eq(devtab_rec_check(r, 2, &err), -EINVAL);
    ck_assert_str_eq(err.msg, "state file: two drive devices named vda");
    /* the core checks again what a caller hands it, before any VM work */
    ck_assert_int_eq(devtab_restore(NULL, NULL, r, 3, &err), -EINVAL);
    ck_assert_str_eq(err.msg, "state file: two drive devices named vda");
    ck_assert_int_eq(devtab_restore(NULL, NULL, r, VIRTIO_MMIO_KVM_MAX_SLOTS + 1, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "out of order"));
}
END_TEST

/* SNAP_DEV sections: one buffer per slot. */
static uint8_t bufs[4][sizeof(struct snap_dev) + SNAP_DEV_ID_MAX + sizeof(struct virtio_mmio_state)];

static struct snap_section dev_sec(unsigned k, uint32_t index, uint32_t device_id, const char *id)
{
    long n = snap_dev_encode(bufs[k], sizeof(bufs[k]), device_id, id, &st, sizeof(st), NULL, 0);
    ck_assert_int_gt(n, 0);
    return (struct snap_section){ .type = SNAP_DEV, .index = index, .len = (uint64_t)n, .data = bufs[k] };
}

START_TEST(sections_checked_in_order)
{
    struct moat_error err;
    struct moat_restore_config rc;
    moat_restore_config_init(&rc);
    uint8_t meta[8] = { 0 };
    /* other sections between them are skipped; a slot out of order */
    struct snap_section s[4] = {
        dev_sec(0, 0, VIRTIO_ID_BLOCK, "vda"),
        { .type = SNAP_META, .len = sizeof(meta), .data = meta },
        dev_sec(1, 2, VIRTIO_ID_BLOCK, "vdb"),
    };
    memset(&err, 0, sizeof(err));
    ck_assert_int_eq(snapdev_restore(NULL, &rc, s, 3, &err), -EINVAL);
    ck_assert(err.is_config);
    ck_assert_str_eq(err.msg, "state file: device section for slot 2 out of order");
    /* the first fault in the file's order is the one named: slot 0's
     * unknown type before slot 1's gap */
    s[0] = dev_sec(0, 0, 77, "vda");
    ck_assert_int_eq(snapdev_restore(NULL, &rc, s, 3, &err), -EINVAL);
    ck_assert_str_eq(err.msg, "state file: device vda in slot 0 has virtio type 77, which this moat does not have");
    /* a section whose framing is broken */
    s[0] = dev_sec(0, 0, VIRTIO_ID_BLOCK, "vda");
    s[2] = dev_sec(1, 1, VIRTIO_ID_BLOCK, "vdb");
    s[2].len = 3;
    ck_assert_int_eq(snapdev_restore(NULL, &rc, s, 3, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "state file: device in slot 1: "));
    /* a duplicate id, found as the second is read */
    s[2] = dev_sec(1, 1, VIRTIO_ID_BLOCK, "vda");
    s[3] = dev_sec(2, 5, VIRTIO_ID_BLOCK, "vdc");
    ck_assert_int_eq(snapdev_restore(NULL, &rc, s, 4, &err), -EINVAL);
    ck_assert_str_eq(err.msg, "state file: two drive devices named vda");
}
END_TEST

START_TEST(overrides_matched_by_id)
{
    const char *snap[] = { "vda", "data", "scratch" };
    size_t map[3];
    char why[160];
    /* no ids: slot order */
    const char *none[] = { NULL, NULL, NULL };
    ck_assert_int_eq(devtab_match_overrides(snap, 3, none, 3, map, why, sizeof why), 0);
    ck_assert_uint_eq(map[0], 0);
    ck_assert_uint_eq(map[1], 1);
    ck_assert_uint_eq(map[2], 2);
    /* all by id, in another order */
    const char *all[] = { "scratch", "vda", "data" };
    ck_assert_int_eq(devtab_match_overrides(snap, 3, all, 3, map, why, sizeof why), 0);
    ck_assert_uint_eq(map[0], 1);
    ck_assert_uint_eq(map[1], 2);
    ck_assert_uint_eq(map[2], 0);
    /* mixed: the one with an id takes its drive, the others the rest in order */
    const char *mixed[] = { NULL, "vda", NULL };
    ck_assert_int_eq(devtab_match_overrides(snap, 3, mixed, 3, map, why, sizeof why), 0);
    ck_assert_uint_eq(map[0], 1);
    ck_assert_uint_eq(map[1], 0);
    ck_assert_uint_eq(map[2], 2);
    /* refused, naming the device */
    const char *unknown[] = { "vda", "nope", NULL };
    ck_assert_int_eq(devtab_match_overrides(snap, 3, unknown, 3, map, why, sizeof why), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "'nope'"));
    const char *twice[] = { "data", NULL, "data" };
    ck_assert_int_eq(devtab_match_overrides(snap, 3, twice, 3, map, why, sizeof why), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "'data' given twice"));
    ck_assert_int_eq(devtab_match_overrides(snap, 3, none, 2, map, why, sizeof why), -EINVAL);
    ck_assert_str_eq(why, "the snapshot has 3, 2 given");
    ck_assert_int_eq(devtab_match_overrides(snap, 0, none, 0, map, why, sizeof why), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("devtab");
    TCase *tc = tcase_create("records");
    tcase_add_test(tc, rec_check);
    tcase_add_test(tc, sections_checked_in_order);
    tcase_add_test(tc, overrides_matched_by_id);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
