"""A test shell for the group coordinator: the shipped ``GroupCoordinatorRuntime`` carries out
the core's actions; this shell only gives it its ports, each a fake a test can steer.

The runtime serves ``__consumer_offsets`` with one partition (``metadata``), so every group
routes to partition 0, whose ``GroupCoordinator`` the shell puts in ``runtime.cores`` (loaded,
or loading with ``loading=True``). Requests go through ``runtime.route`` (which applies the
group's due deadlines first, as in the broker) and ``runtime.submit``.

- ``writes``: the shell itself. An append waits (``pending_appends``) until the test
  ``confirm``s it (its batch lands in ``log`` and ``batches``) or fails it; with
  ``auto_append`` it is confirmed at once, as with an ISR of one.
- ``answer``: records each answer in ``joins``, ``syncs`` or ``commits`` under its request id
  (the runtime's, which the answer carries), and in ``actions``.
- ``events``: the events, in ``actions`` too (answers and events in the order they came).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pylog_nb.broker.group import (
    CommitAnswer,
    GroupCoordinator,
    JoinAnswer,
    SyncAnswer,
)
from pylog_nb.broker.group.storage import OffsetsBatch
from pylog_nb.broker.metadata.image import ClusterImage, PartitionImage, TopicImage
from pylog_nb.broker.metadata.topics import OFFSETS_TOPIC
from pylog_nb.broker.records.batch import iter_batches_decoded
from pylog_nb.broker.server.config import BrokerConfig
from pylog_nb.broker.server.group_runtime import Coordinator, GroupCoordinatorRuntime
from pylog_nb.broker.server.purgatory import ProduceDone
from pylog_nb.broker.server.replica_manager import AppendResult, Partition
from pylog_nb.broker.types import ACKS_ALL

RANGE = (("range", b"range-meta"),)
SESSION_MS = 10_000
REBALANCE_MS = 30_000
PARTITION = 0  # the one __consumer_offsets partition, led here
OFFSETS_IMAGE = ClusterImage(
    brokers={},
    topics={OFFSETS_TOPIC: TopicImage(
        OFFSETS_TOPIC, "00000000-0000-0000-0000-000000000001",
        (PartitionImage(replicas=(1,), isr=(1,), leader=1, leader_epoch=0, partition_epoch=0),),
        {})},
    topic_names={"00000000-0000-0000-0000-000000000001": OFFSETS_TOPIC},
)

CONFIG = BrokerConfig(broker_id=1, data_dir=Path("/nonexistent"),
                      offsets_retention_check_interval_ms=2**62)

Answer = JoinAnswer | SyncAnswer | CommitAnswer


@dataclass(slots=True)
class Append:
    """One acks=all append to ``__consumer_offsets`` the runtime waits for, decoded."""

    produce_id: int
    partition: int
    base_offset: int  # one offset per batch
    records: tuple[tuple[bytes | None, bytes | None], ...]
    producer_id: int
    producer_epoch: int
    is_transactional: bool
    then: Callable[[ProduceDone], None] | None = None  # set by await_produce


class Shell:
    """The ports of a ``GroupCoordinatorRuntime`` with one coordinator, recording every answer."""

    def __init__(self, *, auto_append: bool = True, **options: object) -> None:
        options.setdefault("session_timeout_ms_min", 1)
        options.setdefault("initial_rebalance_delay_ms", 0)
        self.auto_append = auto_append
        self.now = 0  # the clock: the latest time a request or tick brought
        self.joins: dict[int, JoinAnswer] = {}
        self.syncs: dict[int, SyncAnswer] = {}
        self.commits: dict[int, CommitAnswer] = {}
        self.actions: list[object] = []  # every answer and event, in order
        self.pending_appends: list[Append] = []
        self.log: list[tuple[bytes | None, bytes | None]] = []  # every appended record, in order
        self.batches: list[OffsetsBatch] = []  # the log's batches (one offset each)
        self.next_offset = 0
        self._produce_ids = itertools.count()
        self.runtime = GroupCoordinatorRuntime(
            CONFIG, self, metadata=lambda: OFFSETS_IMAGE, events=_Events(self.actions),
            now_ms=lambda: self.now)
        # The runtime's first tick runs the offsets retention check, then every interval: run
        # it now, before there is a coordinator, so ticks only apply timeouts (tests expire
        # offsets by calling expire_offsets).
        self.runtime.tick(self.now)
        core = GroupCoordinator(PARTITION, **options)  # type: ignore[arg-type]
        self.runtime.cores[PARTITION] = core
        self.home = Coordinator(PARTITION, core)

    @property
    def coordinator(self) -> GroupCoordinator:
        return self.runtime.cores[PARTITION]

    # -- the ports -------------------------------------------------------------------------------

    def append(self, topic: str, index: int, records, acks: int, timeout_ms: int
               ) -> tuple[AppendResult, int | None]:
        """``writes.append``: the batch waits for ``confirm`` (see ``await_produce``)."""
        assert (topic, index, acks) == (OFFSETS_TOPIC, PARTITION, ACKS_ALL), (topic, index, acks)
        ((header, decoded),) = list(iter_batches_decoded(records))
        append = Append(next(self._produce_ids), index, self.next_offset,
                        tuple((r.key, r.value) for r in decoded),
                        header.producer_id, header.producer_epoch, header.is_transactional)
        self.next_offset += 1
        self.pending_appends.append(append)
        return AppendResult(0, append.base_offset), append.produce_id

    def await_produce(self, produce_ids: list[int],
                      then: Callable[[ProduceDone], None]) -> None:
        (produce_id,) = produce_ids
        (append,) = [a for a in self.pending_appends if a.produce_id == produce_id]
        append.then = then
        if self.auto_append:
            self.confirm_all()

    def partition(self, topic: str, index: int) -> Partition | None:
        return None  # no producer state: the runtime numbers every transactional batch from 0

    def answer(self, request_id: int, answer: Answer | None) -> None:
        assert answer is not None, "the coordinator resigned with requests parked"
        self.actions.append(answer)
        if isinstance(answer, JoinAnswer):
            assert request_id not in self.joins, "join answered twice"
            self.joins[request_id] = answer
        elif isinstance(answer, SyncAnswer):
            assert request_id not in self.syncs, "sync answered twice"
            self.syncs[request_id] = answer
        else:
            assert request_id not in self.commits, "commit answered twice"
            self.commits[request_id] = answer

    # -- the test's moves ------------------------------------------------------------------------

    def confirm(self, error_code: int = 0) -> None:
        """Report the oldest pending append as done (written to the log if error_code is 0)."""
        append = self.pending_appends.pop(0)
        if error_code == 0:
            self.log.extend(append.records)
            self._land(OffsetsBatch(append.base_offset, append.records,  # type: ignore[arg-type]
                                    append.producer_id, append.is_transactional))
        assert append.then is not None
        append.then(ProduceDone(append.produce_id, {append.produce_id: error_code}))

    def confirm_all(self) -> None:
        while self.pending_appends and self.pending_appends[0].then is not None:
            self.confirm()

    def _land(self, batch: OffsetsBatch) -> None:
        bisect.insort(self.batches, batch, key=lambda b: b.base_offset)

    def _request(self, group: str, now: int,
                 call: Callable[[GroupCoordinator, int], list]) -> int:
        """Route a request and submit it: its request id (the runtime's, which the answer
        carries)."""
        self.now = now
        coordinator = self.runtime.route(group)
        assert coordinator is not None
        ids: list[int] = []

        def numbered(core: GroupCoordinator, request_id: int) -> list:
            ids.append(request_id)
            return call(core, request_id)

        answer = self.runtime.submit(coordinator, numbered)
        answer.then(lambda done: self.answer(ids[0], done.result()))
        return ids[0]

    def join(
        self,
        member_id: str = "",
        *,
        group: str = "g",
        protocols=RANGE,
        instance: str | None = None,
        now: int = 0,
        client: str = "client",
        require_known: bool = False,
        session_ms: int = SESSION_MS,
        rebalance_ms: int = REBALANCE_MS,
        protocol_type: str = "consumer",
    ) -> int:
        return self._request(group, now, lambda core, join_id: core.join(
            group,
            member_id,
            instance,
            protocol_type,
            protocols,
            session_ms,
            rebalance_ms,
            client,
            now,
            join_id,
            require_known_member_id=require_known,
        ))

    def sync(
        self,
        member_id: str,
        generation: int,
        assignments=None,
        *,
        group: str = "g",
        now: int = 0,
        instance: str | None = None,
    ) -> int:
        return self._request(group, now, lambda core, sync_id: core.sync(
            group,
            member_id,
            generation,
            assignments or {},
            now,
            sync_id,
            group_instance_id=instance,
        ))

    def commit(
        self,
        offsets,
        *,
        member_id: str = "",
        generation: int = -1,
        group: str = "g",
        now: int = 0,
        instance: str | None = None,
    ) -> int:
        return self._request(group, now, lambda core, commit_id: core.commit_offsets(
            group, member_id, generation, offsets, now, commit_id, group_instance_id=instance
        ))

    def txn_commit(
        self,
        offsets,
        *,
        producer_id: int,
        producer_epoch: int = 0,
        member_id: str = "",
        generation: int = -1,
        group: str = "g",
        now: int = 0,
        instance: str | None = None,
    ) -> int:
        return self._request(group, now, lambda core, commit_id: core.commit_txn_offsets(
            group, producer_id, producer_epoch, member_id, generation, offsets, now,
            commit_id, group_instance_id=instance,
        ))

    def marker(self, producer_id: int, committed: bool) -> None:
        """WriteTxnMarkers on this partition: the marker lands in the log, then the runtime's
        hook for it."""
        self._land(OffsetsBatch(self.next_offset, producer_id=producer_id, commit=committed))
        self.next_offset += 1
        self.runtime.complete_txn(PARTITION, producer_id, committed)

    def tick(self, now: int) -> None:
        self.now = now
        self.runtime.tick(now)

    def leave(self, *members: tuple[str, str | None], group: str = "g", now: int = 0):
        self.now = now
        coordinator = self.runtime.route(group)
        assert coordinator is not None
        result = coordinator.core.leave(group, members, now)
        self.runtime.run(coordinator, result.actions)
        return result

    def form_group(self, count: int, *, now: int = 0, protocols=RANGE) -> list[JoinAnswer]:
        """``count`` dynamic members join and sync (the leader assigns b"a-<member>")."""
        member_ids: list[str] = []
        answers: list[JoinAnswer] = []
        for index in range(count):
            # Each newcomer starts a rebalance that waits for the members already in.
            join_ids = [self.join(now=now, client=f"c{index}", protocols=protocols)]
            join_ids += [self.join(m, now=now, protocols=protocols) for m in member_ids]
            answers = [self.joins[j] for j in join_ids]
            member_ids = [a.member_id for a in answers]
        answers.sort(key=lambda a: int(a.member_id[1 : a.member_id.index("-")]))
        leader = next(a for a in answers if a.members)
        generation = leader.generation_id
        for answer in answers:
            if answer is not leader:
                self.sync(answer.member_id, generation, now=now)
        self.sync(
            leader.member_id,
            generation,
            {m.member_id: b"a-" + m.member_id.encode() for m in leader.members},
            now=now,
        )
        return answers


class _Events:
    """The runtime's events port: each event goes to ``actions`` beside the answers."""

    def __init__(self, actions: list[object]) -> None:
        self.append = actions.append
