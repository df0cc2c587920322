/* The TAP backend's io_uring engine (devices/net/net_uring.c) over a
 * SOCK_SEQPACKET socket pair (one frame per read or write, as a TAP):
 * frames both ways in order, batches, backpressure and the eventfd, a
 * refused frame, the end of the file, quiesce, and the ring's
 * restrictions: opcodes outside READ/WRITE/ASYNC_CANCEL, a request without
 * the fixed file, and registering anything more are refused. Skipped
 * (loudly) where moat was built without liburing or the host refuses
 * io_uring. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "devices/net/net_uring.h"

#ifdef MOAT_HAVE_URING
#include <liburing.h>

static int sv[2];
static struct net_uring *U;

/* Set up the engine on sv[0] (tx slots ntx, slots of slot bytes): false
 * with SKIPPED printed where the host refuses io_uring. */
static bool up(unsigned nrx, unsigned ntx, size_t slot)
{
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    ck_assert_int_eq(fcntl(sv[1], F_SETFL, 0), 0);     /* the test's end blocks */
    int big = 1 << 20;
    setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    struct net_uring_cfg c = { .fd = sv[0], .rx_slots = nrx, .tx_slots = ntx, .slot_size = slot, .name = "t" };
    char why[200] = "";
    int r = net_uring_create(&c, &U, why, sizeof why);
    if (r < 0 && (r == -EPERM || r == -ENOSYS || r == -EACCES)) {
        printf("SKIPPED: test_net_uring: %s\n", why);
        close(sv[0]);
        close(sv[1]);
        return false;
    }
    ck_assert_msg(r == 0, "net_uring_create: %s", why);
    /* the engine made the file blocking: io_uring waits for it */
    ck_assert_int_eq(fcntl(sv[0], F_GETFL) & O_NONBLOCK, 0);
    return true;
}

static void down(void)
{
    net_uring_destroy(U);
    U = NULL;
    close(sv[0]);
    if (sv[1] >= 0)
        close(sv[1]);
}

static void fill(uint8_t *f, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        f[i] = (uint8_t)(i * 13 + seed * 7 + 1);
}

/* Wait (at most ms) for the engine's eventfd. */
static bool ev_wait(int ms)
{
    struct pollfd p = { .fd = net_uring_eventfd(U), .events = POLLIN };
    return poll(&p, 1, ms) == 1;
}

/* Flush and receive until a frame comes (at most ~2 s): its length. */
static ssize_t recv_wait(const uint8_t **d)
{
    for (int k = 0; k < 200; k++) {
        ck_assert_int_ge(net_uring_flush(U, NULL), 0);
        ssize_t n = net_uring_recv(U, d);
        if (n != -EAGAIN)
            return n;
        ev_wait(10);
    }
    return -EAGAIN;
}

START_TEST(frames_in_order_both_ways)
{
    if (!up(8, 16, 70000))
        return;
    static uint8_t f[65536 + 12], g[70000];
    /* in: 40 frames of growing sizes, sent before and while reads are posted */
    size_t sizes[40];
    for (unsigned i = 0; i < 40; i++) {
        sizes[i] = 60 + (size_t)i * 1637;
        if (i == 20)
            ck_assert_int_ge(net_uring_flush(U, NULL), 0);
        fill(f, sizes[i], i);
        ck_assert_int_eq(send(sv[1], f, sizes[i], 0), (ssize_t)sizes[i]);
        if (i % 8 == 7) {       /* the socket's queue is bounded: take some in */
            for (unsigned j = i - 7; j <= i; j++) {
                const uint8_t *d;
                ssize_t n = recv_wait(&d);
                ck_assert_int_eq(n, (ssize_t)sizes[j]);
                fill(g, sizes[j], j);
                ck_assert(memcmp(d, g, sizes[j]) == 0);
                net_uring_recv_done(U);
            }
        }
    }
    const uint8_t *d;
    ck_assert_int_eq(net_uring_recv(U, &d), -EAGAIN);
    /* out: header + frame as two pieces, batches of 10 submitted by one flush */
    for (unsigned b = 0; b < 3; b++) {
        for (unsigned i = 0; i < 10; i++) {
            fill(f, 12 + 100 + i, b * 10 + i);
            struct iovec iov[2] = { { f, 12 }, { f + 12, 100 + i } };
            ck_assert_int_eq(net_uring_send(U, iov, 2), 0);
        }
        ck_assert_int_eq(recv(sv[1], g, sizeof g, MSG_DONTWAIT), -1);   /* queued, not submitted yet */
        unsigned refused = 99;
        ck_assert_int_ge(net_uring_flush(U, &refused), 0);
        for (unsigned i = 0; i < 10; i++) {
            struct pollfd p = { .fd = sv[1], .events = POLLIN };
            ck_assert_int_eq(poll(&p, 1, 2000), 1);
            ck_assert_int_eq(recv(sv[1], g, sizeof g, 0), 12 + 100 + (ssize_t)i);
            fill(f, 12 + 100 + i, b * 10 + i);
            ck_assert(memcmp(f, g, 112 + i) == 0);
        }
        ck_assert_uint_eq(refused, 0);
    }
    /* larger than a slot: refused before anything is queued */
    struct iovec big = { g, 70001 };
    ck_assert_int_eq(net_uring_send(U, &big, 1), -EMSGSIZE);
    down();
}
END_TEST

/* The peer does not read: writes wait in the kernel, send says -EAGAIN once
 * every slot is in flight, and room comes back through the eventfd. */
START_TEST(backpressure_and_room)
{
    if (!up(2, 4, 4096))
        return;
    int small = 4096;
    ck_assert_int_eq(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
    static uint8_t f[3000], g[4096];
    unsigned sent = 0;
    int r = 0;
    for (; sent < 200; sent++) {
        fill(f, sizeof f, sent);
        struct iovec iov = { f, sizeof f };
        r = net_uring_send(U, &iov, 1);
        if (r == -EAGAIN)
            break;
        ck_assert_int_eq(r, 0);
    }
    ck_assert_int_eq(r, -EAGAIN);
    ck_assert_uint_lt(sent, 200);
    ck_assert_int_ge(net_uring_flush(U, NULL), 0);
    ck_assert(!ev_wait(100));   /* nothing completes while the peer reads nothing */
    /* the peer reads: every frame arrives once, in order; the writes complete */
    for (unsigned i = 0; i < sent; i++) {
        struct pollfd p = { .fd = sv[1], .events = POLLIN };
        ck_assert_int_eq(poll(&p, 1, 2000), 1);
        ck_assert_int_eq(recv(sv[1], g, sizeof g, 0), (ssize_t)sizeof f);
        fill(f, sizeof f, i);
        ck_assert(memcmp(f, g, sizeof f) == 0);
    }
    ck_assert(ev_wait(2000));
    ck_assert_int_gt(net_uring_flush(U, NULL), 0);
    struct iovec iov = { f, sizeof f };
    ck_assert_int_eq(net_uring_send(U, &iov, 1), 0);
    down();
}
END_TEST

/* A frame the file refuses (a datagram larger than the socket's send
 * buffer: -EMSGSIZE, as a TAP refuses a bad frame) is counted, and the
 * engine goes on. */
START_TEST(refused_frame_counted)
{
    if (!up(2, 4, 65536))
        return;
    int small = 4096;
    ck_assert_int_eq(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
    static uint8_t f[60000], g[65536];
    struct iovec iov = { f, sizeof f };
    ck_assert_int_eq(net_uring_send(U, &iov, 1), 0);
    unsigned refused = 0;
    for (int k = 0; k < 100 && refused == 0; k++) {
        ck_assert_int_ge(net_uring_flush(U, &refused), 0);
        if (!refused)
            ev_wait(20);
    }
    ck_assert_uint_eq(refused, 1);
    iov.iov_len = 100;
    ck_assert_int_eq(net_uring_send(U, &iov, 1), 0);
    ck_assert_int_ge(net_uring_flush(U, &refused), 0);
    struct pollfd p = { .fd = sv[1], .events = POLLIN };
    ck_assert_int_eq(poll(&p, 1, 2000), 1);
    ck_assert_int_eq(recv(sv[1], g, sizeof g, 0), 100);
    down();
}
END_TEST

/* The peer goes away: frames read before are still handed out, then
 * -EPIPE, from recv, flush and send alike. */
START_TEST(end_of_file)
{
    if (!up(4, 4, 2048))
        return;
    uint8_t f[100];
    fill(f, sizeof f, 3);
    ck_assert_int_ge(net_uring_flush(U, NULL), 0);
    ck_assert_int_eq(send(sv[1], f, sizeof f, 0), 100);
    close(sv[1]);
    sv[1] = -1;
    const uint8_t *d;
    ssize_t n = -EAGAIN;
    for (int k = 0; k < 200 && n == -EAGAIN; k++) {
        net_uring_flush(U, NULL);           /* may say -EPIPE already */
        n = net_uring_recv(U, &d);          /* the frame read before comes first */
        if (n == -EAGAIN)
            ev_wait(10);
    }
    ck_assert_int_eq(n, 100);
    ck_assert(memcmp(d, f, 100) == 0);
    net_uring_recv_done(U);
    int r = 0;
    for (int k = 0; k < 100 && r >= 0; k++) {
        r = net_uring_flush(U, NULL);
        if (r >= 0)
            ev_wait(20);
    }
    ck_assert_int_eq(r, -EPIPE);
    ck_assert_int_eq(net_uring_recv(U, &d), -EPIPE);
    struct iovec iov = { f, sizeof f };
    ck_assert_int_eq(net_uring_send(U, &iov, 1), -EPIPE);
    down();
}
END_TEST

/* quiesce cancels the posted reads (a frame sent afterwards stays in the
 * socket) and keeps the frames already read; the next flush reads again. */
START_TEST(quiesce_keeps_frames_read)
{
    if (!up(4, 4, 2048))
        return;
    uint8_t f[200];
    ck_assert_int_ge(net_uring_flush(U, NULL), 0);
    for (unsigned i = 0; i < 2; i++) {
        fill(f, sizeof f, i);
        ck_assert_int_eq(send(sv[1], f, sizeof f, 0), 200);
    }
    int queued = 1;
    for (int k = 0; k < 200 && queued; k++) {      /* both taken by posted reads */
        usleep(10000);
        ck_assert_int_eq(ioctl(sv[0], FIONREAD, &queued), 0);
    }
    ck_assert_int_eq(queued, 0);
    net_uring_quiesce(U);
    fill(f, sizeof f, 2);
    ck_assert_int_eq(send(sv[1], f, sizeof f, 0), 200);
    usleep(50000);
    ck_assert_int_eq(ioctl(sv[0], FIONREAD, &queued), 0);
    ck_assert_int_eq(queued, 200);                      /* no read took it */
    const uint8_t *d;
    uint8_t g[200];
    for (unsigned i = 0; i < 3; i++) {
        ssize_t n = i < 2 ? net_uring_recv(U, &d) : recv_wait(&d);
        ck_assert_int_eq(n, 200);
        fill(g, sizeof g, i);
        ck_assert(memcmp(d, g, 200) == 0);
        net_uring_recv_done(U);
    }
    down();
}
END_TEST

/* issue 13: the ring takes READ, WRITE and ASYNC_CANCEL on its fixed file
 * and nothing else; no register operation but UNREGISTER_FILES. */
START_TEST(restrictions_refuse_other_opcodes)
{
    if (!up(2, 2, 2048))
        return;
    /* an allowed opcode passes the restrictions (nothing to cancel) */
    ck_assert_int_eq(net_uring_try_op(U, IORING_OP_ASYNC_CANCEL, IOSQE_FIXED_FILE), -ENOENT);
    /* forbidden opcodes */
    static const uint8_t forbidden[] = { IORING_OP_NOP, IORING_OP_READV, IORING_OP_WRITEV, IORING_OP_OPENAT,
                                         IORING_OP_CLOSE, IORING_OP_SENDMSG, IORING_OP_CONNECT,
                                         IORING_OP_POLL_ADD, IORING_OP_FSYNC, IORING_OP_STATX };
    for (size_t i = 0; i < sizeof forbidden; i++)
        ck_assert_msg(net_uring_try_op(U, forbidden[i], IOSQE_FIXED_FILE) == -EACCES, "opcode %u not refused",
                      forbidden[i]);
    /* an allowed opcode without the fixed file */
    ck_assert_int_eq(net_uring_try_op(U, IORING_OP_READ, 0), -EACCES);
    ck_assert_int_eq(net_uring_try_op(U, IORING_OP_WRITE, 0), -EACCES);
    /* an SQE flag not allowed */
    ck_assert_int_eq(net_uring_try_op(U, IORING_OP_READ, IOSQE_FIXED_FILE | IOSQE_IO_DRAIN), -EACCES);
    /* nothing more can be registered */
    ck_assert_int_eq(net_uring_try_register(U, sv[1]), -EACCES);
    /* and the engine still works */
    uint8_t f[64] = { 1, 2, 3 };
    ck_assert_int_eq(send(sv[1], f, sizeof f, 0), 64);
    const uint8_t *d;
    ck_assert_int_eq(recv_wait(&d), 64);
    net_uring_recv_done(U);
    down();
}
END_TEST

START_TEST(bad_configuration)
{
    struct net_uring *u = NULL;
    char why[200];
    struct net_uring_cfg c = { .fd = -1, .rx_slots = 1, .tx_slots = 1, .slot_size = 100 };
    ck_assert_int_eq(net_uring_create(&c, &u, why, sizeof why), -EINVAL);
    c.fd = 0;
    c.rx_slots = 0;
    ck_assert_int_eq(net_uring_create(&c, &u, why, sizeof why), -EINVAL);
    c.rx_slots = NET_URING_MAX_SLOTS + 1;
    ck_assert_int_eq(net_uring_create(&c, &u, why, sizeof why), -EINVAL);
    c.rx_slots = 1;
    c.slot_size = (1u << 20) + 1;
    ck_assert_int_eq(net_uring_create(&c, &u, why, sizeof why), -EINVAL);
    ck_assert_ptr_null(u);
    net_uring_destroy(NULL);
}
END_TEST
#else
START_TEST(built_without_liburing)
{
    printf("SKIPPED: test_net_uring: moat was built without liburing (the TAP backend uses readv/writev)\n");
}
END_TEST
#endif

static Suite *suite(void)
{
    Suite *s = suite_create("net_uring");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
#ifdef MOAT_HAVE_URING
    tcase_add_test(tc, frames_in_order_both_ways);
    tcase_add_test(tc, backpressure_and_room);
    tcase_add_test(tc, refused_frame_counted);
    tcase_add_test(tc, end_of_file);
    tcase_add_test(tc, quiesce_keeps_frames_read);
    tcase_add_test(tc, restrictions_refuse_other_opcodes);
    tcase_add_test(tc, bad_configuration);
#else
    tcase_add_test(tc, built_without_liburing);
#endif
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
