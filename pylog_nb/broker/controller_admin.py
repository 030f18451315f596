"""Topic administration in a cluster: the same calls as TopicAdmin, decided by the controller.

Each method forwards to the controller and returns once this broker has applied the metadata
records the decision wrote, so the client's next Metadata request already sees the change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from . import errors
from .cluster_link import ClusterLink
from .controller.rpc import ControllerRpcError
from .metadata import PartitionState, TopicState
from .topics import DEFAULT_FROM_BROKER, AdminError, apply_incremental


class ControllerAdmin:
    def __init__(self, link: ClusterLink) -> None:
        self.link = link

    @property
    def topics(self) -> Mapping[str, TopicState]:
        return self.link.node.store.image.topics

    async def _call(self, method: str, **params) -> dict:
        try:
            return await self.link.call(method, **params)
        except ControllerRpcError as error:
            raise AdminError(error.error_code, str(error.message)) from None
        except (ConnectionError, TimeoutError) as error:
            reason = str(error) or f"no answer ({type(error).__name__})"
            raise AdminError(errors.REQUEST_TIMED_OUT,
                             f"no active controller answered: {reason}") from None

    async def create_topic(
        self,
        name: str,
        num_partitions: int = DEFAULT_FROM_BROKER,
        replication_factor: int = DEFAULT_FROM_BROKER,
        assignments: Sequence[Sequence[int]] = (),
        configs: Mapping[str, str | None] | None = None,
        validate_only: bool = False,
    ) -> TopicState:
        result = await self._call(
            "create_topic", name=name, num_partitions=num_partitions,
            replication_factor=replication_factor, assignments=[list(a) for a in assignments],
            configs=dict(configs or {}), validate_only=validate_only)
        return self.topics.get(name) or _topic_from(result)

    async def delete_topic(self, name: str) -> TopicState:
        topic = self.topics.get(name)
        await self._call("delete_topic", name=name)
        return topic or TopicState(name, "00000000-0000-0000-0000-000000000000", ())

    async def create_partitions(self, name: str, count: int, validate_only: bool = False) -> None:
        await self._call("create_partitions", name=name, count=count, validate_only=validate_only)

    async def alter_configs(
        self, name: str, configs: Mapping[str, str | None], validate_only: bool = False
    ) -> None:
        await self._call("alter_configs", name=name, configs=dict(configs),
                         validate_only=validate_only)

    async def incremental_alter_configs(
        self, name: str, changes: Sequence[tuple[str, int, str | None]], validate_only: bool = False
    ) -> None:
        topic = self.topics.get(name)
        if topic is None:
            raise AdminError(errors.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist")
        overrides = apply_incremental(topic.configs, changes)
        await self.alter_configs(name, overrides, validate_only)


def _topic_from(result: dict) -> TopicState:
    """A validate_only answer: the topic as it would be created."""
    partitions = tuple(
        PartitionState(tuple(p["replicas"]), p["leader"], p["leader_epoch"], tuple(p["isr"]),
                       p["partition_epoch"])
        for p in result.get("partitions", [])
    )
    return TopicState(result["name"], result["topic_id"], partitions, dict(result["configs"]))
