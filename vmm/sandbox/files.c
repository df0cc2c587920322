/* The files helpers of the sandbox operations (start.h): a drive's
 * overlay, atomic writes, opening what a jail may have replaced without
 * following it, a directory shared with a jail, a log's tail. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices/blk/overlay_disk.h"
#include "vmm/sandbox/start.h"

int sandbox_drive_overlay(const struct sbx *s, unsigned n, char *buf, size_t len)
{
    if (n >= s->ndrive)
        return 0;
    char tmp[8192];
    snprintf(tmp, sizeof tmp, ",%s", s->drive[n]);
    const char *o = strstr(tmp, ",overlay=");
    if (!o)
        return 0;
    o += 9;
    size_t l = strcspn(o, ",");
    snprintf(buf, len, "%.*s", (int)l, o);
    return l > 0;
}

char *sandbox_spec_with_overlay(const char *spec, const char *ovl)
{
    size_t cap = strlen(spec) + strlen(ovl) + 16;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    char *copy = strdup(spec), *save = NULL;
    if (!copy) {
        free(out);
        return NULL;
    }
    out[0] = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (!strncmp(tok, "overlay=", 8))
            continue;
        if (out[0])
            strcat(out, ",");
        strcat(out, tok);
    }
    strcat(out, ",overlay=");
    strcat(out, ovl);
    free(copy);
    return out;
}

int sandbox_write_file(const char *path, const char *text)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    /* A new file, never one found there (a jailed sandbox's directory is
     * writable by its jail's group: no link another put there is followed). */
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    size_t len = strlen(text);
    int r = write(fd, text, len) == (ssize_t)len ? 0 : -EIO;
    if (close(fd) < 0 && r == 0)
        r = -errno;
    if (r == 0 && rename(tmp, path) < 0)
        r = -errno;
    if (r < 0)
        unlink(tmp);
    return r;
}

int sandbox_open_regular_at(int dfd, const char *name)
{
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        return -1;
    int e = fstat(fd, &st) < 0 ? errno : S_ISREG(st.st_mode) ? 0 : SBX_EFTYPE_NOT_REG;
    if (e) {
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

const char *sandbox_file_via(const struct sbx *s, const char *file, char *buf, size_t len, int *keep)
{
    *keep = -1;
    if (!s->jail.on)
        return file;
    char dir[PATH_MAX];
    const char *slash = strrchr(file, '/');
    if (!slash || slash == file || (size_t)(slash - file) >= sizeof dir) {
        errno = EINVAL;
        return NULL;
    }
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - file), file);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int fd = dfd < 0 ? -1 : sandbox_open_regular_at(dfd, slash + 1);
    int e = errno;
    if (dfd >= 0)
        close(dfd);
    if (fd < 0) {
        errno = e == SBX_EFTYPE_NOT_REG ? EINVAL : e;
        return NULL;
    }
    *keep = fd;
    snprintf(buf, len, "/proc/self/fd/%d", fd);
    return buf;
}

int sandbox_jail_share_dir(const struct sbx *s, const char *dir, struct sbx_err *err)
{
    if (!s->jail.on)
        return 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    int r = fd < 0 || fstat(fd, &st) < 0 ? -errno : st.st_uid != 0 ? -EPERM : 0;
    if (r == 0 && (fchown(fd, 0, s->jail.gid) < 0 || fchmod(fd, S_ISVTX | 0770) < 0))
        r = -errno;
    if (fd >= 0)
        close(fd);
    if (r < 0)
        sandbox_err(err, r, "sandbox %s: %s: %s", s->name, dir,
                    r == -EPERM ? "not root's (made by its jail?)" : SBX_STRERROR(-r));
    return r;
}

void sandbox_log_tail(const struct sbx *s, int code, struct sbx_err *err)
{
    char p[PATH_MAX], buf[2048];
    int fd = open(sandbox_path(s, "moat.log", p, sizeof p), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    off_t end = lseek(fd, 0, SEEK_END);
    lseek(fd, end > (off_t)sizeof buf - 1 ? end - (off_t)sizeof buf + 1 : 0, SEEK_SET);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = 0;
    sandbox_err(err, code, "%s's log (%s):", s->name, p);
    /* Each line as it is (up to a NUL: the text as a string), the last
     * one also when no newline ends it. */
    for (const char *l = buf; *l;) {
        size_t k = strcspn(l, "\n");
        sandbox_err(err, code, "%c%.*s", SBX_VERBATIM, (int)k, l);
        l += k + (l[k] == '\n');
    }
}

int sandbox_clone_via(const struct sbx *s, const char *file, const char *dst, char *why, size_t wlen)
{
    char via[64];
    int keep;
    const char *from = sandbox_file_via(s, file, via, sizeof via, &keep);
    int r = from ? ovl_clone(from, dst, why, wlen) : -errno;
    if (!from)
        snprintf(why, wlen, "%.400s: %s", file, SBX_STRERROR(-r));
    if (keep >= 0)
        close(keep);
    return r;
}
