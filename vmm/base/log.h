/* Logging: one line per message on stderr, prefixed "moat: ". Rate-limited
 * variant for anything a guest can trigger. */
#ifndef MOAT_LOG_H
#define MOAT_LOG_H

#include <stdatomic.h>
#include <stdint.h>

/* The same numbers as MOAT_LOG_* in moat.h; moat_set_log (there) routes
 * messages to an embedder's callback. */
enum { LOG_ERR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void log_set_level(int level);   /* keeps the callback */

/* A limiter: at most `burst` messages, then one every 5 s plus a count of
 * those suppressed. Each VM (and each device) owns its own, so one noisy
 * guest cannot mute another's messages. Thread-safe without waiting: a call
 * that finds another thread inside counts as suppressed. Initialise with
 * LOG_LIMIT(burst). */
struct log_limit {
    uint64_t last_ns;
    unsigned burst_left;
    unsigned suppressed;
    _Atomic int busy;
    _Atomic unsigned contended;   /* calls suppressed because another thread was inside */
};
#define LOG_LIMIT(burst) ((struct log_limit){ .burst_left = (burst) })
int log_limit_ok(struct log_limit *rl);

#define log_err(...)   log_msg(LOG_ERR, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

/* Guest-triggered messages, through the VM's (or device's) own limiter. */
#define log_guest(rl, ...) do { \
        if (log_limit_ok(rl)) log_msg(LOG_WARN, __VA_ARGS__); \
    } while (0)

#endif
