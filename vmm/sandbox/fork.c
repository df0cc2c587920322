/* Forking a sandbox (fork.h): one snapshot of the parent, linked into
 * each child with its own overlays, config, TAP and jail; the children
 * started together. And the snapshot helpers moat snapshot --tag shares. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices/blk/overlay_disk.h"
#include "vmm/base/clock.h"
#include "vmm/sandbox/fork.h"

#define CFG_MAX 65536   /* bytes of a child's config */

/* A failure nothing was said about: the code only. */
static int quiet(struct sbx_err *err, int code)
{
    if (err && !err->code)
        err->code = code;
    return code;
}

static void step(const struct sbx_fork_opts *o, const char *name)
{
    if (o->start.phase)
        o->start.phase(o->start.ctx, name, clock_mono_ns());
}

/* ---- snapshots ---- */

int sandbox_link_snapshot(const char *from, const char *to)
{
    if (mkdir(to, 0700) < 0 && errno != EEXIST)
        return -errno;
    /* Relative to both directories, opened O_NOFOLLOW; linkat does not
     * follow the names either: a jailed sandbox's snap/ is its jail's. */
    int ffd = open(from, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int tfd = ffd < 0 ? -1 : open(to, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int r = tfd < 0 ? -errno : 0;
    static const char files[][8] = { "state", "memory" };
    for (int i = 0; r == 0 && i < 2; i++)
        if (linkat(ffd, files[i], tfd, files[i], 0) < 0)
            r = -errno;
    if (ffd >= 0)
        close(ffd);
    if (tfd >= 0)
        close(tfd);
    return r;
}

int sandbox_clone_own_disks(const struct sbx *s, const char *dir, struct sbx_err *err)
{
    char src[PATH_MAX], dst[PATH_MAX], why[512];
    for (unsigned n = 0; n < s->ndrive; n++) {
        if (!sandbox_drive_overlay(s, n, src, sizeof src))
            continue;
        snprintf(dst, sizeof dst, "%s/disk%u.overlay", dir, n);
        why[0] = 0;
        int r = sandbox_clone_via(s, src, dst, why, sizeof why);
        if (r < 0)
            return sandbox_err(err, r < -1 ? r : -EIO, "sandbox %s: pinning its disk: %s", s->name, why);
    }
    return 0;
}

int sandbox_snapshot_into(struct sbx *s, const char *dir, struct sbx_err *err)
{
    pid_t pid;
    double up;
    enum sbx_state st = sandbox_state(s, &pid, &up);
    char p[PATH_MAX];
    int r;
    if (st == SBX_STOPPED) {
        if ((r = sandbox_link_snapshot(sandbox_path(s, "snap", p, sizeof p), dir)) < 0)
            return sandbox_err(err, r, "linking the snapshot into %s: %s", dir, SBX_STRERROR(-r));
        /* A jailed sandbox restores it inside its jail (reset --to). */
        if ((r = sandbox_clone_own_disks(s, dir, err)) < 0)
            return r;
        return sandbox_jail_share_dir(s, dir, err);
    }
    if ((r = sandbox_need_live(s, st, "snapshot", err)) < 0)
        return r;
    char req[PATH_MAX + 16];
    snprintf(req, sizeof req, "snapshot-disks %s", dir);
    return sandbox_ctl(s, req, NULL, 0, 600, err);
}

/* ---- forks of a jailed sandbox ----
 * Its snapshot files are its jail's (written by its moat: a running one's
 * fork snapshot, a stopped one's snap/ and overlays). A child gets copies
 * that root owns, read-only: never the parent's inodes (a child's restore
 * maps the memory file MAP_PRIVATE, so a page the parent's jail could
 * still write would change the children's RAM), and nothing found there
 * is followed. */

/* Copy FILE of the directory sfd into DST (a new file): opened O_NOFOLLOW
 * (O_NONBLOCK: a FIFO put there does not block), a regular file, copied
 * through /proc/self/fd/N (a reflink, or a sparse copy of the size it
 * had). 0, or -errno with why. */
static int copy_from_jail(int sfd, const char *file, const char *dst, char *why, size_t wlen)
{
    int fd = sandbox_open_regular_at(sfd, file);
    if (fd < 0) {
        int e = errno;
        snprintf(why, wlen, "%s: %s", file, e == SBX_EFTYPE_NOT_REG ? "not a regular file" : SBX_STRERROR(e));
        return -e;
    }
    char via[64];
    snprintf(via, sizeof via, "/proc/self/fd/%d", fd);
    int r = ovl_clone(via, dst, why, wlen);
    close(fd);
    return r < 0 ? -EIO : 0;
}

/* The files of the jailed sandbox s's snapshot in its directory FROM
 * (state, memory, and the disk pins when pins) copied into dir as root's:
 * 0, or -errno with why (in why). */
static int copy_snapshot(struct sbx *s, const char *from, const char *dir, bool pins, char *why, size_t wlen)
{
    char dst[PATH_MAX + 32];
    int sfd = openat(s->dfd, from, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int r = 0;
    if (sfd < 0) {
        r = -errno;
        snprintf(why, wlen, "%s: %s", from, SBX_STRERROR(-r));
    }
    static const char files[][8] = { "state", "memory" };
    for (int i = 0; r == 0 && i < 2; i++) {
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
        r = copy_from_jail(sfd, files[i], dst, why, wlen);
        if (r == 0 && chmod(dst, 0444) < 0) {
            r = -errno;
            snprintf(why, wlen, "%.400s: %s", dst, SBX_STRERROR(-r));
        }
    }
    for (unsigned n = 0; r == 0 && pins && n < s->ndrive; n++) {
        char o[PATH_MAX], pin[32];
        if (!sandbox_drive_overlay(s, n, o, sizeof o))
            continue;
        snprintf(pin, sizeof pin, "disk%u.overlay", n);
        snprintf(dst, sizeof dst, "%s/%s", dir, pin);
        r = copy_from_jail(sfd, pin, dst, why, wlen);
    }
    if (sfd >= 0)
        close(sfd);
    return r;
}

/* The snapshot a fork of the jailed sandbox s starts from, into DIR (made
 * here: root's, 0755): a running one's written by its jail (snapshot-disks)
 * into s's own directory as fork.snap (the only place it sees), a stopped
 * one's snap/ and overlays; state and memory copied as root's, mode 0444,
 * the disk pins as DIR/diskN.overlay. fork.snap is removed after (by
 * unlinkat, no link followed). 0, or -errno with why. */
static int jail_fork_snapshot(struct sbx *s, const char *dir, struct sbx_err *err)
{
    pid_t pid;
    double up;
    enum sbx_state st = sandbox_state(s, &pid, &up);
    struct stat ds;
    char why[600] = "", src[PATH_MAX], req[PATH_MAX + 32];
    const char *from = st == SBX_STOPPED ? "snap" : "fork.snap";
    int r;
    if (st != SBX_STOPPED && (r = sandbox_need_live(s, st, "fork", err)) < 0)
        return r;
    if (fstat(s->dfd, &ds) < 0 || (mkdir(dir, 0755) < 0 && errno != EEXIST) || chmod(dir, 0755) < 0)
        return sandbox_err(err, -errno, "%s: %s", dir, SBX_STRERROR(errno));
    if (st != SBX_STOPPED) {
        if ((r = sandbox_rm_at(s->dfd, from, ds.st_dev)) < 0)
            return sandbox_err(err, r, "%s: %s", sandbox_path(s, from, src, sizeof src), SBX_STRERROR(-r));
        snprintf(req, sizeof req, "snapshot-disks %s", sandbox_path(s, from, src, sizeof src));
        if ((r = sandbox_ctl(s, req, NULL, 0, 600, err)) < 0) {
            sandbox_rm_at(s->dfd, from, ds.st_dev);
            return r;
        }
    }
    r = copy_snapshot(s, from, dir, st != SBX_STOPPED, why, sizeof why);
    if (st != SBX_STOPPED)
        sandbox_rm_at(s->dfd, from, ds.st_dev);
    if (r < 0)
        return sandbox_err(err, r, "sandbox %s: its snapshot for the fork (%s): %s", s->name,
                           sandbox_path(s, from, src, sizeof src), why);
    return st == SBX_STOPPED ? sandbox_clone_own_disks(s, dir, err) : 0;
}

/* ---- jails of new sandboxes ---- */

int sandbox_jail_new_id(struct sbx_jail *j, const char *name, struct sbx_err *err)
{
    uint32_t rnd;
    if (getrandom(&rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
        return sandbox_err(err, -errno, "getrandom: %s", SBX_STRERROR(errno));
    size_t n = 0;
    for (const char *c = name; *c && n < 40; c++)
        j->id[n++] = *c == '.' ? '_' : *c;
    snprintf(j->id + n, sizeof j->id - n, "-%08x", rnd);
    return 0;
}

int sandbox_jail_dir_perms(const struct sbx *s, struct sbx_err *err)
{
    if (fchown(s->dfd, 0, s->jail.gid) < 0 || fchmod(s->dfd, S_ISVTX | 0770) < 0)
        return sandbox_err(err, -errno, "%s: %s", s->dir, SBX_STRERROR(errno));
    return 0;
}

/* ---- fork ---- */

size_t sandbox_tap_name(const char *fmt, unsigned long num, char *out, size_t len)
{
    const char *pc = strstr(fmt, "%u");
    char b[96];
    int k = snprintf(b, sizeof b, "%.*s%lu%.40s", (int)(pc - fmt) > 40 ? 40 : (int)(pc - fmt), fmt, num, pc + 2);
    if (len)
        snprintf(out, len, "%.*s", (int)(len - 1), b);
    return k < 0 ? 0 : (size_t)k;
}

int sandbox_tap_format_ok(const char *fmt, unsigned long count)
{
    const char *pc = strchr(fmt, '%');
    char t[64];
    return pc && pc[1] == 'u' && !strchr(pc + 2, '%') && !strchr(fmt, '/') && !strchr(fmt, ',') &&
           sandbox_tap_name(fmt, count, t, sizeof t) <= 15;
}

/* A fork under way: the parent, its children's records and results. */
struct forking {
    const struct sbx_fork_opts *o;
    struct sbx *s;              /* the parent, open and locked */
    struct sbx *kids;           /* o->count records */
    struct sbx_fork_child *res;
    unsigned long made;         /* children whose directories exist */
    struct sbx_err *err;
};

/* Child i's record: its name and paths, free; its jail (like its
 * parent's, an id of its own); its drives (the parent's, each overlay its
 * own). 0, or -errno with why. */
static int plan_child(struct forking *f, unsigned long i)
{
    const struct sbx_fork_opts *o = f->o;
    struct sbx *s = f->s, *k = &f->kids[i];
    char cn[128];
    int r;
    if (o->child)
        snprintf(cn, sizeof cn, "%s", o->child);
    else
        snprintf(cn, sizeof cn, "%s-%lu", o->prefix ? o->prefix : s->name, i + 1);
    if ((r = sandbox_paths(k, cn, f->err)) < 0)
        return r;
    snprintf(f->res[i].name, sizeof f->res[i].name, "%s", k->name);
    if (access(k->dir, F_OK) == 0)
        return sandbox_err(f->err, -EEXIST, "a sandbox named %s already exists", cn);
    /* Jailed like its parent, in a jail of its own (its own id; the
     * parent's uid and gid unless the options say). */
    if (s->jail.on) {
        k->jail = s->jail;
        if (o->jail_uid)
            k->jail.uid = o->jail_uid;
        if (o->jail_gid)
            k->jail.gid = o->jail_gid;
        if ((r = sandbox_jail_new_id(&k->jail, cn, f->err)) < 0)
            return r;
    }
    for (unsigned n = 0; n < s->ndrive; n++) {
        char ov[PATH_MAX], mine[PATH_MAX + 32];
        snprintf(mine, sizeof mine, "%s/disk%u.overlay", k->dir, n);
        k->drive[n] = sandbox_drive_overlay(s, n, ov, sizeof ov) ? sandbox_spec_with_overlay(s->drive[n], mine)
                                                                 : strdup(s->drive[n]);
        if (!k->drive[n])
            return quiet(f->err, -ENOMEM);
        k->ndrive = n + 1;
    }
    return 0;
}

/* The parent's refusals, then every child's record (every name valid and
 * free before anything happens). 0, or -errno with why. */
static int plan(struct forking *f)
{
    const struct sbx *s = f->s;
    if ((f->o->jail_uid || f->o->jail_gid) && !s->jail.on)
        return sandbox_err(f->err, -EINVAL, "sandbox %s is not jailed: --jail-uid and --jail-gid are for forks of "
                                            "a jailed sandbox", s->name);
    if (s->rw_drive)
        return sandbox_err(f->err, -EINVAL, "sandbox %s has a writable drive without a copy-on-write overlay "
                                            "(overlay=none, or made by an older moat): forks would share and "
                                            "corrupt it", s->name);
    for (unsigned long i = 0; i < f->o->count; i++) {
        int r = plan_child(f, i);
        if (r < 0)
            return r;
    }
    return 0;
}

/* The parent's config without the lines each child has of its own, and
 * forked_from=, into cfg (CFG_MAX bytes). */
static void parent_config(const struct sbx *s, char *cfg)
{
    char p[PATH_MAX];
    FILE *pf = fopen(sandbox_path(s, "config", p, sizeof p), "re");
    size_t clen = 0;
    while (pf && clen < 60000 && fgets(cfg + clen, (int)(60000 - clen), pf))
        if (strncmp(cfg + clen, "drive.", 6) && strncmp(cfg + clen, "net.tap=", 8) &&   /* a child's own below */
            strncmp(cfg + clen, "jail.id=", 8) && strncmp(cfg + clen, "jail.uid=", 9) &&
            strncmp(cfg + clen, "jail.gid=", 9))
            clen += strlen(cfg + clen);
    cfg[clen] = 0;
    if (pf)
        fclose(pf);
    snprintf(cfg + clen, 200, "forked_from=%s\n", s->name);
}

/* Child k's directory, locked, with its config (cfg and its own lines,
 * into kcfg): 0, or -errno (with why where the CLI said one). */
static int make_child(struct forking *f, struct sbx *k, unsigned long num, const char *cfg, char *kcfg)
{
    char p[PATH_MAX];
    if (mkdir(k->dir, 0700) < 0)
        return sandbox_err(f->err, -errno, "%s: %s", k->dir, SBX_STRERROR(errno));
    f->made++;
    size_t kl = (size_t)snprintf(kcfg, CFG_MAX, "%s", cfg);
    for (unsigned n = 0; n < k->ndrive && kl < CFG_MAX; n++)
        kl += (size_t)snprintf(kcfg + kl, CFG_MAX - kl, "drive.%u=%s\n", n, k->drive[n]);
    if (f->o->tapfmt && kl < CFG_MAX) {
        sandbox_tap_name(f->o->tapfmt, num, k->tap, sizeof k->tap);
        kl += (size_t)snprintf(kcfg + kl, CFG_MAX - kl, "net.tap=%s\n", k->tap);
    }
    if (k->jail.on && kl < CFG_MAX)
        kl += (size_t)snprintf(kcfg + kl, CFG_MAX - kl, "jail.id=%s\njail.uid=%u\njail.gid=%u\n", k->jail.id,
                               k->jail.uid, k->jail.gid);
    k->dfd = open(k->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int r = kl >= CFG_MAX ? -E2BIG : k->dfd < 0 ? -errno : 0;
    if (r < 0)
        return quiet(f->err, r);
    if ((r = sandbox_lock(k, f->err)) < 0 || (k->jail.on && (r = sandbox_jail_dir_perms(k, f->err)) < 0))
        return r;
    if ((r = sandbox_write_file(sandbox_path(k, "config", p, sizeof p), kcfg)) < 0)
        return quiet(f->err, r);
    k->ephemeral = f->s->ephemeral;
    return 0;
}

/* Every child's directory and config. 0, or -errno with why. */
static int make_children(struct forking *f)
{
    char *cfg = calloc(1, CFG_MAX), *kcfg = calloc(1, CFG_MAX);
    int r = cfg && kcfg ? 0 : quiet(f->err, -ENOMEM);
    if (r == 0)
        parent_config(f->s, cfg);
    for (unsigned long i = 0; r == 0 && i < f->o->count; i++)
        r = make_child(f, &f->kids[i], i + 1, cfg, kcfg);
    free(cfg);
    free(kcfg);
    return r;
}

/* One snapshot of the parent (it goes on running) into the first child's
 * base/, linked into each other child's; its disk pins (taken in the same
 * pause) copied to each child's own overlay. A jailed parent's: root's
 * files, 0444, in root's base/ (0755), which each child's jail reads
 * (bound in read-only) but none can change. 0, or -errno with why. */
static int snapshot_children(struct forking *f)
{
    struct sbx *s = f->s, *kids = f->kids;
    unsigned long count = f->o->count;
    char base0[PATH_MAX], p[PATH_MAX];
    sandbox_path(&kids[0], "base", base0, sizeof base0);
    int r = s->jail.on ? jail_fork_snapshot(s, base0, f->err) : sandbox_snapshot_into(s, base0, f->err);
    if (r < 0)
        return r;
    step(f->o, "snapshot");
    for (unsigned long i = 1; i < count; i++) {
        r = sandbox_link_snapshot(base0, sandbox_path(&kids[i], "base", p, sizeof p));
        if (r == 0 && s->jail.on && chmod(p, 0755) < 0)
            r = -errno;
        if (r < 0)
            return sandbox_err(f->err, r, "linking the snapshot into %s: %s", p, SBX_STRERROR(-r));
    }
    for (unsigned n = 0; n < s->ndrive; n++) {
        char pin[PATH_MAX + 32], o[PATH_MAX], why[512];
        snprintf(pin, sizeof pin, "%s/disk%u.overlay", base0, n);
        if (!sandbox_drive_overlay(s, n, o, sizeof o))
            continue;
        for (unsigned long i = count; i-- > 0;) {
            sandbox_drive_overlay(&kids[i], n, o, sizeof o);
            why[0] = 0;
            r = i == 0 ? (rename(pin, o) < 0 ? -errno : 0) : ovl_clone(pin, o, why, sizeof why);
            /* A jailed child's overlay is its own jail's to write. */
            if (r == 0 && kids[i].jail.on && lchown(o, kids[i].jail.uid, kids[i].jail.gid) < 0)
                r = -errno;
            if (r < 0)
                return sandbox_err(f->err, r < -1 ? r : -EIO, "%s: %s", o, why[0] ? why : SBX_STRERROR(-r));
        }
    }
    step(f->o, "overlays");
    return 0;
}

/* The children stopped: the snapshot is each one's stop snapshot, nothing
 * runs. 0, or -errno when any failed (with why; it is removed). */
static int stop_children(struct forking *f)
{
    int rc = 0;
    for (unsigned long i = 0; i < f->o->count; i++) {
        struct sbx *k = &f->kids[i];
        char b[PATH_MAX], sn[PATH_MAX];
        f->res[i].made = true;
        if (rename(sandbox_path(k, "base", b, sizeof b), sandbox_path(k, "snap", sn, sizeof sn)) < 0) {
            rc = f->res[i].code = sandbox_err(f->err, -errno, "%s: %s", sn, SBX_STRERROR(errno));
            sandbox_rm_rf(k->dir);
        }
        sandbox_close(k);
    }
    return rc;
}

/* Every child started at once, then all waited for together; one that
 * failed is undone and removed. 0, or -errno when any failed. */
static int start_children(struct forking *f)
{
    unsigned long count = f->o->count;
    char p[PATH_MAX];
    struct sbx_starting *st = calloc(count, sizeof *st);
    if (!st)
        return quiet(f->err, -ENOMEM);
    for (unsigned long i = 0; i < count; i++) {
        struct sbx_fork_child *c = &f->res[i];
        c->made = true;
        if (sandbox_start_spawn(&f->kids[i], sandbox_path(&f->kids[i], "base", p, sizeof p), true, &st[i],
                                &c->err) < 0)
            st[i].failed = true;
        if (c->err.msg[0])
            c->told_ns = clock_mono_ns();
    }
    step(f->o, "spawned");
    sandbox_wait_ready_all(st, count, &f->o->start);
    int rc = 0;
    for (unsigned long i = 0; i < count; i++) {
        struct sbx_fork_child *c = &f->res[i];
        if (!c->told_ns && c->err.msg[0])
            c->told_ns = st[i].failed_ns;
        if (st[i].failed) {
            rc = c->code = c->err.code < 0 ? c->err.code : -EIO;
            if (st[i].pid > 0)
                sandbox_start_undo(&st[i]);
            sandbox_rm_rf(f->kids[i].dir);
            sandbox_jail_cleanup(&f->kids[i], f->err);
        } else {
            c->pid = st[i].pid;
        }
        sandbox_close(&f->kids[i]);
    }
    free(st);
    return rc;
}

/* The fork with the parent open and locked; its lock goes once the
 * children have their snapshot and overlays. */
static int fork_locked(struct forking *f)
{
    int r = plan(f);
    if (r == 0)
        r = make_children(f);
    if (r == 0) {
        step(f->o, "prepared");
        r = snapshot_children(f);
    }
    if (r < 0) {
        for (unsigned long i = 0; i < f->made; i++)
            sandbox_rm_rf(f->kids[i].dir);
        return r;
    }
    /* Done with the parent: its lock goes now, so that other forks of it
     * (a template's, for moat serve) start their children alongside. */
    sandbox_close(f->s);
    return f->o->stopped ? stop_children(f) : start_children(f);
}

int sandbox_fork(const char *parent, const struct sbx_fork_opts *o, struct sbx_fork_child *kids,
                 struct sbx_err *err)
{
    memset(kids, 0, o->count * sizeof *kids);
    struct forking f = { .o = o, .res = kids, .err = err };
    f.s = malloc(sizeof *f.s);
    f.kids = calloc(o->count, sizeof *f.kids);
    int r = f.s && f.kids ? 0 : sandbox_err(err, -ENOMEM, "out of memory");
    for (unsigned long i = 0; f.kids && i < o->count; i++)
        f.kids[i].dfd = -1;
    if (r == 0 && (r = sandbox_open(f.s, parent, 1, err)) == 0) {
        r = fork_locked(&f);
        sandbox_close(f.s);
    }
    for (unsigned long i = 0; f.kids && i < o->count; i++) {
        if (r < 0 && !kids[i].made)
            kids[i].code = r;       /* never made, or removed again */
        sandbox_close(&f.kids[i]);
    }
    free(f.kids);
    free(f.s);
    if (r < 0 && err && !err->code)
        err->code = r;
    return r;
}

size_t sandbox_fork_told(const struct sbx_fork_child *kids, size_t n, size_t *order)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (!kids[i].err.msg[0])
            continue;
        /* insertion by (told_ns, index): stable */
        size_t j = m++;
        while (j > 0 && kids[order[j - 1]].told_ns > kids[i].told_ns) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    return m;
}
