/* Fuzz image references (vmm/image/ref.c): any bytes give 0 or -EINVAL
 * with a message; an accepted reference has a registry, a repository
 * within the length limit, a tag or a valid digest, and its canonical form
 * parses back to itself. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "tests/fuzz/fuzz_common.h"
#include "vmm/image/ref.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char s[IMG_REF_MAX + 64];
    if (size >= sizeof s)
        size = sizeof s - 1;
    memcpy(s, data, size);
    s[size] = '\0';
    struct img_ref r;
    struct img_err err = { 0 };
    int rc = img_ref_parse(s, &r, &err);
    FUZZ_ASSERT(rc == 0 || rc == -EINVAL);
    if (rc) {
        FUZZ_ASSERT(err.code == rc && err.msg[0]);
        return 0;
    }
    FUZZ_ASSERT(r.registry[0] && r.repo[0]);
    FUZZ_ASSERT(strlen(r.registry) + 1 + strlen(r.repo) <= 255);
    FUZZ_ASSERT(r.tag[0] || img_digest_valid(r.digest));
    FUZZ_ASSERT(!r.digest[0] || img_digest_valid(r.digest));
    FUZZ_ASSERT(strlen(r.tag) <= 128);
    FUZZ_ASSERT(img_ref_api_host(&r)[0]);
    char canon[1024], again[1024];
    FUZZ_ASSERT(img_ref_format(&r, canon, sizeof canon) == 0);
    struct img_ref r2;
    FUZZ_ASSERT(img_ref_parse(canon, &r2, NULL) == 0);
    FUZZ_ASSERT(img_ref_format(&r2, again, sizeof again) == 0);
    FUZZ_ASSERT(!strcmp(canon, again));
    FUZZ_ASSERT(!memcmp(&r, &r2, sizeof r) || strcmp(r.registry, r2.registry) == 0);
    return 0;
}
