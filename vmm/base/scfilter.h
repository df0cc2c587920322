/* Per-thread seccomp filters (libseccomp): one allow-list per thread kind,
 * each installed by the thread on itself (no TSYNC: other threads, the
 * embedder's among them, are never touched). docs/security.md, "Seccomp",
 * lists what each kind allows and why; `moat seccomp --print` prints the
 * lists and their counts from the tables here.
 *
 * A thread created by a filtered thread inherits its filter; its own is
 * added on top (the kernel applies the strictest answer). Device threads
 * are therefore created by the VM's runner thread (struct sc_runner),
 * whose list holds every device list, never by a vCPU. */
#ifndef MOAT_SCFILTER_H
#define MOAT_SCFILTER_H

#include <stdbool.h>
#include <stddef.h>

/* The same numbers as MOAT_SECCOMP_* in moat.h. */
enum sc_mode { SC_OFF = 0, SC_KILL = 1, SC_AUDIT = 2 };

enum sc_kind {
    SC_VCPU,        /* KVM_RUN and the exits it handles */
    SC_VMM,         /* the VM's runner: device start/stop/reset */
    SC_BLK,         /* a virtio-blk drive's I/O thread (io_uring or pool) */
    SC_VSOCK,       /* the virtio-vsock device's event loop */
    SC_NET,         /* a virtio-net device's event loop */
    SC_RNG,         /* the virtio-rng device's event loop */
    SC_CONSOLE,     /* console reader (stdin) and writer threads */
    SC_MAIN,        /* the CLI's main thread once the VM runs: exit fd,
                     * snapshot signals and the control socket */
    SC_VHOST,       /* `moat device`: the vhost-user server thread */
    SC_API,         /* `moat vmm`: the HTTP API thread (moves bytes, hands
                     * each request to the main thread) */
    SC_FCMAIN,      /* `moat vmm`: the main thread once the VM has run
                     * (the requests, signals, the VM's end, metrics) */
    SC_CONNECT,     /* the vsock device's connector: guest-initiated
                     * connections to PATH_<port>, for the vsock thread */
    SC_KIND_N
};

/* Exit status of a process killed by a filter (kill mode): the SIGSYS
 * handler writes one line naming the thread kind and the system call to
 * stderr and calls _exit(SC_EXIT_CODE). */
#define SC_EXIT_CODE 159

const char *sc_kind_name(enum sc_kind k);
/* -1 if no kind has that name. */
int sc_kind_from_name(const char *name);

/* Install kind k's filter on the calling thread: SC_KILL traps a call off
 * the list (SIGSYS: the line, then _exit(SC_EXIT_CODE)); SC_AUDIT lets it
 * through and has the kernel log it (audit type 1326, SECCOMP_RET_LOG);
 * SC_OFF does nothing. The thread is also named "moat-KIND" (prctl), which
 * is the comm in those kernel log lines. 0 or -errno.
 *
 * Test hook: when the environment variable MOAT_SECCOMP_TEST_VIOLATE names
 * this kind (read once per install), the thread calls getppid(2), which no
 * list allows, right after its filter is in place (tests/integration). */
int sc_install(enum sc_kind k, enum sc_mode mode);
/* The same, the thread named `name` instead (at most 15 bytes kept; NULL:
 * "moat-KIND"); with SC_OFF the thread is only named. Threads whose names
 * others look for use it (vCPUs: "fc_vcpu N" under moat vmm; its API
 * thread "fc_api"): named by themselves, before the filter, so the name is
 * never raced by another thread's rename. */
int sc_install_named(enum sc_kind k, enum sc_mode mode, const char *name);
/* The name the calling thread got from sc_install/sc_install_named, or
 * NULL where it installed no filter: for log lines written from filtered
 * threads, whose lists have no prctl(PR_GET_NAME) (pthread_getname_np). */
const char *sc_thread_name(void);

/* The number of distinct system calls kind k allows (in this build: the
 * sanitizer build adds what its runtime needs, sc_san_extra). */
int sc_count(enum sc_kind k);
/* The names of kind k's system calls, in table order; *n set to their
 * number. Returns a static array (valid for the process's life). */
const char *const *sc_names(enum sc_kind k, size_t *n);
/* What the sanitizer build adds to every list (0 in a normal build). */
int sc_san_extra(void);
/* True in the sanitizer build: its leak check runs at exit on the thread
 * that ends the process and creates a process to ptrace the others, which
 * no list allows; so there the thread that ends the process (the CLI's
 * main thread in moat run/restore) stays unfiltered. docs/security.md. */
bool sc_exit_unfiltered(void);

/* A thread that runs calls for others (device start/stop/reset), under
 * the SC_VMM filter, so that the threads it creates inherit that list and
 * not a vCPU's. NULL (seccomp off) runs the call on the caller's thread. */
struct sc_runner;
/* Start the runner (nothing with SC_OFF: *out NULL). It installs its
 * filter on its own while the caller goes on; sc_runner_ready waits for
 * that and returns its result (0, or the -errno of the install). */
int sc_runner_start(struct sc_runner **out, enum sc_mode mode);
int sc_runner_ready(struct sc_runner *r);
/* Run fn(arg) on the runner and return its result; a call from the
 * runner itself, or with r NULL, runs directly. Serialised. A runner
 * whose filter failed runs nothing: its install's -errno. */
int sc_runner_call(struct sc_runner *r, int (*fn)(void *), void *arg);
void sc_runner_stop(struct sc_runner *r);

#endif
