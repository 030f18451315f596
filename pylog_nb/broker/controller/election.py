"""Leader election and ISR changes as pure functions: image in, PartitionChange records out.

Theory of operation (Kafka's PartitionChangeBuilder): every change to a partition starts from a
*target ISR* and a rule for the leader, and ``partition_change`` works out the rest:

- the current leader stays if it is still live and in the target ISR (unless a preferred election
  asks for the first replica, which must itself be live and in the ISR);
- otherwise the first live ISR member in replica order leads (a *clean* election);
- otherwise, if the topic sets ``unclean.leader.election.enable=true``, the first live replica
  outside the ISR leads and the ISR becomes just that replica (data loss, knowingly);
- otherwise the partition goes offline: leader NO_LEADER, ISR unchanged.

The leader epoch grows by one exactly when the leader changes (including to and from
NO_LEADER); the partition epoch grows by one on every change; no change, no record.

A fenced broker leaves every ISR, except where it is the last member: the ISR then keeps it
("ISR of one"), because it holds every acknowledged record and is the only safe leader once it
comes back.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator

from pylog_nb.broker.metadata import topic_config

from ..metadata.image import ClusterImage, PartitionImage, TopicImage
from ..metadata.records import NO_LEADER, PartitionChange

__all__ = [
    "UNCLEAN_KEY",
    "changes_for_fence",
    "changes_for_offline",
    "changes_for_preferred",
    "partition_change",
    "unclean_enabled",
]

UNCLEAN_KEY = "unclean.leader.election.enable"


def unclean_enabled(topic: TopicImage) -> bool:
    definition = topic_config.DEFINITIONS[UNCLEAN_KEY]
    return bool(definition.parse(topic.configs.get(UNCLEAN_KEY, definition.default)))


def _choose_leader(
    p: PartitionImage, isr: tuple[int, ...], is_live: Callable[[int], bool], preferred: bool
) -> int:
    if preferred and p.preferred_leader in isr and is_live(p.preferred_leader):
        return p.preferred_leader
    if p.leader in isr and is_live(p.leader):
        return p.leader
    return next((r for r in p.replicas if r in isr and is_live(r)), NO_LEADER)


def partition_change(
    topic: TopicImage,
    index: int,
    target_isr: Collection[int],
    is_live: Callable[[int], bool],
    *,
    preferred: bool = False,
) -> PartitionChange | None:
    """The record that moves partition ``index`` to ``target_isr`` and a fitting leader."""
    p = topic.partitions[index]
    isr = tuple(r for r in p.replicas if r in target_isr)
    assert isr and len(isr) == len(set(target_isr)), (target_isr, p.replicas)
    leader = _choose_leader(p, isr, is_live, preferred)
    if leader == NO_LEADER and unclean_enabled(topic):
        leader = next((r for r in p.replicas if is_live(r)), NO_LEADER)
        isr = isr if leader == NO_LEADER else (leader,)
    if leader == p.leader and isr == p.isr:
        return None
    leader_changed = leader != p.leader
    change = PartitionChange(
        topic_id=topic.topic_id,
        partition=index,
        leader=leader if leader_changed else None,
        isr=isr if isr != p.isr else None,
        leader_epoch=p.leader_epoch + (1 if leader_changed else 0),
        partition_epoch=p.partition_epoch + 1,
    )
    assert change.leader is None or change.leader == NO_LEADER or is_live(change.leader)
    return change


def _partitions(image: ClusterImage, topics: Collection[str] | None) -> Iterator:
    for topic, index, p in image.partitions_in_order():
        if topics is None or topic.name in topics:
            yield topic, index, p


def changes_for_fence(image: ClusterImage, broker_id: int) -> list[PartitionChange]:
    """Move leadership off ``broker_id`` and drop it from ISRs (keeping an ISR of one)."""
    assert image.is_live(broker_id), f"broker {broker_id} is already fenced"

    def is_live(b: int) -> bool:
        return b != broker_id and image.is_live(b)

    changes = []
    for topic, index, p in _partitions(image, None):
        if broker_id in p.isr:
            target = tuple(r for r in p.isr if r != broker_id) or p.isr
            change = partition_change(topic, index, target, is_live)
            if change is not None:
                changes.append(change)
    return changes


def changes_for_offline(
    image: ClusterImage, *, broker_id: int | None = None, topics: Collection[str] | None = None
) -> list[PartitionChange]:
    """Elect leaders for leaderless partitions (those hosted on ``broker_id``, if given)."""
    changes = []
    for topic, index, p in _partitions(image, topics):
        if p.leader == NO_LEADER and (broker_id is None or broker_id in p.replicas):
            change = partition_change(topic, index, p.isr, image.is_live)
            if change is not None:
                changes.append(change)
    return changes


def changes_for_preferred(
    image: ClusterImage, partitions: Collection[tuple[str, int]] | None = None
) -> list[PartitionChange]:
    """Give leadership back to each partition's first replica where it is live and in the ISR."""
    changes = []
    for topic, index, p in _partitions(image, None):
        if partitions is not None and (topic.name, index) not in partitions:
            continue
        if p.leader != p.preferred_leader:
            change = partition_change(topic, index, p.isr, image.is_live, preferred=True)
            if change is not None:
                changes.append(change)
    return changes
