/* kbd: the i8042 as Linux's i8042 and atkbd drivers set it up, then a
 * Ctrl+Alt+Del from the host (moat vmm's PUT /actions SendCtrlAltDel, or
 * moat_send_ctrl_alt_del) taken byte by byte on IRQ 1.
 *
 * IRQ 1 is seen through the legacy PIC with interrupts off: IRQ 1 is the
 * only one unmasked, its IRR bit is read (OCW3) and acknowledged by a poll
 * (OCW3 P), as an interrupt handler would be entered; then the handler's
 * one read of port 0x60. Every controller answer must be there at once
 * (Linux would wait 0.5 s for each missing one).
 *
 * Console: "kbd: ready" once set up, then "kbd: got XX XX ..." and
 * "kbd: ok" or "kbd: FAIL ...". Exit codes (status port, then 0xFE reset):
 *   0 the set 2 scan codes of Ctrl+Alt+Del pressed and released, one IRQ 1
 *     edge each
 *   10 self-test   11 CTR read   12 AUX loop came back as mouse data
 *   13 AUX test passed (a mouse port)   14 keyboard port test   15 CTR write
 *   16 no IRQ 1 for a keyboard answer   17 GETID answer wrong
 *   20 no key within the wait (kbdwait=N seconds, about; default 20)
 *   21 wrong bytes   22 IRQ 1 with an empty output buffer
 * With xlate=1 on the command line it turns translation on and expects the
 * set 1 scan codes. */
#include "rt.h"

#define STR_OBF     0x01
#define STR_IBF     0x02
#define STR_AUXDATA 0x20
#define CTR_KBDINT  0x01
#define CTR_KBDDIS  0x10
#define CTR_XLATE   0x40
#define PIC1_CMD    0x20
#define PIC1_DATA   0x21
#define PIC2_CMD    0xA0
#define PIC2_DATA   0xA1

static uint8_t status(void) { return inb(I8042_CMD); }

/* Linux's i8042_wait_write / i8042_wait_read, with a short cap: moat
 * answers at once, so a miss here is a failure, not a wait. */
static int wait_write(void)
{
    for (int i = 0; i < 1000; i++)
        if (!(status() & STR_IBF))
            return 0;
    return -1;
}

static int wait_read(void)
{
    for (int i = 0; i < 1000; i++)
        if (status() & STR_OBF)
            return 0;
    return -1;
}

/* __i8042_command: cmd, np parameter bytes, nr answers. */
static int command(uint8_t cmd, const uint8_t *p, int np, uint8_t *r, int nr)
{
    if (wait_write())
        return -1;
    outb(I8042_CMD, cmd);
    for (int i = 0; i < np; i++) {
        if (wait_write())
            return -1;
        outb(I8042_DATA, p[i]);
    }
    for (int i = 0; i < nr; i++) {
        if (wait_read())
            return -1;
        r[i] = inb(I8042_DATA);
    }
    return 0;
}

static void flush(void)
{
    for (int i = 0; i < 16 && (status() & STR_OBF); i++)
        (void)inb(I8042_DATA);
}

/* Is IRQ 1 pending at the PIC? If so, acknowledge it (poll). */
static int irq1_take(void)
{
    outb(PIC1_CMD, 0x0A);                 /* OCW3: read IRR */
    if (!(inb(PIC1_CMD) & 0x02))
        return 0;
    outb(PIC1_CMD, 0x0C);                 /* OCW3: poll = INTA */
    (void)inb(PIC1_CMD);
    outb(PIC1_CMD, 0x20);                 /* EOI (harmless after a poll) */
    return 1;
}

/* Wait up to `cycles` TSC cycles for IRQ 1, then read the byte it is for. */
static int irq_byte(uint64_t cycles, uint8_t *b)
{
    uint64_t t0 = rdtsc();
    for (;;) {
        if (irq1_take()) {
            if (!(status() & STR_OBF))
                return -22;
            *b = inb(I8042_DATA);
            return 0;
        }
        uint64_t now = rdtsc();
        if (now < t0)
            t0 = now;       /* restored on a host whose TSC is behind: wait anew */
        if (now - t0 > cycles)
            return -1;
        cpu_relax();
    }
}

static void puthex2(uint8_t v)
{
    static const char d[] = "0123456789abcdef";
    serial_putc(d[v >> 4]);
    serial_putc(d[v & 15]);
}

__attribute__((noreturn)) static void fail(const char *why, uint8_t code)
{
    serial_puts("kbd: FAIL ");
    serial_puts(why);
    serial_puts("\n");
    report(code);
}

int guest_main(uint64_t cpu, uint64_t ncpus, uint64_t mem)
{
    (void)ncpus; (void)mem;
    if (cpu != 0)
        park();
    /* the PIC: vectors 0x20.., only IRQ 1 unmasked; interrupts stay off */
    outb(PIC1_CMD, 0x11); outb(PIC1_DATA, 0x20); outb(PIC1_DATA, 0x04); outb(PIC1_DATA, 0x01);
    outb(PIC2_CMD, 0x11); outb(PIC2_DATA, 0x28); outb(PIC2_DATA, 0x02); outb(PIC2_DATA, 0x01);
    outb(PIC2_DATA, 0xff);
    outb(PIC1_DATA, 0xfd);
    while (irq1_take())
        ;

    uint8_t r[4], ctr[2];
    flush();
    if (command(0xaa, 0, 0, r, 1) || r[0] != 0x55)
        fail("self-test", 10);
    if (command(0x20, 0, 0, &ctr[0], 1) || command(0x20, 0, 0, &ctr[1], 1) || ctr[0] != ctr[1])
        fail("CTR read", 11);
    /* xlate=1: translation on (scan code set 1), as a guest that kept the
     * BIOS's setting has it; the host's bytes then depend on the CTR the
     * controller holds (kept across a snapshot: test_api's
     * i8042_state_across_snapshot). */
    uint8_t c = (uint8_t)((ctr[0] | CTR_KBDDIS) & ~CTR_KBDINT);
    if (cmdline_uint("xlate", 0))
        c |= CTR_XLATE;
    if (command(0x60, &c, 1, 0, 0))
        fail("CTR write", 15);
    flush();
    /* i8042_check_aux: the loop's answer must not be mouse data */
    r[0] = 0x5a;
    if (command(0xd3, r, 1, 0, 0) || wait_read())
        fail("AUX loop: no answer", 12);
    if (status() & STR_AUXDATA)
        fail("AUX loop: mouse data", 12);
    (void)inb(I8042_DATA);
    if (command(0xa9, 0, 0, r, 1) || r[0] == 0 || r[0] == 0xfa || r[0] == 0xff)
        fail("AUX test: a mouse port", 13);
    if (command(0xab, 0, 0, r, 1) || r[0] != 0)
        fail("keyboard port test", 14);
    /* i8042_enable_kbd_port */
    c = (uint8_t)((c & ~CTR_KBDDIS) | CTR_KBDINT);
    if (command(0x60, &c, 1, 0, 0) || command(0x20, 0, 0, r, 1) || r[0] != c)
        fail("CTR write", 15);
    int xlate = (c & CTR_XLATE) != 0;
    /* atkbd_probe: GETID, the answers on IRQ 1 */
    if (wait_write())
        fail("GETID", 17);
    outb(I8042_DATA, 0xf2);
    for (int i = 0; i < 3; i++)
        if (irq_byte(2000000000ull, &r[i]))
            fail("no IRQ 1 for the GETID answer", 16);
    if (r[0] != 0xfa || r[1] != 0xab || r[2] != 0x83)
        fail("GETID answer", 17);
    outb(I8042_DATA, 0xf4);                /* enable */
    if (irq_byte(2000000000ull, &r[0]) || r[0] != 0xfa)
        fail("no IRQ 1 for the ENABLE answer", 16);

    serial_puts("kbd: ready\n");
    static const uint8_t set2[] = { 0x14, 0x11, 0xe0, 0x71, 0xe0, 0xf0, 0x71, 0xf0, 0x11, 0xf0, 0x14 };
    static const uint8_t set1[] = { 0x1d, 0x38, 0xe0, 0x53, 0xe0, 0xd3, 0xb8, 0x9d };
    const uint8_t *want = xlate ? set1 : set2;
    unsigned n = xlate ? sizeof set1 : sizeof set2;
    uint64_t wait = cmdline_uint("kbdwait", 20) * 3000000000ull;
    uint8_t got[16];
    unsigned ngot = 0;
    int e = irq_byte(wait, &got[0]);
    if (e == -22)
        fail("IRQ 1 with an empty buffer", 22);
    if (e)
        fail("no key", 20);
    ngot = 1;
    while (ngot < n) {
        e = irq_byte(1000000000ull, &got[ngot]);
        if (e == -22)
            fail("IRQ 1 with an empty buffer", 22);
        if (e)
            break;
        ngot++;
    }
    serial_puts("kbd: got");
    for (unsigned i = 0; i < ngot; i++) {
        serial_putc(' ');
        puthex2(got[i]);
    }
    serial_puts("\n");
    if (ngot != n)
        fail("short", 21);
    for (unsigned i = 0; i < n; i++)
        if (got[i] != want[i])
            fail("wrong bytes", 21);
    serial_puts("kbd: ok\n");
    return 0;
}
