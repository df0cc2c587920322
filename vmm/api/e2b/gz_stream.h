/* A streaming gzip decoder for `moat serve`'s envd uploads (docs/serve.md,
 * "Uploads"): a Content-Encoding: gzip body of POST /files, fed as it
 * arrives, comes out to a sink GZ_STREAM_STEP bytes at a time at most; the
 * body is never held whole. Concatenated members are one stream (RFC 1952);
 * anything after a member's end that is not another member is an error; the
 * decoded size is checked against a limit before the bytes reach the sink.
 * Pure (zlib, malloc; no I/O, no global state). Unit tests:
 * tests/unit/test_gz_stream.c; fuzz target: tests/fuzz/fuzz_gz_stream.c. */
#ifndef MOAT_GZ_STREAM_H
#define MOAT_GZ_STREAM_H

#include <stddef.h>
#include <stdint.h>

/* The most bytes one sink call gets. */
#define GZ_STREAM_STEP (64 * 1024)

struct gz_stream;

/* Decoded bytes, n in 1..GZ_STREAM_STEP: 0 to go on, or a negative code
 * that stops decoding (gz_stream_feed returns it, and so does every later
 * call). */
typedef int (*gz_sink_fn)(void *ctx, const uint8_t *data, size_t n);

/* A decoder that lets at most max decoded bytes through: 0, or -ENOMEM. */
int gz_stream_init(struct gz_stream **gp, uint64_t max);

/* The next n body bytes (n may be 0). 0 when all of them were taken and
 * their output went to the sink; else the first error, which sticks
 * (every later feed and finish returns it again):
 *   -EBADMSG  not gzip, damaged data, a CRC-32 or length mismatch, or
 *             bytes after a member that do not start another one
 *             (gz_stream_reason: zlib's message)
 *   -EFBIG    the stream decodes to more than max bytes; the step that
 *             would pass the limit does not reach the sink
 *   -ENOMEM   zlib could not allocate
 *   < 0       what the sink returned */
int gz_stream_feed(struct gz_stream *g, const void *data, size_t n, gz_sink_fn sink, void *ctx);

/* The body's end: 0 if it held whole members, at least one; -EBADMSG if
 * it ended inside a member ("the stream is truncated") or held none ("the
 * body is empty"); or the error that stopped an earlier feed. */
int gz_stream_finish(struct gz_stream *g);

/* Why the last call failed ("" if none did): a short text for a reply. */
const char *gz_stream_reason(const struct gz_stream *g);

/* Decoded bytes so far, and members decoded whole. */
uint64_t gz_stream_total(const struct gz_stream *g);
unsigned gz_stream_members(const struct gz_stream *g);

void gz_stream_free(struct gz_stream *g);

#endif
