/* moat serve's REST side (vmm/api/e2b/serve_api.c): E2B's sandbox API over
 * moat's named sandboxes, the timeout reaper, and the resolver handed to
 * the envd module (vmm/api/e2b/serve_envd.h). docs/serve.md. */
#ifndef MOAT_SERVE_API_H
#define MOAT_SERVE_API_H

#include <stddef.h>

/* A named sandbox's state ("running", "paused", "stopped", "dead",
 * "unresponsive") into out: 0, -ENOENT (no such sandbox) or -EINVAL (not a
 * valid name). Called from any of the server's threads. */
typedef int (*serve_state_fn)(const char *name, char *out, size_t len);

struct serve_opts {
    const char *api_addr;       /* numeric address, e.g. "127.0.0.1" */
    unsigned api_port;
    const char *envd_addr;
    unsigned envd_port;
    const char *api_key;        /* required on every request but GET /health */
    const char *home;           /* $MOAT_HOME */
    double reap_interval;       /* seconds between timeout checks (1) */
    serve_state_fn sandbox_state;   /* the CLI's: sandbox_state_name */
};
struct serve;
/* Start the API and envd servers and the reaper. 0, or -errno with why. */
int serve_start(const struct serve_opts *o, struct serve **out, char *why, size_t wlen);
/* Stop them (sandboxes go on running; their serve.json keeps their
 * deadlines for the next moat serve). */
void serve_stop(struct serve *s);

#endif
