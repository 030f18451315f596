"""A real crash: a child process appends in a loop, reports what it appended, and is SIGKILLed.

Every offset it acknowledged must be readable after reopening, with the value it wrote, and the
log must keep working (and keep being killable) across several rounds in the same directory.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.storage_helpers import read_all

from pylog_nb.broker.storage import Log, LogConfig

REPO_ROOT = Path(__file__).resolve().parents[3]
ROUND_TIMEOUT_S = 20
CONFIG = {"segment_bytes": 4096, "index_interval_bytes": 256, "retention_ms": -1}

CHILD = r"""
import sys
from pathlib import Path
from kafka.record.default_records import DefaultRecordBatchBuilder
from pylog_nb.broker.storage import Log, LogConfig

directory, flush_every, config = Path(sys.argv[1]), int(sys.argv[2]), eval(sys.argv[3])
log = Log.open(directory, LogConfig(**config))
print("ready", log.log_end_offset, flush=True)
i = 0
while True:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=0, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=10**8)
    leo = log.log_end_offset
    for j in range(1 + i % 4):
        builder.append(j, 1_000 + i, None, b"offset-%d" % (leo + j) + b"." * (i % 50), [])
    info = log.append_as_leader(builder.build(), leader_epoch=0)
    if flush_every and i % flush_every == 0:
        log.flush()
    print(info.first_offset, info.last_offset, flush=True)
    i += 1
"""


def run_and_kill(directory: Path, flush_every: int, acks_before_kill: int) -> list[int]:
    """Start the child, wait for some acknowledgements, SIGKILL it; return acked offsets."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(directory), str(flush_every), repr(CONFIG)],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        cwd=REPO_ROOT,
    )
    acked: list[int] = []
    deadline = time.monotonic() + ROUND_TIMEOUT_S
    try:
        assert child.stdout.readline().startswith(b"ready")
        while len(acked) < acks_before_kill and time.monotonic() < deadline:
            acked += _offsets(child.stdout.readline())
    finally:
        os.kill(child.pid, signal.SIGKILL)
        rest = child.stdout.read()  # lines written before the kill landed
        child.wait()
    assert child.returncode == -signal.SIGKILL
    for line in rest.split(b"\n")[:-1]:  # the last piece has no newline: not acknowledged
        acked += _offsets(line + b"\n")
    assert len(acked) >= acks_before_kill, "the child did not make progress"
    return acked


def _offsets(line: bytes) -> list[int]:
    assert line.endswith(b"\n"), line
    first, last = map(int, line.split())
    return list(range(first, last + 1))


@pytest.mark.parametrize("flush_every", [1, 0], ids=["flush-each-append", "never-flush"])
def test_every_acknowledged_offset_survives_sigkill(tmp_path, flush_every):
    directory = tmp_path / "topic-0"
    rng = random.Random(flush_every)
    acked: list[int] = []
    for _ in range(3):
        acked += run_and_kill(directory, flush_every, rng.randrange(100, 400))
        log = Log.open(directory, LogConfig(**CONFIG))
        assert not log.load_info.clean_shutdown
        records = dict(read_all(log, 0))
        for offset in acked:
            assert records[offset].startswith(b"offset-%d" % offset)
        assert sorted(records) == list(range(log.log_end_offset))  # no holes, no strays
        assert log.segment_count > 1
        log.close_handlers()
