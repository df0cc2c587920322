/* moat device: serve a moat device to another VMM over vhost-user. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "include/moat.h"
#include "vmm/cli.h"
#include "vmm/log.h"
#include "vmm/vhost_user.h"
#include "devices/virtio_blk.h"

/* ---- moat device: serve a moat device over vhost-user (docs/vhost-user.md) */

static const char usage_device[] =
    "usage: moat device blk --socket PATH --disk FILE [--ro] [-v]\n"
    "\n"
    "Serve moat's virtio-blk on a vhost-user socket: a frontend such as QEMU\n"
    "(-device vhost-user-blk,chardev=...) connects to PATH and its guest sees\n"
    "FILE as a virtio block device. Runs until SIGINT/SIGTERM; frontends may\n"
    "disconnect and reconnect.\n"
    "\n"
    "  --socket PATH  Unix socket to listen on (replaced if it exists)\n"
    "  --disk FILE    disk image (raw)\n"
    "  --ro           read-only: the guest sees a read-only disk, writes fail\n"
    "  -v, --verbose  more log output (repeat for debug)\n"
    "\n"
    "exit status: 0 after a signal; 2 usage error; 125 runtime error.\n";

static struct vhu_server *device_server;    /* for the signal handler only */

static void device_on_signal(int sig)
{
    (void)sig;
    if (device_server)
        vhu_server_stop(device_server);
}

int cmd_device(int argc, char **argv)
{
    static const struct option opts[] = {
        { "socket", required_argument, NULL, 's' },
        { "disk", required_argument, NULL, 'd' },
        { "ro", no_argument, NULL, 'r' },
        { "verbose", no_argument, NULL, 'v' },
        { "help", no_argument, NULL, 'h' },
        { 0, 0, 0, 0 },
    };
    const char *sock = NULL, *disk = NULL;
    bool ro = false;
    int verbose = 0, c;

    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(usage_device, stdout);
        return 0;
    }
    if (argc < 2 || strcmp(argv[1], "blk") != 0) {
        fprintf(stderr, "moat: device: unknown or missing device type (only 'blk')\n%s",
                usage_device);
        return EXIT_USAGE;
    }
    argc--;
    argv++;
    optind = 1;
    while ((c = getopt_long(argc, argv, "vh", opts, NULL)) != -1) {
        switch (c) {
        case 's': sock = optarg; break;
        case 'd': disk = optarg; break;
        case 'r': ro = true; break;
        case 'v': verbose++; break;
        case 'h': fputs(usage_device, stdout); return 0;
        default: fputs(usage_device, stderr); return EXIT_USAGE;
        }
    }
    if (optind < argc || !sock || !disk) {
        fprintf(stderr, "moat: device blk: --socket and --disk are required\n%s", usage_device);
        return EXIT_USAGE;
    }
    moat_log_set_level(LOG_WARN + verbose);

    struct virtio_blk *dev;
    const struct virtio_dev_ops *ops = &virtio_blk_ops;
    struct virtio_blk_opts bo = { .path = disk, .read_only = ro, .id = "moat-vhost-blk",
                                  .engine = BLK_ENGINE_AUTO, .name = "vhost-user-blk" };
    char why[256] = "";
    int r = virtio_blk_create(&bo, &dev, why, sizeof why);
    if (r < 0) {
        fprintf(stderr, "moat: device blk: %s: %s\n", disk, why[0] ? why : strerror(-r));
        return EXIT_VMM_ERROR;
    }
    r = vhu_server_create(sock, ops, dev, &device_server);
    if (r < 0) {
        fprintf(stderr, "moat: device blk: socket %s: %s\n", sock, strerror(-r));
        ops->destroy(dev);
        return EXIT_VMM_ERROR;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = device_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    r = vhu_server_run(device_server);
    vhu_server_destroy(device_server);
    device_server = NULL;
    ops->destroy(dev);
    if (r < 0) {
        fprintf(stderr, "moat: device blk: %s\n", strerror(-r));
        return EXIT_VMM_ERROR;
    }
    return 0;
}

