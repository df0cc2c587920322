/* An i8042 keyboard controller (ports 0x60 and 0x64) with a keyboard on its
 * first port and no mouse port: Linux's i8042 driver registers it and its
 * atkbd driver binds the keyboard, the host can press Ctrl+Alt+Del
 * (i8042_ctrl_alt_del), and command 0xFE resets. Docs: docs/devices.md
 * ("i8042"). The state machine is pure (no KVM headers).
 *
 * Locking: each instance has its own mutex; the bus ops and
 * i8042_ctrl_alt_del take it, so a vCPU thread and the API thread may call
 * in concurrently. The callbacks run AFTER it is dropped.
 *
 * The state machine itself (i8042_read / i8042_write / i8042_push_keys)
 * does not lock and calls no callback: it returns what the caller must do
 * (I8042_ACT_* bits). Unit tests and the fuzz target drive it directly. */
#ifndef MOAT_I8042_H
#define MOAT_I8042_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "vmm/base/bus.h"

/* Status register (read at port 0x64). */
#define I8042_STR_OBF     0x01   /* output buffer full: port 0x60 has a byte */
#define I8042_STR_IBF     0x02   /* input buffer full: never (writes are taken at once) */
#define I8042_STR_SYS     0x04   /* system flag: self-test passed */
#define I8042_STR_CMDDAT  0x08   /* the last write went to port 0x64 */
#define I8042_STR_KEYLOCK 0x10   /* 1: keyboard not inhibited (no key lock) */
#define I8042_STR_AUXDATA 0x20   /* the byte came from the mouse port: never */

/* Controller configuration byte (CTR, "command byte"). */
#define I8042_CTR_KBDINT  0x01   /* IRQ 1 for keyboard bytes */
#define I8042_CTR_AUXINT  0x02
#define I8042_CTR_SYS     0x04
#define I8042_CTR_KBDDIS  0x10
#define I8042_CTR_AUXDIS  0x20
#define I8042_CTR_XLATE   0x40   /* translate keyboard bytes to scan code set 1 */
/* At power-on: keyboard interrupt on, system flag, no translation (so
 * Linux uses the keyboard "direct", scan code set 2, as on Firecracker). */
#define I8042_CTR_DEFAULT (I8042_CTR_KBDINT | I8042_CTR_SYS)

/* Controller commands (port 0x64) that moat answers. */
#define I8042_CMD_READ_CTR   0x20   /* 0x21..0x3f read internal RAM: 0 */
#define I8042_CMD_WRITE_CTR  0x60   /* + 1 byte; 0x61..0x7f write RAM: ignored */
#define I8042_CMD_AUX_DIS    0xa7
#define I8042_CMD_AUX_EN     0xa8
#define I8042_CMD_AUX_TEST   0xa9   /* -> I8042_AUX_TEST_FAIL: no mouse port */
#define I8042_CMD_SELF_TEST  0xaa   /* -> 0x55 */
#define I8042_CMD_KBD_TEST   0xab   /* -> 0x00 */
#define I8042_CMD_KBD_DIS    0xad
#define I8042_CMD_KBD_EN     0xae
#define I8042_CMD_READ_OUTP  0xd0
#define I8042_CMD_WRITE_OUTP 0xd1   /* + 1 byte: stored (no reset line) */
#define I8042_CMD_WRITE_KBD  0xd2   /* + 1 byte: back as if from the keyboard */
#define I8042_CMD_WRITE_AUX  0xd3   /* + 1 byte: back, not marked as mouse data */
#define I8042_CMD_TO_AUX     0xd4   /* + 1 byte: for the mouse, dropped */
#define I8042_CMD_RESET      0xfe
#define I8042_SELF_TEST_OK   0x55
#define I8042_AUX_TEST_FAIL  0x01   /* "clock line stuck low" */

/* Keyboard (bytes written to port 0x60 outside a controller command). */
#define I8042_KBD_ACK        0xfa
#define I8042_KBD_BAT_OK     0xaa

#define I8042_BUF 16                /* output queue, bytes (Firecracker's size) */

/* What the caller must do after a call into the state machine. */
#define I8042_ACT_IRQ   0x1         /* pulse IRQ 1 (edge) */
#define I8042_ACT_RESET 0x2         /* the guest asked for a system reset */

struct i8042_ops {
    void (*reset)(void *opaque);    /* 0xFE on port 0x64; must be idempotent */
    void (*irq)(void *opaque);      /* pulse IRQ 1 */
};

struct i8042 {
    pthread_mutex_t lock;
    const struct i8042_ops *ops;
    void *opaque;
    uint8_t ctr;          /* controller configuration byte */
    uint8_t outp;         /* output port (stored only) */
    uint8_t cmd;          /* last command written to port 0x64 */
    uint8_t param_cmd;    /* controller command waiting for its byte at 0x60, 0: none */
    uint8_t kbd_cmd;      /* keyboard command waiting for its parameter, 0: none */
    bool last_was_cmd;    /* I8042_STR_CMDDAT */
    bool head_is_resp;    /* buf[head] answers a controller command (no IRQ) */
    uint8_t buf[I8042_BUF];
    uint8_t head, len;    /* output queue: buf[head], ... (len bytes) */
    uint64_t resets;      /* 0xFE writes */
    uint64_t keys_sent;   /* i8042_ctrl_alt_del calls that queued */
};

void i8042_init(struct i8042 *k, const struct i8042_ops *ops, void *opaque);
void i8042_destroy(struct i8042 *k);

/* The pure state machine (no lock, no callbacks). port: 0 = 0x60 (data),
 * 4 = 0x64 (status / command). Reading port 0x60 with an empty queue
 * gives 0 and changes nothing. */
uint8_t i8042_status(const struct i8042 *k);
unsigned i8042_read(struct i8042 *k, unsigned port, uint8_t *val);
unsigned i8042_write(struct i8042 *k, unsigned port, uint8_t val);
/* Queue Ctrl+Alt+Del, pressed then released: scan code set 2
 * (14 11 E0 71, E0 F0 71 F0 11 F0 14), or set 1 while the guest has
 * translation on (CTR bit 6: 1D 38 E0 53, E0 D3 B8 9D). Returns I8042_ACT_*
 * (IRQ when the guest has the keyboard interrupt on and the queue was
 * empty), or -ENOBUFS if the queue lacks room for the whole sequence. */
int i8042_push_ctrl_alt_del(struct i8042 *k);

/* What a snapshot keeps of an instance (vmm/snapshot: section
 * SNAP_DEV_I8042): a fixed layout with explicit padding; the counters are
 * not kept. i8042_save and i8042_load take the instance's lock;
 * i8042_state_check is pure: 0 for a state the model can be in, else
 * -EINVAL with why (a state file is untrusted input). Load only a checked
 * state. */
struct i8042_state {
    uint8_t ctr, outp, cmd, param_cmd, kbd_cmd;
    uint8_t last_was_cmd, head_is_resp;     /* 0 or 1 */
    uint8_t head, len;                      /* head < I8042_BUF, len <= I8042_BUF */
    uint8_t pad[7];
    uint8_t buf[I8042_BUF];
};
void i8042_save(struct i8042 *k, struct i8042_state *st);
int i8042_state_check(const struct i8042_state *st, const char **why);
void i8042_load(struct i8042 *k, const struct i8042_state *st);

/* Locked, with callbacks: what the VMM calls. */
int i8042_ctrl_alt_del(struct i8042 *k);
extern const struct bus_ops i8042_data_ops;    /* port 0x60, len 1 */
extern const struct bus_ops i8042_cmd_ops;     /* port 0x64, len 1 */

#endif
