/* Kernel probing and loading: bzImage, vmlinux (64-bit boot protocol or
 * PVH), plain ELF64. Contract: boot/boot.h; entry states and memory map:
 * docs/boot.md. The image is untrusted: every offset and size read from it
 * is range- and overflow-checked before use, headers are copied out with
 * memcpy, and guest memory is only reached through gmem_ptr(). */
#include "boot/boot.h"

#include <errno.h>
#include <string.h>

#include "boot/bootfmt.h"
#include "vmm/base/layout.h"

#define PAGE 0x1000ULL
#define KERNEL_VIRT_BASE 0xffffffff80000000ULL

static int fail(const char **why, const char *reason, int err)
{
    if (why)
        *why = reason;
    return err;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t le64(const uint8_t *p) { return le32(p) | (uint64_t)le32(p + 4) << 32; }

/* ------------------------------------------------------------------ ELF */

struct elf_info {
    struct elf64_ehdr eh;
    bool linux_note, xen_note, has_pvh;
    uint64_t pvh_entry;
};

static void elf_phdr(const uint8_t *img, const struct elf_info *ei, unsigned i,
                     struct elf64_phdr *ph)
{
    memcpy(ph, img + ei->eh.e_phoff + (uint64_t)i * sizeof(*ph), sizeof(*ph));
}

static int scan_notes(const uint8_t *p, uint64_t n, uint64_t align,
                      struct elf_info *ei, const char **why)
{
    uint64_t off = 0;
    while (n - off >= sizeof(struct elf_nhdr)) {
        struct elf_nhdr nh;
        memcpy(&nh, p + off, sizeof(nh));
        uint64_t name = off + sizeof(nh);
        uint64_t desc = name + (((uint64_t)nh.n_namesz + align - 1) & ~(align - 1));
        if (name + nh.n_namesz > n || (nh.n_descsz && desc + nh.n_descsz > n))
            return fail(why, "ELF note runs past its PT_NOTE segment", -EINVAL);
        if (nh.n_namesz == 6 && !memcmp(p + name, "Linux", 6))
            ei->linux_note = true;
        if (nh.n_namesz == 4 && !memcmp(p + name, "Xen", 4)) {
            ei->xen_note = true;
            if (nh.n_type == XEN_ELFNOTE_PHYS32_ENTRY && !ei->has_pvh) {
                if (nh.n_descsz == 4)
                    ei->pvh_entry = le32(p + desc);
                else if (nh.n_descsz == 8)
                    ei->pvh_entry = le64(p + desc);
                else
                    return fail(why, "PVH entry note has a bad size", -EINVAL);
                ei->has_pvh = true;
            }
        }
        uint64_t next = desc + (((uint64_t)nh.n_descsz + align - 1) & ~(align - 1));
        if (next >= n)
            break;
        off = next;
    }
    return 0;
}

static int elf_parse(const uint8_t *img, size_t len, struct elf_info *ei, const char **why)
{
    memset(ei, 0, sizeof(*ei));
    if (len < sizeof(ei->eh))
        return fail(why, "ELF header truncated", -EINVAL);
    memcpy(&ei->eh, img, sizeof(ei->eh));
    const struct elf64_ehdr *eh = &ei->eh;
    if (eh->e_ident[EI_CLASS] != ELFCLASS64)
        return fail(why, "not a 64-bit ELF", -ENOEXEC);
    if (eh->e_ident[EI_DATA] != ELFDATA2LSB)
        return fail(why, "not a little-endian ELF", -ENOEXEC);
    if (eh->e_machine != EM_X86_64)
        return fail(why, "ELF is not for x86-64", -ENOEXEC);
    if (eh->e_type != ET_EXEC)
        return fail(why, "ELF is not an executable (ET_EXEC)", -ENOEXEC);
    if (eh->e_ident[EI_VERSION] != EV_CURRENT || eh->e_version != EV_CURRENT)
        return fail(why, "bad ELF version", -EINVAL);
    if (eh->e_phentsize != sizeof(struct elf64_phdr))
        return fail(why, "bad ELF program header size", -EINVAL);
    if (eh->e_phnum == 0 || eh->e_phnum == 0xFFFF)
        return fail(why, "bad ELF program header count", -EINVAL);
    uint64_t phend;
    if (__builtin_add_overflow(eh->e_phoff, (uint64_t)eh->e_phnum * sizeof(struct elf64_phdr), &phend) ||
        phend > len)
        return fail(why, "ELF program headers lie outside the file", -EINVAL);

    unsigned loads = 0;
    for (unsigned i = 0; i < eh->e_phnum; i++) {
        struct elf64_phdr ph;
        elf_phdr(img, ei, i, &ph);
        uint64_t fend, end;
        if (ph.p_type != PT_LOAD && ph.p_type != PT_NOTE)
            continue;
        if (__builtin_add_overflow(ph.p_offset, ph.p_filesz, &fend) || fend > len)
            return fail(why, "ELF segment lies outside the file", -EINVAL);
        if (ph.p_type == PT_NOTE) {
            int r = scan_notes(img + ph.p_offset, ph.p_filesz, ph.p_align == 8 ? 8 : 4, ei, why);
            if (r)
                return r;
            continue;
        }
        if (ph.p_filesz > ph.p_memsz)
            return fail(why, "ELF segment has p_filesz > p_memsz", -EINVAL);
        if (__builtin_add_overflow(ph.p_paddr, ph.p_memsz, &end) ||
            __builtin_add_overflow(ph.p_vaddr, ph.p_memsz, &end))
            return fail(why, "ELF segment address range overflows", -EINVAL);
        if (ph.p_memsz)
            loads++;
    }
    if (!loads)
        return fail(why, "ELF has no loadable segment", -EINVAL);
    return 0;
}

static enum boot_kind elf_kind(const struct elf_info *ei, bool prefer_pvh)
{
    if (prefer_pvh && ei->has_pvh)
        return BOOT_LINUX_PVH;
    if (ei->linux_note || ei->xen_note)
        return BOOT_LINUX_ELF;
    return BOOT_ELF;
}

/* Physical entry: a kernel-virtual e_entry of a vmlinux is translated through
 * the segment containing it; the result must lie inside a loaded segment. */
static int elf_entry(const uint8_t *img, const struct elf_info *ei, uint64_t e,
                     bool translate, uint64_t *out, const char **why)
{
    struct elf64_phdr ph;
    if (translate && e >= KERNEL_VIRT_BASE) {
        bool found = false;
        for (unsigned i = 0; i < ei->eh.e_phnum && !found; i++) {
            elf_phdr(img, ei, i, &ph);
            if (ph.p_type == PT_LOAD && e >= ph.p_vaddr && e - ph.p_vaddr < ph.p_memsz) {
                e = ph.p_paddr + (e - ph.p_vaddr);
                found = true;
            }
        }
        if (!found)
            return fail(why, "virtual entry point is in no segment", -EINVAL);
    }
    for (unsigned i = 0; i < ei->eh.e_phnum; i++) {
        elf_phdr(img, ei, i, &ph);
        if (ph.p_type == PT_LOAD && e >= ph.p_paddr && e - ph.p_paddr < ph.p_memsz) {
            *out = e;
            return 0;
        }
    }
    return fail(why, "entry point is in no loaded segment", -EINVAL);
}

static int elf_load_segments(const struct gmem *m, const uint8_t *img,
                             const struct elf_info *ei, uint64_t *kstart,
                             uint64_t *kend, const char **why)
{
    struct elf64_phdr ph;
    uint64_t lo = UINT64_MAX, hi = 0;
    for (unsigned i = 0; i < ei->eh.e_phnum; i++) {
        elf_phdr(img, ei, i, &ph);
        if (ph.p_type != PT_LOAD || ph.p_memsz == 0)
            continue;
        if (ph.p_paddr < LAYOUT_HIMEM)
            return fail(why, "ELF segment below 1 MiB (reserved for moat)", -ENOMEM);
        if (!gmem_ptr(m, ph.p_paddr, ph.p_memsz))
            return fail(why, "ELF segment does not fit in guest RAM", -ENOMEM);
        if (ph.p_paddr < lo)
            lo = ph.p_paddr;
        if (ph.p_paddr + ph.p_memsz > hi)
            hi = ph.p_paddr + ph.p_memsz;
    }
    for (unsigned i = 0; i < ei->eh.e_phnum; i++) {
        elf_phdr(img, ei, i, &ph);
        if (ph.p_type != PT_LOAD || ph.p_memsz == 0)
            continue;
        uint8_t *dst = gmem_ptr(m, ph.p_paddr, ph.p_memsz);
        memcpy(dst, img + ph.p_offset, ph.p_filesz);
        memset(dst + ph.p_filesz, 0, ph.p_memsz - ph.p_filesz);
    }
    *kstart = lo;
    *kend = hi;
    return 0;
}

/* -------------------------------------------------------------- bzImage */

struct bz_info {
    struct setup_header hdr;
    uint64_t hdr_end;       /* file offset one past the setup header */
    uint64_t setup_len;     /* real-mode part: (setup_sects + 1) * 512 */
    uint64_t pm_len;        /* protected-mode kernel: syssize * 16 */
};

static int bz_parse(const uint8_t *img, size_t len, struct bz_info *bi, const char **why)
{
    memset(bi, 0, sizeof(*bi));
    if (len < SETUP_HDR_END)
        return fail(why, "bzImage setup header truncated", -EINVAL);
    memcpy(&bi->hdr, img + SETUP_HDR_OFF, sizeof(bi->hdr));
    const struct setup_header *h = &bi->hdr;
    if (h->boot_flag != BOOT_FLAG_MAGIC)
        return fail(why, "bzImage boot_flag is not 0xAA55", -EINVAL);
    if (h->version < BZ_MIN_VERSION)
        return fail(why, "bzImage boot protocol older than 2.12", -ENOEXEC);
    if (!(h->loadflags & LOADFLAG_LOADED_HIGH))
        return fail(why, "zImage (not loaded high) is not supported", -ENOEXEC);
    if (!(h->xloadflags & XLF_KERNEL_64))
        return fail(why, "bzImage has no 64-bit entry (XLF_KERNEL_64 clear)", -ENOEXEC);
    /* The header ends where the jump at 0x200 lands: 0x202 + (int8)byte 0x201. */
    int64_t end = 0x202 + (int8_t)img[0x201];
    if (end < (int64_t)SH_OFF(kernel_info_offset))
        return fail(why, "bzImage setup header too short for protocol 2.12", -EINVAL);
    bi->hdr_end = end > (int64_t)SETUP_HDR_END ? SETUP_HDR_END : (uint64_t)end;
    unsigned sects = h->setup_sects ? h->setup_sects : 4;
    bi->setup_len = ((uint64_t)sects + 1) * 512;
    if (bi->setup_len >= len)
        return fail(why, "bzImage setup (setup_sects) runs past the file", -EINVAL);
    bi->pm_len = (uint64_t)h->syssize * 16;
    if (bi->pm_len == 0 || bi->pm_len > len - bi->setup_len)
        return fail(why, "bzImage syssize disagrees with the file size", -EINVAL);
    if (bi->pm_len <= 0x200)
        return fail(why, "bzImage kernel too small to hold the 64-bit entry", -EINVAL);
    uint64_t e;
    if (__builtin_add_overflow(h->pref_address, (uint64_t)h->init_size, &e))
        return fail(why, "bzImage pref_address + init_size overflows", -EINVAL);
    return 0;
}

/* ---------------------------------------------------------------- probe */

static bool is_elf(const uint8_t *img, size_t len)
{
    return len >= 4 && !memcmp(img, "\177ELF", 4);
}

static bool is_bzimage(const uint8_t *img, size_t len)
{
    return len >= 0x206 && le32(img + 0x202) == BOOT_HDR_MAGIC;
}

int boot_probe_why(const uint8_t *img, size_t len, bool prefer_pvh,
                   enum boot_kind *kind, const char **why)
{
    if (!kind || (!img && len))
        return fail(why, "bad arguments", -EINVAL);
    if (is_elf(img, len)) {
        struct elf_info ei;
        int r = elf_parse(img, len, &ei, why);
        if (r)
            return r;
        *kind = elf_kind(&ei, prefer_pvh);
    } else if (is_bzimage(img, len)) {
        struct bz_info bi;
        int r = bz_parse(img, len, &bi, why);
        if (r)
            return r;
        *kind = BOOT_LINUX_BZIMAGE;
    } else {
        return fail(why, "neither an ELF executable nor a bzImage", -ENOEXEC);
    }
    return fail(why, "ok", 0);
}

int boot_probe(const uint8_t *img, size_t len, bool prefer_pvh, enum boot_kind *kind)
{
    return boot_probe_why(img, len, prefer_pvh, kind, NULL);
}

/* ----------------------------------------------------------- memory map */

struct mem_ent { uint64_t addr, size; uint32_t type; };
#define MEMMAP_MAX (4 + GMEM_MAX_REGIONS)

/* The RAM/reserved map every kind reports (e820 / PVH memmap): the region at
 * gpa 0 split around the EBDA and BIOS holes, then each further region. */
static int build_memmap(const struct gmem *m, struct mem_ent *e, unsigned *n, const char **why)
{
    const struct gmem_region *sorted[GMEM_MAX_REGIONS];
    unsigned k = 0;
    for (unsigned i = 0; i < m->n && i < GMEM_MAX_REGIONS; i++) {
        const struct gmem_region *r = &m->r[i];
        if (r->size == 0 || r->gpa == 0)
            continue;
        if (r->gpa < LAYOUT_HIMEM || r->gpa + r->size < r->gpa)
            return fail(why, "guest memory region below 1 MiB or wrapping", -EINVAL);
        unsigned j = k++;
        while (j > 0 && sorted[j - 1]->gpa > r->gpa) {
            sorted[j] = sorted[j - 1];
            j--;
        }
        sorted[j] = r;
    }
    const struct gmem_region *low = NULL;
    for (unsigned i = 0; i < m->n && i < GMEM_MAX_REGIONS; i++)
        if (m->r[i].gpa == 0 && m->r[i].size)
            low = &m->r[i];
    if (!low || low->size < LAYOUT_HIMEM)
        return fail(why, "guest RAM must start at 0 and cover the first MiB", -ENOMEM);
    unsigned c = 0;
    e[c++] = (struct mem_ent){ 0, LAYOUT_EBDA, E820_RAM };
    e[c++] = (struct mem_ent){ LAYOUT_EBDA, LAYOUT_LOWMEM_END - LAYOUT_EBDA, E820_RESERVED };
    e[c++] = (struct mem_ent){ BOOT_BIOS_START, LAYOUT_HIMEM - BOOT_BIOS_START, E820_RESERVED };
    if (low->size > LAYOUT_HIMEM)
        e[c++] = (struct mem_ent){ LAYOUT_HIMEM, low->size - LAYOUT_HIMEM, E820_RAM };
    for (unsigned i = 0; i < k; i++) {
        if (sorted[i]->gpa < low->size)
            return fail(why, "guest memory regions overlap", -EINVAL);
        e[c++] = (struct mem_ent){ sorted[i]->gpa, sorted[i]->size, E820_RAM };
    }
    *n = c;
    return 0;
}

static uint64_t low_ram_end(const struct gmem *m)
{
    for (unsigned i = 0; i < m->n && i < GMEM_MAX_REGIONS; i++)
        if (m->r[i].gpa == 0)
            return m->r[i].size;
    return 0;
}

/* Highest page-aligned start with [start, start + size) below
 * min(max_incl + 1, ram_end) and at or above floor. */
static int place_initrd(uint64_t size, uint64_t floor, uint64_t max_incl,
                        uint64_t ram_end, uint64_t *start, const char **why)
{
    uint64_t top = max_incl + 1 < ram_end ? max_incl + 1 : ram_end;
    floor = (floor + PAGE - 1) & ~(PAGE - 1);
    if (size > top || ((top - size) & ~(PAGE - 1)) < floor)
        return fail(why, "initrd does not fit in RAM above the kernel", -ENOMEM);
    *start = (top - size) & ~(PAGE - 1);
    return 0;
}

/* Copy the kernel into guest RAM: a bzImage's protected-mode part at 1 MiB,
 * an ELF's segments where they ask. Its extent [*kstart, *kend) and the
 * entry point. 0 or -errno. */
static int load_kernel(const struct gmem *m, const uint8_t *img, enum boot_kind kind,
                       const struct bz_info *bi, const struct elf_info *ei, uint64_t ram_end,
                       uint64_t *kstart, uint64_t *kend, uint64_t *entry, const char **why)
{
    int r;
    if (kind == BOOT_LINUX_BZIMAGE) {
        const struct setup_header *h = &bi->hdr;
        uint64_t need = bi->pm_len > h->init_size ? bi->pm_len : h->init_size;
        uint8_t *dst = gmem_ptr(m, LAYOUT_HIMEM, need);
        if (!dst)
            return fail(why, "kernel does not fit in guest RAM", -ENOMEM);
        *kstart = LAYOUT_HIMEM;
        *kend = LAYOUT_HIMEM + need;
        /* Without KASLR the decompressor runs the kernel at pref_address
         * (LOAD_PHYSICAL_ADDR) when that is above the load address. */
        if (h->pref_address >= LAYOUT_HIMEM && h->pref_address + h->init_size > *kend) {
            *kend = h->pref_address + h->init_size;
            if (*kend > ram_end)
                return fail(why, "kernel (at pref_address + init_size) does not fit in RAM", -ENOMEM);
        }
        memcpy(dst, img + bi->setup_len, bi->pm_len);
        *entry = LAYOUT_HIMEM + 0x200;
        return 0;
    }
    if ((r = elf_load_segments(m, img, ei, kstart, kend, why)))
        return r;
    if (kind == BOOT_LINUX_PVH) {
        if ((r = elf_entry(img, ei, ei->pvh_entry, false, entry, why)))
            return r;
        if (*entry >= LAYOUT_4G)
            return fail(why, "PVH entry above 4 GiB", -EINVAL);
    } else if ((r = elf_entry(img, ei, ei->eh.e_entry, kind == BOOT_LINUX_ELF, entry, why))) {
        return r;
    }
    return 0;
}

/* The Linux boot protocol's zero page (bzImage: its own setup header;
 * ELF: one made here), with the E820 map mm and the initrd. 0 or -errno. */
static int write_boot_params(const struct gmem *m, enum boot_kind kind, const uint8_t *img,
                             const struct bz_info *bi, const struct mem_ent *mm, unsigned nmm,
                             uint64_t istart, uint64_t isize, const char **why)
{
    struct boot_params bp;
    memset(&bp, 0, sizeof(bp));
    struct setup_header *h = &bp.hdr;
    if (kind == BOOT_LINUX_BZIMAGE) {
        memcpy((uint8_t *)&bp + SETUP_HDR_OFF, img + SETUP_HDR_OFF, bi->hdr_end - SETUP_HDR_OFF);
    } else {
        h->boot_flag = BOOT_FLAG_MAGIC;
        h->header = BOOT_HDR_MAGIC;
        h->version = 0x020F;
        h->loadflags = LOADFLAG_LOADED_HIGH;
        h->kernel_alignment = 0x200000;
        h->cmdline_size = LINUX_CMDLINE_SIZE_DEFAULT;
        h->initrd_addr_max = LINUX_INITRD_MAX_DEFAULT;
    }
    h->type_of_loader = LOADER_TYPE_UNKNOWN;
    h->loadflags |= LOADFLAG_CAN_USE_HEAP;
    h->heap_end_ptr = BZ_HEAP_END;
    h->cmd_line_ptr = (uint32_t)LAYOUT_CMDLINE;
    h->ramdisk_image = (uint32_t)istart;
    h->ramdisk_size = (uint32_t)isize;
    for (unsigned i = 0; i < nmm; i++)
        bp.e820_table[i] = (struct boot_e820_entry){ mm[i].addr, mm[i].size, mm[i].type };
    bp.e820_entries = (uint8_t)nmm;
    if (gmem_write(m, LAYOUT_ZERO_PAGE, &bp, sizeof(bp)))
        return fail(why, "zero page outside RAM", -ENOMEM);
    return 0;
}

/* PVH's hvm_start_info at the zero page's address, its memory map (mm)
 * and the initrd as its one module. 0 or -errno. */
static int write_pvh_start_info(const struct gmem *m, const struct mem_ent *mm, unsigned nmm,
                                uint64_t istart, uint64_t isize, const char **why)
{
    struct hvm_start_info si = {
        .magic = HVM_START_MAGIC, .version = 1,
        .cmdline_paddr = LAYOUT_CMDLINE,
        .memmap_paddr = LAYOUT_PVH_MEMMAP, .memmap_entries = nmm,
    };
    if (isize) {
        struct hvm_modlist_entry mod = { .paddr = istart, .size = isize };
        si.nr_modules = 1;
        si.modlist_paddr = BOOT_PVH_MODLIST;
        if (gmem_write(m, BOOT_PVH_MODLIST, &mod, sizeof(mod)))
            return fail(why, "PVH module list outside RAM", -ENOMEM);
    }
    for (unsigned i = 0; i < nmm; i++) {
        struct hvm_memmap_table_entry me = { mm[i].addr, mm[i].size, mm[i].type, 0 };
        if (gmem_write(m, LAYOUT_PVH_MEMMAP + i * sizeof(me), &me, sizeof(me)))
            return fail(why, "PVH memory map outside RAM", -ENOMEM);
    }
    if (gmem_write(m, LAYOUT_ZERO_PAGE, &si, sizeof(si)))
        return fail(why, "start_info outside RAM", -ENOMEM);
    return 0;
}

/* ----------------------------------------------------------------- load */

int boot_load_why(const struct gmem *m, const struct boot_config *cfg,
                  struct boot_info *out, const char **why)
{
    if (!m || !cfg || !out || (!cfg->kernel && cfg->kernel_len) ||
        (!cfg->initrd && cfg->initrd_len))
        return fail(why, "bad arguments", -EINVAL);
    const uint8_t *img = cfg->kernel;
    size_t len = cfg->kernel_len;
    enum boot_kind kind;
    int r = boot_probe_why(img, len, cfg->prefer_pvh, &kind, why);
    if (r)
        return r;
    if (cfg->ncpus == 0 || cfg->ncpus > LAYOUT_MAX_CPUS)
        return fail(why, "vCPU count out of range", -EINVAL);

    struct elf_info ei;
    struct bz_info bi;
    if (kind == BOOT_LINUX_BZIMAGE)
        bz_parse(img, len, &bi, NULL);
    else
        elf_parse(img, len, &ei, NULL);

    struct mem_ent mm[MEMMAP_MAX];
    unsigned nmm;
    if ((r = build_memmap(m, mm, &nmm, why)))
        return r;
    uint64_t ram_end = low_ram_end(m);

    const char *cmdline = cfg->cmdline ? cfg->cmdline : "";
    size_t clen = strnlen(cmdline, LAYOUT_CMDLINE_MAX);
    uint64_t cmax = LAYOUT_CMDLINE_MAX - 1;
    if (kind == BOOT_LINUX_BZIMAGE && bi.hdr.cmdline_size < cmax)
        cmax = bi.hdr.cmdline_size;
    else if (kind == BOOT_LINUX_ELF || kind == BOOT_LINUX_PVH)
        cmax = LINUX_CMDLINE_SIZE_DEFAULT;
    if (clen > cmax)
        return fail(why, "command line too long for this kernel", -E2BIG);

    if (!cfg->ram_is_zero)
        memset(gmem_ptr(m, 0, LAYOUT_HIMEM), 0, LAYOUT_HIMEM);

    uint64_t kstart, kend, entry;
    if ((r = load_kernel(m, img, kind, &bi, &ei, ram_end, &kstart, &kend, &entry, why)))
        return r;

    uint64_t istart = 0, isize = 0;
    size_t xlen = cfg->initrd_extra ? cfg->initrd_extra_len : 0;
    if ((cfg->initrd && cfg->initrd_len) || xlen) {
        uint64_t imax = kind == BOOT_LINUX_BZIMAGE ? bi.hdr.initrd_addr_max
                                                   : LINUX_INITRD_MAX_DEFAULT;
        uint64_t xoff = (cfg->initrd_len + 3) & ~(uint64_t)3;
        static const uint8_t zero[4];
        isize = xlen ? xoff + xlen : cfg->initrd_len;
        if ((r = place_initrd(isize, kend, imax, ram_end, &istart, why)))
            return r;
        if ((cfg->initrd_len && gmem_write(m, istart, cfg->initrd, cfg->initrd_len)) ||
            (xlen && (gmem_write(m, istart + cfg->initrd_len, zero, xoff - cfg->initrd_len) ||
                      gmem_write(m, istart + xoff, cfg->initrd_extra, xlen))))
            return fail(why, "initrd outside guest RAM", -ENOMEM);
    }

    if (gmem_write(m, LAYOUT_CMDLINE, cmdline, clen) ||
        gmem_write(m, LAYOUT_CMDLINE + clen, "", 1))
        return fail(why, "command line area outside RAM", -ENOMEM);

    uint64_t zero_page = 0;
    if (kind == BOOT_LINUX_BZIMAGE || kind == BOOT_LINUX_ELF) {
        if ((r = write_boot_params(m, kind, img, &bi, mm, nmm, istart, isize, why)))
            return r;
        zero_page = LAYOUT_ZERO_PAGE;
    } else if (kind == BOOT_LINUX_PVH) {
        if ((r = write_pvh_start_info(m, mm, nmm, istart, isize, why)))
            return r;
        zero_page = LAYOUT_ZERO_PAGE;
    }

    if ((r = boot_setup_mptable(m, cfg->ncpus)) || (r = boot_setup_gdt(m)) ||
        (r = boot_setup_page_tables(m)))
        return fail(why, "boot structures outside RAM", r);

    *out = (struct boot_info){
        .kind = kind, .entry = entry, .zero_page = zero_page,
        .kernel_start = kstart, .kernel_end = kend,
        .initrd_start = istart, .initrd_size = isize,
    };
    return fail(why, "ok", 0);
}

int boot_load(const struct gmem *m, const struct boot_config *cfg, struct boot_info *out)
{
    return boot_load_why(m, cfg, out, NULL);
}
