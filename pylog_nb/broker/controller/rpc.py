"""The controller RPC: its wire format, an asyncio client, and a blocking one-shot call.

Wire format (loopback only). Every message is one *frame*: an int32 big-endian length, then that
many bytes holding one UTF-8 JSON object::

    request   {"id": int, "method": str, "params": {...}}
    response  {"id": int, "error_code": int, "message": str, "result": any}

``error_code`` is a Kafka error code (0: success, ``result`` holds the value; otherwise
``message`` is one line and ``result`` is null). The methods and their shapes are listed in
``server.py``.

Theory of operation (client): the server answers the requests of one connection in order, one at
a time, so a long-polling ``fetch_metadata`` holds up only its own connection. The client
therefore gives every call in flight a connection of its own, taken from a small pool of idle
ones (or newly opened), instead of multiplexing request ids over one connection that the server
could not serve out of order. Concurrent calls from several tasks never wait behind each other.

A dropped connection (the controller restarted, was killed, or closed a stale pooled connection)
is retried on a fresh one with a bounded, growing backoff, then ConnectionError. A call whose
request may already have reached the controller is retried only if repeating it is harmless
(``IDEMPOTENT_METHODS``); otherwise the caller gets ConnectionError ("outcome unknown") and
decides, as with Kafka's own admin requests.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import struct
from typing import Any, Self

from ..errors import Errors, KafkaError
from .records import MetadataRecord, record_from_json

__all__ = [
    "CALL_TIMEOUT_MS",
    "IDEMPOTENT_METHODS",
    "RECONNECT_ATTEMPTS_MAX",
    "REQUEST_BYTES_MAX",
    "RESPONSE_BYTES_MAX",
    "ControllerClient",
    "ControllerRpcError",
    "FrameError",
    "call_once",
    "decode_records",
    "encode_frame",
    "parse_frame",
    "read_frame",
]

_SIZE = struct.Struct(">i")
# The largest real request is create_topic with a manual assignment of PARTITIONS_MAX partitions
# (well under 1 MiB); the bound caps what one peer can make the controller buffer.
REQUEST_BYTES_MAX = 16 * 1024 * 1024
# A fetch_metadata response carries at least one whole metadata batch (up to 16 MiB), and
# describe() the whole image; above this the server answers an error instead.
RESPONSE_BYTES_MAX = 64 * 1024 * 1024
# Above the longest legitimate wait (fetch_metadata adds its max_wait_ms on top): a controller
# that does not answer within this is paused or wedged, and the caller should know.
CALL_TIMEOUT_MS = 10_000
CONNECT_TIMEOUT_MS = 2_000
# Enough to ride out a controller restart (process start and log replay, about a second).
RECONNECT_ATTEMPTS_MAX = 10
RECONNECT_BACKOFF_MS_INITIAL = 50
# The backoff doubles up to this (about 6.5 s in all). It stays below the broker session timeout,
# so a broker riding out a controller restart heartbeats again within the restart grace period.
RECONNECT_BACKOFF_MS_MAX = 1_000
CONNECTIONS_MAX = 16  # calls in flight per client; more wait for a connection
IDLE_CONNECTIONS_MAX = 4  # kept open for reuse; the rest close after their call
# Repeating these after a lost response changes nothing (a producer id block is at worst wasted).
IDEMPOTENT_METHODS = frozenset(
    {"register_broker", "heartbeat", "fetch_metadata", "describe", "allocate_producer_ids"}
)


class FrameError(ValueError):
    """A frame broke the wire format (size out of bounds, not UTF-8 JSON, wrong shape)."""


class ControllerRpcError(KafkaError):
    """The controller refused a call: a Kafka error code and a one-line message."""

    def __init__(self, error_code: int, message: str) -> None:
        assert error_code != Errors.NONE, "an error needs a non-zero code"
        super().__init__(message)
        self.error_code = error_code
        self.message = message

    def __repr__(self) -> str:
        return f"ControllerRpcError({self.error_code}, {self.message!r})"


# -- framing ---------------------------------------------------------------------------------------


def encode_frame(message: dict[str, Any]) -> bytes:
    """One frame holding ``message`` as compact JSON."""
    payload = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
    return _SIZE.pack(len(payload)) + payload


def parse_frame(payload: bytes) -> dict[str, Any]:
    """The JSON object in a frame's payload, or FrameError."""
    try:
        message = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise FrameError(f"frame is not UTF-8 JSON: {str(error)[:100]}") from None
    if not isinstance(message, dict):
        raise FrameError(f"frame holds a JSON {type(message).__name__}, not an object")
    if type(message.get("id")) is not int:
        raise FrameError("frame has no integer id")
    return message


async def read_frame(reader: asyncio.StreamReader, size_max: int) -> bytes | None:
    """The next frame's payload; None at a clean end of stream between frames."""
    try:
        head = await reader.readexactly(_SIZE.size)
    except asyncio.IncompleteReadError as error:
        if error.partial:
            raise  # the peer went away mid-frame: a dropped connection, not a bad frame
        return None
    size = _SIZE.unpack(head)[0]
    if not 0 <= size <= size_max:
        raise FrameError(f"frame of {size} bytes is outside 0..{size_max}")
    return await reader.readexactly(size)


def _check_response(message: dict[str, Any], request_id: int) -> Any:
    if message["id"] != request_id:
        raise FrameError(f"response id {message['id']} does not match request {request_id}")
    code = message.get("error_code")
    if type(code) is not int:
        raise FrameError("response has no integer error_code")
    if code != Errors.NONE:
        raise ControllerRpcError(code, str(message.get("message", "")))
    return message.get("result")


def _wait_ms(params: dict[str, Any]) -> int:
    """How long the server may legitimately hold this call (a long poll's max_wait_ms)."""
    wait_ms = params.get("max_wait_ms")
    return wait_ms if type(wait_ms) is int and wait_ms > 0 else 0


def decode_records(result: dict[str, Any]) -> list[MetadataRecord]:
    """The metadata records of a fetch_metadata result, as record objects."""
    return [record_from_json(json.dumps(r)) for r in result["records"]]


# -- asyncio client --------------------------------------------------------------------------------


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @property
    def usable(self) -> bool:
        return not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


class _LostConnection(ConnectionError):
    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


class ControllerClient:
    """Calls the controller RPC from asyncio, from any number of tasks at once.

    >>> client = ControllerClient("127.0.0.1", port)
    >>> await client.call("heartbeat", broker_id=1, incarnation_id=incarnation)
    {'fenced': False, 'metadata_end_offset': 42}
    """

    def __init__(self, host: str, port: int, *, call_timeout_ms: int = CALL_TIMEOUT_MS) -> None:
        assert call_timeout_ms > 0, call_timeout_ms
        self.host = host
        self.port = port
        self.call_timeout_ms = call_timeout_ms
        self._ids = itertools.count(1)
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(CONNECTIONS_MAX)
        self._closed = False

    async def call(self, method: str, /, **params: Any) -> Any:
        """Call ``method`` and return its result; ControllerRpcError if the controller refuses,
        ConnectionError if it stays unreachable, TimeoutError if it does not answer."""
        frame_id = next(self._ids)
        frame = encode_frame({"id": frame_id, "method": method, "params": params})
        assert len(frame) - _SIZE.size <= REQUEST_BYTES_MAX, f"{method} request is too large"
        timeout_ms = self.call_timeout_ms + _wait_ms(params)
        backoff_ms = RECONNECT_BACKOFF_MS_INITIAL
        last_error: Exception | None = None
        async with self._slots:
            for attempt in range(RECONNECT_ATTEMPTS_MAX + 1):
                if self._closed:
                    raise ConnectionError("controller client is closed")
                try:
                    return await self._exchange(frame, frame_id, timeout_ms)
                except _LostConnection as error:
                    if error.sent and method not in IDEMPOTENT_METHODS:
                        raise ConnectionError(
                            f"connection to the controller lost during {method}; outcome unknown"
                        ) from None
                    last_error = error
                if attempt < RECONNECT_ATTEMPTS_MAX:
                    await asyncio.sleep(backoff_ms / 1000)
                    backoff_ms = min(2 * backoff_ms, RECONNECT_BACKOFF_MS_MAX)
        raise ConnectionError(
            f"controller at {self.host}:{self.port} unreachable after "
            f"{RECONNECT_ATTEMPTS_MAX + 1} attempts: {last_error}"
        )

    async def _exchange(self, frame: bytes, frame_id: int, timeout_ms: int) -> Any:
        connection = await self._connection()
        sent = False
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                connection.writer.write(frame)
                sent = True
                await connection.writer.drain()
                payload = await read_frame(connection.reader, RESPONSE_BYTES_MAX)
            if payload is None:
                raise _LostConnection("controller closed the connection", sent=True)
            result = _check_response(parse_frame(payload), frame_id)
        except ControllerRpcError:
            self._release(connection)
            raise
        except (ConnectionError, asyncio.IncompleteReadError) as error:
            connection.close()
            raise _LostConnection(str(error) or type(error).__name__, sent=sent) from None
        except BaseException:  # timeout, cancellation, bad frame: the stream is out of step
            connection.close()
            raise
        self._release(connection)
        return result

    async def _connection(self) -> _Connection:
        while self._idle:
            connection = self._idle.pop()
            if connection.usable:
                return connection
            connection.close()
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_MS / 1000):
                reader, writer = await asyncio.open_connection(self.host, self.port)
        except (OSError, TimeoutError) as error:
            raise _LostConnection(f"connect failed: {error}", sent=False) from None
        return _Connection(reader, writer)

    def _release(self, connection: _Connection) -> None:
        if self._closed or len(self._idle) >= IDLE_CONNECTIONS_MAX or not connection.usable:
            connection.close()
        else:
            self._idle.append(connection)

    async def close(self) -> None:
        """Close every idle connection; calls still in flight close theirs when they end."""
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
        for connection in idle:
            try:
                await connection.writer.wait_closed()
            except ConnectionError:
                pass

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


# -- blocking one-shot call ------------------------------------------------------------------------


def call_once(
    host: str,
    port: int,
    method: str,
    /,
    *,
    timeout_s: float = CALL_TIMEOUT_MS / 1000,
    **params: Any,
) -> Any:
    """Open a connection, make one call, close it: for tests, scripts and the notebook.

    Raises ControllerRpcError if the controller refuses, OSError if it cannot be reached.
    """
    frame = encode_frame({"id": 1, "method": method, "params": params})
    timeout_s += _wait_ms(params) / 1000
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(frame)
        size = _SIZE.unpack(_recv_exactly(sock, _SIZE.size))[0]
        if not 0 <= size <= RESPONSE_BYTES_MAX:
            raise FrameError(f"response frame of {size} bytes is outside 0..{RESPONSE_BYTES_MAX}")
        return _check_response(parse_frame(_recv_exactly(sock, size)), 1)


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, remaining = [], size
    while remaining:
        chunk = sock.recv(min(remaining, 1 << 20))
        if not chunk:
            raise ConnectionError("controller closed the connection")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)
