/* Fuzz the image archives' tar headers (vmm/image/tar.c): a 512-byte
 * header, a pax record block, a member name. Each gives 0 (1: the end
 * block, the root) or -EINVAL with a message; a clean name is relative,
 * has no ".." component and no leading "./". */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "tests/fuzz/fuzz_common.h"
#include "vmm/image/tar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void name_ok(const char *n)
{
    FUZZ_ASSERT(n[0] && n[0] != '/' && strncmp(n, "./", 2));
    for (const char *c = n; c; c = strchr(c, '/') ? strchr(c, '/') + 1 : NULL)
        FUZZ_ASSERT(strncmp(c, "..", 2) || (c[2] != '/' && c[2]));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    struct tar_ent e;
    struct img_err err = { 0 };
    int rc;
    if (data[0] & 1) {
        uint8_t h[TAR_BLOCK] = { 0 };
        memcpy(h, data + 1, size - 1 < TAR_BLOCK ? size - 1 : TAR_BLOCK);
        rc = tar_hdr_parse(h, &e, &err);
        FUZZ_ASSERT(rc == 0 || rc == 1 || (rc == -EINVAL && err.msg[0]));
        if (rc == 0)
            FUZZ_ASSERT(strlen(e.name) < sizeof e.name && strlen(e.link) < sizeof e.link);
    } else {
        memset(&e, 0, sizeof e);
        rc = tar_pax_parse((const char *)data + 1, size - 1, &e, &err);
        FUZZ_ASSERT(rc == 0 || (rc == -EINVAL && err.msg[0]));
    }
    if (rc == 0 && e.name[0]) {
        memset(&err, 0, sizeof err);
        rc = tar_name_clean(e.name, &err);
        FUZZ_ASSERT(rc == 0 || rc == 1 || (rc == -EINVAL && err.msg[0]));
        if (rc == 0)
            name_ok(e.name);
    }
    return 0;
}
