/* virtio-vsock device with the hybrid-vsock host side. Contracts in vsock.h. */
#include "devices/vsock/vsock.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "devices/virtio/evloop.h"
#include "devices/virtio/virtq.h"
#include "devices/virtio/vqueues.h"
#include "devices/vsock/vsock_pkt.h"
#include "vmm/base/clock.h"
#include "vmm/base/log.h"
#include "vmm/base/scfilter.h"

#define Q_RX 0
#define Q_TX 1
#define Q_EV 2
#define NQUEUES 3
#define CHAIN_MAX 64
#define CTRL_RING 4096          /* pending control packets to the guest */

enum cstate {
    C_FREE = 0,
    C_LINE,         /* host client: reading the CONNECT line */
    C_AWAIT,        /* host client: REQUEST sent, waiting for RESPONSE */
    C_EST,          /* established */
};

struct conn {
    enum cstate st;
    int fd;
    uint32_t lport, pport;      /* local (host) port, peer (guest) port */
    uint64_t deadline_ns;       /* C_LINE / C_AWAIT */
    uint8_t line[VSOCK_CONNECT_MAX_LINE];
    size_t line_len;
    /* credit: the guest's receive side */
    uint32_t peer_buf_alloc, peer_fwd_cnt;
    uint32_t tx_cnt;            /* payload bytes sent to the guest */
    bool credit_req_sent;
    /* our receive side */
    uint32_t fwd_cnt;           /* payload bytes from the guest written to fd */
    uint32_t fwd_cnt_sent;      /* fwd_cnt last told to the guest */
    uint32_t rx_cnt;            /* payload bytes received from the guest */
    uint8_t *pend;              /* guest->host bytes not yet written (VSOCK_BUF_ALLOC) */
    size_t pend_off, pend_len;
    bool host_eof;              /* host will send no more (SHUTDOWN SEND told) */
    bool peer_shut_send;        /* guest will send no more */
    bool peer_shut_rcv;         /* guest will receive no more */
    bool wr_shut;               /* shutdown(SHUT_WR) done */
    bool readable;              /* epoll said IN (or HUP): read it when we can */
    struct vsock_dev *dev;      /* for its event callback */
};

struct ctrl {
    uint32_t lport, pport;
    uint16_t op;
    uint32_t flags;
};

#define INJECT_MAX 4

struct vsock_dev {
    char name[32];
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    uint64_t cid;
    int listen_fd;
    uid_t euid;                 /* moat's, at create (the I/O thread's seccomp list has no geteuid) */
    /* Guest-initiated connections go to PATH_<port>, connected by the
     * connector thread (docs/security.md, "Seccomp"): the I/O thread
     * sends it a port on conn_sock and gets a connected fd back; it has
     * neither socket(2) nor connect(2). The connector's working directory
     * is PATH's directory, pinned by fd at create (its own, CLONE_FS
     * unshared), and it connects to the relative name base_<port>. */
    int conn_sock;              /* the I/O thread's end of the socket pair */
    int conn_peer;              /* the connector's end */
    int conn_dir;               /* PATH's directory (O_PATH) */
    char base[sizeof(((struct sockaddr_un *)0)->sun_path)];
    pthread_t conn_thread;
    bool conn_running;
    int conn_seccomp;           /* its filter's mode */
    int wake_fd;                /* vsock_open_internal / vsock_ungate */
    /* The I/O thread's loop, for the device's lifetime: the wake and
     * listening fds and every connection's fd are registered once, the kick
     * fds from start to stop; interest follows the state (sync_conns). */
    struct evloop *loop;
    struct evloop_timer conn_timer;     /* the earliest C_LINE / C_AWAIT deadline */
    struct evloop_timer ack_timer;      /* while reset_wait: look again every 10 ms */
    uint16_t dirty[VSOCK_MAX_CONNS];    /* connections whose interest may have changed */
    bool is_dirty[VSOCK_MAX_CONNS];
    unsigned ndirty;
    uint32_t next_port;
    /* after a restore (vsock_restored) */
    _Atomic bool gated;         /* host clients wait in the listen backlog */
    bool reset_pending;         /* TRANSPORT_RESET not yet on the event queue */
    bool reset_wait;            /* delivered, the driver has not handled it yet */
    int ev_left;                /* event buffers still available after delivery */
    uint64_t reset_deadline_ns; /* stop waiting for reset_wait then */
    pthread_mutex_t inj_lock;
    int inj_fd[INJECT_MAX];     /* internal clients for the I/O thread */
    unsigned inj_n;
    struct conn conns[VSOCK_MAX_CONNS];
    unsigned nconns;
    /* run state */
    struct virtio_dev_env env;
    pthread_t thread;
    bool running;
    struct vqueues vq;          /* broken / pushed-not-published, per queue */
    struct ctrl ctrl[CTRL_RING];
    unsigned ctrl_head, ctrl_n;
    struct virtq_seg rx_seg[CHAIN_MAX], tx_seg[CHAIN_MAX], ev_seg[CHAIN_MAX];
    struct virtq_chain rx_chain;
    bool rx_have;
    uint8_t buf[VSOCK_HDR_SIZE + VSOCK_MAX_PKT_LEN];
    struct log_limit rl;
    _Atomic uint64_t st_acc, st_refused, st_hconn, st_gconn, st_bad, st_rst, st_rx, st_tx;
    _Atomic unsigned st_conns;
};

void vsock_get_stats(struct vsock_dev *v, struct vsock_stats *s)
{
    s->host_accepted = atomic_load(&v->st_acc);
    s->host_refused = atomic_load(&v->st_refused);
    s->host_connected = atomic_load(&v->st_hconn);
    s->guest_connected = atomic_load(&v->st_gconn);
    s->bad_pkts = atomic_load(&v->st_bad);
    s->resets = atomic_load(&v->st_rst);
    s->rx_bytes = atomic_load(&v->st_rx);
    s->tx_bytes = atomic_load(&v->st_tx);
    s->conns = atomic_load(&v->st_conns);
}


/* ---- creation ---- */

static void on_wake(void *opaque, int fd, uint32_t events);
static void on_conn(void *opaque, int fd, uint32_t events);
static void on_listen(void *opaque, int fd, uint32_t events);
static void on_conn_timer(void *opaque);
static void on_ack_timer(void *opaque);
static int connector_start(struct vsock_dev *v, int seccomp, char *why, size_t wlen);
static void connector_stop(struct vsock_dev *v);

/* ---- the connector ---- */

/* What the connector is asked: a port. It answers with a connected fd (in
 * this process's table, now the I/O thread's) or -errno. */
struct conn_req {
    uint32_t port;
};
struct conn_reply {
    int fd;
    int err;
};

static void *connector_main(void *arg)
{
    struct vsock_dev *v = arg;
    int sock = v->conn_peer;
    /* Its own working directory, PATH's, before the filter: a connect to a
     * relative name resolves there, whatever PATH's directory is renamed
     * to or replaced with later. */
    if (unshare(CLONE_FS) < 0 || fchdir(v->conn_dir) < 0) {
        log_err("%s: connector: %s: guest connections are refused", v->name, strerror(errno));
        shutdown(sock, SHUT_RDWR);
        return NULL;
    }
    struct conn_req q;
    if (sc_install_named(SC_CONNECT, (enum sc_mode)v->conn_seccomp, "moat-connect") < 0) {
        shutdown(sock, SHUT_RDWR);  /* the I/O thread's requests fail */
        return NULL;
    }
    for (;;) {
        ssize_t n = read(sock, &q, sizeof q);
        if (n <= 0)
            break;              /* the device is gone */
        struct conn_reply rep = { -1, 0 };
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int pl = n == sizeof q ? snprintf(sa.sun_path, sizeof sa.sun_path, "%s_%u", v->base, q.port) : -1;
        if (pl < 0 || (size_t)pl >= sizeof sa.sun_path) {
            rep.err = -ENAMETOOLONG;
        } else if ((rep.fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0) {
            rep.err = -errno;
        } else if (connect(rep.fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
            rep.err = -errno;
            close(rep.fd);
            rep.fd = -1;
        }
        if (write(sock, &rep, sizeof rep) != (ssize_t)sizeof rep) {
            if (rep.fd >= 0)
                close(rep.fd);
            break;
        }
    }
    return NULL;
}

/* PATH split into its directory (opened, O_PATH) and base name; the
 * socket pair; the thread (created here, on the caller's thread, before
 * any filter; it installs its own first thing). */
static int connector_start(struct vsock_dev *v, int seccomp, char *why, size_t wlen)
{
    v->conn_sock = v->conn_peer = v->conn_dir = -1;
    v->conn_seccomp = seccomp;
    const char *slash = strrchr(v->path, '/');
    char dir[sizeof v->path];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == v->path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - v->path), v->path);
    snprintf(v->base, sizeof v->base, "%s", slash ? slash + 1 : v->path);
    int sv[2];
    int r = 0;
    if ((v->conn_dir = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0 ||
        socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
        r = -errno;
        snprintf(why, wlen, "vsock: %s: %s", v->conn_dir < 0 ? dir : "socketpair", strerror(errno));
    } else {
        v->conn_sock = sv[0];
        v->conn_peer = sv[1];
        /* the connector takes no asynchronous signal */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        int e = pthread_create(&v->conn_thread, NULL, connector_main, v);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (e) {
            r = -e;
            snprintf(why, wlen, "vsock: starting the connector thread: %s", strerror(e));
        } else {
            v->conn_running = true;
        }
    }
    if (r < 0)
        connector_stop(v);
    return r;
}

static void connector_stop(struct vsock_dev *v)
{
    /* Its read returns 0 once our end is closed (close, not shutdown:
     * the main thread's list, which may run this at teardown, has no
     * shutdown); the I/O thread, which uses it, has stopped. */
    if (v->conn_sock >= 0)
        close(v->conn_sock);
    if (v->conn_running)
        pthread_join(v->conn_thread, NULL);
    v->conn_running = false;
    if (v->conn_peer >= 0)
        close(v->conn_peer);
    if (v->conn_dir >= 0)
        close(v->conn_dir);
    v->conn_sock = v->conn_peer = v->conn_dir = -1;
}

/* The I/O thread: a connection to PATH_<port>, by the connector. An fd
 * or -errno. */
static int connector_connect(struct vsock_dev *v, uint32_t port)
{
    struct conn_req q = { port };
    if (write(v->conn_sock, &q, sizeof q) != (ssize_t)sizeof q)
        return -EPIPE;
    struct conn_reply rep;
    ssize_t n;
    while ((n = read(v->conn_sock, &rep, sizeof rep)) < 0 && errno == EINTR)
        ;
    if (n != (ssize_t)sizeof rep)
        return -EPIPE;
    return rep.fd >= 0 ? rep.fd : rep.err < 0 ? rep.err : -EIO;
}

int vsock_create(const struct vsock_opts *o, struct vsock_dev **out, char *why, size_t wlen)
{
    *out = NULL;
    if (!o || !o->uds_path || !*o->uds_path) {
        snprintf(why, wlen, "vsock: no socket path");
        return -EINVAL;
    }
    if (!vsock_cid_valid(o->guest_cid)) {
        snprintf(why, wlen, "vsock: guest CID %llu out of range (3 .. 4294967294)",
                 (unsigned long long)o->guest_cid);
        return -EINVAL;
    }
    struct vsock_dev *v = calloc(1, sizeof *v);
    if (!v) {
        snprintf(why, wlen, "out of memory");
        return -ENOMEM;
    }
    /* room for "_<u32>" after the path for guest-initiated connections */
    _Static_assert(VSOCK_UDS_PATH_MAX + 12 == sizeof(v->path), "VSOCK_UDS_PATH_MAX");
    if (strlen(o->uds_path) > VSOCK_UDS_PATH_MAX) {
        snprintf(why, wlen, "vsock: socket path too long: %s", o->uds_path);
        free(v);
        return -ENAMETOOLONG;
    }
    snprintf(v->path, sizeof v->path, "%s", o->uds_path);
    snprintf(v->name, sizeof v->name, "%s", o->name ? o->name : "vsock");
    v->cid = o->guest_cid;
    v->next_port = VSOCK_HOST_PORT_BASE;
    v->rl = LOG_LIMIT(10);
    v->wake_fd = -1;
    int r;
    struct stat st;
    if (lstat(v->path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            snprintf(why, wlen, "vsock: %s exists and is not a socket", v->path);
            free(v);
            return -EEXIST;
        }
        unlink(v->path);
    }
    v->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (v->listen_fd < 0) {
        r = -errno;
        snprintf(why, wlen, "vsock: socket: %s", strerror(errno));
        free(v);
        return r;
    }
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    memcpy(sa.sun_path, v->path, strlen(v->path) + 1);
    /* The socket reaches the guest agent, which runs commands as root in
     * the guest: owner only, set before listen() so that no one connects
     * while the mode is still the umask's; and each client's uid is checked
     * on accept (host_accept) as the control socket's is. */
    if (bind(v->listen_fd, (struct sockaddr *)&sa, sizeof sa) < 0 || chmod(v->path, 0600) < 0 ||
        listen(v->listen_fd, 128) < 0) {
        r = -errno;
        snprintf(why, wlen, "vsock: %s: %s", v->path, strerror(errno));
        close(v->listen_fd);
        free(v);
        return r;
    }
    v->euid = geteuid();
    v->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (v->wake_fd < 0) {
        r = -errno;
        snprintf(why, wlen, "vsock: eventfd: %s", strerror(errno));
    } else if ((r = evloop_create(&v->loop)) < 0 ||
               (r = evloop_add(v->loop, v->wake_fd, EVLOOP_IN, on_wake, v)) < 0 ||
               (r = evloop_add(v->loop, v->listen_fd, 0, on_listen, v)) < 0) {
        snprintf(why, wlen, "vsock: event loop: %s", strerror(-r));
    }
    if (r < 0) {
        evloop_destroy(v->loop);
        if (v->wake_fd >= 0)
            close(v->wake_fd);
        close(v->listen_fd);
        unlink(v->path);
        free(v);
        return r;
    }
    if ((r = connector_start(v, o->seccomp, why, wlen)) < 0) {
        evloop_destroy(v->loop);
        close(v->wake_fd);
        close(v->listen_fd);
        unlink(v->path);
        free(v);
        return r;
    }
    evloop_timer_init(&v->conn_timer, on_conn_timer, v);
    evloop_timer_init(&v->ack_timer, on_ack_timer, v);
    for (unsigned i = 0; i < VSOCK_MAX_CONNS; i++)
        v->conns[i].fd = -1;
    pthread_mutex_init(&v->inj_lock, NULL);
    *out = v;
    return 0;
}

/* ---- restore support ---- */

static void wake(struct vsock_dev *v)
{
    uint64_t one = 1;
    if (write(v->wake_fd, &one, sizeof one) < 0 && errno != EAGAIN)
        log_warn("%s: wake eventfd: %s", v->name, strerror(errno));
}

void vsock_restored(struct vsock_dev *v)
{
    atomic_store(&v->gated, true);
    v->reset_pending = true;    /* read by the I/O thread, which is not running yet */
}

void vsock_ungate(struct vsock_dev *v)
{
    if (atomic_exchange(&v->gated, false))
        wake(v);
}

bool vsock_is_gated(struct vsock_dev *v)
{
    return atomic_load(&v->gated);
}

uint64_t vsock_guest_cid(const struct vsock_dev *v)
{
    return v->cid;
}

int vsock_open_internal(struct vsock_dev *v, int *fd)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    int fl = fcntl(sv[1], F_GETFL);
    if (fl < 0 || fcntl(sv[1], F_SETFL, fl | O_NONBLOCK) < 0) {
        int r = -errno;
        close(sv[0]);
        close(sv[1]);
        return r;
    }
    pthread_mutex_lock(&v->inj_lock);
    if (v->inj_n == INJECT_MAX) {
        pthread_mutex_unlock(&v->inj_lock);
        close(sv[0]);
        close(sv[1]);
        return -EAGAIN;
    }
    v->inj_fd[v->inj_n++] = sv[1];
    pthread_mutex_unlock(&v->inj_lock);
    wake(v);
    *fd = sv[0];
    return 0;
}

/* ---- config space: le64 guest_cid ---- */

static void vs_config_read(void *dev, uint32_t off, uint8_t *data, uint32_t len)
{
    struct vsock_dev *v = dev;
    uint8_t c[8];
    for (int i = 0; i < 8; i++)
        c[i] = (uint8_t)(v->cid >> 8 * i);
    memset(data, 0, len);
    if (off < sizeof c)
        memcpy(data, c + off, len < sizeof c - off ? len : sizeof c - off);
}

static void vs_config_write(void *dev, uint32_t off, const uint8_t *data, uint32_t len)
{
    (void)dev; (void)off; (void)data; (void)len;
}

static uint32_t vs_config_size(void *dev) { (void)dev; return 8; }
static uint64_t vs_features(void *dev) { (void)dev; return 0; }

/* ---- connections ---- */

static struct conn *conn_find(struct vsock_dev *v, uint32_t lport, uint32_t pport)
{
    for (unsigned i = 0; i < VSOCK_MAX_CONNS; i++) {
        struct conn *c = &v->conns[i];
        if (c->st >= C_AWAIT && c->lport == lport && c->pport == pport)
            return c;
    }
    return NULL;
}

/* c's state changed in a way that may change what we wait for on its fd:
 * sync_conns() updates the interest at the end of the pass. */
static void touch(struct vsock_dev *v, struct conn *c)
{
    unsigned i = (unsigned)(c - v->conns);
    if (!v->is_dirty[i]) {
        v->is_dirty[i] = true;
        v->dirty[v->ndirty++] = (uint16_t)i;
    }
}

/* A new connection on fd, registered with the loop (silent until its
 * state is set and synced). NULL: all slots taken, or the loop refused. */
static struct conn *conn_new(struct vsock_dev *v, int fd)
{
    for (unsigned i = 0; i < VSOCK_MAX_CONNS; i++) {
        struct conn *c = &v->conns[i];
        if (c->st == C_FREE) {
            int r = evloop_add(v->loop, fd, 0, on_conn, c);
            if (r < 0) {
                if (log_limit_ok(&v->rl))
                    log_warn("%s: event loop: %s", v->name, strerror(-r));
                return NULL;
            }
            memset(c, 0, sizeof *c);
            c->fd = fd;
            c->dev = v;
            v->nconns++;
            atomic_store(&v->st_conns, v->nconns);
            touch(v, c);
            return c;
        }
    }
    return NULL;
}

/* A host client's CONNECT line or the guest's answer is due by then. */
static void conn_deadline(struct vsock_dev *v, struct conn *c, uint64_t deadline_ns)
{
    c->deadline_ns = deadline_ns;
    if (!evloop_timer_armed(&v->conn_timer) || deadline_ns < evloop_timer_deadline(&v->conn_timer))
        evloop_timer_arm(v->loop, &v->conn_timer, deadline_ns);
}

static void conn_free(struct vsock_dev *v, struct conn *c)
{
    if (c->st == C_FREE)
        return;
    evloop_del(v->loop, c->fd);
    if (c->fd >= 0)
        close(c->fd);
    free(c->pend);
    memset(c, 0, sizeof *c);
    c->fd = -1;
    c->st = C_FREE;
    v->nconns--;
    atomic_store(&v->st_conns, v->nconns);
}

static bool lport_in_use(struct vsock_dev *v, uint32_t p)
{
    for (unsigned i = 0; i < VSOCK_MAX_CONNS; i++)
        if (v->conns[i].st >= C_AWAIT && v->conns[i].lport == p)
            return true;
    return false;
}

static uint32_t alloc_lport(struct vsock_dev *v)
{
    for (;;) {      /* at most VSOCK_MAX_CONNS ports are in use: terminates */
        uint32_t p = v->next_port;
        v->next_port = p == UINT32_MAX ? VSOCK_HOST_PORT_BASE : p + 1;
        if (!lport_in_use(v, p))
            return p;
    }
}

/* Queue a control packet for the guest (best effort: a full ring drops it;
 * connections then time out or get reset later). */
static void ctrl_push(struct vsock_dev *v, uint32_t lport, uint32_t pport, uint16_t op, uint32_t flags)
{
    if (v->ctrl_n == CTRL_RING) {
        if (log_limit_ok(&v->rl))
            log_warn("%s: control ring full, dropping op %u", v->name, op);
        return;
    }
    v->ctrl[(v->ctrl_head + v->ctrl_n) % CTRL_RING] = (struct ctrl){ lport, pport, op, flags };
    v->ctrl_n++;
    if (op == VSOCK_OP_RST)
        atomic_fetch_add(&v->st_rst, 1);
}

/* Reset a connection: RST to the guest (unless it is still reading its
 * CONNECT line: the guest never heard of it), close the host side. */
static void conn_reset(struct vsock_dev *v, struct conn *c)
{
    if (c->st >= C_AWAIT)
        ctrl_push(v, c->lport, c->pport, VSOCK_OP_RST, 0);
    conn_free(v, c);
}

static uint32_t peer_credit(const struct conn *c)
{
    uint32_t f;
    if (vsock_credit_free(c->peer_buf_alloc, c->tx_cnt, c->peer_fwd_cnt, &f) < 0)
        return 0;
    return f;
}

/* ---- guest memory streams ---- */

/* Get an RX chain into v->rx_chain (kept until used). */
static bool rx_get(struct vsock_dev *v)
{
    if (v->rx_have)
        return true;
    if (v->vq.broken[Q_RX])
        return false;
    struct virtq *q = &v->env.queues[Q_RX];
    for (;;) {
        v->rx_chain = (struct virtq_chain){ .seg = v->rx_seg, .max_seg = CHAIN_MAX };
        int r = virtq_pop(q, v->env.mem, &v->rx_chain);
        if (r == 1) {
            if (v->rx_chain.write_len < VSOCK_HDR_SIZE) {
                vqueues_push(&v->vq, Q_RX, v->rx_chain.head, 0);
                continue;
            }
            v->rx_have = true;
            return true;
        }
        if (r == -EIO) {
            vqueues_broken(&v->vq, Q_RX, virtq_strerror(v->rx_chain.err));
            return false;
        }
        if (r < 0) {
            vqueues_push(&v->vq, Q_RX, v->rx_chain.head, 0);
            continue;
        }
        /* empty: ask for a kick; recheck what slipped in */
        int n = virtq_enable_notify(q, v->env.mem);
        if (n == -EIO) {
            vqueues_broken(&v->vq, Q_RX, virtq_strerror(q->err));
            return false;
        }
        if (n <= 0)
            return false;   /* the driver's next RX kick wakes the loop */
    }
}

static void fill_hdr(struct vsock_dev *v, struct conn *c, struct vsock_hdr *h,
                     uint32_t lport, uint32_t pport, uint16_t op, uint32_t flags, uint32_t len)
{
    *h = (struct vsock_hdr){ .src_cid = VSOCK_HOST_CID, .dst_cid = v->cid, .src_port = lport,
                             .dst_port = pport, .len = len, .type = VSOCK_TYPE_STREAM,
                             .op = op, .flags = flags };
    if (c) {
        h->buf_alloc = VSOCK_BUF_ALLOC;
        h->fwd_cnt = c->fwd_cnt;
        c->fwd_cnt_sent = c->fwd_cnt;
    }
}

/* Send header + payload (already at v->buf + 44) in the held RX chain. */
static void rx_send(struct vsock_dev *v, const struct vsock_hdr *h)
{
    log_debug("%s: to guest op %u %u -> %u len %u", v->name, h->op, h->src_port, h->dst_port, h->len);
    vsock_hdr_encode(h, v->buf);
    int r = virtq_chain_write(v->env.mem, &v->rx_chain, 0, v->buf, VSOCK_HDR_SIZE + h->len);
    vqueues_push(&v->vq, Q_RX, v->rx_chain.head, r == 0 ? VSOCK_HDR_SIZE + h->len : 0);
    v->rx_have = false;
}

/* ---- host -> guest ---- */

static void on_host_eof(struct vsock_dev *v, struct conn *c)
{
    c->host_eof = true;
    c->readable = false;
    ctrl_push(v, c->lport, c->pport, VSOCK_OP_SHUTDOWN, VSOCK_SHUTDOWN_SEND);
}

/* Move data and control packets to the guest while RX buffers last. */
static void rx_pump(struct vsock_dev *v)
{
    for (;;) {
        if (v->ctrl_n) {
            if (!rx_get(v))
                return;
            struct ctrl k = v->ctrl[v->ctrl_head];
            v->ctrl_head = (v->ctrl_head + 1) % CTRL_RING;
            v->ctrl_n--;
            struct conn *c = conn_find(v, k.lport, k.pport);
            if (!c && k.op != VSOCK_OP_RST)
                continue;       /* the connection went away meanwhile */
            struct vsock_hdr h;
            fill_hdr(v, k.op == VSOCK_OP_RST ? NULL : c, &h, k.lport, k.pport, k.op, k.flags, 0);
            rx_send(v, &h);
            continue;
        }
        bool any = false;
        for (unsigned i = 0; i < VSOCK_MAX_CONNS; i++) {
            struct conn *c = &v->conns[i];
            if (c->st != C_EST || !c->readable || c->host_eof || c->peer_shut_rcv)
                continue;
            touch(v, c);
            uint32_t cr = peer_credit(c);
            if (!cr) {
                if (!c->credit_req_sent) {
                    c->credit_req_sent = true;
                    ctrl_push(v, c->lport, c->pport, VSOCK_OP_CREDIT_REQUEST, 0);
                    any = true;
                }
                continue;
            }
            if (!rx_get(v))
                return;
            uint32_t room = v->rx_chain.write_len - VSOCK_HDR_SIZE;
            uint32_t n = cr < room ? cr : room;
            if (n > VSOCK_MAX_PKT_LEN)
                n = VSOCK_MAX_PKT_LEN;
            if (n == 0)
                continue;
            ssize_t got = recv(c->fd, v->buf + VSOCK_HDR_SIZE, n, MSG_DONTWAIT);
            if (got < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                    c->readable = false;
                else
                    conn_reset(v, c);
                any = true;
                continue;
            }
            if (got == 0) {
                on_host_eof(v, c);
                any = true;
                continue;
            }
            struct vsock_hdr h;
            fill_hdr(v, c, &h, c->lport, c->pport, VSOCK_OP_RW, 0, (uint32_t)got);
            c->tx_cnt = vsock_cnt_add(c->tx_cnt, (uint32_t)got);
            atomic_fetch_add(&v->st_rx, (uint64_t)got);
            rx_send(v, &h);
            any = true;
        }
        if (!any && !v->ctrl_n)
            return;
    }
}

/* ---- guest -> host ---- */

static void maybe_credit_update(struct vsock_dev *v, struct conn *c)
{
    if ((uint32_t)(c->fwd_cnt - c->fwd_cnt_sent) >= VSOCK_BUF_ALLOC / 4)
        ctrl_push(v, c->lport, c->pport, VSOCK_OP_CREDIT_UPDATE, 0);
}

static void flush_pend(struct vsock_dev *v, struct conn *c)
{
    while (c->pend_len) {
        ssize_t w = send(c->fd, c->pend + c->pend_off, c->pend_len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return;
            conn_reset(v, c);
            return;
        }
        c->pend_off += (size_t)w;
        c->pend_len -= (size_t)w;
        c->fwd_cnt = vsock_cnt_add(c->fwd_cnt, (uint32_t)w);
    }
    c->pend_off = 0;
    maybe_credit_update(v, c);
    if (c->peer_shut_send && !c->wr_shut) {
        shutdown(c->fd, SHUT_WR);
        c->wr_shut = true;
    }
}

static void guest_data(struct vsock_dev *v, struct conn *c, const uint8_t *p, uint32_t len)
{
    c->rx_cnt = vsock_cnt_add(c->rx_cnt, len);
    atomic_fetch_add(&v->st_tx, len);
    if (c->peer_shut_send) {
        conn_reset(v, c);
        return;
    }
    if (!c->pend_len) {
        while (len) {
            ssize_t w = send(c->fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (w < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK)
                    break;
                if (errno == EINTR)
                    continue;
                conn_reset(v, c);
                return;
            }
            p += w;
            len -= (uint32_t)w;
            c->fwd_cnt = vsock_cnt_add(c->fwd_cnt, (uint32_t)w);
        }
    }
    if (len) {
        if (!c->pend && !(c->pend = malloc(VSOCK_BUF_ALLOC))) {
            conn_reset(v, c);
            return;
        }
        if (c->pend_len + len > VSOCK_BUF_ALLOC) {     /* beyond the credit we gave */
            if (log_limit_ok(&v->rl))
                log_warn("%s: guest port %u overran its credit: reset", v->name, c->pport);
            conn_reset(v, c);
            return;
        }
        if (c->pend_off + c->pend_len + len > VSOCK_BUF_ALLOC) {
            memmove(c->pend, c->pend + c->pend_off, c->pend_len);
            c->pend_off = 0;
        }
        memcpy(c->pend + c->pend_off + c->pend_len, p, len);
        c->pend_len += len;
    }
    maybe_credit_update(v, c);
}

static void guest_connect(struct vsock_dev *v, const struct vsock_hdr *h)
{
    if (v->nconns >= VSOCK_MAX_CONNS)
        goto rst;
    int fd = connector_connect(v, h->dst_port);
    if (fd < 0)
        goto rst;
    struct conn *c = conn_new(v, fd);
    if (!c) {
        close(fd);
        goto rst;
    }
    c->st = C_EST;
    c->lport = h->dst_port;
    c->pport = h->src_port;
    c->peer_buf_alloc = h->buf_alloc;
    c->peer_fwd_cnt = h->fwd_cnt;
    atomic_fetch_add(&v->st_gconn, 1);
    ctrl_push(v, c->lport, c->pport, VSOCK_OP_RESPONSE, 0);
    return;
rst:
    ctrl_push(v, h->dst_port, h->src_port, VSOCK_OP_RST, 0);
}

static void guest_pkt(struct vsock_dev *v, const struct vsock_hdr *h, const uint8_t *payload)
{
    log_debug("%s: guest op %u %u -> %u len %u", v->name, h->op, h->src_port, h->dst_port, h->len);
    struct conn *c = conn_find(v, h->dst_port, h->src_port);
    if (!c) {
        if (h->op == VSOCK_OP_REQUEST)
            guest_connect(v, h);
        else if (h->op != VSOCK_OP_RST)
            ctrl_push(v, h->dst_port, h->src_port, VSOCK_OP_RST, 0);
        return;
    }
    touch(v, c);        /* credit, state, pending bytes: its interest may change */
    c->peer_buf_alloc = h->buf_alloc;
    c->peer_fwd_cnt = h->fwd_cnt;
    if (peer_credit(c))
        c->credit_req_sent = false;
    if (c->st == C_AWAIT) {
        if (h->op == VSOCK_OP_RESPONSE) {
            char ok[32];
            int n = vsock_ok_line(c->lport, ok, sizeof ok);
            if (n < 0 || send(c->fd, ok, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL) != n) {
                conn_reset(v, c);
                return;
            }
            c->st = C_EST;
            atomic_fetch_add(&v->st_hconn, 1);
            /* bytes pipelined after the CONNECT line wait in the socket */
            c->readable = true;
        } else if (h->op == VSOCK_OP_RST) {
            conn_free(v, c);
        } else {
            conn_reset(v, c);
        }
        return;
    }
    switch (h->op) {
    case VSOCK_OP_RW:
        guest_data(v, c, payload, h->len);
        break;
    case VSOCK_OP_RST:
        conn_free(v, c);
        break;
    case VSOCK_OP_SHUTDOWN:
        if (h->flags & VSOCK_SHUTDOWN_RCV)
            c->peer_shut_rcv = true;
        if (h->flags & VSOCK_SHUTDOWN_SEND)
            c->peer_shut_send = true;
        if (c->peer_shut_rcv && c->peer_shut_send) {
            conn_reset(v, c);   /* the guest waits for our RST to finish closing */
            return;
        }
        if (c->peer_shut_send && !c->pend_len && !c->wr_shut) {
            shutdown(c->fd, SHUT_WR);
            c->wr_shut = true;
        }
        break;
    case VSOCK_OP_CREDIT_REQUEST:
        ctrl_push(v, c->lport, c->pport, VSOCK_OP_CREDIT_UPDATE, 0);
        break;
    case VSOCK_OP_CREDIT_UPDATE:
        break;
    case VSOCK_OP_REQUEST:      /* already connected */
    case VSOCK_OP_RESPONSE:
    default:
        conn_reset(v, c);
        break;
    }
}

static void tx_process(struct vsock_dev *v)
{
    struct virtq *q = &v->env.queues[Q_TX];
    for (;;) {
        while (!v->vq.broken[Q_TX]) {
            struct virtq_chain ch = { .seg = v->tx_seg, .max_seg = CHAIN_MAX };
            int r = virtq_pop(q, v->env.mem, &ch);
            if (r == 0)
                break;
            if (r == -EIO) {
                vqueues_broken(&v->vq, Q_TX, virtq_strerror(ch.err));
                return;
            }
            if (r < 0) {
                atomic_fetch_add(&v->st_bad, 1);
                vqueues_push(&v->vq, Q_TX, ch.head, 0);
                continue;
            }
            long rn = virtq_chain_read(v->env.mem, &ch, 0, v->buf, sizeof v->buf);
            uint32_t n = rn < 0 ? 0 : (uint32_t)rn;   /* not RAM: a bad packet */
            struct vsock_hdr h;
            enum vsock_pkt_err e;
            if (vsock_pkt_parse(v->buf, n, v->cid, &h, &e) < 0) {
                atomic_fetch_add(&v->st_bad, 1);
                if (log_limit_ok(&v->rl))
                    log_warn("%s: bad packet: %s", v->name, vsock_pkt_strerror(e));
                /* answer a well-addressed packet of another type with RST */
                if (e == VSOCK_E_TYPE && h.op != VSOCK_OP_RST)
                    ctrl_push(v, h.dst_port, h.src_port, VSOCK_OP_RST, 0);
            } else {
                guest_pkt(v, &h, v->buf + VSOCK_HDR_SIZE);
            }
            vqueues_push(&v->vq, Q_TX, ch.head, 0);
        }
        if (v->vq.broken[Q_TX])
            return;
        int n = virtq_enable_notify(q, v->env.mem);
        if (n == -EIO) {
            vqueues_broken(&v->vq, Q_TX, virtq_strerror(q->err));
            return;
        }
        if (n <= 0)
            return;
    }
}

/* ---- host clients ---- */

static void host_client(struct vsock_dev *v, int fd)
{
    atomic_fetch_add(&v->st_acc, 1);
    log_debug("%s: host client accepted", v->name);
    struct conn *c = conn_new(v, fd);
    if (!c) {
        if (log_limit_ok(&v->rl))
            log_warn("%s: %d connections: refusing a host client", v->name, VSOCK_MAX_CONNS);
        close(fd);
        return;
    }
    c->st = C_LINE;
    conn_deadline(v, c, clock_mono_ns() + VSOCK_CONNECT_TIMEOUT_MS * 1000000ull);
}

/* Only moat's own user (or root) may use the socket. */
static bool peer_allowed(const struct vsock_dev *v, int fd)
{
    struct ucred cr;
    socklen_t cl = sizeof cr;
    return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0 && cl == sizeof cr &&
           (cr.uid == v->euid || cr.uid == 0);
}

static void host_accept(struct vsock_dev *v)
{
    for (;;) {
        int fd = accept4(v->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        if (!peer_allowed(v, fd)) {
            atomic_fetch_add(&v->st_refused, 1);
            if (log_limit_ok(&v->rl))
                log_warn("%s: refusing a host client of another user", v->name);
            close(fd);
            continue;
        }
        host_client(v, fd);
    }
}

/* Internal clients (vsock_open_internal): like accepted ones, not gated;
 * but only once the driver has handled the TRANSPORT_RESET (a connection
 * made before would be reset by it, silently for the host). */
static void take_injected(struct vsock_dev *v)
{
    if (v->reset_pending || v->reset_wait)
        return;
    pthread_mutex_lock(&v->inj_lock);
    for (unsigned i = 0; i < v->inj_n; i++)
        host_client(v, v->inj_fd[i]);
    v->inj_n = 0;
    pthread_mutex_unlock(&v->inj_lock);
}

/* After a restore: tell the driver its connections are gone
 * (VIRTIO_VSOCK_EVENT_TRANSPORT_RESET, le32 id 0, on the event queue). If
 * no event buffer is available yet, a kick of queue 2 retries. */
static void deliver_reset(struct vsock_dev *v)
{
    if (!v->reset_pending || v->vq.broken[Q_EV])
        return;
    struct virtq *q = &v->env.queues[Q_EV];
    for (;;) {
        struct virtq_chain ch = { .seg = v->ev_seg, .max_seg = CHAIN_MAX };
        int r = virtq_pop(q, v->env.mem, &ch);
        if (r == 1) {
            static const uint8_t ev[4] = { 0, 0, 0, 0 };
            if (ch.write_len >= sizeof ev && virtq_chain_write(v->env.mem, &ch, 0, ev, sizeof ev) == 0) {
                vqueues_push(&v->vq, Q_EV, ch.head, sizeof ev);
                v->reset_pending = false;
                /* Linux handles the event, then gives the buffer back
                 * (a new available entry): that is the acknowledgement. */
                v->reset_wait = true;
                v->reset_deadline_ns = clock_mono_ns() + VSOCK_RESET_ACK_MS * 1000000ull;
                /* the driver may not kick after its refill: look every 10 ms */
                evloop_timer_arm(v->loop, &v->ack_timer, clock_mono_ns() + 10 * 1000000ull);
                int left = virtq_enable_notify(q, v->env.mem);
                v->ev_left = left < 0 ? 0 : left;
                log_debug("%s: transport reset sent to the guest", v->name);
                return;
            }
            vqueues_push(&v->vq, Q_EV, ch.head, 0);
            continue;
        }
        if (r == -EIO) {
            vqueues_broken(&v->vq, Q_EV, virtq_strerror(ch.err));
            return;
        }
        if (r < 0) {
            vqueues_push(&v->vq, Q_EV, ch.head, 0);
            continue;
        }
        int n = virtq_enable_notify(q, v->env.mem);
        if (n == -EIO) {
            vqueues_broken(&v->vq, Q_EV, virtq_strerror(q->err));
            return;
        }
        if (n <= 0)
            return;
    }
}

/* Read the CONNECT line one byte at a time: never past the '\n'. */
static void host_line(struct vsock_dev *v, struct conn *c)
{
    for (;;) {
        if (c->line_len >= sizeof c->line) {
            conn_free(v, c);
            return;
        }
        ssize_t r = recv(c->fd, c->line + c->line_len, 1, MSG_DONTWAIT);
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        if (r <= 0) {
            conn_free(v, c);
            return;
        }
        c->line_len++;
        uint32_t port;
        int p = vsock_connect_parse(c->line, c->line_len, &port);
        if (p < 0) {
            conn_free(v, c);
            return;
        }
        if (p > 0) {
            c->pport = port;
            c->lport = alloc_lport(v);
            c->st = C_AWAIT;
            conn_deadline(v, c, clock_mono_ns() + VSOCK_CONNECT_TIMEOUT_MS * 1000000ull);
            log_debug("%s: host client: CONNECT %u (host port %u)", v->name, port, c->lport);
            ctrl_push(v, c->lport, c->pport, VSOCK_OP_REQUEST, 0);
            return;
        }
    }
}

/* ---- the I/O thread ---- */

/* Has the driver handled the TRANSPORT_RESET (its event buffer came back),
 * or did we wait long enough? Then serve the internal clients. */
static void check_reset_ack(struct vsock_dev *v)
{
    if (!v->reset_wait)
        return;
    int n = virtq_pending(&v->env.queues[Q_EV], v->env.mem);
    if (n < 0 || n > v->ev_left || clock_mono_ns() >= v->reset_deadline_ns) {
        if (n >= 0 && n <= v->ev_left)
            log_debug("%s: no acknowledgement of the transport reset: going on", v->name);
        v->reset_wait = false;
        evloop_timer_cancel(v->loop, &v->ack_timer);
        take_injected(v);
    }
}

/* While reset_wait (armed by deliver_reset). */
static void on_ack_timer(void *opaque)
{
    struct vsock_dev *v = opaque;
    check_reset_ack(v);
    if (v->reset_wait)
        evloop_timer_arm(v->loop, &v->ack_timer, clock_mono_ns() + 10 * 1000000ull);
}

/* Reset the connections whose CONNECT line or answer is overdue; wait for
 * the next deadline. */
static void on_conn_timer(void *opaque)
{
    struct vsock_dev *v = opaque;
    uint64_t now = clock_mono_ns(), next = UINT64_MAX;
    for (unsigned i = 0; i < VSOCK_MAX_CONNS; i++) {
        struct conn *c = &v->conns[i];
        if (c->st != C_LINE && c->st != C_AWAIT)
            continue;
        if (c->deadline_ns <= now)
            conn_reset(v, c);       /* its RST goes out at the end of the pass */
        else if (c->deadline_ns < next)
            next = c->deadline_ns;
    }
    if (next != UINT64_MAX)
        evloop_timer_arm(v->loop, &v->conn_timer, next);
}

/* Reset a kick or wake eventfd the loop found readable: one non-blocking
 * read takes the whole counter (kick fds may be blocking or not). */
static void take_fd(struct vsock_dev *v, int fd)
{
    uint64_t x;
    int r = evloop_eventfd_take(fd, &x);
    if (r < 0)
        log_debug("%s: eventfd read: %s", v->name, strerror(-r));
}

static void on_wake(void *opaque, int fd, uint32_t events)
{
    (void)events;
    struct vsock_dev *v = opaque;
    take_fd(v, fd);
    take_injected(v);
}

static void on_kick_rx(void *opaque, int fd, uint32_t events)
{
    (void)events;
    take_fd(opaque, fd);    /* new RX buffers: rx_pump at the end of the pass */
}

static void on_kick_tx(void *opaque, int fd, uint32_t events)
{
    (void)events;
    take_fd(opaque, fd);
    tx_process(opaque);
}

static void on_kick_ev(void *opaque, int fd, uint32_t events)
{
    (void)events;
    struct vsock_dev *v = opaque;
    take_fd(v, fd);
    deliver_reset(v);
    check_reset_ack(v);
}

static void on_listen(void *opaque, int fd, uint32_t events)
{
    (void)fd; (void)events;
    host_accept(opaque);
}

static void on_conn(void *opaque, int fd, uint32_t events)
{
    (void)fd;
    struct conn *c = opaque;
    struct vsock_dev *v = c->dev;
    touch(v, c);
    if (c->st == C_LINE) {
        host_line(v, c);
        return;
    }
    if (c->st != C_EST)
        return;
    if (events & EVLOOP_ERR) {
        conn_reset(v, c);
        return;
    }
    if (events & EVLOOP_OUT)
        flush_pend(v, c);
    if (c->st == C_EST && (events & (EVLOOP_IN | EVLOOP_HUP)))
        c->readable = true;
}

/* What the loop waits for on c's fd. A connection with unread bytes
 * (readable) is not watched for more: rx_pump reads it when the guest has
 * RX buffers and credit, and marks it unreadable once drained. So a guest
 * that gives no RX buffers stops our reading of the host sockets, and each
 * connection wakes the thread once, not in a loop. */
static uint32_t conn_want(const struct conn *c)
{
    switch (c->st) {
    case C_LINE:
        return EVLOOP_IN;
    case C_EST: {
        uint32_t ev = 0;
        if (!c->readable && !c->host_eof && !c->peer_shut_rcv && peer_credit(c))
            ev |= EVLOOP_IN;
        if (c->pend_len)
            ev |= EVLOOP_OUT;
        return ev;
    }
    default:
        return 0;           /* C_AWAIT: its deadline or the guest's answer */
    }
}

/* Bring the interest of the connections touched in this pass, and of the
 * listening socket, up to date (no system call where nothing changed). */
static void sync_conns(struct vsock_dev *v)
{
    for (unsigned k = 0; k < v->ndirty; k++) {
        unsigned i = v->dirty[k];
        struct conn *c = &v->conns[i];
        v->is_dirty[i] = false;
        if (c->st == C_FREE)
            continue;
        int r = evloop_mod(v->loop, c->fd, conn_want(c));
        if (r < 0) {
            if (log_limit_ok(&v->rl))
                log_warn("%s: event loop: %s: connection reset", v->name, strerror(-r));
            conn_reset(v, c);
        }
    }
    v->ndirty = 0;
    /* host clients wait in the backlog while gated or when full */
    bool accept_more = v->nconns < VSOCK_MAX_CONNS && !atomic_load(&v->gated);
    evloop_mod(v->loop, v->listen_fd, accept_more ? EVLOOP_IN : 0);
}

/* After every pass: what the callbacks queued goes to the guest. */
static void pass_end(struct vsock_dev *v)
{
    check_reset_ack(v);
    rx_pump(v);
    vqueues_publish(&v->vq, NULL);
    sync_conns(v);
    if (v->ctrl_n)          /* RSTs of connections sync_conns gave up on */
        rx_pump(v), vqueues_publish(&v->vq, NULL);
}

static void *io_thread(void *arg)
{
    struct vsock_dev *v = arg;
    if (sc_install(SC_VSOCK, (enum sc_mode)v->env.seccomp) < 0) {
        log_err("%s: seccomp filter failed: device stopped", v->name);
        return NULL;
    }
    log_debug("%s: I/O thread running (guest CID %llu, %s)", v->name, (unsigned long long)v->cid, v->path);
    /* picks up what arrived while stopped */
    deliver_reset(v);
    take_injected(v);
    tx_process(v);
    pass_end(v);
    for (;;) {
        int r = evloop_run_once(v->loop, -1);
        if (r > 0)
            break;
        if (r < 0) {
            log_err("%s: epoll_wait: %s: device stopped", v->name, strerror(-r));
            break;
        }
        pass_end(v);
    }
    return NULL;
}

/* ---- lifecycle ---- */

static void kicks_del(struct vsock_dev *v)
{
    for (unsigned q = 0; q < NQUEUES; q++)
        if (v->env.kick_fd[q] >= 0)
            evloop_del(v->loop, v->env.kick_fd[q]);
}

static int vs_start(void *dev, const struct virtio_dev_env *env)
{
    struct vsock_dev *v = dev;
    if (v->running)
        return -EALREADY;
    if (!env || !env->mem || !env->queues || env->nqueues != NQUEUES || !env->notify_used)
        return -EINVAL;
    v->env = *env;
    vqueues_init(&v->vq, &v->env, v->name);
    v->rx_have = false;     /* a held chain was given back at stop */
    /* The transport's kick fds (a vhost-user frontend keeps the event
     * queue: -1), blocking or not. */
    static const evloop_fd_fn kick_fn[NQUEUES] = { on_kick_rx, on_kick_tx, on_kick_ev };
    int r = 0;
    unsigned q;
    for (q = 0; q < NQUEUES && r == 0; q++)
        if (v->env.kick_fd[q] >= 0)
            r = evloop_add(v->loop, v->env.kick_fd[q], EVLOOP_IN, kick_fn[q], v);
    if (r < 0) {
        log_err("%s: kick fd of queue %u: %s", v->name, q - 1, strerror(-r));
        while (--q > 0)
            if (v->env.kick_fd[q - 1] >= 0)
                evloop_del(v->loop, v->env.kick_fd[q - 1]);
        return r;
    }
    evloop_clear_stop(v->loop);     /* a stop the thread did not see (it failed) */
    r = pthread_create(&v->thread, NULL, io_thread, v);
    if (r) {
        log_err("%s: starting the I/O thread: %s", v->name, strerror(r));
        kicks_del(v);
        return -r;
    }
    v->running = true;
    return 0;
}

static void vs_stop(void *dev)
{
    struct vsock_dev *v = dev;
    if (!v->running)
        return;
    evloop_stop(v->loop);
    pthread_join(v->thread, NULL);
    v->running = false;
    kicks_del(v);           /* the transport may close them before the next start */
    if (v->rx_have) {       /* give the held RX buffer back, unused */
        vqueues_push(&v->vq, Q_RX, v->rx_chain.head, 0);
        v->rx_have = false;
    }
    vqueues_publish(&v->vq, NULL);
}

static void vs_reset(void *dev)
{
    struct vsock_dev *v = dev;
    vs_stop(v);
    for (unsigned i = 0; i < VSOCK_MAX_CONNS; i++)
        conn_free(v, &v->conns[i]);
    /* host clients still in the backlog were waiting for the guest that
     * went away: they see their connection closed, as those accepted */
    for (int fd; (fd = accept4(v->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0;)
        close(fd);
    pthread_mutex_lock(&v->inj_lock);
    for (unsigned i = 0; i < v->inj_n; i++)
        close(v->inj_fd[i]);
    v->inj_n = 0;
    pthread_mutex_unlock(&v->inj_lock);
    v->ctrl_head = v->ctrl_n = 0;
    v->rx_have = false;
    atomic_store(&v->gated, false);
    v->reset_pending = v->reset_wait = false;
    v->ev_left = 0;
    evloop_timer_cancel(v->loop, &v->conn_timer);
    evloop_timer_cancel(v->loop, &v->ack_timer);
    take_fd(v, v->wake_fd);
}

static void vs_destroy(void *dev)
{
    struct vsock_dev *v = dev;
    if (!v)
        return;
    vs_stop(v);
    connector_stop(v);
    for (unsigned i = 0; i < VSOCK_MAX_CONNS; i++)
        conn_free(v, &v->conns[i]);
    evloop_destroy(v->loop);
    close(v->listen_fd);
    unlink(v->path);
    for (unsigned i = 0; i < v->inj_n; i++)
        close(v->inj_fd[i]);
    close(v->wake_fd);
    pthread_mutex_destroy(&v->inj_lock);
    free(v);
}

const struct virtio_dev_ops vsock_ops = {
    .name = "vsock",
    .device_id = VIRTIO_ID_VSOCK,
    .nqueues = NQUEUES,
    .queue_max = VSOCK_QUEUE_MAX,
    .features = vs_features,
    .config_read = vs_config_read,
    .config_write = vs_config_write,
    .config_size = vs_config_size,
    .start = vs_start,
    .stop = vs_stop,
    .reset = vs_reset,
    .destroy = vs_destroy,
};
