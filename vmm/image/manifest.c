/* OCI and Docker image JSON (vmm/image/manifest.h), pure, on libjansson.
 * Every field moat reads is checked; everything malformed is -EINVAL with
 * a sentence saying what. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/image/manifest.h"

#define IDX_MAX_ENTRIES 1024        /* manifests in one index */
#define CFG_MAX_STRINGS 4096        /* entries of Entrypoint, Cmd, Env */
#define BLOB_MAX_SIZE   (1ull << 42) /* 4 TiB: more is no layer */

static const struct {
    const char *type;
    enum img_kind kind;
    enum img_comp comp;
} media[] = {
    { "application/vnd.oci.image.index.v1+json", IMG_K_INDEX, IMG_COMP_NONE },
    { "application/vnd.docker.distribution.manifest.list.v2+json", IMG_K_INDEX, IMG_COMP_NONE },
    { "application/vnd.oci.image.manifest.v1+json", IMG_K_MANIFEST, IMG_COMP_NONE },
    { "application/vnd.docker.distribution.manifest.v2+json", IMG_K_MANIFEST, IMG_COMP_NONE },
    { "application/vnd.oci.image.config.v1+json", IMG_K_CONFIG, IMG_COMP_NONE },
    { "application/vnd.docker.container.image.v1+json", IMG_K_CONFIG, IMG_COMP_NONE },
    { "application/vnd.oci.image.layer.v1.tar", IMG_K_LAYER, IMG_COMP_NONE },
    { "application/vnd.oci.image.layer.v1.tar+gzip", IMG_K_LAYER, IMG_COMP_GZIP },
    { "application/vnd.oci.image.layer.v1.tar+zstd", IMG_K_LAYER, IMG_COMP_ZSTD },
    { "application/vnd.oci.image.layer.nondistributable.v1.tar", IMG_K_LAYER, IMG_COMP_NONE },
    { "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip", IMG_K_LAYER, IMG_COMP_GZIP },
    { "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd", IMG_K_LAYER, IMG_COMP_ZSTD },
    { "application/vnd.docker.image.rootfs.diff.tar", IMG_K_LAYER, IMG_COMP_NONE },
    { "application/vnd.docker.image.rootfs.diff.tar.gzip", IMG_K_LAYER, IMG_COMP_GZIP },
    { "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip", IMG_K_LAYER, IMG_COMP_GZIP },
};

static int is_schema1(const char *t)
{
    return t && !strncmp(t, "application/vnd.docker.distribution.manifest.v1+", 48);
}

enum img_kind img_media_kind(const char *media_type, enum img_comp *comp)
{
    if (comp)
        *comp = IMG_COMP_NONE;
    if (!media_type)
        return IMG_K_UNKNOWN;
    size_t n = strcspn(media_type, "; \t");     /* Content-Type parameters */
    for (size_t i = 0; i < sizeof media / sizeof media[0]; i++)
        if (strlen(media[i].type) == n && !strncasecmp(media[i].type, media_type, n)) {
            if (comp)
                *comp = media[i].comp;
            return media[i].kind;
        }
    return IMG_K_UNKNOWN;
}

static json_t *load(const char *json, size_t len, const char *what, struct img_err *err)
{
    if (len > IMG_JSON_MAX) {
        img_err(err, -EINVAL, "the %s is %zu bytes, more than the limit of %u", what, len, IMG_JSON_MAX);
        return NULL;
    }
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        img_err(err, -EINVAL, "the %s is not valid JSON: %s (line %d, column %d)",
                what, je.text, je.line, je.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        img_err(err, -EINVAL, "the %s is not a JSON object", what);
        return NULL;
    }
    return root;
}

/* An optional string field: 0 (and *out NULL if absent), or -EINVAL. */
static int opt_str(json_t *o, const char *key, const char *what, const char **out, struct img_err *err)
{
    json_t *v = json_object_get(o, key);
    *out = NULL;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return img_err(err, -EINVAL, "%s: \"%s\" is not a string", what, key);
    *out = json_string_value(v);
    return 0;
}

static int copy_field(char *dst, size_t n, const char *src, const char *what, const char *key,
                      struct img_err *err)
{
    if (!src) {
        dst[0] = '\0';
        return 0;
    }
    if (strlen(src) >= n)
        return img_err(err, -EINVAL, "%s: \"%s\" is longer than %zu bytes", what, key, n - 1);
    strcpy(dst, src);
    return 0;
}

static int check_schema(json_t *root, const char *what, struct img_err *err)
{
    json_t *v = json_object_get(root, "schemaVersion");
    if (!v)
        return img_err(err, -EINVAL, "the %s has no schemaVersion", what);
    if (!json_is_integer(v))
        return img_err(err, -EINVAL, "the %s's schemaVersion is not an integer", what);
    if (json_integer_value(v) == 1)
        return img_err(err, -EINVAL, "the %s is a Docker schema 1 manifest, which moat does not read "
                       "(deprecated since 2017: push the image again with a current client)", what);
    if (json_integer_value(v) != 2)
        return img_err(err, -EINVAL, "the %s's schemaVersion is %lld, not 2", what,
                       (long long)json_integer_value(v));
    return 0;
}

/* A descriptor {mediaType, digest, size[, platform]} into d. */
static int parse_desc(json_t *o, const char *what, struct img_desc *d, struct img_err *err)
{
    memset(d, 0, sizeof *d);
    if (!json_is_object(o))
        return img_err(err, -EINVAL, "%s is not a JSON object", what);
    const char *mt, *dg;
    int rc = opt_str(o, "mediaType", what, &mt, err);
    if (!rc)
        rc = opt_str(o, "digest", what, &dg, err);
    if (rc)
        return rc;
    if (!mt)
        return img_err(err, -EINVAL, "%s has no mediaType", what);
    if ((rc = copy_field(d->media_type, sizeof d->media_type, mt, what, "mediaType", err)))
        return rc;
    d->kind = img_media_kind(mt, &d->comp);
    if (!dg)
        return img_err(err, -EINVAL, "%s has no digest", what);
    if (!img_digest_valid(dg))
        return img_err(err, -EINVAL, "%s: digest \"%.80s\" is not sha256: and 64 lowercase hex digits",
                       what, dg);
    strcpy(d->digest, dg);
    json_t *sz = json_object_get(o, "size");
    if (!sz)
        return img_err(err, -EINVAL, "%s has no size", what);
    if (!json_is_integer(sz) || json_integer_value(sz) < 0 ||
        (uint64_t)json_integer_value(sz) > BLOB_MAX_SIZE)
        return img_err(err, -EINVAL, "%s: size is not an integer from 0 to %llu", what, BLOB_MAX_SIZE);
    d->size = (uint64_t)json_integer_value(sz);
    json_t *p = json_object_get(o, "platform");
    if (!p)
        return 0;
    if (!json_is_object(p))
        return img_err(err, -EINVAL, "%s: platform is not a JSON object", what);
    const char *os, *arch, *var;
    if ((rc = opt_str(p, "os", what, &os, err)) || (rc = opt_str(p, "architecture", what, &arch, err)) ||
        (rc = opt_str(p, "variant", what, &var, err)))
        return rc;
    if ((rc = copy_field(d->os, sizeof d->os, os, what, "os", err)) ||
        (rc = copy_field(d->arch, sizeof d->arch, arch, what, "architecture", err)))
        return rc;
    return copy_field(d->variant, sizeof d->variant, var, what, "variant", err);
}

/* The document's own mediaType, if any, must be one of kind want. */
static int check_own_type(json_t *root, enum img_kind want, const char *what, struct img_err *err)
{
    const char *mt;
    int rc = opt_str(root, "mediaType", what, &mt, err);
    if (rc || !mt)
        return rc;
    if (is_schema1(mt))
        return img_err(err, -EINVAL, "the %s is a Docker schema 1 manifest (%s), which moat does not "
                       "read (deprecated since 2017: push the image again with a current client)", what, mt);
    enum img_kind k = img_media_kind(mt, NULL);
    if (k != want)
        return img_err(err, -EINVAL, "the %s has mediaType \"%.100s\", not an %s", what, mt,
                       want == IMG_K_INDEX ? "index or manifest list" : "image manifest");
    return 0;
}

static void norm_arch(const char *in, char *out, size_t n)
{
    if (!strcmp(in, "x86_64") || !strcmp(in, "x86-64"))
        in = "amd64";
    else if (!strcmp(in, "aarch64"))
        in = "arm64";
    snprintf(out, n, "%s", in);
}

/* "os/arch[/variant]" into its parts. */
static int split_platform(const char *p, char os[32], char arch[32], char var[32], struct img_err *err)
{
    char a[32] = "";
    os[0] = arch[0] = var[0] = '\0';
    if (sscanf(p, "%31[^/]/%31[^/]/%31s", os, a, var) < 2 || strlen(p) > 95)
        return img_err(err, -EINVAL, "platform \"%.100s\" is not os/arch or os/arch/variant", p);
    norm_arch(a, arch, 32);
    return 0;
}

static int platform_matches(const struct img_desc *d, const char *os, const char *arch, const char *var)
{
    char da[32];
    norm_arch(d->arch, da, sizeof da);
    if (strcmp(d->os, os) || strcmp(da, arch))
        return 0;
    return !var[0] || !strcmp(d->variant, var);
}

static int index_entries(json_t *root, json_t **arr, struct img_err *err)
{
    int rc = check_schema(root, "index", err);
    if (!rc)
        rc = check_own_type(root, IMG_K_INDEX, "index", err);
    if (rc)
        return rc;
    *arr = json_object_get(root, "manifests");
    if (!*arr)
        return img_err(err, -EINVAL, "the index has no \"manifests\"%s",
                       json_object_get(root, "layers") ? " (it is a manifest, not an index)" : "");
    if (!json_is_array(*arr))
        return img_err(err, -EINVAL, "the index's \"manifests\" is not an array");
    if (json_array_size(*arr) > IDX_MAX_ENTRIES)
        return img_err(err, -EINVAL, "the index lists %zu manifests, more than the limit of %d",
                       json_array_size(*arr), IDX_MAX_ENTRIES);
    return 0;
}

static void list_platforms(json_t *arr, struct img_err *err)
{
    char line[1024] = "";
    size_t n = 0, i;
    json_t *e;
    json_array_foreach(arr, i, e) {
        struct img_desc d;
        if (parse_desc(e, "entry", &d, NULL) || d.kind == IMG_K_UNKNOWN || !d.os[0])
            continue;
        if (!strcmp(d.os, "unknown"))
            continue;           /* attestation manifests */
        int w = snprintf(line + n, sizeof line - n, "%s%s/%s%s%s", n ? ", " : "", d.os, d.arch,
                         d.variant[0] ? "/" : "", d.variant);
        if (w < 0 || (size_t)w >= sizeof line - n)
            break;
        n += (size_t)w;
    }
    img_err(err, -ENOENT, "the index has: %s", n ? line : "no platforms");
}

int img_index_pick(const char *json, size_t len, const char *platform,
                   struct img_desc *out, struct img_err *err)
{
    char os[32], arch[32], var[32];
    int rc = split_platform(platform ? platform : "linux/amd64", os, arch, var, err);
    if (rc)
        return rc;
    json_t *root = load(json, len, "index", err), *arr = NULL, *e;
    if (!root)
        return -EINVAL;
    if ((rc = index_entries(root, &arr, err)))
        goto out;
    size_t i;
    char what[64];
    rc = -ENOENT;
    json_array_foreach(arr, i, e) {
        struct img_desc d;
        snprintf(what, sizeof what, "index entry %zu", i);
        int r = parse_desc(e, what, &d, err);
        if (r) {
            rc = r;
            goto out;
        }
        if (d.kind == IMG_K_UNKNOWN || !platform_matches(&d, os, arch, var))
            continue;
        if (d.kind != IMG_K_MANIFEST) {
            rc = img_err(err, -EINVAL, "%s for %s/%s is an index itself (%s): nested indexes are "
                         "not supported", what, os, arch, d.media_type);
            goto out;
        }
        *out = d;
        rc = 0;
        goto out;
    }
    img_err(err, -ENOENT, "the index has no manifest for %s/%s%s%s", os, arch, var[0] ? "/" : "", var);
    list_platforms(arr, err);
out:
    json_decref(root);
    return rc;
}

static int manifest_layers(json_t *root, struct img_manifest *m, struct img_err *err)
{
    json_t *arr = json_object_get(root, "layers"), *e;
    if (!arr)
        return img_err(err, -EINVAL, "the manifest has no \"layers\"");
    if (!json_is_array(arr))
        return img_err(err, -EINVAL, "the manifest's \"layers\" is not an array");
    if (json_array_size(arr) == 0)
        return img_err(err, -EINVAL, "the manifest has no layers");
    if (json_array_size(arr) > IMG_MAX_LAYERS)
        return img_err(err, -EINVAL, "the manifest has %zu layers, more than the limit of %d",
                       json_array_size(arr), IMG_MAX_LAYERS);
    size_t i;
    char what[64];
    json_array_foreach(arr, i, e) {
        snprintf(what, sizeof what, "layer %zu", i);
        int rc = parse_desc(e, what, &m->layer[i], err);
        if (rc)
            return rc;
        if (m->layer[i].kind != IMG_K_LAYER)
            return img_err(err, -EINVAL, "%s has media type \"%.100s\", not a layer moat can unpack",
                           what, m->layer[i].media_type);
        m->nlayer = (unsigned)i + 1;
    }
    return 0;
}

int img_manifest_parse(const char *json, size_t len, struct img_manifest *m, struct img_err *err)
{
    memset(m, 0, sizeof *m);
    json_t *root = load(json, len, "manifest", err);
    if (!root)
        return -EINVAL;
    int rc = check_schema(root, "manifest", err);
    if (!rc)
        rc = check_own_type(root, IMG_K_MANIFEST, "manifest", err);
    if (!rc && json_object_get(root, "manifests"))
        rc = img_err(err, -EINVAL, "the manifest is an index (it lists \"manifests\")");
    const char *own;
    if (!rc && !opt_str(root, "mediaType", "manifest", &own, NULL) && own)
        snprintf(m->media_type, sizeof m->media_type, "%s", own);
    if (rc)
        goto out;
    json_t *cfg = json_object_get(root, "config");
    if (!cfg) {
        rc = img_err(err, -EINVAL, "the manifest has no \"config\"");
        goto out;
    }
    if ((rc = parse_desc(cfg, "the manifest's config", &m->config, err)))
        goto out;
    if (m->config.kind != IMG_K_CONFIG) {
        rc = img_err(err, -EINVAL, "the manifest's config has media type \"%.100s\": not a container "
                     "image config", m->config.media_type);
        goto out;
    }
    if (m->config.size > IMG_JSON_MAX) {
        rc = img_err(err, -EINVAL, "the manifest's config is %llu bytes, more than the limit of %u",
                     (unsigned long long)m->config.size, IMG_JSON_MAX);
        goto out;
    }
    rc = manifest_layers(root, m, err);
out:
    json_decref(root);
    if (rc)
        m->nlayer = 0;
    return rc;
}

void img_config_free(struct img_config *c)
{
    char **arrs[] = { c->entrypoint, c->cmd, c->env, c->diff_ids };
    for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++) {
        for (char **p = arrs[i]; p && *p; p++)
            free(*p);
        free(arrs[i]);
    }
    free(c->workdir);
    free(c->user);
    memset(c, 0, sizeof *c);
}

/* An optional array of strings (null counts as absent) into *out. */
static int str_array(json_t *o, const char *key, char ***out, unsigned *count, unsigned max,
                     struct img_err *err)
{
    json_t *a = json_object_get(o, key), *e;
    if (!a || json_is_null(a))
        return 0;
    if (!json_is_array(a))
        return img_err(err, -EINVAL, "the config's %s is not an array", key);
    if (json_array_size(a) > max)
        return img_err(err, -EINVAL, "the config's %s has %zu entries, more than the limit of %u",
                       key, json_array_size(a), max);
    char **v = calloc(json_array_size(a) + 1, sizeof *v);
    if (!v)
        return img_err(err, -ENOMEM, "out of memory");
    *out = v;
    size_t i;
    json_array_foreach(a, i, e) {
        if (!json_is_string(e))
            return img_err(err, -EINVAL, "the config's %s[%zu] is not a string", key, i);
        if (!(v[i] = strdup(json_string_value(e))))
            return img_err(err, -ENOMEM, "out of memory");
    }
    if (count)
        *count = (unsigned)i;
    return 0;
}

static int opt_dup(json_t *o, const char *key, char **out, struct img_err *err)
{
    const char *s;
    int rc = opt_str(o, key, "the config", &s, err);
    if (rc || !s)
        return rc;
    if (!(*out = strdup(s)))
        return img_err(err, -ENOMEM, "out of memory");
    return 0;
}

static int config_exec(json_t *root, struct img_config *c, struct img_err *err)
{
    json_t *cc = json_object_get(root, "config");
    if (!cc || json_is_null(cc))
        return 0;
    if (!json_is_object(cc))
        return img_err(err, -EINVAL, "the config's \"config\" is not a JSON object");
    int rc;
    if ((rc = str_array(cc, "Entrypoint", &c->entrypoint, NULL, CFG_MAX_STRINGS, err)) ||
        (rc = str_array(cc, "Cmd", &c->cmd, NULL, CFG_MAX_STRINGS, err)) ||
        (rc = str_array(cc, "Env", &c->env, NULL, CFG_MAX_STRINGS, err)) ||
        (rc = opt_dup(cc, "WorkingDir", &c->workdir, err)) || (rc = opt_dup(cc, "User", &c->user, err)))
        return rc;
    for (char **e = c->env; e && *e; e++)
        if (!strchr(*e, '=') || **e == '=')
            return img_err(err, -EINVAL, "the config's Env entry \"%.100s\" is not NAME=VALUE", *e);
    return 0;
}

static int config_rootfs(json_t *root, struct img_config *c, struct img_err *err)
{
    json_t *r = json_object_get(root, "rootfs");
    if (!r)
        return img_err(err, -EINVAL, "the config has no \"rootfs\"");
    if (!json_is_object(r))
        return img_err(err, -EINVAL, "the config's \"rootfs\" is not a JSON object");
    json_t *t = json_object_get(r, "type");
    if (!json_is_string(t) || strcmp(json_string_value(t), "layers"))
        return img_err(err, -EINVAL, "the config's rootfs.type is not \"layers\"");
    json_t *d = json_object_get(r, "diff_ids");
    if (!json_is_array(d))
        return img_err(err, -EINVAL, "the config's rootfs.diff_ids is %s", d ? "not an array" : "missing");
    int rc = str_array(r, "diff_ids", &c->diff_ids, &c->ndiff, IMG_MAX_LAYERS, err);
    if (rc)
        return rc;
    for (unsigned i = 0; i < c->ndiff; i++)
        if (!img_digest_valid(c->diff_ids[i]))
            return img_err(err, -EINVAL, "the config's rootfs.diff_ids[%u] \"%.80s\" is not sha256: and "
                           "64 lowercase hex digits", i, c->diff_ids[i]);
    return 0;
}

int img_config_parse(const char *json, size_t len, struct img_config *c, struct img_err *err)
{
    memset(c, 0, sizeof *c);
    json_t *root = load(json, len, "image config", err);
    if (!root)
        return -EINVAL;
    const char *os, *arch, *created;
    int rc;
    if ((rc = opt_str(root, "os", "the config", &os, err)) ||
        (rc = opt_str(root, "architecture", "the config", &arch, err)) ||
        (rc = opt_str(root, "created", "the config", &created, err)))
        goto out;
    if (!os || !arch) {
        rc = img_err(err, -EINVAL, "the config has no \"%s\"", os ? "architecture" : "os");
        goto out;
    }
    if ((rc = copy_field(c->os, sizeof c->os, os, "the config", "os", err)) ||
        (rc = copy_field(c->arch, sizeof c->arch, arch, "the config", "architecture", err)))
        goto out;
    snprintf(c->created, sizeof c->created, "%s", created ? created : "");
    if (!(rc = config_exec(root, c, err)))
        rc = config_rootfs(root, c, err);
out:
    json_decref(root);
    if (rc)
        img_config_free(c);
    return rc;
}

enum img_kind img_json_kind(const char *json, size_t len)
{
    json_t *root = load(json, len, "document", NULL);
    if (!root)
        return IMG_K_UNKNOWN;
    const char *mt;
    enum img_kind k = IMG_K_UNKNOWN;
    if (!opt_str(root, "mediaType", "document", &mt, NULL) && mt)
        k = img_media_kind(mt, NULL);
    if (k == IMG_K_UNKNOWN) {
        if (json_object_get(root, "manifests"))
            k = IMG_K_INDEX;
        else if (json_object_get(root, "layers") || json_object_get(root, "schemaVersion"))
            k = IMG_K_MANIFEST;
        else if (json_object_get(root, "rootfs"))
            k = IMG_K_CONFIG;
    }
    json_decref(root);
    return k;
}

int img_layout_index_parse(const char *json, size_t len, struct img_layout_ent *v, unsigned max,
                           struct img_err *err)
{
    json_t *root = load(json, len, "layout's index.json", err), *arr = NULL, *e;
    if (!root)
        return -EINVAL;
    int rc = index_entries(root, &arr, err);
    size_t i;
    char what[64];
    if (!rc && json_array_size(arr) > max)
        rc = img_err(err, -EINVAL, "the layout's index.json lists %zu images, more than the limit of %u",
                     json_array_size(arr), max);
    json_array_foreach(arr, i, e) {
        if (rc)
            break;
        snprintf(what, sizeof what, "index.json entry %zu", i);
        memset(&v[i], 0, sizeof v[i]);
        if ((rc = parse_desc(e, what, &v[i].desc, err)))
            break;
        json_t *an = json_object_get(e, "annotations");
        if (an && !json_is_object(an)) {
            rc = img_err(err, -EINVAL, "%s: annotations is not a JSON object", what);
            break;
        }
        const char *name = NULL, *key = "io.containerd.image.name";
        if (an && !(rc = opt_str(an, key, what, &name, err)) && !name)
            rc = opt_str(an, key = "org.opencontainers.image.ref.name", what, &name, err);
        if (!rc)
            rc = copy_field(v[i].name, sizeof v[i].name, name, what, key, err);
    }
    json_decref(root);
    return rc ? rc : (int)i;
}

static int archive_path(json_t *s, char out[IMG_ARCHIVE_PATH_MAX], const char *what, struct img_err *err)
{
    if (!json_is_string(s))
        return img_err(err, -EINVAL, "manifest.json: %s is not a string", what);
    const char *p = json_string_value(s);
    if (!*p || strlen(p) >= IMG_ARCHIVE_PATH_MAX)
        return img_err(err, -EINVAL, "manifest.json: %s is empty or longer than %d bytes", what,
                       IMG_ARCHIVE_PATH_MAX - 1);
    if (p[0] == '/' || !strcmp(p, "..") || !strncmp(p, "../", 3) || strstr(p, "/../") ||
        (strlen(p) >= 3 && !strcmp(p + strlen(p) - 3, "/..")))
        return img_err(err, -EINVAL, "manifest.json: %s \"%s\" is not a path inside the archive", what, p);
    strcpy(out, p);
    return 0;
}

static int docker_entry(json_t *e, size_t i, struct img_docker_ent *d, struct img_err *err)
{
    char what[64];
    memset(d, 0, sizeof *d);
    if (!json_is_object(e))
        return img_err(err, -EINVAL, "manifest.json: entry %zu is not a JSON object", i);
    snprintf(what, sizeof what, "entry %zu's Config", i);
    int rc = archive_path(json_object_get(e, "Config"), d->config, what, err);
    json_t *tags = json_object_get(e, "RepoTags"), *layers = json_object_get(e, "Layers"), *t;
    if (!rc && tags && !json_is_null(tags) &&
        (!json_is_array(tags) || json_array_size(tags) > IMG_ARCHIVE_MAX_TAGS))
        rc = img_err(err, -EINVAL, "manifest.json: entry %zu's RepoTags is not an array of at most %d",
                     i, IMG_ARCHIVE_MAX_TAGS);
    if (!rc && !json_is_array(layers))
        rc = img_err(err, -EINVAL, "manifest.json: entry %zu's Layers is not an array", i);
    if (!rc && (json_array_size(layers) == 0 || json_array_size(layers) > IMG_MAX_LAYERS))
        rc = img_err(err, -EINVAL, "manifest.json: entry %zu has %zu layers (1 to %d)", i,
                     json_array_size(layers), IMG_MAX_LAYERS);
    size_t k;
    json_array_foreach(json_is_array(tags) ? tags : NULL, k, t) {
        snprintf(what, sizeof what, "entry %zu's RepoTags[%zu]", i, k);
        if (rc || (rc = archive_path(t, d->tags[k], what, err)))
            break;
        d->ntag = (unsigned)k + 1;
    }
    json_array_foreach(rc ? NULL : layers, k, t) {
        snprintf(what, sizeof what, "entry %zu's Layers[%zu]", i, k);
        if ((rc = archive_path(t, d->layers[k], what, err)))
            break;
        d->nlayer = (unsigned)k + 1;
    }
    return rc;
}

int img_docker_manifest_parse(const char *json, size_t len, struct img_docker_ent *v, unsigned max,
                              struct img_err *err)
{
    if (len > IMG_JSON_MAX)
        return img_err(err, -EINVAL, "manifest.json is %zu bytes, more than the limit of %u", len, IMG_JSON_MAX);
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je), *e;
    if (!root)
        return img_err(err, -EINVAL, "manifest.json is not valid JSON: %s (line %d, column %d)",
                       je.text, je.line, je.column);
    int rc = 0;
    if (!json_is_array(root))
        rc = img_err(err, -EINVAL, "manifest.json is not a JSON array");
    else if (json_array_size(root) == 0 || json_array_size(root) > max)
        rc = img_err(err, -EINVAL, "manifest.json lists %zu images (1 to %u)", json_array_size(root), max);
    size_t i;
    size_t n = rc ? 0 : json_array_size(root);
    json_array_foreach(rc ? NULL : root, i, e)
        if ((rc = docker_entry(e, i, &v[i], err)))
            break;
    json_decref(root);
    return rc ? rc : (int)n;
}
