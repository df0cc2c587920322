/* Kernel command line assembly (contract in boot/boot.h). */
#include "boot/boot.h"

#include <errno.h>
#include <string.h>

struct sb {
    char *buf;
    size_t size, len;
    bool over;
};

static void sb_put(struct sb *b, const char *s, size_t n)
{
    if (b->over || n >= b->size - b->len) { /* keep room for the NUL */
        b->over = true;
        return;
    }
    memcpy(b->buf + b->len, s, n);
    b->len += n;
}

static void sb_sep(struct sb *b)
{
    if (b->len > 0)
        sb_put(b, " ", 1);
}

/* 1: needs quotes, 0: as is, -EINVAL: not representable. */
static int arg_class(const char *a)
{
    if (!*a)
        return -EINVAL;
    bool space = false;
    for (const unsigned char *c = (const unsigned char *)a; *c; c++) {
        if (*c == '"' || *c < 0x20 || *c == 0x7f)
            return -EINVAL;
        if (*c == ' ')
            space = true;
    }
    return space;
}

/* The kernel's idea of white space on its command line (lib/ctype.c:
 * the C locale's six, and Latin-1's no-break space). */
static bool k_space(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || c == 0xa0;
}

bool boot_cmdline_split(const char *s, size_t *kend, size_t *istart)
{
    size_t len = strlen(s), i = 0;
    while (i < len) {
        while (i < len && k_space((unsigned char)s[i]))
            i++;
        if (i == len)
            break;
        /* One word as Linux's next_arg cuts it: a double quote toggles
         * quoting, white space outside quotes ends the word. */
        size_t w = i;
        bool q = false, eq = false;
        for (; i < len && (q || !k_space((unsigned char)s[i])); i++) {
            if (s[i] == '=')
                eq = true;
            if (s[i] == '"')
                q = !q;
        }
        /* The word is "--" (or "\"--\"", whose quotes next_arg strips)
         * with no value: the kernel's parameters end there. */
        size_t wl = i - w;
        if (!eq && ((wl == 2 && !memcmp(s + w, "--", 2)) || (wl == 4 && !memcmp(s + w, "\"--\"", 4)))) {
            size_t e = w;
            while (e > 0 && k_space((unsigned char)s[e - 1]))
                e--;
            while (i < len && k_space((unsigned char)s[i]))
                i++;
            *kend = e;
            *istart = i;
            return true;
        }
    }
    *kend = len;
    *istart = len;
    return false;
}

int boot_cmdline_build(char *buf, size_t size, const char *base,
                       const char *const *extras, size_t nextras,
                       const char *const *argv, size_t argc)
{
    if (!buf || (nextras && !extras) || (argc && !argv))
        return -EINVAL;
    if (size == 0)
        return -E2BIG;
    buf[0] = '\0';
    for (size_t i = 0; i < argc; i++)
        if (!argv[i] || arg_class(argv[i]) < 0)
            return -EINVAL;
    for (size_t i = 0; i < nextras; i++)
        if (!extras[i])
            return -EINVAL;

    struct sb b = { buf, size, 0, false };
    if (!base)
        base = "";
    /* The extras are kernel parameters: they go before a " -- " in base,
     * which starts init's arguments (argv then follows those). */
    size_t kend, istart;
    bool dashes = boot_cmdline_split(base, &kend, &istart);
    sb_put(&b, base, kend);
    for (size_t i = 0; i < nextras; i++) {
        if (!*extras[i])
            continue;
        sb_sep(&b);
        sb_put(&b, extras[i], strlen(extras[i]));
    }
    if (dashes || argc > 0) {
        sb_sep(&b);
        sb_put(&b, "--", 2);
        if (base[istart]) {
            sb_put(&b, " ", 1);
            sb_put(&b, base + istart, strlen(base + istart));
        }
        for (size_t i = 0; i < argc; i++) {
            sb_put(&b, " ", 1);
            bool quote = arg_class(argv[i]) == 1;
            if (quote)
                sb_put(&b, "\"", 1);
            sb_put(&b, argv[i], strlen(argv[i]));
            if (quote)
                sb_put(&b, "\"", 1);
        }
    }
    if (b.over) {
        buf[0] = '\0';
        return -E2BIG;
    }
    buf[b.len] = '\0';
    return 0;
}
