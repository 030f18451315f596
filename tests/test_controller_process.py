"""The controller process and its RPC end to end: a real ``python -m pylog_nb.broker.controller``
started like LocalCluster starts brokers (ready pipe, parent pipe), driven through ControllerClient
and call_once over loopback."""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from pylog_nb.broker.controller import CreateTopic, FenceBroker, PartitionChange, rpc
from pylog_nb.broker.controller.rpc import (
    REQUEST_BYTES_MAX,
    ControllerClient,
    ControllerRpcError,
    call_once,
    decode_records,
)

SESSION_TIMEOUT_MS = 1500  # shorter than the default so fencing tests stay quick
HEARTBEAT_INTERVAL_S = 0.2
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
SCENARIO_TIMEOUT_S = 30.0
BROKERS = (1, 2, 3)


class ControllerProcess:
    """One controller process on loopback, with the supervisor's two pipes (cluster/local.py)."""

    def __init__(self, data_dir: Path, extra_args: tuple[str, ...] = (),
                 token: str | None = None) -> None:
        self.data_dir = data_dir
        self.extra_args = extra_args  # e.g. --secrets, --node-id and --voters
        self.token = token  # what this test's own calls present
        self.log_path = data_dir / "controller.log"
        self.port = 0
        self.process: subprocess.Popen | None = None
        self.parent_r, self.parent_w = os.pipe()

    def start(self) -> ControllerProcess:
        ready_r, ready_w = os.pipe()
        command = [
            sys.executable,
            "-m",
            "pylog_nb.broker.controller",
            "--data-dir",
            str(self.data_dir / "metadata"),
            "--port",
            str(self.port),
            "--ready-fd",
            str(ready_w),
            "--parent-fd",
            str(self.parent_r),
            "--session-timeout-ms",
            str(SESSION_TIMEOUT_MS),
            *self.extra_args,
        ]
        with open(self.log_path, "ab") as log_file:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                pass_fds=(ready_w, self.parent_r),
                start_new_session=True,
            )
        os.close(ready_w)
        try:
            self.port = int(self._await_ready(ready_r))
        finally:
            os.close(ready_r)
        if "--voters" not in self.extra_args:
            self._await_active()
        return self

    def _await_active(self) -> None:
        """A quorum of one elects itself at once, but only after it listens."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not call_once("127.0.0.1", self.port, "describe",
                            token=self.token)["quorum"]["active"]:
            assert time.monotonic() < deadline, f"never active; log:\n{self.log_text()}"
            time.sleep(0.02)

    def _await_ready(self, ready_r: int) -> bytes:
        received, deadline = b"", time.monotonic() + READY_TIMEOUT_S
        while not received.endswith(b"\n"):
            readable, _, _ = select.select([ready_r], [], [], deadline - time.monotonic())
            chunk = os.read(ready_r, 64) if readable else b""
            if not chunk:
                self.process.kill()
                pytest.fail(f"controller did not start; log:\n{self.log_text()}")
            received += chunk
        return received

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(STOP_TIMEOUT_S)

    def terminate(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(STOP_TIMEOUT_S)

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.kill()
        for fd in (self.parent_r, self.parent_w):
            if fd >= 0:
                os.close(fd)
        self.parent_r = self.parent_w = -1

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@pytest.fixture
def controller(tmp_path):
    process = ControllerProcess(tmp_path).start()
    yield process
    process.close()


def run(coroutine) -> None:
    async def bounded():
        async with asyncio.timeout(SCENARIO_TIMEOUT_S):
            await coroutine

    asyncio.run(bounded())


async def eventually(check, timeout_s: float = 5.0, interval_s: float = 0.05):
    """Await ``check()`` until it returns something truthy; return that."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await check()
        if value or time.monotonic() > deadline:
            assert value, "condition not reached in time"
            return value
        await asyncio.sleep(interval_s)


async def register(client: ControllerClient, brokers=BROKERS) -> dict[int, str]:
    """Register brokers and heartbeat each once; return their incarnation ids."""
    incarnations = {}
    for broker_id in brokers:
        incarnations[broker_id] = uuid.uuid4().hex
        result = await client.call(
            "register_broker",
            broker_id=broker_id,
            host="127.0.0.1",
            port=9090 + broker_id,
            incarnation_id=incarnations[broker_id],
        )
        assert result["fenced"] is True
        beat = await client.call(
            "heartbeat", broker_id=broker_id, incarnation_id=incarnations[broker_id]
        )
        assert beat["fenced"] is False
    return incarnations


async def heartbeat_forever(client, incarnations: dict[int, str], failures: list) -> None:
    """Heartbeat like live brokers, each on connections of its own (so a controller resuming
    from a stall finds every broker's heartbeat waiting in its sockets, as with real brokers);
    a broker taken out of ``incarnations`` falls silent."""

    async def beat(broker_id: int, own) -> None:
        while broker_id in incarnations:
            try:
                await own.call("heartbeat", broker_id=broker_id,
                               incarnation_id=incarnations[broker_id])
            except (ConnectionError, ControllerRpcError, TimeoutError) as error:
                failures.append(error)
            await asyncio.sleep(HEARTBEAT_INTERVAL_S)

    twins = {broker_id: client.twin() for broker_id in incarnations}
    try:
        await asyncio.gather(*(beat(b, twin) for b, twin in twins.items()))
    finally:
        for twin in twins.values():
            await twin.close()


async def fetch_all(client, from_offset: int = 0) -> tuple[list, int]:
    records, offset = [], from_offset
    while True:
        result = await client.call("fetch_metadata", from_offset=offset, max_records=4)
        records += decode_records(result)
        offset = result["next_offset"]
        if offset == result["end_offset"]:
            return records, offset


def partitions_of(described: dict, topic: str) -> list[dict]:
    return next(t for t in described["topics"] if t["name"] == topic)["partitions"]


def raw_exchange(port: int, data: bytes) -> bytes:
    """Send raw bytes on a fresh connection and return everything read until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


# -- tests -----------------------------------------------------------------------------------------


def test_registered_brokers_start_fenced_and_heartbeats_unfence_them(controller):
    async def scenario():
        async with ControllerClient("127.0.0.1", controller.port) as client:
            await register(client)
            described = await client.call("describe")
            assert [(b["broker_id"], b["fenced"]) for b in described["brokers"]] == [
                (1, False),
                (2, False),
                (3, False),
            ]
            assert all(
                0 < b["lease_expires_in_ms"] <= SESSION_TIMEOUT_MS for b in described["brokers"]
            )
            kinds = Counter(e["kind"] for e in described["events"])
            assert kinds == {"broker_registered": 3, "broker_unfenced": 3}

    run(scenario())


def test_create_topic_spreads_leaders_and_fetch_metadata_returns_its_records(controller):
    async def scenario():
        async with ControllerClient("127.0.0.1", controller.port) as client:
            await register(client)
            topic = await client.call(
                "create_topic", name="orders", num_partitions=6, replication_factor=3
            )
            assert (topic["num_partitions"], topic["replication_factor"]) == (6, 3)
            leaders = Counter(p["leader"] for p in topic["partitions"])
            assert leaders == {1: 2, 2: 2, 3: 2}
            for p in topic["partitions"]:
                assert sorted(p["replicas"]) == [1, 2, 3] and p["isr"] == p["replicas"]
                assert p["leader"] == p["replicas"][0] and p["leader_epoch"] == 0

            records, end = await fetch_all(client)
            kinds = Counter(type(r).__name__ for r in records)
            assert kinds == {
                "RegisterBroker": 3,
                "UnfenceBroker": 3,
                "CreateTopic": 1,
                "CreatePartition": 6,
            }
            # The quorum's epoch-start marker takes an offset but holds no metadata record.
            assert end == len(records) + 1 == 14
            create = next(r for r in records if isinstance(r, CreateTopic))
            assert create.topic_id == topic["topic_id"]

    run(scenario())


def test_long_poll_wakes_on_an_append_from_another_connection_and_times_out_empty_otherwise(
    controller,
):
    async def scenario():
        async with ControllerClient("127.0.0.1", controller.port) as client:
            await register(client)
            end = (await client.call("fetch_metadata", from_offset=0))["end_offset"]

            started = time.monotonic()
            idle = await client.call("fetch_metadata", from_offset=end, max_wait_ms=300)
            assert time.monotonic() - started >= 0.28
            assert idle == {"records": [], "next_offset": end, "end_offset": end}

            poll = asyncio.create_task(
                client.call("fetch_metadata", from_offset=end, max_wait_ms=10_000)
            )
            await asyncio.sleep(0.2)
            started = time.monotonic()
            # The poll's connection is held; other calls, on this client and others, are not.
            assert len((await client.call("describe"))["brokers"]) == 3
            await asyncio.to_thread(
                call_once,
                "127.0.0.1",
                controller.port,
                "create_topic",
                name="woken",
                num_partitions=1,
                replication_factor=1,
            )
            woken = await poll
            assert time.monotonic() - started < 2.0
            records = decode_records(woken)
            assert isinstance(records[0], CreateTopic) and records[0].name == "woken"
            assert woken["next_offset"] == woken["end_offset"] == end + 2

    run(scenario())


def test_errors_come_back_with_kafka_codes_and_one_line_messages(controller):
    async def scenario():
        async with ControllerClient("127.0.0.1", controller.port) as client:
            await register(client)
            await client.call("create_topic", name="taken", num_partitions=1, replication_factor=1)
            end = (await client.call("fetch_metadata", from_offset=0))["end_offset"]
            cases = [
                (38, "create_topic", {"name": "t", "num_partitions": 1, "replication_factor": 4}),
                (40, "create_topic", {"name": "t", "configs": {"cleanup.policy": "bogus"}}),
                (40, "alter_configs", {"name": "taken", "configs": {"no.such.config": "1"}}),
                (36, "create_topic", {"name": "taken"}),
                (17, "create_topic", {"name": "bad name!"}),
                (3, "delete_topic", {"name": "missing"}),
                (37, "create_partitions", {"name": "taken", "count": 1}),
                (102, "heartbeat", {"broker_id": 9}),
                (77, "heartbeat", {"broker_id": 1, "incarnation_id": "stale"}),
                (1, "fetch_metadata", {"from_offset": end + 1}),
                (35, "no_such_method", {}),
                (42, "create_topic", {}),
                (42, "create_topic", {"name": "t", "num_partitions": "6"}),
                (42, "heartbeat", {"broker_id": 1, "surprise": True}),
            ]
            for code, method, params in cases:
                with pytest.raises(ControllerRpcError) as caught:
                    await client.call(method, **params)
                error = caught.value
                assert error.error_code == code, (method, params, error)
                assert error.message and "\n" not in error.message, error.message
            # Nothing refused was written.
            assert (await client.call("fetch_metadata", from_offset=0))["end_offset"] == end
        with pytest.raises(ControllerRpcError) as caught:
            call_once(
                "127.0.0.1",
                controller.port,
                "create_topic",
                name="t",
                num_partitions=1,
                replication_factor=4,
            )
        assert caught.value.error_code == 38

    run(scenario())


def test_malformed_frames_close_only_their_own_connection(controller):
    async def scenario():
        async with ControllerClient("127.0.0.1", controller.port) as client:
            incarnations = await register(client)
            failures: list = []
            beating = asyncio.create_task(heartbeat_forever(client, incarnations, failures))
            end = (await client.call("describe"))["end_offset"]
            poll = asyncio.create_task(
                client.call("fetch_metadata", from_offset=end, max_wait_ms=1500)
            )
            await asyncio.sleep(0.1)
            bad_frames = [
                frame(b"{not json"),
                frame(b"[1, 2, 3]"),
                frame(b'{"id": "one", "method": "describe", "params": {}}'),
                frame(b'{"id": 1, "method": 7, "params": {}}'),
                frame(b"\xff\xfe"),
                struct.pack(">i", REQUEST_BYTES_MAX + 1) + b"{}",
                struct.pack(">i", -5),
            ]
            for data in bad_frames:
                assert await asyncio.to_thread(raw_exchange, controller.port, data) == b""
            # A valid frame after them on a fresh connection, and the long poll, are unaffected.
            assert (await client.call("describe"))["end_offset"] == end
            assert (await poll)["records"] == []
            described = await asyncio.to_thread(call_once, "127.0.0.1", controller.port, "describe")
            assert [b["fenced"] for b in described["brokers"]] == [False, False, False]
            assert failures == []
            beating.cancel()

    run(scenario())
    closing = [line for line in controller.log_text().splitlines() if "closing connection" in line]
    assert len(closing) == 7, closing


def test_silent_broker_is_fenced_and_its_partitions_get_new_leaders_with_bumped_epochs(
    controller,
):
    async def scenario():
        async with ControllerClient("127.0.0.1", controller.port) as client:
            incarnations = await register(client)
            failures: list = []
            beating = asyncio.create_task(heartbeat_forever(client, incarnations, failures))
            await client.call("create_topic", name="orders", num_partitions=6, replication_factor=3)
            before = await client.call("describe")
            offset_before = before["end_offset"]

            del incarnations[3]  # broker 3 goes silent

            async def three_fenced():
                described = await client.call("describe")
                return described if described["brokers"][2]["fenced"] else None

            started = time.monotonic()
            after = await eventually(three_fenced, timeout_s=SESSION_TIMEOUT_MS / 1000 + 3)
            assert time.monotonic() - started >= SESSION_TIMEOUT_MS / 1000 / 2  # not at once
            assert [b["fenced"] for b in after["brokers"]] == [False, False, True]
            moved = 0
            for old, new in zip(
                partitions_of(before, "orders"), partitions_of(after, "orders"), strict=True
            ):
                assert 3 not in new["isr"] and new["leader"] in (1, 2)
                assert new["partition_epoch"] == old["partition_epoch"] + 1
                if old["leader"] == 3:
                    moved += 1
                    assert new["leader_epoch"] == old["leader_epoch"] + 1
                else:
                    assert (new["leader"], new["leader_epoch"]) == (
                        old["leader"],
                        old["leader_epoch"],
                    )
            assert moved == 2

            records, _ = await fetch_all(client, offset_before)
            assert sum(isinstance(r, PartitionChange) for r in records) == 6
            assert isinstance(records[-1], FenceBroker) and records[-1].broker_id == 3
            kinds = Counter(e["kind"] for e in after["events"] if e["offset"] >= offset_before)
            assert kinds["broker_fenced"] == 1 and kinds["leader_elected"] == 2
            assert failures == []
            beating.cancel()

    run(scenario())


def test_sigkill_and_restart_keep_state_and_elect_no_one_while_brokers_keep_heartbeating(
    controller,
):
    async def scenario():
        async with ControllerClient("127.0.0.1", controller.port) as client:
            incarnations = await register(client)
            failures: list = []
            beating = asyncio.create_task(heartbeat_forever(client, incarnations, failures))
            await client.call(
                "create_topic",
                name="orders",
                num_partitions=6,
                replication_factor=3,
                configs={"retention.ms": "60000"},
            )
            ids = await client.call("allocate_producer_ids", broker_id=1)
            before = await client.call("describe")

            controller.kill()
            await asyncio.sleep(0.3)  # heartbeats now fail and retry behind the client's back
            await asyncio.to_thread(controller.start)
            await asyncio.sleep(SESSION_TIMEOUT_MS / 1000 + 0.5)  # past the restart grace period

            after = await client.call("describe")
            assert after["topics"] == before["topics"]
            assert after["brokers"][0].keys() == before["brokers"][0].keys()
            assert [b["fenced"] for b in after["brokers"]] == [False, False, False]
            # No fencing, no election: only the restarted voter's epoch-start marker was added.
            assert after["end_offset"] == before["end_offset"] + 1
            assert after["quorum"]["epoch"] == before["quorum"]["epoch"] + 1
            assert (await fetch_all(client, before["end_offset"]))[0] == []
            # Events are rebuilt from the log with the times the decisions were made.
            assert after["events"] == before["events"]
            again = await client.call("allocate_producer_ids", broker_id=1)
            assert again["first_id"] == ids["first_id"] + ids["size"]
            assert failures == []  # the client reconnected transparently
            beating.cancel()

    run(scenario())


def test_a_controller_paused_past_the_session_fences_no_broker_that_kept_heartbeating(
    controller,
):
    async def scenario():
        async with ControllerClient("127.0.0.1", controller.port) as client:
            incarnations = await register(client)
            failures: list = []
            beating = asyncio.create_task(heartbeat_forever(client, incarnations, failures))
            before = await client.call("describe")
            assert controller.process is not None
            os.kill(controller.process.pid, signal.SIGSTOP)  # the heartbeats wait in its socket
            await asyncio.sleep(2 * SESSION_TIMEOUT_MS / 1000)
            os.kill(controller.process.pid, signal.SIGCONT)
            await asyncio.sleep(SESSION_TIMEOUT_MS / 1000)
            after = await client.call("describe")
            # Its own stall is not the brokers' silence: every lease was extended by as much.
            assert [b["fenced"] for b in after["brokers"]] == [False, False, False]
            assert after["end_offset"] == before["end_offset"]
            assert (controller.log_path.read_text().count("controller stalled")) >= 1
            beating.cancel()

    run(scenario())


def test_admin_methods_answer_with_the_documented_shapes(controller):
    async def scenario():
        async with ControllerClient("127.0.0.1", controller.port) as client:
            await register(client)
            end = (await client.call("describe"))["end_offset"]
            checked = await client.call(
                "create_topic", name="t", num_partitions=3, replication_factor=2, validate_only=True
            )
            assert checked["num_partitions"] == 3
            assert (await client.call("describe"))["end_offset"] == end

            topic = await client.call(
                "create_topic", name="t", num_partitions=3, replication_factor=2
            )
            grown = await client.call("create_partitions", name="t", count=5)
            assert grown["num_partitions"] == 5 and grown["topic_id"] == topic["topic_id"]
            altered = await client.call("alter_configs", name="t", configs={"retention.ms": "1000"})
            assert altered["configs"] == {"retention.ms": "1000"}

            p = topic["partitions"][0]
            follower = p["replicas"][1]
            shrunk = await client.call(
                "alter_partition",
                broker_id=p["leader"],
                topic_id=topic["topic_id"],
                partition=0,
                leader_epoch=p["leader_epoch"],
                new_isr=[p["leader"]],
                partition_epoch=p["partition_epoch"],
            )
            assert shrunk == {
                "leader": p["leader"],
                "leader_epoch": p["leader_epoch"],
                "partition_epoch": p["partition_epoch"] + 1,
                "isr": [p["leader"]],
            }
            with pytest.raises(ControllerRpcError):  # stale partition epoch
                await client.call(
                    "alter_partition",
                    broker_id=p["leader"],
                    topic_id=topic["topic_id"],
                    partition=0,
                    leader_epoch=p["leader_epoch"],
                    new_isr=[p["leader"], follower],
                    partition_epoch=p["partition_epoch"],
                )

            assert await client.call("elect_preferred_leaders") == {"elected": []}
            assert await client.call("allocate_producer_ids", broker_id=2) == {
                "first_id": 0,
                "size": 1000,
            }
            assert await client.call("delete_topic", name="t") == {"topic_id": topic["topic_id"]}
            assert (await client.call("describe", events_max=2))["events"][-1]["kind"] == (
                "topic_deleted"
            )

    run(scenario())


def test_sigterm_and_a_closed_parent_pipe_each_stop_the_controller_cleanly(controller):
    assert controller.terminate() == 0
    assert "controller stopped cleanly" in controller.log_text()
    controller.start()
    os.close(controller.parent_w)
    controller.parent_w = -1
    assert controller.process.wait(STOP_TIMEOUT_S) == 0
    assert "supervisor is gone" in controller.log_text()


def test_client_gives_up_with_connection_error_after_bounded_retries(monkeypatch):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead_port = probe.getsockname()[1]  # nothing listens here once closed
    monkeypatch.setattr(rpc, "RECONNECT_ATTEMPTS_MAX", 2)

    async def scenario():
        async with ControllerClient("127.0.0.1", dead_port) as client:
            with pytest.raises(ConnectionError, match="unreachable after 3 attempts"):
                await client.call("describe")

    run(scenario())


def test_describe_quorum_is_the_quorum_section_alone(controller):
    described = call_once("127.0.0.1", controller.port, "describe")
    alone = call_once("127.0.0.1", controller.port, "describe_quorum")
    assert alone == {"quorum": described["quorum"]}
    assert alone["quorum"]["active"] and alone["quorum"]["voters"] == [1]


# -- security (issue 23): --secrets ----------------------------------------------------------------

SCRAM_MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]


def write_secrets(directory: Path):
    from pylog_nb.broker.security import secrets

    cluster_secrets = secrets.generate()
    path = directory / secrets.SECRETS_FILE
    secrets.write(path, cluster_secrets)
    return path, cluster_secrets


@pytest.fixture
def secured(tmp_path):
    path, cluster_secrets = write_secrets(tmp_path)
    process = ControllerProcess(tmp_path, ("--secrets", str(path)),
                                token=cluster_secrets.internal_token).start()
    yield process, cluster_secrets.internal_token
    process.close()


def await_bootstrap(call) -> list[dict]:
    """describe_user_scram_credentials once the active controller has written its users."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        results = call("describe_user_scram_credentials")["results"]
        if len(results) == 2 or time.monotonic() > deadline:
            return results
        time.sleep(0.05)


def test_with_secrets_only_the_token_opens_a_connection_and_users_are_bootstrapped(secured):
    controller, token = secured
    port = controller.port
    registration = frame(json.dumps({"id": 1, "method": "register_broker", "params": {
        "broker_id": 1, "host": "127.0.0.1", "port": 9091, "incarnation_id": "x"}}).encode())
    assert raw_exchange(port, registration) == b""  # closed unanswered
    with pytest.raises(ControllerRpcError) as refused:
        call_once("127.0.0.1", port, "describe", token="not-the-token")
    assert refused.value.error_code == 58 and refused.value.message == "authentication failed"
    with pytest.raises(ControllerRpcError):  # a token is no method of its own: still refused
        call_once("127.0.0.1", port, "register_broker", token="", broker_id=1,
                  host="127.0.0.1", port=9091, incarnation_id="x")

    described = call_once("127.0.0.1", port, "describe", token=token)
    assert described["brokers"] == []  # nothing the refused connections sent was acted on
    users = await_bootstrap(lambda method: call_once("127.0.0.1", port, method, token=token))
    assert [(u["user"], [c["mechanism"] for c in u["credential_infos"]]) for u in users] == [
        ("admin", SCRAM_MECHANISMS), ("pylog-broker", SCRAM_MECHANISMS)]
    assert all(c["iterations"] == 4096 for u in users for c in u["credential_infos"])

    async def scenario():
        async with ControllerClient("127.0.0.1", port, token=token) as client:
            await register(client, brokers=(1,))
            acl = {"resource_type": 2, "resource_name": "t", "pattern_type": 3,
                   "principal": "User:alice", "host": "*", "operation": 3,
                   "permission_type": 3}
            created = await client.call("create_acls", creations=[acl, {**acl, "host": ""}])
            assert [r["error_code"] for r in created["results"]] == [0, 42]
            quotas = await client.call("alter_client_quotas", entries=[{
                "entity": [["user", "alice"]],
                "ops": [{"key": "producer_byte_rate", "value": 1024, "remove": False}]}])
            assert quotas["entries"][0]["error_code"] == 0
            records, _ = await fetch_all(client)  # what brokers fold into their image
            kinds = Counter(type(r).__name__ for r in records)
            assert kinds["UserScramCredential"] == 4 and kinds["AccessControlEntry"] == 1
            assert kinds["ClientQuota"] == 1
            with pytest.raises(ControllerRpcError) as bad:
                await client.call("create_acls", creations=[{"resource_type": 2}])
            assert bad.value.error_code == 42
        async with ControllerClient("127.0.0.1", port, token="wrong") as stranger:
            with pytest.raises(ControllerRpcError) as refused:  # at once: never retried
                await stranger.call("heartbeat", broker_id=1)
            assert refused.value.error_code == 58

    run(scenario())
    warnings = [line for line in controller.log_text().splitlines()
                if "WARNING" in line and "closing" in line]
    assert len(warnings) == 4, warnings  # one line per refused connection, naming the peer
    assert all("127.0.0.1" in line for line in warnings)
    assert "not authenticate" in warnings[0] and "authentication failed" in warnings[1]


def test_a_restart_with_secrets_bootstraps_nothing_twice(secured):
    controller, token = secured
    call = lambda method: call_once("127.0.0.1", controller.port, method, token=token)  # noqa: E731
    assert len(await_bootstrap(call)) == 2
    end = call("describe")["end_offset"]
    controller.terminate()
    controller.start()
    assert len(await_bootstrap(call)) == 2
    time.sleep(0.3)
    after = call("describe")
    scram = [e for e in after["events"] if e["kind"] == "scram_credential"]
    assert len(scram) == 4 and after["end_offset"] <= end + 2  # epoch markers only


def test_three_controllers_with_secrets_elect_and_refuse_a_raft_peer_without_the_token(
        tmp_path):
    from pylog_nb.broker.raft.codec import encode_message
    from pylog_nb.broker.raft.messages import VoteRequest

    path, cluster_secrets = write_secrets(tmp_path)
    token = cluster_secrets.internal_token
    raft_ports = free_ports(3)
    voters = ",".join(f"{n}@127.0.0.1:{p}" for n, p in zip((1, 2, 3), raft_ports, strict=True))
    processes = []
    try:
        for node_id in (1, 2, 3):
            directory = tmp_path / f"controller-{node_id}"
            directory.mkdir()
            processes.append(ControllerProcess(directory, (
                "--secrets", str(path), "--node-id", str(node_id), "--voters", voters),
                token=token).start())
        addresses = [("127.0.0.1", p.port) for p in processes]
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not (quorum := rpc.call_active(addresses, "describe_quorum",
                                             token=token)["quorum"])["active"]:
            assert time.monotonic() < deadline, "no active controller"
            time.sleep(0.05)
        epoch = quorum["epoch"]
        # A would-be voter without the token asks every voter for its vote in a far epoch.
        vote = encode_message(VoteRequest(epoch=epoch + 100, candidate_id=2, last_epoch=epoch + 99,
                                          end_offset=10**6))
        for port in raft_ports:
            data = frame(json.dumps({"id": 0, "from": 2, **vote}).encode())
            assert raw_exchange(port, data) == b""
        wrong = frame(json.dumps({"id": 0, "method": "authenticate",
                                  "params": {"token": "nope"}}).encode())
        answer = raw_exchange(raft_ports[0], wrong)
        assert json.loads(answer[4:])["error_code"] == 58
        time.sleep(0.5)
        after = rpc.call_active(addresses, "describe_quorum", token=token)["quorum"]
        assert after["active"] and after["epoch"] == epoch  # no vote was held
        users = await_bootstrap(lambda method: rpc.call_active(addresses, method, token=token))
        assert [u["user"] for u in users] == ["admin", "pylog-broker"]
        logs = "".join(p.log_text() for p in processes)
        assert logs.count("its first frame is not authenticate") == 3
    finally:
        for process in processes:
            process.close()


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def test_unreadable_or_shared_secrets_stop_the_controller_before_it_listens(tmp_path):
    path, _ = write_secrets(tmp_path)
    os.chmod(path, 0o644)
    for secrets_path in (path, tmp_path / "absent.json"):
        done = subprocess.run(
            [sys.executable, "-m", "pylog_nb.broker.controller", "--data-dir",
             str(tmp_path / "metadata"), "--secrets", str(secrets_path)],
            capture_output=True, text=True, timeout=READY_TIMEOUT_S)
        assert done.returncode == 2 and "--secrets" in done.stderr, done.stderr


def test_security_methods_answer_with_the_documented_shapes(controller):
    import base64
    import hashlib

    def call(method, **params):
        return call_once("127.0.0.1", controller.port, method, **params)

    salt = b"pepper-and-salt!"
    salted = hashlib.pbkdf2_hmac("sha512", b"pw", salt, 4096)
    upsert = {"name": "alice", "mechanism": "SCRAM-SHA-512", "iterations": 4096,
              "salt": base64.b64encode(salt).decode(),
              "salted_password": base64.b64encode(salted).decode()}
    altered = call("alter_user_scram_credentials", upsertions=[upsert],
                   deletions=[{"name": "bob", "mechanism": "SCRAM-SHA-256"}])
    assert altered == {"results": [
        {"user": "bob", "error_code": 91,
         "error_message": "Attempt to delete a user credential that does not exist"},
        {"user": "alice", "error_code": 0, "error_message": None}]}
    assert call("describe_user_scram_credentials", users=["alice"])["results"][0][
        "credential_infos"] == [{"mechanism": "SCRAM-SHA-512", "iterations": 4096}]
    acl = {"resource_type": 2, "resource_name": "orders", "pattern_type": 3,
           "principal": "User:alice", "host": "*", "operation": 3, "permission_type": 3}
    assert call("create_acls", creations=[acl]) == {
        "results": [{"error_code": 0, "error_message": None}]}
    deleted = call("delete_acls", filters=[{**acl, "resource_name": None, "pattern_type": 1,
                                            "principal": None, "host": None}])
    assert deleted["filter_results"][0]["matching_acls"] == [
        {**acl, "error_code": 0, "error_message": None}]
    entity = [["user", None], ["client-id", "app"]]
    quotas = call("alter_client_quotas", entries=[{"entity": entity, "ops": [
        {"key": "consumer_byte_rate", "value": 4096, "remove": False}]}])
    assert quotas == {"entries": [{"entity": entity, "error_code": 0, "error_message": None}]}
    described = call("describe_client_quotas", strict=True, components=[
        {"entity_type": "user", "match_type": 1, "match": None},
        {"entity_type": "client-id", "match_type": 0, "match": "app"}])
    assert described == {"entries": [{"entity": [["client-id", "app"], ["user", None]],
                                      "values": {"consumer_byte_rate": 4096.0}}]}
    for method, params in (("create_acls", {"creations": [{**acl, "extra": 1}]}),
                           ("alter_client_quotas", {"entries": [{"entity": "user"}]}),
                           ("describe_client_quotas", {"components": [
                               {"entity_type": "user", "match_type": 0, "match": None}]})):
        with pytest.raises(ControllerRpcError) as refused:
            call(method, **params)
        assert refused.value.error_code == 42, method
