/* 16550A UART model. See devices/legacy/serial.h for the contract and
 * docs/devices.md ("Legacy devices") for the behaviour, in particular how
 * the interrupt line is driven so that Linux's 8250 driver works on an
 * edge-triggered ISA pin.
 *
 * Everything named *_locked expects s->lock to be held. */
#include "devices/legacy/serial.h"

#include <errno.h>
#include <string.h>

_Static_assert(sizeof(struct serial_state) == 80, "the snapshot's UART record is 80 bytes");

#define MSR_NOT_LOOP (SERIAL_MSR_DCD | SERIAL_MSR_DSR | SERIAL_MSR_CTS)
#define DLL_RESET    0x0c   /* 9600 baud from the usual 1.8432 MHz clock */

static int loopback(const struct serial *s) { return (s->mcr & SERIAL_MCR_LOOP) != 0; }
static int fifo_on(const struct serial *s) { return (s->fcr & SERIAL_FCR_FIFO_EN) != 0; }
static int dlab(const struct serial *s) { return (s->lcr & SERIAL_LCR_DLAB) != 0; }

/* Receive capacity: the 64-byte FIFO, or the single RBR in 16450 mode. */
static unsigned rx_cap(const struct serial *s) { return fifo_on(s) ? SERIAL_FIFO : 1; }

static void notify_rx_ready(struct serial *s)
{
    if (s->ops && s->ops->rx_ready)
        s->ops->rx_ready(s->opaque);
}

/* The highest-priority pending interrupt, as the IIR identification. */
static uint8_t pending_id(const struct serial *s)
{
    if ((s->ier & SERIAL_IER_ELSI) && (s->lsr & SERIAL_LSR_ERR))
        return SERIAL_IIR_RLSI;
    if ((s->ier & SERIAL_IER_ERBFI) && s->rx_len)
        return SERIAL_IIR_RDI;
    if ((s->ier & SERIAL_IER_ETBEI) && s->thr_ipending)
        return SERIAL_IIR_THRI;
    if ((s->ier & SERIAL_IER_EDSSI) && (s->msr & SERIAL_MSR_DELTA))
        return SERIAL_IIR_MSI;
    return SERIAL_IIR_NO_INT;
}

/* Recompute IIR and drive the line; set_irq only on a level change. The
 * line is high exactly while IIR reports an interrupt, so a driver that
 * loops until IIR says NO_INT always leaves the line low, and the next
 * condition gives a fresh rising edge. */
static void update_irq_locked(struct serial *s)
{
    s->iir = pending_id(s);
    int level = s->iir != SERIAL_IIR_NO_INT;
    if (level != s->irq_level) {
        s->irq_level = level;
        if (s->ops && s->ops->set_irq)
            s->ops->set_irq(s->opaque, level);
    }
}

static void rx_clear_locked(struct serial *s)
{
    int had = s->rx_len != 0;
    s->rx_head = 0;
    s->rx_len = 0;
    s->lsr &= (uint8_t)~SERIAL_LSR_DR;
    if (had)
        notify_rx_ready(s);
}

/* One character arrives at the receiver (host input or loopback). A full
 * FIFO keeps its contents and the new character is lost (overrun); in
 * 16450 mode the new character overwrites RBR, also with an overrun. */
static void rx_push_locked(struct serial *s, uint8_t b)
{
    unsigned cap = rx_cap(s);
    if (s->rx_len >= cap) {
        s->lsr |= SERIAL_LSR_OE;
        if (cap == 1)
            s->rx[s->rx_head] = b;
        return;
    }
    s->rx[(s->rx_head + s->rx_len) % SERIAL_FIFO] = b;
    s->rx_len++;
    s->lsr |= SERIAL_LSR_DR;
}

static uint8_t rx_pop_locked(struct serial *s)
{
    if (!s->rx_len)
        return 0;
    uint8_t b = s->rx[s->rx_head];
    s->rx_head = (s->rx_head + 1) % SERIAL_FIFO;
    if (--s->rx_len == 0) {
        s->rx_head = 0;
        s->lsr &= (uint8_t)~SERIAL_LSR_DR;
        notify_rx_ready(s);
    }
    return b;
}

/* Set MSR's status nibble, latching the delta bits for what changed (RI:
 * trailing edge only), like the chip's modem status logic. */
static void msr_set_status_locked(struct serial *s, uint8_t status)
{
    uint8_t old = s->msr, delta = 0;
    if ((old ^ status) & SERIAL_MSR_CTS) delta |= SERIAL_MSR_DCTS;
    if ((old ^ status) & SERIAL_MSR_DSR) delta |= SERIAL_MSR_DDSR;
    if ((old & SERIAL_MSR_RI) && !(status & SERIAL_MSR_RI)) delta |= SERIAL_MSR_TERI;
    if ((old ^ status) & SERIAL_MSR_DCD) delta |= SERIAL_MSR_DDCD;
    s->msr = (uint8_t)(status | ((old | delta) & SERIAL_MSR_DELTA));
}

/* What the modem inputs show: in loopback the MCR outputs are wired back
 * (DTR->DSR, RTS->CTS, OUT1->RI, OUT2->DCD); otherwise a connected line. */
static uint8_t msr_status(const struct serial *s)
{
    if (!loopback(s))
        return MSR_NOT_LOOP;
    uint8_t st = 0;
    if (s->mcr & SERIAL_MCR_DTR)  st |= SERIAL_MSR_DSR;
    if (s->mcr & SERIAL_MCR_RTS)  st |= SERIAL_MSR_CTS;
    if (s->mcr & SERIAL_MCR_OUT1) st |= SERIAL_MSR_RI;
    if (s->mcr & SERIAL_MCR_OUT2) st |= SERIAL_MSR_DCD;
    return st;
}

static void reset_locked(struct serial *s)
{
    s->ier = 0;
    s->lcr = 0;
    s->mcr = 0;
    s->lsr = SERIAL_LSR_THRE | SERIAL_LSR_TEMT;
    s->msr = MSR_NOT_LOOP;
    s->scr = 0;
    s->dll = DLL_RESET;
    s->dlm = 0;
    s->fcr = 0;
    s->thr_ipending = 0;
    s->rx_head = 0;
    s->rx_len = 0;
    memset(s->rx, 0, sizeof(s->rx));
    update_irq_locked(s);
}

void serial_init(struct serial *s, const struct serial_ops *ops, void *opaque)
{
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->lock, NULL);
    s->ops = ops;
    s->opaque = opaque;
    s->irq_level = 0;
    reset_locked(s);   /* line starts low and stays low: no callback */
}

void serial_destroy(struct serial *s)
{
    pthread_mutex_destroy(&s->lock);
}

void serial_reset(struct serial *s)
{
    pthread_mutex_lock(&s->lock);
    int had = s->rx_len != 0;
    reset_locked(s);
    if (had)
        notify_rx_ready(s);
    pthread_mutex_unlock(&s->lock);
}

static uint8_t read_locked(struct serial *s, unsigned off)
{
    uint8_t v = 0;
    switch (off) {
    case SERIAL_RBR:
        v = dlab(s) ? s->dll : rx_pop_locked(s);
        break;
    case SERIAL_IER:
        v = dlab(s) ? s->dlm : s->ier;
        break;
    case SERIAL_IIR: {
        uint8_t id = pending_id(s);
        v = (uint8_t)(id | (fifo_on(s) ? SERIAL_IIR_FIFO : 0));
        /* Reading IIR clears a THRE interrupt, but only when it is the
         * one being reported. */
        if (id == SERIAL_IIR_THRI)
            s->thr_ipending = 0;
        break;
    }
    case SERIAL_LCR:
        v = s->lcr;
        break;
    case SERIAL_MCR:
        v = s->mcr;
        break;
    case SERIAL_LSR:
        v = s->lsr;
        s->lsr &= (uint8_t)~SERIAL_LSR_ERR;   /* error bits clear on read */
        break;
    case SERIAL_MSR:
        v = s->msr;
        s->msr &= (uint8_t)~SERIAL_MSR_DELTA; /* deltas clear on read */
        break;
    case SERIAL_SCR:
        v = s->scr;
        break;
    default:
        return 0;
    }
    update_irq_locked(s);
    return v;
}

static void write_fcr_locked(struct serial *s, uint8_t val)
{
    if (!(val & SERIAL_FCR_FIFO_EN)) {
        /* Leaving FIFO mode clears the FIFOs; other bits need FIFO_EN. */
        if (fifo_on(s))
            rx_clear_locked(s);
        s->fcr = 0;
        return;
    }
    if (!fifo_on(s) || (val & SERIAL_FCR_CLEAR_RX))
        rx_clear_locked(s);
    /* CLEAR_TX: the transmitter is always empty. Bit 5 (16750 64-byte
     * mode) does not exist on a 16550A and is not stored. */
    s->fcr = val & (SERIAL_FCR_FIFO_EN | SERIAL_FCR_DMA | SERIAL_FCR_TRIGGER);
}

static void write_locked(struct serial *s, unsigned off, uint8_t val)
{
    switch (off) {
    case SERIAL_THR:
        if (dlab(s)) {
            s->dll = val;
            break;
        }
        if (loopback(s))
            rx_push_locked(s, val);
        else if (s->ops && s->ops->tx)
            s->ops->tx(s->opaque, val);
        /* The write clears the THRE interrupt; the character leaves at
         * once, so THR is empty again and THRE is re-armed: a driver that
         * read IIR (line low) sees a new rising edge. */
        s->thr_ipending = (s->ier & SERIAL_IER_ETBEI) ? 1 : 0;
        break;
    case SERIAL_IER:
        if (dlab(s)) {
            s->dlm = val;
        } else {
            uint8_t nv = val & 0x0f, changed = s->ier ^ nv;
            s->ier = nv;
            /* Enabling ETBEI while THR is empty (always) raises THRE; this
             * is what Linux's start_tx and its UART_BUG_THRE probe rely on.
             * Disabling it drops the latch. */
            if (changed & SERIAL_IER_ETBEI)
                s->thr_ipending = (nv & SERIAL_IER_ETBEI) ? 1 : 0;
        }
        break;
    case SERIAL_FCR:
        write_fcr_locked(s, val);
        break;
    case SERIAL_LCR:
        s->lcr = val;
        break;
    case SERIAL_MCR: {
        int was_loop = loopback(s);
        s->mcr = val & SERIAL_MCR_MASK;
        msr_set_status_locked(s, msr_status(s));
        if (was_loop && !loopback(s))
            notify_rx_ready(s);
        break;
    }
    case SERIAL_LSR:   /* factory test register: writes ignored */
    case SERIAL_MSR:   /* read-only */
        break;
    case SERIAL_SCR:
        s->scr = val;
        break;
    default:
        return;
    }
    update_irq_locked(s);
}

uint8_t serial_read(struct serial *s, unsigned off)
{
    pthread_mutex_lock(&s->lock);
    uint8_t v = read_locked(s, off);
    pthread_mutex_unlock(&s->lock);
    return v;
}

void serial_write(struct serial *s, unsigned off, uint8_t val)
{
    pthread_mutex_lock(&s->lock);
    write_locked(s, off, val);
    pthread_mutex_unlock(&s->lock);
}

static size_t rx_space_locked(const struct serial *s)
{
    if (loopback(s))
        return 0;
    return rx_cap(s) - s->rx_len;
}

size_t serial_rx(struct serial *s, const uint8_t *buf, size_t n)
{
    pthread_mutex_lock(&s->lock);
    size_t room = rx_space_locked(s), k = n < room ? n : room;
    for (size_t i = 0; i < k; i++)
        rx_push_locked(s, buf[i]);
    if (k)
        update_irq_locked(s);
    pthread_mutex_unlock(&s->lock);
    return k;
}

size_t serial_rx_space(struct serial *s)
{
    pthread_mutex_lock(&s->lock);
    size_t room = rx_space_locked(s);
    pthread_mutex_unlock(&s->lock);
    return room;
}

static void bus_read(void *opaque, uint64_t off, uint8_t *data, uint32_t len)
{
    struct serial *s = opaque;
    pthread_mutex_lock(&s->lock);
    for (uint32_t i = 0; i < len; i++)
        data[i] = off <= 7 && i <= 7 - off ? read_locked(s, (unsigned)(off + i)) : 0;
    pthread_mutex_unlock(&s->lock);
}

static void bus_write(void *opaque, uint64_t off, const uint8_t *data, uint32_t len)
{
    struct serial *s = opaque;
    pthread_mutex_lock(&s->lock);
    for (uint32_t i = 0; i < len; i++)
        if (off <= 7 && i <= 7 - off)
            write_locked(s, (unsigned)(off + i), data[i]);
    pthread_mutex_unlock(&s->lock);
}

const struct bus_ops serial_bus_ops = { bus_read, bus_write };

/* ---- snapshots ---- */

void serial_save(struct serial *s, struct serial_state *st)
{
    memset(st, 0, sizeof(*st));
    pthread_mutex_lock(&s->lock);
    st->ier = s->ier; st->iir = s->iir; st->lcr = s->lcr; st->mcr = s->mcr; st->lsr = s->lsr;
    st->msr = s->msr; st->scr = s->scr; st->dll = s->dll; st->dlm = s->dlm; st->fcr = s->fcr;
    st->thr_ipending = s->thr_ipending;
    st->irq_level = (uint8_t)s->irq_level;
    st->rx_len = (uint8_t)s->rx_len;
    st->rx_head = (uint8_t)s->rx_head;
    memcpy(st->rx, s->rx, sizeof(st->rx));
    pthread_mutex_unlock(&s->lock);
}

static int state_fail(const char **why, const char *msg)
{
    if (why)
        *why = msg;
    return -EINVAL;
}

int serial_state_check(const struct serial_state *st, const char **why)
{
    if (st->rx_len > sizeof st->rx || st->rx_head >= sizeof st->rx)
        return state_fail(why, "UART: receive FIFO position out of range");
    if (st->ier & 0xf0)
        return state_fail(why, "UART: IER bits 7:4 set");
    if (st->mcr & 0xe0)
        return state_fail(why, "UART: MCR bits 7:5 set");
    /* IIR: an interrupt ID the model produces (none, modem status, THR
     * empty, data, line status), the FIFO bits both set or both clear, bits
     * 5:4 clear. */
    uint8_t id = st->iir & 0x0f, fifo = st->iir & 0xc0;
    if ((st->iir & 0x30) || (fifo != 0 && fifo != 0xc0) ||
        (id != 0x01 && id != 0x00 && id != 0x02 && id != 0x04 && id != 0x06))
        return state_fail(why, "UART: IIR not a state the UART can be in");
    if (st->thr_ipending > 1 || st->irq_level > 1)
        return state_fail(why, "UART: a flag byte other than 0 or 1");
    if (st->pad[0] || st->pad[1])
        return state_fail(why, "UART: padding not zero");
    return 0;
}

void serial_load(struct serial *s, const struct serial_state *st)
{
    pthread_mutex_lock(&s->lock);
    s->ier = st->ier; s->iir = st->iir; s->lcr = st->lcr; s->mcr = st->mcr; s->lsr = st->lsr;
    s->msr = st->msr; s->scr = st->scr; s->dll = st->dll; s->dlm = st->dlm; s->fcr = st->fcr;
    s->thr_ipending = st->thr_ipending;
    s->irq_level = st->irq_level ? 1 : 0;  /* the IOAPIC state carries the line */
    s->rx_len = st->rx_len;
    s->rx_head = st->rx_head;
    memcpy(s->rx, st->rx, sizeof(st->rx));
    pthread_mutex_unlock(&s->lock);
}
