"""Transactions in the simulation: transactional producers, and the transaction invariants.

``TXN_CLIENTS`` producers, each with a transactional id of its own, run transactions one after
another as librdkafka's transactional producer does: find the id's coordinator (the leader of
its ``__transaction_state`` partition in some broker's image), InitProducerId, then for each
transaction AddPartitionsToTxn, an idempotent transactional batch to the partition's leader
(acks=all, sequences per partition and epoch), in some transactions AddOffsetsToTxn and a
TxnOffsetCommit of group ``TXN_GROUP`` (offsets only this client writes: its partition), and
EndTxn, committing three in four. An abortable error (a produce refused or unanswered) aborts;
a fatal one (fenced, an unknown outcome, a coordinator that stopped answering) makes the client
initialise again, which completes or aborts what was open (KIP-360). The requests reach the
shipped ``TxnCoordinatorRuntime`` and ``GroupCoordinatorRuntime`` in the broker core the
message arrives at; markers go from the coordinator's broker to each partition's leader.

Checked, against the logs as a read_committed consumer reads them (records of a producer's open
transaction held back until its COMMIT marker, dropped at its ABORT marker):

- all or nothing: a committed transaction's records are all visible; an aborted one's are none;
  one whose outcome the client never learnt is visible whole or not at all;
- the LSO never passes an open transaction: a leader's last stable offset is at most the first
  offset of any transaction still open in its log, at every heavy check;
- one live producer epoch per transactional id: InitProducerId never hands out the same
  (producer id, epoch) twice for an id, and once a coordinator handed out a newer one it accepts
  no AddPartitionsToTxn, AddOffsetsToTxn or EndTxn of an older one;
- after the final heal every transaction is decided, on the partitions (the LSO reaches the HW
  on every leader) and on the coordinators (each ``__transaction_state`` partition's leader has
  loaded it, and none of its ids is Ongoing, PrepareCommit or PrepareAbort or has a change
  still being appended: what a coordinator decided, it finished, failover or not), and the
  group's committed offset of each partition is the value of the last committed transaction
  that wrote it (or of a later one whose outcome the client never learnt).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from pylog_nb.broker.errors import Errors
from pylog_nb.broker.metadata.topics import TRANSACTION_STATE_TOPIC
from pylog_nb.broker.records.batch import iter_batches_decoded
from pylog_nb.broker.records.header import iter_batches
from pylog_nb.broker.storage.txn_index import decode_marker
from pylog_nb.broker.txn.metadata import TransactionState
from pylog_nb.broker.txn.records import partition_for as txn_partition_for

TXN_CLIENTS = 2
TXN_IDS = 2  # transactional ids: fewer than clients would make instances fence each other
TXN_CLIENT_BASE = 300  # client c listens at 300 + c
TXN_GROUP = "tg"
TXN_TIMEOUT_MS = 4_000  # transaction.timeout.ms: a stalled transaction is aborted
TXN_REQUEST_TIMEOUT_MS = 6_000
TXN_RETRY_MS = 100
TXN_PAUSE_MS = (50, 200, 500)  # between two transactions
NONE = 0
FENCED = {int(Errors.PRODUCER_FENCED), int(Errors.INVALID_PRODUCER_EPOCH)}
RETRIABLE = {int(Errors.NOT_COORDINATOR), int(Errors.COORDINATOR_LOAD_IN_PROGRESS),
             int(Errors.COORDINATOR_NOT_AVAILABLE), int(Errors.CONCURRENT_TRANSACTIONS)}
ABORTABLE_PRODUCE = {int(Errors.NOT_LEADER_OR_FOLLOWER), int(Errors.NOT_ENOUGH_REPLICAS),
                     int(Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND),
                     int(Errors.REQUEST_TIMED_OUT), int(Errors.UNKNOWN_TOPIC_OR_PARTITION),
                     int(Errors.FENCED_LEADER_EPOCH), int(Errors.UNKNOWN_LEADER_EPOCH)}


# The step each request is, and those that go to the transaction coordinator.
STEP_OF = {"txn_init": "init", "txn_add": "add", "txn_produce": "produce",
           "txn_add_offsets": "add_offsets", "txn_offset_commit": "offsets", "txn_end": "end"}
TO_TXN_COORDINATOR = {"txn_init", "txn_add", "txn_add_offsets", "txn_end"}
UNDECIDED = {TransactionState.ONGOING, TransactionState.PREPARE_COMMIT,
             TransactionState.PREPARE_ABORT}


class TxnViolation(AssertionError):
    pass


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise TxnViolation(message)


@dataclass
class Transaction:
    """One transaction as its client knows it."""

    transactional_id: str
    client_index: int
    producer_id: int
    producer_epoch: int
    partition: int
    values: list[bytes] = field(default_factory=list)  # written (acknowledged or not)
    acked: list[bytes] = field(default_factory=list)  # produce acknowledged
    offset_value: int | None = None  # the group offset it commits, if any
    outcome: str = "open"  # open, commit, abort, unknown


@dataclass
class TxnClient:
    index: int
    rng: random.Random
    step: str = "find"  # find, init, add, produce, add_offsets, offsets, end, pause
    coordinator: int | None = None
    producer_id: int = -1
    producer_epoch: int = -1
    sequences: dict[int, int] = field(default_factory=dict)  # partition -> next sequence
    txn: Transaction | None = None
    commit: bool = True
    in_flight: tuple[str, int, int] | None = None  # kind, seq, deadline
    next_ms: int = 0
    seq: int = 0
    reinit: bool = False  # the next step after find is InitProducerId
    bump_after_abort: bool = False  # a batch's fate is unknown: new epoch after the abort
    resume: str | None = None  # the step to take again once the coordinator is found

    @property
    def transactional_id(self) -> str:
        return f"tx-{self.index % TXN_IDS}"

    @property
    def address(self) -> int:
        return TXN_CLIENT_BASE + self.index


class TxnWorkload:
    """The transactional clients, driven by the simulation (``tick``, ``receive``).

    ``sim`` provides ``now_ms``, ``post``, ``brokers``, ``partition_count``,
    ``coordinator_of(group)``, ``next_txn_value()``, ``txn_coordinator_of(transactional_id)``,
    ``controller_partition(index, topic)`` and ``leads_for_controller(broker, topic, index)``."""

    def __init__(self, sim, rng: random.Random) -> None:
        self.sim = sim
        self.clients = [TxnClient(i, rng) for i in range(TXN_CLIENTS)]
        self.transactions: list[Transaction] = []
        self.epochs: dict[str, list[tuple[int, int]]] = {}  # id -> (pid, epoch) answered
        self.live: dict[str, tuple[int, int] | None] = {}  # id -> the newest one handed out
        self.marked: dict[int, int] = {}  # partition -> value of the last commit marked
        self.offset_values = 0
        self.stats: dict[str, int] = {}

    def count(self, key: str) -> None:
        self.stats[key] = self.stats.get(key, 0) + 1

    def next_ms(self) -> int:
        return min(c.in_flight[2] if c.in_flight else c.next_ms for c in self.clients)

    # == sending ==================================================================================

    def tick(self) -> None:
        now_ms = self.sim.now_ms
        for client in self.clients:
            if client.in_flight is not None:
                if now_ms >= client.in_flight[2]:
                    self.count("timeouts")
                    self._fatal(client, now_ms)
                continue
            if now_ms >= client.next_ms:
                self._act(client, now_ms)

    def _act(self, client: TxnClient, now_ms: int) -> None:
        if client.step == "find":
            client.coordinator = self.sim.txn_coordinator_of(client.transactional_id)
            if client.coordinator is None:
                client.next_ms = now_ms + TXN_RETRY_MS
                return
            client.step = ("init" if client.reinit or client.producer_id < 0
                           else client.resume or "add")
            client.resume = None
        getattr(self, f"_send_{client.step}")(client, now_ms)

    def _send(self, client: TxnClient, dst: int | None, kind: str, body: dict) -> None:
        if dst is None:
            client.next_ms = self.sim.now_ms + TXN_RETRY_MS
            return
        client.seq += 1
        client.in_flight = (kind, client.seq, self.sim.now_ms + TXN_REQUEST_TIMEOUT_MS)
        self.sim.post(client.address, dst, kind, {
            **body, "client_request": client.seq, "transactional_id": client.transactional_id,
            "producer_id": client.producer_id, "producer_epoch": client.producer_epoch})

    def _send_init(self, client: TxnClient, now_ms: int) -> None:
        self._send(client, client.coordinator, "txn_init", {"timeout_ms": TXN_TIMEOUT_MS})

    def _send_pause(self, client: TxnClient, now_ms: int) -> None:
        client.step = "add"
        self._send_add(client, now_ms)

    def _send_add(self, client: TxnClient, now_ms: int) -> None:
        if client.txn is None:
            partition = client.index % self.sim.partition_count
            client.txn = Transaction(client.transactional_id, client.index, client.producer_id,
                                     client.producer_epoch, partition)
            client.commit = client.rng.random() < 0.75
            self.transactions.append(client.txn)
        self._send(client, client.coordinator, "txn_add",
                   {"partitions": [client.txn.partition]})

    def _send_produce(self, client: TxnClient, now_ms: int) -> None:
        txn = client.txn
        assert txn is not None
        values = [self.sim.next_txn_value() for _ in range(client.rng.randint(1, 3))]
        txn.values += values
        leader = self.sim.leader_of(txn.partition)
        self._send(client, leader, "txn_produce", {
            "partition": txn.partition, "values": values,
            "sequence": client.sequences.get(txn.partition, 0)})

    def _send_add_offsets(self, client: TxnClient, now_ms: int) -> None:
        self._send(client, client.coordinator, "txn_add_offsets", {"group": TXN_GROUP})

    def _send_offsets(self, client: TxnClient, now_ms: int) -> None:
        txn = client.txn
        assert txn is not None
        if txn.offset_value is None:
            self.offset_values += 1
            txn.offset_value = self.offset_values
        self._send(client, self.sim.coordinator_of(TXN_GROUP), "txn_offset_commit",
                   {"group": TXN_GROUP, "offsets": {client.index: txn.offset_value}})

    def _send_end(self, client: TxnClient, now_ms: int) -> None:
        self._send(client, client.coordinator, "txn_end", {"committed": client.commit})

    # == answers ==================================================================================

    def receive(self, message) -> None:
        client = self.clients[message.dst - TXN_CLIENT_BASE]
        body = message.body
        if client.in_flight is None or client.in_flight[1] != body["client_request"]:
            return  # answered after it timed out
        kind = client.in_flight[0]
        client.in_flight = None
        now_ms = self.sim.now_ms
        code = int(body["error_code"])
        if code in RETRIABLE:  # the same step again, after looking for the coordinator
            client.resume = STEP_OF[kind]
            client.step = "find" if kind in TO_TXN_COORDINATOR else client.resume
            client.next_ms = now_ms + TXN_RETRY_MS
            return
        getattr(self, f"_on_{kind.removeprefix('txn_')}")(client, code, body, now_ms)

    def _on_init(self, client: TxnClient, code: int, body: dict, now_ms: int) -> None:
        if code in FENCED:  # this producer is fenced for good: a new instance starts afresh
            client.producer_id = client.producer_epoch = -1
            self.count("new_producers")
            client.next_ms = now_ms + TXN_RETRY_MS
            return
        if code != NONE:
            self._fatal(client, now_ms, f"init_{code}")
            return
        handle = (body["producer_id"], body["producer_epoch"])
        handed = self.epochs.setdefault(client.transactional_id, [])
        _check(handle not in handed,
               f"InitProducerId handed {client.transactional_id} {handle} twice")
        handed.append(handle)
        client.producer_id, client.producer_epoch = handle
        client.sequences.clear()
        client.reinit = False
        client.step, client.next_ms = "add", now_ms
        self.count("inits")

    def _on_add(self, client: TxnClient, code: int, body: dict, now_ms: int) -> None:
        if code != NONE:
            self._fatal(client, now_ms, f"add_{code}")
            return
        client.step, client.next_ms = "produce", now_ms

    def _on_produce(self, client: TxnClient, code: int, body: dict, now_ms: int) -> None:
        txn = client.txn
        assert txn is not None
        if code == NONE:
            client.sequences[txn.partition] = body["next_sequence"]
            txn.acked += body["values"]
            with_offsets = client.rng.random() < 0.5
            client.step = "add_offsets" if with_offsets else "end"
        elif code in ABORTABLE_PRODUCE:
            # Abortable, and whether the batch was written is unknown: abort, then bump the
            # epoch before the next batch (KIP-360), whose sequence could otherwise repeat the
            # unknown one's and be taken for its duplicate.
            client.commit = False
            client.bump_after_abort = True
            client.step = "end"
            self.count("abortable")
        else:
            self._fatal(client, now_ms, f"produce_{code}")
            return
        client.next_ms = now_ms

    def _on_add_offsets(self, client: TxnClient, code: int, body: dict, now_ms: int) -> None:
        if code != NONE:
            self._fatal(client, now_ms, f"add_offsets_{code}")
            return
        client.step, client.next_ms = "offsets", now_ms

    def _on_offset_commit(self, client: TxnClient, code: int, body: dict, now_ms: int) -> None:
        if code != NONE:
            self._fatal(client, now_ms, f"offset_commit_{code}")
            return
        client.step, client.next_ms = "end", now_ms

    def _on_end(self, client: TxnClient, code: int, body: dict, now_ms: int) -> None:
        txn = client.txn
        assert txn is not None
        if code != NONE:
            self._fatal(client, now_ms, f"end_{code}")
            return
        txn.outcome = "commit" if client.commit else "abort"
        self.count("committed" if client.commit else "aborted")
        client.txn = None
        client.step = "pause"
        client.next_ms = now_ms + client.rng.choice(TXN_PAUSE_MS)
        if client.bump_after_abort:
            client.bump_after_abort = False
            client.step, client.reinit = "find", True

    def _fatal(self, client: TxnClient, now_ms: int, reason: str = "timeout") -> None:
        """An outcome the client cannot know: initialise again (which ends what was open)."""
        self.count(f"fatal_{reason}")
        if client.txn is not None and client.txn.outcome == "open":
            client.txn.outcome = "unknown"
        client.txn = None
        client.in_flight = None
        client.resume = None
        client.step, client.reinit = "find", True
        client.next_ms = now_ms + TXN_RETRY_MS
        self.count("reinits")

    # == invariants ===============================================================================

    def on_coordinator_answer(self, kind: str, request: dict, error_code: int,
                              handle: tuple[int, int] | None = None) -> None:
        """A transaction coordinator answered (recorded when the broker answers): once it
        handed out a newer (producer id, epoch) for an id, it accepts nothing of an older one."""
        transactional_id = request["transactional_id"]
        if kind == "init" and error_code == NONE:
            self.live[transactional_id] = handle
        elif error_code == NONE and kind in ("add", "add_offsets", "end"):
            live = self.live.get(transactional_id)
            used = (request["producer_id"], request["producer_epoch"])
            _check(live == used, f"{transactional_id}: {kind} accepted for {used} after "
                                 f"InitProducerId handed out {live}")

    def on_offsets_marker(self, producer_id: int, producer_epoch: int, committed: bool) -> None:
        """A COMMIT marker of ``producer_id`` is on the group's ``__consumer_offsets``
        partition: the group coordinator applies its transaction's offsets now (or, still
        loading, once loaded)."""
        if not committed:
            return
        for txn in reversed(self.transactions):
            if (txn.producer_id, txn.producer_epoch) == (producer_id, producer_epoch) and (
                    txn.offset_value is not None):
                index = txn.client_index
                self.marked[index] = max(self.marked.get(index, -1), txn.offset_value)
                return

    def check_group_offsets(self, fetched: dict[int, int]) -> None:
        """The group's offsets, fetched from its loaded coordinator: at least the value of the
        last transaction whose COMMIT marker is on the offsets partition."""
        for index, value in self.marked.items():
            _check(fetched.get(index, -1) >= value,
                   f"{TXN_GROUP} offset of partition {index} is {fetched.get(index, -1)} after "
                   f"the COMMIT marker of the transaction that wrote {value}")
        self.count("group_offsets_checked")

    def check_open_transactions(self, partition_index: int, log, lso: int) -> None:
        """The LSO is at most the first offset of every transaction open in ``log``."""
        first_open = min(open_transactions(log).values(), default=None)
        _check(first_open is None or lso <= first_open,
               f"LSO {lso} of p{partition_index} passes a transaction open at {first_open}")

    def undecided(self) -> list[str]:
        """What the transaction coordinators have yet to decide or finish: a
        ``__transaction_state`` partition whose leader (the controllers' one) is not serving it
        loaded, or an id of it that is Ongoing, in PrepareCommit/PrepareAbort or has a change
        being appended. Empty once every coordinator finished what it started (the settle loop
        waits for that after the final heal)."""
        sim, found = self.sim, []
        runtimes = [b.core.txns for b in sim.brokers.values() if b is not None]
        count = runtimes[0].core.transaction_state_partitions if runtimes else 0
        for index in range(count):
            leader = sim.controller_partition(index, TRANSACTION_STATE_TOPIC).leader
            broker = sim.brokers.get(leader)
            if broker is None or not sim.leads_for_controller(broker, TRANSACTION_STATE_TOPIC,
                                                              index):
                found.append(f"{TRANSACTION_STATE_TOPIC}-{index}: no coordinator serves it")
                continue
            runtime = broker.core.txns
            if index in runtime.loading or not runtime.core.leads(index):
                found.append(f"{TRANSACTION_STATE_TOPIC}-{index}: b{leader} has not loaded it")
                continue
            for transactional_id, meta in sorted(runtime.core.transactions.items()):
                if meta.partition == index and (meta.pending is not None
                                                or meta.state in UNDECIDED):
                    found.append(
                        f"{transactional_id} ({meta.producer_id}, {meta.producer_epoch}) "
                        f"{meta.state.kafka_name} on b{leader}"
                        + (" with a change being appended" if meta.pending is not None else "")
                        + (f", markers unacknowledged on {sorted(meta.markers_pending)}"
                           if meta.markers_pending else ""))
        return found

    def check_final(self, visible: dict[int, set[bytes]], open_at_end: dict[int, dict],
                    group_offsets: dict[int, int]) -> None:
        """After the final heal: every transaction decided, all or nothing, the group's
        offsets those of the last committed transaction."""
        for index, opened in open_at_end.items():
            _check(not opened, f"p{index} still has open transactions after settling: {opened}")
        seen = set().union(*visible.values()) if visible else set()
        for txn in self.transactions:
            shown = [v for v in txn.values if v in seen]
            name = (f"{txn.transactional_id} ({txn.producer_id}, {txn.producer_epoch}) "
                    f"on p{txn.partition}")
            if txn.outcome == "commit":
                _check(set(txn.acked) <= seen,
                       f"committed transaction {name} lost {set(txn.acked) - seen}")
            elif txn.outcome == "abort":
                _check(not shown, f"aborted transaction {name} shows {shown}")
            elif shown:
                _check(set(txn.acked) <= seen,
                       f"transaction {name} shows {shown} but not {set(txn.acked) - seen}")
        self._check_offsets(group_offsets)

    def _check_offsets(self, group_offsets: dict[int, int]) -> None:
        for client in self.clients:
            txns = [t for t in self.transactions
                    if t.client_index == client.index
                    and t.offset_value is not None]
            last_committed = max((i for i, t in enumerate(txns) if t.outcome == "commit"),
                                 default=None)
            allowed = {-1} if last_committed is None else {txns[last_committed].offset_value}
            later = txns[last_committed + 1:] if last_committed is not None else txns
            allowed |= {t.offset_value for t in later if t.outcome in ("unknown", "open")}
            value = group_offsets.get(client.index, -1)
            _check(value in allowed,
                   f"{TXN_GROUP} offset of partition {client.index} is {value}; the last "
                   f"committed transaction wrote {sorted(v for v in allowed if v)}")


def open_transactions(log) -> dict[int, int]:
    """Producer id -> first offset of its transaction still open at the log's end (headers
    only, but for the markers: this runs at every heavy check)."""
    opened: dict[int, int] = {}
    for data in read_chunks(log):
        for pos, header in iter_batches(data):
            if not header.is_transactional:
                continue
            if not header.is_control:
                opened.setdefault(header.producer_id, header.base_offset)
                continue
            ((_, records),) = iter_batches_decoded(data[pos:pos + header.size_bytes])
            if records and decode_marker(records[0].key, records[0].value) is not None:
                opened.pop(header.producer_id, None)
    return opened


def committed_values(log) -> set[bytes]:
    """The values a read_committed consumer reads (transactions by their markers)."""
    visible: set[bytes] = set()
    pending: dict[int, list[bytes]] = {}
    for header, records in read_batches(log):
        if header.is_control:
            marker = decode_marker(records[0].key, records[0].value) if records else None
            held = pending.pop(header.producer_id, [])
            if marker is not None and marker.commit:
                visible.update(held)
        elif header.is_transactional:
            pending.setdefault(header.producer_id, []).extend(r.value for r in records)
        else:
            visible.update(r.value for r in records)
    return visible


READ_BYTES = 1 << 20


def read_chunks(log):
    """The bytes of ``log`` from its start to its end, in reads of whole batches."""
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, READ_BYTES, max_offset=log.log_end_offset).read_bytes()
        if not data:
            break
        last = None
        for _pos, header in iter_batches(data):
            last = header
        assert last is not None and last.next_offset > offset, (offset, last)
        yield data
        offset = last.next_offset


def read_batches(log):
    """Every batch of ``log`` from its start to its end, decoded."""
    for data in read_chunks(log):
        yield from iter_batches_decoded(data)


__all__ = ["TXN_CLIENT_BASE", "TxnWorkload", "committed_values", "open_transactions",
           "txn_partition_for"]
