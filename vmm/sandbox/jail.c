/* moat jail's mechanism (see jail.h; docs/security.md, "Jail"): the steps,
 * in order, follow Firecracker's jailer; each is commented where it
 * happens, numbered as in docs/security.md's table. The pure parts are in jail_spec.c; moat jail's options and
 * messages in vmm/cli/cli_jail.c. Nothing here prints or exits. */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <grp.h>
#include <link.h>
#include <unistd.h>

#include "vmm/core/kvm.h"
#include "vmm/sandbox/jail.h"

void sandbox_jail_defaults(struct sbx_jail_run *j)
{
    memset(j, 0, sizeof *j);
    j->base = "/srv/jail";
    j->cgroot = "/sys/fs/cgroup";
    j->ready_fd = -1;
}

static int write_file(const char *path, const char *s)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = write(fd, s, strlen(s));
    int e = n < 0 ? -errno : (size_t)n != strlen(s) ? -EIO : 0;
    close(fd);
    return e;
}

/* The files the inner moat (this binary) needs to start: the program
 * interpreter by the name in PT_INTERP (e.g. /lib64/ld-linux-x86-64.so.2:
 * the kernel opens it by that name) and every shared object by the name the
 * loader found it under (e.g. /lib/x86_64-linux-gnu/libc.so.6; inside the
 * jail there is no ld.so.cache, and the loader's default directories hold
 * them under these names). */
static int loaded_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct jail_paths *l = data;
    int r = 0;
    for (int i = 0; i < info->dlpi_phnum && r == 0; i++)
        if (info->dlpi_phdr[i].p_type == PT_INTERP)
            r = jail_paths_add(l, (const char *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr), 0);
    if (r == 0 && info->dlpi_name && info->dlpi_name[0] == '/')
        r = jail_paths_add(l, info->dlpi_name, 0);
    return r;
}

static int add_loaded_files(struct jail_paths *l, const char *exe)
{
    int r = jail_paths_add(l, exe, 0);
    return r < 0 ? r : dl_iterate_phdr(loaded_cb, l);
}

/* A per-VM cgroup CGROOT/moat/ID with the limits asked for. Its
 * controllers are enabled in the parents' cgroup.subtree_control first. */
static int cgroup_setup(struct sbx_jail_run *j, struct sbx_err *err)
{
    char p[PATH_MAX * 2 + 64], ctl[PATH_MAX * 2 + 64];
    snprintf(p, sizeof p, "%s/cgroup.controllers", j->cgroot);
    if (access(p, F_OK) < 0)
        return sandbox_err(err, -errno,
                           "--cgroup: no cgroup v2 at %s (no cgroup.controllers); limits cannot be applied",
                           j->cgroot);
    snprintf(j->cgdir, sizeof j->cgdir, "%s/moat/%s", j->cgroot, j->id);
    int r = sandbox_mkdir_p(j->cgdir, 0755);
    if (r < 0)
        return sandbox_err(err, r, "creating cgroup %s: %s", j->cgdir, SBX_STRERROR(-r));
    for (int i = 0; i < j->ncg; i++) {
        char ctrl[32];
        snprintf(ctrl, sizeof ctrl, "+%.*s", (int)strcspn(j->cg[i].key, "."), j->cg[i].key);
        const char *lv[2] = { j->cgroot, NULL };
        char mid[PATH_MAX];
        snprintf(mid, sizeof mid, "%s/moat", j->cgroot);
        lv[1] = mid;
        for (int k = 0; k < 2; k++) {
            snprintf(ctl, sizeof ctl, "%s/cgroup.subtree_control", lv[k]);
            if ((r = write_file(ctl, ctrl)) < 0)
                return sandbox_err(err, r, "enabling %s in %s: %s", ctrl + 1, ctl, SBX_STRERROR(-r));
        }
        snprintf(p, sizeof p, "%s/%s", j->cgdir, j->cg[i].key);
        if ((r = write_file(p, j->cg[i].val)) < 0)
            return sandbox_err(err, r, "setting %s to '%s': %s", p, j->cg[i].val, SBX_STRERROR(-r));
    }
    return 0;
}

/* Walk rel (a path of plain names, no "." or "..") from the directory
 * dirfd without following a symbolic link anywhere: each directory on the
 * way is opened O_NOFOLLOW (created 0755 first when mkdirs), so a link
 * planted in a directory the jailed process could write (an exposed
 * writable one, a jail directory from before) cannot move what is created
 * or mounted out of the jail. The last name is not opened: the parent's fd
 * (O_PATH) comes back, *leaf points at the name in rel. -errno, -ELOOP
 * where a name on the way is a symbolic link. */
static int walk_parent(int dirfd, const char *rel, bool mkdirs, const char **leaf)
{
    int cur = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
    if (cur < 0)
        return -errno;
    const char *p = rel;
    for (;;) {
        while (*p == '/')
            p++;
        const char *end = strchr(p, '/');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *next = end;
        while (next && *next == '/')
            next++;
        if (len == 0 || len > NAME_MAX || (len == 1 && p[0] == '.') || (len == 2 && !strncmp(p, "..", 2))) {
            close(cur);
            return -EINVAL;
        }
        if (!next || !*next) {
            *leaf = p;
            return cur;
        }
        char name[NAME_MAX + 1];
        memcpy(name, p, len);
        name[len] = 0;
        if (mkdirs && mkdirat(cur, name, 0755) < 0 && errno != EEXIST) {
            int e = -errno;
            close(cur);
            return e;
        }
        int nfd = openat(cur, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int e = -errno;
        if (nfd < 0) {
            /* O_NOFOLLOW|O_DIRECTORY on a link: ENOTDIR; say which */
            struct stat ls;
            if (fstatat(cur, name, &ls, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(ls.st_mode))
                e = -ELOOP;
            close(cur);
            return e;
        }
        close(cur);
        cur = nfd;
        p = next;
    }
}

/* The leaf name of a walk_parent (up to its '/' or end) into buf. */
static void leaf_name(const char *leaf, char *buf)
{
    size_t len = strcspn(leaf, "/");
    memcpy(buf, leaf, len);
    buf[len] = 0;
}

/* ROOT/rel's mount point, created like the source (a directory or an
 * empty file), never through a symbolic link: an O_PATH fd or -errno
 * (-ELOOP: a link on the way or in its place). */
static int mount_point(int rootfd, const char *rel, bool dir)
{
    const char *leaf;
    int pfd = walk_parent(rootfd, rel, true, &leaf);
    if (pfd < 0)
        return pfd;
    char name[NAME_MAX + 1];
    leaf_name(leaf, name);
    int r = 0;
    if (dir)
        r = mkdirat(pfd, name, 0755) < 0 && errno != EEXIST ? -errno : 0;
    else {
        /* O_EXCL: never opens what is there (a link, a FIFO) */
        int fd = openat(pfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0)
            close(fd);
        else if (errno != EEXIST)
            r = -errno;
    }
    int fd = r < 0 ? r : openat(pfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd == -1)
        fd = -errno;
    close(pfd);
    if (fd < 0)
        return fd;
    struct stat st;
    int e = 0;
    if (fstat(fd, &st) < 0)
        e = -errno;
    else if (S_ISLNK(st.st_mode))
        e = -ELOOP;
    else if (dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
        e = dir ? -ENOTDIR : -EISDIR;
    if (e) {
        close(fd);
        return e;
    }
    return fd;
}

/* The source of an exposed path, opened once (what is looked at is what
 * is mounted). The host's own links are followed (/lib64/ld-linux-x86-64.so.2
 * is one), except below a directory this jail exposes writable: the jailed
 * process may have put links there, so from that directory on none is
 * followed. An O_PATH fd or -errno. */
static int open_source(const struct sbx_jail_run *j, const struct jail_path *e)
{
    size_t best = 0;
    for (int i = 0; i < j->paths.n; i++) {
        const struct jail_path *w = &j->paths.p[i];
        size_t n = strlen(w->path);
        if (w->rw && n > best && n < strlen(e->path) && !strncmp(w->path, e->path, n) &&
            (e->path[n] == '/' || n == 1))
            best = n;
    }
    if (!best) {
        int fd = open(e->path, O_PATH | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
    }
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%.*s", (int)best, e->path);
    int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return -errno;
    const char *leaf;
    int pfd = walk_parent(dfd, e->path + best, false, &leaf);
    close(dfd);
    if (pfd < 0)
        return pfd;
    char name[NAME_MAX + 1];
    leaf_name(leaf, name);
    int fd = openat(pfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    int r = fd < 0 ? -errno : fd;
    close(pfd);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISLNK(st.st_mode)) {
        close(fd);
        r = -ELOOP;
    }
    return r;
}

/* Bind src (an O_PATH fd) onto the mount point dst (an O_PATH fd, ROOT/rel):
 * by fd (open_tree, mount_setattr, move_mount: Linux 5.12), else through
 * /proc/self/fd (the fds, not the names, are what is resolved; the remount
 * through the new mount's root, ROOT/rel walked again). */
static int bind_fd(int src, int dst, bool rw, int rootfd, const char *rel, bool dir)
{
    int tree = (int)syscall(SYS_open_tree, src, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
    if (tree >= 0) {
        struct mount_attr a = { .attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (rw ? 0 : MOUNT_ATTR_RDONLY) };
        int r = 0;
        if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &a, sizeof a) < 0 ||
            syscall(SYS_move_mount, tree, "", dst, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
            r = -errno;
        close(tree);
        if (r != -ENOSYS)
            return r;
    } else if (errno != ENOSYS) {
        return -errno;
    }
    char s[40], d[40];
    snprintf(s, sizeof s, "/proc/self/fd/%d", src);
    snprintf(d, sizeof d, "/proc/self/fd/%d", dst);
    unsigned long fl = MS_BIND | MS_NOSUID | MS_NODEV;
    if (mount(s, d, NULL, fl, NULL) < 0)
        return -errno;
    int top = mount_point(rootfd, rel, dir);
    if (top < 0)
        return top;
    snprintf(d, sizeof d, "/proc/self/fd/%d", top);
    int r = mount(NULL, d, NULL, fl | MS_REMOUNT | (rw ? 0 : MS_RDONLY), NULL) < 0 ? -errno : 0;
    close(top);
    return r;
}

static int drop_caps(void)
{
    /* The bounding set first (needs CAP_SETPCAP, which we still hold). */
    for (int c = 0; c <= 63; c++)
        if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL)
            return -errno;
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
        return -errno;
    return 0;
}

static int capset_zero(void)
{
    struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof d);
    return syscall(SYS_capset, &h, d) < 0 ? -errno : 0;
}

/* Make host PATH visible at ROOT/PATH (a bind mount; read-only unless rw;
 * never device nodes or set-id programs). Nothing under ROOT is created
 * or mounted through a symbolic link (walk_parent): one there is refused. */
static int expose(const struct sbx_jail_run *j, int rootfd, const struct jail_path *e, struct sbx_err *err)
{
    int src = open_source(j, e);
    if (src < 0)
        return sandbox_err(err, src, "%s: %s%s", e->path, SBX_STRERROR(-src),
                           src == -ELOOP ? " (a symbolic link below a directory the jail can write)" : "");
    struct stat st;
    if (fstat(src, &st) < 0) {
        int r = -errno;
        close(src);
        return sandbox_err(err, r, "%s: %s", e->path, SBX_STRERROR(-r));
    }
    bool dir = S_ISDIR(st.st_mode);
    int dst = mount_point(rootfd, e->path, dir);
    int r = dst < 0 ? dst : bind_fd(src, dst, e->rw, rootfd, e->path, dir);
    if (dst >= 0)
        close(dst);
    close(src);
    if (r == -ELOOP)
        return sandbox_err(err, r, "exposing %s in the jail: %s%s is or passes a symbolic link: refused",
                           e->path, j->root, e->path);
    if (r < 0)
        return sandbox_err(err, r, "exposing %s in the jail: %s", e->path, SBX_STRERROR(-r));
    return 0;
}

/* The node just made as NAME in the directory pfd owned by the jail's user
 * through an fd of it, checked to be it (a character device of rdev, one
 * link): the directory is the jailed process's, which may swap the name. */
static int chown_node(const struct sbx_jail_run *j, int pfd, const char *name, dev_t rdev)
{
    int r = 0;
    int nfd = openat(pfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    struct stat ns;
    if (nfd < 0)
        r = -errno;
    else if (fstat(nfd, &ns) < 0)
        r = -errno;
    else if (!S_ISCHR(ns.st_mode) || ns.st_rdev != rdev || ns.st_nlink != 1)
        r = -EEXIST;
    else if (fchownat(nfd, "", j->uid, j->gid, AT_EMPTY_PATH) < 0)
        r = -errno;
    if (nfd >= 0)
        close(nfd);
    return r;
}

/* A device node in the jail like the host's (same major/minor), owned by
 * the jail's uid/gid, mode 0600; made without following a symbolic link
 * (walk_parent; what is in its place is removed, the node chowned by the
 * parent's fd and its name). */
static int make_node(const struct sbx_jail_run *j, int rootfd, const char *host, const char *in,
                     struct sbx_err *err)
{
    struct stat st;
    if (stat(host, &st) < 0 || !S_ISCHR(st.st_mode))
        return sandbox_err(err, errno ? -errno : -ENODEV, "%s: %s", host,
                           errno ? SBX_STRERROR(errno) : "not a character device");
    const char *leaf;
    int pfd = walk_parent(rootfd, in, true, &leaf);
    int r = pfd < 0 ? pfd : 0;
    char name[NAME_MAX + 1];
    if (r == 0) {
        leaf_name(leaf, name);
        unlinkat(pfd, name, 0);
        if (mknodat(pfd, name, S_IFCHR | 0600, st.st_rdev) < 0)
            r = -errno;
    }
    if (r == 0)
        r = chown_node(j, pfd, name, st.st_rdev);
    if (pfd >= 0)
        close(pfd);
    if (r < 0)
        return sandbox_err(err, r, "creating %s%s: %s%s", j->root, in, SBX_STRERROR(-r),
                           r == -ELOOP ? " (a symbolic link on the way)" : "");
    return 0;
}

/* The inner command's checks and files (see jail.h). */
int sandbox_jail_inner(struct sbx_jail_run *j, int argc, char **argv, struct sbx_err *err)
{
    char why[512];
    if (!strcmp(argv[argc > 1 ? 1 : 0], "jail"))
        return sandbox_err(err, -EINVAL, "a jail inside a jail is not supported");
    int r = jail_inner_paths(argc, argv, &j->paths, why, sizeof why);
    if (r < 0)
        return sandbox_err(err, r, "%s", why);
    int fd = jail_inner_ready_fd(argc, argv, why, sizeof why);
    if (fd == -EINVAL)
        return sandbox_err(err, fd, "%s", why);
    j->argc = argc;
    j->argv = argv;
    j->ready_fd = fd;
    return 0;
}

/* Steps 1 and 2, and this binary's own path. */
static int leave_host(struct sbx_jail_run *j, struct sbx_err *err)
{
    /* 1. Close every inherited fd but stdin/out/err: nothing the caller
     *    had open (sockets, the host's files) reaches the jail; but the
     *    inner command's --ready-fd, a pipe (moat create's and start's:
     *    the jailed moat says there when its guest runs). */
    int cr = 0, fd = j->ready_fd;
    if (fd > 3)
        cr = (int)syscall(SYS_close_range, 3u, (unsigned)fd - 1, 0u);
    if (cr == 0)
        cr = (int)syscall(SYS_close_range, fd >= 3 ? (unsigned)fd + 1 : 3u, ~0u, 0u);
    if (cr < 0)
        return sandbox_err(err, -errno, "close_range: %s", SBX_STRERROR(errno));
    /* 2. Clear the environment: no variable of the caller's steers the
     *    inner moat (MOAT_*, LD_*, proxies). */
    clearenv();
    return 0;
}

/* What this process needs from the host before it leaves it: its own path
 * (the inner moat is this binary). */
static int self_exe(struct sbx_jail_run *j, struct sbx_err *err)
{
    ssize_t n = readlink("/proc/self/exe", j->exe, sizeof j->exe - 1);
    if (n <= 0)
        return sandbox_err(err, n < 0 && errno ? -errno : -EIO, "readlink /proc/self/exe: %s",
                           SBX_STRERROR(errno));
    j->exe[n] = 0;
    return 0;
}

/* 3. The files the inner moat needs: what j->preload loads, this binary's
 *    shared objects; every path must exist. */
static int host_files(struct sbx_jail_run *j, struct sbx_err *err)
{
    if (j->preload) {
        char why[256];
        int r = j->preload(why, sizeof why);
        if (r < 0)
            return sandbox_err(err, r, "%s", why);
    }
    if (add_loaded_files(&j->paths, j->exe) < 0)
        return sandbox_err(err, -E2BIG, "listing this binary's shared objects: a bad name or more than %d paths",
                           JAIL_PATHS_MAX);
    for (int k = 0; k < j->paths.n; k++) {
        struct jail_path *e = &j->paths.p[k];
        if (access(e->path, F_OK) < 0 && errno == ENOENT && e->may_create) {
            /* An overlay moat will create: expose its directory instead. */
            char *slash = strrchr(e->path, '/');
            if (slash == e->path)
                slash[1] = 0;   /* "/x" -> "/" is refused below */
            else
                *slash = 0;
        }
        errno = 0;
        if (jail_check_path(e->path) < 0 || access(e->path, F_OK) < 0)
            return sandbox_err(err, errno ? -errno : -EINVAL, "%s: %s", e->path,
                               errno ? SBX_STRERROR(errno) : "cannot be exposed");
    }
    return 0;
}

/* Steps 0 to 3 (see jail.h); with leave false, for sandbox_jail_host, the
 * caller left as it is: no ready fd of its own, no fd closed, its
 * environment kept (the child's exec passes its own). */
static int from_host(struct sbx_jail_run *j, bool leave, struct sbx_err *err)
{
    if (geteuid() != 0)
        return sandbox_err(err, -EPERM,
                           "needs root (it creates namespaces, device nodes and mounts, then drops to --uid/--gid)");
    struct stat rfs;
    if (leave && j->ready_fd >= 0 && (fstat(j->ready_fd, &rfs) < 0 || !S_ISFIFO(rfs.st_mode)))
        return sandbox_err(err, -EBADF, "the inner command's --ready-fd %d: not an open pipe", j->ready_fd);
    if (!realpath(j->base, j->realbase))
        return sandbox_err(err, -errno, "--chroot-base %s: %s", j->base, SBX_STRERROR(errno));
    int r = leave ? leave_host(j, err) : 0;
    if (r == 0)
        r = self_exe(j, err);
    if (r == 0)
        r = host_files(j, err);
    if (r < 0)
        return r;
    char why[512];
    /* The caller's MOAT_FORCE_PVM is not the jail's (cleared above, or
     * not passed on): the host as /sys and /proc say. */
    j->pvm = kvm_host_probe_pvm_why(why, sizeof why);
    return 0;
}

int sandbox_jail_prepare(struct sbx_jail_run *j, struct sbx_err *err)
{
    return from_host(j, true, err);
}

int sandbox_jail_root_path(struct sbx_jail_run *j, struct sbx_err *err)
{
    if ((size_t)snprintf(j->root, sizeof j->root, "%s/moat/%s/root", j->realbase, j->id) >= sizeof j->root)
        return sandbox_err(err, -ENAMETOOLONG, "--chroot-base is too long");
    return 0;
}

/* The per-VM directory BASE/moat/ID/root, root-owned, 0755. */
static int make_root(struct sbx_jail_run *j, struct sbx_err *err)
{
    int r = sandbox_mkdir_p(j->root, 0755);
    if (r < 0)
        return sandbox_err(err, r, "creating %s: %s", j->root, SBX_STRERROR(-r));
    /* Everything below is created by following this directory: it must be
     * root's and writable by root alone (a --chroot-base another user can
     * write could hold symbolic links that move the mounts). */
    struct stat rs;
    if (lstat(j->root, &rs) < 0 || !S_ISDIR(rs.st_mode) || rs.st_uid != 0 || (rs.st_mode & 022))
        return sandbox_err(err, -EPERM, "%s must be a directory owned by root and writable by root only",
                           j->root);
    /* Parents before what lies below them: no mount hides an earlier one. */
    jail_paths_sort(&j->paths);
    struct statvfs sv;
    if (statvfs(j->root, &sv) == 0 && (sv.f_flag & ST_NODEV))
        return sandbox_err(err, -EPERM,
                           "%s is on a nodev mount: /dev/kvm would not open there; pick another --chroot-base",
                           j->root);
    return 0;
}

/* Step 6: the network namespace, when given, joined. */
static int join_netns(const struct sbx_jail_run *j, struct sbx_err *err)
{
    if (!j->netns)
        return 0;
    int r = 0, fd = open(j->netns, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) < 0)
        r = sandbox_err(err, -errno, "--netns %s: %s", j->netns, SBX_STRERROR(errno));
    if (fd >= 0)
        close(fd);
    return r;
}

int sandbox_jail_setup(struct sbx_jail_run *j, struct sbx_err *err)
{
    /* 4. The per-VM directory. */
    int r = make_root(j, err);
    if (r < 0)
        return r;
    /* 5. cgroup v2 limits in a per-VM cgroup (only when asked). */
    if (j->ncg && (r = cgroup_setup(j, err)) < 0)
        return r;
    /* 6. The network namespace, when given, is joined before the others
     *    are created. */
    if ((r = join_netns(j, err)) < 0)
        return r;
    /* 7. New ipc, uts and pid namespaces; the pid namespace takes effect
     *    for the child, which becomes its pid 1. The child makes its own
     *    mount namespace: the parent keeps the host's root and mounts. */
    if (unshare(CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID) < 0)
        return sandbox_err(err, -errno, "unshare: %s", SBX_STRERROR(errno));
    return 0;
}

/* The signals the parent forwards to the jailed moat: blocked before the
 * fork, taken with sigwaitinfo; the child unblocks them. moat is pid 1 of
 * its namespace, where a signal it has no handler for is dropped, so
 * SIGINT, SIGTERM and SIGHUP (which kill a moat outside a jail) are passed
 * on as SIGKILL, and the status is 128 + the signal received; SIGUSR1 and
 * SIGUSR2 (snapshots) are passed on as they are. */
static void forwarded(sigset_t *fwd)
{
    sigemptyset(fwd);
    sigaddset(fwd, SIGINT);
    sigaddset(fwd, SIGTERM);
    sigaddset(fwd, SIGHUP);
    sigaddset(fwd, SIGUSR1);
    sigaddset(fwd, SIGUSR2);
    sigaddset(fwd, SIGCHLD);
}

void sandbox_jail_block_signals(sigset_t *old)
{
    sigset_t fwd;
    forwarded(&fwd);
    sigprocmask(SIG_BLOCK, &fwd, old);
}

/* In the child, steps 8 and 9: the cgroup joined, a mount namespace of
 * its own, every path bound into the jail directory, the device nodes. */
static int child_mounts(const struct sbx_jail_run *j, struct sbx_err *err)
{
    /* Join the per-VM cgroup before anything else runs in it. */
    if (j->cgdir[0]) {
        char p[PATH_MAX + 64];
        snprintf(p, sizeof p, "%s/cgroup.procs", j->cgdir);
        int r = write_file(p, "0");
        if (r < 0)
            return sandbox_err(err, r, "joining %s: %s", p, SBX_STRERROR(-r));
    }
    /* A mount namespace of the child's own: pivot_root below moves the
     * root of every process in the namespace that shares the old root, so
     * a namespace shared with the waiting parent would put the parent in
     * the jail too (and its removal of the cgroup would miss). */
    if (unshare(CLONE_NEWNS) < 0)
        return sandbox_err(err, -errno, "unshare(CLONE_NEWNS): %s", SBX_STRERROR(errno));
    /* Mounts made from here on stay in this namespace: nothing propagates
     * back to the host. */
    if (mount(NULL, "/", NULL, MS_SLAVE | MS_REC, NULL) < 0)
        return sandbox_err(err, -errno, "making / a slave mount: %s", SBX_STRERROR(errno));
    /* pivot_root needs the new root to be a mount point. */
    if (mount(j->root, j->root, NULL, MS_BIND | MS_NOSUID, NULL) < 0)
        return sandbox_err(err, -errno, "bind-mounting %s: %s", j->root, SBX_STRERROR(errno));
    int rootfd = open(j->root, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (rootfd < 0)
        return sandbox_err(err, -errno, "%s: %s", j->root, SBX_STRERROR(errno));
    int r = 0;
    for (int i = 0; i < j->paths.n && r == 0; i++)
        r = expose(j, rootfd, &j->paths.p[i], err);
    if (r == 0)
        r = make_node(j, rootfd, "/dev/kvm", "/dev/kvm", err);
    if (r == 0 && j->tun)
        r = make_node(j, rootfd, "/dev/net/tun", "/dev/net/tun", err);
    if (r == 0 && access("/dev/userfaultfd", F_OK) == 0)
        r = make_node(j, rootfd, "/dev/userfaultfd", "/dev/userfaultfd", err);
    close(rootfd);
    return r;
}

/* rlimits: no-file defaults to 2048 (set last); the others only when
 * asked. */
static int set_rlimits(const struct sbx_jail_run *j, struct sbx_err *err)
{
    int have_nofile = 0;
    for (int i = 0; i < j->nrl; i++)
        have_nofile |= j->rl_res[i] == RLIMIT_NOFILE;
    for (int i = 0; i < j->nrl + !have_nofile; i++) {
        int res = i < j->nrl ? j->rl_res[i] : RLIMIT_NOFILE;
        uint64_t val = i < j->nrl ? j->rl_val[i] : 2048;
        struct rlimit rl = { val, val };
        if (setrlimit(res, &rl) < 0)
            return sandbox_err(err, -errno, "setrlimit(%d, %llu): %s", res, (unsigned long long)val,
                               SBX_STRERROR(errno));
    }
    return 0;
}

/* In the child, steps 10 to 16 but the exec: the hostname, pivot_root,
 * rlimits, no_new_privs, no capabilities, the jail's uid and gid. */
static int child_confine(const struct sbx_jail_run *j, struct sbx_err *err)
{
    if (sethostname(j->id, strlen(j->id)) < 0)
        return sandbox_err(err, -errno, "sethostname: %s", SBX_STRERROR(errno));
    /* pivot_root(".", "."): the old root is stacked under the new one and
     * detached at once (pivot_root(2)); no directory for it is needed. */
    if (chdir(j->root) < 0 || syscall(SYS_pivot_root, ".", ".") < 0 ||
        umount2(".", MNT_DETACH) < 0 || chdir("/") < 0)
        return sandbox_err(err, -errno, "pivot_root into %s: %s", j->root, SBX_STRERROR(errno));
    int r = set_rlimits(j, err);
    if (r < 0)
        return r;
    /* No exec from here on can gain privileges (set-id bits, file caps). */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return sandbox_err(err, -errno, "no_new_privs: %s", SBX_STRERROR(errno));
    if ((r = drop_caps()) < 0)
        return sandbox_err(err, r, "dropping the capability bounding set: %s", SBX_STRERROR(-r));
    /* The raw calls, not glibc's wrappers: in a child cloned from a
     * threaded caller (sandbox_spawn) glibc would set the ids of threads
     * the child does not have. This process is the only one to change. */
    gid_t g = j->gid;
    if (syscall(SYS_setgroups, 1, &g) < 0 || syscall(SYS_setresgid, g, g, g) < 0 ||
        syscall(SYS_setresuid, j->uid, j->uid, j->uid) < 0)
        return sandbox_err(err, -errno, "becoming uid %u gid %u: %s", j->uid, j->gid, SBX_STRERROR(errno));
    /* setuid away from 0 clears the permitted and effective sets, not the
     * inheritable one: clear all three. */
    if ((r = capset_zero()) < 0)
        return sandbox_err(err, r, "clearing capabilities: %s", SBX_STRERROR(-r));
    /* If the waiting parent dies, so does the jail (set after the uid
     * change, which clears it); a detached one has no waiting parent. */
    if (!j->detached && prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
        return sandbox_err(err, -errno, "PR_SET_PDEATHSIG: %s", SBX_STRERROR(errno));
    return 0;
}

/* In the new namespaces, as pid 1: everything from the cgroup to exec. */
int sandbox_jail_child(const struct sbx_jail_run *j, const sigset_t *mask, struct sbx_err *err)
{
    sigprocmask(SIG_SETMASK, mask, NULL);
    int r = child_mounts(j, err);
    if (r == 0)
        r = child_confine(j, err);
    if (r < 0)
        return r;
    /* The environment was cleared; the inner moat is told only the host
     * kind, which it cannot probe without /proc and /sys. */
    char v[32];
    snprintf(v, sizeof v, "MOAT_FORCE_PVM=%d", j->pvm);
    char *envp[] = { v, NULL };
    execve(j->exe, j->argv, envp);
    return sandbox_err(err, -errno, "exec %s: %s", j->exe, SBX_STRERROR(errno));
}

int sandbox_jail_host(struct sbx_jail_run *j, struct sbx_err *err)
{
    int r = from_host(j, false, err);
    if (r == 0)
        r = sandbox_jail_root_path(j, err);
    /* 4. The per-VM directory (there already from an earlier start). */
    if (r == 0)
        r = make_root(j, err);
    if (r < 0 || !j->ncg)
        return r;
    /* 5. The per-VM cgroup: one left by an earlier jailed moat of this
     *    jail (nothing waited to remove it) goes first, when empty. */
    char old[PATH_MAX];
    if ((size_t)snprintf(old, sizeof old, "%s/moat/%s", j->cgroot, j->id) < sizeof old)
        rmdir(old);
    return cgroup_setup(j, err);
}

pid_t sandbox_jail_clone(void)
{
    /* fork-like (no new stack): the child goes on from here, pid 1 of its
     * new pid namespace; its mount namespace it makes itself
     * (sandbox_jail_child). glibc's fork handlers do not run: the child
     * must only make async-signal-safe calls. */
    return (pid_t)syscall(SYS_clone, (unsigned long)(CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | SIGCHLD),
                          NULL, NULL, NULL, NULL);
}

int sandbox_jail_enter(const struct sbx_jail_run *j, const sigset_t *mask, struct sbx_err *err)
{
    int r = join_netns(j, err);
    return r < 0 ? r : sandbox_jail_child(j, mask, err);
}

/* The parent stays outside, waits for the jailed moat, passing on the
 * signals, and gives back its status. */
int sandbox_jail_parent(const struct sbx_jail_run *j, pid_t pid, int *status, struct sbx_err *err)
{
    /* The ready pipe is the jailed moat's alone: when it dies before
     * saying "ready", its reader sees EOF at once. */
    if (j->ready_fd >= 0)
        close(j->ready_fd);
    sigset_t fwd;
    forwarded(&fwd);
    int st = 0, killed_by = 0;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid || (w < 0 && errno != EINTR))
            break;
        siginfo_t si;
        int sig = sigwaitinfo(&fwd, &si);
        if (sig == SIGUSR1 || sig == SIGUSR2) {
            kill(pid, sig);
        } else if (sig > 0 && sig != SIGCHLD) {
            killed_by = sig;
            kill(pid, SIGKILL);
        }
    }
    /* The per-VM cgroup: empty now that the jailed moat is reaped. A
     * failure is reported (it does not change the status). */
    int r = 0;
    if (j->cgdir[0] && rmdir(j->cgdir) < 0 && errno != ENOENT)
        r = sandbox_err(err, -errno, "removing cgroup %s: %s", j->cgdir, SBX_STRERROR(errno));
    if (WIFEXITED(st))
        *status = WEXITSTATUS(st);
    else
        *status = 128 + (killed_by && WTERMSIG(st) == SIGKILL ? killed_by : WTERMSIG(st));
    return r;
}
