/* Kernel loaders and boot structures. Pure: works on a struct gmem and byte
 * buffers, no KVM headers, so it is unit-tested and fuzzed alone.
 * Memory map: vmm/base/layout.h; entry states: docs/boot.md. */
#ifndef MOAT_BOOT_H
#define MOAT_BOOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vmm/base/gmem.h"

enum boot_kind {
    BOOT_LINUX_BZIMAGE = 1, /* bzImage, 64-bit boot protocol entry */
    BOOT_LINUX_ELF,         /* vmlinux ELF, 64-bit entry with boot_params */
    BOOT_LINUX_PVH,         /* vmlinux ELF entered through its PVH note */
    BOOT_ELF,               /* plain static ELF64: segments at p_paddr, 64-bit entry */
};

struct boot_config {
    const uint8_t *kernel;
    size_t kernel_len;
    const uint8_t *initrd;   /* NULL if none */
    size_t initrd_len;
    const uint8_t *initrd_extra;  /* NULL, or an archive placed after the
                                   * initrd (4-byte aligned; zeros between) */
    size_t initrd_extra_len;
    const char *cmdline;     /* NUL-terminated, complete */
    unsigned ncpus;          /* 1..LAYOUT_MAX_CPUS */
    bool prefer_pvh;         /* use the PVH note of a vmlinux that has one */
    bool ram_is_zero;        /* guest RAM is fresh (all zero): the low 1 MiB
                              * (tables, zero page, command line) is not
                              * cleared again, so its pages stay untouched
                              * until written */
};

struct boot_info {
    enum boot_kind kind;
    uint64_t entry;          /* guest physical entry point */
    uint64_t zero_page;      /* boot_params (Linux) / start_info (PVH); 0 for BOOT_ELF */
    uint64_t kernel_start;   /* lowest loaded guest address */
    uint64_t kernel_end;     /* one past the highest */
    uint64_t initrd_start;   /* 0 if no initrd */
    uint64_t initrd_size;
};

/* Identify a kernel image. 0 and *kind on success; -ENOEXEC if it is neither
 * an ELF64 x86-64 executable nor a bzImage; -EINVAL if it is one of those but
 * malformed (truncated header, absurd sizes). A vmlinux is told from a plain
 * ELF by its "Linux" ELF note; PVH is only reported when prefer_pvh is set and
 * the note exists (BOOT_LINUX_ELF otherwise). */
int boot_probe(const uint8_t *img, size_t len, bool prefer_pvh, enum boot_kind *kind);

/* Load a kernel and everything it needs into guest memory: segments or the
 * protected-mode kernel, initrd, command line, boot_params with e820 (Linux)
 * or start_info with memmap (PVH), the MP table (all kinds, cfg->ncpus CPUs),
 * the boot GDT and identity page tables (first 4 GiB, 2 MiB pages).
 * Errors: -ENOEXEC/-EINVAL as boot_probe; -E2BIG command line too long;
 * -ENOMEM kernel, segment or initrd does not fit in RAM or overlaps moat's
 * low-memory structures (everything below 1 MiB is reserved). */
int boot_load(const struct gmem *m, const struct boot_config *cfg, struct boot_info *out);

/* Pieces boot_load uses, exposed for unit tests. */
int boot_setup_page_tables(const struct gmem *m);
int boot_setup_gdt(const struct gmem *m);
int boot_setup_mptable(const struct gmem *m, unsigned ncpus);

/* Where Linux's own parameters end in cmdline s: true if s has a "--"
 * word (the first, cut as the kernel's next_arg cuts words: a double quote
 * toggles quoting, so a "--" inside a quoted value does not count; a
 * quoted "\"--\"" does), with *kend the end of the kernel part (trailing
 * white space dropped) and *istart where init's arguments begin (after
 * the "--" and its white space). false: no "--", both set to strlen(s). */
bool boot_cmdline_split(const char *s, size_t *kend, size_t *istart);

/* Build a kernel command line: base, then each extra separated by a space,
 * then, if argc > 0, " -- " and the arguments. If base has a "--" word
 * (boot_cmdline_split), the extras go before it and the arguments after
 * base's init arguments, so that there is one "--". An argument containing
 * whitespace is wrapped in double quotes (Linux's parser strips them); one
 * containing a double quote or a control character, or an empty one, gives
 * -EINVAL. -E2BIG if the result (with NUL) exceeds size. */
int boot_cmdline_build(char *buf, size_t size, const char *base,
                       const char *const *extras, size_t nextras,
                       const char *const *argv, size_t argc);

/* The GDT selectors moat's boot GDT provides (docs/boot.md). */
#define BOOT_SEL_CODE32 0x08
#define BOOT_SEL_CODE64 0x10
#define BOOT_SEL_DATA   0x18
#define BOOT_SEL_TSS    0x20
#define BOOT_STACK      0x6FF0ULL /* initial RSP for Linux entries */

/* ---- Additions (boot/ helper; docs/boot.md) ---- */

/* Like boot_probe / boot_load, and on failure *why (if why is not NULL) is
 * set to a static, human-readable reason; on success it is set to "ok". */
int boot_probe_why(const uint8_t *img, size_t len, bool prefer_pvh,
                   enum boot_kind *kind, const char **why);
int boot_load_why(const struct gmem *m, const struct boot_config *cfg,
                  struct boot_info *out, const char **why);

/* The boot GDT at LAYOUT_GDT: 6 eight-byte slots (the TSS descriptor takes
 * two), so it spans LAYOUT_GDT .. LAYOUT_GDT + 47. boot_gdt_entry(i) is the
 * raw descriptor value in slot i (0 for i >= BOOT_GDT_ENTRIES), for the vCPU
 * code that fills KVM segment registers. */
#define BOOT_GDT_ENTRIES 6
#define BOOT_GDT_LIMIT   (BOOT_GDT_ENTRIES * 8 - 1)
uint64_t boot_gdt_entry(unsigned index);

/* The MP configuration table does not fit in the 1 KiB at LAYOUT_EBDA for
 * 64 CPUs: the floating pointer stays at LAYOUT_EBDA, the table goes to the
 * BIOS area (e820-reserved [0xF0000, 0x100000)). */
#define BOOT_MP_CONFIG   0xF0000ULL
#define BOOT_BIOS_START  0xF0000ULL
#define BOOT_IOAPIC_ADDR 0xFEC00000ULL
#define BOOT_LAPIC_ADDR  0xFEE00000ULL
#define BOOT_IOAPIC_PINS 24

/* PVH: the module list (one entry, the initrd) follows start_info. */
#define BOOT_PVH_MODLIST 0x7040ULL

/* Control-register values of the entry states (docs/boot.md). */
#define BOOT_CR0_LONG   0x80050033ULL /* PE|MP|ET|NE|WP|PG */
#define BOOT_CR4_LINUX  0x00000020ULL /* PAE */
#define BOOT_CR4_ELF    0x00000620ULL /* PAE|OSFXSR|OSXMMEXCPT (SSE usable) */
#define BOOT_EFER_LONG  0x00000500ULL /* LME|LMA */
#define BOOT_CR0_PVH    0x00000011ULL /* PE|ET */

#endif
