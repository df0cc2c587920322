/* An address-space bus: port I/O or MMIO ranges mapped to device callbacks.
 * One bus per address space per VM; no global state. Registration happens
 * before vCPUs run; lookups afterwards are lock-free reads of a sorted array.
 * Devices do their own locking. */
#ifndef MOAT_BUS_H
#define MOAT_BUS_H

#include <stdbool.h>
#include <stdint.h>

#define BUS_MAX_DEVS 32

struct bus_ops {
    /* off is relative to the registered base; len is 1, 2, 4 or 8.
     * read fills data[0..len); unknown offsets read as zeros. */
    void (*read)(void *opaque, uint64_t off, uint8_t *data, uint32_t len);
    void (*write)(void *opaque, uint64_t off, const uint8_t *data, uint32_t len);
};

struct bus_range {
    uint64_t base, len;
    const struct bus_ops *ops;
    void *opaque;
};

struct bus {
    struct bus_range dev[BUS_MAX_DEVS];
    unsigned n;
};

void bus_init(struct bus *b);

/* 0, -EINVAL for len 0 or overflow, -EEXIST for an overlap, -ENOSPC. */
int bus_register(struct bus *b, uint64_t base, uint64_t len,
                 const struct bus_ops *ops, void *opaque);

/* Dispatch an access. Returns 0 if a device took it, -ENOENT if no device
 * covers [addr, addr + len) (reads then return all ones, like an empty bus). */
int bus_access(const struct bus *b, uint64_t addr, uint8_t *data, uint32_t len, bool is_write);

#endif
