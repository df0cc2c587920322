/* passt's stream framing (devices/net/passt_frame.c): frames cut at every
 * point, several in one read, the buffer's compaction, every bad length. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "devices/net/passt_frame.h"

static struct passt_rx *rx;

static void setup(void)
{
    rx = malloc(sizeof *rx);
    ck_assert_ptr_nonnull(rx);
    passt_rx_init(rx);
}

static void teardown(void)
{
    free(rx);
}

/* Append frame i (length len, bytes derived from i) to the stream s. */
static size_t put_frame(uint8_t *s, size_t at, uint32_t len, unsigned i)
{
    passt_len_encode(len, s + at);
    for (uint32_t k = 0; k < len; k++)
        s[at + PASST_LEN_SIZE + k] = (uint8_t)(i * 31u + k);
    return at + PASST_LEN_SIZE + len;
}

static void check_frame(const uint8_t *f, size_t len, uint32_t want_len, unsigned i)
{
    ck_assert_uint_eq(len, want_len);
    for (uint32_t k = 0; k < want_len; k++)
        if (f[k] != (uint8_t)(i * 31u + k))
            ck_abort_msg("frame %u byte %u: %u, want %u", i, k, f[k], (uint8_t)(i * 31u + k));
}

static void feed_all(const uint8_t *s, size_t n)
{
    ck_assert_uint_eq(passt_rx_feed(rx, s, n), n);
}

START_TEST(length_is_big_endian)
{
    uint8_t b[4];
    passt_len_encode(0x01020304u, b);
    ck_assert(b[0] == 1 && b[1] == 2 && b[2] == 3 && b[3] == 4);
    ck_assert_uint_eq(passt_len_decode(b), 0x01020304u);
    passt_len_encode(NET_FRAME_MAX, b);
    ck_assert(b[0] == 0 && b[1] == 1 && b[2] == 0 && b[3] == 18);
    const uint8_t ff[4] = { 0xff, 0xff, 0xff, 0xfe };
    ck_assert_uint_eq(passt_len_decode(ff), 0xfffffffeu);
}
END_TEST

START_TEST(empty_needs_more)
{
    const uint8_t *f = NULL;
    size_t len = 99;
    ck_assert_int_eq(passt_rx_next(rx, &f, &len), 0);
    ck_assert_uint_eq(len, 99);
    ck_assert_uint_eq(passt_rx_pending(rx), 0);
    uint8_t *w;
    ck_assert_uint_eq(passt_rx_space(rx, &w), PASST_RX_CAP);
    ck_assert_ptr_eq(w, rx->buf);
}
END_TEST

/* One frame cut in two at every point, the length prefix included. */
START_TEST(one_frame_every_split)
{
    uint8_t s[4 + 100];
    size_t n = put_frame(s, 0, 100, 7);
    for (size_t cut = 0; cut <= n; cut++) {
        passt_rx_init(rx);
        const uint8_t *f;
        size_t len;
        feed_all(s, cut);
        if (cut < n) {
            ck_assert_int_eq(passt_rx_next(rx, &f, &len), 0);
            ck_assert_uint_eq(passt_rx_pending(rx), cut);
            feed_all(s + cut, n - cut);
        }
        ck_assert_int_eq(passt_rx_next(rx, &f, &len), 1);
        check_frame(f, len, 100, 7);
        ck_assert_int_eq(passt_rx_next(rx, &f, &len), 0);
        ck_assert_uint_eq(passt_rx_pending(rx), 0);
    }
}
END_TEST

START_TEST(two_frames_in_one_read)
{
    uint8_t s[4 + 60 + 4 + 1];
    size_t n = put_frame(s, 0, 60, 1);
    n = put_frame(s, n, 1, 2);
    feed_all(s, n);
    const uint8_t *f;
    size_t len;
    ck_assert_int_eq(passt_rx_next(rx, &f, &len), 1);
    check_frame(f, len, 60, 1);
    ck_assert_int_eq(passt_rx_next(rx, &f, &len), 1);
    check_frame(f, len, 1, 2);
    ck_assert_int_eq(passt_rx_next(rx, &f, &len), 0);
}
END_TEST

/* Three frames cut in two pieces at every point: each comes out whole,
 * once, in order, and only when all its bytes are in. */
START_TEST(three_frames_every_split)
{
    static const uint32_t lens[3] = { 14, 3, 42 };
    uint8_t s[3 * 4 + 14 + 3 + 42];
    size_t n = 0, ends[3];
    for (unsigned i = 0; i < 3; i++)
        ends[i] = n = put_frame(s, n, lens[i], i);
    for (size_t cut = 0; cut <= n; cut++) {
        passt_rx_init(rx);
        unsigned got = 0;
        const uint8_t *f;
        size_t len;
        feed_all(s, cut);
        while (passt_rx_next(rx, &f, &len) == 1) {
            ck_assert_uint_le(ends[got], cut);
            check_frame(f, len, lens[got], got);
            got++;
        }
        ck_assert(got == 3 || ends[got] > cut);
        feed_all(s + cut, n - cut);
        while (passt_rx_next(rx, &f, &len) == 1) {
            check_frame(f, len, lens[got], got);
            got++;
        }
        ck_assert_uint_eq(got, 3);
        ck_assert_uint_eq(passt_rx_pending(rx), 0);
    }
}
END_TEST

START_TEST(byte_at_a_time)
{
    uint8_t s[8 * 4 + 8 * 9];
    size_t n = 0;
    for (unsigned i = 0; i < 8; i++)
        n = put_frame(s, n, i + 1, i);
    unsigned got = 0;
    for (size_t k = 0; k < n; k++) {
        ck_assert_uint_eq(passt_rx_feed(rx, s + k, 1), 1);
        const uint8_t *f;
        size_t len;
        while (passt_rx_next(rx, &f, &len) == 1) {
            check_frame(f, len, got + 1, got);
            got++;
        }
    }
    ck_assert_uint_eq(got, 8);
}
END_TEST

/* Largest frames and small ones through read-sized pieces of odd sizes:
 * the buffer compacts and never loses or reorders a byte. */
START_TEST(large_frames_odd_reads_compact)
{
    static const uint32_t lens[] = { NET_FRAME_MAX, 60, NET_FRAME_MAX, 1, 1514, NET_FRAME_MAX,
                                     NET_FRAME_MAX - 1, 14, 40000, NET_FRAME_MAX };
    const unsigned nf = sizeof lens / sizeof lens[0];
    size_t total = 0;
    for (unsigned i = 0; i < nf; i++)
        total += PASST_LEN_SIZE + lens[i];
    uint8_t *s = malloc(total);
    ck_assert_ptr_nonnull(s);
    size_t n = 0;
    for (unsigned i = 0; i < nf; i++)
        n = put_frame(s, n, lens[i], i);
    static const size_t reads[] = { 7, 65536, 1000, 131072, 3, 40000 };
    size_t pos = 0;
    unsigned got = 0, r = 0, compactions = 0;
    while (pos < n) {
        uint8_t *w;
        size_t before = rx->start;
        size_t room = passt_rx_space(rx, &w);
        ck_assert_uint_gt(room, 0);
        if (before > 0 && rx->start == 0 && passt_rx_pending(rx) > 0)
            compactions++;
        size_t k = reads[r++ % 6];
        if (k > room)
            k = room;
        if (k > n - pos)
            k = n - pos;
        memcpy(w, s + pos, k);
        passt_rx_commit(rx, k);
        pos += k;
        const uint8_t *f;
        size_t len;
        while (passt_rx_next(rx, &f, &len) == 1) {
            check_frame(f, len, lens[got], got);
            got++;
        }
        ck_assert_uint_lt(passt_rx_pending(rx), PASST_WIRE_MAX);
    }
    ck_assert_uint_eq(got, nf);
    ck_assert_uint_gt(compactions, 0);
    free(s);
}
END_TEST

/* feed() takes only what fits; the rest goes in once frames are taken. */
START_TEST(feed_stops_when_full)
{
    size_t total = 3 * (PASST_LEN_SIZE + NET_FRAME_MAX);
    uint8_t *s = malloc(total);
    ck_assert_ptr_nonnull(s);
    size_t n = 0;
    for (unsigned i = 0; i < 3; i++)
        n = put_frame(s, n, NET_FRAME_MAX, i);
    size_t took = passt_rx_feed(rx, s, n);
    ck_assert_uint_eq(took, PASST_RX_CAP);
    uint8_t *w;
    ck_assert_uint_eq(passt_rx_space(rx, &w), 0);   /* full: two whole frames wait */
    const uint8_t *f;
    size_t len;
    unsigned got = 0;
    while (passt_rx_next(rx, &f, &len) == 1)
        check_frame(f, len, NET_FRAME_MAX, got++);
    ck_assert_uint_eq(got, 2);
    ck_assert_uint_eq(passt_rx_feed(rx, s + took, n - took), n - took);
    ck_assert_int_eq(passt_rx_next(rx, &f, &len), 1);
    check_frame(f, len, NET_FRAME_MAX, 2);
    ck_assert_uint_eq(passt_rx_pending(rx), 0);
    free(s);
}
END_TEST

/* 0, one past the largest and the largest u32 lengths: -EPROTO, sticky,
 * and the frame before the bad length still comes out. */
START_TEST(bad_lengths)
{
    static const uint32_t bad[] = { 0, NET_FRAME_MAX + 1, 0x00100000u, 0xffffffffu };
    for (unsigned b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        passt_rx_init(rx);
        uint8_t s[4 + 20 + 4 + 4 + 20];
        size_t n = put_frame(s, 0, 20, 1);
        passt_len_encode(bad[b], s + n);
        n += 4;
        n = put_frame(s, n, 20, 2);
        /* the bad prefix arrives in two pieces: not an error until whole */
        feed_all(s, 4 + 20 + 2);
        const uint8_t *f;
        size_t len;
        ck_assert_int_eq(passt_rx_next(rx, &f, &len), 1);
        check_frame(f, len, 20, 1);
        ck_assert_int_eq(passt_rx_next(rx, &f, &len), 0);
        feed_all(s + 26, n - 26);
        ck_assert_int_eq(passt_rx_next(rx, &f, &len), -EPROTO);
        ck_assert_uint_eq(rx->bad_len, bad[b]);
        ck_assert_int_eq(passt_rx_next(rx, &f, &len), -EPROTO);
        uint8_t *w;
        ck_assert_uint_eq(passt_rx_space(rx, &w), 0);
        ck_assert_uint_eq(passt_rx_feed(rx, s, 8), 0);
        ck_assert_int_eq(passt_rx_next(rx, &f, &len), -EPROTO);
    }
}
END_TEST

START_TEST(largest_length_is_accepted)
{
    uint8_t *s = malloc(PASST_WIRE_MAX);
    ck_assert_ptr_nonnull(s);
    size_t n = put_frame(s, 0, NET_FRAME_MAX, 5);
    feed_all(s, n - 1);
    const uint8_t *f;
    size_t len;
    ck_assert_int_eq(passt_rx_next(rx, &f, &len), 0);
    ck_assert_uint_eq(passt_rx_pending(rx), n - 1);
    feed_all(s + n - 1, 1);
    ck_assert_int_eq(passt_rx_next(rx, &f, &len), 1);
    check_frame(f, len, NET_FRAME_MAX, 5);
    free(s);
}
END_TEST

/* A commit larger than the room is clamped: never a write past the end. */
START_TEST(commit_is_clamped)
{
    uint8_t *w;
    size_t room = passt_rx_space(rx, &w);
    passt_rx_commit(rx, room + 100);
    ck_assert_uint_eq(passt_rx_pending(rx), PASST_RX_CAP);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("passt_frame");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, length_is_big_endian);
    tcase_add_test(tc, empty_needs_more);
    tcase_add_test(tc, one_frame_every_split);
    tcase_add_test(tc, two_frames_in_one_read);
    tcase_add_test(tc, three_frames_every_split);
    tcase_add_test(tc, byte_at_a_time);
    tcase_add_test(tc, large_frames_odd_reads_compact);
    tcase_add_test(tc, feed_stops_when_full);
    tcase_add_test(tc, bad_lengths);
    tcase_add_test(tc, largest_length_is_accepted);
    tcase_add_test(tc, commit_is_clamped);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
