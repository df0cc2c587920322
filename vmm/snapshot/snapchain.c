/* Diff-snapshot sections and bitmaps. Contracts in snapchain.h. */
#include "vmm/snapshot/snapchain.h"

#include <endian.h>
#include <errno.h>
#include <string.h>

#include "vmm/snapshot/snapfmt.h"

long snap_parent_encode(uint8_t *buf, size_t cap, uint64_t checksum, uint32_t depth,
                        const char *state_path, const char *mem_path)
{
    if (!state_path || !mem_path || depth == 0 || depth > SNAP_DIFF_MAX_DEPTH)
        return -EINVAL;
    size_t sl = strlen(state_path), ml = strlen(mem_path);
    if (sl == 0 || ml == 0)
        return -EINVAL;
    if (sl > SNAP_PARENT_PATH_MAX || ml > SNAP_PARENT_PATH_MAX)
        return -ENAMETOOLONG;
    struct snap_parent p = { .checksum = htole64(checksum), .depth = htole32(depth),
                             .state_len = htole32((uint32_t)sl), .mem_len = htole32((uint32_t)ml) };
    size_t total = sizeof(p) + sl + ml;
    if (total > cap)
        return -ENOSPC;
    memcpy(buf, &p, sizeof(p));
    memcpy(buf + sizeof(p), state_path, sl);
    memcpy(buf + sizeof(p) + sl, mem_path, ml);
    return (long)total;
}

static int bad(const char **why, const char *msg)
{
    if (why)
        *why = msg;
    return -EINVAL;
}

int snap_parent_decode(const uint8_t *data, uint64_t len, uint64_t *checksum, uint32_t *depth,
                       char *state, size_t state_cap, char *mem, size_t mem_cap, const char **why)
{
    struct snap_parent p;
    if (len < sizeof(p))
        return bad(why, "parent section too short");
    memcpy(&p, data, sizeof(p));
    uint32_t d = le32toh(p.depth), sl = le32toh(p.state_len), ml = le32toh(p.mem_len);
    if (p.pad)
        return bad(why, "parent section padding not zero");
    if (d == 0 || d > SNAP_DIFF_MAX_DEPTH)
        return bad(why, "diff chain depth out of range");
    if (sl == 0 || ml == 0 || sl > SNAP_PARENT_PATH_MAX || ml > SNAP_PARENT_PATH_MAX ||
        sl >= state_cap || ml >= mem_cap)
        return bad(why, "parent path length out of range");
    if (len != sizeof(p) + (uint64_t)sl + ml)
        return bad(why, "parent section length does not match its paths");
    const uint8_t *s = data + sizeof(p);
    if (memchr(s, 0, sl) || memchr(s + sl, 0, ml))
        return bad(why, "NUL inside a parent path");
    memcpy(state, s, sl);
    state[sl] = 0;
    memcpy(mem, s + sl, ml);
    mem[ml] = 0;
    *checksum = le64toh(p.checksum);
    *depth = d;
    return 0;
}

const char *snap_parent_beneath(const char *root, const char *path, const char **why)
{
    size_t rl = root ? strlen(root) : 0;
    if (!root || root[0] != '/' || (rl > 1 && root[rl - 1] == '/')) {
        bad(why, "snapshot root not an absolute directory path");
        return NULL;
    }
    if (!path || path[0] != '/') {
        bad(why, "parent path not absolute");
        return NULL;
    }
    if (rl == 1)
        rl = 0;                       /* root "/": everything is beneath it */
    if (strncmp(path, root, rl) || path[rl] != '/') {
        bad(why, "parent path outside the snapshot root");
        return NULL;
    }
    const char *rest = path + rl + 1;
    for (const char *c = rest;;) {
        const char *e = strchr(c, '/');
        size_t n = e ? (size_t)(e - c) : strlen(c);
        if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.')) {
            bad(why, "parent path has an empty, '.' or '..' component");
            return NULL;
        }
        if (!e)
            break;
        c = e + 1;
    }
    return rest;
}

uint64_t snap_file_checksum(const uint8_t *buf, size_t len)
{
    uint64_t v = 0;
    if (len >= 32)
        memcpy(&v, buf + 24, 8);
    return le64toh(v);
}

static uint64_t word(const uint8_t *bm, uint64_t w)
{
    uint64_t v;
    memcpy(&v, bm + 8 * w, 8);
    return le64toh(v);
}

int snap_bitmap_check(const uint8_t *data, uint64_t len, uint64_t mem_size, const char **why)
{
    if (mem_size == 0 || mem_size % SNAP_PAGE || mem_size > SNAP_DIFF_MAX_MEM)
        return bad(why, "memory size not usable for a diff");
    uint64_t words = snap_bitmap_words(mem_size);
    if (len != words * 8)
        return bad(why, "page bitmap length does not match the memory size");
    uint64_t npages = mem_size / SNAP_PAGE;
    if (npages % 64) {
        uint64_t last = word(data, words - 1);
        if (last >> (npages % 64))
            return bad(why, "page bitmap has bits past the last page");
    }
    return 0;
}

uint64_t snap_bitmap_next_run(const uint8_t *bm, uint64_t npages, uint64_t from, uint64_t *run)
{
    *run = 0;
    uint64_t i = from;
    /* find the first set bit */
    while (i < npages) {
        uint64_t w = word(bm, i / 64) >> (i % 64);
        if (w) {
            i += (uint64_t)__builtin_ctzll(w);
            break;
        }
        i = (i / 64 + 1) * 64;
    }
    if (i >= npages)
        return npages;
    uint64_t start = i;
    /* find the first clear bit after it */
    while (i < npages) {
        uint64_t w = ~word(bm, i / 64) >> (i % 64);
        if (w) {
            i += (uint64_t)__builtin_ctzll(w);
            break;
        }
        i = (i / 64 + 1) * 64;
    }
    if (i > npages)
        i = npages;
    *run = i - start;
    return start;
}

uint64_t snap_bitmap_count(const uint8_t *bm, uint64_t npages, uint64_t *runs)
{
    uint64_t set = 0, nr = 0, run, at = 0;
    while ((at = snap_bitmap_next_run(bm, npages, at, &run)) < npages) {
        set += run;
        nr++;
        at += run;
    }
    if (runs)
        *runs = nr;
    return set;
}
