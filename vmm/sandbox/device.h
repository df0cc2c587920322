/* A live sandbox's devices, changed and read through its control socket
 * (the set and get requests of docs/control-socket.md; moat set, moat get
 * and moat net, docs/sandboxes.md): the sandbox library's rules
 * (vmm/sandbox/sandbox.h): 0 or -errno with why in a struct sbx_err,
 * nothing printed, no static state. The sandbox must be running or paused
 * ("cannot change a device of it"). */
#ifndef MOAT_SANDBOX_DEVICE_H
#define MOAT_SANDBOX_DEVICE_H

#include <stddef.h>

#include "vmm/sandbox/ctl_proto.h"
#include "vmm/sandbox/sandbox.h"

#define SBX_DEV_VALUE_MAX (CTL_ARG_MAX - 64)    /* bytes of a set's value */
#define SBX_DEV_TEXT_MAX (CTL_REPLY_MAX + 1)    /* bytes of a get's text, NUL included */

/* TYPE[:ID] dev's KEY key = value (moat set NAME TYPE[:ID] KEY VALUE).
 * 0, or -E2BIG (value not one line of at most SBX_DEV_VALUE_MAX bytes: a
 * usage error), -EINVAL (not live), -ENOENT, -EPROTO (the VMM's error
 * reply as the message) or another -errno, with why. */
int sandbox_device_set(const char *name, const char *dev, const char *key, const char *value,
                       struct sbx_err *err);
/* dev's key (moat get NAME TYPE[:ID] KEY): the VMM's text (unescaped) into
 * out (olen bytes, cut to fit; out NULL: only whether it answers). 0, or
 * -E2BIG (dev and key too long: a usage error) or an error as
 * sandbox_device_set's, with why. */
int sandbox_device_get(const char *name, const char *dev, const char *key, char *out, size_t olen,
                       struct sbx_err *err);
/* One more item on the egress policy in force (moat net NAME allow|deny|
 * allow-domain|default SPEC): the policy read, "ITEM SPEC" appended (after
 * "; " unless it was empty) and set. 0, or an error as sandbox_device_get's
 * and sandbox_device_set's (-E2BIG: the new policy is too long), or
 * -EINVAL for another item, with why. */
int sandbox_net_policy_add(const char *name, const char *item, const char *spec, struct sbx_err *err);
/* The metadata service's document (moat net NAME metadata FILE): json's
 * newlines, returns and tabs as spaces, trailing spaces cut (the control
 * line takes none), set as the net device's metadata. 0, or an error as
 * sandbox_device_set's, with why. */
int sandbox_net_metadata(const char *name, const char *json, struct sbx_err *err);

#endif
