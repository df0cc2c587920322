/* Tiny runtime for moat's freestanding test guests.
 *
 * A guest is a plain static ELF64 loaded at 1 MiB. Every vCPU enters
 * rt/start.S at the same time in 64-bit mode (identity-mapped first 4 GiB,
 * interrupts off, RDI = vCPU index, RSI = vCPU count, RDX = RAM bytes, own
 * 4 KiB stack) and calls guest_main(cpu, ncpus, mem). When guest_main returns,
 * its value is written to the moat status port and the machine is reset.
 *
 * Built with -mgeneral-regs-only: no SSE/x87. PVM emulates ring-0 code, so no
 * int3/int n, popcnt, xsave, rdtscp, movbe, vmcall, and loops stay short. */
#ifndef MOAT_GUEST_RT_H
#define MOAT_GUEST_RT_H

#include <stddef.h>
#include <stdint.h>

#include "expect.h"

/* Ports and addresses of the machine moat builds (vmm/base/layout.h,
 * devices/legacy/moatdev.h); repeated here because guests include no host headers. */
#define COM1            0x3F8
#define COM1_THR        (COM1 + 0)
#define COM1_IER        (COM1 + 1)
#define COM1_FCR        (COM1 + 2)
#define COM1_IIR        (COM1 + 2)
#define COM1_LCR        (COM1 + 3)
#define COM1_MCR        (COM1 + 4)
#define COM1_LSR        (COM1 + 5)
#define COM1_MSR        (COM1 + 6)
#define COM1_SCR        (COM1 + 7)
#define LSR_THRE        0x20
#define I8042_DATA      0x60
#define I8042_CMD       0x64
#define I8042_RESET     0xFE
#define MOAT_PORT       0x0F40
#define MOAT_STATUS     (MOAT_PORT + 0)
#define MOAT_EVENT      (MOAT_PORT + 1)
#define MOAT_SCRATCH    (MOAT_PORT + 4)
#define MOAT_MAGIC_PORT (MOAT_PORT + 8)
#define MOAT_MAGIC      0x54414F4Du
#define MOAT_EV_INIT    1
#define MOAT_MMIO       0xD0000000ull
#define MOAT_MMIO_SCRATCH (MOAT_MMIO + 8)
#define MMIO_START      0xC0000000ull
#define IOAPIC_BASE     0xFEC00000ull
#define LAPIC_BASE      0xFEE00000ull
#define ELF_STACKS      0x40000ull
#define ELF_STACK_SZ    0x1000ull
#define MAX_CPUS        64
#define SEL_CODE64      0x10
#define SEL_DATA        0x18

int guest_main(uint64_t cpu, uint64_t ncpus, uint64_t mem);

/* RSP and RFLAGS each vCPU had at entry (index < MAX_CPUS), saved by start.S. */
extern volatile uint64_t rt_entry_rsp[MAX_CPUS];
extern volatile uint64_t rt_entry_rflags[MAX_CPUS];

static inline void outb(uint16_t port, uint8_t v) { __asm__ volatile("outb %0, %1" :: "a"(v), "Nd"(port)); }
static inline void outw(uint16_t port, uint16_t v) { __asm__ volatile("outw %0, %1" :: "a"(v), "Nd"(port)); }
static inline void outl(uint16_t port, uint32_t v) { __asm__ volatile("outl %0, %1" :: "a"(v), "Nd"(port)); }
static inline uint8_t inb(uint16_t port) { uint8_t v; __asm__ volatile("inb %1, %0" : "=a"(v) : "Nd"(port)); return v; }
static inline uint16_t inw(uint16_t port) { uint16_t v; __asm__ volatile("inw %1, %0" : "=a"(v) : "Nd"(port)); return v; }
static inline uint32_t inl(uint16_t port) { uint32_t v; __asm__ volatile("inl %1, %0" : "=a"(v) : "Nd"(port)); return v; }

/* MMIO through explicit single mov instructions of the given width. */
static inline uint8_t mmio_read8(uint64_t a) { uint8_t v; __asm__ volatile("movb (%1), %0" : "=q"(v) : "r"(a) : "memory"); return v; }
static inline uint16_t mmio_read16(uint64_t a) { uint16_t v; __asm__ volatile("movw (%1), %0" : "=r"(v) : "r"(a) : "memory"); return v; }
static inline uint32_t mmio_read32(uint64_t a) { uint32_t v; __asm__ volatile("movl (%1), %0" : "=r"(v) : "r"(a) : "memory"); return v; }
static inline uint64_t mmio_read64(uint64_t a) { uint64_t v; __asm__ volatile("movq (%1), %0" : "=r"(v) : "r"(a) : "memory"); return v; }
static inline void mmio_write8(uint64_t a, uint8_t v) { __asm__ volatile("movb %0, (%1)" :: "q"(v), "r"(a) : "memory"); }
static inline void mmio_write16(uint64_t a, uint16_t v) { __asm__ volatile("movw %0, (%1)" :: "r"(v), "r"(a) : "memory"); }
static inline void mmio_write32(uint64_t a, uint32_t v) { __asm__ volatile("movl %0, (%1)" :: "r"(v), "r"(a) : "memory"); }
static inline void mmio_write64(uint64_t a, uint64_t v) { __asm__ volatile("movq %0, (%1)" :: "r"(v), "r"(a) : "memory"); }

/* Width-generic forms (len 1, 2, 4 or 8). */
uint64_t mmio_read(uint64_t addr, unsigned len);
void mmio_write(uint64_t addr, uint64_t val, unsigned len);

static inline void cpu_relax(void) { __asm__ volatile("pause" ::: "memory"); }
static inline uint64_t rdtsc(void)
{
    uint32_t lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    return ((uint64_t)hi << 32) | lo;
}

/* Serial console (COM1). Each call holds a spinlock so lines from several
 * vCPUs do not interleave inside one call. */
void serial_putc(char c);
void serial_puts(const char *s);
void serial_puthex(uint64_t v);              /* "0x" and lowercase hex digits */
void serial_putdec(uint64_t v);

/* The decimal value of KEY=N on the command line moat gives the guest
 * (at 0x20000), or dflt when KEY= is not there. */
uint64_t cmdline_uint(const char *key, uint64_t dflt);

/* Formatting into a caller's buffer; each returns the new end (NUL-terminated). */
char *fmt_str(char *p, const char *s);
char *fmt_dec(char *p, uint64_t v);
char *fmt_hex(char *p, uint64_t v);

/* Does the kernel command line (RT_CMDLINE, where moat puts it for an ELF
 * guest) contain w? */
#define RT_CMDLINE      0x20000ull
int rt_cmdline_has(const char *w);
/* Write status to the moat status port, reset through the i8042 and halt. */
__attribute__((noreturn)) void report(uint8_t status);
/* Reset without writing a status (moat must call that a crash). */
__attribute__((noreturn)) void reset_machine(void);
/* For secondary vCPUs: spin (interrupts off) until moat ends the run. */
__attribute__((noreturn)) void park(void);

/* Spin until *p >= want or roughly `cycles` TSC cycles passed (plus an
 * iteration cap in case the TSC does not move). Returns the last value read. */
uint64_t wait_at_least(volatile uint64_t *p, uint64_t want, uint64_t cycles);

/* gcc may emit calls to these even in freestanding code. */
void *memset(void *d, int c, size_t n);
void *memcpy(void *restrict d, const void *restrict s, size_t n);
void *memmove(void *d, const void *s, size_t n);
int memcmp(const void *a, const void *b, size_t n);
size_t strlen(const char *s);

#endif
