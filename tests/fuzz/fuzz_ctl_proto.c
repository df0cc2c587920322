/* Fuzz the control-socket request parser (vmm/sandbox/ctl_proto.c): any bytes give
 * 0 or one of the documented errors; on success the op is a known verb
 * whose name starts the input, the argument is NUL-terminated printable
 * ASCII within CTL_ARG_MAX, and re-parsing "verb[ arg]" gives the same. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "vmm/sandbox/ctl_proto.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct ctl_req r, r2;
    static char line[CTL_LINE_MAX + 8];
    int rc = ctl_parse((const char *)data, size, &r);
    if (rc < 0) {
        FUZZ_ASSERT(rc == -ENODATA || rc == -E2BIG || rc == -EBADMSG || rc == -ENOENT ||
                    rc == -EINVAL);
        return 0;
    }
    FUZZ_ASSERT(rc == 0);
    const char *name = ctl_op_name(r.op);
    FUZZ_ASSERT(name);
    FUZZ_ASSERT(size >= strlen(name) && memcmp(data, name, strlen(name)) == 0);
    size_t alen = strnlen(r.arg, sizeof r.arg);
    FUZZ_ASSERT(alen <= CTL_ARG_MAX);
    for (size_t i = 0; i < alen; i++)
        FUZZ_ASSERT((unsigned char)r.arg[i] >= 0x20 && (unsigned char)r.arg[i] != 0x7f);
    int n = snprintf(line, sizeof line, alen ? "%s %s\n" : "%s%s\n", name, r.arg);
    FUZZ_ASSERT(n > 0 && (size_t)n < sizeof line);
    FUZZ_ASSERT(ctl_parse(line, (size_t)n, &r2) == 0);
    FUZZ_ASSERT(r2.op == r.op && strcmp(r2.arg, r.arg) == 0);
    return 0;
}
