/* moat serve's REST side (docs/serve.md): E2B's sandbox API (the routes
 * of vmm/api/e2b/serve_req.c) over moat's named sandboxes, a reaper thread for
 * timeouts, and the resolver the envd module (vmm/api/e2b/serve_envd.h) asks
 * for a sandbox's vsock socket.
 *
 * rm, stop, resume, fork, start, the egress policy (net ... policy) and
 * template create|rm call the sandbox library (vmm/sandbox/) in-process,
 * on the request's thread (no serve lock held); the VM processes fork,
 * start and a template's create make are this process's children, reaped
 * by the reaper thread (or by the stop that follows a template's create).
 * The sandbox directory locks order steps on one sandbox. What serve keeps about a sandbox is in
 * $MOAT_HOME/NAME/serve.json, so a restarted serve takes over its
 * sandboxes and `moat ls` shows them. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include "vmm/api/mhd_dyn.h"
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "vmm/base/fullio.h"
#include "vmm/api/e2b/serve_api.h"
#include "vmm/api/e2b/serve_metrics.h"
#include "vmm/api/e2b/serve_envd.h"
#include "vmm/api/e2b/serve_req.h"
#include "vmm/sandbox/device.h"
#include "vmm/sandbox/fork.h"
#include "vmm/sandbox/sandbox.h"
#include "vmm/sandbox/template.h"
#include "vmm/sandbox/start.h"

#define TEMPLATE_PREFIX "template."
#define AGENT_WAIT 60.0             /* seconds a fork or start waits for the guest agent */
#define BASE_WAIT 300.0             /* seconds: building `base` boots the default guest */

struct serve {
    char home[3001];                /* $MOAT_HOME: at most 3000 bytes */
    serve_state_fn sandbox_state;   /* a sandbox's state by name (serve_opts) */
    char api_key[256];
    struct MHD_Daemon *api;
    struct envd_server *envd;
    pthread_mutex_t lock;           /* serve.json read-modify-write */
    pthread_mutex_t tpl_lock;       /* building the base template */
    pthread_t reaper;
    bool reaper_on;
    pthread_mutex_t rlock;
    pthread_cond_t rcond;
    bool stopping;
    double reap_interval;
    /* The VM processes this server started (sandbox_start, sandbox_fork:
     * its children), reaped by the reaper once they exit. */
    pthread_mutex_t vm_lock;
    pid_t *vms;
    size_t nvm, vm_cap;
    /* Metrics kept per sandbox (serve_metrics.h), sampled by the reaper. */
    pthread_mutex_t m_lock;
    struct mseries *series;
    double next_sample;             /* Unix seconds */
};

struct mseries {
    struct mseries *next;
    char id[SERVE_ID_MAX + 1];
    double last_cpu, last_t;        /* the sandbox's CPU seconds at last_t (0: none yet) */
    struct serve_ring ring;
};

/* ---- small helpers ---- */

static double now_unix(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int random_bytes(void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = getrandom((char *)buf + got, n - got, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -errno;
        got += (size_t)k;
    }
    return 0;
}

/* n random characters of [a-z0-9] (rejection sampling: no bias). */
static int random_id(char *out, size_t n)
{
    static const char al[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    size_t i = 0;
    while (i < n) {
        unsigned char b[32];
        if (random_bytes(b, sizeof b) < 0)
            return -EIO;
        for (size_t k = 0; k < sizeof b && i < n; k++)
            if (b[k] < 252)
                out[i++] = al[b[k] % 36];
    }
    out[n] = 0;
    if (out[0] >= '0' && out[0] <= '9')     /* E2B's ids start with a letter */
        out[0] = al[(unsigned char)out[0] % 26];
    return 0;
}

static int random_hex(char *out, size_t nchars)
{
    unsigned char b[64];
    if (nchars / 2 > sizeof b || random_bytes(b, nchars / 2) < 0)
        return -EIO;
    for (size_t i = 0; i < nchars / 2; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
    out[nchars] = 0;
    return 0;
}

static void path_of(const struct serve *s, const char *name, const char *file, char *p, size_t len)
{
    snprintf(p, len, "%s/%s%s%s", s->home, name, file ? "/" : "", file ? file : "");
}

/* A file's whole contents (at most max bytes) into a malloc'd string. */
static char *read_text(const char *path, size_t max, size_t *lenp)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    char *b = malloc(max + 1);
    size_t len = 0;
    ssize_t k;
    while (b && len < max && (k = read(fd, b + len, max - len)) > 0)
        len += (size_t)k;
    close(fd);
    if (b) {
        b[len] = 0;
        if (lenp)
            *lenp = len;
    }
    return b;
}

static int write_atomic(const char *path, const char *text, mode_t mode)
{
    char tmp[PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s.new", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        return -errno;
    ssize_t k = write_full(fd, text, strlen(text));
    if (k < 0) {
        close(fd);
        unlink(tmp);
        return (int)k;
    }
    if (fsync(fd) < 0 || close(fd) < 0 || rename(tmp, path) < 0) {
        int e = errno;
        unlink(tmp);
        return -e;
    }
    return 0;
}

/* ---- the sandbox library (vmm/sandbox/), in-process ---- */

/* What the CLI printed of n library errors (in that order) as a child
 * moat running the same step gave it (serve ran one for each step before
 * the library had them): each line of a message as "moat:
 * LINE", an SBX_VERBATIM line as it is; serve kept the last line of
 * that (trailing newlines and blanks cut), cut to fit why. */
static void sbx_why_of(const struct sbx_err *const *e, size_t n, char *why, size_t wlen)
{
    if (!wlen)
        return;
    why[0] = 0;
    const char *last = NULL;
    size_t llen = 0;
    bool raw = false;
    for (size_t i = 0; i < n; i++)
        for (const char *m = e[i]->msg; *m;) {
            size_t l = strcspn(m, "\n");
            bool v = *m == SBX_VERBATIM;
            size_t k = l - v;
            while (k && m[v + k - 1] == ' ')
                k--;
            if (!v || k) {      /* a line left once blanks are cut */
                last = m + v;
                llen = k;
                raw = v;
            }
            m += l + (m[l] == '\n');
        }
    if (!last)
        return;         /* the CLI printed nothing */
    char line[sizeof e[0]->msg + 8];
    int k = snprintf(line, sizeof line, "%s%.*s", raw ? "" : "moat: ", (int)llen, last);
    size_t l = k < 0 ? 0 : (size_t)k < sizeof line ? (size_t)k : sizeof line - 1;
    while (l && line[l - 1] == ' ')
        line[--l] = 0;
    l = l < wlen - 1 ? l : wlen - 1;    /* cut to fit, as before */
    memcpy(why, line, l);
    why[l] = 0;
}

static void sbx_why(const struct sbx_err *e, char *why, size_t wlen)
{
    sbx_why_of(&e, 1, why, wlen);
}

/* Keep pid (a VM process just started) for the reaper to reap. */
static void vm_started(struct serve *s, pid_t pid)
{
    if (pid <= 0)
        return;
    pthread_mutex_lock(&s->vm_lock);
    if (s->nvm == s->vm_cap) {
        size_t cap = s->vm_cap ? 2 * s->vm_cap : 64;
        pid_t *v = realloc(s->vms, cap * sizeof *v);
        if (v) {
            s->vms = v;
            s->vm_cap = cap;
        }
    }
    if (s->nvm < s->vm_cap)
        s->vms[s->nvm++] = pid;
    pthread_mutex_unlock(&s->vm_lock);
}

/* Reap the VM processes of ours that have exited. */
static void vm_reap(struct serve *s)
{
    pthread_mutex_lock(&s->vm_lock);
    for (size_t i = 0; i < s->nvm;) {
        pid_t r = waitpid(s->vms[i], NULL, WNOHANG);
        if (r == s->vms[i] || (r < 0 && errno == ECHILD))
            s->vms[i] = s->vms[--s->nvm];
        else
            i++;
    }
    pthread_mutex_unlock(&s->vm_lock);
}

/* moat start --wait W ID, in-process: 0 or -1 with why (may be NULL). */
static int sbx_start(struct serve *s, const char *id, double wait, char *why, size_t wlen)
{
    struct sbx_err e = { 0 };
    struct sbx_start_opts o = { .wait = wait };
    pid_t vm = 0;
    int r = sandbox_start(id, &o, NULL, &vm, &e);
    vm_started(s, vm);
    if (why)
        sbx_why(&e, why, wlen);
    return r < 0 ? -1 : 0;
}

/* moat fork PARENT (--name CHILD | --count N --prefix P) --wait W,
 * in-process: kids (o->count) filled, 0 or -1 with why (may be NULL). */
static int sbx_fork(struct serve *s, const char *parent, const struct sbx_fork_opts *o,
                    struct sbx_fork_child *kids, char *why, size_t wlen)
{
    struct sbx_err e = { 0 };
    int r = sandbox_fork(parent, o, kids, &e);
    const struct sbx_err **said = calloc(o->count + 1, sizeof *said);
    size_t *order = calloc(o->count, sizeof *order);
    for (unsigned long i = 0; i < o->count; i++)
        vm_started(s, kids[i].pid);
    if (why && said && order) {
        size_t m = sandbox_fork_told(kids, o->count, order);
        for (size_t j = 0; j < m; j++)
            said[j] = &kids[order[j]].err;
        said[m] = &e;
        sbx_why_of(said, m + 1, why, wlen);
    } else if (why) {
        sbx_why(&e, why, wlen);
    }
    free(said);
    free(order);
    return r < 0 ? -1 : 0;
}

/* moat rm -f ID, in-process: 0 or -1 with why (may be NULL). */
static int sbx_rm(const char *id, char *why, size_t wlen)
{
    struct sbx_err e = { 0 };
    int r = sandbox_remove(id, 1, &e);
    if (why)
        sbx_why(&e, why, wlen);
    return r < 0 ? -1 : 0;
}

/* moat template create NAME ..., in-process: 0 or -1 with why. */
static int sbx_template_create(const char *name, const struct sbx_template_opts *to, char *why, size_t wlen)
{
    struct sbx_err e = { 0 };
    struct sbx_template_res res;
    int r = sandbox_template_create(name, to, &res, &e);
    sbx_why(&e, why, wlen);
    return r < 0 ? -1 : 0;
}

/* moat template rm NAME, in-process: 0 or -1 with why. */
static int sbx_template_rm(const char *name, char *why, size_t wlen)
{
    struct sbx_err e = { 0 };
    int r = sandbox_template_remove(name, &e);
    sbx_why(&e, why, wlen);
    return r < 0 ? -1 : 0;
}

/* moat stop ID, in-process: 0 or -1 with why (may be NULL). */
static int sbx_stop(const char *id, char *why, size_t wlen)
{
    struct sbx_err e = { 0 };
    enum sbx_state was;
    int r = sandbox_stop(id, NULL, NULL, &was, &e);
    if (why)
        sbx_why(&e, why, wlen);
    return r < 0 ? -1 : 0;
}

/* ---- serve.json ---- */

/* 0, -ENOENT (not a sandbox of this server), -EINVAL (unreadable). */
static int load_state(const struct serve *s, const char *id, struct serve_state *st)
{
    char p[PATH_MAX], why[200];
    path_of(s, id, "serve.json", p, sizeof p);
    size_t len;
    char *t = read_text(p, 1 << 20, &len);
    if (!t)
        return errno == ENOENT ? -ENOENT : -EIO;
    int r = serve_state_decode(t, len, st, why, sizeof why);
    free(t);
    if (r < 0)
        fprintf(stderr, "moat serve: %s: %s\n", p, why);
    return r;
}

static int save_state(const struct serve *s, const char *id, const struct serve_state *st)
{
    char p[PATH_MAX];
    path_of(s, id, "serve.json", p, sizeof p);
    char *t = serve_state_encode(st);
    if (!t)
        return -ENOMEM;
    int r = write_atomic(p, t, 0600);
    free(t);
    return r;
}

/* The template T's marker: 1 with an agent, 0 without, -ENOENT none. */
static int template_agent(const struct serve *s, const char *tpl)
{
    char name[SERVE_ID_MAX + 16], p[PATH_MAX];
    snprintf(name, sizeof name, TEMPLATE_PREFIX "%s", tpl);
    path_of(s, name, "template", p, sizeof p);
    char *t = read_text(p, 4096, NULL);
    if (!t)
        return -ENOENT;
    int a = strstr(t, "agent=0") ? 0 : 1;
    free(t);
    return a;
}

/* The sandbox's --mem / --cpus from its config (moat run's defaults). */
static void sandbox_size(const struct serve *s, const char *id, unsigned *mem_mib, unsigned *cpus,
                         unsigned long long *disk_size, unsigned long long *disk_used)
{
    char p[PATH_MAX];
    *mem_mib = 256;
    *cpus = 1;
    *disk_size = *disk_used = 0;
    path_of(s, id, "config", p, sizeof p);
    char *t = read_text(p, 65536, NULL);
    for (char *l = t; l && *l;) {
        char *nl = strchr(l, '\n');
        if (nl)
            *nl = 0;
        if ((!strcmp(l, "arg=--mem") || !strcmp(l, "arg=--cpus")) && nl && !strncmp(nl + 1, "arg=", 4)) {
            unsigned long v = strtoul(nl + 5, NULL, 10);
            if (v > 0 && v < 1u << 24)
                *(l[6] == 'm' ? mem_mib : cpus) = (unsigned)v;
        }
        l = nl ? nl + 1 : NULL;
    }
    free(t);
    for (unsigned n = 0; n < 16; n++) {
        char f[32];
        struct stat st;
        snprintf(f, sizeof f, "disk%u.overlay", n);
        path_of(s, id, f, p, sizeof p);
        if (stat(p, &st) < 0)
            break;
        *disk_size += (unsigned long long)st.st_size;
        *disk_used += (unsigned long long)st.st_blocks * 512;
    }
}

/* E2B's two states from moat's: a stopped sandbox is "paused"; running,
 * vCPU-paused and unresponsive ones are "running"; NULL for a dead one
 * (or none). */
static const char *e2b_state(const char *moat_state)
{
    if (!strcmp(moat_state, "stopped"))
        return "paused";
    if (!strcmp(moat_state, "dead"))
        return NULL;
    return "running";
}

/* ---- responses ---- */

struct out {
    unsigned status;
    json_t *body;           /* NULL: no body */
    char next[SERVE_NEXT_MAX + 1];   /* X-Next-Token */
};

__attribute__((format(printf, 3, 4))) static void fail(struct out *o, unsigned status, const char *fmt, ...)
{
    char m[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    json_decref(o->body);
    o->status = status;
    json_t *ms = json_string(m);            /* may carry guest or client bytes: valid UTF-8 only */
    o->body = json_pack("{s:i, s:o}", "code", (int)status, "message", ms ? ms : json_string("(message not UTF-8)"));
}

static json_t *sandbox_json(const char *id, const struct serve_state *st)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:n}", "sandboxID", id, "templateID", st->template_id, "clientID",
                     st->client_id, "envdVersion", SERVE_ENVD_VERSION, "envdAccessToken", st->token, "domain");
}

static json_t *listed_json(const struct serve *s, const char *id, const struct serve_state *st, const char *state)
{
    unsigned mem, cpus;
    unsigned long long dsize, dused;
    sandbox_size(s, id, &mem, &cpus, &dsize, &dused);
    char started[40], end[40];
    serve_time_text(st->started_at, started, sizeof started);
    serve_time_text(st->deadline ? st->deadline : now_unix(), end, sizeof end);
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:i, s:i, s:I, s:O, s:s, s:[]}", "sandboxID", id,
                     "templateID", st->template_id, "clientID", st->client_id, "startedAt", started, "endAt", end,
                     "envdVersion", SERVE_ENVD_VERSION, "cpuCount", (int)cpus, "memoryMB", (int)mem, "diskSizeMB",
                     (json_int_t)(dsize >> 20), "metadata", st->metadata, "state", state, "volumeMounts");
}

/* ---- lifecycle ---- */

/* Is passt there for --net user ($MOAT_PASST, else in PATH)? */
static bool have_passt(void)
{
    const char *e = getenv("MOAT_PASST");
    if (e && *e)
        return access(e, X_OK) == 0;
    const char *path = getenv("PATH");
    if (!path)
        return false;
    for (const char *p = path; *p;) {
        size_t n = strcspn(p, ":");
        char f[PATH_MAX];
        if (n > 0 && n < sizeof f - 8) {
            snprintf(f, sizeof f, "%.*s/passt", (int)n, p);
            if (access(f, X_OK) == 0)
                return true;
        }
        p += n + (p[n] == ':');
    }
    return false;
}

/* Set id's egress policy from st's allow_internet_access and network
 * (moat net ID policy TEXT, in-process: vmm/sandbox/device.h), right after its VM started (create, fork,
 * resume: a snapshot keeps the policy the device was made with, not the
 * one set later). probe (a create): find out whether it has a network
 * device at all (st->net_device); one without is fine unless st asks for
 * some network. 0, or -1 with why. */
static int apply_net(const char *id, struct serve_state *st, bool probe, char *why, size_t wlen)
{
    char pol[SERVE_POLICY_MAX], err[512];
    if (!probe && !st->net_device)
        return 0;
    if (serve_net_policy(st->internet, st->network, pol, sizeof pol, why, wlen) < 0)
        return -1;
    struct sbx_err e = { 0 };
    if (sandbox_device_set(id, "net", "policy", pol, &e) == 0) {      /* moat net ID policy TEXT */
        st->net_device = true;
        return 0;
    }
    sbx_why(&e, err, sizeof err);
    struct sbx_err ge = { 0 };
    if (!probe || sandbox_device_get(id, "net", "policy", NULL, 0, &ge) == 0) {    /* moat net ID policy */
        snprintf(why, wlen, "setting its egress policy '%.200s' failed: %.250s", pol, err[0] ? err : "?");
        return -1;
    }
    st->net_device = false;
    const json_t *allow = st->network ? json_object_get(st->network, "allowOut") : NULL;
    if (st->internet == 1 || json_array_size(allow) > 0) {
        snprintf(why, wlen, "template '%s' has no network device (moat serve builds base with --net user when "
                 "passt is installed; see docs/serve.md)", st->template_id);
        return -1;
    }
    return 0;
}

static int ensure_template(struct serve *s, const char *tpl, struct out *o)
{
    int a = template_agent(s, tpl);
    if (a >= 0)
        return a;
    if (strcmp(tpl, "base")) {
        fail(o, 404, "template '%s' not found (moat template ls; moat template create %s --from SANDBOX)", tpl, tpl);
        return -ENOENT;
    }
    /* base: the default guest, built once; with user-mode networking
     * (passt), everything denied until a create's policy is set */
    pthread_mutex_lock(&s->tpl_lock);
    a = template_agent(s, tpl);
    if (a < 0) {
        char err[512];
        bool net = have_passt();
        char *args[] = { "--net", "user", "--net-default", "deny" };
        struct sbx_create_opts *co = calloc(1, sizeof *co);    /* ~17 KiB: not on this thread's stack */
        struct sbx_template_opts to = { .create = co, .agent = true };
        fprintf(stderr, "moat serve: building the base template from the default guest (%s)\n",
                net ? "--net user, default deny" : "no network: passt is not installed");
        int r = -1;
        snprintf(err, sizeof err, "out of memory");
        if (co) {
            *co = (struct sbx_create_opts){ .args = args, .nargs = net ? 4 : 0, .start = { .wait = BASE_WAIT } };
            r = sbx_template_create("base", &to, err, sizeof err);
        }
        free(co);
        a = r == 0 ? template_agent(s, tpl) : -EIO;
        if (a < 0)
            fail(o, 500, "building the base template from the default guest failed: %s",
                 err[0] ? err : "(no message)");
    }
    pthread_mutex_unlock(&s->tpl_lock);
    return a;
}

static int new_state(struct serve_state *st, const char *tpl, uint32_t timeout)
{
    memset(st, 0, sizeof *st);
    snprintf(st->template_id, sizeof st->template_id, "%s", tpl);
    if (random_hex(st->token, SERVE_TOKEN_LEN) < 0 || random_hex(st->client_id, SERVE_TOKEN_LEN) < 0)
        return -EIO;
    st->started_at = now_unix();
    st->timeout = timeout;
    st->deadline = st->started_at + timeout;
    st->internet = -1;
    return 0;
}

static void do_create(struct serve *s, const char *body, size_t len, struct out *o)
{
    struct serve_create c;
    char why[512];
    if (serve_decode_create(body, len, &c, why, sizeof why) < 0) {
        fail(o, 400, "%s", why);
        return;
    }
    int agent = ensure_template(s, c.template_id, o);
    if (agent < 0) {
        serve_create_free(&c);
        return;
    }
    char id[24], tname[SERVE_ID_MAX + 16], err[512];
    struct serve_state st;
    if (random_id(id, 20) < 0 || new_state(&st, c.template_id, c.timeout) < 0) {
        fail(o, 500, "no random numbers");
        serve_create_free(&c);
        return;
    }
    snprintf(tname, sizeof tname, TEMPLATE_PREFIX "%s", c.template_id);
    struct sbx_fork_opts fo = { .child = id, .count = 1, .start = { .wait = agent ? AGENT_WAIT : 0 } };
    struct sbx_fork_child *kid = malloc(sizeof *kid);
    int r = kid ? sbx_fork(s, tname, &fo, kid, err, sizeof err) : -1;
    if (!kid)
        snprintf(err, sizeof err, "out of memory");
    free(kid);
    if (r != 0) {
        fail(o, 500, "creating the sandbox from template '%s' failed: %s", c.template_id, err[0] ? err : "?");
        serve_create_free(&c);
        return;
    }
    st.metadata = c.metadata;
    st.env = c.env;
    st.network = c.network;
    st.auto_pause = c.auto_pause;
    st.auto_resume = c.auto_resume;
    st.internet = c.internet;
    c.metadata = c.env = c.network = NULL;
    if (apply_net(id, &st, true, err, sizeof err) < 0) {
        sbx_rm(id, NULL, 0);
        fail(o, st.net_device ? 500 : 400, "creating the sandbox from template '%s' failed: %s", c.template_id, err);
        serve_state_free(&st);
        serve_create_free(&c);
        return;
    }
    st.deadline = now_unix() + c.timeout;
    pthread_mutex_lock(&s->lock);
    r = save_state(s, id, &st);
    pthread_mutex_unlock(&s->lock);
    if (r < 0) {
        sbx_rm(id, NULL, 0);
        fail(o, 500, "cannot record the sandbox: %s", strerror(-r));
    } else {
        o->status = 201;
        o->body = sandbox_json(id, &st);
    }
    serve_state_free(&st);
}

/* Load id's state and moat state; 404 (and -1) when it is not one of ours
 * or its VM is gone (dead_ok: a dead one is still returned). */
static int lookup(struct serve *s, const char *id, struct serve_state *st, char *mstate, size_t mlen, bool dead_ok,
                  struct out *o)
{
    pthread_mutex_lock(&s->lock);
    int r = load_state(s, id, st);
    pthread_mutex_unlock(&s->lock);
    if (r < 0) {
        fail(o, r == -ENOENT ? 404 : 500, r == -ENOENT ? "sandbox %s not found" : "sandbox %s: unreadable state",
             id);
        return -1;
    }
    if (s->sandbox_state(id, mstate, mlen) < 0 || (!dead_ok && !e2b_state(mstate))) {
        serve_state_free(st);
        fail(o, 404, "sandbox %s not found (its VM has exited; see $MOAT_HOME/%s/moat.log)", id, id);
        return -1;
    }
    return 0;
}

/* A handler's start: its body's decoder said rc (and why), then id is
 * looked up. 0, or -1 with the error in o. */
static int begin(struct serve *s, const char *id, int rc, const char *why, struct serve_state *st, char *ms,
                 size_t mlen, struct out *o)
{
    if (rc < 0) {
        fail(o, 400, "%s", why);
        return -1;
    }
    return lookup(s, id, st, ms, mlen, false, o);
}

static void forget(struct serve *s, const char *id)
{
    if (s->envd)
        envd_forget_sandbox(s->envd, id);
}

/* Bring a stopped (E2B: paused) sandbox back. 0 or -1 with why. */
static int resume(struct serve *s, const char *id, const struct serve_state *st, char *why, size_t wlen)
{
    int agent = template_agent(s, st->template_id);
    if (sbx_start(s, id, agent == 0 ? 0 : AGENT_WAIT, why, wlen) != 0)
        return -1;
    struct serve_state copy = *st;      /* apply_net may only set net_device, already true */
    if (apply_net(id, &copy, false, why, wlen) < 0) {
        sbx_stop(id, NULL, 0);     /* not running on the template's policy */
        return -1;
    }
    return 0;
}

static void do_connect(struct serve *s, const char *id, const char *body, size_t len, struct out *o)
{
    uint32_t t;
    char why[512], ms[32];
    struct serve_state st;
    if (begin(s, id, serve_decode_connect(body, len, &t, why, sizeof why), why, &st, ms, sizeof ms, o) < 0)
        return;
    unsigned status = 200;
    if (!strcmp(ms, "stopped")) {
        if (resume(s, id, &st, why, sizeof why) < 0) {
            fail(o, 500, "resuming sandbox %s failed: %s", id, why);
            serve_state_free(&st);
            return;
        }
        status = 201;
    } else if (!strcmp(ms, "paused")) {     /* vCPUs paused by hand (moat pause) */
        struct sbx_err e = { 0 };
        sandbox_resume(id, &e);
    }
    serve_state_free(&st);
    pthread_mutex_lock(&s->lock);
    if (load_state(s, id, &st) == 0) {
        double now = now_unix();
        if (t)
            st.timeout = t;
        if (status == 201 || !st.deadline)
            st.deadline = now + st.timeout;
        else if (t && now + t > st.deadline)
            st.deadline = now + t;
        save_state(s, id, &st);
        o->status = status;
        o->body = sandbox_json(id, &st);
        serve_state_free(&st);
    } else {
        fail(o, 404, "sandbox %s not found", id);
    }
    pthread_mutex_unlock(&s->lock);
}

static void do_kill(struct serve *s, const char *id, struct out *o)
{
    struct serve_state st;
    char ms[32], err[512];
    if (lookup(s, id, &st, ms, sizeof ms, true, o) < 0)
        return;
    serve_state_free(&st);
    forget(s, id);
    if (sbx_rm(id, err, sizeof err) != 0)
        fail(o, 500, "removing sandbox %s failed: %s", id, err);
    else
        o->status = 204;
}

static void do_pause(struct serve *s, const char *id, const char *body, size_t len, struct out *o)
{
    char why[512], ms[32];
    struct serve_state st;
    if (begin(s, id, serve_decode_pause(body, len, why, sizeof why), why, &st, ms, sizeof ms, o) < 0)
        return;
    serve_state_free(&st);
    if (!strcmp(ms, "stopped")) {
        fail(o, 409, "sandbox %s is already paused", id);
        return;
    }
    forget(s, id);
    if (sbx_stop(id, why, sizeof why) != 0) {
        fail(o, 500, "pausing sandbox %s failed: %s", id, why);
        return;
    }
    pthread_mutex_lock(&s->lock);
    if (load_state(s, id, &st) == 0) {
        st.deadline = 0;        /* a paused sandbox does not time out */
        save_state(s, id, &st);
        serve_state_free(&st);
    }
    pthread_mutex_unlock(&s->lock);
    o->status = 204;
}

static void do_timeout(struct serve *s, const char *id, const char *body, size_t len, struct out *o)
{
    uint32_t t;
    char why[512], ms[32];
    struct serve_state st;
    if (begin(s, id, serve_decode_timeout(body, len, &t, why, sizeof why), why, &st, ms, sizeof ms, o) < 0)
        return;
    serve_state_free(&st);
    pthread_mutex_lock(&s->lock);
    if (load_state(s, id, &st) == 0) {
        st.timeout = t;
        if (strcmp(ms, "stopped"))
            st.deadline = now_unix() + t;
        int r = save_state(s, id, &st);
        serve_state_free(&st);
        if (r < 0)
            fail(o, 500, "cannot record the timeout: %s", strerror(-r));
        else
            o->status = 204;
    } else {
        fail(o, 404, "sandbox %s not found", id);
    }
    pthread_mutex_unlock(&s->lock);
}

static void do_info(struct serve *s, const char *id, struct out *o)
{
    struct serve_state st;
    char ms[32];
    if (lookup(s, id, &st, ms, sizeof ms, false, o) < 0)
        return;
    json_t *j = listed_json(s, id, &st, e2b_state(ms));
    if (j) {
        json_object_set_new(j, "envdAccessToken", json_string(st.token));
        json_object_set_new(j, "domain", json_null());
        char pol[SERVE_POLICY_MAX], why[256];
        if (!st.net_device)
            snprintf(pol, sizeof pol, "none: the sandbox has no network device");
        else if (serve_net_policy(st.internet, st.network, pol, sizeof pol, why, sizeof why) < 0)
            snprintf(pol, sizeof pol, "?: %s", why);
        bool inet = st.net_device && !strncmp(pol, "default allow", 13);
        json_object_set_new(j, "allowInternetAccess", json_boolean(inet));
        json_t *net = st.net_device && st.network ? json_deep_copy(st.network)
                                                  : json_pack("{s:[], s:[]}", "allowOut", "denyOut");
        json_t *deny = net ? json_object_get(net, "denyOut") : NULL;
        if (deny && !inet && json_array_size(deny) == 0)
            json_array_append_new(deny, json_string("0.0.0.0/0"));   /* E2B's way to say: no internet */
        json_object_set_new(j, "network", net);
        json_object_set_new(j, "moatNetwork", json_string(pol));
        json_object_set_new(j, "lifecycle", json_pack("{s:s, s:b}", "onTimeout", st.auto_pause ? "pause" : "kill",
                                                      "autoResume", st.auto_resume));
    }
    o->status = j ? 200 : 500;
    o->body = j;
    serve_state_free(&st);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in $MOAT_HOME holding file (sorted, > after), malloc'd. */
static char **names_with(const struct serve *s, const char *file, const char *after, bool templates, size_t *np)
{
    *np = 0;
    DIR *d = opendir(s->home);
    if (!d)
        return NULL;
    size_t cap = 64, n = 0;
    char **v = malloc(cap * sizeof *v);
    struct dirent *e;
    size_t pl = strlen(TEMPLATE_PREFIX);
    while (v && (e = readdir(d))) {
        bool is_tpl = !strncmp(e->d_name, TEMPLATE_PREFIX, pl);
        if (!serve_valid_name(e->d_name) || is_tpl != templates)
            continue;
        const char *key = templates ? e->d_name + pl : e->d_name;
        if (*after && strcmp(key, after) <= 0)
            continue;
        char p[PATH_MAX];
        path_of(s, e->d_name, file, p, sizeof p);
        if (access(p, F_OK) != 0)
            continue;
        if (n == cap) {
            char **nv = realloc(v, (cap *= 2) * sizeof *v);
            if (!nv)
                break;
            v = nv;
        }
        if ((v[n] = strdup(key)))
            n++;
    }
    closedir(d);
    if (v)
        qsort(v, n, sizeof *v, cmp_str);
    *np = n;
    return v;
}

static void free_names(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

struct qctx {
    struct serve_list_q *q;
    char why[300];
    int err;
};

static enum MHD_Result query_arg(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    struct qctx *x = cls;
    (void)kind;
    if (!x->err && serve_list_arg(x->q, key, value, x->why, sizeof x->why) < 0)
        x->err = -EINVAL;
    return MHD_YES;
}

static int read_query(struct MHD_Connection *c, struct serve_list_q *q, struct out *o)
{
    struct qctx x = { .q = q };
    serve_list_init(q);
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, query_arg, &x);
    if (x.err) {
        fail(o, 400, "%s", x.why);
        serve_list_free(q);
        return -1;
    }
    return 0;
}

/* A listing's start: its query read (or a 400 answered: -1), the names
 * with FILE after the page token, the array to fill. */
static int list_begin(struct serve *s, struct MHD_Connection *c, struct out *o, struct serve_list_q *q,
                      const char *file, bool tmpl, char ***names, size_t *n, json_t **arr)
{
    if (read_query(c, q, o) < 0)
        return -1;
    if (tmpl)
        q->order = 0;        /* snapshots: by id */
    *names = names_with(s, file, q->order ? "" : q->next, tmpl, n);
    *arr = json_array();
    return 0;
}

/* A listing's end: the array as the answer (500 when it could not be
 * made), what list_begin took freed. */
static void list_end(struct out *o, struct serve_list_q *q, char **names, size_t n, json_t *arr)
{
    free_names(names, n);
    serve_list_free(q);
    o->status = arr ? 200 : 500;
    o->body = arr;
}

/* Does a sandbox in E2B state es (NULL: none) match the listing's query? */
static bool list_wanted(const struct serve_list_q *q, const struct serve_state *st, const char *es)
{
    return es && ((!strcmp(es, "running") && q->running) || (!strcmp(es, "paused") && q->paused)) &&
           serve_list_meta_match(q, st->metadata) && (!q->template_id[0] || !strcmp(q->template_id, st->template_id)) &&
           st->started_at >= q->started_after;
}

/* A sandbox's state for a listing: its E2B state when it matches q (st
 * then to be freed), else NULL (nothing to free). */
static const char *listed_state(struct serve *s, const struct serve_list_q *q, const char *id,
                                struct serve_state *st, char *ms, size_t ml)
{
    pthread_mutex_lock(&s->lock);
    int r = load_state(s, id, st);
    pthread_mutex_unlock(&s->lock);
    if (r < 0)
        return NULL;
    const char *es = s->sandbox_state(id, ms, ml) == 0 ? e2b_state(ms) : NULL;
    if (list_wanted(q, st, es))
        return es;
    serve_state_free(st);
    return NULL;
}

struct ranked {
    const char *id;
    int64_t t;
    json_t *item;
};

static int ranked_cmp(const void *a, const void *b, void *order)
{
    const struct ranked *x = a, *y = b;
    return serve_list_order_cmp(*(const int *)order, x->t, x->id, y->t, y->id);
}

/* An ordered listing (order=asc|desc): every sandbox that matches, sorted
 * by start time, the page after the token's (ID~USEC) place. */
static void list_ordered(struct serve *s, struct out *o, struct serve_list_q *q, char **names, size_t n,
                         json_t *arr)
{
    struct ranked *v = calloc(n ? n : 1, sizeof *v);
    size_t k = 0;
    for (size_t i = 0; v && i < n; i++) {
        struct serve_state st;
        char ms[32];
        const char *es = listed_state(s, q, names[i], &st, ms, sizeof ms);
        if (!es)
            continue;
        v[k++] = (struct ranked){ names[i], serve_usec(st.started_at), listed_json(s, names[i], &st, es) };
        serve_state_free(&st);
    }
    if (v)
        qsort_r(v, k, sizeof *v, ranked_cmp, &q->order);
    size_t taken = 0;
    for (size_t i = 0; i < k; i++) {
        if (q->next[0] && serve_list_order_cmp(q->order, v[i].t, v[i].id, q->next_usec, q->next) <= 0)
            continue;
        if (taken == q->limit) {
            serve_next_make(v[i - 1].id, v[i - 1].t, o->next, sizeof o->next);
            break;
        }
        json_array_append(arr, v[i].item);
        taken++;
    }
    for (size_t i = 0; i < k; i++)
        json_decref(v[i].item);
    free(v);
}

static void do_list(struct serve *s, struct MHD_Connection *c, struct out *o)
{
    struct serve_list_q q;
    size_t n;
    char **names;
    json_t *arr;
    if (list_begin(s, c, o, &q, "serve.json", false, &names, &n, &arr) < 0)
        return;
    if (q.order && q.next[0] && q.next_usec < 0) {
        free_names(names, n);
        json_decref(arr);
        serve_list_free(&q);
        fail(o, 400, "nextToken: '%s' is not a token of an ordered listing", q.next);
        return;
    }
    if (q.order) {
        if (arr)
            list_ordered(s, o, &q, names, n, arr);
        list_end(o, &q, names, n, arr);
        return;
    }
    for (size_t i = 0; arr && i < n; i++) {
        struct serve_state st;
        char ms[32];
        const char *es = listed_state(s, &q, names[i], &st, ms, sizeof ms);
        if (!es)
            continue;
        bool full = json_array_size(arr) == q.limit;
        if (full)
            snprintf(o->next, sizeof o->next, "%s", names[i - 1]);
        else
            json_array_append_new(arr, listed_json(s, names[i], &st, es));
        serve_state_free(&st);
        if (full)
            break;
    }
    /* the token is the last id of this page: the next starts after it */
    if (o->next[0]) {
        size_t last = json_array_size(arr);
        json_t *l = last ? json_array_get(arr, last - 1) : NULL;
        snprintf(o->next, sizeof o->next, "%s", l ? json_string_value(json_object_get(l, "sandboxID")) : "");
    }
    list_end(o, &q, names, n, arr);
}

/* A snapshot as E2B gives it: its id (the moat template name, which
 * Sandbox.create takes), its name as it was asked for (team/name:tag). */
static json_t *snapshot_json(const char *name)
{
    char shown[3 * SERVE_TEMPLATE_MAX + 1];
    serve_e2b_name_out(name, shown, sizeof shown);
    return json_pack("{s:s, s:[s]}", "snapshotID", name, "names", shown);
}

static void do_snapshot(struct serve *s, const char *id, const char *body, size_t len, struct out *o)
{
    char name[SERVE_TEMPLATE_MAX + 1], why[512], ms[32];
    struct serve_state st;
    int rc = serve_decode_snapshot(body, len, name, sizeof name, why, sizeof why);
    if (begin(s, id, rc, why, &st, ms, sizeof ms, o) < 0)
        return;
    if (!name[0]) {
        memcpy(name, "snap-", 5);
        if (random_id(name + 5, 16) < 0) {
            serve_state_free(&st);
            fail(o, 500, "no random numbers");
            return;
        }
    }
    if (template_agent(s, name) >= 0) {
        serve_state_free(&st);
        fail(o, 409, "a template or snapshot named %s already exists", name);
        return;
    }
    int agent = template_agent(s, st.template_id);
    struct sbx_template_opts to = { .from = id, .agent = agent != 0 };
    int r = sbx_template_create(name, &to, why, sizeof why);
    serve_state_free(&st);
    if (r != 0) {
        fail(o, 500, "snapshot of sandbox %s failed: %s", id, why);
        return;
    }
    char tn[SERVE_ID_MAX + 16], p[PATH_MAX], text[128];
    snprintf(tn, sizeof tn, TEMPLATE_PREFIX "%s", name);
    path_of(s, tn, "serve-snapshot", p, sizeof p);
    snprintf(text, sizeof text, "%s\n", id);
    write_atomic(p, text, 0600);
    o->status = 201;
    o->body = snapshot_json(name);
}

static void do_snapshots(struct serve *s, struct MHD_Connection *c, struct out *o)
{
    struct serve_list_q q;
    size_t n;
    char **names;
    json_t *arr;
    if (list_begin(s, c, o, &q, "serve-snapshot", true, &names, &n, &arr) < 0)
        return;
    for (size_t i = 0; arr && i < n; i++) {
        char tn[SERVE_ID_MAX + 16], p[PATH_MAX];
        snprintf(tn, sizeof tn, TEMPLATE_PREFIX "%s", names[i]);
        path_of(s, tn, "serve-snapshot", p, sizeof p);
        char *from = read_text(p, 128, NULL);
        if (from)
            from[strcspn(from, "\n")] = 0;
        bool want = (!q.sandbox_id[0] || (from && !strcmp(from, q.sandbox_id))) &&
                    (!q.name[0] || !strcmp(q.name, names[i]));
        free(from);
        if (!want)
            continue;
        if (json_array_size(arr) == q.limit) {
            json_t *l = json_array_get(arr, q.limit - 1);
            snprintf(o->next, sizeof o->next, "%s", json_string_value(json_object_get(l, "snapshotID")));
            break;
        }
        json_array_append_new(arr, snapshot_json(names[i]));
    }
    list_end(o, &q, names, n, arr);
}

static void do_template_delete(struct serve *s, const char *tpl, struct out *o)
{
    char err[512];
    if (template_agent(s, tpl) < 0) {
        fail(o, 404, "template or snapshot %s not found", tpl);
        return;
    }
    if (sbx_template_rm(tpl, err, sizeof err) != 0)
        fail(o, 500, "removing template %s failed: %s", tpl, err);
    else
        o->status = 204;
}

static void do_fork(struct serve *s, const char *id, const char *body, size_t len, struct out *o)
{
    uint32_t t;
    unsigned count;
    char why[512], ms[32];
    struct serve_state parent;
    if (begin(s, id, serve_decode_fork(body, len, &t, &count, why, sizeof why), why, &parent, ms, sizeof ms, o) < 0)
        return;
    char prefix[24];
    struct sbx_fork_child *kids = calloc(count ? count : 1, sizeof *kids);
    if (!kids || random_id(prefix, 16) < 0) {
        free(kids);
        serve_state_free(&parent);
        fail(o, 500, kids ? "no random numbers" : "out of memory");
        return;
    }
    int agent = template_agent(s, parent.template_id);
    struct sbx_fork_opts fo = { .prefix = prefix, .count = count, .start = { .wait = agent == 0 ? 0 : AGENT_WAIT } };
    if (count)
        sbx_fork(s, id, &fo, kids, why, sizeof why);
    json_t *arr = json_array();
    for (unsigned i = 1; arr && i <= count; i++) {
        char child[SERVE_ID_MAX + 1];
        snprintf(child, sizeof child, "%s-%u", prefix, i);
        bool ok = kids[i - 1].made && kids[i - 1].code == 0;
        struct serve_state st;
        if (ok && new_state(&st, parent.template_id, t) == 0) {
            st.metadata = json_deep_copy(parent.metadata);
            st.env = json_deep_copy(parent.env);
            st.auto_pause = parent.auto_pause;
            st.auto_resume = parent.auto_resume;
            st.internet = parent.internet;
            st.network = parent.network ? json_deep_copy(parent.network) : NULL;
            st.net_device = parent.net_device;
            int r = apply_net(child, &st, false, why, sizeof why);
            if (r < 0) {
                sbx_rm(child, NULL, 0);
            }
            pthread_mutex_lock(&s->lock);
            if (r == 0)
                r = save_state(s, child, &st);
            pthread_mutex_unlock(&s->lock);
            if (r == 0)
                json_array_append_new(arr, json_pack("{s:o}", "sandbox", sandbox_json(child, &st)));
            else
                ok = false;
            serve_state_free(&st);
        } else {
            ok = false;
        }
        if (!ok)
            json_array_append_new(arr, json_pack("{s:{s:i, s:s}}", "error", "code", 500, "message",
                                                 why[0] ? why : "the fork did not start"));
    }
    free(kids);
    serve_state_free(&parent);
    o->status = arr ? 200 : 500;
    o->body = arr;
}

/* utime + stime of pid in seconds, -1 if gone. */
static double cpu_seconds(pid_t pid)
{
    char p[64], buf[2048];
    snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t k = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (k <= 0)
        return -1;
    buf[k] = 0;
    char *rp = strrchr(buf, ')');
    if (!rp)
        return -1;
    unsigned long ut = 0, stt = 0;
    /* after ") ": state(3) ... utime is field 14, stime 15 */
    if (sscanf(rp + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &stt) != 2)
        return -1;
    return (double)(ut + stt) / (double)sysconf(_SC_CLK_TCK);
}

/* A running sandbox's VM process (its pid file), or 0. */
static long vm_pid(const struct serve *s, const char *id)
{
    char p[PATH_MAX];
    path_of(s, id, "pid", p, sizeof p);
    char *t = read_text(p, 32, NULL);
    long pid = t ? strtol(t, NULL, 10) : 0;
    free(t);
    return pid > 1 ? pid : 0;
}

static unsigned long long rss_bytes(long pid)
{
    char p[64];
    snprintf(p, sizeof p, "/proc/%ld/status", pid);
    char *status = read_text(p, 8192, NULL);
    const char *rss = status ? strstr(status, "VmRSS:") : NULL;
    unsigned long long kb = rss ? strtoull(rss + 6, NULL, 10) : 0;
    free(status);
    return kb * 1024;
}

static json_t *sample_json(const struct serve *s, const char *id, const struct serve_sample *x)
{
    unsigned mem, cpus;
    unsigned long long dsize, dused;
    sandbox_size(s, id, &mem, &cpus, &dsize, &dused);
    char ts[40];
    serve_time_text(x->t, ts, sizeof ts);
    return json_pack("{s:s, s:I, s:i, s:f, s:I, s:I, s:I, s:I, s:I}", "timestamp", ts, "timestampUnix",
                     (json_int_t)x->t, "cpuCount", (int)cpus, "cpuUsedPct", x->cpu_pct, "memUsed",
                     (json_int_t)x->mem_used, "memTotal", (json_int_t)mem << 20, "memCache", (json_int_t)0,
                     "diskUsed", (json_int_t)dused, "diskTotal", (json_int_t)dsize);
}

/* One sample of a running sandbox: CPU over since the last one (or over
 * 100 ms when there is none), resident memory. -1 when it cannot be read. */
static int take_sample(const struct serve *s, const char *id, long pid, double *last_cpu, double *last_t,
                       struct serve_sample *x)
{
    unsigned mem, cpus;
    unsigned long long dsize, dused;
    double c0 = *last_cpu, t0 = *last_t;
    if (t0 <= 0) {
        c0 = cpu_seconds((pid_t)pid), t0 = now_unix();
        usleep(100 * 1000);
    }
    double c1 = cpu_seconds((pid_t)pid), t1 = now_unix();
    if (c0 < 0 || c1 < 0 || t1 <= t0)
        return -1;
    sandbox_size(s, id, &mem, &cpus, &dsize, &dused);
    double pct = (c1 - c0) / (t1 - t0) / (cpus ? cpus : 1) * 100.0;
    *x = (struct serve_sample){ .t = t1, .cpu_pct = pct < 0 ? 0.0 : pct, .mem_used = rss_bytes(pid) };
    *last_cpu = c1;
    *last_t = t1;
    return 0;
}

static struct mseries *series_of(struct serve *s, const char *id, bool make)
{
    for (struct mseries *m = s->series; m; m = m->next)
        if (!strcmp(m->id, id))
            return m;
    struct mseries *m = make ? calloc(1, sizeof *m) : NULL;
    if (m) {
        snprintf(m->id, sizeof m->id, "%s", id);
        m->next = s->series;
        s->series = m;
    }
    return m;
}

/* The reaper's part: every SERVE_METRICS_EVERY seconds a sample of each
 * running sandbox; the series of sandboxes that are gone dropped. */
static void metrics_sample(struct serve *s)
{
    double now = now_unix();
    if (now < s->next_sample)
        return;
    s->next_sample = now + SERVE_METRICS_EVERY;
    size_t n;
    char **names = names_with(s, "serve.json", "", false, &n);
    pthread_mutex_lock(&s->m_lock);
    for (struct mseries **pp = &s->series; *pp;) {
        bool alive = false;
        for (size_t i = 0; i < n && !alive; i++)
            alive = !strcmp(names[i], (*pp)->id);
        if (alive) {
            pp = &(*pp)->next;
        } else {
            struct mseries *dead = *pp;
            *pp = dead->next;
            free(dead);
        }
    }
    for (size_t i = 0; i < n; i++) {
        char ms[32] = "";
        long pid = vm_pid(s, names[i]);
        struct mseries *m = series_of(s, names[i], pid && s->sandbox_state(names[i], ms, sizeof ms) == 0 &&
                                                       !strcmp(ms, "running"));
        struct serve_sample x;
        if (!m || !pid || strcmp(ms, "running")) {
            if (m)
                m->last_t = 0;      /* paused: the next sample starts afresh */
            continue;
        }
        if (m->last_t > 0 && take_sample(s, names[i], pid, &m->last_cpu, &m->last_t, &x) == 0)
            serve_ring_push(&m->ring, &x);
        else if (m->last_t <= 0)
            m->last_cpu = cpu_seconds((pid_t)pid), m->last_t = now_unix();
    }
    pthread_mutex_unlock(&s->m_lock);
    free_names(names, n);
}

/* getMetrics({start, end}): the samples kept in the range; a running
 * sandbox with none yet gets one taken now. */
static void do_metrics(struct serve *s, struct MHD_Connection *c, const char *id, struct out *o)
{
    struct serve_state st;
    char ms[32];
    double start = -1, end = -1;
    const char *a = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "start");
    const char *b = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "end");
    if ((a && serve_metrics_time(a, &start) < 0) || (b && serve_metrics_time(b, &end) < 0)) {
        fail(o, 400, "start and end are Unix seconds");
        return;
    }
    if (lookup(s, id, &st, ms, sizeof ms, false, o) < 0)
        return;
    serve_state_free(&st);
    json_t *arr = json_array();
    struct serve_sample *v = malloc(SERVE_METRICS_KEEP * sizeof *v);
    o->status = arr && v ? 200 : 500;
    o->body = arr;
    size_t k = 0;
    pthread_mutex_lock(&s->m_lock);
    struct mseries *m = v ? series_of(s, id, false) : NULL;
    if (m)
        k = serve_ring_range(&m->ring, start, end, v, SERVE_METRICS_KEEP);
    bool had = m && m->ring.n;
    pthread_mutex_unlock(&s->m_lock);
    long pid = vm_pid(s, id);
    double l_cpu = 0, l_t = 0;
    if (v && !had && pid && !strcmp(ms, "running") && take_sample(s, id, pid, &l_cpu, &l_t, &v[0]) == 0 &&
        (start < 0 || v[0].t >= start) && (end < 0 || v[0].t <= end + 1))
        k = 1;
    for (size_t i = 0; arr && i < k; i++)
        json_array_append_new(arr, sample_json(s, id, &v[i]));
    free(v);
}

/* ---- HTTP ---- */

struct req {
    char *body;
    size_t len;
    bool too_large;
    bool answered;
};

static enum MHD_Result send_out(struct MHD_Connection *c, struct out *o)
{
    char *text = o->body ? json_dumps(o->body, JSON_COMPACT) : NULL;
    if (o->body && !text) {
        o->status = 500;
        text = strdup("{\"code\":500,\"message\":\"out of memory\"}");
    }
    size_t n = text ? strlen(text) : 0;
    struct MHD_Response *r = text ? MHD_create_response_from_buffer(n, text, MHD_RESPMEM_MUST_FREE)
                                  : MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(text);
        json_decref(o->body);
        o->body = NULL;
        return MHD_NO;
    }
    if (text)
        MHD_add_response_header(r, "Content-Type", "application/json");
    if (o->next[0])
        MHD_add_response_header(r, "X-Next-Token", o->next);
    enum MHD_Result res = MHD_queue_response(c, o->status ? o->status : 500, r);
    MHD_destroy_response(r);
    json_decref(o->body);
    o->body = NULL;
    return res;
}

static bool authorized(const struct serve *s, struct MHD_Connection *c)
{
    const char *k = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-API-KEY");
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (k && serve_secret_eq(k, s->api_key))
        return true;
    return a && !strncmp(a, "Bearer ", 7) && serve_secret_eq(a + 7, s->api_key);
}

static void dispatch(struct serve *s, struct MHD_Connection *c, const char *method, const char *url,
                     const struct req *r, struct out *o)
{
    enum serve_ep ep = 0;
    char id[SERVE_ID_MAX + 1], why[400];
    int rr = serve_route(method, url, &ep, id, sizeof id, why, sizeof why);
    if (!(rr == 0 && ep == SV_HEALTH) && !authorized(s, c)) {
        fail(o, 401, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-API-KEY") ? "invalid API key"
                                                                                   : "an API key is required (X-API-KEY)");
        return;
    }
    if (rr < 0) {
        fail(o, rr == -ENOENT ? 404 : strstr(why, "is not allowed") ? 405 : 400, "%s", why);
        return;
    }
    if (r->too_large) {
        fail(o, 413, "request body larger than %d bytes", SERVE_BODY_MAX);
        return;
    }
    const char *b = r->body ? r->body : "";
    switch (ep) {
    case SV_HEALTH: o->status = 200; o->body = json_pack("{s:s}", "status", "ok"); break;
    case SV_CREATE: do_create(s, b, r->len, o); break;
    case SV_LIST: do_list(s, c, o); break;
    case SV_CONNECT: do_connect(s, id, b, r->len, o); break;
    case SV_KILL: do_kill(s, id, o); break;
    case SV_INFO: do_info(s, id, o); break;
    case SV_TIMEOUT: do_timeout(s, id, b, r->len, o); break;
    case SV_PAUSE: do_pause(s, id, b, r->len, o); break;
    case SV_SNAPSHOT: do_snapshot(s, id, b, r->len, o); break;
    case SV_SNAPSHOTS: do_snapshots(s, c, o); break;
    case SV_FORK: do_fork(s, id, b, r->len, o); break;
    case SV_METRICS: do_metrics(s, c, id, o); break;
    case SV_TEMPLATE_DELETE: do_template_delete(s, id, o); break;
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    struct serve *s = cls;
    struct req *r = *con_cls;
    struct out o = { 0 };
    (void)version;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r)
            return MHD_NO;
        *con_cls = r;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl) {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(cl, &end, 10);
            if (errno || *end || v > SERVE_BODY_MAX) {
                r->answered = true;
                fail(&o, 413, "request body larger than %d bytes", SERVE_BODY_MAX);
                return send_out(c, &o);
            }
        }
        return MHD_YES;
    }
    if (r->answered) {
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {     /* chunked bodies arrive here too, decoded */
        if (r->too_large || r->len + *upload_size > SERVE_BODY_MAX) {
            r->too_large = true;
        } else {
            if (!r->body && !(r->body = malloc(SERVE_BODY_MAX + 1)))
                return MHD_NO;
            memcpy(r->body + r->len, upload, *upload_size);
            r->len += *upload_size;
            r->body[r->len] = 0;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    dispatch(s, c, method, url, r, &o);
    r->answered = true;
    return send_out(c, &o);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode t)
{
    struct req *r = *con_cls;
    (void)cls;
    (void)c;
    (void)t;
    if (r) {
        free(r->body);
        free(r);
        *con_cls = NULL;
    }
}

/* ---- the envd module's resolver ---- */

static int resolve(void *arg, const char *sandbox_id, const char *token, struct envd_sandbox *out)
{
    struct serve *s = arg;
    struct serve_state st;
    char ms[32], why[512];
    memset(out, 0, sizeof *out);
    if (!serve_valid_name(sandbox_id) || !strncmp(sandbox_id, TEMPLATE_PREFIX, strlen(TEMPLATE_PREFIX)))
        return -ENOENT;
    pthread_mutex_lock(&s->lock);
    int r = load_state(s, sandbox_id, &st);
    pthread_mutex_unlock(&s->lock);
    if (r < 0)
        return -ENOENT;
    if (!token || !serve_secret_eq(token, st.token)) {
        serve_state_free(&st);
        return -EACCES;
    }
    if (s->sandbox_state(sandbox_id, ms, sizeof ms) < 0 || !strcmp(ms, "dead")) {
        serve_state_free(&st);
        return -ENOENT;
    }
    if (!strcmp(ms, "stopped")) {
        if (!st.auto_resume || resume(s, sandbox_id, &st, why, sizeof why) < 0) {
            serve_state_free(&st);
            return -EAGAIN;
        }
        pthread_mutex_lock(&s->lock);
        struct serve_state now;
        if (load_state(s, sandbox_id, &now) == 0) {
            now.deadline = now_unix() + now.timeout;
            save_state(s, sandbox_id, &now);
            serve_state_free(&now);
        }
        pthread_mutex_unlock(&s->lock);
    } else if (strcmp(ms, "running")) {
        serve_state_free(&st);
        return -EAGAIN;
    }
    char p[PATH_MAX];
    path_of(s, sandbox_id, "vsock.sock", p, sizeof p);
    if (strlen(p) >= sizeof out->vsock_path) {
        serve_state_free(&st);
        return -ENAMETOOLONG;
    }
    snprintf(out->vsock_path, sizeof out->vsock_path, "%s", p);
    out->hybrid = 1;
    size_t n = json_object_size(st.env);
    out->envs = calloc(n + 1, sizeof *out->envs);
    const char *k;
    json_t *v;
    if (out->envs)
        json_object_foreach(st.env, k, v) {
            if (asprintf(&out->envs[out->nenvs], "%s=%s", k, json_string_value(v)) < 0)
                break;
            out->nenvs++;
        }
    serve_state_free(&st);
    return out->envs ? 0 : -ENOMEM;
}

/* Signed /files URLs: the sandbox (not a template) whose token signs it. */
static int find_signed(void *arg, int (*match)(void *m, const char *id, const char *token), void *m, char *id,
                       size_t idlen, char *token, size_t toklen)
{
    struct serve *s = arg;
    size_t n;
    int r = -ENOENT;
    char **names = names_with(s, "serve.json", "", false, &n);
    for (size_t i = 0; r < 0 && i < n; i++) {
        struct serve_state st;
        pthread_mutex_lock(&s->lock);
        int lr = load_state(s, names[i], &st);
        pthread_mutex_unlock(&s->lock);
        if (lr < 0)
            continue;
        if (match(m, names[i], st.token) && strlen(names[i]) < idlen && strlen(st.token) < toklen) {
            snprintf(id, idlen, "%s", names[i]);
            snprintf(token, toklen, "%s", st.token);
            r = 0;
        }
        serve_state_free(&st);
    }
    free_names(names, n);
    return r;
}

static void release(void *arg, struct envd_sandbox *out)
{
    (void)arg;
    for (size_t i = 0; out->envs && i < out->nenvs; i++)
        free(out->envs[i]);
    free(out->envs);
    out->envs = NULL;
    out->nenvs = 0;
}

/* ---- the reaper ---- */

static void reap_once(struct serve *s)
{
    size_t n;
    char **names = names_with(s, "serve.json", "", false, &n);
    double now = now_unix();
    for (size_t i = 0; i < n; i++) {
        struct serve_state st;
        char ms[32];
        pthread_mutex_lock(&s->lock);
        int r = load_state(s, names[i], &st);
        pthread_mutex_unlock(&s->lock);
        if (r < 0)
            continue;
        bool due = st.deadline > 0 && now >= st.deadline;
        serve_state_free(&st);
        if (!due || s->sandbox_state(names[i], ms, sizeof ms) < 0 || !strcmp(ms, "stopped"))
            continue;
        /* Decide on what is saved now, not on what was read above: a
         * /timeout or /connect in between set a new deadline. */
        pthread_mutex_lock(&s->lock);
        r = load_state(s, names[i], &st);
        pthread_mutex_unlock(&s->lock);
        if (r < 0)
            continue;
        double deadline = st.deadline;
        bool pause = st.auto_pause;
        serve_state_free(&st);
        if (!(deadline > 0 && now_unix() >= deadline))
            continue;
        forget(s, names[i]);
        char err[512];
        if (pause && strcmp(ms, "dead")) {
            r = sbx_stop(names[i], err, sizeof err);
            fprintf(stderr, "moat serve: sandbox %s timed out: paused%s%s\n", names[i], r ? ": failed: " : "",
                    r ? err : "");
            pthread_mutex_lock(&s->lock);
            if (r == 0 && load_state(s, names[i], &st) == 0) {
                if (st.deadline == deadline) {      /* not resumed (new deadline) meanwhile */
                    st.deadline = 0;
                    save_state(s, names[i], &st);
                }
                serve_state_free(&st);
            }
            pthread_mutex_unlock(&s->lock);
        } else {
            r = sbx_rm(names[i], err, sizeof err);
            fprintf(stderr, "moat serve: sandbox %s timed out: killed%s%s\n", names[i], r ? ": failed: " : "",
                    r ? err : "");
        }
    }
    free_names(names, n);
}

static void *reaper(void *arg)
{
    struct serve *s = arg;
    pthread_setname_np(pthread_self(), "serve_reaper");
    pthread_mutex_lock(&s->rlock);
    while (!s->stopping) {
        pthread_mutex_unlock(&s->rlock);
        reap_once(s);
        vm_reap(s);
        metrics_sample(s);
        pthread_mutex_lock(&s->rlock);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        long ns = (long)(s->reap_interval * 1e9);
        ts.tv_sec += ns / 1000000000L;
        ts.tv_nsec += ns % 1000000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        if (!s->stopping)
            pthread_cond_timedwait(&s->rcond, &s->rlock, &ts);
    }
    pthread_mutex_unlock(&s->rlock);
    return NULL;
}

/* ---- start / stop ---- */

static int sockaddr_of(const char *addr, unsigned port, struct sockaddr_storage *ss, bool *v6)
{
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
    *v6 = false;
    if (inet_pton(AF_INET, addr, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        return 0;
    }
    if (inet_pton(AF_INET6, addr, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        *v6 = true;
        return 0;
    }
    return -EINVAL;
}

int serve_start(const struct serve_opts *o, struct serve **out, char *why, size_t wlen)
{
    struct serve *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    snprintf(s->home, sizeof s->home, "%s", o->home);
    s->sandbox_state = o->sandbox_state;
    snprintf(s->api_key, sizeof s->api_key, "%s", o->api_key);
    s->reap_interval = o->reap_interval > 0 ? o->reap_interval : 1;
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->tpl_lock, NULL);
    pthread_mutex_init(&s->rlock, NULL);
    pthread_mutex_init(&s->vm_lock, NULL);
    pthread_mutex_init(&s->m_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->rcond, &ca);
    pthread_condattr_destroy(&ca);
    struct sockaddr_storage ss;
    bool v6;
    int r;
    if (sockaddr_of(o->api_addr, o->api_port, &ss, &v6) < 0) {
        snprintf(why, wlen, "--api: '%s' is not a numeric address", o->api_addr);
        r = -EINVAL;
        goto fail;
    }
    if ((r = mhd_load(why, wlen)) < 0)
        goto fail;
    s->api = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                                  (v6 ? MHD_USE_IPv6 : 0),
                              (uint16_t)o->api_port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, &ss,
                              MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_CONNECTION_TIMEOUT, 30u,
                              MHD_OPTION_CONNECTION_LIMIT, 256u, MHD_OPTION_END);
    if (!s->api) {
        snprintf(why, wlen, "cannot listen on %s:%u (in use?)", o->api_addr, o->api_port);
        r = -EADDRINUSE;
        goto fail;
    }
    struct envd_opts eo = { .bind_addr = o->envd_addr, .port = o->envd_port, .resolve = resolve,
                            .find_signed = find_signed, .release = release, .arg = s, .max_body = SERVE_BODY_MAX };
    r = envd_start(&eo, &s->envd);
    if (r < 0) {
        snprintf(why, wlen, "the envd server cannot listen on %s:%u: %s", o->envd_addr, o->envd_port, strerror(-r));
        goto fail;
    }
    if ((r = -pthread_create(&s->reaper, NULL, reaper, s)) < 0) {
        snprintf(why, wlen, "cannot start the reaper: %s", strerror(-r));
        goto fail;
    }
    s->reaper_on = true;
    *out = s;
    return 0;
fail:
    serve_stop(s);
    return r;
}

void serve_stop(struct serve *s)
{
    if (!s)
        return;
    if (s->reaper_on) {
        pthread_mutex_lock(&s->rlock);
        s->stopping = true;
        pthread_cond_signal(&s->rcond);
        pthread_mutex_unlock(&s->rlock);
        pthread_join(s->reaper, NULL);
    }
    if (s->api)
        MHD_stop_daemon(s->api);
    if (s->envd)
        envd_stop(s->envd);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->tpl_lock);
    pthread_mutex_destroy(&s->rlock);
    pthread_mutex_destroy(&s->vm_lock);
    pthread_mutex_destroy(&s->m_lock);
    while (s->series) {
        struct mseries *m = s->series;
        s->series = m->next;
        free(m);
    }
    pthread_cond_destroy(&s->rcond);
    free(s->vms);       /* those still running go on (no longer our children once we exit) */
    free(s);
}
