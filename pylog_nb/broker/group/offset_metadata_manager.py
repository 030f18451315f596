"""Committed offsets of one ``__consumer_offsets`` partition (Kafka's OffsetMetadataManager),
sans-IO.

Theory of operation (the rules themselves are ``offsets.py``'s):

- OffsetCommit: the commit is checked against the group (``offsets.check_commit``; a commit
  outside group management creates the group), its offsets become records in one append, and
  the commit is answered (``CommitAnswer``) only once the append's outcome is known
  (``on_appended``); the offsets are visible to OffsetFetch from then on.
- TxnOffsetCommit (KIP-98, KIP-447): the records go out as a transactional batch of the
  producer; once appended the offsets are kept apart per producer id (``Group.txn_offsets``)
  and the group is indexed under the producer (Kafka's openGroupsForProducer), so the
  transaction's marker in this partition (``complete_txn``, Kafka's replayEndTransactionMarker)
  visits only those groups: COMMIT makes them committed offsets, ABORT drops them.
- OffsetFetch reads committed offsets; ``unstable_partitions`` names those with a commit in
  flight (appending, or in an undecided transaction) for require_stable.
- OffsetDelete, DeleteGroups (``delete_all_offsets``) and expiry (``cleanup_expired_offsets``,
  KIP-211) drop offsets and return their tombstones, so a new coordinator forgets them too.

Offsets are kept on each ``Group`` (what admin views and a reload see), reached through the
``GroupMetadataManager``; the loading gate is the ``GroupCoordinator``'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..types import TopicPartition
from . import offsets as offset_rules
from .actions import Action, CommitAnswer
from .appends import PendingAppends, Untracked
from .consumer_group import ConsumerGroup
from .errors import GROUP_ID_NOT_FOUND, INVALID_GROUP_ID, NONE, offset_store_error
from .group import Group, GroupState, TxnOffset
from .group_metadata_manager import GroupMetadataManager
from .records import OffsetCommitValue
from .storage import Record, offset_records, offset_tombstones

__all__ = ["CommitStore", "OffsetMetadataManager", "TxnCommitStore", "commit_answer"]

CommitTriple = tuple[int, int, str | None]  # offset, leader_epoch, metadata (None: "")
Errors = dict[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class CommitStore:
    """An OffsetCommit being appended: answer ``commit_id`` once it is in the log."""

    group_id: str
    commit_id: int
    values: dict[TopicPartition, OffsetCommitValue]
    errors: Errors  # partitions refused before the append (metadata too large)


@dataclass(frozen=True, slots=True)
class TxnCommitStore:
    """A TxnOffsetCommit being appended in ``producer_id``'s transaction."""

    group_id: str
    commit_id: int
    producer_id: int
    values: dict[TopicPartition, OffsetCommitValue]
    errors: Errors


class OffsetMetadataManager:
    """Commits, transactional commits, fetches, deletes and expiry of committed offsets."""

    def __init__(
        self,
        groups: GroupMetadataManager,
        appends: PendingAppends,
        *,
        offset_metadata_bytes_max: int = offset_rules.OFFSET_METADATA_BYTES_MAX,
    ) -> None:
        assert offset_metadata_bytes_max >= 0, offset_metadata_bytes_max
        self._groups = groups
        self._appends = appends
        self.offset_metadata_bytes_max = offset_metadata_bytes_max
        # Groups holding undecided transactional offsets, by producer id (Kafka's
        # openGroupsForProducer): a marker visits these, not every group.
        self._txn_groups: dict[int, set[str]] = {}

    # -- OffsetCommit, TxnOffsetCommit -----------------------------------------------------------

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
        """OffsetCommit (``GroupCoordinator.commit_offsets`` has the arguments' meaning)."""
        assert len(offsets) <= offset_rules.PARTITIONS_PER_COMMIT_MAX, len(offsets)
        actions: list[Action] = []
        group = self._groups.group(group_id)
        error = INVALID_GROUP_ID if not group_id else offset_rules.check_commit(
            group, member_id, group_instance_id, generation)
        if error != NONE:
            actions.append(commit_answer(group_id, commit_id, dict.fromkeys(offsets, error),
                                         now_ms))
            return actions
        group = self._groups.get_or_create_classic_group(group_id, now_ms)
        if isinstance(group, Group) and member_id in group.members:
            member = group.members[member_id]
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        errors, values = offset_rules.commit_values(offsets, self.offset_metadata_bytes_max, now_ms)
        if not values:
            actions.append(commit_answer(group_id, commit_id, errors, now_ms))
            return actions
        store = CommitStore(group_id, commit_id, values, errors)
        self._appends.append(store, offset_records(group_id, values), now_ms, actions)
        return actions

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
        """TxnOffsetCommit (``GroupCoordinator.commit_txn_offsets`` has the arguments'
        meaning)."""
        assert len(offsets) <= offset_rules.PARTITIONS_PER_COMMIT_MAX, len(offsets)
        assert producer_id >= 0 and producer_epoch >= 0, (producer_id, producer_epoch)
        actions: list[Action] = []
        group = self._groups.group(group_id)
        error = INVALID_GROUP_ID if not group_id else offset_rules.check_txn_commit(
            group, member_id, group_instance_id, generation)
        if error != NONE:
            actions.append(commit_answer(group_id, commit_id, dict.fromkeys(offsets, error),
                                         now_ms))
            return actions
        self._groups.get_or_create_classic_group(group_id, now_ms)
        errors, values = offset_rules.commit_values(offsets, self.offset_metadata_bytes_max, now_ms)
        if not values:
            actions.append(commit_answer(group_id, commit_id, errors, now_ms))
            return actions
        store = TxnCommitStore(group_id, commit_id, producer_id, values, errors)
        self._appends.append(store, offset_records(group_id, values), now_ms, actions,
                             producer=(producer_id, producer_epoch))
        return actions

    def on_appended(
        self,
        store: CommitStore | TxnCommitStore,
        error_code: int,
        now_ms: int,
        base_offset: int,
        actions: list[Action],
    ) -> None:
        """A commit's append completed: keep its offsets (at ``base_offset``) and answer it."""
        errors = dict(store.errors)
        for topic_partition in store.values:
            errors[topic_partition] = offset_store_error(error_code) if error_code else NONE
        group = self._groups.group(store.group_id)
        if error_code == NONE and group is not None:
            self._stored(group, store, base_offset)
        actions.append(commit_answer(store.group_id, store.commit_id, errors, now_ms))

    def _stored(self, group: Group | ConsumerGroup, store: CommitStore | TxnCommitStore,
                base_offset: int) -> None:
        if isinstance(store, CommitStore):
            for topic_partition, value in store.values.items():
                group.put_offset(topic_partition, value, base_offset)
            return
        pending = group.txn_offsets.setdefault(store.producer_id, {})
        for topic_partition, value in store.values.items():
            pending[topic_partition] = TxnOffset(value, base_offset)
        self._txn_groups.setdefault(store.producer_id, set()).add(group.group_id)

    # -- transaction markers ---------------------------------------------------------------------

    def complete_txn(self, producer_id: int, committed: bool) -> None:
        """The COMMIT (``committed``) or ABORT marker of ``producer_id`` is in the log."""
        for group_id in sorted(self._txn_groups.pop(producer_id, ())):
            group = self._groups.group(group_id)
            if group is not None:
                offset_rules.complete_txn(group, producer_id, committed)

    def on_loaded(self) -> None:
        """The groups were rebuilt from the log: index their undecided transactional offsets."""
        self._txn_groups = {}
        for group in self._groups.groups.values():
            for producer_id in group.txn_offsets:
                self._txn_groups.setdefault(producer_id, set()).add(group.group_id)

    # -- OffsetFetch -----------------------------------------------------------------------------

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, offset_rules.OffsetTriple]:
        """OffsetFetch of ``partitions`` (None: every committed one)."""
        group = self._groups.group(group_id)
        return offset_rules.fetch(group.offsets if group else {}, partitions)

    def unstable_partitions(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> set[TopicPartition]:
        """Those of ``partitions`` with a commit in flight: appending, or in an undecided
        transaction."""
        group = self._groups.group(group_id)
        if group is None:
            return set()
        appending = {
            tp
            for pending in self._appends.in_flight()
            if isinstance(pending, CommitStore | TxnCommitStore) and pending.group_id == group_id
            for tp in pending.values
        }
        return {tp for tp in partitions if tp in appending or group.has_pending_txn_offset(tp)}

    # -- OffsetDelete, DeleteGroups, expiry ------------------------------------------------------

    def delete_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition], now_ms: int
    ) -> tuple[int, Errors, list[Action]]:
        """OffsetDelete: (group error, error per partition, actions)."""
        actions: list[Action] = []
        group = self._groups.group(group_id)
        if group is None or group.state.value == GroupState.DEAD.value:
            return GROUP_ID_NOT_FOUND, {}, actions
        group_error, errors = offset_rules.deletable(group, partitions)
        deleted = sorted(
            tp for tp, error in errors.items() if error == NONE and tp in group.offsets
        )
        for topic_partition in deleted:
            group.drop_offset(topic_partition)
        if deleted:
            tombstones = offset_tombstones(group_id, deleted)
            self._appends.append(Untracked(group_id), tombstones, now_ms, actions)
        return group_error, errors, actions

    def delete_all_offsets(self, group_id: str) -> list[Record]:
        """The tombstones of every committed offset of a group being deleted."""
        group = self._groups.group(group_id)
        assert group is not None, group_id
        return offset_tombstones(group_id, sorted(group.offsets))

    def cleanup_expired_offsets(
        self, group: Group | ConsumerGroup, now_ms: int, retention_ms: int
    ) -> list[Record]:
        """Drop the offsets of ``group`` older than ``retention_ms``; their tombstones."""
        expired = offset_rules.expired(group, now_ms, retention_ms)
        for topic_partition in expired:
            group.drop_offset(topic_partition)
        return offset_tombstones(group.group_id, expired)


def commit_answer(group_id: str, commit_id: int, errors: Errors, now_ms: int) -> CommitAnswer:
    return CommitAnswer(group_id=group_id, now_ms=now_ms, commit_id=commit_id, errors=errors)
