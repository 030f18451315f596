"""MetadataFollower on a Raft metadata log: offsets count control batches, which are never sent."""

from __future__ import annotations

import pytest

from pylog_nb.broker.metadata.follower import FetchMetadata, MetadataFollower
from pylog_nb.broker.metadata.records import RegisterBroker, UnfenceBroker

REGISTER = RegisterBroker(broker_id=1, host="127.0.0.1", port=9092, incarnation_id="i")


def test_offsets_skip_control_batches_and_the_image_publishes_at_the_end():
    follower = MetadataFollower()
    assert follower.poll(0) == FetchMetadata(0)
    # Offset 0 is the leader's epoch-start control batch: the first record is at offset 1.
    assert not follower.on_records(0, [REGISTER], next_offset=2, end_offset=5)
    assert follower.next_offset == 2 and 1 in follower.image.brokers
    assert follower.poll(0) == FetchMetadata(2)
    assert follower.on_records(2, [UnfenceBroker(broker_id=1)], next_offset=5, end_offset=5)
    assert not follower.image.brokers[1].fenced


def test_an_answer_of_control_batches_only_moves_on_and_publishes_nothing_new():
    follower = MetadataFollower()
    follower.poll(0)
    assert not follower.on_records(0, [], next_offset=3, end_offset=3)
    assert follower.next_offset == 3
    assert follower.poll(0) == FetchMetadata(3)


def test_a_stale_answer_is_ignored_and_a_shortfall_is_refused():
    follower = MetadataFollower()
    follower.poll(0)
    follower.on_records(0, [REGISTER], next_offset=2, end_offset=2)
    follower.poll(0)
    assert not follower.on_records(0, [REGISTER], next_offset=2, end_offset=2)  # answered late
    assert follower.next_offset == 2
    follower.poll(0)
    with pytest.raises(AssertionError):  # more records than offsets: a broken answer
        follower.on_records(2, [REGISTER, REGISTER], next_offset=3, end_offset=3)
