/* Image archives in and out of the store (vmm/image/layout.c):
 * `moat image import` of an OCI image layout (a folder with oci-layout,
 * index.json and blobs/sha256/, or a tar of one) or a `docker save`
 * archive (manifest.json, a config and layer tars; a tar or its unpacked
 * folder), and `moat image export` of an image as an OCI layout (a folder,
 * or a tar when the path ends in .tar). Every blob is checked against its
 * digest and size before anything is stored. */
#ifndef MOAT_IMAGE_LAYOUT_H
#define MOAT_IMAGE_LAYOUT_H

#include "vmm/image/store.h"

/* Called once per reference tagged (canonical form) and its manifest. */
typedef void (*img_import_cb)(const char *ref, const char *manifest_digest, void *arg);

/* Import path (folder or tar). tag: the reference to give the image (the
 * archive must then hold exactly one), else the names the archive gives
 * (index.json's annotations, manifest.json's RepoTags). platform: which
 * manifest of a multi-platform index (NULL: linux/amd64). Returns the
 * number of images imported or -errno. */
int img_import(struct img_store *s, const char *path, const char *tag, const char *platform,
               img_import_cb cb, void *arg, struct img_err *err);

/* Export what name names as an OCI image layout at out: a tar archive if
 * out ends in ".tar", else a folder (created; if it exists it must be
 * empty). */
int img_export(const struct img_store *s, const char *name, const char *out, struct img_err *err);

#endif
