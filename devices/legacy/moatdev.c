/* The moat control device (ports + MMIO page).
 * Contract: devices/legacy/moatdev.h. Docs: docs/devices.md ("Legacy devices"). */
#include "devices/legacy/moatdev.h"

#include <errno.h>
#include <string.h>

_Static_assert(sizeof(struct moatdev_state) == 16, "the snapshot's control device record is 16 bytes");

void moatdev_init(struct moatdev *d, const struct moatdev_ops *ops, void *opaque)
{
    memset(d, 0, sizeof(*d));
    pthread_mutex_init(&d->lock, NULL);
    d->ops = ops;
    d->opaque = opaque;
}

void moatdev_destroy(struct moatdev *d)
{
    pthread_mutex_destroy(&d->lock);
}

/* A naturally aligned access of a width the window supports. */
static int access_ok(uint64_t off, uint32_t len, uint64_t win, uint32_t max_len)
{
    if (len != 1 && len != 2 && len != 4 && len != 8)
        return 0;
    if (len > max_len || off >= win || len > win - off)
        return 0;
    return (off & (len - 1)) == 0;
}

/* Little-endian byte lanes of a register of n bytes at reg_off. Copies the
 * bytes of [off, off + len) that fall inside the register. */
static void lanes_read(uint8_t *data, uint64_t off, uint32_t len,
                       uint64_t reg_off, unsigned n, uint64_t val)
{
    for (uint32_t i = 0; i < len; i++) {
        uint64_t a = off + i;
        if (a >= reg_off && a < reg_off + n)
            data[i] = (uint8_t)(val >> (8 * (a - reg_off)));
    }
}

static uint64_t lanes_write(const uint8_t *data, uint64_t off, uint32_t len,
                            uint64_t reg_off, unsigned n, uint64_t val)
{
    for (uint32_t i = 0; i < len; i++) {
        uint64_t a = off + i;
        if (a >= reg_off && a < reg_off + n) {
            unsigned sh = (unsigned)(8 * (a - reg_off));
            val = (val & ~(0xffull << sh)) | ((uint64_t)data[i] << sh);
        }
    }
    return val;
}

/* The two windows: each a scratch register as wide as its widest access
 * and the 4-byte magic. */
struct window {
    uint64_t len;
    unsigned width;
    uint64_t scratch, magic;
    bool mmio;
};

static const struct window pio_win = { MOATDEV_PIO_LEN, 4, MOATDEV_PORT_SCRATCH, MOATDEV_PORT_MAGIC, false };
static const struct window mmio_win = { MOATDEV_MMIO_LEN, 8, MOATDEV_MMIO_SCRATCH, MOATDEV_MMIO_MAGIC, true };

static void win_read(struct moatdev *d, const struct window *w, uint64_t off, uint8_t *data, uint32_t len)
{
    memset(data, 0, len);
    if (!access_ok(off, len, w->len, w->width))
        return;
    pthread_mutex_lock(&d->lock);
    uint64_t scratch = w->mmio ? d->mmio_scratch : d->pio_scratch;
    pthread_mutex_unlock(&d->lock);
    lanes_read(data, off, len, w->scratch, w->width, scratch);
    lanes_read(data, off, len, w->magic, 4, MOATDEV_MAGIC);
}

/* A write (access_ok) that touches the window's scratch register. */
static void scratch_write(struct moatdev *d, const struct window *w, uint64_t off, const uint8_t *data,
                          uint32_t len)
{
    if (off < w->scratch || off >= w->scratch + w->width)
        return;
    pthread_mutex_lock(&d->lock);
    if (w->mmio)
        d->mmio_scratch = lanes_write(data, off, len, w->scratch, w->width, d->mmio_scratch);
    else
        d->pio_scratch = (uint32_t)lanes_write(data, off, len, w->scratch, w->width, d->pio_scratch);
    pthread_mutex_unlock(&d->lock);
}

static void pio_read(void *opaque, uint64_t off, uint8_t *data, uint32_t len)
{
    win_read(opaque, &pio_win, off, data, len);
}

static void pio_write(void *opaque, uint64_t off, const uint8_t *data, uint32_t len)
{
    struct moatdev *d = opaque;
    if (!access_ok(off, len, pio_win.len, pio_win.width))
        return;
    if (off == MOATDEV_PORT_STATUS) {
        if (d->ops && d->ops->exit_status)
            d->ops->exit_status(d->opaque, data[0]);
        return;
    }
    if (off == MOATDEV_PORT_EVENT) {
        if (len == 1 && d->ops && d->ops->event)
            d->ops->event(d->opaque, data[0]);
        return;
    }
    scratch_write(d, &pio_win, off, data, len);
    /* magic and unassigned ports: ignored */
}

static void mmio_read(void *opaque, uint64_t off, uint8_t *data, uint32_t len)
{
    win_read(opaque, &mmio_win, off, data, len);
}

static void mmio_write(void *opaque, uint64_t off, const uint8_t *data, uint32_t len)
{
    if (access_ok(off, len, mmio_win.len, mmio_win.width))
        scratch_write(opaque, &mmio_win, off, data, len);
}

const struct bus_ops moatdev_pio_ops = { pio_read, pio_write };
const struct bus_ops moatdev_mmio_ops = { mmio_read, mmio_write };

/* ---- snapshots ---- */

void moatdev_save(struct moatdev *d, struct moatdev_state *st)
{
    memset(st, 0, sizeof(*st));
    pthread_mutex_lock(&d->lock);
    st->pio_scratch = d->pio_scratch;
    st->mmio_scratch = d->mmio_scratch;
    pthread_mutex_unlock(&d->lock);
}

int moatdev_state_check(const struct moatdev_state *st, const char **why)
{
    if (st->pad) {
        if (why)
            *why = "control device: padding not zero";
        return -EINVAL;
    }
    return 0;
}

void moatdev_load(struct moatdev *d, const struct moatdev_state *st)
{
    pthread_mutex_lock(&d->lock);
    d->pio_scratch = st->pio_scratch;
    d->mmio_scratch = st->mmio_scratch;
    pthread_mutex_unlock(&d->lock);
}
