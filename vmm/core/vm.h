/* Internal VM state: one struct moat_vm per VM, no globals. */
#ifndef MOAT_VM_H
#define MOAT_VM_H

#include <linux/kvm.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "boot/boot.h"
#include "devices/legacy/i8042.h"
#include "devices/legacy/moatdev.h"
#include "devices/legacy/serial.h"
#include "include/moat.h"
#include "vmm/base/bus.h"
#include "vmm/base/clock.h"
#include "vmm/core/console.h"
#include "vmm/base/gmem.h"
#include "vmm/core/kvm.h"
#include "vmm/core/vmhooks.h"
#include "vmm/base/log.h"
#include "vmm/transport/virtio_mmio_kvm.h"

struct moat_vm;
struct virtio_kind;
struct devopts;

/* One virtio device of a VM: its kind (devices/virtio/virtio_kind.h, listed
 * in vmm/core/devtab.c), its transport, the options that made it (its
 * snapshot record) and the kind's own record. */
struct vm_dev {
    const struct virtio_kind *kind;
    struct virtio_mmio_kvm *t;    /* owns the device instance */
    char *id;                     /* unique among the VM's devices of its kind */
    struct devopts *opts;
    void *priv;                   /* the kind's record, freed by the kind */
};

struct vcpu {
    struct moat_vm *vm;
    unsigned index;
    int fd;
    struct kvm_run *run;
    size_t run_size;
    pthread_t thread;
    bool thread_started;
    _Atomic bool in_run;          /* inside (or about to enter) KVM_RUN */
};

struct moat_vm {
    struct kvm_host host;         /* /dev/kvm fd and capabilities */
    int vm_fd;
    bool pvm_compat;              /* PVM workarounds applied */

    /* guest RAM */
    uint8_t *ram;
    uint64_t ram_size;            /* bytes requested */
    size_t ram_map_size;
    struct gmem mem;
    /* The upper layers' part in this VM's life (vmm/core/vmhooks.h):
     * snapshot state (vmm/snapshot/snapvm.h) and the agent's post-restore
     * fix-up (vmm/agent/fixup.h) live in their hooks' records. */
    struct vm_hook hooks[VM_MAX_HOOKS];
    unsigned nhooks;

    struct bus pio, mmio;
    struct serial uart;
    struct moatdev ctl;
    struct i8042 kbd;
    /* The virtio devices, one per virtio-mmio slot (slot = index): the
     * table that pause, resume, snapshot, restore, fork and teardown
     * iterate (vmm/core/devtab.h). */
    struct vm_dev dev[VIRTIO_MMIO_KVM_MAX_SLOTS];
    unsigned ndev;
    unsigned ncpus;
    struct vcpu *vcpus;
    struct boot_info boot;
    char *cmdline;                /* as given to the guest */

    int console_in;
    struct log_limit guest_rl;    /* this VM's guest-triggered messages (log_guest) */
    struct console_out con;       /* UART output: buffer and writer thread (vmm/core/console.h) */
    uint32_t flags;
    int kick_signal;
    int seccomp;                  /* enum sc_mode, from MOAT_F_SECCOMP* (vmm/base/scfilter.h) */
    struct sc_runner *runner;     /* device start/stop/reset under seccomp, or NULL */
    pthread_t console_thread;
    bool console_started;
    int stop_efd;                 /* wakes the console thread on stop */
    int exit_efd;                 /* readable once the VM has stopped */

    /* exit state */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    _Atomic bool stopping;
    _Atomic bool pause_req;       /* vCPUs park at the top of their loop */
    bool paused;                  /* every vCPU parked (moat_pause returned) */
    bool snapshotting;            /* a moat_snapshot(_diff) is running (under lock) */
    unsigned parked_vcpus;
    bool started, exited;
    struct moat_exit exit;
    int guest_status;             /* last status written to the control port, -1 */
    unsigned running_vcpus;

    /* timings, CLOCK_MONOTONIC ns; 0 = not yet */
    _Atomic uint64_t t_kvm_ready, t_first_run, t_init, t_cmd_done, t_exit;
};

/* Stop the VM with a reason (first caller wins) and kick every vCPU. */
void vm_request_exit(struct moat_vm *vm, enum moat_exit_reason reason, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* vCPU setup and the run loop (vmm/core/vcpu.c). */
int vcpu_create(struct moat_vm *vm, struct vcpu *v, unsigned index);
int vcpu_setup(struct moat_vm *vm, struct vcpu *v);
void *vcpu_thread(void *arg);
void vcpu_destroy(struct vcpu *v);


/* Creation stages shared by moat_create and moat_restore (vmm/core/vm.c). */
int vm_alloc(struct moat_vm **out, unsigned ncpus, uint64_t ram_size, int console_in,
             int console_out, uint32_t flags, int kick_signal, struct moat_error *err);
int vm_setup_kvm(struct moat_vm *vm, int mem_fd, struct moat_error *err);
int vm_setup_rest(struct moat_vm *vm, bool boot, struct moat_error *err);
void vm_free(struct moat_vm *vm);
/* moat_create's work: attach (unless NULL) registers the upper layers'
 * hooks once the VM exists, before its memory is set up (0 or -errno;
 * whatever it registered is torn down with the VM). The public
 * moat_create is vmm/snapshot/snapvm.c's, which attaches the snapshot
 * state. */
int vm_create(const struct moat_config *cfg, struct moat_vm **out, struct moat_error *err,
              int (*attach)(struct moat_vm *vm, void *arg), void *arg);
/* Fill *err (if not NULL) and return code. */
int seterr(struct moat_error *err, int is_config, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
