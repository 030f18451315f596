"""Share groups (KIP-932) as pandas DataFrames: the groups, their share partitions, and the
delivery state of each in-flight record.

Theory of operation: a share group is a queue over ordinary topics. Its *coordinator* (the
leader of its ``__consumer_offsets`` partition) keeps only membership: each member's epoch and
the partitions it reads, several members often reading one partition. The delivery state lives
at each partition's *leader*, one share partition per group reading it: the share-partition start
offset (SPSO: below it every record is done with), the end offset (SPEO, exclusive here: from it
on nothing was handed out), and between them the in-flight records, each AVAILABLE, ACQUIRED by
one member under a lock until a deadline, ACKNOWLEDGED or ARCHIVED (rejected, or delivered
``group.share.delivery.count.limit`` times), with its delivery count.

Kafka's admin API has share-group calls (ListGroups by type, ShareGroupDescribe,
DescribeShareGroupOffsets) but confluent-kafka 2.16 exposes none of them, and none tells the
state of single records. So these frames read a ``LocalCluster``'s introspection endpoints:
``GET /v1/groups`` on the coordinators, ``GET /v1/share_partitions`` on the leaders. As
everywhere in this package, the controller says which broker leads a partition or coordinates
a group (``introspect.authority_of``); a broker that still claims what it lost is not shown.
Each share partition lists its first ``SHARE_RECORDS_SHOWN_MAX`` in-flight records (the broker's
bound); ``records_beyond`` counts the others, and every count column covers them all.

``lag`` follows Kafka 4.1 (KIP-1226): the records at or past the SPSO, up to the high
watermark, that are not yet delivered completely (neither acknowledged nor archived).
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from ..cluster import LocalCluster
from .introspect import Authority, authority_of, merge_groups

ADMIN_TIMEOUT_S = 5.0  # an introspection endpoint answers on loopback in milliseconds
SHARE_GROUP_TYPE = "share"  # the group_type of a share group in GET /v1/groups
RECORD_STATES = ("available", "acquired", "acknowledged", "archived")  # Kafka's RecordState
SHARE_GROUP_COLUMNS = ["group", "state", "members", "coordinator", "group_epoch",
                       "assignment_epoch", "partitions", "lag", *RECORD_STATES]
SHARE_PARTITION_COLUMNS = [
    "group", "topic", "partition", "leader", "start_offset", "end_offset", "high_watermark",
    "lag", "in_flight", *RECORD_STATES, "records_beyond", "delivery_count_limit",
    "record_lock_duration_ms",
]
SHARE_RECORD_COLUMNS = ["group", "topic", "partition", "offset", "state", "delivery_count",
                        "member_id", "client_id", "lock_deadline"]
_INTEGER_COLUMNS = ["members", "coordinator", "group_epoch", "assignment_epoch", "partitions",
                    "partition", "leader", "start_offset", "end_offset", "high_watermark", "lag",
                    "in_flight", *RECORD_STATES, "records_beyond", "delivery_count_limit",
                    "record_lock_duration_ms", "offset", "delivery_count"]

Key = tuple[str, str, int]  # (group, topic, partition)


# == public =====================================================================================


def share_groups_frame(cluster: LocalCluster, group_id: str | None = None) -> pd.DataFrame:
    """One row per share group: its state (Empty or Stable), member count, coordinator broker,
    group and assignment epochs, how many share partitions it has (at their leaders), its
    ``lag`` and how many in-flight records are in each state, summed over its partitions.

    ``group_id`` names one group; an unknown one raises ValueError.
    """
    groups = share_groups(cluster)
    partitions = share_partitions(cluster)
    if group_id is not None:
        groups = [_one(groups, group_id)]
    rows = []
    for g in groups:
        mine = [p for p in partitions if p["group"] == g["group"]]
        rows.append({
            "group": g["group"], "state": g["state"], "members": len(g["members"]),
            "coordinator": g["coordinator"], "group_epoch": g["group_epoch"],
            "assignment_epoch": g["assignment_epoch"], "partitions": len(mine),
            "lag": _sum_known([p["lag"] for p in mine]),
            **{state: sum(p["counts"][state] for p in mine) for state in RECORD_STATES}})
    return _typed(pd.DataFrame(rows, columns=SHARE_GROUP_COLUMNS))


def share_partitions_frame(cluster: LocalCluster, group_id: str | None = None) -> pd.DataFrame:
    """One row per share partition (group x topic partition), from its leader: the SPSO
    (``start_offset``) and exclusive SPEO (``end_offset``), the partition's high watermark, the
    ``lag``, the in-flight records and how many are in each state, ``records_beyond`` (in flight
    past the records the broker lists), and the limits it obeys (delivery count limit, record
    lock duration).

    ``group_id`` names one share group; an unknown one raises ValueError. A share partition
    appears once a member of the group has fetched from it.
    """
    if group_id is not None:
        _one(share_groups(cluster), group_id)
    rows = [{**{k: p[k] for k in ("group", "topic", "partition", "leader", "start_offset",
                                   "end_offset", "high_watermark", "lag", "records_beyond",
                                   "delivery_count_limit", "record_lock_duration_ms")},
             "in_flight": p["in_flight_records"], **p["counts"]}
            for p in share_partitions(cluster) if group_id in (None, p["group"])]
    return _typed(pd.DataFrame(rows, columns=SHARE_PARTITION_COLUMNS))


def share_records_frame(cluster: LocalCluster, group_id: str) -> pd.DataFrame:
    """One row per in-flight record of the share group ``group_id``, by topic, partition and
    offset: its state (available, acquired, acknowledged, archived), delivery count, and while
    acquired the member holding it (member id and client id) and when its lock runs out
    (``lock_deadline``, UTC). Per share partition, the first ``SHARE_RECORDS_SHOWN_MAX`` in-flight
    records from the SPSO; ``share_partitions_frame``'s ``records_beyond`` counts the rest.

    An unknown ``group_id`` raises ValueError.
    """
    group = _one(share_groups(cluster), group_id)
    clients = {m["member_id"]: m["client_id"] for m in group["members"]}
    rows = [{"group": p["group"], "topic": p["topic"], "partition": p["partition"],
             "offset": r["offset"], "state": r["state"], "delivery_count": r["delivery_count"],
             "member_id": r["member_id"] if r["member_id"] is not None else pd.NA,
             "client_id": clients.get(r["member_id"], pd.NA) if r["member_id"] else pd.NA,
             "lock_deadline": (pd.Timestamp(r["lock_deadline_ms"], unit="ms")
                               if r["lock_deadline_ms"] is not None else pd.NaT)}
            for p in share_partitions(cluster) if p["group"] == group_id for r in p["records"]]
    frame = pd.DataFrame(rows, columns=SHARE_RECORD_COLUMNS)
    frame["lock_deadline"] = pd.to_datetime(frame["lock_deadline"])
    return _typed(frame)


# == what the brokers say =======================================================================


def share_groups(cluster: LocalCluster, groups: list[dict] | None = None,
                 replicas: dict[int, list[dict]] | None = None,
                 truth: Authority | None = None) -> list[dict]:
    """The share groups of ``cluster.groups()`` (or ``groups``), one row each from the broker
    that coordinates it (``introspect.merge_groups``), by group id."""
    groups = cluster.groups() if groups is None else groups
    shares = [g for g in groups if g.get("group_type") == SHARE_GROUP_TYPE]
    if not shares:
        return []
    replicas = cluster.describe() if replicas is None else replicas
    truth = authority_of(cluster, replicas) if truth is None else truth
    return merge_groups(shares, truth, replicas)


def share_partitions(cluster: LocalCluster, claims: dict[int, list[dict]] | None = None,
                     replicas: dict[int, list[dict]] | None = None,
                     truth: Authority | None = None) -> list[dict]:
    """Every share partition, as its leader reports it (``GET /v1/share_partitions``), with
    ``leader`` (the broker), ``high_watermark`` (of that leader's replica) and ``lag``; sorted
    by group, topic, partition. ``claims`` is ``share_partition_claims(cluster)`` when the
    caller has it already."""
    claims = share_partition_claims(cluster) if claims is None else claims
    if not any(claims.values()):
        return []
    replicas = cluster.describe() if replicas is None else replicas
    truth = authority_of(cluster, replicas) if truth is None else truth
    return merge_share_partitions(claims, replicas, truth)


def share_partition_claims(cluster: LocalCluster) -> dict[int, list[dict]]:
    """Per answering broker, the share partitions it says it leads."""
    return {broker_id: cluster.admin_get(f"{url}/v1/share_partitions", ADMIN_TIMEOUT_S)
            for broker_id, url in cluster.admin_urls().items()}


def merge_share_partitions(claims: Mapping[int, list[dict]], replicas: Mapping[int, list[dict]],
                           truth: Authority) -> list[dict]:
    """One row per share partition out of every broker's claim: the claim of the broker the
    authority names the partition's leader, else (no such claim: it has not loaded the share
    partition since it took over, or does not answer) the claim at the highest leader epoch."""
    high_watermarks = {(b, r["topic"], r["partition"]): r["high_watermark"]
                       for b, rows in replicas.items() for r in rows}
    chosen: dict[Key, tuple[tuple, dict]] = {}
    for broker_id, rows in claims.items():
        for row in rows:
            key = (row["group"], row["topic"], row["partition"])
            known = truth.partitions.get((row["topic"], row["partition"]))
            rank = (known is not None and known.leader == broker_id,
                    row["leader_epoch"] if row["leader_epoch"] is not None else -1, -broker_id)
            if key not in chosen or rank > chosen[key][0]:
                hw = high_watermarks.get((broker_id, row["topic"], row["partition"]))
                done = row["counts"]["acknowledged"] + row["counts"]["archived"]
                lag = None if hw is None else max(hw - row["start_offset"] - done, 0)
                chosen[key] = (rank, {**row, "leader": broker_id, "high_watermark": hw,
                                      "lag": lag})
    return [row for _key, (_rank, row) in sorted(chosen.items())]


# == internals ==================================================================================


def _one(groups: list[dict], group_id: str) -> dict:
    found = [g for g in groups if g["group"] == group_id]
    if not found:
        raise ValueError(f"unknown share group {group_id!r}: no member has joined it")
    return found[0]


def _sum_known(values: list[int | None]) -> int | None:
    return None if None in values else sum(v for v in values if v is not None)


def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    """Nullable dtypes: a missing value is NA in every column."""
    types = {c: ("Int64" if c in _INTEGER_COLUMNS else "string") for c in frame.columns
             if c != "lock_deadline"}
    return frame.astype(types).reset_index(drop=True)

