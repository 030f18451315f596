"""Transactions under process faults between EndTxn and the markers (issue 12).

Each test stops or cuts off a real broker process so that the coordinator has written its
decision (PrepareCommit or PrepareAbort) to ``__transaction_state`` but the markers cannot land
on the data partition yet, then SIGKILLs a broker or heals it.

- The data partition's leader SIGSTOPped before the commit and SIGKILLed after it, or isolated
  from its peers and the controller before the commit: the markers land on the partition's new
  leader, its last stable offset reaches its high watermark, read_committed consumers see the
  transaction; the old leader comes back as a follower, takes the marker, and as leader again
  serves the same last stable offset.
- The transaction coordinator SIGKILLed mid-abort or mid-commit (the data partition's only
  replica is on a SIGSTOPped broker, so the markers cannot land before it is back): the
  coordinator that takes over the ``__transaction_state`` partition reads PrepareAbort
  (PrepareCommit) from its log and finishes the transaction; no record of an aborted one ever
  reaches a read_committed consumer, and the next transaction of the producer commits after it.

The brokers run with a 2 s ``replica.lag.time.max.ms`` so the stopped broker leaves the ISR
(and acks=all appends go on without it) within the test's waits.
"""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic
from support import wire
from support.clients import TIMEOUT_S, admin, wait_for
from support.txn_clients import (
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


def _leave_it(cluster: LocalCluster, broker_id: int) -> None:
    """Nothing more to do to the broker."""


# The faults on the data partition's leader: what is done to it before the commit is asked
# for, right after the commit returned, and to undo it once the markers landed elsewhere.
LEADER_FAULTS = {
    # SIGSTOPped, then SIGKILLed: it never sees a marker; restarted, it recovers and follows.
    "kill": (LocalCluster.pause, LocalCluster.kill, LocalCluster.restart),
    # Cut off from its peers and the controller, still running and answering clients, and
    # believing it leads until it heals: the markers must reach the leader elected instead
    # (one it took meanwhile could not commit, no follower fetching from it, and is cut).
    "isolate": (LocalCluster.isolate, _leave_it, LocalCluster.heal),
}
# Should the coordinator reach the isolated leader before it is fenced, that marker waits for
# its acks=all append to time out (30 s) before it is written through the new leader.
MARKERS_ELSEWHERE_WAIT_S = 90


@pytest.mark.parametrize("fault", sorted(LEADER_FAULTS))
def test_commit_markers_land_on_the_new_leader_when_the_data_leader_fails(tmp_path, fault):
    before_commit, after_commit, restore = LEADER_FAULTS[fault]
    with LocalCluster(brokers=3, data_dir=tmp_path, broker_args=BROKER_ARGS) as cluster:
        bootstrap = cluster.bootstrap_servers
        partitions = create_replicated(bootstrap, unique("committed"), 1)
        topic = partitions[0].topic
        data_leader = controller_leader(cluster, topic)["leader"]
        transactional_id, _ = coordinated_elsewhere(bootstrap, data_leader)
        producer = transactional_producer(bootstrap, transactional_id)
        producer.begin_transaction()
        written = send(producer, partitions, "committed")

        before_commit(cluster, data_leader)  # no marker can land on it for good
        producer.commit_transaction(TIMEOUT_S)  # PrepareCommit is durable
        after_commit(cluster, data_leader)
        others = survivors(cluster, data_leader)
        wait_for(lambda: controller_leader(cluster, topic)["leader"] != data_leader,
                 "a new leader for the data partition")
        wait_for(lambda: stable(cluster, topic), "the LSO to reach the HW on the new leader",
                 timeout_s=MARKERS_ELSEWHERE_WAIT_S)
        lso, high = end_offsets(cluster, topic)
        assert lso == high == len(written) + 1  # the records and the commit marker
        assert read_everything(others, partitions, "read_committed") == sorted(written)
        coordinator, coordinator_address = find_coordinator(others, transactional_id)
        assert describe(coordinator_address, transactional_id).transaction_state == \
            "CompleteCommit"

        # Back as a follower it takes the marker; leading again it serves the same LSO.
        restore(cluster, data_leader)
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
        del producer  # destroyed before the cluster stops: no reconnect noise at exit


def single_replica_topic(bootstrap: str, broker_id: int) -> list[TopicPartition]:
    """A new topic of one partition whose only replica is on ``broker_id``."""
    topic = unique("single")
    only_replica = NewTopic(topic, num_partitions=1, replication_factor=-1,
                            replica_assignment=[[broker_id]])
    client = admin(bootstrap)
    client.create_topics([only_replica])[topic].result(TIMEOUT_S)
    return [TopicPartition(topic, 0)]


@pytest.mark.parametrize("ending", ["abort", "commit"])
def test_end_completes_from_the_log_when_the_coordinator_is_killed_before_the_markers(
        tmp_path, ending):
    """The data partition has one replica, so while its broker is stopped it has no leader at
    all and the transaction stays in PrepareAbort (PrepareCommit), whatever the timing, until
    the broker is back; by then the coordinator that decided is dead."""
    with LocalCluster(brokers=3, data_dir=tmp_path, broker_args=BROKER_ARGS) as cluster:
        bootstrap = cluster.bootstrap_servers
        data_leader = min(cluster.brokers)
        partitions = single_replica_topic(bootstrap, data_leader)
        topic = partitions[0].topic
        transactional_id, coordinator = coordinated_elsewhere(bootstrap, data_leader)
        producer = transactional_producer(bootstrap, transactional_id)
        producer.begin_transaction()
        written = send(producer, partitions, ending)

        cluster.pause(data_leader)  # the markers cannot land on it
        if ending == "abort":
            producer.abort_transaction(TIMEOUT_S)  # PrepareAbort is durable
        else:
            producer.commit_transaction(TIMEOUT_S)  # PrepareCommit is durable
        prepared, complete = {"abort": ("PrepareAbort", "CompleteAbort"),
                              "commit": ("PrepareCommit", "CompleteCommit")}[ending]
        assert describe(address(cluster, coordinator), transactional_id
                        ).transaction_state == prepared
        cluster.kill(coordinator)
        cluster.resume(data_leader)
        others = survivors(cluster, coordinator)
        if ending == "abort":
            assert read_everything(others, partitions, "read_committed") == []

        def completed_by_the_new_coordinator() -> bool:
            successor, successor_address = find_coordinator(others, transactional_id)
            return successor != coordinator and describe(
                successor_address, transactional_id).transaction_state == complete
        wait_for(completed_by_the_new_coordinator, "the new coordinator to finish the "
                 f"{ending} from its log")
        wait_for(lambda: stable(cluster, topic), "the LSO to pass the transaction")
        visible = written if ending == "commit" else []
        assert read_everything(others, partitions, "read_committed") == sorted(visible)
        assert read_everything(others, partitions, "read_uncommitted") == sorted(written)

        producer.begin_transaction()
        later = send(producer, partitions, "later")
        producer.commit_transaction(TIMEOUT_S)
        cluster.restart(coordinator)
        assert read_everything(bootstrap, partitions, "read_committed") == sorted(
            visible + later)
        assert read_everything(bootstrap, partitions, "read_uncommitted") == sorted(
            written + later)
        del producer  # destroyed before the cluster stops: no reconnect noise at exit
