/* The host probe's pure part (vmm/core/host.c): from what was found to a kind
 * and its one-line reason. Unit-tested (tests/unit/test_host.c). */
#ifndef MOAT_HOST_H
#define MOAT_HOST_H

#include <stddef.h>

struct host_facts {
    int open_rc;            /* kvm_host_open: 0 or -errno */
    const char *open_why;   /* its reason when open_rc < 0 */
    int pvm;                /* kvm_host_detect_pvm_why's answer */
    const char *pvm_why;    /* and its reason */
    const char *module;     /* vendor module in /sys/module, or "" */
};

/* enum moat_host_kind; why gets the reason (always NUL-terminated). */
int host_classify(const struct host_facts *f, char *why, size_t len);

#endif
