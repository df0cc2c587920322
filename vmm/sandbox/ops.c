/* Operations on named sandboxes with structured results (see sandbox.h):
 * list, state, remove, pause, resume, stop. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vmm/sandbox/sandbox.h"

#define LIST_MAX 4096   /* names a listing looks at, as moat ls */

int sandbox_info(const char *name, struct sbx_info *out, struct sbx_err *err)
{
    struct sbx *s = malloc(sizeof *s);     /* ~17 KiB: not on a server thread's stack */
    if (!s)
        return sandbox_err(err, -ENOMEM, "out of memory");
    char p[PATH_MAX];
    int r = sandbox_paths(s, name, err);
    if (r == 0 && access(sandbox_path(s, "config", p, sizeof p), F_OK) != 0)
        r = sandbox_err(err, -ENOENT, "no sandbox named %s (moat ls)", name);
    if (r == 0) {
        sandbox_read_config(s);
        memset(out, 0, sizeof *out);
        snprintf(out->name, sizeof out->name, "%s", s->name);
        out->jailed = s->jail.on;
        out->jail_uid = s->jail.uid;
        out->jail_gid = s->jail.gid;
        out->state = sandbox_state(s, &out->pid, &out->uptime);
        sandbox_close(s);
    }
    free(s);
    return r;
}

int sandbox_list_of(const char *prefix, size_t size, int (*fill)(const char *name, void *elem), void **out,
                    size_t *n, struct sbx_err *err)
{
    *out = NULL;
    *n = 0;
    char **names = malloc(LIST_MAX * sizeof *names);
    if (!names)
        return sandbox_err(err, -ENOMEM, "out of memory");
    ssize_t k = sandbox_names(prefix, names, LIST_MAX, err);
    char *v = k > 0 ? calloc((size_t)k, size) : NULL;
    int r = k < 0 ? (int)k : k > 0 && !v ? sandbox_err(err, -ENOMEM, "out of memory") : 0;
    for (ssize_t i = 0; i < k; i++) {
        if (r == 0 && fill(names[i], v + *n * size) == 0)
            (*n)++;         /* else left out */
        free(names[i]);
    }
    free(names);
    if (r < 0) {
        free(v);
        *n = 0;
        return r;
    }
    *out = v;
    return 0;
}

/* A sandbox's state (sandbox_info) into elem: 0, or -1 when it is no
 * sandbox (no config). */
static int info_of(const char *name, void *elem)
{
    return sandbox_info(name, elem, NULL) == 0 ? 0 : -1;
}

int sandbox_list(const char *prefix, struct sbx_info **out, size_t *n, struct sbx_err *err)
{
    void *v;
    int r = sandbox_list_of(prefix, sizeof **out, info_of, &v, n, err);
    *out = v;
    return r;
}

int sandbox_state_name(const char *name, char *out, size_t len)
{
    struct sbx_info info;
    if (!sandbox_valid_name(name))
        return -EINVAL;
    int r = sandbox_info(name, &info, NULL);
    if (r < 0)
        return r == -ENOENT ? -ENOENT : -EINVAL;
    snprintf(out, len, "%s", sandbox_state_str(info.state));
    return 0;
}

int sandbox_remove(const char *name, int force, struct sbx_err *err)
{
    struct sbx *s = malloc(sizeof *s);
    if (!s)
        return sandbox_err(err, -ENOMEM, "out of memory");
    int r = sandbox_open(s, name, 1, err);
    if (r < 0) {
        free(s);
        return r;
    }
    pid_t pid = sandbox_read_pid(s);
    if (pid > 0 && sandbox_pid_is_ours(s, pid)) {
        char reply[256];
        sandbox_ctl_request(s, "stop", reply, sizeof reply, 5);
        if (sandbox_wait_gone(s, pid, 10, force) < 0) {
            r = sandbox_err(err, -EBUSY, "sandbox %s does not stop; moat rm -f kills it", s->name);
            goto out;
        }
    }
    int e = sandbox_rm_rf(s->dir);
    if (e < 0)
        r = sandbox_err(err, e, "removing %s: %s", s->dir, SBX_STRERROR(-e));
    e = sandbox_jail_cleanup(s, err);
    r = r < 0 ? r : e;
out:
    sandbox_close(s);
    free(s);
    return r;
}

static int pause_resume(const char *name, const char *verb, struct sbx_err *err)
{
    struct sbx *s = malloc(sizeof *s);
    if (!s)
        return sandbox_err(err, -ENOMEM, "out of memory");
    int r = sandbox_open(s, name, 1, err);
    if (r == 0) {
        pid_t pid;
        double up;
        r = sandbox_need_live(s, sandbox_state(s, &pid, &up), verb, err);
        if (r == 0)
            r = sandbox_ctl(s, verb, NULL, 0, 10, err);
        sandbox_close(s);
    }
    free(s);
    return r;
}

int sandbox_pause(const char *name, struct sbx_err *err)
{
    return pause_resume(name, "pause", err);
}

int sandbox_resume(const char *name, struct sbx_err *err)
{
    return pause_resume(name, "resume", err);
}

int sandbox_promote_snap_new(struct sbx *s, struct sbx_err *err)
{
    char nw[PATH_MAX], snap[PATH_MAX], p[PATH_MAX];
    sandbox_path(s, "snap.new", nw, sizeof nw);
    sandbox_path(s, "snap", snap, sizeof snap);
    if (access(sandbox_path(s, "snap.new/state", p, sizeof p), F_OK) != 0) {
        sandbox_rm_rf(nw);              /* nothing, or an incomplete one */
        return 0;
    }
    if (renameat2(AT_FDCWD, nw, AT_FDCWD, snap, RENAME_EXCHANGE) == 0) {
        sandbox_rm_rf(nw);              /* now the old snapshot */
        return 0;
    }
    if (errno == ENOENT && rename(nw, snap) == 0)   /* no snap yet */
        return 0;
    int e = errno;
    return sandbox_err(err, -e, "%s: %s", snap, SBX_STRERROR(e));
}

/* A failure the CLI never said anything about: the code only. */
static int quiet_fail(struct sbx_err *err, int code)
{
    if (err && !err->code)
        err->code = code;
    return code;
}

static void step(sbx_phase_fn *phase, void *ctx, const char *name)
{
    if (phase)
        phase(ctx, name);
}

int sandbox_stop_locked(struct sbx *s, sbx_phase_fn *phase, void *ctx, enum sbx_state *was,
                        struct sbx_err *err)
{
    pid_t pid;
    double up;
    enum sbx_state st = sandbox_state(s, &pid, &up);
    *was = st;
    step(phase, ctx, "state");
    if (st == SBX_STOPPED)
        return 0;
    int r;
    if (s->ephemeral) {
        if (pid > 0 && (r = sandbox_kill_process(s, pid, err)) < 0)
            return r;
        if ((r = sandbox_rm_rf(s->dir)) < 0)
            return quiet_fail(err, r);
        return sandbox_jail_cleanup(s, err);
    }
    if ((r = sandbox_need_live(s, st, "stop", err)) < 0)
        return r;
    char nw[PATH_MAX], req[PATH_MAX + 32], p[PATH_MAX];
    sandbox_path(s, "snap.new", nw, sizeof nw);
    sandbox_rm_rf(nw);
    snprintf(req, sizeof req, "stop-snapshot %s", nw);
    if ((r = sandbox_ctl(s, req, NULL, 0, 600, err)) < 0)
        return r;
    step(phase, ctx, "snapshot");
    /* snap.new is whole and durable (the reply comes after its directory
     * sync): it takes snap's place while the VMM process exits (tearing
     * down a VM takes milliseconds). The files of the old snapshot that
     * the process may still map are unlinked, never changed. */
    int pr = sandbox_promote_snap_new(s, err);
    step(phase, ctx, "promoted");
    if ((r = sandbox_wait_gone(s, pid, 30, 1)) < 0)
        return quiet_fail(err, r);
    step(phase, ctx, "exited");
    unlink(sandbox_path(s, "pid", p, sizeof p));
    return pr;
}

int sandbox_stop(const char *name, sbx_phase_fn *phase, void *ctx, enum sbx_state *was,
                 struct sbx_err *err)
{
    int r;
    struct sbx *s = sandbox_open_alloc(name, 1, &r, err);
    if (!s)
        return r;
    step(phase, ctx, "locked");
    r = sandbox_stop_locked(s, phase, ctx, was, err);
    sandbox_free(s);
    return r;
}
