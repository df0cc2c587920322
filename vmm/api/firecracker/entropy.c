/* PUT /entropy: a virtio-rng device (and its rate limiter), before boot. */
#include "vmm/api/firecracker/fc_vmm.h"

unsigned fc_ep_entropy(struct fcvm *s, const struct fc_call *c, struct reply *rep)
{
    if (fc_decode_entropy(c->body, c->len, &c->u->en, c->why, FC_WHY_LEN) < 0)
        return fc_fault(rep, c->why);
    if (s->vm)
        return fc_fault(rep, fc_not_after_boot);
    s->entropy = c->u->en;
    s->has_entropy = s->configured = true;
    return rep->status = 204;
}
