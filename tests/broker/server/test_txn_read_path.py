"""The read path of transactions on a real log and a real LeaderState: Fetch read_committed stops
at the LSO and lists the aborted transactions it overlaps, read_uncommitted reads to the HW,
ListOffsets "latest" is the LSO for read_committed, markers go through the replica manager."""

from __future__ import annotations

from types import SimpleNamespace

from support.replication_support import TOPIC
from support.txn_partitions import marker, txn_batch

from pylog_nb.broker import errors
from pylog_nb.broker.protocol import codec
from pylog_nb.broker.records.batch import decode_records
from pylog_nb.broker.server.apis.offsets import handle_list_offsets
from pylog_nb.broker.server.replica_manager import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchTarget,
    ReplicaManager,
)
from pylog_nb.broker.types import ACKS_LEADER

LIST_OFFSETS_KEY, VERSION = 2, 7
LATEST = -1


def produce(manager: ReplicaManager, records: bytes) -> int:
    result, _ = manager.append_records(TOPIC, 0, records, ACKS_LEADER, 1000)
    assert result.error_code == errors.NONE, result
    return result.base_offset


def fetch(manager: ReplicaManager, offset: int, isolation: int) -> dict:
    target = FetchTarget(TOPIC, 0, offset, isolation_level=isolation)
    result, _ = manager.read_for_fetch(target, 1 << 20, True)
    assert result["error_code"] == errors.NONE
    data = result["records"]
    result["values"] = ([r.value for r in decode_records(data.read_bytes(), include_control=False)]
                        if data is not None else [])
    return result


def list_latest(manager: ReplicaManager, isolation: int) -> int:
    body = {"replica_id": -1, "isolation_level": isolation, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": 0,
                                        "timestamp": LATEST}]}]}
    frame = codec.encode_request(LIST_OFFSETS_KEY, VERSION, 1, "test", body)
    answer = handle_list_offsets(SimpleNamespace(replicas=manager),
                                 codec.parse_request(frame[4:]))
    found = answer["topics"][0]["partitions"][0]
    assert found["error_code"] == errors.NONE
    return found["offset"]


def test_read_committed_stops_at_the_lso_and_lists_aborted_transactions(replicas):
    partition = replicas.get(TOPIC, 0)
    produce(replicas, txn_batch(1, 0))  # 0-1, aborted below
    produce(replicas, txn_batch(2, 0))  # 2-3, committed below
    assert partition.high_watermark == 4 and partition.last_stable_offset == 0
    assert fetch(replicas, 0, READ_COMMITTED)["records"] is None
    assert list_latest(replicas, READ_COMMITTED) == 0
    assert list_latest(replicas, READ_UNCOMMITTED) == 4
    assert marker(replicas, 1, commit=False).base_offset == 4
    assert partition.last_stable_offset == 2  # p2 still open
    assert marker(replicas, 2, commit=True).base_offset == 5
    produce(replicas, txn_batch(3, 0))  # 6-7, open
    produce(replicas, txn_batch(-1, -1, transactional=False))  # 8-9
    assert (partition.high_watermark, partition.last_stable_offset) == (10, 6)
    committed = fetch(replicas, 0, READ_COMMITTED)
    assert committed["last_stable_offset"] == 6 and committed["high_watermark"] == 10
    assert committed["aborted_transactions"] == [{"producer_id": 1, "first_offset": 0}]
    assert committed["values"] == [b"p1-0", b"p1-1", b"p2-0", b"p2-1"]  # the client drops p1's
    assert fetch(replicas, 5, READ_COMMITTED)["aborted_transactions"] == []
    uncommitted = fetch(replicas, 0, READ_UNCOMMITTED)
    assert "aborted_transactions" not in uncommitted
    assert len(uncommitted["values"]) == 8
    assert list_latest(replicas, READ_COMMITTED) == 6
    assert list_latest(replicas, READ_UNCOMMITTED) == 10


def test_marker_errors_come_back_as_partition_error_codes(replicas):
    produce(replicas, txn_batch(1, 0))
    assert marker(replicas, 1, commit=True, coordinator_epoch=5).error_code == errors.NONE
    assert marker(replicas, 1, commit=True, coordinator_epoch=4).error_code == \
        errors.Errors.TRANSACTION_COORDINATOR_FENCED
    result, _ = replicas.append_records(TOPIC, 0, txn_batch(1, 2), ACKS_LEADER, 1000)
    assert result.error_code == errors.NONE
    result, _ = replicas.append_records(TOPIC, 0, txn_batch(1, 4, transactional=False),
                                        ACKS_LEADER, 1000)
    assert result.error_code == errors.Errors.INVALID_TXN_STATE
    replicas.get(TOPIC, 0).leader = None
    assert marker(replicas, 1, commit=True).error_code == errors.NOT_LEADER_OR_FOLLOWER
