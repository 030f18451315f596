"""KIP-848's online upgrade and downgrade in the sans-IO group coordinator: a classic group
becomes a consumer group when a consumer-protocol member joins, classic members are served
inside it (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), it becomes classic again when the last
consumer-protocol member leaves, and the state survives a reload from ``__consumer_offsets``."""

from __future__ import annotations

import itertools
import struct

from pylog_nb.broker.errors import Errors
from pylog_nb.broker.group import AppendRecords, GroupCoordinator, HeartbeatAnswer, JoinAnswer
from pylog_nb.broker.group.actions import Action, SyncAnswer
from pylog_nb.broker.group.assignors import TopicMetadata
from pylog_nb.broker.group.consumer_group import ConsumerGroup
from pylog_nb.broker.group.consumer_groups import HeartbeatRequest
from pylog_nb.broker.group.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from pylog_nb.broker.group.group import GroupState
from pylog_nb.broker.group.group_migration import ConsumerGroupMigrationPolicy
from pylog_nb.broker.group.storage import OffsetsBatch

TOPIC_ID = "7e3c4a1a-0000-4000-8000-000000000002"
TOPICS = {"orders": TopicMetadata(topic_id=TOPIC_ID, name="orders", partitions=4)}
SESSION_MS = 10_000
REBALANCE_MS = 20_000
ALL = frozenset(range(4))


def subscription(topics: tuple[str, ...] = ("orders",), owned: dict | None = None,
                 version: int = 1) -> bytes:
    """ConsumerProtocolSubscription written by hand (int16 lengths, int32 counts)."""
    out = struct.pack(">hi", version, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    out += struct.pack(">i", -1)  # UserData: null
    if version >= 1:
        owned = owned or {}
        out += struct.pack(">i", len(owned))
        for topic, partitions in owned.items():
            out += struct.pack(">h", len(topic)) + topic.encode()
            out += struct.pack(f">i{len(partitions)}i", len(partitions), *sorted(partitions))
    return out


class Driver:
    """Feeds one coordinator and confirms each append at once (an ISR of one)."""

    def __init__(self, **options: object) -> None:
        self.options = options
        self.core = GroupCoordinator(0, session_timeout_ms_min=1, initial_rebalance_delay_ms=0,
                                     **options)  # type: ignore[arg-type]
        self.log: list[OffsetsBatch] = []
        self.ids = itertools.count()
        self.now_ms = 1_000

    def run(self, actions: list[Action]) -> list[Action]:
        done: list[Action] = []
        while actions:
            action = actions.pop(0)
            if isinstance(action, AppendRecords):
                offset = len(self.log)
                self.log.append(OffsetsBatch(offset, action.records))
                actions += self.core.on_appended(action.append_id, Errors.NONE, self.now_ms,
                                                 offset)
            else:
                done.append(action)
        return done

    def beat(self, member_id: str, epoch: int, owned: dict | None = None) -> HeartbeatAnswer:
        request = HeartbeatRequest(
            group_id="g", member_id=member_id, member_epoch=epoch,
            rebalance_timeout_ms=REBALANCE_MS if epoch == 0 else -1,
            subscribed_topic_names=("orders",) if epoch == 0 else None, owned=owned)
        request_id = next(self.ids)
        [answer] = [a for a in self.run(self.core.consumer_group_heartbeat(
            request, TOPICS, self.now_ms, request_id)) if isinstance(a, HeartbeatAnswer)]
        return answer

    def join(self, member_id: str = "", *, protocol_type: str = "consumer",
             owned: dict | None = None) -> JoinAnswer:
        join_id = next(self.ids)
        answers = self.run(self.core.join(
            "g", member_id, None, protocol_type, [("range", subscription(owned=owned))],
            SESSION_MS, REBALANCE_MS, "classic", self.now_ms, join_id, topics=TOPICS))
        [answer] = [a for a in answers if isinstance(a, JoinAnswer) and a.join_id == join_id]
        return answer

    def sync(self, member_id: str, generation: int,
             assignments: dict[str, bytes] | None = None) -> SyncAnswer:
        sync_id = next(self.ids)
        answers = self.run(self.core.sync("g", member_id, generation, assignments or {},
                                          self.now_ms, sync_id))
        [answer] = [a for a in answers if isinstance(a, SyncAnswer) and a.sync_id == sync_id]
        return answer

    def reload(self) -> None:
        successor = GroupCoordinator(0, session_timeout_ms_min=1, loading=True,
                                     **self.options)  # type: ignore[arg-type]
        successor.load(self.log, self.now_ms)
        self.core = successor


def classic_group(driver: Driver) -> tuple[str, str]:
    """Two classic members, Stable, each with two partitions (the leader assigned them)."""
    first = driver.join()
    a_id = first.member_id
    assert driver.sync(a_id, first.generation_id, {a_id: b""}).error_code == Errors.NONE
    b_join, a_join = next(driver.ids), next(driver.ids)
    answers = driver.run(driver.core.join(
        "g", "", None, "consumer", [("range", subscription())], SESSION_MS, REBALANCE_MS,
        "classic", driver.now_ms, b_join))
    answers += driver.run(driver.core.join(
        "g", a_id, None, "consumer", [("range", subscription())], SESSION_MS, REBALANCE_MS,
        "classic", driver.now_ms, a_join))
    joins = {a.join_id: a for a in answers if isinstance(a, JoinAnswer)}
    b_id, generation = joins[b_join].member_id, joins[b_join].generation_id
    assignments = {a_id: encode_assignment({"orders": {0, 1}}, 1),
                   b_id: encode_assignment({"orders": {2, 3}}, 1)}
    leader = joins[a_join].leader_id
    assert driver.sync(leader, generation, assignments).error_code == Errors.NONE
    follower = b_id if leader == a_id else a_id
    assert driver.sync(follower, generation).error_code == Errors.NONE
    assert driver.core.groups["g"].is_(GroupState.STABLE)
    return a_id, b_id


def test_the_consumer_protocol_codec_round_trips() -> None:
    parsed = decode_subscription(subscription(owned={"orders": {1, 3}}))
    assert parsed.topics == ("orders",) and parsed.owned_partitions == {"orders": {1, 3}}
    assert decode_subscription(subscription(version=0)).owned_partitions == {}
    assert decode_assignment(encode_assignment({"orders": [3, 1], "x": []}, 3)) == {
        "orders": {1, 3}}


def test_a_consumer_member_upgrades_a_classic_group_with_members() -> None:
    driver = Driver()
    a_id, b_id = classic_group(driver)
    generation = driver.core.groups["g"].generation
    joined = driver.beat("c1", 0)
    assert joined.error_code == Errors.NONE and joined.assignment == {}  # nothing is free yet
    group = driver.core.consumer_groups["g"]
    assert "g" not in driver.core.groups
    assert group.members[a_id].assigned == {TOPIC_ID: {0, 1}}
    assert group.members[a_id].member_epoch == generation
    assert group.members[a_id].classic is not None
    assert group.group_epoch == generation + 1
    # The classic members are told to rejoin; an eager client rejoins owning nothing.
    for member_id in (a_id, b_id):
        assert driver.core.heartbeat("g", member_id, generation, driver.now_ms) == (
            Errors.REBALANCE_IN_PROGRESS)
    owned = _rejoin_and_sync(driver, a_id) | _rejoin_and_sync(driver, b_id)
    mine = driver.beat("c1", joined.member_epoch, owned={})
    assert mine.assignment is not None
    owned |= mine.assignment.get(TOPIC_ID, frozenset())
    held = [m.assigned.get(TOPIC_ID, frozenset()) for m in group.members.values()]
    assert sum(len(h) for h in held) == 4 and frozenset().union(*held) == ALL
    assert all(held), held  # every member of three has partitions


def _rejoin_and_sync(driver: Driver, member_id: str) -> frozenset[int]:
    joined = driver.join(member_id)
    assert joined.error_code == Errors.NONE and joined.leader_id == ""
    synced = driver.sync(member_id, joined.generation_id)
    assert synced.error_code == Errors.NONE
    return decode_assignment(synced.assignment).get("orders", frozenset())


def test_a_classic_member_joins_a_consumer_group() -> None:
    driver = Driver()
    first = driver.beat("c1", 0)
    assert first.assignment == {TOPIC_ID: ALL}
    joined = driver.join()
    assert joined.error_code == Errors.NONE and joined.protocol_name == "range"
    member_id = joined.member_id
    assert driver.sync(member_id, joined.generation_id).assignment == encode_assignment({}, 1)
    revoking = driver.beat("c1", first.member_epoch)  # c1 gives up two partitions
    kept = revoking.assignment[TOPIC_ID] if revoking.assignment else ALL
    driver.beat("c1", first.member_epoch, owned={TOPIC_ID: kept})
    heartbeat = driver.core.heartbeat("g", member_id, joined.generation_id, driver.now_ms)
    assert heartbeat == Errors.REBALANCE_IN_PROGRESS  # its partitions are free: rejoin
    got = _rejoin_and_sync(driver, member_id)
    assert len(got) == 2 and got.isdisjoint(kept)
    epoch = driver.core.consumer_groups["g"].members[member_id].member_epoch
    assert driver.core.heartbeat("g", member_id, epoch, driver.now_ms) == Errors.NONE
    assert driver.core.heartbeat("g", member_id, epoch + 1, driver.now_ms) == (
        Errors.ILLEGAL_GENERATION)
    assert driver.join(protocol_type="connect").error_code == Errors.INCONSISTENT_GROUP_PROTOCOL


def test_the_state_survives_a_reload_from_the_log() -> None:
    driver = Driver()
    a_id, _ = classic_group(driver)
    driver.beat("c1", 0)
    before = driver.core.consumer_groups["g"].members[a_id]
    driver.reload()
    after = driver.core.consumer_groups["g"].members[a_id]
    assert after.classic == before.classic and after.assigned == before.assigned
    assert after.session_deadline_ms == driver.now_ms + SESSION_MS
    assert _rejoin_and_sync(driver, a_id) <= ALL


def test_the_last_consumer_member_leaving_downgrades_the_group() -> None:
    driver = Driver()
    a_id, b_id = classic_group(driver)
    joined = driver.beat("c1", 0)
    _rejoin_and_sync(driver, a_id)
    _rejoin_and_sync(driver, b_id)
    left = driver.beat("c1", -1)
    assert left.error_code == Errors.NONE
    assert "g" not in driver.core.consumer_groups
    classic = driver.core.groups["g"]
    assert classic.is_(GroupState.PREPARING_REBALANCE) and set(classic.members) == {a_id, b_id}
    assert classic.generation == joined.member_epoch  # the consumer group's epoch
    # The classic members rejoin and rebalance as a classic group, the leader assigning.
    ids = [next(driver.ids), next(driver.ids)]
    answers = []
    for member_id, join_id in zip((a_id, b_id), ids, strict=True):
        answers += driver.run(driver.core.join(
            "g", member_id, None, "consumer", [("range", subscription())], SESSION_MS,
            REBALANCE_MS, "classic", driver.now_ms, join_id))
    joins = [a for a in answers if isinstance(a, JoinAnswer)]
    assert {j.error_code for j in joins} == {Errors.NONE} and len(joins) == 2
    assert driver.core.groups["g"].is_(GroupState.COMPLETING_REBALANCE)
    driver.reload()  # the classic group's record replaced the consumer group's
    assert isinstance(driver.core.group("g"), type(classic))


def test_policy_disabled_keeps_the_groups_apart() -> None:
    driver = Driver(consumer_migration_policy=ConsumerGroupMigrationPolicy.DISABLED)
    classic_group(driver)
    assert driver.beat("c1", 0).error_code == Errors.GROUP_ID_NOT_FOUND
    assert "g" in driver.core.groups
    other = Driver(consumer_migration_policy=ConsumerGroupMigrationPolicy.DISABLED)
    joined = other.beat("c1", 0)
    classic = other.join()  # Kafka serves a classic member of a consumer group whatever the policy
    assert classic.error_code == Errors.NONE
    other.beat("c1", -1)
    assert isinstance(other.core.group("g"), ConsumerGroup)  # no downgrade
    assert joined.member_epoch >= 1


def test_a_consumer_member_whose_session_ends_downgrades_the_group() -> None:
    driver = Driver(consumer_session_timeout_ms=30_000)
    a_id, b_id = classic_group(driver)
    driver.beat("c1", 0)
    for member_id in (a_id, b_id):  # the classic members rejoin and keep heartbeating
        _rejoin_and_sync(driver, member_id)
    epochs = {m: driver.core.consumer_groups["g"].members[m].member_epoch for m in (a_id, b_id)}
    silent_until = driver.now_ms + 30_000 + 1  # c1 is silent past the consumer session (30 s)
    while driver.now_ms < silent_until:
        driver.now_ms = min(driver.now_ms + SESSION_MS // 2, silent_until)
        for member_id, epoch in epochs.items():
            assert driver.core.heartbeat("g", member_id, epoch, driver.now_ms) == Errors.NONE
    driver.run(driver.core.tick(driver.now_ms))
    assert set(driver.core.groups["g"].members) == {a_id, b_id}
    driver.reload()
    assert driver.core.groups["g"].protocol_type == "consumer"


def test_a_classic_member_that_does_not_rejoin_in_time_is_fenced() -> None:
    driver = Driver()
    a_id, b_id = classic_group(driver)
    generation = driver.core.groups["g"].generation
    driver.beat("c1", 0)
    assert driver.core.heartbeat("g", a_id, generation, driver.now_ms) == (
        Errors.REBALANCE_IN_PROGRESS)
    _rejoin_and_sync(driver, b_id)
    b_epoch = driver.core.consumer_groups["g"].members[b_id].member_epoch
    answers = []
    for _ in range(4):  # a heartbeats but never rejoins: its rebalance timeout passes
        driver.now_ms += REBALANCE_MS // 4
        answers.append(driver.core.heartbeat("g", a_id, generation, driver.now_ms))
        driver.core.heartbeat("g", b_id, b_epoch, driver.now_ms)
        driver.run(driver.core.tick(driver.now_ms))
    assert answers == [Errors.REBALANCE_IN_PROGRESS] * 4  # its session never ended
    assert a_id not in driver.core.consumer_groups["g"].members
    assert b_id in driver.core.consumer_groups["g"].members


def test_leave_group_and_commits_of_classic_members() -> None:
    driver = Driver()
    a_id, b_id = classic_group(driver)
    driver.beat("c1", 0)
    _rejoin_and_sync(driver, a_id)
    epoch = driver.core.consumer_groups["g"].members[a_id].member_epoch

    def commit(member_id: str, generation: int) -> int:
        commit_id = next(driver.ids)
        [answer] = [a for a in driver.run(driver.core.commit_offsets(
            "g", member_id, generation, {("orders", 0): (5, -1, "")}, driver.now_ms,
            commit_id)) if getattr(a, "commit_id", None) == commit_id]
        return answer.errors[("orders", 0)]

    assert commit(a_id, epoch) == Errors.NONE
    assert commit(a_id, epoch - 1) == Errors.ILLEGAL_GENERATION  # not STALE_MEMBER_EPOCH
    result = driver.core.leave("g", [(b_id, None), ("c1", None), ("nobody", None)],
                               driver.now_ms)
    driver.run(result.actions)
    # c1 uses the consumer protocol: LeaveGroup does not know it (Kafka: UNKNOWN_MEMBER_ID).
    assert result.member_errors == (Errors.NONE, Errors.UNKNOWN_MEMBER_ID,
                                    Errors.UNKNOWN_MEMBER_ID)
    assert set(driver.core.consumer_groups["g"].members) == {a_id, "c1"}


def test_a_classic_join_to_an_empty_consumer_group_makes_it_classic() -> None:
    driver = Driver()
    joined = driver.beat("c1", 0)
    commit_id = next(driver.ids)
    driver.run(driver.core.commit_offsets("g", "c1", joined.member_epoch,
                                          {("orders", 2): (9, -1, "")}, driver.now_ms,
                                          commit_id))
    driver.beat("c1", -1)
    assert not driver.core.consumer_groups["g"].members
    assert driver.join().error_code == Errors.NONE
    assert "g" not in driver.core.consumer_groups
    assert driver.core.fetch_offsets("g", [("orders", 2)])[1] == {("orders", 2): (9, -1, "")}
    driver.reload()
    assert "g" not in driver.core.consumer_groups and "g" in driver.core.groups


def test_a_restarted_static_classic_member_takes_its_predecessors_place() -> None:
    driver = Driver()
    driver.beat("c1", 0)

    def join(member_id: str) -> JoinAnswer:
        join_id = next(driver.ids)
        [answer] = [a for a in driver.run(driver.core.join(
            "g", member_id, "static-1", "consumer", [("range", subscription())], SESSION_MS,
            REBALANCE_MS, "classic", driver.now_ms, join_id, topics=TOPICS))
            if isinstance(a, JoinAnswer)]
        return answer

    first = join("")
    assert first.error_code == Errors.NONE
    group = driver.core.consumer_groups["g"]
    before = group.members[first.member_id]
    epoch = group.group_epoch
    second = join("")  # the same instance id, restarted: no member id
    assert second.error_code == Errors.NONE and second.member_id != first.member_id
    assert set(group.members) == {"c1", second.member_id}
    assert group.group_epoch == epoch  # a static member back is no rebalance
    assert group.members[second.member_id].assigned == before.assigned
    assert driver.core.heartbeat("g", first.member_id, first.generation_id, driver.now_ms,
                                 group_instance_id="static-1") == Errors.FENCED_INSTANCE_ID


def test_a_classic_member_that_joins_but_never_syncs_is_fenced() -> None:
    driver = Driver()
    driver.beat("c1", 0)
    joined = driver.join()
    member_id = joined.member_id
    for _ in range(4):  # it heartbeats (its session lives) but never sends SyncGroup
        driver.now_ms += REBALANCE_MS // 4
        driver.core.heartbeat("g", member_id, joined.generation_id, driver.now_ms)
        _revoke(driver, "c1")
        driver.run(driver.core.tick(driver.now_ms))
    assert member_id not in driver.core.consumer_groups["g"].members
    synced = driver.join()  # a member that syncs in time stays
    driver.now_ms += REBALANCE_MS // 2
    assert driver.sync(synced.member_id, synced.generation_id).error_code == Errors.NONE
    _revoke(driver, "c1")
    driver.now_ms += REBALANCE_MS // 2 + 1
    driver.core.heartbeat("g", synced.member_id, synced.generation_id, driver.now_ms)
    _revoke(driver, "c1")
    driver.run(driver.core.tick(driver.now_ms))
    assert synced.member_id in driver.core.consumer_groups["g"].members


def _revoke(driver: Driver, member_id: str) -> None:
    """A consumer-protocol member heartbeats owning only what it is assigned (it revoked)."""
    member = driver.core.consumer_groups["g"].members[member_id]
    driver.beat(member_id, member.member_epoch, owned=dict(member.assigned))


def test_an_upgrade_in_the_middle_of_a_classic_rebalance_sends_its_joins_back() -> None:
    driver = Driver()
    a_id, b_id = classic_group(driver)
    parked = next(driver.ids)  # a rejoins: the group waits for b in PreparingRebalance
    rejoined = driver.run(driver.core.join(
        "g", a_id, None, "consumer", [("range", subscription())], SESSION_MS, REBALANCE_MS,
        "classic", driver.now_ms, parked))
    assert not [a for a in rejoined if isinstance(a, JoinAnswer)]
    assert driver.core.groups["g"].is_(GroupState.PREPARING_REBALANCE)
    request = HeartbeatRequest(group_id="g", member_id="c1", member_epoch=0,
                               rebalance_timeout_ms=REBALANCE_MS,
                               subscribed_topic_names=("orders",))
    answers = driver.run(driver.core.consumer_group_heartbeat(request, TOPICS, driver.now_ms,
                                                              next(driver.ids)))
    [join] = [a for a in answers if isinstance(a, JoinAnswer)]
    assert (join.join_id, join.error_code) == (parked, Errors.REBALANCE_IN_PROGRESS)
    assert set(driver.core.consumer_groups["g"].members) == {a_id, b_id, "c1"}
