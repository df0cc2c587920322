/* moat run/restore --control PATH: a Unix socket served from the VM
 * process's run loop (vmrun.c; vmm/api/control/ctl_server.h). One request line per
 * connection, one reply line back (docs/control-socket.md); requests are
 * parsed by vmm/sandbox/ctl_proto.c. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "include/moat.h"
#include "vmm/api/control/ctl_server.h"
#include "vmm/base/clock.h"
#include "vmm/sandbox/ctl_proto.h"

#define CTL_CLIENT_MS 2000   /* a client's time to send its request line */

static int fill_addr(struct sockaddr_un *sa, const char *path)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    if (!path[0] || strlen(path) >= sizeof sa->sun_path)
        return -ENAMETOOLONG;
    memcpy(sa->sun_path, path, strlen(path) + 1);
    return 0;
}

int ctl_server_open(struct ctl_server *s, const char *path, struct sbx_err *err)
{
    struct sockaddr_un sa;
    s->fd = -1;
    s->paused = 0;
    s->euid = geteuid();
    if (fill_addr(&sa, path) < 0)
        return sandbox_err(err, -ENAMETOOLONG, "socket %s: path too long for a Unix socket", path);
    snprintf(s->path, sizeof s->path, "%s", path);
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode))
            return sandbox_err(err, -EEXIST, "socket %s exists and is not a socket", path);
        /* A socket someone still answers on is in use; else it is stale. */
        int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof sa) == 0) {
            close(probe);
            return sandbox_err(err, -EADDRINUSE, "socket %s: another process serves it", path);
        }
        if (probe >= 0)
            close(probe);
        unlink(path);
    }
    s->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s->fd < 0 || bind(s->fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
        chmod(path, 0600) < 0 || listen(s->fd, 16) < 0) {
        int e = errno;
        if (s->fd >= 0)
            close(s->fd);
        s->fd = -1;
        return sandbox_err(err, -e, "socket %s: %s", path, SBX_STRERROR(e));
    }
    return 0;
}

void ctl_server_close(struct ctl_server *s)
{
    if (s->fd < 0)
        return;
    close(s->fd);
    s->fd = -1;
    unlink(s->path);
}

static int snapshot_dir(struct moat_vm *vm, const char *dir, double *ms)
{
    char st[4200], mem[4200];
    if ((size_t)snprintf(st, sizeof st, "%s/state", dir) >= sizeof st ||
        (size_t)snprintf(mem, sizeof mem, "%s/memory", dir) >= sizeof mem)
        return -ENAMETOOLONG;
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return -errno;
    uint64_t t0 = clock_mono_ns();
    int r = moat_snapshot(vm, st, mem);
    *ms = (double)(clock_mono_ns() - t0) / 1e6;
    return r;
}

/* Pin every copy-on-write drive: DIR/diskN.overlay for drive N (the VM is
 * paused by the caller, or moat_clone_overlay pauses it per copy). *count
 * gets the number of pins. */
static int clone_disks(struct moat_vm *vm, const char *dir, unsigned *count)
{
    *count = 0;
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return -errno;
    for (unsigned i = 0; i < MOAT_MAX_DRIVES; i++) {
        char dst[4200];
        if ((size_t)snprintf(dst, sizeof dst, "%s/disk%u.overlay", dir, i) >= sizeof dst)
            return -ENAMETOOLONG;
        int r = moat_clone_overlay(vm, i, dst);
        if (r == -ERANGE)
            break;
        if (r == -ENOENT)
            continue;       /* no overlay on this drive */
        if (r < 0)
            return r;
        (*count)++;
    }
    return 0;
}

/* Carry out one request; the reply goes to out. 1 if the VM was told to stop. */
static int handle(struct ctl_server *s, struct moat_vm *vm, const char *line, size_t len,
                  char *out, size_t olen)
{
    struct ctl_req req;
    int r = ctl_parse(line, len, &req);
    if (r < 0) {
        snprintf(out, olen, "error bad request: %s\n",
                 r == -ENOENT ? "unknown verb" : r == -E2BIG ? "too long" :
                 r == -EBADMSG ? "bad bytes" : r == -ENODATA ? "empty" : "bad argument");
        return 0;
    }
    double ms = 0;
    switch (req.op) {
    case CTL_PAUSE:
    case CTL_RESUME:
        r = req.op == CTL_PAUSE ? moat_pause(vm) : moat_resume(vm);
        if (r == 0 || r == -EALREADY) {
            s->paused = req.op == CTL_PAUSE;
            snprintf(out, olen, "ok %s\n", s->paused ? "paused" : "running");
        } else {
            snprintf(out, olen, "error %s: %s\n", ctl_op_name(req.op), SBX_STRERROR(-r));
        }
        return 0;
    case CTL_STATUS: {
        uint64_t now = clock_mono_ns();
        snprintf(out, olen, "ok %s pid=%d uptime=%.1f\n", s->paused ? "paused" : "running",
                 (int)getpid(), (double)(now - s->start_ns) / 1e9);
        return 0;
    }
    case CTL_SNAPSHOT:
        r = snapshot_dir(vm, req.arg, &ms);
        if (r < 0)
            snprintf(out, olen, "error snapshot: %s\n", SBX_STRERROR(-r));
        else
            snprintf(out, olen, "ok snapshot ms=%.3f\n", ms);
        return 0;
    case CTL_STOP_SNAPSHOT: {
        /* Pause first so the guest cannot run between the snapshot and the stop. */
        int was_paused = s->paused || moat_pause(vm) == -EALREADY;
        r = snapshot_dir(vm, req.arg, &ms);
        if (r < 0) {
            if (!was_paused)
                moat_resume(vm);
            snprintf(out, olen, "error snapshot: %s\n", SBX_STRERROR(-r));
            return 0;
        }
        moat_stop(vm);
        snprintf(out, olen, "ok stopped ms=%.3f\n", ms);
        return 1;
    }
    case CTL_STOP:
        moat_stop(vm);
        snprintf(out, olen, "ok stopped\n");
        return 1;
    case CTL_SET: {
        char *type, *id, *key, *value;
        struct moat_error e;
        if (ctl_set_split(req.arg, &type, &id, &key, &value) < 0) {
            snprintf(out, olen, "error bad request: set TYPE[:ID] KEY VALUE\n");
            return 0;
        }
        r = moat_device_set(vm, type, id, key, value, &e);
        if (r < 0)
            snprintf(out, olen, "error set: %.200s\n", e.msg);
        else
            snprintf(out, olen, "ok set\n");
        return 0;
    }
    case CTL_GET: {
        char *type, *id, *key;
        struct moat_error e;
        if (ctl_get_split(req.arg, &type, &id, &key) < 0) {
            snprintf(out, olen, "error bad request: get TYPE[:ID] KEY\n");
            return 0;
        }
        char *text = malloc(CTL_REPLY_MAX);
        long n = text ? moat_device_get(vm, type, id, key, text, CTL_REPLY_MAX, &e) : -ENOMEM;
        if (n < 0) {
            snprintf(out, olen, "error get: %.200s\n", text ? e.msg : "out of memory");
        } else {
            memcpy(out, "ok ", 3);
            ctl_escape(text, out + 3, olen - 4);
            strcat(out, "\n");
        }
        free(text);
        return 0;
    }
    case CTL_SNAPSHOT_DISKS:
    case CTL_CLONE_DISKS: {
        /* One pause for the memory snapshot and the disk pins: the pins are
         * the disk state the snapshot refers to. */
        int was_paused = s->paused || moat_pause(vm) == -EALREADY;
        unsigned pins = 0;
        uint64_t t0 = clock_mono_ns();
        r = req.op == CTL_SNAPSHOT_DISKS ? snapshot_dir(vm, req.arg, &ms) : 0;
        if (r == 0)
            r = clone_disks(vm, req.arg, &pins);
        uint64_t t1 = clock_mono_ns();
        if (!was_paused)
            moat_resume(vm);
        ms = (double)(t1 - t0) / 1e6;
        if (r < 0)
            snprintf(out, olen, "error %s: %s\n", ctl_op_name(req.op), SBX_STRERROR(-r));
        else
            snprintf(out, olen, "ok %s disks=%u ms=%.3f\n", ctl_op_name(req.op), pins, ms);
        return 0;
    }
    }
    snprintf(out, olen, "error internal\n");
    return 0;
}

int ctl_server_serve(struct ctl_server *s, struct moat_vm *vm)
{
    int c = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0)
        return 0;
    /* Only our own user (or root) may steer the VM. */
    struct ucred cr;
    socklen_t cl = sizeof cr;
    if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0 ||
        (cr.uid != s->euid && cr.uid != 0)) {
        close(c);
        return 0;
    }
    /* A client gets 2 s in all to send its line: a stuck one, or one that
     * trickles a byte at a time, cannot stall the VMM's loop for longer
     * (SO_RCVTIMEO alone would restart the 2 s at every byte). */
    struct timeval tv = { .tv_sec = CTL_CLIENT_MS / 1000 };
    setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    uint64_t t0 = clock_mono_ns();
    char line[CTL_LINE_MAX + 1];
    size_t olen = 2 * CTL_REPLY_MAX + 8;       /* a get's escaped text */
    char *out = malloc(olen);
    if (!out) {
        close(c);
        return 0;
    }
    size_t len = 0;
    int stop = 0;
    while (len <= CTL_LINE_MAX) {
        long left = CTL_CLIENT_MS - (long)((clock_mono_ns() - t0) / 1000000u);
        if (left <= 0)
            break;
        struct pollfd pf = { .fd = c, .events = POLLIN };
        int pr = poll(&pf, 1, (int)left);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            break;
        ssize_t n = recv(c, line + len, CTL_LINE_MAX + 1 - len, MSG_DONTWAIT);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
        if (memchr(line, '\n', len))
            break;
    }
    if (len > 0) {
        stop = handle(s, vm, line, len, out, olen);
        if (send(c, out, strlen(out), MSG_NOSIGNAL) < 0) { /* the client left */ }
    }
    free(out);
    close(c);
    return stop;
}
