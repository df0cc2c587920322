/* The HTTP glue: libmicrohttpd's callbacks (on the API thread), the hand
 * off of each routed request to the main thread, and the API thread
 * itself ("fc_api", under its seccomp list: it only moves bytes). */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "vmm/base/scfilter.h"

#include "vmm/api/firecracker/fc_vmm.h"

/* ---- requests: from the API thread to the main thread ---- */

/* The API thread's seccomp list has no file, no KVM, no thread creation:
 * every routed request is done by the main thread (fc_serve_pending), as
 * Firecracker's API thread hands its requests to the VMM thread. One at a
 * time: the API thread waits for the answer. */
struct work {
    enum fc_ep ep;
    enum fc_method m;
    const char *id;
    const char *body;
    size_t len;
    struct reply rep;
    bool done;
};

static const char shutting_down[] = "The microVM is shutting down.";

/* On the API thread: hand w to the main thread and wait for its answer. */
static void hand_off(struct fcvm *s, struct work *w)
{
    pthread_mutex_lock(&s->hlock);
    if (s->closing) {
        pthread_mutex_unlock(&s->hlock);
        fc_fault(&w->rep, shutting_down);
        return;
    }
    s->pending = w;
    uint64_t one = 1;
    if (write(s->wake_fd, &one, sizeof one) < 0) { /* an eventfd: cannot fail short of a bug */ }
    while (!w->done)
        pthread_cond_wait(&s->hcond, &s->hlock);
    pthread_mutex_unlock(&s->hlock);
}

static void work_done(struct fcvm *s, struct work *w)
{
    pthread_mutex_lock(&s->hlock);
    w->done = true;
    pthread_cond_broadcast(&s->hcond);
    pthread_mutex_unlock(&s->hlock);
}

/* On the main thread: do the request handed over, if any. */
void fc_serve_pending(struct fcvm *s)
{
    pthread_mutex_lock(&s->hlock);
    struct work *w = s->pending;
    s->pending = NULL;
    pthread_mutex_unlock(&s->hlock);
    if (!w)
        return;
    pthread_mutex_lock(&s->lock);
    fc_dispatch(s, w->ep, w->m, w->id, w->body, w->len, &w->rep);
    s->counts[w->ep][w->m].count++;
    s->counts[w->ep][w->m].fails += w->rep.status >= 400;
    pthread_mutex_unlock(&s->lock);
    work_done(s, w);
}

/* On the main thread, leaving: no more requests; one handed over and not
 * done is refused. */
void fc_close_requests(struct fcvm *s)
{
    pthread_mutex_lock(&s->hlock);
    s->closing = true;
    struct work *w = s->pending;
    s->pending = NULL;
    pthread_mutex_unlock(&s->hlock);
    if (w) {
        fc_fault(&w->rep, shutting_down);
        work_done(s, w);
    }
}

/* ---- HTTP ---- */

struct req {
    char *body;                 /* malloc'd: Content-Length bytes, at most fcvm.body_limit */
    size_t len;
    size_t declared;            /* Content-Length */
    const char *early;          /* refused from the headers alone */
    bool too_large;
    bool answered;              /* a refusal is queued: ignore the rest */
};

static enum MHD_Result send_reply(struct MHD_Connection *c, const struct reply *rep)
{
    size_t n = rep->body ? strlen(rep->body) : 0;
    struct MHD_Response *resp = MHD_create_response_from_buffer(n, rep->body ? rep->body : (void *)"",
                                                                MHD_RESPMEM_MUST_COPY);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, "Server", "Firecracker API");
    if (n)
        MHD_add_response_header(resp, "Content-Type", "application/json");
    enum MHD_Result r = MHD_queue_response(c, rep->status, resp);
    MHD_destroy_response(resp);
    return r;
}

enum MHD_Result fc_on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    struct fcvm *s = cls;
    struct req *r = *con_cls;
    struct reply rep = { 0, NULL };
    (void)version;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r)
            return MHD_NO;
        *con_cls = r;
        __atomic_add_fetch(&s->inflight, 1, __ATOMIC_SEQ_CST);
        const char *te = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (te)
            r->early = "Transfer-Encoding is not supported: send the body with a Content-Length.";
        if (cl) {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(cl, &end, 10);
            r->declared = errno || *end ? SIZE_MAX : (size_t)v;
        }
        if (!r->early && r->declared > s->body_limit)
            r->too_large = true;
        if (r->early || r->too_large) {
            char m[200];
            if (r->too_large)
                snprintf(m, sizeof m, "Request payload with size %s is larger than the limit of %zu allowed by "
                         "server.", cl, s->body_limit);
            fc_fault(&rep, r->early ? r->early : m);
            enum MHD_Result res = send_reply(c, &rep);
            free(rep.body);
            r->answered = true;
            return res;
        }
        return MHD_YES;
    }
    if (r->answered) {
        *upload_size = 0;     /* answered already; MHD closes the connection */
        return MHD_YES;
    }
    if (*upload_size) {
        /* One buffer of Content-Length bytes (at most the limit: checked
         * above), made at the first piece: no realloc, whose mremap the
         * API thread's seccomp list does not have. */
        if (!r->body && !r->too_large && !(r->body = malloc(r->declared ? r->declared : 1)))
            return MHD_NO;      /* out of memory: the connection is dropped */
        if (r->too_large || r->len + *upload_size > r->declared)
            r->too_large = true;
        else
            memcpy(r->body + r->len, upload, *upload_size);
        r->len += *upload_size;
        *upload_size = 0;
        return MHD_YES;
    }
    enum fc_ep ep = 0;
    enum fc_method m = 0;
    char id[FC_ID_MAX + 1], why[300];
    if (r->too_large) {       /* more bytes than Content-Length said: cannot happen with MHD, refused anyway */
        snprintf(why, sizeof why, "Request payload with size %zu is larger than the limit of %zu allowed by server.",
                 r->len, s->body_limit);
        fc_fault(&rep, why);
        enum MHD_Result res = send_reply(c, &rep);
        free(rep.body);
        return res;
    }
    /* As Firecracker, before the path: a GET has no body, a PUT or PATCH
     * has one. */
    if (!strcmp(method, "GET") && r->len) {
        fc_fault(&rep, "GET request cannot have a body.");
    } else if ((!strcmp(method, "PUT") || !strcmp(method, "PATCH")) && !r->len) {
        fc_fault(&rep, !strcmp(method, "PUT") ? "Empty PUT request." : "Empty PATCH request.");
    } else if (fc_route(method, url, &ep, &m, id, sizeof id, why, sizeof why) < 0) {
        fc_fault(&rep, why);
    } else {
        LOG(FC_LVL_DEBUG, "The API server received a %s request on \"%s\".", method, url);
        struct work w = { .ep = ep, .m = m, .id = id, .body = r->body, .len = r->len };
        hand_off(s, &w);
        rep = w.rep;
    }
    if (rep.status >= 400)
        LOG(FC_LVL_ERROR, "Received Error. Status code: %u. Message: %s", rep.status, rep.body ? rep.body : "");
    enum MHD_Result res = send_reply(c, &rep);
    free(rep.body);
    return res;
}

void fc_on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode t)
{
    struct fcvm *s = cls;
    (void)c;
    (void)t;
    if (*con_cls) {
        __atomic_sub_fetch(&s->inflight, 1, __ATOMIC_SEQ_CST);
        free(((struct req *)*con_cls)->body);
    }
    free(*con_cls);
    *con_cls = NULL;
}

/* ---- the API thread ---- */

static void *api_main(void *arg)
{
    struct api *a = arg;
    int r = sc_install_named(SC_API, a->mode, "fc_api");    /* named as Firecracker's API thread */
    pthread_mutex_lock(&a->lock);
    a->start_r = r;
    a->ready = true;
    pthread_cond_broadcast(&a->cond);
    pthread_mutex_unlock(&a->lock);
    if (r < 0)
        return NULL;
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(a->d, MHD_DAEMON_INFO_EPOLL_FD);
    int epfd = di ? di->epoll_fd : -1;
    for (;;) {
        MHD_UNSIGNED_LONG_LONG to = 0;
        int wait = -1;
        if (MHD_get_timeout(a->d, &to) == MHD_YES)
            wait = to > INT_MAX ? INT_MAX : (int)to;
        struct pollfd p[2] = { { epfd, POLLIN, 0 }, { a->quit_fd, POLLIN, 0 } };
        if (poll(p, 2, wait) < 0 && errno != EINTR)
            break;
        if (p[1].revents)
            break;
        MHD_run(a->d);
    }
    MHD_stop_daemon(a->d);      /* here: what it calls is on this thread's list */
    return NULL;
}

/* Start the API thread on d; 0 once its filter is in, or -errno. */
int fc_api_start(struct api *a, struct MHD_Daemon *d, enum sc_mode mode)
{
    a->d = d;
    a->mode = mode;
    a->ready = false;
    a->quit_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (a->quit_fd < 0)
        return -errno;
    pthread_mutex_init(&a->lock, NULL);
    pthread_cond_init(&a->cond, NULL);
    int e = pthread_create(&a->thread, NULL, api_main, a);
    if (e) {
        close(a->quit_fd);
        return -e;
    }
    pthread_mutex_lock(&a->lock);
    while (!a->ready)
        pthread_cond_wait(&a->cond, &a->lock);
    int r = a->start_r;
    pthread_mutex_unlock(&a->lock);
    if (r < 0)
        pthread_join(a->thread, NULL);
    return r;
}

/* Stop it: it stops the daemon (closing every connection and the
 * listening socket) and ends. */
void fc_api_stop(struct api *a)
{
    uint64_t one = 1;
    if (write(a->quit_fd, &one, sizeof one) < 0) { /* an eventfd */ }
    pthread_join(a->thread, NULL);
    close(a->quit_fd);
}
