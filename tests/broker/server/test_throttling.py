"""The throttle time written into encoded Fetch responses, and a connection's muting."""

from __future__ import annotations

import pytest

from pylog_nb.broker.protocol import codec
from pylog_nb.broker.protocol.fetch_response import encode_fetch_response
from pylog_nb.broker.server.throttling import Mute, response_size, with_fetch_throttle


@pytest.mark.parametrize("version", [4, 11, 12, 16])
def test_fetch_throttle_is_written_where_clients_read_it(version):
    pieces = encode_fetch_response(42, version, {"responses": []})
    patched = with_fetch_throttle(pieces, version, 1234)
    frame = b"".join(patched)
    assert response_size(patched) == len(frame)
    correlation_id, body = codec.decode_response(1, version, frame[4:])
    assert correlation_id == 42 and body.throttle_time.total_seconds() * 1000 == 1234


def test_mute_only_grows():
    mute = Mute()
    mute.extend(1_000, 0)
    assert mute.until_ms == 0
    mute.extend(1_000, 500)
    mute.extend(1_100, 100)
    assert mute.until_ms == 1_500
