/* A command in a guest and files to and from it through its agent (see
 * exec.h): moat exec and moat cp as library calls. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vmm/agent/agent_client.h"
#include "vmm/base/clock.h"
#include "vmm/sandbox/exec.h"
#include "vmm/sandbox/start.h"

void sandbox_agent_target_init(struct sbx_agent_target *t)
{
    memset(t, 0, sizeof *t);
    t->port = AGENT_DEFAULT_PORT;
    t->keep = -1;
}

void sandbox_agent_target_release(struct sbx_agent_target *t)
{
    if (t->keep >= 0)
        close(t->keep);
    t->keep = -1;
}

/* Start the stopped sandbox s->name (sandbox_start: up to "the guest
 * runs"). 0 or -errno with why. */
static int start_stopped(const struct sbx *s, struct sbx_err *err)
{
    struct sbx_start_opts o = { 0 };
    enum sbx_state was = SBX_DEAD;
    int r = sandbox_start(s->name, &o, &was, NULL, err);
    if (r == 0 && (was == SBX_RUNNING || was == SBX_PAUSED))
        sandbox_err(err, 0, "sandbox %s is already %s", s->name, sandbox_state_str(was));
    return r;
}

/* s (opened) in state st as t's agent: its vsock socket, a jailed one's
 * through a descriptor of its own kept in t. 0 or -errno with why. */
static int target_of(const struct sbx *s, enum sbx_state st, struct sbx_agent_target *t,
                     struct sbx_err *err)
{
    if (st != SBX_RUNNING)
        return sandbox_err(err, -EINVAL, "sandbox %s is %s%s", s->name, sandbox_state_str(st),
                           st == SBX_PAUSED ? " (moat resume it first)" :
                           st == SBX_DEAD ? " (its process has exited; see its moat.log and console.log)" : "");
    char via[64];
    int keep;
    const char *p = sandbox_sock_via(s, s->vsock, via, sizeof via, &keep);
    if (!p) {
        int e = errno ? errno : ENOTSOCK;
        return sandbox_err(err, -e, "sandbox %s: %s is not a socket", s->name, s->vsock);
    }
    sandbox_agent_target_release(t);
    snprintf(t->buf, sizeof t->buf, "%s", p);
    t->path = t->buf;
    t->keep = keep;
    t->hybrid = 1;
    if (t->wait < 10)
        t->wait = 10;   /* after a restore the agent may take a moment */
    return 0;
}

int sandbox_agent_target(const char *name, bool start_if_stopped, struct sbx_agent_target *t,
                         struct sbx_err *err)
{
    struct sbx *s = malloc(sizeof *s);     /* ~17 KiB: not on a server thread's stack */
    if (!s)
        return sandbox_err(err, -ENOMEM, "out of memory");
    int r = sandbox_open(s, name, 0, err);
    if (r < 0) {
        free(s);
        return r;
    }
    pid_t pid;
    double up;
    enum sbx_state st = sandbox_state(s, &pid, &up);
    if (st == SBX_STOPPED && start_if_stopped) {
        /* The connection then waits for the agent: it is not pinged twice. */
        r = start_stopped(s, err);
        st = SBX_RUNNING;
    }
    if (r == 0)
        r = target_of(s, st, t, err);
    sandbox_close(s);
    free(s);
    return r;
}

int sandbox_agent_connect(const struct sbx_agent_target *t, struct agent_client *c, struct sbx_err *err)
{
    if (!t->path)
        return sandbox_err(err, -EINVAL, "no agent to connect to");
    uint64_t t0 = clock_mono_ns();
    int r;
    while ((r = agent_client_connect(c, t->path, t->hybrid, t->port)) < 0 && r != -EPROTO) {
        double dt = (double)(clock_mono_ns() - t0) / 1e9;
        if (dt + 0.1 > t->wait)
            break;
        usleep(100 * 1000);
    }
    if (r < 0)
        return sandbox_err(err, r, "agent at %s%s: %s", t->path, t->hybrid ? " (vsock)" : "",
                           r == -EPROTO ? "protocol error" : SBX_STRERROR(-r));
    return 0;
}

int sandbox_exec(const struct sbx_agent_target *t, const struct sbx_exec *x, bool *timed_out,
                 enum sbx_agent_step *step, struct sbx_err *err)
{
    enum sbx_agent_step here = SBX_AGENT_LOCAL;
    if (!step)
        step = &here;
    *step = SBX_AGENT_LOCAL;
    if (timed_out)
        *timed_out = false;
    if (!x || !x->argv || !x->argc || (x->envc && !x->env) || !(x->timeout >= 0) || x->timeout > 4e6)
        return sandbox_err(err, -EINVAL, "invalid command");
    struct agent_exec req = {
        .timeout_ms = x->timeout > 0 ? (uint32_t)ceil(x->timeout * 1000) : 0,
        .argc = x->argc, .envc = x->envc, .cwd = (char *)(x->cwd ? x->cwd : ""),
        .argv = (char **)x->argv, .env = (char **)x->env,
    };
    struct agent_client c;
    *step = SBX_AGENT_CONNECT;
    int r = sandbox_agent_connect(t, &c, err);
    if (r < 0)
        return r;
    *step = SBX_AGENT_REQUEST;
    struct agent_exit st;
    char why[512] = "";
    r = agent_client_exec(&c, &req, x->in_fd, x->out_fd, x->err_fd, &st, why, sizeof why);
    agent_client_close(&c);
    if (r == -EREMOTEIO)
        return sandbox_err(err, r, "agent: %s", why);
    if (r < 0)
        return sandbox_err(err, r, "%s", r == -EPROTO ? "protocol error" : SBX_STRERROR(-r));
    *step = SBX_AGENT_DONE;
    if (timed_out)
        *timed_out = st.flags & AGENT_EXIT_TIMEDOUT;
    return agent_exit_status(&st);
}

/* ---- file transfer ---- */

/* The local file local opened (flags; sb: its fstat) as *fd, or -errno
 * with why ("LOCAL: ERROR"). */
static int cp_open(const char *local, int flags, struct stat *sb, int *fd, struct sbx_err *err)
{
    *fd = open(local, flags | O_CLOEXEC, 0600);
    if (*fd < 0 || (sb && fstat(*fd, sb) < 0)) {
        int e = errno;
        if (*fd >= 0)
            close(*fd);
        *fd = -1;
        return sandbox_err(err, -e, "%s: %s", local, SBX_STRERROR(e));
    }
    return 0;
}

/* A copy: local opened (upload: to read; else created or truncated), t's
 * agent reached, the file sent to remote or fetched from it (local then
 * gets remote's permission bits), local closed. 0 or -errno with why. */
static int cp(const struct sbx_agent_target *t, bool upload, const char *local, const char *remote,
              enum sbx_agent_step *step, struct sbx_err *err)
{
    enum sbx_agent_step here;
    if (!step)
        step = &here;
    *step = SBX_AGENT_LOCAL;
    struct stat sb;
    int fd, r = cp_open(local, upload ? O_RDONLY : O_WRONLY | O_CREAT | O_TRUNC, upload ? &sb : NULL, &fd, err);
    if (r < 0)
        return r;
    struct agent_client c;
    *step = SBX_AGENT_CONNECT;
    if ((r = sandbox_agent_connect(t, &c, err)) < 0) {
        close(fd);
        return r;
    }
    *step = SBX_AGENT_REQUEST;
    char why[512] = "";
    uint32_t mode = 0;
    r = upload ? agent_client_put(&c, fd, remote, sb.st_mode & 07777, why, sizeof why)
               : agent_client_get(&c, remote, fd, &mode, why, sizeof why);
    agent_client_close(&c);
    if (r == 0 && !upload && fchmod(fd, mode & 0777) < 0)
        r = -errno;
    if (close(fd) < 0 && r == 0)
        r = -errno;
    if (r == 0) {
        *step = SBX_AGENT_DONE;
        return 0;
    }
    if (r == -EREMOTEIO)
        return sandbox_err(err, r, "guest: %s", why);
    return sandbox_err(err, r, "%s", r == -EPROTO ? "protocol error" : SBX_STRERROR(-r));
}

int sandbox_cp_in(const struct sbx_agent_target *t, const char *local, const char *remote,
                  enum sbx_agent_step *step, struct sbx_err *err)
{
    return cp(t, true, local, remote, step, err);
}

int sandbox_cp_out(const struct sbx_agent_target *t, const char *remote, const char *local,
                   enum sbx_agent_step *step, struct sbx_err *err)
{
    return cp(t, false, local, remote, step, err);
}
