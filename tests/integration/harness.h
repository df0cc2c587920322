/* What the integration suites share: their environment knobs, a clock,
 * and the way they start a program under test. */
#ifndef MOAT_TEST_HARNESS_H
#define MOAT_TEST_HARNESS_H

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Environment variable n, or d when unset or empty. */
static inline const char *env_or(const char *n, const char *d)
{
    const char *v = getenv(n);
    return v && *v ? v : d;
}

/* MOAT_TEST_SLOW: every time limit is multiplied by it (default 1). */
static inline double slow(void)
{
    double f = atof(env_or("MOAT_TEST_SLOW", "1"));
    return f > 0 ? f : 1;
}

/* Monotonic seconds. */
static inline double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Fork, stdin from /dev/null, stdout and stderr to the given descriptors,
 * exec. argv[0] is looked up in PATH if path_search, else taken as a path;
 * new_group: the child leads a process group of its own (the caller also
 * calls setpgid(pid, pid), so there is no race with a kill of the group).
 * A failed exec exits 127 after "<who>: exec ARGV0: <error>" on stderr. */
static inline pid_t spawn_child(const char *who, const char *const *argv, int out_fd, int err_fd,
                                bool path_search, bool new_group)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (new_group)
            setpgid(0, 0);
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0)
            dup2(nul, 0);
        dup2(out_fd, 1);
        dup2(err_fd, 2);
        if (path_search)
            execvp(argv[0], (char *const *)argv);
        else
            execv(argv[0], (char *const *)argv);
        dprintf(2, "%s: exec %s: %s\n", who, argv[0], strerror(errno));
        _exit(127);
    }
    if (new_group)
        setpgid(pid, pid);
    return pid;
}

/* A Check program of one test case: the tests in order, each with a time
 * limit of timeout_s x slow(). The exit status for main: 0 if all passed. */
static inline int run_suite(const char *name, const TTest *const *tests, size_t n, double timeout_s)
{
    Suite *s = suite_create(name);
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, timeout_s * slow());
    for (size_t i = 0; i < n; i++)
        tcase_add_test(tc, tests[i]);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}

/* passt in PATH (or $MOAT_PASST) and an IPv4 default route: what
 * `moat device net --net user` needs to start. */
static inline bool user_net_possible(char *why, size_t wlen)
{
    const char *mp = getenv("MOAT_PASST");
    bool found = mp && access(mp, X_OK) == 0;
    const char *path = env_or("PATH", "/usr/bin:/bin");
    while (!found && *path) {
        size_t n = strcspn(path, ":");
        char f[PATH_MAX];
        snprintf(f, sizeof f, "%.*s/passt", (int)n, path);
        found = access(f, X_OK) == 0;
        path += n + (path[n] == ':');
    }
    if (!found) {
        snprintf(why, wlen, "passt not installed");
        return false;
    }
    FILE *f = fopen("/proc/net/route", "r");
    char line[256], ifn[64];
    unsigned dst = 1, mask = 1;
    bool route = false;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "%63s %x %*x %*x %*d %*d %*d %x", ifn, &dst, &mask) == 3 && dst == 0 && mask == 0)
            route = true;
    if (f)
        fclose(f);
    if (!route)
        snprintf(why, wlen, "no IPv4 default route (passt needs one)");
    return route;
}

#endif
