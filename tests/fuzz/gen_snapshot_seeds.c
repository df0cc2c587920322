/* The snapshot fuzz target's seeds are real snapshots: this program (needs
 * /dev/kvm; PVM will do) runs the counter guest, 2 vCPUs, 16 MiB, pauses
 * it and writes a full snapshot, then a diff against it, into DIR; with a
 * third argument the VM also has a 1 MiB drive and a vsock device (CID 7).
 * `make fuzz-snapshot-seeds` writes the four state files the corpus holds
 * (tests/fuzz/corpus/snapshot/: full, diff, full-drive-vsock,
 * diff-drive-vsock). Paths inside them name /tmp files; nothing opens them.
 * Usage: gen_snapshot_seeds DIR counter.elf [devices] */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "include/moat.h"

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s DIR counter.elf [devices]\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    char img[256], uds[256], st[256], mem[256];
    snprintf(img, sizeof img, "%s/disk.img", dir);
    snprintf(uds, sizeof uds, "%s/v.sock", dir);
    int fd = open(img, O_CREAT | O_RDWR | O_TRUNC, 0600);
    if (fd < 0 || ftruncate(fd, 1 << 20) < 0) {
        perror(img);
        return 1;
    }
    close(fd);
    int devnull = open("/dev/null", O_WRONLY);
    struct moat_drive d = { .path = img, .id = "root", .read_only = 0 };
    struct moat_config cfg;
    moat_config_init(&cfg);
    cfg.kernel = argv[2];
    cfg.cmdline = "spin=20000";
    cfg.mem_mib = 16;
    cfg.cpus = 2;
    cfg.console_out = devnull;
    cfg.flags = MOAT_F_DIRTY_LOG;
    if (argc > 3) {
        cfg.drives = &d;
        cfg.ndrives = 1;
        cfg.vsock_uds = uds;
        cfg.vsock_cid = 7;
    }
    struct moat_vm *vm;
    struct moat_error err;
    if (moat_create(&cfg, &vm, &err)) {
        fprintf(stderr, "moat_create: %s\n", err.msg);
        return 1;
    }
    int r = moat_start(vm);
    usleep(300000);
    if (r == 0)
        r = moat_pause(vm);
    snprintf(st, sizeof st, "%s/full.state", dir);
    snprintf(mem, sizeof mem, "%s/full.mem", dir);
    if (r == 0)
        r = moat_snapshot(vm, st, mem);
    if (r == 0)
        r = moat_resume(vm);
    usleep(200000);
    if (r == 0)
        r = moat_pause(vm);
    snprintf(st, sizeof st, "%s/diff.state", dir);
    snprintf(mem, sizeof mem, "%s/diff.mem", dir);
    if (r == 0)
        r = moat_snapshot_diff(vm, st, mem);
    moat_destroy(vm);
    if (r < 0) {
        fprintf(stderr, "snapshot: %s\n", strerror(-r));
        return 1;
    }
    return 0;
}
