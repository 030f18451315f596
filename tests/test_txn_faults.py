"""Transactions under process faults between EndTxn and the markers (issue 12).

Each test stops a real broker process at the point where the coordinator has written its
decision (PrepareCommit or PrepareAbort) to ``__transaction_state`` but the markers have not
landed on the data partition yet: the data partition's leader is SIGSTOPped before the client
ends the transaction, so no marker can land on it, then a broker is SIGKILLed.

- The data partition's leader killed: the markers land on the partition's new leader, its last
  stable offset reaches its high watermark, read_committed consumers see the transaction; the
  killed broker comes back as a follower, takes the marker, and as leader again serves the
  same last stable offset.
- The transaction coordinator killed mid-abort (the stopped broker holding the data partition's
  only replica, so the abort cannot finish before it is back): the coordinator that takes over its
  ``__transaction_state`` partition reads PrepareAbort from the log and finishes the abort; no
  record of the transaction ever reaches a read_committed consumer, and the next transaction
  of the same producer commits after it.

The brokers run with a 2 s ``replica.lag.time.max.ms`` so the stopped broker leaves the ISR
(and acks=all appends go on without it) within the test's waits.
"""

from __future__ import annotations

import wire
from clients import TIMEOUT_S, admin, wait_for
from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic
from test_transactions import (
    create_replicated,
    describe,
    find_coordinator,
    read_everything,
    send,
    transactional_producer,
    unique,
)

from pylog_nb import LocalCluster

LIST_OFFSETS = 2
LIST_OFFSETS_VERSION = 2  # the first with isolation_level
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
LATEST_TIMESTAMP = -1
REPLICA_LAG_TIME_MAX_MS = 2_000
BROKER_ARGS = ("--replica-lag-time-max-ms", str(REPLICA_LAG_TIME_MAX_MS))


def controller_leader(cluster: LocalCluster, topic: str, partition: int = 0) -> dict:
    """The partition as the active controller has it: leader, isr, replicas."""
    found: list[dict] = []

    def described() -> bool:
        try:
            topics = cluster.controller_describe()["topics"]
        except (OSError, ValueError):
            return False
        found[:] = [t["partitions"][partition] for t in topics if t["name"] == topic]
        return bool(found) and found[0]["leader"] >= 0
    wait_for(described, f"{topic}-{partition} to have a leader")
    return found[0]


def coordinated_elsewhere(bootstrap: str, avoid: int) -> tuple[str, int]:
    """A new transactional id whose coordinator is not broker ``avoid``, and its coordinator."""
    while True:
        transactional_id = unique("faulted")
        coordinator, _ = find_coordinator(bootstrap, transactional_id)
        if coordinator != avoid:
            return transactional_id, coordinator


def address(cluster: LocalCluster, broker_id: int) -> str:
    return f"{cluster.host}:{cluster.brokers[broker_id].port}"


def survivors(cluster: LocalCluster, *down: int) -> str:
    return ",".join(address(cluster, b) for b in cluster.brokers if b not in down)


def end_offsets(cluster: LocalCluster, topic: str, partition: int = 0) -> tuple[int, int]:
    """(last stable offset, high watermark) of the partition, from its leader."""
    leader = controller_leader(cluster, topic, partition)["leader"]
    answers = []
    with wire.connect(address(cluster, leader)) as sock:
        for isolation in (READ_COMMITTED, READ_UNCOMMITTED):
            answer = wire.call(sock, LIST_OFFSETS, LIST_OFFSETS_VERSION, {
                "replica_id": -1, "isolation_level": isolation, "topics": [{
                    "name": topic, "partitions": [{"partition_index": partition,
                                                   "timestamp": LATEST_TIMESTAMP}]}]})
            (found,) = answer.topics[0].partitions
            assert found.error_code == 0, found
            answers.append(found.offset)
    return answers[0], answers[1]


def stable(cluster: LocalCluster, topic: str) -> bool:
    """True once the partition's leader answers and its LSO equals its HW."""
    try:
        lso, high = end_offsets(cluster, topic)
    except (OSError, AssertionError):
        return False
    return lso == high


def test_commit_markers_land_on_the_new_leader_when_the_data_leader_is_killed(tmp_path):
    with LocalCluster(brokers=3, data_dir=tmp_path, broker_args=BROKER_ARGS) as cluster:
        bootstrap = cluster.bootstrap_servers
        partitions = create_replicated(bootstrap, unique("committed"), 1)
        topic = partitions[0].topic
        data_leader = controller_leader(cluster, topic)["leader"]
        transactional_id, _ = coordinated_elsewhere(bootstrap, data_leader)
        producer = transactional_producer(bootstrap, transactional_id)
        producer.begin_transaction()
        written = send(producer, partitions, "committed")

        cluster.pause(data_leader)  # no marker can land on it
        producer.commit_transaction(TIMEOUT_S)  # PrepareCommit is durable
        cluster.kill(data_leader)
        others = survivors(cluster, data_leader)
        wait_for(lambda: controller_leader(cluster, topic)["leader"] != data_leader,
                 "a new leader for the data partition")
        wait_for(lambda: stable(cluster, topic), "the LSO to reach the HW on the new leader")
        lso, high = end_offsets(cluster, topic)
        assert lso == high == len(written) + 1  # the records and the commit marker
        assert read_everything(others, partitions, "read_committed") == sorted(written)
        coordinator, coordinator_address = find_coordinator(others, transactional_id)
        assert describe(coordinator_address, transactional_id).transaction_state == \
            "CompleteCommit"

        # Back as a follower it takes the marker; leading again it serves the same LSO.
        cluster.restart(data_leader)
        wait_for(lambda: data_leader in controller_leader(cluster, topic)["isr"],
                 "the restarted broker back in the ISR")
        cluster.elect_preferred_leaders()
        wait_for(lambda: controller_leader(cluster, topic)["leader"] == data_leader
                 and stable(cluster, topic), "the restarted broker leading, LSO at the HW")
        assert end_offsets(cluster, topic) == (high, high)
        assert read_everything(bootstrap, partitions, "read_committed") == sorted(written)
        producer.begin_transaction()
        later = send(producer, partitions, "later")
        producer.commit_transaction(TIMEOUT_S)
        assert read_everything(bootstrap, partitions, "read_committed") == sorted(
            written + later)


def test_abort_completes_from_the_log_when_the_coordinator_is_killed_mid_abort(tmp_path):
    """The data partition has one replica, so while its broker is stopped it has no leader at
    all and the abort stays in PrepareAbort, whatever the timing, until the broker is back."""
    with LocalCluster(brokers=3, data_dir=tmp_path, broker_args=BROKER_ARGS) as cluster:
        bootstrap = cluster.bootstrap_servers
        data_leader = min(cluster.brokers)
        topic = unique("aborted")
        only_replica = NewTopic(topic, num_partitions=1, replication_factor=-1,
                                replica_assignment=[[data_leader]])
        client = admin(bootstrap)
        client.create_topics([only_replica])[topic].result(TIMEOUT_S)
        partitions = [TopicPartition(topic, 0)]
        transactional_id, coordinator = coordinated_elsewhere(bootstrap, data_leader)
        producer = transactional_producer(bootstrap, transactional_id)
        producer.begin_transaction()
        aborted = send(producer, partitions, "aborted")

        cluster.pause(data_leader)  # the abort markers cannot land on it
        producer.abort_transaction(TIMEOUT_S)  # PrepareAbort is durable
        assert describe(address(cluster, coordinator), transactional_id
                        ).transaction_state == "PrepareAbort"
        cluster.kill(coordinator)
        cluster.resume(data_leader)
        others = survivors(cluster, coordinator)
        assert read_everything(others, partitions, "read_committed") == []

        def aborted_by_the_new_coordinator() -> bool:
            successor, successor_address = find_coordinator(others, transactional_id)
            return successor != coordinator and describe(
                successor_address, transactional_id).transaction_state == "CompleteAbort"
        wait_for(aborted_by_the_new_coordinator, "the new coordinator to finish the abort")
        wait_for(lambda: stable(cluster, topic), "the LSO to pass the aborted transaction")
        assert read_everything(others, partitions, "read_committed") == []
        assert read_everything(others, partitions, "read_uncommitted") == sorted(aborted)

        producer.begin_transaction()
        committed = send(producer, partitions, "committed")
        producer.commit_transaction(TIMEOUT_S)
        cluster.restart(coordinator)
        assert read_everything(bootstrap, partitions, "read_committed") == sorted(committed)
        assert read_everything(bootstrap, partitions, "read_uncommitted") == sorted(
            aborted + committed)
