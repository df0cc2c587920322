/* PUT /boot-source: the kernel, initrd and command line, before boot. */
#include "vmm/api/firecracker/fc_vmm.h"

unsigned fc_ep_boot_source(struct fcvm *s, const struct fc_call *c, struct reply *rep)
{
    if (fc_decode_boot_source(c->body, c->len, &c->u->bs, c->why, FC_WHY_LEN) < 0)
        return fc_fault(rep, c->why);
    if (s->vm)
        return fc_fault(rep, fc_not_after_boot);
    s->boot = c->u->bs;
    s->has_boot = true;
    s->configured = true;
    return rep->status = 204;
}
