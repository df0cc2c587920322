/* User-mode networking: a virtio-net backend (net_backend.h, name "user")
 * that starts passt, Debian's "passt" package, and exchanges frames with
 * it. No root and no host configuration: passt answers the guest's ARP,
 * DHCP, NDP and DHCPv6 itself, and turns the guest's TCP, UDP and ICMP echo
 * into sockets of its own on the host; port forwards bring host
 * connections in. See docs/net-passt.md.
 *
 * Lifetime: passt is moat's child, in the foreground (--foreground), and
 * talks to moat over one end of a socketpair it inherits as fd 3 (--fd 3,
 * which also makes it exit once that socket closes). moat's end is
 * close-on-exec and never leaves moat, so passt ends when that end
 * closes: at destroy, or when moat dies however it dies. The child also
 * gets PR_SET_PDEATHSIG (SIGKILL), which Linux clears when passt changes
 * its uid (run as root, passt drops to nobody), so the socket is the
 * guarantee and the signal the second line. PR_SET_PDEATHSIG follows the
 * *thread* that started the child: call net_passt_create from a thread
 * that lives as long as the backend. The child is started the way
 * posix_spawn does it (clone with CLONE_VM | CLONE_VFORK): moat's memory,
 * guest memory included, is not copied or made copy-on-write. The caller
 * must not reap children it did not start (waitpid(-1), SIGCHLD ignored):
 * destroy reaps passt by its pid.
 *
 * Start-up: passt writes its pid file (--pid, in a per-VM directory made 0700
 * under run_dir) once it is initialised; create waits for it (bounded) or
 * for passt's exit, and then removes the file and the directory, so
 * nothing is left on disk even if moat is killed. passt's stdout and
 * stderr go to a memory file moat reads back for error messages
 * (net_passt_output). Run as root, passt runs as nobody (--runas): the
 * directory is given to that user, and host ports below
 * net.ipv4.ip_unprivileged_port_start cannot be forwarded. */
#ifndef MOAT_NET_PASST_H
#define MOAT_NET_PASST_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "devices/net/net_backend.h"

#define NET_PASST_MAX_FWD           32
#define NET_PASST_DEFAULT_MTU       1500u   /* what a device without big receive buffers takes */
#define NET_PASST_MIN_MTU           68u
#define NET_PASST_MAX_MTU           65520u  /* passt's own maximum */
#define NET_PASST_START_TIMEOUT_MS  5000u
#define NET_PASST_STOP_GRACE_MS     500u    /* its socket closed, passt ends within this */
#define NET_PASST_OUTPUT_MAX        65536u  /* passt's output kept after start-up */
#define NET_PASST_ENV_BIN           "MOAT_PASST"   /* the passt binary when opts.passt is NULL */
#define NET_PASST_INSTALL_HINT      "apt-get install passt"

enum net_passt_proto { NET_PASST_TCP, NET_PASST_UDP };

/* One inbound port forward: connections (TCP) or datagrams (UDP) to the
 * host's port reach the guest's port. */
struct net_passt_fwd {
    enum net_passt_proto proto;
    uint32_t host_addr;         /* IPv4 address to listen on, host byte order;
                                 * 0: every address, IPv4 and IPv6 */
    uint16_t host_port;         /* 1 .. 65535 */
    uint16_t guest_port;        /* 1 .. 65535 */
};

struct net_passt_opts {
    const char *passt;          /* the binary: a path, or a name looked up in
                                 * PATH; NULL: $MOAT_PASST, else "passt" */
    const char *run_dir;        /* where the per-VM directory is made; NULL:
                                 * $TMPDIR, else /tmp */
    const struct net_passt_fwd *fwd;
    size_t nfwd;                /* <= NET_PASST_MAX_FWD */
    unsigned mtu;               /* the MTU passt's DHCP and NDP give the
                                 * guest; 0: NET_PASST_DEFAULT_MTU */
    bool host_loopback;         /* let the guest reach the host's loopback
                                 * services through the gateway address
                                 * (passt's default); false: --no-map-gw */
    unsigned start_timeout_ms;  /* 0: NET_PASST_START_TIMEOUT_MS */
};

/* Parse a forward: "tcp:HOSTPORT:GUESTPORT", "udp:HOSTPORT:GUESTPORT", or
 * with an IPv4 address to listen on, "tcp:ADDR:HOSTPORT:GUESTPORT". Ports
 * are decimal, 1 .. 65535, digits only. 0, or -EINVAL with a reason. */
int net_passt_parse_forward(const char *spec, struct net_passt_fwd *out, char *why, size_t wlen);

/* A list of forwards passt will take: at most NET_PASST_MAX_FWD, ports in
 * range, no host port twice for one protocol. 0, or -EINVAL with a reason. */
int net_passt_check_forwards(const struct net_passt_fwd *fwd, size_t n, char *why, size_t wlen);

/* passt's command line, built before the fork (nothing is allocated). */
#define NET_PASST_ARGV_MAX  (20 + 2 * NET_PASST_MAX_FWD)
struct net_passt_argv {
    char *v[NET_PASST_ARGV_MAX + 1];    /* NULL-terminated */
    size_t n;
    char buf[2 * PATH_MAX + 2048];
    size_t used;
};

/* The command line for binary bin, with the socket as fd 3 and the pid
 * file pidfile: --foreground --quiet --fd 3 --pid FILE --mtu N
 * [--no-map-gw] [--runas RUNAS] and one --tcp-ports / --udp-ports per
 * forward ("ADDR/HOST:GUEST" or "HOST:GUEST"; "none" when there is none of
 * that protocol). runas: NULL, or "UID:GID" (passt
 * run as root). 0, or -EINVAL / -ENAMETOOLONG with a reason. */
int net_passt_argv(const struct net_passt_opts *o, const char *bin, const char *pidfile,
                   const char *runas, struct net_passt_argv *a, char *why, size_t wlen);

/* Start passt and connect to it: *out is a backend whose fd is
 * non-blocking, vnet_hdr false (plain frames: the device offers no
 * offloads with it). Errors (-errno, with a reason): passt not found
 * (-ENOENT, the reason says how to install it), bad options (-EINVAL), a
 * host port taken (-EADDRINUSE) or not allowed (-EACCES), passt exiting
 * or not ready within the timeout (-EIO / -ETIMEDOUT, the reason quotes
 * passt's output); nothing is left running or on disk.
 *
 * The backend's send: a frame of 1 .. NET_FRAME_MAX bytes (-EINVAL /
 * -EMSGSIZE otherwise; passt skips the ones it cannot use, a runt or one
 * past 65535 bytes, and stays in step). When the socket takes only part of a frame,
 * the rest is kept in the backend (the stream stays whole) and send
 * returns -EAGAIN; the caller sends the same frame again when fd is
 * writable, which sends the rest and returns 0: the frame goes out once.
 * Until the rest is out, send returns -EAGAIN. (If the caller sends a
 * different frame instead, the held one is finished first, then the new
 * one goes.) -EPIPE: passt went away.
 *
 * recv: reads what is available and returns one whole frame per call;
 * more may be buffered, so the caller calls recv until -EAGAIN. -EPIPE:
 * passt closed the socket (or cut a frame short); -EPROTO: passt sent a
 * length of 0 or above NET_FRAME_MAX (sticky); -EINVAL: cap <
 * NET_FRAME_MAX.
 *
 * destroy: closes the socket (passt, in one-off mode, exits at that) and
 * reaps passt within NET_PASST_STOP_GRACE_MS; no signal is sent (moat's
 * seccomp lists allow none to another process). A passt still running
 * then is named on stderr and ends with moat (PR_SET_PDEATHSIG). */
int net_passt_create(const struct net_passt_opts *o, struct net_backend **out, char *why, size_t wlen);

/* passt's pid, for logs and tests. b must be a passt backend. */
pid_t net_passt_pid(const struct net_backend *b);

/* What passt wrote to stdout and stderr (its first lines and at most
 * NET_PASST_OUTPUT_MAX bytes after start-up), the last len-1 bytes of it,
 * NUL-terminated: the length copied. For a message when recv says -EPIPE. */
size_t net_passt_output(const struct net_backend *b, char *buf, size_t len);

#endif
