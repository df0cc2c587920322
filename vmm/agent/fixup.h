/* The post-restore fix-up through the guest agent (vmm/agent/fixup.c,
 * docs/vsock.md), registered with a restored VM as lifecycle hooks
 * (vmm/core/vmhooks.h): a restored device that asks for it (the vsock
 * device, which holds host clients back) makes moat_start start the
 * fix-up thread; moat_destroy stops (joins) it. */
#ifndef MOAT_FIXUP_H
#define MOAT_FIXUP_H

struct moat_vm;

/* Register the fix-up's hooks and record with vm. 0 or -errno. */
int fixup_attach(struct moat_vm *vm);

#endif
