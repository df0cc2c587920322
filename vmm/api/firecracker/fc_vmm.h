/* Firecracker's API server, inside (vmm/api/firecracker/): the state of
 * one `moat vmm` process, the answers, and one handler per resource group
 * as Firecracker's request/ modules (boot_source.c, drives.c,
 * machine_config.c, network.c, vsock.c, entropy.c, mmds.c, snapshot.c,
 * actions.c, logger.c, metrics.c), routed by dispatch.c; http.c is the
 * HTTP glue and the API thread, config_file.c --config-file, vmm.c the
 * process's run (fc_api.h, what the CLI calls). Request bodies are decoded
 * by fc_req.c (pure). Not for use outside this folder. */
#ifndef MOAT_FC_VMM_H
#define MOAT_FC_VMM_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "include/moat.h"
#include "vmm/api/firecracker/fc_api.h"
#include "vmm/api/firecracker/fc_req.h"
#include "vmm/api/mhd_dyn.h"
#include "vmm/base/scfilter.h"

#define METRICS_PERIOD_MS 60000
#define MAX_CONNECTIONS   64

/* Per endpoint and method: requests and failures since the last metrics line. */
struct ep_count {
    uint64_t count, fails;
};

struct work;

struct fcvm {
    pthread_mutex_t lock;
    char id[65];
    /* Before boot: the configuration. */
    struct fc_machine_cfg mc;
    bool has_boot;
    struct fc_boot_source boot;
    struct fc_drive drives[MOAT_MAX_DRIVES];
    size_t ndrives;
    struct fc_net nets[FC_MAX_IFACES];
    size_t nnets;
    bool has_vsock;
    struct fc_vsock vsock;
    bool has_entropy;           /* PUT /entropy: a virtio-rng device */
    struct fc_entropy entropy;
    bool has_mmds_cfg;
    struct fc_mmds_config mmds_cfg;
    char *mmds_doc;
    size_t body_limit;          /* --http-api-max-payload-size */
    size_t mmds_limit;          /* --mmds-size-limit (default: body_limit) */
    bool configured;            /* a boot resource was set: no snapshot load */
    bool has_logger, has_metrics;
    struct fc_logger logger;
    struct fc_metrics metrics;
    int metrics_fd;
    /* After InstanceStart or /snapshot/load. */
    struct moat_vm *vm;
    bool started, paused;
    int wake_fd;                /* eventfd: the main loop looks at vm again */
    /* Metrics. */
    struct ep_count counts[FC_EP_HOTPLUG + 1][FC_PATCH + 1];
    int64_t lat_us[5];          /* -1: not measured since the last line */
    uint64_t metrics_lines;
    int64_t startup_us, startup_cpu_us;   /* api_server's figures; -1: no --start-time-* */
    struct fc_net_counts net_prev[FC_MAX_IFACES];   /* at the last metrics line */
    struct fc_blk_counts blk_prev[MOAT_MAX_DRIVES]; /* at the last metrics line, by s->drives index */
    uint64_t blk_updates[MOAT_MAX_DRIVES], blk_update_fails[MOAT_MAX_DRIVES];  /* path swaps, since then */
    int inflight;               /* requests begun and not yet answered (atomic) */
    /* Seccomp: MOAT_F_SECCOMP(_AUDIT) for the VM, 0 with --no-seccomp;
     * whether the main thread has its own filter yet. */
    uint32_t sc_flags;
    bool main_filtered;
    /* The request the API thread handed to the main thread (http.c). */
    pthread_mutex_t hlock;
    pthread_cond_t hcond;
    struct work *pending;
    bool closing;               /* the main thread serves no more requests */
};

enum { LAT_FULL_SNAP, LAT_DIFF_SNAP, LAT_LOAD, LAT_PAUSE, LAT_RESUME };

/* ---- logs: Firecracker's line format (logger.c) ---- */

struct fc_log {
    pthread_mutex_t lock;
    int fd;                     /* -1: stderr */
    enum fc_level level;
    bool show_level, show_origin;
    char id[65];
    uint64_t lost;              /* lines a full or failing log lost */
};
/* The process's log (one per `moat vmm` process, as Firecracker's). */
extern struct fc_log fc_flog;

/* "<time> [<id>:<thread>(:<LEVEL>)(:<file>:<line>)] <msg>", one write. */
void fc_logf(enum fc_level lvl, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define LOG(lvl, ...) fc_logf(lvl, __FILE__, __LINE__, __VA_ARGS__)
/* libmoat's messages into the same log (a moat_set_log callback). */
void fc_lib_log(void *opaque, int level, const char *msg);
/* A log or metrics file, opened for appending: the fd or -1 (errno). */
int fc_open_sink(const char *path);

/* ---- responses (dispatch.c) ---- */

struct reply {
    unsigned status;
    char *body;                 /* malloc'd JSON, or NULL (204) */
};

/* 400 {"fault_message": msg}; returns 400. */
unsigned fc_fault(struct reply *r, const char *msg);
unsigned fc_faultf(struct reply *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* 200 and j (taken) as compact JSON; 400 "out of memory" if it cannot be. */
unsigned fc_ok_json(struct reply *r, json_t *j);

extern const char fc_not_after_boot[], fc_not_before_boot[];

/* ---- the routes: one handler per resource group ---- */

#define FC_WHY_LEN 600
/* One routed request: the decoders' scratch space comes with it. */
struct fc_call {
    enum fc_method m;
    const char *id;             /* /drives/{id}, /network-interfaces/{id}; else NULL */
    const char *body;
    size_t len;
    union fc_body *u;           /* zeroed: where the body is decoded */
    char *why;                  /* FC_WHY_LEN bytes: a decoder's fault */
};
/* Each answers into rep (its status, a fault's body) and returns the status;
 * s->lock held. */
typedef unsigned fc_route_fn(struct fcvm *s, const struct fc_call *c, struct reply *rep);
fc_route_fn fc_ep_machine_config, fc_ep_vm_config;     /* machine_config.c */
fc_route_fn fc_ep_boot_source;                         /* boot_source.c */
fc_route_fn fc_ep_drives;                              /* drives.c */
fc_route_fn fc_ep_net;                                 /* network.c */
fc_route_fn fc_ep_vsock;                               /* vsock.c */
fc_route_fn fc_ep_entropy;                             /* entropy.c */
fc_route_fn fc_ep_actions;                             /* actions.c */
fc_route_fn fc_ep_vm, fc_ep_snap_create, fc_ep_snap_load;   /* snapshot.c */
fc_route_fn fc_ep_mmds, fc_ep_mmds_config;             /* mmds.c */
fc_route_fn fc_ep_logger;                              /* logger.c */
fc_route_fn fc_ep_metrics;                             /* metrics.c */

/* One request by endpoint (dispatch.c); s->lock held. */
unsigned fc_dispatch(struct fcvm *s, enum fc_ep ep, enum fc_method m, const char *id, const char *body,
                     size_t len, struct reply *rep);

/* What the routes share. */
unsigned fc_instance_start(struct fcvm *s, struct reply *rep);                       /* actions.c */
/* Append ",key=\"value\"" (value checked by fc_opt_safe) to buf. */
int fc_opt_add(char *buf, size_t cap, const char *key, const char *value, bool quote);  /* actions.c */
bool fc_mmds_on(const struct fcvm *s, const char *iface);                            /* mmds.c */
unsigned fc_put_logger(struct fcvm *s, const struct fc_logger *l, struct reply *rep);  /* logger.c */
unsigned fc_put_metrics(struct fcvm *s, const struct fc_metrics *m, struct reply *rep); /* metrics.c */
/* One metrics line now; s->lock held. 0 or -errno. */
int fc_flush_metrics(struct fcvm *s);                                                  /* metrics.c */
/* --metadata FILE: the MMDS data store's first contents (as PUT /mmds).
 * 0, or an exit code after a line on stderr. */
int fc_load_metadata(struct fcvm *s, const char *path);                              /* mmds.c */
/* --config-file FILE: its sections, then InstanceStart; s->lock held. 0,
 * or -EINVAL after a line on stderr and in the log. */
int fc_config_boot(struct fcvm *s, const char *path);                                /* config_file.c */

/* ---- requests: from the API thread to the main thread (http.c) ---- */

/* On the main thread: do the request handed over, if any. */
void fc_serve_pending(struct fcvm *s);
/* On the main thread, leaving: no more requests; one handed over and not
 * done is refused. */
void fc_close_requests(struct fcvm *s);
/* libmicrohttpd's callbacks; cls is the fcvm. */
enum MHD_Result fc_on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **con_cls);
void fc_on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode t);

/* libmicrohttpd without an internal thread (MHD_USE_EPOLL: its epoll set
 * holds the listening socket and every connection), polled by the API
 * thread, whose filter is in before the first accept. */
struct api {
    struct MHD_Daemon *d;
    int quit_fd;                /* eventfd: the main thread asks it to stop */
    enum sc_mode mode;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool ready;
    int start_r;
};
/* Start the API thread on d; 0 once its filter is in, or -errno. */
int fc_api_start(struct api *a, struct MHD_Daemon *d, enum sc_mode mode);
/* Stop it: it stops the daemon (closing every connection and the
 * listening socket) and ends. */
void fc_api_stop(struct api *a);

#endif
