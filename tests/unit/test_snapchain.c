/* Diff snapshots, the pure part (vmm/snapshot/snapchain.c): the parent section's
 * round trip and every malformed case, the page bitmap's checks and run
 * iteration, and a diff state file through snapfmt. No KVM. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/snapshot/snapchain.h"
#include "vmm/snapshot/snapdiff.h"
#include "vmm/snapshot/snapfmt.h"
#include "vmm/snapshot/snapvm.h"
#include "vmm/core/vmhooks.h"

static char st[SNAP_PARENT_PATH_MAX + 1], mem[SNAP_PARENT_PATH_MAX + 1];

START_TEST(parent_round_trip)
{
    uint8_t buf[256];
    long n = snap_parent_encode(buf, sizeof(buf), 0x1122334455667788ull, 3, "/s/0/state", "/s/0/memory");
    ck_assert_int_eq(n, (long)(sizeof(struct snap_parent) + 10 + 11));
    uint64_t sum = 0;
    uint32_t depth = 0;
    const char *why = NULL;
    ck_assert_int_eq(snap_parent_decode(buf, (uint64_t)n, &sum, &depth, st, sizeof(st), mem, sizeof(mem), &why), 0);
    ck_assert_uint_eq(sum, 0x1122334455667788ull);
    ck_assert_uint_eq(depth, 3);
    ck_assert_str_eq(st, "/s/0/state");
    ck_assert_str_eq(mem, "/s/0/memory");
}
END_TEST

START_TEST(parent_encode_rejects)
{
    uint8_t buf[64];
    ck_assert_int_eq(snap_parent_encode(buf, sizeof(buf), 1, 0, "a", "b"), -EINVAL);
    ck_assert_int_eq(snap_parent_encode(buf, sizeof(buf), 1, SNAP_DIFF_MAX_DEPTH + 1, "a", "b"), -EINVAL);
    ck_assert_int_eq(snap_parent_encode(buf, sizeof(buf), 1, 1, "", "b"), -EINVAL);
    ck_assert_int_eq(snap_parent_encode(buf, sizeof(buf), 1, 1, "a", NULL), -EINVAL);
    ck_assert_int_eq(snap_parent_encode(buf, 8, 1, 1, "a", "b"), -ENOSPC);
    char *longp = malloc(SNAP_PARENT_PATH_MAX + 2);
    memset(longp, 'x', SNAP_PARENT_PATH_MAX + 1);
    longp[SNAP_PARENT_PATH_MAX + 1] = 0;
    ck_assert_int_eq(snap_parent_encode(buf, sizeof(buf), 1, 1, longp, "b"), -ENAMETOOLONG);
    free(longp);
}
END_TEST

START_TEST(parent_decode_malformed)
{
    uint8_t good[128], b[128];
    long n = snap_parent_encode(good, sizeof(good), 7, 2, "state", "mem");
    ck_assert_int_gt(n, 0);
    uint64_t sum;
    uint32_t depth;
    const char *why;
    /* every truncation */
    for (long l = 0; l < n; l++) {
        why = NULL;
        ck_assert_int_eq(snap_parent_decode(good, (uint64_t)l, &sum, &depth, st, sizeof(st), mem, sizeof(mem), &why), -EINVAL);
        ck_assert_ptr_nonnull(why);
    }
    /* trailing garbage */
    memcpy(b, good, (size_t)n);
    b[n] = 'x';
    ck_assert_int_eq(snap_parent_decode(b, (uint64_t)n + 1, &sum, &depth, st, sizeof(st), mem, sizeof(mem), &why), -EINVAL);
    struct snap_parent p;
    /* depth 0, depth too big, padding, zero / huge path lengths */
    uint32_t bad_depth[] = { 0, SNAP_DIFF_MAX_DEPTH + 1 };
    for (int i = 0; i < 2; i++) {
        memcpy(b, good, (size_t)n);
        memcpy(&p, b, sizeof(p));
        p.depth = bad_depth[i];
        memcpy(b, &p, sizeof(p));
        ck_assert_int_eq(snap_parent_decode(b, (uint64_t)n, &sum, &depth, st, sizeof(st), mem, sizeof(mem), &why), -EINVAL);
    }
    memcpy(b, good, (size_t)n);
    memcpy(&p, b, sizeof(p));
    p.pad = 1;
    memcpy(b, &p, sizeof(p));
    ck_assert_int_eq(snap_parent_decode(b, (uint64_t)n, &sum, &depth, st, sizeof(st), mem, sizeof(mem), &why), -EINVAL);
    uint32_t bad_len[] = { 0, SNAP_PARENT_PATH_MAX + 1, 0xffffffffu };
    for (int i = 0; i < 3; i++) {
        memcpy(b, good, (size_t)n);
        memcpy(&p, b, sizeof(p));
        p.state_len = bad_len[i];
        memcpy(b, &p, sizeof(p));
        ck_assert_int_eq(snap_parent_decode(b, (uint64_t)n, &sum, &depth, st, sizeof(st), mem, sizeof(mem), &why), -EINVAL);
        memcpy(b, good, (size_t)n);
        memcpy(&p, b, sizeof(p));
        p.mem_len = bad_len[i];
        memcpy(b, &p, sizeof(p));
        ck_assert_int_eq(snap_parent_decode(b, (uint64_t)n, &sum, &depth, st, sizeof(st), mem, sizeof(mem), &why), -EINVAL);
    }
    /* lengths that shift the split between the two paths */
    memcpy(b, good, (size_t)n);
    memcpy(&p, b, sizeof(p));
    p.state_len += 1;
    memcpy(b, &p, sizeof(p));
    ck_assert_int_eq(snap_parent_decode(b, (uint64_t)n, &sum, &depth, st, sizeof(st), mem, sizeof(mem), &why), -EINVAL);
    /* NUL inside */
    memcpy(b, good, (size_t)n);
    b[sizeof(struct snap_parent) + 2] = 0;
    ck_assert_int_eq(snap_parent_decode(b, (uint64_t)n, &sum, &depth, st, sizeof(st), mem, sizeof(mem), &why), -EINVAL);
    /* caller's buffer too small */
    char tiny[4];
    ck_assert_int_eq(snap_parent_decode(good, (uint64_t)n, &sum, &depth, tiny, sizeof(tiny), mem, sizeof(mem), &why), -EINVAL);
}
END_TEST

static void setbit(uint8_t *bm, uint64_t i) { bm[i / 8] |= (uint8_t)(1u << (i % 8)); }

/* A parent path from a (possibly forged) state file must lie beneath the
 * restore's root: absolute, root + '/' + a rest with no empty, "." or ".."
 * component. */
START_TEST(parent_beneath_root)
{
    const char *why = NULL, *rel;
    rel = snap_parent_beneath("/var/lib/moat/a/snap", "/var/lib/moat/a/snap/1/state", &why);
    ck_assert_ptr_nonnull(rel);
    ck_assert_str_eq(rel, "1/state");
    rel = snap_parent_beneath("/", "/tmp/x/memory", &why);
    ck_assert_ptr_nonnull(rel);
    ck_assert_str_eq(rel, "tmp/x/memory");
    static const struct { const char *root, *path; } no[] = {
        { "/var/lib/moat/a/snap", "/var/lib/moat/OTHER/snap/memory" },     /* another sandbox */
        { "/var/lib/moat/a/snap", "/var/lib/moat/a/snapshot/memory" },     /* a sibling sharing the prefix */
        { "/var/lib/moat/a/snap", "/var/lib/moat/a/snap" },                /* the root itself */
        { "/var/lib/moat/a/snap", "/var/lib/moat/a/snap/" },
        { "/var/lib/moat/a/snap", "/var/lib/moat/a/snap/../../OTHER/snap/memory" },
        { "/var/lib/moat/a/snap", "/var/lib/moat/a/snap/1/../../x" },
        { "/var/lib/moat/a/snap", "/var/lib/moat/a/snap/./memory" },
        { "/var/lib/moat/a/snap", "/var/lib/moat/a/snap//memory" },
        { "/var/lib/moat/a/snap", "/var/lib/moat/a/snap/1/" },
        { "/var/lib/moat/a/snap", "/var/lib/moat/a/snap/.." },
        { "/var/lib/moat/a/snap", "1/state" },                             /* relative */
        { "/var/lib/moat/a/snap", "../OTHER/memory" },
        { "/var/lib/moat/a/snap", "" },
        { "/var/lib/moat/a/snap/", "/var/lib/moat/a/snap/memory" },        /* root not normalized */
        { "var/lib", "var/lib/memory" },
        { "", "/memory" },
        { "/", "/" },
        { "/", "//etc/shadow" },
        { "/", "/../etc/shadow" },
    };
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
        why = NULL;
        ck_assert_msg(snap_parent_beneath(no[i].root, no[i].path, &why) == NULL, "%s under %s accepted",
                      no[i].path, no[i].root);
        ck_assert_ptr_nonnull(why);
    }
    ck_assert_ptr_null(snap_parent_beneath(NULL, "/x", &why));
    ck_assert_ptr_null(snap_parent_beneath("/", NULL, &why));
}
END_TEST

START_TEST(bitmap_check)
{
    const char *why = NULL;
    uint64_t mem_size = 100 * 4096ull;   /* 100 pages: 2 words, 36 bits past the end */
    ck_assert_uint_eq(snap_bitmap_words(mem_size), 2);
    uint8_t bm[16] = { 0 };
    ck_assert_int_eq(snap_bitmap_check(bm, 16, mem_size, &why), 0);
    setbit(bm, 99);
    ck_assert_int_eq(snap_bitmap_check(bm, 16, mem_size, &why), 0);
    setbit(bm, 100);
    ck_assert_int_eq(snap_bitmap_check(bm, 16, mem_size, &why), -EINVAL);
    ck_assert_ptr_nonnull(why);
    memset(bm, 0, sizeof(bm));
    ck_assert_int_eq(snap_bitmap_check(bm, 8, mem_size, &why), -EINVAL);
    ck_assert_int_eq(snap_bitmap_check(bm, 24, mem_size, &why), -EINVAL);
    ck_assert_int_eq(snap_bitmap_check(bm, 16, mem_size + 1, &why), -EINVAL);
    ck_assert_int_eq(snap_bitmap_check(bm, 16, 0, &why), -EINVAL);
    ck_assert_int_eq(snap_bitmap_check(bm, 16, SNAP_DIFF_MAX_MEM + 4096, &why), -EINVAL);
    /* 128 pages: exactly 2 words, every bit valid */
    memset(bm, 0xff, sizeof(bm));
    ck_assert_int_eq(snap_bitmap_check(bm, 16, 128 * 4096ull, &why), 0);
}
END_TEST

/* Runs against a reference computed bit by bit, on pseudo-random bitmaps
 * of several densities and sizes (including runs crossing words and
 * running into the end). */
START_TEST(bitmap_runs)
{
    uint64_t seed = 12345;
    for (int iter = 0; iter < 200; iter++) {
        uint64_t npages = 1 + (uint64_t)(iter * 37 % 700);
        size_t bytes = (size_t)snap_bitmap_words(npages * 4096) * 8;
        uint8_t *bm = calloc(1, bytes);
        unsigned density = (unsigned)(iter % 5);   /* 0: empty .. 4: full */
        for (uint64_t i = 0; i < npages; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            if (density == 4 || (density && (seed >> 33) % 4 < density))
                setbit(bm, i);
        }
        /* walk runs, rebuild the bitmap, compare */
        uint8_t *re = calloc(1, bytes);
        uint64_t run, at = 0, set = 0, runs = 0, prev_end = 0;
        int first = 1;
        while ((at = snap_bitmap_next_run(bm, npages, at, &run)) < npages) {
            ck_assert_uint_gt(run, 0);
            ck_assert_uint_le(at + run, npages);
            if (!first)
                ck_assert_uint_gt(at, prev_end);   /* runs are maximal: a gap between */
            first = 0;
            for (uint64_t i = at; i < at + run; i++)
                setbit(re, i);
            set += run;
            runs++;
            prev_end = at + run;
            at += run;
        }
        ck_assert_uint_eq(run, 0);
        ck_assert_mem_eq(bm, re, bytes);
        uint64_t runs2;
        ck_assert_uint_eq(snap_bitmap_count(bm, npages, &runs2), set);
        ck_assert_uint_eq(runs2, runs);
        uint64_t ref = 0;
        for (uint64_t i = 0; i < npages; i++)
            ref += (bm[i / 8] >> (i % 8)) & 1;
        ck_assert_uint_eq(set, ref);
        free(bm);
        free(re);
    }
}
END_TEST

/* A diff state file: meta, parent, bitmap survive the writer and parser,
 * and the header checksum names the file. */
START_TEST(diff_state_round_trip)
{
    struct snap_writer w;
    snapw_init(&w);
    struct snap_meta meta = { .mem_size = 64 << 20, .ncpus = 1, .flags = SNAP_META_DIRTY_LOG, .guest_status = -1 };
    snapw_section(&w, SNAP_META, 0, &meta, sizeof(meta));
    uint8_t pb[128];
    long n = snap_parent_encode(pb, sizeof(pb), 0xabcdefull, 1, "/a/state", "/a/memory");
    snapw_section(&w, SNAP_DIFF_PARENT, 0, pb, (uint64_t)n);
    size_t words = (size_t)snap_bitmap_words(meta.mem_size);
    uint8_t *bm = calloc(words, 8);
    setbit(bm, 0);
    setbit(bm, 64);
    setbit(bm, 65);
    snapw_section(&w, SNAP_DIFF_PAGES, 0, bm, words * 8);
    const uint8_t *out;
    size_t len, ns;
    ck_assert_int_eq(snapw_finish(&w, &out, &len), 0);
    struct snap_section secs[8];
    const char *why;
    ck_assert_int_eq(snap_parse(out, len, secs, 8, &ns, &why), 0);
    const struct snap_section *ps = snap_find(secs, ns, SNAP_DIFF_PAGES, 0);
    ck_assert_ptr_nonnull(ps);
    ck_assert_int_eq(snap_bitmap_check(ps->data, ps->len, meta.mem_size, &why), 0);
    uint64_t runs;
    ck_assert_uint_eq(snap_bitmap_count(ps->data, meta.mem_size / 4096, &runs), 3);
    ck_assert_uint_eq(runs, 2);
    const struct snap_section *pp = snap_find(secs, ns, SNAP_DIFF_PARENT, 0);
    uint64_t sum;
    uint32_t depth;
    ck_assert_int_eq(snap_parent_decode(pp->data, pp->len, &sum, &depth, st, sizeof(st), mem, sizeof(mem), &why), 0);
    ck_assert_uint_eq(sum, 0xabcdefull);
    ck_assert_str_eq(mem, "/a/memory");
    /* the checksum read back is the one the writer stored */
    uint64_t stored;
    memcpy(&stored, out + 24, 8);
    ck_assert_uint_eq(snap_file_checksum(out, len), stored);
    ck_assert_uint_ne(stored, 0);
    free(bm);
    snapw_free(&w);
}
END_TEST

/* snapvm.c's mem_refused hook turns tracking off with snapdiff_free() when KVM refuses dirty
 * logging on restore: afterwards the VM must behave as one without
 * tracking (full snapshots work, diffs are refused), not keep asking KVM
 * for a log its slots do not have or touch the freed bitmap. */
START_TEST(tracking_off_after_free)
{
    struct moat_vm *vm = calloc(1, sizeof(*vm));
    ck_assert_ptr_nonnull(vm);
    vm->vm_fd = -1;
    struct snapvm *sv = NULL;
    ck_assert_int_eq(snapvm_attach(vm, false, &sv), 0);     /* as moat_create gives every VM */
    vm->ram_size = 8 << 20;
    vm->ram = calloc(1, vm->ram_size);
    ck_assert_ptr_nonnull(vm->ram);
    vm->mem.r[0] = (struct gmem_region){ 0, vm->ram_size, vm->ram };
    vm->mem.n = 1;
    vm->flags = MOAT_F_DIRTY_LOG;
    ck_assert_int_eq(snapdiff_setup(vm), KVM_MEM_LOG_DIRTY_PAGES);
    ck_assert(sv->dirty_log);
    ck_assert_ptr_nonnull(vm->mem.dirty);
    /* moat's own writes are tracked while it is on */
    uint32_t v = 1;
    ck_assert_int_eq(gmem_write(&vm->mem, 3 * 4096, &v, sizeof(v)), 0);
    ck_assert_uint_eq(sv->dirty[0], 1ull << 3);

    snapdiff_free(vm);          /* the fallback (snapvm.c, hook_mem_refused) */
    ck_assert(!sv->dirty_log);
    uint64_t *bm = (uint64_t *)1;
    ck_assert_int_eq(snapdiff_collect(vm, &bm), -ENOTSUP);
    ck_assert_ptr_null(bm);
    struct snap_writer w;
    snapw_init(&w);
    bm = (uint64_t *)1;
    ck_assert_int_eq(snapdiff_sections(vm, &w, false, &bm), 0);   /* a full snapshot */
    ck_assert_ptr_null(bm);
    ck_assert_int_eq(snapdiff_sections(vm, &w, true, &bm), -ENOTSUP);
    ck_assert_int_eq(snapdiff_precheck(vm, "/nonexistent/s", "/nonexistent/m"), -ENOTSUP);
    snapw_free(&w);
    /* and writes no longer touch a bitmap */
    ck_assert_int_eq(gmem_write(&vm->mem, 5 * 4096, &v, sizeof(v)), 0);
    free(vm->ram);
    vm_hooks_destroy(vm);
    free(vm);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("snapchain");
    TCase *tc = tcase_create("diff");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, parent_round_trip);
    tcase_add_test(tc, parent_encode_rejects);
    tcase_add_test(tc, parent_decode_malformed);
    tcase_add_test(tc, parent_beneath_root);
    tcase_add_test(tc, bitmap_check);
    tcase_add_test(tc, bitmap_runs);
    tcase_add_test(tc, diff_state_round_trip);
    tcase_add_test(tc, tracking_off_after_free);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
