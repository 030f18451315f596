"""Group configuration (KIP-848, KIP-932): the per-group overrides of the group coordinator's
defaults, set with IncrementalAlterConfigs on resource type GROUP and kept in the metadata log.

Theory of operation (Kafka's ``GroupConfig``):

- A group config override is a string, like a topic's, checked by the controller before it is
  written (``validate``): unknown names and values out of range are INVALID_CONFIG, nothing is
  applied unless every key is valid, and the merged result must keep each session timeout above
  its heartbeat interval.
- The default of every key is the broker's matching ``group.*`` setting (``defaults``), so a
  group without overrides behaves exactly as before; ``effective`` is what a coordinator uses.
- Bounds are Kafka's, except the heartbeat interval's floor: this lab's brokers default to a 1 s
  interval (rebalances in seconds), so 1 s is allowed where Kafka's floor is 5 s.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..errors import Errors, KafkaError
from .topic_config import choice, int_in

CONSUMER_SESSION_TIMEOUT_MS = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL_MS = "consumer.heartbeat.interval.ms"
SHARE_SESSION_TIMEOUT_MS = "share.session.timeout.ms"
SHARE_HEARTBEAT_INTERVAL_MS = "share.heartbeat.interval.ms"
SHARE_RECORD_LOCK_DURATION_MS = "share.record.lock.duration.ms"
SHARE_AUTO_OFFSET_RESET = "share.auto.offset.reset"
SHARE_ISOLATION_LEVEL = "share.isolation.level"

SESSION_TIMEOUT_MS_MIN, SESSION_TIMEOUT_MS_MAX = 6_000, 1_800_000  # broker bounds, widened
HEARTBEAT_INTERVAL_MS_MIN, HEARTBEAT_INTERVAL_MS_MAX = 1_000, 15_000  # Kafka: 5 s to 15 s
RECORD_LOCK_DURATION_MS_MIN, RECORD_LOCK_DURATION_MS_MAX = 1_000, 3_600_000  # Kafka's bounds
OFFSET_RESETS = ("latest", "earliest")
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
# share.auto.offset.reset=by_duration:<ISO-8601 duration>, days to seconds (Kafka's form)
BY_DURATION = re.compile(r"by_duration:P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?")


class InvalidGroupConfigError(KafkaError, ValueError):
    error_code = Errors.INVALID_CONFIG


@dataclass(frozen=True, slots=True)
class GroupConfigDef:
    name: str
    parse: Callable[[str], object]
    doc: str


def _offset_reset(text: str) -> str:
    if text in OFFSET_RESETS or BY_DURATION.fullmatch(text):
        return text
    raise ValueError("must be latest, earliest or by_duration:<ISO-8601 duration>")


def by_duration_ms(text: str) -> int | None:
    """The duration of ``by_duration:PnDTnHnMnS`` in ms; None for latest or earliest."""
    match = BY_DURATION.fullmatch(text)
    if match is None:
        return None
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return (((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000


DEFINITIONS: dict[str, GroupConfigDef] = {
    d.name: d
    for d in (
        GroupConfigDef(CONSUMER_SESSION_TIMEOUT_MS,
                       int_in(SESSION_TIMEOUT_MS_MIN, SESSION_TIMEOUT_MS_MAX),
                       "A consumer-protocol member is fenced after this long without heartbeat"),
        GroupConfigDef(CONSUMER_HEARTBEAT_INTERVAL_MS,
                       int_in(HEARTBEAT_INTERVAL_MS_MIN, HEARTBEAT_INTERVAL_MS_MAX),
                       "How often consumer-protocol members heartbeat"),
        GroupConfigDef(SHARE_SESSION_TIMEOUT_MS,
                       int_in(SESSION_TIMEOUT_MS_MIN, SESSION_TIMEOUT_MS_MAX),
                       "A share-group member is fenced after this long without heartbeat"),
        GroupConfigDef(SHARE_HEARTBEAT_INTERVAL_MS,
                       int_in(HEARTBEAT_INTERVAL_MS_MIN, HEARTBEAT_INTERVAL_MS_MAX),
                       "How often share-group members heartbeat"),
        GroupConfigDef(SHARE_RECORD_LOCK_DURATION_MS,
                       int_in(RECORD_LOCK_DURATION_MS_MIN, RECORD_LOCK_DURATION_MS_MAX),
                       "How long a share consumer holds a record it was given"),
        GroupConfigDef(SHARE_AUTO_OFFSET_RESET, _offset_reset,
                       "Where a share group starts reading a partition it never read"),
        GroupConfigDef(SHARE_ISOLATION_LEVEL, choice(*ISOLATION_LEVELS),
                       "read_committed: share consumers get committed transactions only"),
    )
}
_SESSION_OVER_HEARTBEAT = ((CONSUMER_SESSION_TIMEOUT_MS, CONSUMER_HEARTBEAT_INTERVAL_MS),
                           (SHARE_SESSION_TIMEOUT_MS, SHARE_HEARTBEAT_INTERVAL_MS))


def validate(configs: Mapping[str, str | None],
             defaults: Mapping[str, str] | None = None) -> dict[str, str]:
    """Check a group's overrides (all of them, as they will be); return them normalised, or
    raise InvalidGroupConfigError. ``defaults`` complete them for the cross-key checks."""
    checked: dict[str, str] = {}
    for name, value in configs.items():
        definition = DEFINITIONS.get(name)
        if definition is None:
            raise InvalidGroupConfigError(f"Unknown group config name: {name}")
        if value is None:
            raise InvalidGroupConfigError(f"Group config '{name}' has a null value")
        try:
            definition.parse(value.strip())
        except ValueError as error:
            raise InvalidGroupConfigError(
                f"Invalid value '{value}' for '{name}': {error}") from None
        checked[name] = value.strip()
    merged = {**(defaults or {}), **checked}
    for session, heartbeat in _SESSION_OVER_HEARTBEAT:
        if session in merged and heartbeat in merged and (
                int(merged[session]) <= int(merged[heartbeat])):
            raise InvalidGroupConfigError(f"{session} must be greater than {heartbeat}")
    return checked


def effective(overrides: Mapping[str, str], defaults: Mapping[str, str]) -> dict[str, object]:
    """Every group config's parsed value: the override if present, else the broker's default."""
    assert set(defaults) == set(DEFINITIONS), set(defaults) ^ set(DEFINITIONS)
    return {name: d.parse(overrides.get(name, defaults[name]))
            for name, d in DEFINITIONS.items()}
