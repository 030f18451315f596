"""The asyncio shell of the transaction coordinator: parked requests, markers, producer ids.

Theory of operation: the coordinator itself runs in the broker core
(``txn_runtime.TxnCoordinatorRuntime``: loading, ``__transaction_state`` writes, the
partition-leader side of markers, timers), which the seeded simulation can drive as well. What
is left here needs the event loop:

- ``__transaction_state`` is an ordinary compacted, replicated topic, created through the
  active controller on the first FindCoordinator for a transactional id (RF =
  min(``transaction.state.log.replication.factor``, live brokers)).
- The request handlers ask the runtime directly (``TxnCoordinatorRuntime.ask``, a ``Pending``
  they await); ``ask`` here is the same, for the leaders' verification of their partitions.
- ``WriteTxnMarkers`` actions go to the ``TransactionMarkerChannelManager``
  (``txn_marker_channel.py``), which writes through each partition's current leader; each
  partition's outcome goes back to the runtime (``on_markers_written``).
- Producer ids come in blocks from the controller (``node.allocate_producer_id`` is async): the
  runtime asks for a refill below its low mark (``refill_producer_ids``), and hears when it
  ends (``refill_ended``), so an InitProducerId waiting for the first ids goes on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from .. import errors
from ..metadata.topics import TRANSACTION_STATE_TOPIC
from ..txn import Action, TransactionCoordinator, WriteTxnMarkers
from ..types import TopicPartition
from .bridge import future_of
from .broker_channel import live_endpoint
from .pending import Pending
from .ports import TxnCoordinatorHost
from .tasks import BackgroundTasks
from .txn_marker_channel import TransactionMarkerChannelManager
from .txn_runtime import TxnAnswer, TxnCoordinatorRuntime

log = logging.getLogger("pylog.broker")

# Kafka's: compacted, so each id's latest state stays and a new coordinator replays only that.
TRANSACTION_STATE_POLICY = {"cleanup.policy": "compact"}


class TransactionService:
    """The transaction coordinator of the broker core, as the request handlers use it."""

    def __init__(self, node: TxnCoordinatorHost, runtime: TxnCoordinatorRuntime) -> None:
        self.node = node
        self.runtime = runtime
        self._tasks = BackgroundTasks(log, "transaction coordinator")
        self._creating: asyncio.Future | None = None
        self._refilling: asyncio.Future | None = None
        self.markers = TransactionMarkerChannelManager(node, self.write_markers)

    @property
    def core(self) -> TransactionCoordinator:
        return self.runtime.core

    # == FindCoordinator =========================================================================

    async def find(self, transactional_id: str) -> tuple[int, dict | None]:
        """FindCoordinator key type 1: (error code, broker endpoint) for ``transactional_id``."""
        node = self.node
        if TRANSACTION_STATE_TOPIC not in node.image.topics:
            await self._ensure_topic()
        if not transactional_id:
            return errors.Errors.INVALID_REQUEST, None
        topic = node.image.topics.get(TRANSACTION_STATE_TOPIC)
        if topic is None or not self.runtime.partition_count_matches(len(topic.partitions)):
            return errors.Errors.COORDINATOR_NOT_AVAILABLE, None
        leader = topic.partitions[self.core.partition_for(transactional_id)].leader
        endpoint = live_endpoint(self.node, leader)
        if endpoint is None:
            return errors.Errors.COORDINATOR_NOT_AVAILABLE, None
        return errors.NONE, endpoint

    async def _ensure_topic(self) -> None:
        """Create ``__transaction_state`` once, however many FindCoordinators ask at once."""
        if self._creating is None or self._creating.done():
            self._creating = asyncio.ensure_future(self._create_topic())
        await asyncio.shield(self._creating)

    async def _create_topic(self) -> None:
        config = self.node.config
        replication_factor = min(config.transaction_state_replication_factor,
                                 len(self.node.live_broker_ids()))
        try:
            await self.node.topic_admin().create_topic(
                TRANSACTION_STATE_TOPIC,
                num_partitions=config.transaction_state_num_partitions,
                replication_factor=replication_factor,
                configs={**TRANSACTION_STATE_POLICY,
                         "segment.bytes": str(config.transaction_state_segment_bytes)},
            )
            log.info("created %s with %d partitions, RF %d", TRANSACTION_STATE_TOPIC,
                     config.transaction_state_num_partitions, replication_factor)
        except errors.KafkaError as error:
            if error.error_code != errors.TOPIC_ALREADY_EXISTS:
                log.warning("cannot create %s: %s", TRANSACTION_STATE_TOPIC, error)

    # == producer ids ============================================================================

    def refill_producer_ids(self) -> None:
        """The runtime's port: fetch ids from the controller in the background."""
        if self._refilling is None or self._refilling.done():
            self._refilling = asyncio.ensure_future(self._refill())

    async def _refill(self) -> None:
        try:
            while self.runtime.wants_producer_ids():
                self.runtime.add_producer_ids([await self.node.allocate_producer_id()])
        except Exception as error:  # noqa: BLE001 - the core answers retriable meanwhile
            log.warning("cannot allocate producer ids: %s", error)
        finally:
            self.runtime.refill_ended()

    # == requests ===============================================================================

    def ask(self, call: Callable[[int], list[Action]]) -> Pending[TxnAnswer | None]:
        """Run ``call(request_id)`` on the core; its answer (None: the coordinator is closing)."""
        return self.runtime.ask(call)

    # == markers =================================================================================

    def send_markers(self, action: WriteTxnMarkers) -> None:
        """The runtime's port: write the markers through each partition's current leader."""
        self._tasks.spawn(self._send_markers(action))

    async def _send_markers(self, action: WriteTxnMarkers) -> None:
        self.runtime.on_markers_written(action, await self.markers.send(action))

    async def write_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                            committed: bool, partitions: list[TopicPartition]
                            ) -> dict[TopicPartition, int]:
        """The partition-leader side of this broker's own markers."""
        return await future_of(self.runtime.write_markers(
            producer_id, producer_epoch, coordinator_epoch, committed, partitions))

    def close(self) -> None:
        self._tasks.cancel_all()
        self.markers.close()
        if self._refilling is not None:
            self._refilling.cancel()
