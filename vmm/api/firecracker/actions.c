/* PUT /actions: InstanceStart (the configuration into a moat_config, the
 * VM created and started), FlushMetrics, SendCtrlAltDel. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "include/moat.h"
#include "boot/boot.h"

#include "vmm/api/firecracker/fc_vmm.h"

/* Append ",key=\"value\"" (value checked by fc_opt_safe) to buf. */
int fc_opt_add(char *buf, size_t cap, const char *key, const char *value, bool quote)
{
    size_t used = strlen(buf);
    int n = snprintf(buf + used, cap - used, "%s%s%s%s%s%s", used ? "," : "", key, value ? "=" : "",
                     value && quote ? "\"" : "", value ? value : "", value && quote ? "\"" : "");
    return n < 0 || (size_t)n >= cap - used ? -E2BIG : 0;
}

static void limiter_opts(char *buf, size_t cap, const char *prefix, const struct fc_limiter *l)
{
    if (!l->set)
        return;
    char k[16], v[96];
    if (l->cfg.bandwidth.size && l->cfg.bandwidth.refill_time_ms) {
        snprintf(k, sizeof k, "%sbw", prefix);
        fc_bucket_opt(&l->cfg.bandwidth, v, sizeof v);
        fc_opt_add(buf, cap, k, v, false);
    }
    if (l->cfg.ops.size && l->cfg.ops.refill_time_ms) {
        snprintf(k, sizeof k, "%sops", prefix);
        fc_bucket_opt(&l->cfg.ops, v, sizeof v);
        fc_opt_add(buf, cap, k, v, false);
    }
}

#define OPT_CAP 8192
unsigned fc_instance_start(struct fcvm *s, struct reply *rep)
{
    if (!s->has_boot)
        return fc_fault(rep, "Cannot start microvm without kernel configuration.");
    struct moat_config cfg;
    moat_config_init(&cfg);
    cfg.kernel = s->boot.kernel_image_path;
    cfg.initrd = s->boot.has_initrd ? s->boot.initrd_path : NULL;
    cfg.mem_mib = s->mc.mem_size_mib;
    cfg.cpus = s->mc.vcpu_count;
    cfg.flags = MOAT_F_FC_THREAD_NAMES | (s->mc.track_dirty_pages ? MOAT_F_DIRTY_LOG : 0) | s->sc_flags;
    cfg.console_in = -1;
    cfg.console_out = STDOUT_FILENO;
    /* As Firecracker: the root drive is the first (/dev/vda) and named on
     * the kernel command line. */
    static char cmdline[FC_STR_MAX + 200];
    const struct fc_drive *root = NULL;
    for (size_t i = 0; i < s->ndrives; i++)
        if (s->drives[i].is_root_device)
            root = &s->drives[i];
    if (s->boot.has_boot_args || root) {
        /* root= is a kernel parameter: before a " -- " in boot_args (init's
         * arguments), as moat_create puts the drives' parameters. */
        char rootarg[FC_ID_MAX + 40] = "";
        if (root)
            snprintf(rootarg, sizeof rootarg, "root=%s%s %s", root->has_partuuid ? "PARTUUID=" : "/dev/vda",
                     root->has_partuuid ? root->partuuid : "", root->is_read_only ? "ro" : "rw");
        const char *ex[] = { rootarg };
        if (boot_cmdline_build(cmdline, sizeof cmdline, s->boot.has_boot_args ? s->boot.boot_args : "", ex, 1,
                               NULL, 0) < 0)
            return fc_fault(rep, "Cannot start microvm: boot_args too long");
        cfg.cmdline = cmdline;
    }
    static struct moat_device devs[MOAT_MAX_DRIVES + FC_MAX_IFACES + 1];
    static char opts[MOAT_MAX_DRIVES + FC_MAX_IFACES + 1][OPT_CAP];
    size_t nd = 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < s->ndrives; i++) {
            const struct fc_drive *d = &s->drives[i];
            if (d->is_root_device != (pass == 0))
                continue;
            opts[nd][0] = 0;
            fc_opt_add(opts[nd], OPT_CAP, "path", d->path_on_host, true);
            fc_opt_add(opts[nd], OPT_CAP, "id", d->drive_id, false);
            if (d->is_read_only)
                fc_opt_add(opts[nd], OPT_CAP, "ro", NULL, false);
            limiter_opts(opts[nd], OPT_CAP, "", &d->rate_limiter);
            devs[nd] = (struct moat_device){ "blk", opts[nd] };
            nd++;
        }
    for (size_t i = 0; i < s->nnets; i++) {
        const struct fc_net *n = &s->nets[i];
        opts[nd][0] = 0;
        fc_opt_add(opts[nd], OPT_CAP, "tap", n->host_dev_name, true);
        fc_opt_add(opts[nd], OPT_CAP, "id", n->iface_id, false);
        if (n->guest_mac[0])
            fc_opt_add(opts[nd], OPT_CAP, "mac", n->guest_mac, false);
        if (n->mtu) {
            char v[12];
            snprintf(v, sizeof v, "%u", n->mtu);
            fc_opt_add(opts[nd], OPT_CAP, "mtu", v, false);
        }
        limiter_opts(opts[nd], OPT_CAP, "rx_", &n->rx);
        limiter_opts(opts[nd], OPT_CAP, "tx_", &n->tx);
        if (fc_mmds_on(s, n->iface_id))
            fc_opt_add(opts[nd], OPT_CAP, s->mmds_cfg.v1 ? "mmds_v1" : "mmds", NULL, false);
        devs[nd] = (struct moat_device){ "net", opts[nd] };
        nd++;
    }
    if (s->has_entropy) {
        /* virtio-rng (devices/rng): its limiter keys are bw= and ops=. */
        opts[nd][0] = 0;
        limiter_opts(opts[nd], OPT_CAP, "", &s->entropy.rate_limiter);
        devs[nd] = (struct moat_device){ "rng", opts[nd] };
        nd++;
    }
    cfg.devices = nd ? devs : NULL;
    cfg.ndevices = nd;
    if (s->has_vsock) {
        cfg.vsock_uds = s->vsock.uds_path;
        cfg.vsock_cid = s->vsock.guest_cid;
    }
    struct moat_error err = { 0 };
    struct moat_vm *vm = NULL;
    int r = moat_create(&cfg, &vm, &err);
    if (r < 0)
        return fc_faultf(rep, "Cannot start microvm: %s", err.msg[0] ? err.msg : strerror(-r));
    for (size_t i = 0; s->mmds_doc && i < s->nnets; i++)
        if (fc_mmds_on(s, s->nets[i].iface_id) &&
            (r = moat_device_set(vm, "net", s->nets[i].iface_id, "metadata", s->mmds_doc, &err)) < 0) {
            moat_destroy(vm);
            return fc_faultf(rep, "Cannot start microvm: MMDS: %s", err.msg[0] ? err.msg : strerror(-r));
        }
    if ((r = moat_start(vm)) < 0) {
        moat_destroy(vm);
        return fc_faultf(rep, "Cannot start microvm: %s", strerror(-r));
    }
    s->vm = vm;
    s->started = true;
    LOG(FC_LVL_INFO, "Successfully started microvm that was configured from one single json");
    uint64_t one = 1;
    if (write(s->wake_fd, &one, sizeof one) < 0) { /* the main loop polls again anyway */ }
    return rep->status = 204;
}

/* PUT /actions: InstanceStart before boot; FlushMetrics and SendCtrlAltDel
 * (runtime actions) after it. */
unsigned fc_ep_actions(struct fcvm *s, const struct fc_call *c, struct reply *rep)
{
    enum fc_action a;
    if (fc_decode_action(c->body, c->len, &a, c->why, FC_WHY_LEN) < 0)
        return fc_fault(rep, c->why);
    bool booted = s->vm != NULL;
    if (a == FC_ACT_START)
        return booted ? fc_fault(rep, fc_not_after_boot) : fc_instance_start(s, rep);
    if (!booted)
        return fc_fault(rep, fc_not_before_boot);
    if (a == FC_ACT_FLUSH_METRICS)
        return fc_flush_metrics(s) == 0 ? (rep->status = 204)
                                        : fc_fault(rep, "Cannot flush the metrics: the metrics system is not "
                                                        "initialized (PUT /metrics first) or its file failed.");
    /* SendCtrlAltDel: the scancodes go into the i8042, IRQ 1 */
    int r = moat_send_ctrl_alt_del(s->vm);
    return r == 0 ? (rep->status = 204)
           : fc_fault(rep, r == -ENOBUFS ? "Failed to send CTRL+ALT+DEL: i8042 internal buffer full (the guest "
                                           "has not read the previous keystrokes)."
                                         : "Failed to send CTRL+ALT+DEL: the microVM is not running.");
}
