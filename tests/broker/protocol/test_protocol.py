"""Framing and codec: every advertised (api, version) parses, and responses encode for each."""

from __future__ import annotations

import io
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from pylog_nb.broker.protocol import codec
from pylog_nb.broker.protocol.versions import API_VERSIONS
from pylog_nb.broker.server.apis import CONNECTION_APIS, CORE_HANDLERS, SHELL_HANDLERS

ALL_PARSED = [(k, v) for k, r in API_VERSIONS.items() for v in range(r.min_parsed, r.max + 1)]


def _frame(api_key: int, version: int, body: dict, tagged: bytes = b"\0") -> bytes:
    schema = load_request_schema(api_key, version)
    header = struct.pack(">hhih", api_key, version, 42, 3) + b"cid"
    if schema.__flexible__:
        header += tagged
    buffer = io.BytesIO()
    entity_writer(schema)(buffer, codec.to_entity(schema, body))
    return header + buffer.getvalue()


@pytest.mark.parametrize(("api_key", "version"), ALL_PARSED)
def test_every_supported_version_parses_a_zero_request(api_key, version):
    request = codec.parse_request(_frame(api_key, version, {}))
    assert request.header == codec.RequestHeader(api_key, version, 42, "cid")
    assert type(request.body) is load_request_schema(api_key, version)


@pytest.mark.parametrize(("api_key", "version"), ALL_PARSED)
def test_every_supported_version_encodes_a_zero_response(api_key, version):
    header = codec.RequestHeader(api_key, version, 7, None)
    frame = codec.encode_response(header, {})
    size, correlation_id = struct.unpack_from(">ii", frame)
    assert size == len(frame) - 4 and correlation_id == 7
    schema = load_response_schema(api_key, version)
    flexible_header = schema.__flexible__ and api_key != 18
    body, used = entity_reader(schema)(frame, 8 + int(flexible_header))
    assert 8 + int(flexible_header) + used == len(frame)


def test_tagged_fields_in_request_header_are_skipped():
    tagged = b"\x01" + b"\x05" + b"\x02" + b"ab"  # one tagged field, tag 5, 2 bytes
    request = codec.parse_request(_frame(18, 3, {"client_software_name": "x"}, tagged))
    assert request.body.client_software_name == "x"


def test_trailing_bytes_are_ignored_like_kafka():
    # librdkafka's Metadata v12 carries a stale flag after the body; Kafka never reads it.
    request = codec.parse_request(_frame(3, 12, {"allow_auto_topic_creation": True}) + b"\1\0\0")
    assert request.body.allow_auto_topic_creation is True


def test_unknown_version_reports_header():
    frame = struct.pack(">hhih", 0, 2, 5, -1)
    with pytest.raises(codec.UnsupportedRequestError) as raised:
        codec.parse_request(frame)
    assert raised.value.header.correlation_id == 5


def test_every_advertised_api_has_a_handler():
    assert set(CORE_HANDLERS) | set(SHELL_HANDLERS) | CONNECTION_APIS == set(API_VERSIONS)


@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_raise_anything_but_protocol_errors(data):
    try:
        codec.parse_request(data)
    except (codec.MalformedRequestError, codec.UnsupportedRequestError):
        pass


@given(st.integers(0, 2**31 - 1), st.text(max_size=20))
def test_metadata_response_round_trips(node_id, host):
    header = codec.RequestHeader(3, 12, 1, None)
    body = {
        "brokers": [{"node_id": node_id, "host": host, "port": 9092}],
        "topics": [
            {
                "error_code": 3,
                "name": "t",
                "partitions": [
                    {"partition_index": 0, "leader_id": node_id, "replica_nodes": [node_id]}
                ],
            }
        ],
    }
    frame = codec.encode_response(header, body)
    decoded, _ = entity_reader(load_response_schema(3, 12))(frame, 9)
    assert decoded.brokers[0].node_id == node_id and decoded.brokers[0].host == host
    assert decoded.topics[0].error_code == 3
