/* The hostile-guest suite: the moat binary on /dev/kvm runs the hostile
 * virtio driver guest (tests/guests/vhostile.c, protocol in
 * tests/guests/hostile_proto.h) with two drives, a vsock device and (where
 * passt is installed) a net device with the metadata service and a policy
 * that denies everything else, and 2 vCPUs of which the second sits in
 * HLT with interrupts off all along.
 *  - every attack, in every round, has the outcome this file expects
 *    (the device failed the request: dropped / ioerr / unsupp / rst /
 *    silent; or set NEEDS_RESET; or ignored the write; or, for the few
 *    controls, served it: each named below),
 *    the companion request on the other devices right after it worked,
 *    and the attacked device worked again after a reset;
 *  - moat stays alive: it exits with the guest's status, and its log
 *    names each refusal;
 *  - moat's RSS grows by at most 1 MiB from the start of round 2 (after a
 *    round of warm-up) to the end (not for a sanitizer build, whose
 *    allocator quarantine grows on purpose: SKIPPED there);
 *  - a vCPU spinning with interrupts off while the other is halted with
 *    interrupts off: --timeout still ends the run (exit 124).
 * The guest that floods ports and MMIO without devices is `hostile` in
 * test_integration.c.
 *
 * Environment: MOAT_BIN (build/moat), MOAT_GUESTS (build/guests),
 * MOAT_TEST_SLOW (time limits x N), MOAT_REQUIRE_KVM (fail instead of skip
 * without KVM), MOAT_HOSTILE_ROUNDS (1..9, default 3; the RSS check needs
 * 2). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../guests/expect.h"
#include "../guests/hostile_proto.h"
#include "host_probe.h"
#include "harness.h"

#define OUT_CAP (1u << 20)
#define MAX_HELD 64

static const char *moat_bin(void) { return env_or("MOAT_BIN", "build/moat"); }

/* Each attack and the one outcome it must have (vhostile.c says how the
 * guest tells them apart). */
static const struct { const char *name, *outcome; } expected[] = {
    /* virtqueue: chain-level errors fail just the request (used length 0,
     * status byte untouched) */
    { "blk_desc_loop", "dropped" },
    { "blk_desc_self_loop", "dropped" },
    { "blk_next_out_of_range", "dropped" },
    { "blk_addr_beyond_ram", "dropped" },
    { "blk_addr_in_hole", "dropped" },
    { "blk_addr_wraps", "dropped" },
    { "blk_len_huge", "dropped" },
    { "blk_straddles_ram_end", "dropped" },
    { "blk_no_status", "dropped" },
    { "blk_status_readonly", "dropped" },
    { "blk_indirect_oversize", "dropped" },
    { "blk_indirect_not_offered", "dropped" },
    { "blk_indirect_nested", "dropped" },
    { "blk_indirect_len_odd", "dropped" },
    { "blk_indirect_len_zero", "dropped" },
    { "blk_indirect_huge", "dropped" },
    { "blk_indirect_beyond_ram", "dropped" },
    { "blk_indirect_and_next", "dropped" },
    { "blk_indirect_loop", "dropped" },
    /* the control: the same indirect chain with the feature negotiated */
    { "blk_indirect_plain", "ok" },
    /* malformed block requests with a status byte: IOERR / UNSUPP */
    { "blk_hdr_short", "ioerr" },
    { "blk_unknown_type", "unsupp" },
    { "blk_read_into_readonly", "ioerr" },
    { "blk_write_from_writable", "ioerr" },
    { "blk_data_len_odd", "ioerr" },
    { "blk_sector_past_end", "ioerr" },
    { "blk_sector_straddles_end", "ioerr" },
    { "blk_sector_overflow", "ioerr" },
    { "blk_get_id_short", "ioerr" },
    { "blk_discard_garbage", "ioerr" },
    /* queue-level: the ring itself is unusable */
    { "blk_avail_idx_jump", "needs_reset" },
    { "blk_head_out_of_range", "needs_reset" },
    /* transport: refused or ignored writes */
    { "blk_ring_outside_ram", "refused" },
    { "blk_features_not_offered", "refused" },
    { "blk_qsize_after_driver_ok", "ignored" },
    { "blk_ring_move_after_driver_ok", "ignored" },
    { "blk_queue_unready_after_driver_ok", "ignored" },
    { "blk_readonly_regs", "ignored" },
    { "blk_unknown_regs", "ignored" },
    { "blk_status_skips_steps", "ignored" },
    { "blk_config_overrun", "ignored" },
    { "blk_notify_flood", "ignored" },
    { "blk_interrupt_ack_junk", "ignored" },
    { "unmapped_mmio_pio_flood", "ignored" },
    /* vsock */
    { "vsock_unknown_port", "rst" },
    { "vsock_rw_without_connection", "rst" },
    { "vsock_bad_type", "rst" },
    { "vsock_bad_op", "silent" },
    { "vsock_bad_cid", "silent" },
    { "vsock_hdr_short", "silent" },
    { "vsock_len_lies", "silent" },
    { "vsock_credit_overrun", "rst" },
    { "vsock_tx_avail_idx_jump", "needs_reset" },
    { "vsock_rx_head_out_of_range", "needs_reset" },
    { "vsock_notify_flood", "ignored" },
    { "vsock_config_overrun", "ignored" },
    /* virtio-net (only with a net device): transmit chains the device
     * refuses, frames its filter drops, and a good ARP request with junk in
     * the virtio-net header's offload fields (flags, GSO type: the header
     * must agree with the frame, whoever it is for) get no answer; a good
     * ARP request cut anywhere gets one */
    { "net_tx_shorter_than_header", "silent" },
    { "net_tx_header_only", "silent" },
    { "net_tx_runt", "silent" },
    { "net_tx_arp_truncated", "silent" },
    { "net_tx_oversize", "silent" },
    { "net_tx_writable_desc", "silent" },
    { "net_tx_garbage_frame", "silent" },
    { "net_tx_desc_loop", "silent" },
    { "net_tx_split", "reply" },
    { "net_tx_bad_vnet_header", "silent" },
    { "net_tx_avail_idx_jump", "needs_reset" },
    /* a receive buffer without room for the header, or not writable, comes
     * back empty and the frame lands in the next; one that fits no buffer
     * is dropped */
    { "net_rx_too_small", "dropped" },
    { "net_rx_readonly", "dropped" },
    { "net_rx_no_room", "dropped" },
    { "net_rx_avail_idx_jump", "needs_reset" },
    { "net_notify_flood", "ignored" },
    { "net_config_overrun", "ignored" },
};
#define NEXPECTED (sizeof expected / sizeof expected[0])
static bool is_net(size_t i) { return !strncmp(expected[i].name, "net_", 4); }

/* passt in PATH: the net device's user-mode backend can start. */
static char dir[128];

static const char *tpath(const char *name)
{
    static char bufs[4][256];
    static unsigned k;
    char *b = bufs[k++ % 4];
    snprintf(b, 256, "%s/%s", dir, name);
    return b;
}

static void write_image(const char *path, unsigned sectors, bool second)
{
    size_t n = sectors * 512u;
    unsigned char *b = malloc(n);
    ck_assert_ptr_nonnull(b);
    for (size_t i = 0; i < n; i++)
        b[i] = second ? HV_PAT2(i) : HV_PAT(i);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(b, 1, n, f), n);
    fclose(f);
    free(b);
}

/* VmRSS of pid in KiB, or -1. */
static long rss_kib(pid_t pid)
{
    char p[64], line[256];
    snprintf(p, sizeof p, "/proc/%d/status", (int)pid);
    FILE *f = fopen(p, "r");
    if (!f)
        return -1;
    long v = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6))
            v = atol(line + 6);
    fclose(f);
    return v;
}

struct run {
    char *out;
    size_t len;
    int status;
    double secs;
    long rss_round2, rss_done;   /* KiB; -1 not seen */
    unsigned accepted;
};

/* Run moat; listen (if lfd >= 0) on the holding port and accept without
 * ever reading; sample moat's RSS at "hv: round 2" and at HV_DONE. */
static void run_moat(struct run *r, double cap_s, int lfd, const char *const *argv)
{
    memset(r, 0, sizeof *r);
    r->rss_round2 = r->rss_done = -1;
    r->out = calloc(1, OUT_CAP + 1);
    ck_assert_ptr_nonnull(r->out);
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    double t0 = now();
    pid_t pid = spawn_child("test_hostile", argv, p[1], p[1], true, false);
    close(p[1]);
    int held[MAX_HELD];
    unsigned nheld = 0;
    double deadline = now() + cap_s * slow();
    bool killed = false;
    size_t scanned = 0;
    for (;;) {
        if (now() > deadline && !killed) {
            kill(pid, SIGKILL);
            killed = true;
        }
        struct pollfd pf[2] = { { p[0], POLLIN, 0 }, { lfd, POLLIN, 0 } };
        int n = poll(pf, lfd >= 0 ? 2 : 1, 200);
        if (n < 0 && errno != EINTR)
            break;
        if (n <= 0)
            continue;
        if (lfd >= 0 && (pf[1].revents & POLLIN)) {
            int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
            if (c >= 0) {
                r->accepted++;
                if (nheld < MAX_HELD)
                    held[nheld++] = c;
                else
                    close(c);
            }
        }
        if (!(pf[0].revents & (POLLIN | POLLHUP)))
            continue;
        char buf[4096];
        ssize_t got = read(p[0], buf, sizeof buf);
        if (got <= 0)
            break;
        if (r->len + (size_t)got <= OUT_CAP) {
            memcpy(r->out + r->len, buf, (size_t)got);
            r->len += (size_t)got;
            r->out[r->len] = 0;
        }
        /* Markers, once each, as soon as their line is complete. */
        if (r->rss_round2 < 0 && strstr(r->out + (scanned > 64 ? scanned - 64 : 0), "hv: round 2\n"))
            r->rss_round2 = rss_kib(pid);
        if (r->rss_done < 0 && strstr(r->out + (scanned > 64 ? scanned - 64 : 0), HV_DONE))
            r->rss_done = rss_kib(pid);
        scanned = r->len;
    }
    close(p[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    r->secs = now() - t0;
    r->status = WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
    for (unsigned i = 0; i < nheld; i++)
        close(held[i]);
}

static void show(const struct run *r, const char *what)
{
    fprintf(stderr, "---- %s: status %d after %.1fs, output (last 6000 bytes):\n%s\n----\n", what, r->status,
            r->secs, r->out + (r->len > 6000 ? r->len - 6000 : 0));
}

static bool have_kvm(void)
{
    char why[256];
    if (probe_host_kind(moat_bin(), why, sizeof why) != TEST_HOST_NONE)
        return true;
    if (require_kvm())
        ck_abort_msg("%s and MOAT_REQUIRE_KVM is set", why);
    printf("SKIPPED: test_hostile: %s\n", why);
    return false;
}

static const char *elf(void)
{
    static char p[512];
    snprintf(p, sizeof p, "%s/vhostile.elf", env_or("MOAT_GUESTS", "build/guests"));
    return p;
}

static unsigned count(const char *hay, const char *needle)
{
    unsigned n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

START_TEST(attacks)
{
    if (!have_kvm())
        return;
    snprintf(dir, sizeof dir, "/tmp/moat-hostile-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    write_image(tpath("d0.img"), HV_SECTORS, false);
    write_image(tpath("d1.img"), HV_SECTORS2, true);
    char uds[200], hold[220];
    snprintf(uds, sizeof uds, "%s", tpath("v.sock"));
    snprintf(hold, sizeof hold, "%s_%u", uds, HV_HOLD_PORT);
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    ck_assert_int_ge(lfd, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    ck_assert_uint_lt(strlen(hold), sizeof sa.sun_path);
    memcpy(sa.sun_path, hold, strlen(hold) + 1);
    ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(lfd, MAX_HELD), 0);

    /* virtio-net through passt, every frame but the metadata service's
     * denied by the policy: nothing leaves the host. */
    char why[128];
    bool net = user_net_possible(why, sizeof why);
    if (!net)
        printf("SKIPPED: test_hostile: the virtio-net attacks (--net user cannot start here: %s)\n", why);
    int rounds = atoi(env_or("MOAT_HOSTILE_ROUNDS", "3"));
    ck_assert_msg(rounds >= 1 && rounds <= 9, "MOAT_HOSTILE_ROUNDS must be 1..9");
    char cmdline[32];
    snprintf(cmdline, sizeof cmdline, "hv.rounds=%d", rounds);
    const char *argv[] = { moat_bin(), "run", "--kernel", elf(), "--cpus", "2", "--mem", "64", "--cmdline", cmdline,
                           "--drive", tpath("d0.img"), "--drive", tpath("d1.img"), "--vsock", uds,
                           net ? "--net" : NULL, "user,mmds", "--net-default", "deny", NULL };
    struct run r;
    run_moat(&r, 300, lfd, argv);
    close(lfd);
    show(&r, "vhostile");
    ck_assert_int_eq(r.status, HV_STATUS);
    ck_assert(strstr(r.out, HV_DONE));
    /* Every attack, every round, as expected; nothing else reported. */
    ck_assert(net ? !strstr(r.out, HV_NO_NET) : strstr(r.out, HV_NO_NET) != NULL);
    size_t nexp = 0;
    for (size_t i = 0; i < NEXPECTED; i++) {
        char want[160];
        if (is_net(i) && !net)
            continue;
        nexp++;
        snprintf(want, sizeof want, "hv: %s %s companion=ok after=ok\n", expected[i].name, expected[i].outcome);
        unsigned n = count(r.out, want);
        if (n != (unsigned)rounds)
            ck_abort_msg("%s: want \"%s\" %d times, got it %u times", expected[i].name, expected[i].outcome,
                         rounds, n);
    }
    unsigned lines = count(r.out, " companion=");
    ck_assert_uint_eq(lines, nexp * (unsigned)rounds);
    ck_assert_uint_eq(count(r.out, "companion=FAIL"), 0);
    ck_assert_uint_eq(count(r.out, "after=FAIL"), 0);
    /* The credit overrun connected once per round and was reset. */
    ck_assert_uint_ge(r.accepted, (unsigned)rounds);
    ck_assert(strstr(r.out, "overran its credit: reset"));
    ck_assert(strstr(r.out, "device needs reset"));
    /* RSS: a sanitizer build's quarantine grows by design. */
    printf("test_hostile: %s RSS %ld KiB at round 2, %ld KiB at the end, %.1fs\n", moat_bin(), r.rss_round2,
           r.rss_done, r.secs);
    ck_assert_int_gt(r.rss_done, 0);
    if (rounds < 2)
        printf("SKIPPED: test_hostile: RSS growth needs 2 rounds or more (MOAT_HOSTILE_ROUNDS=%d)\n", rounds);
    else if (r.rss_round2 <= 0)
        ck_abort_msg("no RSS sample at round 2");
    else if (strstr(moat_bin(), "-san"))
        printf("SKIPPED: test_hostile: RSS growth not checked for a sanitizer build (%s)\n", moat_bin());
    else if (r.rss_done - r.rss_round2 > 1024)
        ck_abort_msg("moat's RSS grew by %ld KiB over rounds 2..%u (limit 1024)", r.rss_done - r.rss_round2,
                     HV_ROUNDS);
    free(r.out);
    unlink(hold);
    unlink(tpath("d0.img"));
    unlink(tpath("d1.img"));
    rmdir(dir);
}
END_TEST

START_TEST(spin_with_interrupts_off)
{
    if (!have_kvm())
        return;
    struct run r;
    run_moat(&r, 60, -1,
             (const char *const[]){ moat_bin(), "run", "--kernel", elf(), "--cpus", "2", "--mem", "64",
                                    "--cmdline", "spin", "--timeout", "2", NULL });
    show(&r, "vhostile spin");
    ck_assert(strstr(r.out, HV_SPIN));
    ck_assert_int_eq(r.status, CLI_EXIT_TIMEOUT);
    free(r.out);
}
END_TEST

int main(void)
{
    const TTest *const tests[] = { attacks, spin_with_interrupts_off };
    return run_suite("hostile", tests, sizeof tests / sizeof tests[0], 400);
}
