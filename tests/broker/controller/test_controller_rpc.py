"""The controller RPC client against a quorum: following the active controller.

The controllers are small socket servers speaking the frame format (fake_quorum.py), so each test
can say which one is active, which one is gone, paused, or lost a write's outcome.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from support.fake_quorum import FakeQuorum

from pylog_nb.broker.controller import rpc
from pylog_nb.broker.controller.controller import BROKER_SESSION_TIMEOUT_MS
from pylog_nb.broker.controller.rpc import (
    IDEMPOTENT_METHODS,
    NOT_CONTROLLER,
    ControllerClient,
    ControllerRpcError,
    call_active,
    call_once,
)
from pylog_nb.broker.errors import Errors


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 30))


@pytest.fixture
def pauses(monkeypatch) -> list[float]:
    """The backoff pauses the client takes, in seconds."""
    taken: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:
        taken.append(seconds)
        await real_sleep(seconds)

    monkeypatch.setattr(rpc.asyncio, "sleep", sleep)
    return taken


def following_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("following")]


def test_not_controller_is_error_41_with_the_leader_from_its_result():
    assert NOT_CONTROLLER == Errors.NOT_CONTROLLER == 41
    assert not {"create_topic", "delete_topic", "alter_partition"} & IDEMPOTENT_METHODS

    async def scenario():
        async with FakeQuorum(2) as quorum:
            quorum.elect(2)
            quorum[1].outcome_unknown = True
            with pytest.raises(ControllerRpcError) as caught:
                await asyncio.to_thread(call_once, *quorum[1].address, "create_topic", name="t")
            assert caught.value.error_code == NOT_CONTROLLER
            assert caught.value.leader_id == 2 and caught.value.outcome_unknown
            assert "not active (the active one is 2)" in caught.value.message

    run(scenario())
    other = ControllerRpcError(Errors.TOPIC_ALREADY_EXISTS, "taken")
    assert other.leader_id is None and not other.outcome_unknown


def test_not_controller_redirects_to_the_named_leader_and_logs_the_switch_once(caplog):
    caplog.set_level(logging.INFO, logger="pylog.broker")

    async def scenario():
        async with FakeQuorum(3) as quorum, ControllerClient(quorum.addresses) as client:
            quorum.elect(2)
            assert (await client.call("create_topic", name="t"))["node_id"] == 2
            assert quorum.calls() == {1: ["create_topic"], 2: ["create_topic"], 3: []}
            for _ in range(3):  # straight to the active controller from now on
                assert (await client.call("heartbeat", broker_id=1))["node_id"] == 2
            assert quorum.calls()[1] == ["create_topic"]
            assert (client.host, client.port) == quorum[2].address
            return quorum[2].port

    port = run(scenario())
    assert following_lines(caplog) == [f"following controller 2 at 127.0.0.1:{port}"]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_leader_outside_the_list_or_none_named_moves_to_the_next_address():
    async def scenario():
        async with FakeQuorum(3) as quorum, ControllerClient(quorum.addresses) as client:
            quorum[1].not_controller(7)  # an id this client has no address for
            quorum[2].not_controller(None)  # an election in progress, as it sees it
            quorum[3].active = True
            assert (await client.call("heartbeat", broker_id=1))["node_id"] == 3
            assert quorum.calls() == {1: ["heartbeat"], 2: ["heartbeat"], 3: ["heartbeat"]}

    run(scenario())


def test_a_refused_or_reset_connection_moves_to_the_next_controller(caplog):
    caplog.set_level(logging.INFO, logger="pylog.broker")

    async def scenario():
        async with FakeQuorum(3) as quorum, ControllerClient(quorum.addresses) as client:
            quorum.elect(1)
            assert (await client.call("heartbeat", broker_id=1))["node_id"] == 1
            await quorum[1].stop()  # the active controller is killed; 2 takes over
            quorum.elect(2)
            assert (await client.call("heartbeat", broker_id=1))["node_id"] == 2
            await quorum[2].stop()  # with a pooled connection open: reset, then refused
            quorum.elect(3)
            assert (await client.call("fetch_metadata", from_offset=0))["node_id"] == 3
            assert quorum.calls()[3] == ["fetch_metadata"]  # 1 was refused, not asked
            return [c.port for c in quorum.controllers]

    ports = run(scenario())
    assert following_lines(caplog) == [
        f"following controller {n} at 127.0.0.1:{port}"
        for n, port in zip((1, 2, 3), ports, strict=True)]


def test_outcome_unknown_raises_for_a_write_and_retries_an_idempotent_call():
    async def scenario():
        async with FakeQuorum(2) as quorum, ControllerClient(quorum.addresses) as client:
            quorum.elect(2)
            quorum[1].outcome_unknown = True  # lost leadership with the write in flight
            with pytest.raises(ConnectionError, match="create_topic; outcome unknown"):
                await client.call("create_topic", name="t")
            assert quorum.calls() == {1: ["create_topic"], 2: []}  # never sent twice
            # The client moved to the leader 1 named, so a retry by the caller goes there.
            assert (await client.call("create_topic", name="t"))["node_id"] == 2

        async with FakeQuorum(2) as quorum, ControllerClient(quorum.addresses) as client:
            quorum.elect(2)
            quorum[1].outcome_unknown = True
            assert (await client.call("heartbeat", broker_id=1))["node_id"] == 2
            assert quorum.calls() == {1: ["heartbeat"], 2: ["heartbeat"]}

    run(scenario())


def test_a_lost_connection_after_sending_a_write_is_outcome_unknown():
    async def scenario():
        async with FakeQuorum(2) as quorum, ControllerClient(quorum.addresses) as client:
            quorum.elect(1)

            def crash(method, params):
                raise ConnectionError("killed with the request read")

            quorum[1].respond = crash
            with pytest.raises(ConnectionError, match="lost during create_topic; outcome unknown"):
                await client.call("create_topic", name="t")
            assert quorum.calls()[2] == []

    run(scenario())


def test_rounds_without_an_active_controller_back_off_bounded_then_give_up(monkeypatch, pauses):
    monkeypatch.setattr(rpc, "RECONNECT_ATTEMPTS_MAX", 6)
    monkeypatch.setattr(rpc, "RECONNECT_BACKOFF_MS_INITIAL", 10)
    monkeypatch.setattr(rpc, "RECONNECT_BACKOFF_MS_MAX", 40)

    async def scenario():
        async with FakeQuorum(3) as quorum, ControllerClient(quorum.addresses) as client:
            quorum.elect(None)
            with pytest.raises(ConnectionError, match="no active controller among .* after 7 "
                                                      "rounds: controller 3 is not active"):
                await client.call("heartbeat", broker_id=1)
            assert quorum.calls() == {n: ["heartbeat"] * 7 for n in (1, 2, 3)}

    run(scenario())
    assert pauses == [0.01, 0.02, 0.04, 0.04, 0.04, 0.04]  # one per round, doubling, bounded


def test_the_default_backoff_stays_below_the_broker_session_timeout():
    pauses_ms = [rpc._backoff_ms(n) for n in range(rpc.RECONNECT_ATTEMPTS_MAX)]
    assert max(pauses_ms) == rpc.RECONNECT_BACKOFF_MS_MAX < BROKER_SESSION_TIMEOUT_MS
    assert 5_000 <= sum(pauses_ms) <= 8_000  # rides out a restart or an election
    assert rpc._backoff_ms(10_000) == rpc.RECONNECT_BACKOFF_MS_MAX


def test_an_election_in_progress_is_ridden_out_for_any_method(pauses):
    async def scenario():
        async with FakeQuorum(3) as quorum, ControllerClient(quorum.addresses) as client:
            quorum.elect(None)
            asyncio.get_running_loop().call_later(0.05, quorum.elect, 3)
            # Not active and no outcome_unknown: nothing was done, so a write is safe to resend.
            assert (await client.call("create_topic", name="t"))["node_id"] == 3

    run(scenario())
    assert pauses and max(pauses) <= rpc.RECONNECT_BACKOFF_MS_MAX / 1000


def test_a_single_address_is_a_quorum_of_one(caplog, monkeypatch, pauses):
    caplog.set_level(logging.INFO, logger="pylog.broker")
    monkeypatch.setattr(rpc, "RECONNECT_ATTEMPTS_MAX", 2)

    async def scenario():
        async with FakeQuorum(1) as quorum:
            async with ControllerClient(*quorum[1].address) as client:
                assert client.addresses == (quorum[1].address,)
                quorum[1].not_controller(1)  # elected, its epoch not committed yet
                asyncio.get_running_loop().call_later(0.05, quorum.elect, 1)
                assert (await client.call("register_broker", broker_id=1))["node_id"] == 1
                assert len(quorum.calls()[1]) > 1
            await quorum[1].stop()
            async with ControllerClient(*quorum[1].address) as client:
                with pytest.raises(ConnectionError,
                                   match="unreachable after 3 attempts: connect failed"):
                    await client.call("describe")

    run(scenario())
    assert len(following_lines(caplog)) == 1


def test_a_timeout_is_raised_and_the_next_call_goes_to_the_next_controller():
    async def scenario():
        async with FakeQuorum(3) as quorum:
            async with ControllerClient(quorum.addresses, call_timeout_ms=200) as client:
                quorum.elect(1)
                quorum[1].silent = True  # paused: connects, never answers
                with pytest.raises(TimeoutError):
                    await client.call("heartbeat", broker_id=1)
                quorum.elect(2)
                assert (await client.call("heartbeat", broker_id=1))["node_id"] == 2
                assert quorum.calls() == {1: ["heartbeat"], 2: ["heartbeat"], 3: []}

    run(scenario())


def test_a_twin_has_its_own_connections_and_follows_the_same_controller(caplog):
    caplog.set_level(logging.INFO, logger="pylog.broker")

    async def scenario():
        async with FakeQuorum(3) as quorum, ControllerClient(quorum.addresses) as client:
            twin = client.twin(call_timeout_ms=500)
            assert twin.call_timeout_ms == 500 and client.call_timeout_ms == rpc.CALL_TIMEOUT_MS
            quorum.elect(3)
            await client.call("heartbeat", broker_id=1)
            await twin.call("fetch_metadata", from_offset=0)
            assert quorum.calls() == {1: ["heartbeat"], 2: [], 3: ["heartbeat", "fetch_metadata"]}
            await twin.close()

    run(scenario())
    assert len(following_lines(caplog)) == 1


def test_call_active_finds_the_active_controller_blocking():
    async def scenario():
        async with FakeQuorum(3) as quorum:
            quorum.elect(2)
            answer = await asyncio.to_thread(call_active, quorum.addresses, "create_topic")
            assert answer["node_id"] == 2
            assert quorum.calls() == {1: ["create_topic"], 2: ["create_topic"], 3: []}
            await quorum[2].stop()
            quorum.elect(3)
            answer = await asyncio.to_thread(
                call_active, quorum.addresses, "elect_preferred_leaders")
            assert answer["node_id"] == 3  # it remembered 2, found it gone, moved on
            assert quorum.calls()[1] == ["create_topic"]
            quorum[3].respond = lambda method, params: (
                NOT_CONTROLLER, "lost it", {"leader_id": 1, "outcome_unknown": True})
            with pytest.raises(ConnectionError, match="outcome unknown"):
                await asyncio.to_thread(call_active, quorum.addresses, "delete_topic", name="t")

    run(scenario())


def test_call_active_describe_goes_on_to_the_leader_a_follower_names():
    async def scenario():
        async with FakeQuorum(3) as quorum:
            quorum.elect(3)
            described = await asyncio.to_thread(call_active, quorum.addresses, "describe")
            assert described["quorum"] == {"node_id": 3, "role": "leader", "leader_id": 3}
            assert quorum.calls() == {1: ["describe"], 2: [], 3: ["describe"]}
            quorum.elect(None)  # no leader: any controller's view is the answer
            described = await asyncio.to_thread(call_active, quorum.addresses, "describe")
            assert described["quorum"]["leader_id"] is None

    run(scenario())


def test_call_active_gives_up_after_bounded_rounds(monkeypatch):
    monkeypatch.setattr(rpc, "RECONNECT_ATTEMPTS_MAX", 2)
    monkeypatch.setattr(rpc.time, "sleep", lambda seconds: None)

    async def scenario():
        async with FakeQuorum(2) as quorum:
            quorum.elect(None)
            with pytest.raises(ConnectionError, match="after 3 rounds"):
                await asyncio.to_thread(call_active, quorum.addresses, "heartbeat")
            assert quorum.calls() == {1: ["heartbeat"] * 3, 2: ["heartbeat"] * 3}

    run(scenario())
