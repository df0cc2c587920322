/* Image archives in and out of the store (vmm/image/layout.h). */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "vmm/base/fullio.h"
#include "vmm/image/layout.h"
#include "vmm/image/store_int.h"
#include "vmm/image/tar.h"

#define OCI_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define OCI_CONFIG   "application/vnd.oci.image.config.v1+json"
#define OCI_INDEX    "application/vnd.oci.image.index.v1+json"

/* A blob to store: from a file (fd) or from memory (buf). */
struct blob_src {
    int fd;
    char *buf;
    size_t len;
    char digest[IMG_DIGEST_MAX];
    uint64_t size;
    char what[IMG_ARCHIVE_PATH_MAX + 32];
};

static void srcs_free(struct blob_src *v, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        if (v[i].fd >= 0)
            close(v[i].fd);
        free(v[i].buf);
        v[i].fd = -1;
        v[i].buf = NULL;
    }
}

/* rel of the folder dfd, read-only and never blocking, resolved inside
 * it: a symlink may lead elsewhere in the folder (docker save's duplicate
 * layers are such links), never out of it (an absolute target, or ".."
 * past the folder: -EXDEV), so a folder given to import cannot pull
 * another of the host's files into the store. Kernels without openat2
 * (before 5.6) get openat. */
static int open_in(int dfd, const char *rel)
{
    struct open_how how = { .flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK,
                            .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS };
    int fd = (int)syscall(SYS_openat2, dfd, rel, &how, sizeof how);
    if (fd < 0 && errno == ENOSYS)
        fd = openat(dfd, rel, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    return fd;
}

/* Why open_in failed (errno e), as a message. */
static const char *open_why(int e)
{
    return e == EXDEV ? "a link that leads out of the folder" : strerror(e);
}

/* A small file of the archive (JSON) into a malloc'ed, NUL-ended buffer. */
static int read_small(int dfd, const char *rel, char **buf, size_t *len, struct img_err *err)
{
    int fd = open_in(dfd, rel);
    if (fd < 0)
        return img_err(err, -errno, "the archive's %s: %s", rel, open_why(errno));
    struct stat st;
    int rc = 0;
    *buf = NULL;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode))
        rc = img_err(err, -EINVAL, "the archive's %s is not a file", rel);
    else if ((uint64_t)st.st_size > IMG_JSON_MAX)
        rc = img_err(err, -EINVAL, "the archive's %s is %lld bytes, more than the limit of %u", rel,
                     (long long)st.st_size, IMG_JSON_MAX);
    else if (!(*buf = malloc((size_t)st.st_size + 1)))
        rc = img_err(err, -ENOMEM, "out of memory");
    else if (pread_full(fd, *buf, (size_t)st.st_size, 0) != st.st_size)
        rc = img_err(err, -EIO, "cannot read the archive's %s", rel);
    close(fd);
    if (rc) {
        free(*buf);
        *buf = NULL;
        return rc;
    }
    (*buf)[st.st_size] = '\0';
    *len = (size_t)st.st_size;
    return 0;
}

/* An OCI layout's blob opened and checked: its size and digest. */
static int layout_blob(int dfd, const struct img_desc *d, struct blob_src *b, struct img_err *err)
{
    char rel[128], got[IMG_DIGEST_MAX];
    uint64_t size;
    img_store_rel(rel, sizeof rel, "blobs/sha256", d->digest, "");
    b->fd = open_in(dfd, rel);
    b->buf = NULL;
    snprintf(b->what, sizeof b->what, "the layout's %s", rel);
    strcpy(b->digest, d->digest);
    b->size = d->size;
    if (b->fd < 0)
        return img_err(err, -errno, "%s: %s", b->what, open_why(errno));
    /* A folder's blob may be a link to anything: /dev/zero would be read
     * for ever, a FIFO block. A file of the descriptor's size, first. */
    struct stat st;
    if (fstat(b->fd, &st) || !S_ISREG(st.st_mode))
        return img_err(err, -EINVAL, "%s is not a file", b->what);
    if ((uint64_t)st.st_size != d->size)
        return img_err(err, -EBADMSG, "%s is %llu bytes, its descriptor says %llu", b->what,
                       (unsigned long long)st.st_size, (unsigned long long)d->size);
    int rc = img_sha256_fd(b->fd, got, &size);
    if (rc)
        return img_err(err, rc, "cannot read %s: %s", b->what, strerror(-rc));
    if (size != d->size)
        return img_err(err, -EBADMSG, "%s is %llu bytes, its descriptor says %llu", b->what,
                       (unsigned long long)size, (unsigned long long)d->size);
    if (strcmp(got, d->digest))
        return img_err(err, -EBADMSG, "%s is corrupt: its content has digest %s", b->what, got);
    return 0;
}

/* A checked blob's whole content into memory (manifests, configs). */
static int slurp(struct blob_src *b, struct img_err *err)
{
    if (b->size > IMG_JSON_MAX)
        return img_err(err, -EINVAL, "%s is %llu bytes, more than the limit of %u", b->what,
                       (unsigned long long)b->size, IMG_JSON_MAX);
    if (!(b->buf = malloc((size_t)b->size + 1)))
        return img_err(err, -ENOMEM, "out of memory");
    if (pread_full(b->fd, b->buf, (size_t)b->size, 0) != (ssize_t)b->size)
        return img_err(err, -EIO, "cannot read %s", b->what);
    b->buf[b->size] = '\0';
    b->len = (size_t)b->size;
    return 0;
}

static int copy_fd(int in, int out, uint64_t size)
{
    uint64_t off = 0;
    char buf[65536];
    while (off < size) {
        size_t k = size - off < sizeof buf ? (size_t)(size - off) : sizeof buf;
        if (pread_full(in, buf, k, (off_t)off) != (ssize_t)k)
            return -EIO;
        if (write_full(out, buf, k) != (ssize_t)k)
            return -errno;
        off += k;
    }
    return 0;
}

/* Store every blob of v (each checked already; the store checks again). */
static int store_all(struct img_store *s, struct blob_src *v, unsigned n, struct img_err *err)
{
    for (unsigned i = 0; i < n; i++) {
        if (v[i].buf && v[i].fd < 0) {
            int rc = img_blob_put(s, v[i].digest, v[i].buf, v[i].len, err);
            if (rc)
                return rc;
            continue;
        }
        struct img_blob_w w;
        uint64_t have;
        int rc = img_blob_begin(s, v[i].digest, &w, &have, err);
        if (rc == 1)
            continue;
        if (rc)
            return rc;
        if (ftruncate(w.fd, 0) || lseek(w.fd, 0, SEEK_SET) || (rc = copy_fd(v[i].fd, w.fd, v[i].size))) {
            rc = rc ? rc : -errno;
            img_blob_abort(s, &w, 0);
            return img_err(err, rc, "cannot copy %s into the store: %s", v[i].what, strerror(-rc));
        }
        if ((rc = img_blob_commit(s, &w, v[i].size, err)))
            return rc;
    }
    return 0;
}

/* The name an archive gives, checked: a reference, not a bare tag. */
static int check_name(const char *name, unsigned i, char canon[512], struct img_err *err)
{
    struct img_ref r;
    if (!name[0])
        return img_err(err, -EINVAL, "image %u of the archive has no name: give --tag REF", i);
    if (!strchr(name, '/') && !strchr(name, ':'))
        return img_err(err, -EINVAL, "the archive names image %u only by the tag \"%s\": give --tag REF", i, name);
    int rc = img_ref_parse(name, &r, err);
    if (!rc && img_ref_format(&r, canon, 512))
        rc = img_err(err, -ENAMETOOLONG, "reference \"%s\" is too long", name);
    return rc ? img_err(err, rc, "image %u of the archive: its name is no reference", i) : 0;
}

static int check_config(const struct blob_src *cfg, unsigned nlayer, struct img_config *c,
                        struct img_err *err)
{
    int rc = img_config_parse(cfg->buf, cfg->len, c, err);
    if (rc)
        return img_err(err, rc, "%s: not a usable image config", cfg->what);
    if (c->ndiff != nlayer)
        rc = img_err(err, -EINVAL, "%s lists %u layers (rootfs.diff_ids), the manifest %u", cfg->what,
                     c->ndiff, nlayer);
    return rc;
}

static struct blob_src *srcs_new(unsigned n, struct img_err *err)
{
    struct blob_src *v = calloc(n, sizeof *v);
    if (!v) {
        img_err(err, -ENOMEM, "out of memory");
        return NULL;
    }
    for (unsigned i = 0; i < n; i++)
        v[i].fd = -1;
    return v;
}

/* Store layers (v[2..]), then the config (v[1]), then the manifest (v[0]):
 * a manifest in the store has its blobs there. */
static int store_image(struct img_store *s, struct blob_src *v, unsigned nlayer, struct img_err *err)
{
    int rc = store_all(s, v + 2, nlayer, err);
    if (!rc)
        rc = store_all(s, v + 1, 1, err);
    return rc ? rc : store_all(s, v, 1, err);
}

/* One image of an OCI layout: desc a manifest, or an index to pick the
 * platform's from. Everything checked before anything is stored. */
static int oci_image(struct img_store *s, int dfd, struct img_desc desc, const char *platform,
                     char digest[IMG_DIGEST_MAX], struct img_err *err)
{
    struct blob_src *v = srcs_new(IMG_MAX_LAYERS + 2, err), ix = { .fd = -1 };
    struct img_manifest *m = malloc(sizeof *m);
    int rc = v && m ? 0 : img_err(err, -ENOMEM, "out of memory");
    if (!rc && desc.kind == IMG_K_INDEX) {
        if (!(rc = layout_blob(dfd, &desc, &ix, err)) && !(rc = slurp(&ix, err)))
            rc = img_index_pick(ix.buf, ix.len, platform, &desc, err);
        srcs_free(&ix, 1);
    } else if (!rc && desc.kind != IMG_K_MANIFEST) {
        rc = img_err(err, -EINVAL, "index.json lists %s of media type \"%s\": not an image", desc.digest,
                     desc.media_type);
    }
    if (!rc && !(rc = layout_blob(dfd, &desc, &v[0], err)) && !(rc = slurp(&v[0], err)))
        rc = img_manifest_parse(v[0].buf, v[0].len, m, err);
    if (!rc && !(rc = layout_blob(dfd, &m->config, &v[1], err)) && !(rc = slurp(&v[1], err))) {
        struct img_config c;
        rc = check_config(&v[1], m->nlayer, &c, err);
        img_config_free(&c);
    }
    for (unsigned k = 0; !rc && k < m->nlayer; k++)
        rc = layout_blob(dfd, &m->layer[k], &v[2 + k], err);
    if (!rc && !(rc = store_image(s, v, m->nlayer, err)))
        strcpy(digest, desc.digest);
    if (v)
        srcs_free(v, IMG_MAX_LAYERS + 2);
    free(v);
    free(m);
    return rc;
}

static int import_oci(struct img_store *s, int dfd, const char *tag, const char *platform,
                      img_import_cb cb, void *arg, struct img_err *err)
{
    char *b;
    size_t len;
    int rc = read_small(dfd, "index.json", &b, &len, err), n = 0;
    struct img_layout_ent *v = rc ? NULL : calloc(IMG_ARCHIVE_MAX_IMAGES, sizeof *v);
    char (*canon)[512] = v ? calloc(IMG_ARCHIVE_MAX_IMAGES, 512) : NULL;
    if (!rc && !canon)
        rc = img_err(err, -ENOMEM, "out of memory");
    if (!rc && (n = img_layout_index_parse(b, len, v, IMG_ARCHIVE_MAX_IMAGES, err)) < 0)
        rc = n;
    if (!rc && n == 0)
        rc = img_err(err, -EINVAL, "the layout's index.json lists no images");
    if (!rc && tag && n != 1)
        rc = img_err(err, -EINVAL, "the layout holds %d images: --tag names one image; without it each "
                     "keeps the name index.json gives it", n);
    for (int i = 0; !rc && i < n; i++)
        rc = check_name(tag ? tag : v[i].name, (unsigned)i, canon[i], err);
    for (int i = 0; !rc && i < n; i++) {
        char digest[IMG_DIGEST_MAX];
        if (!(rc = oci_image(s, dfd, v[i].desc, platform, digest, err)) &&
            !(rc = img_tag_set(s, canon[i], digest, err)) && cb)
            cb(canon[i], digest, arg);
    }
    free(b);
    free(v);
    free(canon);
    return rc ? rc : n;
}

/* "sha256:HEX" if path's last part is HEX, HEX.json or HEX.tar; else "". */
static void name_digest(const char *path, char out[IMG_DIGEST_MAX])
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    out[0] = '\0';
    if (n == 64 || (n == 69 && (!strcmp(base + 64, ".json"))) || (n == 68 && !strcmp(base + 64, ".tar")))
        snprintf(out, IMG_DIGEST_MAX, "sha256:%.64s", base);
    if (!img_digest_valid(out))
        out[0] = '\0';
}

static const char *layer_type(int fd)
{
    uint8_t m[4] = { 0 };
    if (pread_full(fd, m, 4, 0) == 4 && m[0] == 0x28 && m[1] == 0xb5 && m[2] == 0x2f && m[3] == 0xfd)
        return "application/vnd.oci.image.layer.v1.tar+zstd";
    if (m[0] == 0x1f && m[1] == 0x8b)
        return "application/vnd.oci.image.layer.v1.tar+gzip";
    return "application/vnd.oci.image.layer.v1.tar";
}

/* A docker save layer opened and checked; *type its media type. */
static int docker_layer(int dfd, const char *path, const char *diff_id, struct blob_src *b,
                        const char **type, struct img_err *err)
{
    char named[IMG_DIGEST_MAX];
    struct stat st;
    snprintf(b->what, sizeof b->what, "the archive's %s", path);
    b->fd = open_in(dfd, path);
    if (b->fd < 0 || fstat(b->fd, &st) || !S_ISREG(st.st_mode))
        return img_err(err, -EINVAL, "%s: %s", b->what, b->fd < 0 ? open_why(errno) : "not a file");
    int rc = img_sha256_fd(b->fd, b->digest, &b->size);
    if (rc)
        return img_err(err, rc, "cannot read %s: %s", b->what, strerror(-rc));
    *type = layer_type(b->fd);
    name_digest(path, named);
    if (!strcmp(*type, "application/vnd.oci.image.layer.v1.tar") && strcmp(b->digest, diff_id))
        return img_err(err, -EBADMSG, "%s is corrupt: its content has digest %s, the config's diff_id is %s",
                       b->what, b->digest, diff_id);
    if (named[0] && strcmp(named, b->digest) && strcmp(named, diff_id))
        return img_err(err, -EBADMSG, "%s is corrupt: its content has digest %s", b->what, b->digest);
    return 0;
}

static int docker_manifest(struct blob_src *v, const char **types, unsigned nlayer, struct img_err *err)
{
    json_t *layers = json_array();
    for (unsigned k = 0; layers && k < nlayer; k++)
        json_array_append_new(layers, json_pack("{s:s, s:s, s:I}", "mediaType", types[k], "digest",
                                                v[2 + k].digest, "size", (json_int_t)v[2 + k].size));
    json_t *m = json_pack("{s:i, s:s, s:{s:s, s:s, s:I}, s:o}", "schemaVersion", 2, "mediaType", OCI_MANIFEST,
                          "config", "mediaType", OCI_CONFIG, "digest", v[1].digest, "size",
                          (json_int_t)v[1].size, "layers", layers);
    v[0].buf = m ? json_dumps(m, JSON_COMPACT) : NULL;
    json_decref(m);
    if (!v[0].buf)
        return img_err(err, -ENOMEM, "out of memory");
    v[0].len = v[0].size = strlen(v[0].buf);
    img_sha256(v[0].buf, v[0].len, v[0].digest);
    return 0;
}

/* One image of a docker save archive: its layers stored by their own
 * digest, its config as is, and an OCI manifest made for them. */
static int docker_image(struct img_store *s, int dfd, const struct img_docker_ent *e,
                        char digest[IMG_DIGEST_MAX], struct img_err *err)
{
    struct blob_src *v = srcs_new(IMG_MAX_LAYERS + 2, err);
    const char *types[IMG_MAX_LAYERS];
    struct img_config c = { 0 };
    char named[IMG_DIGEST_MAX];
    int rc = v ? read_small(dfd, e->config, &v[1].buf, &v[1].len, err) : -ENOMEM;
    if (!rc) {
        snprintf(v[1].what, sizeof v[1].what, "the archive's %s", e->config);
        img_sha256(v[1].buf, v[1].len, v[1].digest);
        v[1].size = v[1].len;
        name_digest(e->config, named);
        if (named[0] && strcmp(named, v[1].digest))
            rc = img_err(err, -EBADMSG, "%s is corrupt: its content has digest %s", v[1].what, v[1].digest);
    }
    if (!rc)
        rc = check_config(&v[1], e->nlayer, &c, err);
    for (unsigned k = 0; !rc && k < e->nlayer; k++)
        rc = docker_layer(dfd, e->layers[k], c.diff_ids[k], &v[2 + k], &types[k], err);
    if (!rc)
        rc = docker_manifest(v, types, e->nlayer, err);
    if (!rc && !(rc = store_image(s, v, e->nlayer, err)))
        strcpy(digest, v[0].digest);
    img_config_free(&c);
    if (v)
        srcs_free(v, IMG_MAX_LAYERS + 2);
    free(v);
    return rc;
}

static int import_docker(struct img_store *s, int dfd, const char *tag, img_import_cb cb, void *arg,
                         struct img_err *err)
{
    char *b, canon[512];
    size_t len;
    int rc = read_small(dfd, "manifest.json", &b, &len, err), n = 0;
    struct img_docker_ent *v = rc ? NULL : calloc(IMG_ARCHIVE_MAX_IMAGES, sizeof *v);
    if (!rc && !v)
        rc = img_err(err, -ENOMEM, "out of memory");
    if (!rc && (n = img_docker_manifest_parse(b, len, v, IMG_ARCHIVE_MAX_IMAGES, err)) < 0)
        rc = n;
    if (!rc && tag && n != 1)
        rc = img_err(err, -EINVAL, "the archive holds %d images: --tag names one image; without it each "
                     "keeps its RepoTags", n);
    for (int i = 0; !rc && i < n; i++)     /* every name checked before anything is stored */
        for (unsigned t = 0; !rc && t < (tag ? 1 : v[i].ntag ? v[i].ntag : 1); t++)
            rc = check_name(tag ? tag : v[i].ntag ? v[i].tags[t] : "", (unsigned)i, canon, err);
    for (int i = 0; !rc && i < n; i++) {
        char digest[IMG_DIGEST_MAX];
        rc = docker_image(s, dfd, &v[i], digest, err);
        for (unsigned t = 0; !rc && t < (tag ? 1 : v[i].ntag); t++)
            if (!(rc = check_name(tag ? tag : v[i].tags[t], (unsigned)i, canon, err)) &&
                !(rc = img_tag_set(s, canon, digest, err)) && cb)
                cb(canon, digest, arg);
    }
    free(b);
    free(v);
    return rc ? rc : n;
}

static int import_dir(struct img_store *s, int dfd, const char *path, const char *tag,
                      const char *platform, img_import_cb cb, void *arg, struct img_err *err)
{
    int rc;
    if (!faccessat(dfd, "oci-layout", F_OK, 0) && !faccessat(dfd, "index.json", F_OK, 0))
        rc = import_oci(s, dfd, tag, platform, cb, arg, err);
    else if (!faccessat(dfd, "manifest.json", F_OK, 0))
        rc = import_docker(s, dfd, tag, cb, arg, err);
    else
        return img_err(err, -EINVAL, "%s is neither an OCI image layout (oci-layout, index.json) nor a "
                       "docker save archive (manifest.json)", path);
    return rc < 0 ? img_err(err, rc, "%s: not imported", path) : rc;
}

/* A tar unpacked into tmp/import-XXXXXX (locked: prune leaves it), then
 * imported as a folder. */
static int import_tar(struct img_store *s, const char *path, const char *tag, const char *platform,
                      img_import_cb cb, void *arg, struct img_err *err)
{
    char dir[PATH_MAX];
    if ((size_t)snprintf(dir, sizeof dir, "%s/tmp/import-XXXXXX", s->root) >= sizeof dir || !mkdtemp(dir))
        return img_err(err, -errno, "cannot make a folder in %s/tmp: %s", s->root, strerror(errno));
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), fd = -1, rc = 0;
    if (dfd < 0 || flock(dfd, LOCK_EX))
        rc = img_err(err, -errno, "cannot open %s: %s", dir, strerror(errno));
    if (!rc && (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        rc = img_err(err, -errno, "cannot open %s: %s", path, strerror(errno));
    if (!rc && (rc = tar_extract(fd, dfd, err)))
        img_err(err, rc, "%s: not a tar archive moat can read", path);
    if (!rc)
        rc = import_dir(s, dfd, path, tag, platform, cb, arg, err);
    if (fd >= 0)
        close(fd);
    img_rm_tree_at(s->dfd, dir + strlen(s->root) + 1, 0);
    if (dfd >= 0)
        close(dfd);
    return rc;
}

int img_import(struct img_store *s, const char *path, const char *tag, const char *platform,
               img_import_cb cb, void *arg, struct img_err *err)
{
    struct img_ref r;
    struct stat st;
    if (tag && img_ref_parse(tag, &r, err))
        return img_err(err, -EINVAL, "--tag %s is no reference", tag);
    if (stat(path, &st))
        return img_err(err, -errno, "%s: %s", path, strerror(errno));
    if (S_ISREG(st.st_mode))
        return import_tar(s, path, tag, platform, cb, arg, err);
    if (!S_ISDIR(st.st_mode))
        return img_err(err, -EINVAL, "%s is neither a folder nor a file", path);
    int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return img_err(err, -errno, "cannot open %s: %s", path, strerror(errno));
    int rc = import_dir(s, dfd, path, tag, platform, cb, arg, err);
    close(dfd);
    return rc;
}
