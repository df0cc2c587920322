/* libmicrohttpd loaded on first use (mhd_dyn.h says why). No handwritten
 * HTTP here: the library is Debian's, only its loading is deferred. */
#include "vmm/api/mhd_dyn.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>

#ifndef MHD_SONAME
#define MHD_SONAME "libmicrohttpd.so.12"
#endif

/* Filled once under mhd_once, never written after: like the dynamic
 * linker's own tables, one per process whatever the number of VMs. */
struct mhd_fns mhd_fns;
static pthread_once_t mhd_once = PTHREAD_ONCE_INIT;
static int mhd_result;
static char mhd_why[256];

#define SYM(field, name) { offsetof(struct mhd_fns, field), #name }

static void load_once(void)
{
    static const struct { size_t off; const char *name; } syms[] = {
        SYM(start_daemon, MHD_start_daemon),
        SYM(stop_daemon, MHD_stop_daemon),
        SYM(run, MHD_run),
        SYM(get_timeout, MHD_get_timeout),
        SYM(get_daemon_info, MHD_get_daemon_info),
        SYM(get_connection_info, MHD_get_connection_info),
        SYM(get_connection_values, MHD_get_connection_values),
        SYM(lookup_connection_value, MHD_lookup_connection_value),
        SYM(create_response_from_buffer, MHD_create_response_from_buffer),
        SYM(create_response_from_callback, MHD_create_response_from_callback),
        SYM(add_response_header, MHD_add_response_header),
        SYM(queue_response, MHD_queue_response),
        SYM(destroy_response, MHD_destroy_response),
        SYM(create_post_processor, MHD_create_post_processor),
        SYM(post_process, MHD_post_process),
        SYM(destroy_post_processor, MHD_destroy_post_processor),
    };
    /* Never unloaded: its threads and responses live as long as moat. */
    void *h = dlopen(MHD_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(mhd_why, sizeof mhd_why, "cannot load %s (apt-get install libmicrohttpd12): %s", MHD_SONAME,
                 e ? e : "not found");
        mhd_result = -ENOENT;
        return;
    }
    struct mhd_fns f;
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        void *p = dlsym(h, syms[i].name);
        if (!p) {
            snprintf(mhd_why, sizeof mhd_why, "%s has no %s", MHD_SONAME, syms[i].name);
            mhd_result = -ENOSYS;
            return;
        }
        *(void **)((char *)&f + syms[i].off) = p;
    }
    mhd_fns = f;
}

int mhd_load(char *why, size_t len)
{
    pthread_once(&mhd_once, load_once);
    if (mhd_result < 0 && why && len)
        snprintf(why, len, "%s", mhd_why);
    return mhd_result;
}
