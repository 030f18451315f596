"""QuorumController: one voter of the controller quorum (KRaft's QuorumController), sans-IO.

Theory of operation. Every controller runs a ``RaftNode`` over the metadata log and folds the
*committed* batches (below the high watermark) into ``image``, the same way on every voter: that
is what a standby keeps warm, what ``describe`` shows and what brokers fetch. Control batches
(each leader's epoch-start marker) take offsets but hold no metadata.

One voter is the **active controller**: the Raft leader, once the batch that starts its epoch is
committed. By then every batch of earlier epochs in its log is committed and folded, so the
``Controller`` it builds starts from the complete committed image (no replay from zero, no lost
decision). The active Controller decides on its *latest* image, committed or not, so two
decisions in flight never contradict each other (Kafka's controller does the same), and appends
each decision to the Raft log as one batch through ``_RaftJournal``. Its caller answers only once
the high watermark covers everything the controller had appended by then
(``commit_target``): an answer never reports a decision that could still vanish.

When the voter stops leading, the Controller and its uncommitted image are dropped; decisions
waiting for their commit have an unknown outcome (the next leader may keep them or cut them), and
the caller says so. A new active controller gives every broker a fresh session (its leases are
in memory only, as in Kafka), so a failover alone fences no one.

Snapshots (KIP-630). Every voter, active or not, snapshots its committed image: the image as
metadata records (``image_records``: folded with ``apply`` from the empty image they give it
back), and the RaftNode drops the log before the snapshot's end offset. The snapshot lags one
bound behind: each time the committed log passes ``snapshot_records_max`` offsets
(METADATA_SNAPSHOT_RECORDS_MAX, Kafka's metadata.log.max.record.bytes.between.snapshots counted
in records) since the last *candidate*, the candidate (the image, a value, and its offset, kept
when the bound was last passed) becomes the snapshot and the current image the next candidate.
So the log always keeps at least one bound of records after the snapshot: a broker or a voter
less than that behind keeps fetching batches (Kafka keeps the log for a retention time after a
snapshot for the same reason), only one further behind needs the snapshot. On start the image
is loaded from the newest snapshot (events start there) and the committed batches after it are
folded; when the node installs a snapshot from the leader (its log start passes what was
folded) the image is replaced by the snapshot's.
A broker that fetches from before the log start is answered with the snapshot's records and
``reset`` (replace your image), then fetches on from its end offset.

Fed like the RaftNode (``poll``, ``handle``, ``request_failed`` with the time); each returns the
messages to send, those of the active controller's appends included.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..metadata.image import ClusterImage, apply
from ..metadata.records import (
    ClientQuota,
    CreatePartition,
    CreateTopic,
    GroupConfigChange,
    MetadataRecord,
    ProducerIdsBlock,
    RegisterBroker,
    UnfenceBroker,
    UserScramCredential,
    b64encode,
    record_from_json,
)
from ..raft.log import Batch
from ..raft.messages import Message, Send
from ..raft.node import RaftNode, Role
from .controller import BROKER_SESSION_TIMEOUT_MS, Controller
from .errors import NOT_CONTROLLER, ControllerError
from .events import EVENTS_MAX, ControllerEvent, describe
from .topic_control import TopicDefaults

__all__ = ["METADATA_SNAPSHOT_RECORDS_MAX", "CommittedRecords", "NotControllerError",
           "QuorumController", "image_records"]

# Committed offsets (control batches included) between snapshots: the log a restarted voter
# replays, and the Raft log kept in memory, stay below twice this (the snapshot lags one bound
# behind) plus one decision. Kafka bounds bytes, 20 MiB by default; 20,000 records are ~4 MB.
METADATA_SNAPSHOT_RECORDS_MAX = 20_000


class NotControllerError(ControllerError):
    """This voter is not the active controller; ``leader_id`` is the leader it knows, if any."""

    def __init__(self, node_id: int, leader_id: int | None, *, outcome_unknown: bool = False):
        active = "unknown" if leader_id is None else str(leader_id)
        what = ("lost leadership before the change committed; it may or may not survive"
                if outcome_unknown else "is not active")
        super().__init__(NOT_CONTROLLER,
                         f"controller {node_id} {what} (the active one is {active})")
        self.leader_id = leader_id
        self.outcome_unknown = outcome_unknown


@dataclass(frozen=True, slots=True)
class CommittedRecords:
    """An answer to a metadata fetch: records from ``from_offset``, where the next fetch starts
    (control batches take offsets but are not sent) and the committed end."""

    records: list[MetadataRecord]
    next_offset: int
    end_offset: int
    reset: bool = False  # the records are a snapshot: replace the image by their fold


def image_records(image: ClusterImage) -> list[MetadataRecord]:
    """Records whose fold with ``apply`` from the empty image is ``image``: brokers, then
    topics with their partitions (in name order), then the producer ids handed out, then the
    groups' config overrides, then SCRAM credentials, ACLs and client quotas."""
    records: list[MetadataRecord] = []
    for broker_id in sorted(image.brokers):
        broker = image.brokers[broker_id]
        records.append(RegisterBroker(broker_id=broker_id, host=broker.host, port=broker.port,
                                      incarnation_id=broker.incarnation_id))
        if not broker.fenced:
            records.append(UnfenceBroker(broker_id=broker_id))
    for name in sorted(image.topics):
        topic = image.topics[name]
        records.append(CreateTopic(name=name, topic_id=topic.topic_id, configs=topic.configs))
        records.extend(
            CreatePartition(topic_id=topic.topic_id, partition=index, replicas=p.replicas,
                            isr=p.isr, leader=p.leader, leader_epoch=p.leader_epoch,
                            partition_epoch=p.partition_epoch)
            for index, p in enumerate(topic.partitions))
    if image.next_producer_id > 0:  # one block standing for all those handed out (owner 0)
        records.append(ProducerIdsBlock(first_id=0, size=image.next_producer_id, broker_id=0))
    records.extend(GroupConfigChange(group=group, configs=configs)
                   for group, configs in sorted(image.group_configs.items()))
    return records + security_records(image)


def security_records(image: ClusterImage) -> list[MetadataRecord]:
    """The records of ``image``'s SCRAM credentials, ACLs and client quotas."""
    records: list[MetadataRecord] = [
        UserScramCredential(name=user, mechanism=mechanism, salt=b64encode(c.salt),
                            stored_key=b64encode(c.stored_key),
                            server_key=b64encode(c.server_key), iterations=c.iterations)
        for (user, mechanism), c in sorted(image.scram_credentials.items())]
    records.extend(image.acls[acl_id] for acl_id in sorted(image.acls))
    for entity, values in sorted(image.client_quotas.items(), key=lambda kv: repr(kv[0])):
        records.extend(ClientQuota(entity=entity, key=key, value=value, remove=False)
                       for key, value in sorted(values.items()))
    return records


class _RaftJournal:
    """The active Controller's log: an append is a proposal to the quorum (leader only)."""

    def __init__(self, node: RaftNode, clock: Callable[[], int],
                 sink: Callable[[list[Send]], None]) -> None:
        self._node = node
        self._clock = clock
        self._sink = sink

    @property
    def end_offset(self) -> int:
        return self._node.log.end_offset

    def append(self, records: list[MetadataRecord]) -> int:
        end, sends = self._node.propose([r.to_json().encode() for r in records], self._clock())
        self._sink(sends)
        return end - 1

    def close(self) -> None:
        """The Raft log outlives any one term of this voter as active controller."""


class QuorumController:
    """One voter; see the module docstring."""

    def __init__(self, node: RaftNode, now_ms: int, *,
                 session_timeout_ms: int = BROKER_SESSION_TIMEOUT_MS, seed: int = 0,
                 defaults: TopicDefaults | None = None,
                 snapshot_records_max: int = METADATA_SNAPSHOT_RECORDS_MAX) -> None:
        assert snapshot_records_max > 0, snapshot_records_max
        self.node = node
        self.image = ClusterImage.empty()  # the fold of the snapshot and the committed batches
        self.applied_offset = 0  # where the next committed batch to fold starts
        self.events: deque[ControllerEvent] = deque(maxlen=EVENTS_MAX)
        self.snapshot_records_max = snapshot_records_max
        self._candidate: tuple[int, ClusterImage] | None = None  # the next snapshot
        self.active: Controller | None = None
        self.active_epoch: int | None = None
        self._options: dict[str, Any] = dict(session_timeout_ms=session_timeout_ms, seed=seed,
                                             defaults=defaults)
        self._now_ms = now_ms
        self._outbox: list[Send] = []
        self._step(now_ms, [])

    @property
    def node_id(self) -> int:
        return self.node.node_id

    @property
    def session_timeout_ms(self) -> int:
        return self._options["session_timeout_ms"]

    # -- feeding the node ----------------------------------------------------------------------

    def poll(self, now_ms: int) -> list[Send]:
        return self._step(now_ms, self.node.poll(now_ms))

    def handle(self, sender: int, message: Message, now_ms: int) -> list[Send]:
        return self._step(now_ms, self.node.handle(sender, message, now_ms))

    def request_failed(self, destination: int, message: Message, now_ms: int) -> list[Send]:
        return self._step(now_ms, self.node.request_failed(destination, message, now_ms))

    def take_sends(self) -> list[Send]:
        """What the active controller's appends produced since the last step."""
        return self._step(self._now_ms, [])

    def _step(self, now_ms: int, sends: list[Send]) -> list[Send]:
        self._now_ms = max(self._now_ms, now_ms)
        self._outbox.extend(sends)
        self._fold()
        self._maybe_snapshot()
        self._check_active()
        out = list(self._outbox)
        self._outbox.clear()  # the same list: the journal appends to it
        return out

    def _fold(self) -> None:
        node = self.node
        if self.applied_offset < node.log.start_offset:  # on start, or installed from the leader
            self._load_snapshot()
        while self.applied_offset < node.high_watermark:
            batches = node.committed(self.applied_offset)
            assert batches, (self.applied_offset, node.high_watermark)
            for batch in batches:
                self._fold_batch(batch)

    def _load_snapshot(self) -> None:
        snapshot = self.node.log.snapshot
        assert snapshot is not None and snapshot.end_offset <= self.node.high_watermark
        image = ClusterImage.empty()
        for raw in snapshot.records:
            image = apply(image, record_from_json(raw))
        self.image = image
        self.applied_offset = snapshot.end_offset
        self._candidate = None
        self.events.clear()  # what the snapshot folded in is not told again

    def _maybe_snapshot(self) -> None:
        """Once the committed log since the candidate (else the log start) passes the bound,
        snapshot the candidate, and keep the committed image as the next one."""
        node = self.node
        since = node.log.start_offset if self._candidate is None else self._candidate[0]
        if self.applied_offset - since < self.snapshot_records_max:
            return
        assert self.applied_offset <= node.high_watermark, (
            self.applied_offset, node.high_watermark)
        if self._candidate is not None and self._candidate[0] > node.log.start_offset:
            offset, image = self._candidate
            node.take_snapshot(offset, [r.to_json().encode() for r in image_records(image)])
        self._candidate = (self.applied_offset, self.image)

    def _fold_batch(self, batch: Batch) -> None:
        assert batch.base_offset == self.applied_offset, (batch.base_offset, self.applied_offset)
        if not batch.control:
            for offset, raw in enumerate(batch.records, start=batch.base_offset):
                record = record_from_json(raw)
                for described in describe(self.image, record):  # when it was decided
                    self.events.append(ControllerEvent(batch.append_time_ms, offset, *described))
                self.image = apply(self.image, record)
        self.applied_offset = batch.end_offset

    def _check_active(self) -> None:
        node = self.node
        leading = node.role is Role.LEADER
        if self.active is not None and (not leading or node.epoch != self.active_epoch):
            self.active = None  # its uncommitted image goes with it
            self.active_epoch = None
        # Active once the leader's epoch-start batch, and so everything before it, is folded.
        if self.active is None and leading and self.applied_offset >= node.epoch_start_end:
            journal = _RaftJournal(node, lambda: self._now_ms, self._outbox.extend)
            self.active = Controller(journal, now_ms=self._now_ms, image=self.image,
                                     **self._options)
            self.active_epoch = node.epoch

    # -- the active controller -----------------------------------------------------------------

    def controller(self) -> Controller:
        """The active Controller, or NotControllerError naming the leader this voter knows."""
        if self.active is None:
            raise NotControllerError(self.node_id, self.node.leader_id)
        return self.active

    @property
    def commit_target(self) -> int:
        """The offset the HW must reach before an answer may rely on what was decided so far."""
        return self.node.log.end_offset

    def check_committed(self, target: int, epoch: int) -> bool:
        """True once ``target`` is committed with the batch ``epoch`` appended there;
        NotControllerError (outcome unknown) if this voter stopped being the active controller
        of ``epoch`` before that, or committed another leader's batches up to ``target``."""
        if self.node.high_watermark >= target and self.applied_offset >= target:
            if self.active_epoch == epoch:  # still leading: its log since its epoch began
                return True  # is its own, and ``target`` is past that epoch's start
            # A deposed voter's log may hold another leader's batches there by now: only a
            # batch of ``epoch`` ending at ``target`` is the one this controller appended
            # (before the log start the snapshot cannot tell: the outcome is unknown).
            if target >= self.node.log.start_offset and (
                    self.node.log.epoch_ending_at(target) == epoch):
                return True
            raise NotControllerError(self.node_id, self.node.leader_id, outcome_unknown=True)
        if self.active_epoch != epoch:
            raise NotControllerError(self.node_id, self.node.leader_id, outcome_unknown=True)
        return False

    # -- reading committed metadata ------------------------------------------------------------

    def read_committed(self, from_offset: int, max_records: int) -> CommittedRecords:
        """Committed records from ``from_offset`` (a batch boundary at or below the HW), in
        whole batches: at most ``max_records`` unless the first batch alone is larger. From
        before the log start: the snapshot's records, whole, with ``reset``."""
        assert max_records > 0, max_records
        end = self.applied_offset
        assert 0 <= from_offset <= end, (from_offset, end)
        snapshot = self.node.log.snapshot
        if snapshot is not None and from_offset < snapshot.end_offset:
            return CommittedRecords([record_from_json(raw) for raw in snapshot.records],
                                    snapshot.end_offset, end, reset=True)
        records: list[MetadataRecord] = []
        offset = from_offset
        while offset < end:
            batches = self.node.committed(offset)
            for batch in batches:
                if records and len(records) + len(batch.records) > max_records:
                    return CommittedRecords(records, offset, end)
                if not batch.control:
                    records.extend(record_from_json(raw) for raw in batch.records)
                offset = batch.end_offset
        return CommittedRecords(records, offset, end)

    def is_batch_boundary(self, offset: int) -> bool:
        """Whether a metadata fetch may start at ``offset``: a batch boundary, or anywhere
        before the log start (answered with the snapshot)."""
        log = self.node.log
        return offset <= log.start_offset or log.epoch_ending_at(offset) is not None

    def describe_quorum(self) -> dict[str, Any]:
        """Voters, leader, epoch, the committed end and, on the leader, each voter's lag."""
        node = self.node
        lag = {}
        if node.role is Role.LEADER:
            ends = node.follower_end_offsets()
            lag = {str(v): None if v not in ends else node.log.end_offset - ends[v]
                   for v in sorted(node.voters)}  # None: not heard from in this epoch
        return {
            "node_id": self.node_id,
            "voters": sorted(node.voters),
            "role": node.role.value,
            "active": self.active is not None,
            "leader_id": node.leader_id,
            "epoch": node.epoch,
            "high_watermark": node.high_watermark,
            "log_start_offset": node.log.start_offset,
            "log_end_offset": node.log.end_offset,
            "voter_lag": lag,
        }
