/* Firecracker's rate-limiter JSON shape, parsed into a struct
 * ratelimit_cfg (devices/virtio/ratelimit.h), and written back:
 *
 *   {"bandwidth": {"size": N, "one_time_burst": N, "refill_time": MS},
 *    "ops":       {"size": N, "one_time_burst": N, "refill_time": MS}}
 *
 * Both members are optional (absent or null: that bucket is unlimited);
 * inside one, "size" and "refill_time" are required, "one_time_burst" is
 * optional (absent or null: 0). Numbers are JSON integers 0 .. 2^63-1
 * (what libjansson reads). Unknown members are refused at both levels
 * (Firecracker ignores them inside a bucket; a typo such as
 * "one_time_bust" should not pass silently).
 *
 * Host configuration, beside the device options (devopt.c): here in
 * devices/ both a device's kind and the layers above (the control socket,
 * a Firecracker-style API) can call it. A separate file, so the limiter
 * itself (ratelimit.c) stays free of libraries. */
#ifndef MOAT_RATELIMIT_JSON_H
#define MOAT_RATELIMIT_JSON_H

#include <stddef.h>

#include "devices/virtio/ratelimit.h"

struct json_t;

/* Parse len bytes of JSON text. 0 with *out set, or -EINVAL with a reason
 * in why (why may be NULL). *out is all zero (unlimited) on error. */
int ratelimit_cfg_from_json(const char *text, size_t len, struct ratelimit_cfg *out,
                            char *why, size_t whylen);

/* The same from an already parsed value (e.g. the "rx_rate_limiter" member
 * of a larger request body). NULL or a JSON null: unlimited. */
int ratelimit_cfg_from_value(const struct json_t *v, struct ratelimit_cfg *out,
                             char *why, size_t whylen);

/* The shape above for cfg (an unlimited bucket is left out; one_time_burst
 * only when non-zero), compact, members in a fixed order; malloc'd, NUL
 * terminated. NULL on allocation failure, or when a number is above
 * 2^63-1 (JSON integers here stop there). */
char *ratelimit_cfg_to_json(const struct ratelimit_cfg *cfg);

#endif
