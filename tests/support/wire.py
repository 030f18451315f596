"""Raw Kafka frames over a plain socket, for tests that must send what no client would."""

from __future__ import annotations

import io
import socket
import struct

from kafka.record.default_records import DefaultRecordBatchBuilder
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from pylog_nb.broker.protocol.codec import to_entity
from pylog_nb.broker.protocol.versions import SASL_AUTHENTICATE_KEY, SASL_HANDSHAKE_KEY
from pylog_nb.broker.security.sasl_client import SaslClient, SaslCredentials
from pylog_nb.cluster.credentials import client_settings

SOCKET_TIMEOUT_S = 10


def connect(bootstrap: str, authenticate: bool = True) -> socket.socket:
    """A connection to the first broker of ``bootstrap``; to a local cluster of ours, signed in
    as its owner (unless ``authenticate`` is False: a stranger's connection)."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT_S)
    settings = client_settings(bootstrap)
    if authenticate and settings:
        sign_in(sock, SaslCredentials(settings["sasl.username"], settings["sasl.password"],
                                      settings["sasl.mechanism"]))
    return sock


def sign_in(sock: socket.socket, credentials: SaslCredentials) -> None:
    """SaslHandshake v1, then SaslAuthenticate v2 until done (asserting every step succeeds)."""
    handshake = call(sock, SASL_HANDSHAKE_KEY, 1, {"mechanism": credentials.mechanism})
    assert handshake.error_code == 0, handshake
    client = SaslClient(credentials)
    token: bytes | None = client.first()
    while token is not None:
        answer = call(sock, SASL_AUTHENTICATE_KEY, 2, {"auth_bytes": token})
        assert answer.error_code == 0, answer
        token = client.step(answer.auth_bytes)


def request_frame(api_key: int, version: int, body: dict, correlation_id: int = 1) -> bytes:
    schema = load_request_schema(api_key, version)
    header = struct.pack(">hhih", api_key, version, correlation_id, 5) + b"tests"
    if schema.__flexible__:
        header += b"\0"
    buffer = io.BytesIO()
    entity_writer(schema)(buffer, to_entity(schema, body))
    payload = header + buffer.getvalue()
    return struct.pack(">i", len(payload)) + payload


def read_frame(sock: socket.socket) -> bytes | None:
    """One response frame without its size, or None if the broker closed the connection."""
    head = _read_exactly(sock, 4)
    if head is None:
        return None
    return _read_exactly(sock, struct.unpack(">i", head)[0])


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def call(sock: socket.socket, api_key: int, version: int, body: dict):
    """Send one request and decode the response body."""
    sock.sendall(request_frame(api_key, version, body))
    frame = read_frame(sock)
    assert frame is not None, "broker closed the connection"
    schema = load_response_schema(api_key, version)
    pos = 4 + (1 if schema.__flexible__ and api_key != 18 else 0)
    return entity_reader(schema)(frame, pos)[0]


def batch(values: list[bytes], timestamp_ms: int = 1_700_000_000_000) -> bytearray:
    """A valid uncompressed RecordBatch v2 built by kafka-python (an independent encoder)."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=0, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=1 << 30,
    )
    for index, value in enumerate(values):
        builder.append(index, timestamp=timestamp_ms, key=None, value=value, headers=[])
    return builder.build()


def produce_body(topic: str, records: bytes, partition: int = 0, acks: int = 1) -> dict:
    return {"acks": acks, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": bytes(records)}]}]}
