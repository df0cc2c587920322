/* Fuzz the 16550A model (devices/legacy/serial.c): the input is a program of
 * register reads/writes, host input, wide bus accesses, resets and runs of
 * a Linux-style interrupt handler; after every step the invariants of
 * docs/devices.md ("Legacy devices") are checked.
 *
 * Input: a sequence of ops; op byte k = b & 7, its operands follow:
 *   0 read   [off]          serial_read(off & 15)     (8..15: out of range)
 *   1 write  [off][val]     serial_write(off & 15, val)
 *   2 rx     [n][n bytes]   serial_rx (n truncated to what is left)
 *   3 bus rd [off]          serial_bus_ops.read, len 1 << (b >> 3 & 3), clipped to the window
 *   4 bus wr [off][len bytes] serial_bus_ops.write, same lengths
 *   5 reset                 serial_reset
 *   6 space                 serial_rx_space (checked against the state)
 *   7 isr                   service interrupts like Linux's 8250 handler until
 *                           IIR says NO_INT; must finish, leaving the line low
 * A missing operand ends the program. */
#include <stdint.h>
#include <string.h>

#include "devices/legacy/serial.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct watch {
    struct serial *s;
    int level;          /* last level reported through set_irq */
    unsigned ntx;
};

static void w_tx(void *o, uint8_t b)
{
    struct watch *w = o;
    (void)b;
    FUZZ_ASSERT(!(w->s->mcr & SERIAL_MCR_LOOP));   /* loopback never transmits */
    w->ntx++;
}

static void w_irq(void *o, int level)
{
    struct watch *w = o;
    FUZZ_ASSERT(level == 0 || level == 1);
    FUZZ_ASSERT(level != w->level);                  /* only on change */
    w->level = level;
}

static const struct serial_ops w_ops = { w_tx, w_irq, NULL };

/* Independent oracle for "an interrupt is pending". */
static int expect_level(const struct serial *s)
{
    return ((s->ier & SERIAL_IER_ELSI) && (s->lsr & SERIAL_LSR_ERR)) ||
           ((s->ier & SERIAL_IER_ERBFI) && s->rx_len) ||
           ((s->ier & SERIAL_IER_ETBEI) && s->thr_ipending) ||
           ((s->ier & SERIAL_IER_EDSSI) && (s->msr & SERIAL_MSR_DELTA));
}

static unsigned cap(const struct serial *s)
{
    return (s->fcr & SERIAL_FCR_FIFO_EN) ? SERIAL_FIFO : 1;
}

static void check_state(const struct watch *w)
{
    const struct serial *s = w->s;
    FUZZ_ASSERT(s->rx_head < SERIAL_FIFO);
    FUZZ_ASSERT(s->rx_len <= cap(s));
    FUZZ_ASSERT(!!(s->lsr & SERIAL_LSR_DR) == (s->rx_len > 0));
    FUZZ_ASSERT((s->lsr & (SERIAL_LSR_THRE | SERIAL_LSR_TEMT)) == (SERIAL_LSR_THRE | SERIAL_LSR_TEMT));
    FUZZ_ASSERT(s->ier <= 0x0f);
    FUZZ_ASSERT(s->mcr <= SERIAL_MCR_MASK);
    FUZZ_ASSERT(s->irq_level == w->level);
    FUZZ_ASSERT(s->irq_level == expect_level(s));
    if (!(s->mcr & SERIAL_MCR_LOOP))   /* a connected line */
        FUZZ_ASSERT((s->msr & 0xf0) == (SERIAL_MSR_DCD | SERIAL_MSR_DSR | SERIAL_MSR_CTS));
}

static void check_read(unsigned off, uint8_t v, uint8_t fcr, uint8_t lcr)
{
    if (off > 7) {
        FUZZ_ASSERT(v == 0);
        return;
    }
    if (off == SERIAL_IIR) {
        uint8_t id = v & SERIAL_IIR_ID;
        FUZZ_ASSERT((v & 0x30) == 0);
        FUZZ_ASSERT(id == SERIAL_IIR_NO_INT || id == SERIAL_IIR_MSI || id == SERIAL_IIR_THRI ||
                    id == SERIAL_IIR_RDI || id == SERIAL_IIR_RLSI);
        FUZZ_ASSERT((v & SERIAL_IIR_FIFO) == ((fcr & SERIAL_FCR_FIFO_EN) ? SERIAL_IIR_FIFO : 0));
    }
    if (off == SERIAL_IER && !(lcr & SERIAL_LCR_DLAB))
        FUZZ_ASSERT(v <= 0x0f);
    if (off == SERIAL_LSR)
        FUZZ_ASSERT(v & SERIAL_LSR_THRE);
}

static void do_read(struct watch *w, unsigned off)
{
    uint8_t fcr = w->s->fcr, lcr = w->s->lcr;
    uint8_t v = serial_read(w->s, off);
    check_read(off, v, fcr, lcr);
}

static void do_write(struct watch *w, unsigned off, uint8_t val)
{
    struct serial *s = w->s;
    int thr = off == SERIAL_THR && !(s->lcr & SERIAL_LCR_DLAB);
    int loop = (s->mcr & SERIAL_MCR_LOOP) != 0;
    unsigned len = s->rx_len, ntx = w->ntx;
    serial_write(s, off, val);
    if (thr && loop)
        FUZZ_ASSERT(s->rx_len == len + 1 || (s->lsr & SERIAL_LSR_OE));
    if (thr && !loop)
        FUZZ_ASSERT(w->ntx == ntx + 1);
    if (!thr)
        FUZZ_ASSERT(w->ntx == ntx);
}

/* Linux's serial8250_interrupt + serial8250_handle_irq, servicing every
 * source it is told about (and turning THRE off, as __stop_tx does when
 * its buffer is empty, so that the loop ends). */
static void run_isr(struct watch *w)
{
    struct serial *s = w->s;
    if (s->lcr & SERIAL_LCR_DLAB)   /* a driver runs with DLAB clear */
        serial_write(s, SERIAL_LCR, s->lcr & (uint8_t)~SERIAL_LCR_DLAB);
    for (int pass = 0; pass < 64; pass++) {
        uint8_t iir = serial_read(s, SERIAL_IIR);
        if (iir & SERIAL_IIR_NO_INT) {
            FUZZ_ASSERT(s->irq_level == 0);
            return;
        }
        uint8_t lsr = serial_read(s, SERIAL_LSR);
        for (int n = 0; (lsr & SERIAL_LSR_DR) && n < 2 * SERIAL_FIFO; n++) {
            serial_read(s, SERIAL_RBR);
            lsr = serial_read(s, SERIAL_LSR);
        }
        FUZZ_ASSERT(!(lsr & SERIAL_LSR_DR));
        serial_read(s, SERIAL_MSR);
        if ((iir & SERIAL_IIR_ID) == SERIAL_IIR_THRI)
            serial_write(s, SERIAL_IER, s->ier & (uint8_t)~SERIAL_IER_ETBEI);
    }
    FUZZ_ASSERT(!"handler did not reach NO_INT");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint32_t lens[4] = { 1, 2, 4, 8 };
    struct serial s;
    struct watch w = { .s = &s, .level = 0, .ntx = 0 };
    serial_init(&s, &w_ops, &w);
    check_state(&w);
    size_t i = 0;
    while (i < size) {
        uint8_t op = data[i++];
        switch (op & 7) {
        case 0:
            if (i >= size) goto out;
            do_read(&w, data[i++] & 15u);
            break;
        case 1:
            if (i + 2 > size) goto out;
            do_write(&w, data[i] & 15u, data[i + 1]);
            i += 2;
            break;
        case 2: {
            if (i >= size) goto out;
            size_t n = data[i++];
            if (n > size - i)
                n = size - i;
            size_t room = (s.mcr & SERIAL_MCR_LOOP) ? 0 : cap(&s) - s.rx_len;
            size_t k = serial_rx(&s, data + i, n);
            FUZZ_ASSERT(k <= n);
            FUZZ_ASSERT(k == (n < room ? n : room));
            i += n;
            break;
        }
        case 3: {
            if (i >= size) goto out;
            uint64_t off = data[i++] & 7u;
            uint32_t len = lens[op >> 3 & 3];
            if (off + len > 8)
                break;   /* the bus would not dispatch it */
            uint8_t buf[8];
            memset(buf, 0xa5, sizeof(buf));
            serial_bus_ops.read(&s, off, buf, len);
            if (len == 1)
                FUZZ_ASSERT(off != SERIAL_LSR || (buf[0] & SERIAL_LSR_THRE));
            break;
        }
        case 4: {
            if (i >= size) goto out;
            uint64_t off = data[i++] & 7u;
            uint32_t len = lens[op >> 3 & 3];
            if (i + len > size) goto out;
            if (off + len <= 8)
                serial_bus_ops.write(&s, off, data + i, len);
            i += len;
            break;
        }
        case 5:
            serial_reset(&s);
            FUZZ_ASSERT(s.rx_len == 0 && s.ier == 0 && s.irq_level == 0);
            break;
        case 6: {
            size_t room = serial_rx_space(&s);
            FUZZ_ASSERT(room <= SERIAL_FIFO);
            FUZZ_ASSERT(room == ((s.mcr & SERIAL_MCR_LOOP) ? 0 : cap(&s) - s.rx_len));
            break;
        }
        case 7:
            run_isr(&w);
            break;
        }
        check_state(&w);
    }
out:
    check_state(&w);
    serial_destroy(&s);
    return 0;
}
