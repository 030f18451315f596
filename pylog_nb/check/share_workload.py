"""A share group (KIP-932) under faults: every record accepted once, or archived, never more.

Theory of operation (``--workload share``):

- The records workload's idempotent producers write to the topic while ``SHARE_MEMBERS``
  confluent-kafka ``ShareConsumer`` members of one share group read it in explicit
  acknowledgement mode: each delivered record is ACCEPTed, or RELEASEd with probability
  ``RELEASE_RATE`` (a processing failure), and the acknowledgements go out with
  ``commit_sync``; an acknowledgement counts as done only when that call returned without an
  error for it. Members also crash (closed without acknowledging what they hold) and stall
  (no poll for longer than the acquisition lock), the seed choosing who and when, while the
  nemesis breaks brokers, controllers and share coordinators.
- After the faults heal and the producers stop, the members keep reading until every record
  the producers got an acknowledgement for is settled, or ``DRAIN_TIMEOUT_S`` passes.
- Anomalies, from what the members saw: ``share-lost`` (a producer-acknowledged value never
  accepted and not released as often as the delivery limit allows, so not archived; an
  ACCEPT whose commit failed has an unknown outcome and counts as maybe accepted, reported as
  ``share-unconfirmed``),
  ``share-after-accept`` (a value delivered again after its ACCEPT was committed: the
  share partition forgot it), ``share-over-limit`` (a delivery count above
  ``group.share.delivery.count.limit``). A value accepted by two members after overlapping
  deliveries is counted (``share-overlap``), not judged: an acquisition lock does not
  outlive its partition leader, so after a failover Kafka too may hand a record to a second
  member while the first still works on it.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer

from pylog_nb.client.config import client_config

SHARE_MEMBERS = 4
RELEASE_RATE = 0.02  # of deliveries: a member that failed to process the record
CRASH_INTERVAL_S = 12.0  # a member crashes (closes holding records), on average
STALL_INTERVAL_S = 15.0  # a member stops polling past its locks, on average
DELIVERY_COUNT_LIMIT = 5  # the brokers' group.share.delivery.count.limit (Kafka's default)
RECORD_LOCK_DURATION_MS = 4_000  # the brokers' group.share.record.lock.duration.ms
POLL_S = 0.1
DRAIN_TIMEOUT_S = 120.0
QUIET_S = 3 * RECORD_LOCK_DURATION_MS / 1000  # no delivery that long: nothing left to deliver
BROKER_ARGS = ("--group-share-record-lock-duration-ms", str(RECORD_LOCK_DURATION_MS),
               "--group-share-delivery-count-limit", str(DELIVERY_COUNT_LIMIT),
               "--share-auto-offset-reset", "earliest")


@dataclass(frozen=True, slots=True)
class Delivery:
    member: str
    partition: int
    offset: int
    value: str
    delivery_count: int
    at_s: float


@dataclass
class ShareHistory:
    group_id: str
    deliveries: list[Delivery] = field(default_factory=list)
    # member, value, when its commit returned, the delivery count it was accepted at
    accepted: list[tuple[str, str, float, int]] = field(default_factory=list)
    released: list[tuple[str, str]] = field(default_factory=list)  # member, value
    # ACCEPTs whose commit failed: the outcome is unknown (the broker may have taken it), so
    # such a value is never counted lost, as a producer's unknown send is not.
    maybe_accepted: set[str] = field(default_factory=set)
    failed_commits: list[str] = field(default_factory=list)
    crashes: int = 0
    stalls: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Member(threading.Thread):
    def __init__(self, bootstrap: str, topic: str, history: ShareHistory, name: str,
                 rng: random.Random, clock, stopping: threading.Event) -> None:
        super().__init__(name=f"check-share-{name}", daemon=True)
        self.bootstrap, self.topic, self.history, self.member = bootstrap, topic, history, name
        self.rng, self.clock, self.stopping = rng, clock, stopping
        self.calm = threading.Event()  # set during the drain: no more crashes or stalls

    def _consumer(self) -> ShareConsumer:
        consumer = ShareConsumer(client_config(self.bootstrap, **{
            "group.id": self.history.group_id, "share.acknowledgement.mode": "explicit",
            "client.id": self.member}))
        consumer.subscribe([self.topic])
        return consumer

    def run(self) -> None:
        consumer = self._consumer()
        try:
            while not self.stopping.is_set():
                if not self.calm.is_set() and self._misbehave(consumer):
                    consumer = self._consumer()
                    continue
                self._round(consumer)
        finally:
            consumer.close()

    def _misbehave(self, consumer: ShareConsumer) -> bool:
        """Crash (True: the caller opens a new consumer) or stall, now and then."""
        if self.rng.random() < POLL_S / CRASH_INTERVAL_S:
            self.history.crashes += 1
            consumer.close()  # what it held goes back to the group
            return True
        if self.rng.random() < POLL_S / STALL_INTERVAL_S:
            self.history.stalls += 1
            time.sleep(1.5 * RECORD_LOCK_DURATION_MS / 1000)  # its locks run out meanwhile
        return False

    def _round(self, consumer: ShareConsumer) -> None:
        try:
            messages = [m for m in consumer.poll(POLL_S) if m.error() is None]
        except KafkaException as error:
            self.history.failed_commits.append(f"{self.member} poll: {error.args[0].str()}")
            return
        if not messages:
            return
        decided: list[tuple[int, str, bool, int]] = []  # partition, value, released, count
        for message in messages:
            delivery = _delivery(self.member, message, self.clock())
            with self.history.lock:
                self.history.deliveries.append(delivery)
            release = self.rng.random() < RELEASE_RATE
            consumer.acknowledge(message, AcknowledgeType.RELEASE if release
                                 else AcknowledgeType.ACCEPT)
            decided.append((delivery.partition, delivery.value, release,
                            delivery.delivery_count))
        self._commit(consumer, decided)

    def _commit(self, consumer: ShareConsumer,
                decided: list[tuple[int, str, bool, int]]) -> None:
        """Send the acknowledgements; keep those of the partitions the broker confirmed."""
        try:
            results = consumer.commit_sync()
        except KafkaException as error:
            self.history.failed_commits.append(f"{self.member}: {error.args[0].str()}")
            results = {}
        with self.history.lock:
            self.history.maybe_accepted.update(value for _, value, release, _ in decided
                                               if not release)
        refused = {tp.partition for tp, failure in (results or {}).items()
                   if failure is not None}
        confirmed = {tp.partition for tp, failure in (results or {}).items() if failure is None}
        if refused:
            self.history.failed_commits.append(f"{self.member}: partitions {sorted(refused)}")
        done_s = self.clock()
        with self.history.lock:
            for partition, value, release, count in decided:
                if partition not in confirmed:
                    continue
                if release:
                    self.history.released.append((self.member, value))
                else:
                    self.history.accepted.append((self.member, value, done_s, count))


def _delivery(member: str, message, at_s: float) -> Delivery:
    partition, offset, raw = message.partition(), message.offset(), message.value()
    count = message.delivery_count()
    if partition is None or offset is None or raw is None or count is None:
        raise AssertionError(f"a share consumer delivered an incomplete record: {message}")
    return Delivery(member, partition, offset, raw.decode(), count, at_s)


class ShareMembers:
    """``SHARE_MEMBERS`` members reading ``topic`` as one share group until ``stop``."""

    def __init__(self, bootstrap: str, topic: str, history: ShareHistory, seed: int,
                 clock) -> None:
        self.stopping = threading.Event()
        rng = random.Random(seed)
        self.members = [_Member(bootstrap, topic, history, f"s{i}",
                                random.Random(rng.getrandbits(64)), clock, self.stopping)
                        for i in range(SHARE_MEMBERS)]

    def start(self) -> None:
        for member in self.members:
            member.start()

    def drain(self, history: ShareHistory, acked: set[str]) -> None:
        """Calm every member and read until each of ``acked`` is settled (or quiet)."""
        for member in self.members:
            member.calm.set()
        deadline_s = time.monotonic() + DRAIN_TIMEOUT_S
        last, last_change_s = -1, time.monotonic()
        while time.monotonic() < deadline_s:
            if not acked - settled(history):
                return
            count = len(history.deliveries)
            if count != last:
                last, last_change_s = count, time.monotonic()
            elif time.monotonic() - last_change_s > QUIET_S:
                return
            time.sleep(POLL_S * 5)

    def stop(self) -> None:
        self.stopping.set()
        for member in self.members:
            member.join(30)


def settled(history: ShareHistory) -> set[str]:
    """Values accepted, or released up to the delivery limit (archived by the group)."""
    with history.lock:
        accepted = {value for _, value, _, _ in history.accepted}
        top: dict[str, int] = {}
        for delivery in history.deliveries:
            top[delivery.value] = max(top.get(delivery.value, 0), delivery.delivery_count)
    return accepted | {value for value, count in top.items() if count >= DELIVERY_COUNT_LIMIT}


def maybe_settled(history: ShareHistory) -> set[str]:
    """``settled``, and values whose ACCEPT was sent but not confirmed."""
    with history.lock:
        maybe = set(history.maybe_accepted)
    return settled(history) | maybe


def share_anomalies(history: ShareHistory, acked: dict[str, tuple[int, int]]) -> list[dict]:
    """The anomaly rows (see the module docstring); ``acked``: value -> (partition, offset)."""
    rows = []
    done = maybe_settled(history)
    for value, (partition, offset) in sorted(acked.items()):
        if value not in done:
            seen = [(d.member, d.delivery_count) for d in history.deliveries if d.value == value]
            rows.append(_row("share-lost", partition, offset, value,
                             f"acknowledged to its producer, never accepted nor archived; "
                             f"delivered {seen or 'never'}"))
    first_accept: dict[str, tuple[float, int]] = {}
    for _, value, done_s, count in history.accepted:
        first_accept[value] = min(first_accept.get(value, (done_s, count)), (done_s, count))
    for delivery in history.deliveries:
        accepted_s, accepted_count = first_accept.get(delivery.value, (None, 0))
        # A later delivery with a higher count was handed out again by the broker; one with a
        # lower count is a stale copy the client had buffered before its lock ran out.
        if accepted_s is not None and delivery.at_s > accepted_s and (
                delivery.delivery_count > accepted_count):
            rows.append(_row("share-after-accept", delivery.partition, delivery.offset,
                             delivery.value, f"delivered to {delivery.member} "
                             f"{delivery.at_s - accepted_s:.2f} s after its ACCEPT committed"))
        if delivery.delivery_count > DELIVERY_COUNT_LIMIT:
            rows.append(_row("share-over-limit", delivery.partition, delivery.offset,
                             delivery.value, f"delivery count {delivery.delivery_count}"))
    return rows


def share_counts(history: ShareHistory) -> dict[str, int]:
    accepted = [value for _, value, _, _ in history.accepted]
    return {"share-deliveries": len(history.deliveries),
            "share-accepted": len(set(accepted)),
            "share-overlap": len(accepted) - len(set(accepted)),
            "share-released": len(history.released),
            "share-archived": len(settled(history) - set(accepted)),
            "share-failed-commits": len(history.failed_commits),
            "share-unconfirmed": len(history.maybe_accepted - settled(history)),
            "share-crashes": history.crashes, "share-stalls": history.stalls}


def _row(kind: str, partition: int, offset: int, value: str, detail: str) -> dict:
    return {"kind": kind, "partition": partition, "offset": offset, "value": value,
            "detail": detail}
