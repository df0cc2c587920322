/* moat — the command-line interface: a thin layer over libmoat.
 * The only place in moat that calls exit(). Exit codes: docs/cli.md. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "include/moat.h"
#include "vmm/log.h"

enum {
    EXIT_USAGE = 2,
    EXIT_TIMEOUT = 124,
    EXIT_VMM_ERROR = 125,
    EXIT_GUEST_CRASH = 126,
};

static uint64_t cli_start_ns;

__attribute__((constructor)) static void record_start(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    cli_start_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static const char usage_main[] =
    "usage: moat <command> [options]\n"
    "\n"
    "commands:\n"
    "  run       boot a guest and run a command in it\n"
    "\n"
    "options:\n"
    "  --version  print the version\n"
    "  --help     this help\n"
    "\n"
    "`moat run --help` for the run options. Documentation: docs/cli.md\n";

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
    "  --pvh            enter a vmlinux through its PVH entry point\n"
    "  --no-pvm-compat  do not apply the PVM workarounds on a PVM host\n"
    "  -v, --verbose    more log output (repeat for debug)\n"
    "  -h, --help       this help\n"
    "\n"
    "exit status: the guest command's status (0-255); 2 usage error;\n"
    "124 timeout; 125 VMM error; 126 guest crash or no status reported.\n"
    "On a terminal, Ctrl-A x quits.\n";

__attribute__((format(printf, 1, 2), noreturn))
static void die_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "moat: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see moat run --help)\n");
    exit(EXIT_USAGE);
}

static unsigned long parse_uint(const char *s, const char *what, unsigned long max)
{
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-' || *s == '+')
        die_usage("invalid %s", what);
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end || v > max)
        die_usage("invalid %s", what);
    return v;
}

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

static int cmd_run(int argc, char **argv)
{
    static const struct option opts[] = {
        { "kernel", required_argument, NULL, 'k' },
        { "initrd", required_argument, NULL, 'i' },
        { "cmdline", required_argument, NULL, 'c' },
        { "mem", required_argument, NULL, 'm' },
        { "cpus", required_argument, NULL, 'n' },
        { "timeout", required_argument, NULL, 't' },
        { "timings", no_argument, NULL, 'T' },
        { "pvh", no_argument, NULL, 'P' },
        { "no-pvm-compat", no_argument, NULL, 'N' },
        { "verbose", no_argument, NULL, 'v' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    struct moat_config cfg;
    moat_config_init(&cfg);
    const char *kernel = NULL, *initrd = NULL;
    double timeout = 0;
    int timings = 0, verbose = 0;
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "+:vh", opts, NULL)) != -1) {
        switch (c) {
        case 'k': kernel = optarg; break;
        case 'i': initrd = optarg; break;
        case 'c': cfg.cmdline = optarg; break;
        case 'm': cfg.mem_mib = (uint32_t)parse_uint(optarg, "--mem (MiB)", 1u << 20); break;
        case 'n': cfg.cpus = (uint32_t)parse_uint(optarg, "--cpus", 64); break;
        case 't': {
            char *end;
            errno = 0;
            timeout = strtod(optarg, &end);
            if (errno || *end || !*optarg || !(timeout > 0) || timeout > 1e6 || isnan(timeout))
                die_usage("invalid --timeout %s", optarg);
            break;
        }
        case 'T': timings = 1; break;
        case 'P': cfg.flags |= MOAT_F_PVH; break;
        case 'N': cfg.flags |= MOAT_F_NO_PVM_COMPAT; break;
        case 'v': verbose++; break;
        case 'h': fputs(usage_run, stdout); return 0;
        case ':':
            die_usage("option %s needs a value", argv[optind - 1]);
            break;
        default:
            die_usage("unknown option %s", argv[optind - 1]);
        }
    }
    if (optind < argc && strcmp(argv[optind - 1], "--") != 0)
        die_usage("unexpected argument '%s' (put the guest command after --)", argv[optind]);
    if (cfg.mem_mib == 0)
        die_usage("invalid %s", "--mem (MiB)");
    if (cfg.cpus == 0)
        die_usage("invalid %s", "--cpus");
    moat_log_set_level(LOG_WARN + verbose);
    cfg.argv = (const char *const *)&argv[optind];
    cfg.argc = (size_t)(argc - optind);

    char dk[PATH_MAX], di[PATH_MAX];
    if (!kernel) {
        if (default_guest(dk, di, sizeof(dk)) < 0)
            die_usage("%s", "cannot locate the default guest; pass --kernel");
        kernel = dk;
        if (!initrd && access(di, R_OK) == 0)
            initrd = di;
        if (access(dk, R_OK) != 0)
            die_usage("default guest kernel %s not found: run `make guest` or pass --kernel", dk);
    }
    cfg.kernel = kernel;
    cfg.initrd = initrd;

    /* Console: the UART writes to stdout; stdin feeds it if open. */
    cfg.console_out = STDOUT_FILENO;
    cfg.console_in = fcntl(STDIN_FILENO, F_GETFD) >= 0 ? STDIN_FILENO : -1;
    if (cfg.console_in >= 0 && isatty(STDIN_FILENO))
        cfg.flags |= MOAT_F_CONSOLE_ESCAPE;

    moat_timings_set_origin(cli_start_ns);
    struct moat_vm *vm = NULL;
    struct moat_error err;
    int r = moat_create(&cfg, &vm, &err);
    if (r < 0) {
        fprintf(stderr, "moat: %s\n", err.msg[0] ? err.msg : strerror(-r));
        return err.is_config ? EXIT_USAGE : EXIT_VMM_ERROR;
    }
    struct moat_vm_info info = { .size = sizeof(info) };
    if (moat_get_info(vm, &info) == 0 && info.is_linux && info.pvm_compat)
        fprintf(stderr, "moat: note: this host's KVM is PVM (software virtualization): PVM workarounds "
                        "applied; Linux boots to /init but cannot reach user space here "
                        "(it needs hardware KVM)\n");

    if (cfg.flags & MOAT_F_CONSOLE_ESCAPE) {
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
    if (timeout > 0) {
        /* A hard backstop in case stopping itself hangs. */
        signal(SIGALRM, on_alarm);
        alarm((unsigned)ceil(timeout) + 3);
    }

    r = moat_start(vm);
    struct moat_exit ex = { 0 };
    int code;
    if (r < 0) {
        fprintf(stderr, "moat: starting the VM: %s\n", strerror(-r));
        code = EXIT_VMM_ERROR;
    } else {
        r = moat_wait(vm, timeout > 0 ? (int)(timeout * 1000) : -1, &ex);
        if (r == -ETIMEDOUT) {
            moat_stop(vm);
            moat_wait(vm, -1, &ex);
            fprintf(stderr, "moat: timeout after %gs\n", timeout);
            code = EXIT_TIMEOUT;
        } else {
            switch (ex.reason) {
            case MOAT_EXIT_RESET:
            case MOAT_EXIT_CRASH:
            case MOAT_EXIT_STOPPED:
                if (ex.status >= 0) {
                    code = ex.status;
                } else if (ex.reason == MOAT_EXIT_STOPPED) {
                    code = 0;
                } else {
                    code = EXIT_GUEST_CRASH;
                    fprintf(stderr, "moat: guest %s without reporting an exit status (%s)\n",
                            ex.reason == MOAT_EXIT_CRASH ? "crashed" : "stopped", ex.detail);
                }
                if (ex.reason == MOAT_EXIT_CRASH && ex.status < 0)
                    break;
                if (verbose)
                    fprintf(stderr, "moat: %s\n", ex.detail);
                break;
            default:
                fprintf(stderr, "moat: VMM error: %s\n", ex.detail);
                code = EXIT_VMM_ERROR;
                break;
            }
        }
    }
    if (timings)
        print_timings(vm);
    moat_destroy(vm);
    restore_tty();
    return code;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage_main, stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("moat %s\n", moat_version());
        return 0;
    }
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        fputs(usage_main, stdout);
        return 0;
    }
    if (!strcmp(cmd, "run"))
        return cmd_run(argc - 1, argv + 1);
    fprintf(stderr, "moat: unknown command '%s' (see moat --help)\n", cmd);
    return EXIT_USAGE;
}
