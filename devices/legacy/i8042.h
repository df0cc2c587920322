/* A minimal i8042 keyboard controller (ports 0x60 and 0x64): Linux's
 * probe and reboot=k reset. Docs: docs/devices.md ("i8042"). Pure. */
#ifndef MOAT_I8042_H
#define MOAT_I8042_H

#include <stdint.h>

#include "vmm/base/bus.h"

/* i8042 keyboard controller: just enough for Linux's probe and for reset
 * (command 0xFE on port 0x64 calls reset). Registered at 0x60 and 0x64.
 *
 * Port 0x64 reads I8042_STATUS: input buffer empty (IBF=0), so Linux's
 * reboot=k kb_wait() loop ends at once and its 0xFE write follows; output
 * buffer "full" (OBF=1) with port 0x60 reading 0, so Linux's i8042 driver
 * gives up in its first flush ("i8042: No controller found", about 1 ms)
 * instead of waiting 0.5 s per unanswered command. There is no keyboard.
 * Every write of 0xFE to port 0x64 calls ops->reset once (the VMM's
 * callback should be idempotent: Linux writes 0xFE up to 10 times);
 * other commands are recorded in cmd and otherwise ignored, as are writes
 * to port 0x60. The callback runs on the vCPU thread, without locks. */
#define I8042_STATUS_OBF  0x01
#define I8042_STATUS_IBF  0x02
#define I8042_STATUS_SYS  0x04
#define I8042_STATUS      (I8042_STATUS_OBF | I8042_STATUS_SYS)
#define I8042_CMD_RESET   0xFE
struct i8042_ops { void (*reset)(void *opaque); };
struct i8042 { const struct i8042_ops *ops; void *opaque; uint8_t cmd; /* last command, atomic */ };
void i8042_init(struct i8042 *k, const struct i8042_ops *ops, void *opaque);
extern const struct bus_ops i8042_data_ops;    /* port 0x60, len 1 */
extern const struct bus_ops i8042_cmd_ops;     /* port 0x64, len 1 */

#endif
