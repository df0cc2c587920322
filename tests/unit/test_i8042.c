/* Unit tests for the i8042 keyboard controller (devices/legacy/i8042.c):
 * every controller and keyboard command, Linux's probe as its i8042 and
 * atkbd drivers run it (no command may go unanswered: Linux would wait
 * 0.5 s for each), Ctrl+Alt+Del in both scan code sets, IRQ edges, the
 * reset, and malformed or flooding guests. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "devices/legacy/i8042.h"
#include "vmm/base/bus.h"
#include "vmm/base/layout.h"

#define DATA 0
#define CMD 4

static struct i8042 K;

static void setup(void) { i8042_init(&K, NULL, NULL); }
static void teardown(void) { i8042_destroy(&K); }

static unsigned wr(unsigned port, uint8_t v) { return i8042_write(&K, port, v); }

static uint8_t rd_data(unsigned *act)
{
    uint8_t v = 0x5a;
    unsigned a = i8042_read(&K, DATA, &v);
    if (act)
        *act = a;
    return v;
}

static uint8_t st(void)
{
    uint8_t v = 0;
    ck_assert_uint_eq(i8042_read(&K, CMD, &v), 0);
    ck_assert_uint_eq(v, i8042_status(&K));
    return v;
}

/* Linux's __i8042_command(): input buffer empty before each byte, then
 * each response byte must already be there (moat answers at once; Linux
 * would poll 0.5 s). Returns the responses in out. */
static void command(uint8_t c, const uint8_t *params, unsigned np, uint8_t *out, unsigned nr)
{
    ck_assert_uint_eq(st() & I8042_STR_IBF, 0);
    ck_assert_uint_eq(wr(CMD, c), 0);
    for (unsigned i = 0; i < np; i++) {
        ck_assert_uint_eq(st() & I8042_STR_IBF, 0);
        wr(DATA, params[i]);
    }
    for (unsigned i = 0; i < nr; i++) {
        ck_assert_msg(st() & I8042_STR_OBF, "command %#x: response %u missing", c, i);
        unsigned a;
        out[i] = rd_data(&a);
        ck_assert_uint_eq(a, 0);   /* controller answers raise no IRQ */
    }
}

/* i8042_flush(): at most 16 bytes, then the output buffer is empty. */
static unsigned linux_flush(void)
{
    unsigned n = 0;
    while ((st() & I8042_STR_OBF) && n < I8042_BUF + 1) {
        rd_data(NULL);
        n++;
    }
    ck_assert_uint_le(n, I8042_BUF);
    return n;
}

/* A byte for the keyboard (i8042_kbd_write + the interrupt handler that
 * takes each answer): the answers each come with one IRQ 1 edge. */
static unsigned kbd(uint8_t b, uint8_t *out, unsigned max)
{
    unsigned a = wr(DATA, b), n = 0;
    while (a & I8042_ACT_IRQ) {
        ck_assert(st() & I8042_STR_OBF);
        ck_assert_uint_eq(st() & I8042_STR_AUXDATA, 0);
        ck_assert_uint_lt(n, max);
        out[n++] = rd_data(&a);
    }
    ck_assert_uint_eq(st() & I8042_STR_OBF, 0);
    return n;
}

START_TEST(power_on)
{
    uint8_t s = st();
    ck_assert_uint_eq(s, I8042_STR_SYS | I8042_STR_KEYLOCK);
    unsigned a = 1;
    ck_assert_uint_eq(rd_data(&a), 0);   /* empty: 0, nothing happens */
    ck_assert_uint_eq(a, 0);
    ck_assert_uint_eq(st(), s);
    ck_assert_uint_eq(K.ctr, I8042_CTR_DEFAULT);
}
END_TEST

/* What Linux 6.1's i8042_probe() and atkbd_connect() send, in order. */
START_TEST(linux_probe)
{
    uint8_t r[4], ctr[2];
    linux_flush();                                           /* i8042_controller_check */
    command(I8042_CMD_SELF_TEST, NULL, 0, r, 1);             /* i8042_controller_selftest */
    ck_assert_uint_eq(r[0], I8042_SELF_TEST_OK);
    command(I8042_CMD_READ_CTR, NULL, 0, &ctr[0], 1);        /* i8042_controller_init */
    command(I8042_CMD_READ_CTR, NULL, 0, &ctr[1], 1);
    ck_assert_uint_eq(ctr[0], ctr[1]);
    ck_assert(st() & I8042_STR_KEYLOCK);                     /* no "Keylock active" */
    uint8_t c = (uint8_t)((ctr[0] | I8042_CTR_KBDDIS) & ~I8042_CTR_KBDINT);
    ck_assert_uint_eq(c & I8042_CTR_XLATE, 0);               /* direct: set 2 */
    command(I8042_CMD_WRITE_CTR, &c, 1, NULL, 0);
    ck_assert_uint_eq(K.ctr, c);
    linux_flush();
    /* i8042_check_aux: the loop answers without AUXDATA (Linux: "auxerr"),
     * the AUX test fails: no mouse port, and nothing timed out */
    uint8_t p = 0x5a;
    ck_assert_uint_eq(wr(CMD, I8042_CMD_WRITE_AUX), 0);
    wr(DATA, p);
    ck_assert(st() & I8042_STR_OBF);
    ck_assert_uint_eq(st() & I8042_STR_AUXDATA, 0);
    rd_data(NULL);
    command(I8042_CMD_AUX_TEST, NULL, 0, r, 1);
    ck_assert(r[0] != 0 && r[0] != 0xfa && r[0] != 0xff);
    /* i8042_enable_kbd_port */
    c = (uint8_t)((c & ~I8042_CTR_KBDDIS) | I8042_CTR_KBDINT);
    command(I8042_CMD_WRITE_CTR, &c, 1, NULL, 0);
    ck_assert_uint_eq(K.ctr, c);
    /* atkbd_probe: deactivate, GETID; atkbd_activate: SETREP, ENABLE; LEDs */
    ck_assert_uint_eq(kbd(0xf5, r, 4), 1);
    ck_assert_uint_eq(r[0], I8042_KBD_ACK);
    ck_assert_uint_eq(kbd(0xf2, r, 4), 3);
    ck_assert_uint_eq(r[0], I8042_KBD_ACK);
    ck_assert_uint_eq(r[1], 0xab);
    ck_assert_uint_eq(r[2], 0x83);
    ck_assert_uint_eq(kbd(0xf3, r, 4), 1);
    ck_assert_uint_eq(kbd(0x00, r, 4), 1);
    ck_assert_uint_eq(r[0], I8042_KBD_ACK);
    ck_assert_uint_eq(kbd(0xf4, r, 4), 1);
    ck_assert_uint_eq(kbd(0xed, r, 4), 1);
    ck_assert_uint_eq(kbd(0x00, r, 4), 1);
    ck_assert_uint_eq(r[0], I8042_KBD_ACK);
    /* KBD_TEST (port test, some Linux paths) */
    command(I8042_CMD_KBD_TEST, NULL, 0, r, 1);
    ck_assert_uint_eq(r[0], 0);
    ck_assert_uint_eq(K.resets, 0);
}
END_TEST

START_TEST(controller_commands)
{
    uint8_t r;
    command(0x25, NULL, 0, &r, 1);          /* RAM read */
    ck_assert_uint_eq(r, 0);
    uint8_t v = 0x77;
    command(0x65, &v, 1, NULL, 0);          /* RAM write: swallowed, not for the keyboard */
    ck_assert_uint_eq(st() & I8042_STR_OBF, 0);
    command(I8042_CMD_READ_CTR, NULL, 0, &r, 1);
    ck_assert_uint_eq(r, I8042_CTR_DEFAULT);
    command(I8042_CMD_AUX_DIS, NULL, 0, NULL, 0);
    ck_assert(K.ctr & I8042_CTR_AUXDIS);
    command(I8042_CMD_AUX_EN, NULL, 0, NULL, 0);
    ck_assert(!(K.ctr & I8042_CTR_AUXDIS));
    command(I8042_CMD_KBD_DIS, NULL, 0, NULL, 0);
    ck_assert(K.ctr & I8042_CTR_KBDDIS);
    command(I8042_CMD_KBD_EN, NULL, 0, NULL, 0);
    ck_assert(!(K.ctr & I8042_CTR_KBDDIS));
    v = 0xdd;
    command(I8042_CMD_WRITE_OUTP, &v, 1, NULL, 0);
    command(I8042_CMD_READ_OUTP, NULL, 0, &r, 1);
    ck_assert_uint_eq(r, 0xdd);
    /* D2: as if typed, with IRQ 1 */
    ck_assert_uint_eq(wr(CMD, I8042_CMD_WRITE_KBD), 0);
    ck_assert_uint_eq(wr(DATA, 0x1c), I8042_ACT_IRQ);
    unsigned a;
    ck_assert_uint_eq(rd_data(&a), 0x1c);
    ck_assert_uint_eq(a, 0);
    /* D4: a byte for the (absent) mouse: dropped, no answer */
    ck_assert_uint_eq(wr(CMD, I8042_CMD_TO_AUX), 0);
    ck_assert_uint_eq(wr(DATA, 0xf4), 0);
    ck_assert_uint_eq(st() & I8042_STR_OBF, 0);
    ck_assert_uint_eq(K.resets, 0);
}
END_TEST

START_TEST(status_cmd_data_bit)
{
    wr(CMD, I8042_CMD_KBD_EN);
    ck_assert(st() & I8042_STR_CMDDAT);
    wr(DATA, 0xf4);
    ck_assert(!(st() & I8042_STR_CMDDAT));
}
END_TEST

START_TEST(keyboard_commands)
{
    uint8_t r[4];
    ck_assert_uint_eq(kbd(0xee, r, 4), 1);   /* echo */
    ck_assert_uint_eq(r[0], 0xee);
    ck_assert_uint_eq(kbd(0xff, r, 4), 2);   /* reset: ACK, BAT ok */
    ck_assert_uint_eq(r[0], I8042_KBD_ACK);
    ck_assert_uint_eq(r[1], I8042_KBD_BAT_OK);
    ck_assert_uint_eq(kbd(0xf0, r, 4), 1);   /* scan code set: get */
    ck_assert_uint_eq(kbd(0x00, r, 4), 2);
    ck_assert_uint_eq(r[1], 2);
    ck_assert_uint_eq(kbd(0xf0, r, 4), 1);   /* set 2: ACK only */
    ck_assert_uint_eq(kbd(0x02, r, 4), 1);
    for (unsigned b = 0; b < 256; b++) {     /* anything else: ACK (a parameter after ED/F0/F3 too) */
        unsigned n = kbd((uint8_t)b, r, 4);
        ck_assert_uint_ge(n, 1);
        if (b != 0xee)
            ck_assert_uint_eq(r[0], I8042_KBD_ACK);
        if (K.kbd_cmd)
            kbd(0x01, r, 4);
    }
    ck_assert_uint_eq(K.resets, 0);
}
END_TEST

/* No IRQ 1 when the guest has it off; the answer still waits. */
START_TEST(keyboard_without_interrupt)
{
    uint8_t c = 0;
    command(I8042_CMD_WRITE_CTR, &c, 1, NULL, 0);
    ck_assert_uint_eq(wr(DATA, 0xf2), 0);
    ck_assert(st() & I8042_STR_OBF);
    unsigned a;
    ck_assert_uint_eq(rd_data(&a), I8042_KBD_ACK);
    ck_assert_uint_eq(a, 0);
    ck_assert_uint_eq(rd_data(&a), 0xab);
    ck_assert_uint_eq(rd_data(&a), 0x83);
    ck_assert_uint_eq(st() & I8042_STR_OBF, 0);
}
END_TEST

static void expect_keys(const uint8_t *want, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        ck_assert(st() & I8042_STR_OBF);
        unsigned a;
        ck_assert_uint_eq(rd_data(&a), want[i]);
        ck_assert_uint_eq(a, i + 1 < n ? I8042_ACT_IRQ : 0);   /* one edge per byte */
    }
    ck_assert_uint_eq(st() & I8042_STR_OBF, 0);
}

static const uint8_t SET2[] = { 0x14, 0x11, 0xe0, 0x71, 0xe0, 0xf0, 0x71, 0xf0, 0x11, 0xf0, 0x14 };
static const uint8_t SET1[] = { 0x1d, 0x38, 0xe0, 0x53, 0xe0, 0xd3, 0xb8, 0x9d };

START_TEST(ctrl_alt_del_set2)
{
    ck_assert_int_eq(i8042_push_ctrl_alt_del(&K), I8042_ACT_IRQ);
    expect_keys(SET2, sizeof SET2);
    ck_assert_uint_eq(K.keys_sent, 1);
    /* again: the keys were released, so it works again */
    ck_assert_int_eq(i8042_push_ctrl_alt_del(&K), I8042_ACT_IRQ);
    expect_keys(SET2, sizeof SET2);
}
END_TEST

START_TEST(ctrl_alt_del_translated)
{
    uint8_t c = I8042_CTR_DEFAULT | I8042_CTR_XLATE;
    command(I8042_CMD_WRITE_CTR, &c, 1, NULL, 0);
    ck_assert_int_eq(i8042_push_ctrl_alt_del(&K), I8042_ACT_IRQ);
    expect_keys(SET1, sizeof SET1);
}
END_TEST

START_TEST(ctrl_alt_del_full)
{
    ck_assert_int_eq(i8042_push_ctrl_alt_del(&K), I8042_ACT_IRQ);
    ck_assert_int_eq(i8042_push_ctrl_alt_del(&K), -ENOBUFS);   /* never half a sequence */
    ck_assert_uint_eq(K.len, sizeof SET2);
    for (unsigned i = 0; i < 6; i++)
        rd_data(NULL);
    ck_assert_int_eq(i8042_push_ctrl_alt_del(&K), 0);   /* room again; not empty: no new edge */
    ck_assert_uint_eq(K.len, 2 * sizeof SET2 - 6);
    ck_assert_uint_le(K.len, I8042_BUF);
    for (unsigned i = 0; i < 5; i++)
        rd_data(NULL);
    expect_keys(SET2, sizeof SET2);
}
END_TEST

/* Keys while the interrupt is off wait; turning it on raises IRQ 1. */
START_TEST(ctrl_alt_del_interrupt_off)
{
    uint8_t c = I8042_CTR_SYS;
    command(I8042_CMD_WRITE_CTR, &c, 1, NULL, 0);
    ck_assert_int_eq(i8042_push_ctrl_alt_del(&K), 0);
    ck_assert(st() & I8042_STR_OBF);
    ck_assert_uint_eq(wr(CMD, I8042_CMD_WRITE_CTR), 0);
    ck_assert_uint_eq(wr(DATA, I8042_CTR_DEFAULT), I8042_ACT_IRQ);
    expect_keys(SET2, sizeof SET2);
}
END_TEST

/* Keys that arrive behind a controller answer: the answer first (no IRQ),
 * the keys after it, the first one with its edge. */
START_TEST(ctrl_alt_del_behind_answer)
{
    wr(CMD, I8042_CMD_READ_CTR);
    ck_assert_int_eq(i8042_push_ctrl_alt_del(&K), 0);
    unsigned a;
    ck_assert_uint_eq(rd_data(&a), I8042_CTR_DEFAULT);
    ck_assert_uint_eq(a, I8042_ACT_IRQ);
    expect_keys(SET2, sizeof SET2);
}
END_TEST

/* A keyboard command drops keys not yet read (a keyboard clears its
 * buffer on a command); a controller command's answer replaces them. */
START_TEST(commands_drop_pending_keys)
{
    uint8_t r[4];
    i8042_push_ctrl_alt_del(&K);
    ck_assert_uint_eq(kbd(0xf4, r, 4), 1);
    ck_assert_uint_eq(r[0], I8042_KBD_ACK);
    i8042_push_ctrl_alt_del(&K);
    command(I8042_CMD_SELF_TEST, NULL, 0, r, 1);
    ck_assert_uint_eq(r[0], I8042_SELF_TEST_OK);
    ck_assert_uint_eq(st() & I8042_STR_OBF, 0);
}
END_TEST

START_TEST(reset)
{
    ck_assert_uint_eq(wr(CMD, I8042_CMD_RESET), I8042_ACT_RESET);
    ck_assert_uint_eq(wr(CMD, I8042_CMD_RESET), I8042_ACT_RESET);   /* each one asks */
    ck_assert_uint_eq(K.resets, 2);
    uint8_t r[4];
    ck_assert_uint_eq(kbd(I8042_CMD_RESET, r, 4), 1);   /* on the data port: a keyboard "resend" */
    wr(CMD, I8042_CMD_WRITE_CTR);                        /* a parameter, not a command */
    ck_assert_uint_eq(wr(DATA, I8042_CMD_RESET), 0);
    ck_assert_uint_eq(K.ctr, I8042_CMD_RESET);
    ck_assert_uint_eq(K.resets, 2);
}
END_TEST

/* Malformed sequences: unknown commands answer nothing; a command
 * replaces one still waiting for its byte; reads of an empty buffer. */
START_TEST(malformed)
{
    static const uint8_t known[] = { 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xad, 0xae, 0xd0, 0xd1, 0xd2, 0xd3, 0xd4, 0xfe };
    for (unsigned c = 0x80; c < 256; c++) {
        if (memchr(known, (int)c, sizeof known))
            continue;
        ck_assert_uint_eq(wr(CMD, (uint8_t)c), 0);
        ck_assert_uint_eq(st() & I8042_STR_OBF, 0);
        ck_assert_uint_eq(K.param_cmd, 0);
        ck_assert_uint_eq(K.ctr, I8042_CTR_DEFAULT);
    }
    for (unsigned c = 0; c < 0x20; c++) {
        ck_assert_uint_eq(wr(CMD, (uint8_t)c), 0);
        ck_assert_uint_eq(st() & I8042_STR_OBF, 0);
    }
    /* WRITE_CTR, then a command instead of its byte: the byte goes to the keyboard */
    wr(CMD, I8042_CMD_WRITE_CTR);
    wr(CMD, I8042_CMD_KBD_EN);
    ck_assert_uint_eq(wr(DATA, 0x00), I8042_ACT_IRQ);
    ck_assert_uint_eq(K.ctr, I8042_CTR_DEFAULT);
    ck_assert_uint_eq(rd_data(NULL), I8042_KBD_ACK);
    /* empty reads */
    for (unsigned i = 0; i < 100; i++) {
        unsigned a = 1;
        ck_assert_uint_eq(rd_data(&a), 0);
        ck_assert_uint_eq(a, 0);
    }
    /* other ports of the state machine */
    uint8_t v = 0x33;
    ck_assert_uint_eq(i8042_read(&K, 1, &v), 0);
    ck_assert_uint_eq(v, 0);
    ck_assert_uint_eq(i8042_write(&K, 1, I8042_CMD_RESET), 0);
    ck_assert_uint_eq(K.resets, 0);
}
END_TEST

/* A guest that writes whatever, as fast as it can: the queue stays in
 * bounds and only 0xFE on port 0x64 resets. */
START_TEST(flooding)
{
    uint32_t x = 12345;
    uint64_t want_resets = 0;
    for (unsigned i = 0; i < 40000; i++) {
        x = x * 1103515245u + 12345u;
        uint8_t v = (uint8_t)(x >> 16);
        unsigned port = (x >> 8) & 1 ? CMD : DATA;
        unsigned op = (x >> 28) & 3;
        if (op == 0) {
            uint8_t r;
            i8042_read(&K, port, &r);
        } else if (op == 3 && (x & 0x100)) {
            int r = i8042_push_ctrl_alt_del(&K);
            ck_assert(r == 0 || r == I8042_ACT_IRQ || r == -ENOBUFS);
        } else {
            unsigned a = i8042_write(&K, port, v);
            if (port == CMD && v == I8042_CMD_RESET && !(a & I8042_ACT_RESET))
                ck_abort_msg("0xFE did not reset");
            if (a & I8042_ACT_RESET)
                want_resets++;
            ck_assert(!(a & I8042_ACT_RESET) || (port == CMD && v == I8042_CMD_RESET));
        }
        ck_assert_uint_le(K.len, I8042_BUF);
        ck_assert_uint_lt(K.head, I8042_BUF);
        ck_assert_uint_eq(!!(st() & I8042_STR_OBF), K.len > 0);
    }
    ck_assert_uint_eq(K.resets, want_resets);
}
END_TEST

/* The bus ops and the locked call: callbacks, wide accesses. */
struct rec { unsigned irqs, resets; };
static void rec_irq(void *o) { ((struct rec *)o)->irqs++; }
static void rec_reset(void *o) { ((struct rec *)o)->resets++; }
static const struct i8042_ops rops = { .reset = rec_reset, .irq = rec_irq };

START_TEST(bus_and_callbacks)
{
    struct rec R = { 0, 0 };
    struct i8042 k;
    struct bus b;
    i8042_init(&k, &rops, &R);
    bus_init(&b);
    ck_assert_int_eq(bus_register(&b, PORT_I8042_DATA, 1, &i8042_data_ops, &k), 0);
    ck_assert_int_eq(bus_register(&b, PORT_I8042_CMD, 1, &i8042_cmd_ops, &k), 0);
    /* Linux's reboot=k: kb_wait() sees IBF clear, then 0xFE */
    uint8_t v = 0xff;
    ck_assert_int_eq(bus_access(&b, PORT_I8042_CMD, &v, 1, false), 0);
    ck_assert_uint_eq(v & I8042_STR_IBF, 0);
    v = I8042_CMD_RESET;
    ck_assert_int_eq(bus_access(&b, PORT_I8042_CMD, &v, 1, true), 0);
    ck_assert_uint_eq(R.resets, 1);
    /* Ctrl+Alt+Del: one edge now, one per byte read but the last */
    ck_assert_int_eq(i8042_ctrl_alt_del(&k), 0);
    ck_assert_uint_eq(R.irqs, 1);
    ck_assert_int_eq(i8042_ctrl_alt_del(&k), -ENOBUFS);
    for (unsigned i = 0; i < sizeof SET2; i++) {
        ck_assert_int_eq(bus_access(&b, PORT_I8042_DATA, &v, 1, false), 0);
        ck_assert_uint_eq(v, SET2[i]);
    }
    ck_assert_uint_eq(R.irqs, sizeof SET2);
    /* wide accesses: all ones, no effect */
    uint8_t w[2] = { I8042_CMD_RESET, I8042_CMD_RESET };
    i8042_cmd_ops.write(&k, 0, w, 2);
    i8042_data_ops.write(&k, 0, w, 2);
    i8042_cmd_ops.read(&k, 0, w, 2);
    ck_assert_uint_eq(w[0], 0xff);
    ck_assert_uint_eq(w[1], 0xff);
    ck_assert_uint_eq(R.resets, 1);
    ck_assert_uint_eq(R.irqs, sizeof SET2);
    i8042_destroy(&k);
    /* no callbacks at all */
    i8042_init(&k, NULL, NULL);
    v = I8042_CMD_RESET;
    i8042_cmd_ops.write(&k, 0, &v, 1);
    ck_assert_int_eq(i8042_ctrl_alt_del(&k), 0);
    ck_assert_uint_eq(k.resets, 1);
    i8042_destroy(&k);
}
END_TEST

/* Snapshot state: a mid-command state with queued bytes survives
 * save/load into a fresh controller exactly (what the guest reads next
 * and what its next write means); every malformed field is refused with a
 * reason, and the check accepts each state the model can reach. */
START_TEST(snapshot_state)
{
    wr(CMD, I8042_CMD_WRITE_CTR);
    wr(DATA, I8042_CTR_DEFAULT | I8042_CTR_XLATE);
    wr(DATA, 0xed);                               /* SET_LEDS: waits for its byte */
    ck_assert_int_ge(i8042_push_ctrl_alt_del(&K), 0);
    wr(CMD, I8042_CMD_WRITE_OUTP);                /* waits for its byte */
    struct i8042_state a, b;
    i8042_save(&K, &a);
    const char *why = NULL;
    ck_assert_int_eq(i8042_state_check(&a, &why), 0);
    struct i8042 k2;
    i8042_init(&k2, NULL, NULL);
    i8042_load(&k2, &a);
    i8042_save(&k2, &b);
    ck_assert_mem_eq(&a, &b, sizeof a);
    /* both continue the same way */
    for (int i = 0; i < 20; i++) {
        uint8_t v1 = 1, v2 = 2;
        unsigned a1 = i8042_read(&K, DATA, &v1), a2 = i8042_read(&k2, DATA, &v2);
        ck_assert_uint_eq(v1, v2);
        ck_assert_uint_eq(a1, a2);
        ck_assert_uint_eq(i8042_status(&K), i8042_status(&k2));
    }
    ck_assert_uint_eq(i8042_write(&K, DATA, 0x42), i8042_write(&k2, DATA, 0x42));
    uint8_t o1 = 0, o2 = 0;
    wr(CMD, I8042_CMD_READ_OUTP);
    i8042_write(&k2, CMD, I8042_CMD_READ_OUTP);
    i8042_read(&K, DATA, &o1);
    i8042_read(&k2, DATA, &o2);
    ck_assert_uint_eq(o1, 0x42);
    ck_assert_uint_eq(o2, 0x42);
    i8042_destroy(&k2);

    /* malformed states */
#define BAD(stmt, text) do {                                              \
        struct i8042_state m = a;                                         \
        stmt;                                                             \
        why = NULL;                                                       \
        ck_assert_int_eq(i8042_state_check(&m, &why), -EINVAL);           \
        ck_assert_ptr_nonnull(why);                                       \
        ck_assert_msg(strstr(why, text), "%s", why);                      \
    } while (0)
    BAD(m.head = I8042_BUF, "queue position");
    BAD(m.head = 0xff, "queue position");
    BAD(m.len = I8042_BUF + 1, "queue position");
    BAD(m.last_was_cmd = 2, "flag byte");
    BAD(m.head_is_resp = 0x80, "flag byte");
    BAD((m.head_is_resp = 1, m.len = 0), "empty queue");
    BAD(m.pad[6] = 1, "padding");
    BAD(m.param_cmd = 0x20, "controller command");
    BAD(m.param_cmd = I8042_CMD_RESET, "controller command");
    BAD(m.param_cmd = 0xd5, "controller command");
    BAD(m.kbd_cmd = 0xf2, "keyboard command");
    BAD(m.kbd_cmd = 0x01, "keyboard command");
#undef BAD
    /* edges that are fine */
    struct i8042_state ok = a;
    ok.head = I8042_BUF - 1;
    ok.len = I8042_BUF;
    ok.param_cmd = 0x7f;
    ok.kbd_cmd = 0xf3;
    ck_assert_int_eq(i8042_state_check(&ok, NULL), 0);
    ok.param_cmd = I8042_CMD_TO_AUX;
    ok.kbd_cmd = 0;
    ok.len = 0;
    ok.head_is_resp = 0;
    ck_assert_int_eq(i8042_state_check(&ok, NULL), 0);
    /* a new controller's state */
    struct i8042 k3;
    i8042_init(&k3, NULL, NULL);
    i8042_save(&k3, &b);
    ck_assert_int_eq(i8042_state_check(&b, NULL), 0);
    ck_assert_uint_eq(b.ctr, I8042_CTR_DEFAULT);
    i8042_destroy(&k3);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("i8042");
    TCase *tc = tcase_create("i8042");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, power_on);
    tcase_add_test(tc, linux_probe);
    tcase_add_test(tc, controller_commands);
    tcase_add_test(tc, status_cmd_data_bit);
    tcase_add_test(tc, keyboard_commands);
    tcase_add_test(tc, keyboard_without_interrupt);
    tcase_add_test(tc, ctrl_alt_del_set2);
    tcase_add_test(tc, ctrl_alt_del_translated);
    tcase_add_test(tc, ctrl_alt_del_full);
    tcase_add_test(tc, ctrl_alt_del_interrupt_off);
    tcase_add_test(tc, ctrl_alt_del_behind_answer);
    tcase_add_test(tc, commands_drop_pending_keys);
    tcase_add_test(tc, reset);
    tcase_add_test(tc, malformed);
    tcase_add_test(tc, flooding);
    tcase_add_test(tc, bus_and_callbacks);
    tcase_add_test(tc, snapshot_state);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
