/* Fuzz snapshot input: a whole state file, as moat_restore reads it. The
 * framing parser (snap_parse), then every section a restore reads through
 * its pure checker or decoder: metadata, UART and control-device state,
 * each device section (its framing, then its record, the options that
 * made the device (devices/virtio/devopt.h), and its virtio-mmio transport state, loaded into a
 * device model made from the section's own identity, then saved again:
 * what loads must come back unchanged), and the diff-chain sections
 * (parent, page bitmap and its runs).
 *
 * Input: a state file. The corpus (tests/fuzz/corpus/snapshot/) holds real
 * snapshots of the counter guest: full and diff, without and with a drive
 * and a vsock device (docs/fuzzing.md says how they were made). The
 * target reseals the header checksum of a copy of the input first, as a
 * forger would, so that mutations reach the sections (the checksum check
 * itself: every bit flip in tests/unit/test_snapfmt.c). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "devices/legacy/i8042.h"
#include "devices/legacy/moatdev.h"
#include "devices/legacy/serial.h"
#include "devices/virtio/devopt.h"
#include "devices/virtio/virtio_dev.h"
#include "devices/virtio/virtio_mmio.h"
#include "tests/fuzz/fuzz_common.h"
#include "vmm/snapshot/snapchain.h"
#include "vmm/snapshot/snapfmt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct snap_section secs[SNAP_MAX_SECTIONS];
static void fuzz_one(const uint8_t *data, size_t size);

static void check_virtio_mmio(const struct snap_section *sec)
{
    if (sec->len != sizeof(struct virtio_mmio_state))
        return;
    struct virtio_mmio_state st;
    memcpy(&st, sec->data, sizeof st);
    /* A device with the identity the section claims, so loads can succeed. */
    struct virtio_mmio_params p = {
        .device_id = st.device_id, .device_features = st.device_features,
        .nqueues = st.nqueues, .queue_max = 256,
    };
    static uint8_t ram[1 << 16];
    struct gmem m = { .n = 1 };
    m.r[0] = (struct gmem_region){ 0, sizeof ram, ram };
    static const struct virtio_mmio_ops ops;
    struct virtio_mmio vm;
    if (virtio_mmio_init(&vm, &p, &m, &ops, NULL) < 0)
        return;
    const char *why = NULL;
    int r = virtio_mmio_load(&vm, &st, &why);
    FUZZ_ASSERT(r == 0 || (r == -EINVAL && why && *why));
    if (r == 0) {
        struct virtio_mmio_state back;
        FUZZ_ASSERT(virtio_mmio_save(&vm, &back) == 0);
        FUZZ_ASSERT(back.device_id == st.device_id && back.nqueues == st.nqueues &&
                    back.status == st.status && back.driver_features == st.driver_features);
        for (unsigned i = 0; i < st.nqueues && i < VIRTIO_MMIO_MAX_QUEUES; i++)
            FUZZ_ASSERT(back.q[i].ready == st.q[i].ready && back.q[i].num == st.q[i].num &&
                        back.q[i].last_avail_idx == st.q[i].last_avail_idx);
    }
    virtio_mmio_destroy(&vm);
}

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t size)
{
    if (size > SNAP_HEADER_SIZE + SNAP_MAX_PAYLOAD)
        return 0;
    uint8_t *data = malloc(size ? size : 1);
    FUZZ_ASSERT(data);
    memcpy(data, in, size);
    if (size >= SNAP_HEADER_SIZE) {
        memset(data + 24, 0, 8);   /* the checksum field (docs/snapshot-format.md) */
        uint64_t sum = XXH3_64bits(data, size);
        memcpy(data + 24, &sum, 8);
    }
    fuzz_one(data, size);
    free(data);
    return 0;
}

/* A device's record: the options that made it (devopt_decode), then
 * encoded again: what decodes must come back byte for byte. */
static void check_record(const uint8_t *data, uint64_t len)
{
    static struct devopts o;
    static uint8_t back[SNAP_DEV_DATA_MAX];
    const char *why = NULL;
    if (devopt_decode(data, (size_t)len, &o, &why) != 0) {
        FUZZ_ASSERT(why);
        return;
    }
    FUZZ_ASSERT(o.n <= DEVOPT_MAX);
    long n = devopt_encode(&o, back, sizeof back);
    FUZZ_ASSERT(n == (long)len && memcmp(back, data, (size_t)len) == 0);
}

/* A device section: its framing, then its transport state and its
 * record (vmm/core/devtab.c makes the device again from it). */
static void check_dev(const struct snap_section *sec)
{
    struct snap_dev_view v;
    const char *why = NULL;
    if (snap_dev_decode(sec->data, sec->len, &v, &why) != 0) {
        FUZZ_ASSERT(why);
        return;
    }
    FUZZ_ASSERT(v.device_id != 0 && strlen(v.id) >= 1 && strlen(v.id) <= SNAP_DEV_ID_MAX);
    FUZZ_ASSERT(v.state >= sec->data && v.state + v.state_len <= sec->data + sec->len);
    FUZZ_ASSERT(v.data >= v.state + v.state_len && v.data + v.data_len == sec->data + sec->len);
    struct snap_section st = { .type = SNAP_DEV, .index = sec->index, .len = v.state_len, .data = v.state };
    check_virtio_mmio(&st);
    check_record(v.data, v.data_len);
}

static void fuzz_one(const uint8_t *data, size_t size)
{
    size_t n = 0;
    const char *why = NULL;
    int r = snap_parse(data, size, secs, SNAP_MAX_SECTIONS, &n, &why);
    FUZZ_ASSERT(why != NULL);
    if (r < 0)
        return;
    FUZZ_ASSERT(n <= SNAP_MAX_SECTIONS);
    uint64_t mem_size = 0;
    for (size_t i = 0; i < n; i++) {
        const struct snap_section *s = &secs[i];
        FUZZ_ASSERT(s->data >= data && s->data + s->len <= data + size);
        why = NULL;
        switch (s->type) {
        case SNAP_META:
            if (s->len == sizeof(struct snap_meta)) {
                struct snap_meta m;
                memcpy(&m, s->data, sizeof m);
                int e = snap_meta_check(&m, 64, &why);
                FUZZ_ASSERT(e == 0 || (e == -EINVAL && why));
                if (e == 0) {
                    FUZZ_ASSERT(m.ncpus >= 1 && m.ncpus <= 64 && m.mem_size % 4096 == 0);
                    mem_size = m.mem_size;
                }
            }
            break;
        case SNAP_DEV_SERIAL:
            if (s->len == sizeof(struct serial_state)) {
                struct serial_state ss;
                memcpy(&ss, s->data, sizeof ss);
                if (serial_state_check(&ss, &why) == 0)
                    FUZZ_ASSERT(ss.rx_len <= 64 && ss.rx_head < 64);
                else
                    FUZZ_ASSERT(why);
            }
            break;
        case SNAP_DEV_I8042:
            if (s->len == sizeof(struct i8042_state)) {
                struct i8042_state ks;
                memcpy(&ks, s->data, sizeof ks);
                if (i8042_state_check(&ks, &why) == 0)
                    FUZZ_ASSERT(ks.head < I8042_BUF && ks.len <= I8042_BUF && ks.last_was_cmd <= 1);
                else
                    FUZZ_ASSERT(why);
            }
            break;
        case SNAP_DEV_MOATDEV:
            if (s->len == sizeof(struct moatdev_state)) {
                struct moatdev_state md;
                memcpy(&md, s->data, sizeof md);
                FUZZ_ASSERT(moatdev_state_check(&md, &why) == 0 || why);
            }
            break;
        case SNAP_DEV:
            check_dev(s);
            break;
        case SNAP_DIFF_PARENT: {
            static char st[SNAP_PARENT_PATH_MAX + 1], mem[SNAP_PARENT_PATH_MAX + 1];
            uint64_t sum;
            uint32_t depth;
            if (snap_parent_decode(s->data, s->len, &sum, &depth, st, sizeof st, mem, sizeof mem, &why) == 0)
                FUZZ_ASSERT(depth >= 1 && strlen(st) >= 1 && strlen(mem) >= 1);
            else
                FUZZ_ASSERT(why);
            break;
        }
        default:
            break;
        }
    }
    /* The page bitmap against the metadata's memory size. */
    const struct snap_section *pg = snap_find(secs, n, SNAP_DIFF_PAGES, 0);
    if (pg && mem_size && mem_size <= SNAP_DIFF_MAX_MEM && mem_size <= (64ull << 20)) {
        why = NULL;
        if (snap_bitmap_check(pg->data, pg->len, mem_size, &why) == 0) {
            uint64_t npages = mem_size / SNAP_PAGE, runs = 0, set = snap_bitmap_count(pg->data, npages, &runs);
            uint64_t seen = 0, nruns = 0;
            for (uint64_t p = 0, run; (p = snap_bitmap_next_run(pg->data, npages, p, &run)) < npages; p += run) {
                FUZZ_ASSERT(run >= 1 && p + run <= npages);
                seen += run;
                nruns++;
            }
            FUZZ_ASSERT(seen == set && nruns == runs);
        } else {
            FUZZ_ASSERT(why);
        }
    }
}
