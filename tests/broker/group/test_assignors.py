"""Server-side assignors of KIP-848 consumer groups: uniform (homogeneous and heterogeneous
subscriptions) and range; examples for each rule, then properties over random groups."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pylog_nb.broker.group.assignors import (
    ASSIGNORS,
    DEFAULT_ASSIGNOR,
    GroupAssignment,
    MemberSubscription,
    RangeAssignor,
    TopicMetadata,
    UniformAssignor,
    assignor,
)

UNIFORM = UniformAssignor()
RANGE = RangeAssignor()
NO_PREVIOUS: dict[str, dict[str, frozenset[int]]] = {}

Members = dict[str, MemberSubscription]
Topics = dict[str, TopicMetadata]
Previous = dict[str, dict[str, frozenset[int]]]
K = TypeVar("K")
V = TypeVar("V")


def topics_of(**counts: int) -> Topics:
    """Topics by name with their partition counts; the id is the name reversed."""
    return {name[::-1]: TopicMetadata(name[::-1], name, n) for name, n in counts.items()}


def tid(name: str) -> str:
    return name[::-1]


def members_of(subscriptions: Mapping[str, str], **instances: str) -> Members:
    """Members by id, each subscribing to the space-separated topic names given."""
    return {
        m: MemberSubscription(m, frozenset(tid(t) for t in names.split()), instances.get(m))
        for m, names in subscriptions.items()
    }


def counts(result: GroupAssignment) -> dict[str, int]:
    return {m: sum(len(ps) for ps in a.values()) for m, a in result.items()}


def owners(result: GroupAssignment) -> dict[tuple[str, int], str]:
    return {(t, p): m for m, a in result.items() for t, ps in a.items() for p in ps}


def moved(before: GroupAssignment, after: GroupAssignment) -> int:
    """Partitions owned before that have another owner now."""
    now = owners(after)
    return sum(now[tp] != m for tp, m in owners(before).items())


def assert_valid(result: GroupAssignment, members: Members, topics: Topics) -> None:
    """Every subscribed partition once, to a subscriber; nothing else; every member a key."""
    assert set(result) == set(members)
    seen: list[tuple[str, int]] = []
    for member_id, assignment in result.items():
        for topic_id, partitions in assignment.items():
            assert topic_id in members[member_id].topic_ids
            assert partitions, "topics without partitions for a member are omitted"
            seen.extend((topic_id, p) for p in partitions)
    subscribed = set().union(*(s.topic_ids for s in members.values()))
    expected = [(t, p) for t in subscribed for p in range(topics[t].partitions)]
    assert sorted(seen) == sorted(expected)


# -- uniform, examples --------------------------------------------------------------------


def test_uniform_homogeneous_spreads_partitions_evenly_over_members() -> None:
    members = members_of({"a": "x y", "b": "x y", "c": "x y"})
    topics = topics_of(x=4, y=3)
    result = UNIFORM.assign(members, topics, NO_PREVIOUS)
    assert_valid(result, members, topics)
    assert sorted(counts(result).values()) == [2, 2, 3]


def test_every_member_is_in_the_result_even_without_partitions() -> None:
    members = members_of({"a": "x", "b": "x", "c": "x"})
    topics = topics_of(x=2)
    result = UNIFORM.assign(members, topics, NO_PREVIOUS)
    assert sorted(counts(result).values()) == [0, 1, 1]
    assert [a for a in result.values() if not a] == [{}]


def test_member_subscribing_to_nothing_gets_an_empty_assignment() -> None:
    members = members_of({"a": "x", "b": ""})
    result = UNIFORM.assign(members, topics_of(x=3), NO_PREVIOUS)
    assert result == {"a": {tid("x"): frozenset({0, 1, 2})}, "b": {}}


def test_topics_nobody_subscribes_to_are_assigned_to_nobody() -> None:
    members = members_of({"a": "x", "b": "x"})
    topics = topics_of(x=2, unused=5)
    for assignor_ in (UNIFORM, RANGE):
        result = assignor_.assign(members, topics, NO_PREVIOUS)
        assert_valid(result, members, topics)
        assert all(tid("unused") not in a for a in result.values())


def test_no_group_gives_an_empty_assignment() -> None:
    assert UNIFORM.assign({}, topics_of(x=3), NO_PREVIOUS) == {}
    assert RANGE.assign({}, topics_of(x=3), NO_PREVIOUS) == {}


def test_uniform_keeps_a_balanced_previous_assignment_unchanged() -> None:
    members = members_of({"a": "x", "b": "x"})
    previous = {"a": {tid("x"): frozenset({1, 3})}, "b": {tid("x"): frozenset({0, 2})}}
    assert UNIFORM.assign(members, topics_of(x=4), previous) == previous


def test_uniform_moves_only_the_minimum_when_a_member_joins() -> None:
    # 9 partitions over 3 members: 3 each. A 4th member: quotas 3, 2, 2, 2, so exactly two
    # partitions move, both to the newcomer.
    topics = topics_of(x=9)
    three = members_of({"a": "x", "b": "x", "c": "x"})
    before = UNIFORM.assign(three, topics, NO_PREVIOUS)
    four = members_of({"a": "x", "b": "x", "c": "x", "d": "x"})
    after = UNIFORM.assign(four, topics, before)
    assert moved(before, after) == 2
    assert counts(after)["d"] == 2
    assert all(after[m][tid("x")] <= before[m][tid("x")] for m in "abc")


def test_uniform_gives_a_leaving_members_partitions_to_the_others_only() -> None:
    topics = topics_of(x=6)
    before = UNIFORM.assign(members_of({"a": "x", "b": "x", "c": "x"}), topics, NO_PREVIOUS)
    after = UNIFORM.assign(members_of({"a": "x", "b": "x"}), topics, before)
    for m in "ab":
        assert before[m][tid("x")] <= after[m][tid("x")]
    assert counts(after) == {"a": 3, "b": 3}


def test_uniform_drops_what_no_longer_exists_from_the_previous_assignment() -> None:
    members = members_of({"a": "x", "b": "x y"})
    topics = topics_of(x=2, y=2)
    previous = {
        "gone": {tid("x"): frozenset({0})},  # member left
        "a": {tid("y"): frozenset({0}), tid("deleted"): frozenset({0})},  # unsubscribed, deleted
        "b": {tid("x"): frozenset({0, 1, 7})},  # partition 7 is beyond the count
    }
    result = UNIFORM.assign(members, topics, previous)
    assert_valid(result, members, topics)
    assert sorted(counts(result).values()) == [2, 2]


def test_uniform_gives_a_partition_claimed_twice_to_one_member() -> None:
    members = members_of({"a": "x", "b": "x"})
    previous = {"a": {tid("x"): frozenset({0, 1})}, "b": {tid("x"): frozenset({1})}}
    result = UNIFORM.assign(members, topics_of(x=2), previous)
    assert_valid(result, members, topics_of(x=2))
    assert result == {"a": {tid("x"): frozenset({0})}, "b": {tid("x"): frozenset({1})}}


def test_uniform_heterogeneous_balances_as_subscriptions_allow() -> None:
    # a can only take x; b takes all of y and makes up the rest from x: 4 and 4.
    members = members_of({"a": "x", "b": "x y"})
    topics = topics_of(x=6, y=2)
    result = UNIFORM.assign(members, topics, NO_PREVIOUS)
    assert_valid(result, members, topics)
    assert counts(result) == {"a": 4, "b": 4}
    assert result["b"][tid("y")] == frozenset({0, 1})


def test_uniform_heterogeneous_never_assigns_unsubscribed_topics() -> None:
    members = members_of({"a": "x", "b": "y", "c": "x y"})
    topics = topics_of(x=5, y=7)
    result = UNIFORM.assign(members, topics, NO_PREVIOUS)
    assert_valid(result, members, topics)
    assert set(result["a"]) <= {tid("x")} and set(result["b"]) <= {tid("y")}
    assert max(counts(result).values()) - min(counts(result).values()) <= 1


def test_uniform_heterogeneous_keeps_partitions_that_keep_balance() -> None:
    members = members_of({"a": "x", "b": "x y"})
    topics = topics_of(x=4, y=2)
    previous = {"a": {tid("x"): frozenset({0, 2, 3})}, "b": {tid("y"): frozenset({0, 1})}}
    result = UNIFORM.assign(members, topics, previous)
    assert result == {"a": previous["a"], "b": {**previous["b"], tid("x"): frozenset({1})}}


def test_uniform_heterogeneous_rebalances_when_a_subscriber_joins_a_topic() -> None:
    members = members_of({"a": "x", "b": "x y", "c": "x"})
    topics = topics_of(x=6, y=3)
    before = {"a": {tid("x"): frozenset(range(6))}, "b": {tid("y"): frozenset(range(3))}}
    result = UNIFORM.assign(members, topics, before)
    assert_valid(result, members, topics)
    assert counts(result) == {"a": 3, "b": 3, "c": 3}
    assert result["b"][tid("y")] == frozenset(range(3))


def test_uniform_ignores_the_iteration_order_of_its_inputs() -> None:
    members = members_of({"b": "x y", "a": "x", "c": "y"})
    topics = topics_of(y=3, x=5)
    reordered = dict(reversed(members.items()))
    assert UNIFORM.assign(members, topics, NO_PREVIOUS) == UNIFORM.assign(
        reordered, dict(reversed(topics.items())), NO_PREVIOUS
    )


# -- range, examples ----------------------------------------------------------------------


def test_range_co_partitions_topics_of_equal_size() -> None:
    # Kafka's RangeAssignor example: M0 gets partitions 0-1 of both topics, M1 partition 2.
    members = members_of({"m0": "t1 t2", "m1": "t1 t2"})
    result = RANGE.assign(members, topics_of(t1=3, t2=3), NO_PREVIOUS)
    assert result == {
        "m0": {tid("t1"): frozenset({0, 1}), tid("t2"): frozenset({0, 1})},
        "m1": {tid("t1"): frozenset({2}), tid("t2"): frozenset({2})},
    }


def test_range_gives_the_first_members_one_extra_partition_each() -> None:
    members = members_of({"c": "x", "a": "x", "b": "x"})
    result = RANGE.assign(members, topics_of(x=7), NO_PREVIOUS)
    assert result == {
        "a": {tid("x"): frozenset({0, 1, 2})},
        "b": {tid("x"): frozenset({3, 4})},
        "c": {tid("x"): frozenset({5, 6})},
    }


def test_range_orders_static_members_first_by_instance_id() -> None:
    members = members_of({"a": "x", "b": "x", "c": "x"}, b="i2", c="i1")
    result = RANGE.assign(members, topics_of(x=3), NO_PREVIOUS)
    assert result == {
        "c": {tid("x"): frozenset({0})},
        "b": {tid("x"): frozenset({1})},
        "a": {tid("x"): frozenset({2})},
    }


def test_range_splits_each_topic_over_its_own_subscribers() -> None:
    members = members_of({"a": "x", "b": "x y", "c": "y"})
    topics = topics_of(x=3, y=4)
    result = RANGE.assign(members, topics, NO_PREVIOUS)
    assert result == {
        "a": {tid("x"): frozenset({0, 1})},
        "b": {tid("x"): frozenset({2}), tid("y"): frozenset({0, 1})},
        "c": {tid("y"): frozenset({2, 3})},
    }


def test_range_leaves_extra_members_empty() -> None:
    members = members_of({"a": "x", "b": "x", "c": "x"})
    assert RANGE.assign(members, topics_of(x=1), NO_PREVIOUS) == {
        "a": {tid("x"): frozenset({0})},
        "b": {},
        "c": {},
    }


def test_range_does_not_depend_on_the_previous_assignment() -> None:
    members = members_of({"a": "x", "b": "x"})
    previous = {"a": {tid("x"): frozenset({2, 3})}, "b": {tid("x"): frozenset({0, 1})}}
    topics = topics_of(x=4)
    assert RANGE.assign(members, topics, previous) == RANGE.assign(members, topics, NO_PREVIOUS)


# -- lookup -------------------------------------------------------------------------------


def test_assignor_lookup_defaults_to_uniform_and_rejects_unknown_names() -> None:
    assert DEFAULT_ASSIGNOR == "uniform"
    assert set(ASSIGNORS) == {"uniform", "range"}
    assert isinstance(assignor(None), UniformAssignor)
    assert isinstance(assignor("uniform"), UniformAssignor)
    assert isinstance(assignor("range"), RangeAssignor)
    assert assignor("cooperative-sticky") is None


# -- properties ---------------------------------------------------------------------------

PROPERTIES = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def groups(draw: st.DrawFn, homogeneous: bool | None = None) -> tuple[Members, Topics, Previous]:
    """A random group: 1-12 members, 1-5 topics of 1-16 partitions, random subscriptions and a
    random (possibly invalid) previous assignment. Names sort differently from ids."""
    n_topics = draw(st.integers(1, 5))
    names = draw(st.permutations([f"topic-{i}" for i in range(n_topics)]))
    topics = {
        f"id-{i}": TopicMetadata(f"id-{i}", names[i], draw(st.integers(1, 16)))
        for i in range(n_topics)
    }
    member_ids = draw(st.lists(st.integers(0, 99), min_size=1, max_size=12, unique=True))
    topic_sets = st.frozensets(st.sampled_from(sorted(topics)))
    if homogeneous is None:
        homogeneous = draw(st.booleans())
    shared = draw(st.frozensets(st.sampled_from(sorted(topics)), min_size=1))
    members = {
        f"member-{k}": MemberSubscription(
            f"member-{k}",
            shared if homogeneous else draw(topic_sets),
            draw(st.none() | st.integers(0, 999).map(lambda i: f"instance-{i}")),
        )
        for k in member_ids
    }
    owners_ = st.sampled_from(sorted(members) + ["member-gone"])
    topic_ids = st.sampled_from(sorted(topics) + ["id-deleted"])
    previous = draw(
        st.dictionaries(
            owners_, st.dictionaries(topic_ids, st.frozensets(st.integers(0, 20)), max_size=3)
        )
    )
    return members, topics, previous


def shuffled(
    draw: Callable[[st.SearchStrategy[list[tuple[K, V]]]], list[tuple[K, V]]],
    mapping: Mapping[K, V],
) -> dict[K, V]:
    return dict(draw(st.permutations(list(mapping.items()))))


@PROPERTIES
@given(groups())
def test_every_assignment_is_valid(group: tuple[Members, Topics, Previous]) -> None:
    for assignor_ in ASSIGNORS.values():
        assert_valid(assignor_.assign(*group), group[0], group[1])


@PROPERTIES
@given(groups(homogeneous=True))
def test_uniform_homogeneous_counts_differ_by_at_most_one(
    group: tuple[Members, Topics, Previous],
) -> None:
    sizes = counts(UNIFORM.assign(*group)).values()
    assert max(sizes) - min(sizes) <= 1


@PROPERTIES
@given(groups(homogeneous=False))
def test_uniform_heterogeneous_is_balanced_within_each_topics_subscribers(
    group: tuple[Members, Topics, Previous],
) -> None:
    members, topics, _ = group
    result = UNIFORM.assign(*group)
    load = counts(result)
    for topic_id in topics:
        subscribers = [m for m, s in members.items() if topic_id in s.topic_ids]
        holders = [m for m in subscribers if topic_id in result[m]]
        # no partition of the topic could move to a subscriber and narrow a gap of two
        for m in holders:
            assert load[m] <= min(load[s] for s in subscribers) + 1
    by_subscription: dict[frozenset[str], list[int]] = {}
    for m, s in members.items():
        by_subscription.setdefault(s.topic_ids, []).append(load[m])
    for sizes in by_subscription.values():
        assert max(sizes) - min(sizes) <= 1


@PROPERTIES
@given(groups(), st.data())
def test_assignment_does_not_depend_on_input_order(
    group: tuple[Members, Topics, Previous], data: st.DataObject
) -> None:
    members, topics, previous = group
    reordered = (
        shuffled(data.draw, members),
        shuffled(data.draw, topics),
        {m: shuffled(data.draw, a) for m, a in shuffled(data.draw, previous).items()},
    )
    for assignor_ in ASSIGNORS.values():
        assert assignor_.assign(*group) == assignor_.assign(*reordered)


@PROPERTIES
@given(groups())
def test_uniform_reassigning_its_own_assignment_changes_nothing(
    group: tuple[Members, Topics, Previous],
) -> None:
    members, topics, _ = group
    first = UNIFORM.assign(*group)
    assert UNIFORM.assign(members, topics, first) == first


@PROPERTIES
@given(groups(homogeneous=True), st.integers(100, 199))
def test_uniform_moves_only_partitions_above_the_new_quota_when_a_member_joins(
    group: tuple[Members, Topics, Previous], newcomer: int
) -> None:
    members, topics, previous = group
    before = UNIFORM.assign(members, topics, previous)
    joined = f"member-{newcomer}"
    shared = next(iter(members.values())).topic_ids
    after = UNIFORM.assign({**members, joined: MemberSubscription(joined, shared)}, topics, before)
    held = counts(before).values()
    quota, extra = divmod(sum(held), len(members) + 1)
    # above the quota each must give up; the one-more slots spare members that hold more
    expected = sum(max(0, h - quota) for h in held) - min(extra, sum(h > quota for h in held))
    assert moved(before, after) == expected


@PROPERTIES
@given(groups())
def test_range_splits_each_topic_in_contiguous_ranges_in_kafka_order(
    group: tuple[Members, Topics, Previous],
) -> None:
    members, topics, _ = group
    result = RANGE.assign(*group)
    order = sorted(
        members.values(), key=lambda s: (s.instance_id is None, s.instance_id or "", s.member_id)
    )
    for topic_id, topic in topics.items():
        subscribers = [s.member_id for s in order if topic_id in s.topic_ids]
        if not subscribers:
            continue
        got = [sorted(result[m].get(topic_id, ())) for m in subscribers]
        base, extra = divmod(topic.partitions, len(subscribers))
        assert [len(ps) for ps in got] == [base + (i < extra) for i in range(len(subscribers))]
        assert [p for ps in got for p in ps] == list(range(topic.partitions))


@PROPERTIES
@given(groups())
def test_range_co_partitions_topics_with_same_subscribers_and_size(
    group: tuple[Members, Topics, Previous],
) -> None:
    members, topics, _ = group
    result = RANGE.assign(*group)
    for a in topics:
        for b in topics:
            same_subscribers = all(
                (a in s.topic_ids) == (b in s.topic_ids) for s in members.values()
            )
            if same_subscribers and topics[a].partitions == topics[b].partitions:
                for assignment in result.values():
                    assert assignment.get(a) == assignment.get(b)
