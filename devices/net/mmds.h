/* The metadata service (Firecracker's MMDS shape): one JSON document per
 * device, set by the host, answered to the guest's HTTP requests to
 * 169.254.169.254. Request in (a parsed struct http_parser), response
 * bytes out (into the caller's buffer); no sockets, no TCP, no clock (time
 * is passed in as now_ns, CLOCK_MONOTONIC). Each device creates its own
 * store: no global state. All functions lock the store, so the host may
 * set the document from another thread while the device answers.
 *
 * The document is a JSON object (initially {}), at most data_limit bytes
 * as compact JSON (default 51200, Firecracker's). The host replaces it
 * (mmds_put) or merges into it (mmds_patch, JSON merge patch, RFC 7396).
 *
 * Guest side, as Firecracker answers (docs/metadata.md has the details):
 *   GET <path>   the node at <path>, a JSON pointer (RFC 6901) made from
 *                the request target: absolute form "http://host/p" is cut
 *                to "/p"; repeated '/' count as one; one trailing '/' is
 *                dropped; no percent-decoding, the query is part of the
 *                path (as Firecracker). "Accept: application/json" (an
 *                element of the Accept list) answers the node as compact
 *                JSON, keys sorted; otherwise (or in imds_compat mode) the
 *                IMDS text: an object's keys one per line ('\n' between,
 *                none after), a '/' after those whose value is an object;
 *                a string as itself; any other type 501 (Firecracker does
 *                the same). Missing node: 404.
 *   PUT /latest/api/token with X-metadata-token-ttl-seconds: N
 *                (or X-aws-ec2-metadata-token-ttl-seconds), 1 <= N <= 21600:
 *                a new session token (32 characters, base64url of 24 bytes
 *                from getrandom), valid for N s; the response repeats the
 *                TTL header. A PUT carrying X-Forwarded-For is refused
 *                (400), as Firecracker does: the token is for the guest
 *                itself, not for something it proxies. Missing or bad TTL
 *                400; another path 404.
 *   V2 (default): a GET must carry X-metadata-token (or
 *                X-aws-ec2-metadata-token) with a live token, else 401.
 *   V1: GETs need no token (a missing or invalid one is only counted).
 *   Other methods 405 (Allow: GET, PUT). A GET with a body 400, a target
 *   that is not "/..." or "http://host/..." 400.
 * At most max_tokens (default 64) tokens live at once; issuing one more
 * drops the one closest to expiry (a guest that floods token requests
 * only ends its own older sessions).
 *
 * Connection handling (kept simple): HTTP/1.1 requests keep the connection
 * unless they said "Connection: close"; HTTP/1.0 requests close it; a
 * request the parser refused is answered with its status and closes it
 * (the stream's framing is lost). *close says so, and the response then
 * carries "Connection: close": the TCP endpoint sends the response, then
 * FIN. */
#ifndef MOAT_MMDS_H
#define MOAT_MMDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "devices/net/http_req.h"

/* Zero is V2: a zeroed configuration is the safe one. */
enum mmds_version {
    MMDS_V2 = 0,    /* session tokens required */
    MMDS_V1 = 1,    /* no token needed */
};

#define MMDS_DEFAULT_DATA_LIMIT  51200u
#define MMDS_DEFAULT_MAX_TOKENS  64u
#define MMDS_TOKEN_TTL_MIN       1u
#define MMDS_TOKEN_TTL_MAX       21600u
#define MMDS_TOKEN_LEN           32u        /* characters */
#define MMDS_TOKEN_PATH          "/latest/api/token"

struct mmds_config {
    enum mmds_version version;
    size_t data_limit;          /* bytes of compact JSON; 0: MMDS_DEFAULT_DATA_LIMIT */
    unsigned max_tokens;        /* 0: MMDS_DEFAULT_MAX_TOKENS */
    bool imds_compat;           /* answer IMDS text whatever the Accept header */
    /* Fill buf with n random bytes: 0 or -errno. NULL: getrandom(2). */
    int (*random)(void *ctx, void *buf, size_t n);
    void *random_ctx;
};

struct mmds_stats {
    uint64_t requests;          /* responses made, errors included */
    uint64_t bad_requests;      /* requests the parser refused */
    uint64_t tokens_issued;
    uint64_t tokens_evicted;    /* dropped early because max_tokens were live */
    uint64_t rx_no_token;       /* GETs without a token (V1 and V2) */
    uint64_t rx_invalid_token;  /* GETs with an unknown or expired token */
};

struct mmds;

/* A store holding {} with cfg (NULL: all defaults). 0 or -ENOMEM. */
int mmds_create(const struct mmds_config *cfg, struct mmds **out);
void mmds_destroy(struct mmds *m);

/* Replace the document with len bytes of JSON text, which must be an
 * object. 0; -EINVAL (not JSON, duplicate keys, not an object), -E2BIG
 * (above data_limit), -ENOMEM; on error the document is unchanged and
 * why (may be NULL) says what. */
int mmds_put(struct mmds *m, const char *json, size_t len, char *why, size_t whylen);

/* Merge len bytes of JSON (an object) into the document, RFC 7396: a null
 * member removes that key, an object member merges recursively, anything
 * else replaces. Errors as mmds_put; all or nothing. */
int mmds_patch(struct mmds *m, const char *json, size_t len, char *why, size_t whylen);

/* The whole document as compact JSON, keys sorted: malloc'd, NUL
 * terminated; NULL on allocation failure. */
char *mmds_get(struct mmds *m);

void mmds_set_version(struct mmds *m, enum mmds_version v);
enum mmds_version mmds_get_version(struct mmds *m);

/* Forget every token (e.g. after a restore into a new VM). */
void mmds_clear_tokens(struct mmds *m);

/* The largest response mmds_respond can make: a buffer this big never
 * gets -ENOSPC. */
size_t mmds_response_max(const struct mmds *m);

/* Answer what the parser holds: a complete request (HTTP_DONE) or an
 * error (HTTP_ERROR: its status, and *close). Writes the whole response
 * (status line, Content-Type, Content-Length, other headers, body) into
 * out and its length into *len; *close (may be NULL) is set when the
 * connection is to be closed after it. 0; -EINVAL if the parser needs
 * more bytes; -ENOMEM; -ENOSPC if cap is too small (nothing written, but
 * the request was acted on: a PUT issued its token, counters moved; give
 * it mmds_response_max() bytes). */
int mmds_respond(struct mmds *m, const struct http_parser *p, uint64_t now_ns, char *out,
                 size_t cap, size_t *len, bool *close);

void mmds_get_stats(struct mmds *m, struct mmds_stats *st);

#endif
