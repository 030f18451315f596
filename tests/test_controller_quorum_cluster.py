"""LocalCluster's controllers: how many, their command lines and ports, which one is active, and
the controller faults (kill, pause, resume, restart; by id or on the active one), first against
scripted describe answers, then against real processes (one controller, then a quorum of three).
The nemesis's controller faults act on the controller that was active when they started."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from pylog_nb import LocalCluster
from pylog_nb.check.history import History
from pylog_nb.check.nemesis import CONTROLLER_FAULTS, FAULTS, Nemesis, PlannedFault, heal_all, plan
from pylog_nb.cluster import ClusterError
from pylog_nb.cluster.local import CLUSTER_FILE

FAILOVER_S = 10  # Raft elects within 2 s; generous for a loaded test machine
POLL_S = 0.05


# -- without processes ---------------------------------------------------------------------------
@pytest.mark.parametrize(("brokers", "controllers", "expected"), [
    (1, None, [1]), (2, None, [1]), (3, None, [1, 2, 3]), (5, None, [1, 2, 3]),
    (1, 1, [1]), (3, 1, [1]), (3, 5, [1, 2, 3, 4, 5]), (2, 2, [1, 2])])
def test_controller_count_defaults_by_broker_count(tmp_path, brokers, controllers, expected):
    cluster = LocalCluster(brokers=brokers, controllers=controllers, data_dir=tmp_path)
    assert cluster.controllers == expected
    assert cluster.controller.node_id == expected[0]  # none active yet: the first
    assert f"controllers={len(expected)}" in repr(cluster)
    cluster.stop()


@pytest.mark.parametrize("controllers", [0, 6, -1])
def test_controller_count_out_of_range_is_refused(tmp_path, controllers):
    with pytest.raises(ClusterError, match=f"controllers must be between 1 and 5, got "
                                           f"{controllers}"):
        LocalCluster(brokers=3, controllers=controllers, data_dir=tmp_path)


def test_controllers_get_distinct_fixed_ports_and_every_voter(tmp_path):
    cluster = LocalCluster(brokers=2, controllers=3, data_dir=tmp_path)
    cluster._pick_controller_ports()
    nodes = [cluster._controllers[i] for i in cluster.controllers]
    ports = [n.port for n in nodes] + [n.raft_port for n in nodes]
    assert len(set(ports)) == 6 and all(ports)
    voters = ",".join(f"{n.node_id}@127.0.0.1:{n.raft_port}" for n in nodes)
    command = cluster._command(nodes[1], ready_w=9)
    assert command[command.index("--node-id") + 1] == "2"
    assert command[command.index("--voters") + 1] == voters
    assert command[command.index("--port") + 1] == str(nodes[1].port)
    assert command[command.index("--data-dir") + 1] == str(tmp_path / "controller-2")
    broker = cluster._command(cluster.brokers[1], ready_w=9)
    assert broker[broker.index("--controller") + 1] == ",".join(
        f"127.0.0.1:{n.port}" for n in nodes)
    cluster.stop()


def test_saved_controller_ports_are_kept(tmp_path):
    (tmp_path / CLUSTER_FILE).write_text(json.dumps({
        "ports": {"1": [9001, 9101]}, "pids": {},
        "controllers": {"1": {"port": 7001, "raft_port": 7101, "pid": None}}}))
    cluster = LocalCluster(brokers=1, controllers=2, data_dir=tmp_path)
    cluster._pick_controller_ports()
    first, second = cluster._controllers[1], cluster._controllers[2]
    assert (first.port, first.raft_port) == (7001, 7101)
    assert second.port and second.raft_port and second.port not in (7001, 7101)
    assert cluster.brokers[1].port == 9001
    cluster.stop()


class _Process:
    """A process that runs until killed and records the signals it gets."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.signals: list[int] = []

    def poll(self) -> int | None:
        return 0 if signal.SIGKILL in self.signals else None

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)

    def kill(self) -> None:
        self.signals.append(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        return 0


@pytest.fixture
def scripted(tmp_path, monkeypatch):
    """Three controllers as running processes; ``quorum[id]`` is what each one's describe says
    of the quorum (None: it does not answer)."""
    cluster = LocalCluster(brokers=3, controllers=3, data_dir=tmp_path)
    quorum: dict[int, dict | None] = {1: {"role": "follower", "epoch": 4, "active": False},
                                      2: {"role": "leader", "epoch": 4, "active": True},
                                      3: {"role": "follower", "epoch": 4, "active": False}}
    asked: list[int] = []

    def describe(node, quorum_only=False):
        asked.append(node.node_id)
        view = quorum[node.node_id]
        if view is None:
            return None
        return {"quorum": view} if quorum_only else {"topics": [], "quorum": view,
                                                      "by": node.node_id}

    monkeypatch.setattr(cluster, "_describe", describe)
    for i, node in cluster._controllers.items():
        node.process = _Process(1000 + i)
    cluster.quorum, cluster.asked = quorum, asked
    yield cluster
    for node in cluster._controllers.values():
        node.process = None
    cluster.stop()


def test_active_is_the_leader_at_the_highest_epoch(scripted):
    assert scripted.active_controller() == 2
    assert scripted.controller_describe()["by"] == 2
    assert scripted.controller is scripted._controllers[2]
    scripted.quorum[3] = {"role": "leader", "epoch": 5, "active": True}  # 2 has not heard yet
    assert scripted.active_controller() == 3
    scripted.quorum[2] = scripted.quorum[3] = None
    assert scripted.active_controller() is None
    with pytest.raises(ConnectionError, match="no controller is active"):
        scripted.controller_describe()
    with pytest.raises(ClusterError, match="no controller is active"):
        scripted.kill_controller()


def test_a_leader_is_active_only_once_its_epoch_has_begun(scripted):
    scripted.quorum[2] = {"role": "leader", "epoch": 5, "active": False}  # marker uncommitted
    assert scripted.active_controller() is None
    scripted.quorum[2]["active"] = True
    assert scripted.active_controller() == 2


def test_pausing_the_active_controller_skips_it_until_resumed(scripted):
    assert scripted.pause_controller() == 2
    assert scripted._controllers[2].process.signals == [signal.SIGSTOP]
    assert scripted.controller_states() == {1: "up", 2: "paused", 3: "up"}
    scripted.asked.clear()
    assert scripted.active_controller() is None  # 2 still says it leads, but is not asked
    assert 2 not in scripted.asked
    with pytest.raises(ClusterError, match="controller 2 is already paused"):
        scripted.pause_controller(2)
    scripted.resume_controller()
    assert scripted._controllers[2].process.signals == [signal.SIGSTOP, signal.SIGCONT]
    assert scripted.controller_states() == {1: "up", 2: "up", 3: "up"}


def test_killing_a_controller_that_is_down_is_refused(scripted):
    assert scripted.kill_controller() == 2
    assert scripted.controller_states() == {1: "up", 2: "down", 3: "up"}
    with pytest.raises(ClusterError, match="^controller 2 is not running$"):
        scripted.kill_controller(2)
    with pytest.raises(ClusterError, match="^controller 2 is not running$"):
        scripted.pause_controller(2)
    with pytest.raises(ClusterError, match="^controller 2 is not running$"):
        scripted.resume_controller(2)
    with pytest.raises(ClusterError, match=r"^no controller 4; controllers are \[1, 2, 3\]$"):
        scripted.kill_controller(4)


def test_restart_without_an_id_brings_back_the_controllers_that_are_down(scripted, monkeypatch):
    spawned: list[int] = []
    monkeypatch.setattr(scripted, "_spawn", lambda node: spawned.append(node.node_id))
    monkeypatch.setattr(scripted, "wait_until_ready", lambda: None)
    scripted.kill_controller(3)
    scripted.kill_controller(1)
    scripted.restart_controller()
    assert spawned == [1, 3]
    spawned.clear()
    for i in (1, 3):
        scripted._controllers[i].process = _Process(1000 + i)
    scripted.restart_controller()  # none is down: the active one, stopped cleanly first
    assert spawned == [2]
    assert scripted._controllers[2].process.signals == [signal.SIGTERM]


# -- the nemesis -----------------------------------------------------------------------------
class _FaultLog:
    """The controller half of a LocalCluster, recording what the nemesis asks of it."""

    def __init__(self, states: dict[int, str]) -> None:
        self.states = states
        self.calls: list[tuple[str, int | None]] = []
        self.active = 2
        self.brokers: dict[int, object] = {}

    @property
    def controllers(self) -> list[int]:
        return sorted(self.states)

    def controller_states(self) -> dict[int, str]:
        return dict(self.states)

    def __getattr__(self, name: str):
        def record(controller: int | None = None) -> int:
            self.calls.append((name, controller))
            victim = self.active if controller is None else controller
            self.active = 3  # the others elect a new leader meanwhile
            return victim
        return record


@pytest.mark.parametrize(("fault", "undo"), [("controller-restart", "restart_controller"),
                                             ("controller-pause", "resume_controller"),
                                             ("controller-isolate", "heal_controller")])
def test_controller_faults_undo_on_the_controller_they_stopped(fault, undo):
    faults = _FaultLog({1: "up", 2: "up", 3: "up"})
    nemesis = Nemesis(faults, History("t", 1), clock=time.monotonic)  # type: ignore[arg-type]
    nemesis.run([PlannedFault(fault, None, 0.0, 0.0)])
    stop = {"controller-restart": "kill_controller", "controller-pause": "pause_controller",
            "controller-isolate": "isolate_controller"}
    assert faults.calls == [(stop[fault], None), (undo, 2)]
    assert nemesis.history.nemesis[0].error is None


def test_heal_all_resumes_and_restarts_only_the_controllers_that_need_it():
    faults = _FaultLog({1: "paused", 2: "up", 3: "down"})
    history = History("t", 1)
    heal_all(faults, history)  # type: ignore[arg-type]
    assert faults.calls == [("resume_controller", 1), ("restart_controller", 3),
                            ("heal_controller", None)]  # every isolated one


def test_controller_faults_name_no_broker():
    planned = plan(7, FAULTS, [1, 2, 3], 120.0)
    assert {f.fault for f in planned} >= CONTROLLER_FAULTS
    assert all((f.broker is None) == (f.fault in CONTROLLER_FAULTS) for f in planned)


# -- one real controller ---------------------------------------------------------------------
def test_one_controller_killed_paused_and_restarted(tmp_path):
    with LocalCluster(brokers=2, data_dir=tmp_path) as cluster:
        assert cluster.controllers == [1] and cluster.active_controller() == 1
        saved = json.loads((tmp_path / CLUSTER_FILE).read_text())["controllers"]["1"]
        assert saved["pid"] == cluster.controller_pids()[1]
        assert cluster.kill_controller() == 1
        assert cluster.active_controller() is None
        with pytest.raises(ClusterError, match="^no controller is active"):
            cluster.kill_controller()
        with pytest.raises(ConnectionError):
            cluster.controller_describe()
        with pytest.raises(ClusterError, match=r"^no controller is answering \(controllers "
                                               r"\{1: 'down'\}\)$"):
            cluster.elect_preferred_leaders()
        cluster.restart_controller()  # the one killed
        assert cluster.active_controller() == 1
        assert (cluster.controller.port, cluster.controller.raft_port) == (
            saved["port"], saved["raft_port"])
        assert cluster.pause_controller() == 1
        assert cluster.controller_states() == {1: "paused"}
        cluster.resume_controller()
        assert cluster.controller_describe()["brokers"]
        assert (tmp_path / "controller-1" / "controller.log").exists()


def test_running_cluster_is_attached_with_its_controllers(tmp_path):
    with LocalCluster(brokers=2, data_dir=tmp_path) as cluster:
        again = LocalCluster(brokers=2, data_dir=tmp_path).start()
        assert again.controller_pids() == cluster.controller_pids()
        assert again.active_controller() == 1


# -- a quorum of three -----------------------------------------------------------------------
@pytest.fixture
def quorum(tmp_path):
    with LocalCluster(brokers=3, data_dir=tmp_path) as cluster:
        yield cluster


def _new_active(cluster: LocalCluster, old: int) -> int:
    deadline = time.monotonic() + FAILOVER_S
    while time.monotonic() < deadline:
        active = cluster.active_controller()
        if active not in (None, old):
            return active
        time.sleep(POLL_S)
    raise AssertionError(f"no controller but {old} became active within {FAILOVER_S} s")


def test_quorum_fails_over_when_the_active_controller_is_killed(quorum):
    assert quorum.controllers == [1, 2, 3]
    first = quorum.active_controller()
    assert first is not None
    assert quorum.kill_controller() == first
    second = _new_active(quorum, first)
    assert quorum.controller_describe()["quorum"]["leader_id"] == second
    assert quorum.elect_preferred_leaders() is not None
    quorum.restart_controller()
    assert quorum.controller_states() == {1: "up", 2: "up", 3: "up"}
    assert quorum.controller_describe()["brokers"]


def test_quorum_fails_over_when_the_active_controller_is_paused(quorum):
    first = quorum.active_controller()
    assert first is not None
    assert quorum.pause_controller() == first
    second = _new_active(quorum, first)
    quorum.resume_controller(first)
    _wait_for_follower(quorum, first)
    assert quorum.active_controller() == second


def _wait_for_follower(cluster: LocalCluster, controller: int) -> None:
    """Until ``controller`` (back from a pause) no longer claims to lead."""
    deadline = time.monotonic() + FAILOVER_S
    while time.monotonic() < deadline:
        if cluster._describe(cluster._controllers[controller])["quorum"]["role"] != "leader":
            return
        time.sleep(POLL_S)
    raise AssertionError(f"controller {controller} still leads after {FAILOVER_S} s")


def test_no_controller_outlives_a_sigkilled_supervisor(tmp_path):
    script = ("import time\nfrom pylog_nb import LocalCluster\n"
              f"c = LocalCluster(brokers=3, data_dir={str(tmp_path)!r}).start()\n"
              "print(*c.controller_pids().values(), *c.broker_pids().values(), flush=True)\n"
              "time.sleep(600)\n")
    supervisor = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                  text=True)
    pids = [int(p) for p in supervisor.stdout.readline().split()]
    assert len(pids) == 6
    supervisor.send_signal(signal.SIGKILL)
    supervisor.wait()
    deadline = time.monotonic() + FAILOVER_S
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(POLL_S)
    assert not any(_alive(pid) for pid in pids)
    # Each broker shut down cleanly (the closed pipe is a SIGTERM, not a crash).
    logs = [(tmp_path / f"broker-{i}" / "broker.log").read_text() for i in (1, 2, 3)]
    assert all(f"broker {i} stopped cleanly" in text for i, text in enumerate(logs, 1))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        return False
