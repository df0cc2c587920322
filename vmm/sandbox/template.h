/* Templates (vmm/sandbox/template.c): moat template create, ls and rm. A
 * template NAME is the stopped sandbox template.NAME with a marker file
 * "template" (agent=0|1, from=SANDBOX) that moat start refuses to start
 * and moat fork and moat serve make sandboxes from. The rules of
 * sandbox.h hold: 0 or -errno, why in a struct sbx_err, no printing, no
 * static state. */
#ifndef MOAT_SANDBOX_TEMPLATE_H
#define MOAT_SANDBOX_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

#include "vmm/sandbox/create.h"

#define SBX_TEMPLATE_PREFIX "template."
/* bytes in a template's name: its sandbox's name less the prefix */
#define SBX_TEMPLATE_NAME_MAX (SBX_NAME_MAX - (int)(sizeof SBX_TEMPLATE_PREFIX - 1))

/* The sandbox name of template name into tname (SBX_NAME_MAX + 1 bytes
 * at least): 0, or -EINVAL with why when name is no template name. */
int sandbox_template_name(const char *name, char *tname, size_t len, struct sbx_err *err);

struct sbx_template_opts {
    /* A sandbox to make it of: a fork of it, stopped (sandbox_fork).
     * NULL: a new sandbox made by create, then stopped. */
    const char *from;
    /* NULL (and from NULL): the sandbox template.NAME exists already, made
     * by the caller; it is stopped. */
    const struct sbx_create_opts *create;
    bool agent;             /* its guest has an agent (the forks' starts wait for it) */
};

struct sbx_template_res {
    bool usage;             /* create refused its arguments */
    bool made;              /* the sandbox was created (or forked): what failed came after */
    size_t made_msg;        /* strlen(err->msg) then: what create or the fork said */
};

/* Make template name: its sandbox created (o->create) and stopped, or
 * forked from o->from stopped; then its marker written. A base template
 * that cannot be stopped is removed again. 0, or -errno with why. */
int sandbox_template_create(const char *name, const struct sbx_template_opts *o, struct sbx_template_res *res,
                            struct sbx_err *err);

/* What moat template ls shows of one template. */
struct sbx_template_info {
    char name[SBX_NAME_MAX + 1];        /* without the prefix */
    bool agent;
    char from[512];                     /* "" none */
};

/* The templates (sandboxes template.* with a readable marker), sorted by
 * name: *out (malloc'd, free it) and *n. 0, or -errno with why. */
int sandbox_template_list(struct sbx_template_info **out, size_t *n, struct sbx_err *err);

/* Remove template name (its sandbox, as sandbox_remove with force). 0, or
 * -ENOENT (no such template), -errno with why. */
int sandbox_template_remove(const char *name, struct sbx_err *err);

#endif
