/* The image store's own helpers, shared by store.c, refs.c, prune.c and
 * layout.c (not for callers of the store). */
#ifndef MOAT_IMAGE_STORE_INT_H
#define MOAT_IMAGE_STORE_INT_H

#include <stddef.h>

#include "vmm/image/store.h"

#define IMG_MAX_REFS 16384          /* references in one store */

/* "DIR/HEX" + suffix of a digest, relative to the store; -EINVAL if not
 * a digest. */
int img_store_rel(char *buf, size_t len, const char *dir, const char *digest, const char *suffix);
/* The exclusive flock of lock file rel (made if missing): its fd, or
 * -EWOULDBLOCK (nb) / -errno. Close the fd to release it. */
int img_store_lock(const struct img_store *s, const char *rel, int nb);

struct img_refent {
    char ref[512];
    char digest[IMG_DIGEST_MAX];
};
/* All references (malloc'ed array, *n of them; empty if none yet). */
int img_refs_read(const struct img_store *s, struct img_refent **v, size_t *n, struct img_err *err);
/* Replace the index with v (the caller holds refs/lock). */
int img_refs_write(struct img_store *s, const struct img_refent *v, size_t n, struct img_err *err);

/* Read and check a manifest (an index is resolved to its linux/amd64
 * entry: *mdigest becomes that entry's digest). */
int img_manifest_load(const struct img_store *s, char mdigest[IMG_DIGEST_MAX],
                      struct img_manifest *m, struct img_err *err);

/* Remove the file or tree name under dfd, following no link. */
int img_rm_tree_at(int dfd, const char *name, int depth);

#endif
