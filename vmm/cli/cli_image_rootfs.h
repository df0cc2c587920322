/* moat image rootfs (vmm/cli/cli_image_rootfs.c), one of cli_image.c's
 * subcommands: the store is open, argv[0] is "rootfs". */
#ifndef MOAT_CLI_IMAGE_ROOTFS_H
#define MOAT_CLI_IMAGE_ROOTFS_H

#include "vmm/image/store.h"

int image_rootfs(struct img_store *s, int argc, char **argv);

#endif
