/* virtio-net as a kind of device (devices/virtio/virtio_kind.h): options
 * tap=NAME, mac=MAC, guest_mac=MAC (the MAC a restored guest still
 * sends from, when not mac=), mtu=N, id=NAME; mmds (the metadata service at
 * 169.254.169.254, session tokens required), mmds_v1 (no token needed),
 * metadata=FILE (its first document; implies mmds), policy="..." (the
 * egress policy: devices/net/net_policy_text.h), tx_bw/tx_ops/rx_bw/rx_ops
 * (rate limiters) (docs/net.md). */
#ifndef MOAT_NET_KIND_H
#define MOAT_NET_KIND_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "devices/net/net_policy.h"
#include "devices/virtio/virtio_kind.h"

#define NET_ID_MAX 16u

#define MMDS_IPV4 0xa9fea9feu   /* 169.254.169.254: the metadata service (host order) */

struct mmds;
struct net_local;
struct net_policy;
struct http_parser;

/* The kind's record of the device (virtio_made.priv). */
struct net_rec {
    struct virtio_net *dev;     /* owned by its transport */
    uint8_t mac[6];
    /* the MACs the egress policy lets the guest send from: mac, and
     * guest_mac= when given (a fork's child: the MAC its guest still uses) */
    uint8_t macs[2][6];
    size_t n_mac;
    uint8_t guest_mac[6];       /* guest_mac=, when guest_mac_given */
    bool guest_mac_given;
    /* the metadata service (options mmds, metadata=FILE), or NULL */
    struct mmds *mmds;
    struct net_local *local;
    struct http_parser *http;
    uint64_t inject_dropped;
    /* the egress policy (option policy="..."), or NULL: everything passes */
    pthread_mutex_t plock;
    struct net_policy *policy;
    char *policy_text;          /* the policy in force, as given */
    /* where the backend's DHCP server answers from (the policy learns the
     * guest's IPv4 lease only from these): passt, the host's default
     * gateways; a TAP, the host's own IPv4 addresses; read at create */
    uint32_t dhcp_server[NP_DHCP_SERVERS_MAX];
    size_t n_dhcp_server;
};

extern const struct virtio_kind net_kind;

/* "52:54:00:12:34:56" (hex, either case): 0, or -EINVAL (malformed, a
 * multicast or the all-zero address). Pure. */
int net_parse_mac(const char *s, uint8_t mac[6]);
/* A random locally administered unicast address (02:xx:...). */
void net_random_mac(uint8_t mac[6]);
void net_format_mac(const uint8_t mac[6], char out[18]);

/* The IPv4 default gateways (host order) in the text of /proc/net/route:
 * rows with destination and mask 0 and the RTF_GATEWAY flag, at most max;
 * returns how many. A malformed row is skipped. Pure. */
size_t net_route_gateways(const char *text, uint32_t *out, size_t max);

/* The device's config space is its frontend's (vhost-user: QEMU gives the
 * guest its own -device mac=): the egress policy pins the source MAC to
 * guest_mac= when given, else to the first unicast MAC the guest sends
 * from. Call once, before frames flow.
 * 0, or -errno with why. */
int net_kind_frontend_mac(void *priv, char *why, size_t wlen);

#endif
