/* libcurl loaded on first use (curl_dyn.h says why). */
#include "vmm/image/curl_dyn.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>

#ifndef CURL_SONAME
#define CURL_SONAME "libcurl.so.4"
#endif

/* Filled once under curl_once, never written after (image.h allows the
 * dlopen'ed libraries' tables). */
struct curl_fns curl_fns;
static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static int curl_result;
static char curl_why[256];

#define SYM(field, name) { offsetof(struct curl_fns, field), #name }

static void load_once(void)
{
    static const struct { size_t off; const char *name; } syms[] = {
        SYM(global_init, curl_global_init),
        SYM(easy_init, curl_easy_init),
        SYM(easy_setopt, curl_easy_setopt),
        SYM(easy_perform, curl_easy_perform),
        SYM(easy_getinfo, curl_easy_getinfo),
        SYM(easy_cleanup, curl_easy_cleanup),
        SYM(easy_reset, curl_easy_reset),
        SYM(easy_strerror, curl_easy_strerror),
        SYM(slist_append, curl_slist_append),
        SYM(slist_free_all, curl_slist_free_all),
    };
    /* Never unloaded: curl_global_init's state lives as long as moat. */
    void *h = dlopen(CURL_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(curl_why, sizeof curl_why, "cannot load %s (apt-get install libcurl4): %s", CURL_SONAME,
                 e ? e : "not found");
        curl_result = -ENOENT;
        return;
    }
    struct curl_fns f;
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        void *p = dlsym(h, syms[i].name);
        if (!p) {
            snprintf(curl_why, sizeof curl_why, "%s has no %s", CURL_SONAME, syms[i].name);
            curl_result = -ENOSYS;
            return;
        }
        *(void **)((char *)&f + syms[i].off) = p;
    }
    if (f.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(curl_why, sizeof curl_why, "%s: curl_global_init failed", CURL_SONAME);
        curl_result = -EIO;
        return;
    }
    curl_fns = f;
}

int curl_load(char *why, size_t len)
{
    pthread_once(&curl_once, load_once);
    if (curl_result < 0 && why && len)
        snprintf(why, len, "%s", curl_why);
    return curl_result;
}
