"""Starting a data directory whose cluster already (partly) runs ends in one healthy cluster.

Real processes throughout: the leftovers are made by the faults a tutorial injects (kill, pause,
isolate), in this process or in another Python process that keeps running.
"""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from support.clients import kafka_conf

from pylog_nb import LocalCluster
from pylog_nb.client import consume, produce
from pylog_nb.cluster.leftovers import running_nodes

TIMEOUT_S = 30
PROCESS_TIMEOUT_S = 120
OTHER_PROCESS = """
import sys
from pylog_nb import LocalCluster
cluster = LocalCluster(brokers=3, data_dir=sys.argv[1]).start()
if sys.argv[2] == "pause":
    cluster.pause(2)
print("pids", *cluster.broker_pids().values(), *cluster.controller_pids().values(), flush=True)
sys.stdin.read()  # keep running (the cluster's supervisor) until the test closes stdin
"""


def _node_pids(cluster: LocalCluster) -> set[int]:
    return {*cluster.broker_pids().values(), *cluster.controller_pids().values()}


def _topic_with_records(cluster: LocalCluster) -> str:
    topic = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({**kafka_conf(cluster.bootstrap_servers)})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(TIMEOUT_S)
    produce(cluster.bootstrap_servers, topic, [(None, "kept")])
    return topic


def _start_elsewhere(data_dir, fault: str = "none") -> tuple[subprocess.Popen[str], set[int]]:
    other = _launch(data_dir, fault)
    return other, _pids(other)


def _launch(data_dir, fault: str = "none") -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", OTHER_PROCESS, str(data_dir), fault],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _pids(other: subprocess.Popen[str]) -> set[int]:
    """The pids the other process's cluster runs (after its one line, if it reused one)."""
    assert other.stdout is not None
    for text in other.stdout:
        if text.startswith("pids "):
            return {int(pid) for pid in text.split()[1:]}
    raise AssertionError(f"the other process exited ({other.wait()}) without starting")


def _end(other: subprocess.Popen[str]) -> None:
    assert other.stdin is not None
    other.stdin.close()
    other.wait(PROCESS_TIMEOUT_S)


def test_start_on_a_healthy_running_cluster_reuses_it_in_one_line(tmp_path, capsys):
    with LocalCluster(brokers=3, data_dir=tmp_path) as first:
        capsys.readouterr()
        again = LocalCluster(brokers=3, data_dir=tmp_path).start()
        assert _node_pids(again) == _node_pids(first)
        assert capsys.readouterr().out == f"reusing the cluster already running on {tmp_path}\n"


def test_start_after_kill_pause_and_isolate_stops_the_leftovers_and_keeps_the_topics(
        tmp_path, capsys):
    first = LocalCluster(brokers=3, data_dir=tmp_path).start()
    topic = _topic_with_records(first)
    first.kill(1)
    first.pause_controller(2)
    first.isolate(3)
    left = _node_pids(first)
    capsys.readouterr()
    with LocalCluster(brokers=3, data_dir=tmp_path) as again:
        assert capsys.readouterr().out == (
            f"stopped what was left of the cluster on {tmp_path} (broker 1 was down, broker 3 "
            f"isolated, controller 2 paused); starting it again\n")
        assert not left & _node_pids(again)
        assert not any(first.is_running(i) for i in first.brokers)
        assert set(running_nodes(tmp_path).values()) == _node_pids(again)  # one set
        assert again.broker_states() == {1: "up", 2: "up", 3: "up"}
        assert again.controller_states() == {1: "up", 2: "up", 3: "up"}
        assert list(consume(again.bootstrap_servers, topic).value) == ["kept"]
    first.stop()  # reaps what it started; nothing left to signal


def test_a_stopped_cluster_starts_again_with_its_topics(tmp_path):
    cluster = LocalCluster(brokers=3, data_dir=tmp_path).start()
    topic = _topic_with_records(cluster)
    cluster.stop()
    with cluster.start():
        assert cluster.broker_states() == {1: "up", 2: "up", 3: "up"}
        assert list(consume(cluster.bootstrap_servers, topic).value) == ["kept"]


def test_start_reuses_a_healthy_cluster_another_process_runs(tmp_path, capsys):
    other, theirs = _start_elsewhere(tmp_path)
    try:
        capsys.readouterr()
        again = LocalCluster(brokers=3, data_dir=tmp_path).start()
        assert _node_pids(again) == theirs
        assert capsys.readouterr().out.startswith("reusing the cluster already running")
        assert set(running_nodes(tmp_path).values()) == theirs
    finally:
        _end(other)


def test_start_stops_a_cluster_another_process_left_paused_and_runs_one_of_its_own(
        tmp_path, capsys):
    other, theirs = _start_elsewhere(tmp_path, "pause")
    try:
        capsys.readouterr()
        with LocalCluster(brokers=3, data_dir=tmp_path) as again:
            assert "(broker 2 paused)" in capsys.readouterr().out
            assert not theirs & _node_pids(again)
            assert set(running_nodes(tmp_path).values()) == _node_pids(again)
            assert again.broker_states() == {1: "up", 2: "up", 3: "up"}
    finally:
        _end(other)


@pytest.mark.timeout(300)
def test_two_processes_starting_one_directory_at_once_share_one_cluster(tmp_path):
    others = [_launch(tmp_path) for _ in range(2)]  # both start before either is done
    try:
        first, second = (_pids(other) for other in others)
        assert len(first) == 6 and first == second
        assert set(running_nodes(tmp_path).values()) == first
    finally:
        for other in others:
            _end(other)
