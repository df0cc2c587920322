/* moat_exec: a command in the guest through its agent, over the VM's vsock
 * device (vmm/agent/agent_client.c does the protocol). The client writes the
 * command's output to file descriptors; pipes turn that into the
 * caller's callbacks, read by one helper thread per call. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vmm/agent/agent_client.h"
#include "vmm/core/devtab.h"
#include "vmm/core/vm.h"
#include "vmm/base/clock.h"


struct pump {
    int fd[2];                    /* stdout, stderr read ends */
    const struct moat_exec *ex;
};

static void *pump_thread(void *arg)
{
    struct pump *p = arg;
    char buf[16384];
    int open_fds = 2;
    while (open_fds) {
        struct pollfd pf[2] = { { .fd = p->fd[0], .events = POLLIN }, { .fd = p->fd[1], .events = POLLIN } };
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        for (int i = 0; i < 2; i++) {
            if (!pf[i].revents)
                continue;
            ssize_t n = read(p->fd[i], buf, sizeof(buf));
            if (n <= 0) {
                if (n < 0 && errno == EINTR)
                    continue;
                close(p->fd[i]);
                p->fd[i] = -1;   /* poll ignores negative fds */
                open_fds--;
                continue;
            }
            void (*cb)(void *, const void *, size_t) = i == 0 ? p->ex->on_stdout : p->ex->on_stderr;
            if (cb)
                cb(p->ex->opaque, buf, (size_t)n);
        }
    }
    return NULL;
}

static int connect_port(struct moat_vm *vm, unsigned port, int connect_wait_ms, struct agent_client *c);

static int connect_agent(struct moat_vm *vm, const struct moat_exec *ex, struct agent_client *c)
{
    return connect_port(vm, ex->port ? ex->port : AGENT_DEFAULT_PORT, ex->connect_wait_ms, c);
}

static int connect_port(struct moat_vm *vm, unsigned port, int connect_wait_ms, struct agent_client *c)
{
    uint64_t t0 = clock_mono_ns();
    for (;;) {
        int r = agent_client_connect(c, vm_vsock_uds(vm), 1, port);
        if (r == 0)
            return 0;
        long waited = (long)((clock_mono_ns() - t0) / 1000000u);
        if (waited >= connect_wait_ms)
            return connect_wait_ms > 0 ? -ETIMEDOUT : r;
        usleep(100000);
    }
}

int moat_exec(struct moat_vm *vm, const struct moat_exec *ex_in, int *status)
{
    if (!vm || !ex_in || !status || ex_in->size < offsetof(struct moat_exec, connect_wait_ms))
        return -EINVAL;
    struct moat_exec ex;
    memset(&ex, 0, sizeof(ex));
    memcpy(&ex, ex_in, ex_in->size < sizeof(ex) ? ex_in->size : sizeof(ex));
    if (!ex.argv || ex.argc == 0 || ex.argc > 4096 || ex.envc > 4096 || (ex.envc && !ex.env))
        return -EINVAL;
    if (!vm_vsock_uds(vm))
        return -ENOTCONN;

    struct agent_client c;
    int r = connect_agent(vm, &ex, &c);
    if (r < 0)
        return r;
    struct agent_exec req = {
        .timeout_ms = ex.timeout_ms,
        .argc = (uint32_t)ex.argc,
        .envc = (uint32_t)ex.envc,
        .cwd = (char *)(ex.cwd ? ex.cwd : ""),
        .argv = (char **)ex.argv,
        .env = (char **)ex.env,
    };
    int out[2] = { -1, -1 }, err[2] = { -1, -1 };
    if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0) {
        r = -errno;
        goto done;
    }
    struct pump p = { { out[0], err[0] }, &ex };
    pthread_t thr;
    if ((r = -pthread_create(&thr, NULL, pump_thread, &p)) < 0) {
        close(out[0]);
        close(err[0]);
        goto done;
    }
    struct agent_exit st;
    char why[200];
    r = agent_client_exec(&c, &req, ex.stdin_fd, out[1], err[1], &st, why, sizeof(why));
    close(out[1]);
    close(err[1]);
    out[1] = err[1] = -1;
    pthread_join(thr, NULL);   /* all output delivered before we return */
    if (r == 0)
        *status = agent_exit_status(&st);
    else if (r != -ENOMEM && r != -EINVAL)
        r = r == -EPIPE || r == -ECONNRESET ? -EPROTO : r;
done:
    if (out[1] >= 0)
        close(out[1]);
    if (err[1] >= 0)
        close(err[1]);
    agent_client_close(&c);
    return r;
}

/* ---- file transfer ---- */

static int file_errno(int r)
{
    return r == -EPIPE || r == -ECONNRESET ? -EPROTO : r;
}

/* The start of a file transfer: errbuf cleared, the arguments checked
 * (args_ok: the caller's own), the agent connected. */
static int file_connect(struct moat_vm *vm, int fd, const char *guest_path, bool args_ok,
                        int connect_wait_ms, char *errbuf, size_t errlen, struct agent_client *c)
{
    if (errbuf && errlen)
        errbuf[0] = 0;
    if (!vm || fd < 0 || !guest_path || !*guest_path || strlen(guest_path) > AGENT_MAX_PATH || !args_ok)
        return -EINVAL;
    if (!vm_vsock_uds(vm))
        return -ENOTCONN;
    return connect_port(vm, AGENT_DEFAULT_PORT, connect_wait_ms, c);
}

int moat_put_file(struct moat_vm *vm, int fd, const char *guest_path, uint32_t mode,
                  int connect_wait_ms, char *errbuf, size_t errlen)
{
    struct agent_client c;
    int r = file_connect(vm, fd, guest_path, !(mode & ~07777u), connect_wait_ms, errbuf, errlen, &c);
    if (r < 0)
        return r;
    r = agent_client_put(&c, fd, guest_path, mode, errbuf, errlen);
    agent_client_close(&c);
    return file_errno(r);
}

int moat_get_file(struct moat_vm *vm, const char *guest_path, int fd, uint32_t *mode,
                  int connect_wait_ms, char *errbuf, size_t errlen)
{
    struct agent_client c;
    int r = file_connect(vm, fd, guest_path, true, connect_wait_ms, errbuf, errlen, &c);
    if (r < 0)
        return r;
    uint32_t m = 0;
    r = agent_client_get(&c, guest_path, fd, &m, errbuf, errlen);
    agent_client_close(&c);
    if (r == 0 && mode)
        *mode = m;
    return file_errno(r);
}
