"""The controller's decisions: one Controller per term of the active controller.

Theory of operation (KRaft's QuorumController, the decision half; ``quorum.py`` is the Raft half):

- State is ``image``, the fold of everything in ``journal``. The caller hands over both: the
  QuorumController builds a Controller when its voter becomes the active controller, from the
  committed image, with a ``_RaftJournal`` that proposes each batch to the quorum. Every
  decision computes records against the current image, applies them to a scratch copy
  (``apply`` refuses anything inconsistent), appends them to the journal as one atomic batch,
  and only then publishes the scratch image. Durability, commit and replay after a restart are
  the journal's business (the Raft log); the events describing the records are built by the
  QuorumController as batches commit.
- Decisions are deterministic: no wall clock (``now_ms`` comes in), no unseeded randomness (topic
  ids and placement offsets come from a generator seeded by ``seed`` and the journal's end
  offset, so they never repeat across terms), and every loop walks brokers and partitions in
  sorted order.
- Broker liveness is a lease, kept in memory only (heartbeats are frequent and never logged): a
  heartbeat extends it by ``session_timeout_ms``; ``tick`` fences any unfenced broker whose lease
  has run out. A new Controller gives every registered broker a fresh lease, so a controller
  restart or failover alone never fences anyone.
- Every public operation returns a ControllerResult: the records appended (none on error or
  ``validate_only``), a Kafka error code with a one-line message, and an operation-specific value.
  Security operations (``security_control``) answer per item, as Kafka's do: their value is the
  list of per-item results, and the records of the items that passed are one batch.

Not thread-safe: the asyncio shell calls it from its event loop only.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..metadata.image import ClusterImage, apply
from ..metadata.records import (
    NO_LEADER,
    FenceBroker,
    MetadataRecord,
    MetadataRecordError,
    ProducerIdsBlock,
    RegisterBroker,
    UnfenceBroker,
)
from ..security.sasl import ScramCredential
from . import errors
from .election import changes_for_fence, changes_for_offline, changes_for_preferred
from .errors import ControllerError
from .group_control import plan_alter_group_configs
from .partition_control import check_alter_partition
from .security_control import (
    plan_alter_client_quotas,
    plan_alter_user_scram_credentials,
    plan_create_acls,
    plan_delete_acls,
    plan_missing_scram_credentials,
)
from .topic_control import (
    DEFAULT_FROM_BROKER,
    TopicDefaults,
    plan_alter_configs,
    plan_create_partitions,
    plan_create_topic,
    plan_delete_topic,
)

__all__ = [
    "BROKER_SESSION_TIMEOUT_MS",
    "PRODUCER_ID_BLOCK_SIZE",
    "Controller",
    "ControllerResult",
]

# Kafka's broker.session.timeout.ms is 9000; a local cluster on loopback fails over faster so a
# notebook user sees the election within a few seconds of killing a broker.
BROKER_SESSION_TIMEOUT_MS = 1700  # fenced before librdkafka's second leader query (~1.9 s)
# Brokers should heartbeat several times per session (Kafka: 2000 of 9000).
BROKER_HEARTBEAT_INTERVAL_MS = 500
PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdManager block size
# Random topic ids are 122 bits; a clash is a bug in the generator, not bad luck.
TOPIC_ID_ATTEMPTS_MAX = 8


@dataclass(frozen=True, slots=True)
class ControllerResult:
    """What one operation did: records appended, error code and message, and its value."""

    records: tuple[MetadataRecord, ...] = ()
    error_code: int = errors.NONE
    message: str = ""
    value: Any = None
    last_offset: int = -1  # offset of the last record appended, -1 if none

    @property
    def ok(self) -> bool:
        return self.error_code == errors.NONE


def _failure(error: ControllerError) -> ControllerResult:
    return ControllerResult(error_code=error.error_code, message=str(error))


class Journal(Protocol):
    """Where decisions go: the Raft quorum's log (``quorum._RaftJournal``), where the active
    controller appends and the records count once committed; an append returns the offset of
    the batch's last record."""

    @property
    def end_offset(self) -> int: ...

    def append(self, records: list[MetadataRecord]) -> int: ...

    def close(self) -> None: ...


class Controller:
    """The single source of truth for brokers, topics, leaders, ISRs and epochs."""

    def __init__(
        self,
        journal: Journal,
        *,
        image: ClusterImage,
        now_ms: int,
        session_timeout_ms: int = BROKER_SESSION_TIMEOUT_MS,
        seed: int = 0,
        defaults: TopicDefaults | None = None,
    ) -> None:
        """``image`` is the fold of everything in ``journal`` (empty for an empty journal)."""
        assert session_timeout_ms > 0, session_timeout_ms
        self.journal = journal
        self.image = image
        self.session_timeout_ms = session_timeout_ms
        self.defaults = TopicDefaults() if defaults is None else defaults
        self._rng = random.Random(f"{seed}:{journal.end_offset}")
        self._now_ms = now_ms
        # Grace period: every broker gets a whole session from now, as if it had just heartbeat.
        self._lease_expiry_ms = {b: now_ms + session_timeout_ms for b in self.image.brokers}
        self._lease_extended_ms: dict[int, int] = {}  # by controller stalls, since the grant
        # A fenced broker is unfenced only once it has applied the metadata up to here: the
        # records that fenced it (and moved its leaderships away) or registered it. A new
        # Controller does not know the fencing record's offset, so the whole journal must be
        # applied.
        self._unfence_offset = {b: journal.end_offset for b in self.image.brokers}

    def close(self) -> None:
        self.journal.close()

    # -- plumbing ------------------------------------------------------------------------------

    def _clock(self, now_ms: int | None) -> int:
        if now_ms is not None:
            assert now_ms >= self._now_ms, f"time went backwards: {now_ms} < {self._now_ms}"
            self._now_ms = now_ms
        return self._now_ms

    def _scratch(self, records: Sequence[MetadataRecord]) -> ClusterImage:
        image = self.image
        for record in records:
            image = apply(image, record)
        _assert_leaders_live(image)
        return image

    def _commit(
        self, records: Sequence[MetadataRecord], value: Callable[[ClusterImage], Any] | None = None
    ) -> ControllerResult:
        """Append ``records`` as one batch, then publish the image."""
        if not records:
            return ControllerResult(value=None if value is None else value(self.image))
        image = self._scratch(records)
        last_offset = self.journal.append(list(records))
        self.image = image
        result_value = None if value is None else value(image)
        return ControllerResult(tuple(records), value=result_value, last_offset=last_offset)

    def _decide(
        self, plan: Callable[[], Sequence[MetadataRecord]], value: Callable[[ClusterImage], Any]
    ) -> ControllerResult:
        try:
            return self._commit(plan(), value)
        except ControllerError as error:
            return _failure(error)

    # -- brokers -------------------------------------------------------------------------------

    def register_broker(
        self, broker_id: int, host: str, port: int, incarnation_id: str, now_ms: int
    ) -> ControllerResult:
        """Register a broker (fenced until it heartbeats); a new incarnation means a restart,
        so a still-unfenced old registration is fenced first, moving its leaderships away."""
        self._clock(now_ms)
        try:
            record = RegisterBroker(
                broker_id=broker_id, host=host, port=port, incarnation_id=incarnation_id
            )
        except MetadataRecordError as error:
            return _failure(ControllerError(errors.INVALID_REQUEST, str(error)))
        self._grant_lease(broker_id, now_ms)
        old = self.image.brokers.get(broker_id)
        if old is not None and (old.host, old.port, old.incarnation_id) == (
            host,
            port,
            incarnation_id,
        ):
            return ControllerResult(value=old)  # a retried registration: nothing changes
        records: list[MetadataRecord] = []
        if old is not None and not old.fenced:
            records += self._fence_records(broker_id)
        records.append(record)
        result = self._commit(records, lambda image: image.brokers[broker_id])
        self._unfence_offset[broker_id] = result.last_offset + 1
        return result

    def heartbeat(
        self,
        broker_id: int,
        now_ms: int,
        broker_leo_caught_up: bool = True,
        incarnation_id: str | None = None,
        *,
        metadata_offset: int | None = None,
    ) -> ControllerResult:
        """Extend a broker's lease; unfence it once it has caught up with the metadata log,
        electing it where a partition had no leader and it may lead.

        ``metadata_offset`` is the broker's applied metadata offset: a fenced broker is
        unfenced only once it covers the records that fenced or registered it, so it has given
        up every leadership it lost before it can be elected again (None: not checked).
        """
        self._clock(now_ms)
        broker = self.image.brokers.get(broker_id)
        if broker is None:
            message = f"Broker {broker_id} is not registered"
            return _failure(ControllerError(errors.BROKER_ID_NOT_REGISTERED, message))
        if incarnation_id is not None and incarnation_id != broker.incarnation_id:
            message = f"Broker {broker_id} has re-registered since incarnation {incarnation_id}"
            return _failure(ControllerError(errors.STALE_BROKER_EPOCH, message))
        self._grant_lease(broker_id, now_ms)
        required = self._unfence_offset.get(broker_id, 0)
        applied_enough = metadata_offset is None or metadata_offset >= required
        caught_up = broker_leo_caught_up and applied_enough
        if not broker.fenced or not caught_up:
            return ControllerResult(value=broker)
        unfence = UnfenceBroker(broker_id=broker_id)
        after = apply(self.image, unfence)
        records = [unfence, *changes_for_offline(after, broker_id=broker_id)]
        return self._commit(records, lambda image: image.brokers[broker_id])

    def tick(self, now_ms: int) -> ControllerResult:
        """Fence every unfenced broker whose lease has expired, one batch per broker."""
        self._clock(now_ms)
        appended: list[MetadataRecord] = []
        last_offset = -1
        for broker_id in self.image.live_broker_ids():
            if now_ms >= self._lease_expiry_ms.get(broker_id, now_ms):
                result = self._commit(self._fence_records(broker_id))
                appended += result.records
                last_offset = result.last_offset
                self._unfence_offset[broker_id] = last_offset + 1
        return ControllerResult(tuple(appended), last_offset=last_offset)

    def _fence_records(self, broker_id: int) -> list[MetadataRecord]:
        # Kafka's order: partition changes first, so no image ever has a fenced leader.
        return [*changes_for_fence(self.image, broker_id), FenceBroker(broker_id=broker_id)]

    def _grant_lease(self, broker_id: int, now_ms: int) -> None:
        self._lease_expiry_ms[broker_id] = now_ms + self.session_timeout_ms
        self._lease_extended_ms.pop(broker_id, None)

    def extend_leases(self, by_ms: int) -> None:
        """Move every lease ``by_ms`` later: the controller itself was stalled that long, and a
        heartbeat sent meanwhile may still wait unread in its sockets. Fencing later is always
        safe; fencing a broker for the controller's own silence is not fair to it. A lease grows
        by at most one session between heartbeats, so a controller that keeps stalling still
        fences a dead broker."""
        assert by_ms >= 0, by_ms
        for broker_id in self._lease_expiry_ms:
            extended_ms = self._lease_extended_ms.get(broker_id, 0)
            step_ms = min(by_ms, self.session_timeout_ms - extended_ms)
            self._lease_expiry_ms[broker_id] += step_ms
            self._lease_extended_ms[broker_id] = extended_ms + step_ms

    def next_lease_expiry_ms(self) -> int | None:
        """The earliest lease of an unfenced broker: when ``tick`` next has something to do."""
        live = [self._lease_expiry_ms[b] for b in self.image.live_broker_ids()
                if b in self._lease_expiry_ms]
        return min(live, default=None)

    def lease_expiry_ms(self, broker_id: int) -> int | None:
        """When ``broker_id`` will be fenced unless it heartbeats (None if unknown)."""
        return self._lease_expiry_ms.get(broker_id)

    # -- topics --------------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        num_partitions: int = DEFAULT_FROM_BROKER,
        replication_factor: int = DEFAULT_FROM_BROKER,
        assignments: Sequence[Sequence[int]] = (),
        configs: Mapping[str, str | None] | None = None,
        validate_only: bool = False,
        *,
        now_ms: int | None = None,
    ) -> ControllerResult:
        """Create a topic with Kafka's replica placement over unfenced brokers; value: the
        TopicImage (also with ``validate_only``, which appends nothing)."""
        self._clock(now_ms)

        def plan() -> list[MetadataRecord]:
            return plan_create_topic(
                self.image,
                name,
                num_partitions,
                replication_factor,
                assignments,
                configs or {},
                topic_id=self._new_topic_id(),
                start_index=self._rng.randrange(1 << 16),
                defaults=self.defaults,
            )

        return self._maybe_validate(plan, lambda image: image.topics[name], validate_only)

    def _new_topic_id(self) -> str:
        for _ in range(TOPIC_ID_ATTEMPTS_MAX):
            topic_id = str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
            if topic_id not in self.image.topic_names:
                return topic_id
        raise AssertionError("topic id generator keeps repeating itself")

    def _maybe_validate(
        self,
        plan: Callable[[], list[MetadataRecord]],
        value: Callable[[ClusterImage], Any],
        validate_only: bool,
    ) -> ControllerResult:
        if not validate_only:
            return self._decide(plan, value)
        try:
            return ControllerResult(value=value(self._scratch(plan())))
        except ControllerError as error:
            return _failure(error)

    def delete_topic(self, name: str, *, now_ms: int | None = None) -> ControllerResult:
        """Delete a topic; value: its topic id."""
        self._clock(now_ms)
        topic = self.image.topics.get(name)

        def value(_: ClusterImage) -> str:
            assert topic is not None  # plan_delete_topic refused an unknown topic
            return topic.topic_id

        return self._decide(lambda: plan_delete_topic(self.image, name), value)

    def create_partitions(
        self,
        name: str,
        count: int,
        assignments: Sequence[Sequence[int]] = (),
        validate_only: bool = False,
        *,
        now_ms: int | None = None,
    ) -> ControllerResult:
        """Grow topic ``name`` to ``count`` partitions; value: the TopicImage."""
        self._clock(now_ms)
        def plan():
            return plan_create_partitions(self.image, name, count, assignments)

        return self._maybe_validate(plan, lambda image: image.topics[name], validate_only)

    def alter_configs(
        self,
        name: str,
        configs: Mapping[str, str | None],
        validate_only: bool = False,
        *,
        now_ms: int | None = None,
    ) -> ControllerResult:
        """Replace a topic's config overrides; enabling unclean election elects where it can."""
        self._clock(now_ms)
        def plan():
            return plan_alter_configs(self.image, name, configs)

        return self._maybe_validate(plan, lambda image: image.topics[name], validate_only)

    def alter_group_configs(
        self,
        group: str,
        configs: Mapping[str, str | None],
        validate_only: bool = False,
        *,
        now_ms: int | None = None,
    ) -> ControllerResult:
        """Replace a group's config overrides (none left: an empty mapping); value: the
        overrides now."""
        self._clock(now_ms)
        def plan():
            return plan_alter_group_configs(group, configs)

        return self._maybe_validate(
            plan, lambda image: dict(image.group_configs.get(group, {})), validate_only)

    # -- partitions ----------------------------------------------------------------------------

    def alter_partition(
        self,
        broker_id: int,
        topic_id: str,
        partition: int,
        leader_epoch: int,
        new_isr: Sequence[int],
        partition_epoch: int,
        *,
        now_ms: int | None = None,
    ) -> ControllerResult:
        """The leader's ISR change request (AlterPartition); value: the PartitionImage after."""
        self._clock(now_ms)

        def plan() -> list[MetadataRecord]:
            change = check_alter_partition(
                self.image, broker_id, topic_id, partition, leader_epoch, new_isr, partition_epoch
            )
            return [] if change is None else [change]

        return self._decide(plan, lambda image: image.partition(topic_id, partition))

    def elect_preferred_leaders(
        self, now_ms: int, partitions: Collection[tuple[str, int]] | None = None
    ) -> ControllerResult:
        """Move leadership back to each partition's first replica where it is live and in sync
        (all partitions, or the given (topic, index) pairs)."""
        self._clock(now_ms)
        return self._decide(lambda: changes_for_preferred(self.image, partitions), lambda _: None)

    def allocate_producer_ids(self, broker_id: int, *, now_ms: int | None = None):
        """Hand a broker the next block of producer ids; value: (first id, block size)."""
        self._clock(now_ms)
        if broker_id not in self.image.brokers:
            message = f"Broker {broker_id} is not registered"
            return _failure(ControllerError(errors.BROKER_ID_NOT_REGISTERED, message))
        first = self.image.next_producer_id
        block = ProducerIdsBlock(first_id=first, size=PRODUCER_ID_BLOCK_SIZE, broker_id=broker_id)
        return self._commit([block], lambda _: (first, PRODUCER_ID_BLOCK_SIZE))

    # -- security (issue 23) -------------------------------------------------------------------

    def alter_user_scram_credentials(
        self, deletions: Sequence[Mapping[str, Any]], upsertions: Sequence[Mapping[str, Any]],
        *, now_ms: int | None = None,
    ) -> ControllerResult:
        """AlterUserScramCredentials; value: per user {user, error_code, error_message}."""
        self._clock(now_ms)
        records, results = plan_alter_user_scram_credentials(self.image, deletions, upsertions)
        return self._commit(records, lambda _: results)

    def ensure_scram_credentials(
        self, credentials: Mapping[tuple[str, str], ScramCredential], *,
        now_ms: int | None = None,
    ) -> ControllerResult:
        """Write those of ``credentials`` ((user, mechanism) -> credential) the image lacks, and
        nothing else: the cluster's bootstrap users, idempotent whoever is active. Value: the
        (user, mechanism) pairs written."""
        self._clock(now_ms)
        records = plan_missing_scram_credentials(self.image, credentials)
        written = [(r.name, r.mechanism) for r in records]  # type: ignore[attr-defined]
        return self._commit(records, lambda _: written)

    def create_acls(self, creations: Sequence[Mapping[str, Any]], *,
                    now_ms: int | None = None) -> ControllerResult:
        """CreateAcls; value: per creation {error_code, error_message}."""
        self._clock(now_ms)
        records, results = plan_create_acls(self.image, creations)
        return self._commit(records, lambda _: results)


    def delete_acls(self, filters: Sequence[Mapping[str, Any]], *,
                    now_ms: int | None = None) -> ControllerResult:
        """DeleteAcls; value: per filter {error_code, error_message, matching_acls}."""
        self._clock(now_ms)
        records, results = plan_delete_acls(self.image, filters)
        return self._commit(records, lambda _: results)

    def alter_client_quotas(self, entries: Sequence[Mapping[str, Any]],
                            validate_only: bool = False, *,
                            now_ms: int | None = None) -> ControllerResult:
        """AlterClientQuotas; value: per entry {entity, error_code, error_message}
        (``validate_only``: the same, and nothing written)."""
        self._clock(now_ms)
        records, results = plan_alter_client_quotas(self.image, entries)
        if validate_only:
            self._scratch(records)
            return ControllerResult(value=results)
        return self._commit(records, lambda _: results)


def _assert_leaders_live(image: ClusterImage) -> None:
    for topic, index, p in image.partitions_in_order():
        assert p.leader == NO_LEADER or image.is_live(p.leader), (topic.name, index, p)
