"""KIP-932 share-group membership in the group coordinator (``group/share_groups.py``), and
its records in ``__consumer_offsets`` (``group/share_storage.py``): what a coordinator that
loads the log after a failover knows."""

from __future__ import annotations

import itertools

from pylog_nb.broker.errors import Errors
from pylog_nb.broker.group import AppendRecords, GroupCoordinator, HeartbeatAnswer
from pylog_nb.broker.group.actions import Action, RevertToLog
from pylog_nb.broker.group.assignors import TopicMetadata
from pylog_nb.broker.group.records import decode_key
from pylog_nb.broker.group.share_groups import ShareGroupMember, share_assignment
from pylog_nb.broker.group.share_groups import ShareHeartbeatRequest as Beat
from pylog_nb.broker.group.share_records import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupMemberMetadataKey,
    ShareGroupMetadataKey,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMetadataKey,
)
from pylog_nb.broker.group.storage import OffsetsBatch

TOPIC_ID = "5ba1e000-0000-4000-8000-000000000001"
TOPICS = {"jobs": TopicMetadata(topic_id=TOPIC_ID, name="jobs", partitions=2)}
IDS = itertools.count()
SESSION_MS = 45_000


class Log:
    """Confirms each append of one coordinator at once and keeps the batches (an ISR of one)."""

    def __init__(self) -> None:
        self.batches: list[OffsetsBatch] = []

    def run(self, core: GroupCoordinator, actions: list[Action]) -> list[Action]:
        done: list[Action] = []
        while actions:
            action = actions.pop(0)
            if isinstance(action, AppendRecords):
                offset = len(self.batches)
                self.batches.append(OffsetsBatch(offset, action.records))
                actions += core.on_appended(action.append_id, Errors.NONE, 0, offset)
            else:
                done.append(action)
        return done

    def keys(self) -> list[object]:
        return [decode_key(key) for batch in self.batches for key, _ in batch.records]

    def successor(self, now_ms: int = 0) -> GroupCoordinator:
        core = GroupCoordinator(0, consumer_session_timeout_ms=SESSION_MS, loading=True)
        core.load(self.batches, now_ms)
        return core


LOG = Log()


def _beat(core: GroupCoordinator, member: str, epoch: int, group: str = "q",
          now_ms: int = 0, log: Log = LOG) -> HeartbeatAnswer:
    names = ("jobs",) if epoch == 0 else None
    request_id = next(IDS)
    answers = log.run(core, core.share_group_heartbeat(
        Beat(group_id=group, member_id=member, member_epoch=epoch,
             subscribed_topic_names=names), TOPICS, now_ms, request_id))
    [answer] = answers
    assert isinstance(answer, HeartbeatAnswer) and answer.request_id == request_id
    return answer


def _members(*ids: str) -> dict[str, ShareGroupMember]:
    return {m: ShareGroupMember(member_id=m, subscribed_topic_names=("jobs",)) for m in ids}


def test_more_members_than_partitions_share_each_partition() -> None:
    target = share_assignment(_members("a", "b", "c", "d", "e"), TOPICS)
    readers = {p: sorted(m for m, a in target.items() if p in a.get(TOPIC_ID, ())) for p in (0, 1)}
    assert readers == {0: ["a", "c", "e"], 1: ["b", "d"]}
    assert all(len(a[TOPIC_ID]) == 1 for a in target.values())


def test_fewer_members_than_partitions_split_them() -> None:
    target = share_assignment(_members("a"), TOPICS)
    assert target == {"a": {TOPIC_ID: frozenset({0, 1})}}


def test_members_join_take_their_share_and_leave() -> None:
    core = GroupCoordinator(0)
    first = _beat(core, "a", 0)
    assert (first.error_code, first.member_epoch) == (Errors.NONE, 1)
    assert first.assignment == {TOPIC_ID: frozenset({0, 1})}
    second = _beat(core, "b", 0)
    assert (second.member_epoch, second.assignment) == (2, {TOPIC_ID: frozenset({1})})
    moved = _beat(core, "a", 1)  # no revocation in a share group: straight to epoch 2
    assert (moved.member_epoch, moved.assignment) == (2, {TOPIC_ID: frozenset({0})})
    assert _beat(core, "a", 2).assignment is None  # nothing changed
    assert _beat(core, "b", -1).member_epoch == -1
    assert _beat(core, "a", 2).assignment == {TOPIC_ID: frozenset({0, 1})}
    assert core.list_groups()[1][0][1:] == ("share", "Stable", "share")


def test_wrong_epochs_and_types_get_kafkas_errors() -> None:
    core = GroupCoordinator(0)
    _beat(core, "a", 0)
    assert _beat(core, "a", 9).error_code == Errors.FENCED_MEMBER_EPOCH
    assert _beat(core, "ghost", 1).error_code == Errors.UNKNOWN_MEMBER_ID
    assert _beat(core, "", 0).error_code == Errors.INVALID_REQUEST
    core.commit_offsets("classic-g", "", -1, {("jobs", 0): (1, -1, "")}, 0, 1)
    assert _beat(core, "a", 0, group="classic-g").error_code == Errors.GROUP_ID_NOT_FOUND


def test_a_silent_member_is_removed_when_its_session_ends() -> None:
    core = GroupCoordinator(0, consumer_session_timeout_ms=1_000)
    _beat(core, "a", 0)
    core.tick(999)
    assert "a" in core.share_groups["q"].members
    LOG.run(core, core.tick(1_000))
    assert not core.share_groups["q"].members


def test_a_new_coordinator_has_the_group_with_its_epochs_and_members() -> None:
    log, core = Log(), GroupCoordinator(0, consumer_session_timeout_ms=SESSION_MS)
    _beat(core, "a", 0, log=log)
    _beat(core, "b", 0, log=log)
    _beat(core, "a", 1, log=log)
    before = core.share_groups["q"]
    successor = log.successor(now_ms=5)
    after = successor.share_groups["q"]
    assert (after.group_epoch, after.assignment_epoch, after.state) == (
        before.group_epoch, before.assignment_epoch, before.state)
    assert after.target == before.target
    for member_id, member in before.members.items():
        again = after.members[member_id]
        assert (again.member_epoch, again.previous_member_epoch, again.assigned,
                again.subscribed_topic_names) == (
            member.member_epoch, member.previous_member_epoch, member.assigned,
            member.subscribed_topic_names)
        assert again.session_deadline_ms == 5 + SESSION_MS
    assert successor.list_groups()[1] == [("q", "share", "Stable", "share")]
    kept = _beat(successor, "a", 2, log=log)  # a survivor goes on at its epoch, no bump
    assert (kept.error_code, kept.member_epoch, kept.assignment) == (Errors.NONE, 2, None)


def test_no_epoch_goes_backwards_across_a_failover() -> None:
    log, core = Log(), GroupCoordinator(0, consumer_session_timeout_ms=SESSION_MS)
    _beat(core, "a", 0, log=log)
    _beat(core, "b", 0, log=log)
    assert _beat(core, "b", -1, log=log).member_epoch == -1
    persisted = core.share_groups["q"].group_epoch
    assert persisted == 3
    successor = log.successor()
    assert successor.share_groups["q"].group_epoch == persisted
    rejoined = _beat(successor, "c", 0, log=log)  # a member the old coordinator never saw
    assert rejoined.member_epoch == persisted + 1
    third = log.successor()  # ... and the bump was written before it was told
    assert third.share_groups["q"].group_epoch == persisted + 1
    assert set(third.share_groups["q"].members) == {"a", "c"}


def test_leaving_and_expiring_members_write_tombstones() -> None:
    log, core = Log(), GroupCoordinator(0, consumer_session_timeout_ms=1_000)
    _beat(core, "a", 0, log=log)
    _beat(core, "b", 0, log=log)
    _beat(core, "b", -1, log=log)
    assert log.keys()[-4:] == [
        ShareGroupCurrentMemberAssignmentKey("q", "b"),
        ShareGroupTargetAssignmentMemberKey("q", "b"),
        ShareGroupMemberMetadataKey("q", "b"),
        ShareGroupMetadataKey("q")]
    assert [value for _, value in log.batches[-1].records[:3]] == [None, None, None]
    log.run(core, core.tick(1_000))  # a's session ends
    successor = log.successor()
    assert successor.share_groups["q"].members == {}
    assert successor.list_groups()[1] == [("q", "share", "Empty", "share")]


def test_deleting_an_empty_share_group_writes_its_tombstones() -> None:
    log, core = Log(), GroupCoordinator(0, consumer_session_timeout_ms=SESSION_MS)
    _beat(core, "a", 0, log=log)
    errors, actions = core.delete_groups(["q"], 0)
    assert errors == {"q": Errors.NON_EMPTY_GROUP} and actions == []
    _beat(core, "a", -1, log=log)
    errors, actions = core.delete_groups(["q"], 0)
    assert errors == {"q": Errors.NONE}
    log.run(core, actions)
    assert log.keys()[-3:] == [ShareGroupTargetAssignmentMetadataKey("q"),
                               ShareGroupStatePartitionMetadataKey("q"), ShareGroupMetadataKey("q")]
    assert all(value is None for _, value in log.batches[-1].records)
    assert core.list_groups()[1] == []
    assert log.successor().list_groups()[1] == []
    assert _beat(core, "a", 0, log=log).member_epoch == 1  # a new group under the same id


def test_a_failed_append_of_share_group_state_asks_for_a_reload() -> None:
    core = GroupCoordinator(0)
    actions = core.share_group_heartbeat(
        Beat(group_id="q", member_id="a", member_epoch=0, subscribed_topic_names=("jobs",)),
        TOPICS, 0, 7)
    (append,) = [a for a in actions if isinstance(a, AppendRecords)]
    assert not [a for a in actions if isinstance(a, HeartbeatAnswer)]  # told after the append
    after = core.on_appended(append.append_id, Errors.NOT_LEADER_OR_FOLLOWER, 0)
    (answer,) = [a for a in after if isinstance(a, HeartbeatAnswer)]
    assert answer.error_code == Errors.NOT_COORDINATOR
    assert [a.partition for a in after if isinstance(a, RevertToLog)] == [0]


def test_an_answer_without_records_waits_for_the_appends_before_it() -> None:
    log, core = Log(), GroupCoordinator(0)
    _beat(core, "a", 0, log=log)
    first = core.share_group_heartbeat(
        Beat(group_id="q", member_id="b", member_epoch=0, subscribed_topic_names=("jobs",)),
        TOPICS, 0, 20)
    (append,) = [a for a in first if isinstance(a, AppendRecords)]
    held = core.share_group_heartbeat(
        Beat(group_id="q", member_id="b", member_epoch=2), TOPICS, 0, 21)
    assert held == []  # nothing to write, but b's join is not in the log yet
    answers = core.on_appended(append.append_id, Errors.NONE, 0, 1)
    assert [a.request_id for a in answers if isinstance(a, HeartbeatAnswer)] == [20, 21]
