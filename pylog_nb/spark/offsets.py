"""The driver's questions to the cluster: which partitions, and which offsets.

One ``AdminClient`` answers them with batched ListOffsets requests (earliest, latest, by time),
so planning a read of N partitions costs a few round trips, not N. It speaks to any Kafka, not
only to this project's brokers.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
)
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from ..client.config import client_config, through_failover
from ..client.status import waiting
from .options import ISOLATION_LEVEL, READ_COMMITTED, Bound, SparkSourceError, TopicSpec
from .planning import TopicPartition, Watermarks

METADATA_TIMEOUT_S = 30.0  # for one question, retries included
ATTEMPT_TIMEOUT_S = 2.0  # one ListOffsets round; a leader election takes about 3 s here
RETRY_BACKOFF_S = 0.5
NO_OFFSET = -1  # ListOffsets by time: no record at or after the timestamp
GROUP_TIMEOUT_S = 10.0  # one DescribeGroups or OffsetCommit, coordinator lookup included
MEMBERS_NAMED = 3  # client ids named in the refusal of a group in use
RETRIABLE = (KafkaError._TIMED_OUT, KafkaError.LEADER_NOT_AVAILABLE,
             KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.OFFSET_NOT_AVAILABLE)


class ClusterOffsets:
    """Partition lists and offsets, asked of the cluster named by the client settings.

    With ``isolation.level`` read_committed the latest offset is the last stable offset (LSO),
    where a read_committed consumer stops: below the first record of an open transaction."""

    def __init__(self, client: Mapping[str, str]) -> None:
        self._settings = dict(client)
        committed = self._settings.pop(ISOLATION_LEVEL, None) == READ_COMMITTED  # a consumer's
        self._isolation = (IsolationLevel.READ_COMMITTED if committed
                           else IsolationLevel.READ_UNCOMMITTED)
        self._admin = self._new_admin()

    def _new_admin(self) -> AdminClient:
        settings = dict(self._settings)
        return AdminClient(client_config(settings.pop("bootstrap.servers"), **settings))

    def partitions(self, spec: TopicSpec, *, missing_ok: bool) -> list[TopicPartition]:
        """The partitions ``spec`` names that exist now; internal topics never match a pattern."""
        topics = self._topics()
        if spec.kind == "assign":
            for topic, partition in spec.assigned:
                if partition >= topics.get(topic, 0) and not missing_ok:
                    raise SparkSourceError(f"assign names {topic}-{partition}, which does not "
                                           "exist")
            return [tp for tp in spec.assigned if tp[1] < topics.get(tp[0], 0)]
        if spec.kind == "subscribe" and not missing_ok:
            missing = [t for t in spec.topics if t not in topics]
            if missing:
                raise SparkSourceError(f"topic {missing[0]} does not exist")
        chosen = [t for t in topics if spec.matches(t) and not t.startswith("__")]
        return [(t, p) for t in sorted(chosen) for p in range(topics[t])]

    def watermarks(self, tps: Iterable[TopicPartition]) -> Watermarks:
        tps = list(tps)
        committed = self._isolation == IsolationLevel.READ_COMMITTED
        return Watermarks(low=self._list(tps, OffsetSpec.earliest()),
                          high=self._list(tps, OffsetSpec.latest()),
                          end_name="last stable offset" if committed else "high watermark")

    def by_time(self, bound: Bound, tps: Iterable[TopicPartition]) -> dict[TopicPartition,
                                                                           int | None]:
        """For a timestamp bound, each partition's first offset at or after its timestamp
        (None when every record is older); empty for other bounds."""
        if bound.kind != "timestamp":
            return {}
        wanted = {tp: bound.timestamp_ms if bound.timestamp_ms is not None
                  else bound.timestamps_ms.get(tp) for tp in tps}
        unnamed = [tp for tp, ts in wanted.items() if ts is None]
        if unnamed:
            raise SparkSourceError(f"the timestamps name no time for {unnamed[0][0]}-"
                                   f"{unnamed[0][1]}: give every partition")
        offsets: dict[TopicPartition, int | None] = {}
        for timestamp_ms in set(wanted.values()):
            assert timestamp_ms is not None  # partitions without a timestamp were refused
            same = [tp for tp, ts in wanted.items() if ts == timestamp_ms]
            found = self._list(same, OffsetSpec.for_timestamp(timestamp_ms), by_time=True)
            offsets.update({tp: (o if o >= 0 else None) for tp, o in found.items()})
        return offsets

    def check_group_unused(self, group_id: str) -> None:
        """SparkSourceError, one line, when the group ``group_id`` has members: a query commits
        its progress into a group without joining it, which a live group's own commits would
        overwrite (and Kafka refuses commits from outside a group with members)."""
        def describe():
            futures = self._admin.describe_consumer_groups([group_id],
                                                           request_timeout=GROUP_TIMEOUT_S)
            return futures[group_id].result(GROUP_TIMEOUT_S * 1.5)

        try:
            described = through_failover(describe)
        except KafkaException as error:
            if error.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:
                return
            raise SparkSourceError(f"cannot describe group {group_id} (kafka.group.id): "
                                   f"{error.args[0].str()}") from None
        if described.state == ConsumerGroupState.DEAD or not described.members:
            return
        clients = sorted({m.client_id for m in described.members})
        named = ", ".join(clients[:MEMBERS_NAMED]) + (", ..." if len(clients) > MEMBERS_NAMED
                                                      else "")
        raise SparkSourceError(
            f"group {group_id} (kafka.group.id) is in use by {len(described.members)} active "
            f"member(s) ({named}): a query commits its progress only into a group no consumer "
            "is in; choose another kafka.group.id")

    def commit_group(self, group_id: str, offsets: Mapping[TopicPartition, int],
                     metadata: str) -> None:
        """Commit ``offsets`` (each partition's next offset to read) to ``group_id`` with
        ``metadata``, from outside the group (AlterConsumerGroupOffsets: no membership)."""
        if not offsets:
            return
        request = [ConsumerGroupTopicPartitions(group_id, [
            KafkaTopicPartition(topic, partition, offset, metadata=metadata)
            for (topic, partition), offset in sorted(offsets.items())])]

        def commit() -> None:
            futures = self._admin.alter_consumer_group_offsets(request,
                                                               request_timeout=GROUP_TIMEOUT_S)
            answer = futures[group_id].result(GROUP_TIMEOUT_S * 1.5)
            for tp in answer.topic_partitions or []:
                if tp.error is not None:
                    raise KafkaException(tp.error)

        try:
            through_failover(commit)
        except KafkaException as error:
            if error.args[0].code() == KafkaError.UNKNOWN_MEMBER_ID:  # a member joined since
                raise SparkSourceError(
                    f"group {group_id} (kafka.group.id) has active members now: a query "
                    "commits its progress only into a group no consumer is in; restart it with "
                    "another kafka.group.id") from None
            raise SparkSourceError(f"cannot commit the query's offsets to group {group_id} "
                                   f"(kafka.group.id): {error.args[0].str()}") from None

    def _topics(self) -> dict[str, int]:
        try:
            metadata = self._admin.list_topics(timeout=METADATA_TIMEOUT_S)
        except KafkaException as error:
            raise SparkSourceError(f"cannot read the cluster's topics: "
                                   f"{error.args[0].str()}") from None
        return {name: len(t.partitions) for name, t in metadata.topics.items()
                if t.error is None}

    def _list(self, tps: list[TopicPartition], spec: OffsetSpec, *,
              by_time: bool = False) -> dict[TopicPartition, int]:
        """Offsets of ``tps``, asked again while a leader is moving (a killed leader stays in
        the metadata until the controller fences it: a request to it only times out)."""
        if not tps:
            return {}
        deadline_s = time.monotonic() + METADATA_TIMEOUT_S
        with waiting(f"asking the leaders of {_names(tps)} for offsets…") as status:
            while True:
                offsets, problem = self._try_list(tps, spec, by_time)
                if problem is None:
                    return offsets
                if time.monotonic() > deadline_s:
                    raise SparkSourceError(f"cannot list offsets: {problem}")
                status.say(f"waiting for the leaders of {_names(tps)} to answer ({problem}: "
                           f"a leader may be moving; up to {METADATA_TIMEOUT_S:g} s)…")
                time.sleep(RETRY_BACKOFF_S)
                self._admin = self._new_admin()  # librdkafka's admin keeps asking a dead leader

    def _try_list(self, tps: list[TopicPartition], spec: OffsetSpec,
                  by_time: bool) -> tuple[dict, str | None]:
        futures = self._admin.list_offsets({KafkaTopicPartition(t, p): spec for t, p in tps},
                                           isolation_level=self._isolation,
                                           request_timeout=ATTEMPT_TIMEOUT_S)
        no_record = NO_OFFSET if by_time else None
        offsets = {}
        for tp, future in futures.items():
            try:
                offset = future.result().offset
            except KafkaException as error:
                if not (error.args[0].retriable() or error.args[0].code() in RETRIABLE):
                    raise SparkSourceError(f"cannot list offsets of {tp.topic}-{tp.partition}: "
                                           f"{error.args[0].str()}") from None
                return {}, error.args[0].str()
            if offset < 0 and offset != no_record:
                return {}, f"no answer for {tp.topic}-{tp.partition} in {ATTEMPT_TIMEOUT_S} s"
            offsets[(tp.topic, tp.partition)] = offset
        return offsets, None


def _names(tps: list[TopicPartition]) -> str:
    """The topics of ``tps`` as a user named them: "clicks", "clicks and orders"."""
    topics = sorted({topic for topic, _partition in tps})
    return topics[0] if len(topics) == 1 else f"{', '.join(topics[:-1])} and {topics[-1]}"
