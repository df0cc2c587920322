/* moat host: what this machine can run — the kvm-ok of moat (docs/host.md).
 * Prints the host probe (moat_host_info), the vhost-user peer it finds and
 * $MOAT_HOME, then says plainly which features work here.
 * Exit: 0 Linux guests run here (hardware KVM), 1 only small guests (PVM),
 * 2 no guest runs (no usable KVM); 2 also for a usage error. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "include/moat.h"
#include "vmm/cli/cli.h"

static const char usage_host[] =
    "usage: moat host [--kind | --reason] [--help]\n"
    "\n"
    "Say what this host can run: the KVM kind (hardware, PVM, none) and why,\n"
    "the KVM API version and capabilities moat uses, io_uring, the vhost-user\n"
    "peer (qemu-system-x86_64), $MOAT_HOME, and which moat features work here.\n"
    "\n"
    "  --kind     print only the kind: kvm, pvm or none\n"
    "  --reason   print only the one-line reason for the kind\n"
    "\n"
    "exit status: 0 Linux guests run here (hardware KVM); 1 only small guests\n"
    "(PVM); 2 no guest runs (no usable KVM), or a usage error.\n";

/* The exit status of a kind. */
static int kind_status(int kind)
{
    return kind == MOAT_HOST_KVM ? 0 : kind == MOAT_HOST_PVM ? 1 : 2;
}

/* First match of name in $PATH (absolute name into out), or 0. */
static int find_in_path(const char *name, char *out, size_t len)
{
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        const char *colon = strchr(path, ':');
        size_t n = colon ? (size_t)(colon - path) : strlen(path);
        if (n > 0 && n < PATH_MAX) {
            int w = snprintf(out, len, "%.*s/%s", (int)n, path, name);
            if (w > 0 && (size_t)w < len && access(out, X_OK) == 0)
                return 1;
        }
        path += n + (colon ? 1 : 0);
    }
    return 0;
}

/* The first line of `prog --version`, or "" (it is only information). */
static void first_line_of_version(const char *prog, char *out, size_t len)
{
    out[0] = 0;
    char cmd[PATH_MAX + 32];
    if (strchr(prog, '\'') || snprintf(cmd, sizeof cmd, "'%s' --version 2>/dev/null", prog) >= (int)sizeof cmd)
        return;
    FILE *p = popen(cmd, "r");
    if (!p)
        return;
    if (fgets(out, (int)len, p)) {
        out[strcspn(out, "\r\n")] = 0;
        for (char *c = out; *c; c++)
            if ((unsigned char)*c < 0x20)
                *c = ' ';
    }
    pclose(p);
}

static void feature(const char *what, int ok, const char *note)
{
    printf("  %-44s %s%s%s\n", what, ok ? "yes" : "no", note && *note ? " — " : "", note ? note : "");
}

int cmd_host(int argc, char **argv)
{
    int kind_only = 0, reason_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--kind"))
            kind_only = 1;
        else if (!strcmp(argv[i], "--reason"))
            reason_only = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage_host, stdout);
            return 0;
        } else {
            fprintf(stderr, "moat: host: unknown argument '%s' (see moat host --help)\n", argv[i]);
            return EXIT_USAGE;
        }
    }
    struct moat_host_info h = { .size = sizeof h };
    if (moat_host_info(&h) < 0) {
        fprintf(stderr, "moat: host: the host probe failed\n");
        return EXIT_USAGE;
    }
    const char *kname = moat_host_kind_name(h.kind);
    if (!kname)
        kname = "unknown";
    if (kind_only || reason_only) {
        if (kind_only)
            printf("%s\n", kname);
        if (reason_only)
            printf("%s\n", h.reason);
        return kind_status(h.kind);
    }

    printf("moat %s on this host\n\n", moat_version());
    printf("KVM:       %s — %s\n", kname, h.reason);
    printf("  device   %s", h.device);
    if (h.api_version > 0)
        printf(", API version %d", h.api_version);
    if (h.module[0])
        printf(", module %s", h.module);
    if (h.kvm_available)
        printf(", up to %d vCPUs", h.max_vcpus);
    printf("\n");
    if (h.ncaps) {
        printf("  capabilities moat uses:\n");
        for (unsigned i = 0; i < h.ncaps; i++)
            printf("    %-32s %s%s\n", h.caps[i].name, h.caps[i].value ? "yes" : "no",
                   h.caps[i].required ? " (required)" : "");
    }
    printf("io_uring:  %s\n", h.io_uring ? "allowed: disk I/O uses it" : h.io_uring_reason);
    if (!h.io_uring)
        printf("           (disk I/O uses a thread pool instead)\n");

    char qemu[PATH_MAX], qver[200] = "";
    int have_qemu = find_in_path("qemu-system-x86_64", qemu, sizeof qemu);
    if (have_qemu) {
        first_line_of_version(qemu, qver, sizeof qver);
        printf("vhost-user peer: %s%s%s%s\n", qemu, qver[0] ? " (" : "", qver, qver[0] ? ")" : "");
    } else {
        printf("vhost-user peer: qemu-system-x86_64 not found in PATH\n");
    }
    char home[PATH_MAX];
    if (cli_moat_home(home, sizeof home) == 0) {
        struct stat st;
        printf("MOAT_HOME: %s (%s)\n", home,
               stat(home, &st) == 0 ? (S_ISDIR(st.st_mode) ? "exists" : "not a directory") : "created on first use");
    }

    int kvm = h.kind == MOAT_HOST_KVM, pvm = h.kind == MOAT_HOST_PVM, any = kvm || pvm;
    const char *nokvm = "no usable KVM here";
    printf("\nwhat works here:\n");
    feature("small guests (static ELF kernels)", any, any ? NULL : nokvm);
    feature("Linux guests: run, exec, cp, sandboxes", kvm,
            pvm ? "PVM: ring-3 syscall is broken, so Linux never reaches /init's user space; "
                  "tests run these inside the nested VM (tests/nested)" : kvm ? NULL : nokvm);
    feature("Linux kernel boot and moat's virtio devices", any,
            pvm ? "up to /init, with the PVM workarounds" : kvm ? NULL : nokvm);
    feature("snapshots, restore, forks", any, any ? NULL : nokvm);
    feature("vhost-user devices (moat device blk|vsock)", 1,
            have_qemu ? "no KVM needed; QEMU found" : "no KVM needed");
    feature("copy-on-write disks (moat disk)", 1, "no KVM needed");
    feature("nested test suite (KVM under QEMU TCG)", have_qemu, have_qemu ? NULL : "needs qemu-system-x86_64");
    printf("\n%s\n", kvm ? "verdict: Linux guests run here (exit 0)" :
                     pvm ? "verdict: only small guests run here (exit 1)" :
                           "verdict: no guest runs here (exit 2)");
    return kind_status(h.kind);
}
