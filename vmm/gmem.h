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

/* Copy helpers: 0 or -EFAULT. */
int gmem_read(const struct gmem *m, uint64_t gpa, void *dst, uint64_t len);
int gmem_write(const struct gmem *m, uint64_t gpa, const void *src, uint64_t len);

/* Total RAM bytes over all regions. */
uint64_t gmem_total(const struct gmem *m);

#endif
