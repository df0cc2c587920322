/* The post-restore fix-up (docs/vsock.md): a restored guest's wall clock
 * is as old as its snapshot and its RNG state is shared with every other
 * restore of the same snapshot. moat_start of a VM restored with a vsock
 * device starts one thread that, through the guest agent, sets
 * CLOCK_REALTIME to the host's and adds fresh host entropy (then forces a
 * CRNG reseed). The vsock device holds every host client in its listen
 * backlog until this is done or has given up (vsock_ungate), so no host
 * client reaches the guest before the fix-up. Agent absent or silent: a
 * bounded wait (FIXUP_WAIT_MS), a warning, and the gate opens anyway. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "vmm/agent/agent_proto.h"
#include "devices/vsock/vsock.h"
#include "vmm/agent/agent_client.h"
#include "vmm/agent/fixup.h"
#include "vmm/base/log.h"
#include "vmm/base/scfilter.h"
#include "vmm/core/devtab.h"
#include "vmm/core/vm.h"
#include "vmm/core/vmhooks.h"

#define FIXUP_WAIT_MS   5000    /* the whole fix-up, agent handshake included */
#define FIXUP_ENTROPY   64      /* bytes */

/* The fix-up's record of one VM (its hooks' ctx). */
struct vm_fixup {
    struct moat_vm *vm;
    bool pending;               /* a restored device asked: at moat_start */
    bool started;
    pthread_t thread;
    int fd;                     /* its connection (under vm->lock), -1 */
};

static int64_t ms_left(uint64_t deadline)
{
    uint64_t now = clock_mono_ns();
    return now >= deadline ? 0 : (int64_t)((deadline - now) / 1000000u);
}

/* One attempt: connect to the agent through the device (past the gate),
 * then SET_TIME and ADD_ENTROPY. 0, or -errno (-ECONNREFUSED: nobody
 * listens on the agent's port yet). */
static int fixup_once(struct vm_fixup *fx, uint64_t deadline, char *why, size_t wlen)
{
    struct moat_vm *vm = fx->vm;
    int fd;
    int r = vsock_open_internal(vm_vsock_dev(vm), &fd);
    if (r < 0)
        return r;
    int cfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (cfd < 0) {
        r = -errno;
        close(fd);
        return r;
    }
    pthread_mutex_lock(&vm->lock);
    fx->fd = fd;                        /* moat_destroy shuts it down */
    bool stop = atomic_load(&vm->stopping);
    pthread_mutex_unlock(&vm->lock);
    struct agent_client c;
    if (stop) {
        close(cfd);
        r = -ECANCELED;
        goto out;
    }
    r = agent_client_attach(&c, cfd, 1, AGENT_DEFAULT_PORT, (int)ms_left(deadline));
    if (r < 0)
        goto out;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    struct agent_time t = { .sec = now.tv_sec, .nsec = (uint32_t)now.tv_nsec };
    uint8_t pl[16];
    memset(pl, 0, sizeof pl);
    struct agent_buf b = { 0 };
    r = agent_put_set_time(&b, 0, &t);      /* the payload encoding, reused */
    if (r == 0) {
        memcpy(pl, b.p + AGENT_HDR_SIZE, sizeof pl);
        r = agent_client_request(&c, AGENT_T_SET_TIME, pl, sizeof pl, (int)ms_left(deadline), why, wlen);
    }
    agent_buf_free(&b);
    if (r == 0) {
        uint8_t rnd[FIXUP_ENTROPY];
        size_t got = 0;
        while (got < sizeof rnd) {
            ssize_t k = getrandom(rnd + got, sizeof rnd - got, 0);
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0) {
                r = -errno;
                break;
            }
            got += (size_t)k;
        }
        if (r == 0)
            r = agent_client_request(&c, AGENT_T_ADD_ENTROPY, rnd, sizeof rnd, (int)ms_left(deadline),
                                     why, wlen);
        explicit_bzero(rnd, sizeof rnd);
    }
    agent_client_close(&c);
out:
    pthread_mutex_lock(&vm->lock);
    fx->fd = -1;
    pthread_mutex_unlock(&vm->lock);
    close(fd);
    return r;
}

static void *fixup_thread(void *arg)
{
    struct vm_fixup *fx = arg;
    struct moat_vm *vm = fx->vm;
    uint64_t t0 = clock_mono_ns(), deadline = t0 + FIXUP_WAIT_MS * 1000000ull;
    char why[256] = "";
    int r;
    for (;;) {
        r = fixup_once(fx, deadline, why, sizeof why);
        if (r == 0 || r == -EREMOTEIO || r == -ECANCELED || atomic_load(&vm->stopping))
            break;
        /* no listener yet (guest still starting its agent), or the device
         * timed the CONNECT out: again, until the deadline */
        if (ms_left(deadline) < 50)
            break;
        usleep(50000);
    }
    uint64_t ms = (clock_mono_ns() - t0) / 1000000u;
    if (r == 0)
        log_debug("restore fix-up: guest clock set and RNG reseeded in %llu ms", (unsigned long long)ms);
    else if (r != -ECANCELED && !atomic_load(&vm->stopping))
        log_warn("restore fix-up through the guest agent failed after %llu ms (%s%s%s): "
                 "guest clock and RNG not refreshed; host clients let in",
                 (unsigned long long)ms, strerror(-r), why[0] ? ": " : "", why);
    vsock_ungate(vm_vsock_dev(vm));
    return NULL;
}

/* moat_start of a VM whose restored device asked for the fix-up. */
static int hook_start(struct moat_vm *vm, void *ctx)
{
    struct vm_fixup *fx = ctx;
    if (!fx->pending)
        return 0;
    fx->pending = false;
    if (!vm_vsock_dev(vm))
        return 0;
    int r = -pthread_create(&fx->thread, NULL, fixup_thread, fx);
    if (r < 0) {
        log_warn("restore fix-up: thread: %s", strerror(-r));
        vsock_ungate(vm_vsock_dev(vm));
        return 0;       /* not fatal: the guest runs, unfixed */
    }
    fx->started = true;
    return 0;
}

/* shutdown(2) of the fix-up's connection, on the VM's runner thread:
 * hook_stopped runs on the caller's thread, which (in the CLI) is under
 * the main list, where shutdown is not allowed. */
static int fixup_shutdown(void *arg)
{
    return shutdown(*(int *)arg, SHUT_RDWR) < 0 ? -errno : 0;
}

/* moat_destroy: the vCPUs have stopped; the vsock device still exists. */
static void hook_stopped(struct moat_vm *vm, void *ctx)
{
    struct vm_fixup *fx = ctx;
    if (!fx->started)
        return;
    pthread_mutex_lock(&vm->lock);
    if (fx->fd >= 0)
        sc_runner_call(vm->runner, fixup_shutdown, &fx->fd);
    pthread_mutex_unlock(&vm->lock);
    pthread_join(fx->thread, NULL);
    fx->started = false;
}

static void hook_restored(struct moat_vm *vm, void *ctx, unsigned slot)
{
    (void)vm;
    (void)slot;
    ((struct vm_fixup *)ctx)->pending = true;
}

static void hook_destroy(struct moat_vm *vm, void *ctx)
{
    (void)vm;
    free(ctx);
}

static const struct vm_hook_ops fixup_ops = {
    .name = "agent fix-up",
    .restored = hook_restored,
    .start = hook_start,
    .stopped = hook_stopped,
    .destroy = hook_destroy,
};

int fixup_attach(struct moat_vm *vm)
{
    struct vm_fixup *fx = calloc(1, sizeof(*fx));
    if (!fx)
        return -ENOMEM;
    fx->vm = vm;
    fx->fd = -1;
    int r = vm_hooks_add(vm, &fixup_ops, fx);
    if (r < 0)
        free(fx);
    return r;
}
