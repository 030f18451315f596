"""Snapshot files of a voter's replicated state (KIP-630), next to its ``RaftLog``.

Theory of operation. A snapshot is the state machine's committed state at a batch boundary of
the log, as records that rebuild it when folded from the empty state, stamped with its id: the
*end offset* (the offset after the last record it covers) and the *epoch* of the batch that
ends there, plus that batch's append time. Once a snapshot is durable the log's prefix before
its end offset can go: the log then starts there (its *log start offset*), and the snapshot id
stands for the batches it replaced in every offset/epoch question (``RaftLog.epoch_ending_at``,
voting, a follower's fetch position).

A file per snapshot, named as Kafka names them: ``<end offset, 20 digits>-<epoch, 10
digits>.checkpoint``. Its contents are one frame (big-endian)::

    length          u32   bytes after this field
    crc             u32   CRC-32C of every byte after this field
    end_offset      i64
    epoch           i32
    append_time_ms  i64   the append time of the last batch it covers
    count           u32   records
    records               ``count`` times: u32 length, then the bytes

``write`` makes it atomically: a ``.checkpoint.part`` file written whole, fsynced, renamed, then
the directory fsynced; a crash leaves either no snapshot or a whole one (and maybe a part file,
removed on the next ``newest``). ``newest`` picks the valid snapshot with the largest id: a file
whose frame is short, fails its CRC or disagrees with its name is removed, as is every older
snapshot (only the newest is ever needed).
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import crc32c

SUFFIX = ".checkpoint"
PART_SUFFIX = ".checkpoint.part"
_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
_FRAME = struct.Struct(">II")  # length, crc
_HEADER = struct.Struct(">qiqI")  # end_offset, epoch, append_time_ms, count
_LENGTH = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The state up to ``end_offset``, whose last batch was appended in ``epoch``."""

    end_offset: int
    epoch: int
    append_time_ms: int
    records: tuple[bytes, ...]

    def __post_init__(self) -> None:
        assert self.end_offset > 0 and self.epoch >= 0, (self.end_offset, self.epoch)
        assert self.append_time_ms >= 0, self.append_time_ms

    @property
    def snapshot_id(self) -> tuple[int, int]:
        """(end offset, epoch): Kafka's OffsetAndEpoch of a snapshot."""
        return self.end_offset, self.epoch


def read_records(body: bytes, at: int, count: int) -> list[bytes] | None:
    """``count`` records, each a u32 length then its bytes, from ``at`` to the end of ``body``;
    None if they do not fill it exactly (a torn or corrupt frame)."""
    records = []
    for _ in range(count):
        if at + _LENGTH.size > len(body):
            return None
        (size,) = _LENGTH.unpack_from(body, at)
        at += _LENGTH.size
        records.append(bytes(body[at : at + size]))
        at += size
    return records if at == len(body) else None


def file_name(snapshot_id: tuple[int, int]) -> str:
    end_offset, epoch = snapshot_id
    return f"{end_offset:020d}-{epoch:010d}{SUFFIX}"


def encode(snapshot: Snapshot) -> bytes:
    body = bytearray(_HEADER.pack(snapshot.end_offset, snapshot.epoch,
                                  snapshot.append_time_ms, len(snapshot.records)))
    for record in snapshot.records:
        body += _LENGTH.pack(len(record))
        body += record
    return _FRAME.pack(len(body) + 4, crc32c.crc32c(body)) + bytes(body)


def decode(data: bytes) -> Snapshot | None:
    """The snapshot ``data`` holds, or None if it is torn or corrupt."""
    if len(data) < _FRAME.size + _HEADER.size:
        return None
    length, crc = _FRAME.unpack_from(data, 0)
    body = data[_FRAME.size:]
    if length != len(data) - 4 or crc32c.crc32c(body) != crc:
        return None
    end_offset, epoch, append_time_ms, count = _HEADER.unpack_from(body, 0)
    records = read_records(body, _HEADER.size, count)
    if records is None or end_offset <= 0 or epoch < 0 or append_time_ms < 0:
        return None
    return Snapshot(end_offset, epoch, append_time_ms, tuple(records))


def write(directory: Path, snapshot: Snapshot, *, fsync: bool = True) -> Path:
    """Write ``snapshot`` atomically and durably into ``directory``; its path."""
    path = directory / file_name(snapshot.snapshot_id)
    part = path.with_name(path.name[: -len(SUFFIX)] + PART_SUFFIX)
    with open(part, "wb") as out:
        out.write(encode(snapshot))
        out.flush()
        if fsync:
            os.fsync(out.fileno())
    os.replace(part, path)
    if fsync:
        sync_directory(directory)
    return path


def newest(directory: Path) -> Snapshot | None:
    """The valid snapshot with the largest id in ``directory``; every other snapshot file
    (older, torn, misnamed) and every part file is removed."""
    found: Snapshot | None = None
    for path in sorted(directory.glob("*" + SUFFIX), reverse=True):  # largest id first
        match = _NAME.match(path.name)
        snapshot = None if match is None or found is not None else decode(path.read_bytes())
        if snapshot is not None and match is not None and snapshot.snapshot_id == (
                int(match[1]), int(match[2])):
            found = snapshot
        else:
            path.unlink()
    for part in directory.glob("*" + PART_SUFFIX):
        part.unlink()
    return found


def remove_except(directory: Path, keep: tuple[int, int]) -> None:
    """Remove every snapshot file but the one of id ``keep``."""
    for path in directory.glob("*" + SUFFIX):
        if path.name != file_name(keep):
            path.unlink()


def sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
