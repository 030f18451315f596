"""Topic configuration: the keys we honour, their defaults, validation and the LogConfig they make.

Configs travel as strings on the wire (CreateTopics, AlterConfigs, DescribeConfigs), so every
definition parses and checks a string. An invalid value is refused with INVALID_CONFIG (40) and a
one-line message naming the key; nothing is applied unless every key is valid.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import Errors, KafkaError
from ..records import codecs
from ..storage.config import LogConfig

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


class InvalidConfigError(KafkaError, ValueError):
    error_code = Errors.INVALID_CONFIG


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    default: str
    parse: Callable[[str], object]
    doc: str
    is_list: bool = False  # Kafka's ConfigDef type LIST: a comma-separated value


def int_in(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text.strip())
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}")
        return value

    return parse


def choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return text

    return parse


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError("must be true or false")
    return lowered == "true"


def _cleanup_policy(text: str) -> str:
    """``delete``, ``compact``, both (a comma-separated list, in any order, a repeated element
    counting once) or none: an empty list, which Kafka (KIP-1161) takes as ``delete`` with
    infinite retention (only DeleteRecords removes records)."""
    if not text.strip():
        return ""
    policies = {p.strip() for p in text.split(",")}
    if not policies <= {"delete", "compact"}:
        raise ValueError("must be delete, compact, compact,delete or empty")
    return ",".join(sorted(policies))


def _ratio(text: str) -> float:
    value = float(text.strip())
    if not 0.0 <= value <= 1.0:
        raise ValueError("must be between 0 and 1")
    return value


# Topic compression.type: "producer" keeps each batch as sent; any other value is the codec the
# leader rewrites batches with (Kafka's BrokerCompressionType, in its order).
COMPRESSION_CODECS: dict[str, int | None] = {
    "uncompressed": codecs.CODEC_NONE,
    "zstd": codecs.CODEC_ZSTD,
    "lz4": codecs.CODEC_LZ4,
    "snappy": codecs.CODEC_SNAPPY,
    "gzip": codecs.CODEC_GZIP,
    "producer": None,
}


def _compression_type(text: str) -> str:
    if text not in COMPRESSION_CODECS:
        raise ValueError(f"String must be one of: {', '.join(COMPRESSION_CODECS)}")
    return text


SEGMENT_BYTES_MIN = 14  # Kafka's lower bound: one record batch header must fit
DEFINITIONS: dict[str, ConfigDef] = {
    d.name: d
    for d in (
        ConfigDef("retention.ms", "604800000", int_in(-1, INT64_MAX), "Delete segments older"),
        ConfigDef("retention.bytes", "-1", int_in(-1, INT64_MAX), "Delete segments beyond size"),
        ConfigDef(
            "segment.bytes", "1073741824", int_in(SEGMENT_BYTES_MIN, INT32_MAX), "Roll size"
        ),
        ConfigDef("segment.ms", "604800000", int_in(1, INT64_MAX), "Roll age"),
        ConfigDef("max.message.bytes", "1048588", int_in(0, INT32_MAX), "Largest batch"),
        ConfigDef("min.insync.replicas", "1", int_in(1, INT32_MAX), "acks=all quorum"),
        ConfigDef(
            "message.timestamp.type",
            "CreateTime",
            choice("CreateTime", "LogAppendTime"),
            "Which timestamp records keep",
        ),
        ConfigDef("index.interval.bytes", "4096", int_in(0, INT32_MAX), "Index density"),
        ConfigDef("cleanup.policy", "delete", _cleanup_policy,
                  "delete: by retention; compact: the last record of each key; both; or none",
                  is_list=True),
        ConfigDef("delete.retention.ms", "86400000", int_in(0, INT64_MAX),
                  "How long a compacted topic keeps tombstones"),
        ConfigDef("min.cleanable.dirty.ratio", "0.5", _ratio,
                  "Share of uncleaned log that starts compaction"),
        ConfigDef("min.compaction.lag.ms", "0", int_in(0, INT64_MAX),
                  "Records stay uncompacted at least this long"),
        ConfigDef("max.compaction.lag.ms", str(INT64_MAX), int_in(1, INT64_MAX),
                  "Dirty records are compacted at the latest after this long"),
        ConfigDef(
            "unclean.leader.election.enable", "false", _bool, "Elect out-of-sync replicas"
        ),
        ConfigDef("compression.type", "producer", _compression_type,
                  "producer: batches kept as sent; else the codec the leader rewrites them with"),
    )
}


def validate(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Check topic config overrides; return them normalised, or raise InvalidConfigError."""
    checked = {}
    for name, value in configs.items():
        definition = DEFINITIONS.get(name)
        if definition is None:
            raise InvalidConfigError(f"Unknown topic config '{name}'")
        if value is None:
            raise InvalidConfigError(f"Topic config '{name}' has a null value")
        try:
            definition.parse(value)
        except ValueError as error:
            raise InvalidConfigError(f"Invalid value '{value}' for '{name}': {error}") from None
        checked[name] = value.strip()
    return checked


def effective(overrides: Mapping[str, str]) -> dict[str, Any]:
    """Every config's parsed value: the override if present, else the default."""
    return {
        name: d.parse(overrides.get(name, d.default)) for name, d in DEFINITIONS.items()
    }


def compression_codec(overrides: Mapping[str, str]) -> int | None:
    """The codec a leader writes this topic's batches with; None keeps the producer's."""
    return COMPRESSION_CODECS[overrides.get("compression.type", "producer").strip()]


def log_config(overrides: Mapping[str, str]) -> LogConfig:
    """The storage settings a topic's partitions use."""
    values = effective(overrides)
    return LogConfig(
        segment_bytes=values["segment.bytes"],
        segment_ms=values["segment.ms"],
        retention_ms=values["retention.ms"],
        retention_bytes=values["retention.bytes"],
        index_interval_bytes=values["index.interval.bytes"],
        max_message_bytes=values["max.message.bytes"],
        message_timestamp_type=values["message.timestamp.type"],
        cleanup_policy=values["cleanup.policy"],
        delete_retention_ms=values["delete.retention.ms"],
        min_cleanable_dirty_ratio=values["min.cleanable.dirty.ratio"],
        min_compaction_lag_ms=values["min.compaction.lag.ms"],
        max_compaction_lag_ms=values["max.compaction.lag.ms"],
    )
