"""ControllerServer: the asyncio shell around the sans-IO Controller, serving the controller RPC.

Theory of operation: one event loop owns the Controller. Each connection is served strictly in
order, one request at a time (the wire format is in ``rpc.py``); a long-polling
``fetch_metadata`` holds only its own connection. A frame whose size is negative or above
REQUEST_BYTES_MAX, that is not a UTF-8 JSON object with an integer ``id``, a string ``method`` and
an object ``params``, closes that one connection after one log line. A well-formed request for an
unknown method gets UNSUPPORTED_VERSION (35); parameters that are missing, unknown or of the wrong
type get INVALID_REQUEST (42); a refused operation gets the Kafka code the core chose.

A timer calls ``tick`` every TICK_INTERVAL_MS, which fences brokers whose lease ran out. After
every operation the server *publishes*: if the metadata log grew, it logs the new events and wakes
every long poll. The clock is monotonic (leases must not jump with NTP) but anchored at the wall
clock at start-up, so event times read as real times.

Methods (params with defaults are optional; results are JSON objects):

- register_broker(broker_id, host, port, incarnation_id) -> {broker_id, host, port,
  incarnation_id, fenced, metadata_end_offset, session_timeout_ms, heartbeat_interval_ms}
- heartbeat(broker_id, incarnation_id=null, caught_up=true, metadata_offset=-1) -> {fenced,
  metadata_end_offset}; metadata_offset is the broker's applied offset (-1: not told)
- fetch_metadata(from_offset, max_records=10000, max_wait_ms=0) -> {records: [record objects],
  next_offset, end_offset}; waits up to max_wait_ms for a record when from_offset == end_offset
- create_topic(name, num_partitions=-1, replication_factor=-1, assignments=[], configs={},
  validate_only=false) -> topic: {name, topic_id, num_partitions, replication_factor, configs,
  partitions: [{replicas, isr, leader, leader_epoch, partition_epoch}]}
- delete_topic(name) -> {topic_id}
- create_partitions(name, count, assignments=[], validate_only=false) -> topic
- alter_configs(name, configs, validate_only=false) -> topic (configs replace the overrides)
- alter_partition(broker_id, topic_id, partition, leader_epoch, new_isr, partition_epoch)
  -> {leader, leader_epoch, partition_epoch, isr}
- elect_preferred_leaders(partitions=null) -> {elected: [{topic, partition, leader,
  leader_epoch}]}; partitions is [[topic name, index], ...] or null for all
- allocate_producer_ids(broker_id) -> {first_id, size}
- describe(events_max=100) -> image.to_dict() (brokers also carry lease_expires_in_ms) plus
  {end_offset, now_ms, session_timeout_ms, events: [{now_ms, offset, kind, text}]}
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pylog_nb.broker import errors
from pylog_nb.broker.shutdown import arrange_shutdown

from .controller import (
    BROKER_HEARTBEAT_INTERVAL_MS,
    BROKER_SESSION_TIMEOUT_MS,
    Controller,
    ControllerResult,
)
from .events import EVENTS_MAX
from .image import PartitionImage, TopicImage, vars_of
from .log import READ_RECORDS_MAX
from .records import PartitionChange
from .rpc import (
    REQUEST_BYTES_MAX,
    RESPONSE_BYTES_MAX,
    FrameError,
    encode_frame,
    parse_frame,
    read_frame,
)

__all__ = ["METHODS", "TICK_INTERVAL_MS", "ControllerServer", "run_controller"]

log = logging.getLogger("pylog.controller")

TICK_INTERVAL_MS = 100  # a lease expiry is acted on within this
FETCH_WAIT_MS_MAX = 30_000  # no long poll holds a connection longer than this
DESCRIBE_EVENTS_DEFAULT = 100
CONNECTIONS_MAX = 1_024  # a runaway client cannot exhaust the controller's file descriptors
EVENT_LOG_LINES_MAX = 20  # per published batch: creating 10 000 partitions logs a summary
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

Reply = tuple[int, str, Any]  # error code, one-line message, result


# -- parameters ------------------------------------------------------------------------------------

_REQUIRED = object()


def _is_int(v: Any) -> bool:
    return type(v) is int and INT64_MIN <= v <= INT64_MAX


def _is_ints(v: Any) -> bool:
    return isinstance(v, list) and all(_is_int(x) for x in v)


def _is_pair(v: Any) -> bool:
    return isinstance(v, list) and len(v) == 2 and isinstance(v[0], str) and _is_int(v[1])


# kind -> (check, what the error message says it must be)
_KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "int": (_is_int, "an integer"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "str?": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "bool": (lambda v: type(v) is bool, "true or false"),
    "ints": (_is_ints, "a list of integers"),
    "int lists": (
        lambda v: isinstance(v, list) and all(_is_ints(x) for x in v),
        "a list of lists of integers",
    ),
    "configs": (
        lambda v: isinstance(v, dict) and all(x is None or isinstance(x, str) for x in v.values()),
        "an object of strings (or null to remove)",
    ),
    "pairs?": (
        lambda v: v is None or (isinstance(v, list) and all(_is_pair(x) for x in v)),
        "null or a list of [topic, partition] pairs",
    ),
}

# method -> {param: (kind, default)}; the allow-list of callable methods.
METHODS: dict[str, dict[str, tuple[str, Any]]] = {
    "register_broker": {
        "broker_id": ("int", _REQUIRED),
        "host": ("str", _REQUIRED),
        "port": ("int", _REQUIRED),
        "incarnation_id": ("str", _REQUIRED),
    },
    "heartbeat": {
        "broker_id": ("int", _REQUIRED),
        "incarnation_id": ("str?", None),
        "caught_up": ("bool", True),
        "metadata_offset": ("int", -1),
    },
    "fetch_metadata": {
        "from_offset": ("int", _REQUIRED),
        "max_records": ("int", READ_RECORDS_MAX),
        "max_wait_ms": ("int", 0),
    },
    "create_topic": {
        "name": ("str", _REQUIRED),
        "num_partitions": ("int", -1),
        "replication_factor": ("int", -1),
        "assignments": ("int lists", []),
        "configs": ("configs", {}),
        "validate_only": ("bool", False),
    },
    "delete_topic": {"name": ("str", _REQUIRED)},
    "create_partitions": {
        "name": ("str", _REQUIRED),
        "count": ("int", _REQUIRED),
        "assignments": ("int lists", []),
        "validate_only": ("bool", False),
    },
    "alter_configs": {
        "name": ("str", _REQUIRED),
        "configs": ("configs", _REQUIRED),
        "validate_only": ("bool", False),
    },
    "alter_partition": {
        "broker_id": ("int", _REQUIRED),
        "topic_id": ("str", _REQUIRED),
        "partition": ("int", _REQUIRED),
        "leader_epoch": ("int", _REQUIRED),
        "new_isr": ("ints", _REQUIRED),
        "partition_epoch": ("int", _REQUIRED),
    },
    "elect_preferred_leaders": {"partitions": ("pairs?", None)},
    "allocate_producer_ids": {"broker_id": ("int", _REQUIRED)},
    "describe": {"events_max": ("int", DESCRIBE_EVENTS_DEFAULT)},
}


class _BadParams(ValueError):
    pass


def _bind(method: str, spec: Mapping[str, tuple[str, Any]], params: Mapping[str, Any]):
    """Keyword arguments for ``method`` from ``params``, or _BadParams saying what is wrong."""
    unknown = sorted(set(params) - set(spec))
    if unknown:
        raise _BadParams(f"{method} has no parameter(s) {', '.join(unknown)[:200]}")
    kwargs = {}
    for name, (kind, default) in spec.items():
        if name not in params:
            if default is _REQUIRED:
                raise _BadParams(f"{method} needs parameter {name}")
            kwargs[name] = default
            continue
        check, what = _KINDS[kind]
        if not check(params[name]):
            raise _BadParams(f"{method} parameter {name} must be {what}")
        kwargs[name] = params[name]
    return kwargs


# -- results ---------------------------------------------------------------------------------------


def _reply(result: ControllerResult, shape: Callable[[Any], Any]) -> Reply:
    if not result.ok:
        return result.error_code, result.message, None
    return errors.NONE, "", shape(result.value)


def _topic_json(topic: TopicImage) -> dict[str, Any]:
    return {
        "name": topic.name,
        "topic_id": topic.topic_id,
        "num_partitions": len(topic.partitions),
        "replication_factor": len(topic.partitions[0].replicas) if topic.partitions else 0,
        "configs": dict(topic.configs),
        "partitions": [vars_of(p) for p in topic.partitions],
    }


def _partition_json(p: PartitionImage) -> dict[str, Any]:
    return {
        "leader": p.leader,
        "leader_epoch": p.leader_epoch,
        "partition_epoch": p.partition_epoch,
        "isr": list(p.isr),
    }


def monotonic_wall_clock() -> Callable[[], int]:
    """Milliseconds that read as wall-clock time at start-up but never jump or go back."""
    wall_ms, start_s = time.time_ns() // 1_000_000, time.monotonic()
    return lambda: wall_ms + int((time.monotonic() - start_s) * 1000)


# -- the server ------------------------------------------------------------------------------------


class ControllerServer:
    """Serves the controller RPC for one Controller on host:port, and ticks its clock."""

    def __init__(
        self,
        controller: Controller,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        clock: Callable[[], int] | None = None,
        tick_interval_ms: int = TICK_INTERVAL_MS,
    ) -> None:
        assert tick_interval_ms > 0, tick_interval_ms
        self.controller = controller
        self.host = host
        self.port = port
        self.tick_interval_ms = tick_interval_ms
        self.exit_code = 0
        self.stopped = asyncio.Event()
        self._clock = monotonic_wall_clock() if clock is None else clock
        self._now_ms = self._clock()
        self._server: asyncio.Server | None = None
        self._timers: list[asyncio.Task] = []
        self._connections: set[asyncio.Task] = set()
        self._appended = asyncio.Event()  # replaced after every publish; long polls wait on it
        self._published_end = controller.log.end_offset
        self._stopping = False

    def now_ms(self) -> int:
        self._now_ms = max(self._now_ms, self._clock())
        return self._now_ms

    async def start(self) -> int:
        """Listen and start the tick timer; return the bound port."""
        self._server = await asyncio.start_server(
            self._serve, self.host, self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._timers = [asyncio.create_task(self._tick_loop())]
        log.info(
            "controller listening on %s:%d (metadata log end offset %d, %d broker(s), %d topic(s))",
            self.host,
            self.port,
            self.controller.log.end_offset,
            len(self.controller.image.brokers),
            len(self.controller.image.topics),
        )
        return self.port

    async def stop(self, exit_code: int = 0) -> None:
        """Stop listening, end every connection and the timer, then close the log."""
        if self._stopping:
            return
        self._stopping = True
        self.exit_code = exit_code
        if self._server is not None:
            self._server.close()
        tasks = [*self._timers, *self._connections]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.controller.close()
        self.stopped.set()

    def _fail(self, what: str, error: OSError) -> None:
        """A metadata log write failed: nothing acknowledged can be trusted to be durable."""
        log.critical("%s: metadata log write failed (%s); stopping", what, error)
        asyncio.ensure_future(self.stop(exit_code=1))

    # -- timers and publication ------------------------------------------------------------------

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self.tick_interval_ms / 1000)
            try:
                self.controller.tick(self.now_ms())
            except OSError as error:
                self._fail("tick", error)
                return
            except Exception:
                log.exception("tick failed")
            self._publish()

    def _publish(self) -> None:
        """If the log grew: log the new events and wake every long poll."""
        end = self.controller.log.end_offset
        if end == self._published_end:
            return
        fresh = [e for e in self.controller.events if e.offset >= self._published_end]
        for event in fresh[:EVENT_LOG_LINES_MAX]:
            log.info("%s: %s (offset %d)", event.kind, event.text, event.offset)
        if len(fresh) > EVENT_LOG_LINES_MAX:
            log.info("... and %d more event(s)", len(fresh) - EVENT_LOG_LINES_MAX)
        self._published_end = end
        self._appended.set()
        self._appended = asyncio.Event()

    async def _wait_for_append(self, offset: int, wait_ms: int) -> None:
        """Return once the log extends past ``offset``, or after ``wait_ms``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_ms / 1000
        while self.controller.log.end_offset <= offset:
            remaining_s = deadline - loop.time()
            if remaining_s <= 0:
                return
            try:
                async with asyncio.timeout(remaining_s):
                    await self._appended.wait()
            except TimeoutError:
                return

    # -- connections -----------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        if len(self._connections) >= CONNECTIONS_MAX:
            log.warning("refusing connection from %s: %d connections open", peer, CONNECTIONS_MAX)
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None  # asyncio.start_server runs each connection in a task
        self._connections.add(task)
        try:
            while (payload := await read_frame(reader, REQUEST_BYTES_MAX)) is not None:
                writer.write(await self._respond(parse_frame(payload)))
                await writer.drain()
        except FrameError as error:
            log.warning("closing connection from %s: %s", peer, error)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("closing connection from %s after an internal error", peer)
        finally:
            self._connections.discard(task)
            writer.close()

    async def _respond(self, request: dict[str, Any]) -> bytes:
        method, params = request.get("method"), request.get("params", {})
        if not isinstance(method, str) or not isinstance(params, dict):
            raise FrameError("request needs a string method and an object params")
        spec = METHODS.get(method)
        reply: tuple[int, str, Any]
        if spec is None:
            reply = errors.UNSUPPORTED_VERSION, f"Unknown controller method {method[:100]!r}", None
        else:
            try:
                kwargs = _bind(method, spec, params)
            except _BadParams as error:
                reply = errors.INVALID_REQUEST, str(error), None
            else:
                reply = await self._invoke(method, kwargs)
        code, message, result = reply
        frame = encode_frame(
            {"id": request["id"], "error_code": code, "message": message, "result": result}
        )
        if len(frame) > RESPONSE_BYTES_MAX:
            text = f"{method} result of {len(frame)} bytes exceeds {RESPONSE_BYTES_MAX}"
            frame = encode_frame(
                {
                    "id": request["id"],
                    "error_code": errors.UNKNOWN_SERVER_ERROR,
                    "message": text,
                    "result": None,
                }
            )
        return frame

    async def _invoke(self, method: str, kwargs: dict[str, Any]) -> Reply:
        try:
            reply = getattr(self, f"_rpc_{method}")(**kwargs)
            if inspect.isawaitable(reply):
                reply = await reply
        except OSError as error:
            self._fail(method, error)
            reply = errors.UNKNOWN_SERVER_ERROR, "metadata log write failed", None
        except Exception as error:
            # The core publishes an image only after its batch is durable, so it stays consistent.
            log.exception("%s failed", method)
            reply = errors.UNKNOWN_SERVER_ERROR, f"{method} failed: {type(error).__name__}", None
        self._publish()
        return reply

    # -- methods (see the module docstring) ------------------------------------------------------

    def _rpc_register_broker(
        self, broker_id: int, host: str, port: int, incarnation_id: str
    ) -> Reply:
        ctl = self.controller
        result = ctl.register_broker(broker_id, host, port, incarnation_id, self.now_ms())
        return _reply(
            result,
            lambda broker: {
                **vars_of(broker),
                "metadata_end_offset": ctl.log.end_offset,
                "session_timeout_ms": ctl.session_timeout_ms,
                "heartbeat_interval_ms": BROKER_HEARTBEAT_INTERVAL_MS,
            },
        )

    def _rpc_heartbeat(
        self, broker_id: int, incarnation_id: str | None, caught_up: bool, metadata_offset: int
    ) -> Reply:
        ctl = self.controller
        applied = None if metadata_offset < 0 else metadata_offset
        result = ctl.heartbeat(broker_id, self.now_ms(), caught_up, incarnation_id,
                               metadata_offset=applied)
        return _reply(
            result,
            lambda broker: {
                "fenced": broker.fenced,
                "metadata_end_offset": ctl.log.end_offset,
            },
        )

    async def _rpc_fetch_metadata(
        self, from_offset: int, max_records: int, max_wait_ms: int
    ) -> Reply:
        metadata_log = self.controller.log
        if not 0 <= from_offset <= metadata_log.end_offset:
            message = f"Offset {from_offset} is outside 0..{metadata_log.end_offset}"
            return errors.OFFSET_OUT_OF_RANGE, message, None
        if max_records < 1 or max_wait_ms < 0:
            message = "max_records must be positive and max_wait_ms not negative"
            return errors.INVALID_REQUEST, message, None
        if from_offset == metadata_log.end_offset and max_wait_ms > 0:
            await self._wait_for_append(from_offset, min(max_wait_ms, FETCH_WAIT_MS_MAX))
        end = metadata_log.end_offset
        records = metadata_log.read(from_offset, min(max_records, READ_RECORDS_MAX))
        return (
            errors.NONE,
            "",
            {
                "records": [r.to_dict() for r in records],
                "next_offset": from_offset + len(records),
                "end_offset": end,
            },
        )

    def _rpc_create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        assignments: list[list[int]],
        configs: dict[str, str | None],
        validate_only: bool,
    ) -> Reply:
        result = self.controller.create_topic(
            name,
            num_partitions,
            replication_factor,
            assignments,
            configs,
            validate_only,
            now_ms=self.now_ms(),
        )
        return _reply(result, _topic_json)

    def _rpc_delete_topic(self, name: str) -> Reply:
        result = self.controller.delete_topic(name, now_ms=self.now_ms())
        return _reply(result, lambda topic_id: {"topic_id": topic_id})

    def _rpc_create_partitions(
        self, name: str, count: int, assignments: list[list[int]], validate_only: bool
    ) -> Reply:
        result = self.controller.create_partitions(
            name, count, assignments, validate_only, now_ms=self.now_ms()
        )
        return _reply(result, _topic_json)

    def _rpc_alter_configs(
        self, name: str, configs: dict[str, str | None], validate_only: bool
    ) -> Reply:
        result = self.controller.alter_configs(name, configs, validate_only, now_ms=self.now_ms())
        return _reply(result, _topic_json)

    def _rpc_alter_partition(
        self,
        broker_id: int,
        topic_id: str,
        partition: int,
        leader_epoch: int,
        new_isr: list[int],
        partition_epoch: int,
    ) -> Reply:
        result = self.controller.alter_partition(
            broker_id,
            topic_id,
            partition,
            leader_epoch,
            new_isr,
            partition_epoch,
            now_ms=self.now_ms(),
        )
        return _reply(result, _partition_json)

    def _rpc_elect_preferred_leaders(self, partitions: list[list[Any]] | None) -> Reply:
        wanted = None if partitions is None else {(t, i) for t, i in partitions}
        result = self.controller.elect_preferred_leaders(self.now_ms(), wanted)
        image = self.controller.image
        elected = [
            {
                "topic": image.topic_names[r.topic_id],
                "partition": r.partition,
                "leader": r.leader,
                "leader_epoch": r.leader_epoch,
            }
            for r in result.records
            if isinstance(r, PartitionChange) and r.leader is not None
        ]
        return _reply(result, lambda _: {"elected": elected})

    def _rpc_allocate_producer_ids(self, broker_id: int) -> Reply:
        result = self.controller.allocate_producer_ids(broker_id, now_ms=self.now_ms())
        return _reply(result, lambda block: {"first_id": block[0], "size": block[1]})

    def _rpc_describe(self, events_max: int) -> Reply:
        ctl, now_ms = self.controller, self.now_ms()
        described = ctl.image.to_dict()
        for broker in described["brokers"]:
            expiry_ms = ctl.lease_expiry_ms(broker["broker_id"])
            broker["lease_expires_in_ms"] = None if expiry_ms is None else expiry_ms - now_ms
        count = max(0, min(events_max, EVENTS_MAX))
        events = list(ctl.events)[len(ctl.events) - count :]
        described.update(
            end_offset=ctl.log.end_offset,
            now_ms=now_ms,
            session_timeout_ms=ctl.session_timeout_ms,
            events=[e.to_dict() for e in events],
        )
        return errors.NONE, "", described


# -- the process -----------------------------------------------------------------------------------


async def run_controller(
    data_dir: Path,
    host: str,
    port: int,
    ready_fd: int | None,
    parent_fd: int | None,
    *,
    session_timeout_ms: int = BROKER_SESSION_TIMEOUT_MS,
) -> int:
    """Run the controller until SIGTERM/SIGINT or until the supervisor's pipe closes; return the
    exit code (1 if the metadata log could not be written). Once listening it writes "<port>\\n"
    to ``ready_fd``."""
    clock = monotonic_wall_clock()
    controller = Controller.open(data_dir, now_ms=clock(), session_timeout_ms=session_timeout_ms)
    info = controller.log.load_info
    if info.truncated_bytes:
        log.warning("metadata log: cut a torn tail of %d byte(s)", info.truncated_bytes)
    server = ControllerServer(controller, host, port, clock=clock)
    port = await server.start()
    arrange_shutdown(server.stop, parent_fd, ready_fd, str(port))
    await server.stopped.wait()
    if server.exit_code == 0:
        log.info("controller stopped cleanly")
    return server.exit_code
