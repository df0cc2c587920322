/* moat serve's request decoders (vmm/api/e2b/serve_req.c): routes, bodies,
 * list queries, ADDR:PORT, serve.json; every malformed case refused with
 * a message. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/api/e2b/serve_req.h"

static char why[600];

#define B(s) (s), strlen(s)

START_TEST(routes)
{
    enum serve_ep ep;
    char id[SERVE_ID_MAX + 1];
    static const struct {
        const char *m, *p;
        enum serve_ep ep;
        const char *id;
    } ok[] = {
        { "POST", "/v2/sandboxes", SV_CREATE, "" },
        { "POST", "/sandboxes", SV_CREATE, "" },
        { "GET", "/v2/sandboxes", SV_LIST, "" },
        { "GET", "/sandboxes", SV_LIST, "" },
        { "GET", "/snapshots", SV_SNAPSHOTS, "" },
        { "GET", "/health", SV_HEALTH, "" },
        { "POST", "/v2/sandboxes/abc123/connect", SV_CONNECT, "abc123" },
        { "POST", "/sandboxes/abc/resume", SV_CONNECT, "abc" },
        { "DELETE", "/sandboxes/i1-2.x_y", SV_KILL, "i1-2.x_y" },
        { "GET", "/sandboxes/abc", SV_INFO, "abc" },
        { "POST", "/sandboxes/abc/timeout", SV_TIMEOUT, "abc" },
        { "POST", "/sandboxes/abc/pause", SV_PAUSE, "abc" },
        { "POST", "/sandboxes/abc/snapshots", SV_SNAPSHOT, "abc" },
        { "POST", "/sandboxes/abc/fork", SV_FORK, "abc" },
        { "GET", "/sandboxes/abc/metrics", SV_METRICS, "abc" },
        { "DELETE", "/templates/snap-1", SV_TEMPLATE_DELETE, "snap-1" },
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        why[0] = 0;
        ck_assert_msg(serve_route(ok[i].m, ok[i].p, &ep, id, sizeof id, why, sizeof why) == 0, "%s %s: %s",
                      ok[i].m, ok[i].p, why);
        ck_assert_int_eq(ep, ok[i].ep);
        ck_assert_str_eq(id, ok[i].id);
    }
    /* unknown paths: -ENOENT (404) */
    const char *nf[] = { "/", "/v2", "/v3/sandboxes", "/sandboxes/abc/nope", "/sandboxes//connect",
                         "/sandboxes/abc/pause/x", "/v2/sandboxes/abc", "/sandboxes/", "/templates/" };
    for (size_t i = 0; i < sizeof nf / sizeof nf[0]; i++) {
        why[0] = 0;
        ck_assert_msg(serve_route("POST", nf[i], &ep, id, sizeof id, why, sizeof why) == -ENOENT, "%s", nf[i]);
        ck_assert_ptr_nonnull(strstr(why, "no such route"));
    }
    /* known path, wrong method: -EINVAL "not allowed" (405) */
    ck_assert_int_eq(serve_route("PUT", "/sandboxes/abc", &ep, id, sizeof id, why, sizeof why), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "not allowed"));
    ck_assert_int_eq(serve_route("GET", "/sandboxes/abc/pause", &ep, id, sizeof id, why, sizeof why), -EINVAL);
    ck_assert_int_eq(serve_route("DELETE", "/v2/sandboxes", &ep, id, sizeof id, why, sizeof why), -EINVAL);
    /* malformed ids: -EINVAL naming the id */
    const char *badid[] = { "/sandboxes/..", "/sandboxes/.", "/sandboxes/-a", "/sandboxes/a%2fb", "/sandboxes/a b",
                            "/sandboxes/_x", "/sandboxes/\xc3\xa9" };
    for (size_t i = 0; i < sizeof badid / sizeof badid[0]; i++) {
        why[0] = 0;
        ck_assert_msg(serve_route("GET", badid[i], &ep, id, sizeof id, why, sizeof why) == -EINVAL, "%s", badid[i]);
        ck_assert_ptr_nonnull(strstr(why, "id"));
    }
    char longp[200];
    snprintf(longp, sizeof longp, "/sandboxes/%064d", 0);
    ck_assert_int_eq(serve_route("GET", longp, &ep, id, sizeof id, why, sizeof why), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "too long"));
    snprintf(longp, sizeof longp, "/sandboxes/%063d", 0);
    ck_assert_int_eq(serve_route("GET", longp, &ep, id, sizeof id, why, sizeof why), 0);
    /* a template id is at most SERVE_TEMPLATE_MAX */
    snprintf(longp, sizeof longp, "/templates/%055d", 0);
    ck_assert_int_eq(serve_route("DELETE", longp, &ep, id, sizeof id, why, sizeof why), -EINVAL);
}
END_TEST

START_TEST(names)
{
    ck_assert(serve_valid_name("a"));
    ck_assert(serve_valid_name("A-b_c.9"));
    ck_assert(!serve_valid_name(""));
    ck_assert(!serve_valid_name(".a"));
    ck_assert(!serve_valid_name("a/b"));
    ck_assert(serve_valid_template("base"));
    char t[80];
    memset(t, 'a', sizeof t);
    t[SERVE_TEMPLATE_MAX] = 0;
    ck_assert(serve_valid_template(t));
    t[SERVE_TEMPLATE_MAX] = 'a';
    t[SERVE_TEMPLATE_MAX + 1] = 0;
    ck_assert(!serve_valid_template(t));
    ck_assert(serve_valid_name(t));
}
END_TEST

START_TEST(create_ok)
{
    struct serve_create c;
    ck_assert_int_eq(serve_decode_create(B("{\"templateID\":\"base\"}"), &c, why, sizeof why), 0);
    ck_assert_str_eq(c.template_id, "base");
    ck_assert_int_eq(c.timeout, SERVE_DEFAULT_TIMEOUT);
    ck_assert_int_eq(c.internet, -1);
    ck_assert(!c.auto_pause && !c.auto_resume);
    ck_assert_int_eq(json_object_size(c.metadata), 0);
    ck_assert_int_eq(json_object_size(c.env), 0);
    serve_create_free(&c);
    /* what the SDK sends, all of it */
    const char *full = "{\"templateID\":\"t1\",\"metadata\":{\"user\":\"alice\",\"k\":\"\"},\"mcp\":null,"
                       "\"envVars\":{\"FOO\":\"bar\",\"_X1\":\"y=z\"},\"timeout\":60,"
                       "\"allow_internet_access\":false,\"network\":{\"allowOut\":[]},\"iam\":null,"
                       "\"autoPause\":true,\"autoPauseMemory\":true,\"autoResume\":{\"enabled\":true},"
                       "\"secure\":true,\"volumeMounts\":[],\"someFutureField\":1}";
    ck_assert_msg(serve_decode_create(B(full), &c, why, sizeof why) == 0, "%s", why);
    ck_assert_int_eq(c.timeout, 60);
    ck_assert(c.auto_pause && c.auto_resume);
    ck_assert_int_eq(c.internet, 0);
    ck_assert_str_eq(json_string_value(json_object_get(c.metadata, "user")), "alice");
    ck_assert_str_eq(json_string_value(json_object_get(c.env, "_X1")), "y=z");
    serve_create_free(&c);
    ck_assert_int_eq(serve_decode_create(B("{\"templateID\":\"b\",\"timeout\":0,\"metadata\":null}"), &c, why,
                                         sizeof why), 0);
    ck_assert_int_eq(c.timeout, 0);
    serve_create_free(&c);
    ck_assert_int_eq(serve_decode_create(B("{\"templateID\":\"b\",\"timeout\":86400}"), &c, why, sizeof why), 0);
    serve_create_free(&c);
}
END_TEST

START_TEST(create_bad)
{
    static const char *const bad[][2] = {
        { "", "required" },
        { "   ", "required" },
        { "{", "malformed JSON" },
        { "[]", "JSON object" },
        { "\"x\"", "malformed JSON" },
        { "{}", "templateID" },
        { "{\"templateID\":1}", "templateID" },
        { "{\"templateID\":\"\"}", "not a template name" },
        { "{\"templateID\":\"../x\"}", "not a template name" },
        { "{\"templateID\":\"a\\u0000b\"}", "malformed JSON" },   /* \u0000: refused by the parser */
        { "{\"templateID\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}", "not a template name" },
        { "{\"templateID\":\"b\",\"templateID\":\"c\"}", "malformed JSON" },
        { "{\"templateID\":\"b\",\"timeout\":\"5\"}", "integer" },
        { "{\"templateID\":\"b\",\"timeout\":1.5}", "integer" },
        { "{\"templateID\":\"b\",\"timeout\":-1}", "out of range" },
        { "{\"templateID\":\"b\",\"timeout\":86401}", "out of range" },
        { "{\"templateID\":\"b\",\"timeout\":1e30}", "integer" },
        { "{\"templateID\":\"b\",\"autoPause\":1}", "true or false" },
        { "{\"templateID\":\"b\",\"allow_internet_access\":\"yes\"}", "true or false" },
        { "{\"templateID\":\"b\",\"autoPauseMemory\":false}", "autoPauseMemory" },
        { "{\"templateID\":\"b\",\"autoResume\":true}", "autoResume" },
        { "{\"templateID\":\"b\",\"autoResume\":{}}", "autoResume" },
        { "{\"templateID\":\"b\",\"autoResume\":{\"enabled\":1}}", "autoResume" },
        { "{\"templateID\":\"b\",\"network\":[]}", "network" },
        { "{\"templateID\":\"b\",\"network\":{\"allowOut\":\"1.2.3.4\"}}", "array" },
        { "{\"templateID\":\"b\",\"network\":{\"denyOut\":{}}}", "array" },
        { "{\"templateID\":\"b\",\"network\":{\"allowOut\":[1]}}", "strings" },
        { "{\"templateID\":\"b\",\"network\":{\"allowOut\":[null]}}", "strings" },
        { "{\"templateID\":\"b\",\"network\":{\"allowOut\":[\"\"]}}", "not a CIDR" },
        { "{\"templateID\":\"b\",\"network\":{\"allowOut\":[\"example.com\"]}}", "domain names" },
        { "{\"templateID\":\"b\",\"network\":{\"allowOut\":[\"*.example.com\"]}}", "domain names" },
        { "{\"templateID\":\"b\",\"network\":{\"allowOut\":[\"1.2.3.4,port=80\"]}}", "not a CIDR" },
        { "{\"templateID\":\"b\",\"network\":{\"allowOut\":[\"1.2.3.4; default allow\"]}}", "not a CIDR" },
        { "{\"templateID\":\"b\",\"network\":{\"denyOut\":[\"1.2.3.4/33\"]}}", "denyOut" },
        { "{\"templateID\":\"b\",\"network\":{\"denyOut\":[\"1.2.3/8\"]}}", "denyOut" },
        { "{\"templateID\":\"b\",\"network\":{\"denyOut\":[\"1.2.3.4/\"]}}", "denyOut" },
        { "{\"templateID\":\"b\",\"network\":{\"allowOut\":[\"::g\"]}}", "not a CIDR" },
        { "{\"templateID\":\"b\",\"network\":{\"allowOut\":[\"1.2.3.4\\u0000\"]}}", "malformed JSON" },
        { "{\"templateID\":\"b\",\"network\":{\"allowOut\":[\"10.1.2.3\"],\"denyOut\":[\"10.0.0.0/8\"]}}", "overlap" },
        { "{\"templateID\":\"b\",\"network\":{\"allowOut\":[\"10.0.0.0/8\"],\"denyOut\":[\"10.9.9.9\"]}}", "overlap" },
        { "{\"templateID\":\"b\",\"network\":{\"allowOut\":[\"2001:db8::/32\"],\"denyOut\":[\"2001:db8:1::/48\"]}}", "overlap" },
        { "{\"templateID\":\"b\",\"network\":{\"allowOut\":[\"1.1.1.1\",\"1.1.1.2\",\"1.1.1.3\",\"1.1.1.4\",\"1.1.1.5\",\"1.1.1.6\",\"1.1.1.7\",\"1.1.1.8\",\"1.1.1.9\",\"1.1.1.10\",\"1.1.1.11\",\"1.1.1.12\",\"1.1.1.13\",\"1.1.1.14\",\"1.1.1.15\",\"1.1.1.16\",\"1.1.1.17\"]}}", "at most 16" },
        { "{\"templateID\":\"b\",\"volumeMounts\":[{\"name\":\"v\",\"path\":\"/d\"}]}", "volumeMounts" },
        { "{\"templateID\":\"b\",\"mcp\":{\"x\":{}}}", "mcp" },
        { "{\"templateID\":\"b\",\"iam\":{\"tokens\":{}}}", "iam" },
        { "{\"templateID\":\"b\",\"metadata\":[]}", "metadata" },
        { "{\"templateID\":\"b\",\"metadata\":{\"k\":1}}", "must be a string" },
        { "{\"templateID\":\"b\",\"metadata\":{\"\":\"v\"}}", "key must be" },
        { "{\"templateID\":\"b\",\"metadata\":{\"k\":\"a\\u0000b\"}}", "malformed JSON" },
        { "{\"templateID\":\"b\",\"envVars\":{\"1X\":\"v\"}}", "environment variable name" },
        { "{\"templateID\":\"b\",\"envVars\":{\"A=B\":\"v\"}}", "environment variable name" },
        { "{\"templateID\":\"b\",\"envVars\":{\"A-B\":\"v\"}}", "environment variable name" },
        { "{\"templateID\":\"b\",\"envVars\":{\"A\":null}}", "must be a string" },
        { "{\"templateID\":\"b\",\"envVars\":\"A=B\"}", "envVars" },
        { "{\"templateID\":\"b\"} x", "malformed JSON" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct serve_create c;
        why[0] = 0;
        ck_assert_msg(serve_decode_create(B(bad[i][0]), &c, why, sizeof why) == -EINVAL, "accepted: %s", bad[i][0]);
        ck_assert_msg(strstr(why, bad[i][1]), "%s: '%s' lacks '%s'", bad[i][0], why, bad[i][1]);
        ck_assert_ptr_null(c.metadata);
        ck_assert_ptr_null(c.env);
    }
    /* too many entries; a value too long */
    char *big = malloc(20000);
    int n = sprintf(big, "{\"templateID\":\"b\",\"metadata\":{");
    for (int i = 0; i <= SERVE_META_MAX; i++)
        n += sprintf(big + n, "%s\"k%d\":\"v\"", i ? "," : "", i);
    sprintf(big + n, "}}");
    struct serve_create c;
    ck_assert_int_eq(serve_decode_create(B(big), &c, why, sizeof why), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "more than"));
    n = sprintf(big, "{\"templateID\":\"b\",\"envVars\":{\"A\":\"");
    memset(big + n, 'x', SERVE_VAL_MAX + 1);
    sprintf(big + n + SERVE_VAL_MAX + 1, "\"}}");
    ck_assert_int_eq(serve_decode_create(B(big), &c, why, sizeof why), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "at most"));
    free(big);
}
END_TEST

START_TEST(small_bodies)
{
    uint32_t t;
    unsigned cnt;
    char name[SERVE_TEMPLATE_MAX + 1];
    /* connect: empty, {}, timeout, memory true */
    ck_assert_int_eq(serve_decode_connect(B(""), &t, why, sizeof why), 0);
    ck_assert_int_eq(t, 0);
    ck_assert_int_eq(serve_decode_connect(B("{\"timeout\":30,\"memory\":true}"), &t, why, sizeof why), 0);
    ck_assert_int_eq(t, 30);
    ck_assert_int_eq(serve_decode_connect(B("{\"timeout\":null}"), &t, why, sizeof why), 0);
    ck_assert_int_eq(serve_decode_connect(B("{\"memory\":false}"), &t, why, sizeof why), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "memory"));
    ck_assert_int_eq(serve_decode_connect(B("{\"timeout\":-5}"), &t, why, sizeof why), -EINVAL);
    ck_assert_int_eq(serve_decode_connect(B("[1]"), &t, why, sizeof why), -EINVAL);
    /* timeout: required */
    ck_assert_int_eq(serve_decode_timeout(B("{\"timeout\":10}"), &t, why, sizeof why), 0);
    ck_assert_int_eq(t, 10);
    ck_assert_int_eq(serve_decode_timeout(B("{}"), &t, why, sizeof why), -EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "required"));
    ck_assert_int_eq(serve_decode_timeout(B(""), &t, why, sizeof why), -EINVAL);
    ck_assert_int_eq(serve_decode_timeout(B("{\"timeout\":true}"), &t, why, sizeof why), -EINVAL);
    ck_assert_int_eq(serve_decode_timeout(B("{\"timeout\":99999999999}"), &t, why, sizeof why), -EINVAL);
    /* pause */
    ck_assert_int_eq(serve_decode_pause(B(""), why, sizeof why), 0);
    ck_assert_int_eq(serve_decode_pause(B("{}"), why, sizeof why), 0);
    ck_assert_int_eq(serve_decode_pause(B("{\"memory\":null}"), why, sizeof why), 0);
    ck_assert_int_eq(serve_decode_pause(B("{\"memory\":false}"), why, sizeof why), -EINVAL);
    ck_assert_int_eq(serve_decode_pause(B("{\"memory\":\"x\"}"), why, sizeof why), -EINVAL);
    ck_assert_int_eq(serve_decode_pause(B("nul"), why, sizeof why), -EINVAL);
    /* fork */
    ck_assert_int_eq(serve_decode_fork(B("{}"), &t, &cnt, why, sizeof why), 0);
    ck_assert_int_eq(cnt, 1);
    ck_assert_int_eq(t, SERVE_DEFAULT_TIMEOUT);
    ck_assert_int_eq(serve_decode_fork(B("{\"count\":3,\"timeout\":20}"), &t, &cnt, why, sizeof why), 0);
    ck_assert_int_eq(cnt, 3);
    ck_assert_int_eq(t, 20);
    ck_assert_int_eq(serve_decode_fork(B("{\"count\":0}"), &t, &cnt, why, sizeof why), -EINVAL);
    ck_assert_int_eq(serve_decode_fork(B("{\"count\":17}"), &t, &cnt, why, sizeof why), -EINVAL);
    ck_assert_int_eq(serve_decode_fork(B("{\"count\":\"2\"}"), &t, &cnt, why, sizeof why), -EINVAL);
    ck_assert_int_eq(serve_decode_fork(B("{\"count\":2.0}"), &t, &cnt, why, sizeof why), -EINVAL);
    ck_assert_int_eq(serve_decode_fork(B("{\"timeout\":{}}"), &t, &cnt, why, sizeof why), -EINVAL);
    /* snapshot */
    ck_assert_int_eq(serve_decode_snapshot(B(""), name, sizeof name, why, sizeof why), 0);
    ck_assert_str_eq(name, "");
    ck_assert_int_eq(serve_decode_snapshot(B("{\"name\":\"my-snap\"}"), name, sizeof name, why, sizeof why), 0);
    ck_assert_str_eq(name, "my-snap");
    ck_assert_int_eq(serve_decode_snapshot(B("{\"name\":\"team/x:tag\"}"), name, sizeof name, why, sizeof why),
                     0);                                        /* E2B's form, as a moat name */
    ck_assert_str_eq(name, "team_2fx_3atag");
    ck_assert_int_eq(serve_decode_snapshot(B("{\"name\":\"team/x y\"}"), name, sizeof name, why, sizeof why),
                     -EINVAL);
    ck_assert_int_eq(serve_decode_snapshot(B("{\"name\":5}"), name, sizeof name, why, sizeof why), -EINVAL);
    ck_assert_int_eq(serve_decode_snapshot(B("{\"name\":\"\"}"), name, sizeof name, why, sizeof why), -EINVAL);
}
END_TEST

START_TEST(e2b_names)
{
    char m[SERVE_TEMPLATE_MAX + 1], back[3 * SERVE_TEMPLATE_MAX + 1];
    static const char *const same[] = { "base", "my_snap", "a.b-c", "a_2fb_x" };
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        ck_assert_int_eq(serve_e2b_name_in(same[i], m), 0);    /* moat names are themselves */
        ck_assert_str_eq(m, same[i]);
    }
    static const char *const e2b[][2] = {
        { "team/name:tag", "team_2fname_3atag" }, { "my_team/snap", "my_5fteam_2fsnap" },
        { "a:b", "a_3ab" }, { "t/../x", "t_2f.._2fx" }, { "t/", "t_2f" },
    };
    for (size_t i = 0; i < sizeof e2b / sizeof e2b[0]; i++) {
        ck_assert_int_eq(serve_e2b_name_in(e2b[i][0], m), 0);
        ck_assert_str_eq(m, e2b[i][1]);
        ck_assert(serve_valid_template(m));
        serve_e2b_name_out(m, back, sizeof back);            /* shown as asked */
        ck_assert_str_eq(back, e2b[i][0]);
    }
    static const char *const bad[] = { "/abs", ":x", "_a/b", "a b/c", "a/b\n", "", "a/\xc3\xa9",
        "team/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" /* over 54 once written */ };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(serve_e2b_name_in(bad[i], m) == -EINVAL, "%s", bad[i]);
    /* shown as they are: plain names, and names with a '_' that no escape starts */
    static const char *const plain[] = { "base", "my_snap", "a_2fb_x", "a_3", "x_5f" };
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
        serve_e2b_name_out(plain[i], back, sizeof back);
        ck_assert_str_eq(back, plain[i]);
    }
    serve_e2b_name_out("a_2fb_5f", back, sizeof back);
    ck_assert_str_eq(back, "a/b_");
    ck_assert_int_eq(serve_e2b_name_in(back, m), 0);           /* and back again */
    ck_assert_str_eq(m, "a_2fb_5f");
    serve_e2b_name_out("team_2fname", back, 5);                /* truncated, terminated */
    ck_assert_str_eq(back, "team");
}
END_TEST

START_TEST(list_queries)
{
    struct serve_list_q q;
    serve_list_init(&q);
    ck_assert(q.running && q.paused);
    ck_assert_int_eq(q.limit, SERVE_LIST_MAX);
    ck_assert_int_eq(serve_list_arg(&q, "state", "paused", why, sizeof why), 0);
    ck_assert(!q.running && q.paused);
    ck_assert_int_eq(serve_list_arg(&q, "state", "running", why, sizeof why), 0);
    ck_assert(q.running && q.paused);
    ck_assert_int_eq(serve_list_arg(&q, "limit", "5", why, sizeof why), 0);
    ck_assert_int_eq(q.limit, 5);
    ck_assert_int_eq(serve_list_arg(&q, "nextToken", "abc-1", why, sizeof why), 0);
    ck_assert_str_eq(q.next, "abc-1");
    ck_assert_int_eq(serve_list_arg(&q, "template", "base", why, sizeof why), 0);
    ck_assert_str_eq(q.template_id, "base");
    ck_assert_int_eq(serve_list_arg(&q, "name", "team/x:tag", why, sizeof why), 0);   /* E2B's form */
    ck_assert_str_eq(q.name, "team_2fx_3atag");
    ck_assert_int_eq(serve_list_arg(&q, "order", "desc", why, sizeof why), 0);
    ck_assert_int_eq(serve_list_arg(&q, "startedAfter", "2026-01-02T03:04:05.500Z", why, sizeof why), 0);
    ck_assert(q.started_after > 1767323045.0 && q.started_after < 1767323046.0);
    /* metadata as the SDK encodes it: encodeURIComponent per key and value,
     * then a form; the server has decoded the outer layer */
    ck_assert_int_eq(serve_list_arg(&q, "metadata", "user=alice&sp=a%2520b&x%253Dy=1", why, sizeof why), 0);
    json_t *m = json_pack("{s:s, s:s, s:s, s:s}", "user", "alice", "sp", "a b", "x=y", "1", "other", "z");
    ck_assert(serve_list_meta_match(&q, m));
    json_object_set_new(m, "user", json_string("bob"));
    ck_assert(!serve_list_meta_match(&q, m));
    ck_assert(!serve_list_meta_match(&q, NULL));
    json_decref(m);
    serve_list_free(&q);

    static const char *const bad[][2] = {
        { "state", "stopped" }, { "state", "" }, { "state", "running," }, { "limit", "0" }, { "limit", "101" },
        { "limit", "1x" }, { "limit", "" }, { "limit", "-1" }, { "nextToken", "../x" }, { "template", "a b" }, { "template", "/a" },
        { "sandboxID", ".." }, { "startedAfter", "yesterday" }, { "startedAfter", "2026-01-02T03:04:05+02:00" },
        { "order", "up" }, { "bogus", "1" }, { "metadata", "novalue" }, { "metadata", "=v" },
        { "metadata", "k=%zz" }, { "metadata", "k=%2" }, { "metadata", "k%00=v" }, { "metadata", "k=%2500" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        serve_list_init(&q);
        why[0] = 0;
        ck_assert_msg(serve_list_arg(&q, bad[i][0], bad[i][1], why, sizeof why) == -EINVAL, "%s=%s", bad[i][0],
                      bad[i][1]);
        ck_assert(why[0]);
        serve_list_free(&q);
    }
    /* order and an ordered listing's token */
    serve_list_init(&q);
    ck_assert_int_eq(q.order, 0);
    ck_assert_int_eq(q.next_usec, -1);
    ck_assert_int_eq(serve_list_arg(&q, "order", "asc", why, sizeof why), 0);
    ck_assert_int_eq(q.order, 1);
    ck_assert_int_eq(serve_list_arg(&q, "order", "desc", why, sizeof why), 0);
    ck_assert_int_eq(q.order, -1);
    ck_assert_int_eq(serve_list_arg(&q, "order", "", why, sizeof why), 0);
    ck_assert_int_eq(q.order, 0);
    char tok[SERVE_NEXT_MAX + 1];
    serve_next_make("abc-1", serve_usec(1767323045.25), tok, sizeof tok);
    ck_assert_str_eq(tok, "abc-1~1767323045250000");
    ck_assert_int_eq(serve_list_arg(&q, "nextToken", tok, why, sizeof why), 0);
    ck_assert_str_eq(q.next, "abc-1");
    ck_assert_int_eq(q.next_usec, 1767323045250000);
    ck_assert_int_eq(serve_list_arg(&q, "nextToken", "abc-1", why, sizeof why), 0);
    ck_assert_int_eq(q.next_usec, -1);
    char longid[SERVE_ID_MAX + 1];
    memset(longid, 'a', SERVE_ID_MAX);
    longid[SERVE_ID_MAX] = 0;
    serve_next_make(longid, INT64_C(999999999999999999), tok, sizeof tok);
    ck_assert_int_eq(serve_list_arg(&q, "nextToken", tok, why, sizeof why), 0);
    ck_assert_int_eq(q.next_usec, INT64_C(999999999999999999));
    static const char *const bad_tok[] = { "~1", "a~", "a~1x", "a~-1", "../x~1", "a~1234567890123456789", "a~1~2" };
    for (size_t i = 0; i < sizeof bad_tok / sizeof bad_tok[0]; i++)
        ck_assert_msg(serve_list_arg(&q, "nextToken", bad_tok[i], why, sizeof why) == -EINVAL, "%s", bad_tok[i]);
    serve_list_free(&q);
    ck_assert_int_lt(serve_list_order_cmp(1, 1, "b", 2, "a"), 0);    /* asc: earlier first */
    ck_assert_int_gt(serve_list_order_cmp(-1, 1, "a", 2, "b"), 0);   /* desc: later first */
    ck_assert_int_lt(serve_list_order_cmp(-1, 2, "b", 2, "c"), 0);   /* ties by id */
    ck_assert_int_lt(serve_list_order_cmp(1, 2, "b", 2, "c"), 0);
    ck_assert_int_eq(serve_list_order_cmp(1, 2, "b", 2, "b"), 0);
    ck_assert_int_lt(serve_list_order_cmp(0, 9, "a", 1, "b"), 0);    /* none: by id */
    ck_assert_int_eq(serve_usec(0), 0);
    ck_assert_int_eq(serve_usec(-5), 0);
    ck_assert_int_eq(serve_usec(1.5), 1500000);
    /* a NULL value (a key without '=') is an empty one */
    serve_list_init(&q);
    ck_assert_int_eq(serve_list_arg(&q, "nextToken", NULL, why, sizeof why), 0);
    ck_assert_int_eq(serve_list_arg(&q, "limit", NULL, why, sizeof why), -EINVAL);
    serve_list_free(&q);
}
END_TEST

START_TEST(hostports)
{
    char a[64];
    unsigned p;
    ck_assert_int_eq(serve_parse_hostport("127.0.0.1:3000", a, sizeof a, &p, why, sizeof why), 0);
    ck_assert_str_eq(a, "127.0.0.1");
    ck_assert_int_eq(p, 3000);
    ck_assert_int_eq(serve_parse_hostport("[::1]:49983", a, sizeof a, &p, why, sizeof why), 0);
    ck_assert_str_eq(a, "::1");
    ck_assert_int_eq(p, 49983);
    const char *bad[] = { "", "3000", ":3000", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:-1",
                          "127.0.0.1:+1", "localhost:80", "::1:80", "[::1]80", "[::1", "1.2.3.4:80x", "1.2.3.4:80:1" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(serve_parse_hostport(bad[i], a, sizeof a, &p, why, sizeof why) == -EINVAL, "%s", bad[i]);
    char tiny[4];
    ck_assert_int_eq(serve_parse_hostport("127.0.0.1:80", tiny, sizeof tiny, &p, why, sizeof why), -EINVAL);
}
END_TEST

/* network.allowOut / denyOut: canonical CIDRs, and the policy made from them */
START_TEST(network)
{
    struct serve_create c;
    char pol[SERVE_POLICY_MAX];
    /* none given: both lists empty, everything denied unless the internet is asked for */
    ck_assert_int_eq(serve_decode_create(B("{\"templateID\":\"b\"}"), &c, why, sizeof why), 0);
    ck_assert_int_eq(json_array_size(json_object_get(c.network, "allowOut")), 0);
    ck_assert_int_eq(json_array_size(json_object_get(c.network, "denyOut")), 0);
    ck_assert_int_eq(serve_net_policy(c.internet, c.network, pol, sizeof pol, why, sizeof why), 0);
    ck_assert_str_eq(pol, "default deny");
    ck_assert_int_eq(serve_net_policy(0, c.network, pol, sizeof pol, why, sizeof why), 0);
    ck_assert_str_eq(pol, "default deny");
    ck_assert_int_eq(serve_net_policy(1, c.network, pol, sizeof pol, why, sizeof why), 0);
    ck_assert_str_eq(pol, "default allow");
    ck_assert_int_eq(serve_net_policy(1, NULL, pol, sizeof pol, why, sizeof why), 0);
    ck_assert_str_eq(pol, "default allow");
    serve_create_free(&c);
    /* bare addresses become /32 and /128; deny-all becomes the default */
    ck_assert_msg(serve_decode_create(B("{\"templateID\":\"b\",\"allow_internet_access\":true,\"network\":"
                                        "{\"allowOut\":[\"203.0.113.10\",\"2001:db8::1\",\"8.8.8.0/24\"],"
                                        "\"denyOut\":[\"0.0.0.0/0\"]}}"), &c, why, sizeof why) == 0, "%s", why);
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(c.network, "allowOut"), 0)),
                     "203.0.113.10/32");
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(c.network, "allowOut"), 1)),
                     "2001:db8::1/128");
    ck_assert_int_eq(serve_net_policy(c.internet, c.network, pol, sizeof pol, why, sizeof why), 0);
    ck_assert_str_eq(pol, "default deny; allow 203.0.113.10/32; allow 2001:db8::1/128; allow 8.8.8.0/24");
    serve_create_free(&c);
    /* internet with some denied; a /0 deny overlaps nothing (it is the default) */
    static const char *const cases[][2] = {
        { "{\"templateID\":\"b\",\"allow_internet_access\":true,\"network\":"
          "{\"allowOut\":[\"1.1.1.1\"],\"denyOut\":[\"198.51.100.0/24\",\"::/0\"]}}",
          "default deny; allow 1.1.1.1/32; deny 198.51.100.0/24" },
        { "{\"templateID\":\"b\",\"allow_internet_access\":true,\"network\":"
          "{\"denyOut\":[\"198.51.100.7\"],\"allowOut\":[\"198.51.101.0/24\"]}}",
          "default allow; allow 198.51.101.0/24; deny 198.51.100.7/32" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_msg(serve_decode_create(B(cases[i][0]), &c, why, sizeof why) == 0, "%s", why);
        ck_assert_int_eq(serve_net_policy(c.internet, c.network, pol, sizeof pol, why, sizeof why), 0);
        ck_assert_str_eq(pol, cases[i][1]);
        if (i + 1 < sizeof cases / sizeof cases[0])
            serve_create_free(&c);
    }
    /* too small a buffer, and a list not made by the decoder, are refused */
    ck_assert_int_eq(serve_net_policy(c.internet, c.network, pol, 20, why, sizeof why), -E2BIG);
    serve_create_free(&c);
    json_t *odd = json_pack("{s:[s], s:[]}", "allowOut", "1.2.3.4; default allow", "denyOut");
    ck_assert_int_eq(serve_net_policy(0, odd, pol, sizeof pol, why, sizeof why), -EINVAL);
    json_decref(odd);
    odd = json_pack("{s:[i], s:[]}", "allowOut", 5, "denyOut");
    ck_assert_int_eq(serve_net_policy(0, odd, pol, sizeof pol, why, sizeof why), -EINVAL);
    json_decref(odd);
    /* the longest lists fit */
    char body[4096];
    int k = snprintf(body, sizeof body, "{\"templateID\":\"b\",\"network\":{\"allowOut\":[");
    for (int i = 0; i < SERVE_NET_MAX; i++)
        k += snprintf(body + k, sizeof body - (size_t)k, "%s\"2001:db8:%x::/48\"", i ? "," : "", i);
    k += snprintf(body + k, sizeof body - (size_t)k, "],\"denyOut\":[");
    for (int i = 0; i < SERVE_NET_MAX; i++)
        k += snprintf(body + k, sizeof body - (size_t)k, "%s\"2001:db9:%x:ffff:ffff:ffff:ffff:ffff\"", i ? "," : "", i);
    snprintf(body + k, sizeof body - (size_t)k, "]}}");
    ck_assert_msg(serve_decode_create(B(body), &c, why, sizeof why) == 0, "%s", why);
    ck_assert_msg(serve_net_policy(1, c.network, pol, sizeof pol, why, sizeof why) == 0, "%s", why);
    serve_create_free(&c);
}
END_TEST

START_TEST(state_file)
{
    struct serve_state st, back;
    memset(&st, 0, sizeof st);
    strcpy(st.template_id, "base");
    memset(st.token, 'a', SERVE_TOKEN_LEN);
    memset(st.client_id, '0', SERVE_TOKEN_LEN);
    st.started_at = 1767323045.25;
    st.deadline = 1767323345.25;
    st.timeout = 300;
    st.auto_pause = true;
    st.internet = -1;
    st.metadata = json_pack("{s:s}", "k", "v");
    st.env = json_pack("{s:s}", "FOO", "bar");
    st.net_device = true;
    st.network = json_pack("{s:[s], s:[]}", "allowOut", "203.0.113.10/32", "denyOut");
    char *t = serve_state_encode(&st);
    ck_assert_ptr_nonnull(t);
    ck_assert_msg(serve_state_decode(B(t), &back, why, sizeof why) == 0, "%s", why);
    ck_assert_str_eq(back.template_id, "base");
    ck_assert_str_eq(back.token, st.token);
    ck_assert(back.deadline == st.deadline && back.started_at == st.started_at);
    ck_assert(back.auto_pause && !back.auto_resume && back.internet == -1 && back.timeout == 300);
    ck_assert_str_eq(json_string_value(json_object_get(back.env, "FOO")), "bar");
    ck_assert(back.net_device);
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(back.network, "allowOut"), 0)),
                     "203.0.113.10/32");
    serve_state_free(&back);
    /* every field damaged in turn is refused */
    static const char *const fields[][2] = {
        { "\"templateID\": \"base\"", "\"templateID\": \"../x\"" },
        { "\"envdAccessToken\": \"", "\"envdAccessToken\": \"Z" },
        { "\"clientID\": \"0", "\"clientID\": \"" },
        { "\"startedAt\": ", "\"startedAt\": -" },
        { "\"deadline\": ", "\"deadline\": \"x\", \"y\": " },
        { "\"timeout\": 300", "\"timeout\": 300.5" },
        { "\"autoPause\": true", "\"autoPause\": 1" },
        { "\"autoResume\": false", "\"autoResume\": null" },
        { "\"allowInternetAccess\": null", "\"allowInternetAccess\": 0" },
        { "\"FOO\": \"bar\"", "\"F-O\": \"bar\"" },
        { "\"k\": \"v\"", "\"k\": 5" },
        { "\"netDevice\": true", "\"netDevice\": 1" },
        { "\"network\": {", "\"network\": 5, \"x\": {" },
        { "\"203.0.113.10/32\"", "\"203.0.113.10/32; default allow\"" },
        { "\"203.0.113.10/32\"", "\"example.com\"" },
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        char *at = strstr(t, fields[i][0]);
        ck_assert_msg(at, "%s not in %s", fields[i][0], t);
        char *d = malloc(strlen(t) + 64);
        sprintf(d, "%.*s%s%s", (int)(at - t), t, fields[i][1], at + strlen(fields[i][0]));
        ck_assert_msg(serve_state_decode(B(d), &back, why, sizeof why) == -EINVAL, "accepted %s", d);
        ck_assert_ptr_null(back.metadata);
        free(d);
    }
    ck_assert_int_eq(serve_state_decode(B("{}"), &back, why, sizeof why), -EINVAL);
    ck_assert_int_eq(serve_state_decode(B(""), &back, why, sizeof why), -EINVAL);
    free(t);
    serve_state_free(&st);
}
END_TEST

START_TEST(misc)
{
    char b[40];
    serve_time_text(1767323045.25, b, sizeof b);
    ck_assert_str_eq(b, "2026-01-02T03:04:05.250Z");
    serve_time_text(0, b, sizeof b);
    ck_assert_str_eq(b, "1970-01-01T00:00:00.000Z");
    ck_assert(serve_secret_eq("abc", "abc"));
    ck_assert(!serve_secret_eq("abc", "abd"));
    ck_assert(!serve_secret_eq("abc", "ab"));
    ck_assert(!serve_secret_eq("ab", "abc"));
    ck_assert(!serve_secret_eq("", ""));
    ck_assert(!serve_secret_eq("abc", ""));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("serve_req");
    TCase *tc = tcase_create("decode");
    tcase_add_test(tc, routes);
    tcase_add_test(tc, names);
    tcase_add_test(tc, create_ok);
    tcase_add_test(tc, create_bad);
    tcase_add_test(tc, small_bodies);
    tcase_add_test(tc, list_queries);
    tcase_add_test(tc, e2b_names);
    tcase_add_test(tc, hostports);
    tcase_add_test(tc, network);
    tcase_add_test(tc, state_file);
    tcase_add_test(tc, misc);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
