"""The messages voters exchange (KIP-595 with KIP-996's pre-vote), as plain values.

Each carries the sender's epoch: a voter that sees a larger epoch than its own moves to it
before doing anything else (a pre-vote request excepted: it only asks). The wire encoding is
the shell's business; the core sees these objects.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import Errors
from .log import Batch

# The errors a fetch answer carries, from the one error table.
NONE = Errors.NONE
FENCED_LEADER_EPOCH = Errors.FENCED_LEADER_EPOCH  # the fetcher is behind: a newer epoch exists
NOT_LEADER_OR_FOLLOWER = Errors.NOT_LEADER_OR_FOLLOWER  # asked a voter that does not lead
SNAPSHOT_NOT_FOUND = Errors.SNAPSHOT_NOT_FOUND  # the leader holds another snapshot by now
FETCH_ERRORS = frozenset({NONE, FENCED_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER, SNAPSHOT_NOT_FOUND})


@dataclass(frozen=True, slots=True)
class VoteRequest:
    """Vote for ``candidate_id`` in ``epoch``; a pre-vote asks whether one would (the epoch is
    the one the candidate would take, and no voter changes state for it)."""

    epoch: int
    candidate_id: int
    last_epoch: int  # the epoch of the candidate's last batch
    end_offset: int  # the candidate's log end offset
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class VoteResponse:
    epoch: int  # the voter's epoch
    granted: bool
    leader_id: int | None  # the leader the voter knows in its epoch
    pre_vote: bool
    proposed_epoch: int  # the request's epoch, so a stale answer is recognised


@dataclass(frozen=True, slots=True)
class BeginQuorumEpoch:
    """The new leader of ``epoch`` says so, so voters start fetching from it at once."""

    epoch: int
    leader_id: int


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    epoch: int  # the voter's epoch: larger than the request's if the sender is stale
    leader_id: int | None


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """A follower asks for the batches after ``fetch_offset``, which it holds up to, and tells
    the leader the epoch of its batch ending there (to detect a divergent log) and the high
    watermark it knows (so the leader answers at once when that is behind)."""

    epoch: int
    replica_id: int
    fetch_offset: int
    last_fetched_epoch: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class FetchResponse:
    epoch: int
    leader_id: int | None
    error: Errors
    fetch_offset: int  # the request's, so a stale answer is recognised
    high_watermark: int
    batches: tuple[Batch, ...] = ()
    diverging: tuple[int, int] | None = None  # (epoch, end offset) to truncate to first
    # (end offset, epoch) of the snapshot to fetch first: the fetch offset is below the
    # leader's log start, or the log diverges before it (KIP-630's SnapshotId)
    snapshot_id: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    """A follower asks for the snapshot a fetch answer named (KIP-630's FetchSnapshot)."""

    epoch: int
    replica_id: int
    snapshot_id: tuple[int, int]  # (end offset, epoch)


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    """The whole snapshot in one message (Kafka sends it in slices by position; the metadata
    image is small and the snapshot bound keeps it so), or SNAPSHOT_NOT_FOUND if the leader
    holds another one by now (the follower fetches again and is told which)."""

    epoch: int
    leader_id: int | None
    error: Errors
    snapshot_id: tuple[int, int]
    append_time_ms: int = 0
    records: tuple[bytes, ...] = ()


Message = (VoteRequest | VoteResponse | BeginQuorumEpoch | BeginQuorumEpochResponse
           | FetchRequest | FetchResponse | FetchSnapshotRequest | FetchSnapshotResponse)


@dataclass(frozen=True, slots=True)
class Send:
    """What the core asks the shell to deliver."""

    destination: int
    message: Message
