/* The device's own small IPv4 host (devices/net/net_local.h). */
#include "devices/net/net_local.h"
#include "vmm/base/bytes.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define ETH_HLEN 14
#define ETH_P_IP 0x0800
#define ETH_P_ARP 0x0806
#define IPPROTO_TCP_ 6
#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_PSH 0x08
#define TCP_ACK 0x10

enum { ST_SYN_RCVD = 1, ST_EST, ST_LAST_ACK };

/* a - b > 0 in sequence space */
static bool seq_gt(uint32_t a, uint32_t b) { return (int32_t)(a - b) > 0; }

uint16_t net_csum(const uint8_t *p, size_t len, uint32_t sum)
{
    uint64_t s = sum;
    for (size_t i = 0; i + 1 < len; i += 2)
        s += (uint32_t)(p[i] << 8 | p[i + 1]);
    if (len & 1)
        s += (uint32_t)p[len - 1] << 8;
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    return (uint16_t)~s;
}

int net_local_init(struct net_local *l, uint32_t ip, uint16_t port, const uint8_t mac[6], net_local_serve_fn serve,
                   net_local_emit_fn emit, void *opaque, uint32_t isn_seed)
{
    memset(l, 0, sizeof(*l));
    l->ip = ip;
    l->port = port;
    memcpy(l->mac, mac, 6);
    l->serve = serve;
    l->emit = emit;
    l->opaque = opaque;
    l->isn_seed = isn_seed;
    return 0;
}

static void conn_free(struct net_local_conn *c)
{
    free(c->req);
    free(c->resp);
    memset(c, 0, sizeof(*c));
}

void net_local_reset(struct net_local *l)
{
    for (unsigned i = 0; i < NET_LOCAL_CONNS; i++)
        conn_free(&l->conn[i]);
}

void net_local_free(struct net_local *l)
{
    net_local_reset(l);
}

bool net_local_wants(const struct net_local *l, const uint8_t *f, size_t len)
{
    if (len < ETH_HLEN + 20)
        return false;
    uint16_t type = be16_load(f + 12);
    if (type == ETH_P_ARP)      /* an IPv4-over-Ethernet request for our address */
        return len >= ETH_HLEN + 28 && be16_load(f + 14) == 1 && be16_load(f + 16) == ETH_P_IP && f[18] == 6 && f[19] == 4 &&
               be16_load(f + 20) == 1 && memcmp(f + ETH_HLEN + 24, &l->ip, 4) == 0;
    return type == ETH_P_IP && (f[ETH_HLEN] >> 4) == 4 && memcmp(f + ETH_HLEN + 16, &l->ip, 4) == 0;
}

/* ---- output ---- */

/* A TCP segment to c's peer: flags, seq, the payload (len bytes). */
static void send_seg(struct net_local *l, const uint8_t dst_mac[6], const uint8_t src_mac[6], uint32_t dst_ip,
                     uint16_t dst_port, uint8_t flags, uint32_t seq, uint32_t ack, uint16_t mss_opt,
                     const uint8_t *data, size_t len)
{
    uint8_t f[ETH_HLEN + 20 + 24 + 1460];
    size_t thl = mss_opt ? 24 : 20;
    if (len > sizeof(f) - ETH_HLEN - 20 - thl)
        return;
    memcpy(f, dst_mac, 6);
    memcpy(f + 6, src_mac, 6);
    be16_store(f + 12, ETH_P_IP);
    uint8_t *ip = f + ETH_HLEN, *tcp = ip + 20;
    size_t iplen = 20 + thl + len;
    ip[0] = 0x45;
    ip[1] = 0;
    be16_store(ip + 2, (uint16_t)iplen);
    be16_store(ip + 4, 0);
    be16_store(ip + 6, 0x4000);     /* DF */
    ip[8] = 64;
    ip[9] = IPPROTO_TCP_;
    be16_store(ip + 10, 0);
    memcpy(ip + 12, &l->ip, 4);
    memcpy(ip + 16, &dst_ip, 4);
    be16_store(ip + 10, net_csum(ip, 20, 0));
    be16_store(tcp, l->port);
    be16_store(tcp + 2, dst_port);
    be32_store(tcp + 4, seq);
    be32_store(tcp + 8, ack);
    tcp[12] = (uint8_t)((thl / 4) << 4);
    tcp[13] = flags;
    be16_store(tcp + 14, 65535);    /* our window: we take whole requests */
    be16_store(tcp + 16, 0);
    be16_store(tcp + 18, 0);
    if (mss_opt) {
        tcp[20] = 2;
        tcp[21] = 4;
        be16_store(tcp + 22, mss_opt);
    }
    if (len)
        memcpy(tcp + thl, data, len);
    /* pseudo-header: addresses, protocol, TCP length */
    uint32_t sum = (uint32_t)be16_load(ip + 12) + be16_load(ip + 14) + be16_load(ip + 16) + be16_load(ip + 18) + IPPROTO_TCP_ +
                   (uint32_t)(thl + len);
    be16_store(tcp + 16, net_csum(tcp, thl + len, sum));
    l->emit(l->opaque, f, ETH_HLEN + iplen);
}

static void conn_seg(struct net_local *l, struct net_local_conn *c, uint8_t flags, uint32_t seq, const uint8_t *d,
                     size_t n)
{
    send_seg(l, c->peer_mac, c->our_mac, c->peer_ip, c->peer_port, flags, seq, c->rcv_nxt, 0, d, n);
}

/* Send what the window lets go of the answers, and the FIN after them. */
static void conn_push(struct net_local *l, struct net_local_conn *c)
{
    uint32_t sent = c->snd_nxt - c->snd_una;
    if (c->state == ST_SYN_RCVD)
        return;
    while (sent < c->resp_len && sent < c->peer_wnd) {
        size_t n = c->resp_len - sent;
        if (n > c->mss)
            n = c->mss;
        if (n > c->peer_wnd - sent)
            n = c->peer_wnd - sent;
        conn_seg(l, c, TCP_ACK | TCP_PSH, c->snd_nxt, c->resp + sent, n);
        c->snd_nxt += (uint32_t)n;
        sent += (uint32_t)n;
    }
    if (c->fin_queued && !c->fin_sent && sent == c->resp_len) {
        conn_seg(l, c, TCP_ACK | TCP_FIN, c->snd_nxt, NULL, 0);
        c->snd_nxt++;
        c->fin_sent = true;
        c->state = ST_LAST_ACK;
    }
}

/* Send again from snd_una (the guest's ACKs say what arrived). */
static void conn_resend(struct net_local *l, struct net_local_conn *c)
{
    c->snd_nxt = c->snd_una;
    if (c->fin_sent && c->snd_una == c->snd_nxt) {
        c->fin_sent = false;
        c->state = ST_EST;
    }
    conn_push(l, c);
}

static void rst_reply(struct net_local *l, const uint8_t *f, const uint8_t *ip, const uint8_t *tcp, size_t paylen)
{
    uint8_t flags = tcp[13];
    if (flags & TCP_RST)
        return;
    uint32_t src_ip;
    memcpy(&src_ip, ip + 12, 4);
    uint32_t seq = 0, ack = 0;
    uint8_t rf = TCP_RST;
    if (flags & TCP_ACK) {
        seq = be32_load(tcp + 8);
    } else {
        rf |= TCP_ACK;
        ack = be32_load(tcp + 4) + (uint32_t)paylen + ((flags & TCP_SYN) ? 1 : 0) + ((flags & TCP_FIN) ? 1 : 0);
    }
    /* from the port the guest asked for: l->port is ours, but a RST for
     * another port must come from that port */
    uint16_t saved = l->port;
    l->port = be16_load(tcp + 2);
    send_seg(l, f + 6, f, src_ip, be16_load(tcp), rf, seq, ack, 0, NULL, 0);
    l->port = saved;
    l->resets_sent++;
}

/* ---- input ---- */

static void arp_input(struct net_local *l, const uint8_t *f, size_t len)
{
    (void)len;
    uint8_t r[ETH_HLEN + 28];
    const uint8_t *a = f + ETH_HLEN;
    memcpy(r, f + 6, 6);            /* to the asker */
    memcpy(r + 6, l->mac, 6);
    be16_store(r + 12, ETH_P_ARP);
    uint8_t *o = r + ETH_HLEN;
    be16_store(o, 1);
    be16_store(o + 2, ETH_P_IP);
    o[4] = 6;
    o[5] = 4;
    be16_store(o + 6, 2);           /* reply */
    memcpy(o + 8, l->mac, 6);
    memcpy(o + 14, &l->ip, 4);
    memcpy(o + 18, a + 8, 6);       /* the asker's MAC and IP */
    memcpy(o + 24, a + 14, 4);
    l->emit(l->opaque, r, sizeof(r));
}

static struct net_local_conn *conn_find(struct net_local *l, uint32_t ip, uint16_t port)
{
    for (unsigned i = 0; i < NET_LOCAL_CONNS; i++)
        if (l->conn[i].used && l->conn[i].peer_ip == ip && l->conn[i].peer_port == port)
            return &l->conn[i];
    return NULL;
}

/* A free slot, reclaiming an idle connection if none is. */
static struct net_local_conn *conn_slot(struct net_local *l, uint64_t now)
{
    struct net_local_conn *oldest = NULL;
    for (unsigned i = 0; i < NET_LOCAL_CONNS; i++) {
        struct net_local_conn *c = &l->conn[i];
        if (!c->used)
            return c;
        if (now - c->last_ns > NET_LOCAL_IDLE_NS && (!oldest || c->last_ns < oldest->last_ns))
            oldest = c;
    }
    if (oldest)
        conn_free(oldest);
    return oldest;
}

/* Requests that are complete get their answers queued. */
static void conn_serve(struct net_local *l, struct net_local_conn *c, uint64_t now)
{
    while (c->req_len && !c->fin_queued) {
        size_t out_len = 0;
        bool close = false;
        long used = l->serve(l->opaque, c->req, c->req_len, c->resp + c->resp_len, NET_LOCAL_RESP_MAX - c->resp_len,
                             &out_len, &close, now);
        if (used < 0 || (size_t)used > c->req_len || out_len > NET_LOCAL_RESP_MAX - c->resp_len) {
            c->fin_queued = true;       /* the service gave up: close after what was answered */
            c->req_len = 0;
            return;
        }
        c->resp_len += out_len;
        if (used == 0) {
            if (c->req_len == NET_LOCAL_REQ_MAX)    /* a request larger than we hold */
                c->fin_queued = true;
            return;
        }
        memmove(c->req, c->req + used, c->req_len - (size_t)used);
        c->req_len -= (size_t)used;
        if (close)
            c->fin_queued = true;
    }
}

/* The MSS option of a SYN's TCP header (thl bytes), clamped to 64..1460;
 * 536 without one. */
static uint16_t syn_mss(const uint8_t *tcp, size_t thl)
{
    uint16_t mss = 536;
    for (size_t o = 20; o + 1 < thl;) {
        uint8_t kind = tcp[o];
        if (kind == 0)
            break;
        if (kind == 1) {
            o++;
            continue;
        }
        uint8_t ol = tcp[o + 1];
        if (ol < 2 || o + ol > thl)
            break;
        if (kind == 2 && ol == 4) {
            uint16_t m = be16_load(tcp + o + 2);
            mss = m < 64 ? 64 : m > 1460 ? 1460 : m;
        }
        o += ol;
    }
    return mss;
}

/* A segment for no connection of ours (frame f, its IP header ip, TCP
 * header tcp of thl bytes, n bytes of data): a SYN opens one and is
 * answered with a SYN-ACK; anything else, or no room, gets a RST. */
static void conn_open(struct net_local *l, const uint8_t *f, const uint8_t *ip, const uint8_t *tcp,
                      size_t thl, size_t n, uint64_t now)
{
    struct net_local_conn *c;
    uint8_t flags = tcp[13];
    if ((flags & (TCP_SYN | TCP_ACK | TCP_RST)) != TCP_SYN || !(c = conn_slot(l, now))) {
        rst_reply(l, f, ip, tcp, n);
        return;
    }
    c->req = malloc(NET_LOCAL_REQ_MAX);
    c->resp = malloc(NET_LOCAL_RESP_MAX);
    if (!c->req || !c->resp) {
        conn_free(c);
        rst_reply(l, f, ip, tcp, n);
        return;
    }
    uint16_t sport = be16_load(tcp);
    c->used = true;
    c->state = ST_SYN_RCVD;
    memcpy(&c->peer_ip, ip + 12, 4);
    c->peer_port = sport;
    memcpy(c->peer_mac, f + 6, 6);
    memcpy(c->our_mac, f, 6);       /* answer as the address the guest sent to */
    c->rcv_nxt = be32_load(tcp + 4) + 1;
    c->iss = l->isn_seed ^ (uint32_t)(now >> 10) ^ (uint32_t)sport << 16;
    c->snd_una = c->iss;
    c->snd_nxt = c->iss + 1;
    c->mss = syn_mss(tcp, thl);     /* the guest's MSS */
    c->peer_wnd = be16_load(tcp + 14);
    c->last_ns = now;
    send_seg(l, c->peer_mac, c->our_mac, c->peer_ip, c->peer_port, TCP_SYN | TCP_ACK, c->iss, c->rcv_nxt, 1460,
             NULL, 0);
}

static void tcp_input(struct net_local *l, const uint8_t *f, size_t len, uint64_t now)
{
    const uint8_t *ip = f + ETH_HLEN;
    size_t ihl = (size_t)(ip[0] & 15) * 4, iplen = be16_load(ip + 2);
    if (ihl < 20 || iplen < ihl + 20 || iplen > len - ETH_HLEN || (be16_load(ip + 6) & 0x3fff)) {
        l->frames_bad++;            /* short, longer than the frame, or a fragment */
        return;
    }
    const uint8_t *tcp = ip + ihl;
    size_t thl = (size_t)(tcp[12] >> 4) * 4;
    if (thl < 20 || thl > iplen - ihl) {
        l->frames_bad++;
        return;
    }
    const uint8_t *data = tcp + thl;
    size_t n = iplen - ihl - thl;
    uint8_t flags = tcp[13];
    uint32_t src_ip, seq = be32_load(tcp + 4), ack = be32_load(tcp + 8);
    memcpy(&src_ip, ip + 12, 4);
    uint16_t sport = be16_load(tcp), dport = be16_load(tcp + 2);
    if (dport != l->port) {
        rst_reply(l, f, ip, tcp, n);
        return;
    }
    struct net_local_conn *c = conn_find(l, src_ip, sport);
    if (!c) {
        conn_open(l, f, ip, tcp, thl, n, now);
        return;
    }
    c->last_ns = now;
    if (flags & TCP_RST) {
        conn_free(c);
        return;
    }
    if (flags & TCP_SYN) {
        if (c->state == ST_SYN_RCVD && seq + 1 == c->rcv_nxt)   /* the SYN again: our SYN-ACK was lost */
            send_seg(l, c->peer_mac, c->our_mac, c->peer_ip, c->peer_port, TCP_SYN | TCP_ACK, c->iss, c->rcv_nxt,
                     1460, NULL, 0);
        else                    /* a new connection on a port we still hold: an ACK for the old one (RFC 5961
                                 * 4.2), which the guest answers with a RST that frees it, then SYNs again */
            conn_seg(l, c, TCP_ACK, c->snd_nxt, NULL, 0);
        return;
    }
    if (!(flags & TCP_ACK))
        return;
    /* what the guest acknowledges */
    if (seq_gt(ack, c->snd_nxt)) {  /* acknowledges what we never sent */
        conn_seg(l, c, TCP_ACK, c->snd_nxt, NULL, 0);
        return;
    }
    if (c->state == ST_SYN_RCVD) {
        if (ack != c->iss + 1) {
            rst_reply(l, f, ip, tcp, n);
            conn_free(c);
            return;
        }
        c->state = ST_EST;
        c->snd_una = ack;
    }
    uint32_t acked = ack - c->snd_una;
    bool dup = acked == 0 && n == 0 && !(flags & TCP_FIN) && c->snd_nxt != c->snd_una;
    if (seq_gt(ack, c->snd_una)) {
        size_t data_acked = acked;
        if (c->fin_sent && ack == c->snd_nxt)
            data_acked--;           /* our FIN takes a sequence number */
        if (data_acked > c->resp_len)
            data_acked = c->resp_len;
        memmove(c->resp, c->resp + data_acked, c->resp_len - data_acked);
        c->resp_len -= data_acked;
        c->snd_una = ack;
    }
    c->peer_wnd = be16_load(tcp + 14);
    /* data: only the next bytes in order */
    bool ack_now = false;
    if (n || (flags & TCP_FIN)) {
        if (seq != c->rcv_nxt) {
            ack_now = true;         /* a resend or out of order: say where we are */
        } else {
            if (n > NET_LOCAL_REQ_MAX - c->req_len) {
                rst_reply(l, f, ip, tcp, n);
                conn_free(c);
                return;
            }
            memcpy(c->req + c->req_len, data, n);
            c->req_len += n;
            c->rcv_nxt += (uint32_t)n;
            if (flags & TCP_FIN) {
                c->rcv_nxt++;
                c->peer_fin = true;
            }
            ack_now = true;
        }
    }
    conn_serve(l, c, now);
    if (c->peer_fin)            /* answered what it sent before its FIN: close after the answers */
        c->fin_queued = true;
    if (dup)
        conn_resend(l, c);
    uint32_t before = c->snd_nxt;
    conn_push(l, c);
    if (ack_now && c->snd_nxt == before)    /* nothing carried the ACK */
        conn_seg(l, c, TCP_ACK, c->snd_nxt, NULL, 0);
    if (c->state == ST_LAST_ACK && c->peer_fin && c->fin_sent && c->snd_una == c->snd_nxt)
        conn_free(c);
}

void net_local_input(struct net_local *l, const uint8_t *f, size_t len, uint64_t now_ns)
{
    l->frames_in++;
    if (!net_local_wants(l, f, len)) {
        l->frames_bad++;
        return;
    }
    if (be16_load(f + 12) == ETH_P_ARP) {
        arp_input(l, f, len);
        return;
    }
    const uint8_t *ip = f + ETH_HLEN;
    if (ip[9] != IPPROTO_TCP_) {
        l->frames_bad++;            /* ICMP, UDP to the metadata address: not served */
        return;
    }
    tcp_input(l, f, len, now_ns);
}
