/* devices/virtio/evloop.c: stop from another thread (and before the run),
 * readiness dispatch, silent interest, removal of a ready fd by another
 * callback of the same batch, timers (order, cancel, re-arm), the error
 * paths, and reading blocking and non-blocking eventfds without waiting. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "devices/virtio/evloop.h"
#include "vmm/base/clock.h"

static struct evloop *L;

static void setup(void) { ck_assert_int_eq(evloop_create(&L), 0); }
static void teardown(void) { evloop_destroy(L); }

static void poke(int fd)
{
    uint64_t one = 1;
    ck_assert_int_eq(write(fd, &one, sizeof one), (ssize_t)sizeof one);
}

/* ---- a callback that records what it saw */

struct rec {
    int calls;
    int fd;
    uint32_t events;
    bool drain;             /* read the eventfd (else it stays ready) */
    /* optionally, on the first call: remove (and close) another fd */
    int victim;
    bool victim_close;
};

static void on_fd(void *opaque, int fd, uint32_t events)
{
    struct rec *r = opaque;
    r->calls++;
    r->fd = fd;
    r->events = events;
    if (r->drain) {
        uint64_t v;
        ck_assert_int_eq(read(fd, &v, sizeof v), (ssize_t)sizeof v);
    }
    if (r->calls == 1 && r->victim >= 0) {
        ck_assert_int_eq(evloop_del(L, r->victim), 0);
        if (r->victim_close)
            close(r->victim);
        r->victim = -1;
    }
}

static void *stopper(void *arg)
{
    usleep(100 * 1000);
    evloop_stop(arg);
    return NULL;
}

START_TEST(stop_from_another_thread)
{
    pthread_t t;
    uint64_t t0 = clock_mono_ns();
    ck_assert_int_eq(pthread_create(&t, NULL, stopper, L), 0);
    ck_assert_int_eq(evloop_run(L), 0);        /* returns only when stopped */
    uint64_t took = clock_mono_ns() - t0;
    pthread_join(t, NULL);
    ck_assert_uint_ge(took, 90ull * 1000000);
    ck_assert_uint_lt(took, 5000ull * 1000000);
    /* the request was consumed: the next pass waits (and times out) */
    ck_assert_int_eq(evloop_run_once(L, 20), 0);
}
END_TEST

START_TEST(stop_before_the_run_is_not_lost)
{
    evloop_stop(L);
    evloop_stop(L);                             /* two requests: one stop */
    ck_assert_int_eq(evloop_run_once(L, 5000), 1);
    ck_assert_int_eq(evloop_run_once(L, 10), 0);
    /* a request nobody consumed can be dropped */
    evloop_stop(L);
    evloop_clear_stop(L);
    ck_assert_int_eq(evloop_run_once(L, 10), 0);
}
END_TEST

START_TEST(stop_wins_over_ready_fds)
{
    int e = eventfd(0, EFD_NONBLOCK);
    struct rec r = { .victim = -1, .drain = true };
    ck_assert_int_eq(evloop_add(L, e, EVLOOP_IN, on_fd, &r), 0);
    poke(e);
    evloop_stop(L);
    ck_assert_int_eq(evloop_run_once(L, 1000), 1);
    ck_assert_int_eq(r.calls, 0);               /* level-triggered: still there */
    ck_assert_int_eq(evloop_run_once(L, 1000), 0);
    ck_assert_int_eq(r.calls, 1);
    close(e);
}
END_TEST

START_TEST(readiness_dispatch)
{
    int a = eventfd(0, EFD_NONBLOCK), b = eventfd(0, EFD_NONBLOCK);
    struct rec ra = { .victim = -1, .drain = true }, rb = { .victim = -1, .drain = true };
    ck_assert_int_eq(evloop_add(L, a, EVLOOP_IN, on_fd, &ra), 0);
    ck_assert_int_eq(evloop_add(L, b, EVLOOP_IN, on_fd, &rb), 0);
    ck_assert_int_eq(evloop_events(L, a), EVLOOP_IN);
    /* nothing ready: the wait times out, no callback */
    uint64_t t0 = clock_mono_ns();
    ck_assert_int_eq(evloop_run_once(L, 30), 0);
    ck_assert_uint_ge(clock_mono_ns() - t0, 25ull * 1000000);
    ck_assert_int_eq(ra.calls + rb.calls, 0);
    poke(b);
    ck_assert_int_eq(evloop_run_once(L, 1000), 0);
    ck_assert_int_eq(ra.calls, 0);
    ck_assert_int_eq(rb.calls, 1);
    ck_assert_int_eq(rb.fd, b);
    ck_assert_uint_eq(rb.events, EVLOOP_IN);
    poke(a);
    poke(b);
    ck_assert_int_eq(evloop_run_once(L, 1000), 0);
    ck_assert_int_eq(ra.calls, 1);
    ck_assert_int_eq(rb.calls, 2);
    /* level-triggered: an fd left ready is reported again */
    ra.drain = false;
    poke(a);
    ck_assert_int_eq(evloop_run_once(L, 1000), 0);
    ck_assert_int_eq(evloop_run_once(L, 1000), 0);
    ck_assert_int_eq(ra.calls, 3);
    close(a);
    close(b);
}
END_TEST

/* Interest 0 silences the fd completely, hangups included (epoll would
 * report EPOLLHUP for any watched fd); interest back: reported again. */
START_TEST(silent_interest_and_out)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    struct rec r = { .victim = -1 };
    ck_assert_int_eq(evloop_add(L, sv[0], EVLOOP_OUT, on_fd, &r), 0);
    ck_assert_int_eq(evloop_run_once(L, 1000), 0);
    ck_assert_int_eq(r.calls, 1);
    ck_assert_uint_eq(r.events, EVLOOP_OUT);
    ck_assert_int_eq(evloop_mod(L, sv[0], 0), 0);
    ck_assert_int_eq(evloop_events(L, sv[0]), 0);
    close(sv[1]);                               /* the peer hangs up */
    ck_assert_int_eq(evloop_run_once(L, 30), 0);
    ck_assert_int_eq(r.calls, 1);
    ck_assert_int_eq(evloop_mod(L, sv[0], EVLOOP_IN), 0);
    ck_assert_int_eq(evloop_run_once(L, 1000), 0);
    ck_assert_int_eq(r.calls, 2);
    ck_assert(r.events & EVLOOP_HUP);
    ck_assert(r.events & EVLOOP_IN);
    /* the same interest again: no change */
    ck_assert_int_eq(evloop_mod(L, sv[0], EVLOOP_IN), 0);
    /* registered silent from the start */
    int e = eventfd(1, EFD_NONBLOCK);
    struct rec re = { .victim = -1, .drain = true };
    ck_assert_int_eq(evloop_add(L, e, 0, on_fd, &re), 0);
    ck_assert_int_eq(evloop_del(L, sv[0]), 0);
    ck_assert_int_eq(evloop_run_once(L, 30), 0);
    ck_assert_int_eq(re.calls, 0);
    ck_assert_int_eq(evloop_mod(L, e, EVLOOP_IN), 0);
    ck_assert_int_eq(evloop_run_once(L, 1000), 0);
    ck_assert_int_eq(re.calls, 1);
    close(sv[0]);
    close(e);
}
END_TEST

/* Two fds ready in one batch; whichever callback runs first removes (and
 * closes) the other: the other's callback never runs. (Under the
 * sanitizer build a stale dispatch would also touch freed memory if
 * registrations were freed; here they are checked by generation.) */
START_TEST(removal_during_dispatch)
{
    int a = eventfd(0, EFD_NONBLOCK), b = eventfd(0, EFD_NONBLOCK);
    struct rec ra = { .victim = b, .victim_close = true, .drain = true };
    struct rec rb = { .victim = a, .victim_close = true, .drain = true };
    ck_assert_int_eq(evloop_add(L, a, EVLOOP_IN, on_fd, &ra), 0);
    ck_assert_int_eq(evloop_add(L, b, EVLOOP_IN, on_fd, &rb), 0);
    poke(a);
    poke(b);
    ck_assert_int_eq(evloop_run_once(L, 1000), 0);
    ck_assert_int_eq(ra.calls + rb.calls, 1);
    int survivor = ra.calls ? a : b, gone = ra.calls ? b : a;
    ck_assert_int_eq(evloop_del(L, gone), -ENOENT);
    /* the survivor still works */
    poke(survivor);
    ck_assert_int_eq(evloop_run_once(L, 1000), 0);
    ck_assert_int_eq(ra.calls + rb.calls, 2);
    ck_assert_int_eq(evloop_del(L, survivor), 0);
    close(survivor);
}
END_TEST

/* A callback that removes the fd of the next ready event and registers a
 * new fd under the same number, ready too: the stale event must not reach
 * the new registration's callback in this batch as the old one's. */
struct swap {
    int calls;
    int target;             /* fd number to replace */
    struct rec *fresh;
};

static void on_swap(void *opaque, int fd, uint32_t events)
{
    (void)events;
    struct swap *s = opaque;
    uint64_t v;
    ck_assert_int_eq(read(fd, &v, sizeof v), (ssize_t)sizeof v);
    if (s->calls++ || s->target < 0)
        return;
    ck_assert_int_eq(evloop_del(L, s->target), 0);
    close(s->target);
    int n = eventfd(1, EFD_NONBLOCK);
    ck_assert_int_eq(n, s->target);
    ck_assert_int_eq(evloop_add(L, n, EVLOOP_IN, on_fd, s->fresh), 0);
    s->target = -1;
}

START_TEST(replaced_during_dispatch)
{
    int a = eventfd(0, EFD_NONBLOCK), b = eventfd(0, EFD_NONBLOCK);
    struct rec fresh = { .victim = -1, .drain = true };
    struct swap sa = { .target = b, .fresh = &fresh }, sb = { .target = a, .fresh = &fresh };
    ck_assert_int_eq(evloop_add(L, a, EVLOOP_IN, on_swap, &sa), 0);
    ck_assert_int_eq(evloop_add(L, b, EVLOOP_IN, on_swap, &sb), 0);
    poke(a);
    poke(b);
    ck_assert_int_eq(evloop_run_once(L, 1000), 0);
    /* one swap callback ran; the other's event was stale: dropped, and
     * not handed to the fresh registration either (its generation) */
    ck_assert_int_eq(sa.calls + sb.calls, 1);
    ck_assert_int_eq(fresh.calls, 0);
    ck_assert_int_eq(evloop_run_once(L, 1000), 0);
    ck_assert_int_eq(fresh.calls, 1);           /* the fresh one, next pass */
    ck_assert_int_eq(sa.calls + sb.calls, 1);
    int fresh_fd = fresh.fd, old = sa.calls ? a : b;
    ck_assert_int_eq(evloop_del(L, fresh_fd), 0);
    ck_assert_int_eq(evloop_del(L, old), 0);
    close(fresh_fd);
    close(old);
}
END_TEST

/* ---- timers */

struct tick {
    int calls;
    int order;
    int *seq;
    struct evloop_timer *cancel;    /* cancel this one on the first call */
    uint64_t rearm_ns;              /* re-arm itself this far ahead (0: no) */
    struct evloop_timer *self;
};

static void on_tick(void *opaque)
{
    struct tick *t = opaque;
    t->calls++;
    t->order = ++*t->seq;
    if (t->cancel) {
        evloop_timer_cancel(L, t->cancel);
        t->cancel = NULL;
    }
    if (t->rearm_ns && t->calls < 3)
        evloop_timer_arm(L, t->self, clock_mono_ns() + t->rearm_ns);
}

START_TEST(timers_fire_in_order)
{
    int seq = 0;
    struct tick k1 = { .seq = &seq }, k2 = { .seq = &seq }, k3 = { .seq = &seq };
    struct evloop_timer t1, t2, t3;
    evloop_timer_init(&t1, on_tick, &k1);
    evloop_timer_init(&t2, on_tick, &k2);
    evloop_timer_init(&t3, on_tick, &k3);
    ck_assert(!evloop_timer_armed(&t1));
    uint64_t t0 = clock_mono_ns();
    evloop_timer_arm(L, &t2, t0 + 60ull * 1000000);
    evloop_timer_arm(L, &t1, t0 + 30ull * 1000000);
    evloop_timer_arm(L, &t3, t0 + 90ull * 1000000);
    ck_assert(evloop_timer_armed(&t1));
    /* the loop's wait ends at the first deadline even with no limit */
    while (!k1.calls)
        ck_assert_int_eq(evloop_run_once(L, -1), 0);
    ck_assert_uint_ge(clock_mono_ns() - t0, 30ull * 1000000);
    ck_assert(!evloop_timer_armed(&t1));
    ck_assert_int_eq(k2.calls + k3.calls, 0);
    while (!k3.calls)
        ck_assert_int_eq(evloop_run_once(L, -1), 0);
    ck_assert_uint_ge(clock_mono_ns() - t0, 90ull * 1000000);
    ck_assert_int_eq(k1.order, 1);
    ck_assert_int_eq(k2.order, 2);
    ck_assert_int_eq(k3.order, 3);
    ck_assert_int_eq(k1.calls + k2.calls + k3.calls, 3);   /* once each */
    ck_assert_int_eq(evloop_run_once(L, 20), 0);
    ck_assert_int_eq(k1.calls + k2.calls + k3.calls, 3);
}
END_TEST

START_TEST(timer_cancel_and_rearm)
{
    int seq = 0;
    struct evloop_timer ta, tb, tc;
    struct tick ka = { .seq = &seq }, kb = { .seq = &seq }, kc = { .seq = &seq };
    evloop_timer_init(&ta, on_tick, &ka);
    evloop_timer_init(&tb, on_tick, &kb);
    evloop_timer_init(&tc, on_tick, &kc);
    /* cancelled before it falls due: never fires */
    uint64_t now = clock_mono_ns();
    evloop_timer_arm(L, &ta, now + 10ull * 1000000);
    evloop_timer_cancel(L, &ta);
    evloop_timer_cancel(L, &ta);                /* idempotent */
    ck_assert_int_eq(evloop_run_once(L, 40), 0);
    ck_assert_int_eq(ka.calls, 0);
    /* both due in the same pass; the first cancels the second */
    now = clock_mono_ns();
    ka.cancel = &tb;
    evloop_timer_arm(L, &ta, now - 2);
    evloop_timer_arm(L, &tb, now - 1);
    ck_assert_int_eq(evloop_run_once(L, 1000), 0);
    ck_assert_int_eq(ka.calls, 1);
    ck_assert_int_eq(kb.calls, 0);
    ck_assert(!evloop_timer_armed(&tb));
    /* re-arming moves the deadline */
    evloop_timer_arm(L, &tc, clock_mono_ns() + 5000ull * 1000000);
    evloop_timer_arm(L, &tc, clock_mono_ns() + 20ull * 1000000);
    uint64_t t0 = clock_mono_ns();
    while (!kc.calls)
        ck_assert_int_eq(evloop_run_once(L, 2000), 0);
    ck_assert_uint_lt(clock_mono_ns() - t0, 1000ull * 1000000);
    /* a periodic timer: re-armed from its own callback, fires once a pass */
    kc = (struct tick){ .seq = &seq, .rearm_ns = 1, .self = &tc };
    evloop_timer_arm(L, &tc, clock_mono_ns());
    ck_assert_int_eq(evloop_run_once(L, 1000), 0);
    ck_assert_int_eq(kc.calls, 1);
    ck_assert(evloop_timer_armed(&tc));
    while (kc.calls < 3)
        ck_assert_int_eq(evloop_run_once(L, 1000), 0);
    ck_assert(!evloop_timer_armed(&tc));
}
END_TEST

/* ---- errors */

START_TEST(error_paths)
{
    struct rec r = { .victim = -1 };
    int e = eventfd(0, EFD_NONBLOCK);
    ck_assert_int_eq(evloop_add(L, -1, EVLOOP_IN, on_fd, &r), -EBADF);
    ck_assert_int_eq(evloop_add(L, e, EVLOOP_IN, NULL, &r), -EINVAL);
    ck_assert_int_eq(evloop_add(L, e, 0x8000, on_fd, &r), -EINVAL);
    ck_assert_int_eq(evloop_add(L, e, EVLOOP_HUP, on_fd, &r), -EINVAL);
    ck_assert_int_eq(evloop_mod(L, e, EVLOOP_IN), -ENOENT);
    ck_assert_int_eq(evloop_del(L, e), -ENOENT);
    ck_assert_int_eq(evloop_events(L, e), -ENOENT);
    ck_assert_int_eq(evloop_add(L, e, EVLOOP_IN, on_fd, &r), 0);
    ck_assert_int_eq(evloop_add(L, e, EVLOOP_OUT, on_fd, &r), -EEXIST);
    ck_assert_int_eq(evloop_mod(L, e, EVLOOP_ERR), -EINVAL);
    ck_assert_int_eq(evloop_events(L, e), EVLOOP_IN);
    ck_assert_int_eq(evloop_del(L, e), 0);
    ck_assert_int_eq(evloop_del(L, e), -ENOENT);
    /* a closed fd, silent or not, and a regular file: refused */
    int dead = dup(e);
    close(dead);
    ck_assert_int_eq(evloop_add(L, dead, EVLOOP_IN, on_fd, &r), -EBADF);
    ck_assert_int_eq(evloop_add(L, dead, 0, on_fd, &r), -EBADF);
    char path[] = "/tmp/moat-evloop-XXXXXX";
    int f = mkstemp(path);
    ck_assert_int_ge(f, 0);
    unlink(path);
    ck_assert_int_eq(evloop_add(L, f, EVLOOP_IN, on_fd, &r), -EPERM);
    ck_assert_int_eq(evloop_del(L, f), -ENOENT);
    close(f);
    /* a high fd number grows the table */
    int hi = fcntl(e, F_DUPFD, 900);
    ck_assert_int_ge(hi, 900);
    ck_assert_int_eq(evloop_add(L, hi, EVLOOP_IN, on_fd, &r), 0);
    poke(e);
    ck_assert_int_eq(evloop_run_once(L, 1000), 0);
    ck_assert_int_eq(r.calls, 1);
    ck_assert_int_eq(r.fd, hi);
    ck_assert_int_eq(evloop_del(L, hi), 0);
    close(hi);
    close(e);
    evloop_destroy(NULL);
}
END_TEST

/* ---- evloop_eventfd_take */

START_TEST(eventfd_take_never_blocks)
{
    for (int nb = 0; nb < 2; nb++) {
        int e = eventfd(0, EFD_CLOEXEC | (nb ? EFD_NONBLOCK : 0));
        uint64_t v = 99;
        ck_assert_int_eq(evloop_eventfd_take(e, &v), 0);    /* blocking fd: no wait */
        uint64_t five = 5;
        ck_assert_int_eq(write(e, &five, 8), 8);
        ck_assert_int_eq(write(e, &five, 8), 8);
        ck_assert_int_eq(evloop_eventfd_take(e, &v), 1);
        ck_assert_uint_eq(v, 10);
        ck_assert_int_eq(evloop_eventfd_take(e, &v), 0);
        close(e);
        ck_assert_int_eq(evloop_eventfd_take(e, &v), -EBADF);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("evloop");
    TCase *tc = tcase_create("loop");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, stop_from_another_thread);
    tcase_add_test(tc, stop_before_the_run_is_not_lost);
    tcase_add_test(tc, stop_wins_over_ready_fds);
    tcase_add_test(tc, readiness_dispatch);
    tcase_add_test(tc, silent_interest_and_out);
    tcase_add_test(tc, removal_during_dispatch);
    tcase_add_test(tc, replaced_during_dispatch);
    tcase_add_test(tc, timers_fire_in_order);
    tcase_add_test(tc, timer_cancel_and_rearm);
    tcase_add_test(tc, error_paths);
    tcase_add_test(tc, eventfd_take_never_blocks);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
