/* `moat serve`'s envd server (docs/serve.md, "The envd endpoint"): the E2B in-sandbox API
 * (Connect JSON for process.Process and filesystem.Filesystem, REST /files
 * and /health) over HTTP/1.1 (libmicrohttpd, a thread per connection),
 * translated into the guest agent protocol (docs/agent-protocol.md). Every
 * request names its sandbox (E2b-Sandbox-Id) and carries its token
 * (X-Access-Token); the resolver turns both into the sandbox's agent
 * socket. Used by `moat serve` (serve_main.c). */
#ifndef MOAT_SERVE_ENVD_H
#define MOAT_SERVE_ENVD_H

#include <stddef.h>
#include <stdint.h>

struct envd_sandbox {                /* filled by the resolver */
    char vsock_path[108];            /* hybrid vsock socket of the sandbox ($MOAT_HOME/NAME/vsock.sock) */
    int hybrid;                      /* 1: hybrid vsock (CONNECT 1024); 0: a plain Unix socket to
                                        moat-agent --unix (used by host-level tests) */
    char **envs;                     /* NULL-terminated "K=V" list added to every exec (sandbox envVars),
                                        owned by resolver's arg */
    size_t nenvs;
};
/* Resolve E2b-Sandbox-Id + X-Access-Token. 0 = ok; -ENOENT = no such sandbox;
 * -EACCES = wrong token; -EAGAIN = sandbox paused/not running (the module
 * answers 502 for both, as E2B's proxy does, 401 for a wrong token). The
 * resolver may resume a paused sandbox itself. token is "" when the header
 * is absent. */
typedef int (*envd_resolve_fn)(void *arg, const char *sandbox_id, const char *token,
                               struct envd_sandbox *out);
/* called when the module is done with out (frees nothing owned by module) */
typedef void (*envd_release_fn)(void *arg, struct envd_sandbox *out);
/* Signed /files URLs (no X-Access-Token: ?signature=, see envd_sign.h):
 * call match(m, id, token) for each sandbox that has a token until it
 * returns 1; then copy that sandbox's id and token into id/token (idlen,
 * toklen bytes) and return 0; -ENOENT when none matched. The request then
 * goes through resolve with them. NULL: signed URLs are refused. */
typedef int (*envd_find_fn)(void *arg, int (*match)(void *m, const char *id, const char *token), void *m,
                            char *id, size_t idlen, char *token, size_t toklen);
struct envd_opts {
    const char *bind_addr;   /* "127.0.0.1" */
    unsigned port;           /* 49983 */
    envd_resolve_fn resolve; envd_release_fn release; void *arg;
    envd_find_fn find_signed;
    size_t max_body;         /* oversized unary bodies -> error (0: 1 MiB) */
    uint64_t max_inflate;    /* a Content-Encoding: gzip upload decoding to more -> 413 (0: 1 GiB) */
    int op_timeout_ms;       /* one agent call (a unary request, a process's start) in all (0: 30 s) */
};
struct envd_server;
int envd_start(const struct envd_opts *o, struct envd_server **out);   /* 0 or -errno */
void envd_stop(struct envd_server *s);
/* B calls this when a sandbox is killed/paused: streams of that sandbox end, processes forgotten. */
void envd_forget_sandbox(struct envd_server *s, const char *sandbox_id);

#endif
