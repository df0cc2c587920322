/* moat run/restore --control PATH: the VM's control socket, an API server
 * served from the caller's loop (vmrun's, vmm/api/control/vmrun.c): one request
 * line per connection, one reply line back (docs/control-socket.md). The
 * requests are parsed by vmm/sandbox/ctl_proto.c; the client is the
 * sandbox library's (sandbox_ctl_path_request). Nothing is printed: what
 * goes wrong comes back in a struct sbx_err. */
#ifndef MOAT_CTL_SERVER_H
#define MOAT_CTL_SERVER_H

#include <stdint.h>
#include <sys/types.h>

#include "vmm/sandbox/sandbox.h"

struct ctl_server {
    int fd;
    int paused;
    uid_t euid;                 /* ours, read at open (the main thread's filter has no geteuid) */
    uint64_t start_ns;          /* the caller's: status's uptime counts from it (open leaves it) */
    char path[108];
};
struct moat_vm;
/* Bind and listen on path (mode 0600; a stale socket there is replaced).
 * 0, or -errno with why (err may be NULL). */
int ctl_server_open(struct ctl_server *s, const char *path, struct sbx_err *err);
/* Serve one waiting client, if any: 1 when the VM was told to stop, else 0. */
int ctl_server_serve(struct ctl_server *s, struct moat_vm *vm);
/* Close and unlink (again: no-op). */
void ctl_server_close(struct ctl_server *s);

#endif
