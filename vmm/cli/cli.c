/* moat — the command-line interface: a thin layer over libmoat. This
 * file: main, its command table, and the run and restore commands; what
 * the commands share is in cli_util.c. vmm/cli/ is the only place in moat
 * that calls exit(). Exit codes: docs/cli.md. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/signalfd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "include/moat.h"
#include "vmm/cli/cli.h"
#include "vmm/cli/cli_imgrun.h"
#include "vmm/api/control/vmrun.h"
#include "vmm/base/log.h"

#define OPT_DIFF_SNAPSHOTS 300   /* --diff-snapshots (no short form) */
#define OPT_DEVICE         301   /* --device (no short form) */
#define OPT_NET            302   /* --net: --device net,... */
#define OPT_NET_ALLOW      303   /* --net-allow SPEC ... : the --net device's policy */
#define OPT_NET_DENY       304
#define OPT_NET_DOMAIN     305
#define OPT_NET_DEFAULT    306
#define OPT_NET_NO_PRESET  307
#define OPT_METADATA       308
#define OPT_FORK_CHILD     309   /* restore --fork-child */
#define OPT_MEM_BACKEND    310   /* restore --mem-backend */
#define OPT_NO_PREFETCH    311   /* restore --no-prefetch */
#define OPT_READY_FD       312   /* run/restore --ready-fd N (moat create/start/fork) */
#define OPT_WS_RECORD_MS   313   /* restore --ws-record-ms MS */
#define OPT_NO_SECCOMP     314   /* --no-seccomp */
#define OPT_SECCOMP_AUDIT  315   /* --seccomp-audit */
#define OPT_SNAPSHOT_ROOT  316   /* restore --snapshot-root DIR */
static int diff_snapshots;       /* snapshots go to numbered diff dirs (vmrun_opts) */
/* Seccomp (docs/security.md): on by default in the CLI; --no-seccomp and
 * --seccomp-audit change it. MOAT_F_SECCOMP* flags for the VM. */
static uint32_t seccomp_flags = MOAT_F_SECCOMP;

static const char usage_run[] =
    "usage: moat run [options] [-- CMD ARGS...]\n"
    "\n"
    "Boot a guest. With no --kernel, the built-in default guest (Linux with\n"
    "moat's /init and busybox) runs CMD ARGS and moat exits with its status.\n"
    "\n"
    "  --kernel FILE    bzImage, vmlinux, or any static ELF64 (default: the built guest)\n"
    "  --initrd FILE    initramfs (default: the built guest's, with the default kernel)\n"
    "  --cmdline S      kernel command line (default: console=ttyS0 reboot=k panic=-1 ...)\n"
    "  --mem MIB        guest RAM in MiB (default 256)\n"
    "  --cpus N         vCPUs (default 1)\n"
    "  --timeout SEC    hard time limit; exit 124 when reached\n"
    "  --timings        print phase timestamps as one JSON object on stderr\n"
    "  --snapshot-dir D SIGUSR1: snapshot into D/state + D/memory and go on;\n"
    "                   SIGUSR2: snapshot and stop (exit 0)\n"
    "  --diff-snapshots with --snapshot-dir: D/0 is a full snapshot, D/1, D/2 ...\n"
    "                   diffs (only the pages written since the one before)\n"
    "  --pvh            enter a vmlinux through its PVH entry point\n"
    "  --no-pvm-compat  do not apply the PVM workarounds on a PVM host\n"
    "  --no-seccomp     no seccomp filters (debugging; docs/security.md)\n"
    "  --seccomp-audit  seccomp filters log a forbidden call instead of killing\n"
    "  --drive PATH[,ro][,id=NAME]\n"
    "                   a virtio-blk disk (repeatable; the first is /dev/vda);\n"
    "                   ,direct: O_DIRECT, bypassing the host page cache\n"
    "                   ,overlay=FILE: copy-on-write, PATH is a read-only base\n"
    "                   and writes go to FILE (created if missing; moat disk)\n"
    "  --vsock PATH[,cid=N]\n"
    "                   virtio-vsock, Firecracker hybrid vsock on Unix socket PATH\n"
    "                   (guest CID N, default 3; see docs/vsock.md)\n"
    "  --device TYPE[,OPTIONS]\n"
    "                   a device by type and options, after the drives and vsock\n"
    "                   (repeatable; docs/devices.md): blk,path=FILE[,ro][,id=S]\n"
    "                   [,overlay=FILE][,direct]  or  vsock,uds=PATH[,cid=N]  or\n"
    "                   net,tap=NAME[,mac=MAC][,mtu=N][,id=S]  or\n"
    "                   rng[,bw=SIZE/MS[/BURST]][,ops=SIZE/MS[/BURST]] (virtio-rng)\n"
    "  --net OPTIONS    virtio-net: --device net,OPTIONS (docs/net.md): tap=NAME or\n"
    "                   user[,forward=tcp:HOSTPORT:GUESTPORT[+...]], mac=, mtu=, mmds,\n"
    "                   tx_bw=/rx_bw=SIZE/REFILL_MS (rate limits)\n"
    "  --net-allow SPEC, --net-deny SPEC   the --net device's egress policy:\n"
    "                   CIDR[,port=P[-Q]][,proto=tcp|udp|icmp]\n"
    "  --net-allow-domain NAME[,port=..]   addresses DNS answers give for NAME\n"
    "                   (*.NAME: names below it)\n"
    "  --net-default allow|deny            what no rule decides (deny)\n"
    "  --net-no-preset  no preset denies (private, link-local, the host's own)\n"
    "  --metadata FILE  the metadata service at 169.254.169.254 with FILE's JSON\n"
    "  --control PATH   serve the control socket PATH (docs/control-socket.md)\n"
    "  --console-log F  append the serial console to F instead of stdout\n"
    "  --rootfs FILE    image mode (docs/images.md): FILE, an ext4 root, is /dev/vda\n"
    "                   on a temporary copy-on-write overlay (FILE is never written);\n"
    "                   /init switches to it and runs CMD there, not /bin/sh\n"
    "  --image-root     image mode with the first --drive as the root\n"
    "  --image NAME     image mode with an image of the store: its root file system\n"
    "                   (built once, cached; --disk-size S) and its config\n"
    "  --image-config F the image's OCI config (JSON): Entrypoint, Cmd, Env, ...\n"
    "  --entrypoint X, -e/--env K=V (or K: this K's value), -w/--workdir DIR,\n"
    "  -u/--user USER[:GROUP]   the image mode's command, environment, working\n"
    "                   directory and user (resolved in the root's /etc/passwd)\n"
    "  -v, --verbose    more log output (repeat for debug)\n"
    "  -h, --help       this help\n"
    "\n"
    "exit status: the guest command's status (0-255); 2 usage error;\n"
    "124 timeout; 125 VMM error; 126 guest crash or no status reported;\n"
    "159 killed by a seccomp filter (a forbidden system call).\n"
    "On a terminal, Ctrl-A x quits.\n";

/* The default guest lives next to the binary: <dir>/guest/{bzImage,initramfs.cpio},
 * unless $MOAT_GUEST_DIR says otherwise. */
static int default_guest(char *kernel, char *initrd, size_t len)
{
    char dir[PATH_MAX];
    const char *env = getenv("MOAT_GUEST_DIR");
    if (env && *env) {
        snprintf(dir, sizeof(dir), "%s", env);
    } else {
        ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
        if (n <= 0)
            return -errno;
        dir[n] = 0;
        char *slash = strrchr(dir, '/');
        if (!slash)
            return -ENOENT;
        snprintf(slash, sizeof(dir) - (size_t)(slash - dir), "/guest");
    }
    if ((size_t)snprintf(kernel, len, "%s/bzImage", dir) >= len ||
        (size_t)snprintf(initrd, len, "%s/initramfs.cpio", dir) >= len)
        return -ENAMETOOLONG;
    return 0;
}

/* Terminal raw mode, restored on every way out. */
static struct termios saved_tio;
static int tio_saved;

static void restore_tty(void)
{
    if (tio_saved)
        tcsetattr(STDIN_FILENO, TCSANOW, &saved_tio);
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "moat: timeout (hard limit)\n";
    restore_tty();
    if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0) { /* nothing to do */ }
    _exit(EXIT_TIMEOUT);
}

/* A jailed sandbox's VMM is pid 1 of its pid namespace, where the kernel
 * delivers only the signals it has a handler for: SIGTERM, SIGINT and
 * SIGHUP end it there as they end any other moat process (and as moat
 * jail's forwarding, SIGKILL, did before the one-spawn start). */
static void on_term_pid1(int sig)
{
    restore_tty();
    _exit(128 + sig);
}

static void print_timings(const struct moat_vm *vm)
{
    struct moat_timings t;
    if (moat_get_timings(vm, &t) < 0)
        return;
    fprintf(stderr, "{\"process_start\": 0");
    const struct { const char *k; int64_t v; } f[] = {
        { "kvm_ready", t.kvm_ready }, { "first_run", t.first_run },
        { "init_reached", t.init_reached }, { "cmd_finished", t.cmd_finished },
        { "exit", t.exit },
    };
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        if (f[i].v >= 0)
            fprintf(stderr, ", \"%s\": %lld", f[i].k, (long long)f[i].v);
    fprintf(stderr, ", \"origin_monotonic_ns\": %llu}\n", (unsigned long long)cli_start_ns);
}

struct vm_opts;
static int run_vm(struct moat_vm *vm, int raw_tty, const struct vm_opts *o);

/* --console-log FILE: the console is appended to FILE, no console input.
 * The guest writes it, so it is bounded: a FILE already over
 * CONSOLE_LOG_MAX moves to FILE.1 (replacing it) first, and one run writes
 * at most CONSOLE_LOG_MAX bytes (*limit). */
#define CONSOLE_LOG_MAX (16ull << 20)
static void console_log_fds(const char *file, int *in, int *out, uint64_t *limit)
{
    *in = -1;
    struct stat st;
    if (stat(file, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size >= CONSOLE_LOG_MAX) {
        char old[PATH_MAX];
        if ((size_t)snprintf(old, sizeof old, "%s.1", file) < sizeof old)
            rename(file, old);
    }
    *out = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (*out < 0)
        die_usage("--console-log %s: %s", file, strerror(errno));
    *limit = CONSOLE_LOG_MAX;
}

/* --drive PATH[,ro][,id=NAME]: the path cannot contain a comma. */
static void parse_drive(char *spec, struct moat_drive *d, const char **overlay, int *direct)
{
    *overlay = NULL;
    *direct = 0;
    char orig[256];
    snprintf(orig, sizeof(orig), "%s", spec);
    memset(d, 0, sizeof(*d));
    char *save = NULL, *tok = strtok_r(spec, ",", &save);
    if (!tok || spec[0] == ',')
        die_usage("invalid --drive '%s': no path", orig);
    d->path = tok;
    while ((tok = strtok_r(NULL, ",", &save))) {
        if (!strcmp(tok, "ro")) {
            d->read_only = 1;
        } else if (!strcmp(tok, "rw")) {
            d->read_only = 0;
        } else if (!strcmp(tok, "direct")) {
            *direct = 1;
        } else if (!strncmp(tok, "overlay=", 8)) {
            if (!tok[8])
                die_usage("invalid --drive '%s': overlay=FILE needs a file", orig);
            *overlay = tok + 8;
        } else if (!strncmp(tok, "id=", 3)) {
            if (!tok[3] || strlen(tok + 3) > 20)
                die_usage("invalid --drive '%s': id must be 1 to 20 bytes", orig);
            d->id = tok + 3;
        } else {
            die_usage("invalid --drive '%s': unknown option '%s' (ro, direct, id=NAME, overlay=FILE)", orig, tok);
        }
    }
}

/* --device TYPE[,OPTIONS] (run, restore): the library checks the type and
 * the options. */
/* --net OPTIONS: --device net,OPTIONS. */
static void parse_net(char *arg, struct moat_device *devs, size_t *n)
{
    if (*n >= MOAT_MAX_DRIVES)
        die_usage("too many --device and --net options (at most %d)", MOAT_MAX_DRIVES);
    if (!arg[0])
        die_usage("invalid --net '': tap=NAME[,mac=MAC][,mtu=N]");
    devs[(*n)++] = (struct moat_device){ "net", arg };
}

/* --net-allow/--net-deny/--net-allow-domain/--net-default/--net-no-preset
 * gather the policy of the (one) --net device; --metadata its document. */
struct net_flags {
    char *policy;
    size_t len;
    const char *metadata;
};

static void net_flag(struct net_flags *nf, const char *item, const char *arg)
{
    char why[200];
    if (cli_policy_item(&nf->policy, &nf->len, item, arg, why, sizeof(why)) < 0)
        die_usage("%s", why);
}

/* The net device's options with the policy and metadata flags: a new
 * string (kept until exit). */
static void net_flags_apply(struct net_flags *nf, struct moat_device *devs, size_t n)
{
    if (!nf->len && !nf->metadata)
        return;
    size_t hit = n, count = 0;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(devs[i].type, "net")) {
            hit = i;
            count++;
        }
    if (count != 1)
        die_usage("--net-allow, --net-deny, --net-allow-domain, --net-default, --net-no-preset and --metadata "
                  "need exactly one --net device (there are %zu)", count);
    const char *o = devs[hit].options ? devs[hit].options : "";
    size_t len = strlen(o) + nf->len + (nf->metadata ? strlen(nf->metadata) : 0) + 32;
    char *s = malloc(len);
    if (!s)
        die_usage("out of memory");
    snprintf(s, len, "%s%s%s%s%s%s%s", o, nf->len ? "," : "", nf->len ? "policy=\"" : "", nf->len ? nf->policy : "",
             nf->len ? "\"" : "", nf->metadata ? ",metadata=" : "", nf->metadata ? nf->metadata : "");
    devs[hit].options = s;
}

static void parse_device(char *arg, struct moat_device *devs, size_t *n)
{
    if (*n >= MOAT_MAX_DRIVES)
        die_usage("too many --device options (at most %d)", MOAT_MAX_DRIVES);
    if (!arg[0] || arg[0] == ',')
        die_usage("invalid --device '%s': TYPE[,OPTIONS] (blk, vsock, net, rng)", arg);
    char *comma = strchr(arg, ',');
    if (comma)
        *comma = 0;
    devs[(*n)++] = (struct moat_device){ arg, comma ? comma + 1 : NULL };
}

/* --vsock PATH[,cid=N]: the path cannot contain a comma. */
static void parse_vsock(char *spec, struct moat_config *cfg)
{
    char *comma = strchr(spec, ',');
    if (spec[0] == 0 || spec[0] == ',')
        die_usage("invalid --vsock '%s': no path", spec);
    cfg->vsock_uds = spec;
    if (!comma)
        return;
    *comma = 0;
    if (strncmp(comma + 1, "cid=", 4) != 0)
        die_usage("invalid --vsock option '%s' (cid=N)", comma + 1);
    unsigned long cid = parse_uint(comma + 5, "--vsock cid", 0xfffffffeul);
    if (cid < 3)
        die_usage("invalid --vsock cid %lu (3 .. 4294967294)", cid);
    cfg->vsock_cid = (uint32_t)cid;
}

/* The console: the UART writes to stdout; stdin feeds it if open, and on
 * a terminal Ctrl-A x quits. */
static void console_fds(int *in, int *out, uint32_t *flags)
{
    *out = STDOUT_FILENO;
    *in = fcntl(STDIN_FILENO, F_GETFD) >= 0 ? STDIN_FILENO : -1;
    if (*in >= 0 && isatty(STDIN_FILENO))
        *flags |= MOAT_F_CONSOLE_ESCAPE;
}

/* --ready-fd N: an open descriptor above 2 (the pipe moat create/start/fork
 * reads; docs/cli.md). */
static int parse_ready_fd(const char *v)
{
    unsigned long n = parse_uint(v, "--ready-fd", 1u << 20);
    if (n < 3 || fcntl((int)n, F_GETFD) < 0)
        die_usage("--ready-fd %s: not an open descriptor above 2", v);
    fcntl((int)n, F_SETFD, FD_CLOEXEC);
    return (int)n;
}

/* The options run and restore share, gathered by vm_opt. Kept in static
 * storage by each command (the device and drive arrays). */
struct vm_opts {
    struct moat_device devices[MOAT_MAX_DRIVES];
    size_t ndevices;
    struct moat_drive drives[MOAT_MAX_DRIVES];
    const char *overlays[MOAT_MAX_DRIVES];
    int direct[MOAT_MAX_DRIVES];
    bool has_overlay, has_direct;
    size_t ndrives;
    const char *snapdir, *control, *conslog;
    double timeout;
    int timings, verbose, ready_fd;
};

/* One option of run's or restore's shared ones (getopt_long's c and
 * optarg); anything else is a usage error. */
static void vm_opt(struct vm_opts *o, int c, char **argv)
{
    switch (c) {
    case 't': o->timeout = parse_timeout(optarg); break;
    case 'T': o->timings = 1; break;
    case 'S': o->snapdir = optarg; break;
    case 'D':
        if (o->ndrives >= MOAT_MAX_DRIVES)
            die_usage("too many --drive options (at most %d)", MOAT_MAX_DRIVES);
        parse_drive(optarg, &o->drives[o->ndrives], &o->overlays[o->ndrives], &o->direct[o->ndrives]);
        o->has_overlay |= o->overlays[o->ndrives] != NULL;
        o->has_direct |= o->direct[o->ndrives] != 0;
        o->ndrives++;
        break;
    case OPT_DEVICE: parse_device(optarg, o->devices, &o->ndevices); break;
    case OPT_NET: parse_net(optarg, o->devices, &o->ndevices); break;
    case 'C': o->control = optarg; break;
    case 'L': o->conslog = optarg; break;
    case OPT_READY_FD: o->ready_fd = parse_ready_fd(optarg); break;
    case OPT_NO_SECCOMP: seccomp_flags = 0; break;
    case OPT_SECCOMP_AUDIT: seccomp_flags = MOAT_F_SECCOMP | MOAT_F_SECCOMP_AUDIT; break;
    case 'v': o->verbose++; break;
    case ':': die_usage("option %s needs a value", argv[optind - 1]);
    default: die_usage("unknown option %s", argv[optind - 1]);
    }
}

/* The console: to --console-log's file, or the terminal's. */
static void vm_console(const struct vm_opts *o, int *in, int *out, uint64_t *limit, uint32_t *flags)
{
    if (o->conslog)
        console_log_fds(o->conslog, in, out, limit);
    else
        console_fds(in, out, flags);
}

/* No --kernel: the default guest's kernel (into dk) and initrd (into di,
 * when there is one and no --initrd). */
static void run_default_guest(struct moat_config *cfg, char *dk, char *di, size_t len)
{
    if (default_guest(dk, di, len) < 0)
        die_usage("%s", "cannot locate the default guest; pass --kernel");
    cfg->kernel = dk;
    if (!cfg->initrd && access(di, R_OK) == 0)
        cfg->initrd = di;
    if (access(dk, R_OK) != 0)
        die_usage("default guest kernel %s not found: run `make guest` or pass --kernel", dk);
}

/* What run's options left to check, and the config from them. */
static void run_config(struct moat_config *cfg, struct vm_opts *o, struct net_flags *nf, int argc, char **argv)
{
    if (optind < argc && strcmp(argv[optind - 1], "--") != 0)
        die_usage("unexpected argument '%s' (put the guest command after --)", argv[optind]);
    if (cfg->mem_mib == 0)
        die_usage("invalid %s", "--mem (MiB)");
    if (cfg->cpus == 0)
        die_usage("invalid %s", "--cpus");
    moat_set_log(MOAT_LOG_WARN + o->verbose, NULL, NULL);
    cfg->argv = (const char *const *)&argv[optind];
    cfg->argc = (size_t)(argc - optind);
    cfg->drives = o->drives;
    cfg->ndrives = o->ndrives;
    cfg->drive_overlays = o->has_overlay ? o->overlays : NULL;
    cfg->drive_direct = o->has_direct ? o->direct : NULL;
    net_flags_apply(nf, o->devices, o->ndevices);
    cfg->devices = o->ndevices ? o->devices : NULL;
    cfg->ndevices = o->ndevices;
}

int cmd_run(int argc, char **argv)
{
    static const struct option opts[] = {
        { "kernel", required_argument, NULL, 'k' },
        { "initrd", required_argument, NULL, 'i' },
        { "cmdline", required_argument, NULL, 'c' },
        { "mem", required_argument, NULL, 'm' },
        { "cpus", required_argument, NULL, 'n' },
        { "timeout", required_argument, NULL, 't' },
        { "timings", no_argument, NULL, 'T' },
        { "snapshot-dir", required_argument, NULL, 'S' },
        { "diff-snapshots", no_argument, NULL, OPT_DIFF_SNAPSHOTS },
        { "drive", required_argument, NULL, 'D' },
        { "vsock", required_argument, NULL, 'V' },
        { "device", required_argument, NULL, OPT_DEVICE },
        { "net", required_argument, NULL, OPT_NET },
        { "net-allow", required_argument, NULL, OPT_NET_ALLOW },
        { "net-deny", required_argument, NULL, OPT_NET_DENY },
        { "net-allow-domain", required_argument, NULL, OPT_NET_DOMAIN },
        { "net-default", required_argument, NULL, OPT_NET_DEFAULT },
        { "net-no-preset", no_argument, NULL, OPT_NET_NO_PRESET },
        { "metadata", required_argument, NULL, OPT_METADATA },
        { "control", required_argument, NULL, 'C' },
        { "console-log", required_argument, NULL, 'L' },
        { "ready-fd", required_argument, NULL, OPT_READY_FD },
        { "pvh", no_argument, NULL, 'P' },
        { "no-pvm-compat", no_argument, NULL, 'N' },
        { "no-seccomp", no_argument, NULL, OPT_NO_SECCOMP },
        { "seccomp-audit", no_argument, NULL, OPT_SECCOMP_AUDIT },
        { "verbose", no_argument, NULL, 'v' },
        { "help", no_argument, NULL, 'h' },
        IMAGE_LONG_OPTS,
        { 0 },
    };
    struct moat_config cfg;
    moat_config_init(&cfg);
    static struct vm_opts o;
    static struct net_flags nf;
    static struct image_opts io;
    o.ready_fd = -1;
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "+:vhe:w:u:", opts, NULL)) != -1) {
        if (image_opt(&io, c, optarg))
            continue;
        switch (c) {
        case 'k': cfg.kernel = optarg; break;
        case 'i': cfg.initrd = optarg; break;
        case 'c': cfg.cmdline = optarg; break;
        case 'm': cfg.mem_mib = (uint32_t)parse_uint(optarg, "--mem (MiB)", 1u << 20); break;
        case 'n': cfg.cpus = (uint32_t)parse_uint(optarg, "--cpus", 64); break;
        case OPT_DIFF_SNAPSHOTS: diff_snapshots = 1; cfg.flags |= MOAT_F_DIRTY_LOG; break;
        case 'V': parse_vsock(optarg, &cfg); break;
        case OPT_NET_ALLOW: net_flag(&nf, "allow", optarg); break;
        case OPT_NET_DENY: net_flag(&nf, "deny", optarg); break;
        case OPT_NET_DOMAIN: net_flag(&nf, "allow-domain", optarg); break;
        case OPT_NET_DEFAULT: net_flag(&nf, "default", optarg); break;
        case OPT_NET_NO_PRESET: net_flag(&nf, "no-preset", NULL); break;
        case OPT_METADATA: nf.metadata = optarg; break;
        case 'P': cfg.flags |= MOAT_F_PVH; break;
        case 'N': cfg.flags |= MOAT_F_NO_PVM_COMPAT; break;
        case 'h': fputs(usage_run, stdout); return 0;
        default: vm_opt(&o, c, argv); break;
        }
    }
    image_drive(&io, o.drives, o.overlays, &o.ndrives, &o.has_overlay);
    run_config(&cfg, &o, &nf, argc, argv);
    image_config(&io, &cfg);
    char dk[PATH_MAX], di[PATH_MAX];
    if (!cfg.kernel)
        run_default_guest(&cfg, dk, di, sizeof(dk));

    /* Console: the UART writes to stdout; stdin feeds it if open. */
    vm_console(&o, &cfg.console_in, &cfg.console_out, &cfg.console_limit, &cfg.flags);

    moat_timings_set_origin(cli_start_ns);
    struct moat_vm *vm = NULL;
    struct moat_error err;
    cfg.flags |= seccomp_flags;
    image_prepare(&io);
    int r = moat_create(&cfg, &vm, &err);
    image_cleanup(&io);
    if (r < 0) {
        fprintf(stderr, "moat: %s\n", err.msg[0] ? err.msg : strerror(-r));
        return err.is_config ? EXIT_USAGE : EXIT_VMM_ERROR;
    }
    struct moat_vm_info info = { .size = sizeof(info) };
    if (moat_get_info(vm, &info) == 0 && info.is_linux && info.pvm_compat)
        fprintf(stderr, "moat: note: this host's KVM is PVM (software virtualization): PVM workarounds "
                        "applied; Linux boots to /init but cannot reach user space here "
                        "(it needs hardware KVM)\n");

    return run_vm(vm, cfg.flags & MOAT_F_CONSOLE_ESCAPE, &o);
}

/* Before the VM starts: the terminal raw (raw_tty), the hard --timeout
 * backstop, and with --snapshot-dir the snapshot signals blocked and read
 * through a signalfd (returned; -1 without). */
static int run_vm_prepare(int raw_tty, const struct vm_opts *o)
{
    if (raw_tty) {
        struct termios raw;
        if (tcgetattr(STDIN_FILENO, &saved_tio) == 0) {
            tio_saved = 1;
            atexit(restore_tty);
            raw = saved_tio;
            cfmakeraw(&raw);
            raw.c_oflag |= OPOST | ONLCR;  /* keep output newlines sane */
            tcsetattr(STDIN_FILENO, TCSANOW, &raw);
        }
    }
    if (getpid() == 1) {
        signal(SIGTERM, on_term_pid1);
        signal(SIGINT, on_term_pid1);
        signal(SIGHUP, on_term_pid1);
    }
    if (o->timeout > 0) {
        /* A hard backstop in case stopping itself hangs. */
        signal(SIGALRM, on_alarm);
        alarm((unsigned)ceil(o->timeout) + 3);
    }
    /* Snapshot requests arrive as signals, read through a signalfd; block
     * them before the vCPU threads exist so those inherit the mask. */
    int sfd = -1;
    if (o->snapdir) {
        sigset_t ss;
        sigemptyset(&ss);
        sigaddset(&ss, SIGUSR1);
        sigaddset(&ss, SIGUSR2);
        pthread_sigmask(SIG_BLOCK, &ss, NULL);
        sfd = signalfd(-1, &ss, SFD_CLOEXEC);
    }
    return sfd;
}

/* The exit code for how the VM ended. */
static int run_vm_exit_code(const struct moat_exit *ex, int verbose)
{
    switch (ex->reason) {
    case MOAT_EXIT_RESET:
    case MOAT_EXIT_CRASH:
    case MOAT_EXIT_STOPPED:
        if (ex->status < 0 && ex->reason != MOAT_EXIT_STOPPED) {
            fprintf(stderr, "moat: guest %s without reporting an exit status (%s)\n",
                    ex->reason == MOAT_EXIT_CRASH ? "crashed" : "stopped", ex->detail);
            return EXIT_GUEST_CRASH;
        }
        if (verbose)
            fprintf(stderr, "moat: %s\n", ex->detail);
        return ex->status >= 0 ? ex->status : 0;
    default:
        fprintf(stderr, "moat: VMM error: %s\n", ex->detail);
        return EXIT_VMM_ERROR;
    }
}

/* A line from the run loop, as it happens. */
static void run_vm_note(void *arg, const char *line)
{
    (void)arg;
    fprintf(stderr, "moat: %s\n", line);
}

/* Start vm and run it to its end (vmm/api/control/vmrun.c; SIGUSR1:
 * snapshot and go on; SIGUSR2: snapshot and stop, when o->snapdir is set),
 * map the outcome to an exit code, destroy vm. */
static int run_vm(struct moat_vm *vm, int raw_tty, const struct vm_opts *o)
{
    int sfd = run_vm_prepare(raw_tty, o);
    struct vmrun_opts ro = {
        .control = o->control, .snapdir = o->snapdir, .diff_snapshots = diff_snapshots,
        .timeout = o->timeout, .start_ns = cli_start_ns, .sig_fd = sfd, .ready_fd = o->ready_fd,
        .seccomp_flags = seccomp_flags, .note = run_vm_note,
    };
    struct vmrun run;
    struct sbx_err e = { 0 };
    int code;
    if (vmrun(vm, &ro, &run, &e) < 0) {
        fprintf(stderr, "moat: %s\n", e.msg);
        code = EXIT_VMM_ERROR;
    } else if (run.end == VMRUN_TIMEOUT) {
        fprintf(stderr, "moat: timeout after %gs\n", o->timeout);
        code = EXIT_TIMEOUT;
    } else {
        code = run_vm_exit_code(&run.exit, o->verbose);
    }
    if (run.ready_fd >= 0)
        close(run.ready_fd);    /* not ready: the waiting moat sees EOF */
    if (o->timings)
        print_timings(vm);
    vmrun_close(vm, &run);
    if (sfd >= 0)
        close(sfd);
    restore_tty();
    return code;
}

static const char usage_restore[] =
    "usage: moat restore [options] DIR\n"
    "\n"
    "Restore a snapshot (DIR/state and DIR/memory, as written by\n"
    "`moat run --snapshot-dir DIR`) and run it to the end, like moat run.\n"
    "\n"
    "  --state FILE     the state file (default DIR/state)\n"
    "  --mem FILE       the memory file (default DIR/memory)\n"
    "  --mem-backend file:FILE | uffd:SOCKET\n"
    "                   guest memory from FILE (as --mem), or from a page-fault\n"
    "                   handler listening on the Unix socket SOCKET (userfaultfd,\n"
    "                   Firecracker's handshake; docs/uffd.md)\n"
    "  --timeout SEC    hard time limit; exit 124 when reached\n"
    "  --timings        print phase timestamps as JSON on stderr\n"
    "  --snapshot-dir D SIGUSR1: snapshot into D; SIGUSR2: snapshot into D and stop\n"
    "  --diff-snapshots with --snapshot-dir: numbered diffs D/N against the\n"
    "                   restored snapshot (DIR may hold D/0, D/1 ...: the last is restored)\n"
    "  --snapshot-root R a diff snapshot's parents (the files its state files name)\n"
    "                   must lie beneath R, reached without symlinks (default DIR,\n"
    "                   or the state file's directory with --state)\n"
    "  --no-prefetch    do not prefetch the working set an earlier restore of this\n"
    "                   snapshot recorded (DIR/memory.ws; it is still recorded if absent)\n"
    "  --ws-record-ms MS with no working set recorded yet: record it at the first\n"
    "                   pause, at the end, or MS ms after the restore (default 10000)\n"
    "  --fork-child     a fork of the snapshotted VM: its devices take an identity of\n"
    "                   their own (net: a new MAC unless --net mac= gives one; on a\n"
    "                   TAP, one of its own: --net tap=NAME)\n"
    "  --drive PATH[,ro][,id=NAME]\n"
    "                   reopen the snapshot's drives from these images instead of\n"
    "                   the recorded paths (repeat: one per drive, in order)\n"
    "                   (,overlay=FILE: a copy-on-write drive's overlay; required\n"
    "                   for a drive the snapshot recorded with one)\n"
    "  --vsock PATH     serve the snapshot's vsock device on PATH instead of the\n"
    "                   recorded path (guest connections are reset on restore)\n"
    "  --device TYPE,OPTIONS\n"
    "                   new options for the recorded device of TYPE with id=ID (or\n"
    "                   the only one): blk,path=FILE[,ro][,overlay=F][,direct][,id=ID]\n"
    "                   or vsock,uds=PATH  or  net,tap=NAME[,mac=MAC][,id=ID]\n"
    "                   or rng,bw=SIZE/MS,ops=SIZE/MS (its limits anew)\n"
    "  --net OPTIONS    --device net,OPTIONS: the snapshot's network device on\n"
    "                   another TAP device, or with another MAC\n"
    "  --control PATH   serve the control socket PATH (docs/control-socket.md)\n"
    "  --console-log F  append the serial console to F instead of stdout\n"
    "  --no-seccomp     no seccomp filters; --seccomp-audit: log, never kill\n"
    "  -v, --verbose    more log output\n"
    "  -h, --help       this help\n";

/* The restore config from restore's options (rc: initialized, with the
 * snapshot's paths). */
static void restore_config(struct moat_restore_config *rc, struct vm_opts *o, const char *vsock)
{
    vm_console(o, &rc->console_in, &rc->console_out, &rc->console_limit, &rc->flags);
    rc->flags |= seccomp_flags;
    rc->vsock_uds = vsock;
    rc->devices = o->ndevices ? o->devices : NULL;
    rc->ndevices = o->ndevices;
    rc->drives = o->ndrives ? o->drives : NULL;
    rc->ndrives = o->ndrives;
    rc->drive_overlays = o->has_overlay ? o->overlays : NULL;
    rc->drive_direct = o->has_direct ? o->direct : NULL;
}

int cmd_restore(int argc, char **argv)
{
    bool fork_child = false, no_prefetch = false;
    uint32_t ws_record_ms = 0;
    static const struct option opts[] = {
        { "state", required_argument, NULL, 's' },
        { "mem", required_argument, NULL, 'm' },
        { "mem-backend", required_argument, NULL, OPT_MEM_BACKEND },
        { "timeout", required_argument, NULL, 't' },
        { "timings", no_argument, NULL, 'T' },
        { "snapshot-dir", required_argument, NULL, 'S' },
        { "fork-child", no_argument, NULL, OPT_FORK_CHILD },
        { "no-prefetch", no_argument, NULL, OPT_NO_PREFETCH },
        { "ws-record-ms", required_argument, NULL, OPT_WS_RECORD_MS },
        { "snapshot-root", required_argument, NULL, OPT_SNAPSHOT_ROOT },
        { "diff-snapshots", no_argument, NULL, OPT_DIFF_SNAPSHOTS },
        { "drive", required_argument, NULL, 'D' },
        { "vsock", required_argument, NULL, 'V' },
        { "device", required_argument, NULL, OPT_DEVICE },
        { "net", required_argument, NULL, OPT_NET },
        { "control", required_argument, NULL, 'C' },
        { "console-log", required_argument, NULL, 'L' },
        { "ready-fd", required_argument, NULL, OPT_READY_FD },
        { "no-seccomp", no_argument, NULL, OPT_NO_SECCOMP },
        { "seccomp-audit", no_argument, NULL, OPT_SECCOMP_AUDIT },
        { "verbose", no_argument, NULL, 'v' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    static struct vm_opts o;
    const char *state = NULL, *mem = NULL, *uffd = NULL, *snaproot = NULL, *vsock = NULL;
    int c;
    o.ready_fd = -1;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+:vh", opts, NULL)) != -1) {
        switch (c) {
        case 's': state = optarg; break;
        case 'm': mem = optarg; break;
        case OPT_MEM_BACKEND:
            if (!strncmp(optarg, "file:", 5) && optarg[5])
                mem = optarg + 5;
            else if (!strncmp(optarg, "uffd:", 5) && optarg[5])
                uffd = optarg + 5;
            else
                die_usage("invalid --mem-backend '%s' (file:FILE or uffd:SOCKET)", optarg);
            break;
        case OPT_DIFF_SNAPSHOTS: diff_snapshots = 1; break;
        case OPT_FORK_CHILD: fork_child = true; break;
        case OPT_NO_PREFETCH: no_prefetch = true; break;
        case OPT_WS_RECORD_MS: ws_record_ms = (uint32_t)parse_uint(optarg, "--ws-record-ms", 3600000); break;
        case OPT_SNAPSHOT_ROOT: snaproot = optarg; break;
        case 'V':
            if (!optarg[0] || strchr(optarg, ','))
                die_usage("invalid restore --vsock '%s' (a path; the CID is the snapshot's)", optarg);
            vsock = optarg;
            break;
        case 'h': fputs(usage_restore, stdout); return 0;
        default: vm_opt(&o, c, argv); break;
        }
    }
    char st[PATH_MAX], mm[PATH_MAX];
    if (optind < argc) {
        if (optind + 1 != argc)
            die_usage("unexpected argument '%s'", argv[optind + 1]);
        struct sbx_err e = { 0 };
        if (vmrun_snapshot_dir(argv[optind], st, mm, &e) < 0)
            die_usage("%s", e.msg);
        state = state ? state : st;
        mem = mem ? mem : mm;
        /* A --diff-snapshots chain is DIR/0 ... DIR/N: its parents lie
         * beneath DIR (not beneath DIR/N). */
        snaproot = snaproot ? snaproot : argv[optind];
    }
    if (!state || (!mem && !uffd))
        die_usage("%s", "restore needs a snapshot directory (or --state and --mem or --mem-backend)");
    moat_set_log(MOAT_LOG_WARN + o.verbose, NULL, NULL);
    struct moat_restore_config rc;
    moat_restore_config_init(&rc);
    rc.state_path = state;
    rc.mem_path = uffd ? NULL : mem;      /* a handler serves the memory: moat does not open it */
    rc.mem_uffd_socket = uffd;
    rc.snapshot_root = snaproot;
    if (fork_child)
        rc.flags |= MOAT_F_FORK_CHILD;
    if (no_prefetch)
        rc.flags |= MOAT_F_NO_PREFETCH;
    rc.ws_record_ms = ws_record_ms;
    restore_config(&rc, &o, vsock);
    moat_timings_set_origin(cli_start_ns);
    struct moat_vm *vm = NULL;
    struct moat_error err;
    int r = moat_restore(&rc, &vm, &err);
    if (r < 0) {
        fprintf(stderr, "moat: %s\n", err.msg[0] ? err.msg : strerror(-r));
        return err.is_config ? EXIT_USAGE : EXIT_VMM_ERROR;
    }
    return run_vm(vm, rc.flags & MOAT_F_CONSOLE_ESCAPE, &o);
}

/* ---- the command table ---- */

static int cmd_version(int argc, char **argv)
{
    (void)argc, (void)argv;
    printf("moat %s\n", moat_version());
    return 0;
}

static int cmd_help(int argc, char **argv);

/* main's commands. help: the line `moat --help` shows (a '\n' continues it
 * on the next line, indented); NULL: not listed there (the sandbox
 * commands create names, the aliases). argv0: reached only as the name the
 * binary runs under (a link), never as `moat NAME`. Each handler gets argv
 * from the command's name on (argv[0]). */
static const struct cli_command {
    const char *name;
    const char *help;
    int (*handler)(int argc, char **argv);
    bool argv0;
} commands[] = {
    { "run", "boot a guest and run a command in it", cmd_run, false },
    { "restore", "restore a snapshot and run it", cmd_restore, false },
    { "device", "serve a moat device to another VMM (vhost-user)", cmd_device, false },
    { "disk", "copy-on-write disk overlays: create, info, clone, diff", cmd_disk, false },
    { "image", "container images: pull, ls, inspect, rm, prune, import,\n"
               "export (see docs/images.md)", cmd_image, false },
    { "seccomp", "the seccomp allow-list of each thread kind (--print: names)", cmd_seccomp, false },
    { "exec", "run a command in a running guest (its agent)", cmd_exec, false },
    { "cp", "copy a file to or from a running guest (its agent)", cmd_cp, false },
    { "host", "what this host can run (KVM kind, capabilities, features)", cmd_host, false },
    { "vmm", "Firecracker's command line and HTTP API (docs/control-api.md)", cmd_vmm, false },
    { "jail", "run a moat command confined (namespaces, pivot_root, no\n"
              "capabilities, another uid; see docs/security.md)", cmd_jail, false },
    { "create", "start a named background sandbox (also: ls, rm, pause, resume,\n"
                "stop, start, snapshot, reset, fork, diff; see docs/sandboxes.md)", cmd_sandbox, false },
    { "ls", NULL, cmd_sandbox, false },
    { "rm", NULL, cmd_sandbox, false },
    { "pause", NULL, cmd_sandbox, false },
    { "resume", NULL, cmd_sandbox, false },
    { "stop", NULL, cmd_sandbox, false },
    { "start", NULL, cmd_sandbox, false },
    { "snapshot", NULL, cmd_sandbox, false },
    { "reset", NULL, cmd_sandbox, false },
    { "fork", NULL, cmd_sandbox, false },
    { "diff", NULL, cmd_sandbox, false },
    { "set", NULL, cmd_sandbox, false },
    { "get", NULL, cmd_sandbox, false },
    { "net", NULL, cmd_sandbox, false },
    { "template", "templates: stopped sandboxes kept for forking (create, ls, rm)", cmd_sandbox, false },
    { "serve", "an E2B-compatible sandbox server: REST API + envd (docs/serve.md)", cmd_serve, false },
    { "version", NULL, cmd_version, false },
    { "--version", NULL, cmd_version, false },
    { "help", NULL, cmd_help, false },
    { "--help", NULL, cmd_help, false },
    { "-h", NULL, cmd_help, false },
    /* Run as `firecracker` (a link): Firecracker's command line. */
    { "firecracker", NULL, cmd_vmm, true },
};

/* `moat --help` (stdout) or `moat` alone (stderr): the listed commands
 * with their help, two columns. */
static void usage_main(FILE *f)
{
    fputs("usage: moat <command> [options]\n\ncommands:\n", f);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        const char *h = commands[i].help;
        if (!h)
            continue;
        fprintf(f, "  %-9s ", commands[i].name);
        for (const char *nl; (nl = strchr(h, '\n')); h = nl + 1)
            fprintf(f, "%.*s\n%12s", (int)(nl - h), h, "");
        fprintf(f, "%s\n", h);
    }
    fputs("\n"
          "options:\n"
          "  --version  print the version\n"
          "  --help     this help\n"
          "\n"
          "`moat run --help` for the run options. Documentation: docs/cli.md\n", f);
}

static int cmd_help(int argc, char **argv)
{
    (void)argc, (void)argv;
    usage_main(stdout);
    return 0;
}

/* The entry named name (argv0: among those reached by the binary's name,
 * else among the others), or NULL. */
static const struct cli_command *find_command(const char *name, bool argv0)
{
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (commands[i].argv0 == argv0 && !strcmp(commands[i].name, name))
            return &commands[i];
    return NULL;
}

int main(int argc, char **argv)
{
    /* A fixed number of malloc arenas: otherwise the C library computes
     * the limit when the ninth is made, reading
     * /sys/devices/system/cpu/online from whichever thread that is — one
     * under a seccomp filter that has no openat (docs/security.md). */
    mallopt(M_ARENA_MAX, 8);
    /* Likewise glibc reads /proc/sys/vm/overcommit_memory the first time a
     * thread's arena gives memory back (heap_trim), on whatever thread that
     * is: a vCPU, device or API thread, whose lists open no file. Arenas
     * keep what they have instead (a large allocation is still an mmap of
     * its own, given back). */
    mallopt(M_TRIM_THRESHOLD, INT_MAX);
    const char *base = argv[0] ? strrchr(argv[0], '/') : NULL;
    base = base ? base + 1 : argv[0] ? argv[0] : "";
    const struct cli_command *c = find_command(base, true);
    if (c)
        return c->handler(argc, argv);
    if (argc < 2) {
        usage_main(stderr);
        return EXIT_USAGE;
    }
    c = find_command(argv[1], false);
    if (c)
        return c->handler(argc - 1, argv + 1);
    fprintf(stderr, "moat: unknown command '%s' (see moat --help)\n", argv[1]);
    return EXIT_USAGE;
}
