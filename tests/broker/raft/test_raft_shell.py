"""Three Raft voters on real loopback sockets (``RaftShell`` around the shipped ``RaftNode``):
they elect a leader, commit proposals on every voter, elect another when the leader's shell is
stopped (as a SIGKILL stops it: no goodbye), keep what was committed, and take the old leader
back as a follower that catches up. Also: the wire codec round-trips every message and refuses
malformed ones."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from pylog_nb.broker.errors import Errors
from pylog_nb.broker.raft.codec import decode_message, encode_message
from pylog_nb.broker.raft.log import Batch, RaftLog
from pylog_nb.broker.raft.messages import (
    BeginQuorumEpoch,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    VoteRequest,
    VoteResponse,
)
from pylog_nb.broker.raft.node import NotLeaderError, RaftNode, Role
from pylog_nb.broker.raft.quorum_state import QuorumStateStore
from pylog_nb.broker.raft.shell import RaftShell

VOTERS = (1, 2, 3)
WAIT_S = 15.0  # the wait for an election or a commit; each takes about a second


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class Quorum:
    def __init__(self, root, ports: dict[int, int]) -> None:
        self.root = root
        self.ports = ports
        self.shells: dict[int, RaftShell] = {}

    async def start(self, voter: int) -> RaftShell:
        directory = self.root / f"voter-{voter}"
        node = RaftNode(voter, frozenset(VOTERS), RaftLog.open(directory),
                        QuorumStateStore(directory), monotonic_ms())
        peers = {v: ("127.0.0.1", p) for v, p in self.ports.items() if v != voter}
        shell = RaftShell(node, peers, port=self.ports[voter], clock=monotonic_ms)
        await shell.start()
        self.shells[voter] = shell
        return shell

    async def kill(self, voter: int) -> None:
        shell = self.shells.pop(voter)
        await shell.stop()
        shell.node.log.close()

    async def leader(self) -> RaftShell:
        async def found():
            while True:
                leaders = [s for s in self.shells.values() if s.node.role is Role.LEADER]
                if len(leaders) == 1 and all(s.node.leader_id == leaders[0].node.node_id
                                             for s in self.shells.values()):
                    return leaders[0]
                await asyncio.sleep(0.02)
        return await asyncio.wait_for(found(), WAIT_S)

    async def stop(self) -> None:
        for voter in list(self.shells):
            await self.kill(voter)


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def records_of(shell: RaftShell) -> list[bytes]:
    return [r for b in shell.node.committed(0) for r in b.records if not b.control]


async def commit(quorum: Quorum, records: list[bytes]) -> None:
    """Propose on whoever leads, again if leadership moves first (a loaded machine can delay
    fetches past the timeout); a batch may then be committed twice, never lost."""
    async def attempt():
        while True:
            try:
                return await (await quorum.leader()).propose(records)
            except NotLeaderError:
                await asyncio.sleep(0.05)
    await asyncio.wait_for(attempt(), WAIT_S)


def test_three_voters_on_sockets_elect_commit_fail_over_and_rejoin(tmp_path):
    async def scenario():
        quorum = Quorum(tmp_path, dict(zip(VOTERS, free_ports(3), strict=True)))
        try:
            for voter in VOTERS:
                await quorum.start(voter)
            await commit(quorum, [b"a", b"b"])
            leader = await quorum.leader()
            follower = quorum.shells[next(v for v in VOTERS if v != leader.node.node_id)]
            with pytest.raises(NotLeaderError):
                await follower.propose([b"not here"])
            victim, victim_epoch = leader.node.node_id, leader.node.epoch
            await quorum.kill(victim)
            second = await quorum.leader()
            assert second.node.epoch > victim_epoch and second.node.node_id != victim
            await commit(quorum, [b"c"])
            back = await quorum.start(victim)

            async def caught_up():
                while back.node.role is not Role.FOLLOWER or (
                        back.node.high_watermark < second.node.high_watermark):
                    await asyncio.sleep(0.02)
            await asyncio.wait_for(caught_up(), WAIT_S)
            sequences = [records_of(shell) for shell in quorum.shells.values()]
            assert all(s == sequences[0] for s in sequences), sequences
            assert {b"a", b"b", b"c"} <= set(sequences[0]) and b"not here" not in sequences[0]
        finally:
            await quorum.stop()

    asyncio.run(scenario())


@pytest.mark.parametrize("message", [
    VoteRequest(3, 1, 2, 40, pre_vote=True),
    VoteResponse(3, False, None, True, 4),
    BeginQuorumEpoch(5, 2),
    FetchRequest(5, 3, 40, 2, 38),
    FetchResponse(5, 2, Errors.NONE, 40, 41, (Batch(40, 5, (b"\x00\xff", b"x"), False),)),
    FetchResponse(5, 2, Errors.FENCED_LEADER_EPOCH, 40, 38, diverging=(2, 31)),
    FetchResponse(5, 2, Errors.NONE, 4, 38, snapshot_id=(30, 4)),
    FetchSnapshotRequest(5, 3, (30, 4)),
    FetchSnapshotResponse(5, 2, Errors.NONE, (30, 4), 1_700, (b"{}", b"\x00")),
    FetchSnapshotResponse(5, 2, Errors.SNAPSHOT_NOT_FOUND, (30, 4)),
])
def test_every_message_survives_the_wire(message):
    assert decode_message(encode_message(message)) == message


@pytest.mark.parametrize("body", [
    {"kind": "Nope"},
    {"kind": "FetchRequest", "epoch": 1, "replica_id": 2, "fetch_offset": -1,
     "last_fetched_epoch": 0, "high_watermark": 0},
    {"kind": "VoteResponse", "epoch": 1, "granted": "yes", "leader_id": None, "pre_vote": False,
     "proposed_epoch": 1},
    {"kind": "FetchResponse", "epoch": 1, "leader_id": 1, "error": 0, "fetch_offset": 0,
     "high_watermark": 0, "batches": [{"base_offset": 0, "epoch": 1, "control": False,
                                       "records": ["not base64!"]}], "diverging": None,
     "snapshot_id": None},
    {"kind": "FetchResponse", "epoch": 1, "leader_id": 1, "error": 3, "fetch_offset": 0,
     "high_watermark": 0, "batches": [], "diverging": None, "snapshot_id": None},
    {"kind": "FetchResponse", "epoch": 1, "leader_id": 1, "error": 0, "fetch_offset": 0,
     "high_watermark": 0, "batches": [], "diverging": None, "snapshot_id": [3]},
    {"kind": "FetchSnapshotResponse", "epoch": 1, "leader_id": 1, "error": 0,
     "snapshot_id": [3, 1], "append_time_ms": 0, "records": ["not base64!"]},
])
def test_a_malformed_message_is_refused(body):
    with pytest.raises(ValueError):
        decode_message(body)
