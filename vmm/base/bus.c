#include "vmm/base/bus.h"

#include <errno.h>
#include <string.h>

void bus_init(struct bus *b) { memset(b, 0, sizeof(*b)); }

int bus_register(struct bus *b, uint64_t base, uint64_t len,
                 const struct bus_ops *ops, void *opaque)
{
    uint64_t end;
    if (len == 0 || !ops || __builtin_add_overflow(base, len, &end))
        return -EINVAL;
    if (b->n >= BUS_MAX_DEVS)
        return -ENOSPC;
    unsigned pos = 0;
    for (unsigned i = 0; i < b->n; i++) {
        const struct bus_range *r = &b->dev[i];
        if (base < r->base + r->len && r->base < end)
            return -EEXIST;
        if (r->base < base)
            pos = i + 1;
    }
    memmove(&b->dev[pos + 1], &b->dev[pos], (b->n - pos) * sizeof(b->dev[0]));
    b->dev[pos] = (struct bus_range){ base, len, ops, opaque };
    b->n++;
    return 0;
}

static const struct bus_range *bus_find(const struct bus *b, uint64_t addr, uint32_t len)
{
    unsigned lo = 0, hi = b->n;
    while (lo < hi) {  /* first range with base > addr */
        unsigned mid = (lo + hi) / 2;
        if (b->dev[mid].base <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    const struct bus_range *r = &b->dev[lo - 1];
    uint64_t off = addr - r->base;
    if (off >= r->len || len > r->len - off)
        return NULL;
    return r;
}

int bus_access(const struct bus *b, uint64_t addr, uint8_t *data, uint32_t len, bool is_write)
{
    const struct bus_range *r = len ? bus_find(b, addr, len) : NULL;
    if (!r) {
        if (!is_write)
            memset(data, 0xff, len);
        return -ENOENT;
    }
    if (is_write) {
        if (r->ops->write)
            r->ops->write(r->opaque, addr - r->base, data, len);
    } else {
        if (r->ops->read)
            r->ops->read(r->opaque, addr - r->base, data, len);
        else
            memset(data, 0, len);
    }
    return 0;
}
