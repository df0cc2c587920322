/* moat vmm (also when moat is run as `firecracker`): Firecracker's HTTP
 * API on a Unix socket, so orchestrators written for Firecracker drive
 * moat unchanged (docs/control-api.md, docs/orchestrators.md). HTTP
 * through libmicrohttpd on the already bound socket, polled by one API
 * thread of ours (a client that trickles bytes holds only its own
 * connection; http.c); request bodies decoded by fc_req.c; each resource
 * group in its own file (fc_vmm.h); the VM through libmoat. The command
 * line is the CLI's (vmm/cli/cli_fc.c), which calls fc_vmm_run.
 *
 * Threads and seccomp (docs/security.md, "Seccomp"), as Firecracker's: the
 * API thread ("fc_api", list `api`) only moves bytes: it reads a request,
 * hands it to the main thread and sends the answer back. The main thread
 * does every request's work (files, the VM's creation, snapshots), unfiltered
 * until the VM has first run, then under the `fcmain` list; the VM's own
 * threads have theirs (MOAT_F_SECCOMP). */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "vmm/api/firecracker/fc_vmm.h"
#include "vmm/base/clock.h"

/* The main thread's own filter, once the VM has run (moat_start returned:
 * its vCPU, console and device threads exist): from then on it only
 * serves requests on a built VM, the signals, the VM's end and the
 * metrics. Not in the sanitizer build, where the thread that ends the
 * process runs the leak check (sc_exit_unfiltered). 0 or -errno. */
static int main_filter(struct fcvm *s)
{
    pthread_mutex_lock(&s->lock);
    bool due = s->sc_flags && !s->main_filtered && s->vm && s->started;
    pthread_mutex_unlock(&s->lock);
    if (!due || sc_exit_unfiltered())
        return 0;
    char name[16] = "";
    pthread_getname_np(pthread_self(), name, sizeof name);   /* keeps the program's name */
    int r = sc_install_named(SC_FCMAIN, (s->sc_flags & MOAT_F_SECCOMP_AUDIT) ? SC_AUDIT : SC_KILL,
                             name[0] ? name : NULL);
    if (r == 0)
        s->main_filtered = true;
    return r;
}

/* The state before anything runs: 0, or an exit code (--metadata). */
static int fcvm_init(struct fcvm *s, const struct fc_vmm_opts *o)
{
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->hlock, NULL);
    pthread_cond_init(&s->hcond, NULL);
    s->sc_flags = o->sc_flags;
    snprintf(s->id, sizeof s->id, "%s", o->id);
    snprintf(fc_flog.id, sizeof fc_flog.id, "%s", o->id);
    s->mc.vcpu_count = 1;
    s->mc.mem_size_mib = 128;
    s->body_limit = o->body_limit;
    /* Firecracker: the MMDS limit defaults to the API's payload limit. */
    s->mmds_limit = o->mmds_limit ? o->mmds_limit : o->body_limit;
    if (o->metadata) {
        int code = fc_load_metadata(s, o->metadata);
        if (code)
            return code;
    }
    s->metrics_fd = -1;
    for (int i = 0; i < 5; i++)
        s->lat_us[i] = -1;
    s->startup_us = s->startup_cpu_us = -1;
    s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    moat_timings_set_origin(o->start_ns);
    /* The C library reads /etc/localtime at its first time conversion
     * (libmicrohttpd's Date header: gmtime_r): here, not on the API
     * thread, whose list opens no file. */
    tzset();
    /* libmoat's messages in the same line format from the start. */
    moat_set_log(MOAT_LOG_WARN, fc_lib_log, NULL);
    return 0;
}

/* The logger and metrics from the command line: as PUT /logger and
 * PUT /metrics would set them. 0, or an exit code after a line on stderr. */
static int cmdline_sinks(struct fcvm *s, const struct fc_vmm_opts *o)
{
    if (o->log_path || o->level || o->show_level || o->show_origin) {
        char body[FC_STR_MAX + 200];
        json_t *j = json_object();
        if (o->log_path)
            json_object_set_new(j, "log_path", json_string(o->log_path));
        if (o->level)
            json_object_set_new(j, "level", json_string(o->level));
        json_object_set_new(j, "show_level", json_boolean(o->show_level));
        json_object_set_new(j, "show_log_origin", json_boolean(o->show_origin));
        char *t = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        snprintf(body, sizeof body, "%s", t ? t : "{}");
        free(t);
        struct fc_logger lg;
        char why[300];
        struct reply rep = { 0, NULL };
        if (fc_decode_logger(body, strlen(body), &lg, why, sizeof why) < 0) {
            fprintf(stderr, "moat vmm: --level/--log-path: %s\n", why);
            return FC_EXIT_ARGS;
        }
        if (fc_put_logger(s, &lg, &rep) >= 400) {
            fprintf(stderr, "moat vmm: %s\n", rep.body ? rep.body : "logger");
            free(rep.body);
            return FC_EXIT_GENERIC;
        }
    }
    if (o->seccomp_filter)
        LOG(FC_LVL_WARN, "--seccomp-filter %s: not loaded; moat filters each thread with its own lists "
            "(docs/security.md)", o->seccomp_filter);
    if (o->metrics_path) {
        static struct fc_metrics mt;   /* zeroed: no emit_id, no properties */
        struct reply rep = { 0, NULL };
        snprintf(mt.metrics_path, sizeof mt.metrics_path, "%s", o->metrics_path);
        if (fc_put_metrics(s, &mt, &rep) >= 400) {
            fprintf(stderr, "moat vmm: %s\n", rep.body ? rep.body : "metrics");
            free(rep.body);
            return FC_EXIT_GENERIC;
        }
    }
    return 0;
}

/* The API server on o->sock and its thread: 0 and *d, or an exit code
 * after a line on stderr. */
static int api_open(struct fcvm *s, const struct fc_vmm_opts *o, struct api *api, struct MHD_Daemon **d)
{
    char why[256];
    int fd = -1;
    if (mhd_load(why, sizeof why) < 0) {
        fprintf(stderr, "moat vmm: the API server: %s\n", why);
        return FC_EXIT_GENERIC;
    }
    if (o->listen(o->sock, &fd) < 0)
        return FC_EXIT_GENERIC;
    /* No internal thread: ours polls it (api_main), under its filter. */
    *d = MHD_start_daemon(MHD_USE_EPOLL, 0, NULL, NULL, fc_on_request, s,
                          MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_NOTIFY_COMPLETED, fc_on_completed, s,
                          MHD_OPTION_CONNECTION_LIMIT, (unsigned)MAX_CONNECTIONS,
                          MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(16 * 1024), MHD_OPTION_END);
    if (!*d) {
        fprintf(stderr, "moat vmm: cannot start the API server on %s\n", o->sock);
        close(fd);
        unlink(o->sock);
        return FC_EXIT_GENERIC;
    }
    enum sc_mode mode = !o->sc_flags ? SC_OFF : (o->sc_flags & MOAT_F_SECCOMP_AUDIT) ? SC_AUDIT : SC_KILL;
    int r = fc_api_start(api, *d, mode);
    if (r < 0) {
        fprintf(stderr, "moat vmm: the API thread: %s\n", strerror(-r));
        MHD_stop_daemon(*d);    /* it closes the socket */
        unlink(o->sock);
        return FC_EXIT_GENERIC;
    }
    return 0;
}

/* Firecracker's api_server figures, from the jailer's start times:
 * monotonic and process CPU time until the API (or the config file's
 * turn) is ready. */
static void startup_figures(struct fcvm *s, const struct fc_vmm_opts *o)
{
    int64_t mono_us = clock_mono_us();
    struct timespec cpu;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
    if (o->start_us >= 0)
        s->startup_us = mono_us - o->start_us;
    if (o->start_cpu_us >= 0)
        s->startup_cpu_us = (int64_t)cpu.tv_sec * 1000000 + cpu.tv_nsec / 1000 - o->start_cpu_us + o->parent_cpu_us;
}

/* The main loop: signals, requests, the VM's end, the metrics timer.
 * Returns the exit code. */
static int main_loop(struct fcvm *s, int sfd)
{
    int code = FC_EXIT_OK;
    int64_t next_flush = clock_mono_ms() + METRICS_PERIOD_MS;
    for (;;) {
        int fr = main_filter(s);
        if (fr < 0) {
            LOG(FC_LVL_ERROR, "seccomp: the main thread's filter: %s", strerror(-fr));
            fprintf(stderr, "moat vmm: seccomp: %s\n", strerror(-fr));
            code = FC_EXIT_GENERIC;
            break;
        }
        pthread_mutex_lock(&s->lock);
        struct moat_vm *vm = s->vm;
        pthread_mutex_unlock(&s->lock);
        struct pollfd p[3] = { { sfd, POLLIN, 0 }, { s->wake_fd, POLLIN, 0 },
                               { vm ? moat_exit_fd(vm) : -1, POLLIN, 0 } };
        int64_t wait = next_flush - clock_mono_ms();
        int pr = poll(p, 3, wait < 0 ? 0 : (int)wait);
        if (pr < 0 && errno != EINTR)
            break;
        if (clock_mono_ms() >= next_flush) {
            pthread_mutex_lock(&s->lock);
            fc_flush_metrics(s);
            pthread_mutex_unlock(&s->lock);
            next_flush = clock_mono_ms() + METRICS_PERIOD_MS;
        }
        if (p[1].revents & POLLIN) {
            uint64_t v;
            if (read(s->wake_fd, &v, sizeof v) < 0) { /* nothing */ }
            fc_serve_pending(s);
        }
        if (p[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof si) == (ssize_t)sizeof si)
                LOG(FC_LVL_INFO, "Received signal %u: shutting down", si.ssi_signo);
            break;
        }
        if (vm && (p[2].revents & POLLIN)) {
            struct moat_exit ex;
            if (moat_wait(vm, 0, &ex) == 0) {
                LOG(ex.reason == MOAT_EXIT_RESET ? FC_LVL_INFO : FC_LVL_ERROR, "Vmm is stopping: %s",
                    ex.detail[0] ? ex.detail : "the guest stopped");
                code = ex.reason == MOAT_EXIT_RESET || ex.reason == MOAT_EXIT_STOPPED ? FC_EXIT_OK : FC_EXIT_GENERIC;
                break;
            }
        }
    }
    return code;
}

/* Leaving: answers already given (the InstanceStart of a guest that
 * stopped at once) still go out: up to 1 s for them; a request that comes
 * now is refused. Then the API thread, the VM, the last metrics line. */
static void shut_down(struct fcvm *s, const struct fc_vmm_opts *o, struct api *api, struct MHD_Daemon *d)
{
    fc_close_requests(s);
    for (int i = 0; d && i < 100 && __atomic_load_n(&s->inflight, __ATOMIC_SEQ_CST) > 0; i++)
        usleep(10000);
    if (d)
        fc_api_stop(api);       /* the daemon closes the socket */
    pthread_mutex_lock(&s->lock);
    if (s->vm) {
        moat_stop(s->vm);
        moat_destroy(s->vm);
        s->vm = NULL;
    }
    if (s->has_metrics)
        fc_flush_metrics(s);
    pthread_mutex_unlock(&s->lock);
    if (d)
        unlink(o->sock);
}

int fc_vmm_run(const struct fc_vmm_opts *o)
{
    static struct fcvm s;
    int code = fcvm_init(&s, o);
    if (code || (code = cmdline_sinks(&s, o)))
        return code;

    /* SIGTERM, SIGINT, SIGHUP stop the VM cleanly; blocked before any
     * thread starts so that only the signalfd sees them. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    int sfd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);

    struct MHD_Daemon *d = NULL;
    static struct api api;
    if (!o->no_api && (code = api_open(&s, o, &api, &d)))
        return code;
    startup_figures(&s, o);
    if (o->config) {
        pthread_mutex_lock(&s.lock);
        int r = fc_config_boot(&s, o->config);
        pthread_mutex_unlock(&s.lock);
        if (r < 0) {
            fc_close_requests(&s);
            if (d) {
                fc_api_stop(&api);      /* the daemon closes the socket */
                unlink(o->sock);
            }
            return FC_EXIT_BAD_CONFIG;
        }
    }
    code = main_loop(&s, sfd);
    shut_down(&s, o, &api, d);
    return code;
}
