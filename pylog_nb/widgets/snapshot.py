"""One picture of a LocalCluster, as plain data: brokers, partitions with every replica's
offsets, consumer groups with lag, recent events. The widgets render it; tests read it.

Only what changes when the cluster changes goes in (no "lag in ms", no wall-clock ages), so two
snapshots of an idle cluster are equal and an unchanged view sends the browser nothing.
"""

from __future__ import annotations

from ..cluster import LocalCluster

EVENTS_SHOWN = 12


def take_snapshot(cluster: LocalCluster) -> dict:
    """Brokers, partitions, groups and the latest events of ``cluster``."""
    replicas = cluster.describe()
    return {
        "brokers": [{"broker_id": b, "state": s} for b, s in cluster.broker_states().items()],
        "partitions": _partitions(replicas),
        "groups": _groups(cluster.groups(), replicas),
        "events": [_event_row(e) for e in cluster.events()[-EVENTS_SHOWN:]],
    }


def _partitions(replicas: dict[int, list[dict]]) -> list[dict]:
    """One row per (topic, partition): the leader's view of it and each replica's offsets."""
    merged: dict[tuple[str, int], dict] = {}
    for broker_id, rows in sorted(replicas.items()):
        for row in rows:
            if row["topic"].startswith("__"):
                continue  # internal topics (__consumer_offsets) would drown the user's own
            key = (row["topic"], row["partition"])
            entry = merged.setdefault(key, {"topic": key[0], "partition": key[1], "replicas": {}})
            entry["replicas"][broker_id] = {
                "role": row["role"], "log_start_offset": row["log_start_offset"],
                "high_watermark": row["high_watermark"], "log_end_offset": row["log_end_offset"],
                "size_bytes": row["size_bytes"], "compacted": "compact" in row["cleanup_policy"],
                "first_dirty_offset": row["first_dirty_offset"]}
            if row["role"] == "leader" or "leader" not in entry:
                entry.update(leader=row["leader"], leader_epoch=row["leader_epoch"],
                             isr=list(row["isr"]), assigned=list(row["replicas"]))
    return [merged[key] for key in sorted(merged)]


def _groups(groups: list[dict], replicas: dict[int, list[dict]]) -> list[dict]:
    """Per group: state, members, and per committed partition the offset and lag to the HW."""
    leaders = {(r["topic"], r["partition"]): r["high_watermark"]
               for rows in replicas.values() for r in rows if r["role"] == "leader"}
    return [
        {"group": g["group"], "state": g["state"], "generation": g["generation"],
         "coordinator": g["coordinator"], "members": [m["client_id"] for m in g["members"]],
         "offsets": [
             {"topic": o["topic"], "partition": o["partition"], "committed": o["offset"],
              "lag": _lag(leaders.get((o["topic"], o["partition"])), o["offset"])}
             for o in g["offsets"]]}
        for g in sorted(groups, key=lambda g: g["group"])
    ]


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
