/* vmm/agent/agent_client.c against a fake agent on a socketpair: a request's
 * timeout is one deadline for the whole request, however the agent
 * trickles bytes or streams frames for other requests. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "vmm/agent/agent_proto.h"
#include "vmm/agent/agent_client.h"

struct fake {
    int fd;
    int mode;           /* 0: frames with other ids; 1: one byte at a time */
    int run_ms;
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *fake_agent(void *arg)
{
    struct fake *f = arg;
    struct agent_buf b = { 0 };
    uint8_t ver[4] = { 1, 0, 0, 0 };
    agent_put_frame(&b, AGENT_T_READY, 0, ver, 4);
    if (write(f->fd, b.p, b.len) != (ssize_t)b.len)
        return NULL;
    b.len = 0;
    /* A pong for a request id the client never sent, forever. */
    agent_put_frame(&b, AGENT_T_PONG, 999, "moat", 4);
    int64_t end = now_ms() + f->run_ms;
    while (now_ms() < end) {
        if (f->mode == 0) {
            if (write(f->fd, b.p, b.len) < 0)
                break;
        } else {
            static size_t off;
            if (write(f->fd, b.p + off % b.len, 1) < 0)
                break;
            off++;
        }
        usleep(20 * 1000);
    }
    agent_buf_free(&b);
    return NULL;
}

static void run_case(int mode)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    struct fake f = { .fd = sv[1], .mode = mode, .run_ms = 3000 };
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, fake_agent, &f), 0);
    struct agent_client c;
    ck_assert_int_eq(agent_client_attach(&c, sv[0], 0, 0, 1000), 0);
    char err[64];
    int64_t t0 = now_ms();
    int r = agent_client_request(&c, AGENT_T_ADD_ENTROPY, "x", 1, 300, err, sizeof err);
    int64_t dt = now_ms() - t0;
    ck_assert_int_eq(r, -ETIMEDOUT);
    ck_assert_msg(dt >= 250 && dt < 1500, "request took %lld ms for a 300 ms timeout", (long long)dt);
    agent_client_close(&c);
    close(sv[1]);       /* the fake's writes fail: it ends */
    pthread_join(t, NULL);
}

START_TEST(other_ids_do_not_extend_the_deadline) { run_case(0); }
END_TEST

START_TEST(trickled_bytes_do_not_extend_the_deadline) { run_case(1); }
END_TEST

int main(void)
{
    Suite *s = suite_create("agent_client");
    TCase *tc = tcase_create("deadline");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, other_ids_do_not_extend_the_deadline);
    tcase_add_test(tc, trickled_bytes_do_not_extend_the_deadline);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
