/* The registry client (vmm/image/registry.c): `moat image pull`, the OCI
 * distribution protocol over libcurl (dlopen'ed, curl_dyn.h) into the
 * image store (store.h). docs/images.md, "Pulling".
 *
 * Everything a registry sends is untrusted: manifests and token answers
 * are bounded (IMG_JSON_MAX), a blob longer than its descriptor says is
 * cut off, every blob's digest is checked before the store keeps it, and
 * credentials are never sent to a host a redirect names. */
#ifndef MOAT_IMAGE_REGISTRY_H
#define MOAT_IMAGE_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "vmm/image/image.h"
#include "vmm/image/manifest.h"
#include "vmm/image/store.h"

#define IMG_PULL_RETRIES   5        /* default tries after the first */
#define IMG_PULL_REDIRECTS 5        /* redirects followed for one request */

enum img_pull_state {
    IMG_PULL_START,     /* a blob's download begins (done: bytes kept from an earlier try) */
    IMG_PULL_BYTES,     /* bytes arrived */
    IMG_PULL_DONE,      /* verified and in the store */
    IMG_PULL_CACHED,    /* already in the store: nothing downloaded */
    IMG_PULL_RETRY,     /* a transient failure; trying again after a pause */
};

struct img_pull_progress {
    enum img_pull_state state;
    const char *digest;     /* the blob */
    enum img_kind kind;     /* IMG_K_CONFIG or IMG_K_LAYER */
    unsigned index, count;  /* blob index of count (config first) */
    uint64_t done, total;   /* bytes */
    const char *why;        /* IMG_PULL_RETRY: what failed */
};

struct img_pull_opts {
    const char *platform;       /* "os/arch[/variant]"; NULL: linux/amd64 */
    const char *creds;          /* "USER:PASS" or NULL */
    const char *auth_file;      /* containers' auth.json ($REGISTRY_AUTH_FILE) or NULL */
    const char *docker_config;  /* ~/.docker/config.json or NULL; after auth_file */
    const char *ca_cert;        /* PEM file of CAs to trust, or NULL: the system's */
    int insecure;               /* plain HTTP to the registry (and its token service) */
    unsigned retries;           /* 0: IMG_PULL_RETRIES */
    unsigned backoff_ms;        /* first pause between tries; 0: 500 */
    void (*progress)(void *arg, const struct img_pull_progress *p);
    void *arg;
    volatile int *cancel;       /* set (a signal handler) to stop: -ECANCELED */
};

/* Pull ref (ref.h's forms) into s: the manifest (picked from an index
 * for o->platform), its config and layers, each verified; then the
 * reference's tag points at the manifest. The manifest's digest into
 * manifest_digest. 0, or -errno with why in err (-ECANCELED when
 * *o->cancel was set: a partial blob stays in tmp/ for the next pull). */
int img_pull(struct img_store *s, const char *ref, const struct img_pull_opts *o,
             char *manifest_digest, size_t len, struct img_err *err);

#endif
