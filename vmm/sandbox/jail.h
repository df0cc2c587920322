/* moat jail's mechanism (vmm/sandbox/jail.c; docs/security.md, "Jail"):
 * the steps that run one moat command confined, in the order a caller
 * takes them (moat jail, vmm/cli/cli_jail.c, parses the options into a
 * struct sbx_jail_run and prints what these return):
 *
 *   sandbox_jail_defaults      the defaults (before the options)
 *   sandbox_jail_inner         the inner command: its files, its --ready-fd
 *   sandbox_jail_prepare       root, close fds, clear the environment, the
 *                              files the inner moat needs (steps 0-3)
 *   sandbox_jail_root_path     BASE/moat/ID/root
 *   sandbox_jail_setup         the jail directory, the cgroup, the network
 *                              namespace, unshare pid/ipc/uts (steps 4-7)
 *   sandbox_jail_block_signals then fork(); in the child:
 *   sandbox_jail_child         mounts, nodes, pivot_root, limits, uid, exec
 *                              (steps 8-16; returns only on failure)
 *   sandbox_jail_parent        in the parent: wait, forwarding signals
 *
 * The pure parsing is in jail_spec.h. Each step returns 0 or -errno with
 * err filled (one line: what moat jail prints after "moat jail: "); a
 * failed step leaves the process as far as it got (the fds closed, the
 * namespaces joined): the caller ends it. Nothing here prints, exits or
 * keeps static state; the steps change the calling process (its fds,
 * environment, namespaces, signal mask), so they belong in a process of
 * their own (moat jail, or a child a caller forked for it). */
#ifndef MOAT_SANDBOX_JAIL_H
#define MOAT_SANDBOX_JAIL_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "vmm/sandbox/jail_spec.h"
#include "vmm/sandbox/sandbox.h"

#define SBX_JAIL_RUN_CG_MAX 16      /* --cgroup limits */
#define SBX_JAIL_RUN_RL_MAX 7       /* --resource-limit limits */

struct sbx_jail_run {
    /* The options (moat jail's, docs/cli.md): the caller fills these. */
    const char *id;             /* checked by jail_check_id */
    const char *base;           /* --chroot-base (default /srv/jail) */
    const char *netns;          /* --netns, or NULL */
    const char *cgroot;         /* --cgroup-root (default /sys/fs/cgroup) */
    unsigned uid, gid;          /* not 0 */
    int tun;                    /* --tun: /dev/net/tun in the jail */
    struct jail_cg cg[SBX_JAIL_RUN_CG_MAX];
    int ncg;
    int rl_res[SBX_JAIL_RUN_RL_MAX];    /* RLIMIT_*, jail_parse_rlimit's */
    uint64_t rl_val[SBX_JAIL_RUN_RL_MAX];
    int nrl;
    struct jail_paths paths;    /* exposed at the same path inside */
    /* Called by sandbox_jail_prepare before it lists this binary's loaded
     * files, when set: loads what the inner command will load later
     * (moat jail sets mhd_load for moat vmm and moat serve), so that it is
     * exposed too. 0, or < 0 with why. */
    int (*preload)(char *why, size_t len);
    /* Set by a caller that clones the jailed moat itself and does not wait
     * for it (sandbox_spawn): no PR_SET_PDEATHSIG (its parent may exit). */
    int detached;

    /* Filled by the steps. */
    int argc;                   /* the inner command (sandbox_jail_inner) */
    char **argv;
    int ready_fd;               /* its --ready-fd, or -1 */
    char realbase[PATH_MAX];    /* base resolved (realpath) */
    char exe[PATH_MAX];         /* this binary: the inner moat */
    char root[PATH_MAX];        /* BASE/moat/ID/root */
    char cgdir[PATH_MAX];       /* CGROOT/moat/ID, or "" */
    int pvm;                    /* the host kind, told to the inner moat */
};

/* Zero j and set its defaults: base /srv/jail, cgroot /sys/fs/cgroup, no
 * ready fd. */
void sandbox_jail_defaults(struct sbx_jail_run *j);

/* The inner command ARGV (ARGC >= 1, argv[0] "moat"; it stays the
 * caller's): refused when it is moat jail itself; its own files
 * (jail_inner_paths) join j->paths; its --ready-fd into j->ready_fd.
 * 0, or -EINVAL / -E2BIG with why (a usage error). No I/O. */
int sandbox_jail_inner(struct sbx_jail_run *j, int argc, char **argv, struct sbx_err *err);

/* Steps 0-3: refused unless root; the ready fd must be an open pipe; the
 * base resolved; every inherited fd but 0-2 and the ready fd closed; the
 * environment cleared; this binary, its interpreter and shared objects
 * (after j->preload) join j->paths; every path must exist (a missing
 * overlay: its directory instead); the host kind. 0 or -errno with why. */
int sandbox_jail_prepare(struct sbx_jail_run *j, struct sbx_err *err);

/* j->root: REALBASE/moat/ID/root. 0, or -ENAMETOOLONG with why (a usage
 * error: the base is too long). No I/O. */
int sandbox_jail_root_path(struct sbx_jail_run *j, struct sbx_err *err);

/* Steps 4-7 before the fork: the jail directory (root's, 0755, not on a
 * nodev mount), the per-VM cgroup with its limits (when asked), the
 * network namespace joined, new ipc, uts and pid namespaces (the pid one
 * for the next child). 0 or -errno with why. */
int sandbox_jail_setup(struct sbx_jail_run *j, struct sbx_err *err);

/* Block the signals sandbox_jail_parent forwards (SIGINT, SIGTERM, SIGHUP,
 * SIGUSR1, SIGUSR2, SIGCHLD), before the fork; the mask before into old. */
void sandbox_jail_block_signals(sigset_t *old);

/* In the child of the fork after sandbox_jail_setup (pid 1 of the new pid
 * namespace): the signal mask set back to mask; the cgroup joined; its own
 * mount namespace; every path bind-mounted into the jail (no symbolic link
 * followed there), the device nodes; pivot_root; rlimits; no_new_privs; no
 * capabilities; uid/gid; exec of the inner moat with MOAT_FORCE_PVM only.
 * Returns only on failure: -errno with why (the caller says it and _exits;
 * moat jail prints it to stderr, as the child always did). Nothing here
 * allocates or writes to a stream; the messages are formatted (snprintf,
 * strerror_r) into err, as moat jail's child formatted them before. */
int sandbox_jail_child(const struct sbx_jail_run *j, const sigset_t *mask, struct sbx_err *err);

/* In the parent after the fork of the child pid: closes its copy of the
 * ready fd, waits for pid, passing on SIGUSR1/SIGUSR2 and turning SIGINT,
 * SIGTERM and SIGHUP into SIGKILL (the jailed moat is pid 1: it would drop
 * them); *status: the child's exit status, or 128 + the signal (the one
 * received, where it was killed for it). Then removes the per-VM cgroup:
 * 0, or -errno with why when that failed (*status is set either way). */
int sandbox_jail_parent(const struct sbx_jail_run *j, pid_t pid, int *status, struct sbx_err *err);

/* The same jail started in one process (sandbox_spawn, moat create --jail
 * and start: no moat jail, no supervisor), after sandbox_jail_defaults,
 * the options, sandbox_jail_inner and detached set:
 *
 *   sandbox_jail_host   in the caller, which it leaves as it is (its fds,
 *                       environment, namespaces): root, the base resolved,
 *                       this binary's files (steps 0 and 3), the jail
 *                       directory (4), the per-VM cgroup (5; one left by an
 *                       earlier jailed moat of this id removed first).
 *                       0 or -errno with why.
 *   sandbox_jail_clone  a raw clone(2) into new pid, ipc and uts
 *                       namespaces (7), fork-like: the child, pid 1 there,
 *                       gets 0; the caller its pid (in the caller's
 *                       namespace), or -1 with errno.
 *   sandbox_jail_enter  in that child (async-signal-safe calls only: the
 *                       caller may have threads): the network namespace
 *                       joined (6), then sandbox_jail_child. Returns only
 *                       on failure, -errno with why. */
int sandbox_jail_host(struct sbx_jail_run *j, struct sbx_err *err);
pid_t sandbox_jail_clone(void);
int sandbox_jail_enter(const struct sbx_jail_run *j, const sigset_t *mask, struct sbx_err *err);

#endif
