/* Loading a shared library's functions into a table on first use
 * (vmm/image/dyn.c): the mechanism under archive_dyn.h, ext2fs_dyn.h and curl_dyn.h.
 * Each of those fills its table once (pthread_once) and never unloads the
 * library; this only opens it and resolves the names. */
#ifndef MOAT_IMAGE_DYN_H
#define MOAT_IMAGE_DYN_H

#include <stddef.h>

struct img_dyn_sym {
    size_t off;             /* offset of the pointer in the table */
    const char *name;       /* the symbol */
};

/* What a library's loading came to: result 0 or -errno, why a sentence. */
struct img_dyn_state {
    int result;
    char why[256];
};

/* dlopen(soname) and resolve each of syms[0..n) into table (a struct of
 * pointers, written only when all resolve); the outcome into *st: 0, or
 * -ENOENT (library absent: why says which package to install) / -ENOSYS
 * (a symbol missing). Called once per library (under its pthread_once). */
void img_dyn_load(struct img_dyn_state *st, const char *soname, const char *package,
                  const struct img_dyn_sym *syms, size_t n, void *table);
/* st's result, and its sentence into why (when there is one). */
int img_dyn_result(const struct img_dyn_state *st, char *why, size_t len);

#endif
