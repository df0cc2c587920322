/* Fuzz the i8042 keyboard controller (devices/legacy/i8042.c): the input is
 * a program of guest port accesses, host Ctrl+Alt+Del presses and runs of
 * an interrupt handler; the invariants of docs/devices.md ("i8042") are
 * checked after every step.
 *
 * Input: a sequence of ops; op byte k = b & 7, its operands follow:
 *   0 read   [p]            i8042_read(port p & 1 ? 0x64 : 0x60)
 *   1 write  [p][val]       i8042_write(same port)
 *   2 cad                   i8042_push_ctrl_alt_del
 *   3 bus rd [p]            the bus op (locked, callbacks), len 1 << (b >> 3 & 3)
 *   4 bus wr [p][len bytes] the bus op, same lengths
 *   5 isr                   one port 0x60 read per IRQ 1 edge received, as
 *                           Linux's i8042_interrupt; then no keyboard byte
 *                           may be left waiting with the interrupt on
 *   6 cad, locked           i8042_ctrl_alt_del (callbacks)
 *   7 cad, checked          if the queue is empty and the interrupt on:
 *                           press Ctrl+Alt+Del and take it through the
 *                           handler; the bytes must be the scan codes of
 *                           the guest's set (CTR bit 6)
 * A missing operand ends the program. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "devices/legacy/i8042.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct watch {
    struct i8042 *k;
    unsigned edges;      /* IRQ 1 edges not yet handled */
    uint64_t resets;     /* reset callbacks */
};

static void w_irq(void *o) { ((struct watch *)o)->edges++; }
static void w_reset(void *o) { ((struct watch *)o)->resets++; }
static const struct i8042_ops w_ops = { .reset = w_reset, .irq = w_irq };

static const uint8_t SET2[] = { 0x14, 0x11, 0xe0, 0x71, 0xe0, 0xf0, 0x71, 0xf0, 0x11, 0xf0, 0x14 };
static const uint8_t SET1[] = { 0x1d, 0x38, 0xe0, 0x53, 0xe0, 0xd3, 0xb8, 0x9d };

static void check_state(const struct watch *w)
{
    const struct i8042 *k = w->k;
    FUZZ_ASSERT(k->len <= I8042_BUF);
    FUZZ_ASSERT(k->head < I8042_BUF);
    FUZZ_ASSERT(!k->head_is_resp || k->len > 0);
    uint8_t s = i8042_status(k);
    FUZZ_ASSERT(!!(s & I8042_STR_OBF) == (k->len > 0));
    FUZZ_ASSERT(!(s & (I8042_STR_IBF | I8042_STR_AUXDATA)));
    FUZZ_ASSERT(s & I8042_STR_KEYLOCK);
    FUZZ_ASSERT(k->resets == w->resets);
}

static void take(struct watch *w, unsigned act)
{
    FUZZ_ASSERT((act & ~(unsigned)(I8042_ACT_IRQ | I8042_ACT_RESET)) == 0);
    if (act & I8042_ACT_IRQ) {
        /* an edge is only for a keyboard byte the guest wants IRQ 1 for */
        FUZZ_ASSERT(w->k->len > 0 && !w->k->head_is_resp);
        FUZZ_ASSERT(w->k->ctr & I8042_CTR_KBDINT);
        w->edges++;
    }
    if (act & I8042_ACT_RESET)
        w->resets++;
}

static void isr(struct watch *w, uint8_t *got, unsigned *ngot, unsigned max)
{
    struct i8042 *k = w->k;
    unsigned limit = w->edges + I8042_BUF + 1;   /* each read beyond the edges pops a byte */
    for (unsigned guard = 0; w->edges && guard < limit; guard++) {
        w->edges--;
        if (!(i8042_status(k) & I8042_STR_OBF))
            continue;                 /* taken by polling already */
        uint8_t v;
        unsigned a = i8042_read(k, 0, &v);
        if (got && *ngot < max)
            got[(*ngot)++] = v;
        take(w, a);
    }
    FUZZ_ASSERT(w->edges == 0);       /* a chain of edges ends */
    /* nothing stranded: a keyboard byte with the interrupt on had its edge */
    FUZZ_ASSERT(!(k->len && !k->head_is_resp && (k->ctr & I8042_CTR_KBDINT)));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint32_t lens[4] = { 1, 2, 4, 8 };
    struct i8042 k;
    struct watch w = { .k = &k, .edges = 0, .resets = 0 };
    i8042_init(&k, &w_ops, &w);
    check_state(&w);
    size_t i = 0;
    while (i < size) {
        uint8_t op = data[i++];
        switch (op & 7) {
        case 0: {
            if (i >= size) goto out;
            unsigned port = data[i++] & 1 ? 4 : 0;
            uint8_t len = k.len, v = 0xa5;
            take(&w, i8042_read(&k, port, &v));
            if (port == 0 && len == 0)
                FUZZ_ASSERT(v == 0);
            if (port == 0 && len)
                FUZZ_ASSERT(k.len == len - 1);
            break;
        }
        case 1: {
            if (i + 2 > size) goto out;
            unsigned port = data[i] & 1 ? 4 : 0;
            uint8_t v = data[i + 1];
            i += 2;
            unsigned a = i8042_write(&k, port, v);
            FUZZ_ASSERT(!(a & I8042_ACT_RESET) || (port == 4 && v == I8042_CMD_RESET));
            if (port == 4 && v == I8042_CMD_RESET)
                FUZZ_ASSERT(a & I8042_ACT_RESET);
            take(&w, a);
            break;
        }
        case 2: {
            unsigned n = (k.ctr & I8042_CTR_XLATE) ? sizeof SET1 : sizeof SET2;
            uint8_t len = k.len;
            int r = i8042_push_ctrl_alt_del(&k);
            if (r == -ENOBUFS) {
                FUZZ_ASSERT(I8042_BUF - len < (int)n && k.len == len);
            } else {
                FUZZ_ASSERT(r >= 0 && k.len == len + n);
                take(&w, (unsigned)r);
            }
            break;
        }
        case 3: {
            if (i >= size) goto out;
            const struct bus_ops *b = data[i++] & 1 ? &i8042_cmd_ops : &i8042_data_ops;
            uint8_t buf[8];
            uint32_t len = lens[op >> 3 & 3];
            memset(buf, 0xa5, sizeof buf);
            b->read(&k, 0, buf, len);
            if (len > 1)
                for (uint32_t j = 0; j < len; j++)
                    FUZZ_ASSERT(buf[j] == 0xff);
            break;
        }
        case 4: {
            if (i >= size) goto out;
            const struct bus_ops *b = data[i++] & 1 ? &i8042_cmd_ops : &i8042_data_ops;
            uint32_t len = lens[op >> 3 & 3];
            if (i + len > size) goto out;
            b->write(&k, 0, data + i, len);
            i += len;
            break;
        }
        case 5:
            isr(&w, NULL, NULL, 0);
            break;
        case 6: {
            uint8_t len = k.len;
            int r = i8042_ctrl_alt_del(&k);
            FUZZ_ASSERT(r == 0 || r == -ENOBUFS);
            FUZZ_ASSERT(r == 0 ? k.len > len : k.len == len);
            break;
        }
        case 7: {
            isr(&w, NULL, NULL, 0);
            if (k.len || !(k.ctr & I8042_CTR_KBDINT))
                break;
            const uint8_t *want = (k.ctr & I8042_CTR_XLATE) ? SET1 : SET2;
            unsigned n = (k.ctr & I8042_CTR_XLATE) ? sizeof SET1 : sizeof SET2;
            int r = i8042_push_ctrl_alt_del(&k);
            FUZZ_ASSERT(r == I8042_ACT_IRQ);
            take(&w, (unsigned)r);
            uint8_t got[I8042_BUF];
            unsigned ngot = 0;
            isr(&w, got, &ngot, sizeof got);
            FUZZ_ASSERT(ngot == n && memcmp(got, want, n) == 0);
            FUZZ_ASSERT(k.len == 0);
            break;
        }
        }
        check_state(&w);
    }
out:
    check_state(&w);
    i8042_destroy(&k);
    return 0;
}
