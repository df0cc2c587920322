/* Templates (see template.h): create (a new sandbox stopped, or a stopped
 * fork of one), list, remove. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vmm/sandbox/fork.h"
#include "vmm/sandbox/template.h"

int sandbox_template_name(const char *name, char *tname, size_t len, struct sbx_err *err)
{
    if (strlen(name) > SBX_TEMPLATE_NAME_MAX || !sandbox_valid_name(name))
        return sandbox_err(err, -EINVAL, "template name '%s': 1-%d of A-Z a-z 0-9 - _ ., starting with a "
                           "letter or digit", name, SBX_TEMPLATE_NAME_MAX);
    snprintf(tname, len, SBX_TEMPLATE_PREFIX "%s", name);
    return 0;
}

/* The lines of from (a whole struct sbx_err) added to err. */
static void err_add(struct sbx_err *err, const struct sbx_err *from)
{
    if (from->msg[0])
        sandbox_err(err, from->code, "%s", from->msg);
    else if (err && !err->code)
        err->code = from->code;
}

/* tname forked from o->from, stopped: the child's start messages, then the
 * fork's. */
static int template_fork(const char *tname, const struct sbx_template_opts *o, struct sbx_err *err)
{
    struct sbx_fork_opts fo = { .child = tname, .count = 1, .stopped = true };
    struct sbx_fork_child *kid = calloc(1, sizeof *kid);
    struct sbx_err *fe = calloc(1, sizeof *fe);
    int r = !kid || !fe ? sandbox_err(err, -ENOMEM, "out of memory") : sandbox_fork(o->from, &fo, kid, fe);
    if (kid && fe) {
        err_add(err, &kid->err);
        err_add(err, fe);
    }
    free(kid);
    free(fe);
    return r;
}

/* tname (made) stopped; removed again when it cannot be. */
static int template_stop(const char *tname, struct sbx_err *err)
{
    struct sbx *s = malloc(sizeof *s);
    int r = s ? sandbox_open(s, tname, 1, err) : sandbox_err(err, -ENOMEM, "out of memory");
    if (r == 0) {
        enum sbx_state was = SBX_DEAD;
        r = sandbox_stop_locked(s, NULL, NULL, &was, err);
        if (r == 0 && was == SBX_STOPPED)
            sandbox_err(err, 0, "sandbox %s is already stopped", tname);
        sandbox_close(s);
    }
    free(s);
    if (r < 0)
        sandbox_remove(tname, 1, err);
    return r;
}

/* tname created (o->create; NULL: it exists) and stopped. */
static int template_base(const char *tname, const struct sbx_template_opts *o, struct sbx_template_res *res,
                         struct sbx_err *err)
{
    struct sbx_create_res cr = { 0 };
    int r = o->create ? sandbox_create(tname, o->create, &cr, err) : 0;
    res->usage = r < 0 && cr.usage;
    if (r < 0)
        return r;
    res->made = true;
    res->made_msg = err ? strlen(err->msg) : 0;
    r = template_stop(tname, err);
    if (cr.pid > 0)
        waitpid(cr.pid, NULL, WNOHANG);     /* gone: reaped */
    return r;
}

int sandbox_template_create(const char *name, const struct sbx_template_opts *o, struct sbx_template_res *res,
                            struct sbx_err *err)
{
    *res = (struct sbx_template_res){ 0 };
    char tname[SBX_NAME_MAX + 1];
    int r = sandbox_template_name(name, tname, sizeof tname, err);
    if (r < 0) {
        res->usage = true;
        return r;
    }
    if (o->from) {
        r = template_fork(tname, o, err);
        res->made = r == 0;
        res->made_msg = err ? strlen(err->msg) : 0;
    } else {
        r = template_base(tname, o, res, err);
    }
    if (r < 0)
        return r;
    struct sbx *t = malloc(sizeof *t);     /* ~17 KiB: not on a server thread's stack */
    char p[PATH_MAX], text[600];
    snprintf(text, sizeof text, "agent=%d\nfrom=%s\n", o->agent, o->from ? o->from : "");
    r = !t ? -ENOMEM : sandbox_paths(t, tname, NULL);
    if (r == 0)
        r = sandbox_write_file(sandbox_path(t, "template", p, sizeof p), text);
    free(t);
    return r < 0 ? sandbox_err(err, r, "cannot write the template marker of %s", tname) : 0;
}

/* The marker of sandbox tname into elem (a struct sbx_template_info): 0,
 * or -1 when it has none. */
static int template_marker(const char *tname, void *elem)
{
    struct sbx *s = malloc(sizeof *s);     /* ~17 KiB: not on a server thread's stack */
    char p[PATH_MAX], buf[512] = "";
    int fd = s && sandbox_paths(s, tname, NULL) == 0 ? open(sandbox_path(s, "template", p, sizeof p),
                                                           O_RDONLY | O_CLOEXEC) : -1;
    free(s);
    if (fd < 0)
        return -1;
    struct sbx_template_info *in = elem;
    ssize_t k = read(fd, buf, sizeof buf - 1);
    buf[k > 0 ? k : 0] = 0;
    close(fd);
    memset(in, 0, sizeof *in);
    snprintf(in->name, sizeof in->name, "%s", tname + strlen(SBX_TEMPLATE_PREFIX));
    in->agent = !strstr(buf, "agent=0");
    const char *f = strstr(buf, "from=");
    if (f)
        snprintf(in->from, sizeof in->from, "%.*s", (int)strcspn(f + 5, "\n"), f + 5);
    return 0;
}

int sandbox_template_list(struct sbx_template_info **out, size_t *n, struct sbx_err *err)
{
    void *v;
    int r = sandbox_list_of(SBX_TEMPLATE_PREFIX, sizeof **out, template_marker, &v, n, err);
    *out = v;
    return r;
}

int sandbox_template_remove(const char *name, struct sbx_err *err)
{
    char tname[SBX_NAME_MAX + 16];
    snprintf(tname, sizeof tname, SBX_TEMPLATE_PREFIX "%.60s", name);
    if (!sandbox_valid_name(name) || !sandbox_exists(tname))
        return sandbox_err(err, -ENOENT, "no template named %s (moat template ls)", name);
    return sandbox_remove(tname, 1, err);
}
