"""Server-side partition assignors of KIP-848 consumer groups.

Theory of operation (Kafka's ``group-coordinator`` ``assignor`` package):

- The coordinator gives an assignor the group's members with their ``MemberSubscription``
  (topic ids, already resolved), the subscribed topics' ``TopicMetadata`` and the previous
  *target assignment*; it answers the new target assignment, member -> topic id -> partitions.
  Every partition of a subscribed topic goes to exactly one of its subscribers.
- The previous assignment is first cleaned: members that left, deleted or unsubscribed topics,
  partitions beyond the partition count and (defensively) second owners of a partition drop out.
- ``UniformAssignor`` ("uniform", the default) picks a builder by ``SubscriptionType``:
  HOMOGENEOUS (every member subscribes to the same topics) uses the homogeneous builder: each
  member gets a quota of ``total // members`` partitions, ``total % members`` of them one more,
  keeps its previous partitions up to its quota, and the rest fill the members below quota.
  HETEROGENEOUS uses the heterogeneous builder: members keep every previous partition they are
  still subscribed to, the free partitions go one by one to the least loaded subscriber (topics
  with the most partitions per subscriber first), then partitions move from the most to the least
  loaded subscriber of each topic, topic after topic, until a whole round moves nothing.
  Both rank balance above stickiness.
- ``RangeAssignor`` ("range") splits each topic into contiguous ranges over its subscribers,
  ordered static members first (by instance id), then by member id; the first
  ``partitions % subscribers`` get one extra. Topics with the same subscribers and partition count
  are thereby co-partitioned. It ignores the previous assignment, as Kafka's does.
- Everything is ordered by member id, topic name and partition, never by hash order, so the same
  inputs always give the same assignment.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import islice
from typing import Protocol

__all__ = [
    "ASSIGNORS",
    "DEFAULT_ASSIGNOR",
    "Assignor",
    "GroupAssignment",
    "MemberAssignment",
    "MemberSubscription",
    "RangeAssignor",
    "TopicMetadata",
    "UniformAssignor",
    "assignor",
]

# Kafka's MAX_ITERATION_COUNT: rounds of the heterogeneous balancing phase. Members with identical
# subscriptions settle in one round; overlapping subscriptions may need more, and each round
# roughly halves what imbalance is left.
MAX_BALANCE_ROUNDS = 16


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """A subscribed topic as the assignor sees it."""

    topic_id: str  # the topic's uuid as a string
    name: str
    partitions: int  # partition count


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    """What one member subscribes to, and who it is."""

    member_id: str
    topic_ids: frozenset[str]  # resolved to ids, existing topics only
    instance_id: str | None = None
    rack_id: str | None = None


MemberAssignment = dict[str, frozenset[int]]  # topic_id -> partitions
GroupAssignment = dict[str, MemberAssignment]  # member_id -> its assignment, every member present
Current = Mapping[str, Mapping[str, frozenset[int]]]
Partition = tuple[str, int]  # (topic_id, partition)


class Assignor(Protocol):
    """A server-side assignor: the group's members and topics in, the target assignment out."""

    name: str

    def assign(
        self,
        members: Mapping[str, MemberSubscription],
        topics: Mapping[str, TopicMetadata],
        current: Current,
    ) -> GroupAssignment: ...


class UniformAssignor:
    """Balanced and sticky: counts differ by at most one, partitions stay where balance allows."""

    name = "uniform"

    def assign(
        self,
        members: Mapping[str, MemberSubscription],
        topics: Mapping[str, TopicMetadata],
        current: Current,
    ) -> GroupAssignment:
        subs = _subscriptions(members, topics)
        kept = _kept(subs, topics, current)
        if len(set(subs.values())) <= 1:
            topic_ids = next(iter(subs.values()), frozenset())
            return _result(_assign_homogeneous(topic_ids, topics, kept))
        return _result(_assign_heterogeneous(subs, topics, kept))


class RangeAssignor:
    """Contiguous ranges per topic, co-partitioned where subscriptions and counts agree."""

    name = "range"

    def assign(
        self,
        members: Mapping[str, MemberSubscription],
        topics: Mapping[str, TopicMetadata],
        current: Current,
    ) -> GroupAssignment:
        subs = _subscriptions(members, topics)
        order = sorted(members, key=lambda m: _range_rank(m, members[m].instance_id))
        owned: dict[str, list[Partition]] = {m: [] for m in members}
        for topic_id in _sorted_topics(_all_topics(subs), topics):
            subscribers = [m for m in order if topic_id in subs[m]]
            base, extra = divmod(topics[topic_id].partitions, len(subscribers))
            start = 0
            for i, member_id in enumerate(subscribers):
                end = start + base + (i < extra)
                owned[member_id].extend((topic_id, p) for p in range(start, end))
                start = end
        return _result(owned)


def _range_rank(member_id: str, instance_id: str | None) -> tuple[bool, str, str]:
    """Kafka's range order: static members first by instance id, then the rest by member id."""
    return instance_id is None, instance_id or "", member_id


ASSIGNORS: dict[str, Assignor] = {a.name: a for a in (UniformAssignor(), RangeAssignor())}
DEFAULT_ASSIGNOR = "uniform"  # first of Kafka's group.consumer.assignors default


def assignor(name: str | None) -> Assignor | None:
    """The assignor a member asked for (None: the default), or None if the broker has none such."""
    return ASSIGNORS.get(DEFAULT_ASSIGNOR if name is None else name)


def _subscriptions(
    members: Mapping[str, MemberSubscription], topics: Mapping[str, TopicMetadata]
) -> dict[str, frozenset[str]]:
    """Each member's subscribed topics that exist, by member id in sorted order."""
    return {m: frozenset(members[m].topic_ids & topics.keys()) for m in sorted(members)}


def _all_topics(subs: Mapping[str, frozenset[str]]) -> set[str]:
    """Every topic some member subscribes to."""
    return {t for topic_ids in subs.values() for t in topic_ids}


def _sorted_topics(topic_ids: Iterable[str], topics: Mapping[str, TopicMetadata]) -> list[str]:
    """Topic ids ordered by topic name (then id, should two names collide)."""
    return sorted(topic_ids, key=lambda t: (topics[t].name, t))


def _kept(
    subs: Mapping[str, frozenset[str]], topics: Mapping[str, TopicMetadata], current: Current
) -> dict[str, list[Partition]]:
    """Each member's previous partitions that are still valid, in topic and partition order."""
    claimed: set[Partition] = set()
    kept: dict[str, list[Partition]] = {}
    for member_id, subscribed in subs.items():
        previous = current.get(member_id, {})
        mine = kept[member_id] = []
        for topic_id in _sorted_topics(subscribed & previous.keys(), topics):
            for p in sorted(previous[topic_id]):
                # a corrupt previous assignment may name a partition twice: first owner keeps it
                if 0 <= p < topics[topic_id].partitions and (topic_id, p) not in claimed:
                    claimed.add((topic_id, p))
                    mine.append((topic_id, p))
    return kept


def _assign_homogeneous(
    topic_ids: frozenset[str], topics: Mapping[str, TopicMetadata], kept: dict[str, list[Partition]]
) -> dict[str, list[Partition]]:
    """Kafka's UniformHomogeneousAssignmentBuilder: per-member quotas, sticky up to the quota."""
    every = [(t, p) for t in _sorted_topics(topic_ids, topics) for p in range(topics[t].partitions)]
    base, extra = divmod(len(every), max(len(kept), 1))
    # The one-more quotas go to the members holding the most, so the fewest partitions move.
    by_holding = sorted(kept, key=lambda m: (-len(kept[m]), m))
    quota = {m: base + (i < extra) for i, m in enumerate(by_holding)}
    owned = {m: kept[m][: quota[m]] for m in kept}
    taken = {p for ps in owned.values() for p in ps}
    free = (p for p in every if p not in taken)
    for member_id, mine in owned.items():
        mine.extend(islice(free, quota[member_id] - len(mine)))
    return owned


def _assign_heterogeneous(
    subs: Mapping[str, frozenset[str]],
    topics: Mapping[str, TopicMetadata],
    kept: dict[str, list[Partition]],
) -> dict[str, list[Partition]]:
    """Kafka's UniformHeterogeneousAssignmentBuilder: keep, fill the least loaded, then balance."""
    owner = {p: m for m, ps in kept.items() for p in ps}
    load = {m: len(ps) for m, ps in kept.items()}
    subscribers = {t: [m for m in subs if t in subs[m]] for t in _all_topics(subs)}
    # Kafka's topic order: most partitions per subscriber first, then fewest subscribers.
    order = sorted(
        _sorted_topics(subscribers, topics),
        key=lambda t: (-topics[t].partitions / len(subscribers[t]), len(subscribers[t])),
    )
    for topic_id in order:
        for p in range(topics[topic_id].partitions):
            if (topic_id, p) not in owner:
                member_id = min(subscribers[topic_id], key=lambda m: (load[m], m))
                owner[topic_id, p] = member_id
                load[member_id] += 1
    shared = [t for t in order if len(subscribers[t]) > 1]  # only these can move
    for _ in range(MAX_BALANCE_ROUNDS):
        if not sum(_balance_topic(t, topics[t], subscribers[t], owner, load) for t in shared):
            break
    owned: dict[str, list[Partition]] = {m: [] for m in subs}
    for tp in sorted(owner):
        owned[owner[tp]].append(tp)
    return owned


def _balance_topic(
    topic_id: str,
    topic: TopicMetadata,
    subscribers: list[str],
    owner: dict[Partition, str],
    load: dict[str, int],
) -> int:
    """Move this topic's partitions from its most to its least loaded subscribers; count moves."""
    held: dict[str, list[int]] = {m: [] for m in subscribers}
    for p in range(topic.partitions):
        held[owner[topic_id, p]].append(p)
    moves = 0
    while True:
        # Each move narrows a gap of two or more, so the sum of squared loads falls: it ends.
        receiver = min(subscribers, key=lambda m: (load[m], m))
        donor = max((m for m in subscribers if held[m]), key=lambda m: (load[m], m), default=None)
        if donor is None or load[donor] - load[receiver] <= 1:
            return moves
        p = held[donor].pop()
        held[receiver].append(p)
        owner[topic_id, p] = receiver
        load[donor] -= 1
        load[receiver] += 1
        moves += 1


def _result(owned: Mapping[str, list[Partition]]) -> GroupAssignment:
    """Owned partition lists as the answer: every member, only topics it got partitions of."""
    result: GroupAssignment = {}
    for member_id in sorted(owned):
        by_topic: dict[str, set[int]] = {}
        for topic_id, p in owned[member_id]:
            by_topic.setdefault(topic_id, set()).add(p)
        result[member_id] = {t: frozenset(ps) for t, ps in sorted(by_topic.items())}
    return result
