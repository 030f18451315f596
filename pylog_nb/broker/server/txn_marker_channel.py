"""The coordinator side of WriteTxnMarkers: markers to each partition's current leader.

Theory of operation (Kafka's TransactionMarkerChannelManager):

- The transaction coordinator asks for a COMMIT or ABORT marker on every partition of a
  transaction. ``txn_runtime.MarkerSend`` (sans-IO, shared with the simulation) groups them by
  their leader in the current metadata image; the ones this broker leads are written directly
  (the partition-leader side, ``write_local``), the others as one WriteTxnMarkers request per
  leader.
- Each leader gets one connection of our own, one request at a time (a marker is small, and a
  lab's transactions are few); a connection that fails is dropped and opened again next time.
- Every partition gets an outcome: the leader's error code; NOT_LEADER_OR_FOLLOWER while a
  partition has no live leader; NETWORK_EXCEPTION when the leader cannot be reached; NONE for a
  partition whose topic was deleted (nothing is left to mark, as Kafka answers). The core
  re-sends the failed ones on its next ``tick``, to whatever leader the image names then.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable

from .. import errors
from ..protocol.versions import WRITE_TXN_MARKERS_KEY
from ..txn import WriteTxnMarkers
from ..types import TopicPartition
from .broker_channel import BrokerChannel, BrokerChannels
from .ports import ClusterView
from .txn_runtime import MarkerSend

log = logging.getLogger("pylog.broker")

# (producer id, producer epoch, coordinator epoch, committed, partitions) -> code per partition
WriteLocal = Callable[[int, int, int, bool, list[TopicPartition]],
                      Awaitable[dict[TopicPartition, int]]]

WRITE_TXN_MARKERS_VERSION = 1  # the oldest Kafka 4 accepts; v2 adds only transaction_version
# The leader appends with acks=all and a 30 s timeout: it answers before this runs out.
MARKER_RESPONSE_TIMEOUT_S = 35.0


class TransactionMarkerChannelManager:
    """Sends a transaction's markers and collects one error code per partition."""

    def __init__(self, node: ClusterView, write_local: WriteLocal) -> None:
        self.node = node
        self.write_local = write_local
        self._channels = BrokerChannels(node, _MarkerChannel,
                                        f"txn-coordinator-{node.broker_id}")

    async def send(self, action: WriteTxnMarkers) -> dict[TopicPartition, int]:
        """Write ``action``'s markers through each partition's current leader (``MarkerSend``
        plans who gets what and gives every partition an outcome)."""
        send = MarkerSend.plan(action, self.node.image)
        leaders = list(send.by_leader.items())
        answers = await asyncio.gather(*(self._send_to(leader, action, partitions)
                                         for leader, partitions in leaders))
        for (leader, _partitions), answered in zip(leaders, answers, strict=True):
            send.answered(leader, answered)
        assert send.done, send
        return send.results

    async def _send_to(self, leader: int, action: WriteTxnMarkers,
                       partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        if leader == self.node.broker_id:
            return await self.write_local(
                action.producer_id, action.producer_epoch, action.coordinator_epoch,
                action.committed, partitions)
        if self.node.isolated:  # fault injection: peers are unreachable
            return dict.fromkeys(partitions, errors.Errors.NETWORK_EXCEPTION)
        channel = self._channels.get(leader)
        if channel is None:
            return dict.fromkeys(partitions, errors.NOT_LEADER_OR_FOLLOWER)
        try:
            return await channel.write_markers(action, partitions)
        except Exception as error:  # noqa: BLE001 - every partition needs an outcome
            if isinstance(error, OSError | asyncio.IncompleteReadError | TimeoutError):
                log.info("WriteTxnMarkers to broker %d failed: %s", leader,
                         str(error) or type(error).__name__)
            else:
                log.exception("WriteTxnMarkers to broker %d failed", leader)
            return dict.fromkeys(partitions, errors.Errors.NETWORK_EXCEPTION)

    def close(self) -> None:
        self._channels.close()


class _MarkerChannel(BrokerChannel):
    """One connection to another broker for WriteTxnMarkers, one request at a time."""

    async def write_markers(self, action: WriteTxnMarkers, partitions: list[TopicPartition]
                            ) -> dict[TopicPartition, int]:
        topics: dict[str, list[int]] = defaultdict(list)
        for topic, index in partitions:
            topics[topic].append(index)
        body = {"markers": [{
            "producer_id": action.producer_id, "producer_epoch": action.producer_epoch,
            "transaction_result": action.committed, "coordinator_epoch": action.coordinator_epoch,
            "topics": [{"name": name, "partition_indexes": indexes}
                       for name, indexes in topics.items()],
        }]}
        response = await self.call(WRITE_TXN_MARKERS_KEY, WRITE_TXN_MARKERS_VERSION, body,
                                   MARKER_RESPONSE_TIMEOUT_S)
        # A partition the answer leaves out was not written: the core re-sends it.
        results = dict.fromkeys(partitions, int(errors.Errors.UNKNOWN_SERVER_ERROR))
        for marker in response.markers:
            for topic in marker.topics:
                for answer in topic.partitions:
                    if (topic.name, answer.partition_index) in results:
                        results[(topic.name, answer.partition_index)] = int(answer.error_code)
        return results
