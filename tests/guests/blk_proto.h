/* What the virtio-blk test guests (blk.c) and their host side
 * (tests/integration/test_blk.c) agree on. Plain C constants only. */
#ifndef MOAT_GUEST_BLK_PROTO_H
#define MOAT_GUEST_BLK_PROTO_H

/* Functional test: drive 0 has BLK_SECTORS sectors, byte i = BLK_PAT(i),
 * id BLK_ID. The guest reads everything back, checks GET_ID and capacity,
 * fails a malformed chain and an out-of-range read, and then
 *  - read-only drive: a write must fail with IOERR ("blk: ro ok");
 *  - writable drive: writes sectors BLK_W_FIRST .. +BLK_W_COUNT with
 *    BLK_PAT2(i) (i = byte offset in the disk), flushes, reads back
 *    ("blk: rw ok").
 * A second drive (slot 1) must hold BLK_SECTORS2 sectors ("blk: 2 drives").
 * Exits 0, or a code below; with no drive at all it exits BLK_NODEV. */
#define BLK_SECTORS   64
#define BLK_SECTORS2  24
#define BLK_ID        "moat-blk-test"
#define BLK_PAT(i)    ((unsigned char)((i) * 31u + ((i) >> 9) + 3u))
#define BLK_PAT2(i)   ((unsigned char)((i) * 7u + 0x5au))
#define BLK_W_FIRST   8
#define BLK_W_COUNT   4
#define BLK_NODEV     3
#define BLK_OK_RW     "blk: rw ok\n"
#define BLK_OK_RO     "blk: ro ok\n"
#define BLK_TWO       "blk: 2 drives\n"

/* Durability writer (kernel command line contains "blkdur"): for n = 1, 2,
 * ... up to capacity - 1, writes sector n as { "MOATREC\0", le64 n, then
 * byte j = BLK_REC(n, j) }, flushes, and prints "ack n\n" only after the
 * flush completed. Exits 0 when the disk is full. */
#define BLK_REC_MAGIC "MOATREC"
#define BLK_REC(n, j) ((unsigned char)((n) * 13u + (j)))
#define BLK_ACK       "ack "

/* Backing-file swap watcher (kernel command line contains "blkswap"):
 * prints BLK_SWAP "cap N byte B" (capacity in sectors, byte 0 of sector 0,
 * in decimal) at start and again after each config-change interrupt
 * (InterruptStatus bit 1, acknowledged), BLK_SWAP_MAX times in all, then
 * exits 0. */
#define BLK_SWAP      "swap: "
#define BLK_SWAP_MAX  3

#endif
