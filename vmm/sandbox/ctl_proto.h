/* The control-socket line protocol (docs/control-socket.md): one request
 * line from a client, one reply line from the VMM. This is the pure parser
 * of requests (no KVM, no I/O), so it can be unit tested and fuzzed, and
 * the limits and escaping both ends share: the client is this layer's
 * (sandbox_ctl_request, vmm/sandbox/device.c), the server an API server's
 * (vmm/api/control/ctl_server.c).
 *
 * A request is one line without control bytes (bytes >= 0x80 are allowed,
 * so that paths may be UTF-8): a verb, and for the snapshot
 * verbs a single space and an argument (the rest of the line, which may
 * contain spaces). An optional "\n" (or "\r\n") ends it. */
#ifndef MOAT_CTL_PROTO_H
#define MOAT_CTL_PROTO_H

#include <stddef.h>

#define CTL_LINE_MAX 4096   /* bytes in a request line, terminator included */
#define CTL_ARG_MAX 4000    /* bytes in an argument, NUL excluded */
#define CTL_REPLY_MAX 65536 /* bytes of a get reply's text (escaped: up to twice that) */

enum ctl_op {
    CTL_PAUSE = 1,
    CTL_RESUME,
    CTL_STATUS,
    CTL_SNAPSHOT,           /* snapshot DIR: DIR/state + DIR/memory, the VM goes on */
    CTL_STOP_SNAPSHOT,      /* stop-snapshot DIR: pause, snapshot, stop */
    CTL_STOP,
    CTL_SNAPSHOT_DISKS,     /* snapshot-disks DIR: snapshot + DIR/diskN.overlay pins, same point */
    CTL_CLONE_DISKS,        /* clone-disks DIR: DIR/diskN.overlay pins only (paused for the copy) */
    CTL_SET,                /* set TYPE[:ID] KEY VALUE: moat_device_set */
    CTL_GET,                /* get TYPE[:ID] KEY: moat_device_get */
};

struct ctl_req {
    enum ctl_op op;
    char arg[CTL_ARG_MAX + 1];  /* "" for verbs without one */
};

/* Parse buf[0..len) (need not be NUL-terminated). 0 and *req filled, or:
 *   -ENODATA   empty line
 *   -E2BIG     longer than CTL_LINE_MAX, or the argument than CTL_ARG_MAX
 *   -EBADMSG   a NUL or control byte (0x00-0x1f, 0x7f), or bytes after the "\n"
 *   -ENOENT    unknown verb
 *   -EINVAL    an argument missing, empty, not allowed, or badly separated
 *              (two spaces, a leading/trailing space, a tab) */
int ctl_parse(const char *buf, size_t len, struct ctl_req *req);

/* A set request's argument "TYPE[:ID] KEY VALUE" split in place: type,
 * id (NULL if not given), key, value (the rest of the line, spaces
 * included). 0, or -EINVAL: a part missing or empty, a type, id or key of
 * other bytes than [a-z0-9_-] (and '.' in an id). */
int ctl_set_split(char *arg, char **type, char **id, char **key, char **value);

/* A get request's argument "TYPE[:ID] KEY" split in place (as
 * ctl_set_split, without a value). 0 or -EINVAL. */
int ctl_get_split(char *arg, char **type, char **id, char **key);
/* A get reply's text on one line: '\\' and '\n' for a backslash and a
 * newline, into out (cap bytes, NUL-terminated, cut at a whole escape).
 * ctl_unescape reverses it in place. */
void ctl_escape(const char *in, char *out, size_t cap);
void ctl_unescape(char *s);

/* The verb's name ("pause", ...), or NULL for an unknown op. */
const char *ctl_op_name(enum ctl_op op);

#endif
