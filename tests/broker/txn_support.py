"""A test shell for the sans-IO transaction coordinator: a log per partition, clock, markers."""

from __future__ import annotations

from collections import defaultdict

from pylog_nb.broker.txn.actions import (
    Action,
    AddOffsetsAnswer,
    AddPartitionsAnswer,
    AppendRecords,
    EndTxnAnswer,
    InitProducerIdAnswer,
    TxnStateChanged,
    WriteTxnMarkers,
)
from pylog_nb.broker.txn.coordinator import TransactionCoordinator

Record = tuple[bytes, bytes | None]
TIMEOUT_MS = 60_000
Answer = InitProducerIdAnswer | AddPartitionsAnswer | AddOffsetsAnswer | EndTxnAnswer


class Shell:
    """Carries out the coordinator's actions: appends commit and markers land unless told not."""

    def __init__(self, partitions: int = 1, offsets_partitions: int = 50) -> None:
        self.partitions = partitions
        self.offsets_partitions = offsets_partitions
        self.producer_id_next = 1000
        self.producer_ids_available = True
        self.log: dict[int, list[Record]] = defaultdict(list)
        self.now_ms = 0
        self.auto_commit = True
        self.auto_markers = True
        self.appends: dict[int, AppendRecords] = {}
        self.markers: list[WriteTxnMarkers] = []  # every marker request ever sent
        self.markers_open: list[WriteTxnMarkers] = []  # not yet acknowledged
        self.answers: dict[int, Answer] = {}
        self.events: list[TxnStateChanged] = []
        self.request_id_next = 0
        self.coordinator = self.new_coordinator()
        for partition in range(partitions):
            self.coordinator.begin_load(partition)
            self.coordinator.load(partition, [], self.now_ms, 0)

    def new_coordinator(self) -> TransactionCoordinator:
        return TransactionCoordinator(self.partitions, self.offsets_partitions, self.producer_id)

    def producer_id(self) -> int | None:
        if not self.producer_ids_available:
            return None
        self.producer_id_next += 1
        return self.producer_id_next - 1

    # -- carrying out actions --------------------------------------------------------------------

    def feed(self, actions: list[Action]) -> None:
        queue = list(actions)
        while queue:
            action = queue.pop(0)
            queue.extend(self._carry_out(action))

    def _carry_out(self, action: Action) -> list[Action]:
        if isinstance(action, AppendRecords):
            self.appends[action.append_id] = action
            return self._commit(action.append_id) if self.auto_commit else []
        if isinstance(action, WriteTxnMarkers):
            self.markers.append(action)
            self.markers_open.append(action)
            return self._ack(action) if self.auto_markers else []
        if isinstance(action, TxnStateChanged):
            self.events.append(action)
            return []
        assert isinstance(
            action, InitProducerIdAnswer | AddPartitionsAnswer | AddOffsetsAnswer | EndTxnAnswer
        )
        assert action.request_id not in self.answers, action
        self.answers[action.request_id] = action
        return []

    def _commit(self, append_id: int) -> list[Action]:
        append = self.appends.pop(append_id)
        self.log[append.partition].extend(append.records)
        return self.coordinator.on_appended(append_id, 0, self.now_ms)

    def commit(self, append_id: int | None = None) -> None:
        """Commit the oldest (or the given) outstanding append."""
        append_id = min(self.appends) if append_id is None else append_id
        self.feed(self._commit(append_id))

    def fail(self, append_id: int | None = None, error_code: int = 19) -> None:
        """Fail an outstanding append (default NOT_ENOUGH_REPLICAS)."""
        append_id = min(self.appends) if append_id is None else append_id
        self.appends.pop(append_id)
        self.feed(self.coordinator.on_appended(append_id, error_code, self.now_ms))

    def _ack(self, markers: WriteTxnMarkers, error_code: int = 0) -> list[Action]:
        self.markers_open.remove(markers)
        results = {tp: error_code for tp in markers.partitions}
        return self.coordinator.on_markers_written(
            markers.transactional_id,
            markers.producer_id,
            markers.producer_epoch,
            results,
            self.now_ms,
        )

    def ack_markers(self, error_code: int = 0) -> None:
        while self.markers_open:
            self.feed(self._ack(self.markers_open[0], error_code))

    def tick(self, advance_ms: int = 0) -> None:
        self.now_ms += advance_ms
        self.feed(self.coordinator.tick(self.now_ms))

    def failover(self, coordinator_epoch: int = 1) -> None:
        """A new coordinator rebuilt from the committed records; outstanding work is lost."""
        self.appends.clear()
        self.markers_open.clear()
        self.coordinator = self.new_coordinator()
        for partition in range(self.partitions):
            self.coordinator.begin_load(partition)
            self.feed(
                self.coordinator.load(
                    partition, list(self.log[partition]), self.now_ms, coordinator_epoch
                )
            )

    # -- requests --------------------------------------------------------------------------------

    def _request(self) -> int:
        self.request_id_next += 1
        return self.request_id_next

    def init(
        self, txn: str = "t", timeout_ms: int = TIMEOUT_MS, **kwargs: int
    ) -> InitProducerIdAnswer | None:
        request_id = self._request()
        self.feed(
            self.coordinator.init_producer_id(txn, timeout_ms, self.now_ms, request_id, **kwargs)
        )
        answer = self.answers.get(request_id)
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
        request_id = self._request()
        self.feed(
            self.coordinator.add_partitions(
                txn, pid, epoch, partitions, self.now_ms, request_id, **kwargs  # type: ignore[arg-type]
            )
        )
        answer = self.answers.get(request_id)
        assert answer is None or isinstance(answer, AddPartitionsAnswer)
        return answer

    def add_offsets(
        self, txn: str, pid: int, epoch: int, group: str, **kwargs: int
    ) -> AddOffsetsAnswer | None:
        request_id = self._request()
        self.feed(
            self.coordinator.add_offsets(txn, pid, epoch, group, self.now_ms, request_id, **kwargs)
        )
        answer = self.answers.get(request_id)
        assert answer is None or isinstance(answer, AddOffsetsAnswer)
        return answer

    def end(
        self, txn: str, pid: int, epoch: int, committed: bool, **kwargs: int
    ) -> EndTxnAnswer | None:
        request_id = self._request()
        self.feed(
            self.coordinator.end_txn(txn, pid, epoch, committed, self.now_ms, request_id, **kwargs)
        )
        answer = self.answers.get(request_id)
        assert answer is None or isinstance(answer, EndTxnAnswer)
        return answer

    def state(self, txn: str = "t") -> str:
        meta = self.coordinator.transaction(txn)
        assert meta is not None
        return meta.state.kafka_name
