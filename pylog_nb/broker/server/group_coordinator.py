"""The asyncio shell of the group coordinators: FindCoordinator and ``__consumer_offsets``.

Theory of operation: the coordinators themselves run in the broker core
(``group_runtime.GroupCoordinatorRuntime``: loading, ``__consumer_offsets`` writes, timers),
which the seeded simulation drives as well. What is left here needs the event loop:

- ``__consumer_offsets`` is an ordinary replicated topic, created through the active controller on
  the first FindCoordinator (RF = min(``offsets.topic.replication.factor``, live brokers)),
  however many FindCoordinators ask at once.
- JoinGroup, SyncGroup and OffsetCommit may wait (for other members, or for the append); their
  handlers run in the core and await the runtime's ``submit`` (``apis/groups.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import TOPIC_ALREADY_EXISTS, KafkaError
from ..group import GroupCoordinator, partition_for
from ..group.errors import COORDINATOR_NOT_AVAILABLE, NONE
from ..metadata.image import ClusterImage
from ..metadata.topics import OFFSETS_TOPIC
from .config import BrokerConfig
from .group_runtime import GroupCoordinatorRuntime

if TYPE_CHECKING:
    from .controller_admin import ControllerAdmin

log = logging.getLogger("pylog.broker")

# Kafka's: compacted, so a group's last commit for each partition stays and the rest go (and a
# new coordinator replays only that).
OFFSETS_TOPIC_POLICY = {"cleanup.policy": "compact"}


class GroupService:
    """The group coordinators of the broker core, as the request handlers use them."""

    def __init__(self, config: BrokerConfig, runtime: GroupCoordinatorRuntime, *,
                 metadata: Callable[[], ClusterImage], endpoints: Callable[[], list[dict]],
                 live_broker_ids: Callable[[], list[int]],
                 admin: Callable[[], ControllerAdmin]) -> None:
        self.config = config
        self.runtime = runtime
        self.metadata = metadata
        self.endpoints = endpoints
        self.live_broker_ids = live_broker_ids
        self.admin = admin
        self._creating: asyncio.Future | None = None

    @property
    def cores(self) -> dict[int, GroupCoordinator]:
        return self.runtime.cores

    # == FindCoordinator =========================================================================

    async def find(self, group_id: str) -> tuple[int, dict | None]:
        """FindCoordinator: (error code, broker endpoint) for ``group_id``."""
        if self.runtime.partition_count() is None:
            await self._ensure_topic()
        topic = self.metadata().topics.get(OFFSETS_TOPIC)
        if topic is None:
            return COORDINATOR_NOT_AVAILABLE, None
        leader = topic.partitions[partition_for(group_id, len(topic.partitions))].leader
        if leader not in self.live_broker_ids():
            return COORDINATOR_NOT_AVAILABLE, None
        endpoint = next((b for b in self.endpoints() if b["node_id"] == leader), None)
        if endpoint is None:
            return COORDINATOR_NOT_AVAILABLE, None
        return NONE, endpoint

    async def _ensure_topic(self) -> None:
        """Create ``__consumer_offsets`` once, however many FindCoordinators ask at once."""
        if self._creating is None or self._creating.done():
            self._creating = asyncio.ensure_future(self._create_topic())
        await asyncio.shield(self._creating)

    async def _create_topic(self) -> None:
        config = self.config
        replication_factor = min(
            config.offsets_topic_replication_factor, len(self.live_broker_ids())
        )
        try:
            await self.admin().create_topic(
                OFFSETS_TOPIC,
                num_partitions=config.offsets_topic_num_partitions,
                replication_factor=replication_factor,
                configs={**OFFSETS_TOPIC_POLICY,
                         "segment.bytes": str(config.offsets_topic_segment_bytes)},
            )
            log.info("created %s with %d partitions, RF %d", OFFSETS_TOPIC,
                     config.offsets_topic_num_partitions, replication_factor)
        except KafkaError as error:
            if error.error_code != TOPIC_ALREADY_EXISTS:
                log.warning("cannot create %s: %s", OFFSETS_TOPIC, error)

    def close(self) -> None:
        if self._creating is not None:
            self._creating.cancel()
