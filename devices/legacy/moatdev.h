/* The moat control device: how /init and test guests talk to moat.
 * Ports PORT_MOATDEV + 0..15 and one MMIO page at LAYOUT_MOATDEV_MMIO.
 * Documented in docs/boot.md ("The moat control device").
 *
 *   port +0  (write, 8/16/32 bit) exit status: low 8 bits recorded as the
 *            guest command's exit status (last write wins)
 *   port +1  (write, 8 bit)       event: 1 = init reached, 2 = command started
 *   port +4  (read/write, 32 bit) scratch register
 *   port +8  (read, 32 bit)       magic 0x54414F4D ("MOAT")
 *   mmio +0  (read, 32 bit)       magic 0x54414F4D
 *   mmio +8  (read/write, 64 bit) scratch register (separate from the port one)
 *
 * Registers are little-endian byte lanes: a naturally aligned access of
 * 1, 2 or 4 bytes (ports) or 1, 2, 4 or 8 bytes (MMIO) reads or writes the
 * bytes it covers (e.g. a 16-bit read of port +6 gives scratch bits 31:16).
 * Any other access reads zero and writes are ignored; unassigned bytes
 * read zero. The exit status port takes a write of any width at +0 and
 * records its low byte; the event port takes 8-bit writes at +1 and passes
 * every value on (the VMM decides what it knows). ops callbacks are called
 * without the device lock held (they may be NULL); the lock only guards
 * the scratch registers. Docs: docs/devices.md ("Legacy devices").
 */
#ifndef MOAT_MOATDEV_H
#define MOAT_MOATDEV_H

#include <pthread.h>
#include <stdint.h>

#include "vmm/base/bus.h"

#define MOATDEV_MAGIC       0x54414F4Du
#define MOATDEV_PORT_STATUS 0
#define MOATDEV_PORT_EVENT  1
#define MOATDEV_PORT_SCRATCH 4
#define MOATDEV_PORT_MAGIC  8
#define MOATDEV_EV_INIT     1
#define MOATDEV_EV_CMD      2
#define MOATDEV_PIO_LEN     16
#define MOATDEV_MMIO_LEN    0x1000
#define MOATDEV_MMIO_MAGIC  0
#define MOATDEV_MMIO_SCRATCH 8

struct moatdev_ops {
    void (*exit_status)(void *opaque, uint8_t status);
    void (*event)(void *opaque, uint8_t ev);
};

struct moatdev {
    pthread_mutex_t lock;
    const struct moatdev_ops *ops;
    void *opaque;
    uint32_t pio_scratch;
    uint64_t mmio_scratch;
};

void moatdev_init(struct moatdev *d, const struct moatdev_ops *ops, void *opaque);
void moatdev_destroy(struct moatdev *d);
extern const struct bus_ops moatdev_pio_ops;   /* 16 ports */
extern const struct bus_ops moatdev_mmio_ops;  /* 4 KiB */

/* What a snapshot keeps of an instance (vmm/snapshot: section
 * SNAP_DEV_MOATDEV, docs/snapshot-format.md): the scratch registers, a
 * fixed layout of 16 bytes with explicit padding. moatdev_save and
 * moatdev_load take the instance's lock; moatdev_state_check is pure: 0,
 * or -EINVAL with why (a state file is untrusted input). Load only a
 * checked state. */
struct moatdev_state {
    uint32_t pio_scratch;
    uint32_t pad;
    uint64_t mmio_scratch;
};
void moatdev_save(struct moatdev *d, struct moatdev_state *st);
int moatdev_state_check(const struct moatdev_state *st, const char **why);
void moatdev_load(struct moatdev *d, const struct moatdev_state *st);

#endif
