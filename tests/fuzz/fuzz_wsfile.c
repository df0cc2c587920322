/* Fuzz the working-set file's checker (vmm/snapshot/wsfile.c): a file next
 * to a snapshot that anyone may have written, listing pages the guest chose.
 *
 * Input: byte 0 = mode, the rest = the file.
 *   bit 0: reseal: write the right checksum into the file first (so the
 *          checks behind the checksum are reached);
 *   bit 1: expect the state checksum and memory size the file's own header
 *          names (else 0 and 64 MiB: mostly "another snapshot's").
 * Invariants: ws_parse never reads outside the input; when it accepts, the
 * length is exactly the header plus the ranges, every range is non-empty,
 * inside memory, ascending and not touching the previous one, and
 * ws_encode of the ranges gives back the same bytes. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "tests/fuzz/fuzz_common.h"
#include "vmm/snapshot/wsfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t mode = data[0];
    size_t len = size - 1;
    uint8_t *f = malloc(len ? len : 1);     /* exactly len bytes: ASan sees an overread */
    if (!f)
        return 0;
    memcpy(f, data + 1, len);
    if ((mode & 1) && len >= WS_HEADER_SIZE) {
        memset(f + 40, 0, 8);
        uint64_t h = XXH3_64bits(f, len);
        for (int i = 0; i < 8; i++)
            f[40 + i] = (uint8_t)(h >> (8 * i));
    }
    uint64_t sum = 0, mem = 64ull << 20;
    if ((mode & 2) && len >= 32) {
        sum = rd64(f + 16);
        mem = rd64(f + 24);
    }
    const uint8_t *raw = NULL;
    size_t n = 0;
    const char *why = NULL;
    int r = ws_parse(f, len, sum, mem, &raw, &n, &why);
    if (r < 0) {
        FUZZ_ASSERT(r == -EINVAL || r == -ESTALE || r == -EPROTONOSUPPORT);
        FUZZ_ASSERT(why != NULL);
    } else {
        FUZZ_ASSERT(r == 0);
        FUZZ_ASSERT(len == ws_file_size(n));
        FUZZ_ASSERT(n <= WS_MAX_RANGES);
        struct ws_range *rs = malloc((n ? n : 1) * sizeof(*rs));
        uint64_t end = 0;
        for (size_t i = 0; i < n; i++) {
            rs[i] = ws_range_at(raw, i);
            FUZZ_ASSERT(rs[i].count > 0);
            FUZZ_ASSERT((uint64_t)rs[i].first + rs[i].count <= mem / WS_PAGE);
            FUZZ_ASSERT(i == 0 || rs[i].first > end);
            end = (uint64_t)rs[i].first + rs[i].count;
        }
        uint8_t *again = malloc(len);
        FUZZ_ASSERT(ws_encode(again, len, sum, mem, rs, n) == (long)len);
        FUZZ_ASSERT(memcmp(again, f, len) == 0);
        free(again);
        free(rs);
    }
    free(f);
    return 0;
}
