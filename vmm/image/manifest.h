/* OCI and Docker image JSON (vmm/image/manifest.c, pure, libjansson):
 * indexes / manifest lists, manifests (OCI, Docker schema 2), configs.
 * Every field is checked (types, digests, sizes, media types, counts);
 * anything else is -EINVAL with why in err. */
#ifndef MOAT_IMAGE_MANIFEST_H
#define MOAT_IMAGE_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "vmm/image/image.h"

enum img_kind {
    IMG_K_UNKNOWN = 0,
    IMG_K_INDEX,            /* OCI index or Docker manifest list */
    IMG_K_MANIFEST,         /* OCI or Docker schema-2 manifest */
    IMG_K_CONFIG,
    IMG_K_LAYER,
};
enum img_comp { IMG_COMP_NONE = 0, IMG_COMP_GZIP, IMG_COMP_ZSTD };

struct img_desc {
    char media_type[128];
    enum img_kind kind;     /* from media_type */
    enum img_comp comp;     /* layers: from media_type */
    char digest[IMG_DIGEST_MAX];
    uint64_t size;
    char os[32], arch[32], variant[32];     /* index entries' platform; "" */
};

/* Which kind a document of this media type is (Content-Type or the
 * mediaType field); IMG_K_UNKNOWN if none moat reads. */
enum img_kind img_media_kind(const char *media_type, enum img_comp *comp);

/* What a JSON document is, by its mediaType or else by its fields
 * ("manifests": an index; "layers" or "schemaVersion": a manifest;
 * "rootfs": a config); IMG_K_UNKNOWN if not a JSON object or none of
 * those. A guess to pick the parser; the parser checks. */
enum img_kind img_json_kind(const char *json, size_t len);

/* From an index, the manifest for platform "os/arch[/variant]" (NULL:
 * "linux/amd64"): 0 with *out, -ENOENT if none (err lists those there). */
int img_index_pick(const char *json, size_t len, const char *platform,
                   struct img_desc *out, struct img_err *err);

struct img_manifest {
    char media_type[128];   /* the document's own mediaType; "" if it has none */
    struct img_desc config;
    struct img_desc layer[IMG_MAX_LAYERS];
    unsigned nlayer;
};
int img_manifest_parse(const char *json, size_t len, struct img_manifest *m,
                       struct img_err *err);

/* The parts of an image config moat honours. Heap strings and NULL-ended
 * arrays; img_config_free releases them. */
struct img_config {
    char os[32], arch[32];
    char **entrypoint, **cmd, **env;    /* NULL-ended; NULL if absent */
    char *workdir, *user;               /* NULL if absent */
    char **diff_ids;                    /* rootfs.diff_ids, NULL-ended */
    unsigned ndiff;
    char created[40];                   /* "created" as written (RFC 3339); "" */
};
int img_config_parse(const char *json, size_t len, struct img_config *c,
                     struct img_err *err);
void img_config_free(struct img_config *c);

/* Image archives (vmm/image/layout.c reads them with these, pure):
 * an OCI image layout's index.json, its entries with the name their
 * annotations give ("io.containerd.image.name", else
 * "org.opencontainers.image.ref.name"; "" if neither), and a `docker save`
 * archive's manifest.json. Paths in manifest.json are checked: relative,
 * no "..". */
#define IMG_ARCHIVE_MAX_IMAGES 64   /* images in one archive */
#define IMG_ARCHIVE_MAX_TAGS   16   /* RepoTags of one */
#define IMG_ARCHIVE_PATH_MAX   256
struct img_layout_ent {
    struct img_desc desc;
    char name[512];
};
/* Returns the number of entries (<= max) or -EINVAL. */
int img_layout_index_parse(const char *json, size_t len, struct img_layout_ent *v, unsigned max,
                           struct img_err *err);

struct img_docker_ent {
    char config[IMG_ARCHIVE_PATH_MAX];
    char tags[IMG_ARCHIVE_MAX_TAGS][IMG_ARCHIVE_PATH_MAX];
    unsigned ntag;
    char layers[IMG_MAX_LAYERS][IMG_ARCHIVE_PATH_MAX];
    unsigned nlayer;
};
/* Returns the number of images (<= max) or -EINVAL. */
int img_docker_manifest_parse(const char *json, size_t len, struct img_docker_ent *v, unsigned max,
                              struct img_err *err);

#endif
