"""Seeded simulation of one Controller and three brokers with real Logs (see ``simulation.py``).

Every schedule is a pure function of its seed. On a failure the seed and a one-line replay
command are printed; ``test_replay_seed`` runs the seed in ``SIM_SEED`` (default below), e.g.

    SIM_SEED=1234 .venv/bin/pytest tests/broker/test_simulation.py -k replay
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from simulation import InvariantViolation, fast_tmp_root, run_schedule

from pylog_nb.broker.replication import follower as follower_module
from pylog_nb.broker.replication.log_protocol import truncate_to

SCHEDULE_COUNT = int(os.environ.get("SIM_SCHEDULES", "1000"))  # CI: 1,000 in ~20 s on 2 cores
STEP_COUNT = int(os.environ.get("SIM_STEPS", "50"))
SEED_BASE = int(os.environ.get("SIM_SEED_BASE", "0"))
CHUNK = 100  # schedules per test item, so progress shows and xdist could spread them
DEFAULT_REPLAY_SEED = 1234


def replay_command(seed: int) -> str:
    return f"SIM_SEED={seed} .venv/bin/pytest tests/broker/test_simulation.py -k replay"


def run(seed: int, steps: int = STEP_COUNT):
    with tempfile.TemporaryDirectory(dir=fast_tmp_root(), prefix="pylog-sim-") as root:
        return run_schedule(seed, Path(root), steps)


def run_or_fail(seed: int, steps: int = STEP_COUNT):
    try:
        return run(seed, steps)
    except InvariantViolation as error:
        print(f"\nSIMULATION FAILED for seed {seed}; replay with:\n  {replay_command(seed)}")
        pytest.fail(f"{error}\nreplay: {replay_command(seed)}", pytrace=False)


@pytest.mark.parametrize("chunk", range((SCHEDULE_COUNT + CHUNK - 1) // CHUNK))
def test_random_schedules(chunk: int) -> None:
    first = SEED_BASE + chunk * CHUNK
    last = min(SEED_BASE + SCHEDULE_COUNT, first + CHUNK)
    for seed in range(first, last):
        run_or_fail(seed)


def test_replay_seed() -> None:
    seed = int(os.environ.get("SIM_SEED", DEFAULT_REPLAY_SEED))
    sim = run_or_fail(seed)
    print(f"seed {seed}: {sim.stats}\n" + "\n".join(sim.trace))


def test_schedules_are_deterministic() -> None:
    a, b = run(DEFAULT_REPLAY_SEED), run(DEFAULT_REPLAY_SEED)
    assert a.trace == b.trace and a.stats == b.stats and a.acked == b.acked


def test_schedules_exercise_the_interesting_paths() -> None:
    """Guard against a harness that silently stops doing anything."""
    totals: dict[str, int] = {}
    for seed in range(40):
        for key, value in run(seed).stats.items():
            totals[key] = totals.get(key, 0) + value
    for key in ("acked", "failed", "refused", "crashes", "elections", "truncations"):
        assert totals.get(key, 0) > 0, (key, totals)


def test_catches_followers_truncating_to_high_watermark(monkeypatch) -> None:
    """A deliberately broken follower (pre-KIP-101: truncate to the HW when it starts following)
    must be caught; the patch lives only inside this test."""
    original = follower_module.FollowerState.__init__

    def truncating_init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        truncate_to(self.log, self.log.high_watermark)

    monkeypatch.setattr(follower_module.FollowerState, "__init__", truncating_init)
    for seed in range(200):
        try:
            run(seed)
        except InvariantViolation:
            return
    pytest.fail("the simulation did not catch followers truncating to their HW")
