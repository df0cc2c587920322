/* libcurl, loaded when a pull starts rather than when moat starts
 * (vmm/image/curl_dyn.c), as vmm/api/mhd_dyn.h does for libmicrohttpd.
 *
 * Linked at build time, libcurl brings OpenSSL, nghttp2, libssh2, LDAP,
 * Kerberos and a dozen more shared libraries into every moat process;
 * only `moat image pull` (vmm/image/registry.c) needs it. That file
 * includes this header instead of <curl/curl.h>: each curl_ call below
 * goes through the table curl_load() fills, and img_pull calls
 * curl_load() first. */
#ifndef MOAT_IMAGE_CURL_DYN_H
#define MOAT_IMAGE_CURL_DYN_H

#include <stddef.h>

/* curl.h's type-checking macros for setopt/getinfo would hide the
 * table's entries below. */
#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>

struct curl_fns {
    __typeof__(&curl_global_init) global_init;
    __typeof__(&curl_easy_init) easy_init;
    __typeof__(&curl_easy_setopt) easy_setopt;
    __typeof__(&curl_easy_perform) easy_perform;
    __typeof__(&curl_easy_getinfo) easy_getinfo;
    __typeof__(&curl_easy_cleanup) easy_cleanup;
    __typeof__(&curl_easy_reset) easy_reset;
    __typeof__(&curl_easy_strerror) easy_strerror;
    __typeof__(&curl_slist_append) slist_append;
    __typeof__(&curl_slist_free_all) slist_free_all;
};

/* Load the library, resolve every function above and run
 * curl_global_init, once per process (later calls return the first
 * result). 0, or -ENOENT/-ENOSYS/-EIO with a sentence in why. */
int curl_load(char *why, size_t len);

/* The table; valid once curl_load() returned 0, read-only after. */
extern struct curl_fns curl_fns;

#undef curl_easy_setopt
#undef curl_easy_getinfo
#define curl_global_init (curl_fns.global_init)
#define curl_easy_init (curl_fns.easy_init)
#define curl_easy_setopt (curl_fns.easy_setopt)
#define curl_easy_perform (curl_fns.easy_perform)
#define curl_easy_getinfo (curl_fns.easy_getinfo)
#define curl_easy_cleanup (curl_fns.easy_cleanup)
#define curl_easy_reset (curl_fns.easy_reset)
#define curl_easy_strerror (curl_fns.easy_strerror)
#define curl_slist_append (curl_fns.slist_append)
#define curl_slist_free_all (curl_fns.slist_free_all)

#endif
