/* Forking a sandbox (vmm/sandbox/fork.c): moat fork and template create
 * --from, and the snapshot helpers they share with moat snapshot --tag.
 * The rules of sandbox.h hold: 0 or -errno, why in a struct sbx_err, no
 * printing, no static state. */
#ifndef MOAT_SANDBOX_FORK_H
#define MOAT_SANDBOX_FORK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vmm/sandbox/start.h"

/* ---- snapshots of a sandbox ---- */

/* Hard-link from/state and from/memory into to/ (made if missing;
 * snapshot files are never changed in place, only replaced, so links are
 * safe copies); no link below either directory followed. 0 or -errno. */
int sandbox_link_snapshot(const char *from, const char *to);
/* Pin s's overlays into dir/diskN.overlay from the files themselves (no
 * process has them open). 0, or -errno with why. */
int sandbox_clone_own_disks(const struct sbx *s, const char *dir, struct sbx_err *err);
/* A snapshot of s (opened and locked) into dir, its copy-on-write disks
 * pinned beside it (dir/diskN.overlay): through the control socket when
 * it runs (snapshot-disks: one pause for both), by linking its stop
 * snapshot and copying its overlays when stopped (a jailed sandbox's dir
 * then shared with its jail). 0, or -errno with why. */
int sandbox_snapshot_into(struct sbx *s, const char *dir, struct sbx_err *err);

/* ---- jails of new sandboxes ---- */

/* A new jail id for the sandbox name into j->id: the name's characters an
 * id takes ('.' as '_', at most 40) and 8 random hex digits. 0, or -errno
 * with why. */
int sandbox_jail_new_id(struct sbx_jail *j, const char *name, struct sbx_err *err);
/* s's directory (s->dfd) as a jailed sandbox's: root's, its jail's group
 * may create files, others nothing; sticky. 0, or -errno with why. */
int sandbox_jail_dir_perms(const struct sbx *s, struct sbx_err *err);

/* ---- fork ---- */

/* fmt (one %u, see sandbox_tap_format_ok) with the %u replaced by num
 * into out (cut to len): the length it has uncut. */
size_t sandbox_tap_name(const char *fmt, unsigned long num, char *out, size_t len);
/* 1 when fmt names each of count children's TAP: one %u (the child's
 * number, 1..count), no other '%', no '/' or ',', at most 15 bytes once
 * expanded; else 0. */
int sandbox_tap_format_ok(const char *fmt, unsigned long count);

struct sbx_fork_opts {
    const char *child;      /* the one child's name (count 1); NULL: PREFIX-1..PREFIX-N */
    const char *prefix;     /* NULL: the parent's name */
    unsigned long count;    /* children, >= 1 */
    const char *tapfmt;     /* each child's own TAP (sandbox_tap_format_ok); NULL: none */
    bool stopped;           /* children stopped (the snapshot their stop snapshot), nothing runs */
    unsigned jail_uid, jail_gid;    /* a jailed parent's children's (0: the parent's) */
    /* Starting the children (wait, cancel); steps "prepared", "snapshot",
     * "overlays", then those of sandbox_wait_ready_all after "spawned". */
    struct sbx_start_opts start;
};

/* One child of a fork: what became of it. */
struct sbx_fork_child {
    char name[SBX_NAME_MAX + 1];
    bool made;              /* it got its snapshot (then it was started or stopped) */
    int code;               /* 0: made and started (stopped: in place); -errno: failed, removed again */
    pid_t pid;              /* its VM process (the caller's child), 0 none */
    /* What was said about its start (a spawn's warning or failure, its
     * log's tail), and when it was first said (clock_mono_ns; 0 never):
     * sandbox_fork_told orders children by it. */
    struct sbx_err err;
    uint64_t told_ns;
};

/* Fork sandbox parent into o->count children (o->child, or PREFIX-1 ..
 * PREFIX-N), each with its own copy-on-write overlays, config, TAP and
 * jail, from one snapshot of the parent (which goes on running; its lock
 * is let go before the children start), then started all at once and
 * waited for together (or, stopped, left with the snapshot as their stop
 * snapshot). kids: o->count entries, filled. 0 when every child was made
 * (and started), else -errno: err has why, every message not about one
 * child's start (in the order they came; after those of the children's
 * starts), kids[i].err those about child i's start. */
int sandbox_fork(const char *parent, const struct sbx_fork_opts *o, struct sbx_fork_child *kids,
                 struct sbx_err *err);
/* The children of a fork with something said about their start, in the
 * order it was said, into order (n entries at most): how many. */
size_t sandbox_fork_told(const struct sbx_fork_child *kids, size_t n, size_t *order);

#endif
