"""The group coordinator of one ``__consumer_offsets`` partition, sans-IO: a thin facade.

Theory of operation (Kafka's GroupCoordinatorShard over its CoordinatorRuntime, and the
classic GroupCoordinator.scala before them; kfake's groups.go):

- The shell feeds this object the group requests of every group whose ``partition_for`` is
  ``partition`` (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, TxnOffsetCommit,
  OffsetFetch, OffsetDelete, DescribeGroups, ListGroups, DeleteGroups), clock ticks
  (``tick``, ``expire_offsets``), the outcome of each append it asked for (``on_appended``) and
  the transaction markers written in the partition (``complete_txn``), and carries out the
  ``actions`` each call returns (``actions.py``). Time only enters as ``now_ms`` arguments.
- Behind it, Kafka's seams: ``GroupMetadataManager`` (``group_metadata_manager.py``) holds every
  group with a handler per group type (classic: ``classic_groups.py``, ``classic_rebalance.py``);
  ``OffsetMetadataManager`` (``offset_metadata_manager.py``) owns committed offsets;
  ``PendingAppends`` (``appends.py``) numbers the appends and keeps what to do on each outcome.
  Where a request touches both (DeleteGroups, offset expiry), this facade calls them in Kafka's
  order: the offsets' tombstones first, then the group's.
- Loading is this facade's alone, as it is Kafka's runtime's: from ``begin_load`` (or
  ``loading=True``) until ``load``, requests are answered COORDINATOR_LOAD_IN_PROGRESS, timers
  do nothing, and transaction markers wait for the load to finish. ``load`` rebuilds every group
  and offset from the partition's batches (``storage.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..types import TopicPartition
from . import offsets as offset_rules
from .actions import Action, HeartbeatAnswer, JoinAnswer, RevertToLog, SyncAnswer
from .appends import PendingAppend, PendingAppends, Untracked
from .assignors import TopicMetadata
from .classic_groups import PROTOCOLS_PER_MEMBER_MAX, LeaveResult, Protocols
from .classic_members import ClassicJoin, ClassicJoinStore
from .classic_rebalance import NEW_MEMBER_JOIN_TIMEOUT_MS
from .consumer_group import ConsumerGroup
from .consumer_groups import GroupTimeouts, HeartbeatRequest, HeartbeatStore
from .describe import GroupDescription, ListedGroup, dead_group
from .errors import (
    COORDINATOR_LOAD_IN_PROGRESS,
    GROUP_ID_NOT_FOUND,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_SESSION_TIMEOUT,
    NONE,
    UNKNOWN_MEMBER_ID,
)
from .group import Group
from .group_metadata_manager import AnyGroup, GroupMetadataManager
from .group_migration import ConsumerGroupMigrationPolicy, ConversionStore
from .offset_metadata_manager import (
    CommitStore,
    CommitTriple,
    OffsetMetadataManager,
    TxnCommitStore,
    commit_answer,
)
from .share_groups import ShareGroup, ShareHeartbeatRequest
from .storage import OffsetsBatch, rebuild_groups

__all__ = [
    "NEW_MEMBER_JOIN_TIMEOUT_MS",
    "PROTOCOLS_PER_MEMBER_MAX",
    "GroupCoordinator",
    "LeaveResult",
]

LOADING = COORDINATOR_LOAD_IN_PROGRESS


class GroupCoordinator:
    """All groups whose ``partition_for`` is ``partition``. Construct on becoming its leader."""

    def __init__(
        self,
        partition: int = 0,
        *,
        session_timeout_ms_min: int = 6_000,  # group.min.session.timeout.ms
        session_timeout_ms_max: int = 1_800_000,  # group.max.session.timeout.ms
        initial_rebalance_delay_ms: int = 3_000,  # group.initial.rebalance.delay.ms
        group_members_max: int = 1_000,  # group.max.size (Kafka: unbounded)
        offset_metadata_bytes_max: int = offset_rules.OFFSET_METADATA_BYTES_MAX,
        consumer_session_timeout_ms: int = 45_000,  # group.consumer.session.timeout.ms
        consumer_heartbeat_interval_ms: int = 5_000,  # group.consumer.heartbeat.interval.ms
        loading: bool = False,
        seed: int = 0,
        consumer_timeouts: GroupTimeouts | None = None,  # a group's overrides of the two
        share_timeouts: GroupTimeouts | None = None,
        # group.consumer.migration.policy: KIP-848's online upgrade and downgrade
        consumer_migration_policy: ConsumerGroupMigrationPolicy = (
            ConsumerGroupMigrationPolicy.BIDIRECTIONAL),
    ) -> None:
        self.partition = partition
        self.session_timeout_ms_min = session_timeout_ms_min
        self.session_timeout_ms_max = session_timeout_ms_max
        self.loading = loading
        self._appends = PendingAppends(partition)
        self.consumer_session_timeout_ms = consumer_session_timeout_ms
        self._groups = GroupMetadataManager(
            self._appends,
            session_timeout_ms_min=session_timeout_ms_min,
            session_timeout_ms_max=session_timeout_ms_max,
            initial_rebalance_delay_ms=initial_rebalance_delay_ms,
            group_members_max=group_members_max,
            seed=seed,
            consumer_session_timeout_ms=consumer_session_timeout_ms,
            consumer_heartbeat_interval_ms=consumer_heartbeat_interval_ms,
            consumer_timeouts=consumer_timeouts,
            share_timeouts=share_timeouts,
            migration_policy=consumer_migration_policy,
        )
        self._offsets = OffsetMetadataManager(
            self._groups, self._appends, offset_metadata_bytes_max=offset_metadata_bytes_max
        )
        # Markers reported while loading: the load reads the log only up to where it started.
        self._completed_while_loading: list[tuple[int, bool]] = []

    # -- introspection ---------------------------------------------------------------------------

    def group(self, group_id: str) -> AnyGroup | None:
        """The group of any type."""
        return self._groups.group(group_id)

    @property
    def groups(self) -> Mapping[str, Group]:
        """The classic groups."""
        return self._groups.groups

    @property
    def consumer_groups(self) -> Mapping[str, ConsumerGroup]:
        """The KIP-848 consumer groups."""
        return self._groups.consumer_groups

    # -- the consumer protocol (KIP-848) ---------------------------------------------------------

    def consumer_group_heartbeat(
        self,
        request: HeartbeatRequest,
        topics: Mapping[str, TopicMetadata],
        now_ms: int,
        request_id: int,
    ) -> list[Action]:
        """ConsumerGroupHeartbeat: answered by a ``HeartbeatAnswer`` carrying ``request_id``,
        at once or once its records are in the log. ``topics``: the cluster's, by name."""
        refused = self._refuse_heartbeat(request.group_id, request.member_id,
                                         request.member_epoch, "consumer", now_ms, request_id)
        if refused is not None:
            return [refused]
        return self._groups.consumer.heartbeat(request, topics, now_ms, request_id)

    def share_group_heartbeat(
        self,
        request: ShareHeartbeatRequest,
        topics: Mapping[str, TopicMetadata],
        now_ms: int,
        request_id: int,
    ) -> list[Action]:
        """ShareGroupHeartbeat (KIP-932): answered by a ``HeartbeatAnswer`` carrying
        ``request_id``, once its records are in the log (as ConsumerGroupHeartbeat)."""
        refused = self._refuse_heartbeat(request.group_id, request.member_id,
                                         request.member_epoch, "share", now_ms, request_id)
        if refused is not None:
            return [refused]
        return self._groups.share.heartbeat(request, topics, now_ms, request_id)

    def _refuse_heartbeat(self, group_id: str, member_id: str, member_epoch: int,
                          group_type: str, now_ms: int, request_id: int
                          ) -> HeartbeatAnswer | None:
        """A heartbeat's answer while loading, or for a group of another type (Kafka:
        GROUP_ID_NOT_FOUND); None when the handler of ``group_type`` should take it. An empty
        classic group is left to the consumer handler, which upgrades it."""
        error, message = NONE, None
        found = self._groups.group_type(group_id)
        if self.loading:
            error = LOADING
        elif found not in (None, group_type) and not (
                found == "classic" and group_type == "consumer"):
            error, message = GROUP_ID_NOT_FOUND, f"Group {group_id} is not a {group_type} group."
        if error == NONE:
            return None
        return HeartbeatAnswer(group_id=group_id, now_ms=now_ms, request_id=request_id,
                               error_code=error, error_message=message, member_id=member_id,
                               member_epoch=member_epoch)

    @property
    def share_groups(self) -> Mapping[str, ShareGroup]:
        """The KIP-932 share groups."""
        return self._groups.share_groups

    # -- the classic protocol --------------------------------------------------------------------

    def join(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str,
        protocols: Protocols,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        client_id: str,
        now_ms: int,
        join_id: int,
        *,
        client_host: str = "",
        require_known_member_id: bool = False,
        topics: Mapping[str, TopicMetadata] | None = None,
    ) -> list[Action]:
        """JoinGroup: the answer to ``join_id`` comes now or later as a ``JoinAnswer`` action.

        ``require_known_member_id``: JoinGroup v4+ (KIP-394). ``rebalance_timeout_ms`` is -1
        for JoinGroup v0 (then the session timeout is used, as Kafka does). ``topics``: the
        cluster's, by name, for a classic member joining a consumer group (None: the topics
        the group last assigned from).
        """
        group_type = self._groups.group_type(group_id)
        if self.loading or group_type == "share":
            error = LOADING if self.loading else INCONSISTENT_GROUP_PROTOCOL
            return [JoinAnswer(group_id=group_id, now_ms=now_ms, join_id=join_id,
                               error_code=error, member_id=member_id)]
        actions: list[Action] = []
        consumer_group = self._groups.consumer_groups.get(group_id)
        if consumer_group is not None and consumer_group.members:
            request = ClassicJoin(
                group_id=group_id, member_id=member_id, instance_id=group_instance_id,
                protocol_type=protocol_type, protocols=tuple(protocols),
                session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=(session_timeout_ms if rebalance_timeout_ms < 0
                                      else rebalance_timeout_ms),
                client_id=client_id, client_host=client_host,
                require_known_member_id=require_known_member_id)
            return self._join_consumer_group(consumer_group, request, topics, now_ms, join_id)
        if consumer_group is not None:  # empty: it becomes a classic group, offsets kept
            self._groups.convert_empty_consumer_group(group_id, now_ms, actions)
        return actions + self._groups.classic.join(
            group_id, member_id, group_instance_id, protocol_type, protocols, session_timeout_ms,
            rebalance_timeout_ms, client_id, now_ms, join_id, client_host=client_host,
            require_known_member_id=require_known_member_id,
        )

    def _join_consumer_group(self, group: ConsumerGroup, request: ClassicJoin,
                             topics: Mapping[str, TopicMetadata] | None, now_ms: int,
                             join_id: int) -> list[Action]:
        if not (self.session_timeout_ms_min <= request.session_timeout_ms
                <= self.session_timeout_ms_max):
            return [JoinAnswer(group_id=group.group_id, now_ms=now_ms, join_id=join_id,
                               error_code=INVALID_SESSION_TIMEOUT, member_id=request.member_id)]
        if topics is None:
            topics = {name: TopicMetadata(topic_id=topic_id, name=name, partitions=partitions)
                      for name, (topic_id, partitions) in (group.subscribed_topics or {}).items()}
        return self._groups.classic_members.join(group, request, topics, now_ms, join_id)

    def sync(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        assignments: Mapping[str, bytes],
        now_ms: int,
        sync_id: int,
        *,
        group_instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> list[Action]:
        """SyncGroup: the answer to ``sync_id`` comes as a ``SyncAnswer`` (now or later).

        ``assignments`` (member id -> bytes) only matter from the leader; members it leaves out
        get empty assignments. ``protocol_type`` / ``protocol_name`` are checked when given (v5).
        """
        if self.loading or self._groups.group_type(group_id) == "share":
            error = LOADING if self.loading else UNKNOWN_MEMBER_ID
            return [SyncAnswer(group_id=group_id, now_ms=now_ms, sync_id=sync_id,
                               error_code=error)]
        consumer_group = self._groups.consumer_groups.get(group_id)
        if consumer_group is not None:
            return self._groups.classic_members.sync(
                consumer_group, member_id, group_instance_id, generation, protocol_type,
                protocol_name, now_ms, sync_id)
        return self._groups.classic.sync(
            group_id, member_id, generation, assignments, now_ms, sync_id,
            group_instance_id=group_instance_id, protocol_type=protocol_type,
            protocol_name=protocol_name,
        )

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        now_ms: int,
        *,
        group_instance_id: str | None = None,
    ) -> int:
        """Heartbeat: 0, REBALANCE_IN_PROGRESS (rejoin), ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID..."""
        if self.loading:
            return LOADING
        if self._groups.group_type(group_id) == "share":
            return UNKNOWN_MEMBER_ID
        consumer_group = self._groups.consumer_groups.get(group_id)
        if consumer_group is not None:
            return self._groups.classic_members.heartbeat(
                consumer_group, member_id, group_instance_id, generation, now_ms)
        return self._groups.classic.heartbeat(
            group_id, member_id, generation, now_ms, group_instance_id=group_instance_id
        )

    def leave(
        self, group_id: str, members: Iterable[tuple[str, str | None]], now_ms: int
    ) -> LeaveResult:
        """LeaveGroup (v3+ batch form): each (member_id, group_instance_id) leaves.

        A static member may leave by instance id alone (member_id ""). Errors are per member.
        """
        if self.loading:
            return LeaveResult(LOADING, (), [])
        if self._groups.group_type(group_id) == "share":
            return LeaveResult(UNKNOWN_MEMBER_ID, (), [])
        consumer_group = self._groups.consumer_groups.get(group_id)
        if consumer_group is not None:
            return self._groups.classic_members.leave(consumer_group, members, now_ms)
        return self._groups.classic.leave(group_id, members, now_ms)

    def tick(self, now_ms: int) -> list[Action]:
        """Expire sessions, pending members, rebalance and sync timeouts due by ``now_ms``."""
        return [] if self.loading else self._groups.tick(now_ms)

    def expire_due(self, group_id: str, now_ms: int) -> list[Action]:
        """What ``tick(now_ms)`` does to one group, for a request about it: a deadline at or
        before ``now_ms`` (a session, a pending member, a join or sync timeout) has passed
        exactly then, however late the periodic tick comes (Kafka's exact heartbeat expiry)."""
        return [] if self.loading else self._groups.expire(group_id, now_ms)

    # -- offsets ---------------------------------------------------------------------------------

    def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        offsets: Mapping[TopicPartition, CommitTriple],
        now_ms: int,
        commit_id: int,
        *,
        group_instance_id: str | None = None,
    ) -> list[Action]:
        """OffsetCommit of (topic, partition) -> (offset, leader_epoch, metadata).

        Answered by a ``CommitAnswer``: at once when refused, else once the records are appended.
        """
        if self.loading:
            return [commit_answer(group_id, commit_id, dict.fromkeys(offsets, LOADING), now_ms)]
        return self._offsets.commit_offsets(
            group_id, member_id, generation, offsets, now_ms, commit_id,
            group_instance_id=group_instance_id,
        )

    def commit_txn_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        generation: int,
        offsets: Mapping[TopicPartition, CommitTriple],
        now_ms: int,
        commit_id: int,
        *,
        group_instance_id: str | None = None,
    ) -> list[Action]:
        """TxnOffsetCommit: offsets written in ``producer_id``'s transaction (KIP-98, KIP-447).

        Answered by a ``CommitAnswer`` like OffsetCommit. The records go out as a transactional
        batch of the producer; the offsets stay apart until ``complete_txn``.
        """
        if self.loading:
            return [commit_answer(group_id, commit_id, dict.fromkeys(offsets, LOADING), now_ms)]
        return self._offsets.commit_txn_offsets(
            group_id, producer_id, producer_epoch, member_id, generation, offsets, now_ms,
            commit_id, group_instance_id=group_instance_id,
        )

    def complete_txn(self, producer_id: int, committed: bool) -> None:
        """The COMMIT (``committed``) or ABORT marker of ``producer_id`` is in this partition's
        log: its transactional offsets become committed offsets, or are dropped. While loading,
        the marker is applied once the load is done (it may lie past what the load reads)."""
        if self.loading:
            self._completed_while_loading.append((producer_id, committed))
            return
        self._offsets.complete_txn(producer_id, committed)

    def unstable_partitions(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> set[TopicPartition]:
        """Partitions with offsets in flight: an undecided transaction's, or a commit not yet
        appended. OffsetFetch with require_stable answers them UNSTABLE_OFFSET_COMMIT."""
        return self._offsets.unstable_partitions(group_id, partitions)

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None, *,
        member_id: str | None = None, member_epoch: int = -1,
    ) -> tuple[int, dict[TopicPartition, tuple[int, int, str]]]:
        """OffsetFetch: (error_code, (topic, partition) -> (offset, leader_epoch, metadata)).

        ``partitions`` None means every committed partition; unknown ones read (-1, -1, "").
        A member of a consumer group (OffsetFetch v9) must give its current epoch.
        """
        if self.loading:
            return LOADING, {}
        group = self._groups.group(group_id)
        if isinstance(group, ConsumerGroup):
            error = offset_rules.check_consumer_fetch(group, member_id, member_epoch)
            if error != NONE:
                return error, {}
        return NONE, self._offsets.fetch_offsets(group_id, partitions)

    def delete_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition], now_ms: int
    ) -> tuple[int, dict[TopicPartition, int], list[Action]]:
        """OffsetDelete: (group error, error per partition, actions), as Kafka decides it.

        Rules in ``offsets.py``.
        """
        if self.loading:
            return LOADING, {}, []
        return self._offsets.delete_offsets(group_id, partitions, now_ms)

    # -- DescribeGroups, ListGroups, DeleteGroups, expiry ----------------------------------------

    def describe(self, group_ids: Iterable[str]) -> list[GroupDescription]:
        """DescribeGroups; an unknown group is reported Dead with no error, as Kafka does."""
        if self.loading:
            return [dead_group(group_id, LOADING) for group_id in group_ids]
        return self._groups.describe(group_ids)

    def list_groups(
        self, states_filter: Iterable[str] | None = None
    ) -> tuple[int, list[ListedGroup]]:
        """ListGroups: (error_code, rows of every group type); the filter is case-blind."""
        if self.loading:
            return LOADING, []
        return NONE, self._groups.list_groups(states_filter)

    def delete_groups(
        self, group_ids: Iterable[str], now_ms: int
    ) -> tuple[dict[str, int], list[Action]]:
        """DeleteGroups: only groups without members; writes tombstones for group and offsets.

        Members whose session ended at or before ``now_ms`` are gone first (``expire_due``).
        """
        errors: dict[str, int] = {}
        actions: list[Action] = []
        for group_id in group_ids:
            if self.loading:
                errors[group_id] = LOADING
                continue
            actions += self._groups.expire(group_id, now_ms)
            errors[group_id] = self._groups.validate_delete_group(group_id)
            if errors[group_id] == NONE:
                tombstones = ([] if self._groups.group_type(group_id) == "share"
                              else self._offsets.delete_all_offsets(group_id))
                self._groups.delete_group(group_id, tombstones, now_ms, actions)
        return errors, actions

    def expire_offsets(self, now_ms: int, retention_ms: int) -> list[Action]:
        """Drop the offsets of memberless groups older than ``retention_ms``, then the groups.

        Rules in ``offsets.py``; a group left with neither members nor offsets is deleted.
        Tombstones go to the log so a new coordinator forgets them too.
        """
        actions: list[Action] = []
        if self.loading:
            return actions
        for group in self._groups.all_groups():
            if not self._groups.should_expire(group):
                continue
            tombstones = self._offsets.cleanup_expired_offsets(group, now_ms, retention_ms)
            tombstones += self._groups.maybe_delete_group(group, now_ms, actions)
            if tombstones:
                self._appends.append(Untracked(group.group_id), tombstones, now_ms, actions)
        return actions

    # -- the log ---------------------------------------------------------------------------------

    def on_appended(
        self, append_id: int, error_code: int, now_ms: int, base_offset: int = -1
    ) -> list[Action]:
        """The shell's report on an ``AppendRecords``: NONE and the offset the batch got in the
        log (``base_offset``), or the produce error it got."""
        assert error_code != NONE or base_offset >= 0, (error_code, base_offset)
        pending = self._appends.complete(append_id)
        actions: list[Action] = []
        if isinstance(pending, CommitStore | TxnCommitStore):
            self._offsets.on_appended(pending, error_code, now_ms, base_offset, actions)
        else:
            self._groups.on_appended(pending, error_code, now_ms, actions)
            if error_code != NONE and self._kept_in_memory(pending):
                actions.append(RevertToLog(group_id=pending.group_id, now_ms=now_ms,
                                           partition=self.partition))
        actions.extend(self._appends.released())
        return actions

    def _kept_in_memory(self, pending: PendingAppend) -> bool:
        """Whether a failed append leaves memory ahead of the log: a KIP-848 or KIP-932
        heartbeat, fencing or expiry changes its group before the records are written (a classic
        SyncGroup or static rejoin undoes its own change on failure, and a failed commit never
        reached memory)."""
        return isinstance(pending, HeartbeatStore | ClassicJoinStore | ConversionStore) or (
            isinstance(pending, Untracked)
            and self._groups.group_type(pending.group_id) in ("consumer", "share"))

    def hold_uncommitted_tail(self) -> int:
        """The log was loaded past its high watermark: answers that write nothing wait, as
        after an append, until ``tail_committed`` with the id returned."""
        return self._appends.hold()

    def tail_committed(self, hold_id: int) -> list[Action]:
        """The high watermark reached the end of the log as loaded: the answers it held."""
        self._appends.complete(hold_id)
        return self._appends.released()

    def begin_load(self) -> None:
        """The partition is being read: answer COORDINATOR_LOAD_IN_PROGRESS until ``load``."""
        self.loading = True

    def load(self, batches: Iterable[OffsetsBatch], now_ms: int) -> None:
        """Rebuild every group and offset from the partition's batches (oldest first).

        The latest record per key wins and tombstones delete, as compaction would; offsets of
        transactions count once their COMMIT marker is read, and those of transactions still
        open stay apart for ``complete_txn``. Groups with members come back Stable, their
        sessions restarting at ``now_ms``.
        """
        rebuilt = rebuild_groups(batches, now_ms,
                                 consumer_session_timeout_ms=self.consumer_session_timeout_ms)
        self._groups.replace(rebuilt.groups, rebuilt.consumer_groups, rebuilt.share_groups)
        self._appends.clear()
        self._offsets.on_loaded()
        self.loading = False
        completed, self._completed_while_loading = self._completed_while_loading, []
        for producer_id, committed in completed:
            self.complete_txn(producer_id, committed)

