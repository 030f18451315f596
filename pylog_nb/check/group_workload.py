"""A consumer group reading the check's topic under faults: at-least-once through commits.

Theory of operation (``--group-protocol classic|consumer|mixed``):

- While the producers write, ``GROUP_MEMBERS`` confluent-kafka consumers of one group
  (subscribed, auto commit off) poll the topic and commit what they consumed, synchronously,
  every ``COMMIT_INTERVAL_S``. With ``consumer`` they speak KIP-848 (``group.protocol=consumer``,
  the broker assigns and members revoke incrementally); with ``classic`` JoinGroup/SyncGroup;
  with ``mixed`` the members alternate (the n-th to join speaks ``consumer`` when n is odd), so
  the group is converted between the two as they come and go (KIP-848's online upgrade and
  downgrade), and classic members are served inside a consumer group.
  Every ``CHURN_INTERVAL_S`` one member (the seed picks which) closes and a new one joins, so
  rebalances overlap with the nemesis' broker, controller and coordinator faults.
- After the faults heal, every member commits and closes; one fresh member of the group
  resumes from the committed offsets and reads on to the final high watermarks.
- The guarantee Kafka gives a group that commits only what it consumed is at-least-once: every
  acknowledged record is consumed by some member, during the run or by the resumed member.
  ``group-lost`` is an acknowledged value nobody in the group consumed although the resumed
  read reached the high watermark of its partition (a committed offset that skipped it, or an
  assignment that left a partition unread). Values consumed more than once are counted, not
  judged: rebalances and failovers re-deliver what was consumed after the last commit.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException, TopicPartition

from pylog_nb.client.config import client_config

GROUP_MEMBERS = 3
COMMIT_INTERVAL_S = 0.5
CHURN_INTERVAL_S = 10.0
POLL_S = 0.1
RESUME_TIMEOUT_S = 120.0  # the resumed member's read to the high watermarks
LOOK_INTERVAL_S = 1.0  # how often the resumed member asks where the group stands
CLOSE_TIMEOUT_S = 30.0
PROTOCOLS = ("classic", "consumer", "mixed")
MEMBER_PROTOCOLS = ("classic", "consumer")  # what one member speaks


@dataclass
class GroupHistory:
    """What the group consumed: (member, partition, offset, value) rows, and the final state."""

    protocol: str
    group_id: str
    consumed: list[tuple[str, int, int, str]] = field(default_factory=list)
    resumed_to: dict[int, int] = field(default_factory=dict)  # partition -> position reached
    targets: dict[int, int] = field(default_factory=dict)  # partition -> final high watermark
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, member: str, partition: int, offset: int, value: str) -> None:
        with self.lock:
            self.consumed.append((member, partition, offset, value))


def member_protocol(protocol: str, joined: int) -> str:
    """What the ``joined``-th member (from 0) of a group of ``protocol`` speaks."""
    assert protocol in PROTOCOLS, protocol
    return MEMBER_PROTOCOLS[joined % 2] if protocol == "mixed" else protocol


def member_config(bootstrap: str, group_id: str, protocol: str, client_id: str) -> dict:
    assert protocol in MEMBER_PROTOCOLS, protocol
    conf = {"group.id": group_id, "client.id": client_id, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100}
    if protocol == "consumer":
        conf["group.protocol"] = "consumer"
    else:
        conf["session.timeout.ms"] = 10_000
    return client_config(bootstrap, **conf)


class _Member(threading.Thread):
    def __init__(self, bootstrap: str, topic: str, history: GroupHistory, name: str,
                 protocol: str) -> None:
        super().__init__(name=f"check-group-{name}", daemon=True)
        self.topic, self.history, self.member = topic, history, name
        self.consumer = Consumer(member_config(bootstrap, history.group_id, protocol, name))
        self.stopping = threading.Event()

    def run(self) -> None:
        self.consumer.subscribe([self.topic])
        next_commit_s = time.monotonic() + COMMIT_INTERVAL_S
        consumed = False
        try:
            while not self.stopping.is_set():
                consumed = self._take(self.consumer.poll(POLL_S)) or consumed
                if consumed and time.monotonic() >= next_commit_s:
                    self._commit()
                    consumed, next_commit_s = False, time.monotonic() + COMMIT_INTERVAL_S
            self._commit()
        finally:
            self.consumer.close()

    def _take(self, message) -> bool:
        return _record(self.history, self.member, message)

    def _commit(self) -> None:
        try:
            self.consumer.commit(asynchronous=False)
        except KafkaException as error:  # a rebalance or failover refused it: consumed again
            self.history.errors.append(f"{self.member}: {error.args[0].str()}")


class GroupReaders:
    """``GROUP_MEMBERS`` members consuming ``topic`` in one group until ``stop``."""

    def __init__(self, bootstrap: str, topic: str, history: GroupHistory, seed: int) -> None:
        self.bootstrap, self.topic, self.history = bootstrap, topic, history
        self.rng = random.Random(seed)
        self.members = [self._member(index) for index in range(GROUP_MEMBERS)]
        self.joined = GROUP_MEMBERS
        self.stopping = threading.Event()
        self.churn = threading.Thread(target=self._churn, name="check-group-churn", daemon=True)

    def _member(self, index: int) -> _Member:
        return _Member(self.bootstrap, self.topic, self.history, f"m{index}",
                       member_protocol(self.history.protocol, index))

    def start(self) -> None:
        for member in self.members:
            member.start()
        self.churn.start()

    def _churn(self) -> None:
        while not self.stopping.wait(CHURN_INTERVAL_S):
            slot = self.rng.randrange(len(self.members))
            leaving = self.members[slot]
            leaving.stopping.set()
            leaving.join(CLOSE_TIMEOUT_S)
            self.members[slot] = self._member(self.joined)
            self.joined += 1
            self.members[slot].start()

    def stop(self) -> None:
        self.stopping.set()
        self.churn.join(CLOSE_TIMEOUT_S + CHURN_INTERVAL_S)
        for member in self.members:
            member.stopping.set()
        for member in self.members:
            member.join(CLOSE_TIMEOUT_S)


def resume_and_read(bootstrap: str, topic: str, history: GroupHistory,
                    targets: dict[int, int]) -> None:
    """One fresh member resumes from the committed offsets and reads to ``targets``."""
    history.targets = dict(targets)
    protocol = member_protocol(history.protocol, 0)  # mixed: classic, the group converted back
    consumer = Consumer(member_config(bootstrap, history.group_id, protocol, "resumed"))
    consumer.subscribe([topic])
    deadline_s = time.monotonic() + RESUME_TIMEOUT_S
    reached: dict[int, int] = {}
    next_look_s = 0.0
    try:
        while time.monotonic() < deadline_s:
            if time.monotonic() >= next_look_s:
                if _done(consumer, topic, targets, reached):
                    break
                next_look_s = time.monotonic() + LOOK_INTERVAL_S
            _record(history, "resumed", consumer.poll(POLL_S))
    finally:
        consumer.close()
    history.resumed_to = reached


def _record(history: GroupHistory, member: str, message) -> bool:
    """Keep a consumed record in the history; False for no record (None, an error)."""
    if message is None or message.error() is not None:
        return False
    partition, offset, value = message.partition(), message.offset(), message.value()
    assert partition is not None and offset is not None and value is not None, message
    history.add(member, partition, offset, value.decode())
    return True


def _done(consumer: Consumer, topic: str, targets: dict[int, int],
          reached: dict[int, int]) -> bool:
    assigned = consumer.assignment()
    if assigned:
        for tp in consumer.position(assigned):
            if tp.offset >= 0:
                reached[tp.partition] = max(reached.get(tp.partition, 0), tp.offset)
    committed = _committed(consumer, topic, targets)
    for partition, offset in committed.items():
        reached[partition] = max(reached.get(partition, 0), offset)
    return all(reached.get(p, 0) >= high for p, high in targets.items())


def _committed(consumer: Consumer, topic: str, targets: dict[int, int]) -> dict[int, int]:
    """The group's committed offsets: what it consumed, by its own account."""
    try:
        answer = consumer.committed([TopicPartition(topic, p) for p in targets], timeout=1.0)
    except KafkaException:
        return {}
    return {tp.partition: tp.offset for tp in answer if tp.offset >= 0}


def group_anomalies(history: GroupHistory, acked: list[tuple[int, int, str]]) -> list[dict]:
    """``group-lost`` rows: acknowledged (partition, offset, value) nobody in the group
    consumed, in partitions the resumed member read to the high watermark."""
    consumed = {value for _, _, _, value in history.consumed}
    complete = {p for p, high in history.targets.items()
                if high >= 0 and history.resumed_to.get(p, 0) >= high}
    return [{"kind": "group-lost", "partition": partition, "offset": offset, "value": value,
             "detail": f"acked at {partition}:{offset}, consumed by no member of "
                       f"{history.group_id} ({history.protocol} protocol)"}
            for partition, offset, value in acked
            if partition in complete and value not in consumed]


def group_counts(history: GroupHistory) -> dict[str, int]:
    values = [value for _, _, _, value in history.consumed]
    return {"group-consumed": len(set(values)),
            "group-redelivered": len(values) - len(set(values)),
            "group-refused-commits": len(history.errors),
            "group-incomplete": sum(1 for p, high in history.targets.items()
                                    if high < 0 or history.resumed_to.get(p, 0) < high)}
