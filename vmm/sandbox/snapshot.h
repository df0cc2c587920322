/* A sandbox's tags (vmm/sandbox/snapshot.c): moat snapshot --tag, reset
 * --to and diff --against. A tag T is NAME/tags/T, a snapshot of the
 * sandbox with its copy-on-write disks pinned beside it
 * (sandbox_snapshot_into). The rules of sandbox.h hold: 0 or -errno, why
 * in a struct sbx_err, no printing, no static state. */
#ifndef MOAT_SANDBOX_SNAPSHOT_H
#define MOAT_SANDBOX_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>

#include "vmm/sandbox/start.h"

/* Take tag (a valid sandbox name) of sandbox name, running or stopped.
 * 0, or -EINVAL (a bad tag), -EEXIST (it has that tag), -errno with why. */
int sandbox_snapshot_tag(const char *name, const char *tag, struct sbx_err *err);

/* Put sandbox name back to its tag: each copy-on-write disk replaced by a
 * copy of the tag's pin (a tag without a drive's pin: a warning line, code
 * 0, and that disk stays), its process stopped, the tag restored as its
 * process and waited for (o). 0, or -errno with why. */
int sandbox_reset(const char *name, const char *tag, const struct sbx_start_opts *o, struct sbx_err *err);

/* Comparing a sandbox's disks with a tag's pins (moat diff): the sandbox
 * open and locked until sandbox_diff_end. */
struct sbx_diff {
    struct sbx s;
    char tagdir[3300];
    char tmp[PATH_MAX];     /* a running one's disks pinned now ("" when stopped) */
};

/* Open name locked and get its disks to compare with tag's: a running (or
 * paused) one's pinned into a temporary directory (clone-disks: a short
 * pause). 0 (sandbox_diff_end it), or -errno with why (nothing to end). */
int sandbox_diff_begin(const char *name, const char *tag, struct sbx_diff *d, struct sbx_err *err);
/* Drive n's two files: 1 with pin (the tag's; *has_pin 0 when the tag
 * has none) and cur (the disk now), 0 when drive n has no overlay. */
int sandbox_diff_drive(const struct sbx_diff *d, unsigned n, char *pin, size_t plen, char *cur, size_t clen,
                       bool *has_pin);
/* The temporary pins removed, the sandbox closed. */
void sandbox_diff_end(struct sbx_diff *d);

#endif
