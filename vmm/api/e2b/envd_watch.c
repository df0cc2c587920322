/* filesystem.Filesystem/WatchDir (serve_envd.c): a server stream fed by
 * the guest agent's WATCH (docs/agent-protocol.md) on a connection of its
 * own; the watch ends when the stream does (the connection closes). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/base/clock.h"

#include "vmm/api/e2b/envd_int.h"

#define WATCH_ID 3u

struct wstream {
    struct envd_server *s;
    struct agent_client ac;
    struct live live;
    uint8_t *buf;
    size_t len, cap, off;
    int done;
    int64_t deadline, ka_every, next_ka;
    int client_fd;
    char name[AGENT_MAX_PATH + 1];
};

/* Queue one message; without memory the stream just ends. */
static void ws_msg(struct wstream *w, uint8_t flags, char *json)
{
    if (!json || cx_envelope_append(&w->buf, &w->len, &w->cap, flags, json, strlen(json)) < 0)
        w->done = 1;
    free(json);
}

static void ws_end(struct wstream *w, enum cx_code code, const char *msg)
{
    ws_msg(w, CX_FLAG_END, cx_end_json(code, msg));
    w->done = 1;
}

/* One agent frame into a message (events the SDK cannot carry, e.g. a
 * name that is not UTF-8, are left out). */
static void ws_frame(struct wstream *w, const struct agent_hdr *h, const uint8_t *pl)
{
    uint32_t op;
    if (h->id != WATCH_ID)
        return;
    if (h->type == AGENT_T_WATCH_EVENT) {
        char *j;
        if (agent_watch_event_decode(pl, h->len, &op, w->name, NULL) < 0)
            ws_end(w, CX_INTERNAL, "the guest agent sent a malformed WATCH_EVENT");
        else if ((j = cx_watch_event(op, w->name)))
            ws_msg(w, 0, j);
        return;
    }
    struct agent_error er;
    char msg[1100] = "the guest agent ended the watch";
    enum cx_code code = CX_INTERNAL;
    if (h->type == AGENT_T_ERROR && agent_error_decode(pl, h->len, &er, NULL) == 0) {
        snprintf(msg, sizeof msg, "guest agent: %.*s", (int)er.msg_len, er.msg);
        code = er.code == AGENT_E_LIMIT ? CX_RESOURCE_EXHAUSTED
               : er.code == AGENT_E_SYS ? cx_code_from_errno((int)er.sys_errno) : CX_INTERNAL;
    }
    ws_end(w, code, msg);
}

static ssize_t ws_read(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    struct wstream *w = cls;
    while (w->off == w->len) {
        if (w->done)
            return MHD_CONTENT_READER_END_OF_STREAM;
        w->off = w->len = 0;
        int64_t now = clock_mono_ms();
        if (atomic_load(&w->s->stopping)) {
            ws_end(w, CX_UNAVAILABLE, "moat serve is stopping");
        } else if (w->deadline && now >= w->deadline) {
            ws_end(w, CX_DEADLINE_EXCEEDED, "the stream's Connect-Timeout-Ms passed");
        } else if (now >= w->next_ka) {
            w->next_ka = now + w->ka_every;
            ws_msg(w, 0, cx_watch_keepalive());
        } else {
            int64_t wait = w->next_ka - now;
            if (w->deadline && w->deadline - now < wait)
                wait = w->deadline - now;
            struct agent_hdr h;
            const uint8_t *pl;
            int r = envd_ag_next(&w->ac, &h, &pl, (int)wait, &w->live, w->client_fd);
            if (r == -EPIPE)
                return MHD_CONTENT_READER_END_WITH_ERROR;
            if (r == -ECANCELED)
                ws_end(w, CX_UNAVAILABLE, "the sandbox was stopped");
            else if (r < 0 && r != -ETIMEDOUT)
                ws_end(w, CX_UNAVAILABLE, "lost the connection to the sandbox's guest agent");
            else if (r == 0)
                ws_frame(w, &h, pl);
        }
    }
    size_t n = w->len - w->off;
    if (n > max)
        n = max;
    memcpy(out, w->buf + w->off, n);
    w->off += n;
    return (ssize_t)n;
}

static void ws_free(void *cls)
{
    struct wstream *w = cls;
    if (w->ac.fd >= 0) {
        envd_live_del(w->s, &w->live);
        agent_client_close(&w->ac);
    }
    free(w->buf);
    free(w);
}

/* WATCH's answer: 0 for OK; else an error message and code. An agent
 * from before WATCH answers ERROR TYPE: unimplemented, not a hang. */
static int ws_answer(struct wstream *w, const char *path, enum cx_code *code, char *err, size_t el)
{
    int64_t deadline = clock_mono_ms() + w->s->o.op_timeout_ms;
    for (;;) {
        struct agent_hdr h;
        const uint8_t *pl;
        int left = clock_ms_left(deadline);
        int r = left ? envd_ag_next(&w->ac, &h, &pl, left, &w->live, -1) : -ETIMEDOUT;
        if (r < 0) {
            *code = r == -ETIMEDOUT ? CX_DEADLINE_EXCEEDED : CX_UNAVAILABLE;
            snprintf(err, el, "watch %s: %s", path, strerror(-r));
            return r;
        }
        if (h.id != WATCH_ID)
            continue;
        if (h.type == AGENT_T_OK)
            return 0;
        struct agent_error er;
        *code = CX_INTERNAL;
        if (h.type != AGENT_T_ERROR || agent_error_decode(pl, h.len, &er, NULL) < 0) {
            snprintf(err, el, "watch %s: the guest agent answered with a malformed frame", path);
        } else if (er.code == AGENT_E_TYPE) {
            *code = CX_UNIMPLEMENTED;
            snprintf(err, el, "this sandbox's guest agent predates directory watching: "
                     "rebuild its template with this moat to watch directories");
        } else {
            *code = er.code == AGENT_E_LIMIT ? CX_RESOURCE_EXHAUSTED
                    : er.code == AGENT_E_SYS ? cx_code_from_errno((int)er.sys_errno) : CX_INTERNAL;
            snprintf(err, el, "watch %s: %.*s", path, (int)er.msg_len, er.msg);
        }
        return -EREMOTEIO;
    }
}

/* Open a connection and start the WATCH: 0, or an error already queued
 * on c (*res). */
static int ws_begin(struct wstream *w, struct MHD_Connection *c, struct req *q, const char *path, int recursive,
                    enum MHD_Result *res)
{
    char err[1300];
    enum cx_code code = CX_UNAVAILABLE;
    int r = envd_agent_open(w->s, q, &w->ac);
    if (r < 0) {
        w->ac.fd = -1;
        snprintf(err, sizeof err, "cannot reach the sandbox's guest agent: %s", strerror(-r));
        *res = envd_reply_stream_error(c, code, err);
        return r;
    }
    envd_live_add(w->s, &w->live, q->sb, w->ac.fd);
    struct agent_buf f = { 0 };
    r = agent_put_watch(&f, WATCH_ID, recursive ? AGENT_WATCH_RECURSIVE : 0, path);
    if (r == 0)
        r = envd_ag_send(&w->ac, NULL, &f);
    if (r < 0)
        snprintf(err, sizeof err, "watch %s: %s", path, strerror(-r));
    agent_buf_free(&f);
    if (r == 0)
        r = ws_answer(w, path, &code, err, sizeof err);
    if (r < 0)
        *res = envd_reply_stream_error(c, code, err);
    return r;
}

enum MHD_Result envd_do_watch(struct envd_server *s, struct MHD_Connection *c, struct req *q, const char *msg,
                              size_t mlen)
{
    char err[512];
    struct cx_fs *fr = malloc(sizeof *fr);
    char *path = malloc(CX_MAX_PATH + 1);
    struct wstream *w = calloc(1, sizeof *w);
    enum MHD_Result res;
    if (!fr || !path || !w) {
        res = envd_reply_stream_error(c, CX_INTERNAL, "out of memory");
        goto fail;
    }
    w->s = s;
    w->ac.fd = -1;
    if (cx_fs_decode(CX_FS_WATCH, msg, mlen, fr, err, sizeof err) < 0 ||
        cx_path_resolve(fr->path, ENVD_HOME, path, err, sizeof err) < 0) {
        res = envd_reply_stream_error(c, CX_INVALID_ARGUMENT, err);
        goto fail;
    }
    if (ws_begin(w, c, q, path, fr->recursive, &res) < 0)
        goto fail;
    envd_stream_timing(c, &w->ka_every, &w->next_ka, &w->deadline, &w->client_fd);
    ws_msg(w, 0, cx_watch_start());
    free(fr);
    free(path);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, ws_read, w, ws_free);
    if (!r) {
        ws_free(w);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/connect+json");
    res = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return res;
fail:
    if (w && w->s)
        ws_free(w);
    else
        free(w);
    free(fr);
    free(path);
    return res;
}
