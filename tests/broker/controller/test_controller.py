"""The sans-IO controller: records, the image fold, leases, elections, admin.

Decision logic runs a ``Controller`` over ``MemoryJournal``, an in-memory ``Journal``; where
durability or replay is the point, a single-voter ``QuorumController`` on a real ``RaftLog``
(``open_quorum``), the way the controller runs."""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pylog_nb.broker.controller import (
    BROKER_SESSION_TIMEOUT_MS,
    EVENTS_MAX,
    NO_LEADER,
    PRODUCER_ID_BLOCK_SIZE,
    ClusterImage,
    ConfigChange,
    Controller,
    CreatePartition,
    CreateTopic,
    DeleteTopic,
    FenceBroker,
    MetadataRecord,
    MetadataRecordError,
    PartitionChange,
    ProducerIdsBlock,
    RegisterBroker,
    UnfenceBroker,
    record_from_json,
    replay,
)
from pylog_nb.broker.controller import errors as codes
from pylog_nb.broker.controller.events import describe
from pylog_nb.broker.controller.placement import assign_replicas
from pylog_nb.broker.controller.quorum import QuorumController
from pylog_nb.broker.metadata.image import apply
from pylog_nb.broker.raft.log import LOG_FILE_NAME, RaftLog
from pylog_nb.broker.raft.node import RaftNode
from pylog_nb.broker.raft.quorum_state import STATE_FILE_NAME, QuorumStateStore

TIMEOUT = BROKER_SESSION_TIMEOUT_MS
UNCLEAN = "unclean.leader.election.enable"
MANUAL = {"num_partitions": -1, "replication_factor": -1}


class MemoryJournal:
    """The ``Journal`` protocol in memory: batches of records, durable nowhere."""

    def __init__(self) -> None:
        self.batches: list[list[MetadataRecord]] = []
        self.end_offset = 0
        self.closed = False

    def append(self, records: list[MetadataRecord]) -> int:
        self.batches.append(list(records))
        self.end_offset += len(records)
        return self.end_offset - 1

    def close(self) -> None:
        self.closed = True

    def records(self) -> list[MetadataRecord]:
        return [r for batch in self.batches for r in batch]


def register_all(ctl: Controller, brokers: int, now_ms: int) -> Controller:
    for b in range(1, brokers + 1):
        assert ctl.register_broker(b, "127.0.0.1", 9090 + b, f"inc-{b}", now_ms).ok
        assert ctl.heartbeat(b, now_ms).ok
    return ctl


def start(brokers=3, now_ms=0, **options) -> Controller:
    """A controller over an empty MemoryJournal with ``brokers`` registered, heartbeating,
    unfenced brokers."""
    ctl = Controller(MemoryJournal(), image=ClusterImage.empty(), now_ms=now_ms, **options)
    return register_all(ctl, brokers, now_ms)


def journal(ctl: Controller) -> MemoryJournal:
    assert isinstance(ctl.journal, MemoryJournal)
    return ctl.journal


def open_quorum(directory: Path, now_ms: int = 0, **options) -> QuorumController:
    """The controller as it runs, with a quorum of one: a QuorumController on a RaftLog in
    ``directory``, active after its first poll (it elects itself and commits at once)."""
    directory.mkdir(parents=True, exist_ok=True)
    node = RaftNode(1, frozenset({1}), RaftLog.open(directory, fsync=False),
                    QuorumStateStore(directory, fsync=False), now_ms, rng=random.Random(0))
    quorum = QuorumController(node, now_ms, **options)
    assert quorum.poll(now_ms) == [] and quorum.active is not None
    return quorum


def start_quorum(directory: Path, brokers=3, now_ms=0, **options) -> QuorumController:
    quorum = open_quorum(directory, now_ms, **options)
    register_all(quorum.controller(), brokers, now_ms)
    return quorum


def committed(quorum: QuorumController) -> ClusterImage:
    """Fold what the active controller appended (committed at once by a quorum of one)."""
    assert quorum.take_sends() == []
    assert quorum.applied_offset == quorum.node.log.end_offset
    assert quorum.image == quorum.controller().image
    return quorum.image


def restart(quorum: QuorumController, now_ms: int, **options) -> QuorumController:
    """Kill the controller process (its log file survives) and start it again."""
    quorum.node.log.close()
    return open_quorum(Path(quorum.node.log.path).parent, now_ms, **options)


def event_kinds(image: ClusterImage, records) -> list[str]:
    """The kinds of the events describing ``records`` decided on ``image``."""
    kinds = []
    for record in records:
        kinds += [event[0] for event in describe(image, record)]
        image = apply(image, record)
    return kinds


def part(ctl: Controller, topic: str, index: int):
    return ctl.image.topics[topic].partitions[index]


def topic_id(ctl: Controller, topic: str) -> str:
    return ctl.image.topics[topic].topic_id


def heartbeat_all(ctl: Controller, brokers, now_ms: int) -> None:
    for b in brokers:
        assert ctl.heartbeat(b, now_ms).ok


def shrink_isr(ctl: Controller, topic: str, index: int, isr) -> None:
    p = part(ctl, topic, index)
    result = ctl.alter_partition(
        p.leader, topic_id(ctl, topic), index, p.leader_epoch, isr, p.partition_epoch
    )
    assert result.ok, result.message


# -- records -----------------------------------------------------------------------------------

broker_ids = st.integers(0, 2**31 - 1)
replica_lists = st.lists(st.integers(0, 50), min_size=1, max_size=5, unique=True).map(tuple)
texts = st.text(min_size=1, max_size=20)
configs = st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=3)
epochs = st.integers(0, 2**31 - 1)
records = st.one_of(
    st.builds(RegisterBroker, broker_id=broker_ids, host=texts, port=st.integers(0, 65535),
              incarnation_id=st.text(max_size=36)),
    st.builds(FenceBroker, broker_id=broker_ids),
    st.builds(UnfenceBroker, broker_id=broker_ids),
    st.builds(CreateTopic, name=texts, topic_id=texts, configs=configs),
    st.builds(CreatePartition, topic_id=texts, partition=epochs, replicas=replica_lists,
              isr=replica_lists, leader=st.integers(-1, 50), leader_epoch=epochs,
              partition_epoch=epochs),
    st.builds(PartitionChange, topic_id=texts, partition=epochs,
              leader=st.integers(-1, 50), isr=st.none() | replica_lists,
              leader_epoch=epochs, partition_epoch=epochs),
    st.builds(PartitionChange, topic_id=texts, partition=epochs, leader=st.none(),
              isr=replica_lists, leader_epoch=epochs, partition_epoch=epochs),
    st.builds(DeleteTopic, topic_id=texts),
    st.builds(ConfigChange, topic=texts, configs=configs),
    st.builds(ProducerIdsBlock, first_id=st.integers(0, 2**40), size=st.integers(1, 10_000),
              broker_id=broker_ids),
)  # fmt: skip


@given(records)
def test_every_record_round_trips_through_one_canonical_json_object(record):
    text = record.to_json()
    assert "\n" not in text
    decoded = record_from_json(text)
    assert decoded == record and type(decoded) is type(record)
    assert decoded.to_json() == text
    assert type(record).from_json(text) == record


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        "not json",
        '{"type":"Nope"}',
        '{"broker_id":1}',
        '{"type":"FenceBroker"}',
        '{"type":"FenceBroker","broker_id":1,"extra":2}',
        '{"type":"FenceBroker","broker_id":-5}',
        (
            '{"type":"PartitionChange","topic_id":"t","partition":0,"leader":null,"isr":null,'
            '"leader_epoch":0,"partition_epoch":1}'
        ),
    ],
)
def test_malformed_record_json_is_refused(text):
    with pytest.raises(MetadataRecordError):
        record_from_json(text)


def test_from_json_on_a_subclass_checks_the_type_tag():
    with pytest.raises(MetadataRecordError):
        FenceBroker.from_json(UnfenceBroker(broker_id=1).to_json())


# -- the journal, durability and replay -------------------------------------------------------


def test_each_decision_is_one_journal_batch_and_the_image_folds_them():
    ctl = start(brokers=2)
    before = journal(ctl).end_offset
    result = ctl.create_topic("t", 2, 2)
    assert journal(ctl).batches[-1] == list(result.records)
    assert result.last_offset == journal(ctl).end_offset - 1 == before + len(result.records) - 1
    assert replay(journal(ctl).records()) == ctl.image
    ctl.close()
    assert journal(ctl).closed


def test_the_controller_reads_committed_metadata_in_whole_batches(tmp_path):
    quorum = start_quorum(tmp_path)  # offset 0: the epoch-start batch, never sent; 1..6: one
    quorum.controller().create_topic("t", 3, 1)  # record per batch; 7..10: the topic's batch
    committed(quorum)
    read = quorum.read_committed
    assert type(read(0, 1).records[0]) is RegisterBroker and read(0, 1).next_offset == 2
    assert len(read(0, 3).records) == 3 and read(0, 3).next_offset == 4
    assert len(read(0, 7).records) == 6 and read(0, 7).next_offset == 7  # the topic's batch
    assert len(read(7, 1).records) == 4 and read(7, 1).next_offset == 11  # whole, if first
    assert read(11, 5).records == [] and read(11, 5).next_offset == read(11, 5).end_offset == 11
    assert not quorum.is_batch_boundary(8) and quorum.is_batch_boundary(7)
    quorum.node.log.close()


def test_a_torn_batch_at_any_byte_is_recovered_as_if_the_decision_never_happened(tmp_path):
    quorum = start_quorum(tmp_path / "whole")
    ctl = quorum.controller()
    ctl.create_topic("t", 3, 3)
    before = committed(quorum)
    path = tmp_path / "whole" / LOG_FILE_NAME
    good_bytes = os.path.getsize(path)
    ctl.heartbeat(1, TIMEOUT)
    ctl.heartbeat(2, TIMEOUT)
    assert ctl.tick(TIMEOUT).records  # fences broker 3 in one batch
    after = committed(quorum)
    quorum.node.log.close()
    data = path.read_bytes()
    state = (tmp_path / "whole" / STATE_FILE_NAME).read_bytes()
    for cut in range(good_bytes + 1, len(data)):
        directory = tmp_path / f"cut-{cut}"
        directory.mkdir()
        (directory / LOG_FILE_NAME).write_bytes(data[:cut])
        (directory / STATE_FILE_NAME).write_bytes(state)
        torn = open_quorum(directory, now_ms=TIMEOUT)
        assert torn.image == before, cut
        assert torn.node.log.truncated_bytes == cut - good_bytes
        assert torn.controller().tick(TIMEOUT + 1).records == ()  # a fresh session for all
        torn.node.log.close()
    whole = restart(quorum, TIMEOUT)
    assert whole.image == after
    whole.node.log.close()


def test_a_corrupt_byte_cuts_the_controllers_log_at_that_batch(tmp_path):
    quorum = start_quorum(tmp_path, brokers=1)
    size = os.path.getsize(tmp_path / LOG_FILE_NAME)
    before = committed(quorum)
    quorum.controller().create_topic("a", 1, 1)
    quorum.controller().create_topic("b", 1, 1)
    quorum.node.log.close()
    path = tmp_path / LOG_FILE_NAME
    data = bytearray(path.read_bytes())
    data[size + 30] ^= 0xFF  # inside the batch creating "a"
    path.write_bytes(bytes(data))
    again = open_quorum(tmp_path)
    assert again.image == before  # "b", after the bad batch, cannot be trusted either
    again.node.log.close()


def scenario(ctl: Controller) -> Controller:
    register_all(ctl, 4, 0)
    ctl.create_topic("orders", 6, 3)
    ctl.create_topic("audit", 2, 2, configs={UNCLEAN: "true"})
    ctl.allocate_producer_ids(2)
    heartbeat_all(ctl, [1, 2, 4], TIMEOUT)
    ctl.tick(TIMEOUT)  # fences 3
    ctl.alter_configs("orders", {"retention.ms": "1000"})
    ctl.create_partitions("orders", 8)
    heartbeat_all(ctl, [1, 2, 3, 4], 2 * TIMEOUT)  # 3 comes back
    ctl.elect_preferred_leaders(2 * TIMEOUT)
    ctl.delete_topic("audit")
    ctl.register_broker(4, "127.0.0.1", 9094, "inc-4-restarted", 2 * TIMEOUT + 500)
    return ctl


def memory_scenario() -> Controller:
    return scenario(Controller(MemoryJournal(), image=ClusterImage.empty(), now_ms=0))


def test_replaying_the_journal_rebuilds_the_image_exactly(tmp_path):
    ctl = memory_scenario()
    assert replay(journal(ctl).records()) == ctl.image
    assert json.loads(json.dumps(ctl.image.to_dict()))["topics"][0]["name"] == "orders"
    quorum = open_quorum(tmp_path)
    image = scenario(quorum.controller()).image
    assert committed(quorum) == image  # the fold of the committed Raft log
    restarted = restart(quorum, 9999)
    assert restarted.image == restarted.controller().image == image
    restarted.node.log.close()


def test_a_broker_following_the_log_in_slices_builds_the_same_image(tmp_path):
    quorum = open_quorum(tmp_path)
    scenario(quorum.controller())
    image = committed(quorum)
    follower, offset = ClusterImage.empty(), 0
    while offset < quorum.applied_offset:
        answer = quorum.read_committed(offset, 3)
        follower = replay(answer.records, follower)
        offset = answer.next_offset
    assert follower == image
    quorum.node.log.close()


def test_the_same_inputs_and_seed_give_the_same_decisions_and_a_byte_identical_log(tmp_path):
    assert journal(memory_scenario()).batches == journal(memory_scenario()).batches
    for name in ("a", "b"):
        quorum = open_quorum(tmp_path / name)
        scenario(quorum.controller())
        quorum.node.log.close()
    a = (tmp_path / "a" / LOG_FILE_NAME).read_bytes()
    b = (tmp_path / "b" / LOG_FILE_NAME).read_bytes()
    assert a == b


def test_apply_refuses_records_that_do_not_fit_the_image():
    image = replay([RegisterBroker(broker_id=1, host="h", port=1, incarnation_id="i")])
    bad = [
        FenceBroker(broker_id=1),  # already fenced
        UnfenceBroker(broker_id=2),  # unknown
        DeleteTopic(topic_id="nope"),
        ProducerIdsBlock(first_id=5, size=10, broker_id=1),  # skips ids 0..4
    ]
    for record in bad:
        with pytest.raises(MetadataRecordError):
            replay([record], image)
    topic = [
        CreateTopic(name="t", topic_id="id", configs={}),
        CreatePartition(
            topic_id="id", partition=0, replicas=(1,), isr=(1,), leader=1, leader_epoch=0,
            partition_epoch=0,
        ),
    ]  # fmt: skip
    image = replay([UnfenceBroker(broker_id=1), *topic], image)
    change = {
        "topic_id": "id",
        "partition": 0,
        "leader": NO_LEADER,
        "isr": None,
        "partition_epoch": 1,
    }
    with pytest.raises(MetadataRecordError):  # leader changed but epoch did not
        replay([PartitionChange(**change, leader_epoch=0)], image)
    with pytest.raises(MetadataRecordError):  # partition epoch skips
        replay([PartitionChange(**{**change, "partition_epoch": 2}, leader_epoch=1)], image)
    with pytest.raises(MetadataRecordError):  # ISR outside the replicas
        replay([PartitionChange(**{**change, "isr": (2,)}, leader_epoch=1)], image)


# -- brokers, leases, fencing, elections -------------------------------------------------------


def test_a_registered_broker_stays_fenced_until_it_heartbeats_caught_up():
    ctl = start(brokers=0)
    result = ctl.register_broker(1, "127.0.0.1", 9091, "a", 0)
    assert result.records == (RegisterBroker(broker_id=1, host="127.0.0.1", port=9091,
                                             incarnation_id="a"),)  # fmt: skip
    assert ctl.image.brokers[1].fenced
    assert ctl.heartbeat(1, 100, broker_leo_caught_up=False).records == ()
    assert ctl.image.brokers[1].fenced
    assert ctl.heartbeat(1, 200).records == (UnfenceBroker(broker_id=1),)
    assert not ctl.image.brokers[1].fenced
    assert ctl.heartbeat(1, 300).records == ()  # heartbeats are never logged
    assert ctl.register_broker(1, "127.0.0.1", 9091, "a", 400).records == ()  # a retry


def test_heartbeat_from_an_unknown_or_stale_broker_is_refused():
    ctl = start(brokers=1)
    assert ctl.heartbeat(9, 10).error_code == codes.BROKER_ID_NOT_REGISTERED
    assert ctl.heartbeat(1, 10, incarnation_id="old").error_code == codes.STALE_BROKER_EPOCH
    assert ctl.register_broker(-1, "h", 1, "x", 10).error_code == codes.INVALID_REQUEST


def test_expired_lease_fences_the_broker_and_elects_from_the_isr_with_epoch_bump():
    ctl = start()
    ctl.create_topic("t", assignments=[[1, 2, 3], [2, 3, 1]])
    heartbeat_all(ctl, [2, 3], TIMEOUT - 1)
    assert ctl.tick(TIMEOUT - 1).records == ()  # broker 1's lease runs to exactly TIMEOUT
    before = ctl.image
    result = ctl.tick(TIMEOUT)
    assert result.records[-1] == FenceBroker(broker_id=1)
    assert ctl.image.brokers[1].fenced
    p0, p1 = part(ctl, "t", 0), part(ctl, "t", 1)
    assert (p0.leader, p0.isr, p0.leader_epoch, p0.partition_epoch) == (2, (2, 3), 1, 1)
    assert (p1.leader, p1.isr, p1.leader_epoch, p1.partition_epoch) == (2, (2, 3), 0, 1)
    kinds = event_kinds(before, result.records)
    assert kinds == ["leader_elected", "isr_shrink", "isr_shrink", "broker_fenced"]
    assert ctl.tick(TIMEOUT + 1).records == ()  # fenced once


def test_a_stalled_controller_extends_every_lease_by_its_stall():
    ctl = start()
    ctl.extend_leases(700)  # the controller was stalled 700 ms: brokers were not silent
    assert ctl.next_lease_expiry_ms() == TIMEOUT + 700
    assert ctl.tick(TIMEOUT + 699).records == ()
    heartbeat_all(ctl, [2, 3], TIMEOUT + 699)
    assert ctl.tick(TIMEOUT + 700).records[-1] == FenceBroker(broker_id=1)
    ctl.extend_leases(10 * TIMEOUT)  # stall after stall: at most a session between heartbeats
    assert ctl.lease_expiry_ms(2) == TIMEOUT + 699 + 2 * TIMEOUT
    heartbeat_all(ctl, [2, 3], TIMEOUT + 800)
    ctl.extend_leases(100)  # a heartbeat grants a fresh lease, with room to extend again
    assert ctl.lease_expiry_ms(2) == TIMEOUT + 800 + TIMEOUT + 100


def test_last_isr_member_stays_in_the_isr_and_leads_again_when_it_returns():
    ctl = start(brokers=2)
    ctl.create_topic("t", assignments=[[1, 2]])
    shrink_isr(ctl, "t", 0, [1])
    heartbeat_all(ctl, [2], TIMEOUT)
    ctl.tick(TIMEOUT)
    p = part(ctl, "t", 0)
    assert (p.leader, p.isr, p.leader_epoch) == (NO_LEADER, (1,), 1)  # ISR of one; 2 not clean
    result = ctl.heartbeat(1, TIMEOUT + 10)
    assert result.records[0] == UnfenceBroker(broker_id=1)
    p = part(ctl, "t", 0)
    assert (p.leader, p.isr, p.leader_epoch) == (1, (1,), 2)


def test_unclean_election_is_off_by_default():
    ctl = start(brokers=2)
    ctl.create_topic("t", assignments=[[1, 2]])
    shrink_isr(ctl, "t", 0, [1])
    heartbeat_all(ctl, [2], TIMEOUT)
    ctl.tick(TIMEOUT)
    assert part(ctl, "t", 0).leader == NO_LEADER  # broker 2 is live but out of sync
    # Enabling it later elects the live out-of-sync replica at once, with an ISR of just it.
    result = ctl.alter_configs("t", {UNCLEAN: "true"}, now_ms=TIMEOUT + 1)
    assert result.ok and len(result.records) == 2
    p = part(ctl, "t", 0)
    assert (p.leader, p.isr, p.leader_epoch) == (2, (2,), 2)


def test_unclean_election_when_enabled_elects_a_live_replica_outside_the_isr():
    ctl = start(brokers=3)
    ctl.create_topic("t", assignments=[[1, 2, 3]], configs={UNCLEAN: "true"})
    shrink_isr(ctl, "t", 0, [1])
    heartbeat_all(ctl, [2, 3], TIMEOUT)
    ctl.tick(TIMEOUT)
    p = part(ctl, "t", 0)
    assert (p.leader, p.isr, p.leader_epoch) == (2, (2,), 1)


def test_unclean_election_waits_for_any_replica_to_come_back():
    ctl = start(brokers=3)
    ctl.create_topic("t", assignments=[[1, 2]], configs={UNCLEAN: "true"})
    shrink_isr(ctl, "t", 0, [1])
    heartbeat_all(ctl, [3], TIMEOUT)
    ctl.tick(TIMEOUT)  # fences 1 and 2
    assert part(ctl, "t", 0).leader == NO_LEADER
    ctl.heartbeat(2, TIMEOUT + 5)
    p = part(ctl, "t", 0)
    assert (p.leader, p.isr) == (2, (2,))


def test_restarted_broker_with_a_new_incarnation_loses_its_leaderships_first():
    ctl = start()
    ctl.create_topic("t", assignments=[[1, 2, 3]])
    before = ctl.image
    result = ctl.register_broker(1, "127.0.0.1", 9091, "inc-1-b", 100)
    assert [type(r) for r in result.records] == [PartitionChange, FenceBroker, RegisterBroker]
    p = part(ctl, "t", 0)
    assert (p.leader, p.isr, p.leader_epoch) == (2, (2, 3), 1)
    assert ctl.image.brokers[1].fenced and ctl.image.brokers[1].incarnation_id == "inc-1-b"
    assert "broker_restarted" in event_kinds(before, result.records)
    ctl.heartbeat(1, 200)
    assert not ctl.image.brokers[1].fenced and part(ctl, "t", 0).leader == 2


def test_preferred_leader_election_returns_leadership_to_the_first_replica():
    ctl = start()
    ctl.create_topic("t", assignments=[[1, 2, 3], [2, 3, 1]])
    heartbeat_all(ctl, [2, 3], TIMEOUT)
    ctl.tick(TIMEOUT)
    ctl.heartbeat(1, TIMEOUT + 1)
    assert part(ctl, "t", 0).leader == 2
    assert ctl.elect_preferred_leaders(TIMEOUT + 2).records == ()  # 1 is not in the ISR yet
    shrink_isr(ctl, "t", 0, [1, 2, 3])  # the leader re-admits 1
    result = ctl.elect_preferred_leaders(TIMEOUT + 3)
    assert len(result.records) == 1
    p = part(ctl, "t", 0)
    assert (p.leader, p.leader_epoch) == (1, 2)


def test_controller_restart_causes_no_spurious_elections(tmp_path):
    quorum = start_quorum(tmp_path)
    quorum.controller().create_topic("t", 6, 3)
    image, end = committed(quorum), quorum.node.log.end_offset
    late = 10 * TIMEOUT  # far past every lease the old controller knew about
    quorum = restart(quorum, late)
    ctl = quorum.controller()
    assert quorum.image == ctl.image == image
    end = quorum.node.log.end_offset  # its epoch-start batch, only
    assert ctl.tick(late + TIMEOUT - 1).records == ()  # grace: a whole session from open
    heartbeat_all(ctl, [1, 2, 3], late + TIMEOUT - 1)
    assert ctl.tick(late + 2 * TIMEOUT - 2).records == ()
    assert quorum.node.log.end_offset == end and committed(quorum) == image
    heartbeat_all(ctl, [1, 2], late + 2 * TIMEOUT - 2)  # 3 stops: fenced after its lease
    assert ctl.tick(late + 2 * TIMEOUT - 1).records[-1] == FenceBroker(broker_id=3)
    quorum.node.log.close()


def test_no_two_leaders_share_a_partition_epoch():
    ctl = memory_scenario()
    leaders: dict[tuple[str, int, int], int] = {}
    state: dict[tuple[str, int], tuple[int, int]] = {}
    for record in journal(ctl).records():
        if isinstance(record, CreatePartition):
            key = (record.topic_id, record.partition)
            state[key] = (record.leader, record.leader_epoch)
        elif isinstance(record, PartitionChange) and record.leader is not None:
            key = (record.topic_id, record.partition)
            leader, epoch = state[key]
            assert record.leader != leader and record.leader_epoch == epoch + 1
            state[key] = (record.leader, record.leader_epoch)
        else:
            continue
        leader, epoch = state[key]
        assert leaders.setdefault((*key, epoch), leader) == leader
    assert any(epoch > 0 for _, _, epoch in leaders)


# -- AlterPartition ----------------------------------------------------------------------------


def test_alter_partition_shrinks_and_expands_the_isr_bumping_only_the_partition_epoch():
    ctl = start()
    ctl.create_topic("t", assignments=[[1, 2, 3]])
    tid = topic_id(ctl, "t")
    before = ctl.image
    result = ctl.alter_partition(1, tid, 0, 0, [1, 3], 0)
    assert result.ok and result.value.isr == (1, 3) and result.value.partition_epoch == 1
    assert event_kinds(before, result.records) == ["isr_shrink"]
    before = ctl.image
    result = ctl.alter_partition(1, tid, 0, 0, [3, 2, 1], 1)
    assert result.ok and result.value.isr == (1, 2, 3)  # kept in replica order
    assert (result.value.leader_epoch, result.value.partition_epoch) == (0, 2)
    assert event_kinds(before, result.records) == ["isr_expand"]
    assert ctl.alter_partition(1, tid, 0, 0, [1, 2, 3], 2).records == ()  # no change


@pytest.mark.parametrize(
    ("broker", "tid", "index", "leader_epoch", "isr", "partition_epoch", "code"),
    [
        (1, "nope", 0, 0, [1], 0, codes.UNKNOWN_TOPIC_ID),
        (1, None, 5, 0, [1], 0, codes.UNKNOWN_TOPIC_OR_PARTITION),
        (1, None, 0, 1, [1], 0, codes.NOT_CONTROLLER),  # epoch ahead of the controller
        (1, None, 0, 0, [1], 3, codes.NOT_CONTROLLER),
        (2, None, 0, 0, [1, 2], 0, codes.INVALID_REQUEST),  # not the leader
        (1, None, 0, 0, [1, 4], 0, codes.INVALID_REQUEST),  # 4 is not a replica
        (1, None, 0, 0, [1, 1], 0, codes.INVALID_REQUEST),
        (1, None, 0, 0, [2, 3], 0, codes.INVALID_REQUEST),  # leader left out
        (1, None, 0, 0, [], 0, codes.INVALID_REQUEST),
    ],
)
def test_alter_partition_refusals_use_kafkas_codes(
    broker, tid, index, leader_epoch, isr, partition_epoch, code
):
    ctl = start(brokers=4)
    ctl.create_topic("t", assignments=[[1, 2, 3]])
    tid = topic_id(ctl, "t") if tid is None else tid
    before = journal(ctl).end_offset
    result = ctl.alter_partition(broker, tid, index, leader_epoch, isr, partition_epoch)
    assert result.error_code == code and result.message and not result.records
    assert journal(ctl).end_offset == before


def test_alter_partition_fences_stale_epochs_and_ineligible_replicas():
    ctl = start()
    ctl.create_topic("t", assignments=[[1, 2, 3]])
    tid = topic_id(ctl, "t")
    assert ctl.alter_partition(1, tid, 0, 0, [1, 2], 0).ok  # partition epoch 1
    stale = ctl.alter_partition(1, tid, 0, 0, [1], 0)
    assert stale.error_code == codes.INVALID_UPDATE_VERSION
    heartbeat_all(ctl, [2, 3], TIMEOUT)
    ctl.tick(TIMEOUT)  # 1 fenced: 2 leads at leader epoch 1
    old_leader = ctl.alter_partition(1, tid, 0, 0, [1, 2], 2)
    assert old_leader.error_code == codes.FENCED_LEADER_EPOCH
    p = part(ctl, "t", 0)
    ineligible = ctl.alter_partition(2, tid, 0, p.leader_epoch, [1, 2], p.partition_epoch)
    assert ineligible.error_code == codes.INELIGIBLE_REPLICA


# -- topics ------------------------------------------------------------------------------------


def test_placement_spreads_leaders_and_followers_evenly():
    ctl = start()
    topic = ctl.create_topic("t", 6, 3).value
    replicas = [p.replicas for p in topic.partitions]
    assert Counter(r[0] for r in replicas) == {1: 2, 2: 2, 3: 2}
    assert all(sorted(r) == [1, 2, 3] for r in replicas)
    assert len({r[1] for r in replicas if r[0] == 1}) == 2  # the shift varies followers
    assert all(p.leader == p.replicas[0] and p.isr == p.replicas for p in topic.partitions)


def test_placement_matches_kafkas_admin_utils():
    # AdminUtils.assignReplicasToBrokers, 5 brokers, 10 partitions, RF 3, start index 0.
    expected = [
        (0, 1, 2), (1, 2, 3), (2, 3, 4), (3, 4, 0), (4, 0, 1),
        (0, 2, 3), (1, 3, 4), (2, 4, 0), (3, 0, 1), (4, 1, 2),
    ]  # fmt: skip
    assert assign_replicas([0, 1, 2, 3, 4], 10, 3, 0) == expected


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"name": ""}, codes.INVALID_TOPIC_EXCEPTION),
        ({"name": "bad name"}, codes.INVALID_TOPIC_EXCEPTION),
        ({"name": "a" * 250}, codes.INVALID_TOPIC_EXCEPTION),
        ({"name": "exist_s"}, codes.INVALID_TOPIC_EXCEPTION),  # collides with "exist.s"
        ({"name": "exist.s"}, codes.TOPIC_ALREADY_EXISTS),
        ({"num_partitions": 0}, codes.INVALID_PARTITIONS),
        ({"num_partitions": 10_001}, codes.INVALID_PARTITIONS),
        ({"replication_factor": 4}, codes.INVALID_REPLICATION_FACTOR),
        ({"replication_factor": 0}, codes.INVALID_REPLICATION_FACTOR),
        (dict(MANUAL, assignments=[[1, 1]]), codes.INVALID_REPLICA_ASSIGNMENT),
        (dict(MANUAL, assignments=[[1, 9]]), codes.INVALID_REPLICA_ASSIGNMENT),
        (dict(MANUAL, assignments=[[1, 2], [3]]), codes.INVALID_REPLICA_ASSIGNMENT),
        (dict(MANUAL, assignments=[[]]), codes.INVALID_REPLICA_ASSIGNMENT),
        ({"assignments": [[1]], "num_partitions": 1}, codes.INVALID_REQUEST),
        ({"configs": {"nope": "1"}}, codes.INVALID_CONFIG),
        ({"configs": {"retention.ms": "soon"}}, codes.INVALID_CONFIG),
        ({"configs": {UNCLEAN: "maybe"}}, codes.INVALID_CONFIG),
    ],
)
def test_bad_creates_are_refused_with_kafkas_codes_and_change_nothing(kwargs, code):
    ctl = start()
    assert ctl.create_topic("exist.s", 1, 1).ok
    before = (ctl.image, journal(ctl).end_offset)
    result = ctl.create_topic(**{"name": "fresh", "num_partitions": 3,
                                 "replication_factor": 2, **kwargs})  # fmt: skip
    assert result.error_code == code, result.message
    assert result.message and "\n" not in result.message
    assert (ctl.image, journal(ctl).end_offset) == before


def test_replication_factor_counts_only_unfenced_brokers():
    ctl = start()
    heartbeat_all(ctl, [1, 2], TIMEOUT)
    ctl.tick(TIMEOUT)
    result = ctl.create_topic("t", 1, 3)
    assert result.error_code == codes.INVALID_REPLICATION_FACTOR
    assert "2 live broker(s)" in result.message
    # A manual assignment may name a fenced broker; it starts outside the ISR.
    result = ctl.create_topic("u", assignments=[[3, 1, 2]])
    assert result.ok
    p = part(ctl, "u", 0)
    assert (p.replicas, p.isr, p.leader) == ((3, 1, 2), (1, 2), 1)
    assert ctl.create_topic("v", assignments=[[3]]).error_code == codes.INVALID_REPLICA_ASSIGNMENT


def test_validate_only_checks_and_describes_but_writes_nothing():
    ctl = start()
    end = journal(ctl).end_offset
    result = ctl.create_topic("t", 3, 2, validate_only=True)
    assert result.ok and result.records == () and len(result.value.partitions) == 3
    assert "t" not in ctl.image.topics and journal(ctl).end_offset == end


def test_create_partitions_grows_a_topic_and_refuses_shrinking():
    ctl = start()
    ctl.create_topic("t", 3, 2)
    result = ctl.create_partitions("t", 6)
    assert result.ok and len(result.records) == 3
    topic = ctl.image.topics["t"]
    assert Counter(p.replicas[0] for p in topic.partitions) == {1: 2, 2: 2, 3: 2}
    assert ctl.create_partitions("t", 6).error_code == codes.INVALID_PARTITIONS
    assert ctl.create_partitions("t", 2).error_code == codes.INVALID_PARTITIONS
    assert ctl.create_partitions("nope", 9).error_code == codes.UNKNOWN_TOPIC_OR_PARTITION
    bad = ctl.create_partitions("t", 7, assignments=[[1]])  # width 1, topic has 2
    assert bad.error_code == codes.INVALID_REPLICA_ASSIGNMENT
    assert ctl.create_partitions("t", 7, assignments=[[3, 1]]).value.partitions[6].leader == 3


def test_delete_topic_and_alter_configs():
    ctl = start()
    ctl.create_topic("t", 1, 1)
    tid = topic_id(ctl, "t")
    assert ctl.alter_configs("t", {"retention.ms": " 5 "}).ok
    assert dict(ctl.image.topics["t"].configs) == {"retention.ms": "5"}
    assert ctl.alter_configs("t", {"bogus": "1"}).error_code == codes.INVALID_CONFIG
    assert ctl.alter_configs("x", {}).error_code == codes.UNKNOWN_TOPIC_OR_PARTITION
    assert ctl.delete_topic("t").value == tid
    assert "t" not in ctl.image.topics and tid not in ctl.image.topic_names
    assert ctl.delete_topic("t").error_code == codes.UNKNOWN_TOPIC_OR_PARTITION
    assert ctl.create_topic("t", 1, 1).value.topic_id != tid  # ids are never reused


# -- producer ids and events -------------------------------------------------------------------


def test_producer_id_blocks_are_disjoint_and_survive_a_restart(tmp_path):
    quorum = start_quorum(tmp_path)
    ctl = quorum.controller()
    assert ctl.allocate_producer_ids(1).value == (0, PRODUCER_ID_BLOCK_SIZE)
    assert ctl.allocate_producer_ids(2).value == (PRODUCER_ID_BLOCK_SIZE, PRODUCER_ID_BLOCK_SIZE)
    assert ctl.allocate_producer_ids(9).error_code == codes.BROKER_ID_NOT_REGISTERED
    committed(quorum)
    quorum = restart(quorum, 0)
    assert quorum.controller().allocate_producer_ids(3).value[0] == 2 * PRODUCER_ID_BLOCK_SIZE
    quorum.node.log.close()


def test_committed_events_are_bounded_and_carry_decision_time_and_offsets(tmp_path):
    quorum = start_quorum(tmp_path, brokers=1)  # offset 0: the epoch-start batch
    committed(quorum)
    assert quorum.events[0].to_dict() == {
        "now_ms": 0, "offset": 1, "kind": "broker_registered",
        "text": "broker 1 registered at 127.0.0.1:9091",
    }  # fmt: skip
    for i in range(EVENTS_MAX + 10):
        quorum.poll(i)  # a batch's time is its append's, on the quorum's clock
        quorum.controller().allocate_producer_ids(1, now_ms=i)
    committed(quorum)
    assert len(quorum.events) == EVENTS_MAX
    assert quorum.events[-1].now_ms == EVENTS_MAX + 9
    assert quorum.events[-1].offset == quorum.node.log.end_offset - 1
    quorum = restart(quorum, EVENTS_MAX + 20)  # refolded from the log, with the same times
    assert quorum.events[-1].now_ms == EVENTS_MAX + 9
    assert quorum.events[-1].offset == quorum.node.log.end_offset - 2  # before its epoch start
    quorum.node.log.close()
