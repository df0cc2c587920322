/* envd's REST /files (serve_envd.c): downloads streamed from the agent,
 * uploads (multipart or a raw body, gzip decoded on the way) streamed to
 * it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>

#include "vmm/api/e2b/gz_stream.h"

#include "vmm/api/e2b/envd_int.h"

struct download {
    struct envd_server *s;
    struct agent_client ac;
    struct live live;
    uint8_t *pend;
    size_t plen, poff;
    int ended;
    uint32_t id;
};

static void dl_free(void *cls)
{
    struct download *d = cls;
    envd_live_del(d->s, &d->live);
    agent_client_close(&d->ac);
    free(d->pend);
    free(d);
}

/* The next FILE_DATA into d->pend; 1 at FILE_END; <0 on errors (*eno,
 * msg for an ERROR). */
static int dl_next(struct download *d, int *eno, char *msg, size_t ml)
{
    for (;;) {
        struct agent_hdr h;
        const uint8_t *pl;
        int r = envd_ag_next(&d->ac, &h, &pl, d->ac.timeout_ms, &d->live, -1);
        if (r < 0)
            return r;
        if (h.id != d->id)
            continue;
        if (h.type == AGENT_T_FILE_DATA) {
            uint8_t *n = realloc(d->pend, h.len ? h.len : 1);
            if (!n)
                return -ENOMEM;
            d->pend = n;
            memcpy(n, pl, h.len);
            d->plen = h.len;
            d->poff = 0;
            return 0;
        }
        if (h.type == AGENT_T_FILE_END)
            return 1;
        struct agent_error er;
        if (h.type != AGENT_T_ERROR || agent_error_decode(pl, h.len, &er, NULL) < 0)
            return -EPROTO;
        *eno = (int)er.sys_errno;
        snprintf(msg, ml, "%.*s", (int)er.msg_len, er.msg);
        return -EREMOTEIO;
    }
}

static ssize_t dl_read(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    struct download *d = cls;
    while (d->poff == d->plen) {
        if (d->ended)
            return MHD_CONTENT_READER_END_OF_STREAM;
        int eno;
        char msg[64];
        int r = dl_next(d, &eno, msg, sizeof msg);
        if (r < 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (r == 1)
            d->ended = 1;
    }
    size_t n = d->plen - d->poff;
    if (n > max)
        n = max;
    memcpy(out, d->pend + d->poff, n);
    d->poff += n;
    return (ssize_t)n;
}

enum MHD_Result envd_do_download(struct envd_server *s, struct MHD_Connection *c, struct req *q)
{
    char err[1300], path[CX_MAX_PATH + 1], msg[1100];
    const char *qp = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "path");
    if (!qp)
        return envd_reply_rest_error(c, 400, "the path query parameter is required");
    if (strlen(qp) > CX_MAX_PATH || cx_path_resolve(qp, ENVD_HOME, path, err, sizeof err) < 0)
        return envd_reply_rest_error(c, 400, "path is too long");
    struct download *d = calloc(1, sizeof *d);
    if (!d)
        return envd_reply_rest_error(c, 500, "out of memory");
    d->s = s;
    int r = envd_agent_open(s, q, &d->ac);
    if (r < 0) {
        free(d);
        snprintf(err, sizeof err, "cannot reach the sandbox's guest agent: %s", strerror(-r));
        return envd_reply_rest_error(c, 502, err);
    }
    envd_live_add(s, &d->live, q->sb, d->ac.fd);
    struct agent_buf b = { 0 };
    d->id = d->ac.next_id++;
    r = agent_put_frame(&b, AGENT_T_FILE_READ, d->id, path, strlen(path));
    if (r == 0)
        r = envd_ag_send(&d->ac, NULL, &b);
    agent_buf_free(&b);
    int eno = 0;
    if (r == 0)
        r = dl_next(d, &eno, msg, sizeof msg);
    if (r < 0) {
        unsigned st = 502;
        if (r == -EREMOTEIO) {
            enum cx_code code = cx_code_from_errno(eno);
            st = code == CX_INTERNAL ? 500 : cx_code_http(code);
            snprintf(err, sizeof err, "%s: %s", path, eno ? strerror(eno) : msg);
        } else {
            snprintf(err, sizeof err, "%s: %s", path, strerror(-r));
        }
        dl_free(d);
        return envd_reply_rest_error(c, st, err);
    }
    if (r == 1) {                       /* an empty file */
        dl_free(d);
        return envd_reply(c, 200, "application/octet-stream", NULL, 0);
    }
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, dl_read, d,
                                                                  dl_free);
    if (!resp) {
        dl_free(d);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
    enum MHD_Result res = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return res;
}

struct upload {
    struct envd_server *s;
    struct agent_client ac;
    int open;
    struct live live;
    struct MHD_PostProcessor *pp;
    int octet;
    char qpath[CX_MAX_PATH + 1];      /* resolved ?path=, "" if none */
    char path[CX_MAX_PATH + 1];       /* the file being written */
    int in_file, wrote;
    uint64_t got;                     /* bytes of the current part so far */
    char name[CX_MAX_PATH + 1];       /* its file name as sent */
    uint8_t *buf;
    size_t len;
    json_t *results;
    unsigned err_status;              /* 0: fine so far */
    char err[5400];
    /* Content-Encoding: gzip: the body is inflated (gz_stream.c) before
     * the multipart parser or the file sees it; NULL for a plain body. */
    struct gz_stream *gz;
};

/* The first error of an upload: "what path: msg" (path, msg may be ""). */
static void up_error(struct upload *u, unsigned status, const char *what, const char *path, const char *msg)
{
    if (u->err_status)
        return;
    u->err_status = status;
    snprintf(u->err, sizeof u->err, "%.64s%s%.4096s%s%.1100s", what, *path ? " " : "", path,
             *msg ? ": " : "", msg);
}

static void up_flush(struct upload *u)
{
    if (u->err_status)
        return;
    struct agent_buf b = { 0 };
    uint32_t id = u->ac.next_id++;
    int eno = 0;
    char msg[1100];
    int r = agent_put_fwrite(&b, id, u->wrote ? AGENT_FW_APPEND : 0, 0644, u->path, u->buf, u->len);
    if (r == 0)
        r = envd_ag_call(&u->ac, &u->live, &b, id, &eno, msg, sizeof msg);
    agent_buf_free(&b);
    u->len = 0;
    u->wrote = 1;
    if (r == -EREMOTEIO) {
        enum cx_code code = cx_code_from_errno(eno);
        up_error(u, code == CX_RESOURCE_EXHAUSTED ? 507 : code == CX_INTERNAL ? 500 : cx_code_http(code),
                 "write", u->path, msg);
    } else if (r < 0) {
        up_error(u, 502, "write", u->path, strerror(-r));
    }
}

static void up_begin(struct upload *u, const char *name)
{
    char err[512];
    const char *want = u->qpath[0] ? u->qpath : name;
    u->in_file = 1;
    u->wrote = 0;
    u->len = 0;
    if (u->err_status)
        return;
    if (!want || !*want) {
        up_error(u, 400, "a file part needs a file name or the path query parameter", "", "");
        return;
    }
    if (want != u->qpath && cx_path_resolve(want, ENVD_HOME, u->path, err, sizeof err) < 0) {
        up_error(u, 400, "path", "", err);
        return;
    }
    if (want == u->qpath)
        strcpy(u->path, u->qpath);
    char dir[CX_MAX_PATH + 1], msg[1100];
    int eno = 0;
    if (envd_parent_of(u->path, dir, sizeof dir) == 0) {
        struct agent_buf b = { 0 };
        uint32_t id = u->ac.next_id++;
        int r = agent_put_mkdir(&b, id, 0755, AGENT_MKDIR_PARENTS, dir);
        if (r == 0)
            r = envd_ag_call(&u->ac, &u->live, &b, id, &eno, msg, sizeof msg);
        agent_buf_free(&b);
        if (r < 0) {
            enum cx_code code = r == -EREMOTEIO ? cx_code_from_errno(eno) : CX_UNAVAILABLE;
            up_error(u, code == CX_RESOURCE_EXHAUSTED ? 507 : code == CX_UNAVAILABLE ? 502 : cx_code_http(code),
                     "mkdir", dir, r == -EREMOTEIO ? msg : strerror(-r));
        }
    }
}

static void up_data(struct upload *u, const char *data, size_t n)
{
    while (n && !u->err_status) {
        size_t k = AGENT_CHUNK - u->len;
        if (k > n)
            k = n;
        memcpy(u->buf + u->len, data, k);
        u->len += k;
        data += k;
        n -= k;
        if (u->len == AGENT_CHUNK)
            up_flush(u);
    }
}

static void up_end(struct upload *u)
{
    if (!u->in_file)
        return;
    u->in_file = 0;
    if (u->len || !u->wrote)
        up_flush(u);
    if (u->err_status)
        return;
    const char *name = strrchr(u->path, '/');
    json_t *e = json_pack("{s:s,s:s,s:s}", "name", name ? name + 1 : u->path, "type", "file", "path", u->path);
    if (!e || json_array_append_new(u->results, e) < 0)
        up_error(u, 500, "out of memory", "", "");
}

static enum MHD_Result up_iter(void *cls, enum MHD_ValueKind kind, const char *key, const char *filename,
                               const char *ctype, const char *enc, const char *data, uint64_t off, size_t size)
{
    (void)kind;
    (void)ctype;
    (void)enc;
    struct upload *u = cls;
    if (!key || strcmp(key, "file") != 0)
        return MHD_YES;             /* other form fields are ignored */
    /* A part may start with an empty call at offset 0: the same part goes
     * on while nothing came and the file name is the same. */
    if (off == 0 && (!u->in_file || u->got || strcmp(u->name, filename ? filename : "") != 0)) {
        up_end(u);
        snprintf(u->name, sizeof u->name, "%s", filename ? filename : "");
        u->got = 0;
        up_begin(u, filename);
    }
    u->got += size;
    up_data(u, data, size);
    return MHD_YES;
}

/* The decoded body: to the multipart parser or straight to the file. */
static void up_body(struct upload *u, const char *data, size_t n)
{
    if (u->pp) {
        if (!u->err_status && MHD_post_process(u->pp, data, n) != MHD_YES)
            up_error(u, 400, "malformed multipart/form-data body", "", "");
    } else {
        up_data(u, data, n);
    }
}

/* Decoded body bytes from gz_stream: on to the parser or the file; an
 * error there (already recorded) stops the decoding. */
static int up_gz_sink(void *ctx, const uint8_t *data, size_t n)
{
    struct upload *u = ctx;
    up_body(u, (const char *)data, n);
    return u->err_status ? -ECANCELED : 0;
}

/* A gz_stream result as the upload's error: 413 past max_inflate, 500
 * out of memory, else 400 with the decoder's reason. */
static void up_gz_result(struct upload *u, int r)
{
    if (r == 0 || u->err_status)
        return;                     /* fine, or the sink's error is the upload's */
    if (r == -EFBIG)
        up_error(u, 413, "gzip body too large", "", gz_stream_reason(u->gz));
    else if (r == -ENOMEM)
        up_error(u, 500, "out of memory", "", "");
    else
        up_error(u, 400, "malformed gzip body", "", gz_stream_reason(u->gz));
}

/* Body bytes as they arrive: inflated first when the body is gzip
 * (gz_stream.c: 64 KiB at a time, never the whole body in memory;
 * concatenated members are one stream, anything else after a member's end
 * is an error; decoded bytes past max_inflate end the upload with 413).
 * After an error the rest is dropped without being inflated. */
void envd_up_input(struct upload *u, const char *data, size_t n)
{
    if (!u->gz) {
        up_body(u, data, n);
        return;
    }
    if (!u->err_status)
        up_gz_result(u, gz_stream_feed(u->gz, data, n, up_gz_sink, u));
}

/* The body's end: a gzip stream must hold whole members, at least one. */
static void up_input_end(struct upload *u)
{
    if (u->gz && !u->err_status)
        up_gz_result(u, gz_stream_finish(u->gz));
}

void envd_up_free(struct upload *u)
{
    if (!u)
        return;
    if (u->pp)
        MHD_destroy_post_processor(u->pp);
    if (u->open) {
        envd_live_del(u->s, &u->live);
        agent_client_close(&u->ac);
    }
    json_decref(u->results);
    gz_stream_free(u->gz);
    free(u->buf);
    free(u);
}

/* First call of POST /files: check the request, connect to the agent. */
int envd_up_start(struct envd_server *s, struct MHD_Connection *c, struct req *q)
{
    char err[1300];
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    const char *ce = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Encoding");
    const char *qp = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "path");
    int gz = 0;
    if (ce && *ce && strcasecmp(ce, "identity") != 0) {
        if (strcasecmp(ce, "gzip") != 0 && strcasecmp(ce, "x-gzip") != 0)
            return envd_reply_rest_error(c, 415, "unsupported Content-Encoding (POST /files takes gzip or identity)")
                           == MHD_YES ? 1 : -1;
        gz = 1;
    }
    struct upload *u = calloc(1, sizeof *u);
    if (!u || !(u->buf = malloc(AGENT_CHUNK)) || !(u->results = json_array())) {
        envd_up_free(u);
        return envd_reply_rest_error(c, 500, "out of memory") == MHD_YES ? 1 : -1;
    }
    if (gz && gz_stream_init(&u->gz, s->o.max_inflate) < 0) {
        envd_up_free(u);
        return envd_reply_rest_error(c, 500, "out of memory") == MHD_YES ? 1 : -1;
    }
    u->s = s;
    if (qp && *qp && (strlen(qp) > CX_MAX_PATH || cx_path_resolve(qp, ENVD_HOME, u->qpath, err, sizeof err) < 0)) {
        envd_up_free(u);
        return envd_reply_rest_error(c, 400, "path is too long") == MHD_YES ? 1 : -1;
    }
    if (ct && strncasecmp(ct, "multipart/form-data", 19) == 0) {
        u->pp = MHD_create_post_processor(c, 64 * 1024, up_iter, u);
        if (!u->pp) {
            envd_up_free(u);
            return envd_reply_rest_error(c, 400, "malformed multipart/form-data Content-Type") == MHD_YES ? 1 : -1;
        }
    } else if (ct && strncasecmp(ct, "application/octet-stream", 24) == 0) {
        if (!u->qpath[0]) {
            envd_up_free(u);
            return envd_reply_rest_error(c, 400, "an application/octet-stream upload needs the path query parameter")
                           == MHD_YES ? 1 : -1;
        }
        u->octet = 1;
    } else {
        envd_up_free(u);
        return envd_reply_rest_error(c, 415, "POST /files takes multipart/form-data or application/octet-stream")
                       == MHD_YES ? 1 : -1;
    }
    int r = envd_agent_open(s, q, &u->ac);
    if (r < 0) {
        envd_up_free(u);
        snprintf(err, sizeof err, "cannot reach the sandbox's guest agent: %s", strerror(-r));
        return envd_reply_rest_error(c, 502, err) == MHD_YES ? 1 : -1;
    }
    u->open = 1;
    envd_live_add(s, &u->live, q->sb, u->ac.fd);
    if (u->octet)
        up_begin(u, NULL);
    q->up = u;
    return 0;
}

enum MHD_Result envd_up_finish(struct MHD_Connection *c, struct req *q)
{
    struct upload *u = q->up;
    up_input_end(u);
    if (u->pp) {
        /* Destroying the processor hands over what it held back and says
         * whether the body ended where multipart says it must. */
        enum MHD_Result ok = MHD_destroy_post_processor(u->pp);
        u->pp = NULL;
        if (ok != MHD_YES)
            up_error(u, 400, "malformed multipart/form-data body", "", "");
    }
    up_end(u);
    if (!u->err_status && json_array_size(u->results) == 0)
        up_error(u, 400, "no part named 'file' in the upload", "", "");
    if (u->err_status)
        return envd_reply_rest_error(c, u->err_status, u->err);
    return envd_reply_ok_json(c, json_incref(u->results));
}
