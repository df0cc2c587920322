/* Guest physical memory as the host sees it: a few regions, each a host
 * mapping of [gpa, gpa + size). Pure: no KVM headers, usable by parsers,
 * loaders, unit tests and fuzz targets alike. Every guest address a module
 * touches goes through gmem_ptr(), which checks the whole range. */
#ifndef MOAT_GMEM_H
#define MOAT_GMEM_H

#include <stddef.h>
#include <stdint.h>

#define GMEM_MAX_REGIONS 4

struct gmem_region {
    uint64_t gpa;   /* guest physical start */
    uint64_t size;  /* bytes */
    uint8_t *host;  /* host mapping of gpa */
};

struct gmem {
    struct gmem_region r[GMEM_MAX_REGIONS];
    unsigned n;
    /* Optional tracking of the host's own writes (diff snapshots): when
     * dirty is set, bit (host - dirty_base) / 4096 is set for every page
     * written through gmem_write() or marked with gmem_mark_dirty(); every
     * region must lie inside [dirty_base, dirty_base + 4096 * dirty_pages).
     * NULL: no tracking. Bits are set atomically (device threads). */
    uint64_t *dirty;
    uint8_t *dirty_base;
    uint64_t dirty_pages;
};

/* Host pointer for [gpa, gpa + len) if the whole range lies inside one
 * region; NULL if it overflows, leaves RAM or straddles a hole. len 0 is
 * allowed (returns the pointer for gpa if gpa is inside or at the end of a
 * region). */
static inline void *gmem_ptr(const struct gmem *m, uint64_t gpa, uint64_t len)
{
    uint64_t end;
    if (__builtin_add_overflow(gpa, len, &end))
        return NULL;
    for (unsigned i = 0; i < m->n; i++) {
        const struct gmem_region *r = &m->r[i];
        if (gpa >= r->gpa && end <= r->gpa + r->size)
            return r->host + (gpa - r->gpa);
    }
    return NULL;
}

/* Mark [host, host + len) (a pointer gmem_ptr() returned) as written by
 * the host. No-op without tracking or for len 0. */
static inline void gmem_mark_dirty_host(const struct gmem *m, const void *host, uint64_t len)
{
    if (!m->dirty || !len)
        return;
    const uint8_t *p = host;
    if (p < m->dirty_base)
        return;
    uint64_t first = (uint64_t)(p - m->dirty_base) / 4096;
    uint64_t last = ((uint64_t)(p - m->dirty_base) + len - 1) / 4096;
    for (uint64_t pg = first; pg <= last && pg < m->dirty_pages; pg++)
        __atomic_fetch_or(&m->dirty[pg / 64], 1ull << (pg % 64), __ATOMIC_RELAXED);
}

/* The same for a guest range (ignored if not inside one region). */
static inline void gmem_mark_dirty(const struct gmem *m, uint64_t gpa, uint64_t len)
{
    if (!m->dirty || !len)
        return;
    const void *p = gmem_ptr(m, gpa, len);
    if (p)
        gmem_mark_dirty_host(m, p, len);
}

/* Copy helpers: 0 or -EFAULT (gmem_write marks the pages dirty). */
int gmem_read(const struct gmem *m, uint64_t gpa, void *dst, uint64_t len);
int gmem_write(const struct gmem *m, uint64_t gpa, const void *src, uint64_t len);

/* Total RAM bytes over all regions. */
uint64_t gmem_total(const struct gmem *m);

#endif
