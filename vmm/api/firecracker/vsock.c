/* PUT /vsock: the virtio-vsock device (its guest CID, its host socket),
 * before boot. */
#include "vmm/api/firecracker/fc_vmm.h"

unsigned fc_ep_vsock(struct fcvm *s, const struct fc_call *c, struct reply *rep)
{
    if (fc_decode_vsock(c->body, c->len, &c->u->v, c->why, FC_WHY_LEN) < 0)
        return fc_fault(rep, c->why);
    if (s->vm)
        return fc_fault(rep, fc_not_after_boot);
    s->vsock = c->u->v;
    s->has_vsock = s->configured = true;
    return rep->status = 204;
}
