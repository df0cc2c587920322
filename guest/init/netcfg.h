/* The default guest's network parameter, moat.net= on the kernel command
 * line (docs/guest.md, "Network"). Pure parsing, no I/O: /init
 * (guest/init/init.c) links it, tests/unit/test_guest_netcfg.c tests it.
 *
 *   moat.net=dhcp                         udhcpc on eth0
 *   moat.net=off                          eth0 stays down
 *   moat.net=static:ADDR/PREFIX[,GW[,DNS]]
 *
 * Absent, the mode is NETCFG_DEFAULT: /init uses DHCP when eth0 exists. */
#ifndef MOAT_GUEST_NETCFG_H
#define MOAT_GUEST_NETCFG_H

#include <stddef.h>
#include <stdint.h>

enum netcfg_mode {
    NETCFG_DEFAULT = 0,     /* no moat.net= */
    NETCFG_DHCP,
    NETCFG_OFF,
    NETCFG_STATIC,
};

struct netcfg {
    enum netcfg_mode mode;
    uint32_t addr;          /* NETCFG_STATIC: address, host byte order */
    unsigned prefix;        /* NETCFG_STATIC: 1..32 */
    uint32_t gw;            /* NETCFG_STATIC: default gateway, 0 = none */
    uint32_t dns;           /* NETCFG_STATIC: name server, 0 = none */
};

/* A dotted-quad IPv4 address, exactly S[0..LEN): four decimal parts 0..255,
 * no sign, no leading zero (so "010" is not read as octal or as 10).
 * 0 and *OUT (host byte order), or -EINVAL. */
int netcfg_ipv4(const char *s, size_t len, uint32_t *out);

/* The value of moat.net=, exactly V[0..LEN). 0 and *CFG filled, or -EINVAL
 * (*CFG then unspecified). static: the address is neither 0.0.0.0 nor
 * 255.255.255.255, nor (for PREFIX < 31) the subnet's network or broadcast
 * address; GW lies in ADDR/PREFIX and is not ADDR; DNS is not 0.0.0.0.
 * An empty GW ("static:A/P,,DNS") means none. */
int netcfg_parse(const char *v, size_t len, struct netcfg *cfg);

/* The kernel command line CMDLINE (as /proc/cmdline, NUL-terminated): the
 * last word "moat.net=VALUE" before a lone "--" (what follows belongs to
 * the command) decides. 0 with *CFG (mode NETCFG_DEFAULT if there is none),
 * or -EINVAL if the deciding value is malformed. As the kernel does, words
 * are split at white space outside double quotes, and the quotes are
 * dropped ("moat.net=dhcp" and moat.net="dhcp" are moat.net=dhcp). */
int netcfg_from_cmdline(const char *cmdline, struct netcfg *cfg);

/* "A.B.C.D" of host-order ADDR into BUF (at least 16 bytes). */
void netcfg_fmt_ipv4(uint32_t addr, char *buf);

#endif
