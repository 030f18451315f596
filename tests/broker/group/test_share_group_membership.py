"""KIP-932 share-group membership in the group coordinator (``group/share_groups.py``)."""

from __future__ import annotations

import itertools

from pylog_nb.broker.errors import Errors
from pylog_nb.broker.group import GroupCoordinator, HeartbeatAnswer
from pylog_nb.broker.group.assignors import TopicMetadata
from pylog_nb.broker.group.share_groups import ShareGroupMember, share_assignment
from pylog_nb.broker.group.share_groups import ShareHeartbeatRequest as Beat

TOPIC_ID = "5ba1e000-0000-4000-8000-000000000001"
TOPICS = {"jobs": TopicMetadata(topic_id=TOPIC_ID, name="jobs", partitions=2)}
IDS = itertools.count()


def _beat(core: GroupCoordinator, member: str, epoch: int, group: str = "q",
          now_ms: int = 0) -> HeartbeatAnswer:
    names = ("jobs",) if epoch == 0 else None
    [answer] = core.share_group_heartbeat(
        Beat(group_id=group, member_id=member, member_epoch=epoch,
             subscribed_topic_names=names), TOPICS, now_ms, next(IDS))
    assert isinstance(answer, HeartbeatAnswer)
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
    core.tick(1_000)
    assert not core.share_groups["q"].members
