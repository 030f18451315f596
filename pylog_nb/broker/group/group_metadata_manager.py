"""Every group of one ``__consumer_offsets`` partition, whatever its type (Kafka's
GroupMetadataManager), sans-IO.

Theory of operation:

- The manager owns the groups by id, one map per type (a group id is in at most one). Each
  type has its own handler for the requests of its protocol: ``classic``
  (``classic_groups.py``, JoinGroup/SyncGroup/Heartbeat/LeaveGroup, with
  ``classic_rebalance.py``), ``consumer`` (``consumer_groups.py``, KIP-848's
  ConsumerGroupHeartbeat) and ``classic_members`` (``classic_members.py``, the classic
  protocol's requests to a consumer group). KIP-848's online upgrade and downgrade move a group
  between the classic and consumer maps (``group_migration.py``). What every type shares stays
  here.
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
from .classic_members import ClassicJoinStore, ClassicMembers
from .classic_rebalance import SyncStore, transition
from .consumer_group import ConsumerGroup, ConsumerGroupState
from .consumer_groups import ConsumerGroups, GroupTimeouts, HeartbeatStore
from .consumer_storage import group_tombstones
from .describe import GroupDescription, ListedGroup, dead_group, describe_group, listed
from .errors import GROUP_ID_NOT_FOUND, INVALID_GROUP_ID, NON_EMPTY_GROUP, NONE
from .group import Group, GroupState
from .group_migration import ConsumerGroupMigrationPolicy, ConversionStore, GroupMigration
from .share_groups import ShareGroup, ShareGroups
from .storage import Record, group_tombstone

__all__ = ["AnyGroup", "GroupMetadataManager"]

S = GroupState
AnyGroup = Group | ConsumerGroup


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
        consumer_session_timeout_ms: int = 45_000,
        consumer_heartbeat_interval_ms: int = 5_000,
        consumer_timeouts: GroupTimeouts | None = None,
        share_timeouts: GroupTimeouts | None = None,
        migration_policy: ConsumerGroupMigrationPolicy = ConsumerGroupMigrationPolicy.BIDIRECTIONAL,
    ) -> None:
        self._appends = appends
        self._groups: dict[str, Group] = {}
        self._consumer_groups: dict[str, ConsumerGroup] = {}
        self._share_groups: dict[str, ShareGroup] = {}
        self.classic = ClassicGroups(
            self._groups,
            appends,
            session_timeout_ms_min=session_timeout_ms_min,
            session_timeout_ms_max=session_timeout_ms_max,
            initial_rebalance_delay_ms=initial_rebalance_delay_ms,
            group_members_max=group_members_max,
            seed=seed,
        )
        self.consumer = ConsumerGroups(
            self._consumer_groups,
            self._groups,
            appends,
            session_timeout_ms=consumer_session_timeout_ms,
            heartbeat_interval_ms=consumer_heartbeat_interval_ms,
            group_members_max=group_members_max,
            seed=seed + 1,
            timeouts=consumer_timeouts,
            migration=GroupMigration(self._groups, self._consumer_groups, self.classic.rebalance,
                                     group_members_max=group_members_max,
                                     policy=migration_policy),
        )
        self.classic_members = ClassicMembers(self.consumer, appends, seed=seed + 2)
        self.share = ShareGroups(
            self._share_groups,
            appends,
            session_timeout_ms=consumer_session_timeout_ms,
            heartbeat_interval_ms=consumer_heartbeat_interval_ms,
            group_members_max=group_members_max,
            timeouts=share_timeouts,
        )

    # -- lookups ---------------------------------------------------------------------------------

    @property
    def groups(self) -> Mapping[str, Group]:
        """The classic groups."""
        return self._groups

    @property
    def consumer_groups(self) -> Mapping[str, ConsumerGroup]:
        """The KIP-848 consumer groups."""
        return self._consumer_groups

    @property
    def share_groups(self) -> Mapping[str, ShareGroup]:
        """The KIP-932 share groups."""
        return self._share_groups

    def group(self, group_id: str) -> AnyGroup | None:
        """The classic or consumer group (share groups keep no offsets here)."""
        return self._consumer_groups.get(group_id) or self._groups.get(group_id)

    def group_type(self, group_id: str) -> str | None:
        """"classic", "consumer", "share", or None for an unknown group."""
        for groups in (self._groups, self._consumer_groups, self._share_groups):
            if group_id in groups:
                return groups[group_id].GROUP_TYPE
        return None

    def all_groups(self) -> list[AnyGroup]:
        return [*self._groups.values(), *self._consumer_groups.values()]

    def get_or_create_classic_group(self, group_id: str, now_ms: int) -> AnyGroup:
        """The group, created Empty and classic if unknown (a commit outside group
        management does that)."""
        group = self.group(group_id)
        if group is None:
            group = self._groups[group_id] = Group(group_id, state_timestamp_ms=now_ms)
        return group

    def convert_empty_consumer_group(self, group_id: str, now_ms: int, actions: list[Action]
                                     ) -> None:
        """A classic JoinGroup to an empty consumer group: it becomes an empty classic group
        with the same offsets (Kafka's maybeDeleteEmptyConsumerGroup)."""
        consumer_group = self._consumer_groups.pop(group_id)
        assert not consumer_group.members, group_id
        consumer_group.state = ConsumerGroupState.DEAD
        group = self._groups[group_id] = Group(group_id, state_timestamp_ms=now_ms)
        group.take_offsets(consumer_group)
        self._appends.append(ConversionStore(group_id), group_tombstones(group_id), now_ms,
                             actions)

    def replace(self, groups: Mapping[str, Group],
                consumer_groups: Mapping[str, ConsumerGroup],
                share_groups: Mapping[str, ShareGroup] | None = None) -> None:
        """Take the groups as the whole state (a load); the handlers keep the same maps.

        A group id has one type: a share group's records under an id the log also has as
        another type cannot come from one coordinator (Kafka refuses the heartbeat), so
        such a share group is dropped."""
        assert not set(groups) & set(consumer_groups), set(groups) & set(consumer_groups)
        self._groups.clear()
        self._groups.update(groups)
        self._consumer_groups.clear()
        self._consumer_groups.update(consumer_groups)
        self._share_groups.clear()
        share_groups = share_groups or {}
        self._share_groups.update({group_id: group for group_id, group in share_groups.items()
                                   if group_id not in groups and group_id not in consumer_groups})

    # -- timers ----------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> list[Action]:
        """Every group's deadlines due by ``now_ms``."""
        actions: list[Action] = []
        for group in list(self._groups.values()):
            self.classic.rebalance.expire(group, now_ms, actions)
        for consumer_group in list(self._consumer_groups.values()):
            self.consumer.expire(consumer_group, now_ms, actions)
        for share_group in list(self._share_groups.values()):
            self.share.expire(share_group, now_ms, actions)
        return actions

    def expire(self, group_id: str, now_ms: int) -> list[Action]:
        """One group's deadlines due by ``now_ms`` (``GroupCoordinator.expire_due``)."""
        actions: list[Action] = []
        group = self.group(group_id)
        share_group = self._share_groups.get(group_id)
        if share_group is not None:
            self.share.expire(share_group, now_ms, actions)
        elif isinstance(group, ConsumerGroup):
            self.consumer.expire(group, now_ms, actions)
        elif group is not None:
            self.classic.rebalance.expire(group, now_ms, actions)
        return actions

    # -- DescribeGroups, ListGroups --------------------------------------------------------------

    def describe(self, group_ids: Iterable[str]) -> list[GroupDescription]:
        """DescribeGroups; an unknown group is reported Dead with no error, as Kafka does, and
        a consumer group GROUP_ID_NOT_FOUND (KIP-1043: not a classic group)."""
        answer = []
        for group_id in group_ids:
            group = self._groups.get(group_id)
            if group_id in self._consumer_groups or group_id in self._share_groups:
                answer.append(dead_group(group_id, GROUP_ID_NOT_FOUND))
            else:
                answer.append(dead_group(group_id) if group is None else describe_group(group))
        return answer

    def list_groups(self, states_filter: Iterable[str] | None) -> list[ListedGroup]:
        """ListGroups' rows, every type; the state filter is case-blind."""
        return listed([*self.all_groups(), *self._share_groups.values()], states_filter)

    # -- deleting groups -------------------------------------------------------------------------

    def validate_delete_group(self, group_id: str) -> int:
        """DeleteGroups' error for ``group_id``: only a known group without members goes."""
        if not group_id:
            return INVALID_GROUP_ID
        consumer_group = self._consumer_groups.get(group_id) or self._share_groups.get(group_id)
        if consumer_group is not None:
            return NON_EMPTY_GROUP if consumer_group.members else NONE
        group = self._groups.get(group_id)
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
        assert self.validate_delete_group(group_id) == NONE, group_id
        share_group = self._share_groups.get(group_id)
        if share_group is not None:
            self.share.delete(share_group, now_ms, actions)
            return
        if group_id in self._consumer_groups:
            consumer_group = self._consumer_groups[group_id]
            consumer_group.state = ConsumerGroupState.DEAD
            records = [*offset_tombstones, *self.consumer.delete(consumer_group)]
            self._appends.append(Untracked(group_id), records, now_ms, actions)
            return
        group = self._groups[group_id]
        transition(group, S.DEAD, now_ms, "deleted", actions)
        records = [group_tombstone(group_id), *offset_tombstones]
        self._appends.append(Untracked(group_id), records, now_ms, actions)
        del self._groups[group_id]

    @staticmethod
    def should_expire(group: AnyGroup) -> bool:
        """May the group's offsets expire (Kafka's Group.shouldExpire): Empty, no one waiting."""
        if isinstance(group, ConsumerGroup):
            return not group.members
        return group.is_(S.EMPTY) and not group.members and not group.pending_members

    def maybe_delete_group(self, group: AnyGroup, now_ms: int, actions: list[Action]
                           ) -> list[Record]:
        """Delete an expiring group left without offsets; the records to append (its tombstone).

        Kafka's GroupMetadata.hasOffsets: undecided transactional offsets keep the group.
        """
        assert self.should_expire(group), group
        if group.offsets or group.txn_offsets:
            return []
        if isinstance(group, ConsumerGroup):
            group.state = ConsumerGroupState.DEAD
            return self.consumer.delete(group)
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
        elif isinstance(pending, HeartbeatStore):
            self.consumer.on_stored(pending, error_code, now_ms, actions)
        elif isinstance(pending, ClassicJoinStore):
            self.classic_members.on_join_stored(pending, error_code, now_ms, actions)
        else:
            assert isinstance(pending, Untracked | ConversionStore), pending
