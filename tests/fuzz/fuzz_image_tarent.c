/* Fuzz the checks of a layer's tar entries (vmm/image/tarent.c). Input:
 * [0] the entry's type (mod 8: 0 and 8 out of range), [1..2] the path's
 * length (little-endian, cut to what is there), the path, then the link
 * target (hardlinks, symlinks; none if empty). Invariants: the result is 0
 * or -EINVAL / -ENAMETOOLONG with that code and a reason in err; on 0 the
 * path (and a hardlink's target) is normalised: relative, no empty, "." or
 * ".." component, components of at most 255 bytes, at most 4096 bytes in
 * all, no NUL, and normalising it again gives it back; a whiteout never
 * names "", "." or ".."; a symlink's target is kept byte for byte. The
 * entry and byte counters never pass their limits. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "tests/fuzz/fuzz_common.h"
#include "vmm/image/tarent.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void normalised(const char *p, int may_be_root)
{
    size_t n = strlen(p);
    FUZZ_ASSERT(n <= IMG_TAR_PATH_MAX);
    FUZZ_ASSERT(may_be_root || n > 0);
    if (!n)
        return;
    FUZZ_ASSERT(p[0] != '/' && p[n - 1] != '/');
    FUZZ_ASSERT(!strstr(p, "//"));
    const char *c = p;
    for (;;) {
        const char *s = strchr(c, '/');
        size_t len = s ? (size_t)(s - c) : strlen(c);
        FUZZ_ASSERT(len >= 1 && len <= IMG_TAR_NAME_MAX);
        FUZZ_ASSERT(!(len == 1 && c[0] == '.'));
        FUZZ_ASSERT(!(len == 2 && c[0] == '.' && c[1] == '.'));
        if (!s)
            break;
        c = s + 1;
    }
    static char again[IMG_TAR_PATH_MAX + 1];
    struct img_err err = { 0 };
    FUZZ_ASSERT(img_tar_path_norm(p, n, again, sizeof again, "path", &err) == 0);
    FUZZ_ASSERT(!strcmp(again, p));
}

static void counts(const uint8_t *data, size_t size)
{
    struct img_tar_limits l = { size % 7 + 1, size % 11 + 1, size * 3 };
    struct img_tar_count c = { 0 };
    for (size_t i = 0; i < size && i < 64; i++) {
        if (data[i] & 1)
            c.entries_layer = 0;
        int rc = img_tar_count_entry(&l, &c, NULL);
        FUZZ_ASSERT(rc == 0 || rc == -E2BIG);
        FUZZ_ASSERT(c.entries_layer <= l.max_entries_layer && c.entries_total <= l.max_entries_total);
        rc = img_tar_count_bytes(&l, &c, (uint64_t)data[i] * i * 16, NULL);
        FUZZ_ASSERT((rc == 0) == ((uint64_t)data[i] * i * 16 <= l.max_bytes));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    enum img_te_type type = (enum img_te_type)(data[0] % 9);
    size_t plen = (size_t)data[1] | (size_t)data[2] << 8;
    const char *rest = (const char *)data + 3;
    size_t left = size - 3;
    if (plen > left)
        plen = left;
    /* Owner and device numbers from the length bytes too: negative, in
     * range and past it. */
    struct img_tarent_in in = { rest, plen, type, left > plen ? rest + plen : NULL, left - plen,
                                (int64_t)(int8_t)data[1] * (1ll << 25), (int64_t)data[2] << 24,
                                (uint64_t)data[1] << 5, (uint64_t)data[2] << 13 };
    static struct img_tarent_out out;
    struct img_err err = { 0 };
    int rc = img_tarent_check(&in, &out, &err);
    if (rc < 0) {
        FUZZ_ASSERT(rc == -EINVAL || rc == -ENAMETOOLONG);
        FUZZ_ASSERT(err.code == rc && err.msg[0]);
    } else {
        FUZZ_ASSERT(rc == 0 && err.code == 0);
        /* An entry applied has an owner and device number ext4 holds
         * (whiteouts and skipped entries create nothing: theirs do not
         * matter). */
        FUZZ_ASSERT(out.action != IMG_TA_APPLY ||
                    (in.uid >= 0 && in.uid <= IMG_TAR_ID_MAX && in.gid >= 0 && in.gid <= IMG_TAR_ID_MAX));
        FUZZ_ASSERT(out.action != IMG_TA_APPLY || (type != IMG_TE_CHR && type != IMG_TE_BLK) ||
                    (in.rdev_major <= IMG_TAR_MAJOR_MAX && in.rdev_minor <= IMG_TAR_MINOR_MAX));
        FUZZ_ASSERT(out.action >= IMG_TA_APPLY && out.action <= IMG_TA_SKIP);
        normalised(out.path, out.action != IMG_TA_WHITEOUT);
        if (out.action == IMG_TA_WHITEOUT) {
            const char *base = strrchr(out.path, '/');
            base = base ? base + 1 : out.path;
            FUZZ_ASSERT(strcmp(base, ".") && strcmp(base, ".."));
        }
        if (out.action == IMG_TA_APPLY && type == IMG_TE_HARDLINK) {
            normalised(out.link, 0);
            FUZZ_ASSERT(strcmp(out.link, out.path));
        }
        if (out.action == IMG_TA_APPLY && type == IMG_TE_SYMLINK)
            FUZZ_ASSERT(in.link_len == strlen(out.link) && !memcmp(out.link, in.link, in.link_len));
    }
    counts(data, size);
    return 0;
}
