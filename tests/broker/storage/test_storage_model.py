"""Random sequences of appends, truncations, retention, rolls, clean restarts and crashes
(including torn tails), checked after every step against a plain-list model of the log."""

from __future__ import annotations

import itertools
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.storage_helpers import batches_in, build_batch, read_all, records_in

from pylog_nb.broker.storage import Log, LogConfig

configs = st.builds(
    LogConfig,
    segment_bytes=st.sampled_from([300, 600, 5_000]),
    index_interval_bytes=st.sampled_from([0, 100, 4_096]),
    segment_index_bytes=st.sampled_from([24, 48, 10 * 1024 * 1024]),
    retention_ms=st.just(-1),
    retention_bytes=st.sampled_from([0, 2_000]),
)


@dataclass
class Batch:
    base_offset: int
    values: list[bytes]
    max_timestamp_ms: int

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.values)


@dataclass
class Model:
    batches: list[Batch] = field(default_factory=list)
    log_start: int = 0
    log_end: int = 0
    epoch: int = 0
    epochs: list[tuple[int, int]] = field(default_factory=list)

    def records(self) -> list[tuple[int, bytes]]:
        return [
            (b.base_offset + i, v)
            for b in self.batches
            for i, v in enumerate(b.values)
            if b.base_offset + i >= self.log_start
        ]

    def truncate(self, offset: int) -> None:
        """Kafka's truncateTo: whole batches, below the log start the log restarts empty."""
        if offset >= self.log_end:
            return
        if offset < self.log_start:
            self.restart_at(offset)
            return
        self.batches = [b for b in self.batches if b.next_offset <= offset]
        self.log_end = self.batches[-1].next_offset if self.batches else self.log_start
        if self.log_end < self.log_start:
            self.restart_at(self.log_start)
        self.epochs = [(e, s) for e, s in self.epochs if s < self.log_end]

    def lose_last_batch(self) -> None:
        """A torn last batch is cut by recovery; the log start offset never moves back."""
        self.batches.pop()
        self.log_end = self.batches[-1].next_offset if self.batches else self.log_start
        if self.log_end < self.log_start:
            self.restart_at(self.log_start)

    def reload(self) -> None:
        """On open, like Kafka, epoch entries without data (starting at the LEO) are dropped."""
        self.epochs = [(e, s) for e, s in self.epochs if s < self.log_end]

    def restart_at(self, offset: int) -> None:
        self.batches, self.epochs = [], []
        self.log_start = self.log_end = offset

    def move_log_start(self, offset: int) -> None:
        if offset <= self.log_start:
            return
        self.log_start = offset
        dropped = [entry for entry in self.epochs if entry[1] <= offset]
        self.epochs = [entry for entry in self.epochs if entry[1] > offset]
        if dropped:
            self.epochs.insert(0, (dropped[-1][0], offset))

    def offset_for_timestamp(self, timestamp_ms: int):
        for b in self.batches:
            if b.next_offset > self.log_start and b.max_timestamp_ms >= timestamp_ms:
                return (max(b.base_offset, self.log_start), b.max_timestamp_ms)
        return None


appends = st.tuples(
    st.just("append"),
    st.lists(
        st.tuples(
            st.lists(st.binary(max_size=120), min_size=1, max_size=4),
            st.integers(0, 2_000),  # timestamps out of order on purpose
        ),
        min_size=1,
        max_size=3,
    ),
)
fractions = st.floats(0, 1)
operations = st.one_of(
    appends,
    appends,
    appends,
    st.tuples(st.just("bump_epoch")),
    st.tuples(st.just("truncate"), fractions),
    st.tuples(st.just("truncate_fully"), st.integers(0, 30)),
    st.tuples(st.just("delete_records"), fractions),
    st.tuples(st.just("retention")),
    st.tuples(st.just("roll")),
    st.tuples(st.just("reopen")),
    st.tuples(st.just("crash")),
    st.tuples(st.just("crash_torn"), st.sampled_from(["garbage", "cut"])),
)


class Harness:
    def __init__(self, directory: Path, config: LogConfig) -> None:
        self.directory = directory
        self.config = config
        self.log = Log.open(directory, config)
        self.model = Model()

    def apply(self, op) -> None:
        getattr(self, "do_" + op[0])(*op[1:])

    def do_append(self, batches) -> None:
        data = bytearray()
        for values, timestamp_ms in batches:
            data += build_batch(values, timestamp_ms=timestamp_ms)
        info = self.log.append_as_leader(data, leader_epoch=self.model.epoch)
        m = self.model
        assert info.first_offset == m.log_end
        if not m.epochs or m.epochs[-1][0] != m.epoch:
            # Kafka's assign: an entry starting where the new epoch starts is superseded.
            m.epochs = [(e, s) for e, s in m.epochs if s < m.log_end]
            m.epochs.append((m.epoch, m.log_end))
        for values, timestamp_ms in batches:
            m.batches.append(Batch(m.log_end, values, timestamp_ms + len(values) - 1))
            m.log_end += len(values)
        assert info.last_offset == m.log_end - 1

    def do_bump_epoch(self) -> None:
        self.model.epoch += 1

    def _offset_at(self, fraction: float) -> int:
        m = self.model
        return m.log_start + int(fraction * (m.log_end - m.log_start))

    def do_truncate(self, fraction: float) -> None:
        offset = self._offset_at(fraction)
        self.log.truncate_to(offset)
        self.model.truncate(offset)

    def do_truncate_fully(self, delta: int) -> None:
        offset = self.model.log_end + delta
        self.log.truncate_fully_and_start_at(offset)
        self.model.restart_at(offset)

    def do_delete_records(self, fraction: float) -> None:
        offset = self._offset_at(fraction)
        self.log.high_watermark = self.log.log_end_offset
        self.log.delete_records_before(offset)
        self.model.move_log_start(offset)

    def do_retention(self) -> None:
        self.log.high_watermark = self.log.log_end_offset
        before = self.model.log_start
        self.log.enforce_retention(now_ms=0)
        assert before <= self.log.log_start_offset <= self.model.log_end
        assert (
            self.log.size_bytes <= self.config.retention_bytes + self.config.segment_bytes + 2_000
        )
        self.model.move_log_start(self.log.log_start_offset)

    def do_roll(self) -> None:
        self.log.roll()

    def do_reopen(self) -> None:
        self.log.close()
        self.log = Log.open(self.directory, self.config)
        self.model.reload()
        assert self.log.load_info.clean_shutdown

    def do_crash(self) -> None:
        self.log.close_handlers()
        self.log = Log.open(self.directory, self.config)
        self.model.reload()

    def do_crash_torn(self, how: str) -> None:
        path = self.log.segments[-1].path
        self.log.close_handlers()
        data = path.read_bytes()
        if how == "cut" and data:
            last = batches_in_file(data)[-1]
            path.write_bytes(data[: last + (len(data) - last) // 2])
            self.model.lose_last_batch()
        else:
            path.write_bytes(data + os.urandom(50))
        self.log = Log.open(self.directory, self.config)
        self.model.reload()
        assert not self.log.load_info.clean_shutdown

    def check(self, step: int) -> None:
        log, m = self.log, self.model
        assert (log.log_start_offset, log.log_end_offset) == (m.log_start, m.log_end)
        assert m.log_start <= log.high_watermark <= m.log_end
        assert read_all(log, max_bytes=100 + (step * 97) % 900) == m.records()
        assert list(log.leader_epoch_cache.entries) == m.epochs
        segments = log.segments
        for before, after in itertools.pairwise(segments):
            assert before.next_offset == after.base_offset
        assert segments[-1].next_offset == m.log_end
        for timestamp_ms in (0, 700, 1_500, 2_003, 5_000):
            assert log.offset_for_timestamp(timestamp_ms) == m.offset_for_timestamp(timestamp_ms)


def batches_in_file(data: bytes) -> list[int]:
    """Start positions of the batches of a .log file."""
    positions, pos = [], 0
    while pos < len(data):
        positions.append(pos)
        pos += int.from_bytes(data[pos + 8 : pos + 12], "big") + 12
    return positions


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(configs, st.lists(operations, max_size=40))
def test_log_matches_a_list_model_under_random_operations(config, ops):
    with tempfile.TemporaryDirectory() as tmp:
        harness = Harness(Path(tmp) / "topic-0", config)
        try:
            for step, op in enumerate(ops):
                harness.apply(op)
                harness.check(step)
        finally:
            harness.log.close_handlers()


def test_records_in_helper_reads_what_build_batch_wrote():
    data = build_batch([b"a", b"b"])
    assert records_in(data) == [(0, b"a"), (1, b"b")]
    assert batches_in(data)[0].records_count == 2
