/* What a registry says about authentication and what the user's files
 * say about credentials (vmm/image/authparse.c): pure functions over
 * untrusted text, no I/O, unit-tested (tests/unit/test_image_auth.c) and
 * fuzzed (tests/fuzz/fuzz_image_auth.c). The registry client
 * (vmm/image/registry.c) does the talking. */
#ifndef MOAT_IMAGE_AUTHPARSE_H
#define MOAT_IMAGE_AUTHPARSE_H

#include <stddef.h>
#include <stdint.h>

#include "vmm/image/image.h"

#define IMG_AUTH_HDR_MAX   8192     /* bytes in one WWW-Authenticate value */
#define IMG_TOKEN_MAX      16384    /* bytes in a bearer token */
#define IMG_AUTH_FILE_MAX  (1u << 20)   /* bytes in config.json / auth.json */

enum img_auth_scheme { IMG_AUTH_NONE = 0, IMG_AUTH_BASIC, IMG_AUTH_BEARER };

/* One WWW-Authenticate challenge (RFC 7235; Docker's token auth). */
struct img_challenge {
    enum img_auth_scheme scheme;
    char realm[1024];       /* Bearer: the token endpoint, http(s)://... */
    char service[256];      /* "" if absent */
    char scope[512];        /* "" if absent */
};

/* Parse a WWW-Authenticate value of len bytes (one or more challenges,
 * comma-separated): Bearer is preferred to Basic, other schemes are
 * skipped. 0, or -EINVAL with why (no challenge moat speaks, an
 * unterminated quote, a control character, a repeated or oversized
 * parameter, a Bearer realm that is not an http(s) URL). */
int img_auth_parse_challenge(const char *hdr, size_t len, struct img_challenge *c,
                             struct img_err *err);

struct img_creds {
    char user[256];
    char pass[1024];
};

/* "USER:PASS" (split at the first ':'; the user not empty). 0 or -EINVAL. */
int img_creds_parse(const char *s, struct img_creds *c, struct img_err *err);

/* Look registry ("docker.io", "host:port") up in a Docker config.json or
 * containers' auth.json of len bytes: its "auths" object, keys "host",
 * "host:port", with a scheme and path or without ("https://index.docker.io/v1/",
 * "index.docker.io" and "registry-1.docker.io" are docker.io), entries
 * {"auth": base64("user:pass")} or {"username", "password"}. 1 with *c
 * if found, 0 if not, -EINVAL with why if the file or the entry is
 * malformed. */
int img_auth_file_lookup(const char *json, size_t len, const char *registry,
                         struct img_creds *c, struct img_err *err);

/* A token endpoint's JSON answer: "token", else "access_token" (a
 * non-empty string of printable ASCII, at most IMG_TOKEN_MAX - 1 bytes)
 * into tok. 0 or -EINVAL. */
int img_auth_token_parse(const char *json, size_t len, char *tok, size_t toklen,
                         struct img_err *err);

/* The token request's URL: realm?service=S&scope=S (each escaped; scope
 * is the challenge's, else dflt_scope; parameters left out when empty).
 * 0 or -ENAMETOOLONG. */
int img_auth_token_url(const struct img_challenge *c, const char *dflt_scope, char *url,
                       size_t len);

/* "Basic base64(user:pass)" into out: 0 or -ENAMETOOLONG. */
int img_auth_basic(const struct img_creds *c, char *out, size_t len);

/* Standard base64 (RFC 4648, padded). encode: 0 or -ENAMETOOLONG;
 * decode: the byte count, or -EINVAL (bad character or padding),
 * -ENAMETOOLONG (out too small). */
int img_b64_encode(const void *in, size_t n, char *out, size_t outlen);
int img_b64_decode(const char *in, size_t n, void *out, size_t outlen);

/* Retry-After as delta-seconds (capped at 3600): the seconds, or -1 if
 * absent or not a number (an HTTP date: the caller's own backoff). */
int img_retry_after(const char *v);

/* "bytes START-END/TOTAL" of a 206 answer: 0 with *start, or -EINVAL. */
int img_content_range(const char *v, uint64_t *start);

#endif
