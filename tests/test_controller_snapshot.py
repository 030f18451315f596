"""Snapshots of the controllers' metadata log with real processes: three controllers started
with a small ``--snapshot-records`` bound, a broker, the confluent-kafka admin client. A
controller down while the others snapshot several times catches up by installing the leader's
snapshot; every controller restarts from its own snapshot with the image intact; a broker
restarted after the snapshots rebuilds its metadata from one.
"""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import NewTopic
from support.clients import TIMEOUT_S, admin
from support.replicated_cluster import WAIT_S, wait_until

from pylog_nb import LocalCluster
from pylog_nb.broker.controller.rpc import ControllerRpcError, call_once

SNAPSHOT_RECORDS = 12  # each topic below is 1 + PARTITIONS records
PARTITIONS = 2
TOPICS = 16  # ~50 records: a snapshot every four topics, one bound behind the commits


class _SnapshottingCluster(LocalCluster):
    """LocalCluster whose controllers take the small snapshot bound."""

    def _command(self, node, ready_w: int) -> list[str]:
        command = super()._command(node, ready_w)
        if node.kind == "controller":
            command += ["--snapshot-records", str(SNAPSHOT_RECORDS)]
        return command


def _wait(condition, what: str):
    """``wait_until``, a controller or broker that does not answer yet counting as not yet."""
    def tolerant():
        try:
            return condition()
        except (OSError, ControllerRpcError, KafkaException):
            return None
    return wait_until(tolerant, what, timeout_s=WAIT_S)


def _described(cluster: LocalCluster, controller_id: int) -> dict:
    node = cluster._controllers[controller_id]
    return call_once(cluster.host, node.port, "describe", events_max=0, timeout_s=5,
                     token=cluster.controller_token)


def _image(described: dict) -> dict:
    return {key: described[key] for key in ("topics", "next_producer_id")} | {
        "brokers": [{k: v for k, v in b.items() if k != "lease_expires_in_ms"}
                    for b in described["brokers"]]}


def _caught_up(cluster: LocalCluster, controller_id: int) -> dict | None:
    """The controller's describe once it has committed as far as the active one."""
    active = cluster.active_controller()
    if active is None:
        return None
    lead, mine = _described(cluster, active), _described(cluster, controller_id)
    same = mine["quorum"]["high_watermark"] == lead["quorum"]["high_watermark"]
    return mine if same and _image(mine) == _image(lead) else None


def _checkpoints(cluster: LocalCluster, controller_id: int) -> list[Path]:
    return sorted((cluster.data_dir / f"controller-{controller_id}").glob("*.checkpoint"))


def _broker_topics(cluster: LocalCluster) -> dict[str, int]:
    listed = admin(cluster.bootstrap_servers).list_topics(timeout=5)
    return {name: len(t.partitions) for name, t in listed.topics.items()
            if not name.startswith("__")}


def _shapes(described: dict) -> dict[str, tuple[str, int]]:
    """Each topic's id and partition count (leaders may move while controllers restart)."""
    return {t["name"]: (t["topic_id"], len(t["partitions"])) for t in described["topics"]}


def test_a_controller_down_through_snapshots_installs_one_and_restarts_keep_the_image(tmp_path):
    with _SnapshottingCluster(brokers=1, controllers=3, data_dir=tmp_path) as cluster:
        active = _wait(cluster.active_controller, "an active controller")
        down = min(set(cluster.controllers) - {active})
        cluster.kill_controller(down)
        client = admin(cluster.bootstrap_servers)
        names = [f"snap-{n}" for n in range(TOPICS)]
        for name in names:
            client.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(TIMEOUT_S)
        lead = _described(cluster, cluster.active_controller())
        assert lead["quorum"]["log_start_offset"] >= 2 * SNAPSHOT_RECORDS, lead["quorum"]
        assert len(_checkpoints(cluster, active)) == 1  # older snapshots are removed

        cluster.restart_controller(down)  # its log ends before the leader's log start
        back = _wait(lambda: _caught_up(cluster, down), f"controller {down} to catch up")
        assert back["quorum"]["log_start_offset"] > 0 and _checkpoints(cluster, down)
        assert {t["name"] for t in back["topics"]} >= set(names)

        expected = _shapes(_described(cluster, cluster.active_controller()))
        for controller_id in cluster.controllers:  # every one restarts from its snapshot
            cluster.kill_controller(controller_id)
        cluster.restart_controller()
        new = _wait(cluster.active_controller, "an active controller after the restarts")
        for controller_id in cluster.controllers:
            mine = _wait(lambda c=controller_id: _caught_up(cluster, c),
                         f"controller {controller_id} to catch up after the restarts")
            assert _shapes(mine) == expected, controller_id
        assert _described(cluster, new)["quorum"]["log_start_offset"] > 0

        cluster.restart(1)  # it fetches the metadata from offset 0: below every log start
        topics = _wait(lambda: (found := _broker_topics(cluster)).keys() >= set(names)
                       and found, "the restarted broker to know every topic")
        assert {n: topics[n] for n in names} == {n: expected[n][1] for n in names}


def test_a_paused_broker_behind_the_log_start_takes_the_snapshot(tmp_path):
    """A live broker (its image not empty) paused while the controllers snapshot past what it
    applied: on resume it fetches below the log start, gets the snapshot and replaces its image."""
    with _SnapshottingCluster(brokers=2, controllers=3, data_dir=tmp_path) as cluster:
        client = admin(cluster.bootstrap_servers)
        client.create_topics([NewTopic("before", 1, 2)])["before"].result(TIMEOUT_S)
        cluster.pause(2)
        names = [f"while-paused-{n}" for n in range(TOPICS)]
        for name in names:  # placed on broker 1 alone once broker 2 is fenced
            _wait(lambda n=name: client.create_topics([NewTopic(n, PARTITIONS, 1)])[n].result(
                TIMEOUT_S) or True, f"topic {name} created")
        client.delete_topics(["before"])["before"].result(TIMEOUT_S)
        lead = _described(cluster, cluster.active_controller())
        assert lead["quorum"]["log_start_offset"] >= 2 * SNAPSHOT_RECORDS, lead["quorum"]
        cluster.resume(2)
        own = admin(f"{cluster.host}:{cluster.brokers[2].port}")  # answered from broker 2's image

        def knows_all() -> set[str] | None:
            listed = set(own.list_topics(timeout=5).topics)
            return listed if listed >= set(names) and "before" not in listed else None
        _wait(knows_all, "broker 2 to replace its image with the snapshot")
        log = (cluster.data_dir / "broker-2" / "broker.log").read_text()
        assert "Traceback" not in log and "MetadataRecordError" not in log
