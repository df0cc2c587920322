/* Fuzz the vhost-user message parser (devices/virtio/vhost_user_msg.h): the input
 * is what a frontend would put on the socket, plus the fd count the kernel
 * would have delivered with it. Checks the invariants the header promises
 * for every accepted message, and that replies encode and never parse back
 * as requests.
 *
 * Input: [0] number of fds received (v % 10: 0..9, i.e. also too many)
 *        [1] backend queue count (v % 10)
 *        [2..] the message: 12-byte header then payload (the header's size
 *              field is used as is: a mismatch with the bytes present must
 *              be refused)
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "devices/virtio/vhost_user_msg.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    unsigned nfds = data[0] % 10, nq = data[1] % 10;
    data += 2;
    size -= 2;

    struct vhu_hdr h;
    enum vhu_err e;
    int r = vhu_parse_hdr(data, size, &h, &e);
    if (r < 0) {
        FUZZ_ASSERT(r == -EINVAL && e != VHU_E_OK && e < VHU_E__COUNT);
        return 0;
    }
    FUZZ_ASSERT(h.size <= VHU_MAX_PAYLOAD);
    FUZZ_ASSERT((h.flags & VHU_FLAG_VERSION_MASK) == VHU_VERSION && !(h.flags & VHU_FLAG_REPLY));

    /* The payload as received: exactly the bytes after the header, copied so
     * that ASan catches any read past them. */
    size_t plen = size - VHU_HDR_SIZE;
    uint8_t *payload = plen ? malloc(plen) : NULL;
    if (plen)
        memcpy(payload, data + VHU_HDR_SIZE, plen);
    struct vhu_msg m;
    r = vhu_parse_msg(&h, payload, plen, nfds, nq, &m, &e);
    unsigned qlim = nq > VHU_MAX_QUEUES ? VHU_MAX_QUEUES : nq;
    if (r == -EINVAL) {
        FUZZ_ASSERT(e != VHU_E_OK && e < VHU_E__COUNT);
        vhu_strerror(e);
        goto out;
    }
    if (r == -ENOTSUP) {
        FUZZ_ASSERT(m.kind == VHU_P_OPAQUE && m.request == h.request);
        goto out;
    }
    FUZZ_ASSERT(r == 0);
    FUZZ_ASSERT(plen == h.size && m.request == h.request && m.nfds == nfds);
    FUZZ_ASSERT(m.request > 0 && m.request < VHU_REQUEST_MAX);
    switch (m.kind) {
    case VHU_P_NONE:
        FUZZ_ASSERT(plen == 0 && nfds == 0);
        break;
    case VHU_P_U64:
        FUZZ_ASSERT(plen == 8 && nfds == 0);
        break;
    case VHU_P_STATE:
        FUZZ_ASSERT(plen == 8 && nfds == 0 && m.u.state.index < qlim);
        if (m.request == VHU_SET_VRING_NUM) {
            uint32_t n = m.u.state.num;
            FUZZ_ASSERT(n && n <= VHU_VRING_MAX_NUM && !(n & (n - 1)));
        }
        if (m.request == VHU_SET_VRING_BASE)
            FUZZ_ASSERT(m.u.state.num <= 0xffff);
        if (m.request == VHU_SET_VRING_ENABLE)
            FUZZ_ASSERT(m.u.state.num <= 1);
        break;
    case VHU_P_ADDR:
        FUZZ_ASSERT(plen == 40 && m.u.addr.index < qlim && !(m.u.addr.flags & ~VHU_VRING_F_LOG));
        break;
    case VHU_P_MEM: {
        const struct vhu_mem_table *t = &m.u.mem;
        FUZZ_ASSERT(t->nregions <= VHU_MAX_REGIONS && t->nregions == nfds);
        FUZZ_ASSERT(plen == 8 + 32ull * t->nregions);
        for (uint32_t i = 0; i < t->nregions; i++) {
            const struct vhu_region *a = &t->r[i];
            uint64_t end;
            FUZZ_ASSERT(a->size > 0);
            FUZZ_ASSERT(!__builtin_add_overflow(a->gpa, a->size, &end));
            FUZZ_ASSERT(!__builtin_add_overflow(a->uva, a->size, &end));
            FUZZ_ASSERT(!__builtin_add_overflow(a->mmap_offset, a->size, &end));
            for (uint32_t j = 0; j < i; j++) {
                const struct vhu_region *b = &t->r[j];
                FUZZ_ASSERT(a->gpa + a->size <= b->gpa || b->gpa + b->size <= a->gpa);
                FUZZ_ASSERT(a->uva + a->size <= b->uva || b->uva + b->size <= a->uva);
            }
            /* translation: the first and last byte map into the region */
            uint64_t gpa;
            FUZZ_ASSERT(vhu_uva_to_gpa(t, a->uva, 1, &gpa) == 0 && gpa == a->gpa);
            FUZZ_ASSERT(vhu_uva_to_gpa(t, a->uva + a->size - 1, 1, &gpa) == 0 &&
                        gpa == a->gpa + a->size - 1);
            FUZZ_ASSERT(vhu_uva_to_gpa(t, a->uva, a->size, &gpa) == 0);
        }
        /* arbitrary ranges: a success lies within one region */
        uint64_t uva, len, gpa;
        memcpy(&uva, data, 8 < size ? 8 : size);
        len = size;
        if (vhu_uva_to_gpa(t, uva, len, &gpa) == 0) {
            bool found = false;
            for (uint32_t i = 0; i < t->nregions; i++)
                if (uva >= t->r[i].uva && uva + len <= t->r[i].uva + t->r[i].size &&
                    gpa == t->r[i].gpa + (uva - t->r[i].uva))
                    found = true;
            FUZZ_ASSERT(found);
        }
        break;
    }
    case VHU_P_VRING_FD:
        FUZZ_ASSERT(plen == 8 && m.u.vring_fd.index < qlim);
        FUZZ_ASSERT(nfds == (m.u.vring_fd.nofd ? 0u : 1u));
        break;
    case VHU_P_CONFIG: {
        FUZZ_ASSERT(m.u.config.size > 0 && m.u.config.size <= VHU_MAX_CONFIG);
        FUZZ_ASSERT(m.u.config.offset + m.u.config.size <= VHU_MAX_CONFIG);
        FUZZ_ASSERT(plen == 12 + (size_t)m.u.config.size);
        FUZZ_ASSERT(m.u.config.data == payload + 12);
        /* echo it back as a reply; never a valid request */
        uint8_t buf[VHU_HDR_SIZE + 12 + VHU_MAX_CONFIG];
        int n = vhu_reply_config(buf, sizeof buf, m.u.config.offset, m.u.config.size,
                                 m.u.config.flags, m.u.config.data);
        FUZZ_ASSERT(n == (int)(VHU_HDR_SIZE + 12 + m.u.config.size));
        struct vhu_hdr rh;
        FUZZ_ASSERT(vhu_parse_hdr(buf, (size_t)n, &rh, &e) == -EINVAL && e == VHU_E_REPLY_FLAG);
        break;
    }
    case VHU_P_OPAQUE:
        FUZZ_ASSERT(0);
    }
out:
    free(payload);
    return 0;
}
