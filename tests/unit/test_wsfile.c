/* The working-set file (vmm/snapshot/wsfile.c): round trip, every
 * malformed case of ws_parse, the encoder's refusals, run building; and
 * the record / prefetch helper (vmm/snapshot/wset.c) on a VM without KVM:
 * guest RAM a MAP_PRIVATE file mapping as after a restore. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include "vmm/base/clock.h"
#include "vmm/core/vm.h"
#include "vmm/core/vmhooks.h"
#include "vmm/snapshot/snapvm.h"
#include "vmm/snapshot/wset.h"
#include "vmm/snapshot/wsfile.h"

#define MEM (64ull << 20)
#define SUM 0x1122334455667788ull

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Recompute the checksum after a change, so the check behind it is reached. */
static void reseal(uint8_t *b, size_t len)
{
    memset(b + 40, 0, 8);
    uint64_t h = XXH3_64bits(b, len);
    for (int i = 0; i < 8; i++)
        b[40 + i] = (uint8_t)(h >> (8 * i));
}

static const struct ws_range good[3] = { { 0, 1 }, { 10, 5 }, { 4096, 256 } };

static size_t make(uint8_t *b, size_t cap)
{
    long n = ws_encode(b, cap, SUM, MEM, good, 3);
    ck_assert_int_eq(n, (long)ws_file_size(3));
    return (size_t)n;
}

static int parse(const uint8_t *b, size_t len, const char **why)
{
    const uint8_t *r;
    size_t n;
    *why = NULL;
    return ws_parse(b, len, SUM, MEM, &r, &n, why);
}

START_TEST(round_trip)
{
    uint8_t b[256];
    size_t len = make(b, sizeof b);
    const uint8_t *r = NULL;
    size_t n = 0;
    const char *why = NULL;
    ck_assert_int_eq(ws_parse(b, len, SUM, MEM, &r, &n, &why), 0);
    ck_assert_uint_eq(n, 3);
    for (size_t i = 0; i < 3; i++) {
        struct ws_range x = ws_range_at(r, i);
        ck_assert_uint_eq(x.first, good[i].first);
        ck_assert_uint_eq(x.count, good[i].count);
    }
    /* No ranges at all is a valid (empty) working set. */
    ck_assert_int_eq(ws_encode(b, sizeof b, SUM, MEM, NULL, 0), (long)WS_HEADER_SIZE);
    ck_assert_int_eq(ws_parse(b, WS_HEADER_SIZE, SUM, MEM, &r, &n, &why), 0);
    ck_assert_uint_eq(n, 0);
}
END_TEST

START_TEST(encode_rejects)
{
    uint8_t b[256];
    struct ws_range bad[2];
    ck_assert_int_eq(ws_encode(b, 10, SUM, MEM, good, 3), -ENOSPC);
    ck_assert_int_eq(ws_encode(b, sizeof b, SUM, 0, good, 3), -EINVAL);
    ck_assert_int_eq(ws_encode(b, sizeof b, SUM, MEM + 1, good, 3), -EINVAL);
    ck_assert_int_eq(ws_encode(b, sizeof b, SUM, MEM, NULL, 1), -EINVAL);
    ck_assert_int_eq(ws_encode(NULL, sizeof b, SUM, MEM, good, 3), -EINVAL);
    bad[0] = (struct ws_range){ 5, 0 };
    ck_assert_int_eq(ws_encode(b, sizeof b, SUM, MEM, bad, 1), -EINVAL);
    bad[0] = (struct ws_range){ (uint32_t)(MEM / 4096) - 1, 2 };
    ck_assert_int_eq(ws_encode(b, sizeof b, SUM, MEM, bad, 1), -EINVAL);
    bad[0] = (struct ws_range){ 10, 5 };
    bad[1] = (struct ws_range){ 15, 1 };    /* touching */
    ck_assert_int_eq(ws_encode(b, sizeof b, SUM, MEM, bad, 2), -EINVAL);
    bad[1] = (struct ws_range){ 12, 1 };    /* overlapping */
    ck_assert_int_eq(ws_encode(b, sizeof b, SUM, MEM, bad, 2), -EINVAL);
    bad[1] = (struct ws_range){ 1, 1 };     /* out of order */
    ck_assert_int_eq(ws_encode(b, sizeof b, SUM, MEM, bad, 2), -EINVAL);
    ck_assert_int_eq(ws_encode(b, sizeof b, SUM, MEM, good, WS_MAX_RANGES + 1), -EINVAL);
}
END_TEST

START_TEST(parse_malformed)
{
    uint8_t g[256], b[256];
    size_t len = make(g, sizeof g);
    const char *why;
    /* every truncation, and one byte more */
    for (size_t l = 0; l < len; l++) {
        ck_assert_int_eq(parse(g, l, &why), -EINVAL);
        ck_assert_ptr_nonnull(why);
    }
    memcpy(b, g, len);
    b[len] = 0;
    ck_assert_int_eq(parse(b, len + 1, &why), -EINVAL);
    ck_assert_int_eq(ws_parse(NULL, 100, SUM, MEM, NULL, NULL, NULL), -EINVAL);
    /* magic */
    memcpy(b, g, len);
    b[0] ^= 1;
    reseal(b, len);
    ck_assert_int_eq(parse(b, len, &why), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "magic"));
    /* header size */
    memcpy(b, g, len);
    put32(b + 12, 64);
    reseal(b, len);
    ck_assert_int_eq(parse(b, len, &why), -EINVAL);
    /* a count that does not match the length, or too large */
    memcpy(b, g, len);
    put32(b + 32, 4);
    reseal(b, len);
    ck_assert_int_eq(parse(b, len, &why), -EINVAL);
    put32(b + 32, 0xffffffffu);
    reseal(b, len);
    ck_assert_int_eq(parse(b, len, &why), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "too many"));
    /* any flipped bit without a new checksum */
    for (size_t i = 0; i < len; i++) {
        if (i >= 40 && i < 48)
            continue;
        memcpy(b, g, len);
        b[i] ^= 0x10;
        int r = parse(b, len, &why);
        ck_assert_msg(r == -EINVAL, "byte %zu: %d", i, r);
    }
    memcpy(b, g, len);
    b[41] ^= 1;
    ck_assert_int_eq(parse(b, len, &why), -EINVAL);
    ck_assert_str_eq(why, "checksum mismatch");
    /* version */
    memcpy(b, g, len);
    put32(b + 8, 2);
    reseal(b, len);
    ck_assert_int_eq(parse(b, len, &why), -EPROTONOSUPPORT);
    /* flags */
    memcpy(b, g, len);
    put32(b + 36, 1);
    reseal(b, len);
    ck_assert_int_eq(parse(b, len, &why), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "flags"));
    /* another snapshot's: stale, not malformed */
    const uint8_t *r;
    size_t n;
    ck_assert_int_eq(ws_parse(g, len, SUM + 1, MEM, &r, &n, &why), -ESTALE);
    ck_assert_int_eq(ws_parse(g, len, SUM, MEM * 2, &r, &n, &why), -ESTALE);
    /* memory that is not whole pages, recorded and expected alike */
    memcpy(b, g, len);
    b[24] = 1;
    reseal(b, len);
    ck_assert_int_eq(ws_parse(b, len, SUM, MEM + 1, &r, &n, &why), -EINVAL);
    /* bad ranges, each resealed */
    static const struct { uint32_t first, count; const char *what; } br[] = {
        { 20, 0, "empty" }, { 16383, 2, "past the end" }, { 0xffffffffu, 2, "past the end" },
        { 14, 1, "overlapping" }, { 15, 1, "touching" }, { 2, 1, "out of order" },
    };
    for (size_t i = 0; i < sizeof br / sizeof br[0]; i++) {
        memcpy(b, g, len);
        put32(b + WS_HEADER_SIZE + 16, br[i].first);    /* the third range */
        put32(b + WS_HEADER_SIZE + 20, br[i].count);
        reseal(b, len);
        ck_assert_msg(parse(b, len, &why) == -EINVAL, "%s", br[i].what);
        ck_assert_ptr_nonnull(why);
    }
}
END_TEST

START_TEST(runs)
{
    struct ws_range out[4];
    uint8_t p1[8] = { 1, 1, 0, 0, 1, 0, 1, 1 }, p2[4] = { 1, 0, 0, 1 };
    long n = ws_runs_append(p1, 8, 100, out, 0, 4);
    ck_assert_int_eq(n, 3);
    ck_assert_uint_eq(out[0].first, 100);
    ck_assert_uint_eq(out[0].count, 2);
    ck_assert_uint_eq(out[1].first, 104);
    ck_assert_uint_eq(out[2].first, 106);
    ck_assert_uint_eq(out[2].count, 2);
    /* the next chunk continues the last run */
    n = ws_runs_append(p2, 4, 108, out, (size_t)n, 4);
    ck_assert_int_eq(n, 4);
    ck_assert_uint_eq(out[2].count, 3);
    ck_assert_uint_eq(out[3].first, 111);
    /* no room */
    ck_assert_int_eq(ws_runs_append(p1, 8, 0, out, 0, 2), -E2BIG);
    ck_assert_int_eq(ws_runs_append(p1, 0, 0, out, 0, 0), 0);
}
END_TEST

/* ---- the helper, on guest RAM mapped from a file as a restore maps it ---- */

static char dir[] = "/tmp/moat-wset-XXXXXX";

static struct moat_vm *fake_vm(const char *mem, uint64_t size)
{
    struct moat_vm *vm = calloc(1, sizeof(*vm));
    int fd = open(mem, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    vm->ram = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    ck_assert_ptr_ne(vm->ram, MAP_FAILED);
    close(fd);
    vm->ram_size = size;
    ck_assert_int_eq(snapvm_attach(vm, true, NULL), 0);   /* the snapshot record a restore gives it */
    return vm;
}

static void free_vm(struct moat_vm *vm)
{
    wset_free(vm);
    munmap(vm->ram, vm->ram_size);
    vm_hooks_destroy(vm);
    free(vm);
}

static bool present(const void *addr)
{
    int fd = open("/proc/self/pagemap", O_RDONLY);
    uint64_t e = 0;
    ck_assert_int_eq(pread(fd, &e, 8, (off_t)((uintptr_t)addr / 4096 * 8)), 8);
    close(fd);
    return (e >> 63) & 1;
}

START_TEST(record_then_prefetch)
{
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char mem[128], ws[140];
    snprintf(mem, sizeof mem, "%s/memory", dir);
    snprintf(ws, sizeof ws, "%s.ws", mem);
    uint64_t size = 16 << 20;
    int fd = open(mem, O_RDWR | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
    uint8_t page[4096];
    memset(page, 0x5a, sizeof page);
    for (off_t o = 0; o < (off_t)size; o += 1 << 20)   /* some data, the rest holes */
        ck_assert_int_eq(pwrite(fd, page, sizeof page, o), (ssize_t)sizeof page);
    close(fd);

    /* First restore: nothing recorded yet, so it records. A VM that never
     * ran records nothing. */
    struct moat_vm *vm = fake_vm(mem, size);
    ck_assert_int_eq(wset_restore_start(vm, mem, SUM, false, 0), 0);
    struct wset_stats st;
    wset_get_stats(vm, &st);
    ck_assert_int_eq(st.mode, 1);
    wset_capture(vm);
    ck_assert_int_ne(access(ws, F_OK), 0);
    free_vm(vm);

    vm = fake_vm(mem, size);
    ck_assert_int_eq(wset_restore_start(vm, mem, SUM, false, 0), 0);
    atomic_store(&vm->t_first_run, clock_mono_ns());
    uint64_t sum = 0;
    for (uint64_t a = 2 << 20; a < 3 << 20; a += 4096)     /* 256 pages read */
        sum += vm->ram[a];
    vm->ram[8 << 20] = 1;                                   /* one written */
    ck_assert_uint_eq(sum, 0x5a);
    wset_capture(vm);
    wset_get_stats(vm, &st);
    ck_assert(st.done);
    ck_assert_uint_ge(st.pages, 257);
    ck_assert_uint_lt(st.pages, 257 + 64);    /* plus fault-around neighbours at most */
    ck_assert_int_eq(access(ws, F_OK), 0);
    free_vm(vm);

    /* Later restores prefetch it: the pages are mapped without a touch. */
    vm = fake_vm(mem, size);
    ck_assert(!present(vm->ram + (2 << 20) + 4096 * 100));
    ck_assert_int_eq(wset_restore_start(vm, mem, SUM, false, 0), 0);
    for (int i = 0; i < 500; i++) {
        wset_get_stats(vm, &st);
        if (st.done)
            break;
        usleep(10 * 1000);
    }
    ck_assert_int_eq(st.mode, 2);
    ck_assert(st.done);
    ck_assert_uint_ge(st.pages, 257);
    ck_assert(present(vm->ram + (2 << 20) + 4096 * 100));
    ck_assert(present(vm->ram + (8 << 20)));
    ck_assert(!present(vm->ram + (12 << 20) + 4096 * 7));
    free_vm(vm);

    /* --no-prefetch: the file is left alone, nothing mapped. */
    vm = fake_vm(mem, size);
    ck_assert_int_eq(wset_restore_start(vm, mem, SUM, true, 0), 0);
    wset_get_stats(vm, &st);
    ck_assert_int_eq(st.mode, 0);
    usleep(20 * 1000);
    ck_assert(!present(vm->ram + (2 << 20) + 4096 * 100));
    free_vm(vm);

    /* Another snapshot's file (other state checksum) is recorded anew. */
    vm = fake_vm(mem, size);
    ck_assert_int_eq(wset_restore_start(vm, mem, SUM + 1, false, 0), 0);
    wset_get_stats(vm, &st);
    ck_assert_int_eq(st.mode, 1);
    free_vm(vm);

    /* A malformed one likewise (a warning), never a failure. */
    fd = open(ws, O_WRONLY | O_TRUNC);
    ck_assert_int_eq(write(fd, "MOATWSET garbage", 16), 16);
    close(fd);
    vm = fake_vm(mem, size);
    ck_assert_int_eq(wset_restore_start(vm, mem, SUM, false, 0), 0);
    wset_get_stats(vm, &st);
    ck_assert_int_eq(st.mode, 1);
    free_vm(vm);

    unlink(ws);
    unlink(mem);
    rmdir(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("wsfile");
    TCase *tc = tcase_create("wsfile");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, round_trip);
    tcase_add_test(tc, encode_rejects);
    tcase_add_test(tc, parse_malformed);
    tcase_add_test(tc, runs);
    tcase_add_test(tc, record_then_prefetch);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
