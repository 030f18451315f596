"""ListOffsets on a leader just elected, whose high watermark still lags its log end.

A follower learns the HW one fetch late, so a new leader may hold records the old leader had
acknowledged above its own HW. Until its followers catch up it cannot say where the log ends:
Kafka answers OFFSET_NOT_AVAILABLE (78) to clients for "latest", and for a time lookup that
found nothing below the HW. A follower's ListOffsets is answered with the log end offset.
The handler runs here on a real log and a real LeaderState; the request is a parsed frame.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from support.replication_support import CONFIG, LAG_MS, TOPIC

from pylog_nb.broker import errors
from pylog_nb.broker.metadata.image import PartitionImage
from pylog_nb.broker.protocol import codec
from pylog_nb.broker.records.batch import encode_batch
from pylog_nb.broker.replication import LeaderState
from pylog_nb.broker.server.apis.offsets import handle_list_offsets
from pylog_nb.broker.server.replica_manager import Partition, ReplicaManager
from pylog_nb.broker.storage import Log

LIST_OFFSETS_KEY = 2
VERSION = 7
LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3
OLD_HW = 5  # what broker 1 knew as a follower
LEO = 10
BASE_TIME_MS = 1_700_000_000_000


@pytest.fixture
def lagging(tmp_path):
    """Broker 1 leads epoch 1 with LEO 10 and HW 5; broker 3 is in the ISR but silent."""
    log = Log.open(tmp_path / "l", CONFIG)
    for offset in range(LEO):
        record = (None, b"r%d" % offset, [], BASE_TIME_MS + offset)
        log.append_as_leader(bytearray(encode_batch([record])), leader_epoch=0)
    log.high_watermark = OLD_HW
    leader = LeaderState(TOPIC, 0, 1, 1, (1, 2, 3), (1, 2, 3), log, LAG_MS, 1, now_ms=0)
    partition = Partition(TOPIC, 0, log, PartitionImage((1, 2, 3), (1, 2, 3), 1, 1, 0), leader)
    yield partition
    log.close()


def _ask(partition: Partition, timestamp: int, replica_id: int = -1) -> tuple[int, int]:
    """(error code, offset) of one ListOffsets v7 question."""
    return _answer(partition, timestamp, replica_id)[:2]


def _answer(partition: Partition, timestamp: int, replica_id: int = -1):
    replicas = ReplicaManager(1, partition.log.directory.parent)
    replicas.partitions[(TOPIC, 0)] = partition
    node = SimpleNamespace(replicas=replicas)
    body = {"replica_id": replica_id, "isolation_level": 0, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0,
                                        "current_leader_epoch": partition.leader_epoch,
                                        "timestamp": timestamp}]}]}
    frame = codec.encode_request(LIST_OFFSETS_KEY, VERSION, 1, "test", body)
    answer = handle_list_offsets(node, codec.parse_request(frame[4:]))
    found = answer["topics"][0]["partitions"][0]
    return found["error_code"], found["offset"], found["timestamp"]


def test_latest_is_not_available_while_the_hw_lags_the_epoch_start(lagging):
    assert lagging.leader.leader_epoch_start_offset == LEO
    assert _ask(lagging, LATEST) == (errors.OFFSET_NOT_AVAILABLE, -1)
    assert _ask(lagging, MAX_TIMESTAMP)[0] == errors.OFFSET_NOT_AVAILABLE


def test_earliest_and_times_below_the_hw_are_answered(lagging):
    assert _ask(lagging, EARLIEST) == (errors.NONE, 0)
    assert _ask(lagging, BASE_TIME_MS + 3) == (errors.NONE, 3)


def test_a_time_found_only_above_the_hw_is_not_available(lagging):
    assert _ask(lagging, BASE_TIME_MS + 7) == (errors.OFFSET_NOT_AVAILABLE, -1)


def test_a_follower_is_told_the_log_end_offset(lagging):
    assert _ask(lagging, LATEST, replica_id=2) == (errors.NONE, LEO)
    assert _ask(lagging, EARLIEST, replica_id=2) == (errors.NONE, 0)


def test_once_the_followers_catch_up_latest_is_the_hw(lagging):
    lagging.leader.on_follower_fetch(2, LEO, 0)
    lagging.leader.on_follower_fetch(3, LEO, 0)
    assert lagging.high_watermark == LEO
    assert _ask(lagging, LATEST) == (errors.NONE, LEO)
    assert _ask(lagging, BASE_TIME_MS + 7) == (errors.NONE, 7)
    assert _ask(lagging, BASE_TIME_MS + 99) == (errors.NONE, -1)  # no record that recent
    assert _answer(lagging, MAX_TIMESTAMP) == (errors.NONE, LEO - 1, BASE_TIME_MS + LEO - 1)


def test_max_timestamp_names_the_record_inside_its_batch(tmp_path):
    log = Log.open(tmp_path / "l", CONFIG)
    times_ms = [(5, 9, 2), (40, 90, 30), (60, 70, 90)]  # the max, 90, first at offset 4
    for times in times_ms:
        records = [(None, b"v", [], BASE_TIME_MS + t) for t in times]
        log.append_as_leader(bytearray(encode_batch(records)), leader_epoch=0)
    leader = LeaderState(TOPIC, 0, 1, 0, (1,), (1,), log, LAG_MS, 1, now_ms=0)
    partition = Partition(TOPIC, 0, log, PartitionImage((1,), (1,), 1, 0, 0), leader)
    assert partition.high_watermark == 9
    assert _answer(partition, MAX_TIMESTAMP) == (errors.NONE, 4, BASE_TIME_MS + 90)
    assert _answer(partition, BASE_TIME_MS + 35) == (errors.NONE, 3, BASE_TIME_MS + 40)
    assert _answer(partition, BASE_TIME_MS + 50) == (errors.NONE, 4, BASE_TIME_MS + 90)
    log.close()
