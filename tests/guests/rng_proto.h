/* What the virtio-rng test guest (rng.c) and its host side
 * (tests/integration/test_integration.c) agree on. Plain C constants only. */
#ifndef MOAT_GUEST_RNG_PROTO_H
#define MOAT_GUEST_RNG_PROTO_H

/* Functional test (default): reads RNG_SMALL bytes twice (the two must
 * differ and not be all zero), one request of RNG_BIG bytes (the device
 * fills at most RNG_CAP of it: the used length says so), then a chain
 * with a device-readable buffer (must come back with length 0) and one
 * more read (the device still works). Prints RNG_OK, then the first
 * 16 bytes read as "rng bytes <32 hex digits>\n", and exits 0.
 * "loop" on the command line: after that, prints "rng tick N\n" after
 * each RNG_SMALL-byte read until a 'q' arrives on the UART, then
 * "rng final N\n" (snapshot/restore continue it). No virtio-rng device
 * in slot 0: exits RNG_NODEV. */
#define RNG_SMALL   64
#define RNG_BIG     (128u * 1024)
#define RNG_CAP     (64u * 1024)
#define RNG_NODEV   3
#define RNG_OK      "rng: ok\n"

#endif
