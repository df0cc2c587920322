/* 16550A UART (8250 family) as a pure state machine: register reads and
 * writes in, bytes and IRQ levels out through callbacks. No KVM headers.
 * The model and its interrupt behaviour are described in docs/devices.md
 * ("Legacy devices").
 *
 * Locking: each instance has its own mutex; every entry point below takes
 * it, so vCPU threads and a host input thread may call in concurrently.
 * The callbacks in serial_ops are invoked WITH THAT LOCK HELD: they must
 * not call back into the same struct serial (that would deadlock), and
 * should be quick (tx may write to a host fd; set_irq does one ioctl). */
#ifndef MOAT_SERIAL_H
#define MOAT_SERIAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "vmm/base/bus.h"

#define SERIAL_FIFO 64

/* Register offsets (DLAB = LCR bit 7 selects DLL/DLM at 0/1). */
#define SERIAL_RBR 0   /* read, DLAB=0 */
#define SERIAL_THR 0   /* write, DLAB=0 */
#define SERIAL_DLL 0   /* DLAB=1 */
#define SERIAL_IER 1   /* DLAB=0 */
#define SERIAL_DLM 1   /* DLAB=1 */
#define SERIAL_IIR 2   /* read */
#define SERIAL_FCR 2   /* write */
#define SERIAL_LCR 3
#define SERIAL_MCR 4
#define SERIAL_LSR 5
#define SERIAL_MSR 6
#define SERIAL_SCR 7

#define SERIAL_IER_ERBFI 0x01   /* received data available */
#define SERIAL_IER_ETBEI 0x02   /* THR empty */
#define SERIAL_IER_ELSI  0x04   /* receiver line status */
#define SERIAL_IER_EDSSI 0x08   /* modem status */

#define SERIAL_IIR_NO_INT 0x01
#define SERIAL_IIR_MSI    0x00  /* modem status (lowest priority) */
#define SERIAL_IIR_THRI   0x02  /* THR empty */
#define SERIAL_IIR_RDI    0x04  /* received data available */
#define SERIAL_IIR_RLSI   0x06  /* receiver line status (highest) */
#define SERIAL_IIR_ID     0x0f
#define SERIAL_IIR_FIFO   0xc0  /* both set while FCR.FIFO_EN */

#define SERIAL_FCR_FIFO_EN  0x01
#define SERIAL_FCR_CLEAR_RX 0x02
#define SERIAL_FCR_CLEAR_TX 0x04
#define SERIAL_FCR_DMA      0x08
#define SERIAL_FCR_TRIGGER  0xc0

#define SERIAL_LCR_DLAB 0x80

#define SERIAL_MCR_DTR  0x01
#define SERIAL_MCR_RTS  0x02
#define SERIAL_MCR_OUT1 0x04
#define SERIAL_MCR_OUT2 0x08
#define SERIAL_MCR_LOOP 0x10
#define SERIAL_MCR_MASK 0x1f

#define SERIAL_LSR_DR   0x01
#define SERIAL_LSR_OE   0x02
#define SERIAL_LSR_PE   0x04
#define SERIAL_LSR_FE   0x08
#define SERIAL_LSR_BI   0x10
#define SERIAL_LSR_THRE 0x20
#define SERIAL_LSR_TEMT 0x40
#define SERIAL_LSR_ERR  (SERIAL_LSR_OE | SERIAL_LSR_PE | SERIAL_LSR_FE | SERIAL_LSR_BI)

#define SERIAL_MSR_DCTS 0x01
#define SERIAL_MSR_DDSR 0x02
#define SERIAL_MSR_TERI 0x04
#define SERIAL_MSR_DDCD 0x08
#define SERIAL_MSR_CTS  0x10
#define SERIAL_MSR_DSR  0x20
#define SERIAL_MSR_RI   0x40
#define SERIAL_MSR_DCD  0x80
#define SERIAL_MSR_DELTA 0x0f

struct serial_ops {
    void (*tx)(void *opaque, uint8_t byte);      /* guest wrote THR (not in loopback) */
    void (*set_irq)(void *opaque, int level);    /* interrupt line level changed */
    /* Optional (may be NULL): the receive FIFO just became empty, or
     * loopback mode was left, so serial_rx() will accept bytes again. A
     * host input thread that got a short count from serial_rx() can wait
     * for this instead of polling. Called with the lock held. */
    void (*rx_ready)(void *opaque);
};

struct serial {
    pthread_mutex_t lock;
    const struct serial_ops *ops;   /* may be NULL; NULL callbacks are skipped */
    void *opaque;
    uint8_t ier, iir, lcr, mcr, lsr, msr, scr, dll, dlm, fcr;
    uint8_t thr_ipending;    /* THRE interrupt latched until IIR read/THR write */
    int irq_level;
    uint8_t rx[SERIAL_FIFO];
    unsigned rx_head, rx_len;
};

void serial_init(struct serial *s, const struct serial_ops *ops, void *opaque);
void serial_destroy(struct serial *s);
/* Back to power-on register values (drops queued input); lowers the IRQ
 * line through set_irq if it was high. */
void serial_reset(struct serial *s);

/* Register access, off 0..7 (bus callbacks wrap these). Offsets above 7
 * read as 0 and ignore writes. */
uint8_t serial_read(struct serial *s, unsigned off);
void serial_write(struct serial *s, unsigned off, uint8_t val);

/* Host input: queue up to n bytes; returns how many fit in the FIFO
 * (64 bytes with FCR.FIFO_EN, 1 without; 0 in loopback mode, where the
 * line input is disconnected). The caller keeps the rest. */
size_t serial_rx(struct serial *s, const uint8_t *buf, size_t n);
/* Free space in the receive FIFO (what serial_rx would accept now). */
size_t serial_rx_space(struct serial *s);

/* bus_ops for an 8-port window; opaque is the struct serial. An access of
 * len > 1 is split into len byte accesses at consecutive offsets (as an
 * 8-bit ISA device sees a wide access), done under one lock hold. */
extern const struct bus_ops serial_bus_ops;

/* What a snapshot keeps of an instance (vmm/snapshot: section
 * SNAP_DEV_SERIAL, docs/snapshot-format.md): a fixed layout of 80 bytes
 * with explicit padding. serial_save and serial_load take the instance's
 * lock and call no callback (the IRQ line's level is the interrupt
 * controller's state, restored with it); serial_state_check is pure: 0 for
 * a state the model can be in, else -EINVAL with why (a state file is
 * untrusted input). Load only a checked state. */
struct serial_state {
    uint8_t ier, iir, lcr, mcr, lsr, msr, scr, dll, dlm, fcr, thr_ipending;
    uint8_t irq_level;                  /* 0 or 1, as thr_ipending */
    uint8_t rx_len, rx_head, pad[2];    /* rx_len <= SERIAL_FIFO, rx_head < SERIAL_FIFO */
    uint8_t rx[SERIAL_FIFO];
};
void serial_save(struct serial *s, struct serial_state *st);
int serial_state_check(const struct serial_state *st, const char **why);
void serial_load(struct serial *s, const struct serial_state *st);

#endif
