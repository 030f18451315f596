"""A share group's settings in effect: its group configs over the broker's defaults (KIP-932).

Kafka reads these per group at each use (``GroupConfigManager``): a change with
IncrementalAlterConfigs applies to the next fetch. ``share.auto.offset.reset`` matters only when
a share partition is first initialized; the lock duration to each acquisition; the isolation
level to each read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..metadata import group_config

READ_COMMITTED = "read_committed"  # share.isolation.level's value


@dataclass(frozen=True, slots=True)
class ShareGroupSettings:
    auto_offset_reset: str  # latest, earliest or by_duration:<ISO-8601 duration>
    record_lock_duration_ms: int
    read_committed: bool


def share_group_settings(overrides: Mapping[str, str],
                         defaults: Mapping[str, str]) -> ShareGroupSettings:
    """The group's ``overrides`` (its group configs) over the broker's ``defaults``."""
    values = {name: overrides.get(name, defaults[name]) for name in (
        group_config.SHARE_AUTO_OFFSET_RESET, group_config.SHARE_RECORD_LOCK_DURATION_MS,
        group_config.SHARE_ISOLATION_LEVEL)}
    return ShareGroupSettings(
        values[group_config.SHARE_AUTO_OFFSET_RESET],
        int(values[group_config.SHARE_RECORD_LOCK_DURATION_MS]),
        values[group_config.SHARE_ISOLATION_LEVEL] == READ_COMMITTED)
