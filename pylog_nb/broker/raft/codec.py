"""Raft messages as JSON objects on the wire between voters, and back.

A message is ``{"kind": <class name>, ...its fields}``; a batch's records and a snapshot's are
base64, an error is its Kafka code, a pair ([epoch, end offset], [end offset, epoch]) a list,
the rest plain JSON. Decoding checks every field's type, so a malformed frame
from a peer is a ``ValueError`` for the shell to log and drop, never a half-built message in the
core.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import fields
from typing import Any

from ..errors import Errors
from .log import BATCH_RECORDS_MAX, Batch
from .messages import (
    FETCH_ERRORS,
    BeginQuorumEpoch,
    BeginQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    VoteRequest,
    VoteResponse,
)

KINDS: dict[str, type] = {kind.__name__: kind for kind in (
    VoteRequest, VoteResponse, BeginQuorumEpoch, BeginQuorumEpochResponse, FetchRequest,
    FetchResponse, FetchSnapshotRequest, FetchSnapshotResponse)}
PAIRS = ("diverging", "snapshot_id")


def encode_message(message: Message) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": type(message).__name__}
    for field in fields(message):
        value = getattr(message, field.name)
        if field.name == "batches":
            value = [_encode_batch(b) for b in value]
        elif field.name in PAIRS and value is not None:
            value = list(value)
        elif field.name == "records":
            value = [base64.b64encode(r).decode() for r in value]
        elif field.name == "error":
            value = int(value)
        body[field.name] = value
    return body


def decode_message(body: dict[str, Any]) -> Message:
    """The message ``body`` holds; ValueError if it is not one."""
    name = body.get("kind") if isinstance(body, dict) else None
    kind = KINDS.get(name) if isinstance(name, str) else None
    if kind is None:
        raise ValueError(f"unknown raft message kind {str(body)[:80]!r}")
    values = {}
    for field in fields(kind):
        if field.name not in body:
            raise ValueError(f"{kind.__name__} without {field.name}")
        values[field.name] = _decode_field(kind.__name__, field.name, body[field.name])
    return kind(**values)


def _decode_field(kind: str, name: str, value: Any) -> Any:
    if name == "batches":
        if not isinstance(value, list):
            raise ValueError(f"{kind}.batches must be a list")
        return tuple(_decode_batch(b) for b in value)
    if name in PAIRS:
        if value is None:
            return None
        if not (isinstance(value, list) and len(value) == 2
                and all(_is_int(v) and v >= 0 for v in value)):
            raise ValueError(f"{kind}.{name} must be a pair of non-negative integers")
        return (value[0], value[1])
    if name == "records":
        if not isinstance(value, list) or not all(isinstance(r, str) for r in value):
            raise ValueError(f"{kind}.records must be a list of base64 strings")
        try:
            return tuple(base64.b64decode(r, validate=True) for r in value)
        except binascii.Error as error:
            raise ValueError(f"{kind}.records: {error}") from error
    if name in ("pre_vote", "granted"):
        if type(value) is not bool:
            raise ValueError(f"{kind}.{name} must be true or false")
        return value
    if name == "error":
        if not _is_int(value) or value not in FETCH_ERRORS:
            raise ValueError(f"{kind}.error {str(value)[:40]!r} is not a fetch error code")
        return Errors(value)
    if name == "leader_id" and value is None:
        return None
    if not _is_int(value) or value < 0:
        raise ValueError(f"{kind}.{name} must be a non-negative integer")
    return value


def _is_int(value: Any) -> bool:
    return type(value) is int


def _encode_batch(batch: Batch) -> dict[str, Any]:
    return {"base_offset": batch.base_offset, "epoch": batch.epoch, "control": batch.control,
            "append_time_ms": batch.append_time_ms,
            "records": [base64.b64encode(r).decode() for r in batch.records]}


def _decode_batch(value: Any) -> Batch:
    try:
        records = value["records"]
        if not isinstance(records, list) or not 0 < len(records) <= BATCH_RECORDS_MAX:
            raise ValueError("a batch holds 1 to BATCH_RECORDS_MAX records")
        base, epoch, control = value["base_offset"], value["epoch"], value["control"]
        append_time_ms = value["append_time_ms"]
        if not (_is_int(base) and _is_int(epoch) and base >= 0 and epoch >= 0
                and type(control) is bool and _is_int(append_time_ms) and append_time_ms >= 0):
            raise ValueError("a batch's base offset, epoch and append time are non-negative "
                             "integers")
        return Batch(base, epoch, tuple(base64.b64decode(r, validate=True) for r in records),
                     control, append_time_ms)
    except (KeyError, TypeError, binascii.Error) as error:
        raise ValueError(f"malformed batch: {error}") from error
