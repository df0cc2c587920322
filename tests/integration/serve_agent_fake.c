/* Test double for the agent client's filesystem calls (STAT, LIST, RENAME,
 * REMOVE: vmm/cli/serve_agent_shim.h), linked only into
 * tests/integration/test_serve_envd. That test runs the real guest agent
 * on the host (moat-agent --unix), so the "guest" filesystem is the
 * host's: these weak definitions do on the host what the agent does in the
 * guest, with the same results and errors (-EREMOTEIO, the errno from
 * agent_client_last_errno). Where libmoat has the real calls (strong
 * symbols, vmm/agent/agent_client.c) the linker takes those instead and
 * the same test goes through the agent protocol. */
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vmm/cli/serve_agent_shim.h"

#define WEAK __attribute__((weak))

static __thread int last_errno;

static int fail(int e, const char *what, const char *path, char *err, size_t errlen)
{
    last_errno = e;
    if (err && errlen)
        snprintf(err, errlen, "%s %s: %s", what, path, strerror(e));
    return -EREMOTEIO;
}

static void fill(const char *path, const struct stat *sb, struct agent_stat *st)
{
    memset(st, 0, sizeof *st);
    st->type = S_ISREG(sb->st_mode) ? AGENT_FT_FILE : S_ISDIR(sb->st_mode) ? AGENT_FT_DIR
             : S_ISLNK(sb->st_mode) ? AGENT_FT_SYMLINK : AGENT_FT_OTHER;
    st->mode = sb->st_mode & 07777;
    st->uid = sb->st_uid;
    st->gid = sb->st_gid;
    st->size = (uint64_t)sb->st_size;
    st->mtime_sec = sb->st_mtim.tv_sec;
    st->mtime_nsec = (uint32_t)sb->st_mtim.tv_nsec;
    snprintf(st->path, sizeof st->path, "%s", path);
    struct passwd *pw = getpwuid(sb->st_uid);
    struct group *gr = getgrgid(sb->st_gid);
    if (pw)
        snprintf(st->owner, sizeof st->owner, "%s", pw->pw_name);
    if (gr)
        snprintf(st->group, sizeof st->group, "%s", gr->gr_name);
    if (st->type == AGENT_FT_SYMLINK) {
        ssize_t n = readlink(path, st->link, sizeof st->link - 1);
        st->link[n > 0 ? n : 0] = 0;
    }
}

WEAK int agent_client_last_errno(const struct agent_client *c)
{
    (void)c;
    return last_errno;
}

WEAK int agent_client_stat(struct agent_client *c, const char *path, int nofollow, struct agent_stat *st,
                           char *err, size_t errlen)
{
    (void)c;
    struct stat sb;
    if ((nofollow ? lstat(path, &sb) : stat(path, &sb)) < 0)
        return fail(errno, "stat", path, err, errlen);
    fill(path, &sb, st);
    last_errno = 0;
    return 0;
}

static int walk(const char *dir, unsigned depth, int (*cb)(void *, const struct agent_stat *), void *arg)
{
    DIR *d = opendir(dir);
    if (!d)
        return -errno;
    struct dirent *de;
    int r = 0;
    while (r == 0 && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char p[4097];
        struct stat sb;
        struct agent_stat st;
        snprintf(p, sizeof p, "%s%s%s", dir, strcmp(dir, "/") ? "/" : "", de->d_name);
        if (lstat(p, &sb) < 0)
            continue;
        fill(p, &sb, &st);
        r = cb(arg, &st);
        if (r == 0 && depth > 1 && S_ISDIR(sb.st_mode))
            walk(p, depth - 1, cb, arg);
    }
    closedir(d);
    return r;
}

WEAK int agent_client_list(struct agent_client *c, const char *path, unsigned depth,
                           int (*cb)(void *arg, const struct agent_stat *e), void *arg, char *err, size_t errlen)
{
    (void)c;
    struct stat sb;
    if (stat(path, &sb) < 0)
        return fail(errno, "list", path, err, errlen);
    if (!S_ISDIR(sb.st_mode))
        return fail(ENOTDIR, "list", path, err, errlen);
    int r = walk(path, depth, cb, arg);
    if (r < 0)
        return fail(-r, "list", path, err, errlen);
    last_errno = 0;
    return r;
}

WEAK int agent_client_rename(struct agent_client *c, const char *src, const char *dst, char *err, size_t errlen)
{
    (void)c;
    if (rename(src, dst) < 0)
        return fail(errno, "rename", src, err, errlen);
    last_errno = 0;
    return 0;
}

static int rm_rf(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) < 0)
        return -errno;
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        if (!d)
            return -errno;
        struct dirent *de;
        while ((de = readdir(d))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                continue;
            char p[4097];
            snprintf(p, sizeof p, "%s/%s", path, de->d_name);
            int r = rm_rf(p);
            if (r < 0) {
                closedir(d);
                return r;
            }
        }
        closedir(d);
        return rmdir(path) < 0 ? -errno : 0;
    }
    return unlink(path) < 0 ? -errno : 0;
}

WEAK int agent_client_remove(struct agent_client *c, const char *path, int recursive, char *err, size_t errlen)
{
    (void)c;
    int r = recursive ? rm_rf(path) : (remove(path) < 0 ? -errno : 0);
    if (r < 0)
        return fail(-r, "remove", path, err, errlen);
    last_errno = 0;
    return 0;
}
