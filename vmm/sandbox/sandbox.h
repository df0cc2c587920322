/* Named sandboxes as a library (docs/sandboxes.md, docs/architecture.md):
 * the store under $MOAT_HOME (one directory per sandbox: its config, pid
 * file, control and vsock sockets, snapshots) and the operations on it.
 * Above core/snapshot/agent, below the API servers and the CLI, which print
 * what these functions return.
 *
 * Rules: functions return 0 (or a count) or -errno; those that can fail for
 * a reason worth telling fill a struct sbx_err (its msg: one or more lines,
 * without "moat: " and without the final newline); nothing is printed,
 * nothing exits, there is no static state. Every function may be called
 * from several threads at once (each on its own struct sbx; a sandbox's
 * changes are serialised by the flock on its directory, across processes
 * too). $MOAT_HOME, $XDG_DATA_HOME and $HOME are read once per call. */
#ifndef MOAT_SANDBOX_H
#define MOAT_SANDBOX_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

#include "include/moat.h"
#include "vmm/sandbox/jail_spec.h"

#define SBX_NAME_MAX 63         /* bytes in a sandbox's name */
#define SBX_HOME_MAX 3000       /* bytes in $MOAT_HOME */
#define SBX_JAIL_CG_MAX 16      /* jail.cgroup= lines kept */

struct sbx_err {
    int code;           /* the -errno returned */
    char msg[4096];     /* why, one message a line; "" with code 0 */
};
/* A line of msg that starts with this character is quoted text (a log's
 * tail), shown as it is (without the character), not as a message. */
#define SBX_VERBATIM '\x1f'

enum sbx_state { SBX_RUNNING, SBX_PAUSED, SBX_STOPPED, SBX_DEAD, SBX_HUNG };

/* A sandbox's record: its paths and its config. sandbox_paths or
 * sandbox_open fill it; sandbox_close releases it. */
struct sbx {
    char name[SBX_NAME_MAX + 1];
    char dir[SBX_HOME_MAX + 100];   /* $MOAT_HOME / NAME */
    int dfd;                /* the directory, flock'ed while its state changes */
    char ctl[108], vsock[108];
    int ephemeral, rw_drive;
    /* drive.N= lines of the config: each drive's --drive spec as moat run
     * got it (absolute paths, overlay= included); heap strings. */
    char *drive[MOAT_MAX_DRIVES];
    unsigned ndrive;
    /* net.tap= of the config: a fork's own TAP (moat fork --tap), given to
     * every restore as --net tap=NAME; "" none */
    char tap[16];
    /* jail.* of the config: the sandbox runs under moat jail (moat create
     * --jail): every start of its VM process goes through it. */
    struct sbx_jail {
        int on, tun;
        char id[JAIL_ID_MAX + 1];
        unsigned uid, gid;
        char base[PATH_MAX], netns[PATH_MAX], cgroot[PATH_MAX];
        char cg[SBX_JAIL_CG_MAX][JAIL_CG_VAL_MAX + 32];     /* KEY=VALUE */
        int ncg;
    } jail;
};

/* What moat ls shows of one sandbox. */
struct sbx_info {
    char name[SBX_NAME_MAX + 1];
    enum sbx_state state;
    pid_t pid;          /* the pid file's (also a stale one: dead); 0 none */
    double uptime;      /* seconds, from a live VMM; -1 unknown */
    int jailed;
    unsigned jail_uid, jail_gid;
};

/* ---- the store (vmm/sandbox/store.c) ---- */

/* Add a line (printf format) to err->msg (err may be NULL); err->code
 * becomes code unless it holds an earlier error. Returns code. */
int sandbox_err(struct sbx_err *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* errno e's text, thread-safe (a buffer of the calling block's). */
#define SBX_STRERROR(e) strerror_r((e), (char[128]){ 0 }, 128)

/* "running", "paused", "stopped", "dead", "unresponsive". */
const char *sandbox_state_str(enum sbx_state st);
/* 1 when n is a sandbox name: 1-63 of A-Z a-z 0-9 - _ ., starting with a
 * letter or digit; else 0. */
int sandbox_valid_name(const char *n);
/* $MOAT_HOME (a relative one against the current directory), or its
 * default: /var/lib/moat for root, $XDG_DATA_HOME/moat or
 * ~/.local/share/moat otherwise. 0, or -EINVAL / -ENAMETOOLONG with why. */
int sandbox_home(char *buf, size_t len, struct sbx_err *err);
/* mkdir -p PATH with MODE for each directory it creates: 0 or -errno. */
int sandbox_mkdir_p(const char *path, mode_t mode);
/* s->dir/file into p. */
const char *sandbox_path(const struct sbx *s, const char *file, char *p, size_t len);
/* Fill s's name and paths (nothing opened; s->dfd -1). 0, or -EINVAL (not
 * a valid name, a bad $MOAT_HOME) / -ENAMETOOLONG with why. */
int sandbox_paths(struct sbx *s, const char *name, struct sbx_err *err);
/* Take s's directory lock, waiting up to 30 s: 0 or -EBUSY with why. */
int sandbox_lock(struct sbx *s, struct sbx_err *err);
/* Close s's directory and free its config's strings (again: no-op). */
void sandbox_close(struct sbx *s);
/* Read s's config file into s (a missing one leaves the defaults). */
void sandbox_read_config(struct sbx *s);
/* One jail line of a config (without its newline) into j. */
void sandbox_jail_config_line(struct sbx_jail *j, const char *l);
/* Open the existing sandbox NAME, locked when lock, its config read.
 * 0, or -EINVAL, -ENOENT (no such sandbox), -EBUSY, -errno with why;
 * sandbox_close it after a 0. */
int sandbox_open(struct sbx *s, const char *name, int lock, struct sbx_err *err);
/* The same into a struct sbx of the heap (~17 KiB: not on a server
 * thread's stack): it, or NULL with *r the -errno (why in err).
 * sandbox_free it. */
struct sbx *sandbox_open_alloc(const char *name, int lock, int *r, struct sbx_err *err);
/* sandbox_close s and free it (NULL: nothing). */
void sandbox_free(struct sbx *s);
/* 1 when NAME is a valid name with a config in $MOAT_HOME; else 0. */
int sandbox_exists(const char *name);
/* rm -rf PATH, neither following a symbolic link below it nor crossing a
 * mount: 0 (also when PATH does not exist), or -errno (errno set too). */
int sandbox_rm_rf(const char *path);
/* The same for NAME below the open directory dfd, only entries on device
 * dev: 0 or -errno (errno set too). */
int sandbox_rm_at(int dfd, const char *name, dev_t dev);
/* Remove what moat jail leaves of a jailed sandbox once its process is
 * gone (its jail root, its cgroup). 0, or -errno with why. */
int sandbox_jail_cleanup(const struct sbx *s, struct sbx_err *err);
/* The pid file's pid: 0 none, -1 unreadable or not a pid. */
pid_t sandbox_read_pid(const struct sbx *s);
/* 1 when pid is a live moat serving s's control socket (not a zombie, not
 * a recycled pid); else 0. */
int sandbox_pid_is_ours(const struct sbx *s, pid_t pid);
/* One request line to the VMM at the control socket path, its reply line
 * (newline cut) into reply: 0 or -errno (-ETIMEDOUT after timeout_s). */
int sandbox_ctl_path_request(const char *path, const char *req, char *reply, size_t rlen, int timeout_s);
/* The path to connect to s's socket PATH by. A jailed sandbox's sockets
 * are made by its jail, which could put a symbolic link in their place
 * (connect follows it, as root): there the socket is opened
 * O_PATH|O_NOFOLLOW, must be a socket, and is reached through
 * /proc/self/fd/N; *keep is that descriptor (-1 when none), for the caller
 * to close after connecting. NULL with errno when it is not a socket. */
const char *sandbox_sock_via(const struct sbx *s, const char *path, char *buf, size_t len, int *keep);
/* The same to s's control socket (a jailed one's opened without
 * following a link the jail put there). */
int sandbox_ctl_request(const struct sbx *s, const char *req, char *reply, size_t len, int timeout_s);
/* A request whose reply must start with "ok": 0, or -errno / -EPROTO
 * (the VMM's reply as the message) with why. reply may be NULL. */
int sandbox_ctl(const struct sbx *s, const char *req, char *reply, size_t len, int timeout_s,
                struct sbx_err *err);
/* s's state; *pid the pid file's (0 none), *uptime from the VMM (-1 unknown). */
enum sbx_state sandbox_state(const struct sbx *s, pid_t *pid, double *uptime);
/* Wait up to timeout s for pid (s's VMM, not necessarily our child) to be
 * gone; then SIGKILL it when force (and wait 5 s more). 0 once gone,
 * -ETIMEDOUT. */
int sandbox_wait_gone(const struct sbx *s, pid_t pid, double timeout, int force);
/* Stop s's VMM pid (stop request, then SIGKILL if it does not go) and
 * remove its pid file and control socket. 0, or -ETIMEDOUT with why. */
int sandbox_kill_process(const struct sbx *s, pid_t pid, struct sbx_err *err);
/* 0 when st is running or paused; else -EINVAL with why ("cannot WHAT it"). */
int sandbox_need_live(const struct sbx *s, enum sbx_state st, const char *what, struct sbx_err *err);
/* The valid names in $MOAT_HOME starting with prefix (directories or not),
 * sorted, strdup'ed into names (at most max; the caller frees each): how
 * many (0 when $MOAT_HOME does not exist), or -errno with why. */
ssize_t sandbox_names(const char *prefix, char **names, size_t max, struct sbx_err *err);

/* ---- operations (vmm/sandbox/ops.c) ---- */

/* The state of sandbox NAME (read only: no lock) into *out. 0, or -EINVAL
 * (not a valid name), -ENOENT (no such sandbox), -ENAMETOOLONG with why. */
int sandbox_info(const char *name, struct sbx_info *out, struct sbx_err *err);
/* The sandboxes whose names start with prefix, sorted by name, each with
 * its state: *out (malloc'd, free it) and *n. Directories of $MOAT_HOME
 * that are no sandbox are left out. 0, or -errno with why. */
int sandbox_list(const char *prefix, struct sbx_info **out, size_t *n, struct sbx_err *err);
/* The same with each name (valid, starting with prefix, sorted) given to
 * fill with an element of size bytes (zeroed) to fill in: 0 keeps it, -1
 * leaves it out. *out (malloc'd, free it), *n. 0, or -errno with why. */
int sandbox_list_of(const char *prefix, size_t size, int (*fill)(const char *name, void *elem), void **out,
                    size_t *n, struct sbx_err *err);
/* NAME's state's name into out: 0, -ENOENT or -EINVAL (no message). */
int sandbox_state_name(const char *name, char *out, size_t len);
/* Remove sandbox NAME: its VMM stopped (killed after 10 s when force), its
 * directory and its jail's leftovers removed. 0, or -errno with why (every
 * step that failed, a line each). */
int sandbox_remove(const char *name, int force, struct sbx_err *err);
/* Pause or resume sandbox NAME's VM. 0, or -errno with why. */
int sandbox_pause(const char *name, struct sbx_err *err);
int sandbox_resume(const char *name, struct sbx_err *err);

/* Told at the end of each step of an operation (--timings): the step's
 * name (a static string); ctx as given. NULL: not told. */
typedef void sbx_phase_fn(void *ctx, const char *step);

/* Make a complete s->dir/snap.new (its state file is written last)
 * s->dir/snap, swapped atomically with an existing snap, so a crash at any
 * point leaves a whole snapshot under snap or under snap.new. An
 * incomplete snap.new is removed. 0 (also when there is none), or -errno
 * with why. */
int sandbox_promote_snap_new(struct sbx *s, struct sbx_err *err);
/* Stop s (opened and locked): snapshot into s->dir/snap (via snap.new) and
 * let its VMM exit; an ephemeral sandbox is destroyed instead (VMM killed,
 * directory and jail removed). *was: its state before; already stopped is
 * 0 with nothing done. Steps: "state", "snapshot", "promoted", "exited".
 * 0, or -errno with why (msg may be empty where the CLI printed nothing:
 * the directory not removable, the VMM not gone after SIGKILL). */
int sandbox_stop_locked(struct sbx *s, sbx_phase_fn *phase, void *ctx, enum sbx_state *was,
                        struct sbx_err *err);
/* Open and lock NAME (step "locked"), then sandbox_stop_locked. */
int sandbox_stop(const char *name, sbx_phase_fn *phase, void *ctx, enum sbx_state *was,
                 struct sbx_err *err);

#endif
