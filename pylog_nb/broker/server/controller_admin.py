"""Topic, group-config and security administration: every change is decided by the active
controller.

Each method forwards to the controller and returns once this broker has applied the metadata
records the decision wrote, so the client's next Metadata request already sees the change. A
refusal raises ``AdminError`` carrying the Kafka error code and a one-line message, so the admin
handlers only translate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from .. import errors
from ..controller.rpc import ControllerRpcError
from ..metadata import group_config, topic_config
from ..metadata.image import PartitionImage, TopicImage
from .ports import ControllerLink

NO_TOPIC_ID = "00000000-0000-0000-0000-000000000000"  # a topic deleted before we saw it
DEFAULT_FROM_BROKER = -1  # num_partitions / replication_factor of -1 mean "broker default"
# IncrementalAlterConfigs operations
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


class AdminError(errors.KafkaError):
    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


class ControllerAdmin:
    def __init__(self, link: ControllerLink) -> None:
        self.link = link

    @property
    def topics(self) -> Mapping[str, TopicImage]:
        return self.link.node.image.topics

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
    ) -> TopicImage:
        """Create a topic; without ``assignments``, a count or factor of -1 is this broker's
        num.partitions / default.replication.factor (as in Kafka, for CreateTopics and for
        auto-created topics alike), sent to the controller as a number."""
        if not assignments:
            config = self.link.node.config
            if num_partitions == DEFAULT_FROM_BROKER:
                num_partitions = config.num_partitions
            if replication_factor == DEFAULT_FROM_BROKER:
                replication_factor = config.default_replication_factor
        result = await self._call(
            "create_topic", name=name, num_partitions=num_partitions,
            replication_factor=replication_factor, assignments=[list(a) for a in assignments],
            configs=dict(configs or {}), validate_only=validate_only)
        return self.topics.get(name) or _topic_from(result)

    async def delete_topic(self, name: str) -> TopicImage:
        topic = self.topics.get(name)
        await self._call("delete_topic", name=name)
        return topic or TopicImage(name, NO_TOPIC_ID, (), MappingProxyType({}))

    async def create_partitions(
        self,
        name: str,
        count: int,
        assignments: Sequence[Sequence[int]] = (),
        validate_only: bool = False,
    ) -> None:
        """Grow ``name`` to ``count`` partitions; ``assignments`` (one replica list per new
        partition, the preferred leader first) or none for the controller's placement."""
        await self._call("create_partitions", name=name, count=count,
                         assignments=[list(a) for a in assignments], validate_only=validate_only)

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


    def group_configs(self, group: str) -> Mapping[str, str]:
        """A group's config overrides, as this broker's metadata has them."""
        return self.link.node.image.group_configs.get(group, MappingProxyType({}))

    async def incremental_alter_group_configs(
        self, group: str, changes: Sequence[tuple[str, int, str | None]],
        defaults: Mapping[str, str], validate_only: bool = False
    ) -> None:
        """SET / DELETE a group's configs (resource type GROUP). The merged overrides are
        checked against this broker's ``defaults`` (a session timeout above its heartbeat
        interval) before the controller checks each name and value and decides."""
        overrides = apply_group_incremental(self.group_configs(group), changes)
        try:
            group_config.validate(overrides, defaults)
        except group_config.InvalidGroupConfigError as error:
            raise AdminError(errors.INVALID_CONFIG, str(error)) from None
        await self._call("alter_group_configs", group=group, configs=overrides,
                         validate_only=validate_only)

    # -- security metadata (issue 23): the controller's wire shapes, each item its own result --

    async def create_acls(self, creations: Sequence[Mapping[str, object]]) -> list[dict]:
        """[{error_code, error_message}] per creation ({resource_type, resource_name,
        pattern_type, principal, host, operation, permission_type}: Kafka's codes)."""
        return (await self._call("create_acls", creations=list(creations)))["results"]

    async def delete_acls(self, filters: Sequence[Mapping[str, object]]) -> list[dict]:
        """[{error_code, error_message, matching_acls}] per filter."""
        return (await self._call("delete_acls", filters=list(filters)))["filter_results"]

    async def alter_user_scram_credentials(
        self, deletions: Sequence[Mapping[str, object]],
        upsertions: Sequence[Mapping[str, object]]) -> list[dict]:
        """[{user, error_code, error_message}]; salts and salted passwords in base64."""
        return (await self._call("alter_user_scram_credentials", deletions=list(deletions),
                                 upsertions=list(upsertions)))["results"]

    async def describe_user_scram_credentials(self, users: Sequence[str] | None) -> list[dict]:
        """[{user, error_code, error_message, credential_infos: [{mechanism, iterations}]}]."""
        wanted = None if users is None else list(users)
        return (await self._call("describe_user_scram_credentials", users=wanted))["results"]

    async def alter_client_quotas(self, entries: Sequence[Mapping[str, object]],
                                  validate_only: bool) -> list[dict]:
        """[{entity, error_code, error_message}] per entry ({entity: [[type, name]], ops})."""
        return (await self._call("alter_client_quotas", entries=list(entries),
                                 validate_only=validate_only))["entries"]

    async def describe_client_quotas(self, components: Sequence[Mapping[str, object]],
                                     strict: bool) -> list[dict]:
        """[{entity: [[type, name]], values: {key: value}}]."""
        return (await self._call("describe_client_quotas", components=list(components),
                                 strict=strict))["entries"]


def apply_group_incremental(
    configs: Mapping[str, str], changes: Sequence[tuple[str, int, str | None]]
) -> dict[str, str | None]:
    """IncrementalAlterConfigs on a group's overrides: SET and DELETE (no group config is a
    list, so APPEND and SUBTRACT are refused, as Kafka refuses them)."""
    overrides: dict[str, str | None] = dict(configs)
    for key, operation, value in changes:
        if key not in group_config.DEFINITIONS:
            raise AdminError(errors.INVALID_CONFIG, f"Unknown group config name: {key}")
        if operation == OP_SET:
            overrides[key] = value
        elif operation == OP_DELETE:
            overrides.pop(key, None)
        elif operation in (OP_APPEND, OP_SUBTRACT):
            raise AdminError(errors.INVALID_CONFIG,
                             f"Config {key} is not a list: it cannot be appended to or "
                             "subtracted from")
        else:
            raise AdminError(
                errors.INVALID_REQUEST, f"Unknown config operation {operation} for key {key}")
    return overrides


def _topic_from(result: dict) -> TopicImage:
    """A validate_only answer: the topic as it would be created."""
    partitions = tuple(
        PartitionImage(tuple(p["replicas"]), tuple(p["isr"]), p["leader"], p["leader_epoch"],
                       p["partition_epoch"])
        for p in result.get("partitions", [])
    )
    return TopicImage(result["name"], result["topic_id"], partitions,
                      MappingProxyType(dict(result["configs"])))


def apply_incremental(
    configs: Mapping[str, str], changes: Sequence[tuple[str, int, str | None]]
) -> dict[str, str | None]:
    """IncrementalAlterConfigs on a topic's overrides, as Kafka's controller does it: SET, DELETE,
    and APPEND / SUBTRACT of comma-separated elements on list-typed configs (starting from the
    override, else the default; appending a present element or subtracting an absent one changes
    nothing). The result is validated afterwards like any SET."""
    overrides: dict[str, str | None] = dict(configs)
    for key, operation, value in changes:
        if operation == OP_SET:
            overrides[key] = value
        elif operation == OP_DELETE:
            if key not in topic_config.DEFINITIONS:
                raise AdminError(errors.INVALID_CONFIG, f"Unknown topic config '{key}'")
            overrides.pop(key, None)
        elif operation in (OP_APPEND, OP_SUBTRACT):
            overrides[key] = _apply_list_op(overrides, key, operation, value)
        else:
            raise AdminError(
                errors.INVALID_REQUEST, f"Unknown config operation {operation} for key {key}"
            )
    return overrides


def _apply_list_op(
    overrides: Mapping[str, str | None], key: str, operation: int, value: str | None
) -> str:
    name = "APPEND" if operation == OP_APPEND else "SUBTRACT"
    definition = topic_config.DEFINITIONS.get(key)
    if definition is None:
        raise AdminError(errors.INVALID_CONFIG, f"Unknown topic config '{key}'")
    if not definition.is_list:
        raise AdminError(
            errors.INVALID_CONFIG, f"Can't {name} to key {key} because its type is not LIST."
        )
    if value is None:
        raise AdminError(errors.INVALID_CONFIG, f"Can't {name} a null value to key {key}")
    current = overrides.get(key)
    elements = [e for e in (definition.default if current is None else current).split(",") if e]
    for element in value.split(","):
        if operation == OP_APPEND and element not in elements:
            elements.append(element)
        elif operation == OP_SUBTRACT and element in elements:
            elements.remove(element)
    return ",".join(elements)
