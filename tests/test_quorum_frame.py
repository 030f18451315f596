"""quorum_frame on a real quorum of three controller processes: a controller that stops answering
keeps what it last said, marked as last known, while the others move on; one never heard shows
nothing but its state."""

from __future__ import annotations

import time
import uuid

import pytest

from pylog_nb import LocalCluster
from pylog_nb.client import create_topic, quorum_frame
from pylog_nb.client.introspect import LAST_KNOWN_COLUMN, QUORUM_COLUMNS

FAILOVER_S = 30  # Raft elects within about 2 s; generous for a loaded test machine
POLL_S = 0.1
REMEMBERED = ["role", "epoch", "leader", "committed_offset"]


@pytest.fixture
def quorum(tmp_path):
    """One broker under three controllers."""
    with LocalCluster(brokers=1, controllers=3, data_dir=tmp_path) as running:
        yield running


def _wait_until(what: str, condition) -> None:
    deadline = time.monotonic() + FAILOVER_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(POLL_S)


def _new_active(cluster: LocalCluster, old: int) -> int:
    _wait_until("another controller to become active",
                lambda: cluster.active_controller() not in (None, old))
    active = cluster.active_controller()
    assert active is not None
    return active


def test_a_killed_controller_keeps_its_last_answer_marked_last_known_while_the_others_move_on(
        quorum):
    before = quorum_frame(quorum).set_index("controller")
    assert list(before.reset_index().columns) == QUORUM_COLUMNS  # all answer: no last_known
    old = quorum.kill_controller()  # the active one
    new = _new_active(quorum, old)
    create_topic(quorum.bootstrap_servers, f"t-{uuid.uuid4().hex[:8]}")  # a metadata record

    def moved_on():
        committed = quorum_frame(quorum).set_index("controller").committed_offset[new]
        return committed > before.committed_offset[old]

    _wait_until("the new active controller to commit past the killed one", moved_on)
    after = quorum_frame(quorum).set_index("controller")
    killed = after.loc[old]
    assert killed.state == "down" and not killed.active
    assert killed[LAST_KNOWN_COLUMN].startswith("as of "), killed[LAST_KNOWN_COLUMN]
    assert list(killed[REMEMBERED]) == list(before.loc[old, REMEMBERED])
    assert killed.role == "leader" and killed.epoch < after.epoch[new]
    assert set(after[LAST_KNOWN_COLUMN].drop(old)) == {""}  # the others answer now
    assert bool(after.active[new]) and after.role[new] == "leader"

    quorum.restart_controller(old)
    _wait_until(f"controller {old} to answer again",
                lambda: quorum_frame(quorum).set_index("controller").role[old] == "follower")
    back = quorum_frame(quorum).set_index("controller")
    assert LAST_KNOWN_COLUMN not in back.columns and back.leader[old] == new


def test_a_controller_never_heard_before_it_died_shows_only_its_state(quorum):
    standby = next(c for c in quorum.controllers if c != quorum.active_controller())
    quorum.kill_controller(standby)
    row = quorum_frame(quorum).set_index("controller").loc[standby]
    assert row.state == "down" and not row.active
    assert row[REMEMBERED].isna().all(), row
    assert LAST_KNOWN_COLUMN not in row.index
