/* The egress policy as text (devices/net/net_policy_text.h). */
#include "devices/net/net_policy_text.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void np_text_free(struct np_text *t)
{
    free(t->buf);
    free(t->allow);
    free(t->deny);
    free(t->domain);
    memset(t, 0, sizeof(*t));
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = 0;
    return s;
}

int np_text_parse(const char *text, struct np_text *t, struct np_conf *c, char *why, size_t wlen)
{
    memset(t, 0, sizeof(*t));
    memset(c, 0, sizeof(*c));
    if (!text) {
        snprintf(why, wlen, "no policy");
        return -EINVAL;
    }
    size_t len = strlen(text);
    if (len > NPT_TEXT_MAX) {
        snprintf(why, wlen, "policy longer than %u bytes", NPT_TEXT_MAX);
        return -E2BIG;
    }
    t->buf = malloc(len + 1);
    t->allow = calloc(NPT_MAX_ITEMS, sizeof(char *));
    t->deny = calloc(NPT_MAX_ITEMS, sizeof(char *));
    t->domain = calloc(NPT_MAX_ITEMS, sizeof(char *));
    if (!t->buf || !t->allow || !t->deny || !t->domain) {
        np_text_free(t);
        snprintf(why, wlen, "out of memory");
        return -ENOMEM;
    }
    memcpy(t->buf, text, len + 1);
    size_t items = 0;
    char *save = NULL;
    for (char *it = strtok_r(t->buf, ";", &save); it; it = strtok_r(NULL, ";", &save)) {
        char *s = trim(it);
        if (!*s)
            continue;                           /* "a;;b", a trailing ';' */
        if (++items > NPT_MAX_ITEMS) {
            snprintf(why, wlen, "more than %u policy items", NPT_MAX_ITEMS);
            return -E2BIG;
        }
        char *sp = strpbrk(s, " \t");
        char *arg = sp ? trim(sp + 1) : NULL;
        if (sp)
            *sp = 0;
        struct np_rule_spec rs;
        char w[160] = "";
        if (!strcmp(s, "allow") || !strcmp(s, "deny") || !strcmp(s, "allow-domain")) {
            bool dom = s[5] == '-';
            int r = !arg || !*arg ? -EINVAL
                  : dom ? np_parse_domain(arg, &rs, w, sizeof(w)) : np_parse_rule(arg, &rs, w, sizeof(w));
            if (r < 0) {
                snprintf(why, wlen, "'%s %.60s': %s", s, arg ? arg : "", w[0] ? w : "a rule is required");
                return -EINVAL;
            }
            if (dom)
                t->domain[t->n_domain++] = arg;
            else if (s[0] == 'a')
                t->allow[t->n_allow++] = arg;
            else
                t->deny[t->n_deny++] = arg;
        } else if (!strcmp(s, "default")) {
            if (!arg || (strcmp(arg, "allow") && strcmp(arg, "deny"))) {
                snprintf(why, wlen, "'default %.20s': allow or deny", arg ? arg : "");
                return -EINVAL;
            }
            t->default_allow = arg[0] == 'a';
        } else if (!strcmp(s, "guest")) {
            uint8_t b[16];
            if (!arg || !*arg) {
                snprintf(why, wlen, "'guest': an address is required");
                return -EINVAL;
            }
            if (t->n_guest == NP_GUEST_ADDRS_MAX) {
                snprintf(why, wlen, "more than %u guest addresses", NP_GUEST_ADDRS_MAX);
                return -E2BIG;
            }
            if (inet_pton(AF_INET, arg, b) == 1)
                nf_addr_v4(&t->guest[t->n_guest++], b);
            else if (inet_pton(AF_INET6, arg, b) == 1)
                nf_addr_v6(&t->guest[t->n_guest++], b);
            else {
                snprintf(why, wlen, "'guest %.60s': not an IPv4 or IPv6 address", arg);
                return -EINVAL;
            }
        } else if (!strcmp(s, "no-preset")) {
            if (arg && *arg) {
                snprintf(why, wlen, "no-preset takes nothing");
                return -EINVAL;
            }
            t->no_preset = 1;
        } else {
            snprintf(why, wlen, "unknown policy item '%.40s' (allow, deny, allow-domain, default, no-preset, guest)", s);
            return -EINVAL;
        }
    }
    c->default_allow = t->default_allow;
    c->no_preset = t->no_preset;
    c->allow = t->allow;
    c->n_allow = t->n_allow;
    c->deny = t->deny;
    c->n_deny = t->n_deny;
    c->allow_domain = t->domain;
    c->n_allow_domain = t->n_domain;
    c->guest = t->guest;
    c->n_guest = t->n_guest;
    return 0;
}
