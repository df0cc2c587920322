/* GET/PUT/PATCH /machine-config, and GET /vm/config: the whole
 * configuration as JSON. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/moat.h"
#include "devices/virtio/ratelimit_json.h"

#include "vmm/api/firecracker/fc_vmm.h"

static json_t *limiter_json(const struct fc_limiter *l)
{
    if (!l->set)
        return json_null();
    char *t = ratelimit_cfg_to_json(&l->cfg);
    json_t *j = t ? json_loads(t, 0, NULL) : NULL;
    free(t);
    return j ? j : json_null();
}

static json_t *machine_json(const struct fcvm *s)
{
    return json_pack("{s:i,s:i,s:b,s:b}", "vcpu_count", (int)s->mc.vcpu_count, "mem_size_mib",
                     (int)s->mc.mem_size_mib, "smt", 0, "track_dirty_pages", (int)s->mc.track_dirty_pages);
}

static json_t *vm_config_json(const struct fcvm *s)
{
    json_t *drives = json_array(), *nets = json_array();
    for (size_t i = 0; i < s->ndrives; i++) {
        const struct fc_drive *d = &s->drives[i];
        json_t *o = json_pack("{s:s,s:s,s:b,s:b,s:s,s:o,s:s}", "drive_id", d->drive_id, "path_on_host",
                              d->path_on_host, "is_root_device", (int)d->is_root_device, "is_read_only",
                              (int)d->is_read_only, "cache_type", d->cache_writeback ? "Writeback" : "Unsafe",
                              "rate_limiter", limiter_json(&d->rate_limiter), "io_engine",
                              d->io_async ? "Async" : "Sync");
        if (o && d->has_partuuid)
            json_object_set_new(o, "partuuid", json_string(d->partuuid));
        json_array_append_new(drives, o);
    }
    for (size_t i = 0; i < s->nnets; i++) {
        const struct fc_net *n = &s->nets[i];
        json_t *o = json_pack("{s:s,s:s,s:o,s:o}", "iface_id", n->iface_id, "host_dev_name", n->host_dev_name,
                              "rx_rate_limiter", limiter_json(&n->rx), "tx_rate_limiter", limiter_json(&n->tx));
        if (o && n->guest_mac[0])
            json_object_set_new(o, "guest_mac", json_string(n->guest_mac));
        if (o && n->mtu)
            json_object_set_new(o, "mtu", json_integer(n->mtu));
        json_array_append_new(nets, o);
    }
    json_t *boot = json_null();
    if (s->has_boot) {
        boot = json_pack("{s:s}", "kernel_image_path", s->boot.kernel_image_path);
        if (boot && s->boot.has_initrd)
            json_object_set_new(boot, "initrd_path", json_string(s->boot.initrd_path));
        if (boot && s->boot.has_boot_args)
            json_object_set_new(boot, "boot_args", json_string(s->boot.boot_args));
    }
    json_t *vs = s->has_vsock ? json_pack("{s:i,s:s}", "guest_cid", (int)s->vsock.guest_cid, "uds_path",
                                          s->vsock.uds_path)
                              : json_null();
    json_t *mm = json_null();
    if (s->has_mmds_cfg) {
        json_t *ifs = json_array();
        for (size_t i = 0; i < s->mmds_cfg.nifaces; i++)
            json_array_append_new(ifs, json_string(s->mmds_cfg.ifaces[i]));
        mm = json_pack("{s:s,s:o,s:s}", "version", s->mmds_cfg.v1 ? "V1" : "V2", "network_interfaces", ifs,
                       "ipv4_address", "169.254.169.254");
    }
    json_t *lg = s->has_logger ? json_pack("{s:s,s:s,s:b,s:b}", "log_path", s->logger.log_path, "level",
                                           (const char *[]){ "Off", "Error", "Warning", "Info", "Debug",
                                                             "Trace" }[fc_flog.level],
                                           "show_level", (int)fc_flog.show_level, "show_log_origin",
                                           (int)fc_flog.show_origin)
                               : json_null();
    json_t *mt = s->has_metrics ? json_pack("{s:s}", "metrics_path", s->metrics.metrics_path) : json_null();
    if (s->has_metrics && mt && s->metrics.emit_id)
        json_object_set_new(mt, "emit_id", json_true());
    if (s->has_metrics && mt && s->metrics.properties[0]) {
        json_t *p = json_loads(s->metrics.properties, 0, NULL);
        if (p)
            json_object_set_new(mt, "properties", p);
    }
    json_t *en = s->has_entropy ? json_pack("{s:o}", "rate_limiter", limiter_json(&s->entropy.rate_limiter))
                                : json_null();
    return json_pack("{s:n,s:o,s:o,s:n,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "balloon", "drives", drives, "boot-source",
                     boot, "cpu-config", "logger", lg, "machine-config", machine_json(s), "metrics", mt,
                     "mmds-config", mm, "network-interfaces", nets, "vsock", vs, "entropy", en);
}

/* GET, PUT, PATCH /machine-config. */
unsigned fc_ep_machine_config(struct fcvm *s, const struct fc_call *c, struct reply *rep)
{
    if (c->m == FC_GET)
        return fc_ok_json(rep, machine_json(s));
    const struct fc_machine_cfg *mc = &c->u->mc;
    if (fc_decode_machine_cfg(c->body, c->len, c->m == FC_PATCH, &c->u->mc, c->why, FC_WHY_LEN) < 0)
        return fc_fault(rep, c->why);
    if (s->vm)
        return fc_fault(rep, fc_not_after_boot);
    if (mc->has_vcpu)
        s->mc.vcpu_count = mc->vcpu_count;
    if (mc->has_mem)
        s->mc.mem_size_mib = mc->mem_size_mib;
    if (mc->has_dirty || c->m == FC_PUT)
        s->mc.track_dirty_pages = mc->track_dirty_pages;
    s->configured = true;
    return rep->status = 204;
}

/* GET /vm/config. */
unsigned fc_ep_vm_config(struct fcvm *s, const struct fc_call *c, struct reply *rep)
{
    return fc_ok_json(rep, vm_config_json(s));
}
