"""Cluster introspection as pandas DataFrames, for notebooks and widgets."""

from __future__ import annotations

import pandas as pd

from ..cluster import LocalCluster

PARTITION_COLUMNS = [
    "broker", "topic", "partition", "role", "leader", "leader_epoch", "isr", "log_start_offset",
    "high_watermark", "log_end_offset", "size_bytes", "segments", "first_dirty_offset",
    "max_follower_lag_records",
]
EVENT_COLUMNS = ["time", "source", "kind", "topic", "partition"]


def partitions_frame(cluster: LocalCluster) -> pd.DataFrame:
    """One row per (broker, partition replica) with offsets, epoch, ISR and segment count."""
    rows = [
        {**p, "broker": broker_id, "segments": len(p["segments"]),
         "max_follower_lag_records": _max_lag(p["followers"])}
        for broker_id, partitions in cluster.describe().items()
        for p in partitions
    ]
    return pd.DataFrame(rows, columns=PARTITION_COLUMNS)


def _max_lag(followers: list[dict]) -> int | None:
    """Largest known follower lag; None when no follower's position is known yet."""
    known = [f["lag_records"] for f in followers if f["lag_records"] is not None]
    return max(known) if known else (0 if not followers else None)


def events_frame(cluster: LocalCluster) -> pd.DataFrame:
    """Cluster events oldest first; columns beyond EVENT_COLUMNS depend on the kind."""
    rows = [{**e, "time": pd.Timestamp(e["now_ms"], unit="ms")} for e in cluster.events()]
    frame = pd.DataFrame(rows)
    if frame.empty:
        return pd.DataFrame(columns=EVENT_COLUMNS)
    rest = [c for c in frame.columns if c not in EVENT_COLUMNS]
    return frame[[c for c in EVENT_COLUMNS if c in frame.columns] + rest]
