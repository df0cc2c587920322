/* Creating a sandbox (vmm/sandbox/create.c): moat create, and template
 * create's base. The rules of sandbox.h hold: 0 or -errno, why in a
 * struct sbx_err, no printing, no static state.
 *
 * Messages that moat create printed with a prefix of its own ("moat
 * create: ...", "moat create --jail: ...") come as SBX_VERBATIM lines
 * holding that whole line; the others as plain lines ("moat: " added by
 * the CLI). */
#ifndef MOAT_SANDBOX_CREATE_H
#define MOAT_SANDBOX_CREATE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "vmm/sandbox/start.h"

#define SBX_DEFAULT_WAIT 120.0          /* create's --wait */
#define SBX_JAIL_DEFAULT_ID 65534       /* --jail-uid/--jail-gid: nobody, nogroup */
#define SBX_CONFIG_MAX 65536            /* bytes in a sandbox's config */
#define SBX_ARGS_MAX 65000              /* bytes of its arg= (and jail) lines */

/* moat run's long option that a names ("--NAME" or "--NAME=V", NAME an
 * unambiguous prefix, as getopt_long matches): its full name, *has_val
 * whether it takes a value; NULL when a names none. */
const char *sandbox_run_opt(const char *a, int *has_val);

/* A sandbox's --drive spec (drive n of s, whose paths are filled): its
 * paths absolute, and a writable drive an overlay in the sandbox's
 * directory (diskN.overlay) unless the spec names one (overlay=FILE: that
 * one; overlay=none: the image itself is written). The new spec into out;
 * *rw_in_place set for a writable drive without an overlay. 0, or -EINVAL
 * / -ENAMETOOLONG with why. */
int sandbox_drive_spec(const struct sbx *s, unsigned n, const char *spec, char *out, size_t olen,
                       int *rw_in_place, struct sbx_err *err);

struct sbx_create_opts {
    /* moat run's arguments as the config records them (its arg= lines)
     * and as the sandbox's process gets them: run options as "--NAME"
     * "VALUE" pairs (a drive's value its sandbox_drive_spec), then the
     * guest's command (after "--"). Not --vsock, --control or
     * --console-log: the sandbox's own. */
    char *const *args;
    int nargs;
    /* The --drive values among them, in order (the config's drive.N=). */
    char *const *drive;
    unsigned ndrive;
    int ephemeral;          /* --ephemeral: stop destroys it */
    int rw_drive;           /* a writable drive without an overlay (sandbox_drive_spec) */
    /* The jail options (on: --jail; uid, gid 0: 65534; base "":
     * /srv/jail; netns, cgroot "": none; cg[]: --jail-cgroup KEY=VALUE);
     * its id is made here. */
    struct sbx_jail jail;
    /* --wait, Ctrl-C, and the steps ("spawned", then those of
     * sandbox_wait_ready_all). */
    struct sbx_start_opts start;
};

struct sbx_create_res {
    bool usage;             /* refused for its arguments (moat create's usage exit) */
    pid_t pid;              /* the new VM process (the caller's child); 0 none */
};

/* Create sandbox NAME: check a jailed one's settings (root, its paths),
 * make its directory (a jailed one's shared with its jail), write its
 * config, start `moat run ARGS` in the background and wait for it
 * (sandbox_spawn, sandbox_wait_ready_all). On failure nothing is left
 * behind (directory, jail, an empty $MOAT_HOME). 0, or -errno with why
 * (res->usage: a refusal of the arguments). */
int sandbox_create(const char *name, const struct sbx_create_opts *o, struct sbx_create_res *res,
                   struct sbx_err *err);

#endif
