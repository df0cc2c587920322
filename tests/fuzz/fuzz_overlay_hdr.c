/* Fuzz the copy-on-write overlay header parser (devices/blk/overlay.h) and, for
 * a header it accepts, the extent splitter over a bitmap from the input.
 *
 * Input: the first 4096 bytes of an overlay file (shorter inputs are tried
 * as they are: they must be refused); bytes after that are a bitmap (up to
 * 64 words) and a request (le64 offset, le64 length) for a disk of at most
 * 4096 blocks.
 * Seeds: tests/fuzz/corpus/overlay_hdr/. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "devices/blk/overlay.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ovl_header h;
    const char *why = NULL;
    int r = ovl_header_decode(data, size, &h, &why);
    FUZZ_ASSERT(r == 0 || r == -EINVAL || r == -ENOTSUP);
    FUZZ_ASSERT((r == 0) == (why == NULL));
    if (r < 0)
        return 0;
    FUZZ_ASSERT(size >= OVL_HDR_SIZE);
    FUZZ_ASSERT(h.vsize > 0 && h.vsize <= OVL_MAX_SIZE && h.base.size == h.vsize);
    FUZZ_ASSERT(h.nblocks == (h.vsize + OVL_BLOCK - 1) / OVL_BLOCK);
    FUZZ_ASSERT(h.bitmap_len * 8 >= h.nblocks && h.data_off == h.bitmap_off + h.bitmap_len);
    FUZZ_ASSERT(strlen(h.base_path) <= OVL_PATH_MAX);
    /* Round trip: encoding what was accepted gives the same bytes. */
    uint8_t again[OVL_HDR_SIZE];
    ovl_header_encode(&h, again);
    FUZZ_ASSERT(memcmp(again, data, OVL_HDR_SIZE) == 0);

    /* Extents over a small disk with a bitmap from the input. */
    const uint8_t *rest = data + OVL_HDR_SIZE;
    size_t n = size - OVL_HDR_SIZE;
    uint64_t bm[64] = { 0 };
    uint64_t nblocks = h.nblocks < 4096 ? h.nblocks : 4096;
    uint64_t vsize = h.nblocks < 4096 ? h.vsize : nblocks * OVL_BLOCK;
    size_t bn = n < sizeof bm ? n : sizeof bm;
    memcpy(bm, rest, bn);
    if (nblocks % 64)
        bm[nblocks / 64] &= (1ull << (nblocks % 64)) - 1;
    for (size_t w = (nblocks + 63) / 64; w < 64; w++)
        bm[w] = 0;
    FUZZ_ASSERT(ovl_bitmap_tail_clean(bm, nblocks));
    if (n < sizeof bm + 16)
        return 0;
    uint64_t off = get64(rest + sizeof bm), len = get64(rest + sizeof bm + 8);
    struct ovl_extent e;
    unsigned guard = 0;
    while (ovl_next_extent(bm, nblocks, vsize, off, len, &e) == 0) {
        FUZZ_ASSERT(e.off == off && e.len > 0 && e.len <= len);
        FUZZ_ASSERT(e.in_overlay == ovl_bit_get(bm, nblocks, off / OVL_BLOCK));
        FUZZ_ASSERT(e.in_overlay == ovl_bit_get(bm, nblocks, (off + e.len - 1) / OVL_BLOCK));
        off += e.len;
        len -= e.len;
        FUZZ_ASSERT(++guard <= 4096);
        if (!len)
            break;
    }
    return 0;
}
