"""The ``pylog`` source's options, parsed and checked once on the driver.

They are Spark's Kafka source options (``subscribe``, ``startingOffsets``, ``maxOffsetsPerTrigger``
...), so a notebook moves between ``format("kafka")`` on a JVM cluster and ``format("pylog")``
by changing one word. Options prefixed ``kafka.`` go to the client (librdkafka) with the prefix
dropped, as Spark passes them to its Java consumer. A bad option is one readable line, and so
is a name that looks like a typo of one of the source's own (``check_option_names``); other
unknown names pass, as Spark lets them. ``kafka.group.id`` is the source's, not the client's:
a stream commits its progress there (see ``source.py``).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

EARLIEST = -2  # in per-partition offset JSON, as in Spark's Kafka source
LATEST = -1
CLIENT_PREFIX = "kafka."
# Settings the source owns: a user value would break how ranges are read (Spark refuses these too)
OWNED_CLIENT_SETTINGS = ("auto.offset.reset", "enable.auto.commit", "key.deserializer",
                         "value.deserializer", "enable.partition.eof")
POLL_TIMEOUT_MS_DEFAULT = 120_000  # Spark's kafkaConsumer.pollTimeoutMs (spark.network.timeout)
TOPIC_SPECS = ("assign", "subscribe", "subscribepattern")
ISOLATION_LEVEL = "isolation.level"  # kafka.isolation.level: which transactional records show
READ_UNCOMMITTED = "read_uncommitted"  # Spark's Kafka source sets none: the consumer's default
READ_COMMITTED = "read_committed"  # up to the last stable offset (LSO), aborted records skipped
ISOLATION_LEVELS = (READ_UNCOMMITTED, READ_COMMITTED)
GROUP_ID = "group.id"  # kafka.group.id: the group a stream commits its progress into
GROUP_ID_PREFIX_DEFAULT = "spark-kafka-source"  # Spark's groupIdPrefix default
# The Kafka source's options, by lowercased name, as Spark's documentation spells them. Those
# this source does not implement (minOffsetsPerTrigger, maxTriggerDelay...) are accepted and
# ignored, as Spark ignores options a source does not know: they keep near misses apart.
SPELLED = {name.lower(): name for name in (
    "assign", "subscribe", "subscribePattern", "startingOffsets", "endingOffsets",
    "startingTimestamp", "endingTimestamp", "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy", "failOnDataLoss",
    "kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries", "fetchOffset.retryIntervalMs",
    "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay", "minPartitions",
    "maxRecordsPerPartition", "groupIdPrefix", "includeHeaders", "bootstrap.servers")}
SOURCE_OPTIONS = frozenset(SPELLED)
# Client settings the source reads itself (a near miss of one, unprefixed, is a typo)
CLIENT_OPTIONS = ("kafka.bootstrap.servers", "kafka.group.id", "kafka.isolation.level")
NEAR_MISS_CUTOFF = 0.85  # difflib's ratio: startingOffset, subscibe; not partition (0.82)


class SparkSourceError(ValueError):
    """A bad option or an impossible read; the message is one line for the notebook."""


@dataclass(frozen=True)
class TopicSpec:
    """Which partitions to read: exactly one of Spark's three ways of naming them."""

    kind: str  # "assign", "subscribe" or "subscribepattern"
    topics: tuple[str, ...] = ()  # subscribe
    pattern: str = ""  # subscribePattern
    assigned: tuple[tuple[str, int], ...] = ()  # assign

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribepattern":
            return re.fullmatch(self.pattern, topic) is not None
        return any(topic == t for t, _ in self.assigned)


@dataclass(frozen=True)
class Bound:
    """Where a read starts or ends: earliest, latest, per-partition offsets or a timestamp."""

    kind: str  # "earliest", "latest", "offsets" or "timestamp"
    offsets: Mapping[tuple[str, int], int] = field(default_factory=dict)  # -2/-1 allowed
    timestamp_ms: int | None = None  # one timestamp for every partition
    timestamps_ms: Mapping[tuple[str, int], int] = field(default_factory=dict)


@dataclass(frozen=True)
class SourceOptions:
    """Every option of a read, checked; plain data so it pickles to executors."""

    client: Mapping[str, str]  # librdkafka settings, bootstrap.servers included
    topics: TopicSpec
    starting: Bound
    ending: Bound
    include_headers: bool = False
    min_partitions: int | None = None
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = POLL_TIMEOUT_MS_DEFAULT
    group_id: str | None = None  # kafka.group.id: a stream commits each batch's end there
    group_id_prefix: str = GROUP_ID_PREFIX_DEFAULT

    @property
    def reader_group(self) -> str:
        """The group.id of the consumers that read ranges: assigned partitions, they never join
        a group nor commit (librdkafka wants an id all the same), as Spark's consumers."""
        return self.group_id or f"{self.group_id_prefix}-reader"


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    lowered = check_option_names(options)
    starting = _bound(lowered, "starting", "latest" if streaming else "earliest")
    ending = _bound(lowered, "ending", "latest")
    if starting.kind == "latest" and not streaming:
        raise SparkSourceError("startingOffsets=latest is for streaming reads; a batch read "
                               "from latest is empty (use earliest or offsets)")
    if streaming and any(k.startswith("ending") for k in lowered):
        raise SparkSourceError("ending offsets are for batch reads; a stream has no end")
    if ending.kind == "earliest" or EARLIEST in ending.offsets.values():
        raise SparkSourceError("endingOffsets cannot be earliest (-2): the read would be empty")
    client = _isolated(client_settings(lowered))
    group_id = client.pop(GROUP_ID, None)
    if group_id is not None and not group_id.strip():
        raise SparkSourceError("option kafka.group.id is empty: name a group, or leave it out")
    prefix = lowered.get("groupidprefix", GROUP_ID_PREFIX_DEFAULT)
    if not prefix.strip():
        raise SparkSourceError("option groupIdPrefix is empty")
    return SourceOptions(
        client=client, topics=_topic_spec(lowered),
        starting=starting, ending=ending,
        include_headers=_flag(lowered, "includeheaders", False),
        min_partitions=_positive(lowered, "minpartitions"),
        max_offsets_per_trigger=_positive(lowered, "maxoffsetspertrigger"),
        fail_on_data_loss=_flag(lowered, "failondataloss", True),
        poll_timeout_ms=_positive(lowered, "kafkaconsumer.polltimeoutms")
        or POLL_TIMEOUT_MS_DEFAULT,
        group_id=group_id, group_id_prefix=prefix)


def check_option_names(options: Mapping[str, str]) -> dict[str, str]:
    """The options with lowercased names (Spark's options are case-insensitive), or one line
    naming an option that looks like a typo of one of the source's own: a near miss of its
    names (``startingOffset``, ``subscibe``), or a client setting it reads without its
    ``kafka.`` prefix (``group.id``). Other unknown options pass, as Spark lets them: a
    ``kafka.`` setting goes to the client, and Spark's own options share the map."""
    lowered = {k.lower(): str(v) for k, v in options.items()}
    for name in sorted(set(lowered) - SOURCE_OPTIONS):
        if name.startswith(CLIENT_PREFIX):
            continue
        original = next(k for k in options if k.lower() == name)
        if CLIENT_PREFIX + name in CLIENT_OPTIONS:
            raise SparkSourceError(f"unknown option {original}: a client setting is given as "
                                   f"{CLIENT_PREFIX}{original}")
        close = difflib.get_close_matches(name, SOURCE_OPTIONS, n=1, cutoff=NEAR_MISS_CUTOFF)
        if close:
            raise SparkSourceError(f"unknown option {original}: did you mean "
                                   f"{_spelled(close[0])}?")
    return lowered


def _spelled(name: str) -> str:
    """A lowercased option name as Spark's documentation spells it."""
    return SPELLED.get(name, name)


def client_settings(lowered: Mapping[str, str]) -> dict[str, str]:
    """The client's settings: ``kafka.*`` options, bootstrap.servers under either name."""
    settings = {k[len(CLIENT_PREFIX):]: v for k, v in lowered.items()
                if k.startswith(CLIENT_PREFIX)}
    if "bootstrap.servers" in lowered:
        settings["bootstrap.servers"] = lowered["bootstrap.servers"]
    if not settings.get("bootstrap.servers"):
        raise SparkSourceError("option bootstrap.servers (or kafka.bootstrap.servers) is required")
    owned = sorted(set(settings) & set(OWNED_CLIENT_SETTINGS))
    if owned:
        raise SparkSourceError(f"option kafka.{owned[0]} is not supported: the source manages it")
    return settings


def _isolated(settings: dict[str, str]) -> dict[str, str]:
    """The client settings with ``isolation.level`` always named (librdkafka's own default is
    read_committed; the Java consumer's, which Spark's source keeps, is read_uncommitted)."""
    level = settings.setdefault(ISOLATION_LEVEL, READ_UNCOMMITTED)
    if level not in ISOLATION_LEVELS:
        raise SparkSourceError(f"option kafka.isolation.level must be read_uncommitted or "
                               f"read_committed, not {level!r}")
    return settings


def _topic_spec(lowered: Mapping[str, str]) -> TopicSpec:
    given = [k for k in TOPIC_SPECS if lowered.get(k)]
    if len(given) != 1:
        raise SparkSourceError("give exactly one of the options assign, subscribe or "
                               f"subscribePattern (got {len(given)})")
    kind, text = given[0], lowered[given[0]]
    if kind == "subscribe":
        topics = tuple(t.strip() for t in text.split(",") if t.strip())
        if not topics:
            raise SparkSourceError("subscribe names no topic")
        return TopicSpec(kind, topics=topics)
    if kind == "subscribepattern":
        try:
            re.compile(text)
        except re.error as error:
            raise SparkSourceError(f"subscribePattern is not a regex: {error}") from None
        return TopicSpec(kind, pattern=text)
    assigned = tuple(sorted(_partition_json(text, "assign")))
    return TopicSpec(kind, assigned=assigned)


def _bound(lowered: Mapping[str, str], which: str, default: str) -> Bound:
    """startingTimestamp wins over startingOffsetsByTimestamp, which wins over startingOffsets."""
    if f"{which}timestamp" in lowered:
        return Bound("timestamp", timestamp_ms=_non_negative(lowered, f"{which}timestamp"))
    if f"{which}offsetsbytimestamp" in lowered:
        text = lowered[f"{which}offsetsbytimestamp"]
        return Bound("timestamp", timestamps_ms=_offsets_json(text, f"{which}OffsetsByTimestamp"))
    text = lowered.get(f"{which}offsets", default).strip()
    if text in ("earliest", "latest"):
        return Bound(text)
    offsets = _offsets_json(text, f"{which}Offsets")
    if any(offset < EARLIEST for offset in offsets.values()):
        raise SparkSourceError(f"{which}Offsets: offsets are >= 0, or -2 (earliest), -1 (latest)")
    return Bound("offsets", offsets=offsets)


def _offsets_json(text: str, name: str) -> dict[tuple[str, int], int]:
    """``{"topic": {"0": 23, "1": -2}}`` as {(topic, partition): offset}."""
    document = _json(text, name)
    if not isinstance(document, dict) or not all(isinstance(v, dict) for v in document.values()):
        raise SparkSourceError(f'{name} must be earliest, latest or JSON like '
                               '{"topic": {"0": 23}}')
    offsets = {}
    for topic, partitions in document.items():
        for partition, offset in partitions.items():
            if not isinstance(offset, int) or not str(partition).lstrip("-").isdigit():
                raise SparkSourceError(f"{name}: {topic} partition {partition!r} has offset "
                                       f"{offset!r}; partitions and offsets are integers")
            offsets[(topic, int(partition))] = offset
    return offsets


def _partition_json(text: str, name: str) -> list[tuple[str, int]]:
    """``{"topic": [0, 1]}`` as [(topic, partition)]."""
    document = _json(text, name)
    if not isinstance(document, dict) or not all(
            isinstance(v, list) and all(isinstance(p, int) and p >= 0 for p in v)
            for v in document.values()) or not document:
        raise SparkSourceError(f'{name} must be JSON like {{"topic": [0, 1]}}')
    return [(topic, p) for topic, partitions in document.items() for p in partitions]


def _json(text: str, name: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise SparkSourceError(f"{name} is not valid JSON: {error.msg} "
                               f"at character {error.pos}") from None


def _flag(lowered: Mapping[str, str], key: str, default: bool) -> bool:
    text = lowered.get(key, str(default)).strip().lower()
    if text not in ("true", "false"):
        raise SparkSourceError(f"option {key} must be true or false, not {text!r}")
    return text == "true"


def _positive(lowered: Mapping[str, str], key: str) -> int | None:
    if key not in lowered:
        return None
    value = _integer(lowered, key)
    if value <= 0:
        raise SparkSourceError(f"option {key} must be a positive integer, not {value}")
    return value


def _non_negative(lowered: Mapping[str, str], key: str) -> int:
    value = _integer(lowered, key)
    if value < 0:
        raise SparkSourceError(f"option {key} must be >= 0, not {value}")
    return value


def _integer(lowered: Mapping[str, str], key: str) -> int:
    try:
        return int(lowered[key])
    except ValueError:
        raise SparkSourceError(f"option {key} must be an integer, not {lowered[key]!r}") from None
