"""The hand-written ProduceResponse encoder writes kio's bytes for every advertised version.

The reference is ``codec.encode_entity`` with kio's schema: the path ``codec.encode_response``
took for Produce before it used the hand-written encoder.
"""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from pylog_nb.broker.protocol.codec import (
    RequestHeader,
    encode_entity,
    encode_response,
    load_response_schema,
)
from pylog_nb.broker.protocol.produce_response import (
    VERSION_MAX,
    VERSION_MIN,
    encode_produce_response,
)
from pylog_nb.broker.protocol.versions import API_VERSIONS, PRODUCE_KEY

VERSIONS = range(API_VERSIONS[PRODUCE_KEY].min_parsed, API_VERSIONS[PRODUCE_KEY].max + 1)
NOT_LEADER_OR_FOLLOWER = 6
INVALID_RECORD = 87


def _kio(version: int, body: dict, correlation_id: int = 7) -> bytes:
    header = RequestHeader(PRODUCE_KEY, version, correlation_id, None)
    return bytes(encode_entity(header, load_response_schema(PRODUCE_KEY, version), body))


def _assert_same(version: int, body: dict, correlation_id: int = 7) -> None:
    expected = _kio(version, body, correlation_id)
    assert encode_produce_response(correlation_id, version, body) == expected
    header = RequestHeader(PRODUCE_KEY, version, correlation_id, "client")
    assert bytes(encode_response(header, body)) == expected  # codec takes this encoder


def _appended(index: int, base_offset: int, append_time: int = -1) -> dict:
    """A partition's answer as the replica manager shapes it after an append."""
    return {"index": index, "base_offset": base_offset, "log_start_offset": 0,
            "error_code": 0, "log_append_time": append_time}


def test_every_advertised_version_is_encoded():
    assert (VERSION_MIN, VERSION_MAX) == (VERSIONS.start, VERSIONS.stop - 1)


@pytest.mark.parametrize("version", VERSIONS)
def test_appended_partitions_match_kio(version):
    body = {"responses": [{"name": "bench", "partition_responses": [
        _appended(i, 1000 * i + 17) for i in range(6)]}]}
    _assert_same(version, body)


@pytest.mark.parametrize("version", VERSIONS)
def test_log_append_time_matches_kio(version):
    now_ms = 1_764_000_000_123
    body = {"responses": [{"name": "t", "partition_responses": [
        _appended(0, 5, now_ms), _appended(1, 6, 0), _appended(2, 7, -1), _appended(3, 8, -7),
        {**_appended(4, 9), "log_append_time": None},
        {**_appended(5, 9), "log_append_time": datetime.datetime(
            2026, 11, 26, 17, 0, 0, 456000, tzinfo=datetime.UTC)}]}]}
    _assert_same(version, body)


@pytest.mark.parametrize("version", VERSIONS)
def test_refused_partitions_match_kio(version):
    """What produce.py's refusals and the replica manager's errors look like, record errors
    (KIP-467) included."""
    body = {"responses": [
        {"name": "compacted", "partition_responses": [
            {"index": 0, "base_offset": -1, "log_start_offset": -1,
             "error_code": INVALID_RECORD, "error_message": "keyless records in a compacted topic",
             "record_errors": [{"batch_index": 0, "batch_index_error_message": "no key"},
                               {"batch_index": 10, "batch_index_error_message": None},
                               {"batch_index": 2**31 - 1}]},
            {"index": 1, "base_offset": -1, "log_start_offset": -1,
             "error_code": NOT_LEADER_OR_FOLLOWER, "error_message": ""},
            {"index": 2, "base_offset": -1, "log_start_offset": -1, "error_code": 2,
             "record_errors": []}]},
        {"name": "__consumer_offsets", "partition_responses": [
            {"index": 3, "base_offset": -1, "log_start_offset": -1, "error_code": 17,
             "error_message": "Cannot append to internal topic __consumer_offsets"}]}]}
    _assert_same(version, body)


@pytest.mark.parametrize("version", VERSIONS)
def test_missing_and_null_fields_take_kio_defaults(version):
    body = {"responses": [
        {"name": "t", "partition_responses": [
            {}, {"index": None, "error_code": None, "base_offset": None},
            {"index": 1, "log_start_offset": None, "record_errors": None, "error_message": None},
            {"index": 2, "record_errors": [{}]}]},
        {"name": None, "partition_responses": None}, {}]}
    _assert_same(version, body)
    _assert_same(version, {})
    _assert_same(version, {"responses": None, "throttle_time": None})


@pytest.mark.parametrize("version", VERSIONS)
def test_throttle_time_matches_kio(version):
    body = {"responses": [{"name": "t", "partition_responses": [_appended(0, 1)]}]}
    _assert_same(version, {**body, "throttle_time": 1234})
    _assert_same(version, {**body, "throttle_time": datetime.timedelta(milliseconds=2**31 - 1)})


@pytest.mark.parametrize("version", VERSIONS)
def test_unicode_topic_names_and_messages_match_kio(version):
    body = {"responses": [
        {"name": name, "partition_responses": [
            {**_appended(0, 3), "error_code": 1, "error_message": "défaut ✗ 🚫",
             "record_errors": [{"batch_index": 4, "batch_index_error_message": "ключ 🔑"}]}]}
        for name in ("zamówienia", "注文", "🧾-receipts", "x" * 200)]}
    _assert_same(version, body)


@pytest.mark.parametrize("version", VERSIONS)
def test_many_topics_and_partitions_match_kio(version):
    """Past 63 and 127 entries the compact array lengths take a second varint byte."""
    body = {"responses": [{"name": f"topic-{t}", "partition_responses": [
        _appended(i, 2**40 + i) for i in range(200)]} for t in range(130)]}
    _assert_same(version, body)


@pytest.mark.parametrize("version", VERSIONS)
def test_leader_hints_match_kio(version):
    """KIP-951's current_leader (per partition) and node_endpoints (per response) are tagged
    fields of v10; earlier versions drop them, and a default leader (-1, -1) is left out."""
    body = {"responses": [{"name": "t", "partition_responses": [
        {**_appended(0, -1), "error_code": NOT_LEADER_OR_FOLLOWER,
         "current_leader": {"leader_id": 2, "leader_epoch": 9}},
        {**_appended(1, -1), "current_leader": {"leader_id": -1, "leader_epoch": -1}},
        {**_appended(2, -1), "current_leader": {}},
        {**_appended(3, -1), "current_leader": {"leader_id": 0, "leader_epoch": None}},
        {**_appended(4, -1), "error_message": "moved",
         "current_leader": {"leader_id": 3}},
    ]}], "node_endpoints": [{"node_id": 2, "host": "broker-2.example", "port": 9092},
                            {"node_id": 3, "host": "b3", "port": 19092, "rack": "r1"}]}
    _assert_same(version, body)
    _assert_same(version, {**body, "node_endpoints": []})


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("correlation_id", [0, 1, -1, 2**31 - 1, -(2**31)])
def test_correlation_id_and_header_match_kio(version, correlation_id):
    _assert_same(version, {"responses": []}, correlation_id)


_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
_MESSAGE = st.none() | _TEXT
_RECORD_ERROR = st.fixed_dictionaries(
    {"batch_index": st.integers(0, 2**31 - 1)},
    optional={"batch_index_error_message": _MESSAGE})
_PARTITION = st.fixed_dictionaries(
    {"index": st.integers(0, 2**31 - 1),
     "error_code": st.sampled_from([int(code) for code in ErrorCode]),
     "base_offset": st.integers(-1, 2**63 - 1)},
    optional={
        "log_append_time": st.none() | st.integers(-(2**20), 2**47),
        "log_start_offset": st.none() | st.integers(-1, 2**63 - 1),
        "record_errors": st.lists(_RECORD_ERROR, max_size=3),
        "error_message": _MESSAGE,
        "current_leader": st.fixed_dictionaries(
            {}, optional={"leader_id": st.integers(-1, 5), "leader_epoch": st.integers(-1, 5)}),
    })
_BODY = st.fixed_dictionaries(
    {"responses": st.lists(st.fixed_dictionaries(
        {"name": _TEXT, "partition_responses": st.lists(_PARTITION, max_size=8)}), max_size=4)},
    optional={
        "throttle_time": st.integers(0, 2**31 - 1),
        "node_endpoints": st.lists(st.fixed_dictionaries(
            {"node_id": st.integers(0, 2**31 - 1), "host": _TEXT,
             "port": st.integers(0, 65535)}, optional={"rack": _MESSAGE}), max_size=3),
    })


@settings(deadline=None, max_examples=300)
@given(st.sampled_from(VERSIONS), st.integers(-(2**31), 2**31 - 1), _BODY)
def test_arbitrary_responses_match_kio(version, correlation_id, body):
    _assert_same(version, body, correlation_id)
