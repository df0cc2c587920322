/* The run loop of a VM process (moat run, moat restore): vmrun.h. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "include/moat.h"
#include "vmm/api/control/vmrun.h"
#include "vmm/base/clock.h"
#include "vmm/base/scfilter.h"

/* A line for o->note. */
__attribute__((format(printf, 2, 3)))
static void note(const struct vmrun_opts *o, const char *fmt, ...)
{
    if (!o->note)
        return;
    char *s = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n >= 0) {
        o->note(o->note_arg, s);
        free(s);
    }
}

/* --diff-snapshots: into the first free dir/N (created): a diff against
 * the VM's last snapshot, or a full one when there is none yet (or the
 * chain is at its depth cap). */
static int diff_snapshot_to(struct moat_vm *vm, const struct vmrun_opts *o)
{
    char sub[PATH_MAX], st[PATH_MAX], mem[PATH_MAX];
    const char *dir = o->snapdir;
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return -errno;
    for (unsigned n = 0;; n++) {
        if ((size_t)snprintf(sub, sizeof(sub), "%s/%u", dir, n) >= sizeof(sub))
            return -ENAMETOOLONG;
        if (mkdir(sub, 0700) == 0)
            break;
        if (errno != EEXIST || n >= 100000)
            return -errno;
    }
    if ((size_t)snprintf(st, sizeof(st), "%s/state", sub) >= sizeof(st) ||
        (size_t)snprintf(mem, sizeof(mem), "%s/memory", sub) >= sizeof(mem))
        return -ENAMETOOLONG;
    int r = moat_snapshot_diff(vm, st, mem);
    bool full = r == -ENODATA || r == -EMLINK || r == -ENOTSUP;
    if (full)
        r = moat_snapshot(vm, st, mem);
    if (r < 0) {
        /* Leave no numbered directory behind: a gap-free D/0, D/1, ... is
         * what restore follows. */
        unlink(mem);
        unlink(st);
        rmdir(sub);
    }
    else
        note(o, "%s snapshot in %s", full ? "full" : "diff", sub);
    return r;
}

/* Snapshot into snapdir/state and snapdir/memory. */
static int snapshot_to(struct moat_vm *vm, const struct vmrun_opts *o)
{
    char st[PATH_MAX], mem[PATH_MAX];
    if (o->diff_snapshots)
        return diff_snapshot_to(vm, o);
    if ((size_t)snprintf(st, sizeof(st), "%s/state", o->snapdir) >= sizeof(st) ||
        (size_t)snprintf(mem, sizeof(mem), "%s/memory", o->snapdir) >= sizeof(mem))
        return -ENAMETOOLONG;
    return moat_snapshot(vm, st, mem);
}

/* Tell the moat that started this one (moat create, start, fork) that the
 * control socket listens and the guest runs, with the CLOCK_MONOTONIC time
 * of the first KVM_RUN ("ready NS\n"), then close the pipe. A VM that
 * stops before it ran sends nothing: the reader gets EOF. */
static void notify_ready(struct moat_vm *vm, int fd, uint64_t start_ns)
{
    struct moat_timings t;
    if (moat_wait_running(vm, 2000) == 0 && moat_get_timings(vm, &t) == 0 && t.first_run >= 0) {
        char line[64];
        int n = snprintf(line, sizeof line, "ready %llu\n",
                         (unsigned long long)(start_ns + (uint64_t)t.first_run * 1000u));
        if (write(fd, line, (size_t)n) != n) { /* the reader gave up: nothing to do */ }
    }
    close(fd);
}

/* A snapshot signal on o->sig_fd: snapshot into o->snapdir, say how it
 * went, and on SIGUSR2 stop the VM. */
static void snapshot_signal(struct moat_vm *vm, const struct vmrun_opts *o)
{
    struct signalfd_siginfo si;
    if (read(o->sig_fd, &si, sizeof(si)) != sizeof(si))
        return;
    /* SIGUSR2 stops after the snapshot: pause first so the guest
     * cannot run (and print) between the snapshot and the stop. */
    if (si.ssi_signo == SIGUSR2)
        moat_pause(vm);
    uint64_t t0 = clock_mono_ns();
    int r = snapshot_to(vm, o);
    uint64_t t1 = clock_mono_ns();
    if (r < 0)
        note(o, "snapshot to %s failed: %s", o->snapdir, SBX_STRERROR(-r));
    else {
        struct moat_snapshot_stats ss = { .size = sizeof(ss) };
        moat_get_snapshot_stats(vm, &ss);
        note(o, "snapshot written to %s in %.3f ms (guest paused %.3f ms: pausing %.3f, "
             "state %.3f, memory %.3f; then flush %.3f; %llu pages looked at, %llu written, %llu KiB staged, prepared in %.3f%s%s)",
             o->snapdir, (double)(t1 - t0) / 1e6,
             (double)ss.paused_us / 1e3, (double)ss.pausing_us / 1e3, (double)ss.state_us / 1e3, (double)ss.memory_us / 1e3,
             (double)ss.sync_us / 1e3, (unsigned long long)ss.candidate_pages,
             (unsigned long long)ss.data_pages, (unsigned long long)(ss.staged_bytes >> 10),
             (double)ss.prepare_us / 1e3,
             ss.uring ? ", io_uring" : "",
             ss.direct ? ", O_DIRECT" : "");
    }
    if (si.ssi_signo == SIGUSR2 && r == 0)
        moat_stop(vm);
}

/* Wait until the VM exits (false) or the deadline passes (true), serving
 * control clients and snapshot signals meanwhile. */
static bool wait_vm(struct moat_vm *vm, struct ctl_server *ctl, const struct vmrun_opts *o)
{
    uint64_t deadline = o->timeout > 0 ? o->start_ns + (uint64_t)(o->timeout * 1e9) : 0;
    for (;;) {
        int wait_ms = -1;
        if (deadline) {
            uint64_t now = clock_mono_ns();
            if (now >= deadline)
                return true;
            wait_ms = (int)((deadline - now) / 1000000) + 1;
        }
        struct pollfd p[3] = { { .fd = moat_exit_fd(vm), .events = POLLIN }, { .fd = o->sig_fd, .events = POLLIN },
                               { .fd = ctl->fd, .events = POLLIN } };
        int n = poll(p, 3, wait_ms);
        if (n < 0 && errno != EINTR)
            return false;
        if (n > 0 && p[0].revents)
            return false;
        if (n > 0 && p[2].revents) {
            ctl_server_serve(ctl, vm);     /* a stop shows up on the exit fd */
            continue;
        }
        if (n > 0 && o->sig_fd >= 0 && p[1].revents)
            snapshot_signal(vm, o);
    }
}

int vmrun(struct moat_vm *vm, const struct vmrun_opts *o, struct vmrun *r, struct sbx_err *err)
{
    *r = (struct vmrun){ .end = VMRUN_FAILED, .ready_fd = o->ready_fd, .ctl = { .fd = -1, .start_ns = o->start_ns } };
    int rc;
    if (o->control && (rc = ctl_server_open(&r->ctl, o->control, err)) < 0)
        return rc;
    rc = moat_start(vm);
    if (rc < 0)
        return sandbox_err(err, rc, "starting the VM: %s", SBX_STRERROR(-rc));
    /* The moat waiting for this one is told first (the socket listens
     * already; a client waits in its backlog), then this thread takes its
     * own filter, before it accepts a control client or reads a snapshot
     * signal (the VM's threads have theirs: moat_start). */
    if (r->ready_fd >= 0) {
        notify_ready(vm, r->ready_fd, o->start_ns);
        r->ready_fd = -1;
    }
    if (o->seccomp_flags && !sc_exit_unfiltered() &&
        (rc = sc_install(SC_MAIN, (o->seccomp_flags & MOAT_F_SECCOMP_AUDIT) ? SC_AUDIT : SC_KILL)) < 0) {
        moat_stop(vm);
        moat_wait(vm, -1, &r->exit);
        return sandbox_err(err, rc, "seccomp: %s", SBX_STRERROR(-rc));
    }
    bool timed_out = wait_vm(vm, &r->ctl, o);
    if (timed_out)
        moat_stop(vm);
    moat_wait(vm, -1, &r->exit);
    r->end = timed_out ? VMRUN_TIMEOUT : VMRUN_EXITED;
    return 0;
}

void vmrun_close(struct moat_vm *vm, struct vmrun *r)
{
    moat_destroy(vm);
    ctl_server_close(&r->ctl);
}

int vmrun_snapshot_dir(const char *dir, char *state, char *mem, struct sbx_err *err)
{
    const char *sd = dir;
    char last[PATH_MAX];
    if (strlen(sd) > PATH_MAX - 32)
        return sandbox_err(err, -ENAMETOOLONG, "snapshot directory path too long");
    snprintf(state, PATH_MAX, "%.4000s/state", sd);
    if (access(state, F_OK) < 0) {
        /* The highest N with a state file (a failed snapshot may have
         * left a gap). */
        unsigned misses = 0;
        for (unsigned n = 0; n < 100000 && misses < 64; n++) {
            snprintf(state, PATH_MAX, "%.4000s/%u/state", dir, n);
            if (access(state, F_OK) < 0) {
                misses++;
                continue;
            }
            misses = 0;
            snprintf(last, sizeof(last), "%.4000s/%u", dir, n);
            sd = last;
        }
    }
    snprintf(state, PATH_MAX, "%.4000s/state", sd);
    snprintf(mem, PATH_MAX, "%.4000s/memory", sd);
    return 0;
}
