/* `moat serve`'s REST requests (docs/serve.md): the route (method + path
 * -> endpoint and sandbox/template id), each JSON body decoded strictly
 * into a struct (a known field of the wrong type, a value out of range, a
 * missing required field or an option moat cannot honour is refused with
 * a message naming it; fields E2B's SDK may send that change nothing here
 * are accepted and ignored), the list queries, ADDR:PORT, and a sandbox's
 * serve.json. Pure functions (no I/O): unit tests in
 * tests/unit/test_serve_req.c, fuzz target tests/fuzz/fuzz_serve_req.c.
 * The server that calls them is vmm/api/e2b/serve_api.c. */
#ifndef MOAT_SERVE_REQ_H
#define MOAT_SERVE_REQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define SERVE_BODY_MAX      65536   /* a request body larger than this: 413 */
#define SERVE_ID_MAX        63      /* a sandbox id is a moat sandbox name (docs/sandboxes.md) */
#define SERVE_TEMPLATE_MAX  54      /* a template NAME: its sandbox is "template.NAME" (63 bytes) */
#define SERVE_TIMEOUT_MAX   86400   /* seconds: E2B's longest (Pro) sandbox lifetime */
#define SERVE_DEFAULT_TIMEOUT 300   /* seconds, when a create or fork gives none (E2B's default) */
#define SERVE_FORK_MAX      16      /* children of one fork request */
#define SERVE_META_MAX      64      /* metadata entries / envVars entries */
#define SERVE_KEY_MAX       256     /* bytes of a metadata key or an envVars name */
#define SERVE_VAL_MAX       4096    /* bytes of a metadata value or an envVars value */
#define SERVE_LIST_MAX      100     /* a list page: E2B's default and largest limit */
#define SERVE_TOKEN_LEN     32      /* hex characters of an envdAccessToken */
#define SERVE_ENVD_VERSION  "0.5.7" /* the envd version moat reports (docs/serve.md) */
#define SERVE_NET_MAX       16      /* entries of network.allowOut, and of network.denyOut */
#define SERVE_POLICY_MAX    2048    /* bytes of the egress policy text made from them */

enum serve_ep {
    SV_CREATE = 1,      /* POST /v2/sandboxes (and the older POST /sandboxes) */
    SV_LIST,            /* GET /v2/sandboxes (and GET /sandboxes) */
    SV_CONNECT,         /* POST /v2/sandboxes/{id}/connect, POST /sandboxes/{id}/resume */
    SV_KILL,            /* DELETE /sandboxes/{id} */
    SV_INFO,            /* GET /sandboxes/{id} */
    SV_TIMEOUT,         /* POST /sandboxes/{id}/timeout */
    SV_PAUSE,           /* POST /sandboxes/{id}/pause */
    SV_SNAPSHOT,        /* POST /sandboxes/{id}/snapshots */
    SV_SNAPSHOTS,       /* GET /snapshots */
    SV_FORK,            /* POST /sandboxes/{id}/fork */
    SV_METRICS,         /* GET /sandboxes/{id}/metrics */
    SV_TEMPLATE_DELETE, /* DELETE /templates/{id} (the SDK's deleteSnapshot) */
    SV_HEALTH,          /* GET /health (no API key needed) */
};

/* method + path (no query) -> *ep and, for the routes with one, the id
 * (a valid moat sandbox name, or a template name for
 * SV_TEMPLATE_DELETE). 0; -ENOENT: no such path (404, why says so);
 * -EINVAL: a known path with another method (405) or a malformed id
 * (400; why says which). */
int serve_route(const char *method, const char *path, enum serve_ep *ep, char *id, size_t idlen, char *why,
                size_t wlen);

/* A moat sandbox name (docs/sandboxes.md Names): 1-63 of A-Z a-z 0-9 - _ .,
 * starting with a letter or digit. */
bool serve_valid_name(const char *s);
/* E2B template and snapshot names ("team/name:tag") as moat template
 * names: a name that is one already is itself; one of A-Z a-z 0-9 - _ . /
 * : (starting with a letter or digit) that has a '/' or ':' is written with
 * '/', ':' and '_' as "_2f", "_3a", "_5f" ("team_2fname_3atag"). 0, or
 * -EINVAL (another name, or one whose moat form is over
 * SERVE_TEMPLATE_MAX bytes). out: SERVE_TEMPLATE_MAX + 1 bytes. */
int serve_e2b_name_in(const char *in, char *out);
/* The name to show for a moat template name: the E2B form when it is one
 * serve_e2b_name_in wrote (it has "_2f" or "_3a" and every '_' starts one
 * of the three escapes), else the name itself. out: 3 * SERVE_TEMPLATE_MAX
 * bytes is always enough (n: its size). */
void serve_e2b_name_out(const char *moat, char *out, size_t n);
/* A template name: a valid name of at most SERVE_TEMPLATE_MAX bytes. */
bool serve_valid_template(const char *s);

struct serve_create {
    char template_id[SERVE_TEMPLATE_MAX + 1];
    uint32_t timeout;           /* seconds; SERVE_DEFAULT_TIMEOUT when absent */
    bool auto_pause, auto_resume;
    int internet;               /* allow_internet_access: -1 absent, 0 false, 1 true */
    json_t *metadata;           /* an object of strings (may be empty); owned */
    json_t *env;                /* likewise, names valid environment variable names */
    json_t *network;            /* {"allowOut": [CIDR...], "denyOut": [CIDR...]}, canonical; owned */
};
/* The body of POST /v2/sandboxes. 0 or -EINVAL with why; on success the
 * caller frees with serve_create_free. */
int serve_decode_create(const char *body, size_t len, struct serve_create *c, char *why, size_t wlen);
void serve_create_free(struct serve_create *c);

/* The egress policy (docs/net.md's policy text) for allow_internet_access
 * (internet: -1 absent, 0, 1) and network (serve_create's; NULL: none):
 * "default allow" only when internet is 1 and denyOut has no /0 entry,
 * else "default deny"; each allowOut entry an allow rule, each other
 * denyOut entry a deny rule. 0, or -EINVAL / -E2BIG with why. */
int serve_net_policy(int internet, const json_t *network, char *buf, size_t len, char *why, size_t wlen);

/* {"timeout"?: N, "memory"?: bool} (connect), {"timeout": N} (timeout,
 * required), {"memory"?: bool} (pause; an empty body is {}). *timeout is
 * 0 when absent (connect). A memory:false (a filesystem-only resume or
 * pause) is refused: moat keeps memory. */
int serve_decode_connect(const char *body, size_t len, uint32_t *timeout, char *why, size_t wlen);
int serve_decode_timeout(const char *body, size_t len, uint32_t *timeout, char *why, size_t wlen);
int serve_decode_pause(const char *body, size_t len, char *why, size_t wlen);
/* {"timeout"?: N, "count"?: 1..SERVE_FORK_MAX (default 1)} */
int serve_decode_fork(const char *body, size_t len, uint32_t *timeout, unsigned *count, char *why, size_t wlen);
/* {"name"?: template name} -> name ("" when absent) */
int serve_decode_snapshot(const char *body, size_t len, char *name, size_t nlen, char *why, size_t wlen);

/* GET /v2/sandboxes and GET /snapshots: one query argument at a time
 * (as the HTTP server decoded it), then the whole. */
struct serve_list_q {
    bool running, paused;       /* state=: both when none given */
    bool state_given;
    json_t *metadata;           /* metadata=k=v&k2=v2: every pair must match; owned, NULL: none */
    char template_id[SERVE_TEMPLATE_MAX + 1];   /* template= ("" any) */
    char sandbox_id[SERVE_ID_MAX + 1];          /* sandboxID= (snapshots) */
    char name[SERVE_TEMPLATE_MAX + 1];          /* name= (snapshots) */
    double started_after;       /* startedAfter= as Unix seconds; 0 none */
    unsigned limit;             /* 1..SERVE_LIST_MAX, default SERVE_LIST_MAX */
    char next[SERVE_ID_MAX + 1];   /* nextToken=: the last id of the page before ("" first page) */
    int64_t next_usec;          /* and its start time (an ordered listing's token "ID~USEC"); -1: none */
    int order;                  /* order=: 1 asc, -1 desc by start time; 0 (none): by id */
};
#define SERVE_NEXT_MAX (SERVE_ID_MAX + 24)
/* An ordered listing's page token: "ID~USEC", USEC the last sandbox's
 * start time in microseconds (serve_usec; out: SERVE_NEXT_MAX + 1 bytes). */
void serve_next_make(const char *id, int64_t usec, char *out, size_t n);
/* A start time in the microseconds tokens and the ordering use. */
int64_t serve_usec(double t);
/* Where (ta, ia) goes before (tb, ib) in a listing of order (1 asc, -1
 * desc by start time; ties by id ascending): < 0, 0 (the same), > 0. */
int serve_list_order_cmp(int order, int64_t ta, const char *ia, int64_t tb, const char *ib);
void serve_list_init(struct serve_list_q *q);
int serve_list_arg(struct serve_list_q *q, const char *key, const char *value, char *why, size_t wlen);
void serve_list_free(struct serve_list_q *q);
/* Does a sandbox's metadata object match q's metadata filter? */
bool serve_list_meta_match(const struct serve_list_q *q, const json_t *metadata);

/* "ADDR:PORT" (IPv4 dotted quad, or [IPv6]) -> addr text and port 1..65535. */
int serve_parse_hostport(const char *s, char *addr, size_t alen, unsigned *port, char *why, size_t wlen);

/* A sandbox's $MOAT_HOME/NAME/serve.json: what moat serve keeps about it. */
struct serve_state {
    char template_id[SERVE_TEMPLATE_MAX + 1];
    char token[SERVE_TOKEN_LEN + 1];        /* envdAccessToken */
    char client_id[SERVE_TOKEN_LEN + 1];
    double started_at;          /* Unix seconds */
    double deadline;            /* Unix seconds; 0: none (paused) */
    uint32_t timeout;           /* seconds, the last one asked for */
    bool auto_pause, auto_resume;
    int internet;               /* as serve_create */
    json_t *metadata, *env;     /* objects of strings; owned */
    json_t *network;            /* as serve_create (NULL: none given; serve.json before it had one) */
    bool net_device;            /* the sandbox has a network device, its policy set by moat serve */
};
/* Text -> state, strictly (every field present and of its type). */
int serve_state_decode(const char *text, size_t len, struct serve_state *st, char *why, size_t wlen);
/* state -> a malloc'd JSON text (NULL: no memory). */
char *serve_state_encode(const struct serve_state *st);
void serve_state_free(struct serve_state *st);

/* A Unix time as E2B's RFC 3339 text ("2026-12-02T12:00:00.000Z"). */
void serve_time_text(double t, char *buf, size_t len);
/* Constant-time comparison of two NUL-terminated secrets. */
bool serve_secret_eq(const char *a, const char *b);

#endif
