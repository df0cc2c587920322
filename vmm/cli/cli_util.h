/* What the moat CLI's commands share (vmm/cli/cli_util.c): exit codes, the
 * --timings origin, the usage-error exit and number parsing, the --net-*
 * policy items, and the sandbox library's messages printed. Included through vmm/cli/cli.h. */
#ifndef MOAT_CLI_UTIL_H
#define MOAT_CLI_UTIL_H

#include <stddef.h>
#include <stdint.h>

enum {
    EXIT_USAGE = 2,
    EXIT_TIMEOUT = 124,
    EXIT_VMM_ERROR = 125,
    EXIT_GUEST_CRASH = 126,
};

/* CLOCK_MONOTONIC ns when the process started (the --timings origin). */
extern uint64_t cli_start_ns;

/* Each line of e's message (vmm/sandbox/sandbox.h) as "moat: LINE" on
 * stderr; an SBX_VERBATIM line (a log's tail) as it is. */
struct sbx_err;
void cli_say(const struct sbx_err *e);
/* The same for the first n bytes of message text m. */
void cli_say_n(const char *m, size_t n);

/* "moat: <msg> (see moat run --help)" on stderr, exit 2. */
__attribute__((format(printf, 1, 2), noreturn)) void die_usage(const char *fmt, ...);
/* --timeout SEC: above 0, at most 1e6; else die_usage. */
double parse_timeout(const char *s);
/* A decimal number 0..max (no sign); else die_usage("invalid WHAT"). */
unsigned long parse_uint(const char *s, const char *what, unsigned long max);

/* Append the policy item "ITEM[ ARG]" of a --net-* flag (item "allow",
 * "deny", "allow-domain", "default", "no-preset") to the policy text *p of
 * *len bytes (malloc'd and grown here; NULL to start). 0, or -EINVAL (an
 * argument empty or holding '"' or ';', a default other than allow or
 * deny) / -E2BIG (past CLI_POLICY_MAX) / -ENOMEM, with why. */
#define CLI_POLICY_MAX 16384
int cli_policy_item(char **p, size_t *len, const char *item, const char *arg, char *why, size_t wlen);

#endif
