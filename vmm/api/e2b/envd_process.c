/* envd's process.Process (serve_envd.c): Start and Connect streams
 * (ProcessEvent envelopes from the agent's frames), List, SendSignal,
 * SendInput, CloseStdin, Update; the process table and the janitor that
 * reads the processes no stream is attached to. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include "vmm/base/clock.h"

#include "vmm/api/e2b/envd_int.h"

void envd_proc_unref(struct envd_server *s, struct proc *p)
{
    pthread_mutex_lock(&s->lock);
    int last = --p->refs == 0;
    pthread_mutex_unlock(&s->lock);
    if (!last)
        return;
    envd_live_del(s, &p->live);
    agent_client_close(&p->ac);    /* the agent kills what still runs */
    pthread_mutex_destroy(&p->wlock);
    json_decref(p->config);
    free(p->tag);
    free(p);
}

/* Take p out of the table (ended, lost or forgotten). Lock held. */
static void proc_unlist_locked(struct envd_server *s, struct proc *p)
{
    if (!p->in_table)
        return;
    for (struct proc **pp = &s->procs; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    p->in_table = 0;
    p->refs--;                  /* the table's reference; the caller holds another */
}

static void proc_unlist(struct envd_server *s, struct proc *p)
{
    pthread_mutex_lock(&s->lock);
    proc_unlist_locked(s, p);
    pthread_mutex_unlock(&s->lock);
}

/* Find a running process of sandbox sb; a reference for the caller. */
static struct proc *proc_find(struct envd_server *s, const char *sb, const struct cx_selector *sel)
{
    pthread_mutex_lock(&s->lock);
    struct proc *p = s->procs;
    for (; p; p = p->next) {
        if (strcmp(p->sb, sb) != 0)
            continue;
        if (sel->by_tag ? (p->tag && strcmp(p->tag, sel->tag) == 0) : p->pid == sel->pid)
            break;
    }
    if (p)
        p->refs++;
    pthread_mutex_unlock(&s->lock);
    return p;
}

struct stream {
    struct envd_server *s;
    struct proc *p;
    uint8_t *buf;
    size_t len, cap, off;
    int done;                   /* the end-of-stream envelope is queued */
    int64_t deadline;           /* 0: none */
    int64_t ka_every, next_ka;
    int client_fd;
};

static int st_event(struct stream *st, char *json)
{
    if (!json)
        return -ENOMEM;
    int r = cx_envelope_append(&st->buf, &st->len, &st->cap, 0, json, strlen(json));
    free(json);
    return r;
}

static void st_end(struct stream *st, enum cx_code code, const char *msg)
{
    char *j = cx_end_json(code, msg);
    if (j)
        cx_envelope_append(&st->buf, &st->len, &st->cap, CX_FLAG_END, j, strlen(j));
    free(j);
    st->done = 1;
}

/* One agent frame of the process into events. */
static void st_frame(struct stream *st, const struct agent_hdr *h, const uint8_t *pl)
{
    if (h->id != EXEC_ID)
        return;
    if (h->type == AGENT_T_STDOUT || h->type == AGENT_T_STDERR) {
        enum cx_data which = st->p->pty ? CX_DATA_PTY
                             : h->type == AGENT_T_STDERR ? CX_DATA_STDERR : CX_DATA_STDOUT;
        if (st_event(st, cx_event_data(which, pl, h->len)) < 0)
            st_end(st, CX_INTERNAL, "out of memory");
        return;
    }
    if (h->type == AGENT_T_EXIT) {
        struct agent_exit x;
        if (agent_exit_decode(pl, h->len, &x, NULL) < 0) {
            st_end(st, CX_INTERNAL, "the guest agent sent a malformed EXIT");
        } else if (st_event(st, cx_event_end(x.kind, x.value)) < 0) {
            st_end(st, CX_INTERNAL, "out of memory");
        } else {
            st_end(st, CX_OK, NULL);
        }
        proc_unlist(st->s, st->p);
        return;
    }
    if (h->type == AGENT_T_ERROR) {
        struct agent_error er;
        char msg[300] = "the guest agent refused the process";
        enum cx_code code = CX_INTERNAL;
        if (agent_error_decode(pl, h->len, &er, NULL) == 0) {
            snprintf(msg, sizeof msg, "guest agent: %.*s", (int)er.msg_len, er.msg);
            if (er.code == AGENT_E_LIMIT)
                code = CX_RESOURCE_EXHAUSTED;
            else if (er.code == AGENT_E_SYS)
                code = cx_code_from_errno((int)er.sys_errno);
        }
        st_end(st, code, msg);
        proc_unlist(st->s, st->p);
    }
}

static ssize_t st_read(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    struct stream *st = cls;
    while (st->off == st->len) {
        if (st->done)
            return MHD_CONTENT_READER_END_OF_STREAM;
        st->off = st->len = 0;
        if (atomic_load(&st->s->stopping)) {
            st_end(st, CX_UNAVAILABLE, "moat serve is stopping");
            break;
        }
        int64_t now = clock_mono_ms();
        if (st->deadline && now >= st->deadline) {
            st_end(st, CX_DEADLINE_EXCEEDED, "the stream's Connect-Timeout-Ms passed (the process goes on)");
            break;
        }
        if (now >= st->next_ka) {
            st->next_ka = now + st->ka_every;
            if (st_event(st, cx_event_keepalive()) < 0)
                return MHD_CONTENT_READER_END_WITH_ERROR;
            break;
        }
        int64_t wait = st->next_ka - now;
        if (st->deadline && st->deadline - now < wait)
            wait = st->deadline - now;
        struct agent_hdr h;
        const uint8_t *pl;
        int r = envd_ag_next(&st->p->ac, &h, &pl, (int)wait, &st->p->live, st->client_fd);
        if (r == -ETIMEDOUT)
            continue;
        if (r == -EPIPE)
            return MHD_CONTENT_READER_END_WITH_ERROR;   /* the client left: detach */
        if (r == -ECANCELED || atomic_load(&st->p->live.cancelled)) {
            st_end(st, CX_UNAVAILABLE, "the sandbox was stopped");
            proc_unlist(st->s, st->p);
            break;
        }
        if (r < 0) {
            st_end(st, CX_UNAVAILABLE, "lost the connection to the sandbox's guest agent");
            proc_unlist(st->s, st->p);
            break;
        }
        st_frame(st, &h, pl);
    }
    size_t n = st->len - st->off;
    if (n > max)
        n = max;
    memcpy(out, st->buf + st->off, n);
    st->off += n;
    return (ssize_t)n;
}

static void st_free(void *cls)
{
    struct stream *st = cls;
    if (st->p) {
        pthread_mutex_lock(&st->s->lock);
        st->p->attached = 0;
        pthread_mutex_unlock(&st->s->lock);
        envd_proc_unref(st->s, st->p);
    }
    free(st->buf);
    free(st);
}

void envd_stream_timing(struct MHD_Connection *c, int64_t *ka_every, int64_t *next_ka, int64_t *deadline,
                        int *client_fd)
{
    const char *ka = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Keepalive-Ping-Interval");
    uint64_t v;
    *ka_every = KEEPALIVE_MAX_S * 1000;
    if (ka && cx_timeout_parse(ka, &v) == 0 && v >= 1 && v < KEEPALIVE_MAX_S)
        *ka_every = (int64_t)v * 1000;
    *next_ka = clock_mono_ms() + *ka_every;
    const char *to = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Connect-Timeout-Ms");
    *deadline = 0;
    if (to && cx_timeout_parse(to, &v) == 0 && v > 0)
        *deadline = clock_mono_ms() + (int64_t)v;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    *client_fd = ci ? ci->connect_fd : -1;
}

static struct stream *st_new(struct envd_server *s, struct MHD_Connection *c, struct proc *p)
{
    struct stream *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->s = s;
    st->p = p;
    envd_stream_timing(c, &st->ka_every, &st->next_ka, &st->deadline, &st->client_fd);
    return st;
}

static enum MHD_Result st_respond(struct MHD_Connection *c, struct stream *st)
{
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, st_read, st,
                                                               st_free);
    if (!r) {
        st_free(st);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/connect+json");
    enum MHD_Result res = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return res;
}

static json_t *config_json(const struct cx_start *sr, const char *cwd)
{
    json_t *args = json_array(), *envs = json_object();
    for (size_t i = 0; i < sr->nargs; i++)
        json_array_append_new(args, json_string(sr->args[i]));
    for (size_t i = 0; i < sr->nenvs; i++) {
        char *eq = strchr(sr->envs[i], '=');
        *eq = 0;
        json_object_set_new(envs, sr->envs[i], json_string(eq + 1));
        *eq = '=';
    }
    json_t *cfg = json_pack("{s:s,s:o,s:o}", "cmd", sr->cmd, "args", args, "envs", envs);
    if (cfg && cwd)
        json_object_set_new(cfg, "cwd", json_string(cwd));
    return cfg;
}

/* A pty size from a request: 0 (not given) is 24 rows, 80 columns, as
 * a terminal's default; more than a u16 holds is refused. */
static int pty_size_check(uint32_t *rows, uint32_t *cols, char *err, size_t errlen)
{
    if (*rows > UINT16_MAX || *cols > UINT16_MAX) {
        snprintf(err, errlen, "pty.size: rows and cols must be at most %u", UINT16_MAX);
        return -EINVAL;
    }
    if (!*rows)
        *rows = 24;
    if (!*cols)
        *cols = 80;
    return 0;
}

/* Process.Start, after the EXEC and its PING went out (r: how that
 * went): wait for the agent's word. On success p joins the process table;
 * otherwise the stream ends with why. */
static void start_confirm(struct envd_server *s, struct stream *st, struct proc *p, int r)
{
    char err[512];
    /* The agent answers the PING after taking the EXEC: ERROR first means
     * it refused it; output (and even EXIT) may come before the PONG. One
     * deadline for the whole wait and a cap on the output held meanwhile:
     * a guest that streams output and never answers gets neither time nor
     * memory without bound. */
    int64_t until = clock_mono_ms() + p->ac.timeout_ms;
    while (r == 0 && !st->done) {
        struct agent_hdr h;
        const uint8_t *pl;
        int64_t left = until - clock_mono_ms();
        if (left <= 0) {
            r = -ETIMEDOUT;
            break;
        }
        if (st->len > START_BUF_MAX) {
            r = -ENOBUFS;
            break;
        }
        if ((r = envd_ag_next(&p->ac, &h, &pl, (int)left, &p->live, -1)) < 0)
            break;
        if (h.id == PING_ID && h.type == AGENT_T_PONG)
            break;
        if (h.id == EXEC_ID && h.type == AGENT_T_ERROR)
            st->len = 0;                    /* no start event: only the error */
        st_frame(st, &h, pl);
    }
    if (r == -ETIMEDOUT || r == -ENOBUFS) {
        st->len = 0;
        snprintf(err, sizeof err, "the sandbox's guest agent did not confirm the process %s",
                 r == -ETIMEDOUT ? "in time" : "before sending 4 MiB of output");
        st_end(st, r == -ETIMEDOUT ? CX_DEADLINE_EXCEEDED : CX_RESOURCE_EXHAUSTED, err);
    } else if (r < 0) {
        st->len = 0;
        snprintf(err, sizeof err, "the sandbox's guest agent did not take the process: %s", strerror(-r));
        st_end(st, CX_UNAVAILABLE, err);
    } else if (!st->done) {
        pthread_mutex_lock(&s->lock);
        p->next = s->procs;
        s->procs = p;
        p->in_table = 1;
        p->refs++;                          /* the table's */
        pthread_mutex_unlock(&s->lock);
    }
}

enum MHD_Result envd_do_start(struct envd_server *s, struct MHD_Connection *c, struct req *q,
                              const char *msg, size_t mlen)
{
    char err[512], cwd[CX_MAX_PATH + 1] = "";
    struct cx_start sr;
    int r = cx_start_decode(msg, mlen, &sr, err, sizeof err);
    if (r < 0)
        return envd_reply_stream_error(c, r == -ENOMEM ? CX_INTERNAL : CX_INVALID_ARGUMENT,
                                  r == -ENOMEM ? "out of memory" : err);
    if (sr.has_pty && pty_size_check(&sr.rows, &sr.cols, err, sizeof err) < 0) {
        cx_start_free(&sr);
        return envd_reply_stream_error(c, CX_INVALID_ARGUMENT, err);
    }
    if (sr.cwd && cx_path_resolve(sr.cwd, ENVD_HOME, cwd, err, sizeof err) < 0) {
        cx_start_free(&sr);
        return envd_reply_stream_error(c, CX_INVALID_ARGUMENT, err);
    }
    if (q->nenvs + sr.nenvs > AGENT_MAX_ENV) {
        cx_start_free(&sr);
        return envd_reply_stream_error(c, CX_INVALID_ARGUMENT, "too many environment variables");
    }
    struct proc *p = calloc(1, sizeof *p);
    char **argv = calloc(sr.nargs + 2, sizeof *argv);
    char **env = calloc(q->nenvs + sr.nenvs + 1, sizeof *env);
    struct stream *st = NULL;
    struct agent_buf b = { 0 };
    if (!p || !argv || !env)
        goto oom;
    p->ac.fd = -1;
    pthread_mutex_init(&p->wlock, NULL);
    p->refs = 1;
    snprintf(p->sb, sizeof p->sb, "%s", q->sb);
    p->stdin_on = sr.stdin_on;
    p->pty = sr.has_pty;
    if (sr.tag && !(p->tag = strdup(sr.tag)))
        goto oom;
    if (!(p->config = config_json(&sr, sr.cwd ? cwd : NULL)))
        goto oom;
    argv[0] = sr.cmd;
    for (size_t i = 0; i < sr.nargs; i++)
        argv[i + 1] = sr.args[i];
    size_t ne = 0;
    for (size_t i = 0; i < q->nenvs; i++)
        env[ne++] = q->envs[i];
    for (size_t i = 0; i < sr.nenvs; i++)
        env[ne++] = sr.envs[i];
    /* envd kills the process when the call's Connect-Timeout-Ms runs out
     * (not when the client goes away): so does the agent's timeout. */
    const char *to = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Connect-Timeout-Ms");
    uint64_t tmo = 0;
    if (to && cx_timeout_parse(to, &tmo) < 0)
        tmo = 0;
    struct agent_exec ex = {
        .flags = (sr.stdin_on ? AGENT_EXEC_STDIN : 0) | (sr.has_pty ? AGENT_EXEC_PTY : 0),
        .rows = (uint16_t)sr.rows, .cols = (uint16_t)sr.cols, .argc = (uint32_t)sr.nargs + 1,
        .timeout_ms = tmo > UINT32_MAX ? UINT32_MAX : (uint32_t)tmo,
        .envc = (uint32_t)ne, .cwd = cwd, .argv = argv, .env = env,
    };
    r = agent_put_exec(&b, EXEC_ID, &ex);
    if (r == 0)
        r = agent_put_frame(&b, AGENT_T_PING, PING_ID, "envd", 4);
    if (r < 0) {
        agent_buf_free(&b);
        free(argv);
        free(env);
        cx_start_free(&sr);
        envd_proc_unref(s, p);
        return envd_reply_stream_error(c, CX_INVALID_ARGUMENT, "the command does not fit one agent frame (1 MiB)");
    }
    free(argv);
    free(env);
    argv = env = NULL;
    cx_start_free(&sr);
    if ((r = envd_agent_open(s, q, &p->ac)) < 0) {
        agent_buf_free(&b);
        envd_proc_unref(s, p);
        snprintf(err, sizeof err, "cannot reach the sandbox's guest agent: %s", strerror(-r));
        return envd_reply_stream_error(c, CX_UNAVAILABLE, err);
    }
    envd_live_add(s, &p->live, q->sb, p->ac.fd);
    r = envd_ag_send(&p->ac, &p->wlock, &b);
    agent_buf_free(&b);
    if (!(st = st_new(s, c, p)))
        goto oom;
    p->refs++;                              /* the stream's */
    p->attached = 1;
    pthread_mutex_lock(&s->lock);
    p->pid = ++s->next_pid ? s->next_pid : ++s->next_pid;
    pthread_mutex_unlock(&s->lock);
    if (r == 0)
        r = st_event(st, cx_event_start(p->pid));
    start_confirm(s, st, p, r);
    envd_proc_unref(s, p);                       /* ours; the stream keeps one */
    return st_respond(c, st);
oom:
    free(argv);
    free(env);
    cx_start_free(&sr);
    if (p && p->refs == 0)
        free(p);                /* argv or env failed: p was never set up */
    else if (p)
        envd_proc_unref(s, p);
    return envd_reply_stream_error(c, CX_INTERNAL, "out of memory");
}

enum MHD_Result envd_do_connect(struct envd_server *s, struct MHD_Connection *c, struct req *q,
                                const char *msg, size_t mlen)
{
    char err[512];
    struct cx_selector sel;
    if (cx_selector_decode(msg, mlen, &sel, err, sizeof err) < 0)
        return envd_reply_stream_error(c, CX_INVALID_ARGUMENT, err);
    struct proc *p = proc_find(s, q->sb, &sel);
    if (!p)
        return envd_reply_stream_error(c, CX_NOT_FOUND, "process not found");
    /* One reader at a time; a stream whose client just left detaches
     * within a second, the janitor within a quarter (and takes it no more
     * while we wait). */
    int ok = 0, gone = 0;
    pthread_mutex_lock(&s->lock);
    p->connecting++;
    pthread_mutex_unlock(&s->lock);
    for (int i = 0; i < 30 && !ok && !gone; i++) {
        if (i)
            usleep(100 * 1000);
        pthread_mutex_lock(&s->lock);
        if (!p->attached && p->in_table)
            ok = p->attached = 1;
        gone = !p->in_table;
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_lock(&s->lock);
    p->connecting--;
    pthread_mutex_unlock(&s->lock);
    if (!ok) {
        envd_proc_unref(s, p);
        if (gone)
            return envd_reply_stream_error(c, CX_NOT_FOUND, "process not found (it ended)");
        return envd_reply_stream_error(c, CX_FAILED_PRECONDITION, "another stream is attached to this process");
    }
    struct stream *st = st_new(s, c, p);
    if (!st || st_event(st, cx_event_start(p->pid)) < 0) {
        if (st)
            st_free(st);
        else {
            pthread_mutex_lock(&s->lock);
            p->attached = 0;
            pthread_mutex_unlock(&s->lock);
            envd_proc_unref(s, p);
        }
        return envd_reply_stream_error(c, CX_INTERNAL, "out of memory");
    }
    return st_respond(c, st);
}

enum MHD_Result envd_do_list(struct envd_server *s, struct MHD_Connection *c, struct req *q)
{
    json_t *arr = json_array();
    pthread_mutex_lock(&s->lock);
    for (struct proc *p = s->procs; p && arr; p = p->next) {
        if (strcmp(p->sb, q->sb) != 0)
            continue;
        json_t *e = json_pack("{s:O,s:I}", "config", p->config, "pid", (json_int_t)p->pid);
        if (e && p->tag)
            json_object_set_new(e, "tag", json_string(p->tag));
        json_array_append_new(arr, e);
    }
    pthread_mutex_unlock(&s->lock);
    return envd_reply_ok_json(c, json_pack("{s:o}", "processes", arr));
}

/* SendSignal, SendInput, CloseStdin: one frame to the process. */
enum MHD_Result envd_do_proc_frame(struct envd_server *s, struct MHD_Connection *c, struct req *q,
                                   const char *msg, size_t mlen)
{
    char err[512];
    struct cx_selector sel;
    struct agent_buf b = { 0 };
    uint8_t *data = NULL;
    size_t dlen = 0;
    int sig = 0, is_pty = 0, r;
    if (q->route == R_SEND_SIGNAL)
        r = cx_signal_decode(msg, mlen, &sel, &sig, err, sizeof err);
    else if (q->route == R_SEND_INPUT)
        r = cx_input_decode(msg, mlen, &sel, &data, &dlen, &is_pty, err, sizeof err);
    else
        r = cx_selector_decode(msg, mlen, &sel, err, sizeof err);
    if (r < 0)
        return envd_reply_cx(c, r == -ENOMEM ? CX_INTERNAL : CX_INVALID_ARGUMENT, r == -ENOMEM ? "out of memory" : err);
    struct proc *p = proc_find(s, q->sb, &sel);
    enum MHD_Result res;
    if (!p) {
        free(data);
        return envd_reply_cx(c, CX_NOT_FOUND, "process not found");
    }
    /* A pty process takes input.pty only (its stdin is the terminal);
     * any other takes input.stdin when started with stdin: true. */
    if (q->route != R_SEND_SIGNAL && p->pty && !is_pty) {
        res = envd_reply_cx(c, CX_FAILED_PRECONDITION, q->route == R_CLOSE_STDIN
                       ? "the process runs on a pty: send ^D (byte 4) as pty input instead"
                       : "the process runs on a pty: send input.pty");
        goto out;
    }
    if (is_pty && !p->pty) {
        res = envd_reply_cx(c, CX_FAILED_PRECONDITION, "the process has no pty");
        goto out;
    }
    if (q->route != R_SEND_SIGNAL && !p->pty && !p->stdin_on) {
        res = envd_reply_cx(c, CX_FAILED_PRECONDITION, "the process was started without stdin (stdin: true)");
        goto out;
    }
    if (q->route == R_SEND_SIGNAL)
        r = agent_put_u32(&b, AGENT_T_KILL, EXEC_ID, (uint32_t)sig);
    else if (q->route == R_CLOSE_STDIN)
        r = agent_put_frame(&b, AGENT_T_STDIN_EOF, EXEC_ID, NULL, 0);
    else
        for (size_t off = 0; r == 0 && off < dlen; off += AGENT_CHUNK)
            r = agent_put_frame(&b, AGENT_T_STDIN, EXEC_ID, data + off,
                                dlen - off < AGENT_CHUNK ? dlen - off : AGENT_CHUNK);
    if (r == 0)
        r = envd_ag_send(&p->ac, &p->wlock, &b);
    if (r < 0)
        res = envd_reply_cx(c, CX_UNAVAILABLE, "cannot reach the process through the guest agent");
    else
        res = envd_reply_ok_json(c, json_object());
out:
    agent_buf_free(&b);
    free(data);
    envd_proc_unref(s, p);
    return res;
}

/* Update: a new pty size. The agent's answer comes on the process's
 * stream, which this call does not read: everything it could refuse
 * (no pty, a bad size) is checked here first, and the size is sent
 * without waiting (an ERROR can then only be an ended process's, after
 * its EXIT). */
enum MHD_Result envd_do_update(struct envd_server *s, struct MHD_Connection *c, struct req *q,
                               const char *msg, size_t mlen)
{
    char err[256];
    struct cx_selector sel;
    int has_pty;
    uint32_t cols, rows;
    if (cx_update_decode(msg, mlen, &sel, &has_pty, &cols, &rows, err, sizeof err) < 0)
        return envd_reply_cx(c, CX_INVALID_ARGUMENT, err);
    if (has_pty && (!cols || !rows))
        return envd_reply_cx(c, CX_INVALID_ARGUMENT, "pty.size: cols and rows are required (at least 1)");
    if (has_pty && pty_size_check(&rows, &cols, err, sizeof err) < 0)
        return envd_reply_cx(c, CX_INVALID_ARGUMENT, err);
    struct proc *p = proc_find(s, q->sb, &sel);
    if (!p)
        return envd_reply_cx(c, CX_NOT_FOUND, "process not found");
    enum MHD_Result res;
    struct agent_buf b = { 0 };
    if (!has_pty) {
        res = envd_reply_ok_json(c, json_object());              /* nothing to update */
    } else if (!p->pty) {
        res = envd_reply_cx(c, CX_FAILED_PRECONDITION, "the process has no pty to resize");
    } else if (agent_put_resize(&b, EXEC_ID, (uint16_t)rows, (uint16_t)cols) < 0 ||
               envd_ag_send(&p->ac, &p->wlock, &b) < 0) {
        res = envd_reply_cx(c, CX_UNAVAILABLE, "cannot reach the process through the guest agent");
    } else {
        res = envd_reply_ok_json(c, json_object());
    }
    agent_buf_free(&b);
    envd_proc_unref(s, p);
    return res;
}


/* The janitor reads the processes no stream is attached to: their output
 * is dropped (as envd drops what no subscriber takes), so they never block
 * on a full pipe, and their EXIT takes them out of the table (List, kill). */
#define DRAIN_MAX (1u << 20)        /* per process per round: one flooding guest shares the janitor */

static void drain(struct envd_server *s, struct proc *p)
{
    uint8_t buf[65536];
    for (size_t got = 0; got < DRAIN_MAX;) {
        ssize_t k = recv(p->ac.fd, buf, sizeof buf, MSG_DONTWAIT);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && errno == EAGAIN)
            return;
        if (k <= 0 || agent_rx_push(&p->ac.rx, buf, (size_t)k) < 0) {
            proc_unlist(s, p);          /* the agent is gone: so is the process */
            return;
        }
        got += (size_t)k;
        struct agent_hdr h;
        const uint8_t *pl;
        int r;
        while ((r = agent_rx_next(&p->ac.rx, &h, &pl, NULL)) == 1)
            if (h.id == EXEC_ID && (h.type == AGENT_T_EXIT || h.type == AGENT_T_ERROR)) {
                proc_unlist(s, p);
                return;
            }
        if (r < 0) {
            proc_unlist(s, p);
            return;
        }
    }
}

/* Every round polls all the unattached processes (a growable array, not
 * the first N of the list: older ones would never be read). */
void *envd_janitor_main(void *arg)
{
    struct envd_server *s = arg;
    struct proc **ps = NULL;
    struct pollfd *pf = NULL;
    size_t cap = 0;
    while (!atomic_load(&s->stopping)) {
        nfds_t n = 0;
        pthread_mutex_lock(&s->lock);
        size_t want = 0;
        for (struct proc *p = s->procs; p; p = p->next)
            want++;
        if (want > cap) {
            struct proc **nps = realloc(ps, want * sizeof *ps);
            if (nps)
                ps = nps;
            struct pollfd *npf = nps ? realloc(pf, want * sizeof *pf) : NULL;
            if (npf)
                pf = npf;
            if (nps && npf)
                cap = want;
        }
        for (struct proc *p = s->procs; p && n < cap; p = p->next)
            if (!p->attached && !p->connecting) {
                p->attached = 2;
                p->refs++;
                ps[n] = p;
                pf[n] = (struct pollfd){ .fd = p->ac.fd, .events = POLLIN };
                n++;
            }
        pthread_mutex_unlock(&s->lock);
        if (!n) {
            usleep(250 * 1000);
            continue;
        }
        if (poll(pf, n, 250) < 0 && errno != EINTR)
            usleep(250 * 1000);
        for (nfds_t i = 0; i < n; i++) {
            if (pf[i].revents)
                drain(s, ps[i]);
            pthread_mutex_lock(&s->lock);
            ps[i]->attached = 0;
            pthread_mutex_unlock(&s->lock);
            envd_proc_unref(s, ps[i]);
        }
    }
    free(ps);
    free(pf);
    return NULL;
}
