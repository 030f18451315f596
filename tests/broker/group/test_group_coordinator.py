"""The group coordinator's membership protocol: join, sync, heartbeat, leave, timeouts."""

from __future__ import annotations

from support.group_support import REBALANCE_MS, SESSION_MS, Shell

from pylog_nb.broker.group import GroupState, MemberRemoved
from pylog_nb.broker.group.errors import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    FENCED_INSTANCE_ID,
    GROUP_ID_NOT_FOUND,
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_SESSION_TIMEOUT,
    MEMBER_ID_REQUIRED,
    NON_EMPTY_GROUP,
    NOT_ENOUGH_REPLICAS,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
)

BOTH = (("range", b"r"), ("roundrobin", b"rr"))


def state(shell: Shell, group: str = "g") -> GroupState:
    return shell.coordinator.group(group).state


def test_three_members_joining_within_initial_delay_form_one_generation() -> None:
    shell = Shell(initial_rebalance_delay_ms=3_000)
    joins = [
        shell.join(now=t, client=f"c{i}", protocols=(("range", f"m{i}".encode()),))
        for i, t in enumerate((0, 100, 200))
    ]
    shell.tick(2_999)
    assert not shell.joins
    shell.tick(3_000)  # a newcomer arrived during the delay: wait one more delay
    assert not shell.joins
    shell.tick(6_000)
    answers = [shell.joins[j] for j in joins]
    assert {a.generation_id for a in answers} == {1}
    assert {a.protocol_name for a in answers} == {"range"}
    leader = answers[0]
    assert {a.leader_id for a in answers} == {leader.member_id}
    assert [(m.member_id, m.metadata) for m in leader.members] == [
        (a.member_id, f"m{i}".encode()) for i, a in enumerate(answers)
    ]
    assert all(a.members == () for a in answers[1:])
    assert state(shell) is GroupState.COMPLETING_REBALANCE


def test_initial_delay_is_capped_by_the_rebalance_timeout() -> None:
    shell = Shell(initial_rebalance_delay_ms=3_000)
    first = shell.join(now=0, rebalance_ms=4_000)
    shell.join(now=100, client="b", rebalance_ms=4_000)
    shell.tick(3_000)
    shell.tick(4_000)  # remaining was 1000 ms
    assert shell.joins[first].generation_id == 1


def test_sync_distributes_the_leaders_assignment_once_stored() -> None:
    shell = Shell(auto_append=False)
    shell.join(client="a")
    leader = next(iter(shell.joins.values()))
    follower_join = shell.join(client="b")
    leader_join = shell.join(leader.member_id)
    follower = shell.joins[follower_join]
    follower_sync = shell.sync(follower.member_id, 2)
    assert follower_sync not in shell.syncs  # parked until the leader's assignment
    leader_sync = shell.sync(
        shell.joins[leader_join].member_id, 2, {follower.member_id: b"p0", "stranger": b"x"}
    )
    assert not shell.syncs and len(shell.pending_appends) == 1
    shell.confirm()
    assert shell.syncs[follower_sync].assignment == b"p0"
    assert shell.syncs[leader_sync].assignment == b""  # left out by the leader: empty
    assert state(shell) is GroupState.STABLE
    again = shell.sync(follower.member_id, 2)  # Stable: answered at once
    assert shell.syncs[again].assignment == b"p0"


def test_failed_group_store_fails_the_syncs_and_rebalances() -> None:
    shell = Shell(auto_append=False)
    leader = shell.joins[shell.join()]
    sync_id = shell.sync(leader.member_id, 1)
    shell.confirm(NOT_ENOUGH_REPLICAS)
    assert shell.syncs[sync_id].error_code == COORDINATOR_NOT_AVAILABLE
    assert state(shell) is GroupState.PREPARING_REBALANCE


def test_heartbeat_error_codes_in_every_state() -> None:
    shell = Shell()
    coordinator = shell.coordinator
    assert coordinator.heartbeat("nope", "m", 1, 0) == UNKNOWN_MEMBER_ID
    a = shell.joins[shell.join(client="a")]
    assert state(shell) is GroupState.COMPLETING_REBALANCE
    assert coordinator.heartbeat("g", a.member_id, 1, 0) == 0
    assert coordinator.heartbeat("g", a.member_id, 0, 0) == ILLEGAL_GENERATION
    assert coordinator.heartbeat("g", "ghost", 1, 0) == UNKNOWN_MEMBER_ID
    shell.sync(a.member_id, 1)
    assert state(shell) is GroupState.STABLE
    assert coordinator.heartbeat("g", a.member_id, 1, 0) == 0
    shell.join(client="b")
    assert state(shell) is GroupState.PREPARING_REBALANCE
    assert coordinator.heartbeat("g", a.member_id, 1, 0) == REBALANCE_IN_PROGRESS
    assert coordinator.heartbeat("g", a.member_id, 2, 0) == ILLEGAL_GENERATION
    shell.leave((a.member_id, None))
    b = next(ans for ans in shell.joins.values() if ans.member_id != a.member_id)
    shell.leave((b.member_id, None))
    assert state(shell) is GroupState.EMPTY
    assert coordinator.heartbeat("g", b.member_id, b.generation_id, 0) == UNKNOWN_MEMBER_ID
    coordinator.begin_load()
    assert coordinator.heartbeat("g", b.member_id, 2, 0) == COORDINATOR_LOAD_IN_PROGRESS


def test_leaving_member_triggers_rebalance_and_remaining_members_rejoin() -> None:
    shell = Shell()
    a, b, c = shell.form_group(3)
    result = shell.leave((a.member_id, None), ("ghost", None))
    assert result.member_errors == (0, UNKNOWN_MEMBER_ID)
    assert state(shell) is GroupState.PREPARING_REBALANCE
    assert shell.coordinator.heartbeat("g", b.member_id, 3, 0) == REBALANCE_IN_PROGRESS
    jb, jc = shell.join(b.member_id), shell.join(c.member_id)
    assert shell.joins[jb].generation_id == shell.joins[jc].generation_id == 4
    assert shell.joins[jb].leader_id == b.member_id  # next member in join order leads
    assert [m.member_id for m in shell.joins[jb].members] == [b.member_id, c.member_id]


def test_session_timeout_expires_a_silent_member() -> None:
    shell = Shell()
    a, b = shell.form_group(2)
    assert shell.coordinator.heartbeat("g", b.member_id, 2, SESSION_MS - 1) == 0
    shell.tick(SESSION_MS)
    removed = [x for x in shell.actions if isinstance(x, MemberRemoved)]
    assert [(r.member_id, r.reason) for r in removed] == [(a.member_id, "session_timeout")]
    assert state(shell) is GroupState.PREPARING_REBALANCE
    answer = shell.joins[shell.join(b.member_id, now=SESSION_MS)]
    assert (answer.generation_id, answer.leader_id) == (3, b.member_id)


def test_rebalance_timeout_drops_members_that_did_not_rejoin() -> None:
    shell = Shell()
    a, b = shell.form_group(2)
    rejoin = shell.join(a.member_id, now=1_000)  # leader rejoins: new rebalance
    assert rejoin not in shell.joins
    shell.coordinator.heartbeat("g", b.member_id, 2, 1_000 + REBALANCE_MS - 1)
    shell.tick(1_000 + REBALANCE_MS)
    answer = shell.joins[rejoin]
    assert answer.generation_id == 3 and [m.member_id for m in answer.members] == [a.member_id]
    assert shell.coordinator.heartbeat("g", b.member_id, 2, 1_000) == UNKNOWN_MEMBER_ID


def test_members_that_never_sync_are_removed_after_the_rebalance_timeout() -> None:
    shell = Shell()
    leader = shell.joins[shell.join()]
    shell.tick(REBALANCE_MS)
    assert leader.member_id not in shell.coordinator.group("g").members
    assert state(shell) is GroupState.EMPTY


def test_static_member_rejoin_keeps_generation_and_fences_old_member_id() -> None:
    shell = Shell()
    s1 = shell.joins[shell.join(instance="i1", client="a")]
    j2 = shell.join(instance="i2", client="b")
    shell.join(s1.member_id, instance="i1")
    s2 = shell.joins[j2]
    shell.sync(s2.member_id, 2, instance="i2")
    shell.sync(s1.member_id, 2, {s2.member_id: b"p1"}, instance="i1")
    assert state(shell) is GroupState.STABLE
    restart = shell.join(instance="i2", client="b", now=5_000)  # a restarted process
    answer = shell.joins[restart]
    assert answer.error_code == 0 and answer.member_id != s2.member_id
    assert answer.generation_id == 2 and answer.leader_id == s1.member_id
    assert state(shell) is GroupState.STABLE
    coordinator = shell.coordinator
    assert coordinator.heartbeat("g", s2.member_id, 2, 5_000, group_instance_id="i2") == (
        FENCED_INSTANCE_ID
    )
    assert coordinator.heartbeat("g", s2.member_id, 2, 5_000) == UNKNOWN_MEMBER_ID
    assert coordinator.heartbeat("g", answer.member_id, 2, 5_000, group_instance_id="i2") == 0
    fenced = shell.joins[shell.join(s2.member_id, instance="i2")]
    assert fenced.error_code == FENCED_INSTANCE_ID
    synced = shell.syncs[shell.sync(answer.member_id, 2, instance="i2")]
    assert synced.assignment == b"p1"  # keeps the old member's assignment


def test_static_leader_rejoin_gets_members_with_skip_assignment() -> None:
    shell = Shell()
    s1 = shell.joins[shell.join(instance="i1")]
    shell.sync(s1.member_id, 1, instance="i1")
    answer = shell.joins[shell.join(instance="i1")]
    assert answer.leader_id == answer.member_id and answer.skip_assignment
    assert [m.group_instance_id for m in answer.members] == ["i1"]


def test_static_rejoin_that_changes_the_selected_protocol_rebalances() -> None:
    shell = Shell()
    s1 = shell.joins[shell.join(instance="i1", protocols=BOTH)]
    shell.sync(s1.member_id, 1, instance="i1")
    shell.join(instance="i1", protocols=(("roundrobin", b"rr2"),))
    assert state(shell) is GroupState.COMPLETING_REBALANCE
    last = list(shell.joins.values())[-1]
    assert (last.generation_id, last.protocol_name) == (2, "roundrobin")


def test_failed_static_rejoin_store_restores_the_old_member_id() -> None:
    shell = Shell(auto_append=False)
    s1 = shell.joins[shell.join(instance="i1")]
    shell.sync(s1.member_id, 1, instance="i1")
    shell.confirm()
    rejoin = shell.join(instance="i1")
    shell.confirm(NOT_ENOUGH_REPLICAS)
    assert shell.joins[rejoin].error_code == COORDINATOR_NOT_AVAILABLE
    assert shell.coordinator.heartbeat("g", s1.member_id, 1, 0, group_instance_id="i1") == 0


def test_member_id_required_then_join_with_the_given_id() -> None:
    shell = Shell()
    first = shell.joins[shell.join(require_known=True, client="app")]
    assert first.error_code == MEMBER_ID_REQUIRED and first.member_id.startswith("app-")
    assert shell.coordinator.group("g").pending_members
    second = shell.joins[shell.join(first.member_id)]
    assert (second.error_code, second.member_id, second.generation_id) == (
        0,
        first.member_id,
        1,
    )


def test_pending_member_that_never_rejoins_expires() -> None:
    shell = Shell()
    a = shell.joins[shell.join()]
    shell.sync(a.member_id, 1)
    pending = shell.joins[shell.join(require_known=True)]
    rejoin = shell.join(a.member_id)  # leader rejoin: rebalance
    assert rejoin not in shell.joins  # the rebalance waits for the pending member
    shell.tick(SESSION_MS)
    assert shell.joins[rejoin].generation_id == 2
    assert pending.member_id not in shell.coordinator.group("g").pending_members


def test_protocol_is_the_one_all_support_with_most_votes() -> None:
    shell = Shell(initial_rebalance_delay_ms=1_000)
    for protocols in (
        (("a", b""), ("b", b"")),
        (("b", b""), ("a", b"")),
        (("c", b""), ("b", b""), ("a", b"")),
    ):
        shell.join(protocols=protocols)
    shell.tick(1_000)
    shell.tick(2_000)
    assert {a.protocol_name for a in shell.joins.values()} == {"b"}


def test_protocol_vote_tie_goes_to_the_leaders_preference() -> None:
    shell = Shell(initial_rebalance_delay_ms=1_000)
    shell.join(protocols=(("a", b""), ("b", b"")))
    shell.join(protocols=(("b", b""), ("a", b"")))
    shell.tick(1_000)
    shell.tick(2_000)
    assert {a.protocol_name for a in shell.joins.values()} == {"a"}


def test_inconsistent_protocols_are_rejected() -> None:
    shell = Shell(initial_rebalance_delay_ms=1_000)
    assert shell.joins[shell.join(protocols=())].error_code == INCONSISTENT_GROUP_PROTOCOL
    shell.join(protocols=(("range", b""),))
    other = shell.join(protocols=(("sticky", b""),))
    wrong_type = shell.join(protocol_type="connect")
    assert shell.joins[other].error_code == INCONSISTENT_GROUP_PROTOCOL
    assert shell.joins[wrong_type].error_code == INCONSISTENT_GROUP_PROTOCOL


def test_session_timeout_bounds_are_constructor_parameters() -> None:
    shell = Shell(session_timeout_ms_min=6_000, session_timeout_ms_max=1_800_000)
    assert shell.joins[shell.join(session_ms=5_999)].error_code == INVALID_SESSION_TIMEOUT
    assert shell.joins[shell.join(session_ms=1_800_001)].error_code == INVALID_SESSION_TIMEOUT
    assert shell.joins[shell.join(session_ms=6_000)].error_code == 0


def test_requests_while_loading_get_load_in_progress() -> None:
    shell = Shell(loading=True)
    assert shell.joins[shell.join()].error_code == COORDINATOR_LOAD_IN_PROGRESS
    assert shell.syncs[shell.sync("m", 1)].error_code == COORDINATOR_LOAD_IN_PROGRESS
    assert shell.coordinator.list_groups() == (COORDINATOR_LOAD_IN_PROGRESS, [])


def test_sync_errors() -> None:
    shell = Shell()
    a, b = shell.form_group(2)
    assert shell.syncs[shell.sync(a.member_id, 1)].error_code == ILLEGAL_GENERATION
    assert shell.syncs[shell.sync("ghost", 2)].error_code == UNKNOWN_MEMBER_ID
    shell.join(a.member_id)
    assert shell.syncs[shell.sync(b.member_id, 2)].error_code == REBALANCE_IN_PROGRESS


def test_rejoin_during_completing_rebalance_resends_the_same_answer() -> None:
    shell = Shell()
    a = shell.joins[shell.join()]
    again = shell.joins[shell.join(a.member_id)]
    assert (again.generation_id, again.members) == (a.generation_id, a.members)


def test_describe_list_and_delete_groups() -> None:
    shell = Shell()
    a, b = shell.form_group(2)
    shell.commit({("t", 0): (5, -1, "")}, group="solo")
    [described, unknown] = shell.coordinator.describe(["g", "nope"])
    assert (described.state, described.protocol_type, described.protocol_data) == (
        "Stable",
        "consumer",
        "range",
    )
    assert [(m.member_id, m.assignment) for m in described.members] == [
        (a.member_id, b"a-" + a.member_id.encode()),
        (b.member_id, b"a-" + b.member_id.encode()),
    ]
    assert (unknown.error_code, unknown.state) == (0, "Dead")
    assert shell.coordinator.list_groups(["stable"]) == (
        0, [("g", "consumer", "Stable", "classic")])
    assert shell.coordinator.list_groups()[1] == [
        ("g", "consumer", "Stable", "classic"),
        ("solo", "", "Empty", "classic"),
    ]
    errors, actions = shell.coordinator.delete_groups(["g", "solo", "nope"], 0)
    assert errors == {"g": NON_EMPTY_GROUP, "solo": 0, "nope": GROUP_ID_NOT_FOUND}
    [append] = [x for x in actions if hasattr(x, "records")]
    assert all(value is None for _, value in append.records) and len(append.records) == 2
    assert shell.coordinator.group("solo") is None
