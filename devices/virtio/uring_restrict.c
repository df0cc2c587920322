/* io_uring restrictions. Contract in uring_restrict.h. */
#include "devices/virtio/uring_restrict.h"

#ifdef MOAT_HAVE_URING
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Raw io_uring_register(2): liburing 2.3 as packaged in Debian 12 does
 * not export io_uring_register_restrictions / io_uring_enable_rings. */
static int uring_register(struct io_uring *ring, unsigned op, void *arg, unsigned n)
{
    long r = syscall(__NR_io_uring_register, ring->ring_fd, op, arg, n);
    return r < 0 ? -errno : 0;
}

int uring_restrict_enable(struct io_uring *ring, const struct uring_rules *rules, char *why, size_t wlen)
{
    struct io_uring_restriction res[16 + 4 + 2];
    if (rules->nops > 16 || rules->nreg_ops > 4) {
        snprintf(why, wlen, "io_uring restrictions: too many");
        return -EINVAL;
    }
    memset(res, 0, sizeof res);
    unsigned n = 0;
    for (size_t i = 0; i < rules->nops; i++, n++) {
        res[n].opcode = IORING_RESTRICTION_SQE_OP;
        res[n].sqe_op = rules->ops[i];
    }
    for (size_t i = 0; i < rules->nreg_ops; i++, n++) {
        res[n].opcode = IORING_RESTRICTION_REGISTER_OP;
        res[n].register_op = rules->reg_ops[i];
    }
    res[n].opcode = IORING_RESTRICTION_SQE_FLAGS_ALLOWED;
    res[n++].sqe_flags = rules->flags_allowed;
    res[n].opcode = IORING_RESTRICTION_SQE_FLAGS_REQUIRED;
    res[n++].sqe_flags = rules->flags_required;
    int r = uring_register(ring, IORING_REGISTER_RESTRICTIONS, res, n);
    if (r < 0) {
        snprintf(why, wlen, "io_uring restrictions: %s", strerror(-r));
        return r;
    }
    if ((r = uring_register(ring, IORING_REGISTER_ENABLE_RINGS, NULL, 0)) < 0) {
        snprintf(why, wlen, "io_uring enable: %s", strerror(-r));
        return r;
    }
    return 0;
}
#endif
