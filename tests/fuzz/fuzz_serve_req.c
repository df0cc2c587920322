/* Fuzz moat serve's request decoding (vmm/api/e2b/serve_req.c). The first
 * byte picks what the rest is: a body for one of the decoders, list query
 * arguments ("key=value" lines), "METHOD PATH" for the router, ADDR:PORT,
 * or a serve.json.
 * Every call gives 0 or -EINVAL (-ENOENT for an unknown route, -ENOMEM)
 * with a message; on success the strings it filled are NUL-terminated
 * within their arrays, names are valid, numbers within their ranges, maps
 * objects of strings, and an accepted serve.json encodes and decodes back
 * to the same state. */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_common.h"
#include "vmm/api/e2b/serve_req.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char why[700];

static void check_rc(int rc, int also)
{
    FUZZ_ASSERT(rc == 0 || rc == -EINVAL || rc == -ENOMEM || (also && rc == also));
    if (rc < 0 && rc != -ENOMEM)
        FUZZ_ASSERT(why[0] != 0 && strnlen(why, sizeof why) < sizeof why);
}

static void strmap_ok(const json_t *m, bool env)
{
    FUZZ_ASSERT(json_is_object(m) && json_object_size(m) <= SERVE_META_MAX);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)m, k, v) {
        FUZZ_ASSERT(strlen(k) >= 1 && strlen(k) <= SERVE_KEY_MAX);
        FUZZ_ASSERT(!env || !strchr(k, '='));
        FUZZ_ASSERT(json_is_string(v) && json_string_length(v) <= SERVE_VAL_MAX);
        FUZZ_ASSERT(strlen(json_string_value(v)) == json_string_length(v));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *b = (const char *)data + 1;
    size_t n = size - 1;
    char *z = malloc(n + 1);    /* NUL-terminated copy for the text decoders */
    if (!z)
        return 0;
    memcpy(z, b, n);
    z[n] = 0;
    why[0] = 0;
    int rc;
    uint32_t t;
    unsigned cnt;
    switch (data[0] % 9) {
    case 0: {
        struct serve_create c;
        check_rc(rc = serve_decode_create(b, n, &c, why, sizeof why), 0);
        if (!rc) {
            FUZZ_ASSERT(serve_valid_template(c.template_id) && c.timeout <= SERVE_TIMEOUT_MAX);
            FUZZ_ASSERT(c.internet >= -1 && c.internet <= 1);
            /* the lists decoded fit the policy, which has no separator in an entry */
            char pol[SERVE_POLICY_MAX];
            FUZZ_ASSERT(serve_net_policy(c.internet, c.network, pol, sizeof pol, why, sizeof why) == 0);
            FUZZ_ASSERT(!strncmp(pol, "default ", 8) && !strchr(pol, ','));
            strmap_ok(c.metadata, false);
            strmap_ok(c.env, true);
            serve_create_free(&c);
        }
        break;
    }
    case 1:
        check_rc(rc = serve_decode_connect(b, n, &t, why, sizeof why), 0);
        if (!rc)
            FUZZ_ASSERT(t <= SERVE_TIMEOUT_MAX);
        break;
    case 2:
        check_rc(rc = serve_decode_timeout(b, n, &t, why, sizeof why), 0);
        if (!rc)
            FUZZ_ASSERT(t <= SERVE_TIMEOUT_MAX);
        check_rc(serve_decode_pause(b, n, why, sizeof why), 0);
        break;
    case 3:
        check_rc(rc = serve_decode_fork(b, n, &t, &cnt, why, sizeof why), 0);
        if (!rc)
            FUZZ_ASSERT(t <= SERVE_TIMEOUT_MAX && cnt >= 1 && cnt <= SERVE_FORK_MAX);
        break;
    case 4: {
        char name[SERVE_TEMPLATE_MAX + 1];
        check_rc(rc = serve_decode_snapshot(b, n, name, sizeof name, why, sizeof why), 0);
        if (!rc)
            FUZZ_ASSERT(!name[0] || serve_valid_template(name));
        break;
    }
    case 5: {   /* query arguments, one "key=value" a line */
        struct serve_list_q q;
        /* the text as an E2B name: a moat name that shows as it was, or the
         * name itself */
        char m[SERVE_TEMPLATE_MAX + 1], m2[SERVE_TEMPLATE_MAX + 1], shown[3 * SERVE_TEMPLATE_MAX + 1];
        if (serve_e2b_name_in(z, m) == 0) {
            FUZZ_ASSERT(serve_valid_template(m));
            serve_e2b_name_out(m, shown, sizeof shown);
            FUZZ_ASSERT(!strcmp(shown, z) || !strcmp(m, z));
            FUZZ_ASSERT(serve_e2b_name_in(shown, m2) == 0 && !strcmp(m2, m));
        }
        serve_list_init(&q);
        for (char *line = z, *next; line; line = next) {
            next = strchr(line, '\n');
            if (next)
                *next++ = 0;
            char *eq = strchr(line, '=');
            if (eq)
                *eq = 0;
            why[0] = 0;
            check_rc(serve_list_arg(&q, line, eq ? eq + 1 : NULL, why, sizeof why), 0);
        }
        FUZZ_ASSERT(q.limit >= 1 && q.limit <= SERVE_LIST_MAX);
        FUZZ_ASSERT(!q.next[0] || serve_valid_name(q.next));
        FUZZ_ASSERT(q.order >= -1 && q.order <= 1);
        if (q.next_usec >= 0) {  /* an ordered token: made again, it reads the same */
            char tok[SERVE_NEXT_MAX + 1];
            struct serve_list_q q2;
            serve_list_init(&q2);
            FUZZ_ASSERT(q.next[0]);
            serve_next_make(q.next, q.next_usec, tok, sizeof tok);
            FUZZ_ASSERT(serve_list_arg(&q2, "nextToken", tok, why, sizeof why) == 0);
            FUZZ_ASSERT(q2.next_usec == q.next_usec && !strcmp(q2.next, q.next));
            serve_list_free(&q2);
        }
        FUZZ_ASSERT(!q.template_id[0] || serve_valid_template(q.template_id));
        FUZZ_ASSERT(!q.sandbox_id[0] || serve_valid_name(q.sandbox_id));
        if (q.metadata) {
            FUZZ_ASSERT(json_object_size(q.metadata) <= SERVE_META_MAX);
            FUZZ_ASSERT(serve_list_meta_match(&q, q.metadata));
        }
        serve_list_free(&q);
        break;
    }
    case 6: {   /* "METHOD PATH" */
        char *sp = strchr(z, ' ');
        if (!sp)
            break;
        *sp = 0;
        enum serve_ep ep = 0;
        char id[SERVE_ID_MAX + 1];
        check_rc(rc = serve_route(z, sp + 1, &ep, id, sizeof id, why, sizeof why), -ENOENT);
        if (!rc) {
            FUZZ_ASSERT(ep >= SV_CREATE && ep <= SV_HEALTH);
            FUZZ_ASSERT(!id[0] || serve_valid_name(id));
        }
        break;
    }
    case 7: {
        char addr[64];
        unsigned port;
        check_rc(rc = serve_parse_hostport(z, addr, sizeof addr, &port, why, sizeof why), 0);
        if (!rc)
            FUZZ_ASSERT(addr[0] && port >= 1 && port <= 65535);
        break;
    }
    case 8: {
        struct serve_state st, back;
        check_rc(rc = serve_state_decode(b, n, &st, why, sizeof why), 0);
        if (rc)
            break;
        strmap_ok(st.metadata, false);
        strmap_ok(st.env, true);
        char *text = serve_state_encode(&st);
        if (text) {
            FUZZ_ASSERT(serve_state_decode(text, strlen(text), &back, why, sizeof why) == 0);
            FUZZ_ASSERT(!strcmp(back.token, st.token) && !strcmp(back.template_id, st.template_id));
            FUZZ_ASSERT(back.timeout == st.timeout && back.auto_pause == st.auto_pause);
            FUZZ_ASSERT(json_equal(back.metadata, st.metadata) && json_equal(back.env, st.env));
            FUZZ_ASSERT(back.net_device == st.net_device && (st.network ? json_equal(back.network, st.network)
                                                                         : !back.network));
            serve_state_free(&back);
            free(text);
        }
        serve_state_free(&st);
        break;
    }
    }
    free(z);
    return 0;
}
