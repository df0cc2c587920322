/* Host side of the guest agent protocol (docs/agent-protocol.md).
 * Library-internal: used by `moat exec` and `moat cp` (vmm/sandbox/exec.c).
 *
 * The agent is reached as a byte stream: either a hybrid-vsock Unix socket
 * (Firecracker style: write "CONNECT <port>\n", read "OK <hostport>\n",
 * then the stream is the guest's vsock port), or a plain Unix socket the
 * agent itself listens on (moat-agent --unix PATH, for tests). Every
 * function returns 0 or -errno: -EPROTO for a protocol violation by the
 * peer, -EREMOTEIO when the agent answered with an ERROR frame (its
 * message is copied to err), -ETIMEDOUT if the handshake or READY frame
 * does not come within 10 s. */
#ifndef MOAT_AGENT_CLIENT_H
#define MOAT_AGENT_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "vmm/agent/agent_proto.h"

struct agent_client {
    int fd;
    struct agent_rx rx;
    struct agent_buf out;
    uint32_t next_id;
    int last_errno;          /* agent_client_last_errno */
    /* Set by the caller after connecting (connect/attach zero it): > 0
     * bounds every stat/list/rename/remove/mkdir/get call, and each chunk
     * of a put, to timeout_ms in all (-ETIMEDOUT; the stream is then out
     * of step: close it); 0 waits as long as the agent takes. */
    int timeout_ms;
};

/* hybrid: do the CONNECT handshake for port; else connect straight to the
 * agent. Waits for the agent's READY frame. */
int agent_client_connect(struct agent_client *c, const char *path, int hybrid, unsigned port);
void agent_client_close(struct agent_client *c);
/* The same over an already connected stream fd (owned from now on, closed
 * by agent_client_close, also on failure), waiting at most timeout_ms for
 * the OK line and for READY. */
int agent_client_attach(struct agent_client *c, int fd, int hybrid, unsigned port, int timeout_ms);
/* Send one frame (type, payload) and wait for its OK (0) or ERROR
 * (-EREMOTEIO, message in err); no answer within timeout_ms in all
 * (frames for other ids and trickled bytes do not extend it): -ETIMEDOUT
 * (< 0: no limit). */
int agent_client_request(struct agent_client *c, uint32_t type, const void *payload, size_t len,
                         int timeout_ms, char *err, size_t errlen);

/* Run req (its flags get AGENT_EXEC_STDIN when in_fd >= 0; in_fd is read
 * to EOF and forwarded). Remote stdout/stderr are written to out_fd/err_fd
 * as they arrive. On success *st is the remote exit. */
int agent_client_exec(struct agent_client *c, struct agent_exec *req, int in_fd, int out_fd,
                      int err_fd, struct agent_exit *st, char *err, size_t errlen);

/* Copy local_fd (read to EOF) to the remote path with mode. */
int agent_client_put(struct agent_client *c, int local_fd, const char *remote, uint32_t mode,
                     char *err, size_t errlen);
/* Copy the remote file to local_fd; *mode gets its permission bits. */
int agent_client_get(struct agent_client *c, const char *remote, int local_fd, uint32_t *mode,
                     char *err, size_t errlen);
int agent_client_mkdir(struct agent_client *c, const char *remote, uint32_t mode, int parents,
                       char *err, size_t errlen);
int agent_client_ping(struct agent_client *c);

/* File system requests (paths absolute, 1..4096 bytes; else -EINVAL).
 * struct agent_stat and AGENT_FT_* are in agent_proto.h. Every entry the
 * agent sends is checked (agent_entry_decode); a STAT_INFO whose path is
 * not the one asked for, a LIST_ENTRY outside the listed directory or
 * deeper than depth, or a LIST_END whose count differs from the entries
 * received is -EPROTO (the stream is then out of step: close the
 * connection). */
int agent_client_stat(struct agent_client *c, const char *path, int nofollow,
                      struct agent_stat *st, char *err, size_t errlen);
/* cb is called per entry; a non-zero return stops (the rest is drained) and is returned.
 * depth 1..AGENT_LIST_MAX_DEPTH; symlinked directories are not descended. */
int agent_client_list(struct agent_client *c, const char *path, unsigned depth,
                      int (*cb)(void *arg, const struct agent_stat *e), void *arg,
                      char *err, size_t errlen);
/* rename(2) in the guest: EXDEV (other file system) is an ERROR like any other. */
int agent_client_rename(struct agent_client *c, const char *src, const char *dst,
                        char *err, size_t errlen);
/* recursive: rm -rf without following symlinks; else unlink or rmdir. */
int agent_client_remove(struct agent_client *c, const char *path, int recursive,
                        char *err, size_t errlen);
/* The errno of the last ERROR frame (0 if it had none, e.g. a malformed
 * request); reset to 0 by every request. */
int agent_client_last_errno(const struct agent_client *c);
/* A whole frame already received (none read from the socket): 1 with h
 * and *pl (valid until the next read), 0 when none is complete yet,
 * -EPROTO for a stream that breaks the protocol. */
int agent_client_take(struct agent_client *c, struct agent_hdr *h, const uint8_t **pl);
/* One recv without waiting, through buf (len bytes), into the receive
 * buffer: 1 when bytes came, 0 when none were ready (or a signal came),
 * -ECONNRESET when the agent closed the connection, else -errno. */
int agent_client_recv(struct agent_client *c, uint8_t *buf, size_t len);

/* The shell-style status: the exit code, or 128 + signal. */
int agent_exit_status(const struct agent_exit *st);

#endif
