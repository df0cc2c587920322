/* The last step of setting up a device's io_uring (liburing): the ring was
 * created with IORING_SETUP_R_DISABLED and its files registered; register
 * the restrictions (the opcodes allowed, the SQE flags allowed and
 * required, the register operations still allowed) and enable it. After
 * that nothing else can be registered and no other opcode runs: the
 * kernel fails such a request with -EACCES. Used by the block engine
 * (devices/blk/blk_uring.c) and the TAP backend (devices/net/net_uring.c).
 * Built only with liburing (MOAT_HAVE_URING). */
#ifndef MOAT_URING_RESTRICT_H
#define MOAT_URING_RESTRICT_H

#ifdef MOAT_HAVE_URING
#include <liburing.h>
#include <stddef.h>
#include <stdint.h>

struct uring_rules {
    const uint8_t *ops;         /* IORING_OP_* allowed */
    size_t nops;                /* at most 16 */
    uint8_t flags_allowed;      /* IOSQE_* a request may carry */
    uint8_t flags_required;     /* IOSQE_* every request must carry */
    const uint8_t *reg_ops;     /* IORING_REGISTER_* / _UNREGISTER_* still allowed (may be NULL) */
    size_t nreg_ops;            /* at most 4 */
};

/* 0 or -errno with why ("io_uring restrictions: ...", "io_uring enable: ..."). */
int uring_restrict_enable(struct io_uring *ring, const struct uring_rules *r, char *why, size_t wlen);
#endif

#endif
