/* Fuzz the guest agent protocol (vmm/agent/agent_proto.h): the input is a
 * byte stream as the agent would receive it on a connection, pushed into an
 * agent_rx in pieces whose sizes come from the first byte. Every frame is
 * decoded as every payload kind (the file system requests and entries
 * included, and as a passwd text); what decodes must re-encode to a frame
 * that decodes to the same thing.
 *
 * Input: [0] piece size - 1 (1..256) for the pushes
 *        [1..] the stream: frames of 16-byte header + payload */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "vmm/agent/agent_proto.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_exec(const uint8_t *pl, size_t n)
{
    struct agent_exec e;
    enum agent_err err;
    int r = agent_exec_decode(pl, n, &e, &err);
    if (r < 0) {
        FUZZ_ASSERT((r == -EINVAL || r == -ENOMEM) && err != AGENT_E_OK && err < AGENT_E__COUNT);
        return;
    }
    FUZZ_ASSERT(e.argc >= 1 && e.argc <= AGENT_MAX_ARGS && e.envc <= AGENT_MAX_ENV);
    FUZZ_ASSERT(e.argv[e.argc] == NULL && e.env[e.envc] == NULL && e.argv[0][0]);
    FUZZ_ASSERT(strlen(e.cwd) <= AGENT_MAX_PATH);
    for (uint32_t i = 0; i < e.envc; i++)
        FUZZ_ASSERT(strchr(e.env[i], '=') && e.env[i][0] != '=');
    if (e.flags & AGENT_EXEC_PTY)
        FUZZ_ASSERT(e.rows >= 1 && e.cols >= 1);
    else
        FUZZ_ASSERT(e.rows == 0 && e.cols == 0);
    struct agent_buf b = { 0 };
    r = agent_put_exec(&b, 1, &e);
    FUZZ_ASSERT(r == 0 && b.len == AGENT_HDR_SIZE + n);
    FUZZ_ASSERT(memcmp(b.p + AGENT_HDR_SIZE, pl, n) == 0);
    agent_buf_free(&b);
    agent_exec_free(&e);
}

/* The file system requests and entries: what decodes re-encodes to the
 * same bytes; a LIST entry path check never reads past its strings. */
static void check_fs(const struct agent_hdr *h, const uint8_t *pl, size_t n)
{
    static struct agent_stat st;
    static char path[AGENT_MAX_PATH + 1], dst[AGENT_MAX_PATH + 1];
    struct agent_path_req q;
    struct agent_rename rn;
    enum agent_err err;
    uint32_t count;
    struct agent_buf b = { 0 };
    int (*const dec[4])(const uint8_t *, size_t, struct agent_path_req *, enum agent_err *) = {
        agent_stat_req_decode, agent_list_req_decode, agent_remove_req_decode, agent_watch_req_decode };
    int (*const enc[4])(struct agent_buf *, uint32_t, uint32_t, const char *) = {
        agent_put_stat, agent_put_list, agent_put_remove, agent_put_watch };

    for (int i = 0; i < 4; i++) {
        if (dec[i](pl, n, &q, &err) < 0) {
            FUZZ_ASSERT(err != AGENT_E_OK && err < AGENT_E__COUNT);
            continue;
        }
        FUZZ_ASSERT(q.path_len >= 1 && 4 + (size_t)q.path_len == n && q.path[0] == '/');
        FUZZ_ASSERT(agent_path_check(q.path, q.path_len, path, &err) == 0);
        FUZZ_ASSERT(enc[i](&b, h->id, q.arg, path) == 0);
        FUZZ_ASSERT(b.len == AGENT_HDR_SIZE + n && !memcmp(b.p + AGENT_HDR_SIZE, pl, n));
        b.len = 0;
        if (i == 1) {
            FUZZ_ASSERT(q.arg >= 1 && q.arg <= AGENT_LIST_MAX_DEPTH);
            /* The payload as a dir, and as an entry path under "/". */
            agent_list_path_check(path, q.arg, "/x/y");
            agent_list_path_check("/", q.arg, path);
        }
    }
    if (agent_rename_decode(pl, n, &rn, &err) == 0) {
        FUZZ_ASSERT(8 + (size_t)rn.src_len + rn.dst_len == n);
        FUZZ_ASSERT(agent_path_check(rn.src, rn.src_len, path, &err) == 0);
        FUZZ_ASSERT(agent_path_check(rn.dst, rn.dst_len, dst, &err) == 0);
        FUZZ_ASSERT(agent_put_rename(&b, h->id, path, dst) == 0);
        FUZZ_ASSERT(b.len == AGENT_HDR_SIZE + n && !memcmp(b.p + AGENT_HDR_SIZE, pl, n));
        b.len = 0;
    } else {
        FUZZ_ASSERT(err != AGENT_E_OK);
    }
    if (agent_entry_decode(pl, n, &st, &err) == 0) {
        FUZZ_ASSERT(st.type >= AGENT_FT_FILE && st.type <= AGENT_FT_OTHER && !(st.mode & ~07777u));
        FUZZ_ASSERT(st.path[0] == '/' && strlen(st.path) <= AGENT_MAX_PATH);
        FUZZ_ASSERT(strlen(st.owner) <= AGENT_MAX_NAME && strlen(st.group) <= AGENT_MAX_NAME);
        FUZZ_ASSERT((st.type == AGENT_FT_SYMLINK) == (st.link[0] != 0));
        FUZZ_ASSERT(agent_put_entry(&b, AGENT_T_LIST_ENTRY, h->id, &st) == 0);
        FUZZ_ASSERT(b.len == AGENT_HDR_SIZE + n && !memcmp(b.p + AGENT_HDR_SIZE, pl, n));
        b.len = 0;
        agent_list_path_check("/", AGENT_LIST_MAX_DEPTH, st.path);
    } else {
        FUZZ_ASSERT(err != AGENT_E_OK);
    }
    if (agent_list_end_decode(pl, n, &count, &err) == 0)
        FUZZ_ASSERT(n == 4 && count <= AGENT_LIST_MAX_ENTRIES);
    /* WATCH_EVENT: a relative name without "." or ".." components that
     * re-encodes to the same bytes. */
    uint32_t op;
    if (agent_watch_event_decode(pl, n, &op, path, &err) == 0) {
        size_t nl = strlen(path);
        FUZZ_ASSERT(op >= AGENT_WATCH_CREATE && op <= AGENT_WATCH_CHMOD && nl == n - 4 && path[0] != '/');
        FUZZ_ASSERT(!strstr(path, "//") && strcmp(path, "..") && strncmp(path, "../", 3));
        FUZZ_ASSERT(agent_put_watch_event(&b, h->id, op, path, nl) == 0);
        FUZZ_ASSERT(b.len == AGENT_HDR_SIZE + n && !memcmp(b.p + AGENT_HDR_SIZE, pl, n));
        b.len = 0;
    } else {
        FUZZ_ASSERT(err != AGENT_E_OK && path[0] == 0);
    }
    /* The payload as /etc/passwd: a name found is 1..63 bytes, no NUL or ':'. */
    char name[AGENT_MAX_NAME + 1];
    if (agent_idname_lookup((const char *)pl, n, h->id, name) == 0)
        FUZZ_ASSERT(name[0] && strlen(name) <= AGENT_MAX_NAME && !strchr(name, ':'));
    else
        FUZZ_ASSERT(name[0] == 0);
    agent_buf_free(&b);
}

static void check_all(const struct agent_hdr *h, const uint8_t *pl, size_t n)
{
    enum agent_err err;
    struct agent_exit x;
    struct agent_fwrite w;
    struct agent_mkdir m;
    struct agent_error er;
    uint32_t v, mode;
    uint64_t sz;
    int sig;
    char path[AGENT_MAX_PATH + 1];

    check_exec(pl, n);
    if (agent_exit_decode(pl, n, &x, &err) == 0) {
        struct agent_buf b = { 0 };
        FUZZ_ASSERT(agent_put_exit(&b, h->id, &x) == 0);
        FUZZ_ASSERT(b.len == AGENT_HDR_SIZE + n && !memcmp(b.p + AGENT_HDR_SIZE, pl, n));
        agent_buf_free(&b);
    }
    if (agent_u32_decode(pl, n, &v, &err) == 0)
        FUZZ_ASSERT(n == 4);
    if (agent_kill_decode(pl, n, &sig, &err) == 0)
        FUZZ_ASSERT(sig >= 1 && sig <= 64);
    uint16_t rows, cols;
    if (agent_resize_decode(pl, n, &rows, &cols, &err) == 0) {
        struct agent_buf b = { 0 };
        FUZZ_ASSERT(n == 4 && rows >= 1 && cols >= 1);
        FUZZ_ASSERT(agent_put_resize(&b, h->id, rows, cols) == 0);
        FUZZ_ASSERT(b.len == AGENT_HDR_SIZE + n && !memcmp(b.p + AGENT_HDR_SIZE, pl, n));
        agent_buf_free(&b);
    } else {
        FUZZ_ASSERT(err != AGENT_E_OK && err < AGENT_E__COUNT);
    }
    if (agent_fwrite_decode(pl, n, &w, &err) == 0) {
        FUZZ_ASSERT(w.path_len >= 1 && w.path_len <= AGENT_MAX_PATH);
        FUZZ_ASSERT(12 + (size_t)w.path_len + w.data_len == n);
        FUZZ_ASSERT(agent_path_check(w.path, w.path_len, path, &err) == 0);
        FUZZ_ASSERT(strlen(path) == w.path_len);
    }
    if (agent_mkdir_decode(pl, n, &m, &err) == 0)
        FUZZ_ASSERT(m.path_len >= 1 && 8 + (size_t)m.path_len == n && !(m.mode & ~07777u));
    if (agent_file_end_decode(pl, n, &mode, &sz, &err) == 0)
        FUZZ_ASSERT(n == 12);
    if (agent_error_decode(pl, n, &er, &err) == 0)
        FUZZ_ASSERT(er.code > 0 && er.code < AGENT_E__COUNT && er.msg_len <= AGENT_MAX_MSG);
    if (agent_path_check((const char *)pl, n, path, &err) == 0)
        FUZZ_ASSERT(strlen(path) == n);
    struct agent_time t;
    if (agent_time_decode(pl, n, &t, &err) == 0) {
        struct agent_buf b = { 0 };
        FUZZ_ASSERT(n == 16 && t.sec >= 0 && t.nsec < 1000000000u);
        FUZZ_ASSERT(agent_put_set_time(&b, h->id, &t) == 0);
        FUZZ_ASSERT(b.len == AGENT_HDR_SIZE + n && !memcmp(b.p + AGENT_HDR_SIZE, pl, n));
        agent_buf_free(&b);
    }
    if (agent_entropy_check(pl, n, &err) == 0)
        FUZZ_ASSERT(n >= 1 && n <= AGENT_MAX_ENTROPY);
    check_fs(h, pl, n);
    agent_type_name(h->type);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t piece = (size_t)data[0] + 1;
    data++;
    size--;
    struct agent_rx rx = { 0 };
    for (size_t off = 0; off < size;) {
        size_t k = size - off < piece ? size - off : piece;
        FUZZ_ASSERT(agent_rx_push(&rx, data + off, k) == 0);
        off += k;
        for (;;) {
            struct agent_hdr h;
            const uint8_t *pl;
            enum agent_err err;
            int r = agent_rx_next(&rx, &h, &pl, &err);
            if (r == 0)
                break;
            if (r < 0) {
                FUZZ_ASSERT((r == -EINVAL && err == AGENT_E_MAGIC) ||
                            (r == -EMSGSIZE && err == AGENT_E_TOOBIG));
                goto out;
            }
            FUZZ_ASSERT(h.len <= AGENT_MAX_PAYLOAD);
            /* Copy so ASan sees reads past the payload. */
            uint8_t *copy = malloc(h.len ? h.len : 1);
            memcpy(copy, pl, h.len);
            check_all(&h, copy, h.len);
            free(copy);
        }
    }
out:
    agent_rx_free(&rx);
    return 0;
}
