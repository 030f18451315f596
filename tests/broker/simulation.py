"""A deterministic, seeded simulation of one Controller and three brokers on virtual time.

No sockets, no asyncio, no wall clock: the sans-IO cores (``Controller``, ``LeaderState``,
``FollowerState``, ``diverging_epoch``) run against real storage ``Log``s in a temporary
directory, glued together the way the real broker glues them:

- ``Broker.apply_image`` mirrors ``ReplicaManager._reconcile`` / ``_become``;
- ``Sim.fetch`` mirrors ``handlers/fetch.py`` (epoch check, require leader, diverging_epoch,
  on_follower_fetch, read up to the LEO) and ``replica_fetcher.py`` (drop answers for a
  replaced FollowerState, ListOffsets after NeedLeaderOffsets);
- ``Sim.produce`` mirrors ``handlers/produce.py`` (check_acks_all, append_as_leader with the
  leader's epoch, after_leader_append);
- ``Sim.deliver_isr_changes`` mirrors ``cluster_link._alter_partition`` (AlterPartition, then
  wait for the metadata; on failure ``on_isr_change_rejected``).

Faults: broker crash (``close_handlers`` then ``Log.open``, as after SIGKILL, optionally with a
torn, half-written batch after the last complete one), pause (no heartbeats, fetches, metadata,
nor serving), network partition (heartbeats, AlterPartition, metadata and peer fetches dropped;
clients still reach it), and metadata applied by each broker after a random delay.

Invariants are checked after every step (``Sim.check``) and after a final heal-and-settle.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from pylog_nb.broker import errors
from pylog_nb.broker.controller import NO_LEADER, Controller
from pylog_nb.broker.records.batch import decode_records, encode_batch
from pylog_nb.broker.replication import (
    Action,
    CompleteDelayedProduce,
    FailDelayedProduce,
    FollowerState,
    LeaderState,
    NeedLeaderOffsets,
    RequestIsrChange,
    Truncated,
    diverging_epoch,
)
from pylog_nb.broker.storage import Log, LogConfig

TOPIC = "t"
BROKERS = (1, 2, 3)
MIN_INSYNC = 2
LAG_MS = 2_000
SESSION_MS = 3_000
PRODUCE_TIMEOUT_MS = 5_000
NOT_LEADER_OR_FOLLOWER = 6
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
UNKNOWN_TOPIC_OR_PARTITION = 3
CONFIG = LogConfig(segment_bytes=400, file_delete_delay_ms=0, retention_ms=-1)
FETCH_BYTES_MAX = 1 << 20


class InvariantViolation(AssertionError):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise InvariantViolation(message)


def log_values(log: Log, end: int | None = None) -> dict[int, bytes]:
    """offset -> value of every record from the log start up to ``end`` (default the LEO)."""
    start = log.log_start_offset
    stop = log.log_end_offset if end is None else min(end, log.log_end_offset)
    out: dict[int, bytes] = {}
    offset = start
    while offset < stop:  # one read returns batches of one segment only
        data = log.read(offset, FETCH_BYTES_MAX, max_offset=stop).read_bytes()
        if not data:
            break
        for r in decode_records(data):
            if start <= r.offset < stop:
                out[r.offset] = r.value
            offset = max(offset, r.offset + 1)
    return out


@dataclass
class Part:
    """One hosted replica (ReplicaManager.Partition)."""

    index: int
    log: Log
    leader_id: int
    leader_epoch: int
    leader: LeaderState | None = None
    follower: FollowerState | None = None


@dataclass
class Broker:
    broker_id: int
    root: Path
    sim: Sim
    incarnation: int = 0
    up: bool = True
    paused_until: int = -1
    partitioned: bool = False
    image: object = None  # the controller ClusterImage it last applied (possibly stale)
    parts: dict[int, Part] = field(default_factory=dict)
    outbox: list[RequestIsrChange] = field(default_factory=list)  # AlterPartition in flight
    inflight: list[tuple] = field(default_factory=list)  # fetch responses not delivered yet

    @property
    def incarnation_id(self) -> str:
        return f"b{self.broker_id}-{self.incarnation}"

    def running(self, now_ms: int) -> bool:
        return self.up and now_ms >= self.paused_until

    def reaches_peers(self, now_ms: int) -> bool:
        return self.running(now_ms) and not self.partitioned

    def log_dir(self, index: int) -> Path:
        return self.root / f"broker-{self.broker_id}" / f"{TOPIC}-{index}"

    # == ReplicaManager glue ======================================================================

    def apply_image(self, image) -> None:
        self.image = image
        topic = image.topics.get(TOPIC)
        if topic is None:
            return
        for index, state in enumerate(topic.partitions):
            if self.broker_id not in state.replicas:
                continue
            part = self.parts.get(index)
            if part is None:
                log = Log.open(self.log_dir(index), CONFIG, now_ms=lambda: self.sim.now_ms)
                part = Part(index, log, state.leader, state.leader_epoch)
                self.parts[index] = part
                self._become(part, state)
                continue
            previous = (part.leader_id, part.leader_epoch)
            part.leader_id, part.leader_epoch = state.leader, state.leader_epoch
            if (state.leader, state.leader_epoch) != previous:
                self._become(part, state)
            elif part.leader is not None and tuple(state.isr) != part.leader.isr:
                self.sim.on_actions(
                    self,
                    part.leader.on_isr_change_committed(
                        state.isr, state.partition_epoch, self.sim.now_ms
                    ),
                )

    def _become(self, part: Part, state) -> None:
        now_ms = self.sim.now_ms
        if part.leader is not None:
            self.sim.on_actions(self, part.leader.resign(now_ms))
        part.leader = part.follower = None
        if state.leader == self.broker_id:
            part.leader = LeaderState(
                TOPIC,
                part.index,
                self.broker_id,
                state.leader_epoch,
                state.replicas,
                state.isr,
                part.log,
                LAG_MS,
                MIN_INSYNC,
                now_ms=now_ms,
                partition_epoch=state.partition_epoch,
            )
            self.sim.on_become_leader(self, part)
        elif state.leader >= 0:
            part.follower = FollowerState(
                TOPIC, part.index, self.broker_id, state.leader, state.leader_epoch, part.log
            )

    def crash(self, rng: random.Random) -> None:
        """SIGKILL: in-memory state is gone; the page cache (file contents) survives."""
        for part in self.parts.values():
            part.log.close_handlers()
            if rng.random() < 0.5:  # a torn batch that was being written when the process died
                segments = sorted(part.log.directory.glob("*.log"))
                with open(segments[-1], "ab") as f:
                    f.write(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))))
        self.parts.clear()
        self.outbox.clear()
        self.inflight.clear()
        self.image = None
        self.up = False
        self.sim.fail_produces_of(self.broker_id)

    def close(self) -> None:
        for part in self.parts.values():
            part.log.close_handlers()


class Sim:
    def __init__(self, seed: int, root: Path, *, partitions: int | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.now_ms = 0
        self.trace: list[str] = []
        self.partition_count = partitions or self.rng.choice((1, 2))
        self.controller = Controller.open(
            root / "controller", now_ms=0, fsync=False, session_timeout_ms=SESSION_MS, seed=seed
        )
        self.brokers = {b: Broker(b, root, self) for b in BROKERS}
        self.next_produce_id = 1
        self.next_value = 1
        # acks=all produces waiting: id -> (broker, partition, [(offset, value)])
        self.waiting: dict[int, tuple[int, int, list[tuple[int, bytes]]]] = {}
        self.acked: dict[tuple[int, int], bytes] = {}  # (partition, offset) -> value, acks=all
        self.epoch_leaders: dict[tuple[int, int], int] = {}  # (partition, leader epoch) -> leader
        self.leader_hw: dict[tuple[int, int, int], int] = {}  # (broker, partition, epoch) -> HW
        self.stats = {"acked": 0, "failed": 0, "refused": 0, "crashes": 0, "elections": 0}
        for b in BROKERS:
            self.controller.register_broker(b, "localhost", 9000 + b, f"b{b}-0", now_ms=0)
            self.controller.heartbeat(b, 0, incarnation_id=f"b{b}-0")
        result = self.controller.create_topic(
            TOPIC,
            self.partition_count,
            3,
            configs={"min.insync.replicas": str(MIN_INSYNC)},
            now_ms=0,
        )
        assert result.ok, result
        self.observe_controller()
        for broker in self.brokers.values():
            broker.apply_image(self.controller.image)

    # == controller ==============================================================================

    def observe_controller(self) -> None:
        """Remember which broker the controller made leader of each epoch."""
        topic = self.controller.image.topics[TOPIC]
        for index, p in enumerate(topic.partitions):
            if p.leader == NO_LEADER:
                continue
            known = self.epoch_leaders.setdefault((index, p.leader_epoch), p.leader)
            check(
                known == p.leader,
                f"controller: epoch {p.leader_epoch} of {index} has leaders {known} and {p.leader}",
            )

    def heartbeat(self, broker: Broker) -> None:
        if not broker.reaches_peers(self.now_ms):
            return
        caught_up = broker.image is self.controller.image
        self.controller.heartbeat(
            broker.broker_id, self.now_ms, caught_up, incarnation_id=broker.incarnation_id
        )
        self.observe_controller()

    def controller_tick(self) -> None:
        self.controller.tick(self.now_ms)
        self.observe_controller()

    def propagate_metadata(self, broker: Broker) -> None:
        if broker.reaches_peers(self.now_ms) and broker.image is not self.controller.image:
            broker.apply_image(self.controller.image)

    def deliver_isr_changes(self, broker: Broker) -> None:
        """cluster_link._alter_partition: call the controller, then wait for the metadata."""
        changes, broker.outbox = broker.outbox, []
        for change in changes:
            part = broker.parts.get(change.partition)
            if part is None:
                continue
            ok = False
            if broker.reaches_peers(self.now_ms):
                topic_id = self.controller.image.topics[TOPIC].topic_id
                result = self.controller.alter_partition(
                    broker.broker_id,
                    topic_id,
                    change.partition,
                    change.leader_epoch,
                    change.new_isr,
                    change.partition_epoch,
                    now_ms=self.now_ms,
                )
                self.observe_controller()
                ok = result.ok
                self.heartbeat(broker)
                broker.apply_image(self.controller.image)
            if not ok and part.leader is not None:
                self.on_actions(broker, part.leader.on_isr_change_rejected(self.now_ms))

    # == broker shell ============================================================================

    def on_actions(self, broker: Broker, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, CompleteDelayedProduce):
                entry = self.waiting.pop(action.produce_id, None)
                if entry is not None:
                    self.stats["acked"] += 1
                    _, index, records = entry
                    for offset, value in records:
                        self.acked[(index, offset)] = value
            elif isinstance(action, FailDelayedProduce):
                if self.waiting.pop(action.produce_id, None) is not None:
                    self.stats["failed"] += 1
                    key = f"failed_{action.error_code}"
                    self.stats[key] = self.stats.get(key, 0) + 1
            elif isinstance(action, Truncated):
                self.stats["truncations"] = self.stats.get("truncations", 0) + 1
            elif isinstance(action, RequestIsrChange):
                broker.outbox.append(action)

    def on_become_leader(self, broker: Broker, part: Part) -> None:
        self.stats["elections"] += 1
        key = (part.index, part.leader.leader_epoch)
        expected = self.epoch_leaders.get(key)
        check(
            expected == broker.broker_id,
            f"broker {broker.broker_id} leads {key} but the controller chose {expected}",
        )

    def fail_produces_of(self, broker_id: int) -> None:
        for pid in [p for p, e in self.waiting.items() if e[0] == broker_id]:
            del self.waiting[pid]  # the client sees the connection drop

    def produce(self, via: Broker, index: int, acks: int, record_count: int) -> str:
        """A client asks ``via`` for metadata and sends the batch to that leader."""
        if not via.running(self.now_ms) or via.image is None:
            return "client: no metadata"
        state = via.image.topics[TOPIC].partitions[index]
        target = self.brokers.get(state.leader)
        if target is None or not target.running(self.now_ms):
            return "client: leader unreachable"
        part = target.parts.get(index)
        if part is None or part.leader is None:
            self.stats["refused"] += 1
            return f"b{target.broker_id} NOT_LEADER"
        leader = part.leader
        if acks == -1 and leader.check_acks_all(self.now_ms) != 0:
            self.stats["refused"] += 1
            return f"b{target.broker_id} NOT_ENOUGH_REPLICAS"
        vals = []
        for _ in range(record_count):
            vals.append(b"v%d" % self.next_value)
            self.next_value += 1
        buf = bytearray(encode_batch([(None, v, [], self.now_ms) for v in vals]))
        info = part.log.append_as_leader(buf, leader_epoch=leader.leader_epoch, now_ms=self.now_ms)
        produce_id = None
        if acks == -1:
            produce_id = self.next_produce_id
            self.next_produce_id += 1
            records = list(zip(range(info.first_offset, info.last_offset + 1), vals, strict=True))
            self.waiting[produce_id] = (target.broker_id, index, records)
        self.on_actions(
            target,
            leader.after_leader_append(
                info.last_offset, produce_id, acks, PRODUCE_TIMEOUT_MS, self.now_ms
            ),
        )
        offsets = f"{info.first_offset}..{info.last_offset}"
        return f"b{target.broker_id} appended {offsets} e{leader.leader_epoch}"

    def fetch(self, broker: Broker, index: int, max_bytes: int, deliver_now: bool) -> str:
        """One follower fetch: the request reaches the leader now; the answer maybe later."""
        if not broker.reaches_peers(self.now_ms):
            return "follower cannot fetch"
        part = broker.parts.get(index)
        if part is None or part.follower is None:
            return "not a follower"
        follower = part.follower
        spec = follower.next_fetch(self.now_ms)
        if spec is None:
            return f"no fetch ({follower.phase.value})"
        target = self.brokers[follower.leader_id]
        if not target.reaches_peers(self.now_ms):
            self.on_actions(broker, follower.on_fetch_failed(self.now_ms))
            return f"b{target.broker_id} unreachable"
        answer = self._serve_fetch(target, spec, max_bytes)
        broker.inflight.append((index, follower, target.broker_id, answer))
        if deliver_now:
            self.deliver_fetches(broker, 1)
        return f"fetch @{spec.fetch_offset} e{spec.last_fetched_epoch} -> {answer[:4]!r:.80}"

    def _serve_fetch(self, leader_broker: Broker, spec, max_bytes: int) -> tuple:
        """handlers/fetch._read_one for a follower; (records, hw, log start, diverging, error)."""
        try:
            part = leader_broker.parts.get(spec.partition)
            if part is None:
                return b"", -1, -1, None, UNKNOWN_TOPIC_OR_PARTITION
            epoch = spec.current_leader_epoch
            if epoch != -1 and epoch != part.leader_epoch:
                code = FENCED_LEADER_EPOCH if epoch < part.leader_epoch else UNKNOWN_LEADER_EPOCH
                return b"", -1, -1, None, code
            if part.leader is None:
                return b"", -1, -1, None, NOT_LEADER_OR_FOLLOWER
            log = part.log
            diverging = diverging_epoch(log, spec.fetch_offset, spec.last_fetched_epoch)
            if diverging is not None:
                return b"", log.high_watermark, log.log_start_offset, tuple(diverging), 0
            self.on_actions(
                leader_broker,
                part.leader.on_follower_fetch(spec.replica_id, spec.fetch_offset, self.now_ms),
            )
            hw, start = log.high_watermark, log.log_start_offset
            data = b""
            upper = log.log_end_offset
            if spec.fetch_offset < upper:
                data = log.read(
                    spec.fetch_offset, max_bytes, max_offset=upper, min_one_message=True
                ).read_bytes()
            elif spec.fetch_offset > upper:
                log.read(spec.fetch_offset, 0, max_offset=upper)
            return data, hw, start, None, 0
        except Exception as error:  # the handler turns every error into a code
            code = getattr(error, "error_code", None)
            if code is None:
                raise
            return b"", -1, -1, None, errors.error_code_of(error)

    def deliver_fetches(self, broker: Broker, count: int) -> None:
        """replica_fetcher._apply: answers for a replaced FollowerState are dropped."""
        for _ in range(min(count, len(broker.inflight))):
            index, follower, leader_id, answer = broker.inflight.pop(0)
            part = broker.parts.get(index)
            if part is None or part.follower is not follower:
                continue
            if not broker.reaches_peers(self.now_ms):
                self.on_actions(broker, follower.on_fetch_failed(self.now_ms))
                continue
            actions = follower.on_fetch_response(*answer, self.now_ms)
            self.on_actions(broker, actions)
            if any(isinstance(a, NeedLeaderOffsets) for a in actions):
                leader_part = self.brokers[leader_id].parts.get(index)
                if leader_part is not None and self.brokers[leader_id].reaches_peers(self.now_ms):
                    self.on_actions(
                        broker,
                        follower.on_leader_offsets(
                            leader_part.log.log_start_offset,
                            leader_part.log.log_end_offset,
                            self.now_ms,
                        ),
                    )

    def tick_brokers(self) -> None:
        for broker in self.brokers.values():
            if broker.running(self.now_ms):
                for part in broker.parts.values():
                    if part.leader is not None:
                        self.on_actions(broker, part.leader.on_tick(self.now_ms))

    def restart(self, broker: Broker) -> None:
        """The process comes back: new incarnation, registers, reads metadata, reopens logs."""
        broker.incarnation += 1
        broker.up = True
        broker.paused_until = -1
        self.controller.register_broker(
            broker.broker_id,
            "localhost",
            9000 + broker.broker_id,
            broker.incarnation_id,
            now_ms=self.now_ms,
        )
        self.observe_controller()
        broker.apply_image(self.controller.image)

    # == one random step =========================================================================

    def step(self) -> str:
        rng = self.rng
        roll = rng.random()
        brokers = list(self.brokers.values())
        b = rng.choice(brokers)
        index = rng.randrange(self.partition_count)
        if roll < 0.32:
            acks = rng.choice((-1, -1, 1))
            what = f"produce acks={acks} via b{b.broker_id} p{index}: " + self.produce(
                b, index, acks, rng.randint(1, 3)
            )
        elif roll < 0.50:
            max_bytes = rng.choice((1, FETCH_BYTES_MAX))
            what = f"b{b.broker_id} p{index} " + self.fetch(b, index, max_bytes, rng.random() < 0.7)
        elif roll < 0.62:
            for _ in range(rng.randint(1, 3)):  # a healthy stretch: everyone fetches
                for broker in brokers:
                    for i in list(broker.parts):
                        self.fetch(broker, i, FETCH_BYTES_MAX, True)
            what = "replication round"
        elif roll < 0.67:
            if b.reaches_peers(self.now_ms):
                self.deliver_fetches(b, rng.randint(1, 3))
            what = f"b{b.broker_id} deliver fetch answers"
        elif roll < 0.77:
            self.now_ms += rng.choice((10, 100, 500, 1_000, LAG_MS + 1, SESSION_MS + 1))
            for broker in brokers:
                if rng.random() < 0.8:
                    self.heartbeat(broker)
            self.controller_tick()
            self.tick_brokers()
            what = f"time -> {self.now_ms}"
        elif roll < 0.87:
            self.propagate_metadata(b)
            self.deliver_isr_changes(b)
            what = f"b{b.broker_id} metadata + AlterPartition"
        elif roll < 0.91:
            self.heartbeat(b)
            what = f"b{b.broker_id} heartbeat"
        elif roll < 0.94:
            if b.up:
                b.crash(rng)
                self.stats["crashes"] += 1
                what = f"b{b.broker_id} CRASH"
            else:
                self.restart(b)
                what = f"b{b.broker_id} restart"
        elif roll < 0.97:
            b.paused_until = self.now_ms + rng.choice((500, 2_000, 5_000))
            what = f"b{b.broker_id} pause until {b.paused_until}"
        else:
            b.partitioned = not b.partitioned
            what = f"b{b.broker_id} partitioned={b.partitioned}"
        return what

    # == invariants ==============================================================================

    def check(self) -> None:
        image = self.controller.image
        for index, p in enumerate(image.topics[TOPIC].partitions):
            self._check_leaders(index)
            leader = self.brokers.get(p.leader)
            if leader is None or not leader.up:
                continue
            part = leader.parts.get(index)
            if part is None:
                continue
            # An ISR member elected by the controller holds every acknowledged record, whether
            # or not it has applied the image that makes it leader yet.
            values = log_values(part.log)
            for (i, offset), value in self.acked.items():
                if i == index:
                    check(
                        values.get(offset) == value,
                        f"acked p{index}@{offset}={value!r} missing on controller leader "
                        f"b{p.leader}: {values.get(offset)!r}",
                    )
            if part.leader is None or part.leader.leader_epoch != p.leader_epoch:
                continue
            hw = part.leader.high_watermark
            for member in part.leader.isr:
                other = self.brokers[member]
                if member == leader.broker_id or not other.up or index not in other.parts:
                    continue
                theirs = log_values(other.parts[index].log, hw)
                mine = {o: v for o, v in values.items() if o < hw}
                start = other.parts[index].log.log_start_offset
                mine = {o: v for o, v in mine.items() if o >= start}
                check(
                    theirs == mine,
                    f"ISR member b{member} disagrees with leader b{p.leader} "
                    f"below HW {hw} on p{index}: {theirs} != {mine}",
                )

    def _check_leaders(self, index: int) -> None:
        for broker in self.brokers.values():
            part = broker.parts.get(index)
            if not broker.up or part is None or part.leader is None:
                continue
            epoch = part.leader.leader_epoch
            chosen = self.epoch_leaders.get((index, epoch))
            check(
                chosen == broker.broker_id,
                f"b{broker.broker_id} acts as leader of p{index} epoch {epoch}; "
                f"controller chose {chosen}",
            )
            key = (broker.broker_id, index, epoch)
            hw = part.leader.high_watermark
            check(
                hw >= self.leader_hw.get(key, 0),
                f"leader HW went back on b{broker.broker_id} p{index} e{epoch}: "
                f"{self.leader_hw.get(key)} -> {hw}",
            )
            self.leader_hw[key] = hw

    # == end of a schedule =======================================================================

    def heal_and_settle(self, rounds_max: int = 200) -> None:
        for broker in self.brokers.values():
            broker.partitioned = False
            broker.paused_until = -1
            if not broker.up:
                self.restart(broker)
        stable_rounds = 0
        for _ in range(rounds_max):
            self.now_ms += 200
            for broker in self.brokers.values():
                self.heartbeat(broker)
            self.controller_tick()
            for broker in self.brokers.values():
                self.propagate_metadata(broker)
                self.deliver_isr_changes(broker)
            self.tick_brokers()
            for broker in self.brokers.values():
                for index in list(broker.parts):
                    self.fetch(broker, index, FETCH_BYTES_MAX, True)
                self.deliver_fetches(broker, len(broker.inflight))
            self.check()
            if self.settled():
                stable_rounds += 1
                if stable_rounds >= 3:
                    break
            else:
                stable_rounds = 0
        check(self.settled(), f"replication did not settle: {self.describe()}")
        for index in range(self.partition_count):
            for broker in self.brokers.values():
                values = log_values(broker.parts[index].log)
                for (i, offset), value in self.acked.items():
                    check(
                        i != index or values.get(offset) == value,
                        f"after settling, acked p{index}@{offset}={value!r} missing on "
                        f"b{broker.broker_id}: {values.get(offset)!r}",
                    )

    def settled(self) -> bool:
        image = self.controller.image
        for index, p in enumerate(image.topics[TOPIC].partitions):
            if p.leader == NO_LEADER or set(p.isr) != set(BROKERS):
                return False
            part = self.brokers[p.leader].parts[index]
            if part.leader is None or part.leader.high_watermark != part.log.log_end_offset:
                return False
            leader_values = log_values(part.log)
            for broker in self.brokers.values():
                if broker.image is not image:
                    return False
                if log_values(broker.parts[index].log) != leader_values:
                    return False
        return True

    def describe(self) -> str:
        lines = [f"now={self.now_ms} image={self.controller.image.topics[TOPIC].partitions}"]
        for broker in self.brokers.values():
            for index, part in broker.parts.items():
                role = "L" if part.leader else ("F" if part.follower else "-")
                lines.append(
                    f"b{broker.broker_id} p{index} {role} e{part.leader_epoch} "
                    f"leo={part.log.log_end_offset} hw={part.log.high_watermark} "
                    f"epochs={[tuple(e) for e in part.log.leader_epoch_cache.entries]}"
                )
        return "\n".join(lines)

    def close(self) -> None:
        for broker in self.brokers.values():
            broker.close()
        self.controller.close()


def run_schedule(seed: int, root: Path, steps: int) -> Sim:
    """Run one schedule; raise InvariantViolation (with the trace tail) on a broken invariant."""
    sim = Sim(seed, root)
    try:
        for n in range(steps):
            what = sim.step()
            sim.trace.append(f"{n:3d} t={sim.now_ms} {what}")
            sim.check()
        sim.trace.append("heal and settle")
        sim.heal_and_settle()
    except Exception as error:
        tail = "\n".join(sim.trace[-25:])
        raise InvariantViolation(
            f"seed {seed}: {type(error).__name__}: {error}\n--- last steps ---\n{tail}\n"
            f"--- state ---\n{sim.describe()}"
        ) from error
    finally:
        sim.close()
    return sim


def fast_tmp_root() -> str | None:
    """tmpfs when available: the logs fsync on every roll and truncation."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
