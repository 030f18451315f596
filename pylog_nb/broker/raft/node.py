"""RaftNode: one voter of the metadata quorum, as a sans-IO state machine (Kafka's KafkaRaftClient).

Theory of operation. The node is fed clock ticks (``poll``), messages (``handle``), failed
requests (``request_failed``) and, on the leader, record batches to replicate (``propose``),
each with the current time; it returns the messages to send (``Send``). It owns a ``RaftLog``
and a ``QuorumStateStore`` and writes both before it says anything that depends on them.

Roles (KIP-595, with KIP-996's pre-vote):

- **unattached**: knows no leader in its epoch. When its election timeout passes it becomes
- **prospective**: asks every voter for a *pre-vote* (would you vote for me in epoch + 1?)
  without changing anyone's epoch; a voter says yes only if the prospective's log is at least as
  up to date as its own and it has no live leader. A majority of yeses makes it a
- **candidate**: epoch + 1, votes for itself (durably), asks for real votes. A majority makes
  it the **leader**; a timeout sends it back to prospective. Pre-vote is what keeps a voter cut
  off from the others from bumping the epoch again and again and deposing a healthy leader
  when it returns.
- **leader**: appends a control batch in its epoch (the LeaderChange marker), tells the voters
  (BeginQuorumEpoch), answers their fetches, and moves the high watermark (HW) to the largest
  offset a majority holds, once that includes its own epoch's first batch (Raft commits entries
  of older epochs only through one of its own). A leader that has not been fetched from by a
  majority for ``check_quorum_ms`` resigns (it may be the one cut off).
- **follower**: fetches from the leader (one fetch in flight; the leader parks it until there
  is data or the HW moves, up to ``fetch_max_wait_ms``), appends what it gets (durably), learns
  the HW, and truncates first when the leader says its log diverges (the leader answers with
  the end offset of the largest epoch the two logs share). No answer from the leader for
  ``fetch_timeout_ms`` makes it prospective; each follower waits a random 60-100% of it, so
  the survivors of a leader's crash seldom stand at the same moment and split the vote.

Snapshots (KIP-630). The state machine around the node (the quorum controller) hands it a
snapshot of its state at a committed batch boundary (``take_snapshot``); the log then starts
there (raft/log.py), and the snapshot id (end offset, epoch) stands for the batches it dropped,
in votes (last epoch, end offset) and in fetch positions. A follower whose fetch offset is below
the leader's log start, or whose log diverges in an epoch older than the leader's snapshot, is
answered with the snapshot id instead of batches; it asks for the snapshot (FetchSnapshot: the
whole snapshot in one message, metadata being small), installs it (its log then starts empty at
the snapshot's end offset, in its epoch; its HW moves there, a snapshot being committed), and
fetches on from there. The state machine sees the log start pass what it applied and reloads.
A restarted voter's HW starts at its log start.

Any message carrying a larger epoch than the node's (a pre-vote request excepted) first moves
the node to that epoch: as a follower if the message names the epoch's leader, else unattached.
A vote is granted at most once per epoch and only to a candidate whose log is at least as up to
date (by last epoch, then end offset), and the vote is written before it is sent.

The invariants the simulation checks after every step (tests/support/raft_simulation.py): one
leader per epoch, logs that share a batch (offset and epoch) share everything before it, every
committed batch is in the log of every later leader, and every voter applies the same
committed sequence.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from enum import Enum

from .log import READ_BATCHES_MAX, Batch, RaftLog
from .messages import (
    FENCED_LEADER_EPOCH,
    NONE,
    NOT_LEADER_OR_FOLLOWER,
    SNAPSHOT_NOT_FOUND,
    BeginQuorumEpoch,
    BeginQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    Send,
    VoteRequest,
    VoteResponse,
)
from .quorum_state import ElectionState, QuorumStateStore
from .snapshot import Snapshot

FETCH_TIMEOUT_JITTER_PCT = 40  # a follower's fetch timeout is 60-100% of the configured one


class Role(Enum):
    UNATTACHED = "unattached"
    PROSPECTIVE = "prospective"
    CANDIDATE = "candidate"
    FOLLOWER = "follower"
    LEADER = "leader"


@dataclass(frozen=True, slots=True)
class RaftConfig:
    """Timeouts, in ms. Kafka's defaults are 1000 (election) and 2000 (fetch); a lab wants a
    controller failover under 2 s, so the fetch timeout is 1000 here."""

    election_timeout_ms: int = 500  # plus a random share of itself, per election
    fetch_timeout_ms: int = 1_000  # a follower without an answer from its leader this long
    fetch_max_wait_ms: int = 250  # a leader parks a fetch that long when it has nothing new
    request_timeout_ms: int = 500  # a fetch unanswered this long (beyond the parking) is resent
    begin_quorum_retry_ms: int = 250  # BeginQuorumEpoch resent to voters not fetching yet
    pre_vote_retry_ms: int = 100  # a prospective asks the voters not granting again
    fetch_batches_max: int = READ_BATCHES_MAX  # batches in one fetch answer

    @property
    def check_quorum_ms(self) -> int:
        """A leader not fetched from by a majority for this long resigns."""
        return self.fetch_timeout_ms * 3 // 2

    def __post_init__(self) -> None:
        assert 0 < self.fetch_max_wait_ms < self.fetch_timeout_ms, self
        assert 0 < self.election_timeout_ms and 0 < self.begin_quorum_retry_ms, self
        assert 0 < self.pre_vote_retry_ms < self.election_timeout_ms, self
        assert 0 < self.fetch_batches_max <= READ_BATCHES_MAX, self


class NotLeaderError(Exception):
    """``propose`` on a voter that does not lead; ``leader_id`` is the leader it knows."""

    def __init__(self, node_id: int, leader_id: int | None, epoch: int) -> None:
        super().__init__(f"voter {node_id} does not lead epoch {epoch} "
                         f"(leader: {'unknown' if leader_id is None else leader_id})")
        self.leader_id = leader_id
        self.epoch = epoch


@dataclass(slots=True)
class _ParkedFetch:
    request: FetchRequest
    until_ms: int


class RaftNode:
    """One voter; see the module docstring."""

    def __init__(self, node_id: int, voters: frozenset[int], log: RaftLog,
                 store: QuorumStateStore, now_ms: int, *, config: RaftConfig | None = None,
                 rng: random.Random | None = None) -> None:
        assert node_id in voters, (node_id, voters)
        self.node_id = node_id
        self.voters = frozenset(voters)
        self.log = log
        self.store = store
        self.config = config or RaftConfig()
        self.rng = rng or random.Random()
        self.state = store.read()
        self.high_watermark = log.start_offset  # a snapshot holds only committed state
        self.role = Role.UNATTACHED
        self._deadline_ms = 0  # election (unattached, prospective, candidate) or fetch timeout
        self._pre_vote_retry_ms = 0  # prospective: when to ask the voters not granting again
        self._granted: set[int] = set()  # pre-votes or votes, for this round
        self._rejected: set[int] = set()
        self._fetch_sent_ms: int | None = None  # follower: the fetch in flight
        self._snapshot_wanted: tuple[int, int] | None = None  # follower: FetchSnapshot asked
        self._epoch_start_offset = 0  # leader: where its epoch's first batch starts
        self._replica_end: dict[int, int] = {}  # leader: each voter's fetch offset
        self._replica_seen_ms: dict[int, int] = {}  # leader: each voter's last fetch
        self._begin_sent_ms: dict[int, int] = {}  # leader: BeginQuorumEpoch last sent
        self._parked: dict[int, _ParkedFetch] = {}  # leader: fetches waiting for data
        if self.state.leader_id is not None and self.state.leader_id != node_id:
            self._become_follower(self.state.epoch, self.state.leader_id, now_ms, persist=False)
        else:  # a leader that restarts has lost its followers' state: it resigns
            self._become_unattached(self.state.epoch, now_ms, persist=False)

    # -- what the outside sees --------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def leader_id(self) -> int | None:
        """The leader this voter knows in its epoch: itself, the one it follows, or None."""
        if self.role is Role.LEADER:
            return self.node_id
        return self.state.leader_id if self.role is Role.FOLLOWER else None

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    @property
    def epoch_start_end(self) -> int:
        """Leader: the end of its epoch-start batch; once committed, so is all before it."""
        return self._epoch_start_offset + 1

    def follower_end_offsets(self) -> dict[int, int]:
        """Leader: the log end of each voter that has fetched in this epoch (its own: the log
        end); a voter not heard from is left out, its log end unknown."""
        return {**self._replica_end, self.node_id: self.log.end_offset}

    def committed(self, from_offset: int) -> list[Batch]:
        """Batches from ``from_offset`` (a batch boundary) that are wholly below the HW."""
        return [b for b in self.log.read(from_offset) if b.end_offset <= self.high_watermark]

    def take_snapshot(self, end_offset: int, records: list[bytes]) -> None:
        """The state machine's state up to ``end_offset`` (a committed batch boundary past the
        log start), as ``records``: made the newest snapshot; the log drops what it covers."""
        assert self.log.start_offset < end_offset <= self.high_watermark, (
            f"voter {self.node_id}: a snapshot at {end_offset} outside "
            f"({self.log.start_offset}, HW {self.high_watermark}]")
        last = self.log.batch_ending_at(end_offset)
        assert last is not None, f"offset {end_offset} is not a batch boundary"
        self.log.take_snapshot(Snapshot(end_offset, last.epoch, last.append_time_ms,
                                        tuple(records)))
        assert self.log.start_offset <= self.high_watermark <= self.log.end_offset

    def propose(self, records: list[bytes], now_ms: int) -> tuple[int, list[Send]]:
        """Append ``records`` as one batch (leader only); the offset the HW must pass for them to
        be committed, and the messages to send."""
        if self.role is not Role.LEADER:
            raise NotLeaderError(self.node_id, self.state.leader_id, self.epoch)
        batch = Batch(self.log.end_offset, self.epoch, tuple(records), False, max(0, now_ms))
        self.log.append(batch)
        return batch.end_offset, self._after_leader_change(now_ms, new_data=True)

    # -- time ------------------------------------------------------------------------------------

    def poll(self, now_ms: int) -> list[Send]:
        """Fire whatever timer is due."""
        if self.role is Role.LEADER:
            return self._poll_leader(now_ms)
        if self.role is Role.FOLLOWER:
            if now_ms >= self._deadline_ms:
                return self._become_prospective(now_ms)
            return self._maybe_fetch(now_ms)
        if now_ms >= self._deadline_ms:  # unattached, prospective, candidate
            return self._become_prospective(now_ms)
        if self.role is Role.PROSPECTIVE and now_ms >= self._pre_vote_retry_ms:
            return self._ask_pre_votes(now_ms)
        return []

    def request_failed(self, destination: int, message: Message, now_ms: int) -> list[Send]:
        """The shell could not deliver ``message`` or its answer did not come in time."""
        if isinstance(message, FetchRequest | FetchSnapshotRequest) and (
                self.role is Role.FOLLOWER):
            self._fetch_sent_ms = None
        return []

    # -- messages --------------------------------------------------------------------------------

    def handle(self, sender: int, message: Message, now_ms: int) -> list[Send]:
        """React to ``message`` from voter ``sender``."""
        if sender not in self.voters:
            return []  # observers are served by the controller's own metadata path
        out: list[Send] = []
        if message.epoch > self.epoch and not _is_pre_vote_request(message):
            out += self._move_to_epoch(message, now_ms)
        return out + self._dispatch(sender, message, now_ms)

    def _dispatch(self, sender: int, message: Message, now_ms: int) -> list[Send]:
        if isinstance(message, VoteRequest):
            return self._on_vote_request(sender, message, now_ms)
        if isinstance(message, VoteResponse):
            return self._on_vote_response(sender, message, now_ms)
        if isinstance(message, BeginQuorumEpoch):
            return self._on_begin_quorum_epoch(sender, message, now_ms)
        if isinstance(message, FetchRequest):
            return self._on_fetch_request(sender, message, now_ms)
        if isinstance(message, FetchResponse):
            return self._on_fetch_response(sender, message, now_ms)
        if isinstance(message, FetchSnapshotRequest):
            return self._on_fetch_snapshot_request(sender, message, now_ms)
        if isinstance(message, FetchSnapshotResponse):
            return self._on_fetch_snapshot_response(sender, message, now_ms)
        return []  # BeginQuorumEpochResponse: a larger epoch was handled on arrival

    def _move_to_epoch(self, message: Message, now_ms: int) -> list[Send]:
        leader = _leader_named(message)
        if leader is not None and leader != self.node_id:
            return self._become_follower(message.epoch, leader, now_ms)
        return self._become_unattached(message.epoch, now_ms)

    def _on_vote_request(self, sender: int, request: VoteRequest, now_ms: int) -> list[Send]:
        up_to_date = (request.last_epoch, request.end_offset) >= (self.log.last_epoch,
                                                                  self.log.end_offset)
        if request.pre_vote:
            granted = request.epoch > self.epoch and up_to_date and not self._has_live_leader(
                now_ms)
        else:
            voted = self.state.voted_for
            granted = (request.epoch == self.epoch and up_to_date
                       and voted in (None, request.candidate_id)
                       and self.role is not Role.LEADER
                       and not (self.role is Role.FOLLOWER and voted != request.candidate_id))
            if granted and self.state.voted_for is None:
                self._persist(ElectionState(self.epoch, request.candidate_id, None))
                self._deadline_ms = now_ms + self._election_timeout_ms()
        return [Send(sender, VoteResponse(self.epoch, granted, self.leader_id,
                                          request.pre_vote, request.epoch))]

    def _has_live_leader(self, now_ms: int) -> bool:
        """Whether this voter leads or follows a leader it heard from within the fetch
        timeout: then it refuses pre-votes, so a returning voter cannot depose that leader."""
        return self.role is Role.LEADER or (self.role is Role.FOLLOWER
                                            and now_ms < self._deadline_ms)

    def _on_vote_response(self, sender: int, response: VoteResponse, now_ms: int) -> list[Send]:
        if response.pre_vote:
            if self.role is not Role.PROSPECTIVE or response.proposed_epoch != self.epoch + 1:
                return []
        elif self.role is not Role.CANDIDATE or response.epoch != self.epoch:
            return []
        if response.granted:
            self._granted.add(sender)
            self._rejected.discard(sender)  # a pre-vote asked again: only the last answer counts
        else:
            self._rejected.add(sender)
        if len(self._granted) >= self.majority:
            return (self._become_candidate(now_ms) if response.pre_vote
                    else self._become_leader(now_ms))
        if response.pre_vote and len(self._rejected) >= self.majority:
            if response.leader_id not in (None, self.node_id) and response.epoch == self.epoch:
                return self._become_follower(self.epoch, response.leader_id, now_ms)
            return self._become_unattached(self.epoch, now_ms)
        return []

    def _on_begin_quorum_epoch(self, sender: int, request: BeginQuorumEpoch,
                               now_ms: int) -> list[Send]:
        out = []
        if request.epoch == self.epoch and self.role is not Role.FOLLOWER:
            assert self.role is not Role.LEADER, (
                f"voters {self.node_id} and {request.leader_id} both lead epoch {self.epoch}")
            out = self._become_follower(self.epoch, request.leader_id, now_ms)  # its first fetch
        return [Send(sender, BeginQuorumEpochResponse(self.epoch, self.leader_id)), *out]

    # -- the leader ------------------------------------------------------------------------------

    def _on_fetch_request(self, sender: int, request: FetchRequest, now_ms: int) -> list[Send]:
        if self.role is not Role.LEADER or request.epoch != self.epoch:
            error = FENCED_LEADER_EPOCH if request.epoch < self.epoch else NOT_LEADER_OR_FOLLOWER
            return [Send(sender, FetchResponse(self.epoch, self.leader_id, error,
                                               request.fetch_offset, self.high_watermark))]
        parked = self._parked.get(sender)
        if parked is not None and request.fetch_offset < parked.request.fetch_offset:
            return []  # a late duplicate of an older fetch: the parked one is the follower's
        matches = (request.fetch_offset <= self.log.end_offset and self.log.epoch_ending_at(
            request.fetch_offset) == request.last_fetched_epoch)
        if request.fetch_offset < self.log.start_offset or (
                not matches and request.last_fetched_epoch < self.log.start_epoch):
            self._replica_seen_ms[sender] = now_ms  # alive, if far behind
            return [self._answer(sender, request)]
        if not matches:
            diverging = self.log.end_offset_for_epoch(request.last_fetched_epoch)
            return [Send(sender, FetchResponse(self.epoch, self.node_id, NONE,
                                               request.fetch_offset, self.high_watermark,
                                               diverging=diverging))]
        self._replica_end[sender] = request.fetch_offset
        self._replica_seen_ms[sender] = now_ms
        self._parked.pop(sender, None)
        out = self._advance_high_watermark(now_ms)
        if request.fetch_offset < self.log.end_offset or (
                request.high_watermark < self.high_watermark):
            return out + [self._answer(sender, request)]
        self._parked[sender] = _ParkedFetch(request, now_ms + self.config.fetch_max_wait_ms)
        return out

    def _answer(self, sender: int, request: FetchRequest) -> Send:
        if request.fetch_offset < self.log.start_offset or (
                request.last_fetched_epoch < self.log.start_epoch):
            assert self.log.snapshot is not None
            return Send(sender, FetchResponse(self.epoch, self.node_id, NONE,
                                              request.fetch_offset, self.high_watermark,
                                              snapshot_id=self.log.snapshot.snapshot_id))
        batches = tuple(self.log.read(request.fetch_offset, self.config.fetch_batches_max))
        return Send(sender, FetchResponse(self.epoch, self.node_id, NONE, request.fetch_offset,
                                          self.high_watermark, batches))

    def _on_fetch_snapshot_request(self, sender: int, request: FetchSnapshotRequest,
                                   now_ms: int) -> list[Send]:
        if self.role is not Role.LEADER or request.epoch != self.epoch:
            error = FENCED_LEADER_EPOCH if request.epoch < self.epoch else NOT_LEADER_OR_FOLLOWER
            return [Send(sender, FetchSnapshotResponse(self.epoch, self.leader_id, error,
                                                       request.snapshot_id))]
        snapshot = self.log.snapshot
        if snapshot is None or snapshot.snapshot_id != request.snapshot_id:
            return [Send(sender, FetchSnapshotResponse(self.epoch, self.node_id,
                                                       SNAPSHOT_NOT_FOUND, request.snapshot_id))]
        self._replica_seen_ms[sender] = now_ms
        return [Send(sender, FetchSnapshotResponse(self.epoch, self.node_id, NONE,
                                                   snapshot.snapshot_id, snapshot.append_time_ms,
                                                   snapshot.records))]

    def _advance_high_watermark(self, now_ms: int) -> list[Send]:
        ends = sorted([self.log.end_offset, *(self._replica_end.get(v, 0) for v in self.voters
                                              if v != self.node_id)], reverse=True)
        candidate = ends[self.majority - 1]
        if candidate <= self._epoch_start_offset or candidate <= self.high_watermark:
            return []
        self.high_watermark = candidate
        return self._answer_parked(now_ms, new_data=False)

    def _answer_parked(self, now_ms: int, new_data: bool) -> list[Send]:
        """Parked fetches that can be answered now: all of them on new data; on a HW move,
        those that know an older HW; on ``poll``, those that waited long enough."""
        due = [replica for replica, parked in self._parked.items()
               if new_data or parked.request.high_watermark < self.high_watermark
               or now_ms >= parked.until_ms]
        return [self._answer(replica, self._parked.pop(replica).request) for replica in due]

    def _after_leader_change(self, now_ms: int, new_data: bool) -> list[Send]:
        return self._advance_high_watermark(now_ms) + self._answer_parked(now_ms, new_data)

    def _poll_leader(self, now_ms: int) -> list[Send]:
        alive = 1 + sum(1 for v in self.voters if v != self.node_id
                        and now_ms - self._replica_seen_ms[v] < self.config.check_quorum_ms)
        if alive < self.majority:  # cut off from the majority, or they from us: step aside
            return self._become_unattached(self.epoch, now_ms)
        out = self._answer_parked(now_ms, new_data=False)
        for voter in self.voters - {self.node_id}:
            if voter not in self._replica_end and (
                    now_ms - self._begin_sent_ms.get(voter, -10**12)
                    >= self.config.begin_quorum_retry_ms):
                self._begin_sent_ms[voter] = now_ms
                out.append(Send(voter, BeginQuorumEpoch(self.epoch, self.node_id)))
        return out

    # -- the follower ----------------------------------------------------------------------------

    def _maybe_fetch(self, now_ms: int) -> list[Send]:
        in_flight_ms = self.config.fetch_max_wait_ms + self.config.request_timeout_ms
        if self._fetch_sent_ms is not None and now_ms - self._fetch_sent_ms < in_flight_ms:
            return []
        self._fetch_sent_ms = now_ms
        offset = self.log.end_offset
        epoch = self.log.epoch_ending_at(offset)
        leader = self.state.leader_id
        assert epoch is not None and leader is not None, (epoch, leader)
        return [Send(leader, FetchRequest(
            self.epoch, self.node_id, offset, epoch, self.high_watermark))]

    def _on_fetch_response(self, sender: int, response: FetchResponse,
                           now_ms: int) -> list[Send]:
        if (self.role is not Role.FOLLOWER or response.epoch != self.epoch
                or sender != self.state.leader_id):
            if response.epoch == self.epoch and response.leader_id is not None and (
                    self.role in (Role.UNATTACHED, Role.PROSPECTIVE, Role.CANDIDATE)
                    and response.leader_id != self.node_id):
                return self._become_follower(self.epoch, response.leader_id, now_ms)
            return []
        if response.fetch_offset != self.log.end_offset:
            return []  # an answer to an older fetch (duplicated or delayed): the next one counts
        self._fetch_sent_ms = None
        if response.error != NONE:  # our leader no longer leads this epoch
            return self._become_unattached(self.epoch, now_ms)
        self._deadline_ms = self._fetch_deadline_ms(now_ms)
        if response.diverging is not None:  # the HW waits for an answer that finds a match
            self._truncate(response.diverging)
            return self._maybe_fetch(now_ms)
        if response.snapshot_id is not None:  # too far behind: the snapshot first
            self._fetch_sent_ms = now_ms
            self._snapshot_wanted = response.snapshot_id
            return [Send(sender, FetchSnapshotRequest(self.epoch, self.node_id,
                                                      response.snapshot_id))]
        for batch in response.batches:  # the leader matched our log up to the fetch offset
            if batch.base_offset == self.log.end_offset:
                self.log.append(batch)
        self.high_watermark = max(self.high_watermark,
                                  min(response.high_watermark, self.log.end_offset))
        return self._maybe_fetch(now_ms)

    def _on_fetch_snapshot_response(self, sender: int, response: FetchSnapshotResponse,
                                    now_ms: int) -> list[Send]:
        if (self.role is not Role.FOLLOWER or response.epoch != self.epoch
                or sender != self.state.leader_id
                or response.snapshot_id != self._snapshot_wanted):
            return []  # stale, duplicated, or from another epoch (handled on arrival)
        self._snapshot_wanted = None
        self._fetch_sent_ms = None
        if response.error == SNAPSHOT_NOT_FOUND:  # a newer one: the next fetch names it
            return self._maybe_fetch(now_ms)
        if response.error != NONE:
            return self._become_unattached(self.epoch, now_ms)
        self._deadline_ms = self._fetch_deadline_ms(now_ms)
        end_offset, epoch = response.snapshot_id
        if end_offset > self.high_watermark:  # else what it covers is here and committed
            self.log.install_snapshot(Snapshot(end_offset, epoch, response.append_time_ms,
                                               response.records))
            self.high_watermark = end_offset  # a snapshot holds only committed state
        assert self.log.start_offset <= self.high_watermark <= self.log.end_offset, (
            self.log.start_offset, self.high_watermark, self.log.end_offset)
        return self._maybe_fetch(now_ms)

    def _truncate(self, diverging: tuple[int, int]) -> None:
        """Cut the log back towards where it matches the leader's, never below the HW
        (committed batches never diverge). ``diverging`` is the leader's largest epoch up to our
        last one and where it ends. If we hold that epoch too, the logs match up to the nearer
        of the two ends; if not, up to the end of our own largest epoch below it at most, and
        the next fetch asks again from there (Kafka's follower does the same)."""
        epoch, leader_end = diverging
        own_epoch, own_end = self.log.end_offset_for_epoch(epoch)
        target = min(own_end, leader_end) if own_epoch == epoch else own_end
        assert target >= self.log.start_offset, (
            f"voter {self.node_id} would truncate into its snapshot (committed) at "
            f"{self.log.start_offset} to {target}")
        boundary = max((b.end_offset for b in self.log.batches() if b.end_offset <= target),
                       default=self.log.start_offset)
        assert boundary >= self.high_watermark, (
            f"voter {self.node_id} would truncate committed offsets {boundary} to "
            f"{self.high_watermark}")
        self.log.truncate_to(boundary)

    # -- transitions -----------------------------------------------------------------------------

    def _persist(self, state: ElectionState) -> None:
        assert state.epoch >= self.state.epoch, (state, self.state)
        assert state.epoch > self.state.epoch or self.state.voted_for in (None, state.voted_for), (
            f"voter {self.node_id} would vote twice in epoch {state.epoch}")
        if state != self.state:
            self.store.write(state)
        self.state = state

    def _fetch_deadline_ms(self, now_ms: int) -> int:
        timeout = self.config.fetch_timeout_ms
        return now_ms + timeout - self.rng.randrange(timeout * FETCH_TIMEOUT_JITTER_PCT // 100)

    def _election_timeout_ms(self) -> int:
        timeout = self.config.election_timeout_ms
        return timeout + self.rng.randrange(timeout)

    def _reset_role(self, role: Role) -> None:
        self.role = role
        self._granted, self._rejected = set(), set()
        self._fetch_sent_ms = None
        self._snapshot_wanted = None
        self._parked.clear()
        self._replica_end.clear()
        self._replica_seen_ms.clear()
        self._begin_sent_ms.clear()

    def _become_unattached(self, epoch: int, now_ms: int, persist: bool = True) -> list[Send]:
        voted = self.state.voted_for if epoch == self.epoch else None
        if persist:
            self._persist(ElectionState(epoch, voted, None))
        self._reset_role(Role.UNATTACHED)
        alone = self.voters == {self.node_id}  # a quorum of one elects itself at once
        self._deadline_ms = now_ms + (0 if alone else self._election_timeout_ms())
        return []

    def _become_follower(self, epoch: int, leader_id: int, now_ms: int,
                         persist: bool = True) -> list[Send]:
        assert leader_id != self.node_id
        voted = self.state.voted_for if epoch == self.epoch else None
        if persist:
            self._persist(ElectionState(epoch, voted, leader_id))
        self._reset_role(Role.FOLLOWER)
        self._deadline_ms = self._fetch_deadline_ms(now_ms)
        return self._maybe_fetch(now_ms)

    def _become_prospective(self, now_ms: int) -> list[Send]:
        self._reset_role(Role.PROSPECTIVE)
        self._granted.add(self.node_id)
        self._deadline_ms = now_ms + self._election_timeout_ms()
        if len(self._granted) >= self.majority:
            return self._become_candidate(now_ms)
        return self._ask_pre_votes(now_ms)

    def _ask_pre_votes(self, now_ms: int) -> list[Send]:
        """Ask every voter that has not granted a pre-vote. Asked again every
        ``pre_vote_retry_ms``: a voter that still heard from the old leader a moment ago says no
        at first, and its yes, once its own fetch timeout passes, must not wait for a whole new
        election timeout. Pre-votes change no epoch, so asking often disturbs nobody."""
        self._pre_vote_retry_ms = now_ms + self.config.pre_vote_retry_ms
        request = VoteRequest(self.epoch + 1, self.node_id, self.log.last_epoch,
                              self.log.end_offset, pre_vote=True)
        return [Send(voter, request) for voter in sorted(self.voters - self._granted)]

    def _become_candidate(self, now_ms: int) -> list[Send]:
        self._persist(ElectionState(self.epoch + 1, self.node_id, None))
        self._reset_role(Role.CANDIDATE)
        self._granted.add(self.node_id)
        self._deadline_ms = now_ms + self._election_timeout_ms()
        if len(self._granted) >= self.majority:
            return self._become_leader(now_ms)
        request = VoteRequest(self.epoch, self.node_id, self.log.last_epoch, self.log.end_offset)
        return [Send(voter, request) for voter in sorted(self.voters - {self.node_id})]

    def _become_leader(self, now_ms: int) -> list[Send]:
        self._persist(ElectionState(self.epoch, self.node_id, self.node_id))
        self._reset_role(Role.LEADER)
        for voter in self.voters - {self.node_id}:
            self._replica_seen_ms[voter] = now_ms  # a grace period: check quorum starts now
        marker = json.dumps({"leader_id": self.node_id, "voters": sorted(self.voters)})
        self._epoch_start_offset = self.log.end_offset
        self.log.append(Batch(self._epoch_start_offset, self.epoch, (marker.encode(),),
                              control=True, append_time_ms=max(0, now_ms)))
        return self._after_leader_change(now_ms, new_data=True) + self._poll_leader(now_ms)


def _is_pre_vote_request(message: Message) -> bool:
    return isinstance(message, VoteRequest) and message.pre_vote


def _leader_named(message: Message) -> int | None:
    """The leader of the message's epoch, if the message says who it is."""
    if isinstance(message, BeginQuorumEpoch):
        return message.leader_id
    if isinstance(message, FetchResponse | VoteResponse | BeginQuorumEpochResponse
                  | FetchSnapshotResponse):
        return message.leader_id
    return None
