/* Guest memory of a restore served by a page-fault handler in another
 * process, over userfaultfd (docs/uffd.md): Firecracker's
 * mem_backend {backend_type: "Uffd", backend_path}. moat maps guest RAM
 * anonymous, registers it with a userfaultfd (missing-page mode), connects
 * to the handler's Unix socket and sends one message: a JSON array of the
 * regions, [{"base_host_virt_addr", "size", "offset", "page_size",
 * "page_size_kib"}] (Firecracker's GuestRegionUffdMapping; page_size_kib
 * holds bytes too, as Firecracker's deprecated field does), with the
 * userfaultfd as SCM_RIGHTS. From then on every first touch of a page (a
 * vCPU through KVM, or a device) waits until the handler fills it
 * (UFFDIO_COPY / UFFDIO_ZEROPAGE). */
#ifndef MOAT_UFFD_H
#define MOAT_UFFD_H

#include <stddef.h>
#include <stdint.h>

#define UFFD_MAX_REGIONS 4
/* Firecracker's handlers read the handshake into a 1024-byte buffer. */
#define UFFD_HANDSHAKE_MAX 1024

struct uffd_region {
    uint64_t host;          /* base_host_virt_addr */
    uint64_t size;          /* bytes */
    uint64_t offset;        /* in the memory file */
    uint64_t page_size;     /* bytes */
};

/* The handshake's JSON for n regions into buf (NUL-terminated): its length,
 * or -EINVAL (no region, more than UFFD_MAX_REGIONS, a size of 0, a page
 * size that is not a power of two) or -ENOSPC (cap too small). Pure. */
long uffd_mappings_json(const struct uffd_region *r, size_t n, char *buf, size_t cap);

struct moat_vm;

/* For moat_restore: the socket, and the reason a setup failed. */
struct uffd_setup {
    const char *socket_path;
    char why[200];
};

/* snapvm.map_hook for a restore with a uffd backend (arg: struct uffd_setup):
 * guest RAM is mapped anonymous; register it, connect, hand over. Sets
 * snapvm.uffd and .uffd_sock (closed with the VM: snapvm.c). 0 or -errno with why. */
int uffd_map_hook(struct moat_vm *vm, void *arg);

#endif
