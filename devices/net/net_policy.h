/* The egress policy of a virtio-net device: which frames the guest sends
 * may reach a backend. Pure: no sockets, no threads, no clock (the caller
 * passes now_ns, a monotonic time). docs/net.md describes the language and
 * the order; this header is the contract.
 *
 * Rules (as the CLI's --net-allow / --net-deny / --net-allow-domain take):
 *   CIDR[,port=P[-Q]][,proto=tcp|udp|icmp]
 *     CIDR: an IPv4 or IPv6 address with an optional /prefix (none: /32 or
 *     /128); host bits past the prefix are an error. port: 1..65535, P <= Q;
 *     with no proto a port rule matches TCP and UDP; a port with
 *     proto=icmp is an error. proto=icmp is ICMPv6 in an IPv6 rule. A rule
 *     matches the frame's destination address, of its own family only.
 *   NAME[,port=...][,proto=...]   (domain rules, allow only)
 *     NAME: a hostname (labels of [a-z0-9_-], case folded, a final dot
 *     dropped); "*.NAME" matches names strictly below NAME at any depth, NOT
 *     NAME itself (write both rules for both).
 *
 * Evaluation of a frame the guest sends (first step that decides wins):
 *    1. malformed (net_frame_parse fails)            drop
 *    2. VLAN-tagged                                  drop
 *    3. an Ethernet source not the guest's MAC       drop
 *       (guest_mac given, else the first unicast source it used)
 *    4. source-routed (NF_F_SRCROUTE)                drop
 *    5. ARP: allow when it is a request or a reply whose sender hardware
 *       address is the frame's source MAC and whose sender protocol
 *       address is 0.0.0.0 or the guest's IPv4 address (below); else
 *       drop
 *    6. other non-IP EtherTypes                      drop
 *    7. an IP source not the guest's (below): IPv4 0.0.0.0 only in
 *       DHCPv4 (step 9), IPv6 :: only in ND/MLD (step 9)  drop
 *    8. TCP to 169.254.169.254:80                    NP_METADATA (the device
 *                                                    serves it; never a backend)
 *    9. link services, which cannot leave the link:  allow
 *       DHCPv4 (UDP 68->67 to 255.255.255.255, no IPv4 options, not a
 *       fragment; a BOOTREQUEST whose client hardware address is the
 *       frame's source MAC), IPv6 ND/MLD (ICMPv6 130-133, 135, 136, 143
 *       to fe80::/10 or ff02::/16, not a fragment; a source / target
 *       link-layer address option must be the frame's source MAC, and an
 *       NA's target one of the guest's IPv6 addresses), DHCPv6 (UDP 546->547 to ff02::1:2). A DHCPv4 or
 *       ND frame that fails these is dropped (counted on its step)
 *   10. a non-first fragment: the verdict of its first fragment when that
 *       was allowed (tracked by family, src, dst, id, protocol for
 *       NP_FRAG_NS, at most NP_FRAG_MAX datagrams), else drop
 *   11. deny rules, in the order given              drop
 *       (an IPv4 rule also matches an IPv6 destination that embeds an
 *       IPv4 address it covers: np_embedded_v4)
 *   12. allow rules, in the order given             allow
 *   13. the preset, unless turned off (no_preset)   drop
 *       (np_preset[] and the host's own addresses from the caller; its
 *       IPv4 entries also match IPv6 destinations embedding such an
 *       address)
 *   14. addresses learned for a domain rule (within that rule's port/proto)  allow
 *   15. the default                                  allow or deny
 * Explicit rules beat the preset; the preset beats learned addresses (a
 * resolver cannot admit 10.0.0.1, 169.254.x or 64:ff9b::a9fe:a9fe by
 * answering for an allowed name) and the default. With default deny the preset only filters learned
 * addresses.
 *
 * Domain learning (net_policy_rx, on frames the guest receives): a DNS
 * response (UDP, or TCP in one segment, from port 53, not fragmented) is
 * learned only if (a) it answers a query the guest sent through this policy
 * (same resolver address, guest port, transport, ID and question name;
 * queries are tracked only when their name matches a domain rule and the
 * frame was allowed; at most NP_DNS_PENDING, for NP_DNS_PENDING_NS), (b) the
 * resolver is admitted by an explicit allow rule for its port 53 (and no
 * deny rule) — the default does not make a resolver trusted, and (c)
 * RCODE is NOERROR. Then every A/AAAA answer on the question's CNAME chain
 * is admitted for each domain rule the question name matches, for its TTL
 * clamped to [ttl_min_s, ttl_max_s]. A frame allowed through a learned
 * address pushes its expiry to at least now + ttl_min_s, so a connection in
 * use outlives a short TTL. The table holds at most learn_max (address,
 * rule) entries; a new one evicts the least recently used.
 *
 * The guest's identity: with guest_mac given, the Ethernet source must be
 * one of those MACs; without, the first unicast source MAC the guest sends
 * from is pinned ("first use"). ARP's sender MAC, a DHCP request's client
 * MAC and ND's link-layer address options must be the frame's own source
 * MAC always. IPv4: the guest items given; else the lease DHCP handed the
 * guest: net_policy_rx takes a DHCPACK (UDP 67->68, BOOTREPLY, message
 * type 5) that answers the transaction the guest last broadcast through
 * step 9 (same xid and client MAC, within NP_DNS_PENDING_NS), comes from
 * one of the conf's dhcp_server addresses and whose server identifier (if
 * any) is that address, and makes its yiaddr the guest's, in place of an
 * earlier one (an ACK from elsewhere is counted in dhcp_refused); until a
 * lease, the first unicast IPv4 source (or ARP sender address) the guest
 * uses is pinned. IPv6: the guest items given (global addresses), the
 * link-local EUI-64 address of each pinned MAC, and up to
 * NP_GUEST_LEARN_V6 more pinned on first use (link-local ones always,
 * others only when no IPv6 guest item was given); multicast, loopback and
 * :: (outside ND) never. A first-use pin binds the guest to the first
 * identity it shows: it stops a guest from changing or rotating its
 * source, not from choosing the first one (give guest_mac and guest items
 * for that).
 *
 * Threads: a policy is not locked inside. The device calls everything on a
 * policy under one lock of its own; a new policy is built with
 * net_policy_new off that lock, then under it net_policy_carry(new, old) and
 * a pointer swap, then old is freed after the lock is dropped. */
#ifndef MOAT_NET_POLICY_H
#define MOAT_NET_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "devices/net/dns_msg.h"
#include "devices/net/net_frame.h"

#define NP_SPEC_MAX         256u        /* bytes of one rule spec, NUL included */
#define NP_RULES_MAX        1024u       /* deny + allow + domain rules */
#define NP_HOSTS_MAX        256u        /* host addresses in the preset */
#define NP_LEARN_DEFAULT    4096u       /* learned (address, rule) entries */
#define NP_LEARN_MAX        65536u
#define NP_TTL_MIN_DEFAULT  60u         /* seconds */
#define NP_TTL_MAX_DEFAULT  86400u
#define NP_DNS_PENDING      256u
#define NP_DNS_PENDING_NS   (30ull * 1000000000ull)
#define NP_FRAG_MAX         256u
#define NP_FRAG_NS          (60ull * 1000000000ull)
#define NP_METADATA_PORT    80u         /* on 169.254.169.254 */
#define NP_GUEST_MACS_MAX   4u          /* MACs the guest may send from */
#define NP_GUEST_ADDRS_MAX  16u         /* addresses the guest may send from */
#define NP_GUEST_LEARN_V6   8u          /* IPv6 addresses pinned on first use */
#define NP_DHCP_SERVERS_MAX 16u         /* servers a DHCPACK may come from */

struct net_policy;

enum np_verdict {
    NP_DROP = 0,
    NP_ALLOW = 1,
    NP_METADATA = 2,    /* the device's own metadata service: hand it there, not to a backend */
};

enum np_kind {
    NP_K_BUILTIN = 0,   /* a fixed step of the order (np_builtin) */
    NP_K_DENY,
    NP_K_ALLOW,
    NP_K_DOMAIN,
    NP_K_PRESET,
};

/* The first NP_B__COUNT rules of every policy, in this order. */
enum np_builtin {
    NP_B_MALFORMED = 0,
    NP_B_VLAN,
    NP_B_SRC_MAC,       /* an Ethernet source other than the guest's MAC */
    NP_B_SRCROUTE,
    NP_B_ARP,
    NP_B_NONIP,
    NP_B_SRC_ADDR,      /* an IP source other than the guest's */
    NP_B_METADATA,
    NP_B_DHCP4,
    NP_B_ND6,
    NP_B_DHCP6,
    NP_B_FRAG,          /* non-first fragments without an allowed first one */
    NP_B_DEFAULT,
    NP_B__COUNT
};

struct np_counters {
    uint64_t frames_allowed, bytes_allowed;     /* NP_METADATA counts as allowed */
    uint64_t frames_dropped, bytes_dropped;
};

struct np_rule_info {
    enum np_kind kind;
    const char *text;           /* canonical spec (or the step's name); lives with the policy */
    struct np_counters c;
};

/* A parsed rule spec (np_parse_rule / np_parse_domain). */
struct np_rule_spec {
    struct nf_addr net;         /* CIDR rules: the network (host bits zero) */
    uint8_t prefix;             /* 0..32 (family 4) or 0..128 */
    uint8_t proto;              /* 0: any; NF_IPPROTO_TCP or NF_IPPROTO_UDP (see icmp) */
    bool icmp;                  /* proto=icmp: ICMP in IPv4 frames, ICMPv6 in IPv6 ones */
    uint16_t port_lo, port_hi;  /* 0, 0: any port */
    bool wildcard;              /* domain rules: "*.NAME" */
    char domain[DNS_NAME_TEXT_MAX + 1];   /* domain rules: NAME, lowercased, without "*." */
    char text[NP_SPEC_MAX];     /* canonical form */
};

struct np_conf {
    bool default_allow;         /* --net-default allow (false: deny) */
    bool no_preset;             /* turn the preset off (it is on unless asked) */
    const char *const *allow;   size_t n_allow;         /* CIDR rules */
    const char *const *deny;    size_t n_deny;          /* CIDR rules */
    const char *const *allow_domain; size_t n_allow_domain;
    const struct nf_addr *host; size_t n_host;          /* the host's own addresses (preset);
                                                           family 4: b[12..15], the rest ignored */
    uint32_t ttl_min_s, ttl_max_s;  /* 0: NP_TTL_MIN_DEFAULT / NP_TTL_MAX_DEFAULT */
    uint32_t learn_max;             /* 0: NP_LEARN_DEFAULT; at most NP_LEARN_MAX */
    /* the guest's own MACs (6 bytes each; the device's, and on a fork's
     * child the one its guest still uses): none, the source MAC is not
     * pinned */
    const uint8_t (*guest_mac)[6]; size_t n_guest_mac;
    /* the guest's own addresses: with none of a family, sources of that
     * family are not pinned (IPv4 then pins to what DHCP hands out) */
    const struct nf_addr *guest; size_t n_guest;
    /* the IPv4 addresses (host order) the backend's DHCP server answers
     * from: a DHCPACK from any other source is not learned. None: DHCP
     * pins nothing (the first-use pin stands) */
    const uint32_t *dhcp_server; size_t n_dhcp_server;
};

struct np_result {
    enum np_verdict verdict;
    unsigned rule;              /* the deciding rule (net_policy_rule's index) */
    enum nf_err err;            /* rule NP_B_MALFORMED: why */
};

struct np_stats {
    uint64_t malformed[NF_E__COUNT];    /* transmitted frames, per parse error */
    uint64_t rx_malformed;              /* received frames that did not parse */
    uint64_t dns_seen;                  /* responses looked at (from port 53) */
    uint64_t dns_bad;                   /* ... malformed */
    uint64_t dns_unsolicited;           /* ... answering no tracked query */
    uint64_t dns_untrusted;             /* ... from a resolver no allow rule admits */
    uint64_t dns_rcode;                 /* ... with an RCODE other than NOERROR */
    uint64_t dns_learned;               /* ... that admitted addresses */
    uint64_t addrs_learned;             /* entries added or refreshed */
    uint64_t learn_evicted;             /* entries evicted to stay within learn_max */
    uint64_t dns_pending_evicted;       /* tracked queries dropped when full */
    uint64_t frag_evicted;              /* tracked first fragments dropped when full */
    uint64_t dhcp_learned;              /* DHCPACKs that set the guest's IPv4 address */
    uint64_t dhcp_refused;              /* DHCPACKs for the guest's transaction from another server */
    uint64_t ids_learned;               /* MACs and addresses pinned on first use */
    size_t learned;                     /* entries in the table now (expired ones included until met) */
    size_t learn_max;
};

/* The preset (step 13), as rule specs; np_preset_count entries. */
extern const char *const np_preset[];
extern const size_t np_preset_count;

/* The IPv4 addresses an IPv6 address embeds, into out (host byte order):
 * IPv4-mapped ::ffff:0:0/96 and IPv4-compatible ::/96 (the last 32 bits;
 * :: and ::1 included: 0.0.0.0, 0.0.0.1), NAT64 64:ff9b::/96 (RFC 6052:
 * the last 32 bits), local-use NAT64 64:ff9b:1::/48 (RFC 8215, with each
 * network prefix length RFC 6052 allows inside it: /96 the last 32 bits,
 * /48 bits 48..63 + 72..87, /56 bits 56..63 + 72..95, /64 bits 72..103),
 * 6to4 2002::/16 (bits 16..47), Teredo 2001::/32 (the server, bits 32..63,
 * and the client, the last 32 bits inverted) and ISATAP (RFC 5214: an
 * interface identifier [00|02]00:5efe:a.b.c.d, u and g bits free, under any
 * prefix but the ones above that end earlier). Returns how many
 * (0..NP_EMBED_MAX). Pure.
 * Not detectable here: a translator (SIIT, RFC 7915; NAT64) under a
 * network-specific prefix an operator chose; deny that prefix by a rule. */
#define NP_EMBED_MAX 4u
unsigned np_embedded_v4(const uint8_t v6[16], uint32_t out[NP_EMBED_MAX]);

/* Parse one CIDR rule spec; 0, or -EINVAL with a message in why. */
int np_parse_rule(const char *spec, struct np_rule_spec *out, char *why, size_t wlen);
/* Parse one domain rule spec; 0, or -EINVAL with a message in why. */
int np_parse_domain(const char *spec, struct np_rule_spec *out, char *why, size_t wlen);
/* Does the lowercased name (no final dot) match domain (wildcard: strictly below it)? */
bool np_domain_match(const char *domain, bool wildcard, const char *name);

/* Build a policy from c. 0 with *out set, or -EINVAL (a bad spec, a bad
 * ttl range, learn_max or a host address) / -E2BIG (too many rules or
 * hosts) / -ENOMEM, with a message in why. */
int net_policy_new(const struct np_conf *c, struct net_policy **out, char *why, size_t wlen);
void net_policy_free(struct net_policy *p);

/* Carry state from the policy being replaced into a freshly built one:
 * counters of rules whose kind and canonical text are the same (the fixed
 * steps always), the statistics, tracked DNS queries, learned entries
 * (unexpired at now_ns) of domain rules the new policy has too, tracked
 * fragments whose rule it has, and the DHCP-learned guest address (with
 * the pending DHCP transaction). Call once, before to has seen a frame. */
void net_policy_carry(struct net_policy *to, const struct net_policy *from, uint64_t now_ns);

/* A frame the guest sends (len bytes, Ethernet header first): parse it,
 * decide, count it on the deciding rule, remember what later frames need
 * (first fragments, DNS queries). Returns the verdict; *r (may be NULL)
 * says which rule. */
enum np_verdict net_policy_tx(struct net_policy *p, const uint8_t *frame, size_t len,
                              uint64_t now_ns, struct np_result *r);
/* The same for a frame already parsed by net_frame_parse into f (either
 * result); frame/len are the bytes it was parsed from. */
enum np_verdict net_policy_tx_parsed(struct net_policy *p, const uint8_t *frame, size_t len,
                                     const struct net_frame *f, uint64_t now_ns,
                                     struct np_result *r);

/* A frame the guest receives: learn from it if it is a DNS response that
 * qualifies (above), or the guest's address from a DHCPACK (above).
 * Returns the number of (address, rule) entries added or refreshed. Never changes the frame's fate: RX is not filtered. */
unsigned net_policy_rx(struct net_policy *p, const uint8_t *frame, size_t len, uint64_t now_ns);

/* Is a admitted by a learned entry at now_ns (for any port)? If so and
 * expires_ns is not NULL, the latest expiry among its entries. Does not
 * extend or drop anything. */
bool net_policy_learned(const struct net_policy *p, const struct nf_addr *a, uint64_t now_ns,
                        uint64_t *expires_ns);

/* Rules: builtins first (enum np_builtin), then deny, allow, domain, preset
 * rules in the order given. */
size_t net_policy_rule_count(const struct net_policy *p);
/* 0 with *out filled, or -ENOENT past the end. */
int net_policy_rule(const struct net_policy *p, size_t i, struct np_rule_info *out);
void net_policy_stats(const struct net_policy *p, struct np_stats *s);
bool net_policy_default_allow(const struct net_policy *p);

/* The policy, its counters, learned addresses (remaining time at now_ns)
 * and statistics as text, for `moat net NAME show`. snprintf-like: writes
 * at most n bytes (NUL-terminated when n > 0) and returns the length the
 * whole text needs. */
size_t net_policy_render(const struct net_policy *p, uint64_t now_ns, char *buf, size_t n);

const char *np_verdict_str(enum np_verdict v);

#endif
