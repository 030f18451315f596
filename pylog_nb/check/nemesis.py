"""The nemesis: faults on a seeded schedule, one at a time, each undone before the next.

Theory of operation: ``plan`` is a pure function of the seed, the chosen faults, the brokers
and the run's length. It draws from ``random.Random(seed)``: a healthy gap of 1-3 s, a fault,
a broker, how long the fault lasts; and again, until the next fault would end after the run.
So a seed names the same schedule on every machine. ``Nemesis.run`` then plays the plan against
a ``LocalCluster`` in real time, starting each fault at its planned time (or at once when the
previous one overran), and logs each as a ``NemesisOp`` with its real start and end.

The faults, and how each is undone:

- ``kill``: SIGKILL the broker, later restart it on the same data (recovery from a crash).
- ``pause``: SIGSTOP for 0.5-6 s, then SIGCONT (a GC pause).
- ``long-pause``: SIGSTOP for longer than the controller's session timeout (1.7 s) and the
  broker's ``replica.lag.time.max.ms`` (10 s), up to 20 s: the broker is fenced, its
  partitions get new leaders, and it wakes up believing the old world.
- ``isolate``: cut the broker off from its peers and the controller (clients still reach it),
  then heal.
- ``controller-restart``: SIGKILL the active controller, later start it again (it replays its
  log); the other controllers elect a new active one meanwhile.
- ``controller-pause``: SIGSTOP the active controller for 0.5-6 s, then SIGCONT. Past the Raft
  fetch timeout (1 s) the others elect a new leader, and the paused one wakes up believing it
  still leads until it hears of the newer epoch.
- ``controller-isolate``: cut the active controller off from the other voters for 1-8 s (brokers
  still reach it), then heal. It resigns once a majority's fetches stop (Raft's check-quorum,
  1.5 s); meanwhile the others elect a leader, and its own uncommitted decisions are cut.

The controller faults pick their victim when they start (the active controller then), not in
the plan, and undo the fault on that same controller.

``heal_all`` ends every fault whatever state a failed step left behind.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from pylog_nb.broker.controller.controller import BROKER_SESSION_TIMEOUT_MS
from pylog_nb.cluster import LocalCluster

from .history import FaultLog, NemesisOp

FAULTS = ("kill", "pause", "long-pause", "isolate", "controller-restart", "controller-pause",
          "controller-isolate")
CONTROLLER_FAULTS = frozenset({"controller-restart", "controller-pause",
                               "controller-isolate"})  # no broker named
GAP_S = (1.0, 3.0)  # healthy time between two faults
SESSION_TIMEOUT_S = BROKER_SESSION_TIMEOUT_MS / 1000
REPLICA_LAG_TIME_MAX_S = 10.0  # the broker's REPLICA_LAG_TIME_MAX_MS
LONG_PAUSE_MIN_S = REPLICA_LAG_TIME_MAX_S + 1.0  # past both: fenced and out of the ISR
LONG_PAUSE_MAX_S = 20.0
DURATION_S = {  # (shortest, longest) each fault lasts
    "kill": (1.0, 5.0),
    "pause": (0.5, 6.0),
    "long-pause": (LONG_PAUSE_MIN_S, LONG_PAUSE_MAX_S),
    "isolate": (1.0, 8.0),
    "controller-restart": (0.5, 3.0),
    "controller-pause": (0.5, 6.0),
    "controller-isolate": (1.0, 8.0),
}
assert set(DURATION_S) == set(FAULTS)


@dataclass(frozen=True)
class PlannedFault:
    fault: str
    broker: int | None  # None for the controller faults
    start_s: float  # since the run began
    duration_s: float

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s


def plan(seed: int, faults: tuple[str, ...], brokers: list[int],
         seconds: float) -> list[PlannedFault]:
    """The schedule ``seed`` names: faults from ``faults`` on ``brokers``, all ending by
    ``seconds``."""
    unknown = set(faults) - set(FAULTS)
    if unknown:
        raise ValueError(f"unknown faults {', '.join(sorted(unknown))}; "
                         f"known: {', '.join(FAULTS)}")
    assert brokers, brokers
    rng = random.Random(seed)  # noqa: S311 (a schedule, not a secret)
    planned: list[PlannedFault] = []
    at_s = 0.0
    while faults:
        at_s += rng.uniform(*GAP_S)
        fault = rng.choice(sorted(set(faults)))
        broker = None if fault in CONTROLLER_FAULTS else rng.choice(sorted(brokers))
        duration_s = rng.uniform(*DURATION_S[fault])
        if at_s + duration_s > seconds:
            return planned
        planned.append(PlannedFault(fault, broker, round(at_s, 3), round(duration_s, 3)))
        at_s += duration_s
    return planned


class Nemesis:
    """Plays a plan against ``cluster``; logs every fault in ``history.nemesis``."""

    def __init__(self, cluster: LocalCluster, history: FaultLog,
                 clock: Callable[[], float]) -> None:
        self.cluster = cluster
        self.history = history
        self.clock = clock

    def run(self, planned: list[PlannedFault]) -> None:
        for fault in planned:
            time.sleep(max(0.0, fault.start_s - self.clock()))
            op = NemesisOp(fault.fault, fault.broker, fault.duration_s, self.clock())
            self.history.nemesis.append(op)
            try:
                self._inject(fault)
            except Exception as error:  # noqa: BLE001 (logged in the history; healed at the end)
                op.error = f"{type(error).__name__}: {error}"
            op.end_s = self.clock()

    def _inject(self, fault: PlannedFault) -> None:
        start, undo = self._actions(fault)
        start()
        try:
            time.sleep(fault.duration_s)
        finally:
            undo()

    def _actions(self, fault: PlannedFault) -> tuple[Callable[[], None], Callable[[], None]]:
        cluster = self.cluster
        if fault.fault in CONTROLLER_FAULTS:
            return _controller_actions(cluster, fault.fault)
        broker = fault.broker
        assert broker is not None, fault
        start, undo = {
            "kill": (cluster.kill, cluster.restart),
            "pause": (cluster.pause, cluster.resume),
            "long-pause": (cluster.pause, cluster.resume),
            "isolate": (cluster.isolate, cluster.heal),
        }[fault.fault]
        return partial(start, broker), partial(undo, broker)


def _controller_actions(cluster: LocalCluster,
                        fault: str) -> tuple[Callable[[], None], Callable[[], None]]:
    """Stop the active controller, and undo that on the one stopped."""
    stop, undo = {
        "controller-restart": (cluster.kill_controller, cluster.restart_controller),
        "controller-pause": (cluster.pause_controller, cluster.resume_controller),
        "controller-isolate": (cluster.isolate_controller, cluster.heal_controller),
    }[fault]
    victims: list[int] = []
    return lambda: victims.append(stop()), lambda: undo(victims[0])


def heal_all(cluster: LocalCluster, history: FaultLog) -> None:
    """Resume, restart and heal every broker and controller; failures go to the notes."""
    steps: list[tuple[str, Callable[[], None]]] = [
        (f"resume controller {c}", partial(_resume_controller_if_paused, cluster, c))
        for c in cluster.controllers]
    steps += [(f"resume {b}", partial(cluster.resume, b)) for b in cluster.brokers]
    steps += [(f"restart controller {c}", partial(_restart_controller_if_down, cluster, c))
              for c in cluster.controllers]
    steps += [(f"restart {b}", partial(_restart_if_down, cluster, b)) for b in cluster.brokers]
    steps += [(f"heal {b}", partial(cluster.heal, b)) for b in cluster.brokers]
    if cluster.controllers:
        steps.append(("heal controllers", cluster.heal_controller))
    for name, step in steps:
        try:
            step()
        except Exception as error:  # noqa: BLE001 (the settle wait and the analysis will tell)
            history.notes.append(f"heal_all: {name}: {type(error).__name__}: {error}")


def _restart_if_down(cluster: LocalCluster, broker: int) -> None:
    if not cluster.is_running(broker):
        cluster.restart(broker)


def _resume_controller_if_paused(cluster: LocalCluster, controller: int) -> None:
    if cluster.controller_states()[controller] == "paused":
        cluster.resume_controller(controller)


def _restart_controller_if_down(cluster: LocalCluster, controller: int) -> None:
    if cluster.controller_states()[controller] == "down":
        cluster.restart_controller(controller)
