/* The run loop of a VM process, shared by `moat run` and `moat restore`
 * (vmm/cli/cli.c): start the VM, tell the moat waiting on --ready-fd,
 * take the main thread's seccomp filter, then wait for the VM to end while
 * serving the --control socket (ctl_server.h) and snapshot signals read
 * from a signalfd the caller made (SIGUSR1: snapshot and go on; SIGUSR2:
 * snapshot and stop). The signal handlers, the terminal and the exit code
 * stay the caller's. Nothing is printed: the lines to show as the loop
 * goes reach o->note, what goes wrong comes back in a struct sbx_err. */
#ifndef MOAT_VMRUN_H
#define MOAT_VMRUN_H

#include <stdbool.h>
#include <stdint.h>

#include "include/moat.h"
#include "vmm/api/control/ctl_server.h"
#include "vmm/sandbox/sandbox.h"

struct vmrun_opts {
    const char *control;        /* the control socket's path, or NULL */
    const char *snapdir;        /* where sig_fd's signals snapshot to (DIR/state, DIR/memory) */
    bool diff_snapshots;        /* ... or into numbered diffs DIR/0, DIR/1 ... */
    double timeout;             /* seconds after start_ns; 0: none */
    uint64_t start_ns;          /* the process's start (CLOCK_MONOTONIC ns): the deadline, the
                                 * ready line and the control socket's uptime count from it */
    int sig_fd;                 /* a signalfd of SIGUSR1 and SIGUSR2, or -1 */
    int ready_fd;               /* told "ready NS\n" once the guest runs, then closed; or -1 */
    uint32_t seccomp_flags;     /* MOAT_F_SECCOMP[_AUDIT]: this thread's filter once the VM runs */
    /* A line to show ("full snapshot in D/1", "snapshot written to ..."),
     * as it happens; NULL: none shown. */
    void (*note)(void *arg, const char *line);
    void *note_arg;
};

enum vmrun_end {
    VMRUN_FAILED,               /* vmrun returned -errno */
    VMRUN_EXITED,               /* the VM ended: exit says how */
    VMRUN_TIMEOUT,              /* the deadline passed; the VM was stopped */
};

/* What vmrun leaves for the caller, and for vmrun_close. */
struct vmrun {
    enum vmrun_end end;
    struct moat_exit exit;
    int ready_fd;               /* o->ready_fd when it was not told (the caller closes it: EOF), else -1 */
    struct ctl_server ctl;
};

/* Run vm until it ends or the deadline passes (r->end). 0, or -errno with
 * why in err (the control socket, starting the VM, the seccomp filter). */
int vmrun(struct moat_vm *vm, const struct vmrun_opts *o, struct vmrun *r, struct sbx_err *err);
/* After vmrun: destroy vm, then close the control socket. */
void vmrun_close(struct moat_vm *vm, struct vmrun *r);

/* restore's DIR: into state and mem (PATH_MAX bytes each) DIR/state and
 * DIR/memory, or those of the last DIR/N of a --diff-snapshots chain
 * (DIR/0, DIR/1 ...; a gap of up to 64 is stepped over). 0, or
 * -ENAMETOOLONG with why. */
int vmrun_snapshot_dir(const char *dir, char *state, char *mem, struct sbx_err *err);

#endif
