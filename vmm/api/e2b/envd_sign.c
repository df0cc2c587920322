/* Signed /files URLs (envd_sign.h). */
#include <errno.h>
#include <nettle/base64.h>
#include <nettle/sha2.h>
#include <string.h>

#include "vmm/api/e2b/envd_sign.h"

static void sha_str(struct sha256_ctx *h, const char *s)
{
    sha256_update(h, strlen(s), (const uint8_t *)s);
}

void envd_sign(const char *path, const char *op, const char *user, const char *token, int64_t exp,
               char out[ENVD_SIG_MAX])
{
    struct sha256_ctx h;
    uint8_t d[SHA256_DIGEST_SIZE];
    char e[24];
    sha256_init(&h);
    const char *parts[] = { path, ":", op, ":", user, ":", token };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        sha_str(&h, parts[i]);
    if (exp >= 0) {
        int k = 0;
        char r[24];
        uint64_t v = (uint64_t)exp;
        do {
            r[k++] = (char)('0' + v % 10);
            v /= 10;
        } while (v);
        e[0] = ':';
        for (int i = 0; i < k; i++)
            e[1 + i] = r[k - 1 - i];
        e[1 + k] = 0;
        sha_str(&h, e);
    }
    sha256_digest(&h, sizeof d, d);
    memcpy(out, "v1_", 3);
    base64_encode_raw(out + 3, sizeof d, d);
    size_t n = 3 + BASE64_ENCODE_RAW_LENGTH(sizeof d);
    while (n > 3 && out[n - 1] == '=')
        n--;
    out[n] = 0;
}

/* Equal strings, in time that does not depend on where they differ. */
static int same(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char d = la != lb;
    for (size_t i = 0; i < la && i < lb; i++)
        d |= (unsigned char)(a[i] ^ b[i]);
    return !d;
}

int envd_sign_check(const char *sig, const char *exp_s, const char *path, const char *op, const char *user,
                    const char *token, int64_t now)
{
    int64_t exp = -1;
    if (!sig || !*sig || strlen(sig) >= ENVD_SIG_MAX)
        return sig && *sig ? -EACCES : -EINVAL;
    if (exp_s) {
        size_t n = strlen(exp_s);
        if (n < 1 || n > 18)
            return -EINVAL;
        exp = 0;
        for (size_t i = 0; i < n; i++) {
            if (exp_s[i] < '0' || exp_s[i] > '9')
                return -EINVAL;
            exp = exp * 10 + (exp_s[i] - '0');
        }
    }
    char want[ENVD_SIG_MAX];
    envd_sign(path, op, user, token, exp, want);
    if (!same(sig, want))
        return -EACCES;
    return exp >= 0 && exp < now ? -ETIMEDOUT : 0;
}
