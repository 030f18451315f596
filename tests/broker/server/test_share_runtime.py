"""The share coordinators' runtime (share_runtime.py) on a real log, with a fake broker."""

from __future__ import annotations

import itertools
import uuid
from types import SimpleNamespace

from pylog_nb.broker.errors import Errors
from pylog_nb.broker.metadata.image import ClusterImage
from pylog_nb.broker.server.purgatory import ProduceDone
from pylog_nb.broker.server.replica_manager import AppendResult
from pylog_nb.broker.server.share_runtime import ShareCoordinatorRuntime
from pylog_nb.broker.share.coordinator import ShareCoordinatorShard, SharePartitionKey
from pylog_nb.broker.share.persisted import RecordState, StateBatch
from pylog_nb.broker.storage import Log, LogConfig


class FakeWrites:
    """Appends to one real log as its leader; each acks=all wait is resolved by the test."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.ids = itertools.count()
        self.waits: dict[int, object] = {}

    def append(self, topic, index, records, acks, timeout_ms):
        self.log.append_as_leader(records, leader_epoch=0)
        produce_id = next(self.ids)
        return AppendResult(Errors.NONE), produce_id

    def await_produce(self, produce_ids, then) -> None:
        self.waits[produce_ids[0]] = then

    def partition(self, topic, index):
        return SimpleNamespace(log=self.log, leader=object())

    def done(self, produce_id: int, error_code: int) -> None:
        if error_code == Errors.NONE:
            self.log.high_watermark = self.log.log_end_offset
        self.waits.pop(produce_id)(ProduceDone(0, {produce_id: error_code}))


def test_a_failed_write_keeps_the_writes_appended_after_it(tmp_path) -> None:
    """Found by the simulation (seed 28 of the share schedules): write A's append fails
    (timed out) while write B, appended after it, is still waiting for the ISR; the shard was
    rebuilt from the committed records only, so it lost B, whose append then committed and was
    answered success: a new partition leader read the state without B's acknowledgements and
    delivered ACCEPTed records again. The shard is rebuilt from the whole log, B included."""
    log = Log.open(tmp_path, LogConfig(), now_ms=lambda: 0)
    writes = FakeWrites(log)
    runtime = ShareCoordinatorRuntime(writes, metadata=ClusterImage.empty, now_ms=lambda: 0)
    shard = runtime.shards[0] = ShareCoordinatorShard(0)
    key = SharePartitionKey("g", uuid.uuid4(), 0)
    answers: list[int] = []
    runtime.apply(shard, *shard.initialize(key, 0, 0, now_ms=0)).then(
        lambda done: answers.append(done.result()))
    writes.done(0, Errors.NONE)

    def write(start_offset: int, batches: list[StateBatch]) -> None:
        current = runtime.shards[0]
        runtime.apply(current, *current.write(key, 0, 1, start_offset, batches, now_ms=0)).then(
            lambda done: answers.append(done.result()))

    write(0, [StateBatch(0, 4, RecordState.ACKNOWLEDGED, 1)])  # A
    write(0, [StateBatch(5, 9, RecordState.ACKNOWLEDGED, 1)])  # B, after A
    writes.done(1, Errors.REQUEST_TIMED_OUT)
    writes.done(2, Errors.NONE)
    assert answers == [Errors.NONE, Errors.REQUEST_TIMED_OUT, Errors.NONE]
    read = runtime.shards[0].read(key, now_ms=0)
    acknowledged = {o for b in read.state_batches if b.delivery_state == RecordState.ACKNOWLEDGED
                    for o in range(b.first_offset, b.last_offset + 1)}
    assert set(range(5, 10)) <= acknowledged, read
