"""A group's configs (KIP-848 / KIP-932 group configs) through confluent-kafka's AdminClient.

Kafka keeps a few settings per group rather than per broker: where a share group starts reading
a partition it never read (``share.auto.offset.reset``), how long its records stay locked to the
consumer that got them (``share.record.lock.duration.ms``), whether it sees aborted transactions
(``share.isolation.level``), and the session timeout and heartbeat interval of consumer and share
groups. ``kafka-configs.sh --entity-type groups`` sets them with IncrementalAlterConfigs on
resource type GROUP; ``alter_group_configs`` does the same, so it works against any Kafka 4
cluster as against a ``LocalCluster``. A group need not exist yet to have configs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pandas as pd
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from ..cluster import LocalCluster
from .config import client_config
from .io import LogClientError

RESULT_TIMEOUT_S = 15.0  # an answer of the controller's decision, through the broker
CONFIG_COLUMNS = ["group", "name", "value", "source"]

Source = LocalCluster | str


def group_configs_frame(source: Source, group_id: str) -> pd.DataFrame:
    """Every config of ``group_id``: its value and ``source`` (``group`` for an override,
    ``default`` for the broker's value)."""
    admin = _admin(source)
    (future,) = admin.describe_configs([ConfigResource(ResourceType.GROUP, group_id)]).values()
    entries = _result(future, f"describe the configs of group {group_id}")
    rows = [{"group": group_id, "name": name, "value": entry.value,
             "source": "group" if entry.source == ConfigSource.GROUP_CONFIG.value else "default"}
            for name, entry in sorted(entries.items())]
    return pd.DataFrame(rows, columns=CONFIG_COLUMNS)


def alter_group_configs(source: Source, group_id: str, set_configs: Mapping[str, str] = {},
                        delete: Iterable[str] = ()) -> None:
    """SET ``set_configs`` and DELETE (back to the broker's default) ``delete`` for
    ``group_id``; a bad name or value raises LogClientError with the broker's reason."""
    entries = [ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
               for name, value in set_configs.items()]
    entries += [ConfigEntry(name, None, incremental_operation=AlterConfigOpType.DELETE)
                for name in delete]
    if not entries:
        return
    admin = _admin(source)
    resource = ConfigResource(ResourceType.GROUP, group_id, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        _result(future, f"alter the configs of group {group_id}")


def _admin(source: Source) -> AdminClient:
    servers = source if isinstance(source, str) else source.bootstrap_servers
    return AdminClient(client_config(servers))


def _result(future, doing: str):
    try:
        return future.result(timeout=RESULT_TIMEOUT_S)
    except KafkaException as error:
        kafka_error = error.args[0]
        raise LogClientError(f"cannot {doing}: {kafka_error.name()}: {kafka_error.str()}") \
            from None
