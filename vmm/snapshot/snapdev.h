/* The virtio devices in a state file: one SNAP_DEV section per device
 * (vmm/snapshot/snapfmt.h), in slot order. The device table
 * (vmm/core/devtab.h) gives each device's record and makes the devices
 * again from the records; this file is where the records meet the format. */
#ifndef MOAT_SNAPDEV_H
#define MOAT_SNAPDEV_H

#include <stddef.h>

#include "include/moat.h"
#include "vmm/snapshot/snapfmt.h"

struct moat_vm;

/* One SNAP_DEV section per device of vm (paused), in slot order. 0 or
 * -errno. */
int snapdev_save(struct moat_vm *vm, struct snap_writer *w);
/* The SNAP_DEV sections of secs, each checked as it is read (slots 0 ..
 * n-1 in order, the framing, then the record: devtab_rec_check); then the
 * devices made again with rc's overrides and their transport state loaded
 * (devtab_restore). Errors name the device. */
int snapdev_restore(struct moat_vm *vm, const struct moat_restore_config *rc, const struct snap_section *secs,
                    size_t nsecs, struct moat_error *err);

#endif
