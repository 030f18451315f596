"""Random histories of registrations, heartbeats, kills, restarts (of brokers and of the
controller), ISR changes, config flips and elections, checked after every step against the
controller's invariants: leader in ISR within replicas (or no leader), leaders live, epochs that
only grow, one leader per partition epoch, and image == replay(log)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pylog_nb.broker.controller import (
    BROKER_SESSION_TIMEOUT_MS,
    NO_LEADER,
    Controller,
    replay,
)

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


@dataclass
class World:
    directory: Path
    ctl: Controller
    now_ms: int = 0
    alive: set[int] = field(default_factory=set)  # brokers whose process heartbeats
    incarnations: dict[int, int] = field(default_factory=dict)
    # (topic id, partition) -> (leader, leader epoch, partition epoch) last seen
    seen: dict[tuple[str, int], tuple[int, int, int]] = field(default_factory=dict)
    leader_of_epoch: dict[tuple[str, int, int], int] = field(default_factory=dict)

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
            self.ctl.close()
            self.ctl = Controller.open(self.directory, now_ms=self.now_ms, fsync=False)
            assert self.ctl.image == image
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
        assert replay(self.ctl.log.read(0, 10_000)) == image


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
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        world = World(directory, Controller.open(directory, now_ms=0, fsync=False))
        for b in initial:
            world.register(b, restart=False)
            assert world.ctl.heartbeat(b, 0).ok
        world.step(("create", "a", 3, min(3, len(initial)), unclean))
        for op in history:
            world.step(op)
        world.advance(2 * BROKER_SESSION_TIMEOUT_MS)
        world.ctl.close()
        reopened = Controller.open(directory, now_ms=world.now_ms)
        assert reopened.image == world.ctl.image
        reopened.close()
