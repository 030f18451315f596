"""Consumer groups as pandas DataFrames: members, committed offsets, watermarks and lag.

Everything but ``log_end_offset`` comes through the Kafka protocol with confluent-kafka's
AdminClient (ListGroups, DescribeGroups, OffsetFetch, ListOffsets), so ``source`` may be a
``LocalCluster`` or the bootstrap string of any Kafka cluster. Kafka does not tell clients a
partition's log end offset (LEO); a ``LocalCluster`` does, through its brokers' introspection
endpoint, so the column is filled from the leader's replica there and is NA elsewhere.

``lag`` is what ``kafka-consumer-groups.sh --describe`` calls LAG: the high watermark (the end
of what consumers may read) minus the committed offset; NA ("-" in the tool) when the group has
committed nothing for that partition.
"""

from __future__ import annotations

import pandas as pd
from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription, OffsetSpec

from ..cluster import LocalCluster
from .io import client_config, through_failover

REQUEST_TIMEOUT_S = 10.0  # librdkafka gives up on each admin request after this...
RESULT_TIMEOUT_S = 15.0  # ...and we wait a little longer, so its own error reports first
LAG_COLUMNS = [
    "group", "topic", "partition", "committed_offset", "high_watermark", "log_end_offset", "lag",
    "member_id", "client_id", "host",
]
GROUP_COLUMNS = ["group", "state", "protocol", "members", "coordinator"]
_INTEGER_COLUMNS = ["partition", "committed_offset", "high_watermark", "log_end_offset", "lag"]
_TEXT_COLUMNS = ["group", "topic", "member_id", "client_id", "host"]
# The group states as Kafka spells them (kafka-consumer-groups.sh, DescribeGroups).
_STATE_NAMES = {
    ConsumerGroupState.UNKNOWN: "Unknown",
    ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
    ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
    ConsumerGroupState.STABLE: "Stable",
    ConsumerGroupState.DEAD: "Dead",
    ConsumerGroupState.EMPTY: "Empty",
}

Source = LocalCluster | str
Key = tuple[str, int]  # (topic, partition)


# == public =====================================================================================


def lag_frame(source: Source, group_id: str | None = None) -> pd.DataFrame:
    """One row per (group, topic, partition) a group has committed offsets for or is assigned.

    ``group_id=None`` covers every group. An unknown ``group_id`` raises ValueError. Partitions
    of a topic that no longer exists keep their row, with NA high watermark and lag. Asked
    during a failover, it waits for the new leaders and coordinators.
    """
    return through_failover(lambda: _lag_frame(source, group_id))


def _lag_frame(source: Source, group_id: str | None) -> pd.DataFrame:
    admin = _admin(source)
    descriptions = _describe(admin, _group_ids(admin, group_id), must_exist=group_id is not None)
    rows = [row for d in descriptions for row in _group_rows(admin, d)]
    frame = pd.DataFrame(rows, columns=LAG_COLUMNS)
    keys = list(zip(frame.topic, frame.partition, strict=True))
    frame["high_watermark"] = _lookup(_high_watermarks(admin, set(keys)), keys)
    frame["log_end_offset"] = _lookup(_log_end_offsets(source), keys)
    frame["lag"] = frame.high_watermark.astype("Int64") - frame.committed_offset.astype("Int64")
    return _typed(frame)


def groups_frame(source: Source, group_id: str | None = None) -> pd.DataFrame:
    """One row per group: state, partition assignor, member count and coordinator broker id.

    ``group_id=None`` lists every group, which asks every broker (ListGroups); naming a group
    asks only its coordinator. An unknown ``group_id`` raises ValueError. Asked during a
    failover, it waits for the new coordinators.
    """
    return through_failover(lambda: _groups_frame(source, group_id))


def _groups_frame(source: Source, group_id: str | None) -> pd.DataFrame:
    admin = _admin(source)
    descriptions = _describe(admin, _group_ids(admin, group_id), must_exist=group_id is not None)
    rows = [
        # confluent_kafka types state as a bare Enum; it is a ConsumerGroupState
        {"group": d.group_id,
         "state": _STATE_NAMES.get(d.state, str(d.state)),  # type: ignore[call-overload]
         "protocol": d.partition_assignor or pd.NA, "members": len(d.members),
         "coordinator": d.coordinator.id}
        for d in descriptions
    ]
    return pd.DataFrame(rows, columns=GROUP_COLUMNS).astype(
        {"group": "string", "state": "string", "protocol": "string", "members": "Int64",
         "coordinator": "Int64"})


# == groups =====================================================================================


def _admin(source: Source) -> AdminClient:
    servers = source if isinstance(source, str) else source.bootstrap_servers
    return AdminClient(client_config(servers))


def _group_ids(admin: AdminClient, group_id: str | None) -> list[str]:
    """``[group_id]``, or every group: each broker lists the groups it coordinates.

    A broker that does not answer makes the list incomplete, so that raises (as Kafka's
    ``kafka-consumer-groups.sh --list`` fails) rather than leaving its groups out.
    """
    if group_id is not None:
        return [group_id]
    listed = admin.list_consumer_groups(request_timeout=REQUEST_TIMEOUT_S).result(RESULT_TIMEOUT_S)
    if listed.errors:
        raise KafkaException(KafkaError(
            listed.errors[0].code(),
            f"listing consumer groups failed on {len(listed.errors)} broker(s) "
            f"({listed.errors[0].str()}); name a group_id to ask only its coordinator"))
    return sorted(g.group_id for g in listed.valid)


def _describe(admin: AdminClient, group_ids: list[str],
              must_exist: bool) -> list[ConsumerGroupDescription]:
    if not group_ids:
        return []
    futures = admin.describe_consumer_groups(group_ids, request_timeout=REQUEST_TIMEOUT_S)
    described = [_described(futures[g], g, must_exist) for g in group_ids]
    return [d for d in described if d is not None]  # None: deleted since it was listed


def _described(future, group_id: str, must_exist: bool) -> ConsumerGroupDescription | None:
    """The description; ValueError for a group the cluster does not know, if it must exist.

    Kafka answers an unknown group with state Dead (DescribeGroups v0-5) or the error
    GROUP_ID_NOT_FOUND (v6, KIP-1043); both mean the same here.
    """
    try:
        description = future.result(RESULT_TIMEOUT_S)
    except KafkaException as error:
        if error.args[0].code() != KafkaError.GROUP_ID_NOT_FOUND:
            raise
        description = None
    if must_exist and (description is None or description.state == ConsumerGroupState.DEAD):
        raise ValueError(f"unknown consumer group {group_id!r}: no members, no committed offsets")
    return description


def _group_rows(admin: AdminClient, description: ConsumerGroupDescription) -> list[dict]:
    """Rows for every partition the group committed or is assigned, sorted by topic, partition."""
    committed = _committed_offsets(admin, description.group_id)
    members = _assigned_members(description)
    return [
        {"group": description.group_id, "topic": topic, "partition": partition,
         "committed_offset": committed.get((topic, partition), pd.NA),
         **members.get((topic, partition), {})}
        for topic, partition in sorted(committed.keys() | members.keys())
    ]


def _committed_offsets(admin: AdminClient, group_id: str) -> dict[Key, int]:
    """Every offset the group has committed (OffsetFetch for all partitions)."""
    request = [ConsumerGroupTopicPartitions(group_id)]
    futures = admin.list_consumer_group_offsets(request, request_timeout=REQUEST_TIMEOUT_S)
    answer = futures[group_id].result(RESULT_TIMEOUT_S)
    offsets = {}
    for tp in answer.topic_partitions or []:
        if tp.error is not None:
            raise KafkaException(tp.error)
        if tp.offset >= 0:
            offsets[(tp.topic, tp.partition)] = tp.offset
    return offsets


def _assigned_members(description: ConsumerGroupDescription) -> dict[Key, dict]:
    """(topic, partition) -> the member it is assigned to, from the last SyncGroup."""
    return {
        (tp.topic, tp.partition): {"member_id": m.member_id, "client_id": m.client_id,
                                   "host": m.host}
        for m in description.members
        for tp in (m.assignment.topic_partitions if m.assignment else [])
    }


# == offsets ====================================================================================


def _high_watermarks(admin: AdminClient, keys: set[Key]) -> dict[Key, int]:
    """ListOffsets(latest, read_uncommitted) answers the high watermark of each partition."""
    existing = _existing(admin, keys)
    if not existing:
        return {}
    futures = admin.list_offsets(
        {TopicPartition(t, p): OffsetSpec.latest() for t, p in existing},
        isolation_level=IsolationLevel.READ_UNCOMMITTED, request_timeout=REQUEST_TIMEOUT_S)
    return {(tp.topic, tp.partition): f.result(RESULT_TIMEOUT_S).offset
            for tp, f in futures.items()}


def _existing(admin: AdminClient, keys: set[Key]) -> set[Key]:
    """The partitions in ``keys`` the cluster's metadata still has (topics can be deleted)."""
    if not keys:
        return set()
    topics = admin.list_topics(timeout=REQUEST_TIMEOUT_S).topics
    return {(t, p) for t, p in keys if t in topics and p in topics[t].partitions}


def _log_end_offsets(source: Source) -> dict[Key, int]:
    """Each partition's LEO on its leader (the newest epoch wins); none for a bootstrap string."""
    if isinstance(source, str):
        return {}
    leaders: dict[Key, dict] = {}
    for replicas in source.describe().values():
        for replica in replicas:
            key = (replica["topic"], replica["partition"])
            newer = key not in leaders or replica["leader_epoch"] > leaders[key]["leader_epoch"]
            if replica["role"] == "leader" and newer:
                leaders[key] = replica
    return {key: replica["log_end_offset"] for key, replica in leaders.items()}


def _lookup(values: dict[Key, int], keys: list[Key]) -> pd.Series:
    return pd.Series([values.get(key, pd.NA) for key in keys], dtype="Int64")


def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    """Nullable dtypes, so a missing value is NA in every column rather than NaN or None."""
    types = {c: "Int64" for c in _INTEGER_COLUMNS} | {c: "string" for c in _TEXT_COLUMNS}
    return frame.astype(types).reset_index(drop=True)
