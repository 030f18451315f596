"""Compression codecs of RecordBatch v2: none, gzip, snappy, lz4 and zstd.

Theory of operation: a compressed batch carries all of its records as one compressed block after
the 61-byte header, and bits 0-2 of ``attributes`` name the codec. ``compress`` writes what the
common clients write: gzip with a fixed mtime, *raw* snappy (like librdkafka), the standard LZ4
frame with independent blocks (Java rejects linked blocks) and a zstd frame. ``decompress`` reads
what any client may send, including the *xerial* snappy framing that the Java client writes.

Every decompression is bounded: output beyond ``decompressed_bytes_max`` (default
``DECOMPRESSED_BYTES_MAX``) raises ``CodecError`` after at most about that much work and memory,
so a few kilobytes of "decompression bomb" can never stall the process or exhaust its memory. Each
codec is bounded with what its library offers: zlib and lz4 stop at ``max_length``, snappy states
its output length up front, and zstd decompresses into a buffer of fixed capacity that grows by
doubling up to the limit. Corrupt input raises ``CodecError`` too, never a library exception.
"""

from __future__ import annotations

import gzip
import struct
import zlib

import cramjam
import lz4.frame

CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_SNAPPY = 2
CODEC_LZ4 = 3
CODEC_ZSTD = 4
CODEC_NAMES = {
    CODEC_NONE: "none",
    CODEC_GZIP: "gzip",
    CODEC_SNAPPY: "snappy",
    CODEC_LZ4: "lz4",
    CODEC_ZSTD: "zstd",
}

# Far above any sane batch (message.max.bytes defaults to 1 MiB, a Fetch answer to 50 MiB) yet
# small enough to hold in memory: a bigger output is a bomb or corruption, not data.
DECOMPRESSED_BYTES_MAX = 64 * 1024 * 1024

# Java's Deflater default; Python's gzip default (9) is several times slower for little gain.
GZIP_LEVEL = 6
# zstd's own default level, as the Java client and librdkafka use.
ZSTD_LEVEL = 3
# gzip member header: magic, method, flags; wbits 16 + 15 makes zlib read exactly that format.
GZIP_WBITS = 16 + zlib.MAX_WBITS

# xerial snappy framing (Java's SnappyOutputStream): magic, int32 version, int32 compat, then
# repeated [int32 big-endian block length, raw snappy block].
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER_BYTES = 16
XERIAL_BLOCK_LENGTH = struct.Struct(">i")

# First zstd output capacity: ``compressed size * ratio``, at least the minimum. A larger output
# costs one more pass per doubling, so total work stays below twice the final output size.
ZSTD_CAPACITY_RATIO_GUESS = 8
ZSTD_CAPACITY_BYTES_MIN = 64 * 1024
# cramjam's message when the output buffer is too small (pinned by a test in test_records.py).
_ZSTD_SHORT_BUFFER_MESSAGE = "failed to write whole buffer"


class CodecError(ValueError):
    """Data that cannot be (de)compressed: unknown codec, corrupt input or output over the limit."""


def compress(codec: int, data) -> bytes:
    """Compress ``data`` (bytes-like) with the Kafka codec ``codec`` (0 none .. 4 zstd)."""
    if codec == CODEC_NONE:
        return bytes(data)
    if codec == CODEC_GZIP:
        return gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)
    if codec == CODEC_SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == CODEC_LZ4:
        # No content size in the frame header, like Java's KafkaLZ4BlockOutputStream.
        return lz4.frame.compress(data, block_linked=False, store_size=False)
    if codec == CODEC_ZSTD:
        return bytes(cramjam.zstd.compress(data, level=ZSTD_LEVEL))
    raise CodecError(f"unknown compression codec {codec}")


def decompress(codec: int, data, *, decompressed_bytes_max: int = DECOMPRESSED_BYTES_MAX) -> bytes:
    """Decompress ``data`` (bytes-like) written with ``codec``; raise CodecError if it is corrupt
    or would decompress to more than ``decompressed_bytes_max`` bytes."""
    assert decompressed_bytes_max >= 0
    if codec == CODEC_NONE:
        return bytes(data)
    if codec == CODEC_GZIP:
        return _gunzip(data, decompressed_bytes_max)
    if codec == CODEC_SNAPPY:
        return _unsnappy(data, decompressed_bytes_max)
    if codec == CODEC_LZ4:
        return _unlz4(data, decompressed_bytes_max)
    if codec == CODEC_ZSTD:
        return _unzstd(data, decompressed_bytes_max)
    raise CodecError(f"unknown compression codec {codec}")


def _over_limit(codec: int, limit_bytes: int) -> CodecError:
    return CodecError(f"{CODEC_NAMES[codec]} data decompresses to more than {limit_bytes} bytes")


def _gunzip(data, limit_bytes: int) -> bytes:
    """One or more concatenated gzip members (Java's GZIPInputStream reads them all)."""
    chunks: list[bytes] = []
    total_bytes = 0
    rest = data
    while True:
        inflater = zlib.decompressobj(wbits=GZIP_WBITS)
        try:
            chunk = inflater.decompress(rest, limit_bytes + 1 - total_bytes)
        except zlib.error as exc:
            raise CodecError(f"corrupt gzip data: {exc}") from None
        total_bytes += len(chunk)
        if total_bytes > limit_bytes:
            raise _over_limit(CODEC_GZIP, limit_bytes)
        chunks.append(chunk)
        if not inflater.eof:
            raise CodecError("gzip data is truncated")
        rest = inflater.unused_data
        if not rest:
            return b"".join(chunks)


def _unsnappy(data, limit_bytes: int) -> bytes:
    """Raw snappy (librdkafka, most non-Java clients) or xerial framing (the Java client)."""
    view = memoryview(data)
    if view[: len(XERIAL_MAGIC)] != XERIAL_MAGIC:
        return _unsnappy_raw(view, limit_bytes)
    if len(view) < XERIAL_HEADER_BYTES:
        raise CodecError("xerial snappy header is truncated")
    # Version and compat are ignored, as Java and kafka-python do: some producers write them
    # little-endian (kafka-python issue 2414).
    chunks: list[bytes] = []
    total_bytes = 0
    pos = XERIAL_HEADER_BYTES
    while pos < len(view):
        if len(view) - pos < XERIAL_BLOCK_LENGTH.size:
            raise CodecError("xerial snappy block length is truncated")
        (block_bytes,) = XERIAL_BLOCK_LENGTH.unpack_from(view, pos)
        pos += XERIAL_BLOCK_LENGTH.size
        if block_bytes < 0 or block_bytes > len(view) - pos:
            raise CodecError(f"xerial snappy block of {block_bytes} bytes runs past the end")
        chunk = _unsnappy_raw(view[pos : pos + block_bytes], limit_bytes - total_bytes)
        total_bytes += len(chunk)
        chunks.append(chunk)
        pos += block_bytes
    return b"".join(chunks)


def _unsnappy_raw(block, limit_bytes: int) -> bytes:
    """One raw snappy block, whose varint preamble states the output length."""
    try:
        size_bytes = cramjam.snappy.decompress_raw_len(block)
        if size_bytes > limit_bytes:
            raise _over_limit(CODEC_SNAPPY, limit_bytes)
        return bytes(cramjam.snappy.decompress_raw(block))
    except cramjam.DecompressionError as exc:
        raise CodecError(f"corrupt snappy data: {exc}") from None


def _unlz4(data, limit_bytes: int) -> bytes:
    """Exactly one LZ4 frame (linked or independent blocks, any block size or checksum flags)."""
    frame = lz4.frame.LZ4FrameDecompressor()
    try:
        out = frame.decompress(data, max_length=limit_bytes + 1)
    except RuntimeError as exc:
        raise CodecError(f"corrupt lz4 data: {exc}") from None
    if len(out) > limit_bytes:
        raise _over_limit(CODEC_LZ4, limit_bytes)
    if not frame.eof:
        raise CodecError("lz4 frame is truncated")
    if frame.unused_data:
        raise CodecError(f"{len(frame.unused_data)} bytes of trailing data after the lz4 frame")
    return out


def _unzstd(data, limit_bytes: int) -> bytes:
    """One or more zstd frames, into a buffer that doubles until it fits or passes the limit."""
    guess_bytes = max(len(data) * ZSTD_CAPACITY_RATIO_GUESS, ZSTD_CAPACITY_BYTES_MIN)
    capacity_bytes = min(limit_bytes + 1, guess_bytes)
    while True:
        out = bytearray(capacity_bytes)
        try:
            size_bytes = cramjam.zstd.decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            if _ZSTD_SHORT_BUFFER_MESSAGE not in str(exc):
                raise CodecError(f"corrupt zstd data: {exc}") from None
            if capacity_bytes > limit_bytes:
                raise _over_limit(CODEC_ZSTD, limit_bytes) from None
            capacity_bytes = min(limit_bytes + 1, capacity_bytes * 2)
            continue
        if size_bytes > limit_bytes:
            raise _over_limit(CODEC_ZSTD, limit_bytes)
        del out[size_bytes:]
        return bytes(out)
