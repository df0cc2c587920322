/* moat-agent: the guest agent (docs/agent-protocol.md).
 *
 * Listens on AF_VSOCK port N (argv "--port N", else moat.agent=N on
 * /proc/cmdline, else 1024), or, for tests on the host, on the Unix socket
 * given by "--unix PATH". Serves many connections and many concurrent
 * processes from one poll() loop: exec (argv, env, cwd, stdin pipe or a
 * pty, timeout -> SIGKILL of the process group), pty resize, streamed stdout/stderr, exit
 * status, kill; file write/read, mkdir; stat, list (streamed), rename,
 * remove; ping. A malformed frame gets an
 * ERROR frame and the connection goes on; a frame with a bad magic or an
 * oversized length gets an ERROR frame and the connection is closed (the
 * stream cannot be resynchronised). Nothing a client sends can make it
 * exit.
 *
 * Built static (gcc -static) with vmm/agent/agent_proto.c; installed in the
 * default initramfs as /sbin/moat-agent and started by /init. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/random.h>
#include <linux/vm_sockets.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "vmm/agent/agent_proto.h"

#define MAX_CONNS   64
#define MAX_PROCS   512
#define MAX_FREADS  64
#define MAX_LISTS   64
#define LIST_STEP   256          /* entries per listing per loop round */
#define RM_MAX_DEPTH 2048        /* directory levels a recursive remove descends */
#define IDFILE_MAX  (1u << 20)   /* bytes of /etc/passwd, /etc/group read */
#define OUT_HIGH    (4u << 20)   /* stop producing for a connection above this */
#define STDIN_CAP   (8u << 20)   /* pending stdin bytes per process */
#define STDIN_HIGH  (1u << 20)   /* stop reading the connection above this */
#define MAX_WATCHES 64           /* WATCH requests at once */
#define WATCH_MAX_DEPTH 128      /* directory levels a recursive WATCH follows */

struct conn {
    int fd;
    int closing;                 /* close once out is flushed */
    struct agent_rx rx;
    struct agent_buf out;
    int pi;                      /* pollfd index or -1 */
    int stdin_full;              /* a process has STDIN_HIGH bytes pending */
};

struct proc {
    struct conn *c;              /* NULL once the connection is gone */
    uint32_t id;
    pid_t pid;
    int out_fd, err_fd, in_fd;   /* a pty's: dups of pty_fd, err_fd -1 */
    int pty_fd;                  /* the pty master (RESIZE), or -1 */
    int pi_out, pi_err, pi_in;
    struct agent_buf in;
    int in_eof;
    int64_t deadline;            /* ms, 0 = none */
    int exited, status, timed_out, killed;
};

struct fread {
    struct conn *c;
    uint32_t id;
    int fd;
    uint32_t mode;
    uint64_t size;
};

/* User and group names for ids, from the guest's /etc/passwd and
 * /etc/group (the agent is static: no NSS), with the last answer cached. */
struct idnames {
    char *pw, *gr;
    size_t pwn, grn;
    uint32_t uid, gid;
    int have_uid, have_gid;
    char uname[AGENT_MAX_NAME + 1], gname[AGENT_MAX_NAME + 1];
};

/* A LIST in progress: one open directory per level below the root. */
struct lister {
    struct conn *c;
    uint32_t id, depth, count;
    int top;                                  /* open levels */
    DIR *d[AGENT_LIST_MAX_DEPTH];
    size_t plen[AGENT_LIST_MAX_DEPTH];        /* path length of each level's directory */
    char path[AGENT_MAX_PATH + 1];
    struct idnames ids;
    struct agent_stat e;
};

static struct conn *conns[MAX_CONNS];
static struct proc *procs[MAX_PROCS];
static struct fread *freads[MAX_FREADS];
static struct lister *lists[MAX_LISTS];
static uint8_t iobuf[AGENT_CHUNK];

static void logmsg(const char *fmt, const char *a, int err)
{
    fprintf(stderr, "moat-agent: ");
    fprintf(stderr, fmt, a);
    if (err)
        fprintf(stderr, ": %s", strerror(err));
    fputc('\n', stderr);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* Queue a frame; an allocation failure closes the connection. */
static void send_frame(struct conn *c, uint32_t type, uint32_t id, const void *p, size_t n)
{
    if (agent_put_frame(&c->out, type, id, p, n) < 0)
        c->closing = 1;
}

static void send_error(struct conn *c, uint32_t id, enum agent_err code, int sys_errno,
                       const char *what)
{
    char msg[AGENT_MAX_MSG];
    int k;
    if (code == AGENT_E_SYS)
        k = snprintf(msg, sizeof msg, "%.900s: %s", what, strerror(sys_errno));
    else
        k = snprintf(msg, sizeof msg, "%.900s: %s", what, agent_strerror(code));
    (void)k;
    if (agent_put_error(&c->out, id, code, code == AGENT_E_SYS ? (uint32_t)sys_errno : 0, msg) < 0)
        c->closing = 1;
}

/* ---- processes -------------------------------------------------------- */

static struct proc *find_proc(struct conn *c, uint32_t id)
{
    for (int i = 0; i < MAX_PROCS; i++)
        if (procs[i] && procs[i]->c == c && procs[i]->id == id)
            return procs[i];
    return NULL;
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

static void proc_signal(struct proc *p, int sig)
{
    if (p->exited)
        return;
    if (kill(-p->pid, sig) < 0)
        kill(p->pid, sig);
}

/* pty: the master (CLOEXEC); the child opens the slave as its
 * controlling terminal in a session of its own. */
static void child_exec(struct agent_exec *e, int pty, int in, int out, int err)
{
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    if (pty >= 0) {
        int sl;
        if (setsid() < 0 || (sl = ioctl(pty, TIOCGPTPEER, O_RDWR)) < 0 ||
            ioctl(sl, TIOCSCTTY, 0) < 0)
            _exit(125);
        in = out = err = sl;
        setenv("TERM", "xterm", 1);     /* unless the request's env says otherwise */
    } else {
        setpgid(0, 0);
    }
    if (in < 0)
        in = open("/dev/null", O_RDONLY);
    if (in < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
        _exit(125);
    if (pty >= 0 && in > 2)
        close(in);
    for (uint32_t i = 0; i < e->envc; i++)
        putenv(e->env[i]);
    if (e->cwd[0] && chdir(e->cwd) < 0) {
        dprintf(2, "moat-agent: cd %s: %s\n", e->cwd, strerror(errno));
        _exit(126);
    }
    execvp(e->argv[0], e->argv);
    int en = errno;
    dprintf(2, "moat-agent: %s: %s\n", e->argv[0],
            en == ENOENT ? "command not found" : strerror(en));
    _exit(en == ENOENT ? 127 : 126);
}

static void do_exec(struct conn *c, uint32_t id, const uint8_t *pl, size_t n)
{
    struct agent_exec e;
    enum agent_err err;
    int slot = -1, pin[2] = { -1, -1 }, pout[2] = { -1, -1 }, perr[2] = { -1, -1 };

    if (find_proc(c, id)) {
        send_error(c, id, AGENT_E_ID, 0, "exec");
        return;
    }
    for (int i = 0; i < MAX_PROCS && slot < 0; i++)
        if (!procs[i])
            slot = i;
    if (slot < 0) {
        send_error(c, id, AGENT_E_LIMIT, 0, "exec");
        return;
    }
    int r = agent_exec_decode(pl, n, &e, &err);
    if (r < 0) {
        if (r == -ENOMEM)
            send_error(c, id, AGENT_E_SYS, ENOMEM, "exec");
        else
            send_error(c, id, err, 0, "exec");
        return;
    }
    struct proc *p = calloc(1, sizeof *p);
    int pty = -1;
    if (!p)
        goto fail;
    if (e.flags & AGENT_EXEC_PTY) {
        /* The master is read (output) and written (input) through dups
         * of it, so either can be closed on its own; pty itself stays for
         * RESIZE until the process is gone. */
        struct winsize ws = { .ws_row = e.rows, .ws_col = e.cols };
        if ((pty = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0 || unlockpt(pty) < 0 ||
            ioctl(pty, TIOCSWINSZ, &ws) < 0 ||
            (pout[0] = fcntl(pty, F_DUPFD_CLOEXEC, 3)) < 0 ||
            (pin[1] = fcntl(pty, F_DUPFD_CLOEXEC, 3)) < 0)
            goto fail;
    } else if (pipe2(pout, O_CLOEXEC) < 0 || pipe2(perr, O_CLOEXEC) < 0 ||
               ((e.flags & AGENT_EXEC_STDIN) && pipe2(pin, O_CLOEXEC) < 0)) {
        goto fail;
    }
    pid_t pid = fork();
    if (pid < 0)
        goto fail;
    if (pid == 0)
        child_exec(&e, pty, pin[0], pout[1], perr[1]);
    /* Also in the child: whichever runs first. A pty child makes a
     * session of its own (setsid fails for a group leader: not here). */
    if (pty < 0)
        setpgid(pid, pid);
    close_fd(&pout[1]);
    close_fd(&perr[1]);
    close_fd(&pin[0]);
    p->c = c;
    p->id = id;
    p->pid = pid;
    p->out_fd = pout[0];
    p->err_fd = perr[0];
    p->in_fd = pin[1];
    p->pty_fd = pty;
    set_nonblock(p->out_fd);
    set_nonblock(p->err_fd);
    if (p->in_fd >= 0)
        set_nonblock(p->in_fd);
    p->deadline = e.timeout_ms ? now_ms() + e.timeout_ms : 0;
    procs[slot] = p;
    agent_exec_free(&e);
    return;
fail:
    {
        int en = errno;
        for (int i = 0; i < 2; i++) {
            close_fd(&pin[i]);
            close_fd(&pout[i]);
            close_fd(&perr[i]);
        }
        close_fd(&pty);
        free(p);
        agent_exec_free(&e);
        send_error(c, id, AGENT_E_SYS, en, "exec");
    }
}

static void proc_free(int i)
{
    struct proc *p = procs[i];
    close_fd(&p->out_fd);
    close_fd(&p->err_fd);
    close_fd(&p->in_fd);
    close_fd(&p->pty_fd);
    agent_buf_free(&p->in);
    free(p);
    procs[i] = NULL;
}

/* Send EXIT once the process is reaped and both pipes hit EOF. */
static void proc_maybe_done(int i)
{
    struct proc *p = procs[i];
    if (!p->exited || p->out_fd >= 0 || p->err_fd >= 0)
        return;
    if (p->c) {
        struct agent_exit x = { 0 };
        if (WIFSIGNALED(p->status)) {
            x.kind = AGENT_EXIT_SIGNAL;
            x.value = (uint32_t)WTERMSIG(p->status);
        } else {
            x.kind = AGENT_EXIT_CODE;
            x.value = (uint32_t)WEXITSTATUS(p->status);
        }
        x.flags = p->timed_out ? AGENT_EXIT_TIMEDOUT : 0;
        if (agent_put_exit(&p->c->out, p->id, &x) < 0)
            p->c->closing = 1;
    }
    proc_free(i);
}

static void reap(void)
{
    int st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
        for (int i = 0; i < MAX_PROCS; i++) {
            if (procs[i] && procs[i]->pid == pid && !procs[i]->exited) {
                procs[i]->exited = 1;
                procs[i]->status = st;
                break;
            }
        }
    }
}

/* Read one chunk of a process' stdout or stderr. */
static void pipe_read(struct proc *p, int *fd, uint32_t type)
{
    ssize_t n = read(*fd, iobuf, sizeof iobuf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        close_fd(fd);
        return;
    }
    if (p->c)
        send_frame(p->c, type, p->id, iobuf, (size_t)n);
}

static void stdin_flush(struct proc *p)
{
    while (p->in_fd >= 0 && p->in.len) {
        ssize_t n = write(p->in_fd, p->in.p, p->in.len);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                return;
            close_fd(&p->in_fd);    /* EPIPE: the process closed its stdin */
            p->in.len = 0;
            return;
        }
        agent_buf_consume(&p->in, (size_t)n);
    }
    if (p->in_eof && p->in.len == 0)
        close_fd(&p->in_fd);
}

/* ---- files ------------------------------------------------------------ */

static int mkdir_p(char *path, mode_t mode)
{
    for (char *s = path + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = 0;
        int r = mkdir(path, mode);
        *s = '/';
        if (r < 0 && errno != EEXIST)
            return -errno;
    }
    if (mkdir(path, mode) < 0) {
        struct stat st;
        if (errno == EEXIST && stat(path, &st) == 0 && S_ISDIR(st.st_mode))
            return 0;
        return -errno;
    }
    return 0;
}

static void do_mkdir(struct conn *c, uint32_t id, const uint8_t *pl, size_t n)
{
    static char path[AGENT_MAX_PATH + 1];
    struct agent_mkdir m;
    enum agent_err err;
    if (agent_mkdir_decode(pl, n, &m, &err) < 0) {
        send_error(c, id, err, 0, "mkdir");
        return;
    }
    agent_path_check(m.path, m.path_len, path, NULL);
    int r = 0;
    if (m.flags & AGENT_MKDIR_PARENTS)
        r = mkdir_p(path, m.mode);
    else if (mkdir(path, m.mode) < 0)
        r = -errno;
    if (r < 0)
        send_error(c, id, AGENT_E_SYS, -r, path);
    else
        send_frame(c, AGENT_T_OK, id, NULL, 0);
}

static void do_fwrite(struct conn *c, uint32_t id, const uint8_t *pl, size_t n)
{
    static char path[AGENT_MAX_PATH + 1];
    struct agent_fwrite w;
    enum agent_err err;
    if (agent_fwrite_decode(pl, n, &w, &err) < 0) {
        send_error(c, id, err, 0, "file write");
        return;
    }
    agent_path_check(w.path, w.path_len, path, NULL);
    int append = w.flags & AGENT_FW_APPEND;
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOCTTY | (append ? O_APPEND : O_TRUNC),
                  w.mode);
    if (fd < 0) {
        send_error(c, id, AGENT_E_SYS, errno, path);
        return;
    }
    if (!append && fchmod(fd, w.mode) < 0) {
        send_error(c, id, AGENT_E_SYS, errno, path);
        close(fd);
        return;
    }
    const uint8_t *d = w.data;
    size_t left = w.data_len;
    while (left) {
        ssize_t k = write(fd, d, left);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            send_error(c, id, AGENT_E_SYS, k < 0 ? errno : EIO, path);
            close(fd);
            return;
        }
        d += k;
        left -= (size_t)k;
    }
    if (close(fd) < 0) {
        send_error(c, id, AGENT_E_SYS, errno, path);
        return;
    }
    send_frame(c, AGENT_T_OK, id, NULL, 0);
}

static void do_fread(struct conn *c, uint32_t id, const uint8_t *pl, size_t n)
{
    static char path[AGENT_MAX_PATH + 1];
    enum agent_err err;
    int slot = -1;
    if (agent_path_check((const char *)pl, n, path, &err) < 0) {
        send_error(c, id, err, 0, "file read");
        return;
    }
    for (int i = 0; i < MAX_FREADS && slot < 0; i++)
        if (!freads[i])
            slot = i;
    if (slot < 0) {
        send_error(c, id, AGENT_E_LIMIT, 0, "file read");
        return;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        send_error(c, id, AGENT_E_SYS, errno, path);
        if (fd >= 0)
            close(fd);
        return;
    }
    if (!S_ISREG(st.st_mode)) {
        send_error(c, id, AGENT_E_SYS, S_ISDIR(st.st_mode) ? EISDIR : EINVAL, path);
        close(fd);
        return;
    }
    struct fread *f = calloc(1, sizeof *f);
    if (!f) {
        close(fd);
        send_error(c, id, AGENT_E_SYS, ENOMEM, path);
        return;
    }
    f->c = c;
    f->id = id;
    f->fd = fd;
    f->mode = st.st_mode & 07777;
    freads[slot] = f;
}

static void fread_free(int i)
{
    close(freads[i]->fd);
    free(freads[i]);
    freads[i] = NULL;
}

/* One chunk of every pending file read whose connection has room. */
static int freads_step(void)
{
    int pending = 0;
    for (int i = 0; i < MAX_FREADS; i++) {
        struct fread *f = freads[i];
        if (!f || f->c->out.len >= OUT_HIGH)
            continue;
        ssize_t n = read(f->fd, iobuf, sizeof iobuf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            send_error(f->c, f->id, AGENT_E_SYS, errno, "read");
            fread_free(i);
        } else if (n == 0) {
            if (agent_put_file_end(&f->c->out, f->id, f->mode, f->size) < 0)
                f->c->closing = 1;
            fread_free(i);
        } else {
            f->size += (uint64_t)n;
            send_frame(f->c, AGENT_T_FILE_DATA, f->id, iobuf, (size_t)n);
            pending = 1;
        }
    }
    return pending;
}

/* ---- stat, list, rename, remove --------------------------------------- */

static char *slurp(const char *path, size_t *len)
{
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    struct stat st;
    if (fd < 0)
        return NULL;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
        close(fd);
        return NULL;
    }
    /* Its size (at most IDFILE_MAX): a small guest lists with little memory. */
    size_t cap = (uint64_t)st.st_size < IDFILE_MAX ? (size_t)st.st_size : IDFILE_MAX;
    char *buf = malloc(cap);
    size_t n = 0;
    while (buf && n < cap) {
        ssize_t k = read(fd, buf + n, cap - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        n += (size_t)k;
    }
    close(fd);
    *len = n;
    return buf;
}

static void ids_load(struct idnames *x)
{
    memset(x, 0, sizeof *x);
    x->pw = slurp("/etc/passwd", &x->pwn);
    x->gr = slurp("/etc/group", &x->grn);
}

static void ids_free(struct idnames *x)
{
    free(x->pw);
    free(x->gr);
    x->pw = x->gr = NULL;
}

static void ids_names(struct idnames *x, struct agent_stat *e)
{
    if (!x->have_uid || x->uid != e->uid) {
        if (!x->pw || agent_idname_lookup(x->pw, x->pwn, e->uid, x->uname) < 0)
            x->uname[0] = 0;
        x->uid = e->uid;
        x->have_uid = 1;
    }
    if (!x->have_gid || x->gid != e->gid) {
        if (!x->gr || agent_idname_lookup(x->gr, x->grn, e->gid, x->gname) < 0)
            x->gname[0] = 0;
        x->gid = e->gid;
        x->have_gid = 1;
    }
    memcpy(e->owner, x->uname, sizeof e->owner);
    memcpy(e->group, x->gname, sizeof e->group);
}

/* Fill e (but its path) from st; a symlink's target is read at
 * (dirfd, name). 0 or -errno. */
static int fill_entry(struct agent_stat *e, const struct stat *st, int dirfd, const char *name,
                      struct idnames *ids)
{
    e->type = S_ISREG(st->st_mode) ? AGENT_FT_FILE : S_ISDIR(st->st_mode) ? AGENT_FT_DIR :
              S_ISLNK(st->st_mode) ? AGENT_FT_SYMLINK : AGENT_FT_OTHER;
    e->mode = st->st_mode & 07777;
    e->uid = st->st_uid;
    e->gid = st->st_gid;
    e->size = st->st_size > 0 ? (uint64_t)st->st_size : 0;
    e->mtime_sec = st->st_mtim.tv_sec;
    e->mtime_nsec = (uint32_t)st->st_mtim.tv_nsec;
    e->link[0] = 0;
    if (e->type == AGENT_FT_SYMLINK) {
        ssize_t k = readlinkat(dirfd, name, e->link, AGENT_MAX_PATH);
        if (k < 0)
            return -errno;
        if (k == 0 || k >= (ssize_t)AGENT_MAX_PATH || memchr(e->link, 0, (size_t)k))
            return -ENAMETOOLONG;
        e->link[k] = 0;
    }
    ids_names(ids, e);
    return 0;
}

static void do_stat(struct conn *c, uint32_t id, const uint8_t *pl, size_t n)
{
    static struct agent_stat e;
    struct agent_path_req q;
    enum agent_err err;
    if (agent_stat_req_decode(pl, n, &q, &err) < 0) {
        send_error(c, id, err, 0, "stat");
        return;
    }
    agent_path_check(q.path, q.path_len, e.path, NULL);
    struct stat st;
    int r = (q.arg & AGENT_STAT_NOFOLLOW) ? lstat(e.path, &st) : stat(e.path, &st);
    if (r < 0) {
        send_error(c, id, AGENT_E_SYS, errno, e.path);
        return;
    }
    struct idnames ids;
    ids_load(&ids);
    r = fill_entry(&e, &st, AT_FDCWD, e.path, &ids);
    ids_free(&ids);
    if (r < 0) {
        send_error(c, id, AGENT_E_SYS, -r, e.path);
        return;
    }
    if (agent_put_entry(&c->out, AGENT_T_STAT_INFO, id, &e) < 0)
        c->closing = 1;
}

static void list_free(int i)
{
    struct lister *l = lists[i];
    while (l->top > 0)
        closedir(l->d[--l->top]);
    ids_free(&l->ids);
    free(l);
    lists[i] = NULL;
}

static void do_list(struct conn *c, uint32_t id, const uint8_t *pl, size_t n)
{
    struct agent_path_req q;
    enum agent_err err;
    int slot = -1;
    if (agent_list_req_decode(pl, n, &q, &err) < 0) {
        send_error(c, id, err, 0, "list");
        return;
    }
    for (int i = 0; i < MAX_LISTS && slot < 0; i++)
        if (!lists[i])
            slot = i;
    if (slot < 0) {
        send_error(c, id, AGENT_E_LIMIT, 0, "list");
        return;
    }
    struct lister *l = calloc(1, sizeof *l);
    if (!l) {
        send_error(c, id, AGENT_E_SYS, ENOMEM, "list");
        return;
    }
    agent_path_check(q.path, q.path_len, l->path, NULL);
    /* The directory itself may be reached through a symlink; nothing below it is. */
    int fd = open(l->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        send_error(c, id, AGENT_E_SYS, errno, l->path);
        if (fd >= 0)
            close(fd);
        free(l);
        return;
    }
    l->c = c;
    l->id = id;
    l->depth = q.arg;
    l->d[0] = d;
    l->plen[0] = q.path_len;
    l->top = 1;
    ids_load(&l->ids);
    lists[slot] = l;
}

/* The next entry of listing l into l->e (1), the end of the walk (0), or
 * -errno (*what says of which path). */
static int list_next(struct lister *l, const char **what)
{
    for (;;) {
        if (l->top == 0)
            return 0;
        DIR *d = l->d[l->top - 1];
        size_t base = l->plen[l->top - 1];
        *what = l->path;
        l->path[base] = 0;
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            if (errno)
                return -errno;
            closedir(d);
            l->top--;
            continue;
        }
        const char *name = de->d_name;
        if (!strcmp(name, ".") || !strcmp(name, ".."))
            continue;
        size_t nl = strlen(name), slash = l->path[base - 1] != '/';
        if (base + slash + nl > AGENT_MAX_PATH)
            return -ENAMETOOLONG;
        if (slash)
            l->path[base] = '/';
        memcpy(l->path + base + slash, name, nl + 1);
        struct stat st;
        if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            if (errno == ENOENT)
                continue;                    /* removed meanwhile */
            return -errno;
        }
        int r = fill_entry(&l->e, &st, dirfd(d), name, &l->ids);
        if (r == -ENOENT || r == -EINVAL)
            continue;                        /* replaced meanwhile */
        if (r < 0)
            return r;
        memcpy(l->e.path, l->path, base + slash + nl + 1);
        if (S_ISDIR(st.st_mode) && (uint32_t)l->top < l->depth) {
            /* Never through a symlink, even one swapped in since fstatat. */
            int fd = openat(dirfd(d), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC |
                            O_NOCTTY | O_NONBLOCK);
            DIR *sd = fd >= 0 ? fdopendir(fd) : NULL;
            if (!sd) {
                r = -errno;
                if (fd >= 0)
                    close(fd);
                if (r == -ENOENT || r == -ENOTDIR || r == -ELOOP)
                    continue;
                return r;
            }
            l->d[l->top] = sd;
            l->plen[l->top] = base + slash + nl;
            l->top++;
        }
        return 1;
    }
}

/* Up to LIST_STEP entries of every listing whose connection has room; 1 if
 * some listing has more to send. */
static int lists_step(void)
{
    int pending = 0;
    for (int i = 0; i < MAX_LISTS; i++) {
        struct lister *l = lists[i];
        int k;
        for (k = 0; l && k < LIST_STEP && l->c->out.len < OUT_HIGH; k++) {
            const char *what = "list";
            int r = list_next(l, &what);
            if (r == 1 && l->count >= AGENT_LIST_MAX_ENTRIES) {
                send_error(l->c, l->id, AGENT_E_LIMIT, 0, "list: more than 100000 entries");
                r = -1;
            } else if (r == 1) {
                if (agent_put_entry(&l->c->out, AGENT_T_LIST_ENTRY, l->id, &l->e) < 0)
                    l->c->closing = 1;
                l->count++;
                continue;
            } else if (r == 0) {
                if (agent_put_u32(&l->c->out, AGENT_T_LIST_END, l->id, l->count) < 0)
                    l->c->closing = 1;
            } else {
                send_error(l->c, l->id, AGENT_E_SYS, -r, what);
            }
            list_free(i);
            l = NULL;
        }
        if (l)
            pending = 1;
    }
    return pending;
}

static void do_rename(struct conn *c, uint32_t id, const uint8_t *pl, size_t n)
{
    static char src[AGENT_MAX_PATH + 1], dst[AGENT_MAX_PATH + 1];
    struct agent_rename q;
    enum agent_err err;
    if (agent_rename_decode(pl, n, &q, &err) < 0) {
        send_error(c, id, err, 0, "rename");
        return;
    }
    agent_path_check(q.src, q.src_len, src, NULL);
    agent_path_check(q.dst, q.dst_len, dst, NULL);
    if (rename(src, dst) < 0) {
        char what[AGENT_MAX_MSG];
        snprintf(what, sizeof what, "rename %.440s -> %.440s", src, dst);
        send_error(c, id, AGENT_E_SYS, errno, what);
        return;
    }
    send_frame(c, AGENT_T_OK, id, NULL, 0);
}

/* rm -rf of the directory (dirfd, name), never following a symlink. */
static int rm_tree(int dirfd, const char *name, int level)
{
    if (level >= RM_MAX_DEPTH)
        return -ENAMETOOLONG;
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY |
                    O_NONBLOCK);
    if (fd < 0)
        return errno == ENOENT ? 0 : -errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        int r = -errno;
        close(fd);
        return r;
    }
    int r = 0;
    /* Entries removed during a scan may hide others from it: rescan
     * while the directory is not empty yet (bounded). */
    for (int pass = 0; pass < 4; pass++) {
        struct dirent *de;
        errno = 0;
        while (r == 0 && (de = readdir(d))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                continue;
            struct stat st;
            if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                if (errno != ENOENT)
                    r = -errno;
            } else if (S_ISDIR(st.st_mode)) {
                r = rm_tree(fd, de->d_name, level + 1);
            } else if (unlinkat(fd, de->d_name, 0) < 0 && errno != ENOENT) {
                r = -errno;
            }
            errno = 0;
        }
        if (r == 0 && errno)
            r = -errno;
        if (r < 0)
            break;
        if (unlinkat(dirfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
            break;
        r = -errno;
        if (r != -ENOTEMPTY && r != -EEXIST)
            break;
        r = 0;
        rewinddir(d);
        if (pass == 3)
            r = -ENOTEMPTY;
    }
    closedir(d);
    return r;
}

static void do_remove(struct conn *c, uint32_t id, const uint8_t *pl, size_t n)
{
    static char path[AGENT_MAX_PATH + 1];
    struct agent_path_req q;
    enum agent_err err;
    if (agent_remove_req_decode(pl, n, &q, &err) < 0) {
        send_error(c, id, err, 0, "remove");
        return;
    }
    agent_path_check(q.path, q.path_len, path, NULL);
    struct stat st, root;
    int r = 0;
    if (lstat(path, &st) < 0)
        r = -errno;
    else if (stat("/", &root) == 0 && st.st_dev == root.st_dev && st.st_ino == root.st_ino)
        r = -EBUSY;                          /* like rm's --preserve-root */
    else if (!S_ISDIR(st.st_mode))
        r = unlink(path) < 0 ? -errno : 0;
    else if (q.arg & AGENT_RM_RECURSIVE)
        r = rm_tree(AT_FDCWD, path, 0);
    else
        r = rmdir(path) < 0 ? -errno : 0;
    if (r < 0)
        send_error(c, id, AGENT_E_SYS, -r, path);
    else
        send_frame(c, AGENT_T_OK, id, NULL, 0);
}

/* ---- connections ------------------------------------------------------ */

/* ---- post-restore fix-ups (docs/vsock.md) ----------------------------- */

static void do_set_time(struct conn *c, uint32_t id, const uint8_t *pl, size_t n)
{
    struct agent_time t;
    enum agent_err err;
    if (agent_time_decode(pl, n, &t, &err) < 0) {
        send_error(c, id, err, 0, "set time");
        return;
    }
    struct timespec ts = { .tv_sec = (time_t)t.sec, .tv_nsec = (long)t.nsec };
    if (clock_settime(CLOCK_REALTIME, &ts) < 0) {
        send_error(c, id, AGENT_E_SYS, errno, "clock_settime");
        return;
    }
    send_frame(c, AGENT_T_OK, id, NULL, 0);
}

/* Credit the host's bytes to the input pool, then force the CRNG to
 * reseed from it, so that clones of one snapshot diverge. */
static void do_add_entropy(struct conn *c, uint32_t id, const uint8_t *pl, size_t n)
{
    enum agent_err err;
    if (agent_entropy_check(pl, n, &err) < 0) {
        send_error(c, id, err, 0, "add entropy");
        return;
    }
    struct {
        struct rand_pool_info info;
        uint8_t buf[AGENT_MAX_ENTROPY];
    } rp;
    memset(&rp, 0, sizeof rp);
    rp.info.entropy_count = (int)n * 8;
    rp.info.buf_size = (int)n;
    memcpy(rp.buf, pl, n);
    int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        send_error(c, id, AGENT_E_SYS, errno, "/dev/urandom");
        return;
    }
    int e = 0;
    if (ioctl(fd, RNDADDENTROPY, &rp.info) < 0)
        e = errno;
#ifdef RNDRESEEDCRNG
    else if (ioctl(fd, RNDRESEEDCRNG) < 0)
        e = errno;
#endif
    close(fd);
    explicit_bzero(&rp, sizeof rp);
    if (e) {
        send_error(c, id, AGENT_E_SYS, e, "RNDADDENTROPY/RNDRESEEDCRNG");
        return;
    }
    send_frame(c, AGENT_T_OK, id, NULL, 0);
}

/* ---- WATCH: inotify over a directory (and its subdirectories) ---------- */

/* One WATCH: an inotify instance and the directories it follows, each by
 * its watch descriptor and its path relative to the watched root ("" for
 * the root). Events are read only while the connection's output is under
 * OUT_HIGH; the kernel queues the rest (up to its max_queued_events), and
 * a queue overflow ends the watch with ERROR LIMIT. */
struct wdir {
    int wd;
    char *rel;
};

struct watcher {
    struct conn *c;
    uint32_t id;
    int ifd, recursive, pi;
    size_t n, cap;
    struct wdir *d;
    char root[AGENT_MAX_PATH + 1];
};

static struct watcher *watchers[MAX_WATCHES];

#define WATCH_MASK (IN_CREATE | IN_MOVED_TO | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_ATTRIB | \
                    IN_MOVE_SELF | IN_DONT_FOLLOW | IN_ONLYDIR)

static void watch_free(int i)
{
    struct watcher *w = watchers[i];
    for (size_t k = 0; k < w->n; k++)
        free(w->d[k].rel);
    free(w->d);
    close(w->ifd);
    free(w);
    watchers[i] = NULL;
}

static struct wdir *watch_find(struct watcher *w, int wd)
{
    for (size_t k = 0; k < w->n; k++)
        if (w->d[k].wd == wd)
            return &w->d[k];
    return NULL;
}

/* root/rel into path (AGENT_MAX_PATH + 1): 0 or -ENAMETOOLONG. */
static int watch_path(const struct watcher *w, const char *rel, char *path)
{
    int k = snprintf(path, AGENT_MAX_PATH + 1, "%s%s%s", w->root, *rel ? "/" : "", rel);
    return k < 0 || k > (int)AGENT_MAX_PATH ? -ENAMETOOLONG : 0;
}

/* Follow the directory rel (below root): 0, -ENOSPC past
 * AGENT_WATCH_MAX_DIRS, or inotify_add_watch's -errno. */
static int watch_add_one(struct watcher *w, const char *rel)
{
    char path[AGENT_MAX_PATH + 1];
    if (watch_path(w, rel, path) < 0)
        return -ENAMETOOLONG;
    int wd = inotify_add_watch(w->ifd, path, WATCH_MASK);
    if (wd < 0)
        return -errno;
    struct wdir *old = watch_find(w, wd);
    if (old) {                   /* the same directory again (moved) */
        char *r = strdup(rel);
        if (!r)
            return -ENOMEM;
        free(old->rel);
        old->rel = r;
        return 0;
    }
    if (w->n >= AGENT_WATCH_MAX_DIRS) {
        inotify_rm_watch(w->ifd, wd);
        return -ENOSPC;
    }
    if (w->n == w->cap) {
        size_t nc = w->cap ? 2 * w->cap : 16;
        struct wdir *nd = realloc(w->d, nc * sizeof *nd);
        if (!nd)
            return -ENOMEM;
        w->d = nd;
        w->cap = nc;
    }
    if (!(w->d[w->n].rel = strdup(rel)))
        return -ENOMEM;
    w->d[w->n++].wd = wd;
    return 0;
}

/* Follow rel and, for a recursive watch, every directory below it
 * (symlinks are not followed); depth bounded by AGENT_MAX_PATH. Vanished
 * subdirectories are skipped. */
static int watch_add_tree(struct watcher *w, const char *rel, int level)
{
    int r = watch_add_one(w, rel);
    if (r < 0 || !w->recursive)
        return r;
    if (level >= WATCH_MAX_DEPTH)
        return -ELOOP;           /* bounds the stack and the open directories */
    char path[AGENT_MAX_PATH + 1];
    if (watch_path(w, rel, path) < 0)
        return -ENAMETOOLONG;
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    struct dirent *de;
    while (r == 0 && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode))
            continue;
        char sub[AGENT_MAX_PATH + 1];
        if ((size_t)snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", de->d_name) >= sizeof sub) {
            r = -ENAMETOOLONG;
            break;
        }
        r = watch_add_tree(w, sub, level + 1);
        if (r == -ENOENT || r == -ENOTDIR)
            r = 0;
    }
    closedir(d);
    return r;
}

/* A watch past its limits (-ENOSPC directories, -ELOOP depth). */
static void watch_limit(struct conn *c, uint32_t id, int r)
{
    send_error(c, id, AGENT_E_LIMIT, 0,
               r == -ELOOP ? "watch: directories nested over 128 levels" : "watch: over 8192 directories");
}

static void do_watch(struct conn *c, uint32_t id, const uint8_t *pl, size_t n)
{
    struct agent_path_req rq;
    enum agent_err err;
    if (agent_watch_req_decode(pl, n, &rq, &err) < 0) {
        send_error(c, id, err, 0, "watch");
        return;
    }
    int slot = -1;
    for (int i = 0; i < MAX_WATCHES && slot < 0; i++)
        if (!watchers[i])
            slot = i;
    if (slot < 0) {
        send_error(c, id, AGENT_E_LIMIT, 0, "watch: too many watches");
        return;
    }
    struct watcher *w = calloc(1, sizeof *w);
    if (!w) {
        send_error(c, id, AGENT_E_SYS, ENOMEM, "watch");
        return;
    }
    w->c = c;
    w->id = id;
    w->recursive = (rq.arg & AGENT_WATCH_RECURSIVE) != 0;
    memcpy(w->root, rq.path, rq.path_len);
    while (rq.path_len > 1 && w->root[rq.path_len - 1] == '/')
        w->root[--rq.path_len] = 0;
    watchers[slot] = w;
    w->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    int r = w->ifd < 0 ? -errno : watch_add_tree(w, "", 0);
    if (r == -ENOSPC || r == -ELOOP)
        watch_limit(c, id, r);
    else if (r < 0)
        send_error(c, id, AGENT_E_SYS, -r, w->root);
    else
        send_frame(c, AGENT_T_OK, id, NULL, 0);
    if (r < 0)
        watch_free(slot);
}

/* Forget rel and every directory below it (a directory moved away). */
static void watch_drop_tree(struct watcher *w, const char *rel)
{
    size_t rl = strlen(rel);
    for (size_t k = 0; k < w->n;) {
        const char *x = w->d[k].rel;
        if (!strcmp(x, rel) || (!strncmp(x, rel, rl) && x[rl] == '/')) {
            inotify_rm_watch(w->ifd, w->d[k].wd);
            free(w->d[k].rel);
            w->d[k] = w->d[--w->n];
        } else {
            k++;
        }
    }
}

/* One inotify event as WATCH_EVENT frames (and the directories it adds or
 * drops); -1 ends the watch. */
static int watch_event(struct watcher *w, const struct inotify_event *e)
{
    if (e->mask & IN_Q_OVERFLOW) {
        send_error(w->c, w->id, AGENT_E_LIMIT, 0, "watch: events queued past the kernel's limit");
        return -1;
    }
    struct wdir *d = watch_find(w, e->wd);
    if (!d)
        return 0;
    if (e->mask & IN_IGNORED) {
        int root = !d->rel[0];
        free(d->rel);
        *d = w->d[--w->n];
        if (root)
            send_error(w->c, w->id, AGENT_E_SYS, ENOENT, "watch: the directory is gone");
        return root ? -1 : 0;
    }
    if (!e->len)
        return 0;                /* *_SELF: the parent reports it */
    char name[AGENT_MAX_PATH + 1];
    size_t nl = (size_t)snprintf(name, sizeof name, "%s%s%s", d->rel, *d->rel ? "/" : "", e->name);
    if (nl >= sizeof name)
        return 0;
    uint32_t op = e->mask & (IN_CREATE | IN_MOVED_TO) ? AGENT_WATCH_CREATE
                  : e->mask & IN_MODIFY ? AGENT_WATCH_WRITE
                  : e->mask & IN_DELETE ? AGENT_WATCH_REMOVE
                  : e->mask & IN_MOVED_FROM ? AGENT_WATCH_RENAME
                  : e->mask & IN_ATTRIB ? AGENT_WATCH_CHMOD : 0;
    if (!op)
        return 0;
    if (agent_put_watch_event(&w->c->out, w->id, op, name, nl) < 0)
        return 0;
    if (w->recursive && (e->mask & IN_ISDIR) && (e->mask & IN_MOVED_FROM))
        watch_drop_tree(w, name);
    if (w->recursive && (e->mask & IN_ISDIR) && (e->mask & (IN_CREATE | IN_MOVED_TO))) {
        int depth = 0;
        for (const char *q = name; *q; q++)
            depth += *q == '/';
        int r = watch_add_tree(w, name, depth + 1);
        if (r == -ENOSPC || r == -ELOOP) {
            watch_limit(w->c, w->id, r);
            return -1;
        }
    }
    return 0;
}

static void watch_read(int i)
{
    struct watcher *w = watchers[i];
    ssize_t k = read(w->ifd, iobuf, sizeof iobuf);
    if (k <= 0)
        return;
    for (size_t off = 0; off + sizeof(struct inotify_event) <= (size_t)k;) {
        const struct inotify_event *e = (const void *)(iobuf + off);
        off += sizeof *e + e->len;
        if (watch_event(w, e) < 0) {
            watch_free(i);
            return;
        }
    }
}

/* The pollset's watch entries (after build_pollset's). */
static int watches_poll(struct pollfd *pfd, int np)
{
    for (int i = 0; i < MAX_WATCHES; i++) {
        struct watcher *w = watchers[i];
        if (!w)
            continue;
        w->pi = -1;
        if (w->c->out.len < OUT_HIGH) {
            w->pi = np;
            pfd[np++] = (struct pollfd){ .fd = w->ifd, .events = POLLIN };
        }
    }
    return np;
}

static void watches_step(const struct pollfd *pfd)
{
    for (int i = 0; i < MAX_WATCHES; i++)
        if (watchers[i] && watchers[i]->pi >= 0 && pfd[watchers[i]->pi].revents)
            watch_read(i);
}

static void watches_drop_conn(const struct conn *c)
{
    for (int i = 0; i < MAX_WATCHES; i++)
        if (watchers[i] && watchers[i]->c == c)
            watch_free(i);
}

static void handle_frame(struct conn *c, const struct agent_hdr *h, const uint8_t *pl)
{
    struct proc *p;
    enum agent_err err;
    int sig;

    switch (h->type) {
    case AGENT_T_PING:
        if (h->len > 64)
            send_error(c, h->id, AGENT_E_PAYLOAD, 0, "ping");
        else
            send_frame(c, AGENT_T_PONG, h->id, pl, h->len);
        break;
    case AGENT_T_EXEC:
        do_exec(c, h->id, pl, h->len);
        break;
    case AGENT_T_STDIN:
    case AGENT_T_STDIN_EOF:
        p = find_proc(c, h->id);
        if (!p) {
            send_error(c, h->id, AGENT_E_ID, 0, agent_type_name(h->type));
            break;
        }
        if (h->type == AGENT_T_STDIN_EOF) {
            if (h->len) {
                send_error(c, h->id, AGENT_E_PAYLOAD, 0, "stdin eof");
                break;
            }
            p->in_eof = 1;
        } else if (p->in_fd >= 0 && !p->in_eof) {
            if (p->in.len + h->len > STDIN_CAP) {
                send_error(c, h->id, AGENT_E_LIMIT, 0, "stdin");
                break;
            }
            if (agent_buf_reserve(&p->in, h->len) < 0) {
                send_error(c, h->id, AGENT_E_SYS, ENOMEM, "stdin");
                break;
            }
            memcpy(p->in.p + p->in.len, pl, h->len);
            p->in.len += h->len;
        }
        stdin_flush(p);
        break;
    case AGENT_T_KILL:
        p = find_proc(c, h->id);
        if (!p)
            send_error(c, h->id, AGENT_E_ID, 0, "kill");
        else if (agent_kill_decode(pl, h->len, &sig, &err) < 0)
            send_error(c, h->id, err, 0, "kill");
        else {
            proc_signal(p, sig);
            if (sig == SIGKILL)
                p->killed = 1;
        }
        break;
    case AGENT_T_RESIZE: {
        uint16_t rows, cols;
        p = find_proc(c, h->id);
        if (!p)
            send_error(c, h->id, AGENT_E_ID, 0, "resize");
        else if (agent_resize_decode(pl, h->len, &rows, &cols, &err) < 0)
            send_error(c, h->id, err, 0, "resize");
        else if (p->pty_fd < 0)
            send_error(c, h->id, AGENT_E_SYS, ENOTTY, "resize: the process has no pty");
        else if (ioctl(p->pty_fd, TIOCSWINSZ, &(struct winsize){ .ws_row = rows, .ws_col = cols }) < 0)
            send_error(c, h->id, AGENT_E_SYS, errno, "resize");
        else
            send_frame(c, AGENT_T_OK, h->id, NULL, 0);
        break;
    }
    case AGENT_T_FILE_WRITE:
        do_fwrite(c, h->id, pl, h->len);
        break;
    case AGENT_T_FILE_READ:
        do_fread(c, h->id, pl, h->len);
        break;
    case AGENT_T_MKDIR:
        do_mkdir(c, h->id, pl, h->len);
        break;
    case AGENT_T_SET_TIME:
        do_set_time(c, h->id, pl, h->len);
        break;
    case AGENT_T_STAT:
        do_stat(c, h->id, pl, h->len);
        break;
    case AGENT_T_LIST:
        do_list(c, h->id, pl, h->len);
        break;
    case AGENT_T_RENAME:
        do_rename(c, h->id, pl, h->len);
        break;
    case AGENT_T_REMOVE:
        do_remove(c, h->id, pl, h->len);
        break;
    case AGENT_T_ADD_ENTROPY:
        do_add_entropy(c, h->id, pl, h->len);
        break;
    case AGENT_T_WATCH:
        do_watch(c, h->id, pl, h->len);
        break;
    default:
        send_error(c, h->id, AGENT_E_TYPE, 0, agent_type_name(h->type));
        break;
    }
}

static void conn_read(struct conn *c)
{
    uint8_t buf[65536];
    ssize_t n = recv(c->fd, buf, sizeof buf, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        c->closing = 2;          /* peer gone: close now */
        return;
    }
    if (agent_rx_push(&c->rx, buf, (size_t)n) < 0) {
        c->closing = 2;
        return;
    }
    for (;;) {
        struct agent_hdr h;
        const uint8_t *pl;
        enum agent_err err;
        int r = agent_rx_next(&c->rx, &h, &pl, &err);
        if (r == 0)
            break;
        if (r < 0) {
            send_error(c, 0, err, 0, "frame");
            c->closing = 1;
            break;
        }
        handle_frame(c, &h, pl);
        if (c->closing)
            break;
    }
}

static void conn_write(struct conn *c)
{
    while (c->out.len) {
        ssize_t n = send(c->fd, c->out.p, c->out.len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                return;
            c->closing = 2;
            return;
        }
        agent_buf_consume(&c->out, (size_t)n);
    }
}

static void conn_free(int i)
{
    struct conn *c = conns[i];
    for (int k = 0; k < MAX_PROCS; k++) {
        struct proc *p = procs[k];
        if (p && p->c == c) {
            proc_signal(p, SIGKILL);
            p->c = NULL;
            close_fd(&p->in_fd);
        }
    }
    for (int k = 0; k < MAX_FREADS; k++)
        if (freads[k] && freads[k]->c == c)
            fread_free(k);
    for (int k = 0; k < MAX_LISTS; k++)
        if (lists[k] && lists[k]->c == c)
            list_free(k);
    watches_drop_conn(c);
    close(c->fd);
    agent_rx_free(&c->rx);
    agent_buf_free(&c->out);
    free(c);
    conns[i] = NULL;
}

static void conn_accept(int lfd)
{
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
        return;
    int slot = -1;
    for (int i = 0; i < MAX_CONNS && slot < 0; i++)
        if (!conns[i])
            slot = i;
    struct conn *c = slot >= 0 ? calloc(1, sizeof *c) : NULL;
    if (!c) {
        close(fd);
        return;
    }
    c->fd = fd;
    conns[slot] = c;
    if (agent_put_u32(&c->out, AGENT_T_READY, 0, 1) < 0)
        c->closing = 2;
}

/* ---- setup and main loop ---------------------------------------------- */

static unsigned cmdline_port(void)
{
    char buf[4096];
    int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    for (char *s = buf; (s = strstr(s, "moat.agent=")); s++) {
        if (s != buf && s[-1] != ' ')
            continue;
        char *end;
        unsigned long v = strtoul(s + 11, &end, 10);
        if (end != s + 11 && v > 0 && v < UINT_MAX)
            return (unsigned)v;
    }
    return 0;
}

static int listen_unix(const char *path)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof sa.sun_path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    unlink(path);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 64) < 0) {
        int en = errno;
        close(fd);
        errno = en;
        return -1;
    }
    return fd;
}

static int listen_vsock(unsigned port)
{
    struct sockaddr_vm sa = { .svm_family = AF_VSOCK, .svm_cid = VMADDR_CID_ANY,
                              .svm_port = port };
    /* The vsock transport may still be probing: retry for a few seconds. */
    for (int tries = 0;; tries++) {
        int fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(fd, 64) == 0)
            return fd;
        int en = errno;
        if (fd >= 0)
            close(fd);
        if (tries >= 50) {
            errno = en;
            return -1;
        }
        usleep(100 * 1000);
    }
}

static void usage(void)
{
    fprintf(stderr, "usage: moat-agent [--port N | --unix PATH]\n"
                    "  default port: moat.agent=N on /proc/cmdline, else %u\n",
            AGENT_DEFAULT_PORT);
}

/* The command line: --unix PATH or --port N. 0, or 2 after the usage. */
static int parse_args(int argc, char **argv, const char **unix_path, unsigned *port)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--unix") && i + 1 < argc) {
            *unix_path = argv[++i];
        } else if (!strcmp(argv[i], "--port") && i + 1 < argc) {
            char *end;
            unsigned long v = strtoul(argv[++i], &end, 10);
            if (*end || v == 0 || v >= UINT_MAX) {
                usage();
                return 2;
            }
            *port = (unsigned)v;
        } else {
            usage();
            return 2;
        }
    }
    return 0;
}

/* fds 0-2, SIGPIPE and the fd limit. 0, or 1 if fds 0-2 cannot be made. */
static int setup_process(void)
{
    /* Make sure fds 0-2 exist so pipes never land on them. */
    for (int fd = 0; fd < 3; fd++)
        if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) < 0)
            return 1;
    signal(SIGPIPE, SIG_IGN);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;      /* 3 pipes per process */
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    return 0;
}

/* The listening socket: on unix_path if set, else on vsock port (0: the
 * command line's, else the default). Its fd, or -1 (logged). */
static int open_listener(const char *unix_path, unsigned port)
{
    int lfd;
    if (unix_path) {
        lfd = listen_unix(unix_path);
        if (lfd < 0)
            logmsg("listen on %s", unix_path, errno);
        return lfd;
    }
    if (!port)
        port = cmdline_port();
    if (!port)
        port = AGENT_DEFAULT_PORT;
    lfd = listen_vsock(port);
    if (lfd < 0) {
        char p[16];
        snprintf(p, sizeof p, "%u", port);
        logmsg("listen on vsock port %s", p, errno);
    }
    return lfd;
}

/* Fill pfd for one round: the listener (0), the signalfd (1), then each
 * connection and each process's pipes (their indexes kept in pi, pi_out,
 * pi_err, pi_in). Returns the count; *timeout is poll's timeout in ms
 * (-1: none), the nearest deadline, 0 while file reads or listings wait. */
static int build_pollset(struct pollfd *pfd, int lfd, int sfd, int *timeout)
{
    int np = 0;
    int64_t now = now_ms();

    *timeout = -1;
    pfd[np++] = (struct pollfd){ .fd = lfd, .events = POLLIN };
    pfd[np++] = (struct pollfd){ .fd = sfd, .events = POLLIN };
    for (int i = 0; i < MAX_CONNS; i++)
        if (conns[i])
            conns[i]->stdin_full = 0;
    for (int i = 0; i < MAX_PROCS; i++)
        if (procs[i] && procs[i]->c && procs[i]->in.len >= STDIN_HIGH)
            procs[i]->c->stdin_full = 1;
    for (int i = 0; i < MAX_CONNS; i++) {
        struct conn *c = conns[i];
        if (!c)
            continue;
        short ev = 0;
        if (!c->closing && c->out.len < OUT_HIGH && !c->stdin_full)
            ev |= POLLIN;
        if (c->out.len)
            ev |= POLLOUT;
        c->pi = np;
        pfd[np++] = (struct pollfd){ .fd = c->fd, .events = ev };
    }
    for (int i = 0; i < MAX_PROCS; i++) {
        struct proc *p = procs[i];
        if (!p)
            continue;
        int room = !p->c || p->c->out.len < OUT_HIGH;
        p->pi_out = p->pi_err = p->pi_in = -1;
        if (p->out_fd >= 0 && room) {
            p->pi_out = np;
            pfd[np++] = (struct pollfd){ .fd = p->out_fd, .events = POLLIN };
        }
        if (p->err_fd >= 0 && room) {
            p->pi_err = np;
            pfd[np++] = (struct pollfd){ .fd = p->err_fd, .events = POLLIN };
        }
        if (p->in_fd >= 0 && p->in.len) {
            p->pi_in = np;
            pfd[np++] = (struct pollfd){ .fd = p->in_fd, .events = POLLOUT };
        }
        if (p->deadline && !p->exited && !p->timed_out) {
            int64_t d = p->deadline - now;
            if (d < 0)
                d = 0;
            if (*timeout < 0 || d < *timeout)
                *timeout = (int)d;
        }
    }
    for (int i = 0; i < MAX_FREADS; i++)
        if (freads[i] && freads[i]->c->out.len < OUT_HIGH)
            *timeout = 0;
    for (int i = 0; i < MAX_LISTS; i++)
        if (lists[i] && lists[i]->c->out.len < OUT_HIGH)
            *timeout = 0;
    return watches_poll(pfd, np);
}

/* After poll: reap, kill what is past its deadline, move the processes'
 * pipes, step file reads and listings, serve the connections, accept. */
static void serve_round(const struct pollfd *pfd, int lfd, int sfd)
{
    if (pfd[1].revents) {
        struct signalfd_siginfo si;
        while (read(sfd, &si, sizeof si) > 0)
            ;
    }
    reap();
    int64_t now = now_ms();
    for (int i = 0; i < MAX_PROCS; i++) {
        struct proc *p = procs[i];
        if (!p)
            continue;
        if (p->deadline && !p->exited && !p->timed_out && now >= p->deadline) {
            proc_signal(p, SIGKILL);
            p->timed_out = 1;
        }
        if (p->pi_out >= 0 && pfd[p->pi_out].revents)
            pipe_read(p, &p->out_fd, AGENT_T_STDOUT);
        if (p->pi_err >= 0 && pfd[p->pi_err].revents)
            pipe_read(p, &p->err_fd, AGENT_T_STDERR);
        if (p->pi_in >= 0 && pfd[p->pi_in].revents)
            stdin_flush(p);
        proc_maybe_done(i);
    }
    freads_step();
    lists_step();
    watches_step(pfd);
    for (int i = 0; i < MAX_CONNS; i++) {
        struct conn *c = conns[i];
        if (!c)
            continue;
        short rev = pfd[c->pi].revents;
        if ((rev & (POLLIN | POLLHUP | POLLERR)) && !c->closing)
            conn_read(c);
        if (c->out.len && c->closing != 2)
            conn_write(c);
        if (c->closing == 2 || (c->closing && !c->out.len))
            conn_free(i);
    }
    /* A connection accepted after this round's table was built has pi
     * unset: accept last. */
    if (pfd[0].revents & POLLIN)
        conn_accept(lfd);
}

int main(int argc, char **argv)
{
    const char *unix_path = NULL;
    unsigned port = 0;

    int r = parse_args(argc, argv, &unix_path, &port);
    if (r)
        return r;
    if (setup_process())
        return 1;
    int lfd = open_listener(unix_path, port);
    if (lfd < 0)
        return 1;

    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0) {
        logmsg("%s", "signalfd", errno);
        return 1;
    }

    static struct pollfd pfd[2 + MAX_CONNS + 3 * MAX_PROCS + MAX_WATCHES];
    for (;;) {
        int timeout;
        int np = build_pollset(pfd, lfd, sfd, &timeout);
        if (poll(pfd, (nfds_t)np, timeout) < 0 && errno != EINTR) {
            logmsg("%s", "poll", errno);
            usleep(10000);
            continue;
        }
        serve_round(pfd, lfd, sfd);
    }
}
