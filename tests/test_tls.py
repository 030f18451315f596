"""A cluster with TLS listeners (``LocalCluster(tls=True)``: SASL_SSL, a CA of its own) and real
clients: confluent-kafka, kcat, kafka-python, aiokafka and the package's own tools through the
credentials registry; replication, group coordination and transactions across three brokers
(their connections to each other are TLS too); and what is refused: plaintext on the TLS port,
a client that does not trust the cluster's CA."""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import stat
import subprocess
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer
from support import wire
from support.clients import TIMEOUT_S, kcat_args, python_client_kwargs, wait_for
from support.replicated_cluster import create_replicated_topic

from pylog_nb import LocalCluster
from pylog_nb.broker.protocol.versions import API_VERSIONS_KEY
from pylog_nb.broker.security import tls
from pylog_nb.client import consume, produce, topics_frame, transaction
from pylog_nb.client.security import AclSpec, add_acls, add_user, user_config
from pylog_nb.cluster.credentials import client_settings

KCAT_TIMEOUT_S = 60
REFUSED_TIMEOUT_S = 5  # a client that cannot connect gives up on its Metadata after this


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(brokers=3, data_dir=tmp_path_factory.mktemp("tls"), tls=True) as running:
        yield running


@pytest.fixture
def topic() -> str:
    return f"tls-{uuid.uuid4().hex[:10]}"


def _host_port(cluster: LocalCluster, index: int = 0) -> tuple[str, int]:
    host, port = cluster.bootstrap_servers.split(",")[index].rsplit(":", 1)
    return host, int(port)


def _metadata_fails(settings: dict) -> str:
    """The error a client with ``settings`` gets asking for Metadata (it must get one)."""
    client = AdminClient({**settings, "socket.timeout.ms": 3000})
    with pytest.raises(KafkaException) as raised:
        client.list_topics(timeout=REFUSED_TIMEOUT_S)
    return str(raised.value)


def test_the_client_settings_name_sasl_ssl_and_the_ca(cluster):
    settings = cluster.client_config()
    ca = cluster.data_dir / tls.TLS_DIR / tls.CA_CERT_FILE
    assert settings["security.protocol"] == "SASL_SSL"
    assert settings["ssl.ca.location"] == str(ca)
    assert client_settings(cluster.bootstrap_servers) == {
        k: v for k, v in settings.items() if k != "bootstrap.servers"}
    properties = cluster.client_properties.read_text()
    assert "security.protocol=SASL_SSL" in properties
    assert f"ssl.ca.location={ca}" in properties
    assert stat.S_IMODE(cluster.client_properties.stat().st_mode) == 0o600
    for path in (cluster.data_dir / tls.TLS_DIR).iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_the_listener_presents_the_clusters_certificate(cluster):
    host, port = _host_port(cluster)
    context = tls.client_context(cluster.ca_file)
    with socket.create_connection((host, port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=host) as sock:
        assert sock.version() in ("TLSv1.2", "TLSv1.3")
        assert {"127.0.0.1", "localhost"} <= {value for _kind, value in
                                               sock.getpeercert()["subjectAltName"]}


def test_confluent_kafka_producer_and_consumer_group(cluster, topic):
    create_replicated_topic(cluster, topic, partitions=3)
    delivered = []
    producer = Producer(cluster.client_config(**{"acks": "all", "linger.ms": "5"}))
    for i in range(60):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(),
                         on_delivery=lambda error, message: delivered.append(error or message))
    assert producer.flush(TIMEOUT_S) == 0
    assert all(not isinstance(d, Exception) and d.error() is None for d in delivered), delivered
    group = f"g-{topic}"
    consumer = Consumer(cluster.client_config(**{
        "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": "false"}))
    consumer.subscribe([topic])
    seen: set[bytes] = set()
    try:
        def read():
            message = consumer.poll(1)
            if message is not None:
                assert message.error() is None, message.error()
                seen.add(message.value())
            return len(seen) == 60
        wait_for(read, "60 records through a consumer group over SASL_SSL", timeout_s=TIMEOUT_S)
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert seen == {f"v{i}".encode() for i in range(60)}
    assert any(g["group"] == group and g["offsets"] for g in cluster.groups())


def test_replication_across_three_brokers(cluster, topic):
    """Followers fetch from the leader over TLS, signed in as the inter-broker principal: every
    replica catches up and stays in the ISR."""
    create_replicated_topic(cluster, topic, partitions=3)
    produce(cluster.bootstrap_servers, topic, [(None, f"r{i}") for i in range(30)])

    def replicated():
        replicas = [p for parts in cluster.describe().values() for p in parts
                    if p["topic"] == topic]
        return (len(replicas) == 9
                and all(sorted(p["isr"]) == [1, 2, 3] for p in replicas)
                and sum(p["log_end_offset"] for p in replicas) == 3 * 30
                and all(p["high_watermark"] == p["log_end_offset"] for p in replicas))
    wait_for(replicated, "every replica of every partition caught up and in the ISR")


def test_a_transaction_across_leaders(cluster, topic):
    """The coordinator writes its markers to the leaders on the other brokers (WriteTxnMarkers
    over the brokers' own TLS connections), and the leaders verify with the coordinator."""
    create_replicated_topic(cluster, topic, partitions=3)
    with transaction(cluster.bootstrap_servers, f"txn-{topic}") as txn:
        for partition in range(3):
            txn.produce(topic, f"t{partition}", partition=partition)
    frame = consume(cluster.bootstrap_servers, topic, count=3, isolation_level="read_committed")
    assert sorted(frame.value) == ["t0", "t1", "t2"]


def test_the_packages_tools_find_the_settings_in_the_registry(cluster, topic):
    create_replicated_topic(cluster, topic)
    produced = produce(cluster.bootstrap_servers, topic, [("a", "one"), ("b", "two")])
    assert list(produced.offset) == [0, 1]
    assert topic in set(topics_frame(cluster.bootstrap_servers).topic)
    assert list(consume(cluster.bootstrap_servers, topic, count=2).value) == ["one", "two"]
    # the admin endpoint stays plain HTTP with its token
    assert set(cluster.describe()) == {1, 2, 3}


def test_a_user_of_its_own_signs_in_over_tls(cluster, topic):
    bootstrap = cluster.bootstrap_servers
    create_replicated_topic(cluster, topic)
    user = f"alice-{topic}"
    password = add_user(bootstrap, user)
    add_acls(bootstrap, [AclSpec(f"User:{user}", "write", "topic", topic)])
    settings = user_config(bootstrap, user, password)
    assert settings["security.protocol"] == "SASL_SSL"
    assert settings["ssl.ca.location"] == str(cluster.ca_file)
    settings = {k: v for k, v in settings.items() if k != "logger"}

    def delivered_as_alice():
        producer = Producer({**settings, "message.timeout.ms": 5000})
        results: list = []
        producer.produce(topic, value=b"from alice",
                         on_delivery=lambda error, _message: results.append(error))
        producer.flush(10)
        return results == [None]
    wait_for(delivered_as_alice, "alice's record (her credential and ACL reach every broker)")


def test_kcat_reads_client_properties(cluster, topic):
    kcat = shutil.which("kcat")
    assert kcat, "kcat is not installed: .ci/run installs it with apt-get install kcat"
    create_replicated_topic(cluster, topic)

    def run(*args: str, stdin: bytes = b"") -> str:
        done = subprocess.run([kcat, "-F", str(cluster.client_properties), *args], input=stdin,
                              capture_output=True, timeout=KCAT_TIMEOUT_S, check=False)
        assert done.returncode == 0, done.stderr.decode()
        return done.stdout.decode()

    assert f'topic "{topic}" with 1 partitions' in run("-L", "-t", topic)
    lines = [f"k{i}:line {i}" for i in range(20)]
    run("-P", "-t", topic, "-K:", stdin=("\n".join(lines) + "\n").encode())
    out = run("-C", "-t", topic, "-e", "-f", "%k:%s\n")
    assert out.splitlines() == lines
    # the registry's settings as -X options work too (kcat_args)
    done = subprocess.run([kcat, *kcat_args(cluster.bootstrap_servers), "-L", "-t", topic],
                          capture_output=True, timeout=KCAT_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr.decode()


def test_kafka_python_producer_and_consumer(cluster, topic):
    kwargs = python_client_kwargs(cluster.bootstrap_servers)
    assert kwargs["security_protocol"] == "SASL_SSL"
    assert isinstance(kwargs["ssl_context"], ssl.SSLContext)
    create_replicated_topic(cluster, topic)
    producer = KafkaProducer(**kwargs, acks="all")
    for i in range(10):
        producer.send(topic, f"kp{i}".encode())
    producer.flush(TIMEOUT_S)
    producer.close()
    consumer = KafkaConsumer(topic, **kwargs, group_id=f"kp-{topic}",
                             auto_offset_reset="earliest", consumer_timeout_ms=20_000)
    try:
        values = []
        for message in consumer:
            values.append(message.value)
            if len(values) == 10:
                break
    finally:
        consumer.close()
    assert values == [f"kp{i}".encode() for i in range(10)]


def test_aiokafka_producer_and_consumer(cluster, topic):
    create_replicated_topic(cluster, topic)

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**python_client_kwargs(cluster.bootstrap_servers))
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait(topic, f"aio{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, **python_client_kwargs(cluster.bootstrap_servers),
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        try:
            values = []
            async with asyncio.timeout(TIMEOUT_S):
                async for message in consumer:
                    values.append(message.value)
                    if len(values) == 5:
                        return values
        finally:
            await consumer.stop()
        return values

    assert asyncio.run(run()) == [f"aio{i}".encode() for i in range(5)]


def test_plaintext_on_the_tls_port_is_refused(cluster):
    host, port = _host_port(cluster)
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(wire.request_frame(API_VERSIONS_KEY, 3, {
            "client_software_name": "t", "client_software_version": "1"}))
        try:
            answer = wire.read_frame(sock)
        except ConnectionResetError:
            answer = None
        assert answer is None  # the broker wanted a TLS ClientHello: it closed the connection
    settings = {**cluster.client_config(), "security.protocol": "SASL_PLAINTEXT"}
    settings.pop("ssl.ca.location")
    _metadata_fails(settings)
    assert cluster.describe()  # the brokers carry on


def test_a_client_that_does_not_trust_the_ca_fails_the_handshake(cluster, tmp_path):
    host, port = _host_port(cluster)
    other = tls.ensure_files(tmp_path)  # another cluster's CA
    for context in (tls.client_context(other.ca), tls.client_context(None)):
        with socket.create_connection((host, port), timeout=10) as raw, \
                pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
            context.wrap_socket(raw, server_hostname=host)
    without_ca = cluster.client_config()
    without_ca.pop("ssl.ca.location")  # librdkafka then trusts the system's CAs only
    _metadata_fails(without_ca)
    _metadata_fails({**cluster.client_config(), "ssl.ca.location": str(other.ca)})


def test_a_host_the_certificate_does_not_name_fails_the_check(cluster):
    host, port = _host_port(cluster)
    with socket.create_connection((host, port), timeout=10) as raw, \
            pytest.raises(ssl.SSLCertVerificationError, match="match"):
        tls.client_context(cluster.ca_file).wrap_socket(raw, server_hostname="kafka.example")
