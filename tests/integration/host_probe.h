/* The host kind for the integration suites, from the moat binary under test
 * (`moat host --kind`, docs/host.md): the same probe as the scripts and the
 * Makefile use, so every layer agrees on what this host can run. */
#ifndef MOAT_TEST_HOST_PROBE_H
#define MOAT_TEST_HOST_PROBE_H

#include <stdio.h>
#include <string.h>

#include <stdbool.h>
#include <stdlib.h>

enum test_host_kind { TEST_HOST_NONE, TEST_HOST_PVM, TEST_HOST_KVM };

/* MOAT_REQUIRE_KVM set (to anything but "" or "0"): a host without the KVM
 * a test needs is a failure, not a skip (the nested suite sets it). */
static inline bool require_kvm(void)
{
    const char *v = getenv("MOAT_REQUIRE_KVM");
    return v && *v && strcmp(v, "0") != 0;
}

/* Runs `moat host --kind` and `--reason`; why gets the reason (or what went
 * wrong running moat). A moat that cannot be run counts as "none". */
static inline enum test_host_kind probe_host_kind(const char *moat, char *why, size_t len)
{
    char cmd[1200], kind[32] = "";
    if (len)
        why[0] = 0;
    if (strchr(moat, '\'')) {
        snprintf(why, len, "moat path has a quote: %s", moat);
        return TEST_HOST_NONE;
    }
    snprintf(cmd, sizeof cmd, "'%s' host --kind 2>/dev/null", moat);
    FILE *p = popen(cmd, "r");
    if (p) {
        if (!fgets(kind, sizeof kind, p))
            kind[0] = 0;
        pclose(p);
    }
    kind[strcspn(kind, "\n")] = 0;
    snprintf(cmd, sizeof cmd, "'%s' host --reason 2>/dev/null", moat);
    p = popen(cmd, "r");
    if (p && len) {
        if (!fgets(why, (int)len, p))
            why[0] = 0;
        why[strcspn(why, "\n")] = 0;
    }
    if (p)
        pclose(p);
    if (!strcmp(kind, "kvm"))
        return TEST_HOST_KVM;
    if (!strcmp(kind, "pvm"))
        return TEST_HOST_PVM;
    if (strcmp(kind, "none") && len)
        snprintf(why, len, "'%s host --kind' gave no kind (is moat built?)", moat);
    return TEST_HOST_NONE;
}

#endif
