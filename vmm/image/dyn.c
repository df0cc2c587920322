/* dlopen + dlsym into a table (dyn.h). */
#include "vmm/image/dyn.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int load(const char *soname, const char *package, const struct img_dyn_sym *syms, size_t n, void *table,
                char *why, size_t len)
{
    /* Never closed: the table points into it for the process's life. */
    void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, len, "cannot load %s (apt-get install %s): %s", soname, package, e ? e : "not found");
        return -ENOENT;
    }
    size_t size = 0;
    for (size_t i = 0; i < n; i++)
        if (syms[i].off + sizeof(void *) > size)
            size = syms[i].off + sizeof(void *);
    char *tmp = calloc(1, size ? size : 1);
    if (!tmp) {
        snprintf(why, len, "out of memory loading %s", soname);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        void *p = dlsym(h, syms[i].name);
        if (!p) {
            snprintf(why, len, "%s has no %s", soname, syms[i].name);
            free(tmp);
            return -ENOSYS;
        }
        memcpy(tmp + syms[i].off, &p, sizeof p);
    }
    memcpy(table, tmp, size);
    free(tmp);
    return 0;
}

void img_dyn_load(struct img_dyn_state *st, const char *soname, const char *package,
                  const struct img_dyn_sym *syms, size_t n, void *table)
{
    st->result = load(soname, package, syms, n, table, st->why, sizeof st->why);
}

int img_dyn_result(const struct img_dyn_state *st, char *why, size_t len)
{
    if (st->result < 0 && why && len)
        snprintf(why, len, "%s", st->why);
    return st->result;
}
