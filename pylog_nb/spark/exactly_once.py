"""Exactly-once writes (``exactlyOnce=true``): each task's rows in one Kafka transaction, once.

Theory of operation. Spark runs a write as tasks; a task may run again (a retry, a speculative
copy, or a whole micro-batch re-executed after the driver died between the tasks' end and the
checkpoint's commit). At least once, a re-run writes its rows again. Here each task:

1. takes a transactional id named by what must not be written twice and by nothing else:
   ``<prefix>-<scope>-<task partition id>``. The scope is the streaming query's id (the Spark
   local property ``sql.streaming.queryId``, kept in the checkpoint, so the same across
   restarts and new for a new checkpoint) or, for a batch write, a job id the driver draws once
   per write. Every attempt of a task partition shares the id, and no two partitions do;
2. calls ``init_transactions``: the coordinator fences every older producer of that id (a
   zombie attempt can no longer write or commit) and ends the transaction it left open;
3. reads its marker: the offset that the consumer group named by the same transactional id has
   committed on partition 0 of the sink topic, asked read_committed (OffsetFetch with
   require_stable, so a commit still in flight is waited for, never missed). The offset is the
   micro-batch id (0 for a batch write) the last committed transaction of this task partition
   wrote. If it is this batch's id or a later one, the rows are already in the log: the task
   writes nothing;
4. otherwise, in one transaction, sends its rows and commits the marker with them
   (``send_offsets_to_transaction``, TxnOffsetCommit), and commits. The rows and the marker
   become visible together, to read_committed consumers, or not at all.

Micro-batches commit in order (batch n + 1 starts once n is in the checkpoint), so a marker
at or past the batch id proves this task partition's rows of this batch were committed. The
whole argument rests on one assumption: a re-executed micro-batch reads the same rows into
the same task partitions. It holds for the ``pylog`` source (a batch's offsets come from the
checkpoint's offset log and its planning is a function of them) and Spark's deterministic
shuffles; not for non-deterministic expressions (``rand()``, ``uuid()``, the wall clock) or
sources that read differently on a retry.

The marker lives in the broker's group offsets, which every Kafka has: the same code gives
exactly once against Apache Kafka, with ACLs for the transactional ids and groups named by the
prefix. Spark's own Kafka sink (at least once) has no such option, hence its own names.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from confluent_kafka import Consumer, KafkaException, TopicPartition
from pyspark import TaskContext

from ..client.config import client_config
from .options import SparkSourceError

EXACTLY_ONCE = "exactlyonce"  # option names, lowered as Spark passes them
TRANSACTIONAL_ID_PREFIX = "transactionalidprefix"
TRANSACTIONAL_ID_PREFIX_DEFAULT = "pylog-eos"
QUERY_ID_PROPERTY = "sql.streaming.queryId"  # Spark local properties of a streaming task
BATCH_ID_PROPERTY = "streaming.sql.batchId"
BATCH_WRITE_BATCH_ID = 0  # a batch write is one "micro-batch"
MARKER_PARTITION = 0  # of the sink topic: every topic has it
MARKER_METADATA = "pylog exactlyOnce batch {batch}"
TXN_CALL_TIMEOUT_S = 120.0  # init, marker read, commit: through a coordinator's failover
# The client settings the sink owns in this mode (a user value would undo the guarantee).
OWNED_SETTINGS = ("transactional.id", "enable.idempotence")
# Producer-only settings a marker consumer would warn about: not given to it.
CONSUMER_SKIPS = ("acks", "linger.ms", "delivery.report.only.error", "transaction.timeout.ms",
                  "compression.type", "batch.size", "batch.num.messages", "queue.buffering.max.ms",
                  "queue.buffering.max.messages", "queue.buffering.max.kbytes",
                  "message.send.max.retries", "retries", "retry.backoff.ms",
                  "message.timeout.ms", "delivery.timeout.ms")


@dataclass(frozen=True)
class ExactlyOnce:
    """The checked exactlyOnce options: plain data, pickled to the tasks."""

    prefix: str
    job: str | None = None  # a batch write's scope, drawn on the driver; None when streaming


def parse_exactly_once(lowered: Mapping[str, str], topic: str | None,
                       client: Mapping[str, str]) -> ExactlyOnce | None:
    """``exactlyOnce`` and ``transactionalIdPrefix`` checked; None means at least once."""
    text = lowered.get(EXACTLY_ONCE, "false").strip().lower()
    if text not in ("true", "false"):
        raise SparkSourceError(f"option exactlyOnce must be true or false, not {text!r}")
    prefix = lowered.get(TRANSACTIONAL_ID_PREFIX)
    if text == "false":
        if prefix is not None:
            raise SparkSourceError("option transactionalIdPrefix is for exactlyOnce=true")
        return None
    prefix = TRANSACTIONAL_ID_PREFIX_DEFAULT if prefix is None else prefix.strip()
    if not prefix:
        raise SparkSourceError("option transactionalIdPrefix is empty")
    if topic is None:
        raise SparkSourceError("exactlyOnce=true needs the topic option (partition 0 of the "
                               "topic keeps each task's marker)")
    owned = sorted(set(client) & set(OWNED_SETTINGS))
    if owned:
        raise SparkSourceError(f"option kafka.{owned[0]} is not supported with exactlyOnce=true: "
                               "the sink manages it")
    return ExactlyOnce(prefix)


@dataclass(frozen=True)
class TaskScope:
    """What one task attempt writes for: its transactional id and batch id."""

    transactional_id: str
    batch_id: int


def task_scope(mode: ExactlyOnce) -> TaskScope:
    """The running task's scope, from Spark's TaskContext; one line when Spark gives none."""
    context = TaskContext.get()
    if context is None:
        raise SparkSourceError("exactlyOnce=true: not inside a Spark task")
    if mode.job is not None:
        scope, batch_id = mode.job, BATCH_WRITE_BATCH_ID
    else:
        query, batch = (context.getLocalProperty(QUERY_ID_PROPERTY),
                        context.getLocalProperty(BATCH_ID_PROPERTY))
        if not query or batch is None:
            raise SparkSourceError("exactlyOnce=true: Spark named no streaming query or "
                                   "micro-batch for this task")
        scope, batch_id = query, int(batch)
    return TaskScope(f"{mode.prefix}-{scope}-{context.partitionId()}", batch_id)


def first_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch] | None:
    """``batches`` from the first with a row on, or None when there is no row at all."""
    for batch in batches:
        if batch.num_rows:
            return itertools.chain([batch], batches)
    return None


class Marker:
    """A task partition's marker: the group named by its transactional id, read_committed."""

    def __init__(self, client: Mapping[str, str], scope: TaskScope, topic: str) -> None:
        settings = {k: v for k, v in client.items() if k not in CONSUMER_SKIPS}
        self.consumer = Consumer(client_config(
            settings.pop("bootstrap.servers"), **settings, **{
                "group.id": scope.transactional_id, "enable.auto.commit": False,
                "isolation.level": "read_committed"}))  # OffsetFetch require_stable
        self.partition = TopicPartition(topic, MARKER_PARTITION)
        self.scope = scope

    def done(self) -> bool:
        """True when this task partition already committed this batch (or a later one)."""
        try:
            (committed,) = self.consumer.committed([self.partition], TXN_CALL_TIMEOUT_S)
        except KafkaException as error:
            raise SparkSourceError(f"{self.scope.transactional_id}: reading the marker: "
                                   f"{error.args[0].str()}") from None
        if committed.error is not None:
            raise SparkSourceError(f"{self.scope.transactional_id}: reading the marker: "
                                   f"{committed.error.str()}")
        return committed.offset >= 0 and committed.offset >= self.scope.batch_id

    def offsets(self) -> list[TopicPartition]:
        """What the transaction commits: this batch's id, on the marker partition."""
        return [TopicPartition(self.partition.topic, MARKER_PARTITION, self.scope.batch_id,
                               MARKER_METADATA.format(batch=self.scope.batch_id))]

    def close(self) -> None:
        self.consumer.close()
