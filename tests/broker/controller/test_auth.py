"""The first frame of a connection to a controller's listener (``controller/auth.py``)."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from pylog_nb.broker.controller import auth
from pylog_nb.broker.rpc_framing import encode_frame

TOKEN = "f" * 64


class _Writer:
    def __init__(self) -> None:
        self.written = b""

    def get_extra_info(self, name: str):
        return ("127.0.0.1", 40000) if name == "peername" else None

    def write(self, data: bytes) -> None:
        self.written += data

    async def drain(self) -> None:
        pass


def accept(data: bytes, token: str | None = TOKEN, answer: bool = True) -> tuple[bool, list]:
    async def scenario():
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        writer = _Writer()
        ok = await auth.accept_connection(reader, writer, token, logging.getLogger("t"), "test",
                                          answer=answer)
        answers = []
        rest = writer.written
        while rest:
            size = int.from_bytes(rest[:4], "big")
            answers.append(json.loads(rest[4:4 + size]))
            rest = rest[4 + size:]
        return ok, answers

    return asyncio.run(scenario())


def test_the_right_token_is_acknowledged_unless_the_listener_never_answers() -> None:
    assert accept(auth.authenticate_request(TOKEN, 5)) == (True, [
        {"id": 5, "error_code": 0, "message": "", "result": {}}])
    assert accept(auth.authenticate_request(TOKEN), answer=False) == (True, [])


def test_a_wrong_token_is_answered_58_and_refused(caplog) -> None:
    ok, answers = accept(auth.authenticate_request("g" * 64, 3))
    assert not ok and answers == [{"id": 3, "error_code": 58,
                                   "message": "authentication failed", "result": None}]
    assert "authentication failed" in caplog.text and "127.0.0.1" in caplog.text


@pytest.mark.parametrize("data", [
    encode_frame({"id": 1, "method": "describe", "params": {}}),
    encode_frame({"id": 1, "method": "authenticate", "params": "x"}),
    encode_frame({"id": 0, "from": 2, "type": "VoteRequest"}),
    b"\x00\x00\x00\x03{}]",
    (10**6).to_bytes(4, "big") + b"{}",
])
def test_any_other_first_frame_is_refused_with_one_warning(caplog, data) -> None:
    with caplog.at_level(logging.WARNING):
        assert accept(data) == (False, [])
    assert len(caplog.records) == 1 and "127.0.0.1" in caplog.text


def test_a_silent_probe_is_closed_quietly_and_no_token_means_no_check(caplog) -> None:
    assert accept(b"") == (False, [])
    assert caplog.records == []
    assert accept(b"", token=None) == (True, [])
