/* Tar entries of a layer, checked (tarent.h). Pure. */
#include "vmm/image/tarent.h"

#include <errno.h>
#include <string.h>

/* What err shows of a hostile name: at most 200 bytes of it. */
#define SHOW(len) ((int)((len) > 200 ? 200 : (len)))

int img_tar_path_norm(const char *in, size_t inlen, char *out, size_t outlen, const char *what,
                      struct img_err *err)
{
    if (outlen == 0)
        return -ENAMETOOLONG;
    out[0] = '\0';
    if (memchr(in, '\0', inlen))
        return img_err(err, -EINVAL, "%s has a NUL byte", what);
    if (inlen && in[0] == '/')
        return img_err(err, -EINVAL, "%s \"%.*s\" is absolute: a layer's paths are relative to its root",
                       what, SHOW(inlen), in);
    size_t o = 0, i = 0;
    while (i < inlen) {
        size_t j = i;
        while (j < inlen && in[j] != '/')
            j++;
        size_t n = j - i;
        const char *c = in + i;
        i = j + 1;
        if (n == 0 || (n == 1 && c[0] == '.'))
            continue;
        if (n == 2 && c[0] == '.' && c[1] == '.')
            return img_err(err, -EINVAL, "%s \"%.*s\" has a \"..\" component", what, SHOW(inlen), in);
        if (n > IMG_TAR_NAME_MAX)
            return img_err(err, -ENAMETOOLONG, "%s \"%.*s...\": a component is %zu bytes (limit %d)", what,
                           SHOW(inlen), in, n, IMG_TAR_NAME_MAX);
        size_t need = o + (o ? 1 : 0) + n;
        if (need > IMG_TAR_PATH_MAX || need + 1 > outlen)
            return img_err(err, -ENAMETOOLONG, "%s \"%.*s...\" is longer than %d bytes", what, SHOW(inlen), in,
                           IMG_TAR_PATH_MAX);
        if (o)
            out[o++] = '/';
        memcpy(out + o, c, n);
        o += n;
    }
    out[o] = '\0';
    return 0;
}

/* out->path holds the normalised path; split off its last component and
 * classify whiteouts. */
static int classify(struct img_tarent_out *out, enum img_te_type type, struct img_err *err)
{
    char *slash = strrchr(out->path, '/');
    char *base = slash ? slash + 1 : out->path;
    size_t plen = sizeof IMG_WH_PREFIX - 1;
    out->action = IMG_TA_APPLY;
    if (strncmp(base, IMG_WH_PREFIX, plen))
        return 0;
    if (!strcmp(base, IMG_WH_OPAQUE)) {
        out->action = IMG_TA_OPAQUE;
        *(slash ? slash : out->path) = '\0';
        return 0;
    }
    if (!strncmp(base, IMG_WH_PREFIX IMG_WH_PREFIX, 2 * plen)) {
        out->action = IMG_TA_SKIP;
        return 0;
    }
    const char *name = base + plen;
    if (!*name || !strcmp(name, ".") || !strcmp(name, ".."))
        return img_err(err, -EINVAL, "whiteout \"%s\" names no entry", out->path);
    if (type == IMG_TE_DIR)
        return img_err(err, -EINVAL, "whiteout \"%s\" is a directory", out->path);
    memmove(base, name, strlen(name) + 1);
    out->action = IMG_TA_WHITEOUT;
    return 0;
}

int img_tarent_check(const struct img_tarent_in *in, struct img_tarent_out *out, struct img_err *err)
{
    out->action = 0;
    out->path[0] = out->link[0] = '\0';
    if (!in->path)
        return img_err(err, -EINVAL, "a tar entry has no path");
    int rc = img_tar_path_norm(in->path, in->path_len, out->path, sizeof out->path, "path", err);
    if (rc < 0)
        return rc;
    if (in->type < IMG_TE_REG || in->type >= IMG_TE_OTHER)
        return img_err(err, -EINVAL, "\"%s\": a socket or an unknown type of tar entry", out->path);
    rc = classify(out, in->type, err);
    if (rc < 0 || out->action != IMG_TA_APPLY)
        return rc;
    if (!out->path[0] && in->type != IMG_TE_DIR)
        return img_err(err, -EINVAL, "the root of a layer must be a directory");
    if (in->uid < 0 || in->uid > IMG_TAR_ID_MAX || in->gid < 0 || in->gid > IMG_TAR_ID_MAX)
        return img_err(err, -EINVAL, "\"%s\": owner %lld:%lld is not a Linux uid:gid (0 .. %u)", out->path,
                       (long long)in->uid, (long long)in->gid, IMG_TAR_ID_MAX);
    if ((in->type == IMG_TE_CHR || in->type == IMG_TE_BLK) &&
        (in->rdev_major > IMG_TAR_MAJOR_MAX || in->rdev_minor > IMG_TAR_MINOR_MAX))
        return img_err(err, -EINVAL, "\"%s\": device %llu:%llu is beyond what ext4 holds (major <= %u, minor <= %u)",
                       out->path, (unsigned long long)in->rdev_major, (unsigned long long)in->rdev_minor,
                       IMG_TAR_MAJOR_MAX, IMG_TAR_MINOR_MAX);
    if (in->type == IMG_TE_HARDLINK) {
        if (!in->link || !in->link_len)
            return img_err(err, -EINVAL, "hardlink \"%s\" has no target", out->path);
        rc = img_tar_path_norm(in->link, in->link_len, out->link, sizeof out->link, "hardlink target", err);
        if (rc < 0)
            return img_err(err, rc, "hardlink \"%s\" refused", out->path);
        if (!out->link[0])
            return img_err(err, -EINVAL, "hardlink \"%s\" targets the root", out->path);
        if (!strcmp(out->link, out->path))
            return img_err(err, -EINVAL, "hardlink \"%s\" targets itself", out->path);
    } else if (in->type == IMG_TE_SYMLINK) {
        if (!in->link || !in->link_len)
            return img_err(err, -EINVAL, "symlink \"%s\" has no target", out->path);
        if (in->link_len > IMG_TAR_LINK_MAX)
            return img_err(err, -ENAMETOOLONG, "symlink \"%s\": target of %zu bytes (limit %d)", out->path,
                           in->link_len, IMG_TAR_LINK_MAX);
        if (memchr(in->link, '\0', in->link_len))
            return img_err(err, -EINVAL, "symlink \"%s\": target has a NUL byte", out->path);
        memcpy(out->link, in->link, in->link_len);
        out->link[in->link_len] = '\0';
    }
    return 0;
}

int img_tar_count_entry(const struct img_tar_limits *l, struct img_tar_count *c, struct img_err *err)
{
    uint64_t ml = l && l->max_entries_layer ? l->max_entries_layer : IMG_TAR_ENTRIES_LAYER;
    uint64_t mt = l && l->max_entries_total ? l->max_entries_total : IMG_TAR_ENTRIES_TOTAL;
    if (c->entries_layer >= ml)
        return img_err(err, -E2BIG, "a layer has more than %llu entries (the limit)", (unsigned long long)ml);
    if (c->entries_total >= mt)
        return img_err(err, -E2BIG, "the layers have more than %llu entries (the limit)", (unsigned long long)mt);
    c->entries_layer++;
    c->entries_total++;
    return 0;
}

int img_tar_count_bytes(const struct img_tar_limits *l, struct img_tar_count *c, uint64_t total,
                        struct img_err *err)
{
    uint64_t mb = l && l->max_bytes ? l->max_bytes : IMG_TAR_BYTES;
    c->bytes = total;
    if (total > mb)
        return img_err(err, -EFBIG,
                       "the layers decompress to more than %llu bytes (the limit: a decompression bomb, "
                       "or --disk-size too small)", (unsigned long long)mb);
    return 0;
}
