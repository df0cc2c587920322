/* Layer files -> an ext4 root filesystem, through img_rootfs_build: the
 * conversion on its own for tests/integration/image-rootfs.sh and
 * bench/image.sh (moat image rootfs goes through the image store).
 *
 *   image_rootfs OUT [--disk-size BYTES] [--max-bytes BYTES]
 *                [--max-entries N] LAYER...
 *
 * Prints the statistics as one line of key=value; on error the reason
 * on stderr and exit 1. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/image/rootfs.h"

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s OUT [--disk-size B] [--max-bytes B] [--max-entries N] LAYER...\n", argv[0]);
        return 2;
    }
    struct img_rootfs_opts o = { 0 };
    struct img_layer_in layers[IMG_MAX_LAYERS + 1];
    unsigned n = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--disk-size") && i + 1 < argc)
            o.disk_size = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--max-bytes") && i + 1 < argc)
            o.limits.max_bytes = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--max-entries") && i + 1 < argc)
            o.limits.max_entries_layer = o.limits.max_entries_total = strtoull(argv[++i], NULL, 0);
        else if (n <= IMG_MAX_LAYERS)
            layers[n++] = (struct img_layer_in){ argv[i], IMG_COMP_NONE };
    }
    struct img_err err = { 0 };
    struct img_rootfs_stats st;
    int rc = img_rootfs_build(layers, n, argv[1], &o, &st, &err);
    if (rc < 0) {
        fprintf(stderr, "image_rootfs: %s (%s)\n", err.msg, strerror(-rc));
        return 1;
    }
    printf("entries=%llu tar_bytes=%llu data_bytes=%llu files=%llu dirs=%llu symlinks=%llu hardlinks=%llu "
           "devices=%llu whiteouts=%llu opaques=%llu disk_size=%llu\n",
           (unsigned long long)st.entries, (unsigned long long)st.tar_bytes, (unsigned long long)st.data_bytes,
           (unsigned long long)st.files, (unsigned long long)st.dirs, (unsigned long long)st.symlinks,
           (unsigned long long)st.hardlinks, (unsigned long long)st.devices, (unsigned long long)st.whiteouts,
           (unsigned long long)st.opaques, (unsigned long long)st.disk_size);
    return 0;
}
