/* Firecracker's logger (PUT /logger, --log-path, --level...): lines in
 * Firecracker's format, one write each, to its file or stderr; libmoat's
 * own messages go the same way. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "include/moat.h"
#include "vmm/base/scfilter.h"

#include "vmm/api/firecracker/fc_vmm.h"

struct fc_log fc_flog = { PTHREAD_MUTEX_INITIALIZER, -1, FC_LVL_WARN, false, false, "anonymous-instance", 0 };

/* "<time> [<id>:<thread>(:<LEVEL>)(:<file>:<line>)] <msg>", one write. */
void fc_logf(enum fc_level lvl, const char *file, int line, const char *fmt, ...)
{
    if (lvl == FC_LVL_OFF || lvl > fc_flog.level)
        return;
    char msg[1024], out[1400], thr[16] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* A filtered thread knows its name (its list has no prctl). */
    const char *tn = sc_thread_name();
    if (tn)
        snprintf(thr, sizeof thr, "%s", tn);
    else
        pthread_getname_np(pthread_self(), thr, sizeof thr);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    pthread_mutex_lock(&fc_flog.lock);
    size_t n = fc_log_line(out, sizeof out, &ts, fc_flog.id, thr, lvl, fc_flog.show_level, file, line,
                           fc_flog.show_origin, msg);
    if (write(fc_flog.fd >= 0 ? fc_flog.fd : STDERR_FILENO, out, n) != (ssize_t)n)
        fc_flog.lost++;
    pthread_mutex_unlock(&fc_flog.lock);
}

/* libmoat's messages into the same log. */
void fc_lib_log(void *opaque, int level, const char *msg)
{
    (void)opaque;
    static const enum fc_level map[] = { FC_LVL_ERROR, FC_LVL_WARN, FC_LVL_INFO, FC_LVL_DEBUG };
    fc_logf(level >= 0 && level <= 3 ? map[level] : FC_LVL_DEBUG, "libmoat", 0, "%s", msg);
}

int fc_open_sink(const char *path)
{
    return open(path, O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0600);
}

unsigned fc_put_logger(struct fcvm *s, const struct fc_logger *l, struct reply *rep)
{
    int fd = -1;
    if (l->log_path[0] && (fd = fc_open_sink(l->log_path)) < 0)
        return fc_faultf(rep, "Cannot initialize the logger: %s: %s", l->log_path, strerror(errno));
    pthread_mutex_lock(&fc_flog.lock);
    if (fd >= 0) {
        if (fc_flog.fd >= 0)
            close(fc_flog.fd);
        fc_flog.fd = fd;
    }
    if (l->has_level)
        fc_flog.level = l->level;
    if (l->has_show_level)
        fc_flog.show_level = l->show_level;
    if (l->has_show_origin)
        fc_flog.show_origin = l->show_log_origin;
    pthread_mutex_unlock(&fc_flog.lock);
    moat_set_log(fc_flog.level >= FC_LVL_DEBUG ? MOAT_LOG_DEBUG : fc_flog.level == FC_LVL_INFO ? MOAT_LOG_INFO
                                                                                        : MOAT_LOG_WARN,
                 fc_lib_log, NULL);
    s->logger = *l;
    s->has_logger = true;
    LOG(FC_LVL_INFO, "Running moat %s (Firecracker API %s)", moat_version(), FC_API_VERSION);
    return rep->status = 204;
}

unsigned fc_ep_logger(struct fcvm *s, const struct fc_call *c, struct reply *rep)
{
    if (fc_decode_logger(c->body, c->len, &c->u->lg, c->why, FC_WHY_LEN) < 0)
        return fc_fault(rep, c->why);
    return s->vm ? fc_fault(rep, fc_not_after_boot) : fc_put_logger(s, &c->u->lg, rep);
}
