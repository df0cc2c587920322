/* Fuzz the split virtqueue core (and virtio-rng's request check on each
 * chain): the input is a guest memory image holding
 * the descriptor table, avail ring and indirect tables; the device pops
 * chains until the queue is empty or broken, pushes every head back and
 * checks the invariants virtq.h promises.
 *
 * Input: [0] feature bits (bit0 INDIRECT_DESC, bit1 EVENT_IDX)
 *        [1] queue size = 1 << (v % 5)       (1..16)
 *        [2] caller's max segments = 1 + v % 32
 *        [3..4] starting avail/used index (le16), to exercise wrap-around
 *        [5..] copied to guest RAM at gpa 0 (16 KiB region; a second,
 *              zeroed 4 KiB region follows at 0x4000 so ranges can
 *              straddle two regions).
 * Guest layout: desc 0x000, avail 0x100, used 0x200. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "devices/rng/virtio_rng.h"
#include "devices/virtio/virtq.h"
#include "tests/fuzz/fuzz_common.h"

#define RAM0    0x4000u
#define RAM1    0x1000u
#define HDR     5u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < HDR)
        return 0;
    uint8_t *r0 = calloc(1, RAM0), *r1 = calloc(1, RAM1);
    FUZZ_ASSERT(r0 && r1);
    size_t img = size - HDR < RAM0 ? size - HDR : RAM0;
    memcpy(r0, data + HDR, img);
    struct gmem m = { .n = 2 };
    m.r[0] = (struct gmem_region){ 0, RAM0, r0 };
    m.r[1] = (struct gmem_region){ RAM0, RAM1, r1 };

    struct virtq q;
    FUZZ_ASSERT(virtq_init(&q, 16) == 0);
    q.size = (uint16_t)(1u << (data[1] % 5));
    q.desc = 0x000; q.avail = 0x100; q.used = 0x200;
    uint64_t feat = 0;
    if (data[0] & 1) feat |= 1ull << VIRTIO_F_INDIRECT_DESC;
    if (data[0] & 2) feat |= 1ull << VIRTIO_F_EVENT_IDX;
    virtq_set_features(&q, feat);
    FUZZ_ASSERT(virtq_enable(&q, &m) == 0);
    uint16_t start = (uint16_t)(data[3] | data[4] << 8);
    q.last_avail_idx = q.used_idx = q.published_idx = start;

    struct virtq_seg segs[32];
    struct virtq_chain c = { .seg = segs, .max_seg = 1u + data[2] % 32 };
    int pending = virtq_pending(&q, &m);
    FUZZ_ASSERT(pending == -EIO || (pending >= 0 && pending <= q.size));
    int pops = 0;
    for (int iter = 0; iter < 2 * 16 + 2; iter++) {
        int r = virtq_pop(&q, &m, &c);
        if (r == 0)
            break;
        if (r == -EIO) {
            FUZZ_ASSERT(q.broken && !c.head_valid && c.err != VIRTQ_OK);
            FUZZ_ASSERT(virtq_pop(&q, &m, &c) == -EIO);
            break;
        }
        pops++;
        FUZZ_ASSERT(pops <= pending);
        FUZZ_ASSERT(c.head_valid && c.head < q.size);
        if (r == -EINVAL) {
            FUZZ_ASSERT(c.err > VIRTQ_E_RING_FAULT && c.err < VIRTQ_E__COUNT);
            FUZZ_ASSERT(virtq_push(&q, &m, c.head, 0) == 0);
            continue;
        }
        FUZZ_ASSERT(r == 1 && c.err == VIRTQ_OK);
        FUZZ_ASSERT(c.nseg <= c.max_seg && c.nread <= c.nseg);
        uint64_t rl = 0, wl = 0;
        for (unsigned i = 0; i < c.nseg; i++) {
            FUZZ_ASSERT(segs[i].writable == (i >= c.nread));
            uint8_t *p = gmem_ptr(&m, segs[i].gpa, segs[i].len);
            FUZZ_ASSERT(p != NULL);
            /* Read every byte: ASan checks gmem_ptr's range. (No writes:
             * buffers may overlap the rings, and the loop's invariants
             * assume only the device's used-ring writes change memory.) */
            volatile uint8_t sum = 0;
            for (uint32_t k = 0; k < segs[i].len; k++)
                sum = (uint8_t)(sum + p[k]);
            (void)sum;
            if (segs[i].writable)
                wl += segs[i].len;
            else
                rl += segs[i].len;
        }
        FUZZ_ASSERT(rl == c.read_len && wl == c.write_len);
        /* virtio-rng's request check on every chain the guest can make:
         * refused with any readable byte or segment or nothing writable,
         * else the writable bytes, capped */
        long want = rng_req_len(&c, VIRTIO_RNG_REQ_MAX);
        if (c.nread || !c.write_len)
            FUZZ_ASSERT(want == -EINVAL);
        else
            FUZZ_ASSERT(want > 0 && want <= VIRTIO_RNG_REQ_MAX && (uint64_t)want <= c.write_len &&
                        (want == VIRTIO_RNG_REQ_MAX || (uint64_t)want == c.write_len));
        if (virtq_push(&q, &m, c.head, c.write_len) != 0)
            FUZZ_ASSERT(q.broken);
    }
    if (!q.broken) {
        FUZZ_ASSERT(q.inflight == 0);
        FUZZ_ASSERT(virtq_publish(&q, &m) == 0);
        FUZZ_ASSERT((uint16_t)(q.published_idx - start) == pops);
        (void)virtq_should_notify(&q, &m);
        (void)virtq_should_notify(&q, &m);
        int e = virtq_enable_notify(&q, &m);
        FUZZ_ASSERT(e == -EIO || (e >= 0 && e <= q.size));
        FUZZ_ASSERT(virtq_disable_notify(&q, &m) == 0);
    }
    free(r0);
    free(r1);
    return 0;
}
