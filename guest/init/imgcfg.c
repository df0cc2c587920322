/* The image mode's config and user lookup (see imgcfg.h). Pure. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "imgcfg.h"

static int bad(char *why, size_t wlen, const char *msg, int line)
{
    if (why && wlen)
        snprintf(why, wlen, "image config, line %d: %s", line, msg);
    return -EINVAL;
}

/* Unescape S in place ("\\" and "\n"); -1 on any other backslash. */
static int unescape(char *s)
{
    char *o = s;
    for (; *s; s++) {
        if (*s != '\\') {
            *o++ = *s;
            continue;
        }
        if (s[1] == '\\')
            *o++ = '\\';
        else if (s[1] == 'n')
            *o++ = '\n';
        else
            return -1;
        s++;
    }
    *o = 0;
    return 0;
}

static int valid_env(const char *e)
{
    const char *eq = strchr(e, '=');
    return eq && eq != e;
}

/* One line KEY=VALUE (unescaped already) into c: NULL, or why not. */
static const char *one_line(struct imgcfg *c, char *l, int *seen)
{
    char *eq = strchr(l, '=');
    if (!eq)
        return "no '=' in the line";
    *eq = 0;
    char *v = eq + 1;
    if (unescape(v) < 0)
        return "a backslash escape other than \\\\ or \\n";
    if (!strcmp(l, "arg")) {
        if (c->argc >= IMGCFG_MAX_ARGS)
            return "too many arguments";
        c->argv[c->argc++] = v;
    } else if (!strcmp(l, "env")) {
        if (c->nenv >= IMGCFG_MAX_ENV)
            return "too many environment variables";
        if (!valid_env(v))
            return "an env= value that is not NAME=VALUE";
        c->env[c->nenv++] = v;
    } else if (!strcmp(l, "workdir")) {
        if (*seen & 1)
            return "workdir= given twice";
        if (v[0] != '/')
            return "workdir= is not an absolute path";
        *seen |= 1;
        c->workdir = v;
    } else if (!strcmp(l, "user")) {
        if (*seen & 2)
            return "user= given twice";
        *seen |= 2;
        c->user = v;
    } else if (!strcmp(l, "explicit")) {
        if ((*seen & 4) || (strcmp(v, "0") && strcmp(v, "1")))
            return "explicit= given twice or not 0 or 1";
        *seen |= 4;
        c->explicit_cmd = v[0] == '1';
    } else {
        return "unknown key";
    }
    return NULL;
}

int imgcfg_parse(char *buf, size_t len, struct imgcfg *c, char *why, size_t wlen)
{
    memset(c, 0, sizeof *c);
    if (len > IMGCFG_MAX_BYTES)
        return bad(why, wlen, "larger than 1 MiB", 0);
    buf[len] = 0;
    if (memchr(buf, 0, len))
        return bad(why, wlen, "a NUL byte", 0);
    size_t ml = strlen(IMGCFG_MAGIC);
    if (len < ml + 1 || memcmp(buf, IMGCFG_MAGIC "\n", ml + 1))
        return bad(why, wlen, "not a moat image config (want \"" IMGCFG_MAGIC "\" first)", 1);
    if (buf[len - 1] != '\n')
        return bad(why, wlen, "the last line has no newline", 0);
    int seen = 0, line = 1;
    for (char *l = buf + ml + 1; *l;) {
        char *nl = strchr(l, '\n');
        *nl = 0;
        line++;
        const char *e = one_line(c, l, &seen);
        if (e)
            return bad(why, wlen, e, line);
        l = nl + 1;
    }
    c->argv[c->argc] = NULL;
    c->env[c->nenv] = NULL;
    return 0;
}

/* ---- /etc/passwd, /etc/group ---- */

/* A decimal id 0..4294967294 exactly S[0..N): 0, or -1. */
static int parse_id(const char *s, size_t n, unsigned *out)
{
    unsigned long long v = 0;
    if (n == 0 || n > 10)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    if (v >= 0xffffffffULL)
        return -1;
    *out = (unsigned)v;
    return 0;
}

/* Split one line of a colon file (at most NF fields) into F[]/FL[]:
 * the count of fields. */
static int fields(const char *l, size_t len, const char **f, size_t *fl, int nf)
{
    int n = 0;
    const char *p = l, *end = l + len;
    while (n < nf) {
        const char *c = memchr(p, ':', (size_t)(end - p));
        f[n] = p;
        fl[n] = (size_t)((c ? c : end) - p);
        n++;
        if (!c)
            break;
        p = c + 1;
    }
    return n;
}

/* The next line of TEXT from *P (advanced): its length, -1 at the end. */
static long next_line(const char **p, const char **line)
{
    if (!*p || !**p)
        return -1;
    const char *nl = strchr(*p, '\n');
    size_t n = nl ? (size_t)(nl - *p) : strlen(*p);
    *line = *p;
    *p = nl ? nl + 1 : *p + n;
    return (long)n;
}

static int eq(const char *f, size_t fl, const char *s, size_t sl)
{
    return fl == sl && !memcmp(f, s, sl);
}

/* In PASSWD, the entry of name N (NL bytes) or, BYID, of uid ID: 0 with
 * uid, gid, home and its name (into NAME), or -1. */
static int pw_find(const char *passwd, const char *n, size_t nl, int byid, unsigned id,
                   struct imguser *u, char *name, size_t namelen)
{
    const char *p = passwd, *l;
    long ll;
    while ((ll = next_line(&p, &l)) >= 0) {
        const char *f[7];
        size_t fl[7];
        unsigned uid, gid;
        if (fields(l, (size_t)ll, f, fl, 7) != 7 || parse_id(f[2], fl[2], &uid) < 0 ||
            parse_id(f[3], fl[3], &gid) < 0)
            continue;
        if (byid ? uid != id : !eq(f[0], fl[0], n, nl))
            continue;
        u->uid = uid;
        u->gid = gid;
        snprintf(u->home, sizeof u->home, "%.*s", (int)fl[5], f[5]);
        if (!u->home[0] || fl[5] >= sizeof u->home)
            snprintf(u->home, sizeof u->home, "/");
        snprintf(name, namelen, "%.*s", (int)(fl[0] < namelen ? fl[0] : 0), f[0]);
        return 0;
    }
    return -1;
}

/* In GROUP, the gid of group name N (NL bytes): 0, or -1. */
static int gr_find(const char *group, const char *n, size_t nl, unsigned *gid)
{
    const char *p = group, *l;
    long ll;
    while ((ll = next_line(&p, &l)) >= 0) {
        const char *f[4];
        size_t fl[4];
        if (fields(l, (size_t)ll, f, fl, 4) == 4 && eq(f[0], fl[0], n, nl) && parse_id(f[2], fl[2], gid) == 0)
            return 0;
    }
    return -1;
}

static void add_group(struct imguser *u, unsigned gid)
{
    for (int i = 0; i < u->ngroups; i++)
        if (u->groups[i] == gid)
            return;
    if (u->ngroups < IMGCFG_MAX_GROUPS)
        u->groups[u->ngroups++] = gid;
}

/* Every group of GROUP whose member list has NAME, into u->groups. */
static void member_groups(const char *group, const char *name, struct imguser *u)
{
    const char *p = group, *l;
    long ll;
    size_t nl = strlen(name);
    while (nl && (ll = next_line(&p, &l)) >= 0) {
        const char *f[4];
        size_t fl[4];
        unsigned gid;
        if (fields(l, (size_t)ll, f, fl, 4) != 4 || parse_id(f[2], fl[2], &gid) < 0)
            continue;
        const char *m = f[3], *end = f[3] + fl[3];
        while (m < end) {
            const char *c = memchr(m, ',', (size_t)(end - m));
            size_t ml = (size_t)((c ? c : end) - m);
            if (eq(m, ml, name, nl))
                add_group(u, gid);
            m = c ? c + 1 : end;
        }
    }
}

/* "WHAT S[0..N): no such WHAT in the image's FILE" into why: -ENOENT. */
static int user_err(char *why, size_t wlen, const char *what, const char *s, size_t n, const char *file)
{
    if (why && wlen)
        snprintf(why, wlen, "%s %.*s: no such %s in the image's %s", what, (int)n, s, what, file);
    return -ENOENT;
}

int imgcfg_user(const char *spec, const char *passwd, const char *group, struct imguser *u,
                char *why, size_t wlen)
{
    memset(u, 0, sizeof *u);
    snprintf(u->home, sizeof u->home, "/");
    spec = spec ? spec : "";
    const char *colon = strchr(spec, ':');
    size_t ul = colon ? (size_t)(colon - spec) : strlen(spec);
    const char *g = colon ? colon + 1 : NULL;
    char name[256] = "";
    unsigned id = 0;
    int numeric = parse_id(spec, ul, &id) == 0, found;
    if (ul == 0 && (colon || !*spec))
        numeric = 1, id = 0;    /* "" or ":group": root */
    found = pw_find(passwd ? passwd : "", spec, ul, numeric, id, u, name, sizeof name) == 0;
    if (!found && !numeric)
        return user_err(why, wlen, "user", spec, ul, "/etc/passwd");
    if (!found)
        u->uid = id, u->gid = 0;
    if (g) {
        unsigned gid;
        if (parse_id(g, strlen(g), &gid) < 0 && gr_find(group ? group : "", g, strlen(g), &gid) < 0)
            return user_err(why, wlen, "group", g, strlen(g), "/etc/group");
        u->gid = gid;
        u->groups[u->ngroups++] = gid;
        return 0;
    }
    u->groups[u->ngroups++] = u->gid;
    if (found && group)
        member_groups(group, name, u);
    return 0;
}

void imgcfg_env_finish(struct imgcfg *c, const char *hostname, const char *home, char *space, size_t slen)
{
    int path = 0, hn = 0, hm = 0;
    for (int i = 0; i < c->nenv; i++) {
        path |= !strncmp(c->env[i], "PATH=", 5);
        hn |= !strncmp(c->env[i], "HOSTNAME=", 9);
        hm |= !strncmp(c->env[i], "HOME=", 5);
    }
    if (!path)
        c->env[c->nenv++] = "PATH=" IMGCFG_DEFAULT_PATH;
    int k = hn ? 0 : snprintf(space, slen, "HOSTNAME=%s", hostname);
    if (!hn && k > 0 && (size_t)k < slen) {
        c->env[c->nenv++] = space;
        space += k + 1;
        slen -= (size_t)k + 1;
    }
    k = hm ? 0 : snprintf(space, slen, "HOME=%s", home);
    if (!hm && k > 0 && (size_t)k < slen)
        c->env[c->nenv++] = space;
    c->env[c->nenv] = NULL;
}
