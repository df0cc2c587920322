/* Control-socket request parser (see vmm/sandbox/ctl_proto.h). */
#include <errno.h>
#include <string.h>

#include "vmm/sandbox/ctl_proto.h"

static const struct {
    char name[16];
    enum ctl_op op;
    int has_arg;
} verbs[] = {
    { "pause", CTL_PAUSE, 0 },
    { "resume", CTL_RESUME, 0 },
    { "status", CTL_STATUS, 0 },
    { "snapshot", CTL_SNAPSHOT, 1 },
    { "stop-snapshot", CTL_STOP_SNAPSHOT, 1 },
    { "stop", CTL_STOP, 0 },
    { "snapshot-disks", CTL_SNAPSHOT_DISKS, 1 },
    { "clone-disks", CTL_CLONE_DISKS, 1 },
    { "set", CTL_SET, 1 },
    { "get", CTL_GET, 1 },
};

static int word_ok(const char *w, const char *extra)
{
    if (!*w)
        return 0;
    for (; *w; w++)
        if (!((*w >= 'a' && *w <= 'z') || (*w >= '0' && *w <= '9') || *w == '_' || *w == '-' || strchr(extra, *w)))
            return 0;
    return 1;
}


/* "TYPE[:ID] KEY" at the start of arg, split in place; *rest the bytes
 * after KEY's space (NULL: KEY ends the argument). 0 or -EINVAL. */
static int split_dev_key(char *arg, char **type, char **id, char **key, char **rest)
{
    char *sp = strchr(arg, ' ');
    if (!sp)
        return -EINVAL;
    *sp = 0;
    char *k = sp + 1, *sp2 = strchr(k, ' ');
    *rest = NULL;
    if (sp2) {
        *sp2 = 0;
        *rest = sp2 + 1;
    }
    char *colon = strchr(arg, ':');
    if (colon)
        *colon = 0;
    if (!word_ok(arg, "") || (colon && !word_ok(colon + 1, ".")) || !word_ok(k, ""))
        return -EINVAL;
    *type = arg;
    *id = colon ? colon + 1 : NULL;
    *key = k;
    return 0;
}

int ctl_set_split(char *arg, char **type, char **id, char **key, char **value)
{
    if (split_dev_key(arg, type, id, key, value) < 0 || !*value || !**value)
        return -EINVAL;
    return 0;
}

int ctl_get_split(char *arg, char **type, char **id, char **key)
{
    char *rest;
    return split_dev_key(arg, type, id, key, &rest) < 0 || rest ? -EINVAL : 0;
}


void ctl_escape(const char *in, char *out, size_t cap)
{
    size_t n = 0;
    if (!cap)
        return;
    for (; *in; in++) {
        const char *e = *in == '\\' ? "\\\\" : *in == '\n' ? "\\n" : NULL;
        size_t k = e ? 2 : 1;
        if (n + k + 1 > cap)
            break;
        if (e)
            memcpy(out + n, e, 2);
        else
            out[n] = (unsigned char)*in < 0x20 ? ' ' : *in;
        n += k;
    }
    out[n] = 0;
}

void ctl_unescape(char *s)
{
    char *w = s;
    for (; *s; s++) {
        if (*s == '\\' && (s[1] == 'n' || s[1] == '\\')) {
            *w++ = s[1] == 'n' ? '\n' : '\\';
            s++;
        } else {
            *w++ = *s;
        }
    }
    *w = 0;
}

const char *ctl_op_name(enum ctl_op op)
{
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        if (verbs[i].op == op)
            return verbs[i].name;
    return NULL;
}

int ctl_parse(const char *buf, size_t len, struct ctl_req *req)
{
    if (!buf || !req)
        return -EINVAL;
    if (len > CTL_LINE_MAX)
        return -E2BIG;
    /* Strip one terminator: "\n" or "\r\n"; nothing may follow it. */
    const char *nl = memchr(buf, '\n', len);
    if (nl) {
        if ((size_t)(nl - buf) != len - 1)
            return -EBADMSG;
        len--;
        if (len && buf[len - 1] == '\r')
            len--;
    }
    if (len == 0)
        return -ENODATA;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c < 0x20 || c == 0x7f)     /* bytes >= 0x80 pass: UTF-8 paths */
            return -EBADMSG;
    }
    const char *sp = memchr(buf, ' ', len);
    size_t vlen = sp ? (size_t)(sp - buf) : len;
    if (vlen == 0)
        return -EINVAL;     /* leading space */
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++) {
        if (strlen(verbs[i].name) != vlen || memcmp(verbs[i].name, buf, vlen) != 0)
            continue;
        if (!verbs[i].has_arg) {
            if (sp)
                return -EINVAL;     /* no argument allowed */
            req->op = verbs[i].op;
            req->arg[0] = 0;
            return 0;
        }
        if (!sp)
            return -EINVAL;
        const char *a = sp + 1;
        size_t alen = len - vlen - 1;
        if (alen == 0 || a[0] == ' ' || a[alen - 1] == ' ')
            return -EINVAL;
        if (alen > CTL_ARG_MAX)
            return -E2BIG;
        req->op = verbs[i].op;
        memcpy(req->arg, a, alen);
        req->arg[alen] = 0;
        return 0;
    }
    return -ENOENT;
}
