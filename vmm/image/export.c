/* img_export (vmm/image/layout.h): an image as an OCI image layout, a
 * folder or a tar archive. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vmm/base/fullio.h"
#include "vmm/image/layout.h"
#include "vmm/image/store_int.h"
#include "vmm/image/tar.h"

#define LAYOUT_FILE "{\"imageLayoutVersion\":\"1.0.0\"}"

/* The layout's index.json: one manifest, named by its tag (skopeo's
 * oci:DIR:TAG) and by its whole reference (containerd's annotation). */
static char *index_json(const struct img_image *im, uint64_t msize)
{
    struct img_ref r;
    json_t *an = json_object();
    if (im->ref[0] && !img_ref_parse(im->ref, &r, NULL)) {
        json_object_set_new(an, "io.containerd.image.name", json_string(im->ref));
        if (r.tag[0])
            json_object_set_new(an, "org.opencontainers.image.ref.name", json_string(r.tag));
    }
    const char *mt = im->manifest.media_type[0] ? im->manifest.media_type
                                                : "application/vnd.oci.image.manifest.v1+json";
    json_t *idx = json_pack("{s:i, s:s, s:[{s:s, s:s, s:I, s:o}]}", "schemaVersion", 2, "mediaType",
                            "application/vnd.oci.image.index.v1+json", "manifests", "mediaType", mt,
                            "digest", im->manifest_digest, "size", (json_int_t)msize, "annotations", an);
    char *s = idx ? json_dumps(idx, JSON_COMPACT) : NULL;
    json_decref(idx);
    return s;
}

/* The image's blobs: manifest, config, layers (each once). */
static unsigned blob_list(const struct img_image *im, const char **v)
{
    unsigned n = 0;
    v[n++] = im->manifest_digest;
    v[n++] = im->config_digest;
    for (unsigned i = 0; i < im->manifest.nlayer; i++) {
        unsigned k;
        for (k = 0; k < n && strcmp(v[k], im->manifest.layer[i].digest); k++)
            ;
        if (k == n)
            v[n++] = im->manifest.layer[i].digest;
    }
    return n;
}

static int open_blob(const struct img_store *s, const char *digest, uint64_t *size, struct img_err *err)
{
    char rel[128];
    struct stat st;
    img_store_rel(rel, sizeof rel, "blobs/sha256", digest, "");
    int fd = openat(s->dfd, rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 || fstat(fd, &st)) {
        int e = -errno;
        if (fd >= 0)
            close(fd);
        return img_err(err, e, "blob %s: %s", digest, e == -ENOENT ? "not in the store" : strerror(-e));
    }
    *size = (uint64_t)st.st_size;
    return fd;
}

static int export_tar(const struct img_store *s, const struct img_image *im, const char **blobs,
                      unsigned n, const char *idx, const char *out, struct img_err *err)
{
    char tmp[PATH_MAX];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", out) >= sizeof tmp)
        return img_err(err, -ENAMETOOLONG, "%s: path too long", out);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);   /* not through a planted link */
    if (fd < 0)
        return img_err(err, -errno, "cannot create %s: %s", tmp, strerror(errno));
    int rc = tar_put_mem(fd, "oci-layout", LAYOUT_FILE, strlen(LAYOUT_FILE), err);
    if (!rc)
        rc = tar_put_mem(fd, "index.json", idx, strlen(idx), err);
    if (!rc && !(rc = tar_put_dir(fd, "blobs/", err)))
        rc = tar_put_dir(fd, "blobs/sha256/", err);
    for (unsigned i = 0; !rc && i < n; i++) {
        uint64_t size;
        char name[128];
        int b = open_blob(s, blobs[i], &size, err);
        if (b < 0) {
            rc = b;
            break;
        }
        img_store_rel(name, sizeof name, "blobs/sha256", blobs[i], "");
        rc = tar_put_file(fd, name, b, size, err);
        close(b);
    }
    if (!rc && !(rc = tar_put_end(fd, err)) && fsync(fd))
        rc = img_err(err, -errno, "cannot write %s: %s", tmp, strerror(errno));
    close(fd);
    if (!rc && rename(tmp, out))
        rc = img_err(err, -errno, "cannot rename %s to %s: %s", tmp, out, strerror(errno));
    if (rc)
        unlink(tmp);
    return rc;
}

static int write_at(int dfd, const char *name, const void *buf, size_t len, struct img_err *err)
{
    int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return img_err(err, -errno, "cannot create %s: %s", name, strerror(errno));
    int rc = write_full(fd, buf, len) == (ssize_t)len ? 0 : img_err(err, -errno, "cannot write %s", name);
    close(fd);
    return rc;
}

/* A blob into the folder: a hard link to the store's, or a copy. */
static int put_blob(const struct img_store *s, int dfd, const char *digest, struct img_err *err)
{
    char rel[128];
    img_store_rel(rel, sizeof rel, "blobs/sha256", digest, "");
    if (!linkat(s->dfd, rel, dfd, rel, 0))
        return 0;
    uint64_t size;
    int in = open_blob(s, digest, &size, err), rc = 0;
    if (in < 0)
        return in;
    int out = openat(dfd, rel, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (out < 0)
        rc = img_err(err, -errno, "cannot create %s: %s", rel, strerror(errno));
    char buf[65536];
    for (uint64_t off = 0; !rc && off < size;) {
        size_t k = size - off < sizeof buf ? (size_t)(size - off) : sizeof buf;
        if (pread_full(in, buf, k, (off_t)off) != (ssize_t)k || write_full(out, buf, k) != (ssize_t)k)
            rc = img_err(err, -EIO, "cannot copy blob %s", digest);
        off += k;
    }
    close(in);
    if (out >= 0)
        close(out);
    return rc;
}

static int export_dir(const struct img_store *s, const char **blobs, unsigned n, const char *idx,
                      const char *out, struct img_err *err)
{
    if (mkdir(out, 0755) && errno != EEXIST)
        return img_err(err, -errno, "cannot create %s: %s", out, strerror(errno));
    int dfd = open(out, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return img_err(err, -errno, "cannot open %s: %s", out, strerror(errno));
    int rc = 0;
    if (!faccessat(dfd, "index.json", F_OK, 0) || !faccessat(dfd, "oci-layout", F_OK, 0) ||
        !faccessat(dfd, "blobs", F_OK, 0))
        rc = img_err(err, -EEXIST, "%s is not empty: export writes a new layout", out);
    if (!rc && ((mkdirat(dfd, "blobs", 0755) && errno != EEXIST) ||
                (mkdirat(dfd, "blobs/sha256", 0755) && errno != EEXIST)))
        rc = img_err(err, -errno, "cannot create %s/blobs/sha256: %s", out, strerror(errno));
    for (unsigned i = 0; !rc && i < n; i++)
        rc = put_blob(s, dfd, blobs[i], err);
    if (!rc)
        rc = write_at(dfd, "oci-layout", LAYOUT_FILE, strlen(LAYOUT_FILE), err);
    if (!rc)
        rc = write_at(dfd, "index.json", idx, strlen(idx), err);
    close(dfd);
    return rc;
}

int img_export(const struct img_store *s, const char *name, const char *out, struct img_err *err)
{
    struct img_image im;
    int rc = img_image_load(s, name, &im, err);
    if (rc)
        return rc;
    uint64_t msize = 0;
    const char *blobs[IMG_MAX_LAYERS + 2];
    unsigned n = blob_list(&im, blobs);
    char *idx = img_blob_has(s, im.manifest_digest, &msize) == 1 ? index_json(&im, msize) : NULL;
    size_t len = strlen(out);
    if (!idx)
        rc = img_err(err, -ENOMEM, "cannot make the layout's index.json");
    else if (len > 4 && !strcmp(out + len - 4, ".tar"))
        rc = export_tar(s, &im, blobs, n, idx, out, err);
    else
        rc = export_dir(s, blobs, n, idx, out, err);
    free(idx);
    img_image_free(&im);
    return rc;
}
