"""SASL on the wire against a real broker: the handshake's rules, bad input, re-authentication
(KIP-368), and real clients through a session's end."""

from __future__ import annotations

import socket
import struct
import time

import pytest
from confluent_kafka import Producer
from scramp import ScramClient
from support import wire
from support.clients import consume_all, create_topic, kafka_conf

from pylog_nb import LocalCluster
from pylog_nb.broker.errors import Errors
from pylog_nb.broker.protocol.versions import (
    API_VERSIONS_KEY,
    METADATA_KEY,
    SASL_AUTHENTICATE_KEY,
    SASL_HANDSHAKE_KEY,
)
from pylog_nb.broker.security.sasl_client import SaslCredentials
from pylog_nb.cluster.credentials import client_settings

REAUTH_MS = 3_000  # connections.max.reauth.ms of this module's cluster
METADATA = {"topics": None, "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    with LocalCluster(brokers=1, data_dir=tmp_path_factory.mktemp("sasl"),
                      broker_args=("--connections-max-reauth-ms", str(REAUTH_MS))) as cluster:
        yield cluster


def _owner(cluster: LocalCluster, mechanism: str = "SCRAM-SHA-512") -> SaslCredentials:
    settings = client_settings(cluster.bootstrap_servers)
    return SaslCredentials(settings["sasl.username"], settings["sasl.password"], mechanism)


def _stranger(cluster: LocalCluster) -> socket.socket:
    return wire.connect(cluster.bootstrap_servers, authenticate=False)


def _closed(sock: socket.socket) -> bool:
    return wire.read_frame(sock) is None


def test_only_api_versions_and_the_handshake_come_before_sign_in(secured):
    sock = _stranger(secured)
    assert wire.call(sock, API_VERSIONS_KEY, 3, {"client_software_name": "t",
                                                 "client_software_version": "1"}).error_code == 0
    sock.sendall(wire.request_frame(METADATA_KEY, 12, METADATA))
    assert _closed(sock)


def test_unknown_mechanism_is_refused_with_the_enabled_ones(secured):
    sock = _stranger(secured)
    answer = wire.call(sock, SASL_HANDSHAKE_KEY, 1, {"mechanism": "GSSAPI"})
    assert answer.error_code == Errors.UNSUPPORTED_SASL_MECHANISM
    assert set(answer.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert _closed(sock)


def test_authenticate_before_the_handshake_is_an_illegal_state(secured):
    sock = _stranger(secured)
    answer = wire.call(sock, SASL_AUTHENTICATE_KEY, 2, {"auth_bytes": b"\0admin\0x"})
    assert answer.error_code == Errors.ILLEGAL_SASL_STATE
    assert _closed(sock)


@pytest.mark.parametrize("token", [b"", b"garbage", b"n,,n=admin", b"n,,n=admin,r=" + b"x" * 9000,
                                   b"\xff\xfe", b"p=,c=,r="])
def test_malformed_scram_messages_fail_and_close(secured, token):
    sock = _stranger(secured)
    assert wire.call(sock, SASL_HANDSHAKE_KEY, 1, {"mechanism": "SCRAM-SHA-256"}).error_code == 0
    answer = wire.call(sock, SASL_AUTHENTICATE_KEY, 2, {"auth_bytes": token})
    if answer.error_code == 0:  # a well-formed client-first: the final message is the bad one
        answer = wire.call(sock, SASL_AUTHENTICATE_KEY, 2, {"auth_bytes": b"c=biws,r=x,p=AAAA"})
    assert answer.error_code == Errors.SASL_AUTHENTICATION_FAILED
    assert _closed(sock)


def test_a_replayed_scram_final_message_is_refused(secured):
    """The final message of a successful exchange, replayed on a new connection (new server
    nonce), proves nothing."""
    owner = _owner(secured)
    sock = _stranger(secured)
    client = ScramClient([owner.mechanism], owner.username, owner.password)
    wire.call(sock, SASL_HANDSHAKE_KEY, 1, {"mechanism": owner.mechanism})
    first = client.get_client_first().encode()
    server_first = wire.call(sock, SASL_AUTHENTICATE_KEY, 2, {"auth_bytes": first}).auth_bytes
    client.set_server_first(server_first.decode())
    final = client.get_client_final().encode()
    assert wire.call(sock, SASL_AUTHENTICATE_KEY, 2, {"auth_bytes": final}).error_code == 0
    replay = _stranger(secured)
    wire.call(replay, SASL_HANDSHAKE_KEY, 1, {"mechanism": owner.mechanism})
    assert wire.call(replay, SASL_AUTHENTICATE_KEY, 2, {"auth_bytes": first}).error_code == 0
    answer = wire.call(replay, SASL_AUTHENTICATE_KEY, 2, {"auth_bytes": final})
    assert answer.error_code == Errors.SASL_AUTHENTICATION_FAILED


def test_an_oversized_frame_before_sign_in_closes_unread(secured):
    sock = _stranger(secured)
    sock.sendall(struct.pack(">i", 1024 * 1024) + b"\0" * 16)
    assert _closed(sock)


def test_handshake_v0_takes_bare_tokens(secured):
    """The pre-KIP-152 wire (kafka-python's with SaslHandshake v0): tokens without headers."""
    owner = _owner(secured, "PLAIN")
    sock = _stranger(secured)
    assert wire.call(sock, SASL_HANDSHAKE_KEY, 0, {"mechanism": "PLAIN"}).error_code == 0
    token = f"\0{owner.username}\0{owner.password}".encode()
    sock.sendall(struct.pack(">i", len(token)) + token)
    assert wire.read_frame(sock) == b""  # PLAIN's empty answer, size-prefixed
    assert wire.call(sock, METADATA_KEY, 12, METADATA).brokers


def test_a_session_ends_unless_renewed_on_the_same_connection(secured):
    owner = _owner(secured)
    sock = _stranger(secured)
    wire.sign_in(sock, owner)
    assert wire.call(sock, METADATA_KEY, 12, METADATA).brokers
    time.sleep(REAUTH_MS * 0.6 / 1000)
    wire.sign_in(sock, owner)  # KIP-368: the same principal again, on the same connection
    time.sleep(REAUTH_MS * 0.6 / 1000)  # past the first session's end, inside the second's
    assert wire.call(sock, METADATA_KEY, 12, METADATA).brokers
    time.sleep(REAUTH_MS / 1000)
    sock.sendall(wire.request_frame(METADATA_KEY, 12, METADATA))
    assert _closed(sock)


def test_session_lifetime_is_announced(secured):
    owner = _owner(secured, "PLAIN")
    sock = _stranger(secured)
    wire.call(sock, SASL_HANDSHAKE_KEY, 1, {"mechanism": "PLAIN"})
    token = f"\0{owner.username}\0{owner.password}".encode()
    answer = wire.call(sock, SASL_AUTHENTICATE_KEY, 2, {"auth_bytes": token})
    assert answer.error_code == 0
    assert answer.session_lifetime.total_seconds() * 1000 == REAUTH_MS


def test_librdkafka_reauthenticates_and_keeps_producing(secured):
    """A producer outlives three session lifetimes: librdkafka signs in again on its own, on
    the same connection (the broker closes none for an expired session)."""
    expired_before = _expired_sessions(secured)
    topic = "reauth"
    create_topic(secured.bootstrap_servers, topic)
    producer = Producer(kafka_conf(secured.bootstrap_servers, **{"linger.ms": 5}))
    sent = 0
    deadline = time.monotonic() + 3 * REAUTH_MS / 1000
    while time.monotonic() < deadline:
        producer.produce(topic, f"{sent}".encode())
        sent += 1
        producer.poll(0.1)
    assert producer.flush(30) == 0
    values = [m.value() for m in consume_all(secured.bootstrap_servers, topic, sent)]
    assert values == [f"{i}".encode() for i in range(sent)]
    assert _expired_sessions(secured) == expired_before


def _expired_sessions(cluster: LocalCluster) -> int:
    return cluster.brokers[1].log_path.read_text().count("session expired")
