#include "vmm/base/gmem.h"

#include <errno.h>
#include <string.h>

int gmem_read(const struct gmem *m, uint64_t gpa, void *dst, uint64_t len)
{
    const void *p = gmem_ptr(m, gpa, len);
    if (!p)
        return -EFAULT;
    memcpy(dst, p, len);
    return 0;
}

int gmem_write(const struct gmem *m, uint64_t gpa, const void *src, uint64_t len)
{
    void *p = gmem_ptr(m, gpa, len);
    if (!p)
        return -EFAULT;
    memcpy(p, src, len);
    gmem_mark_dirty_host(m, p, len);
    return 0;
}

uint64_t gmem_total(const struct gmem *m)
{
    uint64_t t = 0;
    for (unsigned i = 0; i < m->n; i++)
        t += m->r[i].size;
    return t;
}
