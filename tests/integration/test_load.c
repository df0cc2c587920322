/* Load and lifetime through libmoat (include/moat.h) and the moat binary:
 *  - 20 tiny-guest VMs at once in this process (the `exitcode` guest, 2
 *    vCPUs each), all started before any is waited for: each exits 42;
 *    then the same 20 as 20 `moat run` processes at once;
 *  - MOAT_LOAD_CYCLES (default 1000) create / start / stop / wait /
 *    destroy cycles of a guest that spins (`timeout`): after a warm-up of
 *    20 cycles, this process's open descriptors are the same at the end
 *    and its RSS has grown by at most 1 MiB.
 * Descriptors: the entries of /proc/self/fd; RSS: VmRSS of
 * /proc/self/status. Not for the sanitizer build (its quarantine grows
 * by design): run by `make test-load` with build/tests/test_load.
 *
 * Environment: MOAT_GUESTS, MOAT_BIN, MOAT_TEST_SLOW, MOAT_LOAD_CYCLES,
 * MOAT_REQUIRE_KVM. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "include/moat.h"
#include "tests/guests/expect.h"
#include "tests/integration/harness.h"
#include "tests/integration/host_probe.h"

#define NVMS 20

static char guest_path[2][512];

static const char *guest(const char *name, unsigned k)
{
    snprintf(guest_path[k], sizeof guest_path[k], "%s/%s.elf", env_or("MOAT_GUESTS", "build/guests"), name);
    return guest_path[k];
}

static bool have_kvm(void)
{
    char why[256];
    int k = moat_host_kind(why, sizeof why);
    if (k == MOAT_HOST_PVM || k == MOAT_HOST_KVM)
        return true;
    if (require_kvm())
        ck_abort_msg("%s and MOAT_REQUIRE_KVM is set", why);
    printf("SKIPPED: test_load: %s\n", why);
    return false;
}

static long open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    long n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1;   /* the directory's own descriptor */
}

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    ck_assert_ptr_nonnull(f);
    char line[256];
    long v = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6))
            v = atol(line + 6);
    fclose(f);
    return v;
}

static struct moat_vm *make(const char *name, uint32_t cpus, int nul)
{
    struct moat_config cfg;
    moat_config_init(&cfg);
    cfg.kernel = guest(name, 0);
    cfg.mem_mib = 16;
    cfg.cpus = cpus;
    cfg.console_out = nul;
    struct moat_vm *vm = NULL;
    struct moat_error err;
    int r = moat_create(&cfg, &vm, &err);
    ck_assert_msg(r == 0, "moat_create(%s): %d %s", name, r, err.msg);
    return vm;
}

START_TEST(twenty_vms_one_process)
{
    if (!have_kvm())
        return;
    int nul = open("/dev/null", O_WRONLY | O_CLOEXEC);
    ck_assert_int_ge(nul, 0);
    struct moat_vm *vm[NVMS];
    for (int i = 0; i < NVMS; i++)
        vm[i] = make("exitcode", 2, nul);
    for (int i = 0; i < NVMS; i++)
        ck_assert_int_eq(moat_start(vm[i]), 0);
    for (int i = 0; i < NVMS; i++) {
        struct moat_exit ex;
        ck_assert_int_eq(moat_wait(vm[i], 60000 * slow(), &ex), 0);
        ck_assert_msg(ex.reason == MOAT_EXIT_RESET && ex.status == EXITCODE_STATUS, "VM %d: reason %d status %d %s",
                      i, ex.reason, ex.status, ex.detail);
    }
    for (int i = 0; i < NVMS; i++)
        moat_destroy(vm[i]);
    close(nul);
}
END_TEST

START_TEST(twenty_processes)
{
    if (!have_kvm())
        return;
    const char *bin = env_or("MOAT_BIN", "build/moat");
    pid_t pid[NVMS];
    int nul = open("/dev/null", O_WRONLY | O_CLOEXEC);
    ck_assert_int_ge(nul, 0);
    for (int i = 0; i < NVMS; i++)
        pid[i] = spawn_child("test_load",
                             (const char *const[]){ bin, "run", "--kernel", guest("exitcode", 1), "--cpus", "2",
                                                    "--mem", "16", NULL },
                             nul, nul, false, false);
    double deadline = now() + 120 * slow();
    for (int i = 0; i < NVMS; i++) {
        int st = 0;
        pid_t r;
        while ((r = waitpid(pid[i], &st, WNOHANG)) == 0 && now() < deadline)
            usleep(10000);
        if (r == 0) {
            kill(pid[i], SIGKILL);
            waitpid(pid[i], &st, 0);
        }
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == EXITCODE_STATUS, "process %d: status 0x%x", i, st);
    }
    close(nul);
}
END_TEST

START_TEST(create_start_stop_destroy_cycles)
{
    if (!have_kvm())
        return;
    long cycles = atol(env_or("MOAT_LOAD_CYCLES", "1000"));
    ck_assert_int_gt(cycles, 20);
    int nul = open("/dev/null", O_WRONLY | O_CLOEXEC);
    ck_assert_int_ge(nul, 0);
    long fds0 = 0, rss0 = 0;
    double t0 = now();
    for (long i = 0; i < cycles; i++) {
        if (i == 20) {
            fds0 = open_fds();
            rss0 = rss_kib();
        }
        struct moat_vm *vm = make("timeout", 1, nul);
        ck_assert_int_eq(moat_start(vm), 0);
        ck_assert_int_eq(moat_stop(vm), 0);
        struct moat_exit ex;
        ck_assert_int_eq(moat_wait(vm, 20000 * slow(), &ex), 0);
        ck_assert_msg(ex.reason == MOAT_EXIT_STOPPED || ex.reason == MOAT_EXIT_RESET, "cycle %ld: reason %d %s", i,
                      ex.reason, ex.detail);
        moat_destroy(vm);
    }
    long fds1 = open_fds(), rss1 = rss_kib();
    printf("test_load: %ld cycles in %.1fs; after warm-up: %ld -> %ld fds, RSS %ld -> %ld KiB\n", cycles,
           now() - t0, fds0, fds1, rss0, rss1);
    ck_assert_int_eq(fds1, fds0);
    ck_assert_msg(rss1 - rss0 <= 1024, "RSS grew by %ld KiB over %ld cycles", rss1 - rss0, cycles - 20);
    close(nul);
}
END_TEST

int main(void)
{
    const TTest *const tests[] = { twenty_vms_one_process, twenty_processes, create_start_stop_destroy_cycles };
    return run_suite("load", tests, sizeof tests / sizeof tests[0], 1200);
}
