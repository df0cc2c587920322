/* virtio-blk request parser: every request type, every malformed case. */
#include <check.h>
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "devices/blk/virtio_blk_req.h"

#define RAM  0x10000u
#define HDR  0x1000u
#define DATA 0x2000u
#define STAT 0x8000u
#define CAP  1000u          /* sectors */

static uint8_t *ram;
static struct gmem gm;
static struct virtq_seg cseg[32];
static struct virtq_chain ch;
static struct virtq_seg dseg[32];
static struct blk_range rng[8];
static struct blk_req rq;
static struct blk_params prm;

static void setup(void)
{
    ram = calloc(1, RAM);
    gm = (struct gmem){ .n = 1 };
    gm.r[0] = (struct gmem_region){ 0, RAM, ram };
    ch = (struct virtq_chain){ .seg = cseg, .max_seg = 32, .head_valid = true };
    rq = (struct blk_req){ .data = dseg, .data_max = 32, .ranges = rng, .ranges_max = 8 };
    prm = (struct blk_params){ .capacity = CAP, .max_discard_seg = 4, .max_discard_sectors = 64,
                               .max_write_zeroes_seg = 4, .max_write_zeroes_sectors = 128 };
}
static void teardown(void) { free(ram); }

static void hdr_at(uint64_t a, uint32_t type, uint64_t sector)
{
    uint32_t t = htole32(type), z = 0;
    uint64_t s = htole64(sector);
    memcpy(ram + a, &t, 4); memcpy(ram + a + 4, &z, 4); memcpy(ram + a + 8, &s, 8);
}
static void range_at(uint64_t a, uint64_t sector, uint32_t num, uint32_t flags)
{
    uint64_t s = htole64(sector); uint32_t n = htole32(num), f = htole32(flags);
    memcpy(ram + a, &s, 8); memcpy(ram + a + 8, &n, 4); memcpy(ram + a + 12, &f, 4);
}

/* Append a segment, keeping the chain's counters as virtq_pop() would. */
static void seg(uint64_t gpa, uint32_t len, bool w)
{
    cseg[ch.nseg++] = (struct virtq_seg){ gpa, len, w };
    if (w) ch.write_len += len; else { ch.nread++; ch.read_len += len; }
}

/* The usual Linux layout: header, data segments, status. */
static void linux_req(uint32_t type, uint64_t sector, uint32_t data_len, bool data_w)
{
    hdr_at(HDR, type, sector);
    seg(HDR, 16, false);
    if (data_len)
        seg(DATA, data_len, data_w);
    seg(STAT, 1, true);
}

static void expect_ok(enum blk_req_type t)
{
    ck_assert_int_eq(blk_req_parse(&gm, &ch, &prm, &rq), 0);
    ck_assert_int_eq(rq.err, BLK_E_OK);
    ck_assert_int_eq(rq.type, t);
    ck_assert(rq.has_status);
}

static void expect_err(enum blk_req_err e, uint8_t status)
{
    ck_assert_int_eq(blk_req_parse(&gm, &ch, &prm, &rq), -EINVAL);
    ck_assert_int_eq(rq.err, e);
    ck_assert(rq.has_status);
    ck_assert_uint_eq(rq.status_gpa, STAT);
    ck_assert_uint_eq(rq.status, status);
    ck_assert_str_ne(blk_req_strerror(e), "ok");
}

/* ---- happy paths ---- */

START_TEST(in_ok)
{
    linux_req(VIRTIO_BLK_T_IN, 8, 1024, true);
    expect_ok(BLK_REQ_IN);
    ck_assert_uint_eq(rq.sector, 8);
    ck_assert_uint_eq(rq.offset, 8 * 512);
    ck_assert_uint_eq(rq.data_len, 1024);
    ck_assert_uint_eq(rq.ndata, 1);
    ck_assert_uint_eq(dseg[0].gpa, DATA);
    ck_assert(dseg[0].writable);
    ck_assert_uint_eq(rq.status_gpa, STAT);
}
END_TEST

START_TEST(in_last_sectors_ok)
{
    linux_req(VIRTIO_BLK_T_IN, CAP - 2, 1024, true);
    expect_ok(BLK_REQ_IN);
}
END_TEST

START_TEST(out_ok_multi_seg)
{
    hdr_at(HDR, VIRTIO_BLK_T_OUT, 0);
    seg(HDR, 16, false);
    seg(DATA, 512, false);
    seg(DATA + 0x1000, 1536, false);
    seg(STAT, 1, true);
    expect_ok(BLK_REQ_OUT);
    ck_assert_uint_eq(rq.ndata, 2);
    ck_assert_uint_eq(rq.data_len, 2048);
    ck_assert_uint_eq(dseg[1].gpa, DATA + 0x1000);
    ck_assert_uint_eq(dseg[1].len, 1536);
    ck_assert(!dseg[0].writable);
}
END_TEST

START_TEST(flush_ok)
{
    linux_req(VIRTIO_BLK_T_FLUSH, 0, 0, false);
    expect_ok(BLK_REQ_FLUSH);
    ck_assert_uint_eq(rq.ndata, 0);
}
END_TEST

START_TEST(flush_on_read_only_ok)
{
    prm.read_only = true;
    linux_req(VIRTIO_BLK_T_FLUSH, 0, 0, false);
    expect_ok(BLK_REQ_FLUSH);
}
END_TEST

START_TEST(get_id_ok)
{
    linux_req(VIRTIO_BLK_T_GET_ID, 0, 20, true);
    expect_ok(BLK_REQ_GET_ID);
    ck_assert_uint_eq(rq.data_len, 20);
    ck_assert_uint_eq(dseg[0].len, 20);
}
END_TEST

START_TEST(get_id_larger_buffer_ok)
{
    linux_req(VIRTIO_BLK_T_GET_ID, 0, 64, true);
    expect_ok(BLK_REQ_GET_ID);
    ck_assert_uint_eq(rq.data_len, 20);
}
END_TEST

START_TEST(discard_ok)
{
    range_at(DATA, 0, 64, 0);
    range_at(DATA + 16, CAP - 10, 10, 0);
    linux_req(VIRTIO_BLK_T_DISCARD, 0, 32, false);
    expect_ok(BLK_REQ_DISCARD);
    ck_assert_uint_eq(rq.nranges, 2);
    ck_assert_uint_eq(rng[1].sector, CAP - 10);
    ck_assert_uint_eq(rng[1].num_sectors, 10);
    ck_assert_uint_eq(rng[1].offset, (CAP - 10) * 512ull);
    ck_assert_uint_eq(rng[1].len, 10 * 512);
}
END_TEST

START_TEST(write_zeroes_unmap_ok)
{
    range_at(DATA, 5, 128, VIRTIO_BLK_WZ_F_UNMAP);
    linux_req(VIRTIO_BLK_T_WRITE_ZEROES, 0, 16, false);
    expect_ok(BLK_REQ_WRITE_ZEROES);
    ck_assert_uint_eq(rq.nranges, 1);
    ck_assert_uint_eq(rng[0].flags, VIRTIO_BLK_WZ_F_UNMAP);
}
END_TEST

START_TEST(header_split_across_segments)
{
    hdr_at(HDR, VIRTIO_BLK_T_IN, 77);
    seg(HDR, 5, false);
    seg(HDR + 5, 11, false);
    seg(DATA, 512, true);
    seg(STAT, 1, true);
    expect_ok(BLK_REQ_IN);
    ck_assert_uint_eq(rq.sector, 77);
}
END_TEST

START_TEST(header_and_data_share_segment)
{
    hdr_at(DATA - 16, VIRTIO_BLK_T_OUT, 3);
    seg(DATA - 16, 16 + 1024, false);
    seg(STAT, 1, true);
    expect_ok(BLK_REQ_OUT);
    ck_assert_uint_eq(rq.ndata, 1);
    ck_assert_uint_eq(dseg[0].gpa, DATA);
    ck_assert_uint_eq(dseg[0].len, 1024);
}
END_TEST

START_TEST(data_and_status_share_segment)
{
    hdr_at(HDR, VIRTIO_BLK_T_IN, 0);
    seg(HDR, 16, false);
    seg(DATA, 100, true);
    seg(DATA + 0x100, 0, true);
    seg(STAT - 412, 413, true);   /* last 412 data bytes + status */
    expect_ok(BLK_REQ_IN);
    ck_assert_uint_eq(rq.data_len, 512);
    ck_assert_uint_eq(rq.ndata, 2);
    ck_assert_uint_eq(dseg[1].len, 412);
    ck_assert_uint_eq(rq.status_gpa, STAT);
}
END_TEST

/* ---- errors ---- */

START_TEST(err_no_status)
{
    hdr_at(HDR, VIRTIO_BLK_T_IN, 0);
    seg(HDR, 16, false);
    seg(DATA, 512, false);
    ck_assert_int_eq(blk_req_parse(&gm, &ch, &prm, &rq), -EINVAL);
    ck_assert_int_eq(rq.err, BLK_E_NO_STATUS);
    ck_assert(!rq.has_status);
}
END_TEST

START_TEST(err_only_zero_len_writable)
{
    hdr_at(HDR, VIRTIO_BLK_T_FLUSH, 0);
    seg(HDR, 16, false);
    seg(STAT, 0, true);
    ck_assert_int_eq(blk_req_parse(&gm, &ch, &prm, &rq), -EINVAL);
    ck_assert_int_eq(rq.err, BLK_E_NO_STATUS);
    ck_assert(!rq.has_status);
}
END_TEST

START_TEST(err_short_header)
{
    hdr_at(HDR, VIRTIO_BLK_T_IN, 0);
    seg(HDR, 15, false);
    seg(STAT, 1, true);
    expect_err(BLK_E_SHORT_HEADER, VIRTIO_BLK_S_IOERR);
}
END_TEST

START_TEST(err_header_writable)
{
    hdr_at(HDR, VIRTIO_BLK_T_IN, 0);
    seg(HDR, 16, true);
    seg(STAT, 1, true);
    expect_err(BLK_E_SHORT_HEADER, VIRTIO_BLK_S_IOERR);
}
END_TEST

START_TEST(err_header_fault)
{
    seg(RAM - 8, 16, false);      /* a chain not from virtq_pop */
    seg(STAT, 1, true);
    expect_err(BLK_E_FAULT, VIRTIO_BLK_S_IOERR);
}
END_TEST

START_TEST(err_unknown_type)
{
    linux_req(0x1234, 0, 0, false);
    expect_err(BLK_E_UNSUPP_TYPE, VIRTIO_BLK_S_UNSUPP);
    ck_assert_uint_eq(rq.raw_type, 0x1234);
    ck_assert_int_eq(rq.type, BLK_REQ_UNSUPP);
}
END_TEST

START_TEST(err_get_lifetime_unsupported)
{
    linux_req(VIRTIO_BLK_T_GET_LIFETIME, 0, 12, true);
    expect_err(BLK_E_UNSUPP_TYPE, VIRTIO_BLK_S_UNSUPP);
}
END_TEST

START_TEST(err_out_read_only)
{
    prm.read_only = true;
    linux_req(VIRTIO_BLK_T_OUT, 0, 512, false);
    expect_err(BLK_E_READ_ONLY, VIRTIO_BLK_S_IOERR);
    ck_assert_uint_eq(rq.ndata, 0);
    ck_assert_uint_eq(rq.data_len, 0);
}
END_TEST

START_TEST(err_in_len_not_sector_multiple)
{
    linux_req(VIRTIO_BLK_T_IN, 0, 513, true);
    expect_err(BLK_E_DATA_LEN, VIRTIO_BLK_S_IOERR);
}
END_TEST

START_TEST(err_out_len_not_sector_multiple)
{
    linux_req(VIRTIO_BLK_T_OUT, 0, 100, false);
    expect_err(BLK_E_DATA_LEN, VIRTIO_BLK_S_IOERR);
}
END_TEST

START_TEST(err_in_beyond_capacity)
{
    linux_req(VIRTIO_BLK_T_IN, CAP - 1, 1024, true);
    expect_err(BLK_E_RANGE, VIRTIO_BLK_S_IOERR);
}
END_TEST

START_TEST(err_out_sector_past_end)
{
    linux_req(VIRTIO_BLK_T_OUT, CAP + 1, 0, false);
    expect_err(BLK_E_RANGE, VIRTIO_BLK_S_IOERR);
}
END_TEST

START_TEST(err_sector_overflow)
{
    prm.capacity = UINT64_MAX;
    linux_req(VIRTIO_BLK_T_IN, UINT64_MAX - 1, 1024, true);
    expect_err(BLK_E_RANGE, VIRTIO_BLK_S_IOERR);
}
END_TEST

/* A sector inside a (huge) capacity whose byte offset does not fit: the
 * parser refuses it, so the device never multiplies unchecked. Before, the
 * parser accepted it and sector * 512 wrapped. */
START_TEST(err_sector_bytes_overflow)
{
    prm.capacity = UINT64_MAX;
    linux_req(VIRTIO_BLK_T_IN, 1ull << 56, 512, true);       /* * 512 = 2^65 */
    expect_err(BLK_E_RANGE, VIRTIO_BLK_S_IOERR);
}
END_TEST

START_TEST(err_out_offset_past_int64)
{
    prm.capacity = UINT64_MAX;
    linux_req(VIRTIO_BLK_T_OUT, INT64_MAX / 512, 512, false);  /* end just past INT64_MAX */
    expect_err(BLK_E_RANGE, VIRTIO_BLK_S_IOERR);
}
END_TEST

START_TEST(largest_offset_ok)
{
    prm.capacity = UINT64_MAX;
    linux_req(VIRTIO_BLK_T_IN, INT64_MAX / 512 - 1, 512, true);   /* ends at the last whole sector */
    expect_ok(BLK_REQ_IN);
    ck_assert_uint_eq(rq.offset, (uint64_t)(INT64_MAX / 512 - 1) * 512);
}
END_TEST

START_TEST(err_discard_bytes_overflow)
{
    prm.capacity = UINT64_MAX;
    range_at(DATA, 1ull << 56, 4, 0);
    linux_req(VIRTIO_BLK_T_DISCARD, 0, 16, false);
    expect_err(BLK_E_RANGE, VIRTIO_BLK_S_IOERR);
}
END_TEST

START_TEST(err_in_with_readable_data)
{
    linux_req(VIRTIO_BLK_T_IN, 0, 512, false);
    expect_err(BLK_E_LAYOUT, VIRTIO_BLK_S_IOERR);
}
END_TEST

START_TEST(err_out_with_writable_data)
{
    linux_req(VIRTIO_BLK_T_OUT, 0, 512, true);
    expect_err(BLK_E_LAYOUT, VIRTIO_BLK_S_IOERR);
}
END_TEST

START_TEST(err_flush_with_data)
{
    linux_req(VIRTIO_BLK_T_FLUSH, 0, 512, false);
    expect_err(BLK_E_LAYOUT, VIRTIO_BLK_S_IOERR);
}
END_TEST

START_TEST(err_get_id_short)
{
    linux_req(VIRTIO_BLK_T_GET_ID, 0, 19, true);
    expect_err(BLK_E_ID_SHORT, VIRTIO_BLK_S_IOERR);
}
END_TEST

START_TEST(err_get_id_readable_buffer)
{
    linux_req(VIRTIO_BLK_T_GET_ID, 0, 20, false);
    expect_err(BLK_E_LAYOUT, VIRTIO_BLK_S_IOERR);
}
END_TEST

START_TEST(err_too_many_data_segs)
{
    rq.data_max = 2;
    hdr_at(HDR, VIRTIO_BLK_T_IN, 0);
    seg(HDR, 16, false);
    for (int i = 0; i < 3; i++)
        seg(DATA + 512 * i, 512, true);
    seg(STAT, 1, true);
    expect_err(BLK_E_TOO_MANY_SEGS, VIRTIO_BLK_S_IOERR);
}
END_TEST

START_TEST(err_discard_empty)
{
    linux_req(VIRTIO_BLK_T_DISCARD, 0, 0, false);
    expect_err(BLK_E_RANGES_LEN, VIRTIO_BLK_S_IOERR);
}
END_TEST

START_TEST(err_discard_partial_range)
{
    linux_req(VIRTIO_BLK_T_DISCARD, 0, 24, false);
    expect_err(BLK_E_RANGES_LEN, VIRTIO_BLK_S_IOERR);
}
END_TEST

START_TEST(err_discard_too_many_ranges)
{
    for (int i = 0; i < 5; i++)
        range_at(DATA + 16 * i, 0, 1, 0);
    linux_req(VIRTIO_BLK_T_DISCARD, 0, 5 * 16, false);   /* max_discard_seg 4 */
    expect_err(BLK_E_TOO_MANY_RANGES, VIRTIO_BLK_S_IOERR);
}
END_TEST

START_TEST(err_wz_ranges_over_caller_array)
{
    prm.max_write_zeroes_seg = 100;
    rq.ranges_max = 2;
    for (int i = 0; i < 3; i++)
        range_at(DATA + 16 * i, 0, 1, 0);
    linux_req(VIRTIO_BLK_T_WRITE_ZEROES, 0, 3 * 16, false);
    expect_err(BLK_E_TOO_MANY_RANGES, VIRTIO_BLK_S_IOERR);
}
END_TEST

START_TEST(err_discard_unmap_flag)
{
    range_at(DATA, 0, 1, VIRTIO_BLK_WZ_F_UNMAP);
    linux_req(VIRTIO_BLK_T_DISCARD, 0, 16, false);
    expect_err(BLK_E_RANGE_FLAGS, VIRTIO_BLK_S_UNSUPP);
}
END_TEST

START_TEST(err_wz_unknown_flag)
{
    range_at(DATA, 0, 1, 0x80000000u);
    linux_req(VIRTIO_BLK_T_WRITE_ZEROES, 0, 16, false);
    expect_err(BLK_E_RANGE_FLAGS, VIRTIO_BLK_S_UNSUPP);
}
END_TEST

START_TEST(err_discard_range_beyond_capacity)
{
    range_at(DATA, 0, 1, 0);
    range_at(DATA + 16, CAP - 3, 4, 0);
    linux_req(VIRTIO_BLK_T_DISCARD, 0, 32, false);
    expect_err(BLK_E_RANGE, VIRTIO_BLK_S_IOERR);
}
END_TEST

START_TEST(err_discard_range_overflow)
{
    prm.capacity = UINT64_MAX;
    range_at(DATA, UINT64_MAX - 1, 4, 0);
    linux_req(VIRTIO_BLK_T_DISCARD, 0, 16, false);
    expect_err(BLK_E_RANGE, VIRTIO_BLK_S_IOERR);
}
END_TEST

START_TEST(err_discard_too_many_sectors)
{
    range_at(DATA, 0, 65, 0);     /* max_discard_sectors 64 */
    linux_req(VIRTIO_BLK_T_DISCARD, 0, 16, false);
    expect_err(BLK_E_RANGE_SECTORS, VIRTIO_BLK_S_IOERR);
}
END_TEST

START_TEST(err_discard_zero_sectors)
{
    range_at(DATA, 0, 0, 0);
    linux_req(VIRTIO_BLK_T_DISCARD, 0, 16, false);
    expect_err(BLK_E_RANGE_SECTORS, VIRTIO_BLK_S_IOERR);
}
END_TEST

START_TEST(err_discard_not_offered)
{
    prm.max_discard_seg = 0;
    range_at(DATA, 0, 1, 0);
    linux_req(VIRTIO_BLK_T_DISCARD, 0, 16, false);
    expect_err(BLK_E_UNSUPP_TYPE, VIRTIO_BLK_S_UNSUPP);
}
END_TEST

START_TEST(err_discard_read_only)
{
    prm.read_only = true;
    range_at(DATA, 0, 1, 0);
    linux_req(VIRTIO_BLK_T_DISCARD, 0, 16, false);
    expect_err(BLK_E_READ_ONLY, VIRTIO_BLK_S_IOERR);
    ck_assert_uint_eq(rq.nranges, 0);
}
END_TEST

START_TEST(err_discard_writable_payload)
{
    range_at(DATA, 0, 1, 0);
    linux_req(VIRTIO_BLK_T_DISCARD, 0, 16, true);
    expect_err(BLK_E_LAYOUT, VIRTIO_BLK_S_IOERR);
}
END_TEST

START_TEST(strerror_covers_all)
{
    for (int e = 0; e < BLK_E__COUNT; e++)
        ck_assert_ptr_nonnull(blk_req_strerror((enum blk_req_err)e));
    ck_assert_str_eq(blk_req_strerror((enum blk_req_err)99), "unknown blk request error");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("blk_req");
    TCase *tc = tcase_create("parse");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, in_ok);
    tcase_add_test(tc, in_last_sectors_ok);
    tcase_add_test(tc, out_ok_multi_seg);
    tcase_add_test(tc, flush_ok);
    tcase_add_test(tc, flush_on_read_only_ok);
    tcase_add_test(tc, get_id_ok);
    tcase_add_test(tc, get_id_larger_buffer_ok);
    tcase_add_test(tc, discard_ok);
    tcase_add_test(tc, write_zeroes_unmap_ok);
    tcase_add_test(tc, header_split_across_segments);
    tcase_add_test(tc, header_and_data_share_segment);
    tcase_add_test(tc, data_and_status_share_segment);
    tcase_add_test(tc, err_no_status);
    tcase_add_test(tc, err_only_zero_len_writable);
    tcase_add_test(tc, err_short_header);
    tcase_add_test(tc, err_header_writable);
    tcase_add_test(tc, err_header_fault);
    tcase_add_test(tc, err_unknown_type);
    tcase_add_test(tc, err_get_lifetime_unsupported);
    tcase_add_test(tc, err_out_read_only);
    tcase_add_test(tc, err_in_len_not_sector_multiple);
    tcase_add_test(tc, err_out_len_not_sector_multiple);
    tcase_add_test(tc, err_in_beyond_capacity);
    tcase_add_test(tc, err_sector_bytes_overflow);
    tcase_add_test(tc, err_out_offset_past_int64);
    tcase_add_test(tc, largest_offset_ok);
    tcase_add_test(tc, err_discard_bytes_overflow);
    tcase_add_test(tc, err_out_sector_past_end);
    tcase_add_test(tc, err_sector_overflow);
    tcase_add_test(tc, err_in_with_readable_data);
    tcase_add_test(tc, err_out_with_writable_data);
    tcase_add_test(tc, err_flush_with_data);
    tcase_add_test(tc, err_get_id_short);
    tcase_add_test(tc, err_get_id_readable_buffer);
    tcase_add_test(tc, err_too_many_data_segs);
    tcase_add_test(tc, err_discard_empty);
    tcase_add_test(tc, err_discard_partial_range);
    tcase_add_test(tc, err_discard_too_many_ranges);
    tcase_add_test(tc, err_wz_ranges_over_caller_array);
    tcase_add_test(tc, err_discard_unmap_flag);
    tcase_add_test(tc, err_wz_unknown_flag);
    tcase_add_test(tc, err_discard_range_beyond_capacity);
    tcase_add_test(tc, err_discard_range_overflow);
    tcase_add_test(tc, err_discard_too_many_sectors);
    tcase_add_test(tc, err_discard_zero_sectors);
    tcase_add_test(tc, err_discard_not_offered);
    tcase_add_test(tc, err_discard_read_only);
    tcase_add_test(tc, err_discard_writable_payload);
    tcase_add_test(tc, strerror_covers_all);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
