/* vhost-user message parser/validator and reply encoder
 * (devices/virtio/vhost_user_msg.h): every accepted shape and every malformed case. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "devices/virtio/vhost_user_msg.h"

#define NQ 2

/* A message under construction: header + payload, little-endian. */
struct mb {
    uint8_t b[VHU_HDR_SIZE + VHU_MAX_PAYLOAD + 64];
    uint32_t len;   /* payload bytes */
};

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static void mb_init(struct mb *m, uint32_t req, uint32_t flags)
{
    memset(m, 0, sizeof *m);
    put32(m->b, req);
    put32(m->b + 4, flags);
}
static void mb_u32(struct mb *m, uint32_t v) { put32(m->b + VHU_HDR_SIZE + m->len, v); m->len += 4; }
static void mb_u64(struct mb *m, uint64_t v) { put64(m->b + VHU_HDR_SIZE + m->len, v); m->len += 8; }
static void mb_fix(struct mb *m) { put32(m->b + 8, m->len); }

/* Parse header and message; returns vhu_parse_msg's result, err in *e. */
static int parse(struct mb *m, unsigned nfds, struct vhu_msg *out, enum vhu_err *e)
{
    struct vhu_hdr h;
    mb_fix(m);
    int r = vhu_parse_hdr(m->b, VHU_HDR_SIZE, &h, e);
    if (r < 0)
        return r;
    return vhu_parse_msg(&h, m->b + VHU_HDR_SIZE, m->len, nfds, NQ, out, e);
}

static struct mb *mem_msg(uint32_t n, const struct vhu_region *r)
{
    static struct mb m;
    mb_init(&m, VHU_SET_MEM_TABLE, VHU_VERSION);
    mb_u32(&m, n);
    mb_u32(&m, 0);
    for (uint32_t i = 0; i < n; i++) {
        mb_u64(&m, r[i].gpa);
        mb_u64(&m, r[i].size);
        mb_u64(&m, r[i].uva);
        mb_u64(&m, r[i].mmap_offset);
    }
    return &m;
}

START_TEST(header_ok_and_flags)
{
    struct mb m;
    struct vhu_hdr h;
    enum vhu_err e;
    mb_init(&m, VHU_GET_FEATURES, VHU_VERSION | VHU_FLAG_NEED_REPLY);
    mb_fix(&m);
    ck_assert_int_eq(vhu_parse_hdr(m.b, VHU_HDR_SIZE, &h, &e), 0);
    ck_assert_uint_eq(h.request, VHU_GET_FEATURES);
    ck_assert_uint_eq(h.size, 0);
    struct vhu_msg msg;
    ck_assert_int_eq(vhu_parse_msg(&h, NULL, 0, 0, NQ, &msg, &e), 0);
    ck_assert(msg.need_reply);
    ck_assert_int_eq(msg.kind, VHU_P_NONE);
}
END_TEST

START_TEST(header_malformed)
{
    struct mb m;
    struct vhu_hdr h;
    enum vhu_err e;
    mb_init(&m, VHU_GET_FEATURES, VHU_VERSION);
    ck_assert_int_eq(vhu_parse_hdr(m.b, VHU_HDR_SIZE - 1, &h, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_SHORT);
    ck_assert_int_eq(vhu_parse_hdr(NULL, 12, &h, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_SHORT);
    static const uint32_t bad_versions[] = { 0, 2, 3 };
    for (unsigned i = 0; i < 3; i++) {
        put32(m.b + 4, bad_versions[i]);
        ck_assert_int_eq(vhu_parse_hdr(m.b, VHU_HDR_SIZE, &h, &e), -EINVAL);
        ck_assert_int_eq(e, VHU_E_VERSION);
    }
    put32(m.b + 4, VHU_VERSION | VHU_FLAG_REPLY);
    ck_assert_int_eq(vhu_parse_hdr(m.b, VHU_HDR_SIZE, &h, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_REPLY_FLAG);
    for (unsigned bit = 4; bit < 32; bit++) {
        put32(m.b + 4, VHU_VERSION | (1u << bit));
        ck_assert_int_eq(vhu_parse_hdr(m.b, VHU_HDR_SIZE, &h, &e), -EINVAL);
        ck_assert_int_eq(e, VHU_E_FLAGS);
    }
    put32(m.b + 4, VHU_VERSION);
    put32(m.b + 8, VHU_MAX_PAYLOAD + 1);
    ck_assert_int_eq(vhu_parse_hdr(m.b, VHU_HDR_SIZE, &h, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_TOO_BIG);
    put32(m.b + 8, 0xffffffffu);
    ck_assert_int_eq(vhu_parse_hdr(m.b, VHU_HDR_SIZE, &h, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_TOO_BIG);
    put32(m.b + 8, VHU_MAX_PAYLOAD);
    ck_assert_int_eq(vhu_parse_hdr(m.b, VHU_HDR_SIZE, &h, &e), 0);
}
END_TEST

START_TEST(msg_rechecks_header)
{
    /* vhu_parse_msg must not trust a header that skipped vhu_parse_hdr. */
    struct vhu_hdr h = { VHU_GET_FEATURES, 0, 0 };
    struct vhu_msg m;
    enum vhu_err e;
    ck_assert_int_eq(vhu_parse_msg(&h, NULL, 0, 0, NQ, &m, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_VERSION);
    h.flags = VHU_VERSION | VHU_FLAG_REPLY;
    ck_assert_int_eq(vhu_parse_msg(&h, NULL, 0, 0, NQ, &m, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_REPLY_FLAG);
    h.flags = VHU_VERSION | 0x100;
    ck_assert_int_eq(vhu_parse_msg(&h, NULL, 0, 0, NQ, &m, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_FLAGS);
    h.flags = VHU_VERSION;
    h.size = 9999;
    ck_assert_int_eq(vhu_parse_msg(&h, NULL, 0, 0, NQ, &m, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_TOO_BIG);
    h.size = 8;     /* header says 8, 4 given */
    uint8_t p[8] = { 0 };
    h.request = VHU_SET_FEATURES;
    ck_assert_int_eq(vhu_parse_msg(&h, p, 4, 0, NQ, &m, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_SIZE);
    ck_assert_int_eq(vhu_parse_msg(&h, NULL, 8, 0, NQ, &m, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_SIZE);
    h.size = 0;
    h.request = VHU_GET_FEATURES;
    ck_assert_int_eq(vhu_parse_msg(&h, NULL, 0, VHU_MAX_FDS + 1, NQ, &m, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_FDS);
}
END_TEST

START_TEST(unknown_and_unsupported)
{
    struct mb m;
    struct vhu_msg msg;
    enum vhu_err e;
    static const uint32_t unknown[] = { 0, VHU_REQUEST_MAX, 1000, 0xffffffffu };
    for (unsigned i = 0; i < 4; i++) {
        mb_init(&m, unknown[i], VHU_VERSION);
        ck_assert_int_eq(parse(&m, 0, &msg, &e), -EINVAL);
        ck_assert_int_eq(e, VHU_E_UNKNOWN);
    }
    /* Known, not implemented: -ENOTSUP with the request and fds reported. */
    mb_init(&m, VHU_SET_LOG_FD, VHU_VERSION | VHU_FLAG_NEED_REPLY);
    ck_assert_int_eq(parse(&m, 1, &msg, &e), -ENOTSUP);
    ck_assert_uint_eq(msg.request, VHU_SET_LOG_FD);
    ck_assert_uint_eq(msg.nfds, 1);
    ck_assert(msg.need_reply);
    ck_assert_str_eq(vhu_request_name(VHU_SET_LOG_FD), "SET_LOG_FD");
    ck_assert_str_eq(vhu_request_name(0), "UNKNOWN");
    ck_assert_str_eq(vhu_request_name(12345), "UNKNOWN");
}
END_TEST

START_TEST(no_payload_requests)
{
    static const uint32_t reqs[] = { VHU_GET_FEATURES, VHU_SET_OWNER, VHU_RESET_OWNER,
                                     VHU_GET_PROTOCOL_FEATURES, VHU_GET_QUEUE_NUM,
                                     VHU_RESET_DEVICE };
    for (unsigned i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
        struct mb m;
        struct vhu_msg msg;
        enum vhu_err e;
        mb_init(&m, reqs[i], VHU_VERSION);
        ck_assert_int_eq(parse(&m, 0, &msg, &e), 0);
        ck_assert_uint_eq(msg.request, reqs[i]);
        ck_assert_int_eq(parse(&m, 1, &msg, &e), -EINVAL);
        ck_assert_int_eq(e, VHU_E_FDS);
        mb_u32(&m, 0);
        ck_assert_int_eq(parse(&m, 0, &msg, &e), -EINVAL);
        ck_assert_int_eq(e, VHU_E_SIZE);
    }
}
END_TEST

START_TEST(u64_requests)
{
    struct mb m;
    struct vhu_msg msg;
    enum vhu_err e;
    mb_init(&m, VHU_SET_FEATURES, VHU_VERSION);
    mb_u64(&m, 0x140000000ull);
    ck_assert_int_eq(parse(&m, 0, &msg, &e), 0);
    ck_assert_uint_eq(msg.u.u64, 0x140000000ull);
    ck_assert_int_eq(parse(&m, 2, &msg, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_FDS);
    mb_init(&m, VHU_SET_PROTOCOL_FEATURES, VHU_VERSION);
    mb_u32(&m, 1);
    ck_assert_int_eq(parse(&m, 0, &msg, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_SIZE);
    mb_u64(&m, 1);  /* 12 bytes */
    ck_assert_int_eq(parse(&m, 0, &msg, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_SIZE);
}
END_TEST

static int state_msg(uint32_t req, uint32_t idx, uint32_t num, unsigned nfds,
                     struct vhu_msg *msg, enum vhu_err *e)
{
    struct mb m;
    mb_init(&m, req, VHU_VERSION);
    mb_u32(&m, idx);
    mb_u32(&m, num);
    return parse(&m, nfds, msg, e);
}

START_TEST(vring_state)
{
    struct vhu_msg msg;
    enum vhu_err e;
    ck_assert_int_eq(state_msg(VHU_SET_VRING_NUM, 1, 256, 0, &msg, &e), 0);
    ck_assert_uint_eq(msg.u.state.index, 1);
    ck_assert_uint_eq(msg.u.state.num, 256);
    ck_assert_int_eq(state_msg(VHU_SET_VRING_NUM, 0, 1, 0, &msg, &e), 0);
    ck_assert_int_eq(state_msg(VHU_SET_VRING_NUM, 0, 32768, 0, &msg, &e), 0);
    static const uint32_t bad_num[] = { 0, 3, 100, 65536, 0x80000000u };
    for (unsigned i = 0; i < 5; i++) {
        ck_assert_int_eq(state_msg(VHU_SET_VRING_NUM, 0, bad_num[i], 0, &msg, &e), -EINVAL);
        ck_assert_int_eq(e, VHU_E_NUM);
    }
    ck_assert_int_eq(state_msg(VHU_SET_VRING_BASE, 0, 0xffff, 0, &msg, &e), 0);
    ck_assert_int_eq(state_msg(VHU_SET_VRING_BASE, 0, 0x10000, 0, &msg, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_BASE);
    ck_assert_int_eq(state_msg(VHU_GET_VRING_BASE, 1, 0xdeadbeef, 0, &msg, &e), 0);
    ck_assert_int_eq(state_msg(VHU_SET_VRING_ENABLE, 0, 1, 0, &msg, &e), 0);
    ck_assert_int_eq(state_msg(VHU_SET_VRING_ENABLE, 0, 0, 0, &msg, &e), 0);
    ck_assert_int_eq(state_msg(VHU_SET_VRING_ENABLE, 0, 2, 0, &msg, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_ENABLE);
    /* index limit and fds for every state request */
    static const uint32_t reqs[] = { VHU_SET_VRING_NUM, VHU_SET_VRING_BASE,
                                     VHU_GET_VRING_BASE, VHU_SET_VRING_ENABLE };
    for (unsigned i = 0; i < 4; i++) {
        ck_assert_int_eq(state_msg(reqs[i], NQ, 1, 0, &msg, &e), -EINVAL);
        ck_assert_int_eq(e, VHU_E_INDEX);
        ck_assert_int_eq(state_msg(reqs[i], 0xffffffffu, 1, 0, &msg, &e), -EINVAL);
        ck_assert_int_eq(e, VHU_E_INDEX);
        ck_assert_int_eq(state_msg(reqs[i], 0, 1, 1, &msg, &e), -EINVAL);
        ck_assert_int_eq(e, VHU_E_FDS);
        struct mb m;
        mb_init(&m, reqs[i], VHU_VERSION);
        mb_u32(&m, 0);
        ck_assert_int_eq(parse(&m, 0, &msg, &e), -EINVAL);
        ck_assert_int_eq(e, VHU_E_SIZE);
    }
}
END_TEST

START_TEST(vring_addr)
{
    struct mb m;
    struct vhu_msg msg;
    enum vhu_err e;
    mb_init(&m, VHU_SET_VRING_ADDR, VHU_VERSION);
    mb_u32(&m, 1);
    mb_u32(&m, 0);
    mb_u64(&m, 0x7f0000001000ull);
    mb_u64(&m, 0x7f0000003000ull);
    mb_u64(&m, 0x7f0000002000ull);
    mb_u64(&m, 0);
    ck_assert_int_eq(parse(&m, 0, &msg, &e), 0);
    ck_assert_uint_eq(msg.u.addr.index, 1);
    ck_assert_uint_eq(msg.u.addr.desc_uva, 0x7f0000001000ull);
    ck_assert_uint_eq(msg.u.addr.used_uva, 0x7f0000003000ull);
    ck_assert_uint_eq(msg.u.addr.avail_uva, 0x7f0000002000ull);
    ck_assert_int_eq(parse(&m, 1, &msg, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_FDS);
    put32(m.b + VHU_HDR_SIZE + 4, VHU_VRING_F_LOG);
    ck_assert_int_eq(parse(&m, 0, &msg, &e), 0);
    put32(m.b + VHU_HDR_SIZE + 4, 2);
    ck_assert_int_eq(parse(&m, 0, &msg, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_VRING_FLAGS);
    put32(m.b + VHU_HDR_SIZE + 4, 0);
    put32(m.b + VHU_HDR_SIZE, NQ);
    ck_assert_int_eq(parse(&m, 0, &msg, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_INDEX);
    put32(m.b + VHU_HDR_SIZE, 0);
    m.len = 32;
    ck_assert_int_eq(parse(&m, 0, &msg, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_SIZE);
}
END_TEST

static int fd_msg(uint32_t req, uint64_t word, unsigned nfds, struct vhu_msg *msg,
                  enum vhu_err *e)
{
    struct mb m;
    mb_init(&m, req, VHU_VERSION);
    mb_u64(&m, word);
    return parse(&m, nfds, msg, e);
}

START_TEST(vring_fd_words)
{
    static const uint32_t reqs[] = { VHU_SET_VRING_KICK, VHU_SET_VRING_CALL, VHU_SET_VRING_ERR };
    for (unsigned i = 0; i < 3; i++) {
        struct vhu_msg msg;
        enum vhu_err e;
        ck_assert_int_eq(fd_msg(reqs[i], 1, 1, &msg, &e), 0);
        ck_assert_uint_eq(msg.u.vring_fd.index, 1);
        ck_assert(!msg.u.vring_fd.nofd);
        ck_assert_int_eq(fd_msg(reqs[i], VHU_VRING_NOFD, 0, &msg, &e), 0);
        ck_assert(msg.u.vring_fd.nofd);
        /* fd count must match the NOFD bit */
        ck_assert_int_eq(fd_msg(reqs[i], 0, 0, &msg, &e), -EINVAL);
        ck_assert_int_eq(e, VHU_E_FDS);
        ck_assert_int_eq(fd_msg(reqs[i], 0, 2, &msg, &e), -EINVAL);
        ck_assert_int_eq(e, VHU_E_FDS);
        ck_assert_int_eq(fd_msg(reqs[i], VHU_VRING_NOFD, 1, &msg, &e), -EINVAL);
        ck_assert_int_eq(e, VHU_E_FDS);
        /* reserved bits, index range */
        ck_assert_int_eq(fd_msg(reqs[i], 1ull << 9, 1, &msg, &e), -EINVAL);
        ck_assert_int_eq(e, VHU_E_VRING_FLAGS);
        ck_assert_int_eq(fd_msg(reqs[i], 1ull << 63, 1, &msg, &e), -EINVAL);
        ck_assert_int_eq(e, VHU_E_VRING_FLAGS);
        ck_assert_int_eq(fd_msg(reqs[i], NQ, 1, &msg, &e), -EINVAL);
        ck_assert_int_eq(e, VHU_E_INDEX);
        ck_assert_int_eq(fd_msg(reqs[i], 0xff, 1, &msg, &e), -EINVAL);
        ck_assert_int_eq(e, VHU_E_INDEX);
    }
}
END_TEST

START_TEST(mem_table_ok_and_translate)
{
    struct vhu_region r[2] = {
        { .gpa = 0, .size = 0xf0000, .uva = 0x7f0000000000ull, .mmap_offset = 0 },
        { .gpa = 0x100000, .size = 0xff00000, .uva = 0x7f0000100000ull, .mmap_offset = 0x100000 },
    };
    struct vhu_msg msg;
    enum vhu_err e;
    ck_assert_int_eq(parse(mem_msg(2, r), 2, &msg, &e), 0);
    ck_assert_uint_eq(msg.u.mem.nregions, 2);
    ck_assert_uint_eq(msg.u.mem.r[1].gpa, 0x100000);
    ck_assert_uint_eq(msg.u.mem.r[1].mmap_offset, 0x100000);
    uint64_t gpa = 0;
    ck_assert_int_eq(vhu_uva_to_gpa(&msg.u.mem, 0x7f0000100000ull + 0x1234, 16, &gpa), 0);
    ck_assert_uint_eq(gpa, 0x101234);
    ck_assert_int_eq(vhu_uva_to_gpa(&msg.u.mem, 0x7f0000000000ull, 0xf0000, &gpa), 0);
    ck_assert_uint_eq(gpa, 0);
    /* straddles the end of region 0 / outside / overflow */
    ck_assert_int_eq(vhu_uva_to_gpa(&msg.u.mem, 0x7f0000000000ull + 0xeffff, 2, &gpa), -EFAULT);
    ck_assert_int_eq(vhu_uva_to_gpa(&msg.u.mem, 0x1000, 1, &gpa), -EFAULT);
    ck_assert_int_eq(vhu_uva_to_gpa(&msg.u.mem, ~0ull, 2, &gpa), -EFAULT);
    /* zero regions is a valid (empty) table */
    ck_assert_int_eq(parse(mem_msg(0, r), 0, &msg, &e), 0);
    ck_assert_int_eq(vhu_uva_to_gpa(&msg.u.mem, 0x7f0000000000ull, 1, &gpa), -EFAULT);
}
END_TEST

START_TEST(mem_table_malformed)
{
    struct vhu_region r[VHU_MAX_REGIONS + 1];
    struct vhu_msg msg;
    enum vhu_err e;
    for (unsigned i = 0; i <= VHU_MAX_REGIONS; i++)
        r[i] = (struct vhu_region){ .gpa = 0x100000ull * i, .size = 0x1000,
                                    .uva = 0x10000000ull + 0x100000ull * i };
    ck_assert_int_eq(parse(mem_msg(VHU_MAX_REGIONS, r), VHU_MAX_REGIONS, &msg, &e), 0);
    /* fds must match regions */
    ck_assert_int_eq(parse(mem_msg(2, r), 1, &msg, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_FDS);
    ck_assert_int_eq(parse(mem_msg(2, r), 3, &msg, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_FDS);
    /* too many regions (the count alone decides, before the size) */
    struct mb *m = mem_msg(2, r);
    put32(m->b + VHU_HDR_SIZE, VHU_MAX_REGIONS + 1);
    ck_assert_int_eq(parse(m, 2, &msg, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_NREGIONS);
    put32(m->b + VHU_HDR_SIZE, 0xffffffffu);
    ck_assert_int_eq(parse(m, 2, &msg, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_NREGIONS);
    /* count disagrees with the payload size */
    m = mem_msg(2, r);
    put32(m->b + VHU_HDR_SIZE, 3);
    ck_assert_int_eq(parse(m, 3, &msg, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_SIZE);
    m = mem_msg(0, r);
    m->len = 4;
    ck_assert_int_eq(parse(m, 0, &msg, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_SIZE);
    /* empty region, overflowing gpa / uva / mmap offset */
    struct vhu_region b = r[0];
    b.size = 0;
    ck_assert_int_eq(parse(mem_msg(1, &b), 1, &msg, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_REGION);
    b = r[0]; b.gpa = ~0ull - 0x10;
    ck_assert_int_eq(parse(mem_msg(1, &b), 1, &msg, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_REGION);
    b = r[0]; b.uva = ~0ull - 0x10;
    ck_assert_int_eq(parse(mem_msg(1, &b), 1, &msg, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_REGION);
    b = r[0]; b.mmap_offset = ~0ull;
    ck_assert_int_eq(parse(mem_msg(1, &b), 1, &msg, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_REGION);
    /* overlaps in guest-physical or in user-virtual space */
    struct vhu_region o[2] = { r[0], r[1] };
    o[1].gpa = o[0].gpa + 0xfff;
    ck_assert_int_eq(parse(mem_msg(2, o), 2, &msg, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_OVERLAP);
    o[1] = r[1];
    o[1].uva = o[0].uva;
    ck_assert_int_eq(parse(mem_msg(2, o), 2, &msg, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_OVERLAP);
    /* adjacent is fine */
    o[1] = r[1];
    o[1].gpa = o[0].gpa + o[0].size;
    o[1].uva = o[0].uva + o[0].size;
    ck_assert_int_eq(parse(mem_msg(2, o), 2, &msg, &e), 0);
}
END_TEST

static int cfg_msg(uint32_t req, uint32_t off, uint32_t size, uint32_t paylen,
                   struct vhu_msg *msg, enum vhu_err *e)
{
    struct mb m;
    mb_init(&m, req, VHU_VERSION);
    mb_u32(&m, off);
    mb_u32(&m, size);
    mb_u32(&m, 0);
    for (uint32_t i = 0; i < paylen; i++)
        m.b[VHU_HDR_SIZE + m.len++] = (uint8_t)i;
    return parse(&m, 0, msg, e);
}

START_TEST(config_requests)
{
    struct vhu_msg msg;
    enum vhu_err e;
    ck_assert_int_eq(cfg_msg(VHU_GET_CONFIG, 0, 60, 60, &msg, &e), 0);
    ck_assert_uint_eq(msg.u.config.size, 60);
    ck_assert_int_eq(cfg_msg(VHU_SET_CONFIG, 32, 1, 1, &msg, &e), 0);
    ck_assert_uint_eq(msg.u.config.offset, 32);
    ck_assert_uint_eq(msg.u.config.data[0], 0);
    ck_assert_int_eq(cfg_msg(VHU_GET_CONFIG, 0, VHU_MAX_CONFIG, VHU_MAX_CONFIG, &msg, &e), 0);
    ck_assert_int_eq(cfg_msg(VHU_GET_CONFIG, 0, 0, 0, &msg, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_CONFIG_SIZE);
    ck_assert_int_eq(cfg_msg(VHU_GET_CONFIG, 0, VHU_MAX_CONFIG + 1, 0, &msg, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_CONFIG_SIZE);
    ck_assert_int_eq(cfg_msg(VHU_GET_CONFIG, 200, 100, 100, &msg, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_CONFIG_SIZE);
    ck_assert_int_eq(cfg_msg(VHU_GET_CONFIG, 0xffffffffu, 2, 2, &msg, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_CONFIG_SIZE);
    ck_assert_int_eq(cfg_msg(VHU_GET_CONFIG, 0, 60, 59, &msg, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_SIZE);
    ck_assert_int_eq(cfg_msg(VHU_GET_CONFIG, 0, 4, 5, &msg, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_SIZE);
    struct mb m;
    mb_init(&m, VHU_GET_CONFIG, VHU_VERSION);
    mb_u64(&m, 0);
    ck_assert_int_eq(parse(&m, 0, &msg, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_SIZE);
    ck_assert_int_eq(cfg_msg(VHU_GET_CONFIG, 0, 4, 4, &msg, &e), 0);
}
END_TEST

START_TEST(replies)
{
    uint8_t buf[VHU_HDR_SIZE + 12 + VHU_MAX_CONFIG];
    ck_assert_int_eq(vhu_reply_u64(buf, sizeof buf, VHU_GET_FEATURES, 0x123456789ull), 20);
    ck_assert_uint_eq(get32(buf), VHU_GET_FEATURES);
    ck_assert_uint_eq(get32(buf + 4), VHU_VERSION | VHU_FLAG_REPLY);
    ck_assert_uint_eq(get32(buf + 8), 8);
    ck_assert_uint_eq(get64(buf + 12), 0x123456789ull);
    ck_assert_int_eq(vhu_reply_u64(buf, 19, VHU_GET_FEATURES, 1), -ENOBUFS);
    ck_assert_int_eq(vhu_reply_state(buf, sizeof buf, VHU_GET_VRING_BASE, 1, 77), 20);
    ck_assert_uint_eq(get32(buf + 12), 1);
    ck_assert_uint_eq(get32(buf + 16), 77);
    ck_assert_int_eq(vhu_reply_state(buf, 10, VHU_GET_VRING_BASE, 1, 77), -ENOBUFS);
    uint8_t cfg[60];
    for (unsigned i = 0; i < sizeof cfg; i++)
        cfg[i] = (uint8_t)(i * 3);
    ck_assert_int_eq(vhu_reply_config(buf, sizeof buf, 0, 60, 0, cfg), 12 + 12 + 60);
    ck_assert_uint_eq(get32(buf), VHU_GET_CONFIG);
    ck_assert_uint_eq(get32(buf + 8), 72);
    ck_assert_uint_eq(get32(buf + 16), 60);
    ck_assert_int_eq(memcmp(buf + 24, cfg, 60), 0);
    ck_assert_int_eq(vhu_reply_config(buf, sizeof buf, 0, VHU_MAX_CONFIG + 1, 0, cfg), -EINVAL);
    ck_assert_int_eq(vhu_reply_config(buf, 30, 0, 60, 0, cfg), -ENOBUFS);
    /* A reply is not a valid request. */
    struct vhu_hdr h;
    enum vhu_err e;
    vhu_reply_u64(buf, sizeof buf, VHU_GET_FEATURES, 1);
    ck_assert_int_eq(vhu_parse_hdr(buf, 12, &h, &e), -EINVAL);
    ck_assert_int_eq(e, VHU_E_REPLY_FLAG);
}
END_TEST

START_TEST(strerror_total)
{
    for (int i = 0; i < VHU_E__COUNT; i++) {
        ck_assert_ptr_nonnull(vhu_strerror((enum vhu_err)i));
        ck_assert_str_ne(vhu_strerror((enum vhu_err)i), "unknown vhost-user error");
    }
    ck_assert_str_eq(vhu_strerror(VHU_E__COUNT), "unknown vhost-user error");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("vhost_user_msg");
    TCase *t = tcase_create("msg");
    tcase_add_test(t, header_ok_and_flags);
    tcase_add_test(t, header_malformed);
    tcase_add_test(t, msg_rechecks_header);
    tcase_add_test(t, unknown_and_unsupported);
    tcase_add_test(t, no_payload_requests);
    tcase_add_test(t, u64_requests);
    tcase_add_test(t, vring_state);
    tcase_add_test(t, vring_addr);
    tcase_add_test(t, vring_fd_words);
    tcase_add_test(t, mem_table_ok_and_translate);
    tcase_add_test(t, mem_table_malformed);
    tcase_add_test(t, config_requests);
    tcase_add_test(t, replies);
    tcase_add_test(t, strerror_total);
    suite_add_tcase(s, t);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
