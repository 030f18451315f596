"""Random histories of registrations, heartbeats, kills, restarts (of brokers and of the
controller), ISR changes, config flips and elections, checked after every step against the
controller's invariants: leader in ISR within replicas (or no leader), leaders live, epochs that
only grow, one leader per partition epoch, and image == replay(log). The controller is the one it
runs as, with a quorum of one: a QuorumController on a RaftLog, which a restart replays."""

from __future__ import annotations

import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.simulation import fast_tmp_root

from pylog_nb.broker.controller import (
    BROKER_SESSION_TIMEOUT_MS,
    NO_LEADER,
    Controller,
    MetadataRecord,
    record_from_json,
    replay,
)
from pylog_nb.broker.controller.quorum import QuorumController
from pylog_nb.broker.raft.log import RaftLog
from pylog_nb.broker.raft.node import RaftNode
from pylog_nb.broker.raft.quorum_state import QuorumStateStore

BROKERS = (1, 2, 3, 4)
TOPICS = ("a", "b", "c")
UNCLEAN = "unclean.leader.election.enable"
broker = st.sampled_from(BROKERS)

kill = st.tuples(st.just("kill"), broker)  # the broker stops heartbeating
advance = st.tuples(st.just("advance"), st.integers(1, 2 * BROKER_SESSION_TIMEOUT_MS))
steps = st.one_of(
    kill,  # kills and time passing are listed twice: failures are what this test is about
    advance,
    st.tuples(st.just("register"), broker, st.booleans()),  # bool: with a new incarnation
    st.tuples(st.just("heartbeat"), broker, st.booleans()),  # bool: caught up
    kill,
    st.tuples(st.just("revive"), broker),
    advance,
    st.tuples(
        st.just("create"), st.sampled_from(TOPICS), st.integers(1, 4), st.integers(1, 3),
        st.booleans(),
    ),
    st.tuples(st.just("alter"), st.sampled_from(TOPICS), st.integers(0, 3),
              st.sets(broker), st.sampled_from(["current", "stale", "wrong_broker"])),
    st.tuples(st.just("unclean"), st.sampled_from(TOPICS), st.booleans()),
    st.tuples(st.just("preferred")),
    st.tuples(st.just("delete"), st.sampled_from(TOPICS)),
    st.tuples(st.just("restart_controller")),
)  # fmt: skip


def open_quorum(directory: Path, now_ms: int) -> QuorumController:
    """A quorum of one on the Raft log in ``directory``: active after its first poll."""
    node = RaftNode(1, frozenset({1}), RaftLog.open(directory, fsync=False),
                    QuorumStateStore(directory, fsync=False), now_ms, rng=random.Random(0))
    quorum = QuorumController(node, now_ms)
    assert quorum.poll(now_ms) == [] and quorum.active is not None
    return quorum


@dataclass
class World:
    directory: Path
    quorum: QuorumController
    now_ms: int = 0
    alive: set[int] = field(default_factory=set)  # brokers whose process heartbeats
    incarnations: dict[int, int] = field(default_factory=dict)
    # (topic id, partition) -> (leader, leader epoch, partition epoch) last seen
    seen: dict[tuple[str, int], tuple[int, int, int]] = field(default_factory=dict)
    leader_of_epoch: dict[tuple[str, int, int], int] = field(default_factory=dict)
    records: list[MetadataRecord] = field(default_factory=list)  # the log's, decoded
    log_offset: int = 0  # where decoding goes on

    @property
    def ctl(self) -> Controller:
        return self.quorum.controller()

    def register(self, b: int, restart: bool) -> None:
        if restart or b not in self.incarnations:
            self.incarnations[b] = self.incarnations.get(b, 0) + 1
        result = self.ctl.register_broker(
            b, "127.0.0.1", 9090 + b, f"inc-{b}-{self.incarnations[b]}", self.now_ms
        )
        assert result.ok, result.message
        self.alive.add(b)

    def advance(self, ms: int) -> None:
        """Time passes in heartbeat-sized slices; live brokers heartbeat, the controller ticks."""
        end = self.now_ms + ms
        while self.now_ms < end:
            self.now_ms = min(end, self.now_ms + BROKER_SESSION_TIMEOUT_MS // 3)
            for b in sorted(self.alive & set(self.ctl.image.brokers)):
                assert self.ctl.heartbeat(b, self.now_ms).ok
            self.quorum.poll(self.now_ms)
            self.ctl.tick(self.now_ms)
            self.check()

    def alter(self, name: str, index: int, isr: set[int], how: str) -> None:
        topic = self.ctl.image.topics.get(name)
        if topic is None or index >= len(topic.partitions):
            return
        p = topic.partitions[index]
        requester = p.leader if how != "wrong_broker" else (p.leader % len(BROKERS)) + 1
        leader_epoch = p.leader_epoch - (1 if how == "stale" and p.leader_epoch else 0)
        new_isr = sorted((isr & set(p.replicas)) | {p.leader})
        result = self.ctl.alter_partition(
            requester, topic.topic_id, index, leader_epoch, new_isr, p.partition_epoch
        )
        accepted = how == "current" or (how == "stale" and leader_epoch == p.leader_epoch)
        accepted = accepted and p.leader != NO_LEADER
        accepted = accepted and all(self.ctl.image.is_live(b) for b in new_isr)
        assert result.ok == accepted, (result, how, p)
        if result.ok:
            assert self.ctl.image.topics[name].partitions[index].isr == tuple(
                r for r in p.replicas if r in new_isr
            )

    def step(self, op: tuple) -> None:
        kind, *args = op
        if kind == "register":
            self.register(*args)
        elif kind == "heartbeat" and args[0] in self.ctl.image.brokers:
            assert self.ctl.heartbeat(args[0], self.now_ms, args[1]).ok
        elif kind == "kill":
            self.alive.discard(args[0])
        elif kind == "revive" and args[0] in self.ctl.image.brokers:
            self.alive.add(args[0])
        elif kind == "advance":
            self.advance(args[0])
        elif kind == "create":
            name, partitions, rf, unclean = args
            configs = {UNCLEAN: "true"} if unclean else {}
            possible = rf <= len(self.ctl.image.live_broker_ids())
            existed = name in self.ctl.image.topics
            result = self.ctl.create_topic(name, partitions, rf, configs=configs)
            assert result.ok == (possible and not existed), result
        elif kind == "alter":
            self.alter(*args)
        elif kind == "unclean" and args[0] in self.ctl.image.topics:
            assert self.ctl.alter_configs(args[0], {UNCLEAN: str(args[1]).lower()}).ok
        elif kind == "preferred":
            self.ctl.elect_preferred_leaders(self.now_ms)
        elif kind == "delete":
            self.ctl.delete_topic(args[0])
        elif kind == "restart_controller":
            image = self.ctl.image
            self.quorum.node.log.close()
            self.quorum = open_quorum(self.directory, self.now_ms)
            assert self.quorum.image == self.ctl.image == image
        self.check()

    def check(self) -> None:
        image = self.ctl.image
        for topic, index, p in image.partitions_in_order():
            assert p.isr and set(p.isr) <= set(p.replicas)
            assert p.leader == NO_LEADER or p.leader in p.isr
            assert p.leader == NO_LEADER or image.is_live(p.leader)
            if p.leader != NO_LEADER:
                assert all(image.is_live(b) for b in p.isr), (p, image.brokers)
            key = (topic.topic_id, index)
            old = self.seen.get(key)
            if old is not None:
                old_leader, old_epoch, old_partition_epoch = old
                assert p.leader_epoch >= old_epoch and p.partition_epoch >= old_partition_epoch
                if p.leader != old_leader:
                    assert p.leader_epoch > old_epoch
            self.seen[key] = (p.leader, p.leader_epoch, p.partition_epoch)
            epoch_key = (*key, p.leader_epoch)
            assert self.leader_of_epoch.setdefault(epoch_key, p.leader) == p.leader
        assert self.quorum.take_sends() == []  # a quorum of one commits every append at once
        log = self.quorum.node.log
        while self.log_offset < log.end_offset:  # decode the log's new batches
            for batch in log.read(self.log_offset):
                if not batch.control:
                    self.records += [record_from_json(raw) for raw in batch.records]
                self.log_offset = batch.end_offset
        assert replay(self.records) == image == self.quorum.image


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    st.lists(broker, min_size=1, max_size=4, unique=True),
    st.booleans(),
    st.lists(steps, min_size=5, max_size=50),
)
def test_random_histories_keep_the_controller_invariants(initial, unclean, history):
    with tempfile.TemporaryDirectory(dir=fast_tmp_root()) as tmp:
        directory = Path(tmp)
        world = World(directory, open_quorum(directory, 0))
        for b in initial:
            world.register(b, restart=False)
            assert world.ctl.heartbeat(b, 0).ok
        world.step(("create", "a", 3, min(3, len(initial)), unclean))
        for op in history:
            world.step(op)
        world.advance(2 * BROKER_SESSION_TIMEOUT_MS)
        world.quorum.node.log.close()
        reopened = open_quorum(directory, world.now_ms)
        assert reopened.image == world.ctl.image
        reopened.node.log.close()
