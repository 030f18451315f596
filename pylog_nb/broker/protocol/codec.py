"""Kafka request/response framing on top of kio's generated message classes.

Theory of operation: a frame is an int32 size followed by a request header and a body. We read the
header by hand (it decides which body schema applies), then hand the body to kio's native reader
for the (api_key, version) pair. Handlers answer with plain dicts that do not care about the
version; ``to_entity`` turns such a dict into the kio dataclass of the requested version, dropping
fields that version lacks and filling the ones it needs with Kafka's zero values. Two hot
responses skip kio for the same bytes written by hand: Produce here (produce_response.py), Fetch
in its handler (fetch_response.py, which keeps records in the segment files). No I/O here.
"""

from __future__ import annotations

import datetime
import io
import struct
import typing
import uuid
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from functools import cache
from typing import Any

from kio.index import load_request_schema as _load_request_schema
from kio.index import load_response_schema as _load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.protocol import Payload

from . import produce_response
from .versions import API_VERSIONS, API_VERSIONS_KEY, PRODUCE_KEY, ApiRange

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_REQUEST_HEADER_FIXED = struct.Struct(">hhi")
ZERO_UUID = uuid.UUID(int=0)
_EPOCH = datetime.datetime.fromtimestamp(0, datetime.UTC)


class MalformedRequestError(ValueError):
    """The frame cannot be parsed; the connection that sent it is closed."""


class UnsupportedRequestError(ValueError):
    """A well-framed request for an API key or version this broker does not serve."""

    def __init__(self, header: RequestHeader, message: str) -> None:
        super().__init__(message)
        self.header = header


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


@dataclass(frozen=True, slots=True)
class Request:
    header: RequestHeader
    body: Any  # the kio request dataclass of header.api_key / header.api_version


def read_request_header(frame: bytes) -> tuple[RequestHeader, int]:
    """Decode the v1 part of a request header; return it and the position after client_id."""
    if len(frame) < _REQUEST_HEADER_FIXED.size + 2:
        raise MalformedRequestError(f"request of {len(frame)} bytes is shorter than a header")
    api_key, api_version, correlation_id = _REQUEST_HEADER_FIXED.unpack_from(frame, 0)
    pos = _REQUEST_HEADER_FIXED.size
    length = _I16.unpack_from(frame, pos)[0]
    pos += 2
    client_id = None
    if length >= 0:
        if pos + length > len(frame):
            raise MalformedRequestError("client_id runs past the end of the request")
        client_id = frame[pos : pos + length].decode("utf-8", "replace")
        pos += length
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos


def parse_request(frame: bytes) -> Request:
    """Decode one request frame (without its size prefix)."""
    header, pos = read_request_header(frame)
    supported = API_VERSIONS.get(header.api_key)
    if supported is None:
        raise UnsupportedRequestError(header, f"unknown API key {header.api_key}")
    if not supported.min_parsed <= header.api_version <= supported.max:
        raise UnsupportedRequestError(
            header, f"API {header.api_key} version {header.api_version} is not supported"
        )
    schema = load_request_schema(header.api_key, header.api_version)
    if _is_flexible_request(header.api_key, header.api_version):
        pos = _skip_tagged_fields(frame, pos)
    try:
        body, size = _reader(schema)(frame, pos)
    except Exception as error:  # kio raises assorted errors on bad bytes
        raise MalformedRequestError(
            f"cannot decode {schema.__name__} v{header.api_version}: {error}"
        ) from None
    # Like Kafka, ignore bytes after the body: librdkafka 2.x sends Metadata v12 with the v8-v10
    # include_cluster_authorized_operations flag still in it, which Kafka's parser never reads.
    assert pos + size <= len(frame)
    return Request(header, body)


def encode_response(header: RequestHeader, body: dict[str, Any]) -> memoryview:
    """Encode a response dict for the request's version, with the size prefix."""
    if header.api_key == PRODUCE_KEY and (
            produce_response.VERSION_MIN <= header.api_version <= produce_response.VERSION_MAX):
        return memoryview(produce_response.encode_produce_response(
            header.correlation_id, header.api_version, body))  # kio's bytes, hand-written
    schema = load_response_schema(header.api_key, header.api_version)
    return encode_entity(header, schema, body)


def encode_entity(
    header: RequestHeader, schema: type[Payload], body: dict[str, Any]
) -> memoryview:
    """Encode ``body`` as ``schema`` after a response header matching ``header``."""
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    buffer.write(_I32.pack(header.correlation_id))
    if schema.__flexible__ and header.api_key != API_VERSIONS_KEY:
        buffer.write(b"\0")  # response header v1: empty tagged fields
    _writer(schema)(buffer, to_entity(schema, body))
    frame = buffer.getbuffer()
    _I32.pack_into(frame, 0, len(frame) - 4)
    return frame.toreadonly()  # a view: no second copy of large Fetch responses


def encode_api_versions_error(header: RequestHeader, error_code: int) -> memoryview:
    """ApiVersions v0 body with an error and our ranges: what clients decode after error 35."""
    schema = load_response_schema(API_VERSIONS_KEY, 0)
    body = {"error_code": error_code, "api_keys": advertised_api_keys()}
    return encode_entity(header, schema, body)


def encode_request(
    api_key: int, api_version: int, correlation_id: int, client_id: str, body: dict[str, Any]
) -> bytes:
    """Client side (replica fetchers): a request frame with its size prefix."""
    schema = load_request_schema(api_key, api_version)
    name = client_id.encode()
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    buffer.write(_REQUEST_HEADER_FIXED.pack(api_key, api_version, correlation_id))
    buffer.write(_I16.pack(len(name)) + name)
    if schema.__flexible__:
        buffer.write(b"\0")
    _writer(schema)(buffer, to_entity(schema, body))
    frame = buffer.getbuffer()
    _I32.pack_into(frame, 0, len(frame) - 4)
    return bytes(frame)


def decode_response(api_key: int, api_version: int, frame: bytes) -> tuple[int, Any]:
    """Client side: (correlation id, response entity) from a frame without its size prefix."""
    schema = load_response_schema(api_key, api_version)
    correlation_id = _I32.unpack_from(frame, 0)[0]
    pos = 4
    if schema.__flexible__ and api_key != API_VERSIONS_KEY:
        pos = _skip_tagged_fields(frame, pos)
    return correlation_id, _reader(schema)(frame, pos)[0]


def advertised_api_keys() -> list[dict[str, int]]:
    return [
        {"api_key": key, "min_version": r.min_advertised, "max_version": r.max}
        for key, r in sorted(API_VERSIONS.items())
    ]


def to_entity(schema: type, data: Any) -> Any:
    """Build the kio dataclass ``schema`` from a plain dict, recursively."""
    if not isinstance(data, dict):
        return data  # already an entity
    kwargs = {}
    for name, convert, default in _plan(schema):
        value = data.get(name, MISSING)
        if value is MISSING:
            if default is not MISSING:
                continue
            value = None
        kwargs[name] = convert(value)
    return schema(**kwargs)


@cache
def _plan(schema: type) -> tuple:
    hints = typing.get_type_hints(schema)
    plan = []
    for f in fields(schema):
        has_default = f.default is not MISSING or f.default_factory is not MISSING
        convert = _converter(hints[f.name], f.metadata.get("kafka_type"))
        plan.append((f.name, convert, MISSING if not has_default else True))
    return tuple(plan)


def _converter(hint: Any, kafka_type: str | None):
    nullable = type(None) in typing.get_args(hint)
    if nullable:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if hasattr(hint, "__dataclass_fields__"):
        return lambda v: None if v is None else to_entity(hint, v)
    nested = _nested_entity(hint)
    if nested is not None:
        if nullable:
            return lambda v: None if v is None else tuple(to_entity(nested, i) for i in v)
        return lambda v: tuple(to_entity(nested, item) for item in (v or ()))
    if typing.get_origin(hint) is tuple:
        return lambda v: None if v is None and nullable else tuple(v or ())
    zero = None if nullable and kafka_type != "uuid" else _ZERO_BY_TYPE.get(kafka_type, 0)
    special = _SPECIAL_BY_TYPE.get(kafka_type)
    if special is not None:
        return lambda v: special(zero if v is None else v)
    return lambda v: zero if v is None else v


def _nested_entity(hint: Any) -> type | None:
    if typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        if args and hasattr(args[0], "__dataclass_fields__"):
            return args[0]
    return None


def duration_ms(value: Any) -> int:
    """A kio timedelta field (or plain milliseconds) as whole milliseconds."""
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


def _ms_to_datetime(value: Any) -> Any:
    if value is None or isinstance(value, datetime.datetime):
        return value
    if value < 0:
        return None
    return _EPOCH + datetime.timedelta(milliseconds=value)


def _ms_to_timedelta(value: Any) -> Any:
    if isinstance(value, datetime.timedelta):
        return value
    return datetime.timedelta(milliseconds=value)


_ZERO_BY_TYPE: dict[str | None, Any] = {
    "string": "",
    "bool": False,
    "uuid": ZERO_UUID,
    "bytes": b"",
    "records": None,
    "float64": 0.0,
}
_SPECIAL_BY_TYPE: dict[str | None, Callable[[Any], Any]] = {
    "timedelta_i32": _ms_to_timedelta,
    "timedelta_i64": _ms_to_timedelta,
    "datetime_i64": _ms_to_datetime,
    "error_code": ErrorCode,
}


@cache
def load_request_schema(api_key: int, api_version: int) -> type[Payload]:
    return _load_request_schema(api_key, api_version)


@cache
def load_response_schema(api_key: int, api_version: int) -> type[Payload]:
    return _load_response_schema(api_key, api_version)


@cache
def _reader(schema: type):
    return entity_reader(schema)


@cache
def _writer(schema: type):
    return entity_writer(schema)


@cache
def _is_flexible_request(api_key: int, api_version: int) -> bool:
    return bool(load_request_schema(api_key, api_version).__flexible__)


def _skip_tagged_fields(frame: bytes, pos: int) -> int:
    count, pos = _read_uvarint(frame, pos)
    for _ in range(count):
        _tag, pos = _read_uvarint(frame, pos)
        size, pos = _read_uvarint(frame, pos)
        pos += size
    if pos > len(frame):
        raise MalformedRequestError("tagged fields run past the end of the request header")
    return pos


UVARINT_BYTES_MAX = 5


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = 0
    for index in range(UVARINT_BYTES_MAX):
        if pos >= len(buf):
            raise MalformedRequestError("varint runs past the end of the request")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << (7 * index)
        if not byte & 0x80:
            return value, pos
    raise MalformedRequestError("varint longer than 5 bytes")


__all__ = [
    "ApiRange",
    "MalformedRequestError",
    "Request",
    "RequestHeader",
    "UnsupportedRequestError",
    "encode_api_versions_error",
    "encode_response",
    "parse_request",
    "to_entity",
]
