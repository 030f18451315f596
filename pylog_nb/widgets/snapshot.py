"""One picture of a LocalCluster, as plain data: brokers, partitions with every replica's
offsets, consumer groups with lag, recent events. The widgets render it; tests read it.

Only what changes when the cluster changes goes in (no "lag in ms", no wall-clock ages), so two
snapshots of an idle cluster are equal and an unchanged view sends the browser nothing.

A partition's leader, epoch and ISR are the controller's (``client.introspect.authority_of``),
never whichever broker answered: a replica whose own view differs keeps its role and epoch and
gets a ``disagreement`` text. A broker that does not answer (paused, down) keeps the replica
state it last reported, marked ``last_known``, so its column neither empties nor reflows.
"""

from __future__ import annotations

from ..client.introspect import Authority, authority_of, disagreement, merge_groups
from ..cluster import LocalCluster

EVENTS_SHOWN = 12


def take_snapshot(cluster: LocalCluster, previous: dict | None = None) -> dict:
    """Brokers, partitions, groups and the latest events of ``cluster``; replicas of brokers
    that do not answer now come from ``previous`` (the last snapshot), marked ``last_known``."""
    replicas = cluster.describe()
    truth = authority_of(cluster, replicas)
    states = cluster.broker_states()
    return {
        "brokers": [{"broker_id": b, "state": s} for b, s in states.items()],
        "authority": truth.source,
        "partitions": _partitions(replicas, truth, states, previous or {}),
        "groups": _groups(cluster.groups(), replicas, truth),
        "events": [_event_row(e) for e in cluster.events()[-EVENTS_SHOWN:]],
    }


def _partitions(replicas: dict[int, list[dict]], truth: Authority, states: dict[int, str],
                previous: dict) -> list[dict]:
    """One row per (topic, partition): the authority's leader, epoch and ISR, and each
    replica's own view and offsets."""
    merged: dict[tuple[str, int], dict] = {}
    for key, known in truth.partitions.items():
        if not key[0].startswith("__"):  # internal topics would drown the user's own
            merged[key] = _partition_entry(key, known)
    for broker_id, rows in sorted(replicas.items()):
        for row in rows:
            key = (row["topic"], row["partition"])
            if key[0].startswith("__"):
                continue
            entry = merged.setdefault(key, _partition_entry(key, truth.partitions.get(key)))
            entry["replicas"][broker_id] = _replica(row)
    _keep_last_known(merged, previous, set(replicas), truth.source == "controller")
    for key, entry in merged.items():
        known = truth.partitions.get(key)
        for broker_id, replica in entry["replicas"].items():
            if known is None and replica["last_known"]:
                continue  # nothing newer to compare with: keep what the last snapshot said
            replica["disagreement"] = disagreement(broker_id, replica, known, truth.source,
                                                   states.get(broker_id) == "isolated")
    return [merged[key] for key in sorted(merged)]


def _keep_last_known(merged: dict, previous: dict, answering: set[int],
                     complete: bool) -> None:
    """Add to ``merged`` the replicas of brokers that do not answer now, as ``previous`` had
    them. When ``complete`` (the controller's image lists every partition) a partition missing
    from ``merged`` was deleted; otherwise it may just live on brokers that do not answer."""
    for entry in previous.get("partitions", []):
        key = (entry["topic"], entry["partition"])
        silent = {b: {**replica, "last_known": True}
                  for b, replica in entry["replicas"].items() if b not in answering}
        if key in merged:
            merged[key]["replicas"].update(silent)
        elif silent and not complete:
            merged[key] = {**entry, "replicas": silent}


def _partition_entry(key: tuple[str, int], known) -> dict:
    if known is None:  # a broker hosts a partition the authority does not know
        return {"topic": key[0], "partition": key[1], "leader": -1, "leader_epoch": None,
                "isr": [], "assigned": [], "replicas": {}}
    return {"topic": key[0], "partition": key[1], "leader": known.leader,
            "leader_epoch": known.leader_epoch, "isr": list(known.isr),
            "assigned": list(known.replicas), "replicas": {}}


def _replica(row: dict) -> dict:
    """One broker's own view of a replica: the role and epoch it acts on, the leader and ISR its
    metadata names, and its offsets."""
    return {
        "role": row["role"], "leader": row["leader"], "leader_epoch": row["leader_epoch"],
        "isr": list(row["isr"]), "log_start_offset": row["log_start_offset"],
        "high_watermark": row["high_watermark"], "log_end_offset": row["log_end_offset"],
        "size_bytes": row["size_bytes"], "compacted": "compact" in row["cleanup_policy"],
        "first_dirty_offset": row["first_dirty_offset"], "last_known": False}


def _groups(groups: list[dict], replicas: dict[int, list[dict]], truth: Authority) -> list[dict]:
    """Per group (one row, however many brokers claim it): state, members, the coordinator
    and any stale claims, and per committed partition the offset and lag to the HW."""
    high_watermarks = _leader_high_watermarks(replicas, truth)
    return [
        {"group": g["group"], "state": g["state"], "generation": g["generation"],
         "coordinator": g["coordinator"], "stale_coordinators": g["stale_coordinators"],
         "disagreement": g["disagreement"], "members": [m["client_id"] for m in g["members"]],
         "offsets": [
             {"topic": o["topic"], "partition": o["partition"], "committed": o["offset"],
              "lag": _lag(high_watermarks.get((o["topic"], o["partition"])), o["offset"])}
             for o in g["offsets"]]}
        for g in merge_groups(groups, truth, replicas)
    ]


def _leader_high_watermarks(replicas: dict[int, list[dict]],
                            truth: Authority) -> dict[tuple[str, int], int]:
    """Each partition's HW on the replica the authority names leader, if it answers."""
    return {(r["topic"], r["partition"]): r["high_watermark"]
            for broker_id, rows in replicas.items() for r in rows
            if (known := truth.partitions.get((r["topic"], r["partition"]))) is not None
            and known.leader == broker_id and r["role"] == "leader"}


def _lag(high_watermark: int | None, committed: int) -> int | None:
    return None if high_watermark is None else max(high_watermark - committed, 0)


def _event_row(event: dict) -> dict:
    """An event as time, source and one line of text."""
    text = event.get("text")
    if text is None:
        where = f"{event['topic']}-{event['partition']}" if "topic" in event else ""
        details = ", ".join(f"{k}={v}" for k, v in event.items()
                            if k not in ("kind", "topic", "partition", "now_ms", "source"))
        text = " ".join(part for part in (event.get("kind", ""), where, details) if part)
    return {"now_ms": event["now_ms"], "source": event["source"], "text": text}
