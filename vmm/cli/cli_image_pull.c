/* moat image pull: the options and the progress display; the protocol
 * is vmm/image/registry.c's (docs/images.md, "Pulling"). */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vmm/cli/cli.h"
#include "vmm/image/registry.h"
#include "vmm/image/store.h"

static const char usage_pull[] =
    "usage: moat image pull [--platform OS/ARCH[/VARIANT]] [--creds USER:PASS]\n"
    "                       [--insecure] [--ca-cert FILE] [--quiet] REF\n"
    "\n"
    "Download an image (manifest, config, layers) from its registry into the\n"
    "image store ($MOAT_HOME/images). REF as Docker writes it: python:3.12-slim,\n"
    "host:port/ns/name:tag, name@sha256:HEX.\n"
    "  --platform  the manifest picked from a multi-platform index (linux/amd64)\n"
    "  --creds     user and password; else $REGISTRY_AUTH_FILE, then\n"
    "              ~/.docker/config.json (\"auths\")\n"
    "  --insecure  plain HTTP to the registry\n"
    "  --ca-cert   trust the CAs in FILE (PEM) for the registry's TLS\n"
    "  --quiet     print only the manifest's digest\n";

/* Set by SIGINT/SIGTERM; the pull stops at its next callback. */
static volatile int pull_cancel;

static void on_signal(int sig)
{
    (void)sig;
    pull_cancel = 1;
}

struct show {
    bool tty, quiet;
    uint64_t last;
};

static void short_digest(const char *d, char *out, size_t len)
{
    snprintf(out, len, "%.12s", strncmp(d, "sha256:", 7) ? d : d + 7);
}

static void on_progress(void *arg, const struct img_pull_progress *p)
{
    struct show *sh = arg;
    char d[16];
    if (sh->quiet)
        return;
    short_digest(p->digest ? p->digest : "", d, sizeof d);
    const char *what = p->kind == IMG_K_CONFIG ? "config" : "layer";
    switch (p->state) {
    case IMG_PULL_START:
        sh->last = p->done;
        if (sh->tty)
            fprintf(stderr, "%s %-6s %llu/%llu", d, what, (unsigned long long)p->done,
                    (unsigned long long)p->total);
        break;
    case IMG_PULL_BYTES:
        if (sh->tty && (p->done - sh->last >= (256u << 10) || p->done == p->total)) {
            sh->last = p->done;
            fprintf(stderr, "\r\033[K%s %-6s %llu/%llu", d, what, (unsigned long long)p->done,
                    (unsigned long long)p->total);
        }
        break;
    case IMG_PULL_DONE:
    case IMG_PULL_CACHED:
        fprintf(stderr, "%s%s %-6s %llu bytes: %s\n", sh->tty && p->state == IMG_PULL_DONE ? "\r\033[K" : "",
                d, what, (unsigned long long)p->total, p->state == IMG_PULL_DONE ? "done" : "already present");
        break;
    case IMG_PULL_RETRY:
        fprintf(stderr, "%s%s: trying again: %s\n", sh->tty && p->digest ? "\r\033[K" : "", p->digest ? d : "registry",
                p->why ? p->why : "");
        break;
    }
}

/* The credentials files: $REGISTRY_AUTH_FILE, ~/.docker/config.json
 * ($DOCKER_CONFIG/config.json when set). */
static void auth_files(struct img_pull_opts *o, char *docker, size_t len)
{
    o->auth_file = getenv("REGISTRY_AUTH_FILE");
    const char *dc = getenv("DOCKER_CONFIG"), *home = getenv("HOME");
    if (dc && *dc)
        snprintf(docker, len, "%s/config.json", dc);
    else if (home && *home)
        snprintf(docker, len, "%s/.docker/config.json", home);
    else
        docker[0] = 0;
    o->docker_config = docker[0] ? docker : NULL;
}

/* Flags into o/sh; the index of REF, or -1 for a usage error. */
static int pull_args(int argc, char **argv, struct img_pull_opts *o, struct show *sh)
{
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        bool more = i + 1 < argc;
        if (!strcmp(a, "--platform") && more)
            o->platform = argv[++i];
        else if (!strcmp(a, "--creds") && more)
            o->creds = argv[++i];
        else if (!strcmp(a, "--ca-cert") && more)
            o->ca_cert = argv[++i];
        else if (!strcmp(a, "--insecure"))
            o->insecure = 1;
        else if (!strcmp(a, "--quiet") || !strcmp(a, "-q"))
            sh->quiet = true;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_pull, stdout);
            exit(0);
        } else
            return -1;
    }
    return i == argc - 1 ? i : -1;
}

int cmd_image_pull(struct img_store *s, int argc, char **argv)
{
    struct img_pull_opts o = { 0 };
    struct show sh = { .tty = isatty(STDERR_FILENO) };
    int i = pull_args(argc, argv, &o, &sh);
    if (i < 0) {
        fputs(usage_pull, stderr);
        return EXIT_USAGE;
    }
    char docker[4096], digest[IMG_DIGEST_MAX];
    auth_files(&o, docker, sizeof docker);
    o.progress = on_progress;
    o.arg = &sh;
    o.cancel = &pull_cancel;
    struct sigaction sa = { .sa_handler = on_signal };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    struct img_err *e = calloc(1, sizeof *e);
    if (!e)
        return EXIT_VMM_ERROR;
    int rc = img_pull(s, argv[i], &o, digest, sizeof digest, e);
    if (rc < 0) {
        rc = image_fail("pull", e);
        free(e);
        return pull_cancel ? 130 : rc;
    }
    free(e);
    if (sh.quiet)
        printf("%s\n", digest);
    else
        printf("%s: %s\n", argv[i], digest);
    return 0;
}
