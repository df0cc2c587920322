/* moat jail: run one moat command confined (docs/security.md, "Jail";
 * docs/cli.md). Its options and messages; the steps themselves are in
 * vmm/sandbox/jail.c, the pure parsing in vmm/sandbox/jail_spec.c. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vmm/cli/cli.h"
#include "vmm/sandbox/jail.h"
#include "vmm/api/mhd_dyn.h"

static const char usage_jail[] =
    "usage: moat jail --id ID --uid U --gid G [options] -- moat ARGS...\n"
    "\n"
    "Run one moat command confined: closed fds, an empty environment, new\n"
    "mount/pid/ipc/uts namespaces, pivot_root into CHROOT_BASE/moat/ID/root\n"
    "holding only the files it needs, rlimits, cgroup v2 limits, no_new_privs,\n"
    "no capabilities, uid U and gid G. Needs root. Exits with the inner moat's\n"
    "status. See docs/security.md (\"Jail\").\n"
    "\n"
    "  --id ID               the jail's name: 1..64 of [A-Za-z0-9_-]\n"
    "  --uid U, --gid G      who the inner moat runs as (not 0)\n"
    "  --chroot-base DIR     where jails live (default /srv/jail)\n"
    "  --expose PATH         also make PATH (file or directory, e.g. a\n"
    "                        sockets' directory) visible, writable, at the same\n"
    "                        path inside (repeatable). --kernel, --initrd and\n"
    "                        blk path=/overlay= of the inner command are\n"
    "                        exposed on their own (read-only but disks)\n"
    "  --expose-ro PATH      the same, read-only\n"
    "  --netns PATH          join this network namespace (e.g. /var/run/netns/X)\n"
    "  --tun                 create /dev/net/tun in the jail\n"
    "  --cgroup KEY=VALUE    memory.max, memory.high, memory.swap.max, cpu.max,\n"
    "                        cpu.weight, pids.max (repeatable; needs cgroup v2)\n"
    "  --cgroup-root DIR     the cgroup v2 mount (default /sys/fs/cgroup)\n"
    "  --resource-limit K=N  no-file (default 2048), nproc, fsize, as (bytes)\n"
    "\n"
    "Inherited descriptors above 2 are closed, but the inner command's\n"
    "--ready-fd N, which must be a pipe (moat create --jail uses it).\n";

__attribute__((format(printf, 1, 2))) static void jerr(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("moat jail: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* A step's message as "moat jail: MESSAGE" (one message: a newline in a
 * path it names is printed as it is, as before); returns status. */
static int jsay(const struct sbx_err *e, int status)
{
    fprintf(stderr, "moat jail: %s\n", e->msg);
    return status;
}

/* What jail_options returns to go on (anything else: the exit status). */
#define JAIL_GO_ON (-1)

/* The jail's options, up to "--" (its index into *end), into j. */
static int jail_options(struct sbx_jail_run *j, int argc, char **argv, int *end)
{
    int have_uid = 0, have_gid = 0, i;
    char why[512];
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--"))
            break;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_jail, stdout);
            return 0;
        }
        if (!strcmp(a, "--tun")) {
            j->tun = 1;
            continue;
        }
        if (!val) {
            jerr("%s needs a value (see moat jail --help)", a);
            return EXIT_USAGE;
        }
        i++;
        if (!strcmp(a, "--id"))
            j->id = val;
        else if (!strcmp(a, "--uid"))
            j->uid = (unsigned)parse_uint(val, "--uid", 0xfffffffe), have_uid = 1;
        else if (!strcmp(a, "--gid"))
            j->gid = (unsigned)parse_uint(val, "--gid", 0xfffffffe), have_gid = 1;
        else if (!strcmp(a, "--chroot-base"))
            j->base = val;
        else if (!strcmp(a, "--cgroup-root"))
            j->cgroot = val;
        else if (!strcmp(a, "--netns"))
            j->netns = val;
        else if (!strcmp(a, "--expose") || !strcmp(a, "--expose-ro")) {
            int r = jail_paths_add(&j->paths, val, a[8] == 0);
            if (r < 0) {
                jerr("%s '%s': %s", a, val, r == -E2BIG ? "too many paths" :
                     "needs an absolute path without '.', '..' or '//'");
                return EXIT_USAGE;
            }
        } else if (!strcmp(a, "--cgroup")) {
            if (j->ncg >= SBX_JAIL_RUN_CG_MAX) {
                jerr("at most %d --cgroup", SBX_JAIL_RUN_CG_MAX);
                return EXIT_USAGE;
            }
            if (jail_parse_cgroup(val, &j->cg[j->ncg++], why, sizeof why) < 0) {
                jerr("%s", why);
                return EXIT_USAGE;
            }
        } else if (!strcmp(a, "--resource-limit")) {
            if (j->nrl >= SBX_JAIL_RUN_RL_MAX) {
                jerr("at most %d --resource-limit", SBX_JAIL_RUN_RL_MAX);
                return EXIT_USAGE;
            }
            if (jail_parse_rlimit(val, &j->rl_res[j->nrl], &j->rl_val[j->nrl], why, sizeof why) < 0) {
                jerr("%s", why);
                return EXIT_USAGE;
            }
            j->nrl++;
        } else {
            jerr("unknown option '%s' (see moat jail --help)", a);
            return EXIT_USAGE;
        }
    }
    if (!j->id || jail_check_id(j->id) < 0) {
        jerr("--id is required: 1..%d characters of [A-Za-z0-9_-]", JAIL_ID_MAX);
        return EXIT_USAGE;
    }
    if (!have_uid || !have_gid || j->uid == 0 || j->gid == 0) {
        jerr("--uid and --gid are required and must not be 0 (root in the jail defeats it)");
        return EXIT_USAGE;
    }
    *end = i;
    return JAIL_GO_ON;
}

int cmd_jail(int argc, char **argv)
{
    static struct sbx_jail_run j;   /* large (the paths); one jail per process */
    struct sbx_err e = { 0 };
    sandbox_jail_defaults(&j);
    int i, r;
    if ((r = jail_options(&j, argc, argv, &i)) != JAIL_GO_ON)
        return r;
    if (i + 1 >= argc || strcmp(argv[i + 1], "moat")) {
        jerr("expected '-- moat ARGS...' after the options (the jail runs only moat)");
        return EXIT_USAGE;
    }
    if (sandbox_jail_inner(&j, argc - i - 1, argv + i + 1, &e) < 0)
        return jsay(&e, EXIT_USAGE);
    /* moat vmm and moat serve load libmicrohttpd when their HTTP server
     * starts (mhd_dyn.c): loaded before the jail lists this binary's
     * shared objects, so that it and the libraries it brings are exposed. */
    if (j.argc > 1 && (!strcmp(j.argv[1], "vmm") || !strcmp(j.argv[1], "serve")))
        j.preload = mhd_load;
    if (sandbox_jail_prepare(&j, &e) < 0)
        return jsay(&e, EXIT_VMM_ERROR);
    if (sandbox_jail_root_path(&j, &e) < 0)
        return jsay(&e, EXIT_USAGE);
    if (sandbox_jail_setup(&j, &e) < 0)
        return jsay(&e, EXIT_VMM_ERROR);
    sigset_t old;
    sandbox_jail_block_signals(&old);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        jerr("fork: %s", strerror(errno));
        return EXIT_VMM_ERROR;
    }
    if (pid == 0) {
        /* The child returns only on failure, before the exec. */
        sandbox_jail_child(&j, &old, &e);
        _exit(jsay(&e, EXIT_VMM_ERROR));
    }
    /* The parent stays outside, waits, and passes the status on. */
    int status;
    if (sandbox_jail_parent(&j, pid, &status, &e) < 0)
        jsay(&e, 0);
    return status;
}
