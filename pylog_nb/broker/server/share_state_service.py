"""The asyncio shell of the share coordinators: ``__share_group_state`` and inter-broker calls.

Theory of operation: the share coordinators and the partition leaders' persister run in the
broker core (``share_runtime.py``). What needs the event loop is here:

- ``__share_group_state`` is an ordinary compacted, replicated topic (Kafka's
  ``share.coordinator.state.topic.*``), created through the active controller the first time a
  partition leader needs a share coordinator, however many ask at once.
- A persister call to a coordinator on another broker goes through one connection of our own
  per peer (``broker_channel.py``), one request at a time.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ..errors import TOPIC_ALREADY_EXISTS, KafkaError
from ..metadata.topics import SHARE_GROUP_STATE_TOPIC
from .broker_channel import BrokerChannel, BrokerChannels
from .ports import ShareStateHost

log = logging.getLogger("pylog.broker")

SHARE_STATE_TOPIC_PARTITIONS = 10  # Kafka: 50; ten spread coordinators over a lab's brokers
SHARE_STATE_TOPIC_REPLICATION_FACTOR = 3  # capped at the live brokers, as Kafka's
SHARE_STATE_TOPIC_CONFIGS = {"cleanup.policy": "compact", "min.insync.replicas": "1"}
# The coordinator appends with acks=all and a 5 s timeout: it answers before this runs out.
SHARE_STATE_CALL_TIMEOUT_S = 10.0


class ShareStateService:
    """Creates ``__share_group_state`` and carries the persister's calls to other brokers."""

    def __init__(self, node: ShareStateHost) -> None:
        self.node = node
        self._channels = BrokerChannels(node, BrokerChannel, f"broker-{node.broker_id}-share")
        self._creating: asyncio.Task | None = None

    async def call(self, broker_id: int, api_key: int, version: int, body: dict) -> Any:
        channel = self._channels.get(broker_id)
        if channel is None:
            raise ConnectionError(f"broker {broker_id} is not live")
        return await channel.call(api_key, version, body, SHARE_STATE_CALL_TIMEOUT_S)

    def ensure_topic(self) -> None:
        """Start creating ``__share_group_state`` unless that is under way or done."""
        if SHARE_GROUP_STATE_TOPIC in self.node.image.topics:
            return
        if self._creating is None or self._creating.done():
            self._creating = asyncio.ensure_future(self._create())

    async def _create(self) -> None:
        replication_factor = min(SHARE_STATE_TOPIC_REPLICATION_FACTOR,
                                 len(self.node.live_broker_ids()))
        try:
            await self.node.topic_admin().create_topic(
                SHARE_GROUP_STATE_TOPIC, num_partitions=SHARE_STATE_TOPIC_PARTITIONS,
                replication_factor=replication_factor, configs=dict(SHARE_STATE_TOPIC_CONFIGS))
            log.info("created %s with %d partitions, RF %d", SHARE_GROUP_STATE_TOPIC,
                     SHARE_STATE_TOPIC_PARTITIONS, replication_factor)
        except KafkaError as error:
            if error.error_code != TOPIC_ALREADY_EXISTS:
                log.warning("cannot create %s: %s", SHARE_GROUP_STATE_TOPIC, error)

    def close(self) -> None:
        if self._creating is not None:
            self._creating.cancel()
        self._channels.close()
