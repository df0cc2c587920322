/* vhost-user message parsing and reply encoding. Contracts in vhost_user_msg.h. */
#include "devices/virtio/vhost_user_msg.h"

#include <endian.h>
#include <errno.h>
#include <string.h>

static const char *const err_names[VHU_E__COUNT] = {
    [VHU_E_OK] = "ok",
    [VHU_E_SHORT] = "short header",
    [VHU_E_VERSION] = "bad protocol version",
    [VHU_E_REPLY_FLAG] = "reply flag set on a request",
    [VHU_E_FLAGS] = "reserved flag bits set",
    [VHU_E_TOO_BIG] = "payload too big",
    [VHU_E_UNKNOWN] = "unknown request",
    [VHU_E_SIZE] = "payload size wrong for the request",
    [VHU_E_FDS] = "wrong number of file descriptors",
    [VHU_E_INDEX] = "vring index out of range",
    [VHU_E_NUM] = "vring size not a power of two in [1, 32768]",
    [VHU_E_BASE] = "vring base above 0xffff",
    [VHU_E_ENABLE] = "vring enable not 0 or 1",
    [VHU_E_VRING_FLAGS] = "unknown vring flag bits",
    [VHU_E_NREGIONS] = "too many memory regions",
    [VHU_E_REGION] = "empty or overflowing memory region",
    [VHU_E_OVERLAP] = "overlapping memory regions",
    [VHU_E_CONFIG_SIZE] = "bad config size",
};

const char *vhu_strerror(enum vhu_err e)
{
    if ((unsigned)e >= VHU_E__COUNT)
        return "unknown vhost-user error";
    return err_names[e];
}

static const char *const req_names[VHU_REQUEST_MAX] = {
    [1] = "GET_FEATURES", [2] = "SET_FEATURES", [3] = "SET_OWNER",
    [4] = "RESET_OWNER", [5] = "SET_MEM_TABLE", [6] = "SET_LOG_BASE",
    [7] = "SET_LOG_FD", [8] = "SET_VRING_NUM", [9] = "SET_VRING_ADDR",
    [10] = "SET_VRING_BASE", [11] = "GET_VRING_BASE", [12] = "SET_VRING_KICK",
    [13] = "SET_VRING_CALL", [14] = "SET_VRING_ERR",
    [15] = "GET_PROTOCOL_FEATURES", [16] = "SET_PROTOCOL_FEATURES",
    [17] = "GET_QUEUE_NUM", [18] = "SET_VRING_ENABLE", [19] = "SEND_RARP",
    [20] = "NET_SET_MTU", [21] = "SET_SLAVE_REQ_FD", [22] = "IOTLB_MSG",
    [23] = "SET_VRING_ENDIAN", [24] = "GET_CONFIG", [25] = "SET_CONFIG",
    [26] = "CREATE_CRYPTO_SESSION", [27] = "CLOSE_CRYPTO_SESSION",
    [28] = "POSTCOPY_ADVISE", [29] = "POSTCOPY_LISTEN", [30] = "POSTCOPY_END",
    [31] = "GET_INFLIGHT_FD", [32] = "SET_INFLIGHT_FD", [33] = "GPU_SET_SOCKET",
    [34] = "RESET_DEVICE", [35] = "VRING_KICK", [36] = "GET_MAX_MEM_SLOTS",
    [37] = "ADD_MEM_REG", [38] = "REM_MEM_REG", [39] = "SET_STATUS",
    [40] = "GET_STATUS",
};

const char *vhu_request_name(uint32_t request)
{
    if (request == 0 || request >= VHU_REQUEST_MAX || !req_names[request])
        return "UNKNOWN";
    return req_names[request];
}

static uint32_t ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return le32toh(v); }
static uint64_t ld64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return le64toh(v); }
static void st32(uint8_t *p, uint32_t v) { v = htole32(v); memcpy(p, &v, 4); }
static void st64(uint8_t *p, uint64_t v) { v = htole64(v); memcpy(p, &v, 8); }

static int fail(enum vhu_err *err, enum vhu_err e)
{
    if (err)
        *err = e;
    return -EINVAL;
}

/* A front-end's header: version 1, no reply flag, no unknown flag, a
 * payload within VHU_MAX_PAYLOAD. */
static int check_hdr(const struct vhu_hdr *h, enum vhu_err *err)
{
    if ((h->flags & VHU_FLAG_VERSION_MASK) != VHU_VERSION)
        return fail(err, VHU_E_VERSION);
    if (h->flags & VHU_FLAG_REPLY)
        return fail(err, VHU_E_REPLY_FLAG);
    if (h->flags & ~(VHU_FLAG_VERSION_MASK | VHU_FLAG_NEED_REPLY))
        return fail(err, VHU_E_FLAGS);
    if (h->size > VHU_MAX_PAYLOAD)
        return fail(err, VHU_E_TOO_BIG);
    return 0;
}

/* A payload of exactly want bytes and no descriptors. */
static int fixed_no_fds(size_t len, size_t want, unsigned nfds, enum vhu_err *err)
{
    if (len != want)
        return fail(err, VHU_E_SIZE);
    if (nfds)
        return fail(err, VHU_E_FDS);
    return 0;
}

int vhu_parse_hdr(const uint8_t *buf, size_t len, struct vhu_hdr *h, enum vhu_err *err)
{
    memset(h, 0, sizeof *h);
    if (err)
        *err = VHU_E_OK;
    if (!buf || len < VHU_HDR_SIZE)
        return fail(err, VHU_E_SHORT);
    h->request = ld32(buf);
    h->flags = ld32(buf + 4);
    h->size = ld32(buf + 8);
    return check_hdr(h, err);
}

static enum vhu_payload payload_kind(uint32_t req)
{
    switch (req) {
    case VHU_GET_FEATURES: case VHU_SET_OWNER: case VHU_RESET_OWNER:
    case VHU_GET_PROTOCOL_FEATURES: case VHU_GET_QUEUE_NUM: case VHU_RESET_DEVICE:
    case VHU_GET_STATUS:
        return VHU_P_NONE;
    case VHU_SET_FEATURES: case VHU_SET_PROTOCOL_FEATURES: case VHU_SET_STATUS:
        return VHU_P_U64;
    case VHU_SET_VRING_NUM: case VHU_SET_VRING_BASE: case VHU_GET_VRING_BASE:
    case VHU_SET_VRING_ENABLE:
        return VHU_P_STATE;
    case VHU_SET_VRING_ADDR:
        return VHU_P_ADDR;
    case VHU_SET_MEM_TABLE:
        return VHU_P_MEM;
    case VHU_SET_VRING_KICK: case VHU_SET_VRING_CALL: case VHU_SET_VRING_ERR:
        return VHU_P_VRING_FD;
    case VHU_GET_CONFIG: case VHU_SET_CONFIG:
        return VHU_P_CONFIG;
    default:
        return VHU_P_OPAQUE;
    }
}

static bool add_ok(uint64_t a, uint64_t b)
{
    uint64_t s;
    return !__builtin_add_overflow(a, b, &s);
}

/* [a, a+as) and [b, b+bs) overlap; both known not to overflow. */
static bool overlaps(uint64_t a, uint64_t as, uint64_t b, uint64_t bs)
{
    return a < b + bs && b < a + as;
}

static int parse_mem(const uint8_t *p, size_t len, unsigned nfds,
                     struct vhu_mem_table *t, enum vhu_err *err)
{
    if (len < 8)
        return fail(err, VHU_E_SIZE);
    uint32_t n = ld32(p);       /* then u32 padding */
    if (n > VHU_MAX_REGIONS)
        return fail(err, VHU_E_NREGIONS);
    if (len != 8 + 32ull * n)
        return fail(err, VHU_E_SIZE);
    if (nfds != n)
        return fail(err, VHU_E_FDS);
    t->nregions = n;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *q = p + 8 + 32 * i;
        struct vhu_region *r = &t->r[i];
        r->gpa = ld64(q);
        r->size = ld64(q + 8);
        r->uva = ld64(q + 16);
        r->mmap_offset = ld64(q + 24);
        if (r->size == 0 || !add_ok(r->gpa, r->size) || !add_ok(r->uva, r->size) ||
            !add_ok(r->mmap_offset, r->size))
            return fail(err, VHU_E_REGION);
        for (uint32_t j = 0; j < i; j++) {
            if (overlaps(r->gpa, r->size, t->r[j].gpa, t->r[j].size) ||
                overlaps(r->uva, r->size, t->r[j].uva, t->r[j].size))
                return fail(err, VHU_E_OVERLAP);
        }
    }
    return 0;
}

/* A vhost_vring_state payload (SET_VRING_NUM, SET_VRING_BASE,
 * SET_VRING_ENABLE, GET_VRING_BASE): a ring index below nqueues and a num
 * valid for the request. */
static int parse_state(uint32_t request, const uint8_t *payload, size_t len, unsigned nfds,
                       unsigned nqueues, struct vhu_msg *m, enum vhu_err *err)
{
    if (fixed_no_fds(len, 8, nfds, err) < 0)
        return -EINVAL;
    m->u.state.index = ld32(payload);
    m->u.state.num = ld32(payload + 4);
    if (m->u.state.index >= nqueues)
        return fail(err, VHU_E_INDEX);
    switch (request) {
    case VHU_SET_VRING_NUM: {
        uint32_t n = m->u.state.num;
        if (n == 0 || n > VHU_VRING_MAX_NUM || (n & (n - 1)))
            return fail(err, VHU_E_NUM);
        break;
    }
    case VHU_SET_VRING_BASE:
        if (m->u.state.num > 0xffff)
            return fail(err, VHU_E_BASE);
        break;
    case VHU_SET_VRING_ENABLE:
        if (m->u.state.num > 1)
            return fail(err, VHU_E_ENABLE);
        break;
    default:
        break;      /* GET_VRING_BASE: num unused */
    }
    return 0;
}

/* A vhost_user_config payload (GET_CONFIG, SET_CONFIG): offset, size and
 * flags, then size bytes, within VHU_MAX_CONFIG. */
static int parse_config(const uint8_t *payload, size_t len, unsigned nfds, struct vhu_msg *m,
                        enum vhu_err *err)
{
    if (len < 12)
        return fail(err, VHU_E_SIZE);
    if (nfds)
        return fail(err, VHU_E_FDS);
    m->u.config.offset = ld32(payload);
    m->u.config.size = ld32(payload + 4);
    m->u.config.flags = ld32(payload + 8);
    if (m->u.config.size == 0 || m->u.config.size > VHU_MAX_CONFIG ||
        m->u.config.offset > VHU_MAX_CONFIG ||
        m->u.config.offset + m->u.config.size > VHU_MAX_CONFIG)
        return fail(err, VHU_E_CONFIG_SIZE);
    if (len != 12 + (size_t)m->u.config.size)
        return fail(err, VHU_E_SIZE);
    m->u.config.data = payload + 12;
    return 0;
}

int vhu_parse_msg(const struct vhu_hdr *h, const uint8_t *payload, size_t len,
                  unsigned nfds, unsigned nqueues, struct vhu_msg *m,
                  enum vhu_err *err)
{
    memset(m, 0, sizeof *m);
    if (err)
        *err = VHU_E_OK;
    if (check_hdr(h, err) < 0)
        return -EINVAL;
    if (len != h->size || (len && !payload))
        return fail(err, VHU_E_SIZE);
    if (h->request == 0 || h->request >= VHU_REQUEST_MAX)
        return fail(err, VHU_E_UNKNOWN);
    if (nfds > VHU_MAX_FDS)
        return fail(err, VHU_E_FDS);
    if (nqueues > VHU_MAX_QUEUES)
        nqueues = VHU_MAX_QUEUES;

    m->request = h->request;
    m->need_reply = h->flags & VHU_FLAG_NEED_REPLY;
    m->nfds = nfds;
    m->kind = payload_kind(h->request);

    switch (m->kind) {
    case VHU_P_NONE:
        return fixed_no_fds(len, 0, nfds, err);
    case VHU_P_U64:
        if (fixed_no_fds(len, 8, nfds, err) < 0)
            return -EINVAL;
        m->u.u64 = ld64(payload);
        return 0;
    case VHU_P_STATE:
        return parse_state(h->request, payload, len, nfds, nqueues, m, err);
    case VHU_P_ADDR:
        if (fixed_no_fds(len, 40, nfds, err) < 0)
            return -EINVAL;
        m->u.addr.index = ld32(payload);
        m->u.addr.flags = ld32(payload + 4);
        m->u.addr.desc_uva = ld64(payload + 8);
        m->u.addr.used_uva = ld64(payload + 16);
        m->u.addr.avail_uva = ld64(payload + 24);
        m->u.addr.log_gpa = ld64(payload + 32);
        if (m->u.addr.index >= nqueues)
            return fail(err, VHU_E_INDEX);
        if (m->u.addr.flags & ~VHU_VRING_F_LOG)
            return fail(err, VHU_E_VRING_FLAGS);
        return 0;
    case VHU_P_MEM:
        return parse_mem(payload, len, nfds, &m->u.mem, err);
    case VHU_P_VRING_FD: {
        if (len != 8)
            return fail(err, VHU_E_SIZE);
        uint64_t v = ld64(payload);
        if (v & ~(VHU_VRING_IDX_MASK | VHU_VRING_NOFD))
            return fail(err, VHU_E_VRING_FLAGS);
        m->u.vring_fd.index = (uint32_t)(v & VHU_VRING_IDX_MASK);
        m->u.vring_fd.nofd = v & VHU_VRING_NOFD;
        if (nfds != (m->u.vring_fd.nofd ? 0u : 1u))
            return fail(err, VHU_E_FDS);
        if (m->u.vring_fd.index >= nqueues)
            return fail(err, VHU_E_INDEX);
        return 0;
    }
    case VHU_P_CONFIG:
        return parse_config(payload, len, nfds, m, err);
    case VHU_P_OPAQUE:
        return -ENOTSUP;
    }
    return fail(err, VHU_E_UNKNOWN);
}

int vhu_uva_to_gpa(const struct vhu_mem_table *t, uint64_t uva, uint64_t len,
                   uint64_t *gpa)
{
    uint64_t end;
    if (__builtin_add_overflow(uva, len, &end))
        return -EFAULT;
    for (uint32_t i = 0; i < t->nregions && i < VHU_MAX_REGIONS; i++) {
        const struct vhu_region *r = &t->r[i];
        if (uva >= r->uva && end <= r->uva + r->size) {
            *gpa = r->gpa + (uva - r->uva);
            return 0;
        }
    }
    return -EFAULT;
}

static void put_hdr(uint8_t *buf, uint32_t request, uint32_t size)
{
    st32(buf, request);
    st32(buf + 4, VHU_VERSION | VHU_FLAG_REPLY);
    st32(buf + 8, size);
}

int vhu_reply_u64(uint8_t *buf, size_t cap, uint32_t request, uint64_t v)
{
    if (cap < VHU_HDR_SIZE + 8)
        return -ENOBUFS;
    put_hdr(buf, request, 8);
    st64(buf + VHU_HDR_SIZE, v);
    return VHU_HDR_SIZE + 8;
}

int vhu_reply_state(uint8_t *buf, size_t cap, uint32_t request, uint32_t index, uint32_t num)
{
    if (cap < VHU_HDR_SIZE + 8)
        return -ENOBUFS;
    put_hdr(buf, request, 8);
    st32(buf + VHU_HDR_SIZE, index);
    st32(buf + VHU_HDR_SIZE + 4, num);
    return VHU_HDR_SIZE + 8;
}

int vhu_reply_config(uint8_t *buf, size_t cap, uint32_t offset, uint32_t size,
                     uint32_t flags, const uint8_t *data)
{
    if (size > VHU_MAX_CONFIG)
        return -EINVAL;
    if (cap < VHU_HDR_SIZE + 12 + (size_t)size)
        return -ENOBUFS;
    put_hdr(buf, VHU_GET_CONFIG, 12 + size);
    st32(buf + VHU_HDR_SIZE, offset);
    st32(buf + VHU_HDR_SIZE + 4, size);
    st32(buf + VHU_HDR_SIZE + 8, flags);
    if (size)
        memcpy(buf + VHU_HDR_SIZE + 12, data, size);
    return (int)(VHU_HDR_SIZE + 12 + size);
}
