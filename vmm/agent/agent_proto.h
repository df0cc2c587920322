/* The guest agent's wire protocol (docs/agent-protocol.md): pure framing and
 * typed payload encoders/decoders, shared by the guest agent
 * (guest/agent/agent.c, built static into the initramfs) and the host client
 * (vmm/agent/agent_client.c). No KVM headers; no global state.
 *
 * A frame is a 16-byte little-endian header
 *     u32 magic (AGENT_MAGIC, which includes the protocol version)
 *     u32 type  (enum agent_type)
 *     u32 id    (exec id or transfer id; 0 for connection-level frames)
 *     u32 len   (payload bytes, <= AGENT_MAX_PAYLOAD)
 * followed by len payload bytes. Every decoder checks every length and
 * returns 0 or -EINVAL (-ENOMEM where it allocates); the reason for a
 * refusal is in *err (enum agent_err) so the agent can send it back. */
#ifndef MOAT_AGENT_PROTO_H
#define MOAT_AGENT_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define AGENT_MAGIC        0x3141474du   /* "MGA1" little-endian: version 1 */
#define AGENT_HDR_SIZE     16u
#define AGENT_MAX_PAYLOAD  (1u << 20)    /* 1 MiB */
#define AGENT_MAX_ARGS     4096u         /* argv entries */
#define AGENT_MAX_ENV      4096u         /* env entries */
#define AGENT_MAX_PATH     4096u         /* path / cwd bytes */
#define AGENT_MAX_MSG      1024u         /* error message bytes */
#define AGENT_CHUNK        (256u * 1024) /* data per stream/file chunk sent */
#define AGENT_DEFAULT_PORT 1024u
#define AGENT_MAX_ENTROPY  512u          /* ADD_ENTROPY payload bytes */
#define AGENT_MAX_NAME     63u           /* owner / group name bytes */
#define AGENT_LIST_MAX_DEPTH   16u       /* LIST depth 1..16 */
#define AGENT_LIST_MAX_ENTRIES 100000u   /* LIST entries, then ERROR LIMIT */

enum agent_type {
    AGENT_T_PING      = 1,   /* c->a  payload: opaque (<= 64 bytes), echoed */
    AGENT_T_PONG      = 2,   /* a->c  payload: the ping's bytes */
    AGENT_T_READY     = 3,   /* a->c  first frame on a connection: u32 version */
    AGENT_T_EXEC      = 16,  /* c->a  start a process (struct agent_exec) */
    AGENT_T_STDIN     = 17,  /* c->a  bytes for the process' stdin */
    AGENT_T_STDIN_EOF = 18,  /* c->a  close the process' stdin; empty */
    AGENT_T_STDOUT    = 19,  /* a->c  bytes the process wrote to stdout */
    AGENT_T_STDERR    = 20,  /* a->c  bytes the process wrote to stderr */
    AGENT_T_EXIT      = 21,  /* a->c  the process ended (struct agent_exit) */
    AGENT_T_KILL      = 22,  /* c->a  u32 signal number for the process group */
    AGENT_T_RESIZE    = 23,  /* c->a  a pty exec's size: u16 rows, u16 cols; OK/ERROR */
    AGENT_T_FILE_WRITE= 32,  /* c->a  write a chunk of a file (struct agent_fwrite) */
    AGENT_T_FILE_READ = 33,  /* c->a  read a file: the path */
    AGENT_T_FILE_DATA = 34,  /* a->c  a chunk of the file being read */
    AGENT_T_FILE_END  = 35,  /* a->c  end of file: u32 mode, u64 size */
    AGENT_T_MKDIR     = 36,  /* c->a  u32 mode, u32 flags, path */
    AGENT_T_SET_TIME  = 37,  /* c->a  set CLOCK_REALTIME: struct agent_time; OK/ERROR */
    AGENT_T_ADD_ENTROPY = 38,/* c->a  1..AGENT_MAX_ENTROPY bytes credited to the
                              *       guest's RNG, which is then reseeded; OK/ERROR */
    AGENT_T_STAT      = 39,  /* c->a  u32 flags, rest = path; STAT_INFO/ERROR */
    AGENT_T_LIST      = 40,  /* c->a  u32 depth, rest = directory path;
                              *       LIST_ENTRY* then LIST_END, or ERROR */
    AGENT_T_RENAME    = 41,  /* c->a  string src, string dst; OK/ERROR */
    AGENT_T_REMOVE    = 42,  /* c->a  u32 flags, rest = path; OK/ERROR */
    AGENT_T_WATCH     = 43,  /* c->a  u32 flags, rest = directory path; OK then
                              * WATCH_EVENT frames until the connection closes */
    AGENT_T_OK        = 48,  /* a->c  a file write chunk / mkdir succeeded; empty */
    AGENT_T_ERROR     = 49,  /* a->c  struct agent_error */
    AGENT_T_STAT_INFO = 50,  /* a->c  an entry (struct agent_stat) */
    AGENT_T_LIST_ENTRY= 51,  /* a->c  one entry of a LIST (struct agent_stat) */
    AGENT_T_LIST_END  = 52,  /* a->c  u32 count of the entries sent */
    AGENT_T_WATCH_EVENT = 53,/* a->c  u32 op, rest = name below the watched directory */
};

/* Entry types (struct agent_stat.type). */
enum agent_ftype {
    AGENT_FT_FILE = 1,
    AGENT_FT_DIR = 2,
    AGENT_FT_SYMLINK = 3,
    AGENT_FT_OTHER = 4,
};

enum agent_err {
    AGENT_E_OK = 0,
    AGENT_E_SHORT,        /* fewer bytes than a header / field needs */
    AGENT_E_MAGIC,        /* bad magic or version: stream is out of sync */
    AGENT_E_TOOBIG,       /* payload length over AGENT_MAX_PAYLOAD */
    AGENT_E_TYPE,         /* unknown type, or one not valid in this direction */
    AGENT_E_PAYLOAD,      /* malformed payload (lengths, counts, NUL bytes) */
    AGENT_E_ID,           /* unknown or duplicate exec id */
    AGENT_E_LIMIT,        /* too many execs / connections / buffered bytes */
    AGENT_E_SYS,          /* an operation failed: see sys_errno */
    AGENT_E__COUNT
};

#define AGENT_EXEC_STDIN   1u  /* flags: stdin is a pipe fed by STDIN frames
                                 * (else /dev/null) */
#define AGENT_EXEC_PTY     2u  /* flags: run on a new pty (stdin, stdout and
                                 * stderr; STDIN frames are its input, its output
                                 * comes as STDOUT); the payload then ends with
                                 * u16 rows, u16 cols (each >= 1) */
#define AGENT_EXEC_FLAGS   (AGENT_EXEC_STDIN | AGENT_EXEC_PTY)

#define AGENT_FW_APPEND    1u  /* file write: append (else create/truncate) */
#define AGENT_FW_FLAGS     AGENT_FW_APPEND

#define AGENT_MKDIR_PARENTS 1u /* mkdir -p */
#define AGENT_MKDIR_FLAGS   AGENT_MKDIR_PARENTS

#define AGENT_STAT_NOFOLLOW 1u /* stat: lstat (the link itself) */
#define AGENT_STAT_FLAGS    AGENT_STAT_NOFOLLOW

#define AGENT_RM_RECURSIVE  1u /* remove: rm -rf (symlinks are not followed) */
#define AGENT_RM_FLAGS      AGENT_RM_RECURSIVE
#define AGENT_WATCH_RECURSIVE 1u      /* WATCH: subdirectories too */
#define AGENT_WATCH_FLAGS   AGENT_WATCH_RECURSIVE
#define AGENT_WATCH_MAX_DIRS 8192u    /* directories one WATCH follows, then ERROR LIMIT */
/* WATCH_EVENT ops: envd's EventType numbers. */
enum agent_watch_op {
    AGENT_WATCH_CREATE = 1, AGENT_WATCH_WRITE = 2, AGENT_WATCH_REMOVE = 3,
    AGENT_WATCH_RENAME = 4, AGENT_WATCH_CHMOD = 5,
};

#define AGENT_EXIT_CODE     0u  /* exit kind: exited with value */
#define AGENT_EXIT_SIGNAL   1u  /* exit kind: killed by signal value */
#define AGENT_EXIT_TIMEDOUT 1u  /* exit flags: the agent killed it at its timeout */

struct agent_hdr {
    uint32_t type, id, len;
};

/* A decoded exec request. Strings are NUL-terminated; argv[argc] and
 * env[envc] are NULL. All of it lives in one allocation (agent_exec_free). */
struct agent_exec {
    uint32_t flags;
    uint32_t timeout_ms;   /* 0: none; else SIGKILL after this long */
    uint32_t argc, envc;
    char *cwd;             /* "" : the agent's own */
    char **argv;
    char **env;            /* "KEY=VALUE" each */
    uint16_t rows, cols;   /* AGENT_EXEC_PTY: the terminal's size (>= 1 each) */
};

struct agent_exit {
    uint32_t kind;         /* AGENT_EXIT_CODE or AGENT_EXIT_SIGNAL */
    uint32_t value;        /* exit code 0..255 or signal 1..64 */
    uint32_t flags;        /* AGENT_EXIT_TIMEDOUT */
};

/* Decoded file write chunk: pointers into the payload (path not NUL-terminated). */
struct agent_fwrite {
    uint32_t flags, mode;
    const char *path;
    uint32_t path_len;
    const uint8_t *data;
    uint32_t data_len;
};

struct agent_mkdir {
    uint32_t mode, flags;
    const char *path;
    uint32_t path_len;
};

/* A file system entry: STAT_INFO and LIST_ENTRY payloads.
 * Wire: u32 type, u32 mode, u32 uid, u32 gid, u64 size, s64 mtime_sec,
 * u32 mtime_nsec, then strings path, owner, group, link. Decoded strings
 * are NUL-terminated. path: 1..AGENT_MAX_PATH bytes, absolute; owner,
 * group: 0..AGENT_MAX_NAME bytes ("" when the guest has no name for the
 * id); link: the symlink's target (1..AGENT_MAX_PATH bytes) for
 * AGENT_FT_SYMLINK, "" for every other type. */
struct agent_stat {
    uint32_t type, mode, uid, gid;   /* type: enum agent_ftype; mode: st_mode & 07777 */
    uint64_t size;                   /* <= INT64_MAX */
    int64_t mtime_sec;
    uint32_t mtime_nsec;             /* < 10^9 */
    char path[AGENT_MAX_PATH + 1], owner[AGENT_MAX_NAME + 1], group[AGENT_MAX_NAME + 1],
         link[AGENT_MAX_PATH + 1];
};

/* STAT, LIST and REMOVE requests: a u32 (flags, or LIST's depth) and an
 * absolute path (pointer into the payload, not NUL-terminated). */
struct agent_path_req {
    uint32_t arg;
    const char *path;
    uint32_t path_len;
};

/* RENAME request: two absolute paths (pointers into the payload). */
struct agent_rename {
    const char *src, *dst;
    uint32_t src_len, dst_len;
};

/* SET_TIME payload (16 bytes): s64 sec, u32 nsec (< 10^9), u32 flags (0). */
struct agent_time {
    int64_t sec;           /* seconds since the Unix epoch, >= 0 */
    uint32_t nsec;
};

struct agent_error {
    uint32_t code;         /* enum agent_err */
    uint32_t sys_errno;    /* positive errno for AGENT_E_SYS, else 0 */
    const char *msg;       /* not NUL-terminated; msg_len bytes */
    uint32_t msg_len;
};

/* A growable byte buffer frames are appended to. */
struct agent_buf {
    uint8_t *p;
    size_t len, cap;
};

/* A receive buffer: push bytes in, take whole frames out. */
struct agent_rx {
    uint8_t *buf;
    size_t len, cap, off;
};

const char *agent_strerror(enum agent_err e);
const char *agent_type_name(uint32_t type);

/* Header. hdr_decode needs n >= AGENT_HDR_SIZE; checks magic and length
 * (not the type: unknown types are skipped by the receiver). */
void agent_hdr_encode(uint8_t out[AGENT_HDR_SIZE], uint32_t type, uint32_t id, uint32_t len);
int agent_hdr_decode(const uint8_t *p, size_t n, struct agent_hdr *h, enum agent_err *err);

/* Buffers. */
void agent_buf_free(struct agent_buf *b);
int agent_buf_reserve(struct agent_buf *b, size_t more);
void agent_buf_consume(struct agent_buf *b, size_t n);

/* Appending whole frames; -E2BIG if the payload would exceed the limit,
 * -ENOMEM. On failure the buffer is unchanged. */
int agent_put_frame(struct agent_buf *b, uint32_t type, uint32_t id,
                    const void *payload, size_t len);
/* With AGENT_EXEC_PTY, e->rows and e->cols (each >= 1, else -EINVAL) end the payload. */
int agent_put_exec(struct agent_buf *b, uint32_t id, const struct agent_exec *e);
int agent_put_exit(struct agent_buf *b, uint32_t id, const struct agent_exit *x);
/* -EINVAL for a zero rows or cols. */
int agent_put_resize(struct agent_buf *b, uint32_t id, uint16_t rows, uint16_t cols);
int agent_put_u32(struct agent_buf *b, uint32_t type, uint32_t id, uint32_t v);
int agent_put_fwrite(struct agent_buf *b, uint32_t id, uint32_t flags, uint32_t mode,
                     const char *path, const void *data, size_t len);
int agent_put_mkdir(struct agent_buf *b, uint32_t id, uint32_t mode, uint32_t flags,
                    const char *path);
int agent_put_file_end(struct agent_buf *b, uint32_t id, uint32_t mode, uint64_t size);
int agent_put_error(struct agent_buf *b, uint32_t id, enum agent_err code,
                    uint32_t sys_errno, const char *msg);
/* -EINVAL for a time the decoder would refuse / an empty or oversized
 * entropy buffer. */
int agent_put_set_time(struct agent_buf *b, uint32_t id, const struct agent_time *t);
int agent_put_entropy(struct agent_buf *b, uint32_t id, const void *data, size_t len);
/* File system requests; -EINVAL for a path that is not absolute, empty,
 * too long or a flag/depth the decoder would refuse. */
int agent_put_stat(struct agent_buf *b, uint32_t id, uint32_t flags, const char *path);
int agent_put_list(struct agent_buf *b, uint32_t id, uint32_t depth, const char *path);
int agent_put_remove(struct agent_buf *b, uint32_t id, uint32_t flags, const char *path);
int agent_put_rename(struct agent_buf *b, uint32_t id, const char *src, const char *dst);
int agent_put_watch(struct agent_buf *b, uint32_t id, uint32_t flags, const char *path);
/* WATCH_EVENT: -EINVAL for an op or name the decoder would refuse. */
int agent_put_watch_event(struct agent_buf *b, uint32_t id, uint32_t op, const char *name, size_t nl);
/* An entry as frame type (AGENT_T_STAT_INFO or AGENT_T_LIST_ENTRY);
 * -EINVAL for an entry the decoder would refuse. */
int agent_put_entry(struct agent_buf *b, uint32_t type, uint32_t id, const struct agent_stat *st);

/* Payload decoders: p/n is exactly the payload. */
int agent_exec_decode(const uint8_t *p, size_t n, struct agent_exec *out, enum agent_err *err);
void agent_exec_free(struct agent_exec *e);
int agent_exit_decode(const uint8_t *p, size_t n, struct agent_exit *out, enum agent_err *err);
int agent_u32_decode(const uint8_t *p, size_t n, uint32_t *out, enum agent_err *err);
int agent_kill_decode(const uint8_t *p, size_t n, int *sig, enum agent_err *err);
/* RESIZE: exactly 4 bytes, u16 rows then u16 cols, each >= 1. */
int agent_resize_decode(const uint8_t *p, size_t n, uint16_t *rows, uint16_t *cols,
                        enum agent_err *err);
int agent_fwrite_decode(const uint8_t *p, size_t n, struct agent_fwrite *out, enum agent_err *err);
int agent_mkdir_decode(const uint8_t *p, size_t n, struct agent_mkdir *out, enum agent_err *err);
int agent_file_end_decode(const uint8_t *p, size_t n, uint32_t *mode, uint64_t *size,
                          enum agent_err *err);
int agent_error_decode(const uint8_t *p, size_t n, struct agent_error *out, enum agent_err *err);
int agent_time_decode(const uint8_t *p, size_t n, struct agent_time *out, enum agent_err *err);
int agent_stat_req_decode(const uint8_t *p, size_t n, struct agent_path_req *out,
                          enum agent_err *err);
int agent_list_req_decode(const uint8_t *p, size_t n, struct agent_path_req *out,
                          enum agent_err *err);
int agent_remove_req_decode(const uint8_t *p, size_t n, struct agent_path_req *out,
                            enum agent_err *err);
int agent_rename_decode(const uint8_t *p, size_t n, struct agent_rename *out,
                        enum agent_err *err);
int agent_watch_req_decode(const uint8_t *p, size_t n, struct agent_path_req *out,
                           enum agent_err *err);
/* WATCH_EVENT (the guest's: refuses every malformed one): u32 op (1..5),
 * then the name: 1..AGENT_MAX_PATH bytes, no NUL, relative (no leading
 * '/'), no empty, "." or ".." component. Copied NUL-terminated into name
 * (AGENT_MAX_PATH + 1). */
int agent_watch_event_decode(const uint8_t *p, size_t n, uint32_t *op, char *name,
                             enum agent_err *err);
/* STAT_INFO / LIST_ENTRY payload (the guest's: refuses every malformed one). */
int agent_entry_decode(const uint8_t *p, size_t n, struct agent_stat *out, enum agent_err *err);
/* LIST_END: exactly 4 bytes, count <= AGENT_LIST_MAX_ENTRIES. */
int agent_list_end_decode(const uint8_t *p, size_t n, uint32_t *count, enum agent_err *err);
/* 0 if path is an entry a LIST of dir with depth may return: dir, then
 * (unless dir ends with '/') a '/', then 1..depth non-empty components,
 * none of them "." or ".."; else -EINVAL. */
int agent_list_path_check(const char *dir, uint32_t depth, const char *path);
/* The name of id in an /etc/passwd or /etc/group text (name:x:ID:...): the
 * first line whose third field is id and whose name is 1..AGENT_MAX_NAME
 * bytes without NUL; copied NUL-terminated to name (AGENT_MAX_NAME + 1).
 * 0, or -ENOENT (name = ""). Lines starting with '+' or '-' are skipped. */
int agent_idname_lookup(const char *text, size_t n, uint32_t id, char *name);
/* Checks the length (1..AGENT_MAX_ENTROPY); the bytes are p itself. */
int agent_entropy_check(const uint8_t *p, size_t n, enum agent_err *err);
/* A path (FILE_READ payload, or inside fwrite/mkdir): 1..AGENT_MAX_PATH
 * bytes, no NUL. Copies it NUL-terminated into out (AGENT_MAX_PATH + 1). */
int agent_path_check(const char *p, size_t n, char *out, enum agent_err *err);

/* Receive buffer. agent_rx_next: 1 and a frame (payload points into the
 * buffer, valid until the next push/next/free), 0 if more bytes are
 * needed, -EINVAL (bad magic: the stream cannot be resynchronised) or
 * -EMSGSIZE (oversized) with *err set. push: -ENOMEM. */
int agent_rx_push(struct agent_rx *rx, const void *data, size_t n);
int agent_rx_next(struct agent_rx *rx, struct agent_hdr *h, const uint8_t **payload,
                  enum agent_err *err);
void agent_rx_free(struct agent_rx *rx);

#endif
