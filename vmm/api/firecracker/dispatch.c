/* The answers (a fault, a JSON body) and the routes: each endpoint to its
 * resource group's handler. */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/api/firecracker/fc_vmm.h"

unsigned fc_fault(struct reply *r, const char *msg)
{
    json_t *j = json_pack("{s:s}", "fault_message", msg);
    r->status = 400;
    r->body = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return 400;
}

unsigned fc_faultf(struct reply *r, const char *fmt, ...)
{
    char m[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    return fc_fault(r, m);
}

unsigned fc_ok_json(struct reply *r, json_t *j)
{
    r->status = 200;
    r->body = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(j);
    if (!r->body)
        return fc_fault(r, "out of memory");
    return 200;
}

const char fc_not_after_boot[] = "The requested operation is not supported after starting the microVM.";
const char fc_not_before_boot[] = "The requested operation is not supported before starting the microVM.";

/* ---- dispatch ---- */

static const char *state_name(const struct fcvm *s)
{
    return !s->vm ? "Not started" : s->paused ? "Paused" : "Running";
}

/* GET /: the instance's information. */
static unsigned ep_root(struct fcvm *s, const struct fc_call *c, struct reply *rep)
{
    return fc_ok_json(rep, json_pack("{s:s,s:s,s:s,s:s}", "id", s->id, "state", state_name(s), "vmm_version",
                                     FC_API_VERSION, "app_name", "moat"));
}

static unsigned ep_version(struct fcvm *s, const struct fc_call *c, struct reply *rep)
{
    return fc_ok_json(rep, json_pack("{s:s}", "firecracker_version", FC_API_VERSION));
}

static unsigned ep_balloon(struct fcvm *s, const struct fc_call *c, struct reply *rep)
{
    return fc_fault(rep, "The balloon device is not supported by moat.");
}

static unsigned ep_cpu_config(struct fcvm *s, const struct fc_call *c, struct reply *rep)
{
    return fc_fault(rep, "Custom CPU templates are not supported by moat.");
}

static unsigned ep_hotplug(struct fcvm *s, const struct fc_call *c, struct reply *rep)
{
    return fc_fault(rep, "Memory hotplug is not supported by moat.");
}

static fc_route_fn *const routes[FC_EP_HOTPLUG + 1] = {
    [FC_EP_ROOT] = ep_root, [FC_EP_VERSION] = ep_version, [FC_EP_VM_CONFIG] = fc_ep_vm_config,
    [FC_EP_MACHINE_CONFIG] = fc_ep_machine_config, [FC_EP_BOOT_SOURCE] = fc_ep_boot_source,
    [FC_EP_DRIVES] = fc_ep_drives, [FC_EP_NET] = fc_ep_net, [FC_EP_VSOCK] = fc_ep_vsock,
    [FC_EP_ACTIONS] = fc_ep_actions, [FC_EP_VM] = fc_ep_vm, [FC_EP_SNAP_CREATE] = fc_ep_snap_create,
    [FC_EP_SNAP_LOAD] = fc_ep_snap_load, [FC_EP_MMDS_CONFIG] = fc_ep_mmds_config, [FC_EP_MMDS] = fc_ep_mmds,
    [FC_EP_LOGGER] = fc_ep_logger, [FC_EP_METRICS] = fc_ep_metrics, [FC_EP_ENTROPY] = fc_ep_entropy,
    [FC_EP_BALLOON] = ep_balloon, [FC_EP_CPU_CONFIG] = ep_cpu_config, [FC_EP_HOTPLUG] = ep_hotplug,
};

/* One request, s->lock held. */
unsigned fc_dispatch(struct fcvm *s, enum fc_ep ep, enum fc_method m, const char *id, const char *body, size_t len,
                     struct reply *rep)
{
    char why[FC_WHY_LEN] = "";
    union fc_body *u = calloc(1, sizeof *u);
    if (!u)
        return fc_fault(rep, "out of memory");
    const struct fc_call c = { .m = m, .id = id, .body = body, .len = len, .u = u, .why = why };
    fc_route_fn *fn = (unsigned)ep < sizeof routes / sizeof routes[0] && routes[ep] ? routes[ep] : ep_hotplug;
    unsigned st = fn(s, &c, rep);
    free(u);
    return st;
}
