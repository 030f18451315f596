"""The controller RPC: its wire format, an asyncio client, and a blocking one-shot call.

Wire format (loopback only; ``rpc_framing.py``, shared with the Raft voters). Every message is
one *frame*: an int32 big-endian length, then that many bytes holding one UTF-8 JSON object::

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

A quorum (KRaft's controller.quorum.voters, seen from a broker). The client knows every
controller's address and sends to the one it believes active, starting with the first. A
controller that is not active answers NOT_CONTROLLER naming the active one (if it knows it): the
client goes there. Controller ids are positions in the address list, from 1 (LocalCluster lists
its controllers in id order); a name outside the list, a refused or reset connection, or a call
that times out moves the client to the next address instead. One *round* tries each address at
most once; a round without an active controller (an election in progress, the controller
restarting) backs off, growing and bounded, and starts again, up to ``RECONNECT_ATTEMPTS_MAX``
times, then ConnectionError. A single address is a quorum of one: every round is one attempt.

A call whose request may already have been acted on (the connection dropped after sending, or
NOT_CONTROLLER with ``outcome_unknown``: the controller lost leadership before the write
committed) is retried only if repeating it is harmless (``IDEMPOTENT_METHODS``); otherwise the
caller gets ConnectionError ("outcome unknown") and decides, as with Kafka's own admin requests.
A call that times out is not retried (TimeoutError, as before); the next call goes elsewhere.

Authentication (issue 23): given the cluster's internal ``token`` (ControllerClient(...,
token=...), call_once(..., token=...), call_active(..., token=...)), a client sends an
``authenticate`` frame first on every new connection (``auth.py``); a controller that refuses it
raises ControllerRpcError SASL_AUTHENTICATION_FAILED (58), never retried. Without a token no
such frame is sent, as before.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import socket
import time
from collections.abc import Sequence
from typing import Any, Self

from ..errors import Errors, KafkaError
from ..metadata.records import MetadataRecord, record_from_json
from ..rpc_framing import FRAME_SIZE, FrameError, encode_frame, parse_frame, read_frame
from .auth import authenticate_request

__all__ = [
    "CALL_TIMEOUT_MS",
    "IDEMPOTENT_METHODS",
    "NOT_CONTROLLER",
    "RECONNECT_ATTEMPTS_MAX",
    "REQUEST_BYTES_MAX",
    "RESPONSE_BYTES_MAX",
    "Address",
    "ControllerClient",
    "ControllerRpcError",
    "FrameError",
    "call_active",
    "call_once",
    "decode_records",
    "encode_frame",
    "parse_frame",
    "read_frame",
]

log = logging.getLogger("pylog.broker")

Address = tuple[str, int]  # (host, port) of a controller's RPC listener
NOT_CONTROLLER = Errors.NOT_CONTROLLER
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
RECONNECT_ATTEMPTS_MAX = 40
RECONNECT_BACKOFF_MS_INITIAL = 50
# The backoff between rounds doubles up to this (about 8 s in all). A Raft election takes about
# a second: a short cap finds the new active controller within 0.2 s of it (a 1 s cap once made a
# controller failover take 2.6 s instead of 1.6), and stays far below the broker session timeout.
RECONNECT_BACKOFF_MS_MAX = 200
CONNECTIONS_MAX = 16  # calls in flight per client; more wait for a connection
IDLE_CONNECTIONS_MAX = 4  # kept open for reuse; the rest close after their call
# Repeating these after a lost response changes nothing (a producer id block is at worst wasted).
# Creating an existing ACL adds nothing, and a quota set twice is set once.
IDEMPOTENT_METHODS = frozenset(
    {"register_broker", "heartbeat", "fetch_metadata", "describe", "allocate_producer_ids",
     "describe_user_scram_credentials", "describe_client_quotas", "create_acls",
     "alter_client_quotas"}
)
_AUTHENTICATE_FRAME_ID = 0  # request ids of calls start at 1


class ControllerRpcError(KafkaError):
    """The controller refused a call: a Kafka error code and a one-line message.

    NOT_CONTROLLER also names the active controller (``leader_id``, None if unknown) and says
    whether the call may have been acted on all the same (``outcome_unknown``).
    """

    def __init__(
        self, error_code: int, message: str, *, leader_id: int | None = None,
        outcome_unknown: bool = False,
    ) -> None:
        assert error_code != Errors.NONE, "an error needs a non-zero code"
        super().__init__(message)
        self.error_code = error_code
        self.message = message
        self.leader_id = leader_id
        self.outcome_unknown = outcome_unknown

    def __repr__(self) -> str:
        return f"ControllerRpcError({self.error_code}, {self.message!r})"


# -- requests and responses (their framing: rpc_framing.py) ----------------------------------------


def _check_response(message: dict[str, Any], request_id: int) -> Any:
    if message["id"] != request_id:
        raise FrameError(f"response id {message['id']} does not match request {request_id}")
    code = message.get("error_code")
    if type(code) is not int:
        raise FrameError("response has no integer error_code")
    if code != Errors.NONE:
        raise _refusal(code, str(message.get("message", "")), message.get("result"))
    return message.get("result")


def _refusal(code: int, text: str, result: Any) -> ControllerRpcError:
    """The error for a refused call; NOT_CONTROLLER's result names the active controller."""
    if code != NOT_CONTROLLER or not isinstance(result, dict):
        return ControllerRpcError(code, text)
    leader_id = result.get("leader_id")
    return ControllerRpcError(
        code, text, leader_id=leader_id if type(leader_id) is int else None,
        outcome_unknown=result.get("outcome_unknown") is True)


def _request_frame(frame_id: int, method: str, params: dict[str, Any]) -> bytes:
    frame = encode_frame({"id": frame_id, "method": method, "params": params})
    assert len(frame) - FRAME_SIZE.size <= REQUEST_BYTES_MAX, f"{method} request is too large"
    return frame


def _wait_ms(params: dict[str, Any]) -> int:
    """How long the server may legitimately hold this call (a long poll's max_wait_ms)."""
    wait_ms = params.get("max_wait_ms")
    return wait_ms if type(wait_ms) is int and wait_ms > 0 else 0


def decode_records(result: dict[str, Any]) -> list[MetadataRecord]:
    """The metadata records of a fetch_metadata result, as record objects."""
    return [record_from_json(json.dumps(r)) for r in result["records"]]


# -- finding the active controller (sans-IO) -------------------------------------------------------


class _LostConnection(ConnectionError):
    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


class _Route:
    """Where calls go first: the controller believed active, shared by the clients of a broker."""

    def __init__(self, addresses: Sequence[Address], *, announce: bool) -> None:
        assert addresses, "a controller address is needed"
        self.addresses = tuple((host, port) for host, port in addresses)
        self.index = 0  # of the controller calls go to first
        self.confirmed: int | None = None  # the controller last seen active
        self.announce = announce  # log a switch to another controller

    def index_of(self, controller_id: int | None) -> int | None:
        """The position of a controller id in the list (ids count from 1), None if not there."""
        if controller_id is None or not 1 <= controller_id <= len(self.addresses):
            return None
        return controller_id - 1

    def leave(self, index: int) -> None:
        """The controller at ``index`` did not answer: the next one (unless a call moved on)."""
        if self.index == index:
            self.index = (index + 1) % len(self.addresses)

    def redirect(self, index: int, leader_id: int | None) -> None:
        """The controller at ``index`` is not active; it named ``leader_id`` as the active one."""
        leader = self.index_of(leader_id)
        if leader is None:
            self.leave(index)
        else:
            self.index = leader

    def confirm(self, index: int) -> None:
        """The controller at ``index`` answered as the active one."""
        self.index = index
        if index != self.confirmed and self.announce:
            host, port = self.addresses[index]
            log.info("following controller %d at %s:%d", index + 1, host, port)
        self.confirmed = index

    def unreachable(self, rounds: int, last_error: Exception | None) -> str:
        if len(self.addresses) == 1:
            host, port = self.addresses[0]
            return f"controller at {host}:{port} unreachable after {rounds} attempts: {last_error}"
        listed = ", ".join(f"{host}:{port}" for host, port in self.addresses)
        return f"no active controller among {listed} after {rounds} rounds: {last_error}"


class _Round:
    """One pass of one call over the controllers: each tried at most once, starting with the one
    believed active and following redirects. The asyncio client and call_active drive it."""

    def __init__(self, route: _Route, method: str) -> None:
        self.route = route
        self.method = method
        self.tried: set[int] = set()
        self.last_error: Exception | None = None
        self._current = -1
        self._pending: int | None = route.index

    def next(self) -> int | None:
        """The controller to try now; None: the round is over without an active one."""
        if self._pending is not None:
            self._current = self._pending
            self.tried.add(self._current)
        return self._pending

    def on_lost(self, error: _LostConnection) -> None:
        """No answer; ConnectionError if the request may have been acted on and cannot repeat."""
        self.route.leave(self._current)
        if error.sent and self.method not in IDEMPOTENT_METHODS:
            raise ConnectionError(
                f"connection to the controller lost during {self.method}; outcome unknown"
            ) from None
        self._move_on(error, None)

    def on_not_controller(self, error: ControllerRpcError) -> None:
        """NOT_CONTROLLER; ConnectionError if the write may survive and cannot repeat."""
        assert error.error_code == NOT_CONTROLLER, error
        self.route.redirect(self._current, error.leader_id)
        if error.outcome_unknown and self.method not in IDEMPOTENT_METHODS:
            raise ConnectionError(
                f"controller {self._current + 1} lost leadership during {self.method}; "
                "outcome unknown"
            ) from None
        self._move_on(error, error.leader_id)

    def on_timeout(self) -> None:
        """No answer in time (paused or wedged): the next call goes to the next controller."""
        self.route.leave(self._current)

    def on_answer(self, result: Any) -> bool:
        """True: ``result`` is the call's answer. False: try ``next()`` (a describe answered by a
        controller that is not the leader and names one not tried in this round)."""
        if self.method != "describe":
            self.route.confirm(self._current)
            return True
        leader = self.route.index_of(_leader_named(result))
        if leader is None or leader in self.tried:
            return True
        self._pending = leader
        return False

    def _move_on(self, error: Exception, leader_id: int | None) -> None:
        self.last_error = error
        leader = self.route.index_of(leader_id)
        if leader is not None and leader not in self.tried:
            self._pending = leader
            return
        count = len(self.route.addresses)
        later = ((self._current + step) % count for step in range(1, count))
        self._pending = next((i for i in later if i not in self.tried), None)


def _leader_named(described: Any) -> int | None:
    """The leader a describe answered by a non-leader names (every controller answers it)."""
    quorum = described.get("quorum") if isinstance(described, dict) else None
    if not isinstance(quorum, dict) or quorum.get("role") == "leader":
        return None
    leader_id = quorum.get("leader_id")
    return leader_id if type(leader_id) is int else None


def _backoff_ms(round_number: int) -> int:
    """The pause after round ``round_number`` (from 0): doubling, bounded."""
    return min(RECONNECT_BACKOFF_MS_INITIAL << min(round_number, 30), RECONNECT_BACKOFF_MS_MAX)


# -- asyncio client --------------------------------------------------------------------------------


class _Connection:
    def __init__(
        self, address: Address, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.address = address
        self.reader = reader
        self.writer = writer

    @property
    def usable(self) -> bool:
        return not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


class ControllerClient:
    """Calls the active controller of a quorum from asyncio, from any number of tasks at once.

    >>> client = ControllerClient([("127.0.0.1", port1), ("127.0.0.1", port2)])
    >>> await client.call("heartbeat", broker_id=1, incarnation_id=incarnation)
    {'fenced': False, 'metadata_end_offset': 42}

    ``ControllerClient(host, port)`` is a quorum of one.
    """

    def __init__(
        self,
        addresses: Sequence[Address] | str,
        port: int | None = None,
        *,
        call_timeout_ms: int = CALL_TIMEOUT_MS,
        token: str | None = None,
    ) -> None:
        """``token``: the cluster's internal token, presented on every new connection."""
        assert call_timeout_ms > 0, call_timeout_ms
        if isinstance(addresses, str):
            assert port is not None, "ControllerClient(host, port) needs the port"
            addresses = [(addresses, port)]
        else:
            assert port is None, "ControllerClient(addresses) takes no port"
        self._route = _Route(addresses, announce=True)
        self.call_timeout_ms = call_timeout_ms
        self.token = token
        self._ids = itertools.count(1)
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(CONNECTIONS_MAX)
        self._closed = False

    @property
    def addresses(self) -> tuple[Address, ...]:
        return self._route.addresses

    @property
    def host(self) -> str:
        """The host of the controller calls go to first."""
        return self._route.addresses[self._route.index][0]

    @property
    def port(self) -> int:
        """The port of the controller calls go to first."""
        return self._route.addresses[self._route.index][1]

    def twin(self, *, call_timeout_ms: int | None = None) -> ControllerClient:
        """A client with connections and slots of its own that follows the same controller."""
        twin = ControllerClient(self.addresses,
                                call_timeout_ms=call_timeout_ms or self.call_timeout_ms,
                                token=self.token)
        twin._route = self._route
        return twin

    async def call(self, method: str, /, **params: Any) -> Any:
        """Call ``method`` on the active controller and return its result; ControllerRpcError if
        it refuses, ConnectionError if none is reachable and active, TimeoutError if the
        controller does not answer."""
        frame_id = next(self._ids)
        frame = _request_frame(frame_id, method, params)
        timeout_ms = self.call_timeout_ms + _wait_ms(params)
        rounds = RECONNECT_ATTEMPTS_MAX + 1
        async with self._slots:
            for round_number in range(rounds):
                attempt = _Round(self._route, method)
                while (index := attempt.next()) is not None:
                    answered, result = await self._try(attempt, index, frame, frame_id, timeout_ms)
                    if answered:
                        return result
                if round_number < rounds - 1:
                    await asyncio.sleep(_backoff_ms(round_number) / 1000)
        raise ConnectionError(self._route.unreachable(rounds, attempt.last_error))

    async def _try(
        self, attempt: _Round, index: int, frame: bytes, frame_id: int, timeout_ms: int
    ) -> tuple[bool, Any]:
        """(True, the answer), or (False, None) to go on with the round."""
        if self._closed:
            raise ConnectionError("controller client is closed")
        try:
            result = await self._exchange(self.addresses[index], frame, frame_id, timeout_ms)
        except _LostConnection as error:
            attempt.on_lost(error)
            return False, None
        except ControllerRpcError as error:
            if error.error_code != NOT_CONTROLLER:
                raise
            attempt.on_not_controller(error)
            return False, None
        except TimeoutError:
            attempt.on_timeout()
            raise
        return attempt.on_answer(result), result

    async def _exchange(
        self, address: Address, frame: bytes, frame_id: int, timeout_ms: int
    ) -> Any:
        connection = await self._connection(address)
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

    async def _connection(self, address: Address) -> _Connection:
        while self._idle:
            connection = self._idle.pop()
            if connection.usable and connection.address == address:
                return connection
            connection.close()  # stale, or to a controller calls no longer go to
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_MS / 1000):
                reader, writer = await asyncio.open_connection(*address)
        except (OSError, TimeoutError) as error:
            raise _LostConnection(f"connect failed: {error}", sent=False) from None
        connection = _Connection(address, reader, writer)
        if self.token is not None:
            await self._authenticate(connection)
        return connection

    async def _authenticate(self, connection: _Connection) -> None:
        """Present the token; ControllerRpcError if refused, _LostConnection if no answer."""
        assert self.token is not None
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_MS / 1000):
                connection.writer.write(authenticate_request(self.token, _AUTHENTICATE_FRAME_ID))
                await connection.writer.drain()
                payload = await read_frame(connection.reader, RESPONSE_BYTES_MAX)
            if payload is None:
                raise ConnectionError("controller closed the connection")
            _check_response(parse_frame(payload), _AUTHENTICATE_FRAME_ID)
        except ControllerRpcError:
            connection.close()
            raise
        except (OSError, TimeoutError, asyncio.IncompleteReadError, FrameError) as error:
            connection.close()
            raise _LostConnection(f"authentication failed: {error}", sent=False) from None

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


# -- blocking calls --------------------------------------------------------------------------------

_BLOCKING_FRAME_ID = 1  # one call per connection
ROUTES_REMEMBERED_MAX = 64  # quorums whose active controller call_active remembers
_routes: dict[tuple[Address, ...], _Route] = {}


def call_once(
    host: str,
    port: int,
    method: str,
    /,
    *,
    timeout_s: float = CALL_TIMEOUT_MS / 1000,
    token: str | None = None,
    **params: Any,
) -> Any:
    """Open a connection, make one call, close it: for tests, scripts and the notebook.
    ``token``: the cluster's internal token, presented first.

    Raises ControllerRpcError if the controller refuses, OSError if it cannot be reached.
    """
    frame = _request_frame(_BLOCKING_FRAME_ID, method, params)
    return _call_blocking((host, port), frame, timeout_s + _wait_ms(params) / 1000, token)


def call_active(
    addresses: Sequence[Address],
    method: str,
    /,
    *,
    timeout_s: float = CALL_TIMEOUT_MS / 1000,
    token: str | None = None,
    **params: Any,
) -> Any:
    """``call_once`` on the active controller of ``addresses``, found as ControllerClient finds
    it (``describe`` goes on to the leader a non-leader names). Raises ControllerRpcError if it
    refuses, ConnectionError if none is reachable and active, TimeoutError if it hangs."""
    route = _remembered_route(addresses)
    frame = _request_frame(_BLOCKING_FRAME_ID, method, params)
    timeout_s += _wait_ms(params) / 1000
    rounds = RECONNECT_ATTEMPTS_MAX + 1
    for round_number in range(rounds):
        attempt = _Round(route, method)
        while (index := attempt.next()) is not None:
            try:
                result = _call_blocking(route.addresses[index], frame, timeout_s, token)
            except _LostConnection as error:
                attempt.on_lost(error)
                continue
            except ControllerRpcError as error:
                if error.error_code != NOT_CONTROLLER:
                    raise
                attempt.on_not_controller(error)
                continue
            except TimeoutError:
                attempt.on_timeout()
                raise
            if attempt.on_answer(result):
                return result
        if round_number < rounds - 1:
            time.sleep(_backoff_ms(round_number) / 1000)
    raise ConnectionError(route.unreachable(rounds, attempt.last_error))


def _remembered_route(addresses: Sequence[Address]) -> _Route:
    """call_active's belief of which controller is active, kept between calls to one quorum (so
    calls after a timeout start at the next controller)."""
    key = tuple((host, port) for host, port in addresses)
    if key not in _routes and len(_routes) >= ROUTES_REMEMBERED_MAX:
        _routes.clear()
    return _routes.setdefault(key, _Route(key, announce=False))


def _call_blocking(address: Address, frame: bytes, timeout_s: float,
                   token: str | None = None) -> Any:
    """One call on a new connection; with a token, the authenticate frame goes first and is
    answered before the call is sent (a refusal closes the connection: anything sent after it
    would be unread, and the reset could lose the refusal)."""
    try:
        sock = socket.create_connection(address, timeout=timeout_s)
    except OSError as error:  # refused, unreachable, or no connection within the timeout
        raise _LostConnection(f"connect failed: {error}", sent=False) from None
    with sock:
        sent = False
        try:
            if token is not None:
                sock.sendall(authenticate_request(token, _AUTHENTICATE_FRAME_ID))
                _check_response(parse_frame(_recv_frame(sock)), _AUTHENTICATE_FRAME_ID)
            sent = True
            sock.sendall(frame)
            payload = _recv_frame(sock)
        except TimeoutError:
            raise
        except OSError as error:
            raise _LostConnection(str(error) or type(error).__name__, sent=sent) from None
    return _check_response(parse_frame(payload), _BLOCKING_FRAME_ID)


def _recv_frame(sock: socket.socket) -> bytes:
    size = FRAME_SIZE.unpack(_recv_exactly(sock, FRAME_SIZE.size))[0]
    if not 0 <= size <= RESPONSE_BYTES_MAX:
        raise FrameError(f"response frame of {size} bytes is outside 0..{RESPONSE_BYTES_MAX}")
    return _recv_exactly(sock, size)


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, remaining = [], size
    while remaining:
        chunk = sock.recv(min(remaining, 1 << 20))
        if not chunk:
            raise ConnectionError("controller closed the connection")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)
