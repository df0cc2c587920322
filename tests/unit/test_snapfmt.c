/* The snapshot state-file format: round trip, and every corruption the
 * issue names (any single-bit flip, truncation, wrong version, oversize)
 * rejected cleanly. Pure; no KVM. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "vmm/snapshot/snapfmt.h"

static struct snap_section secs[SNAP_MAX_SECTIONS];

/* A small but realistic file: meta + a few sections of odd lengths. */
static uint8_t *build(size_t *len, struct snap_writer *w)
{
    snapw_init(w);
    struct snap_meta meta = { .mem_size = 64 << 20, .ncpus = 2, .boot_kind = 4, .guest_status = -1 };
    snapw_section(w, SNAP_META, 0, &meta, sizeof(meta));
    uint8_t regs[144];
    for (size_t i = 0; i < sizeof(regs); i++)
        regs[i] = (uint8_t)(i * 7);
    snapw_section(w, SNAP_VCPU_REGS, 0, regs, sizeof(regs));
    snapw_section(w, SNAP_VCPU_REGS, 1, regs, 13);   /* unpadded length */
    snapw_section(w, SNAP_DEV_MOATDEV, 0, "", 0);    /* empty section */
    const uint8_t *out;
    ck_assert_int_eq(snapw_finish(w, &out, len), 0);
    return (uint8_t *)out;
}

START_TEST(round_trip)
{
    struct snap_writer w;
    size_t len, n;
    uint8_t *f = build(&len, &w);
    const char *why;
    ck_assert_int_eq(snap_parse(f, len, secs, SNAP_MAX_SECTIONS, &n, &why), 0);
    ck_assert_uint_eq(n, 4);
    const struct snap_section *s = snap_find(secs, n, SNAP_VCPU_REGS, 1);
    ck_assert_ptr_nonnull(s);
    ck_assert_uint_eq(s->len, 13);
    ck_assert_uint_eq(s->data[12], (uint8_t)(12 * 7));
    struct snap_meta m;
    s = snap_find(secs, n, SNAP_META, 0);
    ck_assert_uint_eq(s->len, sizeof(m));
    memcpy(&m, s->data, sizeof(m));
    ck_assert_uint_eq(m.mem_size, 64 << 20);
    ck_assert_ptr_null(snap_find(secs, n, SNAP_VCPU_REGS, 2));
    ck_assert_uint_eq(snap_find(secs, n, SNAP_DEV_MOATDEV, 0)->len, 0);
    snapw_free(&w);
}
END_TEST

START_TEST(every_bit_flip_rejected)
{
    struct snap_writer w;
    size_t len, n;
    uint8_t *f = build(&len, &w);
    for (size_t bit = 0; bit < len * 8; bit++) {
        f[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        const char *why = NULL;
        int r = snap_parse(f, len, secs, SNAP_MAX_SECTIONS, &n, &why);
        ck_assert_msg(r < 0, "bit %zu flipped and still accepted", bit);
        ck_assert_ptr_nonnull(why);
        f[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    ck_assert_int_eq(snap_parse(f, len, secs, SNAP_MAX_SECTIONS, &n, NULL), 0);
    snapw_free(&w);
}
END_TEST

START_TEST(every_truncation_rejected)
{
    struct snap_writer w;
    size_t len, n;
    uint8_t *f = build(&len, &w);
    for (size_t l = 0; l < len; l++) {
        uint8_t *copy = malloc(l ? l : 1);
        memcpy(copy, f, l);
        ck_assert_int_eq(snap_parse(copy, l, secs, SNAP_MAX_SECTIONS, &n, NULL), -EINVAL);
        free(copy);
    }
    snapw_free(&w);
}
END_TEST

/* Re-seal a modified file with a valid checksum, as a careful attacker would. */
static void reseal(uint8_t *f, size_t len)
{
    memset(f + 24, 0, 8);
    uint64_t sum = XXH3_64bits(f, len);
    memcpy(f + 24, &sum, 8);
}

START_TEST(wrong_version_and_framing)
{
    struct snap_writer w;
    size_t len, n;
    uint8_t *f = build(&len, &w);
    const char *why;
    /* version 1 (before per-device sections): refused, saying so */
    uint32_t v = 1;
    memcpy(f + 8, &v, 4);
    reseal(f, len);
    ck_assert_int_eq(snap_parse(f, len, secs, SNAP_MAX_SECTIONS, &n, &why), -EPROTONOSUPPORT);
    ck_assert_ptr_nonnull(strstr(why, "older moat"));
    ck_assert_ptr_nonnull(strstr(why, "take the snapshot again"));
    v = SNAP_VERSION + 1;
    memcpy(f + 8, &v, 4);
    reseal(f, len);
    ck_assert_int_eq(snap_parse(f, len, secs, SNAP_MAX_SECTIONS, &n, &why), -EPROTONOSUPPORT);
    ck_assert_ptr_nonnull(strstr(why, "unknown format version"));
    v = SNAP_VERSION;
    memcpy(f + 8, &v, 4);
    /* a section length that runs past the end, checksum valid */
    uint64_t huge = 1ull << 40;
    memcpy(f + SNAP_HEADER_SIZE + 8, &huge, 8);
    reseal(f, len);
    ck_assert_int_eq(snap_parse(f, len, secs, SNAP_MAX_SECTIONS, &n, &why), -EINVAL);
    huge = UINT64_MAX;                       /* padding overflow */
    memcpy(f + SNAP_HEADER_SIZE + 8, &huge, 8);
    reseal(f, len);
    ck_assert_int_eq(snap_parse(f, len, secs, SNAP_MAX_SECTIONS, &n, &why), -EINVAL);
    snapw_free(&w);
    f = build(&len, &w);
    /* duplicate section: make section 2 (regs/1) claim index 0 */
    size_t off2 = SNAP_HEADER_SIZE + 16 + ((sizeof(struct snap_meta) + 7) & ~7u) + 16 + 144;
    uint32_t idx = 0;
    memcpy(f + off2 + 4, &idx, 4);
    reseal(f, len);
    ck_assert_int_eq(snap_parse(f, len, secs, SNAP_MAX_SECTIONS, &n, &why), -EINVAL);
    ck_assert_str_eq(why, "duplicate section");
    snapw_free(&w);
    f = build(&len, &w);
    ck_assert_int_eq(snap_parse(f, len, secs, 2, &n, &why), -E2BIG);
    f[40] = 1;                               /* reserved header byte */
    reseal(f, len);
    ck_assert_int_eq(snap_parse(f, len, secs, SNAP_MAX_SECTIONS, &n, &why), -EINVAL);
    snapw_free(&w);
}
END_TEST

START_TEST(size_cap)
{
    uint8_t hdr[SNAP_HEADER_SIZE] = { 0 };
    memcpy(hdr, SNAP_MAGIC, 8);
    uint32_t v = SNAP_VERSION, hs = SNAP_HEADER_SIZE;
    memcpy(hdr + 8, &v, 4);
    memcpy(hdr + 12, &hs, 4);
    uint64_t plen = (uint64_t)SNAP_MAX_PAYLOAD + 1;
    memcpy(hdr + 16, &plen, 8);
    size_t n;
    ck_assert_int_eq(snap_parse(hdr, sizeof(hdr), secs, SNAP_MAX_SECTIONS, &n, NULL), -EFBIG);
    struct snap_writer w;
    snapw_init(&w);
    static uint8_t big[SNAP_MAX_PAYLOAD];
    snapw_section(&w, SNAP_META, 0, big, sizeof(big));   /* + header > cap */
    const uint8_t *out;
    size_t len;
    ck_assert_int_eq(snapw_finish(&w, &out, &len), -EFBIG);
    snapw_free(&w);
}
END_TEST


/* The fixed sections a restore reads: a good one passes, and each field
 * out of its range is refused with a reason naming it. */
START_TEST(meta_fields_checked)
{
    const struct snap_meta good = { .mem_size = 64 << 20, .ncpus = 2, .boot_kind = 4, .flags = 3,
                                    .guest_status = -1 };
    const char *why = NULL;
    ck_assert_int_eq(snap_meta_check(&good, 64, &why), 0);
    struct { const char *what; struct snap_meta m; const char *why; } bad[] = {
        { "0 vCPUs", good, "vCPU count" },
        { "65 vCPUs", good, "vCPU count" },
        { "1 MiB", good, "memory size" },
        { "2 TiB", good, "memory size" },
        { "unaligned", good, "multiple of 4 KiB" },
        { "boot kind 0", good, "boot kind" },
        { "boot kind 5", good, "boot kind" },
        { "boot kind huge", good, "boot kind" },
        { "flag 4", good, "flags" },
        { "status 256", good, "guest status" },
        { "status -2", good, "guest status" },
    };
    bad[0].m.ncpus = 0;
    bad[1].m.ncpus = 65;
    bad[2].m.mem_size = 1 << 20;
    bad[3].m.mem_size = 2ull << 40;
    bad[4].m.mem_size = (64 << 20) + 512;
    bad[5].m.boot_kind = 0;
    bad[6].m.boot_kind = 5;
    bad[7].m.boot_kind = 0xffffffffu;
    bad[8].m.flags = 4;
    bad[9].m.guest_status = 256;
    bad[10].m.guest_status = -2;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why = NULL;
        ck_assert_msg(snap_meta_check(&bad[i].m, 64, &why) == -EINVAL, "%s accepted", bad[i].what);
        ck_assert_msg(why && strstr(why, bad[i].why), "%s: '%s'", bad[i].what, why ? why : "(none)");
    }
}
END_TEST

START_TEST(dev_section)
{
    uint8_t st[40], rec[7] = "record";
    for (size_t i = 0; i < sizeof st; i++)
        st[i] = (uint8_t)i;
    uint8_t buf[sizeof(struct snap_dev) + SNAP_DEV_ID_MAX + sizeof st + sizeof rec + 8];
    long n = snap_dev_encode(buf, sizeof buf, 2, "vda", st, sizeof st, rec, sizeof rec);
    ck_assert_int_eq(n, (long)(sizeof(struct snap_dev) + 3 + sizeof st + sizeof rec));
    struct snap_dev_view v;
    const char *why = NULL;
    ck_assert_int_eq(snap_dev_decode(buf, (uint64_t)n, &v, &why), 0);
    ck_assert_uint_eq(v.device_id, 2);
    ck_assert_str_eq(v.id, "vda");
    ck_assert_uint_eq(v.state_len, sizeof st);
    ck_assert_mem_eq(v.state, st, sizeof st);
    ck_assert_uint_eq(v.data_len, sizeof rec);
    ck_assert_mem_eq(v.data, rec, sizeof rec);
    /* no record is allowed */
    long n0 = snap_dev_encode(buf, sizeof buf, 19, "vsock", st, sizeof st, NULL, 0);
    ck_assert_int_eq(snap_dev_decode(buf, (uint64_t)n0, &v, &why), 0);
    ck_assert_uint_eq(v.data_len, 0);
    /* encode refuses */
    ck_assert_int_eq(snap_dev_encode(buf, sizeof buf, 0, "x", st, sizeof st, NULL, 0), -EINVAL);
    ck_assert_int_eq(snap_dev_encode(buf, sizeof buf, 2, "", st, sizeof st, NULL, 0), -EINVAL);
    ck_assert_int_eq(snap_dev_encode(buf, sizeof buf, 2, NULL, st, sizeof st, NULL, 0), -EINVAL);
    ck_assert_int_eq(snap_dev_encode(buf, sizeof buf, 2, "x", st, 0, NULL, 0), -EINVAL);
    ck_assert_int_eq(snap_dev_encode(buf, sizeof buf, 2, "x", st, sizeof st, NULL, 3), -EINVAL);
    ck_assert_int_eq(snap_dev_encode(buf, sizeof buf, 2, "0123456789abcdef0123456789abcdefX", st, sizeof st,
                                     NULL, 0), -ENAMETOOLONG);
    ck_assert_int_eq(snap_dev_encode(buf, sizeof buf, 2, "x", st, SNAP_DEV_STATE_MAX + 1, NULL, 0), -E2BIG);
    ck_assert_int_eq(snap_dev_encode(buf, sizeof buf, 2, "x", st, sizeof st, rec, SNAP_DEV_DATA_MAX + 1), -E2BIG);
    ck_assert_int_eq(snap_dev_encode(buf, 20, 2, "vda", st, sizeof st, rec, sizeof rec), -ENOSPC);
    /* every truncation and every extension is refused */
    n = snap_dev_encode(buf, sizeof buf, 2, "vda", st, sizeof st, rec, sizeof rec);
    for (long k = 0; k < n; k++) {
        why = NULL;
        ck_assert_int_eq(snap_dev_decode(buf, (uint64_t)k, &v, &why), -EINVAL);
        ck_assert_ptr_nonnull(why);
    }
    ck_assert_int_eq(snap_dev_decode(buf, (uint64_t)n + 1, &v, &why), -EINVAL);
    /* each malformed field */
    struct snap_dev h;
    uint8_t bad[sizeof buf];
#define BAD_FIELD(field, value, msg) do {                                         \
        memcpy(bad, buf, (size_t)n);                                              \
        memcpy(&h, bad, sizeof h);                                                \
        h.field = (value);                                                        \
        memcpy(bad, &h, sizeof h);                                                \
        ck_assert_int_eq(snap_dev_decode(bad, (uint64_t)n, &v, &why), -EINVAL);   \
        ck_assert_str_eq(why, msg);                                               \
    } while (0)
    BAD_FIELD(device_id, 0, "device section without a device type");
    BAD_FIELD(id_len, 0, "device id length out of range");
    BAD_FIELD(id_len, SNAP_DEV_ID_MAX + 1, "device id length out of range");
    BAD_FIELD(id_len, UINT32_MAX, "device id length out of range");
    BAD_FIELD(state_len, 0, "device state or record length out of range");
    BAD_FIELD(state_len, UINT32_MAX, "device state or record length out of range");
    BAD_FIELD(data_len, SNAP_DEV_DATA_MAX + 1, "device state or record length out of range");
    BAD_FIELD(data_len, sizeof rec + 1, "device section length does not match its parts");
    BAD_FIELD(id_len, 2, "device section length does not match its parts");
#undef BAD_FIELD
    memcpy(bad, buf, (size_t)n);
    bad[sizeof(struct snap_dev) + 1] = 0;         /* "v\0a" */
    ck_assert_int_eq(snap_dev_decode(bad, (uint64_t)n, &v, &why), -EINVAL);
    ck_assert_str_eq(why, "NUL inside the device id");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("snapfmt");
    TCase *tc = tcase_create("format");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, round_trip);
    tcase_add_test(tc, every_bit_flip_rejected);
    tcase_add_test(tc, every_truncation_rejected);
    tcase_add_test(tc, wrong_version_and_framing);
    tcase_add_test(tc, size_cap);
    tcase_add_test(tc, dev_section);
    tcase_add_test(tc, meta_fields_checked);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
