"""A test shell for the transaction coordinator: the shipped ``TxnCoordinatorRuntime`` carries
out the core's actions; this shell only gives it its ports, each a fake a test can steer.

- ``writes``: the shell itself. An append to ``__transaction_state`` waits (``appends``) until
  the test ``commit``s it (its records land in ``log``, a list of (key, value) per partition)
  or ``fail``s it; with ``auto_commit`` it is committed at once, as with an ISR of one.
- ``answer``: records each answer in ``answers``, numbered 1, 2, ... in request order.
- ``send_markers``: records each WriteTxnMarkers in ``markers`` (and ``markers_open`` until
  acknowledged through ``runtime.on_markers_written``); acknowledged at once with
  ``auto_markers``.
- ``events``: the events, in ``events``; ``refill_producer_ids``: ids from 1000 on.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pylog_nb.broker.metadata.topics import TRANSACTION_STATE_TOPIC
from pylog_nb.broker.records.batch import decode_records
from pylog_nb.broker.server.config import BrokerConfig
from pylog_nb.broker.server.purgatory import ProduceDone
from pylog_nb.broker.server.replica_manager import AppendResult
from pylog_nb.broker.server.txn_runtime import TxnCoordinatorRuntime
from pylog_nb.broker.txn.actions import (
    AddOffsetsAnswer,
    AddPartitionsAnswer,
    EndTxnAnswer,
    InitProducerIdAnswer,
    TxnStateChanged,
    WriteTxnMarkers,
)
from pylog_nb.broker.txn.coordinator import TransactionCoordinator
from pylog_nb.broker.txn.records import decode_key
from pylog_nb.broker.types import ACKS_ALL

Record = tuple[bytes, bytes | None]
TIMEOUT_MS = 60_000
Answer = InitProducerIdAnswer | AddPartitionsAnswer | AddOffsetsAnswer | EndTxnAnswer
FIRST_PRODUCER_ID = 1000


@dataclass(slots=True)
class Append:
    """One acks=all append to ``__transaction_state`` the runtime waits for."""

    partition: int
    records: list[Record]
    now_ms: int  # the records' timestamp: when the coordinator asked
    then: Callable[[ProduceDone], None] | None = None  # set by await_produce

    @property
    def transactional_id(self) -> str | None:
        return decode_key(self.records[0][0])


class Events(list):
    """The runtime's events port: a list whose ``append`` shows each event to ``seen`` first."""

    def __init__(self, seen: Callable[[TxnStateChanged], None]) -> None:
        super().__init__()
        self.seen = seen

    def append(self, event: TxnStateChanged) -> None:  # type: ignore[override]
        self.seen(event)
        super().append(event)


class Shell:
    """The ports of a ``TxnCoordinatorRuntime``: appends commit and markers land unless told not.

    ``coordinator_options`` go to the ``TransactionCoordinator`` the runtime drives (options
    ``BrokerConfig`` has no field for, such as ``transactional_id_expiration_ms``)."""

    def __init__(self, partitions: int = 1, offsets_partitions: int = 50,
                 **coordinator_options: int) -> None:
        self.partitions = partitions
        self.offsets_partitions = offsets_partitions
        self.coordinator_options = coordinator_options
        self.config = BrokerConfig(
            broker_id=1, data_dir=Path("/nonexistent"),
            transaction_state_num_partitions=partitions,
            offsets_topic_num_partitions=offsets_partitions)
        self.producer_id_next = FIRST_PRODUCER_ID
        self._producer_ids_available = True
        self.log: dict[int, list[Record]] = defaultdict(list)
        self.now_ms = 0
        self.auto_commit = True
        self.auto_markers = True
        self.appends: dict[int, Append] = {}  # by produce id, oldest first
        self.markers: list[WriteTxnMarkers] = []  # every marker request ever sent
        self.markers_open: list[WriteTxnMarkers] = []  # not yet acknowledged
        self.answers: dict[int, Answer] = {}  # by request number
        self.events = Events(self.on_event)
        self._produce_ids = itertools.count()
        self._request_numbers = itertools.count(1)
        self.runtime = self._start()
        for partition in range(partitions):
            self.runtime.run(self.coordinator.begin_load(partition))
            self.runtime.run(self.coordinator.load(partition, [], self.now_ms, 0))

    def _start(self, producer_ids: list[int] | None = None) -> TxnCoordinatorRuntime:
        """A runtime on these ports, with a fresh coordinator core."""
        runtime = TxnCoordinatorRuntime(
            self.config, self, send_markers=self.send_markers,
            refill_producer_ids=self.refill_producer_ids,
            complete_group_txn=self.complete_group_txn, events=self.events,
            now_ms=lambda: self.now_ms)
        runtime.core = TransactionCoordinator(
            self.partitions, self.offsets_partitions, runtime.take_producer_id,
            transaction_max_timeout_ms=self.config.transaction_max_timeout_ms,
            **self.coordinator_options)
        self.runtime = runtime
        runtime.add_producer_ids(producer_ids or [])
        self.refill_producer_ids()
        return runtime

    @property
    def coordinator(self) -> TransactionCoordinator:
        return self.runtime.core

    # -- the ports -------------------------------------------------------------------------------

    def append(self, topic: str, index: int, records, acks: int, timeout_ms: int
               ) -> tuple[AppendResult, int | None]:
        """``writes.append``: the batch waits for ``commit`` or ``fail`` (see ``await_produce``)."""
        assert (topic, acks) == (TRANSACTION_STATE_TOPIC, ACKS_ALL), (topic, acks)
        decoded = decode_records(records)
        produce_id = next(self._produce_ids)
        self.appends[produce_id] = Append(
            index, [(r.key, r.value) for r in decoded], decoded[0].timestamp_ms)
        return AppendResult(0, len(self.log[index])), produce_id

    def append_marker(self, topic: str, index: int, producer_id: int, producer_epoch: int,
                      coordinator_epoch: int, committed: bool, timeout_ms: int
                      ) -> tuple[AppendResult, int | None]:
        raise AssertionError("the partition-leader side is not part of these tests")

    def await_produce(self, produce_ids: list[int],
                      then: Callable[[ProduceDone], None]) -> None:
        (produce_id,) = produce_ids
        self.appends[produce_id].then = then
        if self.auto_commit:
            self.commit(produce_id)

    def answer(self, number: int, answer: Answer | None) -> None:
        assert answer is not None, "the runtime closed with requests parked"
        assert number not in self.answers, answer
        self.answers[number] = answer

    def send_markers(self, markers: WriteTxnMarkers) -> None:
        self.markers.append(markers)
        self.markers_open.append(markers)
        if self.auto_markers:
            self._ack(markers)

    def refill_producer_ids(self) -> None:
        if not self._producer_ids_available:
            return
        count = self.runtime.wants_producer_ids()
        self.runtime.add_producer_ids(
            list(range(self.producer_id_next, self.producer_id_next + count)))
        self.producer_id_next += count

    def complete_group_txn(self, partition: int, producer_id: int, committed: bool) -> None:
        raise AssertionError("markers are not written by these tests")

    def on_event(self, event: TxnStateChanged) -> None:
        """Each event as the runtime reports it (a hook for checks)."""

    @property
    def producer_ids_available(self) -> bool:
        return self._producer_ids_available

    @producer_ids_available.setter
    def producer_ids_available(self, available: bool) -> None:
        """False: the controller has no ids to give, and the prefetched ones are used up."""
        self._producer_ids_available = available
        if available:
            self.refill_producer_ids()
        else:
            self.runtime.producer_ids.clear()

    # -- the test's moves ------------------------------------------------------------------------

    def commit(self, produce_id: int | None = None) -> None:
        """Commit the oldest (or the given) outstanding append: it lands in the log."""
        produce_id = min(self.appends) if produce_id is None else produce_id
        append = self.appends.pop(produce_id)
        self.log[append.partition].extend(append.records)
        assert append.then is not None
        append.then(ProduceDone(produce_id, {produce_id: 0}))

    def fail(self, produce_id: int | None = None, error_code: int = 19) -> None:
        """Fail an outstanding append (default NOT_ENOUGH_REPLICAS)."""
        produce_id = min(self.appends) if produce_id is None else produce_id
        append = self.appends.pop(produce_id)
        assert append.then is not None
        append.then(ProduceDone(produce_id, {produce_id: error_code}))

    def _ack(self, markers: WriteTxnMarkers, error_code: int = 0) -> None:
        self.markers_open.remove(markers)
        self.runtime.on_markers_written(markers, {tp: error_code for tp in markers.partitions})

    def ack_markers(self, error_code: int = 0) -> None:
        while self.markers_open:
            self._ack(self.markers_open[0], error_code)

    def tick(self, advance_ms: int = 0) -> None:
        self.now_ms += advance_ms
        self.runtime.tick(self.now_ms)

    def failover(self, coordinator_epoch: int = 1) -> None:
        """A new coordinator rebuilt from the committed records; outstanding work is lost (the
        producer ids the old one had not handed out go to the new one, so ids stay dense)."""
        self.appends.clear()
        self.markers_open.clear()
        runtime = self._start(list(self.runtime.producer_ids))
        for partition in range(self.partitions):
            runtime.run(runtime.core.begin_load(partition))
            runtime.run(runtime.core.load(
                partition, list(self.log[partition]), self.now_ms, coordinator_epoch))

    # -- requests --------------------------------------------------------------------------------

    def _ask(self, call) -> Answer | None:
        """Ask the runtime: the answer if it came at once (later ones land in ``answers``
        under the request's number, counted from 1)."""
        number = next(self._request_numbers)
        self.runtime.ask(call).then(lambda answer: self.answer(number, answer.result()))
        return self.answers.get(number)

    def init(
        self, txn: str = "t", timeout_ms: int = TIMEOUT_MS, **kwargs: int
    ) -> InitProducerIdAnswer | None:
        answer = self._ask(lambda request_id: self.coordinator.init_producer_id(
            txn, timeout_ms, self.now_ms, request_id, **kwargs))
        assert answer is None or isinstance(answer, InitProducerIdAnswer)
        return answer

    def add(
        self,
        txn: str,
        pid: int,
        epoch: int,
        partitions: list[tuple[str, int]],
        **kwargs: int | bool,
    ) -> AddPartitionsAnswer | None:
        answer = self._ask(lambda request_id: self.coordinator.add_partitions(
            txn, pid, epoch, partitions, self.now_ms, request_id, **kwargs))  # type: ignore[arg-type]
        assert answer is None or isinstance(answer, AddPartitionsAnswer)
        return answer

    def add_offsets(
        self, txn: str, pid: int, epoch: int, group: str, **kwargs: int
    ) -> AddOffsetsAnswer | None:
        answer = self._ask(lambda request_id: self.coordinator.add_offsets(
            txn, pid, epoch, group, self.now_ms, request_id, **kwargs))
        assert answer is None or isinstance(answer, AddOffsetsAnswer)
        return answer

    def end(
        self, txn: str, pid: int, epoch: int, committed: bool, **kwargs: int
    ) -> EndTxnAnswer | None:
        answer = self._ask(lambda request_id: self.coordinator.end_txn(
            txn, pid, epoch, committed, self.now_ms, request_id, **kwargs))
        assert answer is None or isinstance(answer, EndTxnAnswer)
        return answer

    def state(self, txn: str = "t") -> str:
        meta = self.coordinator.transaction(txn)
        assert meta is not None
        return meta.state.kafka_name
