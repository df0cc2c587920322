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
#include "vmm/cli/cli.h"
#include "vmm/base/log.h"
#include "vmm/transport/vhost_user.h"
#include "devices/blk/virtio_blk.h"
#include "devices/vsock/vsock.h"

/* ---- moat device: serve a moat device over vhost-user (docs/vhost-user.md) */

static const char usage_device[] =
    "usage: moat device blk --socket PATH --disk FILE [--ro] [--direct] [--overlay FILE] [-v]\n"
    "       moat device vsock --socket PATH --uds PATH [--cid N] [-v]\n"
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
        { "direct", no_argument, NULL, 'D' },
        { "overlay", required_argument, NULL, 'O' },
        { "uds", required_argument, NULL, 'u' },
        { "cid", required_argument, NULL, 'c' },
        { "verbose", no_argument, NULL, 'v' },
        { "help", no_argument, NULL, 'h' },
        { 0, 0, 0, 0 },
    };
    const char *sock = NULL, *disk = NULL, *uds = NULL, *overlay = NULL;
    unsigned long long cid = VSOCK_DEFAULT_CID;
    bool ro = false, have_cid = false, direct = false;
    int verbose = 0, c;
    char *end;

    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(usage_device, stdout);
        return 0;
    }
    if (argc < 2 || (strcmp(argv[1], "blk") != 0 && strcmp(argv[1], "vsock") != 0)) {
        fprintf(stderr, "moat: device: unknown or missing device type ('blk' or 'vsock')\n%s",
                usage_device);
        return EXIT_USAGE;
    }
    const char *type = argv[1];
    bool is_vsock = !strcmp(type, "vsock");
    argc--;
    argv++;
    optind = 1;
    while ((c = getopt_long(argc, argv, "vh", opts, NULL)) != -1) {
        switch (c) {
        case 's': sock = optarg; break;
        case 'd': disk = optarg; break;
        case 'r': ro = true; break;
        case 'D': direct = true; break;
        case 'O': overlay = optarg; break;
        case 'u': uds = optarg; break;
        case 'c':
            errno = 0;
            cid = strtoull(optarg, &end, 10);
            if (errno || end == optarg || *end || optarg[0] == '-' || cid < 3 ||
                cid > 0xfffffffeull) {
                fprintf(stderr, "moat: device vsock: invalid --cid '%s' (3 .. 4294967294)\n",
                        optarg);
                return EXIT_USAGE;
            }
            have_cid = true;
            break;
        case 'v': verbose++; break;
        case 'h': fputs(usage_device, stdout); return 0;
        default: fputs(usage_device, stderr); return EXIT_USAGE;
        }
    }
    if (optind < argc || !sock || (is_vsock ? !uds : !disk)) {
        fprintf(stderr, "moat: device %s: --socket and %s are required\n%s", type,
                is_vsock ? "--uds" : "--disk", usage_device);
        return EXIT_USAGE;
    }
    if (is_vsock ? (disk || ro || direct) : (uds || have_cid)) {
        fprintf(stderr, "moat: device %s: %s is not an option of this device\n%s", type,
                is_vsock ? (disk ? "--disk" : ro ? "--ro" : "--direct") : (uds ? "--uds" : "--cid"),
                usage_device);
        return EXIT_USAGE;
    }
    moat_set_log(MOAT_LOG_WARN + verbose, NULL, NULL);

    void *dev;
    const struct virtio_dev_ops *ops;
    /* vhost-user-vsock: QEMU keeps the event queue and hands us rx and tx
     * only; its virtio-mmio offers 1024-entry rings (docs/vhost-user.md). */
    struct vhu_server_opts so = { .nqueues = 0 };
    char why[256] = "";
    int r;
    if (is_vsock) {
        /* When the frontend goes away the server resets the device
         * (vsock_ops.reset): every host connection is closed, as when a
         * `moat run` VM exits, and the next guest starts afresh. */
        struct vsock_opts vo = { .uds_path = uds, .guest_cid = cid, .name = "vhost-user-vsock" };
        struct vsock_dev *vd = NULL;
        ops = &vsock_ops;
        so.nqueues = 2;
        so.queue_max = 1024;
        r = vsock_create(&vo, &vd, why, sizeof why);
        dev = vd;
    } else {
        struct virtio_blk_opts bo = { .path = disk, .read_only = ro, .id = "moat-vhost-blk",
                                      .engine = BLK_ENGINE_AUTO, .name = "vhost-user-blk",
                                      .direct = direct, .overlay = overlay };
        struct virtio_blk *bd;
        ops = &virtio_blk_ops;
        r = virtio_blk_create(&bo, &bd, why, sizeof why);
        dev = bd;
    }
    if (r < 0) {
        fprintf(stderr, "moat: device %s: %s: %s\n", type, is_vsock ? uds : disk,
                why[0] ? why : strerror(-r));
        return EXIT_VMM_ERROR;
    }
    r = vhu_server_create_opts(sock, ops, dev, &so, &device_server);
    if (r < 0) {
        fprintf(stderr, "moat: device %s: socket %s: %s\n", type, sock, strerror(-r));
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
        fprintf(stderr, "moat: device %s: %s\n", type, strerror(-r));
        return EXIT_VMM_ERROR;
    }
    return 0;
}

