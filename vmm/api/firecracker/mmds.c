/* The metadata service: PUT /mmds/config before boot, GET/PUT/PATCH
 * /mmds at any time (the document goes into every MMDS interface),
 * --metadata FILE. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/moat.h"

#include "vmm/api/firecracker/fc_vmm.h"

bool fc_mmds_on(const struct fcvm *s, const char *iface)
{
    for (size_t i = 0; s->has_mmds_cfg && i < s->mmds_cfg.nifaces; i++)
        if (!strcmp(s->mmds_cfg.ifaces[i], iface))
            return true;
    return false;
}

static unsigned put_mmds(struct fcvm *s, const char *body, size_t len, bool patch, struct reply *rep)
{
    char why[300];
    char *doc = s->mmds_doc ? strdup(s->mmds_doc) : NULL;
    if (s->mmds_doc && !doc)
        return fc_fault(rep, "out of memory");
    int r = fc_mmds_update(&doc, body, len, patch, s->mmds_limit, why, sizeof why);
    if (r < 0) {
        free(doc);
        fc_fault(rep, why);
        return rep->status = r == -EFBIG ? 413 : 400;   /* Firecracker: 413 Payload Too Large */
    }
    struct moat_error err = { 0 };
    for (size_t i = 0; s->vm && i < s->nnets; i++)
        if (fc_mmds_on(s, s->nets[i].iface_id) &&
            (r = moat_device_set(s->vm, "net", s->nets[i].iface_id, "metadata", doc, &err)) < 0) {
            free(doc);
            return fc_faultf(rep, "MMDS: %s", err.msg[0] ? err.msg : strerror(-r));
        }
    free(s->mmds_doc);
    s->mmds_doc = doc;
    return rep->status = 204;
}

/* PUT /mmds/config: which interfaces answer the metadata service, before
 * boot. */
unsigned fc_ep_mmds_config(struct fcvm *s, const struct fc_call *c, struct reply *rep)
{
    const struct fc_mmds_config *mm = &c->u->mm;
    if (fc_decode_mmds_config(c->body, c->len, &c->u->mm, c->why, FC_WHY_LEN) < 0)
        return fc_fault(rep, c->why);
    if (s->vm)
        return fc_fault(rep, fc_not_after_boot);
    for (size_t i = 0; i < mm->nifaces; i++) {
        size_t k = 0;
        while (k < s->nnets && strcmp(s->nets[k].iface_id, mm->ifaces[i]))
            k++;
        if (k == s->nnets)
            return fc_faultf(rep, "The list of network interface IDs provided contains at least one ID that does "
                                  "not correspond to any existing network interface: %s", mm->ifaces[i]);
    }
    s->mmds_cfg = *mm;
    s->has_mmds_cfg = s->configured = true;
    return rep->status = 204;
}

/* GET, PUT, PATCH /mmds: the document. */
unsigned fc_ep_mmds(struct fcvm *s, const struct fc_call *c, struct reply *rep)
{
    if (c->m == FC_GET) {
        json_t *j = s->mmds_doc ? json_loads(s->mmds_doc, 0, NULL) : json_object();
        return fc_ok_json(rep, j);
    }
    return put_mmds(s, c->body, c->len, c->m == FC_PATCH, rep);
}

int fc_load_metadata(struct fcvm *s, const char *path)
{
    FILE *f = fopen(path, "r");
    char *text = malloc(FC_BODY_CAP + 1);
    size_t n = f && text ? fread(text, 1, FC_BODY_CAP + 1, f) : 0;
    int bad = !f || !text || ferror(f) || n > FC_BODY_CAP;
    if (f)
        fclose(f);
    char why[300];
    int r = bad ? -EINVAL : fc_mmds_update(&s->mmds_doc, text, n, false, s->mmds_limit, why, sizeof why);
    free(text);
    if (r < 0) {
        fprintf(stderr, "moat vmm: --metadata %s: %s\n", path,
                bad ? "cannot read it (missing, unreadable or over 16 MiB)" : why);
        return FC_EXIT_GENERIC;
    }
    return 0;
}
