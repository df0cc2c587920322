/* Fuzz the virtio-mmio register model with a sequence of register accesses.
 *
 * Input: records of 7 bytes: [0] bit0 write, bits1-2 width (1,2,4,8),
 *        bit3 device-side event (then [1] selects: interrupt / config change
 *        / needs reset); [1..2] offset (le16, % 0x1000); [3..6] value (le32).
 * After every access the model's invariants are checked. */
#include <stdint.h>
#include <string.h>

#include "devices/virtio/virtio_mmio.h"
#include "tests/fuzz/fuzz_common.h"

#define RAM 0x8000u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct st { int level; int activated; unsigned notifies; };

static void f_notify(void *o, unsigned q) { FUZZ_ASSERT(q < 2); ((struct st *)o)->notifies++; }
static int f_activate(void *o) { ((struct st *)o)->activated++; return 0; }
static void f_reset(void *o) { ((struct st *)o)->activated = 0; }
static void f_irq(void *o, bool level) { ((struct st *)o)->level = level; }
static void f_cfg_read(void *o, uint32_t off, uint8_t *d, uint32_t len)
{
    FUZZ_ASSERT(off < 0xf00 && len <= 8 && off + len <= 0xf00);
    memset(d, 0x11, len);
}
static void f_cfg_write(void *o, uint32_t off, const uint8_t *d, uint32_t len)
{
    FUZZ_ASSERT(off < 0xf00 && len <= 8 && off + len <= 0xf00);
}
static const struct virtio_mmio_ops fops = { f_notify, f_activate, f_reset, f_cfg_read, f_cfg_write, f_irq };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t ram[RAM];
    struct gmem m = { .n = 1 };
    m.r[0] = (struct gmem_region){ 0, RAM, ram };
    struct st s = {0};
    struct virtio_mmio vm;
    struct virtio_mmio_params p = { .device_id = 2, .nqueues = 2, .queue_max = 64,
        .device_features = (1ull << VIRTIO_F_EVENT_IDX) | (1ull << VIRTIO_F_INDIRECT_DESC) | 0x3f };
    FUZZ_ASSERT(virtio_mmio_init(&vm, &p, &m, &fops, &s) == 0);
    for (size_t i = 0; i + 7 <= size; i += 7) {
        const uint8_t *r = data + i;
        uint32_t len = 1u << ((r[0] >> 1) & 3);
        uint64_t off = (uint64_t)(r[1] | r[2] << 8) % VIRTIO_MMIO_SIZE;
        uint8_t buf[8] = { r[3], r[4], r[5], r[6], r[3], r[4], r[5], r[6] };
        if (r[0] & 8) {
            switch (r[1] % 3) {
            case 0: virtio_mmio_interrupt(&vm, r[3]); break;
            case 1: virtio_mmio_config_changed(&vm); break;
            default: virtio_mmio_set_needs_reset(&vm); break;
            }
        } else if (r[0] & 1) {
            virtio_mmio_write(&vm, off, buf, len);
        } else {
            virtio_mmio_read(&vm, off, buf, len);
        }
        uint32_t st = vm.status;
        FUZZ_ASSERT(!(st & ~0xcfu));
        if (st & VIRTIO_STATUS_DRIVER_OK)
            FUZZ_ASSERT(st & VIRTIO_STATUS_FEATURES_OK);
        if (st & VIRTIO_STATUS_FEATURES_OK) {
            FUZZ_ASSERT((st & VIRTIO_STATUS_DRIVER) && (st & VIRTIO_STATUS_ACKNOWLEDGE));
            FUZZ_ASSERT(!(vm.driver_requested & ~vm.device_features));
            FUZZ_ASSERT(vm.driver_requested & (1ull << VIRTIO_F_VERSION_1));
        }
        if (st & VIRTIO_STATUS_DRIVER)
            FUZZ_ASSERT(st & VIRTIO_STATUS_ACKNOWLEDGE);
        FUZZ_ASSERT(!(vm.driver_features & ~vm.device_features));
        FUZZ_ASSERT(s.level == (vm.interrupt_status != 0));
        FUZZ_ASSERT(!(vm.interrupt_status & ~3u));
        FUZZ_ASSERT(s.activated <= 1);
        for (unsigned q = 0; q < 2; q++) {
            const struct virtq *vq = &vm.q[q];
            FUZZ_ASSERT(vq->size >= 1 && vq->size <= vq->max_size);
            if (vq->ready) {
                FUZZ_ASSERT(!(vq->size & (vq->size - 1)));
                FUZZ_ASSERT(gmem_ptr(&m, vq->desc, virtq_desc_bytes(vq->size)));
                FUZZ_ASSERT(gmem_ptr(&m, vq->avail, virtq_avail_bytes(vq->size)));
                FUZZ_ASSERT(gmem_ptr(&m, vq->used, virtq_used_bytes(vq->size)));
                FUZZ_ASSERT(st & VIRTIO_STATUS_FEATURES_OK);
            }
        }
    }
    virtio_mmio_destroy(&vm);
    return 0;
}
