/* examples/sandbox.c: boot a sandbox and run a command in it with libmoat.
 *
 *   build/examples/sandbox KERNEL INITRD CMD ARGS...
 *
 * Boots the guest with a vsock device (its /init then starts the guest
 * agent and keeps the guest up), runs CMD through the agent with its output
 * streamed to ours, and exits with CMD's status. Build: make examples. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <moat.h>

static void out(void *opaque, const void *buf, size_t len)
{
    fwrite(buf, 1, len, (FILE *)opaque);
    fflush((FILE *)opaque);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s KERNEL INITRD CMD ARGS...\n", argv[0]);
        return 2;
    }
    char sock[64];
    snprintf(sock, sizeof(sock), "/tmp/moat-example-%d.sock", (int)getpid());

    struct moat_config cfg;
    moat_config_init(&cfg);
    cfg.kernel = argv[1];
    cfg.initrd = argv[2];
    cfg.vsock_uds = sock;                 /* also starts the guest agent */
    cfg.console_out = -1;                 /* the guest console is not needed */

    struct moat_vm *vm;
    struct moat_error err;
    int r = moat_create(&cfg, &vm, &err);
    if (r < 0) {
        fprintf(stderr, "moat_create: %s\n", err.msg);
        return 1;
    }
    if ((r = moat_start(vm)) < 0) {
        fprintf(stderr, "moat_start: %s\n", strerror(-r));
        moat_destroy(vm);
        return 1;
    }
    struct moat_exec ex = {
        .size = sizeof(ex),
        .argv = (const char *const *)&argv[3],
        .argc = (size_t)(argc - 3),
        .stdin_fd = -1,
        .on_stdout = out,
        .on_stderr = out,
        .opaque = stdout,
        .connect_wait_ms = 300000,        /* the guest is still booting */
    };
    ex.opaque = stdout;
    int status = -1;
    r = moat_exec(vm, &ex, &status);
    if (r < 0)
        fprintf(stderr, "moat_exec: %s\n", strerror(-r));
    moat_stop(vm);
    moat_destroy(vm);
    return r < 0 ? 1 : status;
}
