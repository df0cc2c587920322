/* What the moat CLI's commands share (cli_util.h): the --timings origin,
 * the usage-error exit, number parsing, the --net-* policy items, the
 * sandbox library's messages printed. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/cli/cli_util.h"
#include "vmm/base/clock.h"
#include "vmm/sandbox/sandbox.h"

uint64_t cli_start_ns;

__attribute__((constructor)) static void record_start(void)
{
    cli_start_ns = clock_mono_ns();
}

void cli_say_n(const char *m, size_t n)
{
    for (const char *end = m + n, *nl; m < end && *m; m = nl < end && *nl ? nl + 1 : end) {
        nl = strchrnul(m, '\n');
        if (nl > end)
            nl = end;
        int verbatim = *m == SBX_VERBATIM;
        fprintf(stderr, "%s%.*s\n", verbatim ? "" : "moat: ", (int)(nl - m) - verbatim, m + verbatim);
    }
}

void cli_say(const struct sbx_err *e)
{
    cli_say_n(e->msg, strlen(e->msg));
}

void die_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "moat: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see moat run --help)\n");
    exit(EXIT_USAGE);
}

double parse_timeout(const char *s)
{
    char *end;
    errno = 0;
    double t = strtod(s, &end);
    if (errno || *end || !*s || !(t > 0) || t > 1e6 || isnan(t))
        die_usage("invalid --timeout %s", s);
    return t;
}

unsigned long parse_uint(const char *s, const char *what, unsigned long max)
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

int cli_policy_item(char **p, size_t *len, const char *item, const char *arg, char *why, size_t wlen)
{
    if (arg && (!*arg || strpbrk(arg, "\";"))) {
        snprintf(why, wlen, "invalid --net-%s '%s'", item, arg);
        return -EINVAL;
    }
    if (!strcmp(item, "default") && (!arg || (strcmp(arg, "allow") && strcmp(arg, "deny")))) {
        snprintf(why, wlen, "--net-default allow|deny, not '%s'", arg ? arg : "");
        return -EINVAL;
    }
    size_t n = *len + strlen(item) + (arg ? strlen(arg) : 0) + 4;
    if (n > CLI_POLICY_MAX) {
        snprintf(why, wlen, "too many --net-* rules");
        return -E2BIG;
    }
    char *np = realloc(*p, n);
    if (!np) {
        snprintf(why, wlen, "out of memory");
        return -ENOMEM;
    }
    snprintf(np + *len, n - *len, "%s%s%s%s", *len ? "; " : "", item, arg ? " " : "", arg ? arg : "");
    *p = np;
    *len = strlen(np);
    return 0;
}
