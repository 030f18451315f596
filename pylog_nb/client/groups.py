"""Consumer groups as pandas DataFrames: members, committed offsets, watermarks and lag.

Everything but ``log_end_offset`` comes through the Kafka protocol with confluent-kafka's
AdminClient (ListGroups, DescribeGroups, OffsetFetch, ListOffsets), so ``source`` may be a
``LocalCluster`` or the bootstrap string of any Kafka cluster. Kafka does not tell clients a
partition's log end offset (LEO); a ``LocalCluster`` does, through its brokers' introspection
endpoint, so the column is filled from the leader's replica there and is NA elsewhere.

``lag`` is what ``kafka-consumer-groups.sh --describe`` calls LAG: the high watermark (the end
of what consumers may read) minus the committed offset; NA ("-" in the tool) when the group has
committed nothing for that partition.

Groups are of two types (``type``): ``classic`` (JoinGroup/SyncGroup: kafka-python, aiokafka,
confluent-kafka by default) and ``consumer`` (KIP-848's consumer rebalance protocol:
``group.protocol=consumer``). A consumer group has no generation but epochs: the *group epoch*
(bumped when what the assignor sees changes), the *assignment epoch* (the group epoch its target
assignment was computed for) and each member's *member epoch* (the assignment epoch it has
caught up with). Kafka's admin API (ConsumerGroupDescribe) answers its members' current and
target assignments, which confluent-kafka passes on; it does not pass on the epochs, and
Kafka's API never tells what a member still has to revoke. A ``LocalCluster``'s introspection
endpoint tells all of it, so those columns are filled there (from the coordinator the admin
API named) and are NA elsewhere, as ``log_end_offset`` is.

A third type, ``share`` (KIP-932's share groups: a topic read as a queue), is listed too, from a
``LocalCluster``'s introspection only: confluent-kafka's admin client neither lists nor describes
share groups (``shares.py`` has their partitions and records). A share group has group and
assignment epochs like a consumer group, its members a member epoch and the partitions they
read (their assignment is their target: nothing is revoked in a share group), no member state
and no committed offsets.
"""

from __future__ import annotations

import pandas as pd
from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription, OffsetSpec

from ..cluster import LocalCluster
from .config import SPARK_QUERY_MARKER, client_config, through_failover
from .shares import SHARE_GROUP_TYPE, share_groups

REQUEST_TIMEOUT_S = 10.0  # librdkafka gives up on each admin request after this...
RESULT_TIMEOUT_S = 15.0  # ...and we wait a little longer, so its own error reports first
LAG_COLUMNS = [
    "group", "topic", "partition", "committed_offset", "high_watermark", "log_end_offset", "lag",
    "member_id", "client_id", "host",
]
GROUP_COLUMNS = ["group", "type", "state", "protocol", "members", "coordinator", "group_epoch",
                 "assignment_epoch"]
MEMBER_COLUMNS = [
    "group", "type", "member_id", "group_instance_id", "client_id", "host", "member_epoch",
    "member_state", "assignment", "pending_revocation", "unreleased_partitions",
    "target_assignment", "subscription",
]
_MEMBER_INTEGER_COLUMNS = ["member_epoch"]
_GROUP_TYPES = {ConsumerGroupType.CLASSIC: "classic", ConsumerGroupType.CONSUMER: "consumer"}
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
    """One row per group of any type: its type (classic, consumer or share), state, partition
    assignor (a consumer group's is the coordinator's, e.g. uniform; a share group's is
    simple), member count, coordinator broker id, and for a consumer or share group its group
    and assignment epochs (NA for a classic group, and outside a ``LocalCluster``, where a
    consumer group's Assigning and Reconciling states read Unknown: confluent-kafka has no
    names for them). Share groups are listed for a ``LocalCluster`` only (see the module
    docstring).

    ``group_id=None`` lists every group, which asks every broker (ListGroups); naming a group
    asks only its coordinator. An unknown ``group_id`` raises ValueError. Asked during a
    failover, it waits for the new coordinators.
    """
    return through_failover(lambda: _groups_frame(source, group_id))


def _groups_frame(source: Source, group_id: str | None) -> pd.DataFrame:
    shares = _share_groups(source, group_id)
    if group_id is not None and shares:
        return _group_frame([_share_group_row(shares[0])])
    admin = _admin(source)
    descriptions = _describe(admin, _group_ids(admin, group_id), must_exist=group_id is not None)
    known = _introspected(source, descriptions)
    rows = [_share_group_row(g) for g in shares]
    listed = {row["group"] for row in rows}
    descriptions = [d for d in descriptions if d.group_id not in listed]
    for d in descriptions:
        seen = known.get(d.group_id, {})
        consumer = seen.get("group_type") == "consumer"
        rows.append({
            "group": d.group_id, "type": _group_type(d, seen),
            # confluent_kafka has no names for a consumer group's Assigning and Reconciling
            "state": seen["state"] if consumer else _state_name(d.state),
            "protocol": d.partition_assignor or pd.NA, "members": len(d.members),
            "coordinator": d.coordinator.id,
            "group_epoch": seen["group_epoch"] if consumer else pd.NA,
            "assignment_epoch": seen["assignment_epoch"] if consumer else pd.NA})
    return _group_frame(sorted(rows, key=lambda row: row["group"]))


def _share_group_row(group: dict) -> dict:
    return {"group": group["group"], "type": SHARE_GROUP_TYPE, "state": group["state"],
            "protocol": group["assignor"], "members": len(group["members"]),
            "coordinator": group["coordinator"], "group_epoch": group["group_epoch"],
            "assignment_epoch": group["assignment_epoch"]}


def _share_groups(source: Source, group_id: str | None) -> list[dict]:
    """A LocalCluster's share groups (``group_id``'s alone, if named); none for a bootstrap
    string (see the module docstring), or while a broker stops answering."""
    if isinstance(source, str):
        return []
    try:
        found = share_groups(source)
    except (OSError, ValueError):  # a broker stopped answering since it was listed
        return []
    return [g for g in found if group_id in (None, g["group"])]


def _group_frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=GROUP_COLUMNS).astype(
        {"group": "string", "type": "string", "state": "string", "protocol": "string",
         "members": "Int64", "coordinator": "Int64", "group_epoch": "Int64",
         "assignment_epoch": "Int64"})


def members_frame(source: Source, group_id: str) -> pd.DataFrame:
    """One row per member of the group ``group_id``: who it is (member id, instance id, client
    id, host) and its partitions as ``topic:0,1`` text, by client id.

    For a consumer group (KIP-848): ``member_epoch`` against the group's assignment epoch
    (``groups_frame``), ``member_state`` (Kafka's MemberState: stable, unrevoked_partitions,
    unreleased_partitions), ``assignment`` (what it owns at its epoch), ``pending_revocation``
    (what it still owns and must give up before it may take the assignment epoch),
    ``unreleased_partitions`` (of its target, those another member still owns),
    ``target_assignment`` (its part of the target assignment) and ``subscription`` (topic names,
    or the regular expression). The epoch, state, pending revocation and unreleased partitions
    come from a ``LocalCluster``'s introspection and are NA elsewhere (Kafka's admin API does
    not tell them); with it, every partition column is from that one coherent read. A classic
    group's members have only their ``assignment`` (from their last SyncGroup).

    A share group's members (a ``LocalCluster``'s only) have their member epoch, the partitions
    they read (``assignment``, which is also their ``target_assignment``: nothing is revoked in
    a share group) and their subscription; no member state.

    An unknown ``group_id`` raises ValueError. Asked during a failover, it waits for the new
    coordinator.
    """
    return through_failover(lambda: _members_frame(source, group_id))


def _members_frame(source: Source, group_id: str) -> pd.DataFrame:
    shares = _share_groups(source, group_id)
    if shares:
        return _member_frame([_share_member_row(group_id, m) for m in shares[0]["members"]])
    admin = _admin(source)
    [description] = _describe(admin, [group_id], must_exist=True)
    seen = _introspected(source, [description]).get(group_id, {})
    group_type = _group_type(description, seen)
    members = {m["member_id"]: m for m in seen.get("members", [])}
    rows = []
    for m in description.members:
        row = {"group": group_id, "type": group_type, "member_id": m.member_id,
               "group_instance_id": m.group_instance_id or pd.NA, "client_id": m.client_id,
               "host": m.host, "assignment": _text(m.assignment)}
        consumer = _is_consumer_group(group_type)
        if consumer:
            row["target_assignment"] = _text(m.target_assignment)
        known = members.get(m.member_id) if consumer else None
        if known is not None:
            regex = known["subscribed_topic_regex"]
            row |= {"member_epoch": known["member_epoch"], "member_state": known["member_state"],
                    "assignment": _assignment_text(known["assignment"]),
                    "pending_revocation": _assignment_text(known["pending_revocation"]),
                    "unreleased_partitions": _assignment_text(known["unreleased_partitions"]),
                    "target_assignment": _assignment_text(known["target_assignment"]),
                    "subscription": f"regex {regex}" if regex
                    else ",".join(known["subscribed_topic_names"])}
        rows.append(row)
    return _member_frame(rows)


def _share_member_row(group_id: str, member: dict) -> dict:
    assigned = _assignment_text(member["assignment"])
    return {"group": group_id, "type": SHARE_GROUP_TYPE, "member_id": member["member_id"],
            "group_instance_id": pd.NA, "client_id": member["client_id"],
            "host": member["client_host"], "member_epoch": member["member_epoch"],
            "assignment": assigned, "target_assignment": assigned,
            "subscription": ",".join(member["subscribed_topic_names"])}


def _member_frame(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=MEMBER_COLUMNS)
    frame = frame.sort_values(["client_id", "member_id"], kind="stable")
    types = {c: "Int64" for c in _MEMBER_INTEGER_COLUMNS} | {
        c: "string" for c in MEMBER_COLUMNS if c not in _MEMBER_INTEGER_COLUMNS}
    return frame.astype(types).reset_index(drop=True)


def _group_type(description: ConsumerGroupDescription, seen: dict):
    """classic or consumer, as the admin API says (ListGroups v5, ConsumerGroupDescribe), else
    as the introspection endpoint does; NA when neither knows (a broker before Kafka 3.7)."""
    named = _GROUP_TYPES.get(description.type)  # type: ignore[call-overload]
    return named or seen.get("group_type") or pd.NA


def _is_consumer_group(group_type) -> bool:
    return isinstance(group_type, str) and group_type == "consumer"


def _state_name(state) -> str:
    # confluent_kafka types state as a bare Enum; it is a ConsumerGroupState
    return _STATE_NAMES.get(state, str(state))


def _introspected(source: Source, descriptions: list[ConsumerGroupDescription]) -> dict[str, dict]:
    """Per group, the introspection endpoint's row from the broker the admin API named its
    coordinator (``GET /v1/groups``); none for a bootstrap string, or a broker that does not
    answer any more."""
    if isinstance(source, str) or not descriptions:
        return {}
    try:
        claims = {(g["group"], g["coordinator"]): g for g in source.groups()}
    except (OSError, ValueError):  # a broker stopped answering since the admin API asked
        return {}
    wanted = ((d.group_id, d.coordinator.id) for d in descriptions)
    return {group: claims[(group, broker)] for group, broker in wanted if (group, broker) in claims}


def _text(assignment) -> str:
    """A MemberAssignment as ``topic:0,1 other:3`` (empty: nothing)."""
    pairs: dict[str, list[int]] = {}
    for tp in assignment.topic_partitions if assignment is not None else []:
        pairs.setdefault(tp.topic, []).append(tp.partition)
    return _assignment_text(pairs)


def _assignment_text(assignment: dict[str, list[int]]) -> str:
    return " ".join(f"{topic}:{','.join(str(p) for p in sorted(partitions))}"
                    for topic, partitions in sorted(assignment.items()) if partitions)


def spark_query_of(metadata: str | None) -> str | None:
    """What a committed offset's metadata says of the Spark query that committed it (the text
    after the marker), or None when no Spark query committed it."""
    if not metadata or not metadata.startswith(SPARK_QUERY_MARKER):
        return None
    return metadata[len(SPARK_QUERY_MARKER):].strip() or "a Spark query"


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
