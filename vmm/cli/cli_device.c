/* moat device: serve a moat device to another VMM over vhost-user. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "include/moat.h"
#include "vmm/cli/cli.h"
#include "vmm/base/log.h"
#include "vmm/base/scfilter.h"
#include "vmm/transport/vhost_user.h"
#include "devices/net/net_kind.h"
#include "devices/virtio/devopt.h"
#include "devices/virtio/virtio_kind.h"
#include "vmm/core/devtab.h"

/* ---- moat device: serve a moat device over vhost-user (docs/vhost-user.md) */

static const char usage_device[] =
    "usage: moat device blk --socket PATH --disk FILE [--ro] [--direct] [--overlay FILE] [-v]\n"
    "       moat device vsock --socket PATH --uds PATH [--cid N] [-v]\n"
    "       moat device TYPE,OPTIONS --socket PATH [-v]   (as moat run --device takes them)\n"
    "       moat device net --socket PATH --net tap=NAME|user[,OPTIONS] [--net-allow SPEC]\n"
    "                  [--net-deny SPEC] [--net-allow-domain SPEC] [--net-default allow|deny]\n"
    "                  [--net-no-preset] [--metadata FILE] [-v]     (docs/net.md)\n"
    "\n"
    "Serve a moat virtio device on a vhost-user socket: a frontend such as QEMU\n"
    "(-device vhost-user-blk,chardev=... or vhost-user-vsock-device,chardev=...)\n"
    "connects to PATH and its guest sees the device. Runs until SIGINT/SIGTERM;\n"
    "frontends may disconnect and reconnect.\n"
    "\n"
    "  --socket PATH  vhost-user Unix socket to listen on (replaced if it exists)\n"
    "blk:\n"
    "  --disk FILE    disk image (raw)\n"
    "  --ro           read-only: the guest sees a read-only disk, writes fail\n"
    "  --direct       O_DIRECT: bypass the host page cache (as QEMU's cache=none)\n"
    "  --overlay FILE copy-on-write: --disk is a read-only base, writes go to FILE\n"
    "                 (created if missing; see moat disk)\n"
    "vsock (the host side is Firecracker's hybrid vsock, as moat run --vsock):\n"
    "  --uds PATH     host clients connect here and write \"CONNECT <port>\\n\";\n"
    "                 guest connections to host port P go to PATH_P\n"
    "  --cid N        the guest's CID (3 .. 4294967294, default 3)\n"
    "\n"
    "  -v, --verbose  more log output (repeat for debug)\n"
    "  --no-seccomp   no seccomp filters; --seccomp-audit: log, never kill\n"
    "\n"
    "SIGUSR1 writes the device's state to stdout (net: its policy, its counters\n"
    "and each rule's) between the lines [moat device TYPE: KEY] and\n"
    "[moat device TYPE: end].\n"
    "exit status: 0 after a signal; 2 usage error; 125 runtime error;\n"
    "159 killed by a seccomp filter (docs/security.md).\n";

static struct vhu_server *device_server;    /* for the signal handler only */

static void device_on_signal(int sig)
{
    (void)sig;
    if (device_server)
        vhu_server_stop(device_server);
}

/* SIGUSR1: the device's state on stdout, written by a thread of its own
 * that waits for the signal (every thread has it blocked, so it never
 * interrupts the device); the kind's get may be called from any thread. */
struct state_dump {
    const struct virtio_kind *k;
    void *priv;
    pthread_t thread;
    volatile sig_atomic_t stop;     /* set before the thread is woken to end */
    int seccomp;                    /* enum sc_mode: its filter (SC_VHOST) */
};

static void state_write(const struct state_dump *d)
{
    const char *const *keys = d->k->get ? d->k->get_keys : NULL;
    if (!keys || !keys[0]) {
        printf("[moat device %s: no state to show]\n", d->k->type);
        fflush(stdout);
        return;
    }
    for (size_t i = 0; keys[i]; i++) {
        size_t cap = 8192;
        char *buf = NULL;
        long n = -1;
        for (int tries = 0; tries < 4; tries++) {     /* the text may grow between calls */
            char *nb = realloc(buf, cap);
            if (!nb)
                break;
            buf = nb;
            n = d->k->get(d->priv, keys[i], buf, cap);
            if (n < 0 || (size_t)n < cap)
                break;
            cap = (size_t)n + 1024;
        }
        printf("[moat device %s: %s]\n", d->k->type, keys[i]);
        if (n >= 0 && buf && (size_t)n < cap)
            printf("%s%s", buf, n > 0 && buf[n - 1] != '\n' ? "\n" : "");
        else
            printf("(not available: %s)\n", n < 0 ? strerror((int)-n) : "out of memory");
        free(buf);
    }
    printf("[moat device %s: end]\n", d->k->type);
    fflush(stdout);
}

/* The vhost-user server's thread (SC_VHOST filter). */
struct serve {
    pthread_t thread;
    struct vhu_server *s;
    enum sc_mode mode;
    int r;
};

static void *serve_main(void *arg)
{
    struct serve *sv = arg;
    sv->r = sc_install(SC_VHOST, sv->mode);
    if (sv->r == 0)
        sv->r = vhu_server_run(sv->s);
    return NULL;
}

static void *state_main(void *arg)
{
    struct state_dump *d = arg;
    if (sc_install(SC_VHOST, (enum sc_mode)d->seccomp) < 0)
        return NULL;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    for (;;) {
        int sig;
        if (sigwait(&set, &sig) != 0 || d->stop)
            return NULL;
        state_write(d);
    }
}

/* The typed flags: each an option of the device's kind. */
static const struct { const char *flag, *key; bool has_arg; } device_flags[] = {
    { "disk", "path", true }, { "ro", "ro", false }, { "direct", "direct", false },
    { "overlay", "overlay", true }, { "uds", "uds", true }, { "cid", "cid", true },
    { "metadata", "metadata", true },
    /* net's policy: items of its policy= option (--net OPTIONS adds options) */
    { "net-allow", "allow", true }, { "net-deny", "deny", true }, { "net-allow-domain", "allow-domain", true },
    { "net-default", "default", true }, { "net-no-preset", "no-preset", false },
    { "net", "", true },
};
#define NFLAGS (sizeof(device_flags) / sizeof(device_flags[0]))

static bool kind_takes(const struct virtio_kind *k, const char *key)
{
    for (size_t i = 0; k->keys[i]; i++)
        if (!strcmp(k->keys[i], key))
            return true;
    return false;
}

/* Typed flag number i (of device_flags) with its value (optarg): set in o,
 * or for --net-* added to the policy text. 0, or -1 after printing why. */
static int device_flag(const struct virtio_kind *k, const char *type, size_t i, struct devopts *o,
                       char **policy, size_t *policy_len, char *why, size_t wlen)
{
    const char *flag = device_flags[i].flag, *key = device_flags[i].key;
    if (!strncmp(flag, "net", 3)) {
        /* --net OPTIONS: more options; --net-*: an item of the policy */
        int e = 0;
        if (!kind_takes(k, "policy")) {
            fprintf(stderr, "moat: device %s: --%s is not an option of this device\n%s", type, flag, usage_device);
            return -1;
        }
        if (!*key) {
            struct devopts *more = malloc(sizeof(*more));
            e = more ? devopt_parse(optarg, more, why, wlen) : -ENOMEM;
            for (size_t j = 0; e == 0 && j < more->n; j++)
                e = devopt_get(o, more->o[j].key) ? -EEXIST : devopt_set(o, more->o[j].key, more->o[j].val);
            free(more);
        } else {
            e = cli_policy_item(policy, policy_len, key, optarg, why, wlen);
        }
        if (e < 0) {
            fprintf(stderr, "moat: device %s: --%s '%s': %s\n", type, flag, optarg ? optarg : "",
                    e == -EEXIST ? "an option given twice" : why[0] ? why : strerror(-e));
            return -1;
        }
        return 0;
    }
    if (!kind_takes(k, key)) {
        fprintf(stderr, "moat: device %s: --%s is not an option of this device\n%s", type, flag,
                usage_device);
        return -1;
    }
    if (devopt_get(o, key)) {
        fprintf(stderr, "moat: device %s: --%s given twice (or also as %s=)\n", type, flag, key);
        return -1;
    }
    if (devopt_set(o, key, device_flags[i].has_arg ? optarg : NULL) < 0) {
        fprintf(stderr, "moat: device %s: invalid --%s '%s'\n", type, flag, optarg ? optarg : "");
        return -1;
    }
    return 0;
}

/* Serve the device of kind k with options o on socket sock until a signal
 * or an error: the exit status. */
static int device_serve(const struct virtio_kind *k, struct devopts *o, const char *type, const char *sock,
                        enum sc_mode scm, int verbose, char *why, size_t wlen)
{
    struct sc_runner *runner = NULL;
    int ret;
    moat_set_log(MOAT_LOG_WARN + verbose, NULL, NULL);
    /* SIGUSR1 blocked in every thread the device starts (state_main takes it) */
    sigset_t usr1, old_mask;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &usr1, &old_mask);

    /* vhost-user-vsock: QEMU keeps the event queue and hands us rx and tx
     * only; its virtio-mmio offers 1024-entry rings (docs/vhost-user.md).
     * When the frontend goes away the server resets the device: vsock
     * closes every host connection, as when a `moat run` VM exits. */
    struct vhu_server_opts so = { .nqueues = k->vhost_user_nqueues, .queue_max = k->vhost_user_queue_max,
                                  .seccomp = scm };
    struct virtio_made m;
    char name[48];
    snprintf(name, sizeof(name), "vhost-user-%s", k->type);
    int r = k->create(o, name, false, (int)scm, &m, why, wlen);
    if (r < 0) {
        fprintf(stderr, "moat: device %s: %s\n", type, why[0] ? why : strerror(-r));
        ret = EXIT_VMM_ERROR;
        goto unmask;
    }
    /* the frontend's config space, not ours, tells the guest its MAC */
    if (k == &net_kind && (r = net_kind_frontend_mac(m.priv, why, wlen)) < 0) {
        fprintf(stderr, "moat: device %s: %s\n", type, why[0] ? why : strerror(-r));
        m.ops->destroy(m.dev);
        k->free(m.priv);
        ret = EXIT_VMM_ERROR;
        goto unmask;
    }
    /* Device start/stop/reset on a runner under the vmm list, so the
     * device's threads do not inherit this thread's (docs/security.md). */
    if ((r = sc_runner_start(&runner, scm)) < 0 || (r = sc_runner_ready(runner)) < 0) {
        fprintf(stderr, "moat: device %s: seccomp: %s\n", type, strerror(-r));
        sc_runner_stop(runner);     /* NULL: nothing */
        m.ops->destroy(m.dev);
        k->free(m.priv);
        ret = EXIT_VMM_ERROR;
        goto unmask;
    }
    so.runner = runner;
    r = vhu_server_create_opts(sock, m.ops, m.dev, &so, &device_server);
    if (r < 0) {
        fprintf(stderr, "moat: device %s: socket %s: %s\n", type, sock, strerror(-r));
        m.ops->destroy(m.dev);
        k->free(m.priv);
        ret = EXIT_VMM_ERROR;
        goto unmask;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = device_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    struct state_dump dump = { .k = k, .priv = m.priv };
    dump.seccomp = scm;
    bool dumping = pthread_create(&dump.thread, NULL, state_main, &dump) == 0;
    if (!dumping)
        fprintf(stderr, "moat: device %s: no SIGUSR1 state thread; going on without it\n", type);
    /* The server runs on a thread of its own, which installs its filter
     * before the first frontend connects; this thread only waits for it
     * and then tears the device down (unlink, flock, overlay flush, passt:
     * calls the server's list need not have). */
    struct serve serve = { .s = device_server, .mode = scm };
    r = -pthread_create(&serve.thread, NULL, serve_main, &serve);
    if (r == 0) {
        pthread_join(serve.thread, NULL);
        r = serve.r;
    }
    if (dumping) {
        dump.stop = 1;
        pthread_kill(dump.thread, SIGUSR1);
        pthread_join(dump.thread, NULL);
    }
    vhu_server_destroy(device_server);
    device_server = NULL;
    m.ops->destroy(m.dev);
    k->free(m.priv);
    sc_runner_stop(runner);
    ret = 0;
    if (r < 0) {
        fprintf(stderr, "moat: device %s: %s\n", type, strerror(-r));
        ret = EXIT_VMM_ERROR;
    }
unmask:
    /* a SIGUSR1 still pending (sent as the device stopped) is dropped, not
     * delivered with its default action (the end of the process) */
    signal(SIGUSR1, SIG_IGN);
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    return ret;
}

int cmd_device(int argc, char **argv)
{
    struct option opts[NFLAGS + 6];
    for (size_t i = 0; i < NFLAGS; i++)
        opts[i] = (struct option){ device_flags[i].flag, device_flags[i].has_arg ? required_argument : no_argument,
                                   NULL, 1000 + (int)i };
    opts[NFLAGS] = (struct option){ "socket", required_argument, NULL, 's' };
    opts[NFLAGS + 1] = (struct option){ "verbose", no_argument, NULL, 'v' };
    opts[NFLAGS + 2] = (struct option){ "help", no_argument, NULL, 'h' };
    opts[NFLAGS + 3] = (struct option){ "no-seccomp", no_argument, NULL, 'S' };
    opts[NFLAGS + 4] = (struct option){ "seccomp-audit", no_argument, NULL, 'A' };
    opts[NFLAGS + 5] = (struct option){ 0, 0, 0, 0 };
    const char *sock = NULL;
    int verbose = 0, c;
    enum sc_mode scm = SC_KILL;     /* seccomp on by default, as moat run */
    char why[512] = "";

    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(usage_device, stdout);
        return 0;
    }
    /* TYPE, or TYPE,OPTIONS as moat run --device takes them */
    char type[32] = "";
    const char *comma = argc >= 2 ? strchr(argv[1], ',') : NULL;
    if (argc >= 2)
        snprintf(type, sizeof(type), "%.*s", (int)(comma ? (size_t)(comma - argv[1]) : strlen(argv[1])), argv[1]);
    const struct virtio_kind *k = devtab_kind(type);
    if (!k) {
        char tb[DEVTAB_TYPES_LEN];
        fprintf(stderr, "moat: device: unknown or missing device type (%s)\n%s", devtab_types(tb), usage_device);
        return EXIT_USAGE;
    }
    struct devopts *o = malloc(sizeof(*o));
    if (!o)
        return EXIT_VMM_ERROR;
    int ret = EXIT_USAGE;
    char *policy = NULL;
    size_t policy_len = 0;
    if (devopt_parse(comma ? comma + 1 : NULL, o, why, sizeof(why)) < 0) {
        fprintf(stderr, "moat: device %s: %s\n", type, why);
        goto out;
    }
    argc--;
    argv++;
    optind = 1;
    while ((c = getopt_long(argc, argv, "vh", opts, NULL)) != -1) {
        if (c >= 1000 && c < 1000 + (int)NFLAGS) {
            if (device_flag(k, type, (size_t)(c - 1000), o, &policy, &policy_len, why, sizeof(why)) < 0)
                goto out;
            continue;
        }
        switch (c) {
        case 's': sock = optarg; break;
        case 'S': scm = SC_OFF; break;
        case 'A': scm = SC_AUDIT; break;
        case 'v': verbose++; break;
        case 'h': fputs(usage_device, stdout); ret = 0; goto out;
        default: fputs(usage_device, stderr); goto out;
        }
    }
    if (policy && (devopt_get(o, "policy") || devopt_set(o, "policy", policy) < 0)) {
        fprintf(stderr, "moat: device %s: the policy given twice (policy= and --net-*), or too long\n", type);
        goto out;
    }
    if (optind < argc || !sock) {
        fprintf(stderr, "moat: device %s: --socket is required\n%s", type, usage_device);
        goto out;
    }
    if (devopt_only(o, k->keys, why, sizeof(why)) < 0 || k->check(o, why, sizeof(why)) < 0) {
        fprintf(stderr, "moat: device %s: %s\n", type, why);
        goto out;
    }
    ret = device_serve(k, o, type, sock, scm, verbose, why, sizeof(why));
out:
    free(policy);
    free(o);
    return ret;
}
