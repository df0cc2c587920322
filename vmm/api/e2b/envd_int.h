/* envd's inside (vmm/api/e2b/): what serve_envd.c (the requests, the
 * libmicrohttpd glue, start/stop), envd_agent.c (agent connections),
 * envd_process.c (process.Process, the janitor), envd_fs.c
 * (filesystem.Filesystem), envd_watch.c (WatchDir) and envd_files.c
 * (/files: downloads, uploads) share. Not for use outside this folder. */
#ifndef MOAT_ENVD_INT_H
#define MOAT_ENVD_INT_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "vmm/agent/agent_client.h"
#include "vmm/agent/agent_proto.h"
#include "vmm/api/e2b/serve_connect.h"
#include "vmm/api/e2b/serve_envd.h"
#include "vmm/api/mhd_dyn.h"

#define ENVD_HOME        "/root"        /* the agent runs as root */
#define SB_MAX           128            /* sandbox id bytes + NUL */
#define TOKEN_MAX        512
#define OP_TIMEOUT_MS    30000          /* default envd_opts.op_timeout_ms */
#define START_BUF_MAX    (4u << 20)     /* output buffered before a process's start event */
#define KEEPALIVE_MAX_S  30             /* keepalives at least this often */
#define CONN_TIMEOUT_S   60             /* MHD: idle connections closed */
#define MAX_CONNS        512
#define DEFAULT_BODY     (1u << 20)
#define DEFAULT_INFLATE  (1ull << 30)   /* envd_opts.max_inflate: a gzip upload's decoded bytes */
#define EXEC_ID          1u
#define PING_ID          2u

/* An agent connection in use, cut by forget/stop. */
struct live {
    struct live *next;
    char sb[SB_MAX];
    int fd;
    atomic_int cancelled;
};

struct proc {
    struct proc *next;
    int refs;                   /* server lock */
    int in_table;               /* server lock */
    int attached;               /* server lock: a stream (1) or the janitor (2) reads it */
    int connecting;             /* server lock: Connect calls waiting for it (the janitor lets go) */
    char sb[SB_MAX];
    uint32_t pid;
    char *tag;
    json_t *config;             /* ProcessConfig for List */
    int stdin_on;
    int pty;                    /* started with a pty: output is data.pty, input input.pty */
    struct agent_client ac;     /* frames read only by the attached stream */
    pthread_mutex_t wlock;      /* writes to ac.fd */
    struct live live;
};

struct envd_server {
    struct MHD_Daemon *d;
    struct envd_opts o;
    pthread_mutex_t lock;
    struct proc *procs;
    struct live *lives;
    uint32_t next_pid;
    atomic_int stopping;
    pthread_t janitor;
};

enum route {
    R_NONE, R_HEALTH, R_FILES_GET, R_FILES_POST,
    /* Connect unary */
    R_LIST, R_SEND_SIGNAL, R_SEND_INPUT, R_CLOSE_STDIN, R_UPDATE, R_STREAM_INPUT,
    R_STAT, R_MAKE_DIR, R_MOVE, R_LIST_DIR, R_REMOVE, R_WATCH_UNARY,
    /* Connect server streams */
    R_START, R_CONNECT, R_WATCH_DIR,
};

struct upload;

struct req {
    enum route route;
    int answered;               /* a response is queued */
    char sb[SB_MAX];
    char vsock[108];
    int hybrid;
    char **envs;
    size_t nenvs;
    uint8_t *body;
    size_t blen, bcap;
    int too_big;
    struct upload *up;
};

/* envd_agent.c */
void envd_live_add(struct envd_server *s, struct live *l, const char *sb, int fd);
void envd_live_del(struct envd_server *s, struct live *l);
int envd_ag_send(struct agent_client *c, pthread_mutex_t *lk, const struct agent_buf *b);
int envd_ag_next(struct agent_client *c, struct agent_hdr *h, const uint8_t **pl, int timeout_ms,
                 struct live *lv, int client_fd);
int envd_ag_call(struct agent_client *c, struct live *lv, const struct agent_buf *frame, uint32_t id,
                 int *eno, char *msg, size_t ml);

/* serve_envd.c: answers, and the request's agent connection */
enum MHD_Result envd_reply(struct MHD_Connection *c, unsigned status, const char *ctype, const void *body,
                           size_t len);
enum MHD_Result envd_reply_rest_error(struct MHD_Connection *c, unsigned status, const char *msg);
enum MHD_Result envd_reply_cx(struct MHD_Connection *c, enum cx_code code, const char *msg);
enum MHD_Result envd_reply_stream_error(struct MHD_Connection *c, enum cx_code code, const char *msg);
enum MHD_Result envd_reply_ok_json(struct MHD_Connection *c, json_t *j);
int envd_agent_open(struct envd_server *s, struct req *q, struct agent_client *ac);

/* envd_process.c */
void envd_proc_unref(struct envd_server *s, struct proc *p);
enum MHD_Result envd_do_start(struct envd_server *s, struct MHD_Connection *c, struct req *q, const char *msg,
                              size_t mlen);
enum MHD_Result envd_do_connect(struct envd_server *s, struct MHD_Connection *c, struct req *q, const char *msg,
                                size_t mlen);
enum MHD_Result envd_do_list(struct envd_server *s, struct MHD_Connection *c, struct req *q);
enum MHD_Result envd_do_proc_frame(struct envd_server *s, struct MHD_Connection *c, struct req *q,
                                   const char *msg, size_t mlen);
enum MHD_Result envd_do_update(struct envd_server *s, struct MHD_Connection *c, struct req *q, const char *msg,
                               size_t mlen);
void *envd_janitor_main(void *arg);
/* A stream's Keepalive-Ping-Interval (at most KEEPALIVE_MAX_S), the next
 * keepalive's time, its Connect-Timeout-Ms deadline (0: none) and the
 * client's socket (-1: unknown). */
void envd_stream_timing(struct MHD_Connection *c, int64_t *ka_every, int64_t *next_ka, int64_t *deadline,
                        int *client_fd);

/* envd_fs.c */
int envd_parent_of(const char *path, char *out, size_t n);
enum MHD_Result envd_do_fs(struct envd_server *s, struct MHD_Connection *c, struct req *q, const char *msg,
                           size_t mlen);

/* envd_watch.c: WatchDir */
enum MHD_Result envd_do_watch(struct envd_server *s, struct MHD_Connection *c, struct req *q, const char *msg,
                              size_t mlen);

/* envd_files.c */
enum MHD_Result envd_do_download(struct envd_server *s, struct MHD_Connection *c, struct req *q);
int envd_up_start(struct envd_server *s, struct MHD_Connection *c, struct req *q);
void envd_up_input(struct upload *u, const char *data, size_t n);
void envd_up_free(struct upload *u);
enum MHD_Result envd_up_finish(struct MHD_Connection *c, struct req *q);

#endif
