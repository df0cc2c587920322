/* moat's virtio-mmio transport on KVM: a struct virtio_mmio register model
 * (devices/virtio/virtio_mmio.h) in a 4 KiB slot at LAYOUT_VIRTIO_MMIO + slot *
 * 4 KiB, interrupt line GSI LAYOUT_VIRTIO_IRQ0 + slot, in front of any
 * transport-independent device (devices/virtio/virtio_dev.h).
 *
 *  - QueueNotify: one KVM ioeventfd per queue (datamatch = queue index at
 *    the QueueNotify address), so a kick wakes the device's I/O thread
 *    without a vCPU exit to userspace. Without ioeventfd the write reaches
 *    the bus (MMIO exit) and the register model signals the same eventfd.
 *  - interrupts: the device publishes used entries and calls notify_used();
 *    the transport sets InterruptStatus (VRING) and, on its rising edge,
 *    pulses the GSI through a KVM irqfd (KVM_IRQ_LINE if irqfd is missing).
 *    The pin is edge-triggered (boot/'s MP table).
 *  - DRIVER_OK starts the device with the negotiated features and the
 *    transport's queues; a driver reset (status 0) stops it (drained) first.
 *    NEEDS_RESET from the device raises a config interrupt.
 * The Linux guest finds the device through virtio_mmio_kvm_cmdline(). */
#ifndef MOAT_VIRTIO_MMIO_KVM_H
#define MOAT_VIRTIO_MMIO_KVM_H

#include <stddef.h>
#include <stdint.h>

#include "devices/virtio/virtio_dev.h"
#include "vmm/base/bus.h"
#include "vmm/base/gmem.h"

/* GSIs 5..23 are free for virtio (0-4: PIT, keyboard, cascade, COM2, COM1). */
#define VIRTIO_MMIO_KVM_MAX_SLOTS 19

struct virtio_mmio_kvm;

/* Create the transport for dev in slot (0-based), register it on mmio and
 * wire ioeventfds/irqfd on vm_fd. Takes ownership of dev (destroyed with
 * the transport, also on failure). 0 or -errno. */
int virtio_mmio_kvm_create(struct virtio_mmio_kvm **out, int vm_fd, struct bus *mmio,
                           const struct gmem *mem, unsigned slot,
                           const struct virtio_dev_ops *ops, void *dev);

/* Seccomp: run the device's start, stop and reset on runner (NULL: the
 * caller's thread) and have its threads install their filters in mode
 * (enum sc_mode, vmm/base/scfilter.h). Before the guest can start it. */
struct sc_runner;
void virtio_mmio_kvm_set_seccomp(struct virtio_mmio_kvm *t, struct sc_runner *runner, int mode);

/* Quiesce for pause/snapshot/teardown: stop the device (drained: every
 * popped request completed, published and signalled; no guest memory is
 * touched afterwards). Idempotent. virtio_mmio_kvm_resume() restarts a
 * device that was live (DRIVER_OK) when stopped; requests made available
 * meanwhile are picked up without a new kick. 0 or -errno. */
void virtio_mmio_kvm_stop(struct virtio_mmio_kvm *t);
int virtio_mmio_kvm_resume(struct virtio_mmio_kvm *t);

/* Snapshots. The device must be stopped (virtio_mmio_kvm_stop, as
 * moat_pause does): otherwise -EBUSY. save copies the transport and queue
 * state; load checks and installs it (virtio_mmio_load: -EINVAL with *why)
 * and marks a live (DRIVER_OK, not FAILED) device as quiesced, so that
 * virtio_mmio_kvm_resume() starts it from the restored queues. */
struct virtio_mmio_state;
int virtio_mmio_kvm_save(struct virtio_mmio_kvm *t, struct virtio_mmio_state *s);
int virtio_mmio_kvm_load(struct virtio_mmio_kvm *t, const struct virtio_mmio_state *s, const char **why);
uint32_t virtio_mmio_kvm_device_id(const struct virtio_mmio_kvm *t);

/* Stop, unhook from KVM, destroy the device. NULL is a no-op. The bus entry
 * stays (the bus is freed with the VM): call only when no vCPU runs. */
void virtio_mmio_kvm_destroy(struct virtio_mmio_kvm *t);

/* Whether kicks go through ioeventfd (1) or MMIO exits (0). */
int virtio_mmio_kvm_uses_ioeventfd(const struct virtio_mmio_kvm *t);

/* Slot geometry, and the kernel parameter that announces slot:
 * "virtio_mmio.device=4K@0xd0001000:5". Returns the length or -ENOSPC. */
uint64_t virtio_mmio_kvm_slot_base(unsigned slot);
unsigned virtio_mmio_kvm_slot_gsi(unsigned slot);
int virtio_mmio_kvm_cmdline(unsigned slot, char *buf, size_t len);

#endif
