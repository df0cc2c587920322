/* Image references as Docker writes them (vmm/image/ref.c, pure):
 *   python:3.12-slim            docker.io/library/python:3.12-slim
 *   user/app                    docker.io/user/app:latest
 *   host:5000/ns/name:tag       host:5000/ns/name:tag
 *   name@sha256:HEX             docker.io/library/name@sha256:HEX
 *   name:tag@sha256:HEX         tag kept for display, digest wins
 * The registry part is the first component if it has a '.' or ':' or is
 * "localhost". docker.io's API host is registry-1.docker.io. */
#ifndef MOAT_IMAGE_REF_H
#define MOAT_IMAGE_REF_H

#include <stddef.h>

#include "vmm/image/image.h"

#define IMG_REF_MAX 512             /* bytes in a reference as written */

struct img_ref {
    char registry[256];     /* "docker.io", "127.0.0.1:5000" */
    char repo[256];         /* "library/python" */
    char tag[129];          /* "3.12-slim"; "latest" if neither tag nor digest; "" with only a digest */
    char digest[IMG_DIGEST_MAX];    /* "sha256:..." or "" */
};

/* Parse s; 0 or -EINVAL with why in err. */
int img_ref_parse(const char *s, struct img_ref *out, struct img_err *err);
/* The canonical form ("docker.io/library/python:3.12-slim", with
 * "@sha256:..." when there is a digest) into buf; -ENAMETOOLONG if short. */
int img_ref_format(const struct img_ref *r, char *buf, size_t len);
/* The host to talk to: registry-1.docker.io for docker.io, else registry. */
const char *img_ref_api_host(const struct img_ref *r);

#endif
