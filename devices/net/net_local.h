/* A small IPv4 host inside the virtio-net device: one address (moat's
 * metadata address, 169.254.169.254), one TCP port, a byte-stream service
 * behind it (the metadata service's HTTP: devices/net/mmds.h). It answers
 * ARP for its address and speaks just enough TCP for request/response
 * exchanges: the three-way handshake, in-order data (out-of-order segments
 * are dropped, the guest resends), its answers cut to the guest's MSS and
 * window and sent again when the guest's ACKs say they were lost, FIN
 * both ways (requests that came before the guest's FIN are answered
 * first), an ACK to a SYN on a connection it still holds (the guest's RST
 * then frees it), RST for anything else. No host socket is involved: frames in,
 * frames out (the device injects them). Pure apart from the callbacks, with
 * time passed in: unit-tested and fuzzed. */
#ifndef MOAT_NET_LOCAL_H
#define MOAT_NET_LOCAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NET_LOCAL_CONNS     16          /* TCP connections at once */
#define NET_LOCAL_REQ_MAX   16384       /* bytes of a request not yet answered */
#define NET_LOCAL_RESP_MAX  (256u * 1024)   /* bytes of answers not yet acknowledged */
#define NET_LOCAL_IDLE_NS   (60ull * 1000000000ull)

/* The service: consume a request from in (in_len bytes buffered), write
 * its answer into out. Returns the bytes of in it used (0: the request is
 * not complete yet), *out_len the answer's length (<= out_cap), *close
 * true to close the connection after the answer. A negative return closes
 * the connection at once (RST). */
typedef long (*net_local_serve_fn)(void *opaque, const uint8_t *in, size_t in_len, uint8_t *out, size_t out_cap,
                                   size_t *out_len, bool *close, uint64_t now_ns);
/* A frame for the guest. */
typedef void (*net_local_emit_fn)(void *opaque, const uint8_t *frame, size_t len);

struct net_local_conn {
    bool used;
    int state;
    uint32_t peer_ip;           /* network order */
    uint16_t peer_port;         /* host order */
    uint8_t peer_mac[6], our_mac[6];
    uint32_t rcv_nxt;           /* next byte expected from the guest */
    uint32_t snd_una, snd_nxt, iss;
    uint32_t peer_wnd;          /* bytes the guest will take past snd_una */
    uint16_t mss;
    bool fin_queued, fin_sent, peer_fin;
    uint64_t last_ns;
    uint8_t *req;               /* NET_LOCAL_REQ_MAX */
    size_t req_len;
    uint8_t *resp;              /* NET_LOCAL_RESP_MAX: bytes from snd_una on */
    size_t resp_len;
};

struct net_local {
    uint32_t ip;                /* network order */
    uint16_t port;
    uint8_t mac[6];             /* answered to ARP for ip */
    net_local_serve_fn serve;
    net_local_emit_fn emit;
    void *opaque;
    uint32_t isn_seed;
    struct net_local_conn conn[NET_LOCAL_CONNS];
    uint64_t frames_in, frames_bad, resets_sent;
};

/* ip in network order. 0 or -ENOMEM. */
int net_local_init(struct net_local *l, uint32_t ip, uint16_t port, const uint8_t mac[6], net_local_serve_fn serve,
                   net_local_emit_fn emit, void *opaque, uint32_t isn_seed);
void net_local_free(struct net_local *l);
/* Is this frame (from the guest) for the local host: an ARP request for
 * its address, or IPv4 to it? */
bool net_local_wants(const struct net_local *l, const uint8_t *frame, size_t len);
/* Handle a frame net_local_wants said yes to (anything else is counted as
 * bad and ignored). */
void net_local_input(struct net_local *l, const uint8_t *frame, size_t len, uint64_t now_ns);
/* Forget every connection (device reset). */
void net_local_reset(struct net_local *l);

/* The Internet checksum of len bytes, folded, starting from sum. */
uint16_t net_csum(const uint8_t *p, size_t len, uint32_t sum);

#endif
