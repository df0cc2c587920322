/* moat jail: run one moat command confined (docs/security.md, "Jail";
 * docs/cli.md). The steps, in order, follow Firecracker's jailer; each is
 * commented where it happens. The pure parts are in jail_spec.c. */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdarg.h>
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

#include "vmm/cli/cli.h"
#include "vmm/sandbox/jail_spec.h"
#include "vmm/api/mhd_dyn.h"
#include "vmm/core/kvm.h"

#define JAIL_CG_MAX 16
#define JAIL_RL_MAX 8

static const char usage_jail[] =
    "usage: moat jail --id ID --uid U --gid G [options] -- moat ARGS...\n"
    "\n"
    "Run one moat command confined: closed fds, an empty environment, new\n"
    "mount/pid/ipc/uts namespaces, pivot_root into CHROOT_BASE/moat/ID/root\n"
    "holding only the files it needs, rlimits, cgroup v2 limits, no_new_privs,\n"
    "no capabilities, uid U and gid G. Needs root. Exits with the inner moat's\n"
    "status. See docs/security.md (\"Jail\").\n"
    "\n"
    "  --id ID               the jail's name: 1..64 of [A-Za-z0-9_-]\n"
    "  --uid U, --gid G      who the inner moat runs as (not 0)\n"
    "  --chroot-base DIR     where jails live (default /srv/jail)\n"
    "  --expose PATH         also make PATH (file or directory, e.g. a\n"
    "                        sockets' directory) visible, writable, at the same\n"
    "                        path inside (repeatable). --kernel, --initrd and\n"
    "                        blk path=/overlay= of the inner command are\n"
    "                        exposed on their own (read-only but disks)\n"
    "  --expose-ro PATH      the same, read-only\n"
    "  --netns PATH          join this network namespace (e.g. /var/run/netns/X)\n"
    "  --tun                 create /dev/net/tun in the jail\n"
    "  --cgroup KEY=VALUE    memory.max, memory.high, memory.swap.max, cpu.max,\n"
    "                        cpu.weight, pids.max (repeatable; needs cgroup v2)\n"
    "  --cgroup-root DIR     the cgroup v2 mount (default /sys/fs/cgroup)\n"
    "  --resource-limit K=N  no-file (default 2048), nproc, fsize, as (bytes)\n"
    "\n"
    "Inherited descriptors above 2 are closed, but the inner command's\n"
    "--ready-fd N, which must be a pipe (moat create --jail uses it).\n";

struct jail {
    const char *id, *base, *netns, *cgroot;
    unsigned uid, gid;
    int tun;
    struct jail_cg cg[JAIL_CG_MAX];
    int ncg;
    int rl_res[JAIL_RL_MAX];
    uint64_t rl_val[JAIL_RL_MAX];
    int nrl;
    struct jail_paths paths;    /* exposed at the same path inside */
    char exe[PATH_MAX];         /* this binary: the inner moat */
    char root[PATH_MAX];        /* BASE/moat/ID/root */
    char cgdir[PATH_MAX];       /* CGROOT/moat/ID, or "" */
    int pvm;                    /* the host kind, told to the inner moat */
};

__attribute__((format(printf, 1, 2))) static void jerr(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("moat jail: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
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
static int cgroup_setup(struct jail *j)
{
    char p[PATH_MAX * 2 + 64], ctl[PATH_MAX * 2 + 64];
    snprintf(p, sizeof p, "%s/cgroup.controllers", j->cgroot);
    if (access(p, F_OK) < 0) {
        jerr("--cgroup: no cgroup v2 at %s (no cgroup.controllers); limits cannot be applied",
             j->cgroot);
        return -1;
    }
    snprintf(j->cgdir, sizeof j->cgdir, "%s/moat/%s", j->cgroot, j->id);
    int r = cli_mkdir_p(j->cgdir, 0755);
    if (r < 0) {
        jerr("creating cgroup %s: %s", j->cgdir, strerror(-r));
        return -1;
    }
    for (int i = 0; i < j->ncg; i++) {
        char ctrl[32];
        snprintf(ctrl, sizeof ctrl, "+%.*s", (int)strcspn(j->cg[i].key, "."), j->cg[i].key);
        const char *lv[2] = { j->cgroot, NULL };
        char mid[PATH_MAX];
        snprintf(mid, sizeof mid, "%s/moat", j->cgroot);
        lv[1] = mid;
        for (int k = 0; k < 2; k++) {
            snprintf(ctl, sizeof ctl, "%s/cgroup.subtree_control", lv[k]);
            if ((r = write_file(ctl, ctrl)) < 0) {
                jerr("enabling %s in %s: %s", ctrl + 1, ctl, strerror(-r));
                return -1;
            }
        }
        snprintf(p, sizeof p, "%s/%s", j->cgdir, j->cg[i].key);
        if ((r = write_file(p, j->cg[i].val)) < 0) {
            jerr("setting %s to '%s': %s", p, j->cg[i].val, strerror(-r));
            return -1;
        }
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
static int open_source(const struct jail *j, const struct jail_path *e)
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

/* Make host PATH visible at ROOT/PATH (a bind mount; read-only unless rw;
 * never device nodes or set-id programs). Nothing under ROOT is created
 * or mounted through a symbolic link (walk_parent): one there is refused. */
static int expose(const struct jail *j, int rootfd, const struct jail_path *e)
{
    int src = open_source(j, e);
    if (src < 0) {
        jerr("%s: %s%s", e->path, strerror(-src),
             src == -ELOOP ? " (a symbolic link below a directory the jail can write)" : "");
        return -1;
    }
    struct stat st;
    if (fstat(src, &st) < 0) {
        jerr("%s: %s", e->path, strerror(errno));
        close(src);
        return -1;
    }
    bool dir = S_ISDIR(st.st_mode);
    int dst = mount_point(rootfd, e->path, dir);
    int r = dst < 0 ? dst : bind_fd(src, dst, e->rw, rootfd, e->path, dir);
    if (dst >= 0)
        close(dst);
    close(src);
    if (r == -ELOOP)
        jerr("exposing %s in the jail: %s%s is or passes a symbolic link: refused", e->path, j->root, e->path);
    else if (r < 0)
        jerr("exposing %s in the jail: %s", e->path, strerror(-r));
    return r;
}

/* A device node in the jail like the host's (same major/minor), owned by
 * the jail's uid/gid, mode 0600; made without following a symbolic link
 * (walk_parent; what is in its place is removed, the node chowned by the
 * parent's fd and its name). */
static int make_node(const struct jail *j, int rootfd, const char *host, const char *in)
{
    struct stat st;
    if (stat(host, &st) < 0 || !S_ISCHR(st.st_mode)) {
        jerr("%s: %s", host, errno ? strerror(errno) : "not a character device");
        return -1;
    }
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
    /* Owned by the jail's user through an fd of the node just made, checked
     * to be it (a character device of that number, one link): the
     * directory is the jailed process's, which may swap the name. */
    if (r == 0) {
        int nfd = openat(pfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        struct stat ns;
        if (nfd < 0)
            r = -errno;
        else if (fstat(nfd, &ns) < 0)
            r = -errno;
        else if (!S_ISCHR(ns.st_mode) || ns.st_rdev != st.st_rdev || ns.st_nlink != 1)
            r = -EEXIST;
        else if (fchownat(nfd, "", j->uid, j->gid, AT_EMPTY_PATH) < 0)
            r = -errno;
        if (nfd >= 0)
            close(nfd);
    }
    if (pfd >= 0)
        close(pfd);
    if (r < 0)
        jerr("creating %s%s: %s%s", j->root, in, strerror(-r), r == -ELOOP ? " (a symbolic link on the way)" : "");
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

/* In the new namespaces, as pid 1: everything from the cgroup to exec.
 * Returns only on failure (after printing why). */
static void child(struct jail *j, int argc, char **argv)
{
    char v[32];
    /* Join the per-VM cgroup before anything else runs in it. */
    if (j->cgdir[0]) {
        char p[PATH_MAX + 64];
        snprintf(p, sizeof p, "%s/cgroup.procs", j->cgdir);
        int r = write_file(p, "0");
        if (r < 0) {
            jerr("joining %s: %s", p, strerror(-r));
            return;
        }
    }
    /* A mount namespace of the child's own: pivot_root below moves the
     * root of every process in the namespace that shares the old root, so
     * a namespace shared with the waiting parent would put the parent in
     * the jail too (and its removal of the cgroup would miss). */
    if (unshare(CLONE_NEWNS) < 0) {
        jerr("unshare(CLONE_NEWNS): %s", strerror(errno));
        return;
    }
    /* Mounts made from here on stay in this namespace: nothing propagates
     * back to the host. */
    if (mount(NULL, "/", NULL, MS_SLAVE | MS_REC, NULL) < 0) {
        jerr("making / a slave mount: %s", strerror(errno));
        return;
    }
    /* pivot_root needs the new root to be a mount point. */
    if (mount(j->root, j->root, NULL, MS_BIND | MS_NOSUID, NULL) < 0) {
        jerr("bind-mounting %s: %s", j->root, strerror(errno));
        return;
    }
    int rootfd = open(j->root, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (rootfd < 0) {
        jerr("%s: %s", j->root, strerror(errno));
        return;
    }
    for (int i = 0; i < j->paths.n; i++)
        if (expose(j, rootfd, &j->paths.p[i]) < 0) {
            close(rootfd);
            return;
        }
    if (make_node(j, rootfd, "/dev/kvm", "/dev/kvm") < 0 ||
        (j->tun && make_node(j, rootfd, "/dev/net/tun", "/dev/net/tun") < 0) ||
        (access("/dev/userfaultfd", F_OK) == 0 && make_node(j, rootfd, "/dev/userfaultfd", "/dev/userfaultfd") < 0)) {
        close(rootfd);
        return;
    }
    close(rootfd);
    if (sethostname(j->id, strlen(j->id)) < 0) {
        jerr("sethostname: %s", strerror(errno));
        return;
    }
    /* pivot_root(".", "."): the old root is stacked under the new one and
     * detached at once (pivot_root(2)); no directory for it is needed. */
    if (chdir(j->root) < 0 || syscall(SYS_pivot_root, ".", ".") < 0 ||
        umount2(".", MNT_DETACH) < 0 || chdir("/") < 0) {
        jerr("pivot_root into %s: %s", j->root, strerror(errno));
        return;
    }
    /* rlimits: no-file defaults to 2048; the others only when asked. */
    int have_nofile = 0;
    for (int i = 0; i < j->nrl; i++)
        have_nofile |= j->rl_res[i] == RLIMIT_NOFILE;
    if (!have_nofile) {
        j->rl_res[j->nrl] = RLIMIT_NOFILE;
        j->rl_val[j->nrl++] = 2048;
    }
    for (int i = 0; i < j->nrl; i++) {
        struct rlimit rl = { j->rl_val[i], j->rl_val[i] };
        if (setrlimit(j->rl_res[i], &rl) < 0) {
            jerr("setrlimit(%d, %llu): %s", j->rl_res[i], (unsigned long long)j->rl_val[i],
                 strerror(errno));
            return;
        }
    }
    /* No exec from here on can gain privileges (set-id bits, file caps). */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
        jerr("no_new_privs: %s", strerror(errno));
        return;
    }
    int r = drop_caps();
    if (r < 0) {
        jerr("dropping the capability bounding set: %s", strerror(-r));
        return;
    }
    gid_t g = j->gid;
    if (setgroups(1, &g) < 0 || setresgid(g, g, g) < 0 || setresuid(j->uid, j->uid, j->uid) < 0) {
        jerr("becoming uid %u gid %u: %s", j->uid, j->gid, strerror(errno));
        return;
    }
    /* setuid away from 0 clears the permitted and effective sets, not the
     * inheritable one: clear all three. */
    if ((r = capset_zero()) < 0) {
        jerr("clearing capabilities: %s", strerror(-r));
        return;
    }
    /* If the waiting parent dies, so does the jail (set after the uid
     * change, which clears it). */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0) {
        jerr("PR_SET_PDEATHSIG: %s", strerror(errno));
        return;
    }
    /* The environment was cleared; the inner moat is told only the host
     * kind, which it cannot probe without /proc and /sys. */
    snprintf(v, sizeof v, "MOAT_FORCE_PVM=%d", j->pvm);
    char *envp[] = { v, NULL };
    argv[0] = "moat";
    execve(j->exe, argv, envp);
    jerr("exec %s: %s", j->exe, strerror(errno));
    (void)argc;
}

/* What jail_options returns to go on (anything else: the exit status). */
#define JAIL_GO_ON (-1)

/* The jail's options, up to "--" (its index into *end), into j. */
static int jail_options(struct jail *j, int argc, char **argv, int *end)
{
    int have_uid = 0, have_gid = 0, i;
    char why[512];
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--"))
            break;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_jail, stdout);
            return 0;
        }
        if (!strcmp(a, "--tun")) {
            j->tun = 1;
            continue;
        }
        if (!val) {
            jerr("%s needs a value (see moat jail --help)", a);
            return EXIT_USAGE;
        }
        i++;
        if (!strcmp(a, "--id"))
            j->id = val;
        else if (!strcmp(a, "--uid"))
            j->uid = (unsigned)parse_uint(val, "--uid", 0xfffffffe), have_uid = 1;
        else if (!strcmp(a, "--gid"))
            j->gid = (unsigned)parse_uint(val, "--gid", 0xfffffffe), have_gid = 1;
        else if (!strcmp(a, "--chroot-base"))
            j->base = val;
        else if (!strcmp(a, "--cgroup-root"))
            j->cgroot = val;
        else if (!strcmp(a, "--netns"))
            j->netns = val;
        else if (!strcmp(a, "--expose") || !strcmp(a, "--expose-ro")) {
            int r = jail_paths_add(&j->paths, val, a[8] == 0);
            if (r < 0) {
                jerr("%s '%s': %s", a, val, r == -E2BIG ? "too many paths" :
                     "needs an absolute path without '.', '..' or '//'");
                return EXIT_USAGE;
            }
        } else if (!strcmp(a, "--cgroup")) {
            if (j->ncg >= JAIL_CG_MAX) {
                jerr("at most %d --cgroup", JAIL_CG_MAX);
                return EXIT_USAGE;
            }
            if (jail_parse_cgroup(val, &j->cg[j->ncg++], why, sizeof why) < 0) {
                jerr("%s", why);
                return EXIT_USAGE;
            }
        } else if (!strcmp(a, "--resource-limit")) {
            if (j->nrl >= JAIL_RL_MAX - 1) {
                jerr("at most %d --resource-limit", JAIL_RL_MAX - 1);
                return EXIT_USAGE;
            }
            if (jail_parse_rlimit(val, &j->rl_res[j->nrl], &j->rl_val[j->nrl], why, sizeof why) < 0) {
                jerr("%s", why);
                return EXIT_USAGE;
            }
            j->nrl++;
        } else {
            jerr("unknown option '%s' (see moat jail --help)", a);
            return EXIT_USAGE;
        }
    }
    if (!j->id || jail_check_id(j->id) < 0) {
        jerr("--id is required: 1..%d characters of [A-Za-z0-9_-]", JAIL_ID_MAX);
        return EXIT_USAGE;
    }
    if (!have_uid || !have_gid || j->uid == 0 || j->gid == 0) {
        jerr("--uid and --gid are required and must not be 0 (root in the jail defeats it)");
        return EXIT_USAGE;
    }
    *end = i;
    return JAIL_GO_ON;
}

/* Steps 1 and 2, and what this process needs from the host before it
 * leaves it: 0, or the exit status after saying why. */
static int jail_leave_host(struct jail *j, int iargc, char **iargv, int ready_fd)
{
    /* 1. Close every inherited fd but stdin/out/err: nothing the caller
     *    had open (sockets, the host's files) reaches the jail; but the
     *    inner command's --ready-fd, a pipe (moat create's and start's:
     *    the jailed moat says there when its guest runs). */
    int cr = 0;
    if (ready_fd > 3)
        cr = (int)syscall(SYS_close_range, 3u, (unsigned)ready_fd - 1, 0u);
    if (cr == 0)
        cr = (int)syscall(SYS_close_range, ready_fd >= 3 ? (unsigned)ready_fd + 1 : 3u, ~0u, 0u);
    if (cr < 0) {
        jerr("close_range: %s", strerror(errno));
        return EXIT_VMM_ERROR;
    }
    /* 2. Clear the environment: no variable of the caller's steers the
     *    inner moat (MOAT_*, LD_*, proxies). */
    clearenv();
    /* What this process needs from the host before it leaves it: its own
     *    path and mapped libraries (the inner moat is this binary), the host
     *    kind, and every exposed path must exist. */
    ssize_t n = readlink("/proc/self/exe", j->exe, sizeof j->exe - 1);
    if (n <= 0) {
        jerr("readlink /proc/self/exe: %s", strerror(errno));
        return EXIT_VMM_ERROR;
    }
    j->exe[n] = 0;
    /* moat vmm and moat serve load libmicrohttpd when their HTTP server
     *    starts (mhd_dyn.c): loaded here first, so that it and the
     *    libraries it brings are among the files exposed below. */
    if (iargc > 1 && (!strcmp(iargv[1], "vmm") || !strcmp(iargv[1], "serve"))) {
        char mwhy[256];
        if (mhd_load(mwhy, sizeof mwhy) < 0) {
            jerr("%s", mwhy);
            return EXIT_VMM_ERROR;
        }
    }
    if (add_loaded_files(&j->paths, j->exe) < 0) {
        jerr("listing this binary's shared objects: a bad name or more than %d paths",
             JAIL_PATHS_MAX);
        return EXIT_VMM_ERROR;
    }
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
        if (jail_check_path(e->path) < 0 || access(e->path, F_OK) < 0) {
            jerr("%s: %s", e->path, errno ? strerror(errno) : "cannot be exposed");
            return EXIT_VMM_ERROR;
        }
    }
    return 0;
}

/* 3. The per-VM directory BASE/moat/ID/root, root-owned, 0755: 0, or
 *    the exit status after saying why. */
static int jail_make_root(struct jail *j, const char *base)
{
    if ((size_t)snprintf(j->root, sizeof j->root, "%s/moat/%s/root", base, j->id) >= sizeof j->root) {
        jerr("--chroot-base is too long");
        return EXIT_USAGE;
    }
    int r = cli_mkdir_p(j->root, 0755);
    if (r < 0) {
        jerr("creating %s: %s", j->root, strerror(-r));
        return EXIT_VMM_ERROR;
    }
    /* Everything below is created by following this directory: it must be
     * root's and writable by root alone (a --chroot-base another user can
     * write could hold symbolic links that move the mounts). */
    struct stat rs;
    if (lstat(j->root, &rs) < 0 || !S_ISDIR(rs.st_mode) || rs.st_uid != 0 || (rs.st_mode & 022)) {
        jerr("%s must be a directory owned by root and writable by root only", j->root);
        return EXIT_VMM_ERROR;
    }
    /* Parents before what lies below them: no mount hides an earlier one. */
    jail_paths_sort(&j->paths);
    struct statvfs sv;
    if (statvfs(j->root, &sv) == 0 && (sv.f_flag & ST_NODEV)) {
        jerr("%s is on a nodev mount: /dev/kvm would not open there; pick another --chroot-base",
             j->root);
        return EXIT_VMM_ERROR;
    }
    return 0;
}

/* The parent stays outside, waits for the jailed moat (pid), passing on
 * the signals in fwd, and returns its status. */
static int jail_wait(struct jail *j, pid_t pid, const sigset_t *fwd)
{
    int st = 0, killed_by = 0;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid || (w < 0 && errno != EINTR))
            break;
        siginfo_t si;
        int sig = sigwaitinfo(fwd, &si);
        if (sig == SIGUSR1 || sig == SIGUSR2) {
            kill(pid, sig);
        } else if (sig > 0 && sig != SIGCHLD) {
            killed_by = sig;
            kill(pid, SIGKILL);
        }
    }
    /* The per-VM cgroup: empty now that the jailed moat is reaped. A
     * failure is reported (it does not change the status). */
    if (j->cgdir[0] && rmdir(j->cgdir) < 0 && errno != ENOENT)
        jerr("removing cgroup %s: %s", j->cgdir, strerror(errno));
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    return 128 + (killed_by && WTERMSIG(st) == SIGKILL ? killed_by : WTERMSIG(st));
}

int cmd_jail(int argc, char **argv)
{
    static struct jail j;   /* large (the paths); one jail per process */
    memset(&j, 0, sizeof j);
    j.base = "/srv/jail";
    j.cgroot = "/sys/fs/cgroup";
    int i, r;
    char why[512];
    if ((r = jail_options(&j, argc, argv, &i)) != JAIL_GO_ON)
        return r;
    if (i + 1 >= argc || strcmp(argv[i + 1], "moat")) {
        jerr("expected '-- moat ARGS...' after the options (the jail runs only moat)");
        return EXIT_USAGE;
    }
    int iargc = argc - i - 1;
    char **iargv = argv + i + 1;
    if (!strcmp(iargv[iargc > 1 ? 1 : 0], "jail")) {
        jerr("a jail inside a jail is not supported");
        return EXIT_USAGE;
    }
    if (jail_inner_paths(iargc, iargv, &j.paths, why, sizeof why) < 0) {
        jerr("%s", why);
        return EXIT_USAGE;
    }
    int ready_fd = jail_inner_ready_fd(iargc, iargv, why, sizeof why);
    if (ready_fd == -EINVAL) {
        jerr("%s", why);
        return EXIT_USAGE;
    }
    if (geteuid() != 0) {
        jerr("needs root (it creates namespaces, device nodes and mounts, then drops to --uid/--gid)");
        return EXIT_VMM_ERROR;
    }
    struct stat rfs;
    if (ready_fd >= 0 && (fstat(ready_fd, &rfs) < 0 || !S_ISFIFO(rfs.st_mode))) {
        jerr("the inner command's --ready-fd %d: not an open pipe", ready_fd);
        return EXIT_VMM_ERROR;
    }
    char base[PATH_MAX];
    if (!realpath(j.base, base)) {
        jerr("--chroot-base %s: %s", j.base, strerror(errno));
        return EXIT_VMM_ERROR;
    }
    if ((r = jail_leave_host(&j, iargc, iargv, ready_fd)) != 0)
        return r;
    j.pvm = kvm_host_detect_pvm_why(why, sizeof why);
    if ((r = jail_make_root(&j, base)) != 0)
        return r;
    /* 4. cgroup v2 limits in a per-VM cgroup (only when asked). */
    if (j.ncg && cgroup_setup(&j) < 0)
        return EXIT_VMM_ERROR;
    /* 5. The network namespace, when given, is joined before the others
     *    are created. */
    if (j.netns) {
        int fd = open(j.netns, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || setns(fd, CLONE_NEWNET) < 0) {
            jerr("--netns %s: %s", j.netns, strerror(errno));
            return EXIT_VMM_ERROR;
        }
        close(fd);
    }
    /* 6. New ipc, uts and pid namespaces; the pid namespace takes effect
     *    for the child, which becomes its pid 1. The child makes its own
     *    mount namespace: the parent keeps the host's root and mounts. */
    if (unshare(CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID) < 0) {
        jerr("unshare: %s", strerror(errno));
        return EXIT_VMM_ERROR;
    }
    /* The parent forwards signals to the jailed moat: blocked here, taken
     * with sigwaitinfo below; the child unblocks them. moat is pid 1 of its
     * namespace, where a signal it has no handler for is dropped, so
     * SIGINT, SIGTERM and SIGHUP (which kill a moat outside a jail) are
     * passed on as SIGKILL, and the status is 128 + the signal received;
     * SIGUSR1 and SIGUSR2 (snapshots) are passed on as they are. */
    sigset_t fwd, old;
    sigemptyset(&fwd);
    sigaddset(&fwd, SIGINT);
    sigaddset(&fwd, SIGTERM);
    sigaddset(&fwd, SIGHUP);
    sigaddset(&fwd, SIGUSR1);
    sigaddset(&fwd, SIGUSR2);
    sigaddset(&fwd, SIGCHLD);
    sigprocmask(SIG_BLOCK, &fwd, &old);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        jerr("fork: %s", strerror(errno));
        return EXIT_VMM_ERROR;
    }
    if (pid == 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        child(&j, iargc, iargv);
        _exit(EXIT_VMM_ERROR);
    }
    /* The parent stays outside, waits, and passes the status on. The
     *    ready pipe is the jailed moat's alone: when it dies before saying
     *    "ready", its reader sees EOF at once. */
    if (ready_fd >= 0)
        close(ready_fd);
    return jail_wait(&j, pid, &fwd);
}
