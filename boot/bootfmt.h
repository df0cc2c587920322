/* Private to boot/: the on-disk and in-guest layouts the loaders read and
 * write. Written from the published specifications (Linux
 * Documentation/x86/boot.rst, the ELF64 and x86-64 psABI, Xen's
 * hvm/start_info.h, Intel MultiProcessor Specification 1.4). Every layout is
 * packed and checked with _Static_assert; files are never cast to these
 * structs in place: headers are memcpy'd out first (no unaligned access). */
#ifndef MOAT_BOOTFMT_H
#define MOAT_BOOTFMT_H

#include <stddef.h>
#include <stdint.h>

#define BF_PACKED __attribute__((packed))

/* ---- ELF64 ---- */
struct elf64_ehdr {
    uint8_t  e_ident[16];
    uint16_t e_type;
    uint16_t e_machine;
    uint32_t e_version;
    uint64_t e_entry;
    uint64_t e_phoff;
    uint64_t e_shoff;
    uint32_t e_flags;
    uint16_t e_ehsize;
    uint16_t e_phentsize;
    uint16_t e_phnum;
    uint16_t e_shentsize;
    uint16_t e_shnum;
    uint16_t e_shstrndx;
} BF_PACKED;
_Static_assert(sizeof(struct elf64_ehdr) == 64, "ehdr");

struct elf64_phdr {
    uint32_t p_type;
    uint32_t p_flags;
    uint64_t p_offset;
    uint64_t p_vaddr;
    uint64_t p_paddr;
    uint64_t p_filesz;
    uint64_t p_memsz;
    uint64_t p_align;
} BF_PACKED;
_Static_assert(sizeof(struct elf64_phdr) == 56, "phdr");

struct elf_nhdr {
    uint32_t n_namesz;
    uint32_t n_descsz;
    uint32_t n_type;
} BF_PACKED;
_Static_assert(sizeof(struct elf_nhdr) == 12, "nhdr");

#define EI_CLASS      4
#define EI_DATA       5
#define EI_VERSION    6
#define ELFCLASS64    2
#define ELFDATA2LSB   1
#define EV_CURRENT    1
#define ET_EXEC       2
#define EM_X86_64     62
#define PT_LOAD       1
#define PT_NOTE       4
#define XEN_ELFNOTE_PHYS32_ENTRY 18

/* ---- Linux boot protocol (boot.rst) ---- */
struct setup_header {
    uint8_t  setup_sects;           /* 0x1f1 */
    uint16_t root_flags;
    uint32_t syssize;
    uint16_t ram_size;
    uint16_t vid_mode;
    uint16_t root_dev;
    uint16_t boot_flag;             /* 0x1fe */
    uint16_t jump;                  /* 0x200 */
    uint32_t header;                /* 0x202 */
    uint16_t version;               /* 0x206 */
    uint32_t realmode_swtch;
    uint16_t start_sys_seg;
    uint16_t kernel_version;
    uint8_t  type_of_loader;        /* 0x210 */
    uint8_t  loadflags;             /* 0x211 */
    uint16_t setup_move_size;
    uint32_t code32_start;          /* 0x214 */
    uint32_t ramdisk_image;         /* 0x218 */
    uint32_t ramdisk_size;          /* 0x21c */
    uint32_t bootsect_kludge;
    uint16_t heap_end_ptr;          /* 0x224 */
    uint8_t  ext_loader_ver;
    uint8_t  ext_loader_type;
    uint32_t cmd_line_ptr;          /* 0x228 */
    uint32_t initrd_addr_max;       /* 0x22c */
    uint32_t kernel_alignment;      /* 0x230 */
    uint8_t  relocatable_kernel;
    uint8_t  min_alignment;
    uint16_t xloadflags;            /* 0x236 */
    uint32_t cmdline_size;          /* 0x238 */
    uint32_t hardware_subarch;
    uint64_t hardware_subarch_data;
    uint32_t payload_offset;
    uint32_t payload_length;
    uint64_t setup_data;
    uint64_t pref_address;          /* 0x258 */
    uint32_t init_size;             /* 0x260 */
    uint32_t handover_offset;
    uint32_t kernel_info_offset;    /* 0x268 */
} BF_PACKED;

#define SETUP_HDR_OFF 0x1f1
#define SH_OFF(f) (SETUP_HDR_OFF + offsetof(struct setup_header, f))
_Static_assert(SH_OFF(boot_flag) == 0x1fe, "boot_flag");
_Static_assert(SH_OFF(header) == 0x202, "header");
_Static_assert(SH_OFF(type_of_loader) == 0x210, "type_of_loader");
_Static_assert(SH_OFF(ramdisk_image) == 0x218, "ramdisk_image");
_Static_assert(SH_OFF(heap_end_ptr) == 0x224, "heap_end_ptr");
_Static_assert(SH_OFF(cmd_line_ptr) == 0x228, "cmd_line_ptr");
_Static_assert(SH_OFF(xloadflags) == 0x236, "xloadflags");
_Static_assert(SH_OFF(cmdline_size) == 0x238, "cmdline_size");
_Static_assert(SH_OFF(pref_address) == 0x258, "pref_address");
_Static_assert(SH_OFF(init_size) == 0x260, "init_size");
_Static_assert(SH_OFF(kernel_info_offset) == 0x268, "kernel_info_offset");
#define SETUP_HDR_END (SETUP_HDR_OFF + sizeof(struct setup_header)) /* 0x26c */

#define BOOT_HDR_MAGIC      0x53726448u /* "HdrS" */
#define BOOT_FLAG_MAGIC     0xAA55u
#define LOADFLAG_LOADED_HIGH  0x01
#define LOADFLAG_CAN_USE_HEAP 0x80
#define XLF_KERNEL_64       0x0001
#define BZ_MIN_VERSION      0x020C      /* 2.12: xloadflags exists */
#define LOADER_TYPE_UNKNOWN 0xFF
#define BZ_HEAP_END         0xFE00
#define LINUX_INITRD_MAX_DEFAULT 0x37FFFFFFu
#define LINUX_CMDLINE_SIZE_DEFAULT 2047u /* COMMAND_LINE_SIZE 2048 less NUL */

struct boot_e820_entry {
    uint64_t addr;
    uint64_t size;
    uint32_t type;
} BF_PACKED;
_Static_assert(sizeof(struct boot_e820_entry) == 20, "e820 entry");
#define E820_RAM      1
#define E820_RESERVED 2
#define E820_MAX_ZEROPAGE 128

struct boot_params {
    uint8_t  _pad0[0x1e8];
    uint8_t  e820_entries;          /* 0x1e8 */
    uint8_t  _pad1[SETUP_HDR_OFF - 0x1e9];
    struct setup_header hdr;        /* 0x1f1 */
    uint8_t  _pad2[0x2d0 - SETUP_HDR_END];
    struct boot_e820_entry e820_table[E820_MAX_ZEROPAGE]; /* 0x2d0 */
    uint8_t  _pad3[0x1000 - 0x2d0 - E820_MAX_ZEROPAGE * 20];
} BF_PACKED;
_Static_assert(sizeof(struct boot_params) == 0x1000, "boot_params");
_Static_assert(offsetof(struct boot_params, e820_entries) == 0x1e8, "e820_entries");
_Static_assert(offsetof(struct boot_params, hdr) == 0x1f1, "hdr");
_Static_assert(offsetof(struct boot_params, e820_table) == 0x2d0, "e820_table");

/* ---- PVH (Xen public/arch-x86/hvm/start_info.h) ---- */
#define HVM_START_MAGIC 0x336ec578u
struct hvm_start_info {
    uint32_t magic;
    uint32_t version;
    uint32_t flags;
    uint32_t nr_modules;
    uint64_t modlist_paddr;
    uint64_t cmdline_paddr;
    uint64_t rsdp_paddr;
    uint64_t memmap_paddr;      /* version 1 */
    uint32_t memmap_entries;
    uint32_t reserved;
} BF_PACKED;
_Static_assert(sizeof(struct hvm_start_info) == 56, "start_info");
_Static_assert(offsetof(struct hvm_start_info, memmap_paddr) == 40, "memmap_paddr");

struct hvm_modlist_entry {
    uint64_t paddr;
    uint64_t size;
    uint64_t cmdline_paddr;
    uint64_t reserved;
} BF_PACKED;
_Static_assert(sizeof(struct hvm_modlist_entry) == 32, "modlist");

struct hvm_memmap_table_entry {
    uint64_t addr;
    uint64_t size;
    uint32_t type;      /* E820 types */
    uint32_t reserved;
} BF_PACKED;
_Static_assert(sizeof(struct hvm_memmap_table_entry) == 24, "memmap entry");

/* ---- Intel MP specification 1.4 ---- */
struct mpf_intel {
    char     signature[4];      /* "_MP_" */
    uint32_t physptr;
    uint8_t  length;            /* 16-byte units: 1 */
    uint8_t  specification;     /* 4 */
    uint8_t  checksum;
    uint8_t  feature1;          /* 0: config table present */
    uint8_t  feature2;          /* bit 7 IMCRP */
    uint8_t  feature3, feature4, feature5;
} BF_PACKED;
_Static_assert(sizeof(struct mpf_intel) == 16, "mpf");

struct mpc_table {
    char     signature[4];      /* "PCMP" */
    uint16_t length;            /* base table incl. header */
    uint8_t  spec;              /* 4 */
    uint8_t  checksum;
    char     oem[8];
    char     productid[12];
    uint32_t oemptr;
    uint16_t oemsize;
    uint16_t oemcount;          /* entry count */
    uint32_t lapic;             /* local APIC address */
    uint16_t ext_length;
    uint8_t  ext_checksum;
    uint8_t  reserved;
} BF_PACKED;
_Static_assert(sizeof(struct mpc_table) == 44, "mpc");

#define MP_PROCESSOR 0
#define MP_BUS       1
#define MP_IOAPIC    2
#define MP_INTSRC    3
#define MP_LINTSRC   4

struct mpc_cpu {
    uint8_t  type;
    uint8_t  apicid;
    uint8_t  apicver;
    uint8_t  cpuflag;           /* bit 0 EN, bit 1 BP */
    uint32_t cpufeature;        /* signature: stepping/model/family */
    uint32_t featureflag;       /* CPUID.1:EDX */
    uint32_t reserved[2];
} BF_PACKED;
_Static_assert(sizeof(struct mpc_cpu) == 20, "mpc_cpu");

struct mpc_bus {
    uint8_t type;
    uint8_t busid;
    char    bustype[6];
} BF_PACKED;
_Static_assert(sizeof(struct mpc_bus) == 8, "mpc_bus");

struct mpc_ioapic {
    uint8_t  type;
    uint8_t  apicid;
    uint8_t  apicver;
    uint8_t  flags;             /* bit 0 EN */
    uint32_t apicaddr;
} BF_PACKED;
_Static_assert(sizeof(struct mpc_ioapic) == 8, "mpc_ioapic");

/* Used for both I/O (type 3) and local (type 4) interrupt entries. */
struct mpc_intsrc {
    uint8_t  type;
    uint8_t  irqtype;           /* 0 INT, 1 NMI, 2 SMI, 3 ExtINT */
    uint16_t irqflag;           /* polarity/trigger, 0 = conforms to bus */
    uint8_t  srcbus;
    uint8_t  srcbusirq;
    uint8_t  dstapic;           /* IOAPIC id / local APIC id (0xFF all) */
    uint8_t  dstirq;            /* INTIN# / LINTIN# */
} BF_PACKED;
_Static_assert(sizeof(struct mpc_intsrc) == 8, "mpc_intsrc");

#define MP_IRQ_INT    0
#define MP_IRQ_NMI    1
#define MP_IRQ_EXTINT 3

#endif
