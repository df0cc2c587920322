/* Fuzz the default guest's moat.net= parser (guest/init/netcfg.h,
 * compiled in here: guest code, not part of libmoat). The kernel command
 * line comes from the VMM, not the guest, but /init must not misbehave on
 * any of it: a fixed-size word buffer, quotes, "--".
 *
 * Input: a kernel command line (up to the first NUL). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "guest/init/netcfg.c"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    struct netcfg c, d;
    char ip[16], v[80];

    memcpy(s, data, size);
    s[size] = 0;
    int r = netcfg_from_cmdline(s, &c);
    FUZZ_ASSERT(r == 0 || r == -EINVAL);
    if (r < 0)
        FUZZ_ASSERT(c.mode == NETCFG_DEFAULT);
    if (r == 0 && c.mode == NETCFG_STATIC) {
        FUZZ_ASSERT(c.prefix >= 1 && c.prefix <= 32 && c.addr != 0);
        /* Printed back, it parses to the same configuration. */
        char a[16], g[16], n[16];
        netcfg_fmt_ipv4(c.addr, a);
        netcfg_fmt_ipv4(c.gw, g);
        netcfg_fmt_ipv4(c.dns, n);
        snprintf(v, sizeof(v), "static:%s/%u,%s,%s", a, c.prefix, c.gw ? g : "", c.dns ? n : "");
        size_t len = strlen(v) - (c.dns ? 0 : 1);
        if (!c.dns && !c.gw)
            len--;
        FUZZ_ASSERT(netcfg_parse(v, len, &d) == 0);
        FUZZ_ASSERT(d.addr == c.addr && d.prefix == c.prefix && d.gw == c.gw && d.dns == c.dns);
    }
    /* The raw bytes as a value and as an address. */
    uint32_t a;
    if (netcfg_parse((const char *)data, size, &d) == 0)
        FUZZ_ASSERT(d.mode != NETCFG_DEFAULT);
    if (netcfg_ipv4((const char *)data, size, &a) == 0) {
        netcfg_fmt_ipv4(a, ip);
        FUZZ_ASSERT(strlen(ip) == size && memcmp(ip, data, size) == 0);
    }
    free(s);
    return 0;
}
