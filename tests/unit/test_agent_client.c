/* vmm/agent/agent_client.c against a fake agent on a socketpair: a request's
 * timeout is one deadline for the whole request, however the agent
 * trickles bytes or streams frames for other requests; the file system
 * requests refuse every reply that is not the answer they asked for. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
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

/* c attached to a fake agent (mode) on a socketpair; sv[1] is the fake's end. */
static void fake_open(int mode, struct fake *f, pthread_t *t, int sv[2], struct agent_client *c)
{
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    *f = (struct fake){ .fd = sv[1], .mode = mode, .run_ms = 3000 };
    ck_assert_int_eq(pthread_create(t, NULL, fake_agent, f), 0);
    ck_assert_int_eq(agent_client_attach(c, sv[0], 0, 0, 1000), 0);
}

static void run_case(int mode)
{
    int sv[2];
    struct fake f;
    pthread_t t;
    struct agent_client c;
    fake_open(mode, &f, &t, sv, &c);
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

/* The file system calls: one deadline of c->timeout_ms for the whole call
 * (a silent or streaming guest must not hold the caller forever). */
static int no_entry(void *arg, const struct agent_stat *e)
{
    (void)e;
    ++*(int *)arg;
    return 0;
}

static void fs_case(int mode, int op)
{
    int sv[2];
    struct fake f;
    pthread_t t;
    struct agent_client c;
    fake_open(mode, &f, &t, sv, &c);
    c.timeout_ms = 300;
    char err[64];
    static struct agent_stat st;
    int n = 0, r;
    int64_t t0 = now_ms();
    switch (op) {
    case 0: r = agent_client_stat(&c, "/a", 1, &st, err, sizeof err); break;
    case 1: r = agent_client_list(&c, "/a", 1, no_entry, &n, err, sizeof err); break;
    case 2: r = agent_client_rename(&c, "/a", "/b", err, sizeof err); break;
    default: r = agent_client_remove(&c, "/a", 1, err, sizeof err); break;
    }
    int64_t dt = now_ms() - t0;
    ck_assert_int_eq(r, -ETIMEDOUT);
    ck_assert_int_eq(n, 0);
    ck_assert_msg(dt >= 250 && dt < 1500, "op %d took %lld ms for a 300 ms timeout", op, (long long)dt);
    agent_client_close(&c);
    close(sv[1]);
    pthread_join(t, NULL);
}

START_TEST(fs_calls_have_a_deadline)
{
    for (int op = 0; op < 4; op++)
        fs_case(0, op);     /* frames for other ids, every 20 ms */
}
END_TEST

START_TEST(trickled_bytes_do_not_extend_the_deadline) { run_case(1); }
END_TEST

/* ---- file system requests against a scripted (hostile) agent ---------- */

struct script {
    int fd;
    struct agent_buf out;    /* READY, then these replies, written at once */
};

static void *script_agent(void *arg)
{
    struct script *k = arg;
    if (write(k->fd, k->out.p, k->out.len) != (ssize_t)k->out.len)
        return NULL;
    char buf[4096];
    while (read(k->fd, buf, sizeof buf) > 0)   /* the requests: until the client closes */
        ;
    return NULL;
}

struct run {
    struct script k;
    pthread_t t;
    int sv[2];
    struct agent_client c;
};

static void script_init(struct run *r)
{
    memset(r, 0, sizeof *r);
    ck_assert_int_eq(agent_put_u32(&r->k.out, AGENT_T_READY, 0, 1), 0);
}

static void script_start(struct run *r)
{
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, r->sv), 0);
    r->k.fd = r->sv[1];
    ck_assert_int_eq(pthread_create(&r->t, NULL, script_agent, &r->k), 0);
    ck_assert_int_eq(agent_client_attach(&r->c, r->sv[0], 0, 0, 1000), 0);
}

static void script_end(struct run *r)
{
    agent_client_close(&r->c);
    pthread_join(r->t, NULL);
    close(r->sv[1]);
    agent_buf_free(&r->k.out);
}

static void ent(struct agent_stat *e, uint32_t type, const char *path)
{
    memset(e, 0, sizeof *e);
    e->type = type;
    e->mode = 0644;
    e->size = 3;
    snprintf(e->path, sizeof e->path, "%s", path);
    strcpy(e->owner, "root");
    if (type == AGENT_FT_SYMLINK)
        strcpy(e->link, "t");
}

static void put_ent(struct run *r, uint32_t type, uint32_t id, uint32_t ft, const char *path)
{
    static struct agent_stat e;
    ent(&e, ft, path);
    ck_assert_int_eq(agent_put_entry(&r->k.out, type, id, &e), 0);
}

START_TEST(stat_replies)
{
    static struct agent_stat st;
    char err[128];
    struct run r;
    /* Request ids count from 1 per connection. */
    script_init(&r);
    put_ent(&r, AGENT_T_LIST_ENTRY, 9, AGENT_FT_FILE, "/other");   /* another id: skipped */
    put_ent(&r, AGENT_T_STAT_INFO, 1, AGENT_FT_SYMLINK, "/a");
    put_ent(&r, AGENT_T_STAT_INFO, 2, AGENT_FT_FILE, "/b");        /* not the path asked */
    uint8_t bad[40] = { 9 };                                      /* type 9, short */
    ck_assert_int_eq(agent_put_frame(&r.k.out, AGENT_T_STAT_INFO, 3, bad, sizeof bad), 0);
    ck_assert_int_eq(agent_put_u32(&r.k.out, AGENT_T_LIST_END, 4, 0), 0);  /* wrong type */
    ck_assert_int_eq(agent_put_error(&r.k.out, 5, AGENT_E_SYS, ENOENT, "/e: nope"), 0);
    put_ent(&r, AGENT_T_STAT_INFO, 6, AGENT_FT_DIR, "/f");
    script_start(&r);
    ck_assert_int_eq(agent_client_stat(&r.c, "/a", 1, &st, err, sizeof err), 0);
    ck_assert_uint_eq(st.type, AGENT_FT_SYMLINK);
    ck_assert_str_eq(st.link, "t");
    ck_assert_str_eq(st.owner, "root");
    ck_assert_int_eq(agent_client_stat(&r.c, "/a", 0, &st, err, sizeof err), -EPROTO);
    ck_assert_int_eq(agent_client_stat(&r.c, "/c", 0, &st, err, sizeof err), -EPROTO);
    ck_assert_int_eq(agent_client_stat(&r.c, "/d", 0, &st, err, sizeof err), -EPROTO);
    ck_assert_int_eq(agent_client_stat(&r.c, "/e", 0, &st, err, sizeof err), -EREMOTEIO);
    ck_assert_int_eq(agent_client_last_errno(&r.c), ENOENT);
    ck_assert_str_eq(err, "/e: nope");
    ck_assert_int_eq(agent_client_stat(&r.c, "/f", 0, &st, err, sizeof err), 0);
    ck_assert_int_eq(agent_client_last_errno(&r.c), 0);
    ck_assert_int_eq(agent_client_stat(&r.c, "rel", 0, &st, err, sizeof err), -EINVAL);
    ck_assert_int_eq(agent_client_stat(&r.c, "", 0, &st, err, sizeof err), -EINVAL);
    script_end(&r);
}
END_TEST

struct seen {
    int n, stop_at;
    char last[64];
};

static int on_entry(void *arg, const struct agent_stat *e)
{
    struct seen *s = arg;
    s->n++;
    snprintf(s->last, sizeof s->last, "%.60s", e->path);
    return s->stop_at && s->n >= s->stop_at ? 42 : 0;
}

START_TEST(list_replies)
{
    char err[128];
    struct run r;
    struct seen s;
    script_init(&r);
    /* 1: two entries (one a level down), other ids between them, the end. */
    put_ent(&r, AGENT_T_LIST_ENTRY, 1, AGENT_FT_DIR, "/d/a");
    ck_assert_int_eq(agent_put_u32(&r.k.out, AGENT_T_LIST_END, 77, 5), 0);
    put_ent(&r, AGENT_T_LIST_ENTRY, 1, AGENT_FT_FILE, "/d/a/b");
    ck_assert_int_eq(agent_put_u32(&r.k.out, AGENT_T_LIST_END, 1, 2), 0);
    /* 2: a count that is not the entries sent. */
    put_ent(&r, AGENT_T_LIST_ENTRY, 2, AGENT_FT_FILE, "/d/a");
    ck_assert_int_eq(agent_put_u32(&r.k.out, AGENT_T_LIST_END, 2, 3), 0);
    /* 3: an entry outside the directory. */
    put_ent(&r, AGENT_T_LIST_ENTRY, 3, AGENT_FT_FILE, "/etc/passwd");
    /* 4: deeper than asked (depth 1). */
    put_ent(&r, AGENT_T_LIST_ENTRY, 4, AGENT_FT_FILE, "/d/a/b");
    /* 5: the callback stops after one; the rest is drained. */
    put_ent(&r, AGENT_T_LIST_ENTRY, 5, AGENT_FT_FILE, "/d/x");
    put_ent(&r, AGENT_T_LIST_ENTRY, 5, AGENT_FT_FILE, "/d/y");
    ck_assert_int_eq(agent_put_u32(&r.k.out, AGENT_T_LIST_END, 5, 2), 0);
    /* 6: an ERROR after an entry. */
    put_ent(&r, AGENT_T_LIST_ENTRY, 6, AGENT_FT_FILE, "/d/x");
    ck_assert_int_eq(agent_put_error(&r.k.out, 6, AGENT_E_LIMIT, 0, "list: limit"), 0);
    /* 7: a malformed LIST_END. */
    ck_assert_int_eq(agent_put_frame(&r.k.out, AGENT_T_LIST_END, 7, "\0\0\0", 3), 0);
    /* 8: an empty directory. */
    ck_assert_int_eq(agent_put_u32(&r.k.out, AGENT_T_LIST_END, 8, 0), 0);
    script_start(&r);
    /* Each -EPROTO case gets a connection of its own in real use; here the
     * script goes on, so each case consumes exactly its own frames. */
    memset(&s, 0, sizeof s);
    ck_assert_int_eq(agent_client_list(&r.c, "/d", 2, on_entry, &s, err, sizeof err), 0);
    ck_assert_int_eq(s.n, 2);
    ck_assert_str_eq(s.last, "/d/a/b");
    memset(&s, 0, sizeof s);
    ck_assert_int_eq(agent_client_list(&r.c, "/d", 2, on_entry, &s, err, sizeof err), -EPROTO);
    memset(&s, 0, sizeof s);
    ck_assert_int_eq(agent_client_list(&r.c, "/d", 2, on_entry, &s, err, sizeof err), -EPROTO);
    ck_assert_int_eq(s.n, 0);
    ck_assert_int_eq(agent_client_list(&r.c, "/d", 1, on_entry, &s, err, sizeof err), -EPROTO);
    ck_assert_int_eq(s.n, 0);
    memset(&s, 0, sizeof s);
    s.stop_at = 1;
    ck_assert_int_eq(agent_client_list(&r.c, "/d", 1, on_entry, &s, err, sizeof err), 42);
    ck_assert_int_eq(s.n, 1);
    memset(&s, 0, sizeof s);
    ck_assert_int_eq(agent_client_list(&r.c, "/d", 1, on_entry, &s, err, sizeof err), -EREMOTEIO);
    ck_assert_int_eq(s.n, 1);
    ck_assert_str_eq(err, "list: limit");
    ck_assert_int_eq(agent_client_last_errno(&r.c), 0);
    ck_assert_int_eq(agent_client_list(&r.c, "/d", 1, on_entry, &s, err, sizeof err), -EPROTO);
    memset(&s, 0, sizeof s);
    ck_assert_int_eq(agent_client_list(&r.c, "/d", 1, on_entry, &s, err, sizeof err), 0);
    ck_assert_int_eq(s.n, 0);
    ck_assert_int_eq(agent_client_list(&r.c, "/d", 0, on_entry, &s, err, sizeof err), -EINVAL);
    ck_assert_int_eq(agent_client_list(&r.c, "/d", 17, on_entry, &s, err, sizeof err), -EINVAL);
    ck_assert_int_eq(agent_client_list(&r.c, "d", 1, on_entry, &s, err, sizeof err), -EINVAL);
    script_end(&r);
}
END_TEST

START_TEST(rename_remove_replies)
{
    char err[128];
    struct run r;
    script_init(&r);
    ck_assert_int_eq(agent_put_frame(&r.k.out, AGENT_T_OK, 1, NULL, 0), 0);
    ck_assert_int_eq(agent_put_error(&r.k.out, 2, AGENT_E_SYS, EXDEV, "rename: cross-device"), 0);
    ck_assert_int_eq(agent_put_frame(&r.k.out, AGENT_T_OK, 3, "x", 1), 0);   /* OK with bytes */
    ck_assert_int_eq(agent_put_error(&r.k.out, 4, AGENT_E_SYS, ENOTEMPTY, "/d: not empty"), 0);
    ck_assert_int_eq(agent_put_frame(&r.k.out, AGENT_T_OK, 5, NULL, 0), 0);
    script_start(&r);
    ck_assert_int_eq(agent_client_rename(&r.c, "/a", "/b", err, sizeof err), 0);
    ck_assert_int_eq(agent_client_rename(&r.c, "/a", "/mnt/b", err, sizeof err), -EREMOTEIO);
    ck_assert_int_eq(agent_client_last_errno(&r.c), EXDEV);
    ck_assert_int_eq(agent_client_remove(&r.c, "/a", 0, err, sizeof err), -EPROTO);
    ck_assert_int_eq(agent_client_last_errno(&r.c), 0);
    ck_assert_int_eq(agent_client_remove(&r.c, "/d", 0, err, sizeof err), -EREMOTEIO);
    ck_assert_int_eq(agent_client_last_errno(&r.c), ENOTEMPTY);
    ck_assert_int_eq(agent_client_remove(&r.c, "/d", 1, err, sizeof err), 0);
    ck_assert_int_eq(agent_client_rename(&r.c, "a", "/b", err, sizeof err), -EINVAL);
    ck_assert_int_eq(agent_client_remove(&r.c, "a", 1, err, sizeof err), -EINVAL);
    script_end(&r);
}
END_TEST

/* agent_client_take: the frames already received, one at a time, without
 * reading the socket; a stream that breaks the protocol is -EPROTO. */
START_TEST(take_received_frames)
{
    struct agent_client c;
    memset(&c, 0, sizeof c);
    c.fd = -1;
    struct agent_hdr h;
    const uint8_t *pl;
    ck_assert_int_eq(agent_client_take(&c, &h, &pl), 0);
    struct agent_buf b = { 0 };
    ck_assert_int_eq(agent_put_frame(&b, AGENT_T_PONG, 7, "moat", 4), 0);
    ck_assert_int_eq(agent_put_frame(&b, AGENT_T_OK, 8, NULL, 0), 0);
    ck_assert_int_eq(agent_rx_push(&c.rx, b.p, b.len - 1), 0);     /* the second one short */
    ck_assert_int_eq(agent_client_take(&c, &h, &pl), 1);
    ck_assert_uint_eq(h.type, AGENT_T_PONG);
    ck_assert_uint_eq(h.id, 7);
    ck_assert_uint_eq(h.len, 4);
    ck_assert_mem_eq(pl, "moat", 4);
    ck_assert_int_eq(agent_client_take(&c, &h, &pl), 0);
    ck_assert_int_eq(agent_rx_push(&c.rx, b.p + b.len - 1, 1), 0);
    ck_assert_int_eq(agent_client_take(&c, &h, &pl), 1);
    ck_assert_uint_eq(h.type, AGENT_T_OK);
    ck_assert_uint_eq(h.id, 8);
    uint8_t junk[64];
    memset(junk, 0xa5, sizeof junk);
    ck_assert_int_eq(agent_rx_push(&c.rx, junk, sizeof junk), 0);
    ck_assert_int_eq(agent_client_take(&c, &h, &pl), -EPROTO);
    agent_rx_free(&c.rx);
    agent_buf_free(&b);
}
END_TEST

/* agent_client_recv: what one recv without waiting brings: 1 with bytes
 * (into the receive buffer), 0 with none ready, -ECONNRESET at the end. */
START_TEST(recv_without_waiting)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    struct agent_client c;
    memset(&c, 0, sizeof c);
    c.fd = sv[0];
    uint8_t buf[256];
    ck_assert_int_eq(agent_client_recv(&c, buf, sizeof buf), 0);
    struct agent_buf b = { 0 };
    ck_assert_int_eq(agent_put_frame(&b, AGENT_T_PONG, 9, "moat", 4), 0);
    ck_assert_int_eq(write(sv[1], b.p, b.len), (ssize_t)b.len);
    ck_assert_int_eq(agent_client_recv(&c, buf, sizeof buf), 1);
    struct agent_hdr h;
    const uint8_t *pl;
    ck_assert_int_eq(agent_client_take(&c, &h, &pl), 1);
    ck_assert_uint_eq(h.id, 9);
    ck_assert_int_eq(agent_client_recv(&c, buf, sizeof buf), 0);
    close(sv[1]);
    ck_assert_int_eq(agent_client_recv(&c, buf, sizeof buf), -ECONNRESET);
    close(sv[0]);
    agent_rx_free(&c.rx);
    agent_buf_free(&b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("agent_client");
    TCase *tc = tcase_create("deadline");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, other_ids_do_not_extend_the_deadline);
    tcase_add_test(tc, trickled_bytes_do_not_extend_the_deadline);
    tcase_add_test(tc, fs_calls_have_a_deadline);
    suite_add_tcase(s, tc);
    TCase *fs = tcase_create("fs");
    tcase_set_timeout(fs, 20);
    tcase_add_test(fs, stat_replies);
    tcase_add_test(fs, list_replies);
    tcase_add_test(fs, rename_remove_replies);
    tcase_add_test(fs, take_received_frames);
    tcase_add_test(fs, recv_without_waiting);
    suite_add_tcase(s, fs);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
