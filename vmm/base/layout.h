/* The guest physical memory map moat builds. Documented in docs/boot.md and
 * docs/architecture.md; keep them in step. */
#ifndef MOAT_LAYOUT_H
#define MOAT_LAYOUT_H

/* Low memory (all below 1 MiB), written by boot/ before the first vCPU run. */
#define LAYOUT_GDT          0x0500ULL   /* boot GDT, 6 slots (48 bytes) */
#define LAYOUT_IDT          0x0540ULL   /* empty IDT (limit 0) */
#define LAYOUT_ZERO_PAGE    0x7000ULL   /* Linux boot_params / PVH start_info */
#define LAYOUT_PVH_MEMMAP   0x8000ULL   /* PVH memory map entries */
#define LAYOUT_PML4         0x9000ULL   /* identity page tables: PML4 */
#define LAYOUT_PDPT         0xA000ULL   /*   PDPT */
#define LAYOUT_PD           0xB000ULL   /*   4 PDs, 2 MiB pages, first 4 GiB */
#define LAYOUT_PD_END       0xF000ULL
#define LAYOUT_CMDLINE      0x20000ULL  /* kernel command line */
#define LAYOUT_CMDLINE_MAX  0x10000ULL  /* bytes, NUL included */
#define LAYOUT_ELF_STACKS   0x40000ULL  /* plain ELF: 4 KiB stack per vCPU */
#define LAYOUT_ELF_STACK_SZ 0x1000ULL
#define LAYOUT_MAX_CPUS     64
#define LAYOUT_EBDA         0x9FC00ULL  /* MP floating pointer (table at 0xF0000) */
#define LAYOUT_LOWMEM_END   0xA0000ULL  /* 640 KiB: VGA/BIOS hole above */
#define LAYOUT_HIMEM        0x100000ULL /* 1 MiB: bzImage protected-mode kernel */

/* RAM: [0, min(mem, MMIO_START)) and, for larger guests, [4 GiB, ...). */
#define LAYOUT_MMIO_START   0xC0000000ULL   /* 3 GiB */
#define LAYOUT_4G           0x100000000ULL

/* MMIO devices (below the IOAPIC at 0xFEC00000). */
#define LAYOUT_MOATDEV_MMIO 0xD0000000ULL   /* moat control device, 4 KiB */
#define LAYOUT_VIRTIO_MMIO  0xD0001000ULL   /* virtio-mmio slots, 4 KiB each */
#define LAYOUT_VIRTIO_SLOT  0x1000ULL
#define LAYOUT_VIRTIO_IRQ0  5               /* first virtio IRQ line (GSI) */

/* Port I/O. */
#define PORT_COM1           0x3F8
#define PORT_COM1_IRQ       4
#define PORT_I8042_DATA     0x60
#define PORT_I8042_CMD      0x64
#define PORT_I8042_IRQ      1
#define PORT_MOATDEV        0x0F40  /* moat control device, 16 ports */

#endif
