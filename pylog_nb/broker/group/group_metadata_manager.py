"""Every group of one ``__consumer_offsets`` partition, whatever its type (Kafka's
GroupMetadataManager), sans-IO.

Theory of operation:

- The manager owns the groups by id. Each group type has its own handler for the requests of
  its protocol: ``classic`` (``classic_groups.py``, JoinGroup/SyncGroup/Heartbeat/LeaveGroup,
  with ``classic_rebalance.py``). KIP-848 consumer groups (ConsumerGroupHeartbeat) and KIP-932
  share groups (ShareGroupHeartbeat) come next, each as one more handler beside ``classic`` and
  one more ``Group`` type in ``groups``; what every type shares stays here.
- Shared here: the lookups (``group``, ``get_or_create_classic_group`` for a simple commit,
  as Kafka's OffsetMetadataManager asks it), DescribeGroups and ListGroups, the timers
  (``tick`` and ``expire`` hand each group to its type's handler), and the deletion of a group:
  DeleteGroups (``validate_delete_group``, ``delete_group``) and expiry once its offsets are
  gone (``should_expire``, ``maybe_delete_group``). The offsets themselves are the
  ``OffsetMetadataManager``'s; ``GroupCoordinator`` calls both in Kafka's order.
- A completed append that is not a commit comes back here (``on_appended``) and goes to the
  handler that made it.
- The loading gate (COORDINATOR_LOAD_IN_PROGRESS) is the ``GroupCoordinator``'s: nothing here
  runs while the partition loads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .actions import Action
from .appends import PendingAppend, PendingAppends, Untracked
from .classic_groups import ClassicGroups, StaticRejoinStore
from .classic_rebalance import SyncStore, transition
from .describe import GroupDescription, dead_group, describe_group, listed
from .errors import GROUP_ID_NOT_FOUND, INVALID_GROUP_ID, NON_EMPTY_GROUP, NONE
from .group import Group, GroupState
from .storage import Record, group_tombstone

__all__ = ["GroupMetadataManager"]

S = GroupState


class GroupMetadataManager:
    """The groups of one ``__consumer_offsets`` partition and a handler per group type."""

    def __init__(
        self,
        appends: PendingAppends,
        *,
        session_timeout_ms_min: int,
        session_timeout_ms_max: int,
        initial_rebalance_delay_ms: int,
        group_members_max: int,
        seed: int,
    ) -> None:
        self._appends = appends
        self._groups: dict[str, Group] = {}
        self.classic = ClassicGroups(
            self._groups,
            appends,
            session_timeout_ms_min=session_timeout_ms_min,
            session_timeout_ms_max=session_timeout_ms_max,
            initial_rebalance_delay_ms=initial_rebalance_delay_ms,
            group_members_max=group_members_max,
            seed=seed,
        )

    # -- lookups ---------------------------------------------------------------------------------

    @property
    def groups(self) -> Mapping[str, Group]:
        return self._groups

    def group(self, group_id: str) -> Group | None:
        return self._groups.get(group_id)

    def get_or_create_classic_group(self, group_id: str, now_ms: int) -> Group:
        """The group, created Empty if unknown (a commit outside group management does that)."""
        group = self._groups.get(group_id)
        if group is None:
            group = self._groups[group_id] = Group(group_id, state_timestamp_ms=now_ms)
        return group

    def replace(self, groups: Mapping[str, Group]) -> None:
        """Take ``groups`` as the whole state (a load); the handlers keep the same map."""
        self._groups.clear()
        self._groups.update(groups)

    # -- timers ----------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> list[Action]:
        """Every group's deadlines due by ``now_ms``."""
        actions: list[Action] = []
        for group in list(self._groups.values()):
            self.classic.rebalance.expire(group, now_ms, actions)
        return actions

    def expire(self, group_id: str, now_ms: int) -> list[Action]:
        """One group's deadlines due by ``now_ms`` (``GroupCoordinator.expire_due``)."""
        actions: list[Action] = []
        group = self._groups.get(group_id)
        if group is not None:
            self.classic.rebalance.expire(group, now_ms, actions)
        return actions

    # -- DescribeGroups, ListGroups --------------------------------------------------------------

    def describe(self, group_ids: Iterable[str]) -> list[GroupDescription]:
        """DescribeGroups; an unknown group is reported Dead with no error, as Kafka does."""
        answer = []
        for group_id in group_ids:
            group = self._groups.get(group_id)
            answer.append(dead_group(group_id) if group is None else describe_group(group))
        return answer

    def list_groups(self, states_filter: Iterable[str] | None) -> list[tuple[str, str, str]]:
        """ListGroups' (group_id, protocol_type, state) rows; the filter is case-blind."""
        return listed(self._groups.values(), states_filter)

    # -- deleting groups -------------------------------------------------------------------------

    def validate_delete_group(self, group_id: str) -> int:
        """DeleteGroups' error for ``group_id``: only a known group without members goes."""
        group = self._groups.get(group_id)
        if not group_id:
            return INVALID_GROUP_ID
        if group is None or group.is_(S.DEAD):
            return GROUP_ID_NOT_FOUND
        if not group.is_(S.EMPTY) or group.members:
            return NON_EMPTY_GROUP
        return NONE

    def delete_group(
        self, group_id: str, offset_tombstones: list[Record], now_ms: int, actions: list[Action]
    ) -> None:
        """Delete a group ``validate_delete_group`` allowed: Dead, then its tombstone and
        ``offset_tombstones`` (the ``OffsetMetadataManager``'s) in one batch, then forgotten."""
        group = self._groups[group_id]
        assert self.validate_delete_group(group_id) == NONE, group
        transition(group, S.DEAD, now_ms, "deleted", actions)
        records = [group_tombstone(group_id), *offset_tombstones]
        self._appends.append(Untracked(group_id), records, now_ms, actions)
        del self._groups[group_id]

    @staticmethod
    def should_expire(group: Group) -> bool:
        """May the group's offsets expire (Kafka's Group.shouldExpire): Empty, no one waiting."""
        return group.is_(S.EMPTY) and not group.members and not group.pending_members

    def maybe_delete_group(self, group: Group, now_ms: int, actions: list[Action]) -> list[Record]:
        """Delete an expiring group left without offsets; the records to append (its tombstone).

        Kafka's GroupMetadata.hasOffsets: undecided transactional offsets keep the group.
        """
        assert self.should_expire(group), group
        if group.offsets or group.txn_offsets:
            return []
        transition(group, S.DEAD, now_ms, "offsets expired", actions)
        del self._groups[group.group_id]
        return [group_tombstone(group.group_id)]

    # -- the log -----------------------------------------------------------------------------

    def on_appended(
        self, pending: PendingAppend, error_code: int, now_ms: int, actions: list[Action]
    ) -> None:
        """A group record's append completed: give it to the handler that made it."""
        if isinstance(pending, SyncStore):
            group = self._groups.get(pending.group_id)
            if group is not None:
                self.classic.rebalance.on_sync_stored(group, pending, error_code, now_ms, actions)
        elif isinstance(pending, StaticRejoinStore):
            self.classic.on_static_rejoin_stored(pending, error_code, now_ms, actions)
        else:
            assert isinstance(pending, Untracked), pending
