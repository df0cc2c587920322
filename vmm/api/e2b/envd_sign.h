/* Signed /files URLs as the e2b SDK makes them (getSignature, for
 * uploadUrl/downloadUrl) and envd checks them: "v1_" + base64 (padding
 * dropped) of SHA-256("path:operation:user:token" [+ ":expiration"]),
 * operation "read" (GET) or "write" (POST), user the `username` query
 * ("" without it), expiration Unix seconds. Pure. */
#ifndef MOAT_ENVD_SIGN_H
#define MOAT_ENVD_SIGN_H

#include <stdint.h>

#define ENVD_SIG_MAX 48           /* "v1_" + 43 base64 + NUL, rounded */

/* exp < 0: no expiration. */
void envd_sign(const char *path, const char *op, const char *user, const char *token, int64_t exp,
               char out[ENVD_SIG_MAX]);
/* A request's signature and signature_expiration query values (exp_s NULL
 * when absent) against the sandbox's token at time now (Unix seconds): 0,
 * -EINVAL (no signature, or an expiration that is not 1..18 decimal
 * digits), -ETIMEDOUT (expired: expiration < now), -EACCES (wrong). */
int envd_sign_check(const char *sig, const char *exp_s, const char *path, const char *op, const char *user,
                    const char *token, int64_t now);

#endif
