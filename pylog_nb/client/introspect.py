"""Cluster introspection as pandas DataFrames, for notebooks and widgets."""

from __future__ import annotations

import pandas as pd

from ..cluster import LocalCluster

PARTITION_COLUMNS = [
    "broker", "topic", "partition", "leader", "leader_epoch", "isr", "log_start_offset",
    "high_watermark", "log_end_offset", "size_bytes", "segments",
]


def partitions_frame(cluster: LocalCluster) -> pd.DataFrame:
    """One row per (broker, partition replica) with offsets, epoch, ISR and segment count."""
    rows = [
        {**p, "broker": broker_id, "segments": len(p["segments"])}
        for broker_id, partitions in cluster.describe().items()
        for p in partitions
    ]
    return pd.DataFrame(rows, columns=PARTITION_COLUMNS)
