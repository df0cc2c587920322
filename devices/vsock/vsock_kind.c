/* virtio-vsock as a kind of device (devices/vsock/vsock_kind.h). */
#include "devices/vsock/vsock_kind.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "devices/vsock/vsock.h"

static const char *const vsock_keys[] = { "uds", "cid", NULL };
/* the CID is the snapshot's: the guest has it */
static const char *const vsock_override_keys[] = { "uds", NULL };

int vsock_parse_cid(const char *s, uint64_t *cid)
{
    *cid = 0;
    if (!s)
        return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end || errno || *s == '-' || v < 3 || v > 0xfffffffeull)
        return -EINVAL;
    *cid = v;
    return 0;
}

static int vsock_check(const struct devopts *o, char *why, size_t wlen)
{
    const char *uds = devopt_get(o, "uds");
    uint64_t cid;
    if (!uds || !*uds) {
        snprintf(why, wlen, "uds=PATH is required");
        return -EINVAL;
    }
    if (strlen(uds) > VSOCK_UDS_PATH_MAX) {
        snprintf(why, wlen, "uds path longer than %u bytes", VSOCK_UDS_PATH_MAX);
        return -ENAMETOOLONG;
    }
    if (vsock_parse_cid(devopt_get(o, "cid"), &cid) < 0) {
        snprintf(why, wlen, "cid must be 3 .. 4294967294");
        return -EINVAL;
    }
    return 0;
}

static void vsock_id(const struct devopts *o, unsigned k, char *id)
{
    (void)o;
    (void)k;
    snprintf(id, VIRTIO_KIND_ID_MAX + 1, "vsock");
}

static void vsock_free(void *priv)
{
    struct vsock_rec *v = priv;
    if (v)
        free(v->uds);
    free(v);
}

/* A socket some process still serves (connect succeeds). */
static bool socket_live(const char *path)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof(sa.sun_path))
        return false;
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    bool live = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return live;
}

static int vsock_kind_create(struct devopts *o, const char *id, bool restoring, int seccomp, struct virtio_made *out,
                        char *why, size_t wlen)
{
    const char *uds = devopt_get(o, "uds");
    uint64_t cid;
    if (vsock_parse_cid(devopt_get(o, "cid"), &cid) < 0) {
        snprintf(why, wlen, "vsock: cid must be 3 .. 4294967294");
        return -EINVAL;
    }
    /* vsock_create replaces a stale socket file: a restore refuses a live
     * one (the snapshotted VM may still be running on it). */
    if (restoring && socket_live(uds)) {
        snprintf(why, wlen, "vsock: %s is in use (give another path)", uds);
        return -EADDRINUSE;
    }
    struct vsock_rec *v = calloc(1, sizeof(*v));
    if (!v || !(v->uds = strdup(uds))) {
        vsock_free(v);
        snprintf(why, wlen, "out of memory");
        return -ENOMEM;
    }
    struct vsock_opts vo = { .uds_path = uds, .guest_cid = cid ? cid : VSOCK_DEFAULT_CID, .name = id,
                             .seccomp = seccomp };
    int r = vsock_create(&vo, &v->dev, why, wlen);
    if (r < 0) {
        vsock_free(v);
        return r;
    }
    *out = (struct virtio_made){ .ops = &vsock_ops, .dev = v->dev, .priv = v };
    return 0;
}

/* Restored: no connections; its first start tells the driver
 * TRANSPORT_RESET, and host clients wait until the agent fix-up is done. */
static bool vsock_kind_restored(void *priv)
{
    struct vsock_rec *v = priv;
    vsock_restored(v->dev);
    return true;
}

const struct virtio_kind vsock_kind = {
    .type = "vsock",
    .name = "vsock",
    .device_id = VIRTIO_ID_VSOCK,
    .max_per_vm = 1,
    .typed = VIRTIO_KIND_TYPED_VSOCK,       /* moat_config.vsock_uds, --vsock */
    /* QEMU's vhost-user-vsock keeps the event queue and hands over rx and
     * tx only, with 1024-entry rings (docs/vhost-user.md) */
    .vhost_user_nqueues = 2,
    .vhost_user_queue_max = 1024,
    .cmdline_extra = "moat.agent=1024",   /* /init starts the guest agent (docs/agent-protocol.md) */
    .keys = vsock_keys,
    .override_keys = vsock_override_keys,
    .check = vsock_check,
    .id = vsock_id,
    .create = vsock_kind_create,
    .restored = vsock_kind_restored,
    .free = vsock_free,
};
