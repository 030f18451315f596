"""Transactional batches and markers on real ReplicaManagers (the read path and the
verification tests; ``replicas`` is their fixture)."""

from __future__ import annotations

import time

import pytest

from pylog_nb.broker.metadata.image import PartitionImage
from pylog_nb.broker.records.batch import encode_batch
from pylog_nb.broker.replication import LeaderState
from pylog_nb.broker.server.replica_manager import AppendResult, Partition, ReplicaManager
from pylog_nb.broker.storage import Log
from pylog_nb.broker.types import ACKS_LEADER
from support.replication_support import CONFIG, LAG_MS, TOPIC

TIME_MS = int(time.time() * 1000)  # records as old as the markers: no roll by segment.ms


def txn_batch(producer_id: int, seq: int, count: int = 2, transactional: bool = True):
    return encode_batch([(None, b"p%d-%d" % (producer_id, seq + i), (), TIME_MS + seq + i)
                         for i in range(count)], producer_id=producer_id, producer_epoch=0,
                        base_sequence=seq, is_transactional=transactional)


@pytest.fixture
def replicas(tmp_path):
    """Broker 1 alone leads epoch 0 (ISR of one: the HW follows every append)."""
    log = Log.open(tmp_path / f"{TOPIC}-0", CONFIG)
    leader = LeaderState(TOPIC, 0, 1, 0, (1,), (1,), log, LAG_MS, 1, now_ms=0)
    manager = ReplicaManager(1, tmp_path)
    manager.partitions[(TOPIC, 0)] = Partition(
        TOPIC, 0, log, PartitionImage((1,), (1,), 1, 0, 0), leader)
    yield manager
    log.close()


def marker(manager: ReplicaManager, producer_id: int, commit: bool, coordinator_epoch=0
           ) -> AppendResult:
    return manager.append_control_batch(TOPIC, 0, producer_id, 0, coordinator_epoch, commit,
                                        acks=ACKS_LEADER)[0]
