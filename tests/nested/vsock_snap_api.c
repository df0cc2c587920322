/* Nested check program (tests/nested/checks.d/vsock-snapshot.sh): libmoat's
 * moat_put_file / moat_get_file against the default Linux guest's agent,
 * and a snapshot of that VM (it has a vsock device) restored through the
 * library with moat_restore_config.vsock_uds while the original still runs:
 * exec and get_file work in the restored VM and see the snapshot's files.
 * Public API only. Prints what it does; exit 0 when every step passed.
 *
 * usage: vsock_snap_api KERNEL INITRD WORKDIR */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <moat.h>

static int failures;

#define CHECK(cond, ...) do {                                           \
        if (cond) { printf("ok: "); } else { printf("FAIL: "); failures++; } \
        printf(__VA_ARGS__); printf("\n"); fflush(stdout);            \
    } while (0)

struct capture { char buf[4096]; size_t len; };

static void cap(void *o, const void *b, size_t n)
{
    struct capture *c = o;
    size_t room = sizeof(c->buf) - 1 - c->len;
    if (n > room)
        n = room;
    memcpy(c->buf + c->len, b, n);
    c->len += n;
    c->buf[c->len] = 0;
}

static int run(struct moat_vm *vm, const char *sh, struct capture *c, int wait_ms)
{
    const char *argv[] = { "/bin/sh", "-c", sh };
    memset(c, 0, sizeof(*c));
    struct moat_exec ex = { .size = sizeof(ex), .argv = argv, .argc = 3, .stdin_fd = -1,
                            .on_stdout = cap, .on_stderr = cap, .opaque = c,
                            .connect_wait_ms = wait_ms };
    int st = -1;
    int r = moat_exec(vm, &ex, &st);
    return r < 0 ? r : st;
}

static int same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int x = fgetc(fa), y = fgetc(fb);
        if (x != y)
            same = 0;
        if (x == EOF || y == EOF)
            break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s KERNEL INITRD WORKDIR\n", argv[0]);
        return 2;
    }
    const char *d = argv[3];
    char sa[256], sb[256], blob[256], back[256], back2[256], st[256], mem[256];
    snprintf(sa, sizeof sa, "%s/a.sock", d);
    snprintf(sb, sizeof sb, "%s/b.sock", d);
    snprintf(blob, sizeof blob, "%s/blob", d);
    snprintf(back, sizeof back, "%s/blob.back", d);
    snprintf(back2, sizeof back2, "%s/blob.back2", d);
    snprintf(st, sizeof st, "%s/state", d);
    snprintf(mem, sizeof mem, "%s/memory", d);

    /* a 300000-byte random file: more than one 256 KiB chunk */
    static uint8_t data[300000];
    if (getrandom(data, sizeof data, 0) != (ssize_t)sizeof data)
        return 1;
    int fd = open(blob, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, data, sizeof data) != (ssize_t)sizeof data)
        return 1;
    close(fd);

    struct moat_config cfg;
    moat_config_init(&cfg);
    cfg.kernel = argv[1];
    cfg.initrd = argv[2];
    cfg.vsock_uds = sa;
    cfg.console_out = -1;
    struct moat_vm *vm = NULL, *vm2 = NULL;
    struct moat_error err;
    int r = moat_create(&cfg, &vm, &err);
    CHECK(r == 0, "moat_create: %d %s", r, r ? err.msg : "");
    if (r < 0)
        return 1;
    CHECK(moat_start(vm) == 0, "moat_start");
    struct capture c;
    r = run(vm, "echo booted", &c, 600000);
    CHECK(r == 0 && strstr(c.buf, "booted"), "exec after boot: %d %s", r, c.buf);

    char why[256];
    fd = open(blob, O_RDONLY);
    r = moat_put_file(vm, fd, "/tmp/blob", 0640, 5000, why, sizeof why);
    close(fd);
    CHECK(r == 0, "moat_put_file: %d %s", r, why);
    r = run(vm, "md5sum /tmp/blob; stat -c %a /tmp/blob", &c, 5000);
    printf("guest: %s", c.buf);
    CHECK(r == 0 && strstr(c.buf, "640"), "guest sees the file with mode 640");
    fd = open(back, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    uint32_t mode = 0;
    r = moat_get_file(vm, "/tmp/blob", fd, &mode, 5000, why, sizeof why);
    close(fd);
    CHECK(r == 0 && mode == 0640 && same_file(blob, back), "moat_get_file: %d mode %o, same bytes", r, mode);

    /* errors: the agent's message comes back */
    fd = open(blob, O_RDONLY);
    why[0] = 0;
    r = moat_put_file(vm, fd, "/nonexistent-dir/x", 0600, 5000, why, sizeof why);
    close(fd);
    CHECK(r == -EREMOTEIO && strstr(why, "nonexistent-dir"), "put to a missing dir: %d '%s'", r, why);
    fd = open(back2, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    why[0] = 0;
    r = moat_get_file(vm, "/no/such/file", fd, NULL, 5000, why, sizeof why);
    close(fd);
    CHECK(r == -EREMOTEIO && why[0], "get of a missing file: %d '%s'", r, why);
    CHECK(moat_put_file(vm, 0, "", 0600, 0, NULL, 0) == -EINVAL, "empty path: -EINVAL");
    CHECK(moat_put_file(vm, 0, "/x", 010000, 0, NULL, 0) == -EINVAL, "bad mode: -EINVAL");

    /* snapshot (the VM has a vsock device), keep the original running */
    run(vm, "echo in-snapshot > /tmp/marker", &c, 5000);
    CHECK(moat_pause(vm) == 0, "moat_pause");
    r = moat_snapshot(vm, st, mem);
    CHECK(r == 0, "moat_snapshot with vsock: %d", r);
    CHECK(moat_resume(vm) == 0, "moat_resume");
    run(vm, "echo after-snapshot > /tmp/marker", &c, 5000);

    struct moat_restore_config rc;
    moat_restore_config_init(&rc);
    rc.state_path = st;
    rc.mem_path = mem;
    rc.console_out = -1;
    rc.vsock_uds = sa;                  /* live: refused */
    r = moat_restore(&rc, &vm2, &err);
    CHECK(r == -EADDRINUSE, "restore onto the live socket: %d %s", r, err.msg);
    rc.vsock_uds = sb;
    r = moat_restore(&rc, &vm2, &err);
    CHECK(r == 0, "moat_restore with vsock_uds: %d %s", r, r ? err.msg : "");
    if (r == 0) {
        CHECK(moat_start(vm2) == 0, "moat_start (restored)");
        r = run(vm2, "cat /tmp/marker", &c, 60000);
        CHECK(r == 0 && strstr(c.buf, "in-snapshot"), "exec in the restored VM: %d %s", r, c.buf);
        fd = open(back2, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        r = moat_get_file(vm2, "/tmp/blob", fd, &mode, 5000, why, sizeof why);
        close(fd);
        CHECK(r == 0 && same_file(blob, back2), "moat_get_file from the restored VM: %d", r);
        r = run(vm, "cat /tmp/marker", &c, 5000);
        CHECK(r == 0 && strstr(c.buf, "after-snapshot"), "the original still runs: %d %s", r, c.buf);
        moat_stop(vm2);
        moat_destroy(vm2);
    }
    moat_stop(vm);
    moat_destroy(vm);
    printf("%d failure(s)\n", failures);
    return failures ? 1 : 0;
}
