"""Exact session expiry: a member whose session ended at or before a request's time is gone for
that request (DeleteGroups, or any request routed through ``expire_due``), whenever the
periodic tick comes. Sans-IO, with the clock injected as ``now``."""

from __future__ import annotations

from support.group_support import SESSION_MS, Shell

from pylog_nb.broker.group import GroupState, MemberRemoved
from pylog_nb.broker.group.errors import NON_EMPTY_GROUP, NONE, UNKNOWN_MEMBER_ID

HEARTBEAT_AT = 1_234


def closed_static_member(shell: Shell, instance: str = "i1", group: str = "g") -> str:
    """A static member, stable and committed, whose last heartbeat was at HEARTBEAT_AT (then
    its client closed without leaving, as a static member does)."""
    joined = shell.joins[shell.join(instance=instance, group=group)]
    shell.sync(joined.member_id, joined.generation_id, {joined.member_id: b"a"},
               group=group, instance=instance)
    shell.commit({("t", 0): (5, -1, "")}, member_id=joined.member_id,
                 generation=joined.generation_id, group=group, instance=instance)
    assert shell.coordinator.heartbeat(group, joined.member_id, joined.generation_id,
                                       HEARTBEAT_AT, group_instance_id=instance) == NONE
    assert shell.coordinator.group(group).state is GroupState.STABLE
    return joined.member_id


def removed(actions: list) -> list[tuple[str, str]]:
    return [(a.member_id, a.reason) for a in actions if isinstance(a, MemberRemoved)]


def test_delete_groups_exactly_at_the_session_timeout_succeeds_without_a_tick() -> None:
    shell = Shell()
    member_id = closed_static_member(shell)
    deadline = HEARTBEAT_AT + SESSION_MS

    errors, actions = shell.coordinator.delete_groups(["g"], deadline - 1)
    assert errors == {"g": NON_EMPTY_GROUP} and removed(actions) == []
    assert member_id in shell.coordinator.group("g").members

    errors, actions = shell.coordinator.delete_groups(["g"], deadline)  # + 0 ms
    assert errors == {"g": NONE}
    assert removed(actions) == [(member_id, "session_timeout")]
    assert shell.coordinator.group("g") is None
    shell.runtime.run(shell.home, actions)
    assert shell.log[-2:] == [(shell.log[-2][0], None), (shell.log[-1][0], None)]  # tombstones


def test_expire_due_applies_only_the_groups_deadlines_due_by_now() -> None:
    shell = Shell()
    first = closed_static_member(shell, "i1", group="g1")
    closed_static_member(shell, "i2", group="g2")
    deadline = HEARTBEAT_AT + SESSION_MS
    assert shell.coordinator.expire_due("g1", deadline - 1) == []
    assert shell.coordinator.expire_due("nope", deadline) == []
    actions = shell.coordinator.expire_due("g1", deadline)
    assert removed(actions) == [(first, "session_timeout")]
    shell.runtime.run(shell.home, actions)
    assert shell.coordinator.group("g1").state is GroupState.EMPTY
    assert shell.coordinator.group("g2").state is GroupState.STABLE  # its own request decides
    [described] = shell.coordinator.describe(["g1"])
    assert (described.state, described.members) == ("Empty", ())
    assert shell.coordinator.heartbeat("g1", first, 1, deadline) == UNKNOWN_MEMBER_ID
    assert shell.coordinator.fetch_offsets("g1") == (NONE, {("t", 0): (5, -1, "")})


def test_a_member_still_in_session_keeps_the_group_non_empty() -> None:
    shell = Shell()
    first = shell.joins[shell.join(instance="i1")]
    parked = shell.join(instance="i2")  # a rebalance: answered once i1 rejoins
    shell.join(first.member_id, instance="i1")
    second = shell.joins[parked]
    generation = second.generation_id
    shell.sync(second.member_id, generation, instance="i2")
    shell.sync(first.member_id, generation, {}, instance="i1")
    coordinator = shell.coordinator
    assert coordinator.heartbeat("g", first.member_id, generation, HEARTBEAT_AT,
                                 group_instance_id="i1") == NONE
    assert coordinator.heartbeat("g", second.member_id, generation, HEARTBEAT_AT + 1,
                                 group_instance_id="i2") == NONE
    errors, actions = coordinator.delete_groups(["g"], HEARTBEAT_AT + SESSION_MS)
    assert errors == {"g": NON_EMPTY_GROUP}
    assert removed(actions) == [(first.member_id, "session_timeout")]
    assert list(coordinator.group("g").members) == [second.member_id]
    shell.runtime.run(shell.home, actions)
    errors, actions = coordinator.delete_groups(["g"], HEARTBEAT_AT + 1 + SESSION_MS)
    assert errors == {"g": NONE} and removed(actions) == [(second.member_id, "session_timeout")]
