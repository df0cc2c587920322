/* vhost-user messages, pure: bytes (and a count of received fds) in, a
 * checked message value out; and the few replies a backend sends, encoded.
 * No sockets, no mmap, no device: vmm/transport/vhost_user.c does the I/O.
 *
 * Wire format (QEMU docs/interop/vhost-user.rst), little-endian x86:
 *   header  { u32 request; u32 flags; u32 size; }  then `size` payload bytes.
 *   flags:  bits 0-1 version (must be 1), bit 2 REPLY, bit 3 NEED_REPLY;
 *           other bits reserved (must be 0).
 * Every request from the frontend is checked here before the backend acts:
 *   - header: version 1, REPLY clear (it is a request), no reserved flag
 *     bits, size <= VHU_MAX_PAYLOAD;
 *   - payload: exactly the size the request's payload type has (a memory
 *     table: 8 + 32 * nregions; a config request: 12 + its size field);
 *   - fds: exactly as many as the request carries (mem table: one per
 *     region; kick/call/err: one unless the NOFD bit is set; else none);
 *   - values: vring index < the backend's queue count, vring size a power of
 *     two <= 32768, base <= 0xffff, enable 0/1, no unknown bits in vring
 *     addr flags or in kick/call/err words, memory regions non-empty,
 *     without address overflow (guest-physical, user-virtual, mmap offset),
 *     and not overlapping in guest-physical or user-virtual space; config
 *     size <= VHU_MAX_CONFIG.
 * The frontend is the other process (QEMU, Cloud Hypervisor); treat it as
 * untrusted anyway: a bad message gets an error, never a crash. */
#ifndef MOAT_VHOST_USER_MSG_H
#define MOAT_VHOST_USER_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VHU_HDR_SIZE        12u
#define VHU_MAX_PAYLOAD     512u    /* larger than any message we accept */
#define VHU_MAX_FDS         8u      /* fds one message may carry */
#define VHU_MAX_REGIONS     8u      /* VHOST_MEMORY_BASELINE_NREGIONS */
#define VHU_MAX_CONFIG      256u    /* VHOST_USER_MAX_CONFIG_SIZE */
#define VHU_MAX_QUEUES      8u      /* our cap on vrings */
#define VHU_VRING_MAX_NUM   32768u

#define VHU_VERSION         0x1u
#define VHU_FLAG_VERSION_MASK 0x3u
#define VHU_FLAG_REPLY      (1u << 2)
#define VHU_FLAG_NEED_REPLY (1u << 3)

/* Requests, frontend -> backend. */
enum vhu_request {
    VHU_NONE = 0,
    VHU_GET_FEATURES = 1,
    VHU_SET_FEATURES = 2,
    VHU_SET_OWNER = 3,
    VHU_RESET_OWNER = 4,
    VHU_SET_MEM_TABLE = 5,
    VHU_SET_LOG_BASE = 6,
    VHU_SET_LOG_FD = 7,
    VHU_SET_VRING_NUM = 8,
    VHU_SET_VRING_ADDR = 9,
    VHU_SET_VRING_BASE = 10,
    VHU_GET_VRING_BASE = 11,
    VHU_SET_VRING_KICK = 12,
    VHU_SET_VRING_CALL = 13,
    VHU_SET_VRING_ERR = 14,
    VHU_GET_PROTOCOL_FEATURES = 15,
    VHU_SET_PROTOCOL_FEATURES = 16,
    VHU_GET_QUEUE_NUM = 17,
    VHU_SET_VRING_ENABLE = 18,
    VHU_SEND_RARP = 19,
    VHU_NET_SET_MTU = 20,
    VHU_SET_SLAVE_REQ_FD = 21,
    VHU_IOTLB_MSG = 22,
    VHU_SET_VRING_ENDIAN = 23,
    VHU_GET_CONFIG = 24,
    VHU_SET_CONFIG = 25,
    VHU_RESET_DEVICE = 34,
    VHU_SET_STATUS = 39,
    VHU_GET_STATUS = 40,
    VHU_REQUEST_MAX = 41,       /* known request numbers are < this */
};

/* Feature bits. */
#define VHU_F_PROTOCOL_FEATURES 30     /* in the virtio feature word */
#define VHU_F_LOG_ALL           26
#define VHU_PROTOCOL_F_MQ        0
#define VHU_PROTOCOL_F_REPLY_ACK 3
#define VHU_PROTOCOL_F_CONFIG    9
#define VHU_PROTOCOL_F_RESET_DEVICE 13
#define VHU_PROTOCOL_F_STATUS    16

/* Kick/call/err payload word: bits 0-7 vring index, bit 8 "no fd". */
#define VHU_VRING_IDX_MASK   0xffull
#define VHU_VRING_NOFD       (1ull << 8)

#define VHU_VRING_F_LOG      1u

struct vhu_hdr {
    uint32_t request;
    uint32_t flags;
    uint32_t size;
};

struct vhu_region {
    uint64_t gpa;           /* guest_phys_addr */
    uint64_t size;          /* memory_size */
    uint64_t uva;           /* userspace_addr (frontend's virtual address) */
    uint64_t mmap_offset;   /* offset of gpa's byte in the fd */
};

struct vhu_mem_table {
    uint32_t nregions;
    struct vhu_region r[VHU_MAX_REGIONS];
};

struct vhu_vring_addr {
    uint32_t index;
    uint32_t flags;
    uint64_t desc_uva, used_uva, avail_uva, log_gpa;
};

/* The payload kind of each request. */
enum vhu_payload {
    VHU_P_NONE,         /* no payload */
    VHU_P_U64,          /* features, log base, ... */
    VHU_P_STATE,        /* vring state { u32 index; u32 num; } */
    VHU_P_ADDR,         /* vring address */
    VHU_P_MEM,          /* memory table */
    VHU_P_VRING_FD,     /* u64 index|NOFD, with 0 or 1 fd */
    VHU_P_CONFIG,       /* { u32 offset; u32 size; u32 flags; u8 payload[size]; } */
    VHU_P_OPAQUE,       /* known request we do not implement: any size <= cap */
};

struct vhu_msg {
    uint32_t request;
    bool need_reply;
    enum vhu_payload kind;
    unsigned nfds;
    union {
        uint64_t u64;
        struct { uint32_t index, num; } state;
        struct vhu_vring_addr addr;
        struct vhu_mem_table mem;
        struct { uint32_t index; bool nofd; } vring_fd;
        struct {
            uint32_t offset, size, flags;
            const uint8_t *data;        /* points into the payload buffer */
        } config;
    } u;
};

enum vhu_err {
    VHU_E_OK = 0,
    VHU_E_SHORT,            /* fewer than 12 header bytes */
    VHU_E_VERSION,          /* version bits != 1 */
    VHU_E_REPLY_FLAG,       /* REPLY set on a request */
    VHU_E_FLAGS,            /* reserved flag bits set */
    VHU_E_TOO_BIG,          /* size > VHU_MAX_PAYLOAD */
    VHU_E_UNKNOWN,          /* request number unknown (0 or >= VHU_REQUEST_MAX) */
    VHU_E_SIZE,             /* payload size wrong for the request */
    VHU_E_FDS,              /* wrong number of fds */
    VHU_E_INDEX,            /* vring index >= the queue count */
    VHU_E_NUM,              /* vring size not a power of two in [1, 32768] */
    VHU_E_BASE,             /* vring base > 0xffff */
    VHU_E_ENABLE,           /* enable not 0 or 1 */
    VHU_E_VRING_FLAGS,      /* unknown bits in vring addr flags or fd word */
    VHU_E_NREGIONS,         /* more than VHU_MAX_REGIONS regions */
    VHU_E_REGION,           /* empty region or address overflow */
    VHU_E_OVERLAP,          /* regions overlap (guest-physical or user-virtual) */
    VHU_E_CONFIG_SIZE,      /* config size 0 or > VHU_MAX_CONFIG, or offset+size overflows */
    VHU_E__COUNT
};

const char *vhu_strerror(enum vhu_err e);
/* Request name for logs ("SET_MEM_TABLE"), "UNKNOWN" if not known. */
const char *vhu_request_name(uint32_t request);

/* Check a header: 0 or -EINVAL (h filled as far as it could be read; *err
 * says why). len is the number of bytes available (>= 12 expected). */
int vhu_parse_hdr(const uint8_t *buf, size_t len, struct vhu_hdr *h, enum vhu_err *err);

/* Check a whole request: its header (already checked by vhu_parse_hdr,
 * checked again), len payload bytes (must equal h->size) and nfds received
 * fds. nqueues is the backend's vring count (index limit, <= VHU_MAX_QUEUES).
 * 0 and *m filled, or -EINVAL (bad message; *err says why) or -ENOTSUP
 * (a known request of kind VHU_P_OPAQUE: m->request, m->need_reply, m->nfds
 * filled; the backend answers it with a failure if a reply is needed).
 * m->u.config.data points into payload. */
int vhu_parse_msg(const struct vhu_hdr *h, const uint8_t *payload, size_t len,
                  unsigned nfds, unsigned nqueues, struct vhu_msg *m,
                  enum vhu_err *err);

/* Translate a frontend user-virtual range [uva, uva + len) into a guest
 * physical address through the memory table: 0 and *gpa, or -EFAULT if the
 * range is not entirely inside one region (or overflows). */
int vhu_uva_to_gpa(const struct vhu_mem_table *t, uint64_t uva, uint64_t len,
                   uint64_t *gpa);

/* Encode replies into buf (at least VHU_HDR_SIZE + payload bytes): return
 * the total length, or -EINVAL (config size > VHU_MAX_CONFIG) / -ENOBUFS. */
int vhu_reply_u64(uint8_t *buf, size_t cap, uint32_t request, uint64_t v);
int vhu_reply_state(uint8_t *buf, size_t cap, uint32_t request, uint32_t index, uint32_t num);
int vhu_reply_config(uint8_t *buf, size_t cap, uint32_t offset, uint32_t size,
                     uint32_t flags, const uint8_t *data);

#endif
