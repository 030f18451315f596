"""ControllerServer: the asyncio shell of one controller voter, serving the controller RPC.

Theory of operation: one event loop owns the voter's QuorumController (``quorum.py``) and the
RaftShell that carries its Raft messages to the other voters on their own port. Each RPC
connection is served strictly in order, one request at a time (the wire format is in
``rpc.py``); a long-polling ``fetch_metadata`` holds only its own connection. A frame whose size
is negative or above REQUEST_BYTES_MAX, that is not a UTF-8 JSON object with an integer ``id``, a
string ``method`` and an object ``params``, closes that one connection after one log line. A
well-formed request for an unknown method gets UNSUPPORTED_VERSION (35); parameters that are
missing, unknown or of the wrong type get INVALID_REQUEST (42); a refused operation gets the
Kafka code the core chose.

Only the active controller decides. Every method but ``describe`` on a standby answers
NOT_CONTROLLER (41) with ``result`` = {leader_id, outcome_unknown: false}, so a client can go to
the leader it names. The active controller answers once the quorum has committed everything it
had decided by then; if it stops being active first it answers NOT_CONTROLLER with
``outcome_unknown: true`` (the decision may or may not survive), and if no majority commits
within COMMIT_WAIT_MS_MAX it answers REQUEST_TIMED_OUT (7). ``describe`` is answered by every
voter from its committed image.

A timer calls the active controller's ``tick`` every TICK_INTERVAL_MS, which fences brokers whose
lease ran out. After every step of the quorum the server logs role changes and newly committed
events and wakes long polls. The clock is monotonic (leases must not jump with NTP) but anchored
at the wall clock at start-up, so event times read as real times.

Methods (params with defaults are optional; results are JSON objects):

- register_broker(broker_id, host, port, incarnation_id) -> {broker_id, host, port,
  incarnation_id, fenced, metadata_end_offset, session_timeout_ms, heartbeat_interval_ms}
- heartbeat(broker_id, incarnation_id=null, caught_up=true, metadata_offset=-1) -> {fenced,
  metadata_end_offset}; metadata_offset is the broker's applied offset (-1: not told)
- fetch_metadata(from_offset, max_records=10000, max_wait_ms=0) -> {records: [record objects],
  next_offset, end_offset, reset?}: committed records only (end_offset is the committed end);
  Raft's epoch-start markers take offsets but are not sent, so next_offset may pass from_offset
  + len(records); waits up to max_wait_ms for a commit when from_offset == end_offset. From
  before the log start (a snapshot dropped the log there) the answer is the snapshot's records,
  whole, with reset: true (replace your image by their fold; the key is absent otherwise) and
  next_offset its end offset
- create_topic(name, num_partitions=-1, replication_factor=-1, assignments=[], configs={},
  validate_only=false) -> topic: {name, topic_id, num_partitions, replication_factor, configs,
  partitions: [{replicas, isr, leader, leader_epoch, partition_epoch}]}
- delete_topic(name) -> {topic_id}
- create_partitions(name, count, assignments=[], validate_only=false) -> topic
- alter_configs(name, configs, validate_only=false) -> topic (configs replace the overrides)
- alter_group_configs(group, configs, validate_only=false) -> {configs} (replace a group's
  overrides; {} removes them)
- alter_partition(broker_id, topic_id, partition, leader_epoch, new_isr, partition_epoch)
  -> {leader, leader_epoch, partition_epoch, isr}
- elect_preferred_leaders(partitions=null) -> {elected: [{topic, partition, leader,
  leader_epoch}]}; partitions is [[topic name, index], ...] or null for all
- allocate_producer_ids(broker_id) -> {first_id, size}
- set_isolated(isolated) -> {isolated}: fault injection, cuts this voter off from the others
- describe_quorum() -> {quorum}: describe's quorum section alone (cheap: no image)
- alter_user_scram_credentials(deletions=[], upsertions=[]) -> {results: [{user, error_code,
  error_message}]}; deletions [{name, mechanism}], upsertions [{name, mechanism, iterations,
  salt, salted_password}] (base64; the controller keeps the stored and server keys)
- describe_user_scram_credentials(users=null) -> {results: [{user, error_code, error_message,
  credential_infos: [{mechanism, iterations}]}]}: every user with a credential (users null or
  empty), or those named
- create_acls(creations) -> {results: [{error_code, error_message}]}; a creation is {
  resource_type, resource_name, pattern_type, principal, host, operation, permission_type}
  (Kafka's codes)
- delete_acls(filters) -> {filter_results: [{error_code, error_message, matching_acls:
  [{error_code, error_message, resource_type, ...}]}]}; a filter is a creation's fields with
  ANY (1) codes, MATCH (2) as pattern type, and null resource_name, principal or host
- alter_client_quotas(entries, validate_only=false) -> {entries: [{entity, error_code,
  error_message}]}; an entry is {entity: [[type, name or null], ...], ops: [{key, value,
  remove}]}
- describe_client_quotas(components=[], strict=false) -> {entries: [{entity, values}]}; a
  component is {entity_type, match_type (0 exact, 1 default, 2 any specified name), match}

The describes of security metadata answer from the committed image of the active controller
(NOT_CONTROLLER elsewhere, like the other methods). With the cluster's secrets (``--secrets``)
a connection is served only once its first frame authenticates (``auth.py``); ``authenticate``
(token) is that frame, answered {} (without secrets, any token is accepted).
- describe(events_max=100) -> the committed image.to_dict() (brokers also carry
  lease_expires_in_ms, null on a standby) plus {end_offset (committed), now_ms,
  session_timeout_ms, events: [{now_ms (when decided), offset, kind, text}], quorum: {node_id,
  voters, role, active, leader_id, epoch, high_watermark, log_start_offset, log_end_offset,
  voter_lag}}
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pylog_nb.broker import errors
from pylog_nb.broker.process.shutdown import arrange_shutdown

from ..metadata.image import PartitionImage, TopicImage, vars_of
from ..metadata.records import PartitionChange
from ..raft.log import RaftLog
from ..raft.node import RaftNode
from ..raft.quorum_state import QuorumStateStore
from ..raft.shell import RaftShell
from ..security.sasl import SCRAM_MECHANISMS, ScramCredential, scram_credential
from ..security.secrets import ClusterSecrets
from .auth import AUTHENTICATE, AUTHENTICATION_FAILED, accept_connection, token_matches
from .controller import (
    BROKER_HEARTBEAT_INTERVAL_MS,
    BROKER_SESSION_TIMEOUT_MS,
    Controller,
    ControllerResult,
)
from .errors import ControllerError
from .events import EVENTS_MAX
from .quorum import METADATA_SNAPSHOT_RECORDS_MAX, NotControllerError, QuorumController
from .rpc import (
    REQUEST_BYTES_MAX,
    RESPONSE_BYTES_MAX,
    FrameError,
    encode_frame,
    parse_frame,
    read_frame,
)
from .security_control import describe_client_quotas, describe_user_scram_credentials

__all__ = ["METHODS", "TICK_INTERVAL_MS", "ControllerServer", "run_controller"]

log = logging.getLogger("pylog.controller")

TICK_INTERVAL_MS = 100  # the tick runs at least this often; a lease at its deadline
TICK_DELAY_MS_MIN = 1  # never a busy loop on a lease that has just expired
# A tick this much later than planned means this process was stalled (starved of CPU, a slow
# fsync): the brokers' heartbeats of that time may be unread yet, so their leases are extended.
CONTROLLER_STALL_MS_MIN = 250
FETCH_WAIT_MS_MAX = 30_000  # no long poll holds a connection longer than this
# One metadata fetch answers at most this many records, so a new broker catches up in slices.
READ_RECORDS_MAX = 10_000
# Below the clients' CALL_TIMEOUT_MS: a quorum without a majority answers REQUEST_TIMED_OUT
# (a clear error) rather than leaving the caller to time out.
COMMIT_WAIT_MS_MAX = 5_000
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


def _is_number(v: Any) -> bool:
    return type(v) is float or _is_int(v)


def _is_entity(v: Any) -> bool:
    return isinstance(v, list) and all(
        isinstance(x, list) and len(x) == 2 and isinstance(x[0], str)
        and (x[1] is None or isinstance(x[1], str)) for x in v)


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
    "int?": (lambda v: v is None or _is_int(v), "an integer or null"),
    "number": (_is_number, "a number"),
    "strs?": (
        lambda v: v is None or (isinstance(v, list) and all(isinstance(x, str) for x in v)),
        "null or a list of strings",
    ),
    "entity": (_is_entity, "a list of [entity type, name or null] pairs"),
}

# Items of the list parameters: {field: kind}, every field required.
_ITEMS: dict[str, dict[str, str]] = {
    "scram deletions": {"name": "str", "mechanism": "str"},
    "scram upsertions": {"name": "str", "mechanism": "str", "iterations": "int",
                         "salt": "str", "salted_password": "str"},
    "acl creations": {"resource_type": "int", "resource_name": "str", "pattern_type": "int",
                      "principal": "str", "host": "str", "operation": "int",
                      "permission_type": "int"},
    "acl filters": {"resource_type": "int", "resource_name": "str?", "pattern_type": "int",
                    "principal": "str?", "host": "str?", "operation": "int",
                    "permission_type": "int"},
    "quota ops": {"key": "str", "value": "number", "remove": "bool"},
    "quota entries": {"entity": "entity", "ops": "quota ops"},
    "quota components": {"entity_type": "str", "match_type": "int", "match": "str?"},
}


def _is_items(kind: str, v: Any) -> bool:
    fields = _ITEMS[kind]
    return isinstance(v, list) and all(
        isinstance(item, dict) and set(item) == set(fields)
        and all(_KINDS[k][0](item[f]) for f, k in fields.items()) for item in v)


def _items_check(kind: str) -> Callable[[Any], bool]:
    return lambda v: _is_items(kind, v)


_KINDS.update({kind: (_items_check(kind), f"a list of objects with exactly {', '.join(fields)}")
               for kind, fields in _ITEMS.items()})

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
    "alter_group_configs": {
        "group": ("str", _REQUIRED),
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
    "set_isolated": {"isolated": ("bool", _REQUIRED)},
    "describe_quorum": {},
    "alter_user_scram_credentials": {
        "deletions": ("scram deletions", []),
        "upsertions": ("scram upsertions", []),
    },
    "describe_user_scram_credentials": {"users": ("strs?", None)},
    "create_acls": {"creations": ("acl creations", _REQUIRED)},
    "delete_acls": {"filters": ("acl filters", _REQUIRED)},
    "alter_client_quotas": {
        "entries": ("quota entries", _REQUIRED),
        "validate_only": ("bool", False),
    },
    "describe_client_quotas": {
        "components": ("quota components", []),
        "strict": ("bool", False),
    },
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


class _Refused(Exception):
    """An RPC refused with a Kafka error code, a message and (for NOT_CONTROLLER) a result."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(reply[1])
        self.reply = reply


def _not_controller(error: NotControllerError) -> Reply:
    return errors.NOT_CONTROLLER, str(error), {"leader_id": error.leader_id,
                                               "outcome_unknown": error.outcome_unknown}


class ControllerServer:
    """Serves the controller RPC for one voter of the quorum on host:port, runs the voter's
    Raft shell, and ticks the active controller's clock."""

    def __init__(
        self,
        quorum: QuorumController,
        shell: RaftShell,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        clock: Callable[[], int] | None = None,
        tick_interval_ms: int = TICK_INTERVAL_MS,
        secrets: ClusterSecrets | None = None,
    ) -> None:
        """``secrets``: connections must present its internal token, and the active controller
        writes a SCRAM credential of each of its users the image lacks (the bootstrap)."""
        assert tick_interval_ms > 0, tick_interval_ms
        self.quorum = quorum
        self.shell = shell
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
        self._stepped = asyncio.Event()  # replaced after every step of the quorum
        self._published_end = quorum.applied_offset
        self._role: tuple = ()  # (raft role, epoch, leader, active) as last logged
        self._stopping = False
        self.token = None if secrets is None else secrets.internal_token
        self._bootstrap_users = {} if secrets is None else dict(secrets.users)
        self._bootstrapped: Controller | None = None  # the active controller that checked them
        shell.on_change = self._on_step

    def now_ms(self) -> int:
        self._now_ms = max(self._now_ms, self._clock())
        return self._now_ms

    async def start(self) -> int:
        """Listen, start the Raft shell and the tick timer; return the bound port."""
        await self.shell.start()
        self._server = await asyncio.start_server(
            self._serve, self.host, self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._timers = [asyncio.create_task(self._tick_loop())]
        node = self.quorum.node
        log.info(
            "controller %d listening on %s:%d, raft on %s:%d (voters %s, log end offset %d, "
            "epoch %d)",
            node.node_id, self.host, self.port, self.shell.host, self.shell.port,
            sorted(node.voters), node.log.end_offset, node.epoch,
        )
        return self.port

    async def stop(self, exit_code: int = 0) -> None:
        """Stop listening, end every connection, the timer and the shell, then close the log."""
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
        await self.shell.stop()
        self.quorum.node.log.close()
        self.stopped.set()

    def _fail(self, what: str, error: OSError) -> None:
        """A metadata log write failed: nothing acknowledged can be trusted to be durable."""
        log.critical("%s: metadata log write failed (%s); stopping", what, error)
        asyncio.ensure_future(self.stop(exit_code=1))

    # -- timers and publication ------------------------------------------------------------------

    async def _tick_loop(self) -> None:
        while True:
            delay_ms = self._tick_delay_ms()
            slept_from_ms = self.now_ms()
            await asyncio.sleep(delay_ms / 1000)
            late_ms = self.now_ms() - slept_from_ms - delay_ms
            active = self.quorum.active
            if active is None:
                continue
            if late_ms > CONTROLLER_STALL_MS_MIN:
                log.info("controller stalled %d ms: broker leases extended by as much", late_ms)
                active.extend_leases(late_ms)
                continue  # the heartbeats waiting in the sockets are read before the next tick
            try:
                active.tick(self.now_ms())
                self.shell.send(self.quorum.take_sends())
            except OSError as error:
                self._fail("tick", error)
                return
            except Exception:
                log.exception("tick failed")

    def _tick_delay_ms(self) -> int:
        """Until the next lease expires (acted on at its deadline), at most one tick interval."""
        active = self.quorum.active
        expiry_ms = None if active is None else active.next_lease_expiry_ms()
        if expiry_ms is None:
            return self.tick_interval_ms
        return max(TICK_DELAY_MS_MIN, min(self.tick_interval_ms, expiry_ms - self.now_ms()))

    def _on_step(self) -> None:
        """After every step of the quorum: say what changed, wake whoever waits, and have a
        newly active controller check the bootstrap users."""
        self._publish()
        self._stepped.set()
        self._stepped = asyncio.Event()
        active = self.quorum.active
        if active is not None and active is not self._bootstrapped and self._bootstrap_users:
            self._bootstrapped = active
            if not self._stopping:
                self._timers.append(asyncio.ensure_future(self._bootstrap_scram_users()))

    async def _bootstrap_scram_users(self) -> None:
        """Write a credential of each mechanism for every bootstrap user the image lacks
        (random salt, SCRAM_ITERATIONS_DEFAULT), as Kafka's ``kafka-storage format
        --add-scram`` does. Only the active controller writes, through the log, and only what
        its image lacks: a failover before the commit leaves it to the next active one."""
        active = self.quorum.active
        if active is None:
            return
        wanted: dict[tuple[str, str], ScramCredential] = {
            (user, mechanism): scram_credential(mechanism, password)
            for user, password in sorted(self._bootstrap_users.items())
            for mechanism in SCRAM_MECHANISMS
            if (user, mechanism) not in active.image.scram_credentials}
        if not wanted:
            return
        try:
            result, _ = await self._decide(
                lambda ctl, now_ms: ctl.ensure_scram_credentials(wanted, now_ms=now_ms))
        except (NotControllerError, _Refused) as error:
            log.warning("bootstrap SCRAM credentials not committed (%s); the next active "
                        "controller writes them", error)
            return
        except OSError as error:
            self._fail("bootstrap of SCRAM users", error)
            return
        except Exception:
            log.exception("bootstrap of SCRAM users failed")
            return
        if result.value:
            log.info("bootstrap: SCRAM credentials written for %s",
                     ", ".join(f"{user} ({mechanism})" for user, mechanism in result.value))

    def _publish(self) -> None:
        node = self.quorum.node
        role = (node.role.value, node.epoch, node.leader_id, self.quorum.active is not None)
        if role != self._role:
            what = "the active controller" if role[3] else f"{role[0]} (leader {role[2]})"
            log.info("controller %d is %s in epoch %d", node.node_id, what, node.epoch)
            self._role = role
        end = self.quorum.applied_offset
        if end == self._published_end:
            return
        fresh = [e for e in self.quorum.events if e.offset >= self._published_end]
        for event in fresh[:EVENT_LOG_LINES_MAX]:
            log.info("%s: %s (offset %d)", event.kind, event.text, event.offset)
        if len(fresh) > EVENT_LOG_LINES_MAX:
            log.info("... and %d more event(s)", len(fresh) - EVENT_LOG_LINES_MAX)
        self._published_end = end

    async def _wait_for_step(self, deadline_s: float) -> bool:
        """Wait for the next step of the quorum; False once ``deadline_s`` (loop time) passed."""
        remaining_s = deadline_s - asyncio.get_running_loop().time()
        if remaining_s <= 0:
            return False
        try:
            async with asyncio.timeout(remaining_s):
                await self._stepped.wait()
        except TimeoutError:
            return False
        return True

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
            if not await accept_connection(reader, writer, self.token, log,
                                           f"controller {self.quorum.node_id}"):
                return
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
        if method == AUTHENTICATE:  # again, on an authenticated connection (or no secrets)
            ok = self.token is None or token_matches(self.token, params.get("token"))
            reply = ((errors.NONE, "", {}) if ok else
                     (errors.Errors.SASL_AUTHENTICATION_FAILED, AUTHENTICATION_FAILED, None))
        elif spec is None:
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
            return await getattr(self, f"_rpc_{method}")(**kwargs)
        except _Refused as refused:
            return refused.reply
        except NotControllerError as error:
            return _not_controller(error)
        except OSError as error:
            self._fail(method, error)
            return errors.UNKNOWN_SERVER_ERROR, "metadata log write failed", None
        except Exception as error:
            # The core publishes an image only after its batch is appended, so it stays
            # consistent; the batch commits or is cut by the next leader.
            log.exception("%s failed", method)
            return errors.UNKNOWN_SERVER_ERROR, f"{method} failed: {type(error).__name__}", None

    async def _decide(
        self, decision: Callable[[Controller, int], ControllerResult]
    ) -> tuple[ControllerResult, int]:
        """Run ``decision`` on the active controller; once everything it had decided by then is
        committed, its result and that committed offset. NotControllerError if this voter is
        not active, or stops being active first (then the outcome is unknown)."""
        ctl = self.quorum.controller()
        epoch = self.quorum.active_epoch
        assert epoch is not None
        result = decision(ctl, self.now_ms())
        self.shell.send(self.quorum.take_sends())
        target = self.quorum.commit_target
        deadline_s = asyncio.get_running_loop().time() + COMMIT_WAIT_MS_MAX / 1000
        while not self.quorum.check_committed(target, epoch):
            if not await self._wait_for_step(deadline_s):
                raise _Refused((errors.REQUEST_TIMED_OUT,
                                f"the quorum did not commit within {COMMIT_WAIT_MS_MAX} ms", None))
        return result, target

    # -- methods (see the module docstring) ------------------------------------------------------

    async def _rpc_register_broker(
        self, broker_id: int, host: str, port: int, incarnation_id: str
    ) -> Reply:
        result, committed = await self._decide(
            lambda ctl, now_ms: ctl.register_broker(broker_id, host, port, incarnation_id, now_ms)
        )
        session_timeout_ms = self.quorum.session_timeout_ms
        return _reply(
            result,
            lambda broker: {
                **vars_of(broker),
                "metadata_end_offset": committed,
                "session_timeout_ms": session_timeout_ms,
                "heartbeat_interval_ms": BROKER_HEARTBEAT_INTERVAL_MS,
            },
        )

    async def _rpc_heartbeat(
        self, broker_id: int, incarnation_id: str | None, caught_up: bool, metadata_offset: int
    ) -> Reply:
        applied = None if metadata_offset < 0 else metadata_offset
        result, committed = await self._decide(
            lambda ctl, now_ms: ctl.heartbeat(broker_id, now_ms, caught_up, incarnation_id,
                                              metadata_offset=applied)
        )
        return _reply(
            result, lambda broker: {"fenced": broker.fenced, "metadata_end_offset": committed}
        )

    async def _rpc_fetch_metadata(
        self, from_offset: int, max_records: int, max_wait_ms: int
    ) -> Reply:
        quorum = self.quorum
        quorum.controller()  # brokers follow the active controller only
        end = quorum.applied_offset
        if not 0 <= from_offset <= end or not quorum.is_batch_boundary(from_offset):
            message = f"Offset {from_offset} is not a committed batch boundary in 0..{end}"
            return errors.OFFSET_OUT_OF_RANGE, message, None
        if max_records < 1 or max_wait_ms < 0:
            message = "max_records must be positive and max_wait_ms not negative"
            return errors.INVALID_REQUEST, message, None
        deadline_s = asyncio.get_running_loop().time() + min(max_wait_ms, FETCH_WAIT_MS_MAX) / 1000
        while quorum.applied_offset <= from_offset and quorum.active is not None:
            if not await self._wait_for_step(deadline_s):
                break
        answer = quorum.read_committed(from_offset, min(max_records, READ_RECORDS_MAX))
        result = {
            "records": [r.to_dict() for r in answer.records],
            "next_offset": answer.next_offset,
            "end_offset": answer.end_offset,
        }
        if answer.reset:  # only then: older brokers never see the key
            result["reset"] = True
        return errors.NONE, "", result

    async def _rpc_create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        assignments: list[list[int]],
        configs: dict[str, str | None],
        validate_only: bool,
    ) -> Reply:
        result, _ = await self._decide(
            lambda ctl, now_ms: ctl.create_topic(
                name, num_partitions, replication_factor, assignments, configs, validate_only,
                now_ms=now_ms,
            )
        )
        return _reply(result, _topic_json)

    async def _rpc_delete_topic(self, name: str) -> Reply:
        result, _ = await self._decide(lambda ctl, now_ms: ctl.delete_topic(name, now_ms=now_ms))
        return _reply(result, lambda topic_id: {"topic_id": topic_id})

    async def _rpc_create_partitions(
        self, name: str, count: int, assignments: list[list[int]], validate_only: bool
    ) -> Reply:
        result, _ = await self._decide(
            lambda ctl, now_ms: ctl.create_partitions(
                name, count, assignments, validate_only, now_ms=now_ms
            )
        )
        return _reply(result, _topic_json)

    async def _rpc_alter_configs(
        self, name: str, configs: dict[str, str | None], validate_only: bool
    ) -> Reply:
        result, _ = await self._decide(
            lambda ctl, now_ms: ctl.alter_configs(name, configs, validate_only, now_ms=now_ms)
        )
        return _reply(result, _topic_json)

    async def _rpc_alter_group_configs(
        self, group: str, configs: dict[str, str | None], validate_only: bool
    ) -> Reply:
        result, _ = await self._decide(
            lambda ctl, now_ms: ctl.alter_group_configs(group, configs, validate_only,
                                                        now_ms=now_ms))
        return _reply(result, lambda overrides: {"configs": overrides})

    async def _rpc_alter_partition(
        self,
        broker_id: int,
        topic_id: str,
        partition: int,
        leader_epoch: int,
        new_isr: list[int],
        partition_epoch: int,
    ) -> Reply:
        result, _ = await self._decide(
            lambda ctl, now_ms: ctl.alter_partition(
                broker_id, topic_id, partition, leader_epoch, new_isr, partition_epoch,
                now_ms=now_ms,
            )
        )
        return _reply(result, _partition_json)

    async def _rpc_elect_preferred_leaders(self, partitions: list[list[Any]] | None) -> Reply:
        wanted = None if partitions is None else {(t, i) for t, i in partitions}
        result, _ = await self._decide(
            lambda ctl, now_ms: ctl.elect_preferred_leaders(now_ms, wanted)
        )
        image = self.quorum.image
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

    async def _rpc_allocate_producer_ids(self, broker_id: int) -> Reply:
        result, _ = await self._decide(
            lambda ctl, now_ms: ctl.allocate_producer_ids(broker_id, now_ms=now_ms)
        )
        return _reply(result, lambda block: {"first_id": block[0], "size": block[1]})

    async def _rpc_alter_user_scram_credentials(
        self, deletions: list[dict[str, Any]], upsertions: list[dict[str, Any]]
    ) -> Reply:
        result, _ = await self._decide(
            lambda ctl, now_ms: ctl.alter_user_scram_credentials(deletions, upsertions,
                                                                 now_ms=now_ms))
        return _reply(result, lambda results: {"results": results})

    async def _rpc_describe_user_scram_credentials(self, users: list[str] | None) -> Reply:
        self.quorum.controller()  # the active controller's committed image, as for writes
        return errors.NONE, "", {
            "results": describe_user_scram_credentials(self.quorum.image, users)}

    async def _rpc_create_acls(self, creations: list[dict[str, Any]]) -> Reply:
        result, _ = await self._decide(
            lambda ctl, now_ms: ctl.create_acls(creations, now_ms=now_ms))
        return _reply(result, lambda results: {"results": results})

    async def _rpc_delete_acls(self, filters: list[dict[str, Any]]) -> Reply:
        result, _ = await self._decide(lambda ctl, now_ms: ctl.delete_acls(filters, now_ms=now_ms))
        return _reply(result, lambda results: {"filter_results": results})

    async def _rpc_alter_client_quotas(
        self, entries: list[dict[str, Any]], validate_only: bool
    ) -> Reply:
        result, _ = await self._decide(
            lambda ctl, now_ms: ctl.alter_client_quotas(entries, validate_only, now_ms=now_ms))
        return _reply(result, lambda results: {"entries": results})

    async def _rpc_describe_client_quotas(
        self, components: list[dict[str, Any]], strict: bool
    ) -> Reply:
        self.quorum.controller()
        try:
            entries = describe_client_quotas(self.quorum.image, components, strict)
        except ControllerError as error:
            return error.error_code, str(error), None
        return errors.NONE, "", {"entries": entries}

    async def _rpc_set_isolated(self, isolated: bool) -> Reply:
        """Fault injection (loopback only, like the brokers' /v1/faults): cut this voter off
        from the other voters, or heal it; brokers and clients still reach it."""
        if isolated != self.shell.isolated:
            log.warning("controller %d %s the other voters (fault injection)",
                        self.quorum.node_id, "cut off from" if isolated else "reconnected to")
        self.shell.isolated = isolated
        return errors.NONE, "", {"isolated": isolated}

    async def _rpc_describe_quorum(self) -> Reply:
        return errors.NONE, "", {"quorum": self._quorum_view()}

    def _quorum_view(self) -> dict[str, Any]:
        return {**self.quorum.describe_quorum(), "isolated": self.shell.isolated}

    async def _rpc_describe(self, events_max: int) -> Reply:
        quorum, now_ms = self.quorum, self.now_ms()
        described = quorum.image.to_dict()
        active = quorum.active
        for broker in described["brokers"]:
            expiry_ms = None if active is None else active.lease_expiry_ms(broker["broker_id"])
            broker["lease_expires_in_ms"] = None if expiry_ms is None else expiry_ms - now_ms
        count = max(0, min(events_max, EVENTS_MAX))
        events = list(quorum.events)[len(quorum.events) - count :]
        session_timeout_ms = quorum.session_timeout_ms
        described.update(
            end_offset=quorum.applied_offset,
            now_ms=now_ms,
            session_timeout_ms=session_timeout_ms,
            events=[e.to_dict() for e in events],
            quorum=self._quorum_view(),
        )
        return errors.NONE, "", described


# -- the process -----------------------------------------------------------------------------------


def parse_voters(text: str) -> dict[int, tuple[str, int]]:
    """``"1@127.0.0.1:9093,2@127.0.0.1:9094"`` as {voter id: (host, raft port)}."""
    voters: dict[int, tuple[str, int]] = {}
    for entry in text.split(","):
        node_id, _, address = entry.strip().partition("@")
        host, _, port = address.rpartition(":")
        if not node_id.isdigit() or not host or not port.isdigit() or int(node_id) in voters:
            raise ValueError(f"voter {entry!r} is not ID@HOST:PORT (or is listed twice)")
        voters[int(node_id)] = (host, int(port))
    return voters


async def run_controller(
    data_dir: Path,
    host: str,
    port: int,
    ready_fd: int | None,
    parent_fd: int | None,
    *,
    node_id: int = 1,
    voters: dict[int, tuple[str, int]] | None = None,
    session_timeout_ms: int = BROKER_SESSION_TIMEOUT_MS,
    snapshot_records_max: int = METADATA_SNAPSHOT_RECORDS_MAX,
    secrets: ClusterSecrets | None = None,
) -> int:
    """Run one controller voter until SIGTERM/SIGINT or until the supervisor's pipe closes;
    return the exit code (1 if the metadata log could not be written). With ``secrets``, both
    listeners authenticate every connection and the cluster's SCRAM users are bootstrapped.
    Once listening it writes
    "<port>\\n" to ``ready_fd``."""
    voters = {node_id: (host, 0)} if voters is None else voters
    assert node_id in voters, (node_id, voters)
    clock = monotonic_wall_clock()
    raft_log = RaftLog.open(data_dir)
    if raft_log.truncated_bytes:
        log.warning("metadata log: cut a torn tail of %d byte(s)", raft_log.truncated_bytes)
    if raft_log.snapshot is not None:
        log.info("metadata log: starts at snapshot %s (%d records)",
                 raft_log.snapshot.snapshot_id, len(raft_log.snapshot.records))
    node = RaftNode(node_id, frozenset(voters), raft_log, QuorumStateStore(data_dir), clock())
    quorum = QuorumController(node, clock(), session_timeout_ms=session_timeout_ms,
                              snapshot_records_max=snapshot_records_max)
    peers = {v: address for v, address in voters.items() if v != node_id}
    token = None if secrets is None else secrets.internal_token
    shell = RaftShell(node, peers, voters[node_id][0], voters[node_id][1], clock, core=quorum,
                      token=token)
    server = ControllerServer(quorum, shell, host, port, clock=clock, secrets=secrets)
    port = await server.start()
    arrange_shutdown(server.stop, parent_fd, ready_fd, str(port))
    await server.stopped.wait()
    if server.exit_code == 0:
        log.info("controller stopped cleanly")
    return server.exit_code
