/* Fuzz the virtio-blk request parser: a chain of up to 16 segments over an
 * 8 KiB guest memory image, disk parameters from the input.
 *
 * Input: [0] flags: bit0 read-only, bit1 discard offered, bit2 write-zeroes
 *            offered, bit3 capacity UINT64_MAX (offsets that overflow in
 *            bytes must be refused)
 *        [1..2] capacity in sectors (le16)
 *        [3] number of segments n = v % 17
 *        then n x 5 bytes: le16 offset, le16 length, u8 writable (bit0)
 *        the rest: guest RAM image at gpa 0 (8 KiB).
 * Segments are clamped into RAM and stably partitioned readable-first, as
 * virtq_pop() guarantees, so the parser sees only chains it can get. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "devices/blk/virtio_blk_req.h"
#include "tests/fuzz/fuzz_common.h"

#define RAM 0x2000u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool inside_writable(const struct virtq_chain *c, uint64_t gpa)
{
    for (unsigned i = c->nread; i < c->nseg; i++)
        if (gpa >= c->seg[i].gpa && gpa < c->seg[i].gpa + c->seg[i].len)
            return true;
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    unsigned n = data[3] % 17;
    size_t pos = 4;
    if (size < pos + 5ull * n)
        return 0;
    struct virtq_seg raw[16], segs[16];
    for (unsigned i = 0; i < n; i++, pos += 5) {
        uint32_t off = (uint32_t)(data[pos] | data[pos + 1] << 8) % RAM;
        uint32_t len = (uint32_t)(data[pos + 2] | data[pos + 3] << 8);
        if (len > RAM - off)
            len = RAM - off;
        raw[i] = (struct virtq_seg){ off, len, data[pos + 4] & 1 };
    }
    struct virtq_chain c = { .seg = segs, .max_seg = 16, .head_valid = true };
    for (int pass = 0; pass < 2; pass++)
        for (unsigned i = 0; i < n; i++)
            if (raw[i].writable == (pass == 1)) {
                segs[c.nseg++] = raw[i];
                if (pass) c.write_len += raw[i].len;
                else { c.nread++; c.read_len += raw[i].len; }
            }

    uint8_t *ram = calloc(1, RAM);
    FUZZ_ASSERT(ram);
    memcpy(ram, data + pos, size - pos < RAM ? size - pos : RAM);
    struct gmem m = { .n = 1 };
    m.r[0] = (struct gmem_region){ 0, RAM, ram };

    struct blk_params p = {
        .capacity = (data[0] & 8) ? UINT64_MAX : (uint64_t)(data[1] | data[2] << 8),
        .read_only = data[0] & 1,
        .max_discard_seg = (data[0] & 2) ? 4 : 0, .max_discard_sectors = 256,
        .max_write_zeroes_seg = (data[0] & 4) ? 4 : 0, .max_write_zeroes_sectors = 1024,
    };
    struct virtq_seg dseg[16];
    struct blk_range rng[4];
    struct blk_req r = { .data = dseg, .data_max = 16, .ranges = rng, .ranges_max = 4 };
    int e = blk_req_parse(&m, &c, &p, &r);
    FUZZ_ASSERT(e == 0 || e == -EINVAL);
    if (r.has_status) {
        FUZZ_ASSERT(gmem_ptr(&m, r.status_gpa, 1) != NULL);
        FUZZ_ASSERT(inside_writable(&c, r.status_gpa));
    }
    if (e < 0) {
        FUZZ_ASSERT(r.err != BLK_E_OK && r.err < BLK_E__COUNT);
        FUZZ_ASSERT(r.status == VIRTIO_BLK_S_IOERR || r.status == VIRTIO_BLK_S_UNSUPP);
        if (r.err == BLK_E_READ_ONLY)
            FUZZ_ASSERT(p.read_only && r.ndata == 0);
    } else {
        FUZZ_ASSERT(r.has_status && r.type != BLK_REQ_UNSUPP);
        FUZZ_ASSERT(r.ndata <= r.data_max && r.nranges <= r.ranges_max);
        uint64_t total = 0;
        for (unsigned i = 0; i < r.ndata; i++) {
            FUZZ_ASSERT(gmem_ptr(&m, dseg[i].gpa, dseg[i].len) != NULL);
            FUZZ_ASSERT(dseg[i].writable == (r.type == BLK_REQ_IN || r.type == BLK_REQ_GET_ID));
            total += dseg[i].len;
        }
        FUZZ_ASSERT(total == r.data_len);
        if (r.type == BLK_REQ_IN || r.type == BLK_REQ_OUT) {
            FUZZ_ASSERT(r.data_len % VIRTIO_BLK_SECTOR == 0);
            FUZZ_ASSERT(r.sector <= p.capacity &&
                        r.data_len / VIRTIO_BLK_SECTOR <= p.capacity - r.sector);
            FUZZ_ASSERT(!(r.type == BLK_REQ_OUT && p.read_only));
            uint64_t off;
            FUZZ_ASSERT(!__builtin_mul_overflow(r.sector, (uint64_t)VIRTIO_BLK_SECTOR, &off) && off == r.offset);
            FUZZ_ASSERT(r.offset <= (uint64_t)INT64_MAX - r.data_len);
        }
        if (r.type == BLK_REQ_GET_ID)
            FUZZ_ASSERT(r.data_len == VIRTIO_BLK_ID_BYTES);
        if (r.type == BLK_REQ_DISCARD || r.type == BLK_REQ_WRITE_ZEROES) {
            FUZZ_ASSERT(!p.read_only && r.nranges >= 1);
            for (unsigned i = 0; i < r.nranges; i++)
                FUZZ_ASSERT(rng[i].num_sectors && rng[i].sector <= p.capacity &&
                            rng[i].num_sectors <= p.capacity - rng[i].sector &&
                            rng[i].offset == rng[i].sector * VIRTIO_BLK_SECTOR &&
                            rng[i].offset / VIRTIO_BLK_SECTOR == rng[i].sector &&
                            rng[i].len == (uint64_t)rng[i].num_sectors * VIRTIO_BLK_SECTOR &&
                            rng[i].offset <= (uint64_t)INT64_MAX - rng[i].len);
        }
    }
    free(ram);
    return 0;
}
