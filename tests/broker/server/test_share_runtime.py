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
from pylog_nb.broker.share.coordinator import SharePartitionKey
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


def _leading(writes: FakeWrites) -> ShareCoordinatorRuntime:
    """A runtime that leads partition 0 of __share_group_state, on ``writes``' log."""
    runtime = ShareCoordinatorRuntime(writes, metadata=ClusterImage.empty, now_ms=lambda: 0)
    runtime.on_role_change(0, writes.partition("__share_group_state", 0))
    return runtime


def test_a_failed_write_keeps_the_writes_appended_after_it(tmp_path) -> None:
    """Found by the simulation (seed 28 of the share schedules): write A's append fails
    (timed out) while write B, appended after it, is still waiting for the ISR; the shard was
    rebuilt from the committed records only, so it lost B, whose append then committed and was
    answered success: a new partition leader read the state without B's acknowledgements and
    delivered ACCEPTed records again. The shard is rebuilt from the whole log, B included."""
    log = Log.open(tmp_path, LogConfig(), now_ms=lambda: 0)
    writes = FakeWrites(log)
    runtime = _leading(writes)
    shard = runtime.shards[0]
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


def _answers(pending, into: list[int]) -> None:
    pending.then(lambda done: into.append(done.result()))


def test_an_answer_that_writes_nothing_waits_for_the_appends_before_it(tmp_path) -> None:
    """Found by the simulation (seed 357 of the share schedules): a partitioned coordinator
    answered a read from a share partition initialized only in its own log (the append never
    committed), and the leader built on a state no successor had. A read waits for the appends
    made before it; one made after it does not hold it back."""
    writes = FakeWrites(Log.open(tmp_path, LogConfig(), now_ms=lambda: 0))
    runtime = _leading(writes)
    shard, key = runtime.shards[0], SharePartitionKey("g", uuid.uuid4(), 0)
    answers: list[int] = []
    _answers(runtime.apply(shard, *shard.initialize(key, 0, 0, now_ms=0)), answers)
    read = shard.read_summary(key)
    _answers(runtime.apply(shard, read.error_code, []), answers)
    _answers(runtime.apply(shard, *shard.write(key, 0, 0, 0, [], now_ms=0)), answers)
    assert answers == []  # the initialization is not committed: neither is what it read
    writes.done(0, Errors.REQUEST_TIMED_OUT)
    assert answers == [Errors.REQUEST_TIMED_OUT, Errors.NONE]  # the write's answer still waits
    writes.done(1, Errors.NONE)
    assert answers == [Errors.REQUEST_TIMED_OUT, Errors.NONE, Errors.NONE]


def test_a_loaded_tail_holds_answers_until_committed_and_a_resignation_ends_them(
        tmp_path) -> None:
    """A coordinator that loaded records past the high watermark answers from them only once
    they are committed; if it resigns first, the held answers are NOT_COORDINATOR."""
    log = Log.open(tmp_path, LogConfig(), now_ms=lambda: 0)
    writes = FakeWrites(log)
    first = _leading(writes)
    key = SharePartitionKey("g", uuid.uuid4(), 0)
    first.apply(first.shards[0], *first.shards[0].initialize(key, 0, 0, now_ms=0))
    for successor_commits in (True, False):  # a new leader with the record uncommitted
        runtime = _leading(writes)
        shard, answers = runtime.shards[0], []
        assert shard.state(key) is not None
        _answers(runtime.apply(shard, shard.read_summary(key).error_code, []), answers)
        runtime.tick()
        assert answers == []
        if successor_commits:
            log.high_watermark = log.log_end_offset
            runtime.tick()
            assert answers == [Errors.NONE]
            log.high_watermark = 0
        else:
            runtime.on_role_change(0, None)
            assert answers == [Errors.NOT_COORDINATOR]
