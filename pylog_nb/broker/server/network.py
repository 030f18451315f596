"""The asyncio shell around a BrokerNode: sockets, framing, timers, shutdown.

Theory of operation: each connection is served strictly in order, one request at a time, as Kafka
does (a long-polling Fetch holds its own connection only). A frame whose size is negative or above
``socket.request.max.bytes``, a frame that cannot be decoded, or an unknown API key or version
closes that one connection after one log line; every other connection carries on. ApiVersions at
an unsupported version is the exception the protocol defines: it gets error 35 and our ranges.

Before any handler sees a frame, the connection's ``ConnectionAuthentication``
(``authentication.py``) does: on a SASL listener it answers SaslHandshake and SaslAuthenticate
itself, lets ApiVersions through, and closes a connection that asks for anything else before it
authenticated (after its answer, if it has one, is written). Handlers of the connection then see
its principal in ``PRINCIPAL``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import itertools
import logging
import os
import struct
from functools import partial

from ..errors import Errors
from ..protocol import codec
from ..protocol.fetch_response import FileRange
from ..protocol.versions import API_VERSIONS_KEY, FETCH_KEY, PRODUCE_KEY
from ..security.events import AuthenticationFailed, RefusalThrottle
from .apis import SHELL_HANDLERS, handle_in_core
from .apis.share import CONNECTION_ID, close_connection_sessions
from .authentication import PRINCIPAL, ConnectionAuthentication, Verdict
from .authorization import AuthorizerNotReady
from .node import CLIENT_HOST, BrokerNode
from .pending import drive
from .throttling import (
    Mute,
    Throttler,
    is_consumer_fetch,
    response_size,
    with_fetch_throttle,
)

log = logging.getLogger("pylog.broker")

_SIZE = struct.Struct(">i")
WRITE_BUFFER_HIGH_BYTES = 4 * 1024 * 1024  # drain before buffering more responses than this
PIPELINED_REQUESTS_MAX = 64  # produce requests read ahead of their responses, per connection
CLOSE_AFTER_ANSWER_TIMEOUT_S = 5.0  # a last answer the peer does not read is given up on
_PRODUCE_KEY_BYTES = struct.pack(">h", PRODUCE_KEY)


class ProtocolViolation(Exception):
    """The peer broke framing; its connection is closed."""


class BrokerServer:
    def __init__(self, node: BrokerNode) -> None:
        self.node = node
        self.server: asyncio.Server | None = None
        self.stopped = asyncio.Event()
        self.timers: list[asyncio.Task] = []
        self.connections: set[asyncio.Task] = set()
        self.connection_ids = itertools.count(1)
        self.throttler = Throttler()  # client quotas (throttling.py)
        self.refusals = RefusalThrottle()  # at most one refusal event per host a second

    async def start(self) -> int:
        """Listen and start timers; return the bound port."""
        config = self.node.config
        self.server = await asyncio.start_server(
            self._serve, config.host, config.port, reuse_address=True,
            ssl=self.node.server_ssl,  # SSL, SASL_SSL listeners
        )
        self.node.port = self.server.sockets[0].getsockname()[1]
        self.timers = [
            asyncio.create_task(self._every(config.retention_check_interval_ms, self._retention)),
            asyncio.create_task(self._every(config.log_cleaner_backoff_ms, self._clean)),
            asyncio.create_task(self._every(config.flush_interval_ms, self.node.replicas.flush)),
        ]
        log.info("broker %d listening on %s:%d", config.broker_id, config.host, self.node.port)
        return self.node.port

    def _retention(self) -> None:
        deleted = self.node.replicas.enforce_retention(self.node.now_ms())
        if deleted:
            log.info("retention deleted %d segment(s)", deleted)

    async def _clean(self) -> None:
        for name, stats in await self.node.replicas.clean(self.node.now_ms()):
            log.info("cleaned %s: kept %d of %d records (%d of %d bytes), %d tombstone(s) "
                     "and %d transaction marker(s) removed", name, stats.records_kept,
                     stats.records_read, stats.bytes_kept, stats.bytes_read,
                     stats.tombstones_removed, stats.markers_removed)

    async def _every(self, interval_ms: int, action) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                result = action()
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("periodic %s failed", getattr(action, "__name__", action))

    async def stop(self) -> None:
        """Stop listening, finish every connection, then close the logs cleanly."""
        if self.server is not None:
            self.server.close()
        tasks = [*self.timers, *self.connections]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.node.close()
        self.stopped.set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read requests in order; a responder task writes their responses in the same order.

        Produce requests are pipelined: the next request is read while an acks=all produce waits
        for replication (its append already happened, in order). Every other request is handled
        to completion before the next one is read, as Kafka does.
        """
        peer = writer.get_extra_info("peername")
        CLIENT_HOST.set(f"/{peer[0]}" if peer else "")  # handlers of this connection see it
        connection_id = f"{peer}-{next(self.connection_ids)}"
        CONNECTION_ID.set(connection_id)
        task = asyncio.current_task()
        assert task is not None  # asyncio.start_server runs each connection in a task
        self.connections.add(task)
        pending: asyncio.Queue = asyncio.Queue(PIPELINED_REQUESTS_MAX)
        responder = asyncio.create_task(self._respond(writer, pending, peer))
        authentication = self.node.new_authentication()
        table = self.node.client_connections  # who is connected (GET /v1/connections)
        tracked = table.add(connection_id, _peer_text(peer), self.node.now_ms())
        if authentication.principal is not None:  # a PLAINTEXT listener: anonymous at once
            table.signed_in(connection_id, authentication.principal, None)
        mute = Mute()
        try:
            while not responder.done():
                await self._wait_unmuted(mute)
                frame = await self._read_frame(reader, authentication)
                if frame is None:
                    return
                verdict = _judged(authentication, frame)
                if verdict is not None:
                    if not await self._carry_out(verdict, pending, responder, peer):
                        return
                    if authentication.principal is not None:
                        PRINCIPAL.set(authentication.principal)
                        table.signed_in(connection_id, authentication.principal,
                                        authentication.mechanism)
                    continue
                handled = self._dispatch(frame, mute, connection_id)
                if pending.full():
                    await pending.put(handled)
                else:
                    pending.put_nowait(handled)
                if frame[:2] != _PRODUCE_KEY_BYTES and not handled.done():
                    await asyncio.wait([handled])
        except ProtocolViolation as error:
            log.warning("closing connection from %s: %s", peer, error)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            responder.cancel()
            _abandon(pending)
            self.connections.discard(task)
            writer.close()
            table.remove(connection_id, tracked)
            self._connection_closed(connection_id)

    async def _carry_out(self, verdict: Verdict, pending: asyncio.Queue,
                         responder: asyncio.Task, peer) -> bool:
        """Queue the authenticator's answer; False once the connection is to close (after the
        answer is written and the verdict's delay has passed)."""
        answered: asyncio.Future = asyncio.get_running_loop().create_future()
        answered.set_result(verdict.response)
        await pending.put(answered)
        if verdict.close_reason is None:
            return True
        log.warning("closing connection from %s: %s", peer, verdict.close_reason)
        self._refused(peer, verdict.close_reason)
        closing: asyncio.Future = asyncio.get_running_loop().create_future()
        closing.set_result(_Close(verdict.close_after_ms))
        await pending.put(closing)
        await asyncio.wait([responder], timeout=CLOSE_AFTER_ANSWER_TIMEOUT_S)
        return False

    def _refused(self, peer, reason: str) -> None:
        """A refusal on the introspection stream (the live view's timeline)."""
        host = peer[0] if peer else "?"
        now_ms = self.node.now_ms()
        if self.refusals.admit((host, "authentication"), now_ms):
            self.node.events.append(AuthenticationFailed(now_ms, host, reason))

    def _connection_closed(self, connection_id: str) -> None:
        """Share sessions of the connection end (not while the broker stops: its core goes)."""
        if self.server is None or not self.server.is_serving():
            return
        drive(close_connection_sessions(self.node.core, connection_id), lambda _closed: None,
              lambda error: log.error("closing the share sessions of %s: %r", connection_id,
                                      error))

    async def _respond(self, writer: asyncio.StreamWriter, pending: asyncio.Queue, peer) -> None:
        try:
            while True:
                try:
                    response = await (await pending.get())
                except AuthorizerNotReady as error:
                    log.info("closing connection from %s: %s", peer, error)
                    break
                if isinstance(response, _Close):
                    await writer.drain()
                    await asyncio.sleep(response.delay_ms / 1000)
                    break
                if isinstance(response, list):
                    await _write_pieces(writer, response)
                elif response is not None:
                    writer.write(response)
                if writer.transport.get_write_buffer_size() > WRITE_BUFFER_HIGH_BYTES:
                    await writer.drain()
        except ProtocolViolation as error:
            log.warning("closing connection from %s: %s", peer, error)
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("closing connection from %s after an internal error", peer)
        writer.close()

    async def _read_frame(self, reader: asyncio.StreamReader,
                          authentication: ConnectionAuthentication) -> bytes | None:
        try:
            head = await reader.readexactly(_SIZE.size)
        except asyncio.IncompleteReadError:
            return None
        size = _SIZE.unpack(head)[0]
        limit = authentication.frame_bytes_max(self.node.config.socket_request_max_bytes)
        if size < 0 or size > limit:
            what = ("socket.request.max.bytes" if authentication.authenticated
                    else "sasl.server.max.receive.size before authentication")
            raise ProtocolViolation(f"request of {size} bytes exceeds {what}")
        return await reader.readexactly(size)

    async def _wait_unmuted(self, mute: Mute) -> None:
        """KIP-219: a throttled connection is read again only once its throttle time passed."""
        wait_ms = mute.until_ms - self.node.now_ms()
        if wait_ms > 0:
            await asyncio.sleep(wait_ms / 1000)

    def _dispatch(self, frame: bytes, mute: Mute, connection_id: str) -> asyncio.Future:
        """The future of a request's encoded response (None: no response, acks=0). A request
        the core serves is handled here and now, without a task of its own."""
        response: asyncio.Future = asyncio.get_running_loop().create_future()
        try:
            request = self._parse(frame)
        except ProtocolViolation as error:
            response.set_exception(error)
            return response
        if isinstance(request, memoryview):  # an ApiVersions it answers with an error
            response.set_result(request)
            return response
        self._note_request(connection_id, request)
        shell_handler = SHELL_HANDLERS.get(request.header.api_key)
        if shell_handler is not None:
            return asyncio.ensure_future(self._handle_in_shell(shell_handler, request))
        self.throttler.follow(self.node.image)
        throttle_ms = self._produce_throttle(request, len(frame), mute)
        handle_in_core(self.node.core, request,
                       partial(self._settle, response, request, mute, throttle_ms),
                       partial(_settle_error, response))
        return response

    def _note_request(self, connection_id: str, request: codec.Request) -> None:
        """The connection's row: its client id, and what software it is (ApiVersions v3+)."""
        header = request.header
        software = None
        if header.api_key == API_VERSIONS_KEY and header.api_version >= 3:
            software = (request.body.client_software_name, request.body.client_software_version)
        self.node.client_connections.on_request(
            connection_id, header.api_key, header.client_id, self.node.now_ms(),
            software=software, from_broker=_is_replica_fetch(request))

    def _produce_throttle(self, request: codec.Request, size_bytes: int, mute: Mute) -> int:
        if request.header.api_key != PRODUCE_KEY:
            return 0
        now_ms = self.node.now_ms()
        throttle_ms = self.throttler.on_produce(PRINCIPAL.get(), request.header.client_id,
                                                size_bytes, now_ms)
        mute.extend(now_ms, throttle_ms)
        return throttle_ms

    def _throttled(self, request: codec.Request, result, mute: Mute, throttle_ms: int):
        """``result`` with the throttle time a quota gives it (a consumer's Fetch is measured
        by its response, here)."""
        if isinstance(result, dict) and throttle_ms:
            return {**result, "throttle_time": throttle_ms}
        if isinstance(result, list) and is_consumer_fetch(request.header.api_key,
                                                          _replica_id(request)):
            now_ms = self.node.now_ms()
            fetch_throttle_ms = self.throttler.on_fetch_response(
                PRINCIPAL.get(), request.header.client_id, response_size(result), now_ms)
            if fetch_throttle_ms:
                mute.extend(now_ms, fetch_throttle_ms)
                return with_fetch_throttle(result, request.header.api_version, fetch_throttle_ms)
        return result

    def _parse(self, frame: bytes) -> codec.Request | memoryview:
        try:
            request = codec.parse_request(frame)
        except codec.UnsupportedRequestError as error:
            if error.header.api_key == API_VERSIONS_KEY:
                return codec.encode_api_versions_error(
                    error.header, Errors.UNSUPPORTED_VERSION)
            raise ProtocolViolation(str(error)) from None
        except codec.MalformedRequestError as error:
            raise ProtocolViolation(str(error)) from None
        if self.node.isolated and _is_replica_fetch(request):
            raise ProtocolViolation("isolated (fault injection): dropping a peer's replica fetch")
        return request

    async def _handle_in_shell(self, handler, request: codec.Request):
        result = handler(self.node, request)
        if inspect.isawaitable(result):
            result = await result
        return _encoded(request, result)

    def _settle(self, future: asyncio.Future, request: codec.Request, mute: Mute,
                throttle_ms: int, result) -> None:
        """A core handler's response, encoded for the responder (dropped if the connection
        closed while the request waited)."""
        if future.done():
            _close_files(result)
        elif self.node.isolated and _is_replica_fetch(request):  # isolated while it long-polled
            _close_files(result)
            future.set_exception(ProtocolViolation(
                "isolated (fault injection): dropping a peer's replica fetch"))
        else:
            try:
                result = self._throttled(request, result, mute, throttle_ms)
                future.set_result(_encoded(request, result))
            except Exception as error:  # noqa: BLE001 - the responder logs it and closes
                future.set_exception(error)


@dataclasses.dataclass(frozen=True, slots=True)
class _Close:
    """Queued after a last answer: the responder writes what came before, waits, and closes."""

    delay_ms: int


def _peer_text(peer) -> str:
    """``host:port`` of a peer address (IPv4 or IPv6), or ``?``."""
    return f"{peer[0]}:{peer[1]}" if peer else "?"


def _judged(authentication: ConnectionAuthentication, frame: bytes) -> Verdict | None:
    try:
        return authentication.on_frame(frame)
    except (codec.UnsupportedRequestError, codec.MalformedRequestError) as error:
        raise ProtocolViolation(str(error)) from None


def _encoded(request: codec.Request, result):
    if result is None or isinstance(result, list):
        return result  # no response (acks=0), or pieces already encoded (Fetch)
    return codec.encode_response(request.header, result)


def _settle_error(future: asyncio.Future, error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


def _abandon(pending: asyncio.Queue) -> None:
    """The connection is gone: cancel what is still queued and release pinned segment files."""
    while not pending.empty():
        handled = pending.get_nowait()
        if handled.done() and not handled.cancelled() and handled.exception() is None:
            _close_files(handled.result())
        handled.cancel()


def _is_replica_fetch(request: codec.Request) -> bool:
    return request.header.api_key == FETCH_KEY and _replica_id(request) >= 0


def _replica_id(request: codec.Request) -> int:
    """A Fetch's replica id (-1: a consumer's), in the request body or (v15+) its replica
    state."""
    state = getattr(request.body, "replica_state", None)
    return state.replica_id if state is not None else getattr(request.body, "replica_id", -1)


async def _write_pieces(writer: asyncio.StreamWriter, pieces: list) -> None:
    """Write bytes and send file ranges with zero-copy sendfile, in order; close their fds."""
    loop = asyncio.get_running_loop()
    try:
        for piece in pieces:
            if isinstance(piece, FileRange):
                with open(piece.fd, "rb", closefd=False) as file:
                    await loop.sendfile(writer.transport, file, piece.position, piece.size_bytes)
            else:
                writer.write(piece)
    finally:
        _close_files(pieces)


def _close_files(pieces) -> None:
    for piece in pieces if isinstance(pieces, list) else ():
        if isinstance(piece, FileRange):
            os.close(piece.fd)
