/* Fuzz `moat serve`'s envd codec (vmm/api/e2b/serve_connect.c): what an SDK
 * client sends (request bodies, envelopes, base64, paths, timeouts) and
 * what a guest agent reports (an entry: STAT_INFO / LIST_ENTRY fields).
 * The first byte picks the decoder; the rest is its input.
 * Every call gives 0 or -EINVAL (with a message) or -ENOMEM; on success:
 * strings are NUL-terminated and within their limits, env entries are
 * KEY=VALUE with a key, depth is 1..16, an envelope's message lies inside
 * the input, base64 re-encodes and decodes to the same bytes, a resolved
 * path is absolute, and an entry is a JSON object (or NULL for guest bytes
 * that are not UTF-8). */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/api/e2b/serve_connect.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char why[512];

static void check_rc(int rc)
{
    FUZZ_ASSERT(rc == 0 || rc == -EINVAL || rc == -ENOMEM);
    if (rc == -EINVAL)
        FUZZ_ASSERT(why[0] != 0 && strnlen(why, sizeof why) < sizeof why);
}

static void check_sel(const struct cx_selector *sel)
{
    if (sel->by_tag)
        FUZZ_ASSERT(sel->tag[0] && strnlen(sel->tag, sizeof sel->tag) <= CX_MAX_TAG);
}

static void fuzz_entry(const uint8_t *p, size_t n)
{
    static struct agent_stat st;
    memset(&st, 0, sizeof st);
    size_t fixed = 4 * 4 + 8 + 8 + 4;
    if (n < fixed)
        return;
    memcpy(&st.type, p, 4);
    memcpy(&st.mode, p + 4, 4);
    memcpy(&st.uid, p + 8, 4);
    memcpy(&st.gid, p + 12, 4);
    memcpy(&st.size, p + 16, 8);
    memcpy(&st.mtime_sec, p + 24, 8);
    memcpy(&st.mtime_nsec, p + 32, 4);
    st.mode &= 07777;
    p += fixed;
    n -= fixed;
    /* path | owner | group | link, split at '\n' bytes. */
    char *dst[4] = { st.path, st.owner, st.group, st.link };
    size_t cap[4] = { sizeof st.path, sizeof st.owner, sizeof st.group, sizeof st.link };
    for (int i = 0; i < 4 && n; i++) {
        const uint8_t *nl = memchr(p, '\n', n);
        size_t k = nl ? (size_t)(nl - p) : n;
        size_t c = k < cap[i] - 1 ? k : cap[i] - 1;
        memcpy(dst[i], p, c);
        dst[i][c] = 0;
        p += k + (nl ? 1 : 0);
        n -= k + (nl ? 1 : 0);
    }
    char *j = cx_entry_json(&st);
    if (j) {
        json_t *o = json_loads(j, 0, NULL);
        FUZZ_ASSERT(json_is_object(o));
        FUZZ_ASSERT(json_is_string(json_object_get(o, "name")) && json_is_string(json_object_get(o, "size")));
        FUZZ_ASSERT(strlen(j) <= cx_entry_json_size(&st));     /* ListDir's budget relies on it */
        json_decref(o);
        free(j);
    }
    char perm[16];
    cx_go_perm_string(st.type, st.mode, perm);
    FUZZ_ASSERT(strlen(perm) >= 10 && strlen(perm) <= 13);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *b = (const char *)data + 1;
    size_t n = size - 1;
    why[0] = 0;
    int rc;
    struct cx_selector sel;
    switch (data[0] % 14) {
    case 0: {
        struct cx_start s;
        check_rc(rc = cx_start_decode(b, n, &s, why, sizeof why));
        if (!rc) {
            FUZZ_ASSERT(s.cmd && s.cmd[0] && s.nargs <= CX_MAX_ARGS && s.nenvs <= CX_MAX_ENVS);
            for (size_t i = 0; i < s.nargs; i++)
                FUZZ_ASSERT(s.args[i] != NULL);
            for (size_t i = 0; i < s.nenvs; i++)
                FUZZ_ASSERT(s.envs[i] && s.envs[i][0] != '=' && strchr(s.envs[i], '='));
            FUZZ_ASSERT(!s.tag || strlen(s.tag) <= CX_MAX_TAG);
            FUZZ_ASSERT(!s.cwd || strlen(s.cwd) <= CX_MAX_PATH);
            cx_start_free(&s);
        }
        break;
    }
    case 1:
        check_rc(rc = cx_selector_decode(b, n, &sel, why, sizeof why));
        if (!rc)
            check_sel(&sel);
        break;
    case 2: {
        int sig;
        check_rc(rc = cx_signal_decode(b, n, &sel, &sig, why, sizeof why));
        if (!rc)
            FUZZ_ASSERT(sig == 9 || sig == 15);
        break;
    }
    case 3: {
        uint8_t *d = NULL;
        size_t dl;
        int pty;
        check_rc(rc = cx_input_decode(b, n, &sel, &d, &dl, &pty, why, sizeof why));
        if (!rc) {
            FUZZ_ASSERT(d != NULL && dl <= n);
            check_sel(&sel);
        }
        free(d);
        break;
    }
    case 4: {
        int has;
        uint32_t c, r;
        check_rc(rc = cx_update_decode(b, n, &sel, &has, &c, &r, why, sizeof why));
        break;
    }
    case 5:
        check_rc(cx_empty_decode(b, n, why, sizeof why));
        break;
    case 6:
    case 7:
    case 8: {
        static struct cx_fs f;
        enum cx_fs_kind k = data[0] % 14 == 6 ? CX_FS_PATH : data[0] % 14 == 7 ? CX_FS_LIST : CX_FS_MOVE;
        if (k == CX_FS_PATH && (data[0] / 14) % 2)
            k = CX_FS_WATCH;     /* half of the path cases: as WatchDir's */
        check_rc(rc = cx_fs_decode(k, b, n, &f, why, sizeof why));
        if (!rc) {
            FUZZ_ASSERT(memchr(f.path, 0, sizeof f.path) && memchr(f.dest, 0, sizeof f.dest));
            FUZZ_ASSERT(f.depth >= 1 && f.depth <= CX_MAX_DEPTH);
            if (k == CX_FS_MOVE)
                FUZZ_ASSERT(f.path[0] && f.dest[0]);
            FUZZ_ASSERT(f.recursive == 0 || (k == CX_FS_WATCH && f.recursive == 1));
        }
        break;
    }
    case 9: {
        const uint8_t *m;
        size_t ml;
        check_rc(rc = cx_envelope_one((const uint8_t *)b, n, &m, &ml, why, sizeof why));
        if (!rc)
            FUZZ_ASSERT(m == (const uint8_t *)b + CX_ENV_HDR && ml + CX_ENV_HDR == n);
        break;
    }
    case 10: {
        uint8_t *d = NULL, *d2 = NULL;
        size_t dl, dl2;
        rc = cx_b64_decode(b, n, &d, &dl);
        FUZZ_ASSERT(rc == 0 || rc == -EINVAL || rc == -ENOMEM);
        if (!rc) {
            FUZZ_ASSERT(dl <= n);
            char *e = cx_b64_encode(d, dl);
            FUZZ_ASSERT(e != NULL);
            FUZZ_ASSERT(cx_b64_decode(e, strlen(e), &d2, &dl2) == 0);
            FUZZ_ASSERT(dl2 == dl && memcmp(d, d2, dl) == 0);
            free(e);
            free(d2);
        }
        free(d);
        break;
    }
    case 11: {
        char in[CX_MAX_PATH + 2], out[CX_MAX_PATH + 1];
        size_t k = n < sizeof in - 1 ? n : sizeof in - 1;
        memcpy(in, b, k);
        in[k] = 0;
        check_rc(rc = cx_path_resolve(in, "/root", out, why, sizeof why));
        if (!rc)
            FUZZ_ASSERT(out[0] == '/' && strlen(out) <= CX_MAX_PATH);
        break;
    }
    case 12: {
        char in[32];
        uint64_t ms;
        size_t k = n < sizeof in - 1 ? n : sizeof in - 1;
        memcpy(in, b, k);
        in[k] = 0;
        rc = cx_timeout_parse(in, &ms);
        FUZZ_ASSERT(rc == 0 || rc == -EINVAL);
        if (!rc)
            FUZZ_ASSERT(ms <= 9999999999ULL);
        break;
    }
    default:
        fuzz_entry((const uint8_t *)b, n);
        break;
    }
    return 0;
}
