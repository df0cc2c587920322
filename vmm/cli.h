/* The moat CLI's internals, shared by its files (vmm/cli*.c): exit codes,
 * option parsing helpers, and one entry point per command. Only the CLI
 * calls exit(). */
#ifndef MOAT_CLI_H
#define MOAT_CLI_H

#include <stdint.h>

enum {
    EXIT_USAGE = 2,
    EXIT_TIMEOUT = 124,
    EXIT_VMM_ERROR = 125,
    EXIT_GUEST_CRASH = 126,
};

/* CLOCK_MONOTONIC ns when the process started (the --timings origin). */
extern uint64_t cli_start_ns;

/* "moat: <msg> (see moat run --help)" on stderr, exit 2. */
__attribute__((format(printf, 1, 2), noreturn)) void die_usage(const char *fmt, ...);
double parse_timeout(const char *s);
unsigned long parse_uint(const char *s, const char *what, unsigned long max);

/* An agent endpoint for exec/cp: a hybrid-vsock socket and port, or a
 * plain Unix socket. */
struct agent_target {
    const char *path;
    int hybrid;
    unsigned port;
    double wait;        /* --wait: keep trying to connect this long */
};
struct agent_client;
int agent_target_opt(struct agent_target *t, int argc, char **argv, int *i);
int agent_target_connect(const struct agent_target *t, struct agent_client *c);

/* Commands: argv[0] is the command name. */
int cmd_run(int argc, char **argv);
int cmd_restore(int argc, char **argv);
int cmd_device(int argc, char **argv);
int cmd_exec(int argc, char **argv);
int cmd_cp(int argc, char **argv);

#endif
