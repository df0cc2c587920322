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
 */
#ifndef MOAT_MOATDEV_H
#define MOAT_MOATDEV_H

#include <pthread.h>
#include <stdint.h>

#include "vmm/bus.h"

#define MOATDEV_MAGIC       0x54414F4Du
#define MOATDEV_PORT_STATUS 0
#define MOATDEV_PORT_EVENT  1
#define MOATDEV_PORT_SCRATCH 4
#define MOATDEV_PORT_MAGIC  8
#define MOATDEV_EV_INIT     1
#define MOATDEV_EV_CMD      2

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

/* i8042 keyboard controller: just enough for Linux's probe and for reset
 * (command 0xFE on port 0x64 calls reset). Registered at 0x60 and 0x64. */
struct i8042_ops { void (*reset)(void *opaque); };
struct i8042 { const struct i8042_ops *ops; void *opaque; uint8_t cmd; };
void i8042_init(struct i8042 *k, const struct i8042_ops *ops, void *opaque);
extern const struct bus_ops i8042_data_ops;    /* port 0x60, len 1 */
extern const struct bus_ops i8042_cmd_ops;     /* port 0x64, len 1 */

#endif
