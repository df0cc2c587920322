/* The control-socket server of moat run/restore --control
 * (vmm/api/control/ctl_server.c, compiled in here): how it reads a
 * client's request line. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "vmm/api/control/ctl_server.c"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct drip { int fd; const char *text; useconds_t gap; };

static void *drip_thread(void *arg)
{
    struct drip *d = arg;
    for (const char *p = d->text; *p; p++) {
        if (send(d->fd, p, 1, MSG_NOSIGNAL) != 1)
            break;      /* the server hung up */
        usleep(d->gap);
    }
    return NULL;
}

static int open_server(struct ctl_server *s, char *dir, size_t dlen)
{
    snprintf(dir, dlen, "/tmp/moat-ctl-XXXXXX");
    if (!mkdtemp(dir))
        return -errno;
    char path[128];
    snprintf(path, sizeof path, "%s/ctl.sock", dir);
    return ctl_server_open(s, path, NULL);
}

static int connect_to(const struct ctl_server *s)
{
    struct sockaddr_un sa;
    ck_assert_int_eq(fill_addr(&sa, s->path), 0);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

/* A well-behaved client is answered. */
START_TEST(serves_a_request)
{
    struct ctl_server s = { .fd = -1 };
    char dir[64];
    ck_assert_int_eq(open_server(&s, dir, sizeof dir), 0);
    int fd = connect_to(&s);
    ck_assert_int_eq(send(fd, "status\n", 7, MSG_NOSIGNAL), 7);
    ck_assert_int_eq(ctl_server_serve(&s, NULL), 0);
    char reply[256] = "";
    ssize_t n = recv(fd, reply, sizeof reply - 1, 0);
    ck_assert_int_gt(n, 0);
    ck_assert_int_eq(strncmp(reply, "ok running pid=", 15), 0);
    close(fd);
    ctl_server_close(&s);
    rmdir(dir);
}
END_TEST

/* A client trickling its line a byte at a time (each byte within the
 * per-read timeout) must not hold the VMM's loop past the 2 s it gets in
 * all: it is cut off and told its (partial) request is bad. */
START_TEST(slow_client_is_cut_off)
{
    struct ctl_server s = { .fd = -1 };
    char dir[64];
    ck_assert_int_eq(open_server(&s, dir, sizeof dir), 0);
    int fd = connect_to(&s);
    struct drip d = { fd, "status\n", 700 * 1000 };   /* ~4.9 s in all */
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, drip_thread, &d), 0);
    double t0 = now_s();
    ck_assert_int_eq(ctl_server_serve(&s, NULL), 0);
    double took = now_s() - t0;
    ck_assert_msg(took < 3.0, "a trickling client held the server %.1f s", took);
    ck_assert_msg(took > 1.5, "the client was cut off after only %.1f s", took);
    char reply[256] = "";
    ssize_t n = recv(fd, reply, sizeof reply - 1, 0);
    ck_assert_int_gt(n, 0);
    ck_assert_int_eq(strncmp(reply, "error bad request", 17), 0);
    shutdown(fd, SHUT_RDWR);
    pthread_join(t, NULL);
    close(fd);
    ctl_server_close(&s);
    rmdir(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ctl_server");
    TCase *tc = tcase_create("server");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, serves_a_request);
    tcase_add_test(tc, slow_client_is_cut_off);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
