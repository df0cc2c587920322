/* moat vmm (also when moat is run as `firecracker`): Firecracker's command
 * line (docs/control-api.md). The server itself, its HTTP API and the VM
 * are vmm/api/firecracker/ (fc_api.h); this file parses the options, and
 * answers --version, --help, --snapshot-version and --describe-snapshot. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "include/moat.h"
#include "vmm/cli/cli.h"
#include "vmm/api/firecracker/fc_api.h"
#include "vmm/api/firecracker/fc_req.h"
#include "vmm/snapshot/snapfmt.h"

static const char usage_vmm[] =
    "usage: moat vmm [--api-sock PATH] [--id ID] [--config-file FILE] [--no-api]\n"
    "                [--log-path P] [--level L] [--show-level] [--show-log-origin]\n"
    "                [--metrics-path P] [--boot-timer] [--no-seccomp | --seccomp-filter F]\n"
    "                [--seccomp-audit] [--start-time-us N] [--start-time-cpu-us N]\n"
    "                [--parent-cpu-time-us N] [--metadata FILE]\n"
    "                [--http-api-max-payload-size N] [--mmds-size-limit N]\n"
    "                [--version] [--snapshot-version] [--describe-snapshot FILE]\n"
    "\n"
    "Firecracker's command line and HTTP API (docs/control-api.md); the same\n"
    "when moat is run through a link named firecracker. Seccomp filters every\n"
    "thread by default (docs/security.md): --no-seccomp turns them off\n"
    "(debugging), --seccomp-audit logs a forbidden call instead of killing;\n"
    "--seccomp-filter F is accepted, F is not loaded (moat's own lists apply).\n"
    "A forbidden system call ends moat with 159 and one line naming it.\n";

static __attribute__((noreturn)) void die_args(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "moat vmm: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    exit(FC_EXIT_ARGS);
}

static void print_version(void)
{
    /* Kata Containers reads the second word of the first line (after a
     * leading 'v') as a semantic version. */
    printf("moat v%s\n\nmoat %s, speaking the Firecracker API of v%s\n", FC_API_VERSION, moat_version(),
           FC_API_VERSION);
}

enum {
    O_API_SOCK = 400, O_ID, O_CONFIG, O_NO_API, O_BOOT_TIMER, O_LOG_PATH, O_LEVEL, O_SHOW_LEVEL, O_SHOW_ORIGIN,
    O_METRICS_PATH, O_NO_SECCOMP, O_SECCOMP, O_SECCOMP_AUDIT, O_VERSION, O_START_US, O_START_CPU_US,
    O_PARENT_CPU_US, O_HELP, O_METADATA, O_MAX_PAYLOAD, O_MMDS_LIMIT, O_SNAP_VERSION, O_DESCRIBE,
};

/* A --describe-snapshot FILE: the data format version of a state file,
 * printed as Firecracker prints its own ("v3.0.0": moat's format version
 * as the major). 0, or an exit code with a line on stderr. */
static int describe_snapshot(const char *path)
{
    unsigned char h[12];
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(h, 1, sizeof h, f) : 0;
    int e = errno;
    if (f)
        fclose(f);
    if (!f) {
        fprintf(stderr, "moat vmm: --describe-snapshot %s: %s\n", path, strerror(e));
        return FC_EXIT_GENERIC;
    }
    if (n != sizeof h || memcmp(h, "MOATSNAP", 8)) {
        fprintf(stderr, "moat vmm: --describe-snapshot %s: not a moat snapshot state file\n", path);
        return FC_EXIT_GENERIC;
    }
    uint32_t v = (uint32_t)h[8] | (uint32_t)h[9] << 8 | (uint32_t)h[10] << 16 | (uint32_t)h[11] << 24;
    printf("v%u.0.0\n", v);
    return FC_EXIT_OK;
}

/* The API socket: bound as the control socket is (vmm/api/control/ctl_server.c). */
static int fc_listen(const char *path, int *fd)
{
    struct ctl_server srv = { .fd = -1 };
    struct sbx_err e = { 0 };
    int r = ctl_server_open(&srv, path, &e);
    if (r < 0)
        fprintf(stderr, "moat: %s\n", e.msg);
    *fd = srv.fd;
    return r;
}

int cmd_vmm(int argc, char **argv)
{
    static const struct option opts[] = {
        { "api-sock", required_argument, NULL, O_API_SOCK }, { "id", required_argument, NULL, O_ID },
        { "config-file", required_argument, NULL, O_CONFIG }, { "no-api", no_argument, NULL, O_NO_API },
        { "boot-timer", no_argument, NULL, O_BOOT_TIMER }, { "log-path", required_argument, NULL, O_LOG_PATH },
        { "level", required_argument, NULL, O_LEVEL }, { "show-level", no_argument, NULL, O_SHOW_LEVEL },
        { "show-log-origin", no_argument, NULL, O_SHOW_ORIGIN },
        { "metrics-path", required_argument, NULL, O_METRICS_PATH },
        { "no-seccomp", no_argument, NULL, O_NO_SECCOMP }, { "seccomp-filter", required_argument, NULL, O_SECCOMP },
        { "seccomp-audit", no_argument, NULL, O_SECCOMP_AUDIT },
        { "version", no_argument, NULL, O_VERSION }, { "start-time-us", required_argument, NULL, O_START_US },
        { "start-time-cpu-us", required_argument, NULL, O_START_CPU_US },
        { "parent-cpu-time-us", required_argument, NULL, O_PARENT_CPU_US }, { "help", no_argument, NULL, O_HELP },
        { "metadata", required_argument, NULL, O_METADATA },
        { "http-api-max-payload-size", required_argument, NULL, O_MAX_PAYLOAD },
        { "mmds-size-limit", required_argument, NULL, O_MMDS_LIMIT },
        { "snapshot-version", no_argument, NULL, O_SNAP_VERSION },
        { "describe-snapshot", required_argument, NULL, O_DESCRIBE },
        { 0 },
    };
    const char *sock = "/run/firecracker.socket", *config = NULL, *log_path = NULL, *level = NULL;
    const char *metrics_path = NULL, *id = "anonymous-instance", *seccomp_filter = NULL, *metadata = NULL;
    const char *describe = NULL;
    bool snap_version = false;
    size_t body_limit = FC_BODY_MAX, mmds_limit = 0;
    uint32_t sc_flags = MOAT_F_SECCOMP;
    bool no_seccomp = false;
    bool no_api = false, show_level = false, show_origin = false, boot_timer = false;
    int64_t start_us = -1, start_cpu_us = -1, parent_cpu_us = 0;
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long_only(argc, argv, "+:", opts, NULL)) != -1) {
        switch (c) {
        case O_API_SOCK: sock = optarg; break;
        case O_ID: id = optarg; break;
        case O_CONFIG: config = optarg; break;
        case O_NO_API: no_api = true; break;
        case O_BOOT_TIMER: boot_timer = true; break;
        case O_LOG_PATH: log_path = optarg; break;
        case O_LEVEL: level = optarg; break;
        case O_SHOW_LEVEL: show_level = true; break;
        case O_SHOW_ORIGIN: show_origin = true; break;
        case O_METRICS_PATH: metrics_path = optarg; break;
        case O_NO_SECCOMP: sc_flags = 0; no_seccomp = true; break;
        case O_SECCOMP_AUDIT: sc_flags = MOAT_F_SECCOMP | MOAT_F_SECCOMP_AUDIT; no_seccomp = false; break;
        case O_SECCOMP:
            if (access(optarg, R_OK) < 0)
                die_args("--seccomp-filter %s: %s", optarg, strerror(errno));
            seccomp_filter = optarg;
            break;
        case O_START_US: case O_START_CPU_US: case O_PARENT_CPU_US: {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(optarg, &end, 10);
            if (errno || *end || !*optarg || *optarg == '-' || v > INT64_MAX / 2)
                die_args("invalid %s '%s' (microseconds)", argv[optind - 1], optarg);
            *(c == O_START_US ? &start_us : c == O_START_CPU_US ? &start_cpu_us : &parent_cpu_us) = (int64_t)v;
            break;
        }
        case O_MAX_PAYLOAD: case O_MMDS_LIMIT: {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(optarg, &end, 10);
            if (errno || *end || !*optarg || *optarg == '-' || v == 0 || v > FC_BODY_CAP)
                die_args("invalid --%s '%s' (bytes, 1 to %u)",
                         c == O_MAX_PAYLOAD ? "http-api-max-payload-size" : "mmds-size-limit", optarg, FC_BODY_CAP);
            *(c == O_MAX_PAYLOAD ? &body_limit : &mmds_limit) = (size_t)v;
            break;
        }
        case O_METADATA: metadata = optarg; break;
        case O_SNAP_VERSION: snap_version = true; break;
        case O_DESCRIBE: describe = optarg; break;
        case O_VERSION: print_version(); return FC_EXIT_OK;
        case O_HELP: fputs(usage_vmm, stdout); return FC_EXIT_OK;
        case ':': die_args("option %s needs a value", argv[optind - 1]);
        default: die_args("unknown option %s (see moat vmm --help)", argv[optind - 1]);
        }
    }
    if (optind < argc)
        die_args("unexpected argument '%s'", argv[optind]);
    /* As Firecracker: these print and exit before anything else. */
    if (snap_version) {
        printf("v%u.0.0\n", SNAP_VERSION);
        return FC_EXIT_OK;
    }
    if (describe)
        return describe_snapshot(describe);
    if (no_api && !config)
        die_args("--no-api needs --config-file");
    if (no_seccomp && seccomp_filter)
        die_args("--no-seccomp and --seccomp-filter exclude each other");
    size_t idl = strlen(id);
    if (idl == 0 || idl > 64 || strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") != idl)
        die_args("invalid --id '%s': 1 to 64 characters, alphanumeric or '-'", id);
    (void)boot_timer;

    struct fc_vmm_opts o = {
        .sock = sock, .id = id, .config = config, .no_api = no_api, .log_path = log_path, .level = level,
        .show_level = show_level, .show_origin = show_origin, .metrics_path = metrics_path,
        .seccomp_filter = seccomp_filter, .metadata = metadata, .body_limit = body_limit, .mmds_limit = mmds_limit,
        .sc_flags = sc_flags, .start_us = start_us, .start_cpu_us = start_cpu_us, .parent_cpu_us = parent_cpu_us,
        .start_ns = cli_start_ns, .listen = fc_listen,
    };
    return fc_vmm_run(&o);
}
