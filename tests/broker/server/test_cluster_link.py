"""A broker's ClusterLink against a quorum of controllers: it registers, heartbeats and follows
the metadata log on whichever controller is active, through failovers, and says so in one line
per switch. The controllers are socket servers speaking the RPC frames (fake_quorum.py)."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support.fake_quorum import FakeQuorum

from pylog_nb.broker.controller.controller import BROKER_SESSION_TIMEOUT_MS
from pylog_nb.broker.server.broker import run_broker
from pylog_nb.broker.server.cluster_link import LIFECYCLE_CALL_TIMEOUT_MS
from pylog_nb.broker.server.config import BrokerConfig, parse_controllers
from pylog_nb.broker.server.node import BrokerNode

METADATA_END = 2  # offset 0: the leader's epoch-start control batch, 1: another, never sent
WAIT_S = 10


async def fetch_metadata(params: dict) -> dict:
    if params["from_offset"] >= METADATA_END:  # a long poll with nothing new
        await asyncio.sleep(params.get("max_wait_ms", 0) / 1000)
    return {"records": [], "next_offset": METADATA_END, "end_offset": METADATA_END}


ANSWERS = {
    "register_broker": lambda params: {"metadata_end_offset": METADATA_END},
    "heartbeat": lambda params: {"fenced": False, "metadata_end_offset": METADATA_END},
    "fetch_metadata": fetch_metadata,
}


async def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def test_controller_takes_every_address_in_id_order():
    assert BrokerConfig(1, Path("d")).controllers == ()  # run_broker refuses it
    assert parse_controllers("127.0.0.1:9000") == (("127.0.0.1", 9000),)
    assert parse_controllers("127.0.0.1:9000, localhost:9001,127.0.0.1:9002") == (
        ("127.0.0.1", 9000), ("localhost", 9001), ("127.0.0.1", 9002))
    for bad in ("9000", "127.0.0.1:x", "127.0.0.1:9000,", ":9000"):
        with pytest.raises(ValueError, match="is not host:port"):
            parse_controllers(bad)


def test_lifecycle_calls_time_out_well_inside_the_session():
    assert LIFECYCLE_CALL_TIMEOUT_MS < BROKER_SESSION_TIMEOUT_MS / 2


def test_link_follows_the_active_controller_through_failovers(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="pylog.broker")

    async def scenario() -> list[int]:
        async with FakeQuorum(3) as quorum:
            for controller in quorum.controllers:
                controller.answers = dict(ANSWERS)
            quorum.elect(1)
            config = BrokerConfig(broker_id=1, data_dir=tmp_path,
                                  controllers=tuple(quorum.addresses))
            node = BrokerNode.open(config)
            link = node.link
            await link.start()
            try:
                await wait_until(lambda: link.lifecycle.serving(node.now_ms()), "serving")
                assert link.applied_offset == METADATA_END
                await quorum[1].stop()  # the active controller is killed; 2 takes over
                quorum.elect(2)
                await following(quorum, 2)
                quorum.elect(3)  # 2 hands over to 3 and answers NOT_CONTROLLER naming it
                await following(quorum, 3)
                assert link.lifecycle.serving(node.now_ms()) and not link.lifecycle.fenced
            finally:
                await link.stop()
            return [c.port for c in quorum.controllers]

    async def following(quorum: FakeQuorum, node_id: int) -> None:
        quorum[node_id].calls.clear()  # calls it refused before its election do not count

        def heard() -> bool:
            calls = quorum[node_id].calls
            # a call is recorded when received: the answer, which the link logs, comes after
            answered = any(r.getMessage().startswith(f"following controller {node_id} ")
                           for r in caplog.records)
            return answered and "heartbeat" in calls and "fetch_metadata" in calls

        await wait_until(heard, f"heartbeats and metadata polls at controller {node_id}")

    ports = asyncio.run(scenario())
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("following")]
    assert lines == [f"following controller {n} at 127.0.0.1:{port}"
                     for n, port in zip((1, 2, 3), ports, strict=True)]
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [r.getMessage() for r in caplog.records
                if r.name == "pylog.broker" and "failed" in r.getMessage()]


def test_a_paused_active_controller_is_left_within_the_session_timeout(tmp_path):
    async def scenario() -> float:
        async with FakeQuorum(3) as quorum:
            for controller in quorum.controllers:
                controller.answers = dict(ANSWERS)
            quorum.elect(1)
            node = BrokerNode.open(BrokerConfig(broker_id=1, data_dir=tmp_path),
                                  quorum.addresses)
            link = node.link
            await link.start()
            try:
                await wait_until(lambda: link.lifecycle.serving(node.now_ms()), "serving")
                quorum[1].silent = True  # SIGSTOP: connections open, nothing answered
                quorum.elect(2)
                paused = time.monotonic()
                await wait_until(lambda: "heartbeat" in quorum[2].calls, "a heartbeat at 2")
                heartbeat_s = time.monotonic() - paused
                await wait_until(lambda: "fetch_metadata" in quorum[2].calls, "a poll at 2")
                assert link.lifecycle.serving(node.now_ms())
            finally:
                await link.stop()
            return heartbeat_s

    # at most a heartbeat interval plus a call timeout
    assert asyncio.run(scenario()) < BROKER_SESSION_TIMEOUT_MS / 1000


def test_a_broker_refuses_to_run_without_controllers(tmp_path):
    with pytest.raises(ValueError, match=r"^a broker needs its controllers: --controller "):
        asyncio.run(run_broker(BrokerConfig(1, tmp_path), None, None))
    done = subprocess.run([sys.executable, "-m", "pylog_nb.broker", "--broker-id", "1",
                           "--data-dir", str(tmp_path)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 2
    assert "the following arguments are required: --controller" in done.stderr
    assert not list(tmp_path.iterdir())  # nothing written
