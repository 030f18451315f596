"""TxnOffsetCommit against a real broker process, at the wire level (issue 12).

No transaction coordinator runs on this branch, so the producer id comes from InitProducerId
without a transactional id, and the COMMIT marker is written the way WriteTxnMarkers will write
it: ``Log.append_control_batch`` on the stopped broker's ``__consumer_offsets`` partition. The
restarted broker's group coordinator must then read the transactional batch and the marker
from the log and show the transaction's offsets.
"""

from __future__ import annotations

import time

from support import wire
from support.clients import create_topic

from pylog_nb import LocalCluster
from pylog_nb.broker.group import partition_for
from pylog_nb.broker.metadata import topic_config
from pylog_nb.broker.metadata.topics import OFFSETS_TOPIC
from pylog_nb.broker.storage import Log

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, INIT_PRODUCER_ID, TXN_OFFSET_COMMIT = (
    8, 9, 10, 22, 28)
NONE, UNKNOWN_TOPIC_OR_PARTITION, LOAD_IN_PROGRESS, UNKNOWN_MEMBER_ID = 0, 3, 14, 25
INVALID_PRODUCER_EPOCH, INVALID_PRODUCER_ID_MAPPING, UNSTABLE_OFFSET_COMMIT = 47, 49, 88
ILLEGAL_GENERATION = 22
WAIT_S = 30


def until_loaded(send):
    """``send()``'s answer once the coordinator has loaded (the first request creates
    ``__consumer_offsets``; a restarted coordinator replays it)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        answer, code = send()
        if code != LOAD_IN_PROGRESS or time.monotonic() > deadline:
            return answer
        time.sleep(0.1)


def txn_commit(sock, group: str, producer: tuple[int, int], parts, *, version: int = 3,
               member_id: str = "", generation: int = -1) -> dict:
    topics: dict[str, list] = {}
    for topic, partition, offset in parts:
        topics.setdefault(topic, []).append({
            "partition_index": partition, "committed_offset": offset,
            "committed_leader_epoch": -1, "committed_metadata": "txn"})
    body = {"transactional_id": "tx-offsets", "group_id": group, "producer_id": producer[0],
            "producer_epoch": producer[1], "generation_id": generation, "member_id": member_id,
            "group_instance_id": None,
            "topics": [{"name": t, "partitions": p} for t, p in topics.items()]}

    def send():
        answer = wire.call(sock, TXN_OFFSET_COMMIT, version, body)
        errors = {(t.name, p.partition_index): p.error_code
                  for t in answer.topics for p in t.partitions}
        return errors, next(iter(errors.values()))

    return until_loaded(send)


def plain_commit(sock, group: str, topic: str, offset: int) -> int:
    answer = wire.call(sock, OFFSET_COMMIT, 8, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "topics": [{"name": topic, "partitions": [{
            "partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
            "committed_metadata": ""}]}]})
    return answer.topics[0].partitions[0].error_code


def fetch(sock, group: str, topic: str, *, require_stable: bool, version: int = 7):
    """(error code, committed offset) of partition 0 by OffsetFetch ``version`` (7 or 8)."""
    if version >= 8:
        body = {"groups": [{"group_id": group, "topics": [
            {"name": topic, "partition_indexes": [0]}]}], "require_stable": require_stable}
    else:
        body = {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}],
                "require_stable": require_stable}

    def send():
        answer = wire.call(sock, OFFSET_FETCH, version, body)
        result = answer.groups[0] if version >= 8 else answer
        part = result.topics[0].partitions[0] if result.topics else None
        if part is None:
            return (result.error_code, None), result.error_code
        return (part.error_code, part.committed_offset), result.error_code

    return until_loaded(send)


def producer_id(sock) -> tuple[int, int]:
    answer = wire.call(sock, INIT_PRODUCER_ID, 1,
                       {"transactional_id": None, "transaction_timeout": 60_000})
    assert answer.error_code == NONE
    return answer.producer_id, answer.producer_epoch


def test_txn_offsets_stay_unstable_until_the_commit_marker_then_load_from_the_log(
        tmp_path, topic_name):
    group = f"g-{topic_name}"
    with LocalCluster(brokers=1, data_dir=tmp_path) as cluster:
        bootstrap = cluster.bootstrap_servers
        create_topic(bootstrap, topic_name)
        with wire.connect(bootstrap) as sock:
            wire.call(sock, FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})
            assert until_loaded(lambda: (plain_commit(sock, group, topic_name, 5),) * 2) == NONE
            pid, epoch = producer_id(sock)
            assert txn_commit(sock, group, (pid, epoch), [(topic_name, 0, 9)]) == {
                (topic_name, 0): NONE}
            for version in (7, 8):
                assert fetch(sock, group, topic_name, require_stable=True, version=version) == (
                    UNSTABLE_OFFSET_COMMIT, -1)
                assert fetch(sock, group, topic_name, require_stable=False,
                             version=version) == (NONE, 5)
            # v0 (no group fields) and a newer epoch of the producer are accepted; the old
            # epoch is then fenced by the partition's producer state.
            assert txn_commit(sock, group, (pid, epoch + 1), [(topic_name, 0, 11)],
                              version=0) == {(topic_name, 0): NONE}
            assert txn_commit(sock, group, (pid, epoch), [(topic_name, 0, 12)]) == {
                (topic_name, 0): INVALID_PRODUCER_EPOCH}
        cluster.kill(1)

        data_dir = tmp_path / "broker-1"
        index = partition_for(group, len(list(data_dir.glob(f"{OFFSETS_TOPIC}-*"))))
        directory = data_dir / f"{OFFSETS_TOPIC}-{index}"
        log = Log.open(directory, topic_config.log_config({"cleanup.policy": "compact"}))
        assert pid in log.producer_state.ongoing_txns, "a transactional batch of the producer"
        log.append_control_batch(pid, epoch + 1, 0, True, leader_epoch=log.latest_epoch)
        log.close()
        cluster.restart(1)

        with wire.connect(bootstrap) as sock:
            assert fetch(sock, group, topic_name, require_stable=True) == (NONE, 11)
            assert fetch(sock, group, topic_name, require_stable=False) == (NONE, 11)


def test_txn_offset_commit_bad_input_gets_kafka_codes_and_changes_nothing(tmp_path, topic_name):
    group = f"g-{topic_name}"
    with LocalCluster(brokers=1, data_dir=tmp_path) as cluster:
        bootstrap = cluster.bootstrap_servers
        create_topic(bootstrap, topic_name)
        with wire.connect(bootstrap) as sock:
            wire.call(sock, FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})
            pid, epoch = producer_id(sock)
            assert txn_commit(sock, group, (pid, epoch), [(topic_name, 0, 1)], member_id="m",
                              generation=4) == {(topic_name, 0): ILLEGAL_GENERATION}
            assert txn_commit(sock, group, (-1, -1), [(topic_name, 0, 1)]) == {
                (topic_name, 0): INVALID_PRODUCER_ID_MAPPING}
            assert plain_commit(sock, group, topic_name, 5) == NONE  # creates the group
            assert txn_commit(sock, group, (pid, epoch), [(topic_name, 0, 1)], member_id="ghost",
                              generation=0) == {(topic_name, 0): UNKNOWN_MEMBER_ID}
            assert txn_commit(sock, group, (pid, epoch), [
                ("no-such-topic", 0, 1), (topic_name, 7, 1)]) == {
                ("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION,
                (topic_name, 7): UNKNOWN_TOPIC_OR_PARTITION}
            assert fetch(sock, group, topic_name, require_stable=True) == (NONE, 5)
