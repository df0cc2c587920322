/* Logging: one line per message on stderr, prefixed "moat: ". Rate-limited
 * variant for anything a guest can trigger. */
#ifndef MOAT_LOG_H
#define MOAT_LOG_H

#include <stdint.h>

enum { LOG_ERR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

void moat_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void moat_log_set_level(int level);

/* A per-site limiter: at most `burst` messages, then one every `interval_ns`
 * plus a count of suppressed messages. Thread-safe enough for logging. */
struct ratelimit {
    uint64_t last_ns;
    unsigned burst_left;
    unsigned suppressed;
};
int ratelimit_ok(struct ratelimit *rl);

#define log_err(...)   moat_log(LOG_ERR, __VA_ARGS__)
#define log_warn(...)  moat_log(LOG_WARN, __VA_ARGS__)
#define log_info(...)  moat_log(LOG_INFO, __VA_ARGS__)
#define log_debug(...) moat_log(LOG_DEBUG, __VA_ARGS__)

/* Guest-triggered messages: rate-limited per call site. */
#define log_guest(...) do { \
        static struct ratelimit rl__ = { 0, 10, 0 }; \
        if (ratelimit_ok(&rl__)) moat_log(LOG_WARN, __VA_ARGS__); \
    } while (0)

#endif
