"""Read a topic as a member of a share group (KIP-932) with confluent-kafka's ``ShareConsumer``,
and say how each record was acknowledged.

Theory of operation: a share group hands each record to one member at a time, *acquired* under
a lock; the member settles it with an acknowledgement: ACCEPT (done), RELEASE (back to the
group, to be delivered again with its delivery count one higher) or REJECT (archived: never
delivered again). A record whose lock runs out, or whose member leaves, goes back as if
released; one delivered ``group.share.delivery.count.limit`` times is archived instead.

``read_share`` joins the group, polls, acknowledges and leaves (closing the consumer ends its
share sessions, so it holds nothing afterwards):

- Every record is accepted unless the call says otherwise: ``acknowledge`` ("release" or
  "reject") for every record, or ``release``/``reject`` naming records (partition, offset); a
  named record takes its own type, the others ``acknowledge``'s. Accepting all is Kafka's
  implicit acknowledgement mode (records accepted when the next poll or the close commits);
  anything else is explicit mode, each record acknowledged after the poll that brought it.
- A share group has no end to read to: a member sees what the group makes available to it now.
  So the call waits up to ``timeout_s`` for the first record, then reads until a poll brings
  nothing for ``SHARE_IDLE_S`` (what was available is read) or, with ``count``, until that many
  records came (waiting up to ``timeout_s`` for each). ``count`` is also the member's
  ``max.poll.records``, so the broker hands it no more than that per fetch.
- A released record is available again at once, so the group's next fetch would hand it back
  to this same call. The call therefore stops after the poll in which it released a record
  (``stopped_after_release``): one delivery per call, and the next call sees it again, its
  delivery count one higher.
- Where the share group starts reading a partition is the group's ``share.auto.offset.reset``
  (a group config: ``alter_group_configs``; the broker's default is latest), not the client's:
  a share group has no committed offsets to start from.

Errors are one ``LogClientError`` line; librdkafka's log lines (its "Preview" warning of the
share consumer included) go to the package's quiet logger (``config.CLIENT_LOG``).
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass, field

import pandas as pd
from confluent_kafka import AcknowledgeType, Consumer, KafkaError, KafkaException, ShareConsumer
from confluent_kafka.admin import AdminClient

from .io import (
    CONSUME_TIMEOUT_S,
    CONSUMED_COLUMNS,
    METADATA_TIMEOUT_S,
    LogClientError,
    _check_count,
    _consumed_row,
    _topic_metadata,
    client_config,
)

ACKNOWLEDGE_TYPES = ("accept", "release", "reject")  # Kafka's AcknowledgeType, GAP aside
SHARE_IDLE_S = 1.0  # a poll this long bringing nothing: the group has nothing more for us now
POLL_S = 0.2
MAX_POLL_RECORDS = 500  # librdkafka's default max.poll.records
SHARE_CLIENT_ID = "pylog-nb"  # how the view and %log_groups name the member a magic starts
METADATA_GROUP = "pylog-nb-metadata"  # a consumer that only asks for metadata joins nothing
SHARE_COLUMNS = [*CONSUMED_COLUMNS, "delivery_count", "acknowledgement"]
_KAFKA_TYPES = {"accept": AcknowledgeType.ACCEPT, "release": AcknowledgeType.RELEASE,
                "reject": AcknowledgeType.REJECT}

Record = tuple[int, int]  # (partition, offset)


@dataclass
class ShareRead:
    """What one ``read_share`` did: the records (``frame``: the consumed columns, the delivery
    count and the acknowledgement each got), the named records it was not handed, and whether it
    stopped after releasing a record."""

    topic: str
    group: str
    frame: pd.DataFrame
    not_handed: list[Record] = field(default_factory=list)
    stopped_after_release: bool = False
    count: int | None = None
    timeout_s: float = CONSUME_TIMEOUT_S

    def summary(self) -> str:
        """One line: how many records, how each was acknowledged, what the call left out."""
        acks = self.frame["acknowledgement"].value_counts()
        done = {"accept": "accepted", "release": "released (available again, delivery count "
                "one higher next time, archived at the delivery limit)",
                "reject": "rejected (archived: never delivered again)"}
        parts = [f"{acks[kind]} {done[kind]}" for kind in ACKNOWLEDGE_TYPES if acks.get(kind)]
        noun = "record" if len(self.frame) == 1 else "records"
        text = f"{len(self.frame)} {noun} of {self.topic} for share group {self.group}"
        redelivered = int((self.frame["delivery_count"] > 1).sum())
        if redelivered:
            text += f" ({redelivered} delivered before)"
        text += f": {', '.join(parts)}" if parts else ": nothing available"
        if self.stopped_after_release:
            text += "; stopped after the poll that released a record (read again for the rest)"
        if self.count is not None and len(self.frame) > self.count:
            text += f"; the last fetch brought {len(self.frame) - self.count} past the count"
        elif (self.count is not None and len(self.frame) < self.count
              and not self.stopped_after_release):
            text += (f"; {len(self.frame)} of {self.count}: no more came within "
                     f"{self.timeout_s:g} s")
        if self.not_handed:
            named = ", ".join(f"{p}:{o}" for p, o in self.not_handed)
            text += (f"; not handed to this read: {named} (held by another member, settled "
                     "already, or not written yet)")
        return text


def consume_share(bootstrap: str, topic: str, group: str, **options) -> pd.DataFrame:
    """``read_share(...).frame``: the records read, with their delivery counts and how each was
    acknowledged."""
    return read_share(bootstrap, topic, group, **options).frame


def read_share(bootstrap: str, topic: str, group: str, *, count: int | None = None,
               timeout_s: float = CONSUME_TIMEOUT_S, acknowledge: str = "accept",
               release: Collection[Record] = (), reject: Collection[Record] = (),
               client_id: str = SHARE_CLIENT_ID) -> ShareRead:
    """Read ``topic`` as a member of share group ``group`` and acknowledge what it was handed
    (see the module docstring): every record ``acknowledge`` ("accept", the default,
    "release" or "reject"), except those named in ``release`` or ``reject``."""
    _check(group, count, timeout_s, acknowledge, release, reject)
    explicit = acknowledge != "accept" or bool(release) or bool(reject)
    _check_topic_and_group(bootstrap, topic, group)
    settings = {"group.id": group, "client.id": client_id,
                "share.acknowledgement.mode": "explicit" if explicit else "implicit",
                "max.poll.records": min(count, MAX_POLL_RECORDS) if count else MAX_POLL_RECORDS}
    named = {**{r: "release" for r in release}, **{r: "reject" for r in reject}}
    try:
        consumer = ShareConsumer(client_config(bootstrap, **settings))
    except KafkaException as error:
        raise LogClientError(f"{group}: {error.args[0].str()}") from None
    rows: list[dict] = []
    stopped = False
    try:
        consumer.subscribe([topic])
        stopped = _read(consumer, rows, count, timeout_s, explicit, acknowledge, named)
        consumer.commit_sync()
    except KafkaException as error:
        raise LogClientError(f"{topic}: {_words(error)}") from None
    finally:
        try:
            consumer.close()  # leaves the group; what it still held goes back
        except KafkaException:
            pass  # the error that ended the read says more
    handed = {(row["partition"], row["offset"]) for row in rows}
    return ShareRead(topic, group, pd.DataFrame(rows, columns=SHARE_COLUMNS),
                     sorted(set(named) - handed), stopped, count, timeout_s)


def _read(consumer: ShareConsumer, rows: list[dict], count: int | None, timeout_s: float,
          explicit: bool, acknowledge: str, named: dict[Record, str]) -> bool:
    """Poll and acknowledge until the call is done; whether it stopped after a release."""
    deadline = time.monotonic() + timeout_s  # for the first record, or each with a count
    while count is None or len(rows) < count:
        messages = [m for m in consumer.poll(POLL_S) if _record(m)]
        if not messages:
            if time.monotonic() >= deadline:
                return False
            continue
        released = False
        for message in messages:
            partition, offset = message.partition(), message.offset()
            assert partition is not None and offset is not None  # a record has both
            kind = named.get((partition, offset), acknowledge)
            if explicit:
                consumer.acknowledge(message, _KAFKA_TYPES[kind])
            released |= kind == "release"
            rows.append({**_consumed_row(message), "delivery_count": message.delivery_count(),
                         "acknowledgement": kind})
        if released:
            return True
        deadline = time.monotonic() + (timeout_s if count is not None else SHARE_IDLE_S)
    return False


def _record(message) -> bool:
    """A record, not an error; an error that will not heal by itself ends the read."""
    error = message.error()
    if error is None:
        return True
    if error.fatal() or not error.retriable():
        raise KafkaException(error)
    return False


def _check(group: str, count: int | None, timeout_s: float, acknowledge: str,
           release: Collection[Record], reject: Collection[Record]) -> None:
    if not group:
        raise LogClientError("name the share group")
    if count is not None:
        _check_count(count)
        if count == 0:
            raise LogClientError("a share group read takes at least one record")
    if timeout_s <= 0:
        raise LogClientError(f"timeout must be positive, not {timeout_s:g}")
    if acknowledge not in ACKNOWLEDGE_TYPES:
        raise LogClientError(f"acknowledge must be one of {', '.join(ACKNOWLEDGE_TYPES)}, "
                             f"not {acknowledge!r}")
    for partition, offset in [*release, *reject]:
        if partition < 0 or offset < 0:
            raise LogClientError(f"{partition}:{offset} is no record: partition and offset "
                                 "are never negative")
    both = sorted(set(release) & set(reject))
    if both:
        raise LogClientError(f"record {both[0][0]}:{both[0][1]} is named to release and to "
                             "reject: choose one")


def _check_topic_and_group(bootstrap: str, topic: str, group: str) -> None:
    """LogClientError for a topic the cluster does not have (a share consumer would wait for it
    in silence) or a group id a classic or consumer group already uses (its coordinator refuses
    the share member)."""
    # A consumer's metadata request creates no topic (allow.auto.create.topics is false for
    # consumers); the admin client's would, where the broker creates topics on demand.
    reader = Consumer(client_config(bootstrap, **{"group.id": METADATA_GROUP}))
    try:
        _topic_metadata(reader, topic)
    except KafkaException as error:
        raise LogClientError(f"{topic}: {_words(error)}") from None
    finally:
        reader.close()
    admin = AdminClient(client_config(bootstrap))
    try:
        future = admin.describe_consumer_groups([group],
                                                request_timeout=METADATA_TIMEOUT_S)[group]
        described = future.result(METADATA_TIMEOUT_S + 5)
    except KafkaException as error:
        if error.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:
            return  # no classic or consumer group has the id (a share group may)
        raise LogClientError(f"{topic}: {_words(error)}") from None
    state = str(getattr(described.state, "name", described.state)).lower()
    if state not in ("dead", "unknown"):
        kind = {"CLASSIC": "classic", "CONSUMER": "consumer"}.get(
            getattr(described.type, "name", ""), "consumer")
        raise LogClientError(f"group {group} is a {kind} group ({state}): a share group needs "
                             "an id no other group uses")


def _words(error: KafkaException) -> str:
    kafka_error = error.args[0] if error.args else None
    return kafka_error.str() if isinstance(kafka_error, KafkaError) else str(error)
