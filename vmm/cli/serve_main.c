/* moat serve: an E2B-compatible sandbox server (docs/serve.md). The
 * command line, the API key, signals; the servers are vmm/api/e2b/serve_api.c
 * (REST) and vmm/api/e2b/serve_envd.c (envd). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vmm/cli/cli.h"
#include "vmm/api/e2b/serve_api.h"
#include "vmm/api/e2b/serve_req.h"

static const char usage_serve[] =
    "usage: moat serve [--api ADDR:PORT] [--envd ADDR:PORT] [--api-key KEY | --api-key-file FILE]\n"
    "\n"
    "Serve E2B's sandbox API over moat's named sandboxes, so programs written\n"
    "for the E2B SDK run on moat unchanged:\n"
    "  E2B_API_URL=http://127.0.0.1:3000 E2B_SANDBOX_URL=http://127.0.0.1:49983 \\\n"
    "  E2B_API_KEY=$(cat $MOAT_HOME/serve/api-key) node app.js\n"
    "\n"
    "  --api ADDR:PORT       the REST API (default 127.0.0.1:3000)\n"
    "  --envd ADDR:PORT      the in-sandbox API, envd (default 127.0.0.1:49983)\n"
    "  --api-key KEY         the key every request must carry (X-API-KEY)\n"
    "  --api-key-file FILE   read it from FILE (its first line)\n"
    "Without either, the key is $MOAT_HOME/serve/api-key, made (0600) at the\n"
    "first start. Both servers listen on loopback unless told otherwise.\n"
    "Sandboxes are moat sandboxes (moat ls) forked from templates (moat\n"
    "template); SIGTERM or SIGINT stops the server, not the sandboxes.\n"
    "See docs/serve.md.\n";

/* The key in FILE's first line: 0 or -1 after saying why. */
static int key_from_file(const char *path, char *key, size_t len)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        fprintf(stderr, "moat serve: %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (!fgets(key, (int)len, f))
        key[0] = 0;
    fclose(f);
    key[strcspn(key, "\r\n")] = 0;
    return 0;
}

static int key_ok(const char *key)
{
    size_t n = strlen(key);
    if (n < 16 || n > 200) {
        fprintf(stderr, "moat serve: an API key must be 16-200 characters\n");
        return 0;
    }
    for (const char *p = key; *p; p++)
        if (*p <= ' ' || *p == 0x7f) {
            fprintf(stderr, "moat serve: an API key must be printable, without spaces\n");
            return 0;
        }
    return 1;
}

/* $MOAT_HOME/serve/api-key: read it, or make it (0600, "e2b_" + 40 hex). */
static int stored_key(const char *home, char *key, size_t len)
{
    char dir[3100], path[3200];
    snprintf(dir, sizeof dir, "%.3000s/serve", home);
    snprintf(path, sizeof path, "%s/api-key", dir);
    int r = cli_mkdir_p(dir, 0700);
    if (r < 0) {
        fprintf(stderr, "moat serve: %s: %s\n", dir, strerror(-r));
        return -1;
    }
    if (access(path, F_OK) == 0)
        return key_from_file(path, key, len);
    unsigned char b[20];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
        fprintf(stderr, "moat serve: no random numbers\n");
        return -1;
    }
    int n = snprintf(key, len, "e2b_");
    for (size_t i = 0; i < sizeof b; i++)
        n += snprintf(key + n, len - (size_t)n, "%02x", b[i]);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || dprintf(fd, "%s\n", key) < 0 || close(fd) < 0) {
        fprintf(stderr, "moat serve: %s: %s\n", path, strerror(errno));
        return -1;
    }
    fprintf(stderr, "moat serve: made an API key in %s\n", path);
    return 0;
}

static int hostport(const char *opt, const char *v, char *addr, size_t alen, unsigned *port)
{
    char why[200];
    if (serve_parse_hostport(v, addr, alen, port, why, sizeof why) < 0) {
        fprintf(stderr, "moat serve: %s %s\n", opt, why);
        return -1;
    }
    return 0;
}

int cmd_serve(int argc, char **argv)
{
    char api_addr[64] = "127.0.0.1", envd_addr[64] = "127.0.0.1", key[256] = "";
    unsigned api_port = 3000, envd_port = 49983;
    const char *key_arg = NULL, *key_file = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage_serve, stdout);
            return 0;
        } else if (!strcmp(a, "--api") && i + 1 < argc) {
            if (hostport("--api", argv[++i], api_addr, sizeof api_addr, &api_port) < 0)
                return EXIT_USAGE;
        } else if (!strcmp(a, "--envd") && i + 1 < argc) {
            if (hostport("--envd", argv[++i], envd_addr, sizeof envd_addr, &envd_port) < 0)
                return EXIT_USAGE;
        } else if (!strcmp(a, "--api-key") && i + 1 < argc) {
            key_arg = argv[++i];
        } else if (!strcmp(a, "--api-key-file") && i + 1 < argc) {
            key_file = argv[++i];
        } else {
            fprintf(stderr, "moat serve: unknown or incomplete option '%s'\n%s", a, usage_serve);
            return EXIT_USAGE;
        }
    }
    if (key_arg && key_file) {
        fprintf(stderr, "moat serve: --api-key and --api-key-file: one or the other\n");
        return EXIT_USAGE;
    }
    char home[3001];
    if (cli_moat_home(home, sizeof home) < 0)
        return EXIT_USAGE;
    int r = cli_mkdir_p(home, 0700);
    if (r < 0) {
        fprintf(stderr, "moat serve: %s: %s\n", home, strerror(-r));
        return 1;
    }
    if (key_arg)
        snprintf(key, sizeof key, "%s", key_arg);
    else if (key_file ? key_from_file(key_file, key, sizeof key) < 0 : stored_key(home, key, sizeof key) < 0)
        return 1;
    if (!key_ok(key))
        return EXIT_USAGE;
    if (strcmp(api_addr, "127.0.0.1") && strcmp(api_addr, "::1"))
        fprintf(stderr, "moat serve: warning: the API listens on %s, not loopback: anyone who can reach it "
                        "and has the key controls your sandboxes\n", api_addr);
    if (strcmp(envd_addr, "127.0.0.1") && strcmp(envd_addr, "::1"))
        fprintf(stderr, "moat serve: warning: envd listens on %s, not loopback\n", envd_addr);

    /* SIGTERM and SIGINT are taken here, by sigwait, in no other thread:
     * block them before any thread starts. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct serve_opts o = { .api_addr = api_addr, .api_port = api_port, .envd_addr = envd_addr,
                            .envd_port = envd_port, .api_key = key, .home = home, .reap_interval = 1,
                            .sandbox_state = sandbox_state_name };
    const char *ri = getenv("MOAT_SERVE_REAP_INTERVAL");   /* tests: seconds between timeout checks */
    if (ri && atof(ri) > 0)
        o.reap_interval = atof(ri);
    struct serve *s;
    char why[300];
    r = serve_start(&o, &s, why, sizeof why);
    if (r < 0) {
        fprintf(stderr, "moat serve: %s\n", why);
        return 1;
    }
    fprintf(stderr, "moat serve: API on http://%s:%u, envd on http://%s:%u, sandboxes in %s\n", api_addr,
            api_port, envd_addr, envd_port, home);
    int sig = 0;
    while (sigwait(&set, &sig) != 0)
        ;
    fprintf(stderr, "moat serve: %s: stopping (sandboxes go on)\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    serve_stop(s);
    return 0;
}
