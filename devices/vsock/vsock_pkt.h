/* virtio-vsock packets and Firecracker's hybrid-vsock CONNECT line, pure:
 * no KVM, no sockets, no guest memory. Everything the guest (packet header)
 * or a host client (CONNECT line) controls is parsed here.
 *
 * Packet header (virtio 1.2, 5.10.6), 44 bytes, little-endian, packed:
 *   le64 src_cid; le64 dst_cid; le32 src_port; le32 dst_port; le32 len;
 *   le16 type; le16 op; le32 flags; le32 buf_alloc; le32 fwd_cnt;
 * followed by len bytes of payload (op RW only).
 *
 * CONNECT line (Firecracker hybrid vsock): "CONNECT <port>\n", keyword
 * case-insensitive, then one or more blanks (' ' or '\t'), 1..10 decimal
 * digits (a u32), optional trailing blanks and one '\r', then '\n'. */
#ifndef MOAT_VSOCK_PKT_H
#define MOAT_VSOCK_PKT_H

#include <stddef.h>
#include <stdint.h>

#define VSOCK_HDR_SIZE        44u
#define VSOCK_MAX_PKT_LEN     65536u     /* payload bytes per packet */
#define VSOCK_HOST_CID        2u
#define VSOCK_MIN_GUEST_CID   3u
#define VSOCK_HOST_PORT_BASE  (1u << 30) /* host-initiated local ports from here */

#define VSOCK_TYPE_STREAM     1u

enum vsock_op {
    VSOCK_OP_INVALID = 0,
    VSOCK_OP_REQUEST = 1,
    VSOCK_OP_RESPONSE = 2,
    VSOCK_OP_RST = 3,
    VSOCK_OP_SHUTDOWN = 4,
    VSOCK_OP_RW = 5,
    VSOCK_OP_CREDIT_UPDATE = 6,
    VSOCK_OP_CREDIT_REQUEST = 7,
};

/* SHUTDOWN flags */
#define VSOCK_SHUTDOWN_RCV    1u
#define VSOCK_SHUTDOWN_SEND   2u

struct vsock_hdr {
    uint64_t src_cid, dst_cid;
    uint32_t src_port, dst_port;
    uint32_t len;
    uint16_t type, op;
    uint32_t flags, buf_alloc, fwd_cnt;
};

enum vsock_pkt_err {
    VSOCK_E_OK = 0,
    VSOCK_E_SHORT,       /* fewer than 44 header bytes */
    VSOCK_E_LEN,         /* len > 64 KiB */
    VSOCK_E_TRUNC,       /* len > payload bytes the buffer holds */
    VSOCK_E_TYPE,        /* type != STREAM (answer: RST) */
    VSOCK_E_OP,          /* op 0 or > 7 */
    VSOCK_E_SRC_CID,     /* src_cid != the guest's CID */
    VSOCK_E_DST_CID,     /* dst_cid != host (2) */
    VSOCK_E_CTRL_LEN,    /* len != 0 on a non-RW op */
    VSOCK_E_FLAGS,       /* flags on an op that has none, or unknown SHUTDOWN bits */
    VSOCK_E__COUNT
};

const char *vsock_pkt_strerror(enum vsock_pkt_err e);

/* Decode / encode the 44-byte wire header. */
void vsock_hdr_decode(const uint8_t b[VSOCK_HDR_SIZE], struct vsock_hdr *h);
void vsock_hdr_encode(const struct vsock_hdr *h, uint8_t b[VSOCK_HDR_SIZE]);

/* Parse and validate a guest->host (TX queue) packet: avail bytes at b, of
 * which the first 44 are the header and the rest are payload space.
 * Returns 0, or -EINVAL with *err set (err may be NULL). On -EINVAL *h holds
 * whatever was decoded (all zero on VSOCK_E_SHORT) so that the caller can
 * address an RST to the sender when the addresses made sense. */
int vsock_pkt_parse(const uint8_t *b, size_t avail, uint64_t guest_cid,
                    struct vsock_hdr *h, enum vsock_pkt_err *err);

/* Validate an already decoded header (same rules as vsock_pkt_parse, with
 * payload_avail = payload bytes present). */
enum vsock_pkt_err vsock_hdr_check(const struct vsock_hdr *h, uint64_t guest_cid,
                                   uint64_t payload_avail);

/* Is cid a CID a guest may be given? (3 .. 0xFFFFFFFE; -1U is reserved.) */
int vsock_cid_valid(uint64_t cid);

/* Credit: the peer advertised buf_alloc and fwd_cnt; we have sent tx_cnt
 * bytes in total (u32 counters that wrap). Free space at the peer =
 * buf_alloc - (tx_cnt - fwd_cnt). 0 with *out set, or -ERANGE (*out = 0)
 * when the peer claims to have forwarded more than we sent beyond its
 * buffer (in flight > buf_alloc): a broken or lying peer. */
int vsock_credit_free(uint32_t buf_alloc, uint32_t tx_cnt, uint32_t fwd_cnt, uint32_t *out);

/* Add n to a u32 byte counter: wraps by design (the protocol's counters
 * are modulo 2^32). */
static inline uint32_t vsock_cnt_add(uint32_t c, uint32_t n) { return (uint32_t)(c + n); }

/* CONNECT line ------------------------------------------------------- */
#define VSOCK_CONNECT_MAX_LINE 64u   /* bytes, '\n' included */

/* Parse the first len bytes a host client sent. Returns:
 *   > 0     : a complete valid line; the value is the bytes consumed, up to
 *             and including '\n' (bytes after it are payload); *port set;
 *   0       : valid so far, need more bytes (no '\n' yet);
 *   -EINVAL : malformed (as soon as a prefix cannot become a valid line,
 *             or the line is longer than VSOCK_CONNECT_MAX_LINE).
 * Never looks past the first '\n'. */
int vsock_connect_parse(const uint8_t *buf, size_t len, uint32_t *port);

/* Write "OK <port>\n" into buf (n bytes). Returns its length, or -ENOSPC. */
int vsock_ok_line(uint32_t port, char *buf, size_t n);

#endif
