/* The envd server of `moat serve` (vmm/api/e2b/serve_envd.c) on its own, for
 * tests/integration/serve-envd-sdk.sh: sandbox "sbx-a" (token "tok-a",
 * envVars SANDBOX_NAME=a) and "sbx-b" ("tok-b", SANDBOX_NAME=b) are the
 * guest agents listening on SOCK_A and SOCK_B (moat-agent --unix, hybrid
 * 0); every other id is an unknown sandbox. Prints "ready" once listening
 * and stops when its stdin closes.
 *
 *   serve_envd_host PORT SOCK_A SOCK_B */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vmm/api/e2b/serve_envd.h"

static const char *socks[2];
static char *envs_a[] = { "SANDBOX_NAME=a", NULL }, *envs_b[] = { "SANDBOX_NAME=b", NULL };

static int resolve(void *arg, const char *id, const char *token, struct envd_sandbox *out)
{
    (void)arg;
    int i = strcmp(id, "sbx-a") == 0 ? 0 : strcmp(id, "sbx-b") == 0 ? 1 : -1;
    if (i < 0)
        return -ENOENT;
    if (strcmp(token, i ? "tok-b" : "tok-a") != 0)
        return -EACCES;
    snprintf(out->vsock_path, sizeof out->vsock_path, "%s", socks[i]);
    out->hybrid = 0;
    out->envs = i ? envs_b : envs_a;
    out->nenvs = 1;
    return 0;
}

static int find_signed(void *arg, int (*match)(void *m, const char *id, const char *token), void *m, char *id,
                       size_t idlen, char *token, size_t toklen)
{
    (void)arg;
    static const char *const ids[] = { "sbx-a", "sbx-b" }, *const toks[] = { "tok-a", "tok-b" };
    for (int i = 0; i < 2; i++)
        if (match(m, ids[i], toks[i])) {
            snprintf(id, idlen, "%s", ids[i]);
            snprintf(token, toklen, "%s", toks[i]);
            return 0;
        }
    return -ENOENT;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s PORT SOCK_A SOCK_B\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    socks[0] = argv[2];
    socks[1] = argv[3];
    struct envd_opts o = { .bind_addr = "127.0.0.1", .port = (unsigned)atoi(argv[1]), .resolve = resolve,
                           .find_signed = find_signed };
    struct envd_server *s;
    int r = envd_start(&o, &s);
    if (r < 0) {
        fprintf(stderr, "envd_start: %s\n", strerror(-r));
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    char b[64];
    while (read(0, b, sizeof b) > 0)
        ;
    envd_stop(s);
    return 0;
}
