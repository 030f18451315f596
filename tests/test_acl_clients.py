"""ACLs with real clients (issue 23): a secured LocalCluster with the authorizer on, its owner a
super user, and alice, a user the owner creates, refused until the owner grants her. (Not
test_acls.py: tests/broker/security/test_acls.py has that name, and pytest needs unique ones.)

One cluster serves the module; each test uses its own topics, groups and transactional ids,
so the grants of one do not open the doors of another.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
)
from kafka.admin import ResourceType as KpResourceType
from support import wire
from support.clients import python_client_kwargs

from pylog_nb.broker.errors import Errors
from pylog_nb.broker.protocol import versions as v
from pylog_nb.broker.security.sasl_client import SaslCredentials
from pylog_nb.cluster.local import LocalCluster

TIMEOUT_S = 30
ALICE, ALICE_PASSWORD = "alice", "alice-secret-1"
ALICE_PRINCIPAL = f"User:{ALICE}"
AUTHORIZER = ("--authorizer",)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(brokers=1, data_dir=tmp_path_factory.mktemp("acls"),
                      broker_args=AUTHORIZER) as running:
        owner = AdminClient(running.client_config())
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
        futures = owner.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(ALICE, info, ALICE_PASSWORD.encode())])
        futures[ALICE].result(TIMEOUT_S)
        yield running


@pytest.fixture(scope="module")
def owner(cluster) -> AdminClient:
    return AdminClient(cluster.client_config())


def alice_config(cluster, **settings) -> dict:
    return {**cluster.client_config(), "sasl.username": ALICE, "sasl.password": ALICE_PASSWORD,
            **settings}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(owner: AdminClient, name: str, partitions: int = 1, rf: int = 1) -> None:
    owner.create_topics([NewTopic(name, partitions, rf)])[name].result(TIMEOUT_S)


def grant(owner: AdminClient, *bindings: AclBinding) -> None:
    for future in owner.create_acls(list(bindings)).values():
        future.result(TIMEOUT_S)


def acl(resource_type, name: str, operation, *, pattern=ResourcePatternType.LITERAL,
        permission=AclPermissionType.ALLOW, principal: str = ALICE_PRINCIPAL) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, "*", operation, permission)


def produce_one(config: dict, topic: str) -> KafkaError | None:
    """The delivery error of one message (None: delivered)."""
    outcome: list = []
    producer = Producer({**config, "message.timeout.ms": 10_000})
    producer.produce(topic, b"v", on_delivery=lambda error, _m: outcome.append(error))
    producer.flush(TIMEOUT_S)
    assert outcome, "no delivery report"
    return outcome[0]


def test_produce_is_refused_until_a_prefixed_write_is_granted(cluster, owner):
    prefix = unique("orders")
    topic = f"{prefix}-eu"
    create_topic(owner, topic)
    error = produce_one(alice_config(cluster), topic)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    grant(owner, acl(ResourceType.TOPIC, f"{prefix}-", AclOperation.WRITE,
                     pattern=ResourcePatternType.PREFIXED))
    assert produce_one(alice_config(cluster), topic) is None


def test_a_deny_wins_over_an_allow(cluster, owner):
    prefix = unique("deny")
    open_topic, secret_topic = f"{prefix}-open", f"{prefix}-secret"
    for topic in (open_topic, secret_topic):
        create_topic(owner, topic)
    grant(owner,
          acl(ResourceType.TOPIC, prefix, AclOperation.WRITE,
              pattern=ResourcePatternType.PREFIXED),
          acl(ResourceType.TOPIC, secret_topic, AclOperation.WRITE,
              permission=AclPermissionType.DENY))
    assert produce_one(alice_config(cluster), open_topic) is None
    error = produce_one(alice_config(cluster), secret_topic)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def _consume(config: dict, topic: str, deadline_s: float = 20) -> tuple[list, list]:
    """(messages, error codes) of a group consumer of ``topic`` until a message or an error."""
    consumer = Consumer({**config, "auto.offset.reset": "earliest",
                         "fetch.wait.max.ms": 100})
    consumer.subscribe([topic])
    messages, codes = [], []
    try:
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline and not messages and not codes:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                codes.append(message.error().code())
            else:
                messages.append(message)
    finally:
        consumer.close()
    return messages, codes


def test_a_consumer_group_needs_read_on_the_group_and_the_topic(cluster, owner):
    topic, group = unique("events"), unique("readers")
    create_topic(owner, topic)
    assert produce_one(cluster.client_config(), topic) is None
    grant(owner, acl(ResourceType.TOPIC, topic, AclOperation.READ))
    config = alice_config(cluster, **{"group.id": group})

    messages, codes = _consume(config, topic)
    assert not messages and KafkaError.GROUP_AUTHORIZATION_FAILED in codes

    grant(owner, acl(ResourceType.GROUP, group, AclOperation.READ))
    messages, codes = _consume(config, topic)
    assert [m.value() for m in messages] == [b"v"], codes


def test_a_transactional_producer_needs_write_on_its_transactional_id(cluster, owner):
    topic, txn_id = unique("txn-out"), unique("alice-txn")
    create_topic(owner, topic)
    grant(owner, acl(ResourceType.TOPIC, topic, AclOperation.WRITE))
    config = alice_config(cluster, **{"transactional.id": txn_id})

    refused = Producer(config)
    with pytest.raises(KafkaException) as raised:
        refused.init_transactions(TIMEOUT_S)
    assert raised.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    grant(owner, acl(ResourceType.TRANSACTIONAL_ID, txn_id, AclOperation.WRITE))
    producer = Producer(config)
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, b"in a transaction")
    producer.commit_transaction(TIMEOUT_S)


def test_acls_are_described_and_deleted_through_the_admin_client(cluster, owner):
    principal = f"User:{unique('carol')}"
    topic = unique("carols")
    bindings = [acl(ResourceType.TOPIC, topic, AclOperation.READ, principal=principal),
                acl(ResourceType.TOPIC, topic, AclOperation.WRITE, principal=principal),
                acl(ResourceType.GROUP, "carols-group", AclOperation.READ, principal=principal)]
    grant(owner, *bindings)

    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, principal,
                                  None, AclOperation.ANY, AclPermissionType.ANY)
    assert set(owner.describe_acls(everything).result(TIMEOUT_S)) == set(bindings)
    topics_only = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY,
                                   principal, None, AclOperation.ANY, AclPermissionType.ANY)
    assert set(owner.describe_acls(topics_only).result(TIMEOUT_S)) == set(bindings[:2])

    writes = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.MATCH, principal,
                              None, AclOperation.WRITE, AclPermissionType.ANY)
    deleted = owner.delete_acls([writes])[writes].result(TIMEOUT_S)
    assert deleted == [bindings[1]]
    assert set(owner.describe_acls(everything).result(TIMEOUT_S)) == {bindings[0], bindings[2]}


def test_metadata_lists_only_the_topics_alice_may_describe(cluster, owner):
    mine, theirs = unique("visible"), unique("hidden")
    for topic in (mine, theirs):
        create_topic(owner, topic)
    grant(owner, acl(ResourceType.TOPIC, mine, AclOperation.DESCRIBE))
    listed = AdminClient(alice_config(cluster)).list_topics(timeout=TIMEOUT_S).topics
    assert mine in listed and theirs not in listed
    assert theirs in owner.list_topics(timeout=TIMEOUT_S).topics


def test_a_user_who_is_not_a_super_user_cannot_create_acls(cluster):
    alice = AdminClient(alice_config(cluster))
    binding = acl(ResourceType.TOPIC, "anything", AclOperation.ALL)
    with pytest.raises(KafkaException) as raised:
        alice.create_acls([binding])[binding].result(TIMEOUT_S)
    assert raised.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_three_brokers_replicate_with_the_authorizer_on(tmp_path):
    with LocalCluster(brokers=3, data_dir=tmp_path, broker_args=AUTHORIZER) as cluster:
        owner = AdminClient(cluster.client_config())
        create_topic(owner, "replicated", partitions=3, rf=3)
        producer = Producer(cluster.client_config(**{"acks": "all"}))
        outcome: list = []
        for index in range(30):
            producer.produce("replicated", str(index).encode(),
                             on_delivery=lambda error, _m: outcome.append(error))
        producer.flush(TIMEOUT_S)
        assert outcome == [None] * 30
        deadline = time.monotonic() + TIMEOUT_S
        while True:  # followers fetch as the inter-broker principal: CLUSTER_ACTION
            partitions = owner.list_topics("replicated", timeout=TIMEOUT_S).topics[
                "replicated"].partitions
            if all(len(p.isrs) == 3 for p in partitions.values()):
                break
            assert time.monotonic() < deadline, {i: p.isrs for i, p in partitions.items()}
            time.sleep(0.5)
        # inter-broker calls of transactions (verification, markers) as the broker principal
        transactional = Producer(cluster.client_config(**{"transactional.id": "t3"}))
        transactional.init_transactions(TIMEOUT_S)
        transactional.begin_transaction()
        for index in range(3):
            transactional.produce("replicated", b"committed", partition=index)
        transactional.commit_transaction(TIMEOUT_S)
        group = cluster.client_config(**{"group.id": "g3", "isolation.level": "read_committed"})
        messages, codes = [], []
        consumer = Consumer({**group, "auto.offset.reset": "earliest"})
        consumer.subscribe(["replicated"])
        try:
            deadline = time.monotonic() + TIMEOUT_S
            while len(messages) < 33 and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None:
                    (codes if message.error() else messages).append(message)
        finally:
            consumer.close()
        assert len(messages) == 33, [m.error() for m in codes]


# == the wire, where no client library goes: quotas, bad input ====================================


def alice_socket(cluster):
    sock = wire.connect(cluster.bootstrap_servers, authenticate=False)
    wire.sign_in(sock, SaslCredentials(ALICE, ALICE_PASSWORD, "SCRAM-SHA-512"))
    return sock


def test_client_quotas_are_set_by_the_owner_and_refused_to_alice(cluster):
    entity = [{"entity_type": "client-id", "entity_name": unique("app")}]
    alter = {"entries": [{"entity": entity, "ops": [
        {"key": "producer_byte_rate", "value": 1024.0, "remove": False}]}],
        "validate_only": False}
    describe = {"components": [{"entity_type": "client-id", "match_type": 0,
                                "match": entity[0]["entity_name"]}], "strict": False}
    with alice_socket(cluster) as sock:
        refused = wire.call(sock, v.ALTER_CLIENT_QUOTAS_KEY, 1, alter)
        assert [e.error_code for e in refused.entries] == [Errors.CLUSTER_AUTHORIZATION_FAILED]
        refused = wire.call(sock, v.DESCRIBE_CLIENT_QUOTAS_KEY, 1, describe)
        assert refused.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
    with wire.connect(cluster.bootstrap_servers) as sock:
        done = wire.call(sock, v.ALTER_CLIENT_QUOTAS_KEY, 1, alter)
        assert [e.error_code for e in done.entries] == [Errors.NONE]
        described = wire.call(sock, v.DESCRIBE_CLIENT_QUOTAS_KEY, 1, describe)
        assert described.error_code == Errors.NONE
        [entry] = described.entries
        assert [(q.key, q.value) for q in entry.values] == [("producer_byte_rate", 1024.0)]


def test_malformed_acl_requests_get_kafka_errors(cluster):
    creation = {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3,
                "principal": "User:x", "host": "*", "operation": 3, "permission_type": 3}
    bad = [{**creation, "resource_type": 99}, {**creation, "principal": "nocolon"},
           {**creation, "host": "not-an-ip"}, {**creation, "operation": 1},
           {**creation, "resource_pattern_type": 2}, {**creation, "resource_name": ""},
           {**creation, "resource_type": 4}]
    with wire.connect(cluster.bootstrap_servers) as sock:
        created = wire.call(sock, v.CREATE_ACLS_KEY, 3, {"creations": [*bad, creation]})
        codes = [r.error_code for r in created.results]
        assert codes == [Errors.INVALID_REQUEST] * len(bad) + [Errors.NONE]
        deleted = wire.call(sock, v.DELETE_ACLS_KEY, 3, {"filters": [
            {"resource_type_filter": 0, "resource_name_filter": None, "pattern_type_filter": 1,
             "principal_filter": None, "host_filter": None, "operation": 1,
             "permission_type": 1},
            {"resource_type_filter": 2, "resource_name_filter": "t", "pattern_type_filter": 3,
             "principal_filter": "User:x", "host_filter": None, "operation": 1,
             "permission_type": 1}]})
        assert [r.error_code for r in deleted.filter_results] == [
            Errors.INVALID_REQUEST, Errors.NONE]
        assert [a.principal for a in deleted.filter_results[1].matching_acls] == ["User:x"]
        described = wire.call(sock, v.DESCRIBE_ACLS_KEY, 3, {
            "resource_type_filter": 42, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1,
            "permission_type": 1})
        assert described.error_code == Errors.INVALID_REQUEST


def test_kafka_python_creates_describes_and_deletes_acls(cluster):
    principal, topic = f"User:{unique('erin')}", unique("erins")
    client = KafkaAdminClient(**python_client_kwargs(cluster.bootstrap_servers))
    try:
        binding = ACL(principal, "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                      ResourcePattern(KpResourceType.TOPIC, topic))
        created = client.create_acls([binding])
        assert created["succeeded"] == [binding] and not created["failed"]
        wanted = ACLFilter(principal, None, ACLOperation.ANY, ACLPermissionType.ANY,
                           ResourcePatternFilter(KpResourceType.ANY, None,
                                                 ACLResourcePatternType.ANY))
        described, error = client.describe_acls(wanted)
        assert error.errno == 0 and [a.principal for a in described] == [principal]
        [(_filter, deleted, error)] = client.delete_acls([wanted])
        assert error.errno == 0 and [a.principal for a in deleted] == [principal]
    finally:
        client.close()


def test_authorized_operations_are_reported_per_caller(cluster, owner):
    topic = unique("ops")
    create_topic(owner, topic)
    grant(owner, acl(ResourceType.TOPIC, topic, AclOperation.READ))
    alice = AdminClient(alice_config(cluster))
    described = alice.describe_topics(TopicCollection([topic]),
                                      include_authorized_operations=True)[topic]
    assert set(described.result(TIMEOUT_S).authorized_operations) == {
        AclOperation.READ, AclOperation.DESCRIBE}
    as_owner = owner.describe_cluster(include_authorized_operations=True).result(TIMEOUT_S)
    assert AclOperation.ALTER in as_owner.authorized_operations
    as_alice = alice.describe_cluster(include_authorized_operations=True).result(TIMEOUT_S)
    assert not as_alice.authorized_operations  # no DESCRIBE on the cluster
