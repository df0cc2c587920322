/* virtio-blk request parser. Contracts in virtio_blk_req.h. */
#include "devices/blk/virtio_blk_req.h"

#include <endian.h>
#include <errno.h>
#include <string.h>

static const char *const names[BLK_E__COUNT] = {
    [BLK_E_OK] = "ok",
    [BLK_E_NO_STATUS] = "no writable status byte",
    [BLK_E_SHORT_HEADER] = "request header shorter than 16 bytes",
    [BLK_E_FAULT] = "request not readable from guest RAM",
    [BLK_E_UNSUPP_TYPE] = "unsupported request type",
    [BLK_E_READ_ONLY] = "write to a read-only disk",
    [BLK_E_LAYOUT] = "data buffers in the wrong direction",
    [BLK_E_DATA_LEN] = "data length not a multiple of 512",
    [BLK_E_RANGE] = "sector range beyond capacity",
    [BLK_E_ID_SHORT] = "GET_ID buffer shorter than 20 bytes",
    [BLK_E_TOO_MANY_SEGS] = "too many data segments",
    [BLK_E_RANGES_LEN] = "bad discard/write-zeroes payload length",
    [BLK_E_TOO_MANY_RANGES] = "too many discard/write-zeroes ranges",
    [BLK_E_RANGE_FLAGS] = "unsupported range flags",
    [BLK_E_RANGE_SECTORS] = "bad range sector count",
};

const char *blk_req_strerror(enum blk_req_err e)
{
    if ((unsigned)e >= BLK_E__COUNT)
        return "unknown blk request error";
    return names[e];
}

/* The sub-ranges covering bytes [off, off + len) of the stream formed by
 * segments s[0 .. n), in order; zero-length pieces are skipped. 0, or
 * -ENOSPC if more than max pieces, or -ERANGE if the stream is too short. */
static int slice(const struct virtq_seg *s, unsigned n, uint64_t off, uint64_t len,
                 struct virtq_seg *out, unsigned max, unsigned *nout)
{
    unsigned k = 0;
    for (unsigned i = 0; i < n && len; i++) {
        if (off >= s[i].len) {
            off -= s[i].len;
            continue;
        }
        uint64_t take = s[i].len - off;
        if (take > len)
            take = len;
        if (k >= max)
            return -ENOSPC;
        out[k++] = (struct virtq_seg){ s[i].gpa + off, (uint32_t)take, s[i].writable };
        len -= take;
        off = 0;
    }
    if (nout)
        *nout = k;
    return len ? -ERANGE : 0;
}


static int fail(struct blk_req *r, enum blk_req_err e, uint8_t status)
{
    r->err = e;
    r->status = status;
    return -EINVAL;
}

/* Is [sector, sector + nsec) within capacity, and its end in bytes a file
 * offset (<= INT64_MAX, so offset and length computed in bytes cannot
 * overflow whatever capacity the device was given)? */
static bool in_capacity(uint64_t cap, uint64_t sector, uint64_t nsec)
{
    uint64_t end_bytes;
    return sector <= cap && nsec <= cap - sector &&
           !__builtin_mul_overflow(sector + nsec, (uint64_t)VIRTIO_BLK_SECTOR, &end_bytes) &&
           end_bytes <= (uint64_t)INT64_MAX;
}

static int parse_ranges(const struct gmem *m, const struct virtq_chain *c,
                        const struct blk_params *p, struct blk_req *r, bool wz)
{
    uint32_t max_seg = wz ? p->max_write_zeroes_seg : p->max_discard_seg;
    uint32_t max_sec = wz ? p->max_write_zeroes_sectors : p->max_discard_sectors;
    uint32_t bytes = c->read_len - VIRTIO_BLK_HDR_SIZE;
    if (p->read_only)
        return fail(r, BLK_E_READ_ONLY, VIRTIO_BLK_S_IOERR);
    if (c->write_len != 1)
        return fail(r, BLK_E_LAYOUT, VIRTIO_BLK_S_IOERR);
    if (bytes == 0 || bytes % VIRTIO_BLK_RANGE_SIZE)
        return fail(r, BLK_E_RANGES_LEN, VIRTIO_BLK_S_IOERR);
    uint32_t n = bytes / VIRTIO_BLK_RANGE_SIZE;
    if (n > max_seg || n > r->ranges_max)
        return fail(r, BLK_E_TOO_MANY_RANGES, VIRTIO_BLK_S_IOERR);
    for (uint32_t i = 0; i < n; i++) {
        uint8_t raw[16];
        if (virtq_chain_read(m, c, VIRTIO_BLK_HDR_SIZE + 16ull * i, raw, 16) != 16)
            return fail(r, BLK_E_FAULT, VIRTIO_BLK_S_IOERR);
        uint64_t sec; uint32_t num, flags;
        memcpy(&sec, raw, 8); memcpy(&num, raw + 8, 4); memcpy(&flags, raw + 12, 4);
        struct blk_range g = { le64toh(sec), le32toh(num), le32toh(flags), 0, 0 };
        /* Discard: no flags (unmap is only meaningful for write zeroes).
         * Write zeroes: only UNMAP. Otherwise UNSUPP (5.2.6.2). */
        if (g.flags & ~(wz ? VIRTIO_BLK_WZ_F_UNMAP : 0u))
            return fail(r, BLK_E_RANGE_FLAGS, VIRTIO_BLK_S_UNSUPP);
        if (g.num_sectors == 0 || g.num_sectors > max_sec)
            return fail(r, BLK_E_RANGE_SECTORS, VIRTIO_BLK_S_IOERR);
        if (!in_capacity(p->capacity, g.sector, g.num_sectors))
            return fail(r, BLK_E_RANGE, VIRTIO_BLK_S_IOERR);
        g.offset = g.sector * VIRTIO_BLK_SECTOR;              /* in_capacity: no overflow */
        g.len = (uint64_t)g.num_sectors * VIRTIO_BLK_SECTOR;
        r->ranges[i] = g;
    }
    r->nranges = n;
    return 0;
}

int blk_req_parse(const struct gmem *m, const struct virtq_chain *c,
                  const struct blk_params *p, struct blk_req *r)
{
    r->type = BLK_REQ_UNSUPP;
    r->raw_type = 0;
    r->sector = 0;
    r->offset = 0;
    r->ndata = 0;
    r->data_len = 0;
    r->nranges = 0;
    r->has_status = false;
    r->status_gpa = 0;
    r->status = VIRTIO_BLK_S_IOERR;
    r->err = BLK_E_OK;

    const struct virtq_seg *wseg = c->seg + c->nread;
    unsigned nw = c->nseg - c->nread;

    /* Status: the last byte of the writable stream. */
    if (c->write_len == 0)
        return fail(r, BLK_E_NO_STATUS, VIRTIO_BLK_S_IOERR);
    struct virtq_seg st;
    unsigned one;
    if (slice(wseg, nw, c->write_len - 1, 1, &st, 1, &one) < 0)
        return fail(r, BLK_E_NO_STATUS, VIRTIO_BLK_S_IOERR);
    r->has_status = true;
    r->status_gpa = st.gpa;
    uint32_t in_len = c->write_len - 1;     /* writable bytes before status */

    if (c->read_len < VIRTIO_BLK_HDR_SIZE)
        return fail(r, BLK_E_SHORT_HEADER, VIRTIO_BLK_S_IOERR);
    uint8_t hdr[VIRTIO_BLK_HDR_SIZE];
    if (virtq_chain_read(m, c, 0, hdr, sizeof hdr) != (long)sizeof hdr)
        return fail(r, BLK_E_FAULT, VIRTIO_BLK_S_IOERR);
    uint32_t type; uint64_t sector;
    memcpy(&type, hdr, 4);
    memcpy(&sector, hdr + 8, 8);
    r->raw_type = le32toh(type);
    r->sector = le64toh(sector);
    uint32_t out_len = c->read_len - VIRTIO_BLK_HDR_SIZE;   /* readable bytes after header */
    int e;

    switch (r->raw_type) {
    case VIRTIO_BLK_T_IN:
        r->type = BLK_REQ_IN;
        if (out_len)
            return fail(r, BLK_E_LAYOUT, VIRTIO_BLK_S_IOERR);
        if (in_len % VIRTIO_BLK_SECTOR)
            return fail(r, BLK_E_DATA_LEN, VIRTIO_BLK_S_IOERR);
        if (!in_capacity(p->capacity, r->sector, in_len / VIRTIO_BLK_SECTOR))
            return fail(r, BLK_E_RANGE, VIRTIO_BLK_S_IOERR);
        r->offset = r->sector * VIRTIO_BLK_SECTOR;   /* in_capacity: no overflow */
        e = slice(wseg, nw, 0, in_len, r->data, r->data_max, &r->ndata);
        if (e < 0)
            return fail(r, BLK_E_TOO_MANY_SEGS, VIRTIO_BLK_S_IOERR);
        r->data_len = in_len;
        return 0;

    case VIRTIO_BLK_T_OUT:
        r->type = BLK_REQ_OUT;
        /* Refused before anything else: the data is never looked at. */
        if (p->read_only)
            return fail(r, BLK_E_READ_ONLY, VIRTIO_BLK_S_IOERR);
        if (in_len)
            return fail(r, BLK_E_LAYOUT, VIRTIO_BLK_S_IOERR);
        if (out_len % VIRTIO_BLK_SECTOR)
            return fail(r, BLK_E_DATA_LEN, VIRTIO_BLK_S_IOERR);
        if (!in_capacity(p->capacity, r->sector, out_len / VIRTIO_BLK_SECTOR))
            return fail(r, BLK_E_RANGE, VIRTIO_BLK_S_IOERR);
        r->offset = r->sector * VIRTIO_BLK_SECTOR;   /* in_capacity: no overflow */
        e = slice(c->seg, c->nread, VIRTIO_BLK_HDR_SIZE, out_len, r->data, r->data_max, &r->ndata);
        if (e < 0)
            return fail(r, BLK_E_TOO_MANY_SEGS, VIRTIO_BLK_S_IOERR);
        r->data_len = out_len;
        return 0;

    case VIRTIO_BLK_T_FLUSH:
        r->type = BLK_REQ_FLUSH;
        if (in_len || out_len)
            return fail(r, BLK_E_LAYOUT, VIRTIO_BLK_S_IOERR);
        return 0;

    case VIRTIO_BLK_T_GET_ID:
        r->type = BLK_REQ_GET_ID;
        if (out_len)
            return fail(r, BLK_E_LAYOUT, VIRTIO_BLK_S_IOERR);
        if (in_len < VIRTIO_BLK_ID_BYTES)
            return fail(r, BLK_E_ID_SHORT, VIRTIO_BLK_S_IOERR);
        e = slice(wseg, nw, 0, VIRTIO_BLK_ID_BYTES, r->data, r->data_max, &r->ndata);
        if (e < 0)
            return fail(r, BLK_E_TOO_MANY_SEGS, VIRTIO_BLK_S_IOERR);
        r->data_len = VIRTIO_BLK_ID_BYTES;
        return 0;

    case VIRTIO_BLK_T_DISCARD:
    case VIRTIO_BLK_T_WRITE_ZEROES: {
        bool wz = r->raw_type == VIRTIO_BLK_T_WRITE_ZEROES;
        if (!(wz ? p->max_write_zeroes_seg : p->max_discard_seg))
            return fail(r, BLK_E_UNSUPP_TYPE, VIRTIO_BLK_S_UNSUPP);
        r->type = wz ? BLK_REQ_WRITE_ZEROES : BLK_REQ_DISCARD;
        return parse_ranges(m, c, p, r, wz);
    }

    default:
        return fail(r, BLK_E_UNSUPP_TYPE, VIRTIO_BLK_S_UNSUPP);
    }
}
