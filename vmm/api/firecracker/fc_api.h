/* Firecracker's API server (vmm/api/firecracker/), as the CLI starts it:
 * `moat vmm`, or moat run through a link named firecracker
 * (docs/control-api.md). The CLI parses the command line; fc_vmm_run does
 * the rest (the logger and metrics, the API socket and its thread, the
 * config file, the main loop) and returns the process's exit code. */
#ifndef MOAT_FC_API_H
#define MOAT_FC_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Firecracker's exit codes (docs/control-api.md). */
enum { FC_EXIT_OK = 0, FC_EXIT_GENERIC = 1, FC_EXIT_BAD_CONFIG = 152, FC_EXIT_ARGS = 153 };

struct fc_vmm_opts {
    const char *sock;           /* --api-sock */
    const char *id;             /* --id (checked: 1 to 64 of [A-Za-z0-9-]) */
    const char *config;         /* --config-file, or NULL */
    bool no_api;                /* --no-api */
    const char *log_path, *level;   /* --log-path, --level, or NULL */
    bool show_level, show_origin;
    const char *metrics_path;   /* --metrics-path, or NULL */
    const char *seccomp_filter; /* --seccomp-filter (accepted, not loaded), or NULL */
    const char *metadata;       /* --metadata FILE, or NULL */
    size_t body_limit;          /* --http-api-max-payload-size */
    size_t mmds_limit;          /* --mmds-size-limit; 0: body_limit */
    uint32_t sc_flags;          /* MOAT_F_SECCOMP(_AUDIT), or 0 (--no-seccomp) */
    int64_t start_us, start_cpu_us, parent_cpu_us;   /* --start-time-us...; -1: not given (parent: 0) */
    uint64_t start_ns;          /* CLOCK_MONOTONIC ns at the process's start (timings' origin) */
    /* Bind and listen on the API socket at path, mode 0600 (a stale
     * socket replaced, one in use refused): 0 and *fd, or -errno after
     * printing why. The CLI's (its control socket's). */
    int (*listen)(const char *path, int *fd);
};

/* Run the server until a signal, the VM's end or an error: the exit code
 * (FC_EXIT_*), after a line on stderr for an error. Once per process. */
int fc_vmm_run(const struct fc_vmm_opts *o);

#endif
