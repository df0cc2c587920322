/* The store's references (refs/index) and what reads them: img_tag_set,
 * img_image_load, the listing, removal (vmm/image/store.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vmm/base/fullio.h"
#include "vmm/image/ref.h"
#include "vmm/image/store.h"
#include "vmm/image/store_int.h"

#define REFS_FILE "refs/index"
#define REFS_LOCK "refs/lock"

static int parse_refs(char *b, struct img_refent *v, size_t *n, struct img_err *err)
{
    size_t line = 0;
    for (char *p = b, *e; *p; p = e + 1) {
        line++;
        e = strchr(p, '\n');
        if (!e)
            return img_err(err, -EINVAL, "%s: line %zu has no end", REFS_FILE, line);
        *e = '\0';
        char *sp = strchr(p, ' ');
        if (!sp || (size_t)(sp - p) >= IMG_DIGEST_MAX || strlen(sp + 1) >= sizeof v->ref || !sp[1])
            return img_err(err, -EINVAL, "%s: line %zu is not \"DIGEST REFERENCE\"", REFS_FILE, line);
        *sp = '\0';
        if (!img_digest_valid(p))
            return img_err(err, -EINVAL, "%s: line %zu has a bad digest", REFS_FILE, line);
        if (*n >= IMG_MAX_REFS)
            return img_err(err, -E2BIG, "%s: more than %d references", REFS_FILE, IMG_MAX_REFS);
        strcpy(v[*n].digest, p);
        strcpy(v[*n].ref, sp + 1);
        (*n)++;
    }
    return 0;
}

int img_refs_read(const struct img_store *s, struct img_refent **v, size_t *n, struct img_err *err)
{
    *v = NULL;
    *n = 0;
    int fd = openat(s->dfd, REFS_FILE, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 && errno == ENOENT)
        return 0;
    if (fd < 0)
        return img_err(err, -errno, "cannot open %s/%s: %s", s->root, REFS_FILE, strerror(errno));
    size_t max = (size_t)IMG_MAX_REFS * (sizeof(struct img_refent) + 2);
    char *b = malloc(max + 2);
    ssize_t got = b ? read_full(fd, b, max + 1) : -ENOMEM;
    close(fd);
    int rc = 0;
    if (got < 0)
        rc = img_err(err, (int)got, "cannot read %s/%s", s->root, REFS_FILE);
    else if ((size_t)got > max)
        rc = img_err(err, -E2BIG, "%s/%s is larger than %zu bytes", s->root, REFS_FILE, max);
    if (!rc && got >= 0 && (size_t)got <= max) {
        b[got] = '\0';
        size_t lines = 1;
        for (ssize_t i = 0; i < got; i++)
            lines += b[i] == '\n';
        *v = calloc(lines, sizeof **v);
        rc = *v ? parse_refs(b, *v, n, err) : img_err(err, -ENOMEM, "out of memory");
    }
    free(b);
    if (rc) {
        free(*v);
        *v = NULL;
        *n = 0;
    }
    return rc;
}

int img_refs_write(struct img_store *s, const struct img_refent *v, size_t n, struct img_err *err)
{
    const char *tmp = REFS_FILE ".tmp";
    int fd = openat(s->dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return img_err(err, -errno, "cannot create %s/%s: %s", s->root, tmp, strerror(errno));
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        char line[sizeof v->ref + IMG_DIGEST_MAX + 2];
        int len = snprintf(line, sizeof line, "%s %s\n", v[i].digest, v[i].ref);
        if (write_full(fd, line, (size_t)len) != len)
            rc = -errno;
    }
    if (!rc && fsync(fd))
        rc = -errno;
    close(fd);
    if (!rc && renameat(s->dfd, tmp, s->dfd, REFS_FILE))
        rc = -errno;
    if (rc) {
        unlinkat(s->dfd, tmp, 0);
        return img_err(err, rc, "cannot write %s/%s: %s", s->root, REFS_FILE, strerror(-rc));
    }
    int d = openat(s->dfd, "refs", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d >= 0) {
        fsync(d);
        close(d);
    }
    return 0;
}

static int canonical(const char *ref, char *out, size_t len, struct img_err *err)
{
    struct img_ref r;
    int rc = img_ref_parse(ref, &r, err);
    if (rc)
        return rc;
    if (img_ref_format(&r, out, len))
        return img_err(err, -ENAMETOOLONG, "reference \"%s\" is too long", ref);
    return 0;
}

int img_tag_set(struct img_store *s, const char *ref, const char *manifest_digest,
                struct img_err *err)
{
    char canon[512];
    int rc = canonical(ref, canon, sizeof canon, err);
    if (rc)
        return rc;
    if (!img_digest_valid(manifest_digest))
        return img_err(err, -EINVAL, "\"%.80s\" is not a sha256 digest", manifest_digest);
    int lk = img_store_lock(s, REFS_LOCK, 0);
    if (lk < 0)
        return img_err(err, lk, "cannot lock %s/%s: %s", s->root, REFS_LOCK, strerror(-lk));
    struct img_refent *v, *grown;
    size_t n, i;
    rc = img_refs_read(s, &v, &n, err);
    for (i = 0; !rc && i < n && strcmp(v[i].ref, canon); i++)
        ;
    if (!rc && i == n && n >= IMG_MAX_REFS)
        rc = img_err(err, -E2BIG, "the store holds %d references, its limit", IMG_MAX_REFS);
    if (!rc && i == n) {
        if (!(grown = realloc(v, (n + 1) * sizeof *v)))
            rc = img_err(err, -ENOMEM, "out of memory");
        else
            v = grown, n++;
    }
    if (!rc) {
        strcpy(v[i].ref, canon);
        strcpy(v[i].digest, manifest_digest);
        rc = img_refs_write(s, v, n, err);
    }
    free(v);
    close(lk);
    return rc;
}

static int is_hex(const char *p)
{
    if (!*p)
        return 0;
    for (; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return 0;
    return 1;
}

/* What name names: *ref the matching reference ("" if by digest), *digest
 * the manifest digest. -ENOENT if nothing, -EINVAL if ambiguous. */
int img_resolve(const struct img_store *s, const char *name, char ref[512],
                char digest[IMG_DIGEST_MAX], struct img_err *err)
{
    struct img_refent *v;
    size_t n;
    int rc = img_refs_read(s, &v, &n, err);
    if (rc)
        return rc;
    ref[0] = digest[0] = '\0';
    char canon[512] = "";
    struct img_ref r;
    if (!img_ref_parse(name, &r, NULL) && !img_ref_format(&r, canon, sizeof canon)) {
        for (size_t i = 0; i < n && !digest[0]; i++)
            if (!strcmp(v[i].ref, canon))
                strcpy(ref, v[i].ref), strcpy(digest, v[i].digest);
        if (!digest[0] && r.digest[0] && img_blob_has(s, r.digest, NULL) == 1)
            strcpy(digest, r.digest);
    }
    const char *hex = !strncmp(name, "sha256:", 7) ? name + 7 : name;
    if (!digest[0] && is_hex(hex) && strlen(hex) <= 64) {
        int found = 0;
        for (size_t i = 0; i < n && found < 2; i++)
            if (!strncmp(v[i].digest + 7, hex, strlen(hex)) && strcmp(v[i].digest, digest))
                found++, strcpy(digest, v[i].digest);
        if (found > 1)
            rc = img_err(err, -EINVAL, "\"%s\" is the start of more than one image's digest: give more of it", name);
        if (!found && strlen(hex) == 64 && img_blob_has(s, name, NULL) == 1)
            strcpy(digest, name);
    }
    free(v);
    if (!rc && !digest[0])
        rc = img_err(err, -ENOENT, "no image \"%s\" in the store (moat image ls lists them)", name);
    return rc;
}

int img_manifest_load(const struct img_store *s, char mdigest[IMG_DIGEST_MAX],
                      struct img_manifest *m, struct img_err *err)
{
    char *b;
    size_t len;
    int rc = img_blob_read(s, mdigest, &b, &len, IMG_JSON_MAX, err);
    if (rc)
        return rc;
    if (img_json_kind(b, len) == IMG_K_INDEX) {
        struct img_desc d;
        rc = img_index_pick(b, len, NULL, &d, err);
        free(b);
        if (rc)
            return img_err(err, rc, "image %s: no linux/amd64 manifest in its index", mdigest);
        strcpy(mdigest, d.digest);
        if ((rc = img_blob_read(s, mdigest, &b, &len, IMG_JSON_MAX, err)))
            return rc;
    }
    rc = img_manifest_parse(b, len, m, err);
    free(b);
    return rc ? img_err(err, rc, "image manifest %s is not usable", mdigest) : 0;
}

int img_image_load(const struct img_store *s, const char *name, struct img_image *im,
                   struct img_err *err)
{
    memset(im, 0, sizeof *im);
    int rc = img_resolve(s, name, im->ref, im->manifest_digest, err);
    if (rc || (rc = img_manifest_load(s, im->manifest_digest, &im->manifest, err)))
        return rc;
    strcpy(im->config_digest, im->manifest.config.digest);
    char *b;
    size_t len;
    if ((rc = img_blob_read(s, im->config_digest, &b, &len, IMG_JSON_MAX, err)))
        return rc;
    rc = img_config_parse(b, len, &im->config, err);
    free(b);
    if (rc)
        return img_err(err, rc, "image config %s is not usable", im->config_digest);
    if (im->config.ndiff != im->manifest.nlayer) {
        img_image_free(im);
        return img_err(err, -EINVAL, "image %s: its config lists %u layers (rootfs.diff_ids), its manifest %u",
                       name, im->config.ndiff, im->manifest.nlayer);
    }
    return 0;
}

void img_image_free(struct img_image *im)
{
    img_config_free(&im->config);
}

static void ls_fill(const struct img_store *s, const struct img_refent *e, struct img_ls_entry *out)
{
    struct img_image im;
    struct img_err err = { 0 };
    memset(out, 0, sizeof *out);
    strcpy(out->ref, e->ref);
    strcpy(out->manifest_digest, e->digest);
    if (img_ref_parse(e->ref, &out->parsed, &err) || img_image_load(s, e->digest, &im, &err)) {
        snprintf(out->error, sizeof out->error, "%.511s", err.msg);
        return;
    }
    uint64_t msize = 0;
    img_blob_has(s, im.manifest_digest, &msize);
    out->size = msize + im.manifest.config.size;
    for (unsigned i = 0; i < im.manifest.nlayer; i++)
        out->size += im.manifest.layer[i].size;
    out->nlayer = im.manifest.nlayer;
    strcpy(out->config_digest, im.config_digest);
    memcpy(out->created, im.config.created, sizeof out->created);
    snprintf(out->platform, sizeof out->platform, "%s/%s", im.config.os, im.config.arch);
    img_image_free(&im);
}

int img_store_list(const struct img_store *s, img_ls_cb cb, void *arg, struct img_err *err)
{
    struct img_refent *v;
    size_t n;
    int rc = img_refs_read(s, &v, &n, err);
    if (rc)
        return rc;
    struct img_ls_entry *e = malloc(sizeof *e);
    if (!e)
        rc = img_err(err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < n && !rc; i++) {
        ls_fill(s, &v[i], e);
        rc = cb(e, arg);
    }
    free(e);
    free(v);
    return rc < 0 ? rc : (int)n;
}

int img_image_rm(struct img_store *s, const char *name, struct img_err *err)
{
    char ref[512], digest[IMG_DIGEST_MAX];
    int lk = img_store_lock(s, REFS_LOCK, 0);
    if (lk < 0)
        return img_err(err, lk, "cannot lock %s/%s: %s", s->root, REFS_LOCK, strerror(-lk));
    int rc = img_resolve(s, name, ref, digest, err);
    struct img_refent *v = NULL;
    size_t n = 0, k = 0;
    if (!rc)
        rc = img_refs_read(s, &v, &n, err);
    for (size_t i = 0; !rc && i < n; i++)      /* by reference: it; by digest: all its */
        if (ref[0] ? strcmp(v[i].ref, ref) : strcmp(v[i].digest, digest))
            v[k++] = v[i];
    if (!rc && k == n)
        rc = img_err(err, -ENOENT, "no reference names image \"%s\"", name);
    if (!rc)
        rc = img_refs_write(s, v, k, err);
    free(v);
    close(lk);
    return rc ? rc : (int)(n - k);
}
