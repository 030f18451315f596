"""Kafka's LogValidator: what a leader checks in a producer's batches before appending them.

Theory of operation: a Produce request's records for one partition are refused whole or written
whole; nothing is appended until every batch passed.

- Batch-level rules (header only, no decompression): the record set fits ``max.message.bytes``;
  each batch is whole, magic v2, with a known codec and a matching CRC-32C
  (``header.check_batch``); its record count equals ``lastOffsetDelta + 1``; it is no control
  batch. A breach refuses the request's partition with CORRUPT_MESSAGE.
- Record-level rules (KIP-467): a compacted topic keeps records by key, so each record needs
  one. Every record breaking a rule becomes a ``RecordError`` (its index within its batch and
  why); the first batch with any raises ``RecordValidationError`` carrying all of that batch's
  errors, answered as INVALID_RECORD with ``record_errors`` (Produce v8+) so the client can
  tell the culprits from the records that failed only because they shared their batch.

Only compacted topics decompress what a producer sends, to read the keys.

Once validated, a leader's batches may be rewritten in the topic's codec (``recompress``, the
size limit checked again on what is stored), then get their offsets from the LEO, the leader
epoch and, for LogAppendTime topics, the broker's time patched in place (``assign_offsets``).
A follower's batches keep the leader's offsets: ``validate_follower_records`` checks their CRCs
and that offsets never go back, and drops a partial batch at the end of a fetch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pylog_nb.broker.records.batch import keyless_record_indexes, recompress_batches
from pylog_nb.broker.records.header import (
    BatchHeader,
    InvalidRecordError,
    ParsedBatches,
    batch_size_at,
    check_batch,
    check_parsed,
    parse_batches,
    read_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)

from .config import LogConfig
from .errors import (
    CorruptRecordError,
    KeylessRecordError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
)
from .index import NO_TIMESTAMP

__all__ = [
    "RecordError",
    "RecordValidationError",
    "assign_offsets",
    "recompress",
    "validate_follower_records",
    "validate_leader_records",
]

# Kafka's message for a refused batch names at most its first three record errors.
RECORD_ERRORS_SHOWN_MAX = 3


@dataclass(frozen=True, slots=True)
class RecordError:
    """One refused record (Kafka's ``ProduceResponse.RecordError``): its index within its
    batch, and why."""

    batch_index: int
    message: str


class RecordValidationError(KeylessRecordError):
    """Records of a batch broke record-level rules (Kafka's RecordValidationException):
    INVALID_RECORD for the partition, with one ``RecordError`` per culprit."""

    def __init__(self, record_errors: Sequence[RecordError]) -> None:
        assert record_errors, "a record validation error names at least one record"
        self.record_errors = tuple(record_errors)
        shown = ", ".join(f"batch index {e.batch_index}: {e.message}"
                          for e in self.record_errors[:RECORD_ERRORS_SHOWN_MAX])
        super().__init__(f"One or more records have been rejected due to "
                         f"{len(self.record_errors)} record errors in total, the first: {shown}")


def validate_leader_records(parsed: ParsedBatches, config: LogConfig, topic_partition: str
                            ) -> list[tuple[int, BatchHeader]]:
    """``(position, header)`` of each batch of a producer's record set for ``topic_partition``
    (its headers read once, by Produce); raise if the set must be refused (see the module
    docstring)."""
    buf = parsed.records
    if len(buf) > config.max_message_bytes:
        raise RecordTooLargeError(
            f"record set of {len(buf)} bytes is larger than max_message_bytes "
            f"{config.max_message_bytes}"
        )
    try:
        check_parsed(parsed, len(buf))
    except CorruptRecordError:
        raise
    except InvalidRecordError as error:
        raise CorruptRecordError(str(error)) from error
    for pos, header in parsed.batches:
        validate_batch(header)
        if config.compact:
            _check_keys(buf, pos, topic_partition)
    return list(parsed.batches)


def validate_batch(header: BatchHeader) -> None:
    """The batch-level rules a producer's batch obeys beyond ``check_batch``."""
    if header.records_count == 0 or header.records_count != header.last_offset_delta + 1:
        raise CorruptRecordError("record count does not match last offset delta")
    if header.is_control:
        raise CorruptRecordError("producers may not write control batches")


def _check_keys(buf, pos: int, topic_partition: str) -> None:
    """Every record of the batch at ``pos`` has a key (Kafka's ``validateKey``)."""
    try:
        keyless = keyless_record_indexes(buf, pos)
    except InvalidRecordError as error:
        raise CorruptRecordError(str(error)) from error
    if keyless:
        message = ("Compacted topic cannot accept message without key in topic partition "
                   f"{topic_partition}")
        raise RecordValidationError([RecordError(index, message) for index in keyless])


def recompress(buf: bytearray, batches: list[tuple[int, BatchHeader]], codec: int,
               max_message_bytes: int) -> tuple[bytearray, list[tuple[int, BatchHeader]]]:
    """``buf`` with every batch in ``codec`` (the same buffer if all were), and its batches;
    the size limit holds for what is stored."""
    try:
        rewritten = recompress_batches(buf, codec)
    except InvalidRecordError as error:
        raise CorruptRecordError(str(error)) from error
    if rewritten is buf:
        return buf, batches
    if len(rewritten) > max_message_bytes:
        raise RecordTooLargeError(
            f"record set of {len(rewritten)} bytes once recompressed is larger than "
            f"max_message_bytes {max_message_bytes}")
    return rewritten, list(parse_batches(rewritten).batches)


def assign_offsets(buf: bytearray, batches: list[tuple[int, BatchHeader]], base_offset: int,
                   leader_epoch: int, append_time_ms: int) -> list[tuple[int, BatchHeader]]:
    """Patch offsets from ``base_offset``, ``leader_epoch`` and LogAppendTime (unless
    NO_TIMESTAMP) into ``buf``; the batches' headers as they now read."""
    offset = base_offset
    assigned = []
    for pos, header in batches:
        set_base_offset(buf, pos, offset)
        set_partition_leader_epoch(buf, pos, leader_epoch)
        if append_time_ms != NO_TIMESTAMP:
            set_log_append_time(buf, pos, header.size_bytes, append_time_ms)
            header = read_header(buf, pos)  # attributes, max timestamp and CRC changed
        assigned.append(
            (pos, header._replace(base_offset=offset, partition_leader_epoch=leader_epoch)))
        offset += header.last_offset_delta + 1
    return assigned


def validate_follower_records(buf: bytearray, next_offset: int
                              ) -> list[tuple[int, BatchHeader]]:
    """The whole valid batches at the start of ``buf`` (a fetch from the leader), the first at
    or after ``next_offset`` (the LEO); raise on a corrupt one or on offsets going back."""
    pos = 0
    batches = []
    while pos < len(buf):
        size_bytes = batch_size_at(buf, pos)
        if size_bytes < 0 or pos + size_bytes > len(buf):
            break  # a partial batch at the end of a fetch response
        try:
            header = check_batch(buf, pos, len(buf))
        except InvalidRecordError as error:
            raise CorruptRecordError(str(error)) from error
        if header.base_offset < next_offset:  # a gap is a batch the cleaner removed
            raise UnexpectedAppendOffsetError(
                f"follower batch starts at offset {header.base_offset}, expected at least "
                f"{next_offset}"
            )
        next_offset = header.next_offset
        batches.append((pos, header))
        pos += size_bytes
    return batches
