/* Guest-side helper for tests/vhost/net.sh: frames busybox cannot make.
 * Built static by the script and appended to the initramfs as
 * /bin/net-tool.
 *
 *   net-tool garbage IFACE N SEED
 *       send N malformed Ethernet frames on IFACE through a packet socket
 *       (deterministic from SEED), a mix of: random bytes with random
 *       ethertypes and lengths (14 .. 1514), runts (14 .. 33 bytes),
 *       ARP with bad lengths or truncated, IPv4 to the metadata address
 *       (169.254.169.254, which the device answers itself) with bad header
 *       lengths, total lengths, fragment bits and protocols, TCP to its
 *       port 80 with random flags but never a bare SYN (so no connection
 *       is opened), bad data offsets and random options, and IPv4 garbage
 *       to DST; then 4 SYNs with malformed TCP options (lengths 0, 1, past
 *       the header, an MSS of 0) and a RST for each, so the device's
 *       connection table is left as it was.
 *       Prints "sent S failed F".
 *   net-tool udp DST PORT N SIZE
 *       send N UDP datagrams of SIZE random bytes to DST:PORT as fast as
 *       the socket takes them. Prints "sent S failed F".
 *   net-tool fin-request DST PORT
 *       connect over TCP, send stdin (at most 64 KiB) corked and shut down
 *       the sending side at once, so that the request and the FIN leave in
 *       one segment; copy the answer to stdout until the peer closes (10 s
 *       without data: exit 1).
 * A frame or datagram the kernel will not take within 100 ms counts as
 * failed; after 50 failures the rest is not tried (a stuck link would
 * otherwise keep the guest busy for minutes).
 * Exit 0, or 1 with a message on stderr (bad arguments, no socket). */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static uint64_t rng;

static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static void fill(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)rnd();
}

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static void put32(uint8_t *p, uint32_t v) { put16(p, (uint16_t)(v >> 16)); put16(p + 2, (uint16_t)v); }

static const uint8_t BCAST[6] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
static const uint8_t MMDS_MAC[6] = { 0x06, 0x00, 0xa9, 0xfe, 0xa9, 0xfe };
#define MMDS_IP 0xa9fea9feu

struct out {
    int fd;
    int ifindex;
    uint8_t mac[6];
    unsigned sent, failed;
};

#define GIVE_UP 50             /* frames that could not be sent: the link is stuck */

static void send_frame(struct out *o, uint8_t *f, size_t len)
{
    if (o->failed >= GIVE_UP)
        return;
    struct sockaddr_ll a;
    memset(&a, 0, sizeof a);
    a.sll_family = AF_PACKET;
    a.sll_ifindex = o->ifindex;
    a.sll_halen = 6;
    memcpy(a.sll_addr, f, 6);
    for (int tries = 0; tries < 100; tries++) {
        if (sendto(o->fd, f, len, 0, (struct sockaddr *)&a, sizeof a) == (ssize_t)len) {
            o->sent++;
            return;
        }
        if (errno != ENOBUFS && errno != EAGAIN)
            break;
        usleep(1000);           /* the queue is full: let it drain */
    }
    o->failed++;                /* counted; after GIVE_UP of them nothing more is sent */
}

/* An Ethernet header: dst, our MAC, type. */
static void eth(struct out *o, uint8_t *f, const uint8_t *dst, uint16_t type)
{
    memcpy(f, dst, 6);
    memcpy(f + 6, o->mac, 6);
    put16(f + 12, type);
}

/* An IPv4 header at p (20 bytes, checksum left random or 0). */
static void ip4(uint8_t *p, uint16_t tot, uint8_t proto, uint32_t src, uint32_t dst)
{
    p[0] = 0x45;
    p[1] = 0;
    put16(p + 2, tot);
    put16(p + 4, (uint16_t)rnd());
    put16(p + 6, 0x4000);
    p[8] = 64;
    p[9] = proto;
    put16(p + 10, 0);
    put32(p + 12, src);
    put32(p + 16, dst);
}

static void garbage_one(struct out *o, uint32_t src, uint32_t dst)
{
    uint8_t f[1514];
    size_t len;
    switch (rnd() % 7) {
    case 0:                     /* random bytes, random type and length */
        len = 14 + rnd() % (sizeof f - 13);
        fill(f, len);
        eth(o, f, BCAST, (uint16_t)rnd());
        break;
    case 1:                     /* a runt */
        len = 14 + rnd() % 20;
        fill(f, len);
        eth(o, f, rnd() & 1 ? BCAST : MMDS_MAC, rnd() & 1 ? 0x0800 : 0x0806);
        break;
    case 2:                     /* ARP: bad lengths, truncated, or a request for the metadata address with junk */
        len = 14 + rnd() % 48;
        fill(f, len);
        eth(o, f, BCAST, 0x0806);
        if (len >= 42 && (rnd() & 1)) {
            put16(f + 14, 1);
            put16(f + 16, 0x0800);
            f[18] = (uint8_t)(rnd() & 1 ? 6 : rnd());
            f[19] = (uint8_t)(rnd() & 1 ? 4 : rnd());
            put16(f + 20, (uint16_t)(rnd() % 4));
            put32(f + 38, MMDS_IP);
        }
        break;
    case 3: {                   /* IPv4 to the metadata address, header fields wrong */
        len = 34 + rnd() % 200;
        fill(f, len);
        eth(o, f, MMDS_MAC, 0x0800);
        uint8_t *ip = f + 14;
        ip4(ip, (uint16_t)(len - 14), (uint8_t)(rnd() % 3 ? 6 : rnd()), src, MMDS_IP);
        switch (rnd() % 4) {
        case 0: ip[0] = (uint8_t)(0x40 | (rnd() & 15)); break;         /* any IHL */
        case 1: put16(ip + 2, (uint16_t)rnd()); break;                   /* any total length */
        case 2: put16(ip + 6, (uint16_t)(rnd() | 0x2000)); break;       /* a fragment */
        default: put16(ip + 2, (uint16_t)(rnd() % 40)); break;          /* shorter than the headers */
        }
        break;
    }
    case 4: {                   /* TCP to the metadata port: any flags but a bare SYN */
        size_t pay = rnd() % 300;
        len = 14 + 20 + 20 + pay;
        fill(f, len);
        eth(o, f, MMDS_MAC, 0x0800);
        ip4(f + 14, (uint16_t)(len - 14), 6, src, MMDS_IP);
        uint8_t *t = f + 34;
        put16(t, (uint16_t)(20000 + rnd() % 40000));
        put16(t + 2, rnd() % 4 ? 80 : (uint16_t)rnd());
        uint8_t fl = (uint8_t)rnd();
        if (fl & 0x02)
            fl = (uint8_t)((fl & ~0x02) | 0x10);      /* no SYN: ACK instead */
        t[13] = fl;
        t[12] = (uint8_t)(rnd() % 3 ? 0x50 : (rnd() & 0xf0));
        break;
    }
    case 5: {                   /* IPv4 garbage to the peer */
        len = 34 + rnd() % 1400;
        fill(f, len);
        eth(o, f, BCAST, 0x0800);
        ip4(f + 14, (uint16_t)rnd(), (uint8_t)rnd(), src, dst);
        f[14] = (uint8_t)(0x40 | (rnd() & 15));
        break;
    }
    default:                    /* full-size frames of junk to the metadata MAC */
        len = sizeof f;
        fill(f, len);
        eth(o, f, MMDS_MAC, (uint16_t)rnd());
        break;
    }
    send_frame(o, f, len);
}

/* SYNs with malformed options, then a RST each (the connections go). */
static void bad_syns(struct out *o, uint32_t src)
{
    static const uint8_t opts[4][8] = {
        { 2, 0, 0, 0, 0, 0, 0, 0 },         /* option length 0 */
        { 2, 1, 0, 0, 0, 0, 0, 0 },         /* length 1 */
        { 1, 1, 1, 1, 1, 1, 2, 40 },        /* length past the header */
        { 2, 4, 0, 0, 0, 0, 0, 0 },         /* MSS 0 */
    };
    for (int pass = 0; pass < 2; pass++) {
        for (unsigned k = 0; k < 4; k++) {
            uint8_t f[14 + 20 + 28];
            memset(f, 0, sizeof f);
            eth(o, f, MMDS_MAC, 0x0800);
            ip4(f + 14, 20 + 28, 6, src, MMDS_IP);
            uint8_t *t = f + 34;
            put16(t, (uint16_t)(61000 + k));
            put16(t + 2, 80);
            put32(t + 4, 1000 + k);
            t[12] = 7 << 4;
            t[13] = pass == 0 ? 0x02 : 0x04;        /* SYN, then RST */
            put16(t + 14, 1000);
            memcpy(t + 20, opts[k], 8);
            send_frame(o, f, sizeof f);
        }
        usleep(20000);
    }
}

static int usage(void)
{
    fprintf(stderr, "usage: net-tool garbage IFACE N SEED | net-tool udp DST PORT N SIZE | "
                    "net-tool fin-request DST PORT\n");
    return 1;
}

static int do_garbage(const char *ifname, unsigned n, unsigned long seed)
{
    struct out o;
    memset(&o, 0, sizeof o);
    rng = seed * 2654435761u + 88172645463325252ull;
    o.ifindex = (int)if_nametoindex(ifname);
    if (!o.ifindex) {
        perror("net-tool: interface");
        return 1;
    }
    o.fd = socket(AF_PACKET, SOCK_RAW, 0);     /* protocol 0: sends only */
    if (o.fd < 0) {
        perror("net-tool: packet socket");
        return 1;
    }
    char path[64];
    snprintf(path, sizeof path, "/sys/class/net/%s/address", ifname);
    FILE *fm = fopen(path, "r");
    unsigned m[6];
    if (!fm || fscanf(fm, "%x:%x:%x:%x:%x:%x", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5]) != 6) {
        fprintf(stderr, "net-tool: cannot read %s\n", path);
        return 1;
    }
    fclose(fm);
    for (int i = 0; i < 6; i++)
        o.mac[i] = (uint8_t)m[i];
    uint32_t src = 0x0a590002u, dst = 0x0a590001u;     /* 10.89.0.2 -> 10.89.0.1 */
    for (unsigned i = 0; i < n; i++)
        garbage_one(&o, src, dst);
    bad_syns(&o, src);
    close(o.fd);
    printf("sent %u failed %u\n", o.sent, o.failed);
    return 0;
}

static int do_udp(const char *dst, unsigned port, unsigned n, unsigned size)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, dst, &a.sin_addr) != 1 || size > 65507)
        return usage();
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0) {
        perror("net-tool: udp socket");
        return 1;
    }
    static uint8_t buf[65507];
    rng = 12345;
    fill(buf, size);
    unsigned sent = 0, failed = 0;
    for (unsigned i = 0; i < n && failed < GIVE_UP; i++) {
        int ok = 0;
        for (int tries = 0; tries < 100 && !ok; tries++) {
            if (sendto(fd, buf, size, 0, (struct sockaddr *)&a, sizeof a) == (ssize_t)size)
                ok = 1;
            else if (errno == ENOBUFS || errno == EAGAIN)
                usleep(1000);
            else
                break;
        }
        if (ok)
            sent++;
        else
            failed++;
    }
    close(fd);
    printf("sent %u failed %u\n", sent, failed);
    return 0;
}

static int do_fin_request(const char *dst, unsigned port)
{
    static uint8_t req[65536], buf[65536];
    size_t n = 0;
    ssize_t k;
    while (n < sizeof req && (k = read(0, req + n, sizeof req - n)) > 0)
        n += (size_t)k;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, dst, &a.sin_addr) != 1)
        return usage();
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct timeval tv = { 10, 0 };
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0) {
        perror("net-tool: tcp socket");
        return 1;
    }
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        perror("net-tool: connect");
        return 1;
    }
    /* corked: the bytes wait in the socket; the shutdown sends them with
     * the FIN flag on their segment */
    if (setsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, sizeof one) < 0 || write(fd, req, n) != (ssize_t)n ||
        shutdown(fd, SHUT_WR) < 0) {
        perror("net-tool: send");
        return 1;
    }
    while ((k = read(fd, buf, sizeof buf)) > 0)
        if (write(1, buf, (size_t)k) != k)
            return 1;
    if (k < 0) {
        perror("net-tool: read");
        return 1;
    }
    close(fd);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "garbage"))
        return do_garbage(argv[2], (unsigned)strtoul(argv[3], NULL, 10), strtoul(argv[4], NULL, 10));
    if (argc == 6 && !strcmp(argv[1], "udp"))
        return do_udp(argv[2], (unsigned)strtoul(argv[3], NULL, 10), (unsigned)strtoul(argv[4], NULL, 10),
                      (unsigned)strtoul(argv[5], NULL, 10));
    if (argc == 4 && !strcmp(argv[1], "fin-request"))
        return do_fin_request(argv[2], (unsigned)strtoul(argv[3], NULL, 10));
    return usage();
}
