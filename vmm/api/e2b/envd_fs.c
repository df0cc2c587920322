/* envd's filesystem.Filesystem (serve_envd.c): Stat, MakeDir, Move,
 * ListDir, Remove through the agent. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/api/e2b/envd_int.h"

struct fs_ctx {
    struct agent_client ac;
    struct live live;
};

static enum cx_code fs_code(int r, int eno)
{
    if (r == -EREMOTEIO)
        return eno ? cx_code_from_errno(eno) : CX_INTERNAL;
    if (r == -ENOSYS)
        return CX_UNIMPLEMENTED;
    if (r == -ETIMEDOUT)
        return CX_DEADLINE_EXCEEDED;
    return CX_UNAVAILABLE;
}

static enum MHD_Result fs_fail(struct MHD_Connection *c, struct fs_ctx *f, int r, const char *what,
                               const char *path, const char *amsg)
{
    char m[700];
    int eno = r == -EREMOTEIO ? agent_client_last_errno(&f->ac) : 0;
    if (r == -EREMOTEIO)
        snprintf(m, sizeof m, "%s %s: %s", what, path, amsg);
    else
        snprintf(m, sizeof m, "%s %s: %s", what, path, strerror(-r));
    return envd_reply_cx(c, fs_code(r, eno), m);
}

static enum MHD_Result reply_entry(struct MHD_Connection *c, const struct agent_stat *st)
{
    char *e = cx_entry_json(st);
    if (!e)
        return envd_reply_cx(c, CX_INTERNAL, "the entry's name is not UTF-8");
    size_t n = strlen(e) + 16;
    char *body = malloc(n);
    if (!body) {
        free(e);
        return envd_reply_cx(c, CX_INTERNAL, "out of memory");
    }
    snprintf(body, n, "{\"entry\":%s}", e);
    enum MHD_Result res = envd_reply(c, 200, "application/json", body, strlen(body));
    free(body);
    free(e);
    return res;
}

/* A listing is built as JSON objects directly, within a budget of the
 * JSON it dumps to (LIST_BUDGET): a guest's 100000 entries with 4 KiB
 * paths would otherwise cost gigabytes per request. */
#define LIST_BUDGET (32u << 20)
enum { LIST_OVER = 1, LIST_NOT_UTF8, LIST_NOMEM };

struct list_acc {
    json_t *arr;
    size_t bytes;
    int stop;                   /* LIST_*: why the callback stopped */
    char bad[128];              /* LIST_NOT_UTF8: the entry's path, escaped */
};

static int list_cb(void *arg, const struct agent_stat *e)
{
    struct list_acc *a = arg;
    a->bytes += cx_entry_json_size(e) + 1;
    if (a->bytes > LIST_BUDGET)
        return a->stop = LIST_OVER;
    json_t *v = cx_entry_obj(e);
    if (!v) {
        /* Not UTF-8 (or no memory): the whole listing fails rather than
         * leaving the entry out silently. */
        size_t o = 0, n = strnlen(e->path, sizeof e->path);
        for (size_t i = 0; i < n && o + 5 < sizeof a->bad; i++) {
            unsigned char ch = (unsigned char)e->path[i];
            if (ch >= 0x20 && ch < 0x7f && ch != '\\')
                a->bad[o++] = (char)ch;
            else
                o += (size_t)snprintf(a->bad + o, sizeof a->bad - o, "\\x%02x", ch);
        }
        a->bad[o] = 0;
        return a->stop = LIST_NOT_UTF8;
    }
    if (json_array_append_new(a->arr, v) < 0)
        return a->stop = LIST_NOMEM;
    return 0;
}

/* The parent of path (absolute) into out; 0, or -EINVAL at "/". */
int envd_parent_of(const char *path, char *out, size_t n)
{
    const char *slash = strrchr(path, '/');
    if (!slash || slash == path)
        return -EINVAL;
    snprintf(out, n, "%.*s", (int)(slash - path), path);
    return 0;
}

static int fs_mkdir(struct fs_ctx *f, const char *path, int parents, int *eno, char *msg, size_t ml)
{
    struct agent_buf b = { 0 };
    uint32_t id = f->ac.next_id++;
    int r = agent_put_mkdir(&b, id, 0755, parents ? AGENT_MKDIR_PARENTS : 0, path);
    if (r == 0)
        r = envd_ag_call(&f->ac, &f->live, &b, id, eno, msg, ml);
    agent_buf_free(&b);
    return r;
}

/* Filesystem.ListDir: the entries under p1, depth deep, in one answer
 * (at most LIST_BUDGET of JSON). */
static enum MHD_Result fs_list(struct MHD_Connection *c, struct fs_ctx *f, const char *p1, uint32_t depth,
                               char *amsg, size_t alen)
{
    enum MHD_Result res;
    int r;
    struct list_acc *a = calloc(1, sizeof *a);
    if (a && !(a->arr = json_array())) {
        free(a);
        a = NULL;
    }
    r = a ? agent_client_list(&f->ac, p1, depth, list_cb, a, amsg, alen) : -ENOMEM;
    if (a && a->stop)
        r = a->stop;        /* whatever draining the rest gave */
    if (r != 0)
        json_decref(a ? a->arr : NULL);
    if (r == LIST_OVER) {
        snprintf(amsg, alen, "list %s: the listing exceeds %u MiB of JSON (list less deep)", p1,
                 LIST_BUDGET >> 20);
        res = envd_reply_cx(c, CX_RESOURCE_EXHAUSTED, amsg);
    } else if (r == LIST_NOT_UTF8) {
        snprintf(amsg, alen, "list %s: the entry %s has a name, owner, group or link target that "
                 "is not UTF-8", p1, a->bad);
        res = envd_reply_cx(c, CX_INTERNAL, amsg);
    } else if (r == LIST_NOMEM) {
        res = envd_reply_cx(c, CX_INTERNAL, "out of memory");
    } else if (r < 0) {
        res = fs_fail(c, f, r, "list", p1, amsg);
    } else {
        res = envd_reply_ok_json(c, json_pack("{s:o}", "entries", a->arr));
    }
    free(a);
    return res;
}

enum MHD_Result envd_do_fs(struct envd_server *s, struct MHD_Connection *c, struct req *q, const char *msg,
                           size_t mlen)
{
    char err[512], amsg[1100] = "";
    struct cx_fs fr;
    enum cx_fs_kind kind = q->route == R_MOVE ? CX_FS_MOVE : q->route == R_LIST_DIR ? CX_FS_LIST : CX_FS_PATH;
    int r = cx_fs_decode(kind, msg, mlen, &fr, err, sizeof err);
    if (r < 0)
        return envd_reply_cx(c, CX_INVALID_ARGUMENT, err);
    char *p1 = malloc(CX_MAX_PATH + 1), *p2 = malloc(CX_MAX_PATH + 1), *dir = NULL;
    struct agent_stat *st = malloc(sizeof *st);
    struct fs_ctx *f = calloc(1, sizeof *f);
    enum MHD_Result res;
    if (!p1 || !p2 || !st || !f) {
        res = envd_reply_cx(c, CX_INTERNAL, "out of memory");
        goto out;
    }
    if (cx_path_resolve(fr.path, ENVD_HOME, p1, err, sizeof err) < 0 ||
        (kind == CX_FS_MOVE && cx_path_resolve(fr.dest, ENVD_HOME, p2, err, sizeof err) < 0)) {
        res = envd_reply_cx(c, CX_INVALID_ARGUMENT, err);
        goto out;
    }
    if ((r = envd_agent_open(s, q, &f->ac)) < 0) {
        snprintf(err, sizeof err, "cannot reach the sandbox's guest agent: %s", strerror(-r));
        res = envd_reply_cx(c, CX_UNAVAILABLE, err);
        f->ac.fd = -1;
        goto out;
    }
    envd_live_add(s, &f->live, q->sb, f->ac.fd);
    int eno = 0;
    switch (q->route) {
    case R_STAT:
        r = agent_client_stat(&f->ac, p1, 1, st, amsg, sizeof amsg);
        res = r < 0 ? fs_fail(c, f, r, "stat", p1, amsg) : reply_entry(c, st);
        break;
    case R_MAKE_DIR:
        r = agent_client_stat(&f->ac, p1, 1, st, amsg, sizeof amsg);
        if (r == 0) {
            snprintf(err, sizeof err, "%s already exists%s", p1, st->type == AGENT_FT_DIR ? "" : " (not a directory)");
            res = envd_reply_cx(c, st->type == AGENT_FT_DIR ? CX_ALREADY_EXISTS : CX_INVALID_ARGUMENT, err);
            break;
        }
        if (r != -EREMOTEIO || agent_client_last_errno(&f->ac) != ENOENT) {
            res = fs_fail(c, f, r, "stat", p1, amsg);
            break;
        }
        r = fs_mkdir(f, p1, 1, &eno, amsg, sizeof amsg);
        if (r < 0) {
            snprintf(err, sizeof err, "mkdir %s: %s", p1, r == -EREMOTEIO ? amsg : strerror(-r));
            res = envd_reply_cx(c, fs_code(r, eno), err);
            break;
        }
        r = agent_client_stat(&f->ac, p1, 1, st, amsg, sizeof amsg);
        res = r < 0 ? fs_fail(c, f, r, "stat", p1, amsg) : reply_entry(c, st);
        break;
    case R_MOVE:
        /* the destination's parent: as long as any path (CX_MAX_PATH) */
        if (!(dir = malloc(CX_MAX_PATH + 1))) {
            res = envd_reply_cx(c, CX_INTERNAL, "out of memory");
            break;
        }
        if (envd_parent_of(p2, dir, CX_MAX_PATH + 1) == 0 && (r = fs_mkdir(f, dir, 1, &eno, amsg, sizeof amsg)) < 0) {
            char m[1200];
            snprintf(m, sizeof m, "mkdir %s: %s", dir, r == -EREMOTEIO ? amsg : strerror(-r));
            res = envd_reply_cx(c, fs_code(r, eno), m);
            break;
        }
        r = agent_client_rename(&f->ac, p1, p2, amsg, sizeof amsg);
        if (r < 0) {
            res = fs_fail(c, f, r, "rename", p1, amsg);
            break;
        }
        r = agent_client_stat(&f->ac, p2, 1, st, amsg, sizeof amsg);
        res = r < 0 ? fs_fail(c, f, r, "stat", p2, amsg) : reply_entry(c, st);
        break;
    case R_LIST_DIR:
        res = fs_list(c, f, p1, fr.depth, amsg, sizeof amsg);
        break;
    default: /* R_REMOVE: like os.RemoveAll, a missing path is fine */
        r = agent_client_remove(&f->ac, p1, 1, amsg, sizeof amsg);
        if (r < 0 && !(r == -EREMOTEIO && agent_client_last_errno(&f->ac) == ENOENT))
            res = fs_fail(c, f, r, "remove", p1, amsg);
        else
            res = envd_reply_ok_json(c, json_object());
        break;
    }
    envd_live_del(s, &f->live);
    agent_client_close(&f->ac);
out:
    free(p1);
    free(p2);
    free(dir);
    free(st);
    free(f);
    return res;
}
