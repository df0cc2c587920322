/* A stand-in for moat serve's envd module (vmm/cli/serve_envd.c, built in
 * its place once that file exists: see the Makefile): it listens where
 * envd would and answers GET /health with 204 and everything else with 501
 * (Connect's "unimplemented" as JSON), so the REST side builds and its
 * tests run. Not the envd server: commands and files need serve_envd.c. */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "vmm/cli/serve_envd.h"

struct envd_server {
    struct MHD_Daemon *d;
};

static enum MHD_Result on_req(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)cls;
    (void)version;
    (void)upload;
    if (!*con_cls) {
        *con_cls = (void *)1;
        return MHD_YES;
    }
    if (*upload_size) {
        *upload_size = 0;
        return MHD_YES;
    }
    bool health = !strcmp(method, "GET") && !strcmp(url, "/health");
    static const char unimpl[] = "{\"code\":\"unimplemented\",\"message\":\"this moat was built without the envd module\"}";
    struct MHD_Response *r = health ? MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT)
                                    : MHD_create_response_from_buffer(sizeof unimpl - 1, (void *)unimpl,
                                                                      MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    if (!health)
        MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result res = MHD_queue_response(c, health ? 204 : 501, r);
    MHD_destroy_response(r);
    return res;
}

int envd_start(const struct envd_opts *o, struct envd_server **out)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION;
    if (inet_pton(AF_INET, o->bind_addr, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)o->port);
    } else if (inet_pton(AF_INET6, o->bind_addr, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)o->port);
        flags |= MHD_USE_IPv6;
    } else {
        return -EINVAL;
    }
    struct envd_server *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_req, NULL, MHD_OPTION_SOCK_ADDR, &ss,
                            MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_END);
    if (!s->d) {
        free(s);
        return -EADDRINUSE;
    }
    *out = s;
    return 0;
}

void envd_stop(struct envd_server *s)
{
    if (!s)
        return;
    MHD_stop_daemon(s->d);
    free(s);
}

void envd_forget_sandbox(struct envd_server *s, const char *sandbox_id)
{
    (void)s;
    (void)sandbox_id;
}
