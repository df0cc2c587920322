/* virtio-blk driven through a real virtqueue in fake guest memory, backed by
 * a temporary file, with the I/O engine doing real I/O. Every test runs with
 * the io_uring engine (loop index 0; skipped loudly if the host refuses
 * io_uring) and the thread pool (index 1). */
#include <check.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef MOAT_HAVE_URING
#include <liburing.h>
#endif

#include "devices/blk/blk_uring.h"
#include "devices/blk/virtio_blk.h"
#include "devices/blk/overlay_disk.h"
#include "devices/blk/virtio_blk_req.h"
#include "devices/virtio/ratelimit.h"
#include "devices/virtio/virtq.h"
#include "vmm/base/gmem.h"
#include "vmm/base/scfilter.h"

#define MEM_SIZE   (4u << 20)
#define QSIZE      128u
#define DESC_GPA   0x1000u
#define AVAIL_GPA  0x2000u
#define USED_GPA   0x3000u
#define HDR_GPA    0x10000u     /* per-head: HDR_GPA + 32 * head */
#define STAT_GPA   0x14000u     /* per-head: one byte */
#define DATA_GPA   0x100000u    /* data buffers */
#define DISK_SECTORS 256u

struct rig {
    uint8_t *ram;
    struct gmem mem;
    struct virtq q;
    struct virtio_dev_env env;
    struct virtio_blk *blk;
    char path[64];
    uint16_t avail_idx, next_desc;
    _Atomic unsigned notifies, resets, cfg_changes;
    unsigned reset_q;   /* the queue the last needs_reset named */
    bool started;
    int kfd;
};

static void on_notify(void *o, unsigned q) { (void)q; atomic_fetch_add(&((struct rig *)o)->notifies, 1); }
static void on_reset(void *o, unsigned q) { ((struct rig *)o)->reset_q = q; atomic_fetch_add(&((struct rig *)o)->resets, 1); }
static void on_cfg(void *o) { atomic_fetch_add(&((struct rig *)o)->cfg_changes, 1); }

static enum blk_engine_kind engine_for(int i) { return i == 0 ? BLK_ENGINE_URING : BLK_ENGINE_POOL; }

/* Skip (loudly) the io_uring half where the host has none. */
static bool engine_ok(int i)
{
    char why[160];
    if (i == 0 && !blk_uring_available(why, sizeof why)) {
        printf("SKIPPED: test_virtio_blk io_uring variant: %s\n", why);
        return false;
    }
    return true;
}

static uint8_t pattern(uint64_t byte_off) { return (uint8_t)(byte_off * 7 + (byte_off >> 9) * 13 + 1); }

/* A temporary file of bytes bytes: byte i is pattern(i), or with salt >= 0
 * (a second file) i * 3 + salt. Its name into path. */
static void write_file(char *path, size_t plen, uint64_t bytes, int salt)
{
    snprintf(path, plen, "/tmp/moat-vblk-XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    uint8_t *buf = malloc(bytes);
    for (uint64_t i = 0; i < bytes; i++)
        buf[i] = salt < 0 ? pattern(i) : (uint8_t)(i * 3 + (uint64_t)salt);
    ck_assert_int_eq(pwrite(fd, buf, bytes, 0), (ssize_t)bytes);
    free(buf);
    close(fd);
}

static void make_file(struct rig *r, uint64_t bytes) { write_file(r->path, sizeof r->path, bytes, -1); }

static void rig_queue(struct rig *r, uint64_t features)
{
    ck_assert_int_eq(virtq_init(&r->q, QSIZE), 0);
    r->q.size = QSIZE;
    r->q.desc = DESC_GPA;
    r->q.avail = AVAIL_GPA;
    r->q.used = USED_GPA;
    virtq_set_features(&r->q, features);
    ck_assert_int_eq(virtq_enable(&r->q, &r->mem), 0);
    r->avail_idx = 0;
    r->next_desc = 0;
    memset(r->ram + AVAIL_GPA, 0, 0x1000);
    memset(r->ram + USED_GPA, 0, 0x1000);
}

static int rig_start(struct rig *r, uint64_t features)
{
    rig_queue(r, features);
    int sc = r->env.seccomp;        /* a test's filter mode, kept */
    memset(&r->env, 0, sizeof r->env);
    r->env.seccomp = sc;
    r->env.mem = &r->mem;
    r->env.queues = &r->q;
    r->env.nqueues = 1;
    r->env.features = features;
    r->env.kick_fd[0] = r->kfd;
    r->env.notify_used = on_notify;
    r->env.needs_reset = on_reset;
    r->env.config_changed = on_cfg;
    r->env.opaque = r;
    int e = virtio_blk_ops.start(r->blk, &r->env);
    r->started = e == 0;
    return e;
}

static const struct ratelimit_cfg *rig_limit;     /* the next rig_init's limiter */

static void rig_init(struct rig *r, int loop, bool ro, const char *id, uint64_t file_bytes)
{
    memset(r, 0, sizeof *r);
    r->ram = calloc(1, MEM_SIZE);
    r->mem.n = 1;
    r->mem.r[0] = (struct gmem_region){ 0, MEM_SIZE, r->ram };
    make_file(r, file_bytes);
    r->kfd = eventfd(0, EFD_CLOEXEC);
    struct virtio_blk_opts o = { .path = r->path, .read_only = ro, .id = id,
                                 .engine = engine_for(loop), .name = "vtest", .limit = rig_limit };
    char why[200];
    ck_assert_int_eq(virtio_blk_create(&o, &r->blk, why, sizeof why), 0);
    uint64_t f = virtio_blk_ops.features(r->blk) | (1ull << VIRTIO_F_VERSION_1);
    ck_assert_int_eq(rig_start(r, f), 0);
}

static void rig_fini(struct rig *r)
{
    virtio_blk_ops.destroy(r->blk);
    close(r->kfd);
    unlink(r->path);
    free(r->ram);
}

static void put_desc(struct rig *r, uint16_t i, uint64_t addr, uint32_t len, uint16_t flags, uint16_t next)
{
    uint8_t *d = r->ram + DESC_GPA + 16u * i;
    uint64_t a = htole64(addr); uint32_t l = htole32(len); uint16_t f = htole16(flags), n = htole16(next);
    memcpy(d, &a, 8); memcpy(d + 8, &l, 4); memcpy(d + 12, &f, 2); memcpy(d + 14, &n, 2);
}

static uint16_t ld16(struct rig *r, uint64_t gpa) { uint16_t v; memcpy(&v, r->ram + gpa, 2); return le16toh(v); }
static uint32_t ld32(struct rig *r, uint64_t gpa) { uint32_t v; memcpy(&v, r->ram + gpa, 4); return le32toh(v); }

static void make_avail(struct rig *r, uint16_t head)
{
    uint16_t v = htole16(head);
    memcpy(r->ram + AVAIL_GPA + 4 + 2u * (r->avail_idx % QSIZE), &v, 2);
    r->avail_idx++;
    __atomic_thread_fence(__ATOMIC_RELEASE);
    v = htole16(r->avail_idx);
    memcpy(r->ram + AVAIL_GPA + 2, &v, 2);
}

static void kick(struct rig *r)
{
    uint64_t one = 1;
    ck_assert_int_eq(write(r->env.kick_fd[0], &one, 8), 8);
}

/* Wait until used->idx reaches want (5 s cap). */
static void wait_used(struct rig *r, uint16_t want)
{
    for (int i = 0; i < 5000; i++) {
        if (__atomic_load_n((uint16_t *)(r->ram + USED_GPA + 2), __ATOMIC_ACQUIRE) == want)
            return;
        usleep(1000);
    }
    ck_abort_msg("used idx %u, want %u", ld16(r, USED_GPA + 2), want);
}

/* Used element for used slot i. */
static void used_elem(struct rig *r, uint16_t i, uint32_t *id, uint32_t *len)
{
    *id = ld32(r, USED_GPA + 4 + 8u * (i % QSIZE));
    *len = ld32(r, USED_GPA + 8 + 8u * (i % QSIZE));
}

/* A standard request: header, data split in nseg pieces (0 = none), status.
 * Returns the head. Descriptors are taken from r->next_desc on. */
static uint16_t req(struct rig *r, uint32_t type, uint64_t sector, uint64_t data_gpa,
                    uint32_t data_len, unsigned nseg, bool data_writable)
{
    uint16_t head = r->next_desc;
    uint16_t d = head;
    uint64_t hdr = HDR_GPA + 32u * head;
    uint32_t t = htole32(type), z = 0; uint64_t s = htole64(sector);
    memcpy(r->ram + hdr, &t, 4); memcpy(r->ram + hdr + 4, &z, 4); memcpy(r->ram + hdr + 8, &s, 8);
    r->ram[STAT_GPA + head] = 0xee;
    put_desc(r, d, hdr, 16, VIRTQ_DESC_F_NEXT, (uint16_t)(d + 1));
    d++;
    for (unsigned i = 0; i < nseg; i++) {
        uint32_t piece = data_len / nseg, off = piece * i;
        if (i == nseg - 1)
            piece = data_len - off;
        put_desc(r, d, data_gpa + off, piece,
                 VIRTQ_DESC_F_NEXT | (data_writable ? VIRTQ_DESC_F_WRITE : 0), (uint16_t)(d + 1));
        d++;
    }
    put_desc(r, d, STAT_GPA + head, 1, VIRTQ_DESC_F_WRITE, 0);
    d++;
    r->next_desc = d % QSIZE;
    make_avail(r, head);
    return head;
}

static void read_file_at(struct rig *r, uint64_t off, void *buf, size_t len)
{
    int fd = open(r->path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pread(fd, buf, len, (off_t)off), (ssize_t)len);
    close(fd);
}

START_TEST(read_write_flush)
{
    if (!engine_ok(_i)) return;
    struct rig r;
    rig_init(&r, _i, false, NULL, DISK_SECTORS * 512);
    /* Read sectors 3..10 in three segments. */
    uint16_t h = req(&r, VIRTIO_BLK_T_IN, 3, DATA_GPA, 8 * 512, 3, true);
    kick(&r);
    wait_used(&r, 1);
    uint32_t id, len;
    used_elem(&r, 0, &id, &len);
    ck_assert_uint_eq(id, h);
    ck_assert_uint_eq(len, 8 * 512 + 1);
    ck_assert_uint_eq(r.ram[STAT_GPA + h], VIRTIO_BLK_S_OK);
    for (uint32_t i = 0; i < 8 * 512; i++)
        ck_assert_uint_eq(r.ram[DATA_GPA + i], pattern(3 * 512 + i));
    /* Write 4 sectors at 100 with a new pattern, then flush. */
    for (uint32_t i = 0; i < 4 * 512; i++)
        r.ram[DATA_GPA + 0x10000 + i] = (uint8_t)(i ^ 0x5a);
    uint16_t w = req(&r, VIRTIO_BLK_T_OUT, 100, DATA_GPA + 0x10000, 4 * 512, 2, false);
    uint16_t f = req(&r, VIRTIO_BLK_T_FLUSH, 0, 0, 0, 0, false);
    kick(&r);
    wait_used(&r, 3);
    ck_assert_uint_eq(r.ram[STAT_GPA + w], VIRTIO_BLK_S_OK);
    ck_assert_uint_eq(r.ram[STAT_GPA + f], VIRTIO_BLK_S_OK);
    uint8_t buf[4 * 512];
    read_file_at(&r, 100 * 512, buf, sizeof buf);
    for (uint32_t i = 0; i < sizeof buf; i++)
        ck_assert_uint_eq(buf[i], (uint8_t)(i ^ 0x5a));
    /* Neighbours untouched. */
    read_file_at(&r, 99 * 512, buf, 512);
    for (uint32_t i = 0; i < 512; i++)
        ck_assert_uint_eq(buf[i], pattern(99 * 512 + i));
    struct virtio_blk_stats st;
    virtio_blk_get_stats(r.blk, &st);
    ck_assert_uint_eq(st.completed, 3);
    ck_assert_uint_eq(st.failed, 0);
    ck_assert_int_eq(st.engine, engine_for(_i));
    ck_assert_uint_ge(atomic_load(&r.notifies), 1);
    rig_fini(&r);
}
END_TEST

START_TEST(get_id_and_config)
{
    if (!engine_ok(_i)) return;
    struct rig r;
    /* Not a multiple of 512: the tail is not addressable. */
    rig_init(&r, _i, false, "moat-disk-7", DISK_SECTORS * 512 + 100);
    uint8_t c[8];
    virtio_blk_ops.config_read(r.blk, 0, c, 8);
    uint64_t cap; memcpy(&cap, c, 8);
    ck_assert_uint_eq(le64toh(cap), DISK_SECTORS);
    ck_assert_uint_eq(virtio_blk_capacity(r.blk), DISK_SECTORS);
    virtio_blk_ops.config_read(r.blk, 12, c, 4);
    ck_assert_uint_eq(ld32(&(struct rig){ .ram = c }, 0), VIRTIO_BLK_SEG_MAX);
    virtio_blk_ops.config_read(r.blk, 0xf00, c, 4);     /* beyond: zeroes */
    ck_assert_uint_eq(c[0] | c[1] | c[2] | c[3], 0);
    ck_assert_uint_eq(virtio_blk_ops.config_size(r.blk), VIRTIO_BLK_CONFIG_SIZE);

    memset(r.ram + DATA_GPA, 0xcc, 64);
    uint16_t h = req(&r, VIRTIO_BLK_T_GET_ID, 0, DATA_GPA, VIRTIO_BLK_ID_BYTES, 1, true);
    /* Last sector readable, one past it is not. */
    uint16_t ok = req(&r, VIRTIO_BLK_T_IN, DISK_SECTORS - 1, DATA_GPA + 0x1000, 512, 1, true);
    uint16_t bad = req(&r, VIRTIO_BLK_T_IN, DISK_SECTORS, DATA_GPA + 0x2000, 512, 1, true);
    kick(&r);
    wait_used(&r, 3);
    ck_assert_uint_eq(r.ram[STAT_GPA + h], VIRTIO_BLK_S_OK);
    ck_assert_mem_eq(r.ram + DATA_GPA, "moat-disk-7\0\0\0\0\0\0\0\0\0", VIRTIO_BLK_ID_BYTES);
    ck_assert_uint_eq(r.ram[DATA_GPA + VIRTIO_BLK_ID_BYTES], 0xcc);
    ck_assert_uint_eq(r.ram[STAT_GPA + ok], VIRTIO_BLK_S_OK);
    ck_assert_uint_eq(r.ram[DATA_GPA + 0x1000], pattern((DISK_SECTORS - 1) * 512));
    ck_assert_uint_eq(r.ram[STAT_GPA + bad], VIRTIO_BLK_S_IOERR);
    rig_fini(&r);
}
END_TEST

START_TEST(read_only_drive)
{
    if (!engine_ok(_i)) return;
    struct rig r;
    rig_init(&r, _i, true, NULL, DISK_SECTORS * 512);
    uint64_t f = virtio_blk_ops.features(r.blk);
    ck_assert(f & (1ull << VIRTIO_BLK_F_RO));
    ck_assert(!(f & (1ull << VIRTIO_BLK_F_DISCARD)));
    struct stat before, after;
    ck_assert_int_eq(stat(r.path, &before), 0);
    memset(r.ram + DATA_GPA, 0x77, 512);
    uint16_t w = req(&r, VIRTIO_BLK_T_OUT, 0, DATA_GPA, 512, 1, false);
    uint16_t d = req(&r, VIRTIO_BLK_T_DISCARD, 0, DATA_GPA, 16, 1, false);
    uint16_t rd = req(&r, VIRTIO_BLK_T_IN, 5, DATA_GPA + 0x1000, 512, 1, true);
    uint16_t fl = req(&r, VIRTIO_BLK_T_FLUSH, 0, 0, 0, 0, false);
    kick(&r);
    wait_used(&r, 4);
    ck_assert_uint_eq(r.ram[STAT_GPA + w], VIRTIO_BLK_S_IOERR);
    ck_assert_uint_eq(r.ram[STAT_GPA + d], VIRTIO_BLK_S_UNSUPP);
    ck_assert_uint_eq(r.ram[STAT_GPA + rd], VIRTIO_BLK_S_OK);
    ck_assert_uint_eq(r.ram[STAT_GPA + fl], VIRTIO_BLK_S_OK);
    ck_assert_uint_eq(r.ram[DATA_GPA + 0x1000], pattern(5 * 512));
    uint8_t buf[512];
    read_file_at(&r, 0, buf, 512);
    for (int i = 0; i < 512; i++)
        ck_assert_uint_eq(buf[i], pattern((uint64_t)i));
    ck_assert_int_eq(stat(r.path, &after), 0);
    ck_assert_int_eq(after.st_size, before.st_size);
    rig_fini(&r);
}
END_TEST

START_TEST(bad_chains_fail_alone)
{
    if (!engine_ok(_i)) return;
    struct rig r;
    rig_init(&r, _i, false, NULL, DISK_SECTORS * 512);
    /* 1: header only, no status byte: used length 0. */
    uint16_t h1 = r.next_desc;
    put_desc(&r, h1, HDR_GPA, 16, 0, 0);
    make_avail(&r, h1);
    /* 2: next out of range. */
    uint16_t h2 = (uint16_t)(h1 + 1);
    put_desc(&r, h2, HDR_GPA, 16, VIRTQ_DESC_F_NEXT, 500);
    make_avail(&r, h2);
    /* 3: a buffer outside guest RAM. */
    uint16_t h3 = (uint16_t)(h1 + 2);
    put_desc(&r, h3, HDR_GPA, 16, VIRTQ_DESC_F_NEXT, (uint16_t)(h3 + 1));
    put_desc(&r, (uint16_t)(h3 + 1), MEM_SIZE - 8, 512, VIRTQ_DESC_F_NEXT | VIRTQ_DESC_F_WRITE, (uint16_t)(h3 + 2));
    put_desc(&r, (uint16_t)(h3 + 2), STAT_GPA, 1, VIRTQ_DESC_F_WRITE, 0);
    make_avail(&r, h3);
    /* 4: a loop. */
    uint16_t h4 = (uint16_t)(h1 + 5);
    put_desc(&r, h4, HDR_GPA, 16, VIRTQ_DESC_F_NEXT, h4);
    make_avail(&r, h4);
    /* 5: unknown type -> UNSUPP; 6: data length not a sector multiple -> IOERR. */
    r.next_desc = (uint16_t)(h1 + 6);
    uint16_t h5 = req(&r, 99, 0, 0, 0, 0, false);
    uint16_t h6 = req(&r, VIRTIO_BLK_T_IN, 0, DATA_GPA, 100, 1, true);
    /* 7: a good read afterwards still works. */
    uint16_t h7 = req(&r, VIRTIO_BLK_T_IN, 1, DATA_GPA, 512, 1, true);
    kick(&r);
    wait_used(&r, 7);
    uint32_t id, len;
    used_elem(&r, 0, &id, &len); ck_assert_uint_eq(id, h1); ck_assert_uint_eq(len, 0);
    used_elem(&r, 1, &id, &len); ck_assert_uint_eq(id, h2); ck_assert_uint_eq(len, 0);
    used_elem(&r, 2, &id, &len); ck_assert_uint_eq(id, h3); ck_assert_uint_eq(len, 0);
    used_elem(&r, 3, &id, &len); ck_assert_uint_eq(id, h4); ck_assert_uint_eq(len, 0);
    ck_assert_uint_eq(r.ram[STAT_GPA + h5], VIRTIO_BLK_S_UNSUPP);
    ck_assert_uint_eq(r.ram[STAT_GPA + h6], VIRTIO_BLK_S_IOERR);
    ck_assert_uint_eq(r.ram[STAT_GPA + h7], VIRTIO_BLK_S_OK);
    ck_assert_uint_eq(r.ram[DATA_GPA], pattern(512));
    struct virtio_blk_stats st;
    virtio_blk_get_stats(r.blk, &st);
    ck_assert_uint_eq(st.bad_chains, 6);
    ck_assert_uint_eq(st.completed, 1);
    ck_assert_uint_eq(atomic_load(&r.resets), 0);
    rig_fini(&r);
}
END_TEST

/* A transport offering a ring larger than the device's slot array (the
 * vhost-user server's queue_max option can) is refused at start. */
START_TEST(oversized_ring_refused)
{
    if (!engine_ok(_i)) return;
    struct rig r;
    rig_init(&r, _i, false, NULL, DISK_SECTORS * 512);
    virtio_blk_ops.stop(r.blk);
    r.q.size = VIRTIO_BLK_QUEUE_MAX * 2;
    ck_assert_int_eq(virtio_blk_ops.start(r.blk, &r.env), -EINVAL);
    r.q.size = QSIZE;
    ck_assert_int_eq(virtio_blk_ops.start(r.blk, &r.env), 0);
    rig_fini(&r);
}
END_TEST

START_TEST(broken_queue_needs_reset)
{
    if (!engine_ok(_i)) return;
    struct rig r;
    rig_init(&r, _i, false, NULL, DISK_SECTORS * 512);
    /* avail->idx jumps by more than the queue size: head unknown. */
    uint16_t v = htole16(QSIZE + 5);
    memcpy(r.ram + AVAIL_GPA + 2, &v, 2);
    kick(&r);
    for (int i = 0; i < 5000 && atomic_load(&r.resets) == 0; i++)
        usleep(1000);
    ck_assert_uint_eq(atomic_load(&r.resets), 1);
    ck_assert_uint_eq(r.reset_q, 0);
    ck_assert_uint_eq(ld16(&r, USED_GPA + 2), 0);
    /* The device recovers after a reset (stop, fresh queue, start). */
    virtio_blk_ops.stop(r.blk);
    virtio_blk_ops.stop(r.blk);     /* idempotent */
    ck_assert_int_eq(rig_start(&r, r.env.features), 0);
    uint16_t h = req(&r, VIRTIO_BLK_T_IN, 2, DATA_GPA, 512, 1, true);
    kick(&r);
    wait_used(&r, 1);
    ck_assert_uint_eq(r.ram[STAT_GPA + h], VIRTIO_BLK_S_OK);
    ck_assert_uint_eq(r.ram[DATA_GPA + 5], pattern(2 * 512 + 5));
    rig_fini(&r);
}
END_TEST

/* The driver makes a head available again while its request is in
 * flight: the first request completes, the copy is dropped, the driver is
 * told (needs reset) and nothing stays in flight, so a snapshot can be
 * taken. (Before, the copy's in-flight count was never given back: stop
 * left inflight at 1 and every snapshot was refused with -EBUSY.) */
START_TEST(head_reused_in_flight)
{
    if (!engine_ok(_i)) return;
    struct rig r;
    rig_init(&r, _i, false, NULL, DISK_SECTORS * 512);
    uint16_t h = req(&r, VIRTIO_BLK_T_IN, 3, DATA_GPA, 512, 1, true);
    make_avail(&r, h);     /* the same head again, in the same kick */
    kick(&r);
    wait_used(&r, 1);
    for (int i = 0; i < 5000 && atomic_load(&r.resets) == 0; i++)
        usleep(1000);
    ck_assert_uint_eq(atomic_load(&r.resets), 1);
    uint32_t id, len;
    used_elem(&r, 0, &id, &len);
    ck_assert_uint_eq(id, h);
    ck_assert_uint_eq(r.ram[STAT_GPA + h], VIRTIO_BLK_S_OK);
    ck_assert_uint_eq(r.ram[DATA_GPA + 7], pattern(3 * 512 + 7));
    virtio_blk_ops.stop(r.blk);
    ck_assert_uint_eq(r.q.inflight, 0);
    ck_assert_uint_eq(r.q.used_idx, r.q.published_idx);
    ck_assert_uint_eq(ld16(&r, USED_GPA + 2), 1);    /* the head once, not twice */
    rig_fini(&r);
}
END_TEST

START_TEST(many_in_flight_and_stop_drains)
{
    if (!engine_ok(_i)) return;
    struct rig r;
    rig_init(&r, _i, false, NULL, DISK_SECTORS * 512);
    /* 40 writes of one sector each (3 descriptors each: 120 <= 128). */
    for (unsigned i = 0; i < 40; i++) {
        memset(r.ram + DATA_GPA + 512u * i, (int)(i + 1), 512);
        req(&r, VIRTIO_BLK_T_OUT, 10 + i, DATA_GPA + 512u * i, 512, 1, false);
    }
    kick(&r);
    /* Stop at once: every request popped must complete and be published
     * (the rest stays in the avail ring)... */
    virtio_blk_ops.stop(r.blk);
    ck_assert_uint_eq(r.q.inflight, 0);
    ck_assert_uint_eq(ld16(&r, USED_GPA + 2), r.q.last_avail_idx);
    /* ... and a restart picks up what was left, without a new kick. */
    ck_assert_int_eq(virtio_blk_ops.start(r.blk, &r.env), 0);
    wait_used(&r, 40);
    virtio_blk_ops.stop(r.blk);
    struct virtio_blk_stats st;
    virtio_blk_get_stats(r.blk, &st);
    ck_assert_uint_eq(st.completed, 40);
    ck_assert_uint_le(st.notifies, st.batches);
    ck_assert_uint_ge(st.max_inflight, 1);
    uint8_t buf[512];
    for (unsigned i = 0; i < 40; i++) {
        read_file_at(&r, (10 + i) * 512ull, buf, 512);
        ck_assert_uint_eq(buf[0], i + 1);
        ck_assert_uint_eq(buf[511], i + 1);
    }
    rig_fini(&r);
}
END_TEST

START_TEST(discard_and_write_zeroes)
{
    if (!engine_ok(_i)) return;
    struct rig r;
    rig_init(&r, _i, false, NULL, DISK_SECTORS * 512);
    uint8_t range[16];
    uint64_t s = htole64(16); uint32_t n = htole32(8), fl = 0;
    memcpy(range, &s, 8); memcpy(range + 8, &n, 4); memcpy(range + 12, &fl, 4);
    memcpy(r.ram + DATA_GPA, range, 16);
    s = htole64(40); n = htole32(3);
    memcpy(range, &s, 8); memcpy(range + 8, &n, 4);
    memcpy(r.ram + DATA_GPA + 16, range, 16);
    uint16_t d = req(&r, VIRTIO_BLK_T_DISCARD, 0, DATA_GPA, 16, 1, false);
    uint16_t z = req(&r, VIRTIO_BLK_T_WRITE_ZEROES, 0, DATA_GPA + 16, 16, 1, false);
    kick(&r);
    wait_used(&r, 2);
    ck_assert_uint_eq(r.ram[STAT_GPA + d], VIRTIO_BLK_S_OK);
    ck_assert_uint_eq(r.ram[STAT_GPA + z], VIRTIO_BLK_S_OK);
    uint8_t buf[8 * 512];
    read_file_at(&r, 16 * 512, buf, sizeof buf);
    for (size_t i = 0; i < sizeof buf; i++)
        ck_assert_uint_eq(buf[i], 0);
    read_file_at(&r, 40 * 512, buf, 3 * 512);
    for (size_t i = 0; i < 3 * 512; i++)
        ck_assert_uint_eq(buf[i], 0);
    read_file_at(&r, 43 * 512, buf, 512);
    ck_assert_uint_eq(buf[0], pattern(43 * 512));
    rig_fini(&r);
}
END_TEST

START_TEST(create_errors)
{
    struct virtio_blk *b = NULL;
    char why[200];
    struct virtio_blk_opts o = { .path = "/nonexistent/moat-disk.img", .engine = engine_for(_i) };
    ck_assert_int_eq(virtio_blk_create(&o, &b, why, sizeof why), -ENOENT);
    ck_assert_ptr_null(b);
    ck_assert(strstr(why, "/nonexistent/moat-disk.img") != NULL);
    o.path = "/tmp";
    ck_assert_int_eq(virtio_blk_create(&o, &b, why, sizeof why), -EISDIR);
    struct rig r;
    memset(&r, 0, sizeof r);
    make_file(&r, 4096);
    o.path = r.path;
    o.id = "this id is longer than twenty bytes";
    ck_assert_int_eq(virtio_blk_create(&o, &b, why, sizeof why), -EINVAL);
    o.id = NULL;
    ck_assert_int_eq(virtio_blk_create(&o, &b, why, sizeof why), 0);
    struct virtio_blk *b2 = NULL;
    ck_assert_int_eq(virtio_blk_create(&o, &b2, why, sizeof why), -EWOULDBLOCK);
    ck_assert(strstr(why, "in use") != NULL);
    virtio_blk_ops.destroy(b);
    ck_assert_int_eq(truncate(r.path, 100), 0);
    ck_assert_int_eq(virtio_blk_create(&o, &b, why, sizeof why), -EINVAL);
    /* An empty file is an empty drive (an orchestrator's placeholder). */
    ck_assert_int_eq(truncate(r.path, 0), 0);
    ck_assert_int_eq(virtio_blk_create(&o, &b, why, sizeof why), 0);
    ck_assert_uint_eq(virtio_blk_capacity(b), 0);
    virtio_blk_ops.destroy(b);
    unlink(r.path);
}
END_TEST

/* Read one sector into DATA_GPA + 0x20000 through the queue: its status. */
static uint8_t read_sector(struct rig *r, uint64_t sector, uint16_t *used)
{
    uint16_t h = req(r, VIRTIO_BLK_T_IN, sector, DATA_GPA + 0x20000, 512, 1, true);
    kick(r);
    wait_used(r, ++*used);
    return r->ram[STAT_GPA + h];
}

static uint64_t config_capacity(struct rig *r)
{
    uint8_t c[8];
    virtio_blk_ops.config_read(r->blk, 0, c, 8);
    uint64_t cap;
    memcpy(&cap, c, 8);
    return le64toh(cap);
}

/* The backing file changed while the device runs (PATCH /drives
 * path_on_host): errors leave the old file; a swap drains, changes
 * capacity, raises a config change, and requests then reach the new file. */
START_TEST(swap_backing_file)
{
    if (!engine_ok(_i)) return;
    struct rig r;
    rig_init(&r, _i, false, NULL, DISK_SECTORS * 512);
    uint16_t used = 0;
    char why[200], p2[64], tiny[64];
    ck_assert_uint_eq(read_sector(&r, 1, &used), VIRTIO_BLK_S_OK);
    ck_assert_uint_eq(r.ram[DATA_GPA + 0x20000], pattern(512));

    /* Errors: the drive stays on its file, nobody is told anything. */
    ck_assert_int_eq(virtio_blk_swap(r.blk, "/nonexistent/x.img", why, sizeof why), -ENOENT);
    ck_assert(strstr(why, "/nonexistent/x.img") != NULL);
    ck_assert_int_eq(virtio_blk_swap(r.blk, "/tmp", why, sizeof why), -EISDIR);
    ck_assert_int_eq(virtio_blk_swap(r.blk, "", why, sizeof why), -EINVAL);
    write_file(tiny, sizeof tiny, 100, 0);
    ck_assert_int_eq(virtio_blk_swap(r.blk, tiny, why, sizeof why), -EINVAL);
    ck_assert(strstr(why, "smaller than") != NULL);
    write_file(p2, sizeof p2, 2 * DISK_SECTORS * 512, 9);
    int holder = open(p2, O_RDONLY);                /* another user of the new file */
    ck_assert_int_eq(flock(holder, LOCK_EX), 0);
    ck_assert_int_eq(virtio_blk_swap(r.blk, p2, why, sizeof why), -EWOULDBLOCK);
    ck_assert(strstr(why, "in use") != NULL);
    close(holder);
    ck_assert_uint_eq(virtio_blk_capacity(r.blk), DISK_SECTORS);
    ck_assert_uint_eq(atomic_load(&r.cfg_changes), 0);
    ck_assert_uint_eq(read_sector(&r, 2, &used), VIRTIO_BLK_S_OK);
    ck_assert_uint_eq(r.ram[DATA_GPA + 0x20000], pattern(1024));

    /* The swap: twice the size, other bytes. */
    ck_assert_int_eq(virtio_blk_swap(r.blk, p2, why, sizeof why), 0);
    ck_assert_uint_eq(virtio_blk_capacity(r.blk), 2 * DISK_SECTORS);
    ck_assert_uint_eq(config_capacity(&r), 2 * DISK_SECTORS);
    ck_assert_uint_eq(atomic_load(&r.cfg_changes), 1);
    ck_assert_uint_eq(read_sector(&r, DISK_SECTORS + 1, &used), VIRTIO_BLK_S_OK);
    for (uint32_t i = 0; i < 512; i++)
        ck_assert_uint_eq(r.ram[DATA_GPA + 0x20000 + i], (uint8_t)(((DISK_SECTORS + 1) * 512 + i) * 3 + 9));
    /* The old file is free again (its lock went with the drive). */
    int old = open(r.path, O_RDWR);
    ck_assert_int_eq(flock(old, LOCK_EX | LOCK_NB), 0);
    close(old);
    /* ... and the new one is the drive's. */
    holder = open(p2, O_RDONLY);
    ck_assert_int_eq(flock(holder, LOCK_SH | LOCK_NB), -1);
    close(holder);

    /* The same file again after it grew: sized anew, no lock conflict. */
    ck_assert_int_eq(truncate(p2, 3 * DISK_SECTORS * 512), 0);
    ck_assert_int_eq(virtio_blk_swap(r.blk, p2, why, sizeof why), 0);
    ck_assert_uint_eq(config_capacity(&r), 3 * DISK_SECTORS);
    ck_assert_uint_eq(atomic_load(&r.cfg_changes), 2);

    /* An empty file (a placeholder given back): capacity 0, every read fails. */
    char empty[64];
    write_file(empty, sizeof empty, 0, 0);
    ck_assert_int_eq(virtio_blk_swap(r.blk, empty, why, sizeof why), 0);
    ck_assert_uint_eq(config_capacity(&r), 0);
    ck_assert_uint_eq(atomic_load(&r.cfg_changes), 3);
    ck_assert_uint_eq(read_sector(&r, 0, &used), VIRTIO_BLK_S_IOERR);
    unlink(empty);

    /* Stopped (a paused VM): swapped now, served from the new file on start. */
    virtio_blk_ops.stop(r.blk);
    ck_assert_int_eq(virtio_blk_swap(r.blk, r.path, why, sizeof why), 0);
    ck_assert_uint_eq(virtio_blk_capacity(r.blk), DISK_SECTORS);
    ck_assert_int_eq(virtio_blk_ops.start(r.blk, &r.env), 0);
    ck_assert_uint_eq(read_sector(&r, 3, &used), VIRTIO_BLK_S_OK);
    ck_assert_uint_eq(r.ram[DATA_GPA + 0x20000], pattern(3 * 512));
    ck_assert_uint_eq(read_sector(&r, DISK_SECTORS, &used), VIRTIO_BLK_S_IOERR);   /* past the end now */
    rig_fini(&r);
    unlink(p2);
    unlink(tiny);
}
END_TEST

/* A read-only drive stays read-only on its new file. */
START_TEST(swap_read_only)
{
    if (!engine_ok(_i)) return;
    struct rig r;
    rig_init(&r, _i, true, NULL, DISK_SECTORS * 512);
    char why[200], p2[64];
    write_file(p2, sizeof p2, DISK_SECTORS * 512, 1);
    ck_assert_int_eq(virtio_blk_swap(r.blk, "/tmp", why, sizeof why), -EINVAL);    /* opens, not a file */
    ck_assert_int_eq(virtio_blk_swap(r.blk, p2, why, sizeof why), 0);
    int other = open(p2, O_RDONLY);                 /* a shared lock, as create takes */
    ck_assert_int_eq(flock(other, LOCK_SH | LOCK_NB), 0);
    ck_assert_int_eq(flock(other, LOCK_EX | LOCK_NB), -1);
    close(other);
    memset(r.ram + DATA_GPA, 0x77, 512);
    uint16_t w = req(&r, VIRTIO_BLK_T_OUT, 0, DATA_GPA, 512, 1, false);
    uint16_t rd = req(&r, VIRTIO_BLK_T_IN, 0, DATA_GPA + 0x1000, 512, 1, true);
    kick(&r);
    wait_used(&r, 2);
    ck_assert_uint_eq(r.ram[STAT_GPA + w], VIRTIO_BLK_S_IOERR);
    ck_assert_uint_eq(r.ram[STAT_GPA + rd], VIRTIO_BLK_S_OK);
    ck_assert_uint_eq(r.ram[DATA_GPA + 0x1000 + 5], (uint8_t)(5 * 3 + 1));
    ck_assert(virtio_blk_ops.features(r.blk) & (1ull << VIRTIO_BLK_F_RO));
    rig_fini(&r);
    unlink(p2);
}
END_TEST

/* Counters by request type, with their bytes. */
START_TEST(io_counters)
{
    if (!engine_ok(_i)) return;
    struct rig r;
    rig_init(&r, _i, false, NULL, DISK_SECTORS * 512);
    req(&r, VIRTIO_BLK_T_IN, 0, DATA_GPA, 3 * 512, 2, true);
    req(&r, VIRTIO_BLK_T_IN, 4, DATA_GPA + 0x4000, 512, 1, true);
    req(&r, VIRTIO_BLK_T_OUT, 8, DATA_GPA + 0x8000, 2 * 512, 1, false);
    req(&r, VIRTIO_BLK_T_FLUSH, 0, 0, 0, 0, false);
    req(&r, VIRTIO_BLK_T_IN, DISK_SECTORS, DATA_GPA, 512, 1, true);     /* fails: not counted */
    kick(&r);
    wait_used(&r, 5);
    struct virtio_blk_stats st;
    virtio_blk_get_stats(r.blk, &st);
    ck_assert_uint_eq(st.reads, 2);
    ck_assert_uint_eq(st.read_bytes, 4 * 512);
    ck_assert_uint_eq(st.writes, 1);
    ck_assert_uint_eq(st.write_bytes, 2 * 512);
    ck_assert_uint_eq(st.flushes, 1);
    ck_assert_uint_eq(st.failed, 1);
    rig_fini(&r);
}
END_TEST

/* --direct: O_DIRECT for aligned requests, the buffered descriptor for the
 * rest; data is right both ways. RAM is page-aligned here (calloc is not). */
static bool page_cached(const char *path, uint64_t off)
{
    int fd = open(path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    void *m = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, (off_t)off);
    ck_assert_ptr_ne(m, MAP_FAILED);
    unsigned char v = 0;
    ck_assert_int_eq(mincore(m, 4096, &v), 0);
    munmap(m, 4096);
    close(fd);
    return v & 1;
}

static void drop_cache(const char *path)
{
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(fdatasync(fd), 0);
    ck_assert_int_eq(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    close(fd);
}

START_TEST(direct_io)
{
    if (!engine_ok(_i)) return;
    struct rig r;
    memset(&r, 0, sizeof r);
    r.ram = aligned_alloc(4096, MEM_SIZE);
    memset(r.ram, 0, MEM_SIZE);
    r.mem.n = 1;
    r.mem.r[0] = (struct gmem_region){ 0, MEM_SIZE, r.ram };
    make_file(&r, DISK_SECTORS * 512);
    r.kfd = eventfd(0, EFD_CLOEXEC);
    struct virtio_blk_opts o = { .path = r.path, .engine = engine_for(_i), .name = "vdirect",
                                 .direct = true };
    char why[200];
    int e = virtio_blk_create(&o, &r.blk, why, sizeof why);
    if (e == -EINVAL && strstr(why, "O_DIRECT")) {
        printf("SKIPPED: test_virtio_blk direct_io: %s\n", why);
        unlink(r.path);
        free(r.ram);
        close(r.kfd);
        return;
    }
    ck_assert_msg(e == 0, "create: %s", why);
    ck_assert_int_eq(rig_start(&r, virtio_blk_ops.features(r.blk) | (1ull << VIRTIO_F_VERSION_1)), 0);
    drop_cache(r.path);

    /* Aligned read of sectors 64..71 (file page 8): direct, so the page
     * does not enter the host page cache. */
    uint16_t h = req(&r, VIRTIO_BLK_T_IN, 64, DATA_GPA, 8 * 512, 1, true);
    kick(&r);
    wait_used(&r, 1);
    ck_assert_uint_eq(r.ram[STAT_GPA + h], VIRTIO_BLK_S_OK);
    for (uint32_t i = 0; i < 8 * 512; i++)
        ck_assert_uint_eq(r.ram[DATA_GPA + i], pattern(64 * 512 + i));
    ck_assert(!page_cached(r.path, 8 * 4096));

    /* Misaligned guest buffer (odd address), sectors 128..129 (file page
     * 16): served through the buffered descriptor, which caches the page. */
    h = req(&r, VIRTIO_BLK_T_IN, 128, DATA_GPA + 0x20001, 2 * 512, 1, true);
    kick(&r);
    wait_used(&r, 2);
    uint32_t id, len;
    used_elem(&r, 1, &id, &len);
    ck_assert_uint_eq(id, h);
    ck_assert_uint_eq(len, 2 * 512 + 1);
    ck_assert_uint_eq(r.ram[STAT_GPA + h], VIRTIO_BLK_S_OK);
    for (uint32_t i = 0; i < 2 * 512; i++)
        ck_assert_uint_eq(r.ram[DATA_GPA + 0x20001 + i], pattern(128 * 512 + i));
    ck_assert(page_cached(r.path, 16 * 4096));

    /* Aligned write (8 sectors at 200), a write split in three unaligned
     * segments (4 sectors at 120), a flush; then the file holds both. */
    for (uint32_t i = 0; i < 8 * 512; i++)
        r.ram[DATA_GPA + 0x10000 + i] = (uint8_t)(i ^ 0x3c);
    for (uint32_t i = 0; i < 4 * 512; i++)
        r.ram[DATA_GPA + 0x30000 + i] = (uint8_t)(i ^ 0xc3);
    uint16_t w1 = req(&r, VIRTIO_BLK_T_OUT, 200, DATA_GPA + 0x10000, 8 * 512, 1, false);
    uint16_t w2 = req(&r, VIRTIO_BLK_T_OUT, 120, DATA_GPA + 0x30000, 4 * 512, 3, false);
    uint16_t f = req(&r, VIRTIO_BLK_T_FLUSH, 0, 0, 0, 0, false);
    kick(&r);
    wait_used(&r, 5);
    ck_assert_uint_eq(r.ram[STAT_GPA + w1], VIRTIO_BLK_S_OK);
    ck_assert_uint_eq(r.ram[STAT_GPA + w2], VIRTIO_BLK_S_OK);
    ck_assert_uint_eq(r.ram[STAT_GPA + f], VIRTIO_BLK_S_OK);
    uint8_t buf[8 * 512];
    read_file_at(&r, 200 * 512, buf, sizeof buf);
    for (uint32_t i = 0; i < sizeof buf; i++)
        ck_assert_uint_eq(buf[i], (uint8_t)(i ^ 0x3c));
    read_file_at(&r, 120 * 512, buf, 4 * 512);
    for (uint32_t i = 0; i < 4 * 512; i++)
        ck_assert_uint_eq(buf[i], (uint8_t)(i ^ 0xc3));
    read_file_at(&r, 119 * 512, buf, 512);
    for (uint32_t i = 0; i < 512; i++)
        ck_assert_uint_eq(buf[i], pattern(119 * 512 + i));

    /* A direct read after a buffered write of the same sectors sees it. */
    h = req(&r, VIRTIO_BLK_T_IN, 120, DATA_GPA + 0x40000, 4 * 512, 1, true);
    kick(&r);
    wait_used(&r, 6);
    ck_assert_uint_eq(r.ram[STAT_GPA + h], VIRTIO_BLK_S_OK);
    for (uint32_t i = 0; i < 4 * 512; i++)
        ck_assert_uint_eq(r.ram[DATA_GPA + 0x40000 + i], (uint8_t)(i ^ 0xc3));

    struct virtio_blk_stats st;
    virtio_blk_get_stats(r.blk, &st);
    ck_assert_uint_eq(st.completed, 6);
    ck_assert_uint_eq(st.failed, 0);
    rig_fini(&r);
}
END_TEST

/* A copy-on-write drive: the base is read where the overlay has nothing,
 * writes (a partial 4 KiB block: copy-up) and write-zeroes go to the
 * overlay, a flush makes its bitmap durable, the base is never written;
 * the engine is the thread pool whatever was asked. */
START_TEST(overlay_drive)
{
    struct rig r;
    memset(&r, 0, sizeof r);
    r.ram = calloc(1, MEM_SIZE);
    r.mem.n = 1;
    r.mem.r[0] = (struct gmem_region){ 0, MEM_SIZE, r.ram };
    make_file(&r, DISK_SECTORS * 512);
    char ovl[80];
    snprintf(ovl, sizeof ovl, "%s.ovl", r.path);
    unlink(ovl);
    r.kfd = eventfd(0, EFD_CLOEXEC);
    struct virtio_blk_opts o = { .path = r.path, .engine = engine_for(_i), .name = "vtest",
                                 .overlay = ovl, .overlay_no_reflink = true };
    char why[300];
    ck_assert_msg(virtio_blk_create(&o, &r.blk, why, sizeof why) == 0, "%s", why);
    ck_assert_uint_eq(virtio_blk_capacity(r.blk), DISK_SECTORS);
    /* The base is locked shared, the overlay exclusively. */
    struct virtio_blk *b2;
    ck_assert_int_eq(virtio_blk_create(&o, &b2, why, sizeof why), -EWOULDBLOCK);
    uint64_t f = virtio_blk_ops.features(r.blk) | (1ull << VIRTIO_F_VERSION_1);
    ck_assert_int_eq(rig_start(&r, f), 0);
    uint8_t before[DISK_SECTORS * 512];
    read_file_at(&r, 0, before, sizeof before);
    for (uint32_t i = 0; i < 3 * 512; i++)
        r.ram[DATA_GPA + 0x10000 + i] = (uint8_t)(i ^ 0xa5);
    uint16_t w = req(&r, VIRTIO_BLK_T_OUT, 9, DATA_GPA + 0x10000, 3 * 512, 2, false);
    uint8_t range[16];
    uint64_t s = htole64(32); uint32_t n = htole32(8), fl = 0;
    memcpy(range, &s, 8); memcpy(range + 8, &n, 4); memcpy(range + 12, &fl, 4);
    memcpy(r.ram + DATA_GPA + 0x20000, range, 16);
    uint16_t z = req(&r, VIRTIO_BLK_T_WRITE_ZEROES, 0, DATA_GPA + 0x20000, 16, 1, false);
    /* A flush covers the writes completed before it (requests in flight
     * together are unordered), as a driver does it. */
    kick(&r);
    wait_used(&r, 2);
    uint16_t fh = req(&r, VIRTIO_BLK_T_FLUSH, 0, 0, 0, 0, false);
    kick(&r);
    wait_used(&r, 3);
    ck_assert_uint_eq(r.ram[STAT_GPA + w], VIRTIO_BLK_S_OK);
    ck_assert_uint_eq(r.ram[STAT_GPA + z], VIRTIO_BLK_S_OK);
    ck_assert_uint_eq(r.ram[STAT_GPA + fh], VIRTIO_BLK_S_OK);
    /* Read sectors 0..47 back through the device. */
    uint16_t rd = req(&r, VIRTIO_BLK_T_IN, 0, DATA_GPA, 48 * 512, 3, true);
    kick(&r);
    wait_used(&r, 4);
    ck_assert_uint_eq(r.ram[STAT_GPA + rd], VIRTIO_BLK_S_OK);
    for (uint32_t i = 0; i < 48 * 512; i++) {
        uint8_t want = i >= 9 * 512 && i < 12 * 512 ? (uint8_t)((i - 9 * 512) ^ 0xa5)
                     : i >= 32 * 512 && i < 40 * 512 ? 0 : pattern(i);
        ck_assert_msg(r.ram[DATA_GPA + i] == want, "byte %u", i);
    }
    struct virtio_blk_stats st;
    virtio_blk_get_stats(r.blk, &st);
    ck_assert_int_eq(st.engine, BLK_ENGINE_POOL);
    ck_assert_uint_eq(st.completed, 4);
    /* The base is unchanged; the overlay holds block 1 (sectors 9..11, a
     * partial block) and block 4 (sectors 32..39), durable after the flush. */
    uint8_t after[DISK_SECTORS * 512];
    read_file_at(&r, 0, after, sizeof after);
    ck_assert(memcmp(before, after, sizeof before) == 0);
    struct ovl_disk *d;
    ck_assert_int_eq(ovl_open(NULL, ovl, OVL_OPEN_READ_ONLY | OVL_OPEN_NO_LOCK, &d, why, sizeof why), 0);
    ck_assert_uint_eq(ovl_allocated(d), 2);
    ck_assert(ovl_block_allocated(d, 1) && !ovl_block_allocated(d, 2) && ovl_block_allocated(d, 4));
    ovl_close(d);
    rig_fini(&r);
    unlink(ovl);
}
END_TEST

/* CPU time of the whole process (every thread), in ms. */
static uint64_t cpu_ms(void)
{
    struct rusage ru;
    ck_assert_int_eq(getrusage(RUSAGE_SELF, &ru), 0);
    return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 +
           (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
}

/* A kick eventfd that is O_NONBLOCK, as a vhost-user frontend's (QEMU's)
 * are, handed to the device directly: kicks are served and an idle
 * device sleeps. (Before, the io_uring engine armed a READ on the kick
 * fd, which a non-blocking eventfd completes at once with -EAGAIN: the
 * thread spun re-arming it.) */
START_TEST(nonblocking_kick_fd)
{
    if (!engine_ok(_i)) return;
    struct rig r;
    rig_init(&r, _i, false, NULL, DISK_SECTORS * 512);
    virtio_blk_ops.stop(r.blk);
    close(r.kfd);
    r.kfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    ck_assert_int_ge(r.kfd, 0);
    ck_assert_int_eq(rig_start(&r, virtio_blk_ops.features(r.blk) | (1ull << VIRTIO_F_VERSION_1)), 0);
    uint64_t c0 = cpu_ms();
    usleep(200 * 1000);
    uint64_t burnt = cpu_ms() - c0;
    ck_assert_msg(burnt < 60, "idle device: %llu ms of CPU in 200 ms", (unsigned long long)burnt);
    for (uint16_t n = 1; n <= 20; n++) {
        uint16_t h = req(&r, VIRTIO_BLK_T_IN, n, DATA_GPA, 512, 1, true);
        kick(&r);
        wait_used(&r, n);
        ck_assert_uint_eq(r.ram[STAT_GPA + h], VIRTIO_BLK_S_OK);
        for (uint32_t i = 0; i < 512; i++)
            ck_assert_uint_eq(r.ram[DATA_GPA + i], pattern(n * 512u + i));
    }
    /* the counter was reset: nothing pending, and still idle */
    uint64_t v;
    ck_assert_int_eq(read(r.kfd, &v, sizeof v), -1);
    ck_assert_int_eq(errno, EAGAIN);
    c0 = cpu_ms();
    usleep(200 * 1000);
    ck_assert_uint_lt(cpu_ms() - c0, 60);
    rig_fini(&r);
}
END_TEST

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* 20 requests a second (ops bucket of 2, refilled in 100 ms): 40 reads
 * take the first 2 at once and the other 38 at that rate, 1.9 s, within
 * 10 %; a stop while one waits leaves nothing in flight, and a restart
 * goes on; a run-time change to unlimited lets the rest go at once. */
START_TEST(rate_limited)
{
    if (!engine_ok(_i)) return;
    static const struct ratelimit_cfg lim = { .ops = { .size = 2, .refill_time_ms = 100 } };
    rig_limit = &lim;
    struct rig r;
    rig_init(&r, _i, false, NULL, DISK_SECTORS * 512);
    rig_limit = NULL;
    double t0 = mono_s();
    for (unsigned i = 0; i < 40; i++)
        req(&r, VIRTIO_BLK_T_IN, i, DATA_GPA + 512u * i, 512, 1, true);
    kick(&r);
    wait_used(&r, 40);
    double t = mono_s() - t0;
    fprintf(stderr, "rate_limited (%s): 40 requests in %.3f s (1.9 s at 20/s after a burst of 2)\n",
            _i ? "pool" : "uring", t);
    ck_assert_msg(t > 1.71 && t < 2.09, "%.3f s", t);
    /* the same again, stopped while a request waits for its token */
    for (unsigned i = 0; i < 40; i++)
        req(&r, VIRTIO_BLK_T_IN, i, DATA_GPA + 512u * i, 512, 1, true);
    kick(&r);
    usleep(300000);
    virtio_blk_ops.stop(r.blk);
    ck_assert_uint_eq(r.q.inflight, 0);
    uint16_t done = ld16(&r, USED_GPA + 2);
    ck_assert_uint_eq(done, r.q.last_avail_idx);
    ck_assert_uint_lt(done, 80);
    ck_assert_int_eq(virtio_blk_ops.start(r.blk, &r.env), 0);
    ck_assert_int_eq(virtio_blk_set_limit(r.blk, NULL), 0);     /* unlimited from now on */
    kick(&r);
    t0 = mono_s();
    wait_used(&r, 80);
    ck_assert_msg(mono_s() - t0 < 1.0, "%.3f s after the limit went", mono_s() - t0);
    struct ratelimit_cfg got;
    virtio_blk_get_limit(r.blk, &got);
    ck_assert_uint_eq(got.ops.size, 0);
    rig_fini(&r);
}
END_TEST


/* Under the runner's seccomp filter (kill mode), as a VM's drive is
 * started: the device's ring was made at create, before the filter (the
 * runner's list has no io_uring_setup), and serves every start: a first
 * one, one after a reset, one after a drive swap (done on an unfiltered
 * thread, as the main thread does). Each phase runs on a new filtered
 * thread; a forbidden call kills the test process. */
static bool used_reaches(struct rig *r, uint16_t want)
{
    for (int i = 0; i < 5000; i++) {
        if (__atomic_load_n((uint16_t *)(r->ram + USED_GPA + 2), __ATOMIC_ACQUIRE) == want)
            return true;
        usleep(1000);
    }
    return false;
}

struct filtered_phase {
    struct rig *r;
    uint64_t features;
    uint64_t sector;
    int expect;                 /* byte expected in the sector read; -1: write 0xab first */
    int step;                   /* 0: fine, else the failing step */
};

static void *filtered_phase(void *arg)
{
    struct filtered_phase *p = arg;
    struct rig *r = p->r;
    if (sc_install(SC_VMM, SC_KILL) < 0)
        return p->step = 1, NULL;
    if (rig_start(r, p->features) != 0)
        return p->step = 2, NULL;
    uint16_t want = 0;
    if (p->expect < 0) {
        memset(r->ram + DATA_GPA, 0xab, 512);
        uint16_t h = req(r, VIRTIO_BLK_T_OUT, p->sector, DATA_GPA, 512, 1, false);
        uint64_t one = 1;
        if (write(r->kfd, &one, 8) != 8 || !used_reaches(r, ++want) || r->ram[STAT_GPA + h] != VIRTIO_BLK_S_OK)
            return p->step = 3, NULL;
        virtio_blk_ops.stop(r->blk);            /* a reset: the ring stays */
        if (rig_start(r, p->features) != 0)
            return p->step = 4, NULL;
        want = 0;
    }
    memset(r->ram + DATA_GPA, 0, 512);
    uint16_t h = req(r, VIRTIO_BLK_T_IN, p->sector, DATA_GPA, 512, 1, true);
    uint64_t one = 1;
    if (write(r->kfd, &one, 8) != 8 || !used_reaches(r, ++want) || r->ram[STAT_GPA + h] != VIRTIO_BLK_S_OK)
        return p->step = 5, NULL;
    uint8_t b = p->expect < 0 ? 0xab : (uint8_t)p->expect;
    for (unsigned i = 0; i < 512; i++)
        if (r->ram[DATA_GPA + i] != b)
            return p->step = 6, NULL;
    virtio_blk_ops.stop(r->blk);
    return NULL;
}

static void run_filtered(struct filtered_phase *p)
{
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, filtered_phase, p), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_msg(p->step == 0, "filtered phase failed at step %d", p->step);
}

START_TEST(starts_under_runner_filter)
{
    if (!engine_ok(_i)) return;
    struct rig r;
    memset(&r, 0, sizeof r);
    r.ram = calloc(1, MEM_SIZE);
    r.mem.n = 1;
    r.mem.r[0] = (struct gmem_region){ 0, MEM_SIZE, r.ram };
    make_file(&r, DISK_SECTORS * 512);
    r.kfd = eventfd(0, EFD_CLOEXEC);
    struct virtio_blk_opts o = { .path = r.path, .id = NULL, .engine = engine_for(_i), .name = "vtest" };
    char why[200];
    ck_assert_int_eq(virtio_blk_create(&o, &r.blk, why, sizeof why), 0);    /* before any filter */
    r.env.seccomp = SC_KILL;
    uint64_t f = virtio_blk_ops.features(r.blk) | (1ull << VIRTIO_F_VERSION_1);
    struct filtered_phase p = { .r = &r, .features = f, .sector = 5, .expect = -1 };
    run_filtered(&p);
    struct virtio_blk_stats st;
    virtio_blk_get_stats(r.blk, &st);
    ck_assert_int_eq(st.engine, engine_for(_i));        /* not a fallback to the pool */
    /* a drive swap on this (unfiltered, as the main thread) thread */
    char p2[64];
    write_file(p2, sizeof p2, DISK_SECTORS * 512, 0);
    uint8_t cd[512];
    memset(cd, 0xcd, sizeof cd);
    int fd2 = open(p2, O_WRONLY);
    ck_assert_int_ge(fd2, 0);
    ck_assert_int_eq(pwrite(fd2, cd, sizeof cd, 0), (ssize_t)sizeof cd);
    close(fd2);
    ck_assert_int_eq(virtio_blk_swap(r.blk, p2, why, sizeof why), 0);
    struct filtered_phase q = { .r = &r, .features = f, .sector = 0, .expect = 0xcd };
    run_filtered(&q);
    q = (struct filtered_phase){ .r = &r, .features = f, .sector = 7, .expect = -1 };
    run_filtered(&q);
    virtio_blk_get_stats(r.blk, &st);
    ck_assert_int_eq(st.engine, engine_for(_i));
    unlink(p2);
    rig_fini(&r);
}
END_TEST


#ifdef MOAT_HAVE_URING
/* The ring a drive gets (blk_ring_create): only the engine's opcodes, only
 * on fixed files, and of the register operations only FILES_UPDATE;
 * anything else is refused with EACCES. */
START_TEST(ring_restrictions)
{
    if (!engine_ok(0)) return;
    struct blk_ring *R;
    char why[200];
    ck_assert_int_eq(blk_ring_create(VIRTIO_BLK_INFLIGHT_MAX, &R, why, sizeof why), 0);
    static const uint8_t forbidden[] = { IORING_OP_OPENAT, IORING_OP_CONNECT, IORING_OP_SOCKET, IORING_OP_ACCEPT,
                                         IORING_OP_SENDMSG, IORING_OP_WRITE, IORING_OP_RENAMEAT, IORING_OP_UNLINKAT,
                                         IORING_OP_OPENAT2, IORING_OP_ASYNC_CANCEL, IORING_OP_FILES_UPDATE };
    for (size_t i = 0; i < sizeof forbidden; i++)
        ck_assert_msg(blk_ring_try_op(R, forbidden[i], IOSQE_FIXED_FILE) == -EACCES, "opcode %u not refused",
                      forbidden[i]);
    /* an allowed opcode without the fixed file, or with another flag */
    ck_assert_int_eq(blk_ring_try_op(R, IORING_OP_READV, 0), -EACCES);
    ck_assert_int_eq(blk_ring_try_op(R, IORING_OP_READV, IOSQE_FIXED_FILE | IOSQE_IO_DRAIN), -EACCES);
    /* allowed, on an empty slot: not refused by the restrictions */
    ck_assert_int_eq(blk_ring_try_op(R, IORING_OP_POLL_REMOVE, IOSQE_FIXED_FILE), -ENOENT);
    /* register operations: only FILES_UPDATE */
    int fd = eventfd(0, EFD_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(blk_ring_try_register(R, IORING_REGISTER_FILES, &fd, 1), -EACCES);
    ck_assert_int_eq(blk_ring_try_register(R, IORING_UNREGISTER_FILES, NULL, 0), -EACCES);
    ck_assert_int_eq(blk_ring_try_register(R, IORING_REGISTER_EVENTFD, &fd, 1), -EACCES);
    struct iovec iov = { .iov_base = &fd, .iov_len = sizeof fd };
    ck_assert_int_eq(blk_ring_try_register(R, IORING_REGISTER_BUFFERS, &iov, 1), -EACCES);
    ck_assert_int_eq(blk_ring_try_register(R, IORING_REGISTER_RESTRICTIONS, NULL, 0), -EACCES);
    struct io_uring_files_update up = { .offset = 0, .fds = (uint64_t)(uintptr_t)&fd };
    ck_assert_int_eq(blk_ring_try_register(R, IORING_REGISTER_FILES_UPDATE, &up, 1), 1);
    int none = -1;
    up.fds = (uint64_t)(uintptr_t)&none;
    ck_assert_int_eq(blk_ring_try_register(R, IORING_REGISTER_FILES_UPDATE, &up, 1), 1);
    close(fd);
    blk_ring_destroy(R);
}
END_TEST
#endif

static Suite *suite(void)
{
    Suite *s = suite_create("virtio_blk");
    TCase *tc = tcase_create("device");
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, read_write_flush, 0, 2);
    tcase_add_loop_test(tc, get_id_and_config, 0, 2);
    tcase_add_loop_test(tc, read_only_drive, 0, 2);
    tcase_add_loop_test(tc, bad_chains_fail_alone, 0, 2);
    tcase_add_loop_test(tc, broken_queue_needs_reset, 0, 2);
    tcase_add_loop_test(tc, head_reused_in_flight, 0, 2);
    tcase_add_loop_test(tc, oversized_ring_refused, 0, 2);
    tcase_add_loop_test(tc, many_in_flight_and_stop_drains, 0, 2);
    tcase_add_loop_test(tc, discard_and_write_zeroes, 0, 2);
    tcase_add_loop_test(tc, create_errors, 0, 2);
    tcase_add_loop_test(tc, direct_io, 0, 2);
    tcase_add_loop_test(tc, overlay_drive, 0, 2);
    tcase_add_loop_test(tc, nonblocking_kick_fd, 0, 2);
    tcase_add_loop_test(tc, rate_limited, 0, 2);
    tcase_add_loop_test(tc, swap_backing_file, 0, 2);
    tcase_add_loop_test(tc, swap_read_only, 0, 2);
    tcase_add_loop_test(tc, io_counters, 0, 2);
    tcase_add_loop_test(tc, starts_under_runner_filter, 0, 2);
#ifdef MOAT_HAVE_URING
    tcase_add_test(tc, ring_restrictions);
#endif
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
