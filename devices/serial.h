/* 16550A UART (8250 family) as a pure state machine: register reads and
 * writes in, bytes and IRQ levels out through callbacks. No KVM headers. */
#ifndef MOAT_SERIAL_H
#define MOAT_SERIAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "vmm/bus.h"

#define SERIAL_FIFO 64

struct serial_ops {
    void (*tx)(void *opaque, uint8_t byte);      /* guest wrote THR (not in loopback) */
    void (*set_irq)(void *opaque, int level);    /* interrupt line level changed */
};

struct serial {
    pthread_mutex_t lock;
    const struct serial_ops *ops;
    void *opaque;
    uint8_t ier, iir, lcr, mcr, lsr, msr, scr, dll, dlm, fcr;
    uint8_t thr_ipending;    /* THRE interrupt latched until IIR read/THR write */
    int irq_level;
    uint8_t rx[SERIAL_FIFO];
    unsigned rx_head, rx_len;
};

void serial_init(struct serial *s, const struct serial_ops *ops, void *opaque);
void serial_destroy(struct serial *s);

/* Register access, off 0..7 (bus callbacks wrap these). */
uint8_t serial_read(struct serial *s, unsigned off);
void serial_write(struct serial *s, unsigned off, uint8_t val);

/* Host input: queue up to n bytes; returns how many fit in the FIFO. */
size_t serial_rx(struct serial *s, const uint8_t *buf, size_t n);
/* Free space in the receive FIFO. */
size_t serial_rx_space(struct serial *s);

/* bus_ops for an 8-port window; opaque is the struct serial. */
extern const struct bus_ops serial_bus_ops;

#endif
