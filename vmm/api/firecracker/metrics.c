/* Firecracker's metrics (PUT /metrics, --metrics-path, FlushMetrics):
 * one JSON line of counters since the last line, every minute and on
 * demand, with the counters moat's devices keep. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "include/moat.h"

#include "vmm/api/firecracker/fc_vmm.h"

static const char *const lat_names[] = { "full_create_snapshot", "diff_create_snapshot", "load_snapshot",
                                         "pause_vm", "resume_vm" };

static void add_counts(json_t *o, const char *name, const struct ep_count *c, bool fails)
{
    char k[64];
    snprintf(k, sizeof k, "%s_count", name);
    json_object_set_new(o, k, json_integer((json_int_t)c->count));
    if (fails) {
        snprintf(k, sizeof k, "%s_fails", name);
        json_object_set_new(o, k, json_integer((json_int_t)c->fails));
    }
}

static const struct {
    enum fc_ep ep;
    const char *name;
} metric_eps[] = {
    { FC_EP_ACTIONS, "actions" }, { FC_EP_BOOT_SOURCE, "boot_source" }, { FC_EP_DRIVES, "drive" },
    { FC_EP_LOGGER, "logger" }, { FC_EP_MACHINE_CONFIG, "machine_cfg" }, { FC_EP_METRICS, "metrics" },
    { FC_EP_NET, "network" }, { FC_EP_MMDS, "mmds" }, { FC_EP_VSOCK, "vsock" },
    { FC_EP_SNAP_CREATE, "snapshot_create" }, { FC_EP_SNAP_LOAD, "snapshot_load" }, { FC_EP_VM, "vm" },
    { FC_EP_ROOT, "instance_info" }, { FC_EP_VERSION, "vmm_version" }, { FC_EP_VM_CONFIG, "vm_config" },
    { FC_EP_ENTROPY, "entropy" }, { FC_EP_MMDS_CONFIG, "mmds_config" },
};

/* A device's object "<prefix>_<id>" in m: keys[k] = now[k] - was[k] (now[k]
 * when a counter went back: the device was made anew), added to sum. */
static void put_deltas(json_t *m, const char *prefix, const char *id, const char *const *keys, int nk,
                       const uint64_t *now, const uint64_t *was, uint64_t *sum)
{
    json_t *o = json_object();
    for (int k = 0; k < nk; k++) {
        uint64_t d = now[k] >= was[k] ? now[k] - was[k] : now[k];
        sum[k] += d;
        json_object_set_new(o, keys[k], json_integer((json_int_t)d));
    }
    char name[FC_ID_MAX + 16];
    snprintf(name, sizeof name, "%s_%s", prefix, id);
    json_object_set_new(m, name, o);
}

enum { NK_MAX = 9 };

/* Device i's id and its nk counters now and at the last line (now, was),
 * the last line's then made now; false when it has none to tell. text
 * (tlen bytes) is for its "stats". */
typedef bool (*dev_counts_fn)(struct fcvm *s, size_t i, char *text, size_t tlen, const char **id,
                              uint64_t *now, uint64_t *was);

/* The objects "<prefix>_<id>" of the ndev devices counts tells of, then
 * the all-devices object "<prefix>" when one did. */
static void dev_metrics(struct fcvm *s, json_t *m, const char *prefix, const char *const *keys, int nk,
                        size_t ndev, dev_counts_fn counts)
{
    uint64_t sum[NK_MAX] = { 0 };
    bool any = false;
    for (size_t i = 0; s->vm && i < ndev; i++) {
        const char *id;
        char text[4096];
        uint64_t now[NK_MAX], was[NK_MAX];
        if (!counts(s, i, text, sizeof text, &id, now, was))
            continue;
        put_deltas(m, prefix, id, keys, nk, now, was, sum);
        any = true;
    }
    if (!any)
        return;
    json_t *all = json_object();
    for (int k = 0; k < nk; k++)
        json_object_set_new(all, keys[k], json_integer((json_int_t)sum[k]));
    json_object_set_new(m, prefix, all);
}

/* Firecracker's "net" (all interfaces) and "net_<iface_id>" objects, with
 * the counters moat's net devices keep, since the last line. */
static const char *const net_keys[] = { "tx_packets_count", "tx_bytes_count", "tx_rate_limiter_throttled",
                                        "rx_packets_count", "rx_bytes_count", "rx_rate_limiter_throttled" };

static bool net_counts(struct fcvm *s, size_t i, char *text, size_t tlen, const char **id, uint64_t *now,
                       uint64_t *was)
{
    struct fc_net_counts c;
    *id = s->nets[i].iface_id;
    if (moat_device_get(s->vm, "net", *id, "stats", text, tlen, NULL) < 0 || fc_net_stats_parse(text, &c) < 0)
        return false;
    const struct fc_net_counts *p = &s->net_prev[i];
    const uint64_t cur[6] = { c.tx_frames, c.tx_bytes, c.tx_throttled, c.rx_frames, c.rx_bytes, c.rx_throttled };
    const uint64_t last[6] = { p->tx_frames, p->tx_bytes, p->tx_throttled, p->rx_frames, p->rx_bytes,
                               p->rx_throttled };
    memcpy(now, cur, sizeof cur);
    memcpy(was, last, sizeof last);
    s->net_prev[i] = c;
    return true;
}

/* Firecracker's "block" (all drives) and "block_<drive_id>" objects, with
 * the counters moat's drives keep, since the last line: bytes and
 * requests that completed, flushes, refused requests (invalid_reqs_count),
 * requests the file failed (execute_fails), backing-file swaps. */
static const char *const blk_keys[NK_MAX] = { "read_bytes", "write_bytes", "read_count", "write_count",
                                              "flush_count", "invalid_reqs_count", "execute_fails",
                                              "update_count", "update_fails" };

static bool blk_counts(struct fcvm *s, size_t i, char *text, size_t tlen, const char **id, uint64_t *now,
                       uint64_t *was)
{
    struct fc_blk_counts c;
    *id = s->drives[i].drive_id;
    if (moat_device_get(s->vm, "blk", *id, "stats", text, tlen, NULL) < 0 || fc_blk_stats_parse(text, &c) < 0)
        return false;
    const struct fc_blk_counts *p = &s->blk_prev[i];
    const uint64_t cur[NK_MAX] = { c.read_bytes, c.write_bytes, c.reads, c.writes, c.flushes, c.bad,
                                   c.failed - (c.bad <= c.failed ? c.bad : c.failed), s->blk_updates[i],
                                   s->blk_update_fails[i] };
    const uint64_t last[NK_MAX] = { p->read_bytes, p->write_bytes, p->reads, p->writes, p->flushes, p->bad,
                                    p->failed - (p->bad <= p->failed ? p->bad : p->failed), 0, 0 };
    memcpy(now, cur, sizeof cur);
    memcpy(was, last, sizeof last);
    s->blk_prev[i] = c;
    s->blk_updates[i] = s->blk_update_fails[i] = 0;
    return true;
}

/* o into m as key, unless it has no member. */
static void set_nonempty(json_t *m, const char *key, json_t *o)
{
    if (o && json_object_size(o))
        json_object_set_new(m, key, o);
    else
        json_decref(o);
}

/* Called with s->lock held. */
int fc_flush_metrics(struct fcvm *s)
{
    if (!s->has_metrics)
        return -ENOENT;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    json_t *m = json_object(), *get = json_object(), *put = json_object(), *patch = json_object();
    json_object_set_new(m, "utc_timestamp_ms", json_integer((json_int_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000));
    if (s->metrics.emit_id)
        json_object_set_new(m, "id", json_string(s->id));
    if (s->metrics.properties[0]) {
        json_t *p = json_loads(s->metrics.properties, 0, NULL);
        if (p)
            json_object_set_new(m, "properties", p);
    }
    for (size_t i = 0; i < sizeof metric_eps / sizeof metric_eps[0]; i++) {
        const struct ep_count *c = s->counts[metric_eps[i].ep];
        if (c[FC_GET].count)
            add_counts(get, metric_eps[i].name, &c[FC_GET], false);
        if (c[FC_PUT].count)
            add_counts(put, metric_eps[i].name, &c[FC_PUT], true);
        if (c[FC_PATCH].count)
            add_counts(patch, metric_eps[i].name, &c[FC_PATCH], true);
    }
    /* An object with nothing in it this time is left out (Firecracker's
     * lines have no empty objects). */
    set_nonempty(m, "get_api_requests", get);
    set_nonempty(m, "put_api_requests", put);
    set_nonempty(m, "patch_api_requests", patch);
    json_t *lat = json_object();
    for (int i = 0; i < 5; i++)
        if (s->lat_us[i] >= 0)
            json_object_set_new(lat, lat_names[i], json_integer(s->lat_us[i]));
    set_nonempty(m, "latencies_us", lat);
    json_t *logger = json_pack("{s:I}", "missed_log_count", (json_int_t)fc_flog.lost);
    json_object_set_new(m, "logger", logger);
    if (s->startup_us >= 0 || s->startup_cpu_us >= 0) {
        json_t *api = json_object();
        if (s->startup_us >= 0)
            json_object_set_new(api, "process_startup_time_us", json_integer(s->startup_us));
        if (s->startup_cpu_us >= 0)
            json_object_set_new(api, "process_startup_time_cpu_us", json_integer(s->startup_cpu_us));
        json_object_set_new(m, "api_server", api);
    }
    json_t *mo = json_object();
    struct moat_timings t;
    if (s->vm && moat_get_timings(s->vm, &t) == 0) {
        const struct { const char *k; int64_t v; } f[] = {
            { "kvm_ready_us", t.kvm_ready }, { "first_run_us", t.first_run }, { "init_reached_us", t.init_reached },
        };
        for (size_t i = 0; i < 3; i++)
            if (f[i].v >= 0)
                json_object_set_new(mo, f[i].k, json_integer(f[i].v));
    }
    struct moat_console_info ci = { .size = sizeof ci };
    if (s->vm && moat_get_console(s->vm, &ci) == 0) {
        json_object_set_new(mo, "console_bytes_written", json_integer((json_int_t)ci.written));
        json_object_set_new(mo, "console_bytes_dropped", json_integer((json_int_t)ci.dropped));
    }
    set_nonempty(m, "moat", mo);
    dev_metrics(s, m, "net", net_keys, 6, s->nnets, net_counts);
    dev_metrics(s, m, "block", blk_keys, NK_MAX, s->ndrives, blk_counts);
    char *text = json_dumps(m, JSON_COMPACT);
    json_decref(m);
    if (!text)
        return -ENOMEM;
    size_t n = strlen(text);
    text[n] = '\n';
    ssize_t w = write(s->metrics_fd, text, n + 1);
    free(text);
    if (w != (ssize_t)(n + 1))
        return w < 0 ? -errno : -EIO;
    memset(s->counts, 0, sizeof s->counts);
    for (int i = 0; i < 5; i++)
        s->lat_us[i] = -1;
    s->metrics_lines++;
    return 0;
}

unsigned fc_put_metrics(struct fcvm *s, const struct fc_metrics *m, struct reply *rep)
{
    if (s->has_metrics)
        return fc_fault(rep, "Reinitialization of metrics not allowed.");
    int fd = fc_open_sink(m->metrics_path);
    if (fd < 0)
        return fc_faultf(rep, "Cannot initialize the metrics: %s: %s", m->metrics_path, strerror(errno));
    s->metrics_fd = fd;
    s->metrics = *m;
    s->has_metrics = true;
    return rep->status = 204;
}

unsigned fc_ep_metrics(struct fcvm *s, const struct fc_call *c, struct reply *rep)
{
    if (fc_decode_metrics(c->body, c->len, &c->u->mt, c->why, FC_WHY_LEN) < 0)
        return fc_fault(rep, c->why);
    return s->vm ? fc_fault(rep, fc_not_after_boot) : fc_put_metrics(s, &c->u->mt, rep);
}
