/* Creating a sandbox (see create.h): its arguments checked, its directory
 * and config made, its first `moat run` started and waited for. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "include/moat.h"
#include "vmm/base/clock.h"
#include "vmm/sandbox/create.h"
#include "vmm/sandbox/fork.h"

/* moat run's long options (vmm/cli/cli.c cmd_run): which take a value. */
static const struct { char name[24]; int has_val; } run_opts[] = {
    { "kernel", 1 }, { "initrd", 1 }, { "cmdline", 1 }, { "mem", 1 }, { "cpus", 1 },
    { "timeout", 1 }, { "timings", 0 }, { "snapshot-dir", 1 }, { "diff-snapshots", 0 },
    { "drive", 1 }, { "device", 1 }, { "net", 1 }, { "net-allow", 1 }, { "net-deny", 1 }, { "net-allow-domain", 1 },
    { "net-default", 1 }, { "net-no-preset", 0 }, { "metadata", 1 }, { "vsock", 1 }, { "control", 1 }, { "console-log", 1 }, { "pvh", 0 },
    { "no-pvm-compat", 0 }, { "no-seccomp", 0 }, { "seccomp-audit", 0 }, { "verbose", 0 }, { "help", 0 },
    { "rootfs", 1 }, { "image-root", 0 }, { "image-config", 1 }, { "entrypoint", 1 }, { "env", 1 },
    { "workdir", 1 }, { "user", 1 }, { "image", 1 }, { "disk-size", 1 },
};

const char *sandbox_run_opt(const char *a, int *has_val)
{
    if (strncmp(a, "--", 2) || !a[2])
        return NULL;
    size_t l = strcspn(a + 2, "=");
    int found = -1;
    for (int k = 0; k < (int)(sizeof run_opts / sizeof run_opts[0]); k++) {
        if (strncmp(run_opts[k].name, a + 2, l))
            continue;
        if (strlen(run_opts[k].name) == l) {
            found = k;  /* exact */
            break;
        }
        found = found == -1 ? k : -2;
    }
    if (found < 0)
        return NULL;
    if (has_val)
        *has_val = run_opts[found].has_val;
    return run_opts[found].name;
}

#define V SBX_VERBATIM

int sandbox_drive_spec(const struct sbx *s, unsigned n, const char *spec, char *out, size_t olen,
                       int *rw_in_place, struct sbx_err *err)
{
    char cwd[PATH_MAX], copy[8192], *save = NULL;
    if (!getcwd(cwd, sizeof cwd) || strlen(spec) >= sizeof copy)
        return sandbox_err(err, -ENAMETOOLONG, "%cmoat create: --drive %s: path too long", V, spec);
    snprintf(copy, sizeof copy, "%s", spec);
    char *path = strtok_r(copy, ",", &save);
    if (!path || spec[0] == ',')
        return sandbox_err(err, -EINVAL, "%cmoat create: invalid --drive '%s': no path", V, spec);
    int ro = 0, direct = 0;
    const char *ovl = NULL, *id = NULL;
    for (char *t = strtok_r(NULL, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (!strcmp(t, "ro"))
            ro = 1;
        else if (!strcmp(t, "rw"))
            ro = 0;
        else if (!strcmp(t, "direct"))
            direct = 1;
        else if (!strncmp(t, "overlay=", 8))
            ovl = t + 8;
        else if (!strncmp(t, "id=", 3))
            id = t + 3;
        else
            return sandbox_err(err, -EINVAL, "%cmoat create: invalid --drive '%s': unknown option '%s'", V,
                               spec, t);
    }
    char ovlbuf[PATH_MAX + 64] = "";
    if (ovl && !strcmp(ovl, "none")) {
        ovl = NULL;
        *rw_in_place |= !ro;
    } else if (ovl && *ovl) {
        snprintf(ovlbuf, sizeof ovlbuf, "%s%s%s", ovl[0] == '/' ? "" : cwd, ovl[0] == '/' ? "" : "/", ovl);
    } else if (!ro) {
        if (direct)
            return sandbox_err(err, -EINVAL, "%cmoat create: --drive %s: direct cannot be combined with the "
                               "sandbox's copy-on-write overlay (add ,overlay=none to write the image in place)",
                               V, spec);
        snprintf(ovlbuf, sizeof ovlbuf, "%s/disk%u.overlay", s->dir, n);
    }
    int k = snprintf(out, olen, "%s%s%s%s%s%s%s%s%s", path[0] == '/' ? "" : cwd, path[0] == '/' ? "" : "/",
                     path, ro ? ",ro" : "", direct ? ",direct" : "", id ? ",id=" : "", id ? id : "",
                     ovlbuf[0] ? ",overlay=" : "", ovlbuf);
    if (k < 0 || (size_t)k >= olen)
        return sandbox_err(err, -ENAMETOOLONG, "%cmoat create: --drive %s: too long", V, spec);
    return 0;
}

/* ---- create ---- */

/* o's arguments as the config's arg= lines into cfg (*clen their bytes). */
static int config_args(const struct sbx_create_opts *o, char *cfg, size_t *clen, struct sbx_err *err)
{
    size_t l = 0;
    for (int i = 0; i < o->nargs; i++) {
        if (strchr(o->args[i], '\n'))
            return sandbox_err(err, -EINVAL, "%cmoat create: arguments cannot contain newlines", V);
        int n = snprintf(cfg + l, SBX_CONFIG_MAX - l, "arg=%s\n", o->args[i]);
        if (n < 0 || l + (size_t)n >= SBX_ARGS_MAX)
            return sandbox_err(err, -E2BIG, "%cmoat create: arguments too long", V);
        l += (size_t)n;
    }
    *clen = l;
    return 0;
}

/* moat jail's own refusals, now: relative or odd paths of the kernel,
 * initrd and drives (which it exposes), before any directory exists. */
static int jail_check_args(const struct sbx_create_opts *o, struct sbx_err *err)
{
    struct jail_paths *paths = calloc(1, sizeof *paths);
    char **av = calloc((size_t)o->nargs + 3, sizeof *av);
    if (!paths || !av) {
        free(paths);
        free(av);
        return sandbox_err(err, -ENOMEM, "out of memory");
    }
    av[0] = "moat";
    av[1] = "run";
    memcpy(av + 2, o->args, (size_t)o->nargs * sizeof *av);
    char why[512];
    int r = jail_inner_paths(o->nargs + 2, av, paths, why, sizeof why);
    free(av);
    free(paths);
    return r < 0 ? sandbox_err(err, r, "%cmoat create --jail: %s", V, why) : 0;
}

/* A jailed sandbox's settings checked before anything is made (a clear
 * refusal, not a failed start), its jail id and chroot base (made if
 * missing; its real path) filled in, its config lines appended to cfg. */
static int jail_prepare(struct sbx *s, const struct sbx_create_opts *o, char *cfg, size_t *clen, bool *usage,
                        struct sbx_err *err)
{
    struct sbx_jail *j = &s->jail;
    if (!j->on)
        return 0;
    j->uid = j->uid ? j->uid : SBX_JAIL_DEFAULT_ID;
    j->gid = j->gid ? j->gid : SBX_JAIL_DEFAULT_ID;
    if (!j->base[0])
        snprintf(j->base, sizeof j->base, "/srv/jail");
    int r = jail_check_args(o, err);
    if (r < 0) {
        *usage = r != -ENOMEM;
        return r;
    }
    if (geteuid() != 0)
        return sandbox_err(err, -EPERM, "%cmoat create --jail: needs root (moat jail creates namespaces, "
                           "device nodes and mounts, then drops to --jail-uid/--jail-gid)", V);
    r = sandbox_mkdir_p(j->base, 0755);
    char real[PATH_MAX];
    if (r < 0 || !realpath(j->base, real)) {
        int e = r < 0 ? -r : errno;
        return sandbox_err(err, -e, "%cmoat create --jail: --jail-chroot-base %s: %s", V, j->base, SBX_STRERROR(e));
    }
    if (strlen(real) >= sizeof j->base)
        return sandbox_err(err, -ENAMETOOLONG, "%cmoat create --jail: --jail-chroot-base %s: too long", V, j->base);
    snprintf(j->base, sizeof j->base, "%s", real);
    if ((r = sandbox_jail_new_id(j, s->name, err)) < 0)
        return r;
    size_t c = *clen, room = SBX_CONFIG_MAX - c;
    size_t k = (size_t)snprintf(cfg + c, room, "jail=1\njail.id=%s\njail.uid=%u\njail.gid=%u\njail.tun=%d\n"
                                "jail.chroot_base=%s\n", j->id, j->uid, j->gid, j->tun, j->base);
    if (k < room && j->netns[0])
        k += (size_t)snprintf(cfg + c + k, room - k, "jail.netns=%s\n", j->netns);
    if (k < room && j->cgroot[0])
        k += (size_t)snprintf(cfg + c + k, room - k, "jail.cgroup_root=%s\n", j->cgroot);
    for (int i = 0; i < j->ncg && k < room; i++)
        k += (size_t)snprintf(cfg + c + k, room - k, "jail.cgroup=%s\n", j->cg[i]);
    if (c + k >= SBX_ARGS_MAX) {
        *usage = true;
        return sandbox_err(err, -E2BIG, "%cmoat create: arguments too long", V);
    }
    *clen = c + strlen(cfg + c);
    return 0;
}

/* The config's head (name, ephemeral, rw_drive, drive.N=) put before its
 * clen bytes of lines in cfg, and the whole written to s's config. */
static int write_config(struct sbx *s, const struct sbx_create_opts *o, char *cfg, size_t clen,
                        struct sbx_err *err)
{
    char p[PATH_MAX], *hdr = malloc(SBX_CONFIG_MAX);
    if (!hdr)
        return sandbox_err(err, -ENOMEM, "out of memory");
    int hl = snprintf(hdr, SBX_CONFIG_MAX, "# moat sandbox %s\nephemeral=%d\nrw_drive=%d\n", s->name,
                      s->ephemeral, s->rw_drive);
    for (unsigned k = 0; k < o->ndrive && hl > 0 && hl < SBX_CONFIG_MAX; k++)
        hl += snprintf(hdr + hl, SBX_CONFIG_MAX - (size_t)hl, "drive.%u=%s\n", k, o->drive[k]);
    if (hl < 0 || (size_t)hl + clen >= SBX_CONFIG_MAX) {
        free(hdr);
        return sandbox_err(err, -E2BIG, "%cmoat create: arguments too long", V);
    }
    memmove(cfg + hl, cfg, clen + 1);
    memcpy(cfg, hdr, (size_t)hl);
    free(hdr);
    int r = sandbox_write_file(sandbox_path(s, "config", p, sizeof p), cfg);
    return r < 0 ? sandbox_err(err, r, "cannot write %s", p) : 0;
}

/* `moat run ARGS` for s started and waited for. */
static int create_start(struct sbx *s, const struct sbx_create_opts *o, struct sbx_create_res *res,
                        struct sbx_err *err)
{
    struct sbx_starting sk = { .s = s, .rfd = -1, .err = err };
    sk.pid = sandbox_spawn(s, "run", o->args, o->nargs, &sk.rfd, NULL, err);
    if (sk.pid < 0)
        return (int)sk.pid;
    if (o->start.phase)
        o->start.phase(o->start.ctx, "spawned", clock_mono_ns());
    if (sandbox_wait_ready_all(&sk, 1, &o->start)) {
        if (sk.rfd >= 0)
            close(sk.rfd);
        kill(sk.pid, SIGKILL);
        waitpid(sk.pid, NULL, 0);
        return err && err->code ? err->code : -EIO;
    }
    res->pid = sk.pid;
    return 0;
}

/* s's directory made (home: $MOAT_HOME, made if missing), config written,
 * its VM started; a failure after the directory was made removes it all. */
static int create_made(struct sbx *s, const struct sbx_create_opts *o, char *cfg, size_t clen,
                       struct sbx_create_res *res, struct sbx_err *err)
{
    char home[PATH_MAX];
    snprintf(home, sizeof home, "%.*s", (int)(strrchr(s->dir, '/') - s->dir), s->dir);
    int r = sandbox_mkdir_p(home, 0700);
    if (r < 0)
        return sandbox_err(err, r, "%s: %s", home, SBX_STRERROR(-r));
    if (mkdir(s->dir, 0700) < 0) {
        if (errno == EEXIST)
            return sandbox_err(err, -EEXIST, "a sandbox named %s already exists (moat ls; moat rm %s)",
                               s->name, s->name);
        return sandbox_err(err, -errno, "%s: %s", s->dir, SBX_STRERROR(errno));
    }
    s->dfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    r = s->dfd < 0 ? -errno : 0;
    if (r == 0)
        r = sandbox_lock(s, err);
    if (r == 0 && s->jail.on)
        r = sandbox_jail_dir_perms(s, err);
    if (r == 0)
        r = write_config(s, o, cfg, clen, err);
    if (r == 0)
        r = create_start(s, o, res, err);
    if (r < 0) {
        sandbox_rm_rf(s->dir);
        sandbox_jail_cleanup(s, err);
        sandbox_close(s);
        rmdir(home);    /* only if empty: leave nothing behind */
    }
    return r;
}

int sandbox_create(const char *name, const struct sbx_create_opts *o, struct sbx_create_res *res,
                   struct sbx_err *err)
{
    *res = (struct sbx_create_res){ 0 };
    struct sbx *s = calloc(1, sizeof *s);     /* ~17 KiB: not on a server thread's stack */
    char *cfg = calloc(1, SBX_CONFIG_MAX);
    if (s)
        s->dfd = -1;
    int r = !s || !cfg ? sandbox_err(err, -ENOMEM, "out of memory") : sandbox_paths(s, name, err);
    size_t clen = 0;
    if (r == 0) {
        s->ephemeral = o->ephemeral;
        s->rw_drive = o->rw_drive;
        s->jail = o->jail;
        r = config_args(o, cfg, &clen, err);
        res->usage = r < 0;
    }
    if (r == 0)
        r = jail_prepare(s, o, cfg, &clen, &res->usage, err);
    if (r == 0)
        r = create_made(s, o, cfg, clen, res, err);
    if (s)
        sandbox_close(s);
    free(s);
    free(cfg);
    if (r < 0 && err && !err->code)
        err->code = r;
    return r;
}
