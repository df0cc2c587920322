/* moat vmm (also when moat is run as `firecracker`): Firecracker's command
 * line and its HTTP API on a Unix socket, so orchestrators written for
 * Firecracker drive moat unchanged (docs/control-api.md,
 * docs/orchestrators.md). HTTP through libmicrohttpd on the already bound
 * socket, polled by one API thread of ours (a client that trickles bytes
 * holds only its own connection); request bodies decoded by
 * vmm/api/firecracker/fc_req.c; the VM through libmoat.
 *
 * Threads and seccomp (docs/security.md, "Seccomp"), as Firecracker's: the
 * API thread ("fc_api", list `api`) only moves bytes: it reads a request,
 * hands it to the main thread and sends the answer back. The main thread
 * does every request's work (files, the VM's creation, snapshots), unfiltered
 * until the VM has first run, then under the `fcmain` list; the VM's own
 * threads have theirs (MOAT_F_SECCOMP). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <malloc.h>
#include "vmm/api/mhd_dyn.h"
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "include/moat.h"
#include "vmm/cli/cli.h"
#include "boot/boot.h"
#include "vmm/api/firecracker/fc_req.h"
#include "vmm/base/clock.h"
#include "vmm/base/scfilter.h"
#include "vmm/snapshot/snapfmt.h"
#include "devices/virtio/ratelimit_json.h"

/* Firecracker's exit codes (docs/control-api.md). */
enum { FC_EXIT_OK = 0, FC_EXIT_GENERIC = 1, FC_EXIT_BAD_CONFIG = 152, FC_EXIT_ARGS = 153 };

#define METRICS_PERIOD_MS 60000
#define MAX_CONNECTIONS   64

/* Per endpoint and method: requests and failures since the last metrics line. */
struct ep_count {
    uint64_t count, fails;
};

struct fcvm {
    pthread_mutex_t lock;
    char id[65];
    /* Before boot: the configuration. */
    struct fc_machine_cfg mc;
    bool has_boot;
    struct fc_boot_source boot;
    struct fc_drive drives[MOAT_MAX_DRIVES];
    size_t ndrives;
    struct fc_net nets[FC_MAX_IFACES];
    size_t nnets;
    bool has_vsock;
    struct fc_vsock vsock;
    bool has_entropy;           /* PUT /entropy: a virtio-rng device */
    struct fc_entropy entropy;
    bool has_mmds_cfg;
    struct fc_mmds_config mmds_cfg;
    char *mmds_doc;
    size_t body_limit;          /* --http-api-max-payload-size */
    size_t mmds_limit;          /* --mmds-size-limit (default: body_limit) */
    bool configured;            /* a boot resource was set: no snapshot load */
    bool has_logger, has_metrics;
    struct fc_logger logger;
    struct fc_metrics metrics;
    int metrics_fd;
    /* After InstanceStart or /snapshot/load. */
    struct moat_vm *vm;
    bool started, paused;
    int wake_fd;                /* eventfd: the main loop looks at vm again */
    /* Metrics. */
    struct ep_count counts[FC_EP_HOTPLUG + 1][FC_PATCH + 1];
    int64_t lat_us[5];          /* -1: not measured since the last line */
    uint64_t metrics_lines;
    int64_t startup_us, startup_cpu_us;   /* api_server's figures; -1: no --start-time-* */
    struct fc_net_counts net_prev[FC_MAX_IFACES];   /* at the last metrics line */
    struct fc_blk_counts blk_prev[MOAT_MAX_DRIVES]; /* at the last metrics line, by s->drives index */
    uint64_t blk_updates[MOAT_MAX_DRIVES], blk_update_fails[MOAT_MAX_DRIVES];  /* path swaps, since then */
    int inflight;               /* requests begun and not yet answered (atomic) */
    /* Seccomp: MOAT_F_SECCOMP(_AUDIT) for the VM, 0 with --no-seccomp;
     * whether the main thread has its own filter yet. */
    uint32_t sc_flags;
    bool main_filtered;
    /* The request the API thread handed to the main thread (hand_off). */
    pthread_mutex_t hlock;
    pthread_cond_t hcond;
    struct work *pending;
    bool closing;               /* the main thread serves no more requests */
};

enum { LAT_FULL_SNAP, LAT_DIFF_SNAP, LAT_LOAD, LAT_PAUSE, LAT_RESUME };
static const char *const lat_names[] = { "full_create_snapshot", "diff_create_snapshot", "load_snapshot",
                                         "pause_vm", "resume_vm" };

/* ---- logs: Firecracker's line format ---- */

struct fc_log {
    pthread_mutex_t lock;
    int fd;                     /* -1: stderr */
    enum fc_level level;
    bool show_level, show_origin;
    char id[65];
    uint64_t lost;              /* lines a full or failing log lost */
};
static struct fc_log flog = { PTHREAD_MUTEX_INITIALIZER, -1, FC_LVL_WARN, false, false, "anonymous-instance", 0 };

/* "<time> [<id>:<thread>(:<LEVEL>)(:<file>:<line>)] <msg>", one write. */
static void fc_logf(enum fc_level lvl, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fc_logf(enum fc_level lvl, const char *file, int line, const char *fmt, ...)
{
    if (lvl == FC_LVL_OFF || lvl > flog.level)
        return;
    char msg[1024], out[1400], thr[16] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* A filtered thread knows its name (its list has no prctl). */
    const char *tn = sc_thread_name();
    if (tn)
        snprintf(thr, sizeof thr, "%s", tn);
    else
        pthread_getname_np(pthread_self(), thr, sizeof thr);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    pthread_mutex_lock(&flog.lock);
    size_t n = fc_log_line(out, sizeof out, &ts, flog.id, thr, lvl, flog.show_level, file, line, flog.show_origin,
                           msg);
    if (write(flog.fd >= 0 ? flog.fd : STDERR_FILENO, out, n) != (ssize_t)n)
        flog.lost++;
    pthread_mutex_unlock(&flog.lock);
}
#define LOG(lvl, ...) fc_logf(lvl, __FILE__, __LINE__, __VA_ARGS__)

/* libmoat's messages into the same log. */
static void lib_log(void *opaque, int level, const char *msg)
{
    (void)opaque;
    static const enum fc_level map[] = { FC_LVL_ERROR, FC_LVL_WARN, FC_LVL_INFO, FC_LVL_DEBUG };
    fc_logf(level >= 0 && level <= 3 ? map[level] : FC_LVL_DEBUG, "libmoat", 0, "%s", msg);
}

static int open_sink(const char *path)
{
    return open(path, O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0600);
}

/* ---- responses ---- */

struct reply {
    unsigned status;
    char *body;                 /* malloc'd JSON, or NULL (204) */
};

static unsigned fault(struct reply *r, const char *msg)
{
    json_t *j = json_pack("{s:s}", "fault_message", msg);
    r->status = 400;
    r->body = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return 400;
}

static unsigned faultf(struct reply *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static unsigned faultf(struct reply *r, const char *fmt, ...)
{
    char m[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    return fault(r, m);
}

static unsigned ok_json(struct reply *r, json_t *j)
{
    r->status = 200;
    r->body = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(j);
    if (!r->body)
        return fault(r, "out of memory");
    return 200;
}

static const char not_after_boot[] = "The requested operation is not supported after starting the microVM.";
static const char not_before_boot[] = "The requested operation is not supported before starting the microVM.";

/* ---- the configuration as JSON (GET /machine-config, GET /vm/config) ---- */

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
                                                             "Trace" }[flog.level],
                                           "show_level", (int)flog.show_level, "show_log_origin",
                                           (int)flog.show_origin)
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

/* ---- metrics: one JSON line ---- */

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

/* The all-devices object named prefix, when a device had one. */
static void put_sum(json_t *m, const char *prefix, bool any, const char *const *keys, int nk, const uint64_t *sum)
{
    if (!any)
        return;
    json_t *all = json_object();
    for (int k = 0; k < nk; k++)
        json_object_set_new(all, keys[k], json_integer((json_int_t)sum[k]));
    json_object_set_new(m, prefix, all);
}

/* Firecracker's "net" (all interfaces) and "net_<iface_id>" objects, with
 * the counters moat's net devices keep, since the last line. */
static void net_metrics(struct fcvm *s, json_t *m)
{
    static const char *const keys[] = { "tx_packets_count", "tx_bytes_count", "tx_rate_limiter_throttled",
                                         "rx_packets_count", "rx_bytes_count", "rx_rate_limiter_throttled" };
    uint64_t sum[6] = { 0 };
    bool any = false;
    for (size_t i = 0; s->vm && i < s->nnets; i++) {
        char text[4096];
        struct fc_net_counts c;
        long n = moat_device_get(s->vm, "net", s->nets[i].iface_id, "stats", text, sizeof text, NULL);
        if (n < 0 || fc_net_stats_parse(text, &c) < 0)
            continue;
        const uint64_t now[6] = { c.tx_frames, c.tx_bytes, c.tx_throttled, c.rx_frames, c.rx_bytes, c.rx_throttled };
        const struct fc_net_counts *p = &s->net_prev[i];
        const uint64_t was[6] = { p->tx_frames, p->tx_bytes, p->tx_throttled, p->rx_frames, p->rx_bytes,
                                  p->rx_throttled };
        put_deltas(m, "net", s->nets[i].iface_id, keys, 6, now, was, sum);
        s->net_prev[i] = c;
        any = true;
    }
    put_sum(m, "net", any, keys, 6, sum);
}

/* Firecracker's "block" (all drives) and "block_<drive_id>" objects, with
 * the counters moat's drives keep, since the last line: bytes and
 * requests that completed, flushes, refused requests (invalid_reqs_count),
 * requests the file failed (execute_fails), backing-file swaps. */
static void blk_metrics(struct fcvm *s, json_t *m)
{
    enum { NK = 9 };
    static const char *const keys[NK] = { "read_bytes", "write_bytes", "read_count", "write_count", "flush_count",
                                          "invalid_reqs_count", "execute_fails", "update_count", "update_fails" };
    uint64_t sum[NK] = { 0 };
    bool any = false;
    for (size_t i = 0; s->vm && i < s->ndrives; i++) {
        char text[512];
        struct fc_blk_counts c;
        long n = moat_device_get(s->vm, "blk", s->drives[i].drive_id, "stats", text, sizeof text, NULL);
        if (n < 0 || fc_blk_stats_parse(text, &c) < 0)
            continue;
        const struct fc_blk_counts *p = &s->blk_prev[i];
        const uint64_t now[NK] = { c.read_bytes, c.write_bytes, c.reads, c.writes, c.flushes, c.bad,
                                   c.failed - (c.bad <= c.failed ? c.bad : c.failed), s->blk_updates[i],
                                   s->blk_update_fails[i] };
        const uint64_t was[NK] = { p->read_bytes, p->write_bytes, p->reads, p->writes, p->flushes, p->bad,
                                   p->failed - (p->bad <= p->failed ? p->bad : p->failed), 0, 0 };
        put_deltas(m, "block", s->drives[i].drive_id, keys, NK, now, was, sum);
        s->blk_prev[i] = c;
        s->blk_updates[i] = s->blk_update_fails[i] = 0;
        any = true;
    }
    put_sum(m, "block", any, keys, NK, sum);
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
static int flush_metrics(struct fcvm *s)
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
    json_t *logger = json_pack("{s:I}", "missed_log_count", (json_int_t)flog.lost);
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
    net_metrics(s, m);
    blk_metrics(s, m);
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

/* ---- booting ---- */

/* Append ",key=\"value\"" (value checked by fc_opt_safe) to buf. */
static int opt_add(char *buf, size_t cap, const char *key, const char *value, bool quote)
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
        opt_add(buf, cap, k, v, false);
    }
    if (l->cfg.ops.size && l->cfg.ops.refill_time_ms) {
        snprintf(k, sizeof k, "%sops", prefix);
        fc_bucket_opt(&l->cfg.ops, v, sizeof v);
        opt_add(buf, cap, k, v, false);
    }
}

static bool mmds_on(const struct fcvm *s, const char *iface)
{
    for (size_t i = 0; s->has_mmds_cfg && i < s->mmds_cfg.nifaces; i++)
        if (!strcmp(s->mmds_cfg.ifaces[i], iface))
            return true;
    return false;
}

#define OPT_CAP 8192
static unsigned instance_start(struct fcvm *s, struct reply *rep)
{
    if (!s->has_boot)
        return fault(rep, "Cannot start microvm without kernel configuration.");
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
            return fault(rep, "Cannot start microvm: boot_args too long");
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
            opt_add(opts[nd], OPT_CAP, "path", d->path_on_host, true);
            opt_add(opts[nd], OPT_CAP, "id", d->drive_id, false);
            if (d->is_read_only)
                opt_add(opts[nd], OPT_CAP, "ro", NULL, false);
            limiter_opts(opts[nd], OPT_CAP, "", &d->rate_limiter);
            devs[nd] = (struct moat_device){ "blk", opts[nd] };
            nd++;
        }
    for (size_t i = 0; i < s->nnets; i++) {
        const struct fc_net *n = &s->nets[i];
        opts[nd][0] = 0;
        opt_add(opts[nd], OPT_CAP, "tap", n->host_dev_name, true);
        opt_add(opts[nd], OPT_CAP, "id", n->iface_id, false);
        if (n->guest_mac[0])
            opt_add(opts[nd], OPT_CAP, "mac", n->guest_mac, false);
        if (n->mtu) {
            char v[12];
            snprintf(v, sizeof v, "%u", n->mtu);
            opt_add(opts[nd], OPT_CAP, "mtu", v, false);
        }
        limiter_opts(opts[nd], OPT_CAP, "rx_", &n->rx);
        limiter_opts(opts[nd], OPT_CAP, "tx_", &n->tx);
        if (mmds_on(s, n->iface_id))
            opt_add(opts[nd], OPT_CAP, s->mmds_cfg.v1 ? "mmds_v1" : "mmds", NULL, false);
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
        return faultf(rep, "Cannot start microvm: %s", err.msg[0] ? err.msg : strerror(-r));
    for (size_t i = 0; s->mmds_doc && i < s->nnets; i++)
        if (mmds_on(s, s->nets[i].iface_id) &&
            (r = moat_device_set(vm, "net", s->nets[i].iface_id, "metadata", s->mmds_doc, &err)) < 0) {
            moat_destroy(vm);
            return faultf(rep, "Cannot start microvm: MMDS: %s", err.msg[0] ? err.msg : strerror(-r));
        }
    if ((r = moat_start(vm)) < 0) {
        moat_destroy(vm);
        return faultf(rep, "Cannot start microvm: %s", strerror(-r));
    }
    s->vm = vm;
    s->started = true;
    LOG(FC_LVL_INFO, "Successfully started microvm that was configured from one single json");
    uint64_t one = 1;
    if (write(s->wake_fd, &one, sizeof one) < 0) { /* the main loop polls again anyway */ }
    return rep->status = 204;
}

/* One of a restored device's options into buf ("" if not given): true
 * if it was given (a flag, or a value that fits). */
static bool dev_opt(struct moat_vm *vm, const char *type, const char *id, const char *key, char *buf, size_t len)
{
    long n = moat_device_option(vm, type, id, key, buf, len, NULL);
    if (n < 0 || (size_t)n >= len) {
        buf[0] = 0;
        return false;
    }
    return true;
}

static void opt_limiter(struct moat_vm *vm, const char *type, const char *id, const char *prefix,
                        struct fc_limiter *l)
{
    char kb[16], ko[16], bw[96], ops[96];
    snprintf(kb, sizeof kb, "%sbw", prefix);
    snprintf(ko, sizeof ko, "%sops", prefix);
    bool hb = dev_opt(vm, type, id, kb, bw, sizeof bw), ho = dev_opt(vm, type, id, ko, ops, sizeof ops);
    int have = 0, bad = 0;
    memset(l, 0, sizeof *l);
    if ((hb || ho) && ratelimit_from_opts(hb ? bw : NULL, ho ? ops : NULL, &l->cfg, &have, &bad) == 0 && have)
        l->set = true;
    else
        memset(&l->cfg, 0, sizeof l->cfg);
}

/* What GET /vm/config reports after /snapshot/load: the restored VM's
 * shape and devices (the snapshot's, with the load's overrides). A
 * snapshot does not record which drive was the root one, nor the cache
 * type or I/O engine asked for: those read as false/"Unsafe"/"Sync". */
static void adopt_restored(struct fcvm *s, const struct fc_snap_load *l)
{
    unsigned cpus;
    uint64_t mem;
    if (moat_get_shape(s->vm, &cpus, &mem) == 0) {
        s->mc.vcpu_count = cpus;
        s->mc.mem_size_mib = (uint32_t)(mem >> 20);
    }
    s->mc.track_dirty_pages = l->enable_diff_snapshots;
    s->ndrives = s->nnets = 0;
    s->has_vsock = false;
    struct moat_device_info di;
    for (unsigned i = 0; moat_device_info(s->vm, i, &di) == 0; i++) {
        if (!strcmp(di.type, "blk") && s->ndrives < MOAT_MAX_DRIVES && strlen(di.id) <= FC_ID_MAX) {
            struct fc_drive *d = &s->drives[s->ndrives++];
            memset(d, 0, sizeof *d);
            snprintf(d->drive_id, sizeof d->drive_id, "%s", di.id);
            dev_opt(s->vm, "blk", di.id, "path", d->path_on_host, sizeof d->path_on_host);
            char f[8];
            d->is_read_only = dev_opt(s->vm, "blk", di.id, "ro", f, sizeof f);
            opt_limiter(s->vm, "blk", di.id, "", &d->rate_limiter);
        } else if (!strcmp(di.type, "net") && s->nnets < FC_MAX_IFACES && strlen(di.id) <= FC_ID_MAX) {
            struct fc_net *n = &s->nets[s->nnets++];
            memset(n, 0, sizeof *n);
            snprintf(n->iface_id, sizeof n->iface_id, "%s", di.id);
            dev_opt(s->vm, "net", di.id, "tap", n->host_dev_name, sizeof n->host_dev_name);
            dev_opt(s->vm, "net", di.id, "mac", n->guest_mac, sizeof n->guest_mac);
            char mtu[12];
            if (dev_opt(s->vm, "net", di.id, "mtu", mtu, sizeof mtu))
                n->mtu = (uint32_t)strtoul(mtu, NULL, 10);
            opt_limiter(s->vm, "net", di.id, "rx_", &n->rx);
            opt_limiter(s->vm, "net", di.id, "tx_", &n->tx);
        } else if (!strcmp(di.type, "vsock")) {
            char cid[24];
            if (dev_opt(s->vm, "vsock", di.id, "cid", cid, sizeof cid) &&
                dev_opt(s->vm, "vsock", di.id, "uds", s->vsock.uds_path, sizeof s->vsock.uds_path)) {
                s->vsock.guest_cid = (uint32_t)strtoul(cid, NULL, 10);
                s->has_vsock = true;
            }
        }
    }
    memset(s->blk_prev, 0, sizeof s->blk_prev);
    memset(s->net_prev, 0, sizeof s->net_prev);
}

static unsigned snapshot_load(struct fcvm *s, const struct fc_snap_load *l, struct reply *rep)
{
    if (s->configured)
        return fault(rep, "Loading a microVM snapshot not allowed after configuring boot-specific resources.");
    struct moat_restore_config rc;
    moat_restore_config_init(&rc);
    rc.state_path = l->snapshot_path;
    /* Uffd: l->mem_path is the page-fault handler's Unix socket; moat sends
     * it Firecracker's handshake (docs/uffd.md). */
    rc.mem_path = l->uffd ? NULL : l->mem_path;
    rc.mem_uffd_socket = l->uffd ? l->mem_path : NULL;
    rc.console_in = -1;
    rc.console_out = STDOUT_FILENO;
    rc.flags = MOAT_F_FC_THREAD_NAMES | (l->enable_diff_snapshots ? MOAT_F_DIRTY_LOG : 0) | s->sc_flags;
    static struct moat_device devs[FC_MAX_IFACES];
    static char opts[FC_MAX_IFACES][512];
    for (size_t i = 0; i < l->noverrides; i++) {
        if (!fc_opt_safe(l->overrides[i].host_dev_name))
            return fault(rep, "field `network_overrides[].host_dev_name`: bad characters");
        opts[i][0] = 0;
        opt_add(opts[i], sizeof opts[i], "id", l->overrides[i].iface_id, false);
        opt_add(opts[i], sizeof opts[i], "tap", l->overrides[i].host_dev_name, true);
        devs[i] = (struct moat_device){ "net", opts[i] };
    }
    rc.devices = l->noverrides ? devs : NULL;
    rc.ndevices = l->noverrides;
    /* vsock_override: the restored vsock device's host socket. */
    rc.vsock_uds = l->vsock_uds[0] ? l->vsock_uds : NULL;
    int64_t t0 = clock_mono_us();
    struct moat_error err = { 0 };
    struct moat_vm *vm = NULL;
    int r = moat_restore(&rc, &vm, &err);
    if (r < 0)
        return faultf(rep, "Load snapshot error: %s", err.msg[0] ? err.msg : strerror(-r));
    if (l->resume_vm && (r = moat_start(vm)) < 0) {
        moat_destroy(vm);
        return faultf(rep, "Load snapshot error: cannot resume: %s", strerror(-r));
    }
    s->lat_us[LAT_LOAD] = clock_mono_us() - t0;
    s->vm = vm;
    adopt_restored(s, l);
    s->started = l->resume_vm;
    s->paused = !l->resume_vm;
    s->configured = true;
    uint64_t one = 1;
    if (write(s->wake_fd, &one, sizeof one) < 0) { /* the main loop polls again anyway */ }
    return rep->status = 204;
}

static unsigned set_vm_state(struct fcvm *s, bool pause, struct reply *rep)
{
    if (!s->vm)
        return fault(rep, not_before_boot);
    int64_t t0 = clock_mono_us();
    int r;
    if (pause) {
        r = s->started ? moat_pause(s->vm) : -EALREADY;
        if (r == -EALREADY)
            r = 0;
        if (r == 0) {
            s->paused = true;
            s->lat_us[LAT_PAUSE] = clock_mono_us() - t0;
        }
    } else {
        r = !s->started ? moat_start(s->vm) : moat_resume(s->vm);
        if (r == -EALREADY)
            r = 0;
        if (r == 0) {
            s->started = true;
            s->paused = false;
            s->lat_us[LAT_RESUME] = clock_mono_us() - t0;
        }
    }
    if (r < 0)
        return faultf(rep, "%s microVM error: %s", pause ? "Pause" : "Resume", strerror(-r));
    return rep->status = 204;
}

static unsigned snapshot_create(struct fcvm *s, const struct fc_snap_create *c, struct reply *rep)
{
    if (!s->vm)
        return fault(rep, not_before_boot);
    if (!s->paused)
        return fault(rep, "Create snapshot error: the microVM must be paused (PATCH /vm {\"state\": \"Paused\"})");
    int64_t t0 = clock_mono_us();
    int r = c->diff ? moat_snapshot_diff(s->vm, c->snapshot_path, c->mem_file_path)
                    : moat_snapshot(s->vm, c->snapshot_path, c->mem_file_path);
    if (r == -ENOTSUP && c->diff)
        return fault(rep, "Create snapshot error: diff snapshots need dirty page tracking "
                          "(machine-config track_dirty_pages, or enable_diff_snapshots at load)");
    if (r < 0)
        return faultf(rep, "Create snapshot error: %s", strerror(-r));
    s->lat_us[c->diff ? LAT_DIFF_SNAP : LAT_FULL_SNAP] = clock_mono_us() - t0;
    return rep->status = 204;
}

/* ---- resources before boot ---- */

static unsigned put_drive(struct fcvm *s, const struct fc_drive *d, struct reply *rep)
{
    if (strlen(d->drive_id) > 20)
        return fault(rep, "field `drive_id`: moat takes at most 20 bytes (the virtio-blk serial)");
    if (!fc_opt_safe(d->path_on_host))
        return fault(rep, "field `path_on_host`: control characters and '\"' are not supported");
    size_t i = 0;
    while (i < s->ndrives && strcmp(s->drives[i].drive_id, d->drive_id))
        i++;
    for (size_t k = 0; d->is_root_device && k < s->ndrives; k++)
        if (k != i && s->drives[k].is_root_device)
            return fault(rep, "A root block device already exists!");
    if (i == s->ndrives && s->ndrives == MOAT_MAX_DRIVES)
        return faultf(rep, "Too many drives: moat takes at most %d", MOAT_MAX_DRIVES);
    if (access(d->path_on_host, d->is_read_only ? R_OK : R_OK | W_OK) < 0)
        return faultf(rep, "Unable to open the block device backing file %s: %s", d->path_on_host, strerror(errno));
    s->drives[i] = *d;
    if (i == s->ndrives)
        s->ndrives++;
    return rep->status = 204;
}

static unsigned patch_drive(struct fcvm *s, const struct fc_drive *d, struct reply *rep)
{
    if (!s->vm)
        return fault(rep, not_before_boot);
    struct moat_error err = { 0 };
    /* The backing file first (Kata's placeholder drives): the device opens
     * the new file before it lets go of the old one, so a failure changes
     * nothing, and the limiter is not touched. */
    if (d->has_path) {
        if (!fc_opt_safe(d->path_on_host))
            return fault(rep, "field `path_on_host`: control characters and '\"' are not supported");
        int r = moat_device_set(s->vm, "blk", d->drive_id, "path", d->path_on_host, &err);
        for (size_t i = 0; r != -ENODEV && i < s->ndrives; i++)
            if (!strcmp(s->drives[i].drive_id, d->drive_id))
                (r < 0 ? s->blk_update_fails : s->blk_updates)[i]++;
        if (r < 0)
            return faultf(rep, "Unable to patch the block device %s: %s", d->drive_id,
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
            return faultf(rep, "Unable to patch the block device %s: %s", d->drive_id,
                          err.msg[0] ? err.msg : r == -ENODEV ? "no such drive" : strerror(-r));
    }
    for (size_t i = 0; i < s->ndrives; i++)
        if (!strcmp(s->drives[i].drive_id, d->drive_id) && d->rate_limiter.set)
            s->drives[i].rate_limiter = d->rate_limiter;
    return rep->status = 204;
}

static unsigned put_net(struct fcvm *s, const struct fc_net *n, struct reply *rep)
{
    if (strlen(n->iface_id) > 32)
        return fault(rep, "field `iface_id`: moat takes at most 32 bytes");
    if (!fc_opt_safe(n->host_dev_name) || strchr(n->host_dev_name, '/'))
        return fault(rep, "field `host_dev_name`: not a TAP device name");
    size_t i = 0;
    while (i < s->nnets && strcmp(s->nets[i].iface_id, n->iface_id))
        i++;
    for (size_t k = 0; k < s->nnets; k++)
        if (k != i && (!strcmp(s->nets[k].host_dev_name, n->host_dev_name) ||
                       (n->guest_mac[0] && !strcasecmp(s->nets[k].guest_mac, n->guest_mac))))
            return faultf(rep, "The %s is already in use by interface %s",
                          !strcmp(s->nets[k].host_dev_name, n->host_dev_name) ? "host_dev_name" : "guest_mac",
                          s->nets[k].iface_id);
    if (i == s->nnets && s->nnets == FC_MAX_IFACES)
        return faultf(rep, "Too many network interfaces: moat takes at most %d", FC_MAX_IFACES);
    s->nets[i] = *n;
    if (i == s->nnets)
        s->nnets++;
    return rep->status = 204;
}

static unsigned patch_net(struct fcvm *s, const struct fc_net *n, struct reply *rep)
{
    if (!s->vm)
        return fault(rep, not_before_boot);
    struct moat_error err = { 0 };
    const struct fc_limiter *l[2] = { &n->rx, &n->tx };
    for (int d = 0; d < 2; d++)
        for (int k = 0; l[d]->set && k < 2; k++) {
            char key[16], v[96];
            snprintf(key, sizeof key, "%s_%s", d ? "tx" : "rx", k ? "ops" : "bw");
            fc_bucket_opt(k ? &l[d]->cfg.ops : &l[d]->cfg.bandwidth, v, sizeof v);
            int r = moat_device_set(s->vm, "net", n->iface_id, key, v, &err);
            if (r < 0)
                return faultf(rep, "Unable to patch the network interface %s: %s", n->iface_id,
                              err.msg[0] ? err.msg : r == -ENODEV ? "no such interface" : strerror(-r));
        }
    return rep->status = 204;
}

static unsigned put_mmds(struct fcvm *s, const char *body, size_t len, bool patch, struct reply *rep)
{
    char why[300];
    char *doc = s->mmds_doc ? strdup(s->mmds_doc) : NULL;
    if (s->mmds_doc && !doc)
        return fault(rep, "out of memory");
    int r = fc_mmds_update(&doc, body, len, patch, s->mmds_limit, why, sizeof why);
    if (r < 0) {
        free(doc);
        fault(rep, why);
        return rep->status = r == -EFBIG ? 413 : 400;   /* Firecracker: 413 Payload Too Large */
    }
    struct moat_error err = { 0 };
    for (size_t i = 0; s->vm && i < s->nnets; i++)
        if (mmds_on(s, s->nets[i].iface_id) &&
            (r = moat_device_set(s->vm, "net", s->nets[i].iface_id, "metadata", doc, &err)) < 0) {
            free(doc);
            return faultf(rep, "MMDS: %s", err.msg[0] ? err.msg : strerror(-r));
        }
    free(s->mmds_doc);
    s->mmds_doc = doc;
    return rep->status = 204;
}

static unsigned put_logger(struct fcvm *s, const struct fc_logger *l, struct reply *rep)
{
    int fd = -1;
    if (l->log_path[0] && (fd = open_sink(l->log_path)) < 0)
        return faultf(rep, "Cannot initialize the logger: %s: %s", l->log_path, strerror(errno));
    pthread_mutex_lock(&flog.lock);
    if (fd >= 0) {
        if (flog.fd >= 0)
            close(flog.fd);
        flog.fd = fd;
    }
    if (l->has_level)
        flog.level = l->level;
    if (l->has_show_level)
        flog.show_level = l->show_level;
    if (l->has_show_origin)
        flog.show_origin = l->show_log_origin;
    pthread_mutex_unlock(&flog.lock);
    moat_set_log(flog.level >= FC_LVL_DEBUG ? MOAT_LOG_DEBUG : flog.level == FC_LVL_INFO ? MOAT_LOG_INFO
                                                                                        : MOAT_LOG_WARN,
                 lib_log, NULL);
    s->logger = *l;
    s->has_logger = true;
    LOG(FC_LVL_INFO, "Running moat %s (Firecracker API %s)", moat_version(), FC_API_VERSION);
    return rep->status = 204;
}

static unsigned put_metrics(struct fcvm *s, const struct fc_metrics *m, struct reply *rep)
{
    if (s->has_metrics)
        return fault(rep, "Reinitialization of metrics not allowed.");
    int fd = open_sink(m->metrics_path);
    if (fd < 0)
        return faultf(rep, "Cannot initialize the metrics: %s: %s", m->metrics_path, strerror(errno));
    s->metrics_fd = fd;
    s->metrics = *m;
    s->has_metrics = true;
    return rep->status = 204;
}

/* ---- dispatch ---- */

static const char *state_name(const struct fcvm *s)
{
    return !s->vm ? "Not started" : s->paused ? "Paused" : "Running";
}

/* One request, s->lock held. */
static unsigned dispatch(struct fcvm *s, enum fc_ep ep, enum fc_method m, const char *id, const char *body,
                         size_t len, struct reply *rep)
{
    char why[600] = "";
    bool booted = s->vm != NULL;
    union fc_body *u = calloc(1, sizeof *u);
    if (!u)
        return fault(rep, "out of memory");
    unsigned st;
#define DECODE(call) do { if ((call) < 0) { st = fault(rep, why); goto out; } } while (0)
    switch (ep) {
    case FC_EP_ROOT:
        st = ok_json(rep, json_pack("{s:s,s:s,s:s,s:s}", "id", s->id, "state", state_name(s), "vmm_version",
                                    FC_API_VERSION, "app_name", "moat"));
        break;
    case FC_EP_VERSION:
        st = ok_json(rep, json_pack("{s:s}", "firecracker_version", FC_API_VERSION));
        break;
    case FC_EP_VM_CONFIG:
        st = ok_json(rep, vm_config_json(s));
        break;
    case FC_EP_MACHINE_CONFIG:
        if (m == FC_GET) {
            st = ok_json(rep, machine_json(s));
            break;
        }
        DECODE(fc_decode_machine_cfg(body, len, m == FC_PATCH, &u->mc, why, sizeof why));
        if (booted) {
            st = fault(rep, not_after_boot);
            break;
        }
        if (u->mc.has_vcpu)
            s->mc.vcpu_count = u->mc.vcpu_count;
        if (u->mc.has_mem)
            s->mc.mem_size_mib = u->mc.mem_size_mib;
        if (u->mc.has_dirty || m == FC_PUT)
            s->mc.track_dirty_pages = u->mc.track_dirty_pages;
        s->configured = true;
        st = rep->status = 204;
        break;
    case FC_EP_BOOT_SOURCE:
        DECODE(fc_decode_boot_source(body, len, &u->bs, why, sizeof why));
        if (booted) {
            st = fault(rep, not_after_boot);
            break;
        }
        s->boot = u->bs;
        s->has_boot = true;
        s->configured = true;
        st = rep->status = 204;
        break;
    case FC_EP_DRIVES:
        DECODE(fc_decode_drive(body, len, id, m == FC_PATCH, &u->d, why, sizeof why));
        if (m == FC_PATCH) {
            st = patch_drive(s, &u->d, rep);
        } else if (booted) {
            st = fault(rep, not_after_boot);
        } else {
            st = put_drive(s, &u->d, rep);
            s->configured |= st == 204;
        }
        break;
    case FC_EP_NET:
        DECODE(fc_decode_net(body, len, id, m == FC_PATCH, &u->net, why, sizeof why));
        if (m == FC_PATCH) {
            st = patch_net(s, &u->net, rep);
        } else if (booted) {
            st = fault(rep, not_after_boot);
        } else {
            st = put_net(s, &u->net, rep);
            s->configured |= st == 204;
        }
        break;
    case FC_EP_VSOCK:
        DECODE(fc_decode_vsock(body, len, &u->v, why, sizeof why));
        if (booted) {
            st = fault(rep, not_after_boot);
            break;
        }
        s->vsock = u->v;
        s->has_vsock = s->configured = true;
        st = rep->status = 204;
        break;
    case FC_EP_ACTIONS: {
        enum fc_action a;
        DECODE(fc_decode_action(body, len, &a, why, sizeof why));
        if (a == FC_ACT_START)
            st = booted ? fault(rep, not_after_boot) : instance_start(s, rep);
        else if (!booted)       /* FlushMetrics and SendCtrlAltDel: runtime actions */
            st = fault(rep, not_before_boot);
        else if (a == FC_ACT_FLUSH_METRICS)
            st = flush_metrics(s) == 0 ? (rep->status = 204)
                                       : fault(rep, "Cannot flush the metrics: the metrics system is not "
                                                    "initialized (PUT /metrics first) or its file failed.");
        else {   /* SendCtrlAltDel: the scancodes go into the i8042, IRQ 1 */
            int r = moat_send_ctrl_alt_del(s->vm);
            st = r == 0 ? (rep->status = 204)
                 : fault(rep, r == -ENOBUFS ? "Failed to send CTRL+ALT+DEL: i8042 internal buffer full (the guest "
                                              "has not read the previous keystrokes)."
                                            : "Failed to send CTRL+ALT+DEL: the microVM is not running.");
        }
        break;
    }
    case FC_EP_VM: {
        bool pause;
        DECODE(fc_decode_vm_state(body, len, &pause, why, sizeof why));
        st = set_vm_state(s, pause, rep);
        break;
    }
    case FC_EP_SNAP_CREATE:
        DECODE(fc_decode_snap_create(body, len, &u->sc, why, sizeof why));
        st = snapshot_create(s, &u->sc, rep);
        break;
    case FC_EP_SNAP_LOAD:
        DECODE(fc_decode_snap_load(body, len, &u->sl, why, sizeof why));
        st = booted ? fault(rep, not_after_boot) : snapshot_load(s, &u->sl, rep);
        break;
    case FC_EP_MMDS_CONFIG:
        DECODE(fc_decode_mmds_config(body, len, &u->mm, why, sizeof why));
        if (booted) {
            st = fault(rep, not_after_boot);
            break;
        }
        for (size_t i = 0; i < u->mm.nifaces; i++) {
            size_t k = 0;
            while (k < s->nnets && strcmp(s->nets[k].iface_id, u->mm.ifaces[i]))
                k++;
            if (k == s->nnets) {
                st = faultf(rep, "The list of network interface IDs provided contains at least one ID that does "
                                 "not correspond to any existing network interface: %s", u->mm.ifaces[i]);
                goto out;
            }
        }
        s->mmds_cfg = u->mm;
        s->has_mmds_cfg = s->configured = true;
        st = rep->status = 204;
        break;
    case FC_EP_MMDS:
        if (m == FC_GET) {
            json_t *j = s->mmds_doc ? json_loads(s->mmds_doc, 0, NULL) : json_object();
            st = ok_json(rep, j);
        } else {
            st = put_mmds(s, body, len, m == FC_PATCH, rep);
        }
        break;
    case FC_EP_LOGGER:
        DECODE(fc_decode_logger(body, len, &u->lg, why, sizeof why));
        st = booted ? fault(rep, not_after_boot) : put_logger(s, &u->lg, rep);
        break;
    case FC_EP_METRICS:
        DECODE(fc_decode_metrics(body, len, &u->mt, why, sizeof why));
        st = booted ? fault(rep, not_after_boot) : put_metrics(s, &u->mt, rep);
        break;
    case FC_EP_ENTROPY:
        DECODE(fc_decode_entropy(body, len, &u->en, why, sizeof why));
        if (booted) {
            st = fault(rep, not_after_boot);
            break;
        }
        s->entropy = u->en;
        s->has_entropy = s->configured = true;
        st = rep->status = 204;
        break;
    case FC_EP_BALLOON:
        st = fault(rep, "The balloon device is not supported by moat.");
        break;
    case FC_EP_CPU_CONFIG:
        st = fault(rep, "Custom CPU templates are not supported by moat.");
        break;
    default:
        st = fault(rep, "Memory hotplug is not supported by moat.");
        break;
    }
#undef DECODE
out:
    free(u);
    return st;
}

/* ---- requests: from the API thread to the main thread ---- */

/* The API thread's seccomp list has no file, no KVM, no thread creation:
 * every routed request is done by the main thread (serve_pending), as
 * Firecracker's API thread hands its requests to the VMM thread. One at a
 * time: the API thread waits for the answer. */
struct work {
    enum fc_ep ep;
    enum fc_method m;
    const char *id;
    const char *body;
    size_t len;
    struct reply rep;
    bool done;
};

static const char shutting_down[] = "The microVM is shutting down.";

/* On the API thread: hand w to the main thread and wait for its answer. */
static void hand_off(struct fcvm *s, struct work *w)
{
    pthread_mutex_lock(&s->hlock);
    if (s->closing) {
        pthread_mutex_unlock(&s->hlock);
        fault(&w->rep, shutting_down);
        return;
    }
    s->pending = w;
    uint64_t one = 1;
    if (write(s->wake_fd, &one, sizeof one) < 0) { /* an eventfd: cannot fail short of a bug */ }
    while (!w->done)
        pthread_cond_wait(&s->hcond, &s->hlock);
    pthread_mutex_unlock(&s->hlock);
}

static void work_done(struct fcvm *s, struct work *w)
{
    pthread_mutex_lock(&s->hlock);
    w->done = true;
    pthread_cond_broadcast(&s->hcond);
    pthread_mutex_unlock(&s->hlock);
}

/* On the main thread: do the request handed over, if any. */
static void serve_pending(struct fcvm *s)
{
    pthread_mutex_lock(&s->hlock);
    struct work *w = s->pending;
    s->pending = NULL;
    pthread_mutex_unlock(&s->hlock);
    if (!w)
        return;
    pthread_mutex_lock(&s->lock);
    dispatch(s, w->ep, w->m, w->id, w->body, w->len, &w->rep);
    s->counts[w->ep][w->m].count++;
    s->counts[w->ep][w->m].fails += w->rep.status >= 400;
    pthread_mutex_unlock(&s->lock);
    work_done(s, w);
}

/* On the main thread, leaving: no more requests; one handed over and not
 * done is refused. */
static void close_requests(struct fcvm *s)
{
    pthread_mutex_lock(&s->hlock);
    s->closing = true;
    struct work *w = s->pending;
    s->pending = NULL;
    pthread_mutex_unlock(&s->hlock);
    if (w) {
        fault(&w->rep, shutting_down);
        work_done(s, w);
    }
}

/* The main thread's own filter, once the VM has run (moat_start returned:
 * its vCPU, console and device threads exist): from then on it only
 * serves requests on a built VM, the signals, the VM's end and the
 * metrics. Not in the sanitizer build, where the thread that ends the
 * process runs the leak check (sc_exit_unfiltered). 0 or -errno. */
static int main_filter(struct fcvm *s)
{
    pthread_mutex_lock(&s->lock);
    bool due = s->sc_flags && !s->main_filtered && s->vm && s->started;
    pthread_mutex_unlock(&s->lock);
    if (!due || sc_exit_unfiltered())
        return 0;
    char name[16] = "";
    pthread_getname_np(pthread_self(), name, sizeof name);   /* keeps the program's name */
    int r = sc_install_named(SC_FCMAIN, (s->sc_flags & MOAT_F_SECCOMP_AUDIT) ? SC_AUDIT : SC_KILL,
                             name[0] ? name : NULL);
    if (r == 0)
        s->main_filtered = true;
    return r;
}

/* ---- HTTP ---- */

struct req {
    char *body;                 /* malloc'd: Content-Length bytes, at most fcvm.body_limit */
    size_t len;
    size_t declared;            /* Content-Length */
    const char *early;          /* refused from the headers alone */
    bool too_large;
    bool answered;              /* a refusal is queued: ignore the rest */
};

static enum MHD_Result send_reply(struct MHD_Connection *c, const struct reply *rep)
{
    size_t n = rep->body ? strlen(rep->body) : 0;
    struct MHD_Response *resp = MHD_create_response_from_buffer(n, rep->body ? rep->body : (void *)"",
                                                                MHD_RESPMEM_MUST_COPY);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, "Server", "Firecracker API");
    if (n)
        MHD_add_response_header(resp, "Content-Type", "application/json");
    enum MHD_Result r = MHD_queue_response(c, rep->status, resp);
    MHD_destroy_response(resp);
    return r;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    struct fcvm *s = cls;
    struct req *r = *con_cls;
    struct reply rep = { 0, NULL };
    (void)version;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r)
            return MHD_NO;
        *con_cls = r;
        __atomic_add_fetch(&s->inflight, 1, __ATOMIC_SEQ_CST);
        const char *te = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (te)
            r->early = "Transfer-Encoding is not supported: send the body with a Content-Length.";
        if (cl) {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(cl, &end, 10);
            r->declared = errno || *end ? SIZE_MAX : (size_t)v;
        }
        if (!r->early && r->declared > s->body_limit)
            r->too_large = true;
        if (r->early || r->too_large) {
            char m[200];
            if (r->too_large)
                snprintf(m, sizeof m, "Request payload with size %s is larger than the limit of %zu allowed by "
                         "server.", cl, s->body_limit);
            fault(&rep, r->early ? r->early : m);
            enum MHD_Result res = send_reply(c, &rep);
            free(rep.body);
            r->answered = true;
            return res;
        }
        return MHD_YES;
    }
    if (r->answered) {
        *upload_size = 0;     /* answered already; MHD closes the connection */
        return MHD_YES;
    }
    if (*upload_size) {
        /* One buffer of Content-Length bytes (at most the limit: checked
         * above), made at the first piece: no realloc, whose mremap the
         * API thread's seccomp list does not have. */
        if (!r->body && !r->too_large && !(r->body = malloc(r->declared ? r->declared : 1)))
            return MHD_NO;      /* out of memory: the connection is dropped */
        if (r->too_large || r->len + *upload_size > r->declared)
            r->too_large = true;
        else
            memcpy(r->body + r->len, upload, *upload_size);
        r->len += *upload_size;
        *upload_size = 0;
        return MHD_YES;
    }
    enum fc_ep ep = 0;
    enum fc_method m = 0;
    char id[FC_ID_MAX + 1], why[300];
    if (r->too_large) {       /* more bytes than Content-Length said: cannot happen with MHD, refused anyway */
        snprintf(why, sizeof why, "Request payload with size %zu is larger than the limit of %zu allowed by server.",
                 r->len, s->body_limit);
        fault(&rep, why);
        enum MHD_Result res = send_reply(c, &rep);
        free(rep.body);
        return res;
    }
    /* As Firecracker, before the path: a GET has no body, a PUT or PATCH
     * has one. */
    if (!strcmp(method, "GET") && r->len) {
        fault(&rep, "GET request cannot have a body.");
    } else if ((!strcmp(method, "PUT") || !strcmp(method, "PATCH")) && !r->len) {
        fault(&rep, !strcmp(method, "PUT") ? "Empty PUT request." : "Empty PATCH request.");
    } else if (fc_route(method, url, &ep, &m, id, sizeof id, why, sizeof why) < 0) {
        fault(&rep, why);
    } else {
        LOG(FC_LVL_DEBUG, "The API server received a %s request on \"%s\".", method, url);
        struct work w = { .ep = ep, .m = m, .id = id, .body = r->body, .len = r->len };
        hand_off(s, &w);
        rep = w.rep;
    }
    if (rep.status >= 400)
        LOG(FC_LVL_ERROR, "Received Error. Status code: %u. Message: %s", rep.status, rep.body ? rep.body : "");
    enum MHD_Result res = send_reply(c, &rep);
    free(rep.body);
    return res;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode t)
{
    struct fcvm *s = cls;
    (void)c;
    (void)t;
    if (*con_cls) {
        __atomic_sub_fetch(&s->inflight, 1, __ATOMIC_SEQ_CST);
        free(((struct req *)*con_cls)->body);
    }
    free(*con_cls);
    *con_cls = NULL;
}

/* ---- the API thread ---- */

/* libmicrohttpd without an internal thread (MHD_USE_EPOLL: its epoll set
 * holds the listening socket and every connection), polled here, on a
 * thread whose filter is in before the first accept. */
struct api {
    struct MHD_Daemon *d;
    int quit_fd;                /* eventfd: the main thread asks it to stop */
    enum sc_mode mode;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool ready;
    int start_r;
};

static void *api_main(void *arg)
{
    struct api *a = arg;
    int r = sc_install_named(SC_API, a->mode, "fc_api");    /* named as Firecracker's API thread */
    pthread_mutex_lock(&a->lock);
    a->start_r = r;
    a->ready = true;
    pthread_cond_broadcast(&a->cond);
    pthread_mutex_unlock(&a->lock);
    if (r < 0)
        return NULL;
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(a->d, MHD_DAEMON_INFO_EPOLL_FD);
    int epfd = di ? di->epoll_fd : -1;
    for (;;) {
        MHD_UNSIGNED_LONG_LONG to = 0;
        int wait = -1;
        if (MHD_get_timeout(a->d, &to) == MHD_YES)
            wait = to > INT_MAX ? INT_MAX : (int)to;
        struct pollfd p[2] = { { epfd, POLLIN, 0 }, { a->quit_fd, POLLIN, 0 } };
        if (poll(p, 2, wait) < 0 && errno != EINTR)
            break;
        if (p[1].revents)
            break;
        MHD_run(a->d);
    }
    MHD_stop_daemon(a->d);      /* here: what it calls is on this thread's list */
    return NULL;
}

/* Start the API thread on d; 0 once its filter is in, or -errno. */
static int api_start(struct api *a, struct MHD_Daemon *d, enum sc_mode mode)
{
    a->d = d;
    a->mode = mode;
    a->ready = false;
    a->quit_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (a->quit_fd < 0)
        return -errno;
    pthread_mutex_init(&a->lock, NULL);
    pthread_cond_init(&a->cond, NULL);
    int e = pthread_create(&a->thread, NULL, api_main, a);
    if (e) {
        close(a->quit_fd);
        return -e;
    }
    pthread_mutex_lock(&a->lock);
    while (!a->ready)
        pthread_cond_wait(&a->cond, &a->lock);
    int r = a->start_r;
    pthread_mutex_unlock(&a->lock);
    if (r < 0)
        pthread_join(a->thread, NULL);
    return r;
}

/* Stop it: it stops the daemon (closing every connection and the
 * listening socket) and ends. */
static void api_stop(struct api *a)
{
    uint64_t one = 1;
    if (write(a->quit_fd, &one, sizeof one) < 0) { /* an eventfd */ }
    pthread_join(a->thread, NULL);
    close(a->quit_fd);
}

/* ---- the config file ---- */

static int config_section(void *opaque, const char *key, size_t index, const char *text, size_t len, char *why,
                          size_t wlen)
{
    struct fcvm *s = opaque;
    struct reply rep = { 0, NULL };
    (void)index;
    enum fc_ep ep = !strcmp(key, "boot-source") ? FC_EP_BOOT_SOURCE : !strcmp(key, "machine-config") ?
                    FC_EP_MACHINE_CONFIG : !strcmp(key, "drives") ? FC_EP_DRIVES : !strcmp(key,
                    "network-interfaces") ? FC_EP_NET : !strcmp(key, "vsock") ? FC_EP_VSOCK : !strcmp(key,
                    "logger") ? FC_EP_LOGGER : !strcmp(key, "metrics") ? FC_EP_METRICS : !strcmp(key,
                    "mmds-config") ? FC_EP_MMDS_CONFIG : !strcmp(key, "entropy") ? FC_EP_ENTROPY
                    : !strcmp(key, "balloon") ? FC_EP_BALLOON : FC_EP_CPU_CONFIG;
    unsigned st = dispatch(s, ep, FC_PUT, NULL, text, len, &rep);
    if (st >= 400) {
        json_t *j = rep.body ? json_loads(rep.body, 0, NULL) : NULL;
        snprintf(why, wlen, "config file: `%s`: %s", key,
                 j && json_string_value(json_object_get(j, "fault_message"))
                     ? json_string_value(json_object_get(j, "fault_message")) : "refused");
        json_decref(j);
    }
    free(rep.body);
    return st >= 400 ? -EINVAL : 0;
}

/* ---- the command ---- */

static const char usage_vmm[] =
    "usage: moat vmm [--api-sock PATH] [--id ID] [--config-file FILE] [--no-api]\n"
    "                [--log-path P] [--level L] [--show-level] [--show-log-origin]\n"
    "                [--metrics-path P] [--boot-timer] [--no-seccomp | --seccomp-filter F]\n"
    "                [--seccomp-audit] [--start-time-us N] [--start-time-cpu-us N]\n"
    "                [--parent-cpu-time-us N] [--metadata FILE]\n"
    "                [--http-api-max-payload-size N] [--mmds-size-limit N]\n"
    "                [--version] [--snapshot-version] [--describe-snapshot FILE]\n"
    "\n"
    "Firecracker's command line and HTTP API (docs/control-api.md); the same\n"
    "when moat is run through a link named firecracker. Seccomp filters every\n"
    "thread by default (docs/security.md): --no-seccomp turns them off\n"
    "(debugging), --seccomp-audit logs a forbidden call instead of killing;\n"
    "--seccomp-filter F is accepted, F is not loaded (moat's own lists apply).\n"
    "A forbidden system call ends moat with 159 and one line naming it.\n";

static __attribute__((noreturn)) void die_args(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "moat vmm: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    exit(FC_EXIT_ARGS);
}

static void print_version(void)
{
    /* Kata Containers reads the second word of the first line (after a
     * leading 'v') as a semantic version. */
    printf("moat v%s\n\nmoat %s, speaking the Firecracker API of v%s\n", FC_API_VERSION, moat_version(),
           FC_API_VERSION);
}

enum {
    O_API_SOCK = 400, O_ID, O_CONFIG, O_NO_API, O_BOOT_TIMER, O_LOG_PATH, O_LEVEL, O_SHOW_LEVEL, O_SHOW_ORIGIN,
    O_METRICS_PATH, O_NO_SECCOMP, O_SECCOMP, O_SECCOMP_AUDIT, O_VERSION, O_START_US, O_START_CPU_US,
    O_PARENT_CPU_US, O_HELP, O_METADATA, O_MAX_PAYLOAD, O_MMDS_LIMIT, O_SNAP_VERSION, O_DESCRIBE,
};

/* A --describe-snapshot FILE: the data format version of a state file,
 * printed as Firecracker prints its own ("v3.0.0": moat's format version
 * as the major). 0, or an exit code with a line on stderr. */
static int describe_snapshot(const char *path)
{
    unsigned char h[12];
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(h, 1, sizeof h, f) : 0;
    int e = errno;
    if (f)
        fclose(f);
    if (!f) {
        fprintf(stderr, "moat vmm: --describe-snapshot %s: %s\n", path, strerror(e));
        return FC_EXIT_GENERIC;
    }
    if (n != sizeof h || memcmp(h, "MOATSNAP", 8)) {
        fprintf(stderr, "moat vmm: --describe-snapshot %s: not a moat snapshot state file\n", path);
        return FC_EXIT_GENERIC;
    }
    uint32_t v = (uint32_t)h[8] | (uint32_t)h[9] << 8 | (uint32_t)h[10] << 16 | (uint32_t)h[11] << 24;
    printf("v%u.0.0\n", v);
    return FC_EXIT_OK;
}

/* --metadata FILE: the MMDS data store's first contents (as PUT /mmds). */
static void load_metadata(struct fcvm *s, const char *path)
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
        exit(FC_EXIT_GENERIC);
    }
}

int cmd_vmm(int argc, char **argv)
{
    static const struct option opts[] = {
        { "api-sock", required_argument, NULL, O_API_SOCK }, { "id", required_argument, NULL, O_ID },
        { "config-file", required_argument, NULL, O_CONFIG }, { "no-api", no_argument, NULL, O_NO_API },
        { "boot-timer", no_argument, NULL, O_BOOT_TIMER }, { "log-path", required_argument, NULL, O_LOG_PATH },
        { "level", required_argument, NULL, O_LEVEL }, { "show-level", no_argument, NULL, O_SHOW_LEVEL },
        { "show-log-origin", no_argument, NULL, O_SHOW_ORIGIN },
        { "metrics-path", required_argument, NULL, O_METRICS_PATH },
        { "no-seccomp", no_argument, NULL, O_NO_SECCOMP }, { "seccomp-filter", required_argument, NULL, O_SECCOMP },
        { "seccomp-audit", no_argument, NULL, O_SECCOMP_AUDIT },
        { "version", no_argument, NULL, O_VERSION }, { "start-time-us", required_argument, NULL, O_START_US },
        { "start-time-cpu-us", required_argument, NULL, O_START_CPU_US },
        { "parent-cpu-time-us", required_argument, NULL, O_PARENT_CPU_US }, { "help", no_argument, NULL, O_HELP },
        { "metadata", required_argument, NULL, O_METADATA },
        { "http-api-max-payload-size", required_argument, NULL, O_MAX_PAYLOAD },
        { "mmds-size-limit", required_argument, NULL, O_MMDS_LIMIT },
        { "snapshot-version", no_argument, NULL, O_SNAP_VERSION },
        { "describe-snapshot", required_argument, NULL, O_DESCRIBE },
        { 0 },
    };
    const char *sock = "/run/firecracker.socket", *config = NULL, *log_path = NULL, *level = NULL;
    const char *metrics_path = NULL, *id = "anonymous-instance", *seccomp_filter = NULL, *metadata = NULL;
    const char *describe = NULL;
    bool snap_version = false;
    size_t body_limit = FC_BODY_MAX, mmds_limit = 0;
    uint32_t sc_flags = MOAT_F_SECCOMP;
    bool no_seccomp = false;
    bool no_api = false, show_level = false, show_origin = false, boot_timer = false;
    int64_t start_us = -1, start_cpu_us = -1, parent_cpu_us = 0;
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long_only(argc, argv, "+:", opts, NULL)) != -1) {
        switch (c) {
        case O_API_SOCK: sock = optarg; break;
        case O_ID: id = optarg; break;
        case O_CONFIG: config = optarg; break;
        case O_NO_API: no_api = true; break;
        case O_BOOT_TIMER: boot_timer = true; break;
        case O_LOG_PATH: log_path = optarg; break;
        case O_LEVEL: level = optarg; break;
        case O_SHOW_LEVEL: show_level = true; break;
        case O_SHOW_ORIGIN: show_origin = true; break;
        case O_METRICS_PATH: metrics_path = optarg; break;
        case O_NO_SECCOMP: sc_flags = 0; no_seccomp = true; break;
        case O_SECCOMP_AUDIT: sc_flags = MOAT_F_SECCOMP | MOAT_F_SECCOMP_AUDIT; no_seccomp = false; break;
        case O_SECCOMP:
            if (access(optarg, R_OK) < 0)
                die_args("--seccomp-filter %s: %s", optarg, strerror(errno));
            seccomp_filter = optarg;
            break;
        case O_START_US: case O_START_CPU_US: case O_PARENT_CPU_US: {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(optarg, &end, 10);
            if (errno || *end || !*optarg || *optarg == '-' || v > INT64_MAX / 2)
                die_args("invalid %s '%s' (microseconds)", argv[optind - 1], optarg);
            *(c == O_START_US ? &start_us : c == O_START_CPU_US ? &start_cpu_us : &parent_cpu_us) = (int64_t)v;
            break;
        }
        case O_MAX_PAYLOAD: case O_MMDS_LIMIT: {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(optarg, &end, 10);
            if (errno || *end || !*optarg || *optarg == '-' || v == 0 || v > FC_BODY_CAP)
                die_args("invalid --%s '%s' (bytes, 1 to %u)",
                         c == O_MAX_PAYLOAD ? "http-api-max-payload-size" : "mmds-size-limit", optarg, FC_BODY_CAP);
            *(c == O_MAX_PAYLOAD ? &body_limit : &mmds_limit) = (size_t)v;
            break;
        }
        case O_METADATA: metadata = optarg; break;
        case O_SNAP_VERSION: snap_version = true; break;
        case O_DESCRIBE: describe = optarg; break;
        case O_VERSION: print_version(); return FC_EXIT_OK;
        case O_HELP: fputs(usage_vmm, stdout); return FC_EXIT_OK;
        case ':': die_args("option %s needs a value", argv[optind - 1]);
        default: die_args("unknown option %s (see moat vmm --help)", argv[optind - 1]);
        }
    }
    if (optind < argc)
        die_args("unexpected argument '%s'", argv[optind]);
    /* As Firecracker: these print and exit before anything else. */
    if (snap_version) {
        printf("v%u.0.0\n", SNAP_VERSION);
        return FC_EXIT_OK;
    }
    if (describe)
        return describe_snapshot(describe);
    if (no_api && !config)
        die_args("--no-api needs --config-file");
    if (no_seccomp && seccomp_filter)
        die_args("--no-seccomp and --seccomp-filter exclude each other");
    size_t idl = strlen(id);
    if (idl == 0 || idl > 64 || strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") != idl)
        die_args("invalid --id '%s': 1 to 64 characters, alphanumeric or '-'", id);
    (void)boot_timer;

    static struct fcvm s;
    pthread_mutex_init(&s.lock, NULL);
    pthread_mutex_init(&s.hlock, NULL);
    pthread_cond_init(&s.hcond, NULL);
    s.sc_flags = sc_flags;
    enum sc_mode sc_mode = !sc_flags ? SC_OFF : (sc_flags & MOAT_F_SECCOMP_AUDIT) ? SC_AUDIT : SC_KILL;
    snprintf(s.id, sizeof s.id, "%s", id);
    snprintf(flog.id, sizeof flog.id, "%s", id);
    s.mc.vcpu_count = 1;
    s.mc.mem_size_mib = 128;
    s.body_limit = body_limit;
    /* Firecracker: the MMDS limit defaults to the API's payload limit. */
    s.mmds_limit = mmds_limit ? mmds_limit : body_limit;
    if (metadata)
        load_metadata(&s, metadata);
    s.metrics_fd = -1;
    for (int i = 0; i < 5; i++)
        s.lat_us[i] = -1;
    s.startup_us = s.startup_cpu_us = -1;
    s.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    moat_timings_set_origin(cli_start_ns);
    /* The C library reads /etc/localtime at its first time conversion
     * (libmicrohttpd's Date header: gmtime_r): here, not on the API
     * thread, whose list opens no file. */
    tzset();
    /* libmoat's messages in the same line format from the start. */
    moat_set_log(MOAT_LOG_WARN, lib_log, NULL);

    /* The logger and metrics from the command line: as PUT /logger and
     * PUT /metrics would set them. */
    if (log_path || level || show_level || show_origin) {
        char body[FC_STR_MAX + 200];
        json_t *j = json_object();
        if (log_path)
            json_object_set_new(j, "log_path", json_string(log_path));
        if (level)
            json_object_set_new(j, "level", json_string(level));
        json_object_set_new(j, "show_level", json_boolean(show_level));
        json_object_set_new(j, "show_log_origin", json_boolean(show_origin));
        char *t = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        snprintf(body, sizeof body, "%s", t ? t : "{}");
        free(t);
        struct fc_logger lg;
        char why[300];
        struct reply rep = { 0, NULL };
        if (fc_decode_logger(body, strlen(body), &lg, why, sizeof why) < 0)
            die_args("--level/--log-path: %s", why);
        if (put_logger(&s, &lg, &rep) >= 400) {
            fprintf(stderr, "moat vmm: %s\n", rep.body ? rep.body : "logger");
            exit(FC_EXIT_GENERIC);
        }
    }
    if (seccomp_filter)
        LOG(FC_LVL_WARN, "--seccomp-filter %s: not loaded; moat filters each thread with its own lists "
            "(docs/security.md)", seccomp_filter);
    if (metrics_path) {
        static struct fc_metrics mt;   /* zeroed: no emit_id, no properties */
        struct reply rep = { 0, NULL };
        snprintf(mt.metrics_path, sizeof mt.metrics_path, "%s", metrics_path);
        if (put_metrics(&s, &mt, &rep) >= 400) {
            fprintf(stderr, "moat vmm: %s\n", rep.body ? rep.body : "metrics");
            exit(FC_EXIT_GENERIC);
        }
    }

    /* SIGTERM, SIGINT, SIGHUP stop the VM cleanly; blocked before any
     * thread starts so that only the signalfd sees them. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    int sfd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);

    struct ctl_server srv = { .fd = -1 };
    struct MHD_Daemon *d = NULL;
    static struct api api;
    if (!no_api) {
        char why[256];
        if (mhd_load(why, sizeof why) < 0) {
            fprintf(stderr, "moat vmm: the API server: %s\n", why);
            exit(FC_EXIT_GENERIC);
        }
        if (ctl_server_open(&srv, sock) < 0)
            exit(FC_EXIT_GENERIC);
        /* No internal thread: ours polls it (api_main), under its filter. */
        d = MHD_start_daemon(MHD_USE_EPOLL, 0, NULL, NULL, on_request, &s,
                             MHD_OPTION_LISTEN_SOCKET, srv.fd, MHD_OPTION_NOTIFY_COMPLETED, on_completed, &s,
                             MHD_OPTION_CONNECTION_LIMIT, (unsigned)MAX_CONNECTIONS,
                             MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(16 * 1024), MHD_OPTION_END);
        if (!d) {
            fprintf(stderr, "moat vmm: cannot start the API server on %s\n", sock);
            ctl_server_close(&srv);
            exit(FC_EXIT_GENERIC);
        }
        int r = api_start(&api, d, sc_mode);
        if (r < 0) {
            fprintf(stderr, "moat vmm: the API thread: %s\n", strerror(-r));
            MHD_stop_daemon(d);
            srv.fd = -1;        /* the daemon closed it */
            unlink(srv.path);
            exit(FC_EXIT_GENERIC);
        }
    }
    /* Firecracker's api_server figures, from the jailer's start times:
     * monotonic and process CPU time until the API (or the config file's
     * turn) is ready. */
    {
        int64_t mono_us = clock_mono_us();
        struct timespec cpu;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
        if (start_us >= 0)
            s.startup_us = mono_us - start_us;
        if (start_cpu_us >= 0)
            s.startup_cpu_us = (int64_t)cpu.tv_sec * 1000000 + cpu.tv_nsec / 1000 - start_cpu_us + parent_cpu_us;
    }
    if (config) {
        FILE *f = fopen(config, "r");
        static char text[1 << 20];
        size_t n = f ? fread(text, 1, sizeof text, f) : 0;
        char why[700];
        int bad = !f || ferror(f) || n == sizeof text;
        if (f)
            fclose(f);
        pthread_mutex_lock(&s.lock);
        int r = bad ? -EINVAL : fc_config_sections(text, n, config_section, &s, why, sizeof why);
        struct reply rep = { 0, NULL };
        if (r == 0 && instance_start(&s, &rep) >= 400) {
            json_t *j = rep.body ? json_loads(rep.body, 0, NULL) : NULL;
            snprintf(why, sizeof why, "%s", j ? json_string_value(json_object_get(j, "fault_message")) : "?");
            json_decref(j);
            r = -EINVAL;
        }
        free(rep.body);
        pthread_mutex_unlock(&s.lock);
        if (r < 0) {
            fprintf(stderr, "moat vmm: %s\n", bad ? "cannot read the config file (missing, unreadable or over 1 MiB)"
                                                  : why);
            LOG(FC_LVL_ERROR, "Configuration for VMM from one single json failed: %s", bad ? config : why);
            close_requests(&s);
            if (d) {
                api_stop(&api);
                srv.fd = -1;    /* the daemon closed it */
                unlink(srv.path);
            }
            exit(FC_EXIT_BAD_CONFIG);
        }
    }

    /* The main loop: signals, requests, the VM's end, the metrics timer. */
    int code = FC_EXIT_OK;
    int64_t next_flush = clock_mono_ms() + METRICS_PERIOD_MS;
    for (;;) {
        int fr = main_filter(&s);
        if (fr < 0) {
            LOG(FC_LVL_ERROR, "seccomp: the main thread's filter: %s", strerror(-fr));
            fprintf(stderr, "moat vmm: seccomp: %s\n", strerror(-fr));
            code = FC_EXIT_GENERIC;
            break;
        }
        pthread_mutex_lock(&s.lock);
        struct moat_vm *vm = s.vm;
        pthread_mutex_unlock(&s.lock);
        struct pollfd p[3] = { { sfd, POLLIN, 0 }, { s.wake_fd, POLLIN, 0 },
                               { vm ? moat_exit_fd(vm) : -1, POLLIN, 0 } };
        int64_t wait = next_flush - clock_mono_ms();
        int pr = poll(p, 3, wait < 0 ? 0 : (int)wait);
        if (pr < 0 && errno != EINTR)
            break;
        if (clock_mono_ms() >= next_flush) {
            pthread_mutex_lock(&s.lock);
            flush_metrics(&s);
            pthread_mutex_unlock(&s.lock);
            next_flush = clock_mono_ms() + METRICS_PERIOD_MS;
        }
        if (p[1].revents & POLLIN) {
            uint64_t v;
            if (read(s.wake_fd, &v, sizeof v) < 0) { /* nothing */ }
            serve_pending(&s);
        }
        if (p[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof si) == (ssize_t)sizeof si)
                LOG(FC_LVL_INFO, "Received signal %u: shutting down", si.ssi_signo);
            break;
        }
        if (vm && (p[2].revents & POLLIN)) {
            struct moat_exit ex;
            if (moat_wait(vm, 0, &ex) == 0) {
                LOG(ex.reason == MOAT_EXIT_RESET ? FC_LVL_INFO : FC_LVL_ERROR, "Vmm is stopping: %s",
                    ex.detail[0] ? ex.detail : "the guest stopped");
                code = ex.reason == MOAT_EXIT_RESET || ex.reason == MOAT_EXIT_STOPPED ? FC_EXIT_OK : FC_EXIT_GENERIC;
                break;
            }
        }
    }
    /* Answers already given (the InstanceStart of a guest that stopped
     * at once) still go out: up to 1 s for them; a request that comes
     * now is refused. */
    close_requests(&s);
    for (int i = 0; d && i < 100 && __atomic_load_n(&s.inflight, __ATOMIC_SEQ_CST) > 0; i++)
        usleep(10000);
    if (d) {
        api_stop(&api);
        srv.fd = -1;            /* the daemon closed it */
    }
    pthread_mutex_lock(&s.lock);
    if (s.vm) {
        moat_stop(s.vm);
        moat_destroy(s.vm);
        s.vm = NULL;
    }
    if (s.has_metrics)
        flush_metrics(&s);
    pthread_mutex_unlock(&s.lock);
    if (d)
        unlink(srv.path);
    return code;
}
