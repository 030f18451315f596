"""The partition-leader side of transaction verification: AddPartitionsToTxn with verify_only.

Theory of operation (Kafka's AddPartitionsToTxnManager, KIP-890 part 1):

- Produce hands over a transactional producer's partitions that have no ongoing transaction
  here (``verify_transaction``). The manager finds the transactional id's coordinator as
  FindCoordinator does (the leader of its ``__transaction_state`` partition in the metadata
  image); no topic, no live leader or a partition count other than configured: every partition
  is COORDINATOR_NOT_AVAILABLE.
- Verifications are batched per coordinator broker: one AddPartitionsToTxn v4 request (every
  transaction ``verify_only``) is in flight per broker at a time; the ones arriving meanwhile
  wait and go together in the next. At most one entry per transactional id waits: a newer
  epoch replaces an older one (answered INVALID_PRODUCER_EPOCH), the same epoch replaces it
  too (a client retry: NETWORK_EXCEPTION), an older epoch is refused INVALID_PRODUCER_EPOCH.
- A coordinator on this broker is asked directly (the core's ``add_partitions`` with
  ``verify_only``); another over a ``BrokerChannel`` of our own.
- The answer is the unverified partitions with their error, as Kafka maps them for a producer:
  PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH, a request-level CLUSTER_AUTHORIZATION_FAILED
  INVALID_TXN_STATE, a coordinator that cannot be reached NETWORK_EXCEPTION.
  ``produce_error`` then turns the retriable coordinator errors into NOT_ENOUGH_REPLICAS,
  which every client retries without refreshing metadata (Kafka's ReplicaManager does so).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from dataclasses import dataclass, field

from .. import errors
from ..metadata.topics import TRANSACTION_STATE_TOPIC
from ..protocol.versions import ADD_PARTITIONS_TO_TXN_KEY
from ..txn import AddPartitionsAnswer
from ..types import TopicPartition
from .bridge import future_of
from .broker_channel import BrokerChannel, BrokerChannels
from .ports import TxnVerifierHost
from .tasks import BackgroundTasks

log = logging.getLogger("pylog.broker")

ADD_PARTITIONS_VERIFY_VERSION = 4  # the first version a broker may send verify_only in
VERIFY_RESPONSE_TIMEOUT_S = 30.0  # Kafka's request.timeout.ms for inter-broker requests
# Kafka's ReplicaManager: coordinator errors an older client may not retry become this one.
RETRIABLE_AS_NOT_ENOUGH_REPLICAS = frozenset({
    errors.Errors.NETWORK_EXCEPTION, errors.Errors.COORDINATOR_LOAD_IN_PROGRESS,
    errors.Errors.COORDINATOR_NOT_AVAILABLE, errors.Errors.NOT_COORDINATOR,
    errors.Errors.CONCURRENT_TRANSACTIONS,
})

Unverified = dict[TopicPartition, int]  # partition -> error code; empty: all verified


@dataclass(slots=True)
class _Verification:
    """One transaction's partitions waiting for their coordinator's answer."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...]
    answered: asyncio.Future = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())

    def resolve(self, unverified: Unverified) -> None:
        if not self.answered.done():
            self.answered.set_result(unverified)

    def fail_all(self, code: int) -> None:
        self.resolve(dict.fromkeys(self.partitions, code))


def produce_error(code: int) -> tuple[int, str]:
    """The error code and message a producer gets for an unverified partition."""
    if code == errors.Errors.INVALID_TXN_STATE:
        return code, "Partition was not added to the transaction"
    if code in RETRIABLE_AS_NOT_ENOUGH_REPLICAS:
        return errors.NOT_ENOUGH_REPLICAS, (
            "Unable to verify the partition has been added to the transaction. "
            f"Underlying error: {errors.error_name(code)}")
    return code, f"transaction verification failed: {errors.error_name(code)}"


class AddPartitionsToTxnManager:
    """Asks transaction coordinators whether partitions are in a producer's transaction."""

    def __init__(self, node: TxnVerifierHost) -> None:
        self.node = node
        self._waiting: dict[int, dict[str, _Verification]] = defaultdict(dict)  # by broker
        self._in_flight: set[int] = set()  # coordinator brokers with a request under way
        self._channels = BrokerChannels(node, BrokerChannel,
                                        f"add-partitions-{node.broker_id}")
        self._tasks = BackgroundTasks(log, "transaction verification")

    async def verify_transaction(self, transactional_id: str, producer_id: int,
                                 producer_epoch: int, partitions: list[TopicPartition]
                                 ) -> Unverified:
        """The partitions not in the producer's ongoing transaction, with their errors."""
        assert partitions, "nothing to verify"
        coordinator, error = self._coordinator_of(transactional_id)
        if coordinator is None:
            return dict.fromkeys(partitions, error)
        verification = _Verification(transactional_id, producer_id, producer_epoch,
                                     tuple(partitions))
        waiting = self._waiting[coordinator]
        previous = waiting.get(transactional_id)
        if previous is not None:
            if producer_epoch < previous.producer_epoch:
                return dict.fromkeys(partitions, errors.INVALID_PRODUCER_EPOCH)
            previous.fail_all(errors.INVALID_PRODUCER_EPOCH
                              if previous.producer_epoch < producer_epoch
                              else errors.Errors.NETWORK_EXCEPTION)
        waiting[transactional_id] = verification
        if coordinator not in self._in_flight:
            self._in_flight.add(coordinator)
            self._tasks.spawn(self._send_loop(coordinator))
        return await verification.answered

    def _coordinator_of(self, transactional_id: str) -> tuple[int | None, int]:
        """The live broker leading the id's ``__transaction_state`` partition, or the error."""
        topic = self.node.image.topics.get(TRANSACTION_STATE_TOPIC)
        core = self.node.txns.core
        if topic is None or len(topic.partitions) != core.transaction_state_partitions:
            return None, errors.Errors.COORDINATOR_NOT_AVAILABLE
        leader = topic.partitions[core.partition_for(transactional_id)].leader
        if leader < 0 or leader not in self.node.live_broker_ids():
            return None, errors.Errors.COORDINATOR_NOT_AVAILABLE
        return leader, errors.NONE

    async def _send_loop(self, coordinator: int) -> None:
        """One request at a time to ``coordinator`` until nothing waits for it."""
        try:
            while self._waiting.get(coordinator):
                batch = list(self._waiting.pop(coordinator).values())
                try:
                    await self._verify(coordinator, batch)
                except Exception:  # noqa: BLE001 - every waiting Produce needs its answer
                    log.exception("transaction verification with broker %d failed", coordinator)
                finally:
                    for verification in batch:  # answered ones keep their answer
                        verification.fail_all(errors.Errors.NETWORK_EXCEPTION)
        finally:
            self._in_flight.discard(coordinator)
            for verification in self._waiting.pop(coordinator, {}).values():
                verification.fail_all(errors.Errors.NETWORK_EXCEPTION)  # closing

    async def _verify(self, coordinator: int, batch: list[_Verification]) -> None:
        if coordinator == self.node.broker_id:
            await asyncio.gather(*(self._verify_local(v) for v in batch))
        else:
            await self._verify_remote(coordinator, batch)

    async def _verify_local(self, verification: _Verification) -> None:
        txns = self.node.txns
        answer = await future_of(txns.ask(lambda request_id: txns.core.add_partitions(
            verification.transactional_id, verification.producer_id,
            verification.producer_epoch, verification.partitions, self.node.now_ms(),
            request_id, verify_only=True, version=ADD_PARTITIONS_VERIFY_VERSION)))
        if answer is None:
            verification.fail_all(errors.NOT_COORDINATOR)
            return
        assert isinstance(answer, AddPartitionsAnswer), answer
        verification.resolve({tp: _for_producer(code) for tp, code in answer.errors.items()
                              if code != errors.NONE})

    async def _verify_remote(self, coordinator: int, batch: list[_Verification]) -> None:
        channel = self._channels.get(coordinator)
        if channel is None or self.node.isolated:
            return  # unreachable: every transaction of the batch gets NETWORK_EXCEPTION
        try:
            response = await channel.call(ADD_PARTITIONS_TO_TXN_KEY, ADD_PARTITIONS_VERIFY_VERSION,
                                          {"transactions": [_entry(v) for v in batch]},
                                          VERIFY_RESPONSE_TIMEOUT_S)
        except (OSError, asyncio.IncompleteReadError, TimeoutError) as error:
            log.info("AddPartitionsToTxn to broker %d failed: %s", coordinator,
                     str(error) or type(error).__name__)
            return  # every transaction of the batch: NETWORK_EXCEPTION
        _resolve(batch, response)

    def close(self) -> None:
        self._tasks.cancel_all()
        self._channels.close()


def _entry(verification: _Verification) -> dict:
    topics: dict[str, list[int]] = defaultdict(list)
    for topic, index in verification.partitions:
        topics[topic].append(index)
    return {"transactional_id": verification.transactional_id,
            "producer_id": verification.producer_id,
            "producer_epoch": verification.producer_epoch, "verify_only": True,
            "topics": [{"name": name, "partitions": indexes} for name, indexes in topics.items()]}


def _resolve(batch: list[_Verification], response) -> None:
    """Each transaction's unverified partitions from one AddPartitionsToTxn v4 answer."""
    if response.error_code != errors.NONE:
        code = int(response.error_code)
        if code == errors.Errors.CLUSTER_AUTHORIZATION_FAILED:  # not the producer's to see
            code = errors.Errors.INVALID_TXN_STATE
        for verification in batch:
            verification.fail_all(code)
        return
    by_id = {v.transactional_id: v for v in batch}
    for result in response.results_by_transaction:
        if result.transactional_id not in by_id:
            continue
        verification = by_id.pop(result.transactional_id)
        unverified = {}
        for topic in result.topic_results:
            for part in topic.results_by_partition:
                if part.partition_error_code != errors.NONE:
                    unverified[(topic.name, part.partition_index)] = _for_producer(
                        int(part.partition_error_code))
        verification.resolve(unverified)
    # A transaction the answer left out is not verified: _send_loop answers it NETWORK_EXCEPTION.


def _for_producer(code: int) -> int:
    """Producers expect INVALID_PRODUCER_EPOCH where the coordinator says PRODUCER_FENCED."""
    return errors.INVALID_PRODUCER_EPOCH if code == errors.Errors.PRODUCER_FENCED else code
