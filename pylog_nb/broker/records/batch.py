"""Records inside a RecordBatch v2: build a whole batch, or decode one back into records.

Theory of operation: the broker itself only looks at batch headers (header.py); this module is
for the places that need the records: tests, clients and the notebook. ``encode_batch`` lays
records out as Kafka's DefaultRecord does (length varint, attributes, timestampDelta varlong,
offsetDelta varint, key, value, headers; all varints zigzag), compresses them as one block
(codecs.py), then writes the 61-byte header and the CRC-32C over ``attributes..end``. The result
is byte-for-byte what the Java client writes for the same records and codec output.

``decode_batch`` is the reverse: ``header.check_batch`` validates length, magic and CRC, the body
is decompressed with a bounded output, and each record is parsed against the bounds of its own
length prefix. Offsets and timestamps come back absolute; a LogAppendTime batch gives every record
its ``maxTimestamp``, as Kafka does. Anything malformed raises ``InvalidRecordError`` (Kafka's
CORRUPT_MESSAGE) with the reason; a codec failure is chained as its ``__cause__``.
``decode_records`` walks a concatenation of batches and stops at a trailing partial batch, which a
Fetch answer may legally end with.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from pylog_nb.broker.protocol.schema import uvarint
from pylog_nb.broker.records import codecs
from pylog_nb.broker.records.header import (
    CODEC_MASK,
    CONTROL_BIT,
    DELETE_HORIZON_BIT,
    HEADER_BYTES,
    HEADER_STRUCT,
    LOG_OVERHEAD_BYTES,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_ID,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    InvalidRecordError,
    batch_size_at,
    check_batch,
    compute_crc,
    read_header,
)

# Kafka's RecordBatch.NO_TIMESTAMP / NO_PRODUCER_EPOCH / NO_SEQUENCE.
NO_TIMESTAMP = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# Longest encodings of a zigzag int32 and int64 (7 payload bits per byte); Java rejects longer.
VARINT_BYTES_MAX = 5
VARLONG_BYTES_MAX = 10
# Unsigned values below this fit two varint bytes (second byte without continuation bit).
TWO_BYTE_VARINT_END = 1 << 14
# Smallest record: length, attributes, timestampDelta, offsetDelta, key, value and header count,
# one byte each. Bounds the record count a batch body of a given size can claim.
RECORD_BYTES_MIN = 7
NULL_LENGTH = -1
# Position of the CRC among HEADER_STRUCT's fields.
CRC_FIELD_INDEX = 4


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record with its absolute offset and timestamp."""

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


class RecordSpec(NamedTuple):
    """One record to encode; a plain ``(key, value, headers, timestamp_ms)`` tuple works too."""

    key: bytes | None = None
    value: bytes | None = None
    headers: Sequence[tuple[str, bytes | None]] = ()
    timestamp_ms: int = NO_TIMESTAMP


# ---------------------------------------------------------------------------------------------
# Zigzag varints


def encode_varint(value: int) -> bytes:
    """Zigzag varint of an int32, as Kafka's ByteUtils.writeVarint."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"varint {value} is outside int32")
    return uvarint(((value << 1) ^ (value >> 31)) & 0xFFFF_FFFF)


def encode_varlong(value: int) -> bytes:
    """Zigzag varlong of an int64, as Kafka's ByteUtils.writeVarlong."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"varlong {value} is outside int64")
    return uvarint(((value << 1) ^ (value >> 63)) & 0xFFFF_FFFF_FFFF_FFFF)


def decode_varint(buf, pos: int) -> tuple[int, int]:
    """Read the zigzag int32 at ``pos``; return ``(value, next_pos)``."""
    # Inline fast path: lengths and deltas are nearly always one or two bytes.
    try:
        unsigned = buf[pos]
        if unsigned < 0x80:
            return (unsigned >> 1) ^ -(unsigned & 1), pos + 1
        unsigned = (unsigned & 0x7F) | (buf[pos + 1] << 7)
        if unsigned < TWO_BYTE_VARINT_END:
            return (unsigned >> 1) ^ -(unsigned & 1), pos + 2
    except IndexError:
        pass
    return _decode_zigzag(buf, pos, VARINT_BYTES_MAX, 32)


def decode_varlong(buf, pos: int) -> tuple[int, int]:
    """Read the zigzag int64 at ``pos``; return ``(value, next_pos)``."""
    try:
        unsigned = buf[pos]
        if unsigned < 0x80:
            return (unsigned >> 1) ^ -(unsigned & 1), pos + 1
    except IndexError:
        pass
    return _decode_zigzag(buf, pos, VARLONG_BYTES_MAX, 64)


def _decode_zigzag(buf, pos: int, bytes_max: int, bits: int) -> tuple[int, int]:
    end = min(len(buf), pos + bytes_max)
    unsigned = 0
    shift = 0
    for index in range(pos, end):
        byte = buf[index]
        unsigned |= (byte & 0x7F) << shift
        if byte < 0x80:
            if unsigned >> bits:
                raise InvalidRecordError(f"varint at {pos} overflows int{bits}")
            return (unsigned >> 1) ^ -(unsigned & 1), index + 1
        shift += 7
    if end == len(buf) and end - pos < bytes_max:
        raise InvalidRecordError(f"varint at {pos} runs past the end of the data")
    raise InvalidRecordError(f"varint at {pos} is longer than {bytes_max} bytes")


# ---------------------------------------------------------------------------------------------
# Encoding


def encode_batch(
    records: Sequence[RecordSpec | tuple],
    *,
    base_offset: int = 0,
    codec: int = codecs.CODEC_NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    is_transactional: bool = False,
    is_control: bool = False,
    log_append_time: bool = False,
) -> bytes:
    """One RecordBatch v2 holding ``records`` (``(key, value, headers, timestamp_ms)`` each)."""
    specs = [RecordSpec(*record) for record in records]
    if not specs:
        raise ValueError("a record batch needs at least one record")
    if codec not in codecs.CODEC_NAMES:
        raise ValueError(f"unknown compression codec {codec}")
    base_timestamp = specs[0].timestamp_ms
    plain = b"".join(_encode_record(spec, i, base_timestamp) for i, spec in enumerate(specs))
    body = codecs.compress(codec, plain)
    attributes = codec
    attributes |= TIMESTAMP_TYPE_BIT if log_append_time else 0
    attributes |= TRANSACTIONAL_BIT if is_transactional else 0
    attributes |= CONTROL_BIT if is_control else 0
    header_fields = [
        base_offset,
        HEADER_BYTES - LOG_OVERHEAD_BYTES + len(body),
        partition_leader_epoch,
        MAGIC_V2,
        0,  # CRC, computed once the rest is in place
        attributes,
        len(specs) - 1,  # lastOffsetDelta
        base_timestamp,
        max(spec.timestamp_ms for spec in specs),
        producer_id,
        producer_epoch,
        base_sequence,
        len(specs),
    ]
    return _sealed(header_fields, body)


def encode_retained(header: BatchHeader, records: Sequence[Record], *,
                    delete_horizon_ms: int | None = None) -> bytes:
    """The batch ``header`` describes, rewritten to hold only ``records`` (the log cleaner).

    Like Kafka's ``MemoryRecords.filterTo``: the base offset, last offset delta, producer id,
    epoch, base sequence, leader epoch, codec and attributes stay, so the batch still spans the
    same offsets and sequences; each record keeps its offset delta and timestamp. ``records``
    may be empty (a producer's last batch is kept for its sequence numbers). A
    ``delete_horizon_ms`` becomes the base timestamp, flagged by the delete horizon bit.
    """
    assert all(header.base_offset <= r.offset <= header.last_offset for r in records)
    base_timestamp = header.base_timestamp
    attributes = header.attributes
    if delete_horizon_ms is not None:
        base_timestamp = delete_horizon_ms
        attributes |= DELETE_HORIZON_BIT
    plain = b"".join(
        _encode_record(RecordSpec(r.key, r.value, r.headers, r.timestamp_ms),
                       r.offset - header.base_offset, base_timestamp)
        for r in records)
    body = codecs.compress(header.codec, plain) if records else b""
    # An empty batch is written uncompressed, as Kafka's writeEmptyHeader does.
    attributes = attributes if records else attributes & ~CODEC_MASK
    if header.is_log_append_time or not records:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = max(r.timestamp_ms for r in records)
    return _sealed([
        header.base_offset, HEADER_BYTES - LOG_OVERHEAD_BYTES + len(body),
        header.partition_leader_epoch, MAGIC_V2, 0, attributes, header.last_offset_delta,
        base_timestamp, max_timestamp, header.producer_id, header.producer_epoch,
        header.base_sequence, len(records),
    ], body)


def _sealed(header_fields: list[int], body: bytes) -> bytes:
    """Header and body, with the CRC-32C computed over ``attributes..end``."""
    batch = bytearray(HEADER_STRUCT.pack(*header_fields) + body)
    header_fields[CRC_FIELD_INDEX] = compute_crc(batch, 0, len(batch))
    HEADER_STRUCT.pack_into(batch, 0, *header_fields)
    return bytes(batch)


def _encode_record(spec: RecordSpec, offset_delta: int, base_timestamp: int) -> bytes:
    """One DefaultRecord, length prefix included."""
    parts = [
        b"\x00",  # attributes: unused by v2 records
        encode_varlong(spec.timestamp_ms - base_timestamp),
        encode_varint(offset_delta),
        _encode_bytes(spec.key),
        _encode_bytes(spec.value),
        encode_varint(len(spec.headers)),
    ]
    for header_key, header_value in spec.headers:
        parts.append(_encode_bytes(header_key.encode("utf-8")))
        parts.append(_encode_bytes(header_value))
    record = b"".join(parts)
    return encode_varint(len(record)) + record


def _encode_bytes(data: bytes | None) -> bytes:
    if data is None:
        return encode_varint(NULL_LENGTH)
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"record keys, values and header values are bytes, not {type(data)}")
    return encode_varint(len(data)) + bytes(data)


# ---------------------------------------------------------------------------------------------
# Decoding


def decode_batch(
    buf, pos: int = 0, *, decompressed_bytes_max: int = codecs.DECOMPRESSED_BYTES_MAX
) -> tuple[BatchHeader, list[Record]]:
    """Validate and decode the batch at ``pos`` of ``buf`` into its header and records.

    ``decompressed_bytes_max`` caps the size of the records once decompressed.
    """
    if len(buf) - pos < HEADER_BYTES:
        raise InvalidRecordError(f"{len(buf) - pos} bytes are too few for a batch header")
    header = check_batch(buf, pos, len(buf) - pos)
    with memoryview(buf) as view:
        compressed = view[pos + HEADER_BYTES : pos + header.size_bytes]
        try:
            body = codecs.decompress(
                header.codec, compressed, decompressed_bytes_max=decompressed_bytes_max
            )
        except codecs.CodecError as exc:
            raise InvalidRecordError(f"batch at offset {header.base_offset}: {exc}") from exc
        finally:
            compressed.release()
    return header, _decode_records_body(header, body)


class RecordKey(NamedTuple):
    """What compaction needs of a record: its offset, its key, and whether it is a tombstone."""

    offset: int
    key: bytes | None
    tombstone: bool


def decode_keys(buf, pos: int = 0, *,
                decompressed_bytes_max: int = codecs.DECOMPRESSED_BYTES_MAX) -> list[RecordKey]:
    """Offset, key and null-value flag of each record of the batch at ``pos``, which
    ``check_batch`` validated: the cleaner reads only these, so values and headers are
    skipped, not decoded. Malformed data raises ``InvalidRecordError``."""
    header = read_header(buf, pos)
    body = _body(buf, pos, header, decompressed_bytes_max)
    keys = []
    for offset_delta, field, end in _key_fields(body, header.records_count):
        key, field = _decode_bytes(body, field, end)
        value_length, _ = decode_varint(body, field)
        keys.append(RecordKey(header.base_offset + offset_delta, key, value_length == NULL_LENGTH))
    return keys


def has_keyless_record(buf, pos: int = 0, *,
                       decompressed_bytes_max: int = codecs.DECOMPRESSED_BYTES_MAX) -> bool:
    """Whether a record of the (validated) batch at ``pos`` has a null key: what a compacted
    topic's produce path asks, reading only each record's lengths up to its key."""
    header = read_header(buf, pos)
    body = _body(buf, pos, header, decompressed_bytes_max)
    return any(decode_varint(body, field)[0] == NULL_LENGTH
               for _delta, field, _end in _key_fields(body, header.records_count))


def keyless_record_indexes(buf, pos: int = 0, *,
                           decompressed_bytes_max: int = codecs.DECOMPRESSED_BYTES_MAX
                           ) -> list[int]:
    """Index within the (validated) batch at ``pos`` of each record with a null key: what a
    compacted topic's produce path answers per record (KIP-467's ``batch_index``)."""
    header = read_header(buf, pos)
    body = _body(buf, pos, header, decompressed_bytes_max)
    return [index for index, (_delta, field, _end)
            in enumerate(_key_fields(body, header.records_count))
            if decode_varint(body, field)[0] == NULL_LENGTH]


def _key_fields(body: bytes, count: int) -> Iterator[tuple[int, int, int]]:
    """Offset delta, position of the key and end of each of the ``count`` records."""
    at = 0
    for _ in range(count):
        length, at = decode_varint(body, at)
        end = at + length
        if length < RECORD_BYTES_MIN - 1 or end > len(body):
            raise InvalidRecordError(f"record of {length} bytes at {at} runs past the batch")
        _timestamp_delta, field = decode_varlong(body, at + 1)  # after the attributes byte
        offset_delta, field = decode_varint(body, field)
        yield offset_delta, field, end
        at = end
    if at != len(body):
        raise InvalidRecordError(f"{len(body) - at} bytes of trailing data after the records")


def _body(buf, pos: int, header: BatchHeader, decompressed_bytes_max: int) -> bytes:
    """The batch's records, decompressed with a bounded output."""
    with memoryview(buf) as view:
        compressed = view[pos + HEADER_BYTES : pos + header.size_bytes]
        try:
            return codecs.decompress(header.codec, compressed,
                                     decompressed_bytes_max=decompressed_bytes_max)
        except codecs.CodecError as exc:
            raise InvalidRecordError(f"batch at offset {header.base_offset}: {exc}") from exc
        finally:
            compressed.release()


def iter_batches_decoded(buf) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """Decode each batch of a concatenation; stop silently at a trailing partial batch."""
    pos = 0
    while pos < len(buf):
        if _is_partial_batch(buf, pos):
            return  # cut off by the fetch size limit, as Kafka allows
        header, records = decode_batch(buf, pos)
        yield header, records
        pos += header.size_bytes


def _is_partial_batch(buf, pos: int) -> bool:
    """Whether the data at ``pos`` is a valid-looking batch start cut off before its end."""
    if len(buf) - pos < LOG_OVERHEAD_BYTES:
        return True
    size_bytes = batch_size_at(buf, pos)
    return size_bytes >= HEADER_BYTES and size_bytes > len(buf) - pos


def decode_records(buf, *, include_control: bool = True) -> list[Record]:
    """All records of a concatenation of batches (a Fetch answer or a segment), in order."""
    records: list[Record] = []
    for header, batch_records in iter_batches_decoded(buf):
        if include_control or not header.is_control:
            records.extend(batch_records)
    return records


def _decode_records_body(header: BatchHeader, body: bytes) -> list[Record]:
    """Parse exactly ``header.records_count`` records that fill ``body``."""
    count = header.records_count
    if count > len(body) // RECORD_BYTES_MIN:
        raise InvalidRecordError(f"{count} records cannot fit in {len(body)} bytes")
    fixed_timestamp = header.max_timestamp if header.is_log_append_time else None
    records = []
    pos = 0
    for _ in range(count):
        record, pos = _decode_record(body, pos, header, fixed_timestamp)
        records.append(record)
    if pos != len(body):
        raise InvalidRecordError(f"{len(body) - pos} bytes of trailing data after the records")
    return records


def _decode_record(
    body: bytes, pos: int, header: BatchHeader, fixed_timestamp: int | None
) -> tuple[Record, int]:
    """The record at ``pos`` and the position after it."""
    length, pos = decode_varint(body, pos)
    end = pos + length
    if length < 0 or end > len(body):
        raise InvalidRecordError(f"record of {length} bytes at {pos} runs past the batch")
    timestamp_delta, pos = decode_varlong(body, pos + 1)  # skip attributes (unused)
    offset_delta, pos = decode_varint(body, pos)
    key, pos = _decode_bytes(body, pos, end)
    value, pos = _decode_bytes(body, pos, end)
    headers, pos = _decode_headers(body, pos, end)
    if pos != end:
        raise InvalidRecordError(f"record ending at {pos} does not match its length {length}")
    if fixed_timestamp is None:
        timestamp = header.base_timestamp + timestamp_delta
    else:
        timestamp = fixed_timestamp
    return Record(header.base_offset + offset_delta, timestamp, key, value, headers), end


def _decode_bytes(body: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    length, pos = decode_varint(body, pos)
    if length == NULL_LENGTH:
        return None, pos
    if length < 0 or pos + length > end:
        raise InvalidRecordError(f"field of {length} bytes at {pos} runs past its record")
    return body[pos : pos + length], pos + length


def _decode_headers(
    body: bytes, pos: int, end: int
) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    count, pos = decode_varint(body, pos)
    if count == 0:
        return (), pos
    if count < 0 or count > (end - pos) // 2:  # a header is at least two length bytes
        raise InvalidRecordError(f"{count} record headers cannot fit in {end - pos} bytes")
    headers = []
    for _ in range(count):
        raw_key, pos = _decode_bytes(body, pos, end)
        if raw_key is None:
            raise InvalidRecordError("record header key is null")
        try:
            key = raw_key.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRecordError("record header key is not UTF-8") from None
        value, pos = _decode_bytes(body, pos, end)
        headers.append((key, value))
    return tuple(headers), pos


# ---------------------------------------------------------------------------------------------
# Recompression (the leader's half of topic ``compression.type``)


def recompress_batch(buf, pos: int, codec: int, *,
                     decompressed_bytes_max: int = codecs.DECOMPRESSED_BYTES_MAX) -> bytes | None:
    """The (CRC-checked) batch at ``pos`` with its records compressed by ``codec``; None when it
    is left as it is: it uses ``codec`` already, or it is a control batch, or it is empty.

    Like Kafka's LogValidator when the topic's codec differs from the producer's: the records
    are checked (count, lengths, offset deltas 0..n-1) and their bytes kept exactly (keys,
    values, headers, timestamp deltas); in the header only the codec bits, the batch length and
    the CRC change. Base offset, leader epoch, timestamps, producer id, epoch, base sequence
    and the transactional bit stay, so offsets and LogAppendTime are assigned afterwards as for
    any batch. Malformed data raises ``InvalidRecordError``.
    """
    if codec not in codecs.CODEC_NAMES:
        raise ValueError(f"unknown compression codec {codec}")
    header = read_header(buf, pos)
    if header.codec == codec or header.is_control or header.records_count == 0:
        return None
    body = _body(buf, pos, header, decompressed_bytes_max)
    if header.records_count > len(body) // RECORD_BYTES_MIN:
        raise InvalidRecordError(
            f"{header.records_count} records cannot fit in {len(body)} bytes")
    for expected, (offset_delta, _field, _end) in enumerate(
            _key_fields(body, header.records_count)):
        if offset_delta != expected:
            raise InvalidRecordError(
                f"record {expected} of the batch has offset delta {offset_delta}")
    compressed = codecs.compress(codec, body)
    attributes = (header.attributes & ~CODEC_MASK) | codec
    return _sealed([
        header.base_offset, HEADER_BYTES - LOG_OVERHEAD_BYTES + len(compressed),
        header.partition_leader_epoch, MAGIC_V2, 0, attributes, header.last_offset_delta,
        header.base_timestamp, header.max_timestamp, header.producer_id, header.producer_epoch,
        header.base_sequence, header.records_count,
    ], compressed)


def recompress_batches(buf: bytearray, codec: int, *,
                       decompressed_bytes_max: int = codecs.DECOMPRESSED_BYTES_MAX) -> bytearray:
    """Every batch of ``buf`` (whole, CRC-checked batches) with ``codec``; ``buf`` itself, not a
    copy, when no batch needed rewriting."""
    rewritten: list[bytes] = []
    pos, changed = 0, False
    while pos < len(buf):
        size_bytes = batch_size_at(buf, pos)
        batch = recompress_batch(buf, pos, codec, decompressed_bytes_max=decompressed_bytes_max)
        changed = changed or batch is not None
        rewritten.append(bytes(buf[pos : pos + size_bytes]) if batch is None else batch)
        pos += size_bytes
    return bytearray(b"".join(rewritten)) if changed else buf
