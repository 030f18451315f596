"""The share partitions and share sessions of one broker (Kafka's SharePartitionManager and
ShareSessionCache), sans-IO.

Theory of operation (KIP-932):

- A partition leader keeps one ``SharePartition`` per share group that reads the partition,
  loaded on the group's first ShareFetch for it from the state the share coordinator persisted
  (``adopt``). A share partition never persisted starts where ``share.auto.offset.reset``
  says (Kafka's default: latest, the high watermark), so a new share group sees records
  written from then on; ``earliest`` starts at the log start offset.
- A member's ShareFetch and ShareAcknowledge requests belong to its *share session* here,
  keyed by (group, member): epoch 0 opens it (replacing any old one) with the partitions the
  request names, each later request carries the next epoch and adds or forgets partitions, and
  epoch -1 closes it. Closing a session releases every record the member holds here, as does
  its acquisition locks running out (``expire``). An epoch out of order is
  INVALID_SHARE_SESSION_EPOCH, a session this broker does not know SHARE_SESSION_NOT_FOUND.
- A session belongs to the client connection that last used it (Kafka's ShareSession
  connection id). The connection closing ends its sessions as epoch -1 would
  (``sessions_of``; Kafka's ShareSessionCache connection-disconnect listener), so a consumer
  that dies without closing gives its records back at once, not when their locks run out.
- This broker stops leading a partition: its share partitions go (``forget_partition``); the
  next leader loads them from the share coordinator. An admin may alter or delete an empty
  group's state at its share coordinator (AlterShareGroupOffsets, DeleteShareGroupOffsets):
  when a session opens for a group with no other session here, its idle share partitions
  (``idle_group_partitions``) are checked against the coordinator's state epoch and dropped
  if it changed, so the fetch loads the new state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import Errors
from ..types import TopicPartition
from .persisted import ShareSnapshot
from .share_partition import SharePartition, SharePartitionConfig, initial_start_offset

__all__ = ["FINAL_SHARE_SESSION_EPOCH", "SharePartitionManager", "ShareSession"]

INITIAL_SHARE_SESSION_EPOCH = 0
FINAL_SHARE_SESSION_EPOCH = -1
SHARE_SESSIONS_MAX = 1_000  # Kafka's group.share.max.share.sessions default
EPOCHS_COUNT = 2**31  # a session epoch wraps past int32 to 1, as Kafka's does
NO_CONNECTION = ""  # a request that came through no client connection (the simulation's)


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    epoch: int
    partitions: set[TopicPartition] = field(default_factory=set)
    connection_id: str = NO_CONNECTION


class SharePartitionManager:
    """Every share partition this broker leads, and the members' share sessions."""

    def __init__(self, config: SharePartitionConfig | None = None, *,
                 auto_offset_reset: str = "latest") -> None:
        self.config = config or SharePartitionConfig()
        self.auto_offset_reset = auto_offset_reset
        self.partitions: dict[tuple[str, TopicPartition], SharePartition] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    # -- sessions --------------------------------------------------------------------------

    def open_session(self, group_id: str, member_id: str, epoch: int,
                     added: set[TopicPartition], forgotten: set[TopicPartition],
                     now_ms: int, connection_id: str = NO_CONNECTION
                     ) -> tuple[int, ShareSession | None]:
        """The session a request with ``epoch`` continues, now bound to the request's
        connection: (error code, session)."""
        key = (group_id, member_id)
        session = self.sessions.get(key)
        if epoch == INITIAL_SHARE_SESSION_EPOCH:
            if session is None and len(self.sessions) >= SHARE_SESSIONS_MAX:
                return Errors.SHARE_SESSION_LIMIT_REACHED, None
            if session is not None:
                self.release(group_id, member_id, now_ms)
            session = self.sessions[key] = ShareSession(group_id, member_id, 0)
        elif session is None:
            return Errors.SHARE_SESSION_NOT_FOUND, None
        elif epoch != FINAL_SHARE_SESSION_EPOCH and epoch != _next_epoch(session.epoch):
            return Errors.INVALID_SHARE_SESSION_EPOCH, None
        elif epoch != FINAL_SHARE_SESSION_EPOCH:
            session.epoch = epoch
        session.partitions |= added
        session.partitions -= forgotten
        if connection_id != NO_CONNECTION:
            session.connection_id = connection_id
        return Errors.NONE, session

    def sessions_of(self, connection_id: str) -> list[tuple[str, str]]:
        """The (group, member) of every session the connection ``connection_id`` holds."""
        if connection_id == NO_CONNECTION:
            return []
        return [key for key, session in self.sessions.items()
                if session.connection_id == connection_id]

    def close_session(self, group_id: str, member_id: str, now_ms: int) -> None:
        """Epoch -1 answered: the session ends and the member's records go back."""
        self.sessions.pop((group_id, member_id), None)
        self.release(group_id, member_id, now_ms)

    def release(self, group_id: str, member_id: str, now_ms: int) -> int:
        """Every record ``member_id`` holds in ``group_id``'s partitions here goes back."""
        return sum(partition.release_member(member_id, now_ms)
                   for (group, _), partition in self.partitions.items() if group == group_id)

    # -- share partitions ------------------------------------------------------------------

    def start_offset(self, *, log_start_offset: int, high_watermark: int,
                     reset: str | None = None) -> int:
        """Where a share partition never persisted starts: ``reset`` (the group's
        share.auto.offset.reset, latest or earliest), else the manager's default."""
        return initial_start_offset((reset or self.auto_offset_reset),  # type: ignore[arg-type]
                                    log_start_offset=log_start_offset,
                                    latest_offset=high_watermark)

    def loaded(self, group_id: str, topic_partition: TopicPartition, *,
               log_start_offset: int) -> SharePartition | None:
        """The group's share partition if this broker has it; a log start offset past its
        start offset moves it (records deleted meanwhile)."""
        partition = self.partitions.get((group_id, topic_partition))
        if partition is not None and log_start_offset > partition.start_offset:
            partition.move_start_offset(log_start_offset)
        return partition

    def adopt(self, group_id: str, topic_partition: TopicPartition,
              snapshot: ShareSnapshot) -> SharePartition:
        """Serve the share partition from its persisted ``snapshot`` (the first reader wins
        when two requests loaded it at once)."""
        key = (group_id, topic_partition)
        if key not in self.partitions:
            self.partitions[key] = SharePartition.from_snapshot(snapshot, self.config)
        return self.partitions[key]

    def forget_partition(self, topic_partition: TopicPartition) -> None:
        """This broker no longer leads ``topic_partition``."""
        for key in [k for k in self.partitions if k[1] == topic_partition]:
            del self.partitions[key]

    def idle_group_partitions(self, group_id: str, member_id: str) -> list[TopicPartition]:
        """The group's share partitions here with nothing acquired, if no member but
        ``member_id`` has a session here (none if another has)."""
        if any(group == group_id and member != member_id for group, member in self.sessions):
            return []
        return sorted(tp for (group, tp), partition in self.partitions.items()
                      if group == group_id and not partition.acquired_records)

    def forget_group_partition(self, group_id: str, topic_partition: TopicPartition) -> None:
        """The group's state for ``topic_partition`` was altered or deleted at its share
        coordinator: the next fetch loads it again."""
        self.partitions.pop((group_id, topic_partition), None)

    def expire(self, now_ms: int) -> None:
        """Acquisition locks that ran out by ``now_ms`` release their records."""
        for partition in self.partitions.values():
            partition.expire_locks(now_ms)

    def check_invariants(self) -> None:
        for partition in self.partitions.values():
            partition.check_invariants()


def _next_epoch(epoch: int) -> int:
    return 1 if epoch + 1 >= EPOCHS_COUNT else epoch + 1
