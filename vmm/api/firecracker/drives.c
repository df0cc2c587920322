/* PUT /drives/{id} before boot, PATCH /drives/{id} after it (the
 * backing file, the rate limiter). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "include/moat.h"

#include "vmm/api/firecracker/fc_vmm.h"

static unsigned put_drive(struct fcvm *s, const struct fc_drive *d, struct reply *rep)
{
    if (strlen(d->drive_id) > 20)
        return fc_fault(rep, "field `drive_id`: moat takes at most 20 bytes (the virtio-blk serial)");
    if (!fc_opt_safe(d->path_on_host))
        return fc_fault(rep, "field `path_on_host`: control characters and '\"' are not supported");
    size_t i = 0;
    while (i < s->ndrives && strcmp(s->drives[i].drive_id, d->drive_id))
        i++;
    for (size_t k = 0; d->is_root_device && k < s->ndrives; k++)
        if (k != i && s->drives[k].is_root_device)
            return fc_fault(rep, "A root block device already exists!");
    if (i == s->ndrives && s->ndrives == MOAT_MAX_DRIVES)
        return fc_faultf(rep, "Too many drives: moat takes at most %d", MOAT_MAX_DRIVES);
    if (access(d->path_on_host, d->is_read_only ? R_OK : R_OK | W_OK) < 0)
        return fc_faultf(rep, "Unable to open the block device backing file %s: %s", d->path_on_host, strerror(errno));
    s->drives[i] = *d;
    if (i == s->ndrives)
        s->ndrives++;
    return rep->status = 204;
}

static unsigned patch_drive(struct fcvm *s, const struct fc_drive *d, struct reply *rep)
{
    if (!s->vm)
        return fc_fault(rep, fc_not_before_boot);
    struct moat_error err = { 0 };
    /* The backing file first (Kata's placeholder drives): the device opens
     * the new file before it lets go of the old one, so a failure changes
     * nothing, and the limiter is not touched. */
    if (d->has_path) {
        if (!fc_opt_safe(d->path_on_host))
            return fc_fault(rep, "field `path_on_host`: control characters and '\"' are not supported");
        int r = moat_device_set(s->vm, "blk", d->drive_id, "path", d->path_on_host, &err);
        for (size_t i = 0; r != -ENODEV && i < s->ndrives; i++)
            if (!strcmp(s->drives[i].drive_id, d->drive_id))
                (r < 0 ? s->blk_update_fails : s->blk_updates)[i]++;
        if (r < 0)
            return fc_faultf(rep, "Unable to patch the block device %s: %s", d->drive_id,
                          err.msg[0] ? err.msg : r == -ENODEV ? "no such drive" : strerror(-r));
        for (size_t i = 0; i < s->ndrives; i++)
            if (!strcmp(s->drives[i].drive_id, d->drive_id))
                snprintf(s->drives[i].path_on_host, sizeof s->drives[i].path_on_host, "%s", d->path_on_host);
    }
    const struct ratelimit_bucket_cfg *b[2] = { &d->rate_limiter.cfg.bandwidth, &d->rate_limiter.cfg.ops };
    for (int k = 0; d->rate_limiter.set && k < 2; k++) {
        char v[96];
        fc_bucket_opt(b[k], v, sizeof v);
        int r = moat_device_set(s->vm, "blk", d->drive_id, k ? "ops" : "bw", v, &err);
        if (r < 0)
            return fc_faultf(rep, "Unable to patch the block device %s: %s", d->drive_id,
                          err.msg[0] ? err.msg : r == -ENODEV ? "no such drive" : strerror(-r));
    }
    for (size_t i = 0; i < s->ndrives; i++)
        if (!strcmp(s->drives[i].drive_id, d->drive_id) && d->rate_limiter.set)
            s->drives[i].rate_limiter = d->rate_limiter;
    return rep->status = 204;
}

/* PUT /drives/{id} (before boot), PATCH /drives/{id} (after). */
unsigned fc_ep_drives(struct fcvm *s, const struct fc_call *c, struct reply *rep)
{
    if (fc_decode_drive(c->body, c->len, c->id, c->m == FC_PATCH, &c->u->d, c->why, FC_WHY_LEN) < 0)
        return fc_fault(rep, c->why);
    if (c->m == FC_PATCH)
        return patch_drive(s, &c->u->d, rep);
    if (s->vm)
        return fc_fault(rep, fc_not_after_boot);
    unsigned st = put_drive(s, &c->u->d, rep);
    s->configured |= st == 204;
    return st;
}
