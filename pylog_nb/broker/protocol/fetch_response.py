"""A hand-written FetchResponse encoder (v4-v16) whose records stay in the segment files.

Theory of operation: every other response is shaped by kio, which needs the records as bytes in
memory. Fetch is the hot path, so this encoder emits a list of pieces instead: ``bytes`` for the
framing it writes and ``FileRange`` for each partition's records, which the server hands to
``loop.sendfile`` (zero-copy: the kernel moves pages from the page cache to the socket). The
byte layout is checked against kio's encoder for every version in tests/broker.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from .schema import uvarint

FLEXIBLE_FROM_VERSION = 12
TOPIC_ID_FROM_VERSION = 13
NODE_ENDPOINTS_FROM_VERSION = 16
TAG_DIVERGING_EPOCH = 0
TAG_CURRENT_LEADER = 1
TAG_NODE_ENDPOINTS = 0

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_PARTITION_FIXED = struct.Struct(">ihqq")  # index, error, high watermark, last stable offset


@dataclass(frozen=True, slots=True)
class FileRange:
    """``size_bytes`` bytes of an open file from ``position``, to be sent with sendfile."""

    fd: int
    position: int
    size_bytes: int


Piece = bytes | FileRange


class _Writer:
    """Collects pieces, merging adjacent bytes."""

    def __init__(self) -> None:
        self.pieces: list[Piece] = []
        self._buffer = bytearray()

    def bytes(self, data: bytes) -> None:
        self._buffer += data

    def file(self, file_range: FileRange) -> None:
        self._flush()
        self.pieces.append(file_range)

    def _flush(self) -> None:
        if self._buffer:
            self.pieces.append(bytes(self._buffer))
            self._buffer = bytearray()

    def done(self) -> list[Piece]:
        self._flush()
        return self.pieces


def _array_length(count: int, flexible: bool) -> bytes:
    return uvarint(count + 1) if flexible else _I32.pack(count)


def _string(text: str, flexible: bool) -> bytes:
    data = text.encode()
    return (uvarint(len(data) + 1) if flexible else _I16.pack(len(data))) + data


def _tags(tags: list[tuple[int, bytes]]) -> bytes:
    out = uvarint(len(tags))
    for tag, data in tags:
        out += uvarint(tag) + uvarint(len(data)) + data
    return out


def encode_fetch_response(correlation_id: int, version: int, body: dict[str, Any]) -> list[Piece]:
    """Encode a Fetch response (with its size prefix) as pieces to write in order."""
    assert 4 <= version <= 16, version
    flexible = version >= FLEXIBLE_FROM_VERSION
    out = _Writer()
    out.bytes(_I32.pack(correlation_id) + (b"\0" if flexible else b""))
    out.bytes(_I32.pack(body.get("throttle_time_ms", 0)))
    if version >= 7:
        out.bytes(_I16.pack(body.get("error_code", 0)) + _I32.pack(body.get("session_id", 0)))
    topics = body.get("responses", [])
    out.bytes(_array_length(len(topics), flexible))
    for topic in topics:
        _topic(out, topic, version, flexible)
    if flexible:
        tags = []
        if version >= NODE_ENDPOINTS_FROM_VERSION and body.get("node_endpoints"):
            tags.append((TAG_NODE_ENDPOINTS, _node_endpoints(body["node_endpoints"])))
        out.bytes(_tags(tags))
    pieces = out.done()
    size_bytes = sum(len(p) if isinstance(p, bytes) else p.size_bytes for p in pieces)
    return [_I32.pack(size_bytes), *pieces]


def _topic(out: _Writer, topic: dict, version: int, flexible: bool) -> None:
    if version >= TOPIC_ID_FROM_VERSION:
        out.bytes(topic["topic_id"].bytes)
    else:
        out.bytes(_string(topic["topic"], flexible))
    partitions = topic["partitions"]
    out.bytes(_array_length(len(partitions), flexible))
    for partition in partitions:
        _partition(out, partition, version, flexible)
    if flexible:
        out.bytes(b"\0")


def _partition(out: _Writer, p: dict, version: int, flexible: bool) -> None:
    out.bytes(_PARTITION_FIXED.pack(p["partition_index"], p["error_code"], p["high_watermark"],
                                    p.get("last_stable_offset", -1)))
    if version >= 5:
        out.bytes(_I64.pack(p.get("log_start_offset", -1)))
    aborted = p.get("aborted_transactions")  # null for read_uncommitted, as Kafka answers
    if aborted is None:
        out.bytes(_array_length(-1, flexible))
    else:
        out.bytes(_array_length(len(aborted), flexible))
        for txn in aborted:
            out.bytes(_I64.pack(txn["producer_id"]) + _I64.pack(txn["first_offset"])
                      + (b"\0" if flexible else b""))
    if version >= 11:
        out.bytes(_I32.pack(p.get("preferred_read_replica", -1)))
    _records(out, p.get("records"), flexible)
    if flexible:
        out.bytes(_tags(_partition_tags(p)))


def _records(out: _Writer, records: bytes | FileRange | None, flexible: bool) -> None:
    if records is None:
        records = b""  # Kafka answers empty, never null: librdkafka 2.0 misreads a null set
    size_bytes = records.size_bytes if isinstance(records, FileRange) else len(records)
    out.bytes(uvarint(size_bytes + 1) if flexible else _I32.pack(size_bytes))
    if isinstance(records, FileRange):
        if size_bytes:
            out.file(records)
    else:
        out.bytes(records)


def _partition_tags(p: dict) -> list[tuple[int, bytes]]:
    tags = []
    diverging = p.get("diverging_epoch")
    if diverging is not None:
        tags.append((TAG_DIVERGING_EPOCH,
                     _I32.pack(diverging["epoch"]) + _I64.pack(diverging["end_offset"]) + b"\0"))
    leader = p.get("current_leader")
    if leader is not None:
        tags.append((TAG_CURRENT_LEADER,
                     _I32.pack(leader["leader_id"]) + _I32.pack(leader["leader_epoch"]) + b"\0"))
    return tags


def _node_endpoints(nodes: list[dict]) -> bytes:
    out = uvarint(len(nodes) + 1)
    for node in nodes:
        rack = node.get("rack")
        out += _I32.pack(node["node_id"]) + _string(node["host"], True) + _I32.pack(node["port"])
        out += uvarint(0) if rack is None else _string(rack, True)
        out += b"\0"
    return out
