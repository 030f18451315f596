"""Another account on the same machine (``nobody``) against a cluster started with defaults.

The intruder is a separate process running as ``nobody`` with Debian's own Python (it cannot
even run this project's interpreter): it tries to read the data directory, to speak Kafka
without signing in (Metadata after ApiVersions, Produce, a follower's Fetch, a guessed PLAIN
password), to register a broker with a controller, to vote in the Raft quorum, and to use the
brokers' admin endpoint. It only sends the frames it is given and reports what came back; the
test decides. Afterwards the cluster's data and metadata are what they were.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from support.clients import consume_all, create_topic, produce

from pylog_nb import LocalCluster
from pylog_nb.broker.errors import Errors
from pylog_nb.broker.protocol import codec
from pylog_nb.broker.protocol.versions import (
    API_VERSIONS_KEY,
    FETCH_KEY,
    METADATA_KEY,
    PRODUCE_KEY,
    SASL_AUTHENTICATE_KEY,
    SASL_HANDSHAKE_KEY,
)
from pylog_nb.broker.rpc_framing import encode_frame

NOBODY_UID = 65534
INTRUDER_PYTHON = "/usr/bin/python3"  # Debian's: nobody may not run the project's venv
INTRUDER_TIMEOUT_S = 60
RECORDS = 20

INTRUDER = r'''
import json, os, socket, sys, urllib.error, urllib.request
plan = json.load(sys.stdin)
report = {"uid": os.getuid(), "files": {}, "kafka": {}, "http": {}}
for path in plan["paths"]:
    try:
        os.listdir(path) if os.path.isdir(path) else open(path, "rb").read(1)
        report["files"][path] = "read"
    except OSError as error:
        report["files"][path] = type(error).__name__
for name, (host, port, frames) in plan["sockets"].items():
    answers = []
    try:
        with socket.create_connection((host, port), timeout=5) as sock:
            for frame in frames:
                sock.sendall(bytes.fromhex(frame))
                head = sock.recv(4, socket.MSG_WAITALL)
                if len(head) < 4:
                    answers.append("closed")
                    break
                size = int.from_bytes(head, "big", signed=True)
                body = b""
                while len(body) < size:
                    chunk = sock.recv(size - len(body))
                    if not chunk:
                        break
                    body += chunk
                answers.append(body.hex())
            else:
                sock.settimeout(5)
                answers.append("closed" if sock.recv(1) == b"" else "open")
    except (ConnectionError, socket.timeout) as error:
        answers.append(type(error).__name__)
    report["kafka"][name] = answers
for name, (url, method) in plan["http"].items():
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            report["http"][name] = response.status
    except urllib.error.HTTPError as error:
        report["http"][name] = error.code
print(json.dumps(report))
'''


def _request(api_key: int, version: int, body: dict) -> str:
    return codec.encode_request(api_key, version, 7, "intruder", body).hex()


def _fetch_as_follower(topic_id) -> str:
    return _request(FETCH_KEY, 12, {
        "replica_id": 2, "max_wait": 100, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": "secret", "partitions": [{
            "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": ""})


def _plan(cluster: LocalCluster, data_dir: Path) -> dict:
    host, port = cluster.bootstrap_servers.split(",")[0].split(":")
    broker = (host, int(port))
    versions = _request(API_VERSIONS_KEY, 3, {"client_software_name": "x",
                                               "client_software_version": "1"})
    metadata = _request(METADATA_KEY, 12, {"topics": None, "allow_auto_topic_creation": True,
                                            "include_topic_authorized_operations": False})
    produce_request = _request(PRODUCE_KEY, 9, {"acks": -1, "timeout": 1000, "topic_data": [
        {"name": "secret", "partition_data": [{"index": 0, "records": b""}]}]})
    guess = [_request(SASL_HANDSHAKE_KEY, 1, {"mechanism": "PLAIN"}),
             _request(SASL_AUTHENTICATE_KEY, 2, {"auth_bytes": b"\0admin\0admin"})]
    controller = cluster.controller
    register = encode_frame({"id": 1, "method": "register_broker", "params": {
        "broker_id": 99, "host": "127.0.0.1", "port": 1, "incarnation_id": "intruder"}}).hex()
    vote = encode_frame({"id": 1, "method": "vote", "params": {"candidate_id": 9,
                                                               "epoch": 1000}}).hex()
    admin = list(cluster.admin_urls().values())[0]
    return {
        "paths": [str(data_dir), str(data_dir / "secrets.json"),
                  str(data_dir / "client.properties"), str(data_dir / "broker-1")],
        "sockets": {
            "metadata after ApiVersions": [*broker, [versions, metadata]],
            "produce": [*broker, [produce_request]],
            "fetch as a follower": [*broker, [_fetch_as_follower(None)]],
            "guessed password": [*broker, guess],
            "register a broker": [cluster.host, controller.port, [register]],
            "vote": [cluster.host, controller.raft_port, [vote]],
        },
        "http": {"partitions": [f"{admin}/v1/partitions", "GET"],
                 "isolate": [f"{admin}/v1/faults/isolate", "POST"]},
    }


def _registered(cluster: LocalCluster) -> list[tuple]:
    """Each registered broker: who it is and whether it is fenced (not its lease clock)."""
    return [(b["broker_id"], b["host"], b["port"], b["incarnation_id"], b["fenced"])
            for b in cluster.controller_describe()["brokers"]]


@pytest.fixture(scope="module")
def exposed_parent():
    """A parent directory anyone may enter, as a home directory on a shared host often is:
    only the cluster's own modes keep the intruder out."""
    parent = Path(tempfile.mkdtemp(prefix="pylog-shared-"))
    parent.chmod(0o755)
    yield parent
    shutil.rmtree(parent, ignore_errors=True)


def test_another_account_gets_nothing_and_changes_nothing(exposed_parent):
    if os.geteuid() != 0 or not os.access(INTRUDER_PYTHON, os.X_OK):
        pytest.fail("this test runs the intruder as nobody: it needs root and /usr/bin/python3")
    data_dir = exposed_parent / "cluster"
    with LocalCluster(brokers=3, data_dir=data_dir) as cluster:
        create_topic(cluster.bootstrap_servers, "secret", partitions=1)
        produce(cluster.bootstrap_servers, "secret", [(None, f"r{i}") for i in range(RECORDS)],
                partition=0)
        before = _registered(cluster)
        result = subprocess.run(
            [INTRUDER_PYTHON, "-c", INTRUDER], input=json.dumps(_plan(cluster, data_dir)),
            capture_output=True, text=True, user=NOBODY_UID, group=NOBODY_UID, extra_groups=[],
            timeout=INTRUDER_TIMEOUT_S, check=True)
        report = json.loads(result.stdout)
        assert report["uid"] == NOBODY_UID
        assert set(report["files"].values()) == {"PermissionError"}, report["files"]
        kafka = report["kafka"]
        versions_answer = bytes.fromhex(kafka["metadata after ApiVersions"][0])
        assert versions_answer[4:6] == b"\0\0", "ApiVersions is answered before sign-in"
        assert kafka["metadata after ApiVersions"][1:] == ["closed"]
        for name in ("produce", "fetch as a follower", "register a broker", "vote"):
            assert kafka[name] == ["closed"], (name, kafka[name])
        handshake, authenticate, *rest = kafka["guessed password"]
        _, refused = codec.decode_response(SASL_AUTHENTICATE_KEY, 2, bytes.fromhex(authenticate))
        assert refused.error_code == Errors.SASL_AUTHENTICATION_FAILED and rest == ["closed"]
        assert report["http"] == {"partitions": 401, "isolate": 401}
        assert _registered(cluster) == before
        assert cluster.broker_states() == {1: "up", 2: "up", 3: "up"}
        values = [m.value() for m in consume_all(cluster.bootstrap_servers, "secret", RECORDS)]
        assert values == [f"r{i}".encode() for i in range(RECORDS)]
