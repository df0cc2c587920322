/* A sandbox's tags (see snapshot.h): take one, reset to one, compare the
 * disks with one's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices/blk/overlay_disk.h"
#include "include/moat.h"
#include "vmm/sandbox/fork.h"
#include "vmm/sandbox/snapshot.h"

/* s's tags/TAG snapshotted through tags/.TAG.tmp. */
static int tag_locked(struct sbx *s, const char *tag, struct sbx_err *err)
{
    char tags[3200], tmp[PATH_MAX], final[PATH_MAX];
    sandbox_path(s, "tags", tags, sizeof tags);
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", tags, tag);
    snprintf(final, sizeof final, "%s/%s", tags, tag);
    if (access(final, F_OK) == 0)
        return sandbox_err(err, -EEXIST, "sandbox %s already has a tag %s", s->name, tag);
    mkdir(tags, 0700);
    int r = sandbox_jail_share_dir(s, tags, err);  /* a jailed sandbox's moat writes the tag */
    if (r < 0)
        return r;
    sandbox_rm_rf(tmp);
    if ((r = sandbox_snapshot_into(s, tmp, err)) < 0) {
        sandbox_rm_rf(tmp);
        return r;
    }
    if (rename(tmp, final) < 0) {
        r = sandbox_err(err, -errno, "%s: %s", final, SBX_STRERROR(errno));
        sandbox_rm_rf(tmp);
    }
    return r;
}

int sandbox_snapshot_tag(const char *name, const char *tag, struct sbx_err *err)
{
    if (!sandbox_valid_name(tag))
        return sandbox_err(err, -EINVAL, "invalid tag '%s' (as a sandbox name)", tag);
    struct sbx *s = malloc(sizeof *s);     /* ~17 KiB: not on a server thread's stack */
    int r = s ? sandbox_open(s, name, 1, err) : sandbox_err(err, -ENOMEM, "out of memory");
    if (r == 0) {
        r = tag_locked(s, tag, err);
        sandbox_close(s);
    }
    free(s);
    return r;
}

/* Drive n's overlay own staged as own.reset: a copy of the tag's pin in
 * dir. 1 staged, 0 no pin (a warning), or -errno with why. */
static int reset_stage(struct sbx *s, const char *dir, const char *tag, unsigned n, const char *own,
                       struct sbx_err *err)
{
    char pin[PATH_MAX + 64], stage[PATH_MAX + 16], why[512] = "";
    snprintf(pin, sizeof pin, "%s/disk%u.overlay", dir, n);
    if (access(pin, F_OK) != 0) {
        sandbox_err(err, 0, "warning: tag %s has no pin of drive %u: that disk stays as it is now", tag, n);
        return 0;
    }
    snprintf(stage, sizeof stage, "%s.reset", own);
    unlink(stage);
    /* A jailed sandbox's tag is its jail's to write: the pin is opened
     * without following links (file_via), and the copy, made by root,
     * becomes the jail's (its moat writes it). */
    int r = sandbox_clone_via(s, pin, stage, why, sizeof why);
    if (r == 0 && s->jail.on && lchown(stage, s->jail.uid, s->jail.gid) < 0) {
        r = -errno;
        snprintf(why, sizeof why, "%.400s: %s", stage, SBX_STRERROR(-r));
    }
    if (r < 0) {
        unlink(stage);
        return sandbox_err(err, r < -1 ? r : -EIO, "sandbox %s: copying the tag's disk: %s", s->name, why);
    }
    return 1;
}

/* The staged overlays (staged[n]) removed again, or (swap) renamed over
 * their overlays: 0, or -errno with why. */
static int reset_unstage(struct sbx *s, bool *staged, bool swap, struct sbx_err *err)
{
    char own[PATH_MAX], stage[PATH_MAX + 16];
    for (unsigned n = 0; n < s->ndrive; n++) {
        if (!staged[n] || !sandbox_drive_overlay(s, n, own, sizeof own))
            continue;
        snprintf(stage, sizeof stage, "%s.reset", own);
        if (!swap) {
            unlink(stage);
        } else if (rename(stage, own) < 0) {
            int r = sandbox_err(err, -errno, "%s: %s", own, SBX_STRERROR(errno));
            reset_unstage(s, staged, false, err);
            return r;
        }
        staged[n] = false;
    }
    return 0;
}

/* s (opened and locked) reset to its tag in dir. */
static int reset_locked(struct sbx *s, const char *tag, const char *dir, const struct sbx_start_opts *o,
                        struct sbx_err *err)
{
    /* The disk goes back too: each overlay is replaced by a copy of the
     * tag's pin (made first, next to it; swapped in once the process is
     * gone). */
    char own[PATH_MAX], p[PATH_MAX];
    bool staged[MOAT_MAX_DRIVES] = { false }, any = false;
    int r = 0;
    for (unsigned n = 0; n < s->ndrive && r >= 0; n++) {
        if (!sandbox_drive_overlay(s, n, own, sizeof own))
            continue;
        r = reset_stage(s, dir, tag, n, own, err);
        staged[n] = r > 0;
        any |= r > 0;
    }
    if (r >= 0)
        r = sandbox_kill_process(s, sandbox_read_pid(s), err);
    if (r >= 0)
        r = reset_unstage(s, staged, true, err);
    if (r < 0) {
        reset_unstage(s, staged, false, err);
        return r;
    }
    /* A stop snapshot of the old disk must not be started over the tag's. */
    if (any)
        sandbox_rm_rf(sandbox_path(s, "snap", p, sizeof p));
    return sandbox_start_from(s, dir, false, o, err);
}

int sandbox_reset(const char *name, const char *tag, const struct sbx_start_opts *o, struct sbx_err *err)
{
    struct sbx *s = malloc(sizeof *s);     /* ~17 KiB: not on a server thread's stack */
    int r = s ? sandbox_open(s, name, 1, err) : sandbox_err(err, -ENOMEM, "out of memory");
    if (r == 0) {
        char dir[3300], p[PATH_MAX];
        snprintf(dir, sizeof dir, "%s/tags/%s", s->dir, tag);
        snprintf(p, sizeof p, "%s/state", dir);
        if (!sandbox_valid_name(tag) || access(p, F_OK) != 0)
            r = sandbox_err(err, -ENOENT, "sandbox %s has no tag %s (moat snapshot %s --tag %s)", s->name, tag,
                            s->name, tag);
        else
            r = reset_locked(s, tag, dir, o, err);
        sandbox_close(s);
    }
    free(s);
    return r;
}

int sandbox_diff_begin(const char *name, const char *tag, struct sbx_diff *d, struct sbx_err *err)
{
    int r = sandbox_open(&d->s, name, 1, err);
    if (r < 0)
        return r;
    char p[PATH_MAX], own[PATH_MAX];
    snprintf(d->tagdir, sizeof d->tagdir, "%s/tags/%s", d->s.dir, tag);
    snprintf(p, sizeof p, "%s/state", d->tagdir);
    d->tmp[0] = 0;
    unsigned novl = 0;
    for (unsigned n = 0; n < d->s.ndrive; n++)
        novl += (unsigned)sandbox_drive_overlay(&d->s, n, own, sizeof own);
    pid_t pid;
    double up;
    enum sbx_state st = SBX_DEAD;
    if (!sandbox_valid_name(tag) || access(p, F_OK) != 0)
        r = sandbox_err(err, -ENOENT, "sandbox %s has no tag %s", d->s.name, tag);
    else if (!novl)
        r = sandbox_err(err, -ENOENT, "sandbox %s has no copy-on-write drive: nothing to compare", d->s.name);
    else
        st = sandbox_state(&d->s, &pid, &up);
    if (r == 0 && (st == SBX_RUNNING || st == SBX_PAUSED)) {
        snprintf(d->tmp, sizeof d->tmp, "%s/.diff-%d", d->s.dir, (int)getpid());
        sandbox_rm_rf(d->tmp);
        char req[PATH_MAX + 16];
        snprintf(req, sizeof req, "clone-disks %s", d->tmp);
        r = sandbox_ctl(&d->s, req, NULL, 0, 600, err);
    } else if (r == 0 && st == SBX_HUNG) {
        r = sandbox_err(err, -EIO, "sandbox %s is unresponsive", d->s.name);
    }
    if (r < 0)
        sandbox_diff_end(d);
    return r;
}

int sandbox_diff_drive(const struct sbx_diff *d, unsigned n, char *pin, size_t plen, char *cur, size_t clen,
                       bool *has_pin)
{
    char own[PATH_MAX];
    if (!sandbox_drive_overlay(&d->s, n, own, sizeof own))
        return 0;
    snprintf(pin, plen, "%s/disk%u.overlay", d->tagdir, n);
    if (d->tmp[0])
        snprintf(cur, clen, "%s/disk%u.overlay", d->tmp, n);
    else
        snprintf(cur, clen, "%s", own);
    *has_pin = access(pin, F_OK) == 0;
    return 1;
}

void sandbox_diff_end(struct sbx_diff *d)
{
    if (d->tmp[0])
        sandbox_rm_rf(d->tmp);
    d->tmp[0] = 0;
    sandbox_close(&d->s);
}
