"""DescribeGroups and ListGroups answers: what an admin client sees of a group.

Kafka's rules: member metadata, assignments and the protocol name are shown only while a group
is Stable (before that they are being decided); an unknown group is described as Dead, not as
an error. Pure functions of ``Group``; the coordinator adds the loading check.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from .consumer_group import ConsumerGroup
from .errors import NONE
from .group import Group, GroupState
from .share_groups import ShareGroup

__all__ = [
    "GroupDescription",
    "ListedGroup",
    "MemberDescription",
    "dead_group",
    "describe_group",
    "listed",
]


class ListedGroup(NamedTuple):
    """One row of ListGroups."""

    group_id: str
    protocol_type: str
    state: str
    group_type: str  # ListGroups v5 (KIP-848): classic, consumer, share


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """DescribeGroups' answer for one group (metadata and assignments only when Stable)."""

    group_id: str
    error_code: int
    state: str
    protocol_type: str
    protocol_data: str
    members: tuple[MemberDescription, ...]


def dead_group(group_id: str, error_code: int = NONE) -> GroupDescription:
    return GroupDescription(group_id, error_code, GroupState.DEAD.value, "", "", ())


def describe_group(group: Group) -> GroupDescription:
    stable = group.is_(GroupState.STABLE)
    protocol = group.protocol_name if stable else None
    members = tuple(
        MemberDescription(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.metadata(protocol) if protocol else b"",
            m.assignment if stable else b"",
        )
        for m in group.members.values()
    )
    return GroupDescription(
        group.group_id, NONE, group.state.value, group.protocol_type or "", protocol or "", members
    )


def listed(
    groups: Iterable[Group | ConsumerGroup | ShareGroup], states_filter: Iterable[str] | None
) -> list[ListedGroup]:
    """ListGroups' rows; the state filter is case-blind."""
    wanted = {state.lower() for state in states_filter} if states_filter else None
    rows = []
    for group in groups:
        protocol_type = (group.PROTOCOL_TYPE if isinstance(group, ConsumerGroup | ShareGroup)
                         else group.protocol_type or "")
        if wanted is None or group.state.value.lower() in wanted:
            rows.append(ListedGroup(group.group_id, protocol_type, group.state.value,
                                    group.GROUP_TYPE))
    return rows
