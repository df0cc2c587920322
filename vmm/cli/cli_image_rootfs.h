/* moat image rootfs (vmm/cli/cli_image_rootfs.c), one of cli_image.c's
 * subcommands: the store is open, argv[0] is "rootfs". */
#ifndef MOAT_CLI_IMAGE_ROOTFS_H
#define MOAT_CLI_IMAGE_ROOTFS_H

#include <stdint.h>

#include "vmm/image/store.h"

int image_rootfs(struct img_store *s, int argc, char **argv);

/* A size as --disk-size takes it: "4096", "512M", "8G", "1T" (also "8GiB",
 * "8GB": binary units) into *out: 0, or -EINVAL. */
int image_parse_bytes(const char *s, uint64_t *out);

#endif
