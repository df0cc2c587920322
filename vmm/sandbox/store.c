/* The sandbox store: $MOAT_HOME/NAME, its config, pid file, lock, control
 * socket and state (see sandbox.h). Nothing here prints or exits. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vmm/base/clock.h"
#include "vmm/sandbox/sandbox.h"

int sandbox_err(struct sbx_err *err, int code, const char *fmt, ...)
{
    if (!err)
        return code;
    if (!err->code)
        err->code = code;
    size_t used = strnlen(err->msg, sizeof err->msg);
    if (used >= sizeof err->msg - 1)
        return code;
    if (used)
        err->msg[used++] = '\n';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg + used, sizeof err->msg - used, fmt, ap);
    va_end(ap);
    return code;
}

static const char state_names[][16] = { "running", "paused", "stopped", "dead", "unresponsive" };

const char *sandbox_state_str(enum sbx_state st)
{
    return (unsigned)st < sizeof state_names / sizeof state_names[0] ? state_names[st] : "?";
}

/* ---- paths and files ---- */

int sandbox_valid_name(const char *n)
{
    size_t len = strlen(n);
    if (len == 0 || len > SBX_NAME_MAX || !strcmp(n, ".") || !strcmp(n, ".."))
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = n[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 (i > 0 && (c == '-' || c == '_' || c == '.'));
        if (!ok)
            return 0;
    }
    return 1;
}

int sandbox_home(char *buf, size_t len, struct sbx_err *err)
{
    const char *env = getenv("MOAT_HOME"), *xdg = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
    char cwd[PATH_MAX];
    int n;
    if (env && *env == '/')
        n = snprintf(buf, len, "%s", env);
    else if (env && *env)   /* relative: against the current directory, once and for all */
        n = getcwd(cwd, sizeof cwd) ? snprintf(buf, len, "%s/%s", cwd, env) : -1;
    else if (geteuid() == 0)
        n = snprintf(buf, len, "/var/lib/moat");
    else if (xdg && *xdg)
        n = snprintf(buf, len, "%s/moat", xdg);
    else if (home && *home)
        n = snprintf(buf, len, "%s/.local/share/moat", home);
    else
        return sandbox_err(err, -EINVAL, "no $MOAT_HOME and no $HOME: set MOAT_HOME");
    if (n < 0 || (size_t)n >= len || n >= SBX_HOME_MAX)
        return sandbox_err(err, -ENAMETOOLONG, "$MOAT_HOME path too long");
    for (const char *p = buf; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return sandbox_err(err, -EINVAL, "$MOAT_HOME contains control characters");
    return 0;
}

int sandbox_mkdir_p(const char *path, mode_t mode)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(tmp, mode) < 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(tmp, mode) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

const char *sandbox_path(const struct sbx *s, const char *file, char *p, size_t len)
{
    snprintf(p, len, "%s/%s", s->dir, file);
    return p;
}

int sandbox_paths(struct sbx *s, const char *name, struct sbx_err *err)
{
    memset(s, 0, sizeof *s);
    s->dfd = -1;
    if (!sandbox_valid_name(name))
        return sandbox_err(err, -EINVAL, "invalid sandbox name '%s' (1-%d of A-Z a-z 0-9 - _ ., "
                                         "starting with a letter or digit)", name, SBX_NAME_MAX);
    char home[SBX_HOME_MAX + 1];
    int r = sandbox_home(home, sizeof home, err);
    if (r < 0)
        return r;
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->dir, sizeof s->dir, "%s/%s", home, name);
    if ((size_t)snprintf(s->ctl, sizeof s->ctl, "%s/ctl.sock", s->dir) >= sizeof s->ctl ||
        (size_t)snprintf(s->vsock, sizeof s->vsock, "%s/vsock.sock", s->dir) >= sizeof s->vsock)
        return sandbox_err(err, -ENAMETOOLONG, "%s: path too long for a Unix socket (%zu bytes at most): "
                                               "use a shorter $MOAT_HOME or name", s->dir, sizeof s->ctl - 12);
    return 0;
}

int sandbox_lock(struct sbx *s, struct sbx_err *err)
{
    for (int i = 0; i < 300; i++) {
        if (flock(s->dfd, LOCK_EX | LOCK_NB) == 0)
            return 0;
        if (errno != EWOULDBLOCK)
            break;
        usleep(100 * 1000);
    }
    return sandbox_err(err, -EBUSY, "sandbox %s is busy (another moat command is changing it)", s->name);
}

void sandbox_close(struct sbx *s)
{
    if (s->dfd >= 0)
        close(s->dfd);
    s->dfd = -1;
    for (unsigned i = 0; i < s->ndrive; i++)
        free(s->drive[i]);
    s->ndrive = 0;
}

void sandbox_jail_config_line(struct sbx_jail *j, const char *l)
{
    const char *v = strchr(l, '=');
    if (!v)
        return;
    size_t kl = (size_t)(v++ - l);
#define KEY(k) (kl == strlen(k) && !strncmp(l, k, kl))
    if (KEY("jail"))
        j->on = !strcmp(v, "1");
    else if (KEY("jail.id") && strlen(v) < sizeof j->id)
        snprintf(j->id, sizeof j->id, "%s", v);
    else if (KEY("jail.uid"))
        j->uid = (unsigned)strtoul(v, NULL, 10);
    else if (KEY("jail.gid"))
        j->gid = (unsigned)strtoul(v, NULL, 10);
    else if (KEY("jail.tun"))
        j->tun = !strcmp(v, "1");
    else if (KEY("jail.chroot_base") && strlen(v) < sizeof j->base)
        snprintf(j->base, sizeof j->base, "%s", v);
    else if (KEY("jail.netns") && strlen(v) < sizeof j->netns)
        snprintf(j->netns, sizeof j->netns, "%s", v);
    else if (KEY("jail.cgroup_root") && strlen(v) < sizeof j->cgroot)
        snprintf(j->cgroot, sizeof j->cgroot, "%s", v);
    else if (KEY("jail.cgroup") && j->ncg < SBX_JAIL_CG_MAX && strlen(v) < sizeof j->cg[0])
        snprintf(j->cg[j->ncg++], sizeof j->cg[0], "%s", v);
#undef KEY
}

void sandbox_read_config(struct sbx *s)
{
    char p[PATH_MAX], line[512];
    FILE *f = fopen(sandbox_path(s, "config", p, sizeof p), "re");
    if (!f)
        return;
    char *big = malloc(65536);
    while (big && fgets(big, 65536, f)) {
        unsigned n;
        int off = 0;
        if (sscanf(big, "drive.%u=%n", &n, &off) == 1 && off > 0 && n < MOAT_MAX_DRIVES &&
            n == s->ndrive) {
            big[strcspn(big, "\n")] = 0;
            s->drive[s->ndrive] = strdup(big + off);
            if (s->drive[s->ndrive])
                s->ndrive++;
            continue;
        }
        if (!strncmp(big, "jail", 4)) {
            big[strcspn(big, "\n")] = 0;
            sandbox_jail_config_line(&s->jail, big);
            continue;
        }
        snprintf(line, sizeof line, "%s", big);
        if (!strncmp(line, "net.tap=", 8)) {
            line[strcspn(line, "\n")] = 0;
            if (strlen(line + 8) < sizeof s->tap)
                memcpy(s->tap, line + 8, strlen(line + 8) + 1);
        }
        if (!strcmp(line, "ephemeral=1\n"))
            s->ephemeral = 1;
        else if (!strcmp(line, "rw_drive=1\n"))
            s->rw_drive = 1;
    }
    free(big);
    fclose(f);
}

int sandbox_open(struct sbx *s, const char *name, int lock, struct sbx_err *err)
{
    int r = sandbox_paths(s, name, err);
    if (r < 0)
        return r;
    s->dfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (s->dfd < 0) {
        if (errno == ENOENT)
            return sandbox_err(err, -ENOENT, "no sandbox named %s (moat ls)", name);
        return sandbox_err(err, -errno, "%s: %s", s->dir, SBX_STRERROR(errno));
    }
    if (lock && (r = sandbox_lock(s, err)) < 0) {
        sandbox_close(s);
        return r;
    }
    /* rm may have removed it while we waited for the lock. */
    struct stat st;
    if (fstat(s->dfd, &st) < 0 || st.st_nlink == 0) {
        sandbox_close(s);
        return sandbox_err(err, -ENOENT, "sandbox %s was just removed", name);
    }
    sandbox_read_config(s);
    return 0;
}

int sandbox_exists(const char *name)
{
    struct sbx s;
    char p[PATH_MAX];
    if (!sandbox_valid_name(name))
        return 0;
    char home[SBX_HOME_MAX + 1];
    if (sandbox_home(home, sizeof home, NULL) < 0)
        return 0;
    snprintf(s.dir, sizeof s.dir, "%s/%s", home, name);
    return access(sandbox_path(&s, "config", p, sizeof p), F_OK) == 0;
}

/* Remove NAME below the open directory dfd and, a directory, everything
 * below it. Every step is relative to a directory already open, each one
 * opened O_NOFOLLOW: a symbolic link anywhere in the tree (a jailed
 * sandbox's directory is writable by its jail) is removed, never followed,
 * even one that replaces a directory while this runs. Only entries on
 * device dev (no mount is crossed); at most 64 levels. 0, or -1 (errno). */
static int rm_at(int dfd, const char *name, dev_t dev, int depth)
{
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : -1;
    if (st.st_dev != dev) {
        errno = EXDEV;
        return -1;
    }
    if (!S_ISDIR(st.st_mode))
        return unlinkat(dfd, name, 0) == 0 || errno == ENOENT ? 0 : -1;
    if (depth >= 64) {
        errno = ELOOP;
        return -1;
    }
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1;
    struct stat ds;
    DIR *d = NULL;
    errno = 0;
    if (fstat(fd, &ds) < 0 || ds.st_dev != dev || !(d = fdopendir(fd))) {
        int e = errno ? errno : EXDEV;
        close(fd);
        errno = e;
        return -1;
    }
    int r = 0, e = 0;
    struct dirent *de;
    while (r == 0 && (de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && (r = rm_at(fd, de->d_name, dev, depth + 1)) < 0)
            e = errno;
    closedir(d);
    if (r < 0) {
        errno = e;
        return -1;
    }
    return unlinkat(dfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT ? 0 : -1;
}

int sandbox_rm_at(int dfd, const char *name, dev_t dev)
{
    return rm_at(dfd, name, dev, 0) < 0 ? -errno : 0;
}

int sandbox_rm_rf(const char *path)
{
    char parent[PATH_MAX];
    const char *slash = strrchr(path, '/');
    struct stat st;
    if (!slash || !slash[1] || (size_t)(slash - path) >= sizeof parent) {
        errno = EINVAL;
        return -EINVAL;
    }
    snprintf(parent, sizeof parent, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    int dfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return errno == ENOENT ? 0 : -errno;
    int r = 0;
    if (fstatat(dfd, slash + 1, &st, AT_SYMLINK_NOFOLLOW) == 0)
        r = rm_at(dfd, slash + 1, st.st_dev, 0);
    else if (errno != ENOENT)
        r = -1;
    int e = errno;
    close(dfd);
    errno = e;
    return r < 0 ? -e : 0;
}

/* What a jail leaves of a jailed sandbox once its process is gone:
 * CHROOT_BASE/moat/ID (the jail's root, its mount points; the mounts were
 * in the jail's own namespace and went with it; no mount is crossed) and
 * its cgroup CGROOT/moat/ID (nothing removes it when the jailed moat
 * exits; sandbox_jail_host also removes an empty one before a start). */
int sandbox_jail_cleanup(const struct sbx *s, struct sbx_err *err)
{
    const struct sbx_jail *j = &s->jail;
    if (!j->on || jail_check_id(j->id) < 0 || !j->base[0])
        return 0;
    char p[PATH_MAX + 128];
    int rc = 0, r;
    snprintf(p, sizeof p, "%s/moat/%s", j->base, j->id);
    if ((r = sandbox_rm_rf(p)) < 0)
        rc = sandbox_err(err, r, "removing the jail directory %s: %s", p, SBX_STRERROR(-r));
    if (j->ncg) {
        snprintf(p, sizeof p, "%s/moat/%s", j->cgroot[0] ? j->cgroot : "/sys/fs/cgroup", j->id);
        if (rmdir(p) < 0 && errno != ENOENT) {
            r = -errno;
            sandbox_err(err, r, "removing the jail's cgroup %s: %s", p, SBX_STRERROR(-r));
            rc = rc ? rc : r;
        }
    }
    return rc;
}

/* ---- the process ---- */

pid_t sandbox_read_pid(const struct sbx *s)
{
    char p[PATH_MAX], buf[32] = "";
    int fd = open(sandbox_path(s, "pid", p, sizeof p), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    long v = strtol(buf, NULL, 10);
    return v > 1 && v < INT_MAX ? (pid_t)v : -1;
}

int sandbox_pid_is_ours(const struct sbx *s, pid_t pid)
{
    if (pid <= 1)
        return 0;
    /* Read all of the command line (64 KiB at most): a jailed sandbox's
     * moat was moat jail's once, its options (paths it exposes) first. */
    char p[64], *buf = malloc(65536);
    snprintf(p, sizeof p, "/proc/%d/cmdline", (int)pid);
    int fd = buf ? open(p, O_RDONLY | O_CLOEXEC) : -1;
    if (fd < 0) {
        free(buf);
        return 0;
    }
    ssize_t n = 0, k;
    while (n < 65535 && (k = read(fd, buf + n, (size_t)(65535 - n))) > 0)
        n += k;
    close(fd);
    buf[n] = 0;
    int ours = 0;
    for (char *a = buf; !ours && a < buf + n; a += strlen(a) + 1)
        ours = !strcmp(a, "--control") && a + strlen(a) + 1 < buf + n && !strcmp(a + strlen(a) + 1, s->ctl);
    free(buf);
    return ours;
}

int sandbox_ctl_path_request(const char *path, const char *req, char *reply, size_t rlen, int timeout_s)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (!path[0] || strlen(path) >= sizeof sa.sun_path)
        return -ENAMETOOLONG;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct timeval tv = { .tv_sec = timeout_s };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int r = 0;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
        send(fd, req, strlen(req), MSG_NOSIGNAL) < 0 || send(fd, "\n", 1, MSG_NOSIGNAL) < 0) {
        r = -errno;
        close(fd);
        return r;
    }
    size_t len = 0;
    while (len + 1 < rlen) {
        ssize_t n = recv(fd, reply + len, rlen - 1 - len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            r = errno == EAGAIN ? -ETIMEDOUT : -errno;
            break;
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (memchr(reply, '\n', len))
            break;
    }
    close(fd);
    reply[len] = 0;
    char *nl = strchr(reply, '\n');
    if (nl)
        *nl = 0;
    if (r == 0 && len == 0)
        r = -ECONNRESET;
    return r;
}

const char *sandbox_sock_via(const struct sbx *s, const char *path, char *buf, size_t len, int *keep)
{
    *keep = -1;
    if (!s->jail.on)
        return path;
    int fd = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        return NULL;
    if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode)) {
        close(fd);
        errno = ECONNREFUSED;
        return NULL;
    }
    *keep = fd;
    snprintf(buf, len, "/proc/self/fd/%d", fd);
    return buf;
}

int sandbox_ctl_request(const struct sbx *s, const char *req, char *reply, size_t len, int timeout_s)
{
    char via[64];
    int keep;
    const char *path = sandbox_sock_via(s, s->ctl, via, sizeof via, &keep);
    if (!path)
        return -errno;
    int r = sandbox_ctl_path_request(path, req, reply, len, timeout_s);
    if (keep >= 0)
        close(keep);
    return r;
}

int sandbox_ctl(const struct sbx *s, const char *req, char *reply, size_t len, int timeout_s,
                struct sbx_err *err)
{
    char buf[256];
    if (!reply) {
        reply = buf;
        len = sizeof buf;
    }
    int r = sandbox_ctl_request(s, req, reply, len, timeout_s);
    if (r < 0)
        return sandbox_err(err, r, "sandbox %s: control socket: %s", s->name, SBX_STRERROR(-r));
    if (strncmp(reply, "ok", 2) != 0)
        return sandbox_err(err, -EPROTO, "sandbox %s: %s", s->name, reply);
    return 0;
}

enum sbx_state sandbox_state(const struct sbx *s, pid_t *pidp, double *uptime)
{
    pid_t pid = sandbox_read_pid(s);
    *pidp = pid > 0 ? pid : 0;
    *uptime = -1;
    char p[PATH_MAX];
    if (pid != 0) {
        if (!sandbox_pid_is_ours(s, pid))
            return SBX_DEAD;
        char reply[256];
        if (sandbox_ctl_request(s, "status", reply, sizeof reply, 5) < 0)
            return SBX_HUNG;
        const char *u = strstr(reply, "uptime=");
        if (u)
            *uptime = strtod(u + 7, NULL);
        return !strncmp(reply, "ok paused", 9) ? SBX_PAUSED : SBX_RUNNING;
    }
    return access(sandbox_path(s, "snap/state", p, sizeof p), F_OK) == 0 ? SBX_STOPPED : SBX_DEAD;
}

/* A pidfd for pid (readable once it has exited), or -1 (no pidfd_open:
 * Linux before 5.3; or no such process: errno ESRCH). */
static int pid_fd(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

/* The exit is waited for on a pidfd (no polling); without pidfds, /proc is
 * checked every 5 ms. */
int sandbox_wait_gone(const struct sbx *s, pid_t pid, double timeout, int force)
{
    int pfd = pid_fd(pid);
    if (pfd < 0 && errno == ESRCH)
        return 0;
    double t0 = (double)clock_mono_ns() / 1e9;
    while (sandbox_pid_is_ours(s, pid)) {
        if ((double)clock_mono_ns() / 1e9 - t0 > timeout) {
            if (!force) {
                if (pfd >= 0)
                    close(pfd);
                return -ETIMEDOUT;
            }
            kill(pid, SIGKILL);
            force = 0;
            t0 = (double)clock_mono_ns() / 1e9;
            timeout = 5;
        }
        waitpid(pid, NULL, WNOHANG);    /* in case it is our child */
        if (pfd >= 0) {
            struct pollfd p = { .fd = pfd, .events = POLLIN };
            int ms = (int)((timeout - ((double)clock_mono_ns() / 1e9 - t0)) * 1000) + 1;
            if (poll(&p, 1, ms > 0 ? ms : 1) > 0) {
                waitpid(pid, NULL, WNOHANG);
                break;          /* exited (a zombie of ours reads as gone too) */
            }
        } else {
            usleep(5 * 1000);
        }
    }
    if (pfd >= 0)
        close(pfd);
    return 0;
}

int sandbox_kill_process(const struct sbx *s, pid_t pid, struct sbx_err *err)
{
    if (pid > 0 && sandbox_pid_is_ours(s, pid)) {
        char reply[256];
        sandbox_ctl_request(s, "stop", reply, sizeof reply, 5);
        if (sandbox_wait_gone(s, pid, 10, 1) < 0)
            return sandbox_err(err, -ETIMEDOUT, "sandbox %s: process %d does not go away", s->name, (int)pid);
    }
    char p[PATH_MAX];
    unlink(sandbox_path(s, "pid", p, sizeof p));
    unlink(s->ctl);
    return 0;
}

int sandbox_need_live(const struct sbx *s, enum sbx_state st, const char *what, struct sbx_err *err)
{
    if (st == SBX_RUNNING || st == SBX_PAUSED)
        return 0;
    return sandbox_err(err, -EINVAL, "sandbox %s is %s: cannot %s it%s", s->name, sandbox_state_str(st), what,
                       st == SBX_STOPPED ? " (moat start it first)" :
                       st == SBX_DEAD ? " (its process has exited; moat rm it)" : "");
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

ssize_t sandbox_names(const char *prefix, char **names, size_t max, struct sbx_err *err)
{
    char home[PATH_MAX];
    int r = sandbox_home(home, sizeof home, err);
    if (r < 0)
        return r;
    DIR *d = opendir(home);
    if (!d)
        return 0;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max)
        if (!strncmp(e->d_name, prefix, strlen(prefix)) && sandbox_valid_name(e->d_name) &&
            (names[n] = strdup(e->d_name)))
            n++;
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    return (ssize_t)n;
}

struct sbx *sandbox_open_alloc(const char *name, int lock, int *r, struct sbx_err *err)
{
    struct sbx *s = malloc(sizeof *s);     /* ~17 KiB: not on a server thread's stack */
    if (!s) {
        *r = sandbox_err(err, -ENOMEM, "out of memory");
        return NULL;
    }
    if ((*r = sandbox_open(s, name, lock, err)) < 0) {
        free(s);
        return NULL;
    }
    return s;
}

void sandbox_free(struct sbx *s)
{
    if (s) {
        sandbox_close(s);
        free(s);
    }
}
