/* passt's stream framing, pure: no sockets, no processes. passt (and
 * QEMU's "-netdev stream") carry Ethernet frames over a Unix stream socket,
 * each one as a 4-byte big-endian length followed by that many bytes of
 * frame, in both directions. The peer controls every byte we read here.
 *
 * Receiving: a passt_rx holds what was read and not yet handed on; bytes
 * arrive in any split (a length cut in two, a frame across reads, several
 * frames in one read) and come out as whole frames, in order. A length of 0
 * or above NET_FRAME_MAX is a protocol error: nothing after it can be
 * framed again, so the error is sticky.
 *
 * Use: passt_rx_space + read() + passt_rx_commit (or passt_rx_feed for a
 * buffer in hand), then passt_rx_next until it returns 0. */
#ifndef MOAT_PASST_FRAME_H
#define MOAT_PASST_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "devices/net/net_backend.h"

#define PASST_LEN_SIZE  4u                                  /* the length prefix */
#define PASST_WIRE_MAX  (PASST_LEN_SIZE + NET_FRAME_MAX)    /* one frame on the wire */
#define PASST_RX_CAP    (2u * PASST_WIRE_MAX)               /* room for a read of >= one whole frame */

struct passt_rx {
    size_t start, end;          /* unread bytes: buf[start, end) */
    int err;                    /* 0; -EPROTO once a bad length was seen */
    uint32_t bad_len;           /* that length, for a message */
    uint8_t buf[PASST_RX_CAP];
};

void passt_rx_init(struct passt_rx *r);

/* Where the next read() goes and how many bytes may go there. Moves the
 * unread bytes to the front when the room behind them is short, which
 * invalidates a frame pointer from passt_rx_next. 0 only while a whole
 * frame is waiting (take it with passt_rx_next) or after an error. */
size_t passt_rx_space(struct passt_rx *r, uint8_t **where);

/* n bytes were written where passt_rx_space said (n <= its answer). */
void passt_rx_commit(struct passt_rx *r, size_t n);

/* Copy in as much of data[0, n) as fits: the bytes taken (< n when the
 * buffer is full: take frames, then feed the rest). */
size_t passt_rx_feed(struct passt_rx *r, const uint8_t *data, size_t n);

/* The next whole frame, consumed: 1 with *frame / *len (1 <= len <=
 * NET_FRAME_MAX; the bytes stay valid until passt_rx_space, _feed or
 * _init); 0: no whole frame buffered yet; -EPROTO: the next length is 0
 * or above NET_FRAME_MAX (sticky: every later call says so too). */
int passt_rx_next(struct passt_rx *r, const uint8_t **frame, size_t *len);

/* Unread bytes (the start of a frame not yet whole, after passt_rx_next
 * returned 0): nonzero at end of stream means the peer cut a frame short. */
size_t passt_rx_pending(const struct passt_rx *r);

/* A frame's 4-byte big-endian length prefix. */
void passt_len_encode(uint32_t len, uint8_t out[PASST_LEN_SIZE]);
uint32_t passt_len_decode(const uint8_t in[PASST_LEN_SIZE]);

#endif
