/* Named, persistent sandboxes (docs/sandboxes.md): moat create, ls, rm,
 * pause, resume, stop, start, snapshot --tag, reset --to, fork, and the
 * sandbox-name form of exec/cp. A sandbox is a background `moat run` (or
 * `moat restore`) process with its files in $MOAT_HOME/NAME/, steered
 * through its control socket (vmm/api/control/ctl_server.c, docs/control-socket.md). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "devices/blk/blk_kind.h"
#include "devices/blk/overlay_disk.h"
#include "include/moat.h"
#include "vmm/agent/agent_client.h"
#include "vmm/cli/cli.h"
#include "vmm/cli/cli_imgrun.h"
#include "vmm/sandbox/device.h"
#include "vmm/sandbox/jail_spec.h"
#include "vmm/sandbox/sandbox.h"
#include "vmm/sandbox/create.h"
#include "vmm/sandbox/fork.h"
#include "vmm/sandbox/snapshot.h"
#include "vmm/sandbox/start.h"
#include "vmm/sandbox/template.h"
#include "vmm/base/clock.h"

#define DEFAULT_WAIT SBX_DEFAULT_WAIT

static const char usage_sandbox[] =
    "usage: moat create NAME [--ephemeral] [--wait SEC] [--timings] [jail options] [run options...] [-- CMD ARGS...]\n"
    "       moat ls\n"
    "       moat rm [-f] NAME...\n"
    "       moat pause NAME | moat resume NAME\n"
    "       moat stop [--timings] NAME  (snapshot to $MOAT_HOME/NAME/snap and exit)\n"
    "       moat start [--wait SEC] [--timings] NAME\n"
    "       moat snapshot NAME --tag T\n"
    "       moat reset [--wait SEC] NAME --to T\n"
    "       moat fork NAME --count N [--prefix P] [--tap NAME%u] [--wait SEC] [--timings]\n"
    "                  (a jailed NAME: [--jail-uid U] [--jail-gid G], its children's)\n"
    "       moat diff NAME --against T [--files]\n"
    "       moat exec NAME [exec options] -- CMD...   moat cp SRC NAME:PATH | NAME:PATH DST\n"
    "       moat set NAME TYPE[:ID] KEY VALUE      (a device while it runs: docs/devices.md)\n"
    "       moat get NAME TYPE[:ID] KEY\n"
    "       moat net NAME show | policy [TEXT] | allow SPEC | deny SPEC | allow-domain SPEC\n"
    "                     | default allow|deny | metadata FILE | limit tx_bw|tx_ops|rx_bw|rx_ops VALUE\n"
    "\n"
    "A sandbox is a background moat process with its files in $MOAT_HOME/NAME\n"
    "($MOAT_HOME defaults to /var/lib/moat for root, ~/.local/share/moat\n"
    "otherwise). create returns once the guest agent answers (--wait SEC, default\n"
    "120; 0: only wait for the VMM). Run options are those of moat run, except\n"
    "--vsock, --control and --console-log, which moat sets. A --device TYPE,OPTIONS\n"
    "is taken as given (its paths as they are: give absolute ones) and comes back\n"
    "from the sandbox's snapshots on start, reset and fork. --timings: the\n"
    "command's phases as one JSON object on stderr. See docs/sandboxes.md.\n"
    "--image NAME [--disk-size S] or --rootfs FILE.ext4 (before any --drive):\n"
    "image mode (docs/images.md): drive 0 is the image's root on the sandbox's\n"
    "overlay; without -- CMD or --entrypoint only the agent runs in it.\n"
    "\n"
    "Jail options (root only; every start of the sandbox's VM runs it in the\n"
    "jail moat jail makes: docs/security.md, \"Jail\"):\n"
    "  --jail                  run the sandbox jailed\n"
    "  --jail-uid U, --jail-gid G  who it runs as (not 0; default 65534)\n"
    "  --jail-chroot-base DIR  where its jail lives (default /srv/jail)\n"
    "  --jail-netns PATH       the network namespace it joins\n"
    "  --jail-tun              /dev/net/tun in the jail (a TAP it may open)\n"
    "  --jail-cgroup KEY=VALUE a cgroup v2 limit (repeatable; moat jail --cgroup)\n"
    "  --jail-cgroup-root DIR  the cgroup v2 mount (default /sys/fs/cgroup)\n";

/* ---- the store (vmm/sandbox/): its messages printed ---- */

int cli_moat_home(char *buf, size_t len)
{
    struct sbx_err e = { 0 };
    if (sandbox_home(buf, len, &e) == 0)
        return 0;
    cli_say(&e);
    return -1;
}

int cli_mkdir_p(const char *path, mode_t mode)
{
    return sandbox_mkdir_p(path, mode);
}

static int sbx_paths(struct sbx *s, const char *name)
{
    struct sbx_err e = { 0 };
    if (sandbox_paths(s, name, &e) == 0)
        return 0;
    cli_say(&e);
    return -1;
}

static int sbx_open(struct sbx *s, const char *name, int lock)
{
    struct sbx_err e = { 0 };
    if (sandbox_open(s, name, lock, &e) == 0)
        return 0;
    cli_say(&e);
    return -1;
}

/* The valid names in $MOAT_HOME starting with prefix, sorted, strdup'ed
 * into names (at most max): how many, or -1 after saying why. */
static ssize_t home_names(const char *prefix, char **names, size_t max)
{
    struct sbx_err e = { 0 };
    ssize_t n = sandbox_names(prefix, names, max, &e);
    if (n < 0) {
        cli_say(&e);
        return -1;
    }
    return n;
}

/* Ctrl-C (or SIGTERM, SIGHUP) while waiting for a new process: give up
 * and clean up instead of leaving a half-made sandbox behind. */
static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig)
{
    (void)sig;
    interrupted = 1;
}

static void catch_interrupts(void)
{
    struct sigaction sa = { .sa_handler = on_interrupt };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

/* --timings of the sandbox commands: each phase's end, in microseconds
 * since the moat process started, one JSON object on stderr. */
struct phases {
    bool on;
    unsigned n;
    const char *name[16];
    uint64_t ns[16];
};

static void phase_at(struct phases *ph, const char *name, uint64_t ns)
{
    if (ph && ph->on && ph->n < 16 && ns) {
        ph->name[ph->n] = name;
        ph->ns[ph->n++] = ns;
    }
}

static void phase(struct phases *ph, const char *name)
{
    phase_at(ph, name, clock_mono_ns());
}

static void phases_print(const struct phases *ph, const char *cmd)
{
    if (!ph->on)
        return;
    fprintf(stderr, "{\"command\": \"%s\", \"process_start\": 0", cmd);
    for (unsigned i = 0; i < ph->n; i++)
        fprintf(stderr, ", \"%s\": %lld", ph->name[i],
                (long long)(ph->ns[i] >= cli_start_ns ? (ph->ns[i] - cli_start_ns) / 1000 : 0));
    fprintf(stderr, ", \"total\": %llu}\n", (unsigned long long)((clock_mono_ns() - cli_start_ns) / 1000));
}

/* A step of the library's start (sbx_phase_ns_fn) into ph. */
static void phase_ns_cb(void *ph, const char *name, uint64_t ns)
{
    phase_at(ph, name, ns);
}

/* The start options of a command: wait s, Ctrl-C cancels, phases into ph. */
static struct sbx_start_opts start_opts(double wait, struct phases *ph)
{
    return (struct sbx_start_opts){ .wait = wait, .cancel = &interrupted, .phase = phase_ns_cb, .ctx = ph };
}

static int parse_wait(const char *v, double *w)
{
    char *end;
    *w = strtod(v, &end);
    if (!*v || *end || !(*w >= 0) || *w > 86400) {
        fprintf(stderr, "moat: bad --wait '%s'\n", v);
        return -1;
    }
    return 0;
}

/* ---- commands ---- */

/* create's jail options (--jail, --jail-KEY V, --jail-KEY=V) into j:
 * 1 when argv[*i] was one (*i past its value), 0 when not, -1 after a
 * usage message. *seen counts the --jail-KEY ones. */
static int jail_option(int argc, char **argv, int *i, struct sbx_jail *j, int *seen)
{
    const char *a = argv[*i];
    if (!strcmp(a, "--jail")) {
        j->on = 1;
        return 1;
    }
    if (!strcmp(a, "--jail-tun")) {
        j->tun = 1;
        ++*seen;
        return 1;
    }
    static const char *const keys[] = { "--jail-uid", "--jail-gid", "--jail-chroot-base", "--jail-netns",
                                        "--jail-cgroup", "--jail-cgroup-root" };
    size_t k, kl = strcspn(a, "=");
    for (k = 0; k < sizeof keys / sizeof keys[0]; k++)
        if (kl == strlen(keys[k]) && !strncmp(a, keys[k], kl))
            break;
    if (k == sizeof keys / sizeof keys[0])
        return 0;
    const char *v = a[kl] == '=' ? a + kl + 1 : *i + 1 < argc ? argv[++*i] : NULL;
    if (!v || !*v || strchr(v, '\n')) {
        fprintf(stderr, "moat create: %s needs a value (one line)\n", keys[k]);
        return -1;
    }
    ++*seen;
    char why[256];
    struct jail_cg cg;
    switch (k) {
    case 0:
    case 1:
        (k ? &j->gid : &j->uid)[0] = (unsigned)parse_uint(v, keys[k], 0xfffffffe);
        if (!(k ? j->gid : j->uid)) {
            fprintf(stderr, "moat create: %s must not be 0 (root in the jail defeats it)\n", keys[k]);
            return -1;
        }
        return 1;
    case 2:
    case 3:
    case 5: {
        char *dst = k == 2 ? j->base : k == 3 ? j->netns : j->cgroot;
        if (jail_check_path(v) < 0) {
            fprintf(stderr, "moat create: %s '%s': an absolute path without '.', '..' or '//'\n", keys[k], v);
            return -1;
        }
        snprintf(dst, PATH_MAX, "%s", v);
        return 1;
    }
    default:
        if (j->ncg >= SBX_JAIL_CG_MAX) {
            fprintf(stderr, "moat create: at most %d --jail-cgroup\n", SBX_JAIL_CG_MAX);
            return -1;
        }
        if (jail_parse_cgroup(v, &cg, why, sizeof why) < 0) {
            fprintf(stderr, "moat create: --jail-cgroup: %s\n", strncmp(why, "--cgroup: ", 10) ? why : why + 10);
            return -1;
        }
        snprintf(j->cg[j->ncg++], sizeof j->cg[0], "%s=%s", cg.key, cg.val);
        return 1;
    }
}

/* moat create's arguments, parsed into what sandbox_create takes. */
struct create_args {
    struct sbx s;                   /* its paths: where its drives' overlays go */
    struct sbx_create_opts o;
    double wait;
    char **extra;                   /* moat run's arguments */
    int nextra;
    char *drives[MOAT_MAX_DRIVES];  /* the rewritten --drive specs */
    char *image_config;             /* --image-config's absolute path */
    unsigned ndrive;
    char optbuf[64][24];            /* --NAME of --NAME=V arguments */
    unsigned nopt;
    size_t clen;                    /* bytes of the config's arg= lines */
    struct phases ph;
    int jail_seen;
    bool quiet;                     /* --help prints nothing (template create's) */
};

/* One argument more for moat run (config line "arg=A"): 0, or -1 after
 * saying why. */
static int create_arg(struct create_args *c, char *a)
{
    if (strchr(a, '\n')) {
        fprintf(stderr, "moat create: arguments cannot contain newlines\n");
        return -1;
    }
    c->extra[c->nextra++] = a;
    c->clen += strlen(a) + 5;
    if (c->clen >= SBX_ARGS_MAX) {
        fprintf(stderr, "moat create: arguments too long\n");
        return -1;
    }
    return 0;
}

/* The sandbox's drive: SPEC (a --drive spec) as drive N, rewritten by
 * sandbox_drive_spec (its overlay in the sandbox's directory) into
 * c->drives: the spec, or NULL after saying why. */
static char *create_drive(struct create_args *c, const char *v)
{
    char spec[8192];
    struct sbx_err e = { 0 };
    if (c->ndrive >= MOAT_MAX_DRIVES) {
        fprintf(stderr, "moat create: too many --drive options\n");
        return NULL;
    }
    if (sandbox_drive_spec(&c->s, c->ndrive, v, spec, sizeof spec, &c->o.rw_drive, &e) < 0) {
        cli_say(&e);
        return NULL;
    }
    if (!(c->drives[c->ndrive] = strdup(spec)))
        return NULL;
    return c->drives[c->ndrive++];
}

/* --rootfs FILE: the image mode's root as the sandbox's first drive, on
 * its own overlay (--drive SPEC --image-root for moat run): 1, or -1
 * after saying why. */
static int create_rootfs(struct create_args *c, const char *v)
{
    if (c->ndrive) {
        fprintf(stderr, "moat create: --rootfs must come before any --drive (it is the first drive)\n");
        return -1;
    }
    char *spec = create_drive(c, v);
    if (!spec)
        return -1;
    return create_arg(c, "--drive") < 0 || create_arg(c, spec) < 0 || create_arg(c, "--image-root") < 0 ? -1 : 1;
}

/* --image NAME: the store's image as --rootfs (its cached root filesystem,
 * at the --disk-size given anywhere before "--") and its config blob as
 * --image-config: 1, or -1 after saying why. */
static int create_image(struct create_args *c, int argc, char **argv, const char *name)
{
    uint64_t size = 0;
    for (int k = 2; k < argc && strcmp(argv[k], "--"); k++)
        if (!strcmp(argv[k], "--disk-size") && k + 1 < argc)
            size = image_parse_size(argv[k + 1]);
        else if (!strncmp(argv[k], "--disk-size=", 12))
            size = image_parse_size(argv[k] + 12);
    char base[PATH_MAX], cfg[PATH_MAX];
    image_from_store(name, size, base, sizeof base, cfg, sizeof cfg);
    free(c->image_config);
    if (create_rootfs(c, base) < 0 || !(c->image_config = strdup(cfg)))
        return -1;
    return create_arg(c, "--image-config") < 0 || create_arg(c, c->image_config) < 0 ? -1 : 1;
}

/* argv[*i], when it is one of moat run's options with a value (*i then
 * past the value), into c: 1, 0 when it is not one, -1 after saying why. */
static int create_run_opt(struct create_args *c, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    int has_val = 0;
    const char *on = sandbox_run_opt(a, &has_val);
    on = on ? on : "";
    if (!strcmp(on, "vsock") || !strcmp(on, "control") || !strcmp(on, "console-log")) {
        fprintf(stderr, "moat create: --%s is set by moat for a sandbox\n", on);
        return -1;
    }
    const char *eq = strchr(a, '=');
    if (!has_val || !(eq || *i + 1 < argc))
        return 0;
    char *v = eq ? (char *)eq + 1 : argv[++*i];     /* the value: not scanned as an option itself */
    if (!strcmp(on, "rootfs"))
        return create_rootfs(c, v);
    if (!strcmp(on, "image"))
        return create_image(c, argc, argv, v);
    if (!strcmp(on, "disk-size"))
        return 1;   /* create_image's */
    if (!strcmp(on, "image-config")) {     /* absolute: every boot reads it */
        free(c->image_config);
        if (!(c->image_config = realpath(v, NULL))) {
            fprintf(stderr, "moat create: --image-config %s: %s\n", v, strerror(errno));
            return -1;
        }
        v = c->image_config;
    }
    if (!strcmp(on, "drive") && !(v = create_drive(c, v)))
        return -1;
    if (strchr(v, '\n')) {
        fprintf(stderr, "moat create: arguments cannot contain newlines\n");
        return -1;
    }
    char *o = eq ? "" : argv[*i - 1];
    if (eq && c->nopt >= sizeof c->optbuf / sizeof c->optbuf[0]) {
        fprintf(stderr, "moat create: too many options\n");
        return -1;
    }
    if (eq) {   /* --NAME=V: passed on as --NAME V */
        snprintf(c->optbuf[c->nopt], sizeof c->optbuf[c->nopt], "--%s", on);
        o = c->optbuf[c->nopt++];
    }
    return create_arg(c, o) < 0 || create_arg(c, v) < 0 ? -1 : 1;
}

/* moat create NAME's arguments (argv[2]...) into c: 0, -1 after printing
 * the usage (--help), or EXIT_USAGE after saying why. */
static int create_parse(struct create_args *c, int argc, char **argv)
{
    int after_dd = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!after_dd) {
            if (!strcmp(a, "--")) {
                after_dd = 1;
            } else if (!strcmp(a, "--timings")) {
                c->ph.on = true;    /* create's own phases, not the VM's */
                continue;
            } else if (!strcmp(a, "--ephemeral")) {
                c->o.ephemeral = 1;
                continue;
            } else if (!strcmp(a, "--wait") || !strncmp(a, "--wait=", 7)) {
                const char *v = a[6] == '=' ? a + 7 : i + 1 < argc ? argv[++i] : "";
                if (parse_wait(v, &c->wait) < 0)
                    return EXIT_USAGE;
                continue;
            } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
                if (!c->quiet)
                    fputs(usage_sandbox, stdout);
                return -1;
            } else if (!strncmp(a, "--jail", 6)) {
                int jr = jail_option(argc, argv, &i, &c->o.jail, &c->jail_seen);
                if (jr < 0)
                    return EXIT_USAGE;
                if (jr > 0)
                    continue;
                fprintf(stderr, "moat create: unknown option '%s' (see moat create --help)\n", a);
                return EXIT_USAGE;
            } else {
                int r = create_run_opt(c, argc, argv, &i);
                if (r < 0)
                    return EXIT_USAGE;
                if (r > 0)
                    continue;
            }
        }
        if (create_arg(c, argv[i]) < 0)
            return EXIT_USAGE;
    }
    if (!c->o.jail.on && c->jail_seen) {
        fprintf(stderr, "moat create: the --jail-* options need --jail\n");
        return EXIT_USAGE;
    }
    return 0;
}

/* moat create NAME ARGS (argv[1], argv[2]...) into c: 0, -1 after
 * printing the usage (--help), or an exit status after saying why. */
static int create_setup(struct create_args *c, int argc, char **argv)
{
    if (sbx_paths(&c->s, argv[1]) < 0)
        return EXIT_USAGE;
    c->wait = SBX_DEFAULT_WAIT;
    c->extra = calloc(2 * (size_t)argc + 1, sizeof *c->extra);
    int rc = c->extra ? create_parse(c, argc, argv) : EXIT_VMM_ERROR;
    c->o.args = c->extra;
    c->o.nargs = c->nextra;
    c->o.drive = c->drives;
    c->o.ndrive = c->ndrive;
    c->o.start = start_opts(c->wait, &c->ph);
    return rc;
}

static void create_free(struct create_args *c)
{
    if (!c)
        return;
    free(c->extra);
    free(c->image_config);
    for (unsigned k = 0; k < c->ndrive; k++)
        free(c->drives[k]);
    free(c);
}

static int cmd_create(int argc, char **argv)
{
    if (argc < 2 || argv[1][0] == '-') {
        if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
            fputs(usage_sandbox, stdout);
            return 0;
        }
        fprintf(stderr, "moat create: the sandbox NAME comes first\n%s", usage_sandbox);
        return EXIT_USAGE;
    }
    struct create_args *c = calloc(1, sizeof *c);
    if (!c)
        return EXIT_VMM_ERROR;
    int rc = create_setup(c, argc, argv);
    if (rc == 0) {
        struct sbx_err e = { 0 };
        struct sbx_create_res res;
        int r = sandbox_create(c->s.name, &c->o, &res, &e);
        cli_say(&e);
        if (r < 0) {
            rc = res.usage ? EXIT_USAGE : EXIT_VMM_ERROR;
        } else {
            printf("%s\n", c->s.name);
            phases_print(&c->ph, "create");
        }
    }
    create_free(c);
    return rc < 0 ? 0 : rc;
}

static int cmd_ls(int argc, char **argv)
{
    (void)argv;
    if (argc > 1) {
        fprintf(stderr, "moat ls: no arguments\n");
        return EXIT_USAGE;
    }
    char *names[4096];
    ssize_t n = home_names("", names, 4096);
    if (n < 0)
        return EXIT_USAGE;
    printf("%-24s %-12s %-8s %-8s %s\n", "NAME", "STATE", "PID", "UPTIME", "JAIL");
    for (ssize_t i = 0; i < n; i++) {
        struct sbx_info in;
        struct sbx_err e = { 0 };
        int r = sandbox_info(names[i], &in, &e);
        free(names[i]);
        if (r < 0) {
            if (r != -ENOENT)
                cli_say(&e);
            continue;       /* not a sandbox directory */
        }
        char jail[64] = "-", pidtxt[16] = "-", uptxt[32] = "-";
        if (in.jailed)
            snprintf(jail, sizeof jail, "uid=%u,gid=%u", in.jail_uid, in.jail_gid);
        if (in.state != SBX_STOPPED && in.state != SBX_DEAD && in.pid > 0)
            snprintf(pidtxt, sizeof pidtxt, "%d", (int)in.pid);
        if (in.uptime >= 0)
            snprintf(uptxt, sizeof uptxt, "%.0fs", in.uptime);
        printf("%-24s %-12s %-8s %-8s %s\n", in.name, sandbox_state_str(in.state), pidtxt, uptxt, jail);
    }
    return 0;
}

static int cmd_rm(int argc, char **argv)
{
    int force = 0, rc = 0, any = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-f") || !strcmp(argv[i], "--force")) {
            force = 1;
            continue;
        }
        any = 1;
        struct sbx_err e = { 0 };
        if (sandbox_remove(argv[i], force, &e) < 0) {
            cli_say(&e);
            rc = 1;
        }
    }
    if (!any) {
        fprintf(stderr, "usage: moat rm [-f] NAME...\n");
        return EXIT_USAGE;
    }
    return rc;
}

static int cmd_pause_resume(int argc, char **argv, const char *verb)
{
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: moat %s NAME\n", verb);
        return EXIT_USAGE;
    }
    struct sbx_err e = { 0 };
    int r = !strcmp(verb, "pause") ? sandbox_pause(argv[1], &e) : sandbox_resume(argv[1], &e);
    if (r < 0)
        cli_say(&e);
    return r < 0 ? 1 : 0;
}

static void phase_cb(void *ph, const char *name)
{
    phase(ph, name);
}

/* Snapshot into NAME/snap (via snap.new) and exit; or, ephemeral, destroy
 * (sandbox_stop_locked, printed). 0 or -1. */
static int stop_locked(struct sbx *s, struct phases *ph)
{
    struct sbx_err e = { 0 };
    enum sbx_state was = SBX_DEAD;
    int r = sandbox_stop_locked(s, phase_cb, ph, &was, &e);
    if (r == 0 && was == SBX_STOPPED)
        fprintf(stderr, "moat: sandbox %s is already stopped\n", s->name);
    cli_say(&e);
    return r < 0 ? -1 : 0;
}

/* NAME [--timings] in either order: the name, or NULL after a usage message. */
static const char *name_and_timings(int argc, char **argv, struct phases *ph, const char *usage)
{
    const char *name = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--timings")) {
            ph->on = true;
        } else if (argv[i][0] != '-' && !name) {
            name = argv[i];
        } else {
            name = NULL;
            break;
        }
    }
    if (!name)
        fprintf(stderr, "%s", usage);
    return name;
}

static int cmd_stop(int argc, char **argv)
{
    struct phases ph = { 0 };
    const char *name = name_and_timings(argc, argv, &ph, "usage: moat stop [--timings] NAME\n");
    if (!name)
        return EXIT_USAGE;
    struct sbx s;
    if (sbx_open(&s, name, 1) < 0)
        return 1;           /* no --timings line: nothing was done */
    phase(&ph, "locked");
    int r = stop_locked(&s, &ph);
    sandbox_close(&s);
    phases_print(&ph, "stop");
    return r < 0 ? 1 : 0;
}

/* Start s (opened and locked) from its stop snapshot (sandbox_start_locked,
 * printed): 0 or -1. */
static int start_locked(struct sbx *s, double wait, struct phases *ph)
{
    struct sbx_err e = { 0 };
    struct sbx_start_opts o = start_opts(wait, ph);
    enum sbx_state was = SBX_DEAD;
    int r = sandbox_start_locked(s, &o, &was, NULL, &e);
    if (r == 0 && (was == SBX_RUNNING || was == SBX_PAUSED))
        fprintf(stderr, "moat: sandbox %s is already %s\n", s->name, sandbox_state_str(was));
    cli_say(&e);
    return r < 0 ? -1 : 0;
}

static int cmd_start(int argc, char **argv)
{
    double wait = DEFAULT_WAIT;
    const char *name = NULL;
    struct phases ph = { 0 };
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--wait") && i + 1 < argc) {
            if (parse_wait(argv[++i], &wait) < 0)
                return EXIT_USAGE;
        } else if (!strcmp(argv[i], "--timings")) {
            ph.on = true;
        } else if (argv[i][0] != '-' && !name) {
            name = argv[i];
        } else {
            fprintf(stderr, "usage: moat start [--wait SEC] [--timings] NAME\n");
            return EXIT_USAGE;
        }
    }
    if (!name) {
        fprintf(stderr, "usage: moat start [--wait SEC] [--timings] NAME\n");
        return EXIT_USAGE;
    }
    struct sbx s;
    if (sbx_open(&s, name, 1) < 0)
        return 1;
    phase(&ph, "locked");
    int r = start_locked(&s, wait, &ph);
    sandbox_close(&s);
    phases_print(&ph, "start");
    return r < 0 ? 1 : 0;
}

static int cmd_snapshot(int argc, char **argv)
{
    const char *name = NULL, *tag = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tag") && i + 1 < argc)
            tag = argv[++i];
        else if (argv[i][0] != '-' && !name)
            name = argv[i];
        else
            name = tag = NULL, i = argc;
    }
    if (!name || !tag) {
        fprintf(stderr, "usage: moat snapshot NAME --tag T\n");
        return EXIT_USAGE;
    }
    if (!sandbox_valid_name(tag)) {
        fprintf(stderr, "moat: invalid tag '%s' (as a sandbox name)\n", tag);
        return EXIT_USAGE;
    }
    struct sbx_err e = { 0 };
    if (sandbox_snapshot_tag(name, tag, &e) == 0)
        return 0;
    cli_say(&e);
    return 1;
}

static int cmd_reset(int argc, char **argv)
{
    const char *name = NULL, *tag = NULL;
    double wait = DEFAULT_WAIT;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--to") && i + 1 < argc) {
            tag = argv[++i];
        } else if (!strcmp(argv[i], "--wait") && i + 1 < argc) {
            if (parse_wait(argv[++i], &wait) < 0)
                return EXIT_USAGE;
        } else if (argv[i][0] != '-' && !name) {
            name = argv[i];
        } else {
            name = NULL;
            break;
        }
    }
    if (!name || !tag || !sandbox_valid_name(tag)) {
        fprintf(stderr, "usage: moat reset [--wait SEC] NAME --to TAG\n");
        return EXIT_USAGE;
    }
    struct sbx_err e = { 0 };
    struct sbx_start_opts o = start_opts(wait, NULL);
    int r = sandbox_reset(name, tag, &o, &e);
    cli_say(&e);
    return r < 0 ? 1 : 0;
}

/* Fork name (sandbox_fork), printed: what was said about each child's
 * start in the order it was said, then the rest; the names of the children
 * made (unless quiet); --timings once the children got their snapshot.
 * 0, or -1 when any failed. */
static int fork_sandbox(const char *name, const struct sbx_fork_opts *o, bool quiet, struct phases *ph)
{
    struct sbx_err e = { 0 };
    struct sbx_fork_child *kids = calloc(o->count, sizeof *kids);
    size_t *order = calloc(o->count, sizeof *order);
    int r = -1;
    if (kids && order) {
        r = sandbox_fork(name, o, kids, &e);
        size_t m = sandbox_fork_told(kids, o->count, order);
        for (size_t j = 0; j < m; j++)
            cli_say(&kids[order[j]].err);
        cli_say(&e);
        for (unsigned long i = 0; i < o->count; i++)
            if (kids[i].made && kids[i].code == 0 && !quiet)
                printf("%s\n", kids[i].name);
        if (kids[0].made)
            phases_print(ph, "fork");
    }
    free(kids);
    free(order);
    return r < 0 ? -1 : 0;
}

static int cmd_fork(int argc, char **argv)
{
    const char *name = NULL, *prefix = NULL, *tapfmt = NULL, *child = NULL;
    unsigned long count = 0;
    double wait = DEFAULT_WAIT;
    bool stopped = false;
    unsigned juid = 0, jgid = 0;
    struct phases ph = { 0 };
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--count") && i + 1 < argc) {
            count = parse_uint(argv[++i], "--count", 1000);
        } else if (!strcmp(argv[i], "--prefix") && i + 1 < argc) {
            prefix = argv[++i];
        } else if (!strcmp(argv[i], "--name") && i + 1 < argc) {
            child = argv[++i];
        } else if (!strcmp(argv[i], "--stopped")) {
            stopped = true;
        } else if (!strcmp(argv[i], "--tap") && i + 1 < argc) {
            tapfmt = argv[++i];
        } else if (!strcmp(argv[i], "--wait") && i + 1 < argc) {
            if (parse_wait(argv[++i], &wait) < 0)
                return EXIT_USAGE;
        } else if (!strcmp(argv[i], "--timings")) {
            ph.on = true;
        } else if ((!strcmp(argv[i], "--jail-uid") || !strcmp(argv[i], "--jail-gid")) && i + 1 < argc) {
            unsigned long v = parse_uint(argv[i + 1], argv[i], 0xfffffffe);
            if (v == 0) {
                fprintf(stderr, "moat fork: %s must not be 0 (root in the jail defeats it)\n", argv[i]);
                return EXIT_USAGE;
            }
            *(argv[i][7] == 'u' ? &juid : &jgid) = (unsigned)v;
            i++;
        } else if (argv[i][0] != '-' && !name) {
            name = argv[i];
        } else {
            name = NULL;
            break;
        }
    }
    if (child && count == 0)
        count = 1;
    if (!name || count == 0 || (child && (count != 1 || prefix))) {
        fprintf(stderr, "usage: moat fork NAME --count N [--prefix P] [--tap NAME%%u] [--wait SEC] [--timings] [--stopped]\n"
                        "       moat fork NAME --name CHILD [--tap NAME%%u] [--wait SEC] [--timings] [--stopped]\n"
                        "       (a jailed NAME: also [--jail-uid U] [--jail-gid G], the children's)\n");
        return EXIT_USAGE;
    }
    /* each child's own TAP: one %u, the child's number */
    if (tapfmt && !sandbox_tap_format_ok(tapfmt, count)) {
        fprintf(stderr, "moat: --tap '%s': a TAP name with one %%u (the child's number, 1..N), at most 15 "
                        "bytes once expanded, without '/' or ','\n", tapfmt);
        return EXIT_USAGE;
    }
    struct sbx_fork_opts o = { .child = child, .prefix = prefix, .count = count, .tapfmt = tapfmt,
                               .stopped = stopped, .jail_uid = juid, .jail_gid = jgid,
                               .start = start_opts(wait, &ph) };
    return fork_sandbox(name, &o, false, &ph) < 0 ? 1 : 0;
}

/* moat diff NAME --against T [--files]: the blocks (and ext4 files) of each
 * copy-on-write drive that changed since tag T's pin. A running sandbox's
 * overlays are pinned into a temporary directory first (clone-disks: a
 * short pause), so the comparison sees what the guest has written, flushed
 * or not. */
static int cmd_diff(int argc, char **argv)
{
    const char *name = NULL, *tag = NULL;
    int files = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--against") && i + 1 < argc)
            tag = argv[++i];
        else if (!strcmp(argv[i], "--files"))
            files = 1;
        else if (argv[i][0] != '-' && !name)
            name = argv[i];
        else
            name = tag = NULL, i = argc;
    }
    if (!name || !tag || !sandbox_valid_name(tag)) {
        fprintf(stderr, "usage: moat diff NAME --against TAG [--files]\n");
        return EXIT_USAGE;
    }
    struct sbx_err e = { 0 };
    struct sbx_diff *d = malloc(sizeof *d);
    if (!d || sandbox_diff_begin(name, tag, d, &e) < 0) {
        cli_say(&e);
        free(d);
        return 1;
    }
    int rc = 0;
    char pin[PATH_MAX + 64], cur[PATH_MAX + 64];
    bool has_pin;
    for (unsigned n = 0; n < d->s.ndrive; n++) {
        if (!sandbox_diff_drive(d, n, pin, sizeof pin, cur, sizeof cur, &has_pin))
            continue;
        printf("drive %u (vd%c) since tag %s:\n", n, 'a' + n, tag);
        fflush(stdout);
        if (!has_pin) {
            printf("  no disk pin in tag %s (taken without one)\n", tag);
            rc = 1;
            continue;
        }
        char *av[] = { "disk", "diff", "--files", pin, cur, NULL };
        if (!files) {
            av[2] = pin;
            av[3] = cur;
            av[4] = NULL;
        }
        if (cmd_disk(files ? 5 : 4, av) != 0)
            rc = 1;
        fflush(stdout);
    }
    sandbox_diff_end(d);
    free(d);
    return rc;
}

/* ---- devices while they run: set, get, net (vmm/sandbox/device.c) ---- */

/* A device call's error printed; its exit status: 2 for a usage error
 * (-E2BIG: a value or request too long), else 1. */
static int device_fail(const struct sbx_err *e, int r)
{
    cli_say(e);
    return r == -E2BIG ? EXIT_USAGE : 1;
}

static int cmd_set(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: moat set NAME TYPE[:ID] KEY VALUE\n");
        return EXIT_USAGE;
    }
    struct sbx_err e = { 0 };
    int r = sandbox_device_set(argv[1], argv[2], argv[3], argv[4], &e);
    return r < 0 ? device_fail(&e, r) : 0;
}

static int cmd_get(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: moat get NAME TYPE[:ID] KEY\n");
        return EXIT_USAGE;
    }
    char *out = malloc(SBX_DEV_TEXT_MAX);
    if (!out)
        return 1;
    struct sbx_err e = { 0 };
    int r = sandbox_device_get(argv[1], argv[2], argv[3], out, SBX_DEV_TEXT_MAX, &e);
    if (r == 0)
        fputs(out, stdout), fputs(out[0] && out[strlen(out) - 1] != '\n' ? "\n" : "", stdout);
    free(out);
    return r < 0 ? device_fail(&e, r) : 0;
}

/* moat net NAME metadata FILE ("-": stdin): the file read (at most
 * SBX_DEV_VALUE_MAX bytes, the control socket's line) into cur. */
static int net_metadata(const char *name, const char *file, char *cur, struct sbx_err *e)
{
    FILE *f = !strcmp(file, "-") ? stdin : fopen(file, "r");
    if (!f) {
        fprintf(stderr, "moat: net metadata: %s: %s\n", file, strerror(errno));
        return 1;
    }
    size_t n = fread(cur, 1, SBX_DEV_VALUE_MAX, f);
    cur[n] = 0;
    int eof = feof(f);
    if (f != stdin)
        fclose(f);
    if (!eof) {
        fprintf(stderr, "moat: net metadata: more than %d bytes (the control socket's line); use the library call\n",
                SBX_DEV_VALUE_MAX);
        return EXIT_USAGE;
    }
    int r = sandbox_net_metadata(name, cur, e);
    return r < 0 ? device_fail(e, r) : 0;
}

/* moat net NAME ...: the sandbox's (only) network device. */
static int cmd_net(int argc, char **argv)
{
    static const char usage[] = "usage: moat net NAME show | policy [TEXT] | allow SPEC | deny SPEC | "
                                "allow-domain SPEC | default allow|deny | metadata FILE | limit KEY VALUE\n";
    if (argc < 3) {
        fputs(usage, stderr);
        return EXIT_USAGE;
    }
    const char *name = argv[1], *verb = argv[2];
    char *cur = malloc(SBX_DEV_TEXT_MAX);
    struct sbx_err e = { 0 };
    int r = 0;
    if (!cur)
        return 1;
    if (!strcmp(verb, "show") && argc == 3) {
        if ((r = sandbox_device_get(name, "net", "stats", cur, SBX_DEV_TEXT_MAX, &e)) == 0)
            fputs(cur, stdout);
    } else if (!strcmp(verb, "policy") && argc == 3) {
        if ((r = sandbox_device_get(name, "net", "policy", cur, SBX_DEV_TEXT_MAX, &e)) == 0)
            printf("%s\n", cur);
    } else if (!strcmp(verb, "policy") && argc == 4) {
        r = sandbox_device_set(name, "net", "policy", argv[3], &e);
    } else if ((!strcmp(verb, "allow") || !strcmp(verb, "deny") || !strcmp(verb, "allow-domain") ||
                !strcmp(verb, "default")) && argc == 4) {
        r = sandbox_net_policy_add(name, verb, argv[3], &e);     /* one more item on the policy in force */
    } else if (!strcmp(verb, "metadata") && argc == 4) {
        int rc = net_metadata(name, argv[3], cur, &e);
        free(cur);
        return rc;
    } else if (!strcmp(verb, "limit") && argc == 5) {
        r = sandbox_device_set(name, "net", argv[3], argv[4], &e);
    } else {
        fputs(usage, stderr);
        free(cur);
        return EXIT_USAGE;
    }
    free(cur);
    return r < 0 ? device_fail(&e, r) : 0;
}

/* ---- templates ---- */


static const char usage_template[] =
    "usage: moat template create NAME --from SANDBOX [--no-agent]\n"
    "       moat template create NAME [--no-agent] [--wait SEC] [run options...]\n"
    "       moat template ls\n"
    "       moat template rm NAME...\n"
    "\n"
    "A template is a stopped sandbox kept as it is for forking (its sandbox is\n"
    "template.NAME; start and exec refuse it): moat fork template.NAME --name X.\n"
    "--from: a copy of SANDBOX as it is now (SANDBOX goes on); without it, a\n"
    "new sandbox of the run options (the default guest when none) booted and\n"
    "stopped (--jail and the jail options of create: a jailed one). A template\n"
    "of a jailed SANDBOX, or made with --jail, is jailed, and so is every fork\n"
    "of it (each in a jail of its own).\n"
    "stopped. --no-agent: its guest has no agent (sandboxes forked from it are\n"
    "ready when their VM runs). moat serve creates its sandboxes from templates;\n"
    "see docs/sandboxes.md and docs/serve.md.\n";

/* Template create's own options (--from, --no-agent) out of argv[3]...;
 * the rest, create's arguments, into cargv: create template.NAME ... */
static int template_args(int argc, char **argv, char *tname, char **cargv, const char **from, bool *agent)
{
    int cargc = 0;
    cargv[cargc++] = "create";
    cargv[cargc++] = tname;
    bool waited = false;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--from") && i + 1 < argc) {
            *from = argv[++i];
        } else if (!strcmp(argv[i], "--no-agent")) {
            *agent = false;
        } else {
            waited |= !strcmp(argv[i], "--wait");
            cargv[cargc++] = argv[i];
        }
    }
    if (!*from && !*agent && !waited) {
        cargv[cargc++] = "--wait";
        cargv[cargc++] = "0";
    }
    return cargc;
}

/* Make template NAME (sandbox_template_create), printed: what create or
 * the fork said, create's --timings, what came after; NAME. */
static int template_make(const char *name, struct sbx_template_opts *to, struct create_args *c)
{
    struct sbx_err e = { 0 };
    struct sbx_template_res res;
    int r = sandbox_template_create(name, to, &res, &e);
    if (!res.made) {
        cli_say(&e);
        return to->from ? 1 : res.usage ? EXIT_USAGE : EXIT_VMM_ERROR;
    }
    cli_say_n(e.msg, res.made_msg);
    if (c && to->create)
        phases_print(&c->ph, "create");
    const char *rest = e.msg + res.made_msg + (e.msg[res.made_msg] == '\n');
    cli_say_n(rest, strlen(rest));
    if (r < 0)
        return 1;
    printf("%s\n", name);
    return 0;
}

static int template_create(int argc, char **argv)
{
    if (argc >= 3 && (!strcmp(argv[2], "-h") || !strcmp(argv[2], "--help"))) {
        fputs(usage_template, stdout);
        return 0;
    }
    if (argc < 3 || argv[2][0] == '-') {
        fputs(usage_template, stderr);
        return EXIT_USAGE;
    }
    const char *name = argv[2];
    struct sbx_template_opts to = { .agent = true };
    char tname[SBX_NAME_MAX + 1];
    struct sbx_err e = { 0 };
    if (sandbox_template_name(name, tname, sizeof tname, &e) < 0) {
        cli_say(&e);
        return EXIT_USAGE;
    }
    char **cargv = calloc((size_t)argc + 4, sizeof *cargv);
    struct create_args *c = calloc(1, sizeof *c);
    int rc = !cargv || !c ? EXIT_VMM_ERROR : 0;
    int cargc = rc ? 0 : template_args(argc, argv, tname, cargv, &to.from, &to.agent);
    if (!rc && to.from && cargc > 2) {
        fprintf(stderr, "moat template create: --from takes no run options (%s)\n", cargv[2]);
        rc = EXIT_USAGE;
    } else if (!rc && !to.from) {
        c->quiet = true;
        rc = create_setup(c, cargc, cargv);
        to.create = rc == 0 ? &c->o : NULL;    /* create --help: nothing created, as before */
    }
    if (rc <= 0)
        rc = template_make(name, &to, c);
    create_free(c);
    free(cargv);
    return rc;
}

static int template_ls(void)
{
    struct sbx_err e = { 0 };
    struct sbx_template_info *v;
    size_t n;
    if (sandbox_template_list(&v, &n, &e) < 0) {
        cli_say(&e);
        return EXIT_USAGE;
    }
    printf("%-32s %-6s %s\n", "NAME", "AGENT", "FROM");
    for (size_t i = 0; i < n; i++)
        printf("%-32s %-6s %s\n", v[i].name, v[i].agent ? "yes" : "no", v[i].from[0] ? v[i].from : "-");
    free(v);
    return 0;
}

static int cmd_template(int argc, char **argv)
{
    const char *sub = argc > 1 ? argv[1] : "";
    if (!strcmp(sub, "create"))
        return template_create(argc, argv);
    if (!strcmp(sub, "ls") && argc == 2)
        return template_ls();
    if (!strcmp(sub, "rm") && argc > 2) {
        int rc = 0;
        for (int i = 2; i < argc; i++) {
            struct sbx_err e = { 0 };
            if (sandbox_template_remove(argv[i], &e) < 0) {
                cli_say(&e);
                rc = 1;
            }
        }
        return rc;
    }
    if (!strcmp(sub, "-h") || !strcmp(sub, "--help")) {
        fputs(usage_template, stdout);
        return 0;
    }
    fputs(usage_template, stderr);
    return EXIT_USAGE;
}

/* ---- dispatch ---- */

int cmd_sandbox(int argc, char **argv)
{
    const char *c = argv[0];
    signal(SIGPIPE, SIG_IGN);
    if (!strcmp(c, "create") || !strcmp(c, "start") || !strcmp(c, "reset") || !strcmp(c, "fork"))
        catch_interrupts();
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
        if (strcmp(c, "create") && strcmp(c, "template") &&
            (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))) {
            fputs(usage_sandbox, stdout);
            return 0;
        }
    if (!strcmp(c, "create"))
        return cmd_create(argc, argv);
    if (!strcmp(c, "ls"))
        return cmd_ls(argc, argv);
    if (!strcmp(c, "rm"))
        return cmd_rm(argc, argv);
    if (!strcmp(c, "pause") || !strcmp(c, "resume"))
        return cmd_pause_resume(argc, argv, c);
    if (!strcmp(c, "stop"))
        return cmd_stop(argc, argv);
    if (!strcmp(c, "start"))
        return cmd_start(argc, argv);
    if (!strcmp(c, "snapshot"))
        return cmd_snapshot(argc, argv);
    if (!strcmp(c, "reset"))
        return cmd_reset(argc, argv);
    if (!strcmp(c, "fork"))
        return cmd_fork(argc, argv);
    if (!strcmp(c, "diff"))
        return cmd_diff(argc, argv);
    if (!strcmp(c, "set"))
        return cmd_set(argc, argv);
    if (!strcmp(c, "get"))
        return cmd_get(argc, argv);
    if (!strcmp(c, "net"))
        return cmd_net(argc, argv);
    if (!strcmp(c, "template"))
        return cmd_template(argc, argv);
    return EXIT_USAGE;
}
