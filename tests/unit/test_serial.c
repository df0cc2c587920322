/* Unit tests for the 16550A model (devices/legacy/serial.c). */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "devices/legacy/serial.h"
#include "vmm/base/bus.h"

/* What the callbacks saw. */
struct rec {
    uint8_t tx[4096];
    unsigned ntx;
    int irq[4096];      /* every set_irq level, in order */
    unsigned nirq;
    unsigned rx_ready;
};

static void rec_tx(void *o, uint8_t b)
{
    struct rec *r = o;
    if (r->ntx < sizeof(r->tx))
        r->tx[r->ntx] = b;
    r->ntx++;
}
static void rec_irq(void *o, int level)
{
    struct rec *r = o;
    if (r->nirq < 4096)
        r->irq[r->nirq] = level;
    r->nirq++;
}
static void rec_rx_ready(void *o) { ((struct rec *)o)->rx_ready++; }

static const struct serial_ops ops = { rec_tx, rec_irq, rec_rx_ready };

static struct serial S;
static struct rec R;

static void setup(void)
{
    memset(&R, 0, sizeof(R));
    serial_init(&S, &ops, &R);
}
static void teardown(void) { serial_destroy(&S); }

static int last_level(void) { return R.nirq ? R.irq[R.nirq - 1] : 0; }

static void fill_rx(unsigned n, uint8_t first)
{
    uint8_t buf[256];
    for (unsigned i = 0; i < n; i++)
        buf[i] = (uint8_t)(first + i);
    ck_assert_uint_eq(serial_rx(&S, buf, n), n);
}

START_TEST(reset_values)
{
    ck_assert_uint_eq(serial_read(&S, SERIAL_IER), 0);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR), SERIAL_IIR_NO_INT);
    ck_assert_uint_eq(serial_read(&S, SERIAL_LCR), 0);
    ck_assert_uint_eq(serial_read(&S, SERIAL_MCR), 0);
    ck_assert_uint_eq(serial_read(&S, SERIAL_LSR), SERIAL_LSR_THRE | SERIAL_LSR_TEMT);
    ck_assert_uint_eq(serial_read(&S, SERIAL_MSR), SERIAL_MSR_DCD | SERIAL_MSR_DSR | SERIAL_MSR_CTS);
    ck_assert_uint_eq(serial_read(&S, SERIAL_SCR), 0);
    ck_assert_uint_eq(serial_read(&S, SERIAL_RBR), 0);   /* empty */
    serial_write(&S, SERIAL_LCR, SERIAL_LCR_DLAB);
    ck_assert_uint_eq(serial_read(&S, SERIAL_DLL), 0x0c);
    ck_assert_uint_eq(serial_read(&S, SERIAL_DLM), 0);
    ck_assert_uint_eq(serial_rx_space(&S), 1);            /* 16450 mode */
    ck_assert_uint_eq(R.nirq, 0);
    ck_assert_uint_eq(R.ntx, 0);
    ck_assert_int_eq(S.irq_level, 0);
}
END_TEST

START_TEST(dlab_switching)
{
    serial_write(&S, SERIAL_IER, 0x05);
    serial_write(&S, SERIAL_LCR, SERIAL_LCR_DLAB | 0x03);
    ck_assert_uint_eq(serial_read(&S, SERIAL_LCR), SERIAL_LCR_DLAB | 0x03);
    serial_write(&S, SERIAL_DLL, 0x01);
    serial_write(&S, SERIAL_DLM, 0x02);
    ck_assert_uint_eq(serial_read(&S, SERIAL_DLL), 0x01);
    ck_assert_uint_eq(serial_read(&S, SERIAL_DLM), 0x02);
    ck_assert_uint_eq(R.ntx, 0);                 /* DLL write is not THR */
    serial_write(&S, SERIAL_LCR, 0x03);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IER), 0x05);   /* IER untouched */
    serial_write(&S, SERIAL_IER, 0x00);
    serial_write(&S, SERIAL_THR, 'z');
    ck_assert_uint_eq(R.ntx, 1);
    ck_assert_uint_eq(R.tx[0], 'z');
    serial_write(&S, SERIAL_LCR, SERIAL_LCR_DLAB);
    ck_assert_uint_eq(serial_read(&S, SERIAL_DLL), 0x01);   /* divisor kept */
    ck_assert_uint_eq(serial_read(&S, SERIAL_DLM), 0x02);
}
END_TEST

START_TEST(thr_write_calls_tx)
{
    const char *msg = "hello, moat\n";
    for (const char *p = msg; *p; p++) {
        serial_write(&S, SERIAL_THR, (uint8_t)*p);
        /* output is instant: THR and the shift register are empty again */
        ck_assert_uint_eq(serial_read(&S, SERIAL_LSR) & (SERIAL_LSR_THRE | SERIAL_LSR_TEMT),
                          SERIAL_LSR_THRE | SERIAL_LSR_TEMT);
    }
    ck_assert_uint_eq(R.ntx, strlen(msg));
    ck_assert_mem_eq(R.tx, msg, strlen(msg));
    ck_assert_uint_eq(serial_read(&S, SERIAL_LSR) & SERIAL_LSR_DR, 0);   /* no echo */
    ck_assert_uint_eq(R.nirq, 0);                                     /* IER = 0 */
}
END_TEST

START_TEST(upper_bits_read_zero)
{
    serial_write(&S, SERIAL_IER, 0xff);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IER), 0x0f);   /* Linux's 8250 probe */
    serial_write(&S, SERIAL_IER, 0);
    serial_write(&S, SERIAL_MCR, 0xff & ~SERIAL_MCR_LOOP);
    ck_assert_uint_eq(serial_read(&S, SERIAL_MCR), SERIAL_MCR_MASK & ~SERIAL_MCR_LOOP);
    serial_write(&S, SERIAL_SCR, 0xa5);
    ck_assert_uint_eq(serial_read(&S, SERIAL_SCR), 0xa5);
    serial_write(&S, SERIAL_SCR, 0x5a);
    ck_assert_uint_eq(serial_read(&S, SERIAL_SCR), 0x5a);
    /* LSR and MSR are read-only */
    uint8_t lsr = serial_read(&S, SERIAL_LSR), msr = serial_read(&S, SERIAL_MSR);
    serial_write(&S, SERIAL_LSR, 0x1f);
    serial_write(&S, SERIAL_MSR, 0x0f);
    ck_assert_uint_eq(serial_read(&S, SERIAL_LSR), lsr);
    ck_assert_uint_eq(serial_read(&S, SERIAL_MSR), msr);
}
END_TEST

START_TEST(loopback_tx_to_rx)
{
    serial_write(&S, SERIAL_FCR, SERIAL_FCR_FIFO_EN);
    serial_write(&S, SERIAL_MCR, SERIAL_MCR_LOOP);
    ck_assert_uint_eq(serial_rx_space(&S), 0);   /* line input disconnected */
    uint8_t b = 'x';
    ck_assert_uint_eq(serial_rx(&S, &b, 1), 0);
    serial_write(&S, SERIAL_THR, 'a');
    serial_write(&S, SERIAL_THR, 'b');
    ck_assert_uint_eq(R.ntx, 0);
    ck_assert_uint_eq(serial_read(&S, SERIAL_LSR) & SERIAL_LSR_DR, SERIAL_LSR_DR);
    ck_assert_uint_eq(serial_read(&S, SERIAL_RBR), 'a');
    ck_assert_uint_eq(serial_read(&S, SERIAL_RBR), 'b');
    ck_assert_uint_eq(serial_read(&S, SERIAL_LSR) & SERIAL_LSR_DR, 0);
    unsigned ready = R.rx_ready;
    serial_write(&S, SERIAL_MCR, 0);
    ck_assert_uint_eq(R.rx_ready, ready + 1);    /* input accepted again */
    serial_write(&S, SERIAL_THR, 'c');
    ck_assert_uint_eq(R.ntx, 1);
    ck_assert_uint_eq(R.tx[0], 'c');
    ck_assert_uint_eq(serial_read(&S, SERIAL_LSR) & SERIAL_LSR_DR, 0);
}
END_TEST

START_TEST(loopback_msr_mirrors_mcr)
{
    static const struct { uint8_t mcr, msr; } map[] = {
        { SERIAL_MCR_DTR, SERIAL_MSR_DSR },
        { SERIAL_MCR_RTS, SERIAL_MSR_CTS },
        { SERIAL_MCR_OUT1, SERIAL_MSR_RI },
        { SERIAL_MCR_OUT2, SERIAL_MSR_DCD },
    };
    for (unsigned i = 0; i < 4; i++) {
        serial_write(&S, SERIAL_MCR, SERIAL_MCR_LOOP | map[i].mcr);
        ck_assert_uint_eq(serial_read(&S, SERIAL_MSR) & 0xf0, map[i].msr);
    }
    /* Linux's autoconfig loopback check: LOOP | OUT2 | RTS gives 0x90. */
    serial_write(&S, SERIAL_MCR, SERIAL_MCR_LOOP | 0x0a);
    ck_assert_uint_eq(serial_read(&S, SERIAL_MSR) & 0xf0, 0x90);
    serial_write(&S, SERIAL_MCR, 0);
    ck_assert_uint_eq(serial_read(&S, SERIAL_MSR) & 0xf0,
                      SERIAL_MSR_DCD | SERIAL_MSR_DSR | SERIAL_MSR_CTS);
}
END_TEST

START_TEST(msr_deltas)
{
    /* Entering loopback with no outputs: CTS, DSR, DCD all drop. */
    serial_write(&S, SERIAL_MCR, SERIAL_MCR_LOOP);
    uint8_t msr = serial_read(&S, SERIAL_MSR);
    ck_assert_uint_eq(msr, SERIAL_MSR_DCTS | SERIAL_MSR_DDSR | SERIAL_MSR_DDCD);
    ck_assert_uint_eq(serial_read(&S, SERIAL_MSR), 0);        /* cleared by read */
    /* RI rising edge: no TERI; trailing edge: TERI. */
    serial_write(&S, SERIAL_MCR, SERIAL_MCR_LOOP | SERIAL_MCR_OUT1);
    ck_assert_uint_eq(serial_read(&S, SERIAL_MSR), SERIAL_MSR_RI);
    serial_write(&S, SERIAL_MCR, SERIAL_MCR_LOOP);
    ck_assert_uint_eq(serial_read(&S, SERIAL_MSR), SERIAL_MSR_TERI);
    /* Deltas accumulate until read. */
    serial_write(&S, SERIAL_MCR, SERIAL_MCR_LOOP | SERIAL_MCR_DTR);
    serial_write(&S, SERIAL_MCR, SERIAL_MCR_LOOP | SERIAL_MCR_DTR | SERIAL_MCR_RTS);
    ck_assert_uint_eq(serial_read(&S, SERIAL_MSR),
                      SERIAL_MSR_DSR | SERIAL_MSR_CTS | SERIAL_MSR_DDSR | SERIAL_MSR_DCTS);
    /* Rewriting the same MCR is no change. */
    serial_write(&S, SERIAL_MCR, SERIAL_MCR_LOOP | SERIAL_MCR_DTR | SERIAL_MCR_RTS);
    ck_assert_uint_eq(serial_read(&S, SERIAL_MSR) & SERIAL_MSR_DELTA, 0);
}
END_TEST

START_TEST(rx_fifo_fill_and_drain)
{
    serial_write(&S, SERIAL_FCR, SERIAL_FCR_FIFO_EN);
    ck_assert_uint_eq(serial_rx_space(&S), SERIAL_FIFO);
    uint8_t buf[100];
    for (unsigned i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)(i * 7 + 1);
    ck_assert_uint_eq(serial_rx(&S, buf, 10), 10);
    ck_assert_uint_eq(serial_rx_space(&S), SERIAL_FIFO - 10);
    ck_assert_uint_eq(serial_rx(&S, buf + 10, 90), SERIAL_FIFO - 10);   /* accepted count */
    ck_assert_uint_eq(serial_rx_space(&S), 0);
    ck_assert_uint_eq(serial_rx(&S, buf, 5), 0);
    ck_assert_uint_eq(serial_read(&S, SERIAL_LSR) & (SERIAL_LSR_DR | SERIAL_LSR_OE), SERIAL_LSR_DR);
    ck_assert_uint_eq(R.rx_ready, 0);
    for (unsigned i = 0; i < SERIAL_FIFO; i++) {
        ck_assert_uint_eq(serial_read(&S, SERIAL_LSR) & SERIAL_LSR_DR, SERIAL_LSR_DR);
        ck_assert_uint_eq(serial_read(&S, SERIAL_RBR), buf[i]);
    }
    ck_assert_uint_eq(serial_read(&S, SERIAL_LSR) & SERIAL_LSR_DR, 0);
    ck_assert_uint_eq(R.rx_ready, 1);                     /* became empty once */
    ck_assert_uint_eq(serial_read(&S, SERIAL_RBR), 0);    /* empty reads 0 */
    ck_assert_uint_eq(R.rx_ready, 1);
    /* wraps around the ring */
    ck_assert_uint_eq(serial_rx(&S, buf, 3), 3);
    ck_assert_uint_eq(serial_read(&S, SERIAL_RBR), buf[0]);
    ck_assert_uint_eq(serial_rx(&S, buf + 3, 97), SERIAL_FIFO - 2);
    for (unsigned i = 1; i < SERIAL_FIFO + 1; i++)
        ck_assert_uint_eq(serial_read(&S, SERIAL_RBR), buf[i]);
    ck_assert_uint_eq(serial_rx_space(&S), SERIAL_FIFO);
}
END_TEST

START_TEST(rx_without_fifo_holds_one)
{
    uint8_t ab[2] = { 'a', 'b' };
    ck_assert_uint_eq(serial_rx(&S, ab, 2), 1);
    ck_assert_uint_eq(serial_rx_space(&S), 0);
    ck_assert_uint_eq(serial_read(&S, SERIAL_RBR), 'a');
    ck_assert_uint_eq(R.rx_ready, 1);
    ck_assert_uint_eq(serial_rx(&S, ab + 1, 1), 1);
    ck_assert_uint_eq(serial_read(&S, SERIAL_RBR), 'b');
}
END_TEST

START_TEST(loopback_overrun)
{
    serial_write(&S, SERIAL_FCR, SERIAL_FCR_FIFO_EN);
    serial_write(&S, SERIAL_MCR, SERIAL_MCR_LOOP);
    for (unsigned i = 0; i < SERIAL_FIFO + 3; i++)
        serial_write(&S, SERIAL_THR, (uint8_t)i);
    uint8_t lsr = serial_read(&S, SERIAL_LSR);
    ck_assert_uint_eq(lsr & (SERIAL_LSR_OE | SERIAL_LSR_DR), SERIAL_LSR_OE | SERIAL_LSR_DR);
    ck_assert_uint_eq(serial_read(&S, SERIAL_LSR) & SERIAL_LSR_OE, 0);   /* cleared by read */
    for (unsigned i = 0; i < SERIAL_FIFO; i++)   /* FIFO kept the first 64 */
        ck_assert_uint_eq(serial_read(&S, SERIAL_RBR), i);
    ck_assert_uint_eq(serial_read(&S, SERIAL_LSR) & SERIAL_LSR_DR, 0);
    /* 16450 mode: the new character overwrites RBR */
    serial_write(&S, SERIAL_FCR, 0);
    serial_write(&S, SERIAL_THR, 'p');
    serial_write(&S, SERIAL_THR, 'q');
    ck_assert_uint_eq(serial_read(&S, SERIAL_LSR) & SERIAL_LSR_OE, SERIAL_LSR_OE);
    ck_assert_uint_eq(serial_read(&S, SERIAL_RBR), 'q');
}
END_TEST

START_TEST(fcr_fifo_control)
{
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR) & SERIAL_IIR_FIFO, 0);
    serial_write(&S, SERIAL_FCR, SERIAL_FCR_FIFO_EN | 0x20 /* 16750 bit */);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR), SERIAL_IIR_FIFO | SERIAL_IIR_NO_INT);
    fill_rx(5, 'a');
    serial_write(&S, SERIAL_FCR, SERIAL_FCR_FIFO_EN | SERIAL_FCR_CLEAR_RX | SERIAL_FCR_CLEAR_TX);
    ck_assert_uint_eq(serial_read(&S, SERIAL_LSR) & SERIAL_LSR_DR, 0);
    ck_assert_uint_eq(R.rx_ready, 1);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR) & SERIAL_IIR_FIFO, SERIAL_IIR_FIFO);
    fill_rx(5, 'a');
    serial_write(&S, SERIAL_FCR, SERIAL_FCR_FIFO_EN);         /* no clear bit: kept */
    ck_assert_uint_eq(serial_read(&S, SERIAL_RBR), 'a');
    serial_write(&S, SERIAL_FCR, 0);                            /* disabling clears */
    ck_assert_uint_eq(serial_read(&S, SERIAL_LSR) & SERIAL_LSR_DR, 0);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR), SERIAL_IIR_NO_INT);
    ck_assert_uint_eq(serial_rx_space(&S), 1);
    /* Linux's TI16750 check: IIR >> 5 must be 6 both with and without DLAB. */
    serial_write(&S, SERIAL_FCR, SERIAL_FCR_FIFO_EN | 0x20);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR) >> 5, 6);
    serial_write(&S, SERIAL_LCR, SERIAL_LCR_DLAB);
    serial_write(&S, SERIAL_FCR, SERIAL_FCR_FIFO_EN | 0x20);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR) >> 5, 6);
}
END_TEST

/* Each interrupt source alone, with only its IER bit set. */
START_TEST(iir_each_source)
{
    /* RX data */
    serial_write(&S, SERIAL_IER, SERIAL_IER_ERBFI);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR), SERIAL_IIR_NO_INT);
    fill_rx(1, 'r');
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR), SERIAL_IIR_RDI);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR), SERIAL_IIR_RDI);   /* read does not clear */
    serial_read(&S, SERIAL_RBR);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR), SERIAL_IIR_NO_INT);
    /* THRE */
    serial_write(&S, SERIAL_IER, SERIAL_IER_ETBEI);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR), SERIAL_IIR_THRI);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR), SERIAL_IIR_NO_INT);
    /* Line status (overrun in loopback) */
    serial_write(&S, SERIAL_IER, SERIAL_IER_ELSI);
    serial_write(&S, SERIAL_MCR, SERIAL_MCR_LOOP);
    serial_write(&S, SERIAL_THR, 1);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR), SERIAL_IIR_NO_INT);   /* data alone: no */
    serial_write(&S, SERIAL_THR, 2);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR), SERIAL_IIR_RLSI);
    serial_read(&S, SERIAL_LSR);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR), SERIAL_IIR_NO_INT);
    /* Modem status: the MCR change above latched deltas */
    serial_write(&S, SERIAL_IER, SERIAL_IER_EDSSI);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR), SERIAL_IIR_MSI);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR), SERIAL_IIR_MSI);   /* read does not clear */
    serial_read(&S, SERIAL_MSR);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR), SERIAL_IIR_NO_INT);
}
END_TEST

/* All four pending at once: reported strictly by priority. */
START_TEST(iir_priorities)
{
    serial_write(&S, SERIAL_FCR, SERIAL_FCR_FIFO_EN);
    serial_write(&S, SERIAL_MCR, SERIAL_MCR_LOOP);          /* MSR deltas */
    for (unsigned i = 0; i < SERIAL_FIFO + 1; i++)          /* data + overrun */
        serial_write(&S, SERIAL_THR, (uint8_t)i);
    serial_write(&S, SERIAL_IER, 0x0f);                     /* THRE on enable */
    ck_assert_int_eq(last_level(), 1);
    ck_assert_uint_eq(R.nirq, 1);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR), SERIAL_IIR_FIFO | SERIAL_IIR_RLSI);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR), SERIAL_IIR_FIFO | SERIAL_IIR_RLSI);
    serial_read(&S, SERIAL_LSR);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR), SERIAL_IIR_FIFO | SERIAL_IIR_RDI);
    for (unsigned i = 0; i < SERIAL_FIFO; i++)
        serial_read(&S, SERIAL_RBR);
    /* THRE survived the higher-priority IIR reads ... */
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR), SERIAL_IIR_FIFO | SERIAL_IIR_THRI);
    /* ... and is cleared by the read that reports it. */
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR), SERIAL_IIR_FIFO | SERIAL_IIR_MSI);
    ck_assert_int_eq(last_level(), 1);
    serial_read(&S, SERIAL_MSR);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR), SERIAL_IIR_FIFO | SERIAL_IIR_NO_INT);
    ck_assert_int_eq(last_level(), 0);
    ck_assert_uint_eq(R.nirq, 2);    /* one rise, one fall: no glitches */
}
END_TEST

START_TEST(disabled_sources_do_not_interrupt)
{
    serial_write(&S, SERIAL_FCR, SERIAL_FCR_FIFO_EN);
    serial_write(&S, SERIAL_MCR, SERIAL_MCR_LOOP);
    for (unsigned i = 0; i < SERIAL_FIFO + 1; i++)
        serial_write(&S, SERIAL_THR, (uint8_t)i);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR) & SERIAL_IIR_ID, SERIAL_IIR_NO_INT);
    ck_assert_uint_eq(R.nirq, 0);
    /* Disabling a source with its condition present lowers the line. */
    serial_write(&S, SERIAL_IER, SERIAL_IER_ERBFI);
    ck_assert_int_eq(last_level(), 1);
    serial_write(&S, SERIAL_IER, 0);
    ck_assert_int_eq(last_level(), 0);
    ck_assert_uint_eq(R.nirq, 2);
}
END_TEST

START_TEST(thre_interrupt)
{
    serial_write(&S, SERIAL_IER, SERIAL_IER_ETBEI);          /* enable with THR empty */
    ck_assert_uint_eq(R.nirq, 1);
    ck_assert_int_eq(R.irq[0], 1);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR), SERIAL_IIR_THRI);   /* read clears */
    ck_assert_uint_eq(R.nirq, 2);
    ck_assert_int_eq(R.irq[1], 0);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR), SERIAL_IIR_NO_INT);
    /* Rewriting IER with ETBEI still set is no new enable. */
    serial_write(&S, SERIAL_IER, SERIAL_IER_ETBEI);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR), SERIAL_IIR_NO_INT);
    /* A THR write clears THRE; the byte leaves at once and THRE is re-raised:
     * a new rising edge after the IIR read lowered the line. */
    serial_write(&S, SERIAL_THR, 'a');
    ck_assert_uint_eq(R.nirq, 3);
    ck_assert_int_eq(R.irq[2], 1);
    ck_assert_uint_eq(R.ntx, 1);
    /* More writes while it is pending: the level does not change. */
    serial_write(&S, SERIAL_THR, 'b');
    serial_write(&S, SERIAL_THR, 'c');
    ck_assert_uint_eq(R.nirq, 3);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR), SERIAL_IIR_THRI);
    ck_assert_int_eq(last_level(), 0);
    /* Disabling ETBEI drops a pending THRE; re-enabling raises it again. */
    serial_write(&S, SERIAL_THR, 'd');
    ck_assert_int_eq(last_level(), 1);
    serial_write(&S, SERIAL_IER, 0);
    ck_assert_int_eq(last_level(), 0);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR), SERIAL_IIR_NO_INT);
    serial_write(&S, SERIAL_IER, SERIAL_IER_ETBEI);
    ck_assert_int_eq(last_level(), 1);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR), SERIAL_IIR_THRI);
    /* THR written with ETBEI off leaves no latched THRE behind. */
    serial_write(&S, SERIAL_IER, 0);
    serial_write(&S, SERIAL_THR, 'e');
    ck_assert_uint_eq(serial_read(&S, SERIAL_IIR), SERIAL_IIR_NO_INT);
}
END_TEST

/* The UART_BUG_THRE and UART_BUG_TXEN probes in serial8250_do_startup. */
START_TEST(linux_thre_probes)
{
    serial_write(&S, SERIAL_IER, SERIAL_IER_ETBEI);
    uint8_t iir1 = serial_read(&S, SERIAL_IIR);
    serial_write(&S, SERIAL_IER, 0);
    serial_write(&S, SERIAL_IER, SERIAL_IER_ETBEI);
    uint8_t iir = serial_read(&S, SERIAL_IIR);
    serial_write(&S, SERIAL_IER, 0);
    ck_assert(!(iir1 & SERIAL_IIR_NO_INT));
    ck_assert(!(iir & SERIAL_IIR_NO_INT));       /* THRE re-asserted: no BUG_THRE */
    serial_write(&S, SERIAL_IER, SERIAL_IER_ETBEI);
    uint8_t lsr = serial_read(&S, SERIAL_LSR);
    iir = serial_read(&S, SERIAL_IIR);
    serial_write(&S, SERIAL_IER, 0);
    ck_assert(lsr & SERIAL_LSR_TEMT);
    ck_assert(!(iir & SERIAL_IIR_NO_INT));       /* no BUG_TXEN */
    ck_assert_int_eq(last_level(), 0);
}
END_TEST

/* A guest's view of an edge-triggered line: count rising edges, and run
 * Linux's handler (loop until IIR says NO_INT) once per edge. */
struct edge_guest {
    const char *out;        /* circular xmit buffer stand-in */
    size_t len, pos;
    uint8_t ier;
    uint8_t got[512];
    size_t ngot;
};

static void guest_isr(struct edge_guest *g)
{
    for (int pass = 0; pass < 512; pass++) {
        uint8_t iir = serial_read(&S, SERIAL_IIR);
        if (iir & SERIAL_IIR_NO_INT)
            return;
        uint8_t lsr = serial_read(&S, SERIAL_LSR);
        while (lsr & SERIAL_LSR_DR) {
            g->got[g->ngot++ % sizeof(g->got)] = serial_read(&S, SERIAL_RBR);
            lsr = serial_read(&S, SERIAL_LSR);
        }
        serial_read(&S, SERIAL_MSR);
        if ((lsr & SERIAL_LSR_THRE) && (g->ier & SERIAL_IER_ETBEI)) {
            for (int n = 0; n < 16 && g->pos < g->len; n++)
                serial_write(&S, SERIAL_THR, (uint8_t)g->out[g->pos++]);
            if (g->pos == g->len) {              /* __stop_tx */
                g->ier &= (uint8_t)~SERIAL_IER_ETBEI;
                serial_write(&S, SERIAL_IER, g->ier);
            }
        }
    }
    ck_abort_msg("handler did not reach NO_INT");
}

/* Deliver one interrupt per rising edge seen since the last delivery. */
static unsigned deliver(struct edge_guest *g, unsigned *seen)
{
    unsigned handled = 0;
    while (*seen < R.nirq) {
        int rise = R.irq[*seen] == 1;
        (*seen)++;
        if (rise) {
            guest_isr(g);
            handled++;
        }
    }
    return handled;
}

START_TEST(linux_style_interrupt_tx_rx)
{
    struct edge_guest g = { .out = NULL };
    unsigned seen = 0;
    static char text[200];
    for (unsigned i = 0; i < sizeof(text); i++)
        text[i] = (char)('A' + i % 26);
    serial_write(&S, SERIAL_FCR, SERIAL_FCR_FIFO_EN);
    serial_write(&S, SERIAL_MCR, SERIAL_MCR_OUT2 | SERIAL_MCR_DTR | SERIAL_MCR_RTS);
    g.ier = SERIAL_IER_ERBFI | SERIAL_IER_ELSI;
    serial_write(&S, SERIAL_IER, g.ier);
    ck_assert_uint_eq(R.nirq, 0);

    /* start_tx: set THRI; the rising edge starts the handler chain. */
    g.out = text;
    g.len = sizeof(text);
    g.ier |= SERIAL_IER_ETBEI;
    serial_write(&S, SERIAL_IER, g.ier);
    ck_assert_uint_gt(deliver(&g, &seen), 0);
    ck_assert_uint_eq(R.ntx, sizeof(text));
    ck_assert_mem_eq(R.tx, text, sizeof(text));
    ck_assert_int_eq(S.irq_level, 0);          /* nothing left pending */

    /* Host input while idle: one edge, all bytes read. */
    fill_rx(40, 'a');
    ck_assert_uint_eq(deliver(&g, &seen), 1);
    ck_assert_uint_eq(g.ngot, 40);
    ck_assert_int_eq(S.irq_level, 0);
    fill_rx(3, 'x');                           /* and again: a fresh edge */
    ck_assert_uint_eq(deliver(&g, &seen), 1);
    ck_assert_uint_eq(g.ngot, 43);
    ck_assert_uint_eq(g.got[42], 'z');

    /* Second transmission while input keeps arriving. */
    g.pos = 0;
    g.len = 100;
    g.ier |= SERIAL_IER_ETBEI;
    serial_write(&S, SERIAL_IER, g.ier);
    fill_rx(10, '0');
    deliver(&g, &seen);
    ck_assert_uint_eq(R.ntx, sizeof(text) + 100);
    ck_assert_uint_eq(g.ngot, 53);
    ck_assert_int_eq(S.irq_level, 0);
    /* the level only ever alternated */
    for (unsigned i = 0; i < R.nirq && i < 4096; i++)
        ck_assert_int_eq(R.irq[i], (int)(i % 2 == 0));
}
END_TEST

START_TEST(irq_callback_only_on_change)
{
    serial_write(&S, SERIAL_FCR, SERIAL_FCR_FIFO_EN);
    serial_write(&S, SERIAL_IER, SERIAL_IER_ERBFI);
    ck_assert_uint_eq(R.nirq, 0);
    fill_rx(1, 'a');
    ck_assert_uint_eq(R.nirq, 1);
    fill_rx(1, 'b');                                  /* already high */
    serial_write(&S, SERIAL_IER, SERIAL_IER_ERBFI | SERIAL_IER_ETBEI);
    serial_read(&S, SERIAL_IIR);
    serial_read(&S, SERIAL_LSR);
    ck_assert_uint_eq(R.nirq, 1);
    serial_read(&S, SERIAL_RBR);
    ck_assert_uint_eq(R.nirq, 1);                     /* one byte left */
    serial_read(&S, SERIAL_RBR);
    ck_assert_uint_eq(R.nirq, 1);                     /* THRE still pending */
    serial_read(&S, SERIAL_IIR);                      /* reports and clears THRE */
    ck_assert_uint_eq(R.nirq, 2);
    ck_assert_int_eq(R.irq[0], 1);
    ck_assert_int_eq(R.irq[1], 0);
    serial_read(&S, SERIAL_IIR);
    serial_write(&S, SERIAL_SCR, 1);
    ck_assert_uint_eq(R.nirq, 2);
    ck_assert_int_eq(S.irq_level, 0);
}
END_TEST

START_TEST(reset_lowers_irq)
{
    serial_write(&S, SERIAL_IER, SERIAL_IER_ETBEI);
    serial_write(&S, SERIAL_SCR, 9);
    serial_write(&S, SERIAL_FCR, SERIAL_FCR_FIFO_EN);
    fill_rx(4, 'a');
    ck_assert_int_eq(last_level(), 1);
    serial_reset(&S);
    ck_assert_int_eq(last_level(), 0);
    ck_assert_uint_eq(R.rx_ready, 1);
    ck_assert_uint_eq(serial_read(&S, SERIAL_IER), 0);
    ck_assert_uint_eq(serial_read(&S, SERIAL_SCR), 0);
    ck_assert_uint_eq(serial_read(&S, SERIAL_LSR), SERIAL_LSR_THRE | SERIAL_LSR_TEMT);
    ck_assert_uint_eq(serial_rx_space(&S), 1);
}
END_TEST

START_TEST(offsets_above_7_ignored)
{
    serial_write(&S, SERIAL_SCR, 0x42);
    serial_write(&S, SERIAL_IER, 0x01);
    uint8_t before[8];
    for (unsigned i = 0; i < 8; i++)
        before[i] = serial_read(&S, i == SERIAL_RBR ? SERIAL_SCR : i);
    for (unsigned off = 8; off < 300; off++) {
        serial_write(&S, off, 0xff);
        ck_assert_uint_eq(serial_read(&S, off), 0);
    }
    serial_write(&S, ~0u, 0xff);
    ck_assert_uint_eq(serial_read(&S, ~0u), 0);
    for (unsigned i = 0; i < 8; i++)
        ck_assert_uint_eq(serial_read(&S, i == SERIAL_RBR ? SERIAL_SCR : i), before[i]);
    ck_assert_uint_eq(R.ntx, 0);
    ck_assert_uint_eq(R.nirq, 0);
}
END_TEST

START_TEST(bus_adapter)
{
    struct bus b;
    bus_init(&b);
    ck_assert_int_eq(bus_register(&b, 0x3f8, 8, &serial_bus_ops, &S), 0);
    uint8_t v = 'Q';
    ck_assert_int_eq(bus_access(&b, 0x3f8, &v, 1, true), 0);
    ck_assert_uint_eq(R.ntx, 1);
    ck_assert_uint_eq(R.tx[0], 'Q');
    uint8_t lsr = 0;
    ck_assert_int_eq(bus_access(&b, 0x3fd, &lsr, 1, false), 0);
    ck_assert_uint_eq(lsr, SERIAL_LSR_THRE | SERIAL_LSR_TEMT);
    /* wide accesses: one byte access per port, in order */
    uint8_t w[2] = { 'R', 0x05 };
    ck_assert_int_eq(bus_access(&b, 0x3f8, w, 2, true), 0);   /* THR, then IER */
    ck_assert_uint_eq(R.ntx, 2);
    ck_assert_uint_eq(R.tx[1], 'R');
    ck_assert_uint_eq(serial_read(&S, SERIAL_IER), 0x05);
    uint8_t r4[4] = { 0 };
    serial_write(&S, SERIAL_SCR, 0x77);
    ck_assert_int_eq(bus_access(&b, 0x3fc, r4, 4, false), 0); /* MCR LSR MSR SCR */
    ck_assert_uint_eq(r4[0], 0);
    ck_assert_uint_eq(r4[1], SERIAL_LSR_THRE | SERIAL_LSR_TEMT);
    ck_assert_uint_eq(r4[2], SERIAL_MSR_DCD | SERIAL_MSR_DSR | SERIAL_MSR_CTS);
    ck_assert_uint_eq(r4[3], 0x77);
    /* the adapter itself never reads past offset 7 */
    uint8_t junk[8];
    memset(junk, 0xee, sizeof(junk));
    serial_bus_ops.read(&S, 6, junk, 4);
    ck_assert_uint_eq(junk[1], 0x77);
    ck_assert_uint_eq(junk[2], 0);
    ck_assert_uint_eq(junk[3], 0);
    memset(junk, 0xee, sizeof(junk));
    serial_bus_ops.write(&S, 7, junk, 4);
    ck_assert_uint_eq(serial_read(&S, SERIAL_SCR), 0xee);
    serial_bus_ops.read(&S, UINT64_MAX, junk, 2);
    ck_assert_uint_eq(junk[0], 0);
    ck_assert_uint_eq(junk[1], 0);
}
END_TEST

START_TEST(two_instances_independent)
{
    struct serial s2;
    struct rec r2;
    memset(&r2, 0, sizeof(r2));
    serial_init(&s2, &ops, &r2);
    serial_write(&S, SERIAL_SCR, 1);
    serial_write(&s2, SERIAL_SCR, 2);
    serial_write(&S, SERIAL_IER, SERIAL_IER_ETBEI);
    serial_write(&s2, SERIAL_THR, 'x');
    ck_assert_uint_eq(serial_read(&S, SERIAL_SCR), 1);
    ck_assert_uint_eq(serial_read(&s2, SERIAL_SCR), 2);
    ck_assert_uint_eq(R.nirq, 1);
    ck_assert_uint_eq(r2.nirq, 0);
    ck_assert_uint_eq(R.ntx, 0);
    ck_assert_uint_eq(r2.ntx, 1);
    serial_destroy(&s2);
}
END_TEST

START_TEST(null_ops_are_fine)
{
    struct serial s2;
    serial_init(&s2, NULL, NULL);
    serial_write(&s2, SERIAL_IER, 0x0f);
    serial_write(&s2, SERIAL_THR, 'x');
    serial_write(&s2, SERIAL_MCR, SERIAL_MCR_LOOP);
    serial_write(&s2, SERIAL_THR, 'y');
    ck_assert_int_eq(s2.irq_level, 1);
    ck_assert_uint_eq(serial_read(&s2, SERIAL_RBR), 'y');
    serial_write(&s2, SERIAL_MCR, 0);
    serial_destroy(&s2);
}
END_TEST

/* A host thread feeding input while the "guest" polls: nothing lost or
 * reordered, and the FIFO never over-fills. */
#define STREAM_LEN 20000
static void *producer(void *arg)
{
    (void)arg;
    uint8_t buf[37];
    size_t sent = 0;
    while (sent < STREAM_LEN) {
        size_t n = STREAM_LEN - sent < sizeof(buf) ? STREAM_LEN - sent : sizeof(buf);
        for (size_t i = 0; i < n; i++)
            buf[i] = (uint8_t)((sent + i) * 31);
        size_t k = serial_rx(&S, buf, n);
        sent += k;
        if (k < n)
            sched_yield();
    }
    return NULL;
}

START_TEST(concurrent_host_input)
{
    serial_write(&S, SERIAL_FCR, SERIAL_FCR_FIFO_EN);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, producer, NULL), 0);
    size_t got = 0;
    int ok = 1;
    while (got < STREAM_LEN) {
        uint8_t lsr = serial_read(&S, SERIAL_LSR);
        ok &= !(lsr & SERIAL_LSR_OE);
        if (lsr & SERIAL_LSR_DR) {
            ok &= serial_read(&S, SERIAL_RBR) == (uint8_t)(got * 31);
            got++;
        } else {
            sched_yield();
        }
    }
    pthread_join(t, NULL);
    ck_assert(ok);
    ck_assert_uint_eq(got, STREAM_LEN);
    ck_assert_uint_ge(R.rx_ready, 1);
}
END_TEST

/* Snapshots (SNAP_DEV_SERIAL): a UART part-way through its work saves,
 * and loads into a fresh one exactly (its registers, its receive FIFO and
 * what the guest reads next); every malformed record is refused with a
 * reason, and the states the model can be in pass the check. */
START_TEST(snapshot_state)
{
    serial_write(&S, SERIAL_FCR, SERIAL_FCR_FIFO_EN);
    serial_write(&S, SERIAL_LCR, 0x03);
    serial_write(&S, SERIAL_MCR, SERIAL_MCR_DTR | SERIAL_MCR_OUT2);
    serial_write(&S, SERIAL_SCR, 0x5a);
    serial_write(&S, SERIAL_IER, SERIAL_IER_ERBFI | SERIAL_IER_ETBEI);
    fill_rx(SERIAL_FIFO, 0x10);
    for (int i = 0; i < 5; i++)
        (void)serial_read(&S, SERIAL_RBR);   /* the FIFO wraps: head not 0 */
    fill_rx(5, 0x80);
    struct serial_state a, b;
    serial_save(&S, &a);
    const char *why = NULL;
    ck_assert_int_eq(serial_state_check(&a, &why), 0);
    ck_assert_uint_eq(a.rx_len, SERIAL_FIFO);
    ck_assert_uint_eq(a.rx_head, 5);
    ck_assert_uint_eq(a.scr, 0x5a);
    ck_assert_uint_eq(a.irq_level, 1);
    struct rec r2;
    memset(&r2, 0, sizeof r2);
    struct serial s2;
    serial_init(&s2, &ops, &r2);
    serial_load(&s2, &a);
    ck_assert_uint_eq(r2.nirq, 0);               /* no callback: the line is the IOAPIC's */
    serial_save(&s2, &b);
    ck_assert_mem_eq(&a, &b, sizeof a);
    /* both go on the same way */
    for (unsigned i = 0; i < SERIAL_FIFO + 2; i++) {
        ck_assert_uint_eq(serial_read(&S, SERIAL_LSR), serial_read(&s2, SERIAL_LSR));
        ck_assert_uint_eq(serial_read(&S, SERIAL_IIR), serial_read(&s2, SERIAL_IIR));
        ck_assert_uint_eq(serial_read(&S, SERIAL_RBR), serial_read(&s2, SERIAL_RBR));
    }
    ck_assert_uint_eq(serial_read(&s2, SERIAL_SCR), 0x5a);
    serial_destroy(&s2);

    /* malformed records */
#define BAD(stmt, text) do {                                              \
        struct serial_state m = a;                                        \
        stmt;                                                             \
        why = NULL;                                                       \
        ck_assert_int_eq(serial_state_check(&m, &why), -EINVAL);          \
        ck_assert_ptr_nonnull(why);                                       \
        ck_assert_msg(strstr(why, text), "%s", why);                      \
    } while (0)
    BAD(m.rx_len = SERIAL_FIFO + 1, "receive FIFO position");
    BAD(m.rx_head = SERIAL_FIFO, "receive FIFO position");
    BAD(m.rx_head = 0xff, "receive FIFO position");
    BAD(m.ier = 0x10, "IER");
    BAD(m.ier = 0x80, "IER");
    BAD(m.mcr = 0x20, "MCR");
    BAD(m.mcr = 0x80, "MCR");
    BAD(m.iir = 0x08, "IIR");                   /* an ID the model never gives */
    BAD(m.iir = 0x03, "IIR");
    BAD(m.iir = 0x41, "IIR");                   /* one FIFO bit */
    BAD(m.iir = 0x81, "IIR");
    BAD(m.iir = 0x12, "IIR");                   /* bits 5:4 */
    BAD(m.thr_ipending = 2, "flag byte");
    BAD(m.irq_level = 7, "flag byte");
    BAD(m.pad[0] = 1, "padding");
    BAD(m.pad[1] = 0x80, "padding");
#undef BAD
    /* edges that are fine */
    struct serial_state ok = a;
    ok.rx_len = SERIAL_FIFO;
    ok.rx_head = SERIAL_FIFO - 1;
    ok.ier = 0x0f;
    ok.mcr = SERIAL_MCR_MASK;
    ok.iir = 0xc1;
    ck_assert_int_eq(serial_state_check(&ok, NULL), 0);
    static const uint8_t ids[] = { 0x00, 0x01, 0x02, 0x04, 0x06, 0xc0, 0xc6 };
    for (size_t i = 0; i < sizeof ids; i++) {
        ok.iir = ids[i];
        ck_assert_msg(serial_state_check(&ok, NULL) == 0, "iir 0x%02x refused", ids[i]);
    }
    /* a new UART's state */
    struct serial s3;
    serial_init(&s3, NULL, NULL);
    serial_save(&s3, &b);
    ck_assert_int_eq(serial_state_check(&b, NULL), 0);
    ck_assert_uint_eq(b.iir, SERIAL_IIR_NO_INT);
    serial_destroy(&s3);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("serial");
    TCase *tc = tcase_create("16550a");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, reset_values);
    tcase_add_test(tc, dlab_switching);
    tcase_add_test(tc, thr_write_calls_tx);
    tcase_add_test(tc, upper_bits_read_zero);
    tcase_add_test(tc, loopback_tx_to_rx);
    tcase_add_test(tc, loopback_msr_mirrors_mcr);
    tcase_add_test(tc, msr_deltas);
    tcase_add_test(tc, rx_fifo_fill_and_drain);
    tcase_add_test(tc, rx_without_fifo_holds_one);
    tcase_add_test(tc, loopback_overrun);
    tcase_add_test(tc, fcr_fifo_control);
    tcase_add_test(tc, iir_each_source);
    tcase_add_test(tc, iir_priorities);
    tcase_add_test(tc, disabled_sources_do_not_interrupt);
    tcase_add_test(tc, thre_interrupt);
    tcase_add_test(tc, linux_thre_probes);
    tcase_add_test(tc, linux_style_interrupt_tx_rx);
    tcase_add_test(tc, irq_callback_only_on_change);
    tcase_add_test(tc, reset_lowers_irq);
    tcase_add_test(tc, offsets_above_7_ignored);
    tcase_add_test(tc, bus_adapter);
    tcase_add_test(tc, two_instances_independent);
    tcase_add_test(tc, null_ops_are_fine);
    tcase_add_test(tc, concurrent_host_input);
    tcase_add_test(tc, snapshot_state);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
