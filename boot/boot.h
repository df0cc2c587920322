/* Kernel loaders and boot structures. Pure: works on a struct gmem and byte
 * buffers, no KVM headers, so it is unit-tested and fuzzed alone.
 * Memory map: vmm/layout.h; entry states: docs/boot.md. */
#ifndef MOAT_BOOT_H
#define MOAT_BOOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vmm/gmem.h"

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
    const char *cmdline;     /* NUL-terminated, complete */
    unsigned ncpus;          /* 1..LAYOUT_MAX_CPUS */
    bool prefer_pvh;         /* use the PVH note of a vmlinux that has one */
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

/* Build a kernel command line: base, then each extra separated by a space,
 * then, if argc > 0, " -- " and the arguments. An argument containing
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

#endif
