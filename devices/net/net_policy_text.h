/* The egress policy as one option value (net's policy="..."), the form a
 * snapshot records and `moat_device_set(vm, "net", id, "policy", TEXT)`
 * takes: items separated by ';' (spaces around them ignored):
 *   allow SPEC          SPEC: CIDR[,port=P[-Q]][,proto=tcp|udp|icmp]
 *   deny SPEC
 *   allow-domain NAME[,port=P[-Q]][,proto=...]   (*.NAME: names below it)
 *   default allow|deny  (the last one given wins; deny if none)
 *   no-preset           the preset denies are off
 *   guest ADDR          one of the guest's own addresses (IPv4 or IPv6, no
 *                       prefix; at most NP_GUEST_ADDRS_MAX): with any of a
 *                       family, the guest may send only from those (and
 *                       link-local for IPv6) in that family
 * e.g. "default deny; allow 10.0.2.3/32,port=53,proto=udp; allow-domain
 * *.pypi.org,port=443". Each SPEC is checked by the policy's own parsers
 * (devices/net/net_policy.h). Pure: unit-tested, fuzzed with the policy. */
#ifndef MOAT_NET_POLICY_TEXT_H
#define MOAT_NET_POLICY_TEXT_H

#include <stddef.h>

#include "devices/net/net_policy.h"

#define NPT_MAX_ITEMS 1024          /* rules in one policy */
#define NPT_TEXT_MAX  65536         /* bytes of the text */

struct np_text {
    char *buf;                      /* the items' strings point here */
    const char **allow, **deny, **domain;
    size_t n_allow, n_deny, n_domain;
    int default_allow;              /* 0 deny, 1 allow */
    int no_preset;
    struct nf_addr guest[NP_GUEST_ADDRS_MAX];
    size_t n_guest;
};

/* Parse text into t (free with np_text_free, also on error) and fill the
 * policy configuration c from it (c's pointers into t). 0, or -EINVAL /
 * -E2BIG / -ENOMEM with why naming the item. */
int np_text_parse(const char *text, struct np_text *t, struct np_conf *c, char *why, size_t wlen);
void np_text_free(struct np_text *t);

#endif
