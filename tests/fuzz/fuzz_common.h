/* Shared bits of the fuzz targets (tests/fuzz/fuzz_*.c). */
#ifndef MOAT_FUZZ_COMMON_H
#define MOAT_FUZZ_COMMON_H

#include <stdio.h>
#include <stdlib.h>

/* An invariant the code under test must keep: abort (a finding) if not. */
#define FUZZ_ASSERT(c) do { \
    if (!(c)) { \
        fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #c); \
        abort(); \
    } \
} while (0)

#endif
