"""The fixed 61-byte RecordBatch v2 header, read and patched in place.

Theory of operation: the broker never decompresses records on the produce or fetch path. It reads
the batch header (struct at fixed offsets, see KAFKA-NOTES.md), checks the CRC-32C that covers
``attributes..end``, and rewrites ``baseOffset`` and ``partitionLeaderEpoch``, which sit outside
the CRC. Everything here works on ``bytes``/``bytearray``/``memoryview`` and does no I/O.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

import crc32c

from ..errors import Errors, KafkaError

# Field layout of DefaultRecordBatch (Kafka's DefaultRecordBatch.java).
HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
HEADER_BYTES = HEADER_STRUCT.size  # 61
assert HEADER_BYTES == 61

BASE_OFFSET_POS = 0
BATCH_LENGTH_POS = 8
LEADER_EPOCH_POS = 12
MAGIC_POS = 16
CRC_POS = 17
ATTRIBUTES_POS = 21
MAX_TIMESTAMP_POS = 35
RECORDS_COUNT_POS = 57
# batchLength counts the bytes after the batchLength field itself.
LOG_OVERHEAD_BYTES = 12

MAGIC_V2 = 2
CODEC_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08  # 1 = LogAppendTime
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
# Set by the log cleaner (KIP-534): baseTimestamp is then the delete horizon, the time after
# which the batch (a tombstone's or a transaction marker's) may be removed.
DELETE_HORIZON_BIT = 0x40

NO_PRODUCER_ID = -1
NO_PARTITION_LEADER_EPOCH = -1

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")


class InvalidRecordError(KafkaError, ValueError):
    """A batch that must be refused as a whole: Kafka's CORRUPT_MESSAGE (error code 2)."""

    error_code = Errors.CORRUPT_MESSAGE


class BatchHeader(NamedTuple):
    """The decoded fixed header of one RecordBatch v2 (a tuple: the produce path reads one per
    batch, and a tuple is built several times faster than a frozen dataclass)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size_bytes(self) -> int:
        """Bytes the whole batch occupies on the wire and on disk."""
        return self.batch_length + LOG_OVERHEAD_BYTES

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def delete_horizon_ms(self) -> int | None:
        """When the cleaner may remove this batch, if a pass stamped it (Kafka's
        ``deleteHorizonMs``)."""
        return self.base_timestamp if self.attributes & DELETE_HORIZON_BIT else None

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record, wrapping at int32 like Kafka."""
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) % (2**31)


def read_header(buf, pos: int = 0) -> BatchHeader:
    """Decode the header of the batch starting at ``pos``; the caller checks there are 61 bytes."""
    return BatchHeader(*HEADER_STRUCT.unpack_from(buf, pos))


def batch_size_at(buf, pos: int) -> int:
    """Total bytes of the batch at ``pos`` from its length field, or -1 if the field is cut off."""
    if len(buf) - pos < LOG_OVERHEAD_BYTES:
        return -1
    return _I32.unpack_from(buf, pos + BATCH_LENGTH_POS)[0] + LOG_OVERHEAD_BYTES


def compute_crc(buf, pos: int, size_bytes: int) -> int:
    """CRC-32C over attributes..end of the batch at ``pos``."""
    view = memoryview(buf)[pos + ATTRIBUTES_POS : pos + size_bytes]
    return crc32c.crc32c(view)


def check_batch(buf, pos: int, size_max_bytes: int) -> BatchHeader:
    """Validate the batch at ``pos`` without decompressing it and return its header.

    Raises InvalidRecordError for anything Kafka answers with CORRUPT_MESSAGE: a length that does
    not fit, an old magic, a CRC mismatch, a negative record count. A batch the log cleaner
    rewrote holds fewer records than its offsets span, so only a producer's batch must have
    exactly ``last_offset_delta + 1`` (checked where the leader appends).
    """
    _check_size(buf, pos, batch_size_at(buf, pos), size_max_bytes)
    header = read_header(buf, pos)
    _check_header(buf, pos, header)
    return header


def check_read_batch(buf, pos: int, header: BatchHeader, size_max_bytes: int) -> None:
    """``check_batch`` for a batch whose header was already read (``parse_batches``)."""
    _check_size(buf, pos, header.size_bytes, size_max_bytes)
    _check_header(buf, pos, header)


def _check_size(buf, pos: int, size_bytes: int, size_max_bytes: int) -> None:
    if size_bytes < HEADER_BYTES:
        raise InvalidRecordError(f"batch length {size_bytes} is smaller than a v2 header")
    if size_bytes > size_max_bytes or pos + size_bytes > len(buf):
        raise InvalidRecordError(f"batch of {size_bytes} bytes runs past the end of the data")


def _check_header(buf, pos: int, header: BatchHeader) -> None:
    if header.magic != MAGIC_V2:
        raise InvalidRecordError(f"record batch magic {header.magic} is not supported (only v2)")
    if header.records_count < 0 or header.last_offset_delta < 0:
        raise InvalidRecordError("negative record count or last offset delta")
    if header.codec > 4:
        raise InvalidRecordError(f"unknown compression codec {header.codec}")
    if compute_crc(buf, pos, header.size_bytes) != header.crc:
        raise InvalidRecordError("record batch CRC-32C mismatch")


def iter_batches(buf, size_max_bytes: int | None = None):
    """Yield ``(pos, header)`` for every valid batch in ``buf``; raise on the first invalid one."""
    limit = len(buf) if size_max_bytes is None else size_max_bytes
    pos = 0
    while pos < len(buf):
        header = check_batch(buf, pos, limit)
        yield pos, header
        pos += header.size_bytes


@dataclass(frozen=True, slots=True)
class ParsedBatches:
    """One partition's records as a producer sent them, each batch header read once (the walk
    of Kafka's ``analyzeAndValidateRecords``): Produce decides on the headers, then hands this
    value down to the log, which checks each batch (``check_parsed``) without reading it again.

    ``batches`` holds the position and header of every batch header the walk could read. The
    walk stops at ``end``: where fewer bytes than a header remain, or after a batch claiming no
    length. Nothing is checked here: a batch running past the end, a bad CRC, bytes after the
    last batch are the log's to refuse.
    """

    records: bytes | bytearray
    batches: tuple[tuple[int, BatchHeader], ...]
    end: int

    @property
    def headers(self) -> list[BatchHeader]:
        return [header for _pos, header in self.batches]

    @property
    def has_transactional(self) -> bool:
        return any(header.is_transactional for _pos, header in self.batches)


def parse_batches(records: bytes | bytearray) -> ParsedBatches:
    """Read the header of each batch in ``records`` once, unchecked (see ``ParsedBatches``)."""
    batches = []
    pos, size_bytes = 0, len(records)
    while size_bytes - pos >= HEADER_BYTES:
        header = BatchHeader(*HEADER_STRUCT.unpack_from(records, pos))
        batches.append((pos, header))
        if header.batch_length + LOG_OVERHEAD_BYTES <= 0:
            break
        pos += header.batch_length + LOG_OVERHEAD_BYTES
    return ParsedBatches(records, tuple(batches), pos)


def check_parsed(parsed: ParsedBatches, size_max_bytes: int) -> None:
    """What ``iter_batches`` checks, on headers already read: raise InvalidRecordError at the
    first invalid batch, or for bytes after the last whole one."""
    buf = parsed.records
    for pos, header in parsed.batches:
        check_read_batch(buf, pos, header, size_max_bytes)
    if parsed.end != len(buf):
        check_batch(buf, parsed.end, size_max_bytes)  # too short for a batch: it raises
        raise AssertionError("a batch the walk could not read passed check_batch")


def set_base_offset(buf: bytearray, pos: int, base_offset: int) -> None:
    """Rewrite baseOffset in place (outside the CRC)."""
    _I64.pack_into(buf, pos + BASE_OFFSET_POS, base_offset)


def set_partition_leader_epoch(buf: bytearray, pos: int, epoch: int) -> None:
    """Rewrite partitionLeaderEpoch in place (outside the CRC)."""
    _I32.pack_into(buf, pos + LEADER_EPOCH_POS, epoch)


def set_log_append_time(buf: bytearray, pos: int, size_bytes: int, time_ms: int) -> None:
    """Mark the batch LogAppendTime with ``time_ms`` as max timestamp and recompute its CRC."""
    attributes = _I16.unpack_from(buf, pos + ATTRIBUTES_POS)[0]
    _I16.pack_into(buf, pos + ATTRIBUTES_POS, attributes | TIMESTAMP_TYPE_BIT)
    _I64.pack_into(buf, pos + MAX_TIMESTAMP_POS, time_ms)
    _U32.pack_into(buf, pos + CRC_POS, compute_crc(buf, pos, size_bytes))
