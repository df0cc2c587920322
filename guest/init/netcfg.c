/* moat.net= parsing for the default guest's /init (guest/init/netcfg.h). */
#include "netcfg.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int netcfg_ipv4(const char *s, size_t len, uint32_t *out)
{
    uint32_t a = 0;
    size_t i = 0;

    for (int part = 0; part < 4; part++) {
        unsigned v = 0;
        size_t start = i;

        if (part > 0) {
            if (i >= len || s[i] != '.')
                return -EINVAL;
            start = ++i;
        }
        while (i < len && s[i] >= '0' && s[i] <= '9' && i - start < 3)
            v = v * 10 + (unsigned)(s[i++] - '0');
        if (i == start || v > 255 || (s[start] == '0' && i - start > 1))
            return -EINVAL;
        a = a << 8 | v;
    }
    if (i != len)
        return -EINVAL;
    *out = a;
    return 0;
}

static uint32_t prefix_mask(unsigned prefix)
{
    return prefix == 0 ? 0 : 0xffffffffu << (32 - prefix);
}

/* "ADDR/PREFIX[,GW[,DNS]]" */
static int parse_static(const char *v, size_t len, struct netcfg *cfg)
{
    const char *end = v + len, *slash, *c1, *c2 = NULL;
    size_t plen;
    unsigned prefix = 0;
    uint32_t mask;

    slash = memchr(v, '/', len);
    if (!slash)
        return -EINVAL;
    if (netcfg_ipv4(v, (size_t)(slash - v), &cfg->addr) < 0)
        return -EINVAL;
    c1 = memchr(slash, ',', (size_t)(end - slash));
    if (c1)
        c2 = memchr(c1 + 1, ',', (size_t)(end - c1 - 1));
    plen = (size_t)((c1 ? c1 : end) - slash - 1);
    if (plen < 1 || plen > 2 || (slash[1] == '0' && plen > 1))
        return -EINVAL;
    for (size_t i = 1; i <= plen; i++) {
        if (slash[i] < '0' || slash[i] > '9')
            return -EINVAL;
        prefix = prefix * 10 + (unsigned)(slash[i] - '0');
    }
    if (prefix < 1 || prefix > 32)
        return -EINVAL;
    cfg->prefix = prefix;
    mask = prefix_mask(prefix);
    if (cfg->addr == 0 || cfg->addr == 0xffffffffu)
        return -EINVAL;
    if (prefix < 31 && ((cfg->addr & ~mask) == 0 || (cfg->addr & ~mask) == ~mask))
        return -EINVAL;
    cfg->gw = 0;
    cfg->dns = 0;
    if (c1) {
        const char *gend = c2 ? c2 : end;

        if (gend > c1 + 1) {
            if (netcfg_ipv4(c1 + 1, (size_t)(gend - c1 - 1), &cfg->gw) < 0)
                return -EINVAL;
            if (cfg->gw == cfg->addr || (cfg->gw & mask) != (cfg->addr & mask))
                return -EINVAL;
        } else if (!c2) {
            return -EINVAL;         /* "A/P," */
        }
    }
    if (c2) {
        if (netcfg_ipv4(c2 + 1, (size_t)(end - c2 - 1), &cfg->dns) < 0 || cfg->dns == 0)
            return -EINVAL;
    }
    return 0;
}

int netcfg_parse(const char *v, size_t len, struct netcfg *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    if (len == 4 && memcmp(v, "dhcp", 4) == 0) {
        cfg->mode = NETCFG_DHCP;
        return 0;
    }
    if (len == 3 && memcmp(v, "off", 3) == 0) {
        cfg->mode = NETCFG_OFF;
        return 0;
    }
    if (len > 7 && memcmp(v, "static:", 7) == 0) {
        cfg->mode = NETCFG_STATIC;
        return parse_static(v + 7, len - 7, cfg);
    }
    return -EINVAL;
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n';
}

int netcfg_from_cmdline(const char *cmdline, struct netcfg *cfg)
{
    static const char key[] = "moat.net=";
    const size_t klen = sizeof(key) - 1;
    char word[256];
    const char *p = cmdline;
    int r = 0;

    memset(cfg, 0, sizeof(*cfg));
    while (*p) {
        size_t n = 0, full = 0;     /* bytes kept, bytes in the word */
        int quoted = 0;

        while (is_space(*p))
            p++;
        if (!*p)
            break;
        /* One word, quotes dropped; only its first sizeof(word) bytes are
         * kept. A valid value is at most 57 bytes, so a word cut short
         * cannot parse: it stays malformed. */
        for (; *p && (quoted || !is_space(*p)); p++) {
            if (*p == '"') {
                quoted = !quoted;
                continue;
            }
            if (n < sizeof(word))
                word[n++] = *p;
            full++;
        }
        if (full == 2 && word[0] == '-' && word[1] == '-')
            break;
        if (full >= klen && memcmp(word, key, klen) == 0) {
            struct netcfg c;

            r = netcfg_parse(word + klen, n - klen, &c);
            *cfg = r == 0 ? c : (struct netcfg){ 0 };
        }
    }
    return r;
}

void netcfg_fmt_ipv4(uint32_t a, char *buf)
{
    snprintf(buf, 16, "%u.%u.%u.%u", a >> 24, (a >> 16) & 255, (a >> 8) & 255, a & 255);
}
