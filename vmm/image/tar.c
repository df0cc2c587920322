/* A small tar reader and writer (vmm/image/tar.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vmm/base/fullio.h"
#include "vmm/image/tar.h"

static int octal(const uint8_t *f, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    size_t i = 0;
    if (f[0] & 0x80) {          /* base-256 (GNU, star) */
        if (f[0] != 0x80)
            return -1;          /* negative or too large */
        for (i = 1; i < n; i++) {
            if (v >> 56)
                return -1;
            v = (v << 8) | f[i];
        }
        *out = v;
        return 0;
    }
    while (i < n && f[i] == ' ')
        i++;
    int digits = 0;
    for (; i < n && f[i] >= '0' && f[i] <= '7'; i++, digits++) {
        if (v >> 60)
            return -1;
        v = v * 8 + (uint64_t)(f[i] - '0');
    }
    for (; i < n; i++)
        if (f[i] != ' ' && f[i] != '\0')
            return -1;
    *out = v;
    return digits || f[0] == '\0' || f[0] == ' ' ? 0 : -1;
}

static void field(char *dst, size_t dn, const uint8_t *f, size_t n)
{
    size_t k = strnlen((const char *)f, n);
    if (k >= dn)
        k = dn - 1;
    memcpy(dst, f, k);
    dst[k] = '\0';
}

int tar_hdr_parse(const uint8_t h[TAR_BLOCK], struct tar_ent *e, struct img_err *err)
{
    memset(e, 0, sizeof *e);
    int zero = 1;
    for (int i = 0; i < TAR_BLOCK && zero; i++)
        zero = h[i] == 0;
    if (zero)
        return 1;
    uint64_t sum = 0, want;
    for (int i = 0; i < TAR_BLOCK; i++)
        sum += (i >= 148 && i < 156) ? ' ' : h[i];
    if (octal(h + 148, 8, &want) || want != sum)
        return img_err(err, -EINVAL, "tar header: bad checksum (not a tar archive, or a damaged one)");
    if (octal(h + 124, 12, &e->size))
        return img_err(err, -EINVAL, "tar header: bad size field");
    char name[101], prefix[156];
    field(name, sizeof name, h, 100);
    field(prefix, sizeof prefix, h + 345, 155);
    if (!memcmp(h + 257, "ustar", 5) && prefix[0])
        snprintf(e->name, sizeof e->name, "%s/%s", prefix, name);
    else
        snprintf(e->name, sizeof e->name, "%s", name);
    field(e->link, sizeof e->link, h + 157, 100);
    switch (h[156]) {
    case '0': case '\0': case '7': e->type = TAR_FILE; break;
    case '5': e->type = TAR_DIR; break;
    case '1': e->type = TAR_LINK; break;
    case '2': e->type = TAR_SYMLINK; break;
    case 'x': e->type = TAR_PAX; break;
    case 'g': e->type = TAR_GLOBAL_PAX; break;
    case 'L': e->type = TAR_LONGNAME; break;
    case 'K': e->type = TAR_LONGLINK; break;
    default: e->type = TAR_OTHER; break;
    }
    if (e->type != TAR_FILE && e->type != TAR_PAX && e->type != TAR_GLOBAL_PAX &&
        e->type != TAR_LONGNAME && e->type != TAR_LONGLINK && e->type != TAR_OTHER)
        e->size = 0;            /* links and folders carry no data */
    return 0;
}

static int pax_value(char *dst, size_t dn, const char *v, size_t vn, const char *key, struct img_err *err)
{
    if (vn >= dn || memchr(v, '\0', vn))
        return img_err(err, -EINVAL, "tar pax header: %s is too long or holds a NUL", key);
    memcpy(dst, v, vn);
    dst[vn] = '\0';
    return 0;
}

int tar_pax_parse(const char *buf, size_t len, struct tar_ent *e, struct img_err *err)
{
    size_t off = 0;
    while (off < len) {
        size_t n = 0, i = off;
        while (i < len && buf[i] >= '0' && buf[i] <= '9' && n < len)
            n = n * 10 + (size_t)(buf[i++] - '0');
        if (i == off || i >= len || buf[i] != ' ' || n < i - off + 3 || n > len - off || buf[off + n - 1] != '\n')
            return img_err(err, -EINVAL, "tar pax header: bad record at byte %zu", off);
        const char *k = buf + i + 1, *end = buf + off + n - 1;
        const char *eq = memchr(k, '=', (size_t)(end - k));
        if (!eq)
            return img_err(err, -EINVAL, "tar pax header: record without '=' at byte %zu", off);
        size_t kn = (size_t)(eq - k), vn = (size_t)(end - eq - 1);
        int rc = 0;
        if (kn == 4 && !memcmp(k, "path", 4))
            rc = pax_value(e->name, sizeof e->name, eq + 1, vn, "path", err);
        else if (kn == 8 && !memcmp(k, "linkpath", 8))
            rc = pax_value(e->link, sizeof e->link, eq + 1, vn, "linkpath", err);
        else if (kn == 4 && !memcmp(k, "size", 4)) {
            char num[24];
            uint64_t v = 0;
            if ((rc = pax_value(num, sizeof num, eq + 1, vn, "size", err)))
                return rc;
            for (char *p = num; *p; p++) {
                if (*p < '0' || *p > '9' || v > (UINT64_MAX - 9) / 10)
                    return img_err(err, -EINVAL, "tar pax header: bad size \"%s\"", num);
                v = v * 10 + (uint64_t)(*p - '0');
            }
            e->size = v;
        }
        if (rc)
            return rc;
        off += n;
    }
    return 0;
}

int tar_name_clean(char *name, struct img_err *err)
{
    while (!strncmp(name, "./", 2))
        memmove(name, name + 2, strlen(name + 2) + 1);
    size_t n = strlen(name);
    while (n && name[n - 1] == '/')
        name[--n] = '\0';
    if (!n || !strcmp(name, "."))
        return 1;               /* the archive's root */
    if (name[0] == '/')
        return img_err(err, -EINVAL, "tar member \"%.200s\" has an absolute path", name);
    for (const char *c = name; c;) {
        if (!strncmp(c, "..", 2) && (c[2] == '/' || !c[2]))
            return img_err(err, -EINVAL, "tar member \"%.200s\" reaches outside the archive (..)", name);
        c = strchr(c, '/');
        c = c ? c + 1 : NULL;
    }
    return 0;
}

/* Read and drop exactly left bytes. */
static int skip_bytes(int fd, uint64_t left, struct img_err *err)
{
    uint8_t buf[8192];
    while (left) {
        size_t k = left < sizeof buf ? (size_t)left : sizeof buf;
        if (read_full(fd, buf, k) != (ssize_t)k)
            return img_err(err, -EINVAL, "tar archive: truncated");
        left -= k;
    }
    return 0;
}

/* Read and drop n bytes of data and the padding to the next block. */
static int skip_data(int fd, uint64_t n, struct img_err *err)
{
    if (n > UINT64_MAX - TAR_BLOCK)
        return img_err(err, -EINVAL, "tar archive: bad size");
    return skip_bytes(fd, (n + TAR_BLOCK - 1) / TAR_BLOCK * TAR_BLOCK, err);
}

static int mkdirs(int dfd, const char *path, int last, struct img_err *err)
{
    char p[TAR_NAME_MAX];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p; (s = strchr(s, '/')) || last; ) {
        if (s)
            *s = '\0';
        if (mkdirat(dfd, p, 0700) && errno != EEXIST)
            return img_err(err, -errno, "cannot make folder %s: %s", p, strerror(errno));
        if (!s)
            break;
        *s++ = '/';
    }
    return 0;
}

static int extract_file(int fd, int dfd, const struct tar_ent *e, struct img_err *err)
{
    int rc = mkdirs(dfd, e->name, 0, err);
    if (rc)
        return rc;
    unlinkat(dfd, e->name, 0);      /* a later member of the same name wins */
    int out = openat(dfd, e->name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (out < 0)
        return img_err(err, -errno, "cannot create %s: %s", e->name, strerror(errno));
    uint8_t buf[65536];
    uint64_t left = e->size;
    while (left && !rc) {
        size_t k = left < sizeof buf ? (size_t)left : sizeof buf;
        if (read_full(fd, buf, k) != (ssize_t)k)
            rc = img_err(err, -EINVAL, "tar archive: truncated in %s", e->name);
        else if (write_full(out, buf, k) != (ssize_t)k)
            rc = img_err(err, -errno, "cannot write %s: %s", e->name, strerror(errno));
        left -= k;
    }
    close(out);
    if (!rc && e->size % TAR_BLOCK)
        rc = skip_bytes(fd, TAR_BLOCK - e->size % TAR_BLOCK, err);
    return rc;
}

/* A symbolic link's target as a path from the archive's root, or -1 if
 * it leaves the archive or is absolute. */
static int symlink_target(const char *name, const char *link, char *out, size_t n)
{
    if (link[0] == '/' || !link[0])
        return -1;
    char p[2 * TAR_NAME_MAX];
    const char *slash = strrchr(name, '/');
    snprintf(p, sizeof p, "%.*s%s%s", slash ? (int)(slash - name) : 0, name, slash ? "/" : "", link);
    char *parts[256];
    int np = 0;
    for (char *save, *c = strtok_r(p, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        if (!strcmp(c, "."))
            continue;
        if (!strcmp(c, "..")) {
            if (!np)
                return -1;
            np--;
            continue;
        }
        if (np == 256)
            return -1;
        parts[np++] = c;
    }
    size_t k = 0;
    out[0] = '\0';
    for (int i = 0; i < np; i++) {
        int w = snprintf(out + k, n - k, "%s%s", i ? "/" : "", parts[i]);
        if (w < 0 || (size_t)w >= n - k)
            return -1;
        k += (size_t)w;
    }
    return np ? 0 : -1;
}

static int extract_one(int fd, int dfd, struct tar_ent *e, struct img_err *err)
{
    char target[TAR_NAME_MAX];
    int rc = tar_name_clean(e->name, err);
    if (rc)
        return rc < 0 ? rc : skip_data(fd, e->size, err);
    switch (e->type) {
    case TAR_FILE:
        return extract_file(fd, dfd, e, err);
    case TAR_DIR:
        return mkdirs(dfd, e->name, 1, err);
    case TAR_LINK:
        snprintf(target, sizeof target, "%s", e->link);
        if (tar_name_clean(target, NULL))
            return 0;
        break;
    case TAR_SYMLINK:
        if (symlink_target(e->name, e->link, target, sizeof target))
            return 0;
        break;
    default:
        return skip_data(fd, e->size, err);
    }
    struct stat st;
    if (fstatat(dfd, target, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode))
        return 0;               /* to nothing unpacked: skipped */
    if ((rc = mkdirs(dfd, e->name, 0, err)))
        return rc;
    unlinkat(dfd, e->name, 0);
    if (linkat(dfd, target, dfd, e->name, 0))
        return img_err(err, -errno, "cannot link %s to %s: %s", e->name, target, strerror(errno));
    return 0;
}

/* The data of a pax or GNU long-name header into over. */
static int read_meta(int fd, const struct tar_ent *e, struct tar_ent *over, struct img_err *err)
{
    if (e->size > TAR_PAX_MAX)
        return img_err(err, -EINVAL, "tar archive: a %llu-byte extended header, more than the limit of %u",
                       (unsigned long long)e->size, TAR_PAX_MAX);
    char *buf = malloc((size_t)e->size + 1);
    if (!buf)
        return img_err(err, -ENOMEM, "out of memory");
    int rc = 0;
    if (read_full(fd, buf, (size_t)e->size) != (ssize_t)e->size)
        rc = img_err(err, -EINVAL, "tar archive: truncated");
    buf[e->size] = '\0';
    if (!rc && e->type == TAR_PAX)
        rc = tar_pax_parse(buf, (size_t)e->size, over, err);
    else if (!rc && (strlen(buf) >= TAR_NAME_MAX))
        rc = img_err(err, -EINVAL, "tar archive: a name longer than %d bytes", TAR_NAME_MAX - 1);
    else if (!rc)
        strcpy(e->type == TAR_LONGNAME ? over->name : over->link, buf);
    free(buf);
    if (!rc && e->size % TAR_BLOCK)
        rc = skip_bytes(fd, TAR_BLOCK - e->size % TAR_BLOCK, err);
    return rc;
}

int tar_extract(int fd, int dfd, struct img_err *err)
{
    struct tar_ent e, over;
    memset(&over, 0, sizeof over);
    over.size = UINT64_MAX;
    for (unsigned n = 0;; n++) {
        uint8_t h[TAR_BLOCK];
        ssize_t got = read_full(fd, h, sizeof h);
        if (got == 0 && n > 0)
            return 0;           /* no end blocks: tolerated */
        if (got != TAR_BLOCK)
            return img_err(err, -EINVAL, "tar archive: truncated or empty");
        int rc = tar_hdr_parse(h, &e, err);
        if (rc == 1)
            return 0;
        if (rc)
            return rc;
        if (n >= TAR_MAX_ENTRIES)
            return img_err(err, -EINVAL, "tar archive: more than %d members", TAR_MAX_ENTRIES);
        if (e.type == TAR_PAX || e.type == TAR_LONGNAME || e.type == TAR_LONGLINK) {
            if ((rc = read_meta(fd, &e, &over, err)))
                return rc;
            continue;
        }
        if (over.name[0])
            strcpy(e.name, over.name);
        if (over.link[0])
            strcpy(e.link, over.link);
        if (over.size != UINT64_MAX && e.type == TAR_FILE)
            e.size = over.size;
        memset(&over, 0, sizeof over);
        over.size = UINT64_MAX;
        if ((rc = extract_one(fd, dfd, &e, err)))
            return rc;
    }
}

static int put_hdr(int out, const char *name, char type, uint64_t size, struct img_err *err)
{
    uint8_t h[TAR_BLOCK] = { 0 };
    size_t n = strlen(name);
    if (n > 100)
        return img_err(err, -ENAMETOOLONG, "tar member name \"%s\" is longer than 100 bytes", name);
    memcpy(h, name, n);
    snprintf((char *)h + 100, 8, "%07o", type == '5' ? 0755 : 0644);
    snprintf((char *)h + 108, 8, "%07o", 0);
    snprintf((char *)h + 116, 8, "%07o", 0);
    if (size < (1ull << 33)) {
        snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)size);
    } else {
        h[124] = 0x80;
        for (int i = 0; i < 8; i++)
            h[135 - i] = (uint8_t)(size >> (8 * i));
    }
    snprintf((char *)h + 136, 12, "%011o", 0);
    h[156] = (uint8_t)type;
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < TAR_BLOCK; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    if (write_full(out, h, sizeof h) != TAR_BLOCK)
        return img_err(err, -errno, "cannot write the archive: %s", strerror(errno));
    return 0;
}

int tar_put_dir(int out, const char *name, struct img_err *err)
{
    return put_hdr(out, name, '5', 0, err);
}

int tar_put_file(int out, const char *name, int infd, uint64_t size, struct img_err *err)
{
    int rc = put_hdr(out, name, '0', size, err);
    uint8_t buf[65536];
    uint64_t off = 0;
    while (!rc && off < size) {
        size_t k = size - off < sizeof buf ? (size_t)(size - off) : sizeof buf;
        if (pread_full(infd, buf, k, (off_t)off) != (ssize_t)k)
            rc = img_err(err, -EIO, "%s: shorter than %llu bytes", name, (unsigned long long)size);
        else if (write_full(out, buf, k) != (ssize_t)k)
            rc = img_err(err, -errno, "cannot write the archive: %s", strerror(errno));
        off += k;
    }
    memset(buf, 0, TAR_BLOCK);
    if (!rc && size % TAR_BLOCK && write_full(out, buf, TAR_BLOCK - size % TAR_BLOCK) < 0)
        rc = img_err(err, -errno, "cannot write the archive: %s", strerror(errno));
    return rc;
}

int tar_put_mem(int out, const char *name, const void *buf, size_t len, struct img_err *err)
{
    uint8_t pad[TAR_BLOCK] = { 0 };
    int rc = put_hdr(out, name, '0', len, err);
    if (!rc && (write_full(out, buf, len) != (ssize_t)len ||
                (len % TAR_BLOCK && write_full(out, pad, TAR_BLOCK - len % TAR_BLOCK) < 0)))
        rc = img_err(err, -errno, "cannot write the archive: %s", strerror(errno));
    return rc;
}

int tar_put_end(int out, struct img_err *err)
{
    uint8_t z[2 * TAR_BLOCK] = { 0 };
    if (write_full(out, z, sizeof z) != (ssize_t)sizeof z)
        return img_err(err, -errno, "cannot write the archive: %s", strerror(errno));
    return 0;
}
