/* Image references (vmm/image/ref.h): Docker's grammar
 * (github.com/distribution/reference), pure.
 *   reference := name [ ":" tag ] [ "@" digest ]
 *   name      := [domain "/"] component ("/" component)*   (<= 255 bytes)
 *   domain    := host [":" port]; host: labels of [A-Za-z0-9-] joined by
 *                '.', or "[IPv6]"
 *   component := [a-z0-9]+ ((".", "_", "__", "-"+) [a-z0-9]+)*
 *   tag       := [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
 *   digest    := "sha256:" 64 lowercase hex (the only algorithm moat takes)
 * Normalised as Docker does: no domain means docker.io, index.docker.io is
 * docker.io, and a one-component name on docker.io is under library/. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "vmm/image/ref.h"

#define NAME_MAX_LEN 255

static int is_lc_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
static int is_alnum(char c) { return is_lc_alnum(c) || (c >= 'A' && c <= 'Z'); }

/* One path component [s, s+n). */
static int component_ok(const char *s, size_t n)
{
    if (n == 0 || !is_lc_alnum(s[0]) || !is_lc_alnum(s[n - 1]))
        return 0;
    for (size_t i = 1; i < n; i++) {
        char c = s[i];
        if (is_lc_alnum(c))
            continue;
        if (c == '.' || c == '_') {     /* ".", "_" or "__", then alnum */
            if (c == '_' && s[i + 1] == '_')
                i++;
            if (i + 1 >= n || !is_lc_alnum(s[i + 1]))
                return 0;
            continue;
        }
        if (c == '-') {                 /* "-"+ then alnum */
            while (i + 1 < n && s[i + 1] == '-')
                i++;
            if (i + 1 >= n || !is_lc_alnum(s[i + 1]))
                return 0;
            continue;
        }
        return 0;
    }
    return 1;
}

static int host_ok(const char *s, size_t n)
{
    if (n >= 2 && s[0] == '[') {        /* [IPv6] */
        if (s[n - 1] != ']' || n < 4)
            return 0;
        for (size_t i = 1; i < n - 1; i++)
            if (!(is_alnum(s[i]) || s[i] == ':' || s[i] == '.'))
                return 0;
        return 1;
    }
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && s[i] != '.') {
            if (!is_alnum(s[i]) && s[i] != '-')
                return 0;
            continue;
        }
        if (i == start || s[start] == '-' || s[i - 1] == '-')
            return 0;
        start = i + 1;
    }
    return 1;
}

static int domain_ok(const char *s, size_t n)
{
    const char *colon = NULL;
    for (size_t i = n; i > 0; i--) {
        if (s[i - 1] == ']')
            break;
        if (s[i - 1] == ':') {
            colon = s + i - 1;
            break;
        }
    }
    size_t hn = colon ? (size_t)(colon - s) : n;
    if (colon) {
        size_t pn = n - hn - 1;
        if (pn == 0 || pn > 5)
            return 0;
        for (size_t i = 0; i < pn; i++)
            if (colon[1 + i] < '0' || colon[1 + i] > '9')
                return 0;
    }
    return host_ok(s, hn);
}

static int tag_ok(const char *t)
{
    size_t n = strlen(t);
    if (n == 0 || n > 128 || !(is_alnum(t[0]) || t[0] == '_'))
        return 0;
    for (size_t i = 1; i < n; i++)
        if (!(is_alnum(t[i]) || t[i] == '_' || t[i] == '.' || t[i] == '-'))
            return 0;
    return 1;
}

static int all_hex64(const char *s)
{
    if (strlen(s) != 64)
        return 0;
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

/* Split name into domain and path, as Docker's splitDockerDomain. */
static int split_domain(const char *name, struct img_ref *out, struct img_err *err)
{
    const char *slash = strchr(name, '/');
    size_t dn = slash ? (size_t)(slash - name) : 0;
    int has_domain = 0;
    if (slash) {
        has_domain = memchr(name, '.', dn) || memchr(name, ':', dn) ||
                     (dn == 9 && !strncmp(name, "localhost", 9));
        for (size_t i = 0; i < dn && !has_domain; i++)
            has_domain = name[i] >= 'A' && name[i] <= 'Z';
    }
    const char *path = name;
    if (has_domain) {
        if (!domain_ok(name, dn))
            return img_err(err, -EINVAL, "invalid reference \"%s\": bad registry host \"%.*s\"",
                           name, (int)dn, name);
        snprintf(out->registry, sizeof out->registry, "%.*s", (int)dn, name);
        if (!strcmp(out->registry, "index.docker.io"))
            strcpy(out->registry, "docker.io");
        path = slash + 1;
    } else {
        strcpy(out->registry, "docker.io");
    }
    for (const char *c = path; *c;) {
        const char *e = strchr(c, '/');
        size_t n = e ? (size_t)(e - c) : strlen(c);
        if (!component_ok(c, n)) {
            for (size_t i = 0; i < n; i++)
                if (c[i] >= 'A' && c[i] <= 'Z')
                    return img_err(err, -EINVAL, "invalid reference \"%s\": repository name must be lowercase", name);
            return img_err(err, -EINVAL, "invalid reference \"%s\": bad path component \"%.*s\" "
                           "(lowercase letters, digits, and '.', '_', '__' or '-' between them)",
                           name, (int)n, c);
        }
        if (!e)
            break;
        c = e + 1;
        if (!*c)
            return img_err(err, -EINVAL, "invalid reference \"%s\": ends with '/'", name);
    }
    if (!*path)
        return img_err(err, -EINVAL, "invalid reference \"%s\": no repository", name);
    const char *lib = (!strcmp(out->registry, "docker.io") && !strchr(path, '/')) ? "library/" : "";
    if ((size_t)snprintf(out->repo, sizeof out->repo, "%s%s", lib, path) >= sizeof out->repo)
        return img_err(err, -EINVAL, "invalid reference \"%s\": repository name longer than %d bytes",
                       name, NAME_MAX_LEN);
    return 0;
}

int img_ref_parse(const char *s, struct img_ref *out, struct img_err *err)
{
    memset(out, 0, sizeof *out);
    if (!s || !*s)
        return img_err(err, -EINVAL, "invalid reference: empty");
    size_t len = strnlen(s, IMG_REF_MAX + 1);
    if (len > IMG_REF_MAX)
        return img_err(err, -EINVAL, "invalid reference: longer than %d bytes", IMG_REF_MAX);
    char buf[IMG_REF_MAX + 1];
    memcpy(buf, s, len + 1);
    char *at = strchr(buf, '@');
    if (at) {
        *at = '\0';
        if (!img_digest_valid(at + 1))
            return img_err(err, -EINVAL, "invalid reference \"%s\": bad digest \"%s\" "
                           "(sha256: and 64 lowercase hex digits)", s, at + 1);
        strcpy(out->digest, at + 1);
    }
    char *lastslash = strrchr(buf, '/');
    char *colon = strrchr(lastslash ? lastslash : buf, ':');
    if (colon) {
        *colon = '\0';
        if (!tag_ok(colon + 1))
            return img_err(err, -EINVAL, "invalid reference \"%s\": bad tag \"%s\" "
                           "(up to 128 of letters, digits, '_', '.', '-'; not first '.' or '-')", s, colon + 1);
        strcpy(out->tag, colon + 1);
    } else if (!at) {
        strcpy(out->tag, "latest");
    }
    if (!*buf)
        return img_err(err, -EINVAL, "invalid reference \"%s\": no repository", s);
    if (strlen(buf) > NAME_MAX_LEN)
        return img_err(err, -EINVAL, "invalid reference \"%s\": repository name longer than %d bytes",
                       s, NAME_MAX_LEN);
    if (all_hex64(buf))
        return img_err(err, -EINVAL, "invalid reference \"%s\": a 64-digit hexadecimal name is an ID, "
                       "not a repository (use sha256:%s)", s, buf);
    int rc = split_domain(buf, out, err);
    if (rc)
        return rc;
    if (strlen(out->registry) + 1 + strlen(out->repo) > NAME_MAX_LEN)
        return img_err(err, -EINVAL, "invalid reference \"%s\": repository name longer than %d bytes",
                       s, NAME_MAX_LEN);
    return 0;
}

int img_ref_format(const struct img_ref *r, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s/%s%s%s%s%s", r->registry, r->repo,
                     r->tag[0] ? ":" : "", r->tag, r->digest[0] ? "@" : "", r->digest);
    if (n < 0 || (size_t)n >= len)
        return -ENAMETOOLONG;
    return 0;
}

const char *img_ref_api_host(const struct img_ref *r)
{
    return strcmp(r->registry, "docker.io") ? r->registry : "registry-1.docker.io";
}
