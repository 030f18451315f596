"""KIP-848 consumer groups in the sans-IO group coordinator: joining, incremental revocation,
fencing, static membership, offsets and reloading from ``__consumer_offsets``."""

from __future__ import annotations

import itertools

import pytest

from pylog_nb.broker.errors import Errors
from pylog_nb.broker.group import AppendRecords, GroupCoordinator, HeartbeatAnswer, JoinAnswer
from pylog_nb.broker.group.actions import Action, CommitAnswer, RevertToLog
from pylog_nb.broker.group.assignors import TopicMetadata
from pylog_nb.broker.group.consumer_group import ConsumerGroupState, MemberState
from pylog_nb.broker.group.consumer_groups import HeartbeatRequest
from pylog_nb.broker.group.storage import OffsetsBatch

TOPIC_ID = "7e3c4a1a-0000-4000-8000-000000000001"
TOPICS = {"orders": TopicMetadata(topic_id=TOPIC_ID, name="orders", partitions=4)}
SESSION_MS = 45_000
REBALANCE_MS = 60_000


class Driver:
    """Feeds one coordinator and confirms each append at once (an ISR of one)."""

    def __init__(self, **options: object) -> None:
        self.core = GroupCoordinator(0, consumer_session_timeout_ms=SESSION_MS, **options)
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

    def beat(self, member_id: str, epoch: int, *, owned: dict | None = None,
             topics: tuple[str, ...] | None = None, instance_id: str | None = None,
             group_id: str = "g", assignor: str | None = None) -> HeartbeatAnswer:
        request = HeartbeatRequest(
            group_id=group_id, member_id=member_id, member_epoch=epoch, instance_id=instance_id,
            rebalance_timeout_ms=REBALANCE_MS if epoch == 0 else -1,
            subscribed_topic_names=topics if topics is not None else (
                ("orders",) if epoch == 0 else None),
            server_assignor=assignor, owned=owned)
        request_id = next(self.ids)
        answers = [a for a in self.run(self.core.consumer_group_heartbeat(
            request, TOPICS, self.now_ms, request_id)) if isinstance(a, HeartbeatAnswer)]
        assert [a.request_id for a in answers] == [request_id]
        return answers[0]

    def owners(self) -> dict[int, str]:
        """partition -> the one member that may consume it (assigned or still revoking)."""
        owners: dict[int, str] = {}
        for member in self.core.consumer_groups["g"].members.values():
            for _, partition in member.owned():
                assert partition not in owners, f"partition {partition} owned twice"
                owners[partition] = member.member_id
        return owners


def parts(answer: HeartbeatAnswer) -> frozenset[int]:
    assert answer.assignment is not None
    return answer.assignment.get(TOPIC_ID, frozenset())


def test_first_member_gets_every_partition_at_group_epoch_one() -> None:
    driver = Driver()
    answer = driver.beat("m1", 0)
    assert (answer.error_code, answer.member_id, answer.member_epoch) == (0, "m1", 1)
    assert parts(answer) == {0, 1, 2, 3}
    assert answer.heartbeat_interval_ms == 5_000
    group = driver.core.consumer_groups["g"]
    assert (group.group_epoch, group.assignment_epoch) == (1, 1)
    assert group.is_(ConsumerGroupState.STABLE)


def test_a_partition_moves_only_after_its_owner_revoked_it() -> None:
    driver = Driver()
    driver.beat("m1", 0)
    joined = driver.beat("m2", 0)
    # m2 is at the new epoch but gets nothing m1 still owns.
    assert (joined.member_epoch, parts(joined)) == (2, frozenset())
    assert driver.core.consumer_groups["g"].members["m2"].state is (
        MemberState.UNRELEASED_PARTITIONS)
    told = driver.beat("m1", 1)
    kept = parts(told)
    assert len(kept) == 2 and told.member_epoch == 1  # revoking two, still at epoch 1
    assert driver.owners() == dict.fromkeys(range(4), "m1")
    assert driver.core.consumer_groups["g"].is_(ConsumerGroupState.RECONCILING)
    still = driver.beat("m2", 2)
    assert still.assignment is None or parts(still) == frozenset()
    revoked = driver.beat("m1", 1, owned={TOPIC_ID: kept})
    assert (revoked.member_epoch, parts(revoked)) == (2, kept)
    got = driver.beat("m2", 2)
    assert parts(got) == frozenset(range(4)) - kept
    assert driver.core.consumer_groups["g"].is_(ConsumerGroupState.STABLE)
    assert set(driver.owners().values()) == {"m1", "m2"}


def test_a_member_whose_session_ends_is_fenced_and_its_partitions_reassigned() -> None:
    driver = Driver()
    driver.beat("m1", 0)
    driver.beat("m2", 0)
    kept = parts(driver.beat("m1", 1))
    driver.beat("m1", 1, owned={TOPIC_ID: kept})
    driver.beat("m2", 2)
    driver.now_ms += SESSION_MS - 1
    driver.beat("m1", 2)
    driver.now_ms += 2
    driver.run(driver.core.tick(driver.now_ms))
    group = driver.core.consumer_groups["g"]
    assert set(group.members) == {"m1"} and group.group_epoch == 3
    answer = driver.beat("m1", 2)
    assert (answer.member_epoch, parts(answer)) == (3, frozenset(range(4)))
    assert driver.beat("m2", 2).error_code == Errors.UNKNOWN_MEMBER_ID


def test_epochs_out_of_order_are_fenced() -> None:
    driver = Driver()
    driver.beat("m1", 0)
    assert driver.beat("m1", 7).error_code == Errors.FENCED_MEMBER_EPOCH
    assert driver.beat("ghost", 1).error_code == Errors.UNKNOWN_MEMBER_ID
    assert driver.beat("m1", 0, assignor="sticky-ish").error_code == Errors.UNSUPPORTED_ASSIGNOR
    bad = driver.beat("m3", 0, topics=None, group_id="")
    assert bad.error_code == Errors.INVALID_REQUEST


def test_a_member_leaving_hands_its_partitions_to_the_rest() -> None:
    driver = Driver()
    driver.beat("m1", 0)
    driver.beat("m2", 0)
    kept = parts(driver.beat("m1", 1))
    driver.beat("m1", 1, owned={TOPIC_ID: kept})
    assert driver.beat("m1", -1).member_epoch == -1
    answer = driver.beat("m2", 2)
    assert (answer.member_epoch, parts(answer)) == (3, frozenset(range(4)))


def test_a_static_member_that_comes_back_keeps_its_partitions() -> None:
    driver = Driver()
    first = driver.beat("a1", 0, instance_id="box-1")
    driver.beat("a1", first.member_epoch, owned={TOPIC_ID: parts(first)})
    assert driver.beat("a1", -2, instance_id="box-1").member_epoch == -2
    busy = driver.beat("b1", 0, instance_id="box-1")
    assert busy.error_code == Errors.NONE
    assert (busy.member_epoch, parts(busy)) == (1, frozenset(range(4)))
    assert set(driver.core.consumer_groups["g"].members) == {"b1"}
    again = driver.beat("c1", 0, instance_id="box-1")
    assert again.error_code == Errors.UNRELEASED_INSTANCE_ID


def test_offset_commits_carry_the_member_epoch() -> None:
    driver = Driver()
    driver.beat("m1", 0)
    offsets = {("orders", 0): (42, -1, "")}

    def commit(member_id: str, epoch: int) -> dict:
        [answer] = [a for a in driver.run(driver.core.commit_offsets(
            "g", member_id, epoch, offsets, driver.now_ms, next(driver.ids)))
            if isinstance(a, CommitAnswer)]
        return answer.errors

    assert commit("m1", 0) == {("orders", 0): Errors.STALE_MEMBER_EPOCH}
    assert commit("m9", 1) == {("orders", 0): Errors.UNKNOWN_MEMBER_ID}
    assert commit("", -1) == {("orders", 0): Errors.UNKNOWN_MEMBER_ID}  # members present
    assert commit("m1", 1) == {("orders", 0): Errors.NONE}
    assert driver.core.fetch_offsets("g", [("orders", 0)], member_id="m1", member_epoch=0)[0] \
        == Errors.STALE_MEMBER_EPOCH
    assert driver.core.fetch_offsets("g", [("orders", 0)], member_id="m1", member_epoch=1) == (
        Errors.NONE, {("orders", 0): (42, -1, "")})


def test_the_protocols_do_not_mix_where_kafka_refuses() -> None:
    """A classic member of another protocol type than "consumer" cannot join a consumer group,
    and a classic group of another type cannot be upgraded (tests/broker/group/
    test_group_migration.py has the upgrade and downgrade Kafka allows)."""
    driver = Driver()
    driver.beat("m1", 0)
    [join] = driver.run(driver.core.join("g", "", None, "connect", [("range", b"")], 10_000,
                                         10_000, "c", driver.now_ms, 99))
    assert isinstance(join, JoinAnswer) and join.error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
    driver.run(driver.core.join("classic", "", None, "connect", [("range", b"")], 10_000,
                                10_000, "c", driver.now_ms, 100))
    refused = driver.beat("m1", 0, group_id="classic")
    assert refused.error_code == Errors.GROUP_ID_NOT_FOUND


def test_an_empty_classic_group_is_upgraded_keeping_its_offsets() -> None:
    driver = Driver()
    driver.run(driver.core.commit_offsets("g", "", -1, {("orders", 1): (7, -1, "")},
                                          driver.now_ms, 1))
    assert "g" in driver.core.groups
    assert driver.beat("m1", 0).member_epoch == 1
    assert "g" not in driver.core.groups
    assert driver.core.fetch_offsets("g", [("orders", 1)])[1] == {("orders", 1): (7, -1, "")}


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_a_new_coordinator_rebuilds_the_group_from_its_records(assignor: str) -> None:
    driver = Driver()
    driver.beat("m1", 0, assignor=assignor)
    driver.beat("m2", 0, assignor=assignor)
    kept = parts(driver.beat("m1", 1))  # m1 now revoking
    driver.run(driver.core.commit_offsets("g", "m1", 1, {("orders", 0): (5, -1, "")},
                                          driver.now_ms, 77))
    before = driver.core.consumer_groups["g"]
    successor = GroupCoordinator(0, consumer_session_timeout_ms=SESSION_MS, loading=True)
    successor.load(driver.log, driver.now_ms)
    after = successor.consumer_groups["g"]
    assert (after.group_epoch, after.assignment_epoch, after.state) == (
        before.group_epoch, before.assignment_epoch, before.state)
    assert after.target == before.target and after.assignor_name == assignor
    for member_id, member in before.members.items():
        again = after.members[member_id]
        assert (again.member_epoch, again.state, again.assigned, again.pending_revocation) == (
            member.member_epoch, member.state, member.assigned, member.pending_revocation)
    assert after.offsets.keys() == {("orders", 0)}
    driver.core = successor
    revoked = driver.beat("m1", 1, owned={TOPIC_ID: kept})
    assert (revoked.error_code, revoked.member_epoch) == (Errors.NONE, 2)


def test_a_static_member_back_while_waiting_for_partitions_keeps_its_target() -> None:
    driver = Driver()
    first = driver.beat("b1", 0)
    driver.beat("b1", 1, owned={TOPIC_ID: parts(first)})
    waiting = driver.beat("a1", 0, instance_id="box-1")  # its partitions are still b1's
    assert (waiting.member_epoch, parts(waiting)) == (2, frozenset())
    assert driver.beat("a1", -2, instance_id="box-1").member_epoch == -2
    back = driver.beat("a2", 0, instance_id="box-1")
    assert back.error_code == Errors.NONE
    group = driver.core.consumer_groups["g"]
    wanted = group.target["a2"][TOPIC_ID]  # the predecessor's target, not lost
    assert len(wanted) == 2
    kept = parts(driver.beat("b1", 1))
    driver.beat("b1", 1, owned={TOPIC_ID: kept})  # b1 revokes what a2 should get
    successor = GroupCoordinator(0, consumer_session_timeout_ms=SESSION_MS, loading=True)
    successor.load(driver.log, driver.now_ms)  # the takeover was written down
    assert successor.consumer_groups["g"].members["a2"].member_epoch == (
        group.members["a2"].member_epoch)
    driver.core = successor
    got = driver.beat("a2", back.member_epoch, owned={})
    assert parts(got) == wanted and kept | wanted == frozenset(range(4))


def _request(member_id: str, epoch: int) -> HeartbeatRequest:
    return HeartbeatRequest(
        group_id="g", member_id=member_id, member_epoch=epoch, instance_id=None,
        rebalance_timeout_ms=REBALANCE_MS if epoch == 0 else -1,
        subscribed_topic_names=("orders",) if epoch == 0 else None, server_assignor=None,
        owned=None)


def test_an_answer_without_records_waits_for_the_appends_made_before_it() -> None:
    """Kafka's runtime holds a response until what was written before it is committed: a
    member is never told state a successor loading the log would not have."""
    driver = Driver()
    driver.beat("m1", 0)
    commit = driver.core.commit_offsets("g", "m1", 1, {("orders", 0): (42, -1, "")},
                                        driver.now_ms, 100)
    (append,) = [a for a in commit if isinstance(a, AppendRecords)]
    held = driver.core.consumer_group_heartbeat(_request("m1", 1), TOPICS, driver.now_ms, 101)
    assert held == []  # nothing changed, but the commit before it is not in the log yet
    answers = driver.core.on_appended(append.append_id, Errors.NONE, driver.now_ms, 1)
    commit_answer, heartbeat_answer = answers
    assert isinstance(commit_answer, CommitAnswer) and commit_answer.commit_id == 100
    assert isinstance(heartbeat_answer, HeartbeatAnswer) and heartbeat_answer.request_id == 101


def test_a_failed_append_of_group_state_asks_for_a_reload_from_the_log() -> None:
    """The heartbeat changed the group before its records were written: once they fail, memory
    is ahead of the log, and the shell reloads the partition (Kafka reverts to its last
    written offset)."""
    driver = Driver()
    actions = driver.core.consumer_group_heartbeat(_request("m1", 0), TOPICS, driver.now_ms, 7)
    (append,) = [a for a in actions if isinstance(a, AppendRecords)]
    after = driver.core.on_appended(append.append_id, Errors.NOT_LEADER_OR_FOLLOWER,
                                    driver.now_ms)
    (answer,) = [a for a in after if isinstance(a, HeartbeatAnswer)]
    assert answer.error_code == Errors.NOT_COORDINATOR
    assert [a.partition for a in after if isinstance(a, RevertToLog)] == [0]


def test_a_group_config_sets_that_groups_session_timeout_and_heartbeat_interval() -> None:
    """consumer.session.timeout.ms / consumer.heartbeat.interval.ms of one group (its group
    configs) replace the broker's defaults for that group only."""
    driver = Driver(consumer_timeouts=lambda group_id: (8_000, 2_000) if group_id == "fast"
                    else None)
    assert driver.beat("m1", 0, group_id="fast").heartbeat_interval_ms == 2_000
    assert driver.beat("m2", 0, group_id="g").heartbeat_interval_ms == Driver().beat(
        "m", 0).heartbeat_interval_ms
    driver.now_ms += 8_001
    driver.run(driver.core.tick(driver.now_ms))
    assert not driver.core.consumer_groups["fast"].members  # fenced after its own 8 s
    assert set(driver.core.consumer_groups["g"].members) == {"m2"}  # 45 s for the others
