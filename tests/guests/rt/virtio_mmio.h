/* virtio-mmio (version 2) register offsets for the polling test-guest
 * drivers (blk.c, vsock.c). Slot i of moat's virtio-mmio devices sits at
 * 0xD0001000 + 0x1000 * i (vmm/base/layout.h). */
#ifndef MOAT_GUEST_VIRTIO_MMIO_H
#define MOAT_GUEST_VIRTIO_MMIO_H

#include <stdint.h>

#define VIRTIO_MMIO_SLOT(i) (0xD0001000ull + 0x1000ull * (i))
#define R_MAGIC       0x000
#define R_VERSION     0x004
#define R_DEVICE_ID   0x008
#define R_DEV_FEAT    0x010
#define R_DEV_FEAT_SEL 0x014
#define R_DRV_FEAT    0x020
#define R_DRV_FEAT_SEL 0x024
#define R_QUEUE_SEL   0x030
#define R_QUEUE_MAX   0x034
#define R_QUEUE_NUM   0x038
#define R_QUEUE_READY 0x044
#define R_QUEUE_NOTIFY 0x050
#define R_INT_STATUS  0x060
#define R_INT_ACK     0x064
#define R_STATUS      0x070
#define R_DESC_LO     0x080
#define R_DESC_HI     0x084
#define R_AVAIL_LO    0x090
#define R_AVAIL_HI    0x094
#define R_USED_LO     0x0a0
#define R_USED_HI     0x0a4
#define R_CONFIG      0x100

/* A split-ring descriptor, and the fields of a ring of n entries with the
 * driver's own index of the next used element (for a struct of the
 * guest's: struct vq { VRING_FIELDS(8); ... }). */
struct desc { uint64_t addr; uint32_t len; uint16_t flags, next; };
#define VRING_FIELDS(n)                                                                      \
    struct desc desc[n] __attribute__((aligned(16)));                                       \
    struct { uint16_t flags, idx, ring[n], used_event; } avail __attribute__((aligned(4))); \
    struct { uint16_t flags, idx; struct { uint32_t id, len; } ring[n]; uint16_t avail_event; } used \
        __attribute__((aligned(8)));                                                         \
    uint16_t last_used

/* The virtio-mmio v2 handshake with the device at base up to FEATURES_OK,
 * offering only VERSION_1: 0; nodev when the slot is empty or holds
 * another device type; 10 not a v2 virtio-mmio device; 11 VERSION_1 not
 * offered or FEATURES_OK refused. Needs rt.h (mmio_read32/mmio_write32). */
static inline int virtio_mmio_handshake(uint64_t base, uint32_t device_id, int nodev)
{
    uint32_t magic = mmio_read32(base + R_MAGIC);
    if (magic == 0xffffffffu)
        return nodev;
    if (magic != 0x74726976u || mmio_read32(base + R_VERSION) != 2)
        return 10;
    if (mmio_read32(base + R_DEVICE_ID) != device_id)
        return nodev;
    mmio_write32(base + R_STATUS, 0);
    mmio_write32(base + R_STATUS, 1);
    mmio_write32(base + R_STATUS, 1 | 2);
    mmio_write32(base + R_DEV_FEAT_SEL, 1);
    if (!(mmio_read32(base + R_DEV_FEAT) & 1))
        return 11;
    mmio_write32(base + R_DRV_FEAT_SEL, 0);
    mmio_write32(base + R_DRV_FEAT, 0);
    mmio_write32(base + R_DRV_FEAT_SEL, 1);
    mmio_write32(base + R_DRV_FEAT, 1);             /* VERSION_1 */
    mmio_write32(base + R_STATUS, 1 | 2 | 8);
    if (!(mmio_read32(base + R_STATUS) & 8))
        return 11;
    return 0;
}

#endif
