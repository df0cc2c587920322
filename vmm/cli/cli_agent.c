/* moat exec / moat cp: talk to the guest agent (vmm/sandbox/exec.c does
 * the work: here the options and the messages). */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vmm/cli/cli.h"
#include "vmm/sandbox/exec.h"

/* ---- moat exec / moat cp: the guest agent (docs/agent-protocol.md) ---- */

static const char usage_exec[] =
    "usage: moat exec (NAME | --vsock PATH [--port N] | --unix PATH) [--wait SEC] [-e K=V]...\n"
    "                 [-w DIR] [--timeout SEC] [-i] -- CMD ARGS...\n"
    "\n"
    "Run CMD in a running guest through its agent (/sbin/moat-agent), streaming\n"
    "its stdout and stderr; exit with its status (128 + N if killed by signal N).\n"
    "\n"
    "  NAME            a sandbox (moat create NAME; a stopped one is started)\n"
    "  --vsock PATH    the VM's hybrid-vsock Unix socket (moat run --vsock PATH)\n"
    "  --port N        the agent's vsock port (default 1024)\n"
    "  --unix PATH     an agent listening on a Unix socket (moat-agent --unix PATH)\n"
    "  --wait SEC      keep trying to connect for SEC seconds (the guest is booting)\n"
    "  -e K=V          set an environment variable (repeatable)\n"
    "  -w DIR          working directory in the guest\n"
    "  --timeout SEC   the agent kills the command (SIGKILL) after SEC seconds\n"
    "  -i              forward stdin to the command (else it reads /dev/null)\n"
    "\n"
    "Exit: the command's status; 2 usage; 125 connection or protocol error.\n";

static const char usage_cp[] =
    "usage: moat cp (--vsock PATH [--port N] | --unix PATH) [--wait SEC] SRC DST\n"
    "       moat cp SRC NAME:PATH | NAME:PATH DST     (sandbox NAME)\n"
    "\n"
    "Copy a file to or from a running guest through its agent. The guest side\n"
    "is written :PATH, e.g.  moat cp --vsock v.sock data.bin :/tmp/data.bin\n"
    "                        moat cp --vsock v.sock :/etc/hosts hosts\n"
    "Uploads keep the local permission bits, downloads the remote ones.\n"
    "\n"
    "Exit: 0 copied; 1 a file error (local or in the guest); 2 usage;\n"
    "125 connection or protocol error.\n";

/* Parses --vsock/--unix/--port/--wait at argv[*i]; 1 if consumed, 0 if
 * not ours, -1 on a usage error. */
int agent_target_opt(struct sbx_agent_target *t, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    int is_v = !strcmp(a, "--vsock"), is_u = !strcmp(a, "--unix"), is_p = !strcmp(a, "--port");
    int is_w = !strcmp(a, "--wait");
    if (!is_v && !is_u && !is_p && !is_w)
        return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "moat: %s needs an argument\n", a);
        return -1;
    }
    const char *v = argv[++*i];
    if (is_w) {
        char *end;
        t->wait = strtod(v, &end);
        if (!*v || *end || !(t->wait >= 0) || t->wait > 86400) {
            fprintf(stderr, "moat: bad --wait '%s'\n", v);
            return -1;
        }
    } else if (is_p) {
        char *end;
        unsigned long p = strtoul(v, &end, 10);
        if (!*v || *end || p == 0 || p > 0xfffffffful) {
            fprintf(stderr, "moat: bad --port '%s'\n", v);
            return -1;
        }
        t->port = (unsigned)p;
    } else {
        t->path = v;
        t->hybrid = is_v;
    }
    return 1;
}

/* Sandbox NAME as t (a stopped one started; sandbox_agent_target,
 * printed): 0, or -1. */
static int agent_target_name(const char *name, struct sbx_agent_target *t)
{
    struct sbx_err e = { 0 };
    int r = sandbox_agent_target(name, true, t, &e);
    cli_say(&e);
    return r < 0 ? -1 : 0;
}

/* The command's options up to CMD into t, env (*envc), *cwd, *timeout and
 * *fwd_stdin; CMD's index, or -1 - the exit status. */
static int exec_options(int argc, char **argv, struct sbx_agent_target *t, char **env, uint32_t *envc,
                        const char **cwd, double *timeout, int *fwd_stdin)
{
    int i;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = agent_target_opt(t, argc, argv, &i);
        if (r < 0)
            return -1 - EXIT_USAGE;
        if (r > 0)
            continue;
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_exec, stdout);
            return -1;
        }
        if (!strcmp(a, "-i")) {
            *fwd_stdin = 1;
            continue;
        }
        if (a[0] != '-' && !t->path) {
            /* moat exec NAME ... -- CMD: a sandbox (docs/sandboxes.md) */
            if (agent_target_name(a, t) < 0)
                return -1 - EXIT_VMM_ERROR;
            continue;
        }
        if (a[0] != '-')
            break;
        if (i + 1 >= argc) {
            fprintf(stderr, "moat exec: %s needs an argument\n", a);
            return -1 - EXIT_USAGE;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "-e")) {
            if (!strchr(v, '=') || v[0] == '=') {
                fprintf(stderr, "moat exec: -e wants KEY=VALUE, not '%s'\n", v);
                return -1 - EXIT_USAGE;
            }
            env[(*envc)++] = (char *)v;
        } else if (!strcmp(a, "-w")) {
            *cwd = v;
        } else if (!strcmp(a, "--timeout")) {
            char *end;
            *timeout = strtod(v, &end);
            if (!*v || *end || !(*timeout > 0) || *timeout > 4e6) {
                fprintf(stderr, "moat exec: bad --timeout '%s'\n", v);
                return -1 - EXIT_USAGE;
            }
        } else {
            fprintf(stderr, "moat exec: unknown option '%s'\n%s", a, usage_exec);
            return -1 - EXIT_USAGE;
        }
    }
    if (!t->path || i >= argc) {
        fputs(usage_exec, stderr);
        return -1 - EXIT_USAGE;
    }
    return i;
}

int cmd_exec(int argc, char **argv)
{
    struct sbx_agent_target t;
    sandbox_agent_target_init(&t);
    char **env = calloc((size_t)argc, sizeof *env);
    uint32_t envc = 0;
    int fwd_stdin = 0, rc;

    if (!env)
        return EXIT_VMM_ERROR;
    struct sbx_exec x = { .cwd = "", .in_fd = -1, .out_fd = STDOUT_FILENO, .err_fd = STDERR_FILENO };
    int i = exec_options(argc, argv, &t, env, &envc, &x.cwd, &x.timeout, &fwd_stdin);
    if (i < 0) {
        rc = -1 - i;
        goto out;
    }
    x.argv = argv + i;
    x.argc = (uint32_t)(argc - i);
    x.env = env;
    x.envc = envc;
    x.in_fd = fwd_stdin ? STDIN_FILENO : -1;
    signal(SIGPIPE, SIG_IGN);   /* a closed output: -EPIPE, not the signal */
    struct sbx_err e = { 0 };
    enum sbx_agent_step step;
    bool timed_out;
    rc = sandbox_exec(&t, &x, &timed_out, &step, &e);
    if (rc >= 0) {
        if (timed_out)
            fprintf(stderr, "moat exec: timed out after %g s; killed\n", x.timeout);
    } else if (rc == -EPIPE && step == SBX_AGENT_REQUEST) {
        rc = 128 + SIGPIPE;         /* like a local command writing to a closed pipe */
    } else {
        fprintf(stderr, "moat%s: %s\n", step == SBX_AGENT_CONNECT ? "" : " exec", e.msg);
        rc = EXIT_VMM_ERROR;
    }
out:
    sandbox_agent_target_release(&t);
    free(env);
    return rc;
}

/* cp's two arguments (SRC DST) into pos, and t; 0, or -1 - the exit
 * status. NAME:PATH names a path in sandbox NAME (docs/sandboxes.md). */
static int cp_args(int argc, char **argv, struct sbx_agent_target *t, const char *pos[2])
{
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage_cp, stdout);
            return -1;
        }
        int r = agent_target_opt(t, argc, argv, &i);
        if (r < 0)
            return -1 - EXIT_USAGE;
        if (r > 0)
            continue;
        if (npos == 2 || (argv[i][0] == '-' && argv[i][1])) {
            fputs(usage_cp, stderr);
            return -1 - EXIT_USAGE;
        }
        pos[npos++] = argv[i];
    }
    char name[80];
    for (int k = 0; k < npos && !t->path; k++) {
        const char *colon = strchr(pos[k], ':');
        if (!colon || colon == pos[k] || (size_t)(colon - pos[k]) >= sizeof name)
            continue;
        snprintf(name, sizeof name, "%.*s", (int)(colon - pos[k]), pos[k]);
        if (!sandbox_exists(name))
            continue;
        if (agent_target_name(name, t) < 0)
            return -1 - EXIT_VMM_ERROR;
        pos[k] = colon;
    }
    if (!t->path || npos != 2 || (pos[0][0] == ':') == (pos[1][0] == ':') ||
        !pos[0][0] || !pos[1][0] || !pos[0][1] || !pos[1][1]) {
        fputs(usage_cp, stderr);
        return -1 - EXIT_USAGE;
    }
    return 0;
}

int cmd_cp(int argc, char **argv)
{
    struct sbx_agent_target t;
    sandbox_agent_target_init(&t);
    const char *pos[2];
    int r = cp_args(argc, argv, &t, pos);
    if (r < 0) {
        sandbox_agent_target_release(&t);
        return -1 - r;
    }
    int upload = pos[1][0] == ':';
    struct sbx_err e = { 0 };
    enum sbx_agent_step step;
    r = upload ? sandbox_cp_in(&t, pos[0], pos[1] + 1, &step, &e)
               : sandbox_cp_out(&t, pos[0] + 1, pos[1], &step, &e);
    sandbox_agent_target_release(&t);
    if (r == 0)
        return 0;
    if (step == SBX_AGENT_CONNECT) {
        fprintf(stderr, "moat: %s\n", e.msg);
        return EXIT_VMM_ERROR;
    }
    fprintf(stderr, "moat cp: %s\n", e.msg);
    return step == SBX_AGENT_REQUEST && (r == -EPROTO || r == -ECONNRESET) ? EXIT_VMM_ERROR : 1;
}
