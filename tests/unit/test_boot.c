/* boot/: probing, loading, boot structures, command line. Synthetic kernels
 * are built in memory; the real guest kernels are loaded when present. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "boot/boot.h"
#include "boot/bootfmt.h"
#include "vmm/base/gmem.h"
#include "vmm/base/layout.h"

#define MiB (1024ULL * 1024)
#define RAM_SIZE (32 * MiB)

/* ---------------------------------------------------------- guest memory */

struct guest {
    struct gmem m;
    uint8_t *low, *high;
};

static void guest_init(struct guest *g, uint64_t low_size, uint64_t high_size)
{
    memset(g, 0, sizeof(*g));
    g->low = malloc(low_size);
    ck_assert_ptr_nonnull(g->low);
    memset(g->low, 0xCC, low_size); /* garbage: loaders must zero what they use */
    g->m.r[0] = (struct gmem_region){ 0, low_size, g->low };
    g->m.n = 1;
    if (high_size) {
        g->high = calloc(1, high_size);
        ck_assert_ptr_nonnull(g->high);
        g->m.r[1] = (struct gmem_region){ LAYOUT_4G, high_size, g->high };
        g->m.n = 2;
    }
}

static void guest_free(struct guest *g)
{
    free(g->low);
    free(g->high);
}

static uint64_t rd64(const struct guest *g, uint64_t gpa)
{
    uint64_t v;
    ck_assert_int_eq(gmem_read(&g->m, gpa, &v, 8), 0);
    return v;
}

/* ----------------------------------------------------------- ELF builder */

struct seg {
    uint32_t type;
    uint64_t paddr, vaddr, filesz, memsz, align;
    const uint8_t *data;    /* filesz bytes; NULL: pattern 0x40 + index */
};

#define IMG_MAX (64 * 1024)

static size_t build_elf(uint8_t *buf, uint64_t entry, const struct seg *s, unsigned n)
{
    memset(buf, 0, IMG_MAX);
    struct elf64_ehdr eh = {
        .e_ident = { 0x7f, 'E', 'L', 'F', ELFCLASS64, ELFDATA2LSB, EV_CURRENT },
        .e_type = ET_EXEC, .e_machine = EM_X86_64, .e_version = EV_CURRENT,
        .e_entry = entry, .e_phoff = 64, .e_ehsize = 64,
        .e_phentsize = sizeof(struct elf64_phdr), .e_phnum = (uint16_t)n,
    };
    memcpy(buf, &eh, sizeof(eh));
    uint64_t off = 64 + n * sizeof(struct elf64_phdr);
    for (unsigned i = 0; i < n; i++) {
        off = (off + 7) & ~7ULL;
        ck_assert_uint_le(off + s[i].filesz, IMG_MAX);
        struct elf64_phdr ph = {
            .p_type = s[i].type, .p_flags = 7, .p_offset = off,
            .p_vaddr = s[i].vaddr ? s[i].vaddr : s[i].paddr, .p_paddr = s[i].paddr,
            .p_filesz = s[i].filesz, .p_memsz = s[i].memsz,
            .p_align = s[i].align ? s[i].align : 4,
        };
        memcpy(buf + 64 + i * sizeof(ph), &ph, sizeof(ph));
        if (s[i].data)
            memcpy(buf + off, s[i].data, s[i].filesz);
        else
            memset(buf + off, 0x40 + i, s[i].filesz);
        off += s[i].filesz;
    }
    return off;
}

/* Patch one 64-bit field of program header i (offsetof in struct elf64_phdr). */
static void patch_ph64(uint8_t *buf, unsigned i, size_t field, uint64_t v)
{
    memcpy(buf + 64 + i * sizeof(struct elf64_phdr) + field, &v, 8);
}

/* Append an ELF note (4-byte padding) at p; returns its size. */
static size_t note(uint8_t *p, const char *name, uint32_t type, const void *desc, uint32_t descsz)
{
    struct elf_nhdr nh = { (uint32_t)strlen(name) + 1, descsz, type };
    size_t o = 0;
    memcpy(p, &nh, sizeof(nh));
    o += sizeof(nh);
    memset(p + o, 0, (nh.n_namesz + 3) & ~3u);
    memcpy(p + o, name, nh.n_namesz);
    o += (nh.n_namesz + 3) & ~3u;
    memset(p + o, 0, (descsz + 3) & ~3u);
    memcpy(p + o, desc, descsz);
    o += (descsz + 3) & ~3u;
    return o;
}

static uint8_t img[IMG_MAX];

/* A plain ELF: code segment at 2 MiB (0x1000 file + 0x3000 bss). */
static size_t plain_elf(void)
{
    struct seg s[] = { { PT_LOAD, 2 * MiB, 0, 0x1000, 0x4000, 0, NULL } };
    return build_elf(img, 2 * MiB + 0x10, s, 1);
}

/* A vmlinux-like ELF: text at 16 MiB linked at the kernel map, data at
 * 17 MiB with bss, a PT_NOTE with a GNU, a Linux and optionally Xen notes. */
static size_t vmlinux_elf(bool xen, bool pvh, uint64_t pvh_entry, bool linux_note)
{
    uint8_t notes[256];
    size_t nl = 0;
    uint8_t id[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    nl += note(notes + nl, "GNU", 3, id, sizeof(id));
    if (linux_note)
        nl += note(notes + nl, "Linux", 0x100, "", 1);
    if (xen) {
        uint64_t v = 0xffffffff80000000ULL;
        nl += note(notes + nl, "Xen", 3 /* VIRT_BASE */, &v, 8);
    }
    if (pvh)
        nl += note(notes + nl, "Xen", XEN_ELFNOTE_PHYS32_ENTRY, &pvh_entry, 8);
    struct seg s[] = {
        { PT_LOAD, 16 * MiB, 0xffffffff81000000ULL, 0x2000, 0x2000, 0, NULL },
        { PT_LOAD, 17 * MiB, 0xffffffff81100000ULL, 0x800, 0x3000, 0, NULL },
        { PT_NOTE, 0, 0, nl, nl, 4, notes },
    };
    return build_elf(img, 0x1000100, s, 3);
}

/* --------------------------------------------------------- bzImage builder */

struct bzopt {
    uint8_t setup_sects;
    uint16_t version, xloadflags;
    uint32_t pm_len, init_size, initrd_addr_max, cmdline_size;
    uint64_t pref_address;
};

static size_t build_bz(uint8_t *buf, const struct bzopt *o)
{
    memset(buf, 0, IMG_MAX);
    unsigned sects = o->setup_sects ? o->setup_sects : 4;
    size_t setup = (sects + 1) * 512;
    ck_assert_uint_le(setup + o->pm_len, IMG_MAX);
    struct setup_header h = {
        .setup_sects = o->setup_sects, .syssize = o->pm_len / 16,
        .vid_mode = 0xFFFF, .boot_flag = BOOT_FLAG_MAGIC,
        .jump = 0x6AEB, /* jmp short to 0x26c */
        .header = BOOT_HDR_MAGIC, .version = o->version,
        .kernel_version = 0x200, .loadflags = LOADFLAG_LOADED_HIGH,
        .code32_start = 0x100000, .initrd_addr_max = o->initrd_addr_max,
        .kernel_alignment = 0x200000, .relocatable_kernel = 1,
        .xloadflags = o->xloadflags, .cmdline_size = o->cmdline_size,
        .pref_address = o->pref_address, .init_size = o->init_size,
    };
    memcpy(buf + SETUP_HDR_OFF, &h, sizeof(h));
    for (size_t i = 0; i < o->pm_len; i++)
        buf[setup + i] = (uint8_t)(i * 7 + 3);
    return setup + o->pm_len;
}

static const struct bzopt bz_default = {
    .setup_sects = 0, .version = 0x020F, .xloadflags = XLF_KERNEL_64,
    .pm_len = 0x3000, .init_size = 0x8000, .initrd_addr_max = 0x7FFFFFFF,
    .cmdline_size = 2047, .pref_address = 0,
};

static struct boot_config cfg_for(const uint8_t *k, size_t len)
{
    return (struct boot_config){ .kernel = k, .kernel_len = len,
                                 .cmdline = "console=ttyS0 quiet", .ncpus = 2 };
}

/* The e820 map every kind gets for a guest: low region + optional high. */
static void check_map(const struct boot_e820_entry *e, unsigned n, uint64_t low, uint64_t high)
{
    ck_assert_uint_eq(n, high ? 5 : 4);
    ck_assert_uint_eq(e[0].addr, 0);          ck_assert_uint_eq(e[0].size, LAYOUT_EBDA);
    ck_assert_uint_eq(e[0].type, E820_RAM);
    ck_assert_uint_eq(e[1].addr, LAYOUT_EBDA); ck_assert_uint_eq(e[1].size, 0xA0000 - LAYOUT_EBDA);
    ck_assert_uint_eq(e[1].type, E820_RESERVED);
    ck_assert_uint_eq(e[2].addr, 0xF0000);    ck_assert_uint_eq(e[2].size, 0x10000);
    ck_assert_uint_eq(e[2].type, E820_RESERVED);
    ck_assert_uint_eq(e[3].addr, MiB);        ck_assert_uint_eq(e[3].size, low - MiB);
    ck_assert_uint_eq(e[3].type, E820_RAM);
    if (high) {
        ck_assert_uint_eq(e[4].addr, LAYOUT_4G); ck_assert_uint_eq(e[4].size, high);
        ck_assert_uint_eq(e[4].type, E820_RAM);
    }
}

/* ------------------------------------------------------------------ probe */

START_TEST(probe_kinds)
{
    enum boot_kind k = 0;
    size_t n = plain_elf();
    ck_assert_int_eq(boot_probe(img, n, false, &k), 0);
    ck_assert_int_eq(k, BOOT_ELF);
    ck_assert_int_eq(boot_probe(img, n, true, &k), 0);
    ck_assert_int_eq(k, BOOT_ELF);

    n = vmlinux_elf(false, false, 0, true);
    ck_assert_int_eq(boot_probe(img, n, true, &k), 0);
    ck_assert_int_eq(k, BOOT_LINUX_ELF);

    n = vmlinux_elf(true, false, 0, false);       /* Xen note only */
    ck_assert_int_eq(boot_probe(img, n, false, &k), 0);
    ck_assert_int_eq(k, BOOT_LINUX_ELF);

    n = vmlinux_elf(true, true, 16 * MiB + 0x100, true);
    ck_assert_int_eq(boot_probe(img, n, false, &k), 0);
    ck_assert_int_eq(k, BOOT_LINUX_ELF);
    ck_assert_int_eq(boot_probe(img, n, true, &k), 0);
    ck_assert_int_eq(k, BOOT_LINUX_PVH);

    n = build_bz(img, &bz_default);
    ck_assert_int_eq(boot_probe(img, n, false, &k), 0);
    ck_assert_int_eq(k, BOOT_LINUX_BZIMAGE);
}
END_TEST

START_TEST(probe_note_alignment_8)
{
    /* A GNU property note in an 8-aligned PT_NOTE, as gcc emits. */
    uint8_t notes[64] = { 0 };
    struct elf_nhdr nh = { 4, 16, 5 };
    memcpy(notes, &nh, 12);
    memcpy(notes + 12, "GNU", 4);
    size_t nl = 12 + 4 + 4 /* pad to 8 */ + 16;
    struct seg s[] = {
        { PT_LOAD, 2 * MiB, 0, 0x100, 0x100, 0, NULL },
        { PT_NOTE, 0, 0, nl, nl, 8, notes },
    };
    size_t n = build_elf(img, 2 * MiB, s, 2);
    enum boot_kind k = 0;
    ck_assert_int_eq(boot_probe(img, n, false, &k), 0);
    ck_assert_int_eq(k, BOOT_ELF);
}
END_TEST

/* Malformed kernels: each a clean error with a reason. */
static void expect_probe(const uint8_t *b, size_t n, int err)
{
    enum boot_kind k = 0;
    const char *why = NULL;
    ck_assert_int_eq(boot_probe_why(b, n, true, &k, &why), err);
    ck_assert_ptr_nonnull(why);
    ck_assert_str_ne(why, "ok");
    /* boot_load refuses the same image the same way */
    struct guest g;
    guest_init(&g, 4 * MiB, 0);
    struct boot_config c = cfg_for(b, n);
    struct boot_info bi;
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), err);
    guest_free(&g);
}

START_TEST(malformed_elf)
{
    uint8_t tiny[1] = { 0 };
    expect_probe(tiny, 0, -ENOEXEC);                      /* empty */
    expect_probe(NULL, 0, -ENOEXEC);
    memcpy(tiny, "x", 1);
    expect_probe(tiny, 1, -ENOEXEC);
    size_t n = plain_elf();
    expect_probe(img, 40, -EINVAL);                       /* truncated ELF header */
    img[0] = 0x7e;
    expect_probe(img, n, -ENOEXEC);                       /* wrong magic */
    n = plain_elf();
    img[EI_CLASS] = 1;
    expect_probe(img, n, -ENOEXEC);                       /* 32-bit ELF */
    n = plain_elf();
    img[EI_DATA] = 2;
    expect_probe(img, n, -ENOEXEC);                       /* big endian */
    n = plain_elf();
    uint16_t v16 = 3; /* EM_386 */
    memcpy(img + offsetof(struct elf64_ehdr, e_machine), &v16, 2);
    expect_probe(img, n, -ENOEXEC);                       /* wrong machine */
    n = plain_elf();
    v16 = 3; /* ET_DYN */
    memcpy(img + offsetof(struct elf64_ehdr, e_type), &v16, 2);
    expect_probe(img, n, -ENOEXEC);
    n = plain_elf();
    uint64_t v64 = n - 20;
    memcpy(img + offsetof(struct elf64_ehdr, e_phoff), &v64, 8);
    expect_probe(img, n, -EINVAL);                        /* phoff out of the file */
    n = plain_elf();
    v64 = UINT64_MAX - 8;
    memcpy(img + offsetof(struct elf64_ehdr, e_phoff), &v64, 8);
    expect_probe(img, n, -EINVAL);                        /* phoff overflowing */
    n = plain_elf();
    v16 = 500;
    memcpy(img + offsetof(struct elf64_ehdr, e_phnum), &v16, 2);
    expect_probe(img, n, -EINVAL);                        /* phnum past the file */
    n = plain_elf();
    v16 = 0;
    memcpy(img + offsetof(struct elf64_ehdr, e_phnum), &v16, 2);
    expect_probe(img, n, -EINVAL);                        /* no program headers */
    n = plain_elf();
    v16 = 32;
    memcpy(img + offsetof(struct elf64_ehdr, e_phentsize), &v16, 2);
    expect_probe(img, n, -EINVAL);                        /* phentsize */
    n = plain_elf();
    patch_ph64(img, 0, offsetof(struct elf64_phdr, p_filesz), 0x5000);
    expect_probe(img, n, -EINVAL);                        /* p_filesz > p_memsz (and past EOF) */
    n = plain_elf();
    patch_ph64(img, 0, offsetof(struct elf64_phdr, p_filesz), 0x2000);
    patch_ph64(img, 0, offsetof(struct elf64_phdr, p_memsz), 0x1000);
    expect_probe(img, n + 0x2000, -EINVAL);               /* p_filesz > p_memsz, inside file */
    n = plain_elf();
    patch_ph64(img, 0, offsetof(struct elf64_phdr, p_offset), n - 0x800);
    expect_probe(img, n, -EINVAL);                        /* p_offset + p_filesz past the end */
    n = plain_elf();
    patch_ph64(img, 0, offsetof(struct elf64_phdr, p_offset), UINT64_MAX - 0x10);
    expect_probe(img, n, -EINVAL);                        /* p_offset + p_filesz overflows */
    n = plain_elf();
    patch_ph64(img, 0, offsetof(struct elf64_phdr, p_paddr), UINT64_MAX - 0x100);
    expect_probe(img, n, -EINVAL);                        /* p_paddr + p_memsz overflows */
    n = plain_elf();
    patch_ph64(img, 0, offsetof(struct elf64_phdr, p_memsz), 0);
    expect_probe(img, n, -EINVAL);                        /* no loadable segment (filesz>memsz too) */
    n = plain_elf();
    patch_ph64(img, 0, offsetof(struct elf64_phdr, p_type), 6 /* PT_PHDR */);
    expect_probe(img, n, -EINVAL);                        /* no PT_LOAD at all */
}
END_TEST

START_TEST(malformed_notes)
{
    /* A note whose name size runs past the PT_NOTE segment. */
    uint8_t notes[32] = { 0 };
    struct elf_nhdr nh = { 200, 0, 1 };
    memcpy(notes, &nh, 12);
    struct seg s[] = {
        { PT_LOAD, 2 * MiB, 0, 0x100, 0x100, 0, NULL },
        { PT_NOTE, 0, 0, 32, 32, 4, notes },
    };
    size_t n = build_elf(img, 2 * MiB, s, 2);
    expect_probe(img, n, -EINVAL);
    nh = (struct elf_nhdr){ 4, UINT32_MAX, 1 };           /* desc size huge */
    memcpy(notes, &nh, 12);
    memcpy(notes + 12, "Xen", 4);
    n = build_elf(img, 2 * MiB, s, 2);
    expect_probe(img, n, -EINVAL);
    nh = (struct elf_nhdr){ 4, 2, XEN_ELFNOTE_PHYS32_ENTRY }; /* PVH entry of size 2 */
    memcpy(notes, &nh, 12);
    n = build_elf(img, 2 * MiB, s, 2);
    expect_probe(img, n, -EINVAL);
}
END_TEST

START_TEST(malformed_bzimage)
{
    struct bzopt o = bz_default;
    size_t n = build_bz(img, &o);
    expect_probe(img, 0x230, -EINVAL);                    /* truncated setup header */
    img[0x1FE] = 0;
    expect_probe(img, n, -EINVAL);                        /* boot_flag */
    o.xloadflags = 0;
    n = build_bz(img, &o);
    expect_probe(img, n, -ENOEXEC);                       /* no XLF_KERNEL_64 */
    const char *why = NULL;
    enum boot_kind k;
    boot_probe_why(img, n, false, &k, &why);
    ck_assert_ptr_nonnull(strstr(why, "XLF_KERNEL_64"));
    o = bz_default;
    o.version = 0x0206;
    n = build_bz(img, &o);
    expect_probe(img, n, -ENOEXEC);                       /* protocol too old */
    o = bz_default;
    n = build_bz(img, &o);
    img[SH_OFF(loadflags)] = 0;
    expect_probe(img, n, -ENOEXEC);                       /* zImage */
    n = build_bz(img, &o);
    img[SH_OFF(setup_sects)] = 255;
    expect_probe(img, n, -EINVAL);                        /* setup_sects absurd */
    n = build_bz(img, &o);
    expect_probe(img, 5 * 512 + 0x100, -EINVAL);          /* protected-mode part truncated */
    expect_probe(img, 5 * 512, -EINVAL);                  /* no protected-mode part */
    n = build_bz(img, &o);
    uint32_t z = 0;
    memcpy(img + SH_OFF(syssize), &z, 4);
    expect_probe(img, n, -EINVAL);                        /* syssize 0 */
    o.pm_len = 0x200;
    n = build_bz(img, &o);
    expect_probe(img, n, -EINVAL);                        /* no room for startup_64 */
    o = bz_default;
    n = build_bz(img, &o);
    img[0x201] = 0x10;
    expect_probe(img, n, -EINVAL);                        /* header shorter than 2.12's */
    n = build_bz(img, &o);
    uint64_t pa = UINT64_MAX - 4;
    memcpy(img + SH_OFF(pref_address), &pa, 8);
    expect_probe(img, n, -EINVAL);                        /* pref_address + init_size wraps */
}
END_TEST

/* ------------------------------------------------------------------- load */

START_TEST(load_plain_elf)
{
    struct guest g;
    guest_init(&g, RAM_SIZE, 0);
    size_t n = plain_elf();
    struct boot_config c = cfg_for(img, n);
    c.ncpus = 3;
    struct boot_info bi;
    const char *why = NULL;
    ck_assert_int_eq(boot_load_why(&g.m, &c, &bi, &why), 0);
    ck_assert_str_eq(why, "ok");
    ck_assert_int_eq(bi.kind, BOOT_ELF);
    ck_assert_uint_eq(bi.entry, 2 * MiB + 0x10);
    ck_assert_uint_eq(bi.zero_page, 0);
    ck_assert_uint_eq(bi.kernel_start, 2 * MiB);
    ck_assert_uint_eq(bi.kernel_end, 2 * MiB + 0x4000);
    ck_assert_uint_eq(bi.initrd_start, 0);
    for (uint64_t i = 0; i < 0x1000; i++)
        ck_assert_uint_eq(g.low[2 * MiB + i], 0x40);
    for (uint64_t i = 0x1000; i < 0x4000; i++)
        ck_assert_uint_eq(g.low[2 * MiB + i], 0);      /* bss zeroed */
    ck_assert_uint_eq(g.low[2 * MiB + 0x4000], 0xCC);  /* nothing past memsz */
    ck_assert_str_eq((char *)g.low + LAYOUT_CMDLINE, "console=ttyS0 quiet");
    /* the zero page is left empty for a plain ELF */
    for (uint64_t i = 0; i < 0x1000; i++)
        ck_assert_uint_eq(g.low[LAYOUT_ZERO_PAGE + i], 0);
    ck_assert_uint_eq(rd64(&g, LAYOUT_GDT + 16), boot_gdt_entry(2));
    ck_assert_uint_eq(rd64(&g, LAYOUT_PML4) & ~0xFFFULL, LAYOUT_PDPT);
    guest_free(&g);
}
END_TEST

START_TEST(load_elf_placement_errors)
{
    struct guest g;
    guest_init(&g, 8 * MiB, 0);
    struct boot_info bi;
    struct seg s[] = { { PT_LOAD, 0x80000, 0, 0x100, 0x100, 0, NULL } };
    size_t n = build_elf(img, 0x80000, s, 1);
    struct boot_config c = cfg_for(img, n);
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), -ENOMEM);   /* below 1 MiB */
    s[0].paddr = 8 * MiB - 0x80;
    n = build_elf(img, s[0].paddr, s, 1);
    c = cfg_for(img, n);
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), -ENOMEM);   /* past the end of RAM */
    s[0].paddr = 2 * MiB;
    s[0].memsz = 1ULL << 63;
    n = build_elf(img, s[0].paddr, s, 1);
    c = cfg_for(img, n);
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), -ENOMEM);   /* absurd p_memsz */
    s[0].memsz = 0x100;
    n = build_elf(img, 3 * MiB, s, 1);
    c = cfg_for(img, n);
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), -EINVAL);   /* entry outside segments */
    n = build_elf(img, 2 * MiB, s, 1);
    c = cfg_for(img, n);
    c.ncpus = 0;
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), -EINVAL);
    c.ncpus = LAYOUT_MAX_CPUS + 1;
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), -EINVAL);
    c.ncpus = LAYOUT_MAX_CPUS;
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), 0);
    /* guest RAM that does not start at 0 */
    g.m.r[0].gpa = MiB;
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), -ENOMEM);
    guest_free(&g);
}
END_TEST

/* An extra archive (moat_config.initrd_extra, image mode's run config)
 * placed after the initrd at the next 4-byte boundary, zeros between, the
 * whole as one initrd; alone, it is the initrd. */
START_TEST(load_initrd_extra)
{
    struct guest g;
    guest_init(&g, RAM_SIZE, 2 * MiB);
    size_t n = vmlinux_elf(true, true, 16 * MiB + 0x80, true);
    uint8_t initrd[5001], extra[7];
    memset(initrd, 0x5A, sizeof(initrd));
    memset(extra, 0xE7, sizeof(extra));
    struct boot_config c = cfg_for(img, n);
    c.initrd = initrd;
    c.initrd_len = sizeof(initrd);
    c.initrd_extra = extra;
    c.initrd_extra_len = sizeof(extra);
    struct boot_info bi;
    memset(g.low + RAM_SIZE - 0x2000, 0xFF, 0x2000);  /* not zero: the padding is written */
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), 0);
    ck_assert_uint_eq(bi.initrd_size, 5004 + sizeof(extra));
    ck_assert_int_eq(memcmp(g.low + bi.initrd_start, initrd, sizeof(initrd)), 0);
    for (int i = 5001; i < 5004; i++)
        ck_assert_uint_eq(g.low[bi.initrd_start + i], 0);
    ck_assert_int_eq(memcmp(g.low + bi.initrd_start + 5004, extra, sizeof(extra)), 0);
    struct boot_params bp;
    ck_assert_int_eq(gmem_read(&g.m, LAYOUT_ZERO_PAGE, &bp, sizeof(bp)), 0);
    ck_assert_uint_eq(bp.hdr.ramdisk_size, bi.initrd_size);
    c.initrd = NULL;
    c.initrd_len = 0;
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), 0);
    ck_assert_uint_eq(bi.initrd_size, sizeof(extra));
    ck_assert_int_eq(memcmp(g.low + bi.initrd_start, extra, sizeof(extra)), 0);
    guest_free(&g);
}
END_TEST

START_TEST(load_vmlinux)
{
    struct guest g;
    guest_init(&g, RAM_SIZE, 2 * MiB);
    size_t n = vmlinux_elf(true, true, 16 * MiB + 0x80, true);
    uint8_t initrd[5000];
    memset(initrd, 0x5A, sizeof(initrd));
    struct boot_config c = cfg_for(img, n);
    c.initrd = initrd;
    c.initrd_len = sizeof(initrd);
    struct boot_info bi;
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), 0);
    ck_assert_int_eq(bi.kind, BOOT_LINUX_ELF);
    ck_assert_uint_eq(bi.entry, 0x1000100);
    ck_assert_uint_eq(bi.zero_page, LAYOUT_ZERO_PAGE);
    ck_assert_uint_eq(bi.kernel_start, 16 * MiB);
    ck_assert_uint_eq(bi.kernel_end, 17 * MiB + 0x3000);
    ck_assert_uint_eq(g.low[16 * MiB], 0x40);
    ck_assert_uint_eq(g.low[17 * MiB + 0x7FF], 0x41);
    ck_assert_uint_eq(g.low[17 * MiB + 0x800], 0);
    ck_assert_uint_eq(g.low[17 * MiB + 0x2FFF], 0);
    /* initrd: highest page-aligned start below the end of low RAM */
    ck_assert_uint_eq(bi.initrd_size, sizeof(initrd));
    ck_assert_uint_eq(bi.initrd_start, (RAM_SIZE - sizeof(initrd)) & ~0xFFFULL);
    ck_assert_int_eq(memcmp(g.low + bi.initrd_start, initrd, sizeof(initrd)), 0);

    struct boot_params bp;
    ck_assert_int_eq(gmem_read(&g.m, LAYOUT_ZERO_PAGE, &bp, sizeof(bp)), 0);
    ck_assert_uint_eq(bp.hdr.boot_flag, 0xAA55);
    ck_assert_uint_eq(bp.hdr.header, BOOT_HDR_MAGIC);
    ck_assert_uint_ge(bp.hdr.version, 0x020C);
    ck_assert_uint_eq(bp.hdr.type_of_loader, 0xFF);
    ck_assert(bp.hdr.loadflags & LOADFLAG_CAN_USE_HEAP);
    ck_assert_uint_eq(bp.hdr.cmd_line_ptr, LAYOUT_CMDLINE);
    ck_assert_uint_eq(bp.hdr.cmdline_size, 2047);
    ck_assert_uint_eq(bp.hdr.ramdisk_image, bi.initrd_start);
    ck_assert_uint_eq(bp.hdr.ramdisk_size, sizeof(initrd));
    ck_assert_uint_ne(bp.hdr.kernel_alignment, 0);
    check_map(bp.e820_table, bp.e820_entries, RAM_SIZE, 2 * MiB);
    ck_assert_str_eq((char *)g.low + LAYOUT_CMDLINE, c.cmdline);

    /* a vmlinux whose e_entry is virtual in the kernel map */
    n = vmlinux_elf(false, false, 0, true);
    uint64_t ve = 0xffffffff81000040ULL;
    memcpy(img + offsetof(struct elf64_ehdr, e_entry), &ve, 8);
    c = cfg_for(img, n);
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), 0);
    ck_assert_uint_eq(bi.entry, 16 * MiB + 0x40);
    ve = 0xffffffff90000000ULL;
    memcpy(img + offsetof(struct elf64_ehdr, e_entry), &ve, 8);
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), -EINVAL);
    guest_free(&g);
}
END_TEST

START_TEST(load_vmlinux_cmdline_limit)
{
    struct guest g;
    guest_init(&g, RAM_SIZE, 0);
    size_t n = vmlinux_elf(false, false, 0, true);
    char line[2049];
    memset(line, 'a', sizeof(line));
    line[2047] = '\0';  /* 2047 characters: fits */
    struct boot_config c = cfg_for(img, n);
    c.cmdline = line;
    struct boot_info bi;
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), 0);
    ck_assert_uint_eq(strlen((char *)g.low + LAYOUT_CMDLINE), 2047);
    line[2047] = 'a';
    line[2048] = '\0';
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), -E2BIG);
    /* a plain ELF accepts up to LAYOUT_CMDLINE_MAX - 1 */
    n = plain_elf();
    c = cfg_for(img, n);
    c.cmdline = line;
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), 0);
    char *big = malloc(LAYOUT_CMDLINE_MAX + 1);
    memset(big, 'b', LAYOUT_CMDLINE_MAX);
    big[LAYOUT_CMDLINE_MAX] = '\0';
    c.cmdline = big;
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), -E2BIG);
    big[LAYOUT_CMDLINE_MAX - 1] = '\0';
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), 0);
    free(big);
    guest_free(&g);
}
END_TEST

START_TEST(load_pvh)
{
    struct guest g;
    guest_init(&g, RAM_SIZE, 0);
    size_t n = vmlinux_elf(true, true, 16 * MiB + 0x80, true);
    uint8_t initrd[0x2100];
    memset(initrd, 0x77, sizeof(initrd));
    struct boot_config c = cfg_for(img, n);
    c.prefer_pvh = true;
    c.initrd = initrd;
    c.initrd_len = sizeof(initrd);
    struct boot_info bi;
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), 0);
    ck_assert_int_eq(bi.kind, BOOT_LINUX_PVH);
    ck_assert_uint_eq(bi.entry, 16 * MiB + 0x80);
    ck_assert_uint_eq(bi.zero_page, LAYOUT_ZERO_PAGE);
    struct hvm_start_info si;
    ck_assert_int_eq(gmem_read(&g.m, LAYOUT_ZERO_PAGE, &si, sizeof(si)), 0);
    ck_assert_uint_eq(si.magic, 0x336ec578);
    ck_assert_uint_eq(si.version, 1);
    ck_assert_uint_eq(si.cmdline_paddr, LAYOUT_CMDLINE);
    ck_assert_uint_eq(si.rsdp_paddr, 0);
    ck_assert_uint_eq(si.nr_modules, 1);
    ck_assert_uint_eq(si.memmap_paddr, LAYOUT_PVH_MEMMAP);
    struct hvm_modlist_entry mod;
    ck_assert_int_eq(gmem_read(&g.m, si.modlist_paddr, &mod, sizeof(mod)), 0);
    ck_assert_uint_eq(mod.paddr, bi.initrd_start);
    ck_assert_uint_eq(mod.size, sizeof(initrd));
    ck_assert_uint_eq(bi.initrd_start % 0x1000, 0);
    ck_assert_uint_le(bi.initrd_start + sizeof(initrd), RAM_SIZE);
    ck_assert_uint_gt(bi.initrd_start + 0x1000 + sizeof(initrd), RAM_SIZE);
    /* the module list does not overlap start_info */
    ck_assert_uint_ge(si.modlist_paddr, LAYOUT_ZERO_PAGE + sizeof(si));
    struct hvm_memmap_table_entry me[8];
    ck_assert_uint_le(si.memmap_entries, 8);
    ck_assert_int_eq(gmem_read(&g.m, LAYOUT_PVH_MEMMAP, me, sizeof(me)), 0);
    struct boot_e820_entry e[8];
    for (unsigned i = 0; i < si.memmap_entries; i++)
        e[i] = (struct boot_e820_entry){ me[i].addr, me[i].size, me[i].type };
    check_map(e, si.memmap_entries, RAM_SIZE, 0);

    /* PVH entry outside every segment */
    n = vmlinux_elf(true, true, 40 * MiB, true);
    c.kernel_len = n;
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), -EINVAL);
    /* 32-bit PHYS32_ENTRY descriptor works too */
    uint8_t notes[64];
    uint32_t e32 = 2 * MiB + 4;
    size_t nl = note(notes, "Xen", XEN_ELFNOTE_PHYS32_ENTRY, &e32, 4);
    struct seg s[] = {
        { PT_LOAD, 2 * MiB, 0, 0x100, 0x100, 0, NULL },
        { PT_NOTE, 0, 0, nl, nl, 4, notes },
    };
    n = build_elf(img, 2 * MiB, s, 2);
    c = cfg_for(img, n);
    c.prefer_pvh = true;
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), 0);
    ck_assert_int_eq(bi.kind, BOOT_LINUX_PVH);
    ck_assert_uint_eq(bi.entry, e32);
    ck_assert_uint_eq(rd64(&g, LAYOUT_ZERO_PAGE + 8) >> 32, 0); /* nr_modules 0 */
    guest_free(&g);
}
END_TEST

START_TEST(load_bzimage)
{
    struct guest g;
    guest_init(&g, RAM_SIZE, 4 * MiB);
    struct bzopt o = bz_default;
    o.initrd_addr_max = 0x00FFFFFF;  /* 16 MiB: below the end of RAM */
    size_t n = build_bz(img, &o);
    uint8_t initrd[0x1800];
    memset(initrd, 0x3C, sizeof(initrd));
    struct boot_config c = cfg_for(img, n);
    c.initrd = initrd;
    c.initrd_len = sizeof(initrd);
    struct boot_info bi;
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), 0);
    ck_assert_int_eq(bi.kind, BOOT_LINUX_BZIMAGE);
    ck_assert_uint_eq(bi.entry, LAYOUT_HIMEM + 0x200);
    ck_assert_uint_eq(bi.kernel_start, LAYOUT_HIMEM);
    ck_assert_uint_eq(bi.kernel_end, LAYOUT_HIMEM + o.init_size);
    size_t setup = 5 * 512;
    ck_assert_int_eq(memcmp(g.low + LAYOUT_HIMEM, img + setup, o.pm_len), 0);
    ck_assert_uint_eq(bi.initrd_start, (16 * MiB - sizeof(initrd)) & ~0xFFFULL);
    ck_assert_int_eq(memcmp(g.low + bi.initrd_start, initrd, sizeof(initrd)), 0);

    struct boot_params bp;
    ck_assert_int_eq(gmem_read(&g.m, LAYOUT_ZERO_PAGE, &bp, sizeof(bp)), 0);
    /* header copied from the image, loader fields filled in */
    struct setup_header want;
    memcpy(&want, img + SETUP_HDR_OFF, sizeof(want));
    ck_assert_uint_eq(bp.hdr.setup_sects, want.setup_sects);
    ck_assert_uint_eq(bp.hdr.syssize, want.syssize);
    ck_assert_uint_eq(bp.hdr.vid_mode, want.vid_mode);
    ck_assert_uint_eq(bp.hdr.version, want.version);
    ck_assert_uint_eq(bp.hdr.init_size, want.init_size);
    ck_assert_uint_eq(bp.hdr.xloadflags, want.xloadflags);
    ck_assert_uint_eq(bp.hdr.kernel_alignment, want.kernel_alignment);
    ck_assert_uint_eq(bp.hdr.code32_start, want.code32_start);
    ck_assert_uint_eq(bp.hdr.type_of_loader, 0xFF);
    ck_assert_uint_eq(bp.hdr.loadflags, want.loadflags | LOADFLAG_CAN_USE_HEAP);
    ck_assert_uint_eq(bp.hdr.heap_end_ptr, 0xFE00);
    ck_assert_uint_eq(bp.hdr.cmd_line_ptr, LAYOUT_CMDLINE);
    ck_assert_uint_eq(bp.hdr.ramdisk_image, bi.initrd_start);
    ck_assert_uint_eq(bp.hdr.ramdisk_size, sizeof(initrd));
    check_map(bp.e820_table, bp.e820_entries, RAM_SIZE, 4 * MiB);
    /* nothing outside the header and the e820 table */
    ck_assert_uint_eq(g.low[LAYOUT_ZERO_PAGE + 0x1EF], 0);  /* sentinel */
    ck_assert_uint_eq(rd64(&g, LAYOUT_ZERO_PAGE + 0xC0), 0); /* ext_ramdisk_* */
    ck_assert_str_eq((char *)g.low + LAYOUT_CMDLINE, c.cmdline);
    guest_free(&g);
}
END_TEST

/* ram_is_zero: on fresh (zero) RAM the loader leaves the low 1 MiB alone
 * where it writes nothing, and the result is the same bytes as clearing
 * garbage; on garbage with the flag set the garbage stays (the flag is a
 * promise, not a request). */
static void load_zero_ram(bool bz)
{
    struct bzopt o = bz_default;
    size_t n = bz ? build_bz(img, &o) : vmlinux_elf(false, false, 0, true);
    struct guest a, b, c;
    guest_init(&a, RAM_SIZE, 0);               /* garbage, cleared by the loader */
    guest_init(&b, RAM_SIZE, 0);
    memset(b.low, 0, RAM_SIZE);                /* fresh RAM */
    guest_init(&c, RAM_SIZE, 0);               /* garbage, flag set anyway */
    struct boot_config cfg = cfg_for(img, n);
    struct boot_info ia, ib, ic;
    ck_assert_int_eq(boot_load(&a.m, &cfg, &ia), 0);
    cfg.ram_is_zero = true;
    ck_assert_int_eq(boot_load(&b.m, &cfg, &ib), 0);
    ck_assert_int_eq(boot_load(&c.m, &cfg, &ic), 0);
    ck_assert_int_eq(memcmp(&ia, &ib, sizeof(ia)), 0);
    ck_assert_int_eq(memcmp(a.low, b.low, LAYOUT_HIMEM), 0);
    size_t kept = 0;
    for (uint64_t i = 0; i < LAYOUT_HIMEM; i++)
        kept += c.low[i] == 0xCC;
    ck_assert_uint_gt(kept, LAYOUT_HIMEM / 2);   /* not cleared: not touched */
    guest_free(&a);
    guest_free(&b);
    guest_free(&c);
}

START_TEST(load_zero_ram_bzimage) { load_zero_ram(true); }
END_TEST
START_TEST(load_zero_ram_vmlinux) { load_zero_ram(false); }
END_TEST

START_TEST(load_bzimage_limits)
{
    struct guest g;
    guest_init(&g, 8 * MiB, 0);
    struct boot_info bi;
    struct bzopt o = bz_default;
    o.init_size = 8 * MiB;           /* kernel larger than RAM */
    size_t n = build_bz(img, &o);
    struct boot_config c = cfg_for(img, n);
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), -ENOMEM);
    o = bz_default;
    o.pref_address = 16 * MiB;       /* runs at 16 MiB: RAM is 8 MiB */
    n = build_bz(img, &o);
    c = cfg_for(img, n);
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), -ENOMEM);
    o = bz_default;
    o.pref_address = 4 * MiB;
    o.init_size = 0x100000;
    n = build_bz(img, &o);
    c = cfg_for(img, n);
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), 0);
    ck_assert_uint_eq(bi.kernel_end, 5 * MiB);
    /* initrd larger than RAM */
    size_t big = 9 * MiB;
    uint8_t *ird = calloc(1, big);
    c.initrd = ird;
    c.initrd_len = big;
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), -ENOMEM);
    /* fits in RAM but not above the kernel */
    c.initrd_len = 3 * MiB + 1;
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), -ENOMEM);
    c.initrd_len = 3 * MiB;
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), 0);
    ck_assert_uint_eq(bi.initrd_start, 5 * MiB);
    /* initrd_addr_max below the kernel end */
    o.initrd_addr_max = 2 * MiB;
    n = build_bz(img, &o);
    c.initrd_len = 0x1000;
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), -ENOMEM);
    free(ird);
    /* command line longer than the header's cmdline_size */
    o = bz_default;
    o.cmdline_size = 10;
    n = build_bz(img, &o);
    c = cfg_for(img, n);
    c.cmdline = "0123456789";
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), 0);
    c.cmdline = "0123456789A";
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), -E2BIG);
    guest_free(&g);
}
END_TEST

/* ------------------------------------------------------- boot structures */

START_TEST(page_tables)
{
    struct guest g;
    guest_init(&g, 2 * MiB, 0);
    ck_assert_int_eq(boot_setup_page_tables(&g.m), 0);
    uint64_t pml4e = rd64(&g, LAYOUT_PML4);
    ck_assert_uint_eq(pml4e & 3, 3);                    /* present, writable */
    ck_assert_uint_eq(pml4e & ~0xFFFULL, LAYOUT_PDPT);
    for (unsigned i = 1; i < 512; i++)
        ck_assert_uint_eq(rd64(&g, LAYOUT_PML4 + i * 8), 0);
    /* Walk every 2 MiB page of the first 4 GiB: identity, present|rw|PS. */
    for (uint64_t va = 0; va < LAYOUT_4G; va += 2 * MiB) {
        uint64_t pdpte = rd64(&g, LAYOUT_PDPT + ((va >> 30) & 511) * 8);
        ck_assert_uint_eq(pdpte & 3, 3);
        ck_assert_uint_eq(pdpte & 0x80, 0);
        uint64_t pd = pdpte & ~0xFFFULL;
        ck_assert_uint_ge(pd, LAYOUT_PD);
        ck_assert_uint_lt(pd, LAYOUT_PD_END);
        uint64_t pde = rd64(&g, pd + ((va >> 21) & 511) * 8);
        ck_assert_uint_eq(pde & 0x83, 0x83);
        ck_assert_uint_eq(pde & ~0x1FFFFFULL, va);
    }
    for (unsigned i = 4; i < 512; i++)
        ck_assert_uint_eq(rd64(&g, LAYOUT_PDPT + i * 8), 0);
    struct gmem tiny = { .r = { { 0, 0xA000, g.low } }, .n = 1 };
    ck_assert_int_eq(boot_setup_page_tables(&tiny), -EFAULT);
    guest_free(&g);
}
END_TEST

static uint64_t desc_base(uint64_t d)
{
    return ((d >> 16) & 0xFFFFFF) | ((d >> 56) & 0xFF) << 24;
}
static uint64_t desc_limit(uint64_t d)
{
    uint64_t l = (d & 0xFFFF) | ((d >> 48) & 0xF) << 16;
    return (d >> 55) & 1 ? (l << 12) | 0xFFF : l;
}

START_TEST(gdt)
{
    struct guest g;
    guest_init(&g, 2 * MiB, 0);
    ck_assert_int_eq(boot_setup_gdt(&g.m), 0);
    for (unsigned i = 0; i < BOOT_GDT_ENTRIES; i++)
        ck_assert_uint_eq(rd64(&g, LAYOUT_GDT + i * 8), boot_gdt_entry(i));
    ck_assert_uint_eq(boot_gdt_entry(BOOT_GDT_ENTRIES), 0);
    ck_assert_uint_eq(boot_gdt_entry(0), 0);
    uint64_t c32 = boot_gdt_entry(BOOT_SEL_CODE32 / 8), c64 = boot_gdt_entry(BOOT_SEL_CODE64 / 8);
    uint64_t ds = boot_gdt_entry(BOOT_SEL_DATA / 8), tss = boot_gdt_entry(BOOT_SEL_TSS / 8);
    /* flat 4 GiB, present, DPL 0, code/data (S=1) */
    for (int k = 0; k < 3; k++) {
        uint64_t d = k == 0 ? c32 : k == 1 ? c64 : ds;
        ck_assert_uint_eq(desc_base(d), 0);
        ck_assert_uint_eq(desc_limit(d), 0xFFFFFFFF);
        ck_assert_uint_eq((d >> 47) & 1, 1);   /* P */
        ck_assert_uint_eq((d >> 45) & 3, 0);   /* DPL */
        ck_assert_uint_eq((d >> 44) & 1, 1);   /* S */
    }
    ck_assert_uint_eq((c32 >> 43) & 1, 1);     /* code */
    ck_assert_uint_eq((c32 >> 54) & 1, 1);     /* D: 32-bit */
    ck_assert_uint_eq((c32 >> 53) & 1, 0);
    ck_assert_uint_eq((c64 >> 43) & 1, 1);
    ck_assert_uint_eq((c64 >> 53) & 1, 1);     /* L: 64-bit */
    ck_assert_uint_eq((c64 >> 54) & 1, 0);     /* D must be 0 with L */
    ck_assert_uint_eq((ds >> 43) & 1, 0);      /* data */
    ck_assert_uint_eq((ds >> 41) & 1, 1);      /* writable */
    ck_assert_uint_eq((tss >> 44) & 1, 0);     /* system descriptor */
    ck_assert_uint_eq((tss >> 40) & 0xF, 0xB); /* busy TSS */
    ck_assert_uint_eq(desc_base(tss), 0);
    ck_assert_uint_eq(desc_limit(tss), 0x67);
    ck_assert_uint_eq(boot_gdt_entry(BOOT_SEL_TSS / 8 + 1), 0); /* base 63..32 */
    ck_assert_uint_le(LAYOUT_GDT + BOOT_GDT_LIMIT + 1, 0x1000);
    guest_free(&g);
}
END_TEST

static uint8_t sum(const uint8_t *p, size_t n)
{
    uint8_t s = 0;
    while (n--)
        s = (uint8_t)(s + *p++);
    return s;
}

static void check_mptable(const struct guest *g, unsigned ncpus)
{
    /* Find the floating pointer the way Linux does: scan the last KiB of
     * base memory and the BIOS area on 16-byte boundaries. */
    const uint8_t *fp = NULL;
    for (uint64_t a = 0x9FC00; a < 0xA0000 && !fp; a += 16)
        if (!memcmp(g->low + a, "_MP_", 4) && g->low[a + 8] == 1 && sum(g->low + a, 16) == 0)
            fp = g->low + a;
    for (uint64_t a = 0xF0000; a < 0x100000 && !fp; a += 16)
        if (!memcmp(g->low + a, "_MP_", 4) && g->low[a + 8] == 1 && sum(g->low + a, 16) == 0)
            fp = g->low + a;
    ck_assert_ptr_nonnull(fp);
    struct mpf_intel f;
    memcpy(&f, fp, sizeof(f));
    ck_assert_uint_eq(f.specification, 4);
    ck_assert_uint_eq(f.feature1, 0);
    struct mpc_table h;
    ck_assert_int_eq(gmem_read(&g->m, f.physptr, &h, sizeof(h)), 0);
    ck_assert_int_eq(memcmp(h.signature, "PCMP", 4), 0);
    ck_assert_uint_eq(h.spec, 4);
    ck_assert_uint_eq(h.lapic, 0xFEE00000);
    /* the table lies in e820-reserved memory below 1 MiB */
    ck_assert_uint_ge(f.physptr, 0xF0000);
    ck_assert_uint_le(f.physptr + h.length, 0x100000);
    ck_assert_uint_eq(sum(g->low + f.physptr, h.length), 0);

    const uint8_t *p = g->low + f.physptr + sizeof(h), *end = g->low + f.physptr + h.length;
    unsigned cpus = 0, bsp = 0, buses = 0, ioapics = 0, ints = 0, lints = 0, count = 0;
    int ioapic_id = -1;
    bool pin_seen[BOOT_IOAPIC_PINS] = { 0 };
    while (p < end) {
        count++;
        switch (p[0]) {
        case MP_PROCESSOR: {
            struct mpc_cpu c;
            memcpy(&c, p, sizeof(c));
            ck_assert_uint_eq(c.apicid, cpus);
            ck_assert(c.cpuflag & 1);
            if (c.cpuflag & 2) {
                bsp++;
                ck_assert_uint_eq(c.apicid, 0);
            }
            cpus++;
            p += sizeof(c);
            break;
        }
        case MP_BUS:
            ck_assert_int_eq(memcmp(p + 2, "ISA   ", 6), 0);
            buses++;
            p += 8;
            break;
        case MP_IOAPIC: {
            struct mpc_ioapic io;
            memcpy(&io, p, sizeof(io));
            ck_assert_uint_eq(io.apicid, ncpus);
            ck_assert_uint_eq(io.apicver, 0x11);
            ck_assert_uint_eq(io.flags & 1, 1);
            ck_assert_uint_eq(io.apicaddr, 0xFEC00000);
            ioapic_id = io.apicid;
            ioapics++;
            p += 8;
            break;
        }
        case MP_INTSRC: {
            struct mpc_intsrc e;
            memcpy(&e, p, sizeof(e));
            ck_assert_int_eq(e.dstapic, ioapic_id);
            ck_assert_uint_lt(e.dstirq, BOOT_IOAPIC_PINS);
            ck_assert(!pin_seen[e.dstirq]);
            pin_seen[e.dstirq] = true;
            ck_assert_uint_eq(e.srcbusirq, e.dstirq);
            ck_assert_uint_eq(e.irqtype, MP_IRQ_INT);
            ints++;
            p += 8;
            break;
        }
        case MP_LINTSRC: {
            struct mpc_intsrc e;
            memcpy(&e, p, sizeof(e));
            ck_assert_uint_eq(e.dstapic, 0xFF);
            ck_assert_uint_eq(e.dstirq, e.irqtype == MP_IRQ_EXTINT ? 0 : 1);
            lints++;
            p += 8;
            break;
        }
        default:
            ck_abort_msg("unknown MP entry type %u", p[0]);
        }
    }
    ck_assert(p == end);
    ck_assert_uint_eq(count, h.oemcount);
    ck_assert_uint_eq(cpus, ncpus);
    ck_assert_uint_eq(bsp, 1);
    ck_assert_uint_eq(buses, 1);
    ck_assert_uint_eq(ioapics, 1);
    ck_assert_uint_eq(ints, BOOT_IOAPIC_PINS);
    ck_assert_uint_eq(lints, 2);
}

START_TEST(mptable)
{
    struct guest g;
    guest_init(&g, 2 * MiB, 0);
    unsigned counts[] = { 1, 2, 4, 37, LAYOUT_MAX_CPUS };
    for (unsigned i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        memset(g.low, 0, 2 * MiB);
        ck_assert_int_eq(boot_setup_mptable(&g.m, counts[i]), 0);
        check_mptable(&g, counts[i]);
    }
    ck_assert_int_eq(boot_setup_mptable(&g.m, 0), -EINVAL);
    ck_assert_int_eq(boot_setup_mptable(&g.m, LAYOUT_MAX_CPUS + 1), -EINVAL);
    /* boot_load writes it too, for the configured CPU count */
    memset(g.low, 0, 2 * MiB);
    guest_free(&g);
    guest_init(&g, RAM_SIZE, 0);
    size_t n = plain_elf();
    struct boot_config c = cfg_for(img, n);
    c.ncpus = 5;
    struct boot_info bi;
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), 0);
    check_mptable(&g, 5);
    guest_free(&g);
}
END_TEST

/* --------------------------------------------------------------- cmdline */

START_TEST(cmdline_build)
{
    char buf[128];
    const char *ex[] = { "console=ttyS0", "", "quiet" };
    const char *av[] = { "/bin/sh", "-c", "echo hello world" };
    ck_assert_int_eq(boot_cmdline_build(buf, sizeof(buf), "root=/dev/vda", ex, 3, av, 3), 0);
    ck_assert_str_eq(buf, "root=/dev/vda console=ttyS0 quiet -- /bin/sh -c \"echo hello world\"");
    ck_assert_int_eq(boot_cmdline_build(buf, sizeof(buf), "a", NULL, 0, NULL, 0), 0);
    ck_assert_str_eq(buf, "a");
    ck_assert_int_eq(boot_cmdline_build(buf, sizeof(buf), NULL, NULL, 0, av, 1), 0);
    ck_assert_str_eq(buf, "-- /bin/sh");
    ck_assert_int_eq(boot_cmdline_build(buf, sizeof(buf), "", ex, 1, NULL, 0), 0);
    ck_assert_str_eq(buf, "console=ttyS0");
    ck_assert_int_eq(boot_cmdline_build(buf, sizeof(buf), NULL, NULL, 0, NULL, 0), 0);
    ck_assert_str_eq(buf, "");

    /* exact fit and one byte short */
    const char *want = "ab -- x";
    size_t need = strlen(want) + 1;
    const char *x[] = { "x" };
    ck_assert_int_eq(boot_cmdline_build(buf, need, "ab", NULL, 0, x, 1), 0);
    ck_assert_str_eq(buf, want);
    ck_assert_int_eq(boot_cmdline_build(buf, need - 1, "ab", NULL, 0, x, 1), -E2BIG);
    ck_assert_str_eq(buf, "");
    ck_assert_int_eq(boot_cmdline_build(buf, 0, "ab", NULL, 0, NULL, 0), -E2BIG);
    const char *q[] = { "a b" };
    ck_assert_int_eq(boot_cmdline_build(buf, 6, NULL, NULL, 0, q, 1), -E2BIG);  /* `-- "a b"` */
    ck_assert_int_eq(boot_cmdline_build(buf, 8, NULL, NULL, 0, q, 1), -E2BIG);
    ck_assert_int_eq(boot_cmdline_build(buf, 9, NULL, NULL, 0, q, 1), 0);
    ck_assert_str_eq(buf, "-- \"a b\"");

    const char *bad1[] = { "ok", "" };
    const char *bad2[] = { "say \"hi\"" };
    const char *bad3[] = { "tab\there" };
    const char *bad4[] = { "nl\n" };
    const char *bad5[] = { "del\x7f" };
    ck_assert_int_eq(boot_cmdline_build(buf, sizeof(buf), "b", NULL, 0, bad1, 2), -EINVAL);
    ck_assert_int_eq(boot_cmdline_build(buf, sizeof(buf), "b", NULL, 0, bad2, 1), -EINVAL);
    ck_assert_int_eq(boot_cmdline_build(buf, sizeof(buf), "b", NULL, 0, bad3, 1), -EINVAL);
    ck_assert_int_eq(boot_cmdline_build(buf, sizeof(buf), "b", NULL, 0, bad4, 1), -EINVAL);
    ck_assert_int_eq(boot_cmdline_build(buf, sizeof(buf), "b", NULL, 0, bad5, 1), -EINVAL);
    ck_assert_int_eq(boot_cmdline_build(NULL, 10, "b", NULL, 0, NULL, 0), -EINVAL);
    ck_assert_int_eq(boot_cmdline_build(buf, sizeof(buf), "b", NULL, 1, NULL, 0), -EINVAL);
    /* non-ASCII bytes pass through */
    const char *u[] = { "caf\xc3\xa9" };
    ck_assert_int_eq(boot_cmdline_build(buf, sizeof(buf), NULL, NULL, 0, u, 1), 0);
    ck_assert_str_eq(buf, "-- caf\xc3\xa9");
}
END_TEST

/* A " -- " in the caller's command line starts init's arguments (Linux's
 * parse_args stops at the first bare "--" word): moat's own parameters
 * (the drives' virtio_mmio.device=, root=) must go before it. */
static void split_is(const char *s, bool want, size_t kend, size_t istart)
{
    size_t k = 99, i = 99;
    ck_assert_msg(boot_cmdline_split(s, &k, &i) == want, "split(%s)", s);
    ck_assert_msg(k == kend && i == istart, "split(%s): %zu %zu, want %zu %zu", s, k, i, kend, istart);
}

START_TEST(cmdline_init_args)
{
    split_is("", false, 0, 0);
    split_is("console=ttyS0 quiet", false, 19, 19);
    split_is("a -- b c", true, 1, 5);
    split_is("-- b", true, 0, 3);
    split_is("  --", true, 0, 4);
    split_is("a --", true, 1, 4);
    split_is("a \t--\t\tb", true, 1, 7);
    split_is("a -- b -- c", true, 1, 5);            /* only the first counts */
    split_is("a --x b", false, 7, 7);               /* not a bare word */
    split_is("a x-- b", false, 7, 7);
    split_is("a --=1 b", false, 8, 8);              /* a parameter named "--" */
    split_is("a x=\"p -- q\" b", false, 14, 14);  /* inside a quoted value */
    split_is("a \"p -- q\" b", false, 12, 12);    /* inside a quoted word */
    split_is("a \"--\" b", true, 1, 7);           /* next_arg strips the quotes */
    split_is("a x=\"p -- q\" -- r", true, 12, 16);
    split_is("a x=\"unterminated -- b", false, 22, 22);

    char buf[256];
    const char *ex[] = { "virtio_mmio.device=4K@0xd0000000:5", "root=/dev/vda" };
    const char *av[] = { "/bin/sh", "-c", "echo hi" };
    ck_assert_int_eq(boot_cmdline_build(buf, sizeof buf, "console=ttyS0 -- x y", ex, 2, NULL, 0), 0);
    ck_assert_str_eq(buf, "console=ttyS0 virtio_mmio.device=4K@0xd0000000:5 root=/dev/vda -- x y");
    ck_assert_int_eq(boot_cmdline_build(buf, sizeof buf, "-- x", ex, 1, NULL, 0), 0);
    ck_assert_str_eq(buf, "virtio_mmio.device=4K@0xd0000000:5 -- x");
    ck_assert_int_eq(boot_cmdline_build(buf, sizeof buf, "a --", ex + 1, 1, NULL, 0), 0);
    ck_assert_str_eq(buf, "a root=/dev/vda --");
    ck_assert_int_eq(boot_cmdline_build(buf, sizeof buf, "a -- b -- c", ex + 1, 1, NULL, 0), 0);
    ck_assert_str_eq(buf, "a root=/dev/vda -- b -- c");
    ck_assert_int_eq(boot_cmdline_build(buf, sizeof buf, "a x=\"p -- q\"", ex + 1, 1, NULL, 0), 0);
    ck_assert_str_eq(buf, "a x=\"p -- q\" root=/dev/vda");
    /* init's arguments from base, then argv: one "--" */
    ck_assert_int_eq(boot_cmdline_build(buf, sizeof buf, "a -- init1", ex + 1, 1, av, 3), 0);
    ck_assert_str_eq(buf, "a root=/dev/vda -- init1 /bin/sh -c \"echo hi\"");
    ck_assert_int_eq(boot_cmdline_build(buf, sizeof buf, "a --", NULL, 0, av, 1), 0);
    ck_assert_str_eq(buf, "a -- /bin/sh");

    /* The limit the boot protocol gives (a bzImage's cmdline_size, 2047
     * in bz_default, plus the NUL): exactly full, then one byte over. */
    static char big[4096], base[4096];
    memset(base, 'k', 2000);
    memcpy(base + 2000, " -- ", 4);
    memset(base + 2004, 'i', 2047 - 2004 - 14);   /* 14: " root=/dev/vda" */
    base[2047 - 14] = 0;
    ck_assert_int_eq(boot_cmdline_build(big, 2048, base, ex + 1, 1, NULL, 0), 0);
    ck_assert_uint_eq(strlen(big), 2047);
    ck_assert(!memcmp(big + 2000, " root=/dev/vda -- i", 19));
    ck_assert_int_eq(boot_cmdline_build(big, 2047, base, ex + 1, 1, NULL, 0), -E2BIG);
    ck_assert_str_eq(big, "");
    /* and boot_load refuses what the kernel's header says it cannot take */
    ck_assert_int_eq(boot_cmdline_build(big, sizeof big, base, ex, 2, NULL, 0), 0);
    struct guest g;
    guest_init(&g, 64 * MiB, 0);
    size_t n = build_bz(img, &bz_default);
    struct boot_config c = cfg_for(img, n);
    c.cmdline = big;
    struct boot_info bi;
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), -E2BIG);
    ck_assert_int_eq(boot_cmdline_build(big, sizeof big, base, ex + 1, 1, NULL, 0), 0);
    ck_assert_int_eq(boot_load(&g.m, &c, &bi), 0);
    ck_assert_str_eq((char *)g.low + LAYOUT_CMDLINE, big);
    guest_free(&g);
}
END_TEST

/* ------------------------------------------------------ the real kernels */

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    uint8_t *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n > 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n)) &&
            fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        }
        *len = (size_t)n;
    }
    fclose(f);
    return buf;
}

static const char *guest_path(const char *name, char *buf, size_t n)
{
    const char *dir = getenv("MOAT_GUEST_DIR");
    snprintf(buf, n, "%s/%s", dir ? dir : "build/guest", name);
    return buf;
}

static void load_real(const char *name, bool pvh)
{
    char path[512];
    guest_path(name, path, sizeof(path));
    size_t len = 0;
    uint8_t *k = slurp(path, &len);
    if (!k) {
        printf("SKIPPED: %s not present (build the guest kernel first)\n", path);
        ck_assert_int_ne(access(path, R_OK), 0);
        return;
    }
    struct guest g;
    guest_init(&g, 256 * MiB, 0);
    enum boot_kind kind;
    const char *why = "";
    int r = boot_probe_why(k, len, pvh, &kind, &why);
    ck_assert_msg(r == 0, "%s: probe: %d (%s)", path, r, why);
    uint8_t initrd[4096] = { 0x30, 0x37, 0x30, 0x37 };
    struct boot_config c = { .kernel = k, .kernel_len = len, .initrd = initrd,
                             .initrd_len = sizeof(initrd), .cmdline = "console=ttyS0",
                             .ncpus = 2, .prefer_pvh = pvh };
    struct boot_info bi;
    r = boot_load_why(&g.m, &c, &bi, &why);
    ck_assert_msg(r == 0, "%s: load: %d (%s)", path, r, why);
    ck_assert_int_eq(bi.kind, kind);
    ck_assert_uint_ge(bi.kernel_start, LAYOUT_HIMEM);
    ck_assert_uint_gt(bi.kernel_end, bi.kernel_start);
    ck_assert_uint_le(bi.kernel_end, 256 * MiB);
    ck_assert_uint_ge(bi.entry, bi.kernel_start);
    ck_assert_uint_lt(bi.entry, bi.kernel_end);
    ck_assert_uint_ge(bi.initrd_start, bi.kernel_end);
    if (kind == BOOT_LINUX_BZIMAGE) {
        ck_assert_uint_eq(bi.entry, 0x100200);
    } else if (kind == BOOT_LINUX_PVH) {
        ck_assert_uint_lt(bi.entry, LAYOUT_4G);
        ck_assert_uint_eq(g.low[LAYOUT_ZERO_PAGE], 0x78); /* magic 0x336ec578 LE */
    } else {
        ck_assert_int_eq(kind, BOOT_LINUX_ELF);
    }
    printf("%s: kind %d entry %#llx kernel [%#llx, %#llx) initrd %#llx\n", path, kind,
           (unsigned long long)bi.entry, (unsigned long long)bi.kernel_start,
           (unsigned long long)bi.kernel_end, (unsigned long long)bi.initrd_start);
    guest_free(&g);
    free(k);
}

START_TEST(real_bzimage) { load_real("bzImage", false); }
END_TEST
START_TEST(real_vmlinux) { load_real("vmlinux", false); }
END_TEST
START_TEST(real_vmlinux_pvh)
{
    char path[512];
    size_t len = 0;
    uint8_t *k = slurp(guest_path("vmlinux", path, sizeof(path)), &len);
    enum boot_kind kind = 0;
    if (k && boot_probe(k, len, true, &kind) == 0 && kind != BOOT_LINUX_PVH) {
        printf("SKIPPED: %s has no PVH entry note\n", path);
        ck_assert_int_eq(kind, BOOT_LINUX_ELF);
        free(k);
        return;
    }
    free(k);
    load_real("vmlinux", true);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("boot");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, probe_kinds);
    tcase_add_test(tc, probe_note_alignment_8);
    tcase_add_test(tc, malformed_elf);
    tcase_add_test(tc, malformed_notes);
    tcase_add_test(tc, malformed_bzimage);
    tcase_add_test(tc, load_plain_elf);
    tcase_add_test(tc, load_elf_placement_errors);
    tcase_add_test(tc, load_vmlinux);
    tcase_add_test(tc, load_initrd_extra);
    tcase_add_test(tc, load_vmlinux_cmdline_limit);
    tcase_add_test(tc, load_pvh);
    tcase_add_test(tc, load_bzimage);
    tcase_add_test(tc, load_bzimage_limits);
    tcase_add_test(tc, load_zero_ram_bzimage);
    tcase_add_test(tc, load_zero_ram_vmlinux);
    tcase_add_test(tc, page_tables);
    tcase_add_test(tc, gdt);
    tcase_add_test(tc, mptable);
    tcase_add_test(tc, cmdline_build);
    tcase_add_test(tc, cmdline_init_args);
    tcase_add_test(tc, real_bzimage);
    tcase_add_test(tc, real_vmlinux);
    tcase_add_test(tc, real_vmlinux_pvh);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
