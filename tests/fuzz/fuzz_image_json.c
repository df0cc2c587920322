/* Fuzz the image JSON parsers (vmm/image/manifest.c). The first byte picks
 * the parser, the rest is the document: a manifest, an index (picking
 * linux/amd64 or linux/arm64/v8), a config, an OCI layout's index.json, a
 * docker save manifest.json. Every call gives 0 / a count or -EINVAL
 * (-ENOENT: no such platform; -ENOMEM) with a message; what an accepted
 * document fills is within its limits and its digests are valid. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_common.h"
#include "vmm/image/manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_rc(int rc, const struct img_err *err)
{
    FUZZ_ASSERT(rc >= 0 || rc == -EINVAL || rc == -ENOENT || rc == -ENOMEM);
    if (rc < 0 && rc != -ENOMEM)
        FUZZ_ASSERT(err->msg[0] && err->code == rc);
}

static void desc_ok(const struct img_desc *d)
{
    FUZZ_ASSERT(img_digest_valid(d->digest));
    FUZZ_ASSERT(strlen(d->media_type) < sizeof d->media_type);
}

static void manifest(const char *j, size_t n)
{
    struct img_manifest *m = malloc(sizeof *m);
    struct img_err err = { 0 };
    int rc = img_manifest_parse(j, n, m, &err);
    check_rc(rc, &err);
    if (!rc) {
        FUZZ_ASSERT(m->nlayer >= 1 && m->nlayer <= IMG_MAX_LAYERS);
        FUZZ_ASSERT(m->config.kind == IMG_K_CONFIG && m->config.size <= IMG_JSON_MAX);
        desc_ok(&m->config);
        for (unsigned i = 0; i < m->nlayer; i++) {
            desc_ok(&m->layer[i]);
            FUZZ_ASSERT(m->layer[i].kind == IMG_K_LAYER);
        }
    }
    free(m);
}

static void config(const char *j, size_t n)
{
    struct img_config c;
    struct img_err err = { 0 };
    int rc = img_config_parse(j, n, &c, &err);
    check_rc(rc, &err);
    if (rc) {
        FUZZ_ASSERT(!c.cmd && !c.env && !c.diff_ids && !c.workdir);
        return;
    }
    FUZZ_ASSERT(c.os[0] && c.arch[0] && c.ndiff <= IMG_MAX_LAYERS);
    for (unsigned i = 0; i < c.ndiff; i++)
        FUZZ_ASSERT(img_digest_valid(c.diff_ids[i]));
    FUZZ_ASSERT(c.ndiff == 0 || c.diff_ids[c.ndiff] == NULL);
    for (char **e = c.env; e && *e; e++)
        FUZZ_ASSERT(strchr(*e, '=') && **e != '=');
    img_config_free(&c);
}

/* A path inside the archive: relative, no ".." component. */
static void path_ok(const char *p)
{
    FUZZ_ASSERT(p[0] && p[0] != '/');
    for (const char *c = p; c; c = strchr(c, '/') ? strchr(c, '/') + 1 : NULL)
        FUZZ_ASSERT(strncmp(c, "..", 2) || (c[2] != '/' && c[2]));
}

static void archives(int which, const char *j, size_t n)
{
    struct img_err err = { 0 };
    if (which == 0) {
        struct img_layout_ent *v = calloc(8, sizeof *v);
        int rc = img_layout_index_parse(j, n, v, 8, &err);
        check_rc(rc, &err);
        for (int i = 0; i < rc; i++)
            desc_ok(&v[i].desc);
        free(v);
        return;
    }
    struct img_docker_ent *v = calloc(4, sizeof *v);
    int rc = img_docker_manifest_parse(j, n, v, 4, &err);
    check_rc(rc, &err);
    FUZZ_ASSERT(rc != 0);
    for (int i = 0; i < rc; i++) {
        FUZZ_ASSERT(v[i].nlayer >= 1 && v[i].nlayer <= IMG_MAX_LAYERS && v[i].ntag <= IMG_ARCHIVE_MAX_TAGS);
        path_ok(v[i].config);
        for (unsigned k = 0; k < v[i].nlayer; k++)
            path_ok(v[i].layers[k]);
    }
    free(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *j = (const char *)data + 1;
    size_t n = size - 1;
    struct img_err err = { 0 };
    struct img_desc d;
    int rc;
    (void)img_json_kind(j, n);
    switch (data[0] % 6) {
    case 0:
        manifest(j, n);
        break;
    case 1:
    case 2:
        rc = img_index_pick(j, n, data[0] % 6 == 1 ? NULL : "linux/arm64/v8", &d, &err);
        check_rc(rc, &err);
        if (!rc) {
            desc_ok(&d);
            FUZZ_ASSERT(d.kind == IMG_K_MANIFEST);
        }
        break;
    case 3:
        config(j, n);
        break;
    default:
        archives(data[0] % 6 - 4, j, n);
        break;
    }
    return 0;
}
