/* A command in a guest and files to and from it, through its agent
 * (vmm/sandbox/exec.c, docs/agent-protocol.md): moat exec and moat cp as
 * library calls, on the agent client (vmm/agent/agent_client.h). The
 * guest is a named sandbox (sandbox_agent_target, which starts a stopped
 * one) or any VM's hybrid-vsock socket or agent socket the caller names.
 * The rules of sandbox.h hold: 0 or -errno, why in a struct sbx_err, no
 * printing, no static state; signal dispositions are the caller's (a
 * caller writing a command's output to a pipe ignores SIGPIPE to get
 * -EPIPE rather than the signal). */
#ifndef MOAT_SANDBOX_EXEC_H
#define MOAT_SANDBOX_EXEC_H

#include <stdbool.h>
#include <stdint.h>

#include "vmm/sandbox/sandbox.h"

/* An agent endpoint: a hybrid-vsock socket and port, or a plain Unix
 * socket the agent listens on. sandbox_agent_target_init it first;
 * sandbox_agent_target_release it after. */
struct sbx_agent_target {
    const char *path;   /* NULL: none yet; a sandbox's points into buf */
    int hybrid;         /* path is a hybrid-vsock socket (CONNECT port) */
    unsigned port;      /* the agent's vsock port (AGENT_DEFAULT_PORT) */
    double wait;        /* keep trying to connect this many seconds */
    int keep;           /* a descriptor path reaches the socket by (-1 none) */
    char buf[108];
};
void sandbox_agent_target_init(struct sbx_agent_target *t);
/* Close t's kept descriptor (again: no-op). */
void sandbox_agent_target_release(struct sbx_agent_target *t);

/* t set to sandbox NAME's vsock socket (a jailed one's through a kept
 * descriptor), t->wait raised to 10 s (after a restore the agent may take
 * a moment). A stopped sandbox is started first when start_if_stopped
 * (up to "the guest runs": the connection then waits for the agent); one
 * another command started meanwhile is a line "sandbox NAME is already
 * running" (code 0) in err, as are the start's warnings. 0, or -errno
 * with why: no such sandbox, the start failed (with its log's tail), not
 * running ("sandbox NAME is paused (moat resume it first)" ...), no
 * socket. */
int sandbox_agent_target(const char *name, bool start_if_stopped, struct sbx_agent_target *t,
                         struct sbx_err *err);

/* Where an exec or a copy stopped (on success: SBX_AGENT_DONE), for a
 * caller that words or counts failures by step. */
enum sbx_agent_step {
    SBX_AGENT_LOCAL,    /* the local file (sandbox_cp_*: opening it) */
    SBX_AGENT_CONNECT,  /* reaching the agent (why: "agent at PATH: ...") */
    SBX_AGENT_REQUEST,  /* the request, once connected, and what follows */
    SBX_AGENT_DONE,
};

/* Connect c to t's agent, retrying (100 ms apart) for t->wait s while the
 * VM or its agent is still coming up (a protocol error is final). 0, or
 * -errno with why ("agent at PATH (vsock): ..."); agent_client_close c
 * after a 0. */
struct agent_client;
int sandbox_agent_connect(const struct sbx_agent_target *t, struct agent_client *c, struct sbx_err *err);

/* A command for sandbox_exec. */
struct sbx_exec {
    char *const *argv;  /* argc >= 1 */
    uint32_t argc;
    char *const *env;   /* KEY=VALUE, envc of them */
    uint32_t envc;
    const char *cwd;    /* in the guest; NULL or "": the agent's */
    double timeout;     /* the agent kills it (SIGKILL) after this many s; 0 never */
    int in_fd;          /* read to EOF as its stdin; -1: /dev/null */
    int out_fd, err_fd; /* its stdout and stderr, written as they come */
};

/* Run x in t's guest. Its status (the exit code, 128 + N when killed by
 * signal N) >= 0; *timed_out (may be NULL) true when the agent killed it at
 * x->timeout. Or -errno with why: -EINVAL (a bad x), the connection's
 * error, -EREMOTEIO ("agent: MESSAGE"), -EPROTO ("protocol error"),
 * -EPIPE (out_fd or err_fd's reader went away), ... *step (may be NULL):
 * where it stopped. */
int sandbox_exec(const struct sbx_agent_target *t, const struct sbx_exec *x, bool *timed_out,
                 enum sbx_agent_step *step, struct sbx_err *err);

/* Copy the local file local to the guest's path remote (absolute) with
 * local's permission bits (sandbox_cp_in), or remote to local (created
 * 0600 or truncated before connecting, then given remote's permission
 * bits: sandbox_cp_out). 0, or -errno with why: the local file's ("LOCAL:
 * ERROR", step SBX_AGENT_LOCAL), the connection's, -EREMOTEIO ("guest:
 * MESSAGE": the agent's), -EPROTO ("protocol error"), -ECONNRESET, or a
 * local write's ("ERROR"). *step (may be NULL): where it stopped. */
int sandbox_cp_in(const struct sbx_agent_target *t, const char *local, const char *remote,
                  enum sbx_agent_step *step, struct sbx_err *err);
int sandbox_cp_out(const struct sbx_agent_target *t, const char *remote, const char *local,
                   enum sbx_agent_step *step, struct sbx_err *err);

#endif
