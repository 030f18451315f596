"""The broker core without any shell: what one ``tick`` carries out, and what it sends.

The asyncio shell once ran the replication timer as ``replicas.tick(now)`` and dropped the
actions it returned, so a leader never asked to shrink its ISR and an acks=all produce never
timed out (only the controller fencing the follower's whole broker unblocked it). The core's
``tick`` is now the one both shells call; these tests pin what it must do.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from support.recording_shell import RecordingShell

from pylog_nb.broker.errors import REQUEST_TIMED_OUT
from pylog_nb.broker.metadata.image import ClusterImage, PartitionImage, TopicImage
from pylog_nb.broker.records.batch import encode_batch
from pylog_nb.broker.server.alter_partition_manager import AlterPartitionRequest
from pylog_nb.broker.server.core import (
    TICK_MS,
    BrokerCore,
    ControllerCall,
    HeartbeatAnswer,
    Registered,
)
from pylog_nb.broker.server.lifecycle_manager import SendHeartbeat, SendRegistration
from pylog_nb.broker.types import ACKS_ALL

TOPIC, TOPIC_ID = "t", "AAAAAAAAAAAAAAAAAAAAAA"
LAG_MS = 1_000
SERVING_WITHIN_MS = 5_000


def leading_image(isr: tuple[int, ...]) -> ClusterImage:
    state = PartitionImage((1, 2), isr, 1, 0, 0)
    topic = TopicImage(TOPIC, TOPIC_ID, (state,), MappingProxyType({}))
    return replace(ClusterImage.empty(), topics=MappingProxyType({TOPIC: topic}),
                   topic_names=MappingProxyType({TOPIC_ID: TOPIC}))


def serving_leader(tmp_path, clock: list[int]) -> tuple[BrokerCore, RecordingShell]:
    """Broker 1, registered and unfenced, leading ``t-0`` with ISR {1, 2}; the clock is then
    at 0 again for the test (the lease is long enough)."""
    shell = RecordingShell()
    core = BrokerCore(1, tmp_path, shell, now_ms=lambda: clock[0], incarnation_id="i",
                      replica_lag_time_max_ms=LAG_MS)
    while not core.lifecycle.serving(clock[0]):
        assert clock[0] < SERVING_WITHIN_MS, core.lifecycle.snapshot()
        core.poll(clock[0])
        for outbound in shell.sent:
            if isinstance(outbound.request, SendRegistration):
                core.on_answer(outbound, Registered(metadata_end_offset=0))
            elif isinstance(outbound.request, SendHeartbeat):
                core.on_answer(outbound, HeartbeatAnswer(fenced=False, metadata_end_offset=0))
        shell.sent.clear()
        clock[0] += TICK_MS
    core.publish(leading_image(isr=(1, 2)))
    shell.sent.clear()
    return core, shell


def test_a_follower_silent_past_the_lag_time_is_proposed_out_of_the_isr(tmp_path) -> None:
    clock = [0]
    core, shell = serving_leader(tmp_path, clock)
    clock[0] += LAG_MS + 1
    core.tick(clock[0])
    changes = [o.request for o in shell.sent
               if isinstance(o, ControllerCall) and isinstance(o.request, AlterPartitionRequest)]
    assert [c.change.new_isr for c in changes] == [(1,)]
    core.close()


def test_an_acks_all_produce_times_out_on_the_tick_after_its_deadline(tmp_path) -> None:
    clock = [0]
    core, shell = serving_leader(tmp_path, clock)
    result, produce_id = core.append(TOPIC, 0, encode_batch([(None, b"v", [], 0)]), ACKS_ALL,
                                     timeout_ms=100)
    assert result.error_code == 0 and produce_id is not None
    done = core.watch([produce_id])
    assert not done.done  # follower 2 has not fetched it
    clock[0] += 101
    core.tick(clock[0])
    assert done.done and done.result().error_codes == {produce_id: REQUEST_TIMED_OUT}
    core.close()
