/* The Firecracker-compatible API's requests, decoded (vmm/api/firecracker/fc_req.h). */
#include "vmm/api/firecracker/fc_req.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "devices/virtio/ratelimit_json.h"

/* ---- routes ---- */

static const struct {
    const char *path;
    enum fc_ep ep;
    unsigned methods;           /* 1 << enum fc_method */
    bool with_id;
} routes[] = {
    { "/", FC_EP_ROOT, 1u << FC_GET, false },
    { "/version", FC_EP_VERSION, 1u << FC_GET, false },
    { "/machine-config", FC_EP_MACHINE_CONFIG, 1u << FC_GET | 1u << FC_PUT | 1u << FC_PATCH, false },
    { "/boot-source", FC_EP_BOOT_SOURCE, 1u << FC_PUT, false },
    { "/drives", FC_EP_DRIVES, 1u << FC_PUT | 1u << FC_PATCH, true },
    { "/network-interfaces", FC_EP_NET, 1u << FC_PUT | 1u << FC_PATCH, true },
    { "/vsock", FC_EP_VSOCK, 1u << FC_PUT, false },
    { "/actions", FC_EP_ACTIONS, 1u << FC_PUT, false },
    { "/vm", FC_EP_VM, 1u << FC_PATCH, false },
    { "/snapshot/create", FC_EP_SNAP_CREATE, 1u << FC_PUT, false },
    { "/snapshot/load", FC_EP_SNAP_LOAD, 1u << FC_PUT, false },
    { "/mmds", FC_EP_MMDS, 1u << FC_GET | 1u << FC_PUT | 1u << FC_PATCH, false },
    { "/mmds/config", FC_EP_MMDS_CONFIG, 1u << FC_PUT, false },
    { "/logger", FC_EP_LOGGER, 1u << FC_PUT, false },
    { "/metrics", FC_EP_METRICS, 1u << FC_PUT, false },
    { "/vm/config", FC_EP_VM_CONFIG, 1u << FC_GET, false },
    { "/entropy", FC_EP_ENTROPY, 1u << FC_PUT, false },
    { "/balloon", FC_EP_BALLOON, 1u << FC_GET | 1u << FC_PUT | 1u << FC_PATCH, false },
    { "/balloon/statistics", FC_EP_BALLOON, 1u << FC_GET | 1u << FC_PATCH, false },
    { "/cpu-config", FC_EP_CPU_CONFIG, 1u << FC_PUT, false },
    { "/hotplug/memory", FC_EP_HOTPLUG, 1u << FC_GET | 1u << FC_PUT | 1u << FC_PATCH, false },
};

int fc_route(const char *method, const char *url, enum fc_ep *ep, enum fc_method *meth, char *id, size_t idlen,
             char *why, size_t wlen)
{
    enum fc_method m = !strcmp(method, "GET") ? FC_GET : !strcmp(method, "PUT") ? FC_PUT
                       : !strcmp(method, "PATCH") ? FC_PATCH : 0;
    if (idlen)
        id[0] = 0;
    size_t ulen = strlen(url);
    for (size_t i = 0; m && i < sizeof routes / sizeof routes[0]; i++) {
        size_t pl = strlen(routes[i].path);
        if (strncmp(url, routes[i].path, pl) != 0)
            continue;
        const char *rest = url + pl;
        size_t rlen = ulen - pl;
        if (ulen < pl)
            continue;
        if (routes[i].with_id) {
            if (rlen < 2 || rest[0] != '/')
                continue;
            rest++;
            rlen--;
            if (memchr(rest, '/', rlen))
                continue;
            if (!(routes[i].methods & (1u << m)))
                break;
            if (rlen > FC_ID_MAX || rlen + 1 > idlen) {
                snprintf(why, wlen, "Invalid ID: longer than %d characters.", FC_ID_MAX);
                return -EINVAL;
            }
            for (size_t k = 0; k < rlen; k++)
                if (!isalnum((unsigned char)rest[k]) && rest[k] != '_') {
                    snprintf(why, wlen, "Invalid ID: only alphanumeric characters and underscores are allowed.");
                    return -EINVAL;
                }
            memcpy(id, rest, rlen);
            id[rlen] = 0;
        } else if (rlen != 0) {
            continue;
        }
        if (!(routes[i].methods & (1u << m)))
            break;
        *ep = routes[i].ep;
        *meth = m;
        return 0;
    }
    snprintf(why, wlen, "Invalid request method and/or path: %.16s %.200s.", method, url);
    return -EINVAL;
}

/* ---- strict field checks ---- */

enum ftype { F_STR, F_UINT, F_BOOL, F_OBJ, F_ARR, F_ANY };
struct field {
    const char *name;
    enum ftype type;
    bool required;
};

static const char *const type_names[] = { "a string", "an unsigned integer", "a boolean", "an object",
                                          "an array", "a value" };

/* Every member of o is a field of spec with its type (null counts as
 * absent), every required field is there. ctx prefixes the names
 * ("mem_backend."). */
static int check_fields(const json_t *o, const struct field *spec, const char *ctx, char *why, size_t wlen)
{
    if (!json_is_object(o)) {
        snprintf(why, wlen, "%s%sexpected a JSON object", ctx, *ctx ? ": " : "");
        return -EINVAL;
    }
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)o, key, v) {
        const struct field *f = spec;
        while (f->name && strcmp(f->name, key))
            f++;
        if (!f->name) {
            snprintf(why, wlen, "unknown field `%s%.64s`", ctx, key);
            return -EINVAL;
        }
        if (json_is_null(v))
            continue;
        bool ok = f->type == F_STR    ? json_is_string(v)
                  : f->type == F_UINT ? json_is_integer(v) && json_integer_value(v) >= 0
                  : f->type == F_BOOL ? json_is_boolean(v)
                  : f->type == F_OBJ  ? json_is_object(v)
                  : f->type == F_ARR  ? json_is_array(v)
                                      : true;
        if (!ok) {
            snprintf(why, wlen, "field `%s%s`: expected %s", ctx, key, type_names[f->type]);
            return -EINVAL;
        }
    }
    for (const struct field *f = spec; f->name; f++) {
        json_t *m = json_object_get(o, f->name);
        if (f->required && (!m || json_is_null(m))) {
            snprintf(why, wlen, "missing required field `%s%s`", ctx, f->name);
            return -EINVAL;
        }
    }
    return 0;
}

static int parse_object(const char *body, size_t len, json_t **out, char *why, size_t wlen)
{
    json_error_t e;
    if (len > FC_BODY_CAP) {   /* the server refuses more than its limit before this */
        snprintf(why, wlen, "Request payload with size %zu is larger than the limit of %u allowed by server.", len,
                 FC_BODY_CAP);
        return -EINVAL;
    }
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &e);
    if (!j) {
        snprintf(why, wlen, "bad JSON body: %s (line %d, column %d)", e.text, e.line, e.column);
        return -EINVAL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        snprintf(why, wlen, "bad JSON body: expected a JSON object");
        return -EINVAL;
    }
    *out = j;
    return 0;
}

static const json_t *member(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    return v && !json_is_null(v) ? v : NULL;
}

/* A string member into buf (cap bytes with the NUL): no NUL inside, not
 * empty when required. 0 when absent (buf unchanged). */
static int get_str(const json_t *o, const char *ctx, const char *k, char *buf, size_t cap, bool nonempty, bool *has,
                   char *why, size_t wlen)
{
    const json_t *v = member(o, k);
    if (has)
        *has = v != NULL;
    if (!v)
        return 0;
    size_t n = json_string_length(v);
    const char *s = json_string_value(v);
    if (n >= cap || strlen(s) != n || (nonempty && n == 0)) {
        snprintf(why, wlen, "field `%s%s`: %s", ctx, k,
                 n >= cap ? "too long" : n == 0 ? "must not be empty" : "contains a NUL byte");
        return -EINVAL;
    }
    memcpy(buf, s, n + 1);
    return 0;
}

static bool get_bool(const json_t *o, const char *k, bool *has)
{
    const json_t *v = member(o, k);
    if (has)
        *has = v != NULL;
    return v && json_is_true(v);
}

static int get_uint(const json_t *o, const char *k, uint64_t min, uint64_t max, uint64_t *out, bool *has, char *why,
                    size_t wlen)
{
    const json_t *v = member(o, k);
    if (has)
        *has = v != NULL;
    if (!v)
        return 0;
    uint64_t x = (uint64_t)json_integer_value(v);
    if (x < min || x > max) {
        snprintf(why, wlen, "field `%s`: %" PRIu64 " is out of range (%" PRIu64 " .. %" PRIu64 ")", k, x, min, max);
        return -EINVAL;
    }
    *out = x;
    return 0;
}

/* One of names (NULL-terminated) -> its index in *idx. */
static int get_enum(const json_t *o, const char *ctx, const char *k, const char *const *names, int *idx, char *why,
                    size_t wlen)
{
    const json_t *v = member(o, k);
    if (!v)
        return 0;
    const char *s = json_string_value(v);
    for (int i = 0; names[i]; i++)
        if (!strcmp(s, names[i])) {
            *idx = i;
            return 0;
        }
    char list[160] = "";
    for (int i = 0; names[i]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", names[i]);
    snprintf(why, wlen, "field `%s%s`: unknown variant `%.40s`, expected one of %s", ctx, k, s, list);
    return -EINVAL;
}

static int get_limiter(const json_t *o, const char *k, struct fc_limiter *l, char *why, size_t wlen)
{
    const json_t *v = member(o, k);
    l->set = v != NULL;
    memset(&l->cfg, 0, sizeof l->cfg);
    if (!v)
        return 0;
    char w[200];
    if (ratelimit_cfg_from_value((const struct json_t *)v, &l->cfg, w, sizeof w) < 0) {
        snprintf(why, wlen, "field `%s`: %s", k, w);
        return -EINVAL;
    }
    return 0;
}

/* Body -> checked object, and the output (out, size bytes) zeroed: the
 * one start of every decoder. */
static int begin(const char *body, size_t len, const struct field *spec, json_t **j, void *out, size_t size,
                 char *why, size_t wlen)
{
    if (out)
        memset(out, 0, size);
    int r = parse_object(body, len, j, why, wlen);
    if (r == 0 && (r = check_fields(*j, spec, "", why, wlen)) < 0) {
        json_decref(*j);
        *j = NULL;
    }
    return r;
}

static int finish(json_t *j, int r)
{
    json_decref(j);
    return r < 0 ? -EINVAL : 0;
}

/* ---- bodies ---- */

int fc_decode_machine_cfg(const char *body, size_t len, bool patch, struct fc_machine_cfg *out, char *why, size_t wlen)
{
    const struct field spec[] = {
        { "vcpu_count", F_UINT, !patch }, { "mem_size_mib", F_UINT, !patch }, { "smt", F_BOOL, false },
        { "track_dirty_pages", F_BOOL, false }, { "cpu_template", F_STR, false }, { "huge_pages", F_STR, false },
        { NULL, 0, false },
    };
    json_t *j;
    int r = begin(body, len, spec, &j, out, sizeof *out, why, wlen);
    if (r < 0)
        return r;
    uint64_t v = 0, m = 0;
    r = get_uint(j, "vcpu_count", 1, 32, &v, &out->has_vcpu, why, wlen);
    if (r == 0)
        r = get_uint(j, "mem_size_mib", 1, 1u << 20, &m, &out->has_mem, why, wlen);
    out->vcpu_count = (uint32_t)v;
    out->mem_size_mib = (uint32_t)m;
    out->smt = get_bool(j, "smt", &out->has_smt);
    out->track_dirty_pages = get_bool(j, "track_dirty_pages", &out->has_dirty);
    int t = 0;
    static const char *const tmpl[] = { "None", NULL };
    if (r == 0)
        r = get_enum(j, "", "cpu_template", tmpl, &t, why, wlen);
    if (r == 0)
        r = get_enum(j, "", "huge_pages", tmpl, &t, why, wlen);
    /* Firecracker: a PATCH that changes nothing is refused as one without
     * a body. */
    if (r == 0 && patch && !out->has_vcpu && !out->has_mem && !out->has_smt && !out->has_dirty &&
        !member(j, "cpu_template") && !member(j, "huge_pages")) {
        snprintf(why, wlen, "Empty PATCH request.");
        r = -EINVAL;
    }
    if (r == 0 && out->smt) {
        snprintf(why, wlen, "field `smt`: simultaneous multithreading is not supported by moat (use false)");
        r = -EINVAL;
    }
    return finish(j, r);
}

int fc_decode_boot_source(const char *body, size_t len, struct fc_boot_source *out, char *why, size_t wlen)
{
    static const struct field spec[] = {
        { "kernel_image_path", F_STR, true }, { "initrd_path", F_STR, false }, { "boot_args", F_STR, false },
        { NULL, 0, false },
    };
    json_t *j;
    int r = begin(body, len, spec, &j, out, sizeof *out, why, wlen);
    if (r < 0)
        return r;
    r = get_str(j, "", "kernel_image_path", out->kernel_image_path, FC_STR_MAX, true, NULL, why, wlen);
    if (r == 0)
        r = get_str(j, "", "initrd_path", out->initrd_path, FC_STR_MAX, true, &out->has_initrd, why, wlen);
    if (r == 0)
        r = get_str(j, "", "boot_args", out->boot_args, FC_STR_MAX, false, &out->has_boot_args, why, wlen);
    return finish(j, r);
}

static int check_id(const json_t *j, const char *k, const char *path_id, char *buf, char *why, size_t wlen)
{
    int r = get_str(j, "", k, buf, FC_ID_MAX + 1, true, NULL, why, wlen);
    if (r == 0 && path_id && strcmp(buf, path_id)) {
        snprintf(why, wlen, "The id from the path does not match the id from the body!");
        r = -EINVAL;
    }
    return r;
}

int fc_decode_drive(const char *body, size_t len, const char *id, bool patch, struct fc_drive *out, char *why,
                    size_t wlen)
{
    static const struct field put_spec[] = {
        { "drive_id", F_STR, true }, { "path_on_host", F_STR, false }, { "is_root_device", F_BOOL, true },
        { "is_read_only", F_BOOL, false }, { "partuuid", F_STR, false }, { "cache_type", F_STR, false },
        { "rate_limiter", F_OBJ, false }, { "io_engine", F_STR, false }, { "socket", F_STR, false },
        { NULL, 0, false },
    };
    static const struct field patch_spec[] = {
        { "drive_id", F_STR, true }, { "path_on_host", F_STR, false }, { "rate_limiter", F_OBJ, false },
        { NULL, 0, false },
    };
    json_t *j;
    int r = begin(body, len, patch ? patch_spec : put_spec, &j, out, sizeof *out, why, wlen);
    if (r < 0)
        return r;
    r = check_id(j, "drive_id", id, out->drive_id, why, wlen);
    if (r == 0)
        r = get_str(j, "", "path_on_host", out->path_on_host, FC_STR_MAX, true, &out->has_path, why, wlen);
    if (r == 0)
        r = get_limiter(j, "rate_limiter", &out->rate_limiter, why, wlen);
    if (r == 0 && !patch) {
        out->is_root_device = get_bool(j, "is_root_device", NULL);
        out->is_read_only = get_bool(j, "is_read_only", NULL);
        r = get_str(j, "", "partuuid", out->partuuid, sizeof out->partuuid, true, &out->has_partuuid, why, wlen);
        static const char *const cache[] = { "Unsafe", "Writeback", NULL };
        static const char *const engine[] = { "Sync", "Async", NULL };
        int c = 0, e = 0;
        if (r == 0)
            r = get_enum(j, "", "cache_type", cache, &c, why, wlen);
        if (r == 0)
            r = get_enum(j, "", "io_engine", engine, &e, why, wlen);
        out->cache_writeback = c == 1;
        out->io_async = e == 1;
        if (r == 0 && member(j, "socket")) {
            snprintf(why, wlen, "field `socket`: vhost-user block devices are not supported by moat's API");
            r = -EINVAL;
        }
        if (r == 0 && !out->has_path) {
            snprintf(why, wlen, "missing required field `path_on_host`");
            r = -EINVAL;
        }
    }
    return finish(j, r);
}

static int check_mac(const char *s)
{
    if (strlen(s) != 17)
        return -EINVAL;
    for (int i = 0; i < 17; i++)
        if (i % 3 == 2 ? s[i] != ':' : !isxdigit((unsigned char)s[i]))
            return -EINVAL;
    return 0;
}

int fc_decode_net(const char *body, size_t len, const char *id, bool patch, struct fc_net *out, char *why, size_t wlen)
{
    static const struct field put_spec[] = {
        { "iface_id", F_STR, true }, { "host_dev_name", F_STR, true }, { "guest_mac", F_STR, false },
        { "rx_rate_limiter", F_OBJ, false }, { "tx_rate_limiter", F_OBJ, false }, { "mtu", F_UINT, false },
        { NULL, 0, false },
    };
    static const struct field patch_spec[] = {
        { "iface_id", F_STR, true }, { "rx_rate_limiter", F_OBJ, false }, { "tx_rate_limiter", F_OBJ, false },
        { NULL, 0, false },
    };
    json_t *j;
    int r = begin(body, len, patch ? patch_spec : put_spec, &j, out, sizeof *out, why, wlen);
    if (r < 0)
        return r;
    r = check_id(j, "iface_id", id, out->iface_id, why, wlen);
    if (r == 0)
        r = get_limiter(j, "rx_rate_limiter", &out->rx, why, wlen);
    if (r == 0)
        r = get_limiter(j, "tx_rate_limiter", &out->tx, why, wlen);
    if (r == 0 && !patch) {
        r = get_str(j, "", "host_dev_name", out->host_dev_name, 16, true, NULL, why, wlen);
        if (r == 0)
            r = get_str(j, "", "guest_mac", out->guest_mac, sizeof out->guest_mac, true, NULL, why, wlen);
        if (r == 0 && out->guest_mac[0] && check_mac(out->guest_mac) < 0) {
            snprintf(why, wlen, "field `guest_mac`: expected a MAC address as aa:bb:cc:dd:ee:ff");
            r = -EINVAL;
        }
        uint64_t mtu = 0;
        if (r == 0)
            r = get_uint(j, "mtu", 68, 65535, &mtu, NULL, why, wlen);
        out->mtu = (uint32_t)mtu;
    }
    return finish(j, r);
}

int fc_decode_vsock(const char *body, size_t len, struct fc_vsock *out, char *why, size_t wlen)
{
    static const struct field spec[] = {
        { "guest_cid", F_UINT, true }, { "uds_path", F_STR, true }, { "vsock_id", F_STR, false },
        { NULL, 0, false },
    };
    json_t *j;
    int r = begin(body, len, spec, &j, out, sizeof *out, why, wlen);
    if (r < 0)
        return r;
    uint64_t cid = 0;
    r = get_uint(j, "guest_cid", 3, 0xfffffffeu, &cid, NULL, why, wlen);
    out->guest_cid = (uint32_t)cid;
    if (r == 0)
        r = get_str(j, "", "uds_path", out->uds_path, 108, true, NULL, why, wlen);
    return finish(j, r);
}

int fc_decode_action(const char *body, size_t len, enum fc_action *out, char *why, size_t wlen)
{
    static const struct field spec[] = { { "action_type", F_STR, true }, { NULL, 0, false } };
    static const char *const names[] = { "InstanceStart", "SendCtrlAltDel", "FlushMetrics", NULL };
    json_t *j;
    int r = begin(body, len, spec, &j, NULL, 0, why, wlen);
    if (r < 0)
        return r;
    int i = 0;
    r = get_enum(j, "", "action_type", names, &i, why, wlen);
    *out = (enum fc_action)(i + 1);
    return finish(j, r);
}

int fc_decode_vm_state(const char *body, size_t len, bool *paused, char *why, size_t wlen)
{
    static const struct field spec[] = { { "state", F_STR, true }, { NULL, 0, false } };
    static const char *const names[] = { "Paused", "Resumed", NULL };
    json_t *j;
    int r = begin(body, len, spec, &j, NULL, 0, why, wlen);
    if (r < 0)
        return r;
    int i = 0;
    r = get_enum(j, "", "state", names, &i, why, wlen);
    *paused = i == 0;
    return finish(j, r);
}

int fc_decode_snap_create(const char *body, size_t len, struct fc_snap_create *out, char *why, size_t wlen)
{
    static const struct field spec[] = {
        { "snapshot_type", F_STR, false }, { "snapshot_path", F_STR, true }, { "mem_file_path", F_STR, true },
        { "version", F_STR, false }, { NULL, 0, false },
    };
    static const char *const types[] = { "Full", "Diff", NULL };
    json_t *j;
    int r = begin(body, len, spec, &j, out, sizeof *out, why, wlen);
    if (r < 0)
        return r;
    int t = 0;
    r = get_enum(j, "", "snapshot_type", types, &t, why, wlen);
    out->diff = t == 1;
    if (r == 0)
        r = get_str(j, "", "snapshot_path", out->snapshot_path, FC_STR_MAX, true, NULL, why, wlen);
    if (r == 0)
        r = get_str(j, "", "mem_file_path", out->mem_file_path, FC_STR_MAX, true, NULL, why, wlen);
    return finish(j, r);
}

int fc_decode_snap_load(const char *body, size_t len, struct fc_snap_load *out, char *why, size_t wlen)
{
    static const struct field spec[] = {
        { "snapshot_path", F_STR, true }, { "mem_file_path", F_STR, false }, { "mem_backend", F_OBJ, false },
        { "enable_diff_snapshots", F_BOOL, false }, { "track_dirty_pages", F_BOOL, false },
        { "resume_vm", F_BOOL, false }, { "network_overrides", F_ARR, false },
        { "vsock_override", F_OBJ, false }, { "clock_realtime", F_BOOL, false }, { "huge_pages", F_STR, false },
        { NULL, 0, false },
    };
    static const struct field vsock_spec[] = { { "uds_path", F_STR, true }, { NULL, 0, false } };
    static const struct field backend_spec[] = {
        { "backend_type", F_STR, true }, { "backend_path", F_STR, true }, { NULL, 0, false },
    };
    static const struct field ovr_spec[] = {
        { "iface_id", F_STR, true }, { "host_dev_name", F_STR, true }, { NULL, 0, false },
    };
    json_t *j;
    int r = begin(body, len, spec, &j, out, sizeof *out, why, wlen);
    if (r < 0)
        return r;
    r = get_str(j, "", "snapshot_path", out->snapshot_path, FC_STR_MAX, true, NULL, why, wlen);
    const json_t *mb = member(j, "mem_backend");
    bool has_file = false;
    if (r == 0)
        r = get_str(j, "", "mem_file_path", out->mem_path, FC_STR_MAX, true, &has_file, why, wlen);
    if (r == 0 && has_file == (mb != NULL)) {
        snprintf(why, wlen, "exactly one of `mem_file_path` and `mem_backend` is required");
        r = -EINVAL;
    }
    if (r == 0 && mb) {
        static const char *const kinds[] = { "File", "Uffd", NULL };
        int k = 0;
        r = check_fields(mb, backend_spec, "mem_backend.", why, wlen);
        if (r == 0)
            r = get_enum(mb, "mem_backend.", "backend_type", kinds, &k, why, wlen);
        if (r == 0)
            r = get_str(mb, "mem_backend.", "backend_path", out->mem_path, FC_STR_MAX, true, NULL, why, wlen);
        out->uffd = k == 1;
    }
    out->enable_diff_snapshots = get_bool(j, "enable_diff_snapshots", NULL) || get_bool(j, "track_dirty_pages", NULL);
    out->resume_vm = get_bool(j, "resume_vm", NULL);
    const json_t *ov = member(j, "network_overrides");
    if (r == 0 && ov) {
        if (json_array_size(ov) > FC_MAX_IFACES) {
            snprintf(why, wlen, "field `network_overrides`: at most %d entries", FC_MAX_IFACES);
            r = -EINVAL;
        }
        for (size_t i = 0; r == 0 && i < json_array_size(ov); i++) {
            const json_t *e = json_array_get(ov, i);
            struct fc_net_override *o = &out->overrides[i];
            r = check_fields(e, ovr_spec, "network_overrides[].", why, wlen);
            if (r == 0)
                r = get_str(e, "network_overrides[].", "iface_id", o->iface_id, sizeof o->iface_id, true, NULL, why,
                            wlen);
            if (r == 0)
                r = get_str(e, "network_overrides[].", "host_dev_name", o->host_dev_name, 16, true, NULL, why, wlen);
            out->noverrides = i + 1;
        }
    }
    const json_t *vo = member(j, "vsock_override");
    if (r == 0 && vo) {
        r = check_fields(vo, vsock_spec, "vsock_override.", why, wlen);
        if (r == 0)
            r = get_str(vo, "vsock_override.", "uds_path", out->vsock_uds, sizeof out->vsock_uds, true, NULL, why,
                        wlen);
    }
    /* moat restores kvmclock as it was at the snapshot; with the guest
     * agent, moat_start then sets the guest's wall clock from the host's
     * (docs/vsock.md). KVM_CLOCK_REALTIME's advance is not done. */
    if (r == 0 && get_bool(j, "clock_realtime", NULL)) {
        snprintf(why, wlen, "field `clock_realtime`: not supported by moat (use false; a restored guest with the "
                            "guest agent gets its wall clock set from the host)");
        r = -EINVAL;
    }
    static const char *const huge[] = { "Snapshot", "None", "Transparent", "2M", NULL };
    int h = 0;
    if (r == 0)
        r = get_enum(j, "", "huge_pages", huge, &h, why, wlen);
    if (r == 0 && h >= 2) {
        snprintf(why, wlen, "field `huge_pages`: `%s` is not supported by moat (guest memory is not backed by "
                            "huge pages: use None or Snapshot)", huge[h]);
        r = -EINVAL;
    }
    return finish(j, r);
}

int fc_decode_mmds_config(const char *body, size_t len, struct fc_mmds_config *out, char *why, size_t wlen)
{
    static const struct field spec[] = {
        { "version", F_STR, false }, { "network_interfaces", F_ARR, true }, { "ipv4_address", F_STR, false },
        { "imds_compat", F_BOOL, false }, { NULL, 0, false },
    };
    static const char *const versions[] = { "V1", "V2", NULL };
    json_t *j;
    int r = begin(body, len, spec, &j, out, sizeof *out, why, wlen);
    if (r < 0)
        return r;
    int v = 0;   /* Firecracker's default: V1 */
    r = get_enum(j, "", "version", versions, &v, why, wlen);
    out->v1 = v == 0;
    const json_t *ifs = member(j, "network_interfaces");
    if (r == 0 && (json_array_size(ifs) == 0 || json_array_size(ifs) > FC_MAX_IFACES)) {
        snprintf(why, wlen, "field `network_interfaces`: 1 to %d interface ids", FC_MAX_IFACES);
        r = -EINVAL;
    }
    for (size_t i = 0; r == 0 && i < json_array_size(ifs); i++) {
        const json_t *e = json_array_get(ifs, i);
        size_t n = json_string_length(e);
        if (!json_is_string(e) || n == 0 || n > FC_ID_MAX || strlen(json_string_value(e)) != n) {
            snprintf(why, wlen, "field `network_interfaces`: expected interface ids (strings of 1 to %d bytes)",
                     FC_ID_MAX);
            r = -EINVAL;
            break;
        }
        memcpy(out->ifaces[i], json_string_value(e), n + 1);
        out->nifaces = i + 1;
    }
    const json_t *ip = member(j, "ipv4_address");
    if (r == 0 && ip && strcmp(json_string_value(ip), "169.254.169.254")) {
        snprintf(why, wlen, "field `ipv4_address`: moat's metadata service is at 169.254.169.254 only");
        r = -EINVAL;
    }
    if (r == 0 && get_bool(j, "imds_compat", NULL)) {
        snprintf(why, wlen, "field `imds_compat`: not supported by moat (use false)");
        r = -EINVAL;
    }
    return finish(j, r);
}

int fc_decode_logger(const char *body, size_t len, struct fc_logger *out, char *why, size_t wlen)
{
    static const struct field spec[] = {
        { "log_path", F_STR, false }, { "level", F_STR, false }, { "show_level", F_BOOL, false },
        { "show_log_origin", F_BOOL, false }, { "module", F_STR, false }, { NULL, 0, false },
    };
    json_t *j;
    int r = begin(body, len, spec, &j, out, sizeof *out, why, wlen);
    if (r < 0)
        return r;
    r = get_str(j, "", "log_path", out->log_path, FC_STR_MAX, true, NULL, why, wlen);
    const json_t *lv = member(j, "level");
    if (r == 0 && lv) {
        /* Firecracker takes the level in any case ("Info", "info", "INFO"). */
        static const char *const names[] = { "off", "error", "warning", "info", "debug", "trace" };
        const char *s = json_string_value(lv);
        r = -EINVAL;
        for (int i = 0; i < 6; i++)
            if (!strcasecmp(s, names[i])) {
                out->level = (enum fc_level)i;
                out->has_level = true;
                r = 0;
            }
        if (r < 0)
            snprintf(why, wlen, "field `level`: unknown variant `%.40s`, expected one of Off, Error, Warning, Info, "
                                "Debug, Trace", s);
    }
    out->show_level = get_bool(j, "show_level", &out->has_show_level);
    out->show_log_origin = get_bool(j, "show_log_origin", &out->has_show_origin);
    return finish(j, r);
}

int fc_decode_metrics(const char *body, size_t len, struct fc_metrics *out, char *why, size_t wlen)
{
    static const struct field spec[] = {
        { "metrics_path", F_STR, true }, { "emit_id", F_BOOL, false }, { "properties", F_OBJ, false },
        { NULL, 0, false },
    };
    json_t *j;
    int r = begin(body, len, spec, &j, out, sizeof *out, why, wlen);
    if (r < 0)
        return r;
    r = get_str(j, "", "metrics_path", out->metrics_path, FC_STR_MAX, true, NULL, why, wlen);
    out->emit_id = get_bool(j, "emit_id", NULL);
    const json_t *p = member(j, "properties");
    if (r == 0 && p) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)p, k, v)
            if (!json_is_string(v)) {
                snprintf(why, wlen, "field `properties.%.64s`: expected a string", k);
                r = -EINVAL;
                break;
            }
        if (r == 0 && json_object_size(p) > FC_METRIC_PROPS) {
            snprintf(why, wlen, "field `properties`: at most %d entries", FC_METRIC_PROPS);
            r = -EINVAL;
        }
        char *t = r == 0 ? json_dumps(p, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        if (r == 0 && (!t || strlen(t) >= sizeof out->properties)) {
            snprintf(why, wlen, "field `properties`: %s", t ? "too long" : "out of memory");
            r = -EINVAL;
        }
        if (r == 0)
            memcpy(out->properties, t, strlen(t) + 1);
        free(t);
    }
    return finish(j, r);
}

int fc_decode_entropy(const char *body, size_t len, struct fc_entropy *out, char *why, size_t wlen)
{
    static const struct field spec[] = { { "rate_limiter", F_OBJ, false }, { NULL, 0, false } };
    json_t *j;
    int r = begin(body, len, spec, &j, out, sizeof *out, why, wlen);
    if (r < 0)
        return r;
    r = get_limiter(j, "rate_limiter", &out->rate_limiter, why, wlen);
    return finish(j, r);
}

/* ---- the metadata document ---- */

static int merge_patch(json_t *target, const json_t *patch)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)patch, k, v) {
        if (json_is_null(v)) {
            json_object_del(target, k);
        } else if (json_is_object(v)) {
            json_t *t = json_object_get(target, k);
            if (!json_is_object(t)) {
                t = json_object();
                if (!t || json_object_set_new(target, k, t) < 0)
                    return -ENOMEM;
            }
            if (merge_patch(t, v) < 0)
                return -ENOMEM;
        } else if (json_object_set(target, k, v) < 0) {
            return -ENOMEM;
        }
    }
    return 0;
}

int fc_mmds_update(char **doc, const char *body, size_t len, bool patch, size_t limit, char *why, size_t wlen)
{
    json_t *p;
    int r = parse_object(body, len, &p, why, wlen);
    if (r < 0)
        return r;
    json_t *cur = NULL;
    if (patch) {
        cur = *doc ? json_loads(*doc, 0, NULL) : json_object();
        if (!cur || !json_is_object(cur)) {
            json_decref(cur);
            cur = json_object();
        }
        r = cur ? merge_patch(cur, p) : -ENOMEM;
        json_decref(p);
    } else {
        cur = p;
    }
    char *text = r == 0 ? json_dumps(cur, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(cur);
    if (!text) {
        snprintf(why, wlen, "out of memory");
        return -ENOMEM;
    }
    if (strlen(text) > limit) {
        free(text);
        snprintf(why, wlen, "MMDS limit exceeded error: The MMDS patch request doesn't fit.");
        return -EFBIG;
    }
    free(*doc);
    *doc = text;
    return 0;
}

/* ---- the config file ---- */

int fc_config_sections(const char *text, size_t len, fc_section_cb cb, void *opaque, char *why, size_t wlen)
{
    static const char *const keys[] = { "boot-source", "machine-config", "drives", "network-interfaces", "vsock",
                                        "logger", "metrics", "mmds-config", "entropy", "balloon", "cpu-config",
                                        NULL };
    json_error_t e;
    json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &e);
    if (!j || !json_is_object(j)) {
        if (j)
            snprintf(why, wlen, "config file: expected a JSON object");
        else
            snprintf(why, wlen, "config file: bad JSON: %s (line %d, column %d)", e.text, e.line, e.column);
        json_decref(j);
        return -EINVAL;
    }
    int r = 0;
    /* Only the known keys are looked at: an unknown one is ignored, as
     * Firecracker's config file parser ignores it. In a fixed order: machine and boot source before devices. */
    for (int i = 0; r == 0 && keys[i]; i++) {
        json_t *s = json_object_get(j, keys[i]);
        if (!s || json_is_null(s))
            continue;
        bool arr = !strcmp(keys[i], "drives") || !strcmp(keys[i], "network-interfaces");
        if (arr != json_is_array(s)) {
            snprintf(why, wlen, "config file: field `%s`: expected %s", keys[i], arr ? "an array" : "an object");
            r = -EINVAL;
            break;
        }
        size_t n = arr ? json_array_size(s) : 1;
        for (size_t x = 0; r == 0 && x < n; x++) {
            char *t = json_dumps(arr ? json_array_get(s, x) : s, JSON_COMPACT | JSON_ENCODE_ANY);
            if (!t) {
                snprintf(why, wlen, "out of memory");
                r = -ENOMEM;
                break;
            }
            r = cb(opaque, keys[i], x, t, strlen(t), why, wlen);
            free(t);
        }
    }
    json_decref(j);
    return r;
}

void fc_bucket_opt(const struct ratelimit_bucket_cfg *b, char *buf, size_t len)
{
    if (!b->size || !b->refill_time_ms)
        snprintf(buf, len, "off");
    else if (b->one_time_burst)
        snprintf(buf, len, "%" PRIu64 "/%" PRIu64 "/%" PRIu64, b->size, b->refill_time_ms, b->one_time_burst);
    else
        snprintf(buf, len, "%" PRIu64 "/%" PRIu64, b->size, b->refill_time_ms);
}

bool fc_opt_safe(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f || *s == '"')
            return false;
    return true;
}

size_t fc_log_line(char *buf, size_t len, const struct timespec *utc, const char *id, const char *thread,
                   enum fc_level lvl, bool show_level, const char *file, int line, bool show_origin,
                   const char *msg)
{
    static const char *const names[] = { "OFF", "ERROR", "WARN", "INFO", "DEBUG", "TRACE" };
    struct tm tm;
    time_t sec = utc->tv_sec;
    char t[40] = "";
    if (gmtime_r(&sec, &tm))
        strftime(t, sizeof t, "%Y-%m-%dT%H:%M:%S", &tm);
    char lv[16] = "", org[96] = "";
    if (show_level)
        snprintf(lv, sizeof lv, ":%s", names[(unsigned)lvl <= FC_LVL_TRACE ? lvl : FC_LVL_TRACE]);
    if (show_origin)
        snprintf(org, sizeof org, ":%.64s:%d", file, line);
    int n = snprintf(buf, len - 1, "%s.%09ld [%.64s:%.15s%s%s] %s", t, (long)utc->tv_nsec, id, thread, lv, org,
                     msg);
    size_t used = n < 0 ? 0 : (size_t)n >= len - 1 ? len - 2 : (size_t)n;
    for (size_t i = 0; i < used; i++)
        if ((unsigned char)buf[i] < 0x20 || buf[i] == 0x7f)
            buf[i] = ' ';
    buf[used] = '\n';
    buf[used + 1] = 0;
    return used + 1;
}

/* The number after " word " in line (which ends at '\n' or NUL). */
static int field_after(const char *line, const char *word, uint64_t *v)
{
    size_t wl = strlen(word);
    for (const char *p = line; *p && *p != '\n'; p++) {
        if (*p != ' ' || strncmp(p + 1, word, wl) || p[1 + wl] != ' ')
            continue;
        const char *d = p + 2 + wl;
        if (*d < '0' || *d > '9')
            return -EINVAL;
        char *end;
        errno = 0;
        unsigned long long x = strtoull(d, &end, 10);
        if (errno || (*end != ' ' && *end != '\n' && *end))
            return -EINVAL;
        *v = x;
        return 0;
    }
    return -EINVAL;
}

int fc_blk_stats_parse(const char *text, struct fc_blk_counts *out)
{
    memset(out, 0, sizeof *out);
    const char *l = text;
    while (l && strncmp(l, "requests ", 9))
        l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL;
    if (!l)
        return -EINVAL;
    int r = 0;          /* from " ok": the line after its "requests" */
    l += 8;
    r |= field_after(l, "failed", &out->failed);
    r |= field_after(l, "bad", &out->bad);
    r |= field_after(l, "reads", &out->reads);
    r |= field_after(l, "read-bytes", &out->read_bytes);
    r |= field_after(l, "writes", &out->writes);
    r |= field_after(l, "write-bytes", &out->write_bytes);
    r |= field_after(l, "flushes", &out->flushes);
    return r ? -EINVAL : 0;
}

int fc_net_stats_parse(const char *text, struct fc_net_counts *out)
{
    memset(out, 0, sizeof *out);
    const char *tx = NULL, *rx = NULL;
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (!strncmp(l, "tx frames ", 10) && !tx)
            tx = l;
        else if (!strncmp(l, "rx frames ", 10) && !rx)
            rx = l;
    }
    if (!tx || !rx)
        return -EINVAL;
    int r = 0;          /* from " frames": each line after its "tx"/"rx" */
    r |= field_after(tx + 2, "frames", &out->tx_frames);
    r |= field_after(tx + 2, "bytes", &out->tx_bytes);
    r |= field_after(tx + 2, "throttled", &out->tx_throttled);
    r |= field_after(rx + 2, "frames", &out->rx_frames);
    r |= field_after(rx + 2, "bytes", &out->rx_bytes);
    r |= field_after(rx + 2, "throttled", &out->rx_throttled);
    return r ? -EINVAL : 0;
}
