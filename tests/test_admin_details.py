"""Admin details of issue 12, each as Kafka behaves, against three broker processes and the
controller quorum with confluent-kafka's AdminClient: APPEND / SUBTRACT on list-typed topic
configs, CreatePartitions with an explicit replica assignment, authorized operations, and the
brokers' num.partitions / default.replication.factor for auto-created topics and CreateTopics
with -1.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import (
    AclOperation,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)
from support.clients import TIMEOUT_S, admin, produce, read_to_end

from pylog_nb import LocalCluster

NUM_PARTITIONS = 4  # the brokers' --num-partitions
REPLICATION_FACTOR = 3  # the brokers' --default-replication-factor


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    args = ("--num-partitions", str(NUM_PARTITIONS),
            "--default-replication-factor", str(REPLICATION_FACTOR))
    with LocalCluster(brokers=3, data_dir=tmp_path_factory.mktemp("admin"),
                      broker_args=args) as running:
        yield running


@pytest.fixture
def bootstrap(cluster) -> str:
    return cluster.bootstrap_servers


def _name() -> str:
    return f"adm-{uuid.uuid4().hex[:10]}"


def _create(bootstrap: str, name: str, partitions: int = 1, replication_factor: int = 1) -> None:
    client = admin(bootstrap)
    client.create_topics([NewTopic(name, partitions, replication_factor)])[name].result(
        TIMEOUT_S)


def _refused(future) -> tuple[str, str]:
    """The (error name, message) a failed admin future carries."""
    with pytest.raises(KafkaException) as raised:
        future.result(TIMEOUT_S)
    error = raised.value.args[0]
    return error.name(), error.str()


# -- 1. IncrementalAlterConfigs APPEND / SUBTRACT ------------------------------------------------


def _alter(client, name: str, key: str, operation: AlterConfigOpType, value: str | None):
    resource = ConfigResource("topic", name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=operation)])
    return client.incremental_alter_configs([resource])[resource]


def _config(client, name: str, key: str):
    resource = ConfigResource("topic", name)
    return client.describe_configs([resource])[resource].result(TIMEOUT_S)[key]


def test_append_and_subtract_on_a_list_config(bootstrap):
    name = _name()
    _create(bootstrap, name)
    client = admin(bootstrap)
    # From the default (delete): Kafka starts the list from the default when nothing is set.
    _alter(client, name, "cleanup.policy", AlterConfigOpType.APPEND, "compact").result(TIMEOUT_S)
    entry = _config(client, name, "cleanup.policy")
    assert entry.value == "delete,compact"
    assert not entry.is_default
    # An element already present: nothing changes.
    _alter(client, name, "cleanup.policy", AlterConfigOpType.APPEND, "compact").result(TIMEOUT_S)
    assert _config(client, name, "cleanup.policy").value == "delete,compact"
    _alter(client, name, "cleanup.policy", AlterConfigOpType.SUBTRACT, "delete").result(TIMEOUT_S)
    assert _config(client, name, "cleanup.policy").value == "compact"
    # An element absent: nothing changes.
    _alter(client, name, "cleanup.policy", AlterConfigOpType.SUBTRACT, "delete").result(TIMEOUT_S)
    assert _config(client, name, "cleanup.policy").value == "compact"


def test_append_and_subtract_are_refused_where_kafka_refuses_them(bootstrap):
    name = _name()
    _create(bootstrap, name)
    client = admin(bootstrap)
    for operation, verb in ((AlterConfigOpType.APPEND, "APPEND"),
                            (AlterConfigOpType.SUBTRACT, "SUBTRACT")):
        code, message = _refused(_alter(client, name, "retention.ms", operation, "1000"))
        assert code == "INVALID_CONFIG"
        assert message == f"Can't {verb} to key retention.ms because its type is not LIST."
    # The result is validated like a SET: an unknown policy, or no policy at all.
    code, message = _refused(
        _alter(client, name, "cleanup.policy", AlterConfigOpType.APPEND, "forever"))
    assert code == "INVALID_CONFIG"
    assert "cleanup.policy" in message and "delete,forever" in message
    entry = _config(client, name, "cleanup.policy")
    assert (entry.value, entry.is_default) == ("delete", True)  # nothing half-applied


def test_an_empty_cleanup_policy_is_accepted(bootstrap):
    """Kafka (KIP-1161) takes an empty cleanup.policy as delete with infinite retention."""
    name = _name()
    client = admin(bootstrap)
    client.create_topics([NewTopic(name, 1, 1, config={"cleanup.policy": ""})])[name].result(
        TIMEOUT_S)
    entry = _config(client, name, "cleanup.policy")
    assert (entry.value, entry.is_default) == ("", False)
    assert len(produce(bootstrap, name, [(None, b"kept")])) == 1
    assert [m.value() for m in read_to_end(bootstrap, name)] == [b"kept"]
    other = _name()
    _create(bootstrap, other)
    _alter(client, other, "cleanup.policy", AlterConfigOpType.SUBTRACT, "delete").result(TIMEOUT_S)
    assert _config(client, other, "cleanup.policy").value == ""
    code, _ = _refused(_alter(client, other, "cleanup.policy", AlterConfigOpType.SET, "delete,"))
    assert code == "INVALID_CONFIG"


# -- 2. CreatePartitions with a replica assignment ----------------------------------------------


def test_create_partitions_keeps_the_requested_replica_order(bootstrap):
    name = _name()
    _create(bootstrap, name, partitions=1, replication_factor=2)
    client = admin(bootstrap)
    wanted = [[3, 1], [2, 3], [1, 2]]  # first replica: the preferred leader
    client.create_partitions([NewPartitions(name, 4, replica_assignment=wanted)])[name].result(
        TIMEOUT_S)
    described = client.describe_topics(TopicCollection([name]))[name].result(TIMEOUT_S)
    partitions = sorted(described.partitions, key=lambda p: p.id)
    assert len(partitions) == 4
    for partition, replicas in zip(partitions[1:], wanted, strict=True):
        assert [node.id for node in partition.replicas] == replicas
        assert partition.leader.id == replicas[0]
    metadata = client.list_topics(name, timeout=TIMEOUT_S).topics[name].partitions
    assert [metadata[i].replicas for i in (1, 2, 3)] == wanted
    assert [metadata[i].leader for i in (1, 2, 3)] == [3, 2, 1]


@pytest.mark.parametrize(("assignment", "message"), [
    ([[1, 2]], "Adding 2 partition(s) needs as many assignments, got 1"),
    ([[1, 2], [3, 3]], "Partition 2: replicas [3, 3] must be distinct"),
    ([[1, 2], [3]], "Partition 2 has 1 replicas, not 2"),
    ([[1, 2], [3, 9]], "Partition 2: brokers [9] are not registered"),
])
def test_create_partitions_refuses_a_bad_assignment(bootstrap, assignment, message):
    name = _name()
    _create(bootstrap, name, partitions=1, replication_factor=2)
    client = admin(bootstrap)
    future = client.create_partitions([NewPartitions(name, 3, replica_assignment=assignment)])
    assert _refused(future[name]) == ("INVALID_REPLICA_ASSIGNMENT", message)
    topic = client.list_topics(name, timeout=TIMEOUT_S).topics[name]
    assert len(topic.partitions) == 1  # nothing created


# -- 3. Authorized operations -------------------------------------------------------------------

TOPIC_OPERATIONS = {
    AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
    AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
}
CLUSTER_OPERATIONS = {
    AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
    AclOperation.DESCRIBE,
}


def test_describe_topics_with_authorized_operations(bootstrap):
    name = _name()
    _create(bootstrap, name)
    client = admin(bootstrap)
    topics = TopicCollection([name])
    asked = client.describe_topics(topics, include_authorized_operations=True)[name]
    assert set(asked.result(TIMEOUT_S).authorized_operations) == TOPIC_OPERATIONS
    plain = client.describe_topics(topics)[name].result(TIMEOUT_S)
    assert not plain.authorized_operations  # not asked: Kafka's "unknown" (-2^31)


def test_describe_cluster_with_authorized_operations(bootstrap):
    client = admin(bootstrap)
    asked = client.describe_cluster(include_authorized_operations=True).result(TIMEOUT_S)
    assert set(asked.authorized_operations) == CLUSTER_OPERATIONS
    assert len(asked.nodes) == 3
    plain = client.describe_cluster().result(TIMEOUT_S)
    assert not plain.authorized_operations


# -- 4. The brokers' defaults for new topics ----------------------------------------------------


def _shape(bootstrap: str, name: str) -> tuple[int, set[int]]:
    """(partition count, the set of replication factors) as Metadata reports them."""
    topic = admin(bootstrap).list_topics(name, timeout=TIMEOUT_S).topics[name]
    assert topic.error is None, topic.error
    return len(topic.partitions), {len(p.replicas) for p in topic.partitions.values()}


def test_auto_created_topic_takes_the_brokers_defaults(bootstrap):
    name = _name()
    delivered = produce(bootstrap, name, [(b"k%d" % i, b"v%d" % i) for i in range(20)])
    assert len(delivered) == 20
    assert _shape(bootstrap, name) == (NUM_PARTITIONS, {REPLICATION_FACTOR})
    assert {m.partition() for m in delivered} <= set(range(NUM_PARTITIONS))


def test_create_topics_with_minus_one_takes_the_brokers_defaults(bootstrap):
    name, partitions_only, factor_only = _name(), _name(), _name()
    client = admin(bootstrap)
    futures = client.create_topics([
        NewTopic(name, -1, -1), NewTopic(partitions_only, -1, 1), NewTopic(factor_only, 2, -1)])
    for future in futures.values():
        future.result(TIMEOUT_S)
    assert _shape(bootstrap, name) == (NUM_PARTITIONS, {REPLICATION_FACTOR})
    assert _shape(bootstrap, partitions_only) == (NUM_PARTITIONS, {1})
    assert _shape(bootstrap, factor_only) == (2, {REPLICATION_FACTOR})
    broker = ConfigResource("broker", "1")
    described = client.describe_configs([broker])[broker].result(TIMEOUT_S)
    assert described["num.partitions"].value == str(NUM_PARTITIONS)
    assert described["default.replication.factor"].value == str(REPLICATION_FACTOR)
