/* virtio-blk request parsing, pure: a popped descriptor chain (struct
 * virtq_chain) plus the disk's parameters in, a plain request value out.
 * No I/O happens here; the device executes the returned value.
 *
 * Layout (virtio 1.x has no fixed descriptor layout, VIRTIO_F_ANY_LAYOUT is
 * implied): the chain's device-readable bytes form one stream, its writable
 * bytes another (virtq guarantees readable segments come first).
 *   readable stream: 16-byte header { le32 type; le32 ioprio; le64 sector; }
 *                    then OUT data, or the DISCARD/WRITE_ZEROES ranges;
 *   writable stream: IN/GET_ID data, then the status byte (its last byte).
 * The header, data and status may thus be split across or share segments
 * in any way; Linux uses one segment for the header and one for the status.
 * Data segments returned are trimmed sub-ranges of the chain's segments.
 * A stream holding bytes its request type does not use (e.g. readable data
 * on an IN, writable data on an OUT) is a layout error (IOERR).
 * The header and ranges are copied once from guest memory (no double fetch).
 */
#ifndef MOAT_VIRTIO_BLK_REQ_H
#define MOAT_VIRTIO_BLK_REQ_H

#include <stdbool.h>
#include <stdint.h>

#include "devices/virtio/virtq.h"
#include "vmm/base/gmem.h"

#define VIRTIO_BLK_T_IN            0
#define VIRTIO_BLK_T_OUT           1
#define VIRTIO_BLK_T_FLUSH         4
#define VIRTIO_BLK_T_GET_ID        8
#define VIRTIO_BLK_T_GET_LIFETIME  10
#define VIRTIO_BLK_T_DISCARD       11
#define VIRTIO_BLK_T_WRITE_ZEROES  13
#define VIRTIO_BLK_T_SECURE_ERASE  14

#define VIRTIO_BLK_S_OK            0
#define VIRTIO_BLK_S_IOERR         1
#define VIRTIO_BLK_S_UNSUPP        2

#define VIRTIO_BLK_ID_BYTES        20
#define VIRTIO_BLK_SECTOR          512u
#define VIRTIO_BLK_HDR_SIZE        16u
#define VIRTIO_BLK_RANGE_SIZE      16u
#define VIRTIO_BLK_WZ_F_UNMAP      1u

enum blk_req_type {
    BLK_REQ_IN, BLK_REQ_OUT, BLK_REQ_FLUSH, BLK_REQ_GET_ID,
    BLK_REQ_DISCARD, BLK_REQ_WRITE_ZEROES, BLK_REQ_UNSUPP,
};

enum blk_req_err {
    BLK_E_OK = 0,
    BLK_E_NO_STATUS,        /* no writable byte: nowhere to put the status */
    BLK_E_SHORT_HEADER,     /* fewer than 16 readable bytes */
    BLK_E_FAULT,            /* header/ranges could not be read from RAM */
    BLK_E_UNSUPP_TYPE,      /* unknown or not offered request type -> UNSUPP */
    BLK_E_READ_ONLY,        /* write-type request on a read-only disk */
    BLK_E_LAYOUT,           /* data in the wrong direction / unexpected data */
    BLK_E_DATA_LEN,         /* IN/OUT length not a multiple of 512 */
    BLK_E_RANGE,            /* sector range overflows or passes capacity */
    BLK_E_ID_SHORT,         /* GET_ID with fewer than 20 writable bytes */
    BLK_E_TOO_MANY_SEGS,    /* more data segments than the caller's array */
    BLK_E_RANGES_LEN,       /* discard/wz payload empty or not 16-byte ranges */
    BLK_E_TOO_MANY_RANGES,  /* more ranges than max_*_seg or the caller's array */
    BLK_E_RANGE_FLAGS,      /* unknown/unsupported range flags -> UNSUPP */
    BLK_E_RANGE_SECTORS,    /* range num_sectors 0 or above max_*_sectors */
    BLK_E__COUNT
};

const char *blk_req_strerror(enum blk_req_err e);

/* The disk as the device advertises it. A zero max_discard_seg /
 * max_write_zeroes_seg means the feature is not offered (requests of that
 * type are UNSUPP). */
struct blk_params {
    uint64_t capacity;              /* in 512-byte sectors */
    bool read_only;
    uint32_t max_discard_seg, max_discard_sectors;
    uint32_t max_write_zeroes_seg, max_write_zeroes_sectors;
};

/* One DISCARD / WRITE_ZEROES range, host byte order. */
struct blk_range {
    uint64_t sector;
    uint32_t num_sectors;
    uint32_t flags;
    uint64_t offset, len;   /* the same in bytes: checked, end <= INT64_MAX */
};

struct blk_req {
    /* Set by the caller before blk_req_parse(): output arrays. */
    struct virtq_seg *data;
    unsigned data_max;
    struct blk_range *ranges;
    unsigned ranges_max;

    /* Filled by blk_req_parse(). */
    enum blk_req_type type;
    uint32_t raw_type;
    uint64_t sector;
    uint64_t offset;        /* IN/OUT: sector in bytes, checked: offset + data_len <= INT64_MAX */
    unsigned ndata;         /* data[0 .. ndata): IN/GET_ID writable, OUT readable */
    uint32_t data_len;      /* bytes in data[]; GET_ID: exactly 20 */
    unsigned nranges;       /* DISCARD / WRITE_ZEROES */
    bool has_status;
    uint64_t status_gpa;    /* one byte, in RAM and device-writable */
    uint8_t status;         /* on error: the status to write back */
    enum blk_req_err err;
};

/* Parse chain c. Returns 0 (execute r; write VIRTIO_BLK_S_OK or the I/O
 * result at status_gpa) or -EINVAL (do not execute: if r->has_status,
 * write r->status at r->status_gpa, else just return the chain with used
 * length 0). r->err always says why. */
int blk_req_parse(const struct gmem *m, const struct virtq_chain *c,
                  const struct blk_params *p, struct blk_req *r);

#endif
