/* The i8042 keyboard controller and its keyboard (devices/legacy/i8042.h). */
#include "devices/legacy/i8042.h"

#include <errno.h>
#include <string.h>

void i8042_init(struct i8042 *k, const struct i8042_ops *ops, void *opaque)
{
    memset(k, 0, sizeof(*k));
    pthread_mutex_init(&k->lock, NULL);
    k->ops = ops;
    k->opaque = opaque;
    k->ctr = I8042_CTR_DEFAULT;
}

void i8042_destroy(struct i8042 *k)
{
    pthread_mutex_destroy(&k->lock);
}

uint8_t i8042_status(const struct i8042 *k)
{
    uint8_t s = I8042_STR_SYS | I8042_STR_KEYLOCK;
    if (k->len)
        s |= I8042_STR_OBF;
    if (k->last_was_cmd)
        s |= I8042_STR_CMDDAT;
    return s;
}

/* ---- the output queue ---- */

static void flush(struct i8042 *k)
{
    k->head = k->len = 0;
    k->head_is_resp = false;
}

static void push(struct i8042 *k, uint8_t b)
{
    if (k->len < I8042_BUF) {   /* callers make room first; never overflows */
        k->buf[(k->head + k->len) % I8042_BUF] = b;
        k->len++;
    }
}

/* A keyboard byte is presented at port 0x60 and the guest wants IRQ 1 for
 * it: that is a rising edge of the controller's IRQ 1 output. */
static unsigned kbd_edge(const struct i8042 *k)
{
    return k->len && !k->head_is_resp && (k->ctr & I8042_CTR_KBDINT) ? I8042_ACT_IRQ : 0;
}

/* The answer to a controller command replaces whatever was queued (as
 * Firecracker does): the driver polls for it right after the command. */
static void respond(struct i8042 *k, uint8_t b)
{
    flush(k);
    push(k, b);
    k->head_is_resp = true;
}

/* ---- the keyboard: a PS/2 keyboard that acknowledges everything ---- */

#define KBD_SET_LEDS   0xed
#define KBD_ECHO       0xee
#define KBD_SCAN_SET   0xf0
#define KBD_GET_ID     0xf2
#define KBD_SET_REP    0xf3
#define KBD_RESET      0xff

/* A byte for the keyboard. It drops what it had not sent yet (a real
 * keyboard clears its buffer on any command), answers, and the answer
 * comes with IRQ 1. */
static unsigned kbd_write(struct i8042 *k, uint8_t b)
{
    flush(k);
    if (k->kbd_cmd) {                  /* the parameter of the last command */
        uint8_t c = k->kbd_cmd;
        k->kbd_cmd = 0;
        push(k, I8042_KBD_ACK);
        if (c == KBD_SCAN_SET && b == 0)
            push(k, 2);                /* "which set": 2 */
        return kbd_edge(k);
    }
    switch (b) {
    case KBD_ECHO:
        push(k, KBD_ECHO);
        break;
    case KBD_SET_LEDS:
    case KBD_SCAN_SET:
    case KBD_SET_REP:
        k->kbd_cmd = b;
        push(k, I8042_KBD_ACK);
        break;
    case KBD_GET_ID:                   /* an MF2 keyboard */
        push(k, I8042_KBD_ACK);
        push(k, 0xab);
        push(k, 0x83);
        break;
    case KBD_RESET:
        push(k, I8042_KBD_ACK);
        push(k, I8042_KBD_BAT_OK);
        break;
    default:                           /* enable, disable, defaults, resend, ... */
        push(k, I8042_KBD_ACK);
        break;
    }
    return kbd_edge(k);
}

/* ---- snapshot state ---- */

void i8042_save(struct i8042 *k, struct i8042_state *st)
{
    memset(st, 0, sizeof(*st));
    pthread_mutex_lock(&k->lock);
    st->ctr = k->ctr;
    st->outp = k->outp;
    st->cmd = k->cmd;
    st->param_cmd = k->param_cmd;
    st->kbd_cmd = k->kbd_cmd;
    st->last_was_cmd = k->last_was_cmd;
    st->head_is_resp = k->head_is_resp;
    st->head = k->head;
    st->len = k->len;
    memcpy(st->buf, k->buf, sizeof(st->buf));
    pthread_mutex_unlock(&k->lock);
}

static int state_fail(const char **why, const char *msg)
{
    if (why)
        *why = msg;
    return -EINVAL;
}

int i8042_state_check(const struct i8042_state *st, const char **why)
{
    if (st->head >= I8042_BUF || st->len > I8042_BUF)
        return state_fail(why, "i8042: output queue position out of range");
    if (st->last_was_cmd > 1 || st->head_is_resp > 1)
        return state_fail(why, "i8042: a flag byte other than 0 or 1");
    if (st->head_is_resp && !st->len)
        return state_fail(why, "i8042: a controller answer marked in an empty queue");
    for (size_t i = 0; i < sizeof(st->pad); i++)
        if (st->pad[i])
            return state_fail(why, "i8042: padding not zero");
    /* What cmd_write leaves waiting for its byte: WRITE_CTR and the RAM
     * writes 0x61..0x7f, or one of 0xd1..0xd4. */
    uint8_t p = st->param_cmd;
    if (p && !(p >= I8042_CMD_WRITE_CTR && p <= 0x7f) && !(p >= I8042_CMD_WRITE_OUTP && p <= I8042_CMD_TO_AUX))
        return state_fail(why, "i8042: a controller command waiting for a byte that takes none");
    uint8_t c = st->kbd_cmd;
    if (c && c != KBD_SET_LEDS && c != KBD_SCAN_SET && c != KBD_SET_REP)
        return state_fail(why, "i8042: a keyboard command waiting for a byte that takes none");
    return 0;
}

void i8042_load(struct i8042 *k, const struct i8042_state *st)
{
    pthread_mutex_lock(&k->lock);
    k->ctr = st->ctr;
    k->outp = st->outp;
    k->cmd = st->cmd;
    k->param_cmd = st->param_cmd;
    k->kbd_cmd = st->kbd_cmd;
    k->last_was_cmd = st->last_was_cmd != 0;
    k->head_is_resp = st->head_is_resp != 0;
    k->head = st->head % I8042_BUF;
    k->len = st->len <= I8042_BUF ? st->len : I8042_BUF;
    memcpy(k->buf, st->buf, sizeof(k->buf));
    pthread_mutex_unlock(&k->lock);
}

/* ---- the controller ---- */

static unsigned cmd_write(struct i8042 *k, uint8_t c)
{
    k->cmd = c;
    k->param_cmd = 0;
    if (c >= 0x20 && c <= 0x3f) {
        respond(k, c == I8042_CMD_READ_CTR ? k->ctr : 0);
        return 0;
    }
    if (c >= 0x60 && c <= 0x7f) {
        k->param_cmd = c;
        return 0;
    }
    switch (c) {
    case I8042_CMD_AUX_DIS:
        k->ctr |= I8042_CTR_AUXDIS;
        break;
    case I8042_CMD_AUX_EN:
        k->ctr &= (uint8_t)~I8042_CTR_AUXDIS;
        break;
    case I8042_CMD_AUX_TEST:
        respond(k, I8042_AUX_TEST_FAIL);
        break;
    case I8042_CMD_SELF_TEST:
        respond(k, I8042_SELF_TEST_OK);
        break;
    case I8042_CMD_KBD_TEST:
        respond(k, 0);
        break;
    case I8042_CMD_KBD_DIS:
        k->ctr |= I8042_CTR_KBDDIS;
        break;
    case I8042_CMD_KBD_EN:
        k->ctr &= (uint8_t)~I8042_CTR_KBDDIS;
        break;
    case I8042_CMD_READ_OUTP:
        respond(k, k->outp);
        break;
    case I8042_CMD_WRITE_OUTP:
    case I8042_CMD_WRITE_KBD:
    case I8042_CMD_WRITE_AUX:
    case I8042_CMD_TO_AUX:
        k->param_cmd = c;
        break;
    case I8042_CMD_RESET:
        k->resets++;
        return I8042_ACT_RESET;
    default:                           /* unknown: no answer, nothing waits */
        break;
    }
    return 0;
}

static unsigned param_write(struct i8042 *k, uint8_t c, uint8_t b)
{
    unsigned act = 0;
    switch (c) {
    case I8042_CMD_WRITE_CTR: {
        uint8_t was = k->ctr;
        k->ctr = b;
        if (!(was & I8042_CTR_KBDINT))   /* interrupt just turned on: a pending key raises it */
            act = kbd_edge(k);
        break;
    }
    case I8042_CMD_WRITE_OUTP:
        k->outp = b;
        break;
    case I8042_CMD_WRITE_KBD:        /* as if the keyboard sent it */
        flush(k);
        push(k, b);
        act = kbd_edge(k);
        break;
    case I8042_CMD_WRITE_AUX:        /* no mouse port: echoed as keyboard data,
                                        which Linux's loop test takes as "no AUX" */
        respond(k, b);
        break;
    default:                         /* RAM bytes 0x61..0x7f, bytes for the mouse */
        break;
    }
    return act;
}

unsigned i8042_write(struct i8042 *k, unsigned port, uint8_t val)
{
    if (port == 4) {
        k->last_was_cmd = true;
        return cmd_write(k, val);
    }
    if (port != 0)
        return 0;
    k->last_was_cmd = false;
    if (k->param_cmd) {
        uint8_t c = k->param_cmd;
        k->param_cmd = 0;
        return param_write(k, c, val);
    }
    return kbd_write(k, val);
}

unsigned i8042_read(struct i8042 *k, unsigned port, uint8_t *val)
{
    if (port == 4) {
        *val = i8042_status(k);
        return 0;
    }
    if (port != 0 || !k->len) {
        *val = 0;
        return 0;
    }
    *val = k->buf[k->head];
    k->head = (uint8_t)((k->head + 1) % I8042_BUF);
    k->len--;
    k->head_is_resp = false;   /* only ever the last byte of a queue */
    return kbd_edge(k);        /* the next byte, if any */
}

int i8042_push_ctrl_alt_del(struct i8042 *k)
{
    static const uint8_t set2[] = { 0x14, 0x11, 0xe0, 0x71, 0xe0, 0xf0, 0x71, 0xf0, 0x11, 0xf0, 0x14 };
    static const uint8_t set1[] = { 0x1d, 0x38, 0xe0, 0x53, 0xe0, 0xd3, 0xb8, 0x9d };
    const uint8_t *seq = set2;
    unsigned n = sizeof set2;
    if (k->ctr & I8042_CTR_XLATE) {
        seq = set1;
        n = sizeof set1;
    }
    if ((unsigned)(I8042_BUF - k->len) < n)
        return -ENOBUFS;
    bool was_empty = k->len == 0;
    for (unsigned i = 0; i < n; i++)
        push(k, seq[i]);
    k->keys_sent++;
    return was_empty ? (int)kbd_edge(k) : 0;
}

/* ---- locked entry points ---- */

static void act(struct i8042 *k, unsigned a)
{
    if ((a & I8042_ACT_IRQ) && k->ops && k->ops->irq)
        k->ops->irq(k->opaque);
    if ((a & I8042_ACT_RESET) && k->ops && k->ops->reset)
        k->ops->reset(k->opaque);
}

int i8042_ctrl_alt_del(struct i8042 *k)
{
    pthread_mutex_lock(&k->lock);
    int r = i8042_push_ctrl_alt_del(k);
    pthread_mutex_unlock(&k->lock);
    if (r > 0)
        act(k, (unsigned)r);
    return r < 0 ? r : 0;
}

static void bus_read(struct i8042 *k, unsigned port, uint8_t *data, uint32_t len)
{
    if (len != 1) {             /* the ports are a byte wide */
        memset(data, 0xff, len);
        return;
    }
    pthread_mutex_lock(&k->lock);
    unsigned a = i8042_read(k, port, data);
    pthread_mutex_unlock(&k->lock);
    act(k, a);
}

static void bus_write(struct i8042 *k, unsigned port, const uint8_t *data, uint32_t len)
{
    if (len != 1)
        return;
    pthread_mutex_lock(&k->lock);
    unsigned a = i8042_write(k, port, data[0]);
    pthread_mutex_unlock(&k->lock);
    act(k, a);
}

static void i8042_data_read(void *opaque, uint64_t off, uint8_t *data, uint32_t len)
{
    bus_read(opaque, off == 0 ? 0 : 1, data, len);
}

static void i8042_data_write(void *opaque, uint64_t off, const uint8_t *data, uint32_t len)
{
    bus_write(opaque, off == 0 ? 0 : 1, data, len);
}

static void i8042_cmd_read(void *opaque, uint64_t off, uint8_t *data, uint32_t len)
{
    bus_read(opaque, off == 0 ? 4 : 1, data, len);
}

static void i8042_cmd_write(void *opaque, uint64_t off, const uint8_t *data, uint32_t len)
{
    bus_write(opaque, off == 0 ? 4 : 1, data, len);
}

const struct bus_ops i8042_data_ops = { i8042_data_read, i8042_data_write };
const struct bus_ops i8042_cmd_ops = { i8042_cmd_read, i8042_cmd_write };
