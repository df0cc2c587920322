/* The working-set file's pure encoder and checker (vmm/snapshot/wsfile.h). */
#include <errno.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY   /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "vmm/snapshot/wsfile.h"

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd64(const uint8_t *p)
{
    return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

static void wr32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void wr64(uint8_t *p, uint64_t v)
{
    wr32(p, (uint32_t)v);
    wr32(p + 4, (uint32_t)(v >> 32));
}

/* The rules every range list obeys; why names the first broken one. */
static int check_ranges(const uint8_t *raw, const struct ws_range *arr, size_t n, uint64_t mem_size,
                        const char **why)
{
    uint64_t pages = mem_size / WS_PAGE, end = 0;
    for (size_t i = 0; i < n; i++) {
        struct ws_range r = raw ? ws_range_at(raw, i) : arr[i];
        if (r.count == 0) {
            *why = "an empty range";
            return -EINVAL;
        }
        if ((uint64_t)r.first + r.count > pages) {
            *why = "a range past the end of guest memory";
            return -EINVAL;
        }
        if (i > 0 && (uint64_t)r.first <= end) {
            *why = (uint64_t)r.first == end ? "two touching ranges (one run must be one range)"
                                            : "ranges out of order or overlapping";
            return -EINVAL;
        }
        end = (uint64_t)r.first + r.count;
    }
    return 0;
}

struct ws_range ws_range_at(const uint8_t *ranges, size_t i)
{
    const uint8_t *p = ranges + i * sizeof(struct ws_range);
    return (struct ws_range){ .first = rd32(p), .count = rd32(p + 4) };
}

long ws_encode(uint8_t *buf, size_t len, uint64_t state_sum, uint64_t mem_size,
               const struct ws_range *ranges, size_t n)
{
    const char *why;
    if (!buf || (n && !ranges) || n > WS_MAX_RANGES || mem_size == 0 || mem_size % WS_PAGE ||
        check_ranges(NULL, ranges, n, mem_size, &why) < 0)
        return -EINVAL;
    size_t need = ws_file_size(n);
    if (len < need)
        return -ENOSPC;
    memset(buf, 0, WS_HEADER_SIZE);
    memcpy(buf, WS_MAGIC, 8);
    wr32(buf + 8, WS_VERSION);
    wr32(buf + 12, WS_HEADER_SIZE);
    wr64(buf + 16, state_sum);
    wr64(buf + 24, mem_size);
    wr32(buf + 32, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        wr32(buf + WS_HEADER_SIZE + 8 * i, ranges[i].first);
        wr32(buf + WS_HEADER_SIZE + 8 * i + 4, ranges[i].count);
    }
    wr64(buf + 40, XXH3_64bits(buf, need));
    return (long)need;
}

int ws_parse(const uint8_t *buf, size_t len, uint64_t state_sum, uint64_t mem_size,
             const uint8_t **ranges, size_t *n, const char **why)
{
    const char *dummy;
    if (!why)
        why = &dummy;
    *why = NULL;
    if (!buf || len < WS_HEADER_SIZE) {
        *why = "shorter than its header";
        return -EINVAL;
    }
    if (memcmp(buf, WS_MAGIC, 8) != 0) {
        *why = "not a working-set file (bad magic)";
        return -EINVAL;
    }
    if (rd32(buf + 12) != WS_HEADER_SIZE) {
        *why = "bad header size";
        return -EINVAL;
    }
    uint32_t count = rd32(buf + 32);
    if (count > WS_MAX_RANGES) {
        *why = "too many ranges";
        return -EINVAL;
    }
    if (len != ws_file_size(count)) {
        *why = "its length does not match its range count";
        return -EINVAL;
    }
    /* The checksum over the file with its own field zeroed, without a copy:
     * the streaming API over the three parts. */
    static const uint8_t zero8[8];
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, buf, 40);
    XXH3_64bits_update(&st, zero8, 8);
    XXH3_64bits_update(&st, buf + 48, len - 48);
    if (XXH3_64bits_digest(&st) != rd64(buf + 40)) {
        *why = "checksum mismatch";
        return -EINVAL;
    }
    if (rd32(buf + 8) != WS_VERSION) {
        *why = "another version of the working-set format";
        return -EPROTONOSUPPORT;
    }
    if (rd32(buf + 36) != 0) {
        *why = "unknown flags";
        return -EINVAL;
    }
    if (rd64(buf + 16) != state_sum || rd64(buf + 24) != mem_size) {
        *why = "recorded for another snapshot";
        return -ESTALE;
    }
    if (mem_size == 0 || mem_size % WS_PAGE) {
        *why = "guest memory not whole pages";
        return -EINVAL;
    }
    int r = check_ranges(buf + WS_HEADER_SIZE, NULL, count, mem_size, why);
    if (r < 0)
        return r;
    if (ranges)
        *ranges = buf + WS_HEADER_SIZE;
    if (n)
        *n = count;
    return 0;
}

long ws_runs_append(const uint8_t *present, size_t npages, uint64_t base, struct ws_range *out,
                    size_t n, size_t cap)
{
    for (size_t i = 0; i < npages;) {
        if (!present[i]) {
            i++;
            continue;
        }
        size_t j = i + 1;
        while (j < npages && present[j])
            j++;
        uint64_t first = base + i, count = j - i;
        if (n && (uint64_t)out[n - 1].first + out[n - 1].count == first) {
            out[n - 1].count += (uint32_t)count;
        } else {
            if (n >= cap)
                return -E2BIG;
            out[n++] = (struct ws_range){ .first = (uint32_t)first, .count = (uint32_t)count };
        }
        i = j;
    }
    return (long)n;
}
