/* A live sandbox's devices through its control socket (see
 * vmm/sandbox/device.h): moat set, get and net as library calls. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/sandbox/device.h"

/* Send req (a set or get line) to the live sandbox name; the reply's text
 * (after "ok ", unescaped) into out (NULL: dropped). 0 or -errno with why. */
static int device_req(const char *name, const char *what, const char *req, char *out, size_t olen,
                      struct sbx_err *err)
{
    struct sbx s;
    int r = sandbox_open(&s, name, 0, err);
    if (r < 0)
        return r;
    pid_t pid;
    double up;
    size_t rlen = 2 * CTL_REPLY_MAX + 8;
    char *reply = malloc(rlen);
    r = reply ? sandbox_need_live(&s, sandbox_state(&s, &pid, &up), what, err) : -ENOMEM;
    if (r == 0)
        r = sandbox_ctl(&s, req, reply, rlen, 10, err);
    if (r == 0 && out && olen) {
        char *nl = strchr(reply, '\n');
        if (nl)
            *nl = 0;
        ctl_unescape(reply);
        snprintf(out, olen, "%s", reply[2] == ' ' ? reply + 3 : "");
    }
    free(reply);
    sandbox_close(&s);
    return r;
}

int sandbox_device_set(const char *name, const char *dev, const char *key, const char *value,
                       struct sbx_err *err)
{
    char req[CTL_LINE_MAX + 64];
    if (strchr(value, '\n') || (size_t)snprintf(req, sizeof req, "set %s %s %s", dev, key, value) >= CTL_LINE_MAX)
        return sandbox_err(err, -E2BIG, "set: the value must be one line of at most %d bytes", SBX_DEV_VALUE_MAX);
    return device_req(name, "change a device of", req, NULL, 0, err);
}

int sandbox_device_get(const char *name, const char *dev, const char *key, char *out, size_t olen,
                       struct sbx_err *err)
{
    char req[256];
    if ((size_t)snprintf(req, sizeof req, "get %s %s", dev, key) >= sizeof req)
        return sandbox_err(err, -E2BIG, "get: too long");
    return device_req(name, "read a device of", req, out, olen, err);
}

int sandbox_net_policy_add(const char *name, const char *item, const char *spec, struct sbx_err *err)
{
    if (strcmp(item, "allow") && strcmp(item, "deny") && strcmp(item, "allow-domain") && strcmp(item, "default"))
        return sandbox_err(err, -EINVAL, "net: %s: not a policy item (allow, deny, allow-domain, default)", item);
    char *cur = malloc(SBX_DEV_TEXT_MAX);
    if (!cur)
        return sandbox_err(err, -ENOMEM, "out of memory");
    int r = sandbox_device_get(name, "net", "policy", cur, SBX_DEV_TEXT_MAX, err);
    if (r == 0) {
        size_t n = strlen(cur) + strlen(item) + strlen(spec) + 8;
        char *np = malloc(n);
        if (!np) {
            r = sandbox_err(err, -ENOMEM, "out of memory");
        } else {
            snprintf(np, n, "%s%s%s %s", cur, cur[0] ? "; " : "", item, spec);
            r = sandbox_device_set(name, "net", "policy", np, err);
            free(np);
        }
    }
    free(cur);
    return r;
}

int sandbox_net_metadata(const char *name, const char *json, struct sbx_err *err)
{
    char *text = strdup(json);
    if (!text)
        return sandbox_err(err, -ENOMEM, "out of memory");
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i++)      /* JSON: a newline is whitespace */
        if (text[i] == '\n' || text[i] == '\r' || text[i] == '\t')
            text[i] = ' ';
    while (n && text[n - 1] == ' ')     /* the control line takes no trailing space */
        text[--n] = 0;
    int r = sandbox_device_set(name, "net", "metadata", text, err);
    free(text);
    return r;
}
