/* moat exec / moat cp: talk to the guest agent. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "include/moat.h"
#include "vmm/cli/cli.h"
#include "vmm/base/clock.h"
#include "vmm/base/log.h"
#include "vmm/agent/agent_client.h"

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

/* Parses --vsock/--unix/--port at argv[*i]; 1 if consumed, 0 if not ours,
 * -1 on a usage error. */
int agent_target_opt(struct agent_target *t, int argc, char **argv, int *i)
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

int agent_target_connect(const struct agent_target *t, struct agent_client *c)
{
    uint64_t t0 = clock_mono_ns();
    int r;
    /* With --wait, retry while the VM or its agent is still coming up. */
    while ((r = agent_client_connect(c, t->path, t->hybrid, t->port)) < 0 && r != -EPROTO) {
        double dt = (double)(clock_mono_ns() - t0) / 1e9;
        if (dt + 0.1 > t->wait)
            break;
        usleep(100 * 1000);
    }
    if (r < 0) {
        fprintf(stderr, "moat: agent at %s%s: %s\n", t->path, t->hybrid ? " (vsock)" : "",
                r == -EPROTO ? "protocol error" : strerror(-r));
        return -1;
    }
    return 0;
}

int cmd_exec(int argc, char **argv)
{
    struct agent_target t = { .port = AGENT_DEFAULT_PORT };
    char **env = calloc((size_t)argc, sizeof *env);
    const char *cwd = "";
    double timeout = 0;
    int fwd_stdin = 0, i, rc = EXIT_USAGE;

    if (!env)
        return EXIT_VMM_ERROR;
    uint32_t envc = 0;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = agent_target_opt(&t, argc, argv, &i);
        if (r < 0)
            goto out;
        if (r > 0)
            continue;
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_exec, stdout);
            rc = 0;
            goto out;
        }
        if (!strcmp(a, "-i")) {
            fwd_stdin = 1;
            continue;
        }
        if (a[0] != '-' && !t.path) {
            /* moat exec NAME ... -- CMD: a sandbox (docs/sandboxes.md) */
            if (sandbox_agent_target(a, &t) < 0) {
                rc = EXIT_VMM_ERROR;
                goto out;
            }
            continue;
        }
        if (a[0] != '-')
            break;
        if (i + 1 >= argc) {
            fprintf(stderr, "moat exec: %s needs an argument\n", a);
            goto out;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "-e")) {
            if (!strchr(v, '=') || v[0] == '=') {
                fprintf(stderr, "moat exec: -e wants KEY=VALUE, not '%s'\n", v);
                goto out;
            }
            env[envc++] = (char *)v;
        } else if (!strcmp(a, "-w")) {
            cwd = v;
        } else if (!strcmp(a, "--timeout")) {
            char *end;
            timeout = strtod(v, &end);
            if (!*v || *end || !(timeout > 0) || timeout > 4e6) {
                fprintf(stderr, "moat exec: bad --timeout '%s'\n", v);
                goto out;
            }
        } else {
            fprintf(stderr, "moat exec: unknown option '%s'\n%s", a, usage_exec);
            goto out;
        }
    }
    if (!t.path || i >= argc) {
        fputs(usage_exec, stderr);
        goto out;
    }
    struct agent_exec req = {
        .timeout_ms = timeout > 0 ? (uint32_t)ceil(timeout * 1000) : 0,
        .argc = (uint32_t)(argc - i), .envc = envc, .cwd = (char *)cwd,
        .argv = argv + i, .env = env,
    };
    struct agent_client c;
    rc = EXIT_VMM_ERROR;
    if (agent_target_connect(&t, &c) < 0)
        goto out;
    signal(SIGPIPE, SIG_IGN);
    struct agent_exit st;
    char err[512] = "";
    int r = agent_client_exec(&c, &req, fwd_stdin ? STDIN_FILENO : -1, STDOUT_FILENO,
                              STDERR_FILENO, &st, err, sizeof err);
    agent_client_close(&c);
    if (r == -EREMOTEIO) {
        fprintf(stderr, "moat exec: agent: %s\n", err);
    } else if (r == -EPIPE) {
        rc = 128 + SIGPIPE;         /* like a local command writing to a closed pipe */
    } else if (r < 0) {
        fprintf(stderr, "moat exec: %s\n", r == -EPROTO ? "protocol error" : strerror(-r));
    } else {
        if (st.flags & AGENT_EXIT_TIMEDOUT)
            fprintf(stderr, "moat exec: timed out after %g s; killed\n", timeout);
        rc = agent_exit_status(&st);
    }
out:
    free(env);
    return rc;
}

int cmd_cp(int argc, char **argv)
{
    struct agent_target t = { .port = AGENT_DEFAULT_PORT };
    const char *pos[2];
    int npos = 0;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage_cp, stdout);
            return 0;
        }
        int r = agent_target_opt(&t, argc, argv, &i);
        if (r < 0)
            return EXIT_USAGE;
        if (r > 0)
            continue;
        if (npos == 2 || (argv[i][0] == '-' && argv[i][1])) {
            fputs(usage_cp, stderr);
            return EXIT_USAGE;
        }
        pos[npos++] = argv[i];
    }
    /* NAME:PATH names a path in sandbox NAME (docs/sandboxes.md). */
    static char names[2][80];
    for (int k = 0; k < npos && !t.path; k++) {
        const char *colon = strchr(pos[k], ':');
        if (!colon || colon == pos[k] || (size_t)(colon - pos[k]) >= sizeof names[k])
            continue;
        snprintf(names[k], sizeof names[k], "%.*s", (int)(colon - pos[k]), pos[k]);
        if (!sandbox_exists(names[k]))
            continue;
        if (sandbox_agent_target(names[k], &t) < 0)
            return EXIT_VMM_ERROR;
        pos[k] = colon;
    }
    if (!t.path || npos != 2 || (pos[0][0] == ':') == (pos[1][0] == ':') ||
        !pos[0][0] || !pos[1][0] || !pos[0][1] || !pos[1][1]) {
        fputs(usage_cp, stderr);
        return EXIT_USAGE;
    }
    int upload = pos[1][0] == ':';
    const char *local = upload ? pos[0] : pos[1];
    const char *remote = (upload ? pos[1] : pos[0]) + 1;
    int fd;
    struct stat sb;
    if (upload) {
        fd = open(local, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || fstat(fd, &sb) < 0) {
            fprintf(stderr, "moat cp: %s: %s\n", local, strerror(errno));
            if (fd >= 0)
                close(fd);
            return 1;
        }
    } else {
        fd = open(local, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0) {
            fprintf(stderr, "moat cp: %s: %s\n", local, strerror(errno));
            return 1;
        }
    }
    struct agent_client c;
    if (agent_target_connect(&t, &c) < 0) {
        close(fd);
        return EXIT_VMM_ERROR;
    }
    char err[512] = "";
    uint32_t mode = 0;
    int r = upload ? agent_client_put(&c, fd, remote, sb.st_mode & 07777, err, sizeof err)
                   : agent_client_get(&c, remote, fd, &mode, err, sizeof err);
    agent_client_close(&c);
    if (r == 0 && !upload && fchmod(fd, mode & 0777) < 0)
        r = -errno;
    if (close(fd) < 0 && r == 0)
        r = -errno;
    if (r == -EREMOTEIO) {
        fprintf(stderr, "moat cp: guest: %s\n", err);
        return 1;
    }
    if (r == -EPROTO || r == -ECONNRESET) {
        fprintf(stderr, "moat cp: %s\n", r == -EPROTO ? "protocol error" : strerror(-r));
        return EXIT_VMM_ERROR;
    }
    if (r < 0) {
        fprintf(stderr, "moat cp: %s\n", strerror(-r));
        return 1;
    }
    return 0;
}

