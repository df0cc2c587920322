/* The Firecracker-compatible API's requests (docs/control-api.md): the
 * route (method + path -> endpoint and id) and each body's JSON decoded
 * into a struct, strictly: an unknown field, a wrong type, a value out of
 * range or a missing required field is refused with a message naming the
 * field. Pure functions (no I/O, no VM): unit tests in
 * tests/unit/test_fc_req.c, fuzz target tests/fuzz/fuzz_fc_req.c. The
 * server that calls them is vmm/api/firecracker/. */
#ifndef MOAT_FC_REQ_H
#define MOAT_FC_REQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "devices/virtio/ratelimit.h"

#define FC_BODY_MAX   51200     /* Firecracker's default --http-api-max-payload-size */
#define FC_BODY_CAP   (16u << 20) /* moat's ceiling for --http-api-max-payload-size and --mmds-size-limit */
#define FC_ID_MAX     64        /* a resource id in a path: [A-Za-z0-9_], 1 .. 64 */
#define FC_STR_MAX    4096      /* paths and other strings, NUL included */
#define FC_MAX_IFACES 16
#define FC_API_VERSION "1.7.0"  /* the Firecracker API version moat answers as */

enum fc_ep {
    FC_EP_ROOT = 1, FC_EP_VERSION, FC_EP_MACHINE_CONFIG, FC_EP_BOOT_SOURCE, FC_EP_DRIVES,
    FC_EP_NET, FC_EP_VSOCK, FC_EP_ACTIONS, FC_EP_VM, FC_EP_SNAP_CREATE, FC_EP_SNAP_LOAD,
    FC_EP_MMDS, FC_EP_MMDS_CONFIG, FC_EP_LOGGER, FC_EP_METRICS, FC_EP_VM_CONFIG, FC_EP_ENTROPY,
    FC_EP_BALLOON, FC_EP_CPU_CONFIG, FC_EP_HOTPLUG,
};
enum fc_method { FC_GET = 1, FC_PUT, FC_PATCH };

/* method and url (the path, no query) -> *ep, *meth and, for
 * /drives/{id} and /network-interfaces/{id}, the id. 0, or -EINVAL with
 * Firecracker's message ("Invalid request method and/or path: M P.") or
 * the id's fault in why. */
int fc_route(const char *method, const char *url, enum fc_ep *ep, enum fc_method *meth, char *id, size_t idlen,
             char *why, size_t wlen);

struct fc_limiter {
    bool set;                   /* the field was given (not absent, not null) */
    struct ratelimit_cfg cfg;   /* unlimited buckets are all zero */
};

struct fc_machine_cfg {
    bool has_vcpu, has_mem, has_smt, has_dirty;
    uint32_t vcpu_count, mem_size_mib;
    bool smt, track_dirty_pages;
};

struct fc_boot_source {
    char kernel_image_path[FC_STR_MAX];
    char initrd_path[FC_STR_MAX];     /* "" when absent */
    char boot_args[FC_STR_MAX];
    bool has_initrd, has_boot_args;
};

struct fc_drive {
    char drive_id[FC_ID_MAX + 1];
    char path_on_host[FC_STR_MAX];
    char partuuid[FC_ID_MAX + 1];
    bool has_path, has_partuuid;
    bool is_root_device, is_read_only;
    bool cache_writeback;       /* "Writeback" (default "Unsafe") */
    bool io_async;              /* "Async" (default "Sync") */
    struct fc_limiter rate_limiter;
};

struct fc_net {
    char iface_id[FC_ID_MAX + 1];
    char host_dev_name[FC_STR_MAX];
    char guest_mac[18];         /* "" when absent; else aa:bb:cc:dd:ee:ff */
    uint32_t mtu;               /* 0 when absent; else 68 .. 65535 (VIRTIO_NET_F_MTU) */
    struct fc_limiter rx, tx;
};

struct fc_vsock {
    uint32_t guest_cid;
    char uds_path[FC_STR_MAX];
};

enum fc_action { FC_ACT_START = 1, FC_ACT_CTRL_ALT_DEL, FC_ACT_FLUSH_METRICS };

struct fc_snap_create {
    bool diff;
    char snapshot_path[FC_STR_MAX];
    char mem_file_path[FC_STR_MAX];
};

struct fc_net_override {
    char iface_id[FC_ID_MAX + 1];
    char host_dev_name[FC_STR_MAX];
};

struct fc_snap_load {
    char snapshot_path[FC_STR_MAX];
    char mem_path[FC_STR_MAX];  /* mem_file_path, or mem_backend's backend_path */
    bool uffd;                  /* mem_backend.backend_type "Uffd" */
    bool enable_diff_snapshots, resume_vm;
    size_t noverrides;
    struct fc_net_override overrides[FC_MAX_IFACES];
    char vsock_uds[108];        /* vsock_override.uds_path; "" when absent */
};

struct fc_mmds_config {
    bool v1;                    /* "V1" (the default, as Firecracker's) or "V2" */
    size_t nifaces;
    char ifaces[FC_MAX_IFACES][FC_ID_MAX + 1];
};

enum fc_level { FC_LVL_OFF = 0, FC_LVL_ERROR, FC_LVL_WARN, FC_LVL_INFO, FC_LVL_DEBUG, FC_LVL_TRACE };

struct fc_logger {
    char log_path[FC_STR_MAX];  /* "" when absent */
    bool has_level, has_show_level, has_show_origin;
    enum fc_level level;
    bool show_level, show_log_origin;
};

#define FC_METRIC_PROPS 32      /* properties: at most this many */
struct fc_metrics {
    char metrics_path[FC_STR_MAX];
    bool emit_id;               /* a top-level "id" (the instance id) on each line */
    /* properties: string values, emitted as a top-level "properties"
     * object on each line; a compact JSON object text, "" when absent */
    char properties[FC_STR_MAX];
};

struct fc_entropy {
    struct fc_limiter rate_limiter;
};

/* Any one decoded body (a server decodes one request at a time). */
union fc_body {
    struct fc_machine_cfg mc;
    struct fc_boot_source bs;
    struct fc_drive d;
    struct fc_net net;
    struct fc_vsock v;
    struct fc_snap_create sc;
    struct fc_snap_load sl;
    struct fc_mmds_config mm;
    struct fc_logger lg;
    struct fc_metrics mt;
    struct fc_entropy en;
};

/* One body each: 0 and *out filled, or -EINVAL with why ("... `field` ...").
 * len bytes of text (not NUL-terminated). For drives and interfaces, id is
 * the path's id, which the body's must equal; patch selects the PATCH
 * shape (fewer fields; only the id required). For /machine-config, patch
 * makes vcpu_count and mem_size_mib optional, and an empty object is
 * Firecracker's "Empty PATCH request.". */
int fc_decode_machine_cfg(const char *body, size_t len, bool patch, struct fc_machine_cfg *out, char *why, size_t wlen);
int fc_decode_boot_source(const char *body, size_t len, struct fc_boot_source *out, char *why, size_t wlen);
int fc_decode_drive(const char *body, size_t len, const char *id, bool patch, struct fc_drive *out, char *why,
                    size_t wlen);
int fc_decode_net(const char *body, size_t len, const char *id, bool patch, struct fc_net *out, char *why,
                  size_t wlen);
int fc_decode_vsock(const char *body, size_t len, struct fc_vsock *out, char *why, size_t wlen);
int fc_decode_action(const char *body, size_t len, enum fc_action *out, char *why, size_t wlen);
int fc_decode_vm_state(const char *body, size_t len, bool *paused, char *why, size_t wlen);
int fc_decode_snap_create(const char *body, size_t len, struct fc_snap_create *out, char *why, size_t wlen);
int fc_decode_snap_load(const char *body, size_t len, struct fc_snap_load *out, char *why, size_t wlen);
int fc_decode_mmds_config(const char *body, size_t len, struct fc_mmds_config *out, char *why, size_t wlen);
int fc_decode_logger(const char *body, size_t len, struct fc_logger *out, char *why, size_t wlen);
int fc_decode_metrics(const char *body, size_t len, struct fc_metrics *out, char *why, size_t wlen);
int fc_decode_entropy(const char *body, size_t len, struct fc_entropy *out, char *why, size_t wlen);

/* PUT /mmds and PATCH /mmds: the body must be a JSON object. *doc (a
 * malloc'd compact JSON text, or NULL for none yet) is replaced (put) or
 * merged with the body as RFC 7396 says (patch: a null member removes the
 * key). The document stays at most limit bytes (--mmds-size-limit). 0,
 * -EINVAL (bad JSON, not an object: why), -EFBIG (the document would
 * exceed limit: Firecracker's message in why; its API answers 413) or
 * -ENOMEM. */
int fc_mmds_update(char **doc, const char *body, size_t len, bool patch, size_t limit, char *why, size_t wlen);

/* The config file (--config-file; the shape of GET /vm/config): each
 * section is handed to the matching decoder through these callbacks'
 * caller. fc_config_sections splits text into its sections' texts: for
 * each known key, cb(opaque, key, index, text, len) with index the array
 * position for "drives" and "network-interfaces" (else 0); an unknown
 * top-level key is ignored, as Firecracker ignores it. The first nonzero
 * return of cb stops and is returned (why filled by cb). */
typedef int (*fc_section_cb)(void *opaque, const char *key, size_t index, const char *text, size_t len, char *why,
                             size_t wlen);
int fc_config_sections(const char *text, size_t len, fc_section_cb cb, void *opaque, char *why, size_t wlen);

/* One log line in Firecracker's format into buf (len >= 2 bytes):
 * "<YYYY-MM-DDTHH:MM:SS.nnnnnnnnn> [<id>:<thread>(:<LEVEL>)(:<file>:<line>)] <msg>\n"
 * with the time in UTC, the level with show_level, file:line with
 * show_origin; a newline or other control byte in msg becomes a space;
 * a line too long is cut, still ending in "\n". Returns its length
 * (NUL not counted). */
struct timespec;
size_t fc_log_line(char *buf, size_t len, const struct timespec *utc, const char *id, const char *thread,
                   enum fc_level lvl, bool show_level, const char *file, int line, bool show_origin,
                   const char *msg);

/* A net device's counters, from moat_device_get(.., "net", id, "stats")'s
 * text ("tx frames N bytes N ... throttled N" and "rx frames N bytes N
 * ... throttled N" lines, docs/devices.md): 0, or -EINVAL when a line or
 * a figure is missing. */
struct fc_net_counts {
    uint64_t tx_frames, tx_bytes, tx_throttled, rx_frames, rx_bytes, rx_throttled;
};
int fc_net_stats_parse(const char *text, struct fc_net_counts *out);

/* A drive's counters, from moat_device_get(.., "blk", id, "stats")'s text
 * (one "requests ok N failed N bad N reads N read-bytes N writes N
 * write-bytes N flushes N ..." line, docs/devices.md): 0, or -EINVAL when
 * the line or a figure is missing. */
struct fc_blk_counts {
    uint64_t failed, bad, reads, read_bytes, writes, write_bytes, flushes;
};
int fc_blk_stats_parse(const char *text, struct fc_blk_counts *out);

/* A limiter as moat's device options take it: "SIZE/REFILL_MS[/BURST]",
 * or "off" for an unlimited bucket. */
void fc_bucket_opt(const struct ratelimit_bucket_cfg *b, char *buf, size_t len);

/* Whether s may go into a device option value (devopt: no ',', '"', '=',
 * control bytes; not empty). */
bool fc_opt_safe(const char *s);

#endif
