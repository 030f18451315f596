"""The hand-written zero-copy FetchResponse encoder matches kio's bytes for every version."""

from __future__ import annotations

import os
import uuid

import pytest

from pylog_nb.broker.protocol.codec import RequestHeader, encode_response
from pylog_nb.broker.protocol.fetch_response import FileRange, encode_fetch_response

TOPIC_ID = uuid.UUID("12345678-1234-5678-1234-567812345678")


def _body(records_a, records_b, extra_tags: bool) -> dict:
    first = {"partition_index": 0, "error_code": 0, "high_watermark": 42,
             "last_stable_offset": 42, "log_start_offset": 3, "records": records_a}
    second = {"partition_index": 7, "error_code": 1, "high_watermark": -1,
              "last_stable_offset": -1, "log_start_offset": -1, "records": records_b}
    if extra_tags:
        first["diverging_epoch"] = {"epoch": 4, "end_offset": 17}
        second["current_leader"] = {"leader_id": 2, "leader_epoch": 9}
    return {"error_code": 0, "session_id": 0, "responses": [
        {"topic": "orders", "topic_id": TOPIC_ID, "partitions": [first, second]}]}


def _joined(pieces, files: dict[int, bytes]) -> bytes:
    out = b""
    for piece in pieces:
        if isinstance(piece, FileRange):
            out += files[piece.fd][piece.position : piece.position + piece.size_bytes]
        else:
            out += piece
    return out


CASES = [(v, False) for v in range(4, 17)] + [(v, True) for v in range(12, 17)]  # tags from v12


@pytest.mark.parametrize(("version", "extra_tags"), CASES)
def test_matches_kio_bytes(version, extra_tags):
    records = os.urandom(300)
    expected = bytes(encode_response(RequestHeader(1, version, 99, None),
                                     _body(records, b"", extra_tags)))
    pieces = encode_fetch_response(99, version, _body(records, None, extra_tags))
    assert b"".join(pieces) == expected


@pytest.mark.parametrize("version", [4, 11, 12, 16])
def test_file_ranges_stand_in_for_records(version):
    data = os.urandom(1000)
    pieces = encode_fetch_response(5, version, _body(FileRange(3, 100, 250), b"", False))
    assert any(isinstance(p, FileRange) for p in pieces)
    expected = bytes(encode_response(RequestHeader(1, version, 5, None),
                                     _body(data[100:350], b"", False)))
    assert _joined(pieces, {3: data}) == expected


def test_missing_records_are_sent_empty_not_null():
    pieces = encode_fetch_response(1, 11, _body(None, None, False))
    expected = bytes(encode_response(RequestHeader(1, 11, 1, None), _body(b"", b"", False)))
    assert b"".join(pieces) == expected


@pytest.mark.parametrize("version", range(4, 17))
def test_aborted_transactions_match_kio_bytes(version):
    """read_committed answers list the aborted transactions (an empty list is not null)."""
    records = os.urandom(100)

    def body(data) -> dict:
        full = _body(data, b"" if data is not None else None, False)
        first, second = full["responses"][0]["partitions"]
        first["aborted_transactions"] = [{"producer_id": 7, "first_offset": 3},
                                         {"producer_id": 2**40, "first_offset": 41}]
        second["aborted_transactions"] = []
        return full

    expected = bytes(encode_response(RequestHeader(1, version, 8, None), body(records)))
    assert b"".join(encode_fetch_response(8, version, body(records))) == expected
