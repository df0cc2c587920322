#include "vmm/snapshot/snapfmt.h"

#include "boot/boot.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* Header layout (little-endian):
 *   0  magic[8]    "MOATSNAP"
 *   8  u32 version
 *  12  u32 header size (64)
 *  16  u64 payload length
 *  24  u64 XXH3-64 of the file with this field zero
 *  32  reserved, zero
 */
#define OFF_VERSION 8
#define OFF_HSIZE   12
#define OFF_PLEN    16
#define OFF_SUM     24
#define SECTION_HDR 16

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

void snapw_init(struct snap_writer *w)
{
    memset(w, 0, sizeof(*w));
    w->cap = 64 * 1024;
    w->buf = calloc(1, w->cap);
    if (!w->buf)
        w->err = -ENOMEM;
    w->len = SNAP_HEADER_SIZE;
}

static int reserve(struct snap_writer *w, uint64_t more)
{
    if (w->err)
        return w->err;
    if (more > SNAP_MAX_PAYLOAD || w->len + more > SNAP_HEADER_SIZE + (uint64_t)SNAP_MAX_PAYLOAD)
        return w->err = -EFBIG;
    if (w->len + more <= w->cap)
        return 0;
    size_t cap = w->cap;
    while (cap < w->len + more)
        cap *= 2;
    uint8_t *nb = realloc(w->buf, cap);
    if (!nb)
        return w->err = -ENOMEM;
    memset(nb + w->cap, 0, cap - w->cap);
    w->buf = nb;
    w->cap = cap;
    return 0;
}

void snapw_section(struct snap_writer *w, uint32_t type, uint32_t index, const void *data, uint64_t len)
{
    uint64_t padded = (len + 7) & ~7ull;
    if (reserve(w, SECTION_HDR + padded) < 0)
        return;
    uint8_t *p = w->buf + w->len;
    put32(p, type);
    put32(p + 4, index);
    put64(p + 8, len);
    memcpy(p + SECTION_HDR, data, len);
    memset(p + SECTION_HDR + len, 0, padded - len);
    w->len += SECTION_HDR + padded;
}

int snapw_finish(struct snap_writer *w, const uint8_t **out, size_t *outlen)
{
    if (w->err)
        return w->err;
    memset(w->buf, 0, SNAP_HEADER_SIZE);
    memcpy(w->buf, SNAP_MAGIC, 8);
    put32(w->buf + OFF_VERSION, SNAP_VERSION);
    put32(w->buf + OFF_HSIZE, SNAP_HEADER_SIZE);
    put64(w->buf + OFF_PLEN, w->len - SNAP_HEADER_SIZE);
    put64(w->buf + OFF_SUM, XXH3_64bits(w->buf, w->len));
    *out = w->buf;
    *outlen = w->len;
    return 0;
}

void snapw_free(struct snap_writer *w)
{
    free(w->buf);
    w->buf = NULL;
}

static int fail(const char **why, const char *msg, int code)
{
    if (why)
        *why = msg;
    return code;
}

int snap_parse(const uint8_t *buf, size_t len, struct snap_section *secs, size_t max,
               size_t *n, const char **why)
{
    *n = 0;
    if (len < SNAP_HEADER_SIZE)
        return fail(why, "state file truncated (no header)", -EINVAL);
    if (memcmp(buf, SNAP_MAGIC, 8) != 0)
        return fail(why, "not a moat state file (bad magic)", -EINVAL);
    if (get32(buf + OFF_HSIZE) != SNAP_HEADER_SIZE)
        return fail(why, "bad header size", -EINVAL);
    uint64_t plen = get64(buf + OFF_PLEN);
    if (plen > SNAP_MAX_PAYLOAD)
        return fail(why, "state file larger than the cap", -EFBIG);
    if (plen != len - SNAP_HEADER_SIZE)
        return fail(why, "state file length does not match its header (truncated?)", -EINVAL);
    /* Checksum over the file with the checksum field zeroed, without
     * copying the (capped) file. */
    uint8_t hdr[SNAP_HEADER_SIZE];
    memcpy(hdr, buf, SNAP_HEADER_SIZE);
    memset(hdr + OFF_SUM, 0, 8);
    XXH3_state_t *st = XXH3_createState();
    if (!st)
        return fail(why, "out of memory", -ENOMEM);
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, hdr, sizeof(hdr));
    XXH3_64bits_update(st, buf + SNAP_HEADER_SIZE, (size_t)plen);
    uint64_t sum = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    if (sum != get64(buf + OFF_SUM))
        return fail(why, "state file checksum mismatch (corrupted)", -EINVAL);
    uint32_t version = get32(buf + OFF_VERSION);
    if (version == 1 || version == 2)
        return fail(why, version == 1 ? "state file of an older moat (format version 1; this moat reads version 3): "
                                        "take the snapshot again with this moat"
                                      : "state file of an older moat (format version 2; this moat reads version 3): "
                                        "take the snapshot again with this moat", -EPROTONOSUPPORT);
    if (version != SNAP_VERSION)
        return fail(why, "state file of another moat (unknown format version; this moat reads version 3)",
                    -EPROTONOSUPPORT);
    for (size_t i = 32; i < SNAP_HEADER_SIZE; i++)
        if (buf[i])
            return fail(why, "reserved header bytes not zero", -EINVAL);
    uint64_t off = SNAP_HEADER_SIZE;
    while (off < len) {
        if (len - off < SECTION_HDR)
            return fail(why, "section header truncated", -EINVAL);
        uint64_t slen = get64(buf + off + 8);
        uint64_t padded = (slen + 7) & ~7ull;
        if (slen > SNAP_MAX_PAYLOAD || padded > len - off - SECTION_HDR)
            return fail(why, "section runs past the end of the file", -EINVAL);
        if (*n >= max)
            return fail(why, "too many sections", -E2BIG);
        secs[*n] = (struct snap_section){ get32(buf + off), get32(buf + off + 4), slen,
                                          buf + off + SECTION_HDR };
        for (size_t i = 0; i < *n; i++)
            if (secs[i].type == secs[*n].type && secs[i].index == secs[*n].index)
                return fail(why, "duplicate section", -EINVAL);
        (*n)++;
        off += SECTION_HDR + padded;
    }
    return fail(why, "ok", 0);
}

const struct snap_section *snap_find(const struct snap_section *secs, size_t n,
                                     uint32_t type, uint32_t index)
{
    for (size_t i = 0; i < n; i++)
        if (secs[i].type == type && secs[i].index == index)
            return &secs[i];
    return NULL;
}

/* ---- fixed sections ---- */

int snap_meta_check(const struct snap_meta *m, unsigned max_cpus, const char **why)
{
    if (m->ncpus < 1 || m->ncpus > max_cpus)
        return fail(why, "metadata: vCPU count out of range", -EINVAL);
    if (m->mem_size < (2u << 20) || m->mem_size > (1ull << 40))
        return fail(why, "metadata: memory size out of range (2 MiB .. 1 TiB)", -EINVAL);
    if (m->mem_size % 4096 != 0)
        return fail(why, "metadata: memory size not a multiple of 4 KiB", -EINVAL);
    if (m->boot_kind < BOOT_LINUX_BZIMAGE || m->boot_kind > BOOT_ELF)
        return fail(why, "metadata: unknown boot kind", -EINVAL);
    if (m->flags & ~(SNAP_META_PVM | SNAP_META_DIRTY_LOG))
        return fail(why, "metadata: unknown flags", -EINVAL);
    if (m->guest_status < -1 || m->guest_status > 255)
        return fail(why, "metadata: guest status out of range (-1 .. 255)", -EINVAL);
    return 0;
}

/* ---- devices (SNAP_DEV) ---- */

long snap_dev_encode(uint8_t *buf, size_t cap, uint32_t device_id, const char *id,
                     const void *state, size_t state_len, const void *data, size_t data_len)
{
    if (!id || !device_id || !state || !state_len || (data_len && !data))
        return -EINVAL;
    size_t il = strlen(id);
    if (il == 0)
        return -EINVAL;
    if (il > SNAP_DEV_ID_MAX)
        return -ENAMETOOLONG;
    if (state_len > SNAP_DEV_STATE_MAX || data_len > SNAP_DEV_DATA_MAX)
        return -E2BIG;
    struct snap_dev h = { .device_id = device_id, .id_len = (uint32_t)il,
                          .state_len = (uint32_t)state_len, .data_len = (uint32_t)data_len };
    size_t total = sizeof h + il + state_len + data_len;
    if (cap < total)
        return -ENOSPC;
    memcpy(buf, &h, sizeof h);
    memcpy(buf + sizeof h, id, il);
    memcpy(buf + sizeof h + il, state, state_len);
    if (data_len)
        memcpy(buf + sizeof h + il + state_len, data, data_len);
    return (long)total;
}

int snap_dev_decode(const uint8_t *data, uint64_t len, struct snap_dev_view *v, const char **why)
{
    struct snap_dev h;
    *why = NULL;
    if (len < sizeof h) {
        *why = "device section too short";
        return -EINVAL;
    }
    memcpy(&h, data, sizeof h);
    if (h.device_id == 0) {
        *why = "device section without a device type";
        return -EINVAL;
    }
    if (h.id_len == 0 || h.id_len > SNAP_DEV_ID_MAX) {
        *why = "device id length out of range";
        return -EINVAL;
    }
    if (h.state_len == 0 || h.state_len > SNAP_DEV_STATE_MAX || h.data_len > SNAP_DEV_DATA_MAX) {
        *why = "device state or record length out of range";
        return -EINVAL;
    }
    if (len != sizeof h + (uint64_t)h.id_len + h.state_len + h.data_len) {
        *why = "device section length does not match its parts";
        return -EINVAL;
    }
    const uint8_t *p = data + sizeof h;
    if (memchr(p, 0, h.id_len)) {
        *why = "NUL inside the device id";
        return -EINVAL;
    }
    v->device_id = h.device_id;
    memcpy(v->id, p, h.id_len);
    v->id[h.id_len] = 0;
    v->state = p + h.id_len;
    v->state_len = h.state_len;
    v->data = p + h.id_len + h.state_len;
    v->data_len = h.data_len;
    return 0;
}
