/* Big-endian (network order) loads and stores of 16, 32 and 64 bits at
 * any alignment: one set instead of a copy per parser. Part of the base
 * (devices/ may use it). */
#ifndef MOAT_BYTES_H
#define MOAT_BYTES_H

#include <stdint.h>

static inline uint16_t be16_load(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

static inline uint32_t be32_load(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t be64_load(const uint8_t *p)
{
    return (uint64_t)be32_load(p) << 32 | be32_load(p + 4);
}

static inline void be16_store(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static inline void be32_store(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline void be64_store(uint8_t *p, uint64_t v)
{
    be32_store(p, (uint32_t)(v >> 32));
    be32_store(p + 4, (uint32_t)v);
}

#endif
