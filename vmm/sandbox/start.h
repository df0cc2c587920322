/* Starting a sandbox's VM process (vmm/sandbox/start.c) and the files
 * helpers the sandbox operations share (vmm/sandbox/files.c): moat start,
 * and the spawning and waiting that create, reset and fork use. The rules
 * of sandbox.h hold: 0 or -errno, why in a struct sbx_err, no printing,
 * no static state.
 *
 * A VM process is this binary (/proc/self/exe) run as `moat run|restore
 * ...` (a jailed sandbox's: `moat jail ... -- moat restore ...`) in its
 * own session, forked by the calling thread: it is the caller's child,
 * which a long-lived caller (moat serve) reaps once it exits. */
#ifndef MOAT_SANDBOX_START_H
#define MOAT_SANDBOX_START_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "vmm/sandbox/sandbox.h"

/* ---- files (vmm/sandbox/files.c) ---- */

/* Drive n's overlay path (its spec's overlay=) into buf: 1, or 0 when it
 * has none (or there is no drive n). */
int sandbox_drive_overlay(const struct sbx *s, unsigned n, char *buf, size_t len);
/* spec with its overlay= replaced by ovl: a heap string, NULL out of memory. */
char *sandbox_spec_with_overlay(const char *spec, const char *ovl);
/* Write text to path through path.tmp (a new file, 0600, no link
 * followed) renamed over it: 0 or -errno. */
int sandbox_write_file(const char *path, const char *text);
/* errno of sandbox_open_regular_at when something else than a regular
 * file is there. */
#define SBX_EFTYPE_NOT_REG EMEDIUMTYPE
/* NAME in directory dfd opened for reading, neither following a link nor
 * blocking (a FIFO a jail planted), and only if it is a regular file: the
 * fd, or -1 with errno (SBX_EFTYPE_NOT_REG: something else is there). */
int sandbox_open_regular_at(int dfd, const char *name);
/* A file (a disk overlay, a pin) a jailed sandbox's jail may have
 * replaced: opened with neither its directory's last component nor its
 * own name followed, a regular file, named /proc/self/fd/N into buf (*keep:
 * the descriptor, for the caller to close; -1 none). For an unjailed
 * sandbox, file itself. NULL with errno. */
const char *sandbox_file_via(const struct sbx *s, const char *file, char *buf, size_t len, int *keep);
/* Copy-on-write clone (ovl_clone) of the overlay FILE, opened as
 * sandbox_file_via does, into the new file dst: 0, or -errno / -1 with
 * why (the file's name and what failed). */
int sandbox_clone_via(const struct sbx *s, const char *file, const char *dst, char *why, size_t wlen);
/* A directory made in a jailed sandbox's directory for its jail to read
 * and write (tags/, a tag): root's, the jail's group, sticky; refused when
 * it is not root's. 0 (also unjailed: nothing done), or -errno with why. */
int sandbox_jail_share_dir(const struct sbx *s, const char *dir, struct sbx_err *err);
/* The tail of s's moat.log (its last 2 KiB) added to err: a line
 * "NAME's log (PATH):", then each line of the log as an SBX_VERBATIM line.
 * Nothing when there is no log. */
void sandbox_log_tail(const struct sbx *s, int code, struct sbx_err *err);

/* ---- starting (vmm/sandbox/start.c) ---- */

/* Told at the end of each step of a start (--timings): the step's name (a
 * static string), when it ended (CLOCK_MONOTONIC ns, clock_mono_ns(); 0:
 * unknown, not to be recorded); ctx as given. */
typedef void sbx_phase_ns_fn(void *ctx, const char *step, uint64_t ns);

struct sbx_start_opts {
    /* Seconds to wait for the guest agent to answer; 0: only for the VMM
     * (its control socket, 30 s at most). */
    double wait;
    /* Give up (clean up) once *cancel is non-zero, e.g. set by a signal
     * handler (Ctrl-C); NULL: never. */
    const volatile sig_atomic_t *cancel;
    /* Steps: "spawned", "first_run" and "ctl_ready" (the time the last
     * process got there), "agent_ready" (when wait > 0); sandbox_start
     * also "locked" and "state". NULL: not told. */
    sbx_phase_ns_fn *phase;
    void *ctx;
};

/* A jailed sandbox's files its restores need that moat jail does not find
 * in the restore command (its run options' --kernel, --initrd and --device
 * blk paths, from its config's arg= lines; those that exist) into *l.
 * 0, or -errno with why. */
int sandbox_jail_restore_paths(const struct sbx *s, struct jail_paths *l, struct sbx_err *err);

/* Start `moat VERB` (run or restore) for s in the background: its own
 * session, stdin /dev/null, stdout and stderr appended to NAME/moat.log,
 * the console to NAME/console.log, --control, --vsock and --ready-fd set;
 * extra: VERB's own arguments (nextra of them). A jailed sandbox's under
 * moat jail (expose_ro: a directory bound in read-only as well, a fork's
 * shared snapshot; NULL none). *ready_fd: the read end of a pipe the new
 * moat writes "ready NS" to once its control socket listens and its guest
 * runs, then closes (EOF without it: it failed). Writes NAME/pid (a
 * warning line in err, code 0, when it cannot). The pid, or -errno with
 * why. Only async-signal-safe calls between fork and exec. */
pid_t sandbox_spawn(const struct sbx *s, const char *verb, char *const *extra, int nextra, int *ready_fd,
                    const char *expose_ro, struct sbx_err *err);

/* A started VM process being waited for. */
struct sbx_starting {
    struct sbx *s;
    pid_t pid;
    int rfd;                /* the ready pipe, -1 once read */
    char buf[64];
    size_t len;
    bool ctl_ok, failed;
    uint64_t ready_ns, first_run_ns;
    uint64_t failed_ns;     /* when it was marked failed (clock_mono_ns) */
    struct sbx_err *err;    /* where its failure is told (NULL: not) */
};

/* Wait for n started processes at once: each tells over its pipe when its
 * control socket listens and its guest runs; then, when o->wait > 0, its
 * guest agent must answer a ping (tried at once, then again after 2, 4, 8
 * ... ms up to 100 ms apart). One that dies, does not get there within
 * o->wait s (30 s for the control socket when wait is 0), or is cancelled
 * is marked failed, with the reason and its log's tail in its err. Steps
 * "first_run", "ctl_ready", "agent_ready". Returns how many failed. */
unsigned sandbox_wait_ready_all(struct sbx_starting *k, size_t n, const struct sbx_start_opts *o);
/* Spawn the restore of snapdir (a snapshot) as s's process into *k (its
 * err set to err): the drives from s's config (its own overlays), a fork
 * child's devices an identity of their own (fork_child; snapdir is then
 * exposed read-only to a jailed one). 0, or -errno with why. */
int sandbox_start_spawn(struct sbx *s, const char *snapdir, bool fork_child, struct sbx_starting *k,
                        struct sbx_err *err);
/* A start that failed: its process killed and reaped, its pid file gone. */
void sandbox_start_undo(struct sbx_starting *k);
/* Restore snapdir as s's process and wait for it (sandbox_start_spawn,
 * step "spawned", sandbox_wait_ready_all; undone when it failed). 0, or
 * -errno with why. */
int sandbox_start_from(struct sbx *s, const char *snapdir, bool fork_child, const struct sbx_start_opts *o,
                       struct sbx_err *err);
/* Start s (opened and locked) from its stop snapshot (a snap.new an
 * interrupted stop left promoted first). *was: its state before; running
 * or paused is 0 with nothing done. *vm: the new VM process (the caller's
 * child), 0 when none was started. was and vm may be NULL. A template is
 * not started. Step "state" then those of sandbox_start_from. 0, or
 * -errno with why. */
int sandbox_start_locked(struct sbx *s, const struct sbx_start_opts *o, enum sbx_state *was, pid_t *vm,
                         struct sbx_err *err);
/* Open and lock NAME (step "locked"), then sandbox_start_locked. */
int sandbox_start(const char *name, const struct sbx_start_opts *o, enum sbx_state *was, pid_t *vm,
                  struct sbx_err *err);

#endif
