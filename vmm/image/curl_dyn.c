/* libcurl loaded on first use (curl_dyn.h says why). */
#include "vmm/image/curl_dyn.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>

#include "vmm/image/dyn.h"

#ifndef CURL_SONAME
#define CURL_SONAME "libcurl.so.4"
#endif

/* Filled once under curl_once, never written after (image.h allows the
 * dlopen'ed libraries' tables). */
struct curl_fns curl_fns;
static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static struct img_dyn_state state;

#define SYM(field, name) { offsetof(struct curl_fns, field), #name }

static void load_once(void)
{
    static const struct img_dyn_sym syms[] = {
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
    img_dyn_load(&state, CURL_SONAME, "libcurl4", syms, sizeof syms / sizeof syms[0], &curl_fns);
    if (state.result == 0 && curl_fns.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(state.why, sizeof state.why, "%s: curl_global_init failed", CURL_SONAME);
        state.result = -EIO;
    }
}

int curl_load(char *why, size_t len)
{
    pthread_once(&curl_once, load_once);
    return img_dyn_result(&state, why, len);
}
