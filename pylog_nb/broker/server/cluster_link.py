"""The asyncio shell of a ``BrokerCore``'s links: to the controllers and to the leaders it follows.

Every decision is the core's (``core.py``); this module carries its ``Outbound`` values over
sockets and reports each one back exactly once, as the seeded simulation does over its message
queue. A timer calls ``core.tick`` every ``TICK_MS``; every answer is followed by ``core.poll``,
so the next metadata long poll or replica fetch leaves at once. A failed or timed-out call is
reported to the core (``on_failed``) and nothing else: the core decides when to try again. No loop
ends on an error (a loop that died silently after a long pause is how a broker once went on
leading at an old epoch forever).

The controllers are a quorum: every call goes to the active one, which the ControllerClient finds
and follows (a switch logs one line, "following controller N at host:port"). Registration,
heartbeats and metadata polls have a short timeout of their own, so a paused active controller
costs a broker at most ``LIFECYCLE_CALL_TIMEOUT_MS`` before its next heartbeat tries another one,
well inside the session timeout. Replica fetches and ListOffsets go to each leader over one
connection of their own (Kafka's ``ReplicaFetcherThread``), one request at a time.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
from collections.abc import Callable, Sequence

from ..controller.rpc import Address, ControllerClient, ControllerRpcError, decode_records
from ..metadata.follower import FetchMetadata
from ..protocol import codec
from ..security.sasl_client import SaslCredentials
from .alter_partition_manager import AlterPartitionRequest
from .authentication import authenticate_connection
from .core import (
    ALTERED,
    TICK_MS,
    BrokerCore,
    ControllerCall,
    HeartbeatAnswer,
    LeaderOffsets,
    MetadataAnswer,
    Outbound,
    Registered,
    ReplicaFetch,
)
from .lifecycle_manager import SendHeartbeat, SendRegistration
from .replica_fetcher import (
    EARLIEST_TIMESTAMP,
    FETCH_VERSION,
    LATEST_TIMESTAMP,
    LIST_OFFSETS_VERSION,
    FetcherState,
    Issued,
    PartitionAnswer,
    fetch_answers,
    list_offsets_body,
    listed_offset,
)

log = logging.getLogger("pylog.broker")

METADATA_WAIT_MS = 500  # long-poll of the metadata log
METADATA_RECORDS_MAX = 1000  # per metadata fetch
RETRY_BACKOFF_MS = 200
APPLY_WAIT_TIMEOUT_S = 10.0
REGISTRATION_TIMEOUT_S = 30.0  # start-up gives up after this
# Registration, heartbeats and metadata polls (on top of the poll's wait): under half the broker
# session, so a paused controller costs a broker one timeout, and its next heartbeat, sent to
# another controller, still lands in time. A controller slower than that is paused or wedged.
LIFECYCLE_CALL_TIMEOUT_MS = 800
RESPONSE_TIMEOUT_S = 10.0
_SIZE = struct.Struct(">i")


class ClusterLink:
    """Carries one core's calls: to the active controller, and to each leader it follows."""

    def __init__(self, core: BrokerCore, controllers: Sequence[Address], *, host: str,
                 port: Callable[[], int], isolated: Callable[[], bool],
                 credentials: SaslCredentials | None = None,
                 ssl_context: ssl.SSLContext | None = None, token: str | None = None) -> None:
        self.core = core
        self.credentials = credentials  # the inter-broker principal, for replica fetches
        self.ssl_context = ssl_context  # TLS to the leaders' SSL / SASL_SSL listeners
        self.host = host
        self.port = port  # the bound port, known once the server listens
        self.isolated = isolated  # fault injection: cut off from peers and controllers
        # Admin, ISR changes, producer ids; ``token`` is what the controllers take first.
        self.calls = ControllerClient(controllers, token=token)
        # Registration, heartbeats and metadata long polls: connections and slots of their own
        # and a short timeout, following the same controller as ``calls``.
        self.polls = self.calls.twin(call_timeout_ms=LIFECYCLE_CALL_TIMEOUT_MS)
        self.applied = asyncio.Condition()
        self.leaders: dict[int, LeaderConnection] = {}
        self.tasks: list[asyncio.Task] = []
        self._calls: set[asyncio.Task] = set()
        self.producer_ids: list[int] = []  # the rest of the block the controller handed us

    @property
    def lifecycle(self):
        return self.core.lifecycle

    @property
    def incarnation_id(self) -> str:
        return self.core.incarnation_id

    @property
    def applied_offset(self) -> int:
        return self.core.applied_offset

    async def start(self) -> None:
        """Register (retrying while the controller starts), then tick until stopped."""
        lifecycle = self.core.lifecycle
        async with asyncio.timeout(REGISTRATION_TIMEOUT_S):
            while lifecycle.fenced and lifecycle.catch_up_offset is None:
                self.core.poll(self.core.now_ms())
                await asyncio.sleep(RETRY_BACKOFF_MS / 1000)
        self.tasks = [asyncio.create_task(self._tick_loop())]

    async def stop(self) -> None:
        for task in [*self.tasks, *self._calls]:
            task.cancel()
        await asyncio.gather(*self.tasks, *self._calls, return_exceptions=True)
        for connection in self.leaders.values():
            connection.close()
        self.leaders.clear()
        await self.calls.close()
        await self.polls.close()

    async def _tick_loop(self) -> None:
        while True:
            try:
                self.core.tick(self.core.now_ms())
                self._close_unfollowed()
            except Exception:  # noqa: BLE001 - the loop must outlive any one failure
                log.exception("broker tick failed")
            await asyncio.sleep(TICK_MS / 1000)

    # == carrying the core's calls ================================================================

    def send(self, outbound: Outbound) -> None:
        """Carry ``outbound`` in a task of its own; its answer goes back to the core."""
        task = asyncio.get_running_loop().create_task(self._carry(outbound))
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)

    async def _carry(self, outbound: Outbound) -> None:
        core = self.core
        try:
            if self.isolated():
                raise ConnectionError("isolated from the controllers and peers (fault injection)")
            answer = await self._call(outbound)
        except ControllerRpcError as error:
            log.warning("%s refused: %s", _name(outbound), error)
            core.on_failed(outbound, error.error_code)
        except Exception as error:  # noqa: BLE001 - timeouts after a pause included
            self._log_failure(outbound, error)
            core.on_failed(outbound, None)
        else:
            core.on_answer(outbound, answer)
            if isinstance(outbound, ControllerCall) and isinstance(outbound.request,
                                                                   FetchMetadata):
                async with self.applied:
                    self.applied.notify_all()
        core.poll(core.now_ms())

    def _log_failure(self, outbound: Outbound, error: Exception) -> None:
        if isinstance(outbound, ReplicaFetch | LeaderOffsets):
            connection = self.leaders.pop(outbound.leader_id, None)
            if connection is not None:
                connection.close()
        expected = isinstance(error, OSError | TimeoutError | asyncio.IncompleteReadError)
        if not expected:
            log.error("%s failed", _name(outbound), exc_info=error)
        elif not self.isolated():
            log.info("%s failed: %s", _name(outbound), str(error) or type(error).__name__)

    async def _call(self, outbound: Outbound) -> object:
        if isinstance(outbound, ReplicaFetch):
            return await self._leader(outbound.leader_id).fetch(outbound.state, outbound.issued)
        if isinstance(outbound, LeaderOffsets):
            follower = outbound.follower
            return await self._leader(outbound.leader_id).leader_offsets(
                outbound.state, follower.topic, follower.partition)
        return await self._call_controller(outbound.request)

    async def _call_controller(self, request) -> object:
        core = self.core
        if isinstance(request, SendRegistration):
            answer = await self.polls.call(
                "register_broker", broker_id=core.broker_id, host=self.host, port=self.port(),
                incarnation_id=request.incarnation_id)
            return Registered(answer["metadata_end_offset"])
        if isinstance(request, SendHeartbeat):
            answer = await self.polls.call(
                "heartbeat", broker_id=core.broker_id, incarnation_id=request.incarnation_id,
                metadata_offset=request.metadata_offset)
            return HeartbeatAnswer(answer["fenced"], answer["metadata_end_offset"])
        if isinstance(request, FetchMetadata):
            answer = await self.polls.call(
                "fetch_metadata", from_offset=request.from_offset,
                max_records=METADATA_RECORDS_MAX, max_wait_ms=METADATA_WAIT_MS)
            return MetadataAnswer(decode_records(answer), answer["next_offset"],
                                  answer["end_offset"], answer.get("reset", False))
        assert isinstance(request, AlterPartitionRequest), request
        await self.calls.call("alter_partition", **request.params())
        return ALTERED

    def _leader(self, leader_id: int) -> LeaderConnection:
        """The connection to ``leader_id`` at the endpoint the image gives it now."""
        endpoint = self.core.image.brokers.get(leader_id)
        if endpoint is None:
            raise ConnectionError(f"broker {leader_id} has no endpoint in the metadata")
        connection = self.leaders.get(leader_id)
        if connection is not None and (connection.host, connection.port) != (endpoint.host,
                                                                            endpoint.port):
            connection.close()
            connection = None
        if connection is None:
            connection = LeaderConnection(endpoint.host, endpoint.port, self.core.broker_id,
                                          self.credentials, self.ssl_context)
            self.leaders[leader_id] = connection
        return connection

    def _close_unfollowed(self) -> None:
        for leader_id in [i for i in self.leaders if i not in self.core.fetchers]:
            self.leaders.pop(leader_id).close()

    # == requests to the controller ===============================================================

    async def call(self, method: str, **params) -> dict:
        """Call the controller and wait until this broker has applied what the call wrote."""
        if self.isolated():
            raise ConnectionError("broker is isolated from the controller (fault injection)")
        result = await self.calls.call(method, **params)
        beat = await self.calls.call("heartbeat", broker_id=self.core.broker_id,
                                     incarnation_id=self.incarnation_id,
                                     metadata_offset=self.applied_offset)
        await self.wait_applied(beat["metadata_end_offset"])
        return result

    async def wait_applied(self, offset: int) -> None:
        async with self.applied:
            await asyncio.wait_for(
                self.applied.wait_for(lambda: self.applied_offset >= offset),
                APPLY_WAIT_TIMEOUT_S)

    async def allocate_producer_id(self) -> int:
        """The next id of this broker's block, asking the controller for a block when empty."""
        if not self.producer_ids:
            block = await self.calls.call("allocate_producer_ids",
                                          broker_id=self.core.broker_id)
            first = block["first_id"]
            self.producer_ids = list(range(first + block["size"] - 1, first - 1, -1))
        return self.producer_ids.pop()


class LeaderConnection:
    """One connection to a leader for replica Fetch and ListOffsets, one request at a time."""

    def __init__(self, host: str, port: int, broker_id: int,
                 credentials: SaslCredentials | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.host = host
        self.port = port
        self.credentials = credentials
        self.ssl_context = ssl_context
        self.client_id = f"replica-fetcher-{broker_id}"
        self.correlation_id = 0
        self.turn = asyncio.Lock()
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def fetch(self, state: FetcherState, issued: Issued) -> list[PartitionAnswer]:
        return fetch_answers(await self._call(1, FETCH_VERSION, state.request_body(issued)))

    async def leader_offsets(self, state: FetcherState, topic: str,
                             index: int) -> tuple[int, int]:
        offsets = []
        for timestamp in (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP):
            body = list_offsets_body(state.replicas.broker_id, topic, index, timestamp)
            offsets.append(listed_offset(await self._call(2, LIST_OFFSETS_VERSION, body)))
        return offsets[0], offsets[1]

    async def _call(self, api_key: int, version: int, body: dict):
        async with self.turn:
            if self.streams is None:
                self.streams = await self._connect()
            reader, writer = self.streams
            self.correlation_id += 1
            sent_id = self.correlation_id
            writer.write(codec.encode_request(api_key, version, sent_id, self.client_id, body))
            head = await asyncio.wait_for(reader.readexactly(4), RESPONSE_TIMEOUT_S)
            frame = await asyncio.wait_for(reader.readexactly(_SIZE.unpack(head)[0]),
                                           RESPONSE_TIMEOUT_S)
        correlation_id, response = codec.decode_response(api_key, version, frame)
        assert correlation_id == sent_id, (correlation_id, sent_id)
        return response

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        streams = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port, ssl=self.ssl_context),
            RESPONSE_TIMEOUT_S)
        if self.credentials is not None:
            try:
                await authenticate_connection(*streams, self.credentials, self.client_id,
                                              RESPONSE_TIMEOUT_S)
            except BaseException:
                streams[1].close()
                raise
        return streams

    def close(self) -> None:
        if self.streams is not None:
            self.streams[1].close()
            self.streams = None


def _name(outbound: Outbound) -> str:
    if isinstance(outbound, ControllerCall):
        return type(outbound.request).__name__
    return "replica fetch" if isinstance(outbound, ReplicaFetch) else "ListOffsets"
