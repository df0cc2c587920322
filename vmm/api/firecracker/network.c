/* PUT /network-interfaces/{id} before boot, PATCH after it (the rate
 * limiters). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "include/moat.h"

#include "vmm/api/firecracker/fc_vmm.h"

static unsigned put_net(struct fcvm *s, const struct fc_net *n, struct reply *rep)
{
    if (strlen(n->iface_id) > 32)
        return fc_fault(rep, "field `iface_id`: moat takes at most 32 bytes");
    if (!fc_opt_safe(n->host_dev_name) || strchr(n->host_dev_name, '/'))
        return fc_fault(rep, "field `host_dev_name`: not a TAP device name");
    size_t i = 0;
    while (i < s->nnets && strcmp(s->nets[i].iface_id, n->iface_id))
        i++;
    for (size_t k = 0; k < s->nnets; k++)
        if (k != i && (!strcmp(s->nets[k].host_dev_name, n->host_dev_name) ||
                       (n->guest_mac[0] && !strcasecmp(s->nets[k].guest_mac, n->guest_mac))))
            return fc_faultf(rep, "The %s is already in use by interface %s",
                          !strcmp(s->nets[k].host_dev_name, n->host_dev_name) ? "host_dev_name" : "guest_mac",
                          s->nets[k].iface_id);
    if (i == s->nnets && s->nnets == FC_MAX_IFACES)
        return fc_faultf(rep, "Too many network interfaces: moat takes at most %d", FC_MAX_IFACES);
    s->nets[i] = *n;
    if (i == s->nnets)
        s->nnets++;
    return rep->status = 204;
}

static unsigned patch_net(struct fcvm *s, const struct fc_net *n, struct reply *rep)
{
    if (!s->vm)
        return fc_fault(rep, fc_not_before_boot);
    struct moat_error err = { 0 };
    const struct fc_limiter *l[2] = { &n->rx, &n->tx };
    for (int d = 0; d < 2; d++)
        for (int k = 0; l[d]->set && k < 2; k++) {
            char key[16], v[96];
            snprintf(key, sizeof key, "%s_%s", d ? "tx" : "rx", k ? "ops" : "bw");
            fc_bucket_opt(k ? &l[d]->cfg.ops : &l[d]->cfg.bandwidth, v, sizeof v);
            int r = moat_device_set(s->vm, "net", n->iface_id, key, v, &err);
            if (r < 0)
                return fc_faultf(rep, "Unable to patch the network interface %s: %s", n->iface_id,
                              err.msg[0] ? err.msg : r == -ENODEV ? "no such interface" : strerror(-r));
        }
    return rep->status = 204;
}

/* PUT /network-interfaces/{id} (before boot), PATCH (after). */
unsigned fc_ep_net(struct fcvm *s, const struct fc_call *c, struct reply *rep)
{
    if (fc_decode_net(c->body, c->len, c->id, c->m == FC_PATCH, &c->u->net, c->why, FC_WHY_LEN) < 0)
        return fc_fault(rep, c->why);
    if (c->m == FC_PATCH)
        return patch_net(s, &c->u->net, rep);
    if (s->vm)
        return fc_fault(rep, fc_not_after_boot);
    unsigned st = put_net(s, &c->u->net, rep);
    s->configured |= st == 204;
    return st;
}
