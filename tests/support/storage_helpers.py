"""Helpers shared by the storage tests (no tests here): build v2 batches, decode fetched bytes."""

from __future__ import annotations

from pathlib import Path

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from pylog_nb.broker.records.header import read_header
from pylog_nb.broker.storage import Log, LogConfig


def build_batch(
    values,
    *,
    timestamp_ms: int = 1_000,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytearray:
    """A valid uncompressed v2 batch with base offset 0, one record per value."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=10**8,
    )
    for i, value in enumerate(values):
        builder.append(i, timestamp_ms + i, None, value, [])
    return builder.build()


def batch_of(count: int, tag: str = "v", size: int = 10, **kwargs) -> bytearray:
    return build_batch([f"{tag}{i}".encode().ljust(size, b".") for i in range(count)], **kwargs)


def batches_in(data: bytes) -> list:
    """Headers of every batch in ``data`` (whole batches only)."""
    headers, pos = [], 0
    while pos < len(data):
        header = read_header(data, pos)
        headers.append(header)
        pos += header.size_bytes
    assert pos == len(data), "fetched data must be whole batches"
    return headers


def records_in(data: bytes) -> list[tuple[int, bytes]]:
    """``(offset, value)`` of every record in ``data``."""
    out, pos = [], 0
    for header in batches_in(data):
        batch = DefaultRecordBatch(bytes(data[pos : pos + header.size_bytes]))
        out.extend((record.offset, record.value) for record in batch)
        pos += header.size_bytes
    return out


def read_all(log: Log, start: int | None = None, max_bytes: int = 700) -> list[tuple[int, bytes]]:
    """Every record from ``start`` (default: log start) to the LEO, fetching like a consumer."""
    offset = log.log_start_offset if start is None else start
    out: list[tuple[int, bytes]] = []
    while offset < log.log_end_offset:
        data = log.read(offset, max_bytes).read_bytes()
        assert data, f"no progress at offset {offset}"
        records = [r for r in records_in(data) if r[0] >= offset]
        out.extend(records)
        offset = batches_in(data)[-1].next_offset
    return out


def dir_contents(path: Path) -> dict[str, bytes]:
    """Name -> bytes of every file in a directory, to prove an operation wrote nothing."""
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}


def small_config(**overrides) -> LogConfig:
    settings = {"segment_bytes": 1024, "index_interval_bytes": 128, "retention_ms": -1}
    settings.update(overrides)
    return LogConfig(**settings)


class FakeClock:
    """An injectable clock: ``Log.open(..., now_ms=clock)``."""

    def __init__(self, now_ms: int = 1_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms
