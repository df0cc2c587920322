/* The pure half of `moat serve`'s envd server (docs/serve.md, "The envd endpoint"): the
 * Connect protocol's JSON codec as the e2b SDK speaks it (envelopes, error
 * codes and their HTTP statuses, end-of-stream messages), the decoders of
 * the process.Process and filesystem.Filesystem request bodies, the
 * ProcessEvent and EntryInfo encoders, base64 and path resolution. No I/O,
 * no global state; every decoder checks every field and returns 0 or
 * -EINVAL with a message in err (-ENOMEM where it allocates). Unit tests:
 * tests/unit/test_serve_connect.c; fuzz target: tests/fuzz/fuzz_serve_connect.c. */
#ifndef MOAT_SERVE_CONNECT_H
#define MOAT_SERVE_CONNECT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "vmm/agent/agent_client.h"

/* Connect error codes (connectrpc.com/docs/protocol#error-codes). */
enum cx_code {
    CX_OK = 0,
    CX_CANCELED = 1,
    CX_UNKNOWN = 2,
    CX_INVALID_ARGUMENT = 3,
    CX_DEADLINE_EXCEEDED = 4,
    CX_NOT_FOUND = 5,
    CX_ALREADY_EXISTS = 6,
    CX_PERMISSION_DENIED = 7,
    CX_RESOURCE_EXHAUSTED = 8,
    CX_FAILED_PRECONDITION = 9,
    CX_ABORTED = 10,
    CX_OUT_OF_RANGE = 11,
    CX_UNIMPLEMENTED = 12,
    CX_INTERNAL = 13,
    CX_UNAVAILABLE = 14,
    CX_DATA_LOSS = 15,
    CX_UNAUTHENTICATED = 16,
};

#define CX_FLAG_COMPRESSED 0x01u
#define CX_FLAG_END        0x02u
#define CX_ENV_HDR         5u          /* flags byte + u32 big-endian length */
#define CX_MAX_ARGS        4095u       /* argv[0] is cmd: AGENT_MAX_ARGS in all */
#define CX_MAX_ENVS        4096u
#define CX_MAX_TAG         255u
#define CX_MAX_DEPTH       16u         /* ListDir depth (the agent's LIST limit) */
#define CX_MAX_PATH        4096u

/* "invalid_argument" etc.; NULL for CX_OK or an unknown value. */
const char *cx_code_name(enum cx_code c);
/* The HTTP status of a unary error (Connect's table: not_found 404,
 * unimplemented 501, unavailable 503, unknown values 500 ...). */
unsigned cx_code_http(enum cx_code c);
/* The code for a guest errno (ENOENT not_found, EEXIST already_exists,
 * EACCES/EPERM permission_denied, ENOTDIR/EISDIR/EINVAL/ENAMETOOLONG/ELOOP
 * invalid_argument, ENOTEMPTY failed_precondition, ENOSPC/EDQUOT
 * resource_exhausted, anything else internal). */
enum cx_code cx_code_from_errno(int err);

/* {"code":"...","message":"..."} (message left out when NULL or empty);
 * malloc'd, NULL without memory. */
char *cx_error_json(enum cx_code c, const char *msg);
/* An end-of-stream message: "{}" for CX_OK, else {"error":{...}}. */
char *cx_end_json(enum cx_code c, const char *msg);

/* Appends one envelope (flags, u32 BE length, data) to the buffer (buf, len, cap),
 * growing it; -E2BIG over 2^32-1 bytes, -ENOMEM. */
int cx_envelope_append(uint8_t **buf, size_t *len, size_t *cap, uint8_t flags,
                       const void *data, size_t n);
/* A streaming request body must be exactly one uncompressed, non-final
 * envelope: its message is msg, msglen (pointing into p). */
int cx_envelope_one(const uint8_t *p, size_t n, const uint8_t **msg, size_t *msglen,
                    char *err, size_t errlen);
/* Connect-Timeout-Ms: 1..10 ASCII digits. 0 and *ms or -EINVAL. */
int cx_timeout_parse(const char *s, uint64_t *ms);

/* Base64. encode: standard alphabet with padding, NUL-terminated,
 * malloc'd. decode: standard or URL-safe, padding optional (protobuf
 * JSON accepts both); *out malloc'd (at least 1 byte), -EINVAL on a
 * stray character or a bad length. */
char *cx_b64_encode(const void *p, size_t n);
int cx_b64_decode(const char *s, size_t n, uint8_t **out, size_t *outlen);

/* A path the SDK sent, made absolute the way envd does: "" and "~" are
 * home, "~/x" and a relative "x" are home/x. out has CX_MAX_PATH + 1
 * bytes; -EINVAL (message in err) when empty of meaning or too long. */
int cx_path_resolve(const char *in, const char *home, char *out, char *err, size_t errlen);

/* process.ProcessSelector: {"pid": N} or {"tag": "..."}. */
struct cx_selector {
    int by_tag;
    uint32_t pid;
    char tag[CX_MAX_TAG + 1];
};

/* process.StartRequest. Strings NUL-terminated, free with cx_start_free. */
struct cx_start {
    char *cmd;
    char **args;            /* nargs entries */
    size_t nargs;
    char **envs;            /* "KEY=VALUE", nenvs entries */
    size_t nenvs;
    char *cwd;              /* NULL: not given */
    char *tag;              /* NULL: not given */
    int stdin_on;           /* "stdin": true */
    int has_pty;            /* "pty" given (cols, rows) */
    uint32_t cols, rows;
};
int cx_start_decode(const char *json, size_t n, struct cx_start *out, char *err, size_t errlen);
void cx_start_free(struct cx_start *s);

/* ConnectRequest / CloseStdinRequest: {"process": selector}. */
int cx_selector_decode(const char *json, size_t n, struct cx_selector *sel, char *err, size_t errlen);
/* SendSignalRequest: selector and "signal" ("SIGNAL_SIGKILL" / 9,
 * "SIGNAL_SIGTERM" / 15): *sig is 9 or 15. */
int cx_signal_decode(const char *json, size_t n, struct cx_selector *sel, int *sig,
                     char *err, size_t errlen);
/* SendInputRequest: selector and "input": {"stdin": b64} or {"pty": b64}.
 * *data malloc'd (free it), *is_pty set for pty input. */
int cx_input_decode(const char *json, size_t n, struct cx_selector *sel, uint8_t **data,
                    size_t *len, int *is_pty, char *err, size_t errlen);
/* UpdateRequest: selector and optional "pty": {"size": {cols, rows}}. */
int cx_update_decode(const char *json, size_t n, struct cx_selector *sel, int *has_pty,
                     uint32_t *cols, uint32_t *rows, char *err, size_t errlen);
/* ListRequest: an empty object. */
int cx_empty_decode(const char *json, size_t n, char *err, size_t errlen);

/* filesystem requests: Stat/MakeDir/Remove {"path"}, ListDir {"path",
 * "depth"} (0 or absent: 1; at most CX_MAX_DEPTH), Move {"source",
 * "destination"}. Paths are as sent (1..CX_MAX_PATH bytes, no NUL; empty
 * allowed: it means home), resolved later by cx_path_resolve. */
enum cx_fs_kind { CX_FS_PATH, CX_FS_LIST, CX_FS_MOVE, CX_FS_WATCH };
/* CX_FS_WATCH: WatchDir / CreateWatcher {"path", "recursive"}; includeEntry
 * and allowNetworkMounts true are refused (not served). */
struct cx_fs {
    char path[CX_MAX_PATH + 1];
    char dest[CX_MAX_PATH + 1];
    uint32_t depth;
    int recursive;
};
int cx_fs_decode(enum cx_fs_kind kind, const char *json, size_t n, struct cx_fs *out,
                 char *err, size_t errlen);

/* Go's os.FileMode bits for an entry (type bits as Go puts them: dir
 * 1<<31, symlink 1<<27, setuid 1<<23, setgid 1<<22, sticky 1<<20, other
 * 1<<19 "irregular"), and Go's FileMode.String() ("drwxr-xr-x"); perm
 * needs 16 bytes. */
uint32_t cx_go_mode(uint32_t type, uint32_t mode);
void cx_go_perm_string(uint32_t type, uint32_t mode, char perm[16]);
/* RFC 3339 UTC with nanoseconds as protobuf JSON writes a Timestamp
 * ("2026-12-02T12:00:00.123456789Z", trailing zero groups dropped);
 * out needs 40 bytes. -EINVAL out of protobuf's range (years 1..9999). */
int cx_timestamp(int64_t sec, uint32_t nsec, char out[40]);
/* One filesystem.EntryInfo as JSON (malloc'd, NULL without memory): name
 * (the last path element), type FILE_TYPE_*, path, size (a string, int64),
 * mode, permissions, owner/group (the numeric id when the guest has no
 * name for it), modifiedTime, symlinkTarget (symlinks only). NULL also
 * when a name, path, owner, group or target is not UTF-8 (JSON strings
 * cannot carry it). cx_entry_obj: the same as a jansson object (owned by
 * the caller). cx_entry_json_size: an upper bound of strlen(cx_entry_json)
 * (for budgets, computed without building it). */
char *cx_entry_json(const struct agent_stat *st);
json_t *cx_entry_obj(const struct agent_stat *st);
size_t cx_entry_json_size(const struct agent_stat *st);
/* The ProcessEvent messages of a Start/Connect stream, as the message of
 * one envelope: {"event":{"start":{"pid":N}}}, data (stdout, stderr or pty,
 * base64), end, keepalive. end: kind 0 = exited with code, 1 = killed by
 * signal (Go's exec semantics: exitCode -1, exited false, status and
 * error "signal: killed"). malloc'd, NULL without memory. */
char *cx_event_start(uint32_t pid);
enum cx_data { CX_DATA_STDOUT, CX_DATA_STDERR, CX_DATA_PTY };
/* data: {"stdout"|"stderr"|"pty": base64} as which says. */
char *cx_event_data(enum cx_data which, const void *p, size_t n);
char *cx_event_end(uint32_t kind, uint32_t value);
char *cx_event_keepalive(void);
/* WatchDirResponse messages: {"start":{}}, {"keepalive":{}}, and
 * {"filesystem":{"name":NAME,"type":"EVENT_TYPE_..."}} for an agent
 * WATCH_EVENT op (1..5; NULL for another op or a name that is not UTF-8).
 * cx_watch_event_obj: the FilesystemEvent object alone (GetWatcherEvents). */
char *cx_watch_start(void);
char *cx_watch_keepalive(void);
char *cx_watch_event(uint32_t op, const char *name);
json_t *cx_watch_event_obj(uint32_t op, const char *name);

#endif
