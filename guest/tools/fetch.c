/* moat-fetch: the default guest's HTTP/1.1 client (docs/guest.md,
 * "Network"). Static, with no glibc NSS: names are looked up in
 * /etc/hosts, then by one DNS query over UDP to the first IPv4 name server
 * of /etc/resolv.conf. Installed as /bin/moat-fetch (busybox's wget stays
 * /usr/bin/wget).
 *
 *   moat-fetch [-q] [-O FILE] [-T SECONDS] URL
 *
 * -O FILE: write the body to FILE ("-": stdout; default: the last part of
 * the URL's path, or index.html); -q: say nothing on success; -T: give up
 * on a connect, a DNS answer or a read after SECONDS (default 30) without
 * progress. Plain http only (https: there is no TLS here). Follows up to 5
 * redirects (301, 302, 303, 307, 308). Bodies: Content-Length, chunked, or
 * up to the connection's close.
 *
 * Exit status: 0 done; 1 usage, bad URL or local I/O error; 4 network
 * failure (name lookup, connect, timeout, connection closed early, a
 * malformed response); 8 the server answered with status >= 400. On
 * failure a file named by -O (not stdout) is removed, so a partial body
 * is never left behind as if it were whole. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fetch_parse.h"

#define EX_USAGE    1
#define EX_NET      4
#define EX_HTTP     8
#define MAX_REDIR   5

struct fetch {
    int timeout_ms;
    int quiet;
    const char *out_name;       /* NULL until the first response */
    int out_fd;
    int out_created;
    uint64_t bytes;
};

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;

    fputs("moat-fetch: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static int read_file(const char *path, char *buf, size_t cap, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n;

    *len = 0;
    if (fd < 0)
        return -errno;
    while (*len < cap && (n = read(fd, buf + *len, cap - *len)) > 0)
        *len += (size_t)n;
    close(fd);
    return 0;
}

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint16_t random_id(void)
{
    uint16_t id;

    if (getrandom(&id, sizeof(id), GRND_NONBLOCK) != sizeof(id))
        id = (uint16_t)(time(NULL) ^ getpid());
    return id;
}

/* One A query to NS, 3 tries of timeout/3 each. */
static int dns_lookup(const struct fetch *f, uint32_t ns, const char *name, uint32_t *addr)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(53),
                              .sin_addr.s_addr = htonl(ns) };
    uint8_t q[512], a[1500];
    uint16_t id = random_id();
    int qlen = fetch_dns_query(q, sizeof(q), id, name), r = -ETIMEDOUT;
    int s, wait_ms = f->timeout_ms / 3 > 0 ? f->timeout_ms / 3 : 1;

    if (qlen < 0)
        return qlen;
    s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -errno;
    /* Connected: only datagrams from the server's address and port arrive. */
    if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        r = -errno;
        close(s);
        return r;
    }
    for (int t = 0; t < 3 && r == -ETIMEDOUT; t++) {
        struct pollfd p = { .fd = s, .events = POLLIN };
        int64_t end = now_ms() + wait_ms;

        if (send(s, q, (size_t)qlen, 0) != qlen) {
            r = -errno;
            break;
        }
        /* One deadline per try: stray datagrams do not extend it. */
        while (now_ms() < end && poll(&p, 1, (int)(end - now_ms())) == 1) {
            ssize_t n = recv(s, a, sizeof(a), 0);

            if (n < 0) {
                r = -errno;         /* ECONNREFUSED: no server there */
                break;
            }
            r = fetch_dns_answer(a, (size_t)n, id, name, addr);
            if (r != -EINVAL)
                break;              /* a stray datagram: keep waiting */
            r = -ETIMEDOUT;
        }
    }
    close(s);
    return r;
}

static int resolve(const struct fetch *f, const char *host, uint32_t *addr)
{
    static char text[65536];
    size_t len;
    uint32_t ns;
    int r;

    if (fetch_ipv4(host, addr))
        return 0;
    if (read_file("/etc/hosts", text, sizeof(text), &len) == 0 &&
        fetch_hosts_lookup(text, len, host, addr) == 0)
        return 0;
    if (read_file("/etc/resolv.conf", text, sizeof(text), &len) != 0 ||
        fetch_resolv_ns(text, len, &ns) != 0) {
        say("%s: not in /etc/hosts and no name server in /etc/resolv.conf", host);
        return -ENOENT;
    }
    r = dns_lookup(f, ns, host, addr);
    if (r == -ENOENT)
        say("%s: no such host (no A record)", host);
    else if (r < 0)
        say("%s: DNS lookup failed: %s", host, strerror(-r));
    return r;
}

static int wait_fd(int fd, short ev, int ms)
{
    struct pollfd p = { .fd = fd, .events = ev };
    int r;

    do {
        r = poll(&p, 1, ms);
    } while (r < 0 && errno == EINTR);
    if (r < 0)
        return -errno;
    return r == 0 ? -ETIMEDOUT : 0;
}

static int tcp_connect(const struct fetch *f, uint32_t addr, uint16_t port)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port),
                              .sin_addr.s_addr = htonl(addr) };
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), r, err;
    socklen_t el = sizeof(err);

    if (s < 0)
        return -errno;
    if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        if (errno != EINPROGRESS) {
            r = -errno;
            goto fail;
        }
        r = wait_fd(s, POLLOUT, f->timeout_ms);
        if (r < 0)
            goto fail;
        if (getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err) {
            r = err ? -err : -errno;
            goto fail;
        }
    }
    return s;
fail:
    close(s);
    return r;
}

static int send_all(const struct fetch *f, int s, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(s, p, n, MSG_NOSIGNAL);

        if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            int r = wait_fd(s, POLLOUT, f->timeout_ms);

            if (r < 0)
                return r;
            continue;
        }
        if (w < 0)
            return -errno;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Up to CAP bytes; 0 at the end of the stream. */
static ssize_t recv_some(const struct fetch *f, int s, void *buf, size_t cap)
{
    for (;;) {
        ssize_t n = recv(s, buf, cap, 0);
        int r;

        if (n >= 0)
            return n;
        if (errno != EAGAIN && errno != EINTR)
            return -errno;
        r = wait_fd(s, POLLIN, f->timeout_ms);
        if (r < 0)
            return r;
    }
}

static const char *default_name(const struct fetch_url *u)
{
    static char name[256];
    size_t q = strcspn(u->path, "?"), b = q;

    while (b > 0 && u->path[b - 1] != '/')
        b--;
    if (q == b || q - b >= sizeof(name))
        return "index.html";
    memcpy(name, u->path + b, q - b);
    name[q - b] = 0;
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return "index.html";
    return name;
}

static int open_out(struct fetch *f, const struct fetch_url *u)
{
    if (!f->out_name)
        f->out_name = default_name(u);
    if (strcmp(f->out_name, "-") == 0) {
        f->out_fd = STDOUT_FILENO;
        return 0;
    }
    f->out_fd = open(f->out_name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f->out_fd < 0) {
        say("%s: %s", f->out_name, strerror(errno));
        return -errno;
    }
    f->out_created = 1;
    return 0;
}

static int write_out(struct fetch *f, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(f->out_fd, p, n);

        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            say("%s: %s", f->out_name, strerror(errno));
            return -errno;
        }
        p += w;
        n -= (size_t)w;
        f->bytes += (uint64_t)w;
    }
    return 0;
}

/* The body after the head: BUF[0..HAVE) already read, CAP its size.
 * EX_* on failure, 0 when complete. */
static int read_body(struct fetch *f, int s, const struct fetch_resp *r,
                     uint8_t *buf, size_t have, size_t cap)
{
    struct fetch_chunked ch = { 0 };
    uint64_t left = r->length >= 0 ? (uint64_t)r->length : UINT64_MAX;

    for (;;) {
        ssize_t n;

        if (r->chunked) {
            size_t used, out;
            int d = fetch_chunked_decode(&ch, buf, have, &used, &out);

            if (d < 0) {
                say("malformed chunked body");
                return EX_NET;
            }
            if (write_out(f, buf, out) < 0)
                return EX_USAGE;
            if (d == 1)
                return 0;
        } else {
            size_t k = (uint64_t)have < left ? have : (size_t)left;

            if (write_out(f, buf, k) < 0)
                return EX_USAGE;
            left -= k;
            if (left == 0)
                return 0;
        }
        n = recv_some(f, s, buf, cap);
        if (n < 0) {
            say("receiving: %s", strerror((int)-n));
            return EX_NET;
        }
        if (n == 0) {
            if (!r->chunked && r->length < 0)
                return 0;           /* the body ends with the connection */
            say("connection closed before the end of the body (%llu bytes)",
                (unsigned long long)f->bytes);
            return EX_NET;
        }
        have = (size_t)n;
    }
}

/* One request. 0 done, EX_* failed, or -1 with *NEXT set: redirected. */
static int get(struct fetch *f, const struct fetch_url *u, struct fetch_url *next)
{
    static uint8_t buf[65536];
    char req[FETCH_PATH_MAX + FETCH_HOST_MAX + 256], port[8];
    struct fetch_resp r;
    uint32_t addr;
    size_t have = 0;
    int s, n, rc, head;

    if (resolve(f, u->host, &addr) < 0)
        return EX_NET;
    s = tcp_connect(f, addr, u->port);
    if (s < 0) {
        say("%s:%u: connect: %s", u->host, u->port, strerror(-s));
        return EX_NET;
    }
    snprintf(port, sizeof(port), ":%u", u->port);
    n = snprintf(req, sizeof(req),
                 "GET %s HTTP/1.1\r\nHost: %s%s\r\nUser-Agent: moat-fetch\r\n"
                 "Accept: */*\r\nConnection: close\r\n\r\n",
                 u->path, u->host, u->port == 80 ? "" : port);
    rc = send_all(f, s, req, (size_t)n);
    if (rc < 0) {
        say("sending the request: %s", strerror(-rc));
        close(s);
        return EX_NET;
    }
    for (;;) {                      /* the head, after any 1xx heads */
        ssize_t k;

        head = fetch_resp_parse((const char *)buf, have, &r);
        if (head > 0 && r.status >= 200)
            break;
        if (head > 0) {             /* 1xx: another head follows */
            memmove(buf, buf + head, have - (size_t)head);
            have -= (size_t)head;
            continue;
        }
        if (head < 0) {
            say("malformed response head (%s)", strerror(-head));
            close(s);
            return EX_NET;
        }
        k = recv_some(f, s, buf + have, sizeof(buf) - have);
        if (k <= 0) {
            say("no response: %s", k == 0 ? "connection closed" : strerror((int)-k));
            close(s);
            return EX_NET;
        }
        have += (size_t)k;
    }
    if (r.status >= 300 && r.status < 400 && r.status != 304) {
        close(s);
        if (!r.location[0]) {
            say("server said %d without a Location", r.status);
            return EX_HTTP;
        }
        rc = fetch_url_redirect(u, r.location, next);
        if (rc < 0) {
            say("redirect to an unusable location: %s", r.location);
            return EX_NET;
        }
        return -1;
    }
    if (r.status >= 400) {
        say("server said %d", r.status);
        close(s);
        return EX_HTTP;
    }
    if (open_out(f, u) < 0) {
        close(s);
        return EX_USAGE;
    }
    have -= (size_t)head;
    memmove(buf, buf + head, have);
    if (r.status == 204 || r.status == 304)
        rc = 0;
    else
        rc = read_body(f, s, &r, buf, have, sizeof(buf));
    close(s);
    return rc;
}

static int usage(void)
{
    fprintf(stderr, "usage: moat-fetch [-q] [-O FILE] [-T SECONDS] URL\n");
    return EX_USAGE;
}

int main(int argc, char **argv)
{
    struct fetch f = { .timeout_ms = 30000, .out_fd = -1 };
    struct fetch_url u, next;
    int opt, rc;

    signal(SIGPIPE, SIG_IGN);
    while ((opt = getopt(argc, argv, "qO:T:")) != -1) {
        switch (opt) {
        case 'q':
            f.quiet = 1;
            break;
        case 'O':
            f.out_name = optarg;
            break;
        case 'T': {
            char *end;
            long t = strtol(optarg, &end, 10);

            if (*end || end == optarg || t < 1 || t > 86400)
                return usage();
            f.timeout_ms = (int)t * 1000;
            break;
        }
        default:
            return usage();
        }
    }
    if (optind != argc - 1)
        return usage();
    rc = fetch_url_parse(argv[optind], &u);
    if (rc < 0) {
        say("%s: %s", argv[optind], rc == -EPROTONOSUPPORT ?
            "only http:// URLs are supported" : "malformed URL");
        return EX_USAGE;
    }
    for (int hop = 0;; hop++) {
        rc = get(&f, &u, &next);
        if (rc != -1)
            break;
        if (hop == MAX_REDIR) {
            say("more than %d redirects", MAX_REDIR);
            rc = EX_NET;
            break;
        }
        u = next;
    }
    if (f.out_fd >= 0 && f.out_fd != STDOUT_FILENO && close(f.out_fd) != 0 && rc == 0) {
        say("%s: %s", f.out_name, strerror(errno));
        rc = EX_USAGE;
    }
    if (rc != 0 && f.out_created)
        unlink(f.out_name);
    else if (rc == 0 && !f.quiet)
        say("%s: %llu bytes", f.out_name, (unsigned long long)f.bytes);
    return rc;
}
