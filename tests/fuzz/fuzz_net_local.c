/* Fuzz the virtio-net device's own IPv4 host (devices/net/net_local.h):
 * a guest's frames to the metadata address, one connection's worth.
 *
 * Input: a sequence of records, each u16 length (little endian) then that
 * many bytes of an Ethernet frame; for a frame of 34 bytes or more the
 * IPv4 destination (bytes 30..33) is set to the host's address and the
 * EtherType to IPv4 unless the frame's byte 12 is 0x08 and byte 13 is
 * 0x06 (ARP), so mutations reach the TCP code. Time advances 1 ms a frame.
 * The service answers each line with a copy of it, "close" closes.
 * Checks: every emitted frame is a well-formed ARP reply or an IPv4/TCP
 * segment from the host whose IPv4 and TCP checksums verify, at most a
 * bounded number per input frame; the connection table stays bounded.
 * Seeds: tests/fuzz/corpus/net_local/ (make fuzz-seeds). */
#include <stdint.h>
#include <string.h>

#include "devices/net/net_local.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned emitted;

static uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

static void emit(void *o, const uint8_t *f, size_t len)
{
    (void)o;
    emitted++;
    FUZZ_ASSERT(len >= 42);
    uint16_t type = be16(f + 12);
    if (type == 0x0806) {
        FUZZ_ASSERT(len == 42 && be16(f + 20) == 2);
        return;
    }
    FUZZ_ASSERT(type == 0x0800 && len >= 54);
    const uint8_t *ip = f + 14;
    size_t iplen = be16(ip + 2);
    FUZZ_ASSERT(iplen + 14 == len && ip[0] == 0x45 && ip[9] == 6);
    FUZZ_ASSERT(net_csum(ip, 20, 0) == 0);
    uint32_t sum = (uint32_t)be16(ip + 12) + be16(ip + 14) + be16(ip + 16) + be16(ip + 18) + 6 + (uint32_t)(iplen - 20);
    FUZZ_ASSERT(net_csum(ip + 20, iplen - 20, sum) == 0);
}

static long serve(void *o, const uint8_t *in, size_t n, uint8_t *out, size_t cap, size_t *olen, bool *close,
                  uint64_t now)
{
    (void)o; (void)now;
    const uint8_t *nl = memchr(in, '\n', n);
    if (!nl)
        return 0;
    size_t line = (size_t)(nl - in) + 1;
    size_t w = line < cap ? line : cap;
    memcpy(out, in, w);
    *olen = w;
    *close = line >= 5 && !memcmp(in, "close", 5);
    return (long)line;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct net_local l;
    static const uint8_t mac[6] = { 6, 1, 2, 3, 4, 5 };
    static uint8_t f[2048];
    const uint32_t ip = 0xfea9fea9u;        /* 169.254.169.254 in network order */
    net_local_init(&l, ip, 80, mac, serve, emit, NULL, 1);
    uint64_t now = 0;
    size_t p = 0;
    while (p + 2 <= size) {
        size_t n = (size_t)data[p] | (size_t)data[p + 1] << 8;
        p += 2;
        if (n > size - p)
            n = size - p;
        if (n > sizeof f)
            n = sizeof f;
        memcpy(f, data + p, n);
        p += n;
        if (n >= 34) {
            if (!(f[12] == 0x08 && f[13] == 0x06)) {
                f[12] = 0x08;
                f[13] = 0x00;
                memcpy(f + 30, &ip, 4);
            }
        }
        emitted = 0;
        now += 1000000;
        if (net_local_wants(&l, f, n))
            net_local_input(&l, f, n, now);
        /* one frame in: an ARP reply, a RST, or ACK + answer segments (an
         * answer is at most 64 KiB + its FIN / a resend of the window) */
        FUZZ_ASSERT(emitted <= 2 + (NET_LOCAL_RESP_MAX / 64) * 2);
        unsigned used = 0;
        for (unsigned i = 0; i < NET_LOCAL_CONNS; i++)
            used += l.conn[i].used;
        FUZZ_ASSERT(used <= NET_LOCAL_CONNS);
    }
    net_local_free(&l);
    return 0;
}
