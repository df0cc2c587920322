/* virtio-blk as a kind of device (devices/blk/blk_kind.h). */
#include "devices/blk/blk_kind.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devices/blk/virtio_blk.h"
#include "devices/virtio/ratelimit.h"

static const char *const blk_keys[] = { "path", "ro", "id", "overlay", "direct", "bw", "ops", NULL };
/* what an override gives anew (the limits stay the snapshot's) */
static const char *const blk_override_keys[] = { "path", "ro", "id", "overlay", "direct", NULL };

/* bw=/ops= (SIZE/REFILL_MS[/BURST]) into cfg; *have if either is given. */
static int limits(const struct devopts *o, struct ratelimit_cfg *cfg, int *have, char *why, size_t wlen)
{
    return ratelimit_from_named_opts("bw", devopt_get(o, "bw"), "ops", devopt_get(o, "ops"), cfg, have, why, wlen);
}

static int blk_check(const struct devopts *o, char *why, size_t wlen)
{
    const char *path = devopt_get(o, "path"), *id = devopt_get(o, "id"), *ovl = devopt_get(o, "overlay");
    const char *ro = devopt_get(o, "ro"), *direct = devopt_get(o, "direct");
    if (!path || !*path) {
        snprintf(why, wlen, "path=FILE is required");
        return -EINVAL;
    }
    if ((ro && *ro) || (direct && *direct)) {
        snprintf(why, wlen, "ro and direct take no value");
        return -EINVAL;
    }
    if (id && (!*id || strlen(id) > BLK_ID_MAX)) {
        snprintf(why, wlen, "id must be 1 to %u bytes", BLK_ID_MAX);
        return -EINVAL;
    }
    if (ovl && !*ovl) {
        snprintf(why, wlen, "overlay=FILE needs a file");
        return -EINVAL;
    }
    struct ratelimit_cfg lc;
    int have;
    if (limits(o, &lc, &have, why, wlen) < 0)
        return -EINVAL;
    /* a copy-on-write drive's base is only read */
    if (access(path, ro || ovl ? R_OK : R_OK | W_OK) < 0) {
        int e = errno;
        snprintf(why, wlen, "%s: %s", path, strerror(e));
        return -e;
    }
    return 0;
}

void blk_default_id(unsigned k, char *id)
{
    snprintf(id, VIRTIO_KIND_ID_MAX + 1, "vd%c", k < 26 ? (char)('a' + k) : '?');
}

/* Its serial if it has one, else its name by ordinal: vda, vdb, ... */
static void blk_id(const struct devopts *o, unsigned k, char *id)
{
    const char *serial = devopt_get(o, "id");
    if (serial && *serial)
        snprintf(id, VIRTIO_KIND_ID_MAX + 1, "%s", serial);
    else
        blk_default_id(k, id);
}

static void blk_free(void *priv)
{
    struct blk_drive *d = priv;
    if (!d)
        return;
    free(d->path);
    free(d->id);
    free(d->overlay);
    free(d);
}

static int blk_create(struct devopts *o, const char *id, bool restoring, int seccomp, struct virtio_made *out,
                      char *why, size_t wlen)
{
    const char *path = devopt_get(o, "path"), *serial = devopt_get(o, "id"), *ovl = devopt_get(o, "overlay");
    /* a restore never starts from a fresh, empty overlay */
    if (restoring && ovl && access(ovl, R_OK) < 0) {
        int e = errno;
        snprintf(why, wlen, "drive %s: overlay %s: %s", path, ovl, strerror(e));
        return -e;
    }
    struct blk_drive *d = calloc(1, sizeof(*d));
    if (!d || !(d->path = strdup(path)) || (serial && !(d->id = strdup(serial))) ||
        (ovl && !(d->overlay = strdup(ovl)))) {
        blk_free(d);
        snprintf(why, wlen, "out of memory");
        return -ENOMEM;
    }
    d->read_only = devopt_get(o, "ro") != NULL;
    struct ratelimit_cfg lc;
    int have;
    limits(o, &lc, &have, why, wlen);       /* checked */
    struct virtio_blk_opts bo = { .path = path, .read_only = d->read_only, .id = serial,
                                  .engine = BLK_ENGINE_AUTO, .name = id, .direct = devopt_get(o, "direct") != NULL,
                                  .overlay = ovl, .limit = have ? &lc : NULL };
    int r = virtio_blk_create(&bo, &d->blk, why, wlen);
    if (r < 0) {
        blk_free(d);
        return r;
    }
    *out = (struct virtio_made){ .ops = &virtio_blk_ops, .dev = d->blk, .priv = d };
    return 0;
}

/* A copy-on-write drive keeps its overlay only if the override gives one:
 * reopening its base writable would write the shared base. */
static int blk_override_check(const struct devopts *rec, const struct devopts *merged, char *why, size_t wlen)
{
    const char *ovl = devopt_get(rec, "overlay");
    if (ovl && !devopt_get(merged, "overlay")) {
        snprintf(why, wlen, "it was a copy-on-write drive (overlay %s): give an overlay for it too", ovl);
        return -EINVAL;
    }
    return 0;
}

static const char *const blk_set_keys[] = { "bw", "ops", "path", NULL };

/* path: another backing file (virtio_blk_swap); bw/ops: a limiter's bucket
 * anew (or off), the other as it is. */
static int blk_set(void *priv, const char *key, const char *value, char *why, size_t wlen)
{
    struct blk_drive *d = priv;
    if (!strcmp(key, "path")) {
        char *p = strdup(value);
        if (!p) {
            snprintf(why, wlen, "out of memory");
            return -ENOMEM;
        }
        int r = virtio_blk_swap(d->blk, value, why, wlen);
        if (r < 0) {
            free(p);
            return r;
        }
        free(d->path);
        d->path = p;
        return 0;
    }
    struct ratelimit_cfg c;
    virtio_blk_get_limit(d->blk, &c);
    if (ratelimit_set_bucket(&c, !strcmp(key, "ops"), value) < 0) {
        snprintf(why, wlen, "SIZE/REFILL_MS[/BURST] or off");
        return -EINVAL;
    }
    return virtio_blk_set_limit(d->blk, &c);
}

static const char *const blk_get_keys[] = { "stats", NULL };

/* "stats": one line of counters (docs/devices.md). */
static long blk_get(void *priv, const char *key, char *buf, size_t len)
{
    struct blk_drive *d = priv;
    (void)key;
    struct virtio_blk_stats st;
    virtio_blk_get_stats(d->blk, &st);
    return snprintf(buf, len, "requests ok %llu failed %llu bad %llu reads %llu read-bytes %llu writes %llu "
                    "write-bytes %llu flushes %llu capacity %llu\n",
                    (unsigned long long)st.completed, (unsigned long long)st.failed,
                    (unsigned long long)st.bad_chains, (unsigned long long)st.reads,
                    (unsigned long long)st.read_bytes, (unsigned long long)st.writes,
                    (unsigned long long)st.write_bytes, (unsigned long long)st.flushes,
                    (unsigned long long)virtio_blk_capacity(d->blk));
}

const struct virtio_kind blk_kind = {
    .set = blk_set,
    .set_keys = blk_set_keys,
    .get = blk_get,
    .get_keys = blk_get_keys,
    .type = "blk",
    .name = "drive",
    .device_id = VIRTIO_ID_BLOCK,
    .typed = VIRTIO_KIND_TYPED_DRIVES,      /* moat_config.drives, --drive */
    .keys = blk_keys,
    .override_keys = blk_override_keys,     /* an override gives these anew */
    .override_whole = true,
    .check = blk_check,
    .id = blk_id,
    .create = blk_create,
    .override_check = blk_override_check,
    .free = blk_free,
};
