/* runstat: run a command N times; print one line per run:
 *   <wall_us> <maxrss_kib> <exit_status>
 * wall = fork -> child reaped, on CLOCK_MONOTONIC. The child's stdout and
 * stderr go to the files named by $RUNSTAT_OUT / $RUNSTAT_ERR (default
 * /dev/null); stderr of the last run is kept for --timings parsing. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: runstat N CMD ARGS...\n");
        return 2;
    }
    int n = atoi(argv[1]);
    const char *out = getenv("RUNSTAT_OUT"), *err = getenv("RUNSTAT_ERR");
    for (int i = 0; i < n; i++) {
        long long t0 = now_us();
        pid_t pid = fork();
        if (pid < 0)
            return 1;
        if (pid == 0) {
            int fo = open(out ? out : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0644);
            int fe = open(err ? err : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0644);
            int fi = open("/dev/null", O_RDONLY);
            if (fo < 0 || fe < 0 || fi < 0)
                _exit(127);
            dup2(fi, 0); dup2(fo, 1); dup2(fe, 2);
            execvp(argv[2], argv + 2);
            _exit(127);
        }
        int st;
        struct rusage ru;
        if (wait4(pid, &st, 0, &ru) < 0)
            return 1;
        long long t1 = now_us();
        printf("%lld %ld %d\n", t1 - t0, ru.ru_maxrss,
               WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
        fflush(stdout);
    }
    return 0;
}
